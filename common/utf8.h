/*
 * utf8.h: UTF-8 validation, encoding and decoding, and conversion of text
 * files with a byte-order mark (UTF-8, UTF-16 LE/BE) to UTF-8.
 *
 * Text files from Windows editors arrive as UTF-16 with a BOM; Ollama reads
 * those, so mfc does too. Surrogate code points and overlong forms are
 * rejected, as Go's decoder replaces them and a model must not see them.
 */
#ifndef MF_UTF8_H
#define MF_UTF8_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

/* Decodes one code point from s[0..n). Returns its length (1..4) and sets
 * *cp, or 0 for an invalid or truncated sequence. */
int mf_utf8_decode(const char *s, size_t n, uint32_t *cp);

/* Encodes cp (<= 0x10FFFF, not a surrogate) into out[4]. Returns the length,
 * or 0 for an invalid code point. */
int mf_utf8_encode(uint32_t cp, char out[4]);

/* Returns 1 if s[0..n) is valid UTF-8; otherwise 0 and *bad (when not NULL)
 * gets the offset of the first bad byte. */
int mf_utf8_valid(const char *s, size_t n, size_t *bad);

/* Converts a text file's bytes to UTF-8: strips a UTF-8 BOM, decodes UTF-16
 * LE or BE after its BOM, and checks the result is valid UTF-8. *out is a
 * new NUL-terminated allocation (the caller frees it), *out_len its length.
 * `what` names the input in messages. On failure *out is untouched. */
int mf_utf8_from_text(const char *data, size_t len, const char *what, char **out,
                      size_t *out_len, struct mf_err *err);

#endif
