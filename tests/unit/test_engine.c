/*
 * test_engine.c: unit tests for runtime/engine/engine.c over the paged fake model
 * (tests/unit/fake_model.c): batching invariance (concurrent greedy requests
 * give exactly their solo tokens), prefix-cache hit counts, preemption under
 * a cache too small for the load, cancellation and release mid-stream,
 * backpressure and the stall cut-off, overload and oversize refusals, model
 * and sampler failures, metrics, and many threads submitting and cancelling
 * at once. Every test ends with no KV block in use and engine_check clean.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <pthread.h>
#include <unistd.h>

#include "runtime/engine/engine.h"
#include "text/tokenizer.h"
#include "tests/unit/fake_model.h"

#define VOCAB 512
#define EOS 7
#define MAX_OUT 256

static const int32_t eos_ids[] = {EOS};

struct rig {
    struct engine *e;     /* the engine under test */
    struct fake_model fm; /* its model */
};

static int fake_step(void *ctx, struct batch *b, struct mf_err *err)
{
    return fake_model_step(ctx, b, NULL, err);
}

static struct engine_config config(int32_t blocks, int32_t seqs, int32_t budget)
{
    struct engine_config c = {0};
    c.sched.max_num_seqs = seqs;
    c.sched.max_num_batched_tokens = budget;
    c.sched.max_model_len = 1024;
    c.sched.max_waiting = 64;
    c.n_kv_blocks = blocks;
    return c;
}

static void rig_open_with(struct rig *r, const struct engine_config *c,
                          const struct engine_sampler *sampler)
{
    struct engine_model m = {
        .n_vocab = VOCAB, .eos = eos_ids, .n_eos = 1, .n_loras = 2, .step = fake_step};
    struct mf_err err;
    assert_int_equal(fake_model_init(&r->fm, c->n_kv_blocks, 1024, VOCAB), 0);
    m.ctx = &r->fm;
    if (engine_open(c, &m, sampler, &r->e, &err))
        fail_msg("engine_open: %s", err.msg);
}

static void rig_open(struct rig *r, int32_t blocks, int32_t seqs, int32_t budget)
{
    struct engine_config c = config(blocks, seqs, budget);
    rig_open_with(r, &c, NULL);
}

/* No request left, no block in use, every invariant holds. */
static void assert_idle(struct engine *e)
{
    struct engine_metrics m;
    struct mf_err err;
    if (engine_check(e, &err))
        fail_msg("engine_check: %s", err.msg);
    engine_metrics(e, &m);
    assert_int_equal(m.n_running, 0);
    assert_int_equal(m.n_waiting, 0);
    assert_int_equal(m.kv.blocks_used, 0);
    assert_int_equal(m.kv.blocks_free + m.kv.blocks_cached, m.kv.blocks_total);
}

static void rig_close(struct rig *r)
{
    assert_idle(r->e);
    engine_close(r->e);
    fake_model_fini(&r->fm);
}

/* ------------------------------------------------ requests and consumers */

struct job {
    int32_t prompt[160];       /* the prompt */
    int32_t n_prompt;          /* its length */
    int32_t max_tokens;        /* output allowance */
    struct batch_lora lora;    /* adapters */
    int32_t out[MAX_OUT];      /* tokens received */
    int32_t n_out;             /* count */
    struct engine_summary sum; /* the final summary */
    int32_t ignore_eos;        /* passed through */
    int rc;                    /* submit result */
    int bad;                   /* a consumer-side failure (threads can't use cmocka) */
};

/* Prompt from seed: equal seeds give equal prefixes. */
static void job_init(struct job *j, int32_t n, int32_t seed, int32_t max_tokens, int32_t lora)
{
    memset(j, 0, sizeof *j);
    for (int32_t k = 0; k < n; k++)
        j->prompt[k] = (seed * 131 + k * 17) % VOCAB;
    j->n_prompt = n;
    j->max_tokens = max_tokens;
    if (lora >= 0) {
        j->lora.n = 1;
        j->lora.ids[0] = lora;
        j->lora.scales[0] = 1.0f;
    }
}

static int submit_job(struct engine *e, struct job *j, uint64_t *id)
{
    struct engine_request rq = {.prompt = j->prompt,
                                .n_prompt = j->n_prompt,
                                .max_tokens = j->max_tokens,
                                .lora = j->lora,
                                .ignore_eos = j->ignore_eos};
    struct mf_err err;
    j->rc = engine_submit(e, &rq, id, &err);
    return j->rc;
}

/* Reads id to its final event (at most limit tokens, then stops reading). */
static int consume(struct engine *e, uint64_t id, struct job *j, int32_t limit)
{
    for (;;) {
        struct engine_event ev;
        struct mf_err err;
        if (j->n_out >= limit)
            return 1; /* stopped reading on purpose */
        if (engine_next(e, id, 10000, &ev, &j->sum, &err)) {
            j->bad = 1;
            return 0;
        }
        if (ev.token >= 0 && j->n_out < MAX_OUT)
            j->out[j->n_out++] = ev.token;
        if (ev.finish != SCHED_FINISH_NONE)
            return 0;
    }
}

/* What the job must produce alone. */
static int32_t solo(const struct job *j, int32_t *want)
{
    return fake_reference(j->prompt, j->n_prompt, j->max_tokens, &j->lora, VOCAB,
                          j->ignore_eos ? -1 : EOS, want);
}

static void assert_solo(const struct job *j)
{
    int32_t want[MAX_OUT];
    int32_t n = solo(j, want);
    assert_int_equal(j->rc, 0);
    assert_false(j->bad);
    assert_int_equal(j->n_out, n);
    assert_memory_equal(j->out, want, (size_t)n * sizeof want[0]);
    assert_int_equal(j->sum.n_output, n);
    assert_int_equal(j->sum.finish, want[n - 1] == EOS && !j->ignore_eos ? SCHED_FINISH_STOP
                                                                         : SCHED_FINISH_LENGTH);
}

struct worker {
    struct engine *e; /* shared engine */
    struct job *j;    /* this thread's job */
};

