/*
 * test_lora_merge.c: unit tests for convert/lora_merge.c. GGUF bases and
 * LoRA adapters are written here with common/gguf.h's writer (seeded
 * values), merged, and every adapted tensor is compared with W + s·B·A
 * computed independently here in double: F32 within float rounding, F16,
 * Q8_0 and Q4_K within the requantization error (the merged tensor must be
 * as close to the exact sum as encode(exact sum) is, and equal to it almost
 * everywhere: 98% of elements, 90% for the K-quants, whose per-block scale
 * search may settle differently after a last-bit difference). Also: the token_embd layout, untouched tensors and metadata
 * byte for byte, several adapters with their own scales, no alpha, the
 * thread count not changing a byte, requantizing to a file type (and the
 * refusal for quantized sources), and every validation failure naming the
 * tensor and shapes while leaving nothing at the output path.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/file.h"
#include "common/gguf.h"
#include "common/quant.h"
#include "convert/lora_merge.h"
#include "tests/unit/tmpdir.h"

#define NE 256 /* base row length: one Q4_K/Q6_K block */

/* A tensor to write: seeded values in [-amp, amp), encoded as type. */
struct tspec {
    const char *name;
    enum ggml_type type;
    uint32_t n_dims;
    uint64_t ne0, ne1;
    float amp;
    uint32_t seed;
};

struct fixture {
    char dir[64];
    char base[128], qbase[128], fbase[128], a1[128], a2[128], out[128];
};

static float rnd(uint32_t *s)
{
    *s = *s * 1664525u + 1013904223u;
    return (float)((*s >> 8) & 0xffffff) / 16777216.0f * 2.0f - 1.0f;
}

/* Encodes spec's seeded values into a malloc'd buffer of its bytes. */
static uint8_t *encode(const struct tspec *t, size_t *bytes)
{
    uint64_t rb = 0;
    assert_int_equal(ggml_type_row_size(t->type, t->ne0, &rb), 0);
    uint8_t *d = malloc(rb * t->ne1);
    float *row = malloc(t->ne0 * sizeof *row);
    uint32_t s = t->seed;
    struct mf_err err;
    assert_non_null(d);
    assert_non_null(row);
    for (uint64_t r = 0; r < t->ne1; r++) {
        for (uint64_t i = 0; i < t->ne0; i++)
            row[i] = t->amp * rnd(&s);
        assert_int_equal(quant_quantize_row(t->type, row, d + r * rb, (int64_t)t->ne0, &err), 0);
    }
    free(row);
    *bytes = rb * t->ne1;
    return d;
}

enum kind { BASE, ADAPTER_ALPHA, ADAPTER_NO_ALPHA, ADAPTER_OTHER_ARCH };

static void write_gguf(const char *path, enum kind k, float alpha, const struct tspec *ts,
                       size_t n)
{
    struct gguf_writer *w = NULL;
    struct mf_err err;
    assert_int_equal(gguf_writer_open(path, &w, &err), 0);
    assert_int_equal(gguf_writer_add_cstr(w, "general.architecture",
                                          k == ADAPTER_OTHER_ARCH ? "qwen2" : "llama", &err),
                     0);
    if (k == BASE) {
        assert_int_equal(gguf_writer_add_cstr(w, "general.name", "merge-test", &err), 0);
        assert_int_equal(gguf_writer_add_u32(w, "llama.block_count", 1, &err), 0);
        assert_int_equal(gguf_writer_add_u32(w, "llama.attention.head_count", 4, &err), 0);
        assert_int_equal(gguf_writer_add_u32(w, "llama.attention.head_count_kv", 2, &err), 0);
        assert_int_equal(gguf_writer_add_u32(w, "general.file_type", 1, &err), 0);
        assert_int_equal(gguf_writer_add_f32(w, "llama.rope.freq_base", 10000.0f, &err), 0);
    } else {
        assert_int_equal(gguf_writer_add_cstr(w, "general.type", "adapter", &err), 0);
        assert_int_equal(gguf_writer_add_cstr(w, "adapter.type", "lora", &err), 0);
        if (k != ADAPTER_NO_ALPHA)
            assert_int_equal(gguf_writer_add_f32(w, "adapter.lora.alpha", alpha, &err), 0);
    }
    for (size_t i = 0; i < n; i++) {
        uint64_t ne[2] = {ts[i].ne0, ts[i].ne1};
        assert_int_equal(gguf_writer_add_tensor(w, ts[i].name, ts[i].type, ts[i].n_dims, ne, &err),
                         0);
    }
    for (size_t i = 0; i < n; i++) {
        size_t bytes;
        uint8_t *d = encode(&ts[i], &bytes);
        assert_int_equal(gguf_writer_write(w, d, bytes, &err), 0);
        free(d);
    }
    assert_int_equal(gguf_writer_finish(w, &err), 0);
    gguf_writer_free(w);
}

