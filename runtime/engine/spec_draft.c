/*
 * spec_draft.c: the draft model's side of speculative decoding: its own
 * paged KV pool (kv.c, prefix caching included) and, per request, a block
 * table that follows the request's tokens; a round's proposals drawn one
 * step at a time for every candidate at once.
 *
 * Owns the pool, the step's batch and the draft's logits rows. Does not own
 * the draft model (a borrowed engine_model) or the requests' state
 * (spec_req, whose dseq/d_done this file alone changes).
 *
 * A request's draft cache, d_done the positions whose K/V it holds:
 *   none   --first round: kv_match_prefix------------------------> d_done = hits
 *   d_done --round: catch up to the history (chunked by the budget),
 *            then one step per proposal, fed back--------------> n_hist + fed
 *   d_done --spec_draft_settle: keep what the kept tokens confirm-> n_hist + min(accepted, fed)
 *   any    --pool full, or the request ends--------------------> none (blocks given back)
 * Invariant: positions < d_done hold the K/V of the request's own tokens
 * (never of a rejected proposal), and only blocks before the history's last
 * token are committed to the prefix cache, so a recomputed last token never
 * writes into a block another request may share.
 */
#include "runtime/engine/spec_int.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct spec_draft {
    struct engine_model m;  /* copy of the caller's interface */
    struct kv_cache *kv;    /* owned: the draft's blocks */
    int32_t max_seqs;       /* sequences one draft step takes */
    struct batch_seq *seqs; /* owned: max_seqs, the step being built */
    int32_t *who;           /* owned: max_seqs, the candidate behind each */
    int32_t *take;          /* owned: max_seqs, its tokens this step */
    float *logits;          /* owned (m.logits_alloc): logits_cap floats */
    size_t logits_cap;
    int32_t max_len; /* a sequence's most positions (its table's capacity) */
};

static const struct batch_lora no_lora;

int spec_draft_open(struct spec_draft **out, const struct engine_model *m, int32_t n_blocks,
                    int32_t max_seqs, struct mf_err *err)
{
    struct spec_draft *d = calloc(1, sizeof *d);
    struct kv_config kc = {.n_blocks = n_blocks};
    int rc;

    *out = NULL;
    if (!d)
        return mf_err_set(err, MF_ENOMEM, "draft model: out of memory");
    d->m = *m;
    d->max_seqs = max_seqs > 0 ? max_seqs : 1;
    d->max_len = n_blocks * KV_BLOCK_TOKENS;
    d->seqs = calloc((size_t)d->max_seqs, sizeof *d->seqs);
    d->who = calloc((size_t)d->max_seqs, sizeof *d->who);
    d->take = calloc((size_t)d->max_seqs, sizeof *d->take);
    if (!d->seqs || !d->who || !d->take) {
        spec_draft_close(d);
        return mf_err_set(err, MF_ENOMEM, "draft model: out of memory for %" PRId32 " sequences",
                          d->max_seqs);
    }
    rc = kv_open(&d->kv, &kc, err);
    if (rc) {
        spec_draft_close(d);
        return mf_err_prefix(err, "draft model");
    }
    *out = d;
    return 0;
}

static void logits_free(struct spec_draft *d)
{
    if (d->m.logits_free)
        d->m.logits_free(d->m.ctx, d->logits);
    else
        free(d->logits);
    d->logits = NULL;
    d->logits_cap = 0;
}

void spec_draft_close(struct spec_draft *d)
{
    if (!d)
        return;
    kv_close(d->kv); /* with every sequence's table still open */
    logits_free(d);
    free(d->seqs);
    free(d->who);
    free(d->take);
    free(d);
}

void spec_draft_release(struct spec_draft *d, struct spec_req *r)
{
    if (!d || !r->dseq)
        return;
    kv_seq_close(d->kv, r->dseq);
    r->dseq = NULL;
    r->d_done = 0;
}

void spec_draft_settle(struct spec_draft *d, struct spec_req *r, int32_t n_hist, int32_t accepted)
{
    int32_t keep = r->prop_hist + accepted;
    (void)n_hist;
    if (!d || !r->dseq || r->d_done <= keep)
        return;
    r->d_done = keep;
    kv_seq_trim(d->kv, r->dseq, keep);
}

/* ---------------------------------------------------------------- one step */

