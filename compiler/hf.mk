### Hugging Face import: safetensors reader (common/), HF dir -> GGUF, mfc convert
libmfc_compiler_a_SOURCES += compiler/cmd_convert.c
libmfc_common_a_SOURCES += common/safetensors.h
libmfc_compiler_a_SOURCES += compiler/exec_convert.c
libmfc_compiler_a_SOURCES += compiler/hf.h compiler/hf_int.h compiler/hf_config.c \
	compiler/hf_tokenizer.c compiler/hf_tensors.c compiler/hf_convert.c

TESTS += tests/cli/convert.bats
EXTRA_DIST += tests/cli/convert.bats tests/cli/hf_mkdir.py tests/cli/hf_gguf.py

check_PROGRAMS += tests/unit/test_hf
tests_unit_test_hf_SOURCES = tests/unit/test_hf.c
tests_unit_test_hf_CFLAGS = $(MFC_TEST_CFLAGS)
tests_unit_test_hf_LDADD = $(MFC_COMPILER_LIBS) $(CMOCKA_LIBS) -lm
TESTS += tests/unit/test_hf
EXTRA_DIST += tests/fuzz/fuzz_hf_config.c tests/fuzz/corpus/hf_config
EXTRA_DIST += docs/convert.md