/* The mixed-type base: every codec the merge has to re-encode. */
static const struct tspec base_tensors[] = {
    {"token_embd.weight", GGML_TYPE_F16, 2, NE, 16, 1.0f, 1},
    {"blk.0.attn_norm.weight", GGML_TYPE_F32, 1, NE, 1, 1.0f, 2},
    {"blk.0.attn_q.weight", GGML_TYPE_F32, 2, NE, 64, 1.0f, 3},
    {"blk.0.attn_k.weight", GGML_TYPE_F16, 2, NE, 32, 1.0f, 4},
    {"blk.0.ffn_up.weight", GGML_TYPE_Q8_0, 2, NE, 32, 1.0f, 5},
    {"blk.0.ffn_down.weight", GGML_TYPE_Q4_K, 2, NE, 32, 1.0f, 6},
    {"output.weight", GGML_TYPE_Q6_K, 2, NE, 16, 1.0f, 7},
};

/* Adapter 1: rank 4, alpha 8 (s = scale * 2); token_embd in its own layout. */
static const struct tspec a1_tensors[] = {
    {"blk.0.attn_q.weight.lora_a", GGML_TYPE_F32, 2, NE, 4, 0.5f, 11},
    {"blk.0.attn_q.weight.lora_b", GGML_TYPE_F32, 2, 4, 64, 0.5f, 12},
    {"blk.0.attn_k.weight.lora_a", GGML_TYPE_F16, 2, NE, 4, 0.5f, 13},
    {"blk.0.attn_k.weight.lora_b", GGML_TYPE_F16, 2, 4, 32, 0.5f, 14},
    {"blk.0.ffn_up.weight.lora_a", GGML_TYPE_F32, 2, NE, 4, 0.5f, 15},
    {"blk.0.ffn_up.weight.lora_b", GGML_TYPE_BF16, 2, 4, 32, 0.5f, 16},
    {"blk.0.ffn_down.weight.lora_a", GGML_TYPE_F32, 2, NE, 4, 0.5f, 17},
    {"blk.0.ffn_down.weight.lora_b", GGML_TYPE_F32, 2, 4, 32, 0.5f, 18},
    {"token_embd.weight.lora_a", GGML_TYPE_F32, 2, 4, 16, 0.5f, 19},
    {"token_embd.weight.lora_b", GGML_TYPE_F32, 2, 4, NE, 0.5f, 20},
    {"blk.0.attn_norm.weight", GGML_TYPE_F32, 1, NE, 1, 1.0f, 21}, /* ignored (mergekit) */
};

/* Adapter 2: rank 2, no alpha (s = scale), on attn_q only. */
static const struct tspec a2_tensors[] = {
    {"blk.0.attn_q.weight.lora_a", GGML_TYPE_F16, 2, NE, 2, 0.5f, 31},
    {"blk.0.attn_q.weight.lora_b", GGML_TYPE_F16, 2, 2, 64, 0.5f, 32},
};

/* All F32/F16: a base --quantize may start from. */
static const struct tspec float_tensors[] = {
    {"token_embd.weight", GGML_TYPE_F16, 2, NE, 16, 1.0f, 41},
    {"blk.0.attn_norm.weight", GGML_TYPE_F32, 1, NE, 1, 1.0f, 42},
    {"blk.0.attn_q.weight", GGML_TYPE_F32, 2, NE, 64, 1.0f, 43},
    {"blk.0.attn_v.weight", GGML_TYPE_F32, 2, NE, 32, 1.0f, 44},
    {"blk.0.ffn_down.weight", GGML_TYPE_F16, 2, NE, 32, 1.0f, 45},
    {"output.weight", GGML_TYPE_F32, 2, NE, 16, 1.0f, 46},
};

#define N(a) (sizeof(a) / sizeof((a)[0]))

