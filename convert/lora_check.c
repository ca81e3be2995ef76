/*
 * lora_check.c: validates a GGUF LoRA adapter against its base model before
 * anything is baked (lora.h has the format).
 *
 * Works on a lora_view (name, architecture, alpha, tensor table) so that the
 * same rules check a GGUF adapter (lora_view_gguf) and a PEFT conversion
 * before its output is committed (lora_peft.c). Every rule llama.cpp applies
 * when it loads an adapter (src/llama-adapter.cpp) is here, with a message
 * that names the adapter, the tensor and both shapes instead of "incorrect
 * shape (hint: maybe wrong base model?)". Pairs are found through a sorted
 * name index, so a crafted adapter with many tensors stays O(n log n).
 *
 * Does not open the runtime's model: the base is only a GGUF header here.
 */
#include "convert/lora.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/ggml_type.h"
#include "common/limits.h"

/* ---- views ------------------------------------------------------------------ */

/* The string value of key, or NULL (absent or another type). */
static const char *str_kv(const struct gguf_file *gf, const char *key, struct gguf_str *s)
{
    struct mf_err ignored;
    if (gguf_get_str(gf, key, s, &ignored) != 0)
        return NULL;
    return s->p;
}

static int str_is(const struct gguf_file *gf, const char *key, const char *want)
{
    struct gguf_str s;
    return str_kv(gf, key, &s) && gguf_str_eq(s, want);
}

int lora_view_gguf(const struct gguf_file *adapter, struct lora_view *v,
                   struct lora_tensor **tensors, struct mf_err *err)
{
    struct gguf_str s;
    memset(v, 0, sizeof *v);
    *tensors = NULL;
    v->name = gguf_name(adapter);
    if (!str_is(adapter, "general.type", "adapter"))
        return mf_err_set(err, MF_EFORMAT,
                          "%s is not a LoRA adapter: general.type is not 'adapter' (a model?)",
                          v->name);
    if (!str_is(adapter, "adapter.type", "lora"))
        return mf_err_set(err, MF_EUNSUPPORTED, "%s: adapter.type is not 'lora'", v->name);
    if (str_kv(adapter, "general.architecture", &s))
        snprintf(v->arch, sizeof v->arch, "%.*s", (int)(s.len < 64 ? s.len : 64), s.p);
    struct mf_err e2;
    if (gguf_get_f32(adapter, "adapter.lora.alpha", &v->alpha, &e2) == 0)
        v->has_alpha = 1;
    else
        v->alpha = 0.0f;
    uint64_t n = gguf_n_tensors(adapter);
    if (n > LORA_MAX_TENSORS)
        return mf_err_set(err, MF_EUNSUPPORTED, "%s has %" PRIu64 " tensors (at most %d)",
                          v->name, n, LORA_MAX_TENSORS);
    struct lora_tensor *t = calloc(n ? n : 1, sizeof *t);
    if (!t)
        return mf_err_set(err, MF_ENOMEM, "out of memory reading %s", v->name);
    for (uint64_t i = 0; i < n; i++) {
        const struct gguf_tensor *g = gguf_tensor_at(adapter, i);
        snprintf(t[i].name, sizeof t[i].name, "%s", g->name);
        t[i].type = g->type;
        t[i].n_dims = g->n_dims;
        memcpy(t[i].ne, g->ne, sizeof t[i].ne);
    }
    v->tensors = t;
    v->n_tensors = (size_t)n;
    *tensors = t;
    return 0;
}

/* ---- checks ----------------------------------------------------------------- */

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

static int cmp_tensor_name(const void *a, const void *b)
{
    const struct lora_tensor *x = *(const struct lora_tensor *const *)a;
    const struct lora_tensor *y = *(const struct lora_tensor *const *)b;
    return strcmp(x->name, y->name);
}

