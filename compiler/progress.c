/*
 * progress.c: progress lines for jobs (fetches now, executor steps later).
 *
 * Owns the job table and the output stream's cursor state; borrows the
 * stream. Jobs are numbered in begin order and kept until close (a build has
 * tens of them, not millions).
 *
 * Job states:  ACTIVE --progress_update------------> ACTIVE
 *              ACTIVE --progress_end / _fail--------> ENDED   (final line printed)
 *
 * tty: the active jobs occupy the last drawn_lines lines of the terminal; a
 * redraw moves the cursor up that many lines, prints lines that became
 * permanent (notes, final lines) and then the active jobs again. Lines are cut
 * to the terminal width so none wraps, which would break the cursor count.
 * Redraws are throttled to 10 per second; plain lines to one per job every
 * 2 s; json progress events to one per job per second. Begin, end, fail and
 * note are never throttled.
 */
#include "compiler/progress.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "common/buf.h"

#define NS 1000000000LL
#define TTY_INTERVAL_NS (NS / 10)  /* redraws: smooth to the eye, cheap over ssh */
#define PLAIN_INTERVAL_NS (2 * NS) /* CI logs: a line per job every 2 s is readable */
#define JSON_INTERVAL_NS NS
#define RATE_MIN_NS (NS / 2) /* before this, a rate is mostly noise */
#define LINE_MAX 1024

struct job {
    int id;           /* #id, from 1 */
    char *verb;       /* owned: "fetch" */
    char *name;       /* owned: URL or path */
    uint64_t done;    /* bytes */
    uint64_t total;   /* bytes, 0 when unknown */
    uint64_t base;    /* done at the first update (resumed bytes do not count in the rate) */
    int64_t start_ns; /* at begin */
    int64_t base_ns;  /* at the first update */
    int64_t last_ns;  /* last plain or json progress line */
    int updated;      /* nonzero once progress_update was called */
    int ended;        /* nonzero after end or fail */
};

struct progress {
    FILE *out;               /* borrowed */
    enum progress_mode mode; /* resolved: never AUTO */
    pthread_mutex_t mu;      /* guards everything below */
    progress_clock_fn clock; /* monotonic ns */
    void *clock_arg;         /* for clock */
    int width;               /* tty columns */
    struct job *jobs;        /* owned: jobs[id - 1] */
    size_t n_jobs, cap_jobs; /* used, allocated */
    struct mf_buf pending;   /* tty: permanent lines not yet printed */
    int drawn_lines;         /* tty: active lines currently on screen */
    int64_t last_draw_ns;    /* tty: last redraw */
};

/* ---- formatting ------------------------------------------------------------------- */

void progress_fmt_bytes(uint64_t n, char *buf, size_t cap)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    double v = (double)n;
    int u = 0;
    while (v >= 1024 && u < 5) {
        v /= 1024;
        u++;
    }
    if (u == 0)
        snprintf(buf, cap, "%" PRIu64 " B", n);
    else
        snprintf(buf, cap, v < 10 ? "%.1f %s" : "%.0f %s", v, units[u]);
}

void progress_fmt_rate(double bps, char *buf, size_t cap)
{
    static const char *const units[] = {"B/s", "kB/s", "MB/s", "GB/s", "TB/s"};
    int u = 0;
    while (bps >= 1000 && u < 4) {
        bps /= 1000;
        u++;
    }
    snprintf(buf, cap, bps < 10 && u > 0 ? "%.1f %s" : "%.0f %s", bps, units[u]);
}

static void fmt_duration(double s, char *buf, size_t cap)
{
    long t = (long)(s + 0.5);
    if (t < 60)
        snprintf(buf, cap, "%lds", t);
    else if (t < 3600)
        snprintf(buf, cap, "%ldm%02lds", t / 60, t % 60);
    else
        snprintf(buf, cap, "%ldh%02ldm", t / 3600, (t % 3600) / 60);
}

/* Bytes per second since the first update, or 0 while too early to tell. */
static double job_rate(const struct job *j, int64_t now)
{
    int64_t dt = now - j->base_ns;
    if (!j->updated || dt < RATE_MIN_NS || j->done < j->base)
        return 0;
    return (double)(j->done - j->base) * NS / (double)dt;
}

