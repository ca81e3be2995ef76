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

enum dim { D_1, D_VOCAB, D_EMBD, D_FF, D_Q, D_KV };

/* Per-block tensors: HF suffix after "model.layers.N.", GGUF suffix, shape
 * (rows, cols; cols D_1 for a vector), permutation heads (1 = n_head, 2 =
 * n_head_kv), required. */
static const struct {
    const char *hf, *gguf;
    enum dim rows, cols;
    int perm, required;
} blk_map[] = {
    {"input_layernorm.weight", "attn_norm.weight", D_EMBD, D_1, 0, 1},
    {"self_attn.q_proj.weight", "attn_q.weight", D_Q, D_EMBD, 1, 1},
    {"self_attn.k_proj.weight", "attn_k.weight", D_KV, D_EMBD, 2, 1},
    {"self_attn.v_proj.weight", "attn_v.weight", D_KV, D_EMBD, 0, 1},
    {"self_attn.o_proj.weight", "attn_output.weight", D_EMBD, D_Q, 0, 1},
    {"self_attn.q_proj.bias", "attn_q.bias", D_Q, D_1, 1, 0},
    {"self_attn.k_proj.bias", "attn_k.bias", D_KV, D_1, 2, 0},
    {"self_attn.v_proj.bias", "attn_v.bias", D_KV, D_1, 0, 0},
    {"self_attn.o_proj.bias", "attn_output.bias", D_EMBD, D_1, 0, 0},
    {"post_attention_layernorm.weight", "ffn_norm.weight", D_EMBD, D_1, 0, 1},
    {"mlp.gate_proj.weight", "ffn_gate.weight", D_FF, D_EMBD, 0, 1},
    {"mlp.up_proj.weight", "ffn_up.weight", D_FF, D_EMBD, 0, 1},
    {"mlp.down_proj.weight", "ffn_down.weight", D_EMBD, D_FF, 0, 1},
    {"mlp.gate_proj.bias", "ffn_gate.bias", D_FF, D_1, 0, 0},
    {"mlp.up_proj.bias", "ffn_up.bias", D_FF, D_1, 0, 0},
    {"mlp.down_proj.bias", "ffn_down.bias", D_EMBD, D_1, 0, 0},
};
#define N_BLK (sizeof blk_map / sizeof blk_map[0])

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
    default:
        return 1;
    }
}

/* The slot of an HF name: G_* for model tensors, N_GLOBAL + layer*N_BLK + k
 * for block tensors; -1 for names to skip; -2 for unknown names. */
static int64_t slot_of(const char *name, int64_t n_layer)
{
    for (int g = 0; g < N_GLOBAL; g++)
        if (strcmp(name, glob_map[g].hf) == 0)
            return g;
    size_t n = strlen(name);
    static const char inv[] = ".rotary_emb.inv_freq";
    if (n >= sizeof inv - 1 && strcmp(name + n - (sizeof inv - 1), inv) == 0)
        return -1; /* the converter skips them too */
    static const char pfx[] = "model.layers.";
    if (strncmp(name, pfx, sizeof pfx - 1) != 0)
        return -2;
    const char *p = name + sizeof pfx - 1;
    int64_t layer = 0;
    if (*p < '0' || *p > '9' || (*p == '0' && p[1] != '.'))
        return -2;
    while (*p >= '0' && *p <= '9') {
        layer = layer * 10 + (*p++ - '0');
        if (layer >= n_layer)
            return -3; /* a layer config.json does not have */
    }
    if (*p++ != '.')
        return -2;
    for (size_t k = 0; k < N_BLK; k++)
        if (strcmp(p, blk_map[k].hf) == 0)
            return N_GLOBAL + layer * (int64_t)N_BLK + (int64_t)k;
    return -2;
}

struct found {
    const struct st_file *f;
    const struct st_tensor *t;
};

static int check_shape(const struct hf_config *c, const struct st_file *f,
                       const struct st_tensor *t, enum dim rows, enum dim cols, struct mf_err *err)
{
    int64_t r = dim_of(c, rows), k = dim_of(c, cols);
    int ok = cols == D_1 ? t->n_dims == 1 && t->shape[0] == r
                         : t->n_dims == 2 && t->shape[0] == r && t->shape[1] == k;
    if (ok)
        return 0;
    char got[128] = "";
    size_t at = 0;
    for (int32_t i = 0; i < t->n_dims && at < sizeof got - 24; i++)
        at += (size_t)snprintf(got + at, sizeof got - at, "%s%lld", i ? ", " : "",
                               (long long)t->shape[i]);
    if (cols == D_1)
        return mf_err_set(err, MF_EFORMAT,
                          "%s: tensor %s has shape [%s], but config.json implies [%lld]",
                          st_name(f), t->name, got, (long long)r);
    return mf_err_set(err, MF_EFORMAT,
                      "%s: tensor %s has shape [%s], but config.json implies [%lld, %lld]",
                      st_name(f), t->name, got, (long long)r, (long long)k);
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
}

