### Chat templates (runtime/template*) and the sampler (runtime/sampler*)
libmfc_runtime_a_SOURCES += \
	runtime/template.c runtime/template.h runtime/template_int.h \
	runtime/template_lex.c runtime/template_exec.c runtime/template_funcs.c \
	runtime/template_value.c runtime/template_chat.c runtime/template_family.c

check_PROGRAMS += tests/unit/test_template_jinja
tests_unit_test_template_jinja_SOURCES = tests/unit/test_template_jinja.c
tests_unit_test_template_jinja_CFLAGS = $(MFC_TEST_CFLAGS)
tests_unit_test_template_jinja_LDADD = $(MFC_RUNTIME_LIBS) $(CMOCKA_LIBS)
TESTS += tests/unit/test_template_jinja
EXTRA_DIST += tests/tools/jinja-render.mjs tests/data/chat-templates

check_PROGRAMS += tests/unit/test_template
tests_unit_test_template_SOURCES = tests/unit/test_template.c
tests_unit_test_template_CFLAGS = $(MFC_TEST_CFLAGS)
tests_unit_test_template_LDADD = $(MFC_RUNTIME_LIBS) $(CMOCKA_LIBS)
TESTS += tests/unit/test_template
EXTRA_DIST += tests/data/template tests/tools/gotmpl/main.go

libmfc_runtime_a_SOURCES += runtime/sampler.c runtime/sampler.h runtime/stop.c runtime/stop.h

check_PROGRAMS += tests/unit/test_sampler tests/unit/test_stop
tests_unit_test_sampler_SOURCES = tests/unit/test_sampler.c
tests_unit_test_sampler_CFLAGS = $(MFC_TEST_CFLAGS)
tests_unit_test_sampler_LDADD = $(MFC_RUNTIME_LIBS) $(CMOCKA_LIBS)
tests_unit_test_stop_SOURCES = tests/unit/test_stop.c
tests_unit_test_stop_CFLAGS = $(MFC_TEST_CFLAGS)
tests_unit_test_stop_LDADD = $(MFC_RUNTIME_LIBS) $(CMOCKA_LIBS)
TESTS += tests/unit/test_sampler tests/unit/test_stop
EXTRA_DIST += tests/fuzz/corpus/template tests/fuzz/fuzz_template.c
