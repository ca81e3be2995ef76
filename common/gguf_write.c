/*
 * gguf_write.c: the streaming GGUF writer (the gguf_writer_* half of gguf.h).
 *
 * Owns an atomic temporary (common/file.h), the encoded KVs (one buffer, in
 * insertion order), the tensor infos and two name indexes for duplicate
 * checks. Does not own tensor data: callers stream it through
 * gguf_writer_write, so a model of any size is written with constant memory.
 *
 * Layout, as ggml's gguf.cpp and gguf-py's GGUFWriter produce it:
 *   header (magic, version 3, n_tensors u64, n_kv u64) | KVs | tensor infos |
 *   zero padding to the alignment | for each tensor: data, zero padding to
 *   the alignment.
 * Tensor i's offset is the sum of the padded sizes before it. One case
 * differs between llama.cpp's two writers: with no tensors at all, gguf-py
 * (vocab-only files, e.g. models/ggml-vocab-*.gguf) writes no padding after
 * the KVs and gguf.cpp does; this writer follows gguf-py, so those files copy
 * byte for byte.
 *
 * States (see gguf.h): OPEN --first write/finish--> DATA --finish--> DONE;
 * any failure --> FAILED, and the temporary is removed at once.
 */
#include "gguf.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "file.h"
#include "gguf_int.h"

#define KV_BUF_MAX ((size_t)1 << 32) /* 4 GiB of metadata: far above any real vocabulary */

enum wstate { W_OPEN, W_DATA, W_DONE, W_FAILED };

struct wtensor {
    char *name;                 /* owned: NUL-terminated */
    uint32_t type;              /* enum ggml_type */
    uint32_t n_dims;            /* 1..4 */
    uint64_t ne[GGUF_MAX_DIMS]; /* elements per dimension, ggml order */
    uint64_t n_bytes;           /* data bytes, without padding */
};

struct gguf_writer {
    struct mf_file_tmp tmp;  /* the temporary; released once committed or failed */
    char *path;              /* owned: the target, for messages */
    enum wstate state;       /* see the diagram above */
    struct mf_buf kvs;       /* encoded KVs (key, type, value), insertion order */
    uint64_t n_kv;           /* KVs in kvs */
    char **keys;             /* owned: n_kv key copies, for the duplicate index */
    uint64_t cap_keys;       /* slots in keys */
    struct gguf_index kv_ix; /* key -> index in keys */
    struct wtensor *t;       /* owned: tensor infos in insertion (= data) order */
    uint64_t n_t;            /* entries in t */
    uint64_t cap_t;          /* slots in t */
    struct gguf_index t_ix;  /* name -> index in t */
    uint32_t alignment;      /* general.alignment, or 32 */
    uint64_t cur;            /* tensor now receiving data (DATA state) */
    uint64_t cur_done;       /* bytes of t[cur] received */
};

static const char *key_name_of(const void *ctx, uint64_t i)
{
    return ((const struct gguf_writer *)ctx)->keys[i];
}

static const char *wt_name_of(const void *ctx, uint64_t i)
{
    return ((const struct gguf_writer *)ctx)->t[i].name;
}

/* Records a failure: the temporary goes at once, so nothing is left behind
 * even if the caller never frees the writer. Returns rc. */
static int wfail(struct gguf_writer *w, int rc)
{
    if (w->state != W_DONE) {
        mf_file_tmp_abort(&w->tmp);
        w->state = W_FAILED;
    }
    return rc;
}

static int check_open(struct gguf_writer *w, const char *what, struct mf_err *err)
{
    if (w->state == W_OPEN)
        return 0;
    if (w->state == W_FAILED)
        return mf_err_set(err, MF_EINVAL, "%s: cannot add %s: an earlier step failed", w->path,
                          what);
    return wfail(w, mf_err_set(err, MF_EINVAL,
                               "%s: cannot add %s after tensor data has been "
                               "written",
                               w->path, what));
}

int gguf_writer_open(const char *path, struct gguf_writer **out, struct mf_err *err)
{
    *out = NULL;
    struct gguf_writer *w = calloc(1, sizeof *w);
    if (!w)
        return mf_err_set(err, MF_ENOMEM, "out of memory writing %s", path);
    w->path = strdup(path);
    if (!w->path) {
        free(w);
        return mf_err_set(err, MF_ENOMEM, "out of memory writing %s", path);
    }
    mf_buf_init(&w->kvs, KV_BUF_MAX);
    w->alignment = GGUF_DEFAULT_ALIGNMENT;
    int rc = mf_file_tmp_open(&w->tmp, path, err);
    if (rc) {
        w->state = W_FAILED;
        gguf_writer_free(w);
        return rc;
    }
    *out = w;
    return 0;
}

