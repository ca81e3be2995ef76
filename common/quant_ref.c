/*
 * quant_ref.c: the portable codecs, a line-for-line port of ggml's
 * dequantize_row_* and quantize_row_*_ref (ggml/src/ggml-quants.c).
 *
 * Bit-exactness with ggml is the contract, so the arithmetic is ggml's,
 * operation for operation and in the same order: `d * sc * q` stays
 * (d*sc)*q, float sums accumulate in index order, rounding goes through
 * nearest_int's 1.5*2^23 trick (ties to even) where ggml uses it and through
 * roundf where ggml uses roundf. The build must not contract a*b+c into an
 * FMA (ISO C mode implies -ffp-contract=off for GCC; clang gets the pragma
 * below), because ggml's generic build never does.
 *
 * Owns no state. Blocks are read and written through the byte-array structs
 * of quant_int.h, so any alignment works.
 */
#include "quant_int.h"

#include <float.h>
#include <math.h>
#include <string.h>

#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif

#define GROUP_MAX_EPS 1e-15f /* ggml-quants.c: below this a group is all zero */

static inline int imin(int a, int b)
{
    return a < b ? a : b;
}

static inline int imax(int a, int b)
{
    return a > b ? a : b;
}

/* ---- plain floats ------------------------------------------------------- */

static void deq_f32(const void *src, float *dst, int64_t n)
{
    memcpy(dst, src, (size_t)n * sizeof(float));
}

static void deq_f16(const void *src, float *dst, int64_t n)
{
    const uint8_t *p = src;
    for (int64_t i = 0; i < n; i++)
        dst[i] = quant_f16_to_f32(quant_rd16(p + 2 * i));
}

static void deq_bf16(const void *src, float *dst, int64_t n)
{
    const uint8_t *p = src;
    for (int64_t i = 0; i < n; i++)
        dst[i] = quant_bf16_to_f32(quant_rd16(p + 2 * i));
}

static void q_f32(const float *src, void *dst, int64_t n)
{
    memcpy(dst, src, (size_t)n * sizeof(float));
}

static void q_f16(const float *src, void *dst, int64_t n)
{
    uint8_t *p = dst;
    for (int64_t i = 0; i < n; i++)
        quant_wr16(p + 2 * i, quant_f32_to_f16(src[i]));
}

static void q_bf16(const float *src, void *dst, int64_t n)
{
    uint8_t *p = dst;
    for (int64_t i = 0; i < n; i++)
        quant_wr16(p + 2 * i, quant_f32_to_bf16(src[i]));
}

/* ---- legacy 32-element blocks: dequantize ------------------------------ */

static void deq_q4_0(const void *src, float *y, int64_t n)
{
    const struct quant_blk_q4_0 *x = src;
    for (int64_t i = 0; i < n / QUANT_QK; i++, y += QUANT_QK) {
        const float d = quant_rdh(x[i].d);
        for (int j = 0; j < 16; j++) {
            y[j] = ((x[i].qs[j] & 0x0F) - 8) * d;
            y[j + 16] = ((x[i].qs[j] >> 4) - 8) * d;
        }
    }
}

static void deq_q4_1(const void *src, float *y, int64_t n)
{
    const struct quant_blk_q4_1 *x = src;
    for (int64_t i = 0; i < n / QUANT_QK; i++, y += QUANT_QK) {
        const float d = quant_rdh(x[i].d);
        const float m = quant_rdh(x[i].m);
        for (int j = 0; j < 16; j++) {
            y[j] = (x[i].qs[j] & 0x0F) * d + m;
            y[j + 16] = (x[i].qs[j] >> 4) * d + m;
        }
    }
}

static uint32_t rd32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void deq_q5_0(const void *src, float *y, int64_t n)
{
    const struct quant_blk_q5_0 *x = src;
    for (int64_t i = 0; i < n / QUANT_QK; i++, y += QUANT_QK) {
        const float d = quant_rdh(x[i].d);
        const uint32_t qh = rd32(x[i].qh);
        for (int j = 0; j < 16; j++) {
            const int h0 = (int)((qh >> j) << 4) & 0x10;
            const int h1 = (int)(qh >> (j + 12)) & 0x10;
            y[j] = (((x[i].qs[j] & 0x0F) | h0) - 16) * d;
            y[j + 16] = (((x[i].qs[j] >> 4) | h1) - 16) * d;
        }
    }
}

static void deq_q5_1(const void *src, float *y, int64_t n)
{
    const struct quant_blk_q5_1 *x = src;
    for (int64_t i = 0; i < n / QUANT_QK; i++, y += QUANT_QK) {
        const float d = quant_rdh(x[i].d);
        const float m = quant_rdh(x[i].m);
        const uint32_t qh = rd32(x[i].qh);
        for (int j = 0; j < 16; j++) {
            const int h0 = (int)((qh >> j) << 4) & 0x10;
            const int h1 = (int)(qh >> (j + 12)) & 0x10;
            y[j] = ((x[i].qs[j] & 0x0F) | h0) * d + m;
            y[j + 16] = ((x[i].qs[j] >> 4) | h1) * d + m;
        }
    }
}

