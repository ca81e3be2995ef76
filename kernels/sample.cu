/*
 * sample.cu: the host sampler's chain (runtime/engine/sampler.h) run where the
 * logits are, so a step sends one id per sequence back instead of its
 * logits (33 MB for 64 sequences of Llama 3's vocabulary).
 *
 * One block of 1024 threads per row; the row is read a few times from L2.
 *  - The adjust list (biases, penalties) is applied in place, one entry a
 *    thread, and undone before the block ends.
 *  - Greedy is an argmax.
 *  - With top_k or top_p the candidates (the top_k, or the MFK_SAMPLE_CAND
 *    likeliest for top_p alone) are found by a radix select over the logits'
 *    order-preserving bit patterns (four 8-bit passes; shared-memory
 *    histograms with one atomic per distinct digit a warp), ties taken by
 *    lowest id as in the host's order, then compacted into shared memory and
 *    sorted (bitonic). top_p, min_p, temperature and the draw then run over
 *    the sorted list with the host's float and double operations, the sums
 *    on one thread in the host's order.
 *  - Otherwise the draw walks the row in id order: each warp sums its slice,
 *    and the slice where u * z falls is scanned.
 * Results match sampler_sample's for equal logits up to the last bits of
 * expf/logf and of double sums taken in another order. A row with a grammar
 * mask (mfk_sample_masked) has its banned tokens set to -inf first, as the
 * host's candidate load does.
 */
#include <climits>

#include "kernels/internal.cuh"

#define ST 1024      /* threads a row */
#define SW (ST / 32) /* warps a row */
#define FULL 0xffffffffu

struct sample_smem {
    unsigned long long key[MFK_SAMPLE_CAND]; /* sort area; then logits and ids */
    float ex[MFK_SAMPLE_CAND];               /* per-candidate exponentials */
    int hist[256];
    double dred[SW];
    float fred[SW];
    long long lred[SW];
    int ired[SW];
    int n_sel;               /* compaction cursor */
    int sel_digit, sel_rest; /* radix select's choice */
    int sel_warp;            /* the warp whose slice holds the answer */
    long long sel_id;
    int nc;      /* candidates left */
    double dacc; /* mass before sel_warp's slice */
};

/* Larger logit, larger key; -0 and +0 share one. */
__device__ __forceinline__ uint32_t okey(float l)
{
    const uint32_t u = __float_as_uint(l + 0.0f);
    return (u & 0x80000000u) ? ~u : u | 0x80000000u;
}

__device__ __forceinline__ float unkey(uint32_t k)
{
    return __uint_as_float((k & 0x80000000u) ? k & 0x7fffffffu : ~k);
}

/* sampler.c's bias and penalty, operation for operation (no contraction). */
__device__ __forceinline__ float adjusted(const struct mfk_draw &d, const struct mfk_adjust &a,
                                          float l)
{
    if (l != l)
        l = -INFINITY;
    l = __fadd_rn(l, a.bias);
    if (a.count > 0) {
        l = l > 0.0f ? __fdiv_rn(l, d.repeat_penalty) : __fmul_rn(l, d.repeat_penalty);
        l = __fsub_rn(__fsub_rn(l, __fmul_rn((float)a.count, d.frequency_penalty)),
                      d.presence_penalty);
    }
    return l;
}

/* ---- block reductions (every thread gets the result; fixed order) ---- */

__device__ __forceinline__ float block_max(float v, struct sample_smem *s)
{
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(FULL, v, o));
    if ((threadIdx.x & 31) == 0)
        s->fred[threadIdx.x >> 5] = v;
    __syncthreads();
    v = s->fred[0];
    for (int w = 1; w < SW; w++)
        v = fmaxf(v, s->fred[w]);
    __syncthreads();
    return v;
}

/* The block's sum of v, warp sums in red[] (ired or dred), added in warp
 * order so every thread, and every run, gets the same value. */
template <typename T> __device__ __forceinline__ T block_sum(T v, T *red)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(FULL, v, o);
    if ((threadIdx.x & 31) == 0)
        red[threadIdx.x >> 5] = v;
    __syncthreads();
    v = 0;
    for (int w = 0; w < SW; w++)
        v += red[w];
    __syncthreads();
    return v;
}

/* ---- greedy ---- */

__device__ __forceinline__ bool beats(float v, long long i, float bv, long long bi)
{
    return v > -INFINITY && (bi < 0 || v > bv || (v == bv && i < bi));
}

