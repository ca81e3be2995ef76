/*
 * kernels.h: the C interface of the CUDA kernels library (libmfc_kernels).
 *
 * Everything here is callable from C. Functions return 0 or a negative MF_E*
 * code and fill a struct mf_err; they never abort the process. Every CUDA
 * call is checked, and every launch is followed by a check of the launch
 * error, so a failure surfaces as MF_EIO naming the kernel, not as a hang.
 * The runtime's CUDA backend (runtime/cuda/cuda.c) and tests/gpu, bench/cuda are
 * the callers; nothing here knows about models or batches.
 *
 * Work is queued on the stream of an mfk_ctx (one per backend) and runs in
 * order; mfk_sync waits for it and reports an asynchronous fault. Device
 * pointers are plain pointers into memory from mfk_malloc.
 */
#ifndef MFC_KERNELS_H
#define MFC_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "common/ggml_type.h"

#ifdef __cplusplus
extern "C" {
#endif

struct mfk_device_info {
    int index;                 /* CUDA device ordinal */
    char name[256];            /* e.g. "NVIDIA H200" */
    int cc_major, cc_minor;    /* compute capability, 9.0 for Hopper */
    size_t total_bytes;        /* device memory */
    size_t free_bytes;         /* free at the time of the query */
    int sm_count;              /* streaming multiprocessors */
};

/* Number of usable CUDA devices in *n (0 when there is no driver or GPU:
 * that is not an error). Fails only on a driver that answers with an error. */
int mfk_device_count(int *n, struct mf_err *err);

/* Describes device `index`. On failure *info is untouched. */
int mfk_device_query(int index, struct mfk_device_info *info, struct mf_err *err);

/* ---- context, memory, copies (kernels/mem.cu) --------------------------- */

struct mfk_ctx; /* opaque: a device, one stream, two pinned staging buffers */

/* Binds device `index`, creates a stream. MF_EIO on any CUDA failure,
 * MF_ENOMEM when allocation fails; *out NULL then. */
int mfk_ctx_new(int index, struct mfk_ctx **out, struct mf_err *err);
/* Waits for queued work and releases the stream and staging. Accepts NULL. */
void mfk_ctx_free(struct mfk_ctx *c);
/* on 1: kernels are launched programmatically dependent where the device
 * has it (sm_90 and later), so a kernel's blocks are scheduled while its
 * predecessor finishes; 0 (the default): plain stream order. The order of
 * memory accesses is the same either way. Returns 0 (the device's
 * capability was read by mfk_ctx_new). */
int mfk_ctx_pdl(struct mfk_ctx *c, int on, struct mf_err *err);
/* on 1 (the default where the device has thread-block clusters, sm_90 and
 * later): a decode context split over at most MFK_ATT_CLUSTER_MAX blocks
 * (mfk_attention's splits) runs as one launch whose blocks meet through
 * distributed shared memory; 0: three launches through device memory (split
 * statistics, weighted values, their sum). Both give the same bits.
 * Returns 0. */
int mfk_ctx_att_cluster(struct mfk_ctx *c, int on, struct mf_err *err);
#define MFK_ATT_CLUSTER_MAX 8 /* blocks of a cluster every sm_90 device runs */

/* Sizes the context's own device scratch (the kernels' temporaries) to at
 * least n bytes now, so it is not first taken in the middle of a step. */
int mfk_scratch_reserve(struct mfk_ctx *c, size_t n, struct mf_err *err);

/* Counts the moves of that scratch: a graph recorded before a move (see
 * mfk_capture_begin) holds the old address and must be dropped. */
uint64_t mfk_scratch_gen(const struct mfk_ctx *c);

/* Free and total device memory now. */
int mfk_mem_info(struct mfk_ctx *c, size_t *free_b, size_t *total_b, struct mf_err *err);
/* Device memory: *p = n bytes (256-byte aligned), MF_ENOMEM when it does not fit. */
int mfk_malloc(struct mfk_ctx *c, size_t n, void **p, struct mf_err *err);
void mfk_free(void *p); /* accepts NULL */
/* Page-locked host memory (fast, asynchronous copies). */
int mfk_host_alloc(size_t n, void **p, struct mf_err *err);
void mfk_host_free(void *p); /* accepts NULL */

/* Copies queued on the stream. h2d/d2h source/destination must stay valid
 * until mfk_sync (pinned memory makes them asynchronous). */
int mfk_copy_h2d(struct mfk_ctx *c, void *dst, const void *src, size_t n, struct mf_err *err);
int mfk_copy_d2h(struct mfk_ctx *c, void *dst, const void *src, size_t n, struct mf_err *err);
int mfk_copy_d2d(struct mfk_ctx *c, void *dst, const void *src, size_t n, struct mf_err *err);
int mfk_memset(struct mfk_ctx *c, void *dst, int byte, size_t n, struct mf_err *err);

/* Copies n bytes of ordinary (pageable, e.g. mmapped) host memory to the
 * device through the context's two pinned staging buffers: the host copy
 * into one buffer overlaps the DMA out of the other. Returns when the data
 * is on the device (the source may be unmapped after). */
int mfk_upload(struct mfk_ctx *c, void *dst, const void *src, size_t n, struct mf_err *err);

/* Waits for all queued work; MF_EIO naming the fault if a kernel failed. */
int mfk_sync(struct mfk_ctx *c, struct mf_err *err);

/* Stream-ordered timer: mfk_timer_start records a start event, then
 * mfk_timer_ms waits for everything queued since and gives the elapsed
 * device milliseconds. */
int mfk_timer_start(struct mfk_ctx *c, struct mf_err *err);
int mfk_timer_ms(struct mfk_ctx *c, float *ms, struct mf_err *err);

/* ---- CUDA graphs (kernels/graph.cu) ------------------------------------- */

struct mfk_graph; /* opaque: an executable graph of recorded launches */

/* From here until mfk_capture_end the context's launches and copies are
 * recorded, not run. Nothing in between may synchronise or allocate (the
 * capture then fails; mfk_capture_end reports it). */
int mfk_capture_begin(struct mfk_ctx *c, struct mf_err *err);
/* Ends the recording and makes it executable: *out, or NULL and MF_EIO /
 * MF_ENOMEM when the capture failed. Always leaves capture mode. */
int mfk_capture_end(struct mfk_ctx *c, struct mfk_graph **out, struct mf_err *err);
/* Queues the recorded work once more, with the arguments it was recorded
 * with (the memory they point at may hold new values). */
int mfk_graph_launch(struct mfk_ctx *c, struct mfk_graph *g, struct mf_err *err);
/* Releases g; no launch of it may still be queued. Accepts NULL. */
void mfk_graph_free(struct mfk_graph *g);

/* ---- transformer kernels (kernels/llama.cu) ----------------------------- */

/* A weight matrix on the device, in its GGUF block format. Rows are
 * row_bytes apart from data (which is 256-byte aligned). */
struct mfk_weight {
    const void *data; /* device */
    int type;         /* enum ggml_type value */
    int64_t ne0;      /* elements per row (input dimension) */
    int64_t ne1;      /* rows (output dimension) */
    uint64_t row_bytes;
    /* device, or NULL: every row dequantized to bf16 (mfk_dequant_half),
     * packed ne0 apart, which mfk_gemm then reads instead of dequantizing
     * the rows again on each call (the GEMV kernels read data) */
    const void *bf16;
};

/* 1 if the GEMV, embedding and dequantization kernels handle a weight of
 * this ggml type with rows of ne0 elements: F32, F16, BF16, Q4_0, Q8_0,
 * Q4_K, Q5_K, Q6_K, with ne0 a multiple of 32 (256 for the K-quants).
 * Inline so that host code planning placement (runtime/cuda/cuda_plan.c)
 * applies the same rule without linking the kernels. */
static inline int mfk_weight_ok(int type, int64_t ne0)
{
    switch (type) {
    case GGML_TYPE_F32:
    case GGML_TYPE_F16:
    case GGML_TYPE_BF16:
    case GGML_TYPE_Q8_0:
    case GGML_TYPE_Q4_0:
        return ne0 > 0 && ne0 % 32 == 0;
    case GGML_TYPE_Q4_K:
    case GGML_TYPE_Q5_K:
    case GGML_TYPE_Q6_K:
        return ne0 > 0 && ne0 % 256 == 0;
    default:
        return 0;
    }
}

/* out[r][0..ne0) = row r0 + r of w as floats, for r < n_rows (bit-exact
 * with common/quant.h's dequantizers). */
int mfk_dequant_rows(struct mfk_ctx *c, const struct mfk_weight *w, int64_t r0, int32_t n_rows,
                     float *out, struct mf_err *err);

/* The same rows rounded to bf16 (bf16 != 0) or fp16, packed ne0 apart
 * into out (16-byte aligned): what mfk_gemm feeds the tensor cores. */
int mfk_dequant_half(struct mfk_ctx *c, const struct mfk_weight *w, int64_t r0, int32_t n_rows,
                     void *out, int bf16, struct mf_err *err);

/* out[t][i] = x[t][i] rounded to bf16 (bf16 != 0) or fp16, t < nt, packed
 * ne0 apart: mfk_gemm's activations. */
int mfk_round_half(struct mfk_ctx *c, const float *x, int64_t ldx, int32_t nt, int64_t ne0,
                   void *out, int bf16, struct mf_err *err);

/* x[t][0..ne0) = row ids[t] of w, t < n (ids on the device, < w->ne1). */
int mfk_embed(struct mfk_ctx *c, const struct mfk_weight *w, const int32_t *ids, int32_t n,
              float *x, int64_t ldx, struct mf_err *err);

/* An input's 8-bit form, as mfk_gemv_n makes it for Q4_K and Q6_K weights
 * (8 bits per 32 elements, d = max|x| / 127, q = rint(x / d)): q[t][n]
 * (16-byte aligned), d[t][n / 32] and s[t][n / 32] = d x the block's sum of
 * q. The kernel that makes an input can write it too (mfk_rmsnorm,
 * mfk_swiglu: the same bytes), so the products skip a launch. */
struct mfk_q8 {
    int8_t *q;
    float *d, *s;
};

/* y[t] = x[t] / sqrt(mean(x[t]^2) + eps) * g for t < rows (sum of squares
 * in double, as the CPU backend). With res non-NULL, first x[t] += res[t]
 * (written back: the fused residual add). q8 non-NULL: y's 8-bit form too
 * (n a multiple of 256). */
int mfk_rmsnorm(struct mfk_ctx *c, float *x, int64_t ldx, const float *res, int64_t ldr,
                const float *g, float *y, int64_t ldy, int32_t rows, int64_t n, float eps,
                const struct mfk_q8 *q8, struct mf_err *err);

/* mfk_rmsnorm, and y rounded to bf16 (bf16 != 0) or fp16 into yh, packed n
 * apart (16-byte aligned): what mfk_round_half would make of y, for
 * mfk_gemm_rounded, without its launch. */
int mfk_rmsnorm_rounded(struct mfk_ctx *c, float *x, int64_t ldx, const float *res, int64_t ldr,
                        const float *g, float *y, int64_t ldy, int32_t rows, int64_t n, float eps,
                        const struct mfk_q8 *q8, void *yh, int bf16, struct mf_err *err);

/* y[t][r] (+)= dot(w row r, x[t]) for r < w->ne1, t < nt: the weight
 * bytes are read from memory once per 8 tokens (once per step in decode);
 * Q4_K weights with MFK_MMQ_MIN tokens or more go to the integer tensor
 * cores instead (kernels/mmq.cu), reading the weights once per
 * MFK_MMQ_TOKENS; past that, in tiles of 64 rows x 32 tokens staged in
 * shared memory.
 * x is rounded to fp16/bf16 first for F16/BF16 weights, as the CPU does;
 * for Q4_K and Q6_K it is quantized to 8 bits per 32 elements (d = max|x| / 127,
 * q = rint(x / d)) and dotted in integers; other quantized weights meet the
 * float x. x rows 16-byte aligned (ldx a multiple of 4). add: y += W x. */
int mfk_gemv(struct mfk_ctx *c, const struct mfk_weight *w, const float *x, int64_t ldx,
             int32_t nt, float *y, int64_t ldy, int add, struct mf_err *err);
#define MFK_MMQ_TOKENS 16 /* tokens of the untiled Q4_K kernel, at most */
#define MFK_MMQ_MIN 5     /* below, the GEMV (at 4 tokens it beat a first shape of
                             mmq.cu, 523 against 489 tokens/s on an H200; the kept
                             shape is not measured there) */

