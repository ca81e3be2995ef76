/*
 * quant_int.h: internals shared by the quant_*.c files and their tests.
 *
 * The block structs mirror ggml-common.h field for field, but every field is
 * a byte array: their alignment is 1 and they have no padding, so a pointer
 * into a GGUF mapping at any offset may be cast to them, and the fp16 scales
 * are read with quant_rd16 (little-endian, as GGUF stores them). Sizes are
 * checked against ggml_type.h by the unit tests.
 */
#ifndef MF_QUANT_INT_H
#define MF_QUANT_INT_H

#include <stdint.h>
#include <string.h>

#include "quant.h"

#define QUANT_QK 32 /* elements per block of the legacy types (Q4_0 ... Q8_0) */

struct quant_blk_q4_0 {
    uint8_t d[2];   /* fp16 scale */
    uint8_t qs[16]; /* element j in the low nibble of qs[j], j+16 in the high */
};

struct quant_blk_q4_1 {
    uint8_t d[2];   /* fp16 scale */
    uint8_t m[2];   /* fp16 minimum */
    uint8_t qs[16]; /* as q4_0 */
};

struct quant_blk_q5_0 {
    uint8_t d[2];   /* fp16 scale */
    uint8_t qh[4];  /* bit j: fifth bit of element j (little-endian u32) */
    uint8_t qs[16]; /* low four bits, as q4_0 */
};

struct quant_blk_q5_1 {
    uint8_t d[2];   /* fp16 scale */
    uint8_t m[2];   /* fp16 minimum */
    uint8_t qh[4];  /* as q5_0 */
    uint8_t qs[16]; /* as q5_0 */
};

struct quant_blk_q8_0 {
    uint8_t d[2];   /* fp16 scale */
    uint8_t qs[32]; /* int8 values */
};

struct quant_blk_mxfp4 {
    uint8_t e;      /* E8M0 shared exponent: the block scales by 2^(e - 127) */
    uint8_t qs[16]; /* E2M1 codes: element j in the low nibble of qs[j], j+16 in the high */
};

struct quant_blk_q2_K {
    uint8_t scales[16]; /* per 16 elements: low nibble scale, high nibble min */
    uint8_t qs[64];     /* 2-bit values, four 32-element planes per 128 */
    uint8_t d[2];       /* fp16 super-scale of the scales */
    uint8_t dmin[2];    /* fp16 super-scale of the mins */
};

struct quant_blk_q3_K {
    uint8_t hmask[32];  /* third bit; bit k of hmask[l] belongs to element 32k+l */
    uint8_t qs[64];     /* low 2 bits, laid out as q2_K */
    uint8_t scales[12]; /* sixteen 6-bit signed scales, packed */
    uint8_t d[2];       /* fp16 super-scale */
};

struct quant_blk_q4_K {
    uint8_t d[2];       /* fp16 super-scale of the scales */
    uint8_t dmin[2];    /* fp16 super-scale of the mins */
    uint8_t scales[12]; /* eight 6-bit scales and mins (get_scale_min_k4) */
    uint8_t qs[128];    /* per 64 elements: 32 bytes, low nibbles first */
};

struct quant_blk_q5_K {
    uint8_t d[2];       /* as q4_K */
    uint8_t dmin[2];    /* as q4_K */
    uint8_t scales[12]; /* as q4_K */
    uint8_t qh[32];     /* fifth bits; bit 2c / 2c+1 for chunk c's halves */
    uint8_t qs[128];    /* as q4_K */
};

struct quant_blk_q6_K {
    uint8_t ql[128];   /* low 4 bits */
    uint8_t qh[64];    /* high 2 bits */
    int8_t scales[16]; /* one signed scale per 16 elements */
    uint8_t d[2];      /* fp16 super-scale */
};

/* Reads the little-endian u16 at p (any alignment). */
static inline uint16_t quant_rd16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}

/* Stores v little-endian at p. */
static inline void quant_wr16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)(v & 0xff);
    p[1] = (uint8_t)(v >> 8);
}

/* The fp16 at p as a float. */
static inline float quant_rdh(const uint8_t *p)
{
    return quant_f16_to_f32(quant_rd16(p));
}

/* ggml's get_scale_min_k4: the 6-bit scale and min of sub-block j (0..7)
 * of a Q4_K/Q5_K block. */
static inline void quant_scale_min_k4(int j, const uint8_t *q, uint8_t *sc, uint8_t *m)
{
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

/* Sub-block j's factors in a Q4_K/Q5_K block: y = dj * q - mj, with
 * dj = d * scale and mj = dmin * min rounded to float first, as ggml does. */
static inline void quant_k4_factors(int j, const uint8_t *scales, float d, float dmin, float *dj,
                                    float *mj)
{
    uint8_t sc, m;
    quant_scale_min_k4(j, scales, &sc, &m);
    *dj = d * sc;
    *mj = dmin * m;
}

/* The E2M1 values of MXFP4's sixteen codes, doubled so that they are
 * integers (ggml's kvalues_mxfp4): 0, 0.5, 1, 1.5, 2, 3, 4, 6 and their
 * negatives, times two. */
extern const int8_t quant_mxfp4_values[16];

/* Half the E8M0 scale 2^(e - 127) (ggml_e8m0_to_fp32_half), which undoes
 * the doubling of quant_mxfp4_values: e 0 and 1 give the subnormals
 * 2^-128 and 2^-127, e 255 gives 2^127 (ggml has no NaN case). */
static inline float quant_e8m0_half(uint8_t e)
{
    uint32_t bits = e < 2 ? UINT32_C(0x00200000) << e : (uint32_t)(e - 1) << 23;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* Q3_K's sixteen scales unpacked from 12 bytes, still biased by 32. */
void quant_q3_K_scales(const uint8_t packed[12], int8_t out[16]);

/* The portable dequantizers and all quantizers (quant_ref.c). Each takes a
 * valid n (a multiple of its block size). */
extern const struct quant_ops quant_ops_scalar;

typedef void quant_quantize_fn(const float *src, void *dst, int64_t n);
/* The reference quantizer for t, or NULL. */
quant_quantize_fn *quant_ref_quantizer(enum ggml_type t);

/* The x86 tables (quant_x86.c): only the types with vector code are set,
 * and both are empty outside x86-64; quant.c lays them over the scalar one. */
extern const struct quant_ops quant_ops_avx2;
extern const struct quant_ops quant_ops_avx512;

#endif
