/*
 * test_cuda.c: the CUDA kernels and backend against the CPU reference, on
 * a GPU host (tests/gpu/run builds and runs it; CI has no GPU).
 *
 *   test_cuda [MODEL.gguf ...]
 *
 * Kernels, on fresh random inputs, outputs poisoned with NaN first so an
 * unwritten element fails:
 *   dequantize, embedding  bit-exact with common/quant.h, every type
 *   gemv                   ||y - ref|| / ||ref|| < 1e-5 (ref in double over the
 *                          CPU-dequantized weights and the activations as the
 *                          kernel promises to use them: rounded to F16/BF16 for
 *                          those weights, 8-bit per 32 for Q4_K and Q6_K),
 *                          nt = 1, 3, 8, 11, add on/off
 *   qgemm (Q4_K, Q6_K)     < 1e-5 against bf16 weights and input, every K
 *                          split and stream-K, products of one input in one
 *                          launch, repeatable bit for bit; Q4_K in bf16
 *                          arithmetic (the default) < 1e-2
 *   rmsnorm (+residual)    < 1e-6;  swiglu < 1e-6
 *   rope + paged K/V store q < 1e-6; every stored fp16 within 1 ulp, the rest
 *                          of the arena untouched
 *   attention              < 1e-4 against a double reference that rounds q and
 *                          the softmax weights to fp16 as the kernel promises;
 *                          per token (all, or a list) and in tiles (up to 12k
 *                          of context, NaN in the slots no one wrote)
 *   argmax                 exact, ties and NaN included
 *   moe route              choices exactly the host's (softmax in double, ties to
 *                          the lower expert, k up to all of 512), weights < 2e-6
 *                          and summing to 1, the grouping of its choices exactly
 *                          (offsets, rows in token order, work list), twice
 *   moe gemm               every type, grouped gate/up (inputs by token) and down
 *                          (by gathered row) < 1e-5 against float64, 1-300 tokens,
 *                          experts never chosen full of NaN, padding untouched
 *   moe combine            bit-exact with the CPU's float operations
 * Each model: the CUDA backend against the CPU backend (F16 KV both):
 * two sequences, chunked prefill then 24 greedy decode steps with
 * shuffled block tables; logits rel. error bound per weight type (printed),
 * greedy tokens must be identical for F32/F16/BF16 models.
 * Prints one line per check and exits 1 if any failed.
 */
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/ggml_type.h"
#include "common/quant.h"
#include "kernels/kernels.h"
#include "runtime/engine/backend.h"
#include "runtime/cuda/cuda.h"
#include "runtime/cuda/cuda_plan.h"
#include "runtime/model/lora.h"
#include "runtime/model/model.h"

static int failures;
static uint64_t rng = 0x9E3779B97F4A7C15ull;

