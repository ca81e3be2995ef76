/*
 * model_hparams.c: a GGUF's hyper-parameters, read under its family's key
 * prefix ("qwen2.embedding_length") and resolved into the plain values of
 * struct model_hparams: attention scales, soft-caps, sliding window, RoPE
 * scaling (linear, YaRN, LongRoPE's mscale), expert counts; the keys a
 * family requires (gpt-oss's sliding window) are refused when absent.
 *
 * Owns nothing. Every key is range-checked before any size arithmetic, and
 * an error names the file and the key. What each family does with a key
 * follows llama.cpp's loader for it (common/arch.c says where).
 */
#include "runtime/model/model_int.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/gguf.h"

/* "<arch>.<suffix>" into key. */
static void arch_key(const struct model_hparams *hp, const char *suffix, char *key, size_t size)
{
    snprintf(key, size, "%s.%s", hp->arch->name, suffix);
}

/* Reads a positive u32 key "<arch>.<suffix>" (at most max) into *out; an
 * absent optional key is MF_ENOTFOUND with err clear, *out untouched. */
static int get_dim(const struct gguf_file *gf, const struct model_hparams *hp,
                   const char *suffix, int32_t max, int required, int32_t *out,
                   struct mf_err *err)
{
    char key[96];
    uint32_t v;
    int rc;

    arch_key(hp, suffix, key, sizeof key);
    rc = gguf_get_u32(gf, key, &v, err);
    if (rc == MF_ENOTFOUND && !required) {
        mf_err_clear(err);
        return MF_ENOTFOUND;
    }
    if (rc == MF_ENOTFOUND)
        return mf_err_set(err, MF_EFORMAT, "%s: required key '%s' is missing", gguf_name(gf),
                          key);
    if (rc)
        return rc;
    if (v == 0 || v > (uint32_t)max)
        return mf_err_set(err, MF_EFORMAT, "%s: key '%s' is %" PRIu32 " (must be 1..%" PRId32 ")",
                          gguf_name(gf), key, v, max);
    *out = (int32_t)v;
    return 0;
}

/* An optional dimension: 0 when absent or on success, else the error. */
static int get_dim_opt(const struct gguf_file *gf, const struct model_hparams *hp,
                       const char *suffix, int32_t max, int32_t *out, struct mf_err *err)
{
    int rc = get_dim(gf, hp, suffix, max, 0, out, err);
    return rc == MF_ENOTFOUND ? 0 : rc;
}

/* Reads an optional float key "<arch>.<suffix>"; leaves *out (the default)
 * when absent. */
static int get_float_opt(const struct gguf_file *gf, const struct model_hparams *hp,
                         const char *suffix, float *out, struct mf_err *err)
{
    char key[96];
    int rc;

    arch_key(hp, suffix, key, sizeof key);
    rc = gguf_get_f32(gf, key, out, err);
    if (rc == MF_ENOTFOUND) {
        mf_err_clear(err);
        return 0;
    }
    if (!rc && !isfinite(*out))
        return mf_err_set(err, MF_EFORMAT, "%s: key '%s' is not a finite number", gguf_name(gf),
                          key);
    return rc;
}

/* general.type must be "model" when present; general.architecture names a
 * family of common/arch.h. */
static int read_arch(const struct gguf_file *gf, struct model_hparams *hp, struct mf_err *err)
{
    struct gguf_str s;
    int rc;

    rc = gguf_get_str(gf, "general.type", &s, err);
    if (rc == 0 && !gguf_str_eq(s, "model"))
        return mf_err_set(err, MF_EUNSUPPORTED,
                          "%s: general.type is '%.*s', expected 'model' (a LoRA adapter is "
                          "loaded with ADAPTER, not as the base model)",
                          gguf_name(gf), (int)(s.len > 64 ? 64 : s.len), s.p);
    if (rc && rc != MF_ENOTFOUND)
        return rc;
    rc = gguf_get_str(gf, "general.architecture", &s, err);
    if (rc == MF_ENOTFOUND)
        return mf_err_set(err, MF_EFORMAT, "%s: general.architecture is missing", gguf_name(gf));
    if (rc)
        return rc;
    hp->arch = arch_find(s.p, s.len);
    if (!hp->arch)
        return mf_err_set(err, MF_EUNSUPPORTED,
                          "%s: architecture '%.*s' is not supported (mfc runs %s)", gguf_name(gf),
                          (int)(s.len > 64 ? 64 : s.len), s.p, arch_names());
    mf_err_clear(err);
    return 0;
}

