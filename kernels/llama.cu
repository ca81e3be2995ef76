/*
 * llama.cu: the transformer kernels of the CUDA backend: dequantization of
 * GGUF blocks, embedding, RMSNorm (with the fused residual add), GEMV over
 * block-format weights, RoPE fused with the paged K/V store, paged
 * attention (GQA-aware), SwiGLU, row gather and argmax.
 *
 * Numerics mirror the CPU backend (runtime/cpu/cpu_fwd.c, cpu_dot.c) where the
 * CPU's choice is observable: dequantization is bit-exact with
 * common/quant.h (products and differences are rounded one at a time with
 * __fmul_rn/__fsub_rn, never contracted into an FMA), activations meet
 * F16/BF16 weights rounded to that format, and attention rounds q and the
 * softmax weights to fp16 as the CPU's F16 path does. Q4_K and Q6_K weights
 * meet activations quantized to 8 bits per 32 elements (k_gemv_q4k,
 * k_gemv_q6k: integer dot products); the other quantized types meet float
 * activations. The CPU
 * quantizes activations per 256 (K-quants) or 32 (Q4_0/Q8_0) with its own
 * scales, so quantized models' logits differ from the CPU's by that rounding
 * (docs/cuda.md).
 *
 * Every element is produced by deq8 (kernels/blocks.cuh), which decodes
 * the 8 consecutive elements i..i+7 (i a multiple of 8) of a row; a warp
 * covers 256 elements per step, one K-quant super-block. A GEMV warp owns one output row (two
 * for large Q4_K products) and serves up to GEMV_NB tokens with each
 * decoded weight, so a decode step reads each weight byte from memory once.
 */
#include "kernels/kernels.h"
#include "kernels/blocks.cuh"
#include "kernels/internal.cuh"

#include <cfloat>
#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "common/ggml_type.h"

#define GEMV_NB 8             /* tokens served by one pass over a weight row */
#define GEMV_WARPS 8          /* rows (warps) per GEMV thread block */
#define GEMV_SMEM_FLOATS 8192 /* staged activations per GEMV block (32 KiB) */
/* Q4_K and Q6_K products of this many rows and more take two rows a warp:
 * half the input reads from L1, which bound one row a warp (ncu: L1
 * 78% busy, DRAM 41%); smaller ones keep a warp per row, or too few blocks
 * run (4096 rows in pairs: 268 against 281 tokens/s, H200 Q4_K_M batch 1). */
#define GEMV_Q4K_PAIRS 8192
/* At one token, the products of one row a warp (fewer than GEMV_Q4K_PAIRS
 * rows) with rows of GEMV_SPLIT_MIN elements and more share each row out
 * among GEMV_SPLIT warps of a block, each taking every GEMV_SPLIT-th group
 * of super-blocks, their sums added in a fixed order: a row's loads are
 * GEMV_SPLIT chains instead of one, and the grid has GEMV_SPLIT times the
 * warps (Llama-3-8B's 4096-row products filled 0.78 of a wave). Q4_K rows
 * wider than GEMV_SPLIT_Q4K_MAX keep one warp: the 4096 x 14336 down
 * product ran 16.9 us split against 15.0 (its Q6_K form 20.2 against 21.5;
 * one call).
 * H200, Llama-3-8B Q4_K_M batch 1, alternating runs: 348-354 tokens/s
 * against 340-346 unsplit; 347-350 with the Q4_K down product split too,
 * 341-342 with the down products alone split, 334-337 with 4 warps a row
 * (bench/results/2026-12-02.md). */
#ifndef GEMV_SPLIT
#define GEMV_SPLIT 2
#endif
#ifndef GEMV_SPLIT_MIN
#define GEMV_SPLIT_MIN 4096
#endif
#ifndef GEMV_SPLIT_Q4K_MAX
#define GEMV_SPLIT_Q4K_MAX 8192
#endif

static int check_weight(const struct mfk_weight *w, const char *what, struct mf_err *err)
{
    if (!mfk_weight_ok(w->type, w->ne0))
        return mf_err_set(err, MF_EUNSUPPORTED,
                          "CUDA %s: weight type %s with rows of %lld elements is not supported",
                          what, ggml_type_name((uint32_t)w->type), (long long)w->ne0);
    if (((uintptr_t)w->data & 15) || (w->row_bytes & 1))
        return mf_err_set(err, MF_EINVAL, "CUDA %s: weight data is not aligned", what);
    return 0;
}

/* ------------------------------------------------------------------------
 * Dequantization and embedding
 * ---------------------------------------------------------------------- */

template <int TY>
__global__ void k_rows(const uint8_t *w, uint64_t rb, int64_t ne0, const int32_t *ids, int64_t r0,
                       float *out, int64_t ldo)
{
    pdl_start();
    const int64_t r = ids ? ids[blockIdx.x] : r0 + blockIdx.x;
    const uint8_t *row = w + (uint64_t)r * rb;
    float *o = out + (int64_t)blockIdx.x * ldo;
    for (int64_t i = (int64_t)threadIdx.x * 8; i < ne0; i += (int64_t)blockDim.x * 8) {
        float v[8];
        deq8<TY>(row, i, v);
#pragma unroll
        for (int k = 0; k < 8; k++)
            o[i + k] = v[k];
    }
}

static int rows_launch(struct mfk_ctx *c, const struct mfk_weight *w, const int32_t *ids,
                       int64_t r0, int32_t n, float *out, int64_t ldo, const char *what,
                       struct mf_err *err)
{
    int rc = check_weight(w, what, err);
    if (rc || n <= 0)
        return rc;
    MFK_TYPE_SWITCH(w->type, TY,
                    mfk_go(mfk_queue(c), n, 128, 0, k_rows<TY>, (const uint8_t *)w->data,
                           w->row_bytes, w->ne0, ids, r0, out, ldo));
    return mfk_launched(what, err);
}

extern "C" int mfk_dequant_rows(struct mfk_ctx *c, const struct mfk_weight *w, int64_t r0,
                                int32_t n_rows, float *out, struct mf_err *err)
{
    if (r0 < 0 || r0 + n_rows > w->ne1)
        return mf_err_set(err, MF_EINVAL, "CUDA dequantize: rows %lld..%lld outside %lld",
                          (long long)r0, (long long)(r0 + n_rows), (long long)w->ne1);
    return rows_launch(c, w, nullptr, r0, n_rows, out, w->ne0, "dequantize", err);
}

template <typename H> __device__ __forceinline__ H to_half(float v);
template <> __device__ __forceinline__ __nv_bfloat16 to_half<__nv_bfloat16>(float v)
{
    return __float2bfloat16_rn(v);
}
template <> __device__ __forceinline__ __half to_half<__half>(float v)
{
    return __float2half_rn(v);
}

/* v's four values rounded to H at o (8-byte aligned), one 8-byte store. */
template <typename H> __device__ __forceinline__ void store_half4(H *o, float4 v)
{
    __align__(8) H h[4] = {to_half<H>(v.x), to_half<H>(v.y), to_half<H>(v.z), to_half<H>(v.w)};
    *reinterpret_cast<uint2 *>(o) = *reinterpret_cast<const uint2 *>(h);
}

/* The rows of k_rows rounded to bf16 (or fp16), packed: the GEMM's A. */
template <int TY, typename H>
__global__ void k_rows_half(const uint8_t *w, uint64_t rb, int64_t ne0, int64_t r0, H *out)
{
    pdl_start();
    const uint8_t *row = w + (uint64_t)(r0 + blockIdx.x) * rb;
    H *o = out + (int64_t)blockIdx.x * ne0;
    for (int64_t i = (int64_t)threadIdx.x * 8; i < ne0; i += (int64_t)blockDim.x * 8) {
        float v[8];
        deq8<TY>(row, i, v);
        H h[8];
#pragma unroll
        for (int k = 0; k < 8; k++)
            h[k] = to_half<H>(v[k]);
        *(uint4 *)(o + i) = *(const uint4 *)h; /* 16 bytes: ne0 % 8 == 0, rows 16-byte aligned */
    }
}

extern "C" int mfk_dequant_half(struct mfk_ctx *c, const struct mfk_weight *w, int64_t r0,
                                int32_t n_rows, void *out, int bf16, struct mf_err *err)
{
    int rc = check_weight(w, "dequantize", err);
    if (rc || n_rows <= 0)
        return rc;
    if (r0 < 0 || r0 + n_rows > w->ne1 || ((uintptr_t)out & 15))
        return mf_err_set(err, MF_EINVAL,
                          "CUDA dequantize: rows %lld..%lld outside %lld or "
                          "output not 16-byte aligned",
                          (long long)r0, (long long)(r0 + n_rows), (long long)w->ne1);
    const uint8_t *d = (const uint8_t *)w->data;
    if (bf16) {
        MFK_TYPE_SWITCH(w->type, TY,
                        mfk_go(mfk_queue(c), n_rows, 128, 0, k_rows_half<TY, __nv_bfloat16>, d,
                               w->row_bytes, w->ne0, r0, (__nv_bfloat16 *)out));
    } else {
        MFK_TYPE_SWITCH(w->type, TY,
                        mfk_go(mfk_queue(c), n_rows, 128, 0, k_rows_half<TY, __half>, d,
                               w->row_bytes, w->ne0, r0, (__half *)out));
    }
    return mfk_launched("dequantize", err);
}

/* out[t][i] = x[t][i] rounded, packed ne0 apart: the GEMM's B. Grid
 * (ceil(ne0 / (256 V)), tokens): V consecutive elements a thread, one
 * 16-byte load when V is 4 (rows aligned, ne0 a multiple of 4), and no
 * division per element (the grid-stride form with i / ne0 in 64 bits ran
 * at a third of the copy bandwidth). */
