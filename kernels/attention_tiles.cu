/*
 * attention_tiles.cu: paged attention for runs of a sequence's new tokens
 * (prefill, chunked prefill) on the tensor cores, a tile of up to 16
 * consecutive tokens against one KV head per thread block, each warp one
 * of the query heads that share it. Each K/V block is read once per tile
 * instead of once per token, and nothing is kept per context position, so
 * no context is too long.
 *
 * The weights are the CPU's: P = fp16(expf(s - max) / sum), normalised
 * before the fp16 rounding (an online softmax that rounds them first, the
 * usual flash-attention form, moved a greedy token of a BF16 model in
 * test_cuda), then O += P V in fp32, the sum of exponentials in double.
 * k_flash walks the context twice: each lane's running max and sum (the
 * sum rescaled in double when the max grows), then P V. k_tiles walks it
 * three times (max, sum, P V). What they give is the CPU backend's F16
 * path up to the order of the fp32 sums and, for k_flash, the rounding of
 * the rescales.
 *
 * k_flash (head_dim 64 and 128, the models that matter) stages a few KV
 * blocks at a time in shared memory with cp.async, double-buffered, for all
 * warps of the block; keeps the queries, the scores and O in registers
 * (mma.sync m16n8k16, the scores' accumulator layout reused as the P
 * operand); and reads keys and values with ldmatrix from XOR-swizzled rows,
 * free of bank conflicts. k_tiles takes any head_dim that is a multiple of
 * 16 (wmma through per-warp shared memory, each warp loading its own K/V).
 */
#include "kernels/kernels.h"
#include "kernels/internal.cuh"

#include <cfloat>
#include <cstdint>
#include <type_traits>

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <mma.h>

#define FA_ROWS 16      /* tokens per tile (CUDA_PLAN_TILE) */
#define FA_MAX_WARPS 8  /* query heads (warps) per tile block */
#define FA_MAX_DIM 256  /* head_dim the tiles take, at most */
#define FA_SMEM_MAX ((size_t)200 << 10)

/* ------------------------------------------------------------------------
 * k_flash: head_dim 64 or 128
 * ---------------------------------------------------------------------- */

#define FL_SB 1 /* KV blocks (of KVB positions) a stage brings in */

/* A stage: FL_SB blocks of keys, [hd][KVB] fp16 (rows of 32 bytes whose
 * two 16-byte halves swap on rows 4-7 of every 8), then FL_SB blocks of
 * values, [KVB][hd] fp16 (16-byte chunk c of row j at c ^ (j & 7)). The
 * swizzles put the 8 rows an ldmatrix phase reads on 8 distinct bank
 * groups. */
template <int HD> struct fl {
    static constexpr int KB = HD * KVB * 2; /* bytes of one block's keys */
    static constexpr int STAGE = 2 * FL_SB * KB;
    static __device__ __forceinline__ int koff(int d, int h) { return d * 32 + ((h ^ ((d >> 2) & 1)) << 4); }
    static __device__ __forceinline__ int voff(int j, int c) { return j * HD * 2 + ((c ^ (j & 7)) << 4); }
};

/* Four 8x8 fp16 matrices from shared memory, transposed: lane l gives the
 * address of row l % 8 of matrix l / 8. */
__device__ __forceinline__ void ldsm_t4(uint32_t (&r)[4], const void *p)
{
    const unsigned a = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}

__device__ __forceinline__ uint32_t h2_bits(float lo, float hi)
{
    const __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t *>(&h);
}

/* 8 int8 values times their scales (sc[0..7], or sc[0] for all), as the
 * 8 fp16 an F16 arena would hold (kv8_value). */
__device__ __forceinline__ uint4 kv8_chunk(uint2 b, const float *sc, int step)
{
    const uint32_t w[2] = {b.x, b.y};
    uint32_t o[4];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int e = 2 * i;
        const float lo = (float)(int8_t)(w[e >> 2] >> (8 * (e & 3))) * sc[e * step];
        const float hi = (float)(int8_t)(w[e >> 2] >> (8 * ((e + 1) & 3))) * sc[(e + 1) * step];
        o[i] = h2_bits(lo, hi);
    }
    return make_uint4(o[0], o[1], o[2], o[3]);
}

/* Where KV head g's keys (kv 0) or values (kv 1) of layer `layer` sit in
 * a block: arena + blk * stride + off, in bytes (kv_index, kv8_offset). */
struct fl_src {
    const unsigned char *base;
    size_t stride, off[2];
};
template <int HD, bool Q8>
__device__ __forceinline__ fl_src fl_src_of(const struct mfk_kv_shape &s, int32_t layer, int g,
                                            const void *kv)
{
    const size_t unit = Q8 ? (size_t)KVB * (HD + 4) : (size_t)KVB * HD * 2;
    const size_t h = (size_t)s.n_head_kv;
    return {(const unsigned char *)kv, (size_t)s.n_layer * 2 * h * unit,
            {((size_t)layer * 2 * h + g) * unit, (((size_t)layer * 2 + 1) * h + g) * unit}};
}

/* Blocks b0 .. of the tile's context (at most FL_SB, fewer at the end)
 * by the block's threads, as one cp.async group: keys into kbuf when
 * `keys`, values into vbuf when `values` (rows past the last block's `tail`
 * slot zero, since nothing wrote them and 0 x NaN is NaN). Chunk i (16 bytes) of a block's keys or
 * values is bytes 16 i of the arena's. The 8-bit arena is widened to fp16
 * on the way (plain loads and stores, visible after the caller's barrier). */
