/*
 * sched.h: the continuous-batching scheduler (vLLM V1 style; design and the
 * request state machine in sched.c).
 *
 * Each step: sched_schedule picks sequences and token counts into a struct
 * batch (runtime/model/batch.h); the caller runs the model and samples; then
 * sched_update takes the sampled tokens. Not thread-safe: one owner (the
 * engine's step thread, under the engine's lock) calls everything.
 */
#ifndef MFC_SCHED_H
#define MFC_SCHED_H

#include <stdint.h>

#include "common/err.h"
#include "runtime/model/batch.h"
#include "runtime/engine/kv.h"

struct sched;
struct sched_req;

enum sched_state {
    SCHED_WAITING,   /* queued, never ran */
    SCHED_RUNNING,   /* holds KV blocks, scheduled each step */
    SCHED_PREEMPTED, /* lost its blocks to an older request; queued at the front */
    SCHED_FINISHED,  /* done; its blocks are released; free with sched_free_req */
};

enum sched_finish {
    SCHED_FINISH_NONE,      /* not finished */
    SCHED_FINISH_STOP,      /* end-of-sequence token or a stop string */
    SCHED_FINISH_LENGTH,    /* max_tokens reached */
    SCHED_FINISH_CANCELLED, /* the client went away or asked to stop */
    SCHED_FINISH_ERROR,     /* the model step failed, or the consumer stalled */
};

struct sched_config {
    int32_t max_num_seqs;           /* sequences per step (vLLM max_num_seqs) */
    int32_t max_num_batched_tokens; /* token budget per step */
    int32_t max_prefill_tokens;     /* prompt tokens a step may carry beside decodes
                                       (sched.c, "Prefill beside decode"); a step with
                                       no decode spends the whole budget; 0: no cap */
    int32_t max_model_len;          /* context length: prompt + max_tokens, tokens;
                                       clamped to what the KV cache holds */
    int32_t max_waiting;            /* queued requests beyond which submit says overloaded */
    int32_t window;                 /* every layer sees this many positions back (sliding
                                       window, model_window_all): computed blocks before it
                                       are given back as a sequence runs; 0: none */
    int32_t max_num_logits;         /* logits rows per step; the rows past max_num_seqs
                                       go to proposals (verify steps); 0: max_num_seqs */
};

struct sched_submit {
    const int32_t *prompt;         /* borrowed: copied by sched_submit */
    int32_t n_prompt;              /* >= 1 */
    int32_t max_tokens;            /* tokens to generate; <= 0: up to max_model_len */
    int32_t priority;              /* lower runs first; equal ones are FCFS */
    const struct batch_lora *lora; /* adapters, copied; NULL: base model */
    void *user;                    /* borrowed: returned by sched_req_user */
};

/* What one step computes. Every pointer is borrowed from the scheduler and
 * valid until the next sched_update or sched_schedule. */
struct sched_step {
    struct batch batch;      /* seqs filled; batch.logits left NULL for the caller */
    struct sched_req **reqs; /* reqs[i] is the request behind batch.seqs[i] */
    int32_t n_logits;        /* sequences with want_logits: tokens sched_update wants */
    int32_t n_rows;          /* logits rows: the sum of want_logits (n_logits without
                                proposals); a verify sequence's proposals are its
                                tokens after the first */
    int32_t n_tokens;        /* tokens scheduled, <= max_num_batched_tokens */
    int32_t n_preempted;     /* requests preempted while building this step */
};

/* Lifecycle */

/* Opens a scheduler over kv (borrowed; must outlive it). Returns 0 and
 * *out, or MF_ERANGE/MF_ENOMEM with *out NULL. */
int sched_open(struct sched **out, const struct sched_config *cfg, struct kv_cache *kv,
               struct mf_err *err);
/* Frees every request (finished or not) and their block tables. Accepts NULL. */
void sched_close(struct sched *s);

/* Requests */

/* Queues a request in WAITING. Returns 0 and *out (owned by the scheduler,
 * released by sched_free_req once FINISHED), or: MF_EINVAL (empty prompt, bad
 * adapter count), MF_ERANGE (longer than the context or the whole KV cache:
 * it could never run), MF_EBUSY (queue full: "overloaded", 429/503
 * upstream), MF_ENOMEM. On error nothing is queued. */
int sched_submit(struct sched *s, const struct sched_submit *in, struct sched_req **out,
                 struct mf_err *err);
