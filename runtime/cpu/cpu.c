/*
 * cpu.c: the CPU backend: its lifecycle, the KV arena, and the planning of
 * each step (token rows, LoRA groups, attention work, scratch memory)
 * before cpu_fwd.c computes it on the thread pool.
 *
 * Owns the pool, the KV arena (backend.h layout, F16 by default) and one
 * scratch arena that grows to the largest step seen (so a steady stream of
 * decode steps allocates nothing). Does not own the model or the block ids
 * (kv.c decides which blocks a sequence uses; this file only checks they
 * are inside the arena).
 *
 * States:  CREATED --cpu_kv_alloc--> READY --cpu_step--> READY
 *          any --cpu_free--> gone
 * A step before the arena exists is refused (MF_EINVAL).
 *
 * Why F16 KV: it halves the bytes attention streams per context token for
 * one vcvtph2ps per 8 elements. Measured (125M Q4_K_M, one Zen 4 core,
 * 1900-token prompt then 64 decodes): F16 prefill 303 vs F32 275 tok/s,
 * decode 78-88 vs 66-67 tok/s. llama.cpp stores F16 too, which keeps the
 * numerics comparison honest. BACKEND_KV_F32 remains for exactness tests.
 */
#include "runtime/cpu/cpu_int.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/model/lora.h"

#define DEFAULT_KV_BYTES (256ull << 20) /* 256 MiB when the caller gives no budget */
#define DEFAULT_MAX_TOKENS 2048
#define DEFAULT_MAX_SEQS 256
#define ATT_RUN 8 /* new tokens per attention work item, at most */
#define ATT_SCORES (64 << 10) /* score floats per item, at most (keeps an item's
                                 scores, 256 KiB, in L2 while its values stream) */

struct cpu_backend {
    struct backend base;          /* ops = &cpu_backend_ops; must be first */
    const struct model *m;        /* borrowed; outlives the backend */
    struct backend_config cfg;    /* with defaults filled in */
    const struct cpu_dot *dot;    /* kernels chosen at create */
    const struct quant_ops *qops; /* dequantizers for embedding rows */
    struct cpu_pool *pool;        /* owned */
    uint8_t *kv;                  /* owned: the arena, n_blocks blocks */
    int32_t n_blocks;             /* 0 until kv_alloc */
    uint8_t *arena;               /* owned: step scratch, 64-byte aligned */
    size_t arena_size;            /* bytes */
};

static struct cpu_backend *cb_of(struct backend *b)
{
    return (struct cpu_backend *)(void *)b;
}

/* ------------------------------------------------------------------------
 * Lifecycle
 * ---------------------------------------------------------------------- */

static void fill_defaults(struct backend_config *c)
{
    if (c->n_threads <= 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        c->n_threads = n > 0 && n < 1024 ? (int32_t)n : 1;
    }
    if (c->kv_bytes == 0)
        c->kv_bytes = DEFAULT_KV_BYTES;
    if (c->max_tokens <= 0)
        c->max_tokens = DEFAULT_MAX_TOKENS;
    if (c->max_seqs <= 0)
        c->max_seqs = DEFAULT_MAX_SEQS;
    if (c->max_logits <= 0)
        c->max_logits = c->max_seqs;
}

static void cpu_free(struct backend *b)
{
    struct cpu_backend *cb;

    if (!b)
        return;
    cb = cb_of(b);
    cpu_pool_free(cb->pool);
    free(cb->kv);
    free(cb->arena);
    free(cb);
}

static int cpu_create(const struct model *m, const struct backend_config *cfg,
                      struct backend **out, struct mf_err *err)
{
    struct cpu_backend *cb;
    int rc;

    *out = NULL;
    if (cfg && cfg->kv_type != BACKEND_KV_F16 && cfg->kv_type != BACKEND_KV_F32)
        return mf_err_set(
            err, MF_EUNSUPPORTED,
            "the CPU backend keeps K/V in F16 or F32 (8-bit and FP8 K/V are CUDA only)");
    cb = calloc(1, sizeof *cb);
    if (!cb)
        return mf_err_set(err, MF_ENOMEM, "out of memory creating the CPU backend");
    cb->base.ops = &cpu_backend_ops;
    cb->m = m;
    if (cfg)
        cb->cfg = *cfg;
    fill_defaults(&cb->cfg);
    cb->dot = cpu_dot_best();
    if (cb->cfg.kernels) {
        cb->dot = NULL;
        for (int isa = 0; isa < CPU_ISA_COUNT && !cb->dot; isa++) {
            const struct cpu_dot *d = cpu_dot_for((enum cpu_isa)isa);
            if (d && strcmp(d->name, cb->cfg.kernels) == 0)
                cb->dot = d;
        }
        if (!cb->dot) {
            cpu_free(&cb->base);
            return mf_err_set(err, MF_EUNSUPPORTED,
                              "CPU kernels '%s' are not available here (best: %s)",
                              cfg->kernels, cpu_dot_best()->name);
        }
    }
    cb->qops = quant_ops_get();
    rc = cpu_pool_new(cb->cfg.n_threads, &cb->pool, err);
    if (rc) {
        cpu_free(&cb->base);
        return rc;
    }
    *out = &cb->base;
    return 0;
}

