### RUN steps in a bubblewrap sandbox (compiler/sandbox*, compiler/exec_run.c)
libmfc_compiler_a_SOURCES += compiler/exec_run.c compiler/sandbox.c compiler/sandbox.h

check_PROGRAMS += tests/unit/test_sandbox
tests_unit_test_sandbox_SOURCES = tests/unit/test_sandbox.c
tests_unit_test_sandbox_CFLAGS = $(MFC_TEST_CFLAGS)
tests_unit_test_sandbox_LDADD = $(MFC_COMPILER_LIBS) $(CMOCKA_LIBS)
TESTS += tests/unit/test_sandbox

TESTS += tests/cli/run-sandbox.bats
EXTRA_DIST += tests/cli/run-sandbox.bats modelfiles/run-peft/Modelfile \
	modelfiles/run-peft/README.md docs/run.md tests/fuzz/fuzz_sandbox.c \
	tests/fuzz/corpus/sandbox/tail tests/fuzz/corpus/sandbox/spec tests/fuzz/corpus/sandbox/utf8
