/*
 * hf_config.c: config.json -> llama hyperparameters and the llama.* GGUF keys.
 *
 * Follows convert_hf_to_gguf.py (Model.set_gguf_parameters, then
 * LlamaModel.set_gguf_parameters and generate_extra_tensors): the same keys,
 * in the same order, with the types gguf-py's writer gives them (u32 for
 * sizes, f32 for eps and theta). transformers 5's "rope_parameters" is read
 * where 4.x configs have rope_theta and rope_scaling. A JSON null counts as absent, as
 * hparams.get() does. The model class picks the family (hf_family.c), which
 * reads its own keys and writes every family but llama's (LlamaForCausalLM,
 * MistralForCausalLM, MixtralForCausalLM: LlamaModel, written here).
 */
#include "convert/hf.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/gguf.h"
#include "common/json.h"

#define HF_MAX_DIM (1LL << 31) /* any size above this is refused (u32 keys) */

/* The value at key unless absent or null. */
static json_t *get(const json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    return v && !json_is_null(v) ? v : NULL;
}

/* A positive integer at key: 0 and *out, MF_ENOTFOUND when absent (and not
 * required), MF_EFORMAT for another type or a value out of (0, HF_MAX_DIM]. */
static int get_dim(const json_t *o, const char *key, const char *what, int required, int64_t *out,
                   struct mf_err *err)
{
    json_t *v = get(o, key);
    if (!v) {
        if (required)
            return mf_err_set(err, MF_EFORMAT, "%s: \"%s\" is missing", what, key);
        return MF_ENOTFOUND;
    }
    if (!json_is_integer(v))
        return mf_err_set(err, MF_EFORMAT, "%s: \"%s\" must be an integer", what, key);
    json_int_t n = json_integer_value(v);
    if (n <= 0 || n > HF_MAX_DIM)
        return mf_err_set(err, MF_EFORMAT, "%s: \"%s\" is %lld, outside 1..%lld", what, key,
                          (long long)n, (long long)HF_MAX_DIM);
    *out = (int64_t)n;
    return 0;
}

