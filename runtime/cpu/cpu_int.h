/*
 * cpu_int.h: internals shared by the CPU backend's files (cpu.c, cpu_pool.c,
 * cpu_dot*.c) and their unit tests.
 *
 * Activations meet quantized weights the way llama.cpp does it: each input
 * row is quantized once per step to 8-bit blocks (Q8_0 blocks of 32 for
 * Q4_0/Q8_0 weights, Q8_K blocks of 256 for the K-quants) and the weight
 * blocks are dotted against them in integers; only the per-block scales are
 * floats. F32/F16/BF16 weights take the float activations as they are.
 *
 * The activation blocks are mfc's own (a float scale instead of fp16, and
 * block sums that let unsigned weight codes use u8 x s8 instructions); they
 * never leave the process, so nothing has to match ggml byte for byte.
 */
#ifndef MFC_CPU_INT_H
#define MFC_CPU_INT_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "common/ggml_type.h"
#include "common/quant.h"
#include "runtime/engine/backend.h"

/* ---- activation blocks ------------------------------------------------ */

#define CPU_Q8_0_N 32  /* elements per Q8_0 activation block */
#define CPU_Q8_K_N 256 /* elements per Q8_K activation block (QK_K) */

struct cpu_q8_0 {
    float d;        /* scale: x ~= d * qs */
    int32_t s;      /* sum of qs (offset correction for unsigned weight codes) */
    int8_t qs[32];  /* codes in -127..127 */
};

struct cpu_q8_K {
    float d;           /* scale: x ~= d * qs */
    int32_t pad;       /* keeps qs 8-byte aligned */
    int8_t qs[256];    /* codes in -127..127 */
    int16_t bsums[16]; /* sum of each 16 codes (Q6_K's -32 offset) */
    int16_t bsums32[8]; /* sum of each 32 codes (Q4_K/Q5_K mins), folded once here
                           instead of in every row's dot product */
};

struct cpu_dot;

/* The activation formats weights are dotted against. F16 and BF16 are
 * float rows rounded to fp16/bf16 values (kept as floats so the float
 * kernels serve all three): ggml converts the activations of an F16/BF16
 * matmul the same way, and doing what it does keeps mfc's logits within
 * float rounding of llama.cpp's. */
enum cpu_act {
    CPU_ACT_F32 = 0,  /* float rows as they are (F32 weights) */
    CPU_ACT_F16 = 1,  /* floats rounded to fp16 (F16 weights) */
    CPU_ACT_BF16 = 2, /* floats rounded to bf16 (BF16 weights) */
    CPU_ACT_Q8_0 = 3, /* cpu_q8_0 blocks (Q4_0, Q5_0, Q5_1, Q8_0 weights) */
    CPU_ACT_Q8_K = 4, /* cpu_q8_K blocks (Q4_K, Q5_K, Q6_K weights) */
    CPU_ACT_COUNT = 5,
};

/* The activation format weights of type wt are dotted against. */
enum cpu_act cpu_dot_act(enum ggml_type wt);

/* Bytes of one activation row of n elements in format a (n a multiple of
 * its block). */
size_t cpu_dot_act_bytes(enum cpu_act a, int64_t n);

/* Converts one row of n floats into format a at y (cpu_dot_act_bytes(a, n)
 * bytes). The same code runs on every ISA, so the result never depends on
 * the CPU. */
void cpu_dot_act_row(const struct cpu_dot *d, enum cpu_act a, const float *x, void *y,
                     int64_t n);

/* The quantizers cpu_dot_act_row uses (n a multiple of 32 / 256). */
void cpu_dot_quantize_q8_0(const float *x, struct cpu_q8_0 *y, int64_t n);
void cpu_dot_quantize_q8_K(const float *x, struct cpu_q8_K *y, int64_t n);

/* ---- dot kernels ------------------------------------------------------ */

/*
 * y[c * ys + r] (+)= dot(w row r, x row c) for r < nr, c < nc, over rows of
 * n elements: w rows are wb bytes apart, x rows (in cpu_dot_act(w type)
 * format) xb bytes apart. add: accumulate into y instead of storing.
 * Every (r, c) result is computed by the same instruction sequence whatever
 * nr and nc are, so a token's output does not depend on its batch.
 */
typedef void cpu_gemm_fn(int64_t n, int32_t nr, int32_t nc, const void *w, size_t wb,
                         const void *x, size_t xb, float *y, size_t ys, int add);

/* Q5_0 and Q5_1 weights (Q8_0 activations): scalar kernels, shared by
 * every table (cpu_dot.c). They compute what ggml_vec_dot_q5_0_q8_0 and
 * ggml_vec_dot_q5_1_q8_1 do. */