/* Derives head_dim from key_length/value_length or n_embd / n_head. */
static int read_head_dim(const struct gguf_file *gf, struct model_hparams *hp,
                         struct mf_err *err)
{
    int32_t kl = 0, vl = 0;
    int rc;

    rc = get_dim_opt(gf, hp, "attention.key_length", MODEL_MAX_DIM, &kl, err);
    if (!rc)
        rc = get_dim_opt(gf, hp, "attention.value_length", MODEL_MAX_DIM, &vl, err);
    if (rc)
        return rc;
    if (kl == 0) {
        if (hp->n_embd % hp->n_head)
            return mf_err_set(err, MF_EFORMAT,
                              "%s: embedding length %" PRId32 " is not a multiple of the %" PRId32
                              " heads",
                              gguf_name(gf), hp->n_embd, hp->n_head);
        kl = hp->n_embd / hp->n_head;
    }
    if (vl && vl != kl)
        return mf_err_set(err, MF_EUNSUPPORTED,
                          "%s: key length %" PRId32 " differs from value length %" PRId32,
                          gguf_name(gf), kl, vl);
    if (kl % 2)
        return mf_err_set(err, MF_EFORMAT, "%s: head dimension %" PRId32 " is odd",
                          gguf_name(gf), kl);
    hp->head_dim = kl;
    return 0;
}

/* YaRN's corrected dimension range for base (ggml_rope_yarn_corr_dims). */
static void yarn_corr_dims(int32_t n_rot, int32_t n_ctx_orig, float base, float corr[2])
{
    const float beta_fast = 32.0f, beta_slow = 1.0f; /* llama.cpp's defaults */
    float lo = (float)n_rot * logf((float)n_ctx_orig / (beta_fast * 2.0f * (float)M_PI)) /
               (2.0f * logf(base));
    float hi = (float)n_rot * logf((float)n_ctx_orig / (beta_slow * 2.0f * (float)M_PI)) /
               (2.0f * logf(base));
    lo = floorf(lo);
    hi = ceilf(hi);
    corr[0] = lo > 0.0f ? lo : 0.0f;
    corr[1] = hi < (float)(n_rot - 1) ? hi : (float)(n_rot - 1);
}

/* rope.scaling.type (none, linear, yarn, longrope), its factor and
 * attn_factor, as llama.cpp resolves them into a frequency scale, YaRN's
 * extrapolation mix and the mscale applied to cos and sin. */
static int read_rope_scaling(const struct gguf_file *gf, struct model_hparams *hp,
                             struct mf_err *err)
{
    char key[96];
    struct gguf_str s = {"linear", 6};
    float factor = 0.0f, attn_factor = 1.0f;
    int yarn = 0, rc;

    arch_key(hp, "rope.scaling.type", key, sizeof key);
    rc = gguf_get_str(gf, key, &s, err);
    if (rc && rc != MF_ENOTFOUND)
        return rc;
    mf_err_clear(err);
    if (gguf_str_eq(s, "yarn"))
        yarn = 1;
    else if (!gguf_str_eq(s, "none") && !gguf_str_eq(s, "linear") && !gguf_str_eq(s, "longrope"))
        return mf_err_set(err, MF_EUNSUPPORTED,
                          "%s: key '%s' is '%.*s' (mfc runs none, linear, yarn, longrope and "
                          "llama3's rope_freqs)",
                          gguf_name(gf), key, (int)(s.len > 32 ? 32 : s.len), s.p);
    rc = get_float_opt(gf, hp, "rope.scaling.factor", &factor, err);
    if (!rc)
        rc = get_float_opt(gf, hp, "rope.scaling.attn_factor", &attn_factor, err);
    if (rc)
        return rc;
    if (factor < 0.0f || factor > 1e6f || !(attn_factor > 0.0f) || attn_factor > 1e3f)
        return mf_err_set(err, MF_EFORMAT,
                          "%s: rope scaling factor %g or attn_factor %g is out of range",
                          gguf_name(gf), (double)factor, (double)attn_factor);
    hp->rope_freq_scale = factor == 0.0f || gguf_str_eq(s, "none") ? 1.0f : 1.0f / factor;
    hp->rope_mscale = attn_factor;
    hp->n_ctx_orig = hp->n_ctx_train;
    rc = get_dim_opt(gf, hp, "rope.scaling.original_context_length", INT32_MAX, &hp->n_ctx_orig,
                     err);
    if (rc)
        return rc;
    hp->yarn_ext = yarn ? 1.0f : 0.0f;
    if (yarn) {
        /* llama.cpp's context: attn_factor = mscale(f) * (1 / (1 + 0.1 ln f))
         * with f = 1 / freq_scale, in these float steps (about 1; the rope
         * then applies 1 + 0.1 ln f itself) */
        float f = 1.0f / hp->rope_freq_scale;
        float ms = f <= 1.0f ? 1.0f : 0.1f * logf(f) + 1.0f;
        ms *= 1.0f / (1.0f + 0.1f * logf(f));
        hp->rope_mscale = ms * attn_factor;
    }
    return 0;
}

