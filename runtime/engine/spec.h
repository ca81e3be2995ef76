/*
 * spec.h: speculative decoding in the engine: who proposes tokens (a draft
 * model, prompt lookup, or a benchmark's script), how a verify step's rows
 * accept or reject them (the rejection rule, exact for every sampler
 * setting), how many to propose per sequence (its acceptance rate), and
 * when not to speculate at all (a busy batch, or measured throughput).
 * Design and invariants in spec.c; the draft model's paged KV in
 * spec_draft.c; prompt lookup in lookup.h.
 *
 * The engine (engine.c) drives it on its step thread: before scheduling,
 * spec_round_on says whether this round speculates and spec_want gives each
 * decoding sequence its k, spec_propose fills their
 * proposals (unlocked: the draft model runs here), sched_set_draft hands
 * them to the scheduler; after the verify step, spec_verify turns each
 * sequence's rows into the tokens it keeps, and spec_step_end feeds the
 * throughput guard. Not thread-safe: the step thread alone calls it.
 */
#ifndef MFC_SPEC_H
#define MFC_SPEC_H

#include <stdint.h>

#include "common/err.h"
#include "common/limits.h"
#include "runtime/engine/sampler.h"

struct engine_model;
struct engine_sampler;
struct spec;
struct spec_req;

#define SPEC_MAX_DRAFT MF_SPEC_DRAFT_MAX /* proposals one step may verify per sequence */
#define SPEC_BUCKETS 10   /* throughput guard buckets: 1, 2, 3-4, ..., 257+ sequences */

/* Defaults, documented in docs/modelfile.md (PARAMETER draft_*, lookup_*). */
#define SPEC_DEFAULT_DRAFT_MAX 8
#define SPEC_DEFAULT_DRAFT_MIN 1
#define SPEC_DEFAULT_P_MIN 0.75f /* llama.cpp's (common_params_speculative.p_min) */
#define SPEC_DEFAULT_NGRAM_MIN 2
#define SPEC_DEFAULT_NGRAM_MAX 3
#define SPEC_DEFAULT_MAX_BATCH 32

enum spec_source {
    SPEC_NONE = 0,   /* no speculation */
    SPEC_LOOKUP = 1, /* prompt lookup (lookup.h) */
    SPEC_DRAFT = 2,  /* a draft model (engine_config.draft) */
};

struct spec_config {
    enum spec_source source; /* who proposes */
    int32_t draft_max;       /* proposals a step, at most, 1..SPEC_MAX_DRAFT (draft_max) */
    int32_t draft_min;       /* fewer than this in a round: none verified (draft_min) */
    float p_min;             /* a draft model stops proposing at a position where its
                                likeliest token is less probable than this (draft_p_min) */
    int32_t ngram_min;       /* prompt lookup: shortest n-gram matched (lookup_ngram_min) */
    int32_t ngram_max;       /* prompt lookup: longest n-gram matched (lookup_ngram) */
    int32_t max_batch;       /* no proposals in a round where more sequences decode than
                                this; 0: no limit */
    int32_t fixed_k;         /* 1: every round asks draft_max (benchmarks); 0: adaptive */
    int32_t no_guard;        /* 1: no throughput guard (tests that count proposals) */
    int32_t draft_kv_blocks; /* the draft model's KV pool, blocks (engine_config.draft) */
};

/* Fills c with the defaults above for source src. Can't fail. */
void spec_config_default(struct spec_config *c, enum spec_source src);
/* Checks c (ranges above). 0 or MF_ERANGE naming the field. */
int spec_config_check(const struct spec_config *c, struct mf_err *err);

/* Counters for /metrics (vLLM's spec_decode_* names). */
struct spec_stats {
    uint64_t rounds;   /* verify sequences (a sequence with proposals in a step) */
    uint64_t proposed; /* tokens proposed and verified */
    uint64_t accepted; /* of those, accepted */
    uint64_t emitted;  /* tokens verify sequences produced (accepted + one each) */
    uint64_t accepted_pos[SPEC_MAX_DRAFT]; /* accepted proposals by position */
    uint64_t draft_steps;                  /* draft model steps */
    uint64_t guard_off_steps;              /* rounds the throughput guard kept speculation off */
    uint64_t busy_steps;                   /* rounds with more decoding sequences than max_batch */
};

/* Lifecycle */

/* Opens the speculation state over the engine's model (n_vocab), sampler
 * (may be NULL: greedy) and draft (NULL unless c->source is SPEC_DRAFT;
 * borrowed, with its KV pool of c->draft_kv_blocks blocks). Both interfaces
 * are copied. Returns 0 and *out, or MF_E* with *out NULL. */
int spec_open(struct spec **out, const struct spec_config *c, int32_t n_vocab,
              const struct engine_sampler *sampler, const struct engine_model *draft,
              int32_t max_seqs, struct mf_err *err);
void spec_close(struct spec *sp); /* accepts NULL */
const struct spec_config *spec_config_of(const struct spec *sp);
void spec_get_stats(const struct spec *sp, struct spec_stats *st);

/* One request's state: acceptance history and, with a draft model, its
 * block table in the draft's KV pool. NULL when out of memory. */
