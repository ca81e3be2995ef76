/*
 * layer_pax.c: a tar header of our own for one regular file, padded so the
 * file's content starts on an alignment boundary of the archive.
 *
 * Why not libarchive: its writers cannot pad. An image archive (oci.c) holds
 * multi-GB weight blobs that the kernel copies from the store; on Linux's
 * page cache (large folios, ext4 here) a copy whose destination offset is not
 * congruent to the source's runs ~25 % slower than one that is (bench/README,
 * "Image export"). POSIX pax gives a clean pad: an extended header ('x')
 * whose "comment" record readers must ignore. The layout is
 *
 *   [512 'x' header][records: path? size? comment=....][512 ustar header][content]
 *
 * with the records' length chosen so that the content starts at a multiple
 * of align (or just the ustar header, when that alone lands there). Fields follow POSIX ustar; "path" and "size" records appear only
 * when the ustar fields cannot hold them (a name over 100 bytes, 8 GiB or
 * more, an mtime before 1970 or past 2242), as libarchive's pax_restricted
 * writer does.
 */
#include "image/layer.h"

#include <stdio.h>
#include <string.h>

#include "common/buf.h"

#define BLOCK 512u
#define USTAR_SIZE_MAX 077777777777ull /* 11 octal digits */

/* A ustar header block: name, mode, ids 0, size, mtime, type, checksum. */
static void ustar(unsigned char h[BLOCK], const char *name, unsigned mode, uint64_t size,
                  int64_t mtime, char type)
{
    memset(h, 0, BLOCK);
    size_t n = strlen(name);
    memcpy(h, name, n < 100 ? n : 100);
    snprintf((char *)h + 100, 8, "%07o", mode & 07777);
    snprintf((char *)h + 108, 8, "%07o", 0);
    snprintf((char *)h + 116, 8, "%07o", 0);
    snprintf((char *)h + 124, 12, "%011llo",
             (unsigned long long)(size > USTAR_SIZE_MAX ? 0 : size));
    snprintf((char *)h + 136, 12, "%011llo",
             (unsigned long long)(mtime < 0 || (uint64_t)mtime > USTAR_SIZE_MAX ? 0 : mtime));
    h[156] = (unsigned char)type;
    memcpy(h + 257, "ustar", 6); /* magic "ustar\0", version "00" */
    memcpy(h + 263, "00", 2);
    memset(h + 148, ' ', 8);
    unsigned sum = 0;
    for (unsigned i = 0; i < BLOCK; i++)
        sum += h[i];
    snprintf((char *)h + 148, 8, "%06o", sum); /* six digits, NUL, and the space left */
    h[155] = ' ';
}

/* Appends the pax record "LEN key=value\n"; LEN counts the whole record. */
static int record(struct mf_buf *b, const char *key, const char *value, struct mf_err *err)
{
    size_t body = strlen(key) + strlen(value) + 3; /* ' ', '=', '\n' */
    size_t len = body + 1;
    while ((size_t)snprintf(NULL, 0, "%zu", len) + body != len)
        len++;
    return mf_buf_printf(b, err, "%zu %s=%s\n", len, key, value);
}

/* Appends a "comment" record of exactly len bytes (len >= 12). */
static int comment(struct mf_buf *b, size_t len, struct mf_err *err)
{
    int digits = snprintf(NULL, 0, "%zu", len);
    size_t fill = len - (size_t)digits - 10; /* " comment=" and '\n' */
    int rc = mf_buf_printf(b, err, "%zu comment=", len);
    /* not digits: Python's tarfile searches the records for "\d+ hdrcharset=",
     * which is quadratic over a long run of digits (minutes for 512 KiB) */
    for (size_t i = 0; rc == 0 && i < fill; i++)
        rc = mf_buf_putc(b, '.', err);
    return rc ? rc : mf_buf_putc(b, '\n', err);
}

int layer_pax_aligned_header(const char *path, unsigned mode, uint64_t size, int64_t mtime,
                             uint64_t pos, uint64_t align, struct mf_buf *out,
                             struct mf_err *err)
{
    struct mf_buf rec;
    unsigned char h[BLOCK];
    char v[32], xname[101];
    if (align < 2 * BLOCK || align > (1u << 20) / 2 || align % BLOCK || pos % BLOCK)
        return mf_err_set(err, MF_EINVAL, "cannot align a tar entry at %llu to %llu bytes",
                          (unsigned long long)pos, (unsigned long long)align);
    mf_buf_init(&rec, 3 * align + 16384);
    int rc = strlen(path) > 100 ? record(&rec, "path", path, err) : 0;
    snprintf(v, sizeof v, "%llu", (unsigned long long)size);
    if (rc == 0 && size > USTAR_SIZE_MAX)
        rc = record(&rec, "size", v, err);
    snprintf(v, sizeof v, "%lld", (long long)mtime);
    if (rc == 0 && (mtime < 0 || (uint64_t)mtime > USTAR_SIZE_MAX))
        rc = record(&rec, "mtime", v, err);
    /* the content starts at the first multiple of align past the two headers
     * and the shortest records; the records fill whole blocks up to it, the
     * comment taking what the others leave. Under align + 5 KiB: readers cap
     * a pax header (Go's archive/tar at 1 MiB, libarchive too) */
    uint64_t at = pos + 2 * BLOCK + rec.len + 12;
    uint64_t gap = (at + align - 1) / align * align - pos - 2 * BLOCK;
    int plain = rc == 0 && rec.len == 0 && (pos + BLOCK) % align == 0;
    if (rc == 0 && !plain)
        rc = comment(&rec, (size_t)(gap - rec.len), err);
    if (rc == 0 && !plain) {
        /* the 'x' header's name, as libarchive's: DIR/PaxHeader/BASE, cut to fit */
        const char *slash = strrchr(path, '/');
        int dir = slash ? (int)(slash - path) : 0;
        snprintf(xname, sizeof xname, "%.*s%sPaxHeader/%s", dir, path, slash ? "/" : "",
                 slash ? slash + 1 : path);
        ustar(h, xname, 0644, rec.len, mtime, 'x');
        rc = mf_buf_append(out, h, BLOCK, err);
        if (rc == 0)
            rc = mf_buf_append(out, rec.data, rec.len, err);
    }
    if (rc == 0) {
        ustar(h, path, mode, size, mtime, '0');
        rc = mf_buf_append(out, h, BLOCK, err);
    }
    mf_buf_free(&rec);
    return rc;
}