/* The largest valid logit's id, the lowest on ties; -1: none. */
__device__ __forceinline__ int32_t row_argmax(const float *x, int64_t n, struct sample_smem *s)
{
    float bv = -INFINITY;
    long long bi = -1;
    for (int64_t i = threadIdx.x; i < n; i += ST)
        if (beats(x[i], i, bv, bi))
            bv = x[i], bi = i;
    for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(FULL, bv, o);
        const long long oi = __shfl_xor_sync(FULL, bi, o);
        if (oi >= 0 && beats(ov, oi, bv, bi))
            bv = ov, bi = oi;
    }
    if ((threadIdx.x & 31) == 0) {
        s->fred[threadIdx.x >> 5] = bv;
        s->lred[threadIdx.x >> 5] = bi;
    }
    __syncthreads();
    bv = -INFINITY, bi = -1;
    for (int w = 0; w < SW; w++)
        if (s->lred[w] >= 0 && beats(s->fred[w], s->lred[w], bv, bi))
            bv = s->fred[w], bi = s->lred[w];
    __syncthreads();
    return (int32_t)bi;
}

/* ---- top-k by radix select ---- */

/* The key of the k-th largest valid logit (1 <= k <= valid count); *rest:
 * how many of the logits equal to it the k largest include. */
__device__ __forceinline__ uint32_t select_kth(const float *x, int64_t n, int k, int *rest,
                                               struct sample_smem *s)
{
    uint32_t prefix = 0, mask = 0;
    const int lane = threadIdx.x & 31;
    int r = k;
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int i = threadIdx.x; i < 256; i += ST)
            s->hist[i] = 0;
        __syncthreads();
        for (int64_t b = 0; b < n; b += ST) {
            const int64_t i = b + threadIdx.x;
            const float l = i < n ? x[i] : -INFINITY;
            const uint32_t key = okey(l);
            const bool ok = l > -INFINITY && (key & mask) == prefix;
            const unsigned act = __ballot_sync(FULL, ok);
            if (ok) {
                const unsigned dg = (key >> shift) & 255u;
                const unsigned peers = __match_any_sync(act, dg);
                if (lane == __ffs(peers) - 1)
                    atomicAdd(&s->hist[dg], __popc(peers));
            }
        }
        __syncthreads();
        if (threadIdx.x < 32) { /* lane l: buckets 255 - 8l down to 248 - 8l */
            int c[8], tot = 0;
            for (int j = 0; j < 8; j++)
                tot += c[j] = s->hist[255 - 8 * lane - j];
            int incl = tot;
            for (int o = 1; o < 32; o <<= 1) {
                const int t = __shfl_up_sync(FULL, incl, o);
                if (lane >= o)
                    incl += t;
            }
            const int before = incl - tot;
            if (before < r && r <= incl) {
                int acc = before, j = 0;
                while (acc + c[j] < r)
                    acc += c[j++];
                s->sel_digit = 255 - 8 * lane - j;
                s->sel_rest = r - acc;
            }
        }
        __syncthreads();
        prefix |= (uint32_t)s->sel_digit << shift;
        mask |= 255u << shift;
        r = s->sel_rest;
    }
    *rest = r;
    return prefix;
}

/* Warp w's slice of the row for id-ordered walks: whole 32-element chunks. */
__device__ __forceinline__ void slice(int64_t n, int w, int64_t *lo, int64_t *hi)
{
    const int64_t per = ((n + SW - 1) / SW + 31) & ~(int64_t)31;
    *lo = w * per;
    *hi = *lo + per < n ? *lo + per : n;
}

/* The id of the r-th (from 1) logit with key t, in id order. */
__device__ __forceinline__ long long nth_tie(const float *x, int64_t n, uint32_t t, int r,
                                             struct sample_smem *s)
{
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int64_t lo, hi;
    slice(n, w, &lo, &hi);
    int cnt = 0;
    for (int64_t b = lo; b < hi; b += 32)
        cnt += __popc(__ballot_sync(FULL, b + lane < hi && okey(x[b + lane]) == t));
    if (lane == 0)
        s->ired[w] = cnt;
    __syncthreads();
    if (threadIdx.x == 0) {
        int acc = 0, ww = 0;
        while (ww < SW - 1 && acc + s->ired[ww] < r)
            acc += s->ired[ww++];
        s->sel_warp = ww;
        s->sel_rest = r - acc;
    }
    __syncthreads();
    if (w == s->sel_warp) {
        int rr = s->sel_rest;
        for (int64_t b = lo; b < hi; b += 32) {
            unsigned bal = __ballot_sync(FULL, b + lane < hi && okey(x[b + lane]) == t);
            if (rr <= __popc(bal)) {
                while (--rr > 0)
                    bal &= bal - 1;
                if (lane == 0)
                    s->sel_id = b + __ffs(bal) - 1;
                break;
            }
            rr -= __popc(bal);
        }
    }
    __syncthreads();
    return s->sel_id;
}

