/*
 * qgemm.cu: Q4_K and Q6_K weights times a step of a few dozen tokens on the
 * bf16 tensor cores, dequantized in registers on the way (mfk_gemm's
 * products of up to mfk_ctx_qgemm's tokens).
 *
 * Without it mfk_gemm dequantized every weight to bf16 in memory on each
 * call and handed the rows to cuBLAS (k_rows_half + cuBLAS: 18% of a
 * batch-64 Q4_K_M step on an H200 for the Q6_K matrices alone), and
 * mmq.cu's int8 tiles pay float work per 32-element sub-block for its two
 * scales (43 instructions an mma; 62% of that step).
 * Here each warp turns its rows' GGUF blocks into mma A fragments that are
 * bit for bit what mfk_dequant_half writes ((d * sc) * q - dmin * m for
 * Q4_K, (d * sc) * (q - 32) for Q6_K, exact in float, then rounded to
 * bf16), against the input mfk_gemm rounded to bf16: mma.m16n8k16 keeps
 * fp32 sums, and the products equal cuBLAS's on the dequantized weights up
 * to the order of the fp32 additions.
 *
 * A block of 8 warps takes TM rows x TN tokens (32 or 64); a warp 32 rows
 * (two m16 tiles, so each B fragment serves two mma) x all TN tokens (so
 * each A fragment serves TN / 8), over its K-group's share of each stage.
 * A stage is the rows' super-blocks (Q4_K: one, 144 bytes a row; Q6_K: a
 * pair, 420 bytes, 4-byte aligned where one alone is not) and the tokens'
 * bf16 inputs for those columns, in a cp.async pipeline of 2 to 4 stages;
 * the weights of the first stages are asked for before the wait on the
 * previous kernel (programmatic launch: nothing writes weights). When the
 * tiles are too few to fill the multiprocessors, K is split over a cluster
 * of up to 8 blocks (mfk_qgemm_splits), whose partial tiles meet through
 * distributed shared memory and are added in rank order. Every sum has a
 * fixed order, so a product's result does not depend on timing.
 *
 * A lane's A registers hold k columns 2qd, 2qd+1, 2qd+8, 2qd+9 of a k16
 * chunk and its B registers the same columns of a token. A dot product does
 * not care which columns the slots hold as long as A and B agree, so here
 * the four slots take columns 4qd..4qd+3: four consecutive bytes of a
 * Q4_K/Q6_K row (one 32-bit load) and four consecutive bf16 inputs (one
 * 8-byte load for both B registers; token rows 32 bytes past a multiple of
 * 128 apart, so a half-warp's loads hit 32 distinct banks).
 */
#include "kernels/kernels.h"
#include "kernels/internal.cuh"

#include <cstdint>

#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

extern "C" {
#include "common/ggml_type.h"
}

namespace cg = cooperative_groups;

#ifndef QG_UNROLL_PP
#define QG_UNROLL_PP 2
#endif
static constexpr int qg_unroll_pp = QG_UNROLL_PP; /* an experiment's switch */

#define QG_THREADS 256
#define QG_SMEM_MAX 232448 /* 227 KiB: a Hopper block's dynamic shared memory, at most */
#define QG_MAGIC 8388608.0f /* 2^23: float(0x4B000000 | b) - QG_MAGIC = b, for b < 2^23 */

/* Per type: rows a block (TM), K-groups (KG: TM / 32 x KG = 8 warps),
 * super-blocks a stage (SBS), staged bytes a row (WROW), their stride in
 * shared memory (WSTRIDE: a multiple of 4 words plus 4 or 12, so the eight
 * rows of a fragment load land on distinct banks) and the copy size. */
template <int TY> struct qg_type;
template <> struct qg_type<GGML_TYPE_Q4_K> {
    static constexpr int TM = 128, KG = 2, SBS = 1, WROW = 144, WSTRIDE = 144, CP = 16;
};
template <> struct qg_type<GGML_TYPE_Q6_K> {
    static constexpr int TM = 64, KG = 4, SBS = 2, WROW = 420, WSTRIDE = 432, CP = 4;
};

