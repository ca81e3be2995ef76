/*
 * cuda_lora.c: LoRA adapters on the CUDA backend, y = Wx + s * B(Ax).
 *
 * At create, every pair of every adapter attached to the model (A and B, in
 * their GGUF types) is uploaded once into one device buffer. In a step,
 * after each product of an adapted weight, each sequence that names the
 * adapter gets, over its own token rows: tmp = A x (shrink), then
 * y += scale * rel_scale * B tmp (expand), both through mfk_gemm_ex
 * (cuBLAS). Numerics follow the CPU backend (runtime/cpu/cpu_fwd.c): x meets A
 * rounded to A's format when A is F16/BF16, tmp meets B rounded to B's, sums
 * in fp32. Sequences are grouped by adapter (cuda_plan_lora_groups): the
 * rows of every sequence naming an adapter are gathered (mfk_gather), go
 * through one shrink and one expand (into scratch, times rel_scale), and
 * are added back with their sequence's scale (mfk_scatter_add); an adapter
 * of one sequence works on its rows in place (expand adds scale x rel_scale
 * directly). So a step of 64 sequences sharing an adapter makes
 * 4 calls per target, not 128.
 *
 * Only F32, F16 and BF16 pairs are taken (what mkmodel, mfc lora convert and
 * llama.cpp's converter write); others are refused at create, naming the
 * tensor. Without cuBLAS a step naming an adapter is refused.
 */
#include "config.h"

#include "runtime/cuda/cuda_lora.h"

#include <stdlib.h>
#include <string.h>

#ifdef MFC_HAVE_CUDA_RUNTIME

#include "kernels/kernels.h"
#include "runtime/model/lora.h"

#define ALIGN 256

static int pair_type_ok(int type)
{
    return type == GGML_TYPE_F32 || type == GGML_TYPE_F16 || type == GGML_TYPE_BF16;
}

static uint64_t tensor_bytes(const struct model_weight *w)
{
    return (w->row_bytes * (uint64_t)w->ne1 + ALIGN - 1) / ALIGN * ALIGN;
}

static struct mfk_weight dev(const struct model_weight *w, const uint8_t *at)
{
    return (struct mfk_weight){.data = at, .type = (int)w->type, .ne0 = w->ne0, .ne1 = w->ne1,
                               .row_bytes = w->row_bytes};
}

int cuda_lora_upload(struct cuda_lora_set *ls, struct mfk_ctx *c, const struct model *m,
                     struct mf_err *err)
{
    int32_t nt = model_n_targets(m);
    uint64_t total = 0;
    memset(ls, 0, sizeof *ls);
    if (m->n_loras == 0)
        return 0;
    for (int32_t i = 0; i < m->n_loras; i++)
        for (int32_t t = 0; t < nt; t++) {
            const struct lora_pair *p = lora_pair_at(m->loras[i], t);
            if (!p)
                continue;
            if (!pair_type_ok((int)p->a.type) || !pair_type_ok((int)p->b.type))
                return mf_err_set(err, MF_EUNSUPPORTED,
                                  "adapter %d: LoRA tensors of type %s/%s: the CUDA backend "
                                  "takes F32, F16 and BF16 adapters", i,
                                  ggml_type_name(p->a.type), ggml_type_name(p->b.type));
            total += tensor_bytes(&p->a) + tensor_bytes(&p->b);
            ls->rank_max = p->rank > ls->rank_max ? p->rank : ls->rank_max;
            ls->in_max = p->a.ne0 > ls->in_max ? p->a.ne0 : ls->in_max;
            ls->out_max = p->b.ne1 > ls->out_max ? p->b.ne1 : ls->out_max;
        }
    ls->pairs = calloc((size_t)m->n_loras * (size_t)nt, sizeof *ls->pairs);
    if (!ls->pairs)
        return mf_err_set(err, MF_ENOMEM, "out of memory for %d adapters", m->n_loras);
    ls->n_loras = m->n_loras;
    ls->n_targets = nt;
    int rc = mfk_malloc(c, total ? total : 1, (void **)&ls->buf, err);
    uint64_t off = 0;
    for (int32_t i = 0; !rc && i < m->n_loras; i++)
        for (int32_t t = 0; !rc && t < nt; t++) {
            const struct lora_pair *p = lora_pair_at(m->loras[i], t);
            struct cuda_lora_pair *d = &ls->pairs[(size_t)i * (size_t)nt + (size_t)t];
            if (!p)
                continue;
            d->a = dev(&p->a, ls->buf + off);
            rc = mfk_upload(c, ls->buf + off, p->a.data, p->a.row_bytes * (uint64_t)p->a.ne1, err);
            off += tensor_bytes(&p->a);
            d->b = dev(&p->b, ls->buf + off);
            if (!rc)
                rc = mfk_upload(c, ls->buf + off, p->b.data, p->b.row_bytes * (uint64_t)p->b.ne1,
                                err);
            off += tensor_bytes(&p->b);
            d->rank = p->rank;
            d->rel_scale = p->rel_scale;
            d->live = 1;
        }
    ls->bytes = total;
    return rc;
}

