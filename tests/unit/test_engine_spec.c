/*
 * test_engine_spec.c: speculative decoding through runtime/engine/engine.c
 * over the paged fake model (tests/unit/fake_model.c), which reads every
 * context back from its KV arena, so a rollback that left a rejected
 * proposal's K/V counted, a wrong block table or a stale prefix-cache
 * block changes the tokens.
 *
 * Greedy: with a draft that always agrees, one that never does, prompt
 * lookup and a script of the right tokens (the benchmarks' oracle), each
 * request's tokens equal its tokens alone without speculation, under
 * concurrency, adapters and preemption, with an end of generation inside
 * the accepted proposals. Sampling: with a soft fake model whose
 * distribution is computed exactly, the tokens after proposals (a draft
 * model's drawn ones, or lookup's fixed ones) follow the target's
 * distribution (chi-square over thousands of seeded requests).
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

#include "runtime/engine/engine.h"
#include "runtime/engine/sampler.h"
#include "tests/unit/fake_model.h"

#define MAX_OUT 64

struct rig {
    struct engine *e;       /* the engine under test */
    struct fake_model fm;   /* its model */
    struct fake_model dm;   /* the draft model (SPEC_DRAFT) */
    struct engine_model dr; /* its interface */
    int32_t vocab;
    int32_t eos; /* -1: none */
};

static int fake_step(void *ctx, struct batch *b, struct mf_err *err)
{
    return fake_model_step(ctx, b, NULL, err);
}

/* An engine over a fake model of vocab tokens (soft: fake_model.soft) with
 * speculation from src (draft_salt: the draft's salt; equal to 0 it always
 * agrees with the greedy target). */
static void rig_open(struct rig *r, int32_t vocab, int32_t eos, int32_t blocks, int32_t seqs,
                     enum spec_source src, uint32_t draft_salt, float soft,
                     const struct engine_sampler *smp)
{
    static int32_t eos_id[1];
    struct engine_config c = {0};
    struct engine_model m = {.n_vocab = vocab, .n_loras = 2, .step = fake_step};
    struct mf_err err;

    memset(r, 0, sizeof *r);
    r->vocab = vocab;
    r->eos = eos;
    eos_id[0] = eos;
    m.eos = eos_id;
    m.n_eos = eos >= 0;
    c.sched.max_num_seqs = seqs;
    c.sched.max_num_batched_tokens = 256;
    c.sched.max_num_logits = seqs * 5;
    c.sched.max_model_len = 1024;
    c.sched.max_waiting = 256;
    c.n_kv_blocks = blocks;
    spec_config_default(&c.spec, src);
    c.spec.draft_max = 4;
    c.spec.ngram_min = 1;
    c.spec.no_guard = 1;       /* every round speculates: these tests count on it */
    c.spec.fixed_k = soft > 0; /* a fake draft costs what the model does: adaptive k
                                  would rightly stop proposing */
    c.spec.max_batch = 0;
    assert_int_equal(fake_model_init(&r->fm, blocks, 1024, vocab), 0);
    r->fm.soft = soft;
    m.ctx = &r->fm;
    if (src == SPEC_DRAFT) {
        c.spec.draft_kv_blocks = 64;
        c.spec.p_min = 0; /* the fake draft is never sure */
        assert_int_equal(fake_model_init(&r->dm, 64, 1024, vocab), 0);
        r->dm.salt = draft_salt;
        r->dm.soft = soft;
        r->dr = (struct engine_model){
            .ctx = &r->dm, .n_vocab = vocab, .step = fake_step, .max_tokens = 512};
        c.draft = &r->dr;
    }
    if (engine_open(&c, &m, smp, &r->e, &err))
        fail_msg("engine_open: %s", err.msg);
}

static void rig_close(struct rig *r)
{
    struct engine_metrics m;
    struct mf_err err;
    if (engine_check(r->e, &err))
        fail_msg("engine_check: %s", err.msg);
    engine_metrics(r->e, &m);
    assert_int_equal(m.n_running + m.n_waiting, 0);
    assert_int_equal(m.kv.blocks_used, 0);
    engine_close(r->e);
    fake_model_fini(&r->fm);
    fake_model_fini(&r->dm);
}

/* ------------------------------------------------ greedy jobs */

struct job {
    int32_t prompt[96];
    int32_t n_prompt;
    int32_t max_tokens;
    struct batch_lora lora;
    const int32_t *script; /* proposals by output position, or NULL */
    int32_t n_script;
    int32_t no_spec;
    int32_t out[MAX_OUT];
    int32_t n_out;
    struct engine_summary sum;
    int bad;
};

/* rep: a prompt of repeats, for lookup; adapters on every fourth job unless
 * rep is 2 (a draft that agrees knows no adapters) */
