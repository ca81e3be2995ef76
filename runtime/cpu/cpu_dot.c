/*
 * cpu_dot.c: the portable dot kernels, the activation quantizers and the
 * choice of SIMD table.
 *
 * Every weight type has a plain-C dot product against its activation format
 * (cpu_int.h); the AVX2 and AVX-512 files must agree with these within float
 * rounding (tests/unit/test_model.c checks every type, odd block counts
 * included). The integer part of each block's dot product is exact in every
 * implementation; only the order in which block results are summed in
 * float differs between tables.
 *
 * No state: cpu_dot_best() asks cpuid each time (a few nanoseconds; the
 * backend calls it once at create) and returns one of the const tables.
 */
#include "runtime/cpu/cpu_int.h"

#include <math.h>
#include <string.h>

#include "common/cpu.h"
#include "common/quant.h"
#include "common/quant_int.h"

/* ------------------------------------------------------------------------
 * Activation quantizers
 * ---------------------------------------------------------------------- */

enum cpu_act cpu_dot_act(enum ggml_type wt)
{
    switch (wt) {
    case GGML_TYPE_F16:
        return CPU_ACT_F16;
    case GGML_TYPE_BF16:
        return CPU_ACT_BF16;
    case GGML_TYPE_Q4_0:
    case GGML_TYPE_Q5_0:
    case GGML_TYPE_Q5_1:
    case GGML_TYPE_Q8_0:
    case GGML_TYPE_MXFP4:
        return CPU_ACT_Q8_0;
    case GGML_TYPE_Q4_K:
    case GGML_TYPE_Q5_K:
    case GGML_TYPE_Q6_K:
        return CPU_ACT_Q8_K;
    default:
        return CPU_ACT_F32;
    }
}

size_t cpu_dot_act_bytes(enum cpu_act a, int64_t n)
{
    switch (a) {
    case CPU_ACT_Q8_0:
        return (size_t)(n / CPU_Q8_0_N) * sizeof(struct cpu_q8_0);
    case CPU_ACT_Q8_K:
        return (size_t)(n / CPU_Q8_K_N) * sizeof(struct cpu_q8_K);
    default:
        return (size_t)n * sizeof(float);
    }
}

void cpu_dot_act_row(const struct cpu_dot *d, enum cpu_act a, const float *x, void *y,
                     int64_t n)
{
    float *f = y;

    switch (a) {
    case CPU_ACT_Q8_0:
        cpu_dot_quantize_q8_0(x, y, n);
        break;
    case CPU_ACT_Q8_K:
        cpu_dot_quantize_q8_K(x, y, n);
        break;
    case CPU_ACT_F16:
        memcpy(f, x, (size_t)n * sizeof *f);
        d->round_f16(f, n);
        break;
    case CPU_ACT_BF16:
        for (int64_t i = 0; i < n; i++)
            f[i] = quant_bf16_to_f32(quant_f32_to_bf16(x[i]));
        break;
    default:
        memcpy(f, x, (size_t)n * sizeof *f);
        break;
    }
}

/* Round to nearest, ties to even, for |f| < 2^22: adding 1.5 * 2^23 leaves
 * the rounded integer in the low mantissa bits (ggml's nearest_int; no libm
 * call, unlike nearbyintf at baseline x86-64). */
static inline int nearest_int(float f)
{
    float v = f + 12582912.0f;
    int32_t i;

    memcpy(&i, &v, sizeof i);
    return (i & 0x007fffff) - 0x00400000;
}

/* ggml's quantize_row_q8_0 (its AVX2 path): codes round(x * 127 / amax) to
 * nearest even, and the scale amax / 127 rounded to fp16 as ggml stores it,
 * so the integer codes and the scale are exactly llama.cpp's. */
void cpu_dot_quantize_q8_0(const float *x, struct cpu_q8_0 *y, int64_t n)
{
    for (int64_t i = 0; i < n / CPU_Q8_0_N; i++, x += CPU_Q8_0_N) {
        float amax = 0.0f, id;
        int32_t s = 0;

        for (int j = 0; j < CPU_Q8_0_N; j++)
            amax = fabsf(x[j]) > amax ? fabsf(x[j]) : amax;
        y[i].d = quant_f16_to_f32(quant_f32_to_f16(amax / 127.0f));
        id = amax != 0.0f ? 127.0f / amax : 0.0f;
        for (int j = 0; j < CPU_Q8_0_N; j++) {
            int v = nearest_int(x[j] * id);
            y[i].qs[j] = (int8_t)v;
            s += v;
        }
        y[i].s = s;
    }
}

