/*
 * qgemm.cu: Q4_K and Q6_K weights times a step of a few dozen tokens on the
 * bf16 tensor cores, dequantized in registers on the way (mfk_gemm's
 * products of up to mfk_ctx_qgemm's tokens).
 *
 * The alternatives: mfk_gemm's cuBLAS path dequantizes every weight to
 * bf16 in memory on each call (k_rows_half + cuBLAS: 18% of a batch-64
 * Q4_K_M step on an H200 for the Q6_K matrices alone), and mmq.cu's int8
 * tiles pay float work per 32-element sub-block for its two scales (43
 * instructions an mma; 62% of that step).
 * Here each warp turns its rows' GGUF blocks into mma A fragments against
 * the input mfk_gemm rounded to bf16, mma.m16n8k16 keeping fp32 sums.
 * Q6_K's fragments, and Q4_K's with mfk_ctx_qgemm_exact, are bit for bit
 * what mfk_dequant_half writes ((d * sc) * q - dmin * m for Q4_K,
 * (d * sc) * (q - 32) for Q6_K, exact in float, then rounded to bf16), so
 * the products equal cuBLAS's on the dequantized weights up to the order of
 * the fp32 additions. By default Q4_K's are formed in bf16 arithmetic
 * (qg_afrag_fast: 3 instructions a weight pair, not 7; the dequantization
 * bounds this kernel), its sub-blocks' scales and mins rounded to bf16:
 * 4.2e-3 relative error in the products against the exact weights' 1e-6,
 * about what the input's own bf16 rounding costs; H200 Llama-3-8B Q4_K_M
 * decode +7.6% at batch 16, +5.8% at 64 (bench/results/2026-12-02.md).
 *
 * A block of 8 warps takes TM rows x TN tokens (32 or 64); a warp 32 rows
 * (two m16 tiles, so each B fragment serves two mma) x all TN tokens (so
 * each A fragment serves TN / 8), over its K-group's share of each stage.
 * A stage is the rows' super-blocks (Q4_K: one, 144 bytes a row; Q6_K: a
 * pair, 420 bytes, 4-byte aligned where one alone is not) and the tokens'
 * bf16 inputs for those columns, in a pipeline of 2 to 4 stages. A stage
 * of weight rows comes by one tensor-map copy (counted on the stage's
 * mbarrier; qg_tma), its token rows by another; Q6_K rows not a multiple
 * of 16 bytes apart (K not a multiple of 2048) by cp.async (qg_stager).
 * The weights of the first stages are asked for
 * before the wait on the previous kernel (programmatic launch: nothing
 * writes weights). When the tiles are too few to fill the multiprocessors,
 * K is split over a cluster of up to 8 blocks (mfk_qgemm_splits), whose
 * partial tiles meet through distributed shared memory and are added in
 * rank order. Every sum has a fixed order, so a product's result does not
 * depend on timing.
 *
 * A lane's A registers hold k columns 2qd, 2qd+1, 2qd+8, 2qd+9 of a k16
 * chunk and its B registers the same columns of a token. A dot product does
 * not care which columns the slots hold as long as A and B agree, so here
 * the four slots take columns 4qd..4qd+3: four consecutive bytes of a
 * Q4_K/Q6_K row (one 32-bit load) and four consecutive bf16 inputs (one
 * 8-byte load for both B registers; token rows 32 bytes past a multiple of
 * 128 apart, so a half-warp's loads hit 32 distinct banks).
 *
 * H200, Llama-3-8B Q4_K_M decode (bench/results/2026-12-01.md):
 * batch 16 2,177 tokens/s against 1,696, 32 3,921 against 2,979, 64
 * 5,428 against 4,311 for mmq.cu and dequantization + cuBLAS; at 8 tokens
 * mmq.cu stays ahead (1,380 against 1,038) and past 64 cuBLAS on dequantized rows
 * (6,919 against 6,375-6,724 at 128), hence the limits (runtime/cuda/cuda_plan.h,
 * MFK_QGEMM_MAX_TOKENS). Still far from the weights' roofline: the gate
 * product (14336 x 4096) at 64 tokens takes 51 us, 15% of copy bandwidth;
 * ncu: 1.6 instructions a cycle, the tensor pipe 28% busy, the stalls
 * spread (memory scoreboard 0.8 cycles an instruction, math-pipe throttle
 * 0.7, fixed-latency waits 0.7, MIO 0.4, dispatch 0.4). Tried and not kept:
 * wgmma with A in registers and the input in core-matrix shared memory
 * (correct, but 66 against 51 us: the dequantization, not the mma, is the
 * bound; commit 3fb189d), one block a multiprocessor for Q4_K (188
 * registers: 5.0 cycles between a warp's instructions), the stage loop not
 * unrolled (no change).
 */
#include "kernels/kernels.h"
#include "kernels/internal.cuh"

#include <climits>
#include <cstdint>

#include <cooperative_groups.h>
#include <cuda.h> /* CUtensorMap; the encoder comes through the runtime (qg_map) */
#include <cudaTypedefs.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "common/ggml_type.h"

namespace cg = cooperative_groups;

#define QG_THREADS 256
#define QG_SMEM_MAX 232448 /* 227 KiB: a Hopper block's dynamic shared memory, at most */
/* The parts of a stage that tensor-map copies bring (qg_tma; QG_TMA_W: the
 * weight rows, QG_TMA_X: the token rows); the rest cp.async (qg_stager). */
#define QG_TMA_W 1
#define QG_TMA_X 2
/* Q4_K's token rows by tensor map from kernels of this many n8 tiles (for
 * measuring; 4: every Q4_K kernel, 8: the 64-token one, 16: none) */
#ifndef QG_TMA_X_NN
#define QG_TMA_X_NN 4
#endif
/* Q6_K's stages by tensor map where its rows allow (for measuring; 0: by
 * cp.async alone) */
#ifndef QG_TMA_Q6K
#define QG_TMA_Q6K 1
#endif
#define QG_MAGIC 8388608.0f /* 2^23: float(0x4B000000 | b) - QG_MAGIC = b, for b < 2^23 */

/* Per type: rows a block (TM), K-groups (KG: TM / 32 x KG = 8 warps),
 * super-blocks a stage (SBS), staged bytes a row (WROW), their stride in
 * shared memory (WSTRIDE: a multiple of 4 words plus 4 or 12, so the eight
 * rows of a fragment load land on distinct banks), the cp.async copy size,
 * the element size of the weight's tensor map (WE), and the blocks a
 * multiprocessor runs at once (MB: Q4_K fits two in 128 registers and two
 * 53 KiB stages each; Q6_K's 95 KiB stages allow one). */
template <int TY> struct qg_type;
template <> struct qg_type<GGML_TYPE_Q4_K> {
    static constexpr int TM = 128, KG = 2, SBS = 1, WROW = 144, WSTRIDE = 144, CP = 16, MB = 2;
    static constexpr int WE = 1;
    /* A stage's weight rows by one tensor-map copy, and its token rows by
     * another. H200, us, a bulk copy a row / by tensor map, the
     * tokens by cp.async up to 32 and by map from 33: 14336 x 4096 at 16
     * tokens 30.3 / 25.9, at 64 40.6 / 35.0; 4096 x 14336 at 16 43.3 /
     * 35.4, at 64 59.4 / 47.0. The tokens by map at 32 and under too, their
     * box cut to the step's rows (x_rows): decode batch 16 +0.2-1.3%, 32
     * +1.0-1.7% in alternating runs, though the 1024 x 4096 product alone
     * is 1-2 us slower (bench/results/2026-12-03.md). */
    static constexpr int tma(int nn)
    {
        return nn >= QG_TMA_X_NN ? QG_TMA_W | QG_TMA_X : QG_TMA_W;
    }
};
template <> struct qg_type<GGML_TYPE_Q6_K> {
    static constexpr int TM = 64, KG = 4, SBS = 2, WROW = 420, WSTRIDE = 432, CP = 4, MB = 1;
    static constexpr int WE = 4;
    /* A stage's 420 bytes a row start 4 (st & 3) bytes past a 16-byte
     * boundary, where a tensor-map box may not start (a box at st * 105
     * words faulted: illegal instruction in every thread): the box of 108
     * words starts at the boundary below, and the slice reads its rows
     * 4 (st & 3) bytes in (qg_tma::shift). Rows must be a multiple of 16
     * bytes apart (mfk_qgemm: 2048 columns); others keep cp.async. */
    static constexpr int tma(int nn)
    {
        return !QG_TMA_Q6K ? 0 : nn >= QG_TMA_X_NN ? QG_TMA_W | QG_TMA_X : QG_TMA_W;
    }
};

