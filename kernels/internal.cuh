/*
 * internal.cuh: what the kernel files share and kernels.h does not export:
 * the context's stream, the launch check, and the paged KV arena's layout.
 */
#ifndef MFC_KERNELS_INTERNAL_CUH
#define MFC_KERNELS_INTERNAL_CUH

#include <cstddef>
#include <cstdint>

#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include "kernels/kernels.h"

#define KVB 16 /* KV_BLOCK_TOKENS (runtime/model/batch.h) */

cudaStream_t mfk_stream(struct mfk_ctx *c); /* mem.cu */

/* Where a launch goes: the context's stream, whether kernels may be
 * launched programmatically dependent (PDL, sm_90: mfk_ctx_pdl), and the
 * device's multiprocessors (grids sized to stay resident). */
struct mfk_q {
    cudaStream_t st;
    int pdl;
    int sms;
};
struct mfk_q mfk_queue(struct mfk_ctx *c); /* mem.cu */

/* Launches fn<<<grid, block, smem>>>(args) on q. With q.pdl the kernel may
 * start while its predecessor on the stream is still running (its blocks
 * wait in pdl_wait), which hides the launch gap between the ~400 small
 * kernels of a decode step. mfk_go_cluster: in clusters of `cluster` blocks
 * (thread-block clusters, sm_90; the grid a multiple of it). Errors surface
 * in mfk_launched. */
template <typename... P, typename... A>
static inline void mfk_go_cluster(const mfk_q &q, dim3 grid, dim3 block, size_t smem, dim3 cluster,
                                  void (*fn)(P...), A... args)
{
    cudaLaunchAttribute at[2];
    int na = 0;
    if (q.pdl) {
        at[na].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        at[na++].val.programmaticStreamSerializationAllowed = 1;
    }
    if (cluster.x * cluster.y * cluster.z > 1) { /* blocks of a cluster share their smem */
        at[na].id = cudaLaunchAttributeClusterDimension;
        at[na].val.clusterDim.x = cluster.x, at[na].val.clusterDim.y = cluster.y;
        at[na++].val.clusterDim.z = cluster.z;
    }
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid, cfg.blockDim = block, cfg.dynamicSmemBytes = smem, cfg.stream = q.st;
    cfg.attrs = at, cfg.numAttrs = na;
    cudaLaunchKernelEx(&cfg, fn, args...);
}

template <typename... P, typename... A>
static inline void mfk_go(const mfk_q &q, dim3 grid, dim3 block, size_t smem, void (*fn)(P...),
                          A... args)
{
    mfk_go_cluster(q, grid, block, smem, dim3(1, 1, 1), fn, args...);
}

/* Every kernel calls pdl_wait() before its first access to memory that
 * another kernel writes or reads (the wait returns once the predecessor
 * has finished and its writes are visible; chained, that orders the whole
 * stream as before). Only reads of weights, which no kernel writes, may
 * come before it. pdl_launch() then lets the successor's blocks be
 * scheduled. Both do nothing in a plain launch. */
__device__ __forceinline__ void pdl_wait()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

__device__ __forceinline__ void pdl_launch()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

/* The start of every kernel that reads nothing before it waits. */
__device__ __forceinline__ void pdl_start()
{
    pdl_wait();
    pdl_launch();
}
/* *p = n bytes of device scratch owned by c, valid for work queued until the
 * next call (one user at a time, in stream order). */
int mfk_scratch(struct mfk_ctx *c, size_t n, void **p, struct mf_err *err);

/* Q4_K weights times nt tokens (up to MFK_MMQ_TOKENS a pass over the
 * weights, in tiles past that) of input quantized by k_quant_act (xq, its
 * scales xd and scaled sums xs) on the integer tensor cores (mmq.cu);
 * launches only. */
