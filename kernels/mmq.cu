/*
 * mmq.cu: Q4_K weights times 5 tokens or more on the integer tensor cores
 * (the backend sends it 5 to 8: runtime/cuda/cuda_plan.h).
 *
 * A decode step of a few sequences is too wide for the GEMV (one warp per
 * row decodes each weight again for every 8 tokens and re-reads the input
 * from L1 for each) and too narrow to pay the tensor-core GEMM's per-step
 * dequantization of the whole model to bf16 (38% of a batch-64 step on
 * Q4_K_M, bench/results/2026-11-30.md). Here a Q4_K
 * super-block's nibbles go as they are, as int8 0..15, into
 * mma.m16n8k32.s8 against the input quantized to 8 bits per 32 elements
 * (llama.cu's k_quant_act, the GEMV's input): one mma is one 32-element
 * sub-block of 16 rows x 8 tokens, whose int32 sums take the sub-block's
 * scale and the input block's as the GEMV does:
 *     y += d*sc * xd * sum(q_w q_x) - dmin*m * xd * sum(q_x)
 * (xs = xd * sum(q_x), per input block, from k_quant_act too).
 *
 * A block is 16 rows (one m16 tile) and up to 8 x MMQ_NT tokens (more
 * tokens: more blocks, each reading the weights again), in MMQ_KSPLIT warps
 * that deal the rows' super-blocks out among them, so even a 1024-row
 * product has hundreds of warps streaming weights. Each warp copies its
 * next super-block of the 16 rows (2304 bytes) into its own shared buffer
 * with cp.async while it computes on the current one, and loads the
 * current one's input for its tokens (B words, and the scales and sums it
 * shuffles to the lanes that need them) in one go before the eight mma, so
 * no load waits on another. Fragments come from shared memory without bank
 * conflicts (a row is 36 words: 8 rows x 4 words land on 32 banks). The
 * warps' sums meet in shared memory in a fixed order: a product's result
 * does not depend on timing.
 *
 * H200, Llama-3-8B Q4_K_M decode: 1,020 tokens/s at batch 8 against 591
 * for dequantization + cuBLAS, 1,614 against 1,136 at 16. Two other shapes,
 * 128 rows a block staged for all four warps and per-sub-block loads of the
 * input, ran 2-7x slower: too few blocks, and each mma waiting on its loads.
 */
#include "kernels/kernels.h"
#include "kernels/internal.cuh"

#include <cstdint>

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#define MMQ_KSPLIT 4 /* warps of a block: one m16 tile of rows, the super-blocks dealt out */
#define Q4K_BYTES 144 /* a super-block: d, dmin, 12 scale bytes, 128 of nibbles */

__device__ __forceinline__ void mma_s8(int (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                       uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, "
                 "{%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};\n"
                 : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(0), "r"(0),
                   "r"(0), "r"(0));
}

#define TILE_BYTES (16 * Q4K_BYTES) /* one super-block of a warp's 16 rows */

/* Super-block sb of rows row0.. row0 + 15 (those past ne1 zero) into dst,
 * by the warp's lanes, as one cp.async group. */
__device__ __forceinline__ void q4k_stage(uint8_t *dst, const uint8_t *w, uint64_t rb,
                                          int64_t row0, int64_t ne1, int sb, int lane)
{
    for (int v = lane; v < TILE_BYTES / 16; v += 32) {
        const int64_t r = row0 + v / (Q4K_BYTES / 16);
        const bool live = r < ne1;
        cp_async16(dst + 16 * v,
                   w + (uint64_t)(live ? r : 0) * rb + (uint64_t)sb * Q4K_BYTES +
                       16 * (uint64_t)(v % (Q4K_BYTES / 16)),
                   live ? 16 : 0);
    }
    asm volatile("cp.async.commit_group;\n" ::);
}

/* A warp's mma sums acc[n][0..3] (rows g, g + 8 of its 16; tokens 8n + 2qd
 * and the next) into part, where group o's go at o * stride, for group 0
 * to add (mmq_store). */