static uint64_t next_u64(void)
{
    uint64_t z = (rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static float frand(void) /* uniform in [-1, 1) */
{
    return (float)((double)(next_u64() >> 11) * 0x1.0p-53 * 2.0 - 1.0);
}

/* One line: the check, what was measured (what: "rel err", "elements
 * differ", ...) and its bound. */
static void report(const char *name, int ok, const char *what, double v, double bound)
{
    printf("%s %-44s %s %.3g (bound %.1e)\n", ok ? "ok  " : "FAIL", name, what, v, bound);
    if (!ok)
        failures++;
}

#define CK(call)                                                                                 \
    do {                                                                                         \
        struct mf_err e_ = {0};                                                                  \
        int r_ = (call);                                                                         \
        (void)e_;                                                                                \
        if (r_) {                                                                                \
            fprintf(stderr, "%s:%d: %s failed: %d\n", __FILE__, __LINE__, #call, r_);           \
            exit(2);                                                                             \
        }                                                                                        \
    } while (0)

static struct mf_err err;
static struct mfk_ctx *ctx;
static int32_t n_sms; /* the device's multiprocessors (attention splits) */

static void *dalloc(size_t n)
{
    void *p;
    if (mfk_malloc(ctx, n, &p, &err)) {
        fprintf(stderr, "test_cuda: %s\n", err.msg);
        exit(2);
    }
    return p;
}

static void h2d(void *d, const void *h, size_t n)
{
    CK(mfk_copy_h2d(ctx, d, h, n, &err));
    CK(mfk_sync(ctx, &err));
}

static void d2h(void *h, const void *d, size_t n)
{
    CK(mfk_copy_d2h(ctx, h, d, n, &err));
    CK(mfk_sync(ctx, &err));
}

static void poison(void *d, size_t n)
{
    CK(mfk_memset(ctx, d, 0xFF, n, &err)); /* all-ones floats are NaN */
}

static double rel_err(const float *y, const double *ref, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)y[i] - ref[i];
        if (y[i] != y[i])
            return INFINITY;
        num += d * d;
        den += ref[i] * ref[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

static float round_act(enum ggml_type t, float x)
{
    if (t == GGML_TYPE_F16)
        return quant_f16_to_f32(quant_f32_to_f16(x));
    if (t == GGML_TYPE_BF16)
        return quant_bf16_to_f32(quant_f32_to_bf16(x));
    return x;
}

/* ---- weights: dequantize, embedding, gemv -------------------------------- */

/* xa[c][i]: the activations x (nt rows of ne0, ldx apart) as the GEMV meets
 * them for weights of type t: rounded to F16/BF16 for those weights; for
 * Q4_K and Q6_K quantized to 8 bits per 32 (d = max|x| / 127, q =
 * rint(x / d)), which the kernel promises to do exactly so. */
static void act_ref(enum ggml_type t, const float *x, int64_t ldx, int nt, int64_t ne0, double *xa)
{
    const int q8 = t == GGML_TYPE_Q4_K || t == GGML_TYPE_Q6_K;
    for (int c = 0; c < nt; c++)
        for (int64_t o = 0; o < ne0; o += 32) {
            float amax = 0, d;
            for (int e = 0; e < 32; e++)
                amax = fmaxf(amax, fabsf(x[c * ldx + o + e]));
            d = amax / 127.0f;
            for (int e = 0; e < 32; e++) {
                float v = x[c * ldx + o + e];
                xa[c * ne0 + o + e] =
                    q8 ? (double)d * (amax > 0 ? (int)rintf(v / d) : 0) : (double)round_act(t, v);
            }
        }
}

/* mfk_gemv of w (deq: its values, row after row) at nt tokens of random
 * input (rows ldx apart, ldy for the output) against the float64 product
 * with the activations' reference (act_ref), within 1e-5 (measured up to
 * 1.3e-7); add: y starts as random values the product is added to, else
 * poisoned (every element must be written). */
static void gemv_check(const char *name, const struct mfk_weight *w, const float *deq, int nt,
                       int64_t ldx, int64_t ldy, int add)
{
    const enum ggml_type t = (enum ggml_type)w->type;
    const int64_t ne0 = w->ne0, ne1 = w->ne1;
    float *x = malloc((size_t)(nt * ldx) * 4), *y0 = malloc((size_t)(nt * ldy) * 4);
    float *y = malloc((size_t)(nt * ldy) * 4), *yc = malloc((size_t)(nt * ne1) * 4);
    double *xa = malloc((size_t)(nt * ne0) * 8), *ref = malloc((size_t)(nt * ne1) * 8);
    for (int64_t i = 0; i < nt * ldx; i++)
        x[i] = frand();
    for (int64_t i = 0; i < nt * ldy; i++)
        y0[i] = frand();
    act_ref(t, x, ldx, nt, ne0, xa);
    for (int c = 0; c < nt; c++)
        for (int64_t r = 0; r < ne1; r++) {
            double sum = add ? (double)y0[c * ldy + r] : 0.0;
            for (int64_t i = 0; i < ne0; i++)
                sum += (double)deq[r * ne0 + i] * xa[c * ne0 + i];
            ref[c * ne1 + r] = sum;
        }
    float *dx = dalloc((size_t)(nt * ldx) * 4), *dy = dalloc((size_t)(nt * ldy) * 4);
    h2d(dx, x, (size_t)(nt * ldx) * 4);
    if (add)
        h2d(dy, y0, (size_t)(nt * ldy) * 4);
    else
        poison(dy, (size_t)(nt * ldy) * 4);
    CK(mfk_gemv(ctx, w, dx, ldx, nt, dy, ldy, add, &err));
    d2h(y, dy, (size_t)(nt * ldy) * 4);
    for (int c = 0; c < nt; c++)
        memcpy(yc + c * ne1, y + c * ldy, (size_t)ne1 * 4);
    const double e = rel_err(yc, ref, (size_t)(nt * ne1)), bound = 1e-5;
    report(name, e < bound, "rel err", e, bound);
    mfk_free(dx), mfk_free(dy);
    free(x), free(y0), free(y), free(yc), free(xa), free(ref);
}

/* mfk_gemm (tensor cores, cuBLAS) against the dequantized weights: x
 * rounded to bf16 (fp16 for F16 weights; F32 stays float), sums in double;
 * the loose bound covers the weights' own rounding to bf16 after
 * dequantizing, and a second reference with those bf16 weights leaves only
 * the fp32 summation (1e-5). nt 37, 128 and 300 (the rows split into
 * chunks of 64 MiB only for wide weights). Q4_K's qgemm.cu products (37
 * tokens) with exact weights here; test_qgemm checks its bf16 arithmetic. */
static void test_gemm(const struct mfk_weight *w, enum ggml_type t, const float *deq)
{
    char name[96];
    struct mf_err why;
    if (!mfk_gemm_available(ctx, &why)) {
        printf("FAIL gemm %s: %s\n", ggml_type_name(t), why.msg);
        failures++;
        return;
    }
    const int64_t ne0 = w->ne0, ne1 = w->ne1;
    const int direct = t == GGML_TYPE_F32 || t == GGML_TYPE_F16 || t == GGML_TYPE_BF16;
    static const int nts[] = {37, 128, 300};
    mfk_ctx_qgemm_exact(ctx, 1);
    for (size_t k = 0; k < sizeof nts / sizeof nts[0]; k++) {
        const int nt = nts[k];
        const int64_t ldx = ne0 + 4, ldy = ne1 + 3;
        float *x = malloc((size_t)(nt * ldx) * 4), *y0 = malloc((size_t)(nt * ldy) * 4);
        float *y = malloc((size_t)(nt * ldy) * 4), *yc = malloc((size_t)(nt * ne1) * 4);
        double *ref = malloc((size_t)(nt * ne1) * 8), *ref16 = malloc((size_t)(nt * ne1) * 8);
        for (int64_t i = 0; i < nt * ldx; i++)
            x[i] = frand();
        for (int64_t i = 0; i < nt * ldy; i++)
            y0[i] = frand();
        size_t sb = mfk_gemm_scratch(w, nt);
        void *scratch = dalloc(sb);
        float *dx = dalloc((size_t)(nt * ldx) * 4), *dy = dalloc((size_t)(nt * ldy) * 4);
        h2d(dx, x, (size_t)(nt * ldx) * 4);
        /* bf16 inputs: each product carries up to 2^-8 relative rounding
         * (random signs, so the sum's error grows as its square root) */
        const double bound = t == GGML_TYPE_F32 ? 1e-5 : direct ? 1e-5 : 1e-2;
        for (int add = 0; add < 2; add++) {
            for (int c = 0; c < nt; c++)
                for (int64_t r = 0; r < ne1; r++) {
                    double s = add ? (double)y0[c * ldy + r] : 0.0, s16 = s;
                    for (int64_t i = 0; i < ne0; i++) {
                        const double xi =
                            t == GGML_TYPE_F32
                                ? (double)x[c * ldx + i]
                                : (double)round_act(t == GGML_TYPE_F16 ? GGML_TYPE_F16
                                                                       : GGML_TYPE_BF16,
                                                    x[c * ldx + i]);
                        s += (double)deq[r * ne0 + i] * xi;
                        if (!direct)
                            s16 += (double)round_act(GGML_TYPE_BF16, deq[r * ne0 + i]) * xi;
                    }
                    ref[c * ne1 + r] = s;
                    ref16[c * ne1 + r] = s16;
                }
            if (add)
                h2d(dy, y0, (size_t)(nt * ldy) * 4);
            else
                poison(dy, (size_t)(nt * ldy) * 4);
            CK(mfk_gemm(ctx, w, dx, ldx, nt, dy, ldy, add, scratch, sb, &err));
            d2h(y, dy, (size_t)(nt * ldy) * 4);
            for (int c = 0; c < nt; c++)
                memcpy(yc + c * ne1, y + c * ldy, (size_t)ne1 * 4);
            double e = rel_err(yc, ref, (size_t)(nt * ne1));
            snprintf(name, sizeof name, "gemm %s nt=%d%s", ggml_type_name(t), nt, add ? " add" : "");
            report(name, e < bound, "rel err", e, bound);
            if (!direct) { /* the weights as the kernels use them: bf16 of the exact values,
                              so only fp32 summation remains */
                e = rel_err(yc, ref16, (size_t)(nt * ne1));
                snprintf(name, sizeof name, "gemm %s nt=%d%s vs bf16 weights", ggml_type_name(t),
                         nt, add ? " add" : "");
                report(name, e < 1e-5, "rel err", e, 1e-5);
            }
        }
        /* SwiGLU's rounded output straight into the product (mfk_swiglu_half,
         * mfk_gemm_rounded) = mfk_swiglu then mfk_gemm, bit for bit */
        if (t != GGML_TYPE_F32) {
            float *du = dalloc((size_t)(nt * ldx) * 4), *dg = dalloc((size_t)(nt * ldx) * 4);
            float *y2 = malloc((size_t)(nt * ldy) * 4), *u = malloc((size_t)(nt * ldx) * 4);
            for (int64_t i = 0; i < nt * ldx; i++)
                u[i] = frand() * 2;
            h2d(du, u, (size_t)(nt * ldx) * 4);
            h2d(dg, x, (size_t)(nt * ldx) * 4);
            h2d(dy, y0, (size_t)(nt * ldy) * 4);
            CK(mfk_swiglu(ctx, dg, du, ldx, nt, ne0, NULL, &err));
            CK(mfk_gemm(ctx, w, dg, ldx, nt, dy, ldy, 1, scratch, sb, &err));
            d2h(y, dy, (size_t)(nt * ldy) * 4);
            h2d(dy, y0, (size_t)(nt * ldy) * 4);
            CK(mfk_swiglu_half(ctx, dx, du, ldx, nt, ne0, scratch, mfk_gemm_rounding(w) == 2,
                               &err));
            CK(mfk_gemm_rounded(ctx, w, nt, dy, ldy, 1, scratch, sb, &err));
            d2h(y2, dy, (size_t)(nt * ldy) * 4);
            int same = 1;
            for (int c = 0; c < nt; c++)
                same &= memcmp(y + c * ldy, y2 + c * ldy, (size_t)ne1 * 4) == 0;
            snprintf(name, sizeof name, "gemm %s nt=%d: swiglu's rounded input = swiglu + gemm",
                     ggml_type_name(t), nt);
            report(name, same, "equal", same, 1);
            mfk_free(du), mfk_free(dg), free(y2), free(u);
        }
        /* too little scratch is refused, not overrun (F32 needs none) */
        if (sb > 0) {
            int rc = mfk_gemm(ctx, w, dx, ldx, nt, dy, ldy, 0, scratch, sb - 256, &why);
            snprintf(name, sizeof name, "gemm %s nt=%d: short scratch refused", ggml_type_name(t),
                     nt);
            report(name, rc == MF_EINVAL, "rc", rc, 0);
        }
        mfk_free(dx), mfk_free(dy), mfk_free(scratch);
        free(x), free(y0), free(y), free(yc), free(ref), free(ref16);
    }
    mfk_ctx_qgemm_exact(ctx, 0);
}

/* A weight of random rows quantized to t on the device, and *deq its rows
 * as the tensor cores take them (dequantized, rounded to bf16). */
static struct mfk_weight qweight_new(enum ggml_type t, int64_t ne0, int64_t ne1, float **deq)
{
    uint64_t rb;
    ggml_type_row_size(t, (uint64_t)ne0, &rb);
    float *src = malloc((size_t)ne0 * 4);
    uint8_t *q = malloc((size_t)rb * (size_t)ne1);
    *deq = malloc((size_t)(ne0 * ne1) * 4);
    for (int64_t r = 0; r < ne1; r++) {
        for (int64_t i = 0; i < ne0; i++)
            src[i] = frand() * 0.05f;
        CK(quant_quantize_row(t, src, q + r * rb, ne0, &err));
        CK(quant_dequantize_row(t, q + r * rb, *deq + r * ne0, ne0, &err));
        for (int64_t i = 0; i < ne0; i++) /* as the kernel feeds the tensor cores */
            (*deq)[r * ne0 + i] = round_act(GGML_TYPE_BF16, (*deq)[r * ne0 + i]);
    }
    void *dw = dalloc((size_t)rb * (size_t)ne1);
    h2d(dw, q, (size_t)rb * (size_t)ne1);
    free(src), free(q);
    return (struct mfk_weight){.data = dw, .type = (int)t, .ne0 = ne0, .ne1 = ne1, .row_bytes = rb};
}

/* Products of one input in one stream-K launch (mfk_qgemm_n): three
 * weights of 1040, 300 and 17 rows (tiles cut across the weights' ends),
 * 4096 wide (Q6_K by tensor map) and 1536 (Q6_K by cp.async), at 9, 33, 64
 * and 100 tokens (two token tiles), each output against the double
 * reference (1e-5; Q4_K's bf16 arithmetic 1e-2), poisoned first with the
 * rows past each weight's end left poisoned, repeated for the same bits,
 * with alpha and add; through mfk_gemm_n too (a Q4_K pair and a Q6_K
 * weight: one launch for the pair), against the clustered grid's. Then
 * what it refuses, outputs untouched: stream-K off, 0 or 4 products,
 * mixed types or widths, more tokens than the limit, an unaligned input. */
static void test_qgemm_group(enum ggml_type t)
{
    static const int64_t rows[3] = {1040, 300, 17}, widths[2] = {4096, 1536};
    static const int nts[] = {9, 33, 64, 100};
    char name[128];
    CK(mfk_ctx_qgemm(ctx, 128, &err));
    CK(mfk_ctx_qgemm_sk(ctx, 1, &err));
    for (int exact = 1; exact >= (t == GGML_TYPE_Q4_K ? 0 : 1); exact--)
        for (int wi = 0; wi < 2; wi++) {
            const int64_t ne0 = widths[wi];
            const char *how = exact ? "" : " (bf16 arithmetic)";
            const double bound = exact ? 1e-5 : 1e-2;
            mfk_ctx_qgemm_exact(ctx, exact);
            struct mfk_weight w[3];
            const struct mfk_weight *wp[3];
            float *deq[3];
            for (int k = 0; k < 3; k++)
                w[k] = qweight_new(t, ne0, rows[k], &deq[k]), wp[k] = &w[k];
            for (size_t ni = 0; ni < sizeof nts / sizeof nts[0]; ni++) {
                const int nt = nts[ni];
                const int64_t ldx = ne0 + 4;
                float *x = malloc((size_t)(nt * ldx) * 4), *dx = dalloc((size_t)(nt * ldx) * 4);
                for (int64_t i = 0; i < nt * ldx; i++)
                    x[i] = frand();
                h2d(dx, x, (size_t)(nt * ldx) * 4);
                void *dxb = dalloc((size_t)(nt * ne0) * 2); /* the input as mfk_gemm rounds it */
                CK(mfk_round_half(ctx, dx, ldx, nt, ne0, dxb, 1, &err));
                float *dy[3], *y[3], *y2[3], *y0[3];
                int64_t ldy[3];
                double *ref[3];
                for (int k = 0; k < 3; k++) {
                    ldy[k] = rows[k] + 5;
                    const size_t n = (size_t)(nt * ldy[k]);
                    dy[k] = dalloc(n * 4), y[k] = malloc(n * 4), y2[k] = malloc(n * 4);
                    y0[k] = malloc(n * 4), ref[k] = malloc((size_t)(nt * rows[k]) * 8);
                    for (size_t i = 0; i < n; i++)
                        y0[k][i] = frand();
                    for (int c = 0; c < nt; c++)
                        for (int64_t r = 0; r < rows[k]; r++) {
                            double sum = 0;
                            for (int64_t i = 0; i < ne0; i++)
                                sum += (double)deq[k][r * ne0 + i] *
                                       round_act(GGML_TYPE_BF16, x[c * ldx + i]);
                            ref[k][c * rows[k] + r] = sum;
                        }
                }
                for (int pass = 0; pass < 3; pass++) { /* plain, again, alpha + add */
                    for (int k = 0; k < 3; k++) {
                        if (pass == 2)
                            h2d(dy[k], y0[k], (size_t)(nt * ldy[k]) * 4);
                        else
                            poison(dy[k], (size_t)(nt * ldy[k]) * 4);
                    }
                    CK(mfk_qgemm_n(ctx, 3, wp, dxb, nt, dy, ldy, pass == 2 ? 0.75f : 1.0f,
                                   pass == 2, &err));
                    for (int k = 0; k < 3; k++)
                        d2h(pass == 1 ? y2[k] : y[k], dy[k], (size_t)(nt * ldy[k]) * 4);
                    for (int k = 0; k < 3; k++) {
                        const char *lbl = pass == 1   ? " repeats bit for bit"
                                          : pass == 2 ? " alpha add"
                                                      : "";
                        snprintf(name, sizeof name, "qgemm group %s%s %lld of %lldx%lld nt=%d%s",
                                 ggml_type_name(t), how, (long long)rows[k],
                                 (long long)(rows[0] + rows[1] + rows[2]), (long long)ne0, nt, lbl);
                        if (pass == 1) {
                            const int same = memcmp(y[k], y2[k], (size_t)(nt * ldy[k]) * 4) == 0;
                            report(name, same, "equal", same, 1);
                            continue;
                        }
                        double num = 0, den = 0;
                        int untouched = 1;
                        for (int c = 0; c < nt; c++) {
                            for (int64_t r = 0; r < rows[k]; r++) {
                                const double want = pass == 2 ? (double)y0[k][c * ldy[k] + r] +
                                                                    0.75 * ref[k][c * rows[k] + r]
                                                              : ref[k][c * rows[k] + r];
                                const double d = (double)y[k][c * ldy[k] + r] - want;
                                num += d * d, den += want * want;
                            }
                            for (int64_t r = rows[k]; r < ldy[k]; r++) /* past the weight */
                                untouched &= pass == 2
                                                 ? y[k][c * ldy[k] + r] == y0[k][c * ldy[k] + r]
                                                 : isnan(y[k][c * ldy[k] + r]);
                        }
                        const double e = den > 0 ? sqrt(num / den) : INFINITY;
                        report(name, e < bound && untouched, untouched ? "rel err" : "gap written",
                               e, bound);
                    }
                }
                /* mfk_gemm_n: the first two (one launch) and a Q6_K or Q4_K third
                 * (its own), against the clustered grid's products */
                if (exact && ni == 2) {
                    const enum ggml_type other =
                        t == GGML_TYPE_Q4_K ? GGML_TYPE_Q6_K : GGML_TYPE_Q4_K;
                    float *od;
                    struct mfk_weight ow = qweight_new(other, ne0, 300, &od);
                    const struct mfk_weight *mw[3] = {&w[0], &w[1], &ow};
                    float *my[3] = {dy[0], dy[1], dy[2]}, *cmp[2][3];
                    const int64_t mld[3] = {ldy[0], ldy[1], 305};
                    size_t sb = 0;
                    for (int k = 0; k < 3; k++)
                        if (mfk_gemm_scratch(mw[k], nt) > sb)
                            sb = mfk_gemm_scratch(mw[k], nt);
                    void *scratch = dalloc(sb);
                    float *d3 = dalloc((size_t)(nt * 305) * 4);
                    my[2] = d3;
                    for (int sk = 0; sk < 2; sk++) {
                        CK(mfk_ctx_qgemm_sk(ctx, sk, &err));
                        for (int k = 0; k < 3; k++)
                            poison(my[k], (size_t)(nt * mld[k]) * 4);
                        CK(mfk_gemm_n(ctx, 3, mw, dx, ldx, nt, my, mld, 0, scratch, sb, &err));
                        for (int k = 0; k < 3; k++) {
                            cmp[sk][k] = malloc((size_t)(nt * mld[k]) * 4);
                            d2h(cmp[sk][k], my[k], (size_t)(nt * mld[k]) * 4);
                        }
                    }
                    double worst = 0;
                    for (int k = 0; k < 3; k++) {
                        double num = 0, den = 0;
                        for (int c = 0; c < nt; c++)
                            for (int64_t r = 0; r < (k < 2 ? rows[k] : 300); r++) {
                                const double a = cmp[1][k][c * mld[k] + r],
                                             b = cmp[0][k][c * mld[k] + r];
                                num += (a - b) * (a - b), den += b * b;
                            }
                        const double e = den > 0 ? sqrt(num / den) : INFINITY;
                        worst = e > worst || isnan(e) ? e : worst;
                        free(cmp[0][k]), free(cmp[1][k]);
                    }
                    snprintf(name, sizeof name,
                             "qgemm group %s: mfk_gemm_n stream-K ~ clustered %lld wide nt=%d",
                             ggml_type_name(t), (long long)ne0, nt);
                    report(name, worst < 1e-5, "rel err", worst, 1e-5);
                    CK(mfk_ctx_qgemm_sk(ctx, 1, &err));
                    mfk_free(scratch), mfk_free(d3), mfk_free((void *)ow.data), free(od);
                }
                for (int k = 0; k < 3; k++)
                    mfk_free(dy[k]), free(y[k]), free(y2[k]), free(y0[k]), free(ref[k]);
                mfk_free(dx), mfk_free(dxb), free(x);
            }
            for (int k = 0; k < 3; k++)
                mfk_free((void *)w[k].data), free(deq[k]);
        }

    /* refusals: MF_EINVAL, nothing written */
    struct mf_err why;
    float *deq;
    const int64_t ne0 = 1024;
    struct mfk_weight a = qweight_new(t, ne0, 40, &deq), b = a, wide = a, q8 = a;
    const enum ggml_type other = t == GGML_TYPE_Q4_K ? GGML_TYPE_Q6_K : GGML_TYPE_Q4_K;
    free(deq);
    b.type = (int)other;
    ggml_type_row_size(other, (uint64_t)ne0, &b.row_bytes);
    wide.ne0 = 512, wide.row_bytes = a.row_bytes / 2;
    q8.type = GGML_TYPE_Q8_0;
    void *bx = dalloc((size_t)ne0 * 2 * 80 + 16);
    float *by = dalloc(40 * 80 * 4), yh[8], yg[8];
    CK(mfk_memset(ctx, bx, 0, (size_t)ne0 * 2 * 80 + 16, &err));
    for (int i = 0; i < 8; i++)
        yh[i] = (float)i + 0.5f;
    float *ys[4] = {by, by, by, by};
    const int64_t lds[4] = {40, 40, 40, 40};
    const struct {
        const char *what;
        const struct mfk_weight *w[4];
        int n, nt, sk;
        const void *x;
    } refused[] = {
        {"stream-K off", {&a, &a}, 2, 8, 0, bx},
        {"no products", {&a}, 0, 8, 1, bx},
        {"four products", {&a, &a, &a, &a}, 4, 8, 1, bx},
        {"mixed types", {&a, &b}, 2, 8, 1, bx},
        {"mixed widths", {&a, &wide}, 2, 8, 1, bx},
        {"a Q8_0 weight", {&a, &q8}, 2, 8, 1, bx},
        {"past the token limit", {&a, &a}, 2, MFK_QGEMM_MAX_TOKENS + 1, 1, bx},
        {"an unaligned input", {&a, &a}, 2, 8, 1, (const uint8_t *)bx + 2},
    };
    CK(mfk_ctx_qgemm(ctx, MFK_QGEMM_MAX_TOKENS, &err));
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        h2d(by, yh, sizeof yh);
        CK(mfk_ctx_qgemm_sk(ctx, refused[i].sk, &err));
        int rc = mfk_qgemm_n(ctx, refused[i].n, refused[i].w, refused[i].x, refused[i].nt, ys, lds,
                             1.0f, 0, &why);
        d2h(yg, by, sizeof yg);
        snprintf(name, sizeof name, "qgemm group %s refuses %s, y untouched", ggml_type_name(t),
                 refused[i].what);
        report(name, rc == MF_EINVAL && memcmp(yg, yh, sizeof yh) == 0 && strstr(why.msg, "qgemm"),
               "rc", rc, MF_EINVAL);
    }
    CK(mfk_ctx_qgemm_sk(ctx, 0, &err));
    mfk_ctx_qgemm_exact(ctx, 0);
    mfk_free((void *)a.data), mfk_free(bx), mfk_free(by);
}

/* qgemm.cu (mfk_gemm's Q4_K/Q6_K products of a few dozen tokens, the
 * weights dequantized in registers) against the bf16-rounded weights and
 * input in double: only the fp32 summation remains (1e-5). The shapes
 * reach every K split (none for 17,000 rows, 2, 4 and 8 clusters for the
 * others) and token widths 32 and 64, in part-filled tiles; each product is
 * checked to have gone to qgemm, poisoned first, repeated for the same bits
 * (its sums have a fixed order), with add and with alpha (mfk_gemm_ex);
 * each on the clustered grid and on stream-K (mfk_ctx_qgemm_sk 2, where
 * even a tile whose blocks are all its own goes: 17,000 rows at 512). */
static void test_qgemm(enum ggml_type t)
{
    static const struct {
        int64_t ne0, ne1;
        int nts[8];
    } shapes[] = {
        {1536, 300, {5, 17, 32, 33, 64, 100, 128, 0}},
        {4096, 1040, {33, 64, 128, 0}},
        {8192, 300, {17, 64, 0}},
        {512, 17000, {37, 100, 0}},
    };
    char name[96];
    /* past the default limit too: more token tiles than one */
    CK(mfk_ctx_qgemm(ctx, 128, &err));
    /* Q4_K both ways: exact (mfk_dequant_half's weights: the reference's
     * up to fp32 sums), then the default bf16 arithmetic, whose scales and
     * mins rounded to bf16 move the weights by up to 2^-9 of each (4.2e-3
     * of the products, H200; the bf16 rounding of the input alone makes
     * 2-3e-3 of them: the types sweep's first gemm bound) */
    for (int exact = 1; exact >= (t == GGML_TYPE_Q4_K ? 0 : 1); exact--)
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
            const char *how = exact ? "" : " (bf16 arithmetic)";
            const double bound = exact ? 1e-5 : 1e-2; /* measured 4.2e-3 (H200) */
            mfk_ctx_qgemm_exact(ctx, exact);
            const int64_t ne0 = shapes[si].ne0, ne1 = shapes[si].ne1;
            float *deq;
            struct mfk_weight w = qweight_new(t, ne0, ne1, &deq);
            for (int k = 0; shapes[si].nts[k]; k++) {
                const int nt = shapes[si].nts[k];
                const int64_t ldx = ne0 + 4, ldy = ne1 + 3;
                float *x = malloc((size_t)(nt * ldx) * 4), *y0 = malloc((size_t)(nt * ldy) * 4);
                float *y = malloc((size_t)(nt * ldy) * 4), *y2 = malloc((size_t)(nt * ldy) * 4);
                float *yc = malloc((size_t)(nt * ne1) * 4);
                double *ref = malloc((size_t)(nt * ne1) * 8),
                       *refa = malloc((size_t)(nt * ne1) * 8);
                for (int64_t i = 0; i < nt * ldx; i++)
                    x[i] = frand();
                for (int64_t i = 0; i < nt * ldy; i++)
                    y0[i] = frand();
                double *xr = malloc((size_t)ne0 * 8);
                for (int c = 0; c < nt; c++) {
                    for (int64_t i = 0; i < ne0; i++)
                        xr[i] = round_act(GGML_TYPE_BF16, x[c * ldx + i]);
                    for (int64_t r = 0; r < ne1; r++) {
                        double s = 0;
                        const float *wr = deq + r * ne0;
                        for (int64_t i = 0; i < ne0; i++)
                            s += (double)wr[i] * xr[i];
                        ref[c * ne1 + r] = s;
                        refa[c * ne1 + r] = (double)y0[c * ldy + r] + 0.75 * s;
                    }
                }
                size_t sb = mfk_gemm_scratch(&w, nt);
                void *scratch = dalloc(sb);
                float *dx = dalloc((size_t)(nt * ldx) * 4), *dy = dalloc((size_t)(nt * ldy) * 4);
                h2d(dx, x, (size_t)(nt * ldx) * 4);
                snprintf(name, sizeof name, "qgemm %s %lldx%lld nt=%d taken", ggml_type_name(t),
                         (long long)ne1, (long long)ne0, nt);
                report(name, mfk_qgemm_takes(ctx, &w, nt), "taken", mfk_qgemm_takes(ctx, &w, nt),
                       1);
                /* plain, plain again, alpha + add; the clustered grid, then
                 * stream-K (mfk_ctx_qgemm_sk 2: every product) */
                for (int pass = 0; pass < 6; pass++) {
                    const char *sk = pass >= 3 ? " stream-K" : "";
                    if (pass % 3 == 0)
                        CK(mfk_ctx_qgemm_sk(ctx, pass ? 2 : 0, &err));
                    if (pass % 3 == 2)
                        h2d(dy, y0, (size_t)(nt * ldy) * 4);
                    else
                        poison(dy, (size_t)(nt * ldy) * 4);
                    CK(mfk_gemm_ex(ctx, &w, dx, ldx, nt, dy, ldy, pass % 3 == 2 ? 0.75f : 1.0f,
                                   pass % 3 == 2, scratch, sb, &err));
                    d2h(pass % 3 == 1 ? y2 : y, dy, (size_t)(nt * ldy) * 4);
                    if (pass % 3 == 1) {
                        int same = 1;
                        for (int c = 0; c < nt; c++)
                            same &= memcmp(y + c * ldy, y2 + c * ldy, (size_t)ne1 * 4) == 0;
                        snprintf(name, sizeof name,
                                 "qgemm %s%s%s %lldx%lld nt=%d repeats bit for bit",
                                 ggml_type_name(t), how, sk, (long long)ne1, (long long)ne0, nt);
                        report(name, same, "equal", same, 1);
                        continue;
                    }
                    for (int c = 0; c < nt; c++)
                        memcpy(yc + c * ne1, y + c * ldy, (size_t)ne1 * 4);
                    double e = rel_err(yc, pass % 3 == 2 ? refa : ref, (size_t)(nt * ne1));
                    snprintf(name, sizeof name, "qgemm %s%s%s %lldx%lld nt=%d%s", ggml_type_name(t),
                             how, sk, (long long)ne1, (long long)ne0, nt,
                             pass % 3 == 2 ? " alpha add" : "");
                    report(name, e < bound, "rel err", e, bound);
                }
                mfk_free(dx), mfk_free(dy), mfk_free(scratch);
                free(x), free(y0), free(y), free(y2), free(yc), free(ref), free(refa), free(xr);
            }
            mfk_free((void *)w.data);
            free(deq);
        }
    CK(mfk_ctx_qgemm(ctx, MFK_QGEMM_MAX_TOKENS, &err));
    CK(mfk_ctx_qgemm_sk(ctx, 0, &err));
    mfk_ctx_qgemm_exact(ctx, 0);
    test_qgemm_group(t);

    /* what it cannot take is refused with MF_EINVAL, y left as it was: a
     * type it has no kernel for, rows not a multiple of its super-blocks
     * (Q6_K's pairs), more tokens than the limit, an unaligned input; and a
     * negative limit */
    struct mf_err why;
    const int64_t bne0 = t == GGML_TYPE_Q6_K ? 1024 : 512, bne1 = 40;
    uint64_t brb;
    ggml_type_row_size(t, (uint64_t)bne0, &brb);
    void *bw = dalloc((size_t)brb * bne1), *bx = dalloc((size_t)bne0 * 2 * 80 + 16);
    float *by = dalloc((size_t)bne1 * 80 * 4), yh[8], yg[8];
    CK(mfk_memset(ctx, bw, 0, (size_t)brb * bne1, &err));
    CK(mfk_memset(ctx, bx, 0, (size_t)bne0 * 2 * 80 + 16, &err));
    for (int i = 0; i < 8; i++)
        yh[i] = (float)i + 0.5f;
    h2d(by, yh, sizeof yh);
    struct mfk_weight ok = {.data = bw, .type = (int)t, .ne0 = bne0, .ne1 = bne1, .row_bytes = brb};
    struct mfk_weight q8 = ok, odd = ok;
    q8.type = GGML_TYPE_Q8_0;
    odd.ne0 = 256, odd.row_bytes = t == GGML_TYPE_Q6_K ? 210 : 144; /* Q6_K: one super-block */
    const struct {
        const char *what;
        const struct mfk_weight *w;
        const void *x;
        int nt;
    } refused[] = {
        {"a Q8_0 weight", &q8, bx, 8},
        {"past the token limit", &ok, bx, MFK_QGEMM_MAX_TOKENS + 1},
        {"an unaligned input", &ok, (const uint8_t *)bx + 2, 8},
        {"no tokens", &ok, bx, 0},
        {t == GGML_TYPE_Q6_K ? "rows of 256 (Q6_K)" : "rows of 256 (Q4_K: taken)", &odd, bx, 8},
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        const int takes = t == GGML_TYPE_Q4_K && refused[i].w == &odd; /* Q4_K takes 256 */
        int rc = mfk_qgemm(ctx, refused[i].w, refused[i].x, refused[i].nt, by, bne1, 1.0f, 0, &why);
        d2h(yg, by, sizeof yg);
        if (takes) {
            h2d(by, yh, sizeof yh);
            snprintf(name, sizeof name, "qgemm %s: %s", ggml_type_name(t), refused[i].what);
            report(name, rc == 0, "rc", rc, 0);
            continue;
        }
        snprintf(name, sizeof name, "qgemm %s refuses %s, y untouched", ggml_type_name(t),
                 refused[i].what);
        report(name, rc == MF_EINVAL && memcmp(yg, yh, sizeof yh) == 0 && strstr(why.msg, "qgemm"),
               "rc", rc, MF_EINVAL);
    }
    snprintf(name, sizeof name, "qgemm: a negative token limit refused");
    report(name, mfk_ctx_qgemm(ctx, -1, &why) == MF_EINVAL, "rc", MF_EINVAL, MF_EINVAL);
    mfk_free(bw), mfk_free(bx), mfk_free(by);
}

static void test_type(enum ggml_type t)
{
    /* rows not a multiple of the 8 a GEMV block takes; rows longer than the
     * 8192 / 1024 elements the GEMV stages at a time for 1 / 8 tokens, and
     * not a multiple of them */
    const int64_t ne0 = 8448, ne1 = 259;
    uint64_t rb;
    char name[96];
    ggml_type_row_size(t, (uint64_t)ne0, &rb);
    float *src = malloc((size_t)(ne0 * ne1) * 4), *deq = malloc((size_t)(ne0 * ne1) * 4);
    float *got = malloc((size_t)(ne0 * ne1) * 4);
    uint8_t *q = malloc((size_t)rb * (size_t)ne1);
    for (int64_t i = 0; i < ne0 * ne1; i++)
        src[i] = frand() * 0.05f;
    for (int64_t r = 0; r < ne1; r++) {
        CK(quant_quantize_row(t, src + r * ne0, q + r * rb, ne0, &err));
        CK(quant_dequantize_row(t, q + r * rb, deq + r * ne0, ne0, &err));
    }
    void *dw = dalloc((size_t)rb * (size_t)ne1);
    h2d(dw, q, (size_t)rb * (size_t)ne1);
    struct mfk_weight w = {.data = dw, .type = (int)t, .ne0 = ne0, .ne1 = ne1, .row_bytes = rb};

    /* dequantize: bit-exact */
    float *dout = dalloc((size_t)(ne0 * ne1) * 4);
    poison(dout, (size_t)(ne0 * ne1) * 4);
    CK(mfk_dequant_rows(ctx, &w, 0, (int32_t)ne1, dout, &err));
    d2h(got, dout, (size_t)(ne0 * ne1) * 4);
    snprintf(name, sizeof name, "dequantize %s (bit-exact)", ggml_type_name(t));
    int64_t bad = 0;
    for (int64_t i = 0; i < ne0 * ne1; i++)
        bad += memcmp(&got[i], &deq[i], 4) != 0;
    report(name, bad == 0, "elements differ", (double)bad, 0);

    /* embedding of 5 rows, one repeated */
    int32_t ids[5] = {3, 258, 0, 3, 100};
    int32_t *dids = dalloc(sizeof ids);
    h2d(dids, ids, sizeof ids);
    poison(dout, 5 * (size_t)ne0 * 4);
    CK(mfk_embed(ctx, &w, dids, 5, dout, ne0, &err));
    d2h(got, dout, 5 * (size_t)ne0 * 4);
    bad = 0;
    for (int k = 0; k < 5; k++)
        bad += memcmp(got + k * ne0, deq + ids[k] * ne0, (size_t)ne0 * 4) != 0;
    snprintf(name, sizeof name, "embedding %s (bit-exact)", ggml_type_name(t));
    report(name, bad == 0, "rows differ", (double)bad, 0);

    /* gemv */
    static const int nts[] = {1, 3, 8, 11, 16, 17, 70, 130}; /* Q4_K from 5: mmq.cu, tiles past 16 */
    for (size_t k = 0; k < sizeof nts / sizeof nts[0]; k++)
        for (int add = 0; add < 2; add++) {
            snprintf(name, sizeof name, "gemv %s nt=%d%s", ggml_type_name(t), nts[k],
                     add ? " add" : "");
            gemv_check(name, &w, deq, nts[k], ne0 + 4, ne1 + 3, add);
        }
    test_gemm(&w, t, deq);
    if (t == GGML_TYPE_Q4_K || t == GGML_TYPE_Q6_K)
        test_qgemm(t);
    mfk_free(dids);
    mfk_free(dout);
    mfk_free(dw);
    free(src), free(deq), free(got), free(q);
}

/* ---- rmsnorm, swiglu ------------------------------------------------------ */

/* n: 1000 stays in the registers the kernel keeps, 20000 goes past them */
static void test_norm_swiglu(int64_t n)
{
    const int rows = 7;
    const int64_t ld = n + 4;
    float *x = malloc(rows * ld * 4), *r = malloc(rows * ld * 4), *g = malloc(n * 4);
    float *y = malloc(rows * ld * 4), *xo = malloc(rows * ld * 4);
    double *ref = malloc(rows * n * 8), *refx = malloc(rows * n * 8);
    float *yc = malloc(rows * n * 4), *xc = malloc(rows * n * 4);
    for (int64_t i = 0; i < rows * ld; i++)
        x[i] = frand() * 3, r[i] = frand();
    for (int64_t i = 0; i < n; i++)
        g[i] = 1 + frand() * 0.1f;
    float *dx = dalloc(rows * ld * 4), *dr = dalloc(rows * ld * 4), *dg = dalloc(n * 4);
    float *dy = dalloc(rows * ld * 4);
    for (int res = 0; res < 2; res++) {
        for (int k = 0; k < rows; k++) {
            double s = 0;
            for (int64_t i = 0; i < n; i++) {
                double v = (double)x[k * ld + i] + (res ? (double)r[k * ld + i] : 0);
                refx[k * n + i] = v;
                s += v * v;
            }
            double sc = 1.0 / sqrt(s / (double)n + 1e-5);
            for (int64_t i = 0; i < n; i++)
                ref[k * n + i] = refx[k * n + i] * sc * g[i];
        }
        h2d(dx, x, rows * ld * 4);
        h2d(dr, r, rows * ld * 4);
        h2d(dg, g, n * 4);
        poison(dy, rows * ld * 4);
        CK(mfk_rmsnorm(ctx, dx, ld, res ? dr : NULL, ld, dg, dy, ld, rows, n, 1e-5f, NULL, &err));
        d2h(y, dy, rows * ld * 4);
        d2h(xo, dx, rows * ld * 4);
        for (int k = 0; k < rows; k++) {
            memcpy(yc + k * n, y + k * ld, n * 4);
            memcpy(xc + k * n, xo + k * ld, n * 4);
        }
        char name[64];
        snprintf(name, sizeof name, "rmsnorm%s (n %lld)", res ? " + residual add" : "", (long long)n);
        report(name, rel_err(yc, ref, rows * n) < 1e-6, "rel err", rel_err(yc, ref, rows * n), 1e-6);
        if (res)
            report("rmsnorm residual written back", rel_err(xc, refx, rows * n) < 1e-7,
                   "rel err", rel_err(xc, refx, rows * n), 1e-7);
    }
    /* the rounded copy (mfk_rmsnorm_rounded): mfk_round_half's bytes of y,
     * y itself unchanged */
    uint16_t *dh = dalloc(rows * n * 2 + 16), *dh2 = dalloc(rows * n * 2);
    uint16_t *h = malloc(rows * n * 2), *h2 = malloc(rows * n * 2);
    for (int bf16 = 0; bf16 < 2; bf16++) {
        h2d(dx, x, rows * ld * 4);
        CK(mfk_rmsnorm(ctx, dx, ld, NULL, 0, dg, dy, ld, rows, n, 1e-5f, NULL, &err));
        d2h(xo, dy, rows * ld * 4);
        poison(dy, rows * ld * 4);
        poison(dh, rows * n * 2);
        CK(mfk_rmsnorm_rounded(ctx, dx, ld, NULL, 0, dg, dy, ld, rows, n, 1e-5f, NULL, dh, bf16,
                               &err));
        CK(mfk_round_half(ctx, dy, ld, rows, n, dh2, bf16, &err));
        d2h(y, dy, rows * ld * 4);
        d2h(h, dh, rows * n * 2);
        d2h(h2, dh2, rows * n * 2);
        int same = 1;
        for (int k = 0; k < rows; k++)
            same &= memcmp(y + k * ld, xo + k * ld, n * 4) == 0;
        char name[80];
        snprintf(name, sizeof name, "rmsnorm rounded to %s (n %lld) = mfk_round_half's",
                 bf16 ? "bf16" : "fp16", (long long)n);
        report(name, same && memcmp(h, h2, rows * n * 2) == 0, "equal",
               same && memcmp(h, h2, rows * n * 2) == 0, 1);
    }
    struct mf_err why = {0};
    const int rc = mfk_rmsnorm_rounded(ctx, dx, ld, NULL, 0, dg, dy, ld, rows, n, 1e-5f, NULL,
                                       (uint8_t *)dh + 2, 1, &why);
    report("rmsnorm: a misaligned rounded copy refused", rc == MF_EINVAL, "rc", rc, MF_EINVAL);
    free(h), free(h2);
    mfk_free(dh), mfk_free(dh2);
    /* swiglu */
    for (int k = 0; k < rows; k++)
        for (int64_t i = 0; i < n; i++) {
            double gv = x[k * ld + i], uv = r[k * ld + i];
            ref[k * n + i] = gv / (1 + exp(-gv)) * uv;
        }
    h2d(dx, x, rows * ld * 4);
    h2d(dr, r, rows * ld * 4);
    CK(mfk_swiglu(ctx, dx, dr, ld, rows, n, NULL, &err));
    d2h(y, dx, rows * ld * 4);
    for (int k = 0; k < rows; k++)
        memcpy(yc + k * n, y + k * ld, n * 4);
    report(n > 1000 ? "swiglu (n 20000)" : "swiglu (n 1000)", rel_err(yc, ref, rows * n) < 1e-6,
           "rel err", rel_err(yc, ref, rows * n), 1e-6);
    /* rows of n - 1 (not float4s: the element-a-thread kernel); the last column untouched */
    h2d(dx, x, rows * ld * 4);
    CK(mfk_swiglu(ctx, dx, dr, ld, rows, n - 1, NULL, &err));
    d2h(y, dx, rows * ld * 4);
    int kept = 1;
    for (int k = 0; k < rows; k++) {
        memcpy(yc + k * n, y + k * ld, n * 4);
        kept &= memcmp(&y[k * ld + n - 1], &x[k * ld + n - 1], 4) == 0;
        yc[k * n + n - 1] = (float)ref[k * n + n - 1];
    }
    report(n > 1000 ? "swiglu (n 19999, scalar)" : "swiglu (n 999, scalar)",
           kept && rel_err(yc, ref, rows * n) < 1e-6, "rel err", rel_err(yc, ref, rows * n), 1e-6);
    mfk_free(dx), mfk_free(dr), mfk_free(dg), mfk_free(dy);
    free(x), free(r), free(g), free(y), free(xo), free(ref), free(refx), free(yc), free(xc);
}

/* ---- rope + K/V store, attention ------------------------------------------ */

#define KVB 16

static size_t kv_idx(const struct mfk_kv_shape *s, int blk, int layer, int kv, int head)
{
    return ((((size_t)blk * s->n_layer + layer) * 2 + kv) * s->n_head_kv + head) * KVB * s->head_dim;
}

static float h16(uint16_t h)
{
    return quant_f16_to_f32(h);
}

/* The 8-bit arena's unit (kernels.h): int8 [hd][16] keys or [16][hd] values,
 * then 16 float scales. */
static size_t kv8_off(const struct mfk_kv_shape *s, int blk, int layer, int kv, int head)
{
    return ((((size_t)blk * s->n_layer + layer) * 2 + kv) * s->n_head_kv + head) * KVB *
           (s->head_dim + 4);
}

static size_t arena_bytes(const struct mfk_kv_shape *s, int n_blocks)
{
    return s->q8 ? kv8_off(s, n_blocks, 0, 0, 0) : kv_idx(s, n_blocks, 0, 0, 0) * 2;
}

/* Byte offset of element (d, slot) of a unit (keys kv 0, values kv 1). */
static size_t kv_elem(const struct mfk_kv_shape *s, int blk, int layer, int kv, int head, int d,
                      int slot)
{
    size_t i = kv ? (size_t)slot * s->head_dim + d : (size_t)d * KVB + slot;
    return s->q8 ? kv8_off(s, blk, layer, kv, head) + i : 2 * (kv_idx(s, blk, layer, kv, head) + i);
}

static float *kv8_scale(const struct mfk_kv_shape *s, uint8_t *a, int blk, int layer, int kv,
                        int head, int slot)
{
    return (float *)(void *)(a + kv8_off(s, blk, layer, kv, head) + (size_t)KVB * s->head_dim) +
           slot;
}

/* The value attention reads: the F16 element, or q * scale rounded to fp16. */
static float kv_at(const struct mfk_kv_shape *s, uint8_t *a, int blk, int layer, int kv, int head,
                   int d, int slot)
{
    const uint8_t *e = a + kv_elem(s, blk, layer, kv, head, d, slot);
    if (s->q8)
        return h16(quant_f32_to_f16((float)(int8_t)e[0] * *kv8_scale(s, a, blk, layer, kv, head, slot)));
    uint16_t h;
    memcpy(&h, e, 2);
    return h16(h);
}

/* Checks what mfk_rope_store wrote for token t's head h (keys kv 0 from x,
 * values kv 1) in got: F16 within 1 ulp of x, 8-bit within 1 of
 * rint(x * 127 / absmax) with the scale absmax / 127. Then copies it into
 * want, so want == got afterwards means nothing else moved. 0 or 1. */
static int check_store(const struct mfk_kv_shape *s, uint8_t *want, uint8_t *got, int blk,
                       int layer, int kv, int h, int slot, const float *x)
{
    int bad = 0, hd = s->head_dim;
    float amax = 0;
    for (int d = 0; d < hd; d++)
        amax = fabsf(x[d]) > amax ? fabsf(x[d]) : amax;
    if (s->q8) {
        float *sg = kv8_scale(s, got, blk, layer, kv, h, slot);
        bad |= fabsf(*sg - amax / 127.0f) > 1e-6f * amax;
        *kv8_scale(s, want, blk, layer, kv, h, slot) = *sg;
    }
    for (int d = 0; d < hd; d++) {
        size_t o = kv_elem(s, blk, layer, kv, h, d, slot);
        if (s->q8) {
            int diff = (int8_t)got[o] - (int)rintf(x[d] * 127.0f / amax);
            bad |= diff < -1 || diff > 1;
            want[o] = got[o];
        } else {
            /* within one fp16 ulp of the host's rotation, by value (bit
             * patterns of values either side of 0 are far apart) */
            uint16_t g, w = quant_f32_to_f16(x[d]);
            memcpy(&g, got + o, 2);
            const float fw = h16(w), ulp = fmaxf(ldexpf(1.0f, ilogbf(fw != 0 ? fw : 1.0f) - 10),
                                                 0x1p-24f);
            bad |= !(fabsf(h16(g) - fw) <= (fw != 0 ? ulp : 0x1p-24f));
            memcpy(want + o, &g, 2);
        }
    }
    return bad;
}

/* Error over the listed rows of y (n_cols each); INFINITY when one of them
 * is NaN or a row not listed was written (no longer the poison's NaN). */
static double listed_err(const float *y, const double *ref, int rows, int64_t n_cols,
                         const int32_t *list, int n_list)
{
    double num = 0, den = 0;
    for (int t = 0; t < rows; t++) {
        int listed = 0;
        for (int i = 0; i < n_list; i++)
            listed |= list[i] == t;
        for (int64_t d = 0; d < n_cols; d++) {
            float v = y[t * n_cols + d];
            if ((v != v) == listed)
                return INFINITY;
            if (listed)
                num += (v - ref[t * n_cols + d]) * (v - ref[t * n_cols + d]),
                    den += ref[t * n_cols + d] * ref[t * n_cols + d];
        }
    }
    return sqrt(num / den);
}

static int q8_matches(const float *y, int64_t ld, int rows, int64_t n, const int8_t *q,
                      const float *d, const float *sm);

/* Three sequences: `past` tokens of context decoding 1 token (199; past the
 * per-token kernel's shared memory when long), a fresh 37-token prompt, a
 * 16-token past plus 5 new tokens. Slots past each sequence's last
 * position hold NaN, as never-written memory may. */
static void test_attention(int n_head, int n_head_kv, int hd, int n_rot, int long_past, int q8)
{
    const struct mfk_kv_shape s = {
        .n_layer = 2, .n_head = n_head, .n_head_kv = n_head_kv, .head_dim = hd, .n_rot = n_rot, .q8 = q8};
    const int layer = 1, ratio = n_head / n_head_kv;
    const int past[3] = {long_past ? long_past : 199, 0, 16}, nnew[3] = {1, 37, 5};
    int n_blocks = 0;
    for (int sq = 0; sq < 3; sq++)
        n_blocks += (past[sq] + nnew[sq] + KVB - 1) / KVB;
    int32_t *tables = malloc(n_blocks * 4), toff[64], pos[64], blk[64];
    int *perm = malloc(n_blocks * sizeof *perm);
    int T = 0, nt = 0, max_ctx = 0;
    char name[96];
    for (int i = 0; i < n_blocks; i++)
        perm[i] = i;
    for (int i = n_blocks - 1; i > 0; i--) {
        int j = (int)(next_u64() % (uint64_t)(i + 1)), tmp = perm[i];
        perm[i] = perm[j], perm[j] = tmp;
    }
    int pb = 0;
    for (int sq = 0; sq < 3; sq++) {
        int ctxn = past[sq] + nnew[sq], nb = (ctxn + KVB - 1) / KVB;
        for (int b = 0; b < nb; b++)
            tables[nt + b] = perm[pb++];
        for (int j = 0; j < nnew[sq]; j++, T++) {
            pos[T] = past[sq] + j;
            blk[T] = tables[nt + pos[T] / KVB];
            toff[T] = nt;
        }
        nt += nb;
        max_ctx = ctxn > max_ctx ? ctxn : max_ctx;
    }
    const int64_t qd = (int64_t)n_head * hd, kvd = (int64_t)n_head_kv * hd;
    const size_t kv_bytes = arena_bytes(&s, n_blocks);
    uint8_t *kv = malloc(kv_bytes), *kv_got = malloc(kv_bytes);
    for (size_t i = 0; i + 1 < kv_bytes; i += 2) {
        uint16_t h = quant_f32_to_f16(frand());
        memcpy(kv + i, &h, 2);
    }
    for (int b = 0; q8 && b < n_blocks; b++)
        for (int l = 0; l < 2; l++)
            for (int u = 0; u < 2 * n_head_kv; u++)
                for (int sl = 0; sl < KVB; sl++)
                    *kv8_scale(&s, kv, b, l, u & 1, u >> 1, sl) = (1.0f + frand()) / 254.0f;
    float *q = malloc(T * qd * 4), *k = malloc(T * kvd * 4), *v = malloc(T * kvd * 4);
    float *rope = malloc(T * n_rot * 4), *qgot = malloc(T * qd * 4);
    double *qref = malloc(T * qd * 8);
    for (int64_t i = 0; i < T * qd; i++)
        q[i] = frand();
    for (int64_t i = 0; i < T * kvd; i++)
        k[i] = frand(), v[i] = frand();
    for (int t = 0; t < T; t++)
        for (int i = 0; i < n_rot / 2; i++) {
            double th = pos[t] * pow(10000.0, -2.0 * i / n_rot);
            rope[t * n_rot + 2 * i] = (float)cos(th);
            rope[t * n_rot + 2 * i + 1] = (float)sin(th);
        }
    /* reference rope (on the host copies) */
    float *kref = malloc(T * kvd * 4);
    memcpy(kref, k, T * kvd * 4);
    for (int t = 0; t < T; t++) {
        for (int h = 0; h < n_head + n_head_kv; h++)
            for (int d = 0; d < hd; d += 2) {
                float *y = h < n_head ? q + t * qd + h * hd : kref + t * kvd + (h - n_head) * hd;
                double x0 = y[d], x1 = y[d + 1];
                if (d < n_rot) {
                    double c = rope[t * n_rot + d], sn = rope[t * n_rot + d + 1];
                    double r0 = x0 * c - x1 * sn, r1 = x0 * sn + x1 * c;
                    if (h < n_head)
                        qref[t * qd + h * hd + d] = r0, qref[t * qd + h * hd + d + 1] = r1;
                    else
                        y[d] = (float)r0, y[d + 1] = (float)r1;
                } else if (h < n_head) {
                    qref[t * qd + h * hd + d] = x0, qref[t * qd + h * hd + d + 1] = x1;
                }
            }
    }
    uint8_t *dkv = dalloc(kv_bytes);
    float *dq = dalloc(T * qd * 4), *dk = dalloc(T * kvd * 4), *dv = dalloc(T * kvd * 4);
    float *drope = dalloc(T * n_rot * 4), *dout = dalloc(T * qd * 4);
    int32_t *dpos = dalloc(T * 4), *dblk = dalloc(T * 4), *dtoff = dalloc(T * 4), *dtab = dalloc(nt * 4);
    h2d(dkv, kv, kv_bytes);
    h2d(dq, q, T * qd * 4);
    h2d(dk, k, T * kvd * 4);
    h2d(dv, v, T * kvd * 4);
    h2d(drope, rope, T * n_rot * 4);
    h2d(dpos, pos, T * 4);
    h2d(dblk, blk, T * 4);
    h2d(dtoff, toff, T * 4);
    h2d(dtab, tables, nt * 4);
    CK(mfk_rope_store(ctx, &s, layer, T, dq, qd, dk, dv, kvd, drope, dpos, dblk, dkv, &err));
    d2h(qgot, dq, T * qd * 4);
    d2h(kv_got, dkv, kv_bytes);
    snprintf(name, sizeof name, "rope q (%d/%d heads, hd %d, rot %d)", n_head, n_head_kv, hd, n_rot);
    report(name, rel_err(qgot, qref, T * qd) < 1e-6, "rel err", rel_err(qgot, qref, T * qd), 1e-6);
    /* expected arena: the old one with every new token's K/V written */
    int64_t bad = 0;
    for (int t = 0; t < T; t++)
        for (int h = 0; h < n_head_kv; h++) {
            bad += check_store(&s, kv, kv_got, blk[t], layer, 0, h, pos[t] % KVB,
                               kref + t * kvd + h * hd);
            bad += check_store(&s, kv, kv_got, blk[t], layer, 1, h, pos[t] % KVB,
                               v + t * kvd + h * hd);
        }
    bad += memcmp(kv, kv_got, kv_bytes) != 0;
    snprintf(name, sizeof name, "paged K/V store%s (%s; rest untouched)", q8 ? ", 8-bit" : "",
             q8 ? "1 step, scale absmax/127" : "1 ulp");
    report(name, bad == 0, "rows off", (double)bad, 0);
    memcpy(kv, kv_got, kv_bytes); /* the reference attends over what was stored */
    for (int sq = 0, off = 0; sq < 3; sq++) {
        int ctxn = past[sq] + nnew[sq], nb = (ctxn + KVB - 1) / KVB;
        for (int sl = ctxn % KVB; sl && sl < KVB; sl++)
            for (int h = 0; h < n_head_kv; h++)
                for (int u = 0; u < 2; u++) {
                    if (q8)
                        *kv8_scale(&s, kv, tables[off + nb - 1], layer, u, h, sl) = NAN;
                    for (int d = 0; !q8 && d < hd; d++)
                        memcpy(kv + kv_elem(&s, tables[off + nb - 1], layer, u, h, d, sl),
                               &(uint16_t){0x7E00}, 2);
                }
        off += nb;
    }
    h2d(dkv, kv, kv_bytes);

    /* attention reference */
    double *ref = malloc(T * qd * 8);
    double *sc = malloc(max_ctx * 8);
    for (int t = 0; t < T; t++)
        for (int h = 0; h < n_head; h++) {
            int g = h / ratio, np = pos[t] + 1;
            double mx = -INFINITY, sum = 0;
            for (int j = 0; j < np; j++) {
                double acc = 0;
                for (int d = 0; d < hd; d++)
                    acc += (double)h16(quant_f32_to_f16(qgot[t * qd + h * hd + d])) *
                           kv_at(&s, kv, tables[toff[t] + j / KVB], layer, 0, g, d, j % KVB);
                sc[j] = acc / sqrt((double)hd);
                mx = sc[j] > mx ? sc[j] : mx;
            }
            for (int j = 0; j < np; j++)
                sc[j] = exp(sc[j] - mx), sum += sc[j];
            for (int d = 0; d < hd; d++)
                ref[t * qd + h * hd + d] = 0;
            for (int j = 0; j < np; j++) {
                double p = h16(quant_f32_to_f16((float)(sc[j] / sum)));
                for (int d = 0; d < hd; d++)
                    ref[t * qd + h * hd + d] +=
                        p * kv_at(&s, kv, tables[toff[t] + j / KVB], layer, 1, g, d, j % KVB);
            }
        }
    if (hd % 32 == 0 && max_ctx <= mfk_attention_max_ctx(&s)) {
        poison(dout, T * qd * 4);
        CK(mfk_attention(ctx, &s, layer, T, NULL, dq, qd, dpos, dtoff, dtab, dkv, max_ctx, 1, dout,
                         qd, NULL, &err));
        if (!q8 && hd == 128) { /* a split count out of range is refused, not launched */
            int r0 = mfk_attention(ctx, &s, layer, T, NULL, dq, qd, dpos, dtoff, dtab, dkv, max_ctx,
                                   0, dout, qd, NULL, &err);
            int r1 = mfk_attention(ctx, &s, layer, T, NULL, dq, qd, dpos, dtoff, dtab, dkv, max_ctx,
                                   4097, dout, qd, NULL, &err);
            report("attention: 0 and 4097 splits refused", r0 == MF_EINVAL && r1 == MF_EINVAL,
                   "rc", (double)(r0 == MF_EINVAL ? r1 : r0), MF_EINVAL);
        }
        d2h(qgot, dout, T * qd * 4);
        snprintf(name, sizeof name, "attention%s (%d/%d heads, hd %d, ctx %d)", q8 ? " 8-bit" : "",
                 n_head, n_head_kv, hd, max_ctx);
        double e = rel_err(qgot, ref, T * qd);
        report(name, e < 1e-4, "rel err", e, 1e-4);
        /* a token list: the tokens in reverse order, every second one, each
         * context split in 3 (forced: the short ones get empty splits) */
        int32_t list[64], nl = 0, *dlist = dalloc(T * 4);
        for (int t = T - 1; t >= 0; t -= 2)
            list[nl++] = t;
        h2d(dlist, list, nl * 4);
        poison(dout, T * qd * 4);
        /* rows of a multiple of 256: the output's 8-bit form too (the
         * output projection's input), which must be k_quant_act's */
        const int64_t nq = (int64_t)T * qd, nqb = nq / 32;
        uint8_t *dq8 = qd % 256 ? NULL : dalloc(nq + 2 * nqb * 4);
        struct mfk_q8 oq = {0};
        if (dq8) {
            oq = (struct mfk_q8){(int8_t *)dq8, (float *)(void *)(dq8 + nq),
                                 (float *)(void *)(dq8 + nq) + nqb};
            poison(dq8, nq + 2 * nqb * 4);
        }
        CK(mfk_attention(ctx, &s, layer, nl, dlist, dq, qd, dpos, dtoff, dtab, dkv, max_ctx, 3,
                         dout, qd, dq8 ? &oq : NULL, &err));
        d2h(qgot, dout, T * qd * 4);
        e = listed_err(qgot, ref, T, qd, list, nl);
        snprintf(name, sizeof name, "attention%s, listed tokens, 3 splits (hd %d)",
                 q8 ? " 8-bit" : "", hd);
        report(name, e < 1e-4, "rel err", e, 1e-4);
        { /* the same through three launches (no cluster): the same bits, 8-bit copy too */
            const size_t nb8 = dq8 ? (size_t)(nq + 2 * nqb * 4) : 0;
            float *flat = malloc(T * qd * 4);
            uint8_t *c8 = malloc(nb8 + 1), *f8 = malloc(nb8 + 1);
            if (dq8)
                d2h(c8, dq8, nb8), poison(dq8, nb8);
            poison(dout, T * qd * 4);
            CK(mfk_ctx_att_cluster(ctx, 0, &err));
            CK(mfk_attention(ctx, &s, layer, nl, dlist, dq, qd, dpos, dtoff, dtab, dkv, max_ctx, 3,
                             dout, qd, dq8 ? &oq : NULL, &err));
            CK(mfk_ctx_att_cluster(ctx, 1, &err));
            d2h(flat, dout, T * qd * 4);
            if (dq8)
                d2h(f8, dq8, nb8);
            const int same = memcmp(flat, qgot, T * qd * 4) == 0 && memcmp(c8, f8, nb8) == 0;
            snprintf(name, sizeof name,
                     "attention%s, 3 splits: one cluster = three launches, bit for bit (hd %d)",
                     q8 ? " 8-bit" : "", hd);
            report(name, same, "equal", same, 1);
            free(flat), free(c8), free(f8);
        }
        if (dq8) {
            int8_t *hq = malloc(nq);
            float *hd8 = malloc(nqb * 4), *hs = malloc(nqb * 4);
            int same = 1;
            d2h(hq, oq.q, nq);
            d2h(hd8, oq.d, nqb * 4);
            d2h(hs, oq.s, nqb * 4);
            for (int i = 0; i < nl; i++) {
                const int t = list[i];
                same &= q8_matches(qgot + (int64_t)t * qd, qd, 1, qd, hq + (int64_t)t * qd,
                                   hd8 + (int64_t)t * (qd / 32), hs + (int64_t)t * (qd / 32));
            }
            snprintf(name, sizeof name, "attention%s, 3 splits: 8-bit copy = k_quant_act's (hd %d)",
                     q8 ? " 8-bit" : "", hd);
            report(name, same, "equal", same, 1);
            int r =
                mfk_attention(ctx, &s, layer, nl, dlist, dq, qd, dpos, dtoff, dtab, dkv, max_ctx, 3,
                              dout, qd, &(struct mfk_q8){oq.q + 1, oq.d, oq.s}, &err);
            report("attention: a misaligned 8-bit copy refused", r == MF_EINVAL, "rc", r,
                   MF_EINVAL);
            free(hq), free(hd8), free(hs);
            mfk_free(dq8);
        } else { /* rows the 8-bit blocks do not divide: refused before the launch */
            int r =
                mfk_attention(ctx, &s, layer, nl, dlist, dq, qd, dpos, dtoff, dtab, dkv, max_ctx, 3,
                              dout, qd, &(struct mfk_q8){(int8_t *)dout, dout, dout}, &err);
            snprintf(name, sizeof name, "attention: an 8-bit copy of %lld-element rows refused",
                     (long long)qd);
            report(name, r == MF_EINVAL, "rc", r, MF_EINVAL);
        }
        /* one token a call: grids that small split each long context over
         * several blocks (FlashDecoding-style, as cuda_plan_att_splits
         * chooses for this device); then the same unsplit */
        for (int split = 1; split >= 0; split--) {
            int32_t *dall = dalloc(T * 4);
            for (int t = 0; t < T; t++)
                list[t % 64] = t;
            h2d(dall, list, T * 4);
            poison(dout, T * qd * 4);
            for (int t = 0; t < T; t++) {
                int32_t sp = split ? cuda_plan_att_splits(1, n_head_kv, n_sms, pos[t] + 1) : 1;
                CK(mfk_attention(ctx, &s, layer, 1, dall + t, dq, qd, dpos, dtoff, dtab, dkv,
                                 pos[t] + 1, sp, dout, qd, NULL, &err));
            }
            d2h(qgot, dout, T * qd * 4);
            e = rel_err(qgot, ref, T * qd);
            snprintf(name, sizeof name, "attention%s, one token a call, %s (hd %d, ctx %d)",
                     q8 ? " 8-bit" : "", split ? "split" : "unsplit", hd, max_ctx);
            report(name, e < 1e-4, "rel err", e, 1e-4);
            mfk_free(dall);
        }
        mfk_free(dlist);
    }
    /* tiles: each sequence's new tokens in runs of up to 16 */
    {
        int32_t tiles[2 * 64], ntl = 0, *dtiles = dalloc(2 * 64 * 4);
        for (int sq = 0, t = 0; sq < 3; t += nnew[sq], sq++)
            for (int j = 0; j < nnew[sq]; j += 16) {
                tiles[2 * ntl] = t + j;
                tiles[2 * ntl + 1] = nnew[sq] - j < 16 ? nnew[sq] - j : 16;
                ntl++;
            }
        h2d(dtiles, tiles, 2 * ntl * 4);
        poison(dout, T * qd * 4);
        CK(mfk_attention_tiles(ctx, &s, layer, ntl, dtiles, dq, qd, dpos, dtoff, dtab, dkv, dout,
                               qd, 0, 0, &err));
        d2h(qgot, dout, T * qd * 4);
        double e = rel_err(qgot, ref, T * qd);
        snprintf(name, sizeof name, "attention tiles%s (%d/%d heads, hd %d, ctx %d)",
                 q8 ? " 8-bit" : "", n_head, n_head_kv, hd, max_ctx);
        report(name, e < 1e-4, "rel err", e, 1e-4);
        mfk_free(dtiles);
    }
    /* 1-token tiles (decode): every token alone through the decode kernel
     * (decode 2), then the first sequence's in runs of 16 and the others
     * alone (decode 1: both kernels, each skipping the other's tiles); the
     * decode kernel in each of its warp counts */
    static const int dec_warps[] = {3, 4, 6, 8};
    for (int dw = 0; dw < 8; dw++) {
        const int decode = 2 - dw / 4, warps = dec_warps[dw & 3];
        int32_t *tiles = malloc(2 * T * 4), ntl = 0, *dtiles = dalloc(2 * T * 4);
        for (int sq = 0, t = 0; sq < 3; t += nnew[sq], sq++) {
            const int run = decode == 1 && sq == 0 ? 16 : 1;
            for (int j = 0; j < nnew[sq]; j += run) {
                tiles[2 * ntl] = t + j;
                tiles[2 * ntl + 1] = nnew[sq] - j < run ? nnew[sq] - j : run;
                ntl++;
            }
        }
        h2d(dtiles, tiles, 2 * ntl * 4);
        poison(dout, T * qd * 4);
        CK(mfk_attention_tiles(ctx, &s, layer, ntl, dtiles, dq, qd, dpos, dtoff, dtab, dkv, dout,
                               qd, decode, warps, &err));
        d2h(qgot, dout, T * qd * 4);
        double e = rel_err(qgot, ref, T * qd);
        snprintf(name, sizeof name,
                 "attention decode tiles%s, decode %d, %d warps (%d/%d heads, hd %d, ctx %d)",
                 q8 ? " 8-bit" : "", decode, warps, n_head, n_head_kv, hd, max_ctx);
        report(name, e < 1e-4, "rel err", e, 1e-4);
        if (dw == 7) {
            int r = mfk_attention_tiles(ctx, &s, layer, ntl, dtiles, dq, qd, dpos, dtoff, dtab, dkv,
                                        dout, qd, 3, 4, &err);
            report("attention tiles: decode 3 refused", r == MF_EINVAL, "rc", r, MF_EINVAL);
            r = mfk_attention_tiles(ctx, &s, layer, ntl, dtiles, dq, qd, dpos, dtoff, dtab, dkv,
                                    dout, qd, 1, 5, &err);
            report("attention tiles: 5 decode warps refused", r == MF_EINVAL, "rc", r, MF_EINVAL);
        }
        free(tiles);
        mfk_free(dtiles);
    }
    mfk_free(dkv), mfk_free(dq), mfk_free(dk), mfk_free(dv), mfk_free(drope), mfk_free(dout);
    mfk_free(dpos), mfk_free(dblk), mfk_free(dtoff), mfk_free(dtab);
    free(kv), free(kv_got), free(q), free(k), free(v), free(rope), free(qgot), free(qref), free(kref);
    free(ref), free(sc), free(tables), free(perm);
}

/* The 8-bit copy mfk_rmsnorm and mfk_swiglu write for the K-quant
 * products (struct mfk_q8) against the host's k_quant_act arithmetic on
 * the float rows they wrote: the same bytes, scales and sums, or the GEMV
 * would see a different input than when it quantizes for itself. n 20480
 * goes past the rows rmsnorm keeps in registers. Rows n % 256 != 0 are
 * refused. */
static int q8_matches(const float *y, int64_t ld, int rows, int64_t n, const int8_t *q,
                      const float *d, const float *sm)
{
    for (int k = 0; k < rows; k++)
        for (int64_t o = 0; o < n; o += 32) {
            const float *v = y + k * ld + o;
            float amax = 0;
            int qs = 0;
            for (int e = 0; e < 32; e++)
                amax = fmaxf(amax, fabsf(v[e]));
            const float dd = amax / 127.0f;
            for (int e = 0; e < 32; e++) {
                int qe = amax > 0 ? (int)rintf(v[e] / dd) : 0;
                qs += qe;
                if (q[k * n + o + e] != qe)
                    return 0;
            }
            const int64_t b = (k * n + o) / 32;
            if (memcmp(&d[b], &dd, 4) != 0 || sm[b] != dd * (float)qs)
                return 0;
        }
    return 1;
}

static void test_q8_copy(int64_t n)
{
    const int rows = 3;
    const int64_t ld = n + 4, nb = rows * n / 32;
    float *x = malloc(rows * ld * 4), *u = malloc(rows * ld * 4), *g = malloc(n * 4);
    float *y = malloc(rows * ld * 4), *d = malloc(nb * 4), *sm = malloc(nb * 4);
    int8_t *q = malloc(rows * n);
    for (int64_t i = 0; i < rows * ld; i++)
        x[i] = frand() * 3, u[i] = frand();
    x[5] = 0, x[ld + 40] = 200; /* an outlier: its block's other values round to few levels */
    for (int64_t i = 64; i < 96; i++)
        x[i] = 0; /* an all-zero block: d 0, every q 0 */
    for (int64_t i = 0; i < n; i++)
        g[i] = 1 + frand() * 0.1f;
    float *dx = dalloc(rows * ld * 4), *du = dalloc(rows * ld * 4), *dg = dalloc(n * 4);
    float *dy = dalloc(rows * ld * 4);
    uint8_t *buf = dalloc(rows * n + 2 * nb * 4);
    struct mfk_q8 q8 = {(int8_t *)buf, (float *)(void *)(buf + rows * n),
                        (float *)(void *)(buf + rows * n) + nb};
    char name[64];
    h2d(dx, x, rows * ld * 4);
    h2d(du, u, rows * ld * 4);
    h2d(dg, g, n * 4);
    for (int which = 0; which < 2; which++) {
        poison(buf, rows * n + 2 * nb * 4);
        if (which == 0) {
            poison(dy, rows * ld * 4);
            CK(mfk_rmsnorm(ctx, dx, ld, NULL, 0, dg, dy, ld, rows, n, 1e-5f, &q8, &err));
        } else {
            CK(mfk_swiglu(ctx, dx, du, ld, rows, n, &q8, &err));
        }
        d2h(y, which ? dx : dy, rows * ld * 4);
        d2h(q, q8.q, rows * n);
        d2h(d, q8.d, nb * 4);
        d2h(sm, q8.s, nb * 4);
        snprintf(name, sizeof name, "%s 8-bit copy = k_quant_act's (n %lld)",
                 which ? "swiglu" : "rmsnorm", (long long)n);
        report(name, q8_matches(y, ld, rows, n, q, d, sm), "equal", 1, 1);
    }
    int r0 = mfk_rmsnorm(ctx, dx, ld, NULL, 0, dg, dy, ld, rows, n - 32, 1e-5f, &q8, &err);
    int r1 = mfk_swiglu(ctx, dx, du, ld, rows, n - 32, &q8, &err);
    report("8-bit copy of rows n % 256 != 0 refused", r0 == MF_EINVAL && r1 == MF_EINVAL, "rc",
           (double)(r0 == MF_EINVAL ? r1 : r0), MF_EINVAL);
    mfk_free(dx), mfk_free(du), mfk_free(dg), mfk_free(dy), mfk_free(buf);
    free(x), free(u), free(g), free(y), free(d), free(sm), free(q);
}

/* mfk_gemv_n launches the Q4_K / Q6_K products of one input together
 * (weights of one type and rows-a-warp share a launch; 8192 rows and more
 * take two rows a warp, with a last odd row). Each output must equal, bit
 * for bit, the same weight's product computed 4096 rows at a time on its
 * own (one row a warp, one weight a launch). */
static void test_gemv_groups(void)
{
    const int64_t ne0 = 512;
    static const struct {
        enum ggml_type t;
        int64_t rows;
    } ws[] = {{GGML_TYPE_Q4_K, 8200}, {GGML_TYPE_Q4_K, 8193}, {GGML_TYPE_Q4_K, 300},
              {GGML_TYPE_Q6_K, 8201}, {GGML_TYPE_Q6_K, 77}};
    enum { NW = 5 };
    struct mfk_weight w[NW];
    void *dw[NW];
    float *dy[NW], *dr[NW];
    int64_t ld[NW];
    float *src = malloc((size_t)ne0 * 4);
    for (int i = 0; i < NW; i++) {
        uint64_t rb;
        ggml_type_row_size(ws[i].t, (uint64_t)ne0, &rb);
        uint8_t *q = malloc(rb * (size_t)ws[i].rows);
        for (int64_t r = 0; r < ws[i].rows; r++) {
            for (int64_t e = 0; e < ne0; e++)
                src[e] = frand() * 0.05f;
            CK(quant_quantize_row(ws[i].t, src, q + r * rb, ne0, &err));
        }
        dw[i] = dalloc(rb * (size_t)ws[i].rows);
        w[i] = (struct mfk_weight){
            .data = dw[i], .type = (int)ws[i].t, .ne0 = ne0, .ne1 = ws[i].rows, .row_bytes = rb};
        h2d(dw[i], q, rb * (size_t)ws[i].rows);
        free(q);
        ld[i] = ws[i].rows + 5;
        dy[i] = dalloc((size_t)(3 * ld[i]) * 4), dr[i] = dalloc((size_t)(3 * ld[i]) * 4);
    }
    float *x = malloc(3 * ne0 * 4), *dx = dalloc(3 * ne0 * 4);
    for (int64_t i = 0; i < 3 * ne0; i++)
        x[i] = frand();
    h2d(dx, x, 3 * ne0 * 4);
    for (int nt = 1; nt <= 3; nt += 2) {
        const struct mfk_weight *g1[3] = {&w[0], &w[1], &w[2]}, *g2[2] = {&w[3], &w[4]};
        for (int i = 0; i < NW; i++) {
            poison(dy[i], (size_t)(3 * ld[i]) * 4);
            poison(dr[i], (size_t)(3 * ld[i]) * 4);
        }
        CK(mfk_gemv_n(ctx, 3, g1, dx, ne0, nt, dy, ld, 0, NULL, &err));
        CK(mfk_gemv_n(ctx, 2, g2, dx, ne0, nt, dy + 3, ld + 3, 0, NULL, &err));
        int64_t bad = 0;
        for (int i = 0; i < NW; i++) {
            for (int64_t r = 0; r < ws[i].rows; r += 4096) {
                struct mfk_weight part = w[i];
                part.data = (const uint8_t *)dw[i] + r * w[i].row_bytes;
                part.ne1 = ws[i].rows - r < 4096 ? ws[i].rows - r : 4096;
                CK(mfk_gemv(ctx, &part, dx, ne0, nt, dr[i] + r, ld[i], 0, &err));
            }
            float *a = malloc((size_t)(nt * ld[i]) * 4), *b = malloc((size_t)(nt * ld[i]) * 4);
            d2h(a, dy[i], (size_t)(nt * ld[i]) * 4);
            d2h(b, dr[i], (size_t)(nt * ld[i]) * 4);
            for (int c = 0; c < nt; c++)
                for (int64_t r = 0; r < ws[i].rows; r++)
                    bad += memcmp(&a[c * ld[i] + r], &b[c * ld[i] + r], 4) != 0;
            free(a), free(b);
        }
        char name[80];
        snprintf(name, sizeof name, "gemv_n: grouped launches = one weight at a time (nt %d)", nt);
        report(name, bad == 0, "outputs differ", (double)bad, 0);
    }
    for (int i = 0; i < NW; i++)
        mfk_free(dw[i]), mfk_free(dy[i]), mfk_free(dr[i]);
    mfk_free(dx);
    free(x), free(src);
}

/* mfk_gemv of a random t weight, ne1 rows of ne0, at each of the n token
 * counts nts[] (gemv_check, rows packed). */
static void gemv_vs_ref(const char *what, enum ggml_type t, int64_t ne0, int64_t ne1,
                        const int *nts, int n, int add)
{
    uint64_t rb;
    ggml_type_row_size(t, (uint64_t)ne0, &rb);
    float *src = malloc((size_t)ne0 * 4), *deq = malloc((size_t)(ne0 * ne1) * 4);
    uint8_t *q = malloc(rb * (size_t)ne1);
    for (int64_t r = 0; r < ne1; r++) {
        for (int64_t e = 0; e < ne0; e++)
            src[e] = frand() * 0.05f;
        CK(quant_quantize_row(t, src, q + r * rb, ne0, &err));
        CK(quant_dequantize_row(t, q + r * rb, deq + r * ne0, ne0, &err));
    }
    void *dw = dalloc(rb * (size_t)ne1);
    h2d(dw, q, rb * (size_t)ne1);
    const struct mfk_weight w = {
        .data = dw, .type = (int)t, .ne0 = ne0, .ne1 = ne1, .row_bytes = rb};
    for (int k = 0; k < n; k++) {
        char name[96];
        snprintf(name, sizeof name, "gemv %s %s %lldx%lld nt=%d%s", what, ggml_type_name(t),
                 (long long)ne1, (long long)ne0, nts[k], add ? " add" : "");
        gemv_check(name, &w, deq, nts[k], ne0, ne1, add);
    }
    mfk_free(dw);
    free(src), free(deq), free(q);
}

/* The Q4_K and Q6_K GEMVs of decode (llama.cu's k_gemv_ring) stream rows
 * through shared memory 8 super-blocks at a time, each warp several rows in
 * turn: rows of whole and partial units, one and two rows a warp (8192 rows
 * and more), more rows than the grid's warps, against the float64 product
 * of the dequantized weights, the output poisoned first. Two rows a warp
 * of Q6_K take the one-row-a-warp kernel (the ring would hold one unit);
 * test_type's 8448-wide rows cover a Q6_K row the ring cannot copy (33
 * super-blocks: rows not 16-byte aligned). */
static void test_gemv_ring(void)
{
    static const struct {
        enum ggml_type t;
        int64_t ne0, ne1;
    } cs[] = {{GGML_TYPE_Q4_K, 4352, 20000}, {GGML_TYPE_Q4_K, 2048, 8000},
              {GGML_TYPE_Q4_K, 4096, 300},   {GGML_TYPE_Q6_K, 6144, 300},
              {GGML_TYPE_Q6_K, 2048, 8000},  {GGML_TYPE_Q6_K, 4096, 8195}};
    static const int nts[] = {2, 4}; /* the ring's token counts */
    for (size_t k = 0; k < sizeof cs / sizeof cs[0]; k++)
        gemv_vs_ref("ring", cs[k].t, cs[k].ne0, cs[k].ne1, nts, 2, 0);
}

/* The one-token GEMV of 4096-wide rows and more, GEMV_SPLIT warps a row
 * (kernels/llama.cu; Q4_K up to 8192 wide): rows whose super-blocks the
 * warps share evenly (4096, 8192 and 14336 wide) and unevenly (4352 and
 * 8448: 17 and 33), row counts that leave the last block's last tasks
 * past the weight (their warps still meet the block's barriers), and the
 * residual add the o and down products make; Q4_K 14336 wide, which keeps
 * one warp a row, beside them. */
static void test_gemv_split(void)
{
    static const struct {
        enum ggml_type t;
        int64_t ne0, ne1;
    } cs[] = {{GGML_TYPE_Q4_K, 4096, 4099},  {GGML_TYPE_Q4_K, 8192, 1001},
              {GGML_TYPE_Q4_K, 4352, 1001},  {GGML_TYPE_Q4_K, 14336, 1001},
              {GGML_TYPE_Q6_K, 14336, 4099}, {GGML_TYPE_Q6_K, 8448, 1001},
              {GGML_TYPE_Q6_K, 4352, 1001}};
    static const int one[] = {1};
    for (size_t k = 0; k < sizeof cs / sizeof cs[0]; k++)
        for (int add = 0; add <= 1; add++)
            gemv_vs_ref("split", cs[k].t, cs[k].ne0, cs[k].ne1, one, 1, add);
}

/* mfk_gemv_n refuses weights of different widths and unaligned input. */
static void test_gemv_refusals(void)
{
    uint64_t rb;
    ggml_type_row_size(GGML_TYPE_Q4_K, 512, &rb);
    uint8_t *dw = dalloc(rb * 8);
    float *dx = dalloc(4 * 512 * 4 + 16), *dy = dalloc(4 * 8 * 4);
    struct mfk_weight a = {.data = dw, .type = GGML_TYPE_Q4_K, .ne0 = 512, .ne1 = 8,
                           .row_bytes = rb};
    struct mfk_weight b = a;
    b.ne0 = 256;
    b.row_bytes = rb / 2;
    const struct mfk_weight *w[2] = {&a, &b};
    float *y[2] = {dy, dy};
    const int64_t ld[2] = {8, 8};
    int r0 = mfk_gemv_n(ctx, 2, w, dx, 512, 2, y, ld, 0, NULL, &err);
    int r1 = mfk_gemv_n(ctx, 1, w, dx + 1, 512, 2, y, ld, 0, NULL, &err);
    report("gemv: mixed widths, unaligned input refused", r0 == MF_EINVAL && r1 == MF_EINVAL,
           "rc", (double)(r0 == MF_EINVAL ? r1 : r0), MF_EINVAL);
    mfk_free(dw);
    mfk_free(dx);
    mfk_free(dy);
}

static void test_argmax(void)
{
    const int rows = 5;
    const int64_t n = 70000, ld = 70004;
    float *x = malloc(rows * ld * 4);
    int32_t want[5], got[5];
    for (int64_t i = 0; i < rows * ld; i++)
        x[i] = frand();
    want[0] = 69999, x[69999] = 5;             /* last element */
    want[1] = 10, x[ld + 10] = 4, x[ld + 500] = 4; /* tie: the first wins */
    want[2] = 0, x[2 * ld] = 7, x[2 * ld + 3] = NAN; /* NaN never wins */
    want[3] = 31337, x[3 * ld + 31337] = 2;
    want[4] = 4097, x[4 * ld + 4097] = 1.5f, x[4 * ld + 4098] = INFINITY * 0.0f;
    float *dx = dalloc(rows * ld * 4);
    int32_t *dids = dalloc(rows * 4);
    h2d(dx, x, rows * ld * 4);
    CK(mfk_argmax(ctx, dx, ld, rows, n, dids, &err));
    d2h(got, dids, sizeof got);
    int bad = 0;
    for (int r = 0; r < rows; r++)
        bad += got[r] != want[r];
    report("argmax (ties, NaN)", bad == 0, "rows wrong", bad, 0);
    mfk_free(dx), mfk_free(dids);
    free(x);
}

/* ---- mixture of experts (kernels/moe.cu) ---------------------------------- */

/* A routing's device state for T tokens, k of ne experts each. */
struct moe_dev {
    struct mfk_moe_route r;
    int32_t T, ne, k;
    int64_t items;
};

static struct moe_dev moe_dev_new(int32_t T, int32_t ne, int32_t k)
{
    struct moe_dev d = {.T = T, .ne = ne, .k = k, .items = mfk_moe_items_max(T, ne, k)};
    const size_t P = (size_t)T * (size_t)k;
    d.r.sel = dalloc(P * 4);
    d.r.w = dalloc(P * 4);
    d.r.eoff = dalloc((size_t)(ne + 1) * 4);
    d.r.grow = dalloc(P * 4);
    d.r.prow = dalloc(P * 4);
    d.r.items = dalloc((size_t)d.items * 16);
    d.r.n_items = dalloc(8);
    d.r.done = (unsigned *)(void *)(d.r.n_items + 1);
    CK(mfk_memset(ctx, d.r.n_items, 0, 8, &err));
    return d;
}

static void moe_dev_free(struct moe_dev *d)
{
    mfk_free(d->r.sel), mfk_free(d->r.w), mfk_free(d->r.eoff), mfk_free(d->r.grow);
    mfk_free(d->r.prow), mfk_free(d->r.items), mfk_free(d->r.n_items);
}

/* One token's routing (cpu_moe.c's rule): softmax in double, the k
 * largest (ties to the lower expert) best first, weights over their sum
 * added in float in that order, as the CPU and the kernel add them (at
 * k = 512 that sum's rounding is 1e-5 of it). */
static void moe_route_ref(const float *lg, int32_t ne, int32_t k, int32_t *sel, double *w)
{
    double p[MFK_MOE_MAX_EXPERTS], mx = -INFINITY, sum = 0;
    float ws = 0;
    int taken[MFK_MOE_MAX_EXPERTS] = {0};
    for (int32_t e = 0; e < ne; e++)
        mx = fmax(mx, (double)lg[e]);
    for (int32_t e = 0; e < ne; e++)
        sum += p[e] = exp((double)lg[e] - mx);
    for (int32_t j = 0; j < k; j++) {
        int32_t best = -1;
        for (int32_t e = 0; e < ne; e++)
            if (!taken[e] && (best < 0 || p[e] > p[best]))
                best = e;
        taken[best] = 1;
        sel[j] = best;
        w[j] = p[best] / sum;
        ws += (float)w[j];
    }
    for (int32_t j = 0; j < k; j++)
        w[j] /= ws;
}

/* The grouping of a routing (sel: T x k), as the kernel promises it: the
 * pairs counting-sorted by expert, tokens in order; items of up to
 * mfk_moe_tile(T) rows, experts in order. Returns the items. */
static int32_t moe_group_ref(const int32_t *sel, int32_t T, int32_t ne, int32_t k, int32_t *eoff,
                             int32_t *grow, int32_t *prow, int32_t *items)
{
    int32_t fill[MFK_MOE_MAX_EXPERTS] = {0}, n = 0;
    const int32_t tile = mfk_moe_tile(T);
    memset(eoff, 0, (size_t)(ne + 1) * 4);
    for (int32_t p = 0; p < T * k; p++)
        eoff[sel[p] + 1]++;
    for (int32_t e = 0; e < ne; e++)
        eoff[e + 1] += eoff[e];
    for (int32_t p = 0; p < T * k; p++) {
        const int32_t at = eoff[sel[p]] + fill[sel[p]]++;
        grow[at] = p / k;
        prow[p] = at;
    }
    for (int32_t e = 0; e < ne; e++)
        for (int32_t r = eoff[e]; r < eoff[e + 1]; r += tile, n++) {
            items[4 * n] = e, items[4 * n + 1] = r;
            items[4 * n + 2] = eoff[e + 1] - r < tile ? eoff[e + 1] - r : tile;
            items[4 * n + 3] = 0;
        }
    return n;
}

/* The routing's outputs read back. */
struct moe_host {
    int32_t *sel, *eoff, *grow, *prow, *items, cnt[2];
    float *w;
};

static void moe_read(const struct moe_dev *d, struct moe_host *h)
{
    const size_t P = (size_t)d->T * (size_t)d->k;
    h->sel = malloc(P * 4), h->w = malloc(P * 4), h->eoff = malloc((size_t)(d->ne + 1) * 4);
    h->grow = malloc(P * 4), h->prow = malloc(P * 4), h->items = malloc((size_t)d->items * 16);
    d2h(h->sel, d->r.sel, P * 4);
    d2h(h->w, d->r.w, P * 4);
    d2h(h->eoff, d->r.eoff, (size_t)(d->ne + 1) * 4);
    d2h(h->grow, d->r.grow, P * 4);
    d2h(h->prow, d->r.prow, P * 4);
    d2h(h->cnt, d->r.n_items, 8);
    d2h(h->items, d->r.items, (size_t)(h->cnt[0] > 0 && h->cnt[0] <= d->items ? h->cnt[0] : 0) * 16);
}

static void moe_host_free(struct moe_host *h)
{
    free(h->sel), free(h->w), free(h->eoff), free(h->grow), free(h->prow), free(h->items);
}

/* Random router logits (rows ld apart): uniform in [-4, 4), or with ties
 * drawn from {-1, 0, 0.5, 1} and token 0's all equal (then its k experts
 * are 0..k-1, each weighing 1 / k); experts in off[] (n_off) far below. */
static void moe_logits(float *lg, int32_t T, int32_t ne, int64_t ld, int ties, const int32_t *off,
                       int n_off)
{
    static const float levels[4] = {-1.0f, 0.0f, 0.5f, 1.0f};
    for (int32_t t = 0; t < T; t++)
        for (int32_t e = 0; e < ne; e++) {
            float v = ties ? (t == 0 ? 0.25f : levels[next_u64() % 4]) : frand() * 4;
            for (int i = 0; i < n_off; i++)
                v = e == off[i] ? -30.0f : v;
            lg[t * ld + e] = v;
        }
}

/* mfk_moe_route against the host's rule on T tokens, twice (new logits:
 * the block counter must have come back to 0): every choice and its order
 * exactly (ties: the lower expert), the weights and their sum's distance
 * from 1 within 2e-6 + k float roundings (the kernel's expf and float sum
 * against a double softmax), and the grouping of the device's own choices
 * exactly: offsets, gathered rows in token order, each pair's row, the
 * work list. */
static void test_moe_route(int32_t T, int32_t ne, int32_t k, int ties)
{
    const int64_t ld = ne + 3;
    struct moe_dev d = moe_dev_new(T, ne, k);
    const size_t P = (size_t)T * (size_t)k;
    float *lg = malloc((size_t)T * (size_t)ld * 4), *dlg = dalloc((size_t)T * (size_t)ld * 4);
    int32_t *rsel = malloc(P * 4), *eoff = malloc((size_t)(ne + 1) * 4), *grow = malloc(P * 4);
    int32_t *prow = malloc(P * 4), *items = malloc((size_t)d.items * 16);
    double *rw = malloc(P * 8);
    char name[120];
    for (int rep = 0; rep < 2; rep++) {
        moe_logits(lg, T, ne, ld, ties, NULL, 0);
        h2d(dlg, lg, (size_t)T * (size_t)ld * 4);
        poison(d.r.sel, P * 4), poison(d.r.w, P * 4), poison(d.r.grow, P * 4);
        poison(d.r.prow, P * 4), poison(d.r.eoff, (size_t)(ne + 1) * 4);
        CK(mfk_moe_route(ctx, dlg, ld, T, ne, k, &d.r, &err));
        struct moe_host h;
        moe_read(&d, &h);
        int64_t bad_sel = 0;
        double werr = 0, serr = 0;
        for (int32_t t = 0; t < T; t++) {
            moe_route_ref(lg + t * ld, ne, k, rsel + t * k, rw + t * k);
            double s = 0;
            for (int32_t j = 0; j < k; j++) {
                const double e = fabs(h.w[t * k + j] - rw[t * k + j]) / rw[t * k + j];
                bad_sel += h.sel[t * k + j] != rsel[t * k + j];
                werr = !(e <= werr) ? e : werr; /* a NaN sticks */
                s += h.w[t * k + j];
            }
            serr = !(fabs(s - 1) <= serr) ? fabs(s - 1) : serr;
        }
        snprintf(name, sizeof name, "moe route T=%d %d of %d%s: choices", T, k, ne,
                 ties ? " (ties)" : "");
        report(name, bad_sel == 0, "differ", (double)bad_sel, 0);
        snprintf(name, sizeof name, "moe route T=%d %d of %d%s: weights", T, k, ne,
                 ties ? " (ties)" : "");
        const double wb = 2e-6 + k * 1.2e-7;
        report(name, werr < wb && serr < wb, "rel err", werr > serr ? werr : serr, wb);
        /* the grouping of the device's choices (valid experts only) */
        int valid = 1;
        for (size_t p = 0; p < P; p++)
            valid &= h.sel[p] >= 0 && h.sel[p] < ne;
        int32_t n = valid ? moe_group_ref(h.sel, T, ne, k, eoff, grow, prow, items) : -1;
        int same = valid && h.cnt[0] == n && h.cnt[1] == 0 &&
                   !memcmp(h.eoff, eoff, (size_t)(ne + 1) * 4) && !memcmp(h.grow, grow, P * 4) &&
                   !memcmp(h.prow, prow, P * 4) && !memcmp(h.items, items, (size_t)n * 16);
        snprintf(name, sizeof name, "moe route T=%d %d of %d%s: grouping, %d items", T, k, ne,
                 ties ? " (ties)" : "", h.cnt[0]);
        report(name, same, "equal", same, 1);
        moe_host_free(&h);
    }
    mfk_free(dlg);
    moe_dev_free(&d);
    free(lg), free(rsel), free(eoff), free(grow), free(prow), free(items), free(rw);
}

/* n_expert matrices of ne1 rows x ne0 of type t, random, one after
 * another on the device; *deq their values (rows in order). The experts
 * in poisoned[] hold 0xFF bytes instead (NaN scales and values in every
 * type): a product that reads them is NaN. */
static struct mfk_weight moe_weight_new(enum ggml_type t, int64_t ne0, int64_t ne1, int32_t ne,
                                        const int32_t *poisoned, int n_poisoned, float **deq)
{
    uint64_t rb;
    ggml_type_row_size(t, (uint64_t)ne0, &rb);
    const int64_t rows = ne1 * ne;
    float *src = malloc((size_t)ne0 * 4);
    uint8_t *q = malloc((size_t)rb * (size_t)rows);
    *deq = malloc((size_t)(ne0 * rows) * 4);
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t i = 0; i < ne0; i++)
            src[i] = frand() * 0.05f;
        CK(quant_quantize_row(t, src, q + r * rb, ne0, &err));
        CK(quant_dequantize_row(t, q + r * rb, *deq + r * ne0, ne0, &err));
    }
    for (int i = 0; i < n_poisoned; i++)
        memset(q + (size_t)poisoned[i] * (size_t)ne1 * rb, 0xFF, (size_t)ne1 * rb);
    void *dw = dalloc((size_t)rb * (size_t)rows);
    h2d(dw, q, (size_t)rb * (size_t)rows);
    free(src), free(q);
    return (struct mfk_weight){.data = dw, .type = (int)t, .ne0 = ne0, .ne1 = ne1, .row_bytes = rb};
}

