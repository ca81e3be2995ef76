/*
 * store.c: the content store's core: opening, locks, and blobs in and out.
 *
 * Owns the root directory layout (oci-layout, blobs/sha256, tmp, cache) and
 * the two lock files. Tags (store_tag.c), cache records (store_cache.c), the
 * stat cache (store_stat.c) and garbage collection (store_gc.c) build on it.
 *
 * Blob writer states:
 *   (none)  --store_blob_writer_open[_partial]-->  WRITING  (tmp/blob-* or tmp/partial-*)
 *   WRITING --store_blob_writer_write/reset----->  WRITING
 *   WRITING --store_blob_writer_commit, match--->  STORED   (renamed to blobs/sha256/<hex>)
 *   WRITING --commit mismatch / _discard-------->  (none)   (file removed)
 *   WRITING --store_blob_writer_abort----------->  (none) for tmp/blob-*,
 *                                                  KEPT for tmp/partial-* (resumable)
 *
 * Invariants: a file in blobs/sha256 hashes to its name, because it only gets
 * there by rename() after its digest was computed from the bytes written and
 * checked against the expected one. Blob writes take no lock: two writers of
 * one digest produce identical files and rename is atomic. Every open handle
 * holds LOCK_SH on "lock"; gc takes LOCK_EX, so it never sweeps a blob that a
 * running build has written but not yet tagged. Paths are only ever built
 * from validated digests and names.
 */
#include "store/store.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/file.h"
#include "common/json.h"
#include "common/sha256.h"
#include "store/store_int.h"

#define CHUNK (1u << 20) /* copy and hash in 1 MiB pieces: big enough to stream at disk speed */
#define LAYOUT_MAX 4096  /* bytes of oci-layout we read; the real file is ~30 */

struct store_blob_writer {
    struct store *s;               /* borrowed: the store it writes into */
    int fd;                        /* open tmp or partial file */
    char *tmp_path;                /* owned: its path */
    int partial;                   /* nonzero: tmp/partial-*, kept by abort */
    struct mf_sha256 h;            /* running digest of bytes 0..size */
    uint64_t size;                 /* bytes in the file */
    char expect[STORE_DIGEST_BUF]; /* digest the content must have, or "" */
    struct ring *ring;             /* owned: hashing thread (store_blob_writer_hash_async), or NULL */
};

struct ring;
static int ring_write(struct store_blob_writer *w, const void *p, size_t n, struct mf_err *err);
static int ring_end(struct store_blob_writer *w, int flush, struct mf_err *err);
static int ring_drain(struct store_blob_writer *w, struct mf_err *err);
static void ring_keep_held(struct store_blob_writer *w);

/* ---- paths and digests ------------------------------------------------------------ */

int store_digest_valid(const char *s)
{
    if (!s || strncmp(s, "sha256:", 7) != 0)
        return 0;
    for (int i = 0; i < MF_SHA256_HEX_LEN; i++) {
        char c = s[7 + i];
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
            return 0;
    }
    return s[7 + MF_SHA256_HEX_LEN] == '\0';
}

int store_digest_check(const char *s, const char *what, struct mf_err *err)
{
    if (store_digest_valid(s))
        return 0;
    if (s && (strncmp(s, "sha512:", 7) == 0 || strncmp(s, "blake3:", 7) == 0))
        return mf_err_set(err, MF_EUNSUPPORTED,
                          "%s: digest \"%.80s\" is not sha256; the store only holds sha256 blobs",
                          what, s);
    return mf_err_set(err, MF_EINVAL,
                      "%s: \"%.80s\" is not a digest (sha256: and 64 lowercase hex digits)", what,
                      s ? s : "(null)");
}

void store_digest_format(const uint8_t d[MF_SHA256_LEN], char digest[STORE_DIGEST_BUF])
{
    char hex[MF_SHA256_HEX_LEN + 1];
    mf_sha256_hex(d, hex);
    snprintf(digest, STORE_DIGEST_BUF, "sha256:%s", hex);
}

char *store_join(const struct store *s, const char *rel, struct mf_err *err)
{
    struct mf_buf b;
    mf_buf_init(&b, PATH_MAX);
    if (mf_buf_printf(&b, err, "%s/%s", s->root, rel) != 0) {
        mf_buf_free(&b);
        return NULL;
    }
    return mf_buf_take(&b);
}

char *store_digest_join(const struct store *s, const char *dir, const char *digest,
                        const char *suffix, struct mf_err *err)
{
    if (store_digest_check(digest, "blob", err) != 0)
        return NULL;
    struct mf_buf b;
    mf_buf_init(&b, PATH_MAX);
    if (mf_buf_printf(&b, err, "%s/%s/%s%s", s->root, dir, digest + 7, suffix) != 0) {
        mf_buf_free(&b);
        return NULL;
    }
    return mf_buf_take(&b);
}

static int name_valid(const char *name)
{
    size_t n = strlen(name);
    if (n == 0 || n > 200 || name[0] == '.')
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                 c == '.' || c == '_' || c == '-';
        if (!ok)
            return 0;
    }
    return 1;
}

