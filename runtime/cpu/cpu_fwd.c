/*
 * cpu_fwd.c: the llama forward pass for one step of mixed prefill and
 * decode sequences, run by every thread of the CPU pool at once.
 *
 * Owns no memory: everything lives in the struct cpu_step that cpu.c planned
 * and sized. Per layer the threads go through nine phases separated by
 * barriers:
 *
 *   per-token  A  (embed at layer 0,) RMSNorm, quantize, LoRA shrink for q/k/v
 *   matmul     B  q, k, v over all tokens at once; RoPE q and k, store k, v
 *   attention  C  per (sequence, KV head, token run), over the block table
 *   per-token  D  (last layer: gather the logits rows,) quantize the
 *                 attention output, LoRA shrink for o
 *   matmul     E  x += o
 *   per-token  F  RMSNorm, quantize, LoRA shrink for gate/up
 *   matmul     G  gate, up
 *   per-token  H  SiLU(gate) * up, quantize, LoRA shrink for down
 *   matmul     I  x += down
 *
 * then the output norm for the rows that want logits and the output matmul.
 * In the last layer D..I run on the logits rows only (the other tokens only
 * needed their K/V), as llama.cpp does; with no logits wanted the step ends
 * after the last attention.
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
 * token's own sequence and sums each score and output in a fixed order).
 */
#include "runtime/cpu/cpu_int.h"

#include <math.h>
#include <string.h>

#include "common/quant.h"
#include "runtime/model/lora.h"

#define TOKEN_TILE 32 /* activation rows per gemm call: 32 x ~2.5 KiB stays in L2 */

/* What happens to a matmul chunk's output rows after the gemm. */
enum epi {
    EPI_NONE = 0,
    EPI_ROPE = 1,       /* rotate (q) */
    EPI_ROPE_STORE = 2, /* rotate, then write into the KV arena (k) */
    EPI_STORE = 3,      /* write into the KV arena (v) */
};

struct job {
    const struct model_weight *w; /* weight, [in, out] */
    int32_t target;               /* model target index for LoRA */
    int32_t slot;                 /* lora_tmp slot of its shrink results */
    const float *xf;              /* float input rows (also the LoRA input) */
    int64_t xf_stride;            /* floats between input rows */
    int32_t n_rows;               /* token rows */
    float *y;                     /* output rows */
    int64_t ys;                   /* floats between output rows */
    int add;                      /* 1: y += W x (residual) */
    enum epi epi;                 /* post-processing */
    int32_t kv;                   /* 0: K, 1: V (for stores) */
    int32_t layer;                /* layer (for stores) */
    const struct cpu_lora_plan *lp; /* LoRA pairs over these rows */
};

/* ------------------------------------------------------------------------
 * Small pieces
 * ---------------------------------------------------------------------- */

static void rows_of(int32_t n, int ith, int nth, int32_t *r0, int32_t *r1)
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

/* ggml_rms_norm then ggml_mul by the weight: the sum of squares is kept in
 * double, as ggml does, so long rows do not lose the small terms. */
static void rmsnorm(float *out, const float *x, const struct model_weight *w, int64_t n, float eps)
{
    double sum = 0.0;
    float scale;

    for (int64_t i = 0; i < n; i++)
        sum += (double)(x[i] * x[i]);
    scale = 1.0f / sqrtf((float)(sum / (double)n) + eps);
    for (int64_t i = 0; i < n; i++)
        out[i] = (x[i] * scale) * rd_f32(w->data, i);
}

/* cos/sin of every rotated pair at position pos, computed like ggml's
 * rope cache (theta advanced by repeated multiplication in float, llama3
 * frequency divisors, linear scaling), so angles match llama.cpp bit for
 * bit before the sin/cos. */
static void rope_row(const struct cpu_step *s, int32_t pos, float *cs)
{
    const struct model_hparams *hp = &s->m->hp;
    const float theta_scale = powf(hp->rope_base, -2.0f / (float)hp->n_rot);
    float theta = (float)pos;

    for (int32_t i = 0; i < hp->n_rot / 2; i++) {
        float ff = s->m->rope_freqs.data ? rd_f32(s->m->rope_freqs.data, i) : 1.0f;
        float th = hp->rope_freq_scale * (theta / ff);
        cs[2 * i] = cosf(th);
        cs[2 * i + 1] = sinf(th);
        theta *= theta_scale;
    }
}

