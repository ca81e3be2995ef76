### registry/: the OCI distribution client: push (HEAD skip, mounts, chunked),
### pull (resumable, verified), Basic and Bearer auth; and its tests
libmfc_compiler_a_SOURCES += \
	registry/registry.c registry/registry.h registry/registry_int.h \
	registry/registry_client.c registry/registry_auth.c \
	registry/registry_push.c registry/registry_pull.c

check_PROGRAMS += tests/unit/test_registry
tests_unit_test_registry_SOURCES = tests/unit/test_registry.c
tests_unit_test_registry_CFLAGS = $(MFC_TEST_CFLAGS) $(CURL_CFLAGS)
tests_unit_test_registry_LDADD = $(MFC_COMPILER_LIBS) $(CMOCKA_LIBS)
TESTS += tests/unit/test_registry

TESTS += tests/cli/registry.bats
EXTRA_DIST += tests/cli/registry.bats tests/fuzz/fuzz_registry.c tests/fuzz/corpus/registry
