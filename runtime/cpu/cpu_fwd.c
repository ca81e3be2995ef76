/*
 * cpu_fwd.c: the forward pass for one step of mixed prefill and decode
 * sequences, for every family of common/arch.h, run by every thread of the
 * CPU pool at once.
 *
 * Owns no memory: everything lives in the struct cpu_step that cpu.c planned
 * and sized. Per layer the threads go through phases separated by barriers:
 *
 *   per-token  A  (embed and scale at layer 0,) RMSNorm, quantize, LoRA shrink
 *   matmul     B  q, k, v over all tokens at once
 *   per-token  B' biases, per-head q/k norms, RoPE (normal or NeoX pairs),
 *                 the q scale; k and v into the KV arena
 *   attention  C  per (sequence, KV head, token run), over the block table
 *                 (cpu_attn.c: sliding windows, soft-caps)
 *   per-token  D  (last layer: gather the logits rows,) quantize the
 *                 attention output, LoRA shrink for o
 *   matmul     E  x += o, or o into ob and then x += post_norm(ob + bias)
 *   per-token  F  RMSNorm, quantize, LoRA shrink for gate/up
 *   matmul     G  gate, up                       } or the routed experts
 *   per-token  H  act(gate, up), quantize        } (cpu_moe.c)
 *   matmul     I  x += down (or through ob and its post-norm)  }
 *
 * then the output norm for the rows that want logits, the output matmul and
 * the logit soft-cap. In the last layer D..I run on the logits rows only
 * (the other tokens only needed their K/V), as llama.cpp does; with no
 * logits wanted the step ends after the last attention.
 * Per-token phases split the token rows statically; matmul and attention
 * phases hand out chunks through an atomic counter, so a thread that lost
 * its core to another process does not hold the others back. A matmul
 * chunk is a run of weight rows for every token of the step: each weight
 * row is read once per step, not once per token.
 *
 * Invariant that makes results batch-independent: a token's values are
 * computed by the same instruction sequence whatever the batch holds (the
 * gemm tiles promise it per (row, token), per-token phases touch one row,
 * LoRA groups are applied in adapter-id order, attention reads only the
 * token's own sequence and sums each score and output in a fixed order,
 * experts sum their outputs in the router's order).
 */
#include "runtime/cpu/cpu_int.h"

#include <math.h>
#include <string.h>

#include "common/quant.h"
#include "runtime/model/lora.h"

#define TOKEN_TILE 32 /* activation rows per gemm call: 32 x ~2.5 KiB stays in L2 */

/* ------------------------------------------------------------------------
 * Small pieces
 * ---------------------------------------------------------------------- */

void cpu_rows_of(int32_t n, int ith, int nth, int32_t *r0, int32_t *r1)
{
    *r0 = (int32_t)((int64_t)n * ith / nth);
    *r1 = (int32_t)((int64_t)n * (ith + 1) / nth);
}

static float rd_f32(const void *base, int64_t i)
{
    float f;
    memcpy(&f, (const uint8_t *)base + 4 * i, 4);
    return f;
}

void cpu_rmsnorm(float *out, const float *x, const struct model_weight *w, int64_t n, float eps)
{
    double sum = 0.0;
    float scale;

    for (int64_t i = 0; i < n; i++)
        sum += (double)(x[i] * x[i]);
    scale = 1.0f / sqrtf((float)(sum / (double)n) + eps);
    for (int64_t i = 0; i < n; i++)
        out[i] = (x[i] * scale) * rd_f32(w->data, i);
}

/* GELU with tanh, as llama.cpp's CPU computes it (GGML_GELU_FP16): the input
 * rounded to fp16, the result rounded to fp16, and saturated past +-10. */
static float gelu_f16(float x)
{
    const float a = 0.044715f, s2pi = 0.79788456080286535587989211986876f;
    float h, y;

    if (x <= -10.0f)
        return 0.0f;
    if (x >= 10.0f)
        return x;
    h = quant_f16_to_f32(quant_f32_to_f16(x));
    y = 0.5f * h * (1.0f + tanhf(s2pi * h * (1.0f + a * h * h)));
    return quant_f16_to_f32(quant_f32_to_f16(y));
}

/* gpt-oss's gate (ggml_swiglu_oai, alpha 1.702, limit 7): the gate
 * clamped above, up clamped both ways and shifted by one, in ggml's
 * operations and order (std::min and std::clamp's comparisons, so a NaN
 * passes through as there). */
