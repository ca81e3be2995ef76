### Unit tests (cmocka), one program per module
MFC_TEST_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS) $(JANSSON_CFLAGS) -DMF_TESTING
check_PROGRAMS += tests/unit/test_common
tests_unit_test_common_SOURCES = tests/unit/test_common.c
tests_unit_test_common_CFLAGS = $(MFC_TEST_CFLAGS)
tests_unit_test_common_LDADD = $(MFC_COMMON_LIBS) $(CMOCKA_LIBS)
TESTS += tests/unit/test_common

### CLI tests (bats)
TESTS += tests/cli/mfc.bats
EXTRA_DIST += tests/cli/mfc.bats tests/cli/helpers.bash
EXTRA_DIST += tests/unit/tmpdir.h

### Source rules (banned functions, header comments)
TESTS += script/checksrc
EXTRA_DIST += script/checksrc script/bootstrap script/test script/demo
