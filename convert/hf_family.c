/*
 * hf_family.c: the model classes mfc converts from Hugging Face, and each
 * family's config.json keys -> GGUF keys, as convert_hf_to_gguf.py writes
 * them (conversion/llama.py, qwen.py, gemma.py, phi.py over base.py's
 * TextModel at the llama.cpp version tests/tools/node pins).
 *
 * The converter builds its KV list in a dict: a key set twice keeps its
 * first place and takes the last value (Gemma 3 sets head_count and the RoPE
 * base again after TextModel did). The writers here build the same ordered
 * list (struct kvs) and write it once. Families whose converter class skips
 * TextModel (Gemma 2, Phi-3) list their keys in their own order.
 *
 * Where the converter would write a GGUF that llama.cpp runs differently
 * from transformers, mfc refuses the config, naming the key (Qwen2's
 * use_sliding_window, Qwen3-MoE's dense layers or unnormalised top-k,
 * Gemma's query_pre_attn_scalar other than the shape implies), or
 * writes the key llama.cpp reads (Gemma 3's sliding_window_pattern when the
 * layer pattern is not its period of 6): docs/convert.md lists these.
 */
#include "convert/hf.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/arch.h"
#include "common/gguf.h"
#include "common/json.h"

static const struct {
    const char *cls;
    enum hf_family fam;
    const char *arch;
} classes[] = {
    {"LlamaForCausalLM", HF_FAM_LLAMA, "llama"},
    {"MistralForCausalLM", HF_FAM_LLAMA, "llama"},
    {"MixtralForCausalLM", HF_FAM_LLAMA, "llama"},
    {"Qwen2ForCausalLM", HF_FAM_QWEN2, "qwen2"},
    {"Qwen3ForCausalLM", HF_FAM_QWEN3, "qwen3"},
    {"Qwen3MoeForCausalLM", HF_FAM_QWEN3MOE, "qwen3moe"},
    {"Gemma2ForCausalLM", HF_FAM_GEMMA2, "gemma2"},
    {"Gemma3ForCausalLM", HF_FAM_GEMMA3, "gemma3"},
    {"Gemma3ForConditionalGeneration", HF_FAM_GEMMA3, "gemma3"},
    {"Phi3ForCausalLM", HF_FAM_PHI3, "phi3"},
};

int hf_family_find(const char *cls, enum hf_family *fam, const char **gguf_arch)
{
    for (size_t i = 0; i < sizeof classes / sizeof classes[0]; i++)
        if (strcmp(cls, classes[i].cls) == 0) {
            *fam = classes[i].fam;
            *gguf_arch = classes[i].arch;
            return 0;
        }
    return -1;
}

const char *hf_family_names(void)
{
    return "LlamaForCausalLM, MistralForCausalLM, MixtralForCausalLM, Qwen2ForCausalLM, "
           "Qwen3ForCausalLM, Qwen3MoeForCausalLM, Gemma2ForCausalLM, Gemma3ForCausalLM, "
           "Gemma3ForConditionalGeneration (its text), Phi3ForCausalLM";
}

/* ---- config.json ---- */

static json_t *get(const json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    return v && !json_is_null(v) ? v : NULL;
}

/* A positive integer at key into *out: 0, MF_ENOTFOUND, or MF_EFORMAT. */
static int get_int(const json_t *o, const char *key, const char *what, int64_t max, int64_t *out,
                   struct mf_err *err)
{
    json_t *v = get(o, key);
    if (!v)
        return MF_ENOTFOUND;
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > max)
        return mf_err_set(err, MF_EFORMAT, "%s: \"%s\" must be an integer in 0..%lld", what, key,
                          (long long)max);
    *out = (int64_t)json_integer_value(v);
    return 0;
}

static int get_num(const json_t *o, const char *key, const char *what, double *out,
                   struct mf_err *err)
{
    json_t *v = get(o, key);
    if (!v)
        return MF_ENOTFOUND;
    if (!json_is_number(v) || !isfinite(json_number_value(v)))
        return mf_err_set(err, MF_EFORMAT, "%s: \"%s\" must be a finite number", what, key);
    *out = json_number_value(v);
    return 0;
}