template <int HD, bool Q8>
__device__ __forceinline__ void fl_stage(const fl_src &src, const int32_t *bt, int b0, int nblk,
                                         int tail, bool keys, bool values, unsigned char *kbuf,
                                         unsigned char *vbuf, int tid, int nthr)
{
    typedef fl<HD> L;
    constexpr int CH = HD * KVB * 2 / 16; /* 16-byte chunks of a block's keys (or values) */
    const int nb = nblk - b0 < FL_SB ? nblk - b0 : FL_SB;
    for (int bb = 0; bb < nb; bb++) {
        const unsigned char *blk = src.base + (size_t)bt[b0 + bb] * src.stride;
        const unsigned char *k = blk + src.off[0], *v = blk + src.off[1];
        unsigned char *kd = kbuf + bb * L::KB, *vd = vbuf + bb * L::KB;
        const int vlim = b0 + bb < nblk - 1 ? KVB : tail + 1; /* value rows written */
        for (int i = tid; i < CH; i += nthr) {
            const int d = i >> 1, h = i & 1, j = i / (HD / 8), c = i % (HD / 8);
            if constexpr (Q8) {
                const float *ksc = (const float *)(k + KVB * HD) + 8 * h;
                if (keys)
                    *reinterpret_cast<uint4 *>(kd + L::koff(d, h)) =
                        kv8_chunk(*reinterpret_cast<const uint2 *>(k + 8 * i), ksc, 1);
                if (values)
                    *reinterpret_cast<uint4 *>(vd + L::voff(j, c)) =
                        j < vlim ? kv8_chunk(*reinterpret_cast<const uint2 *>(v + 8 * i),
                                             (const float *)(v + KVB * HD) + j, 0)
                                 : make_uint4(0, 0, 0, 0);
            } else {
                if (keys)
                    cp_async16(kd + L::koff(d, h), k + 16 * i, 16);
                if (values)
                    cp_async16(vd + L::voff(j, c), v + 16 * i, j < vlim ? 16 : 0);
            }
        }
    }
    asm volatile("cp.async.commit_group;\n" ::);
}

/* A score row's running max m and sum l (of expf(s - m), double) are
 * spread over the 4 lanes of an mma quad: each becomes the row's, every
 * lane's sum rescaled to the common max before the sums are added. */
__device__ __forceinline__ void quad_max_sum(float &m, double &l)
{
    float mr = m;
    for (int x = 1; x < 4; x <<= 1)
        mr = fmaxf(mr, __shfl_xor_sync(0xffffffffu, mr, x));
    l = m == -INFINITY ? 0.0 : l * exp((double)m - (double)mr);
    for (int x = 1; x < 4; x <<= 1)
        l += __shfl_xor_sync(0xffffffffu, l, x);
    m = mr;
}

/* At most 128 registers, no spills, with stages of one KV block: four
 * 4-warp blocks a multiprocessor. H200, 2048-token prefill, two runs each
 * in one call (bench/results/2026-11-30.md): BF16 31.2k / 31.3k against
 * 30.6k / 30.8k tokens/s for stages of two at 168 registers (three blocks),
 * Q4_K_M 29.7k / 29.7k against 29.2k / 29.2k. Stages of two without a
 * register cap ran 27.8k against 28.7k at 168; stages of 4, 27.7k. */
#define FL_MAX_REGS 128
/* grid (n_tiles, n_head_kv), NW warps: warp w takes query head w (then
 * w + NW, ... when the KV head has more) of KV head g for the tile's n
 * tokens, rows 0..15 of the m16 tiles (rows past n masked out and not
 * written). A lane holds rows lane / 4 and lane / 4 + 8, slots
 * 2 (lane % 4) + {0, 1, 8, 9} of each KV block's scores. Tiles are taken
 * in reverse: the longest contexts (a prompt's last tiles) start first. */