static int setup(void **state)
{
    struct fixture *fx = calloc(1, sizeof *fx);
    if (!fx)
        return -1;
    if (test_tmpdir_make(fx->dir, sizeof fx->dir, "lora-merge") != 0)
        return -1;
    snprintf(fx->base, sizeof fx->base, "%s/base.gguf", fx->dir);
    snprintf(fx->fbase, sizeof fx->fbase, "%s/float.gguf", fx->dir);
    snprintf(fx->a1, sizeof fx->a1, "%s/a1.gguf", fx->dir);
    snprintf(fx->a2, sizeof fx->a2, "%s/a2.gguf", fx->dir);
    snprintf(fx->out, sizeof fx->out, "%s/out.gguf", fx->dir);
    write_gguf(fx->base, BASE, 0, base_tensors, N(base_tensors));
    write_gguf(fx->fbase, BASE, 0, float_tensors, N(float_tensors));
    write_gguf(fx->a1, ADAPTER_ALPHA, 8.0f, a1_tensors, N(a1_tensors));
    write_gguf(fx->a2, ADAPTER_NO_ALPHA, 0, a2_tensors, N(a2_tensors));
    *state = fx;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *fx = *state;
    test_tmpdir_remove(fx->dir);
    free(fx);
    return 0;
}

/* The tensor decoded to floats (malloc'd). */
static float *decode(const struct gguf_file *gf, const char *name, const struct gguf_tensor **tp)
{
    const struct gguf_tensor *t = gguf_find_tensor(gf, name);
    struct mf_err err;
    uint64_t rb = 0;
    assert_non_null(t);
    assert_int_equal(ggml_type_row_size(t->type, t->ne[0], &rb), 0);
    float *f = malloc(t->n_elements * sizeof *f);
    assert_non_null(f);
    for (uint64_t r = 0; r < t->n_elements / t->ne[0]; r++)
        assert_int_equal(quant_dequantize_row(t->type, (const uint8_t *)t->data + r * rb,
                                              f + r * t->ne[0], (int64_t)t->ne[0], &err),
                         0);
    if (tp)
        *tp = t;
    return f;
}

/* ref += s · delta of the pair for base tensor name in adapter gf (double). */
static void add_delta(double *ref, const struct gguf_file *gf, const char *name, double s,
                      uint64_t ne0, uint64_t ne1)
{
    char an[96], bn[96];
    const struct gguf_tensor *ta, *tb;
    snprintf(an, sizeof an, "%s.lora_a", name);
    snprintf(bn, sizeof bn, "%s.lora_b", name);
    float *A = decode(gf, an, &ta), *B = decode(gf, bn, &tb);
    int embd = strcmp(name, "token_embd.weight") == 0;
    uint64_t r = tb->ne[0];
    for (uint64_t o = 0; o < ne1; o++)
        for (uint64_t i = 0; i < ne0; i++) {
            double d = 0;
            for (uint64_t k = 0; k < r; k++)
                d += embd ? (double)A[o * r + k] * B[i * r + k]   /* A[t][k]·B[e][k] */
                          : (double)B[o * r + k] * A[k * ne0 + i]; /* B[o][k]·A[k][i] */
            ref[o * ne0 + i] += s * d;
        }
    free(A);
    free(B);
}

/* Checks out's tensor name against ref: same type as base; F32 within float
 * rounding; other types as close to ref as encode(ref) is, and equal to it
 * for at least 98% of the elements; and visibly moved from the base. */
static void check_merged(const struct gguf_file *out, const struct gguf_file *base,
                         const char *name, const double *ref)
{
    const struct gguf_tensor *to, *tb;
    float *got = decode(out, name, &to), *w = decode(base, name, &tb);
    uint64_t ne0 = to->ne[0], n = to->n_elements;
    struct mf_err err;
    uint64_t rb = 0;
    assert_int_equal(to->type, tb->type);
    assert_int_equal(ggml_type_row_size(to->type, ne0, &rb), 0);
    float *reff = malloc(n * sizeof *reff), *exp = malloc(n * sizeof *exp);
    uint8_t *enc = malloc(rb);
    assert_non_null(reff);
    assert_non_null(exp);
    assert_non_null(enc);
    for (uint64_t i = 0; i < n; i++)
        reff[i] = (float)ref[i];
    for (uint64_t r = 0; r < n / ne0; r++) {
        assert_int_equal(quant_quantize_row(to->type, reff + r * ne0, enc, (int64_t)ne0, &err), 0);
        assert_int_equal(quant_dequantize_row(to->type, enc, exp + r * ne0, (int64_t)ne0, &err), 0);
    }
    double e_got = 0, e_exp = 0, moved = 0, maxabs = 0;
    uint64_t same = 0;
    for (uint64_t i = 0; i < n; i++) {
        e_got += (got[i] - ref[i]) * (got[i] - ref[i]);
        e_exp += (exp[i] - ref[i]) * (exp[i] - ref[i]);
        moved += (ref[i] - w[i]) * (ref[i] - w[i]);
        same += got[i] == exp[i];
        if (fabs(got[i] - ref[i]) > maxabs)
            maxabs = fabs(got[i] - ref[i]);
    }
    e_got = sqrt(e_got / (double)n);
    e_exp = sqrt(e_exp / (double)n);
    moved = sqrt(moved / (double)n);
    if (to->type == GGML_TYPE_F32) {
        assert_true(maxabs < 1e-5);
    } else {
        print_message("# %s %s: rms(merged-exact) %.3g, rms(encode(exact)-exact) %.3g, "
                      "equal %.4f\n", name, ggml_type_name(to->type), e_got, e_exp,
                      (double)same / (double)n);
        assert_true(e_got <= 1.02 * e_exp + 1e-7);
        /* K-quants search each block's scale: a last-bit difference in the F32
         * sum may pick another scale for a block, at the same error */
        assert_true((double)same >= (ggml_type_block_size(to->type) == 256 ? 0.9 : 0.98) *
                                        (double)n);
    }
    assert_true(moved > 0.05);           /* the adapters changed the tensor ... */
    assert_true(moved > 3 * e_exp + 1e-6); /* ... by more than encoding noise */
    free(got);
    free(w);
    free(reff);
    free(exp);
    free(enc);
}

