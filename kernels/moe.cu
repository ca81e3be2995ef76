/*
 * moe.cu: a mixture-of-experts layer's kernels (kernels.h, "mixture of
 * experts"): the routing and grouping of a step's tokens by expert, the
 * grouped expert products and the weighted combine, all on the device so a
 * decode step records as a CUDA graph (no count comes back to the host).
 *
 * Routing (k_moe_route): a warp per token computes what
 * runtime/cpu/cpu_moe.c computes (softmax with the sum in double, k best
 * with ties to the lower expert, weights over their float sum clamped at
 * 2^-14); the block that finishes last (a counter in device memory, put
 * back to 0 by that block) groups the T k pairs by expert with a counting
 * sort over (chunk of tokens, expert) counters in shared memory, so an
 * expert's gathered rows come in token order whatever the timing, and
 * writes the work list: each expert's rows in items of at most
 * mfk_moe_tile(T) rows, experts in order.
 *
 * Grouped products (k_moe_q4k, k_moe_q6k, k_moe_gemv): grid (row tiles,
 * MFK_MOE_SLOTS at most, weights); a block takes its rows of the weight
 * for every MFK_MOE_SLOTS-th item, so an expert nobody chose is never read
 * and a chosen expert's rows are read once per item (once a step in decode,
 * where items hold all of an expert's rows). Q4_K and Q6_K meet 8-bit inputs
 * in dp4a dot products as the GEMV's q4k_step and q6k_step do (llama.cu),
 * each lane reading its tokens' input rows through the item's row map; a
 * row narrower than a warp's 8 (Q4_K) or 4 (Q6_K) super-blocks shares the
 * warp with others (Qwen3-MoE's 768-wide down rows: two a warp). The other
 * types stage the float inputs in shared memory, rounded as the CPU rounds
 * them, and decode with deq8 (blocks.cuh). Sums never depend on which
 * tokens share an item: a row's result is its own lanes' fixed-order sums.
 */
#include "kernels/kernels.h"
#include "kernels/blocks.cuh"
#include "kernels/internal.cuh"

#include <cstdint>

#define MOE_WARPS 8          /* warps of a grouped-product block */
#define MOE_SMEM_FLOATS 8192 /* staged float inputs of a k_moe_gemv block (32 KiB) */
#define ROUTE_WARPS 8        /* tokens of a routing block, a warp each */
#define ROUTE_PER_LANE (MFK_MOE_MAX_EXPERTS / 32) /* router probabilities a lane holds */
#define FULL 0xffffffffu

/* ------------------------------------------------------------------------
 * Routing and grouping
 * ---------------------------------------------------------------------- */

/* Candidate (v, i) beats (bv, bi): a higher probability, or the same and a
 * lower expert; index -1 is no candidate. A total order on valid entries,
 * so a butterfly of it leaves every lane with the same winner. */
__device__ __forceinline__ bool route_better(float v, int i, float bv, int bi)
{
    return i >= 0 && (bi < 0 || v > bv || (v == bv && i < bi));
}

/* One token's routing by a warp (cpu_moe.c route_row): lg its router
 * logits, sel and w its k entries. Expert e lives in lane e % 32, slot
 * e / 32. */
__device__ void route_token(const float *lg, int ne, int k, int32_t *sel, float *w)
{
    const int lane = threadIdx.x & 31;
    float p[ROUTE_PER_LANE];
    float mx = -INFINITY;
#pragma unroll
    for (int i = 0; i < ROUTE_PER_LANE; i++) {
        const int e = lane + 32 * i;
        p[i] = e < ne ? lg[e] : -INFINITY;
        mx = fmaxf(mx, p[i]);
    }
    for (int o = 16; o > 0; o >>= 1)
        mx = fmaxf(mx, __shfl_xor_sync(FULL, mx, o));
    double sum = 0.0;
#pragma unroll
    for (int i = 0; i < ROUTE_PER_LANE; i++)
        if (lane + 32 * i < ne) {
            p[i] = expf(__fsub_rn(p[i], mx));
            sum += (double)p[i];
        }
    for (int o = 16; o > 0; o >>= 1)
        sum += __shfl_xor_sync(FULL, sum, o);
    const float inv = (float)(1.0 / sum);
#pragma unroll
    for (int i = 0; i < ROUTE_PER_LANE; i++)
        p[i] = __fmul_rn(p[i], inv);
    uint32_t taken = 0; /* bit i: slot i of this lane chosen */
    float wsum = 0.0f;
    for (int j = 0; j < k; j++) {
        float bv = 0.0f;
        int bi = -1;
#pragma unroll
        for (int i = 0; i < ROUTE_PER_LANE; i++) {
            const int e = lane + 32 * i;
            if (e < ne && !((taken >> i) & 1u) && route_better(p[i], e, bv, bi))
                bv = p[i], bi = e;
        }
        for (int o = 16; o > 0; o >>= 1) {
            const float ov = __shfl_xor_sync(FULL, bv, o);
            const int oi = __shfl_xor_sync(FULL, bi, o);
            if (route_better(ov, oi, bv, bi))
                bv = ov, bi = oi;
        }
        if ((bi & 31) == lane)
            taken |= 1u << (bi >> 5);
        wsum = __fadd_rn(wsum, bv); /* in choice order, as the CPU adds them */
        if (lane == 0)
            sel[j] = bi, w[j] = bv;
    }
    wsum = wsum > 6.103515625e-5f ? wsum : 6.103515625e-5f;
    if (lane == 0)
        for (int j = 0; j < k; j++)
            w[j] = __fdiv_rn(w[j], wsum);
}

