### GGUF reader/writer (common/gguf.*), mfc inspect, and their tests
libmfc_common_a_SOURCES += \
	common/gguf.c common/gguf.h common/gguf_int.h \
	common/gguf_write.c
## mfc inspect (a compiler command).
libmfc_compiler_a_SOURCES += \
	compiler/inspect.c compiler/inspect.h \
	compiler/cmd_inspect.c

## Unit tests (cmocka): reader error paths, writer round trips and atomicity.
check_PROGRAMS += tests/unit/test_gguf
tests_unit_test_gguf_SOURCES = tests/unit/test_gguf.c
tests_unit_test_gguf_CFLAGS = $(MFC_TEST_CFLAGS)
tests_unit_test_gguf_LDADD = $(MFC_COMMON_LIBS) $(CMOCKA_LIBS)
TESTS += tests/unit/test_gguf

## CLI tests (bats): mkmodel -> llama.cpp, mfc inspect vs an independent reader.
TESTS += tests/cli/gguf.bats
EXTRA_DIST += tests/cli/gguf.bats tests/cli/gguf_header.py

## Fuzzing (tests/fuzz/run ... gguf): the target and its generated seeds.
EXTRA_DIST += tests/fuzz/fuzz_gguf.c tests/fuzz/corpus/gguf

## Benchmark: mfc inspect on a multi-GB file vs reading it once (bench/README.md).
EXTRA_DIST += bench/inspect
