/*
 * lora.c: loads GGUF LoRA adapters (convert_lora_to_gguf.py's format) and
 * checks them against a base model.
 *
 * Owns the adapter's mapping and its pair table (one slot per model target,
 * model.h's index). Does not apply adapters: the backend does, grouped per
 * adapter inside each step (cpu.c). Accepted: general.type = "adapter",
 * adapter.type = "lora", general.architecture equal to the base's,
 * tensors "<base>.lora_a" [base ne0, rank] and "<base>.lora_b" [rank, base
 * ne1] in F32/F16/BF16, both halves present, base tensor a projection mfc
 * adapts (attn q/k/v/output, ffn gate/up/down, output). Norm tensors that
 * mergekit-style adapters carry are ignored, as llama.cpp does.
 *
 * A fused base tensor (Phi-3's attn_qkv, ffn_up holding gate and up rows)
 * is bound as row views, one model target each (model_weight.row0): its
 * adapter pair is split the same way, every view sharing lora_a and taking
 * its own rows of lora_b, so B(Ax) of a view is the fused product's rows.
 *
 * Invariant after lora_open(): every non-NULL pair has rank in
 * 1..MF_LORA_MAX_RANK and shapes that match its base view exactly.
 */
#include "runtime/model/lora.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/gguf.h"

/* Checks the three identity keys. */
static int check_keys(const struct model *base, const struct gguf_file *gf, struct mf_err *err)
{
    const char *arch = base->hp.arch ? base->hp.arch->name : "llama";
    struct gguf_str s;
    int rc;

    rc = gguf_get_str(gf, "general.type", &s, err);
    if (rc == MF_ENOTFOUND || (!rc && !gguf_str_eq(s, "adapter")))
        return mf_err_set(err, MF_EFORMAT,
                          "%s: general.type is '%.*s', expected 'adapter' (not a LoRA adapter)",
                          gguf_name(gf), rc ? 0 : (int)(s.len > 32 ? 32 : s.len), rc ? "" : s.p);
    if (rc)
        return rc;
    rc = gguf_get_str(gf, "adapter.type", &s, err);
    if (rc == MF_ENOTFOUND || (!rc && !gguf_str_eq(s, "lora")))
        return mf_err_set(err, MF_EUNSUPPORTED, "%s: adapter.type is '%.*s', expected 'lora'",
                          gguf_name(gf), rc ? 0 : (int)(s.len > 32 ? 32 : s.len), rc ? "" : s.p);
    if (rc)
        return rc;
    rc = gguf_get_str(gf, "general.architecture", &s, err);
    if (rc == MF_ENOTFOUND || (!rc && !gguf_str_eq(s, arch)))
        return mf_err_set(err, MF_EUNSUPPORTED,
                          "%s: adapter architecture '%.*s' does not match the base model's '%s'",
                          gguf_name(gf), rc ? 0 : (int)(s.len > 32 ? 32 : s.len), rc ? "" : s.p,
                          arch);
    return rc;
}

#define MAX_VIEWS MODEL_W_PER_LAYER /* views of one fused tensor (q, k, v) */

/* The model targets a base tensor name denotes: one, or each view of a
 * fused tensor (row0 order). Returns how many (0: none). */
static int targets_of(const struct model *base, const char *name, size_t len,
                      int32_t out[MAX_VIEWS])
{
    int32_t nt = model_n_targets(base);
    int n = 0;

    for (int32_t t = 0; t < nt && n < MAX_VIEWS; t++) {
        const struct model_weight *w =
            model_weight_at(base, t / MODEL_W_PER_LAYER, (enum model_wid)(t % MODEL_W_PER_LAYER));
        if (t == nt - 1 && base->tied)
            break; /* output is token_embd's view: not a tensor of its own */
        if (w->data && w->name && strlen(w->name) == len && memcmp(w->name, name, len) == 0)
            out[n++] = t;
    }
    return n;
}

/* Checks one half's element type. */
static int check_type(const struct gguf_file *gf, const struct gguf_tensor *t, struct mf_err *err)
{
    if (t->type == GGML_TYPE_F32 || t->type == GGML_TYPE_F16 || t->type == GGML_TYPE_BF16)
        return 0;
    return mf_err_set(err, MF_EUNSUPPORTED,
                      "%s: LoRA tensor '%s' has type %s; mfc applies F32, F16 and BF16 adapters",
                      gguf_name(gf), t->name, ggml_type_name(t->type));
}

/* Fills w from tensor t (2-D, already type-checked). */
static void view(const struct gguf_tensor *t, struct model_weight *w)
{
    w->data = t->data;
    w->type = (enum ggml_type)t->type;
    w->ne0 = (int64_t)t->ne[0];
    w->ne1 = (int64_t)t->ne[1];
    w->row_bytes = w->ne1 ? t->n_bytes / t->ne[1] : 0;
    w->name = t->name;
}

