/*
 * safetensors.c: the bounds-checked .safetensors reader (see safetensors.h).
 *
 * Layout: u64le N | N bytes of JSON header | data. Everything is validated
 * in st_open / st_open_mem before a pointer is handed out:
 *   - 8 <= file size, N <= ST_HEADER_MAX, 8 + N <= file size;
 *   - the header is one JSON object (jansson, duplicate keys refused);
 *   - "__metadata__", when present, is an object of strings;
 *   - every other key is a tensor: {"dtype": known name, "shape": [ints >= 0]
 *     (at most ST_MAX_DIMS), "data_offsets": [begin, end]} with
 *     begin <= end <= data size and product(shape) * element size ==
 *     end - begin, all computed in checked 64-bit arithmetic;
 *   - no two tensors' byte ranges overlap (sorted by begin, then compared).
 * Holes between tensors are accepted (the reference reader refuses them,
 * but they are harmless to us and some writers pad).
 *
 * Owns: the mapping (st_open) or nothing (st_open_mem), the tensor table and
 * copies of names and metadata. Does not own: conversion beyond the float
 * types (st_read_f32), shard indexes (callers).
 */
#include "safetensors.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/file.h"
#include "common/json.h"
#include "common/quant.h"

struct st_meta {
    char *key;   /* owned */
    char *value; /* owned */
};

struct st_file {
    char *name;               /* owned: path or caller's name */
    const uint8_t *base;      /* whole file (mapped or borrowed) */
    uint64_t size;            /* bytes of base */
    struct mf_file_map map;   /* our mapping, unmapped by st_close; zero when borrowed */
    uint64_t data_start;      /* 8 + header length */
    struct st_tensor *tensors; /* owned, n_tensors, header order */
    size_t n_tensors;
    struct st_meta *meta;     /* owned, n_meta */
    size_t n_meta;
};

/* ---- dtypes -------------------------------------------------------------- */

static const struct {
    const char *name;
    size_t size;
} dtypes[ST_N_DTYPES] = {
    [ST_BOOL] = {"BOOL", 1},   [ST_U8] = {"U8", 1},      [ST_I8] = {"I8", 1},
    [ST_I16] = {"I16", 2},     [ST_U16] = {"U16", 2},    [ST_F16] = {"F16", 2},
    [ST_BF16] = {"BF16", 2},   [ST_I32] = {"I32", 4},    [ST_U32] = {"U32", 4},
    [ST_F32] = {"F32", 4},     [ST_F64] = {"F64", 8},    [ST_I64] = {"I64", 8},
    [ST_U64] = {"U64", 8},     [ST_F8_E4M3] = {"F8_E4M3", 1},
    [ST_F8_E5M2] = {"F8_E5M2", 1},
};

const char *st_dtype_name(enum st_dtype t)
{
    return (unsigned)t < ST_N_DTYPES ? dtypes[t].name : "?";
}

size_t st_dtype_size(enum st_dtype t)
{
    return (unsigned)t < ST_N_DTYPES ? dtypes[t].size : 0;
}

/* ---- header parsing ------------------------------------------------------ */

