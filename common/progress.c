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
 *
 * Steps (progress_step_begin, once progress_set_steps was called) are the
 * executor's plan nodes, numbered as `mfc plan` numbers them. On a tty they
 * are drawn BuildKit-like as one block redrawn in place, finished steps
 * included, under a header:
 *     [+] Building 12.3s (5/8)
 *      => [1/8] source FROM ./x.gguf 1.2 GiB / 4.6 GiB 310 MB/s ETA 12s
 *      => [2/8] check FROM ./x.gguf DONE 1.2s
 * Every redraw of the block (begin, end, update, and a ticker thread that
 * keeps the header's clock moving on a real terminal) is throttled to 10 per
 * second; progress_close draws the final state, which stays on screen. Work
 * inside a step (a download) reports through progress_scope, so its bytes
 * show on the step's line instead of as a job of its own.
 */
#include "common/progress.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "common/buf.h"
#include "common/num.h"

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
    int num;          /* the number shown: id, or the step's plan number */
    int step;         /* nonzero: begun by progress_step_begin */
    int failed;       /* nonzero after fail */
    int64_t end_ns;   /* at end or fail */
    char status[16];  /* tty steps: "DONE", "CACHED", "CANCELED" */
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
    int n_steps;             /* steps in the build (progress_set_steps), 0: none */
    int64_t open_ns;         /* at open (the header's clock) */
    int any_failed;          /* a step failed: the final header says ERROR */
    int closing;             /* the final redraw is under way */
    int ticking;             /* the ticker thread runs */
    int stop_ticker;         /* close asks the ticker to return */
    pthread_t ticker;        /* redraws the block 10 times a second on a real tty */
    struct progress *root;   /* a scope: the progress it reports into; else NULL */
    int scope_id;            /* a scope: the job its calls go to */
};

/* ---- formatting ------------------------------------------------------------------- */

