/*
 * mmq.cu: Q4_K weights times 5 to 16 tokens on the integer tensor cores.
 *
 * A decode step of a few sequences is too wide for the GEMV (one warp per
 * row decodes each weight again for every 8 tokens and re-reads the input
 * from L1 for each) and too narrow to pay the tensor-core GEMM's per-step
 * dequantization of the whole model to bf16 (38% of a batch-64 step on
 * Q4_K_M, bench/results/cuda-graphs-h200-2026-11-30). Here a Q4_K
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
 * H200, Llama-3-8B Q4_K_M decode: 591 -> 1,020 tokens/s at batch 8, 1,136 ->
 * 1,614 at 16 (against dequantization + cuBLAS). Two earlier shapes, 128 rows
 * a block staged for all four warps and per-sub-block loads of the input,
 * ran 2-7x slower: too few blocks, and each mma waiting on its loads.
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
    if (warp < nsb)
        q4k_stage(tiles[warp][0], w, rb, rbase, ne1, warp, lane);
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
#pragma unroll
        for (int n = 0; n < NT; n++)
#pragma unroll
            for (int i = 0; i < 4; i++)
                part[warp - 1][n * 4 + i][lane] = acc[n][i];
    __syncthreads();
    if (warp > 0)
        return;
#pragma unroll
    for (int n = 0; n < NT; n++)
#pragma unroll
        for (int i = 0; i < 4; i++) {
            float v = acc[n][i];
            for (int k = 0; k < MMQ_KSPLIT - 1; k++)
                v += part[k][n * 4 + i][lane];
            const int64_t r = rbase + g + 8 * (i >> 1);
            const int t = tok0 + n * 8 + 2 * qd + (i & 1);
            if (r < ne1 && t < nt) {
                float *out = y + (int64_t)t * ldy + r;
                *out = add ? *out + v : v;
            }
        }
}

void mfk_mmq_q4k(cudaStream_t st, const struct mfk_weight *w, const int8_t *xq, const float *xd,
                 const float *xs, int nt, float *y, int64_t ldy, int add)
{
    const unsigned gx = (unsigned)((w->ne1 + 15) / 16);
    const uint8_t *d = (const uint8_t *)w->data;
#define MMQ_LAUNCH(NT)                                                                             \
    k_mmq_q4k<NT><<<dim3(gx, (unsigned)((nt + 8 * (NT)-1) / (8 * (NT)))), MMQ_KSPLIT * 32, 0,     \
                    st>>>(d, w->row_bytes, w->ne0, w->ne1, xq, xd, xs, nt, y, ldy, add)
    if (nt <= 8)
        MMQ_LAUNCH(1);
    else
        MMQ_LAUNCH(MMQ_NT);
#undef MMQ_LAUNCH
}