static void deq_q8_0(const void *src, float *y, int64_t n)
{
    const struct quant_blk_q8_0 *x = src;
    for (int64_t i = 0; i < n / QUANT_QK; i++, y += QUANT_QK) {
        const float d = quant_rdh(x[i].d);
        for (int j = 0; j < QUANT_QK; j++)
            y[j] = (int8_t)x[i].qs[j] * d;
    }
}

/* ---- MXFP4: 32 E2M1 codes under one E8M0 exponent ------------------------ */

const int8_t quant_mxfp4_values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

static void deq_mxfp4(const void *src, float *y, int64_t n)
{
    const struct quant_blk_mxfp4 *x = src;
    for (int64_t i = 0; i < n / QUANT_QK; i++, y += QUANT_QK) {
        const float d = quant_e8m0_half(x[i].e);
        for (int j = 0; j < 16; j++) {
            y[j] = quant_mxfp4_values[x[i].qs[j] & 0x0F] * d;
            y[j + 16] = quant_mxfp4_values[x[i].qs[j] >> 4] * d;
        }
    }
}

/* ---- K-quants: dequantize ------------------------------------------------ */

static void deq_q2_K(const void *src, float *y, int64_t n)
{
    const struct quant_blk_q2_K *x = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = quant_rdh(x[i].d);
        const float min = quant_rdh(x[i].dmin);
        const uint8_t *q = x[i].qs;
        int is = 0;
        for (int c = 0; c < QK_K; c += 128, q += 32) {
            for (int shift = 0; shift < 8; shift += 2) {
                for (int half = 0; half < 2; half++) {
                    const uint8_t sc = x[i].scales[is++];
                    const float dl = d * (sc & 0xF);
                    const float ml = min * (sc >> 4);
                    for (int l = 0; l < 16; l++)
                        *y++ = dl * ((q[l + 16 * half] >> shift) & 3) - ml;
                }
            }
        }
    }
}

void quant_q3_K_scales(const uint8_t packed[12], int8_t out[16])
{
    for (int j = 0; j < 16; j++) {
        int lo = j < 8 ? packed[j] & 0xF : packed[j - 8] >> 4;
        int hi = (packed[8 + j % 4] >> (2 * (j / 4))) & 3;
        out[j] = (int8_t)(lo | (hi << 4));
    }
}

static void deq_q3_K(const void *src, float *y, int64_t n)
{
    const struct quant_blk_q3_K *x = src;
    int8_t scales[16];
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d_all = quant_rdh(x[i].d);
        const uint8_t *q = x[i].qs;
        const uint8_t *hm = x[i].hmask;
        uint8_t m = 1;
        int is = 0;
        quant_q3_K_scales(x[i].scales, scales);
        for (int c = 0; c < QK_K; c += 128, q += 32) {
            for (int shift = 0; shift < 8; shift += 2, m = (uint8_t)(m << 1)) {
                for (int half = 0; half < 2; half++) {
                    const float dl = d_all * (scales[is++] - 32);
                    for (int l = 16 * half; l < 16 * half + 16; l++)
                        *y++ = dl * (((q[l] >> shift) & 3) - ((hm[l] & m) ? 0 : 4));
                }
            }
        }
    }
}

static void deq_q4_K(const void *src, float *y, int64_t n)
{
    const struct quant_blk_q4_K *x = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const uint8_t *q = x[i].qs;
        const float d = quant_rdh(x[i].d);
        const float min = quant_rdh(x[i].dmin);
        float d1, m1, d2, m2;
        for (int is = 0; is < 8; is += 2, q += 32) {
            quant_k4_factors(is, x[i].scales, d, min, &d1, &m1);
            quant_k4_factors(is + 1, x[i].scales, d, min, &d2, &m2);
            for (int l = 0; l < 32; l++)
                *y++ = d1 * (q[l] & 0xF) - m1;
            for (int l = 0; l < 32; l++)
                *y++ = d2 * (q[l] >> 4) - m2;
        }
    }
}