/* x's rows (ldx apart) in their 8-bit form, rows n apart (struct mfk_q8):
 * what mfk_rmsnorm and mfk_swiglu write, by the same formula. */
static void moe_q8_host(const float *x, int64_t ldx, int rows, int64_t n, int8_t *q, float *d,
                        float *s)
{
    for (int r = 0; r < rows; r++)
        for (int64_t o = 0; o < n; o += 32) {
            const float *v = x + r * ldx + o;
            float amax = 0;
            int qs = 0;
            for (int e = 0; e < 32; e++)
                amax = fmaxf(amax, fabsf(v[e]));
            const float dd = amax / 127.0f;
            for (int e = 0; e < 32; e++) {
                const int a = amax > 0 ? (int)rintf(v[e] / dd) : 0;
                q[r * n + o + e] = (int8_t)a;
                qs += a;
            }
            d[(r * n + o) / 32] = dd;
            s[(r * n + o) / 32] = dd * (float)qs;
        }
}

/* mfk_moe_gemm of two weights (types t and t2, ne1 = 37 rows an expert,
 * ne0 wide) on a routing of T tokens, k = 2 of n_e experts, experts 1 and
 * n_e - 1 never chosen (and NaN inside): every gathered row of both
 * against the float64 product of its expert's rows with its input as the
 * kernel meets it (act_ref) within 1e-5, the rows' padding (ldy) never
 * written. down: inputs by gathered row (the down product, one weight),
 * else by token through the routing's row map. */
