/*
 * sampler.h: picks the next token from a row of logits, llama.cpp style.
 *
 * One sampler per request: it owns the request's parameters, its PRNG state
 * (seeded from params.seed, so a seed replays the same tokens on any run) and
 * the penalty history. The chain, in llama.cpp's default order
 * (common_sampler_init):
 *
 *   logit bias -> repetition/presence/frequency penalties -> top_k ->
 *   typical_p -> top_p -> min_p -> temperature -> draw
 *
 * top_p, min_p and typical_p therefore see the distribution before
 * temperature, as in llama.cpp. temperature <= 0 is greedy: bias and
 * penalties still apply, then the highest logit wins (ties: lowest id).
 * Cost is O(n_vocab) per token plus O(k log k) for what survives top_k; a
 * full sort happens only for typical_p, or for top_p without top_k when the
 * top few thousand candidates do not reach p.
 */
#ifndef MFC_RUNTIME_SAMPLER_H
#define MFC_RUNTIME_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

#define SAMPLER_MAX_LOGPROBS 20       /* OpenAI's top_logprobs limit */
#define SAMPLER_MAX_HISTORY (1 << 20) /* repeat_last_n cap, tokens */

struct sampler_bias {
    int32_t token; /* vocabulary id */
    float bias;    /* added to the logit; -INFINITY bans the token */
};

struct sampler_params {
    float temperature;               /* <= 0: greedy */
    int32_t top_k;                   /* <= 0: off */
    float top_p;                     /* 1: off; in (0, 1] */
    float min_p;                     /* 0: off; in [0, 1] */
    float typical_p;                 /* 1: off; in (0, 1] */
    float repeat_penalty;            /* 1: off; > 0 */
    float presence_penalty;          /* 0: off */
    float frequency_penalty;         /* 0: off */
    int32_t repeat_last_n;           /* tokens of history penalised, 0..SAMPLER_MAX_HISTORY
                                        (resolve Ollama's -1 to num_ctx before) */
    uint64_t seed;                   /* PRNG seed */
    const struct sampler_bias *bias; /* borrowed for sampler_new only (copied) */
    size_t n_bias;
    int logprobs;       /* report the sampled token's logprob (one more pass
                           over the vocabulary per token) */
    int32_t n_logprobs; /* and this many alternatives, 0..SAMPLER_MAX_LOGPROBS */
};

/* Ollama's defaults: temperature 0.8, top_k 40, top_p 0.9, min_p 0,
 * typical_p 1, repeat_penalty 1.1, repeat_last_n 64, no presence/frequency
 * penalty, seed 0, no bias, no logprobs. */
void sampler_params_default(struct sampler_params *p);

struct sampler;

/* Checks p against n_vocab and builds a sampler (free with sampler_free).
 * On failure returns MF_ERANGE/MF_EINVAL/MF_ENOMEM naming the bad parameter
 * and leaves *out NULL. */
int sampler_new(struct sampler **out, int32_t n_vocab, const struct sampler_params *p,
                struct mf_err *err);
/* Accepts NULL. */
void sampler_free(struct sampler *s);

struct gram;

/* Constrains s by grammar g (runtime/grammar/gram.h; s takes a reference):
 * the first n_skip tokens accepted (the prompt) are not fed to it, every
 * later one advances its state, and each draw sees only the tokens the
 * state allows (the end-of-generation ones only where the grammar may
 * end). A draw fails when the state allows nothing. A device draw gets
 * the mask in sampler_draw.allow. MF_ENOMEM, or g's error. */
int sampler_set_grammar(struct sampler *s, struct gram *g, int32_t n_skip, struct mf_err *err);
/* 0: no grammar; 1: *accepting set (1 when the output is a whole
 * sentence); -1: the output left the grammar. */
int sampler_grammar_state(const struct sampler *s, int *accepting);

/* Adds a token to the penalty history (prompt tokens, then each sampled
 * token); only the last repeat_last_n are kept. Ignores ids out of range. */
void sampler_accept(struct sampler *s, int32_t token);

struct sampler_logprob {
    int32_t token;
    float logprob; /* natural log */
};

struct sampler_result {
    int32_t token; /* the sampled token */
    float logprob; /* with params.logprobs, its log-probability under the model
                      (log-softmax of the raw logits, as OpenAI and vLLM report
                      them); NaN otherwise */
    int32_t n_top; /* entries in top: params.n_logprobs, or 0 without logprobs */
    struct sampler_logprob top[SAMPLER_MAX_LOGPROBS]; /* most likely first */
};