static void swiglu_oai(float *g, const float *u, int64_t n)
{
    const float alpha = 1.702f, limit = 7.0f;

    for (int64_t i = 0; i < n; i++) {
        float x = limit < g[i] ? limit : g[i];
        float y = u[i] < -limit ? -limit : limit < u[i] ? limit : u[i];
        float glu = x / (1.0f + expf(alpha * (-x)));
        g[i] = glu * (y + 1.0f);
    }
}

void cpu_act_mul(const struct cpu_step *s, float *g, const float *u, int64_t n)
{
    switch (s->m->hp.arch->act) {
    case ARCH_ACT_SILU:
        s->dot->swiglu(g, u, n);
        return;
    case ARCH_ACT_SWIGLU_OAI:
        swiglu_oai(g, u, n);
        return;
    case ARCH_ACT_GELU:
        break;
    }
    for (int64_t i = 0; i < n; i++)
        g[i] = gelu_f16(g[i]) * u[i];
}

/* The KV_BLOCK_TOKENS x head_dim elements of one (block, layer, K or V,
 * head). Keys are stored transposed, [head_dim][KV_BLOCK_TOKENS], so one
 * load gives a dimension of 16 keys (cpu_int.h kq_block); values are
 * [KV_BLOCK_TOKENS][head_dim], the rows P.V adds up. */
uint8_t *cpu_kv_base(const struct cpu_step *s, int32_t block, int32_t layer, int32_t kv,
                     int32_t head)
{
    const struct model_hparams *hp = &s->m->hp;
    size_t elem = s->kv_f16 ? 2 : 4;
    size_t idx = (((size_t)block * (size_t)hp->n_layer + (size_t)layer) * 2 + (size_t)kv) *
                     (size_t)hp->n_head_kv + (size_t)head;
    return s->kv + idx * KV_BLOCK_TOKENS * (size_t)hp->head_dim * elem;
}

/* ------------------------------------------------------------------------
 * Per-token phases
 * ---------------------------------------------------------------------- */

/* The activation formats a phase must produce: one per job weight type, and
 * those of the LoRA A matrices adapting the jobs' weights in this step. */
static unsigned act_needs(const struct cpu_step *s, const struct cpu_job *jobs, int n_jobs)
{
    unsigned need = 0;

    for (int j = 0; j < n_jobs; j++) {
        const struct cpu_lora_plan *lp = jobs[j].lp;
        need |= 1u << cpu_dot_act(jobs[j].w->type);
        for (int32_t g = 0; g < lp->n_groups; g++) {
            const struct lora_pair *lo = lora_pair_at(s->m->loras[lp->groups[g].lora], jobs[j].target);
            if (lo)
                need |= 1u << cpu_dot_act(lo->a.type);
        }
    }
    return need & ~(1u << CPU_ACT_F32); /* float rows are used in place */
}

/* Input row r (of the job) in format a. */
static const uint8_t *act_row(const struct cpu_step *s, const struct cpu_job *jb, enum cpu_act a,
                              int32_t r)
{
    if (a == CPU_ACT_F32)
        return (const uint8_t *)(jb->xf + (size_t)r * (size_t)jb->xf_stride);
    return s->act[a] + (size_t)(jb->row0 + r) * cpu_dot_act_bytes(a, jb->w->ne0);
}

/* LoRA shrink of row r for one job: lora_tmp[slot][pair] = A x, rounded to
 * B's format when B is F16/BF16 (ggml converts it so before B's matmul). */
static void shrink_row(struct cpu_step *s, const struct cpu_job *jb, int32_t r)
{
    const struct cpu_lora_plan *lp = jb->lp;

    if (!lp->n_pairs)
        return;
    for (int32_t e = lp->row_first[r]; e < lp->row_first[r + 1]; e++) {
        int32_t p = lp->row_pairs[e];
        const struct lora_pair *lo = lora_pair_at(s->m->loras[lp->pairs[p].lora], jb->target);
        float *tmp;
        enum cpu_act ba;

        if (!lo)
            continue;
        tmp = s->lora_tmp + ((size_t)jb->slot * (size_t)s->pairs_max + (size_t)p) * (size_t)s->rank_max;
        s->dot->gemm[lo->a.type](jb->w->ne0, lo->rank, 1, lo->a.data, lo->a.row_bytes,
                                 act_row(s, jb, cpu_dot_act(lo->a.type), r), 0, tmp,
                                 (size_t)lo->rank, 0);
        ba = cpu_dot_act(lo->b.type);
        if (ba != CPU_ACT_F32)
            cpu_dot_act_row(s->dot, ba, tmp, tmp, lo->rank);
    }
}

