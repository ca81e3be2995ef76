/*
 * bench_synth.c: models of real shapes made in memory for the benchmarks
 * (bench/cuda_bench.c, bench/spec_bench.c), so an 8B model costs seconds
 * and no 16 GB file: mkmodel's presets' shapes, each family's switches,
 * llama.cpp's per-tensor type mix, random bytes made into small valid
 * values (throughput does not depend on them). Owns the models it makes
 * (never freed: a benchmark's life); a failure prints and exits, as the
 * benchmarks do.
 */
#include "bench/bench_synth.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/arch.h"
#include "common/ggml_type.h"
#include "common/quant.h"

static void die(const char *what, const struct mf_err *err)
{
    fprintf(stderr, "bench_synth: %s: %s\n", what, err->msg);
    exit(1);
}

static uint64_t rs = 88172645463325252ull; /* xorshift64 state: one stream for every weight */

/* Random bytes; every 64-bit word is masked and or-ed (F16/BF16 values
 * kept small and finite this way). */
static void fill_random(uint8_t *p, size_t n, uint64_t and_mask, uint64_t or_mask)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
        uint64_t w = (rs & and_mask) | or_mask;
        memcpy(p + i, &w, 8);
    }
    for (; i < n; i++)
        p[i] = 0;
}

static void wr16(uint8_t *p, uint16_t v)
{
    memcpy(p, &v, 2);
}

/* Random bytes made into valid, small values of type t. */
void *bench_synth_data(enum ggml_type t, int64_t ne0, int64_t ne1, uint64_t *row_bytes)
{
    uint64_t rb;
    ggml_type_row_size(t, (uint64_t)ne0, &rb);
    size_t n = (size_t)rb * (size_t)ne1;
    uint8_t *p = malloc(n);
    if (!p) {
        fprintf(stderr, "bench_synth: out of memory\n");
        exit(1);
    }
    *row_bytes = rb;
    uint16_t d = quant_f32_to_f16(0.002f), dm = quant_f32_to_f16(0.0005f);
    if (t == GGML_TYPE_F32) {
        float one = 1.0f;
        for (size_t i = 0; i < n; i += 4)
            memcpy(p + i, &one, 4);
        return p;
    }
    size_t bs = ggml_type_size(t);
    switch (t) {
    case GGML_TYPE_F16: /* exponent 8: |x| in [2^-7, 2^-6) */
        fill_random(p, n, 0x83FF83FF83FF83FFull, 0x2000200020002000ull);
        break;
    case GGML_TYPE_BF16: /* exponent 120: |x| in [2^-7, 2^-6) */
        fill_random(p, n, 0x807F807F807F807Full, 0x3C003C003C003C00ull);
        break;
    default:
        fill_random(p, n, ~0ull, 0);
        break;
    }
    switch (t) {
    case GGML_TYPE_F16:
    case GGML_TYPE_BF16:
        break;
    case GGML_TYPE_Q8_0:
    case GGML_TYPE_Q4_0:
        for (size_t i = 0; i < n; i += bs)
            wr16(p + i, d);
        break;
    case GGML_TYPE_Q4_K:
    case GGML_TYPE_Q5_K:
        for (size_t i = 0; i < n; i += bs)
            wr16(p + i, d), wr16(p + i + 2, dm);
        break;
    case GGML_TYPE_Q6_K:
        for (size_t i = 0; i < n; i += bs)
            wr16(p + i + 208, d);
        break;
    default:
        fprintf(stderr, "bench_synth: type %s not synthesized\n", ggml_type_name(t));
        exit(1);
    }
    return p;
}

const struct bench_shape bench_shapes[] = {
    {"1b", "llama", 16, 2048, 8192, 32, 8, 128256, 0, 0, 0, 0, 0, 0},
    {"llama3-8b", "llama", 32, 4096, 14336, 32, 8, 128256, 0, 0, 0, 0, 0, 0},
    {"qwen2.5-7b", "qwen2", 28, 3584, 18944, 28, 4, 152064, 0, 0, 0, 0, 0, 0},
    {"gemma2-9b", "gemma2", 42, 3584, 14336, 16, 8, 256000, 256, 4096, 2, 0, 0, 0},
    {"phi3-mini", "phi3", 32, 3072, 8192, 32, 32, 32064, 0, 0, 0, 0, 0, 0},
    {"qwen3-30b-a3b", "qwen3moe", 48, 2048, 6144, 32, 4, 151936, 128, 0, 0, 128, 8, 768},
};
const size_t bench_n_shapes = sizeof bench_shapes / sizeof bench_shapes[0];

