/*
 * loadgen.c: an HTTP load generator for OpenAI-style servers (mfc-serve,
 * llama.cpp's llama-server, vLLM): C clients, each sending streamed
 * /v1/completions requests back to back, every prompt P random token ids
 * (a different one each request, so no prefix cache helps), max_tokens O,
 * ignore_eos, greedy. It prints one JSON line on stdout (output tokens/s,
 * TTFT and TPOT percentiles) and one table line on stderr.
 *
 *   loadgen --url http://127.0.0.1:8080 --clients 64 --prompt-tokens 512
 *           --max-tokens 128 [--warmup 5 --duration 20 | --requests N]
 *           [--ids LO:HI] [--model NAME] [--api-key KEY] [--seed N]
 *           [--temperature T] [--timeout S] [--label TEXT] [--path PATH]
 *
 * Timed mode (default): the clients run from t0; the measured window is
 * [t0 + warmup, t0 + warmup + duration]. At its end no request starts,
 * requests with a first token (or sent before the window) are cut, and those
 * sent inside it that still wait for a first token are cut when it comes.
 * --requests N: every client sends N requests, all run to the end, and the
 * window is the whole run. Definitions (bench/README.md "HTTP serving"):
 * tokens in the window are the streamed chunks that arrive in it, each worth
 * usage.completion_tokens / chunks of its request (1 for a cut request);
 * TTFT is over requests sent in the window; TPOT is (last - first token time)
 * / (tokens - 1) for requests wholly in the window, and the same over the
 * window's chunks for the others.
 *
 * One thread, non-blocking sockets and epoll; a connection per request
 * (Connection: close). Exit 0, 1 when a request failed or none produced a
 * token (the JSON still printed, the first error on stderr), 2 for usage.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "bench/loadgen_sse.h"

/* ---------------------------------------------------------------- options */

struct opts {
    char host[256];    /* from --url */
    char port[8];      /* from --url */
    char prefix[256];  /* the URL's path, prepended to path */
    const char *path;  /* --path: /v1/completions */
    const char *model; /* --model, or NULL: not sent */
    const char *key;   /* --api-key, or NULL */
    const char *label; /* --label */
    int clients;       /* --clients */
    int prompt;        /* --prompt-tokens */
    int max_tokens;    /* --max-tokens */
    double warmup;     /* --warmup seconds */
    double duration;   /* --duration seconds */
    int requests;      /* --requests per client; 0: timed mode */
    int64_t id_lo;     /* --ids LO:HI, token ids drawn from [LO, HI) */
    int64_t id_hi;
    uint64_t seed;      /* --seed */
    double temperature; /* --temperature */
    double timeout;     /* --timeout seconds a request may take */
};

static int usage(void)
{
    fprintf(stderr,
            "usage: loadgen [--url URL] [--clients C] [--prompt-tokens P] [--max-tokens O]\n"
            "               [--warmup S --duration S | --requests N] [--ids LO:HI] [--model NAME]\n"
            "               [--api-key KEY] [--seed N] [--temperature T] [--timeout S]\n"
            "               [--label TEXT] [--path PATH]\n");
    return 2;
}

static int num(const char *name, const char *v, double lo, double hi, double *out)
{
    char *e;
    errno = 0;
    double x = strtod(v, &e);
    if (errno || e == v || *e || !(x >= lo && x <= hi)) {
        fprintf(stderr, "loadgen: %s \"%s\": expected a number from %g to %g\n", name, v, lo, hi);
        return -1;
    }
    *out = x;
    return 0;
}