/* out[i] = the sum of f(in[0..i)) for i <= n (out[n]: the total), by one
 * warp, each lane a run of consecutive entries; f(v) = v, or with tile,
 * ceil(v / tile). */
__device__ void warp_scan(const int *in, int *out, int n, int tile)
{
    const int lane = threadIdx.x & 31, per = (n + 31) / 32, i0 = lane * per;
    const int i1 = i0 + per < n ? i0 + per : n;
    int s = 0;
    for (int i = i0; i < i1; i++)
        s += tile ? (in[i] + tile - 1) / tile : in[i];
    int incl = s;
    for (int o = 1; o < 32; o <<= 1) {
        const int v = __shfl_up_sync(FULL, incl, o);
        if (lane >= o)
            incl += v;
    }
    int run = incl - s;
    for (int i = i0; i < i1; i++) {
        out[i] = run;
        run += tile ? (in[i] + tile - 1) / tile : in[i];
    }
    if (lane == 31)
        out[n] = incl;
}

/* Grid ceil(T / ROUTE_WARPS) blocks: warp w of block b routes token
 * ROUTE_WARPS b + w; the last block to finish groups every pair (see the
 * file's comment). tile: mfk_moe_tile(T). */
__global__ void __launch_bounds__(ROUTE_WARPS * 32)
    k_moe_route(const float *logits, int64_t ld, int T, int ne, int k, int tile,
                struct mfk_moe_route r)
{
    __shared__ int hist[MFK_MOE_HIST]; /* [chunk][expert]: counts, then running places */
    __shared__ int cnt[MFK_MOE_MAX_EXPERTS + 1], base[MFK_MOE_MAX_EXPERTS + 1],
        ibase[MFK_MOE_MAX_EXPERTS + 1];
    __shared__ int last;
    pdl_start();
    const int tid = threadIdx.x, wp = tid >> 5;
    const int t = blockIdx.x * ROUTE_WARPS + wp;
    if (t < T)
        route_token(logits + (int64_t)t * ld, ne, k, r.sel + (int64_t)t * k, r.w + (int64_t)t * k);
    __threadfence(); /* this block's choices before its count */
    __syncthreads();
    if (tid == 0)
        last = atomicAdd(r.done, 1u) == gridDim.x - 1;
    __syncthreads();
    if (!last)
        return;
    __threadfence(); /* every block's choices are visible past here */
    if (tid == 0)
        *r.done = 0u;
    int per;
    const int nc = mfk_moe_chunks(T, ne, &per);
    for (int i = tid; i < nc * ne; i += blockDim.x)
        hist[i] = 0;
    __syncthreads();
    if (tid < nc) { /* chunk tid's counts (choices read past L1: other blocks wrote them) */
        int *h = hist + tid * ne;
        const int t1 = (tid + 1) * per < T ? (tid + 1) * per : T;
        for (int p = tid * per * k; p < t1 * k; p++)
            h[__ldcg(r.sel + p)]++;
    }
    __syncthreads();
    for (int e = tid; e < ne; e += blockDim.x) { /* each chunk's first place among e's rows */
        int run = 0;
        for (int c = 0; c < nc; c++) {
            const int v = hist[c * ne + e];
            hist[c * ne + e] = run;
            run += v;
        }
        cnt[e] = run;
    }
    __syncthreads();
    if (wp == 0)
        warp_scan(cnt, base, ne, 0); /* experts' first gathered rows */
    else if (wp == 1)
        warp_scan(cnt, ibase, ne, tile); /* experts' first items */
    __syncthreads();
    if (tid < nc) { /* chunk tid's pairs into place, tokens in order */
        int *h = hist + tid * ne;
        const int t0 = tid * per, t1 = t0 + per < T ? t0 + per : T;
        for (int tt = t0; tt < t1; tt++)
            for (int j = 0; j < k; j++) {
                const int p = tt * k + j, e = __ldcg(r.sel + p), at = base[e] + h[e]++;
                r.grow[at] = tt;
                r.prow[p] = at;
            }
    }
    for (int e = tid; e < ne; e += blockDim.x) {
        const int c = cnt[e];
        r.eoff[e] = base[e];
        for (int i = 0; i * tile < c; i++)
            reinterpret_cast<int4 *>(r.items)[ibase[e] + i] =
                make_int4(e, base[e] + i * tile, c - i * tile < tile ? c - i * tile : tile, 0);
    }
    if (tid == 0) {
        r.eoff[ne] = T * k;
        *r.n_items = ibase[ne];
    }
}

