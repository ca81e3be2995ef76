/*
 * mkmodel.c: writes a GGUF of any family mfc runs (common/arch.h) with
 * seeded random weights, or the matching LoRA adapter, for tests and
 * benchmarks.
 *
 *   mkmodel -o OUT.gguf [--arch llama|qwen2|qwen3|qwen3moe|gemma2|gemma3|phi3|gpt-oss]
 *           [--preset toy|125m|1b|llama3-8b|qwen2.5-7b|gemma2-9b|phi3-mini|qwen3-30b-a3b]
 *           [--layers N] [--embd N] [--ff N] [--heads N] [--kv-heads N]
 *           [--head-dim N] [--vocab N] [--ctx N] [--rope-base F] [--seed N]
 *           [--tied] [--rope-freqs] [--qkv-bias] [--fused-qkv]
 *           [--experts N --experts-used K [--ff-exp N]]
 *           [--swa N [--swa-pattern P]] [--rope-factors ORIG_CTX]
 *           [--rope-scaling yarn|linear --rope-factor F [--rope-orig-ctx N]]
 *           [--type f32|f16|bf16|q8_0|q4_0|q4_k|q5_k|q6_k|q4_k_m|q5_k_m|mxfp4_moe]
 *           [--expert-type mxfp4|q8_0|...]
 *           [--vocab-from FILE.gguf | --vocab-json FILE.json]
 *           [--lora RANK --targets q,k,v,o,gate,up,down [--lora-alpha F]]
 *
 * A family's own tensors follow its descriptor's switches, named and shaped
 * as llama.cpp's loader wants them: q/k/v biases (qwen2, or --qkv-bias),
 * per-head q/k norms (qwen3, gemma3), post-norms (gemma2/3, whose output is
 * always token_embd), Phi-3's fused gate+up (and attn_qkv with --fused-qkv),
 * expert tensors (--experts: Mixtral as llama, qwen3moe), LongRoPE factor
 * tables (--rope-factors); gpt-oss's q/k/v and output biases, attention
 * sinks (mean 0.5, sd 0.5, so they take a visible share of each softmax),
 * post_attention_norm as its FFN norm, router and expert biases, and
 * expert gate/up weights of sd 0.5 so that its SwiGLU's clamps at +-7
 * engage; and its keys under "<arch>.".
 *
 * Weights: an Irwin-Hall(4) approximation of N(0, 0.02) (norm weights
 * 1 + N(0, 0.02)) from splitmix64 seeded by (--seed, tensor name), so a
 * tensor's values do not depend on the others or on the file type, and
 * generations stay finite. Tensor types follow llama.cpp's file-type rules
 * (common/quant.h quant_ftype_tensor_type) for f32/f16/bf16/q8_0/q4_0/
 * q4_k_m/q5_k_m/mxfp4_moe; q4_k/q5_k/q6_k put every matrix in that one
 * type; --expert-type then overrides the type of the 3-D expert tensors
 * (gpt-oss as OpenAI ships it: MXFP4 experts, the rest F16 or F32).
 * Biases, sinks and norms are always F32.
 *
 * Vocabulary: --vocab-from copies every tokenizer.* KV of a GGUF;
 * --vocab-json reads llama3-tokenizer.json (GGUF key names) or an HF
 * tokenizer.json (model.vocab/merges, added_tokens as control tokens);
 * without either, a byte-level SPM vocabulary of --vocab tokens is made.
 *
 * --lora writes an adapter instead of the model: general.type=adapter,
 * adapter.type=lora, adapter.lora.alpha, and for each target of each layer
 * "<base>.lora_a" {ne0 = base ne0, rank} and "<base>.lora_b" {rank, base ne1}
 * (llama.cpp src/llama-adapter.cpp); a fused base tensor (--fused-qkv's
 * attn_qkv, Phi-3's ffn_up) gets one pair over all its rows, and a model
 * with experts takes q, k, v, o targets only. Tensor data is generated and written
 * row by row (a few MB at a time), so the 8B preset needs no more memory
 * than a 4 MB chunk and one row.
 */
#include "config.h"

#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/arch.h"
#include "common/err.h"
#include "common/file.h"
#include "common/ggml_type.h"
#include "common/gguf.h"
#include "common/json.h"
#include "common/num.h"
#include "common/quant.h"

#define CHUNK_BYTES ((size_t)4 << 20) /* bytes of tensor data per write */
#define MAX_JSON ((size_t)64 << 20)   /* tokenizer JSON size cap */
#define MAX_TENSORS 4096

/* ---------------------------------------------------------------------------
 * options
 * ------------------------------------------------------------------------- */

struct shape {
    uint32_t n_layer;   /* transformer blocks */
    uint32_t n_embd;    /* hidden size */
    uint32_t n_ff;      /* feed-forward size */
    uint32_t n_head;    /* query heads */
    uint32_t n_head_kv; /* key/value heads */
    uint32_t n_vocab;   /* tokens */
    uint32_t n_ctx;     /* context length */
    float rope_base;    /* rope.freq_base */
    uint32_t head_dim;  /* 0: n_embd / n_head */
    uint32_t n_expert;  /* 0: dense */
    uint32_t n_used;    /* experts per token */
    uint32_t n_ff_exp;  /* an expert's width; 0: n_ff */
    const char *arch;   /* general.architecture; NULL: llama */
};

enum target { T_Q, T_K, T_V, T_O, T_GATE, T_UP, T_DOWN, T_COUNT };
static const char *const target_flag[T_COUNT] = {"q", "k", "v", "o", "gate", "up", "down"};
static const char *const target_name[T_COUNT] = {
    "attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down",
};

struct opts {
    struct shape s;         /* model shape */
    const char *out;        /* output path */
    const char *preset;     /* preset name or NULL */
    const char *type;       /* --type as given */
    const char *vocab_from; /* GGUF to copy tokenizer.* from */
    const char *vocab_json; /* tokenizer JSON */
    uint64_t seed;          /* PRNG seed */
    int tied;               /* no output.weight */
    int rope_freqs;         /* write rope_freqs.weight */
    int vocab_given;        /* --vocab was on the command line */
    uint32_t lora_rank;     /* 0: write the model, else the adapter */
    float lora_alpha;       /* adapter.lora.alpha */
    unsigned targets;       /* bit i: target i */
    const struct arch_desc *arch; /* the family */
    int qkv_bias;           /* write q/k/v biases */
    int fused_qkv;          /* attn_qkv instead of attn_q/k/v */
    uint32_t swa;           /* attention.sliding_window; 0: none written */
    int32_t swa_pattern;    /* attention.sliding_window_pattern; -1: none written */
    uint32_t rope_factors;  /* LongRoPE tables with this original context; 0: none */
    const char *rope_scaling; /* rope.scaling.type, or NULL */
    float rope_factor;      /* rope.scaling.factor */
    uint32_t rope_orig_ctx; /* rope.scaling.original_context_length; 0: none */
    const char *expert_type; /* --expert-type: type of the 3-D expert tensors, or NULL */
};

struct preset {
    const char *name;
    struct shape s;
};

/* The model shapes of the benchmarks' families (their config.json). */
static const struct preset presets[] = {
    {"toy", {2, 256, 512, 4, 2, 512, 512, 10000.0f, 0, 0, 0, 0, NULL}},
    {"125m", {12, 768, 2048, 12, 4, 32000, 2048, 10000.0f, 0, 0, 0, 0, NULL}},
    {"1b", {16, 2048, 8192, 32, 8, 128256, 8192, 500000.0f, 0, 0, 0, 0, NULL}},
    {"llama3-8b", {32, 4096, 14336, 32, 8, 128256, 8192, 500000.0f, 0, 0, 0, 0, NULL}},
    {"qwen2.5-7b", {28, 3584, 18944, 28, 4, 152064, 32768, 1000000.0f, 0, 0, 0, 0, "qwen2"}},
    {"gemma2-9b", {42, 3584, 14336, 16, 8, 256000, 8192, 10000.0f, 256, 0, 0, 0, "gemma2"}},
    {"phi3-mini", {32, 3072, 8192, 32, 32, 32064, 4096, 10000.0f, 0, 0, 0, 0, "phi3"}},
    {"qwen3-30b-a3b",
     {48, 2048, 6144, 32, 4, 151936, 40960, 1000000.0f, 128, 128, 8, 768, "qwen3moe"}},
};

