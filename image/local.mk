### image/: deterministic tar layers (libarchive, gzip through zlib, zstd), the
### cached runtime layer, image config and manifest, OCI and docker archives; and
### their tests
libmfc_compiler_a_SOURCES += \
	image/layer.c image/layer.h image/layer_pax.c image/layer_runtime.c \
	image/oci.c image/oci.h image/oci_docker.c
libmfc_compiler_a_CFLAGS += $(ARCHIVE_CFLAGS) $(ZSTD_CFLAGS)
MFC_COMPILER_LIBS += $(ARCHIVE_LIBS) $(ZLIB_LIBS) $(ZSTD_LIBS)

check_PROGRAMS += tests/unit/test_layer tests/unit/test_oci
tests_unit_test_layer_SOURCES = tests/unit/test_layer.c
tests_unit_test_layer_CFLAGS = $(MFC_TEST_CFLAGS) $(ARCHIVE_CFLAGS)
tests_unit_test_layer_LDADD = $(MFC_COMPILER_LIBS) $(CMOCKA_LIBS)
tests_unit_test_oci_SOURCES = tests/unit/test_oci.c
tests_unit_test_oci_CFLAGS = $(MFC_TEST_CFLAGS) $(ARCHIVE_CFLAGS)
tests_unit_test_oci_LDADD = $(MFC_COMPILER_LIBS) $(CMOCKA_LIBS)
TESTS += tests/unit/test_layer tests/unit/test_oci

## mkimage: an image from files through layer.h + oci.h, for image.bats
check_PROGRAMS += tests/tools/mkimage
tests_tools_mkimage_SOURCES = tests/tools/mkimage.c
tests_tools_mkimage_CFLAGS = $(AM_CFLAGS) $(JANSSON_CFLAGS)
tests_tools_mkimage_LDADD = $(MFC_COMPILER_LIBS)

TESTS += tests/cli/image.bats
EXTRA_DIST += tests/cli/image.bats bench/image tests/fuzz/fuzz_docker_manifest.c \
	tests/fuzz/corpus/docker_manifest

## bench/image: mfc save / push of a multi-GB weight layer against read+write and
## skopeo (`make bench-image`; never part of make check). See bench/README.md.
.PHONY: bench-image
bench-image: mfc$(EXEEXT) tests/tools/mkmodel$(EXEEXT)
	MFC_BUILDDIR='$(abs_top_builddir)' $(SHELL) $(top_srcdir)/bench/image