static void deq_q5_K(const void *src, float *y, int64_t n)
{
    const struct quant_blk_q5_K *x = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const uint8_t *ql = x[i].qs;
        const uint8_t *qh = x[i].qh;
        const float d = quant_rdh(x[i].d);
        const float min = quant_rdh(x[i].dmin);
        float d1, m1, d2, m2;
        uint8_t u1 = 1, u2 = 2;
        for (int is = 0; is < 8; is += 2, ql += 32) {
            quant_k4_factors(is, x[i].scales, d, min, &d1, &m1);
            quant_k4_factors(is + 1, x[i].scales, d, min, &d2, &m2);
            for (int l = 0; l < 32; l++)
                *y++ = d1 * ((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
            for (int l = 0; l < 32; l++)
                *y++ = d2 * ((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
            u1 = (uint8_t)(u1 << 2);
            u2 = (uint8_t)(u2 << 2);
        }
    }
}

static void deq_q6_K(const void *src, float *y, int64_t n)
{
    const struct quant_blk_q6_K *x = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = quant_rdh(x[i].d);
        const uint8_t *ql = x[i].ql;
        const uint8_t *qh = x[i].qh;
        const int8_t *sc = x[i].scales;
        for (int c = 0; c < QK_K; c += 128, y += 128, ql += 64, qh += 32, sc += 8) {
            for (int l = 0; l < 32; l++) {
                const int is = l / 16;
                const int q1 = ((ql[l] & 0xF) | ((qh[l] & 3) << 4)) - 32;
                const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
                const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                y[l] = d * sc[is] * q1;
                y[l + 32] = d * sc[is + 2] * q2;
                y[l + 64] = d * sc[is + 4] * q3;
                y[l + 96] = d * sc[is + 6] * q4;
            }
        }
    }
}

/* ---- legacy 32-element blocks: quantize -------------------------------- */

/* The element of largest magnitude, sign kept (first one on ties), as
 * Q4_0/Q5_0 pick it. */
static float signed_absmax(const float *x, int n)
{
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < n; j++) {
        if (amax < fabsf(x[j])) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    }
    return max;
}

static void min_max(const float *x, int n, float *pmin, float *pmax)
{
    float min = FLT_MAX, max = -FLT_MAX;
    for (int j = 0; j < n; j++) {
        if (x[j] < min)
            min = x[j];
        if (x[j] > max)
            max = x[j];
    }
    *pmin = min;
    *pmax = max;
}

static void q_q4_0(const float *x, void *dst, int64_t n)
{
    struct quant_blk_q4_0 *y = dst;
    for (int64_t i = 0; i < n / QUANT_QK; i++, x += QUANT_QK) {
        const float d = signed_absmax(x, QUANT_QK) / -8;
        const float id = d ? 1.0f / d : 0.0f;
        quant_wr16(y[i].d, quant_f32_to_f16(d));
        for (int j = 0; j < 16; j++) {
            /* (int8_t) then MIN, as ggml: values lie in [0.5, 16.5] */
            const int x0 = imin(15, (int8_t)(x[j] * id + 8.5f));
            const int x1 = imin(15, (int8_t)(x[j + 16] * id + 8.5f));
            y[i].qs[j] = (uint8_t)(x0 | (x1 << 4));
        }
    }
}

static void q_q4_1(const float *x, void *dst, int64_t n)
{
    struct quant_blk_q4_1 *y = dst;
    for (int64_t i = 0; i < n / QUANT_QK; i++, x += QUANT_QK) {
        float min, max;
        min_max(x, QUANT_QK, &min, &max);
        const float d = (max - min) / 15;
        const float id = d ? 1.0f / d : 0.0f;
        quant_wr16(y[i].d, quant_f32_to_f16(d));
        quant_wr16(y[i].m, quant_f32_to_f16(min));
        for (int j = 0; j < 16; j++) {
            const int x0 = imin(15, (int8_t)((x[j] - min) * id + 0.5f));
            const int x1 = imin(15, (int8_t)((x[j + 16] - min) * id + 0.5f));
            y[i].qs[j] = (uint8_t)(x0 | (x1 << 4));
        }
    }
}

/* Packs 32 five-bit values into Q5's low nibbles and qh bits. */
static void pack_q5(const uint8_t v[32], uint8_t qs[16], uint8_t qh_out[4])
{
    uint32_t qh = 0;
    for (int j = 0; j < 16; j++) {
        qs[j] = (uint8_t)((v[j] & 0x0F) | ((v[j + 16] & 0x0F) << 4));
        qh |= ((v[j] & 0x10u) >> 4) << j;
        qh |= ((v[j + 16] & 0x10u) >> 4) << (j + 16);
    }
    for (int b = 0; b < 4; b++)
        qh_out[b] = (uint8_t)(qh >> (8 * b));
}

static void q_q5_0(const float *x, void *dst, int64_t n)
{
    struct quant_blk_q5_0 *y = dst;
    uint8_t v[QUANT_QK];
    for (int64_t i = 0; i < n / QUANT_QK; i++, x += QUANT_QK) {
        const float d = signed_absmax(x, QUANT_QK) / -16;
        const float id = d ? 1.0f / d : 0.0f;
        quant_wr16(y[i].d, quant_f32_to_f16(d));
        for (int j = 0; j < QUANT_QK; j++)
            v[j] = (uint8_t)imin(31, (int8_t)(x[j] * id + 16.5f));
        pack_q5(v, y[i].qs, y[i].qh);
    }
}

static void q_q5_1(const float *x, void *dst, int64_t n)
{
    struct quant_blk_q5_1 *y = dst;
    uint8_t v[QUANT_QK];
    for (int64_t i = 0; i < n / QUANT_QK; i++, x += QUANT_QK) {
        float min, max;
        min_max(x, QUANT_QK, &min, &max);
        const float d = (max - min) / 31;
        const float id = d ? 1.0f / d : 0.0f;
        quant_wr16(y[i].d, quant_f32_to_f16(d));
        quant_wr16(y[i].m, quant_f32_to_f16(min));
        for (int j = 0; j < QUANT_QK; j++)
            v[j] = (uint8_t)((x[j] - min) * id + 0.5f);
        pack_q5(v, y[i].qs, y[i].qh);
    }
}

static void q_q8_0(const float *x, void *dst, int64_t n)
{
    struct quant_blk_q8_0 *y = dst;
    for (int64_t i = 0; i < n / QUANT_QK; i++, x += QUANT_QK) {
        float amax = 0.0f;
        for (int j = 0; j < QUANT_QK; j++)
            amax = fmaxf(amax, fabsf(x[j]));
        const float d = amax / 127;
        const float id = d ? 1.0f / d : 0.0f;
        quant_wr16(y[i].d, quant_f32_to_f16(d));
        for (int j = 0; j < QUANT_QK; j++)
            y[i].qs[j] = (uint8_t)(int8_t)roundf(x[j] * id);
    }
}

/* ggml's best_index_mxfp4: the code whose value times d is nearest x, the
 * lowest code on ties (so +0 wins over -0). */
static int mxfp4_index(float x, float d)
{
    int best = 0;
    float best_err = fabsf(quant_mxfp4_values[0] * d - x);
    for (int i = 1; i < 16; i++) {
        float err = fabsf(quant_mxfp4_values[i] * d - x);
        if (err < best_err) {
            best = i;
            best_err = err;
        }
    }
    return best;
}

/* quantize_row_mxfp4_ref: the exponent puts the block's largest magnitude
 * in [4, 8) times half the scale, i.e. at or above the largest code 6 (it
 * rounds down rather than up, as ggml does). ggml converts the float
 * exponent straight to uint8_t; on x86 that truncates to a 32-bit integer
 * and keeps its low byte, which is what the explicit steps below do without
 * undefined behaviour (below 2^-125 the byte wraps, an infinite block gets
 * 0, as there). */
static void q_mxfp4(const float *x, void *dst, int64_t n)
{
    struct quant_blk_mxfp4 *y = dst;
    for (int64_t i = 0; i < n / QUANT_QK; i++, x += QUANT_QK) {
        float amax = 0.0f;
        for (int j = 0; j < QUANT_QK; j++)
            if (amax < fabsf(x[j]))
                amax = fabsf(x[j]);
        uint8_t e = 0;
        if (amax > 0.0f) {
            const float ef = floorf(log2f(amax)) - 2 + 127;
            const int32_t ie = ef > -2147483648.0f && ef < 2147483648.0f ? (int32_t)ef : INT32_MIN;
            e = (uint8_t)(uint32_t)ie;
        }
        const float d = quant_e8m0_half(e);
        y[i].e = e;
        for (int j = 0; j < 16; j++)
            y[i].qs[j] = (uint8_t)(mxfp4_index(x[j], d) | mxfp4_index(x[j + 16], d) << 4);
    }
}

/* ---- K-quant helpers (ggml-quants.c "Helper functions") ----------------- */

/* Round to nearest, ties to even, for |fval| <= 4194303: adding 1.5*2^23
 * leaves the integer in the low mantissa bits. */
static inline int nearest_int(float fval)
{
    float val = fval + 12582912.f;
    int32_t i;
    memcpy(&i, &val, sizeof i);
    return (i & 0x007fffff) - 0x00400000;
}

/* ggml's weight of element x for make_qx_quants' rmse_type (qw == NULL). */
static inline float qx_weight(int rmse_type, float x)
{
    switch (rmse_type) {
    case 1:
        return x * x;
    case 2:
        return 1;
    case 3:
        return fabsf(x);
    default:
        return sqrtf(fabsf(x));
    }
}

/* Sums of w*x*l and w*l*l for scale iscale (make_qx_quants' inner loop);
 * stores the levels in L when L is not NULL. */
static void qx_sums(int n, int nmax, const float *x, float iscale, int rmse_type, int8_t *L,
                    float *psumlx, float *psuml2)
{
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; ++i) {
        int l = nearest_int(iscale * x[i]);
        l = imax(-nmax, imin(nmax - 1, l));
        if (L)
            L[i] = (int8_t)(l + nmax);
        float w = qx_weight(rmse_type, x[i]);
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    *psumlx = sumlx;
    *psuml2 = suml2;
}

/* make_qx_quants with qw == NULL and rmse_type > 0 (all Q6_K needs): the
 * symmetric scale over 19 trial scales that best fits x, levels into L. */
static float make_qx_quants(int n, int nmax, const float *x, int8_t *L, int rmse_type)
{
    const float max = signed_absmax(x, n);
    if (fabsf(max) < GROUP_MAX_EPS) {
        memset(L, 0, (size_t)n);
        return 0.f;
    }
    float iscale = -nmax / max;
    float sumlx, suml2;
    qx_sums(n, nmax, x, iscale, rmse_type, L, &sumlx, &suml2);
    float scale = suml2 ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; ++is) {
        if (is == 0)
            continue;
        iscale = -(nmax + 0.1f * is) / max;
        qx_sums(n, nmax, x, iscale, rmse_type, NULL, &sumlx, &suml2);
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; ++i) {
                int l = nearest_int(iscale * x[i]);
                L[i] = (int8_t)(nmax + imax(-nmax, imin(nmax - 1, l)));
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

/* make_q3_quants with do_rmse (Q3_K): a symmetric scale refined by moving
 * single levels while that lowers the weighted error; levels into L. */
static float make_q3_quants(int n, int nmax, const float *x, int8_t *L)
{
    const float max = signed_absmax(x, n);
    if (fabsf(max) < GROUP_MAX_EPS) {
        memset(L, 0, (size_t)n);
        return 0.f;
    }
    const float iscale = -nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; ++i) {
        int l = nearest_int(iscale * x[i]);
        l = imax(-nmax, imin(nmax - 1, l));
        L[i] = (int8_t)l;
        float w = x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    for (int itry = 0; itry < 5; ++itry) {
        int n_changed = 0;
        for (int i = 0; i < n; ++i) {
            float w = x[i] * x[i];
            float slx = sumlx - w * x[i] * L[i];
            if (slx > 0) {
                float sl2 = suml2 - w * L[i] * L[i];
                int new_l = nearest_int(x[i] * sl2 / slx);
                new_l = imax(-nmax, imin(nmax - 1, new_l));
                if (new_l != L[i]) {
                    slx += w * x[i] * new_l;
                    sl2 += w * new_l * new_l;
                    if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = (int8_t)new_l;
                        sumlx = slx;
                        suml2 = sl2;
                        ++n_changed;
                    }
                }
            }
        }
        if (!n_changed)
            break;
    }
    for (int i = 0; i < n; ++i)
        L[i] = (int8_t)(L[i] + nmax);
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

/* Search parameters of make_qkx2_quants. */
struct qkx2_params {
    int nmax;     /* largest level */
    float rmin;   /* first trial offset of nmax */
    float rdelta; /* step between trials */
    int nstep;    /* trials - 1 */
    int use_mad;  /* 1: absolute error, 0: squared */
};

/* Weighted error of levels L against x for scale and min. */
static float qkx2_error(int n, const float *x, const float *w, const uint8_t *L, float scale,
                        float min, int use_mad)
{
    float err = 0;
    for (int i = 0; i < n; ++i) {
        float diff = scale * L[i] + min - x[i];
        diff = use_mad ? fabsf(diff) : diff * diff;
        err += w[i] * diff;
    }
    return err;
}

/* make_qkx2_quants: an affine fit x ~ scale*L + min (min <= 0) over
 * nstep+1 trial scales; returns scale, levels in L, -min in *the_min. */
static float make_qkx2_quants(int n, const float *x, const float *weights, uint8_t *L,
                              float *the_min, const struct qkx2_params *p)
{
    float min = x[0], max = x[0];
    float sum_w = weights[0];
    float sum_x = sum_w * x[0];
    for (int i = 1; i < n; ++i) {
        if (x[i] < min)
            min = x[i];
        if (x[i] > max)
            max = x[i];
        float w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if (min > 0)
        min = 0;
    if (max == min) {
        memset(L, 0, (size_t)n);
        *the_min = -min;
        return 0.f;
    }
    float iscale = p->nmax / (max - min);
    float scale = 1 / iscale;
    for (int i = 0; i < n; ++i) {
        int l = nearest_int(iscale * (x[i] - min));
        L[i] = (uint8_t)imax(0, imin(p->nmax, l));
    }
    float best_error = qkx2_error(n, x, weights, L, scale, min, p->use_mad);
    uint8_t Laux[32];
    for (int is = 0; is <= p->nstep; ++is) {
        iscale = (p->rmin + p->rdelta * is + p->nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; ++i) {
            int l = nearest_int(iscale * (x[i] - min));
            l = imax(0, imin(p->nmax, l));
            Laux[i] = (uint8_t)l;
            float w = weights[i];
            sum_l += w * l;
            sum_l2 += w * l * l;
            sum_xl += w * l * x[i];
        }
        float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
            float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (this_min > 0) {
                this_min = 0;
                this_scale = sum_xl / sum_l2;
            }
            float cur_error = qkx2_error(n, x, weights, Laux, this_scale, this_min, p->use_mad);
            if (cur_error < best_error) {
                memcpy(L, Laux, (size_t)n);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *the_min = -min;
    return scale;
}

/* ---- K-quants: quantize -------------------------------------------------- */

/* The final levels of one 16-element group of Q3_K/Q6_K against its
 * rounded scale d: symmetric, -nmax..nmax-1, stored biased by nmax. A zero
 * scale leaves L as the search left it, as ggml does. */
static void group_levels(const float *x, float d, int nmax, int8_t *L)
{
    if (!d)
        return;
    for (int ii = 0; ii < 16; ++ii) {
        int l = nearest_int(x[ii] / d);
        L[ii] = (int8_t)(imax(-nmax, imin(nmax - 1, l)) + nmax);
    }
}

static void q_q2_K(const float *x, void *dst, int64_t n)
{
    static const struct qkx2_params prm = {3, -0.5f, 0.1f, 15, 1};
    const float q4scale = 15.f;
    struct quant_blk_q2_K *y = dst;
    uint8_t L[QK_K];
    float weights[16], mins[QK_K / 16], scales[QK_K / 16];

    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        float max_scale = 0, max_min = 0;
        for (int j = 0; j < QK_K / 16; ++j) {
            for (int l = 0; l < 16; ++l)
                weights[l] = fabsf(x[16 * j + l]);
            scales[j] = make_qkx2_quants(16, x + 16 * j, weights, L + 16 * j, &mins[j], &prm);
            if (scales[j] > max_scale)
                max_scale = scales[j];
            if (mins[j] > max_min)
                max_min = mins[j];
        }
        if (max_scale > 0) {
            float iscale = q4scale / max_scale;
            for (int j = 0; j < QK_K / 16; ++j)
                y[i].scales[j] = (uint8_t)nearest_int(iscale * scales[j]);
            quant_wr16(y[i].d, quant_f32_to_f16(max_scale / q4scale));
        } else {
            memset(y[i].scales, 0, sizeof y[i].scales);
            quant_wr16(y[i].d, quant_f32_to_f16(0.f));
        }
        if (max_min > 0) {
            float iscale = q4scale / max_min;
            for (int j = 0; j < QK_K / 16; ++j)
                y[i].scales[j] |= (uint8_t)(nearest_int(iscale * mins[j]) << 4);
            quant_wr16(y[i].dmin, quant_f32_to_f16(max_min / q4scale));
        } else {
            quant_wr16(y[i].dmin, quant_f32_to_f16(0.f));
        }
        for (int j = 0; j < QK_K / 16; ++j) {
            const float d = quant_rdh(y[i].d) * (y[i].scales[j] & 0xF);
            if (!d)
                continue;
            const float dm = quant_rdh(y[i].dmin) * (y[i].scales[j] >> 4);
            for (int ii = 0; ii < 16; ++ii) {
                int l = nearest_int((x[16 * j + ii] + dm) / d);
                L[16 * j + ii] = (uint8_t)imax(0, imin(3, l));
            }
        }
        for (int j = 0; j < QK_K; j += 128)
            for (int l = 0; l < 32; ++l)
                y[i].qs[j / 4 + l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 2) |
                                               (L[j + l + 64] << 4) | (L[j + l + 96] << 6));
    }
}

/* Q3_K's 6-bit scales: packs sixteen biased scales, ggml's bit layout. */
static void pack_q3_K_scales(const float *scales, float iscale, uint8_t out[12])
{
    memset(out, 0, 12);
    for (int j = 0; j < QK_K / 16; ++j) {
        int8_t l = (int8_t)nearest_int(iscale * scales[j]);
        l = (int8_t)(imax(-32, imin(31, l)) + 32);
        if (j < 8)
            out[j] = l & 0xF;
        else
            out[j - 8] |= (uint8_t)((l & 0xF) << 4);
        l = (int8_t)(l >> 4);
        out[j % 4 + 8] |= (uint8_t)(l << (2 * (j / 4)));
    }
}

/* Q3_K's hmask and 2-bit planes from levels 0..7 (L is consumed). */
static void pack_q3_K_levels(int8_t *L, struct quant_blk_q3_K *y)
{
    memset(y->hmask, 0, sizeof y->hmask);
    int m = 0;
    uint8_t hm = 1;
    for (int j = 0; j < QK_K; ++j) {
        if (L[j] > 3) {
            y->hmask[m] |= hm;
            L[j] = (int8_t)(L[j] - 4);
        }
        if (++m == QK_K / 8) {
            m = 0;
            hm = (uint8_t)(hm << 1);
        }
    }
    for (int j = 0; j < QK_K; j += 128)
        for (int l = 0; l < 32; ++l)
            y->qs[j / 4 + l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) |
                                         (L[j + l + 96] << 6));
}

static void q_q3_K(const float *x, void *dst, int64_t n)
{
    struct quant_blk_q3_K *y = dst;
    int8_t L[QK_K], sc[16];
    float scales[QK_K / 16];

    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        float max_scale = 0, amax = 0;
        for (int j = 0; j < QK_K / 16; ++j) {
            scales[j] = make_q3_quants(16, 4, x + 16 * j, L + 16 * j);
            if (fabsf(scales[j]) > amax) {
                amax = fabsf(scales[j]);
                max_scale = scales[j];
            }
        }
        if (max_scale) {
            float iscale = -32.f / max_scale;
            pack_q3_K_scales(scales, iscale, y[i].scales);
            quant_wr16(y[i].d, quant_f32_to_f16(1 / iscale));
        } else {
            memset(y[i].scales, 0, sizeof y[i].scales);
            quant_wr16(y[i].d, quant_f32_to_f16(0.f));
        }
        quant_q3_K_scales(y[i].scales, sc);
        for (int j = 0; j < QK_K / 16; ++j)
            group_levels(x + 16 * j, quant_rdh(y[i].d) * (sc[j] - 32), 4, L + 16 * j);
        pack_q3_K_levels(L, &y[i]);
    }
}

/* Q4_K/Q5_K's eight scales and mins: 6 bits each, ggml's packing. */
static void pack_k4_scales(const float *scales, const float *mins, float max_scale, float max_min,
                           uint8_t out[12])
{
    float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
    float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    for (int j = 0; j < QK_K / 32; ++j) {
        uint8_t ls = (uint8_t)nearest_int(inv_scale * scales[j]);
        uint8_t lm = (uint8_t)nearest_int(inv_min * mins[j]);
        ls = (uint8_t)imin(63, ls);
        lm = (uint8_t)imin(63, lm);
        if (j < 4) {
            out[j] = ls;
            out[j + 4] = lm;
        } else {
            out[j + 4] = (uint8_t)((ls & 0xF) | ((lm & 0xF) << 4));
            out[j - 4] |= (uint8_t)((ls >> 4) << 6);
            out[j] |= (uint8_t)((lm >> 4) << 6);
        }
    }
}

/* The shared first half of Q4_K and Q5_K: per 32-element sub-block an
 * affine fit with weights av_x + |x|, then the 6-bit packing of scales and
 * mins and the final levels (0..nmax) against the rounded scales. */
static void k4_block(const float *x, const struct qkx2_params *prm, uint8_t d_out[2],
                     uint8_t dmin_out[2], uint8_t scales_out[12], uint8_t L[QK_K])
{
    float weights[32], mins[QK_K / 32], scales[QK_K / 32];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < QK_K / 32; ++j) {
        float sum_x2 = 0;
        for (int l = 0; l < 32; ++l)
            sum_x2 += x[32 * j + l] * x[32 * j + l];
        float av_x = sqrtf(sum_x2 / 32);
        for (int l = 0; l < 32; ++l)
            weights[l] = av_x + fabsf(x[32 * j + l]);
        scales[j] = make_qkx2_quants(32, x + 32 * j, weights, L + 32 * j, &mins[j], prm);
        if (scales[j] > max_scale)
            max_scale = scales[j];
        if (mins[j] > max_min)
            max_min = mins[j];
    }
    pack_k4_scales(scales, mins, max_scale, max_min, scales_out);
    quant_wr16(d_out, quant_f32_to_f16(max_scale / 63.f));
    quant_wr16(dmin_out, quant_f32_to_f16(max_min / 63.f));

    uint8_t sc, m;
    for (int j = 0; j < QK_K / 32; ++j) {
        quant_scale_min_k4(j, scales_out, &sc, &m);
        const float d = quant_rdh(d_out) * sc;
        if (!d)
            continue;
        const float dm = quant_rdh(dmin_out) * m;
        for (int ii = 0; ii < 32; ++ii) {
            int l = nearest_int((x[32 * j + ii] + dm) / d);
            L[32 * j + ii] = (uint8_t)imax(0, imin(prm->nmax, l));
        }
    }
}