int hf_tensors_plan(const struct hf_config *c, const struct hf_shards *s, const float *rope,
                    struct hf_tensor **out, size_t *n_out, struct mf_err *err)
{
    size_t n_slots = N_GLOBAL + (size_t)c->n_layer * N_BLK;
    struct found *fd = calloc(n_slots, sizeof *fd);
    struct hf_tensor *t = calloc(n_slots + 1, sizeof *t);
    int rc = fd && t ? 0 : mf_err_set(err, MF_ENOMEM, "out of memory");
    for (size_t i = 0; !rc && i < s->n; i++) {
        for (size_t k = 0; !rc && k < st_count(s->f[i]); k++) {
            const struct st_tensor *x = st_at(s->f[i], k);
            int64_t slot = slot_of(x->name, c->n_layer);
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
    if (!rc && c->rope == HF_ROPE_LLAMA3) {
        struct found none = {0};
        fill(&t[n], "rope_freqs.weight", &none, c->head_dim / 2, 1, 0);
        t[n++].gen = rope;
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
            fill(&t[n++], glob_map[g].gguf, &fd[g], dim_of(c, glob_map[g].rows),
                 dim_of(c, glob_map[g].cols), 0);
            continue;
        }
        for (int64_t l = 0; !rc && l < c->n_layer; l++) {
            for (size_t k = 0; !rc && k < N_BLK; k++) {
                const struct found *x = &fd[N_GLOBAL + (size_t)l * N_BLK + k];
                char name[64];
                if (!x->t) {
                    if (blk_map[k].required)
                        rc = mf_err_set(err, MF_EFORMAT,
                                        "the checkpoint has no model.layers.%lld.%s tensor "
                                        "(config.json has %lld layers)",
                                        (long long)l, blk_map[k].hf, (long long)c->n_layer);
                    continue;
                }
                rc = check_shape(c, x->f, x->t, blk_map[k].rows, blk_map[k].cols, err);
                snprintf(name, sizeof name, "blk.%lld.%s", (long long)l, blk_map[k].gguf);
                int64_t perm = blk_map[k].perm == 1   ? c->n_head
                               : blk_map[k].perm == 2 ? c->n_head_kv
                                                      : 0;
                fill(&t[n++], name, x, dim_of(c, blk_map[k].rows), dim_of(c, blk_map[k].cols),
                     perm);
            }
        }
    }
    free(fd);
    if (rc) {
        free(t);
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
    struct quant_model_info mi = {.arch = "llama",
                                  .n_layer = (int32_t)c->n_layer,
                                  .n_expert = 0,
                                  .n_gqa = (int32_t)(c->n_head / c->n_head_kv),
                                  .has_output = has_output,
                                  .is_70b = c->n_layer == 80 && c->n_head != c->n_head_kv};
    for (size_t i = 0; i < n; i++) {
        enum ggml_type base = t[i].src ? float_type(o->outtype, t[i].src->dtype) : GGML_TYPE_F32;
        if (!o->quantize && o->outtype == HF_OUT_AUTO)
            base = ftt; /* one type for the file, as the converter's auto mode picks it */
        if (t[i].n_dims == 1 || is_norm(t[i].name) || !t[i].src) {
            t[i].type = GGML_TYPE_F32;
        } else if (o->quantize) {
            struct quant_tensor_info ti = {.name = t[i].name,
                                           .type = base,
                                           .n_dims = (int)t[i].n_dims,
                                           .ne = {(int64_t)t[i].ne[0], (int64_t)t[i].ne[1], 1, 1}};
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
        t[i].bytes = row * t[i].ne[1];
    }
    return 0;
}

/* ---- rows ---- */

uint64_t hf_tensor_src_row(const struct hf_tensor *t, uint64_t r)
{
    if (t->perm_heads <= 0)
        return r;
    uint64_t rows = t->n_dims == 2 ? t->ne[1] : t->ne[0];
    uint64_t hd = rows / (uint64_t)t->perm_heads, h = r / hd, rem = r % hd;
    return h * hd + (rem % 2) * (hd / 2) + rem / 2;
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
    if (!t->src || t->n_dims != 2 || t->perm_heads > 0 || st_ggml(t->src->dtype) != t->type)
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
        }
        return quant_quantize_row(t->type, tmp, out, (int64_t)t->ne[0], err);
    }
    enum ggml_type in = st_ggml(t->src->dtype);
    int same = in == t->type, f16c = t->type == GGML_TYPE_F16 && have_f16c();
    size_t esz = st_dtype_size(t->src->dtype);
    const uint8_t *base = st_data(t->f, t->src);
    for (uint64_t r = r0; r < r0 + nr; r++, out += row_bytes) {
        const uint8_t *row = base + hf_tensor_src_row(t, r) * t->ne[0] * esz;
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
