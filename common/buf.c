/*
 * buf.c: growable, capped byte buffers.
 *
 * Growth doubles capacity (amortised O(1) appends) but never past max + 1,
 * the +1 holding the NUL. All size arithmetic is checked before it is done.
 */
#include "buf.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void mf_buf_init(struct mf_buf *b, size_t max)
{
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
    b->max = max;
}

void mf_buf_free(struct mf_buf *b)
{
    if (!b)
        return;
    free(b->data);
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
}

void mf_buf_reset(struct mf_buf *b)
{
    b->len = 0;
    if (b->data)
        b->data[0] = '\0';
}

/* Makes room for n more bytes plus the NUL. */
static int reserve(struct mf_buf *b, size_t n, struct mf_err *err)
{
    if (n > b->max || b->len > b->max - n)
        return mf_err_set(err, MF_ENOMEM, "buffer limit of %zu bytes exceeded", b->max);
    size_t need = b->len + n + 1;
    if (need <= b->cap)
        return 0;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < need)
        cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    if (b->max < SIZE_MAX && cap > b->max + 1) /* max + 1 would wrap for an "unlimited" buffer */
        cap = b->max + 1;
    char *p = realloc(b->data, cap);
    if (!p)
        return mf_err_set(err, MF_ENOMEM, "out of memory growing a buffer to %zu bytes", cap);
    b->data = p;
    b->cap = cap;
    return 0;
}

int mf_buf_append(struct mf_buf *b, const void *p, size_t n, struct mf_err *err)
{
    int rc = reserve(b, n, err);
    if (rc)
        return rc;
    if (n)
        memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = '\0';
    return 0;
}

int mf_buf_puts(struct mf_buf *b, const char *s, struct mf_err *err)
{
    return mf_buf_append(b, s, strlen(s), err);
}

int mf_buf_putc(struct mf_buf *b, char c, struct mf_err *err)
{
    return mf_buf_append(b, &c, 1, err);
}

int mf_buf_printf(struct mf_buf *b, struct mf_err *err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        return mf_err_set(err, MF_EINVAL, "bad format string '%s'", fmt);
    int rc = reserve(b, (size_t)n, err);
    if (rc)
        return rc;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
    return 0;
}

char *mf_buf_take(struct mf_buf *b)
{
    char *p = b->data;
    if (!p)
        p = calloc(1, 1);
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
    return p;
}
