/*
 * test_model.c: unit tests for the model loader, the CPU backend and runtime
 * LoRA (runtime/model/model.c, cpu*.c, lora.c).
 *
 * Models are written here with gguf_writer from seeded random weights (a
 * small llama with GQA, any weight type), so every refusal path can be
 * built by changing one thing: a missing tensor, a wrong shape, a weight
 * type or architecture mfc does not run, a LoRA pair of the wrong shape.
 *
 * The invariance tests demand bitwise equality, not a tolerance: every
 * kernel computes a token's value by the same instruction sequence whatever
 * else is in the batch, however rows are split over threads and however a
 * prompt is chunked (cpu_fwd.c's header states the invariant), so any
 * difference at all is a bug. SIMD against scalar is compared with a
 * tolerance, since their float sums run in different orders.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/gguf.h"
#include "common/quant.h"
#include "runtime/engine/backend.h"
#include "runtime/cpu/cpu_int.h"
#include "runtime/model/lora.h"
#include "runtime/model/model.h"

/* ------------------------------------------------------------------------
 * Writing test models
 * ---------------------------------------------------------------------- */

struct spec {
    const char *arch;       /* general.architecture */
    const char *gtype;      /* general.type, or NULL */
    int32_t n_layer, n_embd, n_ff, n_head, n_head_kv, n_vocab;
    enum ggml_type wtype;   /* projection type */
    int tied;               /* no output.weight */
    int rope_freqs;         /* write rope_freqs.weight */
    const char *drop;       /* leave this tensor out */
    const char *bad_shape;  /* give this tensor ne1 + 1 rows */
    const char *extra;      /* add this extra F32 tensor [n_embd] */
    enum ggml_type odd_type; /* type for blk.0.attn_q.weight when not F32 */
    uint64_t seed;
};

static const struct spec toy = {
    .arch = "llama", .n_layer = 2, .n_embd = 256, .n_ff = 512, .n_head = 4, .n_head_kv = 2,
    .n_vocab = 300, .wtype = GGML_TYPE_F32, .seed = 1,
};

static char tmp[64];

static int setup_dir(void **state)
{
    snprintf(tmp, sizeof tmp, "/tmp/mfc-test-model-XXXXXX");
    return mkdtemp(tmp) ? 0 : -1;
}

static int remove_dir(void **state)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    return system(cmd) == 0 ? 0 : -1;
}

static const char *path_in(const char *name, char *buf, size_t n)
{
    snprintf(buf, n, "%s/%s", tmp, name);
    return buf;
}

/* splitmix64: a tensor's values depend on (seed, name) only. */
static uint64_t mix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static float randn(uint64_t *s)
{
    float u = 0.0f;
    for (int i = 0; i < 4; i++)
        u += (float)(mix(s) >> 40) / (float)(1 << 24);
    return (u - 2.0f) * 1.7320508f; /* Irwin-Hall(4), unit variance */
}

struct tensor {
    char name[64];
    enum ggml_type type;
    uint64_t ne[2];
    int n_dims;
    float mean, sd; /* values: mean + sd * N(0,1) */
};

struct tlist {
    struct tensor t[64];
    int n;
};