template <int NN>
__device__ __forceinline__ void mmq_put(const float (&acc)[NN][4], float *part, int lane)
{
#pragma unroll
    for (int n = 0; n < NN; n++)
#pragma unroll
        for (int k = 0; k < 4; k++)
            part[(n * 4 + k) * 32 + lane] = acc[n][k];
}

/* Group 0's sums plus the other groups' (mmq_put's, added in group order,
 * so every launch rounds alike) stored to y[t][r], rows from r0 and tokens
 * from t0 that are in range only. */
template <int NN>
__device__ __forceinline__ void mmq_store(const float (&acc)[NN][4], const float *part, int groups,
                                          int stride, int lane, int64_t r0, int t0, int64_t ne1,
                                          int nt, float *y, int64_t ldy, int add)
{
    const int g = lane >> 2, qd = lane & 3;
#pragma unroll
    for (int n = 0; n < NN; n++)
#pragma unroll
        for (int k = 0; k < 4; k++) {
            float v = acc[n][k];
            for (int o = 0; o < groups - 1; o++)
                v += part[o * stride + (n * 4 + k) * 32 + lane];
            const int64_t r = r0 + g + 8 * (k >> 1);
            const int t = t0 + 8 * n + 2 * qd + (k & 1);
            if (r < ne1 && t < nt) {
                float *out = y + (int64_t)t * ldy + r;
                *out = add ? *out + v : v;
            }
        }
}

/* grid (rows / 16, tokens / (8 NT)), MMQ_KSPLIT warps on the same 16 rows,
 * each taking every MMQ_KSPLIT-th super-block, their sums added in shared
 * memory in warp order at the end; y[t][r] (+)= row r of w . token t's
 * input. xq: int8 [nt][ne0]; xd, xs: float [nt][ne0 / 32]. */