/* The tensor named name in the sorted index, or NULL. */
static const struct lora_tensor *find_sorted(const struct lora_tensor *const *idx, size_t n,
                                             const char *name)
{
    struct lora_tensor key;
    const struct lora_tensor *kp = &key;
    snprintf(key.name, sizeof key.name, "%s", name);
    if (strlen(name) >= sizeof key.name)
        return NULL;
    const struct lora_tensor *const *hit = bsearch(&kp, idx, n, sizeof *idx, cmp_tensor_name);
    return hit ? *hit : NULL;
}

static int type_ok(uint32_t t)
{
    return t == GGML_TYPE_F32 || t == GGML_TYPE_F16 || t == GGML_TYPE_BF16;
}

/* "[a, b]" of a tensor's first two dims (the check refuses more first). */
#define SHAPE2(t) (t)->ne[0], (t)->ne[1]
#define FMT2 "[%" PRIu64 ", %" PRIu64 "]"

/* The ordinary pair: A [in, r], B [r, out] against W [in, out]. */
static int check_linear(const char *an, const struct lora_tensor *a, const struct lora_tensor *b,
                        const struct gguf_tensor *w, struct mf_err *err)
{
    if (a->ne[0] != w->ne[0])
        return mf_err_set(err, MF_EINVAL,
                          "%s: lora_a '%s' is " FMT2 " but base tensor '%s' is " FMT2
                          ": lora_a ne0 must be the base's ne0 (%" PRIu64 ")%s",
                          an, a->name, SHAPE2(a), w->name, SHAPE2(w), w->ne[0],
                          a->ne[1] == w->ne[0] ? " (lora_a looks transposed: it must be "
                                                 "[base ne0, rank])"
                                               : " (other hidden size? wrong base model?)");
    if (b->ne[1] != w->ne[1])
        return mf_err_set(err, MF_EINVAL,
                          "%s: lora_b '%s' is " FMT2 " but base tensor '%s' is " FMT2
                          ": lora_b ne1 must be the base's ne1 (%" PRIu64 ")%s",
                          an, b->name, SHAPE2(b), w->name, SHAPE2(w), w->ne[1],
                          b->ne[0] == w->ne[1] ? " (lora_b looks transposed: it must be "
                                                 "[rank, base ne1])"
                                               : " (wrong base model?)");
    if (a->ne[1] != b->ne[0] || a->ne[1] == 0)
        return mf_err_set(err, MF_EINVAL,
                          "%s: rank mismatch: lora_a '%s' is " FMT2 " and lora_b '%s' is " FMT2
                          ": lora_a ne1 and lora_b ne0 must both be the rank (> 0)",
                          an, a->name, SHAPE2(a), b->name, SHAPE2(b));
    return 0;
}

/* The embedding pair: A [r, n_vocab], B [r, n_embd] against W [n_embd, n_vocab]. */
static int check_embd(const char *an, const struct lora_tensor *a, const struct lora_tensor *b,
                      const struct gguf_tensor *w, struct mf_err *err)
{
    if (a->ne[1] != w->ne[1])
        return mf_err_set(err, MF_EINVAL,
                          "%s: embedding lora_a '%s' is " FMT2 " but base tensor '%s' is " FMT2
                          ": the adapter covers %" PRIu64 " tokens, the base vocabulary has %" PRIu64
                          " (lora_a must be [rank, n_vocab])",
                          an, a->name, SHAPE2(a), w->name, SHAPE2(w), a->ne[1], w->ne[1]);
    if (b->ne[1] != w->ne[0])
        return mf_err_set(err, MF_EINVAL,
                          "%s: embedding lora_b '%s' is " FMT2 " but base tensor '%s' is " FMT2
                          ": embedding width %" PRIu64 " against the base's %" PRIu64
                          " (lora_b must be [rank, n_embd])",
                          an, b->name, SHAPE2(b), w->name, SHAPE2(w), b->ne[1], w->ne[0]);
    if (a->ne[0] != b->ne[0] || a->ne[0] == 0)
        return mf_err_set(err, MF_EINVAL,
                          "%s: rank mismatch: embedding lora_a '%s' is " FMT2 " and lora_b '%s' is "
                          FMT2 ": both ne0 must be the rank (> 0)",
                          an, a->name, SHAPE2(a), b->name, SHAPE2(b));
    return 0;
}