/* "1.2 GiB / 4.6 GiB 310 MB/s ETA 11s" (parts omitted when unknown). */
static void fmt_amounts(const struct job *j, int64_t now, int eta, char *buf, size_t cap)
{
    char done[32], total[32], rate[32] = "", left[32] = "";
    progress_fmt_bytes(j->done, done, sizeof done);
    progress_fmt_bytes(j->total, total, sizeof total);
    double r = job_rate(j, now);
    if (r > 0)
        progress_fmt_rate(r, rate, sizeof rate);
    if (eta && r > 0 && j->total > j->done)
        fmt_duration((double)(j->total - j->done) / r, left, sizeof left);
    snprintf(buf, cap, "%s%s%s%s%s%s%s", done, j->total ? " / " : "", j->total ? total : "",
             rate[0] ? " " : "", rate, left[0] ? " ETA " : "", left);
}

/* ---- lifecycle -------------------------------------------------------------------- */

static int64_t mono_ns(void *arg)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * NS + ts.tv_nsec;
}

int progress_parse_mode(const char *s, enum progress_mode *mode, struct mf_err *err)
{
    static const char *const names[] = {"auto", "tty", "plain", "json", "quiet"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(s, names[i]) == 0) {
            *mode = (enum progress_mode)i;
            return 0;
        }
    return mf_err_set(err, MF_EUSAGE, "--progress=%.40s: use auto, tty, plain, json or quiet", s);
}

static int term_width(FILE *out)
{
    struct winsize ws;
    if (ioctl(fileno(out), TIOCGWINSZ, &ws) == 0 && ws.ws_col >= 20)
        return ws.ws_col;
    return 80;
}

int progress_open(struct progress **out, FILE *stream, enum progress_mode mode, struct mf_err *err)
{
    *out = NULL;
    struct progress *p = calloc(1, sizeof *p);
    if (!p)
        return mf_err_set(err, MF_ENOMEM, "out of memory");
    if (mode == PROGRESS_AUTO)
        mode = isatty(fileno(stream)) ? PROGRESS_TTY : PROGRESS_PLAIN;
    p->out = stream;
    p->mode = mode;
    p->clock = mono_ns;
    p->width = mode == PROGRESS_TTY ? term_width(stream) : 0;
    mf_buf_init(&p->pending, 1 << 20);
    pthread_mutex_init(&p->mu, NULL);
    *out = p;
    return 0;
}

static void redraw(struct progress *p, int64_t now);