template <int NT>
__global__ void __launch_bounds__(MMQ_KSPLIT * 32, 4)
    k_mmq_q4k(const uint8_t *__restrict__ w, uint64_t rb, int64_t ne0, int64_t ne1,
              const int8_t *__restrict__ xq, const float *__restrict__ xd,
              const float *__restrict__ xs, int nt, float *y, int64_t ldy, int add)
{
    __shared__ __align__(16) uint8_t tiles[MMQ_KSPLIT][2][TILE_BYTES];
    __shared__ float part[MMQ_KSPLIT - 1][NT * 4][32];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, qd = lane & 3;
    const int64_t rbase = (int64_t)blockIdx.x * 16;
    const int tok0 = blockIdx.y * 8 * NT, nsb = (int)(ne0 >> 8);
    const int64_t nd = ne0 / 32;
    float acc[NT][4];
#pragma unroll
    for (int n = 0; n < NT; n++)
#pragma unroll
        for (int i = 0; i < 4; i++)
            acc[n][i] = 0.0f;

    int buf = 0;
    if (warp < nsb) /* weights only: before the wait for the input */
        q4k_stage(tiles[warp][0], w, rb, rbase, ne1, warp, lane);
    pdl_start();
    for (int sb = warp; sb < nsb; sb += MMQ_KSPLIT, buf ^= 1) {
        if (sb + MMQ_KSPLIT < nsb) { /* the next one streams in while this one is used */
            q4k_stage(tiles[warp][buf ^ 1], w, rb, rbase, ne1, sb + MMQ_KSPLIT, lane);
            asm volatile("cp.async.wait_group 1;\n" ::);
        } else {
            asm volatile("cp.async.wait_group 0;\n" ::);
        }
        __syncwarp();
        const uint8_t *b[2] = {tiles[warp][buf] + g * Q4K_BYTES,
                               tiles[warp][buf] + (g + 8) * Q4K_BYTES};
        uint4 hd[2]; /* rows g, g + 8: d, dmin, the 12 scale bytes */
        float dd[2], dm[2];
#pragma unroll
        for (int h = 0; h < 2; h++) {
            hd[h] = *reinterpret_cast<const uint4 *>(b[h]);
            dd[h] = __half2float(__ushort_as_half((uint16_t)(hd[h].x & 0xFFFF)));
            dm[h] = __half2float(__ushort_as_half((uint16_t)(hd[h].x >> 16)));
        }
        /* the super-block's input for the block's tokens, all loads at once:
         * xb[n][j][0..1] this lane's B words (token n*8 + g, k 4qd and
         * 16 + 4qd of sub-block j); sd/ss[n][h] xd, xs of token n*8 + (lane
         * & 7), sub-block (lane >> 3) + 4h, which the sums' lanes shuffle in */
        uint32_t xb[NT][8][2];
        float sd[NT][2], ss[NT][2];
#pragma unroll
        for (int n = 0; n < NT; n++) {
            const int tb = tok0 + n * 8 + g, tl = tok0 + n * 8 + (lane & 7);
#pragma unroll
            for (int j = 0; j < 8; j++) {
                const int8_t *xr = xq + (int64_t)tb * ne0 + (int64_t)sb * 256 + 32 * j + 4 * qd;
                xb[n][j][0] = tb < nt ? __ldg(reinterpret_cast<const uint32_t *>(xr)) : 0u;
                xb[n][j][1] = tb < nt ? __ldg(reinterpret_cast<const uint32_t *>(xr + 16)) : 0u;
            }
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int64_t o = (int64_t)tl * nd + (int64_t)sb * 8 + (lane >> 3) + 4 * h;
                sd[n][h] = tl < nt ? __ldg(xd + o) : 0.0f;
                ss[n][h] = tl < nt ? __ldg(xs + o) : 0.0f;
            }
        }
#pragma unroll
        for (int j = 0; j < 8; j++) { /* sub-block j: nibbles (j & 1) of the bytes of j / 2 */
            uint32_t a[4]; /* a0: row g, k 4qd; a1: row g + 8; a2, a3: k + 16 */
#pragma unroll
            for (int i = 0; i < 4; i++)
                a[i] = (*reinterpret_cast<const uint32_t *>(b[i & 1] + 16 + 32 * (j >> 1) +
                                                            4 * qd + 16 * (i >> 1)) >>
                        (4 * (j & 1))) &
                       0x0F0F0F0Fu;
            float fs[2], fm[2];
#pragma unroll
            for (int h = 0; h < 2; h++) {
                int sc, mn;
                q4k_scale_min(hd[h], j, &sc, &mn);
                fs[h] = dd[h] * (float)sc;
                fm[h] = dm[h] * (float)mn;
            }
            const int src = 2 * qd + 8 * (j & 3); /* the lane holding token 2qd's values */
#pragma unroll
            for (int n = 0; n < NT; n++) {
                /* tokens tc = n*8 + 2qd and tc + 1 of this lane's sums */
                const float xd0 = __shfl_sync(0xffffffffu, sd[n][j >> 2], src);
                const float xd1 = __shfl_sync(0xffffffffu, sd[n][j >> 2], src + 1);
                const float xs0 = __shfl_sync(0xffffffffu, ss[n][j >> 2], src);
                const float xs1 = __shfl_sync(0xffffffffu, ss[n][j >> 2], src + 1);
                int c[4];
                mma_s8(c, a, xb[n][j][0], xb[n][j][1]);
                /* c0, c1: row g, tokens tc, tc + 1; c2, c3: row g + 8 */
                acc[n][0] += fs[0] * xd0 * (float)c[0] - fm[0] * xs0;
                acc[n][1] += fs[0] * xd1 * (float)c[1] - fm[0] * xs1;
                acc[n][2] += fs[1] * xd0 * (float)c[2] - fm[1] * xs0;
                acc[n][3] += fs[1] * xd1 * (float)c[3] - fm[1] * xs1;
            }
        }
        __syncwarp(); /* tiles[warp][buf] is free for the stage after next */
    }
    /* the warps' sums, added in warp order (the same for every launch) */
    if (warp > 0)
        mmq_put<NT>(acc, &part[warp - 1][0][0], lane);
    __syncthreads();
    if (warp == 0)
        mmq_store<NT>(acc, &part[0][0][0], MMQ_KSPLIT, NT * 4 * 32, lane, rbase, tok0, ne1, nt, y,
                      ldy, add);
}

