### GGUF reader/writer (common/gguf.*), mfc inspect, and their tests
libmfc_common_a_SOURCES += \
	common/gguf.c common/gguf.h common/gguf_int.h \
	common/gguf_write.c
