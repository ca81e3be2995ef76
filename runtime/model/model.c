/*
 * model.c: loads a llama-family model (Llama 2/3.x, Mistral, TinyLlama) from
 * a GGUF mapping and validates it completely before anyone computes with it.
 *
 * Owns the GGUF mapping, the per-layer weight table and attached adapters.
 * Does not own KV storage or scratch buffers (the backend does) nor
 * sequences (sched.c does). Weights are never copied: every model_weight
 * points into the map, so a 4 GiB model costs 4 GiB of page cache and no
 * heap.
 *
 * Invariants after model_open() succeeds: every weight named in model.h is
 * present with exactly the documented shape and a type model_type_supported()
 * accepts (norms and rope_freqs F32); the hyper-parameters are positive,
 * within MODEL_MAX_*, n_head is a multiple of n_head_kv, head_dim and n_rot
 * are even with n_rot <= head_dim; no tensor in the file is left unexplained
 * (llama.cpp refuses extra tensors too, and a stray one usually means the
 * wrong architecture).
 */
#include "runtime/model/model.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/gguf.h"
#include "runtime/model/batch.h"
#include "runtime/model/lora.h"

/* ------------------------------------------------------------------------
 * Hyper-parameters
 * ---------------------------------------------------------------------- */

/* Reads a required positive int key "llama.<suffix>" into *out. */
static int get_dim(const struct gguf_file *gf, const char *suffix, int32_t max, int required,
                   int32_t *out, struct mf_err *err)
{
    char key[96];
    uint32_t v;
    int rc;

    snprintf(key, sizeof key, "llama.%s", suffix);
    rc = gguf_get_u32(gf, key, &v, err);
    if (rc == MF_ENOTFOUND && !required)
        return MF_ENOTFOUND;
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

/* Reads an optional float key; leaves *out (the default) when absent. */
static int get_float_opt(const struct gguf_file *gf, const char *key, float *out,
                         struct mf_err *err)
{
    int rc = gguf_get_f32(gf, key, out, err);

    if (rc == MF_ENOTFOUND) {
        mf_err_clear(err);
        return 0;
    }
    return rc;
}

/* Checks general.architecture and general.type: only "llama" models. */
static int check_arch(const struct gguf_file *gf, struct mf_err *err)
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
    if (!gguf_str_eq(s, "llama"))
        return mf_err_set(err, MF_EUNSUPPORTED,
                          "%s: architecture '%.*s' is not supported (mfc runs 'llama': "
                          "Llama 2/3, Mistral, TinyLlama)",
                          gguf_name(gf), (int)(s.len > 64 ? 64 : s.len), s.p);
    return 0;
}

/* Refuses rope scaling kinds other than none and linear (YaRN, LongRoPE). */
static int read_rope_scaling(const struct gguf_file *gf, struct model_hparams *hp,
                             struct mf_err *err)
{
    struct gguf_str s;
    float factor = 1.0f;
    int rc;

    hp->rope_freq_scale = 1.0f;
    rc = gguf_get_str(gf, "llama.rope.scaling.type", &s, err);
    if (rc == MF_ENOTFOUND) {
        mf_err_clear(err);
        return 0;
    }
    if (rc)
        return rc;
    if (gguf_str_eq(s, "none"))
        return 0;
    if (!gguf_str_eq(s, "linear"))
        return mf_err_set(err, MF_EUNSUPPORTED,
                          "%s: rope scaling '%.*s' is not supported (none, linear, or llama3 "
                          "rope_freqs)",
                          gguf_name(gf), (int)(s.len > 32 ? 32 : s.len), s.p);
    rc = get_float_opt(gf, "llama.rope.scaling.factor", &factor, err);
    if (rc)
        return rc;
    if (!(factor > 0.0f) || factor > 1e6f)
        return mf_err_set(err, MF_EFORMAT, "%s: llama.rope.scaling.factor %g is not positive",
                          gguf_name(gf), (double)factor);
    hp->rope_freq_scale = 1.0f / factor;
    return 0;
}

