/*
 * store.h: the content store, a local OCI image layout with a build cache.
 *
 * $MFC_HOME (default ~/.local/share/mfc) is itself an OCI image layout, so
 * `skopeo inspect oci:$MFC_HOME:TAG` reads it:
 *
 *   oci-layout              {"imageLayoutVersion":"1.0.0"}
 *   index.json              image index; a tag is a descriptor annotated
 *                           org.opencontainers.image.ref.name
 *   blobs/sha256/<hex>      content-addressed blobs
 *   cache/<hex>.json        build-cache records: key digest -> result JSON
 *   stat-cache              (path, size, mtime, ctime, inode, dev) -> digest
 *   tmp/                    blobs being written, partial downloads
 *   lock, index.lock        flock targets (docs/store.md, "Locking")
 *
 * Digests are strings "sha256:" + 64 lowercase hex; every function that takes
 * one validates it before it touches a path. Functions that can fail return 0
 * or a negative MF_E* code with err filled (common/err.h).
 */
#ifndef MFC_STORE_H
#define MFC_STORE_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "common/err.h"

#define STORE_DIGEST_BUF 72         /* "sha256:" + 64 hex + NUL */
#define STORE_MEDIA_TYPE_MAX 256    /* RFC 6838: 127 + "/" + 127, plus NUL */
#define STORE_REF_MAX 256           /* a tag (ref.name), plus NUL */
#define STORE_TIME_MAX 40           /* an RFC 3339 timestamp, plus NUL */
#define STORE_INDEX_MAX (16u << 20) /* bytes of index.json we agree to parse */
/* bytes of one manifest: the minimum the distribution spec makes registries accept */
#define STORE_MANIFEST_MAX (4u << 20)
#define STORE_CACHE_RECORD_MAX (1u << 20) /* bytes of one cache record */

#define STORE_MT_OCI_MANIFEST "application/vnd.oci.image.manifest.v1+json"
#define STORE_MT_OCI_INDEX "application/vnd.oci.image.index.v1+json"
#define STORE_MT_DOCKER_MANIFEST "application/vnd.docker.distribution.manifest.v2+json"
#define STORE_MT_DOCKER_LIST "application/vnd.docker.distribution.manifest.list.v2+json"
#define STORE_ANN_REF_NAME "org.opencontainers.image.ref.name"
#define STORE_ANN_CREATED "org.opencontainers.image.created"

struct store;             /* an open store: root path, lock fds, counters */
struct store_blob_writer; /* a blob being written: tmp file + running digest */

/* An OCI descriptor, reduced to what the store needs. */
struct store_desc {
    char media_type[STORE_MEDIA_TYPE_MAX]; /* e.g. STORE_MT_OCI_MANIFEST */
    char digest[STORE_DIGEST_BUF];         /* validated "sha256:<hex>" */
    uint64_t size;                         /* bytes of the blob */
};

/* A tag from index.json. */
struct store_tag {
    char name[STORE_REF_MAX];     /* org.opencontainers.image.ref.name */
    struct store_desc desc;       /* what it points at (a manifest or an index) */
    char created[STORE_TIME_MAX]; /* org.opencontainers.image.created, or "" */
};

/* Counters for tests and `mfc du`; monotonic over the life of one handle. */
struct store_stats {
    uint64_t hashed_bytes;  /* bytes read to compute a digest (files, blobs, partials) */
    uint64_t stat_hits;     /* files whose digest came from the stat cache */
    uint64_t blobs_written; /* blobs that entered blobs/sha256 through this handle */
};

/* Reports bytes done out of total (0 when unknown) while a file is copied. */
typedef void (*store_progress_fn)(void *arg, uint64_t done, uint64_t total);

/* Options for store_put_file; a NULL pointer means all defaults. */
struct store_put_opts {
    const char *expect;         /* borrowed: "sha256:<hex>" the content must have, or NULL */
    store_progress_fn progress; /* called after each chunk, or NULL */
    void *progress_arg;         /* passed to progress */
};

/* Open and close a store. */

/* The default root: $MFC_HOME when set and non-empty, else
 * $HOME/.local/share/mfc. *root is malloc'd (caller frees); untouched on failure. */
int store_default_root(char **root, struct mf_err *err);
/* Opens (creating when absent) the store at root and takes the shared "in use"
 * lock that keeps `mfc prune` from sweeping under a running build. On failure
 * *out is NULL. */
int store_open(struct store **out, const char *root, struct mf_err *err);
/* Releases locks and memory. Accepts NULL. */
void store_close(struct store *s);
/* borrowed: valid until store_close */
const char *store_root(const struct store *s);
const struct store_stats *store_stats(const struct store *s);

/* Digest strings. */

/* 1 when s is "sha256:" followed by exactly 64 lowercase hex digits, else 0. */
int store_digest_valid(const char *s);
/* Like store_digest_valid, with an error naming `what` (MF_EINVAL, or
 * MF_EUNSUPPORTED for a well-formed digest of another algorithm). */
