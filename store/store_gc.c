/*
 * store_gc.c: mark-and-sweep garbage collection and usage accounting.
 *
 * Mark: the roots are every descriptor in index.json (tagged or not) and every
 * digest string in a cache record. A manifest marks its config, layers and
 * subject; an index marks its manifests; recursively. A digest from a cache
 * record has no media type, so a small blob that is a JSON manifest or index
 * by its own "mediaType" is followed too (an image step's cached manifest
 * keeps its layers). Referenced blobs may be missing (image-layout.md allows
 * it). A referenced manifest that is corrupt stops gc: without its children
 * we cannot tell what is garbage.
 *
 * Sweep: blobs/sha256/<hex> not marked; tmp/blob-* (writers that died; none
 * can be live while gc holds the store exclusively); with STORE_GC_ALL also
 * cache records, partial downloads and the stat cache. Corrupt cache records
 * always go. Files whose names are not ours are left alone.
 *
 * Locking: a real sweep needs LOCK_EX on "lock", which every open store
 * holds shared, so it never runs beside a build (MF_EBUSY instead of
 * waiting: prune is interactive). A dry run and store_gc_usage take no lock.
 */
#include "store/store.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/file.h"
#include "common/json.h"
#include "store/store_int.h"

/* A set of digests (open addressing on the hex) plus a worklist of descriptors. */
struct marks {
    char (*set)[STORE_DIGEST_BUF]; /* owned; "" = empty slot */
    size_t set_cap;                /* slots, a power of two */
    size_t set_n;                  /* digests in the set */
    struct store_desc *work;       /* owned: descriptors still to visit; media_type "" = sniff */
    size_t work_n, work_cap;       /* used, allocated */
};

struct sweep {
    struct store *s;       /* borrowed */
    unsigned flags;        /* STORE_GC_*; 0 with count_only for usage */
    int count_only;        /* nonzero: store_gc_usage, remove nothing, report nothing */
    store_gc_fn cb;        /* may be NULL */
    void *arg;             /* for cb */
    struct store_usage *u; /* totals being filled */
};

/* ---- the mark set ----------------------------------------------------------------- */

static size_t slot_of(const char *digest, size_t cap)
{
    size_t h = 0;
    for (int i = 7; i < 7 + 16; i++) /* the digest is uniformly random: 64 bits suffice */
        h = h * 16 + (size_t)(digest[i] <= '9' ? digest[i] - '0' : digest[i] - 'a' + 10);
    return h & (cap - 1);
}

static int set_grow(struct marks *m, struct mf_err *err);

/* 1 when newly added, 0 when already present, <0 on error. */
static int set_add(struct marks *m, const char *digest, struct mf_err *err)
{
    if ((m->set_n + 1) * 2 > m->set_cap) {
        int rc = set_grow(m, err);
        if (rc)
            return rc;
    }
    for (size_t i = slot_of(digest, m->set_cap);; i = (i + 1) & (m->set_cap - 1)) {
        if (!m->set[i][0]) {
            memcpy(m->set[i], digest, STORE_DIGEST_BUF);
            m->set_n++;
            return 1;
        }
        if (strcmp(m->set[i], digest) == 0)
            return 0;
    }
}

static int set_has(const struct marks *m, const char *digest)
{
    if (!m->set_cap)
        return 0;
    for (size_t i = slot_of(digest, m->set_cap); m->set[i][0]; i = (i + 1) & (m->set_cap - 1))
        if (strcmp(m->set[i], digest) == 0)
            return 1;
    return 0;
}

static int set_grow(struct marks *m, struct mf_err *err)
{
    struct marks bigger = *m;
    bigger.set_cap = m->set_cap ? m->set_cap * 2 : 256;
    bigger.set_n = 0;
    bigger.set = calloc(bigger.set_cap, sizeof *bigger.set);
    if (!bigger.set)
        return mf_err_set(err, MF_ENOMEM, "out of memory marking blobs");
    for (size_t i = 0; i < m->set_cap; i++)
        if (m->set[i][0])
            set_add(&bigger, m->set[i], err); /* cannot grow again: half empty */
    free(m->set);
    *m = bigger;
    return 0;
}

