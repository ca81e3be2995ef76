/*
 * test_quant.c: unit tests for common/quant, standing on their own (the
 * comparison with llama.cpp's library is test_quant_ggml.c).
 *
 * Known answers come from the block layouts of ggml-common.h, written here a
 * second time as per-element formulas (an oracle independent of
 * quant_ref.c's loops), plus a few blocks built by hand with literal
 * expected floats. Round-trip error bounds, SIMD-vs-scalar identity, error
 * paths, fp16/bf16 edge cases and the file-type rules follow.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <math.h>

#include "common/quant.h"
#include "common/quant_int.h"
#include "tests/unit/quant_testdata.h"

/* ---- helpers -------------------------------------------------------------------- */

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* ---- block geometry ----------------------------------------------------------------- */

static void test_block_structs_match_ggml_sizes(void **state)
{
    assert_int_equal(sizeof(struct quant_blk_q4_0), ggml_type_size(GGML_TYPE_Q4_0));
    assert_int_equal(sizeof(struct quant_blk_q4_1), ggml_type_size(GGML_TYPE_Q4_1));
    assert_int_equal(sizeof(struct quant_blk_q5_0), ggml_type_size(GGML_TYPE_Q5_0));
    assert_int_equal(sizeof(struct quant_blk_q5_1), ggml_type_size(GGML_TYPE_Q5_1));
    assert_int_equal(sizeof(struct quant_blk_q8_0), ggml_type_size(GGML_TYPE_Q8_0));
    assert_int_equal(sizeof(struct quant_blk_q2_K), ggml_type_size(GGML_TYPE_Q2_K));
    assert_int_equal(sizeof(struct quant_blk_q3_K), ggml_type_size(GGML_TYPE_Q3_K));
    assert_int_equal(sizeof(struct quant_blk_q4_K), ggml_type_size(GGML_TYPE_Q4_K));
    assert_int_equal(sizeof(struct quant_blk_q5_K), ggml_type_size(GGML_TYPE_Q5_K));
    assert_int_equal(sizeof(struct quant_blk_q6_K), ggml_type_size(GGML_TYPE_Q6_K));
    assert_int_equal(_Alignof(struct quant_blk_q6_K), 1);
}

/* ---- hand-built blocks with literal answers ---------------------------------------- */

static void test_known_answer_q4_0(void **state)
{
    struct quant_blk_q4_0 b;
    quant_wr16(b.d, 0x3800); /* 0.5 */
    for (int j = 0; j < 16; j++)
        b.qs[j] = (uint8_t)(j | ((15 - j) << 4));
    float y[32];
    assert_int_equal(quant_dequantize_row(GGML_TYPE_Q4_0, &b, y, 32, NULL), 0);
    assert_true(y[0] == -4.0f && y[8] == 0.0f && y[15] == 3.5f);
    assert_true(y[16] == 3.5f && y[31] == -4.0f);
}

static void test_known_answer_q8_0(void **state)
{
    struct quant_blk_q8_0 b;
    quant_wr16(b.d, 0x4000); /* 2.0 */
    for (int j = 0; j < 32; j++)
        b.qs[j] = (uint8_t)(int8_t)(j * 8 - 128);
    float y[32];
    assert_int_equal(quant_dequantize_row(GGML_TYPE_Q8_0, &b, y, 32, NULL), 0);
    for (int j = 0; j < 32; j++)
        assert_true(y[j] == (float)(2 * (j * 8 - 128)));
}

/* Q4_K: sub-block 5 has scale 33 and min 17 (6-bit, so split over two
 * bytes by get_scale_min_k4), d = 0.5, dmin = 0.25. */
static void test_known_answer_q4_K(void **state)
{
    struct quant_blk_q4_K b;
    memset(&b, 0, sizeof b);
    quant_wr16(b.d, 0x3800);    /* 0.5 */
    quant_wr16(b.dmin, 0x3400); /* 0.25 */
    b.scales[0] = 2;            /* sub 0: scale 2, min 0 */
    b.scales[9] = (33 & 0xF) | (17 & 0xF) << 4;
    b.scales[1] |= (33 >> 4) << 6; /* high bits of sub 5's scale */
    b.scales[5] |= (17 >> 4) << 6; /* high bits of sub 5's min */
    b.qs[0] = 0x07;                /* element 0: 7 (sub 0) */
    b.qs[64 + 3] = 0xA0;           /* element 2*64 + 32 + 3 = 163 (sub 5): 10 */
    float y[256];
    assert_int_equal(quant_dequantize_row(GGML_TYPE_Q4_K, &b, y, 256, NULL), 0);
    assert_true(y[0] == 7.0f);                          /* 0.5*2*7 - 0 */
    assert_true(y[163] == 0.5f * 33 * 10 - 0.25f * 17); /* 165 - 4.25 */
    assert_true(y[160] == -4.25f);                      /* level 0 in sub 5 */
    assert_true(y[1] == 0.0f);
}

/* Q6_K: element 100 is the q4 plane of half 0 (l = 4, ql[36] high nibble,
 * qh[4] bits 6-7), scale index 6; d = 0.25. */
