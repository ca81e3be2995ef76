/*
 * engine.h: the engine loop behind mfc-serve: a step thread that runs the
 * scheduler (sched.h), the model and the sampler while work exists, and a
 * thread-safe API for the HTTP layer (design and threading in engine.c).
 *
 * Use: engine_open; per request engine_submit, then engine_next until an
 * event with finish != SCHED_FINISH_NONE (that pops the request for good),
 * or engine_release to walk away; engine_cancel from anywhere; engine_metrics
 * for /metrics; engine_close when no thread is inside engine_* any more.
 *
 * Text and stop strings are the consumer's, as in vLLM V1 (whose output
 * processor detokenizes and aborts the request in the engine core):
 * engine_text_feed turns each event's token into UTF-8 through the
 * tokenizer and the request's stop strings (runtime/engine/stop.h); when it says a
 * stop string completed, call engine_stop and keep reading to the final
 * event, showing no more text. The on_token hook is the synchronous
 * alternative, run on the step thread.
 */
#ifndef MFC_ENGINE_H
#define MFC_ENGINE_H

#include <stdint.h>

#include "common/err.h"
#include "runtime/model/batch.h"
#include "common/buf.h"
#include "runtime/engine/kv.h"
#include "runtime/engine/sampler.h"
#include "runtime/engine/sched.h"
#include "runtime/engine/spec.h"
#include "text/tokenizer.h"

struct engine;
struct stop;

/* The model as the engine drives it. A compute backend (runtime/engine/backend.h)
 * fits as ctx = the backend, step = a call to backend_step, with
 * n_kv_blocks = what backend_kv_alloc made and the backend's max_tokens /
 * max_seqs at least the scheduler's max_num_batched_tokens / max_num_seqs. */
struct engine_model {
    void *ctx;          /* borrowed: handed to step */
    int32_t n_vocab;    /* floats per logits row */
    const int32_t *eos; /* borrowed: end-of-generation ids (EOS, EOT, ...) */
    int32_t n_eos;      /* entries in eos */
    int32_t n_loras;    /* adapters loaded: batch_lora ids must be below this */
    int32_t max_tokens; /* most tokens one step takes (the backend's); 0: unknown.
                           A draft model's steps are chunked by it (512 when 0) */
    /* Runs one step (runtime/model/batch.h): appends K/V, writes each
     * sequence's want_logits rows of logits into b->logits (engine-owned;
     * more than one a sequence in a verify step, as many rows in all as
     * engine_config.sched.max_num_logits allows). Called on the step thread
     * only, without the engine lock. Returns 0 or MF_E* with err. */
    int (*step)(void *ctx, struct batch *b, struct mf_err *err);
    /* Optional: memory for b->logits (backend_host_alloc); NULL: malloc/free. */
    void *(*logits_alloc)(void *ctx, size_t bytes);
    void (*logits_free)(void *ctx, void *p);
    /* Optional: draws where the logits are (the CUDA backend). When set and
     * every logits row of a step can be drawn there (engine_sampler's
     * draw_ok), the engine runs the step with b->logits NULL, so no logits
     * leave the device, then calls this with one plan per logits row:
     * ids[j] = the token, or -1 for a row given back to the host, whose
     * logits it then copies to logits + j * n_vocab (engine-owned, as
     * b->logits would have been). Step thread, unlocked. 0 or MF_E*. */
    int (*sample)(void *ctx, int32_t n, const struct sampler_draw *d, int32_t *ids, float *logits,
                  struct mf_err *err);
};

/* Token choice. With no sample function the engine is greedy (argmax,
 * lowest id on ties). */
