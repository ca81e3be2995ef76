/*
 * cuda_plan.c: weight placement, the KV budget and per-step bookkeeping of
 * the CUDA backend (see cuda_plan.h). Pure host code: no CUDA calls, so it
 * builds and is tested on machines without the CUDA libraries.
 */
#include "runtime/cuda/cuda_plan.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/num.h"
#include "kernels/kernels.h"
#include "runtime/cuda/cuda_moe.h"

static uint64_t align_up(uint64_t v)
{
    return (v + CUDA_PLAN_ALIGN - 1) / CUDA_PLAN_ALIGN * CUDA_PLAN_ALIGN;
}

int cuda_plan_type_ok(enum ggml_type t, int64_t ne0)
{
    return mfk_weight_ok((int)t, ne0);
}

/* ---- weights ------------------------------------------------------------ */

static int add_slot(struct cuda_wplan *p, const struct model_weight *w, int matrix,
                    struct mf_err *err)
{
    if (!w->data)
        return 0;
    if (matrix ? !cuda_plan_type_ok(w->type, w->ne0) : w->type != GGML_TYPE_F32)
        return mf_err_set(err, MF_EUNSUPPORTED,
                          "the CUDA backend cannot read tensor %s: type %s with rows of %" PRId64
                          " elements",
                          w->name ? w->name : "?", ggml_type_name((uint32_t)w->type), w->ne0);
    p->slots[p->n] = (struct cuda_wslot){.w = w,
                                         .off = p->total,
                                         .bytes = w->row_bytes * (uint64_t)w->ne1 *
                                                  (uint64_t)(w->ne2 > 1 ? w->ne2 : 1)};
    p->total = align_up(p->total + p->slots[p->n].bytes);
    p->n++;
    return 0;
}

/* The switches the CUDA step does not compute: gpt-oss's attention sinks,
 * output and expert biases, clamped SwiGLU and top-k-then-softmax gating
 * (its MXFP4 experts fail cuda_plan_type_ok as well). Such a model is
 * refused with the family named, and MFC_DEVICE=auto runs it on the CPU. */
static int family_ok(const struct model *m, struct mf_err *err)
{
    const struct model_hparams *hp = &m->hp;
    const uint32_t oai = ARCH_SINKS | ARCH_O_BIAS | ARCH_EXPERT_BIASES;

    if (hp->arch && ((hp->arch->flags & oai) || hp->arch->act == ARCH_ACT_SWIGLU_OAI ||
                     hp->arch->gating == ARCH_GATE_TOPK_SOFTMAX))
        return mf_err_set(err, MF_EUNSUPPORTED,
                          "the CUDA backend does not run %s models (attention sinks, biased "
                          "experts with a clamped SwiGLU, MXFP4 weights); the CPU backend does",
                          hp->arch->name);
    return 0;
}

int cuda_plan_kv_ok(enum backend_kv_type t)
{
    return t == BACKEND_KV_F16 || t == BACKEND_KV_Q8 || t == BACKEND_KV_FP8;
}

int cuda_plan_layer_shape(const struct model *m, int32_t l, enum backend_kv_type kv,
                          struct mfk_kv_shape *ks)
{
    const struct model_hparams *hp = &m->hp;

    *ks = (struct mfk_kv_shape){.n_layer = hp->n_layer,
                                .n_head = hp->n_head,
                                .n_head_kv = hp->n_head_kv,
                                .head_dim = hp->head_dim,
                                .n_rot = hp->n_rot,
                                .q8 = kv == BACKEND_KV_Q8 || kv == BACKEND_KV_FP8,
                                .fp8 = kv == BACKEND_KV_FP8,
                                .neox = hp->rope_neox,
                                .q_scale = hp->q_scale,
                                .kq_scale = hp->kq_scale,
                                .softcap = hp->attn_softcap,
                                .window = m->layers[l].swa ? hp->n_swa : 0};
    return ks->softcap > 0.0f || ks->window > 0;
}