static enum ggml_type pick(const char *type, enum quant_ftype ft, const struct bench_shape *s,
                           const char *name, int64_t ne0, int64_t ne1, int64_t ne2)
{
    if (strcmp(type, "q4_k") == 0)
        return GGML_TYPE_Q4_K;
    struct quant_model_info mi = {.arch = s->arch,
                                  .n_layer = s->n_layer,
                                  .n_expert = s->n_expert,
                                  .n_gqa = s->n_head / s->n_head_kv,
                                  .has_output = 1};
    struct quant_tensor_info ti = {
        .name = name, .type = GGML_TYPE_F32, .n_dims = ne2 > 1 ? 3 : 2, .ne = {ne0, ne1, ne2, 1}};
    enum ggml_type t;
    struct mf_err err = {0};
    if (quant_ftype_tensor_type(ft, &mi, &ti, &t, &err))
        die("type rule", &err);
    return t;
}

/* A weight of ne2 matrices (experts; 1 for others) of ne1 rows x ne0 in
 * the type llama.cpp's mix gives it; vec: an F32 vector of ones (norms). */
static void set_wn(struct model_weight *w, const char *type, enum quant_ftype ft,
                   const struct bench_shape *s, const char *name, int64_t ne0, int64_t ne1,
                   int64_t ne2, int vec)
{
    enum ggml_type t = vec ? GGML_TYPE_F32 : pick(type, ft, s, name, ne0, ne1, ne2);
    w->type = t;
    w->ne0 = ne0;
    w->ne1 = ne1;
    w->ne2 = ne2;
    w->name = strdup(name);
    w->data = bench_synth_data(t, ne0, ne1 * ne2, &w->row_bytes);
}

static void set_w(struct model_weight *w, const char *type, enum quant_ftype ft,
                  const struct bench_shape *s, const char *name, int64_t ne0, int64_t ne1, int vec)
{
    set_wn(w, type, ft, s, name, ne0, ne1, 1, vec);
}

/* A router [n_embd, n_expert] in F32 (llama.cpp leaves ffn_gate_inp
 * unquantized) of random values in +-0.05, so tokens choose different
 * experts (ones would send every token to experts 0..k-1). */
static void set_router(struct model_weight *w, const char *name, int64_t ne0, int64_t ne1)
{
    float *p = malloc((size_t)(ne0 * ne1) * sizeof *p);
    if (!p) {
        fprintf(stderr, "bench_synth: out of memory\n");
        exit(1);
    }
    for (int64_t i = 0; i < ne0 * ne1; i++) {
        rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
        p[i] = (float)((double)(rs >> 11) * 0x1.0p-53 - 0.5) * 0.1f;
    }
    *w = (struct model_weight){.data = p,
                               .type = GGML_TYPE_F32,
                               .ne0 = ne0,
                               .ne1 = ne1,
                               .ne2 = 1,
                               .row_bytes = (uint64_t)ne0 * 4,
                               .name = strdup(name)};
}

/* The shape's hyperparameters and layer kinds, no weights. */
struct model *bench_synth_shape(const struct bench_shape *s)
{
    struct model *m = calloc(1, sizeof *m);
    if (!m) {
        fprintf(stderr, "bench_synth: out of memory\n");
        exit(1);
    }
    int64_t hd = s->head_dim ? s->head_dim : s->n_embd / s->n_head;
    const struct arch_desc *a = arch_find(s->arch, strlen(s->arch));
    m->hp = (struct model_hparams){.arch = a,
                                   .n_ctx_train = 8192,
                                   .n_embd = s->n_embd,
                                   .n_ff = s->n_ff,
                                   .n_layer = s->n_layer,
                                   .n_head = s->n_head,
                                   .n_head_kv = s->n_head_kv,
                                   .head_dim = (int32_t)hd,
                                   .n_rot = (int32_t)hd,
                                   .n_vocab = s->n_vocab,
                                   .rope_base = 500000.0f,
                                   .rope_freq_scale = 1.0f,
                                   .rms_eps = 1e-5f,
                                   .n_swa = s->swa,
                                   .n_expert = s->n_expert,
                                   .n_expert_used = s->n_used,
                                   .n_ff_exp = s->n_ff_exp};
    model_hparams_derive(&m->hp);
    m->layers = calloc((size_t)s->n_layer, sizeof *m->layers);
    if (!m->layers) {
        fprintf(stderr, "bench_synth: out of memory\n");
        exit(1);
    }
    model_layer_kinds(m, s->swa_period, 0.0f);
    return m;
}