void gguf_writer_free(struct gguf_writer *w)
{
    if (!w)
        return;
    if (w->state != W_DONE && w->state != W_FAILED)
        mf_file_tmp_abort(&w->tmp);
    for (uint64_t i = 0; i < w->n_kv; i++)
        free(w->keys[i]);
    free(w->keys);
    for (uint64_t i = 0; i < w->n_t; i++)
        free(w->t[i].name);
    free(w->t);
    gguf_index_fini(&w->kv_ix);
    gguf_index_fini(&w->t_ix);
    mf_buf_free(&w->kvs);
    free(w->path);
    free(w);
}

/* ------------------------------------------------------------------------
 * KVs
 * ------------------------------------------------------------------------ */

static int put_u32(struct mf_buf *b, uint32_t v, struct mf_err *err)
{
    uint8_t p[4];
    gguf_put32(p, v);
    return mf_buf_append(b, p, sizeof p, err);
}

static int put_u64(struct mf_buf *b, uint64_t v, struct mf_err *err)
{
    uint8_t p[8];
    gguf_put64(p, v);
    return mf_buf_append(b, p, sizeof p, err);
}

static int put_str(struct mf_buf *b, const char *s, uint64_t len, struct mf_err *err)
{
    int rc = put_u64(b, len, err);
    if (!rc && len > SIZE_MAX)
        rc = mf_err_set(err, MF_ENOMEM, "a string of %" PRIu64 " bytes is too long", len);
    return rc ? rc : mf_buf_append(b, s, (size_t)len, err);
}

/* Checks key and appends it with its type; the value must follow. */
static int begin_kv(struct gguf_writer *w, const char *key, uint32_t type, struct mf_err *err)
{
    int rc = check_open(w, "a KV", err);
    if (rc)
        return rc;
    size_t len = strlen(key);
    if (len == 0 || len > GGUF_MAX_KEY)
        return wfail(w, mf_err_set(err, MF_EINVAL, "%s: a key must be 1 to %d bytes long (got %zu)",
                                   w->path, GGUF_MAX_KEY, len));
    if (strcmp(key, "general.alignment") == 0 && type != GGUF_TYPE_UINT32)
        return wfail(w, mf_err_set(err, MF_EINVAL,
                                   "%s: key 'general.alignment' must be u32, "
                                   "not %s",
                                   w->path, gguf_type_name(type)));
    if (w->n_kv == w->cap_keys) {
        uint64_t cap = w->cap_keys ? w->cap_keys * 2 : 32;
        char **k = realloc(w->keys, cap * sizeof *k);
        if (!k)
            return wfail(w, mf_err_set(err, MF_ENOMEM, "out of memory adding key %s", key));
        w->keys = k;
        w->cap_keys = cap;
    }
    w->keys[w->n_kv] = strdup(key);
    if (!w->keys[w->n_kv])
        return wfail(w, mf_err_set(err, MF_ENOMEM, "out of memory adding key %s", key));
    struct gguf_index_names nm = {key_name_of, w};
    uint64_t dup;
    rc = gguf_index_add(&w->kv_ix, &nm, w->n_kv, &dup);
    if (rc) {
        free(w->keys[w->n_kv]);
        return wfail(
            w, rc == 1 ? mf_err_set(err, MF_EEXIST, "%s: key '%s' is already set", w->path, key)
                       : mf_err_set(err, MF_ENOMEM, "out of memory adding key %s", key));
    }
    w->n_kv++;
    rc = put_str(&w->kvs, key, len, err);
    if (!rc)
        rc = put_u32(&w->kvs, type, err);
    return rc ? wfail(w, rc) : 0;
}

