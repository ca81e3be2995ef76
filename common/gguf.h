/*
 * gguf.h: reading and writing GGUF files (llama.cpp's model format, v2/v3).
 *
 * Reader: gguf_open() maps a file read-only (or gguf_open_mem() borrows a
 * buffer) and validates the whole header before returning: magic, version,
 * every KV (types, string and array lengths, nested arrays, unique keys),
 * general.alignment, every tensor info (unique names < 64 bytes, valid ggml
 * type, n_dims <= 4, element count without overflow, ne0 a multiple of the
 * block size, offset aligned, data inside the file, no two tensors'
 * data overlapping). The first problem is reported as one sentence naming
 * the file, the byte offset and the key or tensor. After a successful open
 * every accessor below is safe on any input: nothing is decoded lazily.
 *
 * Nothing the reader hands out is copied unless said so: strings, arrays and
 * tensor data are borrowed views into the mapping and live until
 * gguf_close(). Keys and tensor names are NUL-terminated copies (they may not
 * contain NUL bytes); string *values* are pointer + length (not terminated,
 * may contain NUL). Multi-byte values in the map are little-endian and may be
 * unaligned: read them through the getters, never by casting pointers.
 * Opening touches only the header pages: tensor data is never read.
 *
 * Writer: gguf_writer_open() starts a temporary next to the target; KVs are
 * added (kept in insertion order), then tensor infos, then the tensor data is
 * streamed in the order the infos were added; gguf_writer_finish() fsyncs and
 * renames. Layout and padding match llama.cpp (ggml gguf.cpp / gguf-py), so a
 * file they wrote and copied through reader -> writer comes out byte for byte.
 */
#ifndef MF_GGUF_H
#define MF_GGUF_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "ggml_type.h"

/* ---- format constants (ggml/docs/gguf.md) ---- */

#define GGUF_MAGIC 0x46554747u    /* "GGUF" read as a little-endian u32 */
#define GGUF_VERSION 3            /* what the writer produces */
#define GGUF_DEFAULT_ALIGNMENT 32 /* when general.alignment is absent */
#define GGUF_MAX_DIMS 4           /* GGML_MAX_DIMS */
#define GGUF_MAX_NAME 64          /* tensor names are < 64 bytes (GGML_MAX_NAME) */
#define GGUF_MAX_KEY 65535        /* keys are at most 2^16-1 bytes (spec) */
#define GGUF_MAX_DEPTH 8          /* arrays of arrays nest at most this deep */

/* KV value types; on-disk values, never change (gguf.h enum gguf_type). */
enum gguf_vtype {
    GGUF_TYPE_UINT8 = 0,
    GGUF_TYPE_INT8 = 1,
    GGUF_TYPE_UINT16 = 2,
    GGUF_TYPE_INT16 = 3,
    GGUF_TYPE_UINT32 = 4,
    GGUF_TYPE_INT32 = 5,
    GGUF_TYPE_FLOAT32 = 6,
    GGUF_TYPE_BOOL = 7,
    GGUF_TYPE_STRING = 8,
    GGUF_TYPE_ARRAY = 9,
    GGUF_TYPE_UINT64 = 10,
    GGUF_TYPE_INT64 = 11,
    GGUF_TYPE_FLOAT64 = 12,
    GGUF_TYPE_COUNT = 13, /* one past the largest type */
};

/* "u32", "string", "array", ...; "?" for an unknown type. */
const char *gguf_type_name(uint32_t type);

/* Bytes of one value of a fixed-size type; 0 for STRING, ARRAY and unknown. */
size_t gguf_type_size(uint32_t type);

/* ---- views into an open file ---- */

/* A string value: borrowed, points into the map; not NUL-terminated. */
struct gguf_str {
    const char *p; /* borrowed: first byte (never NULL, even when len is 0) */
    uint64_t len;  /* bytes */
};

/* An array value. Fixed-size elements lie at data + i*gguf_type_size(type);
 * STRING and ARRAY elements are found through an index built at open. */
struct gguf_array {
    uint32_t type;                /* element type (enum gguf_vtype) */
    uint64_t n;                   /* number of elements */
    const uint8_t *data;          /* borrowed: first element's bytes in the map */
    uint64_t size;                /* bytes of all elements as encoded */
    const uint64_t *offs;         /* owned by the file: STRING/ARRAY element i starts at
                                     data + offs[i]; NULL for fixed-size elements */
    const struct gguf_array *sub; /* owned by the file: the n nested arrays when
                                     type is ARRAY, else NULL */
};

