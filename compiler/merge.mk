### Build-time adapter merge and quantize-on-build, mfc lora merge
libmfc_compiler_a_SOURCES += compiler/cmd_lora_merge.c
libmfc_compiler_a_SOURCES += compiler/exec_merge.c
libmfc_compiler_a_SOURCES += compiler/lora_merge.c compiler/lora_merge.h

## tests
check_PROGRAMS += tests/unit/test_lora_merge
tests_unit_test_lora_merge_SOURCES = tests/unit/test_lora_merge.c
tests_unit_test_lora_merge_CFLAGS = $(MFC_TEST_CFLAGS)
tests_unit_test_lora_merge_LDADD = $(MFC_COMPILER_LIBS) $(CMOCKA_LIBS) $(PTHREAD_LIBS) -lm
TESTS += tests/unit/test_lora_merge
TESTS += tests/cli/merge.bats
EXTRA_DIST += tests/cli/merge.bats
EXTRA_DIST += docs/merge.md
EXTRA_DIST += tests/fuzz/fuzz_lora_merge.c tests/fuzz/corpus/lora_merge

## bench/merge: mfc lora merge vs cat+sync (`make bench-merge`; never part of make check)
EXTRA_DIST += bench/merge
.PHONY: bench-merge
bench-merge: mfc$(EXEEXT) tests/tools/mkmodel$(EXEEXT)
	MFC_BUILDDIR='$(abs_top_builddir)' $(SHELL) $(top_srcdir)/bench/merge
