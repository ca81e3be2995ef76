/*
 * attention.cu: paged attention over the KV arena for decode tokens (one
 * new token of a sequence; runs of new tokens take attention_tiles.cu).
 *
 * One thread block per (token, KV head) through k_attention: all query
 * heads of the KV head share each K/V read, and the softmax follows the
 * CPU's F16 path exactly (q and the weights rounded to fp16, the sum in
 * double). When that grid would leave most multiprocessors idle (batch 1
 * has 8 blocks for 132 SMs), each context is split over several blocks
 * instead (the caller's splits, runtime/cuda/cuda_plan.c's
 * cuda_plan_att_splits).
 *
 * runtime/cuda/cuda_plan.c decides which tokens take which path.
 */
#include "kernels/kernels.h"
#include "kernels/internal.cuh"

#include <cfloat>
#include <cstdint>

#include <cooperative_groups.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#define ATT_WARPS 16 /* warps per attention block */
#define ATT_SPLIT_WARPS 4 /* warps per block of a split context (k_attention PH 1, 2) */
#define ATT_THREADS (ATT_WARPS * 32)
#define ATT_MAX_DIM 256 /* head_dim the attention kernel takes, at most (a multiple of 32) */
#define ATT_MAX_RATIO 8 /* query heads per KV head handled in one pass of P.V */

namespace cg = cooperative_groups;

/* ------------------------------------------------------------------------
 * One token at a time (decode)
 * ---------------------------------------------------------------------- */