struct spec_req *spec_req_new(struct spec *sp);
void spec_req_free(struct spec *sp, struct spec_req *r); /* accepts NULL */
/* spec_req_free for a thread other than the one that runs rounds (the
 * draft's pool may be in use): r is kept on a list until spec_reap, which
 * the round's thread calls. Accepts NULL. */
void spec_req_retire(struct spec *sp, struct spec_req *r);
void spec_reap(struct spec *sp);
/* The request's proposed / accepted totals (the access log). */
void spec_req_counts(const struct spec_req *r, uint64_t *proposed, uint64_t *accepted);

/* Planning a round */

/* 1 when this round may speculate with n_decoding sequences decoding:
 * within max_batch, and the throughput guard of their bucket says on (it
 * probes the other side now and then). Counts the round in the stats. */
int spec_round_on(struct spec *sp, int32_t n_decoding);
/* Proposals to ask of request r now: 0 .. draft_max (0 while r waits out a
 * poor acceptance rate), at most room. */
int32_t spec_want(struct spec *sp, struct spec_req *r, int32_t room);

/* One sequence of a round. */
struct spec_cand {
    struct spec_req *r;          /* its state */
    const int32_t *hist;         /* borrowed: its prompt and output so far */
    int32_t n_hist;              /* tokens in hist; the last one is not computed yet */
    int32_t n_prompt;            /* of those, the prompt */
    void *sampling;              /* its sampler params (draws from the draft's rows) */
    const int32_t *script;       /* benchmarks only: the proposals at output position i are
                                    script[i..]; NULL: the configured source */
    int32_t n_script;            /* entries in script */
    int32_t k;                   /* proposals wanted (spec_want) */
    int32_t out[SPEC_MAX_DRAFT]; /* the proposals */
    int32_t n_out;               /* how many; below draft_min: 0 */
};

/* Fills every candidate's proposals (unlocked: the draft model runs here).
 * A candidate the draft's KV pool cannot take gets none. Returns 0, or
 * MF_E* when the draft model's step fails (then none has proposals). */
int spec_propose(struct spec *sp, struct spec_cand *c, int32_t n, struct mf_err *err);

/* Verifying a step */

/*
 * The rejection rule over one verify sequence: d[0..k) were proposed after
 * hist[0..n_hist) (hist continues with them: hist[n_hist + i] == d[i]),
 * rows[0..k] are the target's logits rows (row i: the distribution after
 * d[0..i)). For i = 0.. the proposal d[i], drawn from q_i (one-hot for
 * lookup and greedy drafts; the draft's distribution otherwise, kept by
 * spec_propose), is accepted with probability min(1, p_i(d[i]) / q_i(d[i])),
 * p_i the distribution the sampler would draw from at row i (after its
 * whole chain); the first rejected one is replaced by a draw from
 * max(0, p_i - q_i) normalised, and if all are accepted the sampler draws
 * from row k as a decode would. So every token has the target's
 * distribution (Leviathan et al. 2023; Chen et al. 2023); at temperature
 * <= 0 p is one-hot and the tokens equal a decode's.
 * n_new: tokens at the end of hist the sampler has not seen. Writes the
 * kept tokens (accepted proposals, then the draw) to out (k + 1 entries) and
 * returns 0 with *n_out of them (1..k+1), res the last token's result;
 * rows may be modified. MF_E* from the sampler. Updates r's acceptance.
 */
int spec_verify(struct spec *sp, struct spec_req *r, void *sampling, float *rows, const int32_t *d,
                int32_t k, const int32_t *hist, int32_t n_hist, int32_t n_new, int32_t *out,
                int32_t *n_out, struct sampler_result *res, struct mf_err *err);

/* After a verify sequence kept n_out tokens: the draft model's cache keeps
 * only what the kept tokens confirm. */
void spec_settle(struct spec *sp, struct spec_req *r, int32_t n_hist, int32_t k, int32_t n_out);

/* The end of a step: n_decoding sequences decoded (0: the step computed
 * prompts too, and is not measured), spec: whether one verified proposals;
 * n_tokens tokens kept, n_computed computed, in seconds (the draft's time of
 * the round is added). Feeds the throughput guard and the cost model. */
void spec_step_end(struct spec *sp, int32_t n_decoding, int spec, int32_t n_tokens,
                   int32_t n_computed, double seconds);

/* The rule alone, for tests: accepts proposal d (drawn with probability
 * q_d from its proposer) against the distribution ids/probs[0..n) with the
 * uniform u in [0, 1): 1 to accept. */
int spec_accept_rule(const int32_t *ids, const float *probs, int32_t n, int32_t d, float q_d,
                     double u);
/* The rule's resampling, for tests: draws with u from max(0, p - q) over
 * ids/probs[0..n), q given densely (q_dense[id], n_vocab entries) or, when
 * q_dense is NULL, one-hot at d. -1 when nothing is left (p <= q
 * everywhere, which a rejection makes impossible up to rounding). */
int32_t spec_residual_draw(const int32_t *ids, const float *probs, int32_t n, const float *q_dense,
                           int32_t d, double u);

#endif
