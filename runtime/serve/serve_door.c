/*
 * serve_door.c: mfc-serve's front door (serve_door.h): one thread, epoll,
 * the listening socket, and every connection until its head is whole.
 *
 * Owns the listening socket, the epoll set, an eventfd that stops the
 * thread, the slots of the connections in the door, and the per-client
 * counts (guarded by mu: libmicrohttpd's threads drop them through
 * serve_door_notify). A connection's states:
 *
 *   accepted --under both caps [on_accept]----------> READING (counted)
 *   accepted --over a cap [on_accept]---------------> READING (reject: 503 once read)
 *   READING  --head whole and good [on_readable]----> handed to libmicrohttpd
 *   READING  --bad head, reject, deadline [answer]---> CLOSING (our JSON sent, FIN)
 *   CLOSING  --client's EOF or 2 s [close_conn]-----> closed
 *
 * Invariants: a connection is in a client's count from its accept until
 * the door closes it or libmicrohttpd reports it closed, never twice; the
 * door only peeks, so libmicrohttpd reads the head from the socket itself;
 * a slot holds a descriptor only in READING and CLOSING.
 */
#include "runtime/serve/serve_door.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/resource.h>

#include <microhttpd.h>

#include "runtime/serve/serve.h"

#define DOOR_BUCKETS 4096    /* per-client table buckets */
#define DOOR_SPARE 256       /* slots beyond the cap, for connections being refused */
#define DOOR_FD_RESERVE 128  /* descriptors kept for the model, logs, libmicrohttpd */
#define DOOR_MAX_PEEKS 64    /* reads of one head: a head in more pieces is refused */
#define DOOR_REJECT_MS 1000  /* how long a refused connection may take to send its head */
#define DOOR_LINGER_MS 2000  /* how long an answered connection is drained before close */
#define DOOR_HEALTH_SPARE 32 /* connections past the caps for GET /health (a liveness probe) */
#define DOOR_EV_LISTEN (-1)  /* epoll data of the listening socket */
#define DOOR_EV_WAKE (-2)    /* ... of the eventfd */

struct client {
    struct client *next;   /* the bucket's chain */
    unsigned char key[16]; /* IPv6 address, or IPv4 as ::ffff:a.b.c.d */
    int n;                 /* its connections, in the door or in libmicrohttpd */
};

enum conn_state { C_FREE, C_READING, C_CLOSING };

struct conn {
    int fd;                       /* the socket, or -1 */
    enum conn_state state;        /* see the diagram */
    int counted;                  /* 1: in its client's and the total count */
    const char *reject;           /* why it is answered 503 once its head is read, or NULL */
    int64_t deadline;             /* ms (monotonic): READING the head's, CLOSING the drain's */
    unsigned peeks;               /* MSG_PEEK reads so far */
    size_t seen;                  /* bytes the last peek saw */
    int64_t t0;                   /* accept time, ms */
    struct sockaddr_storage addr; /* the client */
    socklen_t alen;               /* its length */
    int next_free;                /* free list */
};

struct serve_door {
    struct serve *s;                     /* borrowed: config and log */
    struct MHD_Daemon *mhd;              /* borrowed: gets the good connections */
    int lfd;                             /* listening socket */
    int ep;                              /* epoll set */
    int wake;                            /* eventfd: stop */
    pthread_t th;                        /* the door's thread */
    int started;                         /* th was started */
    pthread_mutex_t mu;                  /* guards bucket[], total */
    struct client *bucket[DOOR_BUCKETS]; /* per-client counts */
    int total;                           /* counted connections (door and libmicrohttpd) */
    int max_total;                       /* cap on total */
    int per_client;                      /* cap per client address; 0: none */
    struct conn *conns;                  /* owned: n_conns slots */
    int n_conns;                         /* max_total + DOOR_SPARE */
    int free_head;                       /* first free slot, -1: none */
    int n_open;                          /* slots in use */
    int64_t listen_paused;               /* ms until which accept() is not retried (EMFILE), 0 */
    int saw_started;                     /* libmicrohttpd took the connection being handed over */
    char *buf;                           /* owned: SERVE_HEAD_MAX bytes for peeking */
    struct serve_head_limits lim;        /* head limits */
};

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- per-client counts ------------------------------------------------------------ */

