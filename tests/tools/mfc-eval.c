/*
 * mfc-eval.c: runs token ids through mfc's engine (model + CPU backend,
 * optional runtime LoRA) and prints JSON, for the numerics tests against
 * llama.cpp and for bench/engine.
 *
 *   mfc-eval --model M.gguf [--lora A.gguf [--lora-scale S]]... --tokens 1,2,3
 *            [--n N] [--threads N] [--kv f16|f32] [--chunk N] [--kernels NAME] [--ctx N]
 *   mfc-eval --model M.gguf --bench PP,TG [--threads N] [--chunk N] [--seqs S]
 *
 * Eval mode prints {"n_vocab", "kernels", "logits": [...] (after the last
 * prompt token), "generated": [...] (N greedy tokens, lowest id on ties)}.
 * Bench mode prefills PP seeded-random tokens (in --chunk steps, default
 * 512 like llama.cpp's n_batch), then decodes TG tokens one step each, and
 * prints {"prefill_tps", "decode_tps", ...}: the llama-bench pp/tg figures,
 * plus the CPU time each phase used (on a shared machine, wall time also
 * counts the time other processes held the cores). With --seqs S, S
 * sequences are prefilled one after another and then decode together, one
 * token each per step (continuous batching): decode_tps counts all of them.
 * Owns everything it opens; exits 1 with the reason on stderr.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/err.h"
#include "common/num.h"
#include "runtime/engine/backend.h"
#include "runtime/model/lora.h"
#include "runtime/model/model.h"

#define MAX_ADAPTERS 8
#define MAX_TOKENS 65536

struct opts {
    const char *model;                  /* --model */
    const char *lora[MAX_ADAPTERS];     /* --lora, in order */
    float lora_scale[MAX_ADAPTERS];     /* --lora-scale for the adapter before it */
    int n_lora;
    int32_t *tokens;                    /* owned: --tokens */
    int32_t n_tokens;
    int32_t n_gen;                      /* --n */
    int32_t chunk;                      /* --chunk: tokens per prefill step */
    int32_t bench_pp, bench_tg;         /* --bench */
    int32_t n_seqs;                     /* --seqs: sequences decoding together (bench) */
    int32_t n_ctx;                      /* --ctx: the context a sequence may reach (LongRoPE's
                                           factors); 0: the model's training context */
    struct backend_config cfg;          /* --threads, --kv, --kernels */
};

static int parse_i32(const char *s, int32_t lo, int32_t hi, int32_t *out, struct mf_err *err)
{
    int64_t v;

    if (mf_num_parse_i64(s, &v) || v < lo || v > hi)
        return mf_err_set(err, MF_EUSAGE, "'%s' is not a number in %" PRId32 "..%" PRId32, s, lo,
                          hi);
    *out = (int32_t)v;
    return 0;
}

static int parse_tokens(const char *s, struct opts *o, struct mf_err *err)
{
    char buf[32];
    int rc;

    o->tokens = malloc(MAX_TOKENS * sizeof *o->tokens);
    if (!o->tokens)
        return mf_err_set(err, MF_ENOMEM, "out of memory");
    while (*s) {
        size_t n = strcspn(s, ",");
        if (n == 0 || n >= sizeof buf || o->n_tokens >= MAX_TOKENS)
            return mf_err_set(err, MF_EUSAGE, "bad --tokens list");
        memcpy(buf, s, n);
        buf[n] = 0;
        rc = parse_i32(buf, 0, INT32_MAX, &o->tokens[o->n_tokens++], err);
        if (rc)
            return rc;
        s += n + (s[n] == ',');
    }
    return 0;
}

static int parse_args(int argc, char **argv, struct opts *o, struct mf_err *err)
{
    int rc = 0;

    o->chunk = 512;
    o->n_seqs = 1;
    for (int i = 1; i < argc && !rc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        double d;
        if (!v)
            return mf_err_set(err, MF_EUSAGE, "%s needs a value", a);
        i++;
        if (strcmp(a, "--model") == 0)
            o->model = v;
        else if (strcmp(a, "--lora") == 0 && o->n_lora < MAX_ADAPTERS) {
            o->lora_scale[o->n_lora] = 1.0f;
            o->lora[o->n_lora++] = v;
        } else if (strcmp(a, "--lora-scale") == 0 && o->n_lora > 0) {
            if (mf_num_parse_f64(v, &d))
                return mf_err_set(err, MF_EUSAGE, "bad --lora-scale '%s'", v);
            o->lora_scale[o->n_lora - 1] = (float)d;
        } else if (strcmp(a, "--tokens") == 0)
            rc = parse_tokens(v, o, err);
        else if (strcmp(a, "--n") == 0)
            rc = parse_i32(v, 0, MAX_TOKENS, &o->n_gen, err);
        else if (strcmp(a, "--seqs") == 0)
            rc = parse_i32(v, 1, 256, &o->n_seqs, err);
        else if (strcmp(a, "--chunk") == 0)
            rc = parse_i32(v, 1, MAX_TOKENS, &o->chunk, err);
        else if (strcmp(a, "--ctx") == 0)
            rc = parse_i32(v, 1, INT32_MAX, &o->n_ctx, err);
        else if (strcmp(a, "--threads") == 0)
            rc = parse_i32(v, 1, 1024, &o->cfg.n_threads, err);
        else if (strcmp(a, "--kernels") == 0)
            o->cfg.kernels = v;
        else if (strcmp(a, "--kv") == 0 && (!strcmp(v, "f16") || !strcmp(v, "f32")))
            o->cfg.kv_type = strcmp(v, "f32") == 0 ? BACKEND_KV_F32 : BACKEND_KV_F16;
        else if (strcmp(a, "--bench") == 0) {
            char *comma = strchr(v, ',');
            if (!comma)
                return mf_err_set(err, MF_EUSAGE, "--bench wants PP,TG");
            *comma = 0;
            rc = parse_i32(v, 1, MAX_TOKENS, &o->bench_pp, err);
            if (!rc)
                rc = parse_i32(comma + 1, 1, MAX_TOKENS, &o->bench_tg, err);
        } else
            return mf_err_set(err, MF_EUSAGE, "unknown or misplaced argument %s", a);
    }
    if (!rc && !o->model)
        rc = mf_err_set(err, MF_EUSAGE, "--model is required");
    if (!rc && !o->n_tokens && !o->bench_pp)
        rc = mf_err_set(err, MF_EUSAGE, "--tokens or --bench is required");
    return rc;
}