extern "C" int mfk_moe_route(struct mfk_ctx *c, const float *logits, int64_t ld, int32_t T,
                             int32_t n_expert, int32_t k, const struct mfk_moe_route *r,
                             struct mf_err *err)
{
    if (T <= 0)
        return 0;
    if (n_expert < 1 || n_expert > MFK_MOE_MAX_EXPERTS || k < 1 || k > n_expert)
        return mf_err_set(err, MF_EINVAL,
                          "CUDA moe route: %d of %d experts (1 to %d experts, 1 to all of them "
                          "a token)",
                          k, n_expert, MFK_MOE_MAX_EXPERTS);
    if ((uintptr_t)r->items & 15)
        return mf_err_set(err, MF_EINVAL, "CUDA moe route: the work list is not 16-byte aligned");
    if ((int64_t)T * k > INT32_MAX / 2)
        return mf_err_set(err, MF_EINVAL, "CUDA moe route: %d tokens of %d experts is too many", T,
                          k);
    mfk_go(mfk_queue(c), (unsigned)((T + ROUTE_WARPS - 1) / ROUTE_WARPS), ROUTE_WARPS * 32, 0,
           k_moe_route, logits, ld, (int)T, (int)n_expert, (int)k, (int)mfk_moe_tile(T), *r);
    return mfk_launched("moe route", err);
}

/* ------------------------------------------------------------------------
 * Grouped expert products
 * ---------------------------------------------------------------------- */

/* The weights of one grouped launch (blockIdx.z picks one): expert e's
 * row r of weight z at w[z] + e estride[z] + r rb[z]. */
struct moe_mats {
    const uint8_t *w[2];
    float *y[2];
    uint64_t rb[2], estride[2];
    int64_t ne1[2];
};

/* Weight z's part of m (z 0 or 1), by selects: an index into the kernel
 * parameter would copy it to local memory. */
struct moe_mat {
    const uint8_t *w;
    float *y;
    uint64_t rb, estride;
    int64_t ne1;
};
__device__ __forceinline__ moe_mat mat_of(const moe_mats &m, int z)
{
    return z ? moe_mat{m.w[1], m.y[1], m.rb[1], m.estride[1], m.ne1[1]}
             : moe_mat{m.w[0], m.y[0], m.rb[0], m.estride[0], m.ne1[0]};
}

/* Input row of the item's row cc: its token (xrow, the gate and up
 * products) or the gathered row itself (the down product). */
__device__ __forceinline__ int64_t item_row(const int32_t *xrow, const int4 &item, int cc)
{
    return cc < item.z ? (xrow ? (int64_t)xrow[item.y + cc] : (int64_t)(item.y + cc)) : 0;
}

/* s summed over the G lanes of its group (G a power of two up to 32). */
template <int G> __device__ __forceinline__ float group_sum(float s)
{
#pragma unroll
    for (int o = G / 2; o > 0; o >>= 1)
        s += __shfl_xor_sync(FULL, s, o);
    return s;
}

/* Q4_K experts against 8-bit inputs: SPR super-block slots of 4 lanes a
 * row (lane group p of each super-block, as q4k_step), 32 / (4 SPR) rows a
 * warp, NB rows of an item a pass. */