template <typename H, int V>
__global__ void k_round(const float *x, int64_t ldx, int64_t ne0, H *out)
{
    pdl_start();
    const int64_t t = blockIdx.y, e = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * V;
    const float *xr = x + t * ldx;
    H *o = out + t * ne0;
    if (V == 4 && e + 4 <= ne0) {
        store_half4(o + e, *reinterpret_cast<const float4 *>(xr + e));
        return;
    }
    for (int64_t i = e; i < e + V && i < ne0; i++)
        o[i] = to_half<H>(xr[i]);
}

template <typename H>
static void round_launch(const mfk_q &q, const float *x, int64_t ldx, int32_t nt, int64_t ne0,
                         H *out)
{
    const bool v4 = ((uintptr_t)x & 15) == 0 && ldx % 4 == 0 && ne0 % 4 == 0;
    const int64_t per = 256 * (v4 ? 4 : 1);
    const dim3 grid((unsigned)((ne0 + per - 1) / per), (unsigned)nt);
    if (v4)
        mfk_go(q, grid, 256, 0, k_round<H, 4>, x, ldx, ne0, out);
    else
        mfk_go(q, grid, 256, 0, k_round<H, 1>, x, ldx, ne0, out);
}

extern "C" int mfk_round_half(struct mfk_ctx *c, const float *x, int64_t ldx, int32_t nt,
                              int64_t ne0, void *out, int bf16, struct mf_err *err)
{
    if (nt <= 0 || ne0 <= 0)
        return 0;
    if (nt > 65535)
        return mf_err_set(err, MF_EINVAL, "CUDA round: %d rows (at most 65535)", nt);
    if (bf16)
        round_launch(mfk_queue(c), x, ldx, nt, ne0, (__nv_bfloat16 *)out);
    else
        round_launch(mfk_queue(c), x, ldx, nt, ne0, (__half *)out);
    return mfk_launched("round", err);
}

extern "C" int mfk_embed(struct mfk_ctx *c, const struct mfk_weight *w, const int32_t *ids,
                         int32_t n, float *x, int64_t ldx, struct mf_err *err)
{
    return rows_launch(c, w, ids, 0, n, x, ldx, "embedding", err);
}

/* ------------------------------------------------------------------------
 * 8-bit inputs (struct mfk_q8) written by the kernel that makes the input
 * ---------------------------------------------------------------------- */

/* Elements 4i..4i+3 of a row into its 8-bit form, by the 8 lanes that hold
 * a 32-element block (i & 7: the lane's place in it), with q8_store1's
 * arithmetic (k_quant_act's), so the GEMV sees the same bytes either way.
 * Every lane of the warp calls it. */
__device__ __forceinline__ void q8_store4(float4 v, int64_t i, int8_t *q, float *d, float *s)
{
    float amax = fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w)));
    for (int o = 1; o < 8; o <<= 1)
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const float dd = __fdiv_rn(amax, 127.0f);
    int a = 0, b = 0, c = 0, e = 0;
    if (amax > 0.0f) {
        a = (int)rintf(__fdiv_rn(v.x, dd)), b = (int)rintf(__fdiv_rn(v.y, dd));
        c = (int)rintf(__fdiv_rn(v.z, dd)), e = (int)rintf(__fdiv_rn(v.w, dd));
    }
    int qs = a + b + c + e;
    for (int o = 1; o < 8; o <<= 1)
        qs += __shfl_xor_sync(0xffffffffu, qs, o);
    *reinterpret_cast<char4 *>(q + 4 * i) =
        make_char4((signed char)a, (signed char)b, (signed char)c, (signed char)e);
    if ((i & 7) == 0)
        d[i >> 3] = dd, s[i >> 3] = dd * (float)qs;
}

/* ------------------------------------------------------------------------
 * RMSNorm
 * ---------------------------------------------------------------------- */

#define NORM_THREADS 1024
#define NORM_VEC 4 /* float4s a thread keeps in registers: rows up to 16384 in one pass */

/* o, the output's float4 i, where it goes: y, the 8-bit copy, the rounded
 * copy (yh: bf16 or fp16 packed n apart). */
__device__ __forceinline__ void norm_store(float4 o, int64_t i, float4 *yr, int8_t *qq, float *qd,
                                           float *qs, void *yh, int bf16, int64_t n)
{
    yr[i] = o;
    if (qq)
        q8_store4(o, i, qq, qd, qs);
    const int64_t e = (int64_t)blockIdx.x * n + 4 * i;
    if (yh && bf16)
        store_half4(static_cast<__nv_bfloat16 *>(yh) + e, o);
    else if (yh)
        store_half4(static_cast<__half *>(yh) + e, o);
}

/* One block per row; a thread loads its float4s once (adding the residual
 * and writing it back), the sum of squares meets in shared memory, then the
 * kept values are scaled. Rows longer than NORM_THREADS * NORM_VEC * 4 are
 * reread from memory for the part past that. */
__global__ void __launch_bounds__(NORM_THREADS)
    k_rmsnorm(float *x, int64_t ldx, const float *res, int64_t ldr, const float *g, float *y,
              int64_t ldy, int64_t n, float eps, struct mfk_q8 q8, void *yh, int bf16)
{
    pdl_start();
    const int64_t nb = (int64_t)blockIdx.x * (n / 32); /* this row's first 32-element block */
    int8_t *qq = q8.q ? q8.q + nb * 32 : nullptr;
    float *qd = q8.q ? q8.d + nb : nullptr, *qs = q8.q ? q8.s + nb : nullptr;
    __shared__ double part[NORM_THREADS / 32];
    float4 *xr = reinterpret_cast<float4 *>(x + (int64_t)blockIdx.x * ldx);
    const float4 *rr =
        res ? reinterpret_cast<const float4 *>(res + (int64_t)blockIdx.x * ldr) : nullptr;
    const float4 *g4 = reinterpret_cast<const float4 *>(g);
    float4 *yr = reinterpret_cast<float4 *>(y + (int64_t)blockIdx.x * ldy);
    const int64_t n4 = n / 4;
    float4 keep[NORM_VEC];
    double s = 0.0;
#pragma unroll
    for (int k = 0; k < NORM_VEC; k++) {
        const int64_t i = threadIdx.x + (int64_t)k * NORM_THREADS;
        if (i < n4) {
            float4 v = xr[i];
            if (rr) {
                const float4 a = rr[i];
                v.x = __fadd_rn(v.x, a.x), v.y = __fadd_rn(v.y, a.y);
                v.z = __fadd_rn(v.z, a.z), v.w = __fadd_rn(v.w, a.w);
                xr[i] = v;
            }
            keep[k] = v;
            s += (double)__fmul_rn(v.x, v.x) + (double)__fmul_rn(v.y, v.y) +
                 (double)__fmul_rn(v.z, v.z) + (double)__fmul_rn(v.w, v.w);
        }
    }
    for (int64_t i = threadIdx.x + (int64_t)NORM_VEC * NORM_THREADS; i < n4; i += NORM_THREADS) {
        float4 v = xr[i];
        if (rr) {
            const float4 a = rr[i];
            v.x = __fadd_rn(v.x, a.x), v.y = __fadd_rn(v.y, a.y);
            v.z = __fadd_rn(v.z, a.z), v.w = __fadd_rn(v.w, a.w);
            xr[i] = v;
        }
        s += (double)__fmul_rn(v.x, v.x) + (double)__fmul_rn(v.y, v.y) +
             (double)__fmul_rn(v.z, v.z) + (double)__fmul_rn(v.w, v.w);
    }
    for (int o = 16; o > 0; o >>= 1)
        s += __shfl_xor_sync(0xffffffffu, s, o);
    if ((threadIdx.x & 31) == 0)
        part[threadIdx.x >> 5] = s;
    __syncthreads();
    if (threadIdx.x < 32) {
        double t = part[threadIdx.x];
        for (int o = 16; o > 0; o >>= 1)
            t += __shfl_xor_sync(0xffffffffu, t, o);
        if (threadIdx.x == 0)
            part[0] = t;
    }
    __syncthreads();
    const float scale = 1.0f / sqrtf((float)(part[0] / (double)n) + eps);
#pragma unroll
    for (int k = 0; k < NORM_VEC; k++) {
        const int64_t i = threadIdx.x + (int64_t)k * NORM_THREADS;
        if (i < n4) { /* warp-uniform when there is an 8-bit copy (n % 256 == 0) */
            const float4 v = keep[k], w = g4[i];
            const float4 o = make_float4(
                __fmul_rn(__fmul_rn(v.x, scale), w.x), __fmul_rn(__fmul_rn(v.y, scale), w.y),
                __fmul_rn(__fmul_rn(v.z, scale), w.z), __fmul_rn(__fmul_rn(v.w, scale), w.w));
            norm_store(o, i, yr, qq, qd, qs, yh, bf16, n);
        }
    }
    for (int64_t i = threadIdx.x + (int64_t)NORM_VEC * NORM_THREADS; i < n4; i += NORM_THREADS) {
        const float4 v = xr[i], w = g4[i];
        const float4 o = make_float4(
            __fmul_rn(__fmul_rn(v.x, scale), w.x), __fmul_rn(__fmul_rn(v.y, scale), w.y),
            __fmul_rn(__fmul_rn(v.z, scale), w.z), __fmul_rn(__fmul_rn(v.w, scale), w.w));
        norm_store(o, i, yr, qq, qd, qs, yh, bf16, n);
    }
}

