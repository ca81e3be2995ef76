/*
 * registry_push.c: `mfc push`: an image from the store to a registry.
 *
 * Upload state machine of one blob [push_blob]:
 *
 *   CHECK    --HEAD 200 [blob_present]---------------------------------> DONE (present)
 *   CHECK    --404, known in repo R on this host [start_upload]--------> MOUNT
 *   CHECK    --404, not known [start_upload]---------------------------> STARTED
 *   MOUNT    --POST ?mount=&from=R 201---------------------------------> DONE (mounted)
 *   MOUNT    --202 + Location (registry chose to upload)---------------> STARTED
 *   STARTED  --size <= chunk_size: PUT Location?digest= + body [put_whole]--> DONE
 *   STARTED  --PATCH Content-Range a-b, 202 + new Location [put_chunks]-> STARTED
 *   STARTED  --all chunks sent: PUT Location?digest=, no body----------> DONE (uploaded)
 *   any      --413 / 4xx / 5xx / unreachable--------------------------> FAILED
 *
 * Image order [registry_push]: config and layers (each through the machine
 * above), then the manifest by tag: a registry may refuse a manifest whose
 * blobs it lacks (oci.md section 2). Invariants: (1) the manifest is sent as
 * the exact bytes of the stored blob, so its digest is the local one; (2) a
 * failed push changes nothing locally; (3) the blob-sources record is
 * written only after the manifest is accepted.
 */
#include "registry/registry.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/json.h"
#include "common/sha256.h"
#include "image/oci.h"
#include "registry/registry_int.h"

#define SOURCES_MAX 4000 /* blobs remembered per host: ~100 bytes each, under the 1 MB record */

/* ---- blob sources (for cross-repository mounts) ----------------------------------- */

struct registry_push_sources {
    struct store *s;                /* borrowed */
    char key[STORE_DIGEST_BUF];     /* the cache record's key: H("mfc blob sources " host) */
    json_t *rec;                    /* owned: {"host":..., "blobs":{"<hex>":"repo"}} */
};

int registry_push_sources_load(struct store *s, const char *host,
                               struct registry_push_sources **out)
{
    struct registry_push_sources *ps = calloc(1, sizeof *ps);
    if (!ps)
        return MF_ENOMEM;
    char seed[REGISTRY_HOST_MAX + 32];
    uint8_t d[MF_SHA256_LEN];
    char hex[MF_SHA256_HEX_LEN + 1];
    int n = snprintf(seed, sizeof seed, "mfc blob sources %s", host);
    if (mf_sha256_mem(seed, (size_t)n, d, NULL) != 0) {
        free(ps);
        return MF_ENOMEM;
    }
    mf_sha256_hex(d, hex);
    snprintf(ps->key, sizeof ps->key, "sha256:%s", hex);
    ps->s = s;
    if (store_cache_get(s, ps->key, &ps->rec, NULL) != 0 ||
        !json_is_object(json_object_get(ps->rec, "blobs"))) {
        json_decref(ps->rec);
        ps->rec = json_pack("{s:s, s:{}}", "host", host, "blobs");
    }
    *out = ps;
    return ps->rec ? 0 : MF_ENOMEM;
}

const char *registry_push_sources_find(const struct registry_push_sources *ps, const char *digest)
{
    if (!ps || !ps->rec || !store_digest_valid(digest))
        return NULL;
    const char *repo = json_string_value(json_object_get(json_object_get(ps->rec, "blobs"),
                                                         digest + 7));
    return repo && strlen(repo) < REGISTRY_REPO_MAX ? repo : NULL;
}

void registry_push_sources_note(struct registry_push_sources *ps, const char *repo,
                                const struct store_desc *d, size_t n)
{
    json_t *blobs = ps && ps->rec ? json_object_get(ps->rec, "blobs") : NULL;
    if (!blobs)
        return;
    if (json_object_size(blobs) + n > SOURCES_MAX)
        json_object_clear(blobs); /* forget the oldest in one go; costs uploads, not errors */
    for (size_t i = 0; i < n; i++)
        json_object_set_new(blobs, d[i].digest + 7, json_string(repo));
    store_cache_put(ps->s, ps->key, ps->rec, NULL);
}

void registry_push_sources_free(struct registry_push_sources *ps)
{
    if (!ps)
        return;
    json_decref(ps->rec);
    free(ps);
}

/* ---- one blob --------------------------------------------------------------------- */

struct push {
    struct registry_client *c;         /* borrowed */
    struct store *s;                   /* borrowed */
    const struct registry_ref *ref;    /* borrowed: the destination */
    struct registry_push_sources *src; /* borrowed */
    char what[160];                    /* "blob sha256:… (N bytes)" for messages */
    struct registry_meter *meter;      /* the blob being sent's progress, or NULL */
};

