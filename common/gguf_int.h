/*
 * gguf_int.h: internals shared by the GGUF reader (gguf.c) and writer
 * (gguf_write.c): little-endian field access, the bounded byte cursor, the
 * value parser (the writer re-parses raw values with the reader's rules)
 * and the name index. Not part of the API; include gguf.h instead.
 */
#ifndef MF_GGUF_INT_H
#define MF_GGUF_INT_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "gguf.h"

/* ---- little-endian fields (any alignment, any host byte order) ---- */

static inline uint16_t gguf_le16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (uint16_t)p[1] << 8);
}

static inline uint32_t gguf_le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline uint64_t gguf_le64(const uint8_t *p)
{
    return (uint64_t)gguf_le32(p) | (uint64_t)gguf_le32(p + 4) << 32;
}

static inline void gguf_put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static inline void gguf_put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* ---- the cursor every parse goes through ---- */

struct gguf_rd {
    const uint8_t *base; /* borrowed: the bytes being parsed */
    uint64_t pos;        /* next byte to read, as a file offset */
    uint64_t end;        /* bytes available at base; pos <= end always */
    const char *fname;   /* borrowed: the file's name, for messages */
    const char *kind;    /* "key" or "tensor": what a name in a message is */
    struct mf_err *err;  /* where the first problem goes */
};

/* Fills r->err with "<fname>: byte <at>: <message>" and returns code. */
int gguf_rd_fail(const struct gguf_rd *r, uint64_t at, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Parses one value of `type` (already read and known < GGUF_TYPE_COUNT) at
 * r->pos and advances past it. For ARRAY, *arr is filled and owns its index
 * allocations (release them with gguf_array_fini, also after a failure);
 * arr may be NULL for other types. key names the value in messages. */
int gguf_parse_value(struct gguf_rd *r, uint32_t type, const char *key, int depth,
                     struct gguf_array *arr);

/* Frees what gguf_parse_value allocated for *a and zeroes it. */
void gguf_array_fini(struct gguf_array *a);

/* A printable copy of s for messages: control and non-ASCII bytes become
 * '?', cut at cap-1 bytes with "..." when longer. Returns buf. */
const char *gguf_shown(const char *s, char *buf, size_t cap);

/* ---- name -> index hash (open addressing, FNV-1a) ---- */

struct gguf_index {
    uint64_t *slot; /* owned: entry index + 1, or 0 for an empty slot */
    uint64_t cap;   /* slots; a power of two, at least twice count */
    uint64_t count; /* entries added */
};

/* Returns the name of entry i of ctx (a NUL-terminated string). */
struct gguf_index_names {
    const char *(*name_of)(const void *ctx, uint64_t i); /* the entry's name */
    const void *ctx;                                     /* borrowed: the table */
};

/* Adds entry i. Returns 0, 1 when an entry with the same name exists (its
 * index goes to *dup and nothing is added), or MF_ENOMEM. */
int gguf_index_add(struct gguf_index *ix, const struct gguf_index_names *nm, uint64_t i,
                   uint64_t *dup);
/* The index of the entry named name, or UINT64_MAX. */
uint64_t gguf_index_find(const struct gguf_index *ix, const struct gguf_index_names *nm,
                         const char *name);
void gguf_index_fini(struct gguf_index *ix);

#endif
