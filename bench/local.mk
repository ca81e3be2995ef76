### Benchmarks (make bench); never part of make check
EXTRA_DIST += bench/README.md
## bench/serve: mfc-serve vs llama.cpp at 1/8/32 streaming clients (`make bench-serve`)
EXTRA_DIST += bench/serve bench/serve-llama.mjs
.PHONY: bench-serve
bench-serve: mfc-serve$(EXEEXT) tests/tools/mkmodel$(EXEEXT)
	MFC_BUILDDIR='$(abs_top_builddir)' $(SHELL) $(top_srcdir)/bench/serve
## bench/convert: mfc convert of a generated HF checkpoint vs cat+sync (`make bench-convert`)
EXTRA_DIST += bench/convert
.PHONY: bench-convert
bench-convert: mfc$(EXEEXT)
	MFC_BUILDDIR='$(abs_top_builddir)' $(SHELL) $(top_srcdir)/bench/convert
## bench/loadgen: streamed /v1/completions from C clients back to back (libc only,
## so bench/serve-gpu builds it with cc on a GPU host); tests/cli/loadgen.bats runs it
check_PROGRAMS += bench/loadgen
bench_loadgen_SOURCES = bench/loadgen.c bench/loadgen_sse.c bench/loadgen_sse.h
bench_loadgen_LDADD = -lm
check_PROGRAMS += tests/unit/test_loadgen
tests_unit_test_loadgen_SOURCES = tests/unit/test_loadgen.c bench/loadgen_sse.c
tests_unit_test_loadgen_CFLAGS = $(MFC_TEST_CFLAGS)
tests_unit_test_loadgen_LDADD = $(CMOCKA_LIBS)
TESTS += tests/unit/test_loadgen tests/cli/loadgen.bats
EXTRA_DIST += tests/cli/loadgen.bats tests/fuzz/fuzz_loadgen.c tests/fuzz/corpus/loadgen
## bench/serve-gpu: mfc-serve against llama-server on a GPU host (bench/README.md)
EXTRA_DIST += bench/serve-gpu bench/copybw.cu
## bench/spec: speculative decoding's speed-ups through the engine (`make bench-spec`)
noinst_PROGRAMS += bench/spec_bench
bench_spec_bench_SOURCES = bench/spec_bench.c bench/bench_synth.c bench/bench_synth.h
bench_spec_bench_LDADD = $(MFC_RUNTIME_LIBS) $(PTHREAD_LIBS)
EXTRA_DIST += bench/spec
.PHONY: bench-spec
bench-spec: bench/spec_bench$(EXEEXT) tests/tools/mkmodel$(EXEEXT)
	MFC_BUILDDIR='$(abs_top_builddir)' $(SHELL) $(top_srcdir)/bench/spec