void cuda_lora_free(struct cuda_lora_set *ls)
{
    mfk_free(ls->buf);
    free(ls->pairs);
    memset(ls, 0, sizeof *ls);
}

const struct cuda_lora_pair *cuda_lora_pair(const struct cuda_lora_set *ls, int32_t lora,
                                            int32_t target)
{
    if (lora < 0 || lora >= ls->n_loras || target < 0 || target >= ls->n_targets)
        return NULL;
    const struct cuda_lora_pair *p = &ls->pairs[(size_t)lora * (size_t)ls->n_targets + (size_t)target];
    return p->live ? p : NULL;
}

int cuda_lora_apply(const struct cuda_lora_set *ls, const struct cuda_lora_run *r, int32_t target,
                    const float *x, int64_t ldx, float *y, int64_t ldy, struct mf_err *err)
{
    int rc = 0;
    for (int32_t i = 0; !rc && i < r->n_groups; i++) {
        const struct cuda_lora_group *g = &r->groups[i];
        const struct cuda_lora_pair *p = cuda_lora_pair(ls, g->lora, target);
        if (!p)
            continue;
        if (g->seqs == 1) { /* consecutive rows, one scale: in place */
            const int64_t t0 = r->h_rows[g->first];
            rc = mfk_gemm_ex(r->ctx, &p->a, x + t0 * ldx, ldx, g->n, r->tmp, p->rank, 1.0f, 0,
                             r->scratch, r->scratch_bytes, err);
            if (!rc)
                rc = mfk_gemm_ex(r->ctx, &p->b, r->tmp, p->rank, g->n, y + t0 * ldy, ldy,
                                 r->h_scales[g->first] * p->rel_scale, 1, r->scratch,
                                 r->scratch_bytes, err);
            continue;
        }
        const int64_t in = p->a.ne0, out = p->b.ne1;
        for (int32_t c = 0; !rc && c < g->n; c += r->chunk) {
            const int32_t m = g->n - c < r->chunk ? g->n - c : r->chunk;
            rc = mfk_gather(r->ctx, x, ldx, r->d_rows + g->first + c, m, r->xg, in, in, err);
            if (!rc)
                rc = mfk_gemm_ex(r->ctx, &p->a, r->xg, in, m, r->tmp, p->rank, 1.0f, 0,
                                 r->scratch, r->scratch_bytes, err);
            if (!rc)
                rc = mfk_gemm_ex(r->ctx, &p->b, r->tmp, p->rank, m, r->yg, out, p->rel_scale, 0,
                                 r->scratch, r->scratch_bytes, err);
            if (!rc)
                rc = mfk_scatter_add(r->ctx, r->yg, out, r->d_rows + g->first + c,
                                     r->d_scales + g->first + c, m, y, ldy, out, err);
        }
    }
    return rc;
}

#endif
