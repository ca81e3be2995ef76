/*
 * cpu_dot_x86.h: the x86 gemm tiles, written once and compiled twice:
 * cpu_dot_avx2.c (AVX2 + FMA + F16C) and cpu_dot_avx512.c (the same plus
 * AVX-512 VL/BW and VNNI, which turn the u8 x s8 and s16 x s16 dot steps
 * into single vpdpbusd / vpdpwssd instructions and give 32 registers).
 *
 * The includer defines, before including this once:
 *   X86_T        __attribute__((target("..."))) for every function here
 *   X86_VNNI     1 to use AVX-512 VNNI dot instructions, else 0
 *   X86_RB, X86_CB   rows x columns of the multi-column tile (X86_RB <= 4,
 *                X86_CB <= 4); single-column work uses 4 x 1 tiles
 *   X86_TABLE    the name of the struct cpu_dot to define
 *   X86_ISA, X86_NAME  its isa and name
 *
 * Tiles compute RB x CB (row, column) dot products at once so a weight
 * block is decoded once per tile and an activation block loaded once per
 * tile. Each pair keeps its own accumulator and sees exactly the same
 * instruction sequence whatever the tile shape, which is what makes a
 * token's logits independent of what else is in the batch.
 *
 * Loads go through the unaligned intrinsics or memcpy: weight blocks sit at
 * any byte offset in the GGUF map (a Q8_0 block is 34 bytes).
 */
#ifndef MFC_CPU_DOT_X86_H
#define MFC_CPU_DOT_X86_H

#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "common/quant_int.h"
#include "runtime/cpu/cpu_int.h"

#define AI inline __attribute__((always_inline))
#define X86_PREFETCH 256 /* bytes ahead of the current weight block (256 beat 512, 1024, 2048) */

/* ---- helpers ------------------------------------------------------------ */

static AI X86_T float hsum8(__m256 v)
{
    __m128 lo = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
    lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
    return _mm_cvtss_f32(lo);
}

static AI X86_T float h2f(const uint8_t *p)
{
    return _cvtsh_ss(quant_rd16(p));
}

static AI X86_T __m256i ld256(const void *p)
{
    return _mm256_loadu_si256((const __m256i_u *)p);
}

static AI X86_T __m128i ld128(const void *p)
{
    return _mm_loadu_si128((const __m128i_u *)p);
}

/* Touches p ahead of use. A single weight row read front to back runs at
 * full DRAM speed with this; the hardware prefetcher alone manages about
 * half of it, and several rows read side by side do worse still (measured
 * on Zen 4: 31, 14 and 6-8 GB/s), which is why decode walks rows one by
 * one (the 1 x 1 tiles of X86_GEMM). */
static AI X86_T void prefetch(const uint8_t *p)
{
    _mm_prefetch((const char *)p + X86_PREFETCH, _MM_HINT_T0);
}

/* Stores (or, with add, accumulates) one result. */
static AI X86_T void put(float *y, int add, float v)
{
    *y = add ? *y + v : v;
}

/* Sum over i of u[i] * s[i] for 32 unsigned (u) and signed (s) bytes,
 * folded into src as 8 int32 lanes. maddubs cannot saturate here: every
 * unsigned operand mfc passes is <= 63 (or <= 255 with s >= -127 under
 * VNNI, which has no 16-bit stage). */
static AI X86_T __m256i dot_u8s8(__m256i src, __m256i u, __m256i s)
{
#if X86_VNNI
    return _mm256_dpbusd_epi32(src, u, s);
#else
    return _mm256_add_epi32(src, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s),
                                                   _mm256_set1_epi16(1)));
#endif
}

/* src + sum of sc[k] * (sum of u*s over byte pair k), as 8 int32 lanes: the
 * K-quant step "scale a sub-block's integer dot product and accumulate". */
static AI X86_T __m256i dot_scaled(__m256i src, __m256i sc16, __m256i u, __m256i s)
{
#if X86_VNNI
    return _mm256_dpwssd_epi32(src, sc16, _mm256_maddubs_epi16(u, s));
#else
    return _mm256_add_epi32(src, _mm256_madd_epi16(sc16, _mm256_maddubs_epi16(u, s)));
#endif
}

/*
 * Every tile is a block step blk_T(RB, CB, i, ..., acc) that adds block i
 * of RB weight rows dotted with CB activation rows into acc[r][c], driven
 * over the row's blocks by X86_TILE; each (row, column) pair has one
 * accumulator and is summed horizontally at the end. (A second accumulator
 * per pair, to hide FMA latency in 1 x 1 decode tiles, measured no faster:
 * decode waits on memory, and it cost registers in the wide tiles.)
 */
