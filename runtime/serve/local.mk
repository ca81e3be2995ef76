### mfc-serve: the HTTP server over the engine (runtime/serve/)
## Settings and request parsing live in the runtime library (unit tests and
## fuzz_serve_json link them); the HTTP layer is mfc-serve's own.
libmfc_runtime_a_SOURCES += runtime/serve/serve.h runtime/serve/serve_config.c runtime/serve/serve_req.c \
	runtime/serve/serve_embed_req.c runtime/serve/serve_device.c

## mfc-serve sits at the top of the build dir: `mfc build` takes the
## mfc-serve next to mfc as the image's runtime layer.
bin_PROGRAMS += mfc-serve
mfc_serve_SOURCES = runtime/serve/serve_main.c runtime/serve/serve.c runtime/serve/serve_int.h \
	runtime/serve/serve_load.c runtime/serve/serve_gen.c runtime/serve/serve_openai.c runtime/serve/serve_ollama.c \
	runtime/serve/serve_metrics.c runtime/serve/serve_embed.c runtime/serve/serve_spec.c
mfc_serve_CFLAGS = $(AM_CFLAGS) $(JANSSON_CFLAGS) $(MHD_CFLAGS)
mfc_serve_LDADD = $(MFC_RUNTIME_LIBS) $(MHD_LIBS) $(PTHREAD_LIBS)

check_PROGRAMS += tests/unit/test_serve
tests_unit_test_serve_SOURCES = tests/unit/test_serve.c
tests_unit_test_serve_CFLAGS = $(MFC_TEST_CFLAGS)
tests_unit_test_serve_LDADD = $(MFC_RUNTIME_LIBS) $(CMOCKA_LIBS) $(PTHREAD_LIBS)
TESTS += tests/unit/test_serve tests/cli/serve.bats tests/cli/serve-embed.bats
EXTRA_DIST += tests/cli/serve.bats tests/fuzz/fuzz_serve_json.c tests/fuzz/corpus/serve_json \
	tests/cli/serve-embed.bats tests/tools/llama-embed.mjs tests/tools/embed-client.mjs

## MFC_DEVICE's decision (serve_device.c), without a GPU
check_PROGRAMS += tests/unit/test_serve_device
tests_unit_test_serve_device_SOURCES = tests/unit/test_serve_device.c
tests_unit_test_serve_device_CFLAGS = $(MFC_TEST_CFLAGS)
tests_unit_test_serve_device_LDADD = $(MFC_RUNTIME_LIBS) $(CMOCKA_LIBS) $(PTHREAD_LIBS)
TESTS += tests/unit/test_serve_device
