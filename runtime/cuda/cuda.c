/*
 * cuda.c: the CUDA backend's lifecycle and its step (backend.h over the
 * kernels of kernels/kernels.h).
 *
 * create: checks every tensor against what the kernels read
 * (cuda_plan_weights), uploads them once, in their GGUF block formats, into
 * one device buffer through pinned staging (mfk_upload), and allocates the
 * step scratch for cfg.max_tokens tokens / cfg.max_logits logits rows, so
 * kv_alloc sees the memory really left; the model's LoRA adapters are
 * uploaded too (cuda_lora_upload).
 * kv_alloc: the arena (backend.h layout, F16 or 8-bit) from cuda_plan_kv_budget.
 * step: one host->device copy of the step's arrays (cuda_plan_step_fill),
 * then per layer: RMSNorm, q/k/v GEMV, RoPE + paged K/V store, attention,
 * o GEMV added to the residual, RMSNorm, gate/up GEMV, SwiGLU, down GEMV
 * added to the residual (a routed layer's FFN: cuda_moe.c; each product a
 * tensor-core GEMM instead when the step has MFC_CUDA_GEMM_MIN tokens or
 * more, and followed by the sequences'
 * LoRA adapters: matmul, cuda_lora.c); then the logits rows are gathered,
 * normed, projected and copied back. A decode step without adapters is
 * padded to a recorded shape (cuda_plan_graph_tokens) and replayed as a CUDA
 * graph once that shape was seen (graph_step; MFC_CUDA_GRAPHS=0: never); one
 * block past the budget's takes the padding tokens' K/V. Every call is checked; the first failure
 * ends the step with its error (the KV written so far is then undefined
 * for the step's new positions only, as on the CPU after a failure).
 *
 * States: CREATED --kv_alloc--> READY --step--> READY; free from any.
 * Owns the context, every device buffer and the pinned step buffer.
 */
#include "config.h"

#include "runtime/cuda/cuda.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/cuda/cuda_lora.h"
#include "runtime/cuda/cuda_moe.h"
#include "runtime/cuda/cuda_plan.h"

#ifdef MFC_HAVE_CUDA_RUNTIME

#include "kernels/kernels.h"

#define DEFAULT_MAX_TOKENS 2048
#define DEFAULT_MAX_SEQS 256
#define GRAPH_SLOTS 32 /* recorded decode steps kept, least recently used dropped */
#define LORA_CHUNK 256 /* rows of a LoRA group gathered for one shrink/expand */

/* One recorded decode step (cuda_plan_graph_tokens): its shape, and the
 * graph or the fact that recording it failed (then that shape runs eagerly). */
struct cuda_graph_slot {
    int32_t T, ctx, splits; /* padded tokens, attention context cap and splits; T 0: empty */
    int32_t dtiles;         /* the step's decode tiles (p->dtiles): a context's length
                               decides them at small batches */
    int32_t dwarps;         /* and their kernel's warps (p->dwarps), which it decides too */
    struct mfk_graph *g;   /* NULL with failed set */
    int failed;
    uint64_t used;         /* cb->gclock at the last use */
};

struct cuda_layer {
    struct mfk_weight w[MODEL_W_PER_LAYER]; /* device copies, by enum model_wid */
    const float *attn_norm, *ffn_norm;      /* device */
    const float *bias[3];                   /* device q/k/v biases, or NULL */
    const float *q_norm, *k_norm;           /* device per-head norms, or NULL */
    const float *attn_post, *ffn_post;      /* device post-norms, or NULL */
    struct mfk_kv_shape ks;                 /* the layer's attention shape and switches */
    int masked;                             /* 1: a window or soft-cap, which the decode
                                               tiles (k_flash_dec) do not take */
};

struct cuda_backend {
    struct backend base;         /* ops = &cuda_backend_ops; must be first */
    const struct model *m;       /* borrowed */
    struct backend_config cfg;   /* defaults filled in */
    struct mfk_ctx *ctx;         /* owned */
    struct cuda_wplan plan;      /* where each tensor lives in wbuf */
    uint8_t *wbuf;               /* device: all weights */
    uint8_t *bf16buf;            /* device: the bf16 copies (MFC_CUDA_BF16_WEIGHTS), or NULL */
    struct mfk_weight tok_embd, output;
    const float *out_norm;       /* device */
    struct cuda_layer *layers;   /* owned: n_layer */
    struct cuda_moe moe;         /* routed layers' weights and buffers (cuda_moe.c) */
    void *kv;                    /* device: the arena, F16 or 8-bit (cfg.kv_type) */
    int32_t n_blocks;
    /* step scratch (device), sized for cfg.max_tokens rows */
    float *x, *xb, *q, *k, *v, *att, *hg, *hu, *out_x, *logits;
    int32_t *ids;                /* device: argmax results */
    int32_t last_out;            /* logits rows of the last step */
    /* tensor-core GEMM (mfk_gemm) for steps of gemm_min tokens or more (2 for
     * F32/F16/BF16 weights); 0: GEMV only */
    int32_t gemm_min;
    void *gscratch;              /* device: mfk_gemm's scratch */
    size_t gscratch_bytes;
    struct mfk_q8 q8;            /* device: the 8-bit input of small steps' K-quant products */
    struct cuda_lora_set lora;   /* the model's adapters (cuda_lora.c) */
    float *lora_tmp;             /* device: max_tokens x rank_max (shrink results) */
    float *lora_xg, *lora_yg;    /* device: LORA_CHUNK rows of in_max / out_max (groups) */
    struct cuda_lora_rows *lrows; /* owned: max_seqs + 1 entries, filled per step */
    struct cuda_lora_group *lgroups; /* owned: n_loras entries, filled per step */
    /* each group's rows and scales, the step's tokens' lists then its logits
     * rows' (two regions, so the second fill leaves the first's queued copy be):
     * pinned host and device copies of lora_cap entries each */
    int32_t *lg_rows_h, *lg_rows_d;
    size_t lora_cap[2];
    struct cuda_lora_run lrun;    /* this step's LoRA work; n_rows 0: none */
    uint8_t *hsample, *dsample;  /* pinned host / device draws and adjust lists
                                    (max_seqs of each, allocated on first use) */
    /* the step arrays: two pinned host buffers, filled in turn, so a step's
     * arrays are written while the copy out of the last step's may still be
     * queued (a step whose logits stay for the device draw returns without
     * a sync); one device buffer, which the stream orders */
    uint8_t *hstep[2], *dstep;
    size_t step_cap;             /* bytes of each */
    int hcur;                    /* hstep[hcur]: the last step's */
    int unsynced;                /* steps returned since the stream was last synced */
    double t_last_end;           /* when the last step returned (CLOCK_MONOTONIC s), 0: none */
    struct cuda_upload_stats st;
    int32_t sms;                 /* the device's multiprocessors (attention splits) */
    int att_split;               /* MFC_CUDA_ATTENTION_SPLIT (cuda_plan_switch) */
    int mmq;                     /* MFC_CUDA_MMQ: Q4_K products of up to CUDA_PLAN_MMQ_MAX
                                    tokens on mmq.cu rather than cuBLAS */
    int pdl;                     /* MFC_CUDA_PDL: programmatic dependent launches */
    int att_cluster;             /* MFC_CUDA_ATTENTION_CLUSTER: a split context in one launch */
    int dtiles;                  /* MFC_CUDA_DECODE_TILES: decode tokens a tile each (F16
                                    arena only; when: cuda_plan_step_size) */
    int bf16w;                   /* MFC_CUDA_BF16_WEIGHTS: bf16 copies of quantized matrices */
    /* decode steps as CUDA graphs (MFC_CUDA_GRAPHS): the recorded shapes; they
     * hold dstep's and the kernels' scratch address, so they are dropped when
     * either moves (gstep, ggen) */
    int graphs;
    int32_t pad_blk;             /* the arena's block for padding tokens; -1: none */
    struct cuda_graph_slot gslots[GRAPH_SLOTS];
    uint64_t gclock, ggen;
    const uint8_t *gstep;
};

