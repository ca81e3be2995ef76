### mfc serve / mfc run (compiler/cmd_serve.c) and the API client tests
libmfc_compiler_a_SOURCES += compiler/cmd_serve.c
