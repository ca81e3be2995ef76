/*
 * registry.h: an OCI distribution client: push and pull images between the
 * store and a registry, and the credentials it needs (mfc login/logout).
 *
 *   registry_ref_parse("127.0.0.1:5000/team/m:v1")  -> host, repository, tag
 *   registry_push(s, "m:v1", "127.0.0.1:5000/team/m:v1", &o, &stats, err)
 *   registry_pull(s, "127.0.0.1:5000/team/m:v1", NULL, &o, &stats, err)
 *
 * Everything a registry sends is untrusted: replies are size-limited,
 * headers bounds-checked, manifests and blobs verified by digest before they
 * enter the store. A failed pull leaves the store's tags as they were. No
 * function here prints or logs a credential; errors name the registry host,
 * never a user name, password or token.
 */
#ifndef MFC_REGISTRY_H
#define MFC_REGISTRY_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "common/progress.h"
#include "store/store.h"

#define REGISTRY_HOST_MAX 256  /* host[:port], plus NUL */
#define REGISTRY_REPO_MAX 256  /* the distribution spec's name limit, plus NUL */
#define REGISTRY_TAG_MAX 129   /* [A-Za-z0-9_][A-Za-z0-9._-]{0,127}, plus NUL */
#define REGISTRY_REALM_MAX 1024
#define REGISTRY_PARAM_MAX 1024
#define REGISTRY_CHALLENGE_MAX 8192 /* bytes of a WWW-Authenticate value we parse */
#define REGISTRY_USER_MAX 256
#define REGISTRY_SECRET_MAX 4096
#define REGISTRY_AUTH_FILE_MAX (1u << 20) /* bytes of an auth file we parse */

/* A parsed image reference, docker style. */
struct registry_ref {
    char host[REGISTRY_HOST_MAX];   /* where requests go: "registry-1.docker.io", "127.0.0.1:5000" */
    char domain[REGISTRY_HOST_MAX]; /* as written ("docker.io" when none was); the auth key */
    char repo[REGISTRY_REPO_MAX];   /* "library/alpine", "team/m" */
    char tag[REGISTRY_TAG_MAX];     /* "latest" when neither tag nor digest was given; or "" */
    char digest[STORE_DIGEST_BUF];  /* "sha256:<hex>" after '@', or "" */
    int plain_http;                 /* nonzero: localhost / 127.0.0.1 / [::1], http by default */
};

/* One WWW-Authenticate challenge. */
struct registry_challenge {
    char scheme[16];                  /* "Basic" or "Bearer" (as sent, compared case-insensitively) */
    char realm[REGISTRY_REALM_MAX];   /* Bearer: the token server URL */
    char service[REGISTRY_PARAM_MAX]; /* Bearer: service=, or "" */
    char scope[REGISTRY_PARAM_MAX];   /* Bearer: scope=, or "" */
};

/* Credentials for one registry. Zero them (registry_cred_wipe) after use. */
struct registry_cred {
    char user[REGISTRY_USER_MAX];     /* "" for anonymous; "<token>" for an identity token */
    char secret[REGISTRY_SECRET_MAX]; /* password or token; never printed */
};

struct registry_opts {
    int insecure;              /* nonzero: http, or https without verification (--insecure) */
    uint64_t chunk_size;       /* blobs larger than this go up in PATCH chunks of this size */
    struct progress *progress; /* borrowed, may be NULL */
    long connect_timeout_s;    /* default 15 */
    long stall_timeout_s;      /* a transfer with no byte for this long fails (default 60) */
    const char *auth_file;     /* borrowed: $REGISTRY_AUTH_FILE, or NULL */
    const char *docker_config; /* borrowed: path of ~/.docker/config.json, or NULL */
};

/* What went over the wire, for -v and for tests that count uploads. */
struct registry_stats {
    uint64_t blobs_present;  /* HEAD said the registry already had them */
    uint64_t blobs_mounted;  /* cross-repository mounts that succeeded */
    uint64_t blobs_uploaded; /* blobs whose bytes we sent */
    uint64_t blob_puts;      /* PUT requests that carried blob bytes */
    uint64_t blob_patches;   /* PATCH requests (chunks) */
    uint64_t bytes_up;       /* blob bytes sent */
    uint64_t blobs_fetched;  /* blobs downloaded on pull */
    uint64_t bytes_down;     /* blob bytes received */
};

/* Defaults (above); auth_file and docker_config from REGISTRY_AUTH_FILE,
 * DOCKER_CONFIG and HOME (strings borrowed from environ). */