int cuda_plan_weights(const struct model *m, struct cuda_wplan *p, struct mf_err *err)
{
    /* per layer: 2 norms, 3 biases, 2 q/k norms, 2 post-norms, router, experts */
    int32_t cap = 3 + m->hp.n_layer * (MODEL_W_PER_LAYER + 10 + MODEL_EXP_COUNT);
    int rc;

    memset(p, 0, sizeof *p);
    rc = family_ok(m, err);
    if (!rc)
        rc = cuda_moe_check(m, err); /* every other switch runs; routed layers' limits */
    if (rc)
        return rc;
    p->slots = calloc((size_t)cap, sizeof *p->slots);
    if (!p->slots)
        return mf_err_set(err, MF_ENOMEM, "out of memory planning %d weight uploads", cap);
    if (!rc)
        rc = add_slot(p, &m->tok_embd, 1, err);
    if (!rc && !m->tied)
        rc = add_slot(p, &m->output, 1, err);
    if (!rc)
        rc = add_slot(p, &m->out_norm, 0, err);
    for (int32_t l = 0; !rc && l < m->hp.n_layer; l++) {
        const struct model_layer *L = &m->layers[l];
        rc = add_slot(p, &L->attn_norm, 0, err);
        for (int w = 0; !rc && w < MODEL_W_PER_LAYER; w++)
            rc = add_slot(p, &L->w[w], 1, err);
        if (!rc)
            rc = add_slot(p, &L->ffn_norm, 0, err);
        for (int i = 0; !rc && i < 3; i++)
            rc = add_slot(p, &L->bias[i], 0, err);
        if (!rc)
            rc = add_slot(p, &L->q_norm, 0, err);
        if (!rc)
            rc = add_slot(p, &L->k_norm, 0, err);
        if (!rc)
            rc = add_slot(p, &L->attn_post_norm, 0, err);
        if (!rc)
            rc = add_slot(p, &L->ffn_post_norm, 0, err);
        if (!rc) /* a routed layer: the router, and each expert tensor whole */
            rc = add_slot(p, &L->gate_inp, 1, err);
        for (int x = 0; !rc && x < MODEL_EXP_COUNT; x++)
            rc = add_slot(p, &L->exps[x], 1, err);
    }
    if (rc)
        cuda_wplan_free(p);
    return rc;
}

void cuda_wplan_free(struct cuda_wplan *p)
{
    free(p->slots);
    memset(p, 0, sizeof *p);
}

const struct cuda_wslot *cuda_wplan_find(const struct cuda_wplan *p, const struct model_weight *w)
{
    for (int32_t i = 0; i < p->n; i++)
        if (p->slots[i].w == w || (w->data && p->slots[i].w->data == w->data))
            return &p->slots[i];
    return NULL;
}

/* ---- KV budget ---------------------------------------------------------- */

/* A token count from the environment: def for NULL or "", else an integer
 * in 0..1000000; MF_EINVAL naming the variable and what 0 means. */
static int plan_tokens(const char *name, const char *v, int32_t def, const char *zero,
                       int32_t *out, struct mf_err *err)
{
    int64_t n = def;
    if (v && *v && (mf_num_parse_i64(v, &n) != 0 || n < 0 || n > 1000000))
        return mf_err_set(err, MF_EINVAL,
                          "%s=\"%.40s\": expected tokens per step, 0 to 1000000 (0 %s)", name, v,
                          zero);
    *out = (int32_t)n;
    return 0;
}

int cuda_plan_gemm_min(const char *v, int32_t *out, struct mf_err *err)
{
    return plan_tokens("MFC_CUDA_GEMM_MIN", v, CUDA_DEFAULT_GEMM_MIN,
                       "turns the tensor-core GEMM off", out, err);
}

int cuda_plan_qgemm_max(const char *v, int32_t *out, struct mf_err *err)
{
    return plan_tokens("MFC_CUDA_QGEMM_MAX", v, MFK_QGEMM_MAX_TOKENS,
                       "sends every quantized GEMM to cuBLAS", out, err);
}

int32_t cuda_plan_att_splits(int32_t T, int32_t n_head_kv, int32_t sms, int32_t max_ctx)
{
    const int64_t blocks = (int64_t)T * n_head_kv;
    const int32_t nblk = (max_ctx + CUDA_PLAN_TILE - 1) / CUDA_PLAN_TILE;
    const int32_t cap = nblk / CUDA_PLAN_SPLIT_BLOCKS;
    if (blocks <= 0 || sms <= 0 || blocks >= sms || cap < 2)
        return 1;
    const int64_t want = (2 * (int64_t)sms + blocks - 1) / blocks;
    return want < cap ? (int32_t)want : cap;
}

int cuda_plan_combine_q8(int32_t T, int32_t n_tiles, int32_t splits)
{
    return T > 0 && T <= CUDA_PLAN_COMBINE_Q8_MAX && n_tiles == 0 && splits > 1;
}

