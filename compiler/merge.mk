### Build-time adapter merge and quantize-on-build, mfc lora merge
libmfc_compiler_a_SOURCES += compiler/cmd_lora_merge.c
libmfc_compiler_a_SOURCES += compiler/exec_merge.c
libmfc_compiler_a_SOURCES += compiler/lora_merge.c compiler/lora_merge.h