int store_digest_check(const char *s, const char *what, struct mf_err *err);

/* Blobs: reading. */

/* 1 when the blob is present, 0 when absent or the digest is invalid. */
int store_blob_exists(struct store *s, const char *digest);
/* *path = malloc'd path of the blob (it need not exist). */
int store_blob_path(struct store *s, const char *digest, char **path, struct mf_err *err);
/* Size of a present blob; MF_ENOTFOUND when absent. */
int store_blob_size(struct store *s, const char *digest, uint64_t *size, struct mf_err *err);
/* Opens a blob read-only. With verify nonzero the whole blob is hashed first
 * and a mismatch (a corrupted store) is MF_EINTEGRITY; the fd is returned at
 * offset 0. On failure *fd is -1. The caller closes *fd. */
int store_blob_open(struct store *s, const char *digest, int verify, int *fd, struct mf_err *err);
/* Reads a whole blob of at most max bytes into a malloc'd, NUL-terminated
 * buffer, always verifying its digest. On failure outputs are untouched. */
int store_blob_read(struct store *s, const char *digest, size_t max, char **data, size_t *len,
                    struct mf_err *err);

/* Blobs: writing. A blob enters blobs/sha256 only after its digest is known
 * and matches the expected one (if any): tmp file, fsync, rename. */

/* Stores n bytes from memory; digest receives "sha256:<hex>". */
int store_put_mem(struct store *s, const void *p, size_t n, char digest[STORE_DIGEST_BUF],
                  struct mf_err *err);
/* Stores a copy of a regular file, hashing while copying. An unchanged file
 * already in the store (stat cache hit) is neither read nor copied. On a
 * mismatch with o->expect nothing is stored and MF_EINTEGRITY names both digests. */
int store_put_file(struct store *s, const char *path, const struct store_put_opts *o,
                   char digest[STORE_DIGEST_BUF], uint64_t *size, struct mf_err *err);
/* Digest and size of a file without storing it, through the stat cache. */
int store_digest_file(struct store *s, const char *path, char digest[STORE_DIGEST_BUF],
                      uint64_t *size, struct mf_err *err);

/* Starts a blob in an anonymous tmp file. expect may be NULL. On failure *w is NULL. */
int store_blob_writer_open(struct store *s, const char *expect, struct store_blob_writer **w,
                           struct mf_err *err);
/* Starts or resumes a named partial blob (tmp/partial-<name>, name from
 * [A-Za-z0-9._-]). Existing bytes are kept and hashed again (locally, once),
 * so a download can continue with a Range request at store_blob_writer_size().
 * The partial is locked (flock) while the writer is open: a second writer on
 * the same name waits. */
int store_blob_writer_open_partial(struct store *s, const char *name, const char *expect,
                                   struct store_blob_writer **w, struct mf_err *err);
/* Bytes written so far (including resumed ones). */
uint64_t store_blob_writer_size(const struct store_blob_writer *w);
int store_blob_writer_write(struct store_blob_writer *w, const void *p, size_t n,
                            struct mf_err *err);
/* From now on, hashes what is written in a second thread while the calling
 * thread writes (the same ring store_put_file copies through): writes are
 * buffered in 4 MiB slots (store_blob_writer_size counts them; the file
 * lags by at most one slot until commit; abort of a partial writes the
 * held slot out first). Bytes already written (a resumed partial's) were
 * hashed before, so the digest covers them first. For big blobs written by
 * one thread (layer_write's plain tar of the weights; downloads use the
 * small slots of store_blob_writer_hash_async_slots). */
int store_blob_writer_hash_async(struct store_blob_writer *w, struct mf_err *err);
/* The same with 4 slots of slot_bytes (4 KiB to 4 MiB) instead of 4 MiB:
 * small slots are hashed while they are still in cache, right after the
 * calling thread wrote them (downloads: 256 KiB). MF_EINVAL outside that
 * range. */
int store_blob_writer_hash_async_slots(struct store_blob_writer *w, size_t slot_bytes,
                                       struct mf_err *err);
/* Drops everything written so far (a server ignored our Range request):
 * truncates the file and restarts the digest. With the hasher on, it first
 * drops the held slot and waits for the hasher to finish what was handed
 * to it; the hasher stays on. On failure the writer can only be released. */
int store_blob_writer_reset(struct store_blob_writer *w, struct mf_err *err);
/* Finishes the blob: verifies the digest, moves it into blobs/sha256 (a blob
 * already present is kept as is). Always releases w; on failure, including
 * MF_EINTEGRITY, the tmp or partial file is removed and nothing is stored. */
int store_blob_writer_commit(struct store_blob_writer *w, char digest[STORE_DIGEST_BUF],
                             uint64_t *size, struct mf_err *err);
/* Releases w. An anonymous tmp file is removed; a partial is fsync'd and kept
 * so a later run can resume it. Accepts NULL. */
