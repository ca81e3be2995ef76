/*
 * test_sched.c: unit tests for runtime/engine/sched.c driven by the fake model
 * (tests/unit/fake_model.c): token budget and max_num_seqs every step,
 * decodes before prefills, exact chunked-prefill splits, preemption of the
 * newest with every request still producing its solo output, cancellation,
 * oversize and overload refusals, priorities and pausing; prefill beside
 * decode (max_prefill_tokens): no decode waits, prompts advance every step
 * and share at most the cap beside decodes. sched_check (which runs
 * kv_check) runs after every step.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "runtime/engine/sched.h"
#include "tests/unit/fake_model.h"

#define VOCAB 1000
#define MAX_REQS 16

struct rig {
    struct kv_cache *kv;
    struct sched *s;
    struct fake_model m;
    struct sched_config cfg;
    struct sched_req *reqs[MAX_REQS]; /* submitted, in order */
    int32_t prompts[MAX_REQS][256];   /* their prompts */
    int32_t n_prompt[MAX_REQS];       /* prompt lengths */
    int32_t max_tokens[MAX_REQS];     /* output allowance */
    int n_reqs;                       /* entries used */
    int32_t steps;                    /* steps driven */
    int32_t max_step_tokens;          /* the largest step, tokens */
    int check_order;                  /* 1: assert decodes come first (no preemption) */
    int check_progress;               /* 1: assert no decode waits and prefills advance */
    int32_t mixed_steps;              /* steps holding decodes and prefills */
    int32_t computed[MAX_REQS];       /* tokens each request has in the cache */
    int32_t max_prefill_beside;       /* most prompt tokens in a step holding a decode */
};

static void check(const struct sched *s)
{
    struct mf_err err;
    mf_err_clear(&err);
    if (sched_check(s, &err))
        fail_msg("sched_check: %s", err.msg);
}

/* prefill: sched_config.max_prefill_tokens (0: no cap) */
static void rig_open_prefill(struct rig *r, int32_t n_blocks, int32_t seqs, int32_t budget,
                             int32_t waiting, int32_t prefill)
{
    struct kv_config kc = {.n_blocks = n_blocks};
    struct mf_err err;
    memset(r, 0, sizeof *r);
    r->cfg.max_prefill_tokens = prefill;
    r->cfg.max_num_seqs = seqs;
    r->cfg.max_num_batched_tokens = budget;
    r->cfg.max_model_len = 4096;
    r->cfg.max_waiting = waiting;
    assert_int_equal(kv_open(&r->kv, &kc, &err), 0);
    assert_int_equal(sched_open(&r->s, &r->cfg, r->kv, &err), 0);
    assert_int_equal(fake_model_init(&r->m, n_blocks, 4096, VOCAB), 0);
}

static void rig_open(struct rig *r, int32_t n_blocks, int32_t seqs, int32_t budget, int32_t waiting)
{
    rig_open_prefill(r, n_blocks, seqs, budget, waiting, 0);
}

static void rig_close(struct rig *r)
{
    struct kv_stats st;
    check(r->s);
    for (int i = 0; i < r->n_reqs; i++)
        sched_free_req(r->s, r->reqs[i]);
    check(r->s);
    kv_get_stats(r->kv, &st);
    assert_int_equal(st.blocks_used, 0); /* no leaks */
    sched_close(r->s);
    kv_close(r->kv);
    fake_model_fini(&r->m);
}

/* Submits a prompt of n tokens drawn from seed (prompts with equal seeds
 * share their prefix). Returns the submit code. */
static int submit(struct rig *r, int32_t n, int32_t seed, int32_t max_tokens, int32_t prio)
{
    int i = r->n_reqs;
    struct sched_submit in = {.n_prompt = n, .max_tokens = max_tokens, .priority = prio};
    struct mf_err err;
    int rc;
    assert_true(i < MAX_REQS && n <= 256);
    for (int32_t k = 0; k < n; k++)
        r->prompts[i][k] = (seed * 7919 + k * 31) % VOCAB;
    in.prompt = r->prompts[i];
    rc = sched_submit(r->s, &in, &r->reqs[i], &err);
    if (rc == 0) {
        r->n_prompt[i] = n;
        r->max_tokens[i] = max_tokens;
        r->n_reqs++;
    }
    check(r->s);
    return rc;
}

