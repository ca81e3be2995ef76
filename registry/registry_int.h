/*
 * registry_int.h: what registry.c (references, challenges, the HTTP client),
 * registry_auth.c (credentials) and registry_xfer.c (push, pull) share. Not
 * an API.
 */
#ifndef MFC_REGISTRY_INT_H
#define MFC_REGISTRY_INT_H

#include <curl/curl.h>

#include "common/buf.h"
#include "registry/registry.h"

#define REGISTRY_LOCATION_MAX 4096 /* bytes of a Location header we keep */
#define REGISTRY_ERRBODY_MAX 4096  /* bytes of an error reply we read for its message */
#define REGISTRY_TOKEN_MAX (64u << 10)

/* A session with one registry: one curl handle (keeps the connection), the
 * Authorization value that works, the credentials to earn a new one. */
struct registry_client {
    CURL *curl;                       /* owned */
    const struct registry_opts *o;    /* borrowed */
    struct registry_stats *st;        /* borrowed, never NULL */
    char base[REGISTRY_REALM_MAX + 16]; /* "https://host" or "http://host" (or a token realm) */
    char host[REGISTRY_HOST_MAX];     /* for messages */
    char repo[REGISTRY_REPO_MAX];     /* the repository scopes ask for */
    const char *actions;              /* "pull" or "pull,push" */
    struct registry_cred cred;        /* owned copy, wiped on close */
    char *authz;                      /* owned: "Basic …" / "Bearer …", or NULL (anonymous) */
    char errbuf[CURL_ERROR_SIZE];     /* libcurl's detail for the last failure */
};

/* Bytes of one blob on a progress job (registry_opts.progress), reported
 * at most every REGISTRY_PROGRESS_STEP bytes. */
#define REGISTRY_PROGRESS_STEP (1u << 20)
struct registry_meter {
    struct progress *pg; /* borrowed, or NULL: no reports */
    int id;              /* its job */
    uint64_t total;      /* the blob's size */
    uint64_t shown;      /* bytes at the last report */
};

/* Reports done bytes to m when they moved a step on, or reached the total. */
void registry_meter_update(struct registry_meter *m, uint64_t done);

/* Where a request's body comes from: memory, or a byte range of a file. */
struct registry_body {
    const void *mem;              /* borrowed, or NULL */
    int fd;                       /* with mem NULL: read from here with pread, or -1 for no body */
    uint64_t off;                 /* first byte of the range */
    uint64_t len;                 /* bytes to send */
    struct registry_meter *meter; /* borrowed, or NULL: off is reported as sent */
};

/* One request and its final response. */
struct registry_req {
    const char *method;                /* "GET", "HEAD", "POST", "PUT", "PATCH" */
    const char *url;                   /* absolute */
    const char *accept;                /* Accept value, or NULL */
    const char *content_type;          /* Content-Type of the body, or NULL */
    const char *content_range;         /* "a-b" for PATCH, or NULL */
    uint64_t range_from;               /* nonzero: "Range: bytes=N-" */
    struct registry_body body;         /* what we send */
    struct mf_buf *out;                /* 2xx body goes here (bounded by its max), or NULL */
    struct store_blob_writer *w;       /* or here, at most w_max bytes in all */
    uint64_t w_max;                    /* the descriptor's size */
    struct registry_meter *meter;      /* borrowed, or NULL: w's size is reported */
    /* filled from the response */
    long status;                       /* 0 when nothing came back */
    char location[REGISTRY_LOCATION_MAX]; /* Location, or "" */
    char digest[STORE_DIGEST_BUF];     /* Docker-Content-Digest when valid, or "" */
    char content_type_got[STORE_MEDIA_TYPE_MAX]; /* Content-Type, or "" */
    uint64_t range_start;              /* Content-Range start of a 206 */
    char challenge[REGISTRY_CHALLENGE_MAX]; /* WWW-Authenticate (Bearer preferred), or "" */
    char errmsg[256];                  /* errors[0] of an error reply, printable, or "" */
    struct mf_err werr;                /* a failure inside a callback */
    int failed;                        /* nonzero: werr is set */
    int body_started;                  /* nonzero: the 2xx body has begun (internal) */
    struct mf_buf errbody;             /* error reply bytes (internal) */
};

/* Opens a session for ref; actions is "pull" or "pull,push". Looks the
 * credentials up but sends nothing. On failure *c is NULL. */
int registry_client_open(struct registry_client **c, const struct registry_ref *ref,
                         const char *actions, const struct registry_opts *o,
                         struct registry_stats *st, struct mf_err *err);
/* Wipes credentials and tokens, frees. Accepts NULL. */
void registry_client_close(struct registry_client *c);
/* Sends r, answering one 401 through the Basic or Bearer flow and sending
 * again. Returns 0 with r->status set for any HTTP reply but a final 401
 * (MF_EINVAL: "authentication failed for HOST"); MF_ENET when the registry
 * cannot be reached. */
int registry_client_do(struct registry_client *c, struct registry_req *r, struct mf_err *err);
/* GET /v2/: checks the registry speaks the API and earns an Authorization
 * value. With --insecure a registry without TLS is retried over http. */
int registry_client_ping(struct registry_client *c, struct mf_err *err);
/* Fails with one sentence for an unexpected status: 404, 413, 429, 5xx. */
int registry_client_status_error(struct registry_client *c, const struct registry_req *r,
                                 const char *what, struct mf_err *err);

/* Where blobs were last seen on a registry host (a store cache record), so a
 * push to another repository there can mount instead of upload. Best effort:
 * a lost or raced record only costs an upload. */
struct registry_push_sources;
int registry_push_sources_load(struct store *s, const char *host,
                               struct registry_push_sources **out);
/* borrowed: the repository digest was seen in, or NULL. */
const char *registry_push_sources_find(const struct registry_push_sources *ps, const char *digest);
/* Records digests as present in repo and saves the record; failures ignored. */
void registry_push_sources_note(struct registry_push_sources *ps, const char *repo,
                                const struct store_desc *d, size_t n);
void registry_push_sources_free(struct registry_push_sources *ps);

/* An absolute URL for a Location header (absolute, or a path on our base). */
int registry_client_url(const struct registry_client *c, const char *loc, const char *query,
                        struct mf_buf *u, struct mf_err *err);

/* base64 (RFC 4648, with padding). Encode: *out malloc'd. Decode: at most
 * cap - 1 bytes, NUL-terminated; MF_EFORMAT on bad input. */
int registry_b64_encode(const void *p, size_t n, char **out, struct mf_err *err);
int registry_b64_decode(const char *s, size_t n, char *out, size_t cap, size_t *len,
                        struct mf_err *err);

/* The auth-file key for a domain ("https://index.docker.io/v1/" for docker.io). */
const char *registry_auth_key(const char *domain);

#endif