/* ------------------------------------------------------------------------
 * More than MFK_MMQ_TOKENS tokens: tiles
 * ---------------------------------------------------------------------- */

/* Above, every 16-row block reads its tokens' input again from L2 for each
 * super-block: at 64 tokens that is 16 KiB of input per 2.3 KiB of weights,
 * and the step waits on L2. Here a block takes a tile of TM rows x TN
 * tokens and stages one super-block of both, weights and input, in shared
 * memory, where its warps share them: a warp per 16 rows (one m16 tile) x
 * all TN tokens (n8 tiles), in KG K-groups taking every KG-th super-block,
 * each with its own double-buffered stage (cp.async), their sums added at
 * the end in a fixed order. The arithmetic per sub-block is the small
 * kernel's, so both give the same sums up to the order of the additions.
 * The kernel is bound by its instructions: the int32 sums of each
 * sub-block take their two scales in floats, four operations for every
 * four products of an mma, so qgemm.cu, dequantizing into the bf16 tensor
 * cores, takes the backend's steps past 8 tokens (runtime/cuda/cuda_plan.h);
 * these tiles serve direct mfk_gemv calls and steps without cuBLAS.
 * Stage layout (bytes): the tile's rows as they are (TM x 144; a row is 36
 * words, so the eight rows g of a fragment load land on distinct banks),
 * the tokens' 256 input bytes at a stride of 272 (68 words: again distinct
 * banks), then {xd, xs} of each (sub-block, token) pair, token-minor, so a
 * lane's two tokens of an n8 tile are one 16-byte load. */
#define MMQ_XSTRIDE 272

template <int TM, int TN, int KG> struct tile_cfg {
    static constexpr int KGT = TM / 16 * 32; /* threads of a K-group: a warp per 16 rows */
    static constexpr int W_BYTES = TM * Q4K_BYTES, X_BYTES = TN * MMQ_XSTRIDE;
    static constexpr int STAGE = W_BYTES + X_BYTES + 8 * TN * 2 * 4;
    static constexpr int SMEM = KG * 2 * STAGE;
    static constexpr int SL = 4 * TN / KGT; /* 16-byte scale loads per thread and stage */
    static_assert(SL >= 1 && (4 * TN) % KGT == 0, "whole scale loads per thread");
};

/* Super-block sb of the tile's weights and input bytes (rows row0..,
 * tokens tok0..; those past ne1 or nt zero) into stage dst by the
 * K-group's threads (i), one cp.async group. */
template <typename C>
__device__ __forceinline__ void tile_stage(uint8_t *dst, const uint8_t *w, uint64_t rb,
                                           int64_t row0, int64_t ne1, const int8_t *xq,
                                           int64_t ne0, int tok0, int nt, int sb, int i)
{
    for (int v = i; v < C::W_BYTES / 16; v += C::KGT) {
        const int rr = v / (Q4K_BYTES / 16), cc = v - rr * (Q4K_BYTES / 16);
        const bool live = row0 + rr < ne1;
        cp_async16(dst + 16 * v,
                   w + (uint64_t)(live ? row0 + rr : 0) * rb + (uint64_t)sb * Q4K_BYTES + 16 * cc,
                   live ? 16 : 0);
    }
    uint8_t *xdst = dst + C::W_BYTES;
    for (int v = i; v < C::X_BYTES / MMQ_XSTRIDE * 16; v += C::KGT) {
        const int t = tok0 + (v >> 4);
        const bool live = t < nt;
        cp_async16(xdst + (v >> 4) * MMQ_XSTRIDE + 16 * (v & 15),
                   xq + (int64_t)(live ? t : 0) * ne0 + (int64_t)sb * 256 + 16 * (v & 15),
                   live ? 16 : 0);
    }
    asm volatile("cp.async.commit_group;\n" ::);
}

