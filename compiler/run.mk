### mfc serve / mfc run (compiler/cmd_serve.c) and the API client tests
libmfc_compiler_a_SOURCES += compiler/cmd_serve.c
libmfc_compiler_a_SOURCES += compiler/run.h compiler/run_image.c compiler/run_server.c \
	compiler/run_client.c compiler/run_chat.h compiler/run_chat.c