/* Finishes a request now for why (STOP, CANCELLED, ERROR): it leaves the
 * queues and its blocks are released. No-op on a FINISHED request. If it is
 * in the current step, sched_update skips it. */
void sched_finish(struct sched *s, struct sched_req *r, enum sched_finish why);
/* Frees a FINISHED request; r is invalid afterwards. Accepts NULL. */
void sched_free_req(struct sched *s, struct sched_req *r);
/* A paused request is skipped by sched_schedule (it keeps its blocks); the
 * engine pauses a request whose consumer is not reading. */
void sched_set_paused(struct sched *s, struct sched_req *r, int paused);
/* Proposals for r's next step (speculative decoding, runtime/engine/spec.c):
 * tokens[0..n) guess the tokens after its last one. They are copied and
 * kept until the next sched_update; the next sched_schedule appends them to
 * r's decode token (only when r has exactly one token to compute) as far
 * as the token budget and max_num_logits allow, and wants the logits of
 * every one (a verify step). At most the output room left minus one are
 * kept (the token drawn after them must fit max_tokens). n 0 clears them.
 * Returns how many were kept. */
int32_t sched_set_draft(struct sched *s, struct sched_req *r, const int32_t *tokens, int32_t n);
/* Proposals r has for the next step (after sched_set_draft). */
int32_t sched_req_n_draft(const struct sched_req *r);

/* Steps */

/* Builds the next step: running decodes first, then running prefill chunks,
 * then (when nothing was preempted) waiting requests, FCFS by priority,
 * while the token budget, max_num_seqs and the KV blocks allow; prefill
 * chunks beside decodes share at most max_prefill_tokens. Preempts the
 * newest (lowest priority) running request when blocks run out. An empty
 * step (n_seqs 0) means nothing can run now. Can't fail. */
void sched_schedule(struct sched *s, struct sched_step *step);
/* Completes the step: every scheduled sequence has computed its tokens, and
 * sampled[i] is the token drawn for the i-th sequence with want_logits
 * (n_sampled == step->n_logits). Appends them, registers full blocks in the
 * prefix cache and finishes requests that reach max_tokens (LENGTH). Returns
 * 0, or MF_EINVAL when n_sampled does not match (nothing changes). */
int sched_update(struct sched *s, const int32_t *sampled, int32_t n_sampled, struct mf_err *err);
/* sched_update for a step with verify sequences: the j-th sequence with
 * want_logits (j < n_logits) produced n_out[j] tokens, 1 .. its want_logits:
 * its accepted proposals in order, then the token drawn after them, in out
 * from its first logits row on (the want_logits of the sequences before it
 * summed; n_out NULL: one token each, one after another). Only those
 * positions count as computed; the
 * blocks past them are given back (kv_seq_trim) and the rejected proposals
 * forgotten. Returns 0, or
 * MF_EINVAL when n_logits or a count does not match (nothing changes). */
int sched_update_n(struct sched *s, const int32_t *out, const int32_t *n_out, int32_t n_logits,
                   struct mf_err *err);

/* Inspection */

uint64_t sched_req_id(const struct sched_req *r);
void *sched_req_user(const struct sched_req *r);
enum sched_state sched_req_state(const struct sched_req *r);
enum sched_finish sched_req_finish(const struct sched_req *r);
/* All tokens so far: prompt then output; valid until the next sched_update. */
const int32_t *sched_req_tokens(const struct sched_req *r, int32_t *n_tokens);
int32_t sched_req_n_prompt(const struct sched_req *r);
/* Leading tokens whose K/V is in the cache (0 unless RUNNING). */
int32_t sched_req_n_computed(const struct sched_req *r);
int32_t sched_req_n_output(const struct sched_req *r);
/* 1 when r is running with exactly one token to compute (its next step is
 * a decode, which proposals may extend). */
int sched_req_decoding(const struct sched_req *r);
/* Prompt tokens found in the prefix cache on first admission. */
int32_t sched_req_n_cached(const struct sched_req *r);
int32_t sched_req_n_preemptions(const struct sched_req *r);

void sched_counts(const struct sched *s, int32_t *n_running, int32_t *n_waiting);
uint64_t sched_n_preemptions(const struct sched *s);
/* Nonzero when a request is running or waiting and not paused. */
int sched_has_work(const struct sched *s);
/* kv_check plus the scheduler's own invariants (queue membership matches
 * states, running requests hold blocks for their computed tokens). Returns 0
 * or MF_EINTEGRITY with err filled. */
int sched_check(const struct sched *s, struct mf_err *err);

#endif