static uint64_t rd_u64le(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

/* Reads a JSON integer that must be >= 0 into *out; -1 otherwise. */
static int json_u64(const json_t *v, uint64_t *out)
{
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return -1;
    *out = (uint64_t)json_integer_value(v);
    return 0;
}

static int parse_metadata(struct st_file *f, json_t *obj, struct mf_err *err)
{
    if (!json_is_object(obj))
        return mf_err_set(err, MF_EFORMAT, "%s: \"__metadata__\" must be an object of strings",
                          f->name);
    size_t n = json_object_size(obj);
    f->meta = calloc(n ? n : 1, sizeof *f->meta);
    if (!f->meta)
        return mf_err_set(err, MF_ENOMEM, "out of memory reading %s", f->name);
    const char *key;
    json_t *v;
    json_object_foreach(obj, key, v) {
        if (!json_is_string(v))
            return mf_err_set(err, MF_EFORMAT, "%s: __metadata__ \"%s\" must be a string",
                              f->name, key);
        struct st_meta *m = &f->meta[f->n_meta];
        m->key = strdup(key);
        m->value = strdup(json_string_value(v));
        f->n_meta++;
        if (!m->key || !m->value)
            return mf_err_set(err, MF_ENOMEM, "out of memory reading %s", f->name);
    }
    return 0;
}

static int parse_dtype(const char *s, enum st_dtype *out)
{
    for (int i = 0; i < ST_N_DTYPES; i++) {
        if (strcmp(s, dtypes[i].name) == 0) {
            *out = (enum st_dtype)i;
            return 0;
        }
    }
    return -1;
}

/* shape: an array of at most ST_MAX_DIMS non-negative ints; fills t's
 * n_dims, shape and n_elements (overflow refused). */
static int parse_shape(const struct st_file *f, const char *name, json_t *shape,
                       struct st_tensor *t, struct mf_err *err)
{
    if (!json_is_array(shape))
        return mf_err_set(err, MF_EFORMAT, "%s: tensor %s: \"shape\" must be an array", f->name,
                          name);
    size_t nd = json_array_size(shape);
    if (nd > ST_MAX_DIMS)
        return mf_err_set(err, MF_EFORMAT, "%s: tensor %s has %zu dimensions (at most %d)",
                          f->name, name, nd, ST_MAX_DIMS);
    uint64_t n = 1;
    for (size_t d = 0; d < nd; d++) {
        uint64_t dim;
        if (json_u64(json_array_get(shape, d), &dim) != 0)
            return mf_err_set(err, MF_EFORMAT,
                              "%s: tensor %s: shape[%zu] must be a non-negative integer",
                              f->name, name, d);
        if (dim > INT64_MAX || (dim && n > UINT64_MAX / dim))
            return mf_err_set(err, MF_EFORMAT, "%s: tensor %s: shape product overflows",
                              f->name, name);
        t->shape[d] = (int64_t)dim;
        n *= dim;
    }
    t->n_dims = (int32_t)nd;
    t->n_elements = n;
    return 0;
}

static int parse_tensor(struct st_file *f, const char *name, json_t *obj, struct st_tensor *t,
                        struct mf_err *err)
{
    if (!json_is_object(obj))
        return mf_err_set(err, MF_EFORMAT, "%s: tensor %s: entry must be an object", f->name,
                          name);
    json_t *jdt = json_object_get(obj, "dtype");
    if (!json_is_string(jdt))
        return mf_err_set(err, MF_EFORMAT, "%s: tensor %s: \"dtype\" must be a string",
                          f->name, name);
    const char *dt = json_string_value(jdt);
    if (parse_dtype(dt, &t->dtype) != 0)
        return mf_err_set(err, MF_EUNSUPPORTED, "%s: tensor %s: unknown dtype \"%s\"", f->name,
                          name, dt);
    json_t *shape = json_object_get(obj, "shape");
    if (!shape)
        return mf_err_set(err, MF_EFORMAT, "%s: tensor %s has no \"shape\"", f->name, name);
    int rc = parse_shape(f, name, shape, t, err);
    if (rc)
        return rc;
    json_t *offs = json_object_get(obj, "data_offsets");
    uint64_t begin, end;
    if (!json_is_array(offs) || json_array_size(offs) != 2 ||
        json_u64(json_array_get(offs, 0), &begin) || json_u64(json_array_get(offs, 1), &end))
        return mf_err_set(err, MF_EFORMAT,
                          "%s: tensor %s: \"data_offsets\" must be [begin, end] of "
                          "non-negative integers",
                          f->name, name);
    uint64_t data_size = f->size - f->data_start;
    if (begin > end || end > data_size)
        return mf_err_set(err, MF_EFORMAT,
                          "%s: tensor %s: data_offsets [%llu, %llu] outside the %llu data bytes "
                          "(file offset %llu)",
                          f->name, name, (unsigned long long)begin, (unsigned long long)end,
                          (unsigned long long)data_size, (unsigned long long)f->data_start);
    size_t es = dtypes[t->dtype].size;
    if (t->n_elements > UINT64_MAX / es || t->n_elements * es != end - begin)
        return mf_err_set(err, MF_EFORMAT,
                          "%s: tensor %s: %llu elements of %s need %llu bytes but data_offsets "
                          "[%llu, %llu] give %llu (file offset %llu)",
                          f->name, name, (unsigned long long)t->n_elements, dt,
                          t->n_elements > UINT64_MAX / es
                              ? 0ull
                              : (unsigned long long)(t->n_elements * es),
                          (unsigned long long)begin, (unsigned long long)end,
                          (unsigned long long)(end - begin),
                          (unsigned long long)(f->data_start + begin));
    t->offset = f->data_start + begin;
    t->size = end - begin;
    t->name = strdup(name);
    if (!t->name)
        return mf_err_set(err, MF_ENOMEM, "out of memory reading %s", f->name);
    return 0;
}

static int cmp_offset(const void *a, const void *b)
{
    const struct st_tensor *x = *(const struct st_tensor *const *)a;
    const struct st_tensor *y = *(const struct st_tensor *const *)b;
    if (x->offset != y->offset)
        return x->offset < y->offset ? -1 : 1;
    return x->size < y->size ? -1 : x->size > y->size;
}

/* Refuses two tensors whose non-empty byte ranges share a byte. */
static int check_overlaps(struct st_file *f, struct mf_err *err)
{
    if (f->n_tensors < 2)
        return 0;
    const struct st_tensor **v = malloc(f->n_tensors * sizeof *v);
    if (!v)
        return mf_err_set(err, MF_ENOMEM, "out of memory reading %s", f->name);
    for (size_t i = 0; i < f->n_tensors; i++)
        v[i] = &f->tensors[i];
    qsort(v, f->n_tensors, sizeof *v, cmp_offset);
    int rc = 0;
    const struct st_tensor *prev = NULL;
    for (size_t i = 0; i < f->n_tensors && !rc; i++) {
        if (v[i]->size == 0)
            continue;
        if (prev && v[i]->offset < prev->offset + prev->size)
            rc = mf_err_set(err, MF_EFORMAT,
                            "%s: tensors %s and %s overlap (file offsets %llu and %llu)",
                            f->name, prev->name, v[i]->name, (unsigned long long)prev->offset,
                            (unsigned long long)v[i]->offset);
        prev = v[i];
    }
    free(v);
    return rc;
}

static int parse_header(struct st_file *f, struct mf_err *err)
{
    if (f->size < 8)
        return mf_err_set(err, MF_EFORMAT,
                          "%s: byte 0: file is %llu bytes, too short for a safetensors header",
                          f->name, (unsigned long long)f->size);
    uint64_t n = rd_u64le(f->base);
    /* a length whose top 4 bytes are not zero is not quoted: those 8 bytes may be
     * text of any file (a symlink to a key), and error messages end up in logs */
    if ((n >> 32) != 0)
        return mf_err_set(err, MF_EFORMAT,
                          "%s: byte 0: not a safetensors file: the first 8 bytes are not a "
                          "header length (the header is at most %u bytes)",
                          f->name, ST_HEADER_MAX);
    if (n > ST_HEADER_MAX || n > f->size - 8)
        return mf_err_set(err, MF_EFORMAT,
                          "%s: byte 0: header length %llu exceeds the file (%llu bytes) or the "
                          "limit (%u)",
                          f->name, (unsigned long long)n, (unsigned long long)f->size,
                          ST_HEADER_MAX);
    f->data_start = 8 + n;
    if (memchr(f->base + 8, 0, (size_t)n))
        return mf_err_set(err, MF_EFORMAT, "%s: the JSON header contains a NUL byte", f->name);
    json_t *root = mf_json_parse((const char *)f->base + 8, (size_t)n, f->name, err);
    if (!root)
        return MF_EFORMAT;
    int rc = 0;
    if (!json_is_object(root)) {
        rc = mf_err_set(err, MF_EFORMAT, "%s: the header must be a JSON object", f->name);
        goto out;
    }
    size_t cap = json_object_size(root);
    f->tensors = calloc(cap ? cap : 1, sizeof *f->tensors);
    if (!f->tensors) {
        rc = mf_err_set(err, MF_ENOMEM, "out of memory reading %s", f->name);
        goto out;
    }
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v) {
        if (strcmp(key, "__metadata__") == 0) {
            rc = f->meta ? mf_err_set(err, MF_EFORMAT, "%s: two __metadata__", f->name)
                         : parse_metadata(f, v, err);
        } else {
            rc = parse_tensor(f, key, v, &f->tensors[f->n_tensors], err);
            if (!rc)
                f->n_tensors++;
        }
        if (rc)
            goto out;
    }
    rc = check_overlaps(f, err);
out:
    json_decref(root);
    return rc;
}

