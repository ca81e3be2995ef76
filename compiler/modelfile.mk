### Modelfile front end (compiler/modelfile.*), mfc check/fmt, and their tests
libmfc_compiler_a_SOURCES += \
	compiler/modelfile.c compiler/modelfile.h compiler/modelfile_int.h \
	compiler/modelfile_lex.c compiler/modelfile_vars.c compiler/modelfile_flags.c \
	compiler/modelfile_param.c compiler/modelfile_isprint.c \
	compiler/modelfile_diag.c compiler/modelfile_json.c compiler/modelfile_fmt.c \
	compiler/cmd_check.c compiler/cmd_fmt.c compiler/cmd_modelfile.c compiler/cmd_modelfile.h
