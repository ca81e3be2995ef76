/*
 * registry_pull.c: `mfc pull`: an image from a registry into the store.
 *
 * Pull states [registry_pull]:
 *
 *   MANIFEST  --GET manifests/<ref>, bytes hashed [get_manifest]---------> CHECKED
 *   CHECKED   --an index / manifest list: linux/amd64 entry [pick]------> MANIFEST (by digest)
 *   CHECKED   --a manifest: each blob not in the store [get_blob]--------> BLOBS
 *   BLOBS     --every blob committed (digest verified by the writer)-----> STORED
 *   STORED    --manifest blob stored, then the tag set------------------> DONE
 *   any       --401 twice, 404, unreachable, digest mismatch, too big---> FAILED
 *
 * Invariants: (1) the tag is the last write, so a failed pull leaves every
 * tag as it was (blobs that did verify may stay, unreferenced, for gc);
 * (2) a manifest is accepted only when its bytes hash to the digest we
 * asked for, or to Docker-Content-Digest when we asked by tag; (3) a blob
 * enters the store only through store_blob_writer_commit, which checks its
 * digest, and no more bytes than its descriptor's size are written; (4) an
 * interrupted download stays as tmp/partial-<hex> and resumes with Range.
 */
#include "registry/registry.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/json.h"
#include "common/sha256.h"
#include "registry/registry_int.h"

#define MANIFEST_ACCEPT                                                                            \
    STORE_MT_OCI_MANIFEST ", " STORE_MT_OCI_INDEX ", " STORE_MT_DOCKER_MANIFEST                    \
                          ", " STORE_MT_DOCKER_LIST
#define BLOB_ATTEMPTS 3 /* a dropped connection resumes where it stopped, this many times */

struct pull {
    struct registry_client *c;      /* borrowed */
    struct store *s;                /* borrowed */
    const struct registry_ref *ref; /* borrowed: the source */
    struct registry_meter *meter;   /* the blob being fetched's progress, or NULL */
};

static int digest_of(const void *p, size_t n, char out[STORE_DIGEST_BUF], struct mf_err *err)
{
    uint8_t d[MF_SHA256_LEN];
    char hex[MF_SHA256_HEX_LEN + 1];
    int rc = mf_sha256_mem(p, n, d, err);
    if (rc == 0) {
        mf_sha256_hex(d, hex);
        snprintf(out, STORE_DIGEST_BUF, "sha256:%s", hex);
    }
    return rc;
}

/* GETs a manifest or index by tag or digest into text; m describes it. */
static int get_manifest(struct pull *p, const char *tag_or_digest, struct mf_buf *text,
                        struct store_desc *m, struct mf_err *err)
{
    struct mf_buf u;
    mf_buf_init(&u, 2048);
    mf_buf_reset(text);
    int rc = mf_buf_printf(&u, err, "%s/v2/%s/manifests/%s", p->c->base, p->ref->repo,
                           tag_or_digest);
    struct registry_req r = {
        .method = "GET", .url = u.data, .accept = MANIFEST_ACCEPT, .out = text, .body = {.fd = -1}};
    char what[REGISTRY_REPO_MAX + REGISTRY_TAG_MAX + 80];
    snprintf(what, sizeof what, "the manifest %s:%s", p->ref->repo, tag_or_digest);
    if (rc == 0)
        rc = registry_client_do(p->c, &r, err);
    if (rc == 0 && r.status != 200)
        rc = registry_client_status_error(p->c, &r, what, err);
    if (rc == 0)
        rc = digest_of(text->data, text->len, m->digest, err);
    const char *want = store_digest_valid(tag_or_digest) ? tag_or_digest : r.digest;
    if (rc == 0 && want[0] && strcmp(want, m->digest) != 0)
        rc = mf_err_set(err, MF_EINTEGRITY, "%s from %s has digest %s, not %s", what, p->c->host,
                        m->digest, want);
    json_t *v = rc == 0 ? mf_json_parse(text->data, text->len, what, err) : NULL;
    const char *mt = json_string_value(json_object_get(v, "mediaType"));
    if (!mt || !*mt)
        mt = r.content_type_got;
    if (rc == 0 && !v)
        rc = err->code;
    if (rc == 0 && !store_oci_is_manifest(mt))
        rc = mf_err_set(err, MF_EUNSUPPORTED, "%s has media type '%.100s', not an image manifest",
                        what, mt);
    if (rc == 0) {
        snprintf(m->media_type, sizeof m->media_type, "%s", mt);
        m->size = text->len;
    }
    json_decref(v);
    mf_buf_free(&u);
    return rc;
}