static int parse_url(struct opts *o, const char *url)
{
    const char *p = url, *h, *he, *slash;
    if (strncmp(p, "http://", 7) != 0) {
        fprintf(stderr, "loadgen: --url \"%s\": only http:// URLs are supported\n", url);
        return -1;
    }
    p += 7;
    slash = strchr(p, '/');
    if (!slash)
        slash = p + strlen(p);
    if (*p == '[') { /* [IPv6] */
        h = p + 1;
        he = memchr(h, ']', (size_t)(slash - h));
        if (!he)
            goto bad;
        p = he + 1;
    } else {
        h = p;
        he = memchr(p, ':', (size_t)(slash - p));
        if (!he)
            he = slash;
        p = he;
    }
    if ((size_t)(he - h) >= sizeof o->host || he == h)
        goto bad;
    memcpy(o->host, h, (size_t)(he - h));
    o->host[he - h] = '\0';
    snprintf(o->port, sizeof o->port, "80");
    if (*p == ':') {
        size_t n = (size_t)(slash - p - 1);
        if (n == 0 || n >= sizeof o->port || strspn(p + 1, "0123456789") < n)
            goto bad;
        memcpy(o->port, p + 1, n);
        o->port[n] = '\0';
    } else if (p != slash) {
        goto bad;
    }
    if (strlen(slash) >= sizeof o->prefix)
        goto bad;
    snprintf(o->prefix, sizeof o->prefix, "%s", slash);
    if (o->prefix[0] && o->prefix[strlen(o->prefix) - 1] == '/')
        o->prefix[strlen(o->prefix) - 1] = '\0';
    return 0;
bad:
    fprintf(stderr, "loadgen: --url \"%s\": expected http://HOST[:PORT][/PATH]\n", url);
    return -1;
}

static int parse_opts(struct opts *o, int argc, char **argv)
{
    double x;
    memset(o, 0, sizeof *o);
    o->path = "/v1/completions";
    o->label = "";
    o->clients = 1;
    o->prompt = 512;
    o->max_tokens = 128;
    o->warmup = 5;
    o->duration = 20;
    o->id_lo = 100;
    o->id_hi = 32000;
    o->seed = 1;
    o->timeout = 600;
    if (parse_url(o, "http://127.0.0.1:8080"))
        return -1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v)
            return usage();
        i++;
        if (!strcmp(a, "--url")) {
            if (parse_url(o, v))
                return -1;
        } else if (!strcmp(a, "--path")) {
            o->path = v;
        } else if (!strcmp(a, "--model")) {
            o->model = v;
        } else if (!strcmp(a, "--api-key")) {
            o->key = v;
        } else if (!strcmp(a, "--label")) {
            o->label = v;
        } else if (!strcmp(a, "--clients")) {
            if (num(a, v, 1, 4096, &x))
                return -1;
            o->clients = (int)x;
        } else if (!strcmp(a, "--prompt-tokens")) {
            if (num(a, v, 1, 1 << 20, &x))
                return -1;
            o->prompt = (int)x;
        } else if (!strcmp(a, "--max-tokens")) {
            if (num(a, v, 1, 1 << 20, &x))
                return -1;
            o->max_tokens = (int)x;
        } else if (!strcmp(a, "--warmup")) {
            if (num(a, v, 0, 3600, &o->warmup))
                return -1;
        } else if (!strcmp(a, "--duration")) {
            if (num(a, v, 0.1, 86400, &o->duration))
                return -1;
        } else if (!strcmp(a, "--requests")) {
            if (num(a, v, 1, 1 << 20, &x))
                return -1;
            o->requests = (int)x;
        } else if (!strcmp(a, "--seed")) {
            if (num(a, v, 0, 9007199254740992.0, &x))
                return -1;
            o->seed = (uint64_t)x;
        } else if (!strcmp(a, "--temperature")) {
            if (num(a, v, 0, 2, &o->temperature))
                return -1;
        } else if (!strcmp(a, "--timeout")) {
            if (num(a, v, 0.1, 86400, &o->timeout))
                return -1;
        } else if (!strcmp(a, "--ids")) {
            char lo[32], *colon = strchr(v, ':');
            double a_, b_;
            if (!colon || (size_t)(colon - v) >= sizeof lo) {
                fprintf(stderr, "loadgen: --ids \"%s\": expected LO:HI\n", v);
                return -1;
            }
            memcpy(lo, v, (size_t)(colon - v));
            lo[colon - v] = '\0';
            if (num("--ids LO", lo, 0, 1 << 30, &a_) || num("--ids HI", colon + 1, 1, 1 << 30, &b_))
                return -1;
            if (b_ <= a_) {
                fprintf(stderr, "loadgen: --ids \"%s\": HI must be above LO\n", v);
                return -1;
            }
            o->id_lo = (int64_t)a_;
            o->id_hi = (int64_t)b_;
        } else {
            fprintf(stderr, "loadgen: unknown option %s\n", a);
            return usage();
        }
    }
    return 0;
}

