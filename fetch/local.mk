### fetch/: FROM/ADAPTER sources into the store: local paths and directories,
### http(s) with resume and pins, hf://, and image references (source_ref)
libmfc_compiler_a_SOURCES += \
	fetch/fetch.c fetch/fetch.h fetch/fetch_int.h fetch/fetch_http.c \
	fetch/source_ref.c fetch/source_ref.h
libmfc_compiler_a_CFLAGS += $(CURL_CFLAGS)

check_PROGRAMS += tests/unit/test_fetch tests/unit/test_source_ref
tests_unit_test_fetch_SOURCES = tests/unit/test_fetch.c
tests_unit_test_fetch_CFLAGS = $(MFC_TEST_CFLAGS)
tests_unit_test_fetch_LDADD = $(MFC_COMPILER_LIBS) $(CMOCKA_LIBS)
## FROM/ADAPTER by name: media-type selection and the YAML reader
tests_unit_test_source_ref_SOURCES = tests/unit/test_source_ref.c
tests_unit_test_source_ref_CFLAGS = $(MFC_TEST_CFLAGS)
tests_unit_test_source_ref_LDADD = $(MFC_COMPILER_LIBS) $(CMOCKA_LIBS)
TESTS += tests/unit/test_fetch tests/unit/test_source_ref

TESTS += tests/cli/fetch.bats tests/cli/build-from.bats tests/cli/build-context.bats
EXTRA_DIST += tests/cli/fetch.bats tests/cli/build-from.bats tests/cli/build-context.bats tests/tools/httpd.py \
	tests/cli/registry_helpers.bash bench/fetch
