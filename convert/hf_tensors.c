/*
 * hf_tensors.c: the tensor table of a Hugging Face llama checkpoint.
 *
 * Opens the shards (model.safetensors.index.json lists them; each is mapped
 * and validated whole by common/safetensors), maps every tensor name to its
 * GGUF name (gguf-py tensor_mapping.py for llama), checks dtype and shape
 * against config.json, picks output types (1-D and norms F32 as the
 * converter does; --quantize through llama.cpp's mix rules in common/quant),
 * and converts rows, permuting q/k rows exactly as LlamaModel.permute:
 *   w.reshape(n_head, 2, rows/n_head/2, cols).swapaxes(1, 2).reshape(rows, cols)
 * i.e. output row h*hd + 2j + t comes from source row h*hd + t*hd/2 + j.
 * Nothing is read from the data until hf_tensor_rows.
 */
#include "convert/hf_int.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "common/cpu.h"
#include "common/file.h"
#include "common/json.h"
#include "common/quant.h"

#define HF_INDEX_MAX (64u << 20)
#define HF_MAX_SHARDS 4096

void hf_shards_close(struct hf_shards *s)
{
    for (size_t i = 0; i < s->n; i++)
        st_close(s->f[i]);
    free(s->f);
    s->f = NULL;
    s->n = 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int open_one(const char *dir, const char *file, struct hf_shards *s, struct mf_err *err)
{
    char path[4096];
    struct st_file **nf = realloc(s->f, (s->n + 1) * sizeof *nf);
    if (!nf)
        return mf_err_set(err, MF_ENOMEM, "out of memory");
    s->f = nf;
    snprintf(path, sizeof path, "%s/%s", dir, file);
    int rc = st_open(path, &s->f[s->n], err);
    if (!rc)
        s->n++;
    return rc;
}

/* The shard names weight_map lists, sorted and unique (plain file names). */
static int index_files(const char *dir, const char *text, size_t len, char ***out, size_t *n,
                       struct mf_err *err)
{
    char what[4200];
    snprintf(what, sizeof what, "%s/model.safetensors.index.json", dir);
    json_t *root = mf_json_parse(text, len, what, err);
    if (!root)
        return err->code;
    json_t *map = json_object_get(root, "weight_map");
    int rc = json_is_object(map) ? 0 : mf_err_set(err, MF_EFORMAT, "%s: no weight_map", what);
    char **names = NULL;
    size_t k = 0;
    if (!rc && !(names = calloc(json_object_size(map) + 1, sizeof *names)))
        rc = mf_err_set(err, MF_ENOMEM, "out of memory");
    const char *key;
    json_t *v;
    json_object_foreach(map, key, v)
    {
        const char *f = json_string_value(v);
        if (rc)
            break;
        if (!f || !*f || strchr(f, '/') || !strcmp(f, ".") || !strcmp(f, "..")) {
            rc = mf_err_set(err, MF_EFORMAT,
                            "%s: weight_map[\"%.100s\"] must be a file name in the directory", what,
                            key);
            break;
        }
        if (!(names[k++] = strdup(f)))
            rc = mf_err_set(err, MF_ENOMEM, "out of memory");
    }
    if (!rc && k == 0)
        rc = mf_err_set(err, MF_EFORMAT, "%s: weight_map is empty", what);
    if (!rc) {
        qsort(names, k, sizeof *names, cmp_str);
        size_t u = 0;
        for (size_t i = 0; i < k; i++) {
            if (u && strcmp(names[u - 1], names[i]) == 0)
                free(names[i]);
            else
                names[u++] = names[i];
        }
        k = u;
        if (k > HF_MAX_SHARDS)
            rc = mf_err_set(err, MF_EFORMAT, "%s: %zu shards is too many", what, k);
    }
    json_decref(root);
    if (rc) {
        for (size_t i = 0; names && i < k; i++)
            free(names[i]);
        free(names);
        return rc;
    }
    *out = names;
    *n = k;
    return 0;
}

int hf_shards_open(const char *dir, struct hf_shards *s, struct mf_err *err)
{
    char path[4096];
    char *text = NULL;
    size_t len = 0;
    s->f = NULL;
    s->n = 0;
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    int rc = mf_file_read(path, HF_INDEX_MAX, &text, &len, err);
    if (rc == MF_ENOTFOUND) {
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        if (access(path, F_OK) != 0)
            return mf_err_set(err, MF_ENOTFOUND,
                              "%s: no model.safetensors or model.safetensors.index.json "
                              "(mfc converts safetensors weights)",
                              dir);
        rc = open_one(dir, "model.safetensors", s, err);
    } else if (!rc) {
        char **names = NULL;
        size_t n = 0;
        rc = index_files(dir, text, len, &names, &n, err);
        for (size_t i = 0; !rc && i < n; i++)
            rc = open_one(dir, names[i], s, err);
        for (size_t i = 0; i < n; i++)
            free(names[i]);
        free(names);
    }
    free(text);
    if (rc)
        hf_shards_close(s);
    return rc;
}

/* ---- names ---- */

enum dim { D_1, D_VOCAB, D_EMBD, D_FF, D_Q, D_KV, D_QKV, D_FF2, D_HD, D_NEXP, D_FFX, D_FFX2 };

#define FB(f) (1u << (f))
#define F_ALL 0xffu
#define F_QKNORM (FB(HF_FAM_QWEN3) | FB(HF_FAM_QWEN3MOE) | FB(HF_FAM_GEMMA3))
#define F_GEMMA (FB(HF_FAM_GEMMA2) | FB(HF_FAM_GEMMA3))
#define F_PHI FB(HF_FAM_PHI3)
#define F_NOPHI (F_ALL & ~F_PHI)

/* What a block tensor is for: when it is required and allowed. */
enum use { U_ALL, U_DENSE, U_MOE };

/* Per-block tensors: HF suffix after "model.layers.N.", GGUF suffix, shape
 * (rows, cols; cols D_1 for a vector), permutation heads (1 = n_head, 2 =
 * n_head_kv; llama only), the families that have it and those that must,
 * and whether it belongs to dense or routed layers. */
static const struct {
    const char *hf, *gguf;
    enum dim rows, cols;
    int perm;
    unsigned fam, req;
    enum use use;
} blk_map[] = {
    {"input_layernorm.weight", "attn_norm.weight", D_EMBD, D_1, 0, F_ALL, F_ALL, U_ALL},
    {"self_attn.q_proj.weight", "attn_q.weight", D_Q, D_EMBD, 1, F_NOPHI, F_NOPHI, U_ALL},
    {"self_attn.k_proj.weight", "attn_k.weight", D_KV, D_EMBD, 2, F_NOPHI, F_NOPHI, U_ALL},
    {"self_attn.v_proj.weight", "attn_v.weight", D_KV, D_EMBD, 0, F_NOPHI, F_NOPHI, U_ALL},
    {"self_attn.qkv_proj.weight", "attn_qkv.weight", D_QKV, D_EMBD, 0, F_PHI, F_PHI, U_ALL},
    {"self_attn.o_proj.weight", "attn_output.weight", D_EMBD, D_Q, 0, F_ALL, F_ALL, U_ALL},
    {"self_attn.q_proj.bias", "attn_q.bias", D_Q, D_1, 1, F_NOPHI, 0, U_ALL},
    {"self_attn.k_proj.bias", "attn_k.bias", D_KV, D_1, 2, F_NOPHI, 0, U_ALL},
    {"self_attn.v_proj.bias", "attn_v.bias", D_KV, D_1, 0, F_NOPHI, 0, U_ALL},
    {"self_attn.o_proj.bias", "attn_output.bias", D_EMBD, D_1, 0, F_ALL, 0, U_ALL},
    {"self_attn.q_norm.weight", "attn_q_norm.weight", D_HD, D_1, 0, F_QKNORM, F_QKNORM, U_ALL},
    {"self_attn.k_norm.weight", "attn_k_norm.weight", D_HD, D_1, 0, F_QKNORM, F_QKNORM, U_ALL},
    /* Gemma's post_attention_layernorm is its post-attention norm (gguf-py maps
     * it to post_attention_norm for gemma2/3): renamed in slot_name */
    {"post_attention_layernorm.weight", "ffn_norm.weight", D_EMBD, D_1, 0, F_ALL, F_ALL, U_ALL},
    {"pre_feedforward_layernorm.weight", "ffn_norm.weight", D_EMBD, D_1, 0, F_GEMMA, F_GEMMA,
     U_ALL},
    {"post_feedforward_layernorm.weight", "post_ffw_norm.weight", D_EMBD, D_1, 0, F_GEMMA, F_GEMMA,
     U_ALL},
    {"mlp.gate_proj.weight", "ffn_gate.weight", D_FF, D_EMBD, 0, F_NOPHI, F_NOPHI, U_DENSE},
    {"mlp.up_proj.weight", "ffn_up.weight", D_FF, D_EMBD, 0, F_NOPHI, F_NOPHI, U_DENSE},
    {"mlp.gate_up_proj.weight", "ffn_up.weight", D_FF2, D_EMBD, 0, F_PHI, F_PHI, U_DENSE},
    {"mlp.down_proj.weight", "ffn_down.weight", D_EMBD, D_FF, 0, F_ALL, F_ALL, U_DENSE},
    {"mlp.gate_proj.bias", "ffn_gate.bias", D_FF, D_1, 0, F_NOPHI, 0, U_DENSE},
    {"mlp.up_proj.bias", "ffn_up.bias", D_FF, D_1, 0, F_NOPHI, 0, U_DENSE},
    {"mlp.down_proj.bias", "ffn_down.bias", D_EMBD, D_1, 0, F_ALL, 0, U_DENSE},
    {"block_sparse_moe.gate.weight", "ffn_gate_inp.weight", D_NEXP, D_EMBD, 0, FB(HF_FAM_LLAMA), 0,
     U_MOE},
    {"mlp.gate.weight", "ffn_gate_inp.weight", D_NEXP, D_EMBD, 0,
     FB(HF_FAM_LLAMA) | FB(HF_FAM_QWEN3MOE), 0, U_MOE},
};
#define N_BLK (sizeof blk_map / sizeof blk_map[0])
#define K_ROUTER_A (N_BLK - 2)
#define K_ROUTER_B (N_BLK - 1)

/* Expert slots after a layer's N_BLK: the stacked tensors of transformers 5
 * (gate_up_proj [n_expert, 2 ff, embd], down_proj [n_expert, embd, ff]),
 * then gate, up, down of each expert. */
enum { X_GU, X_DOWN, X_EACH };
enum { E_GATE, E_UP, E_DOWN };

/* Model-level tensors, slots after the blocks. */
enum { G_EMBD, G_NORM, G_OUT, N_GLOBAL };
static const struct {
    const char *hf, *gguf;
    enum dim rows, cols;
} glob_map[N_GLOBAL] = {
    {"model.embed_tokens.weight", "token_embd.weight", D_VOCAB, D_EMBD},
    {"model.norm.weight", "output_norm.weight", D_EMBD, D_1},
    {"lm_head.weight", "output.weight", D_VOCAB, D_EMBD},
};

static int64_t dim_of(const struct hf_config *c, enum dim d)
{
    switch (d) {
    case D_VOCAB:
        return c->n_vocab;
    case D_EMBD:
        return c->n_embd;
    case D_FF:
        return c->n_ff;
    case D_Q:
        return c->n_head * c->head_dim;
    case D_KV:
        return c->n_head_kv * c->head_dim;
    case D_QKV:
        return (c->n_head + 2 * c->n_head_kv) * c->head_dim;
    case D_FF2:
        return 2 * c->n_ff;
    case D_HD:
        return c->head_dim;
    case D_NEXP:
        return c->n_expert;
    case D_FFX:
        return c->n_ff_exp;
    case D_FFX2:
        return 2 * c->n_ff_exp;
    default:
        return 1;
    }
}

static size_t slots_per_layer(const struct hf_config *c)
{
    return N_BLK + (c->n_expert ? X_EACH + 3 * (size_t)c->n_expert : 0);
}

/* A non-negative decimal index at *p (no leading zeros), below max; -1 if none. */
static int64_t index_at(const char **p, int64_t max)
{
    const char *q = *p;
    int64_t v = 0;
    if (*q < '0' || *q > '9' || (*q == '0' && q[1] >= '0' && q[1] <= '9'))
        return -1;
    while (*q >= '0' && *q <= '9') {
        v = v * 10 + (*q++ - '0');
        if (v >= max)
            return -2;
    }
    *p = q;
    return v;
}

/* The expert slot (relative to the layer's N_BLK) of p, or -1. */
static int64_t expert_slot(const struct hf_config *c, const char *p)
{
    if (!c->n_expert)
        return -1;
    if (!strcmp(p, "mlp.experts.gate_up_proj") || !strcmp(p, "mlp.experts.gate_up_proj.weight"))
        return X_GU;
    if (!strcmp(p, "mlp.experts.down_proj") || !strcmp(p, "mlp.experts.down_proj.weight"))
        return X_DOWN;
    static const char *const pfx[] = {"block_sparse_moe.experts.", "mlp.experts."};
    static const char *const parts[2][3] = {
        {"w1.weight", "w3.weight", "w2.weight"},
        {"gate_proj.weight", "up_proj.weight", "down_proj.weight"}};
    for (int k = 0; k < 2; k++) {
        size_t n = strlen(pfx[k]);
        if (strncmp(p, pfx[k], n) != 0)
            continue;
        const char *q = p + n;
        int64_t e = index_at(&q, c->n_expert);
        if (e < 0 || *q++ != '.')
            return -1;
        for (int w = 0; w < 3; w++)
            if (!strcmp(q, parts[k][w]))
                return X_EACH + e * 3 + w;
    }
    return -1;
}

/* Whether block tensor k belongs to c's family and layer kind. */
static int blk_allowed(const struct hf_config *c, size_t k)
{
    if (!(blk_map[k].fam & FB(c->family)))
        return 0;
    return blk_map[k].use == U_ALL || (blk_map[k].use == U_MOE) == (c->n_expert > 0);
}

static int blk_required(const struct hf_config *c, size_t k)
{
    return blk_allowed(c, k) && (blk_map[k].req & FB(c->family));
}

/* Names the converter's filter drops from a multimodal checkpoint. */
static int is_other_tower(const char *name)
{
    return strstr(name, "vision_") || strstr(name, "vision.") || strstr(name, "audio_") ||
           strstr(name, "projector.") || strncmp(name, "mlp", 3) == 0;
}

/* The slot of an HF name: G_* for model tensors, N_GLOBAL + layer * per + k
 * for block tensors; -1 for names to skip; -2 for unknown names; -3 for a
 * layer beyond n_layer. */
static int64_t slot_of(const struct hf_config *c, const char *name)
{
    char buf[256];
    if (c->multimodal) { /* language_model.model.x or model.language_model.x -> model.x */
        if (is_other_tower(name))
            return -1;
        const char *lm = strstr(name, "language_model.");
        if (lm && strlen(name) < sizeof buf) {
            size_t pre = (size_t)(lm - name);
            memcpy(buf, name, pre);
            snprintf(buf + pre, sizeof buf - pre, "%s", lm + strlen("language_model."));
            name = buf;
        }
    }
    for (int g = 0; g < N_GLOBAL; g++)
        if (strcmp(name, glob_map[g].hf) == 0)
            return g == G_OUT && (c->family == HF_FAM_GEMMA2 || c->family == HF_FAM_GEMMA3)
                       ? -1 /* Gemma's converter skips lm_head (tied) */
                       : g;
    size_t n = strlen(name);
    static const char inv[] = ".rotary_emb.inv_freq";
    if (n >= sizeof inv - 1 && strcmp(name + n - (sizeof inv - 1), inv) == 0)
        return -1; /* the converter skips them too */
    static const char pfx[] = "model.layers.";
    if (strncmp(name, pfx, sizeof pfx - 1) != 0)
        return -2;
    const char *p = name + sizeof pfx - 1;
    int64_t layer = index_at(&p, c->n_layer);
    if (layer == -2)
        return -3;
    if (layer < 0 || *p++ != '.')
        return -2;
    size_t per = slots_per_layer(c);
    for (size_t k = 0; k < N_BLK; k++)
        if (strcmp(p, blk_map[k].hf) == 0)
            return blk_allowed(c, k) ? N_GLOBAL + layer * (int64_t)per + (int64_t)k : -2;
    int64_t x = expert_slot(c, p);
    return x < 0 ? -2 : N_GLOBAL + layer * (int64_t)per + (int64_t)N_BLK + x;
}

struct found {
    const struct st_file *f;
    const struct st_tensor *t;
};

static int shape_error(const struct st_file *f, const struct st_tensor *t, const int64_t *want,
                       int nd, struct mf_err *err)
{
    char got[128] = "", exp[128] = "";
    size_t at = 0, ae = 0;
    for (int32_t i = 0; i < t->n_dims && at < sizeof got - 24; i++)
        at += (size_t)snprintf(got + at, sizeof got - at, "%s%lld", i ? ", " : "",
                               (long long)t->shape[i]);
    for (int i = 0; i < nd && ae < sizeof exp - 24; i++)
        ae += (size_t)snprintf(exp + ae, sizeof exp - ae, "%s%lld", i ? ", " : "",
                               (long long)want[i]);
    return mf_err_set(err, MF_EFORMAT, "%s: tensor %s has shape [%s], but config.json implies [%s]",
                      st_name(f), t->name, got, exp);
}

/* t's shape must be want[0..nd) (torch order). */
static int check_dims(const struct st_file *f, const struct st_tensor *t, const int64_t *want,
                      int nd, struct mf_err *err)
{
    int ok = t->n_dims == nd;
    for (int i = 0; ok && i < nd; i++)
        ok = t->shape[i] == want[i];
    return ok ? 0 : shape_error(f, t, want, nd, err);
}

static int check_shape(const struct hf_config *c, const struct st_file *f,
                       const struct st_tensor *t, enum dim rows, enum dim cols, struct mf_err *err)
{
    int64_t want[2] = {dim_of(c, rows), dim_of(c, cols)};
    if (rows == D_VOCAB && c->n_vocab_src)
        want[0] = c->n_vocab_src; /* Gemma 3: rows past the tokenizer's are dropped */
    return check_dims(f, t, want, cols == D_1 ? 1 : 2, err);
}

static void fill(struct hf_tensor *o, const char *name, const struct found *fd, int64_t rows,
                 int64_t cols, int64_t perm)
{
    memset(o, 0, sizeof *o);
    snprintf(o->name, sizeof o->name, "%s", name);
    o->f = fd->f;
    o->src = fd->t;
    o->perm_heads = perm;
    o->n_dims = cols > 1 || (fd->t && fd->t->n_dims == 2) ? 2 : 1;
    o->ne[0] = (uint64_t)(o->n_dims == 2 ? cols : rows);
    o->ne[1] = (uint64_t)(o->n_dims == 2 ? rows : 1);
    o->ne[2] = 1;
}

static int is_gemma(const struct hf_config *c)
{
    return c->family == HF_FAM_GEMMA2 || c->family == HF_FAM_GEMMA3;
}

/* Gemma's RMSNorm scales by 1 + weight: the converter stores weight + 1,
 * computed in the source's precision (BF16 is widened to F32 first). */
static void norm_shift(const struct hf_config *c, const char *hf_name, struct hf_tensor *t)
{
    size_t n = strlen(hf_name);
    if (!is_gemma(c) || n < 11 || strcmp(hf_name + n - 11, "norm.weight") != 0 || !t->src)
        return;
    t->add = 1.0f;
    t->add_f16 = t->src->dtype == ST_F16;
}

/* The three *_exps tensors of layer l from its expert slots x. */
static int plan_experts(const struct hf_config *c, int64_t l, const struct found *x,
                        struct hf_tensor *t, size_t *n, struct mf_err *err)
{
    int64_t ne_ = c->n_expert, ff = c->n_ff_exp, embd = c->n_embd;
    int stacked = x[X_GU].t || x[X_DOWN].t;
    static const char *const gguf[3] = {"ffn_gate_exps.weight", "ffn_down_exps.weight",
                                        "ffn_up_exps.weight"};
    static const int which[3] = {E_GATE, E_DOWN, E_UP};
    if (stacked) {
        for (int k = 0; k < 2; k++)
            if (!x[k].t)
                return mf_err_set(err, MF_EFORMAT,
                                  "the checkpoint has no model.layers.%lld.mlp.experts.%s tensor",
                                  (long long)l, k == X_GU ? "gate_up_proj" : "down_proj");
        for (int64_t e = 0; e < ne_ * 3; e++)
            if (x[X_EACH + e].t)
                return mf_err_set(err, MF_EFORMAT,
                                  "%s: tensor %s and the stacked experts of layer %lld are both "
                                  "present",
                                  st_name(x[X_EACH + e].f), x[X_EACH + e].t->name, (long long)l);
        int64_t gu[3] = {ne_, 2 * ff, embd}, dn[3] = {ne_, embd, ff};
        int rc = check_dims(x[X_GU].f, x[X_GU].t, gu, 3, err);
        if (!rc)
            rc = check_dims(x[X_DOWN].f, x[X_DOWN].t, dn, 3, err);
        if (rc)
            return rc;
    }
    for (int k = 0; k < 3; k++) {
        int w = which[k];
        int64_t rows = w == E_DOWN ? embd : ff, cols = w == E_DOWN ? ff : embd;
        struct hf_tensor *o = &t[(*n)++];
        char name[64];
        snprintf(name, sizeof name, "blk.%lld.%s", (long long)l, gguf[k]);
        const struct found *src = &x[w == E_DOWN ? X_DOWN : X_GU];
        if (!stacked)
            src = &x[X_EACH + w];
        fill(o, name, src, rows, cols, 0);
        o->n_dims = 3;
        o->ne[0] = (uint64_t)cols;
        o->ne[1] = (uint64_t)rows;
        o->ne[2] = (uint64_t)ne_;
        o->blk_rows = (uint64_t)rows;
        if (stacked) {
            o->blk_stride = w == E_DOWN ? (uint64_t)embd : 2 * (uint64_t)ff;
            o->blk_off = w == E_UP ? (uint64_t)ff : 0;
            continue;
        }
        o->xs = calloc((size_t)ne_, sizeof *o->xs);
        o->xf = calloc((size_t)ne_, sizeof *o->xf);
        if (!o->xs || !o->xf)
            return mf_err_set(err, MF_ENOMEM, "out of memory");
        for (int64_t e = 0; e < ne_; e++) {
            const struct found *fe = &x[X_EACH + e * 3 + w];
            static const char *const part[3] = {"gate_proj (w1)", "up_proj (w3)", "down_proj (w2)"};
            if (!fe->t)
                return mf_err_set(err, MF_EFORMAT,
                                  "the checkpoint has no %s weight of expert %lld in layer %lld "
                                  "(config.json has %lld experts)",
                                  part[w], (long long)e, (long long)l, (long long)ne_);
            int64_t want[2] = {rows, cols};
            int rc = check_dims(fe->f, fe->t, want, 2, err);
            if (!rc && fe->t->dtype != x[X_EACH + w].t->dtype)
                rc = mf_err_set(err, MF_EUNSUPPORTED,
                                "%s: tensor %s has dtype %s, unlike expert 0's", st_name(fe->f),
                                fe->t->name, st_dtype_name(fe->t->dtype));
            if (rc)
                return rc;
            o->xs[e] = fe->t;
            o->xf[e] = fe->f;
        }
        o->f = o->xf[0];
        o->src = o->xs[0];
    }
    return 0;
}

void hf_tensors_free(struct hf_tensor *t, size_t n)
{
    for (size_t i = 0; t && i < n; i++) {
        free(t[i].xs);
        free(t[i].xf);
    }
    free(t);
}

int hf_tensors_plan(const struct hf_config *c, const struct hf_shards *s, const float *rope,
                    struct hf_tensor **out, size_t *n_out, struct mf_err *err)
{
    size_t per = slots_per_layer(c);
    size_t n_slots = N_GLOBAL + (size_t)c->n_layer * per;
    /* at most: 3 generated, the globals, every block tensor and 3 expert tensors a layer */
    size_t cap = 3 + N_GLOBAL + (size_t)c->n_layer * (N_BLK + 3);
    struct found *fd = calloc(n_slots, sizeof *fd);
    struct hf_tensor *t = calloc(cap, sizeof *t);
    int rc = fd && t ? 0 : mf_err_set(err, MF_ENOMEM, "out of memory");
    for (size_t i = 0; !rc && i < s->n; i++) {
        for (size_t k = 0; !rc && k < st_count(s->f[i]); k++) {
            const struct st_tensor *x = st_at(s->f[i], k);
            int64_t slot = slot_of(c, x->name);
            if (slot == -1)
                continue;
            if (slot == -3)
                rc = mf_err_set(err, MF_EFORMAT,
                                "%s: tensor %s belongs to a layer beyond num_hidden_layers %lld "
                                "in config.json",
                                st_name(s->f[i]), x->name, (long long)c->n_layer);
            else if (slot < 0)
                rc = mf_err_set(err, MF_EUNSUPPORTED,
                                "%s: tensor %s is not part of a %s that mfc knows how to convert",
                                st_name(s->f[i]), x->name, c->arch);
            else if (fd[slot].t)
                rc = mf_err_set(err, MF_EFORMAT, "%s: tensor %s is also in %s", st_name(s->f[i]),
                                x->name, st_name(fd[slot].f));
            else if (x->dtype != ST_F32 && x->dtype != ST_F16 && x->dtype != ST_BF16)
                rc = mf_err_set(err, MF_EUNSUPPORTED,
                                "%s: tensor %s has dtype %s; mfc converts F32, F16 and BF16",
                                st_name(s->f[i]), x->name, st_dtype_name(x->dtype));
            else
                fd[slot] = (struct found){s->f[i], x};
        }
    }
    size_t n = 0;
    struct found none = {0};
    if (!rc && c->rope == HF_ROPE_LLAMA3) {
        fill(&t[n], "rope_freqs.weight", &none, c->head_dim / 2, 1, 0);
        t[n++].gen = rope;
    }
    if (!rc && c->n_rope_factors) { /* Phi-3's generate_extra_tensors: long, then short */
        fill(&t[n], "rope_factors_long.weight", &none, c->n_rope_factors, 1, 0);
        t[n++].gen = c->rope_long;
        fill(&t[n], "rope_factors_short.weight", &none, c->n_rope_factors, 1, 0);
        t[n++].gen = c->rope_short;
    }
    /* model tensors and blocks, in GGUF order */
    static const int order[] = {G_EMBD, -1, G_NORM, G_OUT};
    for (size_t o = 0; !rc && o < sizeof order / sizeof order[0]; o++) {
        int g = order[o];
        if (g == G_EMBD || g == G_NORM) {
            if (!fd[g].t) {
                rc = mf_err_set(err, MF_EFORMAT, "the checkpoint has no %s tensor", glob_map[g].hf);
                break;
            }
        }
        if (g == G_OUT && (c->tied || !fd[g].t))
            continue; /* tied: token_embd serves as the output (a stored copy is dropped) */
        if (g >= 0) {
            rc = check_shape(c, fd[g].f, fd[g].t, glob_map[g].rows, glob_map[g].cols, err);
            fill(&t[n], glob_map[g].gguf, &fd[g], dim_of(c, glob_map[g].rows),
                 dim_of(c, glob_map[g].cols), 0);
            norm_shift(c, glob_map[g].hf, &t[n++]);
            continue;
        }
        for (int64_t l = 0; !rc && l < c->n_layer; l++) {
            const struct found *lx = &fd[N_GLOBAL + (size_t)l * per];
            int router = 0;
            for (size_t k = 0; !rc && k < N_BLK; k++) {
                const struct found *x = &lx[k];
                char name[64];
                if (!x->t) {
                    if (blk_required(c, k))
                        rc = mf_err_set(err, MF_EFORMAT,
                                        "the checkpoint has no model.layers.%lld.%s tensor "
                                        "(config.json has %lld layers)",
                                        (long long)l, blk_map[k].hf, (long long)c->n_layer);
                    continue;
                }
                if (k == K_ROUTER_A || k == K_ROUTER_B) {
                    if (router++)
                        rc = mf_err_set(err, MF_EFORMAT, "%s: layer %lld has two expert routers",
                                        st_name(x->f), (long long)l);
                }
                if (!rc)
                    rc = check_shape(c, x->f, x->t, blk_map[k].rows, blk_map[k].cols, err);
                const char *gg = blk_map[k].gguf;
                if (is_gemma(c) && !strcmp(blk_map[k].hf, "post_attention_layernorm.weight"))
                    gg = "post_attention_norm.weight";
                snprintf(name, sizeof name, "blk.%lld.%s", (long long)l, gg);
                int64_t perm = c->family != HF_FAM_LLAMA ? 0
                               : blk_map[k].perm == 1    ? c->n_head
                               : blk_map[k].perm == 2    ? c->n_head_kv
                                                         : 0;
                fill(&t[n], name, x, dim_of(c, blk_map[k].rows), dim_of(c, blk_map[k].cols), perm);
                norm_shift(c, blk_map[k].hf, &t[n++]);
            }
            if (!rc && c->n_expert && !router)
                rc = mf_err_set(err, MF_EFORMAT,
                                "the checkpoint has no expert router of layer %lld "
                                "(model.layers.%lld.mlp.gate.weight)",
                                (long long)l, (long long)l);
            if (!rc && c->n_expert)
                rc = plan_experts(c, l, lx + N_BLK, t, &n, err);
        }
    }
    free(fd);
    if (rc) {
        hf_tensors_free(t, cap);
        return rc;
    }
    *out = t;
    *n_out = n;
    return 0;
}

/* ---- types ---- */

static enum ggml_type float_type(enum hf_outtype o, enum st_dtype src)
{
    switch (o) {
    case HF_OUT_F32:
        return GGML_TYPE_F32;
    case HF_OUT_F16:
        return GGML_TYPE_F16;
    case HF_OUT_BF16:
        return GGML_TYPE_BF16;
    default:
        return src == ST_BF16 ? GGML_TYPE_BF16 : GGML_TYPE_F16;
    }
}

int hf_outtype_parse(const char *s, enum hf_outtype *out)
{
    static const char *const names[] = {"auto", "f32", "f16", "bf16"};
    for (int i = 0; i < 4; i++)
        if (strcasecmp(s, names[i]) == 0) {
            *out = (enum hf_outtype)i;
            return 0;
        }
    return -1;
}

static int is_norm(const char *name)
{
    size_t n = strlen(name);
    return n >= 12 && strcmp(name + n - 12, "_norm.weight") == 0;
}

int hf_tensors_types(const struct hf_config *c, const struct hf_convert_opts *o,
                     struct hf_tensor *t, size_t n, enum quant_ftype *ft, struct mf_err *err)
{
    int has_output = 0;
    enum st_dtype first = ST_F16;
    for (size_t i = 0; i < n; i++) {
        has_output |= strcmp(t[i].name, "output.weight") == 0;
        if (t[i].src && strcmp(t[i].name, "token_embd.weight") == 0)
            first = t[i].src->dtype;
    }
    enum ggml_type ftt = float_type(o->outtype, first);
    if (o->quantize) {
        if (!quant_ftype_can_build(o->ftype))
            return mf_err_set(err, MF_EUNSUPPORTED, "mfc cannot quantize to %s",
                              quant_ftype_name(o->ftype) ? quant_ftype_name(o->ftype)
                                                         : "that type");
        *ft = o->ftype;
    } else {
        *ft = ftt == GGML_TYPE_F32    ? QUANT_FTYPE_ALL_F32
              : ftt == GGML_TYPE_BF16 ? QUANT_FTYPE_MOSTLY_BF16
                                      : QUANT_FTYPE_MOSTLY_F16;
    }
    struct quant_model_info mi = {.arch = c->gguf_arch ? c->gguf_arch : "llama",
                                  .n_layer = (int32_t)c->n_layer,
                                  .n_expert = (int32_t)c->n_expert,
                                  .n_gqa = (int32_t)(c->n_head / c->n_head_kv),
                                  .has_output = has_output,
                                  .is_70b = c->n_layer == 80 && c->n_head != c->n_head_kv};
    for (size_t i = 0; i < n; i++) {
        enum ggml_type base = t[i].src ? float_type(o->outtype, t[i].src->dtype) : GGML_TYPE_F32;
        if (!o->quantize && o->outtype == HF_OUT_AUTO)
            base = ftt; /* one type for the file, as the converter's auto mode picks it */
        if (t[i].n_dims == 1 || is_norm(t[i].name) || !t[i].src ||
            strstr(t[i].name, ".ffn_gate_inp.")) { /* the converter keeps routers F32 */
            t[i].type = GGML_TYPE_F32;
        } else if (o->quantize) {
            struct quant_tensor_info ti = {
                .name = t[i].name,
                .type = base,
                .n_dims = (int)t[i].n_dims,
                .ne = {(int64_t)t[i].ne[0], (int64_t)t[i].ne[1], (int64_t)t[i].ne[2], 1}};
            int rc = quant_ftype_tensor_type(o->ftype, &mi, &ti, &t[i].type, err);
            if (rc)
                return mf_err_prefix(err, "%s", t[i].name);
        } else {
            t[i].type = base;
        }
        uint64_t row;
        if (ggml_type_row_size(t[i].type, t[i].ne[0], &row) != 0)
            return mf_err_set(err, MF_EINVAL, "%s: rows of %llu do not fit type %s", t[i].name,
                              (unsigned long long)t[i].ne[0], ggml_type_name(t[i].type));
        t[i].bytes = row * hf_tensor_nrows(&t[i]);
    }
    return 0;
}

/* ---- rows ---- */

uint64_t hf_tensor_nrows(const struct hf_tensor *t)
{
    return t->n_dims == 1 ? 1 : t->ne[1] * (t->n_dims == 3 ? t->ne[2] : 1);
}

uint64_t hf_tensor_src_row(const struct hf_tensor *t, uint64_t r)
{
    if (t->blk_rows) {
        uint64_t b = r / t->blk_rows, j = r % t->blk_rows;
        return (t->xs ? 0 : b * t->blk_stride) + t->blk_off + j;
    }
    if (t->perm_heads <= 0)
        return r;
    uint64_t rows = t->n_dims == 2 ? t->ne[1] : t->ne[0];
    uint64_t hd = rows / (uint64_t)t->perm_heads, h = r / hd, rem = r % hd;
    return h * hd + (rem % 2) * (hd / 2) + rem / 2;
}

/* The source (shard and tensor) output row r reads. */
static void row_src(const struct hf_tensor *t, uint64_t r, const struct st_file **f,
                    const struct st_tensor **s)
{
    if (t->xs) {
        *f = t->xf[r / t->blk_rows];
        *s = t->xs[r / t->blk_rows];
    } else {
        *f = t->f;
        *s = t->src;
    }
}

static enum ggml_type st_ggml(enum st_dtype d)
{
    return d == ST_F32 ? GGML_TYPE_F32 : d == ST_F16 ? GGML_TYPE_F16 : GGML_TYPE_BF16;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
/* F32 -> F16 with F16C: round to nearest even, as quant_f32_to_f16 (and
 * ggml, which uses the same instruction when it can) do for every finite
 * value and infinity; NaN stays NaN. */
__attribute__((target("avx,f16c"))) static void f16_row_f16c(const float *x, uint8_t *y, uint64_t n)
{
    uint64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(void *)(y + 2 * i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) {
        uint16_t h = quant_f32_to_f16(x[i]);
        memcpy(y + 2 * i, &h, 2);
    }
    /* NaN payloads: ggml's scalar rule (quiet NaN 0x7e00, sign kept) */
    for (i = 0; i < n; i++)
        if (x[i] != x[i]) {
            uint16_t h = quant_f32_to_f16(x[i]);
            memcpy(y + 2 * i, &h, 2);
        }
}
static int have_f16c(void)
{
    struct mf_cpu_features f; /* common/cpu: clang 14's builtin knows no "f16c" */
    mf_cpu_detect(&f);
    return f.f16c;
}
#else
static void f16_row_f16c(const float *x, uint8_t *y, uint64_t n)
{
    (void)x, (void)y, (void)n;
}
static int have_f16c(void)
{
    return 0;
}
#endif

const void *hf_tensor_direct(const struct hf_tensor *t, uint64_t r0)
{
    if (!t->src || t->n_dims != 2 || t->perm_heads > 0 || t->blk_rows ||
        st_ggml(t->src->dtype) != t->type)
        return NULL;
    return (const uint8_t *)st_data(t->f, t->src) + r0 * t->ne[0] * st_dtype_size(t->src->dtype);
}

/* Encodes one row of floats as t->type. */
static int encode_row(const struct hf_tensor *t, const float *x, uint8_t *out, int f16c,
                      struct mf_err *err)
{
    if (t->type == GGML_TYPE_F16 && f16c) {
        f16_row_f16c(x, out, t->ne[0]);
        return 0;
    }
    return quant_quantize_row(t->type, x, out, (int64_t)t->ne[0], err);
}

int hf_tensor_rows(const struct hf_tensor *t, uint64_t r0, uint64_t nr, void *dst, float *tmp,
                   struct mf_err *err)
{
    uint64_t row_bytes;
    if (ggml_type_row_size(t->type, t->ne[0], &row_bytes) != 0)
        return mf_err_set(err, MF_EINVAL, "%s: bad row size", t->name);
    uint8_t *out = dst;
    if (t->gen) /* a generated vector: one row */
        return quant_quantize_row(t->type, t->gen, out, (int64_t)t->ne[0], err);
    /* a 1-D tensor is one row of ne[0]; permuting it moves single elements */
    if (t->n_dims == 1) {
        for (uint64_t i = 0; i < t->ne[0]; i++) {
            int rc = st_read_f32(t->f, t->src, hf_tensor_src_row(t, i), 1, &tmp[i], err);
            if (rc)
                return rc;
            if (t->add != 0.0f) /* in the source's precision (F16 stays F16 in torch) */
                tmp[i] = t->add_f16 ? quant_f16_to_f32(quant_f32_to_f16(tmp[i] + t->add))
                                    : tmp[i] + t->add;
        }
        return quant_quantize_row(t->type, tmp, out, (int64_t)t->ne[0], err);
    }
    enum ggml_type in = st_ggml(t->src->dtype);
    int same = in == t->type, f16c = t->type == GGML_TYPE_F16 && have_f16c();
    size_t esz = st_dtype_size(t->src->dtype);
    for (uint64_t r = r0; r < r0 + nr; r++, out += row_bytes) {
        const struct st_file *sf;
        const struct st_tensor *st;
        row_src(t, r, &sf, &st);
        const uint8_t *row =
            (const uint8_t *)st_data(sf, st) + hf_tensor_src_row(t, r) * t->ne[0] * esz;
        if (same) {
            memcpy(out, row, row_bytes);
            continue;
        }
        /* the SIMD dequantizers of common/quant (F16/BF16 -> F32 is exact) */
        int rc = quant_dequantize_row(in, row, tmp, (int64_t)t->ne[0], err);
        if (!rc)
            rc = encode_row(t, tmp, out, f16c, err);
        if (rc)
            return mf_err_prefix(err, "%s", t->name);
    }
    return 0;
}
