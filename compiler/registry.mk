### Registry client (compiler/registry*.c): push/pull over the OCI distribution
### spec, login/logout, Basic and Bearer auth; and its tests
libmfc_compiler_a_SOURCES += \
	compiler/registry.c compiler/registry.h compiler/registry_int.h \
	compiler/registry_client.c compiler/registry_auth.c \
	compiler/registry_push.c compiler/registry_pull.c compiler/cmd_registry.c

check_PROGRAMS += tests/unit/test_registry
tests_unit_test_registry_SOURCES = tests/unit/test_registry.c
tests_unit_test_registry_CFLAGS = $(MFC_TEST_CFLAGS) $(CURL_CFLAGS)
tests_unit_test_registry_LDADD = $(MFC_COMPILER_LIBS) $(CMOCKA_LIBS)
TESTS += tests/unit/test_registry

TESTS += tests/cli/registry.bats
EXTRA_DIST += tests/cli/registry.bats tests/fuzz/fuzz_registry.c
