/*
 * layer.c: deterministic tar layers streamed into the content store.
 *
 * One layer_write call is one pass:
 *
 *   entries --sort, add parents--> libarchive (pax restricted, no blocking)
 *     --tar bytes--> sink: [sha256 of the tar = diff_id] --> [zlib gzip] -->
 *     store_blob_writer (hashes the blob, tmp file, commit = rename)
 *
 * State of the sink: OPEN (layer_write set it up) -> WRITING (sink_write,
 * from libarchive's callback) -> FINISHED (sink_finish: gzip trailer, diff_id,
 * blob committed) or FAILED (first error kept in sink.rc; sink_abort drops the
 * tmp file). Invariants: the blob writer only ever sees complete, ordered
 * bytes; nothing enters blobs/sha256 unless every entry was written in full.
 * What makes two runs byte-identical is listed in layer.h.
 *
 * layer_tar_write_fd (image archives) is the same tar into a file, except that
 * a file's content never passes through user space: libarchive writes the
 * headers and padding, the kernel copies the bytes (struct tap, kcopy); and
 * a file of 64 MiB or more gets headers from layer_pax.c that start its
 * content on a 512 KiB boundary (write_aligned).
 */
#include "image/layer.h"

#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <archive.h>
#include <archive_entry.h>
#include <zlib.h>

#include "common/buf.h"
#include "common/num.h"
#include "common/sha256.h"

#define COPY_CHUNK (1u << 20)  /* bytes per read while copying a file into the tar */
#define ZOUT_CHUNK (64u << 10) /* bytes of compressed output per deflate round */
#define LDD_OUT_MAX (64u << 10) /* bytes of `ldd` output we agree to read */
#define KCOPY_CHUNK (8u << 20) /* bytes per placeholder write when the kernel copies a file */
/* In an archive written by layer_tar_write_fd, a file of ALIGN_MIN bytes or
 * more starts its content on an ALIGN boundary (layer_pax.c says why) */
#define ALIGN_MIN (64u << 20)
#define ALIGN (512u << 10)

extern char **environ;

/* ---- the sink: tar bytes -> (diff_id, gzip) -> blob writer ---- */

struct sink {
    struct store_blob_writer *w; /* owned until commit/abort */
    struct mf_sha256 raw;        /* digest of the tar (diff_id); ctx NULL when unused */
    int gzip;                    /* nonzero: deflate before the blob writer */
    int z_live;                  /* nonzero: z needs deflateEnd */
    z_stream z;                  /* gzip state (windowBits 31: gzip header, mtime 0) */
    unsigned char *zout;         /* owned: ZOUT_CHUNK bytes */
    int rc;                      /* first error, or 0 */
    struct mf_err err;           /* its message */
};

static int sink_deflate(struct sink *k, const void *p, size_t n, int flush)
{
    k->z.next_in = (unsigned char *)(uintptr_t)p;
    k->z.avail_in = (uInt)n;
    int zr;
    do {
        k->z.next_out = k->zout;
        k->z.avail_out = ZOUT_CHUNK;
        zr = deflate(&k->z, flush);
        if (zr == Z_STREAM_ERROR)
            return mf_err_set(&k->err, MF_EIO, "gzip: deflate failed");
        size_t got = ZOUT_CHUNK - k->z.avail_out;
        if (got && store_blob_writer_write(k->w, k->zout, got, &k->err) != 0)
            return k->err.code;
    } while (k->z.avail_out == 0 || (flush == Z_FINISH && zr != Z_STREAM_END));
    return 0;
}

static int sink_write(struct sink *k, const void *p, size_t n)
{
    if (k->rc)
        return k->rc;
    if (!k->gzip)
        k->rc = store_blob_writer_write(k->w, p, n, &k->err);
    else if ((k->rc = mf_sha256_update(&k->raw, p, n, &k->err)) == 0) {
        /* deflate takes a uInt; libarchive never hands us more than a few blocks */
        k->rc = n > UINT32_MAX ? mf_err_set(&k->err, MF_ERANGE, "tar write too large")
                               : sink_deflate(k, p, n, Z_NO_FLUSH);
    }
    return k->rc;
}

