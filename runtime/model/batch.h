/*
 * batch.h: the contract between the scheduler and the model for one step.
 *
 * Each step the scheduler (sched.c) picks sequences and, for each, the new
 * tokens to compute: a whole prompt, a chunk of one (chunked prefill), the
 * one token sampled last step (decode), or that token and the proposals
 * after it (a verify step of speculative decoding, runtime/engine/spec.c).
 * The model (model.c, through a backend) appends their K/V to the
 * sequence's paged KV blocks and returns logits where asked: the last new
 * token's row, or the rows of the last want_logits new tokens. Prefill,
 * decode and verify sequences share one batch; so do sequences with
 * different LoRA adapters (grouped inside the step).
 *
 * A verify step writes K/V for proposals that may be rejected: the
 * scheduler then counts only the accepted positions as computed, and the
 * next step writes over the rest before anything reads them (a query at
 * position p reads positions <= p only, all written by then).
 *
 * Paged KV: a sequence's token at position p lives in physical block
 * block_table[p / KV_BLOCK_TOKENS], slot p % KV_BLOCK_TOKENS. Block ids index
 * the backend's KV arena; kv.c hands them out and owns their refcounts. A
 * block listed by several sequences (a shared prefix) is only read by them:
 * new tokens are always written past n_past, into blocks no other sequence
 * lists, which kv.c guarantees (only full blocks are ever shared).
 */
#ifndef MFC_BATCH_H
#define MFC_BATCH_H

#include <stdint.h>

#define KV_BLOCK_TOKENS 16 /* tokens per KV block (vLLM's default; docs/architecture.md) */
#define BATCH_MAX_LORAS 8  /* adapters one sequence may combine */

/* The adapters applied to one sequence: y = Wx + sum_i scale[i] * B_i(A_i x). */
struct batch_lora {
    int32_t n;                        /* 0: base model only */
    int32_t ids[BATCH_MAX_LORAS];     /* indices into the model's loaded adapters */
    float scales[BATCH_MAX_LORAS];    /* user scale times alpha/rank, as applied */
};

struct batch_seq {
    const int32_t *tokens;      /* borrowed: the n_tokens new tokens, in order */
    int32_t n_tokens;           /* >= 1 */
    int32_t n_past;             /* tokens already in the KV blocks: new ones get
                                   positions n_past .. n_past + n_tokens - 1 */
    const int32_t *block_table; /* borrowed: physical block ids covering positions
                                   0 .. n_past + n_tokens - 1 */
    int32_t n_blocks;           /* entries in block_table */
    struct batch_lora lora;     /* adapters for this sequence */
    int32_t want_logits;        /* logits rows wanted: those of the last want_logits
                                   new tokens, 0 .. n_tokens (1: the next token's
                                   distribution; more: a verify step) */
};

struct batch {
    int32_t n_seqs;              /* sequences in this step */
    const struct batch_seq *seqs; /* borrowed: n_seqs entries */
    float *logits;               /* caller-owned: rows of n_vocab floats, want_logits
                                    per sequence, in sequence order and within a
                                    sequence in position order (at most the
                                    backend's max_logits rows in all).
                                    NULL: the logits stay on the device for
                                    engine_model.sample (only when the model has one) */
    float *hidden;               /* caller-owned or NULL. Set: a hidden-state step
                                    (embeddings): one row of n_embd floats per new
                                    token of every sequence, in batch order, the
                                    residual stream after the last layer and
                                    output_norm (llama.cpp's embeddings); no logits
                                    are computed and want_logits is ignored. The CPU
                                    backend supports it; others refuse the step. */
};

#endif
