### LoRA adapters: PEFT conversion, checks against the base, mfc lora check
libmfc_compiler_a_SOURCES += compiler/cmd_lora.c
libmfc_compiler_a_SOURCES += compiler/exec_lora.c
libmfc_compiler_a_SOURCES += compiler/lora.h compiler/lora_check.c compiler/lora_peft.c \
	compiler/lora_image.c

## The safetensors reader (common): PEFT adapters here, Hugging Face import in hf.mk.
libmfc_common_a_SOURCES += common/safetensors.c common/safetensors.h
check_PROGRAMS += tests/unit/test_safetensors
tests_unit_test_safetensors_SOURCES = tests/unit/test_safetensors.c
tests_unit_test_safetensors_CFLAGS = $(MFC_TEST_CFLAGS)
tests_unit_test_safetensors_LDADD = $(MFC_COMMON_LIBS) $(CMOCKA_LIBS)
TESTS += tests/unit/test_safetensors
EXTRA_DIST += tests/fuzz/fuzz_safetensors.c tests/fuzz/corpus/safetensors
EXTRA_DIST += tests/fuzz/fuzz_lora.c tests/fuzz/corpus/lora

## Adapter checks and PEFT conversion: unit tests, CLI tests (bats) with a
## stdlib-Python PEFT writer and reference converter.
check_PROGRAMS += tests/unit/test_lora
tests_unit_test_lora_SOURCES = tests/unit/test_lora.c
tests_unit_test_lora_CFLAGS = $(MFC_TEST_CFLAGS)
tests_unit_test_lora_LDADD = $(MFC_COMPILER_LIBS) $(CMOCKA_LIBS)
TESTS += tests/unit/test_lora tests/cli/lora.bats
EXTRA_DIST += tests/cli/lora.bats tests/cli/peft_ref.py
EXTRA_DIST += docs/lora.md
