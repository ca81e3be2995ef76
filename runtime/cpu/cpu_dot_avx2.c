/*
 * cpu_dot_avx2.c: the gemm tiles of cpu_dot_x86.h built for AVX2 + FMA +
 * F16C (Haswell, Zen 1 and later).
 *
 * Only the target attribute changes, so the library still runs on any
 * x86-64: cpu_dot_for() hands this table out after cpuid says the CPU has
 * these extensions. Prefill tiles are 2 rows x 3 columns: the best of the
 * shapes that fit AVX2's 16 ymm registers (6 accumulators plus operands),
 * measured with the kernels in L2 (Zen 4: Q4_K 46, Q8_0 37 GMAC/s/core).
 */
#if defined(__x86_64__)

#define X86_T __attribute__((target("avx2,fma,f16c")))
#define X86_VNNI 0
#define X86_RB 2
#define X86_PVQ 1 /* queries per P.V pass (registers: 8 per query) */
#define X86_CB 3
#define X86_TABLE cpu_dot_avx2
#define X86_ISA CPU_ISA_AVX2
#define X86_NAME "avx2"
#include "runtime/cpu/cpu_dot_x86.h"

#endif