/* ---------------------------------------------------------------- requests */

struct rec {
    int client;
    double t_send;  /* seconds from t0 */
    double t_first; /* first text chunk; valid when n_chunks > 0 */
    double t_end;   /* response finished, cut or failed */
    double *chunk;  /* owned: arrival of each text chunk */
    int n_chunks, cap;
    int64_t usage; /* usage.completion_tokens, -1 when none came */
    char finish[24];
    int done;   /* the stream ended normally ([DONE] or the body's end) */
    int cut;    /* closed by loadgen at the window's end */
    int failed; /* an error: why */
    char why[240];
};

enum { IDLE, CONNECTING, SENDING, READING };

struct client {
    int id;
    int fd;
    int phase;
    int sent;    /* requests started */
    int stopped; /* a request failed: this client sends no more */
    char *req;   /* owned: the request bytes */
    size_t req_len, req_off, req_cap;
    struct lg_resp resp;
    int rec; /* index into recs of the current request */
};

struct run {
    struct opts o;
    struct addrinfo *ai;
    int ep;
    double t0;     /* CLOCK_MONOTONIC seconds at start */
    double ws, we; /* the window, seconds from t0 */
    int closing;   /* the window ended: start nothing, cut what may be cut */
    struct client *cl;
    struct rec *recs;
    int n_recs, cap_recs;
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double since(const struct run *r)
{
    return now_s() - r->t0;
}

/* The system's text for error e (GNU strerror_r: the text may be static). */
static const char *os_error(int e, char *buf, size_t n)
{
    return strerror_r(e, buf, n);
}

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static int buf_printf(struct client *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int buf_printf(struct client *c, const char *fmt, ...)
{
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(c->req + c->req_len, c->req_cap - c->req_len, fmt, ap);
        va_end(ap);
        if (n < 0)
            return -1;
        if ((size_t)n < c->req_cap - c->req_len) {
            c->req_len += (size_t)n;
            return 0;
        }
        size_t cap = (c->req_cap ? c->req_cap : 4096) * 2 + (size_t)n;
        char *p = realloc(c->req, cap);
        if (!p)
            return -1;
        c->req = p;
        c->req_cap = cap;
    }
}

static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            fprintf(f, "\\%c", ch);
        else if (ch < 0x20)
            fprintf(f, "\\u%04x", ch);
        else
            fputc(ch, f);
    }
    fputc('"', f);
}

/* The client's next request: body of prompt ids, then the head before it. */
static int build_request(struct run *r, struct client *c)
{
    const struct opts *o = &r->o;
    uint64_t s = o->seed * 0x100000001b3ull ^ ((uint64_t)c->id << 32) ^ (uint64_t)c->sent;
    char *body;
    size_t blen;

    c->req_len = 0;
    if (!c->req_cap) {
        c->req = malloc(4096);
        if (!c->req)
            return -1;
        c->req_cap = 4096;
    }
    if (buf_printf(c, "{\"prompt\":["))
        return -1;
    for (int i = 0; i < o->prompt; i++)
        if (buf_printf(
                c, "%s%lld", i ? "," : "",
                (long long)(o->id_lo + (int64_t)(splitmix(&s) % (uint64_t)(o->id_hi - o->id_lo)))))
            return -1;
    if (buf_printf(c,
                   "],\"max_tokens\":%d,\"ignore_eos\":true,\"stream\":true,"
                   "\"stream_options\":{\"include_usage\":true},\"temperature\":%g",
                   o->max_tokens, o->temperature))
        return -1;
    if (o->model) {
        if (buf_printf(c, ",\"model\":\""))
            return -1;
        for (const char *m = o->model; *m; m++)
            if (buf_printf(c, *m == '"' || *m == '\\' ? "\\%c" : "%c", *m))
                return -1;
        if (buf_printf(c, "\""))
            return -1;
    }
    if (buf_printf(c, "}"))
        return -1;
    blen = c->req_len;
    body = malloc(blen);
    if (!body)
        return -1;
    memcpy(body, c->req, blen);
    c->req_len = 0;
    int rc = buf_printf(c,
                        "POST %s%s HTTP/1.1\r\nHost: %s:%s\r\nContent-Type: application/json\r\n"
                        "Accept: text/event-stream\r\nContent-Length: %zu\r\nConnection: close\r\n",
                        r->o.prefix, o->path, o->host, o->port, blen);
    if (!rc && o->key)
        rc = buf_printf(c, "Authorization: Bearer %s\r\n", o->key);
    if (!rc)
        rc = buf_printf(c, "\r\n%.*s", (int)blen, body);
    free(body);
    c->req_off = 0;
    return rc;
}