static void q_q4_K(const float *x, void *dst, int64_t n)
{
    static const struct qkx2_params prm = {15, -1.f, 0.1f, 20, 0};
    struct quant_blk_q4_K *y = dst;
    uint8_t L[QK_K];
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        k4_block(x, &prm, y[i].d, y[i].dmin, y[i].scales, L);
        uint8_t *q = y[i].qs;
        for (int j = 0; j < QK_K; j += 64, q += 32)
            for (int l = 0; l < 32; ++l)
                q[l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 4));
    }
}

static void q_q5_K(const float *x, void *dst, int64_t n)
{
    static const struct qkx2_params prm = {31, -0.5f, 0.1f, 15, 0};
    struct quant_blk_q5_K *y = dst;
    uint8_t L[QK_K];
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        k4_block(x, &prm, y[i].d, y[i].dmin, y[i].scales, L);
        uint8_t *qh = y[i].qh, *ql = y[i].qs;
        uint8_t m1 = 1, m2 = 2;
        memset(qh, 0, QK_K / 8);
        for (int c = 0; c < QK_K; c += 64, ql += 32) {
            for (int j = 0; j < 32; ++j) {
                int l1 = L[c + j], l2 = L[c + j + 32];
                if (l1 > 15) {
                    l1 -= 16;
                    qh[j] |= m1;
                }
                if (l2 > 15) {
                    l2 -= 16;
                    qh[j] |= m2;
                }
                ql[j] = (uint8_t)(l1 | (l2 << 4));
            }
            m1 = (uint8_t)(m1 << 2);
            m2 = (uint8_t)(m2 << 2);
        }
    }
}