static int blob_present(struct push *p, const struct store_desc *d, int *present,
                        struct mf_err *err)
{
    struct mf_buf u;
    mf_buf_init(&u, 2048);
    int rc = mf_buf_printf(&u, err, "%s/v2/%s/blobs/%s", p->c->base, p->ref->repo, d->digest);
    struct registry_req r = {.method = "HEAD", .url = u.data, .body = {.fd = -1}};
    if (rc == 0)
        rc = registry_client_do(p->c, &r, err);
    *present = rc == 0 && r.status == 200;
    mf_buf_free(&u);
    return rc;
}

/* POST an upload session, asking to mount from another repository when we
 * know the blob is there. *mounted set on 201; loc gets the session URL. */
static int start_upload(struct push *p, const struct store_desc *d, int *mounted,
                        struct mf_buf *loc, struct mf_err *err)
{
    const char *from = registry_push_sources_find(p->src, d->digest);
    if (from && strcmp(from, p->ref->repo) == 0)
        from = NULL;
    struct mf_buf u;
    mf_buf_init(&u, 2048);
    int rc = from ? mf_buf_printf(&u, err, "%s/v2/%s/blobs/uploads/?mount=%s&from=%s", p->c->base,
                                  p->ref->repo, d->digest, from)
                  : mf_buf_printf(&u, err, "%s/v2/%s/blobs/uploads/", p->c->base, p->ref->repo);
    struct registry_req r = {.method = "POST", .url = u.data, .body = {.fd = -1}};
    if (rc == 0)
        rc = registry_client_do(p->c, &r, err);
    *mounted = rc == 0 && from && r.status == 201;
    if (rc == 0 && !*mounted && r.status != 202)
        rc = registry_client_status_error(p->c, &r, p->what, err);
    if (rc == 0 && !*mounted && !r.location[0])
        rc = mf_err_set(err, MF_ENET, "the registry %s started an upload without a Location",
                        p->c->host);
    if (rc == 0 && !*mounted)
        rc = mf_buf_puts(loc, r.location, err);
    mf_buf_free(&u);
    return rc;
}

/* One PUT/PATCH to the session URL; loc is replaced by the next Location. */
static int send_part(struct push *p, const char *method, struct mf_buf *loc, const char *query,
                     const struct registry_body *body, const char *range, long want,
                     struct mf_err *err)
{
    struct mf_buf u;
    mf_buf_init(&u, REGISTRY_LOCATION_MAX + 256);
    int rc = registry_client_url(p->c, loc->data, query, &u, err);
    struct registry_req r = {.method = method,
                             .url = u.data,
                             .body = *body,
                             .content_type = "application/octet-stream",
                             .content_range = range};
    if (rc == 0)
        rc = registry_client_do(p->c, &r, err);
    if (rc == 0 && r.status != want)
        rc = registry_client_status_error(p->c, &r, p->what, err);
    if (rc == 0 && want == 202 && !r.location[0])
        rc = mf_err_set(err, MF_ENET, "the registry %s dropped the upload location of %s",
                        p->c->host, p->what);
    if (rc == 0 && want == 202) {
        mf_buf_reset(loc);
        rc = mf_buf_puts(loc, r.location, err);
    }
    if (rc == 0 && body->len && (body->mem || body->fd >= 0)) {
        p->c->st->bytes_up += body->len;
        if (strcmp(method, "PATCH") == 0)
            p->c->st->blob_patches++;
        else
            p->c->st->blob_puts++;
    }
    mf_buf_free(&u);
    return rc;
}

static int put_blob_bytes(struct push *p, const struct store_desc *d, int fd, struct mf_buf *loc,
                          struct mf_err *err)
{
    char query[STORE_DIGEST_BUF + 16];
    snprintf(query, sizeof query, "digest=%s", d->digest);
    uint64_t chunk = p->c->o->chunk_size ? p->c->o->chunk_size : d->size;
    if (d->size <= chunk) { /* monolithic: one PUT carries everything */
        struct registry_body b = {.fd = fd, .off = 0, .len = d->size, .meter = p->meter};
        return send_part(p, "PUT", loc, query, &b, NULL, 201, err);
    }
    int rc = 0;
    for (uint64_t off = 0; rc == 0 && off < d->size; off += chunk) {
        uint64_t n = d->size - off < chunk ? d->size - off : chunk;
        char range[64];
        snprintf(range, sizeof range, "%llu-%llu", (unsigned long long)off,
                 (unsigned long long)(off + n - 1));
        struct registry_body b = {.fd = fd, .off = off, .len = n, .meter = p->meter};
        rc = send_part(p, "PATCH", loc, NULL, &b, range, 202, err);
    }
    struct registry_body none = {.fd = -1};
    if (rc == 0)
        rc = send_part(p, "PUT", loc, query, &none, NULL, 201, err);
    return rc;
}

