/*
 * spec_bench.c: what speculative decoding buys, through the whole engine
 * (runtime/engine/engine.h) on the CPU or CUDA backend.
 *
 *   spec_bench --model M.gguf | --synth SHAPE TYPE  [--draft D.gguf] [--device cpu|cuda] [--threads
 * N]
 *              [--k K] [--tokens N] [--prompt N] [--batch B] [--runs R] [--p-min P]
 *              [--modes off,oracle,never,never-fixed,lookup,copy,draft,auto]
 *              [--copy-text FILE | --copy-tokens FILE]
 *
 * Each mode runs B requests at once, greedy, N tokens each past a prompt of
 * P tokens (seeded, distinct per request), and reports decode tokens/s
 * (first token to last, wall clock; and per CPU-second of the process over
 * the same span, which on a shared machine is the figure other jobs do not
 * move, with one thread) and the
 * speed-up against "off", the same requests without speculation, measured
 * in the same process (best of R rounds each):
 *
 *   off          no speculation (the baseline; its tokens become the oracle)
 *   oracle       the benchmark-only script of the target's own greedy tokens,
 *                recorded by "off", k = K proposals every step (acceptance 1
 *                at no drafting cost: the mechanics' ceiling)
 *   never-fixed  a script that is never right, K proposals every step (the
 *                cost of verifying what is always rejected)
 *   never        the same script under the engine's policy (adaptive k, the
 *                throughput guard): what a hopeless proposer costs in practice
 *   lookup       prompt lookup under the engine's policy
 *   copy         prompt lookup (as "lookup"), named for the copy-heavy prompts:
 *                with --copy-text (its tokens through the model's tokenizer,
 *                twice) or --copy-tokens (ids, whitespace-separated, as they
 *                are), every mode's requests take that prompt
 *   draft        the --draft model under the engine's policy
 *   auto         prompt lookup under the policy, max_batch and guard as
 *                mfc-serve runs them (the batch-64 "never below off" check)
 * Every mode's tokens are checked against "off" (greedy: they must be
 * equal); a mismatch is reported and the exit status is 1.
 *
 * --synth SHAPE TYPE: the model is synthesized in memory as bench/cuda_bench
 * makes its own (bench/bench_synth.c: 1b, llama3-8b, ...; f16, bf16, q8_0,
 * q4_k_m, q4_k), so a GPU host needs no model file; its tokens are
 * meaningless, which the mechanics (oracle, never) do not mind.
 *
 * Prints one line per mode; bench/spec runs it on mkmodel's models.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/err.h"
#include "common/gguf.h"
#include "common/num.h"
#include "runtime/cuda/cuda.h"
#include "runtime/engine/backend.h"
#include "runtime/engine/engine.h"
#include "runtime/model/model.h"
#include "text/tokenizer.h"
#include "bench/bench_synth.h"

#define MAX_B 256
#define MAX_MODES 8

struct opts {
    const char *model, *draft, *device, *copy_text, *copy_tokens;
    const char *synth_shape, *synth_type; /* --synth */
    int32_t threads, k, tokens, prompt, batch, runs;
    double p_min; /* draft_p_min; < 0: the default */
    char modes[256];
};

struct req {
    int32_t *prompt; /* owned */
    int32_t n_prompt;
    int32_t *out; /* owned: tokens received */
    int32_t n_out;
    int32_t *script; /* owned: proposals by position, or NULL */
    struct engine_summary sum;
};

struct bench {
    struct opts o;
    struct model *m, *dm;
    const struct backend_ops *ops;
    struct backend *be, *db;
    int32_t n_blocks, d_blocks;
    int32_t max_prompt;  /* the longest prompt, tokens */
    int32_t *ref[MAX_B]; /* "off"'s tokens per request */
    int32_t n_ref[MAX_B];
    double off_tps, off_cps;
};