/* A kernel's shapes: NN n8 tiles of tokens, T::MB blocks a multiprocessor
 * sharing its shared memory; MAP: tensor maps where the type takes them. */
template <int TY, int NN, bool MAP = true> struct qg_cfg : qg_type<TY> {
    using T = qg_type<TY>;
    static constexpr int TN = 8 * NN;               /* tokens a block */
    static constexpr int TMA = MAP ? T::tma(NN) : 0; /* the parts tensor maps stage */
    static constexpr int KSTAGE = 256 * T::SBS;     /* columns a stage */
    static constexpr int XSTRIDE = 2 * KSTAGE + 32; /* bytes between staged token rows */
    static constexpr int W_BYTES = T::TM * T::WSTRIDE, X_BYTES = TN * XSTRIDE;
    static constexpr int STAGE = W_BYTES + X_BYTES;
    static constexpr int BUDGET = QG_SMEM_MAX / T::MB - (T::MB > 1 ? 1024 : 0);
    static constexpr int P = BUDGET / STAGE < 4 ? BUDGET / STAGE : 4; /* stages */
    static constexpr int TSTRIDE = T::TM + 4; /* floats between the result tile's token rows */
    static constexpr int PART = (T::KG - 1) * T::TM * TN * 4; /* the other K-groups' sums */
    static constexpr int EPI = PART + TN * TSTRIDE * 4;
    static constexpr int BARS = ((P * STAGE > EPI ? P * STAGE : EPI) + 7) / 8 * 8;
    static constexpr int SMEM = BARS + (TMA ? 8 * P : 0); /* the stages' barriers last */
    static_assert(P >= 2 && SMEM <= BUDGET, "a double-buffered pipeline at least");
    static_assert(!(TMA & QG_TMA_W) ||
                      (T::WSTRIDE % 16 == 0 && T::WSTRIDE % T::WE == 0 && T::WROW % T::WE == 0 &&
                       T::WSTRIDE >= T::WROW + (T::WROW % 16 ? 16 - T::WE : 0)),
                  "a box row of WSTRIDE bytes holds a stage's row from the 16-byte boundary "
                  "below it");
    static_assert(!TMA || (W_BYTES % 128 == 0 && STAGE % 128 == 0),
                  "tensor-map copies land on 128-byte boundaries");
    static_assert(T::TM / 32 * T::KG == QG_THREADS / 32, "eight warps");
    static_assert(T::WROW % T::CP == 0 && XSTRIDE % 128 == 32, "copies and banks");
};

/* Byte i of w as the float 2^23 + byte: one PRMT (selector: byte i, two
 * zero bytes of the constant, its 0x4B). */
__device__ __forceinline__ float qg_byte(uint32_t w, int i)
{
    return __uint_as_float(__byte_perm(w, 0x4B000000u, 0x7440 | i));
}

/* Byte i of w as the float 1 + byte 2^-23 (the bits 0x3F8000bb). */
__device__ __forceinline__ float qg_one(uint32_t w, int i)
{
    return __uint_as_float(__byte_perm(w, 0x3F800000u, 0x7650 | i));
}

__device__ __forceinline__ uint32_t qg_pack(float lo, float hi)
{
    const __nv_bfloat162 p = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t *>(&p);
}

/* Four weights (columns 4qd..4qd+3 of a chunk) of row h (0: g, 1: g + 8)
 * of m16 tile mt into the lane's A registers: the slots of columns 2qd,
 * 2qd+1 (a[mt][h]) and 2qd+8, 2qd+9 (a[mt][2 + h]). */
__device__ __forceinline__ void qg_afrag(uint32_t (&a)[2][4], int mt, int h, const float (&v)[4])
{
    a[mt][h] = qg_pack(v[0], v[1]);
    a[mt][2 + h] = qg_pack(v[2], v[3]);
}

/* FAST: the same four weights as bf16 pairs in bf16 arithmetic, three
 * instructions a pair instead of seven: bytes b0, b1 of nib under 0x43 are
 * the bf16 values 128 + b (one PRMT), 128 comes off exactly, and one fma
 * with the sub-block's scale and min rounded to bf16 rounds once. The
 * weights then differ from mfk_dequant_half's by those two roundings
 * (2^-9 of the scale and of the min at most). */
__device__ __forceinline__ void qg_afrag_fast(uint32_t (&a)[2][4], int mt, int h, uint32_t nib,
                                              float d1, float m1)
{
    const __nv_bfloat162 s2 = __floats2bfloat162_rn(d1, d1); /* one F2FP: rounded, paired */
    const __nv_bfloat162 n2 = __floats2bfloat162_rn(-m1, -m1);
    const __nv_bfloat162 k2 = __bfloat162bfloat162(__float2bfloat16_rn(128.0f));
    const uint32_t p01 = __byte_perm(nib, 0x43u, 0x4140), p23 = __byte_perm(nib, 0x43u, 0x4342);
    const __nv_bfloat162 v01 =
        __hfma2(__hsub2(*reinterpret_cast<const __nv_bfloat162 *>(&p01), k2), s2, n2);
    const __nv_bfloat162 v23 =
        __hfma2(__hsub2(*reinterpret_cast<const __nv_bfloat162 *>(&p23), k2), s2, n2);
    a[mt][h] = *reinterpret_cast<const uint32_t *>(&v01);
    a[mt][2 + h] = *reinterpret_cast<const uint32_t *>(&v23);
}

__device__ __forceinline__ float qg_h2f(uint16_t h)
{
    return __half2float(__ushort_as_half(h));
}

/* 4 bytes at p: aligned, or (MIS) 2 bytes past an aligned word (a Q6_K
 * pair's second super-block), joined from the two words around them. */
template <bool MIS> __device__ __forceinline__ uint32_t qg_ld32(const uint8_t *p)
{
    if (!MIS)
        return *reinterpret_cast<const uint32_t *>(p);
    const uint32_t *a = reinterpret_cast<const uint32_t *>(p - 2);
    return __byte_perm(a[0], a[1], 0x5432);
}

/* One k16 chunk (stage columns kofs..kofs + 15) of the warp's two m16 tiles
 * (a[0], a[1]) against every n8 tile of the block's tokens; xg = this
 * lane's token row g and column 4qd of the staged input. */
template <int NN, int XS>
__device__ __forceinline__ void qg_mma(float (&acc)[2][NN][4], const uint32_t (&a)[2][4],
                                       const uint8_t *xg, int kofs)
{
#pragma unroll
    for (int n = 0; n < NN; n++) {
        const uint2 b = *reinterpret_cast<const uint2 *>(xg + n * 8 * XS + 2 * kofs);
        mma_16816<true>(acc[0][n], a[0], b.x, b.y);
        mma_16816<true>(acc[1][n], a[1], b.x, b.y);
    }
}

/* The rows a lane dequantizes in a warp's 32: [mt][h] = m16 tile mt, row g
 * (h 0) or g + 8 (h 1). */
template <int WS>
__device__ __forceinline__ void qg_rows(const uint8_t *ws, int rw, int g, const uint8_t *(&rp)[2][2])
{
#pragma unroll
    for (int mt = 0; mt < 2; mt++)
#pragma unroll
        for (int h = 0; h < 2; h++)
            rp[mt][h] = ws + (32 * rw + 16 * mt + g + 8 * h) * WS;
}

/* Q4_K, K-group kg of 2: sub-blocks 4 kg .. 4 kg + 3 of the stage's
 * super-block. Sub-block j's elements 32 j + 16 hf + 4 qd + i are the low
 * (even j) or high nibbles of bytes 16 hf + 4 qd + i of the 32-byte group
 * j / 2, so one word serves two chunks. */
