/*
 * lora_merge.c: W' = W + s·B·A over a GGUF, streamed tensor by tensor, and
 * requantization to a file type (lora_merge.h).
 *
 * Design: the base and the adapters are mapped (gguf.h); each adapted
 * tensor's pairs are decoded once into two F32 factors, L (one row of rank
 * coefficients per output row) and R (rank rows of the base row length):
 * for an ordinary projection L = B and R = A, for token_embd L = A and
 * R = Bᵀ. Every output row is then dequant(W row) + Σ s·L[row]·R, encoded in
 * the output type, in windows of rows (WINDOW_FLOATS) split over threads.
 * Rows are independent and each is computed the same way whatever the
 * thread count, so the output bytes do not depend on it.
 *
 * Invariants: after plan_merge every patch has shapes that fit its base
 * tensor and a rank in 1..LORA_MERGE_MAX_RANK; every tensor info is added to
 * the writer before any data is written; the writer owns the only file
 * created and removes it on every failure path.
 */
#include "convert/lora_merge.h"

#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/stat.h>

#include "common/cpu.h"
#include "common/gguf.h"
#include "convert/lora.h"

#define WINDOW_FLOATS (1u << 22) /* 16 MiB of F32 rows per window */
#define TILE 256                 /* row elements updated by all ranks at once (1 KiB in L1) */
#define MAX_THREADS 64

/* One lora_a/lora_b pair applied to one base tensor. */
struct patch {
    const struct gguf_tensor *a; /* borrowed from the adapter's file */
    const struct gguf_tensor *b; /* borrowed */
    float s;                     /* scale * alpha / rank (or scale) */
    int embd;                    /* token_embd layout: L = A, R = Bᵀ */
    uint64_t rank;               /* inner dimension */
};

/* Everything one merge holds open. */
struct merge {
    const char *base_path;            /* borrowed */
    struct gguf_file *base;           /* owned */
    struct gguf_file **ad;            /* owned: n_ad adapter files */
    size_t n_ad;                      /* entries in ad */
    struct patch *patches;            /* owned: n_tensors * n_ad slots */
    uint32_t *n_patches;              /* owned: patches used per base tensor */
    enum ggml_type *out_type;         /* owned: each base tensor's output type */
    const struct lora_merge_opts *o;  /* borrowed */
    struct lora_merge_stats st;       /* counts so far */
};

/* ---- checks ---------------------------------------------------------------- */