static void moe_gemm_check(enum ggml_type t, enum ggml_type t2, int64_t ne0, int32_t n_e, int32_t k,
                           int32_t T, int down)
{
    const int64_t ne1 = 37, ldy = ne1 + 3, ldx = ne0 + 4;
    const int32_t off[2] = {1, n_e - 1};
    const int nw = down ? 1 : 2;
    const enum ggml_type ts[2] = {t, t2};
    struct moe_dev d = moe_dev_new(T, n_e, k);
    const size_t P = (size_t)T * (size_t)k;
    const int32_t rows = down ? (int32_t)P : T;
    float *lg = malloc((size_t)T * (size_t)n_e * 4), *dlg = dalloc((size_t)T * (size_t)n_e * 4);
    moe_logits(lg, T, n_e, n_e, 0, off, 2);
    h2d(dlg, lg, (size_t)T * (size_t)n_e * 4);
    CK(mfk_moe_route(ctx, dlg, n_e, T, n_e, k, &d.r, &err));
    struct moe_host h;
    moe_read(&d, &h);
    float *x = malloc((size_t)rows * (size_t)ldx * 4);
    for (int64_t i = 0; i < rows * ldx; i++)
        x[i] = frand();
    const size_t nq = (size_t)rows * (size_t)ne0, nd = nq / 32;
    int8_t *q = malloc(nq);
    float *qd = malloc(nd * 4), *qs = malloc(nd * 4);
    moe_q8_host(x, ldx, rows, ne0, q, qd, qs);
    float *dx = dalloc((size_t)rows * (size_t)ldx * 4);
    uint8_t *dq = dalloc(nq + 2 * nd * 4);
    h2d(dx, x, (size_t)rows * (size_t)ldx * 4);
    h2d(dq, q, nq);
    h2d(dq + nq, qd, nd * 4);
    h2d(dq + nq + nd * 4, qs, nd * 4);
    struct mfk_q8 q8 = {(int8_t *)dq, (float *)(void *)(dq + nq),
                        (float *)(void *)(dq + nq + nd * 4)};
    struct mfk_weight w[2];
    const struct mfk_weight *wp[2] = {&w[0], &w[1]};
    float *deq[2] = {NULL, NULL}, *dy[2] = {NULL, NULL};
    for (int i = 0; i < nw; i++) {
        w[i] = moe_weight_new(ts[i], ne0, ne1, n_e, off, 2, &deq[i]);
        dy[i] = dalloc(P * (size_t)ldy * 4);
        poison(dy[i], P * (size_t)ldy * 4);
    }
    CK(mfk_moe_gemm(ctx, nw, wp, n_e, dx, ldx, &q8, down ? NULL : d.r.grow, T, k, &d.r, dy, ldy,
                    &err));
    float *y = malloc(P * (size_t)ldy * 4), *yc = malloc(P * (size_t)ne1 * 4);
    double *xa = malloc((size_t)rows * (size_t)ne0 * 8), *ref = malloc(P * (size_t)ne1 * 8);
    char name[140];
    for (int i = 0; i < nw; i++) {
        act_ref(ts[i], x, ldx, rows, ne0, xa);
        int32_t e = 0;
        for (size_t g = 0; g < P; g++) {
            while (e < n_e - 1 && g >= (size_t)h.eoff[e + 1])
                e++;
            const int64_t in = down ? (int64_t)g : h.grow[g];
            for (int64_t r = 0; r < ne1; r++) {
                const float *wr = deq[i] + ((int64_t)e * ne1 + r) * ne0;
                double sum = 0;
                for (int64_t c = 0; c < ne0; c++)
                    sum += (double)wr[c] * xa[in * ne0 + c];
                ref[g * ne1 + r] = sum;
            }
        }
        d2h(y, dy[i], P * (size_t)ldy * 4);
        int64_t pad = 0;
        for (size_t g = 0; g < P; g++) {
            memcpy(yc + g * ne1, y + g * ldy, (size_t)ne1 * 4);
            for (int64_t r = ne1; r < ldy; r++) {
                uint32_t bits;
                memcpy(&bits, &y[g * ldy + r], 4);
                pad += bits != 0xFFFFFFFFu;
            }
        }
        const double e2 = rel_err(yc, ref, P * (size_t)ne1), bound = 1e-5;
        snprintf(name, sizeof name, "moe gemm %s%s%s %lldx%lld T=%d %d of %d%s (%d items)",
                 ggml_type_name(ts[i]), nw > 1 && t2 != t ? " beside " : "",
                 nw > 1 && t2 != t ? ggml_type_name(ts[1 - i]) : "", (long long)ne1,
                 (long long)ne0, T, k, n_e, down ? " by row" : "", h.cnt[0]);
        report(name, e2 < bound && pad == 0, "rel err", pad ? INFINITY : e2, bound);
    }
    for (int i = 0; i < nw; i++)
        mfk_free((void *)w[i].data), mfk_free(dy[i]), free(deq[i]);
    mfk_free(dlg), mfk_free(dx), mfk_free(dq);
    moe_host_free(&h);
    moe_dev_free(&d);
    free(lg), free(x), free(q), free(qd), free(qs), free(y), free(yc), free(xa), free(ref);
}