static int push_blob(struct push *p, const struct store_desc *d, struct mf_err *err)
{
    int present = 0, mounted = 0, fd = -1;
    struct mf_buf loc;
    mf_buf_init(&loc, REGISTRY_LOCATION_MAX);
    snprintf(p->what, sizeof p->what, "blob %s (%llu bytes)", d->digest,
             (unsigned long long)d->size);
    char name[32];
    snprintf(name, sizeof name, "%.19s", d->digest); /* "sha256:" and 12 hex, as docker shows */
    struct registry_meter m = {p->c->o->progress, 0, d->size, 0};
    m.id = progress_begin(m.pg, "push", name);
    p->meter = &m;
    int rc = blob_present(p, d, &present, err);
    if (rc == 0 && present)
        p->c->st->blobs_present++;
    if (rc == 0 && !present)
        rc = start_upload(p, d, &mounted, &loc, err);
    if (rc == 0 && !present && mounted)
        p->c->st->blobs_mounted++;
    if (rc == 0 && !present && !mounted)
        rc = store_blob_open(p->s, d->digest, 0, &fd, err);
    if (rc == 0 && !present && !mounted)
        rc = put_blob_bytes(p, d, fd, &loc, err);
    if (rc == 0 && !present && !mounted)
        p->c->st->blobs_uploaded++;
    if (fd >= 0)
        close(fd);
    mf_buf_free(&loc);
    if (rc)
        progress_fail(m.pg, m.id, err->msg);
    else
        progress_end(m.pg, m.id, present ? "exists" : mounted ? "mounted" : "done");
    p->meter = NULL;
    return rc;
}

/* ---- the image -------------------------------------------------------------------- */

static int put_manifest(struct push *p, const struct store_desc *m, const char *text,
                        char out[STORE_DIGEST_BUF], struct mf_err *err)
{
    struct mf_buf u;
    mf_buf_init(&u, 2048);
    const char *ref = p->ref->tag[0] ? p->ref->tag : p->ref->digest;
    int rc = mf_buf_printf(&u, err, "%s/v2/%s/manifests/%s", p->c->base, p->ref->repo, ref);
    struct registry_req r = {.method = "PUT",
                             .url = u.data,
                             .content_type = m->media_type,
                             .body = {.mem = text, .fd = -1, .len = m->size}};
    snprintf(p->what, sizeof p->what, "the manifest %s (%llu bytes)", m->digest,
             (unsigned long long)m->size);
    if (rc == 0)
        rc = registry_client_do(p->c, &r, err);
    if (rc == 0 && r.status != 201)
        rc = registry_client_status_error(p->c, &r, p->what, err);
    if (rc == 0 && r.digest[0] && strcmp(r.digest, m->digest) != 0)
        rc = mf_err_set(err, MF_EINTEGRITY, "the registry %s stored the manifest %s as %s",
                        p->c->host, m->digest, r.digest);
    if (rc == 0)
        snprintf(out, STORE_DIGEST_BUF, "%s", m->digest);
    mf_buf_free(&u);
    return rc;
}

/* Reads the local manifest and the blobs it names. */
static int local_image(struct store *s, const char *local, struct store_desc *m, char **text,
                       struct store_desc **refs, size_t *n, struct mf_err *err)
{
    size_t len = 0;
    int rc = oci_resolve(s, local, m, err);
    if (rc == 0 && (strcmp(m->media_type, STORE_MT_OCI_MANIFEST) != 0 &&
                    strcmp(m->media_type, STORE_MT_DOCKER_MANIFEST) != 0))
        rc = mf_err_set(err, MF_EUNSUPPORTED, "%s is a %s; mfc pushes single-platform images",
                        local, m->media_type);
    if (rc == 0)
        rc = store_blob_read(s, m->digest, STORE_MANIFEST_MAX, text, &len, err);
    if (rc == 0)
        rc = store_oci_manifest_refs(*text, len, m->media_type, m->digest, refs, n, err);
    return rc;
}

int registry_push(struct store *s, const char *local, const char *remote,
                  const struct registry_opts *o, struct registry_stats *st,
                  char manifest_digest[STORE_DIGEST_BUF], struct mf_err *err)
{
    struct registry_ref ref;
    struct store_desc m, *refs = NULL;
    size_t n = 0;
    char *text = NULL;
    struct registry_client *c = NULL;
    struct registry_push_sources *src = NULL;
    int rc = registry_ref_parse(remote ? remote : local, &ref, err);
    if (rc == 0)
        rc = local_image(s, local, &m, &text, &refs, &n, err);
    if (rc == 0)
        rc = registry_client_open(&c, &ref, "pull,push", o, st, err);
    if (rc == 0)
        rc = registry_client_ping(c, err);
    if (rc == 0 && registry_push_sources_load(s, ref.host, &src) != 0)
        rc = mf_err_set(err, MF_ENOMEM, "out of memory");
    struct push p = {.c = c, .s = s, .ref = &ref, .src = src};
    for (size_t i = 0; rc == 0 && i < n; i++)
        rc = push_blob(&p, &refs[i], err);
    if (rc == 0)
        rc = put_manifest(&p, &m, text, manifest_digest, err);
    if (rc == 0)
        registry_push_sources_note(src, ref.repo, refs, n);
    registry_push_sources_free(src);
    registry_client_close(c);
    free(refs);
    free(text);
    return rc;
}