/* Optional u32 "llama.expert_count": a mixture of experts is not llama. */
static int check_no_experts(const struct gguf_file *gf, struct mf_err *err)
{
    uint32_t n = 0;
    int rc = gguf_get_u32(gf, "llama.expert_count", &n, err);

    if (rc == MF_ENOTFOUND) {
        mf_err_clear(err);
        return 0;
    }
    if (rc)
        return rc;
    if (n > 1)
        return mf_err_set(err, MF_EUNSUPPORTED,
                          "%s: mixture-of-experts models (llama.expert_count = %" PRIu32
                          ") are not supported",
                          gguf_name(gf), n);
    return 0;
}

/* Derives head_dim from key_length/value_length or n_embd / n_head. */
static int read_head_dim(const struct gguf_file *gf, struct model_hparams *hp,
                         struct mf_err *err)
{
    int32_t kl = 0, vl = 0;
    int rc;

    rc = get_dim(gf, "attention.key_length", MODEL_MAX_DIM, 0, &kl, err);
    if (rc && rc != MF_ENOTFOUND)
        return rc;
    rc = get_dim(gf, "attention.value_length", MODEL_MAX_DIM, 0, &vl, err);
    if (rc && rc != MF_ENOTFOUND)
        return rc;
    mf_err_clear(err);
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
    return 0;
}

/* Fills hp from the llama.* keys; n_vocab is set later from token_embd. */
static int read_hparams(const struct gguf_file *gf, struct model_hparams *hp, struct mf_err *err)
{
    int rc;

    memset(hp, 0, sizeof *hp);
    rc = check_arch(gf, err);
    if (!rc)
        rc = check_no_experts(gf, err);
    if (!rc)
        rc = get_dim(gf, "context_length", INT32_MAX, 1, &hp->n_ctx_train, err);
    if (!rc)
        rc = get_dim(gf, "embedding_length", MODEL_MAX_DIM, 1, &hp->n_embd, err);
    if (!rc)
        rc = get_dim(gf, "feed_forward_length", MODEL_MAX_DIM, 1, &hp->n_ff, err);
    if (!rc)
        rc = get_dim(gf, "block_count", MODEL_MAX_LAYERS, 1, &hp->n_layer, err);
    if (!rc)
        rc = get_dim(gf, "attention.head_count", MODEL_MAX_HEADS, 1, &hp->n_head, err);
    if (rc)
        return rc;
    hp->n_head_kv = hp->n_head;
    rc = get_dim(gf, "attention.head_count_kv", MODEL_MAX_HEADS, 0, &hp->n_head_kv, err);
    if (rc && rc != MF_ENOTFOUND)
        return rc;
    rc = read_head_dim(gf, hp, err);
    if (rc)
        return rc;
    hp->n_rot = hp->head_dim;
    rc = get_dim(gf, "rope.dimension_count", MODEL_MAX_DIM, 0, &hp->n_rot, err);
    if (rc && rc != MF_ENOTFOUND)
        return rc;
    mf_err_clear(err);
    rc = gguf_get_f32(gf, "llama.attention.layer_norm_rms_epsilon", &hp->rms_eps, err);
    if (rc == MF_ENOTFOUND)
        return mf_err_set(err, MF_EFORMAT,
                          "%s: required key 'llama.attention.layer_norm_rms_epsilon' is missing",
                          gguf_name(gf));
    if (rc)
        return rc;
    hp->rope_base = 10000.0f; /* llama.cpp's default when the key is absent */
    rc = get_float_opt(gf, "llama.rope.freq_base", &hp->rope_base, err);
    if (!rc)
        rc = read_rope_scaling(gf, hp, err);
    if (!rc)
        rc = check_heads(gf, hp, err);
    return rc;
}

/* ------------------------------------------------------------------------
 * Tensors
 * ---------------------------------------------------------------------- */