static void add(struct tlist *l, const char *name, enum ggml_type type, uint64_t ne0, uint64_t ne1,
                float mean, float sd)
{
    struct tensor *t = &l->t[l->n++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->type = type;
    t->ne[0] = ne0;
    t->ne[1] = ne1;
    t->n_dims = ne1 ? 2 : 1;
    t->mean = mean;
    t->sd = sd;
}

/* The tensors of sp, in llama.cpp's order. */
static void model_tensors(const struct spec *sp, struct tlist *l)
{
    uint64_t q = (uint64_t)sp->n_embd, kv = (uint64_t)(sp->n_embd / sp->n_head * sp->n_head_kv);
    char name[64];

    l->n = 0;
    add(l, "token_embd.weight", sp->wtype, (uint64_t)sp->n_embd, (uint64_t)sp->n_vocab, 0, 0.5f);
    if (sp->rope_freqs)
        add(l, "rope_freqs.weight", GGML_TYPE_F32, (uint64_t)(sp->n_embd / sp->n_head / 2), 0,
            2.0f, 0.5f);
    for (int32_t i = 0; i < sp->n_layer; i++) {
        const char *nm[] = {"attn_norm", "attn_q", "attn_k", "attn_v", "attn_output",
                            "ffn_norm", "ffn_gate", "ffn_up", "ffn_down"};
        uint64_t in[] = {q, q, q, q, q, q, q, q, (uint64_t)sp->n_ff};
        uint64_t out[] = {0, q, kv, kv, q, 0, (uint64_t)sp->n_ff, (uint64_t)sp->n_ff, q};
        for (int k = 0; k < 9; k++) {
            snprintf(name, sizeof name, "blk.%d.%s.weight", i, nm[k]);
            if (out[k])
                add(l, name, sp->wtype, in[k], out[k], 0.0f, 0.06f);
            else
                add(l, name, GGML_TYPE_F32, in[k], 0, 1.0f, 0.05f);
        }
    }
    add(l, "output_norm.weight", GGML_TYPE_F32, q, 0, 1.0f, 0.05f);
    if (!sp->tied)
        add(l, "output.weight", sp->wtype, q, (uint64_t)sp->n_vocab, 0.0f, 0.06f);
    if (sp->extra)
        add(l, sp->extra, GGML_TYPE_F32, q, 0, 0.0f, 0.1f);
    for (int i = 0; i < l->n; i++) {
        if (sp->bad_shape && strcmp(l->t[i].name, sp->bad_shape) == 0)
            l->t[i].ne[1]++;
        if (sp->odd_type && strcmp(l->t[i].name, "blk.0.attn_q.weight") == 0)
            l->t[i].type = sp->odd_type;
        if (sp->drop && strcmp(l->t[i].name, sp->drop) == 0)
            l->t[i--] = l->t[--l->n];
    }
}

/* Writes the tensors' data: each row generated as floats and encoded. */
static void write_data(struct gguf_writer *w, const struct tlist *l, uint64_t seed)
{
    struct mf_err err = {0};

    for (int i = 0; i < l->n; i++) {
        const struct tensor *t = &l->t[i];
        uint64_t rows = t->ne[1] ? t->ne[1] : 1, rb;
        uint64_t s = seed * 1000003u + (uint64_t)i;
        float *f = malloc(t->ne[0] * sizeof *f);
        void *enc;

        assert_int_equal(ggml_type_row_size(t->type, t->ne[0], &rb), 0);
        enc = malloc(rb);
        for (uint64_t r = 0; r < rows; r++) {
            for (uint64_t k = 0; k < t->ne[0]; k++)
                f[k] = t->mean + t->sd * randn(&s);
            assert_int_equal(quant_quantize_row(t->type, f, enc, (int64_t)t->ne[0], &err), 0);
            assert_int_equal(gguf_writer_write(w, enc, rb, &err), 0);
        }
        free(f);
        free(enc);
    }
}

static void write_gguf(const char *path, const struct tlist *l, const struct spec *sp,
                       const char *adapter_type, float alpha)
{
    struct gguf_writer *w;
    struct mf_err err = {0};
    char key[64];

    assert_int_equal(gguf_writer_open(path, &w, &err), 0);
    assert_int_equal(gguf_writer_add_cstr(w, "general.architecture", sp->arch, &err), 0);
    if (sp->gtype)
        assert_int_equal(gguf_writer_add_cstr(w, "general.type", sp->gtype, &err), 0);
    if (adapter_type) {
        assert_int_equal(gguf_writer_add_cstr(w, "adapter.type", adapter_type, &err), 0);
        assert_int_equal(gguf_writer_add_f32(w, "adapter.lora.alpha", alpha, &err), 0);
    } else {
        struct {
            const char *k;
            int32_t v;
        } kv[] = {{"context_length", 512},         {"embedding_length", sp->n_embd},
                  {"feed_forward_length", sp->n_ff}, {"block_count", sp->n_layer},
                  {"attention.head_count", sp->n_head},
                  {"attention.head_count_kv", sp->n_head_kv}};
        for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++) {
            snprintf(key, sizeof key, "%s.%s", sp->arch, kv[i].k);
            assert_int_equal(gguf_writer_add_u32(w, key, (uint32_t)kv[i].v, &err), 0);
        }
        snprintf(key, sizeof key, "%s.attention.layer_norm_rms_epsilon", sp->arch);
        assert_int_equal(gguf_writer_add_f32(w, key, 1e-5f, &err), 0);
    }
    for (int i = 0; i < l->n; i++)
        assert_int_equal(gguf_writer_add_tensor(w, l->t[i].name, l->t[i].type,
                                                (uint32_t)l->t[i].n_dims, l->t[i].ne, &err),
                         0);
    write_data(w, l, sp->seed);
    assert_int_equal(gguf_writer_finish(w, &err), 0);
    gguf_writer_free(w);
}

static const char *write_model(const struct spec *sp, const char *name, char *buf, size_t n)
{
    struct tlist l;
    model_tensors(sp, &l);
    write_gguf(path_in(name, buf, n), &l, sp, NULL, 0);
    return buf;
}

/* An adapter of rank r for q, v and down (and output unless the base is
 * tied); bad: give blk.1.attn_v's lora_b the wrong output size. */
static const char *write_lora(const struct spec *base, int32_t r, float alpha, uint64_t seed,
                              const char *bad, const char *name, char *buf, size_t n)
{
    struct spec sp = *base;
    struct tlist l = {.n = 0};
    uint64_t kv = (uint64_t)(base->n_embd / base->n_head * base->n_head_kv);
    char nm[64];

    sp.gtype = "adapter";
    sp.seed = seed;
    for (int32_t i = 0; i < base->n_layer; i++) {
        snprintf(nm, sizeof nm, "blk.%d.attn_q.weight.lora_a", i);
        add(&l, nm, GGML_TYPE_F32, (uint64_t)base->n_embd, (uint64_t)r, 0, 0.1f);
        snprintf(nm, sizeof nm, "blk.%d.attn_q.weight.lora_b", i);
        add(&l, nm, GGML_TYPE_F16, (uint64_t)r, (uint64_t)base->n_embd, 0, 0.1f);
        snprintf(nm, sizeof nm, "blk.%d.attn_v.weight.lora_a", i);
        add(&l, nm, GGML_TYPE_BF16, (uint64_t)base->n_embd, (uint64_t)r, 0, 0.1f);
        snprintf(nm, sizeof nm, "blk.%d.attn_v.weight.lora_b", i);
        add(&l, nm, GGML_TYPE_F32, (uint64_t)r, kv + (bad && i == 1 ? 2 : 0), 0, 0.1f);
        snprintf(nm, sizeof nm, "blk.%d.ffn_down.weight.lora_a", i);
        add(&l, nm, GGML_TYPE_F32, (uint64_t)base->n_ff, (uint64_t)r, 0, 0.1f);
        snprintf(nm, sizeof nm, "blk.%d.ffn_down.weight.lora_b", i);
        add(&l, nm, GGML_TYPE_F32, (uint64_t)r, (uint64_t)base->n_embd, 0, 0.1f);
    }
    if (!base->tied) {
        add(&l, "output.weight.lora_a", GGML_TYPE_F32, (uint64_t)base->n_embd, (uint64_t)r, 0, 0.1f);
        add(&l, "output.weight.lora_b", GGML_TYPE_F32, (uint64_t)r, (uint64_t)base->n_vocab, 0,
            0.1f);
    }
    write_gguf(path_in(name, buf, n), &l, &sp, "lora", alpha);
    return buf;
}