/* The reference for one base tensor: dequant(W) + Σ s_k · delta_k. */
static double *reference(const struct gguf_file *base, const char *name,
                         const struct gguf_file *const *ad, const double *s, size_t n_ad)
{
    const struct gguf_tensor *t;
    float *w = decode(base, name, &t);
    double *ref = malloc(t->n_elements * sizeof *ref);
    assert_non_null(ref);
    for (uint64_t i = 0; i < t->n_elements; i++)
        ref[i] = w[i];
    for (size_t k = 0; k < n_ad; k++) {
        char an[96];
        snprintf(an, sizeof an, "%s.lora_a", name);
        if (gguf_find_tensor(ad[k], an))
            add_delta(ref, ad[k], name, s[k], t->ne[0], t->ne[1]);
    }
    free(w);
    return ref;
}

static void assert_same_bytes(const struct gguf_file *a, const struct gguf_file *b,
                              const char *name)
{
    const struct gguf_tensor *ta = gguf_find_tensor(a, name), *tb = gguf_find_tensor(b, name);
    assert_non_null(ta);
    assert_non_null(tb);
    assert_int_equal(ta->type, tb->type);
    assert_int_equal(ta->n_bytes, tb->n_bytes);
    assert_memory_equal(ta->data, tb->data, ta->n_bytes);
}

static void test_two_adapters(void **state)
{
    struct fixture *fx = *state;
    struct lora_merge_adapter ad[] = {{fx->a1, 0.75f}, {fx->a2, -0.5f}};
    struct lora_merge_opts o = {.adapters = ad, .n_adapters = 2, .threads = 1};
    struct lora_merge_stats st;
    struct mf_err err;
    struct gguf_file *out = NULL, *base = NULL, *g1 = NULL, *g2 = NULL;
    assert_int_equal(lora_merge_file(fx->base, fx->out, &o, &st, &err), 0);
    assert_int_equal(st.n_tensors, N(base_tensors));
    assert_int_equal(st.n_merged, 5);
    assert_int_equal(st.n_pairs, 6);
    assert_int_equal(st.n_ignored, 1);
    assert_int_equal(st.n_copied, 2);
    assert_int_equal(st.n_requant, 0);
    assert_int_equal(gguf_open(fx->out, &out, &err), 0);
    assert_int_equal(gguf_open(fx->base, &base, &err), 0);
    assert_int_equal(gguf_open(fx->a1, &g1, &err), 0);
    assert_int_equal(gguf_open(fx->a2, &g2, &err), 0);
    const struct gguf_file *ads[] = {g1, g2};
    const double s[] = {0.75 * 8.0 / 4.0, -0.5}; /* alpha/rank for a1; a2 has no alpha */
    static const char *const merged[] = {"token_embd.weight", "blk.0.attn_q.weight",
                                         "blk.0.attn_k.weight", "blk.0.ffn_up.weight",
                                         "blk.0.ffn_down.weight"};
    for (size_t i = 0; i < N(merged); i++) {
        double *ref = reference(base, merged[i], ads, s, 2);
        check_merged(out, base, merged[i], ref);
        free(ref);
    }
    /* untouched tensors and every KV: byte for byte, in order */
    assert_same_bytes(out, base, "blk.0.attn_norm.weight");
    assert_same_bytes(out, base, "output.weight");
    assert_int_equal(gguf_n_kv(out), gguf_n_kv(base));
    for (uint64_t i = 0; i < gguf_n_kv(base); i++) {
        const struct gguf_kv *a = gguf_kv_at(out, i), *b = gguf_kv_at(base, i);
        assert_string_equal(a->key, b->key);
        assert_int_equal(a->val_size, b->val_size);
        assert_memory_equal(a->val, b->val, a->val_size);
    }
    for (uint64_t i = 0; i < gguf_n_tensors(base); i++)
        assert_string_equal(gguf_tensor_at(out, i)->name, gguf_tensor_at(base, i)->name);
    gguf_close(out);
    gguf_close(base);
    gguf_close(g1);
    gguf_close(g2);
}