void cpu_prep_rows(struct cpu_step *s, const struct cpu_job *jobs, int n_jobs, int32_t r0,
                   int32_t r1)
{
    unsigned need = act_needs(s, jobs, n_jobs);
    int64_t n = jobs[0].w->ne0;

    for (int32_t r = r0; r < r1; r++) {
        const float *in = jobs[0].xf + (size_t)r * (size_t)jobs[0].xf_stride;
        for (int a = 0; a < CPU_ACT_COUNT; a++)
            if (need & (1u << a))
                cpu_dot_act_row(s->dot, (enum cpu_act)a, in,
                                s->act[a] + (size_t)(jobs[0].row0 + r) *
                                                cpu_dot_act_bytes((enum cpu_act)a, n),
                                n);
        for (int j = 0; j < n_jobs; j++)
            shrink_row(s, &jobs[j], r);
    }
}

/* Phase A for this thread's tokens: the embedding row (scaled for Gemma) and
 * RoPE tables at layer 0, then attn_norm into xb and prep for q/k/v. */
static void phase_attn_in(struct cpu_step *s, int32_t layer, const struct cpu_job *jobs, int ith,
                          int nth)
{
    const struct model *m = s->m;
    const struct model_hparams *hp = &m->hp;
    int32_t t0, t1;

    cpu_rows_of(s->T, ith, nth, &t0, &t1);
    for (int32_t t = t0; t < t1; t++) {
        float *x = s->x + (size_t)t * (size_t)hp->n_embd;
        if (layer == 0) {
            s->qops->dequantize[m->tok_embd.type](
                (const uint8_t *)m->tok_embd.data + (size_t)s->tok_id[t] * m->tok_embd.row_bytes,
                x, hp->n_embd);
            if (hp->embd_scale != 1.0f)
                for (int32_t i = 0; i < hp->n_embd; i++)
                    x[i] *= hp->embd_scale;
            for (int k = 0; k < m->n_rope_kinds; k++)
                model_rope_row(m, k, s->tok_pos[t],
                               s->rope + ((size_t)t * (size_t)m->n_rope_kinds + (size_t)k) *
                                             (size_t)hp->n_rot);
        }
        cpu_rmsnorm(s->xb + (size_t)t * (size_t)s->xb_w, x, &m->layers[layer].attn_norm,
                    hp->n_embd, hp->rms_eps);
    }
    cpu_prep_rows(s, jobs, 3, t0, t1);
}

/* RoPE of one head in place: pairs (2i, 2i + 1), or NeoX's (i, i + n_rot/2);
 * dimensions past n_rot are left as they are. */
static void rope_head(float *h, const float *cs, int32_t n_rot, int neox)
{
    int32_t half = n_rot / 2;

    for (int32_t i = 0; i < half; i++) {
        int32_t a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
        float x0 = h[a], x1 = h[b], c = cs[2 * i], sn = cs[2 * i + 1];
        h[a] = x0 * c - x1 * sn;
        h[b] = x0 * sn + x1 * c;
    }
}

/* One row's K or V into the arena at the token's position. */
static void store_kv(struct cpu_step *s, int32_t layer, int32_t t, int kv, const float *y)
{
    const struct model_hparams *hp = &s->m->hp;
    const struct batch_seq *sq = &s->batch->seqs[s->tok_seq[t]];
    int32_t pos = s->tok_pos[t];
    int32_t blk = sq->block_table[pos / KV_BLOCK_TOKENS], slot = pos % KV_BLOCK_TOKENS;

    for (int32_t r = 0; r < hp->n_head_kv * hp->head_dim; r++) {
        int32_t d = r % hp->head_dim;
        size_t at = kv ? (size_t)slot * (size_t)hp->head_dim + (size_t)d
                       : (size_t)d * KV_BLOCK_TOKENS + (size_t)slot;
        uint8_t *dst = cpu_kv_base(s, blk, layer, kv, r / hp->head_dim) + at * (s->kv_f16 ? 2 : 4);
        if (s->kv_f16) {
            uint16_t h = quant_f32_to_f16(y[r]);
            memcpy(dst, &h, 2);
        } else {
            memcpy(dst, &y[r], 4);
        }
    }
}