/* The linux/amd64 manifest of an index or manifest list. */
static int pick(const char *text, size_t len, struct store_desc *out, struct mf_err *err)
{
    json_t *v = mf_json_parse(text, len, "image index", err);
    if (!v)
        return err->code;
    size_t i;
    json_t *e;
    int rc = MF_ENOTFOUND;
    json_array_foreach (json_object_get(v, "manifests"), i, e) {
        json_t *pl = json_object_get(e, "platform");
        const char *os = json_string_value(json_object_get(pl, "os"));
        const char *arch = json_string_value(json_object_get(pl, "architecture"));
        if (os && arch && strcmp(os, "linux") == 0 && strcmp(arch, "amd64") == 0) {
            rc = store_oci_parse_desc(e, "image index entry", out, err);
            break;
        }
    }
    json_decref(v);
    if (rc == MF_ENOTFOUND)
        mf_err_set(err, MF_ENOTFOUND, "the image index has no linux/amd64 manifest");
    return rc;
}

/* One attempt at the rest of a blob; *again when it may be retried. */
static int blob_attempt(struct pull *p, const struct store_desc *d, struct store_blob_writer *w,
                        int *again, struct mf_err *err)
{
    struct mf_buf u;
    mf_buf_init(&u, 2048);
    int rc = mf_buf_printf(&u, err, "%s/v2/%s/blobs/%s", p->c->base, p->ref->repo, d->digest);
    uint64_t have = store_blob_writer_size(w);
    struct registry_req r = {.method = "GET",
                             .url = u.data,
                             .w = w,
                             .w_max = d->size,
                             .range_from = have,
                             .meter = p->meter,
                             .body = {.fd = -1}};
    char what[160];
    snprintf(what, sizeof what, "blob %s", d->digest);
    *again = 0;
    if (rc == 0)
        rc = registry_client_do(p->c, &r, err);
    if (rc == MF_ENET)
        *again = store_blob_writer_size(w) > have; /* it moved: worth resuming */
    else if (rc == 0 && r.status == 416 && have == d->size)
        rc = 0; /* every byte was already here */
    else if (rc == 0 && r.status != 200 && r.status != 206)
        rc = registry_client_status_error(p->c, &r, what, err);
    else if (rc == 0 && store_blob_writer_size(w) != d->size)
        rc = mf_err_set(err, MF_ENET, "the registry %s sent %llu of the %llu bytes of %s",
                        p->c->host, (unsigned long long)store_blob_writer_size(w),
                        (unsigned long long)d->size, what);
    p->c->st->bytes_down += store_blob_writer_size(w) - have;
    mf_buf_free(&u);
    return rc;
}

static int get_blob(struct pull *p, const struct store_desc *d, struct mf_err *err)
{
    struct store_blob_writer *w = NULL;
    char name[32];
    snprintf(name, sizeof name, "%.19s", d->digest); /* "sha256:" and 12 hex, as docker shows */
    struct registry_meter m = {p->c->o->progress, 0, d->size, 0};
    m.id = progress_begin(m.pg, "pull", name);
    p->meter = &m;
    int rc = store_blob_writer_open_partial(p->s, d->digest + 7, d->digest, &w, err);
    if (rc == 0 && store_blob_writer_size(w) > d->size)
        rc = store_blob_writer_reset(w, err);
    int again = 1;
    for (int i = 0; rc == 0 && again && i < BLOB_ATTEMPTS; i++) {
        struct mf_err e;
        rc = blob_attempt(p, d, w, &again, &e);
        if (rc != 0 && again && i + 1 < BLOB_ATTEMPTS)
            rc = 0;
        else if (rc != 0)
            *err = e;
        else
            again = 0;
    }
    char got[STORE_DIGEST_BUF];
    uint64_t size = 0;
    if (rc == 0) {
        rc = store_blob_writer_commit(w, got, &size, err); /* releases w, success or not */
        if (rc == 0)
            p->c->st->blobs_fetched++;
    } else if (rc == MF_EINTEGRITY) {
        store_blob_writer_discard(w); /* wrong bytes: nothing to resume */
    } else {
        store_blob_writer_abort(w); /* kept as a partial for the next pull */
    }
    if (rc == MF_EINTEGRITY)
        mf_err_prefix(err, "%s/%s", p->c->host, p->ref->repo);
    if (rc)
        progress_fail(m.pg, m.id, err->msg);
    else
        progress_end(m.pg, m.id, "done");
    p->meter = NULL;
    return rc;
}

/* Fetches the manifest for ref, following an index to its linux/amd64 entry. */
static int resolve(struct pull *p, struct mf_buf *text, struct store_desc *m, struct mf_err *err)
{
    const struct registry_ref *ref = p->ref;
    int rc = get_manifest(p, ref->digest[0] ? ref->digest : ref->tag, text, m, err);
    if (rc == 0 && (strcmp(m->media_type, STORE_MT_OCI_INDEX) == 0 ||
                    strcmp(m->media_type, STORE_MT_DOCKER_LIST) == 0)) {
        struct store_desc one;
        rc = pick(text->data, text->len, &one, err);
        if (rc == 0)
            rc = get_manifest(p, one.digest, text, m, err);
        if (rc == 0 && (strcmp(m->media_type, STORE_MT_OCI_INDEX) == 0 ||
                        strcmp(m->media_type, STORE_MT_DOCKER_LIST) == 0))
            rc = mf_err_set(err, MF_EUNSUPPORTED, "an image index points at another index");
    }
    return rc;
}