/* mfk_gemv for n weights of the same input width (q, k and v; gate and
 * up): y[i] (+)= w[i] x, with the input quantized once for every Q4_K and
 * Q6_K weight among them, or, xq8 non-NULL, x's 8-bit form already there. */
int mfk_gemv_n(struct mfk_ctx *c, int n, const struct mfk_weight *const *w, const float *x,
               int64_t ldx, int32_t nt, float *const *y, const int64_t *ldy, int add,
               const struct mfk_q8 *xq8, struct mf_err *err);

/* ---- tensor-core products (kernels/gemm.cu, cuBLAS loaded on first use) -- */

/* 1 when mfk_gemm can run on this context (cuBLAS found and started);
 * else 0, and err says why (MF_EUNSUPPORTED: not found). */
int mfk_gemm_available(struct mfk_ctx *c, struct mf_err *err);
/* Bytes of scratch mfk_gemm needs for nt tokens against w. */
size_t mfk_gemm_scratch(const struct mfk_weight *w, int32_t nt);
/* mfk_gemv's contract on tensor cores, for prefill and large batches: x
 * rounded to bf16 (fp16 for F16 weights), BF16/F16 weights read as they are,
 * other types dequantized to bf16 in row chunks (or read from w->bf16),
 * fp32 accumulation in cuBLAS. scratch: device memory of mfk_gemm_scratch
 * bytes, 256-aligned. */
