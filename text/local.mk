### text/: tokenizers (SentencePiece and byte-level BPE from GGUF metadata,
### PCRE2 pre-tokenizers) and chat templates (Ollama TEMPLATE, family detection
### from GGUF Jinja), in libmfc_text: mfc-serve runs them, and mfc checks a
### TEMPLATE and a draft model's tokenizer with the same code at build time
noinst_LIBRARIES += libmfc_text.a
libmfc_text_a_CFLAGS = $(AM_CFLAGS) $(JANSSON_CFLAGS) $(PCRE2_CFLAGS)
MFC_TEXT_LIBS = libmfc_text.a $(PCRE2_LIBS)
libmfc_text_a_SOURCES = \
	text/tokenizer.c text/tokenizer.h text/tokenizer_int.h \
	text/tokenizer_spm.c text/tokenizer_bpe.c text/tokenizer_gguf.c text/tokenizer_compare.c

## Unit tests: API, errors, streaming, special tokens (test_tokenizer), and
## every vocabulary's llama.cpp test vectors from $MFC_SHARED/data/vocab
## (test_tokenizer_vocab; llama-bpe through a GGUF that mkmodel builds).
check_PROGRAMS += tests/unit/test_tokenizer tests/unit/test_tokenizer_vocab
tests_unit_test_tokenizer_SOURCES = tests/unit/test_tokenizer.c
tests_unit_test_tokenizer_CFLAGS = $(MFC_TEST_CFLAGS) $(PCRE2_CFLAGS)
tests_unit_test_tokenizer_LDADD = $(MFC_RUNTIME_LIBS) $(CMOCKA_LIBS)
tests_unit_test_tokenizer_vocab_SOURCES = tests/unit/test_tokenizer_vocab.c
tests_unit_test_tokenizer_vocab_CFLAGS = $(MFC_TEST_CFLAGS) $(PCRE2_CFLAGS)
tests_unit_test_tokenizer_vocab_LDADD = $(MFC_RUNTIME_LIBS) $(CMOCKA_LIBS)
TESTS += tests/unit/test_tokenizer tests/unit/test_tokenizer_vocab

## Fuzzing: tests/fuzz/run builds fuzz_tokenizer; its seeds ship with the source.
EXTRA_DIST += tests/fuzz/fuzz_tokenizer.c tests/fuzz/corpus/tokenizer

## toktool: the tokenizer from the command line (differential tests against
## llama.cpp through tests/tools/llama-tok.mjs, and the benchmark).
check_PROGRAMS += tests/tools/toktool
tests_tools_toktool_SOURCES = tests/tools/toktool.c
tests_tools_toktool_CFLAGS = $(AM_CFLAGS) $(JANSSON_CFLAGS)
tests_tools_toktool_LDADD = $(MFC_RUNTIME_LIBS)
EXTRA_DIST += tests/tools/llama-tok.mjs

## Differential test against llama.cpp (node-llama-cpp) on random strings.
TESTS += tests/cli/tokenizer.bats
EXTRA_DIST += tests/cli/tokenizer.bats tests/tools/gguf_vocab.py

## `make bench-tokenizer`: encode MB/s against llama.cpp; never part of make
## check. See bench/README.md ("Tokenizer").
EXTRA_DIST += bench/tokenizer.sh
.PHONY: bench-tokenizer
bench-tokenizer: tests/tools/toktool$(EXEEXT) tests/tools/mkmodel$(EXEEXT)
	MFC_BUILDDIR='$(abs_top_builddir)' $(top_srcdir)/bench/tokenizer.sh

## Chat templates
libmfc_text_a_SOURCES += \
	text/template.c text/template.h text/template_int.h \
	text/template_lex.c text/template_exec.c text/template_funcs.c \
	text/template_value.c text/template_chat.c text/template_family.c

check_PROGRAMS += tests/unit/test_template_jinja
tests_unit_test_template_jinja_SOURCES = tests/unit/test_template_jinja.c
tests_unit_test_template_jinja_CFLAGS = $(MFC_TEST_CFLAGS)
tests_unit_test_template_jinja_LDADD = $(MFC_RUNTIME_LIBS) $(CMOCKA_LIBS)
TESTS += tests/unit/test_template_jinja
EXTRA_DIST += tests/tools/jinja-render.mjs tests/data/chat-templates

check_PROGRAMS += tests/unit/test_template
tests_unit_test_template_SOURCES = tests/unit/test_template.c
tests_unit_test_template_CFLAGS = $(MFC_TEST_CFLAGS)
tests_unit_test_template_LDADD = $(MFC_RUNTIME_LIBS) $(CMOCKA_LIBS)
TESTS += tests/unit/test_template
EXTRA_DIST += tests/data/template tests/tools/gotmpl/main.go