static int cpu_kv_alloc(struct backend *b, int32_t *n_blocks, struct mf_err *err)
{
    struct cpu_backend *cb = cb_of(b);
    uint64_t bb = backend_kv_block_bytes(cb->m, cb->cfg.kv_type);
    int32_t n = backend_kv_n_blocks(cb->m, cb->cfg.kv_type, cb->cfg.kv_bytes);

    if (cb->kv)
        return mf_err_set(err, MF_EINVAL, "the KV arena is already allocated");
    if (n < 1)
        return mf_err_set(err, MF_ENOMEM,
                          "KV budget of %" PRIu64 " bytes holds no block of %" PRIu64 " bytes",
                          cb->cfg.kv_bytes, bb);
    /* zeroed: a block read before it is written (a kv.c bug) gives zeros,
     * never stale data from another request */
    cb->kv = calloc((size_t)n, (size_t)bb);
    if (!cb->kv)
        return mf_err_set(err, MF_ENOMEM, "out of memory for a KV arena of %" PRId32
                          " blocks (%" PRIu64 " bytes)", n, (uint64_t)n * bb);
    cb->n_blocks = n;
    *n_blocks = n;
    return 0;
}

/* ------------------------------------------------------------------------
 * Step planning
 * ---------------------------------------------------------------------- */

/* Scratch layout of one step: offsets into the arena, 64-byte aligned. */
struct layout {
    size_t off;  /* bytes used so far */
};

static size_t take(struct layout *L, size_t bytes)
{
    size_t at = L->off;
    L->off += (bytes + 63) & ~(size_t)63;
    return at;
}

/* Counts for sizing: LoRA pairs over all tokens and over the logits rows,
 * the largest adapter rank, the longest sequence. */
struct counts {
    int32_t T;         /* new tokens */
    int32_t n_out;     /* sequences wanting logits */
    int32_t pairs_all; /* (token, adapter) pairs over all tokens */
    int32_t pairs_out; /* (logits row, adapter) pairs */
    int32_t rank_max;  /* largest adapter rank in the step */
    int32_t max_pos;   /* longest sequence after the step, tokens */
    int32_t n_items;   /* attention work items */
    int32_t att_run;   /* tokens per attention item */
};

/* Tokens per attention item: up to ATT_RUN, fewer when their score rows
 * (queries x longest sequence) would pass ATT_SCORES. */
static int32_t att_run(const struct model_hparams *hp, int32_t max_pos)
{
    int64_t per_token = (int64_t)(hp->n_head / hp->n_head_kv) *
                        ((max_pos + KV_BLOCK_TOKENS - 1) / KV_BLOCK_TOKENS * KV_BLOCK_TOKENS);
    int64_t run = ATT_SCORES / (per_token ? per_token : 1);

    return run < 1 ? 1 : run > ATT_RUN ? ATT_RUN : (int32_t)run;
}

static void count_step(const struct cpu_backend *cb, const struct batch *bt, struct counts *c)
{
    memset(c, 0, sizeof *c);
    for (int32_t i = 0; i < bt->n_seqs; i++) {
        const struct batch_seq *sq = &bt->seqs[i];
        c->T += sq->n_tokens;
        c->n_out += sq->want_logits;
        c->pairs_all += sq->n_tokens * sq->lora.n;
        c->pairs_out += sq->want_logits * sq->lora.n;
        for (int32_t j = 0; j < sq->lora.n; j++) {
            const struct lora *l = cb->m->loras[sq->lora.ids[j]];
            for (int32_t t = 0; t < l->n_targets; t++)
                if (l->pairs[t].rank > c->rank_max)
                    c->rank_max = l->pairs[t].rank;
        }
        if (sq->n_past + sq->n_tokens > c->max_pos)
            c->max_pos = sq->n_past + sq->n_tokens;
    }
    if (bt->hidden) { /* every token is an output row */
        c->n_out = c->T;
        c->pairs_out = c->pairs_all;
    }
    c->att_run = att_run(&cb->m->hp, c->max_pos);
    for (int32_t i = 0; i < bt->n_seqs; i++)
        c->n_items += cb->m->hp.n_head_kv * ((bt->seqs[i].n_tokens + c->att_run - 1) / c->att_run);
}