/* Stores the blobs of manifest text, then the manifest itself. */
static int store_image(struct pull *p, const struct mf_buf *text, const struct store_desc *m,
                       struct mf_err *err)
{
    struct store_desc *refs = NULL;
    size_t n = 0;
    char got[STORE_DIGEST_BUF];
    int rc = store_oci_manifest_refs(text->data, text->len, m->media_type, m->digest, &refs, &n,
                                     err);
    for (size_t i = 0; rc == 0 && i < n; i++)
        if (!store_blob_exists(p->s, refs[i].digest))
            rc = get_blob(p, &refs[i], err);
    if (rc == 0)
        rc = store_put_mem(p->s, text->data, text->len, got, err);
    if (rc == 0 && strcmp(got, m->digest) != 0)
        rc = mf_err_set(err, MF_EINTEGRITY, "the manifest changed while it was stored");
    if (rc == 0) {
        struct registry_push_sources *src = NULL;
        if (registry_push_sources_load(p->s, p->c->host, &src) == 0)
            registry_push_sources_note(src, p->ref->repo, refs, n);
        registry_push_sources_free(src);
    }
    free(refs);
    return rc;
}

int registry_pull(struct store *s, const char *remote, const char *local,
                  const struct registry_opts *o, struct registry_stats *st,
                  char manifest_digest[STORE_DIGEST_BUF], struct mf_err *err)
{
    struct registry_ref ref;
    struct registry_client *c = NULL;
    struct store_desc m;
    struct mf_buf text;
    mf_buf_init(&text, STORE_MANIFEST_MAX);
    const char *tag = local ? local : remote;
    int rc = registry_ref_parse(remote, &ref, err);
    if (rc == 0 && !store_tag_valid(tag))
        rc = mf_err_set(err, MF_EINVAL, "'%.200s' cannot be a local tag", tag);
    if (rc == 0)
        rc = registry_client_open(&c, &ref, "pull", o, st, err);
    if (rc == 0)
        rc = registry_client_ping(c, err);
    struct pull p = {.c = c, .s = s, .ref = &ref};
    if (rc == 0)
        rc = resolve(&p, &text, &m, err);
    if (rc == 0)
        rc = store_image(&p, &text, &m, err);
    if (rc == 0) /* invariant (1): the last write */
        rc = store_tag_set(s, tag, &m, NULL, err);
    if (rc == 0)
        snprintf(manifest_digest, STORE_DIGEST_BUF, "%s", m.digest);
    registry_client_close(c);
    mf_buf_free(&text);
    return rc;
}

/* ---- one manifest and chosen blobs (FROM/ADAPTER by registry reference) -------- */

struct registry_pull_session {
    struct registry_client *c;  /* owned */
    struct registry_ref ref;    /* the parsed reference */
    struct registry_stats st;   /* counters when the caller passed none */
};

int registry_pull_open(const char *remote, const struct registry_opts *o,
                       struct registry_stats *st, struct registry_pull_session **out,
                       struct mf_err *err)
{
    struct registry_pull_session *ps = calloc(1, sizeof *ps);
    *out = NULL;
    if (!ps)
        return mf_err_set(err, MF_ENOMEM, "out of memory");
    int rc = registry_ref_parse(remote, &ps->ref, err);
    if (rc == 0)
        rc = registry_client_open(&ps->c, &ps->ref, "pull", o, st ? st : &ps->st, err);
    if (rc == 0)
        rc = registry_client_ping(ps->c, err);
    if (rc) {
        registry_pull_close(ps);
        return rc;
    }
    *out = ps;
    return 0;
}

int registry_pull_manifest(struct registry_pull_session *ps, char **text, size_t *len,
                           struct store_desc *m, struct mf_err *err)
{
    struct mf_buf t;
    mf_buf_init(&t, STORE_MANIFEST_MAX);
    struct pull p = {.c = ps->c, .s = NULL, .ref = &ps->ref};
    int rc = resolve(&p, &t, m, err);
    if (rc == 0 && !(*text = malloc(t.len + 1)))
        rc = mf_err_set(err, MF_ENOMEM, "out of memory");
    if (rc == 0) {
        memcpy(*text, t.data, t.len);
        (*text)[t.len] = '\0';
        *len = t.len;
    }
    mf_buf_free(&t);
    return rc;
}

int registry_pull_blob(struct registry_pull_session *ps, struct store *s,
                       const struct store_desc *d, struct mf_err *err)
{
    struct pull p = {.c = ps->c, .s = s, .ref = &ps->ref};
    if (store_blob_exists(s, d->digest))
        return 0;
    return get_blob(&p, d, err);
}

const char *registry_pull_where(const struct registry_pull_session *ps)
{
    return ps->ref.repo;
}

void registry_pull_close(struct registry_pull_session *ps)
{
    if (!ps)
        return;
    registry_client_close(ps->c);
    free(ps);
}