static void key_of(const struct sockaddr *a, socklen_t len, unsigned char key[16])
{
    memset(key, 0, 16);
    if (a->sa_family == AF_INET6 && len >= (socklen_t)sizeof(struct sockaddr_in6)) {
        memcpy(key, &((const struct sockaddr_in6 *)a)->sin6_addr, 16);
    } else if (a->sa_family == AF_INET && len >= (socklen_t)sizeof(struct sockaddr_in)) {
        key[10] = key[11] = 0xff;
        memcpy(key + 12, &((const struct sockaddr_in *)a)->sin_addr, 4);
    }
}

static struct client **slot_of(struct serve_door *d, const unsigned char key[16])
{
    uint32_t h = 2166136261u;
    for (int i = 0; i < 16; i++)
        h = (h ^ key[i]) * 16777619u;
    struct client **p = &d->bucket[h % DOOR_BUCKETS];
    while (*p && memcmp((*p)->key, key, 16))
        p = &(*p)->next;
    return p;
}

#define WHY_FULL "the server is at its connection limit; retry later"
#define WHY_CLIENT "too many connections from this address; retry later"

static const char *refusal_code(const char *why)
{
    return !strcmp(why, WHY_CLIENT) ? "too_many_connections" : "service_unavailable";
}

/* Counts a new connection: NULL, or 503's reason when a cap is reached. */
static const char *count_add(struct serve_door *d, const struct sockaddr *a, socklen_t len)
{
    unsigned char key[16];
    const char *why = NULL;
    key_of(a, len, key);
    pthread_mutex_lock(&d->mu);
    struct client **p = slot_of(d, key);
    if (d->total >= d->max_total)
        why = WHY_FULL;
    else if (d->per_client && *p && (*p)->n >= d->per_client)
        why = WHY_CLIENT;
    else if (!*p && !(*p = calloc(1, sizeof **p)))
        why = "out of memory";
    if (!why) {
        memcpy((*p)->key, key, 16);
        (*p)->n++;
        d->total++;
    }
    pthread_mutex_unlock(&d->mu);
    return why;
}

/* Counts a GET /health past the caps (up to DOOR_HEALTH_SPARE more): a full
 * server still answers its liveness probe. 1 when counted. */
static int count_force(struct serve_door *d, const struct sockaddr *a, socklen_t len)
{
    unsigned char key[16];
    int ok = 0;
    key_of(a, len, key);
    pthread_mutex_lock(&d->mu);
    struct client **p = slot_of(d, key);
    if (d->total < d->max_total + DOOR_HEALTH_SPARE && (*p || (*p = calloc(1, sizeof **p)))) {
        memcpy((*p)->key, key, 16);
        (*p)->n++;
        d->total++;
        ok = 1;
    }
    pthread_mutex_unlock(&d->mu);
    return ok;
}

static void count_drop(struct serve_door *d, const struct sockaddr *a, socklen_t len)
{
    unsigned char key[16];
    key_of(a, len, key);
    pthread_mutex_lock(&d->mu);
    struct client **p = slot_of(d, key);
    if (*p) {
        d->total--;
        if (--(*p)->n <= 0) {
            struct client *c = *p;
            *p = c->next;
            free(c);
        }
    }
    pthread_mutex_unlock(&d->mu);
}

void serve_door_notify(struct serve_door *d, int started, const struct sockaddr *addr,
                       socklen_t len)
{
    if (!d)
        return;
    if (started) /* only ever from inside hand_over's MHD_add_connection */
        d->saw_started = 1;
    else if (addr)
        count_drop(d, addr, len);
}

int serve_door_max_connections(const struct serve_door *d)
{
    return d ? d->max_total : 0;
}

int serve_door_body_late(int read_timeout_s, int64_t t0_ns, int64_t now_ns, uint64_t got)
{
    int64_t allowed =
        (int64_t)read_timeout_s * 1000000000 + (int64_t)(got / SERVE_BODY_MIN_RATE) * 1000000000;
    return read_timeout_s > 0 && now_ns - t0_ns > allowed;
}

/* ---- connections ------------------------------------------------------------------ */