static void test_known_answer_q6_K(void **state)
{
    struct quant_blk_q6_K b;
    memset(&b, 0, sizeof b);
    quant_wr16(b.d, 0x3400); /* 0.25 */
    b.scales[6] = -3;
    b.ql[36] = 0x50;  /* low 4 bits of element 100: 5 */
    b.qh[4] = 2 << 6; /* high 2 bits: 2, so q = 5 | 32 = 37, minus 32 = 5 */
    float y[256];
    assert_int_equal(quant_dequantize_row(GGML_TYPE_Q6_K, &b, y, 256, NULL), 0);
    assert_true(y[100] == 0.25f * -3 * 5);
    assert_true(y[0] == 0.0f * -32); /* scale 0, level -32 */
}

/* Q5_0: qh bit j is element j's fifth bit; d = -1. */
static void test_known_answer_q5_0(void **state)
{
    struct quant_blk_q5_0 b;
    quant_wr16(b.d, 0xBC00); /* -1.0 */
    memset(b.qs, 0xFF, sizeof b.qs);
    const uint8_t qh[4] = {0x01, 0, 0, 0x80}; /* elements 0 and 31 get bit 4 */
    memcpy(b.qh, qh, 4);
    float y[32];
    assert_int_equal(quant_dequantize_row(GGML_TYPE_Q5_0, &b, y, 32, NULL), 0);
    assert_true(y[0] == -15.0f); /* (31 - 16) * -1 */
    assert_true(y[1] == 1.0f);   /* (15 - 16) * -1 */
    assert_true(y[31] == -15.0f);
}

/* ---- per-element oracle from the layouts --------------------------------------------- */

static float h(const uint8_t *p)
{
    return quant_f16_to_f32(quant_rd16(p));
}

/* Element i of a legacy block (i < 32), straight from ggml-common.h. */
static float oracle_legacy(enum ggml_type t, const uint8_t *b, int i)
{
    switch (t) {
    case GGML_TYPE_Q4_0: {
        int q = i < 16 ? b[2 + i] & 0xF : b[2 + i - 16] >> 4;
        return (q - 8) * h(b);
    }
    case GGML_TYPE_Q4_1: {
        int q = i < 16 ? b[4 + i] & 0xF : b[4 + i - 16] >> 4;
        return q * h(b) + h(b + 2);
    }
    case GGML_TYPE_Q5_0: {
        int q = i < 16 ? b[6 + i] & 0xF : b[6 + i - 16] >> 4;
        q |= ((b[2 + i / 8] >> (i % 8)) & 1) << 4;
        return (q - 16) * h(b);
    }
    case GGML_TYPE_Q5_1: {
        int q = i < 16 ? b[8 + i] & 0xF : b[8 + i - 16] >> 4;
        q |= ((b[4 + i / 8] >> (i % 8)) & 1) << 4;
        return q * h(b) + h(b + 2);
    }
    default: /* Q8_0 */
        return (int8_t)b[2 + i] * h(b);
    }
}

/* Element i of an MXFP4 block, from the OCP MX spec: an E2M1 code (sign,
 * two exponent bits, one mantissa bit) under the E8M0 scale 2^(e - 127),
 * computed in double. Code 8 (-0) gives +0 as ggml's value table does. */
static float oracle_mxfp4(const uint8_t *b, int i)
{
    static const double mag[8] = {0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0};
    const int q = i < 16 ? b[1 + i] & 0xF : b[1 + i - 16] >> 4;
    const double v = (q & 8) && (q & 7) ? -mag[q & 7] : mag[q & 7];
    return (float)ldexp(v, (int)b[0] - 127);
}

/* Element i of a Q2_K/Q3_K block: sixteen 16-element groups; group g takes
 * 2-bit plane (g / 2) % 4 of the 32 bytes at 32 * (g / 8). */
static float oracle_q23_K(enum ggml_type t, const uint8_t *b, int i)
{
    const int g = i / 16, half = g % 2, plane = (g / 2) % 4, chunk = g / 8;
    const int l = 16 * half + i % 16;
    if (t == GGML_TYPE_Q2_K) {
        const int q = (b[16 + 32 * chunk + l] >> (2 * plane)) & 3;
        const float dl = h(b + 80) * (b[g] & 0xF), ml = h(b + 82) * (b[g] >> 4);
        return dl * q - ml;
    }
    int8_t sc[16];
    quant_q3_K_scales(b + 96, sc);
    const int q = (b[32 + 32 * chunk + l] >> (2 * plane)) & 3;
    const int hbit = (b[l] >> (4 * chunk + plane)) & 1; /* hmask bit: which 32-group */
    const float dl = h(b + 108) * (sc[g] - 32);
    return dl * (q - (hbit ? 0 : 4));
}

/* Element i of a Q4_K/Q5_K block: sub-block i/32 of 64-element chunk i/64,
 * low nibbles for even sub-blocks. */