template <int HD, bool Q8>
__global__ void __maxnreg__(FL_MAX_REGS)
    k_flash(struct mfk_kv_shape s, int32_t layer, const int32_t *tiles, const float *q, int64_t ldq,
            const int32_t *pos, const int32_t *toff, const int32_t *tables, const void *kv,
            float *out, int64_t ldo, int skip1)
{
    pdl_start();
    typedef fl<HD> L;
    constexpr int NK = HD / 16; /* k-steps of Q K^T, and 16-wide column pairs of P V */
    extern __shared__ __align__(128) unsigned char fsm[];
    const int tile = gridDim.x - 1 - blockIdx.x, g = blockIdx.y, ratio = s.n_head / s.n_head_kv;
    const int t0 = tiles[2 * tile], n = tiles[2 * tile + 1];
    if (skip1 && n == 1)
        return; /* k_flash_dec takes it */
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
    const int32_t *bt = tables + toff[t0];
    const int last = pos[t0 + n - 1], nblk = last / KVB + 1, tail = last % KVB;
    const int nst = (nblk + FL_SB - 1) / FL_SB;
    const float kq_scale = s.kq_scale > 0.0f ? s.kq_scale : 1.0f / sqrtf((float)HD);
    const int gr = lane >> 2, tq = lane & 3;
    const int lim0 = gr < n ? pos[t0 + gr] : -1, lim1 = gr + 8 < n ? pos[t0 + gr + 8] : -1;
    /* this lane's ldmatrix row: matrix lane / 8 is rows +0 or +8, half or chunk +0 or +1 */
    const int lr = (lane & 7) + ((lane >> 3) & 1) * 8, lh = lane >> 4;
    const fl_src src = fl_src_of<HD, Q8>(s, layer, g, kv);

    for (int h0 = 0; h0 < ratio; h0 += nw) {
        const int h = h0 + warp;
        const bool live = h < ratio;
        const int64_t head = (int64_t)g * ratio + (live ? h : 0);
        uint32_t qa[NK][4];
        {
            auto qv = [&](int r, int d) {
                return r < n ? q[(int64_t)(t0 + r) * ldq + head * HD + d] : 0.0f;
            };
#pragma unroll
            for (int k = 0; k < NK; k++) {
                const int d = 16 * k + 2 * tq;
                qa[k][0] = h2_bits(qv(gr, d), qv(gr, d + 1));
                qa[k][1] = h2_bits(qv(gr + 8, d), qv(gr + 8, d + 1));
                qa[k][2] = h2_bits(qv(gr, d + 8), qv(gr, d + 9));
                qa[k][3] = h2_bits(qv(gr + 8, d + 8), qv(gr + 8, d + 9));
            }
        }
        /* S of the stage's blocks (b0 + bb, bb < nb), scaled; masked slots and
         * blocks past nb -inf. The blocks' products interleave: FL_SB x 2
         * independent mma chains rather than 2. */
        auto scores = [&](const unsigned char *buf, int b0, int nb, float (&sv)[FL_SB][8]) {
            float acc[FL_SB][2][4] = {};
#pragma unroll
            for (int k = 0; k < NK; k++) {
#pragma unroll
                for (int bb = 0; bb < FL_SB; bb++) {
                    if (bb >= nb)
                        break;
                    uint32_t kf[4];
                    ldsm_t4(kf, buf + bb * L::KB + L::koff(16 * k + lr, lh));
                    mma_16816<false>(acc[bb][0], qa[k], kf[0], kf[1]);
                    mma_16816<false>(acc[bb][1], qa[k], kf[2], kf[3]);
                }
            }
#pragma unroll
            for (int bb = 0; bb < FL_SB; bb++) {
                const int first = (b0 + bb) * KVB; /* the block's first position */
                const bool whole = bb < nb && first + KVB - 1 <= min(lim0, lim1);
#pragma unroll
                for (int i = 0; i < 8; i++) {
                    const int slot = first + (i >> 2) * 8 + 2 * tq + (i & 1);
                    const float v = __fmul_rn(acc[bb][i >> 2][i & 3], kq_scale);
                    sv[bb][i] = whole || (bb < nb && slot <= ((i & 2) ? lim1 : lim0)) ? v
                                                                                       : -INFINITY;
                }
            }
        };
        float m0 = -INFINITY, m1 = -INFINITY, inv0 = 0.0f, inv1 = 0.0f;
        double l0 = 0.0, l1 = 0.0;
        float o[2 * NK][4];
#pragma unroll
        for (int j = 0; j < 2 * NK; j++)
            o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
        /* one walk over the context: pass 0 the max and sum, 1 P V */
        auto walk = [&](auto pass_c) {
            constexpr int pass = decltype(pass_c)::value;
            fl_stage<HD, Q8>(src, bt, 0, nblk, tail, true, pass == 1, fsm, fsm + FL_SB * L::KB,
                             threadIdx.x, blockDim.x);
            for (int st = 0; st < nst; st++) {
                const unsigned char *buf = fsm + (st & 1) * L::STAGE;
                if (st + 1 < nst) {
                    unsigned char *nx = fsm + ((st + 1) & 1) * L::STAGE;
                    fl_stage<HD, Q8>(src, bt, (st + 1) * FL_SB, nblk, tail, true, pass == 1, nx,
                                     nx + FL_SB * L::KB, threadIdx.x, blockDim.x);
                    asm volatile("cp.async.wait_group 1;\n" ::);
                } else {
                    asm volatile("cp.async.wait_group 0;\n" ::);
                }
                __syncthreads();
                const int nb = nblk - st * FL_SB < FL_SB ? nblk - st * FL_SB : FL_SB;
                if (live) {
                    float sv[FL_SB][8];
                    scores(buf, st * FL_SB, nb, sv);
                    if constexpr (pass == 0) {
                        /* this lane's running max and sum of its slots of each row: the
                         * stage's 4 x FL_SB values of a row reduced as trees (serial
                         * chains of fmaxf and of double adds were the kernel's longest
                         * stalls), a new max rescaling the sum in double (rarely) */
#pragma unroll
                        for (int r = 0; r < 2; r++) {
                            float &m = r ? m1 : m0;
                            double &l = r ? l1 : l0;
                            float t[4 * FL_SB];
#pragma unroll
                            for (int bb = 0; bb < FL_SB; bb++)
#pragma unroll
                                for (int i = 0; i < 4; i++)
                                    t[4 * bb + i] = sv[bb][(i >> 1) * 4 + 2 * r + (i & 1)];
                            float mb = t[0];
#pragma unroll
                            for (int w = 1; w < 4 * FL_SB; w <<= 1)
#pragma unroll
                                for (int i = 0; i + w < 4 * FL_SB; i += 2 * w)
                                    t[i] = fmaxf(t[i], t[i + w]);
                            mb = t[0];
                            if (mb > m) {
                                l = m == -INFINITY ? 0.0 : l * exp((double)m - (double)mb);
                                m = mb;
                            }
                            if (m == -INFINITY)
                                continue; /* nothing seen yet (masked rows, slots) */
#pragma unroll
                            for (int bb = 0; bb < FL_SB; bb++)
#pragma unroll
                                for (int i = 0; i < 4; i++) {
                                    const float v = sv[bb][(i >> 1) * 4 + 2 * r + (i & 1)];
                                    t[4 * bb + i] = v == -INFINITY ? 0.0f : expf(v - m);
                                }
#pragma unroll
                            for (int w = 1; w < 4 * FL_SB; w <<= 1)
#pragma unroll
                                for (int i = 0; i + w < 4 * FL_SB; i += 2 * w)
                                    t[i] += t[i + w];
                            l += (double)t[0];
                        }
                    }
#pragma unroll
                    for (int bb = 0; pass == 1 && bb < nb; bb++) {
                        float w[8];
#pragma unroll
                        for (int i = 0; i < 8; i++)
                            w[i] = sv[bb][i] == -INFINITY
                                       ? 0.0f
                                       : __fmul_rn(expf(sv[bb][i] - ((i & 2) ? m1 : m0)),
                                                   (i & 2) ? inv1 : inv0);
                        const uint32_t pa[4] = {h2_bits(w[0], w[1]), h2_bits(w[2], w[3]),
                                                h2_bits(w[4], w[5]), h2_bits(w[6], w[7])};
                        const unsigned char *vb = buf + (FL_SB + bb) * L::KB;
#pragma unroll
                        for (int k = 0; k < NK; k++) {
                            uint32_t vf[4];
                            ldsm_t4(vf, vb + L::voff(lr, 2 * k + lh));
                            mma_16816<false>(o[2 * k], pa, vf[0], vf[1]);
                            mma_16816<false>(o[2 * k + 1], pa, vf[2], vf[3]);
                        }
                    }
                }
                __syncthreads(); /* the buffer is refilled two stages on */
            }
        };
        walk(std::integral_constant<int, 0>());
        quad_max_sum(m0, l0);
        quad_max_sum(m1, l1);
        inv0 = gr < n ? (float)(1.0 / l0) : 0.0f;
        inv1 = gr + 8 < n ? (float)(1.0 / l1) : 0.0f;
        walk(std::integral_constant<int, 1>());
        if (!live)
            continue;
#pragma unroll
        for (int j = 0; j < 2 * NK; j++) {
            const int64_t d = head * HD + 8 * j + 2 * tq;
            if (gr < n)
                *reinterpret_cast<float2 *>(out + (int64_t)(t0 + gr) * ldo + d) =
                    make_float2(o[j][0], o[j][1]);
            if (gr + 8 < n)
                *reinterpret_cast<float2 *>(out + (int64_t)(t0 + gr + 8) * ldo + d) =
                    make_float2(o[j][2], o[j][3]);
        }
    }
}