/* The k largest valid logits into s->key as (key, ~id), unsorted. */
__device__ __forceinline__ void compact(const float *x, int64_t n, uint32_t t, long long lim,
                                        struct sample_smem *s)
{
    const int lane = threadIdx.x & 31;
    if (threadIdx.x == 0)
        s->n_sel = 0;
    __syncthreads();
    for (int64_t b = 0; b < n; b += ST) {
        const int64_t i = b + threadIdx.x;
        const float l = i < n ? x[i] : -INFINITY;
        const uint32_t key = okey(l);
        const bool ok = l > -INFINITY && (key > t || (key == t && i <= lim));
        const unsigned bal = __ballot_sync(FULL, ok);
        if (!bal)
            continue;
        int base = 0;
        if (lane == __ffs(bal) - 1)
            base = atomicAdd(&s->n_sel, __popc(bal));
        base = __shfl_sync(FULL, base, __ffs(bal) - 1);
        if (ok)
            s->key[base + __popc(bal & ((1u << lane) - 1))] =
                ((unsigned long long)key << 32) | (uint32_t) ~(uint32_t)i;
    }
    __syncthreads();
}

/* s->key[0..cnt) into descending order: larger logit first, then lower id. */
__device__ __forceinline__ void sort_desc(int cnt, struct sample_smem *s)
{
    int p = 1;
    while (p < cnt)
        p <<= 1;
    for (int i = cnt + threadIdx.x; i < p; i += ST)
        s->key[i] = 0; /* below every valid key */
    __syncthreads();
    for (int k = 2; k <= p; k <<= 1)
        for (int j = k >> 1; j > 0; j >>= 1) {
            for (int i = threadIdx.x; i < p; i += ST) {
                const int o = i ^ j;
                if (o > i) {
                    const unsigned long long a = s->key[i], b = s->key[o];
                    if ((i & k) == 0 ? a < b : a > b) {
                        s->key[i] = b;
                        s->key[o] = a;
                    }
                }
            }
            __syncthreads();
        }
}

/* ---- the chain ---- */

/* Inverse-CDF draw in id order over the valid logits at or above lo, at
 * temperature d.temperature, the largest being m. */
__device__ __forceinline__ int32_t draw_in_id_order(const float *x, int64_t n,
                                                    const struct mfk_draw &d, float m, float lo,
                                                    struct sample_smem *s)
{
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const float mt = __fdiv_rn(m, d.temperature);
    int64_t b0, hi;
    slice(n, w, &b0, &hi);
    double part = 0;
    for (int64_t i = b0 + lane; i < hi; i += 32) {
        const float l = x[i];
        if (l > -INFINITY && l >= lo)
            part += (double)expf(__fsub_rn(__fdiv_rn(l, d.temperature), mt));
    }
    for (int o = 16; o > 0; o >>= 1)
        part += __shfl_xor_sync(FULL, part, o);
    if (lane == 0)
        s->dred[w] = part;
    __syncthreads();
    if (threadIdx.x == 0) {
        double z = 0, acc = 0;
        int ww = -1;
        for (int v = 0; v < SW; v++)
            z += s->dred[v];
        const double t = d.u * z;
        for (int v = 0; v < SW; v++) {
            if (s->dred[v] > 0 && t < acc + s->dred[v]) {
                ww = v;
                break;
            }
            acc += s->dred[v];
        }
        if (ww < 0) { /* u * z rounded up to z: the last candidate, as the host */
            ww = SW - 1;
            while (ww > 0 && !(s->dred[ww] > 0))
                ww--;
            acc = -INFINITY; /* never hit: the walk keeps the last */
        }
        s->sel_warp = ww;
        s->dacc = acc;
        s->dred[0] = t; /* read back below: the target */
    }
    __syncthreads();
    const double t = s->dred[0];
    if (w == s->sel_warp) {
        double run = s->dacc;
        long long last = -1, hit = -1;
        for (int64_t b = b0; b < hi && hit < 0; b += 32) {
            const int64_t i = b + lane;
            const float l = i < hi ? x[i] : -INFINITY;
            const bool c = l > -INFINITY && l >= lo;
            double incl = c ? (double)expf(__fsub_rn(__fdiv_rn(l, d.temperature), mt)) : 0.0;
            for (int o = 1; o < 32; o <<= 1) {
                const double v = __shfl_up_sync(FULL, incl, o);
                if (lane >= o)
                    incl += v;
            }
            const unsigned cb = __ballot_sync(FULL, c);
            if (cb)
                last = b + 31 - __clz(cb);
            const unsigned hb = __ballot_sync(FULL, t < run + incl);
            if (hb)
                hit = b + __ffs(hb) - 1;
            run += __shfl_sync(FULL, incl, 31);
        }
        if (lane == 0)
            s->sel_id = hit >= 0 ? hit : last;
    }
    __syncthreads();
    return (int32_t)s->sel_id;
}

