/*
 * quant_testdata.c: the seeded inputs of quant_testdata.h. Deterministic
 * for a seed on any platform with IEEE doubles.
 */
#include "quant_testdata.h"

#include <math.h>

const enum ggml_type qt_quant_types[] = {
    GGML_TYPE_F32,  GGML_TYPE_F16,  GGML_TYPE_BF16, GGML_TYPE_Q4_0,  GGML_TYPE_Q4_1,
    GGML_TYPE_Q5_0, GGML_TYPE_Q5_1, GGML_TYPE_Q8_0, GGML_TYPE_Q2_K,  GGML_TYPE_Q3_K,
    GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K, GGML_TYPE_MXFP4, GGML_TYPE_COUNT,
};

const enum ggml_type qt_dequant_types[] = {
    GGML_TYPE_F32,  GGML_TYPE_F16,  GGML_TYPE_BF16, GGML_TYPE_Q4_0,  GGML_TYPE_Q4_1,
    GGML_TYPE_Q5_0, GGML_TYPE_Q5_1, GGML_TYPE_Q8_0, GGML_TYPE_Q2_K,  GGML_TYPE_Q3_K,
    GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K, GGML_TYPE_MXFP4, GGML_TYPE_COUNT,
};

uint64_t qt_next(struct qt_rng *r)
{
    uint64_t z = (r->s += UINT64_C(0x9E3779B97F4A7C15));
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

double qt_uniform(struct qt_rng *r)
{
    return (double)(qt_next(r) >> 11) * 0x1.0p-53;
}

double qt_gauss(struct qt_rng *r)
{
    double u1 = qt_uniform(r), u2 = qt_uniform(r);
    if (u1 < 1e-300)
        u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

const char *qt_dist_name(enum qt_dist d)
{
    static const char *const names[QT_NDIST] = {
        "gauss", "uniform", "outliers", "zero", "tiny", "positive", "weights", "blocky", "huge",
    };
    return (unsigned)d < QT_NDIST ? names[d] : "?";
}

/* One 32-element block of QT_BLOCKY: its kind cycles with the RNG. */
static void fill_blocky(float *x, int64_t n, struct qt_rng *r)
{
    for (int64_t b = 0; b < n; b += 32) {
        int kind = (int)(qt_next(r) % 4);
        float c = (float)qt_gauss(r);
        for (int64_t j = b; j < b + 32 && j < n; j++) {
            switch (kind) {
            case 0:
                x[j] = 0.0f;
                break;
            case 1:
                x[j] = c;
                break;
            case 2:
                x[j] = j == b + 7 ? c * 10.0f : 0.0f;
                break;
            default:
                x[j] = (float)qt_gauss(r);
                break;
            }
        }
    }
}

void qt_fill(float *x, int64_t nrows, int64_t n_per_row, enum qt_dist d, uint64_t seed)
{
    struct qt_rng r = {seed * 1000003u + (uint64_t)d};
    for (int64_t row = 0; row < nrows; row++) {
        float *y = x + row * n_per_row;
        double row_scale = 0.02 * (0.5 + qt_uniform(&r));
        double tiny = row % 2 ? 1e-30 : 1e-6;
        if (d == QT_BLOCKY) {
            fill_blocky(y, n_per_row, &r);
            continue;
        }
        for (int64_t j = 0; j < n_per_row; j++) {
            double g = qt_gauss(&r);
            double v;
            switch (d) {
            case QT_UNIFORM:
                v = 2.0 * qt_uniform(&r) - 1.0;
                break;
            case QT_OUTLIERS:
                v = qt_uniform(&r) < 0.01 ? g * 50.0 : g;
                break;
            case QT_ZERO:
                v = 0.0;
                break;
            case QT_TINY:
                v = g * tiny;
                break;
            case QT_POSITIVE:
                v = qt_uniform(&r);
                break;
            case QT_WEIGHTS:
                v = g * row_scale;
                break;
            case QT_HUGE:
                v = g * 3e4;
                break;
            default:
                v = g;
                break;
            }
            y[j] = (float)v;
        }
    }
}

size_t qt_row_bytes(enum ggml_type t, int64_t n)
{
    uint64_t b = 0;
    if (n < 0 || ggml_type_row_size(t, (uint64_t)n, &b) != 0)
        return 0;
    return (size_t)b;
}

/* Offsets of the high bytes of a block's fp16 fields (ggml-common.h). */
static void half_fields(enum ggml_type t, int hi[2])
{
    hi[0] = hi[1] = -1;
    switch (t) {
    case GGML_TYPE_Q4_1:
    case GGML_TYPE_Q5_1:
    case GGML_TYPE_Q4_K:
    case GGML_TYPE_Q5_K:
        hi[0] = 1, hi[1] = 3; /* d, then m or dmin */
        break;
    case GGML_TYPE_Q2_K:
        hi[0] = 81, hi[1] = 83;
        break;
    case GGML_TYPE_Q3_K:
        hi[0] = 109;
        break;
    case GGML_TYPE_Q6_K:
        hi[0] = 209;
        break;
    case GGML_TYPE_MXFP4:
        break; /* an E8M0 exponent: every byte is a valid scale */
    default:
        hi[0] = 1; /* Q4_0, Q5_0, Q8_0: d first */
        break;
    }
}

void qt_random_blocks(enum ggml_type t, uint8_t *buf, size_t bytes, uint64_t seed)
{
    struct qt_rng r = {seed};
    for (size_t i = 0; i < bytes; i++)
        buf[i] = (uint8_t)qt_next(&r);
    if (!ggml_type_is_quantized(t))
        return;
    int hi[2];
    half_fields(t, hi);
    size_t blk = ggml_type_size(t);
    for (size_t b = 0; b + blk <= bytes; b += blk)
        for (int k = 0; k < 2; k++)
            if (hi[k] >= 0)
                buf[b + (size_t)hi[k]] &= 0xBB; /* sign kept, exponent <= 14 */
}