static void *run_job(void *arg)
{
    struct worker *w = arg;
    uint64_t id;
    if (submit_job(w->e, w->j, &id) == 0)
        consume(w->e, id, w->j, MAX_OUT);
    return NULL;
}

/* Runs jobs[0..n) on one thread each, all at once. */
static void run_concurrently(struct engine *e, struct job *jobs, int n)
{
    pthread_t th[32];
    struct worker w[32];
    assert_true(n <= 32);
    for (int i = 0; i < n; i++) {
        w[i].e = e;
        w[i].j = &jobs[i];
        assert_int_equal(pthread_create(&th[i], NULL, run_job, &w[i]), 0);
    }
    for (int i = 0; i < n; i++)
        pthread_join(th[i], NULL);
}

/* ------------------------------------------------ tests */

static void make_mix(struct job *jobs, int n)
{
    for (int i = 0; i < n; i++)
        job_init(&jobs[i], 5 + (i * 37) % 150, i % 4, 1 + (i * 53) % 120, i % 3 - 1);
}

/* N concurrent greedy requests give exactly the tokens each gives alone
 * (through a fresh engine, and by the reference). */
static void test_batching_invariance(void **state)
{
    static struct job conc[16];
    static struct job alone[16];
    struct rig r;

    make_mix(conc, 16);
    make_mix(alone, 16);
    for (int i = 0; i < 16; i++) {
        uint64_t id;
        rig_open(&r, 64, 4, 256);
        assert_int_equal(submit_job(r.e, &alone[i], &id), 0);
        consume(r.e, id, &alone[i], MAX_OUT);
        assert_solo(&alone[i]);
        rig_close(&r);
    }
    rig_open(&r, 512, 8, 96);
    run_concurrently(r.e, conc, 16);
    for (int i = 0; i < 16; i++) {
        assert_solo(&conc[i]);
        assert_int_equal(conc[i].n_out, alone[i].n_out);
        assert_memory_equal(conc[i].out, alone[i].out, (size_t)conc[i].n_out * sizeof(int32_t));
    }
    assert_true(r.fm.max_batch > 1); /* they really were batched */
    rig_close(&r);
}

/* Requests sharing a 64-token system prompt reuse its four blocks. */
static void test_shared_prefix_hits_cache(void **state)
{
    struct rig r;
    struct job j[3];
    struct engine_metrics m;

    rig_open(&r, 64, 4, 256);
    for (int i = 0; i < 3; i++) {
        uint64_t id;
        job_init(&j[i], 74, 1, 5, -1);
        for (int32_t k = 64; k < 74; k++)
            j[i].prompt[k] = (k * 3 + i * 101) % VOCAB; /* distinct suffixes */
        assert_int_equal(submit_job(r.e, &j[i], &id), 0);
        consume(r.e, id, &j[i], MAX_OUT);
        assert_solo(&j[i]);
    }
    assert_int_equal(j[0].sum.n_cached, 0);
    assert_int_equal(j[1].sum.n_cached, 64);
    assert_int_equal(j[2].sum.n_cached, 64);
    engine_metrics(r.e, &m);
    assert_int_equal(m.kv.prefix_queries, 3 * 74);
    assert_int_equal(m.kv.prefix_hits, 2 * 64);
    /* every step's time is the host's or the model's, and both had some */
    assert_true(m.steps >= 3 * 5);
    assert_true(m.host_s > 0 && m.model_s > 0);
    assert_true(m.host_s + m.model_s < 60);
    rig_close(&r);
}

/* A cache far too small for the load: preemption, and every request still
 * completes with its solo tokens. */
static void test_small_cache_preempts_and_completes(void **state)
{
    static struct job jobs[12];
    struct rig r;
    struct engine_metrics m;

    for (int i = 0; i < 12; i++)
        job_init(&jobs[i], 40 + i, i, 100, -1);
    rig_open(&r, 24, 8, 128);
    run_concurrently(r.e, jobs, 12);
    for (int i = 0; i < 12; i++)
        assert_solo(&jobs[i]);
    engine_metrics(r.e, &m);
    assert_true(m.preemptions > 0);
    rig_close(&r);
}

static void test_cancel_and_release_mid_stream(void **state)
{
    struct rig r;
    struct job a;
    struct job b;
    struct job c;
    uint64_t ida;
    uint64_t idb;
    uint64_t idc;
    struct mf_err err;
    struct engine_event ev;
    int32_t want[MAX_OUT];

    rig_open(&r, 64, 1, 64); /* one sequence at a time: c waits behind a */
    job_init(&a, 20, 1, 200, -1);
    job_init(&b, 20, 2, 200, -1);
    job_init(&c, 20, 3, 200, -1);
    a.ignore_eos = 1; /* only the cancel may end it, whatever the timing */
    assert_int_equal(submit_job(r.e, &a, &ida), 0);
    assert_int_equal(consume(r.e, ida, &a, 5), 1);
    assert_int_equal(submit_job(r.e, &c, &idc), 0);
    assert_int_equal(engine_cancel(r.e, idc, &err), 0); /* while waiting */
    assert_int_equal(engine_cancel(r.e, ida, &err), 0); /* while streaming */
    assert_int_equal(engine_cancel(r.e, ida, &err), 0); /* twice is fine */
    consume(r.e, ida, &a, MAX_OUT);
    assert_int_equal(a.sum.finish, SCHED_FINISH_CANCELLED);
    assert_true(a.n_out < 200); /* backpressure capped it near 5 + queue size */
    solo(&a, want);
    assert_memory_equal(a.out, want, (size_t)a.n_out * sizeof want[0]);
    consume(r.e, idc, &c, MAX_OUT);
    assert_int_equal(c.sum.finish, SCHED_FINISH_CANCELLED);
    assert_int_equal(c.n_out, 0);
    assert_int_equal(engine_next(r.e, ida, 0, &ev, NULL, &err), MF_ENOTFOUND);
    assert_int_equal(engine_cancel(r.e, ida, &err), MF_ENOTFOUND);

    assert_int_equal(submit_job(r.e, &b, &idb), 0);
    consume(r.e, idb, &b, 3);
    assert_int_equal(engine_release(r.e, idb, &err), 0);
    assert_int_equal(engine_next(r.e, idb, 0, &ev, NULL, &err), MF_ENOTFOUND);
    rig_close(&r);
}

