/*
 * lora_peft.c: a PEFT LoRA directory -> a GGUF LoRA, as llama.cpp's
 * convert_lora_to_gguf.py converts it, in C.
 *
 * Input: adapter_config.json (r, lora_alpha, use_rslora, use_dora,
 * alpha_pattern, fan_in_fan_out, base_model_name_or_path) and
 * adapter_model.safetensors (common/safetensors.c validates it whole).
 * PEFT tensor names "base_model.model.<module>.lora_A.weight" (A: [r, in])
 * and ".lora_B.weight" (B: [out, r]), or ".lora_embedding_A"/"_B" for an
 * embedding (A: [r, n_vocab], B: [n_embd, r]). Modules per family: q/k/v/o
 * and gate/up/down projections, Phi-3's fused qkv_proj and gate_up_proj
 * (-> attn_qkv, ffn_up), a multimodal model's language_model. tower; a base
 * of any architecture common/arch.h runs.
 *
 * Output, tensor by tensor (convert_lora_to_gguf.py's LoraTorchTensor):
 *   <base>.lora_a = A   (ne [in, r]);   <base>.lora_b = B (ne [r, out]);
 *   token_embd.weight.lora_a = A^T (ne [r, n_vocab]), lora_b = B (ne [r, n_embd]);
 *   for the llama architecture (and no other: Qwen, Gemma and Phi-3 keep
 *   HF's NeoX row order) the rows of q's and k's lora_b are permuted
 *   exactly as convert_hf_to_gguf.py's LlamaModel.permute permutes q and k
 *   (reshape(n_head, 2, rows/n_head/2, r).swapaxes(1, 2)), with n_head for q
 *   and n_head_kv for k, so B·A matches the permuted base weights; A is not
 *   touched. Halves keep their F32/F16/BF16 bytes (F64 becomes F32);
 *   mergekit's *_layernorm / norm tensors pass through as F32.
 * KVs: general.architecture (the base's), general.type = adapter,
 * adapter.type = lora, adapter.lora.alpha. With use_rslora PEFT scales by
 * alpha/sqrt(r) while llama.cpp scales by alpha/r, so alpha*sqrt(r) is
 * written (and the original kept in mfc.peft.lora_alpha).
 *
 * Nothing is written before the planned tensors pass lora_check against the
 * base; the GGUF writer then writes through a temporary and renames it.
 */
#include "convert/lora.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/arch.h"
#include "common/file.h"
#include "common/ggml_type.h"
#include "common/json.h"
#include "common/safetensors.h"

#define PEFT_CONFIG_MAX (1u << 20) /* adapter_config.json is a few hundred bytes */
#define PEFT_PREFIX "base_model.model."

/* ---- names ------------------------------------------------------------------ */

/* "q_proj" -> "attn_q" and the others llama.cpp's tensor_mapping.py knows. */
static const char *const proj_map[][2] = {
    {"self_attn.q_proj", "attn_q"},
    {"self_attn.k_proj", "attn_k"},
    {"self_attn.v_proj", "attn_v"},
    {"self_attn.o_proj", "attn_output"},
    {"mlp.gate_proj", "ffn_gate"},
    {"mlp.up_proj", "ffn_up"},
    {"mlp.down_proj", "ffn_down"},
    /* Phi-3's fused projections stay fused, as the base conversion keeps them */
    {"self_attn.qkv_proj", "attn_qkv"},
    {"mlp.gate_up_proj", "ffn_up"},
};
static const char *const norm_map[][2] = {
    {"input_layernorm.weight", "attn_norm.weight"},
    {"post_attention_layernorm.weight", "ffn_norm.weight"},
};

/* Parses "model.layers.<N>." at s; returns the rest and *layer, or NULL. */
static const char *layer_prefix(const char *s, unsigned long *layer)
{
    static const char pre[] = "model.layers.";
    if (strncmp(s, pre, sizeof pre - 1) != 0)
        return NULL;
    s += sizeof pre - 1;
    if (*s < '0' || *s > '9')
        return NULL;
    unsigned long n = 0;
    for (; *s >= '0' && *s <= '9'; s++) {
        n = n * 10 + (unsigned long)(*s - '0');
        if (n > 100000)
            return NULL;
    }
    if (*s != '.')
        return NULL;
    *layer = n;
    return s + 1;
}