static float oracle_q45_K(enum ggml_type t, const uint8_t *b, int i)
{
    const int sub = i / 32, chunk = i / 64, l = i % 32;
    uint8_t sc, m;
    quant_scale_min_k4(sub, b + 4, &sc, &m);
    const int qs_off = t == GGML_TYPE_Q4_K ? 16 : 48;
    const uint8_t byte = b[qs_off + 32 * chunk + l];
    int q = sub % 2 ? byte >> 4 : byte & 0xF;
    if (t == GGML_TYPE_Q5_K)
        q += (b[16 + l] >> sub) & 1 ? 16 : 0;
    const float d1 = h(b) * sc, m1 = h(b + 2) * m;
    return d1 * q - m1;
}

/* Element i of a Q6_K block: 128-element halves; within one, plane p = l/32
 * of 4, low nibble from ql[(p%2)*32 + l%32] (high nibble for p >= 2), high
 * bits from qh[l%32] >> 2p; scale index 8*half + p*2 + (l%32)/16. */
static float oracle_q6_K(const uint8_t *b, int i)
{
    const int half = i / 128, l = i % 128, p = l / 32, r = l % 32;
    const uint8_t qlb = b[64 * half + (p % 2) * 32 + r];
    const int lo = p >= 2 ? qlb >> 4 : qlb & 0xF;
    const int hi = (b[128 + 32 * half + r] >> (2 * p)) & 3;
    const int q = (lo | hi << 4) - 32;
    const int8_t sc = (int8_t)b[192 + 8 * half + 2 * p + r / 16];
    return h(b + 208) * sc * q;
}