/* All of path (malloc'd, *n bytes); fails the test if it cannot be read. */
static uint8_t *slurp(const char *path, size_t *n)
{
    char *d = NULL;
    struct mf_err err;
    assert_int_equal(mf_file_read(path, (size_t)1 << 30, &d, n, &err), 0);
    return (uint8_t *)d;
}

/* Threads split rows; every row is computed the same way: same bytes. */
static void test_threads_same_bytes(void **state)
{
    struct fixture *fx = *state;
    struct lora_merge_adapter ad[] = {{fx->a1, 1.0f}, {fx->a2, 2.0f}};
    struct lora_merge_opts o = {.adapters = ad, .n_adapters = 2, .threads = 1};
    struct mf_err err;
    char out2[160];
    size_t n1, n2;
    snprintf(out2, sizeof out2, "%s/out3.gguf", fx->dir);
    assert_int_equal(lora_merge_file(fx->base, fx->out, &o, NULL, &err), 0);
    o.threads = 3;
    assert_int_equal(lora_merge_file(fx->base, out2, &o, NULL, &err), 0);
    uint8_t *a = slurp(fx->out, &n1), *b = slurp(out2, &n2);
    assert_int_equal(n1, n2);
    assert_memory_equal(a, b, n1);
    free(a);
    free(b);
}

/* An adapter variant with one tensor replaced (or dropped when t is NULL). */
static void bad_adapter(const char *path, enum kind k, size_t idx, const struct tspec *t)
{
    struct tspec ts[N(a1_tensors)];
    size_t n = 0;
    for (size_t i = 0; i < N(a1_tensors); i++) {
        if (i == idx && !t)
            continue;
        ts[n++] = i == idx ? *t : a1_tensors[i];
    }
    write_gguf(path, k, 8.0f, ts, n);
}

/* lora_merge_file fails with code and a message containing each of want[];
 * the output path stays absent. With in_header, lora_merge_check (headers
 * only) fails the same way. */
static void expect_failure(struct fixture *fx, const char *adapter, int code,
                           const char *const *want, size_t n_want, int in_header)
{
    struct lora_merge_adapter ad[] = {{adapter, 1.0f}};
    struct lora_merge_opts o = {.adapters = ad, .n_adapters = 1};
    struct mf_err err;
    struct stat st;
    unlink(fx->out);
    assert_int_equal(lora_merge_file(fx->base, fx->out, &o, NULL, &err), code);
    for (size_t i = 0; i < n_want; i++) {
        if (!strstr(err.msg, want[i]))
            fail_msg("'%s' not in: %s", want[i], err.msg);
    }
    assert_int_not_equal(stat(fx->out, &st), 0); /* nothing written */
    if (in_header) /* lora_merge_check reads headers only, not tensor data */
        assert_int_equal(lora_merge_check(fx->base, &o, &err), code);
}