/* Lays out the step's scratch; with base, points every scratch pointer of s
 * (and *cursor, planning scratch) into it. Returns the bytes needed. */
static size_t lay_out(const struct cpu_backend *cb, const struct counts *c, struct cpu_step *s,
                      uint8_t *base, int32_t **cursor)
{
    const struct model *m = cb->m;
    const struct model_hparams *hp = &m->hp;
    int64_t qd = (int64_t)hp->n_head * hp->head_dim, kvd = (int64_t)hp->n_head_kv * hp->head_dim;
    int64_t wmax = hp->n_ff > s->xb_w ? hp->n_ff : s->xb_w;
    size_t T = (size_t)c->T, pmax = (size_t)(c->pairs_all > c->pairs_out ? c->pairs_all
                                                                         : c->pairs_out);
    size_t ne = (size_t)hp->n_expert, R = T * (size_t)hp->n_expert_used;
    size_t act_rows = R > T ? R : T, fe = (size_t)hp->n_ff_exp;
    int32_t nth = cpu_pool_size(cb->pool);
    struct layout L = {0};
    size_t o[32];
    int k = 0;

    if ((int64_t)fe > wmax)
        wmax = (int64_t)fe;
    /* scratch per thread: attention queries, scores and a value block, or
     * LoRA expand results, or an expert sum */
    int64_t nq = (int64_t)c->att_run * (hp->n_head / hp->n_head_kv);
    s->att_run = c->att_run;
    s->att_stride = (size_t)((c->max_pos + KV_BLOCK_TOKENS - 1) / KV_BLOCK_TOKENS * KV_BLOCK_TOKENS);
    s->scratch_n = (size_t)nq * ((size_t)hp->head_dim + s->att_stride) +
                   KV_BLOCK_TOKENS * (size_t)hp->head_dim;
    if (pmax * CPU_MAX_CHUNK_ROWS > s->scratch_n)
        s->scratch_n = pmax * CPU_MAX_CHUNK_ROWS;
    if ((size_t)hp->n_embd > s->scratch_n)
        s->scratch_n = (size_t)hp->n_embd;
    o[k++] = take(&L, T * 3 * sizeof(int32_t));
    o[k++] = take(&L, (size_t)c->n_out * 2 * sizeof(int32_t));
    o[k++] = take(&L, (T + 1) * sizeof(int32_t));
    o[k++] = take(&L, T * (size_t)m->n_rope_kinds * (size_t)hp->n_rot * sizeof(float));
    o[k++] = take(&L, T * (size_t)hp->n_embd * 2 * sizeof(float));
    o[k++] = take(&L, (size_t)c->n_out * (size_t)(hp->n_embd + qd) * sizeof(float));
    o[k++] = take(&L, T * (size_t)s->xb_w * sizeof(float));
    o[k++] = take(&L, T * (size_t)qd * sizeof(float));
    o[k++] = take(&L, T * (size_t)kvd * 2 * sizeof(float));
    o[k++] = take(&L, T * (size_t)hp->n_ff * 2 * sizeof(float));
    for (int a = 1; a < CPU_ACT_COUNT; a++)
        o[k++] = take(&L, act_rows * cpu_dot_act_bytes((enum cpu_act)a, (wmax + 255) / 256 * 256));
    o[k++] = take(&L, CPU_LORA_SLOTS * pmax * (size_t)c->rank_max * sizeof(float));
    o[k++] = take(&L, 2 * pmax * sizeof(struct cpu_pair));
    o[k++] = take(&L, 2 * MODEL_MAX_LORAS * sizeof(struct cpu_group));
    o[k++] = take(&L, (T + (size_t)c->n_out + 2) * sizeof(int32_t));
    o[k++] = take(&L, 2 * pmax * sizeof(int32_t));
    o[k++] = take(&L, (size_t)c->n_items * sizeof(struct cpu_att_item));
    o[k++] = take(&L, (size_t)nth * s->scratch_n * sizeof(float));
    /* mixture of experts */
    o[k++] = take(&L, T * ne * sizeof(float));
    o[k++] = take(&L, R * (sizeof(int32_t) * 3 + sizeof(float)) + (ne + 1) * sizeof(int32_t));
    o[k++] = take(&L, R * ((size_t)hp->n_embd * 2 + fe * 2) * sizeof(float));
    o[k++] = take(&L, 3 * ne * (sizeof(struct model_weight) + sizeof(struct cpu_job)));
    if (!base)
        return L.off;
    k = 0;
    s->tok_id = (int32_t *)(void *)(base + o[k++]);
    s->tok_pos = s->tok_id + T;
    s->tok_seq = s->tok_pos + T;
    s->out_tok = (int32_t *)(void *)(base + o[k++]);
    *cursor = (int32_t *)(void *)(base + o[k++]);
    s->rope = (float *)(void *)(base + o[k++]);
    s->x = (float *)(void *)(base + o[k++]);
    s->ob = s->x + T * (size_t)hp->n_embd;
    s->out_x = (float *)(void *)(base + o[k++]);
    s->out_att = s->out_x + (size_t)c->n_out * (size_t)hp->n_embd;
    s->xb = (float *)(void *)(base + o[k++]);
    s->q = (float *)(void *)(base + o[k++]);
    s->k = (float *)(void *)(base + o[k++]);
    s->v = s->k + T * (size_t)kvd;
    s->hg = (float *)(void *)(base + o[k++]);
    s->hu = s->hg + T * (size_t)hp->n_ff;
    s->act[CPU_ACT_F32] = NULL;
    for (int a = 1; a < CPU_ACT_COUNT; a++)
        s->act[a] = base + o[k++];
    s->lora_tmp = (float *)(void *)(base + o[k++]);
    s->lp_all.pairs = (struct cpu_pair *)(void *)(base + o[k++]);
    s->lp_out.pairs = s->lp_all.pairs + pmax;
    s->lp_all.groups = (struct cpu_group *)(void *)(base + o[k++]);
    s->lp_out.groups = s->lp_all.groups + MODEL_MAX_LORAS;
    s->lp_all.row_first = (int32_t *)(void *)(base + o[k++]);
    s->lp_out.row_first = s->lp_all.row_first + T + 1;
    s->lp_all.row_pairs = (int32_t *)(void *)(base + o[k++]);
    s->lp_out.row_pairs = s->lp_all.row_pairs + pmax;
    s->items = (struct cpu_att_item *)(void *)(base + o[k++]);
    s->scratch = (float *)(void *)(base + o[k++]);
    s->router = (float *)(void *)(base + o[k++]);
    s->sel = (int32_t *)(void *)(base + o[k++]);
    s->grow = s->sel + R;
    s->prow = s->grow + R;
    s->eoff = s->prow + R;
    s->selw = (float *)(void *)(s->eoff + ne + 1);
    s->xg = (float *)(void *)(base + o[k++]);
    s->og = s->xg + R * (size_t)hp->n_embd;
    s->hge = s->og + R * (size_t)hp->n_embd;
    s->hue = s->hge + R * fe;
    s->ew = (struct model_weight *)(void *)(base + o[k++]);
    s->ejobs = (struct cpu_job *)(void *)(s->ew + 3 * ne);
    s->pairs_max = (int32_t)pmax;
    s->rank_max = c->rank_max;
    return L.off;
}