#define MMQ_NT (MFK_MMQ_TOKENS / 8) /* token tiles of 8 a block takes, at most */
void mfk_mmq_q4k(const mfk_q &q, const struct mfk_weight *w, const int8_t *xq, const float *xd,
                 const float *xs, int nt, float *y, int64_t ldy, int add);
/* Raises the shared memory of mfk_mmq_q4k's tile kernel (more than
 * MFK_MMQ_TOKENS tokens) past the default, once a context; MF_EIO when the
 * device refuses. */
int mfk_mmq_ready(struct mfk_ctx *c, struct mf_err *err);
int *mfk_ctx_mmq_smem(struct mfk_ctx *c); /* mem.cu: 1 once raised */

/* qgemm.cu's state in a context: the multiprocessors, the token limit
 * (mfk_ctx_qgemm), whether Q4_K is dequantized exactly (mfk_ctx_qgemm_exact),
 * per kernel instance the largest cluster it runs in (0 until its first
 * launch raised its shared memory), and the driver's tensor-map encoder
 * (cuTensorMapEncodeTiled, NULL until the first Q4_K launch asks for it).
 * Stream-K (mfk_ctx_qgemm_sk): off, on or every product (0, 1, 2), per
 * k_qgemm_sk instance whether its shared memory was raised, the partial
 * tiles (two a block of the largest grid, 2 x 2 sms, QG_SK_TILE_FLOATS
 * each) and a counter a tile (MFK_QGEMM_SK_TILES; zero between launches:
 * the last block of a tile puts it back). */
struct qg_state {
    int sms;
    int max_tokens;
    int exact;
    int cluster[8]; /* per k_qgemm instance (qg_launch's k) */
    void *encode;
    int sk;
    int sk_ready[8]; /* per k_qgemm_sk instance */
    float *sk_part;
    unsigned *sk_count;
};
#define QG_SK_TILE_FLOATS (128 * 64) /* a partial tile, at most: Q4_K's 128 rows x 64 tokens */
struct qg_state *mfk_ctx_qgemm_state(struct mfk_ctx *c); /* mem.cu */
int mfk_ctx_att_cluster_on(const struct mfk_ctx *c);     /* mem.cu: mfk_ctx_att_cluster's */

/* Element i of a row into its 8-bit form, a lane per element of a 32-element
 * block (k_quant_act, SwiGLU): d = max|x| / 127, q = rint(x / d), s = d x
 * the block's sum of q. */
__device__ __forceinline__ void q8_store1(float v, int64_t i, int8_t *q, float *d, float *s)
{
    float amax = fabsf(v);
    for (int o = 16; o > 0; o >>= 1)
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const float dd = __fdiv_rn(amax, 127.0f);
    const int a = amax > 0.0f ? (int)rintf(__fdiv_rn(v, dd)) : 0;
    int qs = a;
    for (int o = 16; o > 0; o >>= 1)
        qs += __shfl_xor_sync(0xffffffffu, qs, o);
    q[i] = (int8_t)a;
    if ((i & 31) == 0)
        d[i >> 5] = dd, s[i >> 5] = dd * (float)qs;
}

/* 0 when q8 is NULL or a usable 8-bit copy of rows of n elements, else
 * MF_EINVAL naming `what`. */
static inline int q8_check(const struct mfk_q8 *q8, int64_t n, const char *what, struct mf_err *err)
{
    if (q8 && (n % 256 || !q8->q || !q8->d || !q8->s || ((uintptr_t)q8->q & 15) ||
               ((uintptr_t)q8->d & 7) || ((uintptr_t)q8->s & 7)))
        return mf_err_set(err, MF_EINVAL,
                          "CUDA %s: an 8-bit copy needs rows of a multiple of 256 and aligned "
                          "buffers (got %lld elements)",
                          what, (long long)n);
    return 0;
}

/* 0 when the last launch was accepted, else MF_EIO naming `what`. */
static inline int mfk_launched(const char *what, struct mf_err *err)
{
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess)
        return 0;
    return mf_err_set(err, MF_EIO, "CUDA kernel %s failed to launch: %s", what,
                      cudaGetErrorString(e));
}

