### Fuzzing (make fuzz): libFuzzer targets tests/fuzz/fuzz_*.c, run by tests/fuzz/run
## Not part of make check: the fuzzers need clang and a separate instrumented
## build; script/test runs them for a bounded time under ASan+UBSan.
EXTRA_DIST += tests/fuzz/run tests/fuzz/README.md
fuzz:
	$(top_srcdir)/tests/fuzz/run $${FUZZ_SECONDS:-60}
.PHONY: fuzz
EXTRA_DIST += tests/fuzz/fuzz_serve_flags.c tests/fuzz/corpus/serve_flags
