### Build planner and executor (compiler/plan*, exec*), `mfc build` and
### `mfc plan`, and their tests
libmfc_compiler_a_SOURCES += \
	compiler/plan.c compiler/plan.h compiler/plan_config.c compiler/plan_print.c \
	compiler/exec.c compiler/exec.h compiler/exec_int.h compiler/exec_ops.c \
	compiler/cmd_build.c compiler/source_ref.c compiler/source_ref.h
libmfc_compiler_a_CFLAGS += $(YAML_CFLAGS)
MFC_COMPILER_LIBS += $(YAML_LIBS) -lpthread

check_PROGRAMS += tests/unit/test_plan
tests_unit_test_plan_SOURCES = tests/unit/test_plan.c
tests_unit_test_plan_CFLAGS = $(MFC_TEST_CFLAGS)
tests_unit_test_plan_LDADD = $(MFC_COMPILER_LIBS) $(CMOCKA_LIBS)
TESTS += tests/unit/test_plan

TESTS += tests/cli/build.bats
EXTRA_DIST += tests/cli/build-from.bats tests/cli/registry_helpers.bash

## FROM/ADAPTER by name: media-type selection and the YAML reader
check_PROGRAMS += tests/unit/test_source_ref
tests_unit_test_source_ref_SOURCES = tests/unit/test_source_ref.c
tests_unit_test_source_ref_CFLAGS = $(MFC_TEST_CFLAGS)
tests_unit_test_source_ref_LDADD = $(MFC_COMPILER_LIBS) $(CMOCKA_LIBS)
TESTS += tests/unit/test_source_ref tests/cli/build-from.bats
EXTRA_DIST += tests/cli/build.bats bench/build

## build-image.bats: what `mfc build` makes, checked with skopeo, umoci, podman
TESTS += tests/cli/build-image.bats
EXTRA_DIST += tests/cli/build-image.bats

## adapter-names.bats: an unnamed ADAPTER is named after its file, end to end through mfc-serve
TESTS += tests/cli/adapter-names.bats
EXTRA_DIST += tests/cli/adapter-names.bats tests/fuzz/fuzz_plan_config.c tests/fuzz/corpus/plan_config