extern "C" int mfk_rmsnorm_rounded(struct mfk_ctx *c, float *x, int64_t ldx, const float *res,
                                   int64_t ldr, const float *g, float *y, int64_t ldy, int32_t rows,
                                   int64_t n, float eps, const struct mfk_q8 *q8, void *yh,
                                   int bf16, struct mf_err *err)
{
    if (rows <= 0)
        return 0;
    if (int rc = q8_check(q8, n, "rmsnorm", err))
        return rc;
    if ((n & 3) || (ldx & 3) || (ldy & 3) || (res && (ldr & 3)) || ((uintptr_t)x & 15) ||
        ((uintptr_t)y & 15) || ((uintptr_t)g & 15) || ((uintptr_t)res & 15) || ((uintptr_t)yh & 15))
        return mf_err_set(err, MF_EINVAL, "CUDA rmsnorm: rows must be 16-byte aligned float4s");
    mfk_go(mfk_queue(c), rows, NORM_THREADS, 0, k_rmsnorm, x, ldx, res, ldr, g, y, ldy, n, eps,
           q8 ? *q8 : mfk_q8{}, yh, bf16);
    return mfk_launched("rmsnorm", err);
}

extern "C" int mfk_rmsnorm(struct mfk_ctx *c, float *x, int64_t ldx, const float *res, int64_t ldr,
                           const float *g, float *y, int64_t ldy, int32_t rows, int64_t n,
                           float eps, const struct mfk_q8 *q8, struct mf_err *err)
{
    return mfk_rmsnorm_rounded(c, x, ldx, res, ldr, g, y, ldy, rows, n, eps, q8, NULL, 0, err);
}

/* ------------------------------------------------------------------------
 * GEMV
 * ---------------------------------------------------------------------- */

/* One warp per output row, GEMV_WARPS rows per block. The activations are
 * staged in shared memory a chunk at a time (NB tokens x CH elements, rounded
 * for the weight type once there), so the block's warps share one read of
 * them instead of each row re-reading every token from L2. */
template <int TY, int NB>
__global__ void __launch_bounds__(GEMV_WARPS * 32)
    k_gemv(const uint8_t *w, uint64_t rb, int64_t ne0, int64_t ne1, const float *x, int64_t ldx,
           int nt, float *y, int64_t ldy, int add)
{
    constexpr int CH = GEMV_SMEM_FLOATS / NB; /* elements per staged chunk, a multiple of 256 */
    __shared__ __align__(16) float xs[GEMV_SMEM_FLOATS];
    const int64_t r = (int64_t)blockIdx.x * GEMV_WARPS + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    const bool live = r < ne1; /* no early return: every thread takes part in the staging */
    const uint8_t *row = w + (uint64_t)(live ? r : 0) * rb;
    pdl_start();
    for (int t0 = 0; t0 < nt; t0 += NB) {
        const int nc = nt - t0 < NB ? nt - t0 : NB;
        float acc[NB];
#pragma unroll
        for (int cc = 0; cc < NB; cc++)
            acc[cc] = 0.0f;
        for (int64_t k0 = 0; k0 < ne0; k0 += CH) {
            const int len = ne0 - k0 < CH ? (int)(ne0 - k0) : CH, len4 = len / 4;
            __syncthreads(); /* the last chunk is consumed */
            for (int idx = threadIdx.x; idx < NB * len4; idx += blockDim.x) {
                const int cc = idx / len4, e4 = idx % len4;
                float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                if (cc < nc)
                    v = *reinterpret_cast<const float4 *>(x + (int64_t)(t0 + cc) * ldx + k0 +
                                                          4 * e4);
                v.x = act<TY>(v.x), v.y = act<TY>(v.y), v.z = act<TY>(v.z), v.w = act<TY>(v.w);
                *reinterpret_cast<float4 *>(xs + cc * CH + 4 * e4) = v;
            }
            __syncthreads();
            if (!live)
                continue;
#pragma unroll 4
            for (int i = lane * 8; i < len; i += 256) {
                float v[8];
                deq8<TY>(row, k0 + i, v);
#pragma unroll
                for (int cc = 0; cc < NB; cc++) {
                    if (cc < nc)
                        acc[cc] += dot8(v, xs + cc * CH + i);
                }
            }
        }
#pragma unroll
        for (int cc = 0; cc < NB; cc++) {
            float s = acc[cc];
            for (int o = 16; o > 0; o >>= 1)
                s += __shfl_xor_sync(0xffffffffu, s, o);
            if (live && lane == 0 && cc < nc) {
                float *out = y + (int64_t)(t0 + cc) * ldy + r;
                *out = add ? *out + s : s;
            }
        }
    }
}

/* Activations quantized to 8 bits per 32 elements (d = max|x| / 127,
 * q = rint(x / d), as llama.cpp's Q8_1 blocks), once per product, into
 * xq[nt][ne0] (int8), xd[nt][ne0 / 32] and xs = xd * the block's sum of q
 * (the Q4_K mins' term in mmq.cu): grid (ne0 / 256, nt), a warp per
 * 32-element block, a lane per element. The GEMV blocks then read these 4 KiB
 * per token of a 4096-wide input from L1/L2 instead of each block quantizing
 * the whole input again before its first weight load. */
__global__ void k_quant_act(const float *__restrict__ x, int64_t ldx, int64_t ne0,
                            int8_t *__restrict__ xq, float *__restrict__ xd,
                            float *__restrict__ xs)
{
    pdl_start();
    const int64_t blk = (int64_t)blockIdx.x * 8 + (threadIdx.x >> 5);
    const int t = blockIdx.y, lane = threadIdx.x & 31;
    if (blk * 32 >= ne0)
        return;
    const int64_t e = blk * 32 + lane;
    q8_store1(x[(int64_t)t * ldx + e], e, xq + (int64_t)t * ne0, xd + (int64_t)t * (ne0 / 32),
              xs + (int64_t)t * (ne0 / 32));
}

/* Up to three weights of one type and input (q, k, v; gate, up) in one
 * launch, each a few microseconds of launch and tail less: blocks b0[i] ..
 * b0[i + 1] - 1 take weight i (b0[n..3] = the grid). */
struct gemv_many {
    const uint8_t *w[3];
    float *y[3];
    int64_t ne1[3], ldy[3];
    uint64_t rb[3];
    unsigned b0[4]; /* first block of each weight (k_gemv_q4k, k_gemv_q6k) */
    int ks;         /* warps a row (GEMV_SPLIT or 1) of k_gemv_q4k, k_gemv_q6k */
    unsigned tk[4]; /* first warp task (R rows) of each weight (k_gemv_ring) */
    int ring;       /* 1: k_gemv_ring takes them (ring_ok) */
};

/* The R rows of a warp from r0; rows past ne1 read the last one (their
 * sums are dropped by gemv_store). */
template <int R>
__device__ __forceinline__ void gemv_rows(const uint8_t *w, uint64_t rb, int64_t r0, int64_t ne1,
                                          const uint8_t *(&row)[R])
{
#pragma unroll
    for (int i = 0; i < R; i++)
        row[i] = w + (uint64_t)(r0 + i < ne1 ? r0 + i : ne1 - 1) * rb;
}

/* v summed over the warp's lanes (every lane gets the sum). */
__device__ __forceinline__ float lane_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* The warp's sums of rows r0.. for tokens t0..t0 + nc - 1, reduced over
 * its lanes and stored (add: added) by lane 0; rows past ne1 dropped. */
template <int R, int NB>
__device__ __forceinline__ void gemv_store(const float (&acc)[R][NB], int lane, int t0, int nc,
                                           int64_t r0, int64_t ne1, float *y, int64_t ldy,
                                           int add)
{
#pragma unroll
    for (int i = 0; i < R; i++)
#pragma unroll
        for (int cc = 0; cc < NB; cc++) {
            const float sum = lane_sum(acc[i][cc]);
            if (lane == 0 && cc < nc && r0 + i < ne1) {
                float *out = y + (int64_t)(t0 + cc) * ldy + r0 + i;
                *out = add ? *out + sum : sum;
            }
        }
}

/* Which of gemv_many's weights holds item i (a block or a task), given
 * each weight's first item (first[1], first[2]; first[0] is 0). */
__device__ __forceinline__ int many_which(unsigned i, const unsigned (&first)[4])
{
    return i >= first[1] ? (i >= first[2] ? 2 : 1) : 0;
}

/* This warp's weight and first row (R rows a task, KS warps a task). */
template <int R, int KS> __device__ __forceinline__ int many_pick(const gemv_many &m, int64_t *r0)
{
    const int k = many_which(blockIdx.x, m.b0);
    *r0 = ((int64_t)(blockIdx.x - m.b0[k]) * (GEMV_WARPS / KS) + (threadIdx.x >> 5) / KS) * R;
    return k;
}

/* gemv_store for KS warps a task (KS > 1): each warp's sums reduced over
 * its lanes into red, then the task's first warp adds its partners' in
 * warp order and stores. Every warp of the block must call it (live 0:
 * the task's rows lie past the weight). */
template <int R, int NB, int KS>
__device__ __forceinline__ void gemv_store_split(const float (&acc)[R][NB], float (*red)[R][NB],
                                                 int lane, bool live, int t0, int nc, int64_t r0,
                                                 int64_t ne1, float *y, int64_t ldy, int add)
{
    const int wp = threadIdx.x >> 5;
#pragma unroll
    for (int i = 0; i < R; i++)
#pragma unroll
        for (int cc = 0; cc < NB; cc++) {
            const float sum = lane_sum(acc[i][cc]);
            if (lane == 0)
                red[wp][i][cc] = sum;
        }
    __syncthreads();
    if (live && lane == 0 && wp % KS == 0) {
#pragma unroll
        for (int i = 0; i < R; i++)
#pragma unroll
            for (int cc = 0; cc < NB; cc++) {
                float sum = red[wp][i][cc];
#pragma unroll
                for (int j = 1; j < KS; j++)
                    sum += red[wp + j][i][cc];
                if (cc < nc && r0 + i < ne1) {
                    float *out = y + (int64_t)(t0 + cc) * ldy + r0 + i;
                    *out = add ? *out + sum : sum;
                }
            }
    }
    __syncthreads(); /* red is read before the next pass writes it */
}