#define X86_TILE(T, BLOCK)                                                                       \
    static AI X86_T void tile_##T(const int RB, const int CB, int64_t n, const uint8_t *w,       \
                                  size_t wb, const uint8_t *x, size_t xb, float *y, size_t ys,   \
                                  int add)                                                       \
    {                                                                                            \
        __m256 acc[4][4];                                                                        \
        _Pragma("GCC unroll 4") for (int r = 0; r < RB; r++)                                     \
            _Pragma("GCC unroll 4") for (int c = 0; c < CB; c++) acc[r][c] = _mm256_setzero_ps(); \
        for (int64_t i = 0; i < n / (BLOCK); i++)                                                \
            blk_##T(RB, CB, i, w, wb, x, xb, acc);                                               \
        _Pragma("GCC unroll 4") for (int c = 0; c < CB; c++)                                     \
            _Pragma("GCC unroll 4") for (int r = 0; r < RB; r++)                                 \
                put(y + (size_t)c * ys + r, add, hsum8(acc[r][c]));                              \
    }

/* ---- Q8_0 weights x Q8_0 activations ----------------------------------- */

static AI X86_T void blk_q8_0(const int RB, const int CB, int64_t i, const uint8_t *w, size_t wb,
                              const uint8_t *x, size_t xb, __m256 acc[4][4])
{
    __m256i wq[4];
    __m256 dw[4];

#pragma GCC unroll 4
    for (int r = 0; r < RB; r++) {
        const uint8_t *b = w + (size_t)r * wb + (size_t)i * 34;
        prefetch(b);
        dw[r] = _mm256_set1_ps(h2f(b));
        wq[r] = ld256(b + 2);
#if X86_VNNI
        wq[r] = _mm256_xor_si256(wq[r], _mm256_set1_epi8((char)0x80)); /* w + 128 */
#endif
    }
#pragma GCC unroll 4
    for (int c = 0; c < CB; c++) {
        const struct cpu_q8_0 *a = (const struct cpu_q8_0 *)(x + (size_t)c * xb) + i;
        __m256i aq = ld256(a->qs);
        __m256 da = _mm256_set1_ps(a->d);
#if X86_VNNI
        /* sum (w+128)*a = sum w*a + 128*s: start each of 8 lanes at -16*s */
        __m256i init = _mm256_set1_epi32(-16 * a->s);
#endif
#pragma GCC unroll 4
        for (int r = 0; r < RB; r++) {
#if X86_VNNI
            __m256i p = _mm256_dpbusd_epi32(init, wq[r], aq);
#else
            __m256i p = _mm256_madd_epi16(
                _mm256_maddubs_epi16(_mm256_sign_epi8(wq[r], wq[r]), _mm256_sign_epi8(aq, wq[r])),
                _mm256_set1_epi16(1));
#endif
            acc[r][c] = _mm256_fmadd_ps(_mm256_mul_ps(dw[r], da), _mm256_cvtepi32_ps(p), acc[r][c]);
        }
    }
}
X86_TILE(q8_0, 32)

/* ---- Q4_0 weights x Q8_0 activations ----------------------------------- */

static AI X86_T void blk_q4_0(const int RB, const int CB, int64_t i, const uint8_t *w, size_t wb,
                              const uint8_t *x, size_t xb, __m256 acc[4][4])
{
    __m256i wq[4];
    __m256 dw[4];

#pragma GCC unroll 4
    for (int r = 0; r < RB; r++) {
        const uint8_t *b = w + (size_t)r * wb + (size_t)i * 18;
        __m128i t = ld128(b + 2);
        prefetch(b);
        dw[r] = _mm256_set1_ps(h2f(b));
        /* low nibbles are elements 0..15, high nibbles 16..31; codes 0..15 */
        wq[r] = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(t, 4), t), _mm256_set1_epi8(15));
    }
#pragma GCC unroll 4
    for (int c = 0; c < CB; c++) {
        const struct cpu_q8_0 *a = (const struct cpu_q8_0 *)(x + (size_t)c * xb) + i;
        __m256i aq = ld256(a->qs);
        __m256 da = _mm256_set1_ps(a->d);
        /* sum (q-8)*a = sum q*a - 8*s: start each of 8 lanes at -s */
        __m256i init = _mm256_set1_epi32(-a->s);
#pragma GCC unroll 4
        for (int r = 0; r < RB; r++) {
            __m256i p = dot_u8s8(init, wq[r], aq);
            acc[r][c] = _mm256_fmadd_ps(_mm256_mul_ps(dw[r], da), _mm256_cvtepi32_ps(p), acc[r][c]);
        }
    }
}
X86_TILE(q4_0, 32)