/* Q6_K's planes: low nibbles of element pairs (l, l+64) share a byte. */
static void pack_q6_K(const int8_t *L, struct quant_blk_q6_K *y)
{
    uint8_t *ql = y->ql, *qh = y->qh;
    for (int j = 0; j < QK_K; j += 128, ql += 64, qh += 32) {
        for (int l = 0; l < 32; ++l) {
            const uint8_t q1 = L[j + l] & 0xF, q2 = L[j + l + 32] & 0xF;
            const uint8_t q3 = L[j + l + 64] & 0xF, q4 = L[j + l + 96] & 0xF;
            ql[l] = (uint8_t)(q1 | (q3 << 4));
            ql[l + 32] = (uint8_t)(q2 | (q4 << 4));
            qh[l] = (uint8_t)((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) |
                              ((L[j + l + 64] >> 4) << 4) | ((L[j + l + 96] >> 4) << 6));
        }
    }
}

static void q_q6_K(const float *x, void *dst, int64_t n)
{
    struct quant_blk_q6_K *y = dst;
    int8_t L[QK_K];
    float scales[QK_K / 16];
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        float max_scale = 0, max_abs_scale = 0;
        for (int ib = 0; ib < QK_K / 16; ++ib) {
            scales[ib] = make_qx_quants(16, 32, x + 16 * ib, L + 16 * ib, 1);
            if (fabsf(scales[ib]) > max_abs_scale) {
                max_abs_scale = fabsf(scales[ib]);
                max_scale = scales[ib];
            }
        }
        if (max_abs_scale < GROUP_MAX_EPS) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        float iscale = -128.f / max_scale;
        quant_wr16(y[i].d, quant_f32_to_f16(1 / iscale));
        for (int ib = 0; ib < QK_K / 16; ++ib)
            y[i].scales[ib] = (int8_t)imin(127, nearest_int(iscale * scales[ib]));
        for (int j = 0; j < QK_K / 16; ++j)
            group_levels(x + 16 * j, quant_rdh(y[i].d) * y[i].scales[j], 32, L + 16 * j);
        pack_q6_K(L, &y[i]);
    }
}

