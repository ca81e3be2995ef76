/*
 * model.c: loads a model of any family in common/arch.h from a GGUF mapping
 * and validates it completely before anyone computes with it: the keys
 * (model_hparams.c), then every tensor the family's switches call for.
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
#include "runtime/model/model_int.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/gguf.h"
#include "runtime/model/batch.h"
#include "runtime/model/lora.h"

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
    case GGML_TYPE_MXFP4:
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

/* What a bound tensor is, for its type check. */
enum kind {
    K_MAT = 0, /* a projection: any type model_type_supported() takes */
    K_F32 = 1, /* a norm weight, bias or factor table: F32 only */
};

/* Binding state: the file, and which of its tensors are bound (so that any
 * tensor left over can be named). */
struct binder {
    struct model *m;      /* the model being bound */
    uint8_t *used;        /* owned: one flag per tensor of m->gf */
};

/*
 * Finds tensor name and checks its shape is exactly [ne0], [ne0, ne1] or
 * [ne0, ne1, ne2] (a zero dimension ends the shape), and its type (kind).
 * Fills *w. An absent optional tensor leaves w->data NULL and returns 0; an
 * absent required one is MF_EFORMAT naming it.
 */
static int bind(struct binder *bd, const char *name, int64_t ne0, int64_t ne1, int64_t ne2,
                enum kind kind, int required, struct model_weight *w, struct mf_err *err)
{
    const struct gguf_file *gf = bd->m->gf;
    const struct gguf_tensor *t = gguf_find_tensor(gf, name);
    uint64_t want[3] = {(uint64_t)ne0, (uint64_t)(ne1 ? ne1 : 1), (uint64_t)(ne2 ? ne2 : 1)};
    uint32_t want_dims = ne2 ? 3 : ne1 ? 2 : 1;
    char got_s[96], want_s[64];

    memset(w, 0, sizeof *w);
    if (!t && !required)
        return 0;
    if (!t)
        return mf_err_set(err, MF_EFORMAT, "%s: tensor '%s' is missing", gguf_name(gf), name);
    if (t->ne[0] != want[0] || t->ne[1] != want[1] || t->ne[2] != want[2] || t->ne[3] != 1)
        return mf_err_set(err, MF_EFORMAT, "%s: tensor '%s' has shape %s, expected %s",
                          gguf_name(gf), name, shape_str(t->ne, t->n_dims, got_s, sizeof got_s),
                          shape_str(want, want_dims, want_s, sizeof want_s));
    if (kind == K_F32 && t->type != GGML_TYPE_F32)
        return mf_err_set(err, MF_EUNSUPPORTED, "%s: tensor '%s' has type %s; mfc needs F32 here",
                          gguf_name(gf), name, ggml_type_name(t->type));
    if (!model_type_supported((enum ggml_type)t->type))
        return mf_err_set(err, MF_EUNSUPPORTED,
                          "%s: tensor '%s' has weight type %s, which mfc does not run "
                          "(F32, F16, BF16, Q4_0, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K, MXFP4)",
                          gguf_name(gf), name, ggml_type_name(t->type));
    w->data = t->data;
    w->type = (enum ggml_type)t->type;
    w->ne0 = ne0;
    w->ne1 = (int64_t)want[1];
    w->ne2 = (int64_t)want[2];
    w->row_bytes = t->n_bytes / (uint64_t)(w->ne1 * w->ne2);
    w->name = t->name;
    bd->used[t - gguf_tensor_at(gf, 0)] = 1;
    return 0;
}

/* The view of rows [row0, row0 + n) of w (a fused projection's part). */
static struct model_weight rows_of(const struct model_weight *w, int64_t row0, int64_t n)
{
    struct model_weight v = *w;

    if (!w->data)
        return v;
    v.data = (const uint8_t *)w->data + (size_t)row0 * w->row_bytes;
    v.ne1 = n;
    v.row0 = w->row0 + row0;
    return v;
}

/* The view of elements [first, first + n) of an F32 vector (a fused bias's
 * part). */
static struct model_weight elems_of(const struct model_weight *w, int64_t first, int64_t n)
{
    struct model_weight v = *w;

    if (!w->data)
        return v;
    v.data = (const uint8_t *)w->data + (size_t)first * sizeof(float);
    v.ne0 = n;
    v.row_bytes = (uint64_t)n * sizeof(float);
    return v;
}

/* bind() of "blk.<il>.<stem>.<suffix>". */
static int bind_l(struct binder *bd, int32_t il, const char *stem, const char *suffix,
                  int64_t ne0, int64_t ne1, int64_t ne2, enum kind kind, int required,
                  struct model_weight *w, struct mf_err *err)
{
    char name[GGUF_MAX_NAME + 32];