/* The input scales of super-block sb go through registers, not cp.async:
 * the stage wants them (sub-block, token)-major for one 16-byte load per
 * lane and n8 tile, and 4-byte copies of that transpose were 512 scattered
 * L1 requests a stage. Load e of thread i takes quarter q = i + e KGT:
 * token q / 4's xd (q & 2: xs) of sub-blocks 4 (q & 1).. + 3, one 16-byte
 * load (zeros past nt)... */
template <typename C>
__device__ __forceinline__ void scale_load(float4 (&v)[C::SL], const float *xd, const float *xs,
                                           int64_t ne0, int tok0, int nt, int sb, int i)
{
#pragma unroll
    for (int e = 0; e < C::SL; e++) {
        const int q = i + e * C::KGT, t = tok0 + (q >> 2);
        const float *src =
            (q & 2 ? xs : xd) + (int64_t)t * (ne0 / 32) + (int64_t)sb * 8 + 4 * (q & 1);
        v[e] = t < nt ? __ldg(reinterpret_cast<const float4 *>(src))
                      : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
}

/* ... and stores them in the stage at {xd, xs}[sub-block][token]. */
template <typename C, int TN>
__device__ __forceinline__ void scale_store(uint8_t *dst, const float4 (&v)[C::SL], int i)
{
    float *ss = reinterpret_cast<float *>(dst + C::W_BYTES + C::X_BYTES);
#pragma unroll
    for (int e = 0; e < C::SL; e++) {
        const int q = i + e * C::KGT, tk = q >> 2, which = (q >> 1) & 1, j0 = 4 * (q & 1);
        ss[((j0 + 0) * TN + tk) * 2 + which] = v[e].x;
        ss[((j0 + 1) * TN + tk) * 2 + which] = v[e].y;
        ss[((j0 + 2) * TN + tk) * 2 + which] = v[e].z;
        ss[((j0 + 3) * TN + tk) * 2 + which] = v[e].w;
    }
}

/* The K-group's warps meet (named barrier 1 + kg; immediates, as a
 * register id makes ptxas reserve all 16 barriers). */
template <int N> __device__ __forceinline__ void kg_sync(int kg)
{
    switch (kg) {
    case 0: asm volatile("bar.sync 1, %0;\n" ::"n"(N)); break;
    case 1: asm volatile("bar.sync 2, %0;\n" ::"n"(N)); break;
    case 2: asm volatile("bar.sync 3, %0;\n" ::"n"(N)); break;
    default: asm volatile("bar.sync 4, %0;\n" ::"n"(N)); break;
    }
}

/* grid (tokens / TN, rows / TM), KG x TM / 16 warps; y[t][r] (+)= row r of
 * w . token t's input, as k_mmq_q4k. */
template <int TM, int TN, int KG>
__global__ void __launch_bounds__(KG * TM / 16 * 32, 1)
    k_mmq_q4k_tile(const uint8_t *__restrict__ w, uint64_t rb, int64_t ne0, int64_t ne1,
                   const int8_t *__restrict__ xq, const float *__restrict__ xd,
                   const float *__restrict__ xs, int nt, float *y, int64_t ldy, int add)
{
    using C = tile_cfg<TM, TN, KG>;
    static_assert(KG <= 4, "four named barriers");
    extern __shared__ __align__(16) uint8_t smem[];
    constexpr int NN = TN / 8, NA = NN * 4; /* n8 tiles; sums a lane keeps */
    const int lane = threadIdx.x & 31, g = lane >> 2, qd = lane & 3;
    const int kg = threadIdx.x / C::KGT, ik = threadIdx.x % C::KGT, rw = ik >> 5;
    const int64_t row0 = (int64_t)blockIdx.y * TM;
    const int tok0 = blockIdx.x * TN, nsb = (int)(ne0 >> 8);
    uint8_t *stage[2] = {smem + (size_t)(2 * kg) * C::STAGE,
                         smem + (size_t)(2 * kg + 1) * C::STAGE};
    float acc[NN][4];
#pragma unroll
    for (int n = 0; n < NN; n++)
#pragma unroll
        for (int k = 0; k < 4; k++)
            acc[n][k] = 0.0f;

    int buf = 0;
    float4 snext[C::SL];
    pdl_start();
    if (kg < nsb) {
        tile_stage<C>(stage[0], w, rb, row0, ne1, xq, ne0, tok0, nt, kg, ik);
        scale_load<C>(snext, xd, xs, ne0, tok0, nt, kg, ik);
        scale_store<C, TN>(stage[0], snext, ik);
    }
    for (int sb = kg; sb < nsb; sb += KG, buf ^= 1) {
        const bool more = sb + KG < nsb;
        if (more) {
            tile_stage<C>(stage[buf ^ 1], w, rb, row0, ne1, xq, ne0, tok0, nt, sb + KG, ik);
            scale_load<C>(snext, xd, xs, ne0, tok0, nt, sb + KG, ik);
            asm volatile("cp.async.wait_group 1;\n" ::);
        } else {
            asm volatile("cp.async.wait_group 0;\n" ::);
        }
        kg_sync<C::KGT>(kg); /* every warp's copies of this stage have landed */
        const uint8_t *ws = stage[buf] + (size_t)(16 * rw) * Q4K_BYTES;
        const uint8_t *xs8 = stage[buf] + C::W_BYTES;
        const float *ss = reinterpret_cast<const float *>(stage[buf] + C::W_BYTES + C::X_BYTES);
        uint4 hd[2]; /* rows g, g + 8 of the warp's 16 */
        float dd[2], dm[2];
#pragma unroll
        for (int h = 0; h < 2; h++) {
            hd[h] = *reinterpret_cast<const uint4 *>(ws + (g + 8 * h) * Q4K_BYTES);
            dd[h] = __half2float(__ushort_as_half((uint16_t)(hd[h].x & 0xFFFF)));
            dm[h] = __half2float(__ushort_as_half((uint16_t)(hd[h].x >> 16)));
        }
#pragma unroll
        for (int j = 0; j < 8; j++) {
            float fs[2], fm[2];
#pragma unroll
            for (int h = 0; h < 2; h++) {
                int sc, mn;
                q4k_scale_min(hd[h], j, &sc, &mn);
                fs[h] = dd[h] * (float)sc;
                fm[h] = -dm[h] * (float)mn;
            }
            uint32_t a[4]; /* a0 row g, k 4qd; a1 row g + 8; a2, a3: k + 16 */
#pragma unroll
            for (int k = 0; k < 4; k++)
                a[k] = (*reinterpret_cast<const uint32_t *>(ws + (g + 8 * (k & 1)) * Q4K_BYTES +
                                                            16 + 32 * (j >> 1) + 4 * qd +
                                                            16 * (k >> 1)) >>
                        (4 * (j & 1))) &
                       0x0F0F0F0Fu;
#pragma unroll
            for (int n = 0; n < NN; n++) {
                const uint8_t *xb = xs8 + (8 * n + g) * MMQ_XSTRIDE + 32 * j + 4 * qd;
                const uint32_t b0 = *reinterpret_cast<const uint32_t *>(xb);
                const uint32_t b1 = *reinterpret_cast<const uint32_t *>(xb + 16);
                /* {xd, xs} of tokens 8n + 2qd and the next */
                const float4 sx =
                    *reinterpret_cast<const float4 *>(ss + 2 * (j * TN + 8 * n + 2 * qd));
                int c[4];
                mma_s8(c, a, b0, b1);
                /* c0, c1: row g, tokens 2qd, 2qd + 1; c2, c3: row g + 8 */
                acc[n][0] = fmaf(fm[0], sx.y, fmaf(fs[0] * sx.x, (float)c[0], acc[n][0]));
                acc[n][1] = fmaf(fm[0], sx.w, fmaf(fs[0] * sx.z, (float)c[1], acc[n][1]));
                acc[n][2] = fmaf(fm[1], sx.y, fmaf(fs[1] * sx.x, (float)c[2], acc[n][2]));
                acc[n][3] = fmaf(fm[1], sx.w, fmaf(fs[1] * sx.z, (float)c[3], acc[n][3]));
            }
        }
        if (more) /* the next stage was last read before the previous barrier */
            scale_store<C, TN>(stage[buf ^ 1], snext, ik);
        kg_sync<C::KGT>(kg); /* stage[buf] is free for the copy after next */
    }
    /* the other K-groups' sums into shared memory (the stages are done
     * with), added to K-group 0's in K-group order */
    __syncthreads();
    float *part = reinterpret_cast<float *>(smem) + rw * NA * 32;
    constexpr int STRIDE = TM / 16 * NA * 32; /* a K-group's sums */
    if (kg > 0)
        mmq_put<NN>(acc, part + (kg - 1) * STRIDE, lane);
    __syncthreads();
    if (kg == 0)
        mmq_store<NN>(acc, part, KG, STRIDE, lane, row0 + 16 * rw, tok0, ne1, nt, y, ldy, add);
}

/* The tile shape: 64 rows x 32 tokens in four K-groups (16 warps). Per
 * k_mmq_q4k_tile of a 4096 x 4096 product at 64 tokens (H200, ncu): 23.8
 * us, 43 instructions an mma (the scales' float work, the staging); 32 rows
 * x 64 tokens (A fragments and scale decodes shared by eight mma, 34
 * instructions an mma, but 8 warps a multiprocessor) took 25.5 us; two
 * K-groups of 32-row warps, 29 us. */
#define MMQ_TILE 64, 32, 4

template <int TM, int TN, int KG>
static void tile_launch(const mfk_q &q, const struct mfk_weight *w, const int8_t *xq,
                        const float *xd, const float *xs, int nt, float *y, int64_t ldy, int add)
{
    mfk_go(q, dim3((unsigned)((nt + TN - 1) / TN), (unsigned)((w->ne1 + TM - 1) / TM)),
           KG * TM / 16 * 32, tile_cfg<TM, TN, KG>::SMEM, k_mmq_q4k_tile<TM, TN, KG>,
           (const uint8_t *)w->data, w->row_bytes, w->ne0, w->ne1, xq, xd, xs, nt, y, ldy, add);
}

void mfk_mmq_q4k(const mfk_q &q, const struct mfk_weight *w, const int8_t *xq, const float *xd,
                 const float *xs, int nt, float *y, int64_t ldy, int add)
{
    const unsigned gx = (unsigned)((w->ne1 + 15) / 16);
    const uint8_t *d = (const uint8_t *)w->data;
#define MMQ_LAUNCH(NT)                                                                             \
    mfk_go(q, dim3(gx, (unsigned)((nt + 8 * (NT)-1) / (8 * (NT)))), MMQ_KSPLIT * 32, 0,            \
           k_mmq_q4k<NT>, d, w->row_bytes, w->ne0, w->ne1, xq, xd, xs, nt, y, ldy, add)
    if (nt <= 8)
        MMQ_LAUNCH(1);
    else if (nt <= MFK_MMQ_TOKENS)
        MMQ_LAUNCH(MMQ_NT);
    else
        tile_launch<MMQ_TILE>(q, w, xq, xd, xs, nt, y, ldy, add);
#undef MMQ_LAUNCH
}

int mfk_mmq_ready(struct mfk_ctx *c, struct mf_err *err)
{
    int *raised = mfk_ctx_mmq_smem(c);
    if (*raised)
        return 0;
    int rc = mfk_raise_smem((const void *)k_mmq_q4k_tile<MMQ_TILE>, tile_cfg<MMQ_TILE>::SMEM, "mmq",
                            err);
    *raised = !rc;
    return rc;
}