/* Bytes of one row of ne0 elements of type t (both already validated). */
static size_t row_bytes(uint32_t t, uint64_t ne0)
{
    uint64_t b = 0;
    if (ggml_type_row_size(t, ne0, &b) != 0)
        return 0;
    return (size_t)b;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* "[a, b]" or "[a, b, c, d]" for messages. */
static void shape_str(const struct gguf_tensor *t, char *buf, size_t cap)
{
    if (t->ne[2] == 1 && t->ne[3] == 1)
        snprintf(buf, cap, "[%" PRIu64 ", %" PRIu64 "]", t->ne[0], t->ne[1]);
    else
        snprintf(buf, cap, "[%" PRIu64 ", %" PRIu64 ", %" PRIu64 ", %" PRIu64 "]", t->ne[0],
                 t->ne[1], t->ne[2], t->ne[3]);
}

/* A string KV equal to want; MF_EFORMAT/EUNSUPPORTED naming what was found. */
static int check_str(const struct gguf_file *gf, const char *key, const char *want, int code,
                     const char *why, struct mf_err *err)
{
    struct gguf_str s;
    struct mf_err ignored;
    int rc = gguf_get_str(gf, key, &s, &ignored);
    if (rc || !gguf_str_eq(s, want))
        return mf_err_set(err, code, "%s: %s is '%.*s', expected '%s'%s", gguf_name(gf), key,
                          rc ? 0 : (int)(s.len > 64 ? 64 : s.len), rc ? "" : s.p, want, why);
    return 0;
}

/* The identity keys of adapter gf against the base's architecture. */
static int check_identity(const struct gguf_file *base, const struct gguf_file *gf,
                          struct mf_err *err)
{
    struct gguf_str arch;
    char want[128];
    int rc = check_str(gf, "general.type", "adapter", MF_EFORMAT, " (not a LoRA adapter)", err);
    if (!rc)
        rc = check_str(gf, "adapter.type", "lora", MF_EUNSUPPORTED, "", err);
    if (rc)
        return rc;
    if (gguf_get_str(base, "general.architecture", &arch, err) != 0)
        return mf_err_prefix(err, "the base model has no architecture");
    snprintf(want, sizeof want, "%.*s", (int)(arch.len > 100 ? 100 : arch.len), arch.p);
    return check_str(gf, "general.architecture", want, MF_EINVAL,
                     " (the base model's architecture; wrong base model?)", err);
}

/* Checks the pair (a, b) against base tensor w and fills p. */
static int check_pair(const struct gguf_file *gf, const struct gguf_tensor *w,
                      const struct gguf_tensor *a, const struct gguf_tensor *b, float alpha,
                      float scale, struct patch *p, struct mf_err *err)
{
    char sw[96], sa[96], sb[96];
    shape_str(w, sw, sizeof sw);
    shape_str(a, sa, sizeof sa);
    shape_str(b, sb, sizeof sb);
    const struct gguf_tensor *bad = !quant_can_dequantize((enum ggml_type)a->type)   ? a
                                    : !quant_can_dequantize((enum ggml_type)b->type) ? b
                                                                                     : NULL;
    if (bad)
        return mf_err_set(err, MF_EUNSUPPORTED, "%s: LoRA tensor '%s' has type %s, which mfc "
                          "cannot decode", gguf_name(gf), bad->name, ggml_type_name(bad->type));
    if (w->ne[2] != 1 || w->ne[3] != 1)
        return mf_err_set(err, MF_EUNSUPPORTED, "%s: base tensor '%s' %s is not 2-D; only "
                          "matrices can take a LoRA", gguf_name(gf), w->name, sw);
    if (!quant_can_dequantize((enum ggml_type)w->type))
        return mf_err_set(err, MF_EUNSUPPORTED, "%s: base tensor '%s' has type %s, which mfc "
                          "cannot decode to merge into", gguf_name(gf), w->name,
                          ggml_type_name(w->type));
    int embd = strcmp(w->name, "token_embd.weight") == 0;
    int dims_ok = a->ne[2] == 1 && a->ne[3] == 1 && b->ne[2] == 1 && b->ne[3] == 1;
    /* token_embd: lora_a [rank, n_vocab], lora_b [rank, n_embd] (llama-adapter.cpp) */
    int fits = embd ? b->ne[1] == w->ne[0] && a->ne[1] == w->ne[1]
                    : a->ne[0] == w->ne[0] && b->ne[1] == w->ne[1];
    if (!dims_ok || !fits)
        return mf_err_set(err, MF_EINVAL,
                          "%s: LoRA tensors '%s' %s and '%s' %s do not fit base tensor '%s' %s "
                          "(need lora_a %s, lora_b %s; wrong base model?)",
                          gguf_name(gf), a->name, sa, b->name, sb, w->name, sw,
                          embd ? "[rank, ne1]" : "[ne0, rank]", embd ? "[rank, ne0]" : "[rank, ne1]");
    uint64_t rank = embd ? a->ne[0] : a->ne[1];
    if (rank != b->ne[0] || rank == 0 || rank > LORA_MERGE_MAX_RANK)
        return mf_err_set(err, MF_EINVAL,
                          "%s: LoRA tensors '%s' %s and '%s' %s disagree on the rank (lora_a is "
                          "not transposed as llama.cpp expects, or the rank is outside 1..%d)",
                          gguf_name(gf), a->name, sa, b->name, sb, LORA_MERGE_MAX_RANK);
    p->a = a;
    p->b = b;
    p->embd = embd;
    p->rank = rank;
    p->s = alpha != 0.0f ? scale * alpha / (float)rank : scale;
    return 0;
}

/* Checks adapter k (lora_check.c's rules first, the checks every build's
 * ADAPTER step runs, so both give the same messages; then what the merge
 * itself relies on) and records its pairs in m->patches. */
static int plan_adapter(struct merge *m, size_t k, struct mf_err *err)
{
    const struct gguf_file *gf = m->ad[k];
    struct lora_view v;
    struct lora_tensor *lt = NULL;
    float alpha = 0.0f;
    int rc = lora_view_gguf(gf, &v, &lt, err);
    if (!rc)
        rc = lora_check(m->base, &v, NULL, err);
    free(lt);
    if (!rc)
        rc = check_identity(m->base, gf, err);
    if (rc)
        return rc;
    if (gguf_find_kv(gf, "adapter.lora.alpha") &&
        gguf_get_f32(gf, "adapter.lora.alpha", &alpha, err) != 0)
        return mf_err_prefix(err, "%s", gguf_name(gf));
    for (uint64_t i = 0; i < gguf_n_tensors(gf); i++) {
        const struct gguf_tensor *t = gguf_tensor_at(gf, i);
        char stem[GGUF_MAX_NAME + 8], other[GGUF_MAX_NAME + 16];
        int is_a = ends_with(t->name, ".lora_a");
        if (!is_a && !ends_with(t->name, ".lora_b")) {
            if (ends_with(t->name, "_norm.weight") || ends_with(t->name, ".norm.weight")) {
                m->st.n_ignored++; /* mergekit passes norms through; llama.cpp ignores them */
                continue;
            }
            return mf_err_set(err, MF_EFORMAT, "%s: LoRA tensor '%s' has an unexpected suffix "
                              "(want .lora_a or .lora_b)", gguf_name(gf), t->name);
        }
        size_t n = strlen(t->name) - strlen(".lora_a");
        snprintf(stem, sizeof stem, "%.*s", (int)n, t->name);
        snprintf(other, sizeof other, "%s.lora_%c", stem, is_a ? 'b' : 'a');
        const struct gguf_tensor *o = gguf_find_tensor(gf, other);
        if (!o)
            return mf_err_set(err, MF_EFORMAT, "%s: LoRA tensor '%s' has no matching '%s'",
                              gguf_name(gf), t->name, other);
        if (!is_a)
            continue; /* handled with its lora_a */
        const struct gguf_tensor *w = gguf_find_tensor(m->base, stem);
        if (!w)
            return mf_err_set(err, MF_EINVAL, "%s: LoRA tensor '%s' adapts '%s', which %s does "
                              "not have (wrong base model?)", gguf_name(gf), t->name, stem,
                              m->base_path);
        uint64_t wi = (uint64_t)(w - gguf_tensor_at(m->base, 0));
        struct patch *p = &m->patches[wi * m->n_ad + m->n_patches[wi]];
        rc = check_pair(gf, w, t, o, alpha, m->o->adapters[k].scale, p, err);
        if (rc)
            return rc;
        m->st.n_pairs++;
        if (p->s != 0.0f)
            m->n_patches[wi]++; /* scale 0 changes nothing: the tensor stays a byte copy */
    }
    return 0;
}

static int is_float_type(enum ggml_type t)
{
    return t == GGML_TYPE_F32 || t == GGML_TYPE_F16 || t == GGML_TYPE_BF16;
}

/* What llama.cpp's mix rules need, from the base's metadata. arch is
 * malloc'd into *arch_out (the info borrows it). */
static int model_info(const struct gguf_file *gf, struct quant_model_info *mi, char **arch_out,
                      struct mf_err *err)
{
    struct gguf_str s;
    char key[160];
    uint32_t v = 0, heads = 0, kv_heads = 0;
    struct mf_err ignored;
    memset(mi, 0, sizeof *mi);
    if (gguf_get_str(gf, "general.architecture", &s, err) != 0)
        return mf_err_prefix(err, "cannot requantize");
    if (!(*arch_out = gguf_str_dup(s)))
        return mf_err_set(err, MF_ENOMEM, "out of memory");
    mi->arch = *arch_out;
    snprintf(key, sizeof key, "%s.block_count", *arch_out);
    if (gguf_get_u32(gf, key, &v, &ignored) == 0)
        mi->n_layer = (int32_t)(v > INT32_MAX ? INT32_MAX : v);
    snprintf(key, sizeof key, "%s.expert_count", *arch_out);
    if (gguf_get_u32(gf, key, &v, &ignored) == 0)
        mi->n_expert = (int32_t)(v > INT32_MAX ? INT32_MAX : v);
    snprintf(key, sizeof key, "%s.attention.head_count", *arch_out);
    if (gguf_get_u32(gf, key, &heads, &ignored) != 0)
        heads = 0;
    snprintf(key, sizeof key, "%s.attention.head_count_kv", *arch_out);
    if (gguf_get_u32(gf, key, &kv_heads, &ignored) != 0)
        kv_heads = heads;
    mi->n_gqa = kv_heads ? (int32_t)(heads / kv_heads) : 0;
    mi->has_output = gguf_find_tensor(gf, "output.weight") != NULL;
    mi->is_70b = strcmp(*arch_out, "llama") == 0 && mi->n_layer == 80;
    return 0;
}

/* Picks every tensor's output type (requantizing or not). */
static int plan_types(struct merge *m, struct mf_err *err)
{
    struct quant_model_info mi;
    char *arch = NULL;
    int rc = 0;
    uint64_t n = gguf_n_tensors(m->base);
    enum quant_ftype ft = m->o->ftype;
    int upcast = ft == QUANT_FTYPE_ALL_F32 || ft == QUANT_FTYPE_MOSTLY_F16 ||
                 ft == QUANT_FTYPE_MOSTLY_BF16;
    if (m->o->quantize) {
        if (!quant_ftype_can_build(m->o->ftype))
            return mf_err_set(err, MF_EUNSUPPORTED, "mfc cannot build file type %s",
                              quant_ftype_name(m->o->ftype) ? quant_ftype_name(m->o->ftype) : "?");
        rc = model_info(m->base, &mi, &arch, err);
    }
    for (uint64_t i = 0; !rc && i < n; i++) {
        const struct gguf_tensor *t = gguf_tensor_at(m->base, i);
        m->out_type[i] = (enum ggml_type)t->type;
        if (!m->o->quantize)
            continue;
        /* down to a quantized type only from floats (ollama create -q's rule:
         * quantizing twice compounds the loss); up to F32/F16/BF16 from anything */
        if (!is_float_type((enum ggml_type)t->type) && !upcast) {
            rc = mf_err_set(err, MF_EUNSUPPORTED,
                            "%s: quantization is only supported for F16, BF16 and F32 models, "
                            "but tensor '%s' is %s (requantizing would compound the loss; "
                            "start from the F16/BF16/F32 GGUF, or write F16/BF16/F32)",
                            m->base_path, t->name, ggml_type_name(t->type));
            break;
        }
        struct quant_tensor_info ti = {t->name, (enum ggml_type)t->type, (int)t->n_dims,
                                       {(int64_t)t->ne[0], (int64_t)t->ne[1], (int64_t)t->ne[2],
                                        (int64_t)t->ne[3]}};
        if (ti.n_dims < 1)
            ti.n_dims = 1;
        rc = quant_ftype_tensor_type(m->o->ftype, &mi, &ti, &m->out_type[i], err);
        if (rc)
            rc = mf_err_prefix(err, "%s: tensor '%s'", m->base_path, t->name);
    }
    for (uint64_t i = 0; !rc && i < n; i++) {
        const struct gguf_tensor *t = gguf_tensor_at(m->base, i);
        int changes = m->n_patches[i] || m->out_type[i] != (enum ggml_type)t->type;
        if (changes && !quant_can_quantize(m->out_type[i]))
            rc = mf_err_set(err, MF_EUNSUPPORTED, "%s: tensor '%s' would have to be written as "
                            "%s, which mfc cannot encode (pass --quantize with another type)",
                            m->base_path, t->name, ggml_type_name(m->out_type[i]));
        else if (changes && !quant_can_dequantize((enum ggml_type)t->type))
            rc = mf_err_set(err, MF_EUNSUPPORTED, "%s: tensor '%s' has type %s, which mfc "
                            "cannot decode", m->base_path, t->name, ggml_type_name(t->type));
        else if (changes && t->ne[0] % (uint64_t)ggml_type_block_size(m->out_type[i]) != 0)
            rc = mf_err_set(err, MF_EINVAL, "%s: tensor '%s' rows of %" PRIu64 " do not divide "
                            "into %s blocks", m->base_path, t->name, t->ne[0],
                            ggml_type_name(m->out_type[i]));
    }
    free(arch);
    return rc;
}

static void merge_fini(struct merge *m)
{
    for (size_t k = 0; k < m->n_ad; k++)
        gguf_close(m->ad[k]);
    free(m->ad);
    gguf_close(m->base);
    free(m->patches);
    free(m->n_patches);
    free(m->out_type);
}

/* Opens everything and checks it; m is released by merge_fini either way. */
static int merge_init(struct merge *m, const char *base_path, const struct lora_merge_opts *o,
                      struct mf_err *err)
{
    memset(m, 0, sizeof *m);
    m->base_path = base_path;
    m->o = o;
    if (o->n_adapters > LORA_MERGE_MAX_ADAPTERS)
        return mf_err_set(err, MF_EINVAL, "at most %d adapters can be merged at once",
                          LORA_MERGE_MAX_ADAPTERS);
    if (o->n_adapters == 0 && !o->quantize)
        return mf_err_set(err, MF_EINVAL, "nothing to do: no adapter and no --quantize");
    int rc = gguf_open(base_path, &m->base, err);
    if (rc)
        return rc;
    uint64_t n = gguf_n_tensors(m->base);
    size_t slots = o->n_adapters ? o->n_adapters : 1;
    m->ad = calloc(slots, sizeof *m->ad);
    m->patches = calloc(n ? n * slots : 1, sizeof *m->patches);
    m->n_patches = calloc(n ? n : 1, sizeof *m->n_patches);
    m->out_type = calloc(n ? n : 1, sizeof *m->out_type);
    if (!m->ad || !m->patches || !m->n_patches || !m->out_type)
        return mf_err_set(err, MF_ENOMEM, "out of memory");
    m->n_ad = o->n_adapters;
    for (size_t k = 0; !rc && k < o->n_adapters; k++)
        rc = gguf_open(o->adapters[k].path, &m->ad[k], err);
    for (size_t k = 0; !rc && k < o->n_adapters; k++)
        rc = plan_adapter(m, k, err);
    if (!rc)
        rc = plan_types(m, err);
    return rc;
}

int lora_merge_check(const char *base_path, const struct lora_merge_opts *o, struct mf_err *err)
{
    struct merge m;
    int rc = merge_init(&m, base_path, o, err);
    merge_fini(&m);
    return rc;
}

/* ---- computing -------------------------------------------------------------- */

/* A patch decoded to F32: L is one row of rank values per output row, R
 * rank rows of the base row length. */
struct factors {
    float *L;      /* owned: n_rows * rank */
    float *R;      /* owned: rank * ne0 */
    uint64_t rank; /* inner dimension */
    float s;       /* the patch's scale */
};

/* The index of the first NaN or infinity in x[0..n), or n. */
static uint64_t first_nonfinite(const float *x, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++)
        if (!isfinite(x[i]))
            return i;
    return n;
}

