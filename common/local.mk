### libmfc_common: shared by the compiler and the runtime
noinst_LIBRARIES += libmfc_common.a
libmfc_common_a_SOURCES = \
	common/err.c common/err.h \
	common/buf.c common/buf.h \
	common/log.c common/log.h \
	common/num.c common/num.h \
	common/utf8.c common/utf8.h \
	common/sha256.c common/sha256.h \
	common/file.c common/file.h \
	common/json.c common/json.h \
	common/ggml_type.c common/ggml_type.h \
	common/cpu.c common/cpu.h
libmfc_common_a_CFLAGS = $(AM_CFLAGS) $(JANSSON_CFLAGS) $(CRYPTO_CFLAGS)
## Link line for any program using libmfc_common.
MFC_COMMON_LIBS = libmfc_common.a $(JANSSON_LIBS) $(CRYPTO_LIBS) -lm $(PTHREAD_LIBS)