#define N_PAIRS(t) (sizeof(t) / sizeof((t)[0]))

/* Maps name through one of the tables: "model.layers.N.<key>" becomes
 * "blk.N.<value><suffix>" for a key in layer, a whole name found in whole
 * becomes its value. 0 with out filled, or MF_EUNSUPPORTED when no entry
 * matches or out (cap bytes) is too small. */
static int map_by_table(const char *name, const char *const layer[][2], size_t n_layer,
                        const char *suffix, const char *const whole[][2], size_t n_whole,
                        char *out, size_t cap)
{
    unsigned long l;
    const char *rest = layer_prefix(name, &l);
    int n = -1;
    for (size_t i = 0; rest && i < n_layer; i++)
        if (strcmp(rest, layer[i][0]) == 0)
            n = snprintf(out, cap, "blk.%lu.%s%s", l, layer[i][1], suffix);
    for (size_t i = 0; !rest && i < n_whole; i++)
        if (strcmp(name, whole[i][0]) == 0)
            n = snprintf(out, cap, "%s", whole[i][1]);
    return n > 0 && (size_t)n < cap ? 0 : MF_EUNSUPPORTED;
}

int lora_peft_map_name(const char *module, char *out, size_t cap)
{
    static const char *const whole[][2] = {{"model.embed_tokens", "token_embd.weight"},
                                           {"lm_head", "output.weight"}};
    return map_by_table(module, proj_map, N_PAIRS(proj_map), ".weight", whole, N_PAIRS(whole),
                        out, cap);
}

/* mergekit's norms: "model.layers.N.input_layernorm.weight" -> blk.N.attn_norm.weight. */
static int map_norm(const char *name, char *out, size_t cap)
{
    static const char *const whole[][2] = {{"model.norm.weight", "output_norm.weight"}};
    return map_by_table(name, norm_map, N_PAIRS(norm_map), "", whole, N_PAIRS(whole), out, cap);
}

/* ---- the plan: what will be written ----------------------------------------- */

enum half_kind { HALF_COPY, HALF_PERMUTE, HALF_TRANSPOSE, HALF_NORM };

/* One output tensor and where its elements come from. */
struct out_tensor {
    struct lora_tensor t;         /* name, type, shape as written */
    const struct st_tensor *src;  /* borrowed from the safetensors file */
    enum half_kind kind;          /* how src's elements are laid out in t */
    int64_t n_head;               /* HALF_PERMUTE: heads of the permutation */
};

/* A base tensor's two halves while they are collected. */
struct pair {
    char stem[GGUF_MAX_NAME];    /* "blk.0.attn_q.weight" */
    const struct st_tensor *a;   /* borrowed, or NULL until seen */
    const struct st_tensor *b;   /* borrowed, or NULL until seen */
};

struct conv {
    const char *dir;              /* borrowed: for messages */
    struct st_file *st;           /* owned */
    const struct gguf_file *base; /* borrowed: the base model */
    char arch[64];                /* the base's general.architecture */
    int permute;                  /* 1: llama-style q/k permutation */
    int64_t n_head, n_head_kv;    /* from the base (permute only) */
    struct pair *pairs;           /* owned, n_pairs */
    size_t n_pairs;
    struct out_tensor *out;       /* owned, n_out */
    size_t n_out;
    struct lora_peft_info info;   /* filled as we go */
    int has_alpha;                /* lora_alpha present in the config */
    int32_t rank_seen;            /* first pair's rank; -1 once ranks differ */
};

/* ---- config ----------------------------------------------------------------- */

/* An optional boolean key: *out untouched when absent; another type is an error. */
static int opt_bool(const json_t *cfg, const char *key, const char *path, int *out,
                    struct mf_err *err)
{
    int rc = mf_json_get_bool(cfg, key, path, out, err);
    if (rc == MF_ENOTFOUND || (rc == MF_EFORMAT && json_is_null(json_object_get(cfg, key)))) {
        mf_err_clear(err);
        return 0;
    }
    return rc;
}

