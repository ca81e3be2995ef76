/*
 * layer.c: deterministic tar layers streamed into the content store.
 *
 * One layer_write call is one pass:
 *
 *   entries --sort, add parents--> libarchive (pax restricted, no blocking)
 *     --tar bytes--> sink: [sha256 of the tar = diff_id] --> [zlib gzip or
 *     libzstd] --> store_blob_writer (hashes the blob, tmp file, commit = rename)
 *
 * State of the sink: OPEN (layer_write set it up) -> WRITING (sink_write,
 * from libarchive's callback) -> FINISHED (sink_finish: gzip trailer, diff_id,
 * blob committed) or FAILED (first error kept in sink.rc; sink_abort drops the
 * tmp file). Invariants: the blob writer only ever sees complete, ordered
 * bytes; nothing enters blobs/sha256 unless every entry was written in full.
 * What makes two runs byte-identical is listed in layer.h.
 *
 * The sink counts the tar bytes it is given and reports them, with the sum
 * of the entries' sizes as the total, to the caller's progress function at
 * most every PROGRESS_STEP bytes (layer_write_progress).
 *
 * The runtime layer's closure, compression choice and cache are in
 * layer_runtime.c.
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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <unistd.h>

#include <archive.h>
#include <archive_entry.h>
#include <zlib.h>
#include <zstd.h>

#include "common/buf.h"
#include "common/num.h"
#include "common/sha256.h"

#define COPY_CHUNK (1u << 20)  /* bytes per read while copying a file into the tar */
#define ZOUT_CHUNK (64u << 10) /* bytes of compressed output per deflate round */
#define PROGRESS_STEP (8u << 20) /* bytes of tar between two progress reports */
#define KCOPY_CHUNK (8u << 20) /* bytes per placeholder write when the kernel copies a file */
/* In an archive written by layer_tar_write_fd, a file of ALIGN_MIN bytes or
 * more starts its content on an ALIGN boundary (layer_pax.c says why) */
#define ALIGN_MIN (64u << 20)
#define ALIGN (512u << 10)

/* ---- the sink: tar bytes -> (diff_id, gzip) -> blob writer ---- */