/* A kernel's shapes: NN n8 tiles of tokens, MB blocks a multiprocessor
 * (the stages share its shared memory), WG: the wgmma kernel's input
 * layout (8 x 16-byte core matrices, no padding) instead of padded rows. */
template <int TY, int NN, int MB = 1, int WG = 0> struct qg_cfg : qg_type<TY> {
    using T = qg_type<TY>;
    static constexpr int WGL = WG;              /* the core-matrix input layout */
    static constexpr int TN = 8 * NN;           /* tokens a block */
    static constexpr int KSTAGE = 256 * T::SBS; /* columns a stage */
    /* bytes between staged token rows (padded layout); the core-matrix
     * layout's rows of 8 tokens are SBO apart, its 16-byte columns LBO */
    static constexpr int XSTRIDE = 2 * KSTAGE + 32, LBO = 128, SBO = KSTAGE / 8 * 128;
    static constexpr int W_BYTES = T::TM * T::WSTRIDE;
    static constexpr int X_BYTES = WG ? TN * KSTAGE * 2 : TN * XSTRIDE;
    static constexpr int STAGE = W_BYTES + X_BYTES;
    static constexpr int BUDGET = QG_SMEM_MAX / MB - (MB > 1 ? 1024 : 0);
    static constexpr int P = BUDGET / STAGE < 4 ? BUDGET / STAGE : 4; /* stages */
    static constexpr int TSTRIDE = T::TM + 4; /* floats between the result tile's token rows */
    static constexpr int PART = (T::KG - 1) * T::TM * TN * 4; /* the other K-groups' sums */
    static constexpr int EPI = PART + TN * TSTRIDE * 4;
    static constexpr int SMEM = P * STAGE > EPI ? P * STAGE : EPI;
    static_assert(P >= 2 && SMEM <= BUDGET, "a double-buffered pipeline at least");
    static_assert(T::TM / 32 * T::KG == QG_THREADS / 32, "eight warps");
    static_assert(T::WROW % T::CP == 0 && XSTRIDE % 128 == 32, "copies and banks");
};

__device__ __forceinline__ void cp_async4(void *dst, const void *src, int src_bytes)
{
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(d), "l"(src),
                 "r"(src_bytes));
}

__device__ __forceinline__ void cp_commit()
{
    asm volatile("cp.async.commit_group;\n" ::);
}

template <int N> __device__ __forceinline__ void cp_wait()
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

/* Byte i of w as the float 2^23 + byte: one PRMT (selector: byte i, two
 * zero bytes of the constant, its 0x4B). */
__device__ __forceinline__ float qg_byte(uint32_t w, int i)
{
    return __uint_as_float(__byte_perm(w, 0x4B000000u, 0x7440 | i));
}

