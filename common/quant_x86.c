/*
 * quant_x86.c: AVX2 and AVX-512 dequantizers for the types that carry
 * model weights (F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K).
 *
 * AVX-512 is used where it paid in bench/quant (in-cache, AMD EPYC Zen 4:
 * Q8_0 +42%, BF16 +18%, Q6_K +11%, Q4_K +8%, Q5_K +7%, Q4_0 +4%); F16 is
 * left to AVX2 because 512-bit vcvtph2ps measured 2% slower. Rows that come
 * from DRAM are memory-bound either way (bench/README.md).
 *
 * Each function is compiled for its instruction set with a per-function
 * target attribute, so this file builds into a library that still runs on
 * any x86-64: quant.c calls these only after __builtin_cpu_supports says
 * the CPU has them. Outside x86-64 the tables are empty and the scalar code
 * is used.
 *
 * The results are bit-identical to quant_ref.c: the vector code does the
 * same float operations in the same order, widening the small integers
 * exactly, computing per-sub-block factors (d*sc, dmin*m) as scalars the way
 * the reference does, and never fusing a multiply and an add (an FMA rounds
 * once where the reference rounds twice; hence mul then sub, and
 * fp-contract off below). test_quant.c compares both on every type.
 * Stateless; loads and stores are unaligned.
 */
#include "quant_int.h"

#include <stddef.h>

#if defined(__x86_64__) && defined(__GNUC__)

#include <immintrin.h>

#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#else
#pragma GCC optimize("fp-contract=off")
#endif

#define T_AVX2 __attribute__((target("avx2,fma,f16c")))
#define T_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))
/* helpers and row drivers: always inlined, so their constant arguments fold */
#define QX_INLINE static inline __attribute__((always_inline))

/* ---- AVX2 ----------------------------------------------------------------- */

/* y[0..8) = (float)(int8 b[0..8)) * d */
T_AVX2 QX_INLINE void st8_i8(float *y, __m128i b, __m256 d)
{
    _mm256_storeu_ps(y, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b)), d));
}

/* y[0..8) = d * (float)(uint8 b[0..8)) - m */
T_AVX2 QX_INLINE void st8_u8_dm(float *y, __m128i b, __m256 d, __m256 m)
{
    __m256 q = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(b));
    _mm256_storeu_ps(y, _mm256_sub_ps(_mm256_mul_ps(d, q), m));
}

T_AVX2 static void deq_f16_avx2(const void *src, float *dst, int64_t n)
{
    const uint8_t *p = src;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 2 * i))));
    for (; i < n; i++)
        dst[i] = quant_f16_to_f32(quant_rd16(p + 2 * i));
}

T_AVX2 static void deq_bf16_avx2(const void *src, float *dst, int64_t n)
{
    const uint8_t *p = src;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(p + 2 * i)));
        _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(_mm256_slli_epi32(w, 16)));
    }
    for (; i < n; i++)
        dst[i] = quant_bf16_to_f32(quant_rd16(p + 2 * i));
}

T_AVX2 static void deq_q8_0_avx2(const void *src, float *y, int64_t n)
{
    const struct quant_blk_q8_0 *x = src;
    for (int64_t i = 0; i < n / QUANT_QK; i++, y += QUANT_QK) {
        const __m256 d = _mm256_set1_ps(quant_rdh(x[i].d));
        for (int k = 0; k < 4; k++)
            st8_i8(y + 8 * k, _mm_loadl_epi64((const __m128i *)(x[i].qs + 8 * k)), d);
    }
}