/* Where libarchive's bytes go: a layer_out_fn and the first error it gave.
 *
 * Kernel copy (layer_tar_write_fd, out_fd >= 0): a file's content is handed to
 * libarchive as `mark` (a zeroed placeholder buffer, never read), and
 * archive_cb, seeing that exact pointer, has the kernel copy that many bytes
 * from src_fd to out_fd instead of writing the placeholder. This relies on
 * libarchive passing data straight through when blocking is off (bytes per
 * block 0, archive_open) — its "no write delay" mode — and is checked: each
 * placeholder write must arrive whole, at once, as `mark` (expect counts it
 * down), else the stream fails rather than writing placeholder bytes. */
struct tap {
    layer_out_fn fn;   /* the consumer */
    void *arg;         /* its argument */
    int rc;            /* first error, or 0 */
    struct mf_err err; /* its message */
    int out_fd;        /* kernel copy: the output file, else -1 */
    const char *mark;  /* kernel copy: owned placeholder of KCOPY_CHUNK bytes, else NULL */
    int src_fd;        /* kernel copy: the file being copied, or -1 */
    const char *src;   /* its name, for messages */
    size_t expect;     /* placeholder bytes still due from the current archive_write_data */
    int how;           /* 0 copy_file_range, 1 sendfile, 2 read+write: the first that works */
    uint64_t pos;      /* kernel copy: bytes of tar written so far */
};

/* Writes all n bytes of p to the file *arg (a layer_out_fn). */
static int fd_out(void *arg, const void *p, size_t n, struct mf_err *err)
{
    const int *fd = arg;
    for (size_t w = 0; w < n;) {
        ssize_t k = write(*fd, (const char *)p + w, n - w);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            return mf_err_sys(err, MF_EIO, errno, "cannot write a tar");
        w += (size_t)k;
    }
    return 0;
}

/* Whether a failed copy_file_range / sendfile means "not between these two
 * files" (another file system, an fs without support, an old kernel), so the
 * next method should be tried. A failed call copied nothing. */
static int kcopy_unsupported(int how, int e)
{
    if (how == 0)
        return e == EXDEV || e == EINVAL || e == ENOSYS || e == EOPNOTSUPP;
    return e == EINVAL || e == ENOSYS;
}

/* Copies n bytes from in to out (both at their file offsets) in the kernel:
 * copy_file_range(2), else sendfile(2), else read+write (t->how remembers
 * which works). Fewer bytes than n in the source is MF_EIO ("shrank"). */
static int kcopy(struct tap *t, int in, int out, size_t n, struct mf_err *err)
{
    char buf[65536];
    while (n > 0) {
        ssize_t got;
        if (t->how == 0)
            got = copy_file_range(in, NULL, out, NULL, n, 0);
        else if (t->how == 1)
            got = sendfile(out, in, NULL, n);
        else
            got = read(in, buf, n < sizeof buf ? n : sizeof buf);
        if (got < 0 && errno == EINTR)
            continue;
        /* 0 before the end: some file systems answer so instead of an
         * error; read(2) then says whether the source really shrank */
        if (t->how < 2 && (got == 0 || (got < 0 && kcopy_unsupported(t->how, errno)))) {
            t->how++;
            continue;
        }
        if (got < 0)
            return mf_err_sys(err, MF_EIO, errno, "cannot copy %s into the tar", t->src);
        if (got == 0)
            return mf_err_set(err, MF_EIO, "%s shrank while it was being copied", t->src);
        if (t->how == 2) {
            int rc = fd_out(&out, buf, (size_t)got, err);
            if (rc != 0)
                return rc;
        }
        n -= (size_t)got;
    }
    return 0;
}

static la_ssize_t archive_cb(struct archive *a, void *arg, const void *p, size_t n)
{
    struct tap *t = arg;
    (void)a;
    if (t->rc == 0 && t->mark && p == t->mark && n <= t->expect) {
        t->expect -= n;
        t->rc = kcopy(t, t->src_fd, t->out_fd, n, &t->err);
    } else if (t->rc == 0 && t->expect)
        t->rc = mf_err_set(&t->err, MF_EIO, "the tar writer buffered %s's content (libarchive "
                           "changed?); cannot copy it in the kernel", t->src);
    else if (t->rc == 0)
        t->rc = t->fn(t->arg, p, n, &t->err);
    t->pos += n;
    return t->rc ? -1 : (la_ssize_t)n;
}