/* Raises fn's dynamic shared memory limit to smem bytes where it is over
 * the default 48 KiB; MF_EIO naming `what` when the device refuses. */
static inline int mfk_raise_smem(const void *fn, size_t smem, const char *what,
                                 struct mf_err *err)
{
    if (smem <= 48 * 1024)
        return 0;
    cudaError_t e =
        cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e == cudaSuccess)
        return 0;
    cudaGetLastError();
    return mf_err_set(err, MF_EIO, "CUDA %s: cannot raise shared memory to %zu bytes: %s", what,
                      smem, cudaGetErrorString(e));
}

/* 16 bytes global -> shared without registers (cp.async, to be committed
 * and waited for by the caller); src_bytes 0 fills zeros. */
__device__ __forceinline__ void cp_async16(void *dst, const void *src, int src_bytes)
{
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src),
                 "r"(src_bytes));
}

/* 4 bytes global -> shared (cp.async.ca, both 4-byte aligned); src_bytes 0
 * fills zeros. */
__device__ __forceinline__ void cp_async4(void *dst, const void *src, int src_bytes)
{
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(d), "l"(src),
                 "r"(src_bytes));
}

/* The copies issued since the last commit become one group ... */
__device__ __forceinline__ void cp_commit()
{
    asm volatile("cp.async.commit_group;\n" ::);
}

/* ... and this waits until at most N groups are still in flight. */
template <int N> __device__ __forceinline__ void cp_wait()
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

/* Hopper's bulk copies (the copy engine without a tensor map: one
 * instruction moves a contiguous run of bytes, 16-byte aligned and a
 * multiple of 16 long) and the shared-memory barriers that count their
 * bytes. A barrier of `count` arrivals completes a phase when all have
 * arrived and every byte they announced has landed. */
__device__ __forceinline__ void mbar_init(uint64_t *bar, int count)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    const unsigned b = (unsigned)__cvta_generic_to_shared(bar);
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(b), "r"(count) : "memory");
#endif
}

/* The barriers' initialization made visible to the copy engine; then a
 * __syncthreads before any thread uses them. */
__device__ __forceinline__ void mbar_init_fence()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
}

/* This thread's arrival, announcing `bytes` that copies will bring. */
__device__ __forceinline__ void mbar_arrive_tx(uint64_t *bar, uint32_t bytes)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    const unsigned b = (unsigned)__cvta_generic_to_shared(bar);
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(b), "r"(bytes)
                 : "memory");
#endif
}

/* Waits for the phase of the given parity (0 first, then 1, 0, ..). */
__device__ __forceinline__ void mbar_wait(uint64_t *bar, uint32_t parity)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    const unsigned b = (unsigned)__cvta_generic_to_shared(bar);
    asm volatile("{\n"
                 ".reg .pred p;\n"
                 "WAIT_%=:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
                 "@!p bra WAIT_%=;\n"
                 "}\n" ::"r"(b),
                 "r"(parity)
                 : "memory");
#endif
}

/* Orders this thread's earlier ordinary accesses to shared memory before
 * its later bulk copies into it (the generic and the async proxy). */
__device__ __forceinline__ void fence_proxy_async()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

/* bytes from global src to this block's shared dst, counted on bar. */
__device__ __forceinline__ void bulk_copy(void *dst, const void *src, uint32_t bytes, uint64_t *bar)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    const unsigned b = (unsigned)__cvta_generic_to_shared(bar);
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], "
                 "%2, [%3];\n" ::"r"(d),
                 "l"(src), "r"(bytes), "r"(b)
                 : "memory");
#endif
}

/* The box of a 2-D tensor map (map: the address of a __grid_constant__
 * CUtensorMap) at element coordinates (x, y) into this block's shared dst
 * (128-byte aligned), counted on bar; rows past the tensor's end arrive as
 * zeros, and their bytes count. */
