### LoRA adapters: PEFT conversion, checks against the base, mfc lora check
libmfc_compiler_a_SOURCES += compiler/cmd_lora.c