/* ggml's quantize_row_q8_K_ref: the scale comes from the element of largest
 * magnitude with its sign, so that element maps to exactly -127. */
void cpu_dot_quantize_q8_K(const float *x, struct cpu_q8_K *y, int64_t n)
{
    for (int64_t i = 0; i < n / CPU_Q8_K_N; i++, x += CPU_Q8_K_N) {
        float amax = 0.0f, max = 0.0f, iscale;

        for (int j = 0; j < CPU_Q8_K_N; j++)
            if (fabsf(x[j]) > amax) {
                amax = fabsf(x[j]);
                max = x[j];
            }
        y[i].pad = 0;
        if (amax == 0.0f) {
            y[i].d = 0.0f;
            memset(y[i].qs, 0, sizeof y[i].qs);
            memset(y[i].bsums, 0, sizeof y[i].bsums);
            memset(y[i].bsums32, 0, sizeof y[i].bsums32);
            continue;
        }
        iscale = -127.0f / max;
        for (int j = 0; j < CPU_Q8_K_N; j++) {
            int v = nearest_int(iscale * x[j]);
            y[i].qs[j] = (int8_t)(v > 127 ? 127 : v);
        }
        for (int j = 0; j < CPU_Q8_K_N / 16; j++) {
            int sum = 0;
            for (int k = 0; k < 16; k++)
                sum += y[i].qs[j * 16 + k];
            y[i].bsums[j] = (int16_t)sum;
        }
        for (int j = 0; j < CPU_Q8_K_N / 32; j++)
            y[i].bsums32[j] = (int16_t)(y[i].bsums[2 * j] + y[i].bsums[2 * j + 1]);
        y[i].d = 1.0f / iscale;
    }
}

/* ------------------------------------------------------------------------
 * Scalar dot products, one weight row against one activation row
 * ---------------------------------------------------------------------- */

/* Element i of a float row: kind 0 F32, 1 F16, 2 BF16 (any alignment). */
static float elem(int kind, const void *row, int64_t i)
{
    const uint8_t *p = row;
    float f;

    if (kind == 1)
        return quant_f16_to_f32(quant_rd16(p + 2 * i));
    if (kind == 2)
        return quant_bf16_to_f32(quant_rd16(p + 2 * i));
    memcpy(&f, p + 4 * i, 4);
    return f;
}

static float dot_float(int kind, int64_t n, const void *w, const void *x)
{
    const float *a = x;
    float sum = 0.0f;

    for (int64_t i = 0; i < n; i++)
        sum += elem(kind, w, i) * a[i];
    return sum;
}

static float dot_f32(int64_t n, const void *w, const void *x)
{
    return dot_float(0, n, w, x);
}

static float dot_f16(int64_t n, const void *w, const void *x)
{
    return dot_float(1, n, w, x);
}

static float dot_bf16(int64_t n, const void *w, const void *x)
{
    return dot_float(2, n, w, x);
}

static float dot_q4_0(int64_t n, const void *w, const void *x)
{
    const struct quant_blk_q4_0 *b = w;
    const struct cpu_q8_0 *y = x;
    float sum = 0.0f;

    for (int64_t i = 0; i < n / 32; i++) {
        int32_t s = 0;
        for (int j = 0; j < 16; j++)
            s += ((b[i].qs[j] & 15) - 8) * y[i].qs[j] + ((b[i].qs[j] >> 4) - 8) * y[i].qs[j + 16];
        sum += (float)s * (quant_rdh(b[i].d) * y[i].d);
    }
    return sum;
}

static float dot_q8_0(int64_t n, const void *w, const void *x)
{
    const struct quant_blk_q8_0 *b = w;
    const struct cpu_q8_0 *y = x;
    float sum = 0.0f;

    for (int64_t i = 0; i < n / 32; i++) {
        int32_t s = 0;
        for (int j = 0; j < 32; j++)
            s += (int8_t)b[i].qs[j] * y[i].qs[j];
        sum += (float)s * (quant_rdh(b[i].d) * y[i].d);
    }
    return sum;
}