static int check_config(struct conv *c, const json_t *cfg, const char *path, struct mf_err *err)
{
    const json_t *v;
    int64_t r = 0;
    int dora = 0, fifo = 0;
    if (!json_is_object(cfg))
        return mf_err_set(err, MF_EFORMAT, "%s must be a JSON object", path);
    v = json_object_get(cfg, "peft_type");
    if (json_is_string(v) && strcmp(json_string_value(v), "LORA") != 0)
        return mf_err_set(err, MF_EUNSUPPORTED, "%s: peft_type is \"%.40s\"; only LORA converts",
                          path, json_string_value(v));
    int rc = mf_json_get_int(cfg, "r", path, &r, err);
    if (rc)
        return rc;
    if (r < 1 || r > 65536)
        return mf_err_set(err, MF_ERANGE, "%s: r is %" PRId64 " (must be 1..65536)", path, r);
    c->info.rank = (int32_t)r;
    v = json_object_get(cfg, "lora_alpha");
    if (json_is_number(v)) {
        c->has_alpha = 1;
        c->info.peft_alpha = (float)json_number_value(v);
    } else if (v && !json_is_null(v)) {
        return mf_err_set(err, MF_EFORMAT, "%s: \"lora_alpha\" must be a number", path);
    }
    if ((rc = opt_bool(cfg, "use_dora", path, &dora, err)) != 0 ||
        (rc = opt_bool(cfg, "fan_in_fan_out", path, &fifo, err)) != 0 ||
        (rc = opt_bool(cfg, "use_rslora", path, &c->info.rslora, err)) != 0)
        return rc;
    if (dora)
        return mf_err_set(err, MF_EUNSUPPORTED,
                          "%s: use_dora is set; DoRA adapters have no GGUF LoRA form", path);
    if (fifo)
        return mf_err_set(err, MF_EUNSUPPORTED,
                          "%s: fan_in_fan_out is set (GPT-2 Conv1D layout), which mfc does not "
                          "convert",
                          path);
    v = json_object_get(cfg, "alpha_pattern");
    if (json_is_object(v) && json_object_size(v))
        return mf_err_set(err, MF_EUNSUPPORTED,
                          "%s: alpha_pattern gives modules their own alpha, which a GGUF LoRA "
                          "(one adapter.lora.alpha) cannot express",
                          path);
    v = json_object_get(cfg, "base_model_name_or_path");
    if (json_is_string(v))
        snprintf(c->info.base_model, sizeof c->info.base_model, "%s", json_string_value(v));
    return 0;
}

static int read_config(struct conv *c, struct mf_err *err)
{
    char path[4096], *text = NULL;
    size_t len;
    snprintf(path, sizeof path, "%s/adapter_config.json", c->dir);
    int rc = mf_file_read(path, PEFT_CONFIG_MAX, &text, &len, err);
    if (rc)
        return rc;
    json_t *cfg = mf_json_parse(text, len, path, err);
    free(text);
    if (!cfg)
        return MF_EFORMAT;
    rc = check_config(c, cfg, path, err);
    json_decref(cfg);
    return rc;
}

/* ---- base ------------------------------------------------------------------- */

/* Architecture and head counts of c->base. */
static int read_base(struct conv *c, struct mf_err *err)
{
    const char *base_path = gguf_name(c->base);
    struct gguf_str s;
    int rc = gguf_get_str(c->base, "general.architecture", &s, err);
    if (rc)
        return mf_err_prefix(err, "base model");
    snprintf(c->arch, sizeof c->arch, "%.*s", (int)(s.len > 63 ? 63 : s.len), s.p);
    const struct arch_desc *d = arch_find(c->arch, strlen(c->arch));
    if (!d)
        return mf_err_set(err, MF_EUNSUPPORTED,
                          "%s: architecture '%s' is not one mfc runs (%s), so mfc does not "
                          "convert adapters for it",
                          base_path, c->arch, arch_names());
    /* only llama's base conversion permutes q/k rows (LlamaModel.permute) */
    c->permute = d->rope == ARCH_ROPE_NORMAL;
    if (!c->permute)
        return 0;
    char key[128];
    uint32_t h, hkv;
    snprintf(key, sizeof key, "%s.attention.head_count", c->arch);
    rc = gguf_get_u32(c->base, key, &h, err);
    if (rc)
        return rc;
    snprintf(key, sizeof key, "%s.attention.head_count_kv", c->arch);
    if (gguf_get_u32(c->base, key, &hkv, err) != 0)
        hkv = h;
    mf_err_clear(err);
    if (h == 0 || hkv == 0)
        return mf_err_set(err, MF_EFORMAT, "%s: head count is 0", base_path);
    c->n_head = h;
    c->n_head_kv = hkv;
    return 0;
}

