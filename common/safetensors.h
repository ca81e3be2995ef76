/*
 * safetensors.h: a bounds-checked reader for Hugging Face .safetensors files.
 *
 * Format: an 8-byte little-endian header length N, N bytes of UTF-8 JSON
 * ({"name": {"dtype": "F16", "shape": [..], "data_offsets": [begin, end]},
 * ..., "__metadata__": {"k": "v"}}), then the data; offsets are relative to
 * the first byte after the header. The file is mapped read-only and checked
 * whole at open: header length within the file, JSON well formed, every
 * tensor's dtype known, shape product * element size == end - begin, ranges
 * inside the data and not overlapping. Nothing is trusted before that.
 *
 * Used by PEFT adapter conversion (convert/lora_*) and Hugging Face import
 * (convert/hf_*). A sharded checkpoint is several files: the caller opens
 * each shard (model.safetensors.index.json says which holds what).
 */
#ifndef MFC_SAFETENSORS_H
#define MFC_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

#define ST_MAX_DIMS 8                /* more is refused as malformed */
#define ST_HEADER_MAX (100u << 20)   /* the reference implementation's own limit */

enum st_dtype {
    ST_BOOL, ST_U8, ST_I8, ST_I16, ST_U16, ST_F16, ST_BF16, ST_I32, ST_U32,
    ST_F32, ST_F64, ST_I64, ST_U64, ST_F8_E4M3, ST_F8_E5M2,
    ST_N_DTYPES
};

struct st_tensor {
    const char *name;         /* NUL-terminated, owned by the file */
    enum st_dtype dtype;      /* element type */
    int32_t n_dims;           /* 0..ST_MAX_DIMS (0: a scalar) */
    int64_t shape[ST_MAX_DIMS]; /* row-major, outermost first (PyTorch order) */
    uint64_t n_elements;      /* product of shape */
    uint64_t offset;          /* byte offset of the data in the file */
    uint64_t size;            /* bytes */
};

struct st_file; /* opaque; one open, validated file */

/* Maps and validates path. Returns 0 and *out, or MF_EIO / MF_EFORMAT /
 * MF_EUNSUPPORTED (a dtype not listed above) / MF_ENOMEM with err naming
 * the file, the tensor and the byte offset of the first problem. */
int st_open(const char *path, struct st_file **out, struct mf_err *err);
/* The same over memory (borrowed; must outlive the file); name is used in
 * messages. For fuzzing and tests. */
int st_open_mem(const void *data, size_t size, const char *name, struct st_file **out,
                struct mf_err *err);
/* Unmaps and frees. Accepts NULL. */
void st_close(struct st_file *f);

const char *st_name(const struct st_file *f);               /* path or name */
size_t st_count(const struct st_file *f);                   /* tensors, in header order */
const struct st_tensor *st_at(const struct st_file *f, size_t i);
const struct st_tensor *st_find(const struct st_file *f, const char *name); /* NULL: none */
/* The tensor's bytes (inside the mapping; valid until st_close). */
const void *st_data(const struct st_file *f, const struct st_tensor *t);
/* A "__metadata__" string value, or NULL. */
const char *st_metadata(const struct st_file *f, const char *key);

const char *st_dtype_name(enum st_dtype t); /* "F16", ... */
size_t st_dtype_size(enum st_dtype t);      /* bytes per element (BOOL: 1) */

/* Converts elements [first, first + n) of t (F32, F16, BF16, F64) to float.
 * Returns 0, MF_ERANGE when the range leaves the tensor, MF_EUNSUPPORTED for
 * another dtype (err names the tensor and dtype). */
int st_read_f32(const struct st_file *f, const struct st_tensor *t, uint64_t first, size_t n,
                float *out, struct mf_err *err);

#endif