/* 16 weight bytes from k_gemv_ring's shared copy (SH) or from memory. */
template <bool SH> __device__ __forceinline__ uint4 ldw16(const uint8_t *p)
{
    if constexpr (SH)
        return *reinterpret_cast<const uint4 *>(p);
    else
        return __ldg(reinterpret_cast<const uint4 *>(p));
}

/* Super-block sb of the warp's R rows against tokens t0..t0 + nc - 1, added
 * to acc: k_gemv_q4k's step, lane group p of the super-block, which lies
 * off bytes into each row (in memory, or in k_gemv_ring's copy when SH). */
template <bool SH, int R, int NB>
__device__ __forceinline__ void q4k_step(const uint8_t *const (&row)[R], int off, int sb, int p,
                                         int sh, bool hi, const int8_t *__restrict__ xq,
                                         const float *__restrict__ xd, const float *__restrict__ xs,
                                         int64_t ne0, int nd, int t0, int nc, float (&acc)[R][NB])
{
    uint32_t qw[R][8];
    float dlo[R], dhi[R], mlo[R], mhi[R];
#pragma unroll
    for (int i = 0; i < R; i++) {
        const uint8_t *b = row[i] + off;
        const uint4 hd = ldw16<SH>(b);
        const uint4 q0 = ldw16<SH>(b + 16 + 32 * p);
        const uint4 q1 = ldw16<SH>(b + 32 + 32 * p);
        uint32_t sc, mn;
        q4k_pair(hd, sh, hi, &sc, &mn);
        const float d = h2f((uint16_t)(hd.x & 0xFFFF)), dm = h2f((uint16_t)(hd.x >> 16));
        dlo[i] = d * (float)(sc & 0xFF), dhi[i] = d * (float)(sc >> 8);
        mlo[i] = dm * (float)(mn & 0xFF), mhi[i] = dm * (float)(mn >> 8);
        qw[i][0] = q0.x, qw[i][1] = q0.y, qw[i][2] = q0.z, qw[i][3] = q0.w;
        qw[i][4] = q1.x, qw[i][5] = q1.y, qw[i][6] = q1.z, qw[i][7] = q1.w;
    }
    const int e = 256 * sb + 64 * p, blk = 8 * sb + 2 * p;
#pragma unroll
    for (int cc = 0; cc < NB; cc++) {
        if (cc < nc) {
            const int8_t *xt = xq + (int64_t)(t0 + cc) * ne0 + e;
            const int4 xa = __ldg(reinterpret_cast<const int4 *>(xt));
            const int4 xb = __ldg(reinterpret_cast<const int4 *>(xt + 16));
            const int4 xc = __ldg(reinterpret_cast<const int4 *>(xt + 32));
            const int4 xe = __ldg(reinterpret_cast<const int4 *>(xt + 48));
            const int xl[8] = {xa.x, xa.y, xa.z, xa.w, xb.x, xb.y, xb.z, xb.w};
            const int xh[8] = {xc.x, xc.y, xc.z, xc.w, xe.x, xe.y, xe.z, xe.w};
            const int64_t o = (int64_t)(t0 + cc) * nd + blk; /* even: 8-byte aligned */
            const float2 xdp = __ldg(reinterpret_cast<const float2 *>(xd + o));
            const float2 xsp = __ldg(reinterpret_cast<const float2 *>(xs + o));
#pragma unroll
            for (int i = 0; i < R; i++) {
                int slo = 0, shi = 0;
#pragma unroll
                for (int k = 0; k < 8; k++) {
                    slo = __dp4a((int)(qw[i][k] & 0x0F0F0F0Fu), xl[k], slo);
                    shi = __dp4a((int)((qw[i][k] >> 4) & 0x0F0F0F0Fu), xh[k], shi);
                }
                acc[i][cc] += xdp.x * dlo[i] * (float)slo + xdp.y * dhi[i] * (float)shi -
                              (mlo[i] * xsp.x + mhi[i] * xsp.y);
            }
        }
    }
}

/* Q4_K weights against the 8-bit activations of k_quant_act: four nibbles
 * of a word meet four activation bytes in one dp4a, and the sub-blocks'
 * mins take xs (xd x the input block's sum), so a lane spends a few
 * integer instructions per 8 weights instead of decoding them to floats.
 * A lane takes a 32-byte group p of a super-block's qs (sub-block 2p in the
 * low nibbles, 2p + 1 in the high ones) and the block's 16-byte head; 4
 * lanes cover a super-block, a warp 8 of them a step. The instruction count
 * per byte, not the loads, bounds this kernel: 8 lanes a super-block, a
 * branch on p in every scale decode and the mins' sums by dp4a took 255
 * warp instructions per 512 bytes, the schedulers 66% busy at 33% of DRAM
 * (ncu, H200), 2.7x this shape's. */
template <int NB, int R, int KS>
__global__ void __launch_bounds__(GEMV_WARPS * 32)
    k_gemv_q4k(const gemv_many m, int64_t ne0, const int8_t *__restrict__ xq,
               const float *__restrict__ xd, const float *__restrict__ xs, int nt, int add)
{
    __shared__ float red[KS > 1 ? GEMV_WARPS : 1][R][NB];
    int64_t r0;
    const int wk = many_pick<R, KS>(m, &r0), lane = threadIdx.x & 31;
    const int part = (threadIdx.x >> 5) % KS;
    const uint8_t *w = m.w[wk];
    const uint64_t rb = m.rb[wk];
    const int64_t ne1 = m.ne1[wk], ldy = m.ldy[wk];
    float *y = m.y[wk];
    const bool live = r0 < ne1;
    if (KS == 1 && !live)
        return;
    const uint8_t *row[R];
    gemv_rows<R>(w, rb, r0, ne1, row);
    pdl_start();
    const int nsb = (int)(ne0 >> 8), nd = (int)(ne0 >> 5), p = lane & 3, sh = 16 * (p & 1);
    const bool hi = p >= 2;
    constexpr int UNROLL = NB * R == 1 ? 4 : NB * R == 2 ? 2 : 1; /* loads in flight, registers */
    for (int t0 = 0; t0 < nt; t0 += NB) {
        const int nc = nt - t0 < NB ? nt - t0 : NB;
        float acc[R][NB];
#pragma unroll
        for (int i = 0; i < R; i++)
#pragma unroll
            for (int cc = 0; cc < NB; cc++)
                acc[i][cc] = 0.0f;
#pragma unroll UNROLL
        for (int sb = (lane >> 2) + 8 * part; live && sb < nsb; sb += 8 * KS)
            q4k_step<false, R, NB>(row, 144 * sb, sb, p, sh, hi, xq, xd, xs, ne0, nd, t0, nc, acc);
        if constexpr (KS > 1)
            gemv_store_split<R, NB, KS>(acc, red, lane, live, t0, nc, r0, ne1, y, ldy, add);
        else
            gemv_store<R, NB>(acc, lane, t0, nc, r0, ne1, y, ldy, add);
    }
}

/* Super-block sb of the warp's R rows against tokens t0..t0 + nc - 1, added
 * to acc: k_gemv_q6k's step, lane part (c, kp, l0) of the super-block, which
 * lies off bytes into each row (in memory, or in k_gemv_ring's copy when SH). */
template <bool SH, int R, int NB>
__device__ __forceinline__ void q6k_step(const uint8_t *const (&row)[R], size_t off, int sb, int c,
                                         int kp, int l0, const int8_t *__restrict__ xq,
                                         const float *__restrict__ xd, int64_t ne0, int64_t nd,
                                         int t0, int nc, float (&acc)[R][NB])
{
    int qlo[R][4], qhi[R][4];
    float dlo[R], dhi[R];
#pragma unroll
    for (int i = 0; i < R; i++) {
        const uint8_t *b = row[i] + off;
        const float d = h2f(ld16(b + 208));
        dlo[i] = d * (float)(int8_t)b[192 + 8 * c + (l0 >> 4) + 2 * kp];
        dhi[i] = d * (float)(int8_t)b[192 + 8 * c + (l0 >> 4) + 2 * (kp + 2)];
        uint32_t lw[4], hw[4];
        ld16x4<SH>(b + 64 * c + 32 * kp + l0, lw);
        ld16x4<SH>(b + 128 + 32 * c + l0, hw);
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const uint32_t lo = (lw[k] & 0x0F0F0F0Fu) | (((hw[k] >> (2 * kp)) & 0x03030303u) << 4);
            const uint32_t hi =
                ((lw[k] >> 4) & 0x0F0F0F0Fu) | (((hw[k] >> (2 * kp + 4)) & 0x03030303u) << 4);
            qlo[i][k] = (int)__vsub4(lo, 0x20202020u);
            qhi[i][k] = (int)__vsub4(hi, 0x20202020u);
        }
    }
    const int elo = sb * 256 + 128 * c + 32 * kp + l0, ehi = elo + 64;