static void close_conn(struct serve_door *d, int i)
{
    struct conn *c = &d->conns[i];
    epoll_ctl(d->ep, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    if (c->counted)
        count_drop(d, (struct sockaddr *)&c->addr, c->alen);
    memset(c, 0, sizeof *c);
    c->fd = -1;
    c->next_free = d->free_head;
    d->free_head = i;
    d->n_open--;
}

/* Sends the door's answer, half-closes, and drains what the client still sends. */
static void answer(struct serve_door *d, int i, int status, const char *code, const char *msg,
                   int ollama, const char *method, const char *path)
{
    struct conn *c = &d->conns[i];
    char out[1024];
    size_t n = serve_door_error(status, code, msg, ollama, status == 503 || status == 429, out,
                                sizeof out);
    if (n && send(c->fd, out, n, MSG_NOSIGNAL | MSG_DONTWAIT) < 0)
        n = 0;
    shutdown(c->fd, SHUT_WR);
    c->state = C_CLOSING;
    c->deadline = now_ms() + DOOR_LINGER_MS;
    if (c->counted) { /* its place is free for others now */
        count_drop(d, (struct sockaddr *)&c->addr, c->alen);
        c->counted = 0;
    }
    mf_log_msg(&d->s->log, status == 408 || status == 503 ? MF_LOG_DEBUG : MF_LOG_INFO,
               "access method=%s path=%s status=%d ms=%lld door=1", method[0] ? method : "-",
               path[0] ? path : "-", status, (long long)(now_ms() - c->t0));
}

/* A good head: the connection goes to libmicrohttpd, still counted. */
static void hand_over(struct serve_door *d, int i)
{
    struct conn *c = &d->conns[i];
    int fd = c->fd, counted = c->counted;
    struct sockaddr_storage addr = c->addr;
    socklen_t alen = c->alen;
    epoll_ctl(d->ep, EPOLL_CTL_DEL, fd, NULL);
    memset(c, 0, sizeof *c);
    c->fd = -1;
    c->next_free = d->free_head;
    d->free_head = i;
    d->n_open--;
    d->saw_started = 0;
    if (MHD_add_connection(d->mhd, fd, (struct sockaddr *)&addr, alen) != MHD_YES &&
        !d->saw_started && counted) /* refused before it started: it is closed, uncounted */
        count_drop(d, (struct sockaddr *)&addr, alen);
}

static void on_readable(struct serve_door *d, int i)
{
    struct conn *c = &d->conns[i];
    struct serve_head h;
    if (c->state == C_CLOSING) {
        ssize_t n = recv(c->fd, d->buf, SERVE_HEAD_MAX, MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
            close_conn(d, i);
        return;
    }
    int avail = 0;
    if (ioctl(c->fd, FIONREAD, &avail) == 0 && avail > 0 && (size_t)avail == c->seen)
        return; /* nothing new since the last look */
    ssize_t n = recv(c->fd, d->buf, SERVE_HEAD_MAX, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
        close_conn(d, i); /* gone before its head was whole */
        return;
    }
    if (n < 0)
        return;
    c->seen = (size_t)n;
    int r = serve_head_parse(d->buf, (size_t)n, &d->lim, &h);
    if (r == SERVE_HEAD_MORE) {
        if (++c->peeks > DOOR_MAX_PEEKS)
            answer(d, i, 400, "invalid_request", "the request head came in too many pieces",
                   h.ollama, h.method, h.path);
        return;
    }
    if (c->reject && !h.status && !strcmp(h.path, "/health") &&
        (!strcmp(h.method, "GET") || !strcmp(h.method, "HEAD")) &&
        count_force(d, (struct sockaddr *)&c->addr, c->alen)) {
        c->reject = NULL;
        c->counted = 1;
    }
    if (h.status)
        answer(d, i, h.status, h.code, h.msg, h.ollama, h.method, h.path);
    else if (c->reject)
        answer(d, i, 503, refusal_code(c->reject), c->reject, h.ollama, h.method, h.path);
    else
        hand_over(d, i);
}

/* The last resort when no slot is free: answer at once, close. */
static void refuse_now(int fd)
{
    char out[512];
    size_t n = serve_door_error(503, "service_unavailable",
                                "the server is at its connection "
                                "limit; retry later",
                                0, 1, out, sizeof out);
    if (n)
        (void)!send(fd, out, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    close(fd);
}

static void on_accept(struct serve_door *d)
{
    for (int k = 0; k < 64; k++) {
        struct sockaddr_storage a;
        socklen_t al = sizeof a;
        int fd = accept4(d->lfd, (struct sockaddr *)&a, &al, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
                d->listen_paused = now_ms() + 100; /* the backlog holds them meanwhile */
                epoll_ctl(d->ep, EPOLL_CTL_DEL, d->lfd, NULL);
                mf_log_warn(&d->s->log, "out of descriptors: not accepting for 100 ms");
            }
            return;
        }
        if (d->free_head < 0) {
            refuse_now(fd);
            continue;
        }
        int i = d->free_head;
        struct conn *c = &d->conns[i];
        d->free_head = c->next_free;
        d->n_open++;
        memset(c, 0, sizeof *c);
        c->fd = fd;
        c->addr = a;
        c->alen = al;
        c->state = C_READING;
        c->t0 = now_ms();
        c->reject = count_add(d, (struct sockaddr *)&a, al);
        c->counted = !c->reject;
        c->deadline = c->t0 + (c->reject ? DOOR_REJECT_MS : d->s->cfg.read_timeout * 1000);
        struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.u64 = (uint64_t)i};
        if (epoll_ctl(d->ep, EPOLL_CTL_ADD, fd, &ev) != 0)
            close_conn(d, i);
    }
}

/* Deadlines: a head that did not come, a drain that did not end. */
static void expire(struct serve_door *d, int64_t now)
{
    char msg[96];
    snprintf(msg, sizeof msg, "the request did not arrive within %d s", d->s->cfg.read_timeout);
    for (int i = 0; i < d->n_conns; i++) {
        struct conn *c = &d->conns[i];
        if (c->state == C_FREE || c->deadline > now)
            continue;
        if (c->state == C_CLOSING)
            close_conn(d, i);
        else if (c->reject)
            answer(d, i, 503, refusal_code(c->reject), c->reject, 0, "", "");
        else
            answer(d, i, 408, "request_timeout", msg, 0, "", "");
    }
}

static void *door_main(void *arg)
{
    struct serve_door *d = arg;
    struct epoll_event ev[64];
    int64_t last_scan = now_ms();
    for (;;) {
        int n = epoll_wait(d->ep, ev, 64, 100);
        for (int k = 0; k < n; k++) {
            int64_t tag = (int64_t)ev[k].data.u64;
            if (tag == DOOR_EV_WAKE)
                return NULL;
            if (tag == DOOR_EV_LISTEN)
                on_accept(d);
            else if (tag >= 0 && tag < d->n_conns && d->conns[tag].state != C_FREE)
                on_readable(d, (int)tag);
        }
        int64_t now = now_ms();
        if (d->listen_paused && now >= d->listen_paused) {
            struct epoll_event le = {.events = EPOLLIN, .data.u64 = (uint64_t)DOOR_EV_LISTEN};
            d->listen_paused = 0;
            epoll_ctl(d->ep, EPOLL_CTL_ADD, d->lfd, &le);
        }
        if (now - last_scan >= 100) {
            expire(d, now);
            last_scan = now;
        }
    }
}

/* ---- opening and closing ---------------------------------------------------------- */

static int listen_on(struct serve *s, struct mf_err *err)
{
    struct sockaddr_in6 a6 = {0};
    struct sockaddr_in a4 = {0};
    struct sockaddr *sa;
    socklen_t sl;
    int fam, one = 1;
    if (inet_pton(AF_INET, s->cfg.host, &a4.sin_addr) == 1) {
        a4.sin_family = fam = AF_INET;
        a4.sin_port = htons((uint16_t)s->cfg.port);
        sa = (struct sockaddr *)&a4;
        sl = sizeof a4;
    } else if (inet_pton(AF_INET6, s->cfg.host, &a6.sin6_addr) == 1) {
        a6.sin6_family = fam = AF_INET6;
        a6.sin6_port = htons((uint16_t)s->cfg.port);
        sa = (struct sockaddr *)&a6;
        sl = sizeof a6;
    } else {
        return mf_err_set(err, MF_EUSAGE, "host \"%s\": expected an IPv4 or IPv6 address",
                          s->cfg.host);
    }
    int fd = socket(fam, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return mf_err_sys(err, MF_EIO, errno, "cannot create a socket");
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (fam == AF_INET6)
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
    if (bind(fd, sa, sl) != 0 || listen(fd, SOMAXCONN) != 0) {
        int e = errno;
        close(fd);
        return mf_err_sys(err, MF_EIO, e, "cannot listen on %s:%d (in use, or not allowed)",
                          s->cfg.host, s->cfg.port);
    }
    if (getsockname(fd, sa, &sl) == 0)
        s->cfg.port = ntohs(fam == AF_INET ? a4.sin_port : a6.sin6_port);
    return fd;
}

/* Raises the descriptor limit to the hard one; the connections that fit. */
static int fit_connections(struct serve *s)
{
    struct rlimit rl;
    int want = s->cfg.max_connections;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return want;
    if (rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
        getrlimit(RLIMIT_NOFILE, &rl);
    }
    rlim_t fit = rl.rlim_cur > DOOR_FD_RESERVE + 16 ? rl.rlim_cur - DOOR_FD_RESERVE : 16;
    if ((rlim_t)want > fit) {
        mf_log_warn(&s->log,
                    "the descriptor limit (ulimit -n %llu) allows %llu connections, "
                    "not MFC_MAX_CONNECTIONS=%d",
                    (unsigned long long)rl.rlim_cur, (unsigned long long)fit, want);
        want = (int)fit;
    }
    return want;
}

void serve_door_close(struct serve_door *d)
{
    if (!d)
        return;
    if (d->started) {
        uint64_t one = 1;
        (void)!write(d->wake, &one, sizeof one);
        pthread_join(d->th, NULL);
    }
    for (int i = 0; d->conns && i < d->n_conns; i++)
        if (d->conns[i].state != C_FREE)
            close_conn(d, i);
    for (int b = 0; b < DOOR_BUCKETS; b++)
        while (d->bucket[b]) {
            struct client *c = d->bucket[b];
            d->bucket[b] = c->next;
            free(c);
        }
    if (d->lfd >= 0)
        close(d->lfd);
    if (d->ep >= 0)
        close(d->ep);
    if (d->wake >= 0)
        close(d->wake);
    pthread_mutex_destroy(&d->mu);
    free(d->conns);
    free(d->buf);
    free(d);
}

int serve_door_open(struct serve *s, struct MHD_Daemon *mhd, struct serve_door **out,
                    struct mf_err *err)
{
    struct serve_door *d = calloc(1, sizeof *d);
    *out = NULL;
    if (!d)
        return mf_err_set(err, MF_ENOMEM, "out of memory");
    d->s = s;
    d->mhd = mhd;
    d->lfd = d->ep = d->wake = -1;
    pthread_mutex_init(&d->mu, NULL);
    d->max_total = fit_connections(s);
    d->per_client = s->cfg.max_conns_per_client;
    d->n_conns = d->max_total + DOOR_SPARE;
    d->lim = (struct serve_head_limits){SERVE_HEAD_MAX, SERVE_TARGET_MAX, s->cfg.max_body};
    d->conns = calloc((size_t)d->n_conns, sizeof *d->conns);
    d->buf = malloc(SERVE_HEAD_MAX);
    int rc = d->conns && d->buf ? 0 : mf_err_set(err, MF_ENOMEM, "out of memory");
    for (int i = 0; !rc && i < d->n_conns; i++) {
        d->conns[i].fd = -1;
        d->conns[i].next_free = i + 1 < d->n_conns ? i + 1 : -1;
    }
    if (!rc && (d->lfd = listen_on(s, err)) < 0)
        rc = err->code;
    if (!rc && ((d->ep = epoll_create1(EPOLL_CLOEXEC)) < 0 ||
                (d->wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0))
        rc = mf_err_sys(err, MF_EIO, errno, "cannot create the front door's epoll set");
    struct epoll_event le = {.events = EPOLLIN, .data.u64 = (uint64_t)DOOR_EV_LISTEN};
    struct epoll_event we = {.events = EPOLLIN, .data.u64 = (uint64_t)DOOR_EV_WAKE};
    if (!rc && (epoll_ctl(d->ep, EPOLL_CTL_ADD, d->lfd, &le) != 0 ||
                epoll_ctl(d->ep, EPOLL_CTL_ADD, d->wake, &we) != 0))
        rc = mf_err_sys(err, MF_EIO, errno, "cannot watch the listening socket");
    if (!rc && pthread_create(&d->th, NULL, door_main, d) != 0)
        rc = mf_err_set(err, MF_ENOMEM, "cannot start the front door's thread");
    if (rc) {
        serve_door_close(d);
        return rc;
    }
    d->started = 1;
    *out = d;
    return 0;
}
