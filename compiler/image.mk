### OCI images (compiler/layer.*, oci.*, registry.*): layers, image config and
### manifest, archives, save/load/inspect, push/pull/login; and their tests
libmfc_compiler_a_SOURCES += \
	compiler/layer.c compiler/layer.h
libmfc_compiler_a_CFLAGS += $(ARCHIVE_CFLAGS)
MFC_COMPILER_LIBS += $(ARCHIVE_LIBS) -lz

check_PROGRAMS += tests/unit/test_layer
tests_unit_test_layer_SOURCES = tests/unit/test_layer.c
tests_unit_test_layer_CFLAGS = $(MFC_TEST_CFLAGS) $(ARCHIVE_CFLAGS)
tests_unit_test_layer_LDADD = $(MFC_COMPILER_LIBS) $(CMOCKA_LIBS)
TESTS += tests/unit/test_layer