template <int NB, int SPR>
__global__ void __launch_bounds__(MOE_WARPS * 32)
    k_moe_q4k(const moe_mats m, int64_t ne0, const int8_t *__restrict__ xq,
              const float *__restrict__ xd, const float *__restrict__ xs,
              const int32_t *__restrict__ xrow, const int4 *__restrict__ items,
              const int32_t *__restrict__ n_items, int64_t ldy)
{
    constexpr int G = 4 * SPR, RW = 32 / G; /* lanes a row, rows a warp */
    pdl_start();
    const moe_mat w = mat_of(m, (int)blockIdx.z);
    const int lane = threadIdx.x & 31;
    const int64_t row = ((int64_t)blockIdx.x * MOE_WARPS + (threadIdx.x >> 5)) * RW + lane / G;
    const bool live = row < w.ne1;
    const int slot = (lane % G) >> 2, p = lane & 3, sh = 16 * (p & 1);
    const bool hi = p >= 2;
    const int nsb = (int)(ne0 >> 8);
    const int64_t nd = ne0 >> 5;
    const int ni = *n_items;
    for (int it = blockIdx.y; it < ni; it += gridDim.y) {
        const int4 item = items[it];
        const uint8_t *wr = w.w + (uint64_t)item.x * w.estride + (uint64_t)(live ? row : 0) * w.rb;
        int64_t tok[NB];
        float acc[NB];
#pragma unroll
        for (int cc = 0; cc < NB; cc++)
            tok[cc] = item_row(xrow, item, cc), acc[cc] = 0.0f;
        for (int sb = slot; live && sb < nsb; sb += SPR) {
            const uint8_t *b = wr + (size_t)144 * sb;
            const uint4 hd = __ldg(reinterpret_cast<const uint4 *>(b));
            const uint4 q0 = __ldg(reinterpret_cast<const uint4 *>(b + 16 + 32 * p));
            const uint4 q1 = __ldg(reinterpret_cast<const uint4 *>(b + 32 + 32 * p));
            uint32_t sc, mn;
            q4k_pair(hd, sh, hi, &sc, &mn);
            const float d = h2f((uint16_t)(hd.x & 0xFFFF)), dm = h2f((uint16_t)(hd.x >> 16));
            const float dlo = d * (float)(sc & 0xFF), dhi = d * (float)(sc >> 8);
            const float mlo = dm * (float)(mn & 0xFF), mhi = dm * (float)(mn >> 8);
            const uint32_t qw[8] = {q0.x, q0.y, q0.z, q0.w, q1.x, q1.y, q1.z, q1.w};
            const int64_t e = 256 * (int64_t)sb + 64 * p, blk = 8 * (int64_t)sb + 2 * p;
#pragma unroll
            for (int cc = 0; cc < NB; cc++) {
                if (cc < item.z) {
                    const int8_t *xt = xq + tok[cc] * ne0 + e;
                    const int4 xa = __ldg(reinterpret_cast<const int4 *>(xt));
                    const int4 xb = __ldg(reinterpret_cast<const int4 *>(xt + 16));
                    const int4 xc = __ldg(reinterpret_cast<const int4 *>(xt + 32));
                    const int4 xe = __ldg(reinterpret_cast<const int4 *>(xt + 48));
                    const int xl[8] = {xa.x, xa.y, xa.z, xa.w, xb.x, xb.y, xb.z, xb.w};
                    const int xh[8] = {xc.x, xc.y, xc.z, xc.w, xe.x, xe.y, xe.z, xe.w};
                    const int64_t o = tok[cc] * nd + blk; /* even: 8-byte aligned */
                    const float2 xdp = __ldg(reinterpret_cast<const float2 *>(xd + o));
                    const float2 xsp = __ldg(reinterpret_cast<const float2 *>(xs + o));
                    int slo = 0, shi = 0;
#pragma unroll
                    for (int q = 0; q < 8; q++) {
                        slo = __dp4a((int)(qw[q] & 0x0F0F0F0Fu), xl[q], slo);
                        shi = __dp4a((int)((qw[q] >> 4) & 0x0F0F0F0Fu), xh[q], shi);
                    }
                    acc[cc] += xdp.x * dlo * (float)slo + xdp.y * dhi * (float)shi -
                               (mlo * xsp.x + mhi * xsp.y);
                }
            }
        }
#pragma unroll
        for (int cc = 0; cc < NB; cc++) {
            const float s = group_sum<G>(acc[cc]);
            if (live && lane % G == 0 && cc < item.z)
                w.y[(int64_t)(item.y + cc) * ldy + row] = s;
        }
    }
}

/* Q6_K experts against 8-bit inputs: SPR super-block slots of 8 lanes a
 * row (part (c, kp, l0) of each super-block, as q6k_step), 32 / (8 SPR)
 * rows a warp. */
