/*
 * loadgen_sse.c: bench/loadgen's response parser (loadgen_sse.h): HTTP/1.1
 * status and headers, the body's framing (chunked, Content-Length, or to the
 * connection's end), server-sent events split into their data, and a JSON
 * walker that picks out the few members a streamed completion carries.
 *
 * Hand-written, not libcurl and jansson: the load generator must build with
 * `cc` alone on a GPU host without -dev packages (bench/serve-gpu), where the
 * servers it measures run. Invariants: no buffer grows past its LG_* cap (a
 * longer line or event is LG_ERROR, never a larger allocation); the JSON
 * walker reads only [s, s + n) and recurses at most 64 deep.
 */
#include "bench/loadgen_sse.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---------------------------------------------------------------- JSON */

struct jw {
    const char *p, *end;
    struct lg_event *ev;
    int depth;
};

#define JW_DEPTH 64

static void jw_ws(struct jw *w)
{
    while (w->p < w->end && (*w->p == ' ' || *w->p == '\t' || *w->p == '\n' || *w->p == '\r'))
        w->p++;
}

/* A string at w->p (the opening quote): its raw bytes between the quotes
 * in *s, *n (escapes left as they are). -1 if unterminated or bad. */
static int jw_string(struct jw *w, const char **s, size_t *n)
{
    if (w->p >= w->end || *w->p != '"')
        return -1;
    const char *b = ++w->p;
    while (w->p < w->end) {
        unsigned char c = (unsigned char)*w->p;
        if (c == '"') {
            *s = b;
            *n = (size_t)(w->p - b);
            w->p++;
            return 0;
        }
        if (c < 0x20)
            return -1;
        if (c == '\\') {
            if (w->end - w->p < 2)
                return -1;
            char e = w->p[1];
            if (e == 'u') {
                if (w->end - w->p < 6)
                    return -1;
                for (int i = 2; i < 6; i++)
                    if (!isxdigit((unsigned char)w->p[i]))
                        return -1;
                w->p += 6;
                continue;
            }
            if (!strchr("\"\\/bfnrt", e))
                return -1;
            w->p += 2;
            continue;
        }
        w->p++;
    }
    return -1;
}

/* Copies a raw string into dst (cap bytes with the NUL), simple escapes
 * undone, \uXXXX kept as written. */
static void jw_copy(char *dst, size_t cap, const char *s, size_t n)
{
    size_t o = 0;
    for (size_t i = 0; i < n && o + 1 < cap; i++) {
        char c = s[i];
        if (c == '\\' && i + 1 < n) {
            char e = s[++i];
            c = e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : e == 'u' ? (i--, '\\') : e;
        }
        dst[o++] = c;
    }
    dst[o] = '\0';
}

static int jw_eq(const char *s, size_t n, const char *lit)
{
    return s && strlen(lit) == n && memcmp(s, lit, n) == 0;
}

/* A number: JSON's grammar, checked; its integer value in *v when it has
 * no fraction or exponent and fits. */
static int jw_number(struct jw *w, int64_t *v, int *is_int)
{
    const char *b = w->p;
    int digits = 0;
    if (w->p < w->end && *w->p == '-')
        w->p++;
    while (w->p < w->end && isdigit((unsigned char)*w->p))
        w->p++, digits++;
    if (!digits)
        return -1;
    *is_int = 1;
    if (w->p < w->end && *w->p == '.') {
        *is_int = 0;
        w->p++;
        digits = 0;
        while (w->p < w->end && isdigit((unsigned char)*w->p))
            w->p++, digits++;
        if (!digits)
            return -1;
    }
    if (w->p < w->end && (*w->p == 'e' || *w->p == 'E')) {
        *is_int = 0;
        w->p++;
        if (w->p < w->end && (*w->p == '+' || *w->p == '-'))
            w->p++;
        digits = 0;
        while (w->p < w->end && isdigit((unsigned char)*w->p))
            w->p++, digits++;
        if (!digits)
            return -1;
    }
    if (*is_int) {
        char tmp[24];
        size_t n = (size_t)(w->p - b);
        if (n >= sizeof tmp) {
            *is_int = 0;
            return 0;
        }
        memcpy(tmp, b, n);
        tmp[n] = '\0';
        *v = strtoll(tmp, NULL, 10);
    }
    return 0;
}

static int jw_literal(struct jw *w, const char *lit)
{
    size_t n = strlen(lit);
    if ((size_t)(w->end - w->p) < n || memcmp(w->p, lit, n) != 0)
        return -1;
    w->p += n;
    return 0;
}

static int jw_value(struct jw *w, const char *key, size_t klen, const char *ctx, size_t clen);

/* After a member or element: 0 at the container's close (consumed), 1 past
 * a ',', -1 on anything else. */
