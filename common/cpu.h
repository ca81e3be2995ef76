/*
 * cpu.h: run-time x86 feature checks shared by every SIMD dispatcher
 * (common/quant.c, runtime/cpu/cpu_dot.c), so gcc 12 and clang 14 builds agree.
 */
#ifndef MF_CPU_H
#define MF_CPU_H

/* What this CPU and OS can run. All zero off x86-64. */
struct mf_cpu_features {
    int avx2;       /* AVX2, with the OS saving ymm state */
    int fma;        /* FMA3 */
    int f16c;       /* half<->float conversion instructions */
    int avx512f;    /* AVX-512 foundation, with the OS saving zmm state */
    int avx512bw;   /* byte/word instructions */
    int avx512vl;   /* 128/256-bit forms of AVX-512 instructions */
    int avx512vnni; /* vpdpbusd integer dot products */
};

/* Fills f for the running CPU. Cheap enough to call at each dispatch setup;
 * cannot fail. */
void mf_cpu_detect(struct mf_cpu_features *f);

#endif