int store_tmp_path(struct store *s, const char *name, char **path, struct mf_err *err)
{
    if (!name_valid(name))
        return mf_err_set(err, MF_EINVAL, "\"%.80s\" is not a valid store tmp file name", name);
    struct mf_buf b;
    mf_buf_init(&b, PATH_MAX);
    int rc = mf_buf_printf(&b, err, "%s/" STORE_TMP_DIR "/%s", s->root, name);
    if (rc) {
        mf_buf_free(&b);
        return rc;
    }
    *path = mf_buf_take(&b);
    return *path ? 0 : mf_err_set(err, MF_ENOMEM, "out of memory");
}

/* ---- opening, closing, locks ------------------------------------------------------ */

int store_default_root(char **root, struct mf_err *err)
{
    const char *home = getenv("MFC_HOME");
    struct mf_buf b;
    mf_buf_init(&b, PATH_MAX);
    int rc;
    if (home && *home) {
        rc = mf_buf_puts(&b, home, err);
    } else {
        home = getenv("HOME");
        if (!home || !*home)
            return mf_err_set(
                err, MF_EINVAL,
                "neither MFC_HOME nor HOME is set; set MFC_HOME to the store directory");
        rc = mf_buf_printf(&b, err, "%s/.local/share/mfc", home);
    }
    if (rc) {
        mf_buf_free(&b);
        return rc;
    }
    *root = mf_buf_take(&b);
    return *root ? 0 : mf_err_set(err, MF_ENOMEM, "out of memory");
}

static int make_dirs(struct store *s, struct mf_err *err)
{
    static const char *const dirs[] = {STORE_BLOBS_DIR, STORE_TMP_DIR, STORE_CACHE_DIR,
                                       STORE_OWNERS_DIR};
    int rc = mf_file_mkdirs(s->root, err);
    for (size_t i = 0; !rc && i < sizeof dirs / sizeof dirs[0]; i++) {
        char *p = store_join(s, dirs[i], err);
        rc = p ? mf_file_mkdirs(p, err) : MF_ENOMEM;
        free(p);
    }
    return rc;
}

/* oci-layout must say 1.0.0 (image-layout.md); a newer layout is not ours to write into. */
static int check_layout(struct store *s, struct mf_err *err)
{
    static const char layout[] = "{\"imageLayoutVersion\":\"1.0.0\"}\n";
    char *path = store_join(s, "oci-layout", err);
    if (!path)
        return MF_ENOMEM;
    char *text = NULL;
    size_t len = 0;
    int rc = mf_file_read(path, LAYOUT_MAX, &text, &len, err);
    if (rc == MF_ENOTFOUND) {
        rc = mf_file_write_atomic(path, layout, sizeof layout - 1, err);
        goto out;
    }
    if (rc)
        goto out;
    json_t *v = mf_json_parse(text, len, path, err);
    const char *ver = NULL;
    if (!v)
        rc = MF_EFORMAT;
    else if (mf_json_get_str(v, "imageLayoutVersion", path, &ver, err) != 0)
        rc = MF_EFORMAT;
    else if (strcmp(ver, "1.0.0") != 0)
        rc = mf_err_set(err, MF_EUNSUPPORTED, "%s: imageLayoutVersion \"%.40s\" is not 1.0.0", path,
                        ver);
    json_decref(v);
out:
    free(text);
    free(path);
    return rc;
}

/* index.json is required by the layout (image-layout.md); an empty one is
 * written once, under index.lock so two first runs do not race. */
static int ensure_index(struct store *s, struct mf_err *err)
{
    char *path = store_join(s, STORE_INDEX_FILE, err);
    if (!path)
        return MF_ENOMEM;
    json_t *index = NULL;
    int rc = access(path, F_OK) == 0 ? 0 : store_lock_index(s, err);
    if (!rc && s->index_locked && access(path, F_OK) != 0) {
        rc = store_index_load(s, &index, err); /* absent: an empty index */
        if (!rc)
            rc = store_index_save(s, index, err);
    }
    store_unlock_index(s);
    json_decref(index);
    free(path);
    return rc;
}

static int open_lock(struct store *s, const char *name, int *fd, struct mf_err *err)
{
    char *path = store_join(s, name, err);
    if (!path)
        return MF_ENOMEM;
    *fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    int rc = *fd < 0 ? mf_err_sys(err, MF_EIO, errno, "cannot open lock file %s", path) : 0;
    free(path);
    return rc;
}

static int flock_retry(int fd, int op)
{
    int r;
    do
        r = flock(fd, op);
    while (r != 0 && errno == EINTR);
    return r;
}

int store_open(struct store **out, const char *root, struct mf_err *err)
{
    *out = NULL;
    if (!root || !*root)
        return mf_err_set(err, MF_EINVAL, "the store directory is empty; set MFC_HOME");
    struct store *s = calloc(1, sizeof *s);
    if (!s)
        return mf_err_set(err, MF_ENOMEM, "out of memory");
    s->lock_fd = s->index_lock_fd = s->owner_fd = -1;
    s->racy_ns = 2000000000;
    s->root = strdup(root);
    int rc = s->root ? 0 : mf_err_set(err, MF_ENOMEM, "out of memory");
    if (!rc)
        rc = make_dirs(s, err);
    if (!rc)
        rc = open_lock(s, "lock", &s->lock_fd, err);
    if (!rc)
        rc = open_lock(s, "index.lock", &s->index_lock_fd, err);
    /* Blocks while `mfc prune` sweeps: a build starting then must not write
     * blobs the sweep would delete. */
    if (!rc && flock_retry(s->lock_fd, LOCK_SH) != 0)
        rc = mf_err_sys(err, MF_EIO, errno, "cannot lock the store %s", root);
    if (!rc)
        rc = store_tmp_owner_open(s, err);
    if (!rc)
        rc = check_layout(s, err);
    if (!rc)
        rc = ensure_index(s, err);
    if (rc) {
        store_close(s);
        return rc;
    }
    *out = s;
    return 0;
}

