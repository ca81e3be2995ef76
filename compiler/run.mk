### mfc serve / mfc run (compiler/cmd_serve.c) and the API client tests
libmfc_compiler_a_SOURCES += compiler/cmd_serve.c
libmfc_compiler_a_SOURCES += compiler/run.h compiler/run_tar.c compiler/run_image.c compiler/run_server.c \
	compiler/run_client.c compiler/run_chat.h compiler/run_chat.c
EXTRA_DIST += tests/fuzz/fuzz_run_tar.c tests/fuzz/corpus/run_tar \
	tests/fuzz/fuzz_run_ndjson.c tests/fuzz/corpus/run_ndjson
## official API clients, mfc run, and the load test, against a real mfc-serve
TESTS += tests/cli/api-clients.bats tests/cli/run.bats tests/cli/serve-load.bats
EXTRA_DIST += tests/cli/api-clients.bats tests/cli/run.bats tests/cli/serve-load.bats \
	tests/cli/serve_helpers.bash tests/tools/node/api-client.mjs tests/tools/node/stream-load.mjs
check_PROGRAMS += tests/unit/test_run
tests_unit_test_run_SOURCES = tests/unit/test_run.c
tests_unit_test_run_CFLAGS = $(MFC_TEST_CFLAGS) $(CURL_CFLAGS)
tests_unit_test_run_LDADD = $(MFC_COMPILER_LIBS) $(CMOCKA_LIBS)
TESTS += tests/unit/test_run