template <int NN, bool FAST>
__device__ __forceinline__ void qg_slice_q4k(float (&acc)[2][NN][4], const uint8_t *ws,
                                             const uint8_t *xg, int rw, int kg, int g, int qd)
{
    using C = qg_cfg<GGML_TYPE_Q4_K, NN>;
    const uint8_t *rp[2][2];
    qg_rows<C::WSTRIDE>(ws, rw, g, rp);
    float dd[2][2], dm[2][2];      /* the super-block's d and dmin, times 2^23 (exact) */
    uint32_t scw[2][2], mnw[2][2]; /* the 4 sub-blocks' 6-bit scales and mins, a byte each */
#pragma unroll
    for (int mt = 0; mt < 2; mt++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const uint4 hd = *reinterpret_cast<const uint4 *>(rp[mt][h]);
            dd[mt][h] = qg_h2f((uint16_t)(hd.x & 0xFFFF)) * QG_MAGIC;
            dm[mt][h] = qg_h2f((uint16_t)(hd.x >> 16)) * QG_MAGIC;
            if (kg == 0) { /* ggml's get_scale_min_k4, four sub-blocks at once */
                scw[mt][h] = hd.y & 0x3F3F3F3Fu;
                mnw[mt][h] = hd.z & 0x3F3F3F3Fu;
            } else {
                scw[mt][h] = (hd.w & 0x0F0F0F0Fu) | ((hd.y >> 2) & 0x30303030u);
                mnw[mt][h] = ((hd.w >> 4) & 0x0F0F0F0Fu) | ((hd.z >> 2) & 0x30303030u);
            }
        }
#pragma unroll
    for (int pp = 0; pp < 2; pp++) { /* byte group 2 kg + pp: sub-blocks 4 kg + 2 pp (+1) */
        float d1[2][2][2], m1[2][2][2]; /* [lh][mt][h] */
#pragma unroll
        for (int lh = 0; lh < 2; lh++)
#pragma unroll
            for (int mt = 0; mt < 2; mt++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    /* d 2^23 (1 + sc 2^-23) - d 2^23 = d sc exactly
                     * before the fma's one rounding: __fmul_rn(d, sc) in
                     * one instruction */
                    d1[lh][mt][h] = fmaf(dd[mt][h], qg_one(scw[mt][h], 2 * pp + lh), -dd[mt][h]);
                    m1[lh][mt][h] = fmaf(dm[mt][h], qg_one(mnw[mt][h], 2 * pp + lh), -dm[mt][h]);
                }
#pragma unroll
        for (int hf = 0; hf < 2; hf++) {
            uint32_t q[2][2];
#pragma unroll
            for (int mt = 0; mt < 2; mt++)
#pragma unroll
                for (int h = 0; h < 2; h++)
                    q[mt][h] = *reinterpret_cast<const uint32_t *>(
                        rp[mt][h] + 16 + 32 * (2 * kg + pp) + 16 * hf + 4 * qd);
#pragma unroll
            for (int lh = 0; lh < 2; lh++) {
                uint32_t a[2][4];
#pragma unroll
                for (int mt = 0; mt < 2; mt++)
#pragma unroll
                    for (int h = 0; h < 2; h++) {
                        const uint32_t nib = (lh ? q[mt][h] >> 4 : q[mt][h]) & 0x0F0F0F0Fu;
                        if constexpr (FAST) {
                            qg_afrag_fast(a, mt, h, nib, d1[lh][mt][h], m1[lh][mt][h]);
                        } else {
                            float v[4];
                            /* d1 * q exact in float, so the fma rounds as
                             * __fsub_rn(__fmul_rn(d1, q), m1) does */
#pragma unroll
                            for (int i = 0; i < 4; i++)
                                v[i] =
                                    fmaf(qg_byte(nib, i) - QG_MAGIC, d1[lh][mt][h], -m1[lh][mt][h]);
                            qg_afrag(a, mt, h, v);
                        }
                    }
                qg_mma<NN, C::XSTRIDE>(acc, a, xg, 128 * kg + 32 * (2 * pp + lh) + 16 * hf);
            }
        }
    }
}

/* Q6_K, K-group kg of 4: half c = kg & 1 of the pair's super-block kg >> 1
 * (MIS: the second, 2 bytes off a word). Element 128 c + 32 k4 + l is the
 * nibble (k4 >> 1) of ql[64 c + 32 (k4 & 1) + l] with bits 2 k4.. of
 * qh[32 c + l] above it, minus 32, times d * scales[8 c + l / 16 + 2 k4]. */
template <int NN, bool MIS>
__device__ __forceinline__ void qg_slice_q6k(float (&acc)[2][NN][4], const uint8_t *ws,
                                             const uint8_t *xg, int rw, int kg, int g, int qd)
{
    using C = qg_cfg<GGML_TYPE_Q6_K, NN>;
    const int sbl = kg >> 1, c = kg & 1;
    const uint8_t *rp[2][2];
    qg_rows<C::WSTRIDE>(ws + 210 * sbl, rw, g, rp);
    float d[2][2];
#pragma unroll
    for (int mt = 0; mt < 2; mt++)
#pragma unroll
        for (int h = 0; h < 2; h++)
            d[mt][h] = qg_h2f(*reinterpret_cast<const uint16_t *>(rp[mt][h] + 208));
#pragma unroll
    for (int l0 = 0; l0 < 2; l0++) { /* l = 16 l0 + 4 qd + i */
        uint32_t ql[2][2][2], qh[2][2], sw[2][2];
#pragma unroll
        for (int mt = 0; mt < 2; mt++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const uint8_t *b = rp[mt][h];
                ql[0][mt][h] = qg_ld32<MIS>(b + 64 * c + 16 * l0 + 4 * qd);
                ql[1][mt][h] = qg_ld32<MIS>(b + 64 * c + 32 + 16 * l0 + 4 * qd);
                qh[mt][h] = qg_ld32<MIS>(b + 128 + 32 * c + 16 * l0 + 4 * qd);
                /* scales 8 c + l0 + 2 k4, k4 = 0..3, biased to unsigned bytes */
                const uint32_t s0 = qg_ld32<MIS>(b + 192 + 8 * c), s1 = qg_ld32<MIS>(b + 196 + 8 * c);
                sw[mt][h] = __byte_perm(s0, s1, l0 ? 0x7531 : 0x6420) ^ 0x80808080u;
            }
#pragma unroll
        for (int k4 = 0; k4 < 4; k4++) {
            uint32_t a[2][4];
#pragma unroll
            for (int mt = 0; mt < 2; mt++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const uint32_t lo = ql[k4 & 1][mt][h];
                    const uint32_t q = ((k4 >= 2 ? lo >> 4 : lo) & 0x0F0F0F0Fu) |
                                       (((qh[mt][h] >> (2 * k4)) << 4) & 0x30303030u);
                    const float ds =
                        __fmul_rn(d[mt][h], qg_byte(sw[mt][h], k4) - (QG_MAGIC + 128.0f));
                    float v[4];
#pragma unroll
                    for (int i = 0; i < 4; i++)
                        v[i] = __fmul_rn(ds, qg_byte(q, i) - (QG_MAGIC + 32.0f));
                    qg_afrag(a, mt, h, v);
                }
            qg_mma<NN, C::XSTRIDE>(acc, a, xg, 256 * sbl + 128 * c + 32 * k4 + 16 * l0);
        }
    }
}

/* A thread's share of the staging, fixed for the whole launch: the same
 * rows and chunks every stage, so a stage costs a copy and an add a chunk
 * (address arithmetic per copy, computed each stage, is a fifth of the
 * instructions). Weights: row tid / TPR of the tile, chunks tid % TPR,
 * + TPR, ..; past ne1 nothing is copied (the rows' sums are never
 * stored). Inputs: token row (tid + 256 j) / XN, chunk tid % XN; rows past
 * nt are zeroed. */