int32_t cuda_plan_gemm_from(enum ggml_type t, int32_t gemm_min, int mmq)
{
    if (gemm_min <= 0)
        return 0;
    if (t == GGML_TYPE_F32 || t == GGML_TYPE_F16 || t == GGML_TYPE_BF16)
        return gemm_min < 2 ? gemm_min : 2;
    if (t == GGML_TYPE_Q4_K && mmq && gemm_min <= CUDA_PLAN_MMQ_MAX)
        return CUDA_PLAN_MMQ_MAX + 1;
    return gemm_min;
}

int cuda_plan_q8_input(int n, const enum ggml_type *types, int64_t ne0, int32_t T,
                       int32_t max_tokens, int32_t gemm_min, int mmq)
{
    if (T <= 0 || T > CUDA_PLAN_MMQ_MAX || T > max_tokens || ne0 <= 0 || ne0 % 256)
        return 0;
    for (int i = 0; i < n; i++) {
        int32_t from = cuda_plan_gemm_from(types[i], gemm_min, mmq);
        if ((types[i] == GGML_TYPE_Q4_K || types[i] == GGML_TYPE_Q6_K) && !(from > 0 && T >= from))
            return 1;
    }
    return 0;
}

int cuda_plan_swiglu_rounded(enum ggml_type t, int32_t T, int32_t gemm_min, int mmq,
                             int adapters)
{
    const int32_t from = cuda_plan_gemm_from(t, gemm_min, mmq);
    return from > 0 && T >= from && t != GGML_TYPE_F32 && !adapters;
}

int cuda_plan_norm_rounded(int n, const enum ggml_type *types, int32_t T, int32_t gemm_min, int mmq)
{
    for (int i = 0; i < n; i++) {
        const int32_t from = cuda_plan_gemm_from(types[i], gemm_min, mmq);
        if (from <= 0 || T < from || types[i] == GGML_TYPE_F32 ||
            (types[i] == GGML_TYPE_F16) != (types[0] == GGML_TYPE_F16))
            return 0;
    }
    return n > 0;
}

int cuda_plan_switch(const char *name, const char *v, int def, int *on, struct mf_err *err)
{
    if (!v || !*v)
        *on = def;
    else if (strcmp(v, "1") == 0 || strcmp(v, "0") == 0)
        *on = v[0] == '1';
    else
        return mf_err_set(err, MF_EINVAL, "%s=\"%.40s\": expected 0 (off) or 1 (on; %s by default)",
                          name, v, def ? "on" : "off");
    return 0;
}

int cuda_plan_kv_budget(uint64_t total_b, uint64_t free_b, const char *util, uint64_t kv_bytes,
                        uint64_t *budget, struct mf_err *err)
{
    double u = CUDA_DEFAULT_UTILIZATION, allowed, used;
    char *end = NULL;

    if (kv_bytes) {
        *budget = kv_bytes;
        return 0;
    }
    if (util && *util) {
        errno = 0;
        u = strtod(util, &end);
        if (errno || end == util || *end || !(u > 0.0 && u <= 1.0))
            return mf_err_set(err, MF_EINVAL,
                              "MFC_GPU_MEMORY_UTILIZATION='%s' is not a fraction in (0, 1]", util);
    }
    if (free_b > total_b)
        free_b = total_b;
    allowed = u * (double)total_b;
    used = (double)(total_b - free_b);
    if (allowed - used < 1.0)
        return mf_err_set(err, MF_ENOMEM,
                          "no GPU memory left for the KV cache: %.2f GiB in use of the %.2f GiB "
                          "that MFC_GPU_MEMORY_UTILIZATION=%.2f allows",
                          used / 1073741824.0, allowed / 1073741824.0, u);
    *budget = (uint64_t)floor(allowed - used);
    if (*budget > free_b)
        *budget = free_b;
    return 0;
}

/* ---- one step ----------------------------------------------------------- */

static size_t take(size_t *off, size_t bytes)
{
    size_t at = *off;
    *off = (size_t)align_up(at + bytes);
    return at;
}

/* 1 if sequence sq's tokens are attended in tiles (CUDA_PLAN_TILE_MIN). A
 * verify step's sequence (every new token wants its logits: a decode token
 * and its proposals) is attended one token at a time like a decode, so each
 * row is computed as the decode step without proposals would compute it. */