/* ---- MXFP4 weights x Q8_0 activations ---------------------------------- */

/* Block i: the nibbles index the doubled E2M1 values (quant_mxfp4_values)
 * with one byte shuffle, and signed codes meet signed activations through
 * |w| times a with w's sign (|w| <= 12); the E8M0 half-scale times the
 * activation scale weighs the integer sum, as in cpu_dot.c's dot_mxfp4. */
static AI X86_T void blk_mxfp4(const int RB, const int CB, int64_t i, const uint8_t *w, size_t wb,
                               const uint8_t *x, size_t xb, __m256 acc[4][4])
{
    const __m256i values = _mm256_broadcastsi128_si256(ld128(quant_mxfp4_values));
    __m256i wabs[4], wq[4];
    __m256 dw[4];

#pragma GCC unroll 4
    for (int r = 0; r < RB; r++) {
        const uint8_t *b = w + (size_t)r * wb + (size_t)i * sizeof(struct quant_blk_mxfp4);
        __m128i t = ld128(b + 1);
        prefetch(b);
        dw[r] = _mm256_set1_ps(quant_e8m0_half(b[0]));
        /* low nibbles are elements 0..15, high nibbles 16..31 */
        wq[r] = _mm256_shuffle_epi8(values, _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(t, 4), t),
                                                            _mm256_set1_epi8(15)));
        wabs[r] = _mm256_sign_epi8(wq[r], wq[r]);
    }
#pragma GCC unroll 4
    for (int c = 0; c < CB; c++) {
        const struct cpu_q8_0 *a = (const struct cpu_q8_0 *)(x + (size_t)c * xb) + i;
        __m256i aq = ld256(a->qs);
        __m256 da = _mm256_set1_ps(a->d);
#pragma GCC unroll 4
        for (int r = 0; r < RB; r++) {
            __m256i p = dot_u8s8(_mm256_setzero_si256(), wabs[r], _mm256_sign_epi8(aq, wq[r]));
            acc[r][c] = _mm256_fmadd_ps(_mm256_mul_ps(dw[r], da), _mm256_cvtepi32_ps(p), acc[r][c]);
        }
    }
}
X86_TILE(mxfp4, 32)

/* ---- K-quants x Q8_K activations --------------------------------------- */

/* Q4_K/Q5_K scales and mins of one block (ggml's get_scale_min_k4 for all
 * eight at once, in SIMD): bytes 0..7 of the result are the 6-bit scales,
 * bytes 8..15 the mins. packed is the block's 12 scale bytes; the 4 bytes
 * after them (the first of qh or qs) are loaded and ignored. Layout:
 *   j < 4:  scale q[j] & 63,                    min q[j+4] & 63
 *   j >= 4: scale q[j+4] & 15 | (q[j-4] >> 6) << 4,
 *           min   q[j+4] >> 4 | (q[j] >> 6) << 4 */
