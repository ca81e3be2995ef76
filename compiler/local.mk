### compiler/: the Modelfile front end (lexer, parser, ARG/ENV expansion,
### PARAMETER table, diagnostics, fmt) and the planner (AST -> DAG of build
### steps with their cache keys); and their tests
libmfc_compiler_a_SOURCES += \
	compiler/modelfile.c compiler/modelfile.h compiler/modelfile_int.h \
	compiler/modelfile_lex.c compiler/modelfile_vars.c compiler/modelfile_flags.c \
	compiler/modelfile_param.c compiler/modelfile_isprint.c \
	compiler/modelfile_diag.c compiler/modelfile_json.c compiler/modelfile_fmt.c \
	compiler/plan.c compiler/plan.h compiler/plan_config.c compiler/plan_print.c

check_PROGRAMS += tests/unit/test_modelfile tests/unit/test_plan
tests_unit_test_modelfile_SOURCES = tests/unit/test_modelfile.c
tests_unit_test_modelfile_CFLAGS = $(MFC_TEST_CFLAGS)
tests_unit_test_modelfile_LDADD = $(MFC_COMPILER_LIBS) $(CMOCKA_LIBS)
tests_unit_test_plan_SOURCES = tests/unit/test_plan.c
tests_unit_test_plan_CFLAGS = $(MFC_TEST_CFLAGS)
tests_unit_test_plan_LDADD = $(MFC_COMPILER_LIBS) $(CMOCKA_LIBS)
TESTS += tests/unit/test_modelfile tests/unit/test_plan tests/cli/modelfile.bats \
	tests/cli/first-use.bats
## automake copies listed directories whole (make distcheck needs the data)
EXTRA_DIST += tests/cli/modelfile.bats tests/cli/first-use.bats tests/data/modelfile tests/fuzz/corpus/modelfile \
	tests/fuzz/fuzz_modelfile.c modelfiles/demo docs/modelfile.md script/gen-modelfile-isprint \
	tests/fuzz/fuzz_plan_config.c tests/fuzz/corpus/plan_config