/* ---- a single sequence over blocks 0.. of the arena ---------------------- */

struct seq {
    struct backend *be;     /* borrowed */
    int32_t *table;         /* owned: block ids 0..n_blocks-1 */
    int32_t n_blocks;       /* arena blocks */
    int32_t n_past;         /* tokens in the KV */
    struct batch_lora lora; /* adapters of the sequence */
    float *logits;          /* owned: n_vocab */
};

/* Computes tokens[0..n) after n_past, in steps of at most chunk tokens; the
 * last step asks for logits. */
static int feed(struct seq *sq, const int32_t *tokens, int32_t n, int32_t chunk,
                struct mf_err *err)
{
    for (int32_t at = 0; at < n; at += chunk) {
        int32_t k = n - at < chunk ? n - at : chunk;
        struct batch_seq bs = {
            .tokens = tokens + at,
            .n_tokens = k,
            .n_past = sq->n_past,
            .block_table = sq->table,
            .n_blocks = sq->n_blocks,
            .lora = sq->lora,
            .want_logits = at + k == n,
        };
        struct batch b = {.n_seqs = 1, .seqs = &bs, .logits = sq->logits};
        int rc = backend_step(sq->be, &b, err);
        if (rc)
            return rc;
        sq->n_past += k;
    }
    return 0;
}

static int32_t argmax(const float *v, int32_t n)
{
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (v[i] > v[best])
            best = i;
    return best;
}