/* Adds an optional F32 bias of n elements to y. */
static void add_bias(float *y, const struct model_weight *b, int64_t n)
{
    if (!b->data)
        return;
    for (int64_t i = 0; i < n; i++)
        y[i] += rd_f32(b->data, i);
}

/* Phase B': what follows the q/k/v products for this thread's tokens, in
 * llama.cpp's order: bias, per-head norm, RoPE, q scale; then k and v are
 * stored. */
static void phase_qkv_out(struct cpu_step *s, int32_t layer, int ith, int nth)
{
    const struct model *m = s->m;
    const struct model_hparams *hp = &m->hp;
    const struct model_layer *L = &m->layers[layer];
    int64_t hd = hp->head_dim, qd = hp->n_head * hd, kvd = hp->n_head_kv * hd;
    int32_t t0, t1;

    cpu_rows_of(s->T, ith, nth, &t0, &t1);
    for (int32_t t = t0; t < t1; t++) {
        float *q = s->q + (size_t)t * (size_t)qd, *k = s->k + (size_t)t * (size_t)kvd;
        float *v = s->v + (size_t)t * (size_t)kvd;
        const float *cs = s->rope + ((size_t)t * (size_t)m->n_rope_kinds + (size_t)L->rope_kind) *
                                        (size_t)hp->n_rot;
        add_bias(q, &L->bias[0], qd);
        add_bias(k, &L->bias[1], kvd);
        add_bias(v, &L->bias[2], kvd);
        for (int32_t h = 0; h < hp->n_head; h++) {
            if (L->q_norm.data)
                cpu_rmsnorm(q + h * hd, q + h * hd, &L->q_norm, hd, hp->rms_eps);
            rope_head(q + h * hd, cs, hp->n_rot, hp->rope_neox);
        }
        for (int32_t h = 0; h < hp->n_head_kv; h++) {
            if (L->k_norm.data)
                cpu_rmsnorm(k + h * hd, k + h * hd, &L->k_norm, hd, hp->rms_eps);
            rope_head(k + h * hd, cs, hp->n_rot, hp->rope_neox);
        }
        if (hp->q_scale != 1.0f)
            for (int64_t i = 0; i < qd; i++)
                q[i] *= hp->q_scale;
        store_kv(s, layer, t, 0, k);
        store_kv(s, layer, t, 1, v);
    }
}

/* x[r] += post_norm(ob[r] + bias) for this thread's share of n rows, the
 * bias and the post-norm only where the layer has them (data non-NULL):
 * llama.cpp adds a block's bias and norms it before the residual add.
 * bias may be NULL. */
static void phase_block_out(struct cpu_step *s, const struct model_weight *bias,
                            const struct model_weight *w, float *x, int32_t n, int ith, int nth)
{
    const struct model_hparams *hp = &s->m->hp;
    int32_t r0, r1;

    cpu_rows_of(n, ith, nth, &r0, &r1);
    for (int32_t r = r0; r < r1; r++) {
        float *o = s->ob + (size_t)r * (size_t)hp->n_embd, *y = x + (size_t)r * (size_t)hp->n_embd;
        if (bias)
            add_bias(o, bias, hp->n_embd);
        if (w->data)
            cpu_rmsnorm(o, o, w, hp->n_embd, hp->rms_eps);
        for (int32_t i = 0; i < hp->n_embd; i++)
            y[i] = o[i] + y[i];
    }
}

/* Phase F: ffn_norm of the view's n residual rows into xb, prep for the
 * jobs that take them (gate/up, or the router). */
static void phase_ffn_in(struct cpu_step *s, int32_t layer, const float *vx, int32_t n,
                         const struct cpu_job *jobs, int n_jobs, int ith, int nth)
{
    const struct model_hparams *hp = &s->m->hp;
    int32_t t0, t1;

    cpu_rows_of(n, ith, nth, &t0, &t1);
    for (int32_t t = t0; t < t1; t++)
        cpu_rmsnorm(s->xb + (size_t)t * (size_t)s->xb_w, vx + (size_t)t * (size_t)hp->n_embd,
                    &s->m->layers[layer].ffn_norm, hp->n_embd, hp->rms_eps);
    cpu_prep_rows(s, jobs, n_jobs, t0, t1);
}