static void usage(FILE *f)
{
    fprintf(f, "usage: mkmodel -o OUT.gguf\n"
               "  [--arch llama|qwen2|qwen3|qwen3moe|gemma2|gemma3|phi3|gpt-oss]\n"
               "  [--preset toy|125m|1b|llama3-8b|qwen2.5-7b|gemma2-9b|phi3-mini|qwen3-30b-a3b]\n"
               "  [--layers N] [--embd N] [--ff N] [--heads N] [--kv-heads N] [--head-dim N]\n"
               "  [--vocab N] [--ctx N] [--rope-base F] [--seed N] [--tied] [--rope-freqs]\n"
               "  [--qkv-bias] [--fused-qkv] [--experts N --experts-used K [--ff-exp N]]\n"
               "  [--swa N [--swa-pattern P]] [--rope-factors ORIG_CTX]\n"
               "  [--rope-scaling yarn|linear --rope-factor F [--rope-orig-ctx N]]\n"
               "  [--type f32|f16|bf16|q8_0|q4_0|q4_k|q5_k|q6_k|q4_k_m|q5_k_m|mxfp4_moe]\n"
               "  [--expert-type mxfp4|q8_0|...]\n"
               "  [--vocab-from FILE.gguf | --vocab-json FILE.json]\n"
               "  [--lora RANK --targets q,k,v,o,gate,up,down [--lora-alpha F]]\n");
}

static int parse_u32(const char *flag, const char *s, uint32_t *out, struct mf_err *err)
{
    uint64_t v;
    if (mf_num_parse_u64(s, &v) != 0 || v == 0 || v > UINT32_MAX)
        return mf_err_set(err, MF_EUSAGE, "%s wants a positive integer, not '%s'", flag, s);
    *out = (uint32_t)v;
    return 0;
}

static int parse_float(const char *flag, const char *s, float *out, struct mf_err *err)
{
    double v;
    if (mf_num_parse_f64(s, &v) != 0)
        return mf_err_set(err, MF_EUSAGE, "%s wants a number, not '%s'", flag, s);
    *out = (float)v;
    return 0;
}

static int parse_targets(const char *s, unsigned *mask, struct mf_err *err)
{
    *mask = 0;
    while (*s) {
        size_t n = strcspn(s, ",");
        int found = 0;
        for (int t = 0; t < T_COUNT; t++) {
            if (strlen(target_flag[t]) == n && strncmp(s, target_flag[t], n) == 0) {
                *mask |= 1u << t;
                found = 1;
            }
        }
        if (!found)
            return mf_err_set(err, MF_EUSAGE,
                              "--targets: unknown target '%.*s' (use q, k, v, "
                              "o, gate, up, down)",
                              (int)n, s);
        s += n + (s[n] == ',');
    }
    return 0;
}

static int apply_preset(struct opts *o, const char *name, struct mf_err *err)
{
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++) {
        if (strcmp(presets[i].name, name) == 0) {
            o->s = presets[i].s;
            if (strcmp(name, "gemma2-9b") == 0)
                o->swa = 4096;
            o->preset = presets[i].name;
            return 0;
        }
    }
    return mf_err_set(err, MF_EUSAGE,
                      "unknown preset '%s' (toy, 125m, 1b, llama3-8b, qwen2.5-7b, gemma2-9b, "
                      "phi3-mini, qwen3-30b-a3b)",
                      name);
}

enum {
    O_PRESET = 256,
    O_LAYERS,
    O_EMBD,
    O_FF,
    O_HEADS,
    O_KV,
    O_VOCAB,
    O_CTX,
    O_ROPE,
    O_SEED,
    O_TIED,
    O_TYPE,
    O_VFROM,
    O_VJSON,
    O_LORA,
    O_TARGETS,
    O_ALPHA,
    O_RFREQS,
    O_ARCH,
    O_HDIM,
    O_BIAS,
    O_FQKV,
    O_EXPERTS,
    O_USED,
    O_FFEXP,
    O_SWA,
    O_SWAP,
    O_RFACT,
    O_RSCALE,
    O_RFACTOR,
    O_RORIG,
    O_ETYPE
};

static const struct option long_opts[] = {
    {"preset", 1, 0, O_PRESET},    {"layers", 1, 0, O_LAYERS},
    {"embd", 1, 0, O_EMBD},        {"ff", 1, 0, O_FF},
    {"heads", 1, 0, O_HEADS},      {"kv-heads", 1, 0, O_KV},
    {"vocab", 1, 0, O_VOCAB},      {"ctx", 1, 0, O_CTX},
    {"rope-base", 1, 0, O_ROPE},   {"seed", 1, 0, O_SEED},
    {"tied", 0, 0, O_TIED},        {"type", 1, 0, O_TYPE},
    {"vocab-from", 1, 0, O_VFROM}, {"vocab-json", 1, 0, O_VJSON},
    {"lora", 1, 0, O_LORA},        {"targets", 1, 0, O_TARGETS},
    {"lora-alpha", 1, 0, O_ALPHA}, {"rope-freqs", 0, 0, O_RFREQS},
    {"arch", 1, 0, O_ARCH},        {"head-dim", 1, 0, O_HDIM},
    {"qkv-bias", 0, 0, O_BIAS},    {"fused-qkv", 0, 0, O_FQKV},
    {"experts", 1, 0, O_EXPERTS},  {"experts-used", 1, 0, O_USED},
    {"ff-exp", 1, 0, O_FFEXP},     {"swa", 1, 0, O_SWA},
    {"swa-pattern", 1, 0, O_SWAP}, {"rope-factors", 1, 0, O_RFACT},
    {"rope-scaling", 1, 0, O_RSCALE}, {"rope-factor", 1, 0, O_RFACTOR},
    {"rope-orig-ctx", 1, 0, O_RORIG}, {"expert-type", 1, 0, O_ETYPE},
    {"help", 0, 0, 'h'},
    {0, 0, 0, 0},
};

