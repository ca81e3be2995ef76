### RUN steps in a bubblewrap sandbox (compiler/sandbox*)
libmfc_compiler_a_SOURCES += compiler/exec_run.c