static int sink_out(void *arg, const void *p, size_t n, struct mf_err *err)
{
    struct sink *k = arg;
    int rc = sink_write(k, p, n);
    return rc ? mf_err_set(err, rc, "%s", k->err.msg) : 0;
}

static int sink_open(struct sink *k, struct store *s, int gzip)
{
    memset(k, 0, sizeof *k);
    k->gzip = gzip;
    int rc = store_blob_writer_open(s, NULL, &k->w, &k->err);
    /* a plain tar (the weights): hash on a second core while this one reads and writes */
    if (rc == 0 && !gzip)
        rc = store_blob_writer_hash_async(k->w, &k->err);
    if (rc == 0 && gzip) {
        rc = mf_sha256_init(&k->raw, &k->err);
        k->zout = malloc(ZOUT_CHUNK);
        if (rc == 0 && !k->zout)
            rc = mf_err_set(&k->err, MF_ENOMEM, "out of memory for gzip output");
        /* level 6 (zlib's default), 32 KiB window, 8 memLevel: fixed, so fixed output */
        if (rc == 0 && deflateInit2(&k->z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
            rc = mf_err_set(&k->err, MF_ENOMEM, "gzip: cannot start deflate");
        k->z_live = rc == 0;
    }
    k->rc = rc;
    return rc;
}

static void sink_abort(struct sink *k)
{
    store_blob_writer_discard(k->w);
    k->w = NULL;
    mf_sha256_abort(&k->raw);
    if (k->z_live)
        deflateEnd(&k->z);
    k->z_live = 0;
    free(k->zout);
    k->zout = NULL;
}

/* Ends the gzip stream, commits the blob, fills out. Always releases k. */
static int sink_finish(struct sink *k, struct layer_result *out)
{
    uint8_t d[MF_SHA256_LEN];
    char hex[MF_SHA256_HEX_LEN + 1];
    struct layer_result r = {0};
    if (!k->rc && k->gzip && (k->rc = sink_deflate(k, NULL, 0, Z_FINISH)) == 0)
        k->rc = mf_sha256_final(&k->raw, d, &k->err);
    if (!k->rc) {
        k->rc = store_blob_writer_commit(k->w, r.desc.digest, &r.desc.size, &k->err);
        k->w = NULL;
    }
    if (!k->rc) {
        if (k->gzip) {
            mf_sha256_hex(d, hex);
            memcpy(r.diff_id, "sha256:", 7);
            memcpy(r.diff_id + 7, hex, sizeof hex);
        } else
            memcpy(r.diff_id, r.desc.digest, sizeof r.diff_id);
        const char *mt = k->gzip ? LAYER_MT_TAR_GZIP : LAYER_MT_TAR;
        memcpy(r.desc.media_type, mt, strlen(mt) + 1);
        *out = r;
    }
    int rc = k->rc;
    sink_abort(k);
    return rc;
}

/* ---- entries: validation, parents, order ---- */

struct item {
    char *path;                   /* owned: "usr/bin" (dirs) or "usr/bin/x" */
    const struct layer_entry *e;  /* borrowed: the file, or NULL for a directory */
};

int layer_path_check(const char *path, struct mf_err *err)
{
    size_t n = path ? strlen(path) : 0;
    if (n == 0 || n >= LAYER_PATH_MAX || path[0] == '/' || path[n - 1] == '/')
        return mf_err_set(err, MF_EINVAL, "layer path '%s' must be relative, non-empty, "
                          "and shorter than %d bytes", path ? path : "", LAYER_PATH_MAX);
    for (const char *c = path; c;) {
        const char *end = strchr(c, '/');
        size_t len = end ? (size_t)(end - c) : strlen(c);
        if (len == 0 || (len == 1 && c[0] == '.') || (len == 2 && c[0] == '.' && c[1] == '.'))
            return mf_err_set(err, MF_EINVAL, "layer path '%s' has an empty, '.' or '..' "
                              "component", path);
        c = end ? end + 1 : NULL;
    }
    return 0;
}

static int item_cmp(const void *a, const void *b)
{
    return strcmp(((const struct item *)a)->path, ((const struct item *)b)->path);
}

static void items_free(struct item *it, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(it[i].path);
    free(it);
}

static int items_push(struct item *it, size_t *n, const char *p, size_t len,
                      const struct layer_entry *e, struct mf_err *err)
{
    char *s = strndup(p, len);
    if (!s)
        return mf_err_set(err, MF_ENOMEM, "out of memory for layer entries");
    it[*n].path = s;
    it[*n].e = e;
    (*n)++;
    return 0;
}

/* Sorted files plus their parent directories, each directory once. Parents
 * sort before children because a prefix sorts before its extensions. */
static int items_build(const struct layer_entry *e, size_t n, struct item **out, size_t *nout,
                       struct mf_err *err)
{
    size_t cap = 0, k = 0;
    int rc = 0;
    if (n == 0 || n > LAYER_MAX_ENTRIES)
        return mf_err_set(err, MF_EINVAL, "a layer needs 1 to %d entries, not %zu",
                          LAYER_MAX_ENTRIES, n);
    for (size_t i = 0; i < n; i++) {
        if ((rc = layer_path_check(e[i].path, err)) != 0)
            return rc;
        if (e[i].mode != 0644 && e[i].mode != 0755)
            return mf_err_set(err, MF_EINVAL, "layer entry '%s': mode %o is not 0644 or 0755",
                              e[i].path, e[i].mode);
        cap++;
        for (const char *c = strchr(e[i].path, '/'); c; c = strchr(c + 1, '/'))
            cap++; /* one parent directory per '/' */
    }
    struct item *it = calloc(cap, sizeof *it);
    if (!it)
        return mf_err_set(err, MF_ENOMEM, "out of memory for layer entries");
    for (size_t i = 0; i < n && rc == 0; i++) {
        const char *p = e[i].path;
        for (const char *sl = strchr(p, '/'); sl && rc == 0; sl = strchr(sl + 1, '/'))
            rc = items_push(it, &k, p, (size_t)(sl - p), NULL, err);
        if (rc == 0)
            rc = items_push(it, &k, p, strlen(p), &e[i], err);
    }
    if (rc == 0)
        qsort(it, k, sizeof *it, item_cmp);
    /* drop repeated directories; slots in [w, i) are moved or freed, [i, k) untouched */
    size_t w = 0, i = 0;
    for (; i < k && rc == 0; i++) {
        if (w > 0 && strcmp(it[w - 1].path, it[i].path) == 0) {
            if (it[i].e || it[w - 1].e)
                rc = mf_err_set(err, MF_EINVAL, "layer path '%s' appears twice", it[i].path);
            free(it[i].path);
            continue;
        }
        it[w++] = it[i];
    }
    if (rc != 0) {
        for (; i < k; i++)
            free(it[i].path);
        items_free(it, w);
        return rc;
    }
    *out = it;
    *nout = w;
    return 0;
}

/* ---- writing entries ---- */

static struct archive_entry *entry_new(const char *path, int dir, unsigned mode, uint64_t size,
                                       int64_t mtime)
{
    struct archive_entry *ae = archive_entry_new();
    if (!ae)
        return NULL;
    archive_entry_set_pathname(ae, path);
    archive_entry_set_filetype(ae, dir ? AE_IFDIR : AE_IFREG);
    archive_entry_set_perm(ae, dir ? 0755 : mode);
    archive_entry_set_size(ae, dir ? 0 : (la_int64_t)size);
    archive_entry_set_mtime(ae, mtime, 0);
    archive_entry_set_uid(ae, 0);
    archive_entry_set_gid(ae, 0);
    return ae;
}

static int arch_fail(struct archive *a, struct tap *k, const char *path, struct mf_err *err)
{
    if (k->rc)
        return mf_err_set(err, k->err.code, "%s", k->err.msg);
    return mf_err_set(err, MF_EIO, "layer entry '%s': %s", path, archive_error_string(a));
}

/* Kernel copy of one file's content (see struct tap): placeholder writes of
 * up to KCOPY_CHUNK bytes, each of which archive_cb turns into a copy. */
static int kcopy_file(struct archive *a, struct tap *k, int fd, const char *src, uint64_t size,
                      struct mf_err *err)
{
    k->src_fd = fd;
    k->src = src;
    int rc = 0;
    for (uint64_t done = 0; rc == 0 && done < size;) {
        size_t want = size - done < KCOPY_CHUNK ? (size_t)(size - done) : KCOPY_CHUNK;
        k->expect = want;
        if (archive_write_data(a, k->mark, want) != (la_ssize_t)want)
            rc = arch_fail(a, k, src, err);
        else if (k->expect != 0) /* libarchive kept some of it back */
            rc = mf_err_set(err, MF_EIO, "the tar writer held back %s's content (libarchive "
                            "changed?); cannot copy it in the kernel", src);
        done += want;
    }
    k->expect = 0;
    k->src_fd = -1;
    return rc;
}

static int copy_file(struct archive *a, struct tap *k, int fd, const char *src, uint64_t size,
                     struct mf_err *err)
{
    if (k->mark)
        return kcopy_file(a, k, fd, src, size, err);
    char *buf = malloc(COPY_CHUNK);
    if (!buf)
        return mf_err_set(err, MF_ENOMEM, "out of memory copying %s", src);
    uint64_t done = 0;
    int rc = 0;
    while (rc == 0 && done < size) {
        size_t want = size - done < COPY_CHUNK ? (size_t)(size - done) : COPY_CHUNK;
        ssize_t got = read(fd, buf, want);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0)
            rc = mf_err_sys(err, MF_EIO, errno, "cannot read %s", src);
        else if (got == 0)
            rc = mf_err_set(err, MF_EIO, "%s shrank while it was being copied", src);
        else if (archive_write_data(a, buf, (size_t)got) != got)
            rc = arch_fail(a, k, src, err);
        else
            done += (uint64_t)got;
    }
    free(buf);
    return rc;
}

/* A large file in an archive (kernel copy): its headers from layer_pax.c,
 * so its content starts on an ALIGN boundary, then the content and the
 * padding to 512, all past libarchive, which is told the entry before it is
 * finished (its padding written) and so resumes cleanly at the next one. */
static int write_aligned(struct archive *a, struct tap *k, const char *path, int fd,
                         const struct layer_entry *e, uint64_t size, int64_t mtime,
                         struct mf_err *err)
{
    static const char zeros[512];
    struct mf_buf h;
    if (archive_write_finish_entry(a) != ARCHIVE_OK)
        return arch_fail(a, k, path, err);
    mf_buf_init(&h, 4 * ALIGN);
    int rc = layer_pax_aligned_header(path, e->mode, size, mtime, k->pos, ALIGN, &h, err);
    if (rc == 0)
        rc = fd_out(&k->out_fd, h.data, h.len, err);
    k->pos += h.len;
    mf_buf_free(&h);
    k->src = e->src;
    if (rc == 0)
        rc = kcopy(k, fd, k->out_fd, (size_t)size, err);
    size_t pad = (size_t)(-size & 511);
    if (rc == 0 && pad)
        rc = fd_out(&k->out_fd, zeros, pad, err);
    k->pos += size + pad;
    return rc;
}

static int write_item(struct archive *a, struct tap *k, const struct item *it, int64_t mtime,
                      struct mf_err *err)
{
    const struct layer_entry *e = it->e;
    int fd = -1, rc = 0;
    uint64_t size = e ? e->len : 0;
    if (e && e->src) {
        struct stat st;
        fd = open(e->src, O_RDONLY | O_CLOEXEC);
        if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
            rc = mf_err_sys(err, MF_EIO, fd < 0 ? errno : EINVAL, "cannot read %s", e->src);
            goto done;
        }
        size = (uint64_t)st.st_size;
    }
    if (fd >= 0 && k->mark && size >= ALIGN_MIN) {
        rc = write_aligned(a, k, it->path, fd, e, size, mtime, err);
        goto done;
    }
    char name[LAYER_PATH_MAX + 1];
    size_t len = strlen(it->path);
    memcpy(name, it->path, len);
    name[len] = e ? '\0' : '/'; /* directories end in '/' like every tar tool's */
    name[len + 1] = '\0';
    struct archive_entry *ae = entry_new(name, !e, e ? e->mode : 0755, size, mtime);
    if (!ae) {
        rc = mf_err_set(err, MF_ENOMEM, "out of memory for a tar header");
        goto done;
    }
    if (archive_write_header(a, ae) != ARCHIVE_OK)
        rc = arch_fail(a, k, it->path, err);
    archive_entry_free(ae);
    if (rc == 0 && fd >= 0)
        rc = copy_file(a, k, fd, e->src, size, err);
    else if (rc == 0 && e && e->len && archive_write_data(a, e->data, e->len) != (la_ssize_t)e->len)
        rc = arch_fail(a, k, it->path, err);
done:
    if (fd >= 0)
        close(fd);
    return rc;
}