    snprintf(name, sizeof name, "blk.%" PRId32 ".%s.%s", il, stem, suffix);
    return bind(bd, name, ne0, ne1, ne2, kind, required, w, err);
}

static const char *const layer_names[MODEL_W_PER_LAYER] = {
    "attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down",
};

/* Q, K, V of layer il: attn_qkv split into views of its rows when the file
 * fuses them (any family may, as llama.cpp's loader allows), else the three
 * tensors; and their optional biases. */
static int bind_qkv(struct binder *bd, int32_t il, struct mf_err *err)
{
    const struct model_hparams *hp = &bd->m->hp;
    struct model_layer *L = &bd->m->layers[il];
    int64_t q = (int64_t)hp->n_head * hp->head_dim, kv = (int64_t)hp->n_head_kv * hp->head_dim;
    int64_t rows[3] = {q, kv, kv}, first[3] = {0, q, q + kv};
    struct model_weight fw, fb;
    int rc;

    rc = bind_l(bd, il, "attn_qkv", "weight", hp->n_embd, q + 2 * kv, 0, K_MAT, 0, &fw, err);
    if (!rc && fw.data)
        rc = bind_l(bd, il, "attn_qkv", "bias", q + 2 * kv, 0, 0, K_F32, 0, &fb, err);
    for (int i = 0; !rc && i < 3; i++) {
        if (fw.data) {
            L->w[i] = rows_of(&fw, first[i], rows[i]);
            L->bias[i] = elems_of(&fb, first[i], rows[i]);
            continue;
        }
        rc = bind_l(bd, il, layer_names[i], "weight", hp->n_embd, rows[i], 0, K_MAT, 1, &L->w[i],
                    err);
        if (!rc)
            rc = bind_l(bd, il, layer_names[i], "bias", rows[i], 0, 0, K_F32, 0, &L->bias[i],
                        err);
    }
    return rc;
}

/* The router's and the experts' biases of layer il (gpt-oss): one row per
 * expert, as llama.cpp's add_id reads them. */
static int bind_expert_biases(struct binder *bd, int32_t il, struct mf_err *err)
{
    const struct model_hparams *hp = &bd->m->hp;
    struct model_layer *L = &bd->m->layers[il];
    int64_t e = hp->n_expert, fe = hp->n_ff_exp;
    int rc;

    rc = bind_l(bd, il, "ffn_gate_inp", "bias", e, 0, 0, K_F32, 1, &L->gate_inp_b, err);
    if (!rc)
        rc = bind_l(bd, il, "ffn_gate_exps", "bias", fe, e, 0, K_F32, 1, &L->exps_b[MODEL_EXP_GATE],
                    err);
    if (!rc)
        rc = bind_l(bd, il, "ffn_up_exps", "bias", fe, e, 0, K_F32, 1, &L->exps_b[MODEL_EXP_UP],
                    err);
    if (!rc)
        rc = bind_l(bd, il, "ffn_down_exps", "bias", hp->n_embd, e, 0, K_F32, 1,
                    &L->exps_b[MODEL_EXP_DOWN], err);
    return rc;
}

/* The FFN of layer il: routed experts, Phi-3's fused gate+up, or the three
 * projections. */
static int bind_ffn(struct binder *bd, int32_t il, struct mf_err *err)
{
    const struct model_hparams *hp = &bd->m->hp;
    struct model_layer *L = &bd->m->layers[il];
    int64_t e = hp->n_expert, fe = hp->n_ff_exp;
    int rc;

    if (e) {
        rc = bind_l(bd, il, "ffn_gate_inp", "weight", hp->n_embd, e, 0, K_MAT, 1, &L->gate_inp,
                    err);
        if (!rc)
            rc = bind_l(bd, il, "ffn_gate_exps", "weight", hp->n_embd, fe, e, K_MAT, 1,
                        &L->exps[MODEL_EXP_GATE], err);
        if (!rc)
            rc = bind_l(bd, il, "ffn_up_exps", "weight", hp->n_embd, fe, e, K_MAT, 1,
                        &L->exps[MODEL_EXP_UP], err);
        if (!rc)
            rc = bind_l(bd, il, "ffn_down_exps", "weight", fe, hp->n_embd, e, K_MAT, 1,
                        &L->exps[MODEL_EXP_DOWN], err);
        if (!rc && (hp->arch->flags & ARCH_EXPERT_BIASES))
            rc = bind_expert_biases(bd, il, err);
        return rc;
    }
    if (hp->arch->flags & ARCH_FUSED_UP) {
        struct model_weight up;
        rc = bind_l(bd, il, "ffn_up", "weight", hp->n_embd, 2 * (int64_t)hp->n_ff, 0, K_MAT, 1,
                    &up, err);
        L->w[MODEL_W_GATE] = rows_of(&up, 0, hp->n_ff);
        L->w[MODEL_W_UP] = rows_of(&up, hp->n_ff, hp->n_ff);
    } else {
        rc = bind_l(bd, il, "ffn_gate", "weight", hp->n_embd, hp->n_ff, 0, K_MAT, 1,
                    &L->w[MODEL_W_GATE], err);
        if (!rc)
            rc = bind_l(bd, il, "ffn_up", "weight", hp->n_embd, hp->n_ff, 0, K_MAT, 1,
                        &L->w[MODEL_W_UP], err);
    }
    if (!rc)
        rc = bind_l(bd, il, "ffn_down", "weight", hp->n_ff, hp->n_embd, 0, K_MAT, 1,
                    &L->w[MODEL_W_DOWN], err);
    return rc;
}