/* Checks a pair against its base weight bw, a view of rows [bw->row0,
 * bw->row0 + bw->ne1) of a tensor of rows rows, and stores in p the pair
 * for that view: lora_a whole, lora_b's rows of the view. */
static int check_pair(const struct gguf_file *gf, const struct gguf_tensor *a,
                      const struct gguf_tensor *b, const struct model_weight *bw, int64_t rows,
                      struct lora_pair *p, struct mf_err *err)
{
    int rc = check_type(gf, a, err);

    if (!rc)
        rc = check_type(gf, b, err);
    if (rc)
        return rc;
    if (a->ne[2] != 1 || a->ne[3] != 1 || b->ne[2] != 1 || b->ne[3] != 1 ||
        a->ne[0] != (uint64_t)bw->ne0 || b->ne[1] != (uint64_t)rows)
        return mf_err_set(err, MF_EFORMAT,
                          "%s: LoRA tensors '%s' [%" PRIu64 ", %" PRIu64 "] and '%s' [%" PRIu64
                          ", %" PRIu64 "] do not fit base tensor '%s' [%" PRId64 ", %" PRId64
                          "] (need lora_a [%" PRId64 ", rank], lora_b [rank, %" PRId64
                          "]; wrong base model?)",
                          gguf_name(gf), a->name, a->ne[0], a->ne[1], b->name, b->ne[0], b->ne[1],
                          bw->name, bw->ne0, rows, bw->ne0, rows);
    if (a->ne[1] != b->ne[0] || a->ne[1] == 0 || a->ne[1] > MF_LORA_MAX_RANK)
        return mf_err_set(err, MF_EFORMAT,
                          "%s: LoRA tensors '%s' [%" PRIu64 ", %" PRIu64 "] and '%s' [%" PRIu64
                          ", %" PRIu64 "] disagree on the rank (must be equal, 1..%d)",
                          gguf_name(gf), a->name, a->ne[0], a->ne[1], b->name, b->ne[0], b->ne[1],
                          MF_LORA_MAX_RANK);
    view(a, &p->a);
    view(b, &p->b);
    p->b.data = (const uint8_t *)p->b.data + (size_t)bw->row0 * p->b.row_bytes;
    p->b.ne1 = bw->ne1;
    p->b.row0 = bw->row0;
    p->rank = (int32_t)a->ne[1];
    return 0;
}

/* 1 if name ends with suffix. */
static int ends_with(const char *name, const char *suffix)
{
    size_t n = strlen(name), k = strlen(suffix);
    return n >= k && strcmp(name + n - k, suffix) == 0;
}

/* Handles tensor t: finds its partner and base, stores the pair. */
static int add_tensor(const struct model *base, struct lora *l, const struct gguf_tensor *t,
                      struct mf_err *err)
{
    char other[GGUF_MAX_NAME + 8];
    const struct gguf_tensor *b;
    size_t stem;
    int32_t tg[MAX_VIEWS];
    int n_views, rc = 0;

    if (ends_with(t->name, ".lora_b"))
        return 0; /* handled with its lora_a */
    if (!ends_with(t->name, ".lora_a")) {
        if (ends_with(t->name, "_norm.weight"))
            return 0; /* llama.cpp ignores these too */
        return mf_err_set(err, MF_EFORMAT,
                          "%s: LoRA tensor '%s' has an unexpected suffix (want .lora_a/.lora_b)",
                          gguf_name(l->gf), t->name);
    }
    stem = strlen(t->name) - strlen(".lora_a");
    snprintf(other, sizeof other, "%.*s.lora_b", (int)stem, t->name);
    b = gguf_find_tensor(l->gf, other);
    if (!b)
        return mf_err_set(err, MF_EFORMAT, "%s: LoRA tensor '%s' has no matching '%s'",
                          gguf_name(l->gf), t->name, other);
    n_views = targets_of(base, t->name, stem, tg);
    if (n_views == 0)
        return mf_err_set(err, MF_EFORMAT,
                          "%s: LoRA tensor '%s' adapts '%.*s', which the base model does not "
                          "have as an adaptable projection (wrong base model?)",
                          gguf_name(l->gf), t->name, (int)stem, t->name);
    l->n_pairs++;
    int64_t rows = 0; /* the whole tensor's: the views' end */
    for (int v = 0; v < n_views; v++) {
        const struct model_weight *w = model_weight_at(base, tg[v] / MODEL_W_PER_LAYER,
                                                       (enum model_wid)(tg[v] % MODEL_W_PER_LAYER));
        if (w->row0 + w->ne1 > rows)
            rows = w->row0 + w->ne1;
    }
    for (int v = 0; !rc && v < n_views; v++)
        rc = check_pair(l->gf, t, b,
                        model_weight_at(base, tg[v] / MODEL_W_PER_LAYER,
                                        (enum model_wid)(tg[v] % MODEL_W_PER_LAYER)),
                        rows, &l->pairs[tg[v]], err);
    return rc;
}