/* Shape-independent checks of one half. */
static int check_half(const char *an, const struct lora_tensor *t, struct mf_err *err)
{
    if (!type_ok(t->type))
        return mf_err_set(err, MF_EUNSUPPORTED,
                          "%s: tensor '%s' has type %s; adapters must be F32, F16 or BF16", an,
                          t->name, ggml_type_name((enum ggml_type)t->type));
    if (t->ne[2] != 1 || t->ne[3] != 1)
        return mf_err_set(err, MF_EFORMAT, "%s: tensor '%s' is not 2-D", an, t->name);
    return 0;
}

/* Adds the kind of base tensor stem ("blk.3.attn_q.weight" -> "attn_q") to
 * the summary, and counts distinct layers through the seen bitmap. */
static void note_target(struct lora_summary *sum, const char *stem, uint8_t *layers,
                        size_t n_layer_bits)
{
    const char *k = stem;
    if (strncmp(stem, "blk.", 4) == 0) {
        char *end;
        unsigned long long li = strtoull(stem + 4, &end, 10);
        if (*end == '.') {
            k = end + 1;
            if (li < n_layer_bits && !(layers[li / 8] & (1u << (li % 8)))) {
                layers[li / 8] |= (uint8_t)(1u << (li % 8));
                sum->n_layers++;
            }
        }
    }
    char kind[GGUF_MAX_NAME];
    snprintf(kind, sizeof kind, "%s", k);
    if (ends_with(kind, ".weight"))
        kind[strlen(kind) - strlen(".weight")] = '\0';
    /* already listed? (space-separated words) */
    size_t kl = strlen(kind);
    for (const char *p = sum->targets; (p = strstr(p, kind)) != NULL; p += kl)
        if ((p == sum->targets || p[-1] == ' ') && (p[kl] == ' ' || p[kl] == '\0'))
            return;
    size_t used = strlen(sum->targets);
    if (used + kl + 2 < sizeof sum->targets)
        snprintf(sum->targets + used, sizeof sum->targets - used, "%s%s", used ? " " : "", kind);
}

/* Checks lora_a a against its partner and the base; fills the summary. */
static int check_pair(const struct gguf_file *base, const struct lora_view *v,
                      const struct lora_tensor *const *idx, const struct lora_tensor *a,
                      struct lora_summary *sum, uint8_t *layers, struct mf_err *err)
{
    char stem[GGUF_MAX_NAME], bname[GGUF_MAX_NAME + 8];
    size_t sl = strlen(a->name) - strlen(".lora_a");
    snprintf(stem, sizeof stem, "%.*s", (int)sl, a->name);
    snprintf(bname, sizeof bname, "%s.lora_b", stem);
    const struct lora_tensor *b = find_sorted(idx, v->n_tensors, bname);
    if (!b)
        return mf_err_set(err, MF_EFORMAT, "%s: tensor '%s' has no matching '%s'", v->name,
                          a->name, bname);
    int rc = check_half(v->name, a, err);
    if (!rc)
        rc = check_half(v->name, b, err);
    if (rc)
        return rc;
    const struct gguf_tensor *w = gguf_find_tensor(base, stem);
    if (!w) {
        int tied = strcmp(stem, "output.weight") == 0 && gguf_find_tensor(base, "token_embd.weight");
        return mf_err_set(err, MF_EINVAL,
                          "%s: tensor '%s' adapts '%s', which the base model %s does not have%s",
                          v->name, a->name, stem, gguf_name(base),
                          tied ? " (its output is tied to token_embd.weight)"
                               : " (wrong base model?)");
    }
    if (w->n_dims > 2 && (w->ne[2] != 1 || w->ne[3] != 1))
        return mf_err_set(err, MF_EUNSUPPORTED, "%s: base tensor '%s' of %s is not 2-D", v->name,
                          stem, gguf_name(base));
    int embd = strcmp(stem, "token_embd.weight") == 0;
    rc = embd ? check_embd(v->name, a, b, w, err) : check_linear(v->name, a, b, w, err);
    if (rc)
        return rc;
    uint64_t r64 = embd ? a->ne[0] : a->ne[1];
    if (r64 > LORA_CHECK_MAX_RANK)
        return mf_err_set(err, MF_EUNSUPPORTED, "%s: tensor '%s' has rank %" PRIu64
                          " (at most %d)", v->name, a->name, r64, LORA_CHECK_MAX_RANK);
    int32_t rank = (int32_t)r64;
    if (!sum->n_pairs || rank < sum->rank_min)
        sum->rank_min = rank;
    if (rank > sum->rank_max)
        sum->rank_max = rank;
    sum->n_pairs++;
    note_target(sum, stem, layers, 8u * 4096);
    return 0;
}