static void job_init(struct job *j, int32_t vocab, int32_t seed, int32_t max_tokens, int rep)
{
    memset(j, 0, sizeof *j);
    j->n_prompt = 12 + seed % 50;
    for (int32_t k = 0; k < j->n_prompt; k++)
        j->prompt[k] = rep == 1 ? (seed + k % 5) % vocab : (seed * 131 + k * 17) % vocab;
    j->max_tokens = max_tokens;
    if (seed % 4 == 3 && rep != 2) {
        j->lora.n = 1;
        j->lora.ids[0] = seed % 2;
        j->lora.scales[0] = 1.0f;
    }
}

static void run_job(struct engine *e, struct job *j)
{
    struct engine_request rq = {.prompt = j->prompt,
                                .n_prompt = j->n_prompt,
                                .max_tokens = j->max_tokens,
                                .lora = j->lora,
                                .no_spec = j->no_spec,
                                .spec_script = j->script,
                                .n_spec_script = j->n_script};
    struct mf_err err;
    uint64_t id;
    if (engine_submit(e, &rq, &id, &err)) {
        j->bad = 1;
        return;
    }
    for (;;) {
        struct engine_event ev;
        if (engine_next(e, id, 10000, &ev, &j->sum, &err)) {
            j->bad = 1;
            return;
        }
        if (ev.token >= 0 && j->n_out < MAX_OUT)
            j->out[j->n_out++] = ev.token;
        if (ev.finish != SCHED_FINISH_NONE)
            return;
    }
}

static void *job_thread(void *arg)
{
    void **a = arg;
    run_job(a[0], a[1]);
    return NULL;
}

static void run_concurrently(struct engine *e, struct job *jobs, int n)
{
    pthread_t th[32];
    void *args[32][2];
    assert_true(n <= 32);
    for (int i = 0; i < n; i++) {
        args[i][0] = e;
        args[i][1] = &jobs[i];
        assert_int_equal(pthread_create(&th[i], NULL, job_thread, args[i]), 0);
    }
    for (int i = 0; i < n; i++)
        pthread_join(th[i], NULL);
}

/* The job's tokens must be its solo greedy tokens without speculation. */
static void assert_solo(const struct rig *r, const struct job *j)
{
    int32_t want[MAX_OUT];
    int32_t n =
        fake_reference(j->prompt, j->n_prompt, j->max_tokens, &j->lora, r->vocab, r->eos, want);
    assert_false(j->bad);
    assert_int_equal(j->n_out, n);
    assert_memory_equal(j->out, want, (size_t)n * sizeof want[0]);
    assert_int_equal(j->sum.n_output, n);
    assert_int_equal(j->sum.finish, r->eos >= 0 && want[n - 1] == r->eos ? SCHED_FINISH_STOP
                                                                         : SCHED_FINISH_LENGTH);
}

static void run_greedy(enum spec_source src, uint32_t salt, int32_t blocks, uint64_t *proposed,
                       uint64_t *accepted)
{
    struct rig r;
    struct job jobs[24];
    struct engine_metrics m;

    rig_open(&r, 512, 7, blocks, 8, src, salt, 0, NULL);
    for (int i = 0; i < 24; i++)
        job_init(&jobs[i], 512, i + 1, 30, src == SPEC_LOOKUP ? 1 : salt == 0 ? 2 : 0);
    run_concurrently(r.e, jobs, 24);
    *proposed = *accepted = 0;
    for (int i = 0; i < 24; i++) {
        assert_solo(&r, &jobs[i]);
        *proposed += jobs[i].sum.n_proposed;
        *accepted += jobs[i].sum.n_accepted;
    }
    engine_metrics(r.e, &m);
    assert_int_equal(m.spec.proposed, *proposed);
    assert_int_equal(m.spec.accepted, *accepted);
    assert_int_equal(m.spec_source, src);
    rig_close(&r);
}

static void test_draft_agrees(void **state)
{
    uint64_t p, a;
    run_greedy(SPEC_DRAFT, 0, 256, &p, &a);
    assert_true(p > 200);
    assert_int_equal(a, p); /* the draft is the model */
}

static void test_draft_disagrees(void **state)
{
    uint64_t p, a;
    run_greedy(SPEC_DRAFT, 77, 256, &p, &a);
    assert_true(p > 0);
    assert_true(a * 20 < p); /* 1 in 512 by chance */
}

static void test_draft_preempted(void **state)
{
    /* 24 requests of up to 92 tokens in 40 blocks: preemption and recompute
     * while proposals come and go */
    uint64_t p, a;
    run_greedy(SPEC_DRAFT, 0, 40, &p, &a);
    assert_true(p > 0 && a == p);
}