/* The sliding window and which layers use it; the RoPE base of each kind. */
static int read_swa(const struct gguf_file *gf, struct model *m, struct mf_err *err)
{
    struct model_hparams *hp = &m->hp;
    const struct arch_desc *a = hp->arch;
    int32_t window = a->swa_window, period = a->swa_period;
    float swa_base = 0.0f;
    char key[96];
    uint32_t v;
    int rc;

    if (!a->swa_window && !a->swa_period)
        return 0; /* the family has no sliding layers (llama.cpp ignores the key) */
    arch_key(hp, "attention.sliding_window", key, sizeof key);
    rc = gguf_get_u32(gf, key, &v, err);
    if (!rc && (v == 0 || v > INT32_MAX))
        return mf_err_set(err, MF_EFORMAT,
                          "%s: key '%s' is %" PRIu32 " (a window must be 1..2^31-1 positions)",
                          gguf_name(gf), key, v);
    if (!rc)
        window = (int32_t)v;
    else if (rc == MF_ENOTFOUND && (a->flags & ARCH_SWA_KEY))
        return mf_err_set(err, MF_EFORMAT, "%s: required key '%s' is missing", gguf_name(gf), key);
    else if (rc != MF_ENOTFOUND)
        return rc;
    mf_err_clear(err);
    if (window == 0)
        return 0;
    arch_key(hp, "attention.sliding_window_pattern", key, sizeof key);
    rc = gguf_get_u32(gf, key, &v, err);
    if (!rc && v > MODEL_MAX_LAYERS)
        return mf_err_set(err, MF_EFORMAT, "%s: key '%s' is %" PRIu32 " (at most %d)",
                          gguf_name(gf), key, v, MODEL_MAX_LAYERS);
    if (!rc)
        period = (int32_t)v;
    else if (rc != MF_ENOTFOUND)
        return rc;
    mf_err_clear(err);
    hp->n_swa = window;
    rc = get_float_opt(gf, hp, "rope.freq_base_swa", &swa_base, err);
    if (rc)
        return rc;
    if (swa_base != 0.0f && !(swa_base > 0.0f))
        return mf_err_set(err, MF_EFORMAT, "%s: the sliding layers' rope base %g is not positive",
                          gguf_name(gf), (double)swa_base);
    model_layer_kinds(m, period, swa_base);
    return 0;
}

void model_layer_kinds(struct model *m, int32_t period, float swa_base)
{
    const struct model_hparams *hp = &m->hp;
    const struct arch_desc *a = hp->arch;

    m->rope_bases[0] = m->rope_bases[1] = hp->rope_base;
    m->rope_scales[0] = m->rope_scales[1] = hp->rope_freq_scale;
    m->n_rope_kinds = 1;
    if (hp->n_swa > 0) {
        /* Gemma 3's sliding layers turn at their own base without scaling;
         * Gemma 2's use the model's */
        if (swa_base == 0.0f && a->swa_rope_base > 0.0f)
            swa_base = a->swa_rope_base;
        m->rope_bases[1] = swa_base > 0.0f ? swa_base : hp->rope_base;
        m->rope_scales[1] = a->swa_rope_base > 0.0f ? 1.0f : hp->rope_freq_scale;
        m->n_rope_kinds = 2;
    }
    for (int32_t il = 0; il < hp->n_layer; il++) {
        m->layers[il].swa = hp->n_swa > 0 && (period == 0 || il % period < period - 1);
        m->layers[il].rope_kind = m->layers[il].swa;
    }
    for (int k = 0; k < 2; k++)
        yarn_corr_dims(hp->n_rot, hp->n_ctx_orig, m->rope_bases[k], m->rope_corr[k]);
}