static int tiled(const struct batch_seq *sq, int32_t single_cap)
{
    if (sq->n_past + sq->n_tokens > single_cap)
        return 1;
    if (sq->want_logits == sq->n_tokens && sq->n_tokens <= CUDA_PLAN_VERIFY_MAX)
        return 0;
    return sq->n_tokens >= CUDA_PLAN_TILE_MIN;
}

/* Offsets of p's arrays from its counts. The block tables go last: they
 * are the only array whose size moves with the contexts, so two decode
 * steps of the same token count share every other offset (a recorded
 * step's kernels keep theirs). */
static void layout(const struct model *m, struct cuda_step_plan *p)
{
    size_t off = 0, T = (size_t)p->T;
    p->tok_id = take(&off, T * 4);
    p->tok_pos = take(&off, T * 4);
    p->tok_blk = take(&off, T * 4);
    p->tok_toff = take(&off, T * 4);
    p->out_rows = take(&off, (size_t)p->n_out * 4);
    p->rope = take(&off, T * (size_t)m->n_rope_kinds * (size_t)m->hp.n_rot * sizeof(float));
    p->tiles = take(&off, (size_t)p->n_tiles * 8);
    p->single = take(&off, (size_t)p->n_single * 4);
    p->tables = take(&off, (size_t)p->n_tables * 4);
    p->bytes = off;
}

void cuda_plan_step_size(const struct model *m, const struct batch *bt, int32_t single_cap,
                         int decode_tiles, struct cuda_step_plan *p)
{
    memset(p, 0, sizeof *p);
    for (int32_t i = 0; i < bt->n_seqs; i++) {
        const struct batch_seq *sq = &bt->seqs[i];
        int32_t ctx = sq->n_past + sq->n_tokens;
        p->T += sq->n_tokens;
        p->n_out += sq->want_logits;
        p->n_tables += (ctx + KV_BLOCK_TOKENS - 1) / KV_BLOCK_TOKENS;
        if (ctx > p->max_ctx)
            p->max_ctx = ctx;
        if (tiled(sq, single_cap)) {
            p->n_tiles += (sq->n_tokens + CUDA_PLAN_TILE - 1) / CUDA_PLAN_TILE;
            p->n_long += (sq->n_tokens + CUDA_PLAN_TILE - 1) / CUDA_PLAN_TILE;
        } else {
            p->n_single += sq->n_tokens;
            if (ctx > p->single_ctx)
                p->single_ctx = ctx;
        }
    }
    /* k_flash_dec takes heads of 64 and 128 dimensions; k_tiles the others */
    const int dec_kernel = m->hp.head_dim == 64 || m->hp.head_dim == 128;
    if (decode_tiles && (p->n_single > CUDA_PLAN_DECODE_TILES ||
                         (dec_kernel && p->n_single >= CUDA_PLAN_DECODE_TILES_MIN &&
                          p->single_ctx <= CUDA_PLAN_DECODE_TILES_CTX))) {
        /* a 1-token tile each */
        p->dtiles = 1;
        p->dtile_ctx = p->single_ctx;
        p->n_tiles += p->n_single;
        p->n_single = p->single_ctx = 0;
    }
    p->single_cap = single_cap;
    p->att_cap = p->single_ctx;
    p->n_real = p->T;
    p->out_real = p->n_out;
    p->pad_blk = -1;
    layout(m, p);
}

int cuda_plan_tiles_decode(const struct cuda_step_plan *p)
{
    return !p->dtiles ? 0 : p->n_long ? 1 : 2;
}

int cuda_plan_dec_warps(int32_t n_tiles, int32_t n_head, int32_t n_head_kv, int32_t head_dim,
                        int32_t ctx, int32_t sms)
{
    static const int nws[] = {3, 4, 6, 8};
    const int64_t blocks = (int64_t)n_tiles * (n_head_kv > 0 ? n_head_kv : 1);
    const int64_t nblk = ctx > 0 ? ((int64_t)ctx + KV_BLOCK_TOKENS - 1) / KV_BLOCK_TOKENS : 1;
    const int64_t ratio = n_head_kv > 0 ? n_head / n_head_kv : 1, rows = ratio < 16 ? ratio : 16;
    int64_t best_cost = 0;
    int best = 0;
    /* A block's time goes as a warp's share of the context's KV blocks,
     * twice that when the share's scores overflow k_flash_dec's stash
     * (share x rows x 16 floats in head_dim x 16: the second walk reads
     * the keys again and repeats their products: H200, batch 64 of 1536
     * and 2000 tokens, 3 warps without it lost 2-3% to 4 with it, and 6
     * with it, two waves, won 8-10%). The least waves x cost wins, ties to
     * the fewer warps. */
    for (int i = 0; i < (int)(sizeof nws / sizeof nws[0]); i++) {
        const int64_t slots = (int64_t)(sms > 0 ? sms : 1) * (12 / nws[i]);
        const int64_t share = (nblk + nws[i] - 1) / nws[i];
        const int64_t cost =
            (blocks + slots - 1) / slots * share * (share * rows <= head_dim ? 1 : 2);
        if (!best || cost < best_cost)
            best = nws[i], best_cost = cost;
    }
    return best;
}