static void test_failures(void **state)
{
    struct fixture *fx = *state;
    char bad[160];
    snprintf(bad, sizeof bad, "%s/bad.gguf", fx->dir);

    /* other hidden size: lora_a ne0 512 against base ne0 256 */
    struct tspec wide = {"blk.0.attn_q.weight.lora_a", GGML_TYPE_F32, 2, 512, 4, 0.5f, 1};
    bad_adapter(bad, ADAPTER_ALPHA, 0, &wide);
    const char *w1[] = {"blk.0.attn_q.weight.lora_a", "[512, 4]", "[256, 64]", "wrong base"};
    expect_failure(fx, bad, MF_EINVAL, w1, N(w1), 1);

    /* transposed A: [rank, ne0] instead of [ne0, rank] */
    struct tspec tr = {"blk.0.ffn_down.weight.lora_a", GGML_TYPE_F32, 2, 4, NE, 0.5f, 1};
    bad_adapter(bad, ADAPTER_ALPHA, 6, &tr);
    const char *w2[] = {"blk.0.ffn_down.weight.lora_a", "[4, 256]", "[256, 32]"};
    expect_failure(fx, bad, MF_EINVAL, w2, N(w2), 1);

    /* rank mismatch: lora_b [3, 32] against lora_a [256, 4] */
    struct tspec rk = {"blk.0.ffn_down.weight.lora_b", GGML_TYPE_F32, 2, 3, 32, 0.5f, 1};
    bad_adapter(bad, ADAPTER_ALPHA, 7, &rk);
    const char *w3[] = {"rank", "[256, 4]", "[3, 32]"};
    expect_failure(fx, bad, MF_EINVAL, w3, N(w3), 1);

    /* missing half */
    bad_adapter(bad, ADAPTER_ALPHA, 3, NULL);
    const char *w4[] = {"blk.0.attn_k.weight.lora_a", "no matching", "lora_b"};
    expect_failure(fx, bad, MF_EFORMAT, w4, N(w4), 1);

    /* a tensor the base does not have */
    struct tspec miss = {"blk.7.attn_q.weight.lora_a", GGML_TYPE_F32, 2, NE, 4, 0.5f, 1};
    struct tspec ts2[] = {miss, {"blk.7.attn_q.weight.lora_b", GGML_TYPE_F32, 2, 4, 64, 0.5f, 2}};
    write_gguf(bad, ADAPTER_ALPHA, 8.0f, ts2, 2);
    const char *w5[] = {"blk.7.attn_q.weight", "does not have"};
    expect_failure(fx, bad, MF_EINVAL, w5, N(w5), 1);

    /* other architecture */
    write_gguf(bad, ADAPTER_OTHER_ARCH, 8.0f, a1_tensors, N(a1_tensors));
    const char *w6[] = {"architecture", "qwen2", "llama"};
    expect_failure(fx, bad, MF_EINVAL, w6, N(w6), 1);

    /* NaN in an adapter: refused, naming the tensor (found by fuzz_lora_merge) */
    struct tspec nan_b = {"blk.0.attn_k.weight.lora_b", GGML_TYPE_F32, 2, 4, 32, NAN, 1};
    bad_adapter(bad, ADAPTER_ALPHA, 3, &nan_b);
    const char *w8[] = {"blk.0.attn_k.weight.lora_b", "NaN or infinity"};
    expect_failure(fx, bad, MF_EINVAL, w8, N(w8), 0);

    /* not an adapter at all */
    const char *w7[] = {"general.type", "adapter"};
    expect_failure(fx, fx->fbase, MF_EFORMAT, w7, N(w7), 1);

    /* a failure keeps an existing output file as it was */
    FILE *f = fopen(fx->out, "w");
    assert_non_null(f);
    fputs("keep me", f);
    fclose(f);
    struct lora_merge_adapter ad[] = {{bad, 1.0f}};
    struct lora_merge_opts o = {.adapters = ad, .n_adapters = 1};
    struct mf_err err;
    size_t n;
    assert_int_equal(lora_merge_file(fx->base, fx->out, &o, NULL, &err), MF_EINVAL);
    uint8_t *d = slurp(fx->out, &n);
    assert_int_equal(n, 7);
    assert_memory_equal(d, "keep me", 7);
    free(d);
    /* an output that is not a regular file (a device, here a FIFO) is refused
     * and stays what it was: the rename would replace the node itself */
    char fifo[160];
    struct stat sb;
    snprintf(fifo, sizeof fifo, "%s/fifo", fx->dir);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    struct lora_merge_adapter good[] = {{fx->a1, 1.0f}};
    o.adapters = good;
    assert_int_equal(lora_merge_file(fx->base, fifo, &o, NULL, &err), MF_EINVAL);
    assert_non_null(strstr(err.msg, "not a regular file"));
    assert_int_equal(lstat(fifo, &sb), 0);
    assert_true(S_ISFIFO(sb.st_mode));
    unlink(fifo);
    /* and no temporary is left in the directory */
    unlink(fx->out);
    unlink(bad);
    int entries = 0;
    DIR *dir = opendir(fx->dir);
    struct dirent *de;
    assert_non_null(dir);
    while ((de = readdir(dir)) != NULL)
        entries += strcmp(de->d_name, ".") && strcmp(de->d_name, "..") &&
                   strcmp(de->d_name, "base.gguf") && strcmp(de->d_name, "float.gguf") &&
                   strcmp(de->d_name, "a1.gguf") && strcmp(de->d_name, "a2.gguf");
    closedir(dir);
    assert_int_equal(entries, 0);
}