/* One metadata key/value pair. */
struct gguf_kv {
    const char *key;       /* owned by the file: NUL-terminated copy */
    uint32_t key_len;      /* bytes, excluding the NUL */
    uint32_t type;         /* enum gguf_vtype */
    uint64_t offset;       /* file offset where this KV (its key length) starts */
    const uint8_t *val;    /* borrowed: the encoded value (after the type field) */
    uint64_t val_size;     /* bytes of the encoded value */
    struct gguf_array arr; /* the value when type == GGUF_TYPE_ARRAY, else zero */
};

/* One tensor info. ne[] is in ggml order: ne[0] is the contiguous dimension
 * (a torch [out, in] weight has ne = {in, out}); unused dims are 1. */
struct gguf_tensor {
    const char *name;           /* owned by the file: NUL-terminated copy, < 64 bytes */
    uint32_t type;              /* enum ggml_type, valid */
    uint32_t n_dims;            /* 0..4 as stored */
    uint64_t ne[GGUF_MAX_DIMS]; /* elements per dimension, each <= INT64_MAX */
    uint64_t n_elements;        /* product of ne[] (checked, < 2^63) */
    uint64_t n_bytes;           /* bytes of data: ggml_type_row_size(ne0) * ne1*ne2*ne3 */
    uint64_t offset;            /* from the start of the data section; aligned */
    uint64_t file_offset;       /* absolute: data_offset + offset */
    uint64_t info_offset;       /* file offset of this tensor info (for messages) */
    const void *data;           /* borrowed: points into the map; pages are only read
                                   when the caller touches them */
};

struct gguf_file; /* opaque; one open, validated GGUF */

/* ---- open and close ---- */

/* Maps path (read-only, MAP_PRIVATE) and validates it as described above.
 * Returns 0 with *out owning the file, or a negative MF_E* code with err
 * filled and *out set to NULL: MF_EIO (open/stat/mmap failed), MF_EFORMAT
 * (malformed, truncated, byte-swapped, invalid), MF_EUNSUPPORTED (version 1
 * or > 3), MF_ENOMEM. */
int gguf_open(const char *path, struct gguf_file **out, struct mf_err *err);

/* Same validation over size bytes at data, which stay owned by the caller
 * and must outlive the file. name is used in messages (copied). */
int gguf_open_mem(const void *data, size_t size, const char *name, struct gguf_file **out,
                  struct mf_err *err);

/* Same as gguf_open over size bytes of path starting at offset (size 0:
 * to the end of the file), e.g. a GGUF inside an uncompressed tar layer:
 * only that range is mapped (from the page below offset), in place. MF_ERANGE
 * when offset + size lies past the end of the file, naming both numbers. */
int gguf_open_range(const char *path, uint64_t offset, uint64_t size, struct gguf_file **out,
                    struct mf_err *err);

/* Unmaps and frees everything; every pointer obtained from gf dies. Accepts NULL. */
void gguf_close(struct gguf_file *gf);

/* ---- file-level facts ---- */

const char *gguf_name(const struct gguf_file *gf);   /* path or name given at open */
uint32_t gguf_version(const struct gguf_file *gf);   /* 2 or 3 */
uint64_t gguf_file_size(const struct gguf_file *gf); /* bytes */
uint32_t gguf_alignment(const struct gguf_file *gf); /* general.alignment or 32 */
/* Offset of the data section (end of the tensor infos rounded up to the
 * alignment). May exceed the file size when there are no tensors. */
uint64_t gguf_data_offset(const struct gguf_file *gf);
/* Borrowed: the whole mapped file (gguf_file_size bytes). */
const uint8_t *gguf_base(const struct gguf_file *gf);

/* ---- metadata ---- */

uint64_t gguf_n_kv(const struct gguf_file *gf);
/* The i-th KV in file order; i < gguf_n_kv (asserted). Borrowed from gf. */
const struct gguf_kv *gguf_kv_at(const struct gguf_file *gf, uint64_t i);
/* The KV named key, or NULL. Hash lookup, O(1) expected. Borrowed from gf. */
const struct gguf_kv *gguf_find_kv(const struct gguf_file *gf, const char *key);

/*
 * Typed getters by key. Each returns 0 and stores the value, MF_ENOTFOUND
 * when the key is absent, or MF_EFORMAT when its type does not convert; out
 * is untouched on failure and err names the file, key and type. Conversions:
 *   u32/i32/u64/i64: any integer type (u8..i64) whose value fits the target;
 *       no floats, no bools (a u64 of 2^40 asked as u32 is MF_ERANGE).
 *   f32/f64: FLOAT32 or FLOAT64 (f64 narrowed to the nearest f32), or any
 *       integer type (converted as by C).
 *   bool: BOOL only (any nonzero byte is true).
 *   str: STRING only; borrowed view into the map.
 *   arr: ARRAY only; borrowed view. Element types are checked by the caller
 *       (see gguf_arr_* below).
 */