/* 1 for a decode: one token, the request's last, after it has sampled. */
static int is_decode(const struct sched_step *st, int32_t i)
{
    const struct batch_seq *q = &st->batch.seqs[i];
    int32_t n;
    sched_req_tokens(st->reqs[i], &n);
    return q->n_tokens == 1 && q->n_past == n - 1 && sched_req_n_output(st->reqs[i]) > 0;
}

/* 1 when the entry is a request's last known token (a decode, or a prompt's
 * last token): the scheduler's decode phase, outside the prefill budget. */
static int is_last_token(const struct sched_step *st, int32_t i)
{
    const struct batch_seq *q = &st->batch.seqs[i];
    int32_t n;
    sched_req_tokens(st->reqs[i], &n);
    return q->n_tokens == 1 && q->n_past == n - 1;
}

static int req_index(const struct rig *r, const struct sched_req *q)
{
    for (int i = 0; i < r->n_reqs; i++)
        if (r->reqs[i] == q)
            return i;
    fail_msg("a step holds a request the rig did not submit");
    return -1;
}

/* Before a step, with check_progress: which requests have one token left
 * (a decode, or a prompt's last token) and which have prompt work, and
 * whether a waiting one could take a sequence slot. */
struct pre {
    int last[MAX_REQS];
    int work[MAX_REQS];
    int any_last, any_work;
};

static void snapshot(const struct rig *r, struct pre *pr)
{
    int32_t n_running = 0;
    int waiting = 0, running_work = 0;
    memset(pr, 0, sizeof *pr);
    for (int i = 0; i < r->n_reqs; i++)
        n_running += sched_req_state(r->reqs[i]) == SCHED_RUNNING;
    for (int i = 0; i < r->n_reqs; i++) {
        int32_t n;
        enum sched_state state = sched_req_state(r->reqs[i]);
        sched_req_tokens(r->reqs[i], &n);
        pr->last[i] = state == SCHED_RUNNING && n - r->computed[i] == 1;
        pr->work[i] = (state == SCHED_RUNNING && n - r->computed[i] > 1) ||
                      state == SCHED_WAITING || state == SCHED_PREEMPTED;
        running_work |= state == SCHED_RUNNING && pr->work[i];
        waiting |= state != SCHED_RUNNING && pr->work[i];
        pr->any_last += pr->last[i];
    }
    pr->any_work = running_work || (waiting && n_running < r->cfg.max_num_seqs);
}

/* With check_progress (a cache big enough that nothing is preempted): every
 * request that had one token left is in the step with it (no decode waits),
 * and when prompt work was left and the budget had room past the decodes,
 * the step advances some of it. */
static void check_progress(struct rig *r, const struct pre *pr, const struct sched_step *st)
{
    int in_step[MAX_REQS] = {0};
    int advanced = 0;

    assert_int_equal(st->n_preempted, 0);
    for (int32_t i = 0; i < st->batch.n_seqs; i++)
        in_step[req_index(r, st->reqs[i])] = st->batch.seqs[i].n_tokens;
    for (int i = 0; i < r->n_reqs; i++) {
        if (pr->last[i])
            assert_int_equal(in_step[i], 1);
        advanced |= pr->work[i] && in_step[i] > 0;
    }
    if (pr->any_work && pr->any_last < r->cfg.max_num_batched_tokens)
        assert_true(advanced);
}