/* Every lora_b needs its lora_a (the loop in bind_pairs only starts at a). */
static int check_orphans(const struct lora *l, struct mf_err *err)
{
    uint64_t n = gguf_n_tensors(l->gf);
    char other[GGUF_MAX_NAME + 8];

    for (uint64_t i = 0; i < n; i++) {
        const struct gguf_tensor *t = gguf_tensor_at(l->gf, i);
        size_t stem = strlen(t->name) - strlen(".lora_b");

        if (!ends_with(t->name, ".lora_b"))
            continue;
        snprintf(other, sizeof other, "%.*s.lora_a", (int)stem, t->name);
        if (!gguf_find_tensor(l->gf, other))
            return mf_err_set(err, MF_EFORMAT, "%s: LoRA tensor '%s' has no matching '%s'",
                              gguf_name(l->gf), t->name, other);
    }
    return 0;
}

/* Binds every pair, then sets rank and per-pair relative scales. */
static int bind_pairs(const struct model *base, struct lora *l, struct mf_err *err)
{
    uint64_t n = gguf_n_tensors(l->gf);
    int rc = 0;

    for (uint64_t i = 0; !rc && i < n; i++)
        rc = add_tensor(base, l, gguf_tensor_at(l->gf, i), err);
    if (!rc)
        rc = check_orphans(l, err);
    if (rc)
        return rc;
    if (l->n_pairs == 0)
        return mf_err_set(err, MF_EFORMAT, "%s: the adapter has no lora_a/lora_b tensors",
                          gguf_name(l->gf));
    for (int32_t t = 0; t < l->n_targets; t++) {
        struct lora_pair *p = &l->pairs[t];
        if (!p->a.data)
            continue;
        if (!l->rank)
            l->rank = p->rank;
        p->rel_scale = l->alpha != 0.0f ? (float)l->rank / (float)p->rank : 1.0f;
    }
    return 0;
}

int lora_open_gguf(const struct model *base, struct gguf_file *gf, struct lora **out,
                   struct mf_err *err)
{
    struct lora *l;
    int rc;

    *out = NULL;
    l = calloc(1, sizeof *l);
    if (!l) {
        gguf_close(gf);
        return mf_err_set(err, MF_ENOMEM, "out of memory loading an adapter");
    }
    l->gf = gf;
    rc = check_keys(base, gf, err);
    if (rc)
        goto fail;
    rc = gguf_get_f32(gf, "adapter.lora.alpha", &l->alpha, err);
    if (rc == MF_ENOTFOUND) {
        l->alpha = 0.0f;
        mf_err_clear(err);
        rc = 0;
    }
    if (rc)
        goto fail;
    l->n_targets = model_n_targets(base);
    l->pairs = calloc((size_t)l->n_targets, sizeof *l->pairs);
    if (!l->pairs) {
        rc = mf_err_set(err, MF_ENOMEM, "%s: out of memory", gguf_name(gf));
        goto fail;
    }
    rc = bind_pairs(base, l, err);
    if (rc)
        goto fail;
    *out = l;
    return 0;

fail:
    lora_close(l);
    return rc;
}

int lora_open(const struct model *base, const char *path, struct lora **out, struct mf_err *err)
{
    struct gguf_file *gf;
    int rc;

    *out = NULL;
    rc = gguf_open(path, &gf, err);
    if (rc)
        return rc;
    return lora_open_gguf(base, gf, out, err);
}

int lora_open_range(const struct model *base, const char *path, uint64_t offset, uint64_t size,
                    struct lora **out, struct mf_err *err)
{
    struct gguf_file *gf;
    int rc;

    *out = NULL;
    rc = gguf_open_range(path, offset, size, &gf, err);
    if (rc)
        return rc;
    return lora_open_gguf(base, gf, out, err);
}

void lora_close(struct lora *l)
{
    if (!l)
        return;
    free(l->pairs);
    gguf_close(l->gf);
    free(l);
}

float lora_scale(const struct lora *l, float user_scale)
{
    if (l->alpha == 0.0f || l->rank == 0)
        return user_scale;
    return user_scale * l->alpha / (float)l->rank;
}

const struct lora_pair *lora_pair_at(const struct lora *l, int32_t t)
{
    if (t < 0 || t >= l->n_targets || !l->pairs[t].a.data)
        return NULL;
    return &l->pairs[t];
}