__device__ __forceinline__ uint32_t qg_pack(float lo, float hi)
{
    const __nv_bfloat162 p = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t *>(&p);
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

__device__ __forceinline__ void qg_mma1(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                        uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, "
                 "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
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
        qg_mma1(acc[0][n], a[0], b.x, b.y);
        qg_mma1(acc[1][n], a[1], b.x, b.y);
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
template <int NN>
__device__ __forceinline__ void qg_slice_q4k(float (&acc)[2][NN][4], const uint8_t *ws,
                                             const uint8_t *xg, int rw, int kg, int g, int qd)
{
    using C = qg_cfg<GGML_TYPE_Q4_K, NN>;
    const uint8_t *rp[2][2];
    qg_rows<C::WSTRIDE>(ws, rw, g, rp);
    float dd[2][2], dm[2][2];
    uint32_t scw[2][2], mnw[2][2]; /* the 4 sub-blocks' 6-bit scales and mins, a byte each */
#pragma unroll
    for (int mt = 0; mt < 2; mt++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const uint4 hd = *reinterpret_cast<const uint4 *>(rp[mt][h]);
            dd[mt][h] = qg_h2f((uint16_t)(hd.x & 0xFFFF));
            dm[mt][h] = qg_h2f((uint16_t)(hd.x >> 16));
            if (kg == 0) { /* ggml's get_scale_min_k4, four sub-blocks at once */
                scw[mt][h] = hd.y & 0x3F3F3F3Fu;
                mnw[mt][h] = hd.z & 0x3F3F3F3Fu;
            } else {
                scw[mt][h] = (hd.w & 0x0F0F0F0Fu) | ((hd.y >> 2) & 0x30303030u);
                mnw[mt][h] = ((hd.w >> 4) & 0x0F0F0F0Fu) | ((hd.z >> 2) & 0x30303030u);
            }
        }
#pragma unroll qg_unroll_pp
    for (int pp = 0; pp < 2; pp++) { /* byte group 2 kg + pp: sub-blocks 4 kg + 2 pp (+1) */
        float d1[2][2][2], m1[2][2][2]; /* [lh][mt][h] */
#pragma unroll
        for (int lh = 0; lh < 2; lh++)
#pragma unroll
            for (int mt = 0; mt < 2; mt++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    d1[lh][mt][h] =
                        __fmul_rn(dd[mt][h], qg_byte(scw[mt][h], 2 * pp + lh) - QG_MAGIC);
                    m1[lh][mt][h] =
                        __fmul_rn(dm[mt][h], qg_byte(mnw[mt][h], 2 * pp + lh) - QG_MAGIC);
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
                        float v[4];
                        /* d1 * q exact in float, so the fma rounds as
                         * __fsub_rn(__fmul_rn(d1, q), m1) does */
#pragma unroll
                        for (int i = 0; i < 4; i++)
                            v[i] = fmaf(qg_byte(nib, i) - QG_MAGIC, d1[lh][mt][h], -m1[lh][mt][h]);
                        a[mt][h] = qg_pack(v[0], v[1]);
                        a[mt][2 + h] = qg_pack(v[2], v[3]);
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
                    a[mt][h] = qg_pack(v[0], v[1]);
                    a[mt][2 + h] = qg_pack(v[2], v[3]);
                }
            qg_mma<NN, C::XSTRIDE>(acc, a, xg, 256 * sbl + 128 * c + 32 * k4 + 16 * l0);
        }
    }
}

/* A thread's share of the staging, fixed for the whole launch: the same
 * rows and chunks every stage, so a stage costs a copy and an add a chunk
 * (the address arithmetic per copy was a fifth of the first version's
 * instructions). Weights: row tid / TPR of the tile, chunks tid % TPR,
 * + TPR, ..; past ne1 nothing is copied (the rows' sums are never
 * stored). Inputs: token row (tid + 256 j) / XN, chunk tid % XN (the
 * core-matrix layout: see there); rows past nt are zeroed. */
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
        if constexpr (C::WGL) {
            /* core matrices: a warp's 32 copies are 8 tokens x 4 consecutive
             * 16-byte columns, 512 contiguous bytes of shared memory */
            constexpr int TNG = C::TN / 8;
            const int warp = tid >> 5, l = tid & 31;
            const int t = 8 * (warp % TNG) + (l & 7), kc = 4 * (warp / TNG) + (l >> 3);
            xlive = tok0 + t < nt ? (1 << XJ) - 1 : 0;
            x = reinterpret_cast<const uint8_t *>(xb + (int64_t)(xlive ? tok0 + t : 0) * ne0) +
                16 * kc;
            xdst = (uint32_t)(C::W_BYTES + (warp % TNG) * C::SBO + kc * C::LBO + 16 * (l & 7));
        } else {
            const int t = tid / XN, k = tid % XN;
            xlive = 0;
            for (int j = 0; j < XJ; j++)
                xlive |= (tok0 + t + XT * j < nt) << j;
            x = reinterpret_cast<const uint8_t *>(xb + (int64_t)(tok0 + t < nt ? tok0 + t : 0) *
                                                           ne0) +
                16 * k;
            xdst = (uint32_t)(C::W_BYTES + t * C::XSTRIDE + 16 * k);
        }
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
        if constexpr (C::WGL) { /* copy j: columns 4 (8 / TNG) j further */
            constexpr int CJ = 4 * (8 / (C::TN / 8));
#pragma unroll
            for (int j = 0; j < XJ; j++)
                cp_async16(dst + xdst + j * CJ * C::LBO, src + (xlive ? 16 * CJ * j : 0),
                           xlive ? 16 : 0);
        } else {
#pragma unroll
            for (int j = 0; j < XJ; j++)
                cp_async16(dst + xdst + j * XT * C::XSTRIDE,
                           src + (xlive >> j & 1 ? (uint64_t)j * XT * ne0 * 2 : 0),
                           xlive >> j & 1 ? 16 : 0);
        }
    }
};



