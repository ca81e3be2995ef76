/*
 * grammar.c (bench/grammar): what constrained decoding costs on the CPU
 * engine. One GGUF (mkmodel's toy shape with Llama 3's 128k vocabulary, the
 * hard case for masks), the CPU backend, the engine, Ollama's sampler chain
 * at temperature 1. For batch sizes B, B requests of T tokens each decode
 * (ignore_eos, so every run makes B x T tokens) without a grammar, then
 * with JSON mode and two JSON-schema grammars: the first run on a fresh
 * grammar (cold: every mask state is new) and later runs over the same
 * grammar object with other seeds (warm: masks of states seen before are
 * cached, as for an agent's repeated schema). Rounds alternate the
 * unconstrained and the warm runs; each figure is the best round. Reports
 * CPU ms per engine step (the process's CPU time over every thread: the
 * sampler and the grammar run on the step thread while the backend's pool
 * waits, so this counts their cost as the step's; on a shared machine wall
 * time would mostly measure the other jobs), the ratio to the unconstrained run, and the warm runs'
 * mask counters. Not a test.
 *
 *   bench/grammar MODEL.gguf [--batch 1,64] [--tokens 64] [--threads 2] [--runs 3]
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/buf.h"
#include "common/gguf.h"
#include "runtime/engine/backend.h"
#include "runtime/engine/engine.h"
#include "runtime/engine/sampler.h"
#include <jansson.h>

#include "runtime/grammar/gram.h"
#include "runtime/model/model.h"
#include "text/tokenizer.h"

/* An OpenAI strict-mode style schema (no length bounds), and the same with
 * maxLength on the strings: a bounded repetition makes every length a state
 * of its own, so its masks are rarely reused. */
static const char SCHEMA[] = "{\"type\":\"object\",\"properties\":{"
                             "\"name\":{\"type\":\"string\"},"
                             "\"age\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":150},"
                             "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\"}},"
                             "\"kind\":{\"enum\":[\"person\",\"place\",\"thing\"]},"
                             "\"notes\":{\"type\":\"string\"}},"
                             "\"required\":[\"name\",\"age\",\"tags\",\"kind\",\"notes\"],"
                             "\"additionalProperties\":false}";
static const char SCHEMA_MAXLEN[] =
    "{\"type\":\"object\",\"properties\":{"
    "\"name\":{\"type\":\"string\",\"maxLength\":400},"
    "\"age\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":150},"
    "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\",\"maxLength\":40}},"
    "\"notes\":{\"type\":\"string\"}},"
    "\"required\":[\"name\",\"age\",\"tags\",\"notes\"],\"additionalProperties\":false}";

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* CPU seconds of the whole process (every thread): on a machine shared with
 * other jobs, the work a step takes, where wall time also counts waiting. */
static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

struct run {
    double s;        /* CPU seconds of the process (cpu_now) */
    uint64_t steps;  /* engine steps */
    uint64_t tokens; /* tokens made */
};

