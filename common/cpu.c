/*
 * cpu.c: x86 feature detection.
 *
 * __builtin_cpu_supports covers most features and also checks (through
 * XGETBV) that the OS saves the wider registers. F16C is read from CPUID
 * directly because clang before 16 rejects "f16c" in __builtin_cpu_supports;
 * its OS requirement (ymm state) is the one AVX2 already carries.
 */
#include "cpu.h"

#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#endif

void mf_cpu_detect(struct mf_cpu_features *f)
{
    memset(f, 0, sizeof *f);
#if defined(__x86_64__) && defined(__GNUC__)
    unsigned a, b, c, d;
    __builtin_cpu_init();
    f->avx2 = __builtin_cpu_supports("avx2");
    f->fma = __builtin_cpu_supports("fma");
    f->f16c = f->avx2 && __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
    f->avx512f = __builtin_cpu_supports("avx512f");
    f->avx512bw = __builtin_cpu_supports("avx512bw");
    f->avx512vl = __builtin_cpu_supports("avx512vl");
    f->avx512vnni = __builtin_cpu_supports("avx512vnni");
#endif
}
