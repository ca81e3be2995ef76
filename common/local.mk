### common/: the bottom layer, shared by the compiler side and the runtime:
### errors, buffers, logging, numbers, UTF-8, JSON, files, SHA-256, CPU
### features, GGUF and safetensors readers, quant codecs, GGUF facts
### (inspect), progress output.
noinst_LIBRARIES += libmfc_common.a
libmfc_common_a_SOURCES = \
	common/err.c common/err.h \
	common/buf.c common/buf.h \
	common/log.c common/log.h \
	common/num.c common/num.h \
	common/params.c common/params.h \
	common/utf8.c common/utf8.h \
	common/sha256.c common/sha256.h \
	common/file.c common/file.h \
	common/json.c common/json.h \
	common/ggml_type.c common/ggml_type.h \
	common/cpu.c common/cpu.h common/limits.h \
	common/arch.c common/arch.h \
	common/progress.c common/progress.h \
	common/gguf.c common/gguf.h common/gguf_int.h common/gguf_write.c \
	common/inspect.c common/inspect.h \
	common/safetensors.c common/safetensors.h \
	common/quant.c common/quant.h common/quant_int.h \
	common/quant_ref.c common/quant_x86.c common/quant_ftype.c
## quant_x86.c compiles its AVX2/AVX-512 functions with per-function target
## attributes, so the library needs no -mavx2 and still runs on any x86-64.
libmfc_common_a_CFLAGS = $(AM_CFLAGS) $(JANSSON_CFLAGS) $(CRYPTO_CFLAGS)
## Link line for any program using libmfc_common.
MFC_COMMON_LIBS = libmfc_common.a $(JANSSON_LIBS) $(CRYPTO_LIBS) -lm $(PTHREAD_LIBS)

## Unit tests (cmocka): the basics, GGUF reader error paths and writer round
## trips, safetensors, progress output.
check_PROGRAMS += tests/unit/test_common tests/unit/test_gguf tests/unit/test_safetensors \
	tests/unit/test_progress
tests_unit_test_common_SOURCES = tests/unit/test_common.c
tests_unit_test_common_CFLAGS = $(MFC_TEST_CFLAGS)
tests_unit_test_common_LDADD = $(MFC_COMMON_LIBS) $(CMOCKA_LIBS)
tests_unit_test_gguf_SOURCES = tests/unit/test_gguf.c
tests_unit_test_gguf_CFLAGS = $(MFC_TEST_CFLAGS)
tests_unit_test_gguf_LDADD = $(MFC_COMMON_LIBS) $(CMOCKA_LIBS)
tests_unit_test_safetensors_SOURCES = tests/unit/test_safetensors.c
tests_unit_test_safetensors_CFLAGS = $(MFC_TEST_CFLAGS)
tests_unit_test_safetensors_LDADD = $(MFC_COMMON_LIBS) $(CMOCKA_LIBS)
tests_unit_test_progress_SOURCES = tests/unit/test_progress.c
tests_unit_test_progress_CFLAGS = $(MFC_TEST_CFLAGS)
tests_unit_test_progress_LDADD = $(MFC_COMMON_LIBS) $(CMOCKA_LIBS)
TESTS += tests/unit/test_common tests/unit/test_gguf tests/unit/test_safetensors \
	tests/unit/test_progress

## CLI tests (bats): mkmodel -> llama.cpp, mfc inspect vs an independent reader.
TESTS += tests/cli/gguf.bats tests/cli/inspect-families.bats
EXTRA_DIST += tests/cli/gguf.bats tests/cli/gguf_header.py tests/cli/inspect-families.bats

## Fuzzing (tests/fuzz/run): the targets and their seeds.
EXTRA_DIST += tests/fuzz/fuzz_gguf.c tests/fuzz/corpus/gguf \
	tests/fuzz/fuzz_safetensors.c tests/fuzz/corpus/safetensors

## Quant codecs: alone, then against llama.cpp's ggml (dlopened; -ldl keeps
## glibc before 2.34 linking).
QUANT_TEST_COMMON = tests/unit/quant_testdata.c tests/unit/quant_testdata.h
check_PROGRAMS += tests/unit/test_quant tests/unit/test_quant_ggml
tests_unit_test_quant_SOURCES = tests/unit/test_quant.c $(QUANT_TEST_COMMON)
tests_unit_test_quant_CFLAGS = $(MFC_TEST_CFLAGS)
tests_unit_test_quant_LDADD = $(MFC_COMMON_LIBS) $(CMOCKA_LIBS)
tests_unit_test_quant_ggml_SOURCES = tests/unit/test_quant_ggml.c $(QUANT_TEST_COMMON)
tests_unit_test_quant_ggml_CFLAGS = $(MFC_TEST_CFLAGS)
tests_unit_test_quant_ggml_LDADD = $(MFC_COMMON_LIBS) $(CMOCKA_LIBS) -ldl
TESTS += tests/unit/test_quant tests/unit/test_quant_ggml

## Benchmarks: built with the tree (so they cannot rot), run only on demand;
## never part of make check. See bench/README.md.
noinst_PROGRAMS += bench/quant
bench_quant_SOURCES = bench/quant.c $(QUANT_TEST_COMMON)
bench_quant_LDADD = $(MFC_COMMON_LIBS)
.PHONY: bench-quant
bench-quant: bench/quant$(EXEEXT)
	./bench/quant$(EXEEXT)
EXTRA_DIST += bench/inspect