/* A consumer that stops reading: its request pauses (others go on) and is
 * cut off with an error after stall_ms. */
static void test_slow_consumer_paused_then_cut(void **state)
{
    struct engine_config c = config(64, 4, 64);
    struct rig r;
    struct job slow;
    struct job fast;
    uint64_t ids;
    uint64_t idf;

    c.queue_events = 4;
    c.stall_ms = 100;
    rig_open_with(&r, &c, NULL);
    job_init(&slow, 10, 1, 200, -1);
    job_init(&fast, 10, 2, 60, -1);
    slow.ignore_eos = 1;
    assert_int_equal(submit_job(r.e, &slow, &ids), 0);
    assert_int_equal(submit_job(r.e, &fast, &idf), 0);
    consume(r.e, idf, &fast, MAX_OUT); /* finishes although slow is not read */
    assert_solo(&fast);
    usleep(300 * 1000);
    consume(r.e, ids, &slow, MAX_OUT);
    assert_int_equal(slow.sum.finish, SCHED_FINISH_ERROR);
    assert_int_equal(slow.n_out, 3); /* queue of 4, one slot kept for the end */
    assert_non_null(strstr(slow.sum.err.msg, "read nothing"));
    rig_close(&r);
}

static void test_overload_and_oversize(void **state)
{
    struct engine_config c = config(16, 1, 64);
    struct rig r;
    struct job j[4];
    uint64_t id[4];
    struct mf_err err;
    struct engine_request rq = {0};
    int32_t bad_tok[2] = {1, VOCAB};

    c.sched.max_waiting = 2;
    rig_open_with(&r, &c, NULL);
    for (int i = 0; i < 4; i++)
        job_init(&j[i], 10, i, 100, -1);
    j[0].ignore_eos = 1; /* it must stay running */
    assert_int_equal(submit_job(r.e, &j[0], &id[0]), 0);
    consume(r.e, id[0], &j[0], 1); /* now running (and soon paused: nobody reads) */
    assert_int_equal(submit_job(r.e, &j[1], &id[1]), 0);
    assert_int_equal(submit_job(r.e, &j[2], &id[2]), 0);
    rq.prompt = j[3].prompt;
    rq.n_prompt = 10;
    assert_int_equal(engine_submit(r.e, &rq, &id[3], &err), MF_EBUSY);
    assert_non_null(strstr(err.msg, "overloaded"));
    {
        int32_t big[300] = {0};
        rq.prompt = big;
        rq.n_prompt = 256; /* the cache holds 256 tokens: no room to generate */
        assert_int_equal(engine_submit(r.e, &rq, &id[3], &err), MF_ERANGE);
        rq.n_prompt = 100;
        rq.max_tokens = 200;
        assert_int_equal(engine_submit(r.e, &rq, &id[3], &err), MF_ERANGE);
        assert_non_null(strstr(err.msg, "exceeds the context of 256 tokens"));
        rq.max_tokens = 0;
    }
    rq.prompt = bad_tok;
    rq.n_prompt = 2;
    assert_int_equal(engine_submit(r.e, &rq, &id[3], &err), MF_EINVAL);
    rq.prompt = j[3].prompt;
    rq.lora.n = 1;
    rq.lora.ids[0] = 2; /* the model has adapters 0 and 1 */
    rq.lora.scales[0] = 1.0f;
    assert_int_equal(engine_submit(r.e, &rq, &id[3], &err), MF_EINVAL);
    assert_non_null(strstr(err.msg, "the model has 2 adapters"));
    for (int i = 0; i < 3; i++)
        assert_int_equal(engine_release(r.e, id[i], &err), 0);
    rig_close(&r);
}

static void test_model_failure_fails_its_requests(void **state)
{
    struct rig r;
    struct job a;
    struct job b;
    uint64_t ida;
    uint64_t idb;

    rig_open(&r, 64, 4, 64);
    r.fm.fail_step = 3;
    job_init(&a, 10, 1, 20, -1);
    job_init(&b, 10, 2, 20, -1);
    assert_int_equal(submit_job(r.e, &a, &ida), 0);
    consume(r.e, ida, &a, MAX_OUT);
    assert_int_equal(a.sum.finish, SCHED_FINISH_ERROR);
    assert_int_equal(a.n_out, 2);
    assert_non_null(strstr(a.sum.err.msg, "injected failure"));
    assert_int_equal(submit_job(r.e, &b, &idb), 0); /* later steps work again */
    consume(r.e, idb, &b, MAX_OUT);
    assert_solo(&b);
    rig_close(&r);
}

/* A sampler that shifts the greedy choice by its params, and a stop hook. */
struct shift {
    int32_t by;      /* tokens to add to the argmax */
    int *n_freed;    /* counts free_params calls */
    int32_t seen;    /* history tokens seen so far */
    int bad_history; /* n_new did not continue from seen */
};

static int shift_sample(void *ctx, void *params, float *logits, int32_t n_vocab,
                        const int32_t *history, int32_t n_history, int32_t n_new,
                        struct sampler_result *res, struct mf_err *err)
{
    struct shift *s = params;
    int32_t best = 0;
    if (s->by < 0)
        return mf_err_set(err, MF_EINVAL, "bad sampling params");
    s->bad_history |= n_history - n_new != s->seen || n_new < 1;
    s->seen = n_history;
    for (int32_t i = 1; i < n_vocab; i++)
        if (logits[i] > logits[best])
            best = i;
    res->token = (best + s->by) % n_vocab;
    res->logprob = NAN;
    res->n_top = 0;
    return 0;
}

static void shift_free(void *ctx, void *params)
{
    (*((struct shift *)params)->n_freed)++;
}

static int stop_after_4(void *user, int32_t token)
{
    return ++*(int *)user >= 4;
}