template <class C> struct qg_stager {
    static constexpr int TPR = QG_THREADS / C::TM;         /* threads a weight row */
    static constexpr int WN = C::WROW / C::CP;             /* copies a weight row */
    static constexpr int XN = C::KSTAGE / 8;               /* 16-byte copies a token row */
    static constexpr int XJ = C::TN * XN / QG_THREADS;     /* input copies a thread */
    static constexpr int XT = QG_THREADS / XN;             /* token rows apart */
    static_assert(QG_THREADS % C::TM == 0 && (C::TN * XN) % QG_THREADS == 0, "even shares");
    const uint8_t *w;      /* this thread's weight row, stage 0 */
    const uint8_t *x;      /* its first input chunk, stage 0 */
    uint32_t wdst, xdst;   /* shared-memory offsets within a stage */
    int wk, xlive;         /* first weight chunk; input rows that exist (bits) */
    bool wlive;

    __device__ __forceinline__ qg_stager(const uint8_t *wb, uint64_t rb, int64_t row0,
                                         int64_t ne1, const __nv_bfloat16 *xb, int64_t ne0,
                                         int tok0, int nt, int tid)
    {
        const int r = tid / TPR;
        wk = tid % TPR;
        wlive = row0 + r < ne1;
        w = wb + (uint64_t)(wlive ? row0 + r : 0) * rb + C::CP * wk;
        wdst = (uint32_t)(r * C::WSTRIDE + C::CP * wk);
        const int t = tid / XN, k = tid % XN;
        xlive = 0;
        for (int j = 0; j < XJ; j++)
            xlive |= (tok0 + t + XT * j < nt) << j;
        x = reinterpret_cast<const uint8_t *>(xb + (int64_t)(tok0 + t < nt ? tok0 + t : 0) * ne0) +
            16 * k;
        xdst = (uint32_t)(C::W_BYTES + t * C::XSTRIDE + 16 * k);
    }
    /* stage st into dst: weights, then inputs */
    __device__ __forceinline__ void load(uint8_t *dst, int st, int64_t ne0) const
    {
        load_w(dst, st);
        load_x(dst, st, ne0);
    }

    /* the weights alone (before the wait for the input) and the input alone */
    __device__ __forceinline__ void load_w(uint8_t *dst, int st) const
    {
        if (!wlive)
            return;
        const uint8_t *src = w + (uint64_t)st * C::WROW;
#pragma unroll
        for (int k = 0; k < (WN + TPR - 1) / TPR; k++)
            if (wk + TPR * k < WN) {
                if (C::CP == 16)
                    cp_async16(dst + wdst + 16 * TPR * k, src + 16 * TPR * k, 16);
                else
                    cp_async4(dst + wdst + 4 * TPR * k, src + 4 * TPR * k, 4);
            }
    }
    __device__ __forceinline__ void load_x(uint8_t *dst, int st, int64_t ne0) const
    {
        const uint8_t *src = x + (uint64_t)st * C::KSTAGE * 2;
#pragma unroll
        for (int j = 0; j < XJ; j++)
            cp_async16(dst + xdst + j * XT * C::XSTRIDE,
                       src + (xlive >> j & 1 ? (uint64_t)j * XT * ne0 * 2 : 0),
                       xlive >> j & 1 ? 16 : 0);
    }
};

/* The tensor-map staging (the parts C::TMA names): thread 0 copies a
 * stage's weight rows (the box of TM rows x WROW bytes at the block's first
 * row) and thread 32 its token rows (x_rows of XSTRIDE bytes: the map sees
 * the input as 8-byte elements, so a box row takes the stage's 2 KSTAGE
 * bytes and the next 32, which land in the row's bank padding and are never
 * read), each counted on the stage's barrier. A weight box starts on a
 * 16-byte boundary, up to 12 bytes before the stage (Q6_K: shift). One instruction a stage in
 * place of qg_stager's 16-byte copies and their address arithmetic (a sixth
 * of the cp.async kernel's instructions, their shared-memory writes
 * conflicting two ways), or of a bulk copy a row, which a warp issues one
 * lane at a time (uniform operands). A box's rows past the weight's or
 * the step's end arrive as zeros. */
template <class C> struct qg_tma {
    const CUtensorMap *map;
    uint32_t dst;   /* the part's offset within a stage */
    uint32_t bytes; /* a stage's bytes of it */
    int step, y;    /* the box's first column (elements) a stage further, its first row */
    bool live, weight;

    __device__ __forceinline__ qg_tma(const CUtensorMap *wmap, const CUtensorMap *xmap,
                                      int64_t row0, int tok0, int nt, int tid)
    {
        weight = (C::TMA & QG_TMA_W) && tid == 0;
        live = weight || ((C::TMA & QG_TMA_X) && tid == 32);
        map = weight ? wmap : xmap;
        dst = weight ? 0 : C::W_BYTES;
        bytes = weight ? C::TM * C::WSTRIDE : (uint32_t)x_rows(nt) * C::XSTRIDE;
        step = weight ? C::WROW / C::WE : 2 * C::KSTAGE / 8;
        y = weight ? (int)row0 : tok0;
    }
    /* Where stage st's weight bytes start in a staged row: a box starts on
     * a 16-byte boundary of the row, at or below the stage's first byte. */
    static __device__ __forceinline__ int shift(int st)
    {
        if constexpr (!(C::TMA & QG_TMA_W) || C::WROW % 16 == 0)
            return 0;
        return (int)((uint32_t)st * C::WROW % 16);
    }
    /* The token rows a box moves: the step's, rounded up to whole n8 tiles,
     * up to a block's (qg_launch encodes the map with the same). The rest
     * of the stage's TN rows keep what they held: each token's sums read
     * only its own row, and no dead token's is stored. */
    static __host__ __device__ __forceinline__ int x_rows(int nt)
    {
        return (nt + 7) / 8 * 8 < C::TN ? (nt + 7) / 8 * 8 : C::TN;
    }
    /* the arrivals a stage's barrier counts */
    static constexpr int COUNT = ((C::TMA & QG_TMA_W) ? 1 : 0) + ((C::TMA & QG_TMA_X) ? 1 : 0);
    /* stage st into the stage at dst0, counted on bar; `weights`: the
     * weight rows (before the wait for the input) or the token rows */
    __device__ __forceinline__ void load(uint8_t *dst0, uint64_t *bar, int st, bool weights) const
    {
        if (!live || weight != weights)
            return;
        mbar_arrive_tx(bar, bytes);
        int x = st * step;
        if constexpr ((C::TMA & QG_TMA_W) && C::WROW % 16)
            x -= weight ? shift(st) / C::WE : 0;
        tensor_copy_2d(dst0 + dst, map, x, y, bar);
    }
};

/* A block's sums, zeroed before a run (and before the staging is set up,
 * which keeps k_qgemm's code in the measured order). */
