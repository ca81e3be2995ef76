### Hugging Face import: safetensors reader (common/), HF dir -> GGUF, mfc convert
libmfc_compiler_a_SOURCES += compiler/cmd_convert.c
libmfc_common_a_SOURCES += common/safetensors.h
libmfc_compiler_a_SOURCES += compiler/exec_convert.c