/* ------------------------------------------------------------------------
 * Refusals
 * ---------------------------------------------------------------------- */

/* Opens sp as a model and expects code with every needle in the message. */
static void expect_refusal(const struct spec *sp, int code, const char *n1, const char *n2)
{
    char path[128];
    struct model *m = (struct model *)1;
    struct mf_err err = {0};

    write_model(sp, "bad.gguf", path, sizeof path);
    assert_int_equal(model_open(path, &m, &err), code);
    assert_null(m);
    if (!strstr(err.msg, n1) || (n2 && !strstr(err.msg, n2)))
        fail_msg("message '%s' lacks '%s' / '%s'", err.msg, n1, n2 ? n2 : "");
}

static void test_refuses_missing_tensor(void **state)
{
    struct spec sp = toy;
    sp.drop = "blk.1.ffn_up.weight";
    expect_refusal(&sp, MF_EFORMAT, "tensor 'blk.1.ffn_up.weight' is missing", NULL);
}

static void test_refuses_wrong_shape(void **state)
{
    struct spec sp = toy;
    sp.bad_shape = "blk.1.attn_k.weight";
    expect_refusal(&sp, MF_EFORMAT, "tensor 'blk.1.attn_k.weight' has shape [256, 129]",
                   "expected [256, 128]");
}

static void test_refuses_unsupported_type(void **state)
{
    struct spec sp = toy;
    sp.odd_type = GGML_TYPE_Q4_1;
    expect_refusal(&sp, MF_EUNSUPPORTED, "'blk.0.attn_q.weight' has weight type Q4_1", NULL);
}

static void test_refuses_arch_and_adapter(void **state)
{
    struct spec sp = toy;
    sp.arch = "gpt2";
    expect_refusal(&sp, MF_EUNSUPPORTED, "architecture 'gpt2' is not supported", NULL);
    sp = toy;
    sp.gtype = "adapter";
    expect_refusal(&sp, MF_EUNSUPPORTED, "general.type is 'adapter'", NULL);
    sp = toy;
    sp.extra = "blk.0.ssm_conv1d.weight";
    expect_refusal(&sp, MF_EUNSUPPORTED, "tensor 'blk.0.ssm_conv1d.weight' is not part of a llama",
                   NULL);
    sp = toy;
    sp.n_head_kv = 3; /* 4 heads are not a multiple of 3 */
    sp.n_embd = 264;  /* keeps head_dim = 66 and kv rows integral */
    expect_refusal(&sp, MF_EFORMAT, "query heads are not a multiple of 3 KV heads", NULL);
}

static void test_refuses_bad_lora(void **state)
{
    char mp[128], lp[128];
    struct model *m;
    struct lora *l = (struct lora *)1;
    struct mf_err err = {0};
    struct spec tied = toy;

    assert_int_equal(model_open(write_model(&toy, "base.gguf", mp, sizeof mp), &m, &err), 0);
    write_lora(&toy, 4, 8.0f, 7, "bad", "bad-lora.gguf", lp, sizeof lp);
    assert_int_equal(lora_open(m, lp, &l, &err), MF_EFORMAT);
    assert_null(l);
    if (!strstr(err.msg, "'blk.1.attn_v.weight.lora_b' [4, 130]") ||
        !strstr(err.msg, "base tensor 'blk.1.attn_v.weight' [256, 128]"))
        fail_msg("message: %s", err.msg);
    /* an adapter for output.weight on a model whose output is tied */
    model_close(m);
    tied.tied = 1;
    assert_int_equal(model_open(write_model(&tied, "tied.gguf", mp, sizeof mp), &m, &err), 0);
    write_lora(&toy, 4, 8.0f, 7, NULL, "lora.gguf", lp, sizeof lp);
    assert_int_equal(lora_open(m, lp, &l, &err), MF_EFORMAT);
    assert_non_null(strstr(err.msg, "'output.weight.lora_a' adapts 'output.weight'"));
    /* a model is not an adapter */
    assert_int_equal(lora_open(m, mp, &l, &err), MF_EFORMAT);
    assert_non_null(strstr(err.msg, "expected 'adapter'"));
    model_close(m);
}

static void test_loads_hparams(void **state)
{
    char mp[128];
    struct model *m;
    struct mf_err err = {0};
    struct spec sp = toy;

    sp.tied = 1;
    sp.rope_freqs = 1;
    assert_int_equal(model_open(write_model(&sp, "ok.gguf", mp, sizeof mp), &m, &err), 0);
    assert_int_equal(m->hp.n_vocab, 300);
    assert_int_equal(m->hp.head_dim, 64);
    assert_int_equal(m->hp.n_rot, 64);
    assert_int_equal(m->hp.n_head_kv, 2);
    assert_true(m->tied);
    assert_ptr_equal(m->output.data, m->tok_embd.data);
    assert_non_null(m->rope_freqs.data);
    assert_true(m->hp.rope_base == 10000.0f);
    assert_int_equal(model_kv_block_bytes(m, 2), 2 * 2 * 2 * KV_BLOCK_TOKENS * 64 * 2);
    model_close(m);
}

/* ------------------------------------------------------------------------
 * Kernels: SIMD against scalar
 * ---------------------------------------------------------------------- */

