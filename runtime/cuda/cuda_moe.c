/*
 * cuda_moe.c: the CUDA backend's routed (mixture-of-experts) FFN layers
 * (cuda_moe.h): the plan of their step buffers, the device views of the
 * router and expert tensors, and one layer's launches.
 *
 * Invariants: the buffers hold max_tokens x n_expert_used gathered rows,
 * so any step the backend accepts fits; the routing's block counter is
 * zero between launches (zeroed here at create, put back by the kernel);
 * nothing in cuda_moe_layer synchronises or allocates, so it records into
 * a CUDA graph. The expert weights are the backend's (cuda_plan_weights'
 * slots of the 3-D tensors), never copied.
 */
#include "config.h"

#include "runtime/cuda/cuda_moe.h"

#include <stdlib.h>
#include <string.h>

static size_t take(size_t *off, size_t bytes)
{
    size_t at = *off;
    *off = (at + bytes + CUDA_PLAN_ALIGN - 1) / CUDA_PLAN_ALIGN * CUDA_PLAN_ALIGN;
    return at;
}

static int int_type(enum ggml_type t)
{
    return t == GGML_TYPE_Q4_K || t == GGML_TYPE_Q6_K;
}

void cuda_moe_plan(const struct model *m, int32_t max_tokens, struct cuda_moe_plan *p)
{
    const struct model_hparams *hp = &m->hp;
    const size_t ne = (size_t)hp->n_expert, E = (size_t)hp->n_embd, F = (size_t)hp->n_ff_exp;
    size_t off = 0;

    memset(p, 0, sizeof *p);
    p->max_tokens = max_tokens;
    p->pairs = (int64_t)max_tokens * hp->n_expert_used;
    for (int32_t T = 1; T <= max_tokens; T++) { /* not monotonic in T: tiles grow */
        int64_t n = mfk_moe_items_max(T, hp->n_expert, hp->n_expert_used);
        p->items = n > p->items ? n : p->items;
    }
    for (int32_t l = 0; l < hp->n_layer; l++) {
        const struct model_layer *L = &m->layers[l];
        if (!L->gate_inp.data)
            continue;
        p->xq8 |= int_type(L->exps[MODEL_EXP_GATE].type) || int_type(L->exps[MODEL_EXP_UP].type);
        p->hq8 |= int_type(L->exps[MODEL_EXP_DOWN].type);
    }
    const size_t P = (size_t)p->pairs, T = (size_t)max_tokens;
    p->sel = take(&off, P * 4);
    p->w = take(&off, P * 4);
    p->eoff = take(&off, (ne + 1) * 4);
    p->grow = take(&off, P * 4);
    p->prow = take(&off, P * 4);
    p->items_off = take(&off, (size_t)p->items * 16);
    p->counters = take(&off, 8);
    p->logits = take(&off, T * ne * 4);
    if (p->xq8) {
        p->xq8_q = take(&off, T * E);
        p->xq8_d = take(&off, T * (E / 32) * 4);
        p->xq8_s = take(&off, T * (E / 32) * 4);
    }
    p->hg = take(&off, P * F * 4);
    p->hu = take(&off, P * F * 4);
    if (p->hq8) {
        p->hq8_q = take(&off, P * F);
        p->hq8_d = take(&off, P * (F / 32) * 4);
        p->hq8_s = take(&off, P * (F / 32) * 4);
    }
    p->og = take(&off, P * E * 4);
    p->total = off;
}

int cuda_moe_check(const struct model *m, struct mf_err *err)
{
    const struct model_hparams *hp = &m->hp;
    if (!hp->n_expert)
        return 0;
    if (hp->arch && hp->arch->act != ARCH_ACT_SILU)
        return mf_err_set(err, MF_EUNSUPPORTED,
                          "the CUDA backend does not run %s models yet (GELU-gated experts)",
                          hp->arch->name);
    if (hp->n_expert > MFK_MOE_MAX_EXPERTS)
        return mf_err_set(err, MF_EUNSUPPORTED,
                          "the CUDA backend routes among %d experts at most, not %d",
                          MFK_MOE_MAX_EXPERTS, hp->n_expert);
    return 0;
}

int cuda_moe_routed(const struct cuda_moe *mo, int32_t l)
{
    return mo->layers && mo->layers[l].live;
}

#ifdef MFC_HAVE_CUDA_RUNTIME

/* The device view of w (its slot in wp at wbuf), ne1 rows a matrix. */
static struct mfk_weight dev_of(const struct cuda_wplan *wp, const uint8_t *wbuf,
                                const struct model_weight *w)
{
    const struct cuda_wslot *s = cuda_wplan_find(wp, w);
    return (struct mfk_weight){.data = s ? wbuf + s->off : NULL,
                               .type = (int)w->type,
                               .ne0 = w->ne0,
                               .ne1 = w->ne1,
                               .row_bytes = w->row_bytes};
}

int cuda_moe_create(struct cuda_moe *mo, struct mfk_ctx *ctx, const struct model *m,
                    const struct cuda_wplan *wplan, const uint8_t *wbuf, int32_t max_tokens,
                    struct mf_err *err)
{
    const struct model_hparams *hp = &m->hp;
    struct cuda_moe_plan *p = &mo->plan;
    int rc;