/* general.alignment sets the data alignment; it must be a power of two. */
static int note_alignment(struct gguf_writer *w, const char *key, uint32_t type, const uint8_t *val,
                          struct mf_err *err)
{
    if (strcmp(key, "general.alignment") != 0)
        return 0;
    if (type != GGUF_TYPE_UINT32)
        return wfail(w, mf_err_set(err, MF_EINVAL,
                                   "%s: key 'general.alignment' must be u32, "
                                   "not %s",
                                   w->path, gguf_type_name(type)));
    uint32_t a = gguf_le32(val);
    if (a == 0 || (a & (a - 1)) != 0)
        return wfail(w, mf_err_set(err, MF_EINVAL,
                                   "%s: general.alignment %" PRIu32 " is not a "
                                   "power of two",
                                   w->path, a));
    w->alignment = a;
    return 0;
}

int gguf_writer_add_raw(struct gguf_writer *w, const char *key, uint32_t type, const void *val,
                        uint64_t size, struct mf_err *err)
{
    int rc = check_open(w, "a KV", err);
    if (rc)
        return rc;
    struct gguf_array arr = {0};
    struct gguf_rd r = {val, 0, size, "value", "key", err};
    if (type >= GGUF_TYPE_COUNT)
        return wfail(w, mf_err_set(err, MF_EINVAL,
                                   "%s: key '%s': %" PRIu32 " is not a GGUF "
                                   "value type",
                                   w->path, key, type));
    rc = gguf_parse_value(&r, type, key, 0, &arr);
    gguf_array_fini(&arr);
    if (!rc && r.pos != size)
        rc = mf_err_set(err, MF_EFORMAT,
                        "key '%s': the %s value has %" PRIu64 " stray bytes "
                        "after it",
                        key, gguf_type_name(type), size - r.pos);
    if (rc)
        return wfail(w, mf_err_prefix(err, "%s", w->path));
    rc = note_alignment(w, key, type, val, err);
    if (!rc)
        rc = begin_kv(w, key, type, err);
    if (!rc)
        rc = mf_buf_append(&w->kvs, val, (size_t)size, err);
    return rc ? wfail(w, rc) : 0;
}

int gguf_writer_add_kv(struct gguf_writer *w, const struct gguf_kv *kv, struct mf_err *err)
{
    return gguf_writer_add_raw(w, kv->key, kv->type, kv->val, kv->val_size, err);
}

static int add_scalar(struct gguf_writer *w, const char *key, uint32_t type, uint64_t bits,
                      struct mf_err *err)
{
    uint8_t v[8];
    gguf_put64(v, bits);
    return gguf_writer_add_raw(w, key, type, v, gguf_type_size(type), err);
}

int gguf_writer_add_u8(struct gguf_writer *w, const char *key, uint8_t v, struct mf_err *err)
{
    return add_scalar(w, key, GGUF_TYPE_UINT8, v, err);
}

int gguf_writer_add_i8(struct gguf_writer *w, const char *key, int8_t v, struct mf_err *err)
{
    return add_scalar(w, key, GGUF_TYPE_INT8, (uint8_t)v, err);
}

int gguf_writer_add_u16(struct gguf_writer *w, const char *key, uint16_t v, struct mf_err *err)
{
    return add_scalar(w, key, GGUF_TYPE_UINT16, v, err);
}

int gguf_writer_add_i16(struct gguf_writer *w, const char *key, int16_t v, struct mf_err *err)
{
    return add_scalar(w, key, GGUF_TYPE_INT16, (uint16_t)v, err);
}

int gguf_writer_add_u32(struct gguf_writer *w, const char *key, uint32_t v, struct mf_err *err)
{
    return add_scalar(w, key, GGUF_TYPE_UINT32, v, err);
}

int gguf_writer_add_i32(struct gguf_writer *w, const char *key, int32_t v, struct mf_err *err)
{
    return add_scalar(w, key, GGUF_TYPE_INT32, (uint32_t)v, err);
}

int gguf_writer_add_u64(struct gguf_writer *w, const char *key, uint64_t v, struct mf_err *err)
{
    return add_scalar(w, key, GGUF_TYPE_UINT64, v, err);
}

int gguf_writer_add_i64(struct gguf_writer *w, const char *key, int64_t v, struct mf_err *err)
{
    return add_scalar(w, key, GGUF_TYPE_INT64, (uint64_t)v, err);
}

int gguf_writer_add_f32(struct gguf_writer *w, const char *key, float v, struct mf_err *err)
{
    uint32_t bits;
    memcpy(&bits, &v, sizeof bits);
    return add_scalar(w, key, GGUF_TYPE_FLOAT32, bits, err);
}