int model_type_supported(enum ggml_type t)
{
    switch (t) {
    case GGML_TYPE_F32:
    case GGML_TYPE_F16:
    case GGML_TYPE_BF16:
    case GGML_TYPE_Q4_0:
    case GGML_TYPE_Q5_0:
    case GGML_TYPE_Q5_1:
    case GGML_TYPE_Q8_0:
    case GGML_TYPE_Q4_K:
    case GGML_TYPE_Q5_K:
    case GGML_TYPE_Q6_K:
        return 1;
    default:
        return 0;
    }
}

/* Formats a tensor's dims as "[a, b]" or "[a]" into buf. */
static const char *shape_str(const uint64_t *ne, uint32_t n_dims, char *buf, size_t size)
{
    uint32_t n = n_dims ? n_dims : 1;
    size_t off = 0;

    off += (size_t)snprintf(buf, size, "[");
    for (uint32_t i = 0; i < n && off < size; i++)
        off += (size_t)snprintf(buf + off, size - off, "%s%" PRIu64, i ? ", " : "", ne[i]);
    if (off < size)
        snprintf(buf + off, size - off, "]");
    return buf;
}

/*
 * Finds tensor name and checks its shape is exactly [ne0] (ne1 == 0) or
 * [ne0, ne1], and its type: F32 only when norm is set, else any type
 * model_type_supported() takes. Fills *w. An absent optional tensor leaves
 * w->data NULL and returns 0; an absent required one is MF_EFORMAT.
 */
static int bind(const struct gguf_file *gf, const char *name, int64_t ne0, int64_t ne1, int norm,
                int required, struct model_weight *w, struct mf_err *err)
{
    const struct gguf_tensor *t = gguf_find_tensor(gf, name);
    uint64_t want[2] = {(uint64_t)ne0, (uint64_t)ne1};
    char got_s[96], want_s[64];

    memset(w, 0, sizeof *w);
    if (!t && !required)
        return 0;
    if (!t)
        return mf_err_set(err, MF_EFORMAT, "%s: tensor '%s' is missing", gguf_name(gf), name);
    if (t->ne[0] != want[0] || t->ne[1] != (ne1 ? want[1] : 1) || t->ne[2] != 1 || t->ne[3] != 1)
        return mf_err_set(err, MF_EFORMAT, "%s: tensor '%s' has shape %s, expected %s",
                          gguf_name(gf), name, shape_str(t->ne, t->n_dims, got_s, sizeof got_s),
                          shape_str(want, ne1 ? 2 : 1, want_s, sizeof want_s));
    if (norm && t->type != GGML_TYPE_F32)
        return mf_err_set(err, MF_EUNSUPPORTED, "%s: tensor '%s' has type %s; mfc needs F32 here",
                          gguf_name(gf), name, ggml_type_name(t->type));
    if (!model_type_supported((enum ggml_type)t->type))
        return mf_err_set(err, MF_EUNSUPPORTED,
                          "%s: tensor '%s' has weight type %s, which mfc does not run "
                          "(F32, F16, BF16, Q4_0, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K)",
                          gguf_name(gf), name, ggml_type_name(t->type));
    w->data = t->data;
    w->type = (enum ggml_type)t->type;
    w->ne0 = ne0;
    w->ne1 = ne1 ? ne1 : 1;
    w->row_bytes = t->n_bytes / (uint64_t)w->ne1;
    w->name = t->name;
    return 0;
}

static const char *const layer_names[MODEL_W_PER_LAYER] = {
    "attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down",
};