static struct archive *archive_open(struct tap *k, struct mf_err *err)
{
    struct archive *a = archive_write_new();
    if (!a) {
        mf_err_set(err, MF_ENOMEM, "out of memory for a tar writer");
        return NULL;
    }
    /* 0 = no blocking: libarchive's default pads to 10 KiB, which is host-independent
     * but pointless; plain 512-byte records are what docker and buildkit emit */
    if (archive_write_set_format_pax_restricted(a) != ARCHIVE_OK ||
        archive_write_set_bytes_per_block(a, 0) != ARCHIVE_OK ||
        archive_write_open2(a, k, NULL, archive_cb, NULL, NULL) != ARCHIVE_OK) {
        mf_err_set(err, MF_EIO, "cannot start a tar writer: %s", archive_error_string(a));
        archive_write_free(a);
        return NULL;
    }
    return a;
}

int layer_source_date(int64_t *mtime, struct mf_err *err)
{
    const char *v = getenv("SOURCE_DATE_EPOCH");
    int64_t t = 0;
    if (v && *v && (mf_num_parse_i64(v, &t) != 0 || t < 0))
        return mf_err_set(err, MF_EINVAL, "SOURCE_DATE_EPOCH='%s' is not a non-negative integer",
                          v);
    *mtime = t;
    return 0;
}