int mfk_gemm(struct mfk_ctx *c, const struct mfk_weight *w, const float *x, int64_t ldx,
             int32_t nt, float *y, int64_t ldy, int add, void *scratch, size_t scratch_bytes,
             struct mf_err *err);
/* What mfk_gemm rounds its input to for w: 0 nothing (F32), 1 fp16 (F16),
 * 2 bf16 (every other type). */
int mfk_gemm_rounding(const struct mfk_weight *w);
/* mfk_gemm with its input already rounded (mfk_gemm_rounding) in the
 * scratch's first nt x ne0 halves, dense: mfk_swiglu_half's output. */
int mfk_gemm_rounded(struct mfk_ctx *c, const struct mfk_weight *w, int32_t nt, float *y,
                     int64_t ldy, int add, void *scratch, size_t scratch_bytes,
                     struct mf_err *err);
/* mfk_gemm for n weights of one input (q, k and v; gate and up): x rounded
 * once for consecutive weights that round it alike (bf16, or fp16 for F16).
 * scratch: the largest mfk_gemm_scratch of them. */
int mfk_gemm_n(struct mfk_ctx *c, int n, const struct mfk_weight *const *w, const float *x,
               int64_t ldx, int32_t nt, float *const *y, const int64_t *ldy, int add,
               void *scratch, size_t scratch_bytes, struct mf_err *err);
/* mfk_gemm_rounded for n weights of one input that all round it alike
 * (mfk_gemm_rounding). With mfk_ctx_qgemm_sk on, mfk_gemm_n and this give
 * consecutive weights qgemm.cu takes alike one launch (mfk_qgemm_n). */
