/*
 * family.cu: the small kernels that model families add to Llama's step
 * (common/arch.h): q/k/v biases and per-head q/k RMSNorm before RoPE (Qwen,
 * Gemma 3), the GELU gate (Gemma), a block's post-norm added into the
 * residual (Gemma's sandwich norms), and row scaling and soft-capping (the
 * embedding scale, the final logit cap).
 *
 * Each follows the CPU backend's arithmetic (runtime/cpu/cpu_fwd.c) operation
 * for operation: RMSNorm's sum of squares in double, then one float scale
 * and a product by the weight; GELU with tanh, its input and result rounded
 * to fp16 as llama.cpp's CPU does; the soft-cap as tanh(x * (1 / c)) * c.
 * Owns nothing; launches on the context's stream like every kernel.
 */
#include "kernels/internal.cuh"

/* A warp's double sum. */
__device__ __forceinline__ double fam_warp_sum(double v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* One warp per (token, head) of q and k, then of v for its bias: adds the
 * bias, then (q and k heads with a norm weight) x * (1 / sqrt(mean(x^2) +
 * eps)) * w over the head's hd elements. Grid (T, n_head + 2 n_head_kv). */
__global__ void k_qkv_prep(float *q, int64_t ldq, float *k, float *v, int64_t ldkv, int n_head,
                           int n_head_kv, int hd, const float *qb, const float *kb,
                           const float *vb, const float *qn, const float *kn, float eps)
{
    pdl_start();
    const int t = blockIdx.x, h = blockIdx.y, lane = threadIdx.x;
    const int which = h < n_head ? 0 : h < n_head + n_head_kv ? 1 : 2;
    const int hh = which == 0 ? h : which == 1 ? h - n_head : h - n_head - n_head_kv;
    float *x = which == 0 ? q + (int64_t)t * ldq : (which == 1 ? k : v) + (int64_t)t * ldkv;
    const float *b = which == 0 ? qb : which == 1 ? kb : vb;
    const float *w = which == 0 ? qn : which == 1 ? kn : nullptr;
    x += (int64_t)hh * hd;
    if (b)
        for (int d = lane; d < hd; d += 32)
            x[d] = __fadd_rn(x[d], b[(int64_t)hh * hd + d]);
    if (!w)
        return;
    __syncwarp();
    double sum = 0.0;
    for (int d = lane; d < hd; d += 32)
        sum += (double)__fmul_rn(x[d], x[d]);
    sum = fam_warp_sum(sum);
    const float scale = __fdiv_rn(1.0f, sqrtf(__fadd_rn((float)(sum / (double)hd), eps)));
    __syncwarp();
    for (int d = lane; d < hd; d += 32)
        x[d] = __fmul_rn(__fmul_rn(x[d], scale), w[d]);
}

extern "C" int mfk_qkv_prep(struct mfk_ctx *c, int32_t T, float *q, int64_t ldq, float *k,
                            float *v, int64_t ldkv, int32_t n_head, int32_t n_head_kv,
                            int32_t head_dim, const float *qb, const float *kb, const float *vb,
                            const float *qn, const float *kn, float eps, struct mf_err *err)
{
    if (T <= 0)
        return 0;
    if (n_head <= 0 || n_head_kv <= 0 || head_dim <= 0)
        return mf_err_set(err, MF_EINVAL, "CUDA q/k/v prep: %d / %d heads of %d", n_head,
                          n_head_kv, head_dim);
    mfk_go(mfk_queue(c), dim3((unsigned)T, (unsigned)(n_head + 2 * n_head_kv)), 32, 0, k_qkv_prep,
           q, ldq, k, v, ldkv, (int)n_head, (int)n_head_kv, (int)head_dim, qb, kb, vb, qn, kn,
           eps);
    return mfk_launched("q/k/v prep", err);
}

/* GELU (tanh) of x as llama.cpp's CPU computes it: 0 at or below -10, x at
 * or above 10, else the fp16-rounded input's GELU rounded to fp16. */
__device__ __forceinline__ float fam_gelu(float x)
{
    if (x <= -10.0f)
        return 0.0f;
    if (x >= 10.0f)
        return x;
    const float h = __half2float(__float2half_rn(x));
    const float a = __fmul_rn(__fmul_rn(0.044715f, h), h);
    const float in = __fmul_rn(__fmul_rn(0.79788456080286535587989211986876f, h),
                               __fadd_rn(1.0f, a));
    const float y = __fmul_rn(__fmul_rn(0.5f, h), __fadd_rn(1.0f, tanhf(in)));
    return __half2float(__float2half_rn(y));
}

__global__ void k_geglu(float *g, const float *u, int64_t ld, int64_t n)
{
    pdl_start();
    float *gr = g + (int64_t)blockIdx.y * ld;
    const float *ur = u + (int64_t)blockIdx.y * ld;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        gr[i] = __fmul_rn(fam_gelu(gr[i]), ur[i]);
}

extern "C" int mfk_geglu(struct mfk_ctx *c, float *g, const float *u, int64_t ld, int32_t rows,
                         int64_t n, struct mf_err *err)
{
    if (rows <= 0 || n <= 0)
        return 0;
    unsigned bx = (unsigned)((n + 255) / 256);
    mfk_go(mfk_queue(c), dim3(bx > 64 ? 64 : bx, (unsigned)rows), 256, 0, k_geglu, g, u, ld, n);
    return mfk_launched("geglu", err);
}

/* A block per row: x[r] = rmsnorm(t[r]) * g + x[r] (the post-norm's output
 * added to the residual, in the CPU's order: o + y). */
__global__ void k_add_norm(float *x, int64_t ldx, const float *t, int64_t ldt, const float *g,
                           int64_t n, float eps)
{
    pdl_start();
    __shared__ double part[32];
    __shared__ float sc;
    const float *tr = t + (int64_t)blockIdx.x * ldt;
    float *xr = x + (int64_t)blockIdx.x * ldx;
    double sum = 0.0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
        sum += (double)__fmul_rn(tr[i], tr[i]);
    sum = fam_warp_sum(sum);
    if ((threadIdx.x & 31) == 0)
        part[threadIdx.x >> 5] = sum;
    __syncthreads();
    if (threadIdx.x == 0) {
        double s = 0.0;
        for (int w = 0; w < (int)(blockDim.x >> 5); w++)
            s += part[w];
        sc = __fdiv_rn(1.0f, sqrtf(__fadd_rn((float)(s / (double)n), eps)));
    }
    __syncthreads();
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
        xr[i] = __fadd_rn(__fmul_rn(__fmul_rn(tr[i], sc), g[i]), xr[i]);
}

extern "C" int mfk_add_norm(struct mfk_ctx *c, float *x, int64_t ldx, const float *t,
                            int64_t ldt, const float *g, int32_t rows, int64_t n, float eps,
                            struct mf_err *err)
{
    if (rows <= 0)
        return 0;
    mfk_go(mfk_queue(c), dim3((unsigned)rows), 256, 0, k_add_norm, x, ldx, t, ldt, g, n, eps);
    return mfk_launched("post-norm", err);
}

/* x = x * s (cap == 0), or tanh(x * (1 / cap)) * cap, over rows of n. */
__global__ void k_scale_cap(float *x, int64_t ld, int64_t n, float s, float cap)
{
    pdl_start();
    float *r = x + (int64_t)blockIdx.y * ld;
    const float inv = cap > 0.0f ? __fdiv_rn(1.0f, cap) : 0.0f;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        r[i] = cap > 0.0f ? __fmul_rn(tanhf(__fmul_rn(r[i], inv)), cap) : __fmul_rn(r[i], s);
}

extern "C" int mfk_scale_rows(struct mfk_ctx *c, float *x, int64_t ld, int32_t rows, int64_t n,
                              float s, float cap, struct mf_err *err)
{
    if (rows <= 0 || n <= 0)
        return 0;
    unsigned bx = (unsigned)((n + 255) / 256);
    mfk_go(mfk_queue(c), dim3(bx > 128 ? 128 : bx, (unsigned)rows), 256, 0, k_scale_cap, x, ld, n,
           s, cap);
    return mfk_launched(cap > 0.0f ? "soft-cap" : "scale", err);
}