/* layer_tar_stream, and layer_tar_write_fd when t->mark is set. */
static int tar_stream(const struct layer_entry *e, size_t n, int64_t mtime, struct tap *t,
                      struct mf_err *err)
{
    struct item *it = NULL;
    size_t nit = 0;
    int rc = items_build(e, n, &it, &nit, err);
    if (rc != 0)
        return rc;
    struct archive *a = archive_open(t, err);
    rc = a ? 0 : err->code;
    for (size_t i = 0; i < nit && rc == 0; i++)
        rc = write_item(a, t, &it[i], mtime, err);
    if (a && rc == 0 && archive_write_close(a) != ARCHIVE_OK)
        rc = arch_fail(a, t, "(end of archive)", err);
    if (a)
        archive_write_free(a);
    items_free(it, nit);
    return rc;
}

int layer_tar_stream(const struct layer_entry *e, size_t n, int64_t mtime, layer_out_fn fn,
                     void *arg, struct mf_err *err)
{
    struct tap t = {.fn = fn, .arg = arg, .out_fd = -1, .src_fd = -1};
    return tar_stream(e, n, mtime, &t, err);
}

int layer_copy_fd(int in, int out, uint64_t n, const char *what, struct mf_err *err)
{
    struct tap t = {.out_fd = out, .src_fd = in, .src = what};
    if (n > SIZE_MAX)
        return mf_err_set(err, MF_ERANGE, "%s is too large to copy", what);
    return kcopy(&t, in, out, (size_t)n, err);
}