/* Binds every tensor of layer il. */
static int bind_layer(struct binder *bd, int32_t il, struct mf_err *err)
{
    const struct model_hparams *hp = &bd->m->hp;
    struct model_layer *L = &bd->m->layers[il];
    uint32_t f = hp->arch->flags;
    int64_t q = (int64_t)hp->n_head * hp->head_dim;
    int rc;

    rc = bind_l(bd, il, "attn_norm", "weight", hp->n_embd, 0, 0, K_F32, 1, &L->attn_norm, err);
    if (!rc)
        rc = bind_qkv(bd, il, err);
    if (!rc)
        rc = bind_l(bd, il, "attn_output", "weight", q, hp->n_embd, 0, K_MAT, 1,
                    &L->w[MODEL_W_O], err);
    if (!rc && (f & ARCH_O_BIAS))
        rc = bind_l(bd, il, "attn_output", "bias", hp->n_embd, 0, 0, K_F32, 1, &L->bias[MODEL_W_O],
                    err);
    if (!rc && (f & ARCH_SINKS))
        rc = bind_l(bd, il, "attn_sinks", "weight", hp->n_head, 0, 0, K_F32, 1, &L->attn_sinks,
                    err);
    if (!rc && (f & ARCH_QK_NORM))
        rc = bind_l(bd, il, "attn_q_norm", "weight", hp->head_dim, 0, 0, K_F32, 1, &L->q_norm,
                    err);
    if (!rc && (f & ARCH_QK_NORM))
        rc = bind_l(bd, il, "attn_k_norm", "weight", hp->head_dim, 0, 0, K_F32, 1, &L->k_norm,
                    err);
    if (!rc && (f & ARCH_POST_NORMS))
        rc = bind_l(bd, il, "post_attention_norm", "weight", hp->n_embd, 0, 0, K_F32, 1,
                    &L->attn_post_norm, err);
    if (!rc && (f & ARCH_POST_NORMS))
        rc = bind_l(bd, il, "post_ffw_norm", "weight", hp->n_embd, 0, 0, K_F32, 1,
                    &L->ffn_post_norm, err);
    if (!rc)
        rc = bind_l(bd, il, (f & ARCH_FFN_NORM_POST_ATTN) ? "post_attention_norm" : "ffn_norm",
                    "weight", hp->n_embd, 0, 0, K_F32, 1, &L->ffn_norm, err);
    if (!rc)
        rc = bind_ffn(bd, il, err);
    return rc;
}

/* Binds the tensors outside the layers; n_vocab comes from token_embd. */
static int bind_globals(struct binder *bd, struct mf_err *err)
{
    struct model *m = bd->m;
    const struct gguf_tensor *te = gguf_find_tensor(m->gf, "token_embd.weight");
    struct model_hparams *hp = &m->hp;
    int64_t half = hp->n_rot / 2;
    int rc;

    if (!te)
        return mf_err_set(err, MF_EFORMAT, "%s: tensor 'token_embd.weight' is missing",
                          gguf_name(m->gf));
    if (te->ne[1] == 0 || te->ne[1] > MODEL_MAX_DIM)
        return mf_err_set(err, MF_EFORMAT, "%s: token_embd.weight has %" PRIu64 " rows (vocabulary)",
                          gguf_name(m->gf), te->ne[1]);
    hp->n_vocab = (int32_t)te->ne[1];
    rc = bind(bd, "token_embd.weight", hp->n_embd, hp->n_vocab, 0, K_MAT, 1, &m->tok_embd, err);
    if (!rc)
        rc = bind(bd, "output_norm.weight", hp->n_embd, 0, 0, K_F32, 1, &m->out_norm, err);
    if (!rc && !(hp->arch->flags & ARCH_TIED_ALWAYS))
        rc = bind(bd, "output.weight", hp->n_embd, hp->n_vocab, 0, K_MAT, 0, &m->output, err);
    if (!rc && !m->output.data) {
        m->output = m->tok_embd; /* tied embeddings, as llama.cpp does */
        m->tied = 1;
    }
    if (!rc)
        rc = bind(bd, "rope_freqs.weight", half, 0, 0, K_F32, 0, &m->rope_freqs, err);
    if (!rc && (hp->arch->flags & ARCH_ROPE_FACTORS))
        rc = bind(bd, "rope_factors_long.weight", half, 0, 0, K_F32, 0, &m->rope_long, err);
    if (!rc && (hp->arch->flags & ARCH_ROPE_FACTORS))
        rc = bind(bd, "rope_factors_short.weight", half, 0, 0, K_F32, 0, &m->rope_short, err);
    if (!rc && !m->rope_freqs.data)
        model_set_ctx(m, hp->n_ctx_train);
    return rc;
}