static int jw_next(struct jw *w, char close)
{
    jw_ws(w);
    if (w->p >= w->end)
        return -1;
    const char c = *w->p++;
    return c == close ? 0 : c == ',' ? 1 : -1;
}

/* The members of an object whose own key (inherited through arrays) is
 * ctx; each member's value is visited with its key and that context. */
static int jw_object(struct jw *w, const char *ctx, size_t clen)
{
    w->p++; /* '{' */
    jw_ws(w);
    if (w->p < w->end && *w->p == '}') {
        w->p++;
        return 0;
    }
    for (;;) {
        const char *k;
        size_t kn;
        jw_ws(w);
        if (jw_string(w, &k, &kn))
            return -1;
        jw_ws(w);
        if (w->p >= w->end || *w->p != ':')
            return -1;
        w->p++;
        jw_ws(w);
        if (jw_value(w, k, kn, ctx, clen))
            return -1;
        const int r = jw_next(w, '}');
        if (r <= 0)
            return r;
    }
}

static int jw_array(struct jw *w, const char *key, size_t klen)
{
    w->p++; /* '[' */
    jw_ws(w);
    if (w->p < w->end && *w->p == ']') {
        w->p++;
        return 0;
    }
    for (;;) {
        jw_ws(w);
        /* an element's context is the array's key: choices[i].text has ctx "choices" */
        if (jw_value(w, NULL, 0, key, klen))
            return -1;
        const int r = jw_next(w, ']');
        if (r <= 0)
            return r;
    }
}

/* One value under key (NULL inside an array) in an object of context ctx. */
static int jw_value(struct jw *w, const char *key, size_t klen, const char *ctx, size_t clen)
{
    struct lg_event *ev = w->ev;
    int rc;

    if (w->p >= w->end)
        return -1;
    if (++w->depth > JW_DEPTH)
        return -1;
    switch (*w->p) {
    case '{':
        /* an array element's object keeps the array's key as its context */
        rc = key ? jw_object(w, key, klen) : jw_object(w, ctx, clen);
        if (!rc && jw_eq(key, klen, "error"))
            ev->error = 1;
        break;
    case '[':
        rc = key ? jw_array(w, key, klen) : jw_array(w, ctx, clen);
        break;
    case '"': {
        const char *s;
        size_t n;
        rc = jw_string(w, &s, &n);
        if (rc)
            break;
        if (n > 0 && ((jw_eq(key, klen, "text") && jw_eq(ctx, clen, "choices")) ||
                      (jw_eq(key, klen, "content") && jw_eq(ctx, clen, "delta"))))
            ev->text = 1;
        if (jw_eq(key, klen, "finish_reason") && jw_eq(ctx, clen, "choices")) {
            ev->finish = 1;
            jw_copy(ev->finish_reason, sizeof ev->finish_reason, s, n);
        }
        if ((jw_eq(key, klen, "message") && jw_eq(ctx, clen, "error")) ||
            (jw_eq(key, klen, "error") && ctx == NULL)) {
            ev->error = 1;
            jw_copy(ev->message, sizeof ev->message, s, n);
        }
        break;
    }
    case 't':
        rc = jw_literal(w, "true");
        break;
    case 'f':
        rc = jw_literal(w, "false");
        break;
    case 'n':
        rc = jw_literal(w, "null");
        break;
    default: {
        int64_t v = 0;
        int is_int = 0;
        rc = jw_number(w, &v, &is_int);
        if (!rc && is_int && jw_eq(key, klen, "completion_tokens") && jw_eq(ctx, clen, "usage"))
            ev->completion_tokens = v;
        break;
    }
    }
    w->depth--;
    return rc;
}

int lg_json_scan(const char *s, size_t n, struct lg_event *ev)
{
    struct jw w = {s, s + n, ev, 0};
    memset(ev, 0, sizeof *ev);
    ev->completion_tokens = -1;
    jw_ws(&w);
    if (jw_value(&w, NULL, 0, NULL, 0))
        return -1;
    jw_ws(&w);
    return w.p == w.end ? 0 : -1;
}

/* ---------------------------------------------------------------- HTTP */

enum {
    ST_STATUS,
    ST_HEADER,
    ST_BODY,       /* Content-Length bytes, or to EOF when length < 0 */
    ST_CHUNK_SIZE, /* a chunk-size line */
    ST_CHUNK_DATA, /* chunk bytes */
    ST_CHUNK_CRLF, /* the line end after a chunk */
    ST_TRAILER,    /* trailer lines up to the empty one */
    ST_END,
};

void lg_resp_init(struct lg_resp *r)
{
    memset(r, 0, sizeof *r);
    r->state = ST_STATUS;
    r->length = -1;
}