void store_close(struct store *s)
{
    if (!s)
        return;
    if (s->index_lock_fd >= 0)
        close(s->index_lock_fd);
    if (s->owner_fd >= 0)
        close(s->owner_fd);
    if (s->lock_fd >= 0)
        close(s->lock_fd);
    free(s->root);
    free(s);
}

const char *store_root(const struct store *s)
{
    return s->root;
}

const struct store_stats *store_stats(const struct store *s)
{
    return &s->stats;
}

int store_lock_index(struct store *s, struct mf_err *err)
{
    if (flock_retry(s->index_lock_fd, LOCK_EX) != 0)
        return mf_err_sys(err, MF_EIO, errno, "cannot lock %s/index.lock", s->root);
    s->index_locked = 1;
    return 0;
}

void store_unlock_index(struct store *s)
{
    if (s->index_locked)
        flock_retry(s->index_lock_fd, LOCK_UN);
    s->index_locked = 0;
}

/* ---- reading blobs ---------------------------------------------------------------- */

int store_hash_fd(struct store *s, int fd, const char *what, char digest[STORE_DIGEST_BUF],
                  uint64_t *size, struct mf_err *err)
{
    struct mf_sha256 h = {0};
    uint64_t total = 0;
    unsigned char *buf = malloc(CHUNK);
    int rc = buf ? mf_sha256_init(&h, err) : mf_err_set(err, MF_ENOMEM, "out of memory");
    while (!rc) {
        ssize_t n = read(fd, buf, CHUNK);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            rc = mf_err_sys(err, MF_EIO, errno, "cannot read %s", what);
        if (n <= 0)
            break;
        rc = mf_sha256_update(&h, buf, (size_t)n, err);
        total += (uint64_t)n;
    }
    uint8_t d[MF_SHA256_LEN];
    if (!rc)
        rc = mf_sha256_final(&h, d, err);
    if (!rc) {
        store_digest_format(d, digest);
        if (size)
            *size = total;
    }
    s->stats.hashed_bytes += total;
    mf_sha256_abort(&h);
    free(buf);
    return rc;
}

int store_blob_path(struct store *s, const char *digest, char **path, struct mf_err *err)
{
    char *p = store_digest_join(s, STORE_BLOBS_DIR, digest, "", err);
    if (!p)
        return err ? err->code : MF_EINVAL;
    *path = p;
    return 0;
}

int store_blob_exists(struct store *s, const char *digest)
{
    char *p = store_digest_join(s, STORE_BLOBS_DIR, digest, "", NULL);
    struct stat st;
    int ok = p && stat(p, &st) == 0 && S_ISREG(st.st_mode);
    free(p);
    return ok;
}

int store_blob_size(struct store *s, const char *digest, uint64_t *size, struct mf_err *err)
{
    char *p = store_digest_join(s, STORE_BLOBS_DIR, digest, "", err);
    if (!p)
        return err ? err->code : MF_EINVAL;
    struct stat st;
    int rc = 0;
    if (stat(p, &st) != 0)
        rc = mf_err_sys(err, errno == ENOENT ? MF_ENOTFOUND : MF_EIO, errno,
                        "blob %s is not in the store", digest);
    else
        *size = (uint64_t)st.st_size;
    free(p);
    return rc;
}

static int verify_fd(struct store *s, int fd, const char *digest, const char *path,
                     struct mf_err *err)
{
    char got[STORE_DIGEST_BUF];
    int rc = store_hash_fd(s, fd, path, got, NULL, err);
    if (rc)
        return rc;
    if (strcmp(got, digest) != 0)
        return mf_err_set(err, MF_EINTEGRITY,
                          "blob %s in the store is corrupt: its content hashes to %s; remove %s "
                          "and fetch or build it again",
                          digest, got, path);
    if (lseek(fd, 0, SEEK_SET) != 0)
        return mf_err_sys(err, MF_EIO, errno, "cannot seek %s", path);
    return 0;
}

int store_blob_open(struct store *s, const char *digest, int verify, int *fd, struct mf_err *err)
{
    *fd = -1;
    char *path = store_digest_join(s, STORE_BLOBS_DIR, digest, "", err);
    if (!path)
        return err ? err->code : MF_EINVAL;
    int f = open(path, O_RDONLY | O_CLOEXEC);
    int rc = 0;
    if (f < 0)
        rc = mf_err_sys(err, errno == ENOENT ? MF_ENOTFOUND : MF_EIO, errno,
                        "blob %s is not in the store", digest);
    if (!rc && verify)
        rc = verify_fd(s, f, digest, path, err);
    if (rc && f >= 0)
        close(f);
    else
        *fd = f;
    free(path);
    return rc;
}

