/*
 * sha256.c: SHA-256 over OpenSSL EVP (libcrypto), which picks the SHA-NI or
 * AVX2 implementation the CPU offers, so hashing multi-GB weights runs near
 * memory speed without code of our own.
 */
#include "sha256.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "num.h"

int mf_sha256_init(struct mf_sha256 *h, struct mf_err *err)
{
    EVP_MD_CTX *c = EVP_MD_CTX_new();
    h->ctx = NULL;
    if (!c)
        return mf_err_set(err, MF_ENOMEM, "cannot allocate a SHA-256 context");
    if (EVP_DigestInit_ex(c, EVP_sha256(), NULL) != 1) {
        EVP_MD_CTX_free(c);
        return mf_err_set(err, MF_EINVAL, "OpenSSL refused to start a SHA-256 digest");
    }
    h->ctx = c;
    return 0;
}

int mf_sha256_update(struct mf_sha256 *h, const void *p, size_t n, struct mf_err *err)
{
    if (!h->ctx)
        return mf_err_set(err, MF_EINVAL, "SHA-256 update on a finished digest");
    if (EVP_DigestUpdate(h->ctx, p, n) != 1)
        return mf_err_set(err, MF_EINVAL, "OpenSSL failed a SHA-256 update");
    return 0;
}

int mf_sha256_final(struct mf_sha256 *h, uint8_t out[MF_SHA256_LEN], struct mf_err *err)
{
    if (!h->ctx)
        return mf_err_set(err, MF_EINVAL, "SHA-256 final on a finished digest");
    unsigned int len = 0;
    int ok = EVP_DigestFinal_ex(h->ctx, out, &len) == 1 && len == MF_SHA256_LEN;
    mf_sha256_abort(h);
    return ok ? 0 : mf_err_set(err, MF_EINVAL, "OpenSSL failed to finish a SHA-256 digest");
}

void mf_sha256_abort(struct mf_sha256 *h)
{
    if (h->ctx)
        EVP_MD_CTX_free(h->ctx);
    h->ctx = NULL;
}

int mf_sha256_mem(const void *p, size_t n, uint8_t out[MF_SHA256_LEN], struct mf_err *err)
{
    struct mf_sha256 h;
    int rc = mf_sha256_init(&h, err);
    if (rc)
        return rc;
    rc = mf_sha256_update(&h, p, n, err);
    if (rc) {
        mf_sha256_abort(&h);
        return rc;
    }
    return mf_sha256_final(&h, out, err);
}

int mf_sha256_file(const char *path, uint8_t out[MF_SHA256_LEN], uint64_t *size,
                   struct mf_err *err)
{
    enum { CHUNK = 1 << 20 };
    struct mf_sha256 h = {0};
    uint64_t total = 0;
    int rc;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return mf_err_sys(err, MF_EIO, errno, "cannot open %s", path);
    unsigned char *chunk = malloc(CHUNK);
    if (!chunk) {
        rc = mf_err_set(err, MF_ENOMEM, "out of memory hashing %s", path);
        goto fail;
    }
    rc = mf_sha256_init(&h, err);
    if (rc)
        goto fail;
    for (;;) {
        ssize_t n = read(fd, chunk, CHUNK);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            rc = mf_err_sys(err, MF_EIO, errno, "cannot read %s", path);
            goto fail;
        }
        if (n == 0)
            break;
        rc = mf_sha256_update(&h, chunk, (size_t)n, err);
        if (rc)
            goto fail;
        total += (uint64_t)n;
    }
    uint8_t d[MF_SHA256_LEN];
    rc = mf_sha256_final(&h, d, err);
    if (rc)
        goto fail;
    for (int i = 0; i < MF_SHA256_LEN; i++)
        out[i] = d[i];
    if (size)
        *size = total;
fail:
    mf_sha256_abort(&h);
    free(chunk);
    close(fd);
    return rc;
}

void mf_sha256_hex(const uint8_t d[MF_SHA256_LEN], char hex[MF_SHA256_HEX_LEN + 1])
{
    static const char digits[] = "0123456789abcdef";
    for (int i = 0; i < MF_SHA256_LEN; i++) {
        hex[2 * i] = digits[d[i] >> 4];
        hex[2 * i + 1] = digits[d[i] & 15];
    }
    hex[MF_SHA256_HEX_LEN] = '\0';
}

int mf_sha256_parse_hex(const char *hex, uint8_t d[MF_SHA256_LEN])
{
    uint8_t tmp[MF_SHA256_LEN];
    for (int i = 0; i < MF_SHA256_LEN; i++) {
        int hi = mf_num_hex_digit((unsigned char)hex[2 * i]);
        int lo = hi < 0 ? -1 : mf_num_hex_digit((unsigned char)hex[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return MF_EINVAL;
        tmp[i] = (uint8_t)(hi << 4 | lo);
    }
    if (hex[MF_SHA256_HEX_LEN] != '\0')
        return MF_EINVAL;
    for (int i = 0; i < MF_SHA256_LEN; i++)
        d[i] = tmp[i];
    return 0;
}