static struct cuda_backend *cb_of(struct backend *b)
{
    return (struct cuda_backend *)(void *)b;
}

int cuda_device_count(void)
{
    struct mf_err err = {0};
    int n = 0;
    return mfk_device_count(&n, &err) ? 0 : n;
}

static void cuda_free(struct backend *b)
{
    struct cuda_backend *cb = cb_of(b);
    if (!cb)
        return;
    if (cb->ctx) {
        struct mf_err err = {0};
        mfk_sync(cb->ctx, &err); /* nothing may still use the buffers */
    }
    for (int i = 0; i < GRAPH_SLOTS; i++)
        mfk_graph_free(cb->gslots[i].g);
    mfk_free(cb->wbuf);
    mfk_free(cb->bf16buf);
    mfk_free(cb->kv);
    mfk_free(cb->x); /* the whole step scratch: x is its first slice */
    cuda_moe_free(&cb->moe);
    mfk_free(cb->dstep);
    mfk_free(cb->gscratch);
    mfk_free(cb->lora_tmp);
    mfk_free(cb->lora_xg);
    mfk_free(cb->lg_rows_d);
    mfk_host_free(cb->lg_rows_h);
    cuda_lora_free(&cb->lora);
    free(cb->lrows);
    free(cb->lgroups);
    mfk_host_free(cb->hstep[0]);
    mfk_host_free(cb->hstep[1]);
    mfk_free(cb->dsample);
    mfk_host_free(cb->hsample);
    mfk_ctx_free(cb->ctx);
    cuda_wplan_free(&cb->plan);
    free(cb->layers);
    free(cb);
}

static struct mfk_weight dev_weight(const struct cuda_backend *cb, const struct model_weight *w)
{
    const struct cuda_wslot *s = cuda_wplan_find(&cb->plan, w);
    if (!s) /* absent: a routed layer's dense FFN */
        return (struct mfk_weight){0};
    return (struct mfk_weight){
        .data = cb->wbuf + s->off, .type = (int)w->type, .ne0 = w->ne0, .ne1 = w->ne1,
        .row_bytes = w->row_bytes};
}

static const float *dev_vec(const struct cuda_backend *cb, const struct model_weight *w)
{
    if (!w->data)
        return NULL;
    return (const float *)(const void *)(cb->wbuf + cuda_wplan_find(&cb->plan, w)->off);
}

/* Layer l's device tensors and its attention shape: the family's switches
 * resolved (cuda_plan_layer_shape). */