/* Decodes rows of adapter tensor t (row length t->ne[0]) into dst; a NaN or
 * infinity is refused (it would poison every weight it touches). */
static int decode_rows(const struct gguf_tensor *t, float *dst, struct mf_err *err)
{
    uint64_t ne0 = t->ne[0], rows = ne0 ? t->n_elements / ne0 : 0;
    size_t rb = row_bytes(t->type, ne0);
    for (uint64_t r = 0; r < rows; r++) {
        int rc = quant_dequantize_row((enum ggml_type)t->type, (const uint8_t *)t->data + r * rb,
                                      dst + r * ne0, (int64_t)ne0, err);
        if (rc)
            return mf_err_prefix(err, "LoRA tensor '%s'", t->name);
        uint64_t bad = first_nonfinite(dst + r * ne0, ne0);
        if (bad < ne0)
            return mf_err_set(err, MF_EINVAL, "LoRA tensor '%s' holds a NaN or infinity (row %"
                              PRIu64 ", element %" PRIu64 ")", t->name, r, bad);
    }
    return 0;
}

static int factors_make(const struct patch *p, struct factors *f, struct mf_err *err)
{
    memset(f, 0, sizeof *f);
    f->rank = p->rank;
    f->s = p->s;
    f->L = malloc((p->embd ? p->a->n_elements : p->b->n_elements) * sizeof(float));
    f->R = malloc((p->embd ? p->b->n_elements : p->a->n_elements) * sizeof(float));
    if (!f->L || !f->R)
        return mf_err_set(err, MF_ENOMEM, "out of memory decoding '%s'", p->a->name);
    if (!p->embd) {
        int rc = decode_rows(p->b, f->L, err); /* B: one row of rank per output row */
        return rc ? rc : decode_rows(p->a, f->R, err); /* A: rank rows of ne0 */
    }
    /* token_embd: L = A rows (rank per token), R = Bᵀ (rank rows of n_embd) */
    int rc = decode_rows(p->a, f->L, err);
    if (rc)
        return rc;
    uint64_t ne = p->b->ne[1], r = p->rank;
    float *tmp = malloc(p->b->n_elements * sizeof(float));
    if (!tmp)
        return mf_err_set(err, MF_ENOMEM, "out of memory decoding '%s'", p->b->name);
    rc = decode_rows(p->b, tmp, err);
    for (uint64_t e = 0; !rc && e < ne; e++)
        for (uint64_t k = 0; k < r; k++)
            f->R[k * ne + e] = tmp[e * r + k];
    free(tmp);
    return rc;
}