template <int NN> __device__ __forceinline__ void qg_zero(float (&acc)[2][NN][4])
{
#pragma unroll
    for (int mt = 0; mt < 2; mt++)
#pragma unroll
        for (int k = 0; k < NN; k++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                acc[mt][k][e] = 0.0f;
}

/* The stages' mbarriers (where tensor maps copy), once a block before its
 * first copy. */
template <class C> __device__ __forceinline__ void qg_bars(uint64_t *bar)
{
    if constexpr (C::TMA != 0) {
        if (threadIdx.x == 0) {
            for (int p = 0; p < C::P; p++)
                mbar_init(bar + p, qg_tma<C>::COUNT);
            mbar_init_fence();
        }
        __syncthreads();
    }
}

/* Stages s0 .. s0 + n - 1 of one tile added into acc through the
 * ring of C::P stage buffers from ring position q (the stages the block ran
 * before: which buffer comes next, and its barrier's phase). wait() runs
 * once the first stages' weights are asked for: the programmatic wait, in
 * a block's first run (nothing writes weights). Stage i waits for its
 * cp.async copies (each thread its own, then the block's barrier) and its
 * tensor-map copies (the stage's mbarrier). Ends drained, after a
 * barrier: the stages' shared memory is free. */
template <int TY, int NN, bool FAST, class C, class WAIT>
__device__ __forceinline__ void qg_run(float (&acc)[2][NN][4], uint8_t *smem, uint64_t *bar,
                                       const qg_stager<C> &sg, const qg_tma<C> &tm, int64_t ne0,
                                       int s0, int n, int q, int rw, int kg, int g, int qd,
                                       WAIT wait)
{
    auto slice = [&](int i) {
        const uint8_t *st = smem + ((q + i) % C::P) * C::STAGE;
        const uint8_t *xg = st + C::W_BYTES + g * C::XSTRIDE + 8 * qd;
        const uint8_t *ws = st + qg_tma<C>::shift(s0 + i);
        if constexpr (TY == GGML_TYPE_Q4_K)
            qg_slice_q4k<NN, FAST>(acc, ws, xg, rw, kg, g, qd);
        else if (kg >> 1)
            qg_slice_q6k<NN, true>(acc, ws, xg, rw, kg, g, qd);
        else
            qg_slice_q6k<NN, false>(acc, ws, xg, rw, kg, g, qd);
    };
    constexpr bool TW = C::TMA & QG_TMA_W, TX = C::TMA & QG_TMA_X;
    /* stage s0 + i into buffer (q + i) % P: its weight rows, or its token rows */
    auto load = [&](int i, bool weights) {
        uint8_t *dst = smem + ((q + i) % C::P) * C::STAGE;
        if (weights ? TW : TX)
            tm.load(dst, bar + (q + i) % C::P, s0 + i, weights);
        else if (weights)
            sg.load_w(dst, s0 + i);
        else
            sg.load_x(dst, s0 + i, ne0);
    };
    for (int i = 0; i < C::P - 1; i++) /* weights only: before the wait for the input */
        if (i < n)
            load(i, true);
    wait();
    for (int i = 0; i < C::P - 1; i++) {
        if (i < n)
            load(i, false);
        cp_commit();
    }
    for (int i = 0; i < n; i++) {
        cp_wait<C::P - 2>();
        __syncthreads(); /* stage i's cp.async landed; stage i - 1 is done with */
        const int nx = i + C::P - 1;
        if (nx < n)
            load(nx, true), load(nx, false);
        cp_commit();
        if constexpr (C::TMA != 0)
            mbar_wait(bar + (q + i) % C::P, (uint32_t)((q + i) / C::P) & 1);
        slice(i);
    }
    cp_wait<0>();
    __syncthreads(); /* the stages are free for the epilogue */
}

/* A block's K-groups' sums (acc: the lane's m16 tiles at tile rows rb0
 * and rb1, kg and rw its K-group and row warp) added to K-group 0's in
 * K-group order into the block's tile T[token][row], which it returns
 * (shared memory past the other K-groups' sums; K-group 0's threads wrote
 * it, and no barrier follows). Called after the pipeline drained: the
 * stages' shared memory is reused. */
template <class C, int NN>
__device__ __forceinline__ float *qg_reduce(const float (&acc)[2][NN][4], uint8_t *smem, int kg,
                                            int rw, int rb0, int rb1, int lane)
{
    constexpr int RW = C::TM / 32, NA = 2 * NN * 4; /* row warps; sums a lane keeps */
    const int g = lane >> 2, qd = lane & 3;
    float *part = reinterpret_cast<float *>(smem);
    float *T = reinterpret_cast<float *>(smem + C::PART);
    if (kg > 0)
#pragma unroll
        for (int mt = 0; mt < 2; mt++)
#pragma unroll
            for (int k = 0; k < NN; k++)
#pragma unroll
                for (int e = 0; e < 4; e++)
                    part[(((kg - 1) * RW + rw) * NA + (mt * NN + k) * 4 + e) * 32 + lane] =
                        acc[mt][k][e];
    __syncthreads();
    if (kg == 0)
#pragma unroll
        for (int mt = 0; mt < 2; mt++)
#pragma unroll
            for (int k = 0; k < NN; k++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    float v = acc[mt][k][e];
                    for (int o = 1; o < C::KG; o++)
                        v += part[(((o - 1) * RW + rw) * NA + (mt * NN + k) * 4 + e) * 32 + lane];
                    T[(8 * k + 2 * qd + (e & 1)) * C::TSTRIDE + (mt ? rb1 : rb0) + g + 8 * (e >> 1)] = v;
                }
    return T;
}

/* Rows row0 + r .. + 3 of token t of a finished tile (sums s) into y:
 * alpha s (+ y when add); rows from ne1 on are not the weight's. */
__device__ __forceinline__ void qg_put(float4 s, int t, int r, int64_t row0, int64_t ne1, float *y,
                                       int64_t ldy, float alpha, int add)
{
    const float v[4] = {s.x, s.y, s.z, s.w};
#pragma unroll
    for (int e = 0; e < 4; e++)
        if (row0 + r + e < ne1) {
            float *out = y + (int64_t)t * ldy + row0 + r + e;
            *out = add ? *out + alpha * v[e] : alpha * v[e];
        }
}

/* The end of a clustered block: its tile (qg_reduce), then the cluster's
 * tiles added in rank order, each block storing its share of the rows
 * (float4s of the tile). */
template <class C, int NN>
__device__ __forceinline__ void qg_finish(const float (&acc)[2][NN][4], uint8_t *smem, int kg,
                                          int rw, int rb0, int rb1, int lane, int64_t row0,
                                          int64_t ne1, int tok0, int nt, float *y, int64_t ldy,
                                          float alpha, int add, int rank, int splits)
{
    const int tid = threadIdx.x;
    const float *T = qg_reduce<C, NN>(acc, smem, kg, rw, rb0, rb1, lane);
    cg::cluster_group cl = cg::this_cluster();
    if (splits > 1)
        cl.sync();
    else
        __syncthreads();
    constexpr int F4 = C::TN * C::TM / 4, R4 = C::TM / 4;
    const int f1 = (int)((int64_t)F4 * (rank + 1) / splits);
    for (int f = (int)((int64_t)F4 * rank / splits) + tid; f < f1; f += QG_THREADS) {
        const int tk = f / R4, r = (f - tk * R4) * 4, t = tok0 + tk;
        if (t >= nt)
            continue;
        const float *src = T + tk * C::TSTRIDE + r;
        float4 s = *reinterpret_cast<const float4 *>(splits > 1 ? cl.map_shared_rank(src, 0) : src);
        for (int o = 1; o < splits; o++) {
            const float4 u = *reinterpret_cast<const float4 *>(cl.map_shared_rank(src, o));
            s.x += u.x, s.y += u.y, s.z += u.z, s.w += u.w;
        }
        qg_put(s, t, r, row0, ne1, y, ldy, alpha, add);
    }
    if (splits > 1)
        cl.sync(); /* no block leaves while another reads its tile */
}

/* grid (row tiles x splits, token tiles), a cluster of `splits` blocks
 * along x (the K ranges of one row tile); y[t][r] = alpha * (row r of w .
 * x[t]) (+ y[t][r] when add). x: bf16 [nt][ne0]. */
template <int TY, int NN, bool FAST, bool MAP>
__global__ void __launch_bounds__(QG_THREADS, qg_type<TY>::MB)
    k_qgemm(const uint8_t *__restrict__ w, const __grid_constant__ CUtensorMap wmap, uint64_t rb,
            int64_t ne0, int64_t ne1, const __nv_bfloat16 *__restrict__ x,
            const __grid_constant__ CUtensorMap xmap, int nt, float *y, int64_t ldy, float alpha,
            int add, int splits)
{
    using C = qg_cfg<TY, NN, MAP>;
    constexpr int RW = C::TM / 32; /* row warps */
    extern __shared__ __align__(128) uint8_t smem[]; /* 128: a tensor-map copy's destination */
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, qd = lane & 3;
    const int rw = warp % RW, kg = warp / RW;
    const int tile = blockIdx.x / splits, rank = blockIdx.x % splits;
    const int64_t row0 = (int64_t)tile * C::TM;
    const int tok0 = blockIdx.y * C::TN, ns = (int)(ne0 / C::KSTAGE);
    const int s0 = (int)((int64_t)ns * rank / splits);
    const int n = (int)((int64_t)ns * (rank + 1) / splits) - s0;
    float acc[2][NN][4];
    qg_zero(acc);
    uint64_t *bar = reinterpret_cast<uint64_t *>(smem + C::BARS);
    const qg_stager<C> sg(w, rb, row0, ne1, x, ne0, tok0, nt, tid);
    const qg_tma<C> tm(&wmap, &xmap, row0, tok0, nt, tid);
    qg_bars<C>(bar);
    qg_run<TY, NN, FAST>(acc, smem, bar, sg, tm, ne0, s0, n, 0, rw, kg, g, qd, [] { pdl_start(); });

    qg_finish<C, NN>(acc, smem, kg, rw, 32 * rw, 32 * rw + 16, lane, row0, ne1, tok0, nt, y, ldy,
                     alpha, add, rank, splits);
}

/* ------------------------------------------------------------------------
 * Stream-K (mfk_ctx_qgemm_sk; the plan in kernels.h, mfk_qgemm_sk_blocks)
 * ---------------------------------------------------------------------- */

/* The end of a stream-K block's run over stages of one tile (its sums T,
 * qg_reduce's, after a barrier). A whole tile is stored. A shared one goes
 * to the block's slot of the partial tiles (mfk_sk_slot; the step's tokens
 * only), and the last of the tile's blocks to count itself adds every
 * slot in block order, stores, and puts the tile's counter back to 0 for
 * the next launch: the sum's order is fixed whichever block ends last.
 * `first`: the tile's first iteration; its blocks are those owning its
 * first and last (b0, b1). A block past b0 starts its share in the tile
 * (slot 2 b); b0's slot is 2 b0, or 2 b0 + 1 where its share began in an
 * earlier tile. */
template <class C>
__device__ __forceinline__ void
qg_sk_store(const float *T, bool whole, float4 *part, unsigned *count, int64_t tile, int64_t first,
            int ns, int64_t iters, int b, int64_t row0, int64_t ne1, int tok0, int nt, float *y,
            int64_t ldy, float alpha, int add)
{
    constexpr int R4 = C::TM / 4, SLOT = QG_SK_TILE_FLOATS / 4;
    static_assert(C::TN * C::TM <= QG_SK_TILE_FLOATS, "a tile fits a slot");
    const int tid = threadIdx.x, blocks = (int)gridDim.x;
    const int live = (nt - tok0 < C::TN ? nt - tok0 : C::TN) * R4; /* the step's tokens */
    if (whole) {
        for (int f = tid; f < live; f += QG_THREADS) {
            const int tk = f / R4, r = (f - tk * R4) * 4;
            qg_put(*reinterpret_cast<const float4 *>(T + tk * C::TSTRIDE + r), tok0 + tk, r, row0,
                   ne1, y, ldy, alpha, add);
        }
        return;
    }
    float4 *mine = part + (size_t)mfk_sk_slot(iters, blocks, b, first) * SLOT;
    for (int f = tid; f < live; f += QG_THREADS) {
        const int tk = f / R4, r = (f - tk * R4) * 4;
        __stcg(mine + f, *reinterpret_cast<const float4 *>(T + tk * C::TSTRIDE + r));
    }
    __threadfence(); /* this thread's partial sums device-wide before the tile's count */
    const int b0 = mfk_sk_owner(iters, blocks, first);
    const int b1 = mfk_sk_owner(iters, blocks, first + ns - 1);
    int last = 0;
    __syncthreads();
    if (tid == 0)
        last = atomicAdd(count + tile, 1u) == (unsigned)(b1 - b0);
    if (!__syncthreads_or(last))
        return;
    __threadfence(); /* the other blocks' partial sums, counted before ours */
    const float4 *p0 = part + (size_t)mfk_sk_slot(iters, blocks, b0, first) * SLOT;
    for (int f = tid; f < live; f += QG_THREADS) {
        float4 s = __ldcg(p0 + f);
        for (int o = b0 + 1; o <= b1; o++) {
            const float4 u = __ldcg(part + (size_t)(2 * o) * SLOT + f);
            s.x += u.x, s.y += u.y, s.z += u.z, s.w += u.w;
        }
        const int tk = f / R4;
        qg_put(s, tok0 + tk, (f - tk * R4) * 4, row0, ne1, y, ldy, alpha, add);
    }
    if (tid == 0)
        count[tile] = 0;
}

/* The products of a stream-K launch (mfk_qgemm_n: weights of one type and
 * width against one input), their row tiles one after another: each
 * weight's tensor map, bytes, rows and output, and end[j], the row tiles of
 * weights 0 .. j (INT_MAX past the last weight). */
struct qg_sk_group {
    CUtensorMap wmap[MFK_QGEMM_GROUP_MAX];
    const uint8_t *w[MFK_QGEMM_GROUP_MAX];
    float *y[MFK_QGEMM_GROUP_MAX];
    int64_t ne1[MFK_QGEMM_GROUP_MAX], ldy[MFK_QGEMM_GROUP_MAX];
    int end[MFK_QGEMM_GROUP_MAX];
};

/* grid (blocks): the group's tiles (row tile major, token tile minor) x
 * their ne0 / KSTAGE stages are `iters` iterations, block b taking its
 * share (mfk_sk_start) tile by tile: each run of a tile's stages through
 * the same pipeline as k_qgemm (qg_run: the ring's position carries over,
 * the first run's weights come before the programmatic wait), its
 * K-groups' sums into the tile (qg_reduce), then qg_sk_store. y[t][r] =
 * alpha * (row r of w . x[t]) (+ y[t][r] when add), per weight of gr. */
template <int TY, int NN, bool FAST, bool MAP>
__global__ void __launch_bounds__(QG_THREADS, qg_type<TY>::MB)
    k_qgemm_sk(const __grid_constant__ qg_sk_group gr, uint64_t rb, int64_t ne0,
               const __nv_bfloat16 *__restrict__ x, const __grid_constant__ CUtensorMap xmap,
               int nt, int64_t iters, float alpha, int add, float4 *part, unsigned *count)
{
    using C = qg_cfg<TY, NN, MAP>;
    constexpr int RW = C::TM / 32;                   /* row warps */
    extern __shared__ __align__(128) uint8_t smem[]; /* 128: a tensor-map copy's destination */
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, qd = lane & 3;
    const int rw = warp % RW, kg = warp / RW, b = (int)blockIdx.x;
    uint64_t *bar = reinterpret_cast<uint64_t *>(smem + C::BARS);
    qg_bars<C>(bar);
    /* Where iteration i of the block's share (which ends at i1) falls: its
     * tile (row tile rt of weight j, row0 in it; token tile tok0), the
     * stage in it, and how many of the share are left in it. Worked out
     * again after each run, and the share's position kept in shared memory
     * through it, rather than held in registers the pipeline uses. */
    struct at {
        int i1, ns, tile, s0, n, j, tok0;
        int64_t row0;
        __device__ at(const qg_sk_group &gr, int64_t ne0, int nt, int64_t iters, int b, int i)
        {
            ns = (int)(ne0 / C::KSTAGE), i1 = (int)mfk_sk_start(iters, (int)gridDim.x, b + 1);
            tile = i / ns, s0 = i - tile * ns, n = i1 - i < ns - s0 ? i1 - i : ns - s0;
            const int tok_tiles = (nt + C::TN - 1) / C::TN, rt = tile / tok_tiles;
            tok0 = (tile - rt * tok_tiles) * C::TN;
            j = 0;
#pragma unroll
            for (int k = 0; k < MFK_QGEMM_GROUP_MAX - 1; k++)
                j += rt >= gr.end[k];
            row0 = (int64_t)(rt - (j ? gr.end[j - 1] : 0)) * C::TM;
        }
    };
    __shared__ int pos[2]; /* the share's next iteration, the stages run (the ring's position) */
    if (tid == 0)
        pos[0] = (int)mfk_sk_start(iters, (int)gridDim.x, b), pos[1] = 0;
    __syncthreads();
    for (;;) {
        const int i = pos[0], q = pos[1];
        at w(gr, ne0, nt, iters, b, i);
        if (i >= w.i1)
            break;
        float acc[2][NN][4];
        qg_zero(acc);
        const qg_stager<C> sg(gr.w[w.j], rb, w.row0, gr.ne1[w.j], x, ne0, w.tok0, nt, tid);
        const qg_tma<C> tm(&gr.wmap[w.j], &xmap, w.row0, w.tok0, nt, tid);
        qg_run<TY, NN, FAST>(acc, smem, bar, sg, tm, ne0, w.s0, w.n, q, rw, kg, g, qd, [q] {
            if (q == 0)
                pdl_start();
        });
        const float *T = qg_reduce<C, NN>(acc, smem, kg, rw, 32 * rw, 32 * rw + 16, lane);
        __syncthreads();
        const int i2 = pos[0];
        const at v(gr, ne0, nt, iters, b, i2);
        qg_sk_store<C>(T, v.n == v.ns, part, count, v.tile, (int64_t)v.tile * v.ns, v.ns, iters, b,
                       v.row0, gr.ne1[v.j], v.tok0, nt, gr.y[v.j], gr.ldy[v.j], alpha, add);
        fence_proxy_async(); /* the tile's shared-memory writes before the next run's copies */
        __syncthreads();
        if (tid == 0)
            pos[0] = i2 + v.n, pos[1] += v.n;
        __syncthreads();
    }
}

/* ------------------------------------------------------------------------
 * Launch
 * ---------------------------------------------------------------------- */

/* Kernel instance k: its shared memory raised, and the largest cluster
 * the device runs it in, once a context. */
template <typename K>
static int qg_ready(struct mfk_ctx *c, int k, K fn, int smem, int *cluster, struct mf_err *err)
{
    struct qg_state *s = mfk_ctx_qgemm_state(c);
    if (s->cluster[k] > 0) {
        *cluster = s->cluster[k];
        return 0;
    }
    int rc = mfk_raise_smem((const void *)fn, (size_t)smem, "qgemm", err);
    if (rc)
        return rc;
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute at;
    at.id = cudaLaunchAttributeClusterDimension;
    at.val.clusterDim.x = MFK_QGEMM_SPLIT_MAX, at.val.clusterDim.y = 1, at.val.clusterDim.z = 1;
    cfg.gridDim = dim3(MFK_QGEMM_SPLIT_MAX, 1, 1), cfg.blockDim = dim3(QG_THREADS, 1, 1);
    cfg.dynamicSmemBytes = (size_t)smem, cfg.attrs = &at, cfg.numAttrs = 1;
    int size = 0;
    if (cudaOccupancyMaxPotentialClusterSize(&size, fn, &cfg) != cudaSuccess) {
        cudaGetLastError();
        size = 1; /* no clusters: no split, still correct */
    }
    s->cluster[k] = size < 1 ? 1 : size > MFK_QGEMM_SPLIT_MAX ? MFK_QGEMM_SPLIT_MAX : size;
    *cluster = s->cluster[k];
    return 0;
}

/* A 2-D tensor map of `rows` rows of `cols` elements (`elem` bytes each: 1
 * or 4, the weights' bytes or words, or 8, the input seen as 8-byte units; `pitch` bytes
 * apart) at base, its box `box_cols` x `box_rows`; the driver's encoder
 * fetched through the runtime once a context, so nothing links libcuda
 * itself. `what` names the tensor in an error. Encoded on every launch: a
 * host-side call, captured once where a CUDA graph records the step; the
 * weight map could be kept with the weight if eager steps show its cost. */
static int qg_map(struct mfk_ctx *c, CUtensorMap *map, const void *base, int elem, uint64_t cols,
                  uint64_t rows, uint64_t pitch, uint32_t box_cols, uint32_t box_rows,
                  const char *what, struct mf_err *err)
{
    struct qg_state *s = mfk_ctx_qgemm_state(c);
    if (!s->encode) {
        cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
        void *fn = NULL;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000,
                                             cudaEnableDefault, &found) != cudaSuccess ||
            found != cudaDriverEntryPointSuccess || !fn) {
            cudaGetLastError();
            return mf_err_set(err, MF_EUNSUPPORTED,
                              "CUDA qgemm: the driver has no cuTensorMapEncodeTiled "
                              "(tensor maps need a CUDA 12 driver)");
        }
        s->encode = fn;
    }
    const cuuint64_t dim[2] = {cols, rows}, stride[1] = {pitch};
    const cuuint32_t box[2] = {box_cols, box_rows}, step[2] = {1, 1};
    const CUresult r = ((PFN_cuTensorMapEncodeTiled_v12000)s->encode)(
        map,
        elem == 1   ? CU_TENSOR_MAP_DATA_TYPE_UINT8
        : elem == 4 ? CU_TENSOR_MAP_DATA_TYPE_UINT32
                    : CU_TENSOR_MAP_DATA_TYPE_UINT64,
        2, (void *)base, dim, stride, box, step, CU_TENSOR_MAP_INTERLEAVE_NONE,
        CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
        CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS)
        return mf_err_set(err, MF_EINVAL,
                          "CUDA qgemm: no tensor map for the %s (%llu rows of %llu bytes, "
                          "%llu apart): driver error %d",
                          what, (unsigned long long)rows, (unsigned long long)(cols * elem),
                          (unsigned long long)pitch, (int)r);
    return 0;
}