__device__ __forceinline__ float warp_max(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

__device__ __forceinline__ double warp_sum(double v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float block_max(float v, float *red)
{
    v = warp_max(v);
    __syncthreads();
    if ((threadIdx.x & 31) == 0)
        red[threadIdx.x >> 5] = v;
    __syncthreads();
    float m = red[0];
    for (int w = 1; w < (int)(blockDim.x >> 5); w++)
        m = fmaxf(m, red[w]);
    return m;
}

__device__ __forceinline__ double block_sum(double v, double *red)
{
    v = warp_sum(v);
    __syncthreads();
    if ((threadIdx.x & 31) == 0)
        red[threadIdx.x >> 5] = v;
    __syncthreads();
    double s = 0.0;
    for (int w = 0; w < (int)(blockDim.x >> 5); w++)
        s += red[w];
    return s;
}

/* grid (T, n_head_kv, S): the ratio query heads of KV head g for token t
 * (list[blockIdx.x], or blockIdx.x without a list), in NW warps that take
 * the KV blocks of split blockIdx.z (of S; all of them when S is 1) in turn.
 * Scores: a warp's lanes are 16 slots x 2 interleaved halves of head_dim,
 * so each step reads 64 contiguous bytes of the transposed keys. P.V: lane
 * l covers dimensions l, l + 32, ... (coalesced value rows); the warps'
 * partial sums meet in shared memory at the end.
 * PH 0: the whole context in one block, the softmax as the CPU's.
 * PH 1 and 2 split the context FlashDecoding-style when T x n_head_kv
 * blocks would leave most multiprocessors idle (decode at small batch):
 * PH 1 writes each split's score max and sum of expf(s - max) (double) to
 * mx / ls; PH 2 recomputes its scores (or, stash, reads those PH 1 left in
 * its po slots: a split of at most head_dim positions), combines every split's pair into the
 * context's max m and sum (the CPU's sum up to the rounding of the rescale),
 * forms the CPU's weights fp16(expf(s - m) / sum) and writes its part of
 * P.V to po, which k_att_combine adds up in split order.
 * PH 3 is PH 1, 2 and k_att_combine in one launch, the S splits of a
 * (token, KV head) a thread-block cluster: each block's statistics and
 * partial P.V stay in its shared memory, the others read them there
 * (distributed shared memory) after a cluster barrier, and each block adds
 * up a share of the heads' outputs in split order. The same operations in
 * the same order as the three launches: the same bits, without two kernel
 * boundaries and the trips through device memory (batch 1: 8 clusters of 8).
 * Shared: qs[ratio][hd] (fp16-rounded queries; PH 3: then the block's
 * partial outputs), sc[ratio][ctx] scores then weights (ctx: the split's
 * positions), red[NW][min(ratio, 8)][hd] the warps' partial outputs; PH 3
 * also cs[ratio] (double sums), cm[ratio] (maxima), cst[2 ratio] (the
 * context's max and 1 / sum per head).
 * HD > 0 (64, 96, 128, 256) fixes head_dim: the P.V accumulators shrink to
 * what the head needs, so two blocks fit a multiprocessor's registers, not
 * one, up to 128 (256 keeps one block, unrolled for its width).
 * Q8: the 8-bit arena (kv8_value of each element, int8 or e4m3 by s.fp8). */
template <int HD, bool Q8, int NW, int PH>
__global__ void __launch_bounds__(NW * 32, HD > 0 && HD <= 128 ? 2 : 1)
    k_attention(struct mfk_kv_shape s, int32_t layer, const int32_t *list, const float *q,
                int64_t ldq, const int32_t *pos, const int32_t *toff, const int32_t *tables,
                const void *kv, int32_t ctx, float *out, int64_t ldo, float *mx, double *ls,
                float *po, int stash, struct mfk_q8 q8)
{
    pdl_start();
    extern __shared__ float smem[];
    __shared__ float redf[NW];
    __shared__ double redd[NW];
    constexpr int EM = (HD > 0 ? HD : ATT_MAX_DIM) / 32; /* value columns per lane, at most */
    /* A split context's block has a KV block or two per warp and a few warps
     * per multiprocessor: with HD fixed, each warp issues all the loads of a
     * KV block's keys (values) at once instead of in latency-bound rounds
     * (the 16-warp whole-context kernel keeps to two blocks' registers). */
    constexpr bool DEEP = HD > 0 && PH != 0;
    constexpr int SCORE_UNROLL = DEEP ? HD / 2 : 16, PV_UNROLL = DEEP ? KVB : 4;
    const int t = list ? list[blockIdx.x] : (int)blockIdx.x, g = blockIdx.y;
    const int hd = HD > 0 ? HD : s.head_dim;
    const int ratio = s.n_head / s.n_head_kv,
              rchunk = ratio < ATT_MAX_RATIO ? ratio : ATT_MAX_RATIO;
    const int npos = pos[t] + 1, nblk = (npos + KVB - 1) / KVB;
    /* a sliding window's first position and block: earlier blocks are not read */
    const int lo = s.window > 0 && npos > s.window ? npos - s.window : 0, blo = lo / KVB;
    const int S = (int)gridDim.z, split = (int)blockIdx.z, bps = (nblk - blo + S - 1) / S;
    const int b0 = blo + split * bps < nblk ? blo + split * bps : nblk;
    const int b1 = b0 + bps < nblk ? b0 + bps : nblk, j0 = b0 * KVB;
    const int jn = (b1 * KVB < npos ? b1 * KVB : npos) - j0; /* positions of this split */
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int32_t *bt = tables + toff[t];
    float *qs = smem, *sc = smem + ratio * hd, *red = sc + (size_t)ratio * ctx;
    /* PH 3: the split's statistics where the cluster reads them (8-byte
     * aligned: every count before them is even) */
    double *cs = (double *)(void *)(red + (size_t)NW * rchunk * hd);
    float *cm = (float *)(void *)(cs + ratio), *cst = cm + ratio;
    const float kq_scale = s.kq_scale > 0.0f ? s.kq_scale : 1.0f / sqrtf((float)hd);
    /* split statistics of (list index, query head), S apart */
    const size_t st0 = ((size_t)blockIdx.x * s.n_head + (size_t)g * ratio) * S;

    if (PH == 2 && stash) { /* phase 1 left this split's scores in its po slots */
        for (int e = threadIdx.x; e < ratio * jn; e += blockDim.x) {
            const int r = e / jn;
            sc[(size_t)r * ctx + e % jn] = po[(st0 + (size_t)r * S + split) * hd + e % jn];
        }
    } else {
        for (int e = threadIdx.x; e < ratio * hd; e += blockDim.x) {
            const int r = e / hd, d = e % hd;
            qs[e] = __half2float(
                __float2half_rn(q[(int64_t)t * ldq + (int64_t)(g * ratio + r) * hd + d]));
        }
        __syncthreads();
        const int slot = lane & 15, half = lane >> 4;
        for (int b = b0 + warp; b < b1; b += NW) {
            const __half *kt =
                (const __half *)kv + (Q8 ? 0 : kv_index(s, bt[b], layer, 0, g) + slot);
            const int8_t *k8 = (const int8_t *)kv + (Q8 ? kv8_offset(s, bt[b], layer, 0, g) : 0);
            const float ksc = Q8 ? ((const float *)(k8 + (size_t)KVB * hd))[slot] : 0.0f;
            const int j = b * KVB + slot;
            for (int r0 = 0; r0 < ratio; r0 += ATT_MAX_RATIO) {
                float acc[ATT_MAX_RATIO];
#pragma unroll
                for (int r = 0; r < ATT_MAX_RATIO; r++)
                    acc[r] = 0.0f;
#pragma unroll SCORE_UNROLL
                for (int d = half; d < hd; d += 2) {
                    const float kd = Q8 ? kv8_value((uint8_t)k8[(size_t)d * KVB + slot], ksc, s.fp8)
                                        : __half2float(kt[(size_t)d * KVB]);
#pragma unroll
                    for (int r = 0; r < ATT_MAX_RATIO; r++)
                        if (r0 + r < ratio)
                            acc[r] += qs[(r0 + r) * hd + d] * kd;
                }
#pragma unroll
                for (int r = 0; r < ATT_MAX_RATIO; r++) {
                    acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], 16);
                    if (half == 0 && j < npos && r0 + r < ratio) {
                        float v = __fmul_rn(acc[r], kq_scale);
                        if (s.softcap > 0.0f) /* the CPU's order: tanh(v * (1 / c)) * c */
                            v = __fmul_rn(tanhf(__fmul_rn(v, __fdiv_rn(1.0f, s.softcap))),
                                          s.softcap);
                        sc[(size_t)(r0 + r) * ctx + j - j0] = j >= lo ? v : -INFINITY;
                    }
                }
            }
        }
    }
    __syncthreads();
    if (PH == 0) {
        for (int r = 0; r < ratio; r++) {
            float *sr = sc + (size_t)r * ctx;
            float m = -INFINITY;
            double sum = 0.0;
            for (int j = threadIdx.x; j < jn; j += blockDim.x)
                m = fmaxf(m, sr[j]);
            m = block_max(m, redf);
            for (int j = threadIdx.x; j < jn; j += blockDim.x) {
                const float e = expf(sr[j] - m);
                sr[j] = e;
                sum += (double)e;
            }
            sum = block_sum(sum, redd);
            const float inv = (float)(1.0 / sum);
            for (int j = threadIdx.x; j < jn; j += blockDim.x)
                sr[j] = __half2float(__float2half_rn(__fmul_rn(sr[j], inv)));
            __syncthreads();
        }
    } else {
        /* A split's statistics, a warp per query head and no block barrier
         * per head. PH 2 combines every split's pair (lanes over the
         * splits, every thread of the block once rather than each thread
         * all of them) and keeps each head's max and 1 / sum where the
         * spent queries were. */
        float *st = PH == 3 ? cst : qs;
        for (int r = warp; r < ratio; r += NW) {
            float m = -INFINITY;
            double sum = 0.0;
            if (PH == 1 || PH == 3) {
                const float *sr = sc + (size_t)r * ctx;
                for (int j = lane; j < jn; j += 32)
                    m = fmaxf(m, sr[j]);
                m = warp_max(m);
                for (int j = lane; j < jn; j += 32)
                    sum += (double)expf(sr[j] - m);
                sum = warp_sum(sum);
                if (PH == 3 && lane == 0)
                    cm[r] = m, cs[r] = sum;
                else if (lane == 0)
                    mx[st0 + (size_t)r * S + split] = m, ls[st0 + (size_t)r * S + split] = sum;
                if (PH == 1 && stash) /* phase 2 reads them instead of recomputing QK */
                    for (int j = lane; j < jn; j += 32)
                        po[(st0 + (size_t)r * S + split) * hd + j] = sr[j];
            }
        }
        if (PH == 1)
            return;
        if (PH == 3)
            cg::this_cluster().sync(); /* every split's statistics are in place */
        for (int r = warp; PH != 1 && r < ratio; r += NW) {
            float m = -INFINITY;
            double sum = 0.0;
            /* split i's pair: device memory (PH 2) or block i's shared memory (PH 3) */
            auto split_m = [&](int i) {
                return PH == 3 ? *cg::this_cluster().map_shared_rank(cm + r, i)
                               : mx[st0 + (size_t)r * S + i];
            };
            auto split_l = [&](int i) {
                return PH == 3 ? *cg::this_cluster().map_shared_rank(cs + r, i)
                               : ls[st0 + (size_t)r * S + i];
            };
            for (int i = lane; i < S; i += 32)
                m = fmaxf(m, split_m(i));
            m = warp_max(m);
            for (int i = lane; i < S; i += 32) {
                const double l = split_l(i);
                if (l > 0.0)
                    sum += l * exp((double)split_m(i) - (double)m);
            }
            sum = warp_sum(sum);
            if (lane == 0)
                st[2 * r] = m, st[2 * r + 1] = (float)(1.0 / sum);
        }
        __syncthreads();
        for (int e = threadIdx.x; e < ratio * jn; e += blockDim.x) {
            const int r = e / jn;
            float *p = sc + (size_t)r * ctx + e % jn;
            *p = __half2float(
                __float2half_rn(__fmul_rn(expf(*p - st[2 * r]), st[2 * r + 1])));
        }
        __syncthreads();
    }
    const int E = hd / 32;
    for (int r0 = 0; r0 < ratio; r0 += ATT_MAX_RATIO) {
        float acc[ATT_MAX_RATIO][EM];
#pragma unroll
        for (int r = 0; r < ATT_MAX_RATIO; r++)
#pragma unroll
            for (int e = 0; e < EM; e++)
                acc[r][e] = 0.0f;
        for (int b = b0 + warp; b < b1; b += NW) {
            const size_t vo =
                Q8 ? kv8_offset(s, bt[b], layer, 1, g) : kv_index(s, bt[b], layer, 1, g);
            const __half *vt = (const __half *)kv + (Q8 ? 0 : vo + lane);
            const int8_t *v8 = (const int8_t *)kv + (Q8 ? vo + lane : 0);
            const float *vsc =
                (const float *)((const int8_t *)kv + (Q8 ? vo + (size_t)KVB * hd : 0));
            const int n = npos - b * KVB < KVB ? npos - b * KVB : KVB;
            /* All KVB slots, so that (DEEP) every load is issued before the
             * first product: slots past n read row n - 1 (written; unwritten
             * rows may hold NaN, and 0 x NaN is NaN) with weight 0. */
#pragma unroll PV_UNROLL
            for (int sl = 0; sl < KVB; sl++) {
                const int j = b * KVB + sl - j0, row = sl < n ? sl : n - 1;
                float v[EM];
#pragma unroll
                for (int e = 0; e < EM; e++)
                    v[e] = e >= E ? 0.0f
                           : Q8 ? kv8_value((uint8_t)v8[(size_t)row * hd + 32 * e], vsc[row], s.fp8)
                                : __half2float(vt[(size_t)row * hd + 32 * e]);
#pragma unroll
                for (int r = 0; r < ATT_MAX_RATIO; r++) {
                    if (r0 + r < ratio) {
                        const float p = sl < n ? sc[(size_t)(r0 + r) * ctx + j] : 0.0f;
#pragma unroll
                        for (int e = 0; e < EM; e++)
                            acc[r][e] += p * v[e];
                    }
                }
            }
        }
#pragma unroll
        for (int r = 0; r < ATT_MAX_RATIO; r++)
#pragma unroll
            for (int e = 0; e < EM; e++)
                if (r < rchunk && e < E)
                    red[((size_t)warp * rchunk + r) * hd + lane + 32 * e] = acc[r][e];
        __syncthreads();
        for (int i = threadIdx.x; i < rchunk * hd; i += blockDim.x) {
            const int r = i / hd, d = i % hd;
            if (r0 + r < ratio) {
                float sum = 0.0f;
                for (int w = 0; w < NW; w++)
                    sum += red[((size_t)w * rchunk + r) * hd + d];
                if (PH == 3)
                    qs[(size_t)(r0 + r) * hd + d] = sum;
                else if (PH == 2)
                    po[(st0 + (size_t)(r0 + r) * S + split) * hd + d] = sum;
                else
                    out[(int64_t)t * ldo + (int64_t)(g * ratio + r0 + r) * hd + d] = sum;
            }
        }
        __syncthreads();
    }
    if (PH == 3) {
        cg::cluster_group cl = cg::this_cluster();
        cl.sync(); /* every split's partial outputs are in place */
        /* This block's share of the KV head's outputs, a warp per 32 of them
         * (one 8-bit block), the splits added in order as k_att_combine
         * adds them. */
        const int64_t ne0 = (int64_t)s.n_head * hd;
        for (int c = split * NW + warp; c < ratio * hd / 32; c += S * NW) {
            const int e = 32 * c + lane;
            float sum = 0.0f;
            for (int i = 0; i < S; i++)
                sum += *cl.map_shared_rank(qs + e, i);
            const int64_t o = (int64_t)g * ratio * hd + e;
            out[(int64_t)t * ldo + o] = sum;
            if (q8.q)
                q8_store1(sum, o, q8.q + (int64_t)t * ne0, q8.d + (int64_t)t * (ne0 / 32),
                          q8.s + (int64_t)t * (ne0 / 32));
        }
        cl.sync(); /* no block leaves while another still reads its shared memory */
    }
}