/* ---- tensors ---------------------------------------------------------------- */

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

static int add_out(struct conv *c, const char *name, const struct st_tensor *src,
                   enum half_kind kind, struct mf_err *err)
{
    struct out_tensor *o = realloc(c->out, (c->n_out + 1) * sizeof *o);
    if (!o)
        return mf_err_set(err, MF_ENOMEM, "out of memory converting %s", c->dir);
    c->out = o;
    o = &c->out[c->n_out++];
    memset(o, 0, sizeof *o);
    snprintf(o->t.name, sizeof o->t.name, "%s", name);
    o->src = src;
    o->kind = kind;
    o->t.type = src->dtype == ST_F16    ? GGML_TYPE_F16
                : src->dtype == ST_BF16 ? GGML_TYPE_BF16
                                        : GGML_TYPE_F32;
    if (kind == HALF_NORM)
        o->t.type = GGML_TYPE_F32;
    for (int d = 0; d < GGUF_MAX_DIMS; d++)
        o->t.ne[d] = 1;
    return 0;
}

static struct pair *pair_for(struct conv *c, const char *stem, struct mf_err *err)
{
    for (size_t i = 0; i < c->n_pairs; i++)
        if (strcmp(c->pairs[i].stem, stem) == 0)
            return &c->pairs[i];
    struct pair *p = realloc(c->pairs, (c->n_pairs + 1) * sizeof *p);
    if (!p) {
        mf_err_set(err, MF_ENOMEM, "out of memory converting %s", c->dir);
        return NULL;
    }
    c->pairs = p;
    p = &c->pairs[c->n_pairs++];
    memset(p, 0, sizeof *p);
    snprintf(p->stem, sizeof p->stem, "%s", stem);
    return p;
}

/* A tensor the converter cannot place: llama.cpp's message, with the hint
 * it gives for whole embedding matrices. */
static int unexpected(const struct conv *c, const char *name, struct mf_err *err)
{
    int emb = strstr(name, ".embed_tokens.weight") || strstr(name, ".lm_head.weight") ||
              strcmp(name, "base_model.model.lm_head.weight") == 0;
    return mf_err_set(err, MF_EUNSUPPORTED,
                      "%s: unexpected tensor '%s': not a lora_A or lora_B tensor%s",
                      st_name(c->st), name,
                      emb ? " (the adapter carries whole embedding weights: new tokens or "
                            "modules_to_save, which a GGUF LoRA cannot hold)"
                          : "");
}