/* The weight's and the input's tensor maps (where the instance copies by
 * them): the weight's a box of TM rows of WSTRIDE bytes, the input's of
 * x_rows(nt) token rows of XSTRIDE bytes (8-byte elements). */
template <class C>
static int qg_maps(struct mfk_ctx *c, const struct mfk_weight *w, const __nv_bfloat16 *x, int nt,
                   CUtensorMap *wmap, CUtensorMap *xmap, struct mf_err *err)
{
    int rc = 0;
    if (wmap && (C::TMA & QG_TMA_W))
        rc = qg_map(c, wmap, w->data, C::WE, w->row_bytes / C::WE, (uint64_t)w->ne1, w->row_bytes,
                    C::WSTRIDE / C::WE, C::TM, "weight", err);
    if (!rc && xmap && (C::TMA & QG_TMA_X))
        rc = qg_map(c, xmap, x, 8, (uint64_t)w->ne0 / 4, (uint64_t)nt, (uint64_t)w->ne0 * 2,
                    C::XSTRIDE / 8, (uint32_t)qg_tma<C>::x_rows(nt), "input", err);
    return rc;
}

/* w x x on k_qgemm<TY, NN, FAST, MAP>'s clustered grid (cluster: the
 * largest the device runs it in). */
template <int TY, int NN, bool FAST, bool MAP>
static int qg_launch_one(struct mfk_ctx *c, int cluster, const struct mfk_weight *w,
                         const __nv_bfloat16 *x, int nt, float *y, int64_t ldy, float alpha,
                         int add, struct mf_err *err)
{
    using C = qg_cfg<TY, NN, MAP>;
    CUtensorMap wmap = {}, xmap = {};
    int rc = qg_maps<C>(c, w, x, nt, &wmap, &xmap, err);
    if (rc)
        return rc;
    const mfk_q q = mfk_queue(c);
    const int64_t row_tiles = (w->ne1 + C::TM - 1) / C::TM, tok_tiles = (nt + C::TN - 1) / C::TN;
    const int splits = mfk_qgemm_splits(row_tiles, tok_tiles, (int)(w->ne0 / C::KSTAGE),
                                        C::MB * mfk_ctx_qgemm_state(c)->sms, cluster);
    mfk_go_cluster(q, dim3((unsigned)(row_tiles * splits), (unsigned)tok_tiles, 1), QG_THREADS,
                   C::SMEM, dim3((unsigned)splits, 1, 1), k_qgemm<TY, NN, FAST, MAP>,
                   (const uint8_t *)w->data, wmap, w->row_bytes, w->ne0, w->ne1, x, xmap, nt, y,
                   ldy, alpha, add, splits);
    return mfk_launched("qgemm", err);
}