/* ---- tables -------------------------------------------------------------- */

const struct quant_ops quant_ops_scalar = {
    .isa = QUANT_ISA_SCALAR,
    .name = "scalar",
    .dequantize =
        {
            [GGML_TYPE_F32] = deq_f32,
            [GGML_TYPE_F16] = deq_f16,
            [GGML_TYPE_BF16] = deq_bf16,
            [GGML_TYPE_Q4_0] = deq_q4_0,
            [GGML_TYPE_Q4_1] = deq_q4_1,
            [GGML_TYPE_Q5_0] = deq_q5_0,
            [GGML_TYPE_Q5_1] = deq_q5_1,
            [GGML_TYPE_Q8_0] = deq_q8_0,
            [GGML_TYPE_Q2_K] = deq_q2_K,
            [GGML_TYPE_Q3_K] = deq_q3_K,
            [GGML_TYPE_Q4_K] = deq_q4_K,
            [GGML_TYPE_Q5_K] = deq_q5_K,
            [GGML_TYPE_Q6_K] = deq_q6_K,
            [GGML_TYPE_MXFP4] = deq_mxfp4,
        },
};

quant_quantize_fn *quant_ref_quantizer(enum ggml_type t)
{
    switch (t) {
    case GGML_TYPE_F32:
        return q_f32;
    case GGML_TYPE_F16:
        return q_f16;
    case GGML_TYPE_BF16:
        return q_bf16;
    case GGML_TYPE_Q4_0:
        return q_q4_0;
    case GGML_TYPE_Q4_1:
        return q_q4_1;
    case GGML_TYPE_Q5_0:
        return q_q5_0;
    case GGML_TYPE_Q5_1:
        return q_q5_1;
    case GGML_TYPE_Q8_0:
        return q_q8_0;
    case GGML_TYPE_Q2_K:
        return q_q2_K;
    case GGML_TYPE_Q3_K:
        return q_q3_K;
    case GGML_TYPE_Q4_K:
        return q_q4_K;
    case GGML_TYPE_Q5_K:
        return q_q5_K;
    case GGML_TYPE_Q6_K:
        return q_q6_K;
    case GGML_TYPE_MXFP4:
        return q_mxfp4;
    default:
        return NULL;
    }
}