/* Sorts one safetensors tensor into a pair half, a norm, or an error. */
static int classify(struct conv *c, const struct st_tensor *t, struct mf_err *err)
{
    static const char *const a_suf[] = {".lora_A.weight", ".lora_embedding_A"};
    static const char *const b_suf[] = {".lora_B.weight", ".lora_embedding_B"};
    const char *name = t->name;
    char text_only[512];
    if (strncmp(name, PEFT_PREFIX, sizeof PEFT_PREFIX - 1) == 0)
        name += sizeof PEFT_PREFIX - 1;
    const char *lm = strstr(name, "language_model.");
    if (lm && strlen(name) < sizeof text_only) { /* a multimodal model's text tower */
        snprintf(text_only, sizeof text_only, "%.*s%s", (int)(lm - name), name,
                 lm + strlen("language_model."));
        name = text_only;
    }
    int half = -1;
    size_t mlen = 0;
    for (int i = 0; i < 2 && half < 0; i++) {
        if (ends_with(name, a_suf[i]))
            half = 0, mlen = strlen(name) - strlen(a_suf[i]);
        else if (ends_with(name, b_suf[i]))
            half = 1, mlen = strlen(name) - strlen(b_suf[i]);
    }
    char gname[GGUF_MAX_NAME];
    if (half < 0) {
        if (ends_with(name, ".base_layer.weight"))
            return 0; /* the base's own weight, saved by some PEFT versions: skipped */
        if ((strstr(name, "_layernorm") || strstr(name, ".norm")) &&
            map_norm(name, gname, sizeof gname) == 0) {
            if (t->n_dims != 1)
                return mf_err_set(err, MF_EFORMAT, "%s: norm tensor '%s' is not 1-D",
                                  st_name(c->st), t->name);
            int rc = add_out(c, gname, t, HALF_NORM, err);
            if (!rc) {
                c->out[c->n_out - 1].t.n_dims = 1;
                c->out[c->n_out - 1].t.ne[0] = (uint64_t)t->shape[0];
                c->info.n_norms++;
            }
            return rc;
        }
        return unexpected(c, t->name, err);
    }
    char module[512];
    if (mlen >= sizeof module)
        return unexpected(c, t->name, err);
    snprintf(module, sizeof module, "%.*s", (int)mlen, name);
    if (lora_peft_map_name(module, gname, sizeof gname) != 0)
        return mf_err_set(err, MF_EUNSUPPORTED,
                          "%s: tensor '%s' adapts module '%s', which mfc cannot map to a GGUF "
                          "tensor (supported: q_proj, k_proj, v_proj, o_proj, gate_proj, "
                          "up_proj, down_proj, qkv_proj, gate_up_proj, embed_tokens, lm_head; "
                          "not experts)",
                          st_name(c->st), t->name, module);
    struct pair *p = pair_for(c, gname, err);
    if (!p)
        return MF_ENOMEM;
    const struct st_tensor **slot = half ? &p->b : &p->a;
    if (*slot)
        return mf_err_set(err, MF_EFORMAT, "%s: two lora_%c tensors for '%s' ('%s' and '%s')",
                          st_name(c->st), half ? 'B' : 'A', gname, (*slot)->name, t->name);
    *slot = t;
    return 0;
}

static int float_dtype(enum st_dtype d)
{
    return d == ST_F32 || d == ST_F16 || d == ST_BF16 || d == ST_F64;
}