void registry_opts_init(struct registry_opts *o);

/* References and challenges (untrusted text; exported for tests and the fuzzer). */

/* Parses "[host[:port]/]repo[:tag][@sha256:<hex>]". No host means docker.io
 * (requests go to registry-1.docker.io, one-component names get "library/").
 * On failure r is zeroed and err names the reference. */
int registry_ref_parse(const char *s, struct registry_ref *r, struct mf_err *err);
/* Parses one WWW-Authenticate value of at most len bytes (a Bearer
 * challenge is preferred when several are listed). On failure c is zeroed. */
int registry_challenge_parse(const char *v, size_t len, struct registry_challenge *c,
                             struct mf_err *err);

/* Credentials. */

/* Finds credentials for domain in an auth file's text (docker config.json or
 * podman auth.json): auths.<key>.auth (base64 "user:pass"), username and
 * password, or identitytoken. *helper gets the credential helper to ask
 * instead (credHelpers.<domain>, else credsStore), or "". MF_ENOTFOUND when
 * the file names neither; c is zeroed then. */
int registry_auth_parse(const char *text, size_t len, const char *domain, struct registry_cred *c,
                        char helper[64], struct mf_err *err);
/* Looks domain up in o->auth_file, then o->docker_config, asking a
 * docker-credential-<helper> where one is named. No credentials at all is
 * not an error: c is zeroed (anonymous). */
int registry_auth_lookup(const struct registry_opts *o, const char *domain,
                         struct registry_cred *c, struct mf_err *err);
/* Zeroes c so no secret stays in memory. Accepts NULL. */
void registry_cred_wipe(struct registry_cred *c);

/* Checks user/secret against the registry (GET /v2/ through the auth flow),
 * then stores them for domain in o->auth_file if set, else o->docker_config
 * (atomic write, mode 0600). On failure the file is unchanged. */
int registry_login(const struct registry_opts *o, const char *registry, const char *user,
                   const char *secret, struct mf_err *err);
/* Removes domain's entry; MF_ENOTFOUND when there was none. */
int registry_logout(const struct registry_opts *o, const char *registry, struct mf_err *err);

/* Push and pull. */

/* Pushes the image `local` (a tag or digest in s) to `remote` (a reference;
 * NULL: local itself). Blobs first (HEAD-skip, mount, monolithic or chunked
 * upload), the manifest last. *manifest_digest gets the pushed digest. */
int registry_push(struct store *s, const char *local, const char *remote,
                  const struct registry_opts *o, struct registry_stats *st,
                  char manifest_digest[STORE_DIGEST_BUF], struct mf_err *err);
/* Pulls `remote` (an OCI/Docker manifest, or an index/list: linux/amd64),
 * verifying every blob, and tags it as `local` (NULL: remote as written).
 * On failure no tag changes; verified blobs may stay for gc. */
int registry_pull(struct store *s, const char *remote, const char *local,
                  const struct registry_opts *o, struct registry_stats *st,
                  char manifest_digest[STORE_DIGEST_BUF], struct mf_err *err);

/* One manifest and the blobs a caller picks from it (FROM/ADAPTER by a
 * registry reference pull only the GGUF layer and the small config layers):
 *
 *   registry_pull_open(remote)      parse, look credentials up, GET /v2/
 *   registry_pull_manifest(ps)      the manifest (an index: its linux/amd64
 *                                   entry), verified against the pin or
 *                                   Docker-Content-Digest; *text malloc'd
 *   registry_pull_blob(ps, s, d)    one blob into s (skipped when present),
 *                                   resumable, verified; nothing stored on a
 *                                   mismatch (MF_EINTEGRITY)
 *
 * Nothing here sets a tag. st may be NULL. On failure *out is NULL. */
struct registry_pull_session;
int registry_pull_open(const char *remote, const struct registry_opts *o,
                       struct registry_stats *st, struct registry_pull_session **out,
                       struct mf_err *err);
int registry_pull_manifest(struct registry_pull_session *ps, char **text, size_t *len,
                           struct store_desc *m, struct mf_err *err);
int registry_pull_blob(struct registry_pull_session *ps, struct store *s,
                       const struct store_desc *d, struct mf_err *err);
/* borrowed: the repository ("library/llama3"), for messages. */
const char *registry_pull_where(const struct registry_pull_session *ps);
/* Wipes credentials, frees. Accepts NULL. */
void registry_pull_close(struct registry_pull_session *ps);

#endif
