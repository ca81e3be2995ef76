/*
 * test_spec_model.c: speculative decoding over the real model and CPU
 * backend (mkmodel's toy llama, 2 layers, vocab 512, and a rank-4 LoRA
 * adapter): at temperature 0 every request's tokens are exactly those the
 * engine gives without speculation, over 24 prompts batched together, with
 * a draft model that is the model itself (everything accepted), a draft of
 * another seed and depth (little accepted), prompt lookup, and a pool small
 * enough to preempt. That holds because the CPU backend computes a token's
 * logits the same whatever else its step holds (runtime/cpu/cpu_fwd.c): a
 * verify row equals the decode row. Seeded sampling with a draft runs to
 * the end with every block given back. Skips when tests/tools/mkmodel has
 * not been built.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include "runtime/engine/backend.h"
#include "runtime/engine/engine.h"
#include "runtime/engine/sampler.h"
#include "runtime/model/lora.h"
#include "runtime/model/model.h"

#define N_JOBS 24
#define MAX_OUT 40

extern char **environ;

struct fixture {
    char dir[64];     /* temporary directory holding the GGUFs */
    struct model *m;  /* the toy model, adapter attached as id 0 */
    struct model *d;  /* another toy: one layer, another seed (a draft that disagrees) */
    struct model *d2; /* the toy again, as its own draft (agrees) */
    float lora_scale; /* the adapter's effective scale */
    int ready;        /* 0: mkmodel missing, every test skips */
};

static struct fixture fx;