/* Random rows of n values encoded as t, and nc activation rows in t's
 * activation format; runs gemm of every ISA with nr rows and nc columns
 * and checks it against scalar within float rounding, and against itself
 * one (row, column) at a time exactly. */
static void check_kernel(enum ggml_type t, int64_t n, int32_t nr, int32_t nc)
{
    const struct cpu_dot *sc = cpu_dot_for(CPU_ISA_SCALAR);
    enum cpu_act a = cpu_dot_act(t);
    uint64_t rb, s = 42 + (uint64_t)t;
    size_t xb = cpu_dot_act_bytes(a, n);
    uint8_t *w, *x;
    float *f = malloc((size_t)n * sizeof *f), *ys = malloc((size_t)(nr * nc) * sizeof *ys);
    float *yv = malloc((size_t)(nr * nc) * sizeof *yv), *y1 = malloc(sizeof *y1);
    double *mag = calloc((size_t)(nr * nc), sizeof *mag);
    struct mf_err err = {0};

    assert_int_equal(ggml_type_row_size(t, (uint64_t)n, &rb), 0);
    w = malloc(rb * (size_t)nr + 1) + 1; /* odd address: blocks need no alignment */
    x = aligned_alloc(64, (xb * (size_t)nc + 63) / 64 * 64);
    for (int32_t r = 0; r < nr; r++) {
        for (int64_t k = 0; k < n; k++)
            f[k] = randn(&s) * (1.0f + (float)r);
        assert_int_equal(quant_quantize_row(t, f, w + rb * (size_t)r, n, &err), 0);
    }
    for (int32_t c = 0; c < nc; c++) {
        for (int64_t k = 0; k < n; k++)
            f[k] = randn(&s);
        cpu_dot_act_row(sc, a, f, x + xb * (size_t)c, n);
        for (int32_t r = 0; r < nr; r++)
            for (int64_t k = 0; k < n; k++)
                mag[c * nr + r] += fabs((double)f[k]) * 4.0 * (1.0 + r);
    }
    sc->gemm[t](n, nr, nc, w, rb, x, xb, ys, (size_t)nr, 0);
    for (int isa = 1; isa < CPU_ISA_COUNT; isa++) {
        const struct cpu_dot *d = cpu_dot_for((enum cpu_isa)isa);
        if (!d)
            continue;
        d->gemm[t](n, nr, nc, w, rb, x, xb, yv, (size_t)nr, 0);
        for (int32_t i = 0; i < nr * nc; i++) {
            if (fabs((double)yv[i] - ys[i]) > 2e-5 * mag[i] + 1e-6)
                fail_msg("%s %s n=%ld (%d,%d): %g vs scalar %g", d->name, ggml_type_name(t),
                         (long)n, i % nr, i / nr, (double)yv[i], (double)ys[i]);
            d->gemm[t](n, 1, 1, w + rb * (size_t)(i % nr), rb, x + xb * (size_t)(i / nr), xb, y1,
                       1, 0);
            if (memcmp(y1, &yv[i], sizeof *y1) != 0)
                fail_msg("%s %s: tile result %.9g differs from 1x1 %.9g", d->name,
                         ggml_type_name(t), (double)yv[i], (double)*y1);
        }
    }
    free(f);
    free(ys);
    free(yv);
    free(y1);
    free(mag);
    free(w - 1);
    free(x);
}

static void test_simd_matches_scalar(void **state)
{
    static const enum ggml_type types[] = {GGML_TYPE_F32,  GGML_TYPE_F16,  GGML_TYPE_BF16,
                                           GGML_TYPE_Q4_0, GGML_TYPE_Q8_0, GGML_TYPE_Q4_K,
                                           GGML_TYPE_Q5_K, GGML_TYPE_Q6_K, GGML_TYPE_Q5_0,
                                           GGML_TYPE_Q5_1, GGML_TYPE_MXFP4};
    if (!cpu_dot_for(CPU_ISA_AVX2))
        skip();
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        enum ggml_type t = types[i];
        int64_t blk = ggml_type_block_size(t);
        /* odd block counts (1, 3, 7) and, for floats, a tail past 8 */
        int64_t ns[] = {blk == 1 ? 37 : blk, blk * 3, blk == 1 ? 263 : blk * 7};
        for (int k = 0; k < 3; k++)
            check_kernel(t, ns[k], 7, 5);
    }
}

/* Q5_0 / Q5_1 / MXFP4 weights against Q8_0 activations: every table's
 * gemm equals dequantize-then-dot in double (the weights by
 * quant_dequantize_row, the activations as d * code) within float rounding;
 * Q5_1's min term uses an fp16-rounded block sum as llama.cpp's Q8_1 does,
 * so it may be off by 2^-11 of |m * d * s| per block. */