int gguf_writer_add_f64(struct gguf_writer *w, const char *key, double v, struct mf_err *err)
{
    uint64_t bits;
    memcpy(&bits, &v, sizeof bits);
    return add_scalar(w, key, GGUF_TYPE_FLOAT64, bits, err);
}

int gguf_writer_add_bool(struct gguf_writer *w, const char *key, int v, struct mf_err *err)
{
    return add_scalar(w, key, GGUF_TYPE_BOOL, v ? 1 : 0, err);
}

int gguf_writer_add_str(struct gguf_writer *w, const char *key, const char *s, uint64_t len,
                        struct mf_err *err)
{
    int rc = begin_kv(w, key, GGUF_TYPE_STRING, err);
    if (!rc)
        rc = put_str(&w->kvs, s, len, err);
    return rc ? wfail(w, rc) : 0;
}

int gguf_writer_add_cstr(struct gguf_writer *w, const char *key, const char *s, struct mf_err *err)
{
    return gguf_writer_add_str(w, key, s, strlen(s), err);
}

/* Host value i of a fixed-size array as little-endian bytes at p. */
static void encode_elem(uint32_t type, const void *elems, uint64_t i, uint8_t *p)
{
    size_t sz = gguf_type_size(type);
    const uint8_t *src = (const uint8_t *)elems + i * sz;
    uint64_t v = 0;
    switch (sz) {
    case 1:
        v = src[0];
        break;
    case 2: {
        uint16_t x;
        memcpy(&x, src, 2);
        v = x;
        break;
    }
    case 4: {
        uint32_t x;
        memcpy(&x, src, 4);
        v = x;
        break;
    }
    default:
        memcpy(&v, src, 8);
        break;
    }
    for (size_t k = 0; k < sz; k++)
        p[k] = (uint8_t)(v >> (8 * k));
}

int gguf_writer_add_arr(struct gguf_writer *w, const char *key, uint32_t elem_type,
                        const void *elems, uint64_t n, struct mf_err *err)
{
    size_t sz = gguf_type_size(elem_type);
    if (sz == 0)
        return wfail(w, mf_err_set(err, MF_EINVAL,
                                   "%s: key '%s': gguf_writer_add_arr takes "
                                   "fixed-size elements, not %s",
                                   w->path, key, gguf_type_name(elem_type)));
    int rc = begin_kv(w, key, GGUF_TYPE_ARRAY, err);
    if (!rc)
        rc = put_u32(&w->kvs, elem_type, err);
    if (!rc)
        rc = put_u64(&w->kvs, n, err);
    uint8_t chunk[4096];
    size_t used = 0;
    for (uint64_t i = 0; i < n && !rc; i++) {
        encode_elem(elem_type, elems, i, chunk + used);
        used += sz;
        if (used + 8 > sizeof chunk || i + 1 == n) {
            rc = mf_buf_append(&w->kvs, chunk, used, err);
            used = 0;
        }
    }
    return rc ? wfail(w, rc) : 0;
}

int gguf_writer_add_arr_str(struct gguf_writer *w, const char *key, const struct gguf_str *strs,
                            uint64_t n, struct mf_err *err)
{
    int rc = begin_kv(w, key, GGUF_TYPE_ARRAY, err);
    if (!rc)
        rc = put_u32(&w->kvs, GGUF_TYPE_STRING, err);
    if (!rc)
        rc = put_u64(&w->kvs, n, err);
    for (uint64_t i = 0; i < n && !rc; i++)
        rc = put_str(&w->kvs, strs[i].p, strs[i].len, err);
    return rc ? wfail(w, rc) : 0;
}

/* ------------------------------------------------------------------------
 * tensor infos
 * ------------------------------------------------------------------------ */

/* Validates a tensor's shape and computes its byte size. */
static int tensor_shape(struct gguf_writer *w, struct wtensor *t, struct mf_err *err)
{
    uint64_t n = 1, rows = 1, row;
    for (uint32_t d = 0; d < t->n_dims; d++) {
        if (t->ne[d] > (uint64_t)INT64_MAX || __builtin_mul_overflow(n, t->ne[d], &n) ||
            n > (uint64_t)INT64_MAX)
            return mf_err_set(err, MF_EINVAL, "%s: tensor '%s' has more than 2^63 elements",
                              w->path, t->name);
        if (d > 0)
            rows *= t->ne[d];
    }
    if (ggml_type_row_size(t->type, t->ne[0], &row) != 0)
        return mf_err_set(err, MF_EINVAL,
                          "%s: tensor '%s': a row of %" PRIu64 " elements is "
                          "not a whole number of %s blocks (%" PRIu32 " elements)",
                          w->path, t->name, t->ne[0], ggml_type_name(t->type),
                          ggml_type_block_size(t->type));
    if (__builtin_mul_overflow(row, rows, &t->n_bytes))
        return mf_err_set(err, MF_EINVAL, "%s: tensor '%s' takes more than 2^64 bytes", w->path,
                          t->name);
    return 0;
}