int mfk_gemm_rounded_n(struct mfk_ctx *c, int n, const struct mfk_weight *const *w, int32_t nt,
                       float *const *y, const int64_t *ldy, int add, void *scratch,
                       size_t scratch_bytes, struct mf_err *err);
/* The same with y = alpha * W x (+ y when add): LoRA's expand, whose B has
 * rank columns (F32/F16/BF16 weights may have any width here). */
int mfk_gemm_ex(struct mfk_ctx *c, const struct mfk_weight *w, const float *x, int64_t ldx,
                int32_t nt, float *y, int64_t ldy, float alpha, int add, void *scratch,
                size_t scratch_bytes, struct mf_err *err);

/* Q4_K and Q6_K products of up to max_tokens tokens (MFK_QGEMM_MAX_TOKENS
 * by default; 0: none) go to kernels/qgemm.cu inside mfk_gemm: the weights
 * dequantized in registers straight into the tensor cores, instead of to
 * bf16 in memory for cuBLAS (Q4_K in bf16 arithmetic unless
 * mfk_ctx_qgemm_exact, below; otherwise the same values, so the same results
 * up to the order of the fp32 sums). MF_EINVAL for max_tokens < 0. Past
 * 64 tokens cuBLAS on the dequantized rows won (H200, Llama-3-8B Q4_K_M
 * batch 128: 6,919 against 6,375-6,724 tokens/s). */
#define MFK_QGEMM_MAX_TOKENS 64
int mfk_ctx_qgemm(struct mfk_ctx *c, int32_t max_tokens, struct mf_err *err);
/* on 0 (the default): qgemm.cu forms Q4_K weights in bf16 arithmetic, the
 * sub-block's scale and min rounded to bf16 (2^-9 of each at most), three
 * instructions a weight pair instead of seven; 1: exactly mfk_dequant_half's
 * values (the results then cuBLAS's on the dequantized rows up to the order
 * of the sums). Q6_K is always exact. */
void mfk_ctx_qgemm_exact(struct mfk_ctx *c, int on);
/* 1 when mfk_gemm takes w at nt tokens to qgemm.cu: Q4_K (rows a multiple
 * of 256) or Q6_K (of 512: its super-block pairs are 4-byte aligned), no
 * bf16 copy, nt within the context's limit. */
int mfk_qgemm_takes(struct mfk_ctx *c, const struct mfk_weight *w, int32_t nt);
/* y = alpha W x (+ y when add) for such a w; x: bf16 [nt][ne0], 16-byte
 * aligned (mfk_gemm's rounded input). */
int mfk_qgemm(struct mfk_ctx *c, const struct mfk_weight *w, const void *x, int32_t nt,
              float *y, int64_t ldy, float alpha, int add, struct mf_err *err);
/* on 1: qgemm.cu's products run stream-K where its plan says so
 * (mfk_qgemm_sk_blocks, below), and mfk_gemm_n / mfk_gemm_rounded_n give
 * consecutive products of one input that qgemm.cu takes alike (one type and
 * width) one launch (mfk_qgemm_n); 2: the same with every product
 * stream-K (for tests and measuring); 0 (the default): the clustered grid,
 * a launch a product. The first call that turns it on takes the partial
 * tiles' device memory (2 x 2 x multiprocessors x 32 KiB, 16.5 MiB on an
 * H200) and their counters: MF_ENOMEM when the memory is not there. */
int mfk_ctx_qgemm_sk(struct mfk_ctx *c, int on, struct mf_err *err);
#define MFK_QGEMM_GROUP_MAX 3 /* products of one stream-K launch, at most */
/* y[i] = alpha W[i] x (+ y[i] when add) for n (1 to MFK_QGEMM_GROUP_MAX)
 * weights that mfk_qgemm takes at nt, all of one type and width, in one
 * stream-K launch; needs mfk_ctx_qgemm_sk on. MF_EINVAL otherwise, with
 * nothing written. */
int mfk_qgemm_n(struct mfk_ctx *c, int n, const struct mfk_weight *const *w, const void *x,
                int32_t nt, float *const *y, const int64_t *ldy, float alpha, int add,
                struct mf_err *err);

/* The K split of a qgemm.cu launch: row_tiles x token_tiles blocks of
 * n_stages stages each; when they are fewer than the sms multiprocessors,
 * each tile's K range is split over a cluster of 2, 4 or 8 blocks (at most
 * max_split, the device's cluster limit for the kernel), as many as fill
 * the multiprocessors once, each keeping 2 stages at least. */
#define MFK_QGEMM_SPLIT_MAX 8
static inline int mfk_qgemm_splits(int64_t row_tiles, int64_t token_tiles, int n_stages, int sms,
                                   int max_split)
{
    const int64_t tiles = row_tiles * token_tiles;
    int s = 1;
    while (2 * s <= max_split && 2 * s <= MFK_QGEMM_SPLIT_MAX && 2 * s * tiles <= sms &&
           2 * 2 * s <= n_stages)
        s *= 2;
    return s;
}

