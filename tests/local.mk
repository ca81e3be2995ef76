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

### The installed programs (make installcheck; make distcheck runs it on the
### tarball's install): they start, and mfc checks and formats a Modelfile.
installcheck-local:
	$(DESTDIR)$(bindir)/mfc --version
	$(DESTDIR)$(bindir)/mfc-serve --help >/dev/null
	$(DESTDIR)$(bindir)/mfc check $(abs_top_srcdir)/modelfiles/llama3-lora/Modelfile
	$(DESTDIR)$(bindir)/mfc fmt $(abs_top_srcdir)/modelfiles/llama3-lora/Modelfile >/dev/null