/* ------------------------------------------------------------------------
 * k_flash_dec: 1-token tiles (decode), head_dim 64 or 128
 * ---------------------------------------------------------------------- */

/* A 1-token tile fills one row of k_flash's m16 tiles, and its warp still
 * walks the whole context alone: at batch 64 a layer took 82-86 us, bound
 * by the warps' instruction issue (ncu). Here the mma rows are the query
 * heads of the KV head (up to 16 a pass) for the one token, and the NW
 * warps split the context's KV blocks (warp w: blocks w, w + NW, ...),
 * each staging its own in shared memory. The two walks are k_flash's
 * (each lane's max and sum, then P V); between them the warps' maxima and
 * sums meet in shared memory, each warp's sum rescaled in double to the
 * common max and added in warp order, and after the second the warps'
 * partial P V are added in warp order. grid (n_tiles, n_head_kv); tiles of
 * more than one token are k_flash's (return). NW is 3, 4, 6 or 8
 * (mfk_attention_tiles' warps, which cuda_plan_dec_warps picks so that the
 * grid's blocks come in whole waves); 12 / NW blocks a multiprocessor, 12
 * warps, keep the registers unspilled and the stages within its memory. */
template <int HD, bool Q8, int NW>
__global__ void __launch_bounds__(NW * 32, 12 / NW)
    k_flash_dec(struct mfk_kv_shape s, int32_t layer, const int32_t *tiles, const float *q,
                int64_t ldq, const int32_t *pos, const int32_t *toff, const int32_t *tables,
                const void *kv, float *out, int64_t ldo)
{
    pdl_start();
    typedef fl<HD> L;
    constexpr int NK = HD / 16;
    extern __shared__ __align__(128) unsigned char fsm[];
    const int g = blockIdx.y, ratio = s.n_head / s.n_head_kv;
    const int t0 = tiles[2 * blockIdx.x];
    if (tiles[2 * blockIdx.x + 1] != 1)
        return;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int32_t *bt = tables + toff[t0];
    const int last = pos[t0], nblk = last / KVB + 1, tail = last % KVB;
    const int mine = nblk > warp ? (nblk - warp + NW - 1) / NW : 0;
    const float kq_scale = s.kq_scale > 0.0f ? s.kq_scale : 1.0f / sqrtf((float)HD);
    const int gr = lane >> 2, tq = lane & 3;
    const int lr = (lane & 7) + ((lane >> 3) & 1) * 8, lh = lane >> 4;
    const fl_src src = fl_src_of<HD, Q8>(s, layer, g, kv);
    unsigned char *wb = fsm + (size_t)warp * 2 * L::STAGE; /* this warp's two stages */
    /* each warp's row maxima and sums: [NW][16] */
    double *red_l = (double *)(fsm + (size_t)NW * 2 * L::STAGE);
    float *red_m = (float *)(red_l + NW * 16);

    for (int h0 = 0; h0 < ratio; h0 += 16) {
        const int nh = ratio - h0 < 16 ? ratio - h0 : 16; /* rows: query heads h0 .. */
        const int64_t head0 = (int64_t)g * ratio + h0;
        uint32_t qa[NK][4];
        {
            auto qv = [&](int r, int d) {
                return r < nh ? q[(int64_t)t0 * ldq + (head0 + r) * HD + d] : 0.0f;
            };
#pragma unroll
            for (int k = 0; k < NK; k++) {
                const int d = 16 * k + 2 * tq;
                qa[k][0] = h2_bits(qv(gr, d), qv(gr, d + 1));
                qa[k][1] = h2_bits(qv(gr + 8, d), qv(gr + 8, d + 1));
                qa[k][2] = h2_bits(qv(gr, d + 8), qv(gr, d + 9));
                qa[k][3] = h2_bits(qv(gr + 8, d + 8), qv(gr + 8, d + 9));
            }
        }
        /* S of block b (rows: heads; columns: its 16 slots), scaled; slots
         * past the token's position -inf */
        auto scores = [&](const unsigned char *buf, int b, float(&sv)[8]) {
            float acc[2][4] = {};
#pragma unroll
            for (int k = 0; k < NK; k++) {
                uint32_t kf[4];
                ldsm_t4(kf, buf + L::koff(16 * k + lr, lh));
                mma_16816<false>(acc[0], qa[k], kf[0], kf[1]);
                mma_16816<false>(acc[1], qa[k], kf[2], kf[3]);
            }
#pragma unroll
            for (int i = 0; i < 8; i++) {
                const int slot = b * KVB + (i >> 2) * 8 + 2 * tq + (i & 1);
                sv[i] = slot <= last ? __fmul_rn(acc[i >> 2][i & 3], kq_scale) : -INFINITY;
            }
        };
        float m0 = -INFINITY, m1 = -INFINITY, inv0 = 0.0f, inv1 = 0.0f;
        double l0 = 0.0, l1 = 0.0;
        float o[2 * NK][4];
#pragma unroll
        for (int j = 0; j < 2 * NK; j++)
            o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
        /* The stash: pass 0's scores of the nh rows, kept where the stages
         * hold values in pass 1 (free in pass 0, which brings keys only),
         * so that pass 1 reads no keys and repeats no QK products, with the
         * same bits; pass 1 then stages values where keys were. Taken when
         * every warp's blocks fit: up to 2048 positions at 4 heads, 4 warps. */
        const bool stash = (nblk + NW - 1) / NW * nh * KVB <= L::KB / 2;
        auto stash_at = [&](int i, int row, int slot) {
            const int e = (i * nh + row) * KVB + slot, half = L::KB / 4; /* floats a V half holds */
            return (float2 *)(void *)(wb + (e < half ? L::KB + 4 * e
                                                     : L::STAGE + L::KB + 4 * (e - half)));
        };
        /* Block b into buf: pass 0 its keys; pass 1 its values after them,
         * or with the stash at buf, no keys brought in. */
        auto stage = [&](int pass, int b, unsigned char *buf) {
            const bool keys = pass == 0 || !stash;
            fl_stage<HD, Q8>(src, bt, b, nblk, tail, keys, pass == 1, buf,
                             buf + (keys ? FL_SB * L::KB : 0), lane, 32);
        };
        auto walk = [&](auto pass_c) {
            constexpr int pass = decltype(pass_c)::value;
            if (mine > 0)
                stage(pass, warp, wb);
            for (int i = 0; i < mine; i++) {
                const int b = warp + i * NW;
                const unsigned char *buf = wb + (i & 1) * L::STAGE;
                if (i + 1 < mine) {
                    stage(pass, b + NW, wb + ((i + 1) & 1) * L::STAGE);
                    asm volatile("cp.async.wait_group 1;\n" ::);
                } else {
                    asm volatile("cp.async.wait_group 0;\n" ::);
                }
                __syncwarp();
                float sv[8];
                if (pass == 1 && stash) {
#pragma unroll
                    for (int j = 0; j < 8; j += 2) {
                        const int row = gr + 8 * ((j >> 1) & 1);
                        const float2 v = row < nh ? *stash_at(i, row, (j >> 2) * 8 + 2 * tq)
                                                  : make_float2(-INFINITY, -INFINITY);
                        sv[j] = v.x, sv[j + 1] = v.y;
                    }
                } else {
                    scores(buf, b, sv);
                }
                if (pass == 0 && stash) /* pass 1 reads them instead of K and the products */
#pragma unroll
                    for (int j = 0; j < 8; j += 2) {
                        const int row = gr + 8 * ((j >> 1) & 1);
                        if (row < nh)
                            *stash_at(i, row, (j >> 2) * 8 + 2 * tq) =
                                make_float2(sv[j], sv[j + 1]);
                    }
                if constexpr (pass == 0) {
#pragma unroll
                    for (int r = 0; r < 2; r++) {
                        float &m = r ? m1 : m0;
                        double &l = r ? l1 : l0;
                        float t[4];
#pragma unroll
                        for (int j = 0; j < 4; j++)
                            t[j] = sv[(j >> 1) * 4 + 2 * r + (j & 1)];
                        const float mb = fmaxf(fmaxf(t[0], t[1]), fmaxf(t[2], t[3]));
                        if (mb > m) {
                            l = m == -INFINITY ? 0.0 : l * exp((double)m - (double)mb);
                            m = mb;
                        }
                        if (m == -INFINITY)
                            continue;
#pragma unroll
                        for (int j = 0; j < 4; j++)
                            t[j] = t[j] == -INFINITY ? 0.0f : expf(t[j] - m);
                        l += (double)((t[0] + t[1]) + (t[2] + t[3]));
                    }
                } else {
                    float w[8];
#pragma unroll
                    for (int j = 0; j < 8; j++)
                        w[j] = sv[j] == -INFINITY ? 0.0f
                                                  : __fmul_rn(expf(sv[j] - ((j & 2) ? m1 : m0)),
                                                              (j & 2) ? inv1 : inv0);
                    const uint32_t pa[4] = {h2_bits(w[0], w[1]), h2_bits(w[2], w[3]),
                                            h2_bits(w[4], w[5]), h2_bits(w[6], w[7])};
                    const unsigned char *vb = buf + (stash ? 0 : L::KB);
#pragma unroll
                    for (int k = 0; k < NK; k++) {
                        uint32_t vf[4];
                        ldsm_t4(vf, vb + L::voff(lr, 2 * k + lh));
                        mma_16816<false>(o[2 * k], pa, vf[0], vf[1]);
                        mma_16816<false>(o[2 * k + 1], pa, vf[2], vf[3]);
                    }
                }
                __syncwarp(); /* the buffer is refilled at the next block */
            }
        };
        walk(std::integral_constant<int, 0>());
        /* the row's max over its 4 lanes, their sums brought to it; then
         * every warp's, in warp order */
#pragma unroll
        for (int r = 0; r < 2; r++) {
            float &m = r ? m1 : m0;
            double &l = r ? l1 : l0;
            quad_max_sum(m, l);
            if (tq == 0)
                red_m[warp * 16 + gr + 8 * r] = m, red_l[warp * 16 + gr + 8 * r] = l;
        }
        __syncthreads();
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const int row = gr + 8 * r;
            float mx = -INFINITY;
            for (int w = 0; w < NW; w++)
                mx = fmaxf(mx, red_m[w * 16 + row]);
            double sum = 0.0;
            for (int w = 0; w < NW; w++) {
                const float mw = red_m[w * 16 + row];
                if (mw != -INFINITY)
                    sum += red_l[w * 16 + row] * exp((double)mw - (double)mx);
            }
            (r ? m1 : m0) = mx;
            (r ? inv1 : inv0) = row < nh ? (float)(1.0 / sum) : 0.0f;
        }
        walk(std::integral_constant<int, 1>());
        /* the warps' P V, rows x HD floats each in its own stage space, then
         * added in warp order */
        float *ow = (float *)(void *)wb;
#pragma unroll
        for (int j = 0; j < 2 * NK; j++) {
            const int d = 8 * j + 2 * tq;
            *reinterpret_cast<float2 *>(ow + gr * HD + d) = make_float2(o[j][0], o[j][1]);
            *reinterpret_cast<float2 *>(ow + (gr + 8) * HD + d) = make_float2(o[j][2], o[j][3]);
        }
        __syncthreads();
        for (int e = threadIdx.x; e < nh * HD; e += NW * 32) {
            float sum = 0.0f;
            for (int w = 0; w < NW; w++)
                sum += ((const float *)(const void *)(fsm + (size_t)w * 2 * L::STAGE))[e];
            out[(int64_t)t0 * ldo + head0 * HD + e] = sum;
        }
        __syncthreads(); /* the next heads reuse the buffers */
    }
}

