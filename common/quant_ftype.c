/*
 * quant_ftype.c: llama.cpp's file types (general.file_type) and the rules
 * that pick each tensor's type within a mix such as Q4_K_M.
 *
 * The rules are those of src/llama-quant.cpp in llama.cpp as vendored by
 * node-llama-cpp 3.21.1 (ggml-org/llama.cpp 80fb11ac, 2026-09), functions
 * tensor_allows_quantization, llama_tensor_get_type_impl,
 * tensor_type_fallback and llama_ftype_get_default_type, for the case mfc
 * has: no importance matrix, no --pure, no per-tensor overrides. Comments
 * below name the llama.cpp branch each rule comes from. Only the file types
 * built from K-quants, the legacy block types and MXFP4 (MXFP4_MOE: the
 * experts MXFP4, every other quantized matrix Q8_0, as gpt-oss ships) are
 * handled; the IQ and TQ mixes are refused.
 *
 * One deliberate difference: llama.cpp counts attn_v/ffn_down tensors as it
 * visits them, in the loader's order (weight_name_comparer sorts by the
 * "blk.N." number), so for a model with one such tensor per block the count
 * is the block number, which is what this file parses from the name. It
 * keeps the function stateless.
 *
 * Pure functions of their arguments; no state.
 */
#include "quant.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---- names ----------------------------------------------------------------- */

struct ftype_info {
    enum quant_ftype ft;
    const char *name;     /* as Ollama and llama-quantize print it */
    enum ggml_type deflt; /* llama_ftype_get_default_type */
};

static const struct ftype_info ftypes[] = {
    {QUANT_FTYPE_ALL_F32, "F32", GGML_TYPE_F32},
    {QUANT_FTYPE_MOSTLY_F16, "F16", GGML_TYPE_F16},
    {QUANT_FTYPE_MOSTLY_BF16, "BF16", GGML_TYPE_BF16},
    {QUANT_FTYPE_MOSTLY_Q4_0, "Q4_0", GGML_TYPE_Q4_0},
    {QUANT_FTYPE_MOSTLY_Q4_1, "Q4_1", GGML_TYPE_Q4_1},
    {QUANT_FTYPE_MOSTLY_Q5_0, "Q5_0", GGML_TYPE_Q5_0},
    {QUANT_FTYPE_MOSTLY_Q5_1, "Q5_1", GGML_TYPE_Q5_1},
    {QUANT_FTYPE_MOSTLY_Q8_0, "Q8_0", GGML_TYPE_Q8_0},
    {QUANT_FTYPE_MOSTLY_Q2_K, "Q2_K", GGML_TYPE_Q2_K},
    {QUANT_FTYPE_MOSTLY_Q2_K_S, "Q2_K_S", GGML_TYPE_Q2_K},
    {QUANT_FTYPE_MOSTLY_Q3_K_S, "Q3_K_S", GGML_TYPE_Q3_K},
    {QUANT_FTYPE_MOSTLY_Q3_K_M, "Q3_K_M", GGML_TYPE_Q3_K},
    {QUANT_FTYPE_MOSTLY_Q3_K_L, "Q3_K_L", GGML_TYPE_Q3_K},
    {QUANT_FTYPE_MOSTLY_Q4_K_S, "Q4_K_S", GGML_TYPE_Q4_K},
    {QUANT_FTYPE_MOSTLY_Q4_K_M, "Q4_K_M", GGML_TYPE_Q4_K},
    {QUANT_FTYPE_MOSTLY_Q5_K_S, "Q5_K_S", GGML_TYPE_Q5_K},
    {QUANT_FTYPE_MOSTLY_Q5_K_M, "Q5_K_M", GGML_TYPE_Q5_K},
    {QUANT_FTYPE_MOSTLY_Q6_K, "Q6_K", GGML_TYPE_Q6_K},
    {QUANT_FTYPE_MOSTLY_MXFP4_MOE, "MXFP4_MOE", GGML_TYPE_MXFP4},
};

#define N_FTYPES (sizeof ftypes / sizeof ftypes[0])

static const struct ftype_info *ftype_find(enum quant_ftype ft)
{
    for (size_t i = 0; i < N_FTYPES; i++) {
        if (ftypes[i].ft == ft)
            return &ftypes[i];
    }
    return NULL;
}

const char *quant_ftype_name(enum quant_ftype ft)
{
    const struct ftype_info *fi = ftype_find(ft);
    return fi ? fi->name : NULL;
}