int layer_tar_write_fd(const struct layer_entry *e, size_t n, int64_t mtime, int fd,
                       struct mf_err *err)
{
    /* calloc of 8 MiB is fresh mmap'd zero pages: never touched, so never resident */
    char *mark = calloc(1, KCOPY_CHUNK);
    if (!mark)
        return mf_err_set(err, MF_ENOMEM, "out of memory for a tar writer");
    struct tap t = {.fn = fd_out, .arg = &fd, .out_fd = fd, .mark = mark, .src_fd = -1};
    int rc = tar_stream(e, n, mtime, &t, err);
    free(mark);
    return rc;
}

int layer_write(struct store *s, const struct layer_entry *e, size_t n,
                enum layer_compression comp, int64_t mtime, struct layer_result *out,
                struct mf_err *err)
{
    struct sink k;
    struct layer_result r = {0};
    int rc = sink_open(&k, s, comp == LAYER_GZIP);
    if (rc != 0)
        mf_err_set(err, k.err.code, "%s", k.err.msg);
    if (rc == 0)
        rc = layer_tar_stream(e, n, mtime, sink_out, &k, err);
    if (rc == 0 && (rc = sink_finish(&k, &r)) != 0)
        mf_err_set(err, k.err.code, "%s", k.err.msg);
    if (rc == 0 && n == 1) {
        r.filepath[0] = '/';
        memcpy(r.filepath + 1, e[0].path, strlen(e[0].path) + 1);
    }
    if (rc == 0)
        *out = r;
    sink_abort(&k);
    return rc;
}