/* top_k / top_p over the sorted candidates, then min_p, temperature and the
 * draw, as sampler.c's run_chain and draw do on its sorted array. k: top_k
 * in force (0: none); nv: valid logits; m: the largest; zall: sum of
 * exp(l - m) over all valid logits (top_p without top_k). */
__device__ __forceinline__ int32_t draw_sorted(const float *x, int64_t n, const struct mfk_draw &d,
                                               int k, int nv, float m, double zall,
                                               struct sample_smem *s)
{
    const int ksel = k ? k : (nv < MFK_SAMPLE_CAND ? nv : MFK_SAMPLE_CAND);
    int rest;
    const uint32_t t = select_kth(x, n, ksel, &rest, s);
    const int ties = s->hist[s->sel_digit]; /* logits equal to the k-th, all of them */
    const long long lim = rest == ties ? LLONG_MAX : nth_tie(x, n, t, rest, s);
    compact(x, n, t, lim, s);
    sort_desc(ksel, s);
    /* unpack in place: logits over the first half of key[], ids the second */
    float *lg = reinterpret_cast<float *>(s->key);
    int32_t *id = reinterpret_cast<int32_t *>(lg + MFK_SAMPLE_CAND);
    unsigned long long mine[MFK_SAMPLE_CAND / ST];
    for (int j = 0; j < MFK_SAMPLE_CAND / ST; j++) {
        const int i = threadIdx.x + j * ST;
        mine[j] = i < ksel ? s->key[i] : 0;
    }
    __syncthreads();
    for (int j = 0; j < MFK_SAMPLE_CAND / ST; j++) {
        const int i = threadIdx.x + j * ST;
        if (i < ksel) {
            lg[i] = unkey((uint32_t)(mine[j] >> 32));
            id[i] = (int32_t) ~(uint32_t)mine[j];
        }
    }
    if (threadIdx.x == 0)
        s->nc = ksel;
    __syncthreads();
    int nc = ksel;
    if (d.top_p < 1.0f && nc >= 2) {
        for (int i = threadIdx.x; i < nc; i += ST)
            s->ex[i] = expf(__fsub_rn(lg[i], lg[0]));
        __syncthreads();
        if (threadIdx.x == 0) {
            double z = zall, cum = 0;
            int keep = -1;
            if (k) {
                z = 0;
                for (int i = 0; i < nc; i++)
                    z += s->ex[i];
            }
            for (int i = 0; i < nc && keep < 0; i++) {
                cum += (double)s->ex[i] / z;
                if (cum >= (double)d.top_p)
                    keep = i + 1;
            }
            /* not reached among the sorted few while more remain: host's */
            s->nc = keep > 0 ? keep : (!k && nv > nc ? -1 : nc);
        }
        __syncthreads();
        nc = s->nc;
        if (nc < 0)
            return -1;
    }
    if (d.min_p > 0.0f && nc >= 2) {
        const float lo = __fadd_rn(lg[0], logf(d.min_p));
        int c = 0;
        for (int i = threadIdx.x; i < nc; i += ST)
            c += lg[i] >= lo;
        nc = block_sum(c, s->ired);
    }
    const float mt = __fdiv_rn(lg[0], d.temperature);
    for (int i = threadIdx.x; i < nc; i += ST)
        s->ex[i] = expf(__fsub_rn(__fdiv_rn(lg[i], d.temperature), mt));
    __syncthreads();
    if (threadIdx.x == 0) {
        double z = 0, cum = 0;
        for (int i = 0; i < nc; i++)
            z += s->ex[i];
        const double u = d.u * z;
        int pick = nc - 1;
        for (int i = 0; i < nc; i++) {
            cum += s->ex[i];
            if (u < cum) {
                pick = i;
                break;
            }
        }
        s->sel_id = id[pick];
    }
    __syncthreads();
    return (int32_t)s->sel_id;
}