/* Grows the scratch arena to bytes (content is not kept). */
static int reserve(struct cpu_backend *cb, size_t bytes, struct mf_err *err)
{
    void *p;

    if (bytes <= cb->arena_size)
        return 0;
    free(cb->arena);
    cb->arena = NULL;
    cb->arena_size = 0;
    p = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    if (!p)
        return mf_err_set(err, MF_ENOMEM, "out of memory for %zu bytes of step scratch", bytes);
    cb->arena = p;
    cb->arena_size = bytes;
    return 0;
}

/* Builds a LoRA plan over n_rows rows; row r belongs to sequence seq_of[r].
 * Pairs are grouped by ascending adapter id (one pass per attached adapter,
 * at most MODEL_MAX_LORAS), then indexed per row with a counting sort that
 * uses cursor (n_rows + 1 ints) as scratch. */
static void plan_lora(const struct cpu_backend *cb, const struct batch *bt, const int32_t *seq_of,
                      int32_t n_rows, struct cpu_lora_plan *lp, int32_t *cursor)
{
    int32_t np = 0;

    lp->n_groups = 0;
    lp->max_group = 0;
    for (int32_t a = 0; a < cb->m->n_loras; a++) {
        int32_t first = np;
        for (int32_t r = 0; r < n_rows; r++) {
            const struct batch_lora *lo = &bt->seqs[seq_of[r]].lora;
            for (int32_t j = 0; j < lo->n; j++)
                if (lo->ids[j] == a)
                    lp->pairs[np++] = (struct cpu_pair){.row = r, .lora = a, .scale = lo->scales[j]};
        }
        if (np == first)
            continue;
        lp->groups[lp->n_groups++] = (struct cpu_group){.lora = a, .first = first, .n = np - first};
        if (np - first > lp->max_group)
            lp->max_group = np - first;
    }
    lp->n_pairs = np;
    lp->row_first[0] = 0;
    for (int32_t r = 0; r < n_rows; r++)
        lp->row_first[r + 1] = lp->row_first[r] + bt->seqs[seq_of[r]].lora.n;
    memcpy(cursor, lp->row_first, (size_t)n_rows * sizeof *cursor);
    for (int32_t p = 0; p < np; p++)
        lp->row_pairs[cursor[lp->pairs[p].row]++] = p;
}