/* Expert counts: refused where the family has none, required where it
 * routes every layer; 0 and 1 mean a dense FFN (as llama.cpp reads them). */
static int read_experts(const struct gguf_file *gf, struct model_hparams *hp,
                        struct mf_err *err)
{
    const struct arch_desc *a = hp->arch;
    char key[96];
    uint32_t v = 0;
    int rc;

    arch_key(hp, "expert_count", key, sizeof key);
    rc = gguf_get_u32(gf, key, &v, err);
    if (rc && rc != MF_ENOTFOUND)
        return rc;
    mf_err_clear(err);
    if (v > MODEL_MAX_EXPERTS)
        return mf_err_set(err, MF_EFORMAT, "%s: key '%s' is %" PRIu32 " (at most %d)",
                          gguf_name(gf), key, v, MODEL_MAX_EXPERTS);
    hp->n_expert = v > 1 ? (int32_t)v : 0;
    if (hp->n_expert && !(a->flags & ARCH_EXPERTS))
        return mf_err_set(err, MF_EUNSUPPORTED,
                          "%s: key '%s' is %" PRId32 ", but mfc runs %s models without experts",
                          gguf_name(gf), key, hp->n_expert, a->name);
    if (!hp->n_expert && (a->flags & ARCH_ALL_EXPERTS))
        return mf_err_set(err, MF_EFORMAT, "%s: key '%s' is %s; a %s model needs 2 or more",
                          gguf_name(gf), key, rc ? "missing" : (v ? "1" : "0"), a->name);
    if (!hp->n_expert)
        return 0;
    rc = get_dim(gf, hp, "expert_used_count", hp->n_expert, 1, &hp->n_expert_used, err);
    hp->n_ff_exp = hp->n_ff;
    if (!rc)
        rc = get_dim_opt(gf, hp, "expert_feed_forward_length", MODEL_MAX_DIM, &hp->n_ff_exp, err);
    return rc;
}

/* Checks how the head counts and rotary dims fit together. */
static int check_heads(const struct gguf_file *gf, struct model_hparams *hp, struct mf_err *err)
{
    if (hp->n_head % hp->n_head_kv)
        return mf_err_set(err, MF_EFORMAT,
                          "%s: %" PRId32 " query heads are not a multiple of %" PRId32
                          " KV heads",
                          gguf_name(gf), hp->n_head, hp->n_head_kv);
    if (hp->n_rot % 2 || hp->n_rot > hp->head_dim)
        return mf_err_set(err, MF_EFORMAT,
                          "%s: rope dimension count %" PRId32
                          " must be even and at most the head dimension %" PRId32,
                          gguf_name(gf), hp->n_rot, hp->head_dim);
    if (!(hp->rms_eps > 0.0f) || hp->rms_eps > 1.0f)
        return mf_err_set(err, MF_EFORMAT, "%s: rms epsilon %g is not in (0, 1]", gguf_name(gf),
                          (double)hp->rms_eps);
    if (!(hp->rope_base > 0.0f))
        return mf_err_set(err, MF_EFORMAT, "%s: rope freq_base %g is not positive",
                          gguf_name(gf), (double)hp->rope_base);
    if ((hp->arch->flags & ARCH_ROPE_FULL) && hp->n_rot != hp->head_dim)
        return mf_err_set(err, MF_EUNSUPPORTED,
                          "%s: key '%s.rope.dimension_count' is %" PRId32
                          "; a %s model rotates its whole head of %" PRId32,
                          gguf_name(gf), hp->arch->name, hp->n_rot, hp->arch->name, hp->head_dim);
    return 0;
}