/* The end of a block: its K-groups' sums (acc: the lane's m16 tiles at
 * tile rows rb0 and rb1, kg and rw its K-group and row warp) added to
 * K-group 0's in K-group order into the block's tile T[token][row], then
 * the cluster's tiles added in rank order, each block storing its share of
 * the rows (float4s of the tile). Called after the pipeline drained: the
 * stages' shared memory is reused. */
template <class C, int NN>
__device__ __forceinline__ void qg_finish(const float (&acc)[2][NN][4], uint8_t *smem, int kg,
                                          int rw, int rb0, int rb1, int lane, int64_t row0,
                                          int64_t ne1, int tok0, int nt, float *y, int64_t ldy,
                                          float alpha, int add, int rank, int splits)
{
    constexpr int RW = C::TM / 32, NA = 2 * NN * 4; /* row warps; sums a lane keeps */
    const int g = lane >> 2, qd = lane & 3, tid = threadIdx.x;
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
        const float v[4] = {s.x, s.y, s.z, s.w};
#pragma unroll
        for (int e = 0; e < 4; e++)
            if (row0 + r + e < ne1) {
                float *out = y + (int64_t)t * ldy + row0 + r + e;
                *out = add ? *out + alpha * v[e] : alpha * v[e];
            }
    }
    if (splits > 1)
        cl.sync(); /* no block leaves while another reads its tile */
}


/* grid (row tiles x splits, token tiles), a cluster of `splits` blocks
 * along x (the K ranges of one row tile); y[t][r] = alpha * (row r of w .
 * x[t]) (+ y[t][r] when add). x: bf16 [nt][ne0]. */