/* Checks a complete pair's PEFT shapes and plans its two output tensors. */
static int plan_pair(struct conv *c, const struct pair *p, struct mf_err *err)
{
    const char *sn = st_name(c->st);
    if (!p->a || !p->b)
        return mf_err_set(err, MF_EFORMAT, "%s: '%s' has a lora_%c tensor ('%s') but no lora_%c",
                          sn, p->stem, p->a ? 'A' : 'B', (p->a ? p->a : p->b)->name,
                          p->a ? 'B' : 'A');
    const struct st_tensor *a = p->a, *b = p->b;
    for (int i = 0; i < 2; i++) {
        const struct st_tensor *t = i ? b : a;
        if (!float_dtype(t->dtype))
            return mf_err_set(err, MF_EUNSUPPORTED,
                              "%s: tensor '%s' is %s; PEFT adapters convert from F32, F16, BF16 "
                              "or F64",
                              sn, t->name, st_dtype_name(t->dtype));
        if (t->n_dims != 2)
            return mf_err_set(err, MF_EFORMAT, "%s: tensor '%s' has %d dimensions (want 2)", sn,
                              t->name, (int)t->n_dims);
    }
    if (a->shape[0] != b->shape[1] || a->shape[0] == 0)
        return mf_err_set(err, MF_EFORMAT,
                          "%s: rank mismatch: '%s' is [%" PRId64 ", %" PRId64 "] and '%s' is "
                          "[%" PRId64 ", %" PRId64 "] (want A [r, in] and B [out, r])",
                          sn, a->name, a->shape[0], a->shape[1], b->name, b->shape[0],
                          b->shape[1]);
    if (a->shape[0] > LORA_CHECK_MAX_RANK)
        return mf_err_set(err, MF_EUNSUPPORTED, "%s: '%s' has rank %" PRId64 " (at most %d)", sn,
                          a->name, a->shape[0], LORA_CHECK_MAX_RANK);
    int32_t r = (int32_t)a->shape[0];
    c->rank_seen = c->info.n_pairs == 0 ? r : c->rank_seen == r ? r : -1;
    c->info.n_pairs++;
    int embd = strcmp(p->stem, "token_embd.weight") == 0;
    int q = strstr(p->stem, ".attn_q.weight") != NULL, k = strstr(p->stem, ".attn_k.weight") != NULL;
    char name[GGUF_MAX_NAME + 8];
    snprintf(name, sizeof name, "%s.lora_a", p->stem);
    int rc = add_out(c, name, a, embd ? HALF_TRANSPOSE : HALF_COPY, err);
    if (rc)
        return rc;
    struct out_tensor *oa = &c->out[c->n_out - 1];
    oa->t.n_dims = 2;
    oa->t.ne[0] = (uint64_t)(embd ? a->shape[0] : a->shape[1]);
    oa->t.ne[1] = (uint64_t)(embd ? a->shape[1] : a->shape[0]);
    snprintf(name, sizeof name, "%s.lora_b", p->stem);
    enum half_kind bk = c->permute && (q || k) ? HALF_PERMUTE : HALF_COPY;
    rc = add_out(c, name, b, bk, err);
    if (rc)
        return rc;
    struct out_tensor *ob = &c->out[c->n_out - 1];
    ob->t.n_dims = 2;
    ob->t.ne[0] = (uint64_t)b->shape[1];
    ob->t.ne[1] = (uint64_t)b->shape[0];
    if (bk == HALF_PERMUTE) {
        ob->n_head = q ? c->n_head : c->n_head_kv;
        if (b->shape[0] % (2 * ob->n_head) != 0)
            return mf_err_set(err, MF_EINVAL,
                              "%s: '%s' has %" PRId64 " rows, not a multiple of 2 x %" PRId64
                              " heads of the base model (wrong base model?)",
                              sn, b->name, b->shape[0], ob->n_head);
        c->info.n_permuted++;
    }
    return 0;
}

/* ---- writing ---------------------------------------------------------------- */

/* Appends element idx of src to row as out's type (F32 for an F64 source). */
static int put_elem(const struct conv *c, const struct out_tensor *o, uint64_t idx, uint8_t *dst,
                    struct mf_err *err)
{
    const struct st_tensor *s = o->src;
    if (s->dtype != ST_F64 && o->kind != HALF_NORM) {
        size_t es = st_dtype_size(s->dtype);
        memcpy(dst, (const uint8_t *)st_data(c->st, s) + idx * es, es);
        return 0;
    }
    float f;
    int rc = st_read_f32(c->st, s, idx, 1, &f, err);
    if (rc)
        return rc;
    uint32_t u;
    memcpy(&u, &f, 4);
    for (int i = 0; i < 4; i++)
        dst[i] = (uint8_t)(u >> (8 * i));
    return 0;
}

/* The source row of output row i (HALF_PERMUTE): new[h*hd + 2i + j] =
 * old[h*hd + j*hd/2 + i], which is reshape(n_head, 2, hd/2).swapaxes(1, 2). */
static uint64_t permuted_row(uint64_t row, int64_t n_head, uint64_t n_rows)
{
    uint64_t hd = n_rows / (uint64_t)n_head, half = hd / 2;
    uint64_t h = row / hd, rem = row % hd;
    uint64_t i = rem / 2, j = rem % 2;
    return h * hd + j * half + i;
}

/* The index of the first NaN or infinity among n little-endian elements of
 * type t (F32, F16, BF16) at p, or n: an adapter that diverged in training
 * would make every output NaN, so it is refused here rather than served. */