static int need(int rc, const char *key, const char *what, const struct hf_config *c,
                struct mf_err *err)
{
    if (rc == MF_ENOTFOUND)
        return mf_err_set(err, MF_EFORMAT, "%s: \"%s\" is missing (a %s needs it)", what, key,
                          c->arch);
    return rc;
}

static int parse_experts(const json_t *root, const char *what, struct hf_config *c,
                         struct mf_err *err)
{
    static const char *const count_keys[] = {"num_local_experts", "num_experts",
                                             "n_routed_experts"};
    int rc = MF_ENOTFOUND;
    for (size_t i = 0; i < 3 && rc == MF_ENOTFOUND; i++)
        rc = get_int(root, count_keys[i], what, HF_MAX_EXPERTS, &c->n_expert, err);
    if (rc == MF_EFORMAT)
        return rc;
    if (rc == MF_ENOTFOUND)
        c->n_expert = 0;
    int moe_class = c->family == HF_FAM_QWEN3MOE || strcmp(c->arch, "MixtralForCausalLM") == 0;
    if (moe_class && c->n_expert < 2)
        return mf_err_set(err, MF_EFORMAT, "%s: a %s needs \"%s\" of 2 or more", what, c->arch,
                          c->family == HF_FAM_QWEN3MOE ? "num_experts" : "num_local_experts");
    if (c->family != HF_FAM_LLAMA && c->family != HF_FAM_QWEN3MOE)
        c->n_expert = 0; /* the key means nothing to a dense family's converter */
    if (c->n_expert < 2) {
        c->n_expert = 0;
        return 0;
    }
    rc = get_int(root, "num_experts_per_tok", what, HF_MAX_EXPERTS, &c->n_expert_used, err);
    if ((rc = need(rc, "num_experts_per_tok", what, c, err)))
        return rc;
    if (c->n_expert_used < 1 || c->n_expert_used > c->n_expert)
        return mf_err_set(err, MF_EFORMAT, "%s: \"num_experts_per_tok\" %lld must be 1..%lld", what,
                          (long long)c->n_expert_used, (long long)c->n_expert);
    c->n_ff_exp = c->n_ff;
    if (c->family == HF_FAM_QWEN3MOE) {
        rc = get_int(root, "moe_intermediate_size", what, 1LL << 31, &c->n_ff_exp, err);
        if ((rc = need(rc, "moe_intermediate_size", what, c, err)))
            return rc;
        if (c->n_ff_exp < 1)
            return mf_err_set(err, MF_EFORMAT, "%s: \"moe_intermediate_size\" must be positive",
                              what);
        /* llama.cpp's qwen3moe routes every layer and renormalises the top k */
        json_t *dense = get(root, "mlp_only_layers");
        if (dense && (!json_is_array(dense) || json_array_size(dense) > 0))
            return mf_err_set(err, MF_EUNSUPPORTED,
                              "%s: \"mlp_only_layers\" lists dense layers; llama.cpp's qwen3moe "
                              "routes every layer",
                              what);
        int64_t step = 1;
        if ((rc = get_int(root, "decoder_sparse_step", what, 1LL << 20, &step, err)) == MF_EFORMAT)
            return rc;
        if (step != 1)
            return mf_err_set(err, MF_EUNSUPPORTED,
                              "%s: \"decoder_sparse_step\" %lld leaves dense layers; llama.cpp's "
                              "qwen3moe routes every layer",
                              what, (long long)step);
        if (json_is_false(get(root, "norm_topk_prob")))
            return mf_err_set(err, MF_EUNSUPPORTED,
                              "%s: \"norm_topk_prob\" false; llama.cpp's qwen3moe renormalises "
                              "the chosen experts' weights",
                              what);
    }
    return 0;
}

/* Gemma 3's layer period from layer_types (transformers 5) or
 * sliding_window_pattern: 0 when none is given. A layer slides iff
 * il % period < period - 1 in llama.cpp; a list that is not of that form
 * is refused. */