static void test_sampler_params_and_stop_hook(void **state)
{
    struct engine_config c = config(64, 4, 64);
    struct engine_sampler smp = {.sample = shift_sample, .free_params = shift_free};
    int n_freed = 0;
    struct shift zero = {0, &n_freed, 0, 0};
    struct shift zero2 = {0, &n_freed, 0, 0};
    struct shift bad = {-1, &n_freed, 0, 0};
    int seen = 0;
    struct rig r;
    struct job j[3];
    uint64_t id;
    struct engine_request rq = {.n_prompt = 12, .max_tokens = 30};
    struct mf_err err;

    rig_open_with(&r, &c, &smp);
    for (int i = 0; i < 3; i++)
        job_init(&j[i], 12, 5, 30, -1);
    rq.prompt = j[0].prompt;
    rq.sampling = &zero;
    assert_int_equal(engine_submit(r.e, &rq, &id, &err), 0);
    consume(r.e, id, &j[0], MAX_OUT);
    assert_solo(&j[0]); /* shift 0 is greedy */
    assert_false(zero.bad_history);
    assert_int_equal(zero.seen, 12 + j[0].n_out - 1); /* the last token is never fed */
    rq.sampling = &zero2;
    rq.on_token = stop_after_4;
    rq.user = &seen;
    assert_int_equal(engine_submit(r.e, &rq, &id, &err), 0);
    consume(r.e, id, &j[1], MAX_OUT);
    assert_int_equal(j[1].sum.finish, SCHED_FINISH_STOP);
    assert_int_equal(j[1].n_out, 4);
    assert_false(zero2.bad_history);
    rq.on_token = NULL;
    rq.sampling = &bad;
    assert_int_equal(engine_submit(r.e, &rq, &id, &err), 0);
    consume(r.e, id, &j[2], MAX_OUT);
    assert_int_equal(j[2].sum.finish, SCHED_FINISH_ERROR);
    assert_non_null(strstr(j[2].sum.err.msg, "bad sampling params"));
    assert_int_equal(n_freed, 3);
    rig_close(&r);
}

/* An SPM tokenizer over texts[0..n) with <unk>, <s>, </s> as ids 0, 1, 2. */
static struct tok *small_vocab(const struct tok_str *texts, const int32_t *types, uint32_t n)
{
    struct tok_desc d;
    struct tok *t;
    struct mf_err err;

    tok_desc_init(&d);
    d.model = "llama";
    d.tokens = texts;
    d.n_tokens = n;
    d.types = types;
    d.n_types = n;
    d.special[TOK_ID_UNK] = 0;
    d.special[TOK_ID_BOS] = 1;
    d.special[TOK_ID_EOS] = 2;
    if (tok_new(&d, &t, &err))
        fail_msg("tok_new: %s", err.msg);
    return t;
}

/* runtime/engine/sampler.h through engine_sampler_std: temperature 0 is the
 * greedy reference; logprobs reach the events. */
static void test_std_sampler_greedy_logprobs(void **state)
{
    struct engine_config c = config(64, 4, 64);
    struct sampler_params sp;
    struct engine_request rq = {.n_prompt = 15, .max_tokens = 20};
    struct rig r;
    struct job j;
    uint64_t id;
    struct mf_err err;
    int logprobs_ok = 1;
    struct sampler *smp;

    rig_open_with(&r, &c, &engine_sampler_std);
    job_init(&j, 15, 3, 20, -1);
    sampler_params_default(&sp);
    sp.temperature = 0;
    sp.repeat_penalty = 1;
    sp.logprobs = 1;
    sp.n_logprobs = 3;
    assert_int_equal(sampler_new(&smp, VOCAB, &sp, &err), 0);
    rq.sampling = smp;
    rq.prompt = j.prompt;
    assert_int_equal(engine_submit(r.e, &rq, &id, &err), 0);
    for (;;) {
        struct engine_event ev;
        assert_int_equal(engine_next(r.e, id, 10000, &ev, &j.sum, &err), 0);
        if (ev.token >= 0) {
            j.out[j.n_out++] = ev.token;
            logprobs_ok &= ev.logprob < 0 && ev.n_top == 3 && ev.top[0].token == ev.token &&
                           ev.top[0].logprob == ev.logprob;
        }
        if (ev.finish != SCHED_FINISH_NONE)
            break;
    }
    assert_true(logprobs_ok);
    assert_solo(&j);
    rig_close(&r);
}

/* Seeded random sampling: batched, squeezed into a cache that forces
 * preemption and recompute, every request draws what it draws alone. */
static void test_std_sampler_seeded_invariance(void **state)
{
    static struct job alone[8];
    static struct job together[8];
    struct engine_config c = config(64, 1, 512);
    struct rig r;
    struct engine_metrics m;
    struct mf_err err;

    for (int pass = 0; pass < 2; pass++) {
        struct job *jobs = pass ? together : alone;
        uint64_t ids[8];
        c = pass ? config(14, 8, 64) : config(64, 1, 512);
        rig_open_with(&r, &c, &engine_sampler_std);
        for (int i = 0; i < 8; i++) {
            struct sampler_params sp;
            struct engine_request rq = {.n_prompt = 30 + i, .max_tokens = 60};
            job_init(&jobs[i], 30 + i, i, 60, -1);
            sampler_params_default(&sp);
            sp.temperature = 1.0f;
            sp.top_k = 0;
            sp.top_p = 1.0f;
            sp.seed = 77 + (uint64_t)i;
            struct sampler *smp;
            assert_int_equal(sampler_new(&smp, VOCAB, &sp, &err), 0);
            rq.sampling = smp;
            rq.prompt = jobs[i].prompt;
            assert_int_equal(engine_submit(r.e, &rq, &ids[i], &err), 0);
        }
        for (int i = 0; i < 8; i++)
            consume(r.e, ids[i], &jobs[i], MAX_OUT);
        engine_metrics(r.e, &m);
        rig_close(&r);
    }
    assert_true(m.preemptions > 0);
    for (int i = 0; i < 8; i++) {
        assert_int_equal(together[i].n_out, alone[i].n_out);
        assert_memory_equal(together[i].out, alone[i].out,
                            (size_t)alone[i].n_out * sizeof(int32_t));
    }
}

