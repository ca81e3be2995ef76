/*
 * spec.c: speculative decoding's policy and its exactness (spec.h).
 *
 * Owns the per-request state (acceptance history, the draft's proposal
 * distributions until they are verified, the request's share of the draft
 * model through spec_draft.c), the throughput guard, the counters and the
 * scratch rows of one verification. Does not own the scheduler's tokens
 * (proposals go in through sched_set_draft), the models or the samplers
 * (borrowed interfaces of engine.h).
 *
 * A round, per sequence:
 *   spec_want -> k (adaptive) -> spec_propose -> proposals (<= k)
 *   -> [verify step] -> spec_verify (rule) -> kept tokens -> spec_settle
 * Exactness rests on spec_verify alone: whatever proposes, and however
 * badly, every kept token has the distribution the sampler would draw
 * from, because each proposal's probability under its proposer is known
 * (1 for a deterministic proposer, the draft's distribution otherwise)
 * and the rejection rule corrects for it.
 *
 * How many: a sequence whose proposals are accepted with probability a
 * each gains E(k) = (1 - a^(k+1)) / (1 - a) tokens from a step of k
 * proposals, which costs about 1 + c k decode steps (c: what a verified
 * token adds to a step, measured on batch-1 steps, SPEC_VERIFY_COST until
 * then, plus the draft model's measured share); spec_want
 * picks the k in 0..draft_max with the best E(k) / (1 + c k), a from the
 * sequence's own history (an exponential average of accepted and tried
 * proposals). A k of 0 backs the sequence off for a number of rounds that
 * doubles while it stays poor; then one round of draft_min proposals (a
 * probe) updates a.
 *
 * When not: a round with more decoding sequences than max_batch has no
 * proposals (compute-bound batches gain nothing); below that, the guard
 * keeps per batch-size bucket the tokens per second of steps with and
 * without proposals, probing the side it is not on now and then, and turns
 * speculation off in a bucket where it measures slower.
 */
#include "runtime/engine/spec.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/engine/engine.h"
#include "runtime/engine/lookup.h"
#include "runtime/engine/spec_int.h"

#define SPEC_VERIFY_COST 0.1 /* a verified token's cost in decode steps until measured */
#define SPEC_EMA 0.7         /* weight of the past in a sequence's acceptance */
#define SPEC_BACKOFF_MAX 64  /* rounds a poor sequence waits, at most */
#define GUARD_MIN 3          /* steps each side needs before the guard decides */
#define GUARD_PROBE 16       /* the side not taken is probed every this many rounds */
#define GUARD_MARGIN 0.97    /* speculation must keep this share of the off rate */

/* ---------------------------------------------------------------- config */

void spec_config_default(struct spec_config *c, enum spec_source src)
{
    memset(c, 0, sizeof *c);
    c->source = src;
    c->draft_max = SPEC_DEFAULT_DRAFT_MAX;
    c->draft_min = SPEC_DEFAULT_DRAFT_MIN;
    c->p_min = SPEC_DEFAULT_P_MIN;
    c->ngram_min = SPEC_DEFAULT_NGRAM_MIN;
    c->ngram_max = SPEC_DEFAULT_NGRAM_MAX;
    c->max_batch = SPEC_DEFAULT_MAX_BATCH;
}

int spec_config_check(const struct spec_config *c, struct mf_err *err)
{
    if (c->source == SPEC_NONE)
        return 0;
    if (c->draft_max < 1 || c->draft_max > SPEC_MAX_DRAFT)
        return mf_err_set(err, MF_ERANGE, "draft_max %" PRId32 " (allowed 1..%d)", c->draft_max,
                          SPEC_MAX_DRAFT);
    if (c->draft_min < 0 || c->draft_min > c->draft_max)
        return mf_err_set(err, MF_ERANGE,
                          "draft_min %" PRId32 " (allowed 0..draft_max %" PRId32 ")", c->draft_min,
                          c->draft_max);
    if (!(c->p_min >= 0.0f && c->p_min <= 1.0f))
        return mf_err_set(err, MF_ERANGE, "draft_p_min %g (allowed 0..1)", (double)c->p_min);
    if (c->ngram_min < 1 || c->ngram_max < c->ngram_min || c->ngram_max > LOOKUP_NGRAM_MAX)
        return mf_err_set(err, MF_ERANGE,
                          "lookup_ngram_min %" PRId32 " and lookup_ngram %" PRId32
                          " (allowed 1 <= min <= max <= %d)",
                          c->ngram_min, c->ngram_max, LOOKUP_NGRAM_MAX);
    if (c->max_batch < 0)
        return mf_err_set(err, MF_ERANGE, "speculation max_batch %" PRId32 " (must be >= 0)",
                          c->max_batch);
    if (c->source == SPEC_DRAFT && c->draft_kv_blocks < 1)
        return mf_err_set(err, MF_ERANGE, "the draft model's KV pool has no blocks");
    return 0;
}