static float oracle(enum ggml_type t, const uint8_t *row, int64_t i)
{
    const int64_t blck = ggml_type_block_size(t), bsz = ggml_type_size(t);
    const uint8_t *b = row + (i / blck) * bsz;
    const int e = (int)(i % blck);
    switch (t) {
    case GGML_TYPE_F32:
        return bits_f32((uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 |
                        (uint32_t)b[3] << 24);
    case GGML_TYPE_F16:
        return h(b);
    case GGML_TYPE_BF16:
        return bits_f32((uint32_t)quant_rd16(b) << 16);
    case GGML_TYPE_Q2_K:
    case GGML_TYPE_Q3_K:
        return oracle_q23_K(t, b, e);
    case GGML_TYPE_Q4_K:
    case GGML_TYPE_Q5_K:
        return oracle_q45_K(t, b, e);
    case GGML_TYPE_Q6_K:
        return oracle_q6_K(b, e);
    case GGML_TYPE_MXFP4:
        return oracle_mxfp4(b, e);
    default:
        return oracle_legacy(t, b, e);
    }
}

static void test_dequantize_matches_layout_oracle(void **state)
{
    for (const enum ggml_type *t = qt_dequant_types; *t != GGML_TYPE_COUNT; t++) {
        const int64_t n = ggml_type_block_size(*t) == 1 ? 1000 : ggml_type_block_size(*t) * 5;
        const size_t rb = qt_row_bytes(*t, n);
        uint8_t *q = malloc(rb);
        float *y = malloc(sizeof(float) * (size_t)n);
        assert_non_null(q);
        assert_non_null(y);
        qt_random_blocks(*t, q, rb, 1234 + (uint64_t)*t);
        assert_int_equal(quant_dequantize_row(*t, q, y, n, NULL), 0);
        for (int64_t i = 0; i < n; i++) {
            float want = oracle(*t, q, i);
            if (f32_bits(y[i]) != f32_bits(want) && !(isnan(y[i]) && isnan(want)))
                fail_msg("%s element %lld: got %g want %g", ggml_type_name(*t), (long long)i,
                         (double)y[i], (double)want);
        }
        free(q);
        free(y);
    }
}

/* ---- round trips ---------------------------------------------------------------------- */

/* RMSE of dequantize(quantize(x)) over rms(x), on N(0,1) data.
 * Bounds: a uniform quantizer with step s has error s/sqrt(12). For
 * N(0,1) blocks of 32 the absmax is about 2.1 (Q8_0: s = 2.1/127, so
 * ~0.005; Q4_0: s ~ 2.1/8, ~0.08; Q5_0: ~0.04); the affine types spend
 * their levels on [min, max] instead of [-amax, amax] (Q4_1 ~0.075, Q5_1
 * ~0.037); the K-quants land near their bit widths after their scale
 * searches (measured: Q2_K 0.30, Q3_K 0.15, Q4_K 0.071, Q5_K 0.036, Q6_K
 * 0.018). F16 keeps 10 stored mantissa bits, a relative step of 2^-10 on
 * [1,2), so ~2^-10/sqrt(12)/1.4 = 2e-4; BF16 keeps 7 bits, ~1.6e-3. MXFP4
 * has 8 magnitudes (0 .. 6) under a power-of-two scale that rounds down, so
 * its top steps are coarse and a block's largest values may clip (measured
 * 0.115). Each
 * bound is 1.2x-1.5x that figure: a real regression (a wrong level, a lost
 * bit, a bad scale) moves the error by far more. The data is seeded. */
static const struct {
    enum ggml_type t;
    double bound;
} rmse_bounds[] = {
    {GGML_TYPE_F32, 0.0},     {GGML_TYPE_F16, 2.5e-4}, {GGML_TYPE_BF16, 2e-3},
    {GGML_TYPE_Q8_0, 0.0075}, {GGML_TYPE_Q4_0, 0.11},  {GGML_TYPE_Q4_1, 0.095},
    {GGML_TYPE_Q5_0, 0.055},  {GGML_TYPE_Q5_1, 0.047}, {GGML_TYPE_Q2_K, 0.38},
    {GGML_TYPE_Q3_K, 0.21},   {GGML_TYPE_Q4_K, 0.105}, {GGML_TYPE_Q5_K, 0.054},
    {GGML_TYPE_Q6_K, 0.027},  {GGML_TYPE_MXFP4, 0.15},
};

static double roundtrip_rmse(enum ggml_type t, const float *x, int64_t n)
{
    uint8_t *q = malloc(qt_row_bytes(t, n));
    float *y = malloc(sizeof(float) * (size_t)n);
    assert_non_null(q);
    assert_non_null(y);
    assert_int_equal(quant_quantize_row(t, x, q, n, NULL), 0);
    assert_int_equal(quant_dequantize_row(t, q, y, n, NULL), 0);
    double se = 0, ss = 0;
    for (int64_t i = 0; i < n; i++) {
        se += ((double)y[i] - x[i]) * ((double)y[i] - x[i]);
        ss += (double)x[i] * x[i];
    }
    free(q);
    free(y);
    return sqrt(se / (double)n) / sqrt(ss / (double)n);
}

static void test_roundtrip_rmse_bounds(void **state)
{
    const int64_t n = 256 * 64;
    float *x = malloc(sizeof(float) * (size_t)n);
    assert_non_null(x);
    qt_fill(x, 1, n, QT_GAUSS, 3);
    for (size_t k = 0; k < sizeof rmse_bounds / sizeof rmse_bounds[0]; k++) {
        double r = roundtrip_rmse(rmse_bounds[k].t, x, n);
        printf("# round trip %-5s relative RMSE %.5f (bound %.5f)\n",
               ggml_type_name(rmse_bounds[k].t), r, rmse_bounds[k].bound);
        assert_true(r <= rmse_bounds[k].bound);
    }
    free(x);
}

/* Zero rows stay exactly zero; no NaN appears from a 0 scale. */
static void test_roundtrip_zero_and_tiny_rows(void **state)
{
    const int64_t n = 512;
    float x[512], y[512];
    uint8_t q[2048];
    for (const enum ggml_type *t = qt_quant_types; *t != GGML_TYPE_COUNT; t++) {
        for (int d = 0; d < 2; d++) {
            qt_fill(x, 1, n, d ? QT_TINY : QT_ZERO, 11);
            assert_int_equal(quant_quantize_row(*t, x, q, n, NULL), 0);
            assert_int_equal(quant_dequantize_row(*t, q, y, n, NULL), 0);
            for (int64_t i = 0; i < n; i++) {
                assert_false(isnan(y[i]));
                if (!d)
                    assert_true(y[i] == 0.0f);
                else
                    assert_true(fabsf(y[i]) <= 1e-4f);
            }
        }
    }
}

/* ---- SIMD against scalar ---------------------------------------------------------------- */

/* Every table this CPU runs gives the scalar bits, at lengths that leave
 * tails (plain types) and odd block counts, from a misaligned source. */
static void test_simd_matches_scalar(void **state)
{
    const struct quant_ops *scalar = quant_ops_for_isa(QUANT_ISA_SCALAR);
    assert_non_null(scalar);
    static const int64_t plain_lens[] = {1, 7, 8, 9, 15, 16, 17, 31, 33, 100, 4097};
    static const int64_t block_counts[] = {1, 2, 3, 5, 17};
    int compared = 0;
    for (int isa = QUANT_ISA_AVX2; isa < QUANT_ISA_COUNT; isa++) {
        const struct quant_ops *ops = quant_ops_for_isa((enum quant_isa)isa);
        if (!ops) {
            printf("# %s not available on this CPU\n", isa == QUANT_ISA_AVX2 ? "avx2" : "avx512");
            continue;
        }
        for (const enum ggml_type *t = qt_dequant_types; *t != GGML_TYPE_COUNT; t++) {
            const int64_t blck = ggml_type_block_size(*t);
            const int nl = blck == 1 ? 11 : 5;
            for (int k = 0; k < nl; k++) {
                const int64_t n = blck == 1 ? plain_lens[k] : blck * block_counts[k];
                const size_t rb = qt_row_bytes(*t, n);
                uint8_t *q = malloc(rb + 1);
                float *a = malloc(sizeof(float) * (size_t)n);
                float *b = malloc(sizeof(float) * (size_t)(n + 2));
                assert_true(q && a && b);
                qt_random_blocks(*t, q + 1, rb, (uint64_t)(isa * 1000 + *t * 10 + k));
                scalar->dequantize[*t](q + 1, a, n);
                b[n + 1] = 12345.0f;                  /* canary: must not be written */
                ops->dequantize[*t](q + 1, b + 1, n); /* dst off its 32-byte alignment */
                assert_memory_equal(a, b + 1, sizeof(float) * (size_t)n);
                assert_true(b[n + 1] == 12345.0f);
                compared++;
                free(q);
                free(a);
                free(b);
            }
        }
    }
    printf("# %d SIMD rows compared with scalar\n", compared);
}

static void test_dispatch_tables(void **state)
{
    const struct quant_ops *best = quant_ops_get();
    assert_non_null(best);
    assert_ptr_equal(quant_ops_get(), best); /* chosen once */
    assert_null(quant_ops_for_isa(QUANT_ISA_COUNT));
    const struct quant_ops *s = quant_ops_for_isa(QUANT_ISA_SCALAR);
    assert_non_null(s);
    assert_string_equal(s->name, "scalar");
    for (const enum ggml_type *t = qt_dequant_types; *t != GGML_TYPE_COUNT; t++) {
        assert_non_null(best->dequantize[*t]);
        assert_true(quant_can_dequantize(*t));
    }
    printf("# dispatch picked %s\n", best->name);
}

/* ---- errors ------------------------------------------------------------------------------ */

static void test_bad_lengths_leave_dst_untouched(void **state)
{
    struct mf_err err;
    float src[512] = {0}, dst[512];
    uint8_t q[1024];
    memset(dst, 0x7F, sizeof dst);
    memset(q, 0x5A, sizeof q);
    assert_int_equal(quant_dequantize_row(GGML_TYPE_Q4_K, q, dst, 255, &err), MF_EINVAL);
    assert_non_null(strstr(err.msg, "Q4_K"));
    assert_int_equal(quant_dequantize_row(GGML_TYPE_Q8_0, q, dst, 33, &err), MF_EINVAL);
    assert_int_equal(quant_dequantize_row(GGML_TYPE_F16, q, dst, -1, &err), MF_EINVAL);
    for (int i = 0; i < 512; i++)
        assert_int_equal(f32_bits(dst[i]), 0x7F7F7F7Fu);
    assert_int_equal(quant_quantize_row(GGML_TYPE_Q6_K, src, q, 300, &err), MF_EINVAL);
    assert_int_equal(quant_quantize_row(GGML_TYPE_Q5_1, src, q, 48, &err), MF_EINVAL);
    for (int i = 0; i < 1024; i++)
        assert_int_equal(q[i], 0x5A);
    /* zero elements is a valid, empty row */
    assert_int_equal(quant_dequantize_row(GGML_TYPE_Q4_K, q, dst, 0, &err), 0);
    assert_int_equal(quant_quantize_row(GGML_TYPE_Q4_K, src, q, 0, &err), 0);
}

static void test_unsupported_types(void **state)
{
    struct mf_err err;
    float f[256] = {0};
    uint8_t q[1024] = {0};
    static const int bad[] = {GGML_TYPE_Q8_1,
                              GGML_TYPE_Q8_K,
                              GGML_TYPE_IQ2_XXS,
                              GGML_TYPE_IQ4_NL,
                              GGML_TYPE_I32,
                              GGML_TYPE_TQ2_0,
                              4,
                              GGML_TYPE_COUNT,
                              -1,
                              1000};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        enum ggml_type t = (enum ggml_type)bad[i];
        assert_false(quant_can_quantize(t));
        assert_false(quant_can_dequantize(t));
        assert_int_equal(quant_dequantize_row(t, q, f, 256, &err), MF_EUNSUPPORTED);
        assert_int_equal(quant_quantize_row(t, f, q, 256, &err), MF_EUNSUPPORTED);
    }
    assert_non_null(strstr(err.msg, "1000"));
    /* NULL err is allowed (mf_err_set accepts it) */
    assert_int_equal(quant_quantize_row(GGML_TYPE_IQ2_XS, f, q, 256, NULL), MF_EUNSUPPORTED);
}

