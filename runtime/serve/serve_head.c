/*
 * serve_head.c: the front door's reading of a request head (serve_door.h):
 * the request line and header fields of HTTP/1.1 (RFC 9112), checked at
 * least as strictly as libmicrohttpd checks them, so that a head the door
 * passes never makes libmicrohttpd answer with its own HTML page; and the
 * JSON error responses the door sends itself.
 *
 * Untrusted input: every read is bounded by n; nothing is allocated but the
 * error body; a line is judged as soon as it is complete, so garbage is
 * answered without waiting for the rest. Stricter than RFC 9112 where it
 * guards against request smuggling: a folded line, a bare CR, Content-Length
 * with Transfer-Encoding, two different Content-Lengths, a transfer coding
 * other than chunked are all 4xx/501.
 */
#include "runtime/serve/serve_door.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <jansson.h>

/* Parsing state across the head's lines. */
struct scan {
    const struct serve_head_limits *lim;
    struct serve_head *h;
    int minor;             /* HTTP/1.minor */
    int n_fields;          /* header fields so far */
    int hosts;             /* Host fields */
    int have_cl;           /* a Content-Length was seen */
    unsigned long long cl; /* its value */
    int te;                /* Transfer-Encoding fields */
};

static int fail(struct serve_head *h, int status, const char *code, const char *msg)
{
    h->status = status;
    h->code = code;
    snprintf(h->msg, sizeof h->msg, "%s", msg);
    return 0;
}

static int tchar(unsigned char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c && strchr("!#$%&'*+-.^_`|~", c));
}

/* The request line, s[0..n) without its line end. */
static int request_line(struct scan *sc, const char *s, size_t n)
{
    struct serve_head *h = sc->h;
    size_t m = 0, t, v;
    while (m < n && tchar((unsigned char)s[m]))
        m++;
    if (m == 0 || m >= sizeof h->method || m == n || s[m] != ' ')
        return fail(h, 400, "invalid_request",
                    "malformed request line: expected METHOD "
                    "TARGET HTTP/1.1");
    memcpy(h->method, s, m);
    h->method[m] = '\0';
    for (t = m + 1; t < n && (unsigned char)s[t] > 0x20 && s[t] != 0x7f; t++)
        ;
    size_t tl = t - m - 1, pl = 0;
    while (pl < tl && s[m + 1 + pl] != '?')
        pl++;
    snprintf(h->path, sizeof h->path, "%.*s", (int)(pl < sizeof h->path ? pl : sizeof h->path - 1),
             s + m + 1);
    h->ollama = !strncmp(h->path, "/api/", 5);
    if (tl > sc->lim->max_target)
        return fail(h, 414, "uri_too_long", "the request target is longer than the limit");
    if (tl == 0 || t == n || s[t] != ' ')
        return fail(h, 400, "invalid_request",
                    "malformed request line: expected METHOD "
                    "TARGET HTTP/1.1");
    v = t + 1;
    if (n - v != 8 || strncmp(s + v, "HTTP/", 5) || s[v + 6] != '.' || s[v + 5] < '0' ||
        s[v + 5] > '9' || s[v + 7] < '0' || s[v + 7] > '9')
        return fail(h, 400, "invalid_request",
                    "malformed request line: expected METHOD "
                    "TARGET HTTP/1.1");
    if (s[v + 5] != '1' || s[v + 7] > '1')
        return fail(h, 505, "http_version_not_supported",
                    "only HTTP/1.0 and HTTP/1.1 are "
                    "served");
    sc->minor = s[v + 7] - '0';
    return 1;
}

/* Content-Length: digits only (at most 18: no overflow), all copies equal. */
static int content_length(struct scan *sc, const char *v, size_t n)
{
    unsigned long long x = 0;
    if (n == 0 || n > 18)
        return fail(sc->h, 400, "invalid_request", "Content-Length is not a number of bytes");
    for (size_t i = 0; i < n; i++) {
        if (v[i] < '0' || v[i] > '9')
            return fail(sc->h, 400, "invalid_request",
                        "Content-Length is not a number of "
                        "bytes");
        x = x * 10 + (unsigned long long)(v[i] - '0');
    }
    if (sc->have_cl && x != sc->cl)
        return fail(sc->h, 400, "invalid_request", "two different Content-Length headers");
    sc->have_cl = 1;
    sc->cl = x;
    return 1;
}