/* ---------------------------------------------------------------- lifecycle */

int spec_open(struct spec **out, const struct spec_config *c, int32_t n_vocab,
              const struct engine_sampler *sampler, const struct engine_model *draft,
              int32_t max_seqs, struct mf_err *err)
{
    struct spec *sp;
    int rc = spec_config_check(c, err);

    *out = NULL;
    if (rc)
        return rc;
    if (c->source == SPEC_DRAFT && (!draft || draft->n_vocab != n_vocab))
        return mf_err_set(err, MF_EINVAL,
                          "the draft model's vocabulary (%" PRId32 " tokens) differs from the "
                          "model's (%" PRId32 ")",
                          draft ? draft->n_vocab : 0, n_vocab);
    sp = calloc(1, sizeof *sp);
    if (!sp)
        return mf_err_set(err, MF_ENOMEM, "speculation: out of memory");
    sp->cfg = *c;
    sp->n_vocab = n_vocab;
    if (sampler)
        sp->sampler = *sampler;
    sp->ids = malloc((size_t)n_vocab * sizeof *sp->ids);
    sp->probs = malloc((size_t)n_vocab * sizeof *sp->probs);
    sp->qd = calloc((size_t)n_vocab, sizeof *sp->qd);
    if (!sp->ids || !sp->probs || !sp->qd) {
        spec_close(sp);
        return mf_err_set(err, MF_ENOMEM, "speculation: out of memory for %" PRId32 " tokens",
                          n_vocab);
    }
    if (c->source == SPEC_DRAFT &&
        (rc = spec_draft_open(&sp->draft, draft, c->draft_kv_blocks, max_seqs, err))) {
        spec_close(sp);
        return rc;
    }
    *out = sp;
    return 0;
}

void spec_close(struct spec *sp)
{
    if (!sp)
        return;
    spec_reap(sp);
    spec_draft_close(sp->draft);
    free(sp->ids);
    free(sp->probs);
    free(sp->qd);
    free(sp);
}

const struct spec_config *spec_config_of(const struct spec *sp)
{
    return &sp->cfg;
}

void spec_get_stats(const struct spec *sp, struct spec_stats *st)
{
    *st = sp->st;
}

struct spec_req *spec_req_new(struct spec *sp)
{
    struct spec_req *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    /* a draft model starts trusted; lookup proposes only on a match, which
     * is right about as often as not until the sequence shows otherwise */
    r->acc_s = sp->cfg.source == SPEC_DRAFT ? 4.0 : 2.0;
    r->acc_t = 5.0;
    r->backoff = 1;
    r->settled = 1;
    return r;
}

void spec_req_free(struct spec *sp, struct spec_req *r)
{
    if (!r)
        return;
    spec_draft_release(sp->draft, r);
    free(r->q_ids);
    free(r->q_probs);
    free(r);
}

void spec_req_retire(struct spec *sp, struct spec_req *r)
{
    if (!r)
        return;
    r->dead_next = sp->dead;
    sp->dead = r;
}

void spec_reap(struct spec *sp)
{
    while (sp->dead) {
        struct spec_req *r = sp->dead;
        sp->dead = r->dead_next;
        spec_req_free(sp, r);
    }
}

void spec_req_counts(const struct spec_req *r, uint64_t *proposed, uint64_t *accepted)
{
    *proposed = r ? r->proposed : 0;
    *accepted = r ? r->accepted : 0;
}

/* ---------------------------------------------------------------- when and how many */

static int bucket_of(int32_t n)
{
    int b = 0;
    while (b < SPEC_BUCKETS - 1 && (1 << b) < n)
        b++;
    return b;
}

int spec_round_on(struct spec *sp, int32_t n_decoding)
{
    struct spec_guard *g;
    int on;

    if (sp->cfg.source == SPEC_NONE || n_decoding < 1)
        return 0;
    if (sp->cfg.max_batch && n_decoding > sp->cfg.max_batch) {
        sp->st.busy_steps++;
        return 0;
    }
    if (sp->cfg.no_guard)
        return 1;
    g = &sp->guard[bucket_of(n_decoding)];
    g->tick++;
    if (g->n_on < GUARD_MIN)
        on = 1;
    else if (g->n_off < GUARD_MIN)
        on = 0;
    else if (g->on_rate < g->off_rate * GUARD_MARGIN)
        on = g->tick % (4 * GUARD_PROBE) == 0; /* off: probe now and then */
    else
        on = g->tick % GUARD_PROBE != 0; /* on: keep the off rate fresh */
    if (!on)
        sp->st.guard_off_steps++;
    return on;
}