struct engine_sampler {
    void *ctx; /* borrowed: handed to every call */
    /* Draws a token from one logits row (which it may modify) into res
     * (token; logprob NaN and n_top 0 unless it reports logprobs). params is
     * the request's engine_request.sampling; history its prompt and output so
     * far, of which the last n_new were not in any earlier call (the prompt
     * first, then the previous token: what a penalty history must accept).
     * A row engine_model.sample gave back comes here right after its plan,
     * with n_new 0. Step thread, without the lock. 0 or MF_E*. */
    int (*sample)(void *ctx, void *params, float *logits, int32_t n_vocab, const int32_t *history,
                  int32_t n_history, int32_t n_new, struct sampler_result *res, struct mf_err *err);
    /* Frees a request's params when the request is popped. May be NULL. */
    void (*free_params)(void *ctx, void *params);
    /* Optional, both or neither: whether params can be drawn by
     * engine_model.sample (1) or only here (0), and the plan of such a
     * draw, which accepts history as sample would and spends the PRNG
     * number the draw takes (runtime/engine/sampler.h sampler_draw_plan). */
    int (*draw_ok)(void *ctx, void *params);
    void (*plan)(void *ctx, void *params, const int32_t *history, int32_t n_history, int32_t n_new,
                 struct sampler_draw *d);
    /* Optional, for speculative decoding (runtime/engine/spec.h); without
     * dist a request with params speculates only when the engine is greedy
     * (no sample function). dist: the distribution sample would draw from
     * for this row, without drawing: the survivors' ids and probabilities,
     * *n of them (ids, probs: n_vocab entries), accepting history as sample
     * does. uniform: one number in [0, 1) from the request's stream.
     * spec_ok: 0 when params rule speculation out (logprobs). */
    int (*dist)(void *ctx, void *params, const float *logits, int32_t n_vocab,
                const int32_t *history, int32_t n_history, int32_t n_new, int32_t *ids,
                float *probs, int32_t *n, struct mf_err *err);
    double (*uniform)(void *ctx, void *params);
    int (*spec_ok)(void *ctx, void *params);
};

/* runtime/engine/sampler.h as an engine sampler: engine_request.sampling is a
 * struct sampler * from sampler_new (one per request), freed by the engine.
 * Gives logprobs when the sampler's params ask for them. */
extern const struct engine_sampler engine_sampler_std;

struct engine_config {
    struct sched_config sched;        /* batching limits and the queue limit */
    int32_t n_kv_blocks;              /* KV pool size, blocks; 0: computed from budget */
    struct kv_budget budget;          /* MFC_KV_CACHE_GB or a share of free memory, and the
                                         backend's bytes per block: see kv_budget_blocks */
    int32_t kv_hash_bits;             /* 0; tests shrink block hashes to force collisions */
    int32_t queue_events;             /* per-request event queue, >= 2 (0: 64) */
    int32_t stall_ms;                 /* a consumer not reading for this long is cut off
                                         with SCHED_FINISH_ERROR; 0: wait forever */
    struct spec_config spec;          /* speculative decoding; source SPEC_NONE (zero): off */
    const struct engine_model *draft; /* borrowed: the draft model for SPEC_DRAFT (same
                                         vocabulary), NULL otherwise */
};

struct engine_request {
    const int32_t *prompt;      /* borrowed: copied by engine_submit */
    int32_t n_prompt;           /* >= 1 */
    int32_t max_tokens;         /* <= 0: up to the context length */
    int32_t priority;           /* lower runs first */
    int32_t ignore_eos;         /* 1: eos ids don't stop it */
    int32_t no_spec;            /* 1: never speculate for this request (the API's "speculative":
                                   false); 0: as the engine is configured */
    const int32_t *spec_script; /* benchmarks only: proposals by output position (the tokens
                                   an earlier greedy run gave, or tokens that never agree),
                                   in place of the configured proposer; borrowed until the
                                   request finishes. NULL: none */
    int32_t n_spec_script;      /* entries in spec_script */
    struct batch_lora lora;     /* adapters for this request */
    void *sampling;             /* owned by the engine once submitted: engine_sampler params */
    /* Called on the step thread (not under the lock) with each new token,
     * before it is queued; returns 1 to finish with STOP (a stop string
     * ended), 0 to go on. May be NULL. */
    int (*on_token)(void *user, int32_t token);
    /* Called under the engine lock when events are ready: may only signal
     * (a condition variable, MHD_resume_connection, an eventfd), never call
     * engine_*. May be NULL. */
    void (*notify)(void *user);
    void *user; /* borrowed: passed to on_token and notify */
};