cpu_gemm_fn cpu_gemm_q5_0;
cpu_gemm_fn cpu_gemm_q5_1;

enum cpu_isa {
    CPU_ISA_SCALAR = 0, /* portable C */
    CPU_ISA_AVX2 = 1,   /* AVX2 + FMA + F16C */
    CPU_ISA_AVX512 = 2, /* AVX2 set + AVX-512 F/BW/VL + VNNI (256-bit VNNI dot products) */
    CPU_ISA_COUNT = 3,
};

struct cpu_dot {
    enum cpu_isa isa;                        /* what these functions need */
    const char *name;                        /* "scalar", "avx2", "avx512vnni" */
    cpu_gemm_fn *gemm[GGML_TYPE_COUNT];      /* by weight type; NULL: not handled */
    /* attention, one KV block of keys stored transposed, kt[d][16] (F16 or
     * F32): s[i][j] = q[i] . k_j for all 16 slots j of each of nq queries,
     * summed over d in order, so a score never depends on which queries
     * share the call or on how full the block is */
    void (*kq_block)(const float *const *q, int nq, int64_t hd, const void *kt, int f16,
                     float *const *s);
    /* attention: for each of nq queries, y[i][0..hd) += w[i][j] * v[j][0..hd)
     * for j < n, j in order (v F32); a query's sums do not depend on nq */
    void (*pv_block)(const float *const *w, float *const *y, int nq, const float *v,
                     int64_t hd, int n);
    /* n F16 or F32 elements at src as floats in dst */
    void (*kv_to_f32)(const void *src, int64_t n, int f16, float *dst);
    /* softmax of x[0..n) * scale in place: e^(x*scale - max) over their sum
     * (kept in double), rounded to fp16 values when round16 is set. A
     * finite sink is one more logit, unscaled, that joins the max and the
     * sum but has no output (ggml_soft_max_add_sinks); -INFINITY: none */
    void (*softmax)(float *x, int64_t n, float scale, int round16, float sink);
    /* g[i] = silu(g[i]) * u[i] = g[i] / (1 + e^-g[i]) * u[i] */
    void (*swiglu)(float *g, const float *u, int64_t n);
    /* x[0..n) rounded to the nearest fp16 value, in place (same bits on every ISA) */
    void (*round_f16)(float *x, int64_t n);
};

/* The function members of a table, for a file that defines them under
 * these names (cpu_dot.c, cpu_dot_x86.h): one list, so a new kernel cannot
 * be forgotten in one table. */
#define CPU_DOT_FUNCS                                                                            \
    .gemm = {[GGML_TYPE_F32] = gemm_f32,   [GGML_TYPE_F16] = gemm_f16,                           \
             [GGML_TYPE_BF16] = gemm_bf16, [GGML_TYPE_Q4_0] = gemm_q4_0,                         \
             [GGML_TYPE_Q8_0] = gemm_q8_0, [GGML_TYPE_Q4_K] = gemm_q4_K,                         \
             [GGML_TYPE_Q5_K] = gemm_q5_K, [GGML_TYPE_Q6_K] = gemm_q6_K,                         \
             [GGML_TYPE_Q5_0] = cpu_gemm_q5_0, [GGML_TYPE_Q5_1] = cpu_gemm_q5_1,                 \
             [GGML_TYPE_MXFP4] = gemm_mxfp4},                                                    \
    .kq_block = kq_block, .pv_block = pv_block, .kv_to_f32 = kv_to_f32, .softmax = softmax,      \
    .swiglu = swiglu, .round_f16 = round_f16

/* The best table this CPU runs (checked with cpuid on every call; cheap). */
const struct cpu_dot *cpu_dot_best(void);
/* The table for isa, or NULL when the CPU or the build lacks it. */
const struct cpu_dot *cpu_dot_for(enum cpu_isa isa);

extern const struct cpu_dot cpu_dot_scalar;
extern const struct cpu_dot cpu_dot_avx2;   /* defined only on x86-64 builds */
extern const struct cpu_dot cpu_dot_avx512; /* defined only on x86-64 builds */

/* ---- thread pool (cpu_pool.c) ----------------------------------------- */

struct cpu_pool; /* opaque */

typedef void cpu_pool_fn(void *arg, int ith, int nth);

/* Starts n - 1 worker threads (the caller is thread 0). MF_ENOMEM/MF_EIO;
 * *out is NULL on failure. */