/* Every tensor is a half or an ignored norm; every lora_b has its lora_a. */
static int check_names(const struct lora_view *v, const struct lora_tensor *const *idx,
                       struct lora_summary *sum, struct mf_err *err)
{
    for (size_t i = 0; i < v->n_tensors; i++) {
        const struct lora_tensor *t = &v->tensors[i];
        if (ends_with(t->name, ".lora_a"))
            continue;
        if (ends_with(t->name, ".lora_b")) {
            char aname[GGUF_MAX_NAME + 8];
            snprintf(aname, sizeof aname, "%.*s.lora_a",
                     (int)(strlen(t->name) - strlen(".lora_b")), t->name);
            if (!find_sorted(idx, v->n_tensors, aname))
                return mf_err_set(err, MF_EFORMAT, "%s: tensor '%s' has no matching '%s'",
                                  v->name, t->name, aname);
            continue;
        }
        if (ends_with(t->name, "_norm.weight")) {
            sum->n_ignored++; /* mergekit adds these; llama.cpp ignores them */
            continue;
        }
        return mf_err_set(err, MF_EFORMAT,
                          "%s: tensor '%s' is neither a .lora_a nor a .lora_b (unexpected suffix)",
                          v->name, t->name);
    }
    return 0;
}

static void add_warning(struct lora_summary *sum, const char *w)
{
    size_t used = strlen(sum->warning);
    snprintf(sum->warning + used, sizeof sum->warning - used, "%s%s", used ? "; " : "", w);
}

static int check_arch(const struct gguf_file *base, const struct lora_view *v,
                      struct lora_summary *sum, struct mf_err *err)
{
    struct gguf_str bs;
    if (str_is(base, "general.type", "adapter"))
        return mf_err_set(err, MF_EINVAL, "the base model %s is itself an adapter",
                          gguf_name(base));
    if (!str_kv(base, "general.architecture", &bs))
        return mf_err_set(err, MF_EFORMAT, "the base model %s has no general.architecture",
                          gguf_name(base));
    if (!v->arch[0])
        return mf_err_set(err, MF_EFORMAT, "%s has no general.architecture", v->name);
    if (!gguf_str_eq(bs, v->arch))
        return mf_err_set(err, MF_EINVAL,
                          "%s is an adapter for architecture '%s', but the base model %s is "
                          "'%.*s'",
                          v->name, v->arch, gguf_name(base), (int)(bs.len > 63 ? 63 : bs.len),
                          bs.p);
    snprintf(sum->arch, sizeof sum->arch, "%s", v->arch);
    return 0;
}