/* Fills token rows, logits rows (the last want_logits tokens of each
 * sequence; every token's, for a hidden-state step) and attention items. */
static void plan_tokens(const struct cpu_backend *cb, const struct batch *bt, struct cpu_step *s)
{
    int32_t t = 0, n_out = 0, n_items = 0;

    for (int32_t i = 0; i < bt->n_seqs; i++) {
        const struct batch_seq *sq = &bt->seqs[i];
        for (int32_t g = 0; g < cb->m->hp.n_head_kv; g++)
            for (int32_t r = 0; r < sq->n_tokens; r += s->att_run)
                s->items[n_items++] = (struct cpu_att_item){
                    .seq = i,
                    .head_kv = g,
                    .t0 = t + r,
                    .t1 = t + (r + s->att_run < sq->n_tokens ? r + s->att_run : sq->n_tokens),
                };
        for (int32_t j = 0; j < sq->n_tokens; j++, t++) {
            s->tok_id[t] = sq->tokens[j];
            s->tok_pos[t] = sq->n_past + j;
            s->tok_seq[t] = i;
            if (bt->hidden)
                s->out_tok[n_out++] = t;
        }
        for (int32_t r = sq->want_logits; r > 0 && !bt->hidden; r--)
            s->out_tok[n_out++] = t - r;
    }
    s->T = t;
    s->n_out = n_out;
    s->n_items = n_items;
}

static int cpu_step(struct backend *b, const struct batch *bt, struct mf_err *err)
{
    struct cpu_backend *cb = cb_of(b);
    const struct model_hparams *hp = &cb->m->hp;
    struct cpu_step s = {0};
    struct counts c;
    int32_t *out_seq, *cursor;
    int rc;

    if (!cb->kv)
        return mf_err_set(err, MF_EINVAL, "step before the KV arena was allocated");
    rc = backend_check_batch(cb->m, cb->n_blocks, &cb->cfg, 0, bt, err);
    if (rc || bt->n_seqs == 0)
        return rc;
    count_step(cb, bt, &c);
    s.xb_w = (int64_t)hp->n_head * hp->head_dim > hp->n_embd ? (int64_t)hp->n_head * hp->head_dim
                                                              : hp->n_embd;
    rc = reserve(cb, lay_out(cb, &c, &s, NULL, NULL), err);
    if (rc)
        return rc;
    lay_out(cb, &c, &s, cb->arena, &cursor);
    s.m = cb->m;
    s.dot = cb->dot;
    s.qops = cb->qops;
    s.pool = cb->pool;
    s.batch = bt;
    s.kv = cb->kv;
    s.kv_f16 = cb->cfg.kv_type == BACKEND_KV_F16;
    plan_tokens(cb, bt, &s);
    plan_lora(cb, bt, s.tok_seq, s.T, &s.lp_all, cursor);
    out_seq = s.out_tok + s.n_out;
    for (int32_t j = 0; j < s.n_out; j++)
        out_seq[j] = s.tok_seq[s.out_tok[j]];
    plan_lora(cb, bt, out_seq, s.n_out, &s.lp_out, cursor);
    atomic_init(&s.ctr[0], 0);
    atomic_init(&s.ctr[1], 0);
    cpu_pool_run(cb->pool, cpu_fwd_run, &s);
    return 0;
}

const struct backend_ops cpu_backend_ops = {
    .name = "cpu",
    .create = cpu_create,
    .kv_alloc = cpu_kv_alloc,
    .step = cpu_step,
    .free = cpu_free,
};