static struct rec *cur(struct run *r, struct client *c)
{
    return &r->recs[c->rec];
}

/* Ends the client's request: the connection is closed either way. */
static void end_request(struct run *r, struct client *c)
{
    struct rec *q = cur(r, c);
    q->t_end = since(r);
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    c->phase = IDLE;
    lg_resp_free(&c->resp);
}

static void fail_request(struct run *r, struct client *c, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void fail_request(struct run *r, struct client *c, const char *fmt, ...)
{
    struct rec *q = cur(r, c);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(q->why, sizeof q->why, fmt, ap);
    va_end(ap);
    q->failed = 1;
    c->stopped = 1;
    end_request(r, c);
}

static int start_request(struct run *r, struct client *c)
{
    struct rec *q;
    char eb[128];
    if (r->n_recs == r->cap_recs) {
        int cap = r->cap_recs ? 2 * r->cap_recs : 1024;
        struct rec *p = realloc(r->recs, (size_t)cap * sizeof *p);
        if (!p)
            return -1;
        r->recs = p;
        r->cap_recs = cap;
    }
    c->rec = r->n_recs++;
    q = cur(r, c);
    memset(q, 0, sizeof *q);
    q->client = c->id;
    q->usage = -1;
    if (build_request(r, c))
        return -1;
    c->sent++;
    lg_resp_init(&c->resp);
    q->t_send = since(r);
    c->fd = socket(r->ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c->fd < 0) {
        fail_request(r, c, "socket: %s", os_error(errno, eb, sizeof eb));
        return 0;
    }
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(c->fd, r->ai->ai_addr, r->ai->ai_addrlen) && errno != EINPROGRESS) {
        fail_request(r, c, "connecting to %s:%s: %s", r->o.host, r->o.port,
                     os_error(errno, eb, sizeof eb));
        return 0;
    }
    struct epoll_event ev = {.events = EPOLLOUT, .data.ptr = c};
    if (epoll_ctl(r->ep, EPOLL_CTL_ADD, c->fd, &ev)) {
        fail_request(r, c, "epoll_ctl: %s", os_error(errno, eb, sizeof eb));
        return 0;
    }
    c->phase = CONNECTING;
    return 0;
}

/* One event's data (lg_event_fn): counts text chunks, keeps finish and usage. */
static int on_event(void *user, const char *data, size_t n)
{
    struct run *r = ((void **)user)[0];
    struct client *c = ((void **)user)[1];
    struct rec *q = cur(r, c);
    struct lg_event ev;

    if (n == 6 && memcmp(data, "[DONE]", 6) == 0) {
        q->done = 1;
        return 1;
    }
    if (lg_json_scan(data, n, &ev)) {
        snprintf(q->why, sizeof q->why, "an event is not JSON: %.80s", data);
        q->failed = 1;
        return 1;
    }
    if (ev.error) {
        snprintf(q->why, sizeof q->why, "the server sent an error event: %s",
                 ev.message[0] ? ev.message : "(no message)");
        q->failed = 1;
        return 1;
    }
    if (ev.text) {
        if (q->n_chunks == q->cap) {
            int cap = q->cap ? 2 * q->cap : 64;
            double *p = realloc(q->chunk, (size_t)cap * sizeof *p);
            if (!p) {
                snprintf(q->why, sizeof q->why, "out of memory");
                q->failed = 1;
                return 1;
            }
            q->chunk = p;
            q->cap = cap;
        }
        double t = since(r);
        if (q->n_chunks == 0)
            q->t_first = t;
        q->chunk[q->n_chunks++] = t;
    }
    if (ev.finish)
        snprintf(q->finish, sizeof q->finish, "%s", ev.finish_reason);
    if (ev.completion_tokens >= 0)
        q->usage = ev.completion_tokens;
    return 0;
}