static int gemma3_pattern(const json_t *root, const char *what, struct hf_config *c,
                          int64_t *period, struct mf_err *err)
{
    json_t *lt = get(root, "layer_types");
    *period = 0;
    if (!lt) {
        int rc = get_int(root, "sliding_window_pattern", what, 1 << 20, period, err);
        return rc == MF_ENOTFOUND ? 0 : rc;
    }
    if (!json_is_array(lt) || (int64_t)json_array_size(lt) != c->n_layer)
        return mf_err_set(err, MF_EFORMAT,
                          "%s: \"layer_types\" must list num_hidden_layers (%lld) entries", what,
                          (long long)c->n_layer);
    int64_t first_full = -1;
    for (int64_t i = 0; i < c->n_layer; i++) {
        const char *t = json_string_value(json_array_get(lt, (size_t)i));
        int full = t && strcmp(t, "full_attention") == 0;
        if (!t || (!full && strcmp(t, "sliding_attention") != 0))
            return mf_err_set(err, MF_EFORMAT,
                              "%s: layer_types[%lld] must be \"sliding_attention\" or "
                              "\"full_attention\"",
                              what, (long long)i);
        if (full && first_full < 0)
            first_full = i;
    }
    int64_t p = first_full < 0 ? c->n_layer + 1 : first_full + 1;
    for (int64_t i = 0; i < c->n_layer; i++) {
        const char *t = json_string_value(json_array_get(lt, (size_t)i));
        int full = strcmp(t, "full_attention") == 0;
        if (full != (i % p == p - 1))
            return mf_err_set(err, MF_EUNSUPPORTED,
                              "%s: layer_types is not a repeating pattern of sliding layers "
                              "ending in a full one (layer %lld), which llama.cpp's gemma3 needs",
                              what, (long long)i);
    }
    *period = p; /* all sliding: a period past the last layer */
    return 0;
}

/* Gemma scales q by query_pre_attn_scalar^-1/2; no GGUF key carries it and
 * llama.cpp derives it from the shape (common/arch.h wide_scale_layers):
 * a config that says otherwise would run differently, so it is refused. */
static int gemma_q_scale(const json_t *root, const char *what, const struct hf_config *c,
                         struct mf_err *err)
{
    const struct arch_desc *d = arch_find(c->gguf_arch, strlen(c->gguf_arch));
    double q;
    int rc = get_num(root, "query_pre_attn_scalar", what, &q, err);
    if (rc == MF_ENOTFOUND)
        return 0;
    if (rc)
        return rc;
    int64_t want = d && c->n_layer == d->wide_scale_layers ? c->n_embd / c->n_head : c->head_dim;
    if (q != (double)want)
        return mf_err_set(err, MF_EUNSUPPORTED,
                          "%s: \"query_pre_attn_scalar\" is %g, but llama.cpp's %s scales q by "
                          "1/sqrt(%lld) for this shape",
                          what, q, c->gguf_arch, (long long)want);
    return 0;
}