/* ------------------------------------------------------------------------
 * k_tiles: any head_dim that is a multiple of 16
 * ---------------------------------------------------------------------- */

/* Shared bytes per warp: qh[16][hd], vz[16][hd] (half) and o[16][hd]
 * (float), plus kh[hd][16] (half) for an 8-bit arena; then sf[16][FA_SF]
 * (float) and ph[16][FA_PH] (half), rows padded by 16 bytes so that the 8
 * lanes of a 16-byte access phase (rows r .. r + 7) fall on different
 * banks. Every part a multiple of 32 bytes, as wmma's pointers must be. */
#define FA_SF (KVB + 4)
#define FA_PH (KVB + 8)
__host__ __device__ static size_t fa_warp_bytes(int32_t hd, bool q8)
{
    return (size_t)hd * (q8 ? 160 : 128) + FA_ROWS * (FA_SF * 4 + FA_PH * 2);
}

/* grid (n_tiles, n_head_kv); warp w takes query heads w, w + warps, ... of
 * KV head g for the tile's n tokens. Lanes 2r and 2r+1 own row r's scores,
 * 8 slots each; slots past the row's position are masked. Each pass
 * recomputes S = Q K_b^T with wmma. Value rows past the tile's last
 * position are zeroed first. Q8: each block's keys and values are first
 * written to shared memory as fp16 (kv8_value), invalid value rows as 0. */