/* Consumer-side text: tokens to UTF-8, cut at a stop string that spans
 * tokens, the stop string itself never shown. */
static void test_text_and_stop_strings(void **state)
{
    static const struct tok_str texts[] = {
        {"<unk>", 5},           {"<s>", 3}, {"</s>", 4}, {"\xe2\x96\x81Hello", 8},
        {"\xe2\x96\x81wor", 6}, {"ld", 2},  {"!", 1},    {"\xe2\x96\x81STOP", 7}};
    static const int32_t types[] = {TOK_TYPE_UNKNOWN, TOK_TYPE_CONTROL, TOK_TYPE_CONTROL,
                                    TOK_TYPE_NORMAL,  TOK_TYPE_NORMAL,  TOK_TYPE_NORMAL,
                                    TOK_TYPE_NORMAL,  TOK_TYPE_NORMAL};
    static const int32_t ids[] = {3, 4, 5, 6, 7, 2};
    static const char *const stops[] = {"ld!"};
    struct tok *t = small_vocab(texts, types, 8);
    struct engine_text et;
    struct mf_buf out;
    struct mf_err err;
    int hit = -1;

    mf_buf_init(&out, 1024);
    for (int with_stop = 0; with_stop < 2; with_stop++) {
        mf_buf_reset(&out);
        assert_int_equal(engine_text_init(&et, t, TOK_STRIP_SPACE, stops, (size_t)with_stop, &err),
                         0);
        for (int i = 0; i < 6; i++) {
            int rc = engine_text_feed(&et, ids[i], &out, &err);
            assert_true(rc >= 0);
            if (rc == 1 && hit < 0)
                hit = i;
        }
        assert_int_equal(engine_text_finish(&et, &out, &err), 0);
        assert_string_equal(out.data, with_stop ? "Hello wor" : "Hello world! STOP");
        engine_text_fini(&et);
    }
    assert_int_equal(hit, 3); /* the "!" token completes "ld!" */
    mf_buf_free(&out);
    tok_free(t);
}

static uint64_t hist_total(const struct engine_hist *h)
{
    uint64_t n = 0;
    for (int32_t i = 0; i <= h->n_bounds; i++)
        n += h->counts[i];
    return n;
}

static void test_metrics(void **state)
{
    struct rig r;
    struct job j[5];
    struct engine_metrics m;
    uint64_t gen = 0;
    uint64_t prompt = 0;
    uint64_t stops = 0;

    rig_open(&r, 128, 4, 64);
    for (int i = 0; i < 5; i++) {
        uint64_t id;
        job_init(&j[i], 10 + i, 40 + i, 8 + i, -1);
        assert_int_equal(submit_job(r.e, &j[i], &id), 0);
        consume(r.e, id, &j[i], MAX_OUT);
        assert_solo(&j[i]);
        gen += (uint64_t)j[i].n_out;
        prompt += (uint64_t)j[i].n_prompt;
        stops += j[i].sum.finish == SCHED_FINISH_STOP;
        assert_true(j[i].sum.ttft_s >= j[i].sum.queue_s && j[i].sum.e2e_s >= j[i].sum.ttft_s);
    }
    engine_metrics(r.e, &m);
    assert_int_equal(m.generation_tokens, gen);
    assert_int_equal(m.prompt_tokens, prompt);
    assert_int_equal(m.finished[SCHED_FINISH_LENGTH] + m.finished[SCHED_FINISH_STOP], 5);
    assert_int_equal(m.finished[SCHED_FINISH_STOP], stops);
    assert_int_equal(m.ttft.count, 5);
    assert_int_equal(m.queue.count, 5);
    assert_int_equal(m.e2e.count, 5);
    assert_int_equal(m.itl.count, gen - 5);
    assert_int_equal(hist_total(&m.ttft), 5);
    assert_int_equal(hist_total(&m.itl), gen - 5);
    assert_int_equal(m.ttft.n_bounds, 22);
    assert_true(m.steps > 0);
    assert_true(m.kv_usage == 0.0);
    rig_close(&r);
}

/* ------------------------------------------------ many threads */

struct chaos {
    struct engine *e; /* shared engine */
    uint64_t seed;    /* this thread's choices */
    int bad;          /* a wrong token or finish reason was seen */
    int done;         /* requests completed to the end */
};

/* One random request: read all, read some then cancel, or walk away. */
static void chaos_one(struct chaos *c, uint64_t x)
{
    static const int kinds = 3;
    struct job j;
    int32_t want[MAX_OUT];
    uint64_t id;
    struct mf_err err;
    int kind = (int)(x % kinds);
    int32_t n;

    job_init(&j, 4 + (int32_t)((x >> 8) % 90), (int32_t)((x >> 16) % 5),
             1 + (int32_t)((x >> 24) % 80), (int32_t)((x >> 32) % 3) - 1);
    if (submit_job(c->e, &j, &id)) {
        c->bad |= j.rc != MF_EBUSY; /* overload is the only acceptable refusal */
        return;
    }
    if (kind == 0) {
        consume(c->e, id, &j, MAX_OUT);
    } else if (consume(c->e, id, &j, (int32_t)((x >> 40) % 6))) {
        if (kind == 1) {
            c->bad |= engine_cancel(c->e, id, &err) != 0;
            consume(c->e, id, &j, MAX_OUT);
        } else {
            c->bad |= engine_release(c->e, id, &err) != 0;
            j.sum.finish = SCHED_FINISH_CANCELLED;
        }
    }
    n = solo(&j, want);
    c->bad |= j.bad || j.n_out > n || memcmp(j.out, want, (size_t)j.n_out * sizeof want[0]) != 0;
    if (j.sum.finish == SCHED_FINISH_LENGTH || j.sum.finish == SCHED_FINISH_STOP) {
        c->bad |= j.n_out != n;
        c->done++;
    } else {
        c->bad |= j.sum.finish != SCHED_FINISH_CANCELLED;
    }
}