/* --quantize Q8_0 from F32/F16: the mix's types, general.file_type and
 * general.quantization_version set, each tensor = encode(decode(base)). */
static void test_quantize(void **state)
{
    struct fixture *fx = *state;
    struct lora_merge_opts o = {.quantize = 1, .ftype = QUANT_FTYPE_MOSTLY_Q8_0, .threads = 2};
    struct lora_merge_stats st;
    struct mf_err err;
    struct gguf_file *out = NULL, *base = NULL;
    uint32_t ft = 0, qv = 0;
    assert_int_equal(lora_merge_file(fx->fbase, fx->out, &o, &st, &err), 0);
    assert_int_equal(gguf_open(fx->out, &out, &err), 0);
    assert_int_equal(gguf_open(fx->fbase, &base, &err), 0);
    assert_int_equal(gguf_get_u32(out, "general.file_type", &ft, &err), 0);
    assert_int_equal(ft, QUANT_FTYPE_MOSTLY_Q8_0);
    assert_int_equal(gguf_get_u32(out, "general.quantization_version", &qv, &err), 0);
    assert_int_equal(qv, 2);
    assert_int_equal(gguf_find_tensor(out, "blk.0.attn_norm.weight")->type, GGML_TYPE_F32);
    assert_same_bytes(out, base, "blk.0.attn_norm.weight");
    static const char *const q[] = {"token_embd.weight", "blk.0.attn_q.weight",
                                    "blk.0.attn_v.weight", "blk.0.ffn_down.weight",
                                    "output.weight"};
    for (size_t i = 0; i < N(q); i++) {
        const struct gguf_tensor *t;
        float *w = decode(base, q[i], &t), *got = decode(out, q[i], NULL);
        uint64_t rb = 0;
        assert_int_equal(gguf_find_tensor(out, q[i])->type, GGML_TYPE_Q8_0);
        assert_int_equal(ggml_type_row_size(GGML_TYPE_Q8_0, t->ne[0], &rb), 0);
        uint8_t *enc = malloc(rb * t->ne[1]);
        float *exp = malloc(t->n_elements * sizeof *exp);
        for (uint64_t r = 0; r < t->ne[1]; r++) {
            quant_quantize_row(GGML_TYPE_Q8_0, w + r * t->ne[0], enc + r * rb, (int64_t)t->ne[0],
                               &err);
            quant_dequantize_row(GGML_TYPE_Q8_0, enc + r * rb, exp + r * t->ne[0],
                                 (int64_t)t->ne[0], &err);
        }
        assert_memory_equal(gguf_find_tensor(out, q[i])->data, enc, rb * t->ne[1]);
        free(w);
        free(got);
        free(enc);
        free(exp);
    }
    gguf_close(out);
    gguf_close(base);

    /* Q4_K_M: attn_v and ffn_down of the only layer get Q6_K (llama.cpp's mix) */
    o.ftype = QUANT_FTYPE_MOSTLY_Q4_K_M;
    assert_int_equal(lora_merge_file(fx->fbase, fx->out, &o, &st, &err), 0);
    assert_int_equal(gguf_open(fx->out, &out, &err), 0);
    assert_int_equal(gguf_find_tensor(out, "blk.0.attn_q.weight")->type, GGML_TYPE_Q4_K);
    assert_int_equal(gguf_find_tensor(out, "blk.0.attn_v.weight")->type, GGML_TYPE_Q6_K);
    assert_int_equal(gguf_get_u32(out, "general.file_type", &ft, &err), 0);
    assert_int_equal(ft, QUANT_FTYPE_MOSTLY_Q4_K_M);
    gguf_close(out);

    /* a quantized source is refused, naming the tensor; nothing written */
    unlink(fx->out);
    assert_int_equal(lora_merge_file(fx->base, fx->out, &o, &st, &err), MF_EUNSUPPORTED);
    assert_non_null(strstr(err.msg, "only supported for F16, BF16 and F32"));
    assert_non_null(strstr(err.msg, "blk.0.ffn_up.weight"));
    assert_int_not_equal(access(fx->out, F_OK), 0);

    /* up to F16 from the quantized base is allowed: every 2-D tensor becomes
     * F16 holding the decoded values (to F16 rounding) */
    o.ftype = QUANT_FTYPE_MOSTLY_F16;
    assert_int_equal(lora_merge_file(fx->base, fx->out, &o, &st, &err), 0);
    assert_int_equal(gguf_open(fx->out, &out, &err), 0);
    assert_int_equal(gguf_open(fx->base, &base, &err), 0);
    static const char *const up[] = {"blk.0.ffn_up.weight", "blk.0.ffn_down.weight",
                                     "output.weight"};
    for (size_t i = 0; i < N(up); i++) {
        const struct gguf_tensor *t;
        float *w = decode(base, up[i], &t), *got = decode(out, up[i], NULL);
        assert_int_equal(gguf_find_tensor(out, up[i])->type, GGML_TYPE_F16);
        for (uint64_t k = 0; k < t->n_elements; k++)
            assert_true(fabsf(got[k] - w[k]) <= 1e-3f * fabsf(w[k]) + 1e-7f);
        free(w);
        free(got);
    }
    gguf_close(out);
    gguf_close(base);
}

