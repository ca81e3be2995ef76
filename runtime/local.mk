### libmfc_runtime: the engine behind mfc-serve (model, tokenizer, templates,
### sampler, paged KV, scheduler, backends). Each part has its own fragment.
noinst_LIBRARIES += libmfc_runtime.a
libmfc_runtime_a_SOURCES = runtime/batch.h
libmfc_runtime_a_CFLAGS = $(AM_CFLAGS) $(JANSSON_CFLAGS) $(PCRE2_CFLAGS) $(YAML_CFLAGS)
MFC_RUNTIME_LIBS = libmfc_runtime.a $(MFC_COMMON_LIBS) $(PCRE2_LIBS) $(YAML_LIBS)