static void factors_fini(struct factors *f)
{
    free(f->L);
    free(f->R);
}

/*
 * x[0..n) += Σ_q c[q] · R[q][0..n) (R rows of n floats), the q terms added
 * one after another in q order, tile by tile so x stays in L1. Compiled
 * twice: portable, and for AVX2 (the fixed-size tile loop vectorizes without
 * FMA: the same additions and multiplications in the same order, so both
 * give the same bits, and builds do not depend on the CPU).
 */
#define ADD_RANKS_BODY                                                                         \
    uint64_t e0 = 0;                                                                           \
    for (; e0 + TILE <= n; e0 += TILE)                                                         \
        for (uint64_t q = 0; q < rank; q++) {                                                  \
            const float cq = c[q];                                                             \
            const float *restrict r = R + q * n + e0;                                          \
            float *restrict xt = x + e0;                                                       \
            for (int e = 0; e < TILE; e++)                                                     \
                xt[e] = xt[e] + cq * r[e];                                                     \
        }                                                                                      \
    for (uint64_t q = 0; q < rank; q++)                                                        \
        for (uint64_t e = e0; e < n; e++)                                                      \
            x[e] = x[e] + c[q] * R[q * n + e];

static void add_ranks_c(float *restrict x, const float *restrict R, const float *restrict c,
                        uint64_t rank, uint64_t n)
{
    ADD_RANKS_BODY
}

