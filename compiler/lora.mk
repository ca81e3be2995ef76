### LoRA adapters: PEFT conversion, checks against the base, mfc lora check
libmfc_compiler_a_SOURCES += compiler/cmd_lora.c
libmfc_compiler_a_SOURCES += compiler/exec_lora.c