/* B requests of T tokens; g NULL: unconstrained. */
static int run_batch(struct engine *e, int32_t n_vocab, int B, int T, struct gram *g,
                     uint64_t seed0, struct run *out)
{
    uint64_t ids[256];
    struct engine_metrics m0, m1;
    struct mf_err err = {0};
    int32_t prompt[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    engine_metrics(e, &m0);
    double t0 = cpu_now();
    for (int i = 0; i < B; i++) {
        struct sampler_params sp;
        struct sampler *smp;
        sampler_params_default(&sp);
        sp.temperature = 1.0f;
        sp.seed = seed0 + (uint64_t)i;
        prompt[7] = 100 + i; /* distinct prompts: no prefix-cache sharing effects */
        if (sampler_new(&smp, n_vocab, &sp, &err) || (g && sampler_set_grammar(smp, g, 8, &err))) {
            fprintf(stderr, "sampler: %s\n", err.msg);
            return -1;
        }
        struct engine_request rq = {
            .prompt = prompt, .n_prompt = 8, .max_tokens = T, .ignore_eos = 1, .sampling = smp};
        if (engine_submit(e, &rq, &ids[i], &err)) {
            fprintf(stderr, "submit: %s\n", err.msg);
            return -1;
        }
    }
    out->tokens = 0;
    for (int i = 0; i < B; i++) {
        for (;;) {
            struct engine_event ev;
            struct engine_summary sum;
            if (engine_next(e, ids[i], -1, &ev, &sum, &err)) {
                fprintf(stderr, "next: %s\n", err.msg);
                return -1;
            }
            if (ev.token >= 0)
                out->tokens++;
            if (ev.finish != SCHED_FINISH_NONE) {
                if (ev.finish == SCHED_FINISH_ERROR) {
                    fprintf(stderr, "request failed: %s\n", sum.err.msg);
                    return -1;
                }
                break;
            }
        }
    }
    out->s = cpu_now() - t0;
    engine_metrics(e, &m1);
    out->steps = m1.steps - m0.steps;
    return 0;
}

static int new_grammar(const char *which, const struct gram_vocab *v, struct gram **g)
{
    struct mf_buf src;
    struct mf_err err = {0};
    int rc;
    mf_buf_init(&src, 1 << 22);
    if (strcmp(which, "json") != 0) {
        json_t *s = json_loads(strcmp(which, "schema") ? SCHEMA_MAXLEN : SCHEMA, 0, NULL);
        rc = gram_schema_gbnf(s, "schema", &src, &err);
        json_decref(s);
    } else {
        rc = gram_json_gbnf(1, &src, &err);
    }
    if (!rc)
        rc = gram_new(src.data, src.len, v, g, &err);
    if (rc)
        fprintf(stderr, "grammar: %s\n", err.msg);
    mf_buf_free(&src);
    return rc;
}

int main(int argc, char **argv)
{
    const char *path = NULL;
    int batches[8] = {1, 64}, n_batches = 2, T = 64, threads = 2, runs = 3;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--batch") && i + 1 < argc) {
            n_batches = 0;
            for (char *p = argv[++i]; *p && n_batches < 8;) {
                batches[n_batches++] = (int)strtol(p, &p, 10);
                if (*p == ',')
                    p++;
            }
        } else if (!strcmp(argv[i], "--tokens") && i + 1 < argc) {
            T = (int)strtol(argv[++i], NULL, 10);
        } else if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
            threads = (int)strtol(argv[++i], NULL, 10);
        } else if (!strcmp(argv[i], "--runs") && i + 1 < argc) {
            runs = (int)strtol(argv[++i], NULL, 10);
        } else if (argv[i][0] != '-' && !path) {
            path = argv[i];
        } else {
            fprintf(stderr, "usage: bench/grammar MODEL.gguf [--batch 1,64] [--tokens N] "
                            "[--threads N] [--runs N]\n");
            return 2;
        }
    }
    if (!path) {
        fprintf(stderr, "usage: bench/grammar MODEL.gguf [--batch 1,64] [--tokens N]\n");
        return 2;
    }
    struct mf_err err = {0};
    struct model *m = NULL;
    struct tok *tok = NULL;
    struct gram_vocab *v = NULL;
    if (model_open(path, &m, &err) || tok_load_gguf(m->gf, &tok, &err) ||
        gram_vocab_new(tok, NULL, &v, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    double tv = now();
    gram_vocab_free(v);
    gram_vocab_new(tok, NULL, &v, &err);
    tv = now() - tv;
    int maxb = 0;
    for (int i = 0; i < n_batches; i++)
        maxb = batches[i] > maxb ? batches[i] : maxb;
    int32_t blocks = (int32_t)(maxb * ((8 + T) / 16 + 2));
    struct backend_config bc = {
        .n_threads = threads, .max_tokens = 512 > maxb ? 512 : maxb, .max_seqs = maxb};
    struct backend *be = NULL;
    int32_t n_blocks = 0;
    bc.kv_bytes = (uint64_t)blocks * backend_kv_block_bytes(m, bc.kv_type);
    if (backend_create(&cpu_backend_ops, m, &bc, &be, &err) ||
        backend_kv_alloc(be, &n_blocks, &err)) {
        fprintf(stderr, "backend: %s\n", err.msg);
        return 1;
    }
    struct engine_config ec = {0};
    ec.sched.max_num_seqs = maxb;
    ec.sched.max_num_batched_tokens = bc.max_tokens;
    ec.sched.max_model_len = 8 + T + 16;
    ec.sched.max_waiting = 1024;
    ec.n_kv_blocks = n_blocks;
    struct engine_model em = {
        .ctx = be, .n_vocab = (int32_t)m->hp.n_vocab, .n_loras = m->n_loras, .step = backend_engine_step};
    struct engine *e = NULL;
    if (engine_open(&ec, &em, &engine_sampler_std, &e, &err)) {
        fprintf(stderr, "engine: %s\n", err.msg);
        return 1;
    }
    printf("model %s: vocab %d, embd %d, layers %d; vocabulary trie %zu nodes (longest token %u "
           "bytes), built in %.0f ms; %d threads, %d tokens per request, best of %d\n",
           path, (int)m->hp.n_vocab, (int)m->hp.n_embd, (int)m->hp.n_layer, gram_vocab_nodes(v),
           gram_vocab_max_len(v), tv * 1e3, threads, T, runs);
    { /* one mask on its own, inside a JSON string: best of 10 */
        uint32_t *words = calloc(((size_t)gram_vocab_size(v) + 31) / 32, sizeof *words);
        double fresh = 1e9, known = 1e9, other = 1e9;
        uint64_t visits = 0;
        for (int k = 0; k < 10 && words; k++) {
            struct gram *g = NULL;
            struct gram_stats s0, s1;
            if (new_grammar("json", v, &g))
                return 1;
            uint32_t st = gram_feed(g, gram_start(g, &err), "{\"key\": \"te", 11, &err);
            gram_stats(g, &s0);
            double t = now();
            gram_mask(g, st, words, &err); /* transitions built as the walk goes */
            t = now() - t;
            gram_stats(g, &s1);
            fresh = t < fresh ? t : fresh;
            visits = s1.trie_visits - s0.trie_visits;
            /* a string in another context: its core's mask is known */
            uint32_t st2 = gram_feed(g, gram_start(g, &err), "{\"a\": [{\"b\": \"te", 14, &err);
            t = now();
            gram_mask(g, st2, words, &err);
            t = now() - t;
            other = t < other ? t : other;
            gram_drop_masks(g);
            t = now();
            gram_mask(g, st, words, &err); /* the walk alone */
            t = now() - t;
            known = t < known ? t : known;
            gram_unref(g);
        }
        printf("one mask inside a JSON string (%" PRIu64 " trie nodes visited): %.2f ms on a fresh "
               "grammar, %.2f ms (%.1f ns a node) over known transitions; %.3f ms for a string "
               "in another context (its core's mask known)\n",
               visits, fresh * 1e3, known * 1e3, known * 1e9 / (double)(visits ? visits : 1),
               other * 1e3);
        free(words);
    }
    printf("CPU ms per engine step (all threads; the machine is shared, so CPU time, not wall "
           "time)\n");
    printf("| batch | grammar | ms/step cold | x none | ms/step warm | x none | masks built "
           "(warm) | mask hits (warm) |\n|---:|---|---:|---:|---:|---:|---:|---:|\n");
    enum { K = 3 };
    const char *kinds[K] = {"json", "schema", "schema-maxlen"};
    for (int bi = 0; bi < n_batches; bi++) {
        int B = batches[bi];
        struct gram *g[K] = {0};
        double cold[K], warm[K], none = 1e9;
        struct gram_stats s0[K], s1[K];
        struct run r;
        for (int k = 0; k < K; k++) { /* cold: the first run over a fresh grammar */
            if (new_grammar(kinds[k], v, &g[k]) || run_batch(e, em.n_vocab, B, T, g[k], 1000, &r))
                return 1;
            cold[k] = r.s * 1e3 / (double)r.steps;
            warm[k] = 1e9;
            gram_stats(g[k], &s0[k]);
        }
        /* rounds alternate the unconstrained run and each grammar's warm run,
           so load from other processes hits them alike; the best of each */
        for (int round = 0; round < runs; round++) {
            uint64_t seed = 2000 + 100 * (uint64_t)round;
            if (run_batch(e, em.n_vocab, B, T, NULL, seed, &r))
                return 1;
            none = r.s * 1e3 / (double)r.steps < none ? r.s * 1e3 / (double)r.steps : none;
            for (int k = 0; k < K; k++) {
                if (run_batch(e, em.n_vocab, B, T, g[k], seed, &r))
                    return 1;
                double ms = r.s * 1e3 / (double)r.steps;
                warm[k] = ms < warm[k] ? ms : warm[k];
            }
        }
        printf("| %d | none | %.3f | 1.00 | %.3f | 1.00 | - | - |\n", B, none, none);
        for (int k = 0; k < K; k++) {
            gram_stats(g[k], &s1[k]);
            printf("| %d | %s | %.3f | %.2f | %.3f | %.2f | %" PRIu64 " | %" PRIu64 " |\n", B,
                   kinds[k], cold[k], cold[k] / none, warm[k], warm[k] / none,
                   s1[k].mask_builds - s0[k].mask_builds, s1[k].mask_hits - s0[k].mask_hits);
            gram_unref(g[k]);
        }
    }
    engine_close(e);
    backend_free(be);
    gram_vocab_free(v);
    tok_free(tok);
    model_close(m);
    return 0;
}