#if defined(__x86_64__) || defined(__i386__)
__attribute__((target("avx2"))) static void add_ranks_avx2(float *restrict x,
                                                           const float *restrict R,
                                                           const float *restrict c,
                                                           uint64_t rank, uint64_t n)
{
    ADD_RANKS_BODY
}
#endif

typedef void (*add_ranks_fn)(float *restrict, const float *restrict, const float *restrict,
                             uint64_t, uint64_t);

/* The kernel this CPU runs best (same results either way). */
static add_ranks_fn add_ranks_pick(void)
{
#if defined(__x86_64__) || defined(__i386__)
    struct mf_cpu_features f;
    mf_cpu_detect(&f);
    if (f.avx2)
        return add_ranks_avx2;
#endif
    return add_ranks_c;
}

/* One window of rows, shared by the threads that split it. */
struct window {
    const struct gguf_tensor *t; /* borrowed: the base tensor */
    enum ggml_type out;          /* output type */
    const struct factors *f;     /* borrowed: n_f decoded patches */
    size_t n_f;                  /* entries in f */
    uint64_t row0;               /* first row of the window in the tensor */
    float *tmp;                  /* scratch: n_rows * ne0 floats */
    uint8_t *dst;                /* encoded rows */
    size_t out_rb;               /* bytes of one encoded row */
    add_ranks_fn add_ranks;      /* the delta kernel */
    float *coef;                 /* scratch: one c[] per thread slice (rank_max each) */
    uint64_t rank_max;           /* the largest rank among f[] */
};

