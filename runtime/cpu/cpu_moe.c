/*
 * cpu_moe.c: a routed (mixture-of-experts) feed-forward layer on the CPU,
 * as llama.cpp's build_moe_ffn computes it for Mixtral and Qwen3-MoE
 * (softmax over the router logits, the n_used best experts, their weights
 * renormalised to sum to 1) and gpt-oss (router bias, the n_used largest
 * logits, a softmax over those alone; biases on each expert's projections):
 * each chosen expert's gated FFN on its tokens, and the weighted outputs
 * added in the router's order.
 *
 * Tokens are grouped by expert (a counting sort into gathered rows), so an
 * expert's weights are read once per step for all its tokens, through the
 * same matmul phases as a dense layer: one job per (expert, projection),
 * experts nobody chose costing nothing. Owns nothing; its buffers are the
 * step's (cpu.c sizes them).
 *
 * Phases: route (per token) | group (thread 0) | gather + quantize (per
 * gathered row) | gate, up (matmul) | biases, act (per gathered row) |
 * down (matmul) | down bias, combine (per token).
 */
#include "runtime/cpu/cpu_int.h"

#include <math.h>
#include <string.h>

static float rd_f32(const void *base, int64_t i)
{
    float f;
    memcpy(&f, (const uint8_t *)base + 4 * i, sizeof f);
    return f;
}

/* Router row r: its bias added where the layer has one; then either the
 * softmax of the row, the n_used largest probabilities (ties to the lower
 * expert, best first) and their weights divided by their sum (clamped below
 * as ggml clamps it), or (ARCH_GATE_TOPK_SOFTMAX) the n_used largest logits
 * and the softmax of those alone as weights. */
static void route_row(struct cpu_step *s, const struct model_layer *L, int32_t r)
{
    const struct model_hparams *hp = &s->m->hp;
    const int32_t ne = hp->n_expert, k = hp->n_expert_used;
    const int topk_first = hp->arch->gating == ARCH_GATE_TOPK_SOFTMAX;
    float *p = s->router + (size_t)r * (size_t)ne, sum = 0.0f;
    int32_t *sel = s->sel + (size_t)r * (size_t)k;
    float *w = s->selw + (size_t)r * (size_t)k;

    if (L->gate_inp_b.data)
        for (int32_t e = 0; e < ne; e++)
            p[e] += rd_f32(L->gate_inp_b.data, e);
    if (!topk_first)
        s->dot->softmax(p, ne, 1.0f, 0, -INFINITY);
    for (int32_t j = 0; j < k; j++) {
        int32_t best = -1;
        for (int32_t e = 0; e < ne; e++) {
            int taken = 0;
            for (int32_t i = 0; i < j && !taken; i++)
                taken = sel[i] == e;
            if (!taken && (best < 0 || p[e] > p[best]))
                best = e;
        }
        sel[j] = best;
        w[j] = p[best];
        sum += w[j];
    }
    if (topk_first) {
        s->dot->softmax(w, k, 1.0f, 0, -INFINITY);
        return;
    }
    sum = sum > 6.103515625e-5f ? sum : 6.103515625e-5f;
    for (int32_t j = 0; j < k; j++)
        w[j] /= sum;
}

/* Thread 0: counting sort of the n * n_used pairs by expert into gathered
 * rows, and the layer's expert views and jobs. */
static void group(struct cpu_step *s, int32_t layer, int32_t n)
{
    const struct model_hparams *hp = &s->m->hp;
    const struct model_layer *L = &s->m->layers[layer];
    const int32_t ne = hp->n_expert, k = hp->n_expert_used, np = n * k;
    int64_t fe = hp->n_ff_exp, ed = hp->n_embd;

    memset(s->eoff, 0, (size_t)(ne + 1) * sizeof *s->eoff);
    for (int32_t p = 0; p < np; p++)
        s->eoff[s->sel[p] + 1]++;
    for (int32_t e = 0; e < ne; e++)
        s->eoff[e + 1] += s->eoff[e];
    for (int32_t p = 0; p < np; p++) { /* stable: an expert's rows in token order */
        int32_t e = s->sel[p], at = s->eoff[e]++;
        s->grow[at] = p / k;
        s->prow[p] = at;
    }
    for (int32_t e = ne; e > 0; e--)
        s->eoff[e] = s->eoff[e - 1];
    s->eoff[0] = 0;
    for (int32_t e = 0; e < ne; e++) {
        int32_t r0 = s->eoff[e], nr = s->eoff[e + 1] - r0;
        for (int x = 0; x < MODEL_EXP_COUNT; x++) {
            const struct model_weight *w = &L->exps[x];
            struct model_weight *v = &s->ew[x * ne + e];
            *v = *w;
            v->data = (const uint8_t *)w->data + (size_t)e * (size_t)w->ne1 * w->row_bytes;
            v->ne2 = 1;
        }
        for (int x = 0; x < MODEL_EXP_COUNT; x++) {
            int down = x == MODEL_EXP_DOWN;
            s->ejobs[x * ne + e] = (struct cpu_job){
                .w = &s->ew[x * ne + e],
                .target = -1,
                .xf = down ? s->hge + (size_t)r0 * (size_t)fe : s->xg + (size_t)r0 * (size_t)ed,
                .xf_stride = down ? fe : ed,
                .row0 = r0,
                .n_rows = nr,
                .y = (down ? s->og : x == MODEL_EXP_GATE ? s->hge : s->hue) +
                     (size_t)r0 * (size_t)(down ? ed : fe),
                .ys = down ? ed : fe,
                .lp = &s->lp_none,
            };
        }
    }
}