static int parse_opt(struct opts *o, int c, const char *a, struct mf_err *err)
{
    switch (c) {
    case 'o':
        o->out = a;
        return 0;
    case O_PRESET:
        return apply_preset(o, a, err);
    case O_LAYERS:
        return parse_u32("--layers", a, &o->s.n_layer, err);
    case O_EMBD:
        return parse_u32("--embd", a, &o->s.n_embd, err);
    case O_FF:
        return parse_u32("--ff", a, &o->s.n_ff, err);
    case O_HEADS:
        return parse_u32("--heads", a, &o->s.n_head, err);
    case O_KV:
        return parse_u32("--kv-heads", a, &o->s.n_head_kv, err);
    case O_VOCAB:
        o->vocab_given = 1;
        return parse_u32("--vocab", a, &o->s.n_vocab, err);
    case O_CTX:
        return parse_u32("--ctx", a, &o->s.n_ctx, err);
    case O_ROPE:
        return parse_float("--rope-base", a, &o->s.rope_base, err);
    case O_SEED:
        return mf_num_parse_u64(a, &o->seed) ? mf_err_set(err, MF_EUSAGE, "bad --seed '%s'", a) : 0;
    case O_TIED:
        o->tied = 1;
        return 0;
    case O_RFREQS:
        o->rope_freqs = 1;
        return 0;
    case O_TYPE:
        o->type = a;
        return 0;
    case O_VFROM:
        o->vocab_from = a;
        return 0;
    case O_VJSON:
        o->vocab_json = a;
        return 0;
    case O_LORA:
        return parse_u32("--lora", a, &o->lora_rank, err);
    case O_TARGETS:
        return parse_targets(a, &o->targets, err);
    case O_ALPHA:
        return parse_float("--lora-alpha", a, &o->lora_alpha, err);
    case O_ARCH:
        o->s.arch = a;
        return 0;
    case O_HDIM:
        return parse_u32("--head-dim", a, &o->s.head_dim, err);
    case O_BIAS:
        o->qkv_bias = 1;
        return 0;
    case O_FQKV:
        o->fused_qkv = 1;
        return 0;
    case O_EXPERTS:
        return parse_u32("--experts", a, &o->s.n_expert, err);
    case O_USED:
        return parse_u32("--experts-used", a, &o->s.n_used, err);
    case O_FFEXP:
        return parse_u32("--ff-exp", a, &o->s.n_ff_exp, err);
    case O_SWA:
        return parse_u32("--swa", a, &o->swa, err);
    case O_SWAP: {
        uint64_t v;
        if (mf_num_parse_u64(a, &v) != 0 || v > 1024)
            return mf_err_set(err, MF_EUSAGE, "--swa-pattern wants 0..1024, not '%s'", a);
        o->swa_pattern = (int32_t)v;
        return 0;
    }
    case O_RFACT:
        return parse_u32("--rope-factors", a, &o->rope_factors, err);
    case O_RSCALE:
        o->rope_scaling = a;
        return 0;
    case O_RFACTOR:
        return parse_float("--rope-factor", a, &o->rope_factor, err);
    case O_RORIG:
        return parse_u32("--rope-orig-ctx", a, &o->rope_orig_ctx, err);
    case O_ETYPE:
        o->expert_type = a;
        return 0;
    default:
        return mf_err_set(err, MF_EUSAGE, "unknown option");
    }
}

static int check_opts(const struct opts *o, struct mf_err *err)
{
    const struct shape *s = &o->s;
    if (!o->out)
        return mf_err_set(err, MF_EUSAGE, "-o OUT.gguf is required");
    if (o->vocab_from && o->vocab_json)
        return mf_err_set(err, MF_EUSAGE, "--vocab-from and --vocab-json exclude each other");
    if (!s->head_dim && (s->n_embd % s->n_head != 0 || (s->n_embd / s->n_head) % 2 != 0))
        return mf_err_set(err, MF_EUSAGE,
                          "--embd %" PRIu32 " must be an even multiple of "
                          "--heads %" PRIu32,
                          s->n_embd, s->n_head);
    if (s->head_dim % 2)
        return mf_err_set(err, MF_EUSAGE, "--head-dim must be even");
    if (!o->arch)
        return mf_err_set(err, MF_EUSAGE, "--arch: unknown architecture '%s' (%s)", s->arch,
                          arch_names());
    if (s->n_expert && (!s->n_used || s->n_used > s->n_expert))
        return mf_err_set(err, MF_EUSAGE, "--experts needs --experts-used 1..%" PRIu32,
                          s->n_expert);
    if (o->expert_type && !s->n_expert)
        return mf_err_set(err, MF_EUSAGE, "--expert-type needs --experts");
    if ((o->arch->flags & ARCH_SWA_KEY) && !o->swa)
        return mf_err_set(err, MF_EUSAGE, "%s needs --swa", o->arch->name);
    if (s->n_expert && !(o->arch->flags & ARCH_EXPERTS))
        return mf_err_set(err, MF_EUSAGE, "--experts: %s has no experts", o->arch->name);
    if (!s->n_expert && (o->arch->flags & ARCH_ALL_EXPERTS))
        return mf_err_set(err, MF_EUSAGE, "%s needs --experts", o->arch->name);
    if (o->lora_rank && s->n_expert &&
        (o->targets & ((1u << T_GATE) | (1u << T_UP) | (1u << T_DOWN))))
        return mf_err_set(err, MF_EUSAGE,
                          "adapters of a model with experts target q, k, v, o only (its layers "
                          "have no dense gate, up or down)");
    if (s->n_head % s->n_head_kv != 0)
        return mf_err_set(err, MF_EUSAGE, "--heads must be a multiple of --kv-heads");
    if (o->lora_rank && !o->targets)
        return mf_err_set(err, MF_EUSAGE, "--lora needs --targets");
    if (!o->lora_rank && o->targets)
        return mf_err_set(err, MF_EUSAGE, "--targets needs --lora RANK");
    return 0;
}

static int parse_args(int argc, char **argv, struct opts *o, struct mf_err *err)
{
    memset(o, 0, sizeof *o);
    o->s = presets[0].s;
    o->preset = "toy";
    o->type = "f32";
    o->seed = 42;
    o->swa_pattern = -1;
    int c, rc = 0;
    while (!rc && (c = getopt_long(argc, argv, "o:h", long_opts, NULL)) != -1) {
        if (c == 'h') {
            usage(stdout);
            exit(0);
        }
        rc = c == '?' ? mf_err_set(err, MF_EUSAGE, "bad option") : parse_opt(o, c, optarg, err);
    }
    if (!rc && optind < argc)
        rc = mf_err_set(err, MF_EUSAGE, "unexpected argument '%s'", argv[optind]);
    if (!rc && o->lora_alpha == 0)
        o->lora_alpha = (float)o->lora_rank;
    if (!rc) {
        const char *a = o->s.arch ? o->s.arch : "llama";
        o->arch = arch_find(a, strlen(a));
        o->qkv_bias |= o->arch && (strcmp(o->arch->name, "qwen2") == 0 ||
                                   strcmp(o->arch->name, "gpt-oss") == 0);
    }
    return rc ? rc : check_opts(o, err);
}

/* ---------------------------------------------------------------------------
 * random numbers: splitmix64, one stream per tensor
 * ------------------------------------------------------------------------- */

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t stream_for(uint64_t seed, const char *name)
{
    uint64_t h = 1469598103934665603ull;
    for (; *name; name++)
        h = (h ^ (uint8_t)*name) * 1099511628211ull;
    uint64_t x = seed ^ h;
    splitmix64(&x);
    return x;
}

/* n values ~ mean + sd * N(0,1), approximated by the sum of four 16-bit
 * uniforms (Irwin-Hall, variance 4/12): one PRNG call per value. */
static void fill_row(uint64_t *st, float *v, uint64_t n, float mean, float sd)
{
    const float scale = sd / (65536.0f * 0.57735027f);
    for (uint64_t i = 0; i < n; i++) {
        uint64_t r = splitmix64(st);
        float s = (float)((r & 0xffff) + ((r >> 16) & 0xffff) + ((r >> 32) & 0xffff) + (r >> 48));
        v[i] = mean + (s - 2.0f * 65535.0f) * scale;
    }
}

/* ---------------------------------------------------------------------------
 * the tensor plan
 * ------------------------------------------------------------------------- */

struct ptensor {
    char name[GGUF_MAX_NAME]; /* GGUF tensor name */
    uint32_t n_dims;          /* 1, 2 or 3 (experts) */
    uint64_t ne[3];           /* ggml order: ne[0] is the row */
    enum ggml_type type;      /* chosen file type */
    float mean;               /* value distribution: mean + sd * N(0,1) */
    float sd;
};

struct plan {
    struct ptensor t[MAX_TENSORS]; /* in file order */
    size_t n;                      /* used */
    enum quant_ftype ft;           /* general.file_type */
    int uniform;                   /* 1: every matrix gets utype */
    enum ggml_type utype;          /* the uniform type */
    int has_etype;                 /* 1: the 3-D expert tensors get etype */
    enum ggml_type etype;          /* --expert-type */
};

