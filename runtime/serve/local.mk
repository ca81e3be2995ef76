### mfc-serve: the HTTP server over the engine (runtime/serve/)
## Settings and request parsing live in the runtime library (unit tests and
## fuzz_serve_json link them); the HTTP layer is mfc-serve's own.
libmfc_runtime_a_SOURCES += runtime/serve/serve.h runtime/serve/serve_config.c runtime/serve/serve_req.c \
	runtime/serve/serve_embed_req.c runtime/serve/serve_device.c runtime/serve/serve_head.c \
	runtime/serve/serve_door.h runtime/serve/serve_tools.c

## mfc-serve sits at the top of the build dir: `mfc build` takes the
## mfc-serve next to mfc as the image's runtime layer.
bin_PROGRAMS += mfc-serve
mfc_serve_SOURCES = runtime/serve/serve_main.c runtime/serve/serve.c runtime/serve/serve_int.h \
	runtime/serve/serve_load.c runtime/serve/serve_gen.c runtime/serve/serve_openai.c runtime/serve/serve_ollama.c \
	runtime/serve/serve_metrics.c runtime/serve/serve_embed.c runtime/serve/serve_door.c \
	runtime/serve/serve_grammar.c runtime/serve/serve_spec.c
mfc_serve_CFLAGS = $(AM_CFLAGS) $(JANSSON_CFLAGS) $(MHD_CFLAGS)
mfc_serve_LDADD = $(MFC_RUNTIME_LIBS) $(MHD_LIBS) $(PTHREAD_LIBS)

check_PROGRAMS += tests/unit/test_serve
tests_unit_test_serve_SOURCES = tests/unit/test_serve.c
tests_unit_test_serve_CFLAGS = $(MFC_TEST_CFLAGS)
tests_unit_test_serve_LDADD = $(MFC_RUNTIME_LIBS) $(CMOCKA_LIBS) $(PTHREAD_LIBS)
TESTS += tests/unit/test_serve tests/cli/serve.bats tests/cli/serve-embed.bats tests/cli/structured.bats \
	tests/cli/context.bats
EXTRA_DIST += tests/cli/serve.bats tests/fuzz/fuzz_serve_json.c tests/fuzz/corpus/serve_json \
	tests/cli/serve-embed.bats tests/tools/llama-embed.mjs tests/tools/embed-client.mjs \
	tests/cli/structured.bats tests/tools/node/structured-client.mjs tests/cli/context.bats

## Structured output and tool calls, the request side (serve_tools.c)
check_PROGRAMS += tests/unit/test_serve_tools
tests_unit_test_serve_tools_SOURCES = tests/unit/test_serve_tools.c
tests_unit_test_serve_tools_CFLAGS = $(MFC_TEST_CFLAGS)
tests_unit_test_serve_tools_LDADD = $(MFC_RUNTIME_LIBS) $(CMOCKA_LIBS) $(PTHREAD_LIBS)
TESTS += tests/unit/test_serve_tools

## MFC_DEVICE's decision (serve_device.c), without a GPU
check_PROGRAMS += tests/unit/test_serve_device
tests_unit_test_serve_device_SOURCES = tests/unit/test_serve_device.c
tests_unit_test_serve_device_CFLAGS = $(MFC_TEST_CFLAGS)
tests_unit_test_serve_device_LDADD = $(MFC_RUNTIME_LIBS) $(CMOCKA_LIBS) $(PTHREAD_LIBS)
TESTS += tests/unit/test_serve_device

## request heads and the door's JSON answers (serve_head.c); the door itself
## runs in serve-limits.bats: slow clients, caps, libmicrohttpd's errors as JSON
check_PROGRAMS += tests/unit/test_serve_head
tests_unit_test_serve_head_SOURCES = tests/unit/test_serve_head.c
tests_unit_test_serve_head_CFLAGS = $(MFC_TEST_CFLAGS)
tests_unit_test_serve_head_LDADD = $(MFC_RUNTIME_LIBS) $(CMOCKA_LIBS) $(PTHREAD_LIBS)
TESTS += tests/unit/test_serve_head tests/cli/serve-limits.bats
EXTRA_DIST += tests/cli/serve-limits.bats tests/cli/slowloris.py \
	tests/fuzz/fuzz_serve_head.c tests/fuzz/corpus/serve_head