void progress_close(struct progress *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    if (p->mode == PROGRESS_TTY)
        redraw(p, p->clock(p->clock_arg));
    pthread_mutex_unlock(&p->mu);
    for (size_t i = 0; i < p->n_jobs; i++) {
        free(p->jobs[i].verb);
        free(p->jobs[i].name);
    }
    free(p->jobs);
    mf_buf_free(&p->pending);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

enum progress_mode progress_get_mode(const struct progress *p)
{
    return p ? p->mode : PROGRESS_QUIET;
}

void progress_set_clock(struct progress *p, progress_clock_fn fn, void *arg)
{
    pthread_mutex_lock(&p->mu);
    p->clock = fn;
    p->clock_arg = arg;
    pthread_mutex_unlock(&p->mu);
}

void progress_set_width(struct progress *p, int columns)
{
    pthread_mutex_lock(&p->mu);
    p->width = columns < 20 ? 20 : columns;
    pthread_mutex_unlock(&p->mu);
}

/* ---- output per mode -------------------------------------------------------------- */

/* Writes one JSON event line; extra (a new object, stolen) carries the fields. */
static void emit_json(struct progress *p, const struct job *j, const char *event, json_t *extra)
{
    json_t *v = json_pack("{s:i, s:s}", "id", j->id, "event", event);
    if (v && extra)
        json_object_update(v, extra);
    char *s = v ? json_dumps(v, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
    if (s) {
        fprintf(p->out, "%s\n", s);
        fflush(p->out);
    }
    free(s);
    json_decref(v);
    json_decref(extra);
}

/* Copies name into buf, cut in the middle with "…" to at most cols columns. */
static void shorten(const char *name, int cols, char *buf, size_t cap)
{
    int n = (int)strlen(name);
    if (n <= cols || cols < 5) {
        snprintf(buf, cap, "%.*s", cols < 0 ? 0 : (cols < n ? cols : n), name);
        return;
    }
    int head = (cols - 1) / 2, tail = cols - 1 - head;
    snprintf(buf, cap, "%.*s\xe2\x80\xa6%s", head, name, name + n - tail);
}

/* prefix + name + suffix; on a tty the name is cut in the middle so the
 * line fits the width (the amounts and the status matter more than the
 * middle of a URL). */
static void compose(const struct progress *p, const char *prefix, const char *name,
                    const char *suffix, char *buf, size_t cap)
{
    char cut[LINE_MAX / 2];
    if (p->mode == PROGRESS_TTY) {
        shorten(name, p->width - 1 - (int)strlen(prefix) - (int)strlen(suffix), cut, sizeof cut);
        name = cut;
    }
    snprintf(buf, cap, "%s%.*s%s", prefix, LINE_MAX / 2, name, suffix);
}

/* The tty line of an active job. */
static void tty_line(const struct progress *p, const struct job *j, int64_t now, char *buf,
                     size_t cap)
{
    char amounts[160], prefix[64], suffix[200] = "";
    fmt_amounts(j, now, 1, amounts, sizeof amounts);
    snprintf(prefix, sizeof prefix, "#%d %.40s ", j->id, j->verb);
    if (j->updated)
        snprintf(suffix, sizeof suffix, " %s", amounts);
    compose(p, prefix, j->name, suffix, buf, cap);
}

static void redraw(struct progress *p, int64_t now)
{
    char line[LINE_MAX];
    if (p->drawn_lines > 0)
        fprintf(p->out, "\x1b[%dF", p->drawn_lines); /* to column 1, N lines up */
    if (p->pending.len) {
        fputs(p->pending.data, p->out);
        mf_buf_reset(&p->pending);
    }
    int n = 0;
    for (size_t i = 0; i < p->n_jobs; i++) {
        if (p->jobs[i].ended)
            continue;
        tty_line(p, &p->jobs[i], now, line, sizeof line);
        fprintf(p->out, "\x1b[2K%s\n", line);
        n++;
    }
    fputs("\x1b[J", p->out); /* clear what fewer lines left below */
    fflush(p->out);
    p->drawn_lines = n;
    p->last_draw_ns = now;
}

/* A line that stays: printed now (plain) or above the active ones (tty).
 * On a tty it must already fit the width (compose). */
static void permanent(struct progress *p, const char *line, int64_t now)
{
    if (p->mode == PROGRESS_PLAIN) {
        fprintf(p->out, "%s\n", line);
        fflush(p->out);
        return;
    }
    if (mf_buf_printf(&p->pending, NULL, "\x1b[2K%s\n", line) == 0)
        redraw(p, now);
}

/* ---- jobs ------------------------------------------------------------------------- */

static struct job *job_get(struct progress *p, int id)
{
    if (id < 1 || (size_t)id > p->n_jobs || p->jobs[id - 1].ended)
        return NULL;
    return &p->jobs[id - 1];
}

static struct job *job_add(struct progress *p, const char *verb, const char *name)
{
    if (p->n_jobs == p->cap_jobs) {
        size_t nc = p->cap_jobs ? p->cap_jobs * 2 : 16;
        void *a = realloc(p->jobs, nc * sizeof *p->jobs);
        if (!a)
            return NULL;
        p->jobs = a;
        p->cap_jobs = nc;
    }
    struct job *j = &p->jobs[p->n_jobs];
    memset(j, 0, sizeof *j);
    j->verb = strdup(verb);
    j->name = strdup(name);
    if (!j->verb || !j->name) {
        free(j->verb);
        free(j->name);
        return NULL;
    }
    j->id = (int)++p->n_jobs;
    return j;
}

int progress_begin(struct progress *p, const char *verb, const char *name)
{
    if (!p)
        return 0;
    pthread_mutex_lock(&p->mu);
    int64_t now = p->clock(p->clock_arg);
    struct job *j = job_add(p, verb, name);
    int id = j ? j->id : 0;
    if (j) {
        j->start_ns = j->last_ns = now;
        char line[LINE_MAX];
        if (p->mode == PROGRESS_JSON) {
            emit_json(p, j, "begin", json_pack("{s:s, s:s}", "verb", verb, "name", name));
        } else if (p->mode == PROGRESS_PLAIN) {
            snprintf(line, sizeof line, "#%d %s %s", id, verb, name);
            permanent(p, line, now);
        } else if (p->mode == PROGRESS_TTY) {
            redraw(p, now);
        }
    }
    pthread_mutex_unlock(&p->mu);
    return id;
}

static void update_output(struct progress *p, struct job *j, int64_t now)
{
    char amounts[160], line[LINE_MAX];
    if (p->mode == PROGRESS_TTY && now - p->last_draw_ns >= TTY_INTERVAL_NS) {
        redraw(p, now);
    } else if (p->mode == PROGRESS_PLAIN && now - j->last_ns >= PLAIN_INTERVAL_NS) {
        fmt_amounts(j, now, 0, amounts, sizeof amounts);
        snprintf(line, sizeof line, "#%d %s %s %s", j->id, j->verb, j->name, amounts);
        permanent(p, line, now);
        j->last_ns = now;
    } else if (p->mode == PROGRESS_JSON && now - j->last_ns >= JSON_INTERVAL_NS) {
        emit_json(p, j, "progress",
                  json_pack("{s:I, s:I, s:I}", "done", (json_int_t)j->done, "total",
                            (json_int_t)j->total, "rate", (json_int_t)job_rate(j, now)));
        j->last_ns = now;
    }
}

void progress_update(struct progress *p, int id, uint64_t done, uint64_t total)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    struct job *j = job_get(p, id);
    if (j) {
        int64_t now = p->clock(p->clock_arg);
        if (!j->updated) {
            j->updated = 1;
            j->base = done;
            j->base_ns = now;
        }
        j->done = done;
        j->total = total;
        update_output(p, j, now);
    }
    pthread_mutex_unlock(&p->mu);
}

void progress_note(struct progress *p, int id, const char *msg)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    struct job *j = job_get(p, id);
    if (j && p->mode == PROGRESS_JSON) {
        emit_json(p, j, "note", json_pack("{s:s}", "message", msg));
    } else if (j && p->mode != PROGRESS_QUIET) {
        char line[LINE_MAX], prefix[32];
        snprintf(prefix, sizeof prefix, "#%d ", id);
        compose(p, prefix, msg, "", line, sizeof line);
        permanent(p, line, p->clock(p->clock_arg));
    }
    pthread_mutex_unlock(&p->mu);
}