/* Binds the nine tensors of layer il. */
static int bind_layer(struct model *m, int32_t il, struct mf_err *err)
{
    const struct model_hparams *hp = &m->hp;
    struct model_layer *L = &m->layers[il];
    int64_t q = (int64_t)hp->n_head * hp->head_dim, kv = (int64_t)hp->n_head_kv * hp->head_dim;
    int64_t in[MODEL_W_PER_LAYER] = {hp->n_embd, hp->n_embd, hp->n_embd, q,
                                     hp->n_embd, hp->n_embd, hp->n_ff};
    int64_t out[MODEL_W_PER_LAYER] = {q, kv, kv, hp->n_embd, hp->n_ff, hp->n_ff, hp->n_embd};
    char name[GGUF_MAX_NAME + 16];
    int rc;

    snprintf(name, sizeof name, "blk.%" PRId32 ".attn_norm.weight", il);
    rc = bind(m->gf, name, hp->n_embd, 0, 1, 1, &L->attn_norm, err);
    if (rc)
        return rc;
    snprintf(name, sizeof name, "blk.%" PRId32 ".ffn_norm.weight", il);
    rc = bind(m->gf, name, hp->n_embd, 0, 1, 1, &L->ffn_norm, err);
    for (int i = 0; !rc && i < MODEL_W_PER_LAYER; i++) {
        snprintf(name, sizeof name, "blk.%" PRId32 ".%s.weight", il, layer_names[i]);
        rc = bind(m->gf, name, in[i], out[i], 0, 1, &L->w[i], err);
    }
    return rc;
}

/* Binds the tensors outside the layers; n_vocab comes from token_embd. */
static int bind_globals(struct model *m, struct mf_err *err)
{
    const struct gguf_tensor *te = gguf_find_tensor(m->gf, "token_embd.weight");
    struct model_hparams *hp = &m->hp;
    int rc;

    if (!te)
        return mf_err_set(err, MF_EFORMAT, "%s: tensor 'token_embd.weight' is missing",
                          gguf_name(m->gf));
    if (te->ne[1] == 0 || te->ne[1] > MODEL_MAX_DIM)
        return mf_err_set(err, MF_EFORMAT, "%s: token_embd.weight has %" PRIu64 " rows (vocabulary)",
                          gguf_name(m->gf), te->ne[1]);
    hp->n_vocab = (int32_t)te->ne[1];
    rc = bind(m->gf, "token_embd.weight", hp->n_embd, hp->n_vocab, 0, 1, &m->tok_embd, err);
    if (!rc)
        rc = bind(m->gf, "output_norm.weight", hp->n_embd, 0, 1, 1, &m->out_norm, err);
    if (!rc)
        rc = bind(m->gf, "output.weight", hp->n_embd, hp->n_vocab, 0, 0, &m->output, err);
    if (!rc && !m->output.data) {
        m->output = m->tok_embd; /* tied embeddings, as llama.cpp does */
        m->tied = 1;
    }
    if (!rc)
        rc = bind(m->gf, "rope_freqs.weight", hp->n_rot / 2, 0, 1, 0, &m->rope_freqs, err);
    return rc;
}

/* 1 if name is a tensor of a llama model with n_layer layers. */
static int known_tensor(const char *name, int32_t n_layer)
{
    static const char *const globals[] = {"token_embd.weight", "output_norm.weight",
                                          "output.weight", "rope_freqs.weight"};
    char prefix[32];
    char *end;
    long il;

    for (size_t i = 0; i < sizeof globals / sizeof globals[0]; i++)
        if (strcmp(name, globals[i]) == 0)
            return 1;
    if (strncmp(name, "blk.", 4) != 0)
        return 0;
    il = strtol(name + 4, &end, 10);
    if (il < 0 || il >= n_layer || *end != '.')
        return 0;
    /* "blk.03." would alias blk.3: only the canonical spelling counts */
    snprintf(prefix, sizeof prefix, "blk.%ld.", il);
    if (strncmp(name, prefix, strlen(prefix)) != 0)
        return 0;
    name += strlen(prefix);
    /* old converters wrote rotary tables; llama.cpp skips them too */
    if (strcmp(name, "attn_rot_embd") == 0 || strcmp(name, "attn_rot_embd.weight") == 0)
        return 1;
    if (strcmp(name, "attn_norm.weight") == 0 || strcmp(name, "ffn_norm.weight") == 0)
        return 1;
    for (int i = 0; i < MODEL_W_PER_LAYER; i++) {
        size_t n = strlen(layer_names[i]);
        if (strncmp(name, layer_names[i], n) == 0 && strcmp(name + n, ".weight") == 0)
            return 1;
    }
    return 0;
}