int gguf_get_u32(const struct gguf_file *gf, const char *key, uint32_t *out, struct mf_err *err);
int gguf_get_i32(const struct gguf_file *gf, const char *key, int32_t *out, struct mf_err *err);
int gguf_get_u64(const struct gguf_file *gf, const char *key, uint64_t *out, struct mf_err *err);
int gguf_get_i64(const struct gguf_file *gf, const char *key, int64_t *out, struct mf_err *err);
int gguf_get_f32(const struct gguf_file *gf, const char *key, float *out, struct mf_err *err);
int gguf_get_f64(const struct gguf_file *gf, const char *key, double *out, struct mf_err *err);
int gguf_get_bool(const struct gguf_file *gf, const char *key, int *out, struct mf_err *err);
int gguf_get_str(const struct gguf_file *gf, const char *key, struct gguf_str *out,
                 struct mf_err *err);
int gguf_get_arr(const struct gguf_file *gf, const char *key, const struct gguf_array **out,
                 struct mf_err *err);

/* The same conversions on a KV already found (errors name kv->key). */
int gguf_kv_u64(const struct gguf_file *gf, const struct gguf_kv *kv, uint64_t *out,
                struct mf_err *err);
int gguf_kv_i64(const struct gguf_file *gf, const struct gguf_kv *kv, int64_t *out,
                struct mf_err *err);
int gguf_kv_f64(const struct gguf_file *gf, const struct gguf_kv *kv, double *out,
                struct mf_err *err);

/*
 * Array elements, decoded from the map without copying the array. The caller
 * checks a->type first; i < a->n and a matching type are asserted (they are
 * programmer errors, not file errors, since a->type and a->n are validated):
 *   gguf_arr_int: any integer or BOOL element type, widened to int64 (a u64
 *       above INT64_MAX comes back as-is bit for bit; use gguf_arr_u64).
 *   gguf_arr_u64: any integer or BOOL element type, as uint64.
 *   gguf_arr_f64: FLOAT32 or FLOAT64 elements.
 *   gguf_arr_f32: FLOAT32 elements (the fast path for token scores).
 *   gguf_arr_str: STRING elements, borrowed view into the map.
 *   gguf_arr_sub: ARRAY elements, the nested array (borrowed from the file).
 */
int64_t gguf_arr_int(const struct gguf_array *a, uint64_t i);
uint64_t gguf_arr_u64(const struct gguf_array *a, uint64_t i);
double gguf_arr_f64(const struct gguf_array *a, uint64_t i);
float gguf_arr_f32(const struct gguf_array *a, uint64_t i);
struct gguf_str gguf_arr_str(const struct gguf_array *a, uint64_t i);
const struct gguf_array *gguf_arr_sub(const struct gguf_array *a, uint64_t i);

/* 1 if s holds exactly the bytes of the C string z. */
int gguf_str_eq(struct gguf_str s, const char *z);
/* A malloc'd NUL-terminated copy of s (the caller frees it), or NULL when
 * allocation fails or s contains a NUL byte. */
char *gguf_str_dup(struct gguf_str s);

/* ---- tensors ---- */

uint64_t gguf_n_tensors(const struct gguf_file *gf);
/* The i-th tensor info in file order; i < gguf_n_tensors (asserted). */
const struct gguf_tensor *gguf_tensor_at(const struct gguf_file *gf, uint64_t i);
/* The tensor named name, or NULL. Hash lookup. Borrowed from gf. */
const struct gguf_tensor *gguf_find_tensor(const struct gguf_file *gf, const char *name);

/* ---- writer ----
 *
 * States:  OPEN --gguf_writer_add_* / add_tensor--> OPEN   (KVs and infos may
 *                                                         interleave; KV order
 *                                                         and tensor order kept)
 *          OPEN --gguf_writer_write (1st)---------> DATA   (header goes out)
 *          DATA --gguf_writer_write---------------> DATA
 *          OPEN/DATA --gguf_writer_finish---------> DONE   (committed)
 *          any  --gguf_writer_free----------------> gone   (temp removed unless DONE)
 * Any failure puts the writer in FAILED and removes the temporary at once:
 * later calls return MF_EINVAL, and a failed write leaves nothing at path.
 * KVs and infos are held in memory (a 128k-token vocabulary is a few MB);
 * tensor data goes straight to the file.
 */
struct gguf_writer; /* opaque */

