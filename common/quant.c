/*
 * quant.c: the public face of the codecs: argument checks, fp16/bf16
 * scalar conversions, and the choice of SIMD implementation.
 *
 * Dispatch: quant_ops_get() builds, once per process under pthread_once,
 * one table per instruction set: the scalar table, with the AVX2 or
 * AVX-512 functions laid over it where quant_x86.c has them and the CPU
 * (and OS) supports them, as reported by __builtin_cpu_supports. After that
 * the tables are only read, so threads share them without locks. Nothing
 * else here has state.
 *
 * Does not own the codecs themselves (quant_ref.c, quant_x86.c) or the
 * file-type rules (quant_ftype.c).
 */
#include "quant.h"

#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <string.h>

#include "quant_int.h"
#include "cpu.h"

#if defined(__x86_64__) && defined(__GNUC__)
#endif

/* ---- fp16 / bf16 --------------------------------------------------------- */

static inline float f32_from_bits(uint32_t w)
{
    float f;
    memcpy(&f, &w, sizeof f);
    return f;
}

static inline uint32_t f32_bits(float f)
{
    uint32_t w;
    memcpy(&w, &f, sizeof w);
    return w;
}

/* ggml_compute_fp16_to_fp32 (ggml-impl.h, after FP16 by Maratyszcza):
 * normals by rebiasing the exponent with one multiply, subnormals through
 * the 0.5 magic bias; NaN and inf come out of the normal path. */
float quant_f16_to_f32(uint16_t h)
{
    const uint32_t w = (uint32_t)h << 16;
    const uint32_t sign = w & UINT32_C(0x80000000);
    const uint32_t two_w = w + w;
    const float normalized = f32_from_bits((two_w >> 4) + (UINT32_C(0xE0) << 23)) * 0x1.0p-112f;
    const float denormalized = f32_from_bits((two_w >> 17) | (UINT32_C(126) << 23)) - 0.5f;
    const uint32_t result =
        sign | (two_w < (UINT32_C(1) << 27) ? f32_bits(denormalized) : f32_bits(normalized));
    return f32_from_bits(result);
}

/* ggml_compute_fp32_to_fp16: scaling by 2^112 then 2^-110 makes the FPU
 * do the round-to-nearest-even at the half's precision; NaN maps to
 * sign|0x7E00, the same bits ggml writes. */
uint16_t quant_f32_to_f16(float f)
{
    float base = (fabsf(f) * 0x1.0p+112f) * 0x1.0p-110f;
    const uint32_t w = f32_bits(f);
    const uint32_t shl1_w = w + w;
    const uint32_t sign = w & UINT32_C(0x80000000);
    uint32_t bias = shl1_w & UINT32_C(0xFF000000);
    if (bias < UINT32_C(0x71000000))
        bias = UINT32_C(0x71000000);
    base = f32_from_bits((bias >> 1) + UINT32_C(0x07800000)) + base;
    const uint32_t bits = f32_bits(base);
    const uint32_t exp_bits = (bits >> 13) & UINT32_C(0x00007C00);
    const uint32_t mantissa_bits = bits & UINT32_C(0x00000FFF);
    const uint32_t nonsign = exp_bits + mantissa_bits;
    return (uint16_t)((sign >> 16) | (shl1_w > UINT32_C(0xFF000000) ? UINT16_C(0x7E00) : nonsign));
}

float quant_bf16_to_f32(uint16_t b)
{
    return f32_from_bits((uint32_t)b << 16);
}

/* ggml_compute_fp32_to_bf16: NaN keeps its top bits and is forced quiet;
 * everything else rounds to nearest even (overflow rounds to inf). */
uint16_t quant_f32_to_bf16(float f)
{
    const uint32_t u = f32_bits(f);
    if ((u & 0x7fffffff) > 0x7f800000)
        return (uint16_t)((u >> 16) | 64);
    return (uint16_t)((u + (0x7fff + ((u >> 16) & 1))) >> 16);
}

/* ---- dispatch ------------------------------------------------------------ */

struct dispatch {
    struct quant_ops ops[QUANT_ISA_COUNT]; /* written once in dispatch_init */
    int have[QUANT_ISA_COUNT];             /* 1 if this CPU runs ops[isa] */
};