static void response_end(struct run *r, struct client *c, int rc)
{
    struct rec *q = cur(r, c);
    if (q->failed) {
        c->stopped = 1;
        end_request(r, c);
    } else if (rc == LG_ERROR) {
        fail_request(r, c, "%s", c->resp.why);
    } else if (c->resp.status != 200) {
        char *b = c->resp.errbody;
        for (char *p = b; *p; p++)
            if (*p == '\n' || *p == '\r')
                *p = ' ';
        fail_request(r, c, "HTTP %d: %.200s", c->resp.status, b);
    } else {
        q->done = 1;
        end_request(r, c);
    }
}

static void on_readable(struct run *r, struct client *c)
{
    char buf[65536], eb[128];
    void *u[2] = {r, c};
    for (;;) {
        ssize_t n = read(c->fd, buf, sizeof buf);
        int rc;
        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return;
            if (errno == EINTR)
                continue;
            fail_request(r, c, "reading the response: %s", os_error(errno, eb, sizeof eb));
            return;
        }
        rc = n == 0 ? lg_resp_eof(&c->resp, on_event, u)
                    : lg_resp_feed(&c->resp, buf, (size_t)n, on_event, u);
        if (rc != LG_MORE || n == 0) {
            response_end(r, c, rc);
            return;
        }
        if (r->closing && cur(r, c)->n_chunks > 0) { /* its first token came: cut it */
            cur(r, c)->cut = 1;
            end_request(r, c);
            return;
        }
    }
}

static void on_writable(struct run *r, struct client *c)
{
    char eb[128];
    if (c->phase == CONNECTING) {
        int e = 0;
        socklen_t len = sizeof e;
        getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &e, &len);
        if (e) {
            fail_request(r, c, "connecting to %s:%s: %s", r->o.host, r->o.port,
                         os_error(e, eb, sizeof eb));
            return;
        }
        c->phase = SENDING;
    }
    while (c->req_off < c->req_len) {
        ssize_t n = send(c->fd, c->req + c->req_off, c->req_len - c->req_off, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return;
            if (errno == EINTR)
                continue;
            fail_request(r, c, "sending the request: %s", os_error(errno, eb, sizeof eb));
            return;
        }
        c->req_off += (size_t)n;
    }
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
    epoll_ctl(r->ep, EPOLL_CTL_MOD, c->fd, &ev);
    c->phase = READING;
}

/* May client c start another request now? */
static int may_start(const struct run *r, const struct client *c)
{
    if (c->stopped)
        return 0;
    if (r->o.requests)
        return c->sent < r->o.requests;
    return !r->closing;
}

/* At the window's end: cut what already streams or started before it. */
static void close_window(struct run *r)
{
    r->closing = 1;
    for (int i = 0; i < r->o.clients; i++) {
        struct client *c = &r->cl[i];
        if (c->phase == IDLE)
            continue;
        struct rec *q = cur(r, c);
        if (q->n_chunks > 0 || q->t_send < r->ws) {
            q->cut = 1;
            end_request(r, c);
        }
    }
}