/* The model of shape s in type's mix, synthesized (see the file's
 * comment) with its family's switches; a routed shape has every layer
 * routed (router, 3-D expert tensors, no dense FFN). */
struct model *bench_synth(const struct bench_shape *s, const char *type)
{
    static const char *wn[MODEL_W_PER_LAYER] = {"attn_q",   "attn_k", "attn_v",  "attn_output",
                                                "ffn_gate", "ffn_up", "ffn_down"};
    static const char *en[MODEL_EXP_COUNT] = {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"};
    enum quant_ftype ft;
    if (strcmp(type, "q4_k") != 0 && quant_ftype_from_name(type, &ft)) {
        fprintf(stderr, "bench_synth: unknown type %s\n", type);
        exit(1);
    }
    struct model *m = bench_synth_shape(s);
    int64_t hd = m->hp.head_dim;
    int64_t qd = s->n_head * hd, kvd = s->n_head_kv * hd;
    const struct arch_desc *a = m->hp.arch;
    set_w(&m->tok_embd, type, ft, s, "token_embd.weight", s->n_embd, s->n_vocab, 0);
    if (a->flags & ARCH_TIED_ALWAYS) {
        m->output = m->tok_embd;
        m->tied = 1;
    } else {
        set_w(&m->output, type, ft, s, "output.weight", s->n_embd, s->n_vocab, 0);
    }
    set_w(&m->out_norm, type, ft, s, "output_norm.weight", s->n_embd, 1, 1);
    for (int32_t l = 0; l < s->n_layer; l++) {
        struct model_layer *L = &m->layers[l];
        char name[64];
        int64_t in[MODEL_W_PER_LAYER] = {s->n_embd, s->n_embd, s->n_embd, qd,
                                         s->n_embd, s->n_embd, s->n_ff};
        int64_t out[MODEL_W_PER_LAYER] = {qd, kvd, kvd, s->n_embd, s->n_ff, s->n_ff, s->n_embd};
        snprintf(name, sizeof name, "blk.%d.attn_norm.weight", l);
        set_w(&L->attn_norm, type, ft, s, name, s->n_embd, 1, 1);
        snprintf(name, sizeof name, "blk.%d.ffn_norm.weight", l);
        set_w(&L->ffn_norm, type, ft, s, name, s->n_embd, 1, 1);
        for (int w = 0; w < (s->n_expert ? MODEL_W_GATE : MODEL_W_PER_LAYER); w++) {
            snprintf(name, sizeof name, "blk.%d.%s.weight", l, wn[w]);
            set_w(&L->w[w], type, ft, s, name, in[w], out[w], 0);
        }
        for (int i = 0; i < 3 && strcmp(s->arch, "qwen2") == 0; i++) {
            snprintf(name, sizeof name, "blk.%d.%s.bias", l, wn[i]);
            set_w(&L->bias[i], type, ft, s, name, out[i], 1, 1);
        }
        if (s->n_expert) {
            snprintf(name, sizeof name, "blk.%d.ffn_gate_inp.weight", l);
            set_router(&L->gate_inp, name, s->n_embd, s->n_expert);
            for (int x = 0; x < MODEL_EXP_COUNT; x++) {
                snprintf(name, sizeof name, "blk.%d.%s.weight", l, en[x]);
                set_wn(&L->exps[x], type, ft, s, name,
                       x == MODEL_EXP_DOWN ? s->n_ff_exp : s->n_embd,
                       x == MODEL_EXP_DOWN ? s->n_embd : s->n_ff_exp, s->n_expert, 0);
            }
        }
        if (a->flags & ARCH_QK_NORM) {
            snprintf(name, sizeof name, "blk.%d.attn_q_norm.weight", l);
            set_w(&L->q_norm, type, ft, s, name, hd, 1, 1);
            snprintf(name, sizeof name, "blk.%d.attn_k_norm.weight", l);
            set_w(&L->k_norm, type, ft, s, name, hd, 1, 1);
        }
        if (a->flags & ARCH_POST_NORMS) {
            snprintf(name, sizeof name, "blk.%d.post_attention_norm.weight", l);
            set_w(&L->attn_post_norm, type, ft, s, name, s->n_embd, 1, 1);
            snprintf(name, sizeof name, "blk.%d.post_ffw_norm.weight", l);
            set_w(&L->ffn_post_norm, type, ft, s, name, s->n_embd, 1, 1);
        }
    }
    return m;
}