static int work_push(struct marks *m, const char *digest, const char *media_type,
                     struct mf_err *err)
{
    if (m->work_n == m->work_cap) {
        size_t nc = m->work_cap ? m->work_cap * 2 : 64;
        void *p = realloc(m->work, nc * sizeof *m->work);
        if (!p)
            return mf_err_set(err, MF_ENOMEM, "out of memory marking blobs");
        m->work = p;
        m->work_cap = nc;
    }
    struct store_desc *d = &m->work[m->work_n++];
    memcpy(d->digest, digest, STORE_DIGEST_BUF);
    snprintf(d->media_type, sizeof d->media_type, "%s", media_type);
    d->size = 0;
    return 0;
}

static void marks_free(struct marks *m)
{
    free(m->set);
    free(m->work);
}

/* ---- mark ------------------------------------------------------------------------- */

static int mark_roots_index(struct store *s, struct marks *m, struct mf_err *err)
{
    json_t *index = NULL;
    int rc = store_index_load(s, &index, err);
    size_t i;
    json_t *v;
    json_array_foreach (json_object_get(index, "manifests"), i, v) {
        struct store_desc d;
        if (!rc)
            rc = store_oci_parse_desc(v, "index.json", &d, err);
        if (!rc)
            rc = work_push(m, d.digest, d.media_type, err);
    }
    json_decref(index);
    return rc;
}

/* The "mediaType" a small JSON blob declares, for digests with no descriptor.
 * Any failure means "not a manifest": the blob is then a leaf. */
static int sniff(struct store *s, const char *digest, char mt[STORE_MEDIA_TYPE_MAX], char **text,
                 size_t *len)
{
    uint64_t size;
    if (store_blob_size(s, digest, &size, NULL) != 0 || size > STORE_MANIFEST_MAX)
        return 0;
    if (store_blob_read(s, digest, STORE_MANIFEST_MAX, text, len, NULL) != 0)
        return 0;
    json_t *v = (*len && (*text)[0] == '{') ? mf_json_parse(*text, *len, digest, NULL) : NULL;
    const char *t = json_string_value(json_object_get(v, "mediaType"));
    int ok = t && store_oci_is_manifest(t);
    if (ok)
        snprintf(mt, STORE_MEDIA_TYPE_MAX, "%s", t);
    json_decref(v);
    if (!ok) {
        free(*text);
        *text = NULL;
    }
    return ok;
}

/* Reads a manifest the index or a parent names by descriptor. A missing one is
 * fine (*text stays NULL); a corrupt one is an error. */
static int read_known(struct store *s, const struct store_desc *d, char **text, size_t *len,
                      struct mf_err *err)
{
    if (!store_blob_exists(s, d->digest))
        return 0;
    int rc = store_blob_read(s, d->digest, STORE_MANIFEST_MAX, text, len, err);
    if (rc)
        mf_err_prefix(err, "gc stopped, nothing was removed");
    return rc;
}

static int visit(struct store *s, struct marks *m, const struct store_desc *d, struct mf_err *err)
{
    char *text = NULL;
    size_t len = 0;
    char mt[STORE_MEDIA_TYPE_MAX];
    int rc = 0;
    snprintf(mt, sizeof mt, "%s", d->media_type);
    if (!mt[0]) {
        if (!sniff(s, d->digest, mt, &text, &len))
            return 0;
    } else if (store_oci_is_manifest(mt)) {
        rc = read_known(s, d, &text, &len, err);
    }
    struct store_desc *refs = NULL;
    size_t n = 0;
    if (!rc && text)
        rc = store_oci_manifest_refs(text, len, mt, d->digest, &refs, &n, err);
    for (size_t i = 0; !rc && i < n; i++)
        rc = work_push(m, refs[i].digest, refs[i].media_type, err);
    free(refs);
    free(text);
    return rc;
}