/* Token row r's output: the experts' weighted outputs (each with its
 * expert's down bias first, where the layer has them) summed best first,
 * (w0 e0 + w1 e1) + ..., then added to y (add) or stored, as ggml does. */
static void combine(const struct cpu_step *s, const struct model_layer *L, int32_t r, float *y,
                    int add, float *acc)
{
    const int32_t k = s->m->hp.n_expert_used;
    const int64_t ed = s->m->hp.n_embd;
    const uint8_t *bd = L->exps_b[MODEL_EXP_DOWN].data;

    for (int32_t j = 0; j < k; j++) {
        float *o = s->og + (size_t)s->prow[r * k + j] * (size_t)ed;
        float w = s->selw[r * k + j];
        if (bd) /* this gathered row belongs to this pair alone */
            for (int64_t i = 0; i < ed; i++)
                o[i] += rd_f32(bd + (size_t)s->sel[r * k + j] * (size_t)ed * 4, i);
        for (int64_t i = 0; i < ed; i++)
            acc[i] = j ? acc[i] + w * o[i] : w * o[i];
    }
    for (int64_t i = 0; i < ed; i++)
        y[i] = add ? acc[i] + y[i] : acc[i];
}

/* The expert whose gathered rows include row r (eoff is ascending). */
static int32_t row_expert(const struct cpu_step *s, int32_t r)
{
    int32_t lo = 0, hi = s->m->hp.n_expert - 1;

    while (lo < hi) {
        int32_t mid = lo + (hi - lo + 1) / 2;
        if (s->eoff[mid] <= r)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

/* Gathered row r's gate and up biases, where the layer has them: expert e's
 * rows of ffn_gate_exps.bias and ffn_up_exps.bias (ggml's add_id). */
static void expert_biases(const struct cpu_step *s, const struct model_layer *L, int32_t r)
{
    const int64_t fe = s->m->hp.n_ff_exp;
    const uint8_t *bg = L->exps_b[MODEL_EXP_GATE].data, *bu = L->exps_b[MODEL_EXP_UP].data;
    float *g = s->hge + (size_t)r * (size_t)fe, *u = s->hue + (size_t)r * (size_t)fe;
    size_t off;

    if (!bg && !bu)
        return;
    off = (size_t)row_expert(s, r) * (size_t)fe * 4;
    for (int64_t i = 0; bu && i < fe; i++)
        u[i] += rd_f32(bu + off, i);
    for (int64_t i = 0; bg && i < fe; i++)
        g[i] += rd_f32(bg + off, i);
}

/* The quantize-prep job over all gathered rows for the expert jobs js
 * (their weights share a type, so the first stands for all). */
static struct cpu_job all_rows(const struct cpu_job *js, const float *x, int64_t stride)
{
    struct cpu_job j = js[0];

    j.xf = x;
    j.xf_stride = stride;
    j.row0 = 0;
    return j;
}

void cpu_moe(struct cpu_step *s, int32_t layer, int32_t n, float *out, int add, int *ph, int ith,
             int nth)
{
    const struct model_hparams *hp = &s->m->hp;
    const int32_t ne = hp->n_expert, k = hp->n_expert_used, np = n * k;
    const int64_t fe = hp->n_ff_exp, ed = hp->n_embd;
    const struct model_layer *L = &s->m->layers[layer];
    struct cpu_job prep[2];
    int32_t r0, r1;

    cpu_rows_of(n, ith, nth, &r0, &r1);
    for (int32_t r = r0; r < r1; r++)
        route_row(s, L, r);
    cpu_pool_barrier(s->pool);
    if (ith == 0)
        group(s, layer, n);
    cpu_pool_barrier(s->pool);
    prep[0] = all_rows(&s->ejobs[MODEL_EXP_GATE * ne], s->xg, ed);
    prep[1] = all_rows(&s->ejobs[MODEL_EXP_UP * ne], s->xg, ed);
    cpu_rows_of(np, ith, nth, &r0, &r1);
    for (int32_t r = r0; r < r1; r++)
        memcpy(s->xg + (size_t)r * (size_t)ed, s->xb + (size_t)s->grow[r] * (size_t)s->xb_w,
               (size_t)ed * sizeof(float));
    cpu_prep_rows(s, prep, 2, r0, r1);
    cpu_pool_barrier(s->pool);
    cpu_matmul(s, s->ejobs, 2 * ne, cpu_next_phase(s, ph, ith), ith, nth);
    cpu_pool_barrier(s->pool);
    prep[0] = all_rows(&s->ejobs[MODEL_EXP_DOWN * ne], s->hge, fe);
    for (int32_t r = r0; r < r1; r++) {
        expert_biases(s, L, r);
        cpu_act_mul(s, s->hge + (size_t)r * (size_t)fe, s->hue + (size_t)r * (size_t)fe, fe);
    }
    cpu_prep_rows(s, prep, 1, r0, r1);
    cpu_pool_barrier(s->pool);
    cpu_matmul(s, &s->ejobs[MODEL_EXP_DOWN * ne], ne, cpu_next_phase(s, ph, ith), ith, nth);
    cpu_pool_barrier(s->pool);
    cpu_rows_of(n, ith, nth, &r0, &r1);
    for (int32_t r = r0; r < r1; r++)
        combine(s, L, r, out + (size_t)r * (size_t)ed, add,
                s->scratch + (size_t)ith * s->scratch_n);
    cpu_pool_barrier(s->pool);
}