template <int NB, int SPR>
__global__ void __launch_bounds__(MOE_WARPS * 32)
    k_moe_q6k(const moe_mats m, int64_t ne0, const int8_t *__restrict__ xq,
              const float *__restrict__ xd, const int32_t *__restrict__ xrow,
              const int4 *__restrict__ items, const int32_t *__restrict__ n_items, int64_t ldy)
{
    constexpr int G = 8 * SPR, RW = 32 / G;
    pdl_start();
    const moe_mat w = mat_of(m, (int)blockIdx.z);
    const int lane = threadIdx.x & 31;
    const int64_t row = ((int64_t)blockIdx.x * MOE_WARPS + (threadIdx.x >> 5)) * RW + lane / G;
    const bool live = row < w.ne1;
    const int slot = (lane % G) >> 3, j8 = lane & 7;
    const int c = j8 >> 2, kp = (j8 >> 1) & 1, l0 = (j8 & 1) * 16;
    const int nsb = (int)(ne0 >> 8);
    const int64_t nd = ne0 >> 5;
    const int ni = *n_items;
    for (int it = blockIdx.y; it < ni; it += gridDim.y) {
        const int4 item = items[it];
        const uint8_t *wr = w.w + (uint64_t)item.x * w.estride + (uint64_t)(live ? row : 0) * w.rb;
        int64_t tok[NB];
        float acc[NB];
#pragma unroll
        for (int cc = 0; cc < NB; cc++)
            tok[cc] = item_row(xrow, item, cc), acc[cc] = 0.0f;
        for (int sb = slot; live && sb < nsb; sb += SPR) {
            const uint8_t *b = wr + (size_t)210 * sb;
            const float d = h2f(ld16(b + 208));
            const float dlo = d * (float)(int8_t)b[192 + 8 * c + (l0 >> 4) + 2 * kp];
            const float dhi = d * (float)(int8_t)b[192 + 8 * c + (l0 >> 4) + 2 * (kp + 2)];
            uint32_t lw[4], hw[4];
            int qlo[4], qhi[4];
            ld16x4<false>(b + 64 * c + 32 * kp + l0, lw);
            ld16x4<false>(b + 128 + 32 * c + l0, hw);
#pragma unroll
            for (int q = 0; q < 4; q++) {
                const uint32_t lo =
                    (lw[q] & 0x0F0F0F0Fu) | (((hw[q] >> (2 * kp)) & 0x03030303u) << 4);
                const uint32_t hi =
                    ((lw[q] >> 4) & 0x0F0F0F0Fu) | (((hw[q] >> (2 * kp + 4)) & 0x03030303u) << 4);
                qlo[q] = (int)__vsub4(lo, 0x20202020u);
                qhi[q] = (int)__vsub4(hi, 0x20202020u);
            }
            const int64_t elo = (int64_t)sb * 256 + 128 * c + 32 * kp + l0, ehi = elo + 64;
#pragma unroll
            for (int cc = 0; cc < NB; cc++) {
                if (cc < item.z) {
                    const int8_t *xt = xq + tok[cc] * ne0;
                    const int4 xl4 = __ldg(reinterpret_cast<const int4 *>(xt + elo));
                    const int4 xh4 = __ldg(reinterpret_cast<const int4 *>(xt + ehi));
                    const int xl[4] = {xl4.x, xl4.y, xl4.z, xl4.w};
                    const int xh[4] = {xh4.x, xh4.y, xh4.z, xh4.w};
                    const float *dt = xd + tok[cc] * nd;
                    const float xdl = __ldg(dt + elo / 32), xdh = __ldg(dt + ehi / 32);
                    int slo = 0, shi = 0;
#pragma unroll
                    for (int q = 0; q < 4; q++) {
                        slo = __dp4a(qlo[q], xl[q], slo);
                        shi = __dp4a(qhi[q], xh[q], shi);
                    }
                    acc[cc] += xdl * dlo * (float)slo + xdh * dhi * (float)shi;
                }
            }
        }
#pragma unroll
        for (int cc = 0; cc < NB; cc++) {
            const float s = group_sum<G>(acc[cc]);
            if (live && lane % G == 0 && cc < item.z)
                w.y[(int64_t)(item.y + cc) * ldy + row] = s;
        }
    }
}

/* The other types against float inputs (F32, F16, BF16, Q8_0, Q4_0, Q5_K):
 * a warp a row, the item's input rows staged in shared memory a chunk at a
 * time, rounded for the weight type (act), as llama.cu's k_gemv. */
