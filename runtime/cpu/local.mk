### runtime/cpu/: the CPU backend (thread pool, Q8 activations x quantized
### weights with AVX2/AVX-512 or portable kernels chosen at run time, paged
### attention); its tests run through tests/unit/test_model
libmfc_runtime_a_SOURCES += \
	runtime/cpu/cpu.c runtime/cpu/cpu_fwd.c runtime/cpu/cpu_attn.c runtime/cpu/cpu_moe.c \
	runtime/cpu/cpu_pool.c runtime/cpu/cpu_int.h \
	runtime/cpu/cpu_dot.c runtime/cpu/cpu_dot_avx2.c runtime/cpu/cpu_dot_avx512.c \
	runtime/cpu/cpu_dot_x86.h