/* One step with the per-step assertions; returns the step's sequence count. */
static int32_t step(struct rig *r, struct sched_step *st)
{
    int32_t next[64];
    struct mf_err err;
    int seen_prefill = 0, n_last = 0;
    int32_t prompt_tokens = 0;
    struct pre pr;

    if (r->check_progress)
        snapshot(r, &pr);
    sched_schedule(r->s, st);
    check(r->s);
    assert_true(st->n_tokens <= r->cfg.max_num_batched_tokens);
    assert_true(st->batch.n_seqs <= r->cfg.max_num_seqs);
    for (int32_t i = 0; i < st->batch.n_seqs; i++) {
        const struct batch_seq *q = &st->batch.seqs[i];
        int decode = is_decode(st, i);
        assert_true(q->n_blocks * KV_BLOCK_TOKENS >= q->n_past + q->n_tokens);
        if (r->check_order)
            assert_false(decode && seen_prefill); /* decodes first */
        seen_prefill |= !decode;
        r->mixed_steps +=
            decode && i == 0 && st->batch.n_seqs > 1 && !is_decode(st, st->batch.n_seqs - 1);
        if (is_last_token(st, i))
            n_last++;
        else
            prompt_tokens += q->n_tokens;
    }
    /* beside a decode, prompts share at most max_prefill_tokens */
    if (n_last && r->cfg.max_prefill_tokens && st->n_preempted == 0)
        assert_true(prompt_tokens <= r->cfg.max_prefill_tokens);
    if (n_last && prompt_tokens > r->max_prefill_beside)
        r->max_prefill_beside = prompt_tokens;
    if (r->check_progress)
        check_progress(r, &pr, st);
    if (st->n_tokens > r->max_step_tokens)
        r->max_step_tokens = st->n_tokens;
    if (st->batch.n_seqs == 0)
        return 0;
    if (fake_model_step(&r->m, &st->batch, next, &err))
        fail_msg("fake model: %s", err.msg);
    for (int32_t i = 0; i < st->batch.n_seqs; i++)
        r->computed[req_index(r, st->reqs[i])] =
            st->batch.seqs[i].n_past + st->batch.seqs[i].n_tokens;
    assert_int_equal(sched_update(r->s, next, st->n_logits, &err), 0);
    check(r->s);
    r->steps++;
    return st->batch.n_seqs;
}

static void drive(struct rig *r, int32_t max_steps)
{
    struct sched_step st;
    while (sched_has_work(r->s)) {
        assert_true(r->steps < max_steps);
        step(r, &st);
    }
}

/* Every finished-by-length request produced exactly its solo output. */
static void assert_solo_outputs(const struct rig *r)
{
    static const struct batch_lora base;
    for (int i = 0; i < r->n_reqs; i++) {
        int32_t want[256];
        int32_t n;
        const int32_t *got = sched_req_tokens(r->reqs[i], &n);
        int32_t nw =
            fake_reference(r->prompts[i], r->n_prompt[i], r->max_tokens[i], &base, VOCAB, -1, want);
        assert_int_equal(sched_req_state(r->reqs[i]), SCHED_FINISHED);
        assert_int_equal(sched_req_finish(r->reqs[i]), SCHED_FINISH_LENGTH);
        assert_int_equal(n - r->n_prompt[i], nw);
        assert_memory_equal(got + r->n_prompt[i], want, (size_t)nw * sizeof want[0]);
    }
}

static void test_budget_and_decodes_first(void **state)
{
    struct rig r;
    rig_open(&r, 256, 8, 64, 16);
    r.check_order = 1;
    for (int i = 0; i < 6; i++)
        assert_int_equal(submit(&r, 50 + 20 * i, 100 + i, 12, 0), 0);
    drive(&r, 200);
    assert_int_equal(r.max_step_tokens, 64);
    assert_true(r.mixed_steps > 0);
    assert_int_equal(sched_n_preemptions(r.s), 0);
    assert_solo_outputs(&r);
    rig_close(&r);
}

static void test_chunked_prefill_splits_exactly(void **state)
{
    static const int32_t past[] = {0, 32, 64, 96};
    static const int32_t len[] = {32, 32, 32, 4};
    struct rig r;
    struct sched_step st;

    rig_open(&r, 64, 4, 32, 4);
    assert_int_equal(submit(&r, 100, 1, 3, 0), 0);
    for (int k = 0; k < 4; k++) {
        assert_int_equal(step(&r, &st), 1);
        assert_int_equal(st.batch.seqs[0].n_past, past[k]);
        assert_int_equal(st.batch.seqs[0].n_tokens, len[k]);
        assert_int_equal(st.batch.seqs[0].want_logits, k == 3);
        assert_int_equal(st.n_logits, k == 3);
    }
    assert_int_equal(sched_req_n_output(r.reqs[0]), 1);
    /* A second prompt is admitted into what the first one's decode leaves. */
    assert_int_equal(submit(&r, 40, 2, 2, 0), 0);
    assert_int_equal(step(&r, &st), 2);
    assert_int_equal(st.batch.seqs[0].n_tokens, 1);
    assert_int_equal(st.batch.seqs[1].n_tokens, 31);
    assert_int_equal(st.n_tokens, 32);
    drive(&r, 20);
    assert_solo_outputs(&r);
    rig_close(&r);
}