/* ---- open / close -------------------------------------------------------- */

static struct st_file *file_new(const char *name, struct mf_err *err)
{
    struct st_file *f = calloc(1, sizeof *f);
    if (f)
        f->name = strdup(name ? name : "(memory)");
    if (!f || !f->name) {
        free(f);
        mf_err_set(err, MF_ENOMEM, "out of memory opening %s", name ? name : "(memory)");
        return NULL;
    }
    return f;
}

int st_open_mem(const void *data, size_t size, const char *name, struct st_file **out,
                struct mf_err *err)
{
    *out = NULL;
    struct st_file *f = file_new(name, err);
    if (!f)
        return MF_ENOMEM;
    static const uint8_t empty[1];
    f->base = size ? data : empty;
    f->size = size;
    int rc = parse_header(f, err);
    if (rc) {
        st_close(f);
        return rc;
    }
    *out = f;
    return 0;
}

/* Maps the whole of path into f->base; fails as mf_file_map_range does, a
 * file too short for the 8-byte header length included. */
static int map_file(struct st_file *f, const char *path, struct mf_err *err)
{
    int rc = mf_file_map_range(path, 0, 0, 8, "a safetensors header", &f->map, err);
    if (!rc) {
        f->base = f->map.data;
        f->size = f->map.size;
    }
    return rc;
}