template <int TY, int NN, int MB>
__global__ void __launch_bounds__(QG_THREADS, MB)
    k_qgemm(const uint8_t *__restrict__ w, uint64_t rb, int64_t ne0, int64_t ne1,
            const __nv_bfloat16 *__restrict__ x, int nt, float *y, int64_t ldy, float alpha,
            int add, int splits)
{
    using C = qg_cfg<TY, NN, MB>;
    constexpr int RW = C::TM / 32; /* row warps */
    extern __shared__ __align__(16) uint8_t smem[];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, qd = lane & 3;
    const int rw = warp % RW, kg = warp / RW;
    const int tile = blockIdx.x / splits, rank = blockIdx.x % splits;
    const int64_t row0 = (int64_t)tile * C::TM;
    const int tok0 = blockIdx.y * C::TN, ns = (int)(ne0 / C::KSTAGE);
    const int s0 = (int)((int64_t)ns * rank / splits);
    const int n = (int)((int64_t)ns * (rank + 1) / splits) - s0;
    float acc[2][NN][4];
#pragma unroll
    for (int mt = 0; mt < 2; mt++)
#pragma unroll
        for (int k = 0; k < NN; k++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                acc[mt][k][e] = 0.0f;

    const qg_stager<C> sg(w, rb, row0, ne1, x, ne0, tok0, nt, tid);
    for (int i = 0; i < C::P - 1; i++) /* weights only: before the wait for the input */
        if (i < n)
            sg.load_w(smem + i * C::STAGE, s0 + i);
    pdl_start();
    for (int i = 0; i < C::P - 1; i++) {
        if (i < n)
            sg.load_x(smem + i * C::STAGE, s0 + i, ne0);
        cp_commit();
    }
    for (int i = 0; i < n; i++) {
        cp_wait<C::P - 2>();
        __syncthreads(); /* stage i landed; stage i - 1 is done with */
        const int nx = i + C::P - 1;
        if (nx < n)
            sg.load(smem + (nx % C::P) * C::STAGE, s0 + nx, ne0);
        cp_commit();
        const uint8_t *st = smem + (i % C::P) * C::STAGE;
        const uint8_t *xg = st + C::W_BYTES + g * C::XSTRIDE + 8 * qd;
        if constexpr (TY == GGML_TYPE_Q4_K)
            qg_slice_q4k<NN>(acc, st, xg, rw, kg, g, qd);
        else if (kg >> 1)
            qg_slice_q6k<NN, true>(acc, st, xg, rw, kg, g, qd);
        else
            qg_slice_q6k<NN, false>(acc, st, xg, rw, kg, g, qd);
    }
    cp_wait<0>();
    __syncthreads(); /* the stages are free for the epilogue */

    qg_finish<C, NN>(acc, smem, kg, rw, 32 * rw, 32 * rw + 16, lane, row0, ne1, tok0, nt, y,
                     ldy, alpha, add, rank, splits);
}

/* ------------------------------------------------------------------------
 * The same products on wgmma (Q4_K)
 * ---------------------------------------------------------------------- */

/* Above, each warp's mma waits for its own A registers and B loads, and the
 * multiprocessor's 8 warps (1 block: 188 registers, 208 KiB of stages)
 * leave it idle 60% of cycles (ncu, 14336 x 4096 at 64 tokens: 1.59
 * instructions a cycle, 5 cycles between a warp's instructions). Here a
 * warpgroup's wgmma reads the input straight from shared memory and runs
 * while its warps dequantize the next k16 chunk: warpgroup kg takes
 * K-group kg (half of each super-block), its warp wq rows 16 wq.. and 64 +
 * 16 wq.. of the tile (wgmma m64 tiles). A fragments hold the standard k
 * columns (2qd, 2qd+1, 2qd+8, 2qd+9): the tensor core reads B in order.
 * wgmma exists in sm_90a code only: the portable PTX (other GPUs) gets a
 * trap in its place, and mfk_qgemm sends those devices to mma.sync. */
#if defined(__CUDA_ARCH_FEAT_SM90_ALL) || !defined(__CUDA_ARCH__)
#define QG_WGMMA(...) __VA_ARGS__
#else
#define QG_WGMMA(...) __trap()
#endif

/* D (64 rows x 64 tokens, fp32) += A (64 x 16 bf16, in registers: each
 * warp's 16 rows as mma.m16n8k16 holds them) x B (16 x 64 bf16 in shared
 * memory, K-major core matrices: desc). Asynchronous: the caller fences,
 * commits and waits. */
__device__ __forceinline__ void qg_wgmma64(float (&d)[32], const uint32_t (&a)[4], uint64_t desc)
{
    QG_WGMMA(asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(1)));
}

/* D (64 rows x 32 tokens, fp32) += A (64 x 16 bf16, in registers: each
 * warp's 16 rows as mma.m16n8k16 holds them) x B (16 x 32 bf16 in shared
 * memory, K-major core matrices: desc). Asynchronous: the caller fences,
 * commits and waits. */
__device__ __forceinline__ void qg_wgmma32(float (&d)[16], const uint32_t (&a)[4], uint64_t desc)
{
    QG_WGMMA(asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, {%16, %17, %18, %19}, %20, p, 1, 1, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(1)));
}