static size_t first_nonfinite(const uint8_t *p, uint64_t n, uint32_t t)
{
    for (uint64_t i = 0; i < n; i++) {
        int bad;
        if (t == GGML_TYPE_F32)
            bad = (p[4 * i + 3] & 0x7f) == 0x7f && (p[4 * i + 2] & 0x80);
        else if (t == GGML_TYPE_F16)
            bad = (p[2 * i + 1] & 0x7c) == 0x7c;
        else
            bad = (p[2 * i + 1] & 0x7f) == 0x7f && (p[2 * i] & 0x80);
        if (bad)
            return (size_t)i;
    }
    return (size_t)n;
}

static int write_tensor(const struct conv *c, struct gguf_writer *w, const struct out_tensor *o,
                        struct mf_err *err)
{
    uint64_t ne0 = o->t.ne[0], ne1 = o->t.ne[1];
    size_t es = ggml_type_size(o->t.type);
    uint8_t *row = malloc(ne0 * es + 1);
    if (!row)
        return mf_err_set(err, MF_ENOMEM, "out of memory writing %s", o->t.name);
    int rc = 0;
    /* the same bytes in the same element order: whole rows at once */
    int raw_rows = (o->kind == HALF_COPY || o->kind == HALF_PERMUTE) && o->src->dtype != ST_F64;
    const uint8_t *src = st_data(c->st, o->src);
    for (uint64_t r = 0; !rc && r < ne1; r++) {
        uint64_t src_row = o->kind == HALF_PERMUTE ? permuted_row(r, o->n_head, ne1) : r;
        if (raw_rows)
            memcpy(row, src + src_row * ne0 * es, ne0 * es);
        for (uint64_t e = 0; !rc && !raw_rows && e < ne0; e++) {
            /* HALF_TRANSPOSE: out [r_out = token][e = rank] = A[e][token] */
            uint64_t idx = o->kind == HALF_TRANSPOSE ? e * ne1 + r : src_row * ne0 + e;
            rc = put_elem(c, o, idx, row + e * es, err);
        }
        size_t bad = rc ? ne0 : first_nonfinite(row, ne0, o->t.type);
        if (bad < ne0)
            rc = mf_err_set(err, MF_EINVAL,
                            "%s: tensor '%s' (from '%s') holds a NaN or infinity (row %" PRIu64
                            ", element %zu): the adapter is broken",
                            st_name(c->st), o->t.name, o->src->name, r, bad);
        if (!rc)
            rc = gguf_writer_write(w, row, ne0 * es, err);
    }
    free(row);
    return rc;
}

static int write_gguf(const struct conv *c, const char *out_path, struct mf_err *err)
{
    struct gguf_writer *w = NULL;
    int rc = gguf_writer_open(out_path, &w, err);
    if (!rc)
        rc = gguf_writer_add_cstr(w, "general.architecture", c->arch, err);
    if (!rc)
        rc = gguf_writer_add_cstr(w, "general.type", "adapter", err);
    if (!rc)
        rc = gguf_writer_add_cstr(w, "adapter.type", "lora", err);
    if (!rc && c->has_alpha)
        rc = gguf_writer_add_f32(w, "adapter.lora.alpha", c->info.alpha, err);
    if (!rc && c->info.rslora) {
        rc = gguf_writer_add_bool(w, "mfc.peft.use_rslora", 1, err);
        if (!rc && c->has_alpha)
            rc = gguf_writer_add_f32(w, "mfc.peft.lora_alpha", c->info.peft_alpha, err);
    }
    for (size_t i = 0; !rc && i < c->n_out; i++)
        rc = gguf_writer_add_tensor(w, c->out[i].t.name, (enum ggml_type)c->out[i].t.type,
                                    c->out[i].t.n_dims, c->out[i].t.ne, err);
    for (size_t i = 0; !rc && i < c->n_out; i++)
        rc = write_tensor(c, w, &c->out[i], err);
    if (!rc)
        rc = gguf_writer_finish(w, err);
    gguf_writer_free(w);
    return rc;
}

/* ---- driver ----------------------------------------------------------------- */