int store_blob_read(struct store *s, const char *digest, size_t max, char **data, size_t *len,
                    struct mf_err *err)
{
    char *path = store_digest_join(s, STORE_BLOBS_DIR, digest, "", err);
    if (!path)
        return err ? err->code : MF_EINVAL;
    char *text = NULL;
    size_t n = 0;
    int rc = mf_file_read(path, max, &text, &n, err);
    if (rc == MF_ENOTFOUND)
        mf_err_set(err, rc, "blob %s is not in the store", digest);
    uint8_t d[MF_SHA256_LEN];
    char got[STORE_DIGEST_BUF];
    if (!rc)
        rc = mf_sha256_mem(text, n, d, err);
    if (!rc) {
        s->stats.hashed_bytes += n;
        store_digest_format(d, got);
        if (strcmp(got, digest) != 0)
            rc = mf_err_set(err, MF_EINTEGRITY,
                            "blob %s in the store is corrupt: its content hashes to %s", digest,
                            got);
    }
    if (rc) {
        free(text);
    } else {
        *data = text;
        *len = n;
    }
    free(path);
    return rc;
}

/* ---- the blob writer -------------------------------------------------------------- */

static struct store_blob_writer *writer_new(struct store *s, const char *expect, struct mf_err *err)
{
    if (expect && store_digest_check(expect, "expected digest", err) != 0)
        return NULL;
    struct store_blob_writer *w = calloc(1, sizeof *w);
    if (!w) {
        mf_err_set(err, MF_ENOMEM, "out of memory");
        return NULL;
    }
    w->s = s;
    w->fd = -1;
    if (expect)
        snprintf(w->expect, sizeof w->expect, "%s", expect);
    if (mf_sha256_init(&w->h, err) != 0) {
        free(w);
        return NULL;
    }
    return w;
}

int store_blob_writer_open(struct store *s, const char *expect, struct store_blob_writer **out,
                           struct mf_err *err)
{
    *out = NULL;
    struct store_blob_writer *w = writer_new(s, expect, err);
    if (!w)
        return err ? err->code : MF_EINVAL;
    int rc = 0;
    char rel[64]; /* blob-<pid>-XXXXXX: owned by this process (store_tmp.c) */
    snprintf(rel, sizeof rel, STORE_TMP_DIR "/blob-%ld-XXXXXX", (long)getpid());
    w->tmp_path = store_join(s, rel, err);
    if (!w->tmp_path)
        rc = MF_ENOMEM;
    if (!rc) {
        w->fd = mkostemp(w->tmp_path, O_CLOEXEC);
        if (w->fd < 0) {
            rc = mf_err_sys(err, MF_EIO, errno, "cannot create a file in %s/" STORE_TMP_DIR,
                            s->root);
            free(w->tmp_path);
            w->tmp_path = NULL; /* nothing to unlink */
        }
    }
    /* mkostemp makes 0600; blobs are shared content, readable like any image file. */
    if (!rc && fchmod(w->fd, 0644) != 0)
        rc = mf_err_sys(err, MF_EIO, errno, "cannot chmod %s", w->tmp_path);
    if (rc) {
        store_blob_writer_discard(w);
        return rc;
    }
    *out = w;
    return 0;
}

/* Opens and locks tmp/partial-<name>. Another process may commit (rename away)
 * the file between our open and our lock; then we hold a lock on an orphan
 * inode and must open the path again. */
