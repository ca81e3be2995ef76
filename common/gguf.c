/*
 * gguf.c: the GGUF reader: validates a whole header, then serves typed views.
 *
 * Owns the mapping (or borrows the caller's buffer), the KV and tensor tables,
 * NUL-terminated copies of keys and tensor names, per-array element indexes
 * (offsets of string/array elements) and two hash indexes (key -> KV, name ->
 * tensor). Does not own tensor data: tensor->data points into the map.
 *
 * Parsing goes strictly forward through one bounded cursor (struct gguf_rd):
 * header -> KVs -> general.alignment -> tensor infos -> data checks. Every
 * count is compared with the bytes left *before* anything is allocated for
 * it (a KV takes at least 13 bytes, a tensor info 24, an array element its
 * fixed size, 8 for a string, 12 for an array), so a hostile file can make
 * the reader allocate at most a small multiple of its own size. After
 * gguf_open returns 0, every accessor is a plain lookup that cannot fail on
 * file contents. Tensor data pages are never touched here (mfc inspect relies
 * on this: bench/inspect measures it).
 */
#include "gguf.h"

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "file.h"
#include "gguf_int.h"

#define KV_MIN_BYTES 13     /* key length 8 + type 4 + a 1-byte value */
#define TENSOR_MIN_BYTES 24 /* name length 8 + n_dims 4 + type 4 + offset 8 */
#define HEADER_BYTES 24     /* magic 4 + version 4 + n_tensors 8 + n_kv 8 */

struct gguf_file {
    char *name;                  /* owned: path or caller's name, for messages */
    const uint8_t *base;         /* the bytes: our mapping or the caller's buffer */
    uint64_t size;               /* bytes at base */
    struct mf_file_map map;      /* our mapping, unmapped by gguf_close; zero for a buffer */
    uint32_t version;            /* 2 or 3 */
    uint32_t alignment;          /* bytes; a power of two */
    uint64_t data_offset;        /* start of the data section, aligned */
    uint64_t n_kv;               /* entries in kvs */
    struct gguf_kv *kvs;         /* owned: file order */
    uint64_t n_tensors;          /* entries in tensors */
    struct gguf_tensor *tensors; /* owned: file order */
    struct gguf_index kv_ix;     /* key -> kvs index */
    struct gguf_index t_ix;      /* tensor name -> tensors index */
};

/* ------------------------------------------------------------------------
 * types, messages, hashing
 * ------------------------------------------------------------------------ */

const char *gguf_type_name(uint32_t type)
{
    static const char *const names[GGUF_TYPE_COUNT] = {
        "u8",   "i8",     "u16",   "i16", "u32", "i32", "f32",
        "bool", "string", "array", "u64", "i64", "f64",
    };
    return type < GGUF_TYPE_COUNT ? names[type] : "?";
}