/* ---- the runtime closure (ldd) ---- */

static int paths_add(char ***paths, size_t *n, const char *p, size_t len, struct mf_err *err)
{
    for (size_t i = 0; i < *n; i++)
        if (strlen((*paths)[i]) == len && memcmp((*paths)[i], p, len) == 0)
            return 0;
    char **grown = realloc(*paths, (*n + 1) * sizeof *grown);
    char *s = grown ? strndup(p, len) : NULL;
    if (grown)
        *paths = grown;
    if (!s)
        return mf_err_set(err, MF_ENOMEM, "out of memory reading ldd output");
    grown[(*n)++] = s;
    return 0;
}

/* One line of ldd: "\tname => /path (0x..)", "\t/path (0x..)", "\tlinux-vdso.so.1 (0x..)". */
static int ldd_line(const char *line, size_t len, char ***paths, size_t *n, struct mf_err *err)
{
    const char *end = line + len;
    const char *arrow = memmem(line, len, "=> ", 3);
    const char *p = arrow ? arrow + 3 : line;
    while (p < end && (*p == ' ' || *p == '\t'))
        p++;
    if (end - p >= 9 && memcmp(p, "not found", 9) == 0)
        return mf_err_set(err, MF_ENOTFOUND, "runtime library not found: %.*s", (int)len, line);
    if (p >= end || *p != '/')
        return 0; /* the vDSO, "statically linked", "not a dynamic executable" */
    const char *q = memmem(p, (size_t)(end - p), " (", 2);
    return paths_add(paths, n, p, q ? (size_t)(q - p) : (size_t)(end - p), err);
}

int layer_parse_ldd(const char *text, char ***paths, size_t *n, struct mf_err *err)
{
    char **ps = NULL;
    size_t k = 0;
    int rc = 0;
    for (const char *l = text; rc == 0 && *l;) {
        const char *nl = strchr(l, '\n');
        size_t len = nl ? (size_t)(nl - l) : strlen(l);
        rc = ldd_line(l, len, &ps, &k, err);
        l += len + (nl != NULL);
    }
    if (rc != 0) {
        for (size_t i = 0; i < k; i++)
            free(ps[i]);
        free(ps);
        return rc;
    }
    *paths = ps;
    *n = k;
    return 0;
}