/* Rows [lo, hi) of the window (indices within it). */
struct slice {
    const struct window *w; /* borrowed */
    uint64_t lo, hi;        /* window row range */
    float *c;               /* this slice's coefficient scratch (rank_max floats) */
    int rc;                 /* 0 or the first failure */
    struct mf_err err;      /* that failure */
};

static void do_rows(struct slice *sl)
{
    const struct window *w = sl->w;
    const struct gguf_tensor *t = w->t;
    uint64_t ne0 = t->ne[0];
    size_t in_rb = row_bytes(t->type, ne0);
    for (uint64_t i = sl->lo; i < sl->hi && !sl->rc; i++) {
        uint64_t row = w->row0 + i;
        float *x = w->tmp + i * ne0;
        sl->rc = quant_dequantize_row((enum ggml_type)t->type, (const uint8_t *)t->data + row * in_rb,
                                      x, (int64_t)ne0, &sl->err);
        for (size_t k = 0; !sl->rc && k < w->n_f; k++) {
            const struct factors *f = &w->f[k];
            const float *l = f->L + row * f->rank;
            for (uint64_t q = 0; q < f->rank; q++)
                sl->c[q] = f->s * l[q];
            w->add_ranks(x, f->R, sl->c, f->rank, ne0);
        }
        if (!sl->rc && first_nonfinite(x, ne0) < ne0)
            sl->rc = mf_err_set(&sl->err, MF_EINVAL, "row %" PRIu64 " holds a NaN or infinity "
                                "(in the base, or the merged sum overflowed); nothing written",
                                row);
        if (!sl->rc)
            sl->rc = quant_quantize_row(w->out, x, w->dst + i * w->out_rb, (int64_t)ne0, &sl->err);
    }
}

