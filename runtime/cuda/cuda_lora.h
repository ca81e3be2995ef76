/*
 * cuda_lora.h: LoRA adapters on the CUDA backend (cuda_lora.c): the pairs
 * uploaded once at create, applied after each adapted product of a step.
 * Only built into a CUDA-runtime build; runtime/cuda/cuda.c is the caller.
 */
#ifndef MFC_CUDA_LORA_H
#define MFC_CUDA_LORA_H

#include <stdint.h>

#include "common/err.h"
#include "kernels/kernels.h"
#include "runtime/model/batch.h"
#include "runtime/cuda/cuda_plan.h"
#include "runtime/model/model.h"

struct cuda_lora_pair {
    struct mfk_weight a, b; /* device copies: A [in, rank], B [rank, out] */
    int32_t rank;
    float rel_scale;        /* lora_pair.rel_scale */
    int live;               /* 0: the adapter does not adapt this target */
};

struct cuda_lora_set {
    uint8_t *buf;                 /* device: every pair */
    uint64_t bytes;
    struct cuda_lora_pair *pairs; /* owned: [n_loras][n_targets] */
    int32_t n_loras, n_targets;   /* the model's adapters at upload time */
    int32_t rank_max;
    int64_t in_max, out_max;      /* widest A input and B output of any pair */
};

/* What cuda_lora_apply needs from the step: its rows grouped by adapter
 * (cuda_plan_lora_groups), the lists on the host and on the device. */
struct cuda_lora_run {
    struct mfk_ctx *ctx;
    const struct cuda_lora_rows *rows; /* sequences with adapters */
    int32_t n_rows;
    const struct cuda_lora_group *groups;
    int32_t n_groups;
    const int32_t *h_rows, *d_rows;    /* the groups' rows: host, device */
    const float *h_scales, *d_scales;  /* and their scales */
    float *tmp;                        /* device: chunk x rank_max floats */
    float *xg, *yg;                    /* device: chunk x in_max, chunk x out_max */
    int32_t chunk;                     /* rows a gathered product takes at most */
    void *scratch;                     /* mfk_gemm's */
    size_t scratch_bytes;
};

/* Uploads every pair of m's adapters (F32/F16/BF16; others MF_EUNSUPPORTED
 * naming the types). On failure ls may hold a partial upload: free it. */
int cuda_lora_upload(struct cuda_lora_set *ls, struct mfk_ctx *c, const struct model *m,
                     struct mf_err *err);
void cuda_lora_free(struct cuda_lora_set *ls);
/* The pair of adapter lora for model target, or NULL. */
const struct cuda_lora_pair *cuda_lora_pair(const struct cuda_lora_set *ls, int32_t lora,
                                            int32_t target);
/* y[rows] += scale * B (A x[rows]) for every adapter of the step that
 * adapts target (model target index): one shrink and one expand over all
 * its rows (gathered, and added back with each row's scale, when they come
 * from several sequences), chunk rows at a time. */
int cuda_lora_apply(const struct cuda_lora_set *ls, const struct cuda_lora_run *r, int32_t target,
                    const float *x, int64_t ldx, float *y, int64_t ldy, struct mf_err *err);

#endif