#pragma unroll
    for (int cc = 0; cc < NB; cc++) {
        if (cc < nc) {
            const int8_t *xt = xq + (int64_t)(t0 + cc) * ne0;
            const int4 xl4 = __ldg(reinterpret_cast<const int4 *>(xt + elo));
            const int4 xh4 = __ldg(reinterpret_cast<const int4 *>(xt + ehi));
            const int xl[4] = {xl4.x, xl4.y, xl4.z, xl4.w};
            const int xh[4] = {xh4.x, xh4.y, xh4.z, xh4.w};
            const float *dt = xd + (int64_t)(t0 + cc) * nd;
            const float xdl = __ldg(dt + elo / 32), xdh = __ldg(dt + ehi / 32);
#pragma unroll
            for (int i = 0; i < R; i++) {
                int slo = 0, shi = 0;
#pragma unroll
                for (int k = 0; k < 4; k++) {
                    slo = __dp4a(qlo[i][k], xl[k], slo);
                    shi = __dp4a(qhi[i][k], xh[k], shi);
                }
                acc[i][cc] += xdl * dlo[i] * (float)slo + xdh * dhi[i] * (float)shi;
            }
        }
    }
}

/* Q6_K weights against the same 8-bit activations: a lane takes 16
 * consecutive l of one half c and quarter pair (kp, kp + 2) of a super-block,
 * which share their ql bytes (low / high nibbles) and qh bytes (bits 2kp and
 * 2kp + 4); q - 32 is formed per byte (__vsub4) and meets four activation
 * bytes in one dp4a; each 16 elements have one int8 scale. 8 lanes cover a
 * super-block, a warp 4 of them a step, R rows at once (the input read once
 * for them). */
template <int NB, int R, int KS>
__global__ void __launch_bounds__(GEMV_WARPS * 32)
    k_gemv_q6k(const gemv_many m, int64_t ne0, const int8_t *__restrict__ xq,
               const float *__restrict__ xd, int nt, int add)
{
    __shared__ float red[KS > 1 ? GEMV_WARPS : 1][R][NB];
    int64_t r0;
    const int wk = many_pick<R, KS>(m, &r0), lane = threadIdx.x & 31;
    const int part = (threadIdx.x >> 5) % KS;
    const uint8_t *w = m.w[wk];
    const uint64_t rb = m.rb[wk];
    const int64_t ne1 = m.ne1[wk], ldy = m.ldy[wk];
    float *y = m.y[wk];
    const bool live = r0 < ne1;
    if (KS == 1 && !live)
        return;
    const uint8_t *row[R];
    gemv_rows<R>(w, rb, r0, ne1, row);
    pdl_start();
    const int nsb = (int)(ne0 >> 8);
    const int64_t nd = ne0 / 32;
    const int j = lane & 7, c = j >> 2, kp = (j >> 1) & 1, l0 = (j & 1) * 16;
    constexpr int UNROLL = NB * R == 1 ? 4 : 1; /* loads in flight, registers */
    for (int t0 = 0; t0 < nt; t0 += NB) {
        const int nc = nt - t0 < NB ? nt - t0 : NB;
        float acc[R][NB];
#pragma unroll
        for (int i = 0; i < R; i++)
#pragma unroll
            for (int cc = 0; cc < NB; cc++)
                acc[i][cc] = 0.0f;
#pragma unroll UNROLL
        for (int sb = (lane >> 3) + 4 * part; live && sb < nsb; sb += 4 * KS)
            q6k_step<false, R, NB>(row, (size_t)sb * 210, sb, c, kp, l0, xq, xd, ne0, nd, t0, nc,
                                   acc);
        if constexpr (KS > 1)
            gemv_store_split<R, NB, KS>(acc, red, lane, live, t0, nc, r0, ne1, y, ldy, add);
        else
            gemv_store<R, NB>(acc, lane, t0, nc, r0, ne1, y, ldy, add);
    }
}

/* The Q4_K / Q6_K GEMV of small batches (GEMV_RING_MIN to GEMV_RING_NB
 * tokens): a grid of GEMV_RING_BLOCKS blocks a multiprocessor whose warps
 * take every W-th task (R rows of one weight; W the grid's warps) and
 * stream their rows through
 * a ring of S units in shared memory, GEMV_CH super-blocks of each row a
 * unit, which the copy engine fills (cp.async.bulk) S - 1 units ahead of
 * the one being computed. The kernels above give each warp one task: their
 * blocks load, compute and exit in waves that each wait out the memory
 * latency with DRAM idle between them (Q4_K 14336 x 4096 at 1 token ran at
 * 56% of the copy bandwidth); here the next rows' bytes are in flight while
 * a warp computes, and the first units are requested before the
 * programmatic wait (no kernel writes weights). Rows must be 16-byte
 * aligned copies: ring_ok. H200, Llama-3-8B Q4_K_M decode: batch 2 519 ->
 * 543 tokens/s, batch 4 742 -> 768; batch 1 343 either way (its products
 * alone: 4096 x 4096 faster, the 14336-row and 14336-wide ones slower), so
 * one token keeps the kernels above. */
#define GEMV_CH 8            /* super-blocks of a row in a ring unit */
#define GEMV_RING_BYTES 5120 /* a warp's ring, at most */
#define GEMV_RING_BLOCKS 4   /* resident blocks a multiprocessor (64 registers) */
#ifndef GEMV_RING_MIN
#define GEMV_RING_MIN 2 /* tokens: below and past GEMV_RING_NB, the kernels above */
#endif
#define GEMV_RING_NB 4
#ifndef GEMV_RING
#define GEMV_RING 1 /* 0: the kernels above only (GEMV_RING and GEMV_RING_MIN: for measuring) */
#endif

template <int TY, int R> struct ring_cfg {
    static constexpr int SBB = TY == GGML_TYPE_Q4_K ? 144 : 210; /* super-block bytes */
    static constexpr int ROWB = GEMV_CH * SBB;                   /* a row's part of a unit */
    static constexpr int UNIT = R * ROWB;
    static constexpr int S = GEMV_RING_BYTES / UNIT; /* units in the ring (2 at least) */
};

template <int TY, int NB, int R>
__global__ void __launch_bounds__(GEMV_WARPS * 32, GEMV_RING_BLOCKS)
    k_gemv_ring(const gemv_many m, int64_t ne0, const int8_t *__restrict__ xq,
                const float *__restrict__ xd, const float *__restrict__ xs, int nt, int add)
{
    using C = ring_cfg<TY, R>;
    constexpr int S = C::S;
    static_assert(S >= 2, "a ring of one unit cannot overlap");
    __shared__ __align__(16) uint8_t ring[GEMV_WARPS][S][C::UNIT];
    __shared__ uint64_t bar[GEMV_WARPS][S];
    const int lane = threadIdx.x & 31, wp = threadIdx.x >> 5;
    const unsigned W = gridDim.x * GEMV_WARPS, gw = blockIdx.x * GEMV_WARPS + wp, T = m.tk[3];
    if (gw >= T)
        return;
    const int nsb = (int)(ne0 >> 8), nch = (nsb + GEMV_CH - 1) / GEMV_CH;
    const int ntask = (int)((T - 1 - gw) / W) + 1, npass = (nt + NB - 1) / NB;
    const int total = npass * ntask * nch; /* units this warp streams */
    /* lane 0, the producer: the next unit's task, chunk and ring slot */
    int pi = 0, pj = 0, pu = 0;
    auto issue = [&]() {
        const unsigned t = gw + (unsigned)pi * W;
        const int k = many_which(t, m.tk);
        const int64_t r0 = (int64_t)(t - m.tk[k]) * R;
        const int n = nsb - pj * GEMV_CH < GEMV_CH ? nsb - pj * GEMV_CH : GEMV_CH;
        const uint32_t bytes = (uint32_t)(n * C::SBB);
        uint64_t *b = &bar[wp][pu % S];
        mbar_arrive_tx(b, R * bytes);
#pragma unroll
        for (int i = 0; i < R; i++) {
            const int64_t r = r0 + i < m.ne1[k] ? r0 + i : m.ne1[k] - 1;
            bulk_copy(&ring[wp][pu % S][i * C::ROWB],
                      m.w[k] + (uint64_t)r * m.rb[k] + (size_t)pj * C::ROWB, bytes, b);
        }
        pu++;
        if (++pj == nch) {
            pj = 0;
            if (++pi == ntask)
                pi = 0;
        }
    };
    if (lane == 0) {
        for (int s = 0; s < S; s++)
            mbar_init(&bar[wp][s], 1);
        mbar_init_fence();
        for (int s = 0; s < S && s < total; s++)
            issue();
    }
    __syncwarp();
    pdl_start();
    const int nd = (int)(ne0 >> 5);
    /* Q4_K: lane group p of super-block lane / 4 of a unit; Q6_K: part
     * (c, kp, l0) of super-blocks lane / 8 and lane / 8 + 4 */
    const int p = lane & 3, sh = 16 * (p & 1), j8 = lane & 7;
    const bool hi = p >= 2;
    const int c = j8 >> 2, kp = (j8 >> 1) & 1, l0 = (j8 & 1) * 16;
    float acc[R][NB];
#pragma unroll
    for (int i = 0; i < R; i++)
#pragma unroll
        for (int cc = 0; cc < NB; cc++)
            acc[i][cc] = 0.0f;
    int ci = 0, cj = 0, cpass = 0, k = 0;
    int64_t r0 = 0;
    for (int u = 0; u < total; u++) {
        const int s = u % S;
        if (cj == 0) {
            const unsigned t = gw + (unsigned)ci * W;
            k = many_which(t, m.tk);
            r0 = (int64_t)(t - m.tk[k]) * R;
        }
        const int t0 = cpass * NB, nc = nt - t0 < NB ? nt - t0 : NB, sb0 = cj * GEMV_CH;
        const uint8_t *srow[R];
#pragma unroll
        for (int i = 0; i < R; i++)
            srow[i] = &ring[wp][s][i * C::ROWB];
        mbar_wait(&bar[wp][s], (uint32_t)(u / S) & 1);
        if constexpr (TY == GGML_TYPE_Q4_K) {
            const int q = lane >> 2;
            if (sb0 + q < nsb)
                q4k_step<true, R, NB>(srow, 144 * q, sb0 + q, p, sh, hi, xq, xd, xs, ne0, nd, t0,
                                      nc, acc);
        } else {
#pragma unroll
            for (int q = lane >> 3; q < GEMV_CH; q += 4)
                q6k_step<true, R, NB>(srow, (size_t)210 * q, sb0 + q, c, kp, l0, xq, xd, ne0, nd,
                                      t0, nc, acc);
        }
        if (++cj == nch) {
            gemv_store<R, NB>(acc, lane, t0, nc, r0, m.ne1[k], m.y[k], m.ldy[k], add);
#pragma unroll
            for (int i = 0; i < R; i++)
#pragma unroll
                for (int cc = 0; cc < NB; cc++)
                    acc[i][cc] = 0.0f;
            cj = 0;
            if (++ci == ntask)
                ci = 0, cpass++;
        }
        __syncwarp(); /* the slot is read: refill it */
        if (lane == 0 && u + S < total) {
            fence_proxy_async();
            issue();
        }
    }
}