int lora_peft_is_dir(const char *dir)
{
    char path[4096];
    struct stat sb;
    int n = snprintf(path, sizeof path, "%s/adapter_config.json", dir);
    return n > 0 && (size_t)n < sizeof path && stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

static int open_weights(struct conv *c, struct mf_err *err)
{
    char path[4096];
    struct stat sb;
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", c->dir);
    if (stat(path, &sb) != 0) {
        snprintf(path, sizeof path, "%s/adapter_model.bin", c->dir);
        if (stat(path, &sb) == 0)
            return mf_err_set(err, MF_EUNSUPPORTED,
                              "%s/adapter_model.bin is a PyTorch pickle, which mfc does not "
                              "load; save the adapter with safe_serialization=True",
                              c->dir);
        return mf_err_set(err, MF_ENOTFOUND, "%s has no adapter_model.safetensors", c->dir);
    }
    return st_open(path, &c->st, err);
}

/* Config, weights, base; every tensor classified and every pair planned. */
static int plan_all(struct conv *c, struct mf_err *err)
{
    int rc = read_config(c, err);
    if (!rc)
        rc = open_weights(c, err);
    if (!rc)
        rc = read_base(c, err);
    if (!rc && st_count(c->st) > LORA_MAX_TENSORS)
        rc = mf_err_set(err, MF_EUNSUPPORTED, "%s has %zu tensors (at most %d)", st_name(c->st),
                        st_count(c->st), LORA_MAX_TENSORS);
    for (size_t i = 0; !rc && c->st && i < st_count(c->st); i++)
        rc = classify(c, st_at(c->st, i), err);
    for (size_t i = 0; !rc && i < c->n_pairs; i++)
        rc = plan_pair(c, &c->pairs[i], err);
    if (rc)
        return rc;
    if (!c->info.n_pairs)
        return mf_err_set(err, MF_EFORMAT, "%s has no lora_A/lora_B tensors", st_name(c->st));
    c->info.alpha = c->info.peft_alpha;
    if (c->info.rslora && c->has_alpha) {
        if (c->rank_seen < 0)
            return mf_err_set(err, MF_EUNSUPPORTED,
                              "%s: use_rslora with per-module ranks (rank_pattern) needs one "
                              "alpha per module, which a GGUF LoRA cannot express",
                              c->dir);
        c->info.alpha = (float)((double)c->info.peft_alpha * sqrt((double)c->rank_seen));
    }
    return 0;
}

int lora_peft_convert_gf(const char *dir, const struct gguf_file *base, const char *out_gguf,
                         struct lora_peft_info *info, struct mf_err *err)
{
    struct conv c;
    memset(&c, 0, sizeof c);
    c.dir = dir;
    c.base = base;
    int rc = plan_all(&c, err);
    struct lora_tensor *ts = NULL;
    if (!rc) {
        ts = malloc(c.n_out * sizeof *ts);
        if (!ts)
            rc = mf_err_set(err, MF_ENOMEM, "out of memory converting %s", dir);
    }
    if (!rc) {
        struct lora_view v = {.name = dir, .has_alpha = c.has_alpha, .alpha = c.info.alpha,
                              .tensors = ts, .n_tensors = c.n_out};
        snprintf(v.arch, sizeof v.arch, "%s", c.arch);
        for (size_t i = 0; i < c.n_out; i++)
            ts[i] = c.out[i].t;
        rc = lora_check(c.base, &v, &c.info.sum, err);
    }
    if (!rc)
        rc = write_gguf(&c, out_gguf, err);
    if (!rc && info)
        *info = c.info;
    free(ts);
    free(c.out);
    free(c.pairs);
    st_close(c.st);
    return rc;
}

int lora_peft_convert_ex(const char *dir, const char *base_gguf, const char *out_gguf,
                         struct lora_peft_info *info, struct mf_err *err)
{
    struct gguf_file *base;
    int rc = gguf_open(base_gguf, &base, err);
    if (!rc)
        rc = lora_peft_convert_gf(dir, base, out_gguf, info, err);
    gguf_close(base);
    return rc;
}

int lora_peft_convert(const char *dir, const char *base_gguf, const char *out_gguf,
                      struct mf_err *err)
{
    return lora_peft_convert_ex(dir, base_gguf, out_gguf, NULL, err);
}
