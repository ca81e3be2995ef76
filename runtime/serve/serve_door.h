/*
 * serve_door.h: mfc-serve's front door: the listening socket, and every
 * connection until its request head is complete and valid (docs/api.md,
 * "Limits").
 *
 * libmicrohttpd answers a request it cannot parse with its own HTML page and
 * gives a connection a thread as soon as it is accepted. So mfc-serve accepts
 * connections itself, on one thread with epoll: a connection over the
 * per-client or total cap is answered 503, a head that does not arrive
 * within the read timeout 408, a head that is malformed or too large
 * 400/414/431/413/501/505, all as the documented JSON; only a connection
 * whose head is whole and valid is handed to libmicrohttpd
 * (MHD_add_connection), which reads it again (the door only peeks) and
 * answers it. Responses carry "Connection: close", so every request comes
 * through the door. Slow clients cost a descriptor here, not a thread.
 */
#ifndef MFC_SERVE_DOOR_H
#define MFC_SERVE_DOOR_H

#include <stddef.h>
#include <stdint.h>

#include <sys/socket.h>

#include "common/err.h"

struct serve;
struct MHD_Daemon;

#define SERVE_HEAD_MAX 32768      /* bytes of a request head (line and headers); beyond: 431 */
#define SERVE_TARGET_MAX 8192     /* bytes of the request target; beyond: 414 */
#define SERVE_HEADERS_MAX 100     /* header fields; beyond: 431 */
#define SERVE_BODY_MIN_RATE 65536 /* bytes/s a body must average past the read timeout */

/* ---- request heads (serve_head.c) ---- */

struct serve_head_limits {
    size_t max_head;   /* SERVE_HEAD_MAX */
    size_t max_target; /* SERVE_TARGET_MAX */
    size_t max_body;   /* a Content-Length above it is a 413 */
};

struct serve_head {
    int status;       /* 0: a good head; else the status to answer (400, 413, ...) */
    const char *code; /* the error's code ("invalid_request", "request_too_large", ...) */
    char msg[192];    /* the error's sentence */
    size_t len;       /* bytes of the head, its blank line included (good heads) */
    char method[16];  /* the method, cut ("" when the line is unreadable) */
    char path[160];   /* the target up to '?', cut; for the error's shape and the log */
    int ollama;       /* path starts with /api/: errors in Ollama's shape */
};

#define SERVE_HEAD_MORE 1 /* serve_head_parse: no blank line yet, and room for more */

/* Looks at the first n bytes a client sent (untrusted, any bytes). Returns
 * SERVE_HEAD_MORE when the head is incomplete and n < lim->max_head;
 * otherwise 0 with h filled: h->status 0 for a head libmicrohttpd will take
 * as it is (HTTP/1.0 or 1.1, Host with 1.1, one Content-Length of digits
 * or Transfer-Encoding: chunked, token names, no control bytes, no folded
 * lines), else the error to answer. Never reads past n. */
int serve_head_parse(const char *buf, size_t n, const struct serve_head_limits *lim,
                     struct serve_head *h);

/* The whole HTTP/1.1 response for an error of the door: status line,
 * JSON headers, "Connection: close", the body in OpenAI's shape (or
 * Ollama's with ollama set); Retry-After: 1 with retry. Into out (cap
 * bytes); returns its length, 0 when it does not fit. */
size_t serve_door_error(int status, const char *code, const char *msg, int ollama, int retry,
                        char *out, size_t cap);

/* ---- the door (serve_door.c) ---- */

struct serve_door;

/* Binds cfg.host:cfg.port (port 0: the kernel's pick, written back into
 * s->cfg.port), raises the descriptor limit to its maximum, and starts the
 * door's thread, which hands good connections to mhd (started with
 * MHD_USE_NO_LISTEN_SOCKET). MF_EIO naming the address. */
int serve_door_open(struct serve *s, struct MHD_Daemon *mhd, struct serve_door **out,
                    struct mf_err *err);
/* Stops accepting (the listening socket is closed), ends the thread and
 * closes the connections still in the door. Accepts NULL. */
void serve_door_close(struct serve_door *d);
/* libmicrohttpd's connection notifications (MHD_OPTION_NOTIFY_CONNECTION):
 * started (from inside the door's MHD_add_connection) or closed, when the
 * client's count drops. Thread-safe; accepts NULL d. */
void serve_door_notify(struct serve_door *d, int started, const struct sockaddr *addr,
                       socklen_t len);
/* The total connection cap in effect (cfg.max_connections, lowered to what
 * the descriptor limit allows). */
int serve_door_max_connections(const struct serve_door *d);

/* 1 when a body that began arriving at t0_ns (monotonic) and has brought
 * `got` bytes by now_ns is late: past the read timeout plus one second per
 * SERVE_BODY_MIN_RATE bytes. */
int serve_door_body_late(int read_timeout_s, int64_t t0_ns, int64_t now_ns, uint64_t got);

#endif