static AI X86_T __m128i k4_scales(const uint8_t *packed)
{
    const __m128i v = ld128(packed);
    /* a: q0..3, q8..11, q4..7, q8..11; b: the bytes whose top two bits go on top */
    const __m128i a = _mm_shuffle_epi8(v, _mm_set_epi8(11, 10, 9, 8, 7, 6, 5, 4, 11, 10, 9, 8, 3, 2, 1, 0));
    const __m128i b = _mm_shuffle_epi8(v, _mm_set_epi8(7, 6, 5, 4, -1, -1, -1, -1, 3, 2, 1, 0, -1, -1, -1, -1));
    const __m128i m_lo = _mm_set_epi8(0, 0, 0, 0, 63, 63, 63, 63, 15, 15, 15, 15, 63, 63, 63, 63);
    const __m128i m_hi = _mm_set_epi8(15, 15, 15, 15, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
    const __m128i m_top = _mm_set_epi8(48, 48, 48, 48, 0, 0, 0, 0, 48, 48, 48, 48, 0, 0, 0, 0);
    __m128i lo = _mm_or_si128(_mm_and_si128(a, m_lo), _mm_and_si128(_mm_srli_epi16(a, 4), m_hi));

    return _mm_or_si128(lo, _mm_and_si128(_mm_srli_epi16(b, 2), m_top));
}

/* The 16-bit scale of sub-block j in every lane, from the 8 scales as
 * int16 in both halves of sc (one shuffle instead of extract + broadcast). */
static AI X86_T __m256i k4_scale_j(__m256i sc, int j)
{
    return _mm256_shuffle_epi8(sc, _mm256_set1_epi16((short)(0x0100 * (2 * j + 1) + 2 * j)));
}

/* Q4_K (q5 == 0) and Q5_K (q5 == 1) block i: d*sum_j sc_j*(q.a)_j -
 * dmin*sum_j m_j*bsum_j, the integer parts exact. */
static AI X86_T void blk_q45_K(const int q5, const int RB, const int CB, int64_t i,
                               const uint8_t *w, size_t wb, const uint8_t *x, size_t xb,
                               __m256 acc[4][4])
{
    const size_t bsz = q5 ? sizeof(struct quant_blk_q5_K) : sizeof(struct quant_blk_q4_K);
    const size_t qs_off = q5 ? offsetof(struct quant_blk_q5_K, qs) : offsetof(struct quant_blk_q4_K, qs);
    const __m256i m4 = _mm256_set1_epi8(15), m1 = _mm256_set1_epi8(1);
    __m256i sumi[4][4], hb[4], sc[4];
    __m128i mins[4];
    float dw[4], dm[4];

#pragma GCC unroll 4
    for (int r = 0; r < RB; r++) {
        const uint8_t *b = w + (size_t)r * wb + (size_t)i * bsz;
        prefetch(b);
        prefetch(b + 64);
        prefetch(b + 128);
        __m128i sm = k4_scales(b + 4);
        dw[r] = h2f(b);
        dm[r] = h2f(b + 2);
        sc[r] = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sm));
        mins[r] = _mm_cvtepu8_epi16(_mm_srli_si128(sm, 8));
        hb[r] = q5 ? ld256(b + 16) : _mm256_setzero_si256();
#pragma GCC unroll 4
        for (int c = 0; c < CB; c++)
            sumi[r][c] = _mm256_setzero_si256();
    }
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) {
        __m256i lo[4], hi[4], sl[4], sh[4];
#pragma GCC unroll 4
        for (int r = 0; r < RB; r++) {
            __m256i q = ld256(w + (size_t)r * wb + (size_t)i * bsz + qs_off + 32 * j);
            lo[r] = _mm256_and_si256(q, m4);
            hi[r] = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
            if (q5) {
                /* fifth bits: bit 2j for the low half, 2j+1 for the high */
                lo[r] = _mm256_or_si256(lo[r], _mm256_slli_epi16(_mm256_and_si256(hb[r], m1), 4));
                hi[r] = _mm256_or_si256(
                    hi[r], _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb[r], 1), m1), 4));
                hb[r] = _mm256_srli_epi16(hb[r], 2);
            }
            sl[r] = k4_scale_j(sc[r], 2 * j);
            sh[r] = k4_scale_j(sc[r], 2 * j + 1);
        }
#pragma GCC unroll 4
        for (int c = 0; c < CB; c++) {
            const struct cpu_q8_K *a = (const struct cpu_q8_K *)(x + (size_t)c * xb) + i;
            __m256i al = ld256(a->qs + 64 * j), ah = ld256(a->qs + 64 * j + 32);
#pragma GCC unroll 4
            for (int r = 0; r < RB; r++)
                sumi[r][c] = dot_scaled(dot_scaled(sumi[r][c], sl[r], lo[r], al), sh[r], hi[r], ah);
        }
    }
#pragma GCC unroll 4
    for (int c = 0; c < CB; c++) {
        const struct cpu_q8_K *a = (const struct cpu_q8_K *)(x + (size_t)c * xb) + i;
        __m128i bs = ld128(a->bsums32);
#pragma GCC unroll 4
        for (int r = 0; r < RB; r++) {
            __m256 mp = _mm256_cvtepi32_ps(_mm256_zextsi128_si256(_mm_madd_epi16(mins[r], bs)));
            acc[r][c] = _mm256_fmadd_ps(_mm256_set1_ps(dw[r] * a->d),
                                        _mm256_cvtepi32_ps(sumi[r][c]), acc[r][c]);
            acc[r][c] = _mm256_fnmadd_ps(_mm256_set1_ps(dm[r] * a->d), mp, acc[r][c]);
        }
    }
}