/* ---- fp16 / bf16 edges ---------------------------------------------------------------------- */

static void test_f16_edges(void **state)
{
    assert_int_equal(quant_f32_to_f16(1.0f), 0x3C00);
    assert_int_equal(quant_f32_to_f16(-0.0f), 0x8000);
    assert_int_equal(quant_f32_to_f16(INFINITY), 0x7C00);
    assert_int_equal(quant_f32_to_f16(-INFINITY), 0xFC00);
    assert_int_equal(quant_f32_to_f16(NAN) & 0x7FFF, 0x7E00);
    assert_int_equal(quant_f32_to_f16(65504.0f), 0x7BFF);              /* largest half */
    assert_int_equal(quant_f32_to_f16(65519.99f), 0x7BFF);             /* below the tie: stays */
    assert_int_equal(quant_f32_to_f16(65520.0f), 0x7C00);              /* the tie rounds to inf */
    assert_int_equal(quant_f32_to_f16(1e6f), 0x7C00);                  /* overflow */
    assert_int_equal(quant_f32_to_f16(0x1.0p-24f), 0x0001);            /* smallest subnormal */
    assert_int_equal(quant_f32_to_f16(0x1.0p-25f), 0x0000);            /* tie to even: 0 */
    assert_int_equal(quant_f32_to_f16(0x1.8p-24f), 0x0002);            /* tie to even: 2 */
    assert_int_equal(quant_f32_to_f16(0x1.0p-14f), 0x0400);            /* smallest normal */
    assert_int_equal(quant_f32_to_f16(1.0f + 0x1.0p-11f), 0x3C00);     /* tie: even */
    assert_int_equal(quant_f32_to_f16(1.0f + 3 * 0x1.0p-11f), 0x3C02); /* tie: up */
    assert_int_equal(quant_f32_to_f16(1.0f + 0x1.0p-11f + 0x1.0p-20f), 0x3C01);
    assert_true(quant_f16_to_f32(0x0001) == 0x1.0p-24f);
    assert_true(quant_f16_to_f32(0x03FF) == 0x1.ff8p-15f);
    assert_true(quant_f16_to_f32(0x7BFF) == 65504.0f);
    assert_true(isinf(quant_f16_to_f32(0xFC00)) && quant_f16_to_f32(0xFC00) < 0);
    assert_true(isnan(quant_f16_to_f32(0x7C01)) && isnan(quant_f16_to_f32(0xFE00)));
    assert_int_equal(f32_bits(quant_f16_to_f32(0x8000)), 0x80000000u);
    /* every non-NaN half survives half -> float -> half */
    for (uint32_t x = 0; x <= 0xFFFF; x++) {
        if ((x & 0x7C00) == 0x7C00 && (x & 0x03FF))
            continue;
        assert_int_equal(quant_f32_to_f16(quant_f16_to_f32((uint16_t)x)), x);
    }
}