/* The grouped products of each weight type: widths where a Q4_K or Q6_K
 * row takes 1, 3 (two rows a warp) and 9 super-blocks; 1, 3, 13 and 40
 * tokens (items of 1, up to 4 and up to 8 rows, rows per expert not a
 * multiple of them), gate/up style and down style; then 300 tokens (more
 * items than a launch's MFK_MOE_SLOTS), 128 experts top 8 at 32 tokens
 * (Qwen3-MoE's decode), and two types in one call (two launches). */
static void test_moe_gemm(enum ggml_type t)
{
    const int kq = t == GGML_TYPE_Q4_K || t == GGML_TYPE_Q6_K || t == GGML_TYPE_Q5_K;
    const int64_t widths[3] = {kq ? 256 : 96, kq ? 768 : 800, 2304};
    static const int32_t Ts[] = {1, 3, 13, 40};
    for (int wi = 0; wi < 3; wi++)
        for (size_t ti = 0; ti < sizeof Ts / sizeof Ts[0]; ti++)
            for (int down = 0; down < 2; down++)
                moe_gemm_check(t, t, widths[wi], 6, 2, Ts[ti], down);
    moe_gemm_check(t, t, widths[1], 6, 2, 300, 0);
    moe_gemm_check(t, t, widths[1], 128, 8, 32, 0);
    moe_gemm_check(t, t == GGML_TYPE_F16 ? GGML_TYPE_Q4_K : GGML_TYPE_F16, 768, 6, 2, 13, 0);
}

