/*
 * blocks.cuh: GGUF block decoding on the device, shared by the kernels that
 * read weights in their file format (llama.cu's GEMV, embedding and
 * dequantization; moe.cu's grouped expert products).
 *
 * deq8<TY> decodes 8 consecutive elements of a row, bit-exact with
 * common/quant.h (products and differences rounded one at a time, never
 * contracted into an FMA); MFK_TYPE_SWITCH instantiates a template over the
 * types the kernels read; act<TY> rounds an activation as the CPU backend
 * feeds it to a weight of type TY. q4k_pair and ld16x4 are the pieces of the
 * Q4_K and Q6_K integer dot products on 8-bit inputs (the GEMV's q4k_step and
 * q6k_step, moe.cu's steps): a super-block's scale pair without a branch,
 * and 16 bytes at a 2-byte aligned address as four words.
 */
#ifndef MFC_KERNELS_BLOCKS_CUH
#define MFC_KERNELS_BLOCKS_CUH

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "common/ggml_type.h"

/* ------------------------------------------------------------------------
 * Block decoding (8 elements at a time)
 * ---------------------------------------------------------------------- */

__device__ __forceinline__ float h2f(uint16_t h)
{
    return __half2float(__ushort_as_half(h));
}

/* u - bias as a float for 0 <= u < 2^23, exactly, without the slow I2F
 * conversion: 2^23 + u is a float whose mantissa is u. */
__device__ __forceinline__ float u2f(uint32_t u, float bias)
{
    return __fsub_rn(__uint_as_float(0x4B000000u | u), 8388608.0f + bias);
}

__device__ __forceinline__ uint16_t ld16(const uint8_t *p)
{
    return *reinterpret_cast<const uint16_t *>(p);
}

/* ggml's get_scale_min_k4 */
__device__ __forceinline__ void scale_min_k4(int j, const uint8_t *q, int *sc, int *m)
{
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

template <int TY> __device__ __forceinline__ void deq8(const uint8_t *row, int64_t i, float v[8]);

template <>
__device__ __forceinline__ void deq8<GGML_TYPE_F32>(const uint8_t *row, int64_t i, float v[8])
{
    const float4 *p = reinterpret_cast<const float4 *>(row + 4 * i);
    float4 a = p[0], b = p[1];
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}

template <>
__device__ __forceinline__ void deq8<GGML_TYPE_F16>(const uint8_t *row, int64_t i, float v[8])
{
    uint4 u = *reinterpret_cast<const uint4 *>(row + 2 * i);
    uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int k = 0; k < 4; k++) {
        v[2 * k] = h2f((uint16_t)(w[k] & 0xFFFF));
        v[2 * k + 1] = h2f((uint16_t)(w[k] >> 16));
    }
}

template <>
__device__ __forceinline__ void deq8<GGML_TYPE_BF16>(const uint8_t *row, int64_t i, float v[8])
{
    uint4 u = *reinterpret_cast<const uint4 *>(row + 2 * i);
    uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int k = 0; k < 4; k++) {
        v[2 * k] = __uint_as_float(w[k] << 16);
        v[2 * k + 1] = __uint_as_float(w[k] & 0xFFFF0000u);
    }
}

/* Q8_0: 34-byte blocks {fp16 d, int8 qs[32]}: y = q * d */
template <>
__device__ __forceinline__ void deq8<GGML_TYPE_Q8_0>(const uint8_t *row, int64_t i, float v[8])
{
    const uint8_t *b = row + (i >> 5) * 34;
    const int o = (int)(i & 31);
    const float d = h2f(ld16(b));
#pragma unroll
    for (int k = 0; k < 4; k++) {
        uint16_t w = ld16(b + 2 + o + 2 * k);
        v[2 * k] = __fmul_rn(u2f((w & 0xFF) ^ 0x80, 128.0f), d);
        v[2 * k + 1] = __fmul_rn(u2f((uint32_t)(w >> 8) ^ 0x80, 128.0f), d);
    }
}

/* Q4_0: 18-byte blocks {fp16 d, qs[16]}: element j < 16 in the low nibble
 * of qs[j], j >= 16 in the high nibble of qs[j - 16]; y = (q - 8) * d */
template <>
__device__ __forceinline__ void deq8<GGML_TYPE_Q4_0>(const uint8_t *row, int64_t i, float v[8])
{
    const uint8_t *b = row + (i >> 5) * 18;
    const int o = (int)(i & 31), sh = o >= 16 ? 4 : 0;
    const float d = h2f(ld16(b));
#pragma unroll
    for (int k = 0; k < 4; k++) {
        uint16_t w = ld16(b + 2 + (o & 15) + 2 * k);
        v[2 * k] = __fmul_rn(u2f((w >> sh) & 0xF, 8.0f), d);
        v[2 * k + 1] = __fmul_rn(u2f((w >> (8 + sh)) & 0xF, 8.0f), d);
    }
}