static struct dispatch dispatch_tables; /* filled once under dispatch_once */
static pthread_once_t dispatch_once = PTHREAD_ONCE_INIT;

/* A table equal to base with over's non-NULL entries laid on top. */
static void overlay(struct quant_ops *out, const struct quant_ops *base,
                    const struct quant_ops *over)
{
    *out = *base;
    out->isa = over->isa;
    out->name = over->name;
    for (int t = 0; t < GGML_TYPE_COUNT; t++) {
        if (over->dequantize[t] && base->dequantize[t])
            out->dequantize[t] = over->dequantize[t];
    }
}

/* Whether the CPU and OS run AVX2+FMA+F16C, and AVX-512 F/BW/VL on top. */
static void cpu_features(int have[QUANT_ISA_COUNT])
{
    struct mf_cpu_features f;
    mf_cpu_detect(&f);
    have[QUANT_ISA_SCALAR] = 1;
    have[QUANT_ISA_AVX2] = f.avx2 && f.fma && f.f16c;
    have[QUANT_ISA_AVX512] = have[QUANT_ISA_AVX2] && f.avx512f && f.avx512bw && f.avx512vl;
}

static void dispatch_init(void)
{
    struct dispatch *d = &dispatch_tables;
    cpu_features(d->have);
    d->ops[QUANT_ISA_SCALAR] = quant_ops_scalar;
    overlay(&d->ops[QUANT_ISA_AVX2], &quant_ops_scalar, &quant_ops_avx2);
    overlay(&d->ops[QUANT_ISA_AVX512], &d->ops[QUANT_ISA_AVX2], &quant_ops_avx512);
}

const struct quant_ops *quant_ops_for_isa(enum quant_isa isa)
{
    if ((unsigned)isa >= QUANT_ISA_COUNT)
        return NULL;
    pthread_once(&dispatch_once, dispatch_init);
    return dispatch_tables.have[isa] ? &dispatch_tables.ops[isa] : NULL;
}

const struct quant_ops *quant_ops_get(void)
{
    for (int isa = QUANT_ISA_COUNT - 1; isa > QUANT_ISA_SCALAR; isa--) {
        const struct quant_ops *ops = quant_ops_for_isa((enum quant_isa)isa);
        if (ops)
            return ops;
    }
    return quant_ops_for_isa(QUANT_ISA_SCALAR);
}

/* ---- rows ---------------------------------------------------------------- */

int quant_can_dequantize(enum ggml_type t)
{
    return (unsigned)t < GGML_TYPE_COUNT && quant_ops_scalar.dequantize[t] != NULL;
}

int quant_can_quantize(enum ggml_type t)
{
    return quant_ref_quantizer(t) != NULL;
}

/* Checks that n elements form whole blocks of t. */
static int check_len(const char *what, enum ggml_type t, int64_t n, struct mf_err *err)
{
    uint32_t blck = ggml_type_block_size(t);
    if (n < 0 || n % blck)
        return mf_err_set(err, MF_EINVAL,
                          "cannot %s %" PRId64 " elements as %s: the count must be a "
                          "non-negative multiple of its block size %" PRIu32,
                          what, n, ggml_type_name(t), blck);
    return 0;
}

int quant_dequantize_row(enum ggml_type t, const void *src, float *dst, int64_t n,
                         struct mf_err *err)
{
    if (!quant_can_dequantize(t))
        return mf_err_set(err, MF_EUNSUPPORTED, "cannot dequantize tensor type %s (id %d)",
                          ggml_type_name((uint32_t)t), (int)t);
    int rc = check_len("dequantize", t, n, err);
    if (rc)
        return rc;
    if (n)
        quant_ops_get()->dequantize[t](src, dst, n);
    return 0;
}

int quant_quantize_row(enum ggml_type t, const float *src, void *dst, int64_t n, struct mf_err *err)
{
    quant_quantize_fn *fn = quant_ref_quantizer(t);
    if (!fn)
        return mf_err_set(err, MF_EUNSUPPORTED, "cannot quantize to tensor type %s (id %d)",
                          ggml_type_name((uint32_t)t), (int)t);
    int rc = check_len("quantize", t, n, err);
    if (rc)
        return rc;
    if (n)
        fn(src, dst, n);
    return 0;
}