/* The KV_BLOCK_TOKENS x head_dim elements of one (block, layer, K or V,
 * head). Keys are stored transposed, [head_dim][KV_BLOCK_TOKENS], so one
 * load gives a dimension of 16 keys (cpu_int.h kq_block); values are
 * [KV_BLOCK_TOKENS][head_dim], the rows P.V adds up. */
static uint8_t *kv_base(const struct cpu_step *s, int32_t block, int32_t layer, int32_t kv,
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
static unsigned act_needs(const struct cpu_step *s, const struct job *jobs, int n_jobs)
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

/* Input row r of the phase in format a. */
static const uint8_t *act_row(const struct cpu_step *s, const struct job *jb, enum cpu_act a,
                              int32_t r)
{
    if (a == CPU_ACT_F32)
        return (const uint8_t *)(jb->xf + (size_t)r * (size_t)jb->xf_stride);
    return s->act[a] + (size_t)r * cpu_dot_act_bytes(a, jb->w->ne0);
}

/* LoRA shrink of row r for one job: lora_tmp[slot][pair] = A x, rounded to
 * B's format when B is F16/BF16 (ggml converts it so before B's matmul). */
static void shrink_row(struct cpu_step *s, const struct job *jb, int32_t r)
{
    const struct cpu_lora_plan *lp = jb->lp;

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

/* Converts input rows [r0, r1) into the formats the jobs need and runs
 * their LoRA shrinks. All jobs share one input (jobs[0].xf). */
static void prep_rows(struct cpu_step *s, const struct job *jobs, int n_jobs, int32_t r0,
                      int32_t r1)
{
    unsigned need = act_needs(s, jobs, n_jobs);
    int64_t n = jobs[0].w->ne0;

    for (int32_t r = r0; r < r1; r++) {
        const float *in = jobs[0].xf + (size_t)r * (size_t)jobs[0].xf_stride;
        for (int a = 0; a < CPU_ACT_COUNT; a++)
            if (need & (1u << a))
                cpu_dot_act_row(s->dot, (enum cpu_act)a, in,
                                s->act[a] + (size_t)r * cpu_dot_act_bytes((enum cpu_act)a, n), n);
        for (int j = 0; j < n_jobs; j++)
            shrink_row(s, &jobs[j], r);
    }
}

/* Phase A for this thread's tokens: the embedding row and RoPE angles at
 * layer 0, then attn_norm into xb and prep for q/k/v. */
static void phase_attn_in(struct cpu_step *s, int32_t layer, const struct job *jobs, int ith,
                          int nth)
{
    const struct model *m = s->m;
    const struct model_hparams *hp = &m->hp;
    int32_t t0, t1;

    rows_of(s->T, ith, nth, &t0, &t1);
    for (int32_t t = t0; t < t1; t++) {
        float *x = s->x + (size_t)t * (size_t)hp->n_embd;
        if (layer == 0) {
            s->qops->dequantize[m->tok_embd.type](
                (const uint8_t *)m->tok_embd.data + (size_t)s->tok_id[t] * m->tok_embd.row_bytes,
                x, hp->n_embd);
            rope_row(s, s->tok_pos[t], s->rope + (size_t)t * (size_t)hp->n_rot);
        }
        rmsnorm(s->xb + (size_t)t * (size_t)s->xb_w, x, &m->layers[layer].attn_norm, hp->n_embd,
                hp->rms_eps);
    }
    prep_rows(s, jobs, 3, t0, t1);
}

/* Phase F: ffn_norm of the view's residual rows into xb, prep for gate/up. */
static void phase_ffn_in(struct cpu_step *s, int32_t layer, const float *vx,
                         const struct job *jobs, int ith, int nth)
{
    const struct model_hparams *hp = &s->m->hp;
    int32_t t0, t1;

    rows_of(jobs[0].n_rows, ith, nth, &t0, &t1);
    for (int32_t t = t0; t < t1; t++)
        rmsnorm(s->xb + (size_t)t * (size_t)s->xb_w, vx + (size_t)t * (size_t)hp->n_embd,
                &s->m->layers[layer].ffn_norm, hp->n_embd, hp->rms_eps);
    prep_rows(s, jobs, 2, t0, t1);
}

/* Phase H: hg = SiLU(hg) * hu (ggml_silu: x / (1 + e^-x)), prep for down. */
static void phase_swiglu(struct cpu_step *s, const struct job *down, int ith, int nth)
{
    int64_t n_ff = s->m->hp.n_ff;
    int32_t t0, t1;

    rows_of(down->n_rows, ith, nth, &t0, &t1);
    for (int32_t t = t0; t < t1; t++)
        s->dot->swiglu(s->hg + (size_t)t * (size_t)n_ff, s->hu + (size_t)t * (size_t)n_ff, n_ff);
    prep_rows(s, down, 1, t0, t1);
}

/* The output phase's per-row part: out_norm of the view's rows (the logits
 * rows, gathered in the last layer) into xb, prep for the output job. */
static void phase_out_in(struct cpu_step *s, const float *vx, const struct job *out, int ith,
                         int nth)
{
    const struct model_hparams *hp = &s->m->hp;
    int32_t j0, j1;

    rows_of(s->n_out, ith, nth, &j0, &j1);
    for (int32_t j = j0; j < j1; j++)
        rmsnorm(s->xb + (size_t)j * (size_t)s->xb_w, vx + (size_t)j * (size_t)hp->n_embd,
                &s->m->out_norm, hp->n_embd, hp->rms_eps);
    prep_rows(s, out, 1, j0, j1);
}

/* Phase D's per-row part: in the last layer, first gathers the attention
 * output and residual rows of the logits rows (only they matter from here
 * on, so the rest of the layer runs on n_out rows, as in llama.cpp), then
 * preps the o job. */
static void phase_attn_out(struct cpu_step *s, const struct job *o, int gather, int ith, int nth)
{
    const struct model_hparams *hp = &s->m->hp;
    int64_t qd = (int64_t)hp->n_head * hp->head_dim;
    int32_t t0, t1;

    rows_of(o->n_rows, ith, nth, &t0, &t1);
    for (int32_t j = t0; gather && j < t1; j++) {
        memcpy(s->out_att + (size_t)j * (size_t)qd,
               s->xb + (size_t)s->out_tok[j] * (size_t)s->xb_w, (size_t)qd * sizeof(float));
        memcpy(s->out_x + (size_t)j * (size_t)hp->n_embd,
               s->x + (size_t)s->out_tok[j] * (size_t)hp->n_embd, (size_t)hp->n_embd * sizeof(float));
    }
    prep_rows(s, o, 1, t0, t1);
}

/* ------------------------------------------------------------------------
 * Matmul phases
 * ---------------------------------------------------------------------- */

/* Rows per work chunk: about eight chunks per thread so the counter can
 * balance, a multiple of 16 (even rows keep RoPE pairs together), at most
 * CPU_MAX_CHUNK_ROWS, and at most CPU_CHUNK_BYTES of weights, so the chunk
 * stays in L2 while every token tile passes over it (a 256-row chunk of a
 * 1B model's ffn_down is 2.2 MB and fell out of a 1 MB L2: -14% prefill). */
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
static void lora_expand(struct cpu_step *s, const struct job *jb, int32_t r0, int32_t r1,
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

/* RoPE (llama "normal" pairs: rows 2i and 2i+1 of a head) and K/V stores
 * for output rows [r0, r1), r0 even. */
static void epilogue(struct cpu_step *s, const struct job *jb, int32_t r0, int32_t r1)
{
    const struct model_hparams *hp = &s->m->hp;

    for (int32_t t = 0; t < jb->n_rows; t++) {
        float *y = jb->y + (size_t)t * (size_t)jb->ys;
        const float *cs = s->rope + (size_t)t * (size_t)hp->n_rot;
        if (jb->epi == EPI_ROPE || jb->epi == EPI_ROPE_STORE) {
            for (int32_t r = r0; r < r1; r += 2) {
                int32_t d = r % hp->head_dim;
                float x0 = y[r], x1 = y[r + 1], c, sn;
                if (d >= hp->n_rot)
                    continue;
                c = cs[d];
                sn = cs[d + 1];
                y[r] = x0 * c - x1 * sn;
                y[r + 1] = x0 * sn + x1 * c;
            }
        }
        if (jb->epi == EPI_ROPE_STORE || jb->epi == EPI_STORE) {
            const struct batch_seq *sq = &s->batch->seqs[s->tok_seq[t]];
            int32_t pos = s->tok_pos[t];
            int32_t blk = sq->block_table[pos / KV_BLOCK_TOKENS];
            int32_t slot = pos % KV_BLOCK_TOKENS;
            for (int32_t r = r0; r < r1; r++) {
                int32_t d = r % hp->head_dim;
                size_t at = jb->kv ? (size_t)slot * (size_t)hp->head_dim + (size_t)d
                                   : (size_t)d * KV_BLOCK_TOKENS + (size_t)slot;
                uint8_t *dst = kv_base(s, blk, jb->layer, jb->kv, r / hp->head_dim) +
                               at * (s->kv_f16 ? 2 : 4);
                if (s->kv_f16) {
                    uint16_t h = quant_f32_to_f16(y[r]);
                    memcpy(dst, &h, 2);
                } else {
                    memcpy(dst, &y[r], 4);
                }
            }
        }
    }
}

/* Weight rows [r0, r1) of one job against all its token rows. */
static void run_chunk(struct cpu_step *s, const struct job *jb, int32_t r0, int32_t r1,
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
    if (jb->epi != EPI_NONE)
        epilogue(s, jb, r0, r1);
}

/* Hands out (job, row chunk) pairs of all n_jobs jobs until none is left. */
static void phase_matmul(struct cpu_step *s, const struct job *jobs, int n_jobs, int ph,
                         int ith, int nth)
{
    int32_t cr[CPU_LORA_SLOTS], nch[CPU_LORA_SLOTS], total = 0;
    float *scratch = s->scratch + (size_t)ith * s->scratch_n;

    for (int j = 0; j < n_jobs; j++) {
        cr[j] = chunk_rows(jobs[j].w, nth);
        nch[j] = (int32_t)((jobs[j].w->ne1 + cr[j] - 1) / cr[j]);
        total += nch[j];
    }
    for (;;) {
        int32_t c = atomic_fetch_add_explicit(&s->ctr[ph & 1], 1, memory_order_relaxed), j = 0;
        int32_t r0, r1;
        if (c >= total)
            break;
        while (c >= nch[j])
            c -= nch[j++];
        r0 = c * cr[j];
        r1 = r0 + cr[j] > jobs[j].w->ne1 ? (int32_t)jobs[j].w->ne1 : r0 + cr[j];
        run_chunk(s, &jobs[j], r0, r1, scratch);
    }
}

/* ------------------------------------------------------------------------
 * Attention
 * ---------------------------------------------------------------------- */

/* P.V of value block b (as floats in vf) for the item's queries that see
 * it, in runs of queries that see the same number m of its positions (the
 * heads of one token always do), so the kernel can share loads. */
static void pv_blocks(struct cpu_step *s, const struct cpu_att_item *it, int32_t b,
                      const float *sc, const float *vf)
{
    const struct model_hparams *hp = &s->m->hp;
    const int64_t hd = hp->head_dim;
    const int32_t ratio = hp->n_head / hp->n_head_kv, nq = (it->t1 - it->t0) * ratio;
    const float *wp[8];
    float *yp[8];
    int k = 0, mk = 0;

    for (int32_t i = 0; i <= nq; i++) {
        int32_t t = it->t0 + i / ratio, h = it->head_kv * ratio + i % ratio;
        int32_t m = i < nq ? s->tok_pos[t] + 1 - b * KV_BLOCK_TOKENS : 0;
        m = m < KV_BLOCK_TOKENS ? m : KV_BLOCK_TOKENS;
        if (k && (i == nq || m != mk || k == 8)) {
            s->dot->pv_block(wp, yp, k, vf, hd, mk);
            k = 0;
        }
        if (i == nq || m <= 0)
            continue;
        mk = m;
        wp[k] = sc + (size_t)i * s->att_stride + (size_t)b * KV_BLOCK_TOKENS;
        yp[k++] = s->xb + (size_t)t * (size_t)s->xb_w + (size_t)(h * hd);
    }
}

/*
 * One attention item: every query head of KV head g for the item's tokens
 * (nq = tokens x heads per KV head queries), against positions 0..pos of
 * the sequence, pos being each token's own position: softmax(q.k /
 * sqrt(head_dim)) . v into xb. Each key block is loaded once for all nq
 * queries, each value block converted to floats once.
 *
 * With an F16 arena, q and the softmax weights are rounded to fp16 before
 * they meet the fp16 keys and values, which is what llama.cpp's attention
 * does (ggml converts the F32 operand of an F16 matmul to F16). It costs
 * nothing in accuracy that the fp16 keys have not already cost, and it
 * makes mfc's logits agree with llama.cpp's to ~1e-6 of their spread, so
 * the numerics tests can be tight.
 *
 * scr holds nq * head_dim rounded queries, nq rows of att_stride scores,
 * and one block of values as floats.
 */
static void attend_item(struct cpu_step *s, int32_t layer, const struct cpu_att_item *it,
                        float *scr)
{
    const struct model_hparams *hp = &s->m->hp;
    const struct batch_seq *sq = &s->batch->seqs[it->seq];
    const int64_t hd = hp->head_dim;
    const int32_t ratio = hp->n_head / hp->n_head_kv, nq = (it->t1 - it->t0) * ratio;
    const size_t stride = s->att_stride;
    const float kq_scale = 1.0f / sqrtf((float)hd);
    float *qh = scr, *sc = qh + (size_t)nq * (size_t)hd, *vf = sc + (size_t)nq * stride;
    int32_t n_last = s->tok_pos[it->t1 - 1] + 1;

    for (int32_t i = 0; i < nq; i++) {
        int32_t t = it->t0 + i / ratio, h = it->head_kv * ratio + i % ratio;
        memcpy(qh + (size_t)i * (size_t)hd, s->q + (size_t)t * (size_t)(hp->n_head * hd) + (size_t)(h * hd),
               (size_t)hd * sizeof *qh);
        if (s->kv_f16)
            s->dot->round_f16(qh + (size_t)i * (size_t)hd, hd);
    }
    for (int32_t b = 0; b * KV_BLOCK_TOKENS < n_last; b++) {
        const uint8_t *kt = kv_base(s, sq->block_table[b], layer, 0, it->head_kv);
        for (int32_t i0 = 0; i0 < nq; i0 += 4) {
            const float *qp[4];
            float *sp[4];
            int k = 0;
            for (int32_t i = i0; i < nq && i < i0 + 4; i++) {
                if (s->tok_pos[it->t0 + i / ratio] + 1 <= b * KV_BLOCK_TOKENS)
                    continue; /* this token does not see block b */
                qp[k] = qh + (size_t)i * (size_t)hd;
                sp[k++] = sc + (size_t)i * stride + (size_t)b * KV_BLOCK_TOKENS;
            }
            if (k)
                s->dot->kq_block(qp, k, hd, kt, s->kv_f16, sp);
        }
    }
    for (int32_t i = 0; i < nq; i++)
        s->dot->softmax(sc + (size_t)i * stride, s->tok_pos[it->t0 + i / ratio] + 1, kq_scale,
                        s->kv_f16);
    for (int32_t i = 0; i < nq; i++) {
        int32_t t = it->t0 + i / ratio, h = it->head_kv * ratio + i % ratio;
        memset(s->xb + (size_t)t * (size_t)s->xb_w + (size_t)(h * hd), 0, (size_t)hd * sizeof(float));
    }
    for (int32_t b = 0; b * KV_BLOCK_TOKENS < n_last; b++) {
        s->dot->kv_to_f32(kv_base(s, sq->block_table[b], layer, 1, it->head_kv),
                          KV_BLOCK_TOKENS * hd, s->kv_f16, vf);
        pv_blocks(s, it, b, sc, vf);
    }
}

static void phase_attention(struct cpu_step *s, int32_t layer, int ph, int ith)
{
    float *scr = s->scratch + (size_t)ith * s->scratch_n;

    for (;;) {
        int32_t i = atomic_fetch_add_explicit(&s->ctr[ph & 1], 1, memory_order_relaxed);
        if (i >= s->n_items)
            break;
        attend_item(s, layer, &s->items[i], scr);
    }
}

/* ------------------------------------------------------------------------
 * The pass
 * ---------------------------------------------------------------------- */

/* Starts a dynamic phase: thread 0 clears the counter the phase after this
 * one will use (everyone finished with it two barriers ago). */
static int next_phase(struct cpu_step *s, int *ph, int ith)
{
    ++*ph;
    if (ith == 0)
        atomic_store_explicit(&s->ctr[(*ph + 1) & 1], 0, memory_order_relaxed);
    return *ph;
}

/* The jobs of one layer, by phase. */
struct layer_jobs {
    struct job qkv[3];     /* phase B: attn_q, attn_k, attn_v */
    struct job o;          /* phase E: attn_output, added to the residual */
    struct job gate_up[2]; /* phase G: ffn_gate, ffn_up */
    struct job down;       /* phase I: ffn_down, added to the residual */
};

static struct job mkjob(const struct cpu_step *s, int32_t layer, enum model_wid wid, int slot,
                        const float *xf, int64_t xs, float *y, int64_t ys)
{
    struct job j = {
        .w = &s->m->layers[layer].w[wid],
        .target = layer * MODEL_W_PER_LAYER + (int32_t)wid,
        .slot = slot,
        .xf = xf,
        .xf_stride = xs,
        .n_rows = s->T,
        .y = y,
        .ys = ys,
        .layer = layer,
        .lp = &s->lp_all,
    };
    return j;
}

/* The jobs of layer l; with last set, the ones after attention run on the
 * n_out gathered rows (out_att in, out_x residual, lp_out adapters). */
static void layer_jobs(const struct cpu_step *s, int32_t l, int last, struct layer_jobs *J)
{
    const struct model_hparams *hp = &s->m->hp;
    int64_t qd = (int64_t)hp->n_head * hp->head_dim, kvd = (int64_t)hp->n_head_kv * hp->head_dim;
    float *x = last ? s->out_x : s->x;
    struct job *after[4] = {&J->o, &J->gate_up[0], &J->gate_up[1], &J->down};

    J->qkv[0] = mkjob(s, l, MODEL_W_Q, 0, s->xb, s->xb_w, s->q, qd);
    J->qkv[0].epi = EPI_ROPE;
    J->qkv[1] = mkjob(s, l, MODEL_W_K, 1, s->xb, s->xb_w, s->k, kvd);
    J->qkv[1].epi = EPI_ROPE_STORE;
    J->qkv[2] = mkjob(s, l, MODEL_W_V, 2, s->xb, s->xb_w, s->v, kvd);
    J->qkv[2].epi = EPI_STORE;
    J->qkv[2].kv = 1;
    J->o = last ? mkjob(s, l, MODEL_W_O, 0, s->out_att, qd, x, hp->n_embd)
                : mkjob(s, l, MODEL_W_O, 0, s->xb, s->xb_w, x, hp->n_embd);
    J->o.add = 1;
    J->gate_up[0] = mkjob(s, l, MODEL_W_GATE, 0, s->xb, s->xb_w, s->hg, hp->n_ff);
    J->gate_up[1] = mkjob(s, l, MODEL_W_UP, 1, s->xb, s->xb_w, s->hu, hp->n_ff);
    J->down = mkjob(s, l, MODEL_W_DOWN, 0, s->hg, hp->n_ff, x, hp->n_embd);
    J->down.add = 1;
    for (int i = 0; last && i < 4; i++) {
        after[i]->n_rows = s->n_out;
        after[i]->lp = &s->lp_out;
    }
}

void cpu_fwd_run(void *arg, int ith, int nth)
{
    struct cpu_step *s = arg;
    struct cpu_pool *pool = s->pool;
    const struct model *m = s->m;
    struct layer_jobs J;
    struct job out;
    int ph = 0;

    for (int32_t l = 0; l < m->hp.n_layer; l++) {
        int last = l == m->hp.n_layer - 1;
        layer_jobs(s, l, last, &J);
        phase_attn_in(s, l, J.qkv, ith, nth);
        cpu_pool_barrier(pool);
        phase_matmul(s, J.qkv, 3, next_phase(s, &ph, ith), ith, nth);
        cpu_pool_barrier(pool);
        phase_attention(s, l, next_phase(s, &ph, ith), ith);
        cpu_pool_barrier(pool);
        if (last && s->n_out == 0)
            return; /* nothing wants logits: the K/V of every layer is written */
        phase_attn_out(s, &J.o, last, ith, nth);
        cpu_pool_barrier(pool);
        phase_matmul(s, &J.o, 1, next_phase(s, &ph, ith), ith, nth);
        cpu_pool_barrier(pool);
        phase_ffn_in(s, l, J.o.y, J.gate_up, ith, nth);
        cpu_pool_barrier(pool);
        phase_matmul(s, J.gate_up, 2, next_phase(s, &ph, ith), ith, nth);
        cpu_pool_barrier(pool);
        phase_swiglu(s, &J.down, ith, nth);
        cpu_pool_barrier(pool);
        phase_matmul(s, &J.down, 1, next_phase(s, &ph, ith), ith, nth);
        cpu_pool_barrier(pool);
    }
    out = (struct job){
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
    cpu_pool_barrier(pool);
    if (s->batch->hidden) { /* embeddings: the normed rows are the answer */
        int32_t j0, j1;
        rows_of(s->n_out, ith, nth, &j0, &j1);
        for (int32_t j = j0; j < j1; j++)
            memcpy(s->batch->hidden + (size_t)j * (size_t)m->hp.n_embd,
                   s->xb + (size_t)j * (size_t)s->xb_w, (size_t)m->hp.n_embd * sizeof(float));
        return;
    }
    phase_matmul(s, &out, 1, next_phase(s, &ph, ith), ith, nth);
}
