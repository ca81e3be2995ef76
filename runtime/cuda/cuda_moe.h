/*
 * cuda_moe.h: routed (mixture-of-experts) feed-forward layers on the CUDA
 * backend (cuda_moe.c over kernels/moe.cu), as runtime/cpu/cpu_moe.c
 * computes them for Mixtral and Qwen3-MoE: RMSNorm, the router product,
 * softmax and top-k with renormalised weights, each chosen expert's
 * SiLU-gated FFN on its tokens, the weighted sum added best first to the
 * residual.
 *
 * A step's layer is seven launches whatever the batch (norm, router,
 * route, gate + up, SiLU, down, combine), none waiting on the host, so
 * decode steps record as CUDA graphs. The expert tensors stay in their
 * GGUF block types in the backend's weight buffer (cuda_plan_weights places
 * them). The plan (cuda_moe_plan, cuda_moe_check, cuda_moe_routed) is
 * host-only and unit-tested; create, free and layer exist only in a build
 * with the CUDA runtime (MFC_HAVE_CUDA_RUNTIME; runtime/cuda/cuda.c is the
 * caller).
 */
#ifndef MFC_CUDA_MOE_H
#define MFC_CUDA_MOE_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "kernels/kernels.h"
#include "runtime/cuda/cuda_plan.h"
#include "runtime/model/model.h"

/* The step buffers of a model's routed layers for max_tokens tokens a
 * step: byte offsets into one device allocation (CUDA_PLAN_ALIGN apart),
 * P = max_tokens x n_expert_used gathered rows. */
struct cuda_moe_plan {
    int32_t max_tokens;
    int64_t pairs; /* P */
    int64_t items; /* work-list entries: mfk_moe_items_max at its largest for
                      1..max_tokens tokens */
    int xq8, hq8;  /* 1: the normed input / the activation needs its 8-bit form
                      (some layer's gate or up / down experts are Q4_K or Q6_K) */
    size_t sel, w, eoff, grow, prow, items_off, counters; /* routing (struct mfk_moe_route;
                                                             counters: n_items, done) */
    size_t logits;                                        /* (max_tokens, n_expert) router output */
    size_t xq8_q, xq8_d, xq8_s; /* (max_tokens, n_embd) input's 8-bit form (xq8) */
    size_t hg, hu;              /* (P, n_ff_exp) gate and up outputs; hg becomes the activation */
    size_t hq8_q, hq8_d, hq8_s; /* (P, n_ff_exp) activation's 8-bit form (hq8) */
    size_t og;                  /* (P, n_embd) expert outputs before the combine */
    size_t total;               /* bytes */
};

/* Plans the buffers of m's routed layers (m->hp.n_expert > 0) for
 * max_tokens tokens a step. */
void cuda_moe_plan(const struct model *m, int32_t max_tokens, struct cuda_moe_plan *p);

/* MF_EUNSUPPORTED naming what the CUDA step cannot compute in m's routed
 * layers (GELU-gated experts, more experts than MFK_MOE_MAX_EXPERTS), else 0;
 * 0 for a model without experts. */
int cuda_moe_check(const struct model *m, struct mf_err *err);

/* One routed layer's device weights (views into the backend's buffer). */
struct cuda_moe_layer {
    struct mfk_weight router;                /* [n_embd, n_expert] */
    struct mfk_weight exps[MODEL_EXP_COUNT]; /* ne1 rows an expert, n_expert experts */
    int live;                                /* 0: a dense layer */
};

struct cuda_moe {
    struct mfk_ctx *ctx;           /* borrowed */
    const struct model *m;         /* borrowed */
    struct cuda_moe_layer *layers; /* owned: n_layer entries; NULL for a dense model */
    struct cuda_moe_plan plan;
    uint8_t *buf;           /* device: plan.total bytes */
    struct mfk_moe_route r; /* views into buf */
    float *logits, *hg, *hu, *og;
    struct mfk_q8 xq8, hq8; /* .q NULL when not planned */
};

/* For a model with experts: the layers' weight views (each tensor's slot in
 * wplan, at wbuf on the device) and the step buffers for max_tokens tokens
 * (plan, one allocation, counters zeroed). Nothing for a dense model. On
 * failure mo may hold part of it: cuda_moe_free. */
int cuda_moe_create(struct cuda_moe *mo, struct mfk_ctx *ctx, const struct model *m,
                    const struct cuda_wplan *wplan, const uint8_t *wbuf, int32_t max_tokens,
                    struct mf_err *err);
void cuda_moe_free(struct cuda_moe *mo); /* accepts a zeroed one */

/* 1 when layer l is routed (cuda_moe_layer computes its FFN). */
int cuda_moe_routed(const struct cuda_moe *mo, int32_t l);

/* The FFN half of routed layer l over T tokens of residual x (rows ldx
 * apart): xb (rows ldxb apart, n_embd wide at least) = RMSNorm(x) by norm
 * (device), then out[t] (+)= the experts' weighted sum (add: accumulate,
 * the residual add; 0: store, for a post-norm). T at most max_tokens. */
int cuda_moe_layer(struct cuda_moe *mo, int32_t l, int32_t T, float *x, int64_t ldx,
                   const float *norm, float *xb, int64_t ldxb, float *out, int64_t ldo, int add,
                   struct mf_err *err);

#endif
