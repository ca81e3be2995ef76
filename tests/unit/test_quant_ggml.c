/*
 * test_quant_ggml.c: common/quant against the real ggml library.
 *
 * Loads libggml-base.so (llama.cpp's ggml as shipped by node-llama-cpp,
 * installed by tests/tools/node) with dlopen and checks, on seeded data of
 * several distributions (tests/unit/quant_testdata.c):
 *   - quant_quantize_row output is byte-identical to ggml_quantize_chunk
 *     without an importance matrix (that is, quantize_row_*_ref);
 *   - quant_dequantize_row, and each SIMD table this CPU runs, give the
 *     same float bits as ggml_get_type_traits(t)->to_float, on ggml's own
 *     quantized blocks and on random blocks;
 *   - the fp16/bf16 scalar conversions match ggml's on every half and on
 *     random float bit patterns.
 * The library is found through MFC_GGML_LIB, else under
 * $MFC_SRCDIR/tests/tools/node/node_modules; when it is absent every test
 * skips and says why.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <dlfcn.h>
#include <glob.h>
#include <math.h>

#include "common/quant.h"
#include "tests/unit/quant_testdata.h"

/* ggml.h's struct ggml_type_traits as of the ggml in node-llama-cpp 3.21.1;
 * setup checks a few fields against known values before trusting it. */
struct ggml_traits {
    const char *type_name;
    int64_t blck_size;
    int64_t blck_size_interleave;
    size_t type_size;
    bool is_quantized;
    void (*to_float)(const void *x, float *y, int64_t k);
    void (*from_float_ref)(const float *x, void *y, int64_t k);
};

struct ggml_lib {
    void *handle;
    char path[4096];
    size_t (*quantize_chunk)(int type, const float *src, void *dst, int64_t start,
                             int64_t nrows, int64_t n_per_row, const float *imatrix);
    const struct ggml_traits *(*traits)(int type);
    uint16_t (*fp32_to_fp16)(float f);
    float (*fp16_to_fp32)(uint16_t h);
    uint16_t (*fp32_to_bf16)(float f);
    float (*bf16_to_fp32)(uint16_t b);
};

static struct ggml_lib lib; /* filled by group_setup; handle NULL when absent */
static char lib_missing[4200];

/* ---- finding and loading the library --------------------------------------- */

static int find_lib(char *out, size_t cap)
{
    const char *env = getenv("MFC_GGML_LIB");
    if (env && *env) {
        snprintf(out, cap, "%s", env);
        return 0;
    }
    const char *src = getenv("MFC_SRCDIR");
    char pat[4096];
    snprintf(pat, sizeof pat,
             "%s/tests/tools/node/node_modules/@node-llama-cpp/*/bins/*/libggml-base.so",
             src ? src : ".");
    glob_t g;
    int rc = glob(pat, 0, NULL, &g);
    if (rc == 0 && g.gl_pathc > 0)
        snprintf(out, cap, "%s", g.gl_pathv[0]);
    else
        snprintf(out, cap, "%s", pat);
    globfree(&g);
    return rc == 0 ? 0 : -1;
}

static int load_syms(void)
{
    *(void **)&lib.quantize_chunk = dlsym(lib.handle, "ggml_quantize_chunk");
    *(void **)&lib.traits = dlsym(lib.handle, "ggml_get_type_traits");
    *(void **)&lib.fp32_to_fp16 = dlsym(lib.handle, "ggml_fp32_to_fp16");
    *(void **)&lib.fp16_to_fp32 = dlsym(lib.handle, "ggml_fp16_to_fp32");
    *(void **)&lib.fp32_to_bf16 = dlsym(lib.handle, "ggml_fp32_to_bf16");
    *(void **)&lib.bf16_to_fp32 = dlsym(lib.handle, "ggml_bf16_to_fp32");
    return lib.quantize_chunk && lib.traits && lib.fp32_to_fp16 && lib.fp16_to_fp32 &&
                   lib.fp32_to_bf16 && lib.bf16_to_fp32
               ? 0
               : -1;
}

static int group_setup(void **state)
{
    if (find_lib(lib.path, sizeof lib.path) != 0) {
        snprintf(lib_missing, sizeof lib_missing,
                 "no libggml-base.so at %s (run npm i in tests/tools/node or set MFC_GGML_LIB)",
                 lib.path);
        return 0;
    }
    lib.handle = dlopen(lib.path, RTLD_NOW | RTLD_LOCAL);
    if (!lib.handle) {
        snprintf(lib_missing, sizeof lib_missing, "dlopen %s failed: %s", lib.path, dlerror());
        return 0;
    }
    /* a library that loads but lacks the API is a real failure, not a skip */
    if (load_syms() != 0) {
        fprintf(stderr, "%s lacks ggml_quantize_chunk or its fp16/bf16 helpers\n", lib.path);
        return -1;
    }
    const struct ggml_traits *q4k = lib.traits(GGML_TYPE_Q4_K);
    if (!q4k || strcmp(q4k->type_name, "q4_K") != 0 || q4k->blck_size != 256 ||
        q4k->type_size != 144 || !q4k->to_float) {
        fprintf(stderr, "%s: struct ggml_type_traits has another layout\n", lib.path);
        return -1;
    }
    printf("# comparing with %s\n", lib.path);
    return 0;
}