/* Phase H: hg = act(hg) * hu, prep for down. */
static void phase_act(struct cpu_step *s, const struct cpu_job *down, int ith, int nth)
{
    int64_t n_ff = s->m->hp.n_ff;
    int32_t t0, t1;

    cpu_rows_of(down->n_rows, ith, nth, &t0, &t1);
    for (int32_t t = t0; t < t1; t++)
        cpu_act_mul(s, s->hg + (size_t)t * (size_t)n_ff, s->hu + (size_t)t * (size_t)n_ff, n_ff);
    cpu_prep_rows(s, down, 1, t0, t1);
}

/* The output phase's per-row part: out_norm of the view's rows (the logits
 * rows, gathered in the last layer) into xb, prep for the output job. */
static void phase_out_in(struct cpu_step *s, const float *vx, const struct cpu_job *out, int ith,
                         int nth)
{
    const struct model_hparams *hp = &s->m->hp;
    int32_t j0, j1;

    cpu_rows_of(s->n_out, ith, nth, &j0, &j1);
    for (int32_t j = j0; j < j1; j++)
        cpu_rmsnorm(s->xb + (size_t)j * (size_t)s->xb_w, vx + (size_t)j * (size_t)hp->n_embd,
                    &s->m->out_norm, hp->n_embd, hp->rms_eps);
    cpu_prep_rows(s, out, 1, j0, j1);
}

/* Phase D's per-row part: in the last layer, first gathers the attention
 * output and residual rows of the logits rows (only they matter from here
 * on, so the rest of the layer runs on n_out rows, as in llama.cpp), then
 * preps the o job. */
static void phase_attn_out(struct cpu_step *s, const struct cpu_job *o, int gather, int ith,
                           int nth)
{
    const struct model_hparams *hp = &s->m->hp;
    int64_t qd = (int64_t)hp->n_head * hp->head_dim;
    int32_t t0, t1;

    cpu_rows_of(o->n_rows, ith, nth, &t0, &t1);
    for (int32_t j = t0; gather && j < t1; j++) {
        memcpy(s->out_att + (size_t)j * (size_t)qd,
               s->xb + (size_t)s->out_tok[j] * (size_t)s->xb_w, (size_t)qd * sizeof(float));
        memcpy(s->out_x + (size_t)j * (size_t)hp->n_embd,
               s->x + (size_t)s->out_tok[j] * (size_t)hp->n_embd, (size_t)hp->n_embd * sizeof(float));
    }
    cpu_prep_rows(s, o, 1, t0, t1);
}

/* The final logit soft-cap of this thread's logits rows: c tanh(l / c). */
static void phase_softcap(struct cpu_step *s, int ith, int nth)
{
    const float c = s->m->hp.final_softcap, inv = 1.0f / c;
    int64_t nv = s->m->hp.n_vocab;
    int32_t j0, j1;

    cpu_rows_of(s->n_out, ith, nth, &j0, &j1);
    for (int32_t j = j0; j < j1; j++) {
        float *l = s->batch->logits + (size_t)j * (size_t)nv;
        for (int64_t i = 0; i < nv; i++)
            l[i] = tanhf(l[i] * inv) * c;
    }
}

/* ------------------------------------------------------------------------
 * Matmul phases
 * ---------------------------------------------------------------------- */

/* Rows per work chunk: about eight chunks per thread so the counter can
 * balance, a multiple of 16, at most CPU_MAX_CHUNK_ROWS, and at most
 * CPU_CHUNK_BYTES of weights, so the chunk stays in L2 while every token
 * tile passes over it (a 256-row chunk of a 1B model's ffn_down is 2.2 MB
 * and fell out of a 1 MB L2: -14% prefill). */
static int32_t chunk_rows(const struct model_weight *w, int nth)
{
    int64_t c = w->ne1 / ((int64_t)nth * 8), cap = (int64_t)(CPU_CHUNK_BYTES / w->row_bytes);

    c = c < cap ? c : cap;
    c = (c + 15) / 16 * 16;
    if (c < 16)
        c = 16;
    return (int32_t)(c > CPU_MAX_CHUNK_ROWS ? CPU_MAX_CHUNK_ROWS : c);
}