/* Merge and requantize in one pass: F32 tensors merged then encoded Q8_0. */
static void test_merge_and_quantize(void **state)
{
    struct fixture *fx = *state;
    char ad_path[160];
    snprintf(ad_path, sizeof ad_path, "%s/fa.gguf", fx->dir);
    static const struct tspec fa[] = {
        {"blk.0.attn_q.weight.lora_a", GGML_TYPE_F32, 2, NE, 8, 0.5f, 51},
        {"blk.0.attn_q.weight.lora_b", GGML_TYPE_F32, 2, 8, 64, 0.5f, 52},
    };
    write_gguf(ad_path, ADAPTER_ALPHA, 16.0f, fa, N(fa));
    struct lora_merge_adapter ad[] = {{ad_path, 1.0f}};
    struct lora_merge_opts o = {.adapters = ad, .n_adapters = 1, .quantize = 1,
                                .ftype = QUANT_FTYPE_MOSTLY_Q8_0};
    struct mf_err err;
    struct gguf_file *out = NULL, *base = NULL, *ga = NULL;
    assert_int_equal(lora_merge_file(fx->fbase, fx->out, &o, NULL, &err), 0);
    assert_int_equal(gguf_open(fx->out, &out, &err), 0);
    assert_int_equal(gguf_open(fx->fbase, &base, &err), 0);
    assert_int_equal(gguf_open(ad_path, &ga, &err), 0);
    const struct gguf_file *ads[] = {ga};
    const double s[] = {16.0 / 8.0};
    double *ref = reference(base, "blk.0.attn_q.weight", ads, s, 1);
    /* compare against encode(ref) in Q8_0 (the output type, not the base's) */
    const struct gguf_tensor *t = gguf_find_tensor(out, "blk.0.attn_q.weight");
    assert_int_equal(t->type, GGML_TYPE_Q8_0);
    float *got = decode(out, "blk.0.attn_q.weight", NULL);
    float row[NE], exp[NE];
    uint8_t enc[2 * NE];
    uint64_t same = 0;
    for (uint64_t r = 0; r < t->ne[1]; r++) {
        for (int i = 0; i < NE; i++)
            row[i] = (float)ref[r * NE + i];
        quant_quantize_row(GGML_TYPE_Q8_0, row, enc, NE, &err);
        quant_dequantize_row(GGML_TYPE_Q8_0, enc, exp, NE, &err);
        for (int i = 0; i < NE; i++)
            same += got[r * NE + i] == exp[i];
    }
    assert_true((double)same >= 0.98 * (double)t->n_elements);
    free(ref);
    free(got);
    gguf_close(out);
    gguf_close(base);
    gguf_close(ga);
}

static void test_parse_ftype(void **state)
{
    enum quant_ftype ft;
    struct mf_err err;
    assert_int_equal(lora_merge_parse_ftype("q4_k_m", &ft, &err), 0);
    assert_int_equal(ft, QUANT_FTYPE_MOSTLY_Q4_K_M);
    assert_int_equal(lora_merge_parse_ftype("F16", &ft, &err), 0);
    assert_int_equal(ft, QUANT_FTYPE_MOSTLY_F16);
    assert_int_equal(lora_merge_parse_ftype("Q9_X", &ft, &err), MF_EUSAGE);
    assert_non_null(strstr(err.msg, "Q4_K_M"));
    assert_int_equal(lora_merge_parse_ftype("Q2_K_S", &ft, &err), MF_EUSAGE);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_two_adapters, setup, teardown),
        cmocka_unit_test_setup_teardown(test_threads_same_bytes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_failures, setup, teardown),
        cmocka_unit_test_setup_teardown(test_quantize, setup, teardown),
        cmocka_unit_test_setup_teardown(test_merge_and_quantize, setup, teardown),
        cmocka_unit_test(test_parse_ftype),
    };
    return cmocka_run_group_tests_name("lora_merge", tests, NULL, NULL);
}