/* Phi-3's LongRoPE tables and attn_factor (Phi3MiniModel.generate_extra_tensors). */
static int phi3_rope(const json_t *root, const char *what, struct hf_config *c, struct mf_err *err)
{
    json_t *rp = get(root, "rope_parameters");
    if (!rp)
        rp = get(root, "rope_scaling");
    json_t *lf = json_is_object(rp) ? get(rp, "long_factor") : NULL;
    json_t *sf = json_is_object(rp) ? get(rp, "short_factor") : NULL;
    c->rope_attn_factor = 1.0;
    if (!lf || (json_is_array(lf) && json_array_size(lf) == 0)) {
        c->rope = HF_ROPE_NONE; /* no factors: nothing is written */
        return 0;
    }
    if (c->rope != HF_ROPE_LONGROPE)
        return mf_err_set(err, MF_EUNSUPPORTED,
                          "%s: long_factor is converted with rope_type longrope only", what);
    size_t n = (size_t)(c->rope_dim / 2);
    if (!json_is_array(lf) || !json_is_array(sf) || json_array_size(lf) != n ||
        json_array_size(sf) != n || n > HF_MAX_ROPE_FACTORS)
        return mf_err_set(err, MF_EFORMAT,
                          "%s: rope_scaling long_factor and short_factor must each hold %zu "
                          "numbers (rotary dimensions / 2)",
                          what, n);
    for (size_t i = 0; i < n; i++) {
        json_t *a = json_array_get(lf, i), *b = json_array_get(sf, i);
        if (!json_is_number(a) || !json_is_number(b))
            return mf_err_set(err, MF_EFORMAT, "%s: rope_scaling factor %zu is not a number", what,
                              i);
        c->rope_long[i] = (float)json_number_value(a);
        c->rope_short[i] = (float)json_number_value(b);
    }
    c->n_rope_factors = (uint32_t)n;
    double scale = (double)c->n_ctx / c->rope_orig_ctx;
    if (scale > 1.0)
        c->rope_attn_factor = sqrt(1.0 + log(scale) / log(c->rope_orig_ctx));
    return 0;
}