static int plan_add(struct plan *p, const char *name, uint32_t n_dims, uint64_t ne0, uint64_t ne1,
                    float mean, float sd, struct mf_err *err)
{
    if (p->n == MAX_TENSORS)
        return mf_err_set(err, MF_ERANGE, "more than %d tensors", MAX_TENSORS);
    struct ptensor *t = &p->t[p->n++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->n_dims = n_dims;
    t->ne[0] = ne0;
    t->ne[1] = n_dims > 1 ? ne1 : 1;
    t->ne[2] = 1;
    t->mean = mean;
    t->sd = sd;
    return 0;
}

/* Head width: --head-dim, else n_embd / n_head. */
static uint64_t head_dim(const struct shape *s)
{
    return s->head_dim ? s->head_dim : s->n_embd / s->n_head;
}

/* ne0/ne1 of a layer's weight for target t (ggml order). */
static void target_dims(const struct shape *s, int t, uint64_t *ne0, uint64_t *ne1)
{
    uint64_t hd = head_dim(s);
    uint64_t q = hd * s->n_head, kv = hd * s->n_head_kv;
    const uint64_t dims[T_COUNT][2] = {
        {s->n_embd, q},       {s->n_embd, kv},      {s->n_embd, kv},      {q, s->n_embd},
        {s->n_embd, s->n_ff}, {s->n_embd, s->n_ff}, {s->n_ff, s->n_embd},
    };
    *ne0 = dims[t][0];
    *ne1 = dims[t][1];
}

/* plan_add of "blk.<l>.<stem>.<suffix>". */
static int plan_l(struct plan *p, uint32_t l, const char *stem, const char *suffix,
                  uint32_t n_dims, uint64_t ne0, uint64_t ne1, float mean, float sd,
                  struct mf_err *err)
{
    char name[GGUF_MAX_NAME];
    snprintf(name, sizeof name, "blk.%" PRIu32 ".%s.%s", l, stem, suffix);
    return plan_add(p, name, n_dims, ne0, ne1, mean, sd, err);
}

/* q, k, v of layer l (fused or not) and their biases. */
static int plan_qkv(const struct opts *o, struct plan *p, uint32_t l, struct mf_err *err)
{
    uint64_t hd = head_dim(&o->s), rows[3] = {hd * o->s.n_head, hd * o->s.n_head_kv,
                                              hd * o->s.n_head_kv};
    int rc = 0;
    if (o->fused_qkv) {
        rc = plan_l(p, l, "attn_qkv", "weight", 2, o->s.n_embd, rows[0] + 2 * rows[1], 0, 0.02f,
                    err);
        if (!rc && o->qkv_bias)
            rc = plan_l(p, l, "attn_qkv", "bias", 1, rows[0] + 2 * rows[1], 1, 0, 0.02f, err);
        return rc;
    }
    for (int t = T_Q; t <= T_V && !rc; t++) {
        rc = plan_l(p, l, target_name[t], "weight", 2, o->s.n_embd, rows[t], 0, 0.02f, err);
        if (!rc && o->qkv_bias)
            rc = plan_l(p, l, target_name[t], "bias", 1, rows[t], 1, 0, 0.02f, err);
    }
    return rc;
}

/* The FFN of layer l: experts, Phi-3's fused gate+up, or gate/up/down. */
static int plan_ffn(const struct opts *o, struct plan *p, uint32_t l, struct mf_err *err)
{
    const struct shape *s = &o->s;
    uint64_t fe = s->n_ff_exp ? s->n_ff_exp : s->n_ff;
    int rc;
    if (s->n_expert) {
        static const char *const stems[3] = {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"};
        const int biases = (o->arch->flags & ARCH_EXPERT_BIASES) != 0;
        rc = plan_l(p, l, "ffn_gate_inp", "weight", 2, s->n_embd, s->n_expert, 0, 0.02f, err);
        if (!rc && biases)
            rc = plan_l(p, l, "ffn_gate_inp", "bias", 1, s->n_expert, 1, 0, 0.02f, err);
        for (int i = 0; i < 3 && !rc; i++) {
            /* gpt-oss: gates and ups big enough for its clamps to engage */
            float sd = biases && i < 2 ? 0.5f : 0.02f;
            rc = plan_l(p, l, stems[i], "weight", 3, i == 2 ? fe : s->n_embd,
                        i == 2 ? s->n_embd : fe, 0, sd, err);
            p->t[p->n - 1].ne[2] = s->n_expert;
            if (!rc && biases)
                rc = plan_l(p, l, stems[i], "bias", 2, i == 2 ? s->n_embd : fe, s->n_expert, 0,
                            0.02f, err);
        }
        return rc;
    }
    if (o->arch->flags & ARCH_FUSED_UP)
        rc = plan_l(p, l, "ffn_up", "weight", 2, s->n_embd, 2 * (uint64_t)s->n_ff, 0, 0.02f, err);
    else
        rc = plan_l(p, l, "ffn_gate", "weight", 2, s->n_embd, s->n_ff, 0, 0.02f, err);
    if (!rc && !(o->arch->flags & ARCH_FUSED_UP))
        rc = plan_l(p, l, "ffn_up", "weight", 2, s->n_embd, s->n_ff, 0, 0.02f, err);
    if (!rc)
        rc = plan_l(p, l, "ffn_down", "weight", 2, s->n_ff, s->n_embd, 0, 0.02f, err);
    return rc;
}

static int plan_layer(const struct opts *o, struct plan *p, uint32_t l, struct mf_err *err)
{
    const struct shape *s = &o->s;
    uint32_t f = o->arch->flags;
    uint64_t hd = head_dim(s);
    int rc = plan_l(p, l, "attn_norm", "weight", 1, s->n_embd, 1, 1, 0.02f, err);
    if (!rc)
        rc = plan_qkv(o, p, l, err);
    if (!rc && (f & ARCH_QK_NORM))
        rc = plan_l(p, l, "attn_q_norm", "weight", 1, hd, 1, 1, 0.02f, err);
    if (!rc && (f & ARCH_QK_NORM))
        rc = plan_l(p, l, "attn_k_norm", "weight", 1, hd, 1, 1, 0.02f, err);
    if (!rc)
        rc = plan_l(p, l, "attn_output", "weight", 2, hd * s->n_head, s->n_embd, 0, 0.02f, err);
    if (!rc && (f & ARCH_O_BIAS))
        rc = plan_l(p, l, "attn_output", "bias", 1, s->n_embd, 1, 0, 0.02f, err);
    if (!rc && (f & ARCH_SINKS))
        rc = plan_l(p, l, "attn_sinks", "weight", 1, s->n_head, 1, 0.5f, 0.5f, err);
    if (!rc && (f & ARCH_POST_NORMS))
        rc = plan_l(p, l, "post_attention_norm", "weight", 1, s->n_embd, 1, 1, 0.02f, err);
    if (!rc)
        rc = plan_l(p, l, (f & ARCH_FFN_NORM_POST_ATTN) ? "post_attention_norm" : "ffn_norm",
                    "weight", 1, s->n_embd, 1, 1, 0.02f, err);
    if (!rc)
        rc = plan_ffn(o, p, l, err);
    if (!rc && (f & ARCH_POST_NORMS))
        rc = plan_l(p, l, "post_ffw_norm", "weight", 1, s->n_embd, 1, 1, 0.02f, err);
    return rc;
}

static int plan_model(const struct opts *o, struct plan *p, struct mf_err *err)
{
    const struct shape *s = &o->s;
    uint64_t half = head_dim(s) / 2;
    int rc = plan_add(p, "token_embd.weight", 2, s->n_embd, s->n_vocab, 0, 0.02f, err);
    if (!rc && o->rope_freqs)
        rc = plan_add(p, "rope_freqs.weight", 1, half, 1, 1, 0, err);
    /* LongRoPE factors: >= 1, short ones near 1, long ones growing */
    if (!rc && o->rope_factors)
        rc = plan_add(p, "rope_factors_short.weight", 1, half, 1, 1.1f, 0.05f, err);
    if (!rc && o->rope_factors)
        rc = plan_add(p, "rope_factors_long.weight", 1, half, 1, 4.0f, 1.0f, err);
    for (uint32_t l = 0; l < s->n_layer && !rc; l++)
        rc = plan_layer(o, p, l, err);
    if (!rc)
        rc = plan_add(p, "output_norm.weight", 1, s->n_embd, 1, 1, 0.02f, err);
    if (!rc && !o->tied && !(o->arch->flags & ARCH_TIED_ALWAYS))
        rc = plan_add(p, "output.weight", 2, s->n_embd, s->n_vocab, 0, 0.02f, err);
    return rc;
}

/* A fused base tensor is adapted as one pair (PEFT's qkv_proj, gate_up_proj):
 * any of q, k, v targets attn_qkv, any of gate, up targets Phi-3's ffn_up. */
static int plan_lora(const struct opts *o, struct plan *p, struct mf_err *err)
{
    char name[GGUF_MAX_NAME];
    int rc = 0;
    for (uint32_t l = 0; l < o->s.n_layer && !rc; l++) {
        int done_qkv = 0, done_up = 0;
        for (int t = 0; t < T_COUNT && !rc; t++) {
            if (!(o->targets & (1u << t)))
                continue;
            uint64_t ne0, ne1, e0, e1;
            const char *base = target_name[t];
            target_dims(&o->s, t, &ne0, &ne1);
            if (o->fused_qkv && t <= T_V) {
                if (done_qkv++)
                    continue;
                base = "attn_qkv";
                target_dims(&o->s, T_K, &e0, &e1);
                target_dims(&o->s, T_Q, &ne0, &ne1);
                ne1 += 2 * e1;
            } else if ((o->arch->flags & ARCH_FUSED_UP) && (t == T_GATE || t == T_UP)) {
                if (done_up++)
                    continue;
                base = "ffn_up";
                ne1 *= 2;
            }
            snprintf(name, sizeof name, "blk.%" PRIu32 ".%s.weight.lora_a", l, base);
            rc = plan_add(p, name, 2, ne0, o->lora_rank, 0, 0.05f, err);
            snprintf(name, sizeof name, "blk.%" PRIu32 ".%s.weight.lora_b", l, base);
            if (!rc)
                rc = plan_add(p, name, 2, o->lora_rank, ne1, 0, 0.05f, err);
        }
    }
    return rc;
}

/* --type: a llama.cpp file type, or q4_k/q5_k/q6_k for one type throughout. */
static int resolve_type(const struct opts *o, struct plan *p, struct mf_err *err)
{
    static const struct {
        const char *name;
        enum ggml_type t;
        enum quant_ftype ft;
    } uni[] = {
        {"q4_k", GGML_TYPE_Q4_K, QUANT_FTYPE_MOSTLY_Q4_K_S},
        {"q5_k", GGML_TYPE_Q5_K, QUANT_FTYPE_MOSTLY_Q5_K_S},
        {"q6_k", GGML_TYPE_Q6_K, QUANT_FTYPE_MOSTLY_Q6_K},
    };
    if (o->expert_type) {
        if (ggml_type_from_name(o->expert_type, &p->etype) != 0 ||
            !quant_can_quantize(p->etype))
            return mf_err_set(err, MF_EUSAGE, "unknown or unsupported --expert-type '%s'",
                              o->expert_type);
        p->has_etype = 1;
    }
    for (size_t i = 0; i < sizeof uni / sizeof uni[0]; i++) {
        if (strcmp(o->type, uni[i].name) == 0) {
            p->uniform = 1;
            p->utype = uni[i].t;
            p->ft = uni[i].ft;
            return 0;
        }
    }
    if (quant_ftype_from_name(o->type, &p->ft) != 0 || !quant_ftype_can_build(p->ft))
        return mf_err_set(err, MF_EUSAGE, "unknown or unsupported --type '%s'", o->type);
    if (o->lora_rank && p->ft != QUANT_FTYPE_ALL_F32 && p->ft != QUANT_FTYPE_MOSTLY_F16 &&
        p->ft != QUANT_FTYPE_MOSTLY_BF16)
        return mf_err_set(err, MF_EUSAGE, "adapters are written as f32, f16 or bf16");
    return 0;
}

static int choose_types(const struct opts *o, struct plan *p, struct mf_err *err)
{
    struct quant_model_info mi = {o->arch->name,
                                  (int32_t)o->s.n_layer,
                                  (int32_t)o->s.n_expert,
                                  (int32_t)(o->s.n_head / o->s.n_head_kv),
                                  !o->tied && !(o->arch->flags & ARCH_TIED_ALWAYS),
                                  0};
    for (size_t i = 0; i < p->n; i++) {
        struct ptensor *t = &p->t[i];
        size_t nl = strlen(t->name);
        int bias = !o->lora_rank && (nl < 7 || strcmp(t->name + nl - 7, ".weight") != 0);
        if (t->n_dims == 1 || bias) {
            t->type = GGML_TYPE_F32; /* vectors and biases, as the converters write them */
        } else if (p->has_etype && t->n_dims == 3) {
            t->type = p->etype;
            if (t->ne[0] % ggml_type_block_size(t->type) != 0)
                return mf_err_set(err, MF_EUSAGE,
                                  "tensor %s: rows of %" PRIu64 " do not divide into %s blocks",
                                  t->name, t->ne[0], ggml_type_name(t->type));
        } else if (o->lora_rank) {
            t->type = p->ft == QUANT_FTYPE_MOSTLY_F16    ? GGML_TYPE_F16
                      : p->ft == QUANT_FTYPE_MOSTLY_BF16 ? GGML_TYPE_BF16
                                                         : GGML_TYPE_F32;
        } else if (p->uniform) {
            t->type = p->utype;
            if (t->ne[0] % ggml_type_block_size(t->type) != 0)
                return mf_err_set(err, MF_EUSAGE,
                                  "tensor %s: rows of %" PRIu64 " do not divide "
                                  "into %s blocks; pick sizes that are multiples of 256",
                                  t->name, t->ne[0], ggml_type_name(t->type));
        } else {
            struct quant_tensor_info ti = {t->name,
                                           GGML_TYPE_F32,
                                           (int)t->n_dims,
                                           {(int64_t)t->ne[0], (int64_t)t->ne[1],
                                            (int64_t)t->ne[2], 1}};
            int rc = quant_ftype_tensor_type(p->ft, &mi, &ti, &t->type, err);
            if (rc)
                return rc;
        }
    }
    return 0;
}

/* ---------------------------------------------------------------------------
 * vocabularies
 * ------------------------------------------------------------------------- */

struct vocab {
    struct gguf_file *gf; /* --vocab-from: owned */
    json_t *js;           /* --vocab-json: owned */
    int hf;               /* js is an HF tokenizer.json (else GGUF key names) */
    uint32_t n;           /* tokens */
};

static int json_vocab_size(struct vocab *v, struct mf_err *err)
{
    json_t *toks = json_object_get(v->js, "tokenizer.ggml.tokens");
    if (json_is_array(toks)) {
        v->n = (uint32_t)json_array_size(toks);
        return 0;
    }
    json_t *model = json_object_get(v->js, "model");
    json_t *vocab = json_object_get(model, "vocab");
    if (!json_is_object(vocab))
        return mf_err_set(err, MF_EFORMAT,
                          "tokenizer JSON has neither tokenizer.ggml.tokens nor "
                          "model.vocab");
    v->hf = 1;
    int64_t max = -1;
    const char *k;
    json_t *id;
    json_object_foreach(vocab, k, id) max =
        json_integer_value(id) > max ? json_integer_value(id) : max;
    size_t i;
    json_t *at;
    json_array_foreach(json_object_get(v->js, "added_tokens"), i, at)
    {
        int64_t x = json_integer_value(json_object_get(at, "id"));
        max = x > max ? x : max;
    }
    if (max < 0 || max >= UINT32_MAX)
        return mf_err_set(err, MF_EFORMAT, "tokenizer JSON: bad token ids");
    v->n = (uint32_t)max + 1;
    return 0;
}

static int load_vocab(struct opts *o, struct vocab *v, struct mf_err *err)
{
    int rc = 0;
    if (o->vocab_from) {
        const struct gguf_array *toks;
        rc = gguf_open(o->vocab_from, &v->gf, err);
        if (!rc)
            rc = gguf_get_arr(v->gf, "tokenizer.ggml.tokens", &toks, err);
        if (!rc)
            v->n = (uint32_t)toks->n;
    } else if (o->vocab_json) {
        char *text;
        size_t len;
        rc = mf_file_read(o->vocab_json, MAX_JSON, &text, &len, err);
        if (rc)
            return rc;
        v->js = mf_json_parse(text, len, o->vocab_json, err);
        free(text);
        rc = v->js ? json_vocab_size(v, err) : MF_EFORMAT;
    } else {
        v->n = o->s.n_vocab;
        if (v->n < 259)
            return mf_err_set(err, MF_EUSAGE, "the generated vocabulary needs --vocab >= 259");
    }
    if (!rc && o->vocab_given && v->n != o->s.n_vocab)
        return mf_err_set(err, MF_EUSAGE,
                          "--vocab %" PRIu32 " but the vocabulary has %" PRIu32 " tokens",
                          o->s.n_vocab, v->n);
    o->s.n_vocab = v->n;
    return rc;
}

static void free_vocab(struct vocab *v)
{
    gguf_close(v->gf);
    json_decref(v->js);
}

/* The tokenizer.ggml.* KVs of a vocabulary built here. */
struct vocab_kvs {
    const char *model;             /* tokenizer.ggml.model */
    const char *pre;               /* tokenizer.ggml.pre */
    const struct gguf_str *toks;   /* n tokens */
    uint64_t n;                    /* tokens */
    const int32_t *types;          /* n token types */
    const float *scores;           /* n scores, or NULL */
    const struct gguf_str *merges; /* n_merges merges, or NULL */
    uint64_t n_merges;             /* merges */
    int64_t bos, eos, unk;         /* token ids; -1 for none */
};

static int emit_vocab(struct gguf_writer *w, const struct vocab_kvs *v, struct mf_err *err)
{
    const char *const id_keys[3] = {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
                                    "tokenizer.ggml.unknown_token_id"};
    const int64_t ids[3] = {v->bos, v->eos, v->unk};
    int rc = gguf_writer_add_cstr(w, "tokenizer.ggml.model", v->model, err);
    if (!rc)
        rc = gguf_writer_add_cstr(w, "tokenizer.ggml.pre", v->pre, err);
    if (!rc)
        rc = gguf_writer_add_arr_str(w, "tokenizer.ggml.tokens", v->toks, v->n, err);
    if (!rc && v->scores)
        rc = gguf_writer_add_arr(w, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, v->scores, v->n,
                                 err);
    if (!rc)
        rc = gguf_writer_add_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, v->types, v->n,
                                 err);
    if (!rc && v->merges)
        rc = gguf_writer_add_arr_str(w, "tokenizer.ggml.merges", v->merges, v->n_merges, err);
    for (int i = 0; i < 3 && !rc; i++)
        if (ids[i] >= 0)
            rc = gguf_writer_add_u32(w, id_keys[i], (uint32_t)ids[i], err);
    if (!rc)
        rc = gguf_writer_add_bool(w, "tokenizer.ggml.add_bos_token", v->bos >= 0, err);
    if (!rc)
        rc = gguf_writer_add_bool(w, "tokenizer.ggml.add_eos_token", 0, err);
    return rc;
}

/* A byte-level SPM vocabulary: <unk> <s> </s>, 256 byte tokens, then fillers. */
static int write_spm_vocab(struct gguf_writer *w, uint32_t n, struct mf_err *err)
{
    struct gguf_str *toks = calloc(n, sizeof *toks);
    char *pool = malloc((size_t)n * 16);
    float *scores = calloc(n, sizeof *scores);
    int32_t *types = calloc(n, sizeof *types);
    int rc =
        (!toks || !pool || !scores || !types) ? mf_err_set(err, MF_ENOMEM, "out of memory") : 0;
    for (uint32_t i = 0; i < n && !rc; i++) {
        char *p = pool + (size_t)i * 16;
        if (i < 3)
            snprintf(p, 16, "%s", i == 0 ? "<unk>" : i == 1 ? "<s>" : "</s>");
        else if (i < 259)
            snprintf(p, 16, "<0x%02X>", i - 3);
        else
            snprintf(p, 16, "\xe2\x96\x81t%" PRIu32, i); /* U+2581 (SPM's space) */
        toks[i].p = p;
        toks[i].len = strlen(p);
        types[i] = i == 0 ? 2 : i < 3 ? 3 : i < 259 ? 6 : 1;
        scores[i] = i < 259 ? 0.0f : -(float)(i - 259);
    }
    struct vocab_kvs v = {"llama", "default", toks, n, types, scores, NULL, 0, 1, 2, 0};
    if (!rc)
        rc = emit_vocab(w, &v, err);
    free(toks);
    free(pool);
    free(scores);
    free(types);
    return rc;
}

/* A JSON array of strings, or of [a, b] pairs (HF merges), as GGUF strings.
 * Pair strings are built in *pool (the caller frees it). */
static int json_strings(const json_t *arr, struct gguf_str **out, char **pool, struct mf_err *err)
{
    size_t n = json_array_size(arr), need = 1, i;
    json_t *e;
    json_array_foreach(arr, i, e) if (json_is_array(e)) need +=
        json_string_length(json_array_get(e, 0)) + json_string_length(json_array_get(e, 1)) + 1;
    *out = calloc(n ? n : 1, sizeof **out);
    *pool = malloc(need);
    if (!*out || !*pool)
        return mf_err_set(err, MF_ENOMEM, "out of memory");
    char *p = *pool;
    json_array_foreach(arr, i, e)
    {
        if (json_is_string(e)) {
            (*out)[i].p = json_string_value(e);
            (*out)[i].len = json_string_length(e);
        } else if (json_is_array(e) && json_array_size(e) == 2) {
            size_t a = json_string_length(json_array_get(e, 0));
            size_t b = json_string_length(json_array_get(e, 1));
            memcpy(p, json_string_value(json_array_get(e, 0)), a);
            p[a] = ' ';
            memcpy(p + a + 1, json_string_value(json_array_get(e, 1)), b);
            (*out)[i].p = p;
            (*out)[i].len = a + b + 1;
            p += a + b + 1;
        } else {
            return mf_err_set(err, MF_EFORMAT, "tokenizer JSON: element %zu is not a string", i);
        }
    }
    return 0;
}

/* One JSON value as the GGUF KV key: strings, integers (u32 ids), bools,
 * arrays of strings, integers (i32) or numbers (f32). */
static int json_kv(struct gguf_writer *w, const char *key, const json_t *v, struct mf_err *err)
{
    if (json_is_string(v))
        return gguf_writer_add_str(w, key, json_string_value(v), json_string_length(v), err);
    if (json_is_integer(v))
        return gguf_writer_add_u32(w, key, (uint32_t)json_integer_value(v), err);
    if (json_is_boolean(v))
        return gguf_writer_add_bool(w, key, json_is_true(v), err);
    if (!json_is_array(v))
        return mf_err_set(err, MF_EFORMAT, "tokenizer JSON: %s has an unusable type", key);
    const json_t *first = json_array_get(v, 0);
    size_t n = json_array_size(v), i;
    json_t *e;
    if (!first || json_is_string(first) || json_is_array(first)) {
        struct gguf_str *s = NULL;
        char *pool = NULL;
        int rc = json_strings(v, &s, &pool, err);
        if (!rc)
            rc = gguf_writer_add_arr_str(w, key, s, n, err);
        free(s);
        free(pool);
        return rc;
    }
    int num = json_is_real(first);
    int32_t *iv = calloc(n, sizeof *iv);
    float *fv = calloc(n, sizeof *fv);
    int rc = (!iv || !fv) ? mf_err_set(err, MF_ENOMEM, "out of memory") : 0;
    json_array_foreach(v, i, e)
    {
        if (iv && fv) {
            iv[i] = (int32_t)json_integer_value(e);
            fv[i] = (float)json_number_value(e);
        }
    }
    if (!rc)
        rc = gguf_writer_add_arr(w, key, num ? GGUF_TYPE_FLOAT32 : GGUF_TYPE_INT32,
                                 num ? (const void *)fv : (const void *)iv, n, err);
    free(iv);
    free(fv);
    return rc;
}

/* llama3-tokenizer.json: keys are already GGUF names ("eot_token_id" gets
 * its tokenizer.ggml. prefix). */
static int write_json_gguf_vocab(struct gguf_writer *w, const json_t *js, struct mf_err *err)
{
    const char *k;
    json_t *v;
    int rc = 0;
    json_object_foreach((json_t *)js, k, v)
    {
        if (rc)
            break;
        if (strncmp(k, "tokenizer.", 10) == 0)
            rc = json_kv(w, k, v, err);
        else if (strcmp(k, "eot_token_id") == 0 || strcmp(k, "eom_token_id") == 0) {
            char key[64];
            snprintf(key, sizeof key, "tokenizer.ggml.%s", k);
            rc = json_kv(w, key, v, err);
        }
    }
    if (!rc && !json_object_get(js, "tokenizer.ggml.add_bos_token"))
        rc = gguf_writer_add_bool(w, "tokenizer.ggml.add_bos_token", 1, err);
    return rc;
}

static int64_t hf_token_id(const json_t *js, const char *const *names)
{
    size_t i;
    json_t *at;
    for (; *names; names++)
        json_array_foreach(
            json_object_get(js, "added_tokens"), i,
            at) if (strcmp(json_string_value(json_object_get(at, "content")) ?: "", *names) ==
                    0) return json_integer_value(json_object_get(at, "id"));
    return -1;
}

/* tokens by id from model.vocab and added_tokens (control when special);
 * holes become unused "<unused_N>" tokens. */
static int hf_tokens(const json_t *js, uint32_t n, struct gguf_str *toks, int32_t *types,
                     char *holes)
{
    const char *k;
    json_t *id, *at;
    size_t i;
    json_object_foreach(json_object_get(json_object_get(js, "model"), "vocab"), k, id)
    {
        int64_t x = json_integer_value(id);
        if (x >= 0 && x < n)
            toks[x] = (struct gguf_str){k, strlen(k)}, types[x] = 1;
    }
    json_array_foreach(json_object_get(js, "added_tokens"), i, at)
    {
        int64_t x = json_integer_value(json_object_get(at, "id"));
        const json_t *c = json_object_get(at, "content");
        if (x >= 0 && x < n && json_is_string(c)) {
            toks[x] = (struct gguf_str){json_string_value(c), json_string_length(c)};
            types[x] = json_is_true(json_object_get(at, "special")) ? 3 : 4;
        }
    }
    for (uint32_t t = 0; t < n; t++) {
        if (types[t] == 0) {
            char *p = holes + (size_t)t * 24;
            snprintf(p, 24, "<unused_%" PRIu32 ">", t);
            toks[t] = (struct gguf_str){p, strlen(p)};
            types[t] = 5;
        }
    }
    return 0;
}

/* An HF tokenizer.json BPE model as a gpt2/llama-bpe GGUF vocabulary. */
static int write_hf_vocab(struct gguf_writer *w, const json_t *js, uint32_t n, struct mf_err *err)
{
    static const char *const bos[] = {"<|begin_of_text|>", "<s>", NULL};
    static const char *const eos[] = {"<|end_of_text|>", "<|eot_id|>", "</s>", NULL};
    struct gguf_str *toks = calloc(n, sizeof *toks), *merges = NULL;
    int32_t *types = calloc(n, sizeof *types);
    char *holes = malloc((size_t)n * 24), *pool = NULL;
    int rc = (!toks || !types || !holes) ? mf_err_set(err, MF_ENOMEM, "out of memory") : 0;
    const json_t *jm = json_object_get(json_object_get(js, "model"), "merges");
    if (!rc)
        rc = hf_tokens(js, n, toks, types, holes);
    if (!rc)
        rc = json_strings(jm, &merges, &pool, err);
    int64_t b = hf_token_id(js, bos), e = hf_token_id(js, eos);
    struct vocab_kvs v = {"gpt2", "llama-bpe",         toks, n, types, NULL,
                          merges, json_array_size(jm), b,    e, -1};
    if (!rc)
        rc = emit_vocab(w, &v, err);
    free(toks);
    free(types);
    free(holes);
    free(merges);
    free(pool);
    return rc;
}

static int write_vocab(struct gguf_writer *w, const struct vocab *v, struct mf_err *err)
{
    if (v->gf) {
        int rc = 0;
        for (uint64_t i = 0; i < gguf_n_kv(v->gf) && !rc; i++) {
            const struct gguf_kv *kv = gguf_kv_at(v->gf, i);
            if (strncmp(kv->key, "tokenizer.", 10) == 0)
                rc = gguf_writer_add_kv(w, kv, err);
        }
        return rc;
    }
    if (v->js)
        return v->hf ? write_hf_vocab(w, v->js, v->n, err) : write_json_gguf_vocab(w, v->js, err);
    return write_spm_vocab(w, v->n, err);
}

/* ---------------------------------------------------------------------------
 * writing
 * ------------------------------------------------------------------------- */

static int any_quantized(const struct plan *p)
{
    for (size_t i = 0; i < p->n; i++)
        if (ggml_type_is_quantized(p->t[i].type))
            return 1;
    return 0;
}

/* "<arch>.<suffix>" for the family's keys. */
static const char *akey(const struct opts *o, const char *suffix, char *buf, size_t size)
{
    snprintf(buf, size, "%s.%s", o->arch->name, suffix);
    return buf;
}

/* The family's optional keys: head width, experts, window, RoPE scaling. */
static int write_family_kvs(struct gguf_writer *w, const struct opts *o, struct mf_err *err)
{
    const struct shape *s = &o->s;
    char k[96];
    int rc = 0;
    if (s->head_dim)
        rc = gguf_writer_add_u32(w, akey(o, "attention.key_length", k, sizeof k), s->head_dim, err);
    if (!rc && s->head_dim)
        rc = gguf_writer_add_u32(w, akey(o, "attention.value_length", k, sizeof k), s->head_dim,
                                 err);
    if (!rc && s->n_expert)
        rc = gguf_writer_add_u32(w, akey(o, "expert_count", k, sizeof k), s->n_expert, err);
    if (!rc && s->n_expert)
        rc = gguf_writer_add_u32(w, akey(o, "expert_used_count", k, sizeof k), s->n_used, err);
    if (!rc && s->n_ff_exp)
        rc = gguf_writer_add_u32(w, akey(o, "expert_feed_forward_length", k, sizeof k),
                                 s->n_ff_exp, err);
    if (!rc && o->swa)
        rc = gguf_writer_add_u32(w, akey(o, "attention.sliding_window", k, sizeof k), o->swa, err);
    if (!rc && o->swa_pattern >= 0)
        rc = gguf_writer_add_u32(w, akey(o, "attention.sliding_window_pattern", k, sizeof k),
                                 (uint32_t)o->swa_pattern, err);
    if (!rc && o->rope_factors)
        rc = gguf_writer_add_u32(w, akey(o, "rope.scaling.original_context_length", k, sizeof k),
                                 o->rope_factors, err);
    if (!rc && o->rope_factors) /* convert_hf_to_gguf's Phi-3: sqrt(1 + ln s / ln orig) */
        rc = gguf_writer_add_f32(w, akey(o, "rope.scaling.attn_factor", k, sizeof k),
                                 sqrtf(1.0f + logf((float)s->n_ctx / (float)o->rope_factors) /
                                                  logf((float)o->rope_factors)),
                                 err);
    if (!rc && o->rope_scaling)
        rc = gguf_writer_add_cstr(w, akey(o, "rope.scaling.type", k, sizeof k), o->rope_scaling,
                                  err);
    if (!rc && o->rope_scaling)
        rc = gguf_writer_add_f32(w, akey(o, "rope.scaling.factor", k, sizeof k), o->rope_factor,
                                 err);
    if (!rc && o->rope_orig_ctx)
        rc = gguf_writer_add_u32(w, akey(o, "rope.scaling.original_context_length", k, sizeof k),
                                 o->rope_orig_ctx, err);
    return rc;
}

static int write_model_kvs(struct gguf_writer *w, const struct opts *o, const struct vocab *v,
                           const struct plan *p, struct mf_err *err)
{
    const struct shape *s = &o->s;
    char name[64], k[96];
    snprintf(name, sizeof name, "mkmodel-%s", o->preset);
    int rc = gguf_writer_add_cstr(w, "general.architecture", o->arch->name, err);
    if (!rc)
        rc = gguf_writer_add_cstr(w, "general.type", "model", err);
    if (!rc)
        rc = gguf_writer_add_cstr(w, "general.name", name, err);
    if (!rc)
        rc = gguf_writer_add_u32(w, akey(o, "block_count", k, sizeof k), s->n_layer, err);
    if (!rc)
        rc = gguf_writer_add_u32(w, akey(o, "context_length", k, sizeof k), s->n_ctx, err);
    if (!rc)
        rc = gguf_writer_add_u32(w, akey(o, "embedding_length", k, sizeof k), s->n_embd, err);
    if (!rc)
        rc = gguf_writer_add_u32(w, akey(o, "feed_forward_length", k, sizeof k), s->n_ff, err);
    if (!rc)
        rc = gguf_writer_add_u32(w, akey(o, "attention.head_count", k, sizeof k), s->n_head, err);
    if (!rc)
        rc = gguf_writer_add_u32(w, akey(o, "attention.head_count_kv", k, sizeof k), s->n_head_kv,
                                 err);
    if (!rc)
        rc = gguf_writer_add_f32(w, akey(o, "rope.freq_base", k, sizeof k), s->rope_base, err);
    if (!rc)
        rc = gguf_writer_add_f32(w, akey(o, "attention.layer_norm_rms_epsilon", k, sizeof k),
                                 1e-5f, err);
    if (!rc)
        rc = gguf_writer_add_u32(w, "general.file_type", (uint32_t)p->ft, err);
    if (!rc)
        rc = gguf_writer_add_u32(w, akey(o, "vocab_size", k, sizeof k), s->n_vocab, err);
    if (!rc)
        rc = gguf_writer_add_u32(w, akey(o, "rope.dimension_count", k, sizeof k),
                                 (uint32_t)head_dim(s), err);
    if (!rc)
        rc = write_family_kvs(w, o, err);
    if (!rc)
        rc = write_vocab(w, v, err);
    if (!rc && any_quantized(p))
        rc = gguf_writer_add_u32(w, "general.quantization_version", 2, err);
    return rc;
}

static int write_lora_kvs(struct gguf_writer *w, const struct opts *o, struct mf_err *err)
{
    int rc = gguf_writer_add_cstr(w, "general.architecture", o->arch->name, err);
    if (!rc)
        rc = gguf_writer_add_cstr(w, "general.type", "adapter", err);
    if (!rc)
        rc = gguf_writer_add_cstr(w, "general.name", "mkmodel-lora", err);
    if (!rc)
        rc = gguf_writer_add_cstr(w, "adapter.type", "lora", err);
    if (!rc)
        rc = gguf_writer_add_f32(w, "adapter.lora.alpha", o->lora_alpha, err);
    return rc;
}

/* Generates, encodes and streams one tensor's rows through chunk. */
static int write_tensor(struct gguf_writer *w, uint64_t seed, const struct ptensor *t, float *row,
                        uint8_t *chunk, struct mf_err *err)
{
    uint64_t st = stream_for(seed, t->name), row_bytes;
    ggml_type_row_size(t->type, t->ne[0], &row_bytes); /* checked by the writer already */
    size_t used = 0;
    int rc = 0;
    uint64_t rows = t->ne[1] * t->ne[2];
    for (uint64_t r = 0; r < rows && !rc; r++) {
        fill_row(&st, row, t->ne[0], t->mean, t->sd);
        rc = quant_quantize_row(t->type, row, chunk + used, (int64_t)t->ne[0], err);
        used += (size_t)row_bytes;
        if (!rc && (used + row_bytes > CHUNK_BYTES || r + 1 == rows)) {
            rc = gguf_writer_write(w, chunk, used, err);
            used = 0;
        }
    }
    return rc;
}

static int write_data(struct gguf_writer *w, const struct opts *o, const struct plan *p,
                      struct mf_err *err)
{
    uint64_t max_row = 0;
    for (size_t i = 0; i < p->n; i++)
        max_row = p->t[i].ne[0] > max_row ? p->t[i].ne[0] : max_row;
    float *row = malloc(max_row * sizeof *row);
    uint8_t *chunk = malloc(CHUNK_BYTES + max_row * sizeof(float));
    int rc = (!row || !chunk) ? mf_err_set(err, MF_ENOMEM, "out of memory") : 0;
    for (size_t i = 0; i < p->n && !rc; i++)
        rc = write_tensor(w, o->seed, &p->t[i], row, chunk, err);
    free(row);
    free(chunk);
    return rc;
}

static int write_file(const struct opts *o, const struct vocab *v, const struct plan *p,
                      struct mf_err *err)
{
    struct gguf_writer *w;
    int rc = gguf_writer_open(o->out, &w, err);
    if (rc)
        return rc;
    rc = o->lora_rank ? write_lora_kvs(w, o, err) : write_model_kvs(w, o, v, p, err);
    for (size_t i = 0; i < p->n && !rc; i++)
        rc = gguf_writer_add_tensor(w, p->t[i].name, p->t[i].type, p->t[i].n_dims, p->t[i].ne, err);
    if (!rc)
        rc = write_data(w, o, p, err);
    if (!rc)
        rc = gguf_writer_finish(w, err);
    gguf_writer_free(w);
    return rc;
}

int main(int argc, char **argv)
{
    struct opts o;
    struct vocab v = {0};
    static struct plan p;
    struct mf_err err;
    mf_err_clear(&err);
    int rc = parse_args(argc, argv, &o, &err);
    if (!rc && !o.lora_rank)
        rc = load_vocab(&o, &v, &err);
    if (!rc)
        rc = resolve_type(&o, &p, &err);
    if (!rc)
        rc = o.lora_rank ? plan_lora(&o, &p, &err) : plan_model(&o, &p, &err);
    if (!rc)
        rc = choose_types(&o, &p, &err);
    if (!rc)
        rc = write_file(&o, &v, &p, &err);
    free_vocab(&v);
    if (rc) {
        fprintf(stderr, "mkmodel: %s\n", err.msg);
        if (rc == MF_EUSAGE)
            usage(stderr);
        return rc == MF_EUSAGE ? 2 : 1;
    }
    return 0;
}