void spec_step_end(struct spec *sp, int32_t n_decoding, int spec, int32_t n_tokens,
                   int32_t n_computed, double seconds)
{
    struct spec_guard *g;
    double rate;

    double drafting = sp->draft_seconds;

    sp->draft_seconds = 0;
    if (sp->cfg.source == SPEC_NONE || n_decoding < 1 || !(seconds > 0))
        return;
    g = &sp->guard[bucket_of(n_decoding)];
    rate = (double)n_tokens / (seconds + drafting);
    if (spec) {
        g->on_rate = g->n_on ? 0.8 * g->on_rate + 0.2 * rate : rate;
        g->n_on++;
    } else {
        g->off_rate = g->n_off ? 0.8 * g->off_rate + 0.2 * rate : rate;
        g->n_off++;
    }
    if (!spec && n_decoding == 1)
        sp->decode_seconds =
            sp->decode_seconds > 0 ? 0.8 * sp->decode_seconds + 0.2 * seconds : seconds;    if (spec && n_decoding == 1 && n_computed > 1 && sp->decode_seconds > 0) {
        /* what each verified token added to a decode step, in decode steps */
        double c = (seconds / sp->decode_seconds - 1.0) / (n_computed - 1);
        c = c < 0.01 ? 0.01 : c > 2.0 ? 2.0 : c;
        sp->verify_cost = sp->verify_cost > 0 ? 0.8 * sp->verify_cost + 0.2 * c : c;
    }
}

/* Tokens a round of k proposals yields per unit of cost, at acceptance a. */
static double yield(double a, int32_t k, double c)
{
    double gain = a > 0.999 ? k + 1.0 : (1.0 - pow(a, k + 1)) / (1.0 - a);
    return gain / (1.0 + c * k);
}

int32_t spec_want(struct spec *sp, struct spec_req *r, int32_t room)
{
    const struct spec_config *c = &sp->cfg;
    double a = r->acc_t > 0 ? r->acc_s / r->acc_t : 0.5;
    double cost = sp->verify_cost > 0 ? sp->verify_cost : SPEC_VERIFY_COST;
    int32_t best = 0;
    double best_y = 1.0;

    if (room > c->draft_max)
        room = c->draft_max;
    if (c->source == SPEC_NONE || room < 1 || room < c->draft_min)
        return 0;
    if (c->fixed_k)
        return room;
    if (r->cool > 0) {
        r->cool--;
        return 0;
    }
    if (r->probe) { /* back from a wait: one small round tells whether it got better */
        r->probe = 0;
        return c->draft_min > 1 ? c->draft_min : 1;
    }
    if (c->source == SPEC_DRAFT && sp->decode_seconds > 0 && sp->draft_step_seconds > 0)
        cost += sp->draft_step_seconds / sp->decode_seconds;
    for (int32_t k = 1; k <= room; k++) {
        double y = yield(a, k, cost);
        if (y > best_y * 1.0001) {
            best_y = y;
            best = k;
        }
    }
    if (best < c->draft_min)
        best = 0;
    if (!best) { /* poor: wait, twice as long each time it stays poor, then probe */
        r->cool = r->backoff;
        r->backoff = r->backoff * 2 < SPEC_BACKOFF_MAX ? r->backoff * 2 : SPEC_BACKOFF_MAX;
        r->probe = 1;
    }
    return best;
}

/* A round of k proposals of which a were accepted. */
static void learn(struct spec *sp, struct spec_req *r, int32_t k, int32_t a)
{
    r->acc_s = SPEC_EMA * r->acc_s + a;
    r->acc_t = SPEC_EMA * r->acc_t + a + (a < k);
    if (a > 0)
        r->backoff = 1;
    r->proposed += (uint64_t)k;
    r->accepted += (uint64_t)a;
    sp->st.rounds++;
    sp->st.proposed += (uint64_t)k;
    sp->st.accepted += (uint64_t)a;
    sp->st.emitted += (uint64_t)a + 1;
    for (int32_t i = 0; i < a && i < SPEC_MAX_DRAFT; i++)
        sp->st.accepted_pos[i]++;
}

/* ---------------------------------------------------------------- proposing */

/* Benchmarks' script: what output position n_gen onwards should be. */
static int32_t from_script(const struct spec_cand *c)
{
    int32_t at = c->n_hist - c->n_prompt, n = 0;
    while (n < c->k && at + n < c->n_script) {
        ((struct spec_cand *)c)->out[n] = c->script[at + n];
        n++;
    }
    return n;
}