T_AVX2 static void deq_q4_0_avx2(const void *src, float *y, int64_t n)
{
    const struct quant_blk_q4_0 *x = src;
    const __m128i mask = _mm_set1_epi8(0x0F), eight = _mm_set1_epi8(8);
    for (int64_t i = 0; i < n / QUANT_QK; i++, y += QUANT_QK) {
        const __m256 d = _mm256_set1_ps(quant_rdh(x[i].d));
        const __m128i q = _mm_loadu_si128((const __m128i *)x[i].qs);
        const __m128i lo = _mm_sub_epi8(_mm_and_si128(q, mask), eight);
        const __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(q, 4), mask), eight);
        st8_i8(y, lo, d);
        st8_i8(y + 8, _mm_srli_si128(lo, 8), d);
        st8_i8(y + 16, hi, d);
        st8_i8(y + 24, _mm_srli_si128(hi, 8), d);
    }
}

/* 32 levels (bytes of v) as d*q - m into y[0..32). */
T_AVX2 QX_INLINE void st32_u8_dm(float *y, __m256i v, float d, float m)
{
    const __m256 vd = _mm256_set1_ps(d), vm = _mm256_set1_ps(m);
    const __m128i a = _mm256_castsi256_si128(v), b = _mm256_extracti128_si256(v, 1);
    st8_u8_dm(y, a, vd, vm);
    st8_u8_dm(y + 8, _mm_srli_si128(a, 8), vd, vm);
    st8_u8_dm(y + 16, b, vd, vm);
    st8_u8_dm(y + 24, _mm_srli_si128(b, 8), vd, vm);
}

/* The signature of st32_u8_dm (AVX2) and st32_u8_dm_512 (AVX-512). */
typedef void st32_u8_fn(float *y, __m256i v, float d, float m);

/* Q4_K and Q5_K rows, for either store width. Written once and inlined
 * into each ISA's entry point (a caller whose target is a superset of
 * T_AVX2 may inline it), so `st` and `q5` are constants there. */
T_AVX2 QX_INLINE void k45_rows(const uint8_t *x, float *y, int64_t n, int q5, st32_u8_fn *st)
{
    const size_t stride = q5 ? sizeof(struct quant_blk_q5_K) : sizeof(struct quant_blk_q4_K);
    const size_t qs_off =
        q5 ? offsetof(struct quant_blk_q5_K, qs) : offsetof(struct quant_blk_q4_K, qs);
    const __m256i mask = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi8(1);
    for (int64_t i = 0; i < n / QK_K; i++, x += stride) {
        const struct quant_blk_q4_K *b = (const struct quant_blk_q4_K *)x; /* same head */
        const float d = quant_rdh(b->d), min = quant_rdh(b->dmin);
        const __m256i qh =
            q5 ? _mm256_loadu_si256((const __m256i *)((const struct quant_blk_q5_K *)x)->qh)
               : _mm256_setzero_si256();
        const uint8_t *ql = x + qs_off;
        for (int is = 0; is < 8; is += 2, ql += 32, y += 64) {
            const __m256i v = _mm256_loadu_si256((const __m256i *)ql);
            __m256i lo = _mm256_and_si256(v, mask);
            __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), mask);
            if (q5) { /* bit `is` of qh[l] is the fifth bit of the low half */
                const __m256i h1 = _mm256_and_si256(_mm256_srli_epi16(qh, is), one);
                const __m256i h2 = _mm256_and_si256(_mm256_srli_epi16(qh, is + 1), one);
                lo = _mm256_or_si256(lo, _mm256_slli_epi16(h1, 4));
                hi = _mm256_or_si256(hi, _mm256_slli_epi16(h2, 4));
            }
            float d1, m1, d2, m2;
            quant_k4_factors(is, b->scales, d, min, &d1, &m1);
            quant_k4_factors(is + 1, b->scales, d, min, &d2, &m2);
            st(y, lo, d1, m1);
            st(y + 32, hi, d2, m2);
        }
    }
}

T_AVX2 static void deq_q4_K_avx2(const void *src, float *y, int64_t n)
{
    k45_rows(src, y, n, 0, st32_u8_dm);
}

