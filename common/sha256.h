/*
 * sha256.h: SHA-256 digests through OpenSSL's EVP interface.
 *
 * Used for content addressing (OCI blobs, cache keys) and integrity checks.
 * A digest is kept as 32 raw bytes; mf_sha256_hex gives the 64-character
 * lowercase form used in "sha256:<hex>" strings.
 */
#ifndef MF_SHA256_H
#define MF_SHA256_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

#define MF_SHA256_LEN 32
#define MF_SHA256_HEX_LEN 64

struct mf_sha256 {
    void *ctx; /* owned EVP_MD_CTX; NULL once finished or failed */
};

/* Starts a digest. Returns 0, or MF_ENOMEM with err filled and h->ctx NULL. */
int mf_sha256_init(struct mf_sha256 *h, struct mf_err *err);
int mf_sha256_update(struct mf_sha256 *h, const void *p, size_t n, struct mf_err *err);
/* Writes the digest and releases the context, also on failure. */
int mf_sha256_final(struct mf_sha256 *h, uint8_t out[MF_SHA256_LEN], struct mf_err *err);
/* Releases an unfinished context. Accepts a finished one. */
void mf_sha256_abort(struct mf_sha256 *h);

/* One-shot digest of a memory range. */
int mf_sha256_mem(const void *p, size_t n, uint8_t out[MF_SHA256_LEN], struct mf_err *err);

/* Digest of a whole file, read in 1 MiB chunks; *size gets its length when
 * not NULL. On failure out and *size are untouched. */
int mf_sha256_file(const char *path, uint8_t out[MF_SHA256_LEN], uint64_t *size,
                   struct mf_err *err);

/* Lowercase hex into hex[65] (NUL-terminated). */
void mf_sha256_hex(const uint8_t d[MF_SHA256_LEN], char hex[MF_SHA256_HEX_LEN + 1]);

/* Parses 64 hex digits (either case). Returns 0, or MF_EINVAL leaving d untouched. */
int mf_sha256_parse_hex(const char *hex, uint8_t d[MF_SHA256_LEN]);

#endif
