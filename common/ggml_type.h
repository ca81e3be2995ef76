/*
 * ggml_type.h: the tensor element types of GGUF files (ggml's type ids),
 * with their block geometry.
 *
 * The ids are on-disk values (ggml/docs/gguf.md) and must never change.
 * Ids that ggml has retired (4, 5, 31-33, 36-38) are not valid types.
 * A row of ne0 elements of a block type takes ne0 / block_size blocks of
 * type_size bytes; ne0 must be a multiple of the block size.
 */
#ifndef MF_GGML_TYPE_H
#define MF_GGML_TYPE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum ggml_type {
    GGML_TYPE_F32 = 0,
    GGML_TYPE_F16 = 1,
    GGML_TYPE_Q4_0 = 2,
    GGML_TYPE_Q4_1 = 3,
    GGML_TYPE_Q5_0 = 6,
    GGML_TYPE_Q5_1 = 7,
    GGML_TYPE_Q8_0 = 8,
    GGML_TYPE_Q8_1 = 9,
    GGML_TYPE_Q2_K = 10,
    GGML_TYPE_Q3_K = 11,
    GGML_TYPE_Q4_K = 12,
    GGML_TYPE_Q5_K = 13,
    GGML_TYPE_Q6_K = 14,
    GGML_TYPE_Q8_K = 15,
    GGML_TYPE_IQ2_XXS = 16,
    GGML_TYPE_IQ2_XS = 17,
    GGML_TYPE_IQ3_XXS = 18,
    GGML_TYPE_IQ1_S = 19,
    GGML_TYPE_IQ4_NL = 20,
    GGML_TYPE_IQ3_S = 21,
    GGML_TYPE_IQ2_S = 22,
    GGML_TYPE_IQ4_XS = 23,
    GGML_TYPE_I8 = 24,
    GGML_TYPE_I16 = 25,
    GGML_TYPE_I32 = 26,
    GGML_TYPE_I64 = 27,
    GGML_TYPE_F64 = 28,
    GGML_TYPE_IQ1_M = 29,
    GGML_TYPE_BF16 = 30,
    GGML_TYPE_TQ1_0 = 34,
    GGML_TYPE_TQ2_0 = 35,
    GGML_TYPE_MXFP4 = 39,
    GGML_TYPE_COUNT = 40, /* one past the largest id */
};

#define QK_K 256 /* elements per super-block of the K-quants */

/* 1 if id names a type ggml still defines (retired ids give 0). */
int ggml_type_valid(uint32_t id);

/* "F32", "Q4_K", ...; "?" for an invalid id. */
const char *ggml_type_name(uint32_t id);

/* Parses a name ("q4_k", "Q8_0", "bf16"; any case). Returns 0 and sets *t,
 * or -1 for an unknown name. */
int ggml_type_from_name(const char *name, enum ggml_type *t);

/* Elements per block (1 for plain types); 0 for an invalid id. */
uint32_t ggml_type_block_size(uint32_t id);

/* Bytes per block; 0 for an invalid id. */
uint32_t ggml_type_size(uint32_t id);

/* 1 for quantized (block) types, 0 for plain floats and integers. */
int ggml_type_is_quantized(uint32_t id);

/* Bytes taken by a row of ne0 elements in *bytes. Returns 0, or -1 when ne0
 * is not a multiple of the block size, the type is invalid, or the size
 * overflows; *bytes is untouched then. */
int ggml_type_row_size(uint32_t id, uint64_t ne0, uint64_t *bytes);

#ifdef __cplusplus
}
#endif

#endif