__device__ __forceinline__ void wg_fence()
{
    QG_WGMMA(asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"));
}
__device__ __forceinline__ void wg_commit()
{
    QG_WGMMA(asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"));
}
template <int N> __device__ __forceinline__ void wg_wait()
{
    QG_WGMMA(asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory"));
}

/* A shared-memory matrix descriptor: no swizzle, K-major core matrices of
 * 8 rows x 16 bytes, lbo bytes apart along K and sbo along the rows. */
__device__ __forceinline__ uint64_t wg_desc(uint32_t addr, uint32_t lbo, uint32_t sbo)
{
    return (uint64_t)((addr & 0x3FFFF) >> 4) | (uint64_t)(lbo >> 4) << 16 |
           (uint64_t)(sbo >> 4) << 32;
}

template <int NN>
__device__ __forceinline__ void qg_wgmma(float (&d)[NN * 4], const uint32_t (&a)[4], uint64_t desc)
{
    if constexpr (NN == 8)
        qg_wgmma64(d, a, desc);
    else
        qg_wgmma32(d, a, desc);
}

/* Q4_K for warpgroup kg: as qg_slice_q4k, with the standard columns (two
 * 16-bit loads a row and chunk pair) and a wgmma per m64 tile and chunk;
 * one group stays in flight while the next chunk is dequantized. xs: the
 * stage's input (shared-memory address), SW: LBO and SBO swapped (a
 * layout check). */
template <int NN, int SW>
__device__ __forceinline__ void qg_slice_q4k_wg(float (&acc)[2][NN * 4], const uint8_t *ws,
                                                uint32_t xs, int wq, int kg, int g, int qd)
{
    using C = qg_cfg<GGML_TYPE_Q4_K, NN, 1, 1>;
    const uint8_t *rp[2][2];
#pragma unroll
    for (int mt = 0; mt < 2; mt++)
#pragma unroll
        for (int h = 0; h < 2; h++)
            rp[mt][h] = ws + (64 * mt + 16 * wq + g + 8 * h) * C::WSTRIDE;
    float dd[2][2], dm[2][2];
    uint32_t scw[2][2], mnw[2][2];
#pragma unroll
    for (int mt = 0; mt < 2; mt++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const uint4 hd = *reinterpret_cast<const uint4 *>(rp[mt][h]);
            dd[mt][h] = qg_h2f((uint16_t)(hd.x & 0xFFFF));
            dm[mt][h] = qg_h2f((uint16_t)(hd.x >> 16));
            if (kg == 0) {
                scw[mt][h] = hd.y & 0x3F3F3F3Fu;
                mnw[mt][h] = hd.z & 0x3F3F3F3Fu;
            } else {
                scw[mt][h] = (hd.w & 0x0F0F0F0Fu) | ((hd.y >> 2) & 0x30303030u);
                mnw[mt][h] = ((hd.w >> 4) & 0x0F0F0F0Fu) | ((hd.z >> 2) & 0x30303030u);
            }
        }
#pragma unroll
    for (int pp = 0; pp < 2; pp++) {
        float d1[2][2][2], m1[2][2][2];
#pragma unroll
        for (int lh = 0; lh < 2; lh++)
#pragma unroll
            for (int mt = 0; mt < 2; mt++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    d1[lh][mt][h] =
                        __fmul_rn(dd[mt][h], qg_byte(scw[mt][h], 2 * pp + lh) - QG_MAGIC);
                    m1[lh][mt][h] =
                        __fmul_rn(dm[mt][h], qg_byte(mnw[mt][h], 2 * pp + lh) - QG_MAGIC);
                }
#pragma unroll
        for (int hf = 0; hf < 2; hf++) {
            uint32_t q[2][2]; /* bytes 2qd, 2qd + 1, 8 + 2qd, 9 + 2qd of the 16 */
#pragma unroll
            for (int mt = 0; mt < 2; mt++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const uint8_t *b = rp[mt][h] + 16 + 32 * (2 * kg + pp) + 16 * hf + 2 * qd;
                    q[mt][h] = (uint32_t)*reinterpret_cast<const uint16_t *>(b) |
                               (uint32_t)*reinterpret_cast<const uint16_t *>(b + 8) << 16;
                }
#pragma unroll
            for (int lh = 0; lh < 2; lh++) {
                uint32_t a[2][4];
#pragma unroll
                for (int mt = 0; mt < 2; mt++)
#pragma unroll
                    for (int h = 0; h < 2; h++) {
                        const uint32_t nib = (lh ? q[mt][h] >> 4 : q[mt][h]) & 0x0F0F0F0Fu;
                        float v[4];
#pragma unroll
                        for (int i = 0; i < 4; i++)
                            v[i] = fmaf(qg_byte(nib, i) - QG_MAGIC, d1[lh][mt][h], -m1[lh][mt][h]);
                        a[mt][h] = qg_pack(v[0], v[1]);
                        a[mt][2 + h] = qg_pack(v[2], v[3]);
                    }
                /* k16 chunk 8 kg + 2 (2 pp + lh) + hf: 16-byte columns 2c, 2c + 1 */
                const int c = 8 * kg + 2 * (2 * pp + lh) + hf;
                const uint64_t desc = SW ? wg_desc(xs + 2 * c * C::LBO, C::SBO, C::LBO)
                                         : wg_desc(xs + 2 * c * C::LBO, C::LBO, C::SBO);
                wg_fence();
                qg_wgmma<NN>(acc[0], a[0], desc);
                qg_wgmma<NN>(acc[1], a[1], desc);
                wg_commit();
                wg_wait<1>(); /* the previous chunk's A registers are free again */
            }
        }
    }
}

template <int NN, int SW>
__global__ void __launch_bounds__(QG_THREADS, 1)
    k_qgemm_wg(const uint8_t *__restrict__ w, uint64_t rb, int64_t ne0, int64_t ne1,
               const __nv_bfloat16 *__restrict__ x, int nt, float *y, int64_t ldy, float alpha,
               int add, int splits)
{
    using C = qg_cfg<GGML_TYPE_Q4_K, NN, 1, 1>;
    extern __shared__ __align__(16) uint8_t smem[];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, qd = lane & 3;
    const int wq = warp & 3, kg = warp >> 2;
    const int tile = blockIdx.x / splits, rank = blockIdx.x % splits;
    const int64_t row0 = (int64_t)tile * C::TM;
    const int tok0 = blockIdx.y * C::TN, ns = (int)(ne0 / C::KSTAGE);
    const int s0 = (int)((int64_t)ns * rank / splits);
    const int n = (int)((int64_t)ns * (rank + 1) / splits) - s0;
    float acc[2][NN * 4];
#pragma unroll
    for (int mt = 0; mt < 2; mt++)
#pragma unroll
        for (int k = 0; k < NN * 4; k++)
            acc[mt][k] = 0.0f;

    const qg_stager<C> sg(w, rb, row0, ne1, x, ne0, tok0, nt, tid);
    for (int i = 0; i < C::P - 1; i++)
        if (i < n)
            sg.load_w(smem + i * C::STAGE, s0 + i);
    pdl_start();
    for (int i = 0; i < C::P - 1; i++) {
        if (i < n)
            sg.load_x(smem + i * C::STAGE, s0 + i, ne0);
        cp_commit();
    }
    const uint32_t sbase = (uint32_t)__cvta_generic_to_shared(smem);
    for (int i = 0; i < n; i++) {
        cp_wait<C::P - 2>();
        /* cp.async wrote the stage through the generic proxy; wgmma reads
         * it through the async proxy */
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        __syncthreads();
        const int nx = i + C::P - 1;
        if (nx < n)
            sg.load(smem + (nx % C::P) * C::STAGE, s0 + nx, ne0);
        cp_commit();
        const int b = i % C::P;
        qg_slice_q4k_wg<NN, SW>(acc, smem + b * C::STAGE, sbase + b * C::STAGE + C::W_BYTES, wq,
                                kg, g, qd);
        wg_wait<0>(); /* the stage is read before the next barrier frees it */
    }
    cp_wait<0>();
    __syncthreads();
    qg_finish<C, NN>(reinterpret_cast<const float(&)[2][NN][4]>(acc), smem, kg, wq, 16 * wq,
                     64 + 16 * wq, lane, row0, ne1, tok0, nt, y, ldy, alpha, add, rank, splits);
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

/* Launches kernel fn (instance k, of configuration C, MB blocks a
 * multiprocessor) for w x x. */
template <class C, int MB, typename K>
static int qg_launch(struct mfk_ctx *c, int k, K fn, const struct mfk_weight *w,
                     const __nv_bfloat16 *x, int nt, float *y, int64_t ldy, float alpha, int add,
                     struct mf_err *err)
{
    int cluster = 1;
    int rc = qg_ready(c, k, fn, C::SMEM, &cluster, err);
    if (rc)
        return rc;
    const mfk_q q = mfk_queue(c);
    const int64_t row_tiles = (w->ne1 + C::TM - 1) / C::TM, tok_tiles = (nt + C::TN - 1) / C::TN;
    const int splits = mfk_qgemm_splits(row_tiles, tok_tiles, (int)(w->ne0 / C::KSTAGE),
                                        MB * mfk_ctx_qgemm_state(c)->sms, cluster);
    cudaLaunchAttribute at[2];
    int na = 0;
    if (q.pdl) {
        at[na].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        at[na++].val.programmaticStreamSerializationAllowed = 1;
    }
    if (splits > 1) {
        at[na].id = cudaLaunchAttributeClusterDimension;
        at[na].val.clusterDim.x = (unsigned)splits, at[na].val.clusterDim.y = 1;
        at[na++].val.clusterDim.z = 1;
    }
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)(row_tiles * splits), (unsigned)tok_tiles, 1);
    cfg.blockDim = dim3(QG_THREADS, 1, 1);
    cfg.dynamicSmemBytes = C::SMEM, cfg.stream = q.st, cfg.attrs = at, cfg.numAttrs = na;
    cudaLaunchKernelEx(&cfg, fn, (const uint8_t *)w->data, w->row_bytes, w->ne0, w->ne1, x, nt, y,
                       ldy, alpha, add, splits);
    return mfk_launched("qgemm", err);
}

template <int TY, int NN, int MB>
static int qg_mma_launch(struct mfk_ctx *c, int k, const struct mfk_weight *w,
                         const __nv_bfloat16 *x, int nt, float *y, int64_t ldy, float alpha,
                         int add, struct mf_err *err)
{
    return qg_launch<qg_cfg<TY, NN, MB>, MB>(c, k, k_qgemm<TY, NN, MB>, w, x, nt, y, ldy, alpha,
                                             add, err);
}

template <int NN, int SW>
static int qg_wg_launch(struct mfk_ctx *c, int k, const struct mfk_weight *w,
                        const __nv_bfloat16 *x, int nt, float *y, int64_t ldy, float alpha,
                        int add, struct mf_err *err)
{
    return qg_launch<qg_cfg<GGML_TYPE_Q4_K, NN, 1, 1>, 1>(c, k, k_qgemm_wg<NN, SW>, w, x, nt, y,
                                                          ldy, alpha, add, err);
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

extern "C" int mfk_qgemm(struct mfk_ctx *c, const struct mfk_weight *w, const void *x, int32_t nt,
                         float *y, int64_t ldy, float alpha, int add, struct mf_err *err)
{
    if (!mfk_qgemm_takes(c, w, nt) || ((uintptr_t)x & 15))
        return mf_err_set(err, MF_EINVAL, "CUDA qgemm: a %s weight of %lld x %lld at %d tokens "
                          "is not its kind",
                          ggml_type_name((uint32_t)w->type), (long long)w->ne1, (long long)w->ne0,
                          (int)nt);
    const __nv_bfloat16 *xb = (const __nv_bfloat16 *)x;
    const struct qg_state *st = mfk_ctx_qgemm_state(c);
    const int v = st->variant >= 2 && !st->sm90 ? 0 : st->variant, small = nt <= 32;
    if (w->type == GGML_TYPE_Q6_K)
        return small ? qg_mma_launch<GGML_TYPE_Q6_K, 4, 1>(c, 0, w, xb, nt, y, ldy, alpha, add, err)
                     : qg_mma_launch<GGML_TYPE_Q6_K, 8, 1>(c, 1, w, xb, nt, y, ldy, alpha, add, err);
    switch (v) {
    case 1:
        return small ? qg_mma_launch<GGML_TYPE_Q4_K, 4, 2>(c, 2, w, xb, nt, y, ldy, alpha, add, err)
                     : qg_mma_launch<GGML_TYPE_Q4_K, 8, 2>(c, 3, w, xb, nt, y, ldy, alpha, add, err);
    case 2:
        return small ? qg_wg_launch<4, 0>(c, 4, w, xb, nt, y, ldy, alpha, add, err)
                     : qg_wg_launch<8, 0>(c, 5, w, xb, nt, y, ldy, alpha, add, err);
    case 3:
        return small ? qg_wg_launch<4, 1>(c, 6, w, xb, nt, y, ldy, alpha, add, err)
                     : qg_wg_launch<8, 1>(c, 7, w, xb, nt, y, ldy, alpha, add, err);
    default:
        return small ? qg_mma_launch<GGML_TYPE_Q4_K, 4, 1>(c, 8, w, xb, nt, y, ldy, alpha, add, err)
                     : qg_mma_launch<GGML_TYPE_Q4_K, 8, 1>(c, 9, w, xb, nt, y, ldy, alpha, add, err);
    }
}