static int logits_room(struct spec_draft *d, int32_t rows, struct mf_err *err)
{
    size_t need = (size_t)rows * (size_t)d->m.n_vocab;
    if (need <= d->logits_cap)
        return 0;
    logits_free(d);
    d->logits = d->m.logits_alloc ? d->m.logits_alloc(d->m.ctx, need * sizeof *d->logits)
                                  : malloc(need * sizeof *d->logits);
    if (!d->logits)
        return mf_err_set(err, MF_ENOMEM, "draft model: out of memory for %" PRId32 " logits rows",
                          rows);
    d->logits_cap = need;
    return 0;
}

/* Runs the nb sequences built; returns 0 or the draft's MF_E*. */
static int run(struct spec *sp, struct spec_draft *d, int32_t nb, struct mf_err *err)
{
    struct batch b = {.n_seqs = nb, .seqs = d->seqs};
    struct timespec t0, t1;
    int32_t rows = 0;
    int rc;

    for (int32_t j = 0; j < nb; j++)
        rows += d->seqs[j].want_logits;
    rc = logits_room(d, rows > 0 ? rows : 1, err);
    if (rc)
        return rc;
    b.logits = d->logits;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    rc = d->m.step(d->m.ctx, &b, err);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (rc)
        return mf_err_prefix(err, "draft model");
    double s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    sp->draft_step_seconds =
        sp->draft_step_seconds > 0 ? 0.8 * sp->draft_step_seconds + 0.2 * s : s;
    sp->st.draft_steps++;
    return 0;
}

/* Keeps proposal i's distribution (ids/probs[0..np)) in r. 0 or -1 (memory). */
static int keep_q(struct spec_req *r, int32_t i, const int32_t *ids, const float *probs, int32_t np)
{
    int32_t at = r->q_off[i];
    if (at + np > r->q_cap) {
        int32_t cap = r->q_cap ? r->q_cap : 256;
        while (cap < at + np)
            cap *= 2;
        int32_t *ni = realloc(r->q_ids, (size_t)cap * sizeof *ni);
        if (ni)
            r->q_ids = ni;
        float *nf = realloc(r->q_probs, (size_t)cap * sizeof *nf);
        if (nf)
            r->q_probs = nf;
        if (!ni || !nf)
            return -1;
        r->q_cap = cap;
    }
    memcpy(r->q_ids + at, ids, (size_t)np * sizeof *ids);
    memcpy(r->q_probs + at, probs, (size_t)np * sizeof *probs);
    r->q_off[i + 1] = at + np;
    r->q_n = i + 1;
    return 0;
}

/* The softmax probability of row's likeliest token. */
static float top_prob(const float *row, int32_t n)
{
    float m = row[0];
    double z = 0;
    for (int32_t i = 1; i < n; i++)
        m = row[i] > m ? row[i] : m;
    for (int32_t i = 0; i < n; i++)
        z += expf(row[i] - m);
    return (float)(1.0 / z);
}

/* Proposal i of candidate c from the draft's row: greedy, or drawn from the
 * request's sampling chain over the row (kept as q). Returns 1 when made, 0
 * when the draft is too unsure (p_min) or memory ran out. */
static int choose(struct spec *sp, struct spec_cand *c, int32_t i, float *row, struct mf_err *err)
{
    struct spec_req *r = c->r;
    int32_t np = 1, tok = 0;
    float top;

    if (i == 0)
        r->q_off[0] = 0;
    if (sp->sampler.dist) {
        if (sp->sampler.dist(sp->sampler.ctx, c->sampling, row, sp->n_vocab, c->hist, c->n_hist, 0,
                             sp->ids, sp->probs, &np, err))
            return 0;
    } else {
        sp->ids[0] = 0;
        for (int32_t v = 1; v < sp->n_vocab; v++)
            sp->ids[0] = row[v] > row[sp->ids[0]] ? v : sp->ids[0];
        sp->probs[0] = 1.0f;
    }
    if (np == 1) { /* greedy: the row's own confidence */
        tok = sp->ids[0];
        top = top_prob(row, sp->n_vocab);
    } else {
        double u = sp->sampler.uniform ? sp->sampler.uniform(sp->sampler.ctx, c->sampling) : 0.5;
        double cum = 0;
        top = 0.0f;
        tok = sp->ids[np - 1];
        for (int32_t j = 0; j < np; j++)
            top = sp->probs[j] > top ? sp->probs[j] : top;
        for (int32_t j = 0; j < np; j++) {
            cum += sp->probs[j];
            if (u < cum) {
                tok = sp->ids[j];
                break;
            }
        }
    }
    if (top < sp->cfg.p_min || keep_q(r, i, np == 1 ? &tok : sp->ids, sp->probs, np))
        return 0;
    c->out[i] = tok;
    c->n_out = i + 1;
    return 1;
}