/* Q5_0 (q51 == 0) and Q5_1 (q51 == 1), as ggml_vec_dot_q5_0_q8_0 and
 * ggml_vec_dot_q5_1_q8_1 compute them: element j of a block is the low
 * nibble of qs[j] (high nibble of qs[j - 16]) with bit j of qh as its
 * fifth bit; Q5_0 codes stand for q - 16 and the block's value is
 * d_w * d_x * sum, Q5_1 codes are unsigned and add m * s, where s is
 * llama.cpp's Q8_1 block sum: fp16(d_x * sum of the activation codes).
 * (ggml forms that product with the unrounded activation scale; the
 * cpu_q8_0 block keeps only the fp16-rounded one, so s may differ from
 * llama.cpp's in its last fp16 bit.) */
static float dot_q5_01(int q51, int64_t n, const void *w, const void *x)
{
    const size_t bsz = q51 ? sizeof(struct quant_blk_q5_1) : sizeof(struct quant_blk_q5_0);
    const struct cpu_q8_0 *y = x;
    float sum = 0.0f;

    for (int64_t i = 0; i < n / 32; i++) {
        const uint8_t *blk = (const uint8_t *)w + (size_t)i * bsz;
        const struct quant_blk_q5_0 *b0 = (const void *)blk;
        const struct quant_blk_q5_1 *b1 = (const void *)blk;
        const uint8_t *qhb = q51 ? b1->qh : b0->qh, *qs = q51 ? b1->qs : b0->qs;
        const int off = q51 ? 0 : 16;
        uint32_t qh = (uint32_t)qhb[0] | (uint32_t)qhb[1] << 8 | (uint32_t)qhb[2] << 16 |
                      (uint32_t)qhb[3] << 24;
        int32_t s0 = 0, s1 = 0;

        for (int j = 0; j < 16; j++) {
            int x0 = (int)((qs[j] & 15) | ((qh >> j) & 1) << 4) - off;
            int x1 = (int)((qs[j] >> 4) | ((qh >> (j + 16)) & 1) << 4) - off;
            s0 += x0 * y[i].qs[j];
            s1 += x1 * y[i].qs[j + 16];
        }
        if (q51)
            sum += (quant_rdh(b1->d) * y[i].d) * (float)(s0 + s1) +
                   quant_rdh(b1->m) *
                       quant_f16_to_f32(quant_f32_to_f16(y[i].d * (float)y[i].s));
        else
            sum += (quant_rdh(b0->d) * y[i].d) * (float)(s0 + s1);
    }
    return sum;
}

static float dot_q5_0(int64_t n, const void *w, const void *x)
{
    return dot_q5_01(0, n, w, x);
}

static float dot_q5_1(int64_t n, const void *w, const void *x)
{
    return dot_q5_01(1, n, w, x);
}

/* MXFP4: each block's codes stand for twice their E2M1 value
 * (quant_mxfp4_values), the block scale is half the E8M0 exponent's, so the
 * integer sum times both scales is the dot product (ggml_vec_dot_mxfp4_q8_0:
 * the d_x * e8m0_half product, then the sum of the two half-block sums). */
static float dot_mxfp4(int64_t n, const void *w, const void *x)
{
    const struct quant_blk_mxfp4 *b = w;
    const struct cpu_q8_0 *y = x;
    float sum = 0.0f;

    for (int64_t i = 0; i < n / 32; i++) {
        int32_t s0 = 0, s1 = 0;
        for (int j = 0; j < 16; j++) {
            s0 += y[i].qs[j] * quant_mxfp4_values[b[i].qs[j] & 15];
            s1 += y[i].qs[j + 16] * quant_mxfp4_values[b[i].qs[j] >> 4];
        }
        sum += (y[i].d * quant_e8m0_half(b[i].e)) * (float)(s0 + s1);
    }
    return sum;
}

/* Q4_K (q5 == 0) and Q5_K (q5 == 1): sub-block j of 32 has a 6-bit scale
 * and min; the 4 (5) bit codes are unsigned, so x ~= d*sc*q - dmin*m and
 * the min term only needs the activation's block sums. The two block types
 * share d, dmin, scales and qs; Q5_K adds qh (fifth bit j of qh[l]). */