static AI X86_T void blk_q4_K(const int RB, const int CB, int64_t i, const uint8_t *w, size_t wb,
                              const uint8_t *x, size_t xb, __m256 acc[4][4])
{
    blk_q45_K(0, RB, CB, i, w, wb, x, xb, acc);
}
X86_TILE(q4_K, QK_K)

static AI X86_T void blk_q5_K(const int RB, const int CB, int64_t i, const uint8_t *w, size_t wb,
                              const uint8_t *x, size_t xb, __m256 acc[4][4])
{
    blk_q45_K(1, RB, CB, i, w, wb, x, xb, acc);
}
X86_TILE(q5_K, QK_K)

/* Q6_K block i: codes 0..63 stand for q - 32; the -32 is taken out once per
 * block as 32 * sum_k sc_k * bsum_k instead of per element. */
static AI X86_T void blk_q6_K(const int RB, const int CB, int64_t i, const uint8_t *w, size_t wb,
                              const uint8_t *x, size_t xb, __m256 acc[4][4])
{
    const __m256i m4 = _mm256_set1_epi8(15), m2 = _mm256_set1_epi8(3);
    __m256i sumi[4][4];
    __m128i sc8[4];
    float dw[4];

#pragma GCC unroll 4
    for (int r = 0; r < RB; r++) {
        const struct quant_blk_q6_K *b = (const struct quant_blk_q6_K *)(w + (size_t)r * wb) + i;
        dw[r] = h2f(b->d);
        sc8[r] = ld128(b->scales);
        prefetch(b->ql);
        prefetch(b->ql + 64);
        prefetch(b->ql + 128);
        prefetch(b->ql + 192);
#pragma GCC unroll 4
        for (int c = 0; c < CB; c++)
            sumi[r][c] = _mm256_setzero_si256();
    }
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) {
            /* vector k of half h: elements 128h + 32k ..; scales 8h + 2k, +1 */
            const __m128i shuf = _mm_set_epi64x(0x0101010101010101LL * (8 * h + 2 * k + 1),
                                                0x0101010101010101LL * (8 * h + 2 * k));
            __m256i q[4], sc[4];
#pragma GCC unroll 4
            for (int r = 0; r < RB; r++) {
                const struct quant_blk_q6_K *b =
                    (const struct quant_blk_q6_K *)(w + (size_t)r * wb) + i;
                __m256i ql = ld256(b->ql + 64 * h + 32 * (k & 1));
                __m256i qh = ld256(b->qh + 32 * h);
                if (k >= 2)
                    ql = _mm256_srli_epi16(ql, 4);
                qh = _mm256_srli_epi16(qh, 2 * k); /* an immediate once k is unrolled */
                q[r] = _mm256_or_si256(_mm256_and_si256(ql, m4),
                                       _mm256_slli_epi16(_mm256_and_si256(qh, m2), 4));
                sc[r] = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(sc8[r], shuf));
            }
#pragma GCC unroll 4
            for (int c = 0; c < CB; c++) {
                const struct cpu_q8_K *a = (const struct cpu_q8_K *)(x + (size_t)c * xb) + i;
                __m256i aq = ld256(a->qs + 128 * h + 32 * k);
#pragma GCC unroll 4
                for (int r = 0; r < RB; r++)
                    sumi[r][c] = dot_scaled(sumi[r][c], sc[r], q[r], aq);
            }
        }
    }
#pragma GCC unroll 4
    for (int c = 0; c < CB; c++) {
        const struct cpu_q8_K *a = (const struct cpu_q8_K *)(x + (size_t)c * xb) + i;
        __m256i bs = ld256(a->bsums);
#pragma GCC unroll 4
        for (int r = 0; r < RB; r++) {
            __m256i corr = _mm256_madd_epi16(_mm256_cvtepi8_epi16(sc8[r]), bs);
            __m256i si = _mm256_sub_epi32(sumi[r][c], _mm256_slli_epi32(corr, 5));
            acc[r][c] = _mm256_fmadd_ps(_mm256_set1_ps(dw[r] * a->d), _mm256_cvtepi32_ps(si),
                                        acc[r][c]);
        }
    }
}
X86_TILE(q6_K, QK_K)

/* ---- float weights x float activations --------------------------------- */

/* 8 weights at element k of a row, as floats: kind 0 F32, 1 F16, 2 BF16. */
static AI X86_T __m256 ld_w8(const int kind, const uint8_t *row, int64_t k)
{
    if (kind == 0)
        return _mm256_loadu_ps((const float *)(const void *)(row + 4 * k));
    if (kind == 1)
        return _mm256_cvtph_ps(ld128(row + 2 * k));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(ld128(row + 2 * k)), 16));
}