static int loop(struct run *r)
{
    struct epoll_event evs[256];
    char eb[128];
    int active;

    for (;;) {
        double t = since(r);
        active = 0;
        if (!r->o.requests && !r->closing && t >= r->we)
            close_window(r);
        for (int i = 0; i < r->o.clients; i++) {
            struct client *c = &r->cl[i];
            if (c->phase != IDLE && t - cur(r, c)->t_send > r->o.timeout)
                fail_request(r, c, "no complete answer within %g s (--timeout)", r->o.timeout);
            if (c->phase == IDLE && may_start(r, c) && start_request(r, c)) {
                fprintf(stderr, "loadgen: out of memory\n");
                return -1;
            }
            active += c->phase != IDLE;
        }
        if (!active)
            return 0;
        int n = epoll_wait(r->ep, evs, (int)(sizeof evs / sizeof evs[0]), 20);
        if (n < 0 && errno != EINTR) {
            fprintf(stderr, "loadgen: epoll_wait: %s\n", os_error(errno, eb, sizeof eb));
            return -1;
        }
        for (int i = 0; i < n; i++) {
            struct client *c = evs[i].data.ptr;
            if (c->phase == CONNECTING || c->phase == SENDING) {
                if (evs[i].events & (EPOLLOUT | EPOLLERR | EPOLLHUP))
                    on_writable(r, c);
            } else if (c->phase == READING) {
                on_readable(r, c);
            }
        }
    }
}

/* ---------------------------------------------------------------- report */