/* The final line: "#3 fetch URL done 4.6 GiB in 15s" / "#3 fetch URL ERROR: msg". */
static void finish(struct progress *p, struct job *j, const char *event, const char *text)
{
    int64_t now = p->clock(p->clock_arg);
    double secs = (double)(now - j->start_ns) / NS;
    j->ended = 1;
    if (p->mode == PROGRESS_JSON) {
        json_t *extra = strcmp(event, "end") == 0
                            ? json_pack("{s:s, s:I, s:I}", "status", text, "done",
                                        (json_int_t)j->done, "ms", (json_int_t)(secs * 1000))
                            : json_pack("{s:s}", "message", text);
        emit_json(p, j, event, extra);
        return;
    }
    if (p->mode == PROGRESS_QUIET)
        return;
    char line[LINE_MAX], prefix[64], suffix[LINE_MAX / 2], size[32] = "", took[32];
    if (j->updated)
        progress_fmt_bytes(j->done, size, sizeof size);
    fmt_duration(secs, took, sizeof took);
    snprintf(prefix, sizeof prefix, "#%d %.40s ", j->id, j->verb);
    if (strcmp(event, "end") == 0)
        snprintf(suffix, sizeof suffix, " %.40s%s%s in %s", text, size[0] ? " " : "", size, took);
    else
        snprintf(suffix, sizeof suffix, " ERROR: %.400s", text);
    compose(p, prefix, j->name, suffix, line, sizeof line);
    permanent(p, line, now);
}

void progress_end(struct progress *p, int id, const char *status)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    struct job *j = job_get(p, id);
    if (j)
        finish(p, j, "end", status);
    pthread_mutex_unlock(&p->mu);
}

void progress_fail(struct progress *p, int id, const char *msg)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    struct job *j = job_get(p, id);
    if (j)
        finish(p, j, "error", msg);
    pthread_mutex_unlock(&p->mu);
}
