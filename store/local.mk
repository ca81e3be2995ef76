### store/: $MFC_HOME as an OCI image layout (blobs, tags, build cache, stat
### cache, gc), and its tests
libmfc_compiler_a_SOURCES += \
	store/store.c store/store.h store/store_int.h \
	store/store_oci.c store/store_tag.c store/store_cache.c \
	store/store_stat.c store/store_gc.c store/store_tmp.c

check_PROGRAMS += tests/unit/test_store
tests_unit_test_store_SOURCES = tests/unit/test_store.c
tests_unit_test_store_CFLAGS = $(MFC_TEST_CFLAGS)
tests_unit_test_store_LDADD = $(MFC_COMPILER_LIBS) $(CMOCKA_LIBS)
TESTS += tests/unit/test_store

TESTS += tests/cli/store.bats
EXTRA_DIST += tests/cli/store.bats tests/fuzz/fuzz_store_index.c \
	tests/fuzz/corpus/store_index