__device__ __forceinline__ void tensor_copy_2d(void *dst, const void *map, int x, int y,
                                               uint64_t *bar)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    const unsigned b = (unsigned)__cvta_generic_to_shared(bar);
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes "
                 "[%0], [%1, {%2, %3}], [%4];\n" ::"r"(d),
                 "l"(map), "r"(x), "r"(y), "r"(b)
                 : "memory");
#endif
}

/* c += a b on the tensor cores, mma.m16n8k16 with fp32 sums: bf16 inputs
 * (BF16) or fp16. a: the A fragment (rows g, g + 8; k 2qd.., 2qd + 8..),
 * b0, b1: the B fragment's two registers. */
template <bool BF16>
__device__ __forceinline__ void mma_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                          uint32_t b1)
{
    if constexpr (BF16)
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, "
                     "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    else
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, "
                     "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* Element offset of layer `layer`'s keys (kv 0: [head_dim][KVB]) or values
 * (kv 1: [KVB][head_dim]) of KV head `head` in block blk. */
__device__ __forceinline__ size_t kv_index(const struct mfk_kv_shape &s, int32_t blk,
                                           int32_t layer, int kv, int head)
{
    return ((((size_t)blk * (size_t)s.n_layer + (size_t)layer) * 2 + (size_t)kv) *
                (size_t)s.n_head_kv + (size_t)head) * KVB * (size_t)s.head_dim;
}

/* The 8-bit arena (mfk_kv_shape.q8): byte offset of the unit of layer
 * `layer`, keys (kv 0: int8 [head_dim][KVB]) or values (kv 1: int8
 * [KVB][head_dim]), KV head `head` in block blk; each unit ends in KVB
 * float scales, one per slot (the token's absmax over the head / 127). */
__device__ __forceinline__ size_t kv8_offset(const struct mfk_kv_shape &s, int32_t blk,
                                            int32_t layer, int kv, int head)
{
    return ((((size_t)blk * (size_t)s.n_layer + (size_t)layer) * 2 + (size_t)kv) *
                (size_t)s.n_head_kv + (size_t)head) * KVB * ((size_t)s.head_dim + 4);
}

/* Sub-block j's 6-bit scale and min of a Q4_K super-block whose 16-byte
 * head is h (d, dmin, then the 12 packed scale bytes in h.y, h.z, h.w):
 * ggml's get_scale_min_k4. The GEMV (llama.cu) and mmq.cu decode the same. */
__device__ __forceinline__ void q4k_scale_min(const uint4 &h, int j, int *sc, int *mn)
{
    const uint32_t s[3] = {h.y, h.z, h.w};
#define SB(k) ((int)((s[(k) >> 2] >> (8 * ((k) & 3))) & 0xFF))
    if (j < 4) {
        *sc = SB(j) & 63;
        *mn = SB(j + 4) & 63;
    } else {
        *sc = (SB(j + 4) & 0xF) | ((SB(j - 4) >> 6) << 4);
        *mn = (SB(j + 4) >> 4) | ((SB(j) >> 6) << 4);
    }
#undef SB
}

/* An 8-bit K/V element as attention sees it: q * scale rounded to fp16
 * (what an F16 arena would have held), so every kernel reads one value. */
/* An 8-bit arena byte as the number it codes: int8, or with fp8 (the
 * shape's) FP8 e4m3, decoded exactly through fp16 (every e4m3 value is one). */
__device__ __forceinline__ float kv8_decode(uint8_t b, int fp8)
{
    if (fp8)
        return __half2float(__half(__nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)b, __NV_E4M3)));
    return (float)(int8_t)b;
}

/* What attention reads for an 8-bit element: code x scale rounded to fp16,
 * what an F16 arena would hold. */
__device__ __forceinline__ float kv8_value(uint8_t b, float scale, int fp8)
{
    return __half2float(__float2half_rn(kv8_decode(b, fp8) * scale));
}

#endif