struct dist {
    int n;
    double mean, p50, p90, p99;
};

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Percentiles by linear interpolation between order statistics (numpy's default). */
static double pct(const double *v, int n, double p)
{
    double k = p / 100.0 * (n - 1);
    int i = (int)k;
    if (i >= n - 1)
        return v[n - 1];
    return v[i] + (v[i + 1] - v[i]) * (k - i);
}

static struct dist summarize(double *v, int n)
{
    struct dist d = {n, NAN, NAN, NAN, NAN};
    double s = 0;
    if (n == 0)
        return d;
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    for (int i = 0; i < n; i++)
        s += v[i];
    d.mean = s / n;
    d.p50 = pct(v, n, 50);
    d.p90 = pct(v, n, 90);
    d.p99 = pct(v, n, 99);
    return d;
}

static void json_num(FILE *f, double x)
{
    if (isfinite(x))
        fprintf(f, "%.3f", x);
    else
        fputs("null", f);
}

static void json_dist(FILE *f, const char *name, struct dist d)
{
    fprintf(f, "\"%s\":{\"n\":%d,\"mean\":", name, d.n);
    json_num(f, d.mean);
    fputs(",\"p50\":", f);
    json_num(f, d.p50);
    fputs(",\"p90\":", f);
    json_num(f, d.p90);
    fputs(",\"p99\":", f);
    json_num(f, d.p99);
    fputc('}', f);
}

static int report(struct run *r)
{
    const struct opts *o = &r->o;
    double *ttft = calloc((size_t)r->n_recs + 1, sizeof *ttft);
    double *tpot = calloc((size_t)r->n_recs + 1, sizeof *tpot);
    int n_ttft = 0, n_tpot = 0, done = 0, cut = 0, errors = 0, length = 0;
    double tokens = 0, win;
    const char *first_err = NULL;

    if (!ttft || !tpot) {
        fprintf(stderr, "loadgen: out of memory\n");
        return 1;
    }
    if (o->requests) { /* the whole run */
        r->ws = 0;
        r->we = 0;
        for (int i = 0; i < r->n_recs; i++)
            if (r->recs[i].t_end > r->we)
                r->we = r->recs[i].t_end;
    }
    win = r->we - r->ws;
    for (int i = 0; i < r->n_recs; i++) {
        struct rec *q = &r->recs[i];
        if (q->failed) {
            errors++;
            if (!first_err)
                first_err = q->why;
            continue;
        }
        done += q->done && !q->cut;
        cut += q->cut;
        length += !strcmp(q->finish, "length");
        if (q->n_chunks == 0)
            continue;
        double ratio = !q->cut && q->usage > 0 ? (double)q->usage / q->n_chunks : 1.0;
        int a = -1, b = -1;
        for (int k = 0; k < q->n_chunks; k++) {
            if (q->chunk[k] >= r->ws && q->chunk[k] <= r->we) {
                if (a < 0)
                    a = k;
                b = k;
            }
        }
        if (a >= 0)
            tokens += ratio * (b - a + 1);
        if (q->t_send >= r->ws)
            ttft[n_ttft++] = (q->t_first - q->t_send) * 1e3;
        if (!q->cut && q->t_send >= r->ws && q->t_end <= r->we && q->usage > 1)
            tpot[n_tpot++] =
                (q->chunk[q->n_chunks - 1] - q->t_first) * 1e3 / (double)(q->usage - 1);
        else if (a >= 0 && b > a)
            tpot[n_tpot++] = (q->chunk[b] - q->chunk[a]) * 1e3 / (ratio * (b - a));
    }
    struct dist dt = summarize(ttft, n_ttft), dp = summarize(tpot, n_tpot);
    double tps = win > 0 ? tokens / win : NAN;

    printf("{\"label\":");
    json_str(stdout, o->label);
    printf(",\"clients\":%d,\"prompt_tokens\":%d,\"max_tokens\":%d,\"mode\":\"%s\",\"window_s\":",
           o->clients, o->prompt, o->max_tokens, o->requests ? "requests" : "timed");
    json_num(stdout, win);
    printf(",\"output_tokens\":%.1f,\"output_tok_s\":", tokens);
    json_num(stdout, tps);
    printf(",\"requests_done\":%d,\"requests_cut\":%d,\"finish_length\":%d,\"errors\":%d,", done,
           cut, length, errors);
    json_dist(stdout, "ttft_ms", dt);
    putchar(',');
    json_dist(stdout, "tpot_ms", dp);
    printf(",\"first_error\":");
    if (first_err)
        json_str(stdout, first_err);
    else
        fputs("null", stdout);
    printf("}\n");
    fflush(stdout);
    fprintf(stderr,
            "%-16s C=%-4d %5d/%-5d %9.1f tok/s  TTFT p50/p90/p99 %7.0f %7.0f %7.0f ms  "
            "TPOT %6.1f %6.1f %6.1f ms  (%d done, %d cut, %d errors)\n",
            o->label, o->clients, o->prompt, o->max_tokens, tps, dt.p50, dt.p90, dt.p99, dp.p50,
            dp.p90, dp.p99, done, cut, errors);
    if (first_err)
        fprintf(stderr, "loadgen: %d request(s) failed; the first: %s\n", errors, first_err);
    else if (tokens <= 0)
        fprintf(stderr, "loadgen: no output token arrived in the window\n");
    free(ttft);
    free(tpot);
    return first_err || tokens <= 0 ? 1 : 0;
}

int main(int argc, char **argv)
{
    struct run r;
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM};
    int rc;

    memset(&r, 0, sizeof r);
    if (argc > 1 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")))
        return usage();
    if ((rc = parse_opts(&r.o, argc, argv)))
        return rc < 0 ? 2 : rc;
    if ((rc = getaddrinfo(r.o.host, r.o.port, &hints, &r.ai))) {
        fprintf(stderr, "loadgen: %s:%s: %s\n", r.o.host, r.o.port, gai_strerror(rc));
        return 1;
    }
    r.ep = epoll_create1(EPOLL_CLOEXEC);
    r.cl = calloc((size_t)r.o.clients, sizeof *r.cl);
    if (r.ep < 0 || !r.cl) {
        fprintf(stderr, "loadgen: cannot set up %d clients\n", r.o.clients);
        return 1;
    }
    for (int i = 0; i < r.o.clients; i++) {
        r.cl[i].id = i;
        r.cl[i].fd = -1;
    }
    r.ws = r.o.warmup;
    r.we = r.o.warmup + r.o.duration;
    r.t0 = now_s();
    rc = loop(&r) ? 1 : report(&r);
    for (int i = 0; i < r.o.clients; i++) {
        free(r.cl[i].req);
        lg_resp_free(&r.cl[i].resp);
    }
    for (int i = 0; i < r.n_recs; i++)
        free(r.recs[i].chunk);
    free(r.recs);
    free(r.cl);
    freeaddrinfo(r.ai);
    close(r.ep);
    return rc;
}