void progress_fmt_bytes(uint64_t n, char *buf, size_t cap)
{
    mf_num_fmt_bytes(n, 1, buf, cap);
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

/* "[=======>            ] " for done of total (a tty line's bar), or "" when
 * the total is unknown or the terminal is narrower than BAR_MIN_COLS (the
 * name and the amounts matter more). BAR_WIDTH cells between the brackets. */
#define BAR_WIDTH 20
#define BAR_MIN_COLS 72
static void fmt_bar(const struct progress *p, uint64_t done, uint64_t total, char *buf,
                    size_t cap)
{
    char cells[BAR_WIDTH + 1];
    if (!total || cap < BAR_WIDTH + 4 || p->width < BAR_MIN_COLS) {
        if (cap)
            buf[0] = '\0';
        return;
    }
    int fill = done >= total ? BAR_WIDTH : (int)((double)done / (double)total * BAR_WIDTH);
    for (int i = 0; i < BAR_WIDTH; i++)
        cells[i] = i < fill ? '=' : i == fill ? '>' : ' ';
    cells[BAR_WIDTH] = '\0';
    snprintf(buf, cap, "[%s] ", cells);
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
    p->open_ns = mono_ns(NULL);
    p->width = mode == PROGRESS_TTY ? term_width(stream) : 0;
    mf_buf_init(&p->pending, 1 << 20);
    pthread_mutex_init(&p->mu, NULL);
    *out = p;
    return 0;
}

static void redraw(struct progress *p, int64_t now);
static void maybe_redraw(struct progress *p, int64_t now);

void progress_close(struct progress *p)
{
    if (!p)
        return;
    if (p->root) { /* a scope */
        free(p);
        return;
    }
    pthread_mutex_lock(&p->mu);
    p->stop_ticker = 1;
    pthread_mutex_unlock(&p->mu);
    if (p->ticking)
        pthread_join(p->ticker, NULL);
    pthread_mutex_lock(&p->mu);
    p->closing = 1;
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
    return !p ? PROGRESS_QUIET : p->root ? p->root->mode : p->mode;
}

/* Keeps the tty block's clock moving while no step reports anything. */
static void *ticker_main(void *arg)
{
    struct progress *p = arg;
    struct timespec tick = {0, TTY_INTERVAL_NS};
    for (;;) {
        nanosleep(&tick, NULL);
        pthread_mutex_lock(&p->mu);
        int stop = p->stop_ticker;
        if (!stop)
            maybe_redraw(p, p->clock(p->clock_arg));
        pthread_mutex_unlock(&p->mu);
        if (stop)
            return NULL;
    }
}

void progress_set_steps(struct progress *p, int n_steps)
{
    if (!p || p->root)
        return;
    pthread_mutex_lock(&p->mu);
    p->n_steps = n_steps > 0 ? n_steps : 0;
    p->open_ns = p->clock(p->clock_arg);
    if (p->n_steps && p->mode == PROGRESS_TTY && !p->ticking && isatty(fileno(p->out)))
        p->ticking = pthread_create(&p->ticker, NULL, ticker_main, p) == 0;
    pthread_mutex_unlock(&p->mu);
}

struct progress *progress_scope(struct progress *p, int step)
{
    if (!p || p->root)
        return NULL;
    pthread_mutex_lock(&p->mu);
    int id = 0;
    for (size_t i = 0; i < p->n_jobs; i++)
        if (p->jobs[i].step && p->jobs[i].num == step)
            id = p->jobs[i].id;
    pthread_mutex_unlock(&p->mu);
    struct progress *sc = id ? calloc(1, sizeof *sc) : NULL;
    if (sc) {
        sc->root = p;
        sc->scope_id = id;
        sc->mode = p->mode;
    }
    return sc;
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
    if (v && j->step) { /* steps carry everything a CI parser needs on every line */
        const char *state = !j->ended ? "running" : j->failed ? "error" : j->status;
        int64_t t = j->ended ? j->end_ns : p->clock(p->clock_arg);
        json_t *f = json_pack("{s:i, s:i, s:s, s:s, s:s, s:I, s:I, s:I}", "step", j->num,
                              "steps", p->n_steps, "verb", j->verb, "name", j->name, "state",
                              state, "bytes", (json_int_t)j->done, "total",
                              (json_int_t)j->total, "elapsed_ms",
                              (json_int_t)((t - j->start_ns) / 1000000));
        if (f)
            json_object_update(v, f);
        json_decref(f);
    }
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
    char amounts[160], prefix[64], suffix[200] = "", bar[BAR_WIDTH + 8];
    fmt_amounts(j, now, 1, amounts, sizeof amounts);
    fmt_bar(p, j->done, j->total, bar, sizeof bar);
    snprintf(prefix, sizeof prefix, "#%d %.40s ", j->id, j->verb);
    if (j->updated)
        snprintf(suffix, sizeof suffix, " %s%s", bar, amounts);
    compose(p, prefix, j->name, suffix, buf, cap);
}

/* Cuts s to at most cols columns (a UTF-8 sequence counts as one). */
static void cut_cols(char *s, int cols)
{
    int n = 0;
    for (char *q = s; *q; q++) {
        if (((unsigned char)*q & 0xc0) != 0x80 && ++n > cols) {
            *q = '\0';
            return;
        }
    }
}

/* The tty line of a step: " => [2/8] check FROM ./x.gguf DONE 1.2s". */
static void step_line(const struct progress *p, const struct job *j, int64_t now, char *buf,
                      size_t cap)
{
    char amounts[160], prefix[96], suffix[200];
    snprintf(prefix, sizeof prefix, " => [%d/%d] %.40s ", j->num, p->n_steps, j->verb);
    if (j->ended && j->failed)
        snprintf(suffix, sizeof suffix, " ERROR");
    else if (j->ended && strcmp(j->status, "DONE") == 0)
        snprintf(suffix, sizeof suffix, " DONE %.1fs", (double)(j->end_ns - j->start_ns) / NS);
    else if (j->ended)
        snprintf(suffix, sizeof suffix, " %s", j->status);
    else if (j->updated) {
        char bar[BAR_WIDTH + 8];
        fmt_amounts(j, now, 1, amounts, sizeof amounts);
        fmt_bar(p, j->done, j->total, bar, sizeof bar);
        snprintf(suffix, sizeof suffix, " %s%s", bar, amounts);
    } else
        snprintf(suffix, sizeof suffix, " %.1fs", (double)(now - j->start_ns) / NS);
    compose(p, prefix, j->name, suffix, buf, cap);
    cut_cols(buf, p->width - 1);
}

/* Steps mode: the header and every step, finished ones included. */
static int draw_block(struct progress *p, int64_t now)
{
    char line[LINE_MAX];
    int done = 0, n = 1;
    for (size_t i = 0; i < p->n_jobs; i++)
        done += p->jobs[i].step && p->jobs[i].ended;
    snprintf(line, sizeof line, "[+] Building %.1fs (%d/%d)%s", (double)(now - p->open_ns) / NS,
             done, p->n_steps, !p->closing ? "" : p->any_failed ? " ERROR" : " FINISHED");
    cut_cols(line, p->width - 1);
    fprintf(p->out, "\x1b[2K%s\n", line);
    for (size_t i = 0; i < p->n_jobs; i++) {
        const struct job *j = &p->jobs[i];
        if (j->step)
            step_line(p, j, now, line, sizeof line);
        else if (!j->ended)
            tty_line(p, j, now, line, sizeof line);
        else
            continue;
        fprintf(p->out, "\x1b[2K%s\n", line);
        n++;
    }
    return n;
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
    for (size_t i = 0; p->n_steps && i < 1; i++)
        n = draw_block(p, now);
    for (size_t i = 0; !p->n_steps && i < p->n_jobs; i++) {
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

/* Redraws unless the last redraw was under TTY_INTERVAL_NS ago. */
static void maybe_redraw(struct progress *p, int64_t now)
{
    if (now - p->last_draw_ns >= TTY_INTERVAL_NS || p->drawn_lines == 0)
        redraw(p, now);
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
        p->n_steps ? maybe_redraw(p, now) : redraw(p, now);
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

/* Begins a job; step: its plan number, or 0 for a job numbered by begin order. */
static int begin(struct progress *p, int step, const char *verb, const char *name)
{
    if (!p)
        return 0;
    if (p->root) /* a scope: the work shows on its step's line */
        return p->scope_id;
    pthread_mutex_lock(&p->mu);
    int64_t now = p->clock(p->clock_arg);
    struct job *j = job_add(p, verb, name);
    int id = j ? j->id : 0;
    if (j) {
        j->start_ns = j->last_ns = now;
        j->num = step ? step : id;
        j->step = step != 0;
        char line[LINE_MAX];
        if (p->mode == PROGRESS_JSON) {
            emit_json(p, j, "begin", json_pack("{s:s, s:s}", "verb", verb, "name", name));
        } else if (p->mode == PROGRESS_PLAIN) {
            snprintf(line, sizeof line, "#%d %s %s", j->num, verb, name);
            permanent(p, line, now);
        } else if (p->mode == PROGRESS_TTY) {
            p->n_steps ? maybe_redraw(p, now) : redraw(p, now);
        }
    }
    pthread_mutex_unlock(&p->mu);
    return id;
}

int progress_begin(struct progress *p, const char *verb, const char *name)
{
    return begin(p, 0, verb, name);
}

int progress_step_begin(struct progress *p, int step, const char *verb, const char *name)
{
    return begin(p, step > 0 ? step : 0, verb, name);
}

static void update_output(struct progress *p, struct job *j, int64_t now)
{
    char amounts[160], line[LINE_MAX];
    if (p->mode == PROGRESS_TTY && now - p->last_draw_ns >= TTY_INTERVAL_NS) {
        redraw(p, now);
    } else if (p->mode == PROGRESS_PLAIN && now - j->last_ns >= PLAIN_INTERVAL_NS) {
        fmt_amounts(j, now, 0, amounts, sizeof amounts);
        snprintf(line, sizeof line, "#%d %s %s %s", j->num, j->verb, j->name, amounts);
        permanent(p, line, now);
        j->last_ns = now;
    } else if (p->mode == PROGRESS_JSON && now - j->last_ns >= JSON_INTERVAL_NS) {
        emit_json(p, j, "progress",
                  json_pack("{s:I, s:I, s:I, s:I}", "done", (json_int_t)j->done, "bytes",
                            (json_int_t)j->done, "total", (json_int_t)j->total, "rate",
                            (json_int_t)job_rate(j, now)));
        j->last_ns = now;
    }
}

void progress_update(struct progress *p, int id, uint64_t done, uint64_t total)
{
    if (p && p->root) {
        id = p->scope_id;
        p = p->root;
    }
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
    if (p && p->root) {
        id = p->scope_id;
        p = p->root;
    }
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    struct job *j = job_get(p, id);
    if (j && p->mode == PROGRESS_JSON) {
        emit_json(p, j, "note", json_pack("{s:s}", "message", msg));
    } else if (j && p->mode != PROGRESS_QUIET) {
        char line[LINE_MAX], prefix[32];
        snprintf(prefix, sizeof prefix, "#%d ", j->num);
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
    j->end_ns = now;
    j->failed = strcmp(event, "end") != 0;
    p->any_failed |= j->step && j->failed;
    snprintf(j->status, sizeof j->status, "%s", j->failed ? "ERROR" : text);
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
    if (j->step) /* steps are short: "DONE in 0.3s" says more than "0s" */
        snprintf(took, sizeof took, "%.1fs", secs);
    else
        fmt_duration(secs, took, sizeof took);
    if (p->mode == PROGRESS_TTY && j->step) { /* the block shows it */
        maybe_redraw(p, now);
        return;
    }
    snprintf(prefix, sizeof prefix, "#%d %.40s ", j->num, j->verb);
    if (strcmp(event, "end") == 0 && j->step) /* "#N verb name STATUS in" lines up */
        snprintf(suffix, sizeof suffix, " %.40s in %s%s%s", text, took, size[0] ? ", " : "", size);
    else if (strcmp(event, "end") == 0)
        snprintf(suffix, sizeof suffix, " %.40s%s%s in %s", text, size[0] ? " " : "", size, took);
    else
        snprintf(suffix, sizeof suffix, " ERROR: %.400s", text);
    compose(p, prefix, j->name, suffix, line, sizeof line);
    permanent(p, line, now);
}

void progress_end(struct progress *p, int id, const char *status)
{
    if (!p || p->root) /* a scope's work ends with its step */
        return;
    pthread_mutex_lock(&p->mu);
    struct job *j = job_get(p, id);
    if (j)
        finish(p, j, "end", status);
    pthread_mutex_unlock(&p->mu);
}

void progress_fail(struct progress *p, int id, const char *msg)
{
    if (!p || p->root)
        return;
    pthread_mutex_lock(&p->mu);
    struct job *j = job_get(p, id);
    if (j)
        finish(p, j, "error", msg);
    pthread_mutex_unlock(&p->mu);
}