void store_blob_writer_abort(struct store_blob_writer *w);
/* Releases w and removes its file, partial or not. Accepts NULL. */
void store_blob_writer_discard(struct store_blob_writer *w);
/* *path = malloc'd path tmp/<name> (name from [A-Za-z0-9._-], at most 200
 * chars) for side files such as a partial download's metadata. A file named
 * <kind>-<pid>-<rest> with this process's pid is this process's: a later
 * store_tmp_reclaim removes it once the process is gone. */
int store_tmp_path(struct store *s, const char *name, char **path, struct mf_err *err);
/* Removes the tmp files and directories of processes that died with them
 * open (a killed build), found by lock (store_tmp.c); live ones and partial
 * downloads stay. files/bytes (may be NULL) get what was removed. Best
 * effort: a file that cannot be removed is skipped. */
int store_tmp_reclaim(struct store *s, uint64_t *files, uint64_t *bytes, struct mf_err *err);

/* Tags (index.json; each change is one locked, atomic rewrite). */

/* 1 when name follows the ref.name grammar of the image-spec (annotations.md):
 * components of [A-Za-z0-9] joined by one of -._:@+ (or "--"), separated by
 * "/", at most STORE_REF_MAX - 1 chars. */
int store_tag_valid(const char *name);
/* Points name at d (replacing what it pointed at). created may be NULL or "". */
int store_tag_set(struct store *s, const char *name, const struct store_desc *d,
                  const char *created, struct mf_err *err);
/* Looks a tag up; MF_ENOTFOUND when absent (t untouched). */
int store_tag_get(struct store *s, const char *name, struct store_tag *t, struct mf_err *err);
/* Removes a tag; MF_ENOTFOUND when absent. The blobs stay until store_gc_run. */
int store_tag_remove(struct store *s, const char *name, struct mf_err *err);
/* All tags sorted by name; *tags is malloc'd (free() it, NULL when *n == 0). */
int store_tag_list(struct store *s, struct store_tag **tags, size_t *n, struct mf_err *err);

/* Build-cache records (cache/<hex>.json). */

/* *result = a new reference to the record for key (json_decref it);
 * MF_ENOTFOUND when there is none. A corrupt record is MF_EFORMAT. */
int store_cache_get(struct store *s, const char *key, json_t **result, struct mf_err *err);
/* Writes the record for key atomically. Every string in result that is a
 * valid digest keeps that blob alive through garbage collection. */
int store_cache_put(struct store *s, const char *key, const json_t *result, struct mf_err *err);
/* Removes the record for key; MF_ENOTFOUND when there is none. */
int store_cache_remove(struct store *s, const char *key, struct mf_err *err);

/* Garbage collection and usage. */

enum {
    STORE_GC_DRY_RUN = 1, /* report what would go, remove nothing */
    STORE_GC_ALL = 2,     /* also drop cache records, partial downloads and the stat cache */
};

/* Called for each thing removed (or, in a dry run, that would be). kind is
 * "blob", "cache", "tmp" or "partial"; name is a digest or a file name. */
typedef void (*store_gc_fn)(void *arg, const char *kind, const char *name, uint64_t bytes);

struct store_usage {
    uint64_t ref_blobs, ref_bytes;       /* blobs reachable from tags and cache records */
    uint64_t unref_blobs, unref_bytes;   /* blobs nothing references */
    uint64_t cache_records, cache_bytes; /* cache/ */
    uint64_t tmp_files, tmp_bytes;       /* tmp/: writes in progress, partial downloads */
};

/* Marks blobs from index.json (manifest -> config + layers + subject, index ->
 * manifests) and cache records, and fills u. Never changes the store. */
int store_gc_usage(struct store *s, struct store_usage *u, struct mf_err *err);
/* Sweeps what store_gc_usage finds unreferenced, plus stale tmp files. Needs
 * the store to itself: MF_EBUSY when another mfc has it open. removed gets
 * what was (or would be) removed; cb may be NULL. */
int store_gc_run(struct store *s, unsigned flags, store_gc_fn cb, void *arg,
                 struct store_usage *removed, struct mf_err *err);

/* Untrusted OCI JSON (exported for the fuzzer and the image writer). */

/* Parses and validates an image index (index.json): object, schemaVersion 2,
 * manifests[] of valid descriptors (sha256 only). *index is a new reference. */
int store_oci_parse_index(const char *text, size_t len, const char *what, json_t **index,
                          struct mf_err *err);
/* Validates one descriptor object and copies it to d. */
int store_oci_parse_desc(const json_t *v, const char *what, struct store_desc *d,
                         struct mf_err *err);
/* Lists the blobs a manifest or index blob references (config, layers,
 * subject; or manifests, subject). media_type selects the schema; for other
 * media types *n = 0. *refs is malloc'd (free() it; NULL when *n == 0). */
int store_oci_manifest_refs(const char *text, size_t len, const char *media_type, const char *what,
                            struct store_desc **refs, size_t *n, struct mf_err *err);
/* 1 for the four manifest/index media types whose children gc must follow. */
int store_oci_is_manifest(const char *media_type);

#endif