int32_t cuda_plan_lora_groups(const struct cuda_lora_rows *seqs, int32_t n_seqs, int32_t n_loras,
                              struct cuda_lora_group *g, int32_t *rows, float *scales)
{
    int32_t ng = 0, k = 0;
    for (int32_t a = 0; a < n_loras; a++) {
        int32_t start = k, named_by = 0;
        for (int32_t i = 0; i < n_seqs; i++) {
            const struct batch_lora *lo = seqs[i].lora;
            float sc = 0.0f;
            int named = 0;
            for (int32_t j = 0; lo && j < lo->n; j++)
                if (lo->ids[j] == a) /* named twice: applied twice, so the scales add */
                    sc += lo->scales[j], named = 1;
            if (!named)
                continue;
            for (int32_t r = 0; r < seqs[i].n; r++, k++) {
                rows[k] = (int32_t)(seqs[i].first + r);
                scales[k] = sc;
            }
            named_by++;
        }
        if (k > start)
            g[ng++] = (struct cuda_lora_group){a, start, k - start, named_by};
    }
    return ng;
}

int32_t cuda_plan_graph_tokens(int32_t T, int32_t cap)
{
    int32_t n = T <= 2 ? T : T <= 4 ? 4 : (T + 7) / 8 * 8;
    if (cap > CUDA_PLAN_GRAPH_MAX)
        cap = CUDA_PLAN_GRAPH_MAX;
    return T < 1 || n > cap ? 0 : n;
}

void cuda_plan_step_pad(const struct model *m, struct cuda_step_plan *p, int32_t T,
                        int32_t pad_blk)
{
    int32_t ctx = p->single_ctx > 0 ? p->single_ctx : 1;
    ctx = (ctx + CUDA_PLAN_GRAPH_CTX - 1) / CUDA_PLAN_GRAPH_CTX * CUDA_PLAN_GRAPH_CTX;
    p->att_cap = ctx < p->single_cap ? ctx : p->single_cap;
    if (p->dtiles)
        p->n_tiles += T - p->T;
    else
        p->n_single += T - p->T;
    p->T = T;
    p->n_out = T;
    p->n_tables++; /* the padding's table: pad_blk */
    p->pad_blk = pad_blk;
    layout(m, p);
}

