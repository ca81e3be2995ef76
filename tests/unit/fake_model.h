/*
 * fake_model.h: a deterministic stand-in for the model, for the scheduler
 * and engine tests. It keeps a paged "KV arena" of token ids, written through
 * the batch's block tables exactly as a backend writes K/V, and derives each
 * next token from the context it reads back from the arena. So a wrong block
 * table, a wrongly shared block or a stale prefix-cache hit changes the
 * output, and every request must match fake_reference(), its output alone.
 */
#ifndef MFC_TEST_FAKE_MODEL_H
#define MFC_TEST_FAKE_MODEL_H

#include <stdint.h>

#include "common/err.h"
#include "runtime/model/batch.h"

struct fake_model {
    int32_t n_vocab;   /* logits per row */
    int32_t n_blocks;  /* arena size, blocks */
    int32_t *arena;    /* owned: n_blocks * KV_BLOCK_TOKENS token ids, -1 unwritten */
    uint32_t *tags;    /* owned: adapter tag of each arena slot */
    int32_t *ctx;      /* owned: scratch, one context read back */
    int32_t max_ctx;   /* ctx entries */
    int64_t n_steps;   /* steps run */
    int64_t n_tokens;  /* tokens computed */
    int32_t max_batch; /* most sequences seen in one step */
    int64_t fail_step; /* step number (from 1) that fails, 0: never */
    uint32_t salt;     /* 0; another value makes another model (a draft that disagrees) */
    float soft;        /* 0: one-hot logits; > 0: every token gets a logit in
                          [0, soft) from the context (fake_logits), for sampling tests */
    int64_t n_rows;    /* logits rows computed */
};

/* Returns 0, or MF_ENOMEM with m zeroed (safe to fini). */
int fake_model_init(struct fake_model *m, int32_t n_blocks, int32_t max_ctx, int32_t n_vocab);
void fake_model_fini(struct fake_model *m);

/* The next token after ctx[0..n) under adapters lora. */
int32_t fake_next_token(const int32_t *ctx, int32_t n, const struct batch_lora *lora,
                        int32_t n_vocab);

/* The logits row of model (salt, soft) after ctx[0..n) under lora: with soft
 * 0 one-hot at the token fake_next_token gives for salt 0 (another salt:
 * another token); with soft > 0 a spread of logits in [0, soft). Returns
 * the argmax (lowest id on ties). */
int32_t fake_logits(const int32_t *ctx, int32_t n, const struct batch_lora *lora, uint32_t salt,
                    float soft, int32_t n_vocab, float *row);

/* Runs one step: writes each sequence's new tokens into the arena, then for
 * each of the last want_logits tokens of a sequence reads its context back
 * (up to and including that token) and stores the argmax in next[j] (when
 * next is not NULL) and the row (fake_logits) in b->logits (when not NULL),
 * j counting rows. Returns 0, or MF_EINVAL naming the broken batch.h rule,
 * or MF_EIO at fail_step. */
int fake_model_step(struct fake_model *m, const struct batch *b, int32_t *next, struct mf_err *err);

/* The output of a request run alone: up to max_tokens tokens, stopping after
 * eos (when eos >= 0). Returns the count written to out. */
int32_t fake_reference(const int32_t *prompt, int32_t n_prompt, int32_t max_tokens,
                       const struct batch_lora *lora, int32_t n_vocab, int32_t eos, int32_t *out);

#endif