/* One weight as a float (the tail past the last multiple of 8). */
static AI X86_T float ld_w1(const int kind, const uint8_t *row, int64_t k)
{
    float f;
    if (kind == 0) {
        memcpy(&f, row + 4 * k, 4);
        return f;
    }
    if (kind == 1)
        return h2f(row + 2 * k);
    return quant_bf16_to_f32(quant_rd16(row + 2 * k));
}

/* Block i of a float row is its elements 8i .. 8i+7. */
static AI X86_T void blk_float(const int kind, const int RB, const int CB, int64_t i,
                               const uint8_t *w, size_t wb, const uint8_t *x, size_t xb,
                               __m256 acc[4][4])
{
    __m256 wv[4];

#pragma GCC unroll 4
    for (int r = 0; r < RB; r++) {
        if (i % 8 == 0)
            prefetch(w + (size_t)r * wb + (size_t)(8 * i) * (kind ? 2 : 4));
        wv[r] = ld_w8(kind, w + (size_t)r * wb, 8 * i);
    }
#pragma GCC unroll 4
    for (int c = 0; c < CB; c++) {
        __m256 xv = _mm256_loadu_ps((const float *)(const void *)(x + (size_t)c * xb) + 8 * i);
#pragma GCC unroll 4
        for (int r = 0; r < RB; r++)
            acc[r][c] = _mm256_fmadd_ps(wv[r], xv, acc[r][c]);
    }
}

/* Float rows: the 8-element blocks through X86_TILE (into y), then the
 * n % 8 tail added in order. */
#define X86_FLOAT_TILE(T, KIND)                                                                  \
    static AI X86_T void blk_##T##_body(const int RB, const int CB, int64_t i, const uint8_t *w, \
                                        size_t wb, const uint8_t *x, size_t xb,                  \
                                        __m256 acc[4][4])                                        \
    {                                                                                            \
        blk_float(KIND, RB, CB, i, w, wb, x, xb, acc);                                           \
    }                                                                                            \
    X86_TILE(T##_body, 8)                                                                        \
    static AI X86_T void tile_##T(const int RB, const int CB, int64_t n, const uint8_t *w,       \
                                  size_t wb, const uint8_t *x, size_t xb, float *y, size_t ys,   \
                                  int add)                                                       \
    {                                                                                            \
        tile_##T##_body(RB, CB, n, w, wb, x, xb, y, ys, add);                                    \
        for (int c = 0; c < CB; c++)                                                             \
            for (int r = 0; r < RB; r++)                                                         \
                for (int64_t t = n / 8 * 8; t < n; t++)                                          \
                    y[(size_t)c * ys + r] += ld_w1(KIND, w + (size_t)r * wb, t) *                \
                                             ((const float *)(const void *)(x + (size_t)c * xb))[t]; \
    }
X86_FLOAT_TILE(f32, 0)
X86_FLOAT_TILE(f16, 1)
X86_FLOAT_TILE(bf16, 2)

/* ---- drivers ------------------------------------------------------------ */

/* Covers the nr x nc output with X86_RB x X86_CB tiles, then 1 x 1 tiles
 * (one weight row streamed at a time) for leftover columns: that is all of
 * a decode step. */
#define X86_GEMM(T)                                                                              \
    static X86_T void gemm_##T(int64_t n, int32_t nr, int32_t nc, const void *w, size_t wb,      \
                               const void *x, size_t xb, float *y, size_t ys, int add)           \
    {                                                                                            \
        const uint8_t *W = w, *X = x;                                                            \
        int32_t c = 0, r;                                                                        \
        for (; X86_CB > 1 && c + X86_CB <= nc; c += X86_CB) {                                    \
            for (r = 0; r + X86_RB <= nr; r += X86_RB)                                           \
                tile_##T(X86_RB, X86_CB, n, W + r * wb, wb, X + c * xb, xb, y + c * ys + r, ys,  \
                         add);                                                                   \
            for (; r < nr; r++)                                                                  \
                tile_##T(1, X86_CB, n, W + r * wb, wb, X + c * xb, xb, y + c * ys + r, ys, add); \
        }                                                                                        \
        for (; c < nc; c++)                                                                      \
            for (r = 0; r < nr; r++)                                                             \
                tile_##T(1, 1, n, W + r * wb, wb, X + c * xb, xb, y + c * ys + r, ys, add);      \
    }

