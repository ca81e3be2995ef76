### CUDA kernels (only with --with-cuda or an auto-detected nvcc)
## sm_90a for Hopper's wgmma/TMA, plus compute_90 PTX so newer GPUs can JIT it.
NVCC_FLAGS = -O3 -std=c++17 -I$(top_srcdir) -I$(top_builddir) \
	-gencode arch=compute_90a,code=sm_90a -gencode arch=compute_90,code=compute_90 \
	-Xcompiler -fPIC,-Wall
KERNELS_CU = kernels/device.cu kernels/mem.cu kernels/llama.cu kernels/attention.cu kernels/attention_tiles.cu kernels/gemm.cu \
	kernels/graph.cu kernels/mmq.cu kernels/qgemm.cu kernels/sample.cu kernels/family.cu \
	kernels/moe.cu
EXTRA_DIST += $(KERNELS_CU) kernels/kernels.h kernels/internal.cuh kernels/blocks.cuh
if HAVE_CUDA
noinst_LIBRARIES += libmfc_kernels.a
libmfc_kernels_a_SOURCES = kernels/kernels.h
libmfc_kernels_a_LIBADD = $(KERNELS_CU:.cu=_cu.o)
libmfc_kernels_a_DEPENDENCIES = $(libmfc_kernels_a_LIBADD)
CLEANFILES += $(KERNELS_CU:.cu=_cu.o)
kernels/%_cu.o: kernels/%.cu kernels/kernels.h kernels/internal.cuh kernels/blocks.cuh
	@$(MKDIR_P) $(@D)
	$(AM_V_GEN)$(NVCC) $(NVCC_FLAGS) -c $< -o $@
endif

## Linking needs the runtime libraries, which a compiler-only install lacks.
if HAVE_CUDA_RUNTIME
## (cuBLAS is not linked: kernels/gemm.cu loads it with dlopen on first use.)
MFC_CUDA_LIBS = libmfc_kernels.a $(MFC_COMMON_LIBS) -L$(CUDA_LIBDIR) -lcudart -ldl -lstdc++ -lm
## The toolkit's lib directory is rarely in ld.so.conf: record it in the binary
## (runtime/cuda.mk adds it to AM_LDFLAGS, so per-program LDFLAGS stay free).
MFC_CUDA_RPATH = -Wl,-rpath,$(CUDA_LIBDIR)
noinst_PROGRAMS += tests/gpu/gpuinfo
tests_gpu_gpuinfo_SOURCES = tests/gpu/gpuinfo.c
tests_gpu_gpuinfo_LDADD = $(MFC_CUDA_LIBS)
endif
EXTRA_DIST += tests/gpu/gpuinfo.c tests/gpu/hf_families.py
