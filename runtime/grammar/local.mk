### runtime/grammar/: constrained decoding: GBNF and JSON Schema compiled to a
### byte-level pushdown automaton, run as a lazy DFA with token masks per state
### over a trie of the vocabulary (docs/grammar.md); and its tests
libmfc_runtime_a_SOURCES += runtime/grammar/gram.h runtime/grammar/gram_int.h \
	runtime/grammar/gram_gbnf.c runtime/grammar/gram_dfa.c runtime/grammar/gram_vocab.c runtime/grammar/gram_vocab_tok.c \
	runtime/grammar/gram_schema.c runtime/grammar/gram_regex.c

check_PROGRAMS += tests/unit/test_gram
tests_unit_test_gram_SOURCES = tests/unit/test_gram.c
tests_unit_test_gram_CFLAGS = $(MFC_TEST_CFLAGS)
tests_unit_test_gram_LDADD = $(MFC_RUNTIME_LIBS) $(CMOCKA_LIBS) $(PTHREAD_LIBS)
TESTS += tests/unit/test_gram

## Fuzzing: tests/fuzz/run builds fuzz_gbnf and fuzz_schema.
EXTRA_DIST += tests/fuzz/fuzz_gbnf.c tests/fuzz/corpus/gbnf tests/fuzz/fuzz_schema.c \
	tests/fuzz/corpus/schema

## bench/grammar: a constrained decode step against an unconstrained one on
## the CPU engine (`make bench-grammar`; bench/README.md has the figures)
noinst_PROGRAMS += bench/grammar
bench_grammar_SOURCES = bench/grammar.c
bench_grammar_CFLAGS = $(AM_CFLAGS) $(JANSSON_CFLAGS)
bench_grammar_LDADD = $(MFC_RUNTIME_LIBS) $(PTHREAD_LIBS)
.PHONY: bench-grammar
bench-grammar: bench/grammar$(EXEEXT) tests/tools/mkmodel$(EXEEXT)
	d=$${MFC_BENCH_DIR:-$$HOME/.cache/mfc-bench}; mkdir -p $$d; \
	[ -f $$d/toy-llama3.gguf ] || ./tests/tools/mkmodel$(EXEEXT) -o $$d/toy-llama3.gguf \
	    --preset toy --vocab-json $(top_srcdir)/../shared/data/vocab/llama3-tokenizer.json; \
	./bench/grammar$(EXEEXT) $$d/toy-llama3.gguf