/* One header field, s[0..n) without its line end. */
static int field(struct scan *sc, const char *s, size_t n)
{
    struct serve_head *h = sc->h;
    size_t k = 0;
    if (s[0] == ' ' || s[0] == '\t')
        return fail(h, 400, "invalid_request", "folded header lines are not accepted");
    if (++sc->n_fields > SERVE_HEADERS_MAX)
        return fail(h, 431, "request_header_fields_too_large",
                    "more header fields than the "
                    "limit");
    while (k < n && tchar((unsigned char)s[k]))
        k++;
    if (k == 0 || k == n || s[k] != ':')
        return fail(h, 400, "invalid_request", "malformed header line: expected NAME: VALUE");
    size_t a = k + 1, b = n;
    for (size_t i = a; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if ((c < 0x20 && c != '\t') || c == 0x7f)
            return fail(h, 400, "invalid_request", "a header value holds a control character");
    }
    while (a < b && (s[a] == ' ' || s[a] == '\t'))
        a++;
    while (b > a && (s[b - 1] == ' ' || s[b - 1] == '\t'))
        b--;
    if (k == 4 && !strncasecmp(s, "host", 4)) {
        if (++sc->hosts > 1)
            return fail(h, 400, "invalid_request", "more than one Host header");
    } else if (k == 14 && !strncasecmp(s, "content-length", 14)) {
        return content_length(sc, s + a, b - a);
    } else if (k == 17 && !strncasecmp(s, "transfer-encoding", 17)) {
        if (++sc->te > 1 || b - a != 7 || strncasecmp(s + a, "chunked", 7))
            return fail(h, 501, "not_implemented",
                        "the only Transfer-Encoding served is "
                        "chunked");
    }
    return 1;
}

/* After the blank line: what the fields say together. */
static int whole(struct scan *sc)
{
    struct serve_head *h = sc->h;
    if (sc->minor == 1 && !sc->hosts)
        return fail(h, 400, "invalid_request", "an HTTP/1.1 request needs a Host header");
    if (sc->have_cl && sc->te)
        return fail(h, 400, "invalid_request", "Content-Length and Transfer-Encoding together");
    if (sc->have_cl && sc->cl > sc->lim->max_body) {
        char m[128];
        snprintf(m, sizeof m, "request body of %llu bytes is over the limit of %zu bytes", sc->cl,
                 sc->lim->max_body);
        return fail(h, 413, "request_too_large", m);
    }
    return 0;
}

int serve_head_parse(const char *buf, size_t n, const struct serve_head_limits *lim,
                     struct serve_head *h)
{
    struct scan sc = {.lim = lim, .h = h};
    size_t at = 0;
    int line = 0;
    memset(h, 0, sizeof *h);
    while (at < n && (buf[at] == '\n' || (buf[at] == '\r' && at + 1 < n && buf[at + 1] == '\n')))
        at += buf[at] == '\r' ? 2 : 1; /* RFC 9112 2.2: blank lines first are ignored */
    while (at < n) {
        const char *nl = memchr(buf + at, '\n', n - at);
        if (!nl) {
            if (!line && n - at > lim->max_target + 32) /* method, spaces, version */
                return fail(h, 414, "uri_too_long",
                            "the request target is longer than the "
                            "limit");
            break;
        }
        size_t end = (size_t)(nl - buf), len = end - at;
        if (len && buf[end - 1] == '\r')
            len--;
        if (memchr(buf + at, '\r', len) || memchr(buf + at, '\0', len))
            return fail(h, 400, "invalid_request", "a bare CR or a NUL byte in the request head");
        if (len == 0 && line) {
            h->len = end + 1;
            if (h->len > lim->max_head)
                return fail(h, 431, "request_header_fields_too_large",
                            "the request head is "
                            "larger than the limit");
            return whole(&sc);
        }
        int ok = line ? field(&sc, buf + at, len) : request_line(&sc, buf + at, len);
        if (!ok)
            return 0;
        line++;
        at = end + 1;
    }
    if (n < lim->max_head)
        return SERVE_HEAD_MORE;
    return fail(h, 431, "request_header_fields_too_large",
                "the request head is larger than "
                "the limit");
}

/* ---- the door's own answers ------------------------------------------------------ */

static const char *reason(int status)
{
    switch (status) {
    case 400:
        return "Bad Request";
    case 408:
        return "Request Timeout";
    case 413:
        return "Content Too Large";
    case 414:
        return "URI Too Long";
    case 429:
        return "Too Many Requests";
    case 431:
        return "Request Header Fields Too Large";
    case 501:
        return "Not Implemented";
    case 503:
        return "Service Unavailable";
    case 505:
        return "HTTP Version Not Supported";
    default:
        return "Error";
    }
}

size_t serve_door_error(int status, const char *code, const char *msg, int ollama, int retry,
                        char *out, size_t cap)
{
    const char *type = status == 429   ? "rate_limit_error"
                       : status >= 500 ? "server_error"
                                       : "invalid_request_error";
    json_t *v = ollama ? json_pack("{s:s}", "error", msg)
                       : json_pack("{s:{s:s, s:s, s:n, s:s}}", "error", "message", msg, "type",
                                   type, "param", "code", code);
    char *body = v ? json_dumps(v, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(v);
    if (!body)
        return 0;
    int k = snprintf(out, cap,
                     "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: "
                     "%zu\r\nConnection: close\r\n%s\r\n%s",
                     status, reason(status), strlen(body), retry ? "Retry-After: 1\r\n" : "", body);
    free(body);
    return k > 0 && (size_t)k < cap ? (size_t)k : 0;
}