void lg_resp_free(struct lg_resp *r)
{
    free(r->sse);
    free(r->data);
    r->sse = r->data = NULL;
    r->sse_cap = r->data_cap = r->sse_len = r->data_len = 0;
}

static int fail(struct lg_resp *r, const char *what)
{
    snprintf(r->why, sizeof r->why, "%s", what);
    return LG_ERROR;
}

/* Appends n bytes to a buffer capped at LG_EVENT_MAX. */
static int grow_append(char **buf, size_t *len, size_t *cap, const char *s, size_t n)
{
    if (n == 0)
        return 0;
    if (n > LG_EVENT_MAX - *len)
        return -1;
    if (*len + n > *cap) {
        size_t c = *cap ? *cap : 256;
        while (c < *len + n)
            c *= 2;
        if (c > LG_EVENT_MAX)
            c = LG_EVENT_MAX;
        char *p = realloc(*buf, c);
        if (!p)
            return -1;
        *buf = p;
        *cap = c;
    }
    memcpy(*buf + *len, s, n);
    *len += n;
    return 0;
}

/* One complete SSE line (no line end) of a 200 body. */
static int sse_line(struct lg_resp *r, const char *l, size_t n, lg_event_fn fn, void *user)
{
    if (n > 0 && l[n - 1] == '\r')
        n--;
    if (n == 0) { /* dispatch */
        int stop = 0;
        if (r->has_data)
            stop = fn(user, r->data ? r->data : "", r->data_len);
        r->data_len = 0;
        r->has_data = 0;
        return stop ? LG_STOP : LG_MORE;
    }
    if (n >= 5 && memcmp(l, "data:", 5) == 0) {
        const char *v = l + 5;
        size_t vn = n - 5;
        if (vn && *v == ' ')
            v++, vn--;
        if ((r->has_data && grow_append(&r->data, &r->data_len, &r->data_cap, "\n", 1)) ||
            grow_append(&r->data, &r->data_len, &r->data_cap, v, vn))
            return fail(r, "a server-sent event's data is over 1 MiB");
        r->has_data = 1;
    }
    return LG_MORE; /* comments (":"), event:, id:, retry: carry nothing we count */
}

/* Body bytes after de-framing. */
static int body_bytes(struct lg_resp *r, const char *b, size_t n, lg_event_fn fn, void *user)
{
    if (r->status != 200) {
        size_t k = n < sizeof r->errbody - 1 - r->errlen ? n : sizeof r->errbody - 1 - r->errlen;
        memcpy(r->errbody + r->errlen, b, k);
        r->errlen += k;
        r->errbody[r->errlen] = '\0';
        return LG_MORE;
    }
    for (size_t i = 0; i < n;) {
        const char *nl = memchr(b + i, '\n', n - i);
        size_t k = nl ? (size_t)(nl - (b + i)) : n - i;
        if (grow_append(&r->sse, &r->sse_len, &r->sse_cap, b + i, k))
            return fail(r, "a server-sent event line is over 1 MiB");
        i += k;
        if (!nl)
            break;
        i++; /* the '\n' */
        int rc = sse_line(r, r->sse ? r->sse : "", r->sse_len, fn, user);
        r->sse_len = 0;
        if (rc != LG_MORE)
            return rc;
    }
    return LG_MORE;
}

static int header_line(struct lg_resp *r)
{
    const char *l = r->line;
    if (r->line_len == 0) { /* end of headers */
        if (r->status >= 100 && r->status < 200) {
            r->state = ST_STATUS; /* an interim response: the real one follows */
            r->chunked = 0;
            r->length = -1;
            return LG_MORE;
        }
        if (r->chunked) {
            r->state = ST_CHUNK_SIZE;
        } else {
            r->state = ST_BODY;
            r->left = r->length;
            if (r->length == 0) {
                r->state = ST_END;
                return LG_DONE;
            }
        }
        return LG_MORE;
    }
    if (!strncasecmp(l, "transfer-encoding:", 18)) {
        for (const char *p = l + 18; *p; p++)
            if (!strncasecmp(p, "chunked", 7))
                r->chunked = 1;
    } else if (!strncasecmp(l, "content-length:", 15)) {
        const char *p = l + 15;
        int64_t v = 0;
        while (*p == ' ' || *p == '\t')
            p++;
        if (!isdigit((unsigned char)*p))
            return fail(r, "the response's Content-Length is not a number");
        for (; isdigit((unsigned char)*p); p++) {
            if (v > ((int64_t)1 << 40))
                return fail(r, "the response's Content-Length is over 1 TiB");
            v = v * 10 + (*p - '0');
        }
        r->length = v;
    }
    return LG_MORE;
}