static void bind_layer(struct cuda_backend *cb, int32_t l)
{
    const struct model_layer *ml = &cb->m->layers[l];
    struct cuda_layer *L = &cb->layers[l];

    for (int w = 0; w < MODEL_W_PER_LAYER; w++)
        L->w[w] = dev_weight(cb, &ml->w[w]);
    L->attn_norm = dev_vec(cb, &ml->attn_norm);
    L->ffn_norm = dev_vec(cb, &ml->ffn_norm);
    for (int i = 0; i < 3; i++)
        L->bias[i] = dev_vec(cb, &ml->bias[i]);
    L->q_norm = dev_vec(cb, &ml->q_norm);
    L->k_norm = dev_vec(cb, &ml->k_norm);
    L->attn_post = dev_vec(cb, &ml->attn_post_norm);
    L->ffn_post = dev_vec(cb, &ml->ffn_post_norm);
    L->masked = cuda_plan_layer_shape(cb->m, l, cb->cfg.kv_type, &L->ks);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int upload(struct cuda_backend *cb, struct mf_err *err)
{
    double t0 = now_s();
    int rc = mfk_malloc(cb->ctx, cb->plan.total, (void **)&cb->wbuf, err);
    for (int32_t i = 0; !rc && i < cb->plan.n; i++)
        rc = mfk_upload(cb->ctx, cb->wbuf + cb->plan.slots[i].off, cb->plan.slots[i].w->data,
                        cb->plan.slots[i].bytes, err);
    if (rc)
        return rc;
    cb->st.bytes = cb->plan.total;
    cb->st.seconds = now_s() - t0;
    return 0;
}

/* Step scratch: one device allocation carved into the activations. */
static int alloc_scratch(struct cuda_backend *cb, struct mf_err *err)
{
    const struct model_hparams *hp = &cb->m->hp;
    size_t T = (size_t)cb->cfg.max_tokens, S = (size_t)cb->cfg.max_logits;
    size_t qd = (size_t)hp->n_head * (size_t)hp->head_dim;
    size_t kvd = (size_t)hp->n_head_kv * (size_t)hp->head_dim;
    size_t xbw = qd > (size_t)hp->n_embd ? qd : (size_t)hp->n_embd;
    size_t n[] = {T * (size_t)hp->n_embd, T * xbw, T * qd, T * kvd, T * kvd, T * qd,
                  T * (size_t)hp->n_ff, T * (size_t)hp->n_ff, S * (size_t)hp->n_embd,
                  S * (size_t)hp->n_vocab, S};
    float **dst[] = {&cb->x, &cb->xb, &cb->q, &cb->k, &cb->v, &cb->att, &cb->hg, &cb->hu,
                     &cb->out_x, &cb->logits, (float **)(void *)&cb->ids};
    size_t total = 0, off[11];
    uint8_t *base;
    int rc;

    for (int i = 0; i < 11; i++) {
        off[i] = total;
        total += (n[i] * 4 + CUDA_PLAN_ALIGN - 1) / CUDA_PLAN_ALIGN * CUDA_PLAN_ALIGN;
    }
    /* cb->q8: up to CUDA_PLAN_MMQ_MAX rows of the widest product input */
    size_t wide = (size_t)(hp->n_ff > hp->n_embd ? hp->n_ff : hp->n_embd);
    size_t q8n = (T < CUDA_PLAN_MMQ_MAX ? T : CUDA_PLAN_MMQ_MAX) * wide;
    size_t q8off = total, q8bytes = q8n + 2 * (q8n / 32) * sizeof(float);
    total += (q8bytes + CUDA_PLAN_ALIGN - 1) / CUDA_PLAN_ALIGN * CUDA_PLAN_ALIGN;
    rc = mfk_malloc(cb->ctx, total, (void **)&base, err);
    if (rc)
        return rc;
    for (int i = 0; i < 11; i++)
        *dst[i] = (float *)(void *)(base + off[i]);
    cb->q8.q = (int8_t *)(base + q8off);
    cb->q8.d = (float *)(void *)(base + q8off + (q8n + 15) / 16 * 16);
    cb->q8.s = cb->q8.d + q8n / 32;
    return 0;
}

/* &cb->q8 when the kernel making the input of these n (<= 3) products
 * should write its 8-bit form too (cuda_plan_q8_input), else NULL. */
static const struct mfk_q8 *q8_for(const struct cuda_backend *cb, int n,
                                   const struct mfk_weight *const *w, int32_t T)
{
    enum ggml_type types[3];
    for (int i = 0; i < n && i < 3; i++)
        types[i] = (enum ggml_type)w[i]->type;
    return cuda_plan_q8_input(n < 3 ? n : 3, types, w[0]->ne0, T, cb->cfg.max_tokens,
                              cb->gemm_min, cb->mmq)
               ? &cb->q8
               : NULL;
}

/* What LoRA steps need besides the pairs: the per-step row lists (host
 * and device, for max_tokens and then max_logits rows under BATCH_MAX_LORAS
 * adapters each), the shrink results and the gathered rows of a group. */
static int lora_alloc(struct cuda_backend *cb, struct mf_err *err)
{
    const size_t T = (size_t)cb->cfg.max_tokens, chunk = T < LORA_CHUNK ? T : LORA_CHUNK;
    cb->lora_cap[0] = T * BATCH_MAX_LORAS;
    cb->lora_cap[1] = (size_t)cb->cfg.max_logits * BATCH_MAX_LORAS;
    const size_t entries = cb->lora_cap[0] + cb->lora_cap[1], list = entries * 8;
    cb->lrows = calloc((size_t)cb->cfg.max_seqs + 1, sizeof *cb->lrows);
    cb->lgroups = calloc((size_t)cb->lora.n_loras, sizeof *cb->lgroups);
    if (!cb->lrows || !cb->lgroups)
        return mf_err_set(err, MF_ENOMEM, "out of memory for LoRA rows");
    int rc = mfk_malloc(cb->ctx, T * (size_t)cb->lora.rank_max * sizeof(float),
                        (void **)&cb->lora_tmp, err);
    if (!rc)
        rc = mfk_malloc(cb->ctx,
                        chunk * (size_t)(cb->lora.in_max + cb->lora.out_max) * sizeof(float),
                        (void **)&cb->lora_xg, err);
    if (!rc)
        rc = mfk_host_alloc(list, (void **)&cb->lg_rows_h, err);
    if (!rc)
        rc = mfk_malloc(cb->ctx, list, (void **)&cb->lg_rows_d, err);
    cb->lora_yg = cb->lora_xg ? cb->lora_xg + chunk * (size_t)cb->lora.in_max : NULL;
    return rc;
}

/* The GEMM path (mfk_gemm): cuBLAS present and MFC_CUDA_GEMM_MIN
 * (cuda_plan_gemm_min) not 0. Measured on an H200 with Llama-3-8B shapes (bench/README): F32,
 * F16 and BF16 weights, read in place, win from 2 tokens a step; quantized
 * ones pay a dequantization to bf16 per step (~15 ms for Q4_K_M), which the
 * GEMV beats up to 4 tokens. Its scratch, for max_tokens against the widest
 * weight, is allocated before kv_alloc takes what is left. Without cuBLAS
 * the GEMV kernels serve every step (cuda_backend_stats says which). */
static int setup_gemm(struct cuda_backend *cb, struct mf_err *err)
{
    struct mf_err why = {0};
    size_t need = 0;
    int rc = cuda_plan_gemm_min(getenv("MFC_CUDA_GEMM_MIN"), &cb->gemm_min, err);
    if (rc)
        return rc;
    if (cb->gemm_min <= 0 || !mfk_gemm_available(cb->ctx, &why)) {
        cb->gemm_min = 0;
        return 0;
    }
    for (int32_t l = 0; l < cb->m->hp.n_layer; l++)
        for (int w = 0; w < MODEL_W_PER_LAYER; w++) {
            size_t n = mfk_gemm_scratch(&cb->layers[l].w[w], cb->cfg.max_tokens);
            need = n > need ? n : need;
        }
    size_t n = mfk_gemm_scratch(&cb->output, cb->cfg.max_logits);
    need = n > need ? n : need;
    for (size_t i = 0; cb->lora.pairs && i < (size_t)cb->lora.n_loras * (size_t)cb->lora.n_targets; i++)
        if (cb->lora.pairs[i].live) {
            n = mfk_gemm_scratch(&cb->lora.pairs[i].a, cb->cfg.max_tokens);
            need = n > need ? n : need;
            n = mfk_gemm_scratch(&cb->lora.pairs[i].b, cb->cfg.max_tokens);
            need = n > need ? n : need;
        }
    cb->gscratch_bytes = need;
    return mfk_malloc(cb->ctx, need, &cb->gscratch, err);
}

/* Every quantized matrix the tensor cores take dequantized to bf16 once,
 * in one buffer (w->bf16), so that mfk_gemm reads 2 bytes a weight and
 * does not dequantize each step: batched decode of a quantized model at
 * the speed of its BF16 form, for the BF16 form's memory on top of the
 * quantized one (which the GEMV, at a few tokens, still reads). The
 * tensor cores then take Q4_K from gemm_min tokens, like every other
 * type: mmq.cu's integer tiles lose to cuBLAS on bf16 rows (H200,
 * Llama-3-8B: batch 8 of BF16 ran 1,270 tokens/s, mmq's Q4_K_M 1,083). */
static int bf16_copies(struct cuda_backend *cb, struct mf_err *err)
{
    const int32_t nl = cb->m->hp.n_layer, n = nl * MODEL_W_PER_LAYER + 1;
    size_t total = 0, off = 0;
    double t0 = now_s();
    int rc = 0;
    for (int pass = 0; pass < 2 && !rc; pass++) {
        for (int32_t i = 0; i < n && !rc; i++) { /* every layer's matrices, then the output */
            struct mfk_weight *w = i < n - 1
                                       ? &cb->layers[i / MODEL_W_PER_LAYER].w[i % MODEL_W_PER_LAYER]
                                       : &cb->output;
            if (w->type == GGML_TYPE_F32 || w->type == GGML_TYPE_F16 || w->type == GGML_TYPE_BF16)
                continue; /* the tensor cores read these as they are */
            if (pass == 1) {
                w->bf16 = cb->bf16buf + off;
                rc = mfk_dequant_half(cb->ctx, w, 0, (int32_t)w->ne1, cb->bf16buf + off, 1, err);
            }
            off += ((size_t)w->ne0 * (size_t)w->ne1 * 2 + CUDA_PLAN_ALIGN - 1) / CUDA_PLAN_ALIGN *
                   CUDA_PLAN_ALIGN;
        }
        if (pass == 0) {
            if ((total = off) == 0)
                return 0; /* nothing quantized */
            rc = mfk_malloc(cb->ctx, total, (void **)&cb->bf16buf, err);
            off = 0;
        }
    }
    if (!rc)
        rc = mfk_sync(cb->ctx, err);
    cb->mmq = 0; /* see above */
    cb->st.bf16_bytes = total;
    cb->st.bf16_seconds = now_s() - t0;
    return rc;
}

/* y[i] = W[i] x over T tokens for n weights of one input (n <= 3): each on
 * the tensor cores past the measured crossover (see setup_gemm), the rest
 * through one mfk_gemv_n, which quantizes the input once for them; then the
 * step's adapters of each model target (cb->lrun, cuda_lora.c). rounded:
 * the tensor cores' input is already in the GEMM scratch (norm_rounded). */
static int matmul_n(struct cuda_backend *cb, int n, const int32_t *target,
                    const struct mfk_weight *const *w, const float *x, int64_t ldx, int32_t T,
                    float *const *y, const int64_t *ldy, int add, const struct mfk_q8 *xq8,
                    int rounded, struct mf_err *err)
{
    const struct mfk_weight *gw[3], *tw[3];
    float *gy[3], *ty[3];
    int64_t gld[3], tld[3];
    int ng = 0, nt = 0, rc = 0;
    for (int i = 0; i < n; i++) {
        int32_t from = cuda_plan_gemm_from((enum ggml_type)w[i]->type, cb->gemm_min, cb->mmq);
        if (from > 0 && T >= from)
            tw[nt] = w[i], ty[nt] = y[i], tld[nt++] = ldy[i];
        else
            gw[ng] = w[i], gy[ng] = y[i], gld[ng++] = ldy[i];
    }
    if (nt && rounded)
        rc = mfk_gemm_rounded_n(cb->ctx, nt, tw, T, ty, tld, add, cb->gscratch, cb->gscratch_bytes,
                                err);
    if (nt && !rounded)
        rc = mfk_gemm_n(cb->ctx, nt, tw, x, ldx, T, ty, tld, add, cb->gscratch,
                        cb->gscratch_bytes, err);
    if (!rc && ng)
        rc = mfk_gemv_n(cb->ctx, ng, gw, x, ldx, T, gy, gld, add, xq8, err);
    for (int i = 0; !rc && cb->lrun.n_rows && i < n; i++)
        rc = cuda_lora_apply(&cb->lora, &cb->lrun, target[i], x, ldx, y[i], ldy[i], err);
    return rc;
}

static int matmul(struct cuda_backend *cb, int32_t target, const struct mfk_weight *w,
                  const float *x, int64_t ldx, int32_t T, float *y, int64_t ldy, int add,
                  const struct mfk_q8 *xq8, struct mf_err *err)
{
    return matmul_n(cb, 1, &target, &w, x, ldx, T, &y, &ldy, add, xq8, 0, err);
}

/* The RMSNorm before n products of its output (cb->xb): with the output
 * rounded into the GEMM scratch too where every product takes the tensor
 * cores (cuda_plan_norm_rounded; mfk_gemm_n's own rounding launch saved),
 * *rounded then 1 for matmul_n. */
static int norm_rounded(struct cuda_backend *cb, const float *g, int64_t xbw, int32_t T, int n,
                        const struct mfk_weight *const *w, const struct mfk_q8 *q8, int *rounded,
                        struct mf_err *err)
{
    const struct model_hparams *hp = &cb->m->hp;
    const int64_t E = hp->n_embd;
    enum ggml_type types[3];
    for (int i = 0; i < n; i++)
        types[i] = (enum ggml_type)w[i]->type;
    *rounded = cuda_plan_norm_rounded(n, types, T, cb->gemm_min, cb->mmq);
    return mfk_rmsnorm_rounded(cb->ctx, cb->x, E, NULL, 0, g, cb->xb, xbw, T, E, hp->rms_eps, q8,
                               *rounded ? cb->gscratch : NULL, mfk_gemm_rounding(w[0]) == 2, err);
}

static int cuda_create(const struct model *m, const struct backend_config *cfg,
                       struct backend **out, struct mf_err *err)
{
    struct cuda_backend *cb;
    int rc, n = 0, qexact = 0, qsk = 0;

    *out = NULL;
    if (!cuda_plan_kv_ok(cfg->kv_type))
        return mf_err_set(err, MF_EUNSUPPORTED,
                          "the CUDA backend stores KV in F16, 8-bit integers or FP8 (e4m3)");
    rc = mfk_device_count(&n, err);
    if (rc)
        return rc;
    if (n == 0)
        return mf_err_set(err, MF_EUNSUPPORTED, "no CUDA device is visible");
    cb = calloc(1, sizeof *cb);
    if (!cb)
        return mf_err_set(err, MF_ENOMEM, "out of memory for the CUDA backend");
    cb->base.ops = &cuda_backend_ops;
    cb->m = m;
    cb->cfg = *cfg;
    cb->pad_blk = -1;
    if (cb->cfg.max_tokens <= 0)
        cb->cfg.max_tokens = DEFAULT_MAX_TOKENS;
    if (cb->cfg.max_seqs <= 0)
        cb->cfg.max_seqs = DEFAULT_MAX_SEQS;
    if (cb->cfg.max_logits <= 0)
        cb->cfg.max_logits = cb->cfg.max_seqs;
    if (cb->cfg.max_logits > cb->cfg.max_tokens)
        cb->cfg.max_logits = cb->cfg.max_tokens; /* a row is a token's */
    cb->layers = calloc((size_t)m->hp.n_layer, sizeof *cb->layers);
    if (!cb->layers)
        rc = mf_err_set(err, MF_ENOMEM, "out of memory for %d layers", m->hp.n_layer);
    if (!rc)
        rc = cuda_plan_weights(m, &cb->plan, err);
    if (!rc)
        rc = cuda_plan_switch("MFC_CUDA_ATTENTION_SPLIT", getenv("MFC_CUDA_ATTENTION_SPLIT"), 1,
                              &cb->att_split, err);
    if (!rc)
        rc = cuda_plan_switch("MFC_CUDA_GRAPHS", getenv("MFC_CUDA_GRAPHS"), 1, &cb->graphs, err);
    if (!rc)
        rc = cuda_plan_switch("MFC_CUDA_MMQ", getenv("MFC_CUDA_MMQ"), 1, &cb->mmq, err);
    if (!rc)
        rc = cuda_plan_switch("MFC_CUDA_PDL", getenv("MFC_CUDA_PDL"), 1, &cb->pdl, err);
    if (!rc)
        rc = cuda_plan_switch("MFC_CUDA_ATTENTION_CLUSTER", getenv("MFC_CUDA_ATTENTION_CLUSTER"),
                              1, &cb->att_cluster, err);
    if (!rc)
        rc = cuda_plan_switch("MFC_CUDA_DECODE_TILES", getenv("MFC_CUDA_DECODE_TILES"), 1,
                              &cb->dtiles, err);
    if (!rc)
        rc = cuda_plan_switch("MFC_CUDA_BF16_WEIGHTS", getenv("MFC_CUDA_BF16_WEIGHTS"), 0,
                              &cb->bf16w, err);
    if (!rc)
        rc = cuda_plan_switch("MFC_CUDA_SAMPLING", getenv("MFC_CUDA_SAMPLING"), 1, &cb->st.sampling,
                              err);
    if (!rc) {
        struct mfk_device_info di;
        rc = mfk_device_query(0, &di, err);
        cb->sms = di.sm_count;
    }
    if (!rc)
        rc = mfk_ctx_new(0, &cb->ctx, err);
    if (!rc)
        rc = mfk_ctx_pdl(cb->ctx, cb->pdl, err);
    if (!rc)
        rc = mfk_ctx_att_cluster(cb->ctx, cb->att_cluster, err);
    if (!rc)
        rc = cuda_plan_switch("MFC_CUDA_QGEMM_EXACT", getenv("MFC_CUDA_QGEMM_EXACT"), 0, &qexact,
                              err);
    if (!rc)
        mfk_ctx_qgemm_exact(cb->ctx, qexact);
    if (!rc)
        rc = cuda_plan_switch("MFC_CUDA_QGEMM_SK", getenv("MFC_CUDA_QGEMM_SK"), 0, &qsk, err);
    if (!rc)
        rc = mfk_ctx_qgemm_sk(cb->ctx, qsk, err);
    if (!rc) {
        int32_t qmax = 0;
        rc = cuda_plan_qgemm_max(getenv("MFC_CUDA_QGEMM_MAX"), &qmax, err);
        if (!rc)
            rc = mfk_ctx_qgemm(cb->ctx, qmax, err);
    }
    if (!rc)
        rc = upload(cb, err);
    if (!rc)
        rc = alloc_scratch(cb, err);
    if (!rc)
        rc = cuda_moe_create(&cb->moe, cb->ctx, m, &cb->plan, cb->wbuf, cb->cfg.max_tokens, err);
    if (!rc) {
        /* the kernels' own scratch (8-bit activations of the Q4_K/Q6_K
         * GEMV with a scale and a sum per 32, split attention's partial
         * sums), taken now so that kv_alloc's budget leaves it be */
        int64_t wide = m->hp.n_ff > m->hp.n_embd ? m->hp.n_ff : m->hp.n_embd;
        rc = mfk_scratch_reserve(cb->ctx,
                                 (size_t)cb->cfg.max_tokens * (size_t)wide * 5 / 4 + ((size_t)4 << 20),
                                 err);
    }
    if (rc) {
        cuda_free(&cb->base);
        return rc;
    }
    cb->tok_embd = dev_weight(cb, &m->tok_embd);
    cb->output = dev_weight(cb, &m->output);
    cb->out_norm = dev_vec(cb, &m->out_norm);
    for (int32_t l = 0; l < m->hp.n_layer; l++) {
        bind_layer(cb, l);
        if (cb->layers[l].masked)
            cb->dtiles = 0; /* decode tokens one at a time, through mfk_attention */
    }
    rc = cuda_lora_upload(&cb->lora, cb->ctx, m, err);
    if (!rc && cb->lora.n_loras)
        rc = lora_alloc(cb, err);
    if (!rc)
        rc = setup_gemm(cb, err);
    if (!rc && cb->bf16w && cb->gemm_min > 0)
        rc = bf16_copies(cb, err);
    if (rc) {
        cuda_free(&cb->base);
        return rc;
    }
    cb->st.gemm_min = cb->gemm_min;
    cb->st.gemm_from_q4k = cuda_plan_gemm_from(GGML_TYPE_Q4_K, cb->gemm_min, cb->mmq);
    *out = &cb->base;
    return 0;
}

static int cuda_kv_alloc(struct backend *b, int32_t *n_blocks, struct mf_err *err)
{
    struct cuda_backend *cb = cb_of(b);
    uint64_t bb = backend_kv_block_bytes(cb->m, cb->cfg.kv_type), budget = 0;
    size_t free_b = 0, total_b = 0;
    int32_t n;
    int rc;

    if (cb->kv)
        return mf_err_set(err, MF_EINVAL, "the KV arena is already allocated");
    rc = mfk_mem_info(cb->ctx, &free_b, &total_b, err);
    if (!rc)
        rc = cuda_plan_kv_budget(total_b, free_b, getenv("MFC_GPU_MEMORY_UTILIZATION"),
                                 cb->cfg.kv_bytes, &budget, err);
    if (rc)
        return rc;
    n = backend_kv_n_blocks(cb->m, cb->cfg.kv_type, budget);
    if (n < 1)
        return mf_err_set(err, MF_ENOMEM,
                          "a GPU KV budget of %" PRIu64 " bytes holds no block of %" PRIu64 " bytes",
                          budget, bb);
    /* one block past the budget takes recorded steps' padding (graph_step);
     * without room for it, steps run eagerly */
    if (cb->graphs && n < INT32_MAX &&
        mfk_malloc(cb->ctx, ((size_t)n + 1) * bb, &cb->kv, &(struct mf_err){0}) == 0)
        cb->pad_blk = n;
    else if ((rc = mfk_malloc(cb->ctx, (size_t)n * bb, &cb->kv, err)) != 0)
        return rc;
    cb->st.kv_bytes = ((uint64_t)n + (cb->pad_blk >= 0)) * bb;
    cb->n_blocks = n;
    *n_blocks = n;
    return 0;
}

/* Grows the pinned and device step buffers to bytes. */
static int reserve_step(struct cuda_backend *cb, size_t bytes, struct mf_err *err)
{
    int rc;

    if (bytes <= cb->step_cap)
        return 0;
    if (cb->unsynced && (rc = mfk_sync(cb->ctx, err))) /* a queued copy may read them */
        return rc;
    cb->unsynced = 0;
    mfk_host_free(cb->hstep[0]);
    mfk_host_free(cb->hstep[1]);
    mfk_free(cb->dstep);
    cb->hstep[0] = cb->hstep[1] = NULL;
    cb->dstep = NULL;
    cb->step_cap = 0;
    bytes = bytes * 2 > (64u << 10) ? bytes * 2 : (64u << 10);
    rc = mfk_host_alloc(bytes, (void **)&cb->hstep[0], err);
    if (!rc)
        rc = mfk_host_alloc(bytes, (void **)&cb->hstep[1], err);
    if (!rc)
        rc = mfk_malloc(cb->ctx, bytes, (void **)&cb->dstep, err);
    if (!rc)
        cb->step_cap = bytes;
    return rc;
}

/* One layer over the step's T tokens. */
static int run_layer(struct cuda_backend *cb, int32_t l, const struct cuda_step_plan *p,
                     int32_t splits, struct mf_err *err)
{
    const struct model_hparams *hp = &cb->m->hp;
    const struct cuda_layer *L = &cb->layers[l];
    struct mfk_ctx *c = cb->ctx;
    const int64_t E = hp->n_embd, qd = (int64_t)hp->n_head * hp->head_dim;
    const int64_t kvd = (int64_t)hp->n_head_kv * hp->head_dim, F = hp->n_ff;
    const int64_t xbw = qd > E ? qd : E;
    const int32_t T = p->T;
    const struct mfk_kv_shape ks = L->ks;
    const int32_t *d32 = (const int32_t *)(void *)cb->dstep;
    const int32_t tb = l * MODEL_W_PER_LAYER; /* model target of this layer's first weight */
    const float *rope = (const float *)(const void *)(cb->dstep + p->rope) +
                        (size_t)cb->m->layers[l].rope_kind * (size_t)T * (size_t)hp->n_rot;
    int rc;

#define D32(field) (d32 + p->field / 4)
    {
        const int32_t tg[3] = {tb + MODEL_W_Q, tb + MODEL_W_K, tb + MODEL_W_V};
        const struct mfk_weight *w[3] = {&L->w[MODEL_W_Q], &L->w[MODEL_W_K], &L->w[MODEL_W_V]};
        float *y[3] = {cb->q, cb->k, cb->v};
        const int64_t ld[3] = {qd, kvd, kvd};
        const struct mfk_q8 *q8 = q8_for(cb, 3, w, T);
        int rounded;
        rc = norm_rounded(cb, L->attn_norm, xbw, T, 3, w, q8, &rounded, err);
        if (!rc)
            rc = matmul_n(cb, 3, tg, w, cb->xb, xbw, T, y, ld, 0, q8, rounded, err);
    }
    if (!rc && (L->bias[0] || L->bias[1] || L->bias[2] || L->q_norm || L->k_norm))
        rc = mfk_qkv_prep(c, T, cb->q, qd, cb->k, cb->v, kvd, hp->n_head, hp->n_head_kv,
                          hp->head_dim, L->bias[0], L->bias[1], L->bias[2], L->q_norm, L->k_norm,
                          hp->rms_eps, err);
    if (!rc)
        rc = mfk_rope_store(c, &ks, l, T, cb->q, qd, cb->k, cb->v, kvd, rope, D32(tok_pos),
                            D32(tok_blk), cb->kv, err);
    if (!rc)
        rc = mfk_attention_tiles(c, &ks, l, p->n_tiles, D32(tiles), cb->q, qd, D32(tok_pos),
                                 D32(tok_toff), D32(tables), cb->kv, cb->att, qd,
                                 cuda_plan_tiles_decode(p), p->dwarps, err);
    /* every token through the split attention: its combine writes the
     * output projection's 8-bit input too */
    const struct mfk_weight *wo = &L->w[MODEL_W_O];
    const struct mfk_q8 *oq8 =
        cuda_plan_combine_q8(T, p->n_tiles, splits) ? q8_for(cb, 1, &wo, T) : NULL;
    if (!rc)
        rc = mfk_attention(c, &ks, l, p->n_single, D32(single), cb->q, qd, D32(tok_pos),
                           D32(tok_toff), D32(tables), cb->kv, p->att_cap, splits, cb->att, qd, oq8,
                           err);
    /* a post-norm (Gemma) takes the block's output from xb into the residual */
    if (!rc)
        rc = matmul(cb, tb + MODEL_W_O, wo, cb->att, qd, T, L->attn_post ? cb->xb : cb->x,
                    L->attn_post ? xbw : E, !L->attn_post, oq8, err);
    if (!rc && L->attn_post)
        rc = mfk_add_norm(c, cb->x, E, cb->xb, xbw, L->attn_post, T, E, hp->rms_eps, err);
    if (!rc && cuda_moe_routed(&cb->moe, l)) { /* a post-norm takes the sum from xb */
        rc = cuda_moe_layer(&cb->moe, l, T, cb->x, E, L->ffn_norm, cb->xb, xbw,
                            L->ffn_post ? cb->xb : cb->x, L->ffn_post ? xbw : E, !L->ffn_post,
                            err);
        if (!rc && L->ffn_post)
            rc = mfk_add_norm(c, cb->x, E, cb->xb, xbw, L->ffn_post, T, E, hp->rms_eps, err);
        return rc;
    }
    if (!rc) {
        const int32_t tg[2] = {tb + MODEL_W_GATE, tb + MODEL_W_UP};
        const struct mfk_weight *w[2] = {&L->w[MODEL_W_GATE], &L->w[MODEL_W_UP]};
        float *y[2] = {cb->hg, cb->hu};
        const int64_t ld[2] = {F, F};
        const struct mfk_q8 *q8 = q8_for(cb, 2, w, T);
        int rounded;
        rc = norm_rounded(cb, L->ffn_norm, xbw, T, 2, w, q8, &rounded, err);
        if (!rc)
            rc = matmul_n(cb, 2, tg, w, cb->xb, xbw, T, y, ld, 0, q8, rounded, err);
    }
    if (!rc) {
        const struct mfk_weight *w = &L->w[MODEL_W_DOWN];
        const struct mfk_q8 *q8 = q8_for(cb, 1, &w, T);
        float *dy = L->ffn_post ? cb->xb : cb->x;
        const int64_t ldd = L->ffn_post ? xbw : E;
        if (hp->arch->act == ARCH_ACT_GELU) {
            rc = mfk_geglu(c, cb->hg, cb->hu, F, T, F, err);
            if (!rc)
                rc = matmul(cb, tb + MODEL_W_DOWN, w, cb->hg, F, T, dy, ldd, !L->ffn_post, NULL,
                            err);
        } else if (cuda_plan_swiglu_rounded((enum ggml_type)w->type, T, cb->gemm_min, cb->mmq,
                                            cb->lrun.n_rows > 0)) {
            /* the product's rounded input straight from SwiGLU: one pass
             * over the activations fewer */
            const int bf16 = mfk_gemm_rounding(w) == 2;
            rc = mfk_swiglu_half(c, cb->hg, cb->hu, F, T, F, cb->gscratch, bf16, err);
            if (!rc)
                rc = mfk_gemm_rounded(c, w, T, dy, ldd, !L->ffn_post, cb->gscratch,
                                      cb->gscratch_bytes, err);
        } else {
            rc = mfk_swiglu(c, cb->hg, cb->hu, F, T, F, q8, err);
            if (!rc)
                rc = matmul(cb, tb + MODEL_W_DOWN, w, cb->hg, F, T, dy, ldd, !L->ffn_post, q8,
                            err);
        }
    }
    if (!rc && L->ffn_post)
        rc = mfk_add_norm(c, cb->x, E, cb->xb, xbw, L->ffn_post, T, E, hp->rms_eps, err);
#undef D32
    return rc;
}

/* cb->lrun for this step: each sequence with adapters and its rows, the
 * step's tokens (logits 0; tokens lie sequence after sequence, as
 * cuda_plan_step_fill writes them) or its logits row (logits 1), grouped by
 * adapter, the groups' row lists copied to the device. Refuses adapters the
 * backend did not upload, and any without cuBLAS. */
static int lora_rows(struct cuda_backend *cb, const struct batch *bt, int logits,
                     struct mf_err *err)
{
    int64_t t = 0;
    cb->lrun = (struct cuda_lora_run){.ctx = cb->ctx, .rows = cb->lrows, .tmp = cb->lora_tmp,
                                      .xg = cb->lora_xg, .yg = cb->lora_yg,
                                      .chunk = cb->cfg.max_tokens < LORA_CHUNK
                                                   ? cb->cfg.max_tokens
                                                   : LORA_CHUNK,
                                      .scratch = cb->gscratch,
                                      .scratch_bytes = cb->gscratch_bytes};
    for (int32_t i = 0; i < bt->n_seqs; i++) {
        const struct batch_seq *sq = &bt->seqs[i];
        int32_t n = logits ? sq->want_logits : sq->n_tokens;
        for (int32_t j = 0; j < sq->lora.n; j++)
            if (sq->lora.ids[j] >= cb->lora.n_loras || !cb->gemm_min)
                return mf_err_set(err, MF_EUNSUPPORTED,
                                  "sequence %d asks for adapter %d, which the CUDA backend %s", i,
                                  sq->lora.ids[j],
                                  cb->gemm_min ? "did not load (attached after it started)"
                                               : "cannot apply without cuBLAS "
                                                 "(MFC_CUDA_GEMM_MIN=0 or libcublas missing)");
        if (sq->lora.n && n)
            cb->lrows[cb->lrun.n_rows++] = (struct cuda_lora_rows){t, n, &sq->lora};
        t += n;
    }
    if (!cb->lrun.n_rows)
        return 0;
    /* region `logits` of the lists: rows, then as many scales */
    const size_t all = cb->lora_cap[0] + cb->lora_cap[1], at = logits ? cb->lora_cap[0] : 0;
    int32_t *rows = cb->lg_rows_h + at;
    float *scales = (float *)(void *)(cb->lg_rows_h + all) + at;
    cb->lrun.groups = cb->lgroups;
    cb->lrun.n_groups = cuda_plan_lora_groups(cb->lrows, cb->lrun.n_rows, cb->lora.n_loras,
                                              cb->lgroups, rows, scales);
    /* the groups' entries lie one after another */
    const int32_t ng = cb->lrun.n_groups;
    const int32_t used = ng ? cb->lgroups[ng - 1].first + cb->lgroups[ng - 1].n : 0;
    cb->lrun.h_rows = rows;
    cb->lrun.h_scales = scales;
    cb->lrun.d_rows = cb->lg_rows_d + at;
    cb->lrun.d_scales = (const float *)(const void *)(cb->lg_rows_d + all) + at;
    int rc = mfk_copy_h2d(cb->ctx, (void *)cb->lrun.d_rows, rows, (size_t)used * 4, err);
    if (!rc)
        rc = mfk_copy_h2d(cb->ctx, (void *)cb->lrun.d_scales, scales, (size_t)used * 4, err);
    return rc;
}

/* The step's device work after the copy of its arrays: the embedding, the
 * layers and the logits rows into cb->logits (recorded as a whole by
 * graph_step). */
static int run_body(struct cuda_backend *cb, const struct batch *bt,
                    const struct cuda_step_plan *p, int32_t splits, struct mf_err *err)
{
    const struct model_hparams *hp = &cb->m->hp;
    const int64_t E = hp->n_embd, qd = (int64_t)hp->n_head * hp->head_dim;
    const int64_t xbw = qd > E ? qd : E;
    int rc = mfk_embed(cb->ctx, &cb->tok_embd, (const int32_t *)(void *)(cb->dstep + p->tok_id),
                       p->T, cb->x, E, err);
    if (!rc && hp->embd_scale != 1.0f)
        rc = mfk_scale_rows(cb->ctx, cb->x, E, p->T, E, hp->embd_scale, 0.0f, err);
    for (int32_t l = 0; !rc && l < hp->n_layer; l++)
        rc = run_layer(cb, l, p, splits, err);
    if (rc || p->n_out == 0)
        return rc;
    rc = mfk_gather(cb->ctx, cb->x, E, (const int32_t *)(void *)(cb->dstep + p->out_rows),
                    p->n_out, cb->out_x, E, E, err);
    const struct mfk_weight *ow = &cb->output;
    const struct mfk_q8 *q8 = q8_for(cb, 1, &ow, p->n_out);
    if (!rc)
        rc = mfk_rmsnorm(cb->ctx, cb->out_x, E, NULL, 0, cb->out_norm, cb->xb, xbw, p->n_out, E,
                         hp->rms_eps, q8, err);
    if (!rc)
        rc = lora_rows(cb, bt, 1, err); /* the output's rows: one per logits row */
    if (!rc)
        rc = matmul(cb, hp->n_layer * MODEL_W_PER_LAYER, ow, cb->xb, xbw, p->n_out, cb->logits,
                    hp->n_vocab, 0, q8, err);
    if (!rc && hp->final_softcap > 0.0f)
        rc = mfk_scale_rows(cb->ctx, cb->logits, hp->n_vocab, p->n_out, hp->n_vocab, 1.0f,
                            hp->final_softcap, err);
    return rc;
}

/* The slot of a recorded step of p's shape, else the one to record it in
 * (an empty one or the least recently used, its graph freed); *hit says
 * which. Graphs of an older dstep or scratch are dropped first. */
static struct cuda_graph_slot *graph_slot(struct cuda_backend *cb, const struct cuda_step_plan *p,
                                          int32_t splits, int *hit)
{
    struct cuda_graph_slot *v = &cb->gslots[0];
    uint64_t gen = mfk_scratch_gen(cb->ctx);
    if (gen != cb->ggen || cb->gstep != cb->dstep) {
        for (int i = 0; i < GRAPH_SLOTS; i++) {
            mfk_graph_free(cb->gslots[i].g);
            cb->gslots[i] = (struct cuda_graph_slot){0};
        }
        cb->ggen = gen;
        cb->gstep = cb->dstep;
    }
    for (int i = 0; i < GRAPH_SLOTS; i++) {
        struct cuda_graph_slot *g = &cb->gslots[i];
        if (g->T == p->T && g->ctx == p->att_cap && g->splits == splits && g->dtiles == p->dtiles &&
            g->dwarps == p->dwarps) {
            *hit = 1;
            g->used = ++cb->gclock;
            return g;
        }
        if (g->used < v->used)
            v = g;
    }
    mfk_graph_free(v->g);
    *v = (struct cuda_graph_slot){.T = p->T,
                                  .ctx = p->att_cap,
                                  .splits = splits,
                                  .dtiles = p->dtiles,
                                  .dwarps = p->dwarps,
                                  .used = ++cb->gclock};
    *hit = 0;
    return v;
}

/* run_body through a CUDA graph: replayed when a step of this shape was
 * recorded, else recorded now and launched. A recording that fails (a call
 * the stream cannot record) marks the shape, which then runs eagerly. */
static int graph_step(struct cuda_backend *cb, const struct batch *bt,
                      const struct cuda_step_plan *p, int32_t splits, struct mf_err *err)
{
    int hit, rc;
    struct cuda_graph_slot *g = graph_slot(cb, p, splits, &hit);
    if (hit && g->g) {
        cb->st.graph_replays++;
        return mfk_graph_launch(cb->ctx, g->g, err);
    }
    if (!hit) {
        struct mf_err why = {0};
        rc = mfk_capture_begin(cb->ctx, &why);
        if (!rc) {
            struct mf_err ignored = {0};
            int brc = run_body(cb, bt, p, splits, &why);
            rc = mfk_capture_end(cb->ctx, &g->g, brc ? &ignored : &why);
            if (brc) { /* what was recorded stops short: never replay it */
                mfk_graph_free(g->g);
                g->g = NULL;
                rc = brc;
            }
        }
        if (!rc) {
            cb->st.graph_records++;
            return mfk_graph_launch(cb->ctx, g->g, err);
        }
        g->failed = 1;
        cb->st.graph_failures++;
        snprintf(cb->st.graph_why, sizeof cb->st.graph_why, "%.159s", why.msg);
    }
    return run_body(cb, bt, p, splits, err);
}

static int cuda_step(struct backend *b, const struct batch *bt, struct mf_err *err)
{
    struct cuda_backend *cb = cb_of(b);
    const struct model_hparams *hp = &cb->m->hp;
    struct cuda_step_plan p;
    int32_t tg = 0, splits;
    int rc;
    const double t_enter = now_s();

    if (cb->t_last_end > 0 && t_enter - cb->t_last_end < CUDA_HOST_GAP_MAX) {
        cb->st.gap_s += t_enter - cb->t_last_end;
        cb->st.gaps++;
    }
    cb->t_last_end = 0;
    if (!cb->kv)
        return mf_err_set(err, MF_EINVAL, "step before the KV arena was allocated");
    rc = backend_check_batch(cb->m, cb->n_blocks, &cb->cfg, 1, bt, err);
    if (rc || bt->n_seqs == 0)
        return rc;
    if (bt->hidden)
        return mf_err_set(err, MF_EUNSUPPORTED,
                          "the CUDA backend does not compute hidden-state (embedding) steps");
    rc = lora_rows(cb, bt, 0, err);
    if (rc)
        return rc;
    {
        const struct mfk_kv_shape ks = cb->layers[0].ks;
        /* decode tiles on the 8-bit arena lost to the per-token kernel (H200,
         * Q4_K_M: batch 64 3,382 against 3,637 tokens/s, 128 4,889 against 5,398) */
        cuda_plan_step_size(cb->m, bt, mfk_attention_max_ctx(&ks),
                            cb->dtiles && cb->cfg.kv_type == BACKEND_KV_F16, &p);
    }
    /* a decode step without adapters: padded to a recorded shape */
    if (cb->graphs && cb->pad_blk >= 0 && p.n_long == 0 && cb->lrun.n_rows == 0)
        tg = cuda_plan_graph_tokens(p.T, cb->cfg.max_logits); /* padding rows are logits rows */
    if (tg)
        cuda_plan_step_pad(cb->m, &p, tg, cb->pad_blk);
    p.dwarps = !p.dtiles ? 0
                         : cuda_plan_dec_warps(p.n_tiles, hp->n_head, hp->n_head_kv, hp->head_dim,
                                               p.dtile_ctx, cb->sms);
    splits = cb->att_split
                 ? cuda_plan_att_splits(p.n_single, hp->n_head_kv, cb->sms, p.single_ctx)
                 : 1;
    rc = reserve_step(cb, p.bytes, err);
    if (rc)
        return rc;
    /* hstep[hcur ^ 1] was last read by the copy of the step before the last,
     * which a sync has ended unless two steps went unsynced */
    if (cb->unsynced >= 2 && (rc = mfk_sync(cb->ctx, err)))
        return rc;
    if (cb->unsynced >= 2)
        cb->unsynced = 0;
    cb->hcur ^= 1;
    cuda_plan_step_fill(cb->m, bt, &p, cb->hstep[cb->hcur]);
    const double t_queue = now_s();
    rc = mfk_copy_h2d(cb->ctx, cb->dstep, cb->hstep[cb->hcur], p.bytes, err);
    if (!rc)
        rc = tg ? graph_step(cb, bt, &p, splits, err) : run_body(cb, bt, &p, splits, err);
    if (!rc && p.out_real > 0 && bt->logits)
        rc = mfk_copy_d2h(cb->ctx, bt->logits, cb->logits,
                          (size_t)p.out_real * (size_t)hp->n_vocab * sizeof(float), err);
    const double t_issued = now_s();
    /* logits rows left on the device: the draw that reads them (cuda_sample,
     * cuda_backend_argmax) is queued behind the step and syncs, so the host
     * goes back to the engine while the GPU still runs the step */
    const int deferred = !bt->logits && p.out_real > 0;
    if (!rc && !deferred)
        rc = mfk_sync(cb->ctx, err);
    if (rc) {
        struct mf_err e2 = {0};
        mfk_sync(cb->ctx, &e2); /* drain what was queued before the failure */
    }
    cb->unsynced = rc || !deferred ? 0 : cb->unsynced + 1;
    cb->last_out = rc ? 0 : p.out_real;
    cb->t_last_end = now_s();
    cb->st.steps++;
    cb->st.host_plan_s += t_queue - t_enter;
    cb->st.host_issue_s += t_issued - t_queue;
    cb->st.wait_s += cb->t_last_end - t_issued;
    return rc;
}

void cuda_backend_stats(const struct backend *b, struct cuda_upload_stats *st)
{
    *st = ((const struct cuda_backend *)(const void *)b)->st;
}

int cuda_backend_argmax(struct backend *b, int32_t n, int32_t *ids, struct mf_err *err)
{
    struct cuda_backend *cb = cb_of(b);
    int rc;

    if (n < 0 || n > cb->last_out)
        return mf_err_set(err, MF_EINVAL, "argmax over %d rows; the last step produced %d", n,
                          cb->last_out);
    rc = mfk_argmax(cb->ctx, cb->logits, cb->m->hp.n_vocab, n, cb->m->hp.n_vocab, cb->ids, err);
    if (!rc)
        rc = mfk_copy_d2h(cb->ctx, ids, cb->ids, (size_t)n * sizeof *ids, err);
    if (!rc)
        rc = mfk_sync(cb->ctx, err);
    if (rc) {
        struct mf_err e2 = {0};
        mfk_sync(cb->ctx, &e2); /* drain what was queued before the failure */
    }
    cb->unsynced = 0;
    return rc;
}

/* Bytes of the draw area: max_seqs draws, as many full adjust lists, then
 * as many grammar masks (runtime/grammar: a bit per token). */
static size_t sample_bytes(const struct cuda_backend *cb, size_t *adj_off, size_t *mask_off)
{
    size_t n = (size_t)cb->cfg.max_seqs;
    *adj_off = n * sizeof(struct mfk_draw);
    *mask_off = *adj_off + n * MFK_SAMPLE_ADJUST * sizeof(struct mfk_adjust);
    *mask_off = (*mask_off + 15) / 16 * 16;
    return *mask_off + n * cuda_plan_mask_words(cb->m->hp.n_vocab) * sizeof(uint32_t);
}

/* ops->sample: the draws packed into pinned memory, one copy up, mfk_sample,
 * the ids down; the rows it gives back copied down for the host sampler. */
static int cuda_sample(struct backend *b, int32_t n, const struct sampler_draw *d, int32_t *ids,
                       float *logits, struct mf_err *err)
{
    struct cuda_backend *cb = cb_of(b);
    const int32_t nv = cb->m->hp.n_vocab;
    size_t adj_off, mask_off, na = 0, nm = 0;
    const size_t cap = sample_bytes(cb, &adj_off, &mask_off);
    int rc = 0;

    if (n < 0 || n > cb->last_out || n > cb->cfg.max_seqs)
        return mf_err_set(err, MF_EINVAL, "sampling %d rows; the last step produced %d (draws "
                          "for %d at most)", n, cb->last_out, cb->cfg.max_seqs);
    if (!cb->hsample && (rc = mfk_host_alloc(cap, (void **)&cb->hsample, err)))
        return rc;
    if (!cb->dsample && (rc = mfk_malloc(cb->ctx, cap, (void **)&cb->dsample, err)))
        return rc;
    struct mfk_draw *hd = (struct mfk_draw *)(void *)cb->hsample;
    struct mfk_adjust *ha = (struct mfk_adjust *)(void *)(cb->hsample + adj_off);
    uint32_t *hm = (uint32_t *)(void *)(cb->hsample + mask_off);
    if ((rc = cuda_plan_draws(d, n, nv, hd, ha, &na, err)))
        return rc;
    int masked = cuda_plan_masks(d, n, nv, hd, hm, &nm);
    /* one copy: the draws and the adjust lists' used part (na <= n x the cap);
       a second for the grammar masks when a row has one */
    rc = mfk_copy_h2d(cb->ctx, cb->dsample, cb->hsample, adj_off + na * sizeof *ha, err);
    if (!rc && masked)
        rc = mfk_copy_h2d(cb->ctx, cb->dsample + mask_off, hm, nm * sizeof *hm, err);
    if (!rc)
        rc = mfk_sample_masked(
            cb->ctx, cb->logits, nv, n, nv, (const struct mfk_draw *)(void *)cb->dsample,
            (const struct mfk_adjust *)(void *)(cb->dsample + adj_off),
            masked ? (const uint32_t *)(void *)(cb->dsample + mask_off) : NULL, cb->ids, err);
    if (!rc)
        rc = mfk_copy_d2h(cb->ctx, ids, cb->ids, (size_t)n * sizeof *ids, err);
    if (!rc)
        rc = mfk_sync(cb->ctx, err);
    if (!rc)
        cb->unsynced = 0;
    for (int32_t j = 0; !rc && j < n; j++) {
        if (ids[j] >= 0)
            continue;
        if (!logits)
            return mf_err_set(err, MF_EINVAL, "device draw %d given back, but no logits buffer",
                              j);
        rc = mfk_copy_d2h(cb->ctx, logits + (size_t)j * (size_t)nv,
                          cb->logits + (size_t)j * (size_t)nv, (size_t)nv * sizeof *logits, err);
    }
    return rc ? rc : mfk_sync(cb->ctx, err);
}

/* Page-locked, so the logits copy runs at the bus's speed (a 64-sequence
 * step of Llama 3 moves 33 MB). NULL when pinning fails. */
static void *cuda_host_alloc(struct backend *b, size_t bytes)
{
    struct mf_err err = {0};
    void *p = NULL;
    (void)b;
    if (mfk_host_alloc(bytes, &p, &err))
        return NULL;
    return p;
}

static void cuda_host_free(struct backend *b, void *p)
{
    (void)b;
    mfk_host_free(p);
}

const struct backend_ops cuda_backend_ops = {
    .name = "cuda",
    .create = cuda_create,
    .kv_alloc = cuda_kv_alloc,
    .step = cuda_step,
    .free = cuda_free,
    .host_alloc = cuda_host_alloc,
    .host_free = cuda_host_free,
    .sample = cuda_sample,
};

#else /* !MFC_HAVE_CUDA_RUNTIME: a build that cannot link CUDA */

int cuda_device_count(void)
{
    return 0;
}

static int cuda_create(const struct model *m, const struct backend_config *cfg,
                       struct backend **out, struct mf_err *err)
{
    *out = NULL;
    return mf_err_set(err, MF_EUNSUPPORTED, "this mfc was built without the CUDA runtime");
}

static int cuda_kv_alloc(struct backend *b, int32_t *n_blocks, struct mf_err *err)
{
    return mf_err_set(err, MF_EUNSUPPORTED, "this mfc was built without the CUDA runtime");
}

static int cuda_step(struct backend *b, const struct batch *bt, struct mf_err *err)
{
    return mf_err_set(err, MF_EUNSUPPORTED, "this mfc was built without the CUDA runtime");
}

static void cuda_free(struct backend *b)
{
}

void cuda_backend_stats(const struct backend *b, struct cuda_upload_stats *st)
{
    memset(st, 0, sizeof *st);
}

int cuda_backend_argmax(struct backend *b, int32_t n, int32_t *ids, struct mf_err *err)
{
    return mf_err_set(err, MF_EUNSUPPORTED, "this mfc was built without the CUDA runtime");
}

const struct backend_ops cuda_backend_ops = {
    .name = "cuda",
    .create = cuda_create,
    .kv_alloc = cuda_kv_alloc,
    .step = cuda_step,
    .free = cuda_free,
};

#endif