static void test_q5_dot_matches_dequantized(void **state)
{
    enum { N = 32 * 9, NR = 3, NC = 2 };
    static const enum ggml_type types[] = {GGML_TYPE_Q5_0, GGML_TYPE_Q5_1, GGML_TYPE_MXFP4};
    struct cpu_q8_0 x[NC][N / 32];
    uint8_t w[NR * N / 32 * 24]; /* NR rows of rb bytes */
    float f[N], deq[N], y[NC * NR];
    uint64_t rb, s = 7;
    struct mf_err err = {0};

    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        enum ggml_type t = types[ti];
        assert_int_equal(cpu_dot_act(t), CPU_ACT_Q8_0);
        assert_int_equal(ggml_type_row_size(t, N, &rb), 0);
        for (int r = 0; r < NR; r++) {
            for (int k = 0; k < N; k++)
                f[k] = randn(&s) * (1.0f + (float)r) + (t == GGML_TYPE_Q5_1 ? 0.7f : 0.0f);
            assert_int_equal(quant_quantize_row(t, f, w + rb * (size_t)r, N, &err), 0);
        }
        for (int c = 0; c < NC; c++) {
            for (int k = 0; k < N; k++)
                f[k] = randn(&s);
            cpu_dot_act_row(cpu_dot_for(CPU_ISA_SCALAR), CPU_ACT_Q8_0, f, x[c], N);
        }
        for (int isa = 0; isa < CPU_ISA_COUNT; isa++) {
            const struct cpu_dot *d = cpu_dot_for((enum cpu_isa)isa);
            if (!d)
                continue;
            assert_non_null(d->gemm[t]);
            d->gemm[t](N, NR, NC, w, rb, x, sizeof x[0], y, NR, 0);
            for (int r = 0; r < NR; r++) {
                assert_int_equal(quant_dequantize_row(t, w + rb * (size_t)r, deq, N, &err), 0);
                for (int c = 0; c < NC; c++) {
                    double ref = 0.0, mag = 0.0, tol;
                    for (int k = 0; k < N; k++) {
                        double a = (double)x[c][k / 32].d * x[c][k / 32].qs[k % 32];
                        ref += (double)deq[k] * a;
                        mag += fabs((double)deq[k] * a);
                    }
                    tol = 1e-5 * mag + 1e-6;
                    if (t == GGML_TYPE_Q5_1)
                        for (int b = 0; b < N / 32; b++)
                            tol += fabs((double)x[c][b].d * x[c][b].s) * 4.0 * (1.0 + r) /
                                   2048.0;
                    if (fabs((double)y[c * NR + r] - ref) > tol)
                        fail_msg("%s %s (%d,%d): %.9g vs dequantized %.9g (tol %g)", d->name,
                                 ggml_type_name(t), r, c, (double)y[c * NR + r], ref, tol);
                }
            }
        }
    }
}

/* Attention kernels: a key block (transposed, F16 and F32) against 7
 * queries, and P.V with 5 queries: every table agrees with scalar within
 * float rounding, and a query's result does not depend on which other
 * queries share the call (bit for bit). */
static void test_attention_kernels(void **state)
{
    enum { HD = 72, NQ = 7 };
    const struct cpu_dot *sc = cpu_dot_for(CPU_ISA_SCALAR);
    float q[NQ][HD], kf[HD * 16], v[16 * HD], s_ref[NQ][16], s_got[NQ][16], s_one[16];
    float y_ref[NQ][HD], y_got[NQ][HD], y_one[HD], w[NQ][16];
    uint16_t kh[HD * 16];
    const float *qp[NQ], *wp[NQ];
    float *sp[NQ], *yp[NQ];
    uint64_t r = 5;

    for (int i = 0; i < HD * 16; i++) {
        kf[i] = randn(&r);
        kh[i] = quant_f32_to_f16(kf[i]);
        v[i] = randn(&r);
    }
    for (int i = 0; i < NQ; i++)
        for (int d = 0; d < HD; d++)
            q[i][d] = randn(&r);
    for (int isa = 1; isa < CPU_ISA_COUNT; isa++) {
        const struct cpu_dot *d = cpu_dot_for((enum cpu_isa)isa);
        if (!d)
            continue;
        for (int f16 = 0; f16 < 2; f16++) {
            const void *k = f16 ? (const void *)kh : (const void *)kf;
            for (int i = 0; i < NQ; i++) {
                qp[i] = q[i];
                sp[i] = s_ref[i];
            }
            sc->kq_block(qp, NQ, HD, k, f16, sp);
            for (int i = 0; i < NQ; i++)
                sp[i] = s_got[i];
            d->kq_block(qp, NQ, HD, k, f16, sp);
            for (int i = 0; i < NQ; i++) {
                float *one = s_one;
                d->kq_block(&qp[i], 1, HD, k, f16, &one);
                assert_memory_equal(s_one, s_got[i], sizeof s_one);
                for (int j = 0; j < 16; j++)
                    assert_true(fabsf(s_got[i][j] - s_ref[i][j]) < 1e-4f);
            }
        }
        for (int i = 0; i < 5; i++) {
            for (int j = 0; j < 16; j++)
                w[i][j] = (float)(mix(&r) % 1000) / 1000.0f;
            memset(y_ref[i], 0, sizeof y_ref[i]);
            memset(y_got[i], 0, sizeof y_got[i]);
            wp[i] = w[i];
        }
        for (int i = 0; i < 5; i++)
            yp[i] = y_ref[i];
        sc->pv_block(wp, yp, 5, v, HD, 13);
        for (int i = 0; i < 5; i++)
            yp[i] = y_got[i];
        d->pv_block(wp, yp, 5, v, HD, 13);
        for (int i = 0; i < 5; i++) {
            float *one = y_one;
            memset(y_one, 0, sizeof y_one);
            d->pv_block(&wp[i], &one, 1, v, HD, 13);
            assert_memory_equal(y_one, y_got[i], sizeof y_one);
            for (int k = 0; k < HD; k++)
                assert_true(fabsf(y_got[i][k] - y_ref[i][k]) < 1e-4f);
        }
    }
}

/* The softmax kernel with and without a sink: every table gives
 * e^(s x_i - M) / (sum_j e^(s x_j - M) + e^(sink - M)), M the max of the
 * scaled scores and the sink, within float rounding of the double-precision
 * value; the weights then sum to less than 1 by the sink's share, and
 * -INFINITY leaves the plain softmax bit for bit. */