static void *chaos_main(void *arg)
{
    struct chaos *c = arg;
    uint64_t x = c->seed;
    for (int i = 0; i < 25; i++) {
        x = x * 6364136223846793005u + 1442695040888963407u;
        chaos_one(c, x >> 11);
    }
    return NULL;
}

static void test_many_threads_submit_and_cancel(void **state)
{
    struct engine_config c = config(40, 6, 48);
    struct chaos ch[8];
    pthread_t th[8];
    struct rig r;
    int done = 0;

    c.kv_hash_bits = 3; /* collisions everywhere, on top of the rest */
    c.queue_events = 8;
    rig_open_with(&r, &c, NULL);
    for (int i = 0; i < 8; i++) {
        memset(&ch[i], 0, sizeof ch[i]);
        ch[i].e = r.e;
        ch[i].seed = 1000 + (uint64_t)i;
        assert_int_equal(pthread_create(&th[i], NULL, chaos_main, &ch[i]), 0);
    }
    for (int i = 0; i < 8; i++) {
        pthread_join(th[i], NULL);
        assert_false(ch[i].bad);
        done += ch[i].done;
    }
    assert_true(done > 0);
    rig_close(&r);
}

/* The consumer matched a stop string mid-stream: engine_stop ends it with
 * STOP; tokens already queued still arrive, all of them right. */
static void test_engine_stop_mid_stream(void **state)
{
    struct rig r;
    struct job a;
    uint64_t id;
    struct mf_err err;
    int32_t want[MAX_OUT];

    rig_open(&r, 64, 4, 64);
    job_init(&a, 20, 9, 200, -1);
    a.ignore_eos = 1;
    assert_int_equal(submit_job(r.e, &a, &id), 0);
    assert_int_equal(consume(r.e, id, &a, 3), 1);
    assert_int_equal(engine_stop(r.e, id, &err), 0);
    consume(r.e, id, &a, MAX_OUT);
    assert_int_equal(a.sum.finish, SCHED_FINISH_STOP);
    assert_true(a.n_out >= 3 && a.n_out < 200);
    solo(&a, want);
    assert_memory_equal(a.out, want, (size_t)a.n_out * sizeof want[0]);
    rig_close(&r);
}

/* The eos list comes from the tokenizer's end-of-generation set. */
static void test_eos_from_tokenizer(void **state)
{
    static const struct tok_str texts[] = {{"<unk>", 5},
                                           {"<s>", 3},
                                           {"</s>", 4},
                                           {"\xe2\x96\x81"
                                            "a",
                                            4},
                                           {"<|im_end|>", 10},
                                           {"b", 1}};
    static const int32_t types[] = {TOK_TYPE_UNKNOWN, TOK_TYPE_CONTROL, TOK_TYPE_CONTROL,
                                    TOK_TYPE_NORMAL,  TOK_TYPE_CONTROL, TOK_TYPE_NORMAL};
    struct tok *t = small_vocab(texts, types, 6);
    int32_t ids[4] = {-1, -1, -1, -1};

    assert_int_equal(engine_eos_from_tok(t, ids, 4), 2);
    assert_int_equal(ids[0], 2);
    assert_int_equal(ids[1], 4);
    assert_int_equal(engine_eos_from_tok(t, ids, 1), 2); /* counts past max */
    tok_free(t);
}

/* n_kv_blocks 0: the pool comes from MFC_KV_CACHE_GB and the block size. */
/* The logits buffer comes from the model's logits_alloc (mfc-serve: the
 * backend's pinned memory), grows through it, and goes back through
 * logits_free at close. */
struct alloc_rig {
    struct fake_model fm;
    int allocs, frees, outside; /* calls; steps whose logits lay elsewhere */
    void *last;                 /* the live allocation */
    size_t bytes;
};

static int alloc_step(void *ctx, struct batch *b, struct mf_err *err)
{
    struct alloc_rig *a = ctx;
    size_t need = 0;
    for (int32_t i = 0; i < b->n_seqs; i++)
        need += b->seqs[i].want_logits ? VOCAB * sizeof(float) : 0;
    if (need && (b->logits != a->last || need > a->bytes))
        a->outside++;
    return fake_model_step(&a->fm, b, NULL, err);
}

static void *alloc_logits(void *ctx, size_t bytes)
{
    struct alloc_rig *a = ctx;
    a->allocs++;
    a->last = malloc(bytes);
    a->bytes = bytes;
    return a->last;
}

static void free_logits(void *ctx, void *p)
{
    struct alloc_rig *a = ctx;
    if (p) {
        a->frees++;
        free(p);
    }
}

static void test_logits_memory(void **state)
{
    static struct job jobs[8];
    struct engine_config c = config(256, 8, 256);
    struct engine_model m = {.n_vocab = VOCAB,
                             .eos = eos_ids,
                             .n_eos = 1,
                             .n_loras = 2,
                             .step = alloc_step,
                             .logits_alloc = alloc_logits,
                             .logits_free = free_logits};
    struct alloc_rig a = {0};
    struct engine *e;
    struct mf_err err;

    assert_int_equal(fake_model_init(&a.fm, c.n_kv_blocks, 1024, VOCAB), 0);
    m.ctx = &a;
    assert_int_equal(engine_open(&c, &m, NULL, &e, &err), 0);
    uint64_t id;
    job_init(&jobs[0], 5, 1, 4, -1);
    assert_int_equal(submit_job(e, &jobs[0], &id), 0);
    consume(e, id, &jobs[0], MAX_OUT);
    make_mix(jobs, 8); /* then eight at once: the buffer grows */
    run_concurrently(e, jobs, 8);
    assert_idle(e);
    engine_close(e);
    assert_true(a.allocs >= 2);
    assert_int_equal(a.frees, a.allocs);
    assert_int_equal(a.outside, 0);
    fake_model_fini(&a.fm);
}

