### convert/: Hugging Face directories to GGUF, PEFT adapters to GGUF LoRA,
### adapter checks against the base, LoRA merging and quantize-on-build
libmfc_compiler_a_SOURCES += \
	convert/hf.h convert/hf_int.h convert/hf_config.c convert/hf_family.c \
	convert/hf_tokenizer.c convert/hf_tensors.c convert/hf_convert.c \
	convert/lora.h convert/lora_check.c convert/lora_peft.c \
	convert/lora_merge.c convert/lora_merge.h

check_PROGRAMS += tests/unit/test_hf tests/unit/test_lora tests/unit/test_lora_merge
tests_unit_test_hf_SOURCES = tests/unit/test_hf.c
tests_unit_test_hf_CFLAGS = $(MFC_TEST_CFLAGS)
tests_unit_test_hf_LDADD = $(MFC_COMPILER_LIBS) $(CMOCKA_LIBS) -lm
tests_unit_test_lora_SOURCES = tests/unit/test_lora.c
tests_unit_test_lora_CFLAGS = $(MFC_TEST_CFLAGS)
tests_unit_test_lora_LDADD = $(MFC_COMPILER_LIBS) $(CMOCKA_LIBS)
tests_unit_test_lora_merge_SOURCES = tests/unit/test_lora_merge.c
tests_unit_test_lora_merge_CFLAGS = $(MFC_TEST_CFLAGS)
tests_unit_test_lora_merge_LDADD = $(MFC_COMPILER_LIBS) $(CMOCKA_LIBS) $(PTHREAD_LIBS) -lm
TESTS += tests/unit/test_hf tests/unit/test_lora tests/unit/test_lora_merge

## CLI tests (bats) with stdlib-Python references: an HF writer and reader,
## a PEFT writer and reference converter.
TESTS += tests/cli/convert.bats tests/cli/convert-families.bats tests/cli/lora.bats \
	tests/cli/lora-families.bats \
	tests/cli/merge.bats
EXTRA_DIST += tests/cli/convert.bats tests/cli/convert-families.bats tests/cli/hf_mkdir.py \
	tests/cli/hf_gguf.py \
	tests/cli/lora.bats tests/cli/lora-families.bats tests/cli/peft_ref.py tests/cli/merge.bats \
	docs/convert.md docs/lora.md docs/merge.md

EXTRA_DIST += tests/fuzz/fuzz_hf_config.c tests/fuzz/corpus/hf_config \
	tests/fuzz/fuzz_lora.c tests/fuzz/corpus/lora \
	tests/fuzz/fuzz_lora_merge.c tests/fuzz/corpus/lora_merge

## bench/merge: mfc lora merge vs cat+sync (`make bench-merge`; never part of make check)
EXTRA_DIST += bench/merge bench/convert
.PHONY: bench-merge
bench-merge: mfc$(EXEEXT) tests/tools/mkmodel$(EXEEXT)
	MFC_BUILDDIR='$(abs_top_builddir)' $(SHELL) $(top_srcdir)/bench/merge