/* Stream-K (mfk_ctx_qgemm_sk): instead of a grid of tiles x splits, a grid
 * of at most one block a place (the blocks the device runs at once) whose
 * blocks share the launch's tiles x n_stages iterations evenly, block b
 * taking iterations [iters b / blocks, iters (b + 1) / blocks) in tile
 * order. A tile cut between blocks is summed by the last of them to
 * finish, from partial tiles in device memory added in block order, so the
 * result does not depend on timing. It evens out what the clustered grid
 * leaves idle (gate and up of Llama-3-8B at 64 tokens: 224 blocks on 264
 * places) and lets the products of one input (q, k, v; gate, up) share one
 * launch (mfk_qgemm_n). */
#define MFK_QGEMM_SK_TILES 4096 /* tiles a stream-K launch takes, at most (its counters) */
#define MFK_QGEMM_SK_MIN 2      /* iterations a block, at least */
#define MFK_QGEMM_SK_SEGS 8     /* blocks sharing a tile, at most */
/* a lone product whose clustered grid fills this % of its waves' places stays clustered */
#define MFK_QGEMM_SK_FILL 90
#ifdef __CUDACC__
#define MFK_HD __host__ __device__
#else
#define MFK_HD
#endif

/* The blocks of a stream-K launch of `tiles` tiles (row tiles x token
 * tiles) of n_stages stages on `places`, or 0 where the clustered grid
 * (mfk_qgemm_splits with max_split) serves: too many tiles, or a lone
 * product whose grid fills MFK_QGEMM_SK_FILL % of its waves or has as
 * many blocks. `grouped`: several products in one launch, which only
 * stream-K takes. */
static inline int mfk_qgemm_sk_blocks(int64_t tiles, int n_stages, int places, int max_split,
                                      int grouped)
{
    if (tiles < 1 || n_stages < 1 || places < 1 || tiles > MFK_QGEMM_SK_TILES ||
        tiles * n_stages > INT32_MAX) /* the kernel counts iterations in an int */
        return 0;
    int64_t g = tiles * n_stages / MFK_QGEMM_SK_MIN;
    if (g > places)
        g = places;
    if (g > tiles * MFK_QGEMM_SK_SEGS)
        g = tiles * MFK_QGEMM_SK_SEGS;
    if (g < 1)
        g = 1;
    if (!grouped) { /* and not where it would cut the work as the clusters do */
        const int64_t blocks = tiles * mfk_qgemm_splits(tiles, 1, n_stages, places, max_split);
        const int64_t waves = (blocks + places - 1) / places;
        if (blocks * 100 >= waves * places * MFK_QGEMM_SK_FILL || g <= blocks)
            return 0;
    }
    return (int)g;
}

/* Block b's first iteration of iters shared by `blocks` (b = blocks: the end). */
static inline MFK_HD int64_t mfk_sk_start(int64_t iters, int blocks, int b)
{
    return iters * b / blocks;
}

/* The block whose share holds iteration i. */
static inline MFK_HD int mfk_sk_owner(int64_t iters, int blocks, int64_t i)
{
    return (int)(((i + 1) * blocks - 1) / iters);
}

/* Where block b keeps its partial sums of the tile whose first iteration
 * is `first`: slot 2 b for the tile its share starts in, 2 b + 1 for the
 * one it ends in (a share cuts at most those two; the tiles between are
 * whole and stored directly). */
static inline MFK_HD int mfk_sk_slot(int64_t iters, int blocks, int b, int64_t first)
{
    return 2 * b + (mfk_sk_start(iters, blocks, b) >= first ? 0 : 1);
}

/* ---- mixture of experts (kernels/moe.cu) --------------------------------- */

/* A routed feed-forward layer over T tokens (runtime/cuda/cuda_moe.c),
 * entirely on the device, so a decode step records as a graph:
 *   mfk_moe_route    per token the router's softmax (the sum in double), its
 *                    k best experts (ties to the lower expert, best first) and
 *                    their weights divided by their sum (clamped below at
 *                    2^-14), as runtime/cpu/cpu_moe.c; then the T k (token,
 *                    choice) pairs grouped by expert, an expert's rows in
 *                    token order ("gathered rows"), and the work list: each
 *                    expert's rows in items of at most mfk_moe_tile(T);
 *   mfk_moe_gemm     one launch for every expert's rows of up to two weights
 *                    of one input (gate and up; down), experts with no rows
 *                    costing nothing, each chosen expert's weights read once
 *                    per item, in their GGUF block type;
 *   mfk_moe_combine  out[t] (+)= sum over j of w[t][j] y[gathered row of
 *                    (t, j)], added best first, then to out.
 * The state lives in device memory the caller owns (struct mfk_moe_route,
 * sized by mfk_moe_items_max for the largest T). */
#define MFK_MOE_MAX_EXPERTS 512 /* experts a router may have (MODEL_MAX_EXPERTS) */
#define MFK_MOE_TILE 8          /* rows of an item, at most */
#define MFK_MOE_HIST 8192       /* the grouping's (chunk, expert) counters, at most */
/* items a grouped launch's block rows take at once (the grid's y); a block
 * takes every MFK_MOE_SLOTS-th item */
#define MFK_MOE_SLOTS 64