static void test_bf16_edges(void **state)
{
    assert_int_equal(quant_f32_to_bf16(1.0f), 0x3F80);
    assert_int_equal(quant_f32_to_bf16(1.0f + 0x1.0p-8f), 0x3F80);     /* tie: even */
    assert_int_equal(quant_f32_to_bf16(1.0f + 3 * 0x1.0p-8f), 0x3F82); /* tie: up */
    assert_int_equal(quant_f32_to_bf16(bits_f32(0x7F7FFFFF)), 0x7F80); /* max rounds to inf */
    assert_int_equal(quant_f32_to_bf16(-INFINITY), 0xFF80);
    assert_int_equal(quant_f32_to_bf16(bits_f32(0x7F800001)), 0x7FC0); /* sNaN made quiet */
    assert_int_equal(quant_f32_to_bf16(bits_f32(0xFFC12345)), 0xFFC1); /* NaN keeps top bits */
    assert_int_equal(quant_f32_to_bf16(bits_f32(0x00018000)), 0x0002); /* subnormal tie: up */
    assert_int_equal(quant_f32_to_bf16(bits_f32(0x00008000)), 0x0000); /* subnormal tie: even */
    assert_int_equal(quant_f32_to_bf16(-0.0f), 0x8000);
    for (uint32_t x = 0; x <= 0xFFFF; x++) {
        float f = quant_bf16_to_f32((uint16_t)x);
        assert_int_equal(f32_bits(f), x << 16);
        if (!isnan(f))
            assert_int_equal(quant_f32_to_bf16(f), x);
    }
}

/* quantize_row F16/BF16 is the scalar conversion, element by element. */
static void test_plain_rows_use_scalar_conversions(void **state)
{
    float x[37];
    uint8_t q[148];
    float y[37];
    qt_fill(x, 1, 37, QT_HUGE, 8);
    x[3] = NAN;
    x[4] = 0x1.0p-20f;
    assert_int_equal(quant_quantize_row(GGML_TYPE_F16, x, q, 37, NULL), 0);
    for (int i = 0; i < 37; i++)
        assert_int_equal(quant_rd16(q + 2 * i), quant_f32_to_f16(x[i]));
    assert_int_equal(quant_quantize_row(GGML_TYPE_BF16, x, q, 37, NULL), 0);
    for (int i = 0; i < 37; i++)
        assert_int_equal(quant_rd16(q + 2 * i), quant_f32_to_bf16(x[i]));
    assert_int_equal(quant_quantize_row(GGML_TYPE_F32, x, q, 37, NULL), 0);
    assert_int_equal(quant_dequantize_row(GGML_TYPE_F32, q, y, 37, NULL), 0);
    assert_memory_equal(x, y, sizeof x);
}

/* ---- file types -------------------------------------------------------------------------- */