static int mark_all(struct store *s, struct marks *m, struct mf_err *err)
{
    while (m->work_n) {
        struct store_desc d = m->work[--m->work_n];
        int added = set_add(m, d.digest, err);
        if (added < 0)
            return added;
        if (added) {
            int rc = visit(s, m, &d, err);
            if (rc)
                return rc;
        }
    }
    return 0;
}

/* ---- walking directories ---------------------------------------------------------- */

static int is_hex64(const char *name, size_t n)
{
    if (n != 64)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!((name[i] >= '0' && name[i] <= '9') || (name[i] >= 'a' && name[i] <= 'f')))
            return 0;
    return 1;
}

static void report(struct sweep *w, const char *kind, const char *name, uint64_t bytes)
{
    if (w->cb && !w->count_only)
        w->cb(w->arg, kind, name, bytes);
}

/* Removes dir/name unless dry-running; a failure is an error naming the file. */
static int remove_entry(struct sweep *w, int dfd, const char *dir, const char *name,
                        struct mf_err *err)
{
    if (w->count_only || (w->flags & STORE_GC_DRY_RUN))
        return 0;
    if (unlinkat(dfd, name, 0) != 0 && errno != ENOENT)
        return mf_err_sys(err, MF_EIO, errno, "cannot remove %s/%s", dir, name);
    return 0;
}

typedef int (*entry_fn)(struct sweep *w, int dfd, const char *dir, const char *name, uint64_t bytes,
                        void *ctx, struct mf_err *err);

/* Calls fn for each regular file in root/rel. A missing directory is empty. */
static int walk(struct sweep *w, const char *rel, entry_fn fn, void *ctx, struct mf_err *err)
{
    char *dir = store_join(w->s, rel, err);
    if (!dir)
        return MF_ENOMEM;
    DIR *d = opendir(dir);
    int rc = 0;
    if (!d && errno != ENOENT)
        rc = mf_err_sys(err, MF_EIO, errno, "cannot read directory %s", dir);
    struct dirent *e;
    while (!rc && d && (e = readdir(d))) {
        struct stat st;
        if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode))
            continue;
        rc = fn(w, dirfd(d), dir, e->d_name, (uint64_t)st.st_size, ctx, err);
    }
    if (d)
        closedir(d);
    free(dir);
    return rc;
}

/* ---- sweep ------------------------------------------------------------------------ */

static int sweep_blob(struct sweep *w, int dfd, const char *dir, const char *name, uint64_t bytes,
                      void *ctx, struct mf_err *err)
{
    const struct marks *m = ctx;
    if (!is_hex64(name, strlen(name)))
        return 0;
    char digest[STORE_DIGEST_BUF];
    snprintf(digest, sizeof digest, "sha256:%s", name);
    if (set_has(m, digest)) {
        w->u->ref_blobs++;
        w->u->ref_bytes += bytes;
        return 0;
    }
    w->u->unref_blobs++;
    w->u->unref_bytes += bytes;
    report(w, "blob", digest, bytes);
    return remove_entry(w, dfd, dir, name, err);
}

static int sweep_tmp(struct sweep *w, int dfd, const char *dir, const char *name, uint64_t bytes,
                     void *ctx, struct mf_err *err)
{
    int partial = strncmp(name, STORE_PARTIAL_PREFIX, strlen(STORE_PARTIAL_PREFIX)) == 0;
    if (!w->count_only && partial && !(w->flags & STORE_GC_ALL))
        return 0; /* kept so an interrupted download can resume */
    w->u->tmp_files++;
    w->u->tmp_bytes += bytes;
    report(w, partial ? "partial" : "tmp", name, bytes);
    return remove_entry(w, dfd, dir, name, err);
}