/* 1 when k_gemv_ring takes m's weights (n of them, of type ty, R rows a
 * warp) for nt tokens: its units are whole super-blocks copied in 16-byte
 * multiples from 16-byte aligned rows (a Q6_K row must be a multiple of 8
 * super-blocks), and its ring must hold two units. */
static int ring_ok(const gemv_many &m, int n, int ty, int64_t ne0, int R, int nt)
{
    const int sbb = ty == GGML_TYPE_Q4_K ? 144 : 210;
    if (!GEMV_RING || nt < GEMV_RING_MIN || nt > GEMV_RING_NB ||
        GEMV_RING_BYTES / (R * GEMV_CH * sbb) < 2)
        return 0;
    if (ty == GGML_TYPE_Q6_K && (ne0 / 256) % GEMV_CH)
        return 0;
    for (int i = 0; i < n; i++)
        if (((uintptr_t)m.w[i] & 15) || (m.rb[i] & 15))
            return 0;
    return 1;
}

/* The Q4_K / Q6_K GEMV over m's weights (grid: all their blocks), NB
 * tokens per pass over the weights, R rows a warp. */
/* The one-task kernel of type TY for m, KS warps a row (m.b0's blocks). */
template <int TY, int NB, int R, int KS>
static void gemv_onetask(const mfk_q &q, const gemv_many &m, int64_t ne0, const int8_t *xq,
                         const float *xd, const float *xs, int nt, int add)
{
    if (TY == GGML_TYPE_Q4_K)
        mfk_go(q, m.b0[3], GEMV_WARPS * 32, 0, k_gemv_q4k<NB, R, KS>, m, ne0, xq, xd, xs, nt, add);
    else
        mfk_go(q, m.b0[3], GEMV_WARPS * 32, 0, k_gemv_q6k<NB, R, KS>, m, ne0, xq, xd, nt, add);
}

template <int TY, int NB, int R>
static void gemv_int_launch(const mfk_q &q, const gemv_many &m, int64_t ne0, const int8_t *xq,
                            const float *xd, const float *xs, int nt, int add)
{
    if constexpr (NB >= GEMV_RING_MIN && NB <= GEMV_RING_NB && ring_cfg<TY, R>::S >= 2) {
        if (m.ring) {
            const unsigned need = (m.tk[3] + GEMV_WARPS - 1) / GEMV_WARPS;
            const unsigned most = (unsigned)(q.sms > 0 ? q.sms : 1) * GEMV_RING_BLOCKS;
            mfk_go(q, need < most ? need : most, GEMV_WARPS * 32, 0, k_gemv_ring<TY, NB, R>, m, ne0,
                   xq, xd, xs, nt, add);
            return;
        }
    }
    if constexpr (NB == 1 && R == 1 && GEMV_SPLIT > 1) {
        if (m.ks == GEMV_SPLIT) {
            gemv_onetask<TY, NB, R, GEMV_SPLIT>(q, m, ne0, xq, xd, xs, nt, add);
            return;
        }
    }
    gemv_onetask<TY, NB, R, 1>(q, m, ne0, xq, xd, xs, nt, add);
}

template <int TY, int R>
static void gemv_int_nb(const mfk_q &q, const gemv_many &m, int64_t ne0, const int8_t *xq,
                        const float *xd, const float *xs, int nt, int add)
{
    if (nt == 1)
        gemv_int_launch<TY, 1, R>(q, m, ne0, xq, xd, xs, nt, add);
    else if (nt == 2)
        gemv_int_launch<TY, 2, R>(q, m, ne0, xq, xd, xs, nt, add);
    else if (nt <= 4)
        gemv_int_launch<TY, 4, R>(q, m, ne0, xq, xd, xs, nt, add);
    else
        gemv_int_launch<TY, GEMV_NB, R>(q, m, ne0, xq, xd, xs, nt, add);
}

/* 1 when a product of nt tokens over w takes the integer GEMV
 * (k_gemv_q4k, k_gemv_q6k), which gemv_many batches. */
static int int_gemv(const struct mfk_weight *w, int nt)
{
    return (w->type == GGML_TYPE_Q4_K && nt < MFK_MMQ_MIN) || w->type == GGML_TYPE_Q6_K;
}

/* Warps a row of k_gemv_q4k / k_gemv_q6k for w at nt tokens (pair: two
 * rows a warp): GEMV_SPLIT or 1, as measured (GEMV_SPLIT_MIN above). */
static int gemv_split(const struct mfk_weight *w, int pair, int nt)
{
    const int wide = w->type == GGML_TYPE_Q4_K && w->ne0 > GEMV_SPLIT_Q4K_MAX;
    return !pair && nt == 1 && w->ne0 >= GEMV_SPLIT_MIN && !wide ? GEMV_SPLIT : 1;
}

/* Launches the integer GEMV for w[0] and those after it of the same type
 * and rows-a-warp (at most three); returns how many it took. */
static int gemv_int_group(const mfk_q &q, int n, const struct mfk_weight *const *w, float *const *y,
                          const int64_t *ldy, const int8_t *xq, const float *xd, const float *xs,
                          int nt, int add)
{
    const int pair = w[0]->ne1 >= GEMV_Q4K_PAIRS; /* x read once for two rows */
    const int R = pair ? 2 : 1;
    gemv_many m = {};
    m.ks = gemv_split(w[0], pair, nt);
    unsigned nb = 0, nk = 0;
    int k = 0;
    for (; k < n && k < 3 && w[k]->type == w[0]->type && (w[k]->ne1 >= GEMV_Q4K_PAIRS) == pair;
         k++) {
        m.w[k] = (const uint8_t *)w[k]->data, m.rb[k] = w[k]->row_bytes;
        m.ne1[k] = w[k]->ne1, m.y[k] = y[k], m.ldy[k] = ldy[k], m.b0[k] = nb, m.tk[k] = nk;
        const int64_t per = GEMV_WARPS / m.ks * R; /* rows a block */
        nb += (unsigned)((w[k]->ne1 + per - 1) / per);
        nk += (unsigned)((w[k]->ne1 + R - 1) / R);
    }
    for (int i = k; i < 4; i++)
        m.b0[i] = nb, m.tk[i] = nk;
    const int64_t ne0 = w[0]->ne0;
    m.ring = ring_ok(m, k, w[0]->type, ne0, R, nt);
    if (w[0]->type == GGML_TYPE_Q4_K && pair)
        gemv_int_nb<GGML_TYPE_Q4_K, 2>(q, m, ne0, xq, xd, xs, nt, add);
    else if (w[0]->type == GGML_TYPE_Q4_K)
        gemv_int_nb<GGML_TYPE_Q4_K, 1>(q, m, ne0, xq, xd, xs, nt, add);
    else if (pair)
        gemv_int_nb<GGML_TYPE_Q6_K, 2>(q, m, ne0, xq, xd, xs, nt, add);
    else
        gemv_int_nb<GGML_TYPE_Q6_K, 1>(q, m, ne0, xq, xd, xs, nt, add);
    return k;
}

/* One product; xq/xd: the input already quantized (k_quant_act), which
 * Q4_K and Q6_K weights use. */
template <int TY>
static void gemv_launch(const mfk_q &q, const struct mfk_weight *w, const float *x, int64_t ldx,
                        int nt, float *y, int64_t ldy, int add, const int8_t *xq, const float *xd,
                        const float *xs)
{
    dim3 grid((unsigned)((w->ne1 + GEMV_WARPS - 1) / GEMV_WARPS));
    const uint8_t *d = (const uint8_t *)w->data;
    if (TY == GGML_TYPE_Q4_K && nt >= MFK_MMQ_MIN) {
        mfk_mmq_q4k(q, w, xq, xd, xs, nt, y, ldy, add);
    } else if (TY == GGML_TYPE_Q4_K || TY == GGML_TYPE_Q6_K) {
        gemv_int_group(q, 1, &w, &y, &ldy, xq, xd, xs, nt, add);
    } else if (nt == 1) {
        mfk_go(q, grid, GEMV_WARPS * 32, 0, k_gemv<TY, 1>, d, w->row_bytes, w->ne0, w->ne1, x, ldx,
               nt, y, ldy, add);
    } else if (nt == 2) {
        mfk_go(q, grid, GEMV_WARPS * 32, 0, k_gemv<TY, 2>, d, w->row_bytes, w->ne0, w->ne1, x, ldx,
               nt, y, ldy, add);
    } else if (nt <= 4) {
        mfk_go(q, grid, GEMV_WARPS * 32, 0, k_gemv<TY, 4>, d, w->row_bytes, w->ne0, w->ne1, x, ldx,
               nt, y, ldy, add);
    } else {
        mfk_go(q, grid, GEMV_WARPS * 32, 0, k_gemv<TY, GEMV_NB>, d, w->row_bytes, w->ne0, w->ne1, x,
               ldx, nt, y, ldy, add);
    }
}