/* Starts writing path (through a temporary in the same directory). */
int gguf_writer_open(const char *path, struct gguf_writer **out, struct mf_err *err);

/* Scalar KVs. Keys must be non-empty, NUL-free, <= GGUF_MAX_KEY bytes and
 * unique (MF_EEXIST). general.alignment must be added with
 * gguf_writer_add_u32 and be a power of two; it sets the data alignment. */
int gguf_writer_add_u8(struct gguf_writer *w, const char *key, uint8_t v, struct mf_err *err);
int gguf_writer_add_i8(struct gguf_writer *w, const char *key, int8_t v, struct mf_err *err);
int gguf_writer_add_u16(struct gguf_writer *w, const char *key, uint16_t v, struct mf_err *err);
int gguf_writer_add_i16(struct gguf_writer *w, const char *key, int16_t v, struct mf_err *err);
int gguf_writer_add_u32(struct gguf_writer *w, const char *key, uint32_t v, struct mf_err *err);
int gguf_writer_add_i32(struct gguf_writer *w, const char *key, int32_t v, struct mf_err *err);
int gguf_writer_add_u64(struct gguf_writer *w, const char *key, uint64_t v, struct mf_err *err);
int gguf_writer_add_i64(struct gguf_writer *w, const char *key, int64_t v, struct mf_err *err);
int gguf_writer_add_f32(struct gguf_writer *w, const char *key, float v, struct mf_err *err);
int gguf_writer_add_f64(struct gguf_writer *w, const char *key, double v, struct mf_err *err);
int gguf_writer_add_bool(struct gguf_writer *w, const char *key, int v, struct mf_err *err);
/* A string of len bytes (may contain NUL); gguf_writer_add_cstr takes a C string. */
int gguf_writer_add_str(struct gguf_writer *w, const char *key, const char *s, uint64_t len,
                        struct mf_err *err);
int gguf_writer_add_cstr(struct gguf_writer *w, const char *key, const char *s, struct mf_err *err);
/* An array of n fixed-size elements of type elem_type, given in host
 * representation (uint32_t[] for UINT32, float[] for FLOAT32, uint8_t 0/1
 * for BOOL, ...); they are written little-endian. STRING and ARRAY element
 * types are refused here (MF_EINVAL): use the two calls below. */
int gguf_writer_add_arr(struct gguf_writer *w, const char *key, uint32_t elem_type,
                        const void *elems, uint64_t n, struct mf_err *err);
/* An array of n strings. */
int gguf_writer_add_arr_str(struct gguf_writer *w, const char *key, const struct gguf_str *strs,
                            uint64_t n, struct mf_err *err);
/* A value already encoded as GGUF bytes (after the type field), e.g. an
 * array of arrays built by hand. It is parsed with the reader's rules first;
 * malformed bytes give MF_EFORMAT and add nothing. */
int gguf_writer_add_raw(struct gguf_writer *w, const char *key, uint32_t type, const void *val,
                        uint64_t size, struct mf_err *err);
/* Copies a KV from an open file unchanged (any type, nested arrays too). */
int gguf_writer_add_kv(struct gguf_writer *w, const struct gguf_kv *kv, struct mf_err *err);

/* Adds a tensor info: name (< 64 bytes, unique), type, n_dims (1..4) dims in
 * ggml order. ne[0] must be a multiple of the type's block size. Its data
 * offset is the previous tensor's end rounded up to the alignment. */
int gguf_writer_add_tensor(struct gguf_writer *w, const char *name, enum ggml_type type,
                           uint32_t n_dims, const uint64_t *ne, struct mf_err *err);
/* Bytes the data of tensor i will take (its n_bytes), for callers that stream. */
uint64_t gguf_writer_tensor_bytes(const struct gguf_writer *w, uint64_t i);

/* Streams n bytes of tensor data. The first call writes the header; data
 * fills the tensors in the order they were added, padding is inserted
 * between them; a call may span tensors. Writing more than the tensors hold
 * is MF_EINVAL. Call with n == 0 to emit the header of a file whose tensors
 * are all empty (finish does it too). */
int gguf_writer_write(struct gguf_writer *w, const void *p, size_t n, struct mf_err *err);

/* Checks that every tensor got all its bytes (MF_EINVAL naming the first
 * short one otherwise), writes the final padding, fsyncs and renames over the
 * target. On failure nothing is left at path (an old file there is kept).
 * The writer must still be freed. */
int gguf_writer_finish(struct gguf_writer *w, struct mf_err *err);

/* Releases the writer; removes the temporary unless finish succeeded.
 * Accepts NULL. */
void gguf_writer_free(struct gguf_writer *w);

#endif