/* y rows [r0, r1) += scale * B (A x) for every pair of every adapter that
 * adapts this job's weight, one adapter group at a time. */
static void lora_expand(struct cpu_step *s, const struct cpu_job *jb, int32_t r0, int32_t r1,
                        float *scratch)
{
    const struct cpu_lora_plan *lp = jb->lp;
    int32_t nr = r1 - r0;

    for (int32_t g = 0; g < lp->n_groups; g++) {
        const struct cpu_group *gr = &lp->groups[g];
        const struct lora_pair *lo = lora_pair_at(s->m->loras[gr->lora], jb->target);
        const float *tmp;

        if (!lo)
            continue;
        tmp = s->lora_tmp +
              ((size_t)jb->slot * (size_t)s->pairs_max + (size_t)gr->first) * (size_t)s->rank_max;
        s->dot->gemm[lo->b.type](lo->rank, nr, gr->n,
                                 (const uint8_t *)lo->b.data + (size_t)r0 * lo->b.row_bytes,
                                 lo->b.row_bytes, tmp, (size_t)s->rank_max * 4, scratch,
                                 (size_t)nr, 0);
        for (int32_t i = 0; i < gr->n; i++) {
            const struct cpu_pair *p = &lp->pairs[gr->first + i];
            float coef = p->scale * lo->rel_scale;
            float *y = jb->y + (size_t)p->row * (size_t)jb->ys + r0;
            for (int32_t r = 0; r < nr; r++)
                y[r] += coef * scratch[(size_t)i * (size_t)nr + (size_t)r];
        }
    }
}

/* Weight rows [r0, r1) of one job against all its token rows. */
static void run_chunk(struct cpu_step *s, const struct cpu_job *jb, int32_t r0, int32_t r1,
                      float *scratch)
{
    const struct model_weight *w = jb->w;
    enum cpu_act a = cpu_dot_act(w->type);
    const uint8_t *x = act_row(s, jb, a, 0);
    size_t xb = a == CPU_ACT_F32 ? (size_t)jb->xf_stride * 4 : cpu_dot_act_bytes(a, w->ne0);

    for (int32_t t = 0; t < jb->n_rows; t += TOKEN_TILE) {
        int32_t nc = jb->n_rows - t < TOKEN_TILE ? jb->n_rows - t : TOKEN_TILE;
        s->dot->gemm[w->type](w->ne0, r1 - r0, nc,
                              (const uint8_t *)w->data + (size_t)r0 * w->row_bytes, w->row_bytes,
                              x + (size_t)t * xb, xb, jb->y + (size_t)t * (size_t)jb->ys + r0,
                              (size_t)jb->ys, jb->add);
    }
    if (jb->lp->n_pairs)
        lora_expand(s, jb, r0, r1, scratch);
}

/* Chunks of a job: none when it has no token rows (an expert nobody chose). */
static int32_t job_chunks(const struct cpu_job *jb, int32_t cr)
{
    return jb->n_rows ? (int32_t)((jb->w->ne1 + cr - 1) / cr) : 0;
}

void cpu_matmul(struct cpu_step *s, const struct cpu_job *jobs, int n_jobs, int ph, int ith,
                int nth)
{
    float *scratch = s->scratch + (size_t)ith * s->scratch_n;
    int32_t base = 0, cr = n_jobs ? chunk_rows(jobs[0].w, nth) : 0;
    int j = 0;

    /* claims only grow, so each thread walks the job list once */
    for (;;) {
        int32_t c = atomic_fetch_add_explicit(&s->ctr[ph & 1], 1, memory_order_relaxed), r0, r1;
        while (j < n_jobs && c >= base + job_chunks(&jobs[j], cr)) {
            base += job_chunks(&jobs[j], cr);
            if (++j < n_jobs)
                cr = chunk_rows(jobs[j].w, nth);
        }
        if (j >= n_jobs)
            break;
        r0 = (c - base) * cr;
        r1 = r0 + cr > jobs[j].w->ne1 ? (int32_t)jobs[j].w->ne1 : r0 + cr;
        run_chunk(s, &jobs[j], r0, r1, scratch);
    }
}

/* ------------------------------------------------------------------------
 * The pass
 * ---------------------------------------------------------------------- */

