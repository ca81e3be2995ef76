/*
 * secret_mask.h: hides secrets in text a build prints (a failing RUN's
 * output, in its error and the build log).
 *
 * A secret is hidden whole and in part: every run of SECRET_MASK_GRAM (8) or
 * more bytes that also occurs in the secret, in the secret reversed, in its
 * base64 (standard and URL alphabets, at each of the three alignments the
 * secret can take inside a longer encoded text) or in its hex (lower and
 * upper case) becomes '*'. A secret shorter than 8 bytes (at least
 * SECRET_MASK_MIN_WHOLE) is hidden where it occurs whole. Why 8: any shorter
 * run is too likely to occur by chance in ordinary output (docs/run.md).
 *
 * The mask is the set of every 8-byte window (an "8-gram") of those forms,
 * built once per RUN in an open-addressed hash set; applying it is one pass
 * over the text with one lookup per byte, whatever the number of secrets.
 */
#ifndef MFC_SECRET_MASK_H
#define MFC_SECRET_MASK_H

#include <stddef.h>

#include "common/err.h"

#define SECRET_MASK_GRAM 8                 /* bytes of a run hidden wherever it occurs */
#define SECRET_MASK_MIN_WHOLE 4            /* shorter secrets are not hidden at all */
#define SECRET_MASK_MAX_SECRET (64u << 10) /* bytes of one secret file read */
#define SECRET_MASK_MAX_GRAMS (8u << 20)   /* 8-grams of all secrets: 128 MiB of table */

struct secret_mask;

/* An empty mask (hides nothing). MF_ENOMEM. */
int secret_mask_new(struct secret_mask **m, struct mf_err *err);
/* Releases m. Accepts NULL. */
void secret_mask_free(struct secret_mask *m);

/* Adds the len bytes at secret (and the forms above). A secret shorter than
 * SECRET_MASK_MIN_WHOLE is ignored. MF_ENOMEM when memory or
 * SECRET_MASK_MAX_GRAMS runs out: the mask is then unusable (secret_mask_apply
 * refuses), since a partial mask would print a secret. */
int secret_mask_add(struct secret_mask *m, const void *secret, size_t len, struct mf_err *err);

/* Reads a secret file (at most SECRET_MASK_MAX_SECRET bytes; trailing CR and
 * LF dropped, as a token file usually ends in a newline) and adds it.
 * MF_EIO when it cannot be read, MF_ERANGE when it is larger: then, as for
 * secret_mask_add's MF_ENOMEM, the mask refuses to apply. */
int secret_mask_add_file(struct secret_mask *m, const char *path, struct mf_err *err);

/* Replaces every hidden byte of text[0..len) with '*'. Returns the number of
 * bytes replaced, or -1 (text untouched) when the mask is unusable: the
 * caller must then not print text at all. */
long secret_mask_apply(const struct secret_mask *m, char *text, size_t len);

/* 8-grams in the set (for tests and the benchmark). */
size_t secret_mask_size(const struct secret_mask *m);

#endif