/* A number at key: 0, MF_ENOTFOUND, or MF_EFORMAT. */
static int get_real(const json_t *o, const char *key, const char *what, double *out,
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

static int64_t get_id(const json_t *o, const char *key)
{
    json_t *v = get(o, key);
    return json_is_integer(v) && json_integer_value(v) >= 0 ? (int64_t)json_integer_value(v) : -1;
}

/* The first of keys present in o (find_hparam), or NULL. */
static json_t *first_of(const json_t *o, const char *const *keys)
{
    for (; *keys; keys++) {
        json_t *v = get(o, *keys);
        if (v)
            return v;
    }
    return NULL;
}

/* A number from v (NULL: MF_ENOTFOUND). */
static int real_of(const json_t *v, const char *key, const char *what, double *out,
                   struct mf_err *err)
{
    if (!v)
        return MF_ENOTFOUND;
    if (!json_is_number(v) || !isfinite(json_number_value(v)))
        return mf_err_set(err, MF_EFORMAT, "%s: \"%s\" must be a finite number", what, key);
    *out = json_number_value(v);
    return 0;
}

/* RoPE as TextModel.__init__ and set_gguf_parameters read it: the
 * parameters object is "rope_parameters" (transformers 5) or "rope_scaling",
 * its "full_attention" member when it has one per layer type; rope_theta,
 * the sliding layers' theta and original_max_position_embeddings come from
 * it, or from the top level when it is not split by layer type. */
static int parse_rope(const json_t *root, const char *what, struct hf_config *c, struct mf_err *err)
{
    static const char *const theta_keys[] = {"global_rope_theta", "rope_global_theta",
                                             "rope_theta_global", "rope_theta",
                                             "rotary_emb_base",   NULL};
    static const char *const local_keys[] = {"local_rope_theta",     "rope_local_theta",
                                             "rope_theta_local",     "swa_rope_theta",
                                             "rope_local_base_freq", NULL};
    json_t *rp = get(root, "rope_parameters");
    if (!rp)
        rp = get(root, "rope_scaling");
    c->rope = HF_ROPE_NONE;
    c->rope_factor = 8.0;
    c->rope_low = 1.0;
    c->rope_high = 4.0;
    c->rope_orig_ctx = 8192;
    c->rope_theta = 10000.0;
    if (rp && !json_is_object(rp))
        return mf_err_set(err, MF_EFORMAT, "%s: \"rope_scaling\" must be an object", what);
    json_t *full = rp ? get(rp, "full_attention") : NULL;
    json_t *slide = rp ? get(rp, "sliding_attention") : NULL;
    int split = json_is_object(full) || json_is_object(slide);
    json_t *rs = json_is_object(full) ? full : rp;
    int rc = real_of(rs ? get(rs, "rope_theta") : NULL, "rope_theta", what, &c->rope_theta, err);
    if (rc == MF_ENOTFOUND && !split)
        rc = real_of(first_of(root, theta_keys), "rope_theta", what, &c->rope_theta, err);
    c->has_theta = rc == 0;
    if (rc == MF_EFORMAT)
        return rc;
    rc = real_of(json_is_object(slide) ? get(slide, "rope_theta") : NULL, "rope_theta", what,
                 &c->rope_theta_swa, err);
    if (rc == MF_ENOTFOUND && !split)
        rc = real_of(first_of(root, local_keys), "rope_local_base_freq", what, &c->rope_theta_swa,
                     err);
    c->has_theta_swa = rc == 0;
    if (rc == MF_EFORMAT)
        return rc;
    rc = get_real(rs ? rs : root, "original_max_position_embeddings", what, &c->rope_orig_ctx, err);
    if (rc == MF_ENOTFOUND && rs && !split)
        rc = get_real(root, "original_max_position_embeddings", what, &c->rope_orig_ctx, err);
    c->has_rope_orig = rc == 0;
    if (rc == MF_EFORMAT)
        return rc;
    if (!c->has_rope_orig)
        c->rope_orig_ctx = 8192;
    if (!rs)
        return 0;
    const char *type = json_string_value(get(rs, "rope_type"));
    if (!type)
        type = json_string_value(get(rs, "type"));
    if (!type)
        return rp == get(root, "rope_parameters")
                   ? 0 /* transformers 5 may write the theta alone */
                   : mf_err_set(err, MF_EFORMAT, "%s: \"rope_scaling\" has no \"rope_type\"", what);
    rc = 0;
    if (strcmp(type, "llama3") == 0) {
        if (c->family != HF_FAM_LLAMA)
            return mf_err_set(err, MF_EUNSUPPORTED,
                              "%s: rope_type llama3 is a Llama scaling; the converter writes "
                              "nothing for it in a %s",
                              what, c->arch);
        c->rope = HF_ROPE_LLAMA3;
        if ((rc = get_real(rs, "factor", what, &c->rope_factor, err)) == MF_EFORMAT ||
            (rc = get_real(rs, "low_freq_factor", what, &c->rope_low, err)) == MF_EFORMAT ||
            (rc = get_real(rs, "high_freq_factor", what, &c->rope_high, err)) == MF_EFORMAT)
            return rc;
        if (c->rope_low == c->rope_high || c->rope_factor <= 0 || c->rope_orig_ctx <= 0)
            return mf_err_set(err, MF_EFORMAT,
                              "%s: llama3 rope_scaling needs factor > 0, "
                              "original_max_position_embeddings > 0 and "
                              "low_freq_factor != high_freq_factor",
                              what);
        return 0;
    }
    if (strcmp(type, "linear") == 0 || strcmp(type, "yarn") == 0) {
        int yarn = type[0] == 'y';
        rc = get_real(rs, "factor", what, &c->rope_factor, err);
        if (rc == MF_EFORMAT)
            return rc;
        if (rc == MF_ENOTFOUND) /* written only with a factor */
            return 0;
        if (!(c->rope_factor > 0))
            return mf_err_set(err, MF_EFORMAT, "%s: rope_scaling \"factor\" must be positive",
                              what);
        c->rope = yarn ? HF_ROPE_YARN : HF_ROPE_LINEAR;
        if (!yarn)
            return 0;
        if (!c->has_rope_orig)
            return mf_err_set(err, MF_EFORMAT,
                              "%s: yarn rope_scaling needs \"original_max_position_embeddings\"",
                              what);
        static const char *const yk[4][2] = {{"extrapolation_factor", NULL},
                                             {"attention_factor", "attn_factor"},
                                             {"beta_fast", NULL},
                                             {"beta_slow", NULL}};
        for (int i = 0; i < 4; i++) {
            rc = get_real(rs, yk[i][0], what, &c->yarn[i], err);
            if (rc == MF_ENOTFOUND && yk[i][1])
                rc = get_real(rs, yk[i][1], what, &c->yarn[i], err);
            if (rc == MF_EFORMAT)
                return rc;
            c->yarn_has[i] = rc == 0;
        }
        return 0;
    }
    if (strcmp(type, "longrope") == 0 || strcmp(type, "su") == 0) {
        if (c->family != HF_FAM_PHI3)
            return mf_err_set(err, MF_EUNSUPPORTED,
                              "%s: rope_type %s is converted for Phi3ForCausalLM only", what, type);
        c->rope = HF_ROPE_LONGROPE; /* the factor tables: hf_family_parse */
        return 0;
    }
    if (strcmp(type, "default") == 0 || strcmp(type, "none") == 0)
        return 0;
    return mf_err_set(err, MF_EUNSUPPORTED,
                      "%s: rope_scaling type \"%s\" is not supported (mfc converts llama3, "
                      "linear, yarn and longrope)",
                      what, type);
}

int hf_config_parse(const char *text, size_t len, const char *what, struct hf_config *c,
                    struct mf_err *err)
{
    memset(c, 0, sizeof *c);
    json_t *root = mf_json_parse(text, len, what, err);
    if (!root)
        return err->code;
    int rc = 0;
    json_t *archs = get(root, "architectures");
    const char *arch = json_string_value(json_array_get(archs, 0));
    if (!json_is_object(root))
        rc = mf_err_set(err, MF_EFORMAT, "%s: not a JSON object", what);
    else if (!arch)
        rc = mf_err_set(err, MF_EFORMAT, "%s: \"architectures\" must list the model class", what);
    else if (hf_family_find(arch, &c->family, &c->gguf_arch) != 0)
        rc = mf_err_set(err, MF_EUNSUPPORTED,
                        "%s: architecture %s is not supported (mfc converts %s)", what, arch,
                        hf_family_names());
    if (!rc) {
        snprintf(c->arch, sizeof c->arch, "%s", arch);
        /* a multimodal model's text tower: text_config over the top level,
         * as TextModel.__init__ merges them */
        json_t *text_cfg = get(root, "text_config");
        if (json_is_object(text_cfg)) {
            json_t *merged = json_deep_copy(root);
            if (!merged || json_object_update(merged, text_cfg) != 0) {
                json_decref(merged);
                rc = mf_err_set(err, MF_ENOMEM, "out of memory");
                goto out;
            }
            json_decref(root);
            root = merged;
        }
        if ((rc = get_dim(root, "vocab_size", what, 1, &c->n_vocab, err)) ||
            (rc = get_dim(root, "hidden_size", what, 1, &c->n_embd, err)) ||
            (rc = get_dim(root, "num_hidden_layers", what, 1, &c->n_layer, err)) ||
            (rc = get_dim(root, "intermediate_size", what, 1, &c->n_ff, err)) ||
            (rc = get_dim(root, "num_attention_heads", what, 1, &c->n_head, err)))
            goto out;
        rc = get_dim(root, "num_key_value_heads", what, 0, &c->n_head_kv, err);
        c->has_head_kv = rc == 0;
        if (rc == MF_ENOTFOUND)
            c->n_head_kv = c->n_head;
        else if (rc)
            goto out;
        rc = get_dim(root, "max_position_embeddings", what, 0, &c->n_ctx, err);
        if (rc == MF_ENOTFOUND)
            c->n_ctx = 0;
        else if (rc)
            goto out;
        rc = get_dim(root, "head_dim", what, 0, &c->head_dim, err);
        c->has_head_dim = rc == 0;
        if (rc == MF_ENOTFOUND)
            c->head_dim = c->n_embd / c->n_head;
        else if (rc)
            goto out;
        rc = get_real(root, "rms_norm_eps", what, &c->rms_eps, err);
        c->has_rms_eps = rc == 0;
        if (rc == MF_ENOTFOUND)
            c->rms_eps = 1e-5;
        else if (rc)
            goto out;
        rc = 0;
        json_t *tie = get(root, "tie_word_embeddings");
        if (tie && !json_is_boolean(tie))
            rc = mf_err_set(err, MF_EFORMAT, "%s: \"tie_word_embeddings\" must be true or false",
                            what);
        c->tied = json_is_true(tie);
        if (!rc && !c->has_head_dim && c->n_embd % c->n_head)
            rc = mf_err_set(err, MF_EFORMAT,
                            "%s: hidden_size %lld is not a multiple of num_attention_heads %lld",
                            what, (long long)c->n_embd, (long long)c->n_head);
        if (!rc && c->n_head % c->n_head_kv)
            rc = mf_err_set(err, MF_EFORMAT,
                            "%s: num_attention_heads %lld is not a multiple of "
                            "num_key_value_heads %lld",
                            what, (long long)c->n_head, (long long)c->n_head_kv);
        if (!rc && (c->head_dim % 2 || c->head_dim * c->n_head > HF_MAX_DIM))
            rc = mf_err_set(err, MF_EFORMAT, "%s: head dimension %lld must be even", what,
                            (long long)c->head_dim);
        if (!rc)
            rc = parse_rope(root, what, c, err);
        c->rope_dim = c->head_dim;
        if (!rc)
            rc = hf_family_parse(root, what, c, err);
        c->bos_id = get_id(root, "bos_token_id");
        c->eos_id = get_id(root, "eos_token_id");
        c->pad_id = get_id(root, "pad_token_id");
    }
out:
    json_decref(root);
    return rc;
}

int hf_config_write(const struct hf_config *c, enum quant_ftype ft, struct gguf_writer *w,
                    struct mf_err *err)
{
    return hf_family_write(c, ft, w, err);
}

void hf_config_rope_factors(const struct hf_config *c, float *out)
{
    /* torch: freqs = 1.0 / (base ** (arange(0, dim, 2, float32) / dim)), all float32 */
    int64_t dim = c->head_dim;
    float theta = (float)(c->has_theta ? c->rope_theta : 10000.0);
    float factor = (float)c->rope_factor, low = (float)c->rope_low;
    float old_ctx = (float)c->rope_orig_ctx;
    double low_wavelen = c->rope_orig_ctx / c->rope_low; /* python floats */
    double high_wavelen = c->rope_orig_ctx / c->rope_high;
    float span = (float)(c->rope_high - c->rope_low);
    for (int64_t i = 0; i < dim / 2; i++) {
        float e = (float)(2 * i) / (float)dim;
        float freq = 1.0f / powf(theta, e);
        float wavelen = (float)(2 * M_PI) / freq;
        if ((double)wavelen < high_wavelen) {
            out[i] = 1.0f;
        } else if ((double)wavelen > low_wavelen) {
            out[i] = factor;
        } else {
            float smooth = (old_ctx / wavelen - low) / span;
            out[i] = 1.0f / ((1.0f - smooth) / factor + smooth);
        }
    }
}