/* mfk_moe_combine: each token's rows weighted and added in choice order
 * (and to out), bit for bit the CPU's float operations, 1 and 9 tokens. */
static void test_moe_combine(void)
{
    const int32_t ne = 5, k = 3;
    const int64_t n = 260, ldy = 264, ldo = 268;
    static const int32_t Ts[] = {1, 9};
    char name[96];
    for (size_t ti = 0; ti < 2; ti++) {
        const int32_t T = Ts[ti];
        const size_t P = (size_t)T * k;
        struct moe_dev d = moe_dev_new(T, ne, k);
        float *lg = malloc((size_t)T * ne * 4), *dlg = dalloc((size_t)T * ne * 4);
        moe_logits(lg, T, ne, ne, 0, NULL, 0);
        h2d(dlg, lg, (size_t)T * ne * 4);
        CK(mfk_moe_route(ctx, dlg, ne, T, ne, k, &d.r, &err));
        struct moe_host h;
        moe_read(&d, &h);
        float *y = malloc(P * ldy * 4), *o0 = malloc((size_t)T * ldo * 4);
        float *o = malloc((size_t)T * ldo * 4), *want = malloc((size_t)T * ldo * 4);
        for (size_t i = 0; i < P * ldy; i++)
            y[i] = frand();
        for (size_t i = 0; i < (size_t)T * ldo; i++)
            o0[i] = frand();
        float *dy = dalloc(P * ldy * 4), *dout = dalloc((size_t)T * ldo * 4);
        h2d(dy, y, P * ldy * 4);
        for (int add = 0; add < 2; add++) {
            memcpy(want, o0, (size_t)T * ldo * 4);
            for (int32_t t = 0; t < T; t++)
                for (int64_t i = 0; i < n; i++) {
                    float acc = 0;
                    for (int32_t j = 0; j < k; j++) {
                        volatile float pr = h.w[t * k + j] * y[h.prow[t * k + j] * ldy + i];
                        acc = j ? acc + pr : pr;
                    }
                    want[t * ldo + i] = add ? acc + o0[t * ldo + i] : acc;
                }
            h2d(dout, o0, (size_t)T * ldo * 4);
            CK(mfk_moe_combine(ctx, dy, ldy, T, k, n, &d.r, dout, ldo, add, &err));
            d2h(o, dout, (size_t)T * ldo * 4);
            int64_t bad = 0;
            for (size_t i = 0; i < (size_t)T * ldo; i++)
                bad += memcmp(&o[i], &want[i], 4) != 0;
            snprintf(name, sizeof name, "moe combine T=%d %d of %d%s (bit-exact)", T, k, ne,
                     add ? " add" : "");
            report(name, bad == 0, "elements differ", (double)bad, 0);
        }
        mfk_free(dlg), mfk_free(dy), mfk_free(dout);
        moe_host_free(&h);
        moe_dev_free(&d);
        free(lg), free(y), free(o0), free(o), free(want);
    }
}

/* What the MoE kernels refuse, before launching anything. */
static void test_moe_refusals(void)
{
    struct moe_dev d = moe_dev_new(4, 8, 2);
    uint64_t rb;
    ggml_type_row_size(GGML_TYPE_Q4_K, 256, &rb);
    void *dw = dalloc(rb * 8 * 8);
    float *dx = dalloc(4 * 260 * 4 + 16), *dy = dalloc(8 * 8 * 4);
    struct mfk_weight q4 = {.data = dw, .type = GGML_TYPE_Q4_K, .ne0 = 256, .ne1 = 8,
                            .row_bytes = rb};
    struct mfk_weight f16 = {.data = dw, .type = GGML_TYPE_F16, .ne0 = 64, .ne1 = 8,
                             .row_bytes = 128};
    struct mfk_weight q50 = f16;
    q50.type = GGML_TYPE_Q5_0;
    const struct mfk_weight *w3[3] = {&f16, &f16, &f16};
    const struct mfk_weight *wq = &q4, *wf = &f16, *w5 = &q50;
    float *ys[3] = {dy, dy, dy};
    int rc[8];
    rc[0] = mfk_moe_gemm(ctx, 1, &wq, 8, dx, 256, NULL, NULL, 4, 2, &d.r, ys, 8, &err);
    rc[1] = mfk_moe_gemm(ctx, 1, &wf, 8, dx + 1, 64, NULL, NULL, 4, 2, &d.r, ys, 8, &err);
    rc[2] = mfk_moe_gemm(ctx, 3, w3, 8, dx, 64, NULL, NULL, 4, 2, &d.r, ys, 8, &err);
    rc[3] = mfk_moe_gemm(ctx, 1, &w5, 8, dx, 64, NULL, NULL, 4, 2, &d.r, ys, 8, &err);
    rc[4] = mfk_moe_route(ctx, dx, 8, 4, 8, 9, &d.r, &err);
    rc[5] = mfk_moe_route(ctx, dx, 600, 4, 600, 2, &d.r, &err);
    rc[6] = mfk_moe_combine(ctx, dx, 260, 4, 2, 258, &d.r, dy, 260, 0, &err);
    rc[7] = mfk_moe_route(ctx, dx, 8, 4, 8, 0, &d.r, &err);
    static const int want[8] = {MF_EINVAL,       MF_EINVAL, MF_EINVAL, MF_EUNSUPPORTED,
                                MF_EINVAL,       MF_EINVAL, MF_EINVAL, MF_EINVAL};
    int ok = 1;
    for (int i = 0; i < 8; i++)
        ok &= rc[i] == want[i];
    report("moe: no 8-bit input, unaligned input, 3 weights, Q5_0, k > experts, 600 experts, "
           "n % 4, k 0: refused",
           ok, "rc", ok, 1);
    mfk_free(dw), mfk_free(dx), mfk_free(dy);
    moe_dev_free(&d);
}

/* ---- whole model: CUDA backend vs CPU backend ------------------------------ */

struct side {
    struct backend *be;
    int32_t n_blocks;
};

static double logits_err(const float *a, const float *b, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        if (a[i] != a[i])
            return INFINITY;
        num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        den += (double)b[i] * b[i];
    }
    return sqrt(num / den);
}

static int32_t argmax_row(const float *x, int64_t n)
{
    int32_t b = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[b])
            b = (int32_t)i;
    return b;
}

/* A CPU and a CUDA backend over m with KV room for n_blocks blocks. 0, or
 * -1 after reporting the CUDA side's failure (what was made is freed). */
static int open_sides(const struct model *m, int32_t n_blocks, const char *what,
                      struct side *cpu, struct side *gpu)
{
    struct backend_config cfg = {.n_threads = 4, .kv_type = BACKEND_KV_F16};
    cfg.kv_bytes = (uint64_t)n_blocks * backend_kv_block_bytes(m, BACKEND_KV_F16);
    *cpu = (struct side){0};
    *gpu = (struct side){0};
    CK(backend_create(&cpu_backend_ops, m, &cfg, &cpu->be, &err));
    CK(backend_kv_alloc(cpu->be, &cpu->n_blocks, &err));
    if (backend_create(&cuda_backend_ops, m, &cfg, &gpu->be, &err) ||
        backend_kv_alloc(gpu->be, &gpu->n_blocks, &err)) {
        printf("FAIL %s: cuda backend: %s\n", what, err.msg);
        failures++;
        backend_free(gpu->be);
        backend_free(cpu->be);
        return -1;
    }
    return 0;
}

static const char *base_name(const char *path)
{
    return strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
}

/* model_open, or NULL after reporting "FAIL what path: why". */
static struct model *open_or_report(const char *path, const char *what)
{
    struct model *m;
    if (model_open(path, &m, &err) == 0)
        return m;
    printf("FAIL %s %s: %s\n", what, path, err.msg);
    failures++;
    return NULL;
}

/* 1 for F32/F16/BF16 weights (greedy tokens must match the CPU's). */
static int model_exact(const struct model *m)
{
    enum ggml_type wt = m->layers[0].w[MODEL_W_Q].type;
    return wt == GGML_TYPE_F32 || wt == GGML_TYPE_F16 || wt == GGML_TYPE_BF16;
}

/* The logits' bound against another computation of the same model.
 * F32/F16: float rounding only (measured 2e-5 / 4e-4); BF16: an input that
 * lands on the other side of a bf16 rounding step moves by 2^-8 (measured
 * 1.9e-3); quantized: the CPU quantizes activations to 8 bits, the GPU
 * does not (measured 1.1e-2 .. 1.6e-2). */
static double model_bound(const struct model *m)
{
    return m->layers[0].w[MODEL_W_Q].type == GGML_TYPE_BF16 ? 5e-3
           : model_exact(m)                                 ? 1e-3
                                                            : 6e-2;
}

