### Content store (compiler/store*), sources (compiler/fetch.*), progress output,
### the store commands (mfc images/tag/rmi/prune/du/fetch), and their tests
libmfc_compiler_a_SOURCES += \
	compiler/store.c compiler/store.h compiler/store_int.h \
	compiler/store_oci.c compiler/store_tag.c compiler/store_cache.c \
	compiler/store_stat.c compiler/store_gc.c \
	compiler/fetch.c compiler/fetch.h compiler/fetch_int.h compiler/fetch_http.c \
	compiler/progress.c compiler/progress.h \
	compiler/cmd_store.c compiler/cmd_fetch.c
libmfc_compiler_a_CFLAGS += $(CURL_CFLAGS)

check_PROGRAMS += tests/unit/test_store
tests_unit_test_store_SOURCES = tests/unit/test_store.c
tests_unit_test_store_CFLAGS = $(MFC_TEST_CFLAGS)
tests_unit_test_store_LDADD = $(MFC_COMPILER_LIBS) $(CMOCKA_LIBS)
TESTS += tests/unit/test_store

TESTS += tests/cli/store.bats tests/cli/fetch.bats
EXTRA_DIST += tests/cli/store.bats tests/cli/fetch.bats tests/tools/httpd.py

check_PROGRAMS += tests/unit/test_fetch tests/unit/test_progress
tests_unit_test_fetch_SOURCES = tests/unit/test_fetch.c
tests_unit_test_fetch_CFLAGS = $(MFC_TEST_CFLAGS)
tests_unit_test_fetch_LDADD = $(MFC_COMPILER_LIBS) $(CMOCKA_LIBS)
tests_unit_test_progress_SOURCES = tests/unit/test_progress.c
tests_unit_test_progress_CFLAGS = $(MFC_TEST_CFLAGS)
tests_unit_test_progress_LDADD = $(MFC_COMPILER_LIBS) $(CMOCKA_LIBS)
TESTS += tests/unit/test_fetch tests/unit/test_progress