extern "C" int mfk_gemv_n(struct mfk_ctx *c, int n, const struct mfk_weight *const *w,
                          const float *x, int64_t ldx, int32_t nt, float *const *y,
                          const int64_t *ldy, int add, const struct mfk_q8 *xq8,
                          struct mf_err *err)
{
    int rc = 0, q8 = 0;
    for (int i = 0; !rc && i < n; i++) {
        rc = check_weight(w[i], "gemv", err);
        if (!rc && w[i]->ne0 != w[0]->ne0)
            rc = mf_err_set(err, MF_EINVAL, "CUDA gemv: weights of one input differ in width");
        q8 |= w[i]->type == GGML_TYPE_Q4_K || w[i]->type == GGML_TYPE_Q6_K;
    }
    if (rc || nt <= 0 || n <= 0)
        return rc;
    if (((uintptr_t)x & 15) || (ldx & 3))
        return mf_err_set(err, MF_EINVAL, "CUDA gemv: activations must be 16-byte aligned rows");
    if (q8 && nt > MFK_MMQ_TOKENS && (rc = mfk_mmq_ready(c, err)))
        return rc;
    const mfk_q q = mfk_queue(c);
    const int64_t ne0 = w[0]->ne0;
    int8_t *xq = nullptr;
    float *xd = nullptr, *xs = nullptr;
    if (q8 && xq8) { /* the kernel that made x wrote its 8-bit copy too */
        if ((rc = q8_check(xq8, ne0, "gemv", err)))
            return rc;
        xq = xq8->q, xd = xq8->d, xs = xq8->s;
    } else if (q8) { /* the input quantized once for all the products */
        const size_t nq = (size_t)nt * (size_t)ne0, nd = (size_t)nt * (size_t)(ne0 / 32);
        void *buf = nullptr;
        if ((rc = mfk_scratch(c, nq + 2 * nd * sizeof(float), &buf, err)))
            return rc;
        xq = (int8_t *)buf;
        xd = (float *)(void *)(xq + nq); /* nq is a multiple of 256 */
        xs = xd + nd;
        mfk_go(q, dim3((unsigned)(ne0 / 256), (unsigned)nt), 256, 0, k_quant_act, x, ldx, ne0, xq,
               xd, xs);
    }
    for (int i = 0; i < n;) {
        if (int_gemv(w[i], nt)) {
            i += gemv_int_group(q, n - i, w + i, y + i, ldy + i, xq, xd, xs, nt, add);
            continue;
        }
        MFK_TYPE_SWITCH(w[i]->type, TY,
                        gemv_launch<TY>(q, w[i], x, ldx, nt, y[i], ldy[i], add, xq, xd, xs));
        i++;
    }
    return mfk_launched("gemv", err);
}

extern "C" int mfk_gemv(struct mfk_ctx *c, const struct mfk_weight *w, const float *x, int64_t ldx,
                        int32_t nt, float *y, int64_t ldy, int add, struct mf_err *err)
{
    return mfk_gemv_n(c, 1, &w, x, ldx, nt, &y, &ldy, add, NULL, err);
}

/* ------------------------------------------------------------------------
 * RoPE and the paged K/V store
 * ---------------------------------------------------------------------- */

/* grid (T, ceil((n_head + n_head_kv) / hb)): block (t, y) rotates heads
 * y * hb .. y * hb + hb - 1 of token t, the query heads then the key heads
 * (each key rotated in place and stored to its block and slot), and
 * stores the values of the KV heads among them. A few heads a block
 * rather than one block a token: at batch 1 the 40 heads of Llama 3 had
 * one multiprocessor (6.2 us under ncu). */
__global__ void k_rope_store(struct mfk_kv_shape s, int32_t layer, float *q, int64_t ldq, float *k,
                             const float *v, int64_t ldkv, const float *rope, const int32_t *pos,
                             const int32_t *blk, __half *kv, int hb)
{
    pdl_start();
    const int t = blockIdx.x, hd = s.head_dim, half_hd = hd / 2, half_rot = s.n_rot / 2;
    const int h0 = (int)blockIdx.y * hb, nh = s.n_head + s.n_head_kv;
    const int h1 = h0 + hb < nh ? h0 + hb : nh;
    const float *cs = rope + (int64_t)t * s.n_rot;
    const float qsc = s.q_scale > 0.0f ? s.q_scale : 1.0f;
    const int slot = pos[t] % KVB;
    const int32_t b = blk[t];
    for (int p = threadIdx.x; p < (h1 - h0) * half_hd; p += blockDim.x) {
        const int head = h0 + p / half_hd, i = p % half_hd;
        /* the pair's two dimensions: (2i, 2i + 1), or NeoX's (i, i + n_rot / 2);
         * pairs past n_rot keep their values */
        const int a = s.neox && i < half_rot ? i : s.neox ? s.n_rot + 2 * (i - half_rot) : 2 * i;
        const int bb = s.neox && i < half_rot ? i + half_rot : a + 1;
        const bool is_k = head >= s.n_head;
        float *y = is_k ? k + (int64_t)t * ldkv + (int64_t)(head - s.n_head) * hd
                        : q + (int64_t)t * ldq + (int64_t)head * hd;
        float x0 = y[a], x1 = y[bb];
        if (i < half_rot) {
            const float cv = cs[2 * i], sv = cs[2 * i + 1];
            const float r0 = __fsub_rn(__fmul_rn(x0, cv), __fmul_rn(x1, sv));
            const float r1 = __fadd_rn(__fmul_rn(x0, sv), __fmul_rn(x1, cv));
            x0 = r0;
            x1 = r1;
            if (is_k || qsc == 1.0f) {
                y[a] = x0;
                y[bb] = x1;
            }
        }
        if (!is_k && qsc != 1.0f) {
            y[a] = __fmul_rn(x0, qsc);
            y[bb] = __fmul_rn(x1, qsc);
        }
        if (is_k && kv) {
            __half *kt = kv + kv_index(s, b, layer, 0, head - s.n_head);
            kt[(size_t)a * KVB + slot] = __float2half_rn(x0);
            kt[(size_t)bb * KVB + slot] = __float2half_rn(x1);
        }
    }
    const int v0 = (h0 > s.n_head ? h0 : s.n_head) - s.n_head, v1 = h1 - s.n_head;
    for (int e = v0 * hd + threadIdx.x; kv && e < v1 * hd; e += blockDim.x) {
        const int head = e / hd, d = e % hd;
        __half *vt = kv + kv_index(s, b, layer, 1, head);
        vt[(size_t)slot * hd + d] = __float2half_rn(v[(int64_t)t * ldkv + e]);
    }
}

/* The 8-bit store, after k_rope_store rotated k in place: grid (T,
 * n_head_kv), warp 0 the keys and warp 1 the values, the row's absmax over the
 * head by shuffles, q = rint(x * 127 / absmax) and the scale absmax / 127
 * (0 for an all-zero row). */
__global__ void k_store_q8(struct mfk_kv_shape s, int32_t layer, const float *k, const float *v,
                           int64_t ldkv, const int32_t *pos, const int32_t *blk, uint8_t *kv)
{
    pdl_start();
    const int t = blockIdx.x, head = blockIdx.y, is_v = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int hd = s.head_dim;
    const float *x = (is_v ? v : k) + (int64_t)t * ldkv + (int64_t)head * hd;
    const int slot = pos[t] % KVB;
    float amax = 0.0f;
    for (int d = lane; d < hd; d += 32)
        amax = fmaxf(amax, fabsf(x[d]));
    for (int o = 16; o > 0; o >>= 1)
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
    int8_t *u = (int8_t *)(kv + kv8_offset(s, blk[t], layer, is_v, head));
    for (int d = lane; d < hd; d += 32) {
        const int8_t qv = (int8_t)fmaxf(-127.0f, fminf(127.0f, rintf(x[d] * inv)));
        u[is_v ? (size_t)slot * hd + d : (size_t)d * KVB + slot] = qv;
    }
    if (lane == 0)
        ((float *)(u + (size_t)KVB * hd))[slot] = amax / 127.0f;
}

extern "C" int mfk_rope_store(struct mfk_ctx *c, const struct mfk_kv_shape *s, int32_t layer,
                              int32_t T, float *q, int64_t ldq, float *k, const float *v,
                              int64_t ldkv, const float *rope, const int32_t *pos,
                              const int32_t *blk, void *kv, struct mf_err *err)
{
    if (T <= 0)
        return 0;
    if (s->head_dim % 2 || s->n_rot % 2 || s->n_rot > s->head_dim)
        return mf_err_set(err, MF_EINVAL, "CUDA rope: head_dim %d / n_rot %d not supported",
                          s->head_dim, s->n_rot);
    /* a head a block for a few tokens, eight heads a block past that */
    const int hb = T < 16 ? 1 : 8, nh = s->n_head + s->n_head_kv;
    mfk_go(mfk_queue(c), dim3((unsigned)T, (unsigned)((nh + hb - 1) / hb)), 64 * hb, 0,
           k_rope_store, *s, layer, q, ldq, k, v, ldkv, rope, pos, blk,
           s->q8 ? nullptr : reinterpret_cast<__half *>(kv), hb);
    int rc = mfk_launched("rope_store", err);
    if (!rc && s->q8) {
        mfk_go(mfk_queue(c), dim3((unsigned)T, (unsigned)s->n_head_kv), 64, 0, k_store_q8, *s,
               layer, k, v, ldkv, pos, blk, static_cast<uint8_t *>(kv));
        rc = mfk_launched("store (8-bit)", err);
    }
    return rc;
}

