/*
 * test_engine_model.c: the engine over the real model and CPU backend
 * (runtime/model/model.c, runtime/engine/backend.h) on mkmodel's toy llama (2 layers,
 * 256 wide, vocab 512) and a rank-4 LoRA adapter: concurrent greedy
 * requests, mixed adapters, chunked prefill, prefix-cache hits and
 * preemption by recompute all give exactly the tokens each request gives
 * alone on a fresh engine, so K/V sharing and recompute are right with real
 * numerics; with runtime/engine/sampler.h seeded sampling too. Skips when tests/tools/mkmodel has not been
 * built.
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
#include "runtime/model/lora.h"
#include "runtime/model/model.h"
#include "runtime/engine/sampler.h"

#define MAX_OUT 32
#define N_JOBS 6

extern char **environ;

struct fixture {
    char dir[64];     /* temporary directory holding the GGUFs */
    struct model *m;  /* the toy model, with the adapter attached as id 0 */
    float lora_scale; /* the adapter's effective scale at user scale 1 */
    int ready;        /* 0: mkmodel missing, every test skips */
};

static struct fixture fx;

struct job {
    int32_t prompt[96];        /* the prompt */
    int32_t n_prompt;          /* its length */
    int32_t use_lora;          /* 1: run with the adapter */
    uint64_t seed;             /* nonzero: sample with runtime/engine/sampler.h, this seed */
    int32_t out[MAX_OUT];      /* tokens received */
    int32_t n_out;             /* count */
    struct engine_summary sum; /* the final summary */
};

/* ------------------------------------------------ fixture */