/* w[0 .. n) x x as one stream-K grid of `blocks` blocks on
 * k_qgemm_sk<TY, NN, FAST, MAP> (instance k of the context's); row_tiles:
 * the weights' together. */
template <int TY, int NN, bool FAST, bool MAP>
static int qg_launch_sk(struct mfk_ctx *c, int k, int n, const struct mfk_weight *const *w,
                        const __nv_bfloat16 *x, int nt, float *const *y, const int64_t *ldy,
                        float alpha, int add, int64_t row_tiles, int blocks, struct mf_err *err)
{
    using C = qg_cfg<TY, NN, MAP>;
    const auto fn = k_qgemm_sk<TY, NN, FAST, MAP>;
    struct qg_state *s = mfk_ctx_qgemm_state(c);
    int rc = s->sk_ready[k] ? 0 : mfk_raise_smem((const void *)fn, (size_t)C::SMEM, "qgemm", err);
    if (rc)
        return rc;
    s->sk_ready[k] = 1;
    qg_sk_group gr = {};
    CUtensorMap xmap = {};
    int end = 0;
    for (int i = 0; i < MFK_QGEMM_GROUP_MAX; i++) {
        gr.end[i] = INT_MAX;
        if (i >= n || rc)
            continue;
        rc = qg_maps<C>(c, w[i], x, nt, &gr.wmap[i], i == 0 ? &xmap : nullptr, err);
        gr.w[i] = (const uint8_t *)w[i]->data, gr.y[i] = y[i];
        gr.ne1[i] = w[i]->ne1, gr.ldy[i] = ldy[i];
        gr.end[i] = end += (int)((w[i]->ne1 + C::TM - 1) / C::TM);
    }
    if (rc)
        return rc;
    const int64_t iters = row_tiles * ((nt + C::TN - 1) / C::TN) * (w[0]->ne0 / C::KSTAGE);
    mfk_go(mfk_queue(c), dim3((unsigned)blocks, 1, 1), QG_THREADS, C::SMEM, fn, gr, w[0]->row_bytes,
           w[0]->ne0, x, xmap, nt, iters, alpha, add, reinterpret_cast<float4 *>(s->sk_part),
           s->sk_count);
    return mfk_launched("qgemm", err);
}