template <int TY, int NB>
__global__ void __launch_bounds__(MOE_WARPS * 32)
    k_moe_gemv(const moe_mats m, int64_t ne0, const float *__restrict__ x, int64_t ldx,
               const int32_t *__restrict__ xrow, const int4 *__restrict__ items,
               const int32_t *__restrict__ n_items, int64_t ldy)
{
    constexpr int CH = MOE_SMEM_FLOATS / NB; /* elements a chunk, a multiple of 256 */
    __shared__ __align__(16) float xs[MOE_SMEM_FLOATS];
    __shared__ int64_t stok[NB];
    pdl_start();
    const moe_mat w = mat_of(m, (int)blockIdx.z);
    const int lane = threadIdx.x & 31;
    const int64_t row = (int64_t)blockIdx.x * MOE_WARPS + (threadIdx.x >> 5);
    const bool live = row < w.ne1;
    const int ni = *n_items;
    for (int it = blockIdx.y; it < ni; it += gridDim.y) {
        const int4 item = items[it];
        const int nc = item.z;
        const uint8_t *wr = w.w + (uint64_t)item.x * w.estride + (uint64_t)(live ? row : 0) * w.rb;
        __syncthreads(); /* the last item's rows are consumed */
        if (threadIdx.x < NB)
            stok[threadIdx.x] = item_row(xrow, item, (int)threadIdx.x);
        float acc[NB];
#pragma unroll
        for (int cc = 0; cc < NB; cc++)
            acc[cc] = 0.0f;
        for (int64_t k0 = 0; k0 < ne0; k0 += CH) {
            const int len = ne0 - k0 < CH ? (int)(ne0 - k0) : CH, len4 = len / 4;
            __syncthreads(); /* the last chunk is consumed; stok is written */
            for (int idx = threadIdx.x; idx < NB * len4; idx += blockDim.x) {
                const int cc = idx / len4, e4 = idx % len4;
                float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                if (cc < nc)
                    v = *reinterpret_cast<const float4 *>(x + stok[cc] * ldx + k0 + 4 * e4);
                v.x = act<TY>(v.x), v.y = act<TY>(v.y), v.z = act<TY>(v.z), v.w = act<TY>(v.w);
                *reinterpret_cast<float4 *>(xs + cc * CH + 4 * e4) = v;
            }
            __syncthreads();
            if (!live)
                continue;
            for (int i = lane * 8; i < len; i += 256) {
                float v[8];
                deq8<TY>(wr, k0 + i, v);
#pragma unroll
                for (int cc = 0; cc < NB; cc++) {
                    if (cc < nc)
                        acc[cc] += dot8(v, xs + cc * CH + i);
                }
            }
        }
#pragma unroll
        for (int cc = 0; cc < NB; cc++) {
            const float s = group_sum<32>(acc[cc]);
            if (live && lane == 0 && cc < nc)
                w.y[(int64_t)(item.y + cc) * ldy + row] = s;
        }
    }
}

/* A launch's common arguments. */
struct moe_args {
    dim3 grid;
    int64_t ne0, ldx, ldy;
    const float *x;
    struct mfk_q8 q8;
    const int32_t *xrow;
    const int4 *items;
    const int32_t *n_items;
};

/* Super-block slots a row takes: the power of two from nsb up, at most the
 * warp's slots (8 for Q4_K, 4 for Q6_K). */
static int slots_for(int64_t nsb, int most)
{
    int s = 1;
    while (s < nsb && s < most)
        s *= 2;
    return s;
}

template <int NB, int SPR> static void go_q4k(const mfk_q &q, const moe_mats &m, const moe_args &a)
{
    mfk_go(q, a.grid, MOE_WARPS * 32, 0, k_moe_q4k<NB, SPR>, m, a.ne0, (const int8_t *)a.q8.q,
           (const float *)a.q8.d, (const float *)a.q8.s, a.xrow, a.items, a.n_items, a.ldy);
}

template <int NB, int SPR> static void go_q6k(const mfk_q &q, const moe_mats &m, const moe_args &a)
{
    mfk_go(q, a.grid, MOE_WARPS * 32, 0, k_moe_q6k<NB, SPR>, m, a.ne0, (const int8_t *)a.q8.q,
           (const float *)a.q8.d, a.xrow, a.items, a.n_items, a.ldy);
}