static void test_softmax_sink(void **state)
{
    enum { N = 37 };
    static const float sinks[] = {-INFINITY, -3.0f, 0.5f, 9.0f};
    const float scale = 0.125f;
    float x[N], y[N], plain[N];
    uint64_t r = 11;

    for (int i = 0; i < N; i++)
        x[i] = randn(&r) * 8.0f;
    for (int isa = 0; isa < CPU_ISA_COUNT; isa++) {
        const struct cpu_dot *d = cpu_dot_for((enum cpu_isa)isa);
        if (!d)
            continue;
        memcpy(plain, x, sizeof x);
        d->softmax(plain, N, scale, 0, -INFINITY);
        for (size_t k = 0; k < sizeof sinks / sizeof sinks[0]; k++) {
            double mx = sinks[k], sum = 0.0, got = 0.0;
            for (int i = 0; i < N; i++)
                mx = (double)(x[i] * scale) > mx ? (double)(x[i] * scale) : mx;
            for (int i = 0; i < N; i++)
                sum += exp((double)(x[i] * scale) - mx);
            if (sinks[k] > -INFINITY)
                sum += exp((double)sinks[k] - mx);
            memcpy(y, x, sizeof x);
            d->softmax(y, N, scale, 0, sinks[k]);
            for (int i = 0; i < N; i++) {
                double want = exp((double)(x[i] * scale) - mx) / sum;
                if (fabs(y[i] - want) > 1e-6 * want + 1e-12)
                    fail_msg("%s sink %g: x[%d] %.9g, want %.9g", d->name, (double)sinks[k], i,
                             (double)y[i], want);
                got += y[i];
            }
            if (sinks[k] == -INFINITY)
                assert_memory_equal(y, plain, sizeof y);
            else
                assert_true(fabs(got - (1.0 - exp((double)sinks[k] - mx) / sum)) < 1e-5);
        }
    }
}

/* ------------------------------------------------------------------------
 * The model end to end: batch and chunk invariance
 * ---------------------------------------------------------------------- */

struct rig {
    struct model *m;
    struct backend *be;
    int32_t n_blocks;
    int32_t table[4][16]; /* 4 sequences, 16 blocks (256 positions) each */
};

static void rig_open(struct rig *g, const char *model, const char *lora1, const char *lora2,
                     int threads, enum backend_kv_type kv, const char *kernels)
{
    struct backend_config cfg = {.n_threads = threads, .kv_type = kv, .kernels = kernels};
    struct mf_err err = {0};
    struct lora *l;
    int32_t id;

    memset(g, 0, sizeof *g);
    assert_int_equal(model_open(model, &g->m, &err), 0);
    if (lora1) {
        assert_int_equal(lora_open(g->m, lora1, &l, &err), 0);
        assert_int_equal(model_add_lora(g->m, l, &id, &err), 0);
        assert_int_equal(id, 0);
    }
    if (lora2) {
        assert_int_equal(lora_open(g->m, lora2, &l, &err), 0);
        assert_int_equal(model_add_lora(g->m, l, &id, &err), 0);
    }
    cfg.kv_bytes = 64 * backend_kv_block_bytes(g->m, kv);
    assert_int_equal(backend_create(&cpu_backend_ops, g->m, &cfg, &g->be, &err), 0);
    assert_int_equal(backend_kv_alloc(g->be, &g->n_blocks, &err), 0);
    assert_int_equal(g->n_blocks, 64);
    /* interleaved block ids, so sequences never share or touch in order */
    for (int s = 0; s < 4; s++)
        for (int b = 0; b < 16; b++)
            g->table[s][b] = b * 4 + (3 - s);
}

static void rig_close(struct rig *g)
{
    backend_free(g->be);
    model_close(g->m);
}

static int32_t prompt[4][64];

static void fill_prompts(int32_t n_vocab)
{
    uint64_t s = 99;
    for (int i = 0; i < 4; i++)
        for (int k = 0; k < 64; k++)
            prompt[i][k] = (int32_t)(mix(&s) % (uint64_t)n_vocab);
}

/* One step over n sequences: seq i (slot slots[i]) computes tokens
 * [from[i], to[i]) of its prompt with adapters lo[i]; every one wants
 * logits, written to out + i * n_vocab. */
static void step(struct rig *g, int n, const int *slots, const int *from, const int *to,
                 const struct batch_lora *lo, float *out)
{
    struct batch_seq bs[4];
    struct batch b = {.n_seqs = n, .seqs = bs, .logits = out};
    struct mf_err err = {0};

    for (int i = 0; i < n; i++)
        bs[i] = (struct batch_seq){
            .tokens = prompt[slots[i]] + from[i],
            .n_tokens = to[i] - from[i],
            .n_past = from[i],
            .block_table = g->table[slots[i]],
            .n_blocks = 16,
            .lora = lo ? lo[i] : (struct batch_lora){0},
            .want_logits = 1,
        };
    if (backend_step(g->be, &b, &err))
        fail_msg("step: %s", err.msg);
}

static void assert_same(const float *a, const float *b, int32_t n, const char *what)
{
    for (int32_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], sizeof *a) != 0)
            fail_msg("%s: logit %d is %.9g, expected %.9g bit for bit", what, i, (double)a[i],
                     (double)b[i]);
}

/* Sequence 0 (30-token prompt, then two decode tokens, adapters 0+1) alone,
 * then the same with sequences of other lengths and adapters beside it in
 * every step: its logits must not change by a bit. */
static void check_batch_invariance(const char *model, const char *l1, const char *l2, int threads,
                                   enum backend_kv_type kv)
{
    struct rig g;
    struct batch_lora both = {.n = 2, .ids = {1, 0}, .scales = {0.7f, 1.5f}};
    struct batch_lora one = {.n = 1, .ids = {1}, .scales = {2.0f}};
    struct batch_lora none = {0};
    int32_t nv;
    float *alone, *mixed;