struct mfk_moe_route {
    int32_t *sel;     /* (T k) expert of pair t k + j, best first */
    float *w;         /* (T k) its weight */
    int32_t *eoff;    /* (n_expert + 1) first gathered row of each expert; T k last */
    int32_t *grow;    /* (T k) token of each gathered row */
    int32_t *prow;    /* (T k) gathered row of each pair */
    int32_t *items;   /* (mfk_moe_items_max, 4) expert, first gathered row, rows, 0;
                         16-byte aligned */
    int32_t *n_items; /* (1) items of the last route */
    unsigned *done;   /* (1) routing blocks finished: 0 before the first launch, and
                         the last block puts it back */
};

/* Rows an item takes at most for a step of T tokens: 1, 2, 4, then 8
 * (the grouped kernels' token count per pass over the weights). */
static inline MFK_HD int32_t mfk_moe_tile(int32_t T)
{
    return T <= 2 ? (T < 1 ? 1 : T) : T <= 4 ? 4 : MFK_MOE_TILE;
}

/* Items of a step of T tokens, k of n_expert experts each, at most: an
 * expert with c rows takes ceil(c / tile) items, and every item has a
 * row, so min(T k, live experts + T k / tile) with live <= min(n_expert,
 * T k). */
static inline MFK_HD int64_t mfk_moe_items_max(int32_t T, int32_t n_expert, int32_t k)
{
    const int64_t pairs = (int64_t)T * k, live = pairs < n_expert ? pairs : n_expert;
    const int64_t most = live + pairs / mfk_moe_tile(T);
    return T < 1 || k < 1 ? 0 : most < pairs ? most : pairs;
}

/* The grouping's chunks (counting sort by (chunk, expert), one thread a
 * chunk): *per tokens a chunk, as few as keep chunks x n_expert within
 * MFK_MOE_HIST and the chunks within 256 (the block); returns the chunks. */
static inline MFK_HD int32_t mfk_moe_chunks(int32_t T, int32_t n_expert, int32_t *per)
{
    int32_t cmax = n_expert > 0 ? MFK_MOE_HIST / n_expert : 1;
    cmax = cmax > 256 ? 256 : cmax < 1 ? 1 : cmax;
    *per = T < 1 ? 1 : (T + cmax - 1) / cmax;
    return T < 1 ? 0 : (T + *per - 1) / *per;
}

/* Routes T tokens whose router logits are logits[t][0..n_expert) (rows ld
 * apart) to k experts each, into r (sized for T: sel, w, grow, prow T k;
 * items mfk_moe_items_max(T, n_expert, k)). MF_EINVAL for n_expert past
 * MFK_MOE_MAX_EXPERTS or k outside 1..n_expert. */
int mfk_moe_route(struct mfk_ctx *c, const float *logits, int64_t ld, int32_t T, int32_t n_expert,
                  int32_t k, const struct mfk_moe_route *r, struct mf_err *err);

/* y[i][g][0..ne1) = W_i[e] x[row g] for every gathered row g of every
 * expert e (rows ldy apart), i < n (1 or 2: weights of one input, one
 * launch when they share a type): w[i] holds n_expert matrices of ne1 rows,
 * expert e's from data + e ne1 row_bytes. The input of gathered row g is
 * row xrow[g] (r->grow: inputs by token) or g (xrow NULL: inputs by
 * gathered row) of x (floats, 16-byte aligned rows ldx apart: F32, F16,
 * BF16, Q8_0, Q4_0, Q5_K weights, which meet it as mfk_gemv does) and of
 * xq8 (its 8-bit form, rows ne0 apart: Q4_K and Q6_K weights, dp4a on the
 * integer codes). T and k as routed. MF_EINVAL when an input a weight
 * needs is missing or misaligned, MF_EUNSUPPORTED for a type the kernels
 * do not read. */
int mfk_moe_gemm(struct mfk_ctx *c, int n, const struct mfk_weight *const *w, int32_t n_expert,
                 const float *x, int64_t ldx, const struct mfk_q8 *xq8, const int32_t *xrow,
                 int32_t T, int32_t k, const struct mfk_moe_route *r, float *const *y, int64_t ldy,
                 struct mf_err *err);

/* out[t][i] = acc (+ out[t][i] when add), acc = w[t][0] y[p0][i] + w[t][1]
 * y[p1][i] + ... in that order (pj the gathered row of pair (t, j), its
 * products and sums rounded one at a time, as the CPU's combine), i < n,
 * t < T; n a multiple of 4 and rows 16-byte aligned. */
int mfk_moe_combine(struct mfk_ctx *c, const float *y, int64_t ldy, int32_t T, int32_t k, int64_t n,
                    const struct mfk_moe_route *r, float *out, int64_t ldo, int add,
                    struct mf_err *err);

/* Shape of the paged KV arena (runtime/engine/backend.h layout, F16 elements:
 * keys [head_dim][16] per block and head, values [16][head_dim]). q8: the
 * 8-bit arena instead (BACKEND_KV_Q8): the same two layouts in int8, each
 * followed by 16 float scales, one per slot (the token's absmax over the
 * head's head_dim values / 127); attention reads q * scale rounded to fp16. */