    memset(mo, 0, sizeof *mo);
    if (!hp->n_expert)
        return 0;
    if ((rc = cuda_moe_check(m, err)))
        return rc;
    mo->ctx = ctx;
    mo->m = m;
    mo->layers = calloc((size_t)hp->n_layer, sizeof *mo->layers);
    if (!mo->layers)
        return mf_err_set(err, MF_ENOMEM, "out of memory for %d expert layers", hp->n_layer);
    for (int32_t l = 0; l < hp->n_layer; l++) {
        const struct model_layer *L = &m->layers[l];
        struct cuda_moe_layer *D = &mo->layers[l];
        if (!L->gate_inp.data)
            continue;
        D->router = dev_of(wplan, wbuf, &L->gate_inp);
        for (int x = 0; x < MODEL_EXP_COUNT; x++)
            D->exps[x] = dev_of(wplan, wbuf, &L->exps[x]);
        D->live = 1;
        for (int x = 0; x < MODEL_EXP_COUNT && D->live; x++)
            D->live = D->exps[x].data != NULL;
        if (!D->live || !D->router.data)
            return mf_err_set(err, MF_EINVAL, "layer %d's expert tensors were not uploaded", l);
    }
    cuda_moe_plan(m, max_tokens, p);
    if ((rc = mfk_malloc(ctx, p->total, (void **)&mo->buf, err)))
        return rc;
    uint8_t *b = mo->buf;
    mo->r = (struct mfk_moe_route){.sel = (int32_t *)(void *)(b + p->sel),
                                   .w = (float *)(void *)(b + p->w),
                                   .eoff = (int32_t *)(void *)(b + p->eoff),
                                   .grow = (int32_t *)(void *)(b + p->grow),
                                   .prow = (int32_t *)(void *)(b + p->prow),
                                   .items = (int32_t *)(void *)(b + p->items_off),
                                   .n_items = (int32_t *)(void *)(b + p->counters),
                                   .done = (unsigned *)(void *)(b + p->counters + 4)};
    mo->logits = (float *)(void *)(b + p->logits);
    mo->hg = (float *)(void *)(b + p->hg);
    mo->hu = (float *)(void *)(b + p->hu);
    mo->og = (float *)(void *)(b + p->og);
    if (p->xq8)
        mo->xq8 = (struct mfk_q8){.q = (int8_t *)(b + p->xq8_q),
                                  .d = (float *)(void *)(b + p->xq8_d),
                                  .s = (float *)(void *)(b + p->xq8_s)};
    if (p->hq8)
        mo->hq8 = (struct mfk_q8){.q = (int8_t *)(b + p->hq8_q),
                                  .d = (float *)(void *)(b + p->hq8_d),
                                  .s = (float *)(void *)(b + p->hq8_s)};
    return mfk_memset(ctx, b + p->counters, 0, 8, err);
}

void cuda_moe_free(struct cuda_moe *mo)
{
    mfk_free(mo->buf);
    free(mo->layers);
    memset(mo, 0, sizeof *mo);
}

int cuda_moe_layer(struct cuda_moe *mo, int32_t l, int32_t T, float *x, int64_t ldx,
                   const float *norm, float *xb, int64_t ldxb, float *out, int64_t ldo, int add,
                   struct mf_err *err)
{
    const struct model_hparams *hp = &mo->m->hp;
    const struct cuda_moe_layer *D = &mo->layers[l];
    const int32_t ne = hp->n_expert, k = hp->n_expert_used;
    const int64_t E = hp->n_embd, F = hp->n_ff_exp;
    const struct mfk_weight *gu[2] = {&D->exps[MODEL_EXP_GATE], &D->exps[MODEL_EXP_UP]};
    const struct mfk_weight *dn = &D->exps[MODEL_EXP_DOWN];
    const struct mfk_q8 *xq8 =
        int_type((enum ggml_type)gu[0]->type) || int_type((enum ggml_type)gu[1]->type) ? &mo->xq8
                                                                                       : NULL;
    const struct mfk_q8 *hq8 = int_type((enum ggml_type)dn->type) ? &mo->hq8 : NULL;
    float *y[2] = {mo->hg, mo->hu};
    const int32_t P = T * k;
    int rc;

    if (T <= 0)
        return 0;
    if (T > mo->plan.max_tokens)
        return mf_err_set(err, MF_EINVAL, "CUDA experts: %d tokens, planned for %d", T,
                          mo->plan.max_tokens);
    rc = mfk_rmsnorm(mo->ctx, x, ldx, NULL, 0, norm, xb, ldxb, T, E, hp->rms_eps, xq8, err);
    if (!rc)
        rc = mfk_gemv(mo->ctx, &D->router, xb, ldxb, T, mo->logits, ne, 0, err);
    if (!rc)
        rc = mfk_moe_route(mo->ctx, mo->logits, ne, T, ne, k, &mo->r, err);
    if (!rc)
        rc = mfk_moe_gemm(mo->ctx, 2, gu, ne, xb, ldxb, xq8, mo->r.grow, T, k, &mo->r, y, F, err);
    if (!rc) /* in place: hg = silu(hg) * hu, the down product's input */
        rc = mfk_swiglu(mo->ctx, mo->hg, mo->hu, F, P, F, hq8, err);
    if (!rc)
        rc = mfk_moe_gemm(mo->ctx, 1, &dn, ne, mo->hg, F, hq8, NULL, T, k, &mo->r, &mo->og, E, err);
    if (!rc)
        rc = mfk_moe_combine(mo->ctx, mo->og, E, T, k, E, &mo->r, out, ldo, add, err);
    return rc;
}

#endif