int quant_ftype_from_name(const char *name, enum quant_ftype *ft)
{
    /* llama-quantize's short aliases (tools/quantize: "Q4_K" is Q4_K_M) */
    static const struct {
        const char *alias;
        enum quant_ftype ft;
    } aliases[] = {
        {"Q3_K", QUANT_FTYPE_MOSTLY_Q3_K_M},
        {"Q4_K", QUANT_FTYPE_MOSTLY_Q4_K_M},
        {"Q5_K", QUANT_FTYPE_MOSTLY_Q5_K_M},
    };
    for (size_t i = 0; i < N_FTYPES; i++) {
        if (strcasecmp(name, ftypes[i].name) == 0) {
            *ft = ftypes[i].ft;
            return 0;
        }
    }
    for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++) {
        if (strcasecmp(name, aliases[i].alias) == 0) {
            *ft = aliases[i].ft;
            return 0;
        }
    }
    return -1;
}

int quant_ftype_can_build(enum quant_ftype ft)
{
    /* tensor_requires_imatrix: Q2_K tensors of a Q2_K_S file need one */
    return ftype_find(ft) != NULL && ft != QUANT_FTYPE_MOSTLY_Q2_K_S;
}

/* ---- which tensors are quantized ------------------------------------------- */

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && memcmp(s + n - m, suffix, m) == 0;
}

static int contains_any(const char *s, const char *const *subs)
{
    for (; *subs; subs++) {
        if (strstr(s, *subs))
            return 1;
    }
    return 0;
}

/* tensor_allows_quantization: 2-D+ tensors whose name ends in "weight",
 * minus norms, router gates, small RWKV/Mamba/vision tensors. */
static int allows_quantization(const struct quant_tensor_info *ti)
{
    static const char *const never[] = {
        "_norm.weight",
        "ffn_gate_inp.weight",
        "ffn_gate_tid2eid.weight",
        "altup",
        "laurel",
        "per_layer_model_proj",
        "ssm_conv1d",
        "shortconv.conv.weight",
        "indexer.k_proj.weight",
        "indexer.q_proj.weight",
        "time_mix_first.weight",
        "time_mix_w0.weight",
        "time_mix_w1.weight",
        "time_mix_w2.weight",
        "time_mix_v0.weight",
        "time_mix_v1.weight",
        "time_mix_v2.weight",
        "time_mix_a0.weight",
        "time_mix_a1.weight",
        "time_mix_a2.weight",
        "time_mix_g1.weight",
        "time_mix_g2.weight",
        "time_mix_decay_w1.weight",
        "time_mix_decay_w2.weight",
        "time_mix_lerp_fused.weight",
        "attn_rel_b.weight",
        ".position_embd",
        "sam.pos_embd",
        "sam.neck.",
        "sam.net_",
        ".rel_pos",
        ".patch_embd",
        ".patch_merger",
        "a.rvq.codebook",
        "mm.a.code_embd",
        NULL,
    };
    if (ti->n_dims < 2 || !ends_with(ti->name, "weight"))
        return 0;
    if (strcmp(ti->name, "position_embd.weight") == 0 ||
        strcmp(ti->name, "token_types.weight") == 0)
        return 0;
    return !contains_any(ti->name, never);
}

/* The type of a tensor llama.cpp leaves alone: what convert_hf_to_gguf.py
 * wrote for it (conversion/base.py prepare_tensors): F32 for 1-D tensors,
 * norms, non-".weight" names and its always-F32 list; else the source type. */
static enum ggml_type kept_type(const struct quant_tensor_info *ti)
{
    static const char *const always_f32[] = {
        "ffn_gate_inp",        "position_embd",
        "token_types",         "ssm_conv1d",
        "shortconv.conv",      "time_mix_first",
        "time_mix_w1",         "time_mix_w2",
        "time_mix_decay_w1",   "time_mix_decay_w2",
        "time_mix_lerp_fused", "altup_correct_coef",
        "altup_predict_coef",  NULL,
    };
    if (ti->n_dims <= 1 || ends_with(ti->name, "_norm.weight") || !ends_with(ti->name, ".weight"))
        return GGML_TYPE_F32;
    if (contains_any(ti->name, always_f32))
        return GGML_TYPE_F32;
    return ti->type;
}

/* ---- mix rules --------------------------------------------------------------- */