/* 1 if an unbound tensor may be skipped: rotary tables old converters
 * wrote (llama.cpp skips them too), and a tied family's output.weight. */
static int skippable(const struct model *m, const char *name)
{
    const char *dot = strrchr(name, '.');
    const char *stem = dot && strncmp(name, "blk.", 4) == 0 ? strchr(name + 4, '.') : NULL;

    if (stem && (strcmp(stem, ".attn_rot_embd") == 0 || strcmp(stem, ".attn_rot_embd.weight") == 0))
        return 1;
    return (m->hp.arch->flags & ARCH_TIED_ALWAYS) && strcmp(name, "output.weight") == 0;
}

/* Any tensor the model does not bind is an error naming it (another
 * architecture's tensors, a wrong layer count): llama.cpp refuses them as
 * well, and running without them would silently compute the wrong function. */
static int check_no_extra(const struct binder *bd, struct mf_err *err)
{
    const struct model *m = bd->m;
    uint64_t n = gguf_n_tensors(m->gf);

    for (uint64_t i = 0; i < n; i++) {
        const struct gguf_tensor *t = gguf_tensor_at(m->gf, i);

        if (!bd->used[i] && !skippable(m, t->name))
            return mf_err_set(err, MF_EUNSUPPORTED,
                              "%s: tensor '%s' is not part of a %s model mfc can run",
                              gguf_name(m->gf), t->name, m->hp.arch->name);
    }
    return 0;
}

/* Binds every tensor of m and checks none is left over. */
static int bind_all(struct model *m, struct mf_err *err)
{
    struct binder bd = {m, calloc(gguf_n_tensors(m->gf) + 1, 1)};
    int rc;

    if (!bd.used)
        return mf_err_set(err, MF_ENOMEM, "%s: out of memory", gguf_name(m->gf));
    rc = bind_globals(&bd, err);
    for (int32_t il = 0; !rc && il < m->hp.n_layer; il++)
        rc = bind_layer(&bd, il, err);
    if (!rc)
        rc = check_no_extra(&bd, err);
    free(bd.used);
    return rc;
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
    rc = model_read_hparams(gf, m, err);
    if (rc)
        goto fail;
    m->layers = calloc((size_t)m->hp.n_layer, sizeof *m->layers);
    if (!m->layers) {
        rc = mf_err_set(err, MF_ENOMEM, "%s: out of memory for %" PRId32 " layers",
                        gguf_name(gf), m->hp.n_layer);
        goto fail;
    }
    rc = model_read_layer_kinds(gf, m, err);
    if (!rc)
        rc = bind_all(m, err);
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

void model_set_ctx(struct model *m, int32_t n_ctx)
{
    if ((!m->rope_long.data && !m->rope_short.data) ||
        gguf_find_tensor(m->gf, "rope_freqs.weight"))
        return; /* llama.cpp prefers a file's own rope_freqs too */
    m->rope_freqs = n_ctx > m->hp.n_ctx_orig && m->rope_long.data ? m->rope_long : m->rope_short;
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

int32_t model_window_all(const struct model *m)
{
    for (int32_t l = 0; l < m->hp.n_layer; l++)
        if (!m->layers[l].swa)
            return 0;
    return m->hp.n_swa;
}

uint64_t model_kv_block_bytes(const struct model *m, int elem_bytes)
{
    return (uint64_t)m->hp.n_layer * 2 * (uint64_t)m->hp.n_head_kv * KV_BLOCK_TOKENS *
           (uint64_t)m->hp.head_dim * (uint64_t)elem_bytes;
}
