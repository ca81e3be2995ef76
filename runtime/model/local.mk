### runtime/model/: the model loader over the GGUF mmap, runtime LoRA
### adapters, and the step contract (batch.h); numerics tests against llama.cpp
libmfc_runtime_a_SOURCES += runtime/model/batch.h \
	runtime/model/model.c runtime/model/model.h runtime/model/model_int.h \
	runtime/model/model_hparams.c runtime/model/model_rope.c \
	runtime/model/lora.c runtime/model/lora.h

## mfc-eval: runs token ids through the engine, prints logits as JSON (numerics tests, bench).
check_PROGRAMS += tests/tools/mfc-eval
tests_tools_mfc_eval_SOURCES = tests/tools/mfc-eval.c
tests_tools_mfc_eval_LDADD = $(MFC_RUNTIME_LIBS)
EXTRA_DIST += tests/tools/llama-logits.mjs

## Unit tests: loader refusals, SIMD vs scalar kernels, batch and chunk invariance.
check_PROGRAMS += tests/unit/test_model
tests_unit_test_model_SOURCES = tests/unit/test_model.c
tests_unit_test_model_CFLAGS = $(MFC_TEST_CFLAGS)
tests_unit_test_model_LDADD = $(MFC_RUNTIME_LIBS) $(CMOCKA_LIBS)
TESTS += tests/unit/test_model

## Numerics against llama.cpp (node-llama-cpp; skips without it or mkmodel):
## Llama shapes, types and LoRA; then every family and its refusals.
TESTS += tests/cli/engine-numerics.bats tests/cli/families.bats
EXTRA_DIST += tests/cli/engine-numerics.bats tests/cli/engine_numerics.py \
	tests/cli/families.bats tests/tools/gguf_edit.py

## bench/engine: mfc vs llama.cpp tokens/s (`make bench-engine`; never part of make check).
EXTRA_DIST += bench/engine
.PHONY: bench-engine
bench-engine: tests/tools/mfc-eval$(EXEEXT) tests/tools/mkmodel$(EXEEXT)
	MFC_BUILDDIR='$(abs_top_builddir)' $(SHELL) $(top_srcdir)/bench/engine