static void test_lookup(void **state)
{
    uint64_t p, a;
    run_greedy(SPEC_LOOKUP, 0, 256, &p, &a);
    assert_true(p > 0); /* the repeating prompts match; the fake model rarely follows them */
}

/* The script of the right tokens: everything accepted, a fraction of the
 * target's steps; an end of generation inside the accepted ones ends the
 * request there, whatever the script says after it. */
static void test_script_oracle(void **state)
{
    struct rig r;
    struct job jobs[16];
    int32_t want[16][MAX_OUT + 8];
    int64_t steps0;

    rig_open(&r, 16, 7, 256, 4, SPEC_LOOKUP, 0, 0, NULL);
    for (int i = 0; i < 16; i++) {
        job_init(&jobs[i], 16, i + 1, 40, 0);
        jobs[i].lora.n = 0;
        int32_t n =
            fake_reference(jobs[i].prompt, jobs[i].n_prompt, 40, &jobs[i].lora, 16, 7, want[i]);
        for (int32_t k = n; k < n + 8; k++) /* past the end: tokens that would be wrong */
            want[i][k] = (want[i][k - 1] + 1) % 16;
        jobs[i].script = want[i];
        jobs[i].n_script = n + 8;
    }
    steps0 = r.fm.n_steps;
    for (int i = 0; i < 16; i++)
        run_job(r.e, &jobs[i]);
    int ended = 0;
    int64_t tokens = 0;
    for (int i = 0; i < 16; i++) {
        assert_solo(&r, &jobs[i]);
        /* every proposal right; only a round that ran past an end token
         * (the script goes on) verified some that were not */
        if (jobs[i].sum.finish == SCHED_FINISH_STOP)
            assert_true(jobs[i].sum.n_proposed - jobs[i].sum.n_accepted <= 4);
        else
            assert_int_equal(jobs[i].sum.n_accepted, jobs[i].sum.n_proposed);
        ended += jobs[i].sum.finish == SCHED_FINISH_STOP;
        tokens += jobs[i].n_out;
    }
    assert_true(ended >= 4); /* vocabulary 16: most hit the end token within 40 */
    /* about one target step per 5 tokens, plus the prefills */
    assert_true(r.fm.n_steps - steps0 < tokens / 3 + 16);
    rig_close(&r);
}

/* no_spec: that request never proposes; the others still do. */
static void test_no_spec_request(void **state)
{
    struct rig r;
    struct job a, b;
    rig_open(&r, 512, 7, 256, 4, SPEC_DRAFT, 0, 0, NULL);
    job_init(&a, 512, 5, 30, 0);
    job_init(&b, 512, 6, 30, 0);
    a.no_spec = 1;
    run_job(r.e, &a);
    run_job(r.e, &b);
    assert_solo(&r, &a);
    assert_solo(&r, &b);
    assert_int_equal(a.sum.n_proposed, 0);
    assert_true(b.sum.n_proposed > 0);
    rig_close(&r);
}

/* ------------------------------------------------ sampling keeps the distribution */

#define SV 8      /* vocabulary */
#define SOFT 3.0f /* logits in [0, 3): probabilities within a factor of 20 */
#define SAMPLES 6000

/* The target's distribution after ctx[0..n) at temperature 1. */
static void target_p(const int32_t *ctx, int32_t n, double *p)
{
    static const struct batch_lora none;
    float row[SV];
    double z = 0;
    fake_logits(ctx, n, &none, 0, SOFT, SV, row);
    for (int i = 0; i < SV; i++)
        z += exp((double)row[i]);
    for (int i = 0; i < SV; i++)
        p[i] = exp((double)row[i]) / z;
}

/* 0.999 quantile of chi-square with df degrees (Wilson-Hilferty). */
static double chi2_crit(int df)
{
    double h = 2.0 / (9.0 * df);
    return df * pow(1.0 - h + 3.09 * sqrt(h), 3);
}

struct sjob {
    struct engine *e;
    const int32_t *prompt;
    int32_t n_prompt;
    int first, count; /* seeds first .. first + count - 1 */
    int32_t (*out)[3];
    uint64_t proposed, accepted;
    int bad;
};

