/*
 * cpu_dot_avx512.c: the gemm tiles of cpu_dot_x86.h built for AVX-512
 * (F, BW, VL) with VNNI, at 256-bit width.
 *
 * Why 256 bits: Zen 4 splits 512-bit operations into two 256-bit halves
 * and Intel parts lower their clock for them, while weight blocks (34 or
 * 18 bytes for the legacy types) do not tile into 64-byte loads. What this
 * build gains is vpdpbusd/vpdpwssd (one instruction for maddubs + madd +
 * add, and no 16-bit saturation, which lets Q8_0 use the +128 offset
 * trick) and 32 vector registers, hence the larger 4 x 4 prefill tile
 * (measured best among 4x2, 4x3, 4x4, 2x4, 3x4 on Zen 4: Q8_0 57, Q4_K 56,
 * Q6_K 58 GMAC/s/core with the kernels in L2).
 */
#if defined(__x86_64__)

#define X86_T __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")))
#define X86_VNNI 1
#define X86_RB 4
#define X86_PVQ 2 /* queries per P.V pass (registers: 8 per query) */
#define X86_CB 4
#define X86_TABLE cpu_dot_avx512
#define X86_ISA CPU_ISA_AVX512
#define X86_NAME "avx512vnni"
#include "runtime/cpu/cpu_dot_x86.h"

#endif
