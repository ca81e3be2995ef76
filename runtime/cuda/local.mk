### The CUDA backend (runtime/cuda/; kernels in kernels/)
## The host side is always built: cuda.c compiles to a stub that says "built
## without the CUDA runtime" unless MFC_HAVE_CUDA_RUNTIME, and cuda_plan.c
## (weight placement, KV budget, step bookkeeping) is unit-tested everywhere.
libmfc_runtime_a_SOURCES += runtime/cuda/cuda.c runtime/cuda/cuda.h runtime/cuda/cuda_plan.c runtime/cuda/cuda_plan.h \
	runtime/cuda/cuda_lora.c runtime/cuda/cuda_lora.h runtime/cuda/cuda_moe.c runtime/cuda/cuda_moe.h
if HAVE_CUDA_RUNTIME
## Programs linking the runtime then link the kernels and cudart too.
MFC_RUNTIME_LIBS += $(MFC_CUDA_LIBS)
AM_LDFLAGS += $(MFC_CUDA_RPATH)
endif

check_PROGRAMS += tests/unit/test_cuda_host
tests_unit_test_cuda_host_SOURCES = tests/unit/test_cuda_host.c
tests_unit_test_cuda_host_CFLAGS = $(MFC_TEST_CFLAGS)
tests_unit_test_cuda_host_LDADD = $(MFC_RUNTIME_LIBS) $(CMOCKA_LIBS)
TESTS += tests/unit/test_cuda_host

## GPU tests and the decode benchmark: tests/gpu/run builds and runs them on a
## GPU host (never part of make check); here they are only linked, when possible.
EXTRA_DIST += tests/gpu/run tests/gpu/models tests/gpu/test_cuda.c tests/gpu/test_sample.c \
	tests/gpu/ncu_summary.py \
	tests/gpu/profile tests/gpu/ab tests/gpu/hf_offline.py \
	bench/cuda_bench.c bench/bench_synth.c bench/bench_synth.h
if HAVE_CUDA_RUNTIME
noinst_PROGRAMS += tests/gpu/test_cuda tests/gpu/test_sample bench/cuda_bench
tests_gpu_test_sample_SOURCES = tests/gpu/test_sample.c
tests_gpu_test_sample_LDADD = $(MFC_RUNTIME_LIBS) $(PTHREAD_LIBS)
tests_gpu_test_cuda_SOURCES = tests/gpu/test_cuda.c
tests_gpu_test_cuda_LDADD = $(MFC_RUNTIME_LIBS) $(PTHREAD_LIBS)
bench_cuda_bench_SOURCES = bench/cuda_bench.c bench/bench_synth.c bench/bench_synth.h
bench_cuda_bench_LDADD = $(MFC_RUNTIME_LIBS) $(PTHREAD_LIBS)
endif