int cpu_pool_new(int n, struct cpu_pool **out, struct mf_err *err);
/* Stops and joins the workers. Accepts NULL. */
void cpu_pool_free(struct cpu_pool *p);
int cpu_pool_size(const struct cpu_pool *p);
/* Runs fn(arg, ith, nth) on every thread and returns when all are done. */
void cpu_pool_run(struct cpu_pool *p, cpu_pool_fn *fn, void *arg);
/* Called by every thread inside fn: returns when all nth have arrived. */
void cpu_pool_barrier(struct cpu_pool *p);

/* ---- one step (cpu.c plans it, cpu_fwd.c computes it) ----------------- */

/* One (row, adapter) use of LoRA: row is the token row of the phase's input
 * (all new tokens for the layers, the logits rows for the output). */
struct cpu_pair {
    int32_t row;   /* input/output row */
    int32_t lora;  /* adapter id (model->loras index) */
    float scale;   /* batch_lora scale for it */
};

/* The pairs of one adapter, contiguous in cpu_lora_plan.pairs. Groups are
 * sorted by adapter id, so a row's adapters are always added in the same
 * order, whatever else is in the batch. */
struct cpu_group {
    int32_t lora;  /* adapter id */
    int32_t first; /* index of its first pair */
    int32_t n;     /* its pairs */
};

struct cpu_lora_plan {
    struct cpu_pair *pairs;   /* n_pairs, grouped by adapter */
    int32_t n_pairs;
    struct cpu_group *groups; /* n_groups, by ascending adapter id */
    int32_t n_groups;
    int32_t max_group;        /* pairs in the largest group */
    int32_t *row_first;       /* per row: first entry of its pairs in row_pairs */
    int32_t *row_pairs;       /* pair indices ordered by row */
};

/* Attention work: one sequence, one KV head (and the query heads sharing
 * it), a run of that sequence's new tokens, all computed together so each
 * key and value block is read once for all of them. */
struct cpu_att_item {
    int32_t seq;     /* batch sequence */
    int32_t head_kv; /* KV head */
    int32_t t0, t1;  /* step token rows [t0, t1) */
};

#define CPU_MAX_CHUNK_ROWS 256 /* weight rows per matmul work chunk, at most */
#define CPU_CHUNK_BYTES (256u << 10) /* weight bytes per chunk, at most (L2 share) */
#define CPU_LORA_SLOTS 3       /* projections sharing one input (q, k, v) */

/* One projection of a matmul phase: weight rows against token rows. */
struct cpu_job {
    const struct model_weight *w;   /* weight, [in, out] (an expert's view for MoE) */
    int32_t target;                 /* model target index for LoRA */
    int32_t slot;                   /* lora_tmp slot of its shrink results */
    const float *xf;                /* float input rows (also the LoRA input) */
    int64_t xf_stride;              /* floats between input rows */
    int32_t row0;                   /* row of its first input in the act buffers */
    int32_t n_rows;                 /* token rows */
    float *y;                       /* output rows */
    int64_t ys;                     /* floats between output rows */
    int add;                        /* 1: y += W x (residual) */
    const struct cpu_lora_plan *lp; /* LoRA pairs over these rows */
};

