/*
 * run_tar.c: a tar reader just big enough to find files in image layers
 * (ustar, pax path/size records, GNU long names, base-256 sizes), for
 * run_image.c. It reads headers and skips data through callbacks, so a
 * multi-gigabyte weights layer costs a few reads. The bytes are untrusted
 * (a store can be written by anyone with access; layers come from
 * registries): every field is bounds-checked (fuzz_run_tar).
 */
#include "cli/run.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TAR_BLOCK 512
#define PAX_MAX (1u << 20)        /* bytes of one pax extended header we accept */

/* ---- tar walker ------------------------------------------------------------------- */

/* An octal or base-256 numeric field; -1 when malformed. */
static int tar_num(const unsigned char *f, size_t n, uint64_t *out)
{
    uint64_t v = 0;
    if (f[0] & 0x80) { /* base-256 (GNU): big-endian, the first byte's top bit set */
        if (f[0] != 0x80)
            return -1; /* negative or wider than we take */
        for (size_t i = 1; i < n; i++) {
            if (v >> 56)
                return -1;
            v = (v << 8) | f[i];
        }
        *out = v;
        return 0;
    }
    size_t i = 0;
    while (i < n && f[i] == ' ')
        i++;
    int digits = 0;
    for (; i < n && f[i] >= '0' && f[i] <= '7'; i++, digits++) {
        if (v >> 60)
            return -1;
        v = v * 8 + (uint64_t)(f[i] - '0');
    }
    for (; i < n; i++)
        if (f[i] != ' ' && f[i] != 0)
            return -1;
    if (!digits)
        return -1;
    *out = v;
    return 0;
}

static int tar_checksum_ok(const unsigned char *h)
{
    uint64_t want;
    if (tar_num(h + 148, 8, &want) != 0)
        return 0;
    uint64_t sum = 0;
    for (int i = 0; i < TAR_BLOCK; i++)
        sum += (i >= 148 && i < 156) ? ' ' : h[i];
    return sum == want;
}

static int all_zero(const unsigned char *h)
{
    for (int i = 0; i < TAR_BLOCK; i++)
        if (h[i])
            return 0;
    return 1;
}

static int read_full(const struct run_tar_io *io, void *buf, size_t n)
{
    long r = io->read(io->arg, buf, n);
    return r == (long)n ? 0 : -1;
}

/* Copies a name, dropping leading "./" and "/"; MF_EFORMAT when too long. */
static int set_name(char *dst, const char *src, size_t n, const char *what, struct mf_err *err)
{
    while (n > 0 && (src[0] == '/' || (n > 1 && src[0] == '.' && src[1] == '/'))) {
        size_t k = src[0] == '/' ? 1 : 2;
        src += k, n -= k;
    }
    if (n >= RUN_TAR_NAME_MAX)
        return mf_err_set(err, MF_EFORMAT, "%s: a tar entry name is longer than %d bytes", what,
                          RUN_TAR_NAME_MAX - 1);
    memcpy(dst, src, n);
    dst[n] = 0;
    return 0;
}

/* Applies pax records "LEN key=value\n" (path, size) to the next entry. */
static int pax_apply(const char *p, size_t n, char *name, int *have_name, uint64_t *size,
                     int *have_size, const char *what, struct mf_err *err)
{
    size_t at = 0;
    while (at < n) {
        size_t len = 0, i = at;
        while (i < n && p[i] >= '0' && p[i] <= '9' && len < PAX_MAX)
            len = len * 10 + (size_t)(p[i++] - '0');
        if (i == at || i >= n || p[i] != ' ' || len <= i - at + 1 || len > n - at ||
            p[at + len - 1] != '\n')
            return mf_err_set(err, MF_EFORMAT, "%s: a malformed pax record at byte %zu", what,
                              at);
        const char *kv = p + i + 1, *end = p + at + len - 1;
        const char *eq = memchr(kv, '=', (size_t)(end - kv));
        if (!eq)
            return mf_err_set(err, MF_EFORMAT, "%s: a pax record without '='", what);
        size_t klen = (size_t)(eq - kv), vlen = (size_t)(end - eq - 1);
        if (klen == 4 && memcmp(kv, "path", 4) == 0) {
            int rc = set_name(name, eq + 1, vlen, what, err);
            if (rc)
                return rc;
            *have_name = 1;
        } else if (klen == 4 && memcmp(kv, "size", 4) == 0) {
            uint64_t v = 0;
            if (vlen == 0 || vlen > 19)
                return mf_err_set(err, MF_EFORMAT, "%s: a bad pax size", what);
            for (size_t k = 0; k < vlen; k++) {
                if (eq[1 + k] < '0' || eq[1 + k] > '9')
                    return mf_err_set(err, MF_EFORMAT, "%s: a bad pax size", what);
                v = v * 10 + (uint64_t)(eq[1 + k] - '0');
            }
            *size = v, *have_size = 1;
        }
        at += len;
    }
    return 0;
}