X86_GEMM(f32)
X86_GEMM(f16)
X86_GEMM(bf16)
X86_GEMM(q4_0)
X86_GEMM(q8_0)
X86_GEMM(q4_K)
X86_GEMM(q5_K)
X86_GEMM(q6_K)
X86_GEMM(mxfp4)

/* ---- attention and activation helpers ----------------------------------- */

/* Four queries at a time against the 16 slots (two vectors): per d one
 * load of the key row kt[d], a broadcast of each q[i][d] and two FMAs each;
 * no horizontal sums. Every query's scores come out of the same FMA chain
 * whether it is computed in a group of four or alone. */
static AI X86_T void kq4(const int nq, const float *const *q, int64_t hd, const uint8_t *kt,
                         const int f16, float *const *s)
{
    __m256 acc[4][2];

#pragma GCC unroll 4
    for (int i = 0; i < nq; i++)
        acc[i][0] = acc[i][1] = _mm256_setzero_ps();
    for (int64_t d = 0; d < hd; d++) {
        __m256 k0 = ld_w8(f16 ? 1 : 0, kt, d * 16), k1 = ld_w8(f16 ? 1 : 0, kt, d * 16 + 8);
#pragma GCC unroll 4
        for (int i = 0; i < nq; i++) {
            __m256 qv = _mm256_broadcast_ss(q[i] + d);
            acc[i][0] = _mm256_fmadd_ps(qv, k0, acc[i][0]);
            acc[i][1] = _mm256_fmadd_ps(qv, k1, acc[i][1]);
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < nq; i++) {
        _mm256_storeu_ps(s[i], acc[i][0]);
        _mm256_storeu_ps(s[i] + 8, acc[i][1]);
    }
}

static X86_T void kq_block(const float *const *q, int nq, int64_t hd, const void *kt, int f16,
                           float *const *s)
{
    int i = 0;

    for (; i + 4 <= nq; i += 4)
        kq4(4, q + i, hd, kt, f16, s + i);
    for (; i < nq; i++)
        kq4(1, q + i, hd, kt, f16, s + i);
}

/* P.V for NQ queries over 64 dimensions (8 vectors) at once: each value
 * row chunk is loaded once for the NQ queries and y stays in registers
 * across the n positions; every y element is summed over j in order, as one
 * query alone would be. */
static AI X86_T void pv64(const int NQ, const float *const *w, float *const *y, int64_t d0,
                          int nd, const float *v, int64_t hd, int n)
{
    __m256 acc[2][8];

#pragma GCC unroll 2
    for (int i = 0; i < NQ; i++)
#pragma GCC unroll 8
        for (int k = 0; k < 8; k++)
            acc[i][k] = k < nd ? _mm256_loadu_ps(y[i] + d0 + 8 * k) : _mm256_setzero_ps();
    for (int j = 0; j < n; j++) {
        const float *vr = v + (int64_t)j * hd + d0;
        __m256 wj[2];
#pragma GCC unroll 2
        for (int i = 0; i < NQ; i++)
            wj[i] = _mm256_broadcast_ss(w[i] + j);
#pragma GCC unroll 8
        for (int k = 0; k < 8; k++) {
            if (k < nd) {
                __m256 vv = _mm256_loadu_ps(vr + 8 * k);
#pragma GCC unroll 2
                for (int i = 0; i < NQ; i++)
                    acc[i][k] = _mm256_fmadd_ps(wj[i], vv, acc[i][k]);
            }
        }
    }
#pragma GCC unroll 2
    for (int i = 0; i < NQ; i++)
#pragma GCC unroll 8
        for (int k = 0; k < 8; k++)
            if (k < nd)
                _mm256_storeu_ps(y[i] + d0 + 8 * k, acc[i][k]);
}

static X86_T void pv_block(const float *const *w, float *const *y, int nq, const float *v,
                           int64_t hd, int n)
{
    int64_t d0 = 0;

    for (; d0 + 8 <= hd; d0 += 64) {
        int nd = (int)((hd - d0) / 8 < 8 ? (hd - d0) / 8 : 8), i = 0;
        for (; X86_PVQ > 1 && i + 2 <= nq; i += 2)
            pv64(2, w + i, y + i, d0, nd, v, hd, n);
        for (; i < nq; i++)
            pv64(1, w + i, y + i, d0, nd, v, hd, n);
    }
    for (int64_t d = hd / 8 * 8; d < hd; d++)
        for (int i = 0; i < nq; i++)
            for (int j = 0; j < n; j++)
                y[i][d] += w[i][j] * v[(int64_t)j * hd + d];
}

static X86_T void kv_to_f32(const void *src, int64_t n, int f16, float *dst)
{
    int64_t i = 0;

    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, ld_w8(f16 ? 1 : 0, src, i));
    for (; i < n; i++)
        dst[i] = ld_w1(f16 ? 1 : 0, src, i);
}