static double now(clockid_t c)
{
    struct timespec ts;
    clock_gettime(c, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int usage(void)
{
    fprintf(stderr, "usage: spec_bench --model M.gguf | --synth SHAPE TYPE [--draft D.gguf] "
                    "[--device cpu|cuda] "
                    "[--threads N] [--k K] [--tokens N] [--prompt N] [--batch B] [--runs R] "
                    "[--p-min P] "
                    "[--modes LIST] [--copy-text FILE | --copy-tokens FILE]\n");
    return 2;
}

static int int_arg(const char *s, int32_t lo, int32_t hi, int32_t *out)
{
    int64_t v;
    if (mf_num_parse_i64(s, &v) || v < lo || v > hi)
        return -1;
    *out = (int32_t)v;
    return 0;
}

static int parse(int argc, char **argv, struct opts *o)
{
    *o = (struct opts){.device = "cpu",
                       .threads = 1,
                       .k = 4,
                       .tokens = 128,
                       .prompt = 32,
                       .batch = 1,
                       .runs = 2,
                       .p_min = -1};
    snprintf(o->modes, sizeof o->modes, "off,oracle,never-fixed,never,lookup");
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int bad = !v;
        if (!strcmp(a, "--model") && v)
            o->model = v;
        else if (!strcmp(a, "--draft") && v)
            o->draft = v;
        else if (!strcmp(a, "--device") && v)
            o->device = v;
        else if (!strcmp(a, "--copy-text") && v)
            o->copy_text = v;
        else if (!strcmp(a, "--copy-tokens") && v)
            o->copy_tokens = v;
        else if (!strcmp(a, "--synth") && v && i + 2 < argc) {
            o->synth_shape = v;
            o->synth_type = argv[++i + 1];
        } else if (!strcmp(a, "--modes") && v)
            snprintf(o->modes, sizeof o->modes, "%s", v);
        else if (!strcmp(a, "--threads") && v)
            bad = int_arg(v, 1, 512, &o->threads);
        else if (!strcmp(a, "--k") && v)
            bad = int_arg(v, 1, SPEC_MAX_DRAFT, &o->k);
        else if (!strcmp(a, "--tokens") && v)
            bad = int_arg(v, 2, 4096, &o->tokens);
        else if (!strcmp(a, "--prompt") && v)
            bad = int_arg(v, 1, 4096, &o->prompt);
        else if (!strcmp(a, "--batch") && v)
            bad = int_arg(v, 1, MAX_B, &o->batch);
        else if (!strcmp(a, "--runs") && v)
            bad = int_arg(v, 1, 100, &o->runs);
        else if (!strcmp(a, "--p-min") && v)
            bad = mf_num_parse_f64(v, &o->p_min) || o->p_min < 0 || o->p_min > 1;
        else
            return usage();
        if (bad)
            return usage();
        i++;
    }
    return o->model || o->synth_shape ? 0 : usage();
}

/* A backend for m with room for B sequences of the bench's length. */
static int backend_for(struct bench *b, const struct model *m, struct backend **out,
                       int32_t *n_blocks, struct mf_err *err)
{
    int32_t per = (b->max_prompt + b->o.tokens + SPEC_MAX_DRAFT + 32) / KV_BLOCK_TOKENS + 2;
    struct backend_config bc = {.n_threads = b->o.threads,
                                .max_tokens = 2048,
                                .max_seqs = b->o.batch,
                                .max_logits = b->o.batch * (1 + b->o.k)};
    int rc;
    if (bc.max_logits > bc.max_tokens)
        bc.max_logits = bc.max_tokens;
    bc.kv_bytes = (uint64_t)per * (uint64_t)b->o.batch * backend_kv_block_bytes(m, bc.kv_type);
    rc = backend_create(b->ops, m, &bc, out, err);
    return rc ? rc : backend_kv_alloc(*out, n_blocks, err);
}

/* A fresh engine for one mode (a fresh one each, so no prefix cache and no
 * policy state carries over between modes). */
static int engine_for(struct bench *b, enum spec_source src, int fixed, int guard,
                      struct engine_model *dm, struct engine **e, struct mf_err *err)
{
    struct engine_config ec = {0};
    struct engine_model em = {.ctx = b->be,
                              .n_vocab = (int32_t)b->m->hp.n_vocab,
                              .step = backend_engine_step,
                              .logits_alloc = backend_engine_alloc,
                              .logits_free = backend_engine_free,
                              .max_tokens = 2048};
    ec.sched.max_num_seqs = b->o.batch;
    ec.sched.max_num_batched_tokens = 2048;
    ec.sched.max_num_logits = b->o.batch * (1 + b->o.k) < 2048 ? b->o.batch * (1 + b->o.k) : 2048;
    ec.sched.max_model_len = b->n_blocks * KV_BLOCK_TOKENS;
    ec.sched.max_waiting = MAX_B;
    ec.n_kv_blocks = b->n_blocks;
    spec_config_default(&ec.spec, src);
    ec.spec.draft_max = b->o.k;
    if (b->o.p_min >= 0)
        ec.spec.p_min = (float)b->o.p_min;
    ec.spec.fixed_k = fixed;
    ec.spec.no_guard = !guard;
    if (!guard)
        ec.spec.max_batch = 0;
    if (src == SPEC_DRAFT) {
        *dm = (struct engine_model){.ctx = b->db,
                                    .n_vocab = (int32_t)b->dm->hp.n_vocab,
                                    .step = backend_engine_step,
                                    .logits_alloc = backend_engine_alloc,
                                    .logits_free = backend_engine_free,
                                    .max_tokens = 2048};
        ec.draft = dm;
        ec.spec.draft_kv_blocks = b->d_blocks;
    }
    return engine_open(&ec, &em, NULL, e, err);
}

/* The ids of --copy-tokens, whitespace-separated. */
static int copy_ids(struct bench *b, int32_t **out, int32_t *n, struct mf_err *err)
{
    FILE *f = fopen(b->o.copy_tokens, "r");
    int32_t *v = NULL, cap = 0, k = 0;
    long long x;
    if (!f)
        return mf_err_set(err, MF_EIO, "%s: cannot open", b->o.copy_tokens);
    while (fscanf(f, "%lld", &x) == 1 && k < 1 << 20) {
        if (x < 0 || x >= b->m->hp.n_vocab) {
            fclose(f);
            free(v);
            return mf_err_set(err, MF_EINVAL, "%s: token %lld is outside the vocabulary",
                              b->o.copy_tokens, x);
        }
        if (k == cap) {
            cap = cap ? cap * 2 : 1024;
            int32_t *p = realloc(v, (size_t)cap * sizeof *p);
            if (!p)
                break;
            v = p;
        }
        v[k++] = (int32_t)x;
    }
    fclose(f);
    if (!k) {
        free(v);
        return mf_err_set(err, MF_EINVAL, "%s: no token ids", b->o.copy_tokens);
    }
    *out = v;
    *n = k;
    return 0;
}

/* Tokens of --copy-text (through the model's tokenizer), twice, as the
 * prompt: the second copy is what a copying continuation repeats. */
static int copy_prompt(struct bench *b, int32_t **out, int32_t *n, struct mf_err *err)
{
    struct tok *t = NULL;
    struct tok_ids ids;
    char *text = NULL;
    size_t len = 0, cap = 0;
    FILE *f;
    if (!b->m->gf)
        return mf_err_set(err, MF_EINVAL, "--copy-text needs a model file's tokenizer");
    f = fopen(b->o.copy_text, "rb");
    int rc;
    if (!f)
        return mf_err_set(err, MF_EIO, "%s: cannot open", b->o.copy_text);
    for (int c; (c = fgetc(f)) != EOF && len < (1u << 20);) {
        if (len + 1 >= cap) {
            cap = cap ? cap * 2 : 4096;
            char *p = realloc(text, cap);
            if (!p)
                break;
            text = p;
        }
        text[len++] = (char)c;
    }
    fclose(f);
    tok_ids_init(&ids, 1u << 20);
    rc = text ? tok_load_gguf(b->m->gf, &t, err) : mf_err_set(err, MF_ENOMEM, "out of memory");
    if (!rc)
        rc = tok_encode(t, text, len, TOK_ADD_SPECIAL, &ids, err);
    if (!rc)
        rc = tok_encode(t, text, len, 0, &ids, err);
    tok_free(t);
    free(text);
    if (!rc) {
        *out = ids.v;
        *n = (int32_t)ids.n;
        return 0;
    }
    tok_ids_free(&ids);
    return rc;
}

/* One round of B requests; fills each req's tokens and summary. */
/* One round of B requests; fills each req's tokens and summary, and
 * *cpu0 with the process CPU clock when the first token arrived (the
 * prompts are in by then: one step takes them all). */
static int run_round(struct bench *b, struct engine *e, struct req *rq, int no_spec, double *cpu0,
                     struct mf_err *err)
{
    uint64_t ids[MAX_B];
    for (int32_t i = 0; i < b->o.batch; i++) {
        struct engine_request r = {.prompt = rq[i].prompt,
                                   .n_prompt = rq[i].n_prompt,
                                   .max_tokens = b->o.tokens,
                                   .ignore_eos = 1,
                                   .no_spec = no_spec,
                                   .spec_script = rq[i].script,
                                   .n_spec_script = rq[i].script ? b->o.tokens : 0};
        rq[i].n_out = 0;
        int rc = engine_submit(e, &r, &ids[i], err);
        if (rc)
            return rc;
    }
    for (int32_t i = 0; i < b->o.batch; i++) {
        for (;;) {
            struct engine_event ev;
            int rc = engine_next(e, ids[i], 600000, &ev, &rq[i].sum, err);
            if (rc)
                return rc;
            if (i == 0 && rq[i].n_out == 0)
                *cpu0 = now(CLOCK_PROCESS_CPUTIME_ID);
            if (ev.token >= 0 && rq[i].n_out < b->o.tokens)
                rq[i].out[rq[i].n_out++] = ev.token;
            if (ev.finish != SCHED_FINISH_NONE)
                break;
        }
        if (rq[i].sum.finish == SCHED_FINISH_ERROR)
            return mf_err_set(err, MF_EIO, "request %d: %s", i, rq[i].sum.err.msg);
    }
    return 0;
}

/* Decode tokens/s of a round: tokens after the first over the span from
 * the earliest first token to the latest finish. */
static double decode_tps(const struct bench *b, const struct req *rq)
{
    double t0 = 1e30, t1 = 0;
    int64_t n = 0;
    for (int32_t i = 0; i < b->o.batch; i++) {
        t0 = rq[i].sum.ttft_s < t0 ? rq[i].sum.ttft_s : t0;
        t1 = rq[i].sum.e2e_s > t1 ? rq[i].sum.e2e_s : t1;
        n += rq[i].n_out - 1;
    }
    return t1 > t0 ? (double)n / (t1 - t0) : 0;
}

static int run_mode(struct bench *b, const char *mode, struct req *rq, struct mf_err *err)
{
    enum spec_source src = SPEC_LOOKUP;
    int fixed = 0, guard = 1, no_spec = 0, rc = 0;
    struct engine_model dm;
    struct engine *e = NULL;
    double best = 0, best_c = 0;
    uint64_t prop = 0, acc = 0;

    for (int32_t i = 0; i < b->o.batch; i++) {
        free(rq[i].script);
        rq[i].script = NULL;
    }
    if (!strcmp(mode, "off")) {
        no_spec = 1;
    } else if (!strcmp(mode, "oracle") || !strncmp(mode, "never", 5)) {
        int never = mode[0] == 'n';
        fixed = !never || !strcmp(mode, "never-fixed");
        guard = !fixed;
        for (int32_t i = 0; i < b->o.batch; i++) {
            rq[i].script = malloc((size_t)b->o.tokens * sizeof *rq[i].script);
            if (!rq[i].script || !b->ref[i])
                return mf_err_set(err, MF_EINVAL, "%s needs the \"off\" mode first", mode);
            for (int32_t t = 0; t < b->o.tokens; t++)
                rq[i].script[t] =
                    never ? (b->ref[i][t] + 1) % (int32_t)b->m->hp.n_vocab : b->ref[i][t];
        }
    } else if (!strcmp(mode, "draft")) {
        if (!b->db)
            return mf_err_set(err, MF_EINVAL, "draft needs --draft");
        src = SPEC_DRAFT;
    } else if (strcmp(mode, "lookup") && strcmp(mode, "copy") && strcmp(mode, "auto")) {
        return mf_err_set(err, MF_EINVAL, "unknown mode %s", mode);
    }
    if (!strcmp(mode, "lookup") || !strcmp(mode, "copy"))
        guard = 0; /* the proposer alone; "auto" adds the guard */
    for (int32_t r = 0; !rc && r < b->o.runs; r++) {
        double c0 = 0;
        rc = engine_for(b, src, fixed, guard, &dm, &e, err);
        if (!rc)
            rc = run_round(b, e, rq, no_spec, &c0, err);
        double cpu = now(CLOCK_PROCESS_CPUTIME_ID) - c0;
        if (!rc) {
            double tps = decode_tps(b, rq);
            /* decode tokens per CPU-second: after the first token, to the end */
            double cps = cpu > 0 ? (double)b->o.batch * (b->o.tokens - 1) / cpu : 0;
            best = tps > best ? tps : best;
            best_c = cps > best_c ? cps : best_c;
            prop = acc = 0;
            for (int32_t i = 0; i < b->o.batch; i++) {
                prop += rq[i].sum.n_proposed;
                acc += rq[i].sum.n_accepted;
            }
        }
        engine_close(e);
        e = NULL;
    }
    if (rc)
        return rc;
    int same = 1;
    for (int32_t i = 0; i < b->o.batch; i++) {
        if (!strcmp(mode, "off")) {
            free(b->ref[i]);
            b->ref[i] = malloc((size_t)b->o.tokens * sizeof *b->ref[i]);
            if (!b->ref[i])
                return mf_err_set(err, MF_ENOMEM, "out of memory");
            memcpy(b->ref[i], rq[i].out, (size_t)rq[i].n_out * sizeof *rq[i].out);
            b->n_ref[i] = rq[i].n_out;
        } else if (b->ref[i] && (rq[i].n_out != b->n_ref[i] ||
                                 memcmp(rq[i].out, b->ref[i], (size_t)rq[i].n_out * 4))) {
            same = 0;
        }
    }
    if (!strcmp(mode, "off")) {
        b->off_tps = best;
        b->off_cps = best_c;
    }
    printf("%-12s batch %3d  k %2d  decode %9.1f tok/s  x%5.2f  cpu %8.1f tok/cpu-s  x%5.2f  "
           "accepted %6" PRIu64 "/%-6" PRIu64 " %s\n",
           mode, b->o.batch, b->o.k, best, b->off_tps > 0 ? best / b->off_tps : 0, best_c,
           b->off_cps > 0 ? best_c / b->off_cps : 0, acc, prop,
           same ? "" : "TOKENS DIFFER FROM off");
    fflush(stdout);
    return same ? 0 : mf_err_set(err, MF_EINTEGRITY, "%s: tokens differ from off", mode);
}

static int make_requests(struct bench *b, struct req *rq, struct mf_err *err)
{
    int32_t *copy = NULL, n_copy = 0;
    int rc = 0;
    if ((b->o.copy_text || b->o.copy_tokens) &&
        (rc = b->o.copy_tokens ? copy_ids(b, &copy, &n_copy, err)
                               : copy_prompt(b, &copy, &n_copy, err)))
        return rc;
    for (int32_t i = 0; i < b->o.batch; i++) {
        free(rq[i].prompt);
        int32_t n = copy ? n_copy : b->o.prompt;
        rq[i].prompt = malloc((size_t)n * sizeof *rq[i].prompt);
        if (!rq[i].out)
            rq[i].out = malloc((size_t)b->o.tokens * sizeof *rq[i].out);
        if (!rq[i].prompt || !rq[i].out) {
            rc = mf_err_set(err, MF_ENOMEM, "out of memory");
            break;
        }
        for (int32_t t = 0; t < n; t++)
            rq[i].prompt[t] = copy ? copy[t]
                                   : (int32_t)((uint32_t)(i * 7919 + t * 104729 + 17) %
                                               (uint32_t)b->m->hp.n_vocab);
        rq[i].n_prompt = n;
        b->max_prompt = n > b->max_prompt ? n : b->max_prompt;
    }
    free(copy);
    return rc;
}

int main(int argc, char **argv)
{
    struct bench b = {0};
    struct req *rq;
    struct mf_err err;
    int rc = parse(argc, argv, &b.o), failed = 0;

    if (rc)
        return rc;
    b.ops = !strcmp(b.o.device, "cuda") ? &cuda_backend_ops : &cpu_backend_ops;
    rq = calloc((size_t)b.o.batch, sizeof *rq);
    rc = rq ? 0 : mf_err_set(&err, MF_ENOMEM, "out of memory");
    if (!rc && b.o.synth_shape) {
        for (size_t i = 0; i < bench_n_shapes && !b.m; i++)
            if (!strcmp(bench_shapes[i].name, b.o.synth_shape))
                b.m = bench_synth(&bench_shapes[i], b.o.synth_type);
        if (!b.m)
            rc = mf_err_set(&err, MF_EINVAL, "--synth: no shape %s", b.o.synth_shape);
        b.o.model = b.o.synth_shape;
    } else if (!rc) {
        rc = model_open(b.o.model, &b.m, &err);
    }
    if (!rc && b.o.draft)
        rc = model_open(b.o.draft, &b.dm, &err);
    if (!rc)
        rc = make_requests(&b, rq, &err);
    if (!rc)
        rc = backend_for(&b, b.m, &b.be, &b.n_blocks, &err);
    if (!rc && b.dm)
        rc = backend_for(&b, b.dm, &b.db, &b.d_blocks, &err);
    if (rc) {
        fprintf(stderr, "spec_bench: %s\n", err.msg);
        return 1;
    }
    printf("# %s on %s, %d thread(s); draft %s; %d-token prompts%s, %d tokens each\n", b.o.model,
           b.ops->name, b.o.threads, b.o.draft ? b.o.draft : "none", b.o.prompt,
           b.o.copy_text || b.o.copy_tokens ? " (the copy prompt instead)" : "", b.o.tokens);
    char *save = NULL;
    for (char *mode = strtok_r(b.o.modes, ",", &save); mode; mode = strtok_r(NULL, ",", &save)) {
        rc = run_mode(&b, mode, rq, &err);
        if (rc) {
            fprintf(stderr, "spec_bench: %s\n", err.msg);
            failed = 1;
        }
    }
    for (int32_t i = 0; i < b.o.batch; i++) {
        free(rq[i].prompt);
        free(rq[i].out);
        free(rq[i].script);
        free(b.ref[i]);
    }
    free(rq);
    backend_free(b.be);
    backend_free(b.db);
    if (!b.o.synth_shape) /* a synthesized model lives as long as the process */
        model_close(b.m);
    model_close(b.dm);
    return failed;
}