/* ------------------------------------------------------------------------
 * SwiGLU, gather, argmax
 * ---------------------------------------------------------------------- */

__device__ __forceinline__ float silu_mul(float x, float u)
{
    return __fmul_rn(__fdiv_rn(x, __fadd_rn(1.0f, expf(-x))), u);
}

/* Four elements a thread over the rows x n matrix taken as one run of
 * float4s (n4 a row), grid-stride: a thread per element and a block per
 * 256 of them spent more time starting blocks than computing (prefill:
 * 177 us a layer for 2048 x 14336, twice its traffic at copy speed). The
 * loop is warp-uniform when there is an 8-bit copy: n % 256 == 0 keeps a
 * warp's 32 float4s in one row and whole 32-element blocks. */
__global__ void k_swiglu(float *g, const float *u, int64_t ld, int64_t n4, int64_t total,
                         struct mfk_q8 q8)
{
    pdl_start();
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total;
         e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t row = e / n4, i = e - row * n4;
        float4 *gp = reinterpret_cast<float4 *>(g + row * ld) + i;
        const float4 x = *gp, v = reinterpret_cast<const float4 *>(u + row * ld)[i];
        const float4 o = make_float4(silu_mul(x.x, v.x), silu_mul(x.y, v.y), silu_mul(x.z, v.z),
                                     silu_mul(x.w, v.w));
        *gp = o;
        if (q8.q) {
            const int64_t nb = row * (n4 / 8); /* the row's first 32-element block */
            q8_store4(o, i, q8.q + nb * 32, q8.d + nb, q8.s + nb);
        }
    }
}

/* The same a thread per element, for rows that are not float4s. */
__global__ void k_swiglu1(float *g, const float *u, int64_t ld, int64_t n)
{
    pdl_start();
    float *gr = g + (int64_t)blockIdx.y * ld;
    const float *ur = u + (int64_t)blockIdx.y * ld;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        gr[i] = silu_mul(gr[i], ur[i]);
}

extern "C" int mfk_swiglu(struct mfk_ctx *c, float *g, const float *u, int64_t ld, int32_t rows,
                          int64_t n, const struct mfk_q8 *q8, struct mf_err *err)
{
    if (rows <= 0)
        return 0;
    if (int rc = q8_check(q8, n, "swiglu", err))
        return rc;
    if ((n & 3) || (ld & 3) || ((uintptr_t)g & 15) || ((uintptr_t)u & 15)) {
        if (q8)
            return mf_err_set(err, MF_EINVAL, "CUDA swiglu: an 8-bit copy needs aligned rows");
        unsigned bx = (unsigned)((n + 255) / 256);
        mfk_go(mfk_queue(c), dim3(bx > 64 ? 64 : bx, (unsigned)rows), 256, 0, k_swiglu1, g, u, ld,
               n);
        return mfk_launched("swiglu", err);
    }
    const int64_t total = (int64_t)rows * (n / 4);
    const int64_t blocks = (total + 255) / 256;
    mfk_go(mfk_queue(c), (unsigned)(blocks < 132 * 16 ? blocks : 132 * 16), 256, 0, k_swiglu, g, u,
           ld, n / 4, total, q8 ? *q8 : mfk_q8{});
    return mfk_launched("swiglu", err);
}

/* silu(g) * u rounded to H, rows x n dense in out (the GEMM's rounded
 * input; g is not written): mfk_swiglu then mfk_round_half in one pass.
 * V 4: float4s (n, ld multiples of 4, rows 16-byte aligned). */
template <typename H, int V>
__global__ void k_swiglu_half(const float *g, const float *u, int64_t ld, int64_t nv,
                              int64_t total, H *out)
{
    pdl_start();
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total;
         e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t row = e / nv, i = e - row * nv;
        H *o = out + row * nv * V + i * V;
        if constexpr (V == 4) {
            const float4 x = reinterpret_cast<const float4 *>(g + row * ld)[i];
            const float4 v = reinterpret_cast<const float4 *>(u + row * ld)[i];
            store_half4(o, make_float4(silu_mul(x.x, v.x), silu_mul(x.y, v.y), silu_mul(x.z, v.z),
                                       silu_mul(x.w, v.w)));
        } else {
            *o = to_half<H>(silu_mul(g[row * ld + i], u[row * ld + i]));
        }
    }
}

template <typename H>
static void swiglu_half_launch(const mfk_q &q, const float *g, const float *u, int64_t ld,
                               int32_t rows, int64_t n, H *out)
{
    const bool v4 = n % 4 == 0 && ld % 4 == 0 && ((uintptr_t)g & 15) == 0 &&
                    ((uintptr_t)u & 15) == 0 && ((uintptr_t)out & 7) == 0;
    const int64_t total = (int64_t)rows * (v4 ? n / 4 : n), blocks = (total + 255) / 256;
    const unsigned grid = (unsigned)(blocks < 132 * 16 ? blocks : 132 * 16);
    if (v4)
        mfk_go(q, grid, 256, 0, k_swiglu_half<H, 4>, g, u, ld, n / 4, total, out);
    else
        mfk_go(q, grid, 256, 0, k_swiglu_half<H, 1>, g, u, ld, n, total, out);
}

extern "C" int mfk_swiglu_half(struct mfk_ctx *c, const float *g, const float *u, int64_t ld,
                               int32_t rows, int64_t n, void *out, int bf16, struct mf_err *err)
{
    if (rows <= 0 || n <= 0)
        return 0;
    if (bf16)
        swiglu_half_launch(mfk_queue(c), g, u, ld, rows, n, (__nv_bfloat16 *)out);
    else
        swiglu_half_launch(mfk_queue(c), g, u, ld, rows, n, (__half *)out);
    return mfk_launched("swiglu (rounded)", err);
}

__global__ void k_gather(const float *src, int64_t lds, const int32_t *rows, float *dst,
                         int64_t ldd, int64_t n)
{
    pdl_start();
    const float *s = src + (int64_t)rows[blockIdx.x] * lds;
    float *d = dst + (int64_t)blockIdx.x * ldd;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
        d[i] = s[i];
}

extern "C" int mfk_gather(struct mfk_ctx *c, const float *src, int64_t lds, const int32_t *rows,
                          int32_t n, float *dst, int64_t ldd, int64_t n_cols, struct mf_err *err)
{
    if (n <= 0)
        return 0;
    mfk_go(mfk_queue(c), n, 256, 0, k_gather, src, lds, rows, dst, ldd, n_cols);
    return mfk_launched("gather", err);
}

__global__ void k_scatter_add(const float *src, int64_t lds, const int32_t *rows,
                              const float *scales, float *dst, int64_t ldd, int64_t n)
{
    pdl_start();
    const float *s = src + (int64_t)blockIdx.x * lds;
    float *d = dst + (int64_t)rows[blockIdx.x] * ldd;
    const float k = scales[blockIdx.x];
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
        d[i] += k * s[i];
}

extern "C" int mfk_scatter_add(struct mfk_ctx *c, const float *src, int64_t lds,
                               const int32_t *rows, const float *scales, int32_t n, float *dst,
                               int64_t ldd, int64_t n_cols, struct mf_err *err)
{
    if (n <= 0)
        return 0;
    mfk_go(mfk_queue(c), n, 256, 0, k_scatter_add, src, lds, rows, scales, dst, ldd, n_cols);
    return mfk_launched("scatter-add", err);
}

__device__ __forceinline__ bool better(float v, int64_t i, float bv, int64_t bi)
{
    if (v != v)
        return false;
    if (bi < 0 || v > bv)
        return true;
    return v == bv && i < bi;
}

__global__ void k_argmax(const float *x, int64_t ldx, int64_t n, int32_t *out)
{
    pdl_start();
    __shared__ float sv[256];
    __shared__ int64_t si[256];
    const float *r = x + (int64_t)blockIdx.x * ldx;
    float bv = -INFINITY;
    int64_t bi = -1;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
        if (better(r[i], i, bv, bi))
            bv = r[i], bi = i;
    sv[threadIdx.x] = bv;
    si[threadIdx.x] = bi;
    __syncthreads();
    for (int o = blockDim.x / 2; o > 0; o >>= 1) {
        if ((int)threadIdx.x < o && si[threadIdx.x + o] >= 0 &&
            better(sv[threadIdx.x + o], si[threadIdx.x + o], sv[threadIdx.x], si[threadIdx.x])) {
            sv[threadIdx.x] = sv[threadIdx.x + o];
            si[threadIdx.x] = si[threadIdx.x + o];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0)
        out[blockIdx.x] = (int32_t)(si[0] < 0 ? 0 : si[0]);
}

extern "C" int mfk_argmax(struct mfk_ctx *c, const float *x, int64_t ldx, int32_t rows, int64_t n,
                          int32_t *out, struct mf_err *err)
{
    if (rows <= 0)
        return 0;
    mfk_go(mfk_queue(c), rows, 256, 0, k_argmax, x, ldx, n, out);
    return mfk_launched("argmax", err);
}