/* tensor_get_category */
enum category {
    CAT_OTHER,
    CAT_OUTPUT,
    CAT_TOKEN_EMBD,
    CAT_ATTN_V, /* attn_v, attn_qkv, attn_kv_b: category_is_attn_v */
    CAT_ATTN_K,
    CAT_ATTN_Q,
    CAT_ATTN_OUTPUT,
    CAT_FFN_UP,
    CAT_FFN_GATE,
    CAT_FFN_DOWN,
};

static enum category category_of(const char *name)
{
    if (strcmp(name, "output.weight") == 0)
        return CAT_OUTPUT;
    if (strcmp(name, "token_embd.weight") == 0 || strcmp(name, "per_layer_token_embd.weight") == 0)
        return CAT_TOKEN_EMBD;
    if (strstr(name, "attn_qkv.weight") || strstr(name, "attn_kv_b.weight") ||
        strstr(name, "attn_v.weight"))
        return CAT_ATTN_V;
    if (strstr(name, "attn_k.weight"))
        return CAT_ATTN_K;
    if (strstr(name, "attn_q.weight"))
        return CAT_ATTN_Q;
    if (strstr(name, "attn_output.weight"))
        return CAT_ATTN_OUTPUT;
    if (strstr(name, "ffn_up"))
        return CAT_FFN_UP;
    if (strstr(name, "ffn_gate"))
        return CAT_FFN_GATE;
    if (strstr(name, "ffn_down"))
        return CAT_FFN_DOWN;
    return CAT_OTHER;
}

/* llama-quant.cpp's use_more_bits: the first and last eighth of the layers
 * and every third one between get more bits. */
