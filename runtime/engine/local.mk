### runtime/engine/: the backend interface, paged KV manager, scheduler,
### engine loop, sampler and stop strings; and their tests
libmfc_runtime_a_SOURCES += runtime/engine/kv.c runtime/engine/kv.h runtime/engine/sched.c runtime/engine/sched.h \
	runtime/engine/engine.c runtime/engine/engine.h \
	runtime/engine/backend.c runtime/engine/backend.h

check_PROGRAMS += tests/unit/test_kv tests/unit/test_sched tests/unit/test_engine \
	tests/unit/test_engine_model
tests_unit_test_kv_SOURCES = tests/unit/test_kv.c
tests_unit_test_kv_CFLAGS = $(MFC_TEST_CFLAGS)
tests_unit_test_kv_LDADD = $(MFC_RUNTIME_LIBS) $(CMOCKA_LIBS)
tests_unit_test_sched_SOURCES = tests/unit/test_sched.c tests/unit/fake_model.c \
	tests/unit/fake_model.h
tests_unit_test_sched_CFLAGS = $(MFC_TEST_CFLAGS)
tests_unit_test_sched_LDADD = $(MFC_RUNTIME_LIBS) $(CMOCKA_LIBS)
tests_unit_test_engine_SOURCES = tests/unit/test_engine.c tests/unit/fake_model.c \
	tests/unit/fake_model.h
tests_unit_test_engine_CFLAGS = $(MFC_TEST_CFLAGS)
tests_unit_test_engine_LDADD = $(MFC_RUNTIME_LIBS) $(CMOCKA_LIBS) $(PTHREAD_LIBS)
## The engine over the real model and CPU backend, on mkmodel's toy llama.
tests_unit_test_engine_model_SOURCES = tests/unit/test_engine_model.c
tests_unit_test_engine_model_CFLAGS = $(MFC_TEST_CFLAGS)
tests_unit_test_engine_model_LDADD = $(MFC_RUNTIME_LIBS) $(CMOCKA_LIBS) $(PTHREAD_LIBS)
TESTS += tests/unit/test_kv tests/unit/test_sched tests/unit/test_engine \
	tests/unit/test_engine_model

## Fuzzing: tests/fuzz/run builds fuzz_sched (sched + kv + the fake model).
EXTRA_DIST += tests/fuzz/fuzz_sched.c tests/fuzz/corpus/sched

## Sampler and stop strings
libmfc_runtime_a_SOURCES += runtime/engine/sampler.c runtime/engine/sampler.h runtime/engine/stop.c runtime/engine/stop.h

check_PROGRAMS += tests/unit/test_sampler tests/unit/test_stop
tests_unit_test_sampler_SOURCES = tests/unit/test_sampler.c
tests_unit_test_sampler_CFLAGS = $(MFC_TEST_CFLAGS)
tests_unit_test_sampler_LDADD = $(MFC_RUNTIME_LIBS) $(CMOCKA_LIBS)
tests_unit_test_stop_SOURCES = tests/unit/test_stop.c
tests_unit_test_stop_CFLAGS = $(MFC_TEST_CFLAGS)
tests_unit_test_stop_LDADD = $(MFC_RUNTIME_LIBS) $(CMOCKA_LIBS)
TESTS += tests/unit/test_sampler tests/unit/test_stop
EXTRA_DIST += tests/fuzz/corpus/template tests/fuzz/fuzz_template.c

## Speculative decoding: proposals (prompt lookup, a draft model with its own
## paged KV) and their verification
libmfc_runtime_a_SOURCES += runtime/engine/spec.c runtime/engine/spec.h runtime/engine/spec_int.h \
	runtime/engine/spec_draft.c runtime/engine/lookup.c runtime/engine/lookup.h
check_PROGRAMS += tests/unit/test_spec
tests_unit_test_spec_SOURCES = tests/unit/test_spec.c
tests_unit_test_spec_CFLAGS = $(MFC_TEST_CFLAGS)
tests_unit_test_spec_LDADD = $(MFC_RUNTIME_LIBS) $(CMOCKA_LIBS) $(PTHREAD_LIBS) -lm
TESTS += tests/unit/test_spec
check_PROGRAMS += tests/unit/test_engine_spec
tests_unit_test_engine_spec_SOURCES = tests/unit/test_engine_spec.c tests/unit/fake_model.c \
	tests/unit/fake_model.h
tests_unit_test_engine_spec_CFLAGS = $(MFC_TEST_CFLAGS)
tests_unit_test_engine_spec_LDADD = $(MFC_RUNTIME_LIBS) $(CMOCKA_LIBS) $(PTHREAD_LIBS) -lm
TESTS += tests/unit/test_engine_spec
## Speculation over the real model and CPU backend (mkmodel's toy llama).
check_PROGRAMS += tests/unit/test_spec_model
tests_unit_test_spec_model_SOURCES = tests/unit/test_spec_model.c
tests_unit_test_spec_model_CFLAGS = $(MFC_TEST_CFLAGS)
tests_unit_test_spec_model_LDADD = $(MFC_RUNTIME_LIBS) $(CMOCKA_LIBS) $(PTHREAD_LIBS)
TESTS += tests/unit/test_spec_model
check_PROGRAMS += tests/unit/test_sched_draft
tests_unit_test_sched_draft_SOURCES = tests/unit/test_sched_draft.c
tests_unit_test_sched_draft_CFLAGS = $(MFC_TEST_CFLAGS)
tests_unit_test_sched_draft_LDADD = $(MFC_RUNTIME_LIBS) $(CMOCKA_LIBS)
TESTS += tests/unit/test_sched_draft