/* Any tensor the model does not bind is an error naming it (biases, MoE
 * experts, another architecture's tensors): llama.cpp refuses them as well,
 * and running without them would silently compute the wrong function. */
static int check_no_extra(const struct model *m, struct mf_err *err)
{
    uint64_t n = gguf_n_tensors(m->gf);

    for (uint64_t i = 0; i < n; i++) {
        const struct gguf_tensor *t = gguf_tensor_at(m->gf, i);

        if (!known_tensor(t->name, m->hp.n_layer))
            return mf_err_set(err, MF_EUNSUPPORTED,
                              "%s: tensor '%s' is not part of a llama model mfc can run "
                              "(biases, experts and other architectures are not supported)",
                              gguf_name(m->gf), t->name);
    }
    return 0;
}

/* ------------------------------------------------------------------------
 * API
 * ---------------------------------------------------------------------- */

int model_open_gguf(struct gguf_file *gf, struct model **out, struct mf_err *err)
{
    struct model *m;
    int rc;

    *out = NULL;
    m = calloc(1, sizeof *m);
    if (!m) {
        gguf_close(gf);
        return mf_err_set(err, MF_ENOMEM, "out of memory loading a model");
    }
    m->gf = gf;
    rc = read_hparams(gf, &m->hp, err);
    if (rc)
        goto fail;
    m->layers = calloc((size_t)m->hp.n_layer, sizeof *m->layers);
    if (!m->layers) {
        rc = mf_err_set(err, MF_ENOMEM, "%s: out of memory for %" PRId32 " layers",
                        gguf_name(gf), m->hp.n_layer);
        goto fail;
    }
    rc = bind_globals(m, err);
    for (int32_t il = 0; !rc && il < m->hp.n_layer; il++)
        rc = bind_layer(m, il, err);
    if (!rc)
        rc = check_no_extra(m, err);
    if (rc)
        goto fail;
    *out = m;
    return 0;

fail:
    model_close(m);
    return rc;
}

int model_open(const char *path, struct model **out, struct mf_err *err)
{
    struct gguf_file *gf;
    int rc;

    *out = NULL;
    rc = gguf_open(path, &gf, err);
    if (rc)
        return rc;
    return model_open_gguf(gf, out, err);
}

void model_close(struct model *m)
{
    if (!m)
        return;
    for (int32_t i = 0; i < m->n_loras; i++)
        lora_close(m->loras[i]);
    free(m->loras);
    free(m->layers);
    gguf_close(m->gf);
    free(m);
}

int model_add_lora(struct model *m, struct lora *l, int32_t *id, struct mf_err *err)
{
    struct lora **grown;

    if (m->n_loras >= MODEL_MAX_LORAS) {
        lora_close(l);
        return mf_err_set(err, MF_ERANGE, "at most %d adapters can be attached to one model",
                          MODEL_MAX_LORAS);
    }
    grown = realloc(m->loras, ((size_t)m->n_loras + 1) * sizeof *grown);
    if (!grown) {
        lora_close(l);
        return mf_err_set(err, MF_ENOMEM, "out of memory attaching an adapter");
    }
    m->loras = grown;
    m->loras[m->n_loras] = l;
    *id = m->n_loras++;
    return 0;
}

const struct model_weight *model_weight_at(const struct model *m, int32_t layer,
                                           enum model_wid wid)
{
    if (layer == m->hp.n_layer)
        return &m->output;
    return &m->layers[layer].w[wid];
}

int32_t model_n_targets(const struct model *m)
{
    return m->hp.n_layer * MODEL_W_PER_LAYER + 1;
}

uint64_t model_kv_block_bytes(const struct model *m, int elem_bytes)
{
    return (uint64_t)m->hp.n_layer * 2 * (uint64_t)m->hp.n_head_kv * KV_BLOCK_TOKENS *
           (uint64_t)m->hp.head_dim * (uint64_t)elem_bytes;
}