/* Runs argv[0] with argv; 0 when it exits 0. */
static int spawn_ok(char *const argv[])
{
    pid_t pid;
    int st;
    if (posix_spawn(&pid, argv[0], NULL, NULL, argv, environ) != 0 || waitpid(pid, &st, 0) < 0)
        return -1;
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

/* Writes the toy model and its adapter with mkmodel from the build tree. */
static int make_models(char *model, char *adapter, size_t cap)
{
    const char *bd = getenv("MFC_BUILDDIR");
    char exe[512];

    snprintf(exe, sizeof exe, "%s/tests/tools/mkmodel", bd ? bd : ".");
    if (access(exe, X_OK) != 0)
        return -1;
    snprintf(model, cap, "%s/toy.gguf", fx.dir);
    snprintf(adapter, cap, "%s/toy-lora.gguf", fx.dir);
    {
        char *const mk[] = {exe, "-o", model, "--preset", "toy", NULL};
        char *const mk_lora[] = {exe,      "-o", adapter,     "--preset", "toy",
                                 "--lora", "4",  "--targets", "q,v",      NULL};
        return spawn_ok(mk) || spawn_ok(mk_lora) ? -1 : 0;
    }
}

static int setup_models(void **state)
{
    char model[128];
    char adapter[128];
    struct lora *l;
    struct mf_err err;
    int32_t id;

    snprintf(fx.dir, sizeof fx.dir, "/tmp/mfc-engine-XXXXXX");
    if (!mkdtemp(fx.dir) || make_models(model, adapter, sizeof model))
        return 0; /* tests skip */
    if (model_open(model, &fx.m, &err) || lora_open(fx.m, adapter, &l, &err) ||
        model_add_lora(fx.m, l, &id, &err) || id != 0) {
        print_error("toy model: %s\n", err.msg);
        return -1;
    }
    fx.lora_scale = lora_scale(l, 1.0f);
    fx.ready = 1;
    return 0;
}

static int teardown_models(void **state)
{
    char path[128];
    model_close(fx.m);
    snprintf(path, sizeof path, "%s/toy.gguf", fx.dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/toy-lora.gguf", fx.dir);
    unlink(path);
    rmdir(fx.dir);
    return 0;
}

/* ------------------------------------------------ an engine on the CPU backend */

struct rig {
    struct backend *be; /* owned */
    struct engine *e;   /* owned */
};

/* An engine over model m (its sliding window, if every layer slides,
 * frees blocks as sequences run). */
static void rig_open_model(struct rig *r, const struct model *m, int32_t blocks, int32_t seqs,
                           int32_t budget, const struct engine_sampler *sampler)
{
    struct backend_config bc = {.n_threads = 2, .max_tokens = budget, .max_seqs = seqs};
    struct engine_config ec = {0};
    struct engine_model em = {.n_vocab = (int32_t)m->hp.n_vocab,
                              .n_loras = m->n_loras,
                              .step = backend_engine_step};
    struct mf_err err;
    int32_t n_blocks = 0;

    bc.kv_bytes = (uint64_t)blocks * backend_kv_block_bytes(m, bc.kv_type);
    ec.sched.window = model_window_all(m);
    if (backend_create(&cpu_backend_ops, m, &bc, &r->be, &err) ||
        backend_kv_alloc(r->be, &n_blocks, &err))
        fail_msg("backend: %s", err.msg);
    assert_int_equal(n_blocks, blocks);
    ec.sched.max_num_seqs = seqs;
    ec.sched.max_num_batched_tokens = budget;
    ec.sched.max_model_len = 512;
    ec.sched.max_waiting = 64;
    ec.n_kv_blocks = n_blocks;
    em.ctx = r->be;
    if (engine_open(&ec, &em, sampler, &r->e, &err))
        fail_msg("engine_open: %s", err.msg);
}

static void rig_open(struct rig *r, int32_t blocks, int32_t seqs, int32_t budget,
                     const struct engine_sampler *sampler)
{
    rig_open_model(r, fx.m, blocks, seqs, budget, sampler);
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
}

static uint64_t submit(struct rig *r, const struct job *j, int32_t max_tokens)
{
    struct sampler *smp = NULL;
    struct engine_request rq = {
        .prompt = j->prompt, .n_prompt = j->n_prompt, .max_tokens = max_tokens};
    struct mf_err err;
    uint64_t id = 0;
    if (j->use_lora) {
        rq.lora.n = 1;
        rq.lora.ids[0] = 0;
        rq.lora.scales[0] = fx.lora_scale;
    }
    if (j->seed) { /* Ollama's default chain, seeded */
        struct sampler_params sp;
        sampler_params_default(&sp);
        sp.seed = j->seed;
        if (sampler_new(&smp, (int32_t)fx.m->hp.n_vocab, &sp, &err))
            fail_msg("sampler_new: %s", err.msg);
        rq.sampling = smp;
    }
    if (engine_submit(r->e, &rq, &id, &err))
        fail_msg("engine_submit: %s", err.msg);
    return id;
}

static void consume(struct rig *r, uint64_t id, struct job *j)
{
    for (;;) {
        struct engine_event ev;
        struct mf_err err;
        if (engine_next(r->e, id, 30000, &ev, &j->sum, &err))
            fail_msg("engine_next: %s", err.msg);
        if (ev.token >= 0 && j->n_out < MAX_OUT)
            j->out[j->n_out++] = ev.token;
        if (ev.finish != SCHED_FINISH_NONE)
            return;
    }
}

/* Submits all, then reads each in turn (queues hold the rest meanwhile). */
static void run_all(struct rig *r, struct job *jobs, int n, int32_t max_tokens)
{
    uint64_t ids[N_JOBS];
    for (int i = 0; i < n; i++)
        ids[i] = submit(r, &jobs[i], max_tokens);
    for (int i = 0; i < n; i++)
        consume(r, ids[i], &jobs[i]);
}

/* Each job alone, on a fresh engine whose batches hold only it. */
static void run_alone(struct job *jobs, int n, int32_t max_tokens,
                      const struct engine_sampler *sampler)
{
    for (int i = 0; i < n; i++) {
        struct rig r;
        rig_open(&r, 40, 1, 512, sampler);
        run_all(&r, &jobs[i], 1, max_tokens);
        rig_close(&r);
    }
}

static void make_jobs(struct job *jobs, int n, int32_t shared)
{
    memset(jobs, 0, (size_t)n * sizeof *jobs);
    for (int i = 0; i < n; i++) {
        jobs[i].n_prompt = 20 + (i * 23) % 70;
        for (int32_t k = 0; k < jobs[i].n_prompt; k++)
            jobs[i].prompt[k] = k < shared ? (k * 37 + 11) % 512 : (i * 101 + k * 13) % 512;
        jobs[i].use_lora = i % 3 == 1;
    }
}

static void assert_same(const struct job *a, const struct job *b, int n)
{
    for (int i = 0; i < n; i++) {
        assert_int_equal(a[i].n_out, b[i].n_out);
        assert_memory_equal(a[i].out, b[i].out, (size_t)a[i].n_out * sizeof a[i].out[0]);
        assert_int_equal(a[i].sum.finish, SCHED_FINISH_LENGTH);
    }
}

/* ------------------------------------------------ tests */

/* Greedy tokens of one request on a fresh engine over m with a pool of
 * blocks; *peak gets the most blocks in use at once. */
static int32_t generate(const struct model *m, int32_t blocks, const int32_t *prompt, int32_t n,
                        int32_t max_tokens, int32_t *out, int32_t *peak)
{
    struct engine_request rq = {.prompt = prompt, .n_prompt = n, .max_tokens = max_tokens};
    struct engine_summary sum;
    struct mf_err err;
    struct rig r;
    uint64_t id;
    int32_t got = 0;

    rig_open_model(&r, m, blocks, 1, 64, NULL);
    if (engine_submit(r.e, &rq, &id, &err))
        fail_msg("engine_submit: %s", err.msg);
    *peak = 0;
    for (;;) {
        struct engine_event ev;
        struct engine_metrics mt;
        if (engine_next(r.e, id, 30000, &ev, &sum, &err))
            fail_msg("engine_next: %s", err.msg);
        engine_metrics(r.e, &mt);
        *peak = mt.kv.blocks_used > *peak ? mt.kv.blocks_used : *peak;
        if (ev.token >= 0)
            out[got++] = ev.token;
        if (ev.finish != SCHED_FINISH_NONE)
            break;
    }
    assert_int_equal(sum.finish, SCHED_FINISH_LENGTH);
    rig_close(&r);
    return got;
}

/* A model whose every layer slides (gemma3, a 32-position window on every
 * layer) gives its blocks before the window back as it runs: 200 tokens
 * come out of a pool of 6 blocks (96 positions), the same tokens as with a
 * pool that holds them all, and no more blocks are ever in use than the
 * window, one chunk and the block parenting the next ones need. */
static void test_real_sliding_window_frees_blocks(void **state)
{
    const char *bd = getenv("MFC_BUILDDIR");
    char exe[512], path[128];
    struct model *m;
    struct mf_err err;
    int32_t prompt[10], big[200], small[200], peak_big, peak_small;

    if (!fx.ready)
        skip();
    snprintf(exe, sizeof exe, "%s/tests/tools/mkmodel", bd ? bd : ".");
    snprintf(path, sizeof path, "%s/slide.gguf", fx.dir);
    char *const mk[] = {exe,     "-o",   path,           "--arch", "gemma3", "--swa",
                        "32",    "--swa-pattern", "0", "--ctx", "1024", NULL};
    assert_int_equal(spawn_ok(mk), 0);
    if (model_open(path, &m, &err))
        fail_msg("%s", err.msg);
    assert_int_equal(model_window_all(m), 32);
    for (int i = 0; i < 10; i++)
        prompt[i] = (i * 53 + 7) % 512;
    assert_int_equal(generate(m, 64, prompt, 10, 200, big, &peak_big), 200);
    assert_int_equal(generate(m, 6, prompt, 10, 200, small, &peak_small), 200);
    assert_memory_equal(big, small, sizeof big);
    assert_true(peak_big <= 5 && peak_small <= 5); /* 32 positions: 2-3 blocks, a new one, a parent */
    model_close(m);
    unlink(path);
}

/* Runs jobs (made by make_jobs with shared, seeded when seed) alone, then
 * together on an engine of blocks/seqs/budget (one after another when
 * serial), asserts equal tokens and returns the second engine's metrics. */
static struct engine_metrics alone_vs(int32_t shared, uint64_t seed, int32_t max_tokens,
                                      int32_t blocks, int32_t seqs, int32_t budget, int serial)
{
    const struct engine_sampler *smp = seed ? &engine_sampler_std : NULL;
    struct job alone[N_JOBS];
    struct job other[N_JOBS];
    struct engine_metrics m;
    struct rig r;

    make_jobs(alone, N_JOBS, shared);
    make_jobs(other, N_JOBS, shared);
    for (int i = 0; seed && i < N_JOBS; i++)
        alone[i].seed = other[i].seed = seed + (uint64_t)i;
    run_alone(alone, N_JOBS, max_tokens, smp);
    rig_open(&r, blocks, seqs, budget, smp);
    for (int i = 0; i < (serial ? N_JOBS : 1); i++)
        run_all(&r, serial ? &other[i] : other, serial ? 1 : N_JOBS, max_tokens);
    engine_metrics(r.e, &m);
    rig_close(&r);
    assert_same(alone, other, N_JOBS);
    return m;
}

/* Batched, adapters mixed, prompts chunked across steps (48-token budget). */
static void test_real_batching_invariance(void **state)
{
    struct engine_metrics m;
    struct job j[2];

    if (!fx.ready)
        skip();
    m = alone_vs(0, 0, 16, 64, 8, 48, 0);
    assert_true(m.steps < N_JOBS * 16); /* alone, each needs 16 steps at least: shared */
    /* The adapter changes the output (it is really applied). */
    make_jobs(j, 1, 0);
    j[1] = j[0]; /* same prompt, only the adapter differs */
    j[1].use_lora = !j[0].use_lora;
    run_alone(j, 2, 16, NULL);
    assert_memory_not_equal(j[0].out, j[1].out, 16 * sizeof(int32_t));
}

/* Requests sharing a 48-token prefix, one after another, reuse its K/V
 * and still match a cold run. */
static void test_real_prefix_cache(void **state)
{
    struct engine_metrics m;

    if (!fx.ready)
        skip();
    m = alone_vs(48, 0, 12, 64, 4, 512, 1);
    /* Jobs 1 and 4 run with the adapter: only same-adapter pairs share. */
    assert_true(m.kv.prefix_hits >= 3 * 32);
}

/* A cache too small for the load: preemption and recompute, same tokens. */
static void test_real_preemption(void **state)
{
    if (!fx.ready)
        skip();
    assert_true(alone_vs(0, 0, 24, 12, 6, 512, 0).preemptions > 0);
}

/* Seeded sampling (Ollama's defaults: temperature 0.8, top_k 40, top_p
 * 0.9, repeat penalty 1.1) over real logits, batched and preempted. */
static void test_real_seeded_sampling(void **state)
{
    if (!fx.ready)
        skip();
    assert_true(alone_vs(0, 1000, 24, 12, 6, 64, 0).preemptions > 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_real_batching_invariance),
        cmocka_unit_test(test_real_prefix_cache),
        cmocka_unit_test(test_real_preemption),
        cmocka_unit_test(test_real_seeded_sampling),
        cmocka_unit_test(test_real_sliding_window_frees_blocks),
    };
    return cmocka_run_group_tests_name("engine_model", tests, setup_models, teardown_models);
}