static float dot_q45_K(int q5, int64_t n, const void *w, const void *x)
{
    const size_t bsz = q5 ? sizeof(struct quant_blk_q5_K) : sizeof(struct quant_blk_q4_K);
    const struct cpu_q8_K *y = x;
    float sum = 0.0f;

    for (int64_t i = 0; i < n / QK_K; i++) {
        const struct quant_blk_q5_K *b5 = (const void *)((const uint8_t *)w + (size_t)i * bsz);
        const struct quant_blk_q4_K *b4 = (const void *)b5;
        const uint8_t *qs = q5 ? b5->qs : b4->qs;
        int32_t isum = 0, msum = 0;
        for (int j = 0; j < 8; j++) {
            const uint8_t *q = qs + 32 * (j / 2);
            const int8_t *a = y[i].qs + 32 * j;
            int shift = 4 * (j % 2), s = 0;
            uint8_t sc, m;

            quant_scale_min_k4(j, b4->scales, &sc, &m);
            for (int l = 0; l < 32; l++)
                s += (((q[l] >> shift) & 15) | (q5 ? ((b5->qh[l] >> j) & 1) << 4 : 0)) * a[l];
            isum += sc * s;
            msum += m * y[i].bsums32[j];
        }
        sum += y[i].d * quant_rdh(b4->d) * (float)isum - y[i].d * quant_rdh(b4->dmin) * (float)msum;
    }
    return sum;
}

static float dot_q4_K(int64_t n, const void *w, const void *x)
{
    return dot_q45_K(0, n, w, x);
}

static float dot_q5_K(int64_t n, const void *w, const void *x)
{
    return dot_q45_K(1, n, w, x);
}

/* Q6_K: 16 signed scales per block of 256; codes 0..63 stand for q - 32.
 * Element e of a 128-half h lives in ql/qh as quant_ref.c's deq_q6_K says. */
