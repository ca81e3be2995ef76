/*
 * loadgen_sse.h: the reading half of bench/loadgen: an HTTP/1.1 response
 * parser fed bytes as they arrive (status line, headers, a body framed by
 * chunked transfer coding, Content-Length or the connection's end), the
 * server-sent events in a 200 body, and what one OpenAI-style event says
 * (text, finish_reason, usage.completion_tokens, an error). libc only, so
 * the load generator builds with `cc` alone on a GPU host (bench/README.md).
 * Every buffer is bounded; bad input ends the response with a sentence.
 */
#ifndef MFC_BENCH_LOADGEN_SSE_H
#define MFC_BENCH_LOADGEN_SSE_H

#include <stddef.h>
#include <stdint.h>

#define LG_LINE_MAX 8192               /* a status or header line, a chunk-size line */
#define LG_EVENT_MAX ((size_t)1 << 20) /* one event's data */
#define LG_ERRBODY_MAX 512             /* bytes of a non-200 body kept for the message */

/* What one event's JSON says (lg_json_scan). */
struct lg_event {
    int text;                  /* 1: a choice carried non-empty text (choices[].text or
                                  choices[].delta.content) */
    int finish;                /* 1: a choice had a string finish_reason */
    char finish_reason[24];    /* that string, cut to fit */
    int64_t completion_tokens; /* usage.completion_tokens, -1 when absent */
    int error;                 /* 1: an "error" member (object with message, or string) */
    char message[200];         /* its message, cut to fit */
};

/* Scans one event's JSON (n bytes at s, no NUL needed) into *ev. Returns 0,
 * or -1 when it is not one well-formed JSON value (ev then holds what was
 * found before the fault). Nesting deeper than 64 is refused. */
int lg_json_scan(const char *s, size_t n, struct lg_event *ev);

/* Called with each event's data (its "data:" lines joined by "\n"); return
 * nonzero to stop the response (lg_resp_feed then returns LG_STOP). */
typedef int (*lg_event_fn)(void *user, const char *data, size_t n);

enum {
    LG_MORE = 0,  /* the response needs more bytes */
    LG_DONE = 1,  /* the body ended as its framing says */
    LG_STOP = 2,  /* the event callback asked to stop */
    LG_ERROR = -1 /* malformed response: why says so */
};

struct lg_resp {
    int state;               /* parser state (loadgen_sse.c) */
    int status;              /* HTTP status, 0 before the status line */
    int chunked;             /* Transfer-Encoding: chunked */
    int64_t length;          /* Content-Length, -1 when absent */
    int64_t left;            /* body or chunk bytes still to come */
    char line[LG_LINE_MAX];  /* the line being read (status, header, chunk size) */
    size_t line_len;         /* bytes in line */
    char *sse;               /* owned: the SSE line being read */
    size_t sse_len, sse_cap; /* bytes in sse, allocated */
    char *data;              /* owned: the event's data lines so far */
    size_t data_len, data_cap;
    int has_data;                 /* a data line was seen for this event */
    char errbody[LG_ERRBODY_MAX]; /* a non-200 body's first bytes */
    size_t errlen;
    char why[200]; /* LG_ERROR's sentence */
};

void lg_resp_init(struct lg_resp *r);
void lg_resp_free(struct lg_resp *r); /* accepts a zeroed struct */
/* Feeds n bytes. A 200 response's events go to fn. Returns LG_MORE,
 * LG_DONE, LG_STOP or LG_ERROR (r->why). Bytes after the body's end are
 * ignored. */
int lg_resp_feed(struct lg_resp *r, const char *buf, size_t n, lg_event_fn fn, void *user);
/* The connection ended: LG_DONE when the body may end there (no length, not
 * chunked; an unterminated last event is dispatched), else LG_ERROR. */
int lg_resp_eof(struct lg_resp *r, lg_event_fn fn, void *user);

#endif