static void *sample_thread(void *arg)
{
    struct sjob *s = arg;
    for (int i = 0; i < s->count; i++) {
        struct sampler_params sp;
        struct sampler *smp;
        struct mf_err err;
        uint64_t id;
        sampler_params_default(&sp);
        sp.temperature = 1.0f;
        sp.top_k = 0;
        sp.top_p = 1.0f;
        sp.repeat_penalty = 1.0f;
        sp.seed = (uint64_t)(s->first + i) * 7919u + 1;
        if (sampler_new(&smp, SV, &sp, &err)) {
            s->bad = 1;
            return NULL;
        }
        struct engine_request rq = {
            .prompt = s->prompt, .n_prompt = s->n_prompt, .max_tokens = 3, .sampling = smp};
        if (engine_submit(s->e, &rq, &id, &err)) {
            sampler_free(smp);
            s->bad = 1;
            return NULL;
        }
        int n = 0;
        struct engine_summary sum;
        for (;;) {
            struct engine_event ev;
            if (engine_next(s->e, id, 10000, &ev, &sum, &err)) {
                s->bad = 1;
                return NULL;
            }
            if (ev.token >= 0 && n < 3)
                s->out[i][n++] = ev.token;
            if (ev.finish != SCHED_FINISH_NONE)
                break;
        }
        s->bad |= n != 3;
        s->proposed += sum.n_proposed;
        s->accepted += sum.n_accepted;
    }
    return NULL;
}

/* SAMPLES requests of 3 tokens at temperature 1; the second and third come
 * from verify steps. Their joint distribution (over the first) must be the
 * target's. */
static void run_sampling(enum spec_source src)
{
    static int32_t out[SAMPLES][3];
    static const int32_t prompt[] = {1, 2, 3, 1, 2, 3, 1, 2};
    struct rig r;
    struct sjob jobs[8];
    pthread_t th[8];
    double expect[SV * SV] = {0}, p1[SV], p2[SV], p3[SV];
    long counts[SV * SV] = {0};
    int32_t ctx[16];
    uint64_t proposed = 0, accepted = 0;

    rig_open(&r, SV, -1, 512, 16, src, 4242, SOFT, &engine_sampler_std);
    for (int t = 0; t < 8; t++) {
        jobs[t] = (struct sjob){.e = r.e,
                                .prompt = prompt,
                                .n_prompt = 8,
                                .first = t * (SAMPLES / 8),
                                .count = SAMPLES / 8,
                                .out = out + t * (SAMPLES / 8)};
        assert_int_equal(pthread_create(&th[t], NULL, sample_thread, &jobs[t]), 0);
    }
    for (int t = 0; t < 8; t++) {
        pthread_join(th[t], NULL);
        assert_false(jobs[t].bad);
        proposed += jobs[t].proposed;
        accepted += jobs[t].accepted;
    }
    /* proposals were made (lookup: when the first token occurred in the
     * prompt), and both accepted and rejected */
    assert_true(proposed > SAMPLES / (src == SPEC_LOOKUP ? 5 : 2));
    assert_true(accepted > proposed / 20 && accepted < proposed);
    /* P(t2, t3) = sum over t1 of p(t1) p(t2 | t1) p(t3 | t1 t2) */
    memcpy(ctx, prompt, sizeof prompt);
    target_p(ctx, 8, p1);
    for (int a = 0; a < SV; a++) {
        ctx[8] = a;
        target_p(ctx, 9, p2);
        for (int b = 0; b < SV; b++) {
            ctx[9] = b;
            target_p(ctx, 10, p3);
            for (int c = 0; c < SV; c++)
                expect[b * SV + c] += p1[a] * p2[b] * p3[c];
        }
    }
    for (int i = 0; i < SAMPLES; i++)
        counts[out[i][1] * SV + out[i][2]]++;
    /* cells expected below 5 are pooled into one */
    double x = 0, pool_e = 0;
    long pool_n = 0;
    int cells = 0;
    for (int i = 0; i < SV * SV; i++) {
        double e = expect[i] * SAMPLES;
        if (e < 5) {
            pool_e += e;
            pool_n += counts[i];
            continue;
        }
        x += (counts[i] - e) * (counts[i] - e) / e;
        cells++;
    }
    if (pool_e > 0) {
        x += (pool_n - pool_e) * (pool_n - pool_e) / pool_e;
        cells++;
    }
    if (!(x < chi2_crit(cells - 1)))
        fail_msg("chi-square %.1f over %d cells (0.999 quantile %.1f)", x, cells,
                 chi2_crit(cells - 1));
    rig_close(&r);
}

static void test_sampling_draft(void **state)
{
    run_sampling(SPEC_DRAFT);
}

static void test_sampling_lookup(void **state)
{
    run_sampling(SPEC_LOOKUP);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_draft_agrees),    cmocka_unit_test(test_draft_disagrees),
        cmocka_unit_test(test_draft_preempted), cmocka_unit_test(test_lookup),
        cmocka_unit_test(test_script_oracle),   cmocka_unit_test(test_no_spec_request),
        cmocka_unit_test(test_sampling_draft),  cmocka_unit_test(test_sampling_lookup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