int hf_family_parse(const json_t *root, const char *what, struct hf_config *c, struct mf_err *err)
{
    int rc = parse_experts(root, what, c, err);
    if (rc)
        return rc;
    c->multimodal = strcmp(c->arch, "Gemma3ForConditionalGeneration") == 0;
    switch (c->family) {
    case HF_FAM_LLAMA:
    case HF_FAM_QWEN3:
    case HF_FAM_QWEN3MOE:
        return 0;
    case HF_FAM_QWEN2:
        if (json_is_true(get(root, "use_sliding_window")))
            return mf_err_set(err, MF_EUNSUPPORTED,
                              "%s: \"use_sliding_window\" true: llama.cpp's qwen2 attends to the "
                              "whole context",
                              what);
        return 0;
    case HF_FAM_GEMMA2:
        if ((rc = need(c->n_ctx ? 0 : MF_ENOTFOUND, "max_position_embeddings", what, c, err)) ||
            (rc = need(c->has_rms_eps ? 0 : MF_ENOTFOUND, "rms_norm_eps", what, c, err)) ||
            (rc = need(c->has_head_dim ? 0 : MF_ENOTFOUND, "head_dim", what, c, err)) ||
            (rc = need(get_num(root, "attn_logit_softcapping", what, &c->attn_softcap, err),
                       "attn_logit_softcapping", what, c, err)) ||
            (rc = need(get_num(root, "final_logit_softcapping", what, &c->final_softcap, err),
                       "final_logit_softcapping", what, c, err)) ||
            (rc = need(get_int(root, "sliding_window", what, 1LL << 31, &c->swa, err),
                       "sliding_window", what, c, err)))
            return rc;
        c->has_attn_softcap = c->has_final_softcap = 1;
        if (c->has_theta && c->rope_theta != 10000.0) /* Gemma2Model writes no base */
            return mf_err_set(err, MF_EUNSUPPORTED,
                              "%s: \"rope_theta\" is %g; the converter writes no RoPE base for "
                              "Gemma 2, so llama.cpp runs 10000",
                              what, c->rope_theta);
        return gemma_q_scale(root, what, c, err);
    case HF_FAM_GEMMA3: {
        if (get(root, "attn_logit_softcapping"))
            return mf_err_set(err, MF_EFORMAT,
                              "%s: \"attn_logit_softcapping\" is set; Gemma 3 has none", what);
        if ((rc = get_num(root, "final_logit_softcapping", what, &c->final_softcap, err)) ==
            MF_EFORMAT)
            return rc;
        c->has_final_softcap = rc == 0 && c->final_softcap != 0.0;
        if (!c->has_head_dim) { /* Gemma3Model's defaults */
            c->head_dim = c->rope_dim = 256;
        }
        if (!c->has_head_kv)
            c->n_head_kv = 4;
        if (!c->has_rms_eps)
            c->rms_eps = 1e-6;
        if (!c->n_ctx)
            c->n_ctx = 131072;
        if (!c->has_theta)
            c->rope_theta = 1000000.0;
        int64_t period = 0;
        if ((rc = gemma3_pattern(root, what, c, &period, err)))
            return rc;
        if (period != 1) {
            rc = get_int(root, "sliding_window", what, 1LL << 31, &c->swa, err);
            if ((rc = need(rc, "sliding_window", what, c, err)))
                return rc;
            if (c->swa < 1)
                return mf_err_set(err, MF_EFORMAT, "%s: \"sliding_window\" must be positive", what);
        }
        c->swa_pattern = period > 1 && period != 6 ? period : 0;
        return gemma_q_scale(root, what, c, err);
    }
    case HF_FAM_PHI3: {
        double rot = 1.0;
        json_t *rp = get(root, "rope_parameters");
        if (!rp)
            rp = get(root, "rope_scaling");
        rc = get_num(json_is_object(rp) && get(rp, "partial_rotary_factor") ? rp : root,
                     "partial_rotary_factor", what, &rot, err);
        if (rc == MF_EFORMAT)
            return rc;
        if (!(rot > 0.0 && rot <= 1.0))
            return mf_err_set(err, MF_EFORMAT, "%s: \"partial_rotary_factor\" must be in (0, 1]",
                              what);
        c->rope_dim = (int64_t)(rot * (double)c->n_embd) / c->n_head;
        if (c->rope_dim < 2 || c->rope_dim % 2 || c->rope_dim > c->head_dim)
            return mf_err_set(err, MF_EFORMAT,
                              "%s: %lld rotary dimensions do not fit a head of %lld", what,
                              (long long)c->rope_dim, (long long)c->head_dim);
        if ((rc = need(c->n_ctx ? 0 : MF_ENOTFOUND, "max_position_embeddings", what, c, err)) ||
            (rc = need(c->has_rope_orig ? 0 : MF_ENOTFOUND, "original_max_position_embeddings",
                       what, c, err)) ||
            (rc = need(c->has_head_kv ? 0 : MF_ENOTFOUND, "num_key_value_heads", what, c, err)) ||
            (rc = need(c->has_rms_eps ? 0 : MF_ENOTFOUND, "rms_norm_eps", what, c, err)) ||
            (rc = need(c->has_theta ? 0 : MF_ENOTFOUND, "rope_theta", what, c, err)))
            return rc;
        if (c->rope_orig_ctx < 2)
            return mf_err_set(err, MF_EFORMAT,
                              "%s: \"original_max_position_embeddings\" must be 2 or more", what);
        rc = get_int(root, "sliding_window", what, 1LL << 31, &c->swa, err);
        if (rc == MF_EFORMAT)
            return rc;
        if (rc == MF_ENOTFOUND)
            c->swa = 0; /* Phi-4: the converter writes 0 */
        return phi3_rope(root, what, c, err);
    }
    }
    return 0;
}

/* ---- keys ---- */

enum kv_type { KV_U32, KV_F32, KV_STR };

struct kv {
    char key[96];
    enum kv_type type;
    uint32_t u;
    float f;
    const char *s;
};

#define KVS_MAX 48

/* The converter's dict: a key set again keeps its place, takes the value. */
struct kvs {
    const struct hf_config *c;
    struct kv kv[KVS_MAX];
    int n;
};

static struct kv *kv_slot(struct kvs *l, const char *suffix, int general)
{
    char key[96];
    snprintf(key, sizeof key, "%s%s%s", general ? "" : l->c->gguf_arch, general ? "" : ".", suffix);
    for (int i = 0; i < l->n; i++)
        if (strcmp(l->kv[i].key, key) == 0)
            return &l->kv[i];
    if (l->n == KVS_MAX)
        return NULL; /* cannot happen: no family writes that many */
    struct kv *k = &l->kv[l->n++];
    memset(k, 0, sizeof *k);
    snprintf(k->key, sizeof k->key, "%s", key);
    return k;
}