static float dot_q6_K(int64_t n, const void *w, const void *x)
{
    const struct quant_blk_q6_K *b = w;
    const struct cpu_q8_K *y = x;
    float sum = 0.0f;

    for (int64_t i = 0; i < n / QK_K; i++) {
        int32_t isum = 0;
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = b[i].ql + 64 * h, *qh = b[i].qh + 32 * h;
            const int8_t *sc = b[i].scales + 8 * h, *a = y[i].qs + 128 * h;
            int32_t s[8] = {0};

            for (int l = 0; l < 32; l++) {
                int is = l / 16;
                s[is + 0] += (((ql[l] & 15) | ((qh[l] & 3) << 4)) - 32) * a[l];
                s[is + 2] += (((ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4)) - 32) * a[l + 32];
                s[is + 4] += (((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32) * a[l + 64];
                s[is + 6] += (((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32) * a[l + 96];
            }
            for (int k = 0; k < 8; k++)
                isum += sc[k] * s[k];
        }
        sum += y[i].d * quant_rdh(b[i].d) * (float)isum;
    }
    return sum;
}

/* ------------------------------------------------------------------------
 * Scalar gemm wrappers and attention helpers
 * ---------------------------------------------------------------------- */

typedef float row_dot_fn(int64_t n, const void *w, const void *x);

/* The loop every scalar gemm shares: one dot per (row, column). */
static inline void gemm_loop(row_dot_fn *dot, int64_t n, int32_t nr, int32_t nc, const void *w,
                             size_t wb, const void *x, size_t xb, float *y, size_t ys, int add)
{
    for (int32_t c = 0; c < nc; c++) {
        const void *xc = (const uint8_t *)x + (size_t)c * xb;
        float *yc = y + (size_t)c * ys;
        for (int32_t r = 0; r < nr; r++) {
            float v = dot(n, (const uint8_t *)w + (size_t)r * wb, xc);
            yc[r] = add ? yc[r] + v : v;
        }
    }
}

#define SCALAR_GEMM(T)                                                                           \
    static void gemm_##T(int64_t n, int32_t nr, int32_t nc, const void *w, size_t wb,            \
                         const void *x, size_t xb, float *y, size_t ys, int add)                 \
    {                                                                                            \
        gemm_loop(dot_##T, n, nr, nc, w, wb, x, xb, y, ys, add);                                 \
    }
SCALAR_GEMM(f32)
SCALAR_GEMM(f16)
SCALAR_GEMM(bf16)
SCALAR_GEMM(q4_0)
SCALAR_GEMM(q8_0)
SCALAR_GEMM(q4_K)
SCALAR_GEMM(q5_K)
SCALAR_GEMM(q6_K)
SCALAR_GEMM(mxfp4)

/* Q5_0 / Q5_1 have only this scalar kernel; every table points at it. */
void cpu_gemm_q5_0(int64_t n, int32_t nr, int32_t nc, const void *w, size_t wb, const void *x,
                   size_t xb, float *y, size_t ys, int add)
{
    gemm_loop(dot_q5_0, n, nr, nc, w, wb, x, xb, y, ys, add);
}

void cpu_gemm_q5_1(int64_t n, int32_t nr, int32_t nc, const void *w, size_t wb, const void *x,
                   size_t xb, float *y, size_t ys, int add)
{
    gemm_loop(dot_q5_1, n, nr, nc, w, wb, x, xb, y, ys, add);
}

static float kv_at(const void *v, int64_t i, int f16)
{
    return elem(f16 ? 1 : 0, v, i);
}

static void kq_block(const float *const *q, int nq, int64_t hd, const void *kt, int f16,
                     float *const *s)
{
    for (int i = 0; i < nq; i++)
        for (int j = 0; j < 16; j++) {
            float sum = 0.0f;
            for (int64_t d = 0; d < hd; d++)
                sum += q[i][d] * kv_at(kt, d * 16 + j, f16);
            s[i][j] = sum;
        }
}

static void pv_block(const float *const *w, float *const *y, int nq, const float *v,
                     int64_t hd, int n)
{
    for (int i = 0; i < nq; i++)
        for (int j = 0; j < n; j++)
            for (int64_t d = 0; d < hd; d++)
                y[i][d] += w[i][j] * v[(int64_t)j * hd + d];
}

static void kv_to_f32(const void *src, int64_t n, int f16, float *dst)
{
    for (int64_t i = 0; i < n; i++)
        dst[i] = kv_at(src, i, f16);
}

static void round_f16(float *x, int64_t n);

static void softmax(float *x, int64_t n, float scale, int round16, float sink)
{
    float mx = -INFINITY, inv;
    double sum = 0.0;

    for (int64_t i = 0; i < n; i++) {
        x[i] *= scale;
        mx = x[i] > mx ? x[i] : mx;
    }
    mx = sink > mx ? sink : mx;
    for (int64_t i = 0; i < n; i++) {
        x[i] = expf(x[i] - mx);
        sum += x[i];
    }
    if (sink > -INFINITY)
        sum += (double)expf(sink - mx);
    inv = (float)(1.0 / sum);
    for (int64_t i = 0; i < n; i++)
        x[i] *= inv;
    if (round16)
        round_f16(x, n);
}

static void swiglu(float *g, const float *u, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

static void round_f16(float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = quant_f16_to_f32(quant_f32_to_f16(x[i]));
}

const struct cpu_dot cpu_dot_scalar = {
    .isa = CPU_ISA_SCALAR,
    .name = "scalar",
    CPU_DOT_FUNCS,
};

/* ------------------------------------------------------------------------
 * Dispatch
 * ---------------------------------------------------------------------- */

#if defined(__x86_64__)
static int cpu_x86_has_avx2(void)
{
    struct mf_cpu_features f;
    mf_cpu_detect(&f);
    return f.avx2 && f.fma && f.f16c;
}

static int cpu_x86_has_avx512(void)
{
    struct mf_cpu_features f;
    mf_cpu_detect(&f);
    return f.avx2 && f.fma && f.f16c && f.avx512f && f.avx512bw && f.avx512vl && f.avx512vnni;
}
#endif

const struct cpu_dot *cpu_dot_for(enum cpu_isa isa)
{
    switch (isa) {
    case CPU_ISA_SCALAR:
        return &cpu_dot_scalar;
#if defined(__x86_64__)
    case CPU_ISA_AVX2:
        if (cpu_x86_has_avx2())
            return &cpu_dot_avx2;
        return NULL;
    case CPU_ISA_AVX512:
        if (cpu_x86_has_avx512())
            return &cpu_dot_avx512;
        return NULL;
#endif
    default:
        return NULL;
    }
}

const struct cpu_dot *cpu_dot_best(void)
{
    for (int isa = CPU_ISA_COUNT - 1; isa > 0; isa--) {
        const struct cpu_dot *d = cpu_dot_for((enum cpu_isa)isa);
        if (d)
            return d;
    }
    return &cpu_dot_scalar;
}