static int check_tensor_args(struct gguf_writer *w, const char *name, enum ggml_type type,
                             uint32_t n_dims, struct mf_err *err)
{
    size_t len = strlen(name);
    if (len >= GGUF_MAX_NAME)
        return mf_err_set(err, MF_EINVAL, "%s: tensor name '%s' is %zu bytes (limit %d)", w->path,
                          name, len, GGUF_MAX_NAME - 1);
    if (!ggml_type_valid((uint32_t)type))
        return mf_err_set(err, MF_EINVAL, "%s: tensor '%s': %d is not a ggml type", w->path, name,
                          (int)type);
    if (n_dims < 1 || n_dims > GGUF_MAX_DIMS)
        return mf_err_set(err, MF_EINVAL, "%s: tensor '%s' has %" PRIu32 " dimensions (1 to %d)",
                          w->path, name, n_dims, GGUF_MAX_DIMS);
    return 0;
}

int gguf_writer_add_tensor(struct gguf_writer *w, const char *name, enum ggml_type type,
                           uint32_t n_dims, const uint64_t *ne, struct mf_err *err)
{
    int rc = check_open(w, "a tensor", err);
    if (!rc)
        rc = check_tensor_args(w, name, type, n_dims, err);
    if (!rc && w->n_t == w->cap_t) {
        uint64_t cap = w->cap_t ? w->cap_t * 2 : 64;
        struct wtensor *t = realloc(w->t, cap * sizeof *t);
        if (!t)
            rc = mf_err_set(err, MF_ENOMEM, "out of memory adding tensor %s", name);
        else
            w->t = t, w->cap_t = cap;
    }
    if (rc)
        return wfail(w, rc);
    struct wtensor *t = &w->t[w->n_t];
    memset(t, 0, sizeof *t);
    t->type = (uint32_t)type;
    t->n_dims = n_dims;
    for (int d = 0; d < GGUF_MAX_DIMS; d++)
        t->ne[d] = (uint32_t)d < n_dims ? ne[d] : 1;
    t->name = strdup(name);
    if (!t->name)
        return wfail(w, mf_err_set(err, MF_ENOMEM, "out of memory adding tensor %s", name));
    struct gguf_index_names nm = {wt_name_of, w};
    uint64_t dup;
    rc = tensor_shape(w, t, err);
    if (!rc && (rc = gguf_index_add(&w->t_ix, &nm, w->n_t, &dup)) != 0)
        rc = rc == 1 ? mf_err_set(err, MF_EEXIST, "%s: tensor '%s' is already added", w->path, name)
                     : mf_err_set(err, MF_ENOMEM, "out of memory adding tensor %s", name);
    if (rc) {
        free(t->name);
        return wfail(w, rc);
    }
    w->n_t++;
    return 0;
}

uint64_t gguf_writer_tensor_bytes(const struct gguf_writer *w, uint64_t i)
{
    return i < w->n_t ? w->t[i].n_bytes : 0;
}

/* ------------------------------------------------------------------------
 * data
 * ------------------------------------------------------------------------ */

static uint64_t pad_to(uint64_t n, uint32_t a)
{
    return (a - n % a) % a;
}

static int write_zeros(struct gguf_writer *w, uint64_t n, struct mf_err *err)
{
    static const uint8_t zeros[256];
    int rc = 0;
    while (n && !rc) {
        size_t k = n < sizeof zeros ? (size_t)n : sizeof zeros;
        rc = mf_file_tmp_write(&w->tmp, zeros, k, err);
        n -= k;
    }
    return rc;
}