struct mfk_kv_shape {
    int32_t n_layer, n_head, n_head_kv, head_dim, n_rot;
    int32_t q8;
    /* the family's switches (common/arch.h); zero is Llama's */
    int32_t neox;    /* RoPE pairs (i, i + n_rot / 2) instead of (2i, 2i + 1) */
    float q_scale;   /* mfk_rope_store scales q by it after RoPE; 0: 1 */
    float kq_scale;  /* the scores' scale; 0: 1 / sqrt(head_dim) */
    float softcap;   /* scores become c tanh(s / c); 0: none (mfk_attention only) */
    int32_t window;  /* a token at p sees p - window < j <= p; 0: all (mfk_attention only) */
};

/* For each token t < T: rotates q[t] (all heads) and k[t] by the (cos,
 * sin) pairs rope[t][0..n_rot) (llama "normal" pairs 2i, 2i+1, or NeoX's
 * i, i + n_rot / 2 with s->neox), scales q by s->q_scale, then stores k[t]
 * and v[t] as fp16 (8-bit with a scale per head, s->q8) into block blk[t],
 * slot pos[t] % 16, of layer `layer` in kv. */
int mfk_rope_store(struct mfk_ctx *c, const struct mfk_kv_shape *s, int32_t layer, int32_t T,
                   float *q, int64_t ldq, float *k, const float *v, int64_t ldkv,
                   const float *rope, const int32_t *pos, const int32_t *blk, void *kv,
                   struct mf_err *err);

/* Paged attention for T tokens: token t at position pos[t] attends to
 * positions 0..pos[t] of its sequence, whose block table is
 * tables[toff[t] ..]. The tokens are list[0..T) (indices into pos, toff, q
 * and out), or 0..T-1 with a NULL list. One thread block per (token, KV
 * head) serves all query heads of that KV head, so each K/V block is read
 * once for them. Numerics follow the CPU backend's F16 path: q rounded to
 * fp16, softmax(q.k / sqrt(hd)) with the sum in double, weights rounded to
 * fp16 before P.V. out[t] gets n_head * head_dim floats. max_ctx bounds
 * pos+1 (it sizes shared memory; MF_EUNSUPPORTED when the scores do not
 * fit). splits > 1 divides each context over that many blocks
 * (FlashDecoding-style: one launch of clusters where mfk_ctx_att_cluster
 * allows and splits <= MFK_ATT_CLUSTER_MAX, else three;
 * runtime/cuda/cuda_plan.c's cuda_plan_att_splits says when splitting
 * pays); the result is the unsplit one up to the rounding of the softmax
 * sum's rescaling. 1 to 4096. With
 * splits > 1 and q8 non-NULL, each output row's 8-bit form (rows of
 * n_head * head_dim, a multiple of 256) is written to q8 too, at the row's
 * token index, as mfk_gemv_n would make it; with splits 1, q8 is not
 * written. */
int mfk_attention(struct mfk_ctx *c, const struct mfk_kv_shape *s, int32_t layer, int32_t T,
                  const int32_t *list, const float *q, int64_t ldq, const int32_t *pos,
                  const int32_t *toff, const int32_t *tables, const void *kv, int32_t max_ctx,
                  int32_t splits, float *out, int64_t ldo, const struct mfk_q8 *q8,
                  struct mf_err *err);

/* (s->softcap and s->window: both kernels mask a sliding window's earlier
 * positions and read only the blocks from the window's first on; the tiles
 * of such a layer all go to the generic tile kernel, k_tiles, whatever the
 * head width and decode say.) */

/* The same for runs of a sequence's tokens, on the tensor cores: tile i is
 * tokens tiles[2i] .. tiles[2i] + tiles[2i+1] - 1 (1 to 16 of them, one
 * sequence, consecutive positions). No context limit; head_dim a multiple
 * of 16 up to 256; the CPU's softmax and roundings, as mfk_attention.
 * decode (head_dim 64 and 128; others ignore it): 0, every tile through the
 * prefill kernel; 1, 1-token tiles through the decode kernel and the rest
 * through the prefill kernel; 2, every tile has 1 token (decode kernel
 * only). warps: the decode kernel's warps a block, 3, 4, 6 or 8 (12 / warps
 * blocks a multiprocessor; runtime/cuda/cuda_plan.c's cuda_plan_dec_warps picks
 * them for the grid). */
int mfk_attention_tiles(struct mfk_ctx *c, const struct mfk_kv_shape *s, int32_t layer,
                        int32_t n_tiles, const int32_t *tiles, const float *q, int64_t ldq,
                        const int32_t *pos, const int32_t *toff, const int32_t *tables,
                        const void *kv, float *out, int64_t ldo, int decode, int warps,
                        struct mf_err *err);

/* Largest context mfk_attention takes for this shape. */
int32_t mfk_attention_max_ctx(const struct mfk_kv_shape *s);

/* g[i] = g[i] / (1 + e^-g[i]) * u[i] over rows x n (rows ld apart); q8
 * non-NULL: the result's 8-bit form too (n a multiple of 256). */
int mfk_swiglu(struct mfk_ctx *c, float *g, const float *u, int64_t ld, int32_t rows, int64_t n,
               const struct mfk_q8 *q8, struct mf_err *err);