static void test_ftype_names(void **state)
{
    enum quant_ftype ft;
    assert_int_equal(quant_ftype_from_name("q4_k_m", &ft), 0);
    assert_int_equal(ft, 15);
    assert_int_equal(quant_ftype_from_name("Q5_K_M", &ft), 0);
    assert_int_equal(ft, 17);
    assert_int_equal(quant_ftype_from_name("q8_0", &ft), 0);
    assert_int_equal(ft, 7);
    assert_int_equal(quant_ftype_from_name("bf16", &ft), 0);
    assert_int_equal(ft, 32);
    assert_int_equal(quant_ftype_from_name("Q4_K", &ft), 0); /* llama-quantize alias */
    assert_int_equal(ft, QUANT_FTYPE_MOSTLY_Q4_K_M);
    assert_int_equal(quant_ftype_from_name("q4_k_x", &ft), -1);
    assert_int_equal(quant_ftype_from_name("", &ft), -1);
    assert_string_equal(quant_ftype_name(QUANT_FTYPE_MOSTLY_Q6_K), "Q6_K");
    assert_string_equal(quant_ftype_name(QUANT_FTYPE_ALL_F32), "F32");
    assert_null(quant_ftype_name((enum quant_ftype)19)); /* IQ2_XXS: not handled */
    assert_null(quant_ftype_name((enum quant_ftype)4));  /* retired */
    /* every name parses back to its value */
    for (int v = 0; v < 64; v++) {
        const char *name = quant_ftype_name((enum quant_ftype)v);
        if (!name)
            continue;
        assert_int_equal(quant_ftype_from_name(name, &ft), 0);
        assert_int_equal(ft, v);
    }
    assert_true(quant_ftype_can_build(QUANT_FTYPE_MOSTLY_Q4_K_M));
    assert_false(quant_ftype_can_build(QUANT_FTYPE_MOSTLY_Q2_K_S)); /* needs an imatrix */
    assert_false(quant_ftype_can_build((enum quant_ftype)19));
}

/* A 32-layer GQA model with untied output, as Llama 3 8B. */
static const struct quant_model_info llama8b = {
    .arch = "llama",
    .n_layer = 32,
    .n_expert = 0,
    .n_gqa = 4,
    .has_output = 1,
    .is_70b = 0,
};

static enum ggml_type mix_type(enum quant_ftype ft, const struct quant_model_info *mi,
                               const char *name, int n_dims, int64_t ne0, int64_t ne1)
{
    struct quant_tensor_info ti = {
        .name = name, .type = GGML_TYPE_F16, .n_dims = n_dims, .ne = {ne0, ne1, 1, 1}};
    enum ggml_type t = GGML_TYPE_COUNT;
    struct mf_err err;
    if (quant_ftype_tensor_type(ft, mi, &ti, &t, &err) != 0)
        fail_msg("%s: %s", name, err.msg);
    return t;
}

/* Q4_K_M by hand: use_more_bits(i, 32) holds for i < 4, i >= 28 and
 * i = 6, 9, 12, ... ((i - 4) % 3 == 2). */
static void test_q4_k_m_rules(void **state)
{
    const enum quant_ftype M = QUANT_FTYPE_MOSTLY_Q4_K_M;
    assert_int_equal(mix_type(M, &llama8b, "blk.0.attn_v.weight", 2, 4096, 1024), GGML_TYPE_Q6_K);
    assert_int_equal(mix_type(M, &llama8b, "blk.4.attn_v.weight", 2, 4096, 1024), GGML_TYPE_Q4_K);
    assert_int_equal(mix_type(M, &llama8b, "blk.6.attn_v.weight", 2, 4096, 1024), GGML_TYPE_Q6_K);
    assert_int_equal(mix_type(M, &llama8b, "blk.31.ffn_down.weight", 2, 14336, 4096),
                     GGML_TYPE_Q6_K);
    assert_int_equal(mix_type(M, &llama8b, "blk.10.ffn_down.weight", 2, 14336, 4096),
                     GGML_TYPE_Q4_K);
    assert_int_equal(mix_type(M, &llama8b, "blk.10.attn_q.weight", 2, 4096, 4096), GGML_TYPE_Q4_K);
    assert_int_equal(mix_type(M, &llama8b, "output.weight", 2, 4096, 128256), GGML_TYPE_Q6_K);
    assert_int_equal(mix_type(M, &llama8b, "token_embd.weight", 2, 4096, 128256), GGML_TYPE_Q4_K);
    assert_int_equal(mix_type(M, &llama8b, "blk.3.attn_norm.weight", 1, 4096, 1), GGML_TYPE_F32);
    assert_int_equal(mix_type(M, &llama8b, "rope_freqs.weight", 1, 64, 1), GGML_TYPE_F32);
    /* tied embeddings take the output tensor's rule */
    struct quant_model_info tied = llama8b;
    tied.has_output = 0;
    assert_int_equal(mix_type(M, &tied, "token_embd.weight", 2, 4096, 128256), GGML_TYPE_Q6_K);
    /* 70B: the plain attn_v layers get Q5_K instead of Q4_K */
    struct quant_model_info big = llama8b;
    big.n_layer = 80;
    big.is_70b = 1;
    assert_int_equal(mix_type(M, &big, "blk.11.attn_v.weight", 2, 8192, 1024), GGML_TYPE_Q5_K);
    assert_int_equal(
        mix_type(QUANT_FTYPE_MOSTLY_Q5_K_M, &llama8b, "blk.0.attn_v.weight", 2, 4096, 1024),
        GGML_TYPE_Q6_K);
}

