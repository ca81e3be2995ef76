### Test tools built by make check (generators, fake servers)
## mkmodel: seeded llama GGUFs and LoRA adapters (tests/tools/mkmodel.c)
check_PROGRAMS += tests/tools/mkmodel
tests_tools_mkmodel_SOURCES = tests/tools/mkmodel.c
tests_tools_mkmodel_CFLAGS = $(AM_CFLAGS) $(JANSSON_CFLAGS)
tests_tools_mkmodel_LDADD = $(MFC_COMMON_LIBS)
## llama-ref.mjs: llama.cpp (node-llama-cpp) reference logits and generations
EXTRA_DIST += tests/tools/llama-ref.mjs
