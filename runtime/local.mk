### libmfc_runtime: everything behind mfc-serve; each folder under runtime/
### (model, engine, cpu, cuda, serve) adds its part in its own local.mk.
noinst_LIBRARIES += libmfc_runtime.a
libmfc_runtime_a_SOURCES =
libmfc_runtime_a_CFLAGS = $(AM_CFLAGS) $(JANSSON_CFLAGS) $(YAML_CFLAGS)
MFC_RUNTIME_LIBS = libmfc_runtime.a $(MFC_TEXT_LIBS) $(MFC_COMMON_LIBS) $(YAML_LIBS)