static uint64_t padded(uint64_t n)
{
    return (n + TAR_BLOCK - 1) / TAR_BLOCK * TAR_BLOCK;
}

int run_tar_walk(const struct run_tar_io *io, const char *what, run_tar_entry_fn fn, void *arg,
                 struct mf_err *err)
{
    unsigned char h[TAR_BLOCK];
    char *name = malloc(RUN_TAR_NAME_MAX), *ext = NULL;
    if (!name)
        return mf_err_set(err, MF_ENOMEM, "out of memory");
    uint64_t pos = 0, next_size = 0;
    int have_name = 0, have_size = 0, rc = 0;
    for (;;) {
        if (read_full(io, h, TAR_BLOCK) != 0) {
            rc = mf_err_set(err, MF_EFORMAT, "%s: the tar ends inside a header at byte %llu",
                            what, (unsigned long long)pos);
            break;
        }
        pos += TAR_BLOCK;
        if (all_zero(h)) {
            rc = 0; /* end of archive (one zero record is enough for us) */
            break;
        }
        if (!tar_checksum_ok(h)) {
            rc = mf_err_set(err, MF_EFORMAT, "%s: a tar header with a bad checksum at byte %llu",
                            what, (unsigned long long)(pos - TAR_BLOCK));
            break;
        }
        uint64_t size;
        if (tar_num(h + 124, 12, &size) != 0) {
            rc = mf_err_set(err, MF_EFORMAT, "%s: a bad tar size field at byte %llu", what,
                            (unsigned long long)(pos - TAR_BLOCK));
            break;
        }
        char type = (char)h[156];
        if (type == 'x' || type == 'L') { /* pax extended header / GNU long name */
            if (size > PAX_MAX) {
                rc = mf_err_set(err, MF_EFORMAT, "%s: an extended tar header of %llu bytes",
                                what, (unsigned long long)size);
                break;
            }
            free(ext);
            ext = malloc((size_t)padded(size) + 1);
            if (!ext) {
                rc = mf_err_set(err, MF_ENOMEM, "out of memory");
                break;
            }
            if (read_full(io, ext, (size_t)padded(size)) != 0) {
                rc = mf_err_set(err, MF_EFORMAT, "%s: the tar ends inside an extended header",
                                what);
                break;
            }
            pos += padded(size);
            if (type == 'x')
                rc = pax_apply(ext, (size_t)size, name, &have_name, &next_size, &have_size, what,
                               err);
            else {
                size_t n = strnlen(ext, (size_t)size);
                rc = set_name(name, ext, n, what, err);
                have_name = 1;
            }
            if (rc)
                break;
            continue;
        }
        if (have_size)
            size = next_size;
        if (!have_name) {
            char full[256 + 100 + 2];
            size_t pn = strnlen((const char *)h + 345, 155), nn = strnlen((const char *)h, 100);
            int ustar = memcmp(h + 257, "ustar", 5) == 0;
            if (ustar && pn)
                snprintf(full, sizeof full, "%.*s/%.*s", (int)pn, (const char *)h + 345, (int)nn,
                         (const char *)h);
            else
                snprintf(full, sizeof full, "%.*s", (int)nn, (const char *)h);
            rc = set_name(name, full, strlen(full), what, err);
            if (rc)
                break;
        }
        have_name = have_size = 0;
        if (type == '0' || type == 0 || type == '7') {
            rc = fn(arg, name, pos, size, err);
            if (rc != 0)
                break;
        } else if (type >= '1' && type <= '6') {
            size = 0; /* links, devices, directories, fifos carry no data */
        }
        uint64_t skip = padded(size);
        if (skip < size || (skip && io->skip(io->arg, skip) != 0)) {
            rc = mf_err_set(err, MF_EFORMAT, "%s: the tar ends inside the data of %s", what,
                            name);
            break;
        }
        pos += skip;
    }
    free(ext);
    free(name);
    return rc;
}