static int spawn_ok(char *const argv[])
{
    pid_t pid;
    int st;
    if (posix_spawn(&pid, argv[0], NULL, NULL, argv, environ) != 0 || waitpid(pid, &st, 0) < 0)
        return -1;
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

static void path_of(char *out, size_t cap, const char *name)
{
    snprintf(out, cap, "%s/%s", fx.dir, name);
}

static int setup(void **state)
{
    const char *bd = getenv("MFC_BUILDDIR");
    char exe[512], model[128], lora[128], draft[128];
    struct lora *l;
    struct mf_err err;
    int32_t id;

    snprintf(exe, sizeof exe, "%s/tests/tools/mkmodel", bd ? bd : ".");
    snprintf(fx.dir, sizeof fx.dir, "/tmp/mfc-spec-XXXXXX");
    if (access(exe, X_OK) != 0 || !mkdtemp(fx.dir))
        return 0; /* tests skip */
    path_of(model, sizeof model, "toy.gguf");
    path_of(lora, sizeof lora, "toy-lora.gguf");
    path_of(draft, sizeof draft, "draft.gguf");
    char *const mk[] = {exe, "-o", model, "--preset", "toy", NULL};
    char *const mk_lora[] = {exe,      "-o", lora,        "--preset", "toy",
                             "--lora", "4",  "--targets", "q,v",      NULL};
    char *const mk_draft[] = {exe,        "-o", draft,    "--preset", "toy",
                              "--layers", "1",  "--seed", "7",        NULL};
    if (spawn_ok(mk) || spawn_ok(mk_lora) || spawn_ok(mk_draft))
        return -1;
    if (model_open(model, &fx.m, &err) || lora_open(fx.m, lora, &l, &err) ||
        model_add_lora(fx.m, l, &id, &err) || model_open(draft, &fx.d, &err) ||
        model_open(model, &fx.d2, &err)) {
        print_error("toy models: %s\n", err.msg);
        return -1;
    }
    fx.lora_scale = lora_scale(l, 1.0f);
    fx.ready = 1;
    return 0;
}

static int teardown(void **state)
{
    char p[128];
    model_close(fx.m);
    model_close(fx.d);
    model_close(fx.d2);
    const char *names[] = {"toy.gguf", "toy-lora.gguf", "draft.gguf"};
    for (int i = 0; i < 3; i++) {
        path_of(p, sizeof p, names[i]);
        unlink(p);
    }
    rmdir(fx.dir);
    return 0;
}

/* ------------------------------------------------ an engine, with or without a draft */

struct rig {
    struct backend *be; /* the model's backend */
    struct backend *db; /* the draft's, or NULL */
    struct engine_model dm;
    struct engine *e;
};

static struct backend *cpu_for(const struct model *m, int32_t blocks, int32_t seqs)
{
    struct backend_config bc = {
        .n_threads = 2, .max_tokens = 512, .max_seqs = seqs, .max_logits = seqs * 9};
    struct backend *b;
    struct mf_err err;
    int32_t n = 0;
    bc.kv_bytes = (uint64_t)blocks * backend_kv_block_bytes(m, bc.kv_type);
    if (backend_create(&cpu_backend_ops, m, &bc, &b, &err) || backend_kv_alloc(b, &n, &err))
        fail_msg("backend: %s", err.msg);
    return b;
}

static void rig_open(struct rig *r, enum spec_source src, const struct model *draft, int32_t blocks,
                     const struct engine_sampler *smp)
{
    const int32_t seqs = 8;
    struct engine_config ec = {0};
    struct engine_model em = {.n_vocab = (int32_t)fx.m->hp.n_vocab,
                              .n_loras = fx.m->n_loras,
                              .step = backend_engine_step,
                              .max_tokens = 512};
    struct mf_err err;

    memset(r, 0, sizeof *r);
    r->be = cpu_for(fx.m, blocks, seqs);
    em.ctx = r->be;
    ec.sched.max_num_seqs = seqs;
    ec.sched.max_num_batched_tokens = 512;
    ec.sched.max_num_logits = seqs * 9;
    ec.sched.max_model_len = 512;
    ec.sched.max_waiting = 64;
    ec.n_kv_blocks = blocks;
    spec_config_default(&ec.spec, src);
    ec.spec.no_guard = 1;
    ec.spec.max_batch = 0;
    if (src == SPEC_DRAFT) {
        r->db = cpu_for(draft, 96, seqs);
        r->dm = (struct engine_model){.ctx = r->db,
                                      .n_vocab = (int32_t)draft->hp.n_vocab,
                                      .step = backend_engine_step,
                                      .max_tokens = 512};
        ec.draft = &r->dm;
        ec.spec.draft_kv_blocks = 96;
        ec.spec.p_min = 0;
    }
    if (engine_open(&ec, &em, smp, &r->e, &err))
        fail_msg("engine_open: %s", err.msg);
}

static void rig_close(struct rig *r)
{
    struct engine_metrics m;
    struct mf_err err;
    if (engine_check(r->e, &err))
        fail_msg("engine_check: %s", err.msg);
    engine_metrics(r->e, &m);
    assert_int_equal(m.kv.blocks_used, 0);
    engine_close(r->e);
    backend_free(r->be);
    backend_free(r->db);
}

struct job {
    int32_t prompt[96];
    int32_t n_prompt;
    int use_lora;
    uint64_t seed;
    int32_t out[MAX_OUT];
    int32_t n_out;
    struct engine_summary sum;
};

static void make_jobs(struct job *jobs)
{
    memset(jobs, 0, N_JOBS * sizeof *jobs);
    for (int i = 0; i < N_JOBS; i++) {
        jobs[i].n_prompt = 10 + (i * 29) % 60;
        for (int32_t k = 0; k < jobs[i].n_prompt; k++) /* some repeat themselves: lookup */
            jobs[i].prompt[k] = i % 2 ? (i * 7 + k % 6 * 31) % 512 : (i * 101 + k * 13) % 512;
        jobs[i].use_lora = i % 5 == 2;
    }
}

/* Submits every job, then reads each to its end. */
static void run_jobs(struct rig *r, struct job *jobs)
{
    uint64_t ids[N_JOBS];
    struct mf_err err;
    for (int i = 0; i < N_JOBS; i++) {
        struct engine_request rq = {
            .prompt = jobs[i].prompt, .n_prompt = jobs[i].n_prompt, .max_tokens = MAX_OUT};
        if (jobs[i].use_lora) {
            rq.lora.n = 1;
            rq.lora.scales[0] = fx.lora_scale;
        }
        if (jobs[i].seed) {
            struct sampler_params sp;
            struct sampler *smp;
            sampler_params_default(&sp);
            sp.seed = jobs[i].seed;
            if (sampler_new(&smp, (int32_t)fx.m->hp.n_vocab, &sp, &err))
                fail_msg("sampler_new: %s", err.msg);
            rq.sampling = smp;
        }
        if (engine_submit(r->e, &rq, &ids[i], &err))
            fail_msg("engine_submit: %s", err.msg);
    }
    for (int i = 0; i < N_JOBS; i++) {
        for (;;) {
            struct engine_event ev;
            if (engine_next(r->e, ids[i], 60000, &ev, &jobs[i].sum, &err))
                fail_msg("engine_next: %s", err.msg);
            if (ev.token >= 0 && jobs[i].n_out < MAX_OUT)
                jobs[i].out[jobs[i].n_out++] = ev.token;
            if (ev.finish != SCHED_FINISH_NONE)
                break;
        }
        assert_int_equal(jobs[i].sum.finish, SCHED_FINISH_LENGTH);
    }
}

static struct job plain[N_JOBS]; /* the tokens without speculation */

static int plain_ready(void)
{
    static int done;
    struct rig r;
    if (!done) {
        make_jobs(plain);
        rig_open(&r, SPEC_NONE, NULL, 200, NULL);
        run_jobs(&r, plain);
        rig_close(&r);
        done = 1;
    }
    return 1;
}

/* The jobs with speculation from src must give plain's tokens; returns the
 * proposals made and accepted by the jobs without an adapter (the draft
 * runs without one, so it disagrees with an adapted model more). */
static void same_as_plain(enum spec_source src, const struct model *draft, int32_t blocks,
                          uint64_t *proposed, uint64_t *accepted)
{
    struct job jobs[N_JOBS];
    struct rig r;

    plain_ready();
    make_jobs(jobs);
    rig_open(&r, src, draft, blocks, NULL);
    run_jobs(&r, jobs);
    rig_close(&r);
    *proposed = *accepted = 0;
    for (int i = 0; i < N_JOBS; i++) {
        assert_int_equal(jobs[i].n_out, plain[i].n_out);
        assert_memory_equal(jobs[i].out, plain[i].out, (size_t)plain[i].n_out * sizeof(int32_t));
        if (jobs[i].use_lora)
            continue;
        *proposed += jobs[i].sum.n_proposed;
        *accepted += jobs[i].sum.n_accepted;
    }
}

static void test_greedy_draft_itself(void **state)
{
    uint64_t p, a;
    if (!fx.ready)
        skip();
    same_as_plain(SPEC_DRAFT, fx.d2, 200, &p, &a);
    assert_true(p > 100);
    assert_int_equal(a, p); /* same model, same numerics, same argmax */
}

static void test_greedy_draft_other(void **state)
{
    uint64_t p, a;
    if (!fx.ready)
        skip();
    same_as_plain(SPEC_DRAFT, fx.d, 200, &p, &a);
    assert_true(p > 0 && a < p);
}

static void test_greedy_lookup(void **state)
{
    uint64_t p, a;
    if (!fx.ready)
        skip();
    same_as_plain(SPEC_LOOKUP, NULL, 200, &p, &a);
    assert_true(p > 0 && a > 0); /* random toys repeat themselves: lookup finds it */
}

static void test_greedy_preempted(void **state)
{
    uint64_t p, a;
    if (!fx.ready)
        skip();
    same_as_plain(SPEC_DRAFT, fx.d2, 24, &p, &a); /* 24 blocks for 8 running: preemption */
    assert_true(p > 0);
}

/* Seeded sampling with a draft: runs through, blocks all given back. */
static void test_sampled_draft(void **state)
{
    struct job jobs[N_JOBS];
    struct rig r;
    if (!fx.ready)
        skip();
    make_jobs(jobs);
    for (int i = 0; i < N_JOBS; i++)
        jobs[i].seed = 100 + (uint64_t)i;
    rig_open(&r, SPEC_DRAFT, fx.d2, 200, &engine_sampler_std);
    run_jobs(&r, jobs);
    rig_close(&r);
    uint64_t p = 0;
    for (int i = 0; i < N_JOBS; i++)
        p += jobs[i].sum.n_proposed;
    assert_true(p > 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy_draft_itself), cmocka_unit_test(test_greedy_draft_other),
        cmocka_unit_test(test_greedy_lookup),       cmocka_unit_test(test_greedy_preempted),
        cmocka_unit_test(test_sampled_draft),
    };
    return cmocka_run_group_tests_name("spec_model", tests, setup, teardown);
}