static void test_kv_budget_from_config(void **state)
{
    struct engine_config c = config(0, 4, 64);
    struct engine_model m = {.n_vocab = VOCAB, .step = fake_step};
    struct engine_metrics mt;
    struct engine *e;
    struct mf_err err;

    c.budget.cache_gb = "0.001";
    c.budget.bytes_per_block = 4096;
    assert_int_equal(engine_open(&c, &m, NULL, &e, &err), 0);
    engine_metrics(e, &mt);
    assert_int_equal(mt.kv.blocks_total, 262); /* 0.001 GiB = 1073741.8 bytes, / 4096 */
    engine_close(e);
    c.budget.cache_gb = "many";
    assert_int_equal(engine_open(&c, &m, NULL, &e, &err), MF_EINVAL);
    assert_null(e);
    assert_non_null(strstr(err.msg, "MFC_KV_CACHE_GB"));
}

/* ------------------------------------------------ drawing on the device */

#define DEV_SEQS 8 /* max_num_seqs of the device rigs */

/* A model that draws where its logits are, as the CUDA backend does: the
 * step keeps the logits when b->logits is NULL, and sample draws them by
 * the contract of sampler.h (here only without top_k, top_p and min_p),
 * giving every third row back to the host. */
struct dev_rig {
    struct fake_model fm;               /* the model */
    float dev_logits[DEV_SEQS * VOCAB]; /* the "device" copy of the step's logits */
    float tmp[VOCAB];                   /* one adjusted row */
    int null_logits, with_logits;       /* steps run without / with b->logits */
    int n_sample;                       /* sample calls */
    int fail_sample;                    /* the sample call (from 1) that fails, 0: none */
    int64_t n_rows, given_back;         /* rows drawn, rows given back */
};

static int dev_step(void *ctx, struct batch *b, struct mf_err *err)
{
    struct dev_rig *d = ctx;
    struct batch kept = *b;
    if (b->logits) {
        d->with_logits++;
        return fake_model_step(&d->fm, b, NULL, err);
    }
    d->null_logits++;
    kept.logits = d->dev_logits;
    return fake_model_step(&d->fm, &kept, NULL, err);
}

/* The device's answer for row under plan p, computed from the contract:
 * adjust, drop -inf and NaN, temperature, inverse CDF in id order. */
static int32_t ref_draw(const struct sampler_draw *p, const float *row, float *l)
{
    int32_t best = -1;
    float m;
    double z = 0, cum = 0;
    for (int32_t i = 0; i < VOCAB; i++)
        l[i] = isnan(row[i]) ? -INFINITY : row[i];
    for (int32_t k = 0; k < p->n_adjust; k++)
        l[p->adjust[k].token] = sampler_adjust_logit(p, &p->adjust[k], row[p->adjust[k].token]);
    for (int32_t i = 0; i < VOCAB; i++) {
        if (l[i] > -INFINITY && p->temperature > 0)
            l[i] /= p->temperature;
        if (l[i] > -INFINITY && (best < 0 || l[i] > l[best]))
            best = i;
    }
    if (best < 0 || p->temperature <= 0)
        return best;
    m = l[best];
    for (int32_t i = 0; i < VOCAB; i++)
        z += l[i] > -INFINITY ? expf(l[i] - m) : 0;
    for (int32_t i = 0; i < VOCAB; i++) {
        if (!(l[i] > -INFINITY))
            continue;
        cum += expf(l[i] - m);
        best = i;
        if (p->u * z < cum)
            break;
    }
    return best;
}

static int dev_sample(void *ctx, int32_t n, const struct sampler_draw *p, int32_t *ids,
                      float *logits, struct mf_err *err)
{
    struct dev_rig *d = ctx;
    if (++d->n_sample == d->fail_sample)
        return mf_err_set(err, MF_EIO, "fake device: injected sample failure");
    for (int32_t j = 0; j < n; j++) {
        const float *row = d->dev_logits + (size_t)j * VOCAB;
        if (p[j].top_k > 0 || p[j].top_p < 1 || p[j].min_p > 0)
            return mf_err_set(err, MF_EINVAL, "fake device: no top_k, top_p or min_p");
        ids[j] = -1;
        if (d->n_rows++ % 3 == 2) {
            memcpy(logits + (size_t)j * VOCAB, row, VOCAB * sizeof *logits);
            d->given_back++;
        } else {
            ids[j] = ref_draw(&p[j], row, d->tmp);
        }
    }
    return 0;
}

/* An engine over d; with_sample 0: the model has no sample hook. */
static struct engine *dev_open(struct dev_rig *d, int with_sample)
{
    struct engine_config c = config(256, DEV_SEQS, 256);
    struct engine_model m = {.ctx = d,
                             .n_vocab = VOCAB,
                             .eos = eos_ids,
                             .n_eos = 1,
                             .n_loras = 2,
                             .step = dev_step,
                             .sample = with_sample ? dev_sample : NULL};
    struct engine *e;
    struct mf_err err;
    memset(d, 0, sizeof *d);
    assert_int_equal(fake_model_init(&d->fm, c.n_kv_blocks, 1024, VOCAB), 0);
    if (engine_open(&c, &m, &engine_sampler_std, &e, &err))
        fail_msg("engine_open: %s", err.msg);
    return e;
}

static void dev_close(struct dev_rig *d, struct engine *e)
{
    assert_idle(e);
    engine_close(e);
    fake_model_fini(&d->fm);
}

/* Seeded params for job i: biases (one token twice, eos banned),
 * penalties on all but the last, the first greedy. */
static void dev_params(struct sampler_params *sp, struct sampler_bias *b, int i)
{
    sampler_params_default(sp);
    sp->temperature = i == 0 ? 0.0f : 0.6f + 0.3f * (float)i;
    sp->top_k = 0;
    sp->top_p = 1.0f;
    sp->repeat_penalty = 1.5f;
    sp->presence_penalty = 0.3f;
    sp->frequency_penalty = 0.1f;
    sp->repeat_last_n = 16;
    sp->seed = 100 + (uint64_t)i;
    b[0] = (struct sampler_bias){(i * 13) % VOCAB, 2.0f};
    b[1] = (struct sampler_bias){(i * 13) % VOCAB, 0.7f};
    b[2] = (struct sampler_bias){EOS, -INFINITY};
    sp->bias = b;
    sp->n_bias = 3;
    if (i == 5)
        sp->repeat_penalty = 1.0f, sp->presence_penalty = sp->frequency_penalty = 0.0f;
}