static int open_partial_locked(struct store_blob_writer *w, struct mf_err *err)
{
    for (int tries = 0; tries < 8; tries++) {
        w->fd = open(w->tmp_path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        if (w->fd < 0)
            return mf_err_sys(err, MF_EIO, errno, "cannot open %s", w->tmp_path);
        if (flock_retry(w->fd, LOCK_EX) != 0)
            return mf_err_sys(err, MF_EIO, errno, "cannot lock %s", w->tmp_path);
        struct stat a, b;
        if (fstat(w->fd, &a) == 0 && stat(w->tmp_path, &b) == 0 && a.st_ino == b.st_ino &&
            a.st_dev == b.st_dev)
            return 0;
        close(w->fd);
        w->fd = -1;
    }
    return mf_err_set(err, MF_EBUSY, "%s keeps changing under us; another mfc is using it",
                      w->tmp_path);
}

/* Feeds the bytes already in the partial file to the digest. */
static int rehash_partial(struct store_blob_writer *w, struct mf_err *err)
{
    unsigned char *buf = malloc(CHUNK);
    int rc = buf ? 0 : mf_err_set(err, MF_ENOMEM, "out of memory");
    while (!rc) {
        ssize_t n = read(w->fd, buf, CHUNK);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            rc = mf_err_sys(err, MF_EIO, errno, "cannot read %s", w->tmp_path);
        if (n <= 0)
            break;
        rc = mf_sha256_update(&w->h, buf, (size_t)n, err);
        w->size += (uint64_t)n;
        w->s->stats.hashed_bytes += (uint64_t)n;
    }
    free(buf);
    return rc;
}

int store_blob_writer_open_partial(struct store *s, const char *name, const char *expect,
                                   struct store_blob_writer **out, struct mf_err *err)
{
    *out = NULL;
    struct mf_buf fname;
    mf_buf_init(&fname, 256);
    int rc = mf_buf_printf(&fname, err, STORE_PARTIAL_PREFIX "%s", name);
    struct store_blob_writer *w = rc ? NULL : writer_new(s, expect, err);
    if (!w) {
        mf_buf_free(&fname);
        return rc ? rc : (err ? err->code : MF_EINVAL);
    }
    w->partial = 1;
    rc = store_tmp_path(s, fname.data, &w->tmp_path, err);
    mf_buf_free(&fname);
    if (!rc)
        rc = open_partial_locked(w, err);
    if (!rc)
        rc = rehash_partial(w, err);
    if (rc) {
        store_blob_writer_abort(w);
        return rc;
    }
    *out = w;
    return 0;
}

static uint64_t ring_buffered(const struct ring *r);

uint64_t store_blob_writer_size(const struct store_blob_writer *w)
{
    return w->size + (w->ring ? ring_buffered(w->ring) : 0);
}

/* Appends n bytes to the file without hashing them (the caller hashes). */
static int writer_append(struct store_blob_writer *w, const void *p, size_t n, struct mf_err *err)
{
    const char *c = p;
    while (n) {
        ssize_t k = write(w->fd, c, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            return mf_err_sys(err, MF_EIO, errno, "cannot write %s", w->tmp_path);
        c += k;
        n -= (size_t)k;
        w->size += (uint64_t)k;
    }
    return 0;
}

int store_blob_writer_write(struct store_blob_writer *w, const void *p, size_t n,
                            struct mf_err *err)
{
    if (w->ring)
        return ring_write(w, p, n, err);
    int rc = mf_sha256_update(&w->h, p, n, err);
    if (rc)
        return rc;
    w->s->stats.hashed_bytes += n;
    return writer_append(w, p, n, err);
}

int store_blob_writer_reset(struct store_blob_writer *w, struct mf_err *err)
{
    /* With a ring: drop the held slot and wait until the hasher is idle, so
     * it no longer touches w->h; it stays running for what comes next. */
    int rc = w->ring ? ring_drain(w, err) : 0;
    if (rc)
        return rc;
    if (ftruncate(w->fd, 0) != 0 || lseek(w->fd, 0, SEEK_SET) != 0)
        return mf_err_sys(err, MF_EIO, errno, "cannot truncate %s", w->tmp_path);
    mf_sha256_abort(&w->h);
    w->size = 0;
    return mf_sha256_init(&w->h, err);
}

static int fsync_dir(const char *dir, struct mf_err *err)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return mf_err_sys(err, MF_EIO, errno, "cannot open directory %s", dir);
    int rc = 0;
    if (fsync(fd) != 0 && errno != EINVAL)
        rc = mf_err_sys(err, MF_EIO, errno, "cannot fsync directory %s", dir);
    close(fd);
    return rc;
}

/* Moves the verified file to blobs/sha256/<hex>, or drops it when that blob is
 * already there (same bytes by construction; keeping the old inode spares
 * readers that have it mapped). */
static int publish(struct store_blob_writer *w, const char *digest, struct mf_err *err)
{
    char *dst = store_digest_join(w->s, STORE_BLOBS_DIR, digest, "", err);
    char *dir = store_join(w->s, STORE_BLOBS_DIR, err);
    int rc = dst && dir ? 0 : MF_ENOMEM;
    struct stat st;
    if (!rc && stat(dst, &st) == 0 && S_ISREG(st.st_mode)) {
        unlink(w->tmp_path);
    } else if (!rc) {
        if (rename(w->tmp_path, dst) != 0)
            rc = mf_err_sys(err, MF_EIO, errno, "cannot move %s to %s", w->tmp_path, dst);
        else
            rc = fsync_dir(dir, err);
        if (!rc)
            w->s->stats.blobs_written++;
    }
    free(dst);
    free(dir);
    return rc;
}

int store_blob_writer_commit(struct store_blob_writer *w, char digest[STORE_DIGEST_BUF],
                             uint64_t *size, struct mf_err *err)
{
    uint8_t d[MF_SHA256_LEN];
    char got[STORE_DIGEST_BUF];
    int rc = w->ring ? ring_end(w, 1, err) : 0;
    if (!rc && fsync(w->fd) != 0)
        rc = mf_err_sys(err, MF_EIO, errno, "cannot fsync %s", w->tmp_path);
    if (!rc)
        rc = mf_sha256_final(&w->h, d, err);
    if (!rc) {
        store_digest_format(d, got);
        if (w->expect[0] && strcmp(got, w->expect) != 0)
            rc = mf_err_set(err, MF_EINTEGRITY,
                            "digest mismatch: expected %s, got %s (%llu bytes); nothing was stored",
                            w->expect, got, (unsigned long long)w->size);
    }
    if (!rc)
        rc = publish(w, got, err);
    if (rc) {
        store_blob_writer_discard(w);
        return rc;
    }
    snprintf(digest, STORE_DIGEST_BUF, "%s", got);
    if (size)
        *size = w->size;
    free(w->tmp_path);
    w->tmp_path = NULL; /* renamed or unlinked: nothing left to remove */
    store_blob_writer_discard(w);
    return 0;
}

static void writer_free(struct store_blob_writer *w, int remove_file)
{
    if (w->ring && !remove_file)
        ring_keep_held(w); /* a kept partial keeps every byte it was given */
    if (w->ring)
        (void)ring_end(w, 0, NULL);
    if (w->fd >= 0) {
        if (!remove_file)
            (void)fsync(w->fd); /* best effort: a lost tail only costs a re-download */
        close(w->fd);
    }
    if (w->tmp_path && remove_file)
        unlink(w->tmp_path);
    mf_sha256_abort(&w->h);
    free(w->tmp_path);
    free(w);
}

void store_blob_writer_abort(struct store_blob_writer *w)
{
    if (w)
        writer_free(w, !w->partial);
}

void store_blob_writer_discard(struct store_blob_writer *w)
{
    if (w)
        writer_free(w, 1);
}

/* ---- putting files and memory ----------------------------------------------------- */

int store_put_mem(struct store *s, const void *p, size_t n, char digest[STORE_DIGEST_BUF],
                  struct mf_err *err)
{
    struct store_blob_writer *w;
    int rc = store_blob_writer_open(s, NULL, &w, err);
    if (rc)
        return rc;
    rc = store_blob_writer_write(w, p, n, err);
    if (rc) {
        store_blob_writer_discard(w);
        return rc;
    }
    return store_blob_writer_commit(w, digest, NULL, err);
}

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Opens a regular file for hashing and resolves its absolute path (the stat
 * cache key). On failure nothing is left open. */
static int open_source(const char *path, int *fd, struct stat *st, char **abspath,
                       struct mf_err *err)
{
    *fd = open(path, O_RDONLY | O_CLOEXEC);
    if (*fd < 0)
        return mf_err_sys(err, errno == ENOENT ? MF_ENOTFOUND : MF_EIO, errno, "cannot open %s",
                          path);
    int rc = 0;
    if (fstat(*fd, st) != 0)
        rc = mf_err_sys(err, MF_EIO, errno, "cannot stat %s", path);
    else if (!S_ISREG(st->st_mode))
        rc = mf_err_set(err, MF_EINVAL, "%s is not a regular file", path);
    if (!rc && !(*abspath = realpath(path, NULL)))
        rc = mf_err_sys(err, MF_EIO, errno, "cannot resolve %s", path);
    if (rc) {
        close(*fd);
        *fd = -1;
    }
    return rc;
}

static int same_stat(const struct stat *a, const struct stat *b)
{
    return a->st_size == b->st_size && a->st_ino == b->st_ino && a->st_dev == b->st_dev &&
           a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec &&
           a->st_ctim.tv_sec == b->st_ctim.tv_sec && a->st_ctim.tv_nsec == b->st_ctim.tv_nsec;
}

/*
 * Hashing in a second thread. SHA-256 in software runs at about the speed of
 * a disk, so hashing in line made a cold build cost read + write + hash;
 * overlapped it costs about max(read + write, hash). Both big writers use it:
 * store_put_file (a file copied into a blob) and layer_write's plain tar of
 * the weights (store_blob_writer_hash_async), so each byte is read once,
 * written once, and hashed on the other core. Downloads use it too, with
 * 256 KiB slots (store_blob_writer_hash_async_slots): the slot the receiving
 * thread just wrote is hashed while it is still in cache, where 4 MiB slots
 * were measured slower for them (bench/README.md, "Fetch").
 *
 * Ring protocol (all under ring.mu): the writer fills slot head % RING_SLOTS
 * only while head - tail < RING_SLOTS, writes it to the file, then publishes
 * it (head++); the hasher hashes slot tail % RING_SLOTS and frees it
 * (tail++). Slots are hashed in the order they were written, so the digest is
 * the one store_blob_writer_write computes in line. An error on either side
 * sets stop; the other side sees it at its next wait.
 */
#define RING_SLOTS 4
#define RING_SLOT_BYTES (4u << 20) /* 4 x 4 MiB: a few readahead windows in flight */
#define RING_SLOT_MIN (4u << 10)    /* smallest slot store_blob_writer_hash_async_slots takes */

struct ring {
    unsigned char *buf[RING_SLOTS]; /* owned: slot_bytes each */
    size_t slot_bytes;              /* size of each slot */
    size_t len[RING_SLOTS];         /* bytes in each published slot */
    uint64_t head, tail;            /* slots published, slots hashed */
    int eof;                        /* writer: no more slots will be published */
    int stop;                       /* either side failed: both stop */
    struct mf_sha256 *h;            /* borrowed: the writer's running digest */
    struct mf_err err;              /* the hasher's error, when it failed */
    int rc;                         /* the hasher's code */
    pthread_mutex_t mu;             /* guards every field above but buf and h */
    pthread_cond_t cv;              /* signalled on every head, tail or flag change */
    pthread_t tid;                  /* the hasher */
    int held;                       /* writer side only: slot head % RING_SLOTS is being filled */
    size_t fill;                    /* writer side only: bytes in that slot */
};

static void *ring_hasher(void *arg)
{
    struct ring *r = arg;
    pthread_mutex_lock(&r->mu);
    for (;;) {
        while (r->tail == r->head && !r->eof && !r->stop)
            pthread_cond_wait(&r->cv, &r->mu);
        if (r->stop || r->tail == r->head)
            break;
        size_t i = (size_t)(r->tail % RING_SLOTS), n = r->len[i];
        pthread_mutex_unlock(&r->mu);
        int rc = mf_sha256_update(r->h, r->buf[i], n, &r->err);
        pthread_mutex_lock(&r->mu);
        if (rc) {
            r->rc = rc;
            r->stop = 1;
        } else {
            r->tail++;
        }
        pthread_cond_broadcast(&r->cv);
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

/* Bytes accepted but still in the held slot (not yet in the file). */
static uint64_t ring_buffered(const struct ring *r)
{
    return r->held ? r->fill : 0;
}

static void ring_free(struct ring *r)
{
    pthread_cond_destroy(&r->cv);
    pthread_mutex_destroy(&r->mu);
    for (int i = 0; i < RING_SLOTS; i++)
        free(r->buf[i]);
    free(r);
}

int store_blob_writer_hash_async(struct store_blob_writer *w, struct mf_err *err)
{
    return store_blob_writer_hash_async_slots(w, RING_SLOT_BYTES, err);
}

int store_blob_writer_hash_async_slots(struct store_blob_writer *w, size_t slot_bytes,
                                       struct mf_err *err)
{
    if (w->ring)
        return 0;
    if (slot_bytes < RING_SLOT_MIN || slot_bytes > RING_SLOT_BYTES)
        return mf_err_set(err, MF_EINVAL, "hashing slots of %zu bytes for %s: not in %u..%u",
                          slot_bytes, w->tmp_path, RING_SLOT_MIN, RING_SLOT_BYTES);
    struct ring *r = calloc(1, sizeof *r);
    if (!r)
        return mf_err_set(err, MF_ENOMEM, "out of memory");
    r->h = &w->h;
    r->slot_bytes = slot_bytes;
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    for (int i = 0; i < RING_SLOTS; i++)
        if (!(r->buf[i] = malloc(slot_bytes))) {
            ring_free(r);
            return mf_err_set(err, MF_ENOMEM, "out of memory for %s", w->tmp_path);
        }
    if (pthread_create(&r->tid, NULL, ring_hasher, r) != 0) {
        ring_free(r);
        return mf_err_set(err, MF_ENOMEM, "cannot start a hashing thread for %s", w->tmp_path);
    }
    w->ring = r;
    return 0;
}

/* Waits for a free slot and holds it: 0, or MF_EIO after a hasher failure
 * (its error is reported by ring_end). */
static int ring_hold(struct ring *r)
{
    if (r->held)
        return 0;
    pthread_mutex_lock(&r->mu);
    while (r->head - r->tail == RING_SLOTS && !r->stop)
        pthread_cond_wait(&r->cv, &r->mu);
    int stopped = r->stop;
    pthread_mutex_unlock(&r->mu);
    if (stopped)
        return MF_EIO;
    r->held = 1;
    r->fill = 0;
    return 0;
}

/* Writes the held slot to the file and hands it to the hasher. */
static int ring_publish(struct store_blob_writer *w, struct mf_err *err)
{
    struct ring *r = w->ring;
    size_t i = (size_t)(r->head % RING_SLOTS), n = r->fill;
    int rc = writer_append(w, r->buf[i], n, err);
    pthread_mutex_lock(&r->mu);
    if (rc)
        r->stop = 1;
    else
        r->len[i] = n, r->head++;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    r->held = 0;
    r->fill = 0;
    if (!rc)
        w->s->stats.hashed_bytes += n;
    return rc;
}

/* The hasher's error after a failed ring_hold. */
static int ring_failed(struct store_blob_writer *w, struct mf_err *err)
{
    return ring_end(w, 0, err);
}

/* store_blob_writer_write with a ring: copies into the held slot, publishing
 * each full one (the file lags by at most one slot until commit). */
static int ring_write(struct store_blob_writer *w, const void *p, size_t n, struct mf_err *err)
{
    struct ring *r = w->ring;
    const unsigned char *c = p;
    while (n) {
        if (ring_hold(r) != 0)
            return ring_failed(w, err);
        size_t k = r->slot_bytes - r->fill < n ? r->slot_bytes - r->fill : n;
        memcpy(r->buf[(size_t)(r->head % RING_SLOTS)] + r->fill, c, k);
        r->fill += k;
        c += k;
        n -= k;
        if (r->fill == r->slot_bytes) {
            int rc = ring_publish(w, err);
            if (rc)
                return rc;
        }
    }
    return 0;
}

/* Stops the hasher and releases the ring. flush nonzero: publish the held
 * slot first and wait until every slot is hashed; returns the first error
 * (the hasher's included). flush 0: abandon (err may be NULL). */
static int ring_end(struct store_blob_writer *w, int flush, struct mf_err *err)
{
    struct ring *r = w->ring;
    int rc = 0;
    if (flush && r->held && r->fill)
        rc = ring_publish(w, err);
    pthread_mutex_lock(&r->mu);
    if (flush && !rc)
        r->eof = 1;
    else
        r->stop = 1;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    pthread_join(r->tid, NULL);
    if (!rc && r->rc) {
        if (err)
            *err = r->err;
        rc = r->rc;
    } else if (!rc && !flush) {
        rc = err ? mf_err_set(err, MF_EIO, "hashing %s stopped", w->tmp_path) : MF_EIO;
    }
    w->ring = NULL;
    ring_free(r);
    return rc;
}

/* For store_blob_writer_reset: forgets the held slot and waits until every
 * published slot is hashed, so the hasher is idle (waiting for head to move)
 * and the caller may restart w->h. 0, or the hasher's error (the ring is
 * then ended, as after any hasher failure). */
static int ring_drain(struct store_blob_writer *w, struct mf_err *err)
{
    struct ring *r = w->ring;
    r->held = 0;
    r->fill = 0;
    pthread_mutex_lock(&r->mu);
    while (r->tail != r->head && !r->stop)
        pthread_cond_wait(&r->cv, &r->mu);
    int stopped = r->stop;
    pthread_mutex_unlock(&r->mu);
    return stopped ? ring_failed(w, err) : 0;
}

/* For abort of a partial: writes the held slot to the file without hashing
 * it (the digest is dropped anyway; a resume hashes the file again). Best
 * effort: a failed write only costs those bytes, and the file stays a
 * prefix of what was written. */
static void ring_keep_held(struct store_blob_writer *w)
{
    struct ring *r = w->ring;
    if (r->held && r->fill)
        (void)writer_append(w, r->buf[(size_t)(r->head % RING_SLOTS)], r->fill, NULL);
    r->held = 0;
    r->fill = 0;
}

/* Copies a file into w, reading straight into the ring's slots; the hash is
 * complete once store_blob_writer_commit has ended the ring. */
static int copy_into(struct store_blob_writer *w, int fd, const char *path, uint64_t total,
                     const struct store_put_opts *o, struct mf_err *err)
{
    int rc = store_blob_writer_hash_async(w, err);
    uint64_t done = 0;
    while (!rc) {
        struct ring *r = w->ring;
        if (ring_hold(r) != 0)
            return ring_failed(w, err);
        unsigned char *slot = r->buf[(size_t)(r->head % RING_SLOTS)];
        size_t n = 0;
        while (n < r->slot_bytes) { /* fill the slot: fewer, larger hash calls */
            ssize_t k = read(fd, slot + n, r->slot_bytes - n);
            if (k < 0 && errno == EINTR)
                continue;
            if (k < 0)
                rc = mf_err_sys(err, MF_EIO, errno, "cannot read %s", path);
            if (k <= 0)
                break;
            n += (size_t)k;
        }
        if (rc || !n)
            break;
        r->fill = n;
        rc = ring_publish(w, err);
        done += n;
        if (!rc && o && o->progress)
            o->progress(o->progress_arg, done, total);
    }
    return rc;
}

static int cached_result(struct store *s, const char *cached, const struct store_put_opts *o,
                         const char *path, struct mf_err *err)
{
    if (o && o->expect && strcmp(o->expect, cached) != 0)
        return mf_err_set(err, MF_EINTEGRITY,
                          "%s: digest mismatch: expected %s, got %s; nothing was stored", path,
                          o->expect, cached);
    s->stats.stat_hits++;
    return 0;
}

int store_put_file(struct store *s, const char *path, const struct store_put_opts *o,
                   char digest[STORE_DIGEST_BUF], uint64_t *size, struct mf_err *err)
{
    int fd;
    struct stat st, after;
    char *abspath = NULL;
    char got[STORE_DIGEST_BUF];
    struct store_blob_writer *w = NULL;
    int rc = open_source(path, &fd, &st, &abspath, err);
    if (rc)
        return rc;
    if (store_stat_lookup(s, abspath, &st, got) && store_blob_exists(s, got)) {
        rc = cached_result(s, got, o, path, err);
        goto done;
    }
    int64_t start = now_ns();
    rc = store_blob_writer_open(s, o ? o->expect : NULL, &w, err);
    if (!rc)
        rc = copy_into(w, fd, path, (uint64_t)st.st_size, o, err);
    if (rc) {
        store_blob_writer_discard(w);
        goto out;
    }
    rc = store_blob_writer_commit(w, got, NULL, err);
    if (rc) {
        mf_err_prefix(err, "%s", path);
        goto out;
    }
    if (fstat(fd, &after) == 0 && same_stat(&st, &after))
        store_stat_record(s, abspath, &st, start, got);
done:
    if (!rc) {
        snprintf(digest, STORE_DIGEST_BUF, "%s", got);
        if (size)
            *size = (uint64_t)st.st_size;
    }
out:
    close(fd);
    free(abspath);
    return rc;
}

int store_digest_file(struct store *s, const char *path, char digest[STORE_DIGEST_BUF],
                      uint64_t *size, struct mf_err *err)
{
    int fd;
    struct stat st, after;
    char *abspath = NULL;
    char got[STORE_DIGEST_BUF];
    uint64_t n = 0;
    int rc = open_source(path, &fd, &st, &abspath, err);
    if (rc)
        return rc;
    if (store_stat_lookup(s, abspath, &st, got)) {
        s->stats.stat_hits++;
        n = (uint64_t)st.st_size;
    } else {
        int64_t start = now_ns();
        rc = store_hash_fd(s, fd, path, got, &n, err);
        if (!rc && fstat(fd, &after) == 0 && same_stat(&st, &after))
            store_stat_record(s, abspath, &st, start, got);
    }
    if (!rc) {
        snprintf(digest, STORE_DIGEST_BUF, "%s", got);
        if (size)
            *size = n;
    }
    close(fd);
    free(abspath);
    return rc;
}