static void test_max_num_seqs(void **state)
{
    struct rig r;
    rig_open(&r, 256, 3, 512, 16);
    for (int i = 0; i < 8; i++)
        assert_int_equal(submit(&r, 20, 10 + i, 5, 0), 0);
    drive(&r, 100);
    assert_int_equal(r.m.max_batch, 3);
    assert_solo_outputs(&r);
    rig_close(&r);
}

/* 10 blocks, three requests that each grow to 7: the cache can't hold
 * them, the newest is preempted, and all still produce their solo output. */
static void test_preempts_newest_and_completes(void **state)
{
    struct rig r;
    struct sched_step st;
    int32_t first_victim = -1;

    rig_open(&r, 10, 8, 256, 8);
    for (int i = 0; i < 3; i++)
        assert_int_equal(submit(&r, 40, 20 + i, 60, 0), 0);
    while (sched_has_work(r.s)) {
        assert_true(r.steps < 1000);
        step(&r, &st);
        for (int i = 0; i < 3 && first_victim < 0 && st.n_preempted; i++)
            if (sched_req_n_preemptions(r.reqs[i]) > 0)
                first_victim = i;
    }
    assert_int_equal(first_victim, 2); /* the newest */
    assert_true(sched_n_preemptions(r.s) >= 2);
    assert_int_equal(sched_req_n_preemptions(r.reqs[0]), 0); /* the oldest never */
    assert_solo_outputs(&r);
    rig_close(&r);
}

/* A preempted request recomputes its prefix from the cache when it can. */
static void test_recompute_hits_prefix_cache(void **state)
{
    struct rig r;
    struct kv_stats st;

    rig_open(&r, 12, 8, 512, 8);
    assert_int_equal(submit(&r, 64, 30, 100, 0), 0);
    assert_int_equal(submit(&r, 64, 31, 40, 0), 0);
    drive(&r, 1000);
    kv_get_stats(r.kv, &st);
    assert_true(sched_req_n_preemptions(r.reqs[1]) > 0);
    assert_true(st.prefix_hits > 0);
    assert_solo_outputs(&r);
    rig_close(&r);
}

static void test_cancel_frees_blocks(void **state)
{
    struct rig r;
    struct sched_step st;
    struct kv_stats ks;
    int32_t next[8] = {0};
    struct mf_err err;

    rig_open(&r, 64, 8, 256, 8);
    assert_int_equal(submit(&r, 40, 1, 50, 0), 0);
    assert_int_equal(submit(&r, 40, 2, 50, 0), 0);
    step(&r, &st);
    step(&r, &st);
    sched_finish(r.s, r.reqs[0], SCHED_FINISH_CANCELLED);
    check(r.s);
    kv_get_stats(r.kv, &ks);
    assert_int_equal(ks.blocks_used, 3); /* only request 1's */
    /* Cancel in the middle of a step: the update skips it. */
    sched_schedule(r.s, &st);
    assert_int_equal(st.batch.n_seqs, 1);
    assert_int_equal(fake_model_step(&r.m, &st.batch, next, &err), 0);
    sched_finish(r.s, r.reqs[1], SCHED_FINISH_CANCELLED);
    assert_int_equal(sched_update(r.s, next, st.n_logits, &err), 0);
    check(r.s);
    /* Cancel while waiting. */
    assert_int_equal(submit(&r, 10, 3, 5, 0), 0);
    sched_finish(r.s, r.reqs[2], SCHED_FINISH_CANCELLED);
    check(r.s);
    assert_false(sched_has_work(r.s));
    kv_get_stats(r.kv, &ks);
    assert_int_equal(ks.blocks_used, 0);
    for (int i = 0; i < 3; i++)
        assert_int_equal(sched_req_finish(r.reqs[i]), SCHED_FINISH_CANCELLED);
    rig_close(&r);
}

static void test_oversize_rejected(void **state)
{
    struct rig r;
    struct sched_submit in = {0};
    struct sched_req *q = NULL;
    struct mf_err err;

    rig_open(&r, 4, 4, 64, 4); /* 64 tokens of cache: the context clamps to it */
    assert_int_equal(submit(&r, 64, 1, 1, 0), MF_ERANGE);
    assert_int_equal(submit(&r, 60, 1, 10, 0), MF_ERANGE);
    in.prompt = r.prompts[0];
    in.n_prompt = 60;
    in.max_tokens = 10;
    assert_int_equal(sched_submit(r.s, &in, &q, &err), MF_ERANGE);
    assert_null(q);
    assert_non_null(strstr(err.msg, "exceeds the context of 64 tokens"));
    in.n_prompt = 0;
    assert_int_equal(sched_submit(r.s, &in, &q, &err), MF_EINVAL);
    /* max_tokens 0: whatever the context leaves. */
    assert_int_equal(submit(&r, 10, 2, 0, 0), 0);
    r.max_tokens[0] = 54;
    drive(&r, 100);
    assert_int_equal(sched_req_n_output(r.reqs[0]), 54);
    assert_solo_outputs(&r);
    rig_close(&r);
}