/* out[t][h] = the splits' partial P.V of (list index, head) added in split
 * order: grid (T, n_head), head_dim threads (a multiple of 32, so a warp
 * holds a 32-element block of the row). With q8.q, the row's 8-bit form
 * too, as k_quant_act would make it from out (rows of ne0 elements): the
 * output projection's GEMV then needs no quantizing launch of its own. */
__global__ void k_att_combine(const int32_t *list, const float *po, int S, int hd, float *out,
                              int64_t ldo, struct mfk_q8 q8, int64_t ne0)
{
    pdl_start();
    const int t = list ? list[blockIdx.x] : (int)blockIdx.x, h = blockIdx.y;
    const float *p = po + ((size_t)blockIdx.x * gridDim.y + h) * S * hd;
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float sum = 0.0f;
        for (int i = 0; i < S; i++)
            sum += p[(size_t)i * hd + d];
        out[(int64_t)t * ldo + (int64_t)h * hd + d] = sum;
        if (q8.q)
            q8_store1(sum, (int64_t)h * hd + d, q8.q + (int64_t)t * ne0,
                      q8.d + (int64_t)t * (ne0 / 32), q8.s + (int64_t)t * (ne0 / 32));
    }
}

/* Lets kernel fn take smem bytes of dynamic shared memory (past the 48 KiB
 * default). */