template <bool Q8>
__global__ void k_tiles(struct mfk_kv_shape s, int32_t layer, const int32_t *tiles, const float *q,
                        int64_t ldq, const int32_t *pos, const int32_t *toff,
                        const int32_t *tables, const void *kv, float *out, int64_t ldo)
{
    pdl_start();
    using namespace nvcuda;
    typedef wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> frag_a;
    typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major> frag_b;
    typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> frag_c;
    extern __shared__ __align__(128) unsigned char fsm[];
    const int hd = s.head_dim, g = blockIdx.y, ratio = s.n_head / s.n_head_kv;
    const int t0 = tiles[2 * blockIdx.x], n = tiles[2 * blockIdx.x + 1];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
    const int32_t *bt = tables + toff[t0];
    const int last = pos[t0 + n - 1], nblk = last / KVB + 1, tail = last % KVB;
    const float kq_scale = s.kq_scale > 0.0f ? s.kq_scale : 1.0f / sqrtf((float)hd);
    unsigned char *ws = fsm + (size_t)warp * fa_warp_bytes(hd, Q8);
    __half *qh = (__half *)ws;
    __half *vz = qh + FA_ROWS * hd;
    float *o = (float *)(qh + 2 * FA_ROWS * hd);
    __half *kh = (__half *)(o + FA_ROWS * hd);
    float *sf = (float *)(ws + (size_t)hd * (Q8 ? 160 : 128));
    __half *ph = (__half *)(sf + FA_ROWS * FA_SF);
    const int r = lane & 15, c0 = (lane >> 4) * 8; /* lanes r and r + 16 share row r */
    const int lim = r < n ? pos[t0 + r] : -1; /* the last position row r sees */
    /* the first position row r sees (a sliding window's start), and the first
     * block any row sees: row 0's positions are the tile's smallest */
    const int first = s.window > 0 && lim - s.window + 1 > 0 ? lim - s.window + 1 : 0;
    const int b_lo = s.window > 0 && pos[t0] - s.window + 1 > 0 ? (pos[t0] - s.window + 1) / KVB
                                                               : 0;
    const float cinv = s.softcap > 0.0f ? __fdiv_rn(1.0f, s.softcap) : 0.0f;
    /* row r's 8 scores of block b (slots c0 ..), scaled and soft-capped (the
     * CPU's order); masked: -inf */
    auto row8 = [&](int b, float v[8]) {
        const float4 *p = reinterpret_cast<const float4 *>(sf + r * FA_SF + c0);
        const float4 lo = p[0], hi = p[1];
        const float raw[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
#pragma unroll
        for (int c = 0; c < 8; c++) {
            const int j = b * KVB + c0 + c;
            float x = __fmul_rn(raw[c], kq_scale);
            if (s.softcap > 0.0f)
                x = __fmul_rn(tanhf(__fmul_rn(x, cinv)), s.softcap);
            v[c] = j <= lim && j >= first ? x : -INFINITY;
        }
    };

    for (int h = warp; h < ratio; h += nw) {
        const int64_t head = (int64_t)g * ratio + h;
        for (int e = lane; e < FA_ROWS * hd; e += 32) {
            const int rr = e / hd, d = e - rr * hd;
            qh[e] = __float2half_rn(rr < n ? q[(int64_t)(t0 + rr) * ldq + head * hd + d] : 0.0f);
            o[e] = 0.0f;
        }
        __syncwarp();
        /* sf = Q times block b's keys ([hd][16]) */
        auto scores = [&](int b) {
            const __half *kt = (const __half *)kv + (Q8 ? 0 : kv_index(s, bt[b], layer, 0, g));
            if constexpr (Q8) {
                const int8_t *k8 = (const int8_t *)kv + kv8_offset(s, bt[b], layer, 0, g);
                const float *ksc = (const float *)(k8 + (size_t)KVB * hd);
                for (int e = lane; e < KVB * hd; e += 32)
                    kh[e] = __float2half_rn((float)k8[e] * ksc[e & (KVB - 1)]);
                __syncwarp();
                kt = kh;
            }
            frag_c acc;
            wmma::fill_fragment(acc, 0.0f);
            for (int kk = 0; kk < hd; kk += 16) {
                frag_a qa;
                frag_b kb;
                wmma::load_matrix_sync(qa, qh + kk, hd);
                wmma::load_matrix_sync(kb, kt + (size_t)kk * KVB, KVB);
                wmma::mma_sync(acc, qa, kb, acc);
            }
            wmma::store_matrix_sync(sf, acc, FA_SF, wmma::mem_row_major);
            __syncwarp();
        };
        float m = -INFINITY;
        for (int b = b_lo; b < nblk; b++) {
            float v[8];
            scores(b);
            row8(b, v);
#pragma unroll
            for (int c = 0; c < 8; c++)
                m = fmaxf(m, v[c]);
            __syncwarp();
        }
        m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 16));
        double sum = 0.0;
        for (int b = b_lo; b < nblk; b++) {
            float v[8];
            scores(b);
            row8(b, v);
#pragma unroll
            for (int c = 0; c < 8; c++)
                if (v[c] != -INFINITY)
                    sum += (double)expf(v[c] - m);
            __syncwarp();
        }
        sum += __shfl_xor_sync(0xffffffffu, sum, 16);
        const float inv = r < n ? (float)(1.0 / sum) : 0.0f;
        for (int b = b_lo; b < nblk; b++) {
            const __half *vt = (const __half *)kv + (Q8 ? 0 : kv_index(s, bt[b], layer, 1, g));
            if constexpr (Q8) {
                const int8_t *v8 = (const int8_t *)kv + kv8_offset(s, bt[b], layer, 1, g);
                const float *vsc = (const float *)(v8 + (size_t)KVB * hd);
                const int valid = b == nblk - 1 ? tail : KVB - 1;
                for (int e = lane; e < KVB * hd; e += 32)
                    vz[e] = e / hd <= valid ? __float2half_rn((float)v8[e] * vsc[e / hd])
                                            : __float2half_rn(0.0f);
                __syncwarp();
                vt = vz;
            } else if (b == nblk - 1 && tail < KVB - 1) {
                for (int e = lane; e < KVB * hd; e += 32)
                    vz[e] = e / hd <= tail ? vt[e] : __float2half_rn(0.0f);
                __syncwarp();
                vt = vz;
            }
            scores(b);
            {
                float v[8];
                row8(b, v);
                __align__(16) __half hw[8];
#pragma unroll
                for (int c = 0; c < 8; c++)
                    hw[c] = __float2half_rn(v[c] == -INFINITY ? 0.0f
                                                              : __fmul_rn(expf(v[c] - m), inv));
                *reinterpret_cast<uint4 *>(ph + r * FA_PH + c0) =
                    *reinterpret_cast<const uint4 *>(hw);
            }
            __syncwarp();
            frag_a pa;
            wmma::load_matrix_sync(pa, ph, FA_PH);
            for (int nn = 0; nn < hd; nn += 16) {
                frag_c oc;
                frag_b vb;
                wmma::load_matrix_sync(oc, o + nn, hd, wmma::mem_row_major);
                wmma::load_matrix_sync(vb, vt + nn, hd);
                wmma::mma_sync(oc, pa, vb, oc);
                wmma::store_matrix_sync(o + nn, oc, hd, wmma::mem_row_major);
            }
            __syncwarp();
        }
        for (int e = lane; e < n * hd; e += 32) {
            const int rr = e / hd, d = e - rr * hd;
            out[(int64_t)(t0 + rr) * ldo + head * hd + d] = o[e];
        }
        __syncwarp();
    }
}