/* Samples from logits[0..n_vocab) (not modified). Does not record the token:
 * call sampler_accept. With temperature > 0 every call spends one PRNG
 * number, however many candidates survive, failure included (right after
 * sampler_draw_plan: the plan's number). Fails with MF_EINVAL when no token
 * survives (every logit -inf or NaN); res is then untouched. */
int sampler_sample(struct sampler *s, const float *logits, struct sampler_result *res,
                   struct mf_err *err);

/* Runs the chain without the draw: *n candidates survive, their ids in
 * ids[] and their final logits (after temperature) in out_logits[] (either
 * may be NULL), sorted by logit, highest first. Both arrays need n_vocab
 * entries. For tests and for explaining a sampler's choices. */
int sampler_survivors(struct sampler *s, const float *logits, int32_t *ids, float *out_logits,
                      size_t *n, struct mf_err *err);

/* ---- drawing elsewhere (the CUDA backend's mfk_sample) --------------------
 *
 * A draw another device runs over logits it holds: the request's chain with
 * its biases and penalty history folded into one sparse list, and the
 * uniform number the host draw would take next. The device must give the
 * host's answer for equal logits: bias, then penalty (the same float
 * operations as sampler.c), drop -inf and NaN, top_k, top_p, min_p,
 * temperature, then the inverse-CDF draw in the host's candidate order
 * (by logit, ties by lower id, once top_k or top_p has sorted them; id
 * order otherwise). typical_p and logprobs are host-only. */

#define SAMPLER_DRAW_MAX_ADJUST 1024 /* bias + penalty entries one draw may carry */
#define SAMPLER_DRAW_MAX_TOP_K 1024  /* the largest top_k a device draw takes */

/* A token whose logit the chain changes before filtering:
 *   l = logit (NaN: -inf) + bias;
 *   if count > 0: l = l > 0 ? l / repeat_penalty : l * repeat_penalty;
 *                 l = l - (float)count * frequency_penalty - presence_penalty */
struct sampler_adjust {
    int32_t token; /* vocabulary id; unique within a draw, ascending */
    int32_t count; /* occurrences in the penalty window; 0: bias only */
    float bias;    /* sum of the request's biases for it, added once; 0: none */
};

struct sampler_draw {
    double u;          /* uniform [0, 1) the draw spends; 0 when greedy */
    float temperature; /* <= 0: greedy (argmax after the adjustments, lowest id) */
    int32_t top_k;     /* <= 0: off; at most SAMPLER_DRAW_MAX_TOP_K */
    float top_p;       /* 1: off */
    float min_p;       /* 0: off */
    float repeat_penalty, presence_penalty, frequency_penalty;
    int32_t n_adjust;                    /* entries in adjust */
    const struct sampler_adjust *adjust; /* the sampler's: valid until its next call */
    const uint32_t *allow; /* a grammar's mask (bit i of word i/32: token i allowed), the
                              sampler's until its next call; banned tokens are -inf before
                              anything else; NULL: none */
};

/* 1 when s's requests can be drawn elsewhere (no typical_p, no logprobs,
 * top_k and the adjust list within the limits above); 0: host only. */
int sampler_draw_ok(const struct sampler *s);

/* Plans the next draw of s into *d (sampler_draw_ok(s) must hold): the
 * adjust list from the biases and the current penalty window, and u, taken
 * from the PRNG exactly as sampler_sample would take it (one number per
 * call when temperature > 0, none when greedy), so a seed replays the same
 * stream whichever side draws. A row the device gives back is drawn with
 * sampler_sample before the next sampler_accept: that call spends the
 * plan's u instead of a new one. Can't fail; d->adjust is s's until the
 * next call on s. */
void sampler_draw_plan(struct sampler *s, struct sampler_draw *d);

/* One adjust entry applied to a raw logit, the formula above in the float
 * operations the host does (sampler.c uses it itself): the device contract
 * and the reference for a device's tests. */
float sampler_adjust_logit(const struct sampler_draw *d, const struct sampler_adjust *a,
                           float logit);

/* ---- speculative decoding (runtime/engine/spec.c) -------------------------- */

/* The distribution sampler_sample would draw from, without drawing and
 * without spending a PRNG number: the survivors of the chain with their
 * probabilities (one with probability 1 when greedy), in no particular
 * order; ids and probs need n_vocab entries. Fails as sampler_sample does. */
int sampler_probs(struct sampler *s, const float *logits, int32_t *ids, float *probs, size_t *n,
                  struct mf_err *err);
/* One uniform number in [0, 1) from s's stream (the rejection rule's
 * draws). */
double sampler_uniform(struct sampler *s);
/* 1 when s reports logprobs (which verify steps do not give). */
int sampler_reports_logprobs(const struct sampler *s);

#endif