T_AVX2 static void deq_q5_K_avx2(const void *src, float *y, int64_t n)
{
    k45_rows(src, y, n, 1, st32_u8_dm);
}
/* 32 signed levels (bytes of v): the first 16 scaled by s0, the rest by s1. */
T_AVX2 QX_INLINE void st32_i8_2s(float *y, __m256i v, float s0, float s1)
{
    const __m256 v0 = _mm256_set1_ps(s0), v1 = _mm256_set1_ps(s1);
    const __m128i a = _mm256_castsi256_si128(v), b = _mm256_extracti128_si256(v, 1);
    st8_i8(y, a, v0);
    st8_i8(y + 8, _mm_srli_si128(a, 8), v0);
    st8_i8(y + 16, b, v1);
    st8_i8(y + 24, _mm_srli_si128(b, 8), v1);
}

/* The signature of st32_i8_2s (AVX2) and st32_i8_2s_512 (AVX-512). */
typedef void st32_i8_fn(float *y, __m256i v, float s0, float s1);

/* Q6_K rows, for either store width (inlined like k45_rows). */
T_AVX2 QX_INLINE void q6_K_rows(const void *src, float *y, int64_t n, st32_i8_fn *st)
{
    const struct quant_blk_q6_K *x = src;
    const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(3);
    const __m256i bias = _mm256_set1_epi8(32);
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = quant_rdh(x[i].d);
        for (int c = 0; c < 2; c++, y += 128) {
            const uint8_t *ql = x[i].ql + 64 * c;
            const int8_t *sc = x[i].scales + 8 * c;
            const __m256i l0 = _mm256_loadu_si256((const __m256i *)ql);
            const __m256i l1 = _mm256_loadu_si256((const __m256i *)(ql + 32));
            const __m256i qh = _mm256_loadu_si256((const __m256i *)(x[i].qh + 32 * c));
            /* plane p: low nibble of l0/l1 (p < 2) or high nibble, bits 2p of qh */
            const __m256i lows[4] = {l0, l1, _mm256_srli_epi16(l0, 4), _mm256_srli_epi16(l1, 4)};
#pragma GCC unroll 4 /* the lows[] array must become registers */
            for (int p = 0; p < 4; p++) {
                const __m256i hb = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * p), m2);
                const __m256i q =
                    _mm256_or_si256(_mm256_and_si256(lows[p], m4), _mm256_slli_epi16(hb, 4));
                st(y + 32 * p, _mm256_sub_epi8(q, bias), d * sc[2 * p], d * sc[2 * p + 1]);
            }
        }
    }
}

T_AVX2 static void deq_q6_K_avx2(const void *src, float *y, int64_t n)
{
    q6_K_rows(src, y, n, st32_i8_2s);
}

/* ---- AVX-512 ------------------------------------------------------------------ */

/* y[0..16) = (float)(int8 b[0..16)) * d */
T_AVX512 QX_INLINE void st16_i8(float *y, __m128i b, __m512 d)
{
    _mm512_storeu_ps(y, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b)), d));
}

/* y[0..16) = d * (float)(uint8 b[0..16)) - m */
T_AVX512 QX_INLINE void st16_u8_dm(float *y, __m128i b, __m512 d, __m512 m)
{
    __m512 q = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(b));
    _mm512_storeu_ps(y, _mm512_sub_ps(_mm512_mul_ps(d, q), m));
}

T_AVX512 static void deq_bf16_avx512(const void *src, float *dst, int64_t n)
{
    const uint8_t *p = src;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(p + 2 * i)));
        _mm512_storeu_ps(dst + i, _mm512_castsi512_ps(_mm512_slli_epi32(w, 16)));
    }
    for (; i < n; i++)
        dst[i] = quant_bf16_to_f32(quant_rd16(p + 2 * i));
}

T_AVX512 static void deq_q8_0_avx512(const void *src, float *y, int64_t n)
{
    const struct quant_blk_q8_0 *x = src;
    for (int64_t i = 0; i < n / QUANT_QK; i++, y += QUANT_QK) {
        const __m512 d = _mm512_set1_ps(quant_rdh(x[i].d));
        st16_i8(y, _mm_loadu_si128((const __m128i *)x[i].qs), d);
        st16_i8(y + 16, _mm_loadu_si128((const __m128i *)(x[i].qs + 16)), d);
    }
}