size_t gguf_type_size(uint32_t type)
{
    static const uint8_t sizes[GGUF_TYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    return type < GGUF_TYPE_COUNT ? sizes[type] : 0;
}

const char *gguf_shown(const char *s, char *buf, size_t cap)
{
    size_t n = 0;
    for (; s[n] && n + 1 < cap; n++)
        buf[n] = (s[n] >= 0x20 && s[n] < 0x7f) ? s[n] : '?';
    buf[n] = '\0';
    if (s[n] && cap > 4)
        memcpy(buf + cap - 4, "...", 4);
    return buf;
}

int gguf_rd_fail(const struct gguf_rd *r, uint64_t at, int code, const char *fmt, ...)
{
    char msg[MF_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return mf_err_set(r->err, code, "%s: byte %" PRIu64 ": %s", r->fname, at, msg);
}

static uint64_t hash_name(const char *s)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a 64 */
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

static int index_grow(struct gguf_index *ix, const struct gguf_index_names *nm)
{
    uint64_t cap = ix->cap ? ix->cap * 2 : 16;
    uint64_t *slot = calloc(cap, sizeof *slot);
    if (!slot)
        return MF_ENOMEM;
    for (uint64_t j = 0; j < ix->cap; j++) {
        if (!ix->slot[j])
            continue;
        uint64_t h = hash_name(nm->name_of(nm->ctx, ix->slot[j] - 1)) & (cap - 1);
        while (slot[h])
            h = (h + 1) & (cap - 1);
        slot[h] = ix->slot[j];
    }
    free(ix->slot);
    ix->slot = slot;
    ix->cap = cap;
    return 0;
}

int gguf_index_add(struct gguf_index *ix, const struct gguf_index_names *nm, uint64_t i,
                   uint64_t *dup)
{
    if ((ix->count + 1) * 2 > ix->cap && index_grow(ix, nm) != 0)
        return MF_ENOMEM;
    const char *name = nm->name_of(nm->ctx, i);
    uint64_t h = hash_name(name) & (ix->cap - 1);
    for (; ix->slot[h]; h = (h + 1) & (ix->cap - 1)) {
        if (strcmp(nm->name_of(nm->ctx, ix->slot[h] - 1), name) == 0) {
            *dup = ix->slot[h] - 1;
            return 1;
        }
    }
    ix->slot[h] = i + 1;
    ix->count++;
    return 0;
}

uint64_t gguf_index_find(const struct gguf_index *ix, const struct gguf_index_names *nm,
                         const char *name)
{
    if (!ix->cap)
        return UINT64_MAX;
    uint64_t h = hash_name(name) & (ix->cap - 1);
    for (; ix->slot[h]; h = (h + 1) & (ix->cap - 1))
        if (strcmp(nm->name_of(nm->ctx, ix->slot[h] - 1), name) == 0)
            return ix->slot[h] - 1;
    return UINT64_MAX;
}

void gguf_index_fini(struct gguf_index *ix)
{
    free(ix->slot);
    ix->slot = NULL;
    ix->cap = ix->count = 0;
}

static const char *kv_name_of(const void *ctx, uint64_t i)
{
    return ((const struct gguf_file *)ctx)->kvs[i].key;
}

static const char *tensor_name_of(const void *ctx, uint64_t i)
{
    return ((const struct gguf_file *)ctx)->tensors[i].name;
}

/* ------------------------------------------------------------------------
 * the cursor
 * ------------------------------------------------------------------------ */

/* Fails unless n more bytes are available; `what` names them. */
static int rd_need(struct gguf_rd *r, uint64_t n, const char *what, const char *key)
{
    if (r->end - r->pos >= n)
        return 0;
    char kb[96];
    return gguf_rd_fail(
        r, r->pos, MF_EFORMAT,
        "%s%s%s%s%s needs %" PRIu64 " bytes but only %" PRIu64 " remain (the file is truncated)",
        key ? r->kind : "", key ? " '" : "", key ? gguf_shown(key, kb, sizeof kb) : "",
        key ? "': " : "", what, n, r->end - r->pos);
}

static int rd_u32(struct gguf_rd *r, const char *what, const char *key, uint32_t *v)
{
    int rc = rd_need(r, 4, what, key);
    if (rc)
        return rc;
    *v = gguf_le32(r->base + r->pos);
    r->pos += 4;
    return 0;
}

static int rd_u64(struct gguf_rd *r, const char *what, const char *key, uint64_t *v)
{
    int rc = rd_need(r, 8, what, key);
    if (rc)
        return rc;
    *v = gguf_le64(r->base + r->pos);
    r->pos += 8;
    return 0;
}

/* A length-prefixed string; the bytes stay in the map. */
static int rd_str(struct gguf_rd *r, const char *what, const char *key, struct gguf_str *s)
{
    uint64_t at = r->pos, len;
    int rc = rd_u64(r, what, key, &len);
    if (rc)
        return rc;
    if (len > r->end - r->pos) {
        char kb[96];
        return gguf_rd_fail(r, at, MF_EFORMAT,
                            "%s%s%s%s%s is %" PRIu64 " bytes long but only %" PRIu64
                            " bytes remain (the file is truncated)",
                            key ? r->kind : "", key ? " '" : "",
                            key ? gguf_shown(key, kb, sizeof kb) : "", key ? "': " : "", what, len,
                            r->end - r->pos);
    }
    s->p = (const char *)r->base + r->pos;
    s->len = len;
    r->pos += len;
    return 0;
}

/* ------------------------------------------------------------------------
 * values
 * ------------------------------------------------------------------------ */

void gguf_array_fini(struct gguf_array *a)
{
    if (!a)
        return;
    if (a->sub) {
        struct gguf_array *sub = (struct gguf_array *)a->sub;
        for (uint64_t i = 0; i < a->n; i++)
            gguf_array_fini(&sub[i]);
        free(sub);
    }
    free((void *)a->offs);
    memset(a, 0, sizeof *a);
}

/* Smallest encoding of one element of type t. */
static uint64_t elem_min_bytes(uint32_t t)
{
    if (t == GGUF_TYPE_STRING)
        return 8;
    if (t == GGUF_TYPE_ARRAY)
        return 12;
    return gguf_type_size(t);
}

/* Walks the n variable-size elements of a, recording where each starts. */
static int parse_elements(struct gguf_rd *r, const char *key, int depth, struct gguf_array *a)
{
    uint64_t *offs = malloc((a->n ? a->n : 1) * sizeof *offs);
    struct gguf_array *sub = NULL;
    if (a->type == GGUF_TYPE_ARRAY)
        sub = calloc(a->n ? a->n : 1, sizeof *sub);
    a->offs = offs;
    a->sub = sub;
    if (!offs || (a->type == GGUF_TYPE_ARRAY && !sub))
        return gguf_rd_fail(r, r->pos, MF_ENOMEM,
                            "out of memory indexing an array of %" PRIu64 " elements", a->n);
    uint64_t start = r->pos;
    for (uint64_t i = 0; i < a->n; i++) {
        offs[i] = r->pos - start;
        int rc = gguf_parse_value(r, a->type, key, depth + 1, sub ? &sub[i] : NULL);
        if (rc)
            return rc;
    }
    return 0;
}

static int parse_array(struct gguf_rd *r, const char *key, int depth, struct gguf_array *a)
{
    uint64_t at = r->pos;
    uint32_t et;
    uint64_t n;
    char kb[96];
    int rc = rd_u32(r, "the array element type", key, &et);
    if (!rc)
        rc = rd_u64(r, "the array length", key, &n);
    if (rc)
        return rc;
    key = key ? key : "?";
    if (et >= GGUF_TYPE_COUNT)
        return gguf_rd_fail(r, at, MF_EFORMAT,
                            "key '%s': array element type %" PRIu32 " is not a GGUF type",
                            gguf_shown(key, kb, sizeof kb), et);
    if (et == GGUF_TYPE_ARRAY && depth + 1 >= GGUF_MAX_DEPTH)
        return gguf_rd_fail(r, at, MF_EUNSUPPORTED, "key '%s': arrays nest deeper than %d levels",
                            gguf_shown(key, kb, sizeof kb), GGUF_MAX_DEPTH);
    uint64_t min = elem_min_bytes(et), left = r->end - r->pos;
    if (n > left / min)
        return gguf_rd_fail(r, at, MF_EFORMAT,
                            "key '%s': array of %" PRIu64 " %s elements "
                            "cannot fit in the %" PRIu64 " bytes left (the file is truncated)",
                            gguf_shown(key, kb, sizeof kb), n, gguf_type_name(et), left);
    a->type = et;
    a->n = n;
    a->data = r->base + r->pos;
    if (gguf_type_size(et)) {
        r->pos += n * min;
    } else {
        rc = parse_elements(r, key, depth, a);
        if (rc)
            return rc;
    }
    a->size = (uint64_t)(r->base + r->pos - a->data);
    return 0;
}

int gguf_parse_value(struct gguf_rd *r, uint32_t type, const char *key, int depth,
                     struct gguf_array *arr)
{
    struct gguf_str s;
    assert(type < GGUF_TYPE_COUNT);
    if (type == GGUF_TYPE_STRING)
        return rd_str(r, "the string value", key, &s);
    if (type == GGUF_TYPE_ARRAY) {
        assert(arr);
        return parse_array(r, key, depth, arr);
    }
    int rc = rd_need(r, gguf_type_size(type), "the value", key);
    if (!rc)
        r->pos += gguf_type_size(type);
    return rc;
}

/* ------------------------------------------------------------------------
 * header and KVs
 * ------------------------------------------------------------------------ */

static int parse_header(struct gguf_file *gf, struct gguf_rd *r)
{
    if (r->end < HEADER_BYTES)
        return gguf_rd_fail(r, 0, MF_EFORMAT,
                            "file is %" PRIu64 " bytes, too short for a GGUF "
                            "header (24 bytes)",
                            r->end);
    const uint8_t *b = r->base;
    /* the bytes found are not quoted: the file may be anything (a symlink to
     * /etc/shadow), and an error message ends up in logs */
    if (gguf_le32(b) != GGUF_MAGIC)
        return gguf_rd_fail(r, 0, MF_EFORMAT,
                            "not a GGUF file: it does not start with the magic \"GGUF\" "
                            "(47 47 55 46)");
    uint32_t v = gguf_le32(b + 4);
    if (v != 0 && (v & 0xffff) == 0)
        return gguf_rd_fail(r, 4, MF_EUNSUPPORTED,
                            "version field reads 0x%08" PRIx32 ", which "
                            "means a big-endian (byte-swapped) GGUF; mfc reads little-endian "
                            "GGUF only",
                            v);
    if (v == 1)
        return gguf_rd_fail(r, 4, MF_EUNSUPPORTED,
                            "GGUF version 1 is no longer supported; "
                            "re-convert the model with a current llama.cpp");
    if (v < 2 || v > 3)
        return gguf_rd_fail(r, 4, MF_EUNSUPPORTED,
                            "GGUF version %" PRIu32 " is not supported "
                            "(mfc reads versions 2 and 3)",
                            v);
    gf->version = v;
    gf->n_tensors = gguf_le64(b + 8);
    gf->n_kv = gguf_le64(b + 16);
    r->pos = HEADER_BYTES;
    uint64_t left = r->end - r->pos;
    if (gf->n_kv > left / KV_MIN_BYTES ||
        gf->n_tensors > (left - gf->n_kv * KV_MIN_BYTES) / TENSOR_MIN_BYTES)
        return gguf_rd_fail(r, 8, MF_EFORMAT,
                            "header declares %" PRIu64 " KVs and %" PRIu64
                            " tensors, which cannot fit in the %" PRIu64 " bytes that follow "
                            "(the file is truncated or not GGUF)",
                            gf->n_kv, gf->n_tensors, left);
    return 0;
}

/* Reads a key or tensor name and keeps a NUL-terminated copy in *copy. */
static int read_name(struct gguf_rd *r, const char *what, uint64_t limit, char **copy,
                     uint32_t *len)
{
    uint64_t at = r->pos;
    struct gguf_str s;
    int rc = rd_str(r, what, NULL, &s);
    if (rc)
        return rc;
    if (s.len > limit)
        return gguf_rd_fail(r, at, MF_EFORMAT, "%s is %" PRIu64 " bytes long (limit %" PRIu64 ")",
                            what, s.len, limit);
    if (memchr(s.p, 0, s.len))
        return gguf_rd_fail(r, at, MF_EFORMAT, "%s contains a NUL byte", what);
    *copy = strndup(s.p, s.len);
    if (!*copy)
        return gguf_rd_fail(r, at, MF_ENOMEM, "out of memory copying %s", what);
    *len = (uint32_t)s.len;
    return 0;
}

static int parse_kv(struct gguf_file *gf, struct gguf_rd *r, uint64_t i)
{
    struct gguf_kv *kv = &gf->kvs[i];
    struct gguf_index_names nm = {kv_name_of, gf};
    char kb[96];
    uint64_t dup;
    kv->offset = r->pos;
    r->kind = "key";
    int rc = read_name(r, "a key", GGUF_MAX_KEY, (char **)&kv->key, &kv->key_len);
    if (rc)
        return rc;
    if (kv->key_len == 0)
        return gguf_rd_fail(r, kv->offset, MF_EFORMAT, "KV %" PRIu64 " has an empty key", i);
    rc = gguf_index_add(&gf->kv_ix, &nm, i, &dup);
    if (rc == 1)
        return gguf_rd_fail(r, kv->offset, MF_EFORMAT,
                            "key '%s' appears twice (first at byte %" PRIu64 ")",
                            gguf_shown(kv->key, kb, sizeof kb), gf->kvs[dup].offset);
    if (rc)
        return gguf_rd_fail(r, kv->offset, rc, "out of memory indexing keys");
    uint64_t at = r->pos;
    rc = rd_u32(r, "the value type", kv->key, &kv->type);
    if (rc)
        return rc;
    if (kv->type >= GGUF_TYPE_COUNT)
        return gguf_rd_fail(r, at, MF_EFORMAT, "key '%s' has unknown value type %" PRIu32,
                            gguf_shown(kv->key, kb, sizeof kb), kv->type);
    kv->val = r->base + r->pos;
    rc = gguf_parse_value(r, kv->type, kv->key, 0, &kv->arr);
    kv->val_size = (uint64_t)(r->base + r->pos - kv->val);
    return rc;
}

static int parse_alignment(struct gguf_file *gf, struct gguf_rd *r)
{
    const struct gguf_kv *kv = gguf_find_kv(gf, "general.alignment");
    gf->alignment = GGUF_DEFAULT_ALIGNMENT;
    if (!kv)
        return 0;
    if (kv->type != GGUF_TYPE_UINT32)
        return gguf_rd_fail(r, kv->offset, MF_EFORMAT,
                            "key 'general.alignment' is %s; it must "
                            "be u32",
                            gguf_type_name(kv->type));
    uint32_t a = gguf_le32(kv->val);
    if (a == 0 || (a & (a - 1)) != 0)
        return gguf_rd_fail(r, kv->offset, MF_EFORMAT,
                            "key 'general.alignment' is %" PRIu32 ", which is not a power of two",
                            a);
    gf->alignment = a;
    return 0;
}

/* ------------------------------------------------------------------------
 * tensor infos
 * ------------------------------------------------------------------------ */

/* Element count and byte size of t, checked for overflow and block fit. */
static int tensor_sizes(struct gguf_rd *r, struct gguf_tensor *t)
{
    uint64_t n = 1, rows = 1, row_bytes;
    for (int d = 0; d < GGUF_MAX_DIMS; d++) {
        if (__builtin_mul_overflow(n, t->ne[d], &n) || n > (uint64_t)INT64_MAX)
            return gguf_rd_fail(r, t->info_offset, MF_EFORMAT,
                                "tensor '%s' has more than "
                                "2^63 elements",
                                t->name);
        if (d > 0)
            rows *= t->ne[d]; /* rows <= n: cannot overflow */
    }
    t->n_elements = n;
    uint32_t bs = ggml_type_block_size(t->type);
    if (t->ne[0] % bs != 0)
        return gguf_rd_fail(r, t->info_offset, MF_EFORMAT,
                            "tensor '%s' (%s) has %" PRIu64
                            " elements per row, not a multiple of the block size %" PRIu32,
                            t->name, ggml_type_name(t->type), t->ne[0], bs);
    if (ggml_type_row_size(t->type, t->ne[0], &row_bytes) != 0 ||
        __builtin_mul_overflow(row_bytes, rows, &t->n_bytes))
        return gguf_rd_fail(r, t->info_offset, MF_EFORMAT,
                            "tensor '%s' takes more than 2^64 "
                            "bytes",
                            t->name);
    return 0;
}

static int parse_dims(struct gguf_rd *r, struct gguf_tensor *t)
{
    int rc = rd_u32(r, "the dimension count", t->name, &t->n_dims);
    if (rc)
        return rc;
    if (t->n_dims > GGUF_MAX_DIMS)
        return gguf_rd_fail(r, t->info_offset, MF_EFORMAT,
                            "tensor '%s' has %" PRIu32 " dimensions (at most %d)", t->name,
                            t->n_dims, GGUF_MAX_DIMS);
    for (int d = 0; d < GGUF_MAX_DIMS; d++)
        t->ne[d] = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) {
        rc = rd_u64(r, "a dimension", t->name, &t->ne[d]);
        if (rc)
            return rc;
        if (t->ne[d] > (uint64_t)INT64_MAX)
            return gguf_rd_fail(r, t->info_offset, MF_EFORMAT,
                                "tensor '%s' dimension %" PRIu32 " is %" PRIu64 ", above 2^63-1",
                                t->name, d, t->ne[d]);
    }
    return 0;
}

static int parse_tensor(struct gguf_file *gf, struct gguf_rd *r, uint64_t i)
{
    struct gguf_tensor *t = &gf->tensors[i];
    struct gguf_index_names nm = {tensor_name_of, gf};
    uint32_t len;
    uint64_t dup;
    t->info_offset = r->pos;
    r->kind = "tensor";
    int rc = read_name(r, "a tensor name", GGUF_MAX_NAME - 1, (char **)&t->name, &len);
    if (rc)
        return rc;
    rc = gguf_index_add(&gf->t_ix, &nm, i, &dup);
    if (rc == 1)
        return gguf_rd_fail(r, t->info_offset, MF_EFORMAT,
                            "tensor '%s' appears twice (first "
                            "at byte %" PRIu64 ")",
                            t->name, gf->tensors[dup].info_offset);
    if (rc)
        return gguf_rd_fail(r, t->info_offset, rc, "out of memory indexing tensors");
    rc = parse_dims(r, t);
    if (!rc)
        rc = rd_u32(r, "the tensor type", t->name, &t->type);
    if (!rc)
        rc = rd_u64(r, "the data offset", t->name, &t->offset);
    if (rc)
        return rc;
    if (!ggml_type_valid(t->type))
        return gguf_rd_fail(r, t->info_offset, MF_EFORMAT,
                            "tensor '%s' has invalid ggml type %" PRIu32, t->name, t->type);
    return tensor_sizes(r, t);
}

/* Offsets aligned, data inside the file. */
static int check_tensor_data(struct gguf_file *gf, struct gguf_rd *r, struct gguf_tensor *t)
{
    uint64_t end;
    if (t->offset % gf->alignment != 0)
        return gguf_rd_fail(r, t->info_offset, MF_EFORMAT,
                            "tensor '%s' data offset %" PRIu64
                            " is not a multiple of the alignment %" PRIu32,
                            t->name, t->offset, gf->alignment);
    if (__builtin_add_overflow(gf->data_offset, t->offset, &t->file_offset) ||
        __builtin_add_overflow(t->file_offset, t->n_bytes, &end) || end > gf->size)
        return gguf_rd_fail(r, t->info_offset, MF_EFORMAT,
                            "tensor '%s' data (offset %" PRIu64 ", %" PRIu64
                            " bytes) runs past the end of the file (size %" PRIu64 ")",
                            t->name, t->offset, t->n_bytes, gf->size);
    t->data = gf->base + t->file_offset;
    return 0;
}

static int by_offset(const void *a, const void *b)
{
    const struct gguf_tensor *x = *(const struct gguf_tensor *const *)a;
    const struct gguf_tensor *y = *(const struct gguf_tensor *const *)b;
    if (x->offset != y->offset)
        return x->offset < y->offset ? -1 : 1;
    return (x->n_bytes > y->n_bytes) - (x->n_bytes < y->n_bytes);
}

/* No two non-empty tensors share a byte. */
static int check_overlap(struct gguf_file *gf, struct gguf_rd *r)
{
    const struct gguf_tensor **v = malloc((gf->n_tensors ? gf->n_tensors : 1) * sizeof *v);
    if (!v)
        return gguf_rd_fail(r, HEADER_BYTES, MF_ENOMEM, "out of memory sorting tensors");
    uint64_t m = 0;
    for (uint64_t i = 0; i < gf->n_tensors; i++)
        if (gf->tensors[i].n_bytes)
            v[m++] = &gf->tensors[i];
    qsort(v, m, sizeof *v, by_offset);
    int rc = 0;
    for (uint64_t i = 1; i < m && !rc; i++) {
        const struct gguf_tensor *a = v[i - 1], *b = v[i];
        if (a->offset + a->n_bytes > b->offset) /* both end inside the file: no overflow */
            rc =
                gguf_rd_fail(r, b->info_offset, MF_EFORMAT,
                             "tensor '%s' data (offset %" PRIu64 ", %" PRIu64
                             " bytes) overlaps tensor '%s' (offset %" PRIu64 ", %" PRIu64 " bytes)",
                             b->name, b->offset, b->n_bytes, a->name, a->offset, a->n_bytes);
    }
    free(v);
    return rc;
}

/* ------------------------------------------------------------------------
 * open and close
 * ------------------------------------------------------------------------ */

static int parse_tables(struct gguf_file *gf, struct gguf_rd *r)
{
    gf->kvs = calloc(gf->n_kv ? gf->n_kv : 1, sizeof *gf->kvs);
    gf->tensors = calloc(gf->n_tensors ? gf->n_tensors : 1, sizeof *gf->tensors);
    if (!gf->kvs || !gf->tensors)
        return gguf_rd_fail(r, HEADER_BYTES, MF_ENOMEM,
                            "out of memory for %" PRIu64 " KVs and %" PRIu64 " tensors", gf->n_kv,
                            gf->n_tensors);
    int rc = 0;
    for (uint64_t i = 0; i < gf->n_kv && !rc; i++)
        rc = parse_kv(gf, r, i);
    if (!rc)
        rc = parse_alignment(gf, r);
    for (uint64_t i = 0; i < gf->n_tensors && !rc; i++)
        rc = parse_tensor(gf, r, i);
    if (rc)
        return rc;
    uint64_t a = gf->alignment;
    gf->data_offset = (r->pos + a - 1) / a * a; /* pos <= size < 2^63: no overflow */
    for (uint64_t i = 0; i < gf->n_tensors && !rc; i++)
        rc = check_tensor_data(gf, r, &gf->tensors[i]);
    if (!rc)
        rc = check_overlap(gf, r);
    return rc;
}

static int parse_file(struct gguf_file *gf, struct mf_err *err)
{
    struct gguf_rd r = {gf->base, 0, gf->size, gf->name, "key", err};
    int rc = parse_header(gf, &r);
    if (rc) {
        gf->n_kv = gf->n_tensors = 0; /* nothing allocated for them yet */
        return rc;
    }
    return parse_tables(gf, &r);
}

static struct gguf_file *file_new(const char *name, struct mf_err *err)
{
    struct gguf_file *gf = calloc(1, sizeof *gf);
    if (gf)
        gf->name = strdup(name);
    if (!gf || !gf->name) {
        free(gf);
        mf_err_set(err, MF_ENOMEM, "out of memory opening %s", name);
        return NULL;
    }
    gf->alignment = GGUF_DEFAULT_ALIGNMENT;
    return gf;
}

int gguf_open_mem(const void *data, size_t size, const char *name, struct gguf_file **out,
                  struct mf_err *err)
{
    *out = NULL;
    struct gguf_file *gf = file_new(name, err);
    if (!gf)
        return MF_ENOMEM;
    static const uint8_t empty[1];
    gf->base = size ? data : empty;
    gf->size = size;
    int rc = parse_file(gf, err);
    if (rc) {
        gguf_close(gf);
        return rc;
    }
    *out = gf;
    return 0;
}

/* Maps size bytes of path from offset (size 0: to the end) into gf->base;
 * fails as mf_file_map_range does, a range shorter than a header included. */
static int map_range(struct gguf_file *gf, const char *path, uint64_t offset, uint64_t size,
                     struct mf_err *err)
{
    int rc = mf_file_map_range(path, offset, size, HEADER_BYTES, "a GGUF header (24 bytes)",
                               &gf->map, err);
    if (!rc) {
        gf->base = gf->map.data;
        gf->size = gf->map.size;
    }
    return rc;
}

int gguf_open_range(const char *path, uint64_t offset, uint64_t size, struct gguf_file **out,
                    struct mf_err *err)
{
    *out = NULL;
    struct gguf_file *gf = file_new(path, err);
    if (!gf)
        return MF_ENOMEM;
    int rc = map_range(gf, path, offset, size, err);
    if (!rc)
        rc = parse_file(gf, err);
    if (rc) {
        gguf_close(gf);
        return rc;
    }
    *out = gf;
    return 0;
}

int gguf_open(const char *path, struct gguf_file **out, struct mf_err *err)
{
    return gguf_open_range(path, 0, 0, out, err); /* the whole file */
}

void gguf_close(struct gguf_file *gf)
{
    if (!gf)
        return;
    for (uint64_t i = 0; gf->kvs && i < gf->n_kv; i++) {
        free((char *)gf->kvs[i].key);
        gguf_array_fini(&gf->kvs[i].arr);
    }
    for (uint64_t i = 0; gf->tensors && i < gf->n_tensors; i++)
        free((char *)gf->tensors[i].name);
    free(gf->kvs);
    free(gf->tensors);
    gguf_index_fini(&gf->kv_ix);
    gguf_index_fini(&gf->t_ix);
    mf_file_unmap(&gf->map);
    free(gf->name);
    free(gf);
}

/* ------------------------------------------------------------------------
 * file facts and lookups
 * ------------------------------------------------------------------------ */

const char *gguf_name(const struct gguf_file *gf)
{
    return gf->name;
}
uint32_t gguf_version(const struct gguf_file *gf)
{
    return gf->version;
}
uint64_t gguf_file_size(const struct gguf_file *gf)
{
    return gf->size;
}
uint32_t gguf_alignment(const struct gguf_file *gf)
{
    return gf->alignment;
}
uint64_t gguf_data_offset(const struct gguf_file *gf)
{
    return gf->data_offset;
}
const uint8_t *gguf_base(const struct gguf_file *gf)
{
    return gf->base;
}
uint64_t gguf_n_kv(const struct gguf_file *gf)
{
    return gf->n_kv;
}
uint64_t gguf_n_tensors(const struct gguf_file *gf)
{
    return gf->n_tensors;
}

const struct gguf_kv *gguf_kv_at(const struct gguf_file *gf, uint64_t i)
{
    assert(i < gf->n_kv);
    return &gf->kvs[i];
}

const struct gguf_kv *gguf_find_kv(const struct gguf_file *gf, const char *key)
{
    struct gguf_index_names nm = {kv_name_of, gf};
    uint64_t i = gguf_index_find(&gf->kv_ix, &nm, key);
    return i == UINT64_MAX ? NULL : &gf->kvs[i];
}

const struct gguf_tensor *gguf_tensor_at(const struct gguf_file *gf, uint64_t i)
{
    assert(i < gf->n_tensors);
    return &gf->tensors[i];
}

const struct gguf_tensor *gguf_find_tensor(const struct gguf_file *gf, const char *name)
{
    struct gguf_index_names nm = {tensor_name_of, gf};
    uint64_t i = gguf_index_find(&gf->t_ix, &nm, name);
    return i == UINT64_MAX ? NULL : &gf->tensors[i];
}

/* ------------------------------------------------------------------------
 * typed getters
 * ------------------------------------------------------------------------ */

/* Decodes a fixed-size scalar at p: integers and BOOL into *u (unsigned
 * types) or *s (signed types, *is_signed set); floats into *f. Returns 0 for
 * an integer/bool, 1 for a float, -1 for STRING/ARRAY. */
static int decode_scalar(uint32_t type, const uint8_t *p, uint64_t *u, int64_t *s, double *f,
                         int *is_signed)
{
    *is_signed = 0;
    switch (type) {
    case GGUF_TYPE_UINT8:
    case GGUF_TYPE_BOOL:
        *u = p[0];
        return 0;
    case GGUF_TYPE_UINT16:
        *u = gguf_le16(p);
        return 0;
    case GGUF_TYPE_UINT32:
        *u = gguf_le32(p);
        return 0;
    case GGUF_TYPE_UINT64:
        *u = gguf_le64(p);
        return 0;
    case GGUF_TYPE_INT8:
        *s = (int8_t)p[0];
        break;
    case GGUF_TYPE_INT16:
        *s = (int16_t)gguf_le16(p);
        break;
    case GGUF_TYPE_INT32:
        *s = (int32_t)gguf_le32(p);
        break;
    case GGUF_TYPE_INT64:
        *s = (int64_t)gguf_le64(p);
        break;
    case GGUF_TYPE_FLOAT32: {
        uint32_t b = gguf_le32(p);
        float v;
        memcpy(&v, &b, sizeof v);
        *f = v;
        return 1;
    }
    case GGUF_TYPE_FLOAT64: {
        uint64_t b = gguf_le64(p);
        memcpy(f, &b, sizeof *f);
        return 1;
    }
    default:
        return -1;
    }
    *is_signed = 1;
    return 0;
}

static int kv_type_error(const struct gguf_file *gf, const struct gguf_kv *kv, const char *want,
                         struct mf_err *err)
{
    char kb[96];
    return mf_err_set(err, MF_EFORMAT, "%s: byte %" PRIu64 ": key '%s' is %s, expected %s",
                      gf->name, kv->offset, gguf_shown(kv->key, kb, sizeof kb),
                      gguf_type_name(kv->type), want);
}

static int kv_range_error(const struct gguf_file *gf, const struct gguf_kv *kv, const char *want,
                          struct mf_err *err)
{
    char kb[96];
    return mf_err_set(err, MF_ERANGE,
                      "%s: byte %" PRIu64 ": key '%s' (%s) has a value that "
                      "does not fit in %s",
                      gf->name, kv->offset, gguf_shown(kv->key, kb, sizeof kb),
                      gguf_type_name(kv->type), want);
}

/* An integer KV (not BOOL) as a sign and a magnitude's bits: *neg is set
 * for a negative signed value, and *bits holds the value as uint64. */
static int kv_integer(const struct gguf_file *gf, const struct gguf_kv *kv, int *neg,
                      uint64_t *bits, struct mf_err *err)
{
    uint64_t u = 0;
    int64_t s = 0;
    double f;
    int is_signed;
    if (kv->type == GGUF_TYPE_BOOL || decode_scalar(kv->type, kv->val, &u, &s, &f, &is_signed) != 0)
        return kv_type_error(gf, kv, "an integer", err);
    *neg = is_signed && s < 0;
    *bits = is_signed ? (uint64_t)s : u;
    return 0;
}

int gguf_kv_u64(const struct gguf_file *gf, const struct gguf_kv *kv, uint64_t *out,
                struct mf_err *err)
{
    int neg = 0;
    uint64_t v = 0;
    int rc = kv_integer(gf, kv, &neg, &v, err);
    if (!rc && neg)
        rc = kv_range_error(gf, kv, "an unsigned integer", err);
    if (!rc)
        *out = v;
    return rc;
}

int gguf_kv_i64(const struct gguf_file *gf, const struct gguf_kv *kv, int64_t *out,
                struct mf_err *err)
{
    int neg = 0;
    uint64_t v = 0;
    int rc = kv_integer(gf, kv, &neg, &v, err);
    if (!rc && !neg && v > (uint64_t)INT64_MAX)
        rc = kv_range_error(gf, kv, "i64", err);
    if (!rc)
        *out = (int64_t)v;
    return rc;
}

int gguf_kv_f64(const struct gguf_file *gf, const struct gguf_kv *kv, double *out,
                struct mf_err *err)
{
    uint64_t u = 0;
    int64_t s = 0;
    double f = 0;
    int is_signed;
    int k = decode_scalar(kv->type, kv->val, &u, &s, &f, &is_signed);
    if (k < 0 || kv->type == GGUF_TYPE_BOOL)
        return kv_type_error(gf, kv, "a number", err);
    *out = k == 1 ? f : is_signed ? (double)s : (double)u;
    return 0;
}

/* The KV named key, or MF_ENOTFOUND with err filled. */
static int find_or_fail(const struct gguf_file *gf, const char *key, const struct gguf_kv **kv,
                        struct mf_err *err)
{
    *kv = gguf_find_kv(gf, key);
    if (*kv)
        return 0;
    char kb[96];
    return mf_err_set(err, MF_ENOTFOUND, "%s: key '%s' not found", gf->name,
                      gguf_shown(key, kb, sizeof kb));
}

int gguf_get_u64(const struct gguf_file *gf, const char *key, uint64_t *out, struct mf_err *err)
{
    const struct gguf_kv *kv;
    int rc = find_or_fail(gf, key, &kv, err);
    return rc ? rc : gguf_kv_u64(gf, kv, out, err);
}

int gguf_get_i64(const struct gguf_file *gf, const char *key, int64_t *out, struct mf_err *err)
{
    const struct gguf_kv *kv;
    int rc = find_or_fail(gf, key, &kv, err);
    return rc ? rc : gguf_kv_i64(gf, kv, out, err);
}

int gguf_get_u32(const struct gguf_file *gf, const char *key, uint32_t *out, struct mf_err *err)
{
    const struct gguf_kv *kv;
    uint64_t v;
    int rc = find_or_fail(gf, key, &kv, err);
    if (!rc)
        rc = gguf_kv_u64(gf, kv, &v, err);
    if (!rc && v > UINT32_MAX)
        rc = kv_range_error(gf, kv, "u32", err);
    if (!rc)
        *out = (uint32_t)v;
    return rc;
}

int gguf_get_i32(const struct gguf_file *gf, const char *key, int32_t *out, struct mf_err *err)
{
    const struct gguf_kv *kv;
    int64_t v;
    int rc = find_or_fail(gf, key, &kv, err);
    if (!rc)
        rc = gguf_kv_i64(gf, kv, &v, err);
    if (!rc && (v < INT32_MIN || v > INT32_MAX))
        rc = kv_range_error(gf, kv, "i32", err);
    if (!rc)
        *out = (int32_t)v;
    return rc;
}

int gguf_get_f64(const struct gguf_file *gf, const char *key, double *out, struct mf_err *err)
{
    const struct gguf_kv *kv;
    int rc = find_or_fail(gf, key, &kv, err);
    return rc ? rc : gguf_kv_f64(gf, kv, out, err);
}

int gguf_get_f32(const struct gguf_file *gf, const char *key, float *out, struct mf_err *err)
{
    double v;
    int rc = gguf_get_f64(gf, key, &v, err);
    if (!rc)
        *out = (float)v;
    return rc;
}

int gguf_get_bool(const struct gguf_file *gf, const char *key, int *out, struct mf_err *err)
{
    const struct gguf_kv *kv;
    int rc = find_or_fail(gf, key, &kv, err);
    if (!rc && kv->type != GGUF_TYPE_BOOL)
        rc = kv_type_error(gf, kv, "bool", err);
    if (!rc)
        *out = kv->val[0] != 0;
    return rc;
}

int gguf_get_str(const struct gguf_file *gf, const char *key, struct gguf_str *out,
                 struct mf_err *err)
{
    const struct gguf_kv *kv;
    int rc = find_or_fail(gf, key, &kv, err);
    if (!rc && kv->type != GGUF_TYPE_STRING)
        rc = kv_type_error(gf, kv, "string", err);
    if (!rc) {
        out->len = gguf_le64(kv->val);
        out->p = (const char *)kv->val + 8;
    }
    return rc;
}

int gguf_get_arr(const struct gguf_file *gf, const char *key, const struct gguf_array **out,
                 struct mf_err *err)
{
    const struct gguf_kv *kv;
    int rc = find_or_fail(gf, key, &kv, err);
    if (!rc && kv->type != GGUF_TYPE_ARRAY)
        rc = kv_type_error(gf, kv, "array", err);
    if (!rc)
        *out = &kv->arr;
    return rc;
}

/* ------------------------------------------------------------------------
 * array elements and strings
 * ------------------------------------------------------------------------ */

static const uint8_t *elem_at(const struct gguf_array *a, uint64_t i)
{
    assert(i < a->n);
    return a->data + i * gguf_type_size(a->type);
}

int64_t gguf_arr_int(const struct gguf_array *a, uint64_t i)
{
    uint64_t u = 0;
    int64_t s = 0;
    double f;
    int is_signed;
    int k = decode_scalar(a->type, elem_at(a, i), &u, &s, &f, &is_signed);
    assert(k == 0);
    (void)k;
    return is_signed ? s : (int64_t)u;
}

uint64_t gguf_arr_u64(const struct gguf_array *a, uint64_t i)
{
    return (uint64_t)gguf_arr_int(a, i);
}

double gguf_arr_f64(const struct gguf_array *a, uint64_t i)
{
    assert(a->type == GGUF_TYPE_FLOAT32 || a->type == GGUF_TYPE_FLOAT64);
    if (a->type == GGUF_TYPE_FLOAT32)
        return gguf_arr_f32(a, i);
    uint64_t b = gguf_le64(elem_at(a, i));
    double v;
    memcpy(&v, &b, sizeof v);
    return v;
}

float gguf_arr_f32(const struct gguf_array *a, uint64_t i)
{
    assert(a->type == GGUF_TYPE_FLOAT32);
    uint32_t b = gguf_le32(elem_at(a, i));
    float v;
    memcpy(&v, &b, sizeof v);
    return v;
}

struct gguf_str gguf_arr_str(const struct gguf_array *a, uint64_t i)
{
    assert(a->type == GGUF_TYPE_STRING && i < a->n);
    const uint8_t *p = a->data + a->offs[i];
    struct gguf_str s = {(const char *)p + 8, gguf_le64(p)};
    return s;
}

const struct gguf_array *gguf_arr_sub(const struct gguf_array *a, uint64_t i)
{
    assert(a->type == GGUF_TYPE_ARRAY && i < a->n);
    return &a->sub[i];
}

int gguf_str_eq(struct gguf_str s, const char *z)
{
    size_t n = strlen(z);
    return s.len == n && memcmp(s.p, z, n) == 0;
}

char *gguf_str_dup(struct gguf_str s)
{
    if (s.len >= SIZE_MAX || memchr(s.p, 0, (size_t)s.len))
        return NULL;
    return strndup(s.p, (size_t)s.len);
}