int st_open(const char *path, struct st_file **out, struct mf_err *err)
{
    *out = NULL;
    struct st_file *f = file_new(path, err);
    if (!f)
        return MF_ENOMEM;
    int rc = map_file(f, path, err);
    if (!rc)
        rc = parse_header(f, err);
    if (rc) {
        st_close(f);
        return rc;
    }
    *out = f;
    return 0;
}

void st_close(struct st_file *f)
{
    if (!f)
        return;
    for (size_t i = 0; f->tensors && i < f->n_tensors; i++)
        free((char *)f->tensors[i].name);
    free(f->tensors);
    for (size_t i = 0; f->meta && i < f->n_meta; i++) {
        free(f->meta[i].key);
        free(f->meta[i].value);
    }
    free(f->meta);
    mf_file_unmap(&f->map);
    free(f->name);
    free(f);
}

/* ---- accessors ----------------------------------------------------------- */

const char *st_name(const struct st_file *f)
{
    return f->name;
}

size_t st_count(const struct st_file *f)
{
    return f->n_tensors;
}

const struct st_tensor *st_at(const struct st_file *f, size_t i)
{
    return i < f->n_tensors ? &f->tensors[i] : NULL;
}

const struct st_tensor *st_find(const struct st_file *f, const char *name)
{
    for (size_t i = 0; i < f->n_tensors; i++)
        if (strcmp(f->tensors[i].name, name) == 0)
            return &f->tensors[i];
    return NULL;
}

const void *st_data(const struct st_file *f, const struct st_tensor *t)
{
    return f->base + t->offset;
}

const char *st_metadata(const struct st_file *f, const char *key)
{
    for (size_t i = 0; i < f->n_meta; i++)
        if (strcmp(f->meta[i].key, key) == 0)
            return f->meta[i].value;
    return NULL;
}

/* ---- conversion ---------------------------------------------------------- */

int st_read_f32(const struct st_file *f, const struct st_tensor *t, uint64_t first, size_t n,
                float *out, struct mf_err *err)
{
    if (first > t->n_elements || n > t->n_elements - first)
        return mf_err_set(err, MF_ERANGE,
                          "%s: tensor %s: elements [%llu, %llu) outside its %llu elements",
                          f->name, t->name, (unsigned long long)first,
                          (unsigned long long)first + n, (unsigned long long)t->n_elements);
    const uint8_t *p = f->base + t->offset + first * dtypes[t->dtype].size;
    switch (t->dtype) {
    case ST_F32:
        for (size_t i = 0; i < n; i++) {
            uint32_t u = (uint32_t)p[4 * i] | (uint32_t)p[4 * i + 1] << 8 |
                         (uint32_t)p[4 * i + 2] << 16 | (uint32_t)p[4 * i + 3] << 24;
            memcpy(&out[i], &u, 4);
        }
        return 0;
    case ST_F16:
        for (size_t i = 0; i < n; i++)
            out[i] = quant_f16_to_f32((uint16_t)(p[2 * i] | p[2 * i + 1] << 8));
        return 0;
    case ST_BF16:
        for (size_t i = 0; i < n; i++)
            out[i] = quant_bf16_to_f32((uint16_t)(p[2 * i] | p[2 * i + 1] << 8));
        return 0;
    case ST_F64:
        for (size_t i = 0; i < n; i++) {
            uint64_t u = rd_u64le(p + 8 * i);
            double d;
            memcpy(&d, &u, 8);
            /* out of float range is undefined behaviour in C: saturate */
            out[i] = d > FLT_MAX ? INFINITY : d < -FLT_MAX ? -INFINITY : (float)d;
        }
        return 0;
    default:
        return mf_err_set(err, MF_EUNSUPPORTED,
                          "%s: tensor %s: dtype %s cannot be read as floats", f->name, t->name,
                          st_dtype_name(t->dtype));
    }
}