int lora_check(const struct gguf_file *base, const struct lora_view *v, struct lora_summary *out,
               struct mf_err *err)
{
    struct lora_summary sum;
    memset(&sum, 0, sizeof sum);
    int rc = check_arch(base, v, &sum, err);
    if (rc)
        return rc;
    const struct lora_tensor **idx = malloc((v->n_tensors ? v->n_tensors : 1) * sizeof *idx);
    uint8_t *layers = calloc(4096, 1);
    if (!idx || !layers) {
        free(idx);
        free(layers);
        return mf_err_set(err, MF_ENOMEM, "out of memory checking %s", v->name);
    }
    for (size_t i = 0; i < v->n_tensors; i++)
        idx[i] = &v->tensors[i];
    qsort(idx, v->n_tensors, sizeof *idx, cmp_tensor_name);
    rc = check_names(v, idx, &sum, err);
    for (size_t i = 0; !rc && i < v->n_tensors; i++)
        if (ends_with(v->tensors[i].name, ".lora_a"))
            rc = check_pair(base, v, idx, &v->tensors[i], &sum, layers, err);
    free(idx);
    free(layers);
    if (rc)
        return rc;
    if (!sum.n_pairs)
        return mf_err_set(err, MF_EFORMAT, "%s has no lora_a/lora_b tensors", v->name);
    sum.has_alpha = v->has_alpha && v->alpha != 0.0f;
    sum.alpha = v->alpha;
    if (!sum.has_alpha)
        add_warning(&sum, "no adapter.lora.alpha: the raw scale is used (scale, not "
                          "scale * alpha / rank), as llama.cpp does");
    if (sum.rank_max > MF_LORA_MAX_RANK) {
        char w[160];
        snprintf(w, sizeof w, "rank %d is above the %d mfc-serve applies at run time: merge "
                 "this adapter (ADAPTER --merge)", (int)sum.rank_max, MF_LORA_MAX_RANK);
        add_warning(&sum, w);
    }
        if (strstr(sum.targets, "token_embd"))
        add_warning(&sum, "the token_embd pair is checked, but mfc-serve applies only projection "
                          "adapters at run time: merge this adapter (ADAPTER --merge) to use it");
    if (out)
        *out = sum;
    return 0;
}

int lora_describe(const struct lora_view *v, struct lora_summary *out)
{
    struct lora_summary sum;
    memset(&sum, 0, sizeof sum);
    snprintf(sum.arch, sizeof sum.arch, "%s", v->arch);
    uint8_t *layers = calloc(4096, 1);
    for (size_t i = 0; layers && i < v->n_tensors; i++) {
        const struct lora_tensor *a = &v->tensors[i];
        if (!ends_with(a->name, ".lora_a")) {
            sum.n_ignored += !ends_with(a->name, ".lora_b");
            continue;
        }
        char stem[GGUF_MAX_NAME];
        snprintf(stem, sizeof stem, "%.*s", (int)(strlen(a->name) - strlen(".lora_a")), a->name);
        int32_t rank = (int32_t)(strcmp(stem, "token_embd.weight") == 0 ? a->ne[0] : a->ne[1]);
        if (!sum.n_pairs || rank < sum.rank_min)
            sum.rank_min = rank;
        if (rank > sum.rank_max)
            sum.rank_max = rank;
        sum.n_pairs++;
        note_target(&sum, stem, layers, 8u * 4096);
    }
    int rc = layers || !v->n_tensors ? 0 : MF_ENOMEM;
    free(layers);
    sum.has_alpha = v->has_alpha && v->alpha != 0.0f;
    sum.alpha = v->alpha;
    *out = sum;
    return rc;
}

int lora_check_files(const char *adapter_path, const char *base_path, struct lora_summary *sum,
                     struct mf_err *err)
{
    struct gguf_file *a = NULL, *b = NULL;
    struct lora_view v;
    struct lora_tensor *t = NULL;
    int rc = gguf_open(adapter_path, &a, err);
    if (!rc)
        rc = gguf_open(base_path, &b, err);
    if (!rc)
        rc = lora_view_gguf(a, &v, &t, err);
    if (!rc)
        rc = lora_check(b, &v, sum, err);
    free(t);
    gguf_close(b);
    gguf_close(a);
    return rc;
}