/* One step of output for a consumer. */
struct engine_event {
    int32_t token;            /* the new token; -1 on a final event carrying none */
    enum sched_finish finish; /* NONE, or why this, the last event, ends the request */
    float logprob;            /* the token's log-probability, NaN when not asked for */
    int32_t n_top;            /* entries in top */
    struct sampler_logprob top[SAMPLER_MAX_LOGPROBS]; /* likeliest alternatives first */
};

/* What a finished request did; filled with its final event. */
struct engine_summary {
    enum sched_finish finish; /* why it finished */
    int32_t n_prompt;         /* prompt tokens */
    int32_t n_output;         /* tokens delivered */
    int32_t n_cached;         /* prompt tokens found in the prefix cache */
    int32_t n_preemptions;    /* times it was preempted */
    uint64_t n_proposed;      /* speculative proposals verified */
    uint64_t n_accepted;      /* of those, accepted */
    double queue_s;           /* submit to first scheduled, seconds (-1: never ran) */
    double ttft_s;            /* submit to first token, seconds (-1: none) */
    double e2e_s;             /* submit to finish, seconds */
    struct mf_err err;        /* finish == SCHED_FINISH_ERROR: why */
};

#define ENGINE_HIST_MAX 24 /* bucket bounds a histogram may have */

/* A Prometheus-style histogram: counts[i] holds observations in
 * (bounds[i-1], bounds[i]], counts[n_bounds] those above the last bound. */
struct engine_hist {
    const double *bounds;                 /* borrowed: static, seconds, ascending */
    int32_t n_bounds;                     /* entries in bounds */
    uint64_t counts[ENGINE_HIST_MAX + 1]; /* per bucket, not cumulative */
    uint64_t count;                       /* observations */
    double sum;                           /* their total, seconds */
};

/* Names follow vLLM's (reference/vllm.md §6). */
struct engine_metrics {
    int32_t n_running;          /* num_requests_running */
    int32_t n_waiting;          /* num_requests_waiting */
    struct kv_stats kv;         /* blocks; prefix_cache_queries / _hits, tokens */
    double kv_usage;            /* kv_cache_usage_perc, 0..1: used / total blocks */
    uint64_t prompt_tokens;     /* prompt_tokens_total */
    uint64_t generation_tokens; /* generation_tokens_total */
    uint64_t finished[5];       /* request_success_total by enum sched_finish */
    uint64_t preemptions;       /* num_preemptions_total */
    uint64_t steps;             /* model steps run */
    double host_s;              /* step thread's seconds outside the model's step and draw
                                   calls, from each step's scheduling to its last token
                                   handed on: the host's share of the steps */
    double model_s;             /* seconds inside engine_model.step and .sample */
    uint64_t device_draws;      /* tokens drawn by engine_model.sample */
    uint64_t host_draws;        /* tokens drawn by engine_sampler.sample or greedy
                                   (with device_draws: generation_tokens) */
    struct engine_hist ttft;    /* time_to_first_token_seconds */
    struct engine_hist itl;     /* inter_token_latency_seconds */
    struct engine_hist e2e;     /* e2e_request_latency_seconds */
    struct engine_hist queue;   /* request_queue_time_seconds */
    struct spec_stats spec;     /* spec_decode_*: proposals, acceptance */
    int32_t spec_source;        /* enum spec_source of the engine */
};

/* Lifecycle */

/* Builds the KV pool and scheduler and starts the step thread. model and
 * sampler are copied; what they point to is borrowed and must outlive the
 * engine. sampler may be NULL (greedy). Returns 0 and *out, or MF_E* with
 * err filled and *out NULL. */