/* Submits jobs[0..n) with their params (logprobs when asked), all at once,
 * then reads each to the end. */
static void run_sampled(struct engine *e, struct job *jobs, int n, int logprobs)
{
    uint64_t ids[8];
    for (int i = 0; i < n; i++) {
        struct sampler_params sp;
        struct sampler_bias b[3];
        struct sampler *smp;
        struct mf_err err;
        dev_params(&sp, b, i);
        sp.logprobs = logprobs;
        job_init(&jobs[i], 12 + i, 20 + i, 30, -1);
        jobs[i].ignore_eos = 1;
        assert_int_equal(sampler_new(&smp, VOCAB, &sp, &err), 0);
        struct engine_request rq = {.prompt = jobs[i].prompt,
                                    .n_prompt = jobs[i].n_prompt,
                                    .max_tokens = jobs[i].max_tokens,
                                    .ignore_eos = 1,
                                    .sampling = smp};
        assert_int_equal(engine_submit(e, &rq, &ids[i], &err), 0);
    }
    for (int i = 0; i < n; i++) {
        consume(e, ids[i], &jobs[i], MAX_OUT);
        assert_false(jobs[i].bad);
    }
}

/* Draws on the device, some rows given back to the host, give exactly the
 * tokens of the host path for the same seeds; the steps ran without a
 * logits buffer and the counters say where each token was drawn. */
static void test_device_sampling_matches_host(void **state)
{
    static struct job host[6], dev[6];
    static struct dev_rig d;
    struct engine_metrics mh, md;
    struct engine *e = dev_open(&d, 0);

    run_sampled(e, host, 6, 0);
    engine_metrics(e, &mh);
    assert_int_equal(d.null_logits, 0);
    dev_close(&d, e);
    e = dev_open(&d, 1);
    run_sampled(e, dev, 6, 0);
    engine_metrics(e, &md);
    assert_int_equal(d.with_logits, 0);
    assert_true(d.null_logits > 0 && d.n_sample == d.null_logits);
    assert_true(d.given_back > 0 && d.given_back < d.n_rows);
    dev_close(&d, e);
    for (int i = 0; i < 6; i++) {
        assert_int_equal(dev[i].sum.finish, SCHED_FINISH_LENGTH);
        assert_int_equal(dev[i].n_out, host[i].n_out);
        assert_memory_equal(dev[i].out, host[i].out, (size_t)host[i].n_out * sizeof(int32_t));
    }
    assert_int_equal(mh.device_draws, 0);
    assert_int_equal(mh.host_draws, mh.generation_tokens);
    assert_int_equal(md.device_draws, (uint64_t)(d.n_rows - d.given_back));
    assert_int_equal(md.host_draws, (uint64_t)d.given_back);
    assert_int_equal(md.device_draws + md.host_draws, md.generation_tokens);
}

/* Params the device can't draw (logprobs): the whole step is the host's,
 * with b->logits set, and the events carry logprobs. */
static void test_device_sampling_host_only_params(void **state)
{
    static struct job jobs[2];
    static struct dev_rig d;
    struct engine_metrics m;
    struct engine *e = dev_open(&d, 1);

    run_sampled(e, jobs, 2, 1);
    engine_metrics(e, &m);
    assert_int_equal(d.null_logits, 0);
    assert_int_equal(d.n_sample, 0);
    assert_true(d.with_logits > 0);
    assert_int_equal(m.device_draws, 0);
    assert_int_equal(m.host_draws, m.generation_tokens);
    assert_int_equal(m.generation_tokens, 60);
    dev_close(&d, e);
}

/* A failed device draw fails the step's requests like a failed step;
 * later steps draw again. */
static void test_device_sampling_failure(void **state)
{
    static struct job jobs[2];
    static struct dev_rig d;
    struct engine_metrics m;
    struct engine *e = dev_open(&d, 1);

    d.fail_sample = 2;
    run_sampled(e, jobs, 1, 0);
    assert_int_equal(jobs[0].sum.finish, SCHED_FINISH_ERROR);
    assert_int_equal(jobs[0].n_out, 1);
    assert_non_null(strstr(jobs[0].sum.err.msg, "injected sample failure"));
    run_sampled(e, jobs, 2, 0);
    for (int i = 0; i < 2; i++)
        assert_int_equal(jobs[i].sum.finish, SCHED_FINISH_LENGTH);
    engine_metrics(e, &m);
    assert_int_equal(m.device_draws + m.host_draws, 61);
    assert_true(m.device_draws > 0);
    dev_close(&d, e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_batching_invariance),
        cmocka_unit_test(test_shared_prefix_hits_cache),
        cmocka_unit_test(test_small_cache_preempts_and_completes),
        cmocka_unit_test(test_cancel_and_release_mid_stream),
        cmocka_unit_test(test_slow_consumer_paused_then_cut),
        cmocka_unit_test(test_overload_and_oversize),
        cmocka_unit_test(test_model_failure_fails_its_requests),
        cmocka_unit_test(test_sampler_params_and_stop_hook),
        cmocka_unit_test(test_metrics),
        cmocka_unit_test(test_many_threads_submit_and_cancel),
        cmocka_unit_test(test_kv_budget_from_config),
        cmocka_unit_test(test_logits_memory),
        cmocka_unit_test(test_engine_stop_mid_stream),
        cmocka_unit_test(test_eos_from_tokenizer),
        cmocka_unit_test(test_std_sampler_greedy_logprobs),
        cmocka_unit_test(test_std_sampler_seeded_invariance),
        cmocka_unit_test(test_text_and_stop_strings),
        cmocka_unit_test(test_device_sampling_matches_host),
        cmocka_unit_test(test_device_sampling_host_only_params),
        cmocka_unit_test(test_device_sampling_failure),
    };
    return cmocka_run_group_tests_name("engine", tests, NULL, NULL);
}