/* Encodes the header and tensor infos (offsets assigned) into b. */
static int encode_infos(struct gguf_writer *w, struct mf_buf *b, struct mf_err *err)
{
    uint8_t h[24];
    gguf_put32(h, GGUF_MAGIC);
    gguf_put32(h + 4, GGUF_VERSION);
    gguf_put64(h + 8, w->n_t);
    gguf_put64(h + 16, w->n_kv);
    int rc = mf_buf_append(b, h, sizeof h, err);
    uint64_t off = 0;
    for (uint64_t i = 0; i < w->n_t && !rc; i++) {
        const struct wtensor *t = &w->t[i];
        rc = put_str(b, t->name, strlen(t->name), err);
        if (!rc)
            rc = put_u32(b, t->n_dims, err);
        for (uint32_t d = 0; d < t->n_dims && !rc; d++)
            rc = put_u64(b, t->ne[d], err);
        if (!rc)
            rc = put_u32(b, t->type, err);
        if (!rc)
            rc = put_u64(b, off, err);
        if (__builtin_add_overflow(off, t->n_bytes + pad_to(t->n_bytes, w->alignment), &off))
            rc = mf_err_set(err, MF_EINVAL, "%s: the tensors take more than 2^64 bytes", w->path);
    }
    return rc;
}

/* Writes header, KVs, tensor infos and the padding before the data. */
static int emit_header(struct gguf_writer *w, struct mf_err *err)
{
    struct mf_buf head;
    mf_buf_init(&head, KV_BUF_MAX);
    int rc = encode_infos(w, &head, err);
    uint64_t info_len = head.len;
    if (!rc)
        rc = mf_file_tmp_write(&w->tmp, head.data, 24, err);
    if (!rc && w->kvs.len)
        rc = mf_file_tmp_write(&w->tmp, w->kvs.data, w->kvs.len, err);
    if (!rc && info_len > 24)
        rc = mf_file_tmp_write(&w->tmp, head.data + 24, info_len - 24, err);
    if (!rc && w->n_t > 0)
        rc = write_zeros(w, pad_to(info_len + w->kvs.len, w->alignment), err);
    mf_buf_free(&head);
    if (rc)
        return wfail(w, rc);
    w->state = W_DATA;
    w->cur = 0;
    w->cur_done = 0;
    return 0;
}

/* Moves past t[cur] once it is complete (empty tensors included), padding. */
static int advance(struct gguf_writer *w, struct mf_err *err)
{
    while (w->cur < w->n_t && w->cur_done == w->t[w->cur].n_bytes) {
        int rc = write_zeros(w, pad_to(w->t[w->cur].n_bytes, w->alignment), err);
        if (rc)
            return rc;
        w->cur++;
        w->cur_done = 0;
    }
    return 0;
}

int gguf_writer_write(struct gguf_writer *w, const void *p, size_t n, struct mf_err *err)
{
    int rc = w->state == W_OPEN ? emit_header(w, err) : 0;
    if (rc)
        return rc;
    if (w->state != W_DATA)
        return mf_err_set(err, MF_EINVAL, "%s: cannot write data: the writer is %s", w->path,
                          w->state == W_DONE ? "finished" : "failed");
    const uint8_t *c = p;
    while (!rc) {
        rc = advance(w, err);
        if (rc || n == 0)
            break;
        if (w->cur == w->n_t) {
            rc = mf_err_set(err, MF_EINVAL, "%s: %zu bytes of data beyond the last tensor", w->path,
                            n);
            break;
        }
        uint64_t left = w->t[w->cur].n_bytes - w->cur_done;
        size_t k = left < n ? (size_t)left : n;
        rc = mf_file_tmp_write(&w->tmp, c, k, err);
        w->cur_done += k;
        c += k;
        n -= k;
    }
    return rc ? wfail(w, rc) : 0;
}

int gguf_writer_finish(struct gguf_writer *w, struct mf_err *err)
{
    int rc = gguf_writer_write(w, NULL, 0, err);
    if (rc)
        return rc;
    if (w->cur < w->n_t)
        return wfail(w, mf_err_set(err, MF_EINVAL,
                                   "%s: tensor '%s' got %" PRIu64 " of its %" PRIu64 " bytes",
                                   w->path, w->t[w->cur].name, w->cur_done, w->t[w->cur].n_bytes));
    rc = mf_file_tmp_commit(&w->tmp, err);
    if (rc) {
        w->state = W_FAILED; /* commit already removed the temporary */
        return rc;
    }
    w->state = W_DONE;
    return 0;
}