/* w[0 .. n) x x (weights of one type and width) on instance k of the
 * context's kernels, k_qgemm<TY, NN, FAST, MAP> and its stream-K twin:
 * stream-K where the context has it on and mfk_qgemm_sk_blocks says so
 * (always for n > 1, or with mfk_ctx_qgemm_sk 2, while the tiles fit its
 * counters), else the clustered grid, a launch a weight. */
template <int TY, int NN, bool FAST = false, bool MAP = true>
static int qg_launch(struct mfk_ctx *c, int k, int n, const struct mfk_weight *const *w,
                     const __nv_bfloat16 *x, int nt, float *const *y, const int64_t *ldy,
                     float alpha, int add, struct mf_err *err)
{
    using C = qg_cfg<TY, NN, MAP>;
    const struct qg_state *s = mfk_ctx_qgemm_state(c);
    int cluster = 1;
    int rc = qg_ready(c, k, k_qgemm<TY, NN, FAST, MAP>, C::SMEM, &cluster, err);
    if (rc)
        return rc;
    int64_t row_tiles = 0;
    for (int i = 0; i < n; i++)
        row_tiles += (w[i]->ne1 + C::TM - 1) / C::TM;
    const int blocks = s->sk ? mfk_qgemm_sk_blocks(row_tiles * ((nt + C::TN - 1) / C::TN),
                                                   (int)(w[0]->ne0 / C::KSTAGE), C::MB * s->sms,
                                                   cluster, n > 1 || s->sk == 2)
                             : 0;
    if (blocks > 0)
        return qg_launch_sk<TY, NN, FAST, MAP>(c, k, n, w, x, nt, y, ldy, alpha, add, row_tiles,
                                               blocks, err);
    if (n > 1) /* more tiles than stream-K's counters: each on its own */
        for (int i = 0; !rc && i < n; i++)
            rc = qg_launch<TY, NN, FAST, MAP>(c, k, 1, w + i, x, nt, y + i, ldy + i, alpha, add,
                                              err);
    else
        rc = qg_launch_one<TY, NN, FAST, MAP>(c, cluster, w[0], x, nt, y[0], ldy[0], alpha, add,
                                              err);
    return rc;
}

extern "C" int mfk_qgemm_takes(struct mfk_ctx *c, const struct mfk_weight *w, int32_t nt)
{
    const struct qg_state *s = mfk_ctx_qgemm_state(c);
    if (nt < 1 || nt > s->max_tokens || w->bf16 || ((uintptr_t)w->data & 15))
        return 0;
    if (w->type == GGML_TYPE_Q4_K)
        return w->ne0 > 0 && w->ne0 % 256 == 0 && w->row_bytes == (uint64_t)w->ne0 / 256 * 144;
    if (w->type == GGML_TYPE_Q6_K) /* pairs of super-blocks, 4-byte aligned rows */
        return w->ne0 > 0 && w->ne0 % 512 == 0 && w->row_bytes == (uint64_t)w->ne0 / 256 * 210;
    return 0;
}

/* MF_EINVAL for a weight or input mfk_qgemm does not take, naming it. */
static int qg_refuse(const struct mfk_weight *w, int32_t nt, struct mf_err *err)
{
    return mf_err_set(err, MF_EINVAL,
                      "CUDA qgemm: takes Q4_K rows of a multiple of 256 or Q6_K of 512, "
                      "16-byte aligned, up to the context's token limit; not a %s weight of "
                      "%lld x %lld at %d tokens",
                      ggml_type_name((uint32_t)w->type), (long long)w->ne1, (long long)w->ne0,
                      (int)nt);
}

/* w[0 .. n) (checked: one type and width, each taken) x x on the instance
 * of their type, the step's tokens (32 a block up to 32, else 64) and the
 * context's Q4_K arithmetic; Q6_K rows not a multiple of 16 bytes apart
 * have no tensor map: cp.async. */
static int qg_dispatch(struct mfk_ctx *c, int n, const struct mfk_weight *const *w, const void *x,
                       int32_t nt, float *const *y, const int64_t *ldy, float alpha, int add,
                       struct mf_err *err)
{
    const __nv_bfloat16 *xb = (const __nv_bfloat16 *)x;
    const int exact = mfk_ctx_qgemm_state(c)->exact, small = nt <= 32;
#define QG_GO(k, ...) qg_launch<__VA_ARGS__>(c, k, n, w, xb, nt, y, ldy, alpha, add, err)
    if (w[0]->type == GGML_TYPE_Q4_K && exact)
        return small ? QG_GO(0, GGML_TYPE_Q4_K, 4) : QG_GO(1, GGML_TYPE_Q4_K, 8);
    if (w[0]->type == GGML_TYPE_Q4_K)
        return small ? QG_GO(4, GGML_TYPE_Q4_K, 4, true) : QG_GO(5, GGML_TYPE_Q4_K, 8, true);
    if (w[0]->row_bytes % 16)
        return small ? QG_GO(2, GGML_TYPE_Q6_K, 4, false, false)
                     : QG_GO(3, GGML_TYPE_Q6_K, 8, false, false);
    return small ? QG_GO(6, GGML_TYPE_Q6_K, 4) : QG_GO(7, GGML_TYPE_Q6_K, 8);
#undef QG_GO
}

extern "C" int mfk_qgemm(struct mfk_ctx *c, const struct mfk_weight *w, const void *x, int32_t nt,
                         float *y, int64_t ldy, float alpha, int add, struct mf_err *err)
{
    if (!mfk_qgemm_takes(c, w, nt) || ((uintptr_t)x & 15))
        return qg_refuse(w, nt, err);
    return qg_dispatch(c, 1, &w, x, nt, &y, &ldy, alpha, add, err);
}

extern "C" int mfk_qgemm_n(struct mfk_ctx *c, int n, const struct mfk_weight *const *w,
                           const void *x, int32_t nt, float *const *y, const int64_t *ldy,
                           float alpha, int add, struct mf_err *err)
{
    if (!mfk_ctx_qgemm_state(c)->sk)
        return mf_err_set(err, MF_EINVAL,
                          "CUDA qgemm: products in one launch need stream-K (mfk_ctx_qgemm_sk)");
    if (n < 1 || n > MFK_QGEMM_GROUP_MAX)
        return mf_err_set(err, MF_EINVAL, "CUDA qgemm: %d products in one launch, not 1 to %d", n,
                          MFK_QGEMM_GROUP_MAX);
    for (int i = 0; i < n; i++) {
        if (!mfk_qgemm_takes(c, w[i], nt) || ((uintptr_t)x & 15))
            return qg_refuse(w[i], nt, err);
        if (w[i]->type != w[0]->type || w[i]->ne0 != w[0]->ne0)
            return mf_err_set(err, MF_EINVAL,
                              "CUDA qgemm: products in one launch share a type and a width; "
                              "%s x %lld after %s x %lld",
                              ggml_type_name((uint32_t)w[i]->type), (long long)w[i]->ne0,
                              ggml_type_name((uint32_t)w[0]->type), (long long)w[0]->ne0);
    }
    return qg_dispatch(c, n, w, x, nt, y, ldy, alpha, add, err);
}