/* e^x for 8 lanes, Cephes' expf: 2^n * p(r) with r = x - n ln2 split in two
 * parts and a degree-5 polynomial; within 2 ulp of expf, 0 below -87.3. */
static AI X86_T __m256 exp8(__m256 x)
{
    const __m256 lo = _mm256_set1_ps(-87.33654f);
    __m256 xc = _mm256_min_ps(_mm256_max_ps(x, lo), _mm256_set1_ps(88.3762626647949f));
    __m256 fx = _mm256_floor_ps(_mm256_fmadd_ps(xc, _mm256_set1_ps(1.44269504088896341f),
                                                _mm256_set1_ps(0.5f)));
    __m256 r = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693359375f), xc);
    __m256 y = _mm256_set1_ps(1.9875691500E-4f), r2;
    __m256i e;

    r = _mm256_fnmadd_ps(fx, _mm256_set1_ps(-2.12194440E-4f), r);
    r2 = _mm256_mul_ps(r, r);
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.3981999507E-3f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(8.3334519073E-3f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(4.1665795894E-2f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.6666665459E-1f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(5.0000001201E-1f));
    y = _mm256_fmadd_ps(y, r2, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvttps_epi32(fx), _mm256_set1_epi32(127)), 23);
    y = _mm256_mul_ps(y, _mm256_castsi256_ps(e));
    return _mm256_and_ps(y, _mm256_cmp_ps(x, lo, _CMP_GE_OQ));
}

static X86_T void round_f16(float *x, int64_t n);

/* The scalar softmax's operations lane by lane (same products, same max,
 * exp8 for expf), so only the exp differs from cpu_dot.c's. */
static X86_T void softmax(float *x, int64_t n, float scale, int round16, float sink)
{
    __m256 vs = _mm256_set1_ps(scale), vmax = _mm256_set1_ps(-INFINITY), vm, vinv;
    float mx, inv, lanes[8];
    double sum = 0.0;
    int64_t i;

    for (i = 0; i + 8 <= n; i += 8) {
        __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + i), vs);
        _mm256_storeu_ps(x + i, v);
        vmax = _mm256_max_ps(vmax, v);
    }
    _mm256_storeu_ps(lanes, vmax);
    mx = lanes[0];
    for (int k = 1; k < 8; k++)
        mx = lanes[k] > mx ? lanes[k] : mx;
    for (; i < n; i++) {
        x[i] *= scale;
        mx = x[i] > mx ? x[i] : mx;
    }
    mx = sink > mx ? sink : mx;
    vm = _mm256_set1_ps(mx);
    for (i = 0; i + 8 <= n; i += 8) {
        __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm));
        _mm256_storeu_ps(x + i, e);
        sum += hsum8(e);
    }
    for (; i < n; i++) {
        x[i] = expf(x[i] - mx);
        sum += x[i];
    }
    if (sink > -INFINITY)
        sum += (double)expf(sink - mx);
    inv = (float)(1.0 / sum);
    vinv = _mm256_set1_ps(inv);
    for (i = 0; i + 8 <= n; i += 8)
        _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), vinv));
    for (; i < n; i++)
        x[i] *= inv;
    if (round16)
        round_f16(x, n);
}

static X86_T void swiglu(float *g, const float *u, int64_t n)
{
    const __m256 one = _mm256_set1_ps(1.0f);
    int64_t i = 0;

    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(g + i);
        __m256 e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), v));
        _mm256_storeu_ps(g + i, _mm256_mul_ps(_mm256_div_ps(v, _mm256_add_ps(one, e)),
                                              _mm256_loadu_ps(u + i)));
    }
    for (; i < n; i++)
        g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

static X86_T void round_f16(float *x, int64_t n)
{
    int64_t i = 0;

    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(x + i, _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(x + i),
                                                                 _MM_FROUND_TO_NEAREST_INT)));
    for (; i < n; i++)
        x[i] = _cvtsh_ss(_cvtss_sh(x[i], _MM_FROUND_TO_NEAREST_INT));
}

const struct cpu_dot X86_TABLE = {
    .isa = X86_ISA,
    .name = X86_NAME,
    CPU_DOT_FUNCS,
};

#endif
