### libmfc_compiler and the mfc command
noinst_LIBRARIES += libmfc_compiler.a
libmfc_compiler_a_SOURCES =
libmfc_compiler_a_CFLAGS = $(AM_CFLAGS) $(JANSSON_CFLAGS) $(CRYPTO_CFLAGS)
MFC_COMPILER_LIBS = libmfc_compiler.a $(MFC_COMMON_LIBS) $(CURL_LIBS)

bin_PROGRAMS += mfc
mfc_SOURCES = compiler/main.c compiler/cli.h
mfc_CFLAGS = $(AM_CFLAGS) $(JANSSON_CFLAGS)
mfc_LDADD = $(MFC_COMPILER_LIBS)
