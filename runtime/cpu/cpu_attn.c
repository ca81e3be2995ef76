/*
 * cpu_attn.c: the CPU backend's attention over the paged KV cache, one work
 * item (sequence, KV head, run of new tokens) at a time, for every family:
 * grouped query heads, the family's score scale, Gemma 2's score soft-cap,
 * gpt-oss's attention sinks (a per-head logit in every softmax's
 * denominator, so a query may give its keys less than all of its weight),
 * and sliding-window layers, where a query at position p sees keys
 * p - n_swa < k <= p (llama.cpp's LLAMA_SWA_TYPE_STANDARD): blocks wholly
 * before every query's window are not read, and positions before a query's
 * window get no weight.
 *
 * Owns nothing; reads the arena cpu_fwd.c wrote and writes each query's
 * output into its xb row. A score and an output are summed in a fixed
 * order whatever else the item holds, so results do not depend on the batch.
 */
#include "runtime/cpu/cpu_int.h"

#include <math.h>
#include <string.h>

/* The first position query token t of a layer may see. */
static int32_t window_lo(const struct cpu_step *s, int swa, int32_t t)
{
    int32_t lo = s->tok_pos[t] - s->m->hp.n_swa + 1;
    return swa && lo > 0 ? lo : 0;
}

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

/* Head h's sink logit from the layer's F32 attn_sinks (any alignment). */
static float rd_sink(const void *sinks, int32_t h)
{
    float f;
    memcpy(&f, (const uint8_t *)sinks + 4 * (size_t)h, sizeof f);
    return f;
}

/* Soft-caps the scores x[lo, n) in ggml's order (scale by 1 / c, tanh,
 * scale by c): c tanh(x / c). */
static void softcap(float *x, int32_t lo, int32_t n, float cap)
{
    const float inv = 1.0f / cap;

    for (int32_t j = lo; j < n; j++)
        x[j] = tanhf(x[j] * inv) * cap;
}

/*
 * One attention item: every query head of KV head g for the item's tokens
 * (nq = tokens x heads per KV head queries), against positions 0..pos of
 * the sequence (or the layer's window), pos being each token's own
 * position: softmax(q.k * kq_scale) . v into xb. Each key block is loaded
 * once for all nq queries, each value block converted to floats once.
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
    const int swa = s->m->layers[layer].swa;
    const void *sinks = s->m->layers[layer].attn_sinks.data;
    const int64_t hd = hp->head_dim;
    const int32_t ratio = hp->n_head / hp->n_head_kv, nq = (it->t1 - it->t0) * ratio;
    const size_t stride = s->att_stride;
    float *qh = scr, *sc = qh + (size_t)nq * (size_t)hd, *vf = sc + (size_t)nq * stride;
    int32_t n_last = s->tok_pos[it->t1 - 1] + 1;
    int32_t b0 = window_lo(s, swa, it->t0) / KV_BLOCK_TOKENS; /* first block any query sees */

    for (int32_t i = 0; i < nq; i++) {
        int32_t t = it->t0 + i / ratio, h = it->head_kv * ratio + i % ratio;
        memcpy(qh + (size_t)i * (size_t)hd, s->q + (size_t)t * (size_t)(hp->n_head * hd) + (size_t)(h * hd),
               (size_t)hd * sizeof *qh);
        if (s->kv_f16)
            s->dot->round_f16(qh + (size_t)i * (size_t)hd, hd);
    }
    for (int32_t b = b0; b * KV_BLOCK_TOKENS < n_last; b++) {
        const uint8_t *kt = cpu_kv_base(s, sq->block_table[b], layer, 0, it->head_kv);
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
    for (int32_t i = 0; i < nq; i++) {
        int32_t t = it->t0 + i / ratio, lo = window_lo(s, swa, t), n = s->tok_pos[t] + 1;
        int32_t h = it->head_kv * ratio + i % ratio;
        float *row = sc + (size_t)i * stride;
        float sink = sinks ? rd_sink(sinks, h) : -INFINITY;
        if (hp->attn_softcap > 0.0f)
            softcap(row, lo, n, hp->attn_softcap);
        /* masked positions would add exp(-inf) = 0 to llama.cpp's sums:
         * leaving them out gives the same weights, and they weigh 0 */
        s->dot->softmax(row + lo, n - lo, hp->kq_scale, s->kv_f16, sink);
        for (int32_t j = b0 * KV_BLOCK_TOKENS; j < lo; j++)
            row[j] = 0.0f;
    }
    for (int32_t i = 0; i < nq; i++) {
        int32_t t = it->t0 + i / ratio, h = it->head_kv * ratio + i % ratio;
        memset(s->xb + (size_t)t * (size_t)s->xb_w + (size_t)(h * hd), 0, (size_t)hd * sizeof(float));
    }
    for (int32_t b = b0; b * KV_BLOCK_TOKENS < n_last; b++) {
        s->dot->kv_to_f32(cpu_kv_base(s, sq->block_table[b], layer, 1, it->head_kv),
                          KV_BLOCK_TOKENS * hd, s->kv_f16, vf);
        pv_blocks(s, it, b, sc, vf);
    }
}

void cpu_attention(struct cpu_step *s, int32_t layer, int ph, int ith)
{
    float *scr = s->scratch + (size_t)ith * s->scratch_n;

    for (;;) {
        int32_t i = atomic_fetch_add_explicit(&s->ctr[ph & 1], 1, memory_order_relaxed);
        if (i >= s->n_items)
            break;
        attend_item(s, layer, &s->items[i], scr);
    }
}