/* ------------------------------------------------------------------------
 * Launch
 * ---------------------------------------------------------------------- */

template <int HD, bool Q8, int NW>
static int dec_launch(struct mfk_ctx *c, const struct mfk_kv_shape *s, int32_t layer, dim3 grid,
                      const int32_t *tiles, const float *q, int64_t ldq, const int32_t *pos,
                      const int32_t *toff, const int32_t *tables, const void *kv, float *out,
                      int64_t ldo, struct mf_err *err)
{
    const size_t smem = NW * (2 * (size_t)fl<HD>::STAGE + 16 * 12);
    int rc = mfk_raise_smem((const void *)k_flash_dec<HD, Q8, NW>, smem, "attention (decode tiles)",
                            err);
    if (rc)
        return rc;
    mfk_go(mfk_queue(c), grid, NW * 32, smem, k_flash_dec<HD, Q8, NW>, *s, layer, tiles, q, ldq,
           pos, toff, tables, kv, out, ldo);
    return mfk_launched("attention (decode tiles)", err);
}

template <int HD, bool Q8>
static int flash_launch(struct mfk_ctx *c, const struct mfk_kv_shape *s, int32_t layer,
                        int32_t n_tiles, const int32_t *tiles, const float *q, int64_t ldq,
                        const int32_t *pos, const int32_t *toff, const int32_t *tables,
                        const void *kv, float *out, int64_t ldo, int decode, int warps,
                        struct mf_err *err)
{
    const int ratio = s->n_head / s->n_head_kv;
    const int nw = ratio < FA_MAX_WARPS ? ratio : FA_MAX_WARPS;
    const dim3 grid((unsigned)n_tiles, (unsigned)s->n_head_kv);
    int rc = 0;
    if (decode != 2) {
        const size_t smem = 2 * (size_t)fl<HD>::STAGE;
        rc = mfk_raise_smem((const void *)k_flash<HD, Q8>, smem, "attention (tiles)", err);
        if (rc)
            return rc;
        mfk_go(mfk_queue(c), grid, nw * 32, smem, k_flash<HD, Q8>, *s, layer, tiles, q, ldq, pos,
               toff, tables, kv, out, ldo, decode);
        rc = mfk_launched("attention (tiles)", err);
    }
    if (!decode || rc)
        return rc;
#define DEC(NW)                                                                                    \
    dec_launch<HD, Q8, NW>(c, s, layer, grid, tiles, q, ldq, pos, toff, tables, kv, out, ldo, err)
    return warps == 3 ? DEC(3) : warps == 4 ? DEC(4) : warps == 6 ? DEC(6) : DEC(8);
#undef DEC
}

