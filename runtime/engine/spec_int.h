/*
 * spec_int.h: what spec.c and spec_draft.c share: the speculation state,
 * one request's part of it, and the draft model's proposer.
 */
#ifndef MFC_SPEC_INT_H
#define MFC_SPEC_INT_H

#include "runtime/engine/engine.h"
#include "runtime/engine/kv.h"
#include "runtime/engine/spec.h"

struct spec_draft;

/* Tokens per second of decode steps with and without proposals, for one
 * bucket of batch sizes (spec_round_on). */
struct spec_guard {
    double on_rate;  /* exponential average, steps with proposals */
    double off_rate; /* exponential average, steps without */
    int32_t n_on;    /* steps measured with */
    int32_t n_off;   /* steps measured without */
    uint32_t tick;   /* rounds planned in this bucket */
};

struct spec {
    struct spec_config cfg;                /* checked */
    int32_t n_vocab;                       /* the model's = the draft's */
    struct engine_sampler sampler;         /* copy; every hook may be NULL (greedy) */
    struct spec_draft *draft;              /* owned: the draft model's side; NULL without one */
    struct spec_guard guard[SPEC_BUCKETS]; /* by batch-size bucket */
    struct spec_stats st;                  /* counters */
    double draft_seconds;                  /* draft time since the last spec_step_end */
    double draft_step_seconds;             /* average draft step, seconds (spec_draft.c) */
    double decode_seconds;                 /* average target decode step at batch 1, seconds */
    double verify_cost;             /* what a verified token adds to a batch-1 step, in
                                       decode steps (average); 0: not measured yet */
    int32_t *ids;                          /* owned: n_vocab, one row's survivors */
    float *probs;                          /* owned: n_vocab, their probabilities */
    float *qd;                             /* owned: n_vocab, a proposal distribution spread out;
                                              all zero between uses */
    struct spec_req *dead;                 /* retired requests to free (spec_reap) */
};

struct spec_req {
    double acc_s;      /* accepted proposals, exponential average */
    double acc_t;      /* tried proposals (a rejection ends a round), same average */
    int32_t cool;      /* rounds to skip before proposing again */
    int32_t backoff;   /* the next cool period */
    int32_t probe;     /* 1: the next round after the cool period proposes draft_min */
    uint64_t proposed; /* proposals verified, this request */
    uint64_t accepted; /* of those accepted */
    int32_t n_prop;    /* proposals of the round in flight */
    int32_t prop_hist; /* the history length they followed */
    /* the draft's distributions of the round in flight: proposal i's are
     * q_ids/q_probs[q_off[i] .. q_off[i + 1]); one entry (or i >= q_n): one-hot */
    int32_t q_n;
    int32_t q_off[SPEC_MAX_DRAFT + 1];
    int32_t *q_ids; /* owned */
    float *q_probs; /* owned */
    int32_t q_cap;  /* entries allocated in each */
    /* the draft model's cache (spec_draft.c) */
    struct kv_seq *dseq;        /* owned through the draft's pool; NULL: none yet */
    int32_t d_done;             /* leading tokens whose draft K/V is in dseq */
    int32_t settled;            /* 0: the round in flight fed proposals to the draft that
                                   no verification has confirmed or refuted yet */
    struct spec_req *dead_next; /* spec_req_retire's list */
};

/* spec_draft.c: the draft model's side. open: MF_E*; close accepts NULL. */
int spec_draft_open(struct spec_draft **out, const struct engine_model *m, int32_t n_blocks,
                    int32_t max_seqs, struct mf_err *err);
void spec_draft_close(struct spec_draft *d);
/* Proposals for every candidate with k > 0 and none yet (script, lookup):
 * catch the draft's cache up with the history, then draw one token at a
 * time, stopping below p_min. Fills c[i].out / n_out and r->q_*. */
int spec_draft_propose(struct spec *sp, struct spec_cand *c, int32_t n, struct mf_err *err);
/* Keeps r's draft cache to what n_hist + accepted confirm. d NULL: no-op. */
void spec_draft_settle(struct spec_draft *d, struct spec_req *r, int32_t n_hist, int32_t accepted);
/* Gives r's draft blocks back. d NULL: no-op. */
void spec_draft_release(struct spec_draft *d, struct spec_req *r);

#endif