static size_t att_smem(const struct mfk_kv_shape *s, int32_t ctx, int nw)
{
    const size_t ratio = (size_t)(s->n_head / s->n_head_kv);
    const size_t rchunk = ratio < ATT_MAX_RATIO ? ratio : ATT_MAX_RATIO;
    return (ratio * (size_t)s->head_dim + ratio * (size_t)ctx +
            (size_t)nw * rchunk * (size_t)s->head_dim) *
           sizeof(float);
}

#define ATT_SMEM_MAX ((size_t)200 << 10) /* dynamic shared memory we ask for, at most */

extern "C" int32_t mfk_attention_max_ctx(const struct mfk_kv_shape *s)
{
    if (s->n_head_kv <= 0 || s->n_head % s->n_head_kv || s->head_dim % 32 ||
        s->head_dim > ATT_MAX_DIM)
        return 0;
    const size_t ratio = (size_t)(s->n_head / s->n_head_kv);
    const size_t fixed = att_smem(s, 0, ATT_WARPS) / sizeof(float);
    size_t n = ATT_SMEM_MAX / sizeof(float);
    if (n <= fixed)
        return 0;
    n = (n - fixed) / ratio;
    return n > INT32_MAX ? INT32_MAX : (int32_t)n;
}

/* The launches of mfk_attention for one head width and arena. */
template <int HD, bool Q8>
static int att_run(struct mfk_ctx *c, const struct mfk_kv_shape *s, int32_t layer, int32_t T,
                   const int32_t *list, const float *q, int64_t ldq, const int32_t *pos,
                   const int32_t *toff, const int32_t *tables, const void *kv, int32_t max_ctx,
                   int S, float *out, int64_t ldo, const struct mfk_q8 *q8, struct mf_err *err)
{
    const mfk_q lq = mfk_queue(c);
    int rc;
    /* a window's positions lie in at most window / 16 + 2 blocks */
    if (s->window > 0 && s->window + 3 * KVB < max_ctx)
        max_ctx = s->window + 3 * KVB;
    if (S == 1) {
        const int32_t ctx = (max_ctx + 3) / 4 * 4;
        const size_t smem = att_smem(s, ctx, ATT_WARPS);
        const auto fn = k_attention<HD, Q8, ATT_WARPS, 0>;
        if ((rc = mfk_raise_smem((const void *)fn, smem, "attention", err)))
            return rc;
        mfk_go(lq, dim3((unsigned)T, (unsigned)s->n_head_kv), ATT_THREADS, smem, fn, *s, layer,
               list, q, ldq, pos, toff, tables, kv, ctx, out, ldo, nullptr, nullptr, nullptr, 0,
               mfk_q8{});
        return mfk_launched("attention", err);
    }
    const int32_t nblk = (max_ctx + KVB - 1) / KVB, ctx = (nblk + S - 1) / S * KVB;
    const size_t n = (size_t)T * (size_t)s->n_head * (size_t)S;
    size_t smem = att_smem(s, ctx, ATT_SPLIT_WARPS);
    const dim3 grid((unsigned)T, (unsigned)s->n_head_kv, (unsigned)S);
    if (S <= MFK_ATT_CLUSTER_MAX && mfk_ctx_att_cluster_on(c)) {
        const auto f3 = k_attention<HD, Q8, ATT_SPLIT_WARPS, 3>;
        smem += (size_t)(s->n_head / s->n_head_kv) * (sizeof(double) + 3 * sizeof(float));
        if ((rc = mfk_raise_smem((const void *)f3, smem, "attention", err)))
            return rc;
        mfk_go_cluster(lq, grid, ATT_SPLIT_WARPS * 32, smem, dim3(1, 1, (unsigned)S), f3, *s, layer,
                       list, q, ldq, pos, toff, tables, kv, ctx, out, ldo, nullptr, nullptr,
                       nullptr, 0, q8 ? *q8 : mfk_q8{});
        return mfk_launched("attention (split, one cluster a context)", err);
    }
    void *buf = nullptr;
    if ((rc = mfk_scratch(c, n * (sizeof(double) + sizeof(float) * (1 + (size_t)s->head_dim)),
                          &buf, err)))
        return rc;
    double *ls = (double *)buf;
    float *mx = (float *)(void *)(ls + n), *po = mx + n;
    const auto f1 = k_attention<HD, Q8, ATT_SPLIT_WARPS, 1>;
    const auto f2 = k_attention<HD, Q8, ATT_SPLIT_WARPS, 2>;
    if ((rc = mfk_raise_smem((const void *)f1, smem, "attention", err)) ||
        (rc = mfk_raise_smem((const void *)f2, smem, "attention", err)))
        return rc;
    /* a split's scores fit its po slots (head_dim floats a head) when it
     * has at most head_dim positions: phase 1 leaves them there */
    const int stash = ctx <= s->head_dim;
    mfk_go(lq, grid, ATT_SPLIT_WARPS * 32, smem, f1, *s, layer, list, q, ldq, pos, toff, tables, kv,
           ctx, out, ldo, mx, ls, po, stash, mfk_q8{});
    mfk_go(lq, grid, ATT_SPLIT_WARPS * 32, smem, f2, *s, layer, list, q, ldq, pos, toff, tables, kv,
           ctx, out, ldo, mx, ls, po, stash, mfk_q8{});
    mfk_go(lq, dim3((unsigned)T, (unsigned)s->n_head), (unsigned)s->head_dim, 0, k_att_combine,
           list, po, S, s->head_dim, out, ldo, q8 ? *q8 : mfk_q8{},
           (int64_t)s->n_head * s->head_dim);
    return mfk_launched("attention (split)", err);
}