/* Q4_K: 144-byte super-blocks {fp16 d, fp16 dmin, scales[12], qs[128]}:
 * sub-block j (32 elements) uses the low (even j) or high (odd j) nibbles
 * of qs[32 * (j / 2) ..]; y = (d * sc) * q - (dmin * m) */
template <>
__device__ __forceinline__ void deq8<GGML_TYPE_Q4_K>(const uint8_t *row, int64_t i, float v[8])
{
    const uint8_t *b = row + (i >> 8) * 144;
    const int e = (int)(i & 255), j = e >> 5, l0 = e & 31, sh = (j & 1) * 4;
    int sc, m;
    scale_min_k4(j, b + 4, &sc, &m);
    const float d1 = __fmul_rn(h2f(ld16(b)), (float)sc), m1 = __fmul_rn(h2f(ld16(b + 2)), (float)m);
    uint2 q = *reinterpret_cast<const uint2 *>(b + 16 + 32 * (j >> 1) + l0);
    uint32_t w[2] = {q.x, q.y};
#pragma unroll
    for (int k = 0; k < 8; k++)
        v[k] = __fsub_rn(__fmul_rn(d1, u2f((w[k >> 2] >> (8 * (k & 3) + sh)) & 0xF, 0.0f)), m1);
}

/* Q5_K: 176-byte super-blocks {d, dmin, scales[12], qh[32], qs[128]}: as
 * Q4_K plus a fifth bit, bit j of qh[l] */
template <>
__device__ __forceinline__ void deq8<GGML_TYPE_Q5_K>(const uint8_t *row, int64_t i, float v[8])
{
    const uint8_t *b = row + (i >> 8) * 176;
    const int e = (int)(i & 255), j = e >> 5, l0 = e & 31, sh = (j & 1) * 4;
    int sc, m;
    scale_min_k4(j, b + 4, &sc, &m);
    const float d1 = __fmul_rn(h2f(ld16(b)), (float)sc), m1 = __fmul_rn(h2f(ld16(b + 2)), (float)m);
    uint2 q = *reinterpret_cast<const uint2 *>(b + 48 + 32 * (j >> 1) + l0);
    uint2 h = *reinterpret_cast<const uint2 *>(b + 16 + l0);
    uint32_t w[2] = {q.x, q.y}, hw[2] = {h.x, h.y};
#pragma unroll
    for (int k = 0; k < 8; k++) {
        const uint32_t lo = (w[k >> 2] >> (8 * (k & 3) + sh)) & 0xF;
        const uint32_t hi = (hw[k >> 2] >> (8 * (k & 3) + j)) & 1;
        v[k] = __fsub_rn(__fmul_rn(d1, u2f(lo | (hi << 4), 0.0f)), m1);
    }
}

/* Q6_K: 210-byte super-blocks {ql[128], qh[64], int8 scales[16], fp16 d};
 * per 128-element half c, quarter k, element l: low nibble of ql[64c +
 * 32(k&1) + l] (high nibble for k >= 2), 2 bits of qh[32c + l] at 2k,
 * minus 32; y = (d * sc[8c + l/16 + 2k]) * q */
template <>
__device__ __forceinline__ void deq8<GGML_TYPE_Q6_K>(const uint8_t *row, int64_t i, float v[8])
{
    const uint8_t *b = row + (i >> 8) * 210;
    const int e = (int)(i & 255), c = e >> 7, r = e & 127, k4 = r >> 5, l0 = r & 31;
    const uint8_t *ql = b + 64 * c + 32 * (k4 & 1) + l0, *qh = b + 128 + 32 * c + l0;
    const int shl = (k4 >> 1) * 4, shh = 2 * k4;
    const float ds =
        __fmul_rn(h2f(ld16(b + 208)), (float)(int8_t)b[192 + 8 * c + (l0 >> 4) + 2 * k4]);
#pragma unroll
    for (int k = 0; k < 4; k++) {
        uint16_t lw = ld16(ql + 2 * k), hw = ld16(qh + 2 * k);
#pragma unroll
        for (int s = 0; s < 2; s++) {
            const uint32_t q = ((lw >> (8 * s + shl)) & 0xF) | (((hw >> (8 * s + shh)) & 3) << 4);
            v[2 * k + s] = __fmul_rn(ds, u2f(q, 32.0f));
        }
    }
}