static int group_teardown(void **state)
{
    if (lib.handle)
        dlclose(lib.handle);
    return 0;
}

#define NEED_LIB()                                                                                 \
    do {                                                                                           \
        if (!lib.handle) {                                                                         \
            printf("# skipped: %s\n", lib_missing);                                                \
            skip();                                                                                \
        }                                                                                          \
    } while (0)

/* ---- helpers -------------------------------------------------------------------- */

static size_t row_bytes(enum ggml_type t, int64_t n)
{
    uint64_t b = 0;
    assert_int_equal(ggml_type_row_size(t, (uint64_t)n, &b), 0);
    return (size_t)b;
}

/* Row length for t: 16 super-blocks for the K-quants, 128 blocks else,
 * plus one odd-sized length to catch tails. */
static int64_t row_len(enum ggml_type t, int odd)
{
    int64_t blck = ggml_type_block_size(t);
    if (blck == 1)
        return odd ? 4097 : 4096;
    return blck * (odd ? 3 : (blck == QK_K ? 16 : 128));
}

/* Number of blocks where a and b differ. */
static int blocks_differ(const uint8_t *a, const uint8_t *b, size_t bytes, size_t blk)
{
    int n = 0;
    for (size_t off = 0; off < bytes; off += blk)
        n += memcmp(a + off, b + off, blk) != 0;
    return n;
}

/* ---- quantize -------------------------------------------------------------------- */

/* ours vs ggml on nrows x n of distribution d; returns differing blocks */
static int compare_quantize(enum ggml_type t, enum qt_dist d, int64_t nrows, int64_t n)
{
    const size_t rb = row_bytes(t, n);
    float *x = malloc(sizeof(float) * (size_t)(nrows * n));
    uint8_t *ours = malloc(rb * (size_t)nrows), *theirs = malloc(rb * (size_t)nrows);
    assert_non_null(x);
    assert_non_null(ours);
    assert_non_null(theirs);
    qt_fill(x, nrows, n, d, 42);
    memset(theirs, 0xAA, rb * (size_t)nrows);
    size_t got = lib.quantize_chunk((int)t, x, theirs, 0, nrows, n, NULL);
    assert_int_equal(got, rb * (size_t)nrows);
    struct mf_err err;
    for (int64_t r = 0; r < nrows; r++)
        assert_int_equal(quant_quantize_row(t, x + r * n, ours + r * (int64_t)rb, n, &err), 0);
    int bad = blocks_differ(ours, theirs, rb * (size_t)nrows, ggml_type_size(t));
    free(x);
    free(ours);
    free(theirs);
    return bad;
}

static void test_quantize_matches_ggml(void **state)
{
    NEED_LIB();
    int total_bad = 0;
    for (const enum ggml_type *t = qt_quant_types; *t != GGML_TYPE_COUNT; t++) {
        if (*t == GGML_TYPE_F32)
            continue; /* ggml_quantize_chunk has no F32 case */
        int bad = 0, blocks = 0;
        for (int d = 0; d < QT_NDIST; d++) {
            for (int odd = 0; odd < 2; odd++) {
                int64_t n = row_len(*t, odd), nrows = 16;
                int b = compare_quantize(*t, (enum qt_dist)d, nrows, n);
                if (b)
                    printf("# %s/%s n=%lld: %d blocks differ from ggml\n", ggml_type_name(*t),
                           qt_dist_name((enum qt_dist)d), (long long)n, b);
                bad += b;
                blocks += (int)(nrows * n / ggml_type_block_size(*t));
            }
        }
        printf("# quantize %-5s: %d/%d blocks byte-identical to ggml\n", ggml_type_name(*t),
               blocks - bad, blocks);
        total_bad += bad;
    }
    assert_int_equal(total_bad, 0);
}

/* ---- dequantize -------------------------------------------------------------------- */

/* Random blocks of t with finite fp16 scales: random bytes, then each fp16
 * field's exponent forced below 31 (ggml never writes inf/NaN scales). */
static void random_blocks(enum ggml_type t, uint8_t *buf, size_t bytes, uint64_t seed)
{
    struct qt_rng r = {seed};
    for (size_t i = 0; i < bytes; i++)
        buf[i] = (uint8_t)qt_next(&r);
    if (t == GGML_TYPE_F16 || t == GGML_TYPE_BF16 || t == GGML_TYPE_F32)
        return; /* plain types: NaN and inf patterns are part of the test */
    size_t blk = ggml_type_size(t);
    /* offsets of fp16 fields per block (ggml-common.h) */
    int offs[2] = {-1, -1};
    switch (t) {
    case GGML_TYPE_Q4_1:
    case GGML_TYPE_Q5_1:
    case GGML_TYPE_Q4_K:
    case GGML_TYPE_Q5_K:
        offs[0] = 0, offs[1] = 2;
        break;
    case GGML_TYPE_Q2_K:
        offs[0] = 80, offs[1] = 82;
        break;
    case GGML_TYPE_Q3_K:
        offs[0] = 108;
        break;
    case GGML_TYPE_Q6_K:
        offs[0] = 208;
        break;
    default:
        offs[0] = 0;
        break;
    }
    for (size_t b = 0; b < bytes; b += blk)
        for (int k = 0; k < 2; k++)
            if (offs[k] >= 0)
                buf[b + (size_t)offs[k] + 1] &= 0x3B; /* high byte: exponent <= 14 */
}