int engine_open(const struct engine_config *cfg, const struct engine_model *model,
                const struct engine_sampler *sampler, struct engine **out, struct mf_err *err);
/* Stops the step thread and frees every request, finished or not (their
 * consumers get nothing more). No thread may be inside engine_* during or
 * after the call. Accepts NULL. */
void engine_close(struct engine *e);

/* Requests */

/* Queues a request. Returns 0 and *id (never 0), or: MF_EINVAL (empty
 * prompt, a token outside the vocabulary, bad adapter count), MF_ERANGE
 * (longer than the context or the KV cache: it could never run), MF_EBUSY
 * (queue full: "server overloaded", answer 429/503), MF_ENOMEM; on error
 * rq->sampling stays the caller's. */
int engine_submit(struct engine *e, const struct engine_request *rq, uint64_t *id,
                  struct mf_err *err);
/* Takes the next event of request id, waiting up to timeout_ms (0: don't
 * wait; < 0: forever). The event with finish != NONE is the last: it fills
 * *sum (when not NULL) and forgets the id. Returns 0, MF_EBUSY when nothing
 * came in time, MF_ENOTFOUND for an unknown (or already finished) id. Only
 * one thread may consume a given request. */
int engine_next(struct engine *e, uint64_t id, int timeout_ms, struct engine_event *ev,
                struct engine_summary *sum, struct mf_err *err);
/* Finishes request id with CANCELLED: at once when it is not inside the
 * running step, else as soon as that step ends. Its consumer still gets the
 * final event. Returns 0 (also when it had finished already) or
 * MF_ENOTFOUND. */
int engine_cancel(struct engine *e, uint64_t id, struct mf_err *err);
/* As engine_cancel, finishing with STOP: the consumer matched a stop string. */
int engine_stop(struct engine *e, uint64_t id, struct mf_err *err);
/* The consumer walks away: cancels request id if needed and forgets it
 * without delivering anything more. Returns 0 or MF_ENOTFOUND. */
int engine_release(struct engine *e, uint64_t id, struct mf_err *err);

/* Observation */

void engine_metrics(struct engine *e, struct engine_metrics *m);
/* Consumer side: one request's text */

/* Detokenizes a request's tokens and cuts the text at its stop strings. */
struct engine_text {
    struct tok_stream ts; /* UTF-8 assembly across tokens */
    struct stop *stop;    /* owned: the request's stop strings */
    struct mf_buf piece;  /* owned: scratch for one token's text */
    int stopped;          /* 1: a stop string completed, nothing more is released */
};

/* Sets t up for tokenizer tok (borrowed; tok_stream flags) and stop strings
 * stops[0..n) (copied). Returns 0, or MF_ERANGE/MF_ENOMEM from stop_new with
 * t safe to fini. */
int engine_text_init(struct engine_text *t, const struct tok *tok, unsigned flags,
                     const char *const *stops, size_t n, struct mf_err *err);
/* Appends to out the text that token releases (held back while it may
 * still begin a stop string). Returns 1 when a stop string completed: call
 * engine_stop; later calls release nothing. 0 otherwise, or MF_E* (a token
 * outside the vocabulary, out's limit) with t unchanged. */
int engine_text_feed(struct engine_text *t, int32_t token, struct mf_buf *out, struct mf_err *err);
/* End of the request: releases what was held (unless stopped). */
int engine_text_finish(struct engine_text *t, struct mf_buf *out, struct mf_err *err);
/* Frees t's memory. Accepts a zeroed or half-built t. */
void engine_text_fini(struct engine_text *t);

/* The end-of-generation ids of t (tok_is_eog: EOS, EOT, EOM, <|im_end|>...)
 * for engine_model.eos: writes up to max into ids and returns how many
 * there are (more than max: call again with a bigger array). */
int32_t engine_eos_from_tok(const struct tok *t, int32_t *ids, int32_t max);
/* sched_check (and so kv_check) under the lock: for tests and debug builds. */
int engine_check(struct engine *e, struct mf_err *err);

#endif