/* Starts a dynamic phase: thread 0 clears the counter the phase after this
 * one will use (everyone finished with it two barriers ago). */
int cpu_next_phase(struct cpu_step *s, int *ph, int ith)
{
    ++*ph;
    if (ith == 0)
        atomic_store_explicit(&s->ctr[(*ph + 1) & 1], 0, memory_order_relaxed);
    return *ph;
}

/* The jobs of one layer, by phase. */
struct layer_jobs {
    struct cpu_job qkv[3];     /* phase B: attn_q, attn_k, attn_v */
    struct cpu_job o;          /* phase E: attn_output */
    struct cpu_job gate_up[2]; /* phase G: ffn_gate, ffn_up (dense layers) */
    struct cpu_job down;       /* phase I: ffn_down (dense layers) */
    float *resid;              /* the residual rows these add into */
    int32_t n;                 /* rows after attention: T, or n_out in the last layer */
};

static struct cpu_job mkjob(const struct cpu_step *s, int32_t layer, enum model_wid wid, int slot,
                            const float *xf, int64_t xs, float *y, int64_t ys)
{
    struct cpu_job j = {
        .w = &s->m->layers[layer].w[wid],
        .target = layer * MODEL_W_PER_LAYER + (int32_t)wid,
        .slot = slot,
        .xf = xf,
        .xf_stride = xs,
        .n_rows = s->T,
        .y = y,
        .ys = ys,
        .lp = &s->lp_all,
    };
    return j;
}

/* The jobs of layer l; with last set, the ones after attention run on the
 * n_out gathered rows (out_att in, out_x residual, lp_out adapters). A
 * block with an output bias or a post-norm writes ob, which
 * phase_block_out adds in. */
static void layer_jobs(const struct cpu_step *s, int32_t l, int last, struct layer_jobs *J)
{
    const struct model_hparams *hp = &s->m->hp;
    int64_t qd = (int64_t)hp->n_head * hp->head_dim, kvd = (int64_t)hp->n_head_kv * hp->head_dim;
    const struct model_layer *L = &s->m->layers[l];
    int post = L->attn_post_norm.data != NULL || L->bias[MODEL_W_O].data != NULL;
    int ffn_post = L->ffn_post_norm.data != NULL;
    struct cpu_job *after[4] = {&J->o, &J->gate_up[0], &J->gate_up[1], &J->down};

    J->resid = last ? s->out_x : s->x;
    J->n = last ? s->n_out : s->T;
    J->qkv[0] = mkjob(s, l, MODEL_W_Q, 0, s->xb, s->xb_w, s->q, qd);
    J->qkv[1] = mkjob(s, l, MODEL_W_K, 1, s->xb, s->xb_w, s->k, kvd);
    J->qkv[2] = mkjob(s, l, MODEL_W_V, 2, s->xb, s->xb_w, s->v, kvd);
    J->o = last ? mkjob(s, l, MODEL_W_O, 0, s->out_att, qd, post ? s->ob : J->resid, hp->n_embd)
                : mkjob(s, l, MODEL_W_O, 0, s->xb, s->xb_w, post ? s->ob : J->resid, hp->n_embd);
    J->o.add = !post;
    J->gate_up[0] = mkjob(s, l, MODEL_W_GATE, 0, s->xb, s->xb_w, s->hg, hp->n_ff);
    J->gate_up[1] = mkjob(s, l, MODEL_W_UP, 1, s->xb, s->xb_w, s->hu, hp->n_ff);
    J->down =
        mkjob(s, l, MODEL_W_DOWN, 0, s->hg, hp->n_ff, ffn_post ? s->ob : J->resid, hp->n_embd);
    J->down.add = !ffn_post;
    for (int i = 0; last && i < 4; i++) {
        after[i]->n_rows = s->n_out;
        after[i]->lp = &s->lp_out;
    }
}

/* The feed-forward half of layer l from phase F on: dense or routed, then
 * the post-norm where the family has one. */