template <bool Q8>
static int tiles_launch(struct mfk_ctx *c, const struct mfk_kv_shape *s, int32_t layer,
                        int32_t n_tiles, const int32_t *tiles, const float *q, int64_t ldq,
                        const int32_t *pos, const int32_t *toff, const int32_t *tables,
                        const void *kv, float *out, int64_t ldo, int decode, int warps,
                        struct mf_err *err)
{
    (void)decode, (void)warps; /* k_tiles takes 1-token tiles as any other */
    const int ratio = s->n_head / s->n_head_kv;
    const size_t per = fa_warp_bytes(s->head_dim, Q8);
    int nw = ratio < FA_MAX_WARPS ? ratio : FA_MAX_WARPS;
    while (nw > 1 && (size_t)nw * per > FA_SMEM_MAX)
        nw--;
    const size_t smem = (size_t)nw * per;
    int rc = mfk_raise_smem((const void *)k_tiles<Q8>, smem, "attention (tiles)", err);
    if (rc)
        return rc;
    mfk_go(mfk_queue(c), dim3((unsigned)n_tiles, (unsigned)s->n_head_kv), nw * 32, smem,
           k_tiles<Q8>, *s, layer, tiles, q, ldq, pos, toff, tables, kv, out, ldo);
    return mfk_launched("attention (tiles)", err);
}

extern "C" int mfk_attention_tiles(struct mfk_ctx *c, const struct mfk_kv_shape *s, int32_t layer,
                                   int32_t n_tiles, const int32_t *tiles, const float *q,
                                   int64_t ldq, const int32_t *pos, const int32_t *toff,
                                   const int32_t *tables, const void *kv, float *out, int64_t ldo,
                                   int decode, int warps, struct mf_err *err)
{
    if (n_tiles <= 0)
        return 0;
    if (decode < 0 || decode > 2 ||
        (decode && warps != 3 && warps != 4 && warps != 6 && warps != 8))
        return mf_err_set(err, MF_EINVAL,
                          "CUDA attention: decode %d (0, 1 or 2) with %d warps (3, 4, 6 or 8)",
                          decode, warps);
    if (s->n_head_kv <= 0 || s->n_head % s->n_head_kv || s->head_dim <= 0 || s->head_dim % 16 ||
        s->head_dim > FA_MAX_DIM)
        return mf_err_set(err, MF_EUNSUPPORTED,
                          "CUDA attention: %d heads over %d KV heads of %d dimensions (tiles take "
                          "a multiple of 16 up to %d)",
                          s->n_head, s->n_head_kv, s->head_dim, FA_MAX_DIM);
#define LAUNCH(F, ...)                                                                             \
    return F<__VA_ARGS__>(c, s, layer, n_tiles, tiles, q, ldq, pos, toff, tables, kv, out, ldo,    \
                          decode, warps, err)
    /* a sliding window or a soft-cap: k_tiles, which takes both */
    if ((s->window > 0 || s->softcap > 0.0f) && s->q8)
        LAUNCH(tiles_launch, true);
    if (s->window > 0 || s->softcap > 0.0f)
        LAUNCH(tiles_launch, false);
    if (s->head_dim == 128 && s->q8)
        LAUNCH(flash_launch, 128, true);
    if (s->head_dim == 128)
        LAUNCH(flash_launch, 128, false);
    if (s->head_dim == 64 && s->q8)
        LAUNCH(flash_launch, 64, true);
    if (s->head_dim == 64)
        LAUNCH(flash_launch, 64, false);
    if (s->q8)
        LAUNCH(tiles_launch, true);
    LAUNCH(tiles_launch, false);
#undef LAUNCH
}