/* out[i][j] = g[i][j] / (1 + e^-g[i][j]) * u[i][j] rounded to bf16 (bf16)
 * or fp16, rows x n dense (g not written): mfk_swiglu and mfk_round_half
 * in one pass, for mfk_gemm_rounded. */
int mfk_swiglu_half(struct mfk_ctx *c, const float *g, const float *u, int64_t ld, int32_t rows,
                    int64_t n, void *out, int bf16, struct mf_err *err);

/* ---- model families (kernels/family.cu) -------------------------------- */

/* For each token t < T: q/k/v biases added (qb, kb, vb: n_head * head_dim and
 * n_head_kv * head_dim floats, or NULL), then each q and k head RMSNormed by
 * qn / kn (head_dim floats, or NULL: no norm). In place. */
int mfk_qkv_prep(struct mfk_ctx *c, int32_t T, float *q, int64_t ldq, float *k, float *v,
                 int64_t ldkv, int32_t n_head, int32_t n_head_kv, int32_t head_dim,
                 const float *qb, const float *kb, const float *vb, const float *qn,
                 const float *kn, float eps, struct mf_err *err);

/* g = gelu_tanh(g) * u over rows x n (rows ld apart), GELU as llama.cpp's CPU
 * rounds it (input and result to fp16). */
int mfk_geglu(struct mfk_ctx *c, float *g, const float *u, int64_t ld, int32_t rows, int64_t n,
              struct mf_err *err);

/* x[r] = rmsnorm(t[r]) * g + x[r], r < rows: a block's post-norm into the
 * residual. */
int mfk_add_norm(struct mfk_ctx *c, float *x, int64_t ldx, const float *t, int64_t ldt,
                 const float *g, int32_t rows, int64_t n, float eps, struct mf_err *err);

/* x *= s over rows x n; with cap > 0 instead x = tanh(x / cap) * cap. */
int mfk_scale_rows(struct mfk_ctx *c, float *x, int64_t ld, int32_t rows, int64_t n, float s,
                   float cap, struct mf_err *err);

/* dst[j] = src[rows[j]] (n_cols floats each), j < n. */
int mfk_gather(struct mfk_ctx *c, const float *src, int64_t lds, const int32_t *rows, int32_t n,
               float *dst, int64_t ldd, int64_t n_cols, struct mf_err *err);
/* dst[rows[j]] += scales[j] * src[j] (n_cols floats each), j < n; rows
 * distinct (a LoRA group's rows, cuda_lora.c). */
int mfk_scatter_add(struct mfk_ctx *c, const float *src, int64_t lds, const int32_t *rows,
                    const float *scales, int32_t n, float *dst, int64_t ldd, int64_t n_cols,
                    struct mf_err *err);

/* out[r] = the index of the largest of x[r][0..n) (the first on ties;
 * NaN never wins), r < rows: greedy sampling on the device. */
int mfk_argmax(struct mfk_ctx *c, const float *x, int64_t ldx, int32_t rows, int64_t n,
               int32_t *out, struct mf_err *err);

/* One row's draw (runtime/engine/sampler.h struct sampler_draw, whose contract
 * this follows; the runtime copies it field by field). */
struct mfk_draw {
    double u;          /* uniform [0, 1) */
    float temperature; /* <= 0: greedy */
    int32_t top_k;     /* <= 0: off; at most MFK_SAMPLE_TOP_K */
    float top_p, min_p;
    float repeat_penalty, presence_penalty, frequency_penalty;
    int32_t adj_off, n_adj; /* this row's entries of the adjust array, n_adj <= 1024 */
    int32_t mask_off;       /* mfk_sample_masked: this row's grammar mask, words from here
                               in the masks array (bit i: token i allowed); < 0: none */
};
struct mfk_adjust {
    int32_t token, count;
    float bias;
};
#define MFK_SAMPLE_TOP_K 1024  /* SAMPLER_DRAW_MAX_TOP_K */
#define MFK_SAMPLE_ADJUST 1024 /* SAMPLER_DRAW_MAX_ADJUST: one thread an entry */
#define MFK_SAMPLE_CAND 4096   /* candidates top_p without top_k sorts on the device */

/* out[r] = the token drawn from x[r][0..n) under d[r] (device arrays,
 * adjust entries in a), r < rows; -1 where the row goes back to the host:
 * no token survives, or top_p without top_k needs more than
 * MFK_SAMPLE_CAND candidates. x is left as it was. */
int mfk_sample(struct mfk_ctx *c, float *x, int64_t ldx, int32_t rows, int64_t n,
               const struct mfk_draw *d, const struct mfk_adjust *a, int32_t *out,
               struct mf_err *err);
/* mfk_sample where a row's d[r].mask_off >= 0 first bans (sets to -inf, in
 * place: a row given back holds its masked logits) every token whose bit in
 * masks[mask_off..] is clear: a grammar's mask (runtime/grammar), applied
 * where the logits are. masks NULL: as mfk_sample. */
int mfk_sample_masked(struct mfk_ctx *c, float *x, int64_t ldx, int32_t rows, int64_t n,
                      const struct mfk_draw *d, const struct mfk_adjust *a, const uint32_t *masks,
                      int32_t *out, struct mf_err *err);

#ifdef __cplusplus
}
#endif

#endif
