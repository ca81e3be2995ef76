/*
 * quant.c: throughput of common/quant's codecs against this machine's
 * memory bandwidth, measured in the same run.
 *
 * Dequantization runs each type through every instruction set the CPU has
 * (scalar, AVX2, AVX-512), twice: over rows far larger than the caches
 * (what loading a model does: quantized bytes in, floats out, both through
 * DRAM) and over one small row kept in L1/L2 (the codec's own speed). The
 * baseline is a read stream, memset and memcpy over buffers of the same
 * size. Quantization (the reference quantizers, scalar) is timed on a few
 * MiB of gaussian data. Prints one table; see bench/README.md.
 *
 * Usage: bench/quant [--quick]   (--quick: 4x smaller buffers)
 * Owns its buffers; not part of make check (make bench-quant runs it).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/quant.h"
#include "tests/unit/quant_testdata.h"

#define REPS 3 /* best of REPS: the first pass also faults pages in */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n);
    if (!p) {
        fprintf(stderr, "bench/quant: out of memory (%zu bytes)\n", n);
        exit(1);
    }
    return p;
}

/* ---- memory bandwidth ------------------------------------------------------------- */

struct membw {
    double read;  /* GB/s of a summing read stream */
    double write; /* GB/s of memset */
    double copy;  /* GB/s of memcpy traffic (bytes read + bytes written) */
};

static volatile uint64_t sink; /* keeps the read stream from being optimised out */

static struct membw measure_membw(size_t bytes)
{
    struct membw bw = {0, 0, 0};
    uint64_t *a = xmalloc(bytes), *b = xmalloc(bytes);
    memset(a, 1, bytes);
    memset(b, 2, bytes);
    for (int r = 0; r < REPS; r++) {
        double t0 = now_s();
        uint64_t s = 0;
        for (size_t i = 0; i < bytes / 8; i++)
            s += a[i];
        sink = s;
        double t1 = now_s();
        memset(b, r, bytes);
        double t2 = now_s();
        memcpy(b, a, bytes);
        double t3 = now_s();
        if (bytes / (t1 - t0) / 1e9 > bw.read)
            bw.read = (double)bytes / (t1 - t0) / 1e9;
        if (bytes / (t2 - t1) / 1e9 > bw.write)
            bw.write = (double)bytes / (t2 - t1) / 1e9;
        if (2.0 * bytes / (t3 - t2) / 1e9 > bw.copy)
            bw.copy = 2.0 * (double)bytes / (t3 - t2) / 1e9;
    }
    free(a);
    free(b);
    return bw;
}

/* ---- dequantization ------------------------------------------------------------------ */

/* Best seconds per call of ops' dequantizer over n elements at q. */
static double time_dequant(const struct quant_ops *ops, enum ggml_type t, const void *q, float *out,
                           int64_t n, int inner)
{
    double best = 1e30;
    for (int r = 0; r < REPS; r++) {
        double t0 = now_s();
        for (int k = 0; k < inner; k++)
            ops->dequantize[t](q, out, n);
        double dt = (now_s() - t0) / inner;
        if (dt < best)
            best = dt;
    }
    return best;
}

static void bench_dequant(const struct membw *bw, int64_t n_big)
{
    const int64_t n_small = 16384; /* 64 KiB of floats: stays in L2 */
    float *out = xmalloc(sizeof(float) * (size_t)n_big);
    memset(out, 0, sizeof(float) * (size_t)n_big);
    printf("\nDequantization (rows of %lld elements through DRAM; 16K-element row in cache)\n",
           (long long)n_big);
    printf("%-5s %-7s %9s %9s %9s %11s %9s\n", "type", "isa", "in GB/s", "out GB/s", "traffic/",
           "in-cache", "x scalar");
    printf("%-5s %-7s %9s %9s %9s %11s %9s\n", "", "", "", "", "memcpy", "out GB/s", "(cache)");
    for (const enum ggml_type *t = qt_dequant_types; *t != GGML_TYPE_COUNT; t++) {
        const size_t in_bytes = qt_row_bytes(*t, n_big);
        uint8_t *q = xmalloc(in_bytes);
        qt_random_blocks(*t, q, in_bytes, 17);
        double scalar_small = 0;
        const struct quant_ops *prev = NULL;
        for (int isa = 0; isa < QUANT_ISA_COUNT; isa++) {
            const struct quant_ops *ops = quant_ops_for_isa((enum quant_isa)isa);
            if (!ops || (prev && ops->dequantize[*t] == prev->dequantize[*t]))
                continue; /* no such ISA, or it reuses the narrower ISA's code */
            prev = ops;
            double big = time_dequant(ops, *t, q, out, n_big, 1);
            double small = time_dequant(ops, *t, q, out, n_small, 2000);
            double out_small = 4.0 * (double)n_small / small / 1e9;
            if (isa == 0)
                scalar_small = out_small;
            double in_gbs = (double)in_bytes / big / 1e9;
            double out_gbs = 4.0 * (double)n_big / big / 1e9;
            printf("%-5s %-7s %9.2f %9.2f %9.2f %11.2f %9.2f\n", ggml_type_name(*t), ops->name,
                   in_gbs, out_gbs, (in_gbs + out_gbs) / bw->copy, out_small,
                   out_small / scalar_small);
        }
        free(q);
    }
    free(out);
}

/* ---- quantization ------------------------------------------------------------------------ */

static void bench_quant(int64_t n)
{
    float *x = xmalloc(sizeof(float) * (size_t)n);
    uint8_t *q = xmalloc(qt_row_bytes(GGML_TYPE_F32, n));
    qt_fill(x, 1, n, QT_WEIGHTS, 5);
    printf("\nQuantization (reference quantizers, scalar, %lld floats)\n", (long long)n);
    printf("%-5s %12s %12s\n", "type", "in MB/s", "Melem/s");
    for (const enum ggml_type *t = qt_quant_types; *t != GGML_TYPE_COUNT; t++) {
        double best = 1e30;
        for (int r = 0; r < REPS; r++) {
            double t0 = now_s();
            if (quant_quantize_row(*t, x, q, n, NULL) != 0)
                exit(1);
            double dt = now_s() - t0;
            if (dt < best)
                best = dt;
        }
        printf("%-5s %12.1f %12.2f\n", ggml_type_name(*t), 4.0 * (double)n / best / 1e6,
               (double)n / best / 1e6);
    }
    free(x);
    free(q);
}

int main(int argc, char **argv)
{
    const int quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    const int64_t n_big = quick ? (int64_t)8 << 20 : (int64_t)32 << 20; /* 32 Mi elements */
    const struct membw bw = measure_membw((size_t)n_big * sizeof(float));
    printf("Memory bandwidth over %lld MiB buffers: read %.2f GB/s, write (memset) %.2f GB/s, "
           "memcpy %.2f GB/s (read+write traffic)\n",
           (long long)(n_big * 4 >> 20), bw.read, bw.write, bw.copy);
    printf("Dispatch picks: %s\n", quant_ops_get()->name);
    bench_dequant(&bw, n_big);
    bench_quant(quick ? (int64_t)256 << 10 : (int64_t)1 << 20);
    return 0;
}