static void set_u32(struct kvs *l, const char *suffix, int64_t v)
{
    struct kv *k = kv_slot(l, suffix, 0);
    if (k) {
        k->type = KV_U32;
        k->u = (uint32_t)v;
    }
}

static void set_f32(struct kvs *l, const char *suffix, double v)
{
    struct kv *k = kv_slot(l, suffix, 0);
    if (k) {
        k->type = KV_F32;
        k->f = (float)v;
    }
}

static void set_str(struct kvs *l, const char *suffix, const char *s)
{
    struct kv *k = kv_slot(l, suffix, 0);
    if (k) {
        k->type = KV_STR;
        k->s = s;
    }
}

static void set_file_type(struct kvs *l, enum quant_ftype ft)
{
    struct kv *k = kv_slot(l, "general.file_type", 1);
    if (k) {
        k->type = KV_U32;
        k->u = (uint32_t)ft;
    }
}

/* TextModel.set_gguf_parameters. */
static void text_model(struct kvs *l, enum quant_ftype ft)
{
    const struct hf_config *c = l->c;
    set_u32(l, "block_count", c->n_layer);
    if (c->n_ctx)
        set_u32(l, "context_length", c->n_ctx);
    set_u32(l, "embedding_length", c->n_embd);
    set_u32(l, "feed_forward_length", c->n_ff);
    set_u32(l, "attention.head_count", c->n_head);
    if (c->has_head_kv)
        set_u32(l, "attention.head_count_kv", c->n_head_kv);
    if (c->rope == HF_ROPE_LINEAR || c->rope == HF_ROPE_YARN) {
        set_str(l, "rope.scaling.type", c->rope == HF_ROPE_LINEAR ? "linear" : "yarn");
        set_f32(l, "rope.scaling.factor", c->rope_factor);
    }
    if (c->rope == HF_ROPE_YARN) {
        static const char *const yk[4] = {
            "rope.scaling.yarn_ext_factor", "rope.scaling.yarn_attn_factor",
            "rope.scaling.yarn_beta_fast", "rope.scaling.yarn_beta_slow"};
        set_u32(l, "rope.scaling.original_context_length", (int64_t)c->rope_orig_ctx);
        for (int i = 0; i < 4; i++)
            if (c->yarn_has[i])
                set_f32(l, yk[i], c->yarn[i]);
    }
    if (c->rope == HF_ROPE_LONGROPE)
        set_str(l, "rope.scaling.type", "longrope");
    if (c->has_theta)
        set_f32(l, "rope.freq_base", c->rope_theta);
    if (c->has_theta_swa)
        set_f32(l, "rope.freq_base_swa", c->rope_theta_swa);
    if (c->has_rms_eps || c->family == HF_FAM_LLAMA) /* llama.cpp requires llama's eps */
        set_f32(l, "attention.layer_norm_rms_epsilon", c->rms_eps);
    if (c->n_expert) {
        set_u32(l, "expert_count", c->n_expert);
        set_u32(l, "expert_used_count", c->n_expert_used);
    }
    if (c->has_head_dim) {
        set_u32(l, "attention.key_length", c->head_dim);
        set_u32(l, "attention.value_length", c->head_dim);
    }
    set_file_type(l, ft);
}

static void gemma2(struct kvs *l, enum quant_ftype ft)
{
    const struct hf_config *c = l->c;
    set_u32(l, "context_length", c->n_ctx);
    set_u32(l, "embedding_length", c->n_embd);
    set_u32(l, "block_count", c->n_layer);
    set_u32(l, "feed_forward_length", c->n_ff);
    set_u32(l, "attention.head_count", c->n_head);
    set_u32(l, "attention.head_count_kv", c->n_head_kv);
    set_f32(l, "attention.layer_norm_rms_epsilon", c->rms_eps);
    set_u32(l, "attention.key_length", c->head_dim);
    set_u32(l, "attention.value_length", c->head_dim);
    set_file_type(l, ft);
    set_f32(l, "attn_logit_softcapping", c->attn_softcap);
    set_f32(l, "final_logit_softcapping", c->final_softcap);
    set_u32(l, "attention.sliding_window", c->swa);
}