static int status_line(struct lg_resp *r)
{
    const char *l = r->line;
    if (r->line_len < 12 || strncmp(l, "HTTP/1.", 7) != 0 || l[8] != ' ' ||
        !isdigit((unsigned char)l[9]) || !isdigit((unsigned char)l[10]) ||
        !isdigit((unsigned char)l[11]))
        return fail(r, "the response does not start with an HTTP/1.x status line");
    r->status = (l[9] - '0') * 100 + (l[10] - '0') * 10 + (l[11] - '0');
    r->state = ST_HEADER;
    return LG_MORE;
}

static int chunk_size_line(struct lg_resp *r)
{
    const char *p = r->line;
    int64_t v = 0;
    if (!isxdigit((unsigned char)*p))
        return fail(r, "a chunk-size line of the response is not hexadecimal");
    for (; isxdigit((unsigned char)*p); p++) {
        if (v > ((int64_t)1 << 40))
            return fail(r, "a chunk of the response is over 1 TiB");
        v = v * 16 +
            (isdigit((unsigned char)*p) ? *p - '0' : (tolower((unsigned char)*p) - 'a' + 10));
    }
    if (*p && *p != ';' && *p != ' ' && *p != '\t')
        return fail(r, "a chunk-size line of the response is not hexadecimal");
    r->left = v;
    r->state = v ? ST_CHUNK_DATA : ST_TRAILER;
    return LG_MORE;
}

/* Reads a line into r->line; 1 when complete (CR LF or LF stripped). */
static int take_line(struct lg_resp *r, const char **b, const char *end)
{
    while (*b < end) {
        char c = *(*b)++;
        if (c == '\n') {
            if (r->line_len && r->line[r->line_len - 1] == '\r')
                r->line_len--;
            r->line[r->line_len] = '\0';
            return 1;
        }
        if (r->line_len >= LG_LINE_MAX - 1)
            return -1;
        r->line[r->line_len++] = c;
    }
    return 0;
}

int lg_resp_feed(struct lg_resp *r, const char *buf, size_t n, lg_event_fn fn, void *user)
{
    const char *b = buf, *end = buf + n;
    int rc = LG_MORE;

    while (b < end && rc == LG_MORE) {
        switch (r->state) {
        case ST_STATUS:
        case ST_HEADER:
        case ST_CHUNK_SIZE:
        case ST_TRAILER: {
            int got = take_line(r, &b, end);
            if (got < 0)
                return fail(r, "a line of the response's head is over 8 KiB");
            if (!got)
                return LG_MORE;
            if (r->state == ST_STATUS)
                rc = status_line(r);
            else if (r->state == ST_HEADER)
                rc = header_line(r);
            else if (r->state == ST_CHUNK_SIZE)
                rc = chunk_size_line(r);
            else if (r->line[0] == '\0') {
                r->state = ST_END;
                rc = LG_DONE;
            }
            r->line_len = 0;
            break;
        }
        case ST_BODY:
        case ST_CHUNK_DATA: {
            size_t k = (size_t)(end - b);
            if (r->left >= 0 && (int64_t)k > r->left)
                k = (size_t)r->left;
            rc = body_bytes(r, b, k, fn, user);
            b += k;
            if (r->left >= 0)
                r->left -= (int64_t)k;
            if (rc == LG_MORE && r->left == 0) {
                if (r->state == ST_BODY) {
                    r->state = ST_END;
                    rc = LG_DONE;
                } else {
                    r->state = ST_CHUNK_CRLF;
                }
            }
            break;
        }
        case ST_CHUNK_CRLF: {
            int got = take_line(r, &b, end);
            if (got < 0 || (got && r->line_len))
                return fail(r, "a chunk of the response is longer than its size says");
            if (!got)
                return LG_MORE;
            r->line_len = 0;
            r->state = ST_CHUNK_SIZE;
            break;
        }
        default:
            return LG_DONE;
        }
    }
    if (rc == LG_MORE && r->state == ST_END)
        rc = LG_DONE;
    return rc;
}

int lg_resp_eof(struct lg_resp *r, lg_event_fn fn, void *user)
{
    if (r->state == ST_END)
        return LG_DONE;
    if (r->state == ST_BODY && r->length < 0) {
        int rc = LG_MORE;
        if (r->status == 200 && r->sse_len) { /* the last line had no line end */
            rc = sse_line(r, r->sse, r->sse_len, fn, user);
            r->sse_len = 0;
        }
        if (rc == LG_MORE && r->status == 200 && r->has_data)
            rc = sse_line(r, "", 0, fn, user);
        if (rc == LG_ERROR)
            return rc;
        r->state = ST_END;
        return rc == LG_STOP ? LG_STOP : LG_DONE;
    }
    if (r->state == ST_STATUS && r->status == 0 && r->line_len == 0)
        return fail(r, "the server closed the connection without answering");
    return fail(r, "the server closed the connection in the middle of its response");
}
