### cli/: the mfc command (main.c, a file per subcommand), mfc serve / mfc run
### over an image in the store (tar offsets, a private mfc-serve, the chat
### client), mfc manifest, and adapters of an image for mfc inspect
libmfc_compiler_a_SOURCES += cli/cli.h \
	cli/cmd_build.c cli/cmd_check.c cli/cmd_convert.c cli/cmd_fetch.c cli/cmd_fmt.c \
	cli/cmd_image.c cli/cmd_inspect.c cli/cmd_lora.c cli/cmd_lora_merge.c \
	cli/cmd_manifest.c cli/cmd_modelfile.c cli/cmd_modelfile.h cli/cmd_registry.c \
	cli/cmd_serve.c cli/cmd_store.c cli/lora_image.c cli/draft_image.c \
	cli/run.h cli/run_tar.c cli/run_image.c cli/run_server.c \
	cli/run_client.c cli/run_chat.h cli/run_chat.c \
	cli/manifest.c cli/manifest.h

bin_PROGRAMS += mfc
mfc_SOURCES = cli/main.c
mfc_CFLAGS = $(AM_CFLAGS) $(JANSSON_CFLAGS)
mfc_LDADD = $(MFC_COMPILER_LIBS)

check_PROGRAMS += tests/unit/test_run tests/unit/test_manifest
tests_unit_test_run_SOURCES = tests/unit/test_run.c
tests_unit_test_run_CFLAGS = $(MFC_TEST_CFLAGS) $(CURL_CFLAGS)
tests_unit_test_run_LDADD = $(MFC_COMPILER_LIBS) $(CMOCKA_LIBS)
tests_unit_test_manifest_SOURCES = tests/unit/test_manifest.c
tests_unit_test_manifest_CFLAGS = $(MFC_TEST_CFLAGS) $(YAML_CFLAGS)
tests_unit_test_manifest_LDADD = $(MFC_COMPILER_LIBS) $(CMOCKA_LIBS)
TESTS += tests/unit/test_run tests/unit/test_manifest

## official API clients, mfc run, and the load test, against a real mfc-serve;
## mfc manifest's YAML
TESTS += tests/cli/api-clients.bats tests/cli/run.bats tests/cli/serve-load.bats \
	tests/cli/manifest.bats
EXTRA_DIST += tests/cli/api-clients.bats tests/cli/run.bats tests/cli/serve-load.bats \
	tests/cli/serve_helpers.bash tests/tools/node/api-client.mjs tests/tools/node/stream-load.mjs \
	tests/cli/manifest.bats tests/cli/yaml_check.py \
	tests/fuzz/fuzz_run_tar.c tests/fuzz/corpus/run_tar \
	tests/fuzz/fuzz_run_ndjson.c tests/fuzz/corpus/run_ndjson