static void gemma3(struct kvs *l, enum quant_ftype ft)
{
    const struct hf_config *c = l->c;
    text_model(l, ft);
    set_u32(l, "context_length", c->n_ctx);
    set_u32(l, "attention.head_count", c->n_head);
    set_f32(l, "attention.layer_norm_rms_epsilon", c->rms_eps);
    set_u32(l, "attention.key_length", c->head_dim);
    set_u32(l, "attention.value_length", c->head_dim);
    set_f32(l, "rope.freq_base", c->rope_theta);
    if (c->has_final_softcap)
        set_f32(l, "final_logit_softcapping", c->final_softcap);
    if (c->swa)
        set_u32(l, "attention.sliding_window", c->swa);
    set_u32(l, "attention.head_count_kv", c->n_head_kv);
    if (c->swa && c->swa_pattern)
        set_u32(l, "attention.sliding_window_pattern", c->swa_pattern);
}

static void phi3(struct kvs *l, enum quant_ftype ft)
{
    const struct hf_config *c = l->c;
    set_u32(l, "context_length", c->n_ctx);
    set_u32(l, "rope.scaling.original_context_length", (int64_t)c->rope_orig_ctx);
    set_u32(l, "embedding_length", c->n_embd);
    set_u32(l, "feed_forward_length", c->n_ff);
    set_u32(l, "block_count", c->n_layer);
    set_u32(l, "attention.head_count", c->n_head);
    set_u32(l, "attention.head_count_kv", c->n_head_kv);
    set_f32(l, "attention.layer_norm_rms_epsilon", c->rms_eps);
    set_u32(l, "rope.dimension_count", c->rope_dim);
    set_f32(l, "rope.freq_base", c->rope_theta);
    set_file_type(l, ft);
    set_u32(l, "attention.sliding_window", c->swa);
}

static int write_kvs(const struct kvs *l, struct gguf_writer *w, struct mf_err *err)
{
    int rc = 0;
    for (int i = 0; !rc && i < l->n; i++) {
        const struct kv *k = &l->kv[i];
        rc = k->type == KV_U32   ? gguf_writer_add_u32(w, k->key, k->u, err)
             : k->type == KV_F32 ? gguf_writer_add_f32(w, k->key, k->f, err)
                                 : gguf_writer_add_cstr(w, k->key, k->s, err);
    }
    return rc;
}

int hf_family_write(const struct hf_config *c, enum quant_ftype ft, struct gguf_writer *w,
                    struct mf_err *err)
{
    struct kvs l;
    l.c = c;
    l.n = 0;
    switch (c->family) {
    case HF_FAM_LLAMA: /* LlamaModel: TextModel, then the vocabulary size and RoPE width */
        text_model(&l, ft);
        set_u32(&l, "vocab_size", c->n_vocab);
        set_u32(&l, "rope.dimension_count", c->head_dim);
        break;
    case HF_FAM_QWEN2:
    case HF_FAM_QWEN3:
        text_model(&l, ft);
        break;
    case HF_FAM_QWEN3MOE: /* Qwen2MoeModel */
        text_model(&l, ft);
        set_u32(&l, "expert_feed_forward_length", c->n_ff_exp);
        break;
    case HF_FAM_GEMMA2:
        gemma2(&l, ft);
        break;
    case HF_FAM_GEMMA3:
        gemma3(&l, ft);
        break;
    case HF_FAM_PHI3:
        phi3(&l, ft);
        break;
    }
    return write_kvs(&l, w, err);
}

int hf_family_write_early(const struct hf_config *c, struct gguf_writer *w, struct mf_err *err)
{
    char key[96];
    if (c->family != HF_FAM_PHI3 || !c->n_rope_factors)
        return 0;
    snprintf(key, sizeof key, "%s.rope.scaling.attn_factor", c->gguf_arch);
    return gguf_writer_add_f32(w, key, (float)c->rope_attn_factor, err);
}