static void test_overload(void **state)
{
    struct rig r;
    struct sched_step st;
    struct sched_submit in = {0};
    struct sched_req *q = NULL;
    struct mf_err err;

    rig_open(&r, 64, 1, 64, 3);
    for (int i = 0; i < 3; i++)
        assert_int_equal(submit(&r, 10, i, 4, 0), 0);
    in.prompt = r.prompts[0];
    in.n_prompt = 10;
    assert_int_equal(sched_submit(r.s, &in, &q, &err), MF_EBUSY);
    assert_non_null(strstr(err.msg, "overloaded"));
    step(&r, &st); /* one admitted: room again */
    assert_int_equal(submit(&r, 10, 9, 4, 0), 0);
    drive(&r, 100);
    assert_solo_outputs(&r);
    rig_close(&r);
}

static void test_priority_order_and_victim(void **state)
{
    struct rig r;
    struct sched_step st;

    rig_open(&r, 256, 1, 64, 8);
    assert_int_equal(submit(&r, 10, 1, 2, 5), 0);
    assert_int_equal(submit(&r, 10, 2, 2, 1), 0);
    assert_int_equal(submit(&r, 10, 3, 2, 1), 0);
    step(&r, &st);
    assert_ptr_equal(st.reqs[0], r.reqs[1]); /* best priority, then FCFS */
    drive(&r, 100);
    assert_solo_outputs(&r);
    rig_close(&r);

    /* Out of blocks: the lower-priority request goes even though older. */
    rig_open(&r, 6, 4, 256, 8);
    assert_int_equal(submit(&r, 30, 4, 60, 9), 0);
    assert_int_equal(submit(&r, 30, 5, 60, 0), 0);
    drive(&r, 1000);
    assert_true(sched_req_n_preemptions(r.reqs[0]) > 0);
    assert_int_equal(sched_req_n_preemptions(r.reqs[1]), 0);
    assert_solo_outputs(&r);
    rig_close(&r);
}

static void test_paused_is_skipped(void **state)
{
    struct rig r;
    struct sched_step st;

    rig_open(&r, 64, 4, 64, 8);
    assert_int_equal(submit(&r, 10, 1, 5, 0), 0);
    assert_int_equal(submit(&r, 10, 2, 5, 0), 0);
    sched_set_paused(r.s, r.reqs[0], 1);
    step(&r, &st);
    assert_int_equal(st.batch.n_seqs, 1);
    assert_ptr_equal(st.reqs[0], r.reqs[1]);
    drive(&r, 100);
    assert_int_equal(sched_req_state(r.reqs[0]), SCHED_WAITING);
    assert_int_equal(sched_req_state(r.reqs[1]), SCHED_FINISHED);
    sched_set_paused(r.s, r.reqs[0], 0);
    assert_true(sched_has_work(r.s));
    drive(&r, 100);
    assert_solo_outputs(&r);
    rig_close(&r);
}

/* Many requests with shared prefixes through a small cache, 1-token budget
 * corner included: everything completes with its solo output. */
static void test_mixed_load(void **state)
{
    static const int32_t budgets[] = {1, 7, 48, 1000};
    for (int b = 0; b < 4; b++) {
        struct rig r;
        rig_open(&r, 24, 5, budgets[b], 16);
        for (int i = 0; i < 12; i++)
            assert_int_equal(submit(&r, 17 + (i * 13) % 60, i % 3, 5 + i % 20, 0), 0);
        drive(&r, 20000);
        assert_solo_outputs(&r);
        rig_close(&r);
    }
}

/* Long prompts arriving while short ones decode: every decode keeps its
 * token each step, the prompts share at most max_prefill_tokens a step and
 * still advance every step, and all outputs equal their solo runs. */