/* ---------------------------------------------------------------- a round */

/* Opens r's draft table on first use, taking what the prefix cache has;
 * never lets d_done reach the history's last token (its logits are due). */
static int ready(struct spec_draft *d, struct spec_cand *c)
{
    struct spec_req *r = c->r;
    if (!r->dseq) {
        struct mf_err ignored;
        if (kv_seq_open(d->kv, &no_lora, d->max_len, &r->dseq, &ignored))
            return 0;
        r->d_done = kv_match_prefix(d->kv, r->dseq, c->hist, c->n_hist);
    }
    if (r->d_done > c->n_hist - 1) {
        r->d_done = c->n_hist - 1;
        kv_seq_trim(d->kv, r->dseq, r->d_done);
    }
    return c->n_hist + c->k <= d->max_len;
}

/* Adds a sequence to the step: tokens at positions from n_past. A pool too
 * full gives r's blocks back (so others may run) and returns 0. */
static int add(struct spec_draft *d, int32_t *nb, int32_t ci, struct spec_cand *c,
               const int32_t *tokens, int32_t n, int want)
{
    struct spec_req *r = c->r;
    if (kv_alloc(d->kv, r->dseq, r->d_done + n, NULL) != 0) {
        spec_draft_release(d, r);
        return 0;
    }
    d->seqs[*nb] = (struct batch_seq){.tokens = tokens,
                                      .n_tokens = n,
                                      .n_past = r->d_done,
                                      .block_table = kv_seq_blocks(r->dseq),
                                      .n_blocks = kv_seq_n_blocks(r->dseq),
                                      .want_logits = want};
    d->who[*nb] = ci;
    d->take[*nb] = n;
    (*nb)++;
    return 1;
}

/* The catch-up step: each candidate's tokens the draft has not seen, in
 * chunks of the budget; a candidate whose last token is computed gets its
 * first proposal. */
static int catch_up(struct spec *sp, struct spec_draft *d, struct spec_cand *c, int32_t n,
                    struct mf_err *err)
{
    int32_t nb = 0, budget = d->m.max_tokens > 0 ? d->m.max_tokens : 512;
    int rc;

    for (int32_t i = 0; i < n && nb < d->max_seqs && budget > 0; i++) {
        if (c[i].k < 1 || c[i].n_out || c[i].script || !ready(d, &c[i]))
            continue;
        int32_t need = c[i].n_hist - c[i].r->d_done;
        int32_t take = need < budget ? need : budget;
        if (add(d, &nb, i, &c[i], c[i].hist + c[i].r->d_done, take, take == need))
            budget -= take;
    }
    if (!nb)
        return 0;
    rc = run(sp, d, nb, err);
    for (int32_t j = 0, row = 0; !rc && j < nb; j++) {
        struct spec_cand *ci = &c[d->who[j]];
        struct spec_req *r = ci->r;
        r->d_done += d->take[j];
        kv_commit(d->kv, r->dseq, ci->hist,
                  r->d_done < ci->n_hist - 1 ? r->d_done : ci->n_hist - 1);
        if (d->seqs[j].want_logits)
            choose(sp, ci, 0, d->logits + (size_t)row++ * (size_t)sp->n_vocab, err);
    }
    return rc;
}

int spec_draft_propose(struct spec *sp, struct spec_cand *c, int32_t n, struct mf_err *err)
{
    struct spec_draft *d = sp->draft;
    int rc = catch_up(sp, d, c, n, err);

    for (int32_t s = 1; !rc && s < SPEC_MAX_DRAFT; s++) {
        int32_t nb = 0;
        for (int32_t i = 0; i < n && nb < d->max_seqs; i++) {
            struct spec_cand *ci = &c[i];
            if (ci->script || ci->n_out != s || s >= ci->k || !ci->r->dseq)
                continue;
            /* the last proposal, fed back at position n_hist + s - 1 */
            if (ci->r->d_done != ci->n_hist + s - 1 || !add(d, &nb, i, ci, &ci->out[s - 1], 1, 1))
                continue;
        }
        if (!nb)
            break;
        rc = run(sp, d, nb, err);
        for (int32_t j = 0; !rc && j < nb; j++) {
            struct spec_cand *ci = &c[d->who[j]];
            ci->r->d_done += 1;
            choose(sp, ci, s, d->logits + (size_t)j * (size_t)sp->n_vocab, err);
        }
    }
    return rc;
}