__device__ __forceinline__ int32_t draw_row(const float *x, int64_t n, const struct mfk_draw &d,
                                            struct sample_smem *s)
{
    if (!(d.temperature > 0.0f))
        return row_argmax(x, n, s);
    float m = -INFINITY;
    int nv = 0;
    for (int64_t i = threadIdx.x; i < n; i += ST)
        if (x[i] > -INFINITY) {
            nv++;
            m = fmaxf(m, x[i]);
        }
    m = block_max(m, s);
    nv = block_sum(nv, s->ired);
    if (nv == 0)
        return -1; /* the host reports it */
    const int k = d.top_k > 0 && d.top_k < nv ? d.top_k : 0;
    if (k > MFK_SAMPLE_CAND)
        return -1;
    if (!k && !(d.top_p < 1.0f)) {
        const float lo = d.min_p > 0.0f && nv >= 2 ? __fadd_rn(m, logf(d.min_p)) : -INFINITY;
        return draw_in_id_order(x, n, d, m, lo, s);
    }
    double zall = 0;
    if (!k) {
        for (int64_t i = threadIdx.x; i < n; i += ST)
            if (x[i] > -INFINITY)
                zall += (double)expf(__fsub_rn(x[i], m));
        zall = block_sum(zall, s->dred);
    }
    return draw_sorted(x, n, d, k, nv, m, zall, s);
}

__global__ void __launch_bounds__(ST, 1)
    k_sample(float *x0, int64_t ldx, int64_t n, const struct mfk_draw *dd,
             const struct mfk_adjust *aa, const uint32_t *masks, int32_t *out)
{
    pdl_start();
    extern __shared__ __align__(16) unsigned char smem_raw[];
    struct sample_smem *s = reinterpret_cast<struct sample_smem *>(smem_raw);
    float *x = x0 + (int64_t)blockIdx.x * ldx;
    const struct mfk_draw d = dd[blockIdx.x];
    if (masks && d.mask_off >= 0) { /* the grammar's bans, a word of 32 tokens a thread */
        const uint32_t *m = masks + d.mask_off;
        for (int64_t w = threadIdx.x; w * 32 < n; w += ST) {
            const uint32_t bits = m[w];
            if (bits == FULL)
                continue;
            for (int b = 0; b < 32 && w * 32 + b < n; b++)
                if (!((bits >> b) & 1u))
                    x[w * 32 + b] = -INFINITY;
        }
        __syncthreads();
    }
    int64_t tok = -1;
    float orig = 0.0f;
    if ((int)threadIdx.x < d.n_adj) {
        const struct mfk_adjust a = aa[d.adj_off + threadIdx.x];
        if (a.token >= 0 && a.token < n) {
            tok = a.token;
            orig = x[tok];
            x[tok] = adjusted(d, a, orig);
        }
    }
    __syncthreads();
    const int32_t r = draw_row(x, n, d, s);
    __syncthreads();
    if (tok >= 0)
        x[tok] = orig; /* the logits as they were, for a row given back */
    if (threadIdx.x == 0)
        out[blockIdx.x] = r;
}

extern "C" int mfk_sample(struct mfk_ctx *c, float *x, int64_t ldx, int32_t rows, int64_t n,
                          const struct mfk_draw *d, const struct mfk_adjust *a, int32_t *out,
                          struct mf_err *err)
{
    return mfk_sample_masked(c, x, ldx, rows, n, d, a, NULL, out, err);
}

extern "C" int mfk_sample_masked(struct mfk_ctx *c, float *x, int64_t ldx, int32_t rows,
                                 int64_t n, const struct mfk_draw *d, const struct mfk_adjust *a,
                                 const uint32_t *masks, int32_t *out, struct mf_err *err)
{
    const int sm = (int)sizeof(struct sample_smem);
    if (rows <= 0)
        return 0;
    if (n <= 0 || n > INT32_MAX || ldx < n)
        return mf_err_set(err, MF_EINVAL, "CUDA sample: rows of %lld logits (stride %lld)",
                          (long long)n, (long long)ldx);
    cudaError_t e = cudaFuncSetAttribute(k_sample, cudaFuncAttributeMaxDynamicSharedMemorySize, sm);
    if (e != cudaSuccess)
        return mf_err_set(err, MF_EIO, "CUDA sample: %d bytes of shared memory refused: %s", sm,
                          cudaGetErrorString(e));
    mfk_go(mfk_queue(c), rows, ST, sm, k_sample, x, ldx, n, d, a, masks, out);
    return mfk_launched("sample", err);
}