static void *slice_main(void *arg)
{
    do_rows(arg);
    return NULL;
}

/* Encodes window rows [0, n) with up to threads threads. */
static int run_window(const struct window *w, uint64_t n, int threads, struct mf_err *err)
{
    struct slice sl[MAX_THREADS];
    pthread_t th[MAX_THREADS];
    int started[MAX_THREADS] = {0};
    uint64_t nt = threads < 1 ? 1 : (uint64_t)(threads > MAX_THREADS ? MAX_THREADS : threads);
    if (nt > n)
        nt = n ? n : 1;
    for (uint64_t k = 0; k < nt; k++) {
        sl[k] = (struct slice){w, n * k / nt, n * (k + 1) / nt, w->coef + k * w->rank_max, 0,
                               {0}};
        if (k > 0 && pthread_create(&th[k], NULL, slice_main, &sl[k]) == 0)
            started[k] = 1;
    }
    for (uint64_t k = 0; k < nt; k++)
        if (!started[k])
            do_rows(&sl[k]); /* the first slice, or one whose thread failed to start */
    for (uint64_t k = 0; k < nt; k++)
        if (started[k])
            pthread_join(th[k], NULL);
    for (uint64_t k = 0; k < nt; k++)
        if (sl[k].rc) {
            *err = sl[k].err;
            return mf_err_prefix(err, "tensor '%s'", w->t->name);
        }
    return 0;
}

/* Writes tensor i decoded, merged and encoded again, window by window. */
static int write_computed(struct merge *m, struct gguf_writer *wr, uint64_t i, struct mf_err *err)
{
    const struct gguf_tensor *t = gguf_tensor_at(m->base, i);
    struct factors f[LORA_MERGE_MAX_ADAPTERS];
    size_t n_f = 0;
    int rc = 0;
    uint64_t ne0 = t->ne[0], rows = ne0 ? t->n_elements / ne0 : 0;
    uint64_t win = ne0 >= WINDOW_FLOATS ? 1 : WINDOW_FLOATS / ne0;
    if (win > rows)
        win = rows ? rows : 1;
    struct window w = {t, m->out_type[i], f, 0, 0, NULL, NULL,
                       row_bytes(m->out_type[i], ne0), add_ranks_pick(), NULL, 1};
    for (uint32_t k = 0; !rc && k < m->n_patches[i]; k++) {
        rc = factors_make(&m->patches[i * m->n_ad + k], &f[n_f], err);
        if (f[n_f].rank > w.rank_max)
            w.rank_max = f[n_f].rank;
        n_f++;
    }
    w.n_f = n_f;
    w.coef = rc ? NULL : malloc(MAX_THREADS * w.rank_max * sizeof(float));
    if (!rc && !w.coef)
        rc = mf_err_set(err, MF_ENOMEM, "out of memory for tensor '%s'", t->name);
    w.tmp = rc ? NULL : malloc(win * ne0 * sizeof(float));
    w.dst = rc ? NULL : malloc(win * w.out_rb);
    if (!rc && (!w.tmp || !w.dst))
        rc = mf_err_set(err, MF_ENOMEM, "out of memory for tensor '%s'", t->name);
    for (uint64_t r0 = 0; !rc && r0 < rows; r0 += win) {
        uint64_t n = rows - r0 < win ? rows - r0 : win;
        w.row0 = r0;
        rc = run_window(&w, n, m->o->threads, err);
        if (!rc)
            rc = gguf_writer_write(wr, w.dst, (size_t)(n * w.out_rb), err);
    }
    for (size_t k = 0; k < n_f; k++)
        factors_fini(&f[k]);
    free(w.coef);
    free(w.tmp);
    free(w.dst);
    return rc;
}