template <int NB>
static void go_int(const mfk_q &q, int type, int spr, const moe_mats &m, const moe_args &a)
{
    if (type == GGML_TYPE_Q4_K) {
        if (spr == 1)
            go_q4k<NB, 1>(q, m, a);
        else if (spr == 2)
            go_q4k<NB, 2>(q, m, a);
        else if (spr == 4)
            go_q4k<NB, 4>(q, m, a);
        else
            go_q4k<NB, 8>(q, m, a);
    } else {
        if (spr == 1)
            go_q6k<NB, 1>(q, m, a);
        else if (spr == 2)
            go_q6k<NB, 2>(q, m, a);
        else
            go_q6k<NB, 4>(q, m, a);
    }
}

template <int TY> static void go_gemv(const mfk_q &q, int nb, const moe_mats &m, const moe_args &a)
{
    if constexpr (TY != GGML_TYPE_Q4_K && TY != GGML_TYPE_Q6_K) {
        if (nb == 1)
            mfk_go(q, a.grid, MOE_WARPS * 32, 0, k_moe_gemv<TY, 1>, m, a.ne0, a.x, a.ldx, a.xrow,
                   a.items, a.n_items, a.ldy);
        else if (nb == 2)
            mfk_go(q, a.grid, MOE_WARPS * 32, 0, k_moe_gemv<TY, 2>, m, a.ne0, a.x, a.ldx, a.xrow,
                   a.items, a.n_items, a.ldy);
        else if (nb == 4)
            mfk_go(q, a.grid, MOE_WARPS * 32, 0, k_moe_gemv<TY, 4>, m, a.ne0, a.x, a.ldx, a.xrow,
                   a.items, a.n_items, a.ldy);
        else
            mfk_go(q, a.grid, MOE_WARPS * 32, 0, k_moe_gemv<TY, MFK_MOE_TILE>, m, a.ne0, a.x, a.ldx,
                   a.xrow, a.items, a.n_items, a.ldy);
    }
}

static int int_type(int t)
{
    return t == GGML_TYPE_Q4_K || t == GGML_TYPE_Q6_K;
}

/* 0 when w[0..n) can take this input, else MF_EINVAL / MF_EUNSUPPORTED. */
static int gemm_check(int n, const struct mfk_weight *const *w, const float *x, int64_t ldx,
                      const struct mfk_q8 *xq8, struct mf_err *err)
{
    if (n < 1 || n > 2)
        return mf_err_set(err, MF_EINVAL, "CUDA moe gemm: %d weights (1 or 2 a launch)", n);
    for (int i = 0; i < n; i++) {
        if (!mfk_weight_ok(w[i]->type, w[i]->ne0))
            return mf_err_set(err, MF_EUNSUPPORTED,
                              "CUDA moe gemm: expert type %s with rows of %lld elements is not "
                              "supported",
                              ggml_type_name((uint32_t)w[i]->type), (long long)w[i]->ne0);
        if (((uintptr_t)w[i]->data & 15) || (w[i]->row_bytes & 1) || w[i]->ne0 != w[0]->ne0 ||
            w[i]->ne1 < 1)
            return mf_err_set(err, MF_EINVAL,
                              "CUDA moe gemm: expert weights must be aligned, of one width");
        if (int_type(w[i]->type) && !xq8)
            return mf_err_set(err, MF_EINVAL,
                              "CUDA moe gemm: %s experts need the input's 8-bit form",
                              ggml_type_name((uint32_t)w[i]->type));
        if (int_type(w[i]->type))
            if (int rc = q8_check(xq8, w[i]->ne0, "moe gemm", err))
                return rc;
        if (!int_type(w[i]->type) && (!x || ((uintptr_t)x & 15) || (ldx & 3)))
            return mf_err_set(err, MF_EINVAL,
                              "CUDA moe gemm: %s experts need 16-byte aligned float input rows",
                              ggml_type_name((uint32_t)w[i]->type));
    }
    return 0;
}