static double clock_s(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int eval(const struct model *m, struct seq *sq, const struct opts *o, struct mf_err *err)
{
    int32_t tok;
    int rc = feed(sq, o->tokens, o->n_tokens, o->chunk, err);

    if (rc)
        return rc;
    printf("{\"n_vocab\": %" PRId32 ", \"logits\": [", m->hp.n_vocab);
    for (int32_t i = 0; i < m->hp.n_vocab; i++)
        printf("%s%.9g", i ? ", " : "", (double)sq->logits[i]);
    printf("], \"generated\": [");
    for (int32_t i = 0; i < o->n_gen; i++) {
        tok = argmax(sq->logits, m->hp.n_vocab);
        printf("%s%" PRId32, i ? ", " : "", tok);
        if (i + 1 < o->n_gen && (rc = feed(sq, &tok, 1, 1, err)))
            return rc;
    }
    printf("]}\n");
    return 0;
}

/* One decode step for the n sequences at sq[0..n), each feeding its own
 * greedy token; logits go to logits + i * n_vocab. */
static int decode_all(struct seq *sq, int32_t n, int32_t n_vocab, float *logits,
                      struct mf_err *err)
{
    struct batch_seq bs[256];
    int32_t tok[256];
    struct batch b = {.n_seqs = n, .seqs = bs, .logits = logits};
    int rc;

    for (int32_t i = 0; i < n; i++) {
        tok[i] = argmax(logits + (size_t)i * (size_t)n_vocab, n_vocab);
        bs[i] = (struct batch_seq){.tokens = &tok[i], .n_tokens = 1, .n_past = sq[i].n_past,
                                   .block_table = sq[i].table, .n_blocks = sq[i].n_blocks,
                                   .want_logits = 1};
    }
    rc = backend_step(sq[0].be, &b, err);
    for (int32_t i = 0; !rc && i < n; i++)
        sq[i].n_past++;
    return rc;
}

static int bench(const struct model *m, struct seq *sq, const struct opts *o, struct mf_err *err)
{
    const int32_t nv = m->hp.n_vocab, ns = o->n_seqs;
    int32_t *toks = malloc((size_t)o->bench_pp * sizeof *toks);
    float *logits = malloc((size_t)ns * (size_t)nv * sizeof *logits);
    uint64_t r = 0x9e3779b97f4a7c15ull;
    double t0, t1, t2, c0, c1, c2;
    int rc = 0;

    if (!toks || !logits) {
        free(toks);
        free(logits);
        return mf_err_set(err, MF_ENOMEM, "out of memory");
    }
    for (int32_t i = 0; i < o->bench_pp; i++) {
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        toks[i] = (int32_t)(r % (uint64_t)nv);
    }
    t0 = clock_s(CLOCK_MONOTONIC);
    c0 = clock_s(CLOCK_PROCESS_CPUTIME_ID);
    for (int32_t i = 0; !rc && i < ns; i++) {
        rc = feed(&sq[i], toks, o->bench_pp, o->chunk, err);
        memcpy(logits + (size_t)i * (size_t)nv, sq[i].logits, (size_t)nv * sizeof *logits);
    }
    t1 = clock_s(CLOCK_MONOTONIC);
    c1 = clock_s(CLOCK_PROCESS_CPUTIME_ID);
    for (int32_t i = 0; !rc && i < o->bench_tg; i++)
        rc = decode_all(sq, ns, nv, logits, err);
    t2 = clock_s(CLOCK_MONOTONIC);
    c2 = clock_s(CLOCK_PROCESS_CPUTIME_ID);
    free(toks);
    free(logits);
    if (rc)
        return rc;
    printf("{\"pp\": %" PRId32 ", \"tg\": %" PRId32 ", \"seqs\": %" PRId32
           ", \"prefill_tps\": %.3f, \"decode_tps\": %.3f, \"prefill_s\": %.4f, "
           "\"decode_s\": %.4f, \"prefill_cpu_s\": %.4f, \"decode_cpu_s\": %.4f}\n",
           o->bench_pp * ns, o->bench_tg * ns, ns, o->bench_pp * ns / (t1 - t0),
           o->bench_tg * ns / (t2 - t1), t1 - t0, t2 - t1, c1 - c0, c2 - c1);
    return 0;
}

/* Opens the model, attaches the adapters and sizes the arena for n
 * sequences of ctx tokens each; sequence i gets its own run of blocks. */
static int setup(struct opts *o, int32_t ctx, struct model **m, struct seq *sq, struct mf_err *err)
{
    struct lora *l;
    struct batch_lora lo = {0};
    int32_t id, per, n = o->n_seqs, total;
    int rc = model_open(o->model, m, err);

    if (!rc && o->n_ctx)
        model_set_ctx(*m, o->n_ctx);
    for (int i = 0; !rc && i < o->n_lora; i++) {
        rc = lora_open(*m, o->lora[i], &l, err);
        if (!rc)
            rc = model_add_lora(*m, l, &id, err);
        if (!rc) {
            lo.ids[lo.n] = id;
            lo.scales[lo.n++] = lora_scale(l, o->lora_scale[i]);
        }
    }
    if (rc)
        return rc;
    per = (ctx + KV_BLOCK_TOKENS - 1) / KV_BLOCK_TOKENS;
    o->cfg.kv_bytes = (uint64_t)per * (uint64_t)n * backend_kv_block_bytes(*m, o->cfg.kv_type);
    o->cfg.max_tokens = o->chunk > n ? o->chunk : n;
    rc = backend_create(&cpu_backend_ops, *m, &o->cfg, &sq[0].be, err);
    if (!rc)
        rc = backend_kv_alloc(sq[0].be, &total, err);
    if (rc)
        return rc;
    for (int32_t i = 0; i < n; i++) {
        sq[i].be = sq[0].be;
        sq[i].lora = lo;
        sq[i].n_blocks = per;
        sq[i].table = malloc((size_t)per * sizeof *sq[i].table);
        sq[i].logits = malloc((size_t)(*m)->hp.n_vocab * sizeof *sq[i].logits);
        if (!sq[i].table || !sq[i].logits)
            return mf_err_set(err, MF_ENOMEM, "out of memory");
        for (int32_t b = 0; b < per; b++)
            sq[i].table[b] = i * per + b;
    }
    return 0;
}

int main(int argc, char **argv)
{
    struct opts o = {0};
    struct model *m = NULL;
    struct seq *sq = NULL;
    struct mf_err err = {0};
    int rc = parse_args(argc, argv, &o, &err);

    if (!rc && !(sq = calloc((size_t)o.n_seqs, sizeof *sq)))
        rc = mf_err_set(&err, MF_ENOMEM, "out of memory");
    if (!rc)
        rc = setup(&o, o.bench_pp ? o.bench_pp + o.bench_tg : o.n_tokens + o.n_gen, &m, sq, &err);
    if (!rc)
        rc = o.bench_pp ? bench(m, sq, &o, &err) : eval(m, sq, &o, &err);
    if (rc)
        fprintf(stderr, "mfc-eval: %s\n", err.msg);
    for (int32_t i = 0; sq && i < o.n_seqs; i++) {
        free(sq[i].table);
        free(sq[i].logits);
    }
    if (sq)
        backend_free(sq[0].be);
    free(sq);
    model_close(m);
    free(o.tokens);
    return rc ? (rc == MF_EUSAGE ? 2 : 1) : 0;
}