/* Number of floats whose bits differ. */
static int64_t floats_differ(const float *a, const float *b, int64_t n)
{
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++)
        bad += memcmp(&a[i], &b[i], sizeof(float)) != 0;
    return bad;
}

/* Every table this CPU runs against ggml on the blocks in q. */
static int64_t compare_dequantize(enum ggml_type t, const uint8_t *q, int64_t n)
{
    const struct ggml_traits *tr = lib.traits((int)t);
    assert_non_null(tr);
    assert_non_null(tr->to_float);
    float *theirs = malloc(sizeof(float) * (size_t)n), *ours = malloc(sizeof(float) * (size_t)n);
    assert_non_null(theirs);
    assert_non_null(ours);
    tr->to_float(q, theirs, n);
    int64_t bad = 0;
    for (int isa = 0; isa < QUANT_ISA_COUNT; isa++) {
        const struct quant_ops *ops = quant_ops_for_isa((enum quant_isa)isa);
        if (!ops)
            continue;
        memset(ours, 0x55, sizeof(float) * (size_t)n);
        ops->dequantize[t](q, ours, n);
        int64_t b = floats_differ(ours, theirs, n);
        if (b)
            printf("# dequantize %s (%s): %lld of %lld floats differ from ggml\n",
                   ggml_type_name(t), ops->name, (long long)b, (long long)n);
        bad += b;
    }
    free(theirs);
    free(ours);
    return bad;
}

static void test_dequantize_matches_ggml(void **state)
{
    NEED_LIB();
    int64_t total_bad = 0;
    for (const enum ggml_type *t = qt_dequant_types; *t != GGML_TYPE_COUNT; t++) {
        int64_t checked = 0, bad = 0;
        if (*t == GGML_TYPE_F32)
            continue; /* ggml has no to_float for F32; test_quant.c covers the copy */
        for (int odd = 0; odd < 2; odd++) {
            const int64_t n = row_len(*t, odd) * 4;
            const size_t rb = row_bytes(*t, n);
            uint8_t *q = malloc(rb + 1);
            float *x = malloc(sizeof(float) * (size_t)n);
            assert_non_null(q);
            assert_non_null(x);
            for (int d = 0; d < QT_NDIST; d++) {
                qt_fill(x, 1, n, (enum qt_dist)d, 7);
                lib.quantize_chunk((int)*t, x, q + odd, 0, 1, n, NULL); /* odd: misaligned */
                bad += compare_dequantize(*t, q + odd, n);
                checked += n;
            }
            random_blocks(*t, q + odd, rb, 99 + (uint64_t)odd);
            bad += compare_dequantize(*t, q + odd, n);
            checked += n;
            free(q);
            free(x);
        }
        printf("# dequantize %-5s: %lld floats x each ISA, %lld differ from ggml\n",
               ggml_type_name(*t), (long long)checked, (long long)bad);
        total_bad += bad;
    }
    assert_int_equal(total_bad, 0);
}

/* ---- scalars ----------------------------------------------------------------------- */

static int same_bits(float a, float b)
{
    return memcmp(&a, &b, sizeof a) == 0;
}

static void test_half_scalars_match_ggml(void **state)
{
    NEED_LIB();
    int bad = 0;
    for (uint32_t h = 0; h <= 0xFFFF; h++) {
        bad += !same_bits(quant_f16_to_f32((uint16_t)h), lib.fp16_to_fp32((uint16_t)h));
        bad += !same_bits(quant_bf16_to_f32((uint16_t)h), lib.bf16_to_fp32((uint16_t)h));
    }
    struct qt_rng r = {5};
    for (int i = 0; i < 2000000; i++) {
        uint32_t w = (uint32_t)qt_next(&r);
        if (i % 4 == 1)
            w = (w & 0x80000000u) | (0x33000000u + (w & 0x0FFFFFFFu)); /* near fp16's range */
        if (i % 4 == 2)
            w = (w & 0xFFFF0000u) | 0x8000u; /* bf16 ties */
        if (i % 4 == 3)
            w = (w & 0xFFFFE000u) | 0x1000u; /* fp16 ties */
        float f;
        memcpy(&f, &w, sizeof f);
        bad += quant_f32_to_f16(f) != lib.fp32_to_fp16(f);
        bad += quant_f32_to_bf16(f) != lib.fp32_to_bf16(f);
    }
    assert_int_equal(bad, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_half_scalars_match_ggml),
        cmocka_unit_test(test_quantize_matches_ggml),
        cmocka_unit_test(test_dequantize_matches_ggml),
    };
    return cmocka_run_group_tests_name("quant_ggml", tests, group_setup, group_teardown);
}