static void test_prefill_beside_decode(void **state)
{
    struct rig r;
    struct sched_step st;
    int32_t steps_before;

    rig_open_prefill(&r, 512, 8, 256, 16, 32);
    r.check_order = 1;
    r.check_progress = 1;
    for (int i = 0; i < 4; i++)
        assert_int_equal(submit(&r, 10, 40 + i, 60, 0), 0);
    step(&r, &st); /* four 10-token prompts: 40 tokens, no decode yet */
    assert_int_equal(st.n_tokens, 40);
    for (int k = 0; k < 3; k++)
        step(&r, &st);
    assert_int_equal(submit(&r, 200, 50, 20, 0), 0);
    assert_int_equal(submit(&r, 150, 51, 20, 0), 0);
    steps_before = r.steps;
    /* 350 prompt tokens, 32 a step beside the four decodes: 11 steps */
    while (sched_req_n_output(r.reqs[5]) == 0)
        step(&r, &st);
    assert_int_equal(r.steps - steps_before, 11);
    assert_int_equal(r.max_prefill_beside, 32);
    drive(&r, 500);
    assert_solo_outputs(&r);
    rig_close(&r);
}

/* With no decode in the step, a prompt takes the whole budget. */
static void test_prefill_whole_budget_alone(void **state)
{
    struct rig r;
    struct sched_step st;
    struct mf_err err;

    rig_open_prefill(&r, 64, 4, 256, 4, 16);
    assert_int_equal(submit(&r, 200, 1, 3, 0), 0);
    assert_int_equal(step(&r, &st), 1);
    assert_int_equal(st.batch.seqs[0].n_tokens, 200);
    /* the next prompt goes beside the first one's decode: 16 tokens */
    assert_int_equal(submit(&r, 100, 2, 3, 0), 0);
    assert_int_equal(step(&r, &st), 2);
    assert_int_equal(st.batch.seqs[0].n_tokens, 1);
    assert_int_equal(st.batch.seqs[1].n_tokens, 16);
    drive(&r, 100);
    assert_solo_outputs(&r);
    rig_close(&r);

    struct sched_config bad = {.max_num_seqs = 1,
                               .max_num_batched_tokens = 8,
                               .max_model_len = 64,
                               .max_waiting = 1,
                               .max_prefill_tokens = -1};
    struct kv_config kc = {.n_blocks = 8};
    struct kv_cache *kv;
    struct sched *s = NULL;
    assert_int_equal(kv_open(&kv, &kc, &err), 0);
    assert_int_equal(sched_open(&s, &bad, kv, &err), MF_ERANGE);
    assert_null(s);
    assert_non_null(strstr(err.msg, "max_prefill_tokens"));
    kv_close(kv);
}

/* Random arrivals under several caps: the progress checks hold every step. */
static void test_prefill_cap_random(void **state)
{
    static const int32_t caps[] = {0, 1, 5, 48};
    uint64_t x = 12345;
    for (int c = 0; c < 4; c++) {
        struct rig r;
        struct sched_step st;
        rig_open_prefill(&r, 1024, 6, 64, 16, caps[c]);
        r.check_progress = 1;
        for (int i = 0; i < MAX_REQS; i++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            assert_int_equal(
                submit(&r, 1 + (int32_t)(x >> 33) % 150, i, 1 + (int32_t)(x >> 50) % 30, 0), 0);
            for (int k = (int)(x >> 60) % 4; k > 0; k--)
                step(&r, &st);
        }
        drive(&r, 5000);
        assert_solo_outputs(&r);
        rig_close(&r);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_budget_and_decodes_first),
        cmocka_unit_test(test_chunked_prefill_splits_exactly),
        cmocka_unit_test(test_max_num_seqs),
        cmocka_unit_test(test_preempts_newest_and_completes),
        cmocka_unit_test(test_recompute_hits_prefix_cache),
        cmocka_unit_test(test_cancel_frees_blocks),
        cmocka_unit_test(test_oversize_rejected),
        cmocka_unit_test(test_overload),
        cmocka_unit_test(test_priority_order_and_victim),
        cmocka_unit_test(test_paused_is_skipped),
        cmocka_unit_test(test_mixed_load),
        cmocka_unit_test(test_prefill_beside_decode),
        cmocka_unit_test(test_prefill_whole_budget_alone),
        cmocka_unit_test(test_prefill_cap_random),
    };
    return cmocka_run_group_tests_name("sched", tests, NULL, NULL);
}