/* Rows that K-quant blocks do not divide (tensor_type_fallback). */
static void test_mix_fallbacks(void **state)
{
    const enum quant_ftype M = QUANT_FTYPE_MOSTLY_Q4_K_M;
    assert_int_equal(mix_type(M, &llama8b, "output.weight", 2, 2880, 32000), GGML_TYPE_Q8_0);
    assert_int_equal(mix_type(M, &llama8b, "blk.10.attn_q.weight", 2, 896, 896), GGML_TYPE_Q5_0);
    assert_int_equal(mix_type(M, &llama8b, "blk.10.ffn_down.weight", 2, 8020, 2048), GGML_TYPE_F16);
    assert_int_equal(mix_type(M, &llama8b, "blk.0.ffn_down.weight", 2, 4864, 896),
                     GGML_TYPE_Q6_K); /* 4864 = 19*256: no fallback needed */
    assert_int_equal(mix_type(M, &llama8b, "blk.0.ffn_down.weight", 2, 4896, 896),
                     GGML_TYPE_Q8_0); /* 4896 = 153*32: Q6_K falls back to Q8_0 */
    assert_int_equal(
        mix_type(QUANT_FTYPE_MOSTLY_Q5_K_S, &llama8b, "blk.9.ffn_up.weight", 2, 896, 4864),
        GGML_TYPE_Q5_1);
    assert_int_equal(
        mix_type(QUANT_FTYPE_MOSTLY_Q8_0, &llama8b, "blk.9.ffn_up.weight", 2, 100, 4864),
        GGML_TYPE_F16);
    assert_int_equal(
        mix_type(QUANT_FTYPE_MOSTLY_F16, &llama8b, "blk.9.ffn_up.weight", 2, 100, 4864),
        GGML_TYPE_F16);
    assert_int_equal(mix_type(QUANT_FTYPE_MOSTLY_BF16, &llama8b, "output.weight", 2, 4096, 32000),
                     GGML_TYPE_BF16);
}

static void test_mix_errors(void **state)
{
    struct mf_err err;
    enum ggml_type t = GGML_TYPE_COUNT;
    struct quant_tensor_info ti = {
        .name = "attn_v.weight", .type = GGML_TYPE_F16, .n_dims = 2, .ne = {4096, 1024, 1, 1}};
    assert_int_equal(quant_ftype_tensor_type(QUANT_FTYPE_MOSTLY_Q4_K_M, &llama8b, &ti, &t, &err),
                     MF_EINVAL);
    ti.name = "blk.32.attn_v.weight"; /* one past the last layer */
    assert_int_equal(quant_ftype_tensor_type(QUANT_FTYPE_MOSTLY_Q4_K_M, &llama8b, &ti, &t, &err),
                     MF_EINVAL);
    assert_non_null(strstr(err.msg, "blk.32.attn_v.weight"));
    assert_int_equal(t, GGML_TYPE_COUNT); /* untouched */
    /* without per-layer rules the block number does not matter */
    assert_int_equal(quant_ftype_tensor_type(QUANT_FTYPE_MOSTLY_Q8_0, &llama8b, &ti, &t, &err), 0);
    assert_int_equal(t, GGML_TYPE_Q8_0);
    ti.name = "blk.1.attn_v.weight";
    assert_int_equal(quant_ftype_tensor_type((enum quant_ftype)19, &llama8b, &ti, &t, &err),
                     MF_EUNSUPPORTED);
    ti.ne[1] = 0;
    assert_int_equal(quant_ftype_tensor_type(QUANT_FTYPE_MOSTLY_Q4_K_M, &llama8b, &ti, &t, &err),
                     MF_EINVAL);
    ti.ne[1] = 1024;
    ti.n_dims = 5;
    assert_int_equal(quant_ftype_tensor_type(QUANT_FTYPE_MOSTLY_Q4_K_M, &llama8b, &ti, &t, &err),
                     MF_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_block_structs_match_ggml_sizes),
        cmocka_unit_test(test_known_answer_q4_0),
        cmocka_unit_test(test_known_answer_q8_0),
        cmocka_unit_test(test_known_answer_q4_K),
        cmocka_unit_test(test_known_answer_q6_K),
        cmocka_unit_test(test_known_answer_q5_0),
        cmocka_unit_test(test_dequantize_matches_layout_oracle),
        cmocka_unit_test(test_roundtrip_rmse_bounds),
        cmocka_unit_test(test_roundtrip_zero_and_tiny_rows),
        cmocka_unit_test(test_simd_matches_scalar),
        cmocka_unit_test(test_dispatch_tables),
        cmocka_unit_test(test_bad_lengths_leave_dst_untouched),
        cmocka_unit_test(test_unsupported_types),
        cmocka_unit_test(test_f16_edges),
        cmocka_unit_test(test_bf16_edges),
        cmocka_unit_test(test_plain_rows_use_scalar_conversions),
        cmocka_unit_test(test_ftype_names),
        cmocka_unit_test(test_q4_k_m_rules),
        cmocka_unit_test(test_mix_fallbacks),
        cmocka_unit_test(test_mix_errors),
    };
    return cmocka_run_group_tests_name("quant", tests, NULL, NULL);
}