/* The attention scales and soft-caps of the family. */
void model_hparams_derive(struct model_hparams *hp)
{
    const struct arch_desc *a = hp->arch;

    hp->rope_neox = a->rope == ARCH_ROPE_NEOX;
    hp->kq_scale = 1.0f / sqrtf((float)hp->head_dim);
    hp->q_scale = 1.0f;
    if (a->flags & ARCH_Q_PRESCALE) {
        int wide = a->wide_scale_layers && hp->n_layer == a->wide_scale_layers;
        hp->q_scale = wide ? 1.0f / sqrtf((float)(hp->n_embd / hp->n_head)) : hp->kq_scale;
        hp->kq_scale = 1.0f;
    }
    hp->embd_scale = (a->flags & ARCH_EMBD_SCALE) ? sqrtf((float)hp->n_embd) : 1.0f;
    hp->attn_softcap = a->attn_softcap;
    hp->final_softcap = a->final_softcap;
    if (hp->rope_mscale == 0.0f)
        hp->rope_mscale = 1.0f;
    if (hp->n_ctx_orig == 0)
        hp->n_ctx_orig = hp->n_ctx_train;
}

/* The soft-caps' keys, over model_hparams_derive's defaults. */
static int read_softcaps(const struct gguf_file *gf, struct model_hparams *hp,
                         struct mf_err *err)
{
    const struct arch_desc *a = hp->arch;
    int rc = 0;

    if (a->attn_softcap > 0.0f)
        rc = get_float_opt(gf, hp, "attn_logit_softcapping", &hp->attn_softcap, err);
    if (!rc)
        rc = get_float_opt(gf, hp, "final_logit_softcapping", &hp->final_softcap, err);
    if (!rc && (hp->attn_softcap < 0.0f || hp->final_softcap < 0.0f))
        return mf_err_set(err, MF_EFORMAT, "%s: a logit soft-cap is negative", gguf_name(gf));
    return rc;
}

int model_read_hparams(const struct gguf_file *gf, struct model *m, struct mf_err *err)
{
    struct model_hparams *hp = &m->hp;
    int rc;

    memset(hp, 0, sizeof *hp);
    rc = read_arch(gf, hp, err);
    if (!rc)
        rc = get_dim(gf, hp, "context_length", INT32_MAX, 1, &hp->n_ctx_train, err);
    if (!rc)
        rc = get_dim(gf, hp, "embedding_length", MODEL_MAX_DIM, 1, &hp->n_embd, err);
    if (!rc)
        rc = get_dim(gf, hp, "feed_forward_length", MODEL_MAX_DIM, 1, &hp->n_ff, err);
    if (!rc)
        rc = get_dim(gf, hp, "block_count", MODEL_MAX_LAYERS, 1, &hp->n_layer, err);
    if (!rc)
        rc = get_dim(gf, hp, "attention.head_count", MODEL_MAX_HEADS, 1, &hp->n_head, err);
    if (rc)
        return rc;
    hp->n_head_kv = hp->n_head;
    rc = get_dim_opt(gf, hp, "attention.head_count_kv", MODEL_MAX_HEADS, &hp->n_head_kv, err);
    if (!rc)
        rc = read_head_dim(gf, hp, err);
    if (rc)
        return rc;
    hp->n_rot = hp->head_dim;
    rc = get_dim_opt(gf, hp, "rope.dimension_count", MODEL_MAX_DIM, &hp->n_rot, err);
    if (rc)
        return rc;
    hp->rms_eps = -1.0f;
    rc = get_float_opt(gf, hp, "attention.layer_norm_rms_epsilon", &hp->rms_eps, err);
    if (!rc && hp->rms_eps == -1.0f)
        rc = mf_err_set(err, MF_EFORMAT,
                        "%s: required key '%s.attention.layer_norm_rms_epsilon' is missing",
                        gguf_name(gf), hp->arch->name);
    hp->rope_base = 10000.0f; /* llama.cpp's default when the key is absent */
    if (!rc)
        rc = get_float_opt(gf, hp, "rope.freq_base", &hp->rope_base, err);
    if (!rc)
        rc = check_heads(gf, hp, err);
    if (rc)
        return rc;
    model_hparams_derive(hp);
    rc = read_rope_scaling(gf, hp, err);
    if (!rc)
        rc = read_experts(gf, hp, err);
    if (!rc)
        rc = read_softcaps(gf, hp, err);
    return rc;
}

int model_read_layer_kinds(const struct gguf_file *gf, struct model *m, struct mf_err *err)
{
    model_layer_kinds(m, 0, 0.0f); /* no window: every layer global */
    return read_swa(gf, m, err);
}