static int use_more_bits(int i, int n)
{
    return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

/* Everything one rule looks at. */
struct mix {
    enum quant_ftype ft;
    const struct quant_model_info *mi;
    const struct quant_tensor_info *ti;
    int layer;  /* from "blk.N.", -1 when the name has none */
    int falcon; /* arch == LLM_ARCH_FALCON */
};

/* OUTPUT, and TOKEN_EMBD when tied to it: Q6_K, or Q8_0 when the row does
 * not divide into 256 (or for Falcon); a Q8_0 mix keeps Q8_0. */
static enum ggml_type rule_output(const struct mix *x, enum ggml_type t)
{
    if (x->falcon || x->ti->ne[0] % ggml_type_block_size(t) != 0)
        return GGML_TYPE_Q8_0;
    return t != GGML_TYPE_Q8_0 ? GGML_TYPE_Q6_K : t;
}

/* attn_v-like tensors ("category_is_attn_v" branch); i is llama.cpp's
 * i_attention_wv, n its n_attention_wv. Fused attn_qkv falls here too in
 * current llama.cpp (its later ATTENTION_QKV branch, Q4_K_M -> Q5_K, which
 * older notes describe, can no longer be reached). */
static enum ggml_type rule_attn_v(const struct mix *x, enum ggml_type t)
{
    const int i = x->layer, n = x->mi->n_layer, gqa = x->mi->n_gqa;
    switch (x->ft) {
    case QUANT_FTYPE_MOSTLY_Q2_K:
        t = gqa >= 4 ? GGML_TYPE_Q4_K : GGML_TYPE_Q3_K;
        break;
    case QUANT_FTYPE_MOSTLY_Q2_K_S:
        if (gqa >= 4)
            t = GGML_TYPE_Q4_K;
        break;
    case QUANT_FTYPE_MOSTLY_Q3_K_M:
        t = i < 2 ? GGML_TYPE_Q5_K : GGML_TYPE_Q4_K;
        break;
    case QUANT_FTYPE_MOSTLY_Q3_K_L:
        t = GGML_TYPE_Q5_K;
        break;
    case QUANT_FTYPE_MOSTLY_Q4_K_M:
    case QUANT_FTYPE_MOSTLY_Q5_K_M:
        if (use_more_bits(i, n))
            t = GGML_TYPE_Q6_K;
        break;
    case QUANT_FTYPE_MOSTLY_Q4_K_S:
        if (i < 4)
            t = GGML_TYPE_Q5_K;
        break;
    default:
        break;
    }
    /* LLM_TYPE_70B: attn_v is 8x smaller than attn_q under GQA, so more
     * bits cost little */
    if (x->mi->is_70b && (t == GGML_TYPE_Q3_K || t == GGML_TYPE_Q4_K))
        t = GGML_TYPE_Q5_K;
    if (x->mi->n_expert == 8)
        t = GGML_TYPE_Q8_0;
    return t;
}

/* ffn_down ("FFN_DOWN" branch, layer_info's layer). */
static enum ggml_type rule_ffn_down(const struct mix *x, enum ggml_type t)
{
    const int i = x->layer, n = x->mi->n_layer;
    switch (x->ft) {
    case QUANT_FTYPE_MOSTLY_Q2_K:
        return GGML_TYPE_Q3_K;
    case QUANT_FTYPE_MOSTLY_Q2_K_S:
        return i < n / 8 ? GGML_TYPE_Q4_K : t;
    case QUANT_FTYPE_MOSTLY_Q3_K_M:
        if (i < n / 16)
            return GGML_TYPE_Q5_K;
        return !x->falcon || use_more_bits(i, n) ? GGML_TYPE_Q4_K : GGML_TYPE_Q3_K;
    case QUANT_FTYPE_MOSTLY_Q3_K_L:
        return x->falcon ? GGML_TYPE_Q4_K : GGML_TYPE_Q5_K;
    case QUANT_FTYPE_MOSTLY_Q4_K_M:
        if (x->falcon)
            return i < n / 16            ? GGML_TYPE_Q6_K
                   : use_more_bits(i, n) ? GGML_TYPE_Q5_K
                                         : GGML_TYPE_Q4_K;
        return use_more_bits(i, n) ? GGML_TYPE_Q6_K : t;
    case QUANT_FTYPE_MOSTLY_Q5_K_M:
        return use_more_bits(i, n) ? GGML_TYPE_Q6_K : t;
    case QUANT_FTYPE_MOSTLY_Q4_K_S:
        return !x->falcon && i < n / 8 ? GGML_TYPE_Q5_K : t;
    default:
        return t;
    }
}

/* attn_output ("ATTENTION_OUTPUT" branch). */
static enum ggml_type rule_attn_output(const struct mix *x, enum ggml_type t)
{
    const enum quant_ftype ft = x->ft;
    if (x->falcon)
        return ft == QUANT_FTYPE_MOSTLY_Q3_K_L ? GGML_TYPE_Q4_K : t;
    if (x->mi->n_expert == 8) {
        if (ft == QUANT_FTYPE_MOSTLY_Q2_K || ft == QUANT_FTYPE_MOSTLY_Q3_K_S ||
            ft == QUANT_FTYPE_MOSTLY_Q3_K_M || ft == QUANT_FTYPE_MOSTLY_Q4_K_S ||
            ft == QUANT_FTYPE_MOSTLY_Q4_K_M)
            return GGML_TYPE_Q5_K;
        return t;
    }
    if (ft == QUANT_FTYPE_MOSTLY_Q2_K)
        return GGML_TYPE_Q3_K;
    if (ft == QUANT_FTYPE_MOSTLY_Q3_K_M)
        return GGML_TYPE_Q4_K;
    if (ft == QUANT_FTYPE_MOSTLY_Q3_K_L)
        return GGML_TYPE_Q5_K;
    return t;
}

/* llama_tensor_get_type_impl, for the file types this module handles. */
static enum ggml_type apply_rules(const struct mix *x, enum category cat, enum ggml_type t)
{
    /* MXFP4_MOE: its own OUTPUT branch and the branch before every per-
     * category rule: 3-D (expert) tensors MXFP4, everything else Q8_0 */
    if (x->ft == QUANT_FTYPE_MOSTLY_MXFP4_MOE)
        return x->ti->ne[2] > 1 && cat != CAT_OUTPUT ? GGML_TYPE_MXFP4 : GGML_TYPE_Q8_0;
    if (cat == CAT_OUTPUT || (!x->mi->has_output && cat == CAT_TOKEN_EMBD))
        return rule_output(x, t);
    switch (cat) {
    case CAT_ATTN_V:
        return rule_attn_v(x, t);
    case CAT_ATTN_K:
        return x->mi->n_expert == 8 ? GGML_TYPE_Q8_0 : t;
    case CAT_FFN_DOWN:
        return rule_ffn_down(x, t);
    case CAT_ATTN_OUTPUT:
        return rule_attn_output(x, t);
    default:
        /* token_embd (untied), attn_q, ffn_up, ffn_gate: only IQ/TQ mixes
         * change them */
        return t;
    }
}

/* tensor_type_fallback: a row that does not divide into t's blocks takes
 * the nearest 32-element type, and F16 if even that does not divide. */
static int fallback(const struct quant_tensor_info *ti, enum ggml_type t, enum ggml_type *out,
                    struct mf_err *err)
{
    const int64_t ncols = ti->ne[0];
    enum ggml_type r = t;
    if (ncols % ggml_type_block_size(t) == 0) {
        *out = t;
        return 0;
    }
    switch (t) {
    case GGML_TYPE_Q2_K:
    case GGML_TYPE_Q3_K:
        r = GGML_TYPE_Q4_0;
        break;
    case GGML_TYPE_Q4_K:
        r = GGML_TYPE_Q5_0;
        break;
    case GGML_TYPE_Q5_K:
        r = GGML_TYPE_Q5_1;
        break;
    case GGML_TYPE_Q6_K:
        r = GGML_TYPE_Q8_0;
        break;
    default:
        if (ggml_type_block_size(t) > 32)
            return mf_err_set(err, MF_EUNSUPPORTED,
                              "%s: no fallback type for %s with rows of %" PRId64, ti->name,
                              ggml_type_name(t), ncols);
        break;
    }
    *out = ncols % ggml_type_block_size(r) == 0 ? r : GGML_TYPE_F16;
    return 0;
}

/* The N of a "blk.N." prefix, or -1. */
static int layer_of(const char *name)
{
    if (strncmp(name, "blk.", 4) != 0)
        return -1;
    char *end;
    long v = strtol(name + 4, &end, 10);
    if (end == name + 4 || *end != '.' || v < 0 || v > 1000000)
        return -1;
    return (int)v;
}

static int check_tensor(const struct quant_model_info *mi, const struct quant_tensor_info *ti,
                        struct mf_err *err)
{
    if (!ti->name || ti->n_dims < 1 || ti->n_dims > 4)
        return mf_err_set(err, MF_EINVAL, "%s: a tensor needs a name and 1 to 4 dimensions",
                          ti->name ? ti->name : "(unnamed)");
    for (int d = 0; d < ti->n_dims; d++) {
        if (ti->ne[d] <= 0)
            return mf_err_set(err, MF_EINVAL, "%s: dimension %d is %" PRId64, ti->name, d,
                              ti->ne[d]);
    }
    if (mi->n_layer <= 0)
        return mf_err_set(err, MF_EINVAL, "%s: the model's layer count is %" PRId32, ti->name,
                          mi->n_layer);
    return 0;
}

/* The K-quant mixes choose attn_v and ffn_down types by block number, which
 * must lie inside the model (llama.cpp's layer_info throws the same way). */
static int check_layer(const struct mix *x, enum category cat, enum ggml_type deflt,
                       struct mf_err *err)
{
    if ((cat != CAT_ATTN_V && cat != CAT_FFN_DOWN) || ggml_type_block_size(deflt) != QK_K)
        return 0;
    if (x->layer < 0 || x->layer >= x->mi->n_layer)
        return mf_err_set(err, MF_EINVAL,
                          "%s: cannot tell which of the %" PRId32 " layers this tensor is in",
                          x->ti->name, x->mi->n_layer);
    return 0;
}

int quant_ftype_tensor_type(enum quant_ftype ft, const struct quant_model_info *mi,
                            const struct quant_tensor_info *ti, enum ggml_type *out,
                            struct mf_err *err)
{
    const struct ftype_info *fi = ftype_find(ft);
    if (!fi)
        return mf_err_set(err, MF_EUNSUPPORTED, "%s: file type %d is not one mfc builds",
                          ti->name ? ti->name : "(unnamed)", (int)ft);
    int rc = check_tensor(mi, ti, err);
    if (rc)
        return rc;
    if (!allows_quantization(ti)) {
        *out = kept_type(ti);
        return 0;
    }
    if (!ggml_type_is_quantized(fi->deflt)) {
        *out = fi->deflt;
        return 0;
    }
    const struct mix x = {
        .ft = ft,
        .mi = mi,
        .ti = ti,
        .layer = layer_of(ti->name),
        .falcon = mi->arch && strcmp(mi->arch, "falcon") == 0,
    };
    const enum category cat = category_of(ti->name);
    rc = check_layer(&x, cat, fi->deflt, err);
    if (rc)
        return rc;
    return fallback(ti, apply_rules(&x, cat, fi->deflt), out, err);
}
