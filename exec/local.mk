### exec/: the build executor (a thread pool over the plan's nodes, cache
### keys, CACHED hits) and its steps: fetch, convert, check, merge, RUN in a
### bubblewrap sandbox, layers and the image; and their tests
libmfc_compiler_a_SOURCES += \
	exec/exec.c exec/exec.h exec/exec_int.h exec/exec_ops.c \
	exec/exec_allow.c exec/exec_allow.h \
	exec/exec_convert.c exec/exec_lora.c exec/exec_merge.c exec/exec_draft.c \
	exec/exec_run.c exec/sandbox.c exec/sandbox.h exec/sandbox_run.c \
	exec/secret_mask.c exec/secret_mask.h
libmfc_compiler_a_CFLAGS += $(YAML_CFLAGS)
MFC_COMPILER_LIBS += $(YAML_LIBS) -lpthread

check_PROGRAMS += tests/unit/test_sandbox
tests_unit_test_sandbox_SOURCES = tests/unit/test_sandbox.c
tests_unit_test_sandbox_CFLAGS = $(MFC_TEST_CFLAGS)
tests_unit_test_sandbox_LDADD = $(MFC_COMPILER_LIBS) $(CMOCKA_LIBS)
TESTS += tests/unit/test_sandbox

check_PROGRAMS += tests/unit/test_secret_mask tests/unit/test_exec_allow
tests_unit_test_secret_mask_SOURCES = tests/unit/test_secret_mask.c
tests_unit_test_secret_mask_CFLAGS = $(MFC_TEST_CFLAGS)
tests_unit_test_secret_mask_LDADD = $(MFC_COMPILER_LIBS) $(CMOCKA_LIBS)
tests_unit_test_exec_allow_SOURCES = tests/unit/test_exec_allow.c
tests_unit_test_exec_allow_CFLAGS = $(MFC_TEST_CFLAGS)
tests_unit_test_exec_allow_LDADD = $(MFC_COMPILER_LIBS) $(CMOCKA_LIBS)
TESTS += tests/unit/test_secret_mask tests/unit/test_exec_allow

## build.bats: mfc build end to end; build-image.bats: what it makes, checked
## with skopeo, umoci, podman; adapter-names.bats: an unnamed ADAPTER is named
## after its file, through mfc-serve; run-sandbox.bats: RUN steps; draft.bats:
## DRAFT checked, layered, inspected and served with speculative decoding.
TESTS += tests/cli/build.bats tests/cli/build-image.bats tests/cli/adapter-names.bats \
	tests/cli/run-sandbox.bats tests/cli/draft.bats
EXTRA_DIST += tests/cli/build.bats tests/cli/build-image.bats tests/cli/adapter-names.bats \
	tests/cli/run-sandbox.bats tests/cli/draft.bats bench/build \
	modelfiles/run-peft/Modelfile modelfiles/run-peft/README.md docs/run.md \
	tests/fuzz/fuzz_sandbox.c tests/fuzz/corpus/sandbox/tail tests/fuzz/corpus/sandbox/spec \
	tests/fuzz/corpus/sandbox/utf8