/* Cache records: marks (a root) or sweeps (with STORE_GC_ALL, or corrupt). */
static int visit_cache(struct sweep *w, int dfd, const char *dir, const char *name, uint64_t bytes,
                       void *ctx, struct mf_err *err)
{
    struct marks *m = ctx;
    size_t n = strlen(name);
    if (n != 64 + 5 || strcmp(name + 64, ".json") != 0 || !is_hex64(name, 64))
        return 0;
    char key[STORE_DIGEST_BUF];
    snprintf(key, sizeof key, "sha256:%.64s", name);
    json_t *rec = NULL;
    int corrupt = store_cache_get(w->s, key, &rec, NULL) != 0;
    int rc = 0;
    if (!corrupt && !(w->flags & STORE_GC_ALL)) {
        char(*list)[STORE_DIGEST_BUF] = NULL;
        size_t k = 0, cap = 0;
        rc = store_cache_collect(rec, &list, &k, &cap, err);
        for (size_t i = 0; !rc && i < k; i++)
            rc = work_push(m, list[i], "", err);
        free(list);
        json_decref(rec);
        if (w->count_only) {
            w->u->cache_records++;
            w->u->cache_bytes += bytes;
        }
        return rc;
    }
    json_decref(rec);
    w->u->cache_records++;
    w->u->cache_bytes += bytes;
    report(w, "cache", key, bytes);
    return remove_entry(w, dfd, dir, name, err);
}

static int run(struct sweep *w, struct mf_err *err)
{
    struct marks m = {0};
    int rc = mark_roots_index(w->s, &m, err);
    if (!rc)
        rc = walk(w, STORE_CACHE_DIR, visit_cache, &m, err);
    if (!rc)
        rc = mark_all(w->s, &m, err);
    if (!rc)
        rc = walk(w, STORE_BLOBS_DIR, sweep_blob, &m, err);
    if (!rc)
        rc = walk(w, STORE_TMP_DIR, sweep_tmp, NULL, err);
    marks_free(&m);
    return rc;
}

int store_gc_usage(struct store *s, struct store_usage *u, struct mf_err *err)
{
    memset(u, 0, sizeof *u);
    struct sweep w = {.s = s, .count_only = 1, .u = u};
    return run(&w, err);
}

static int drop_stat_cache(struct sweep *w, struct mf_err *err)
{
    if (!(w->flags & STORE_GC_ALL) || (w->flags & STORE_GC_DRY_RUN))
        return 0;
    char *path = store_join(w->s, STORE_STAT_FILE, err);
    int rc = path ? 0 : MF_ENOMEM;
    if (path && unlink(path) != 0 && errno != ENOENT)
        rc = mf_err_sys(err, MF_EIO, errno, "cannot remove %s", path);
    free(path);
    return rc;
}

/* Takes the store exclusively; on MF_EBUSY the shared lock is back in place. */
static int lock_exclusive(struct store *s, struct mf_err *err)
{
    if (flock(s->lock_fd, LOCK_EX | LOCK_NB) == 0)
        return 0;
    int e = errno;
    while (flock(s->lock_fd, LOCK_SH) != 0 && errno == EINTR)
        ;
    if (e == EWOULDBLOCK)
        return mf_err_set(err, MF_EBUSY,
                          "the store %s is in use by another mfc process (a build or a fetch); "
                          "prune when it has finished",
                          s->root);
    return mf_err_sys(err, MF_EIO, e, "cannot lock the store %s", s->root);
}

int store_gc_run(struct store *s, unsigned flags, store_gc_fn cb, void *arg,
                 struct store_usage *removed, struct mf_err *err)
{
    memset(removed, 0, sizeof *removed);
    struct sweep w = {.s = s, .flags = flags, .cb = cb, .arg = arg, .u = removed};
    int dry = (flags & STORE_GC_DRY_RUN) != 0;
    int rc = dry ? 0 : lock_exclusive(s, err);
    if (rc)
        return rc;
    rc = run(&w, err);
    if (!rc)
        rc = drop_stat_cache(&w, err);
    if (!dry)
        while (flock(s->lock_fd, LOCK_SH) != 0 && errno == EINTR)
            ;
    return rc;
}