static void test_model(const char *path)
{
    struct model *m;
    char name[160];
    const char *base = base_name(path);
    if (!(m = open_or_report(path, "model")))
        return;
    const int exact = model_exact(m);
    const double bound = model_bound(m);
    const int64_t V = m->hp.n_vocab;
    struct side cpu, gpu;
    if (open_sides(m, 24, base, &cpu, &gpu)) {
        model_close(m);
        return;
    }
    /* two sequences, block tables interleaved backwards */
    int32_t table[2][12], toks[2][80];
    for (int b = 0; b < 12; b++)
        table[0][b] = 23 - 2 * b, table[1][b] = 22 - 2 * b;
    for (int s = 0; s < 2; s++)
        for (int i = 0; i < 80; i++)
            toks[s][i] = (int32_t)(next_u64() % (uint64_t)V);
    float *lc = malloc(2 * V * 4), *lg = malloc(2 * V * 4);
    int npast[2] = {0, 0}, same = 0, total = 0, ties = 0;
    double worst = 0;
    /* step 1: seq 0 prefill 37 tokens, seq 1 prefill 20; step 2: seq 0 decodes,
     * seq 1 prefills 11 more; then 24 greedy decode steps of both */
    for (int st = 0; st < 26; st++) {
        int nn[2] = {st == 0 ? 37 : 1, st == 0 ? 20 : st == 1 ? 11 : 1};
        struct batch_seq bs[2];
        for (int s = 0; s < 2; s++)
            bs[s] = (struct batch_seq){.tokens = toks[s] + npast[s], .n_tokens = nn[s],
                                       .n_past = npast[s], .block_table = table[s],
                                       .n_blocks = 12, .want_logits = 1};
        struct batch bc = {.n_seqs = 2, .seqs = bs, .logits = lc};
        struct batch bg = {.n_seqs = 2, .seqs = bs, .logits = lg};
        memset(lg, 0xFF, 2 * V * 4);
        CK(backend_step(cpu.be, &bc, &err));
        if (backend_step(gpu.be, &bg, &err)) {
            printf("FAIL %s: cuda step: %s\n", base, err.msg);
            failures++;
            break;
        }
        double e = logits_err(lg, lc, 2 * V);
        worst = e > worst ? e : worst;
        int32_t gid[2];
        CK(cuda_backend_argmax(gpu.be, 2, gid, &err));
        for (int s = 0; s < 2; s++) {
            int32_t tc = argmax_row(lc + s * V, V), tg = argmax_row(lg + s * V, V);
            if (gid[s] != tg) {
                printf("FAIL %s: device argmax %d != host argmax %d\n", base, gid[s], tg);
                failures++;
            }
            npast[s] += nn[s];
            if (st >= 1) {
                same += tc == tg;
                total++;
                if (tc != tg) { /* a tie within the row's difference, or a real miss */
                    double dmax = 0, gap = (double)lc[s * V + tc] - lc[s * V + tg];
                    for (int64_t k = 0; k < V; k++)
                        dmax = fmax(dmax, fabs((double)lg[s * V + k] - lc[s * V + k]));
                    ties += gap <= dmax;
                    printf("     step %d seq %d: CPU %d (%.6g) over %d (%.6g), CUDA %.6g vs "
                           "%.6g: the CPU's margin %.2g is %s the row's largest difference %.2g\n",
                           st, s, tc, lc[s * V + tc], tg, lc[s * V + tg], lg[s * V + tc],
                           lg[s * V + tg], gap, gap <= dmax ? "within" : "PAST", dmax);
                }
                /* both continue with the CPU's choice, so one divergence
                 * does not hide the rest */
                toks[s][npast[s]] = tc;
            }
        }
    }
    snprintf(name, sizeof name, "model %s logits vs CPU", base);
    report(name, worst < bound, "rel err", worst, bound);
    {   /* the 24 two-sequence decode steps ran as CUDA graphs (the default) */
        struct cuda_upload_stats st;
        cuda_backend_stats(gpu.be, &st);
        snprintf(name, sizeof name, "model %s decode steps replayed as graphs", base);
        report(name, st.graph_replays >= 20 && st.graph_failures == 0, "replays",
               (double)st.graph_replays, 20);
        if (st.graph_failures)
            printf("     graph recording failed: %s\n", st.graph_why);
    }
    /* F32/F16/BF16: every greedy token the CPU's, except where the CPU's
     * top two are closer than the backends' logits differ in that row (a
     * tie at the precision both compute in, printed above) */
    snprintf(name, sizeof name, "model %s greedy tokens = CPU's (%d of %d, %d tie(s))", base, same,
             total, ties);
    if (exact)
        report(name, same + ties == total, "differ", (double)(total - same - ties), 0);
    else
        printf("info %s\n", name);
    /* refusals */
    {
        int32_t tok = 1;
        struct batch_seq bs = {.tokens = &tok, .n_tokens = 1, .n_past = 0, .block_table = table[0],
                               .n_blocks = 12, .want_logits = 1};
        struct batch b = {.n_seqs = 1, .seqs = &bs, .logits = lg};
        bs.block_table = (int32_t[]){gpu.n_blocks};
        bs.n_blocks = 1;
        int rc = backend_step(gpu.be, &b, &err);
        snprintf(name, sizeof name, "model %s: out-of-range block refused", base);
        report(name, rc == MF_EINVAL, "rc", rc, 0);
    }
    free(lc), free(lg);
    backend_free(gpu.be);
    backend_free(cpu.be);
    model_close(m);
}

/* A GPU backend over m with MFC_CUDA_GRAPHS=graphs, KV room for n_blocks
 * (one more for the padding), or NULL after reporting why. */
static struct backend *open_gpu(const struct model *m, int32_t n_blocks, const char *graphs,
                                const char *pdl)
{
    struct backend_config cfg = {.kv_type = BACKEND_KV_F16};
    struct backend *be = NULL;
    int32_t n;
    cfg.kv_bytes = (uint64_t)n_blocks * backend_kv_block_bytes(m, BACKEND_KV_F16);
    setenv("MFC_CUDA_GRAPHS", graphs, 1);
    setenv("MFC_CUDA_PDL", pdl, 1);
    if (backend_create(&cuda_backend_ops, m, &cfg, &be, &err) ||
        backend_kv_alloc(be, &n, &err)) {
        printf("FAIL graphs: cuda backend (MFC_CUDA_GRAPHS=%s MFC_CUDA_PDL=%s): %s\n", graphs, pdl,
               err.msg);
        failures++;
        backend_free(be);
        be = NULL;
    }
    unsetenv("MFC_CUDA_GRAPHS");
    unsetenv("MFC_CUDA_PDL");
    return be;
}

/* Decode steps as CUDA graphs against the same steps run eagerly: three
 * sequences (3 tokens, padded to 4) from 250-token prompts past the
 * 256-token context granularity (a second recorded shape), then two (no
 * padding), one of them not wanting logits; the logits rows of both
 * backends, the graphs' recorded and replayed counts. Two sequences run
 * exactly the eager kernels; the padded steps run the products over 4 rows
 * instead of 3 (another cuBLAS kernel for F16/BF16 weights), which moves an
 * activation across a rounding step now and then (fp16 or 8-bit, as the
 * weights' type rounds them): bounded as the model against the CPU. */
static void test_graphs(const char *path)
{
    struct model *m;
    char name[160];
    const char *base = base_name(path);
    if (!(m = open_or_report(path, "graphs")))
        return;
    const double bound = model_bound(m);
    const int64_t V = m->hp.n_vocab;
    enum { NS = 3, NB = 18, PROMPT = 250, STEPS = 16 };
    struct backend *ge = open_gpu(m, NS * NB + 1, "1", "1"),
                   *ee = open_gpu(m, NS * NB + 1, "0", "1");
    /* the graphs again with plain launches: the same kernels in the same
     * order, so the same bits */
    struct backend *gp = open_gpu(m, NS * NB + 1, "1", "0");
    int32_t table[NS][NB], toks[NS][PROMPT + STEPS + 1];
    float *lg = malloc(NS * V * 4), *le = malloc(NS * V * 4), *lp = malloc(NS * V * 4);
    int npast[NS] = {0};
    double worst = 0, worst2 = 0; /* the padded steps, the others */
    int same = 0, total = 0, pdl_same = 1, ok = ge && ee && gp && lg && le && lp;
    for (int i = 0; i < NS; i++)
        for (int b = 0; b < NB; b++)
            table[i][b] = b * NS + (NS - 1 - i);
    for (int i = 0; i < NS; i++)
        for (int j = 0; j < PROMPT + STEPS + 1; j++)
            toks[i][j] = (int32_t)(next_u64() % (uint64_t)V);
    for (int st = 0; ok && st <= STEPS; st++) {
        int ns = st > STEPS / 2 ? 2 : NS; /* the last steps: two sequences */
        struct batch_seq bs[NS];
        for (int i = 0; i < ns; i++)
            bs[i] = (struct batch_seq){.tokens = toks[i] + npast[i],
                                       .n_tokens = st == 0 ? PROMPT : 1, .n_past = npast[i],
                                       .block_table = table[i], .n_blocks = NB,
                                       .want_logits = !(st > STEPS / 2 && i == 1)};
        struct batch bg = {.n_seqs = ns, .seqs = bs, .logits = lg};
        struct batch be = {.n_seqs = ns, .seqs = bs, .logits = le};
        struct batch bp = {.n_seqs = ns, .seqs = bs, .logits = lp};
        int rows = 0;
        for (int i = 0; i < ns; i++)
            rows += bs[i].want_logits;
        memset(lg, 0xFF, (size_t)NS * V * 4);
        if (backend_step(ge, &bg, &err) || backend_step(ee, &be, &err) ||
            backend_step(gp, &bp, &err)) {
            printf("FAIL graphs %s: step %d: %s\n", base, st, err.msg);
            failures++;
            break;
        }
        double e = logits_err(lg, le, (size_t)rows * V);
        pdl_same &= memcmp(lg, lp, (size_t)rows * V * 4) == 0;
        if (ns == NS)
            worst = e > worst ? e : worst;
        else
            worst2 = e > worst2 ? e : worst2;
        for (int r = 0; st > 0 && r < rows; r++, total++)
            same += argmax_row(lg + r * V, V) == argmax_row(le + r * V, V);
        for (int i = 0; i < ns; i++)
            npast[i] += bs[i].n_tokens;
    }
    if (ok) {
        struct cuda_upload_stats st;
        cuda_backend_stats(ge, &st);
        /* the split count follows the rounded context cap, so the sums
         * round a little differently from the eager step's */
        snprintf(name, sizeof name, "graphs %s logits = eager, padded", base);
        report(name, worst < bound, "rel err", worst, bound);
        snprintf(name, sizeof name, "graphs %s logits = eager, unpadded", base);
        report(name, worst2 < 1e-5, "rel err", worst2, 1e-5);
        snprintf(name, sizeof name, "graphs %s logits, PDL on = off, bit for bit", base);
        report(name, pdl_same, "differ", (double)!pdl_same, 0);
        snprintf(name, sizeof name, "graphs %s greedy tokens = eager (%d of %d)", base, same, total);
        report(name, same == total, "differ", (double)(total - same), 0);
        /* 3 shapes at least (4 tokens below and past 256, 2 tokens), more
         * where the split count changes on the way */
        snprintf(name, sizeof name, "graphs %s: %d steps, %d recorded, %d replayed", base, STEPS,
                 (int)st.graph_records, (int)st.graph_replays);
        report(name,
               st.graph_records >= 3 && st.graph_records <= 6 &&
                   st.graph_records + st.graph_replays == STEPS && !st.graph_failures,
               "records", (double)st.graph_records, 3);
        if (st.graph_failures)
            printf("     graph recording failed: %s\n", st.graph_why);
        cuda_backend_stats(ee, &st);
        snprintf(name, sizeof name, "graphs %s: none with MFC_CUDA_GRAPHS=0", base);
        report(name, st.graph_records == 0 && st.graph_replays == 0, "records",
               (double)st.graph_records, 0);
    }
    free(lg), free(le), free(lp);
    backend_free(ge);
    backend_free(ee);
    backend_free(gp);
    model_close(m);
}

/* Token ids from tests/gpu/models' X.heldout beside X.gguf (a JSON array of
 * arrays of ids, one per text): into ids (cap in all), start[i] and len[i]
 * for each of at most max_seqs texts. The number of texts, 0 if none. */
static int read_ids(const char *path, int32_t *ids, int cap, int *start, int *len, int max_seqs)
{
    char hp[4096];
    size_t pl = strlen(path);
    if (pl < 5 || pl + 4 >= sizeof hp)
        return 0;
    snprintf(hp, sizeof hp, "%.*s.heldout", (int)(pl - 5), path);
    FILE *f = fopen(hp, "r");
    if (!f)
        return 0;
    int n = 0, seqs = 0, depth = 0, c;
    while ((c = fgetc(f)) != EOF) {
        if (c == '[' && ++depth == 2 && seqs < max_seqs)
            start[seqs] = n, len[seqs] = 0;
        else if (c == ']' && depth-- == 2 && seqs < max_seqs && len[seqs] > 0)
            seqs++;
        else if (c >= '0' && c <= '9' && depth == 2 && n < cap && seqs < max_seqs) {
            ungetc(c, f);
            if (fscanf(f, "%" SCNd32, &ids[n]) == 1)
                n++, len[seqs]++;
        }
    }
    fclose(f);
    return seqs;
}

static double log_softmax_at(const float *x, int64_t n, int32_t i)
{
    double mx = -INFINITY, sum = 0;
    for (int64_t j = 0; j < n; j++)
        mx = x[j] > mx ? x[j] : mx;
    for (int64_t j = 0; j < n; j++)
        sum += exp(x[j] - mx);
    return x[i] - mx - log(sum);
}

/* The 8-bit KV cache against F16, both on the GPU, over texts each fed
 * from position 0: the first half in one step (tiles), then a token a
 * step (per-token kernel). The perplexity of every token predicted after
 * that under each arena (the accuracy cost the 8-bit arena is judged by), the mean
 * KL(F16 || 8-bit) of the next-token distributions and the logits'
 * relative difference. The texts: X.heldout beside the model (the demo's
 * held-out sums), else three of random ids. */
static void test_kv8(const char *path)
{
    struct model *m;
    char name[200];
    const char *base = base_name(path);
    if (!(m = open_or_report(path, "kv8")))
        return;
    const int64_t V = m->hp.n_vocab;
    enum { CAP = 4096, MAXS = 64, MAXLEN = 256 };
    int32_t *ids = malloc(CAP * sizeof *ids);
    int start[MAXS], len[MAXS];
    int n_seq = read_ids(path, ids, CAP, start, len, MAXS), held = n_seq > 0;
    for (int q = 0; !held && q < 3; q++, n_seq++) {
        start[q] = q * 100, len[q] = 100;
        for (int i = 0; i < 100; i++)
            ids[q * 100 + i] = (int32_t)(next_u64() % (uint64_t)V);
    }
    const int nb = MAXLEN / KVB;
    int32_t table[MAXLEN / KVB];
    for (int b = 0; b < nb; b++)
        table[b] = nb - 1 - b;
    struct backend *be[2] = {NULL, NULL};
    float *lg[2] = {malloc(V * 4), malloc(V * 4)};
    for (int k = 0; k < 2; k++) {
        struct backend_config cfg = {.kv_type = k ? BACKEND_KV_Q8 : BACKEND_KV_F16};
        cfg.kv_bytes = (uint64_t)nb * backend_kv_block_bytes(m, cfg.kv_type);
        int32_t got;
        CK(backend_create(&cuda_backend_ops, m, &cfg, &be[k], &err));
        CK(backend_kv_alloc(be[k], &got, &err));
    }
    double nll[2] = {0, 0}, kl = 0, worst = 0;
    int count = 0;
    for (int q = 0; q < n_seq; q++) {
        const int32_t *t = ids + start[q];
        int n = len[q] < MAXLEN ? len[q] : MAXLEN, past = 0;
        while (past < n - 1) {
            int nn = past == 0 ? (n / 2 > 1 ? n / 2 : 1) : 1;
            struct batch_seq bs = {.tokens = t + past, .n_tokens = nn, .n_past = past,
                                   .block_table = table, .n_blocks = nb, .want_logits = 1};
            for (int k = 0; k < 2; k++) {
                struct batch b = {.n_seqs = 1, .seqs = &bs, .logits = lg[k]};
                CK(backend_step(be[k], &b, &err));
            }
            past += nn;
            double e = logits_err(lg[1], lg[0], V), lse[2];
            worst = e > worst ? e : worst;
            for (int k = 0; k < 2; k++) {
                lse[k] = lg[k][0] - log_softmax_at(lg[k], V, 0); /* log sum exp */
                nll[k] -= lg[k][t[past]] - lse[k];
            }
            for (int64_t j = 0; j < V; j++)
                kl += exp(lg[0][j] - lse[0]) * ((lg[0][j] - lse[0]) - (lg[1][j] - lse[1]));
            count++;
        }
    }
    double ppl0 = exp(nll[0] / count), ppl1 = exp(nll[1] / count), chg = ppl1 / ppl0 - 1;
    snprintf(name, sizeof name, "kv8 %s: perplexity of %d %s tokens, F16 KV %.4f, 8-bit %.4f", base,
             count, held ? "held-out" : "random", ppl0, ppl1);
    report(name, fabs(chg) < 1e-2, "rel change", chg, 1e-2);
    /* The distributions' distance is the gate (a wrong scale or a slot read
     * from the wrong block moves it by orders of magnitude); the logits'
     * worst relative difference is shown: 0.8-1.1% on the random toys, 5.7%
     * on the trained demo model, whose sharper logits move more in norm for
     * the same KL (7e-5). */
    snprintf(name, sizeof name, "kv8 %s: mean KL from F16 KV (worst logits rel err %.3f)", base,
             worst);
    report(name, kl / count < 1e-3, "KL", kl / count, 1e-3);
    backend_free(be[0]), backend_free(be[1]);
    free(lg[0]), free(lg[1]), free(ids);
    model_close(m);
}

/* LoRA on the GPU against the CPU: the model at path with the adapter at
 * lpath (tests/gpu/models writes X-lora.gguf beside X.gguf). Two sequences
 * with the same tokens, one with the adapter (user scale 0.8), one
 * without: a 37-token prefill (GEMM path) and 8 decode steps of 1 token
 * each. Each GPU row matches the CPU's (the model's own bound), and the
 * adapter moves the logits on both by more than 5x that difference. */
static void test_lora(const char *path, const char *lpath, double bound)
{
    struct model *m;
    struct lora *l;
    int32_t id;
    char name[200];
    const char *base = base_name(lpath);
    if (model_open(path, &m, &err) || lora_open(m, lpath, &l, &err) ||
        model_add_lora(m, l, &id, &err)) {
        printf("FAIL lora %s: %s\n", base, err.msg);
        failures++;
        return;
    }
    const int64_t V = m->hp.n_vocab;
    struct side cpu, gpu;
    if (open_sides(m, 24, base, &cpu, &gpu)) {
        model_close(m);
        return;
    }
    /* the adapter on sequences 0 (0.8) and 2 (0.5), one group of rows that
     * are not consecutive; sequence 1 the same tokens without it */
    int32_t table[3][8], toks[48];
    for (int b = 0; b < 8; b++)
        table[0][b] = b, table[1][b] = 8 + b, table[2][b] = 16 + b;
    for (int i = 0; i < 48; i++)
        toks[i] = (int32_t)(next_u64() % (uint64_t)V);
    float *lc = malloc(3 * V * 4), *lg = malloc(3 * V * 4);
    double worst = 0, moved_cpu = 1e30, moved_gpu = 1e30;
    int npast = 0;
    for (int st = 0; st < 9; st++) {
        int nn = st == 0 ? 37 : 1;
        struct batch_seq bs[3];
        for (int s = 0; s < 3; s++)
            bs[s] = (struct batch_seq){.tokens = toks + npast, .n_tokens = nn, .n_past = npast,
                                       .block_table = table[s], .n_blocks = 8, .want_logits = 1};
        bs[0].lora.n = bs[2].lora.n = 1;
        bs[0].lora.ids[0] = bs[2].lora.ids[0] = id;
        bs[0].lora.scales[0] = lora_scale(l, 0.8f);
        bs[2].lora.scales[0] = lora_scale(l, 0.5f);
        struct batch bc = {.n_seqs = 3, .seqs = bs, .logits = lc};
        struct batch bg = {.n_seqs = 3, .seqs = bs, .logits = lg};
        memset(lg, 0xFF, 3 * V * 4);
        CK(backend_step(cpu.be, &bc, &err));
        if (backend_step(gpu.be, &bg, &err)) {
            printf("FAIL lora %s: cuda step: %s\n", base, err.msg);
            failures++;
            break;
        }
        for (int s = 0; s < 3; s++) {
            double e = logits_err(lg + s * V, lc + s * V, V);
            worst = e > worst ? e : worst;
        }
        double mc = logits_err(lc, lc + V, V), mg = logits_err(lg, lg + V, V);
        moved_cpu = mc < moved_cpu ? mc : moved_cpu;
        moved_gpu = mg < moved_gpu ? mg : moved_gpu;
        npast += nn;
    }
    snprintf(name, sizeof name, "lora %.120s logits vs CPU (0.8, none, 0.5)", base);
    report(name, worst < bound, "rel err", worst, bound);
    /* the adapter's effect dwarfs the GPU/CPU difference (measured: a least
     * change of 0.16-0.66 against differences of 4e-4-2e-2) */
    snprintf(name, sizeof name, "lora %.120s moves the logits (CPU %.3g, GPU)", base, moved_cpu);
    report(name, moved_gpu > 5 * worst && moved_cpu > 5 * worst, "least rel change", moved_gpu,
           5 * worst);
    free(lc), free(lg);
    backend_free(gpu.be);
    backend_free(cpu.be);
    model_close(m);
}

