### Tests shared by every component: the flags of unit tests, the mfc CLI's
### basics, and the source rules.
MFC_TEST_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS) $(JANSSON_CFLAGS) -DMF_TESTING

### CLI tests (bats)
TESTS += tests/cli/mfc.bats
EXTRA_DIST += tests/cli/mfc.bats tests/cli/helpers.bash
EXTRA_DIST += tests/unit/tmpdir.h

### Source rules (banned functions, header comments, include layering)
TESTS += script/checksrc
EXTRA_DIST += script/checksrc script/bootstrap script/test script/demo