    rig_open(&g, model, l1, l2, threads, kv, NULL);
    nv = g.m->hp.n_vocab;
    fill_prompts(nv);
    alone = malloc(3 * (size_t)nv * sizeof *alone);
    mixed = malloc(4 * (size_t)nv * sizeof *mixed);
    step(&g, 1, (int[]){0}, (int[]){0}, (int[]){30}, &both, alone);
    step(&g, 1, (int[]){0}, (int[]){30}, (int[]){31}, &both, alone + nv);
    step(&g, 1, (int[]){0}, (int[]){31}, (int[]){32}, &both, alone + 2 * nv);
    rig_close(&g);

    rig_open(&g, model, l1, l2, threads, kv, NULL);
    /* step 1: seq 0's prompt between a 5-token prompt (adapter 1) and a 47-token one */
    step(&g, 3, (int[]){1, 0, 2}, (int[]){0, 0, 0}, (int[]){5, 30, 47},
         (struct batch_lora[]){one, both, none}, mixed);
    assert_same(mixed + nv, alone, nv, "prefill beside others");
    /* step 2: decodes of all three plus a new 12-token prompt with both adapters */
    step(&g, 4, (int[]){3, 2, 1, 0}, (int[]){0, 47, 5, 30}, (int[]){12, 48, 6, 31},
         (struct batch_lora[]){both, none, one, both}, mixed);
    assert_same(mixed + 3 * nv, alone + nv, nv, "decode beside others");
    /* step 3: alone again after the mixed steps */
    step(&g, 1, (int[]){0}, (int[]){31}, (int[]){32}, &both, mixed);
    assert_same(mixed, alone + 2 * nv, nv, "decode after mixed steps");
    rig_close(&g);
    free(alone);
    free(mixed);
}

static void test_batch_invariance(void **state)
{
    char mp[128], l1[128], l2[128];
    struct spec sp = toy;

    write_lora(&toy, 4, 8.0f, 7, NULL, "l1.gguf", l1, sizeof l1);
    write_lora(&toy, 8, 0.0f, 8, NULL, "l2.gguf", l2, sizeof l2);
    for (int t = 0; t < 3; t++) {
        static const enum ggml_type wt[] = {GGML_TYPE_Q4_K, GGML_TYPE_Q8_0, GGML_TYPE_F16};
        sp.wtype = wt[t];
        write_model(&sp, "inv.gguf", mp, sizeof mp);
        check_batch_invariance(mp, l1, l2, 2, BACKEND_KV_F16);
    }
    check_batch_invariance(mp, l1, l2, 1, BACKEND_KV_F32);
}

/* A 45-token prompt at once (one thread), then in chunks 16 + 29 and
 * 7 + 1 + 37 with one and two threads, for the best kernel table and the
 * scalar one: every way gives the same bits. */
static void test_chunked_prefill_and_threads(void **state)
{
    char mp[128];
    struct spec sp = toy;
    struct rig g;
    struct batch_lora none = {0};
    const char *kernels[] = {NULL, "scalar"};
    float *ref, *got;
    int32_t nv;

    sp.wtype = GGML_TYPE_Q6_K;
    sp.rope_freqs = 1;
    write_model(&sp, "chunk.gguf", mp, sizeof mp);
    for (int k = 0; k < 2; k++) {
        rig_open(&g, mp, NULL, NULL, 1, BACKEND_KV_F16, kernels[k]);
        nv = g.m->hp.n_vocab;
        fill_prompts(nv);
        memcpy(prompt[1], prompt[0], sizeof prompt[0]);
        ref = malloc((size_t)nv * sizeof *ref);
        got = malloc((size_t)nv * sizeof *got);
        step(&g, 1, (int[]){0}, (int[]){0}, (int[]){45}, &none, ref);
        rig_close(&g);
        for (int threads = 1; threads <= 2; threads++) {
            rig_open(&g, mp, NULL, NULL, threads, BACKEND_KV_F16, kernels[k]);
            step(&g, 1, (int[]){0}, (int[]){0}, (int[]){16}, &none, got);
            step(&g, 1, (int[]){0}, (int[]){16}, (int[]){45}, &none, got);
            assert_same(got, ref, nv, "chunks 16 + 29");
            step(&g, 1, (int[]){1}, (int[]){0}, (int[]){7}, &none, got);
            step(&g, 1, (int[]){1}, (int[]){7}, (int[]){8}, &none, got);
            step(&g, 1, (int[]){1}, (int[]){8}, (int[]){45}, &none, got);
            assert_same(got, ref, nv, "chunks 7 + 1 + 37");
            rig_close(&g);
        }
        free(ref);
        free(got);
    }
}

/* A hidden-state step (batch.hidden, what mfc-serve's embeddings use): one
 * row per token, the output_norm'ed final state whose product with
 * output.weight is the logits row a normal step gives; the K/V it writes
 * are a normal prefill's (a decode after it is bit-identical); and it is
 * chunk-invariant. */