/* X.gguf's adapter, X-lora.gguf, when tests/gpu/models wrote one. */
static int lora_beside(const char *path, char *out, size_t cap)
{
    size_t n = strlen(path);
    if (n < 5 || strcmp(path + n - 5, ".gguf") || (n > 10 && !strcmp(path + n - 10, "-lora.gguf")))
        return 0;
    snprintf(out, cap, "%.*s-lora.gguf", (int)(n - 5), path);
    FILE *f = fopen(out, "rb");
    if (f)
        fclose(f);
    return f != NULL;
}

/* The same steps on two backends: ns sequences (nb blocks each, tables
 * interleaved), a prompt of `prompt` tokens each, then `steps` decode
 * steps, the last ones (from tail_from) with only the first tail_ns
 * sequences. After every step, the logits rows of both: the worst relative
 * difference, whether every bit matched, and greedy tokens alike, or else
 * tied (a's margin between the two choices within the row's largest
 * difference, as the CPU comparison counts them; printed). */
struct twin {
    int ns, nb, prompt, steps, tail_from, tail_ns;
    double worst;
    int bitwise, same, ties, total;
};

static int twin_run(struct backend *a, struct backend *b, const struct model *m, const char *what,
                    struct twin *tw)
{
    const int64_t V = m->hp.n_vocab;
    const int len = tw->prompt + tw->steps;
    int32_t *table = malloc((size_t)tw->ns * tw->nb * 4), *toks = malloc((size_t)tw->ns * len * 4),
            *npast = calloc((size_t)tw->ns, 4);
    float *la = malloc((size_t)tw->ns * V * 4), *lb = malloc((size_t)tw->ns * V * 4);
    struct batch_seq *bs = malloc((size_t)tw->ns * sizeof *bs);
    int rc = a && b && table && toks && npast && la && lb && bs ? 0 : -1;
    tw->worst = 0, tw->bitwise = 1, tw->same = tw->ties = tw->total = 0;
    for (int i = 0; i < tw->ns * tw->nb; i++)
        table[i] = (i % tw->nb) * tw->ns + i / tw->nb;
    for (int i = 0; i < tw->ns * len; i++)
        toks[i] = (int32_t)(next_u64() % (uint64_t)V);
    for (int st = 0; rc == 0 && st <= tw->steps; st++) {
        const int ns = st >= tw->tail_from ? tw->tail_ns : tw->ns;
        for (int i = 0; i < ns; i++)
            bs[i] = (struct batch_seq){.tokens = toks + (size_t)i * len + npast[i],
                                       .n_tokens = st == 0 ? tw->prompt : 1,
                                       .n_past = npast[i],
                                       .block_table = table + (size_t)i * tw->nb,
                                       .n_blocks = tw->nb,
                                       .want_logits = 1};
        struct batch ba = {.n_seqs = ns, .seqs = bs, .logits = la};
        struct batch bb = {.n_seqs = ns, .seqs = bs, .logits = lb};
        memset(la, 0xFF, (size_t)ns * V * 4);
        if (backend_step(a, &ba, &err) || backend_step(b, &bb, &err)) {
            printf("FAIL %s: step %d: %s\n", what, st, err.msg);
            failures++;
            rc = -1;
            break;
        }
        double e = logits_err(la, lb, (size_t)ns * V);
        tw->worst = e > tw->worst ? e : tw->worst;
        tw->bitwise &= memcmp(la, lb, (size_t)ns * V * 4) == 0;
        for (int r = 0; r < ns; r++, tw->total++) {
            const float *ra = la + r * V, *rb = lb + r * V;
            const int32_t ta = argmax_row(ra, V), tb = argmax_row(rb, V);
            tw->same += ta == tb;
            if (ta == tb)
                continue;
            double dmax = 0, gap = (double)ra[ta] - ra[tb];
            for (int64_t k = 0; k < V; k++)
                dmax = fmax(dmax, fabs((double)ra[k] - rb[k]));
            tw->ties += gap <= dmax;
            printf("     step %d seq %d: %d (%.6g) over %d (%.6g), the other %.6g vs %.6g: the "
                   "margin %.2g is %s the row's largest difference %.2g\n",
                   st, r, ta, ra[ta], tb, ra[tb], rb[ta], rb[tb], gap,
                   gap <= dmax ? "within" : "PAST", dmax);
        }
        for (int i = 0; i < ns; i++)
            npast[i] += bs[i].n_tokens;
    }
    free(table), free(toks), free(npast), free(la), free(lb), free(bs);
    return rc;
}

/* Two backends of m with n_blocks KV blocks: *on with the switch `var` at
 * 1 and steps recorded as graphs, *off with it at 0 and eager steps. */
static void open_switched(const struct model *m, int32_t n_blocks, const char *var,
                          struct backend **on, struct backend **off)
{
    setenv(var, "1", 1);
    *on = open_gpu(m, n_blocks, "1", "1");
    setenv(var, "0", 1);
    *off = open_gpu(m, n_blocks, "0", "1");
    unsetenv(var);
}

/* A twin run's two checks: logits within the model's bound ("WHAT BASE
 * logits LOGITS"), greedy tokens alike or tied ("... greedy tokens TOKENS"). */
static void twin_report(const char *what, const char *base, const char *logits, const char *tokens,
                        const struct model *m, const struct twin *tw)
{
    char name[200];
    snprintf(name, sizeof name, "%s %s logits %s", what, base, logits);
    report(name, tw->worst < model_bound(m), "rel err", tw->worst, model_bound(m));
    snprintf(name, sizeof name, "%s %s greedy tokens %s (%d of %d, %d tie(s))", what, base, tokens,
             tw->same, tw->total, tw->ties);
    report(name, tw->same + tw->ties == tw->total, "differ",
           (double)(tw->total - tw->same - tw->ties), 0);
}

/* Past CUDA_PLAN_DECODE_TILES decode tokens a step, each takes a tile
 * of the tensor-core kernel (k_flash) instead of the per-token kernel: 40
 * sequences from 20-token prompts decode 4 steps as one recorded graph (the
 * last step's 37 pad to 40, the padding in tiles too), against the same steps
 * with MFC_CUDA_DECODE_TILES=0 and no graphs. */
static void test_decode_tiles(const char *path)
{
    struct model *m;
    char name[160];
    const char *base = base_name(path);
    if (!(m = open_or_report(path, "decode tiles")))
        return;
    struct backend *tb, *ob;
    open_switched(m, 40 * 3 + 1, "MFC_CUDA_DECODE_TILES", &tb, &ob);
    struct twin tw = {.ns = 40, .nb = 3, .prompt = 20, .steps = 4, .tail_from = 4, .tail_ns = 37};
    if (twin_run(tb, ob, m, "decode tiles", &tw) == 0) {
        struct cuda_upload_stats st;
        cuda_backend_stats(tb, &st);
        twin_report("decode tiles", base, "= per-token kernel", "= per-token", m, &tw);
        snprintf(name, sizeof name, "decode tiles %s: steps recorded as graphs", base);
        report(name,
               st.graph_records == 1 && st.graph_replays == (uint64_t)tw.steps - 1 &&
                   !st.graph_failures,
               "records", (double)st.graph_records, 1);
    }
    backend_free(tb);
    backend_free(ob);
    model_close(m);
}

/* MFC_CUDA_QGEMM_SK=1 (qgemm.cu's products stream-K where its plan says
 * so, and those of one input that it takes alike in one launch) against
 * the clustered grid: 12 sequences from 20-token prompts decode 6 steps
 * (12 then 10 tokens: qgemm.cu's Q4_K and Q6_K steps), recorded as graphs
 * against eager steps; logits within the model's bound, greedy tokens alike
 * or tied. */
static void test_qgemm_sk_model(const char *path)
{
    struct model *m;
    const char *base = base_name(path);
    if (!(m = open_or_report(path, "qgemm stream-K")))
        return;
    struct backend *sb, *cb;
    open_switched(m, 12 * 3 + 1, "MFC_CUDA_QGEMM_SK", &sb, &cb);
    struct twin tw = {.ns = 12, .nb = 3, .prompt = 20, .steps = 6, .tail_from = 4, .tail_ns = 10};
    if (twin_run(sb, cb, m, "qgemm stream-K", &tw) == 0)
        twin_report("qgemm stream-K", base, "~ clustered", "= clustered", m, &tw);
    backend_free(sb);
    backend_free(cb);
    model_close(m);
}

/* MFC_CUDA_BF16_WEIGHTS=1 (the quantized matrices dequantized to bf16 once)
 * against dequantizing them each product, with Q4_K on the tensor cores
 * from the same token count (MFC_CUDA_MMQ=0) and the toy matrices within
 * one dequantized chunk, qgemm.cu off (MFC_CUDA_QGEMM_MAX=0): the same
 * cuBLAS calls on the same bf16 values, so the same bits, in prompts,
 * batched decode (6 tokens: cuBLAS) and 2-token steps (the GEMV, on the
 * quantized bytes); with qgemm.cu on (6-token steps of Q4_K/Q6_K) within
 * the model's bound. The copies' size: 2 bytes a weight of every quantized
 * matrix, none for F16/BF16/F32 models. */
static void test_bf16_weights(const char *path)
{
    struct model *m;
    char name[160];
    const char *base = base_name(path);
    if (!(m = open_or_report(path, "bf16 weights")))
        return;
    setenv("MFC_CUDA_MMQ", "0", 1);
    setenv("MFC_CUDA_BF16_WEIGHTS", "1", 1);
    struct backend *cb = open_gpu(m, 6 * 3 + 1, "0", "1");
    setenv("MFC_CUDA_BF16_WEIGHTS", "0", 1);
    struct backend *qb = open_gpu(m, 6 * 3 + 1, "0", "1"); /* qgemm.cu in decode steps */
    setenv("MFC_CUDA_QGEMM_MAX", "0", 1); /* cuBLAS on rows dequantized per product */
    struct backend *db = open_gpu(m, 6 * 3 + 1, "0", "1");
    unsetenv("MFC_CUDA_QGEMM_MAX");
    unsetenv("MFC_CUDA_BF16_WEIGHTS");
    unsetenv("MFC_CUDA_MMQ");
    uint64_t want = 0;
    for (int32_t l = 0; l <= m->hp.n_layer; l++)
        for (int w = 0; w < (l < m->hp.n_layer ? MODEL_W_PER_LAYER : 1); w++) {
            const struct model_weight *mw = l < m->hp.n_layer ? &m->layers[l].w[w] : &m->output;
            if (mw->type != GGML_TYPE_F32 && mw->type != GGML_TYPE_F16 &&
                mw->type != GGML_TYPE_BF16)
                want += ((uint64_t)mw->ne0 * (uint64_t)mw->ne1 * 2 + CUDA_PLAN_ALIGN - 1) /
                        CUDA_PLAN_ALIGN * CUDA_PLAN_ALIGN;
        }
    struct twin tw = {.ns = 6, .nb = 3, .prompt = 24, .steps = 5, .tail_from = 4, .tail_ns = 2};
    if (twin_run(cb, db, m, "bf16 weights", &tw) == 0) {
        struct cuda_upload_stats st;
        cuda_backend_stats(cb, &st);
        snprintf(name, sizeof name, "bf16 weights %s logits = dequantized per product, bit for bit",
                 base);
        report(name, tw.bitwise, "rel err", tw.worst, 0);
        snprintf(name, sizeof name, "bf16 weights %s: %.1f MB of copies", base,
                 st.bf16_bytes / 1e6);
        report(name, st.bf16_bytes == want, "bytes", (double)st.bf16_bytes, (double)want);
    }
    /* qgemm.cu multiplies by the same bf16 weights (Q4_K in bf16 arithmetic:
     * nearly the same), its fp32 sums in another order: within the model's
     * bound against the CPU */
    if (twin_run(cb, qb, m, "bf16 weights", &tw) == 0) {
        snprintf(name, sizeof name, "bf16 weights %s logits ~ qgemm.cu's", base);
        report(name, tw.worst < model_bound(m), "rel err", tw.worst, model_bound(m));
    }
    backend_free(cb);
    backend_free(qb);
    backend_free(db);
    model_close(m);
}

int main(int argc, char **argv)
{
    int n = 0, matched_q = 0;
    struct mfk_device_info info;
    if (mfk_device_count(&n, &err) || n == 0) {
        fprintf(stderr, "test_cuda: no CUDA device (%s)\n", err.msg);
        return 77;
    }
    CK(mfk_device_query(0, &info, &err));
    n_sms = info.sm_count;
    printf("device: %s sm_%d%d, %d SMs, %.1f GiB\n", info.name, info.cc_major, info.cc_minor,
           info.sm_count, info.total_bytes / 1073741824.0);
    CK(mfk_ctx_new(0, &ctx, &err));
    /* the kernels run with programmatic dependent launches, as the backend
     * runs them, unless MFC_CUDA_PDL=0 */
    const char *pdl = getenv("MFC_CUDA_PDL");
    CK(mfk_ctx_pdl(ctx, !(pdl && strcmp(pdl, "0") == 0), &err));
    /* --only PARTS (comma-separated): types (the kernel sweep over weight
     * types), misc (norms, 8-bit copies, argmax, GEMV refusals and groups),
     * att-f16 and att-q8 (the attention kernels on each arena, 200-token
     * contexts), long (a 12,001-token context on both), models (the model
     * files), moe (the mixture-of-experts kernels: routing, grouped products
     * of every type, combine). Compute-sanitizer's racecheck runs the parts as separate
     * processes: the whole sweep outlasts a device lease under it.
     * --attention: att-f16,att-q8,models. */
    const char *only = NULL;
    if (argc > 1 && strcmp(argv[1], "--attention") == 0)
        only = "att-f16,att-q8,models", argc--, argv++;
    else if (argc > 2 && strcmp(argv[1], "--only") == 0)
        only = argv[2], argc -= 2, argv += 2;
    static const char *const parts[] = {"types",  "misc",   "att-f16", "att-q8",
                                        "long",   "models", "moe"};
    enum { N_PARTS = sizeof parts / sizeof parts[0] };
    int want[N_PARTS];
    for (int i = 0; i < N_PARTS; i++)
        want[i] = !only;
    for (const char *o = only; o && *o;) {
        size_t len = strcspn(o, ",");
        int hit = 0;
        for (int i = 0; i < N_PARTS; i++)
            if (strlen(parts[i]) == len && strncmp(o, parts[i], len) == 0)
                want[i] = hit = 1;
        if (!hit) {
            fprintf(stderr,
                    "test_cuda: --only %.*s: no such part (types, misc, att-f16, att-q8, long, "
                    "models, moe)\n",
                    (int)len, o);
            mfk_ctx_free(ctx);
            return 2;
        }
        o += len + (o[len] == ',');
    }
    /* --qgemm NAME: qgemm.cu's checks of that type alone */
    if (argc > 2 && strcmp(argv[1], "--qgemm") == 0) {
        for (size_t i = 0; i < 2; i++) {
            const enum ggml_type qt = i ? GGML_TYPE_Q6_K : GGML_TYPE_Q4_K;
            if (strcasecmp(argv[2], ggml_type_name(qt)) == 0)
                test_qgemm(qt), matched_q = 1;
        }
        mfk_ctx_free(ctx);
        if (!matched_q) {
            fprintf(stderr, "test_cuda: --qgemm %s: Q4_K or Q6_K\n", argv[2]);
            return 2;
        }
        printf("%s: %d failure(s)\n", failures ? "FAIL" : "PASS", failures);
        return failures ? 1 : 0;
    }
    /* --type NAME: that weight type's kernels only (sanitizing one kernel,
     * e.g. mmq.cu's tiles under racecheck: --type q4_K) */
    const char *only_type = NULL;
    if (argc > 2 && strcmp(argv[1], "--type") == 0)
        only_type = argv[2], argc -= 2, argv += 2;
    static const enum ggml_type types[] = {GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16,
                                           GGML_TYPE_Q8_0, GGML_TYPE_Q4_0, GGML_TYPE_Q4_K,
                                           GGML_TYPE_Q5_K, GGML_TYPE_Q6_K};
    int matched = 0;
    for (size_t i = 0; (want[0] || only_type) && i < sizeof types / sizeof types[0]; i++)
        if (!only_type || strcasecmp(only_type, ggml_type_name(types[i])) == 0)
            test_type(types[i]), matched++;
    if (only_type && !matched) {
        fprintf(stderr, "test_cuda: --type %s: no such weight type among the kernels'\n",
                only_type);
        mfk_ctx_free(ctx);
        return 2;
    }
    if (only_type) {
        mfk_ctx_free(ctx);
        printf("%s: %d failure(s)\n", failures ? "FAIL" : "PASS", failures);
        return failures ? 1 : 0;
    }
    if (want[1]) {
        test_norm_swiglu(1000);
        test_norm_swiglu(20000);
        test_q8_copy(4096);
        test_q8_copy(20480);
    }
    for (int q8 = 0; q8 < 2; q8++) { /* the F16 arena, then the 8-bit one */
        if (want[2 + q8]) {
            test_attention(8, 2, 64, 64, 0, q8);
            test_attention(32, 8, 128, 128, 0, q8);
            test_attention(6, 6, 64, 32, 0, q8);
            test_attention(16, 1, 256, 64, 0, q8);  /* MQA, the widest head the kernel takes */
            test_attention(16, 1, 128, 128, 0, q8); /* 16 query heads a KV head: warps go twice */
            test_attention(8, 8, 80, 80, 0, q8);    /* phi-2's heads: tiles only */
        }
        if (want[4]) /* past the per-token kernel's shared memory */
            test_attention(32, 8, 128, 128, 12000, q8);
    }
    if (want[6]) {
        static const struct {
            int32_t T, ne, k, ties;
        } routes[] = {{1, 8, 2, 0},    {1, 128, 8, 1},    {5, 4, 4, 1},     {3, 60, 7, 0},
                      {37, 128, 8, 0}, {37, 128, 8, 1},   {300, 8, 2, 0},   {64, 512, 8, 1},
                      {3, 512, 512, 1}, {2000, 128, 8, 0}, {2000, 512, 8, 1}};
        for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++)
            test_moe_route(routes[i].T, routes[i].ne, routes[i].k, routes[i].ties);
        for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
            test_moe_gemm(types[i]);
        test_moe_combine();
        test_moe_refusals();
    }
    if (want[1]) {
        test_argmax();
        test_gemv_refusals();
        test_gemv_groups();
        test_gemv_ring();
        test_gemv_split();
    }
    for (int i = 1; want[5] && i < argc; i++) {
        char lpath[4096];
        size_t len = strlen(argv[i]);
        if (len > 10 && !strcmp(argv[i] + len - 10, "-lora.gguf"))
            continue; /* an adapter: tested with its model */
        test_model(argv[i]);
        test_graphs(argv[i]);
        test_decode_tiles(argv[i]);
        test_bf16_weights(argv[i]);
        test_qgemm_sk_model(argv[i]);
        if (strstr(argv[i], "-f16.gguf"))
            test_kv8(argv[i]);
        if (lora_beside(argv[i], lpath, sizeof lpath))
            test_lora(argv[i], lpath, strstr(argv[i], "-f16") ? 1e-3 : 6e-2);
    }
    mfk_ctx_free(ctx);
    printf("%s: %d failure(s)\n", failures ? "FAIL" : "PASS", failures);
    return failures ? 1 : 0;
}