T_AVX512 static void deq_q4_0_avx512(const void *src, float *y, int64_t n)
{
    const struct quant_blk_q4_0 *x = src;
    const __m128i mask = _mm_set1_epi8(0x0F), eight = _mm_set1_epi8(8);
    for (int64_t i = 0; i < n / QUANT_QK; i++, y += QUANT_QK) {
        const __m512 d = _mm512_set1_ps(quant_rdh(x[i].d));
        const __m128i q = _mm_loadu_si128((const __m128i *)x[i].qs);
        st16_i8(y, _mm_sub_epi8(_mm_and_si128(q, mask), eight), d);
        st16_i8(y + 16, _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(q, 4), mask), eight), d);
    }
}

/* 32 levels (bytes of v) as d*q - m into y[0..32). */
T_AVX512 QX_INLINE void st32_u8_dm_512(float *y, __m256i v, float d, float m)
{
    const __m512 vd = _mm512_set1_ps(d), vm = _mm512_set1_ps(m);
    st16_u8_dm(y, _mm256_castsi256_si128(v), vd, vm);
    st16_u8_dm(y + 16, _mm256_extracti128_si256(v, 1), vd, vm);
}

/* 32 signed levels (bytes of v): the first 16 scaled by s0, the rest by s1. */
T_AVX512 QX_INLINE void st32_i8_2s_512(float *y, __m256i v, float s0, float s1)
{
    st16_i8(y, _mm256_castsi256_si128(v), _mm512_set1_ps(s0));
    st16_i8(y + 16, _mm256_extracti128_si256(v, 1), _mm512_set1_ps(s1));
}

T_AVX512 static void deq_q4_K_avx512(const void *src, float *y, int64_t n)
{
    k45_rows(src, y, n, 0, st32_u8_dm_512);
}

T_AVX512 static void deq_q5_K_avx512(const void *src, float *y, int64_t n)
{
    k45_rows(src, y, n, 1, st32_u8_dm_512);
}

T_AVX512 static void deq_q6_K_avx512(const void *src, float *y, int64_t n)
{
    q6_K_rows(src, y, n, st32_i8_2s_512);
}

const struct quant_ops quant_ops_avx2 = {
    .isa = QUANT_ISA_AVX2,
    .name = "avx2",
    .dequantize =
        {
            [GGML_TYPE_F16] = deq_f16_avx2,
            [GGML_TYPE_BF16] = deq_bf16_avx2,
            [GGML_TYPE_Q8_0] = deq_q8_0_avx2,
            [GGML_TYPE_Q4_0] = deq_q4_0_avx2,
            [GGML_TYPE_Q4_K] = deq_q4_K_avx2,
            [GGML_TYPE_Q5_K] = deq_q5_K_avx2,
            [GGML_TYPE_Q6_K] = deq_q6_K_avx2,
        },
};

const struct quant_ops quant_ops_avx512 = {
    .isa = QUANT_ISA_AVX512,
    .name = "avx512",
    .dequantize =
        {
            [GGML_TYPE_BF16] = deq_bf16_avx512,
            [GGML_TYPE_Q8_0] = deq_q8_0_avx512,
            [GGML_TYPE_Q4_0] = deq_q4_0_avx512,
            [GGML_TYPE_Q4_K] = deq_q4_K_avx512,
            [GGML_TYPE_Q5_K] = deq_q5_K_avx512,
            [GGML_TYPE_Q6_K] = deq_q6_K_avx512,
        },
};

#else /* not x86-64: no vector tables; quant.c never selects them */

const struct quant_ops quant_ops_avx2 = {.isa = QUANT_ISA_AVX2, .name = "avx2"};
const struct quant_ops quant_ops_avx512 = {.isa = QUANT_ISA_AVX512, .name = "avx512"};

#endif