static void test_hidden_step(void **state)
{
    char mp[128];
    struct rig g;
    struct mf_err err = {0};
    struct batch_lora none = {0};
    enum { N = 20 };
    int32_t E, nv;
    float *H, *H2, *L, *L0, *L1;

    rig_open(&g, write_model(&toy, "hidden.gguf", mp, sizeof mp), NULL, NULL, 2, BACKEND_KV_F32,
             NULL);
    E = g.m->hp.n_embd;
    nv = g.m->hp.n_vocab;
    assert_int_equal(g.m->output.type, GGML_TYPE_F32);
    fill_prompts(nv);
    memcpy(prompt[1], prompt[0], sizeof prompt[0]);
    memcpy(prompt[2], prompt[0], sizeof prompt[0]);
    H = calloc((size_t)N * (size_t)E, sizeof *H);
    H2 = calloc((size_t)N * (size_t)E, sizeof *H2);
    L = calloc((size_t)nv, sizeof *L);
    L0 = calloc((size_t)nv, sizeof *L0);
    L1 = calloc((size_t)nv, sizeof *L1);
    {
        struct batch_seq bs = {.tokens = prompt[0], .n_tokens = N, .block_table = g.table[0],
                               .n_blocks = 16, .want_logits = 1};
        struct batch b = {.n_seqs = 1, .seqs = &bs, .hidden = H}; /* no logits buffer needed */
        assert_int_equal(backend_step(g.be, &b, &err), 0);
    }
    step(&g, 1, (int[]){1}, (int[]){0}, (int[]){N}, &none, L);
    /* logits = output . hidden of the last token */
    const float *out = g.m->output.data;
    float scale = 0;
    for (int32_t v = 0; v < nv; v++)
        scale = fmaxf(scale, fabsf(L[v]));
    for (int32_t v = 0; v < nv; v++) {
        double d = 0;
        for (int32_t e = 0; e < E; e++)
            d += (double)out[(size_t)v * (size_t)E + (size_t)e] * H[(size_t)(N - 1) * (size_t)E + (size_t)e];
        if (fabs(d - L[v]) > 1e-3 * scale)
            fail_msg("logit %d: output . hidden is %.6g, the step gave %.6g", v, d, (double)L[v]);
    }
    /* the K/V the hidden step wrote serve a decode exactly as a prefill's */
    step(&g, 1, (int[]){0}, (int[]){N}, (int[]){N + 1}, &none, L0);
    step(&g, 1, (int[]){1}, (int[]){N}, (int[]){N + 1}, &none, L1);
    assert_same(L0, L1, nv, "decode after a hidden-state step");
    /* in two chunks, the rows are the same bit for bit */
    for (int c = 0; c < 2; c++) {
        int32_t from = c ? 7 : 0, to = c ? N : 7;
        struct batch_seq bs = {.tokens = prompt[2] + from, .n_tokens = to - from,
                               .n_past = from, .block_table = g.table[2], .n_blocks = 16};
        struct batch b = {.n_seqs = 1, .seqs = &bs, .hidden = H2 + (size_t)from * (size_t)E};
        assert_int_equal(backend_step(g.be, &b, &err), 0);
    }
    assert_same(H2, H, N * E, "hidden rows in chunks 7 + 13");
    free(H);
    free(H2);
    free(L);
    free(L0);
    free(L1);
    rig_close(&g);
}

/* Batches that break batch.h's contract are refused before any K/V is
 * written, naming the sequence. */
static void test_step_refuses_bad_batches(void **state)
{
    char mp[128];
    struct rig g;
    struct mf_err err = {0};
    float logits[300];
    int32_t tok[2] = {1, 300}, table[1] = {64};
    struct batch_seq bs = {.tokens = tok, .n_tokens = 1, .block_table = table, .n_blocks = 1};
    struct batch b = {.n_seqs = 1, .seqs = &bs, .logits = logits};

    rig_open(&g, write_model(&toy, "ok2.gguf", mp, sizeof mp), NULL, NULL, 1, BACKEND_KV_F16,
             NULL);
    assert_int_equal(backend_step(g.be, &b, &err), MF_EINVAL);
    assert_non_null(strstr(err.msg, "block id 64 is outside the arena of 64 blocks"));
    table[0] = 3;
    bs.n_tokens = 2;
    assert_int_equal(backend_step(g.be, &b, &err), MF_EINVAL);
    assert_non_null(strstr(err.msg, "token 300 is outside the vocabulary"));
    bs.n_tokens = 1;
    bs.n_past = 16;
    assert_int_equal(backend_step(g.be, &b, &err), MF_EINVAL);
    assert_non_null(strstr(err.msg, "cover fewer than its 17 positions"));
    bs.n_past = 0;
    bs.lora.n = 1;
    assert_int_equal(backend_step(g.be, &b, &err), MF_EINVAL);
    assert_non_null(strstr(err.msg, "adapter id 0 is not attached"));
    bs.lora.n = 0;
    bs.want_logits = 1; /* the CPU keeps no logits to draw from (no ops->sample) */
    b.logits = NULL;
    assert_null(cpu_backend_ops.sample);
    assert_int_equal(backend_step(g.be, &b, &err), MF_EINVAL);
    assert_non_null(strstr(err.msg, "wants logits but there is no buffer"));
    rig_close(&g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_refuses_missing_tensor),
        cmocka_unit_test(test_refuses_wrong_shape),
        cmocka_unit_test(test_refuses_unsupported_type),
        cmocka_unit_test(test_refuses_arch_and_adapter),
        cmocka_unit_test(test_refuses_bad_lora),
        cmocka_unit_test(test_loads_hparams),
        cmocka_unit_test(test_simd_matches_scalar),
        cmocka_unit_test(test_q5_dot_matches_dequantized),
        cmocka_unit_test(test_attention_kernels),
        cmocka_unit_test(test_softmax_sink),
        cmocka_unit_test(test_batch_invariance),
        cmocka_unit_test(test_chunked_prefill_and_threads),
        cmocka_unit_test(test_step_refuses_bad_batches),
        cmocka_unit_test(test_hidden_step),
    };
    return cmocka_run_group_tests_name("model", tests, setup_dir, remove_dir);
}