struct cpu_step {
    const struct model *m;        /* borrowed */
    const struct cpu_dot *dot;    /* kernels for this CPU */
    const struct quant_ops *qops; /* dequantizers (embedding rows) */
    struct cpu_pool *pool;        /* borrowed from the backend */
    const struct batch *batch;    /* borrowed for the step */
    uint8_t *kv;                  /* the arena (backend.h layout) */
    int kv_f16;                   /* 1: F16 elements, 0: F32 */
    int32_t T;                    /* new tokens in the step */
    int32_t n_out;                /* rows of logits */
    int32_t *tok_id;              /* (T) token ids */
    int32_t *tok_pos;             /* (T) positions */
    int32_t *tok_seq;             /* (T) batch sequence of each token */
    int32_t *out_tok;             /* (n_out) token row of each logits row */
    float *rope;                  /* (T, n_rope_kinds, n_rot) cos, sin pairs per position */
    float *x;                     /* (T, n_embd) residual stream */
    float *out_x;                 /* (n_out, n_embd) residual of the logits rows, last layer */
    float *out_att;               /* (n_out, n_head * head_dim) their attention output */
    float *ob;                    /* (T, n_embd) a block's output before its post-norm */
    float *xb;                    /* (T, xb_w) normed input or attention output */
    int64_t xb_w;                 /* max(n_embd, n_head * head_dim) */
    float *q;                     /* (T, n_head * head_dim) */
    float *k, *v;                 /* (T, n_head_kv * head_dim) before they go to the arena */
    float *hg, *hu;               /* (T, n_ff) gate and up */
    uint8_t *act[CPU_ACT_COUNT];  /* (act_rows, act_bytes[a]) the input rows of the current
                                     matmul phase in each format it needs; F32 unused */
    float *lora_tmp;              /* (CPU_LORA_SLOTS, max pairs, rank_max): A x per pair */
    int32_t rank_max;             /* largest rank among adapters in the step */
    int32_t pairs_max;            /* max(lp_all.n_pairs, lp_out.n_pairs) */
    struct cpu_lora_plan lp_all;  /* LoRA pairs over all T rows */
    struct cpu_lora_plan lp_out;  /* LoRA pairs over the n_out logits rows */
    struct cpu_lora_plan lp_none; /* no pairs (routers, experts) */
    struct cpu_att_item *items;   /* attention work */
    int32_t n_items;
    int32_t att_run;              /* tokens per attention item (cpu.c sizes it) */
    size_t att_stride;            /* floats per query's score row: longest sequence,
                                     rounded up to whole blocks */
    float *scratch;               /* (nth, scratch_n) per-thread floats */
    size_t scratch_n;             /* floats per thread */
    /* mixture of experts, R = T * n_expert_used (token, choice) pairs */
    float *router;                /* (T, n_expert) router logits, then probabilities */
    int32_t *sel;                 /* (R) expert of pair t * n_used + j, best first */
    float *selw;                  /* (R) its weight */
    int32_t *eoff;                /* (n_expert + 1) first gathered row of each expert */
    int32_t *grow;                /* (R) token row of each gathered row */
    int32_t *prow;                /* (R) gathered row of each pair */
    float *xg;                    /* (R, n_embd) gathered inputs, grouped by expert */
    float *hge, *hue;             /* (R, n_ff_exp) their gate and up */
    float *og;                    /* (R, n_embd) their expert outputs */
    struct model_weight *ew;      /* (3 n_expert) expert views of the current layer */
    struct cpu_job *ejobs;        /* (3 n_expert) expert jobs of the current layer */
    atomic_int ctr[2];            /* work counters, alternating between phases */
};

/* ---- the forward pass (cpu_fwd.c, cpu_attn.c, cpu_moe.c) --------------- */

/* Rows [*r0, *r1) of n that thread ith of nth takes in a per-token phase. */
void cpu_rows_of(int32_t n, int ith, int nth, int32_t *r0, int32_t *r1);

/* Starts a dynamic phase (its number in *ph) for cpu_matmul/cpu_attention. */
int cpu_next_phase(struct cpu_step *s, int *ph, int ith);

/* Converts input rows [r0, r1) of jobs[0].xf into the formats the jobs'
 * weights (and LoRA A matrices) need, at act rows row0 + r, and runs their
 * LoRA shrinks. All jobs share one input. */
void cpu_prep_rows(struct cpu_step *s, const struct cpu_job *jobs, int n_jobs, int32_t r0,
                   int32_t r1);

/* Runs n_jobs jobs as one matmul phase ph: every thread takes (job, weight
 * row chunk) pairs from a shared counter until none is left. */
void cpu_matmul(struct cpu_step *s, const struct cpu_job *jobs, int n_jobs, int ph, int ith,
                int nth);

/* ggml_rms_norm then ggml_mul by w (the sum of squares kept in double). */
void cpu_rmsnorm(float *out, const float *x, const struct model_weight *w, int64_t n,
                 float eps);

/* The gate's activation times up, in place in g: SiLU through the kernel
 * table, GELU as llama.cpp's CPU computes it. */
void cpu_act_mul(const struct cpu_step *s, float *g, const float *u, int64_t n);

/* The KV_BLOCK_TOKENS x head_dim elements of (block, layer, K or V, head). */
uint8_t *cpu_kv_base(const struct cpu_step *s, int32_t block, int32_t layer, int32_t kv,
                     int32_t head);

/* Attention phase ph of layer: every item, over the sequence's blocks. */
void cpu_attention(struct cpu_step *s, int32_t layer, int ph, int ith);

/* The routed FFN of layer over n rows of normed input xb whose router
 * logits are in s->router: out[r] (+)= the experts' weighted sum (add:
 * accumulate). Runs its own phases and barriers; every thread calls it. */
void cpu_moe(struct cpu_step *s, int32_t layer, int32_t n, float *out, int add, int *ph, int ith,
             int nth);

/* Runs the forward pass of s on every pool thread (cpu_pool_fn). */
void cpu_fwd_run(void *arg, int ith, int nth);

#endif
