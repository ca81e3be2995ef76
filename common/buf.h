/*
 * buf.h: a growable byte buffer with a hard size limit.
 *
 * Every buffer fed by outside input has a maximum (mf_buf_init(&b, max)), so
 * a hostile file or peer cannot make mfc allocate without bound. The data is
 * always NUL-terminated (the NUL is not counted in len), so text can be used
 * as a C string. Members may be read; change them only through this API.
 */
#ifndef MF_BUF_H
#define MF_BUF_H

#include <stddef.h>

#include "err.h"

struct mf_buf {
    char *data;   /* owned; NULL until the first append */
    size_t len;   /* bytes used, excluding the trailing NUL */
    size_t cap;   /* bytes allocated */
    size_t max;   /* limit on len; appends past it fail with MF_ENOMEM */
};

/* Sets up an empty buffer that may grow to max bytes. Cannot fail. */
void mf_buf_init(struct mf_buf *b, size_t max);

/* Releases the memory; b is left empty and may be reused. Accepts NULL. */
void mf_buf_free(struct mf_buf *b);

/* Empties the buffer but keeps its memory. */
void mf_buf_reset(struct mf_buf *b);

/* Appends n bytes. On failure (limit or allocation) returns MF_ENOMEM with
 * err filled and leaves b unchanged. */
int mf_buf_append(struct mf_buf *b, const void *p, size_t n, struct mf_err *err);
int mf_buf_puts(struct mf_buf *b, const char *s, struct mf_err *err);
int mf_buf_putc(struct mf_buf *b, char c, struct mf_err *err);
int mf_buf_printf(struct mf_buf *b, struct mf_err *err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Hands the data to the caller (free() it) and leaves b empty. Never NULL:
 * an empty buffer gives an allocated "" (or NULL if that allocation fails). */
char *mf_buf_take(struct mf_buf *b);

#endif