extern "C" int mfk_attention(struct mfk_ctx *c, const struct mfk_kv_shape *s, int32_t layer,
                             int32_t T, const int32_t *list, const float *q, int64_t ldq,
                             const int32_t *pos, const int32_t *toff, const int32_t *tables,
                             const void *kv, int32_t max_ctx, int32_t splits, float *out,
                             int64_t ldo, const struct mfk_q8 *q8, struct mf_err *err)
{
    if (T <= 0)
        return 0;
    if (int rc = q8_check(q8, (int64_t)s->n_head * s->head_dim, "attention", err))
        return rc;
    if (splits < 1 || splits > 4096)
        return mf_err_set(err, MF_EINVAL, "CUDA attention: %d splits of a context (1 to 4096)",
                          splits);
    if (s->n_head_kv <= 0 || s->n_head % s->n_head_kv || s->head_dim % 32 ||
        s->head_dim > ATT_MAX_DIM)
        return mf_err_set(err, MF_EUNSUPPORTED,
                          "CUDA attention: %d heads over %d KV heads of %d dimensions (the kernel "
                          "takes a multiple of 32 up to %d)",
                          s->n_head, s->n_head_kv, s->head_dim, ATT_MAX_DIM);
    if ((s->window > 0 && s->window + 3 * KVB < max_ctx ? s->window + 3 * KVB : max_ctx) >
        mfk_attention_max_ctx(s))
        return mf_err_set(err, MF_EUNSUPPORTED,
                          "CUDA attention: a context of %d tokens is longer than the %d this "
                          "kernel holds in shared memory",
                          max_ctx, mfk_attention_max_ctx(s));
#define ATT_RUN(HD, Q8)                                                                            \
    att_run<HD, Q8>(c, s, layer, T, list, q, ldq, pos, toff, tables, kv, max_ctx, splits, out,     \
                    ldo, q8, err)
    if (s->head_dim == 128)
        return s->q8 ? ATT_RUN(128, true) : ATT_RUN(128, false);
    if (s->head_dim == 64)
        return s->q8 ? ATT_RUN(64, true) : ATT_RUN(64, false);
    if (s->head_dim == 96) /* Phi-3 */
        return s->q8 ? ATT_RUN(96, true) : ATT_RUN(96, false);
    if (s->head_dim == 256) /* Gemma */
        return s->q8 ? ATT_RUN(256, true) : ATT_RUN(256, false);
    return s->q8 ? ATT_RUN(0, true) : ATT_RUN(0, false);
#undef ATT_RUN
}
