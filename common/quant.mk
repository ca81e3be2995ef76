### Quantization codecs (common/quant*), their tests and benchmarks
## quant_x86.c compiles its AVX2/AVX-512 functions with per-function target
## attributes, so the library needs no -mavx2 and still runs on any x86-64.
libmfc_common_a_SOURCES += \
	common/quant.c common/quant.h common/quant_int.h \
	common/quant_ref.c common/quant_x86.c common/quant_ftype.c

## Unit tests: the codecs alone, then the codecs against llama.cpp's ggml.
QUANT_TEST_COMMON = tests/unit/quant_testdata.c tests/unit/quant_testdata.h
check_PROGRAMS += tests/unit/test_quant tests/unit/test_quant_ggml
tests_unit_test_quant_SOURCES = tests/unit/test_quant.c $(QUANT_TEST_COMMON)
tests_unit_test_quant_CFLAGS = $(MFC_TEST_CFLAGS)
tests_unit_test_quant_LDADD = $(MFC_COMMON_LIBS) $(CMOCKA_LIBS)
## dlopen is in glibc's libc since 2.34; -ldl keeps older systems linking.
tests_unit_test_quant_ggml_SOURCES = tests/unit/test_quant_ggml.c $(QUANT_TEST_COMMON)
tests_unit_test_quant_ggml_CFLAGS = $(MFC_TEST_CFLAGS)
tests_unit_test_quant_ggml_LDADD = $(MFC_COMMON_LIBS) $(CMOCKA_LIBS) -ldl
TESTS += tests/unit/test_quant tests/unit/test_quant_ggml

## Benchmark: built with the tree (so it cannot rot), run only on demand by
## `make bench-quant`; never part of make check. See bench/README.md.
noinst_PROGRAMS += bench/quant
bench_quant_SOURCES = bench/quant.c $(QUANT_TEST_COMMON)
bench_quant_LDADD = $(MFC_COMMON_LIBS)
.PHONY: bench-quant
bench-quant: bench/quant$(EXEEXT)
	./bench/quant$(EXEEXT)