static void ffn(struct cpu_step *s, int32_t l, struct layer_jobs *J, int *ph, int ith, int nth)
{
    const struct model_layer *L = &s->m->layers[l];
    struct cpu_pool *pool = s->pool;
    int post = L->ffn_post_norm.data != NULL;

    if (L->gate_inp.data) {
        struct cpu_job router = {
            .w = &L->gate_inp,
            .target = -1,
            .xf = s->xb,
            .xf_stride = s->xb_w,
            .n_rows = J->n,
            .y = s->router,
            .ys = s->m->hp.n_expert,
            .lp = &s->lp_none,
        };
        phase_ffn_in(s, l, J->resid, J->n, &router, 1, ith, nth);
        cpu_pool_barrier(pool);
        cpu_matmul(s, &router, 1, cpu_next_phase(s, ph, ith), ith, nth);
        cpu_pool_barrier(pool);
        cpu_moe(s, l, J->n, post ? s->ob : J->resid, !post, ph, ith, nth);
    } else {
        phase_ffn_in(s, l, J->resid, J->n, J->gate_up, 2, ith, nth);
        cpu_pool_barrier(pool);
        cpu_matmul(s, J->gate_up, 2, cpu_next_phase(s, ph, ith), ith, nth);
        cpu_pool_barrier(pool);
        phase_act(s, &J->down, ith, nth);
        cpu_pool_barrier(pool);
        cpu_matmul(s, &J->down, 1, cpu_next_phase(s, ph, ith), ith, nth);
        cpu_pool_barrier(pool);
    }
    if (post) {
        phase_block_out(s, NULL, &L->ffn_post_norm, J->resid, J->n, ith, nth);
        cpu_pool_barrier(pool);
    }
}

/* The output norm, matmul and soft-cap (or the hidden rows of an
 * embedding step). */
static void output(struct cpu_step *s, int *ph, int ith, int nth)
{
    const struct model *m = s->m;
    struct cpu_job out = {
        .w = &m->output,
        .target = m->hp.n_layer * MODEL_W_PER_LAYER,
        .xf = s->xb,
        .xf_stride = s->xb_w,
        .n_rows = s->n_out,
        .y = s->batch->logits,
        .ys = m->hp.n_vocab,
        .lp = &s->lp_out,
    };

    phase_out_in(s, s->out_x, &out, ith, nth);
    cpu_pool_barrier(s->pool);
    if (s->batch->hidden) { /* embeddings: the normed rows are the answer */
        int32_t j0, j1;
        cpu_rows_of(s->n_out, ith, nth, &j0, &j1);
        for (int32_t j = j0; j < j1; j++)
            memcpy(s->batch->hidden + (size_t)j * (size_t)m->hp.n_embd,
                   s->xb + (size_t)j * (size_t)s->xb_w, (size_t)m->hp.n_embd * sizeof(float));
        return;
    }
    cpu_matmul(s, &out, 1, cpu_next_phase(s, ph, ith), ith, nth);
    if (m->hp.final_softcap > 0.0f) {
        cpu_pool_barrier(s->pool);
        phase_softcap(s, ith, nth);
    }
}

void cpu_fwd_run(void *arg, int ith, int nth)
{
    struct cpu_step *s = arg;
    struct cpu_pool *pool = s->pool;
    const struct model *m = s->m;
    struct layer_jobs J;
    int ph = 0;

    for (int32_t l = 0; l < m->hp.n_layer; l++) {
        int last = l == m->hp.n_layer - 1;
        layer_jobs(s, l, last, &J);
        phase_attn_in(s, l, J.qkv, ith, nth);
        cpu_pool_barrier(pool);
        cpu_matmul(s, J.qkv, 3, cpu_next_phase(s, &ph, ith), ith, nth);
        cpu_pool_barrier(pool);
        phase_qkv_out(s, l, ith, nth);
        cpu_pool_barrier(pool);
        cpu_attention(s, l, cpu_next_phase(s, &ph, ith), ith);
        cpu_pool_barrier(pool);
        if (last && s->n_out == 0)
            return; /* nothing wants logits: the K/V of every layer is written */
        phase_attn_out(s, &J.o, last, ith, nth);
        cpu_pool_barrier(pool);
        cpu_matmul(s, &J.o, 1, cpu_next_phase(s, &ph, ith), ith, nth);
        cpu_pool_barrier(pool);
        if (!J.o.add) {
            phase_block_out(s, &m->layers[l].bias[MODEL_W_O], &m->layers[l].attn_post_norm, J.resid,
                            J.n, ith, nth);
            cpu_pool_barrier(pool);
        }
        ffn(s, l, &J, &ph, ith, nth);
    }
    output(s, &ph, ith, nth);
}