struct sink {
    struct store_blob_writer *w; /* owned until commit/abort */
    struct mf_sha256 raw;        /* digest of the tar (diff_id); ctx NULL when unused */
    enum layer_compression comp; /* what goes between the tar and the blob writer */
    int z_live;                  /* nonzero: z needs deflateEnd */
    z_stream z;                  /* gzip state (windowBits 31: gzip header, mtime 0) */
    ZSTD_CCtx *zc;               /* owned: zstd state, or NULL */
    unsigned char *zout;         /* owned: ZOUT_CHUNK bytes */
    layer_progress_fn progress;  /* called with tar bytes done, or NULL */
    void *progress_arg;          /* for progress */
    uint64_t done, total;        /* tar bytes so far; sum of the entries' sizes */
    uint64_t shown;              /* done at the last report */
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

/* Compresses n bytes into the blob writer; mode ZSTD_e_end ends the frame. */
static int sink_zstd(struct sink *k, const void *p, size_t n, ZSTD_EndDirective mode)
{
    ZSTD_inBuffer in = {p, n, 0};
    size_t left;
    do {
        ZSTD_outBuffer out = {k->zout, ZOUT_CHUNK, 0};
        left = ZSTD_compressStream2(k->zc, &out, &in, mode);
        if (ZSTD_isError(left))
            return mf_err_set(&k->err, MF_EIO, "zstd: %s", ZSTD_getErrorName(left));
        if (out.pos && store_blob_writer_write(k->w, k->zout, out.pos, &k->err) != 0)
            return k->err.code;
    } while (mode == ZSTD_e_end ? left != 0 : in.pos < in.size);
    return 0;
}

static int sink_write(struct sink *k, const void *p, size_t n)
{
    if (k->rc)
        return k->rc;
    if (k->comp == LAYER_NONE)
        k->rc = store_blob_writer_write(k->w, p, n, &k->err);
    else if ((k->rc = mf_sha256_update(&k->raw, p, n, &k->err)) == 0 && k->comp == LAYER_ZSTD)
        k->rc = sink_zstd(k, p, n, ZSTD_e_continue);
    else if (k->rc == 0) {
        /* deflate takes a uInt; libarchive never hands us more than a few blocks */
        k->rc = n > UINT32_MAX ? mf_err_set(&k->err, MF_ERANGE, "tar write too large")
                               : sink_deflate(k, p, n, Z_NO_FLUSH);
    }
    k->done += n;
    if (k->progress && k->rc == 0 && k->done - k->shown >= PROGRESS_STEP) {
        k->shown = k->done;
        k->progress(k->progress_arg, k->done < k->total ? k->done : k->total, k->total);
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

/* zstd's parameters are all fixed (level, checksum, one thread, no size in
 * the frame header: it is not known in advance), so one libzstd version
 * always writes the same bytes for the same tar. */
static int zstd_open(struct sink *k)
{
    if (!(k->zc = ZSTD_createCCtx()))
        return mf_err_set(&k->err, MF_ENOMEM, "zstd: cannot start a compressor");
    if (ZSTD_isError(ZSTD_CCtx_setParameter(k->zc, ZSTD_c_compressionLevel, LAYER_ZSTD_LEVEL)) ||
        ZSTD_isError(ZSTD_CCtx_setParameter(k->zc, ZSTD_c_checksumFlag, 1)))
        return mf_err_set(&k->err, MF_EIO, "zstd: cannot set level %d", LAYER_ZSTD_LEVEL);
    return 0;
}

static int sink_open(struct sink *k, struct store *s, enum layer_compression comp)
{
    memset(k, 0, sizeof *k);
    k->comp = comp;
    int rc = store_blob_writer_open(s, NULL, &k->w, &k->err);
    /* a plain tar (the weights): hash on a second core while this one reads and writes */
    if (rc == 0 && comp == LAYER_NONE)
        rc = store_blob_writer_hash_async(k->w, &k->err);
    if (rc == 0 && comp != LAYER_NONE) {
        rc = mf_sha256_init(&k->raw, &k->err);
        k->zout = malloc(ZOUT_CHUNK);
        if (rc == 0 && !k->zout)
            rc = mf_err_set(&k->err, MF_ENOMEM, "out of memory for compressed output");
    }
    if (rc == 0 && comp == LAYER_ZSTD)
        rc = zstd_open(k);
    if (rc == 0 && comp == LAYER_GZIP) {
        /* level 6 (zlib's default), 32 KiB window, 8 memLevel: fixed, so fixed output */
        if (deflateInit2(&k->z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
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
    ZSTD_freeCCtx(k->zc);
    k->zc = NULL;
    free(k->zout);
    k->zout = NULL;
}

/* Ends the gzip stream, commits the blob, fills out. Always releases k. */
static int sink_finish(struct sink *k, struct layer_result *out)
{
    uint8_t d[MF_SHA256_LEN];
    char hex[MF_SHA256_HEX_LEN + 1];
    struct layer_result r = {0};
    if (!k->rc && k->comp == LAYER_GZIP)
        k->rc = sink_deflate(k, NULL, 0, Z_FINISH);
    if (!k->rc && k->comp == LAYER_ZSTD)
        k->rc = sink_zstd(k, NULL, 0, ZSTD_e_end);
    if (!k->rc && k->comp != LAYER_NONE)
        k->rc = mf_sha256_final(&k->raw, d, &k->err);
    if (!k->rc) {
        k->rc = store_blob_writer_commit(k->w, r.desc.digest, &r.desc.size, &k->err);
        k->w = NULL;
    }
    if (!k->rc) {
        if (k->comp != LAYER_NONE) {
            mf_sha256_hex(d, hex);
            memcpy(r.diff_id, "sha256:", 7);
            memcpy(r.diff_id + 7, hex, sizeof hex);
        } else
            memcpy(r.diff_id, r.desc.digest, sizeof r.diff_id);
        const char *mt = k->comp == LAYER_GZIP   ? LAYER_MT_TAR_GZIP
                         : k->comp == LAYER_ZSTD ? LAYER_MT_TAR_ZSTD
                                                 : LAYER_MT_TAR;
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

/* The bytes of the entries' content: the progress total (headers aside). */
static uint64_t entries_bytes(const struct layer_entry *e, size_t n)
{
    uint64_t sum = 0;
    struct stat st;
    for (size_t i = 0; i < n; i++)
        sum += e[i].src ? (stat(e[i].src, &st) == 0 ? (uint64_t)st.st_size : 0) : e[i].len;
    return sum;
}

int layer_write(struct store *s, const struct layer_entry *e, size_t n,
                enum layer_compression comp, int64_t mtime, struct layer_result *out,
                struct mf_err *err)
{
    return layer_write_progress(s, e, n, comp, mtime, NULL, NULL, out, err);
}

int layer_write_progress(struct store *s, const struct layer_entry *e, size_t n,
                         enum layer_compression comp, int64_t mtime, layer_progress_fn fn,
                         void *arg, struct layer_result *out, struct mf_err *err)
{
    struct sink k;
    struct layer_result r = {0};
    int rc = sink_open(&k, s, comp);
    k.progress = fn;
    k.progress_arg = arg;
    k.total = fn ? entries_bytes(e, n) : 0;
    if (rc != 0)
        mf_err_set(err, k.err.code, "%s", k.err.msg);
    if (rc == 0)
        rc = layer_tar_stream(e, n, mtime, sink_out, &k, err);
    if (rc == 0 && (rc = sink_finish(&k, &r)) != 0)
        mf_err_set(err, k.err.code, "%s", k.err.msg);
    if (rc == 0 && fn)
        fn(arg, k.total, k.total);
    if (rc == 0 && n == 1) {
        r.filepath[0] = '/';
        memcpy(r.filepath + 1, e[0].path, strlen(e[0].path) + 1);
    }
    if (rc == 0)
        *out = r;
    sink_abort(&k);
    return rc;
}

