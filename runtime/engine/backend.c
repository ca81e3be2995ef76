/*
 * backend.c: the parts of the backend contract every backend shares: KV
 * arena sizing and checking a batch against runtime/model/batch.h.
 *
 * Owns nothing. The checks here are what makes a backend's step free of
 * bounds checks: after backend_check_batch() every token indexes the
 * vocabulary, every position has a block, every block id is in the arena
 * and every adapter id is attached to the model.
 */
#include "runtime/engine/backend.h"

#include <inttypes.h>
#include <stdlib.h>

int backend_create(const struct backend_ops *ops, const struct model *m,
                   const struct backend_config *cfg, struct backend **out, struct mf_err *err)
{
    return ops->create(m, cfg, out, err);
}

int backend_kv_alloc(struct backend *b, int32_t *n_blocks, struct mf_err *err)
{
    return b->ops->kv_alloc(b, n_blocks, err);
}

int backend_step(struct backend *b, const struct batch *batch, struct mf_err *err)
{
    return b->ops->step(b, batch, err);
}

void backend_free(struct backend *b)
{
    if (b)
        b->ops->free(b);
}

void *backend_host_alloc(struct backend *b, size_t bytes)
{
    return b->ops->host_alloc ? b->ops->host_alloc(b, bytes) : malloc(bytes);
}

void backend_host_free(struct backend *b, void *p)
{
    if (b->ops->host_free)
        b->ops->host_free(b, p);
    else
        free(p);
}

int backend_engine_step(void *b, struct batch *batch, struct mf_err *err)
{
    return backend_step(b, batch, err);
}

void *backend_engine_alloc(void *b, size_t bytes)
{
    return backend_host_alloc(b, bytes);
}

void backend_engine_free(void *b, void *p)
{
    backend_host_free(b, p);
}

int backend_engine_sample(void *b, int32_t n, const struct sampler_draw *d, int32_t *ids,
                          float *logits, struct mf_err *err)
{
    struct backend *be = b;
    return be->ops->sample(be, n, d, ids, logits, err);
}

uint64_t backend_kv_block_bytes(const struct model *m, enum backend_kv_type t)
{
    if (t == BACKEND_KV_Q8 || t == BACKEND_KV_FP8) /* a byte per element and a float per slot,
                                                     head and K or V */
        return model_kv_block_bytes(m, 1) +
               (uint64_t)m->hp.n_layer * 2 * (uint64_t)m->hp.n_head_kv * KV_BLOCK_TOKENS * 4;
    return model_kv_block_bytes(m, t == BACKEND_KV_F32 ? 4 : 2);
}

int32_t backend_kv_n_blocks(const struct model *m, enum backend_kv_type t, uint64_t budget)
{
    uint64_t n = budget / backend_kv_block_bytes(m, t);
    return n > INT32_MAX ? INT32_MAX : (int32_t)n;
}

/* Checks sequence i's adapters. */
static int check_lora(const struct model *m, int32_t i, const struct batch_lora *lo,
                      struct mf_err *err)
{
    if (lo->n < 0 || lo->n > BATCH_MAX_LORAS)
        return mf_err_set(err, MF_EINVAL, "batch sequence %" PRId32 ": %" PRId32 " adapters",
                          i, lo->n);
    for (int32_t j = 0; j < lo->n; j++)
        if (lo->ids[j] < 0 || lo->ids[j] >= m->n_loras)
            return mf_err_set(err, MF_EINVAL,
                              "batch sequence %" PRId32 ": adapter id %" PRId32
                              " is not attached (%" PRId32 " are)",
                              i, lo->ids[j], m->n_loras);
    return 0;
}

/* Checks sequence i's counts, tokens and block table. */
static int check_seq(const struct model *m, int32_t n_blocks, int32_t i,
                     const struct batch_seq *s, struct mf_err *err)
{
    int64_t end = (int64_t)s->n_past + s->n_tokens;
    int64_t need;

    if (s->n_tokens < 1 || s->n_past < 0 || end > INT32_MAX || !s->tokens)
        return mf_err_set(err, MF_EINVAL,
                          "batch sequence %" PRId32 ": %" PRId32 " new tokens after %" PRId32,
                          i, s->n_tokens, s->n_past);
    need = (end + KV_BLOCK_TOKENS - 1) / KV_BLOCK_TOKENS;
    if (s->n_blocks < need || !s->block_table)
        return mf_err_set(err, MF_EINVAL,
                          "batch sequence %" PRId32 ": %" PRId32 " blocks cover fewer than its %" PRId64
                          " positions",
                          i, s->n_blocks, end);
    /* blocks wholly before every layer's window may have been given back (-1) */
    int32_t w = model_window_all(m);
    int64_t first = w && s->n_past >= w ? (s->n_past - w + 1) / KV_BLOCK_TOKENS : 0;
    for (int64_t b = 0; b < need; b++)
        if ((s->block_table[b] < 0 && b >= first) || s->block_table[b] >= n_blocks)
            return mf_err_set(err, MF_EINVAL,
                              "batch sequence %" PRId32 ": block id %" PRId32
                              " is outside the arena of %" PRId32 " blocks",
                              i, s->block_table[b], n_blocks);
    for (int32_t t = 0; t < s->n_tokens; t++)
        if (s->tokens[t] < 0 || s->tokens[t] >= m->hp.n_vocab)
            return mf_err_set(err, MF_EINVAL,
                              "batch sequence %" PRId32 ": token %" PRId32
                              " is outside the vocabulary of %" PRId32,
                              i, s->tokens[t], m->hp.n_vocab);
    return check_lora(m, i, &s->lora, err);
}

int backend_check_batch(const struct model *m, int32_t n_blocks, const struct backend_config *cfg,
                        int keeps_logits, const struct batch *batch, struct mf_err *err)
{
    int64_t total = 0, rows = 0;
    int32_t max_logits = cfg->max_logits > 0 ? cfg->max_logits : cfg->max_seqs;
    int rc;

    if (batch->n_seqs < 0 || batch->n_seqs > cfg->max_seqs || (batch->n_seqs && !batch->seqs))
        return mf_err_set(err, MF_EINVAL, "batch of %" PRId32 " sequences (limit %" PRId32 ")",
                          batch->n_seqs, cfg->max_seqs);
    for (int32_t i = 0; i < batch->n_seqs; i++) {
        const struct batch_seq *sq = &batch->seqs[i];
        rc = check_seq(m, n_blocks, i, sq, err);
        if (rc)
            return rc;
        if (sq->want_logits < 0 || sq->want_logits > sq->n_tokens)
            return mf_err_set(err, MF_EINVAL,
                              "batch sequence %" PRId32 " wants %" PRId32 " logits rows of %" PRId32
                              " new tokens",
                              i, sq->want_logits, sq->n_tokens);
        total += sq->n_tokens;
        rows += batch->hidden ? 0 : sq->want_logits;
        if (sq->want_logits && !batch->logits && !batch->hidden && !keeps_logits)
            return mf_err_set(err, MF_EINVAL,
                              "batch sequence %" PRId32 " wants logits but there is no buffer", i);
    }
    if (total > cfg->max_tokens)
        return mf_err_set(err, MF_EINVAL,
                          "batch of %" PRId64 " tokens exceeds the step limit of %" PRId32, total,
                          cfg->max_tokens);
    if (rows > max_logits)
        return mf_err_set(err, MF_EINVAL,
                          "batch wants %" PRId64 " logits rows; the step limit is %" PRId32, rows,
                          max_logits);
    return 0;
}