/* ---- writing ---------------------------------------------------------------- */

/* Metadata in order; general.file_type set when requantizing, and
 * general.quantization_version added when requantizing gives quantized
 * tensors; without --quantize the metadata is copied unchanged. */
static int write_kvs(struct merge *m, struct gguf_writer *wr, struct mf_err *err)
{
    int rc = 0, had_ft = 0, had_qv = 0, quantized = 0;
    for (uint64_t i = 0; !rc && i < gguf_n_kv(m->base); i++) {
        const struct gguf_kv *kv = gguf_kv_at(m->base, i);
        had_qv |= strcmp(kv->key, "general.quantization_version") == 0;
        if (m->o->quantize && strcmp(kv->key, "general.file_type") == 0) {
            had_ft = 1;
            rc = gguf_writer_add_u32(wr, kv->key, (uint32_t)m->o->ftype, err);
        } else {
            rc = gguf_writer_add_kv(wr, kv, err);
        }
    }
    for (uint64_t i = 0; i < gguf_n_tensors(m->base); i++)
        quantized |= !is_float_type(m->out_type[i]);
    if (!rc && m->o->quantize && !had_ft)
        rc = gguf_writer_add_u32(wr, "general.file_type", (uint32_t)m->o->ftype, err);
    if (!rc && m->o->quantize && quantized && !had_qv)
        rc = gguf_writer_add_u32(wr, "general.quantization_version", 2, err);
    return rc;
}

static int write_all(struct merge *m, const char *out_path, struct mf_err *err)
{
    struct gguf_writer *wr = NULL;
    uint64_t n = gguf_n_tensors(m->base);
    int rc = gguf_writer_open(out_path, &wr, err);
    if (!rc)
        rc = write_kvs(m, wr, err);
    for (uint64_t i = 0; !rc && i < n; i++) {
        const struct gguf_tensor *t = gguf_tensor_at(m->base, i);
        uint32_t nd = t->n_dims ? t->n_dims : 1;
        rc = gguf_writer_add_tensor(wr, t->name, m->out_type[i], nd, t->ne, err);
    }
    for (uint64_t i = 0; !rc && i < n; i++) {
        const struct gguf_tensor *t = gguf_tensor_at(m->base, i);
        if (m->n_patches[i] == 0 && m->out_type[i] == (enum ggml_type)t->type) {
            rc = gguf_writer_write(wr, t->data, (size_t)t->n_bytes, err);
            m->st.n_copied++;
        } else {
            rc = write_computed(m, wr, i, err);
            m->st.n_merged += m->n_patches[i] != 0;
            m->st.n_requant += m->out_type[i] != (enum ggml_type)t->type;
        }
        if (!rc)
            m->st.bytes_out += gguf_writer_tensor_bytes(wr, i);
    }
    if (!rc)
        rc = gguf_writer_finish(wr, err);
    if (!rc)
        m->st.n_tensors = n;
    gguf_writer_free(wr);
    return rc;
}

int lora_merge_file(const char *base_path, const char *out_path, const struct lora_merge_opts *o,
                    struct lora_merge_stats *st, struct mf_err *err)
{
    struct merge m;
    struct stat sb;
    /* the writer renames a temporary over out_path: never over a device
     * (-o /dev/null would replace the device node), a FIFO or a directory */
    if (lstat(out_path, &sb) == 0 && !S_ISREG(sb.st_mode))
        return mf_err_set(err, MF_EINVAL, "%s exists and is not a regular file; the merged "
                          "model is written to a new or regular file only", out_path);
    int rc = merge_init(&m, base_path, o, err);
    if (!rc)
        rc = write_all(&m, out_path, err);
    if (!rc && st)
        *st = m.st;
    merge_fini(&m);
    return rc;
}

int lora_merge_parse_ftype(const char *name, enum quant_ftype *ft, struct mf_err *err)
{
    enum quant_ftype f;
    if (name && quant_ftype_from_name(name, &f) == 0 && quant_ftype_can_build(f)) {
        *ft = f;
        return 0;
    }
    return mf_err_set(err, MF_EUSAGE,
                      "unsupported quantization type '%s': use Q4_K_M, Q5_K_M, Q8_0, F16, BF16, "
                      "F32 (also Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K_S/M/L, Q4_K_S, Q5_K_S, Q6_K)",
                      name ? name : "");
}