int spec_propose(struct spec *sp, struct spec_cand *c, int32_t n, struct mf_err *err)
{
    int rc = 0;

    for (int32_t i = 0; i < n; i++) {
        if (!c[i].r->settled) /* proposals never verified: the history holds the truth */
            spec_draft_settle(sp->draft, c[i].r, 0, 0);
        c[i].r->settled = 1;
        c[i].n_out = 0;
        c[i].r->n_prop = 0;
        c[i].r->q_n = 0;
        if (c[i].k > SPEC_MAX_DRAFT)
            c[i].k = SPEC_MAX_DRAFT;
        if (c[i].script)
            c[i].n_out = from_script(&c[i]);
        else if (sp->cfg.source == SPEC_LOOKUP)
            c[i].n_out = lookup_propose(c[i].hist, c[i].n_hist, sp->cfg.ngram_min,
                                        sp->cfg.ngram_max, c[i].k, c[i].out);
    }
    if (sp->cfg.source == SPEC_DRAFT) {
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        rc = spec_draft_propose(sp, c, n, err);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        sp->draft_seconds +=
            (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    }
    for (int32_t i = 0; i < n; i++) {
        if (rc || c[i].n_out < sp->cfg.draft_min)
            c[i].n_out = 0;
        if (!c[i].n_out && c[i].k > 0 && !c[i].script && sp->cfg.source == SPEC_DRAFT) {
            /* the draft ran and was too unsure to propose: as a rejection, so a
             * draft that never is sure stops costing a step every round */
            c[i].r->acc_s *= SPEC_EMA;
            c[i].r->acc_t = SPEC_EMA * c[i].r->acc_t + 1;
        }
        c[i].r->n_prop = c[i].n_out;
        c[i].r->prop_hist = c[i].n_hist;
        c[i].r->settled = sp->cfg.source != SPEC_DRAFT;
    }
    return rc;
}

/* ---------------------------------------------------------------- the rule */

int spec_accept_rule(const int32_t *ids, const float *probs, int32_t n, int32_t d, float q_d,
                     double u)
{
    float p_d = 0.0f;
    for (int32_t i = 0; i < n; i++) {
        if (ids[i] == d)
            p_d = probs[i];
    }
    if (p_d >= q_d)
        return 1;
    return (double)u * (double)q_d < (double)p_d;
}

int32_t spec_residual_draw(const int32_t *ids, const float *probs, int32_t n, const float *q_dense,
                           int32_t d, double u)
{
    double z = 0, cum = 0;
    int32_t last = -1;

    for (int32_t i = 0; i < n; i++) {
        double q = q_dense ? q_dense[ids[i]] : ids[i] == d;
        if (probs[i] > q)
            z += probs[i] - q;
    }
    if (!(z > 0))
        return -1;
    u *= z;
    for (int32_t i = 0; i < n; i++) {
        double q = q_dense ? q_dense[ids[i]] : ids[i] == d;
        if (probs[i] <= q)
            continue;
        cum += probs[i] - q;
        last = ids[i];
        if (u < cum)
            return ids[i];
    }
    return last; /* u rounded up to z */
}

/* ---------------------------------------------------------------- verifying */

/* The distribution the sampler would draw from at row (after hist[0..n)
 * of which n_new unseen), into sp->ids/probs; greedy without a sampler. */
static int row_dist(struct spec *sp, void *sampling, float *row, const int32_t *hist, int32_t n,
                    int32_t n_new, int32_t *np, struct mf_err *err)
{
    if (sp->sampler.dist)
        return sp->sampler.dist(sp->sampler.ctx, sampling, row, sp->n_vocab, hist, n, n_new,
                                sp->ids, sp->probs, np, err);
    int32_t best = 0;
    for (int32_t i = 1; i < sp->n_vocab; i++) {
        if (row[i] > row[best])
            best = i;
    }
    sp->ids[0] = best;
    sp->probs[0] = 1.0f;
    *np = 1;
    return 0;
}

static double uniform(struct spec *sp, void *sampling)
{
    return sp->sampler.uniform ? sp->sampler.uniform(sp->sampler.ctx, sampling) : 0.5;
}

/* Proposal i's probability under its proposer, and (for a draft's
 * distribution) that distribution spread into sp->qd; returns 1 when q is
 * one-hot at the proposal. */
static int proposal_q(struct spec *sp, const struct spec_req *r, int32_t i, int32_t d, float *q_d)
{
    if (i >= r->q_n || r->q_off[i + 1] - r->q_off[i] <= 1) {
        *q_d = 1.0f;
        return 1;
    }
    *q_d = 0.0f;
    for (int32_t j = r->q_off[i]; j < r->q_off[i + 1]; j++) {
        sp->qd[r->q_ids[j]] = r->q_probs[j];
        if (r->q_ids[j] == d)
            *q_d = r->q_probs[j];
    }
    return 0;
}

static void clear_q(struct spec *sp, const struct spec_req *r, int32_t i)
{
    if (i >= r->q_n)
        return;
    for (int32_t j = r->q_off[i]; j < r->q_off[i + 1]; j++)
        sp->qd[r->q_ids[j]] = 0.0f;
}

/* Proposal i was rejected: the replacement from max(0, p - q). */
static int32_t replace(struct spec *sp, void *sampling, int32_t np, int one_hot, int32_t d)
{
    int32_t left = 0, only = -1;
    const float *q = one_hot ? NULL : sp->qd;

    for (int32_t j = 0; j < np; j++) {
        double qj = q ? q[sp->ids[j]] : sp->ids[j] == d;
        if (sp->probs[j] > qj) {
            left++;
            only = sp->ids[j];
        }
    }
    if (left == 1)
        return only; /* no draw needed (greedy's case: no PRNG number spent) */
    double u = uniform(sp, sampling);
    int32_t t = spec_residual_draw(sp->ids, sp->probs, np, q, d, u);
    if (t < 0) { /* p <= q everywhere: only rounding rejects; draw from p */
        double cum = 0;
        t = sp->ids[np - 1];
        for (int32_t j = 0; j < np; j++) {
            cum += sp->probs[j];
            if (u < cum) {
                t = sp->ids[j];
                break;
            }
        }
    }
    return t;
}

static int bonus_draw(struct spec *sp, void *sampling, float *row, const int32_t *hist, int32_t n,
                      int32_t n_new, struct sampler_result *res, struct mf_err *err)
{
    if (sp->sampler.sample)
        return sp->sampler.sample(sp->sampler.ctx, sampling, row, sp->n_vocab, hist, n, n_new, res,
                                  err);
    int32_t np;
    int rc = row_dist(sp, sampling, row, hist, n, n_new, &np, err);
    *res = (struct sampler_result){.token = sp->ids[0], .logprob = NAN};
    return rc;
}

int spec_verify(struct spec *sp, struct spec_req *r, void *sampling, float *rows, const int32_t *d,
                int32_t k, const int32_t *hist, int32_t n_hist, int32_t n_new, int32_t *out,
                int32_t *n_out, struct sampler_result *res, struct mf_err *err)
{
    const size_t nv = (size_t)sp->n_vocab;
    int rc;

    for (int32_t i = 0; i < k; i++) {
        int32_t np = 0;
        float q_d;
        rc = row_dist(sp, sampling, rows + (size_t)i * nv, hist, n_hist + i, i ? 1 : n_new, &np,
                      err);
        if (rc)
            return rc;
        int one_hot = proposal_q(sp, r, i, d[i], &q_d);
        float p_d = 0.0f;
        for (int32_t j = 0; j < np; j++) {
            if (sp->ids[j] == d[i])
                p_d = sp->probs[j];
        }
        /* a draw only when the ratio is strictly between 0 and 1 */
        int ok = p_d >= q_d ? 1
                 : p_d <= 0.0f
                     ? 0
                     : spec_accept_rule(sp->ids, sp->probs, np, d[i], q_d, uniform(sp, sampling));
        if (ok) {
            clear_q(sp, r, i);
            out[i] = d[i];
            continue;
        }
        out[i] = replace(sp, sampling, np, one_hot, d[i]);
        clear_q(sp, r, i);
        *res = (struct sampler_result){.token = out[i], .logprob = NAN};
        *n_out = i + 1;
        learn(sp, r, k, i);
        return 0;
    }
    rc = bonus_draw(sp, sampling, rows + (size_t)k * nv, hist, n_hist + k, k ? 1 : n_new, res, err);
    if (rc)
        return rc;
    out[k] = res->token;
    *n_out = k + 1;
    learn(sp, r, k, k);
    return 0;
}

void spec_settle(struct spec *sp, struct spec_req *r, int32_t n_hist, int32_t k, int32_t n_out)
{
    int32_t accepted = n_out > 0 ? n_out - 1 : 0;
    (void)k;
    if (!r->settled)
        spec_draft_settle(sp->draft, r, n_hist, accepted);
    r->settled = 1;
    r->n_prop = 0;
    r->q_n = 0;
}
