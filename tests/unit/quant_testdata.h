/*
 * quant_testdata.h: seeded test inputs shared by the quant tests and the
 * quant benchmark, so every run sees the same numbers.
 */
#ifndef MF_QUANT_TESTDATA_H
#define MF_QUANT_TESTDATA_H

#include <stddef.h>
#include <stdint.h>

#include "common/ggml_type.h"

/* splitmix64: small, seedable, good enough for test data. */
struct qt_rng {
    uint64_t s; /* state; any value is valid */
};

uint64_t qt_next(struct qt_rng *r);
/* Uniform in [0, 1). */
double qt_uniform(struct qt_rng *r);
/* Standard normal (Box-Muller). */
double qt_gauss(struct qt_rng *r);

/* Input shapes the codecs must survive; each names what it stresses. */
enum qt_dist {
    QT_GAUSS,    /* N(0,1): the common case */
    QT_UNIFORM,  /* U(-1,1): flat, no small values */
    QT_OUTLIERS, /* N(0,1) with 1% of values x50: one value sets the scale */
    QT_ZERO,     /* all zero: the "scale is 0" branches */
    QT_TINY,     /* N(0,1)*1e-6 and *1e-30 rows: fp16 scales subnormal or 0 */
    QT_POSITIVE, /* U(0,1): min > 0 paths of the affine types */
    QT_WEIGHTS,  /* N(0,0.02) with per-row scale like trained weights */
    QT_BLOCKY,   /* per-32 block: zero, constant, one spike, or gaussian */
    QT_HUGE,     /* N(0,1)*3e4: scales near fp16's max */
    QT_NDIST,
};

/* "gauss", "uniform", ... */
const char *qt_dist_name(enum qt_dist d);

/* Fills x[0..nrows*n_per_row) with distribution d from seed. */
void qt_fill(float *x, int64_t nrows, int64_t n_per_row, enum qt_dist d, uint64_t seed);

/* Bytes in a row of n elements of t; 0 when n does not fit t's blocks. */
size_t qt_row_bytes(enum ggml_type t, int64_t n);

/* Fills bytes of random blocks of t; every fp16 scale field gets a finite
 * value (exponent < 31, as ggml never writes inf/NaN scales), while plain
 * F16/BF16/F32 data keeps all bit patterns, NaN and inf included. */
void qt_random_blocks(enum ggml_type t, uint8_t *buf, size_t bytes, uint64_t seed);

/* The types quant_quantize_row supports, and those quant_dequantize_row
 * supports (superset), as lists ending in GGML_TYPE_COUNT. */
extern const enum ggml_type qt_quant_types[];
extern const enum ggml_type qt_dequant_types[];

#endif