extern "C" int mfk_moe_gemm(struct mfk_ctx *c, int n, const struct mfk_weight *const *w,
                            int32_t n_expert, const float *x, int64_t ldx, const struct mfk_q8 *xq8,
                            const int32_t *xrow, int32_t T, int32_t k,
                            const struct mfk_moe_route *r, float *const *y, int64_t ldy,
                            struct mf_err *err)
{
    if (T <= 0)
        return 0;
    if (int rc = gemm_check(n, w, x, ldx, xq8, err))
        return rc;
    const int64_t imax = mfk_moe_items_max(T, n_expert, k);
    const int nb = mfk_moe_tile(T);
    const mfk_q q = mfk_queue(c);
    moe_args a = {};
    a.ne0 = w[0]->ne0, a.ldx = ldx, a.ldy = ldy, a.x = x, a.xrow = xrow;
    a.items = reinterpret_cast<const int4 *>(r->items), a.n_items = r->n_items;
    if (xq8)
        a.q8 = *xq8;
    for (int i = 0; i < n;) { /* weights of one type share a launch (grid z) */
        const int type = w[i]->type, cnt = i + 1 < n && w[i + 1]->type == type ? 2 : 1;
        moe_mats m = {};
        int64_t rows = 0;
        /* a row's super-block slots, and rows a block (a warp a row but for
         * K-quant rows narrower than the warp's slots) */
        const int lps = type == GGML_TYPE_Q4_K ? 4 : 8, spr = slots_for(a.ne0 / 256, 32 / lps);
        const int64_t per = int_type(type) ? MOE_WARPS * (32 / (lps * spr)) : MOE_WARPS;
        for (int j = 0; j < cnt; j++) {
            const struct mfk_weight *wj = w[i + j];
            m.w[j] = (const uint8_t *)wj->data, m.y[j] = y[i + j], m.rb[j] = wj->row_bytes;
            m.estride[j] = wj->row_bytes * (uint64_t)wj->ne1, m.ne1[j] = wj->ne1;
            rows = wj->ne1 > rows ? wj->ne1 : rows;
        }
        a.grid = dim3((unsigned)((rows + per - 1) / per),
                      (unsigned)(imax < MFK_MOE_SLOTS ? imax : MFK_MOE_SLOTS), (unsigned)cnt);
        if (int_type(type)) {
            if (nb == 1)
                go_int<1>(q, type, spr, m, a);
            else if (nb == 2)
                go_int<2>(q, type, spr, m, a);
            else if (nb == 4)
                go_int<4>(q, type, spr, m, a);
            else
                go_int<MFK_MOE_TILE>(q, type, spr, m, a);
        } else {
            MFK_TYPE_SWITCH(type, TY, go_gemv<TY>(q, nb, m, a));
        }
        if (int rc = mfk_launched("moe gemm", err))
            return rc;
        i += cnt;
    }
    return 0;
}

/* ------------------------------------------------------------------------
 * Combine
 * ---------------------------------------------------------------------- */

/* Grid (T, ceil(n / 1024)): four elements a thread of token t's output,
 * the experts' rows weighted and added best first (cpu_moe.c combine). */
__global__ void k_moe_combine(const float *__restrict__ y, int64_t ldy, int k, int64_t n,
                              const int32_t *__restrict__ prow, const float *__restrict__ w,
                              float *out, int64_t ldo, int add)
{
    pdl_start();
    const int64_t t = blockIdx.x, i = ((int64_t)blockIdx.y * blockDim.x + threadIdx.x) * 4;
    if (i >= n)
        return;
    float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (int j = 0; j < k; j++) {
        const float wj = w[t * k + j];
        const float4 o = *reinterpret_cast<const float4 *>(y + (int64_t)prow[t * k + j] * ldy + i);
        const float4 p = make_float4(__fmul_rn(wj, o.x), __fmul_rn(wj, o.y), __fmul_rn(wj, o.z),
                                     __fmul_rn(wj, o.w));
        acc = j ? make_float4(__fadd_rn(acc.x, p.x), __fadd_rn(acc.y, p.y), __fadd_rn(acc.z, p.z),
                              __fadd_rn(acc.w, p.w))
                : p;
    }
    float4 *op = reinterpret_cast<float4 *>(out + t * ldo + i);
    if (add) {
        const float4 v = *op;
        acc = make_float4(__fadd_rn(acc.x, v.x), __fadd_rn(acc.y, v.y), __fadd_rn(acc.z, v.z),
                          __fadd_rn(acc.w, v.w));
    }
    *op = acc;
}

extern "C" int mfk_moe_combine(struct mfk_ctx *c, const float *y, int64_t ldy, int32_t T, int32_t k,
                               int64_t n, const struct mfk_moe_route *r, float *out, int64_t ldo,
                               int add, struct mf_err *err)
{
    if (T <= 0 || n <= 0)
        return 0;
    if ((n & 3) || (ldy & 3) || (ldo & 3) || ((uintptr_t)y & 15) || ((uintptr_t)out & 15))
        return mf_err_set(err, MF_EINVAL, "CUDA moe combine: rows must be 16-byte aligned float4s");
    mfk_go(mfk_queue(c), dim3((unsigned)T, (unsigned)((n / 4 + 255) / 256)), 256, 0, k_moe_combine,
           y, ldy, (int)k, n, (const int32_t *)r->prow, (const float *)r->w, out, ldo, add);
    return mfk_launched("moe combine", err);
}