/* Runs `ldd binary` (argv, no shell) and collects its stdout, at most LDD_OUT_MAX. */
static int run_ldd(const char *binary, struct mf_buf *out, struct mf_err *err)
{
    int pfd[2];
    if (pipe2(pfd, O_CLOEXEC) != 0)
        return mf_err_sys(err, MF_EIO, errno, "cannot run ldd on %s", binary);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, pfd[1], 1);
    char *argv[] = {"ldd", (char *)binary, NULL};
    pid_t pid;
    int sr = posix_spawnp(&pid, "ldd", &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(pfd[1]);
    int rc = sr ? mf_err_sys(err, MF_EIO, sr, "cannot run ldd on %s", binary) : 0;
    char buf[4096];
    ssize_t got;
    while (rc == 0 && ((got = read(pfd[0], buf, sizeof buf)) > 0 || (got < 0 && errno == EINTR)))
        if (got > 0)
            rc = mf_buf_append(out, buf, (size_t)got, err);
    close(pfd[0]);
    int status = 0;
    while (sr == 0 && waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    /* ldd exits 1 for a static binary ("not a dynamic executable"): not an error */
    return rc;
}

/* Runs ldd on file and adds the paths it lists to *libs (no duplicates). */
static int ldd_add(const char *file, char ***libs, size_t *n, struct mf_err *err)
{
    struct mf_buf b;
    char **got = NULL;
    size_t k = 0;
    mf_buf_init(&b, LDD_OUT_MAX);
    int rc = run_ldd(file, &b, err);
    if (rc == 0)
        rc = layer_parse_ldd(b.data ? b.data : "", &got, &k, err);
    for (size_t i = 0; i < k; i++) {
        if (rc == 0)
            rc = paths_add(libs, n, got[i], strlen(got[i]), err);
        free(got[i]);
    }
    free(got);
    mf_buf_free(&b);
    return rc;
}

int layer_cublas_path(char *const *libs, size_t n, char **path, struct mf_err *err)
{
    /* open_cublas's names, in its order (kernels/gemm.cu) */
    static const char *const names[] = {"libcublas.so.13", "libcublas.so.12", "libcublas.so"};
    const char *cudart = NULL;
    *path = NULL;
    for (size_t i = 0; i < n && !cudart; i++) {
        const char *base = strrchr(libs[i], '/');
        if (base && strncmp(base + 1, "libcudart.so", 12) == 0)
            cudart = libs[i];
    }
    if (!cudart)
        return 0;
    size_t dir = (size_t)(strrchr(cudart, '/') - cudart) + 1; /* with the '/' */
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        size_t len = strlen(names[k]);
        char *p = malloc(dir + len + 1);
        if (!p)
            return mf_err_set(err, MF_ENOMEM, "out of memory looking for cuBLAS");
        memcpy(p, cudart, dir);
        memcpy(p + dir, names[k], len + 1);
        struct stat st;
        if (stat(p, &st) == 0 && S_ISREG(st.st_mode)) {
            *path = p;
            return 0;
        }
        free(p);
    }
    return 0;
}

/* The runtime's libraries: ldd's list for binary, plus, beside a listed
 * libcudart, cuBLAS and ldd's list for it (libcublasLt among it). The
 * cuBLAS path is the one found (often the soname symlink): layer_write
 * stores the file it points to under that name, where open_cublas looks.
 * *libs holds what was collected so far even on failure; the caller frees it. */
static int runtime_libs(const char *binary, char ***libs, size_t *n, struct mf_err *err)
{
    char *blas = NULL;
    int rc = ldd_add(binary, libs, n, err);
    if (rc == 0)
        rc = layer_cublas_path(*libs, *n, &blas, err);
    if (rc == 0 && blas)
        rc = paths_add(libs, n, blas, strlen(blas), err);
    if (rc == 0 && blas && (rc = ldd_add(blas, libs, n, err)) != 0)
        mf_err_prefix(err, "cuBLAS %s (dlopen'd by the runtime)", blas);
    free(blas);
    return rc;
}

int layer_write_runtime(struct store *s, const char *binary, const char *name, int64_t mtime,
                        struct layer_result *out, struct mf_err *err)
{
    char **libs = NULL, bin_path[LAYER_PATH_MAX];
    size_t n = 0;
    struct layer_entry *e = NULL;
    int rc = runtime_libs(binary, &libs, &n, err);
    if (rc == 0 && !(e = calloc(n + 1, sizeof *e)))
        rc = mf_err_set(err, MF_ENOMEM, "out of memory for the runtime layer");
    int pn = snprintf(bin_path, sizeof bin_path, "usr/bin/%s", name);
    if (rc == 0 && (pn < 0 || (size_t)pn >= sizeof bin_path || strchr(name, '/')))
        rc = mf_err_set(err, MF_EINVAL, "runtime name '%s' is too long or has a '/'", name);
    for (size_t i = 0; rc == 0 && i < n; i++)
        e[i] = (struct layer_entry){.path = libs[i] + 1, .src = libs[i], .mode = 0755};
    if (rc == 0) {
        e[n] = (struct layer_entry){.path = bin_path, .src = binary, .mode = 0755};
        rc = layer_write(s, e, n + 1, LAYER_GZIP, mtime, out, err);
        if (rc == 0)
            out->filepath[0] = '\0';
    }
    if (rc != 0)
        mf_err_prefix(err, "runtime layer for %s", binary);
    free(e);
    for (size_t i = 0; i < n; i++)
        free(libs[i]);
    free(libs);
    return rc;
}