void cuda_plan_step_fill(const struct model *m, const struct batch *bt,
                         const struct cuda_step_plan *p, void *buf)
{
    uint8_t *b = buf;
    int32_t *id = (int32_t *)(void *)(b + p->tok_id), *pos = (int32_t *)(void *)(b + p->tok_pos);
    int32_t *blk = (int32_t *)(void *)(b + p->tok_blk),
            *toff = (int32_t *)(void *)(b + p->tok_toff);
    int32_t *out = (int32_t *)(void *)(b + p->out_rows), *tab = (int32_t *)(void *)(b + p->tables);
    float *rope = (float *)(void *)(b + p->rope);
    int32_t *tiles = (int32_t *)(void *)(b + p->tiles),
            *single = (int32_t *)(void *)(b + p->single);
    int32_t t = 0, n_out = 0, nt = 0, n_tiles = 0, n_single = 0;

    for (int32_t i = 0; i < bt->n_seqs; i++) {
        const struct batch_seq *sq = &bt->seqs[i];
        int32_t nb = (sq->n_past + sq->n_tokens + KV_BLOCK_TOKENS - 1) / KV_BLOCK_TOKENS;
        memcpy(tab + nt, sq->block_table, (size_t)nb * sizeof *tab);
        if (tiled(sq, p->single_cap)) {
            for (int32_t j = 0; j < sq->n_tokens; j += CUDA_PLAN_TILE) {
                tiles[2 * n_tiles] = t + j;
                tiles[2 * n_tiles + 1] =
                    sq->n_tokens - j < CUDA_PLAN_TILE ? sq->n_tokens - j : CUDA_PLAN_TILE;
                n_tiles++;
            }
        } else {
            for (int32_t j = 0; j < sq->n_tokens; j++) {
                if (p->dtiles) {
                    tiles[2 * n_tiles] = t + j;
                    tiles[2 * n_tiles + 1] = 1;
                    n_tiles++;
                } else {
                    single[n_single++] = t + j;
                }
            }
        }
        for (int32_t j = 0; j < sq->n_tokens; j++, t++) {
            id[t] = sq->tokens[j];
            pos[t] = sq->n_past + j;
            blk[t] = sq->block_table[pos[t] / KV_BLOCK_TOKENS];
            toff[t] = nt;
            for (int k = 0; k < m->n_rope_kinds; k++)
                model_rope_row(m, k, pos[t], rope + ((size_t)k * (size_t)p->T + (size_t)t) *
                                                        (size_t)m->hp.n_rot);
        }
        for (int32_t r = sq->want_logits; r > 0; r--)
            out[n_out++] = t - r;
        nt += nb;
    }
    if (p->pad_blk < 0)
        return;
    /* padding (cuda_plan_step_pad): token 0 at position 0 of pad_blk, every
     * extra logits row the step's last token */
    tab[nt] = p->pad_blk;
    for (; t < p->T; t++) {
        id[t] = 0;
        pos[t] = 0;
        blk[t] = p->pad_blk;
        toff[t] = nt;
        for (int k = 0; k < m->n_rope_kinds; k++)
            model_rope_row(m, k, 0, rope + ((size_t)k * (size_t)p->T + (size_t)t) *
                                               (size_t)m->hp.n_rot);
        if (p->dtiles) {
            tiles[2 * n_tiles] = t;
            tiles[2 * n_tiles + 1] = 1;
            n_tiles++;
        } else {
            single[n_single++] = t;
        }
    }
    while (n_out < p->n_out)
        out[n_out++] = p->T - 1;
}

size_t cuda_plan_mask_words(int32_t n_vocab)
{
    return ((size_t)n_vocab + 31) / 32;
}

int cuda_plan_masks(const struct sampler_draw *d, int32_t n, int32_t n_vocab,
                    struct mfk_draw *hd, uint32_t *hm, size_t *nm)
{
    const size_t words = cuda_plan_mask_words(n_vocab);
    int any = 0;
    *nm = 0;
    for (int32_t j = 0; j < n; j++) {
        if (!d[j].allow)
            continue;
        hd[j].mask_off = (int32_t)*nm;
        memcpy(hm + *nm, d[j].allow, words * sizeof *hm);
        *nm += words;
        any = 1;
    }
    return any;
}

int cuda_plan_draws(const struct sampler_draw *d, int32_t n, int32_t n_vocab,
                    struct mfk_draw *hd, struct mfk_adjust *ha, size_t *na, struct mf_err *err)
{
    *na = 0;
    for (int32_t j = 0; j < n; j++) {
        const struct sampler_draw *dj = &d[j];
        if (dj->n_adjust < 0 || dj->n_adjust > MFK_SAMPLE_ADJUST || dj->top_k > MFK_SAMPLE_TOP_K)
            return mf_err_set(err, MF_EINVAL,
                              "device draw %d: %d adjustments, top_k %d (limits %d, %d)", j,
                              dj->n_adjust, dj->top_k, MFK_SAMPLE_ADJUST, MFK_SAMPLE_TOP_K);
        hd[j] = (struct mfk_draw){.u = dj->u,
                                  .temperature = dj->temperature,
                                  .top_k = dj->top_k,
                                  .top_p = dj->top_p,
                                  .min_p = dj->min_p,
                                  .repeat_penalty = dj->repeat_penalty,
                                  .presence_penalty = dj->presence_penalty,
                                  .frequency_penalty = dj->frequency_penalty,
                                  .adj_off = (int32_t)*na,
                                  .n_adj = dj->n_adjust,
                                  .mask_off = -1};
        for (int32_t i = 0; i < dj->n_adjust; i++) {
            const struct sampler_adjust *a = &dj->adjust[i];
            if (a->token < 0 || a->token >= n_vocab || (i && a->token <= dj->adjust[i - 1].token))
                return mf_err_set(err, MF_EINVAL,
                                  "device draw %d: adjust token %d is not an ascending id below "
                                  "%d",
                                  j, a->token, n_vocab);
            ha[(*na)++] = (struct mfk_adjust){a->token, a->count, a->bias};
        }
    }
    return 0;
}