/* Dispatches a kernel template over the weight types. */
#define MFK_TYPE_SWITCH(type, TY, ...)                                                             \
    switch (type) {                                                                                \
    case GGML_TYPE_F32: {                                                                          \
        constexpr int TY = GGML_TYPE_F32;                                                          \
        __VA_ARGS__;                                                                               \
    } break;                                                                                       \
    case GGML_TYPE_F16: {                                                                          \
        constexpr int TY = GGML_TYPE_F16;                                                          \
        __VA_ARGS__;                                                                               \
    } break;                                                                                       \
    case GGML_TYPE_BF16: {                                                                         \
        constexpr int TY = GGML_TYPE_BF16;                                                         \
        __VA_ARGS__;                                                                               \
    } break;                                                                                       \
    case GGML_TYPE_Q8_0: {                                                                         \
        constexpr int TY = GGML_TYPE_Q8_0;                                                         \
        __VA_ARGS__;                                                                               \
    } break;                                                                                       \
    case GGML_TYPE_Q4_0: {                                                                         \
        constexpr int TY = GGML_TYPE_Q4_0;                                                         \
        __VA_ARGS__;                                                                               \
    } break;                                                                                       \
    case GGML_TYPE_Q4_K: {                                                                         \
        constexpr int TY = GGML_TYPE_Q4_K;                                                         \
        __VA_ARGS__;                                                                               \
    } break;                                                                                       \
    case GGML_TYPE_Q5_K: {                                                                         \
        constexpr int TY = GGML_TYPE_Q5_K;                                                         \
        __VA_ARGS__;                                                                               \
    } break;                                                                                       \
    case GGML_TYPE_Q6_K: {                                                                         \
        constexpr int TY = GGML_TYPE_Q6_K;                                                         \
        __VA_ARGS__;                                                                               \
    } break;                                                                                       \
    default:                                                                                       \
        break;                                                                                     \
    }

/* The activation as the CPU backend feeds it to a weight of type TY. */
template <int TY> __device__ __forceinline__ float act(float x)
{
    if (TY == GGML_TYPE_F16)
        return __half2float(__float2half_rn(x));
    if (TY == GGML_TYPE_BF16)
        return __bfloat162float(__float2bfloat16_rn(x));
    return x;
}

/* v[0..8) . x[0..8), summed in index order; x is 16-byte aligned (an
 * input row staged in shared memory). */
__device__ __forceinline__ float dot8(const float v[8], const float *x)
{
    const float4 a = *reinterpret_cast<const float4 *>(x);
    const float4 b = *reinterpret_cast<const float4 *>(x + 4);
    float s = v[0] * a.x;
    s += v[1] * a.y;
    s += v[2] * a.z;
    s += v[3] * a.w;
    s += v[4] * b.x;
    s += v[5] * b.y;
    s += v[6] * b.z;
    s += v[7] * b.w;
    return s;
}

/* The scales and mins of sub-blocks 2p and 2p + 1 of a Q4_K super-block
 * (h: d, dmin and the 12 packed 6-bit scales), a byte each in the low two
 * bytes of *sc and *mn: q4k_scale_min's bits without its branch. The shift
 * (16 for odd p) and hi (p >= 2) are fixed per lane in the GEMV, so they
 * leave its loop. */
__device__ __forceinline__ void q4k_pair(const uint4 &h, int sh, bool hi, uint32_t *sc,
                                         uint32_t *mn)
{
    const uint32_t u0 = h.y >> sh, u1 = h.z >> sh, u2 = h.w >> sh;
    *sc = hi ? (u2 & 0x0F0Fu) | ((u0 & 0xC0C0u) >> 2) : u0 & 0x3F3Fu;
    *mn = hi ? ((u2 >> 4) & 0x0F0Fu) | ((u1 & 0xC0C0u) >> 2) : u1 & 0x3F3Fu;
}

/* 16 bytes at a 2-byte aligned address as four words: five aligned 4-byte
 * loads and funnel shifts, not eight 2-byte loads (Q6_K super-blocks are
 * 210 bytes). Reads up to 2 bytes before p and 4 past the 16 bytes; the
 * callers' ranges leave room inside the weight (or k_gemv_ring's copy, SH). */
template <bool SH> __device__ __forceinline__ void ld16x4(const uint8_t *p, uint32_t v[4])
{
    const uint32_t *a = reinterpret_cast<const uint32_t *>((uintptr_t)p & ~(uintptr_t)3);
    const unsigned sh = ((unsigned)(uintptr_t)p & 2u) * 8u;
    uint32_t w[5];
#pragma unroll
    for (int k = 0; k < 5; k++)
        w[k] = SH ? a[k] : __ldg(a + k);
#pragma unroll
    for (int k = 0; k < 4; k++)
        v[k] = __funnelshift_r(w[k], w[k + 1], sh);
}

#endif
