/*
 * test_source_ref.c: unit tests for fetch/source_ref.c: which layer of an
 * mfc image, a Docker Model Runner, ModelPack or Ollama manifest is the model
 * (or the adapter), ambiguity errors, where bare names go, and the YAML
 * reader for model.yaml.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <string.h>

#include "fetch/source_ref.h"

#define D(c) "\"sha256:" c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c "\""
#define L(mt, d) "{\"mediaType\":\"" mt "\",\"digest\":" d ",\"size\":1}"
#define LA(mt, d, fp)                                                                              \
    "{\"mediaType\":\"" mt "\",\"digest\":" d                                                      \
    ",\"size\":1,\"annotations\":{\"org.cncf.model.filepath\":\"" fp "\"}}"
#define TAR "application/vnd.oci.image.layer.v1.tar"

static int pick(const char *text, int adapter, struct source_ref_pick *p, struct mf_err *err)
{
    json_error_t je;
    json_t *m = json_loads(text, 0, &je);
    assert_non_null(m);
    int rc = source_ref_pick(m, adapter, p, err);
    json_decref(m);
    return rc;
}

static void test_mfc_image(void **state)
{
    struct source_ref_pick p;
    struct mf_err err;
    const char *m = "{\"layers\":[" L(TAR, D("a")) "," LA(TAR, D("b"), "/models/model.gguf") ","
        LA(TAR, D("c"), "/adapters/sql.gguf") "," LA(TAR "+gzip", D("d"), "/etc/mfc/model.yaml")
        "]}";
    (void)state;
    assert_int_equal(pick(m, 0, &p, &err), 0);
    assert_int_equal(p.weight, 1);
    assert_true(p.tar);
    assert_string_equal(p.member, "models/model.gguf");
    assert_int_equal(p.config, 3);
    assert_string_equal(p.format, "mfc");
    /* ADAPTER: the one adapter layer */
    assert_int_equal(pick(m, 1, &p, &err), 0);
    assert_int_equal(p.weight, 2);
    assert_string_equal(p.member, "adapters/sql.gguf");
}

static void test_adapter_ambiguous(void **state)
{
    struct source_ref_pick p;
    struct mf_err err;
    const char *m = "{\"layers\":[" LA(TAR, D("b"), "/models/model.gguf") ","
        LA(TAR, D("c"), "/adapters/a.gguf") "," LA(TAR, D("e"), "/adapters/b.gguf") "]}";
    (void)state;
    assert_int_equal(pick(m, 1, &p, &err), MF_EINVAL);
    assert_non_null(strstr(err.msg, "ambiguous"));
    assert_non_null(strstr(err.msg, "sha256:cccc"));
    assert_non_null(strstr(err.msg, "sha256:eeee"));
    /* an adapter image whose only GGUF is model-typed is taken */
    const char *one = "{\"layers\":[" L("application/vnd.docker.ai.gguf.v3", D("f")) "]}";
    assert_int_equal(pick(one, 1, &p, &err), 0);
    assert_int_equal(p.weight, 0);
}

static void test_docker_model(void **state)
{
    struct source_ref_pick p;
    struct mf_err err;
    const char *m = "{\"config\":{\"mediaType\":\"application/vnd.docker.ai.model.config.v0.1+json\"},"
        "\"layers\":[" L("application/vnd.docker.ai.license", D("a")) ","
        L("application/vnd.docker.ai.gguf.v3.mmproj", D("b")) ","
        L("application/vnd.docker.ai.gguf.v3", D("c")) ","
        L("application/vnd.docker.ai.gguf.v3.lora", D("d")) "]}";
    (void)state;
    assert_int_equal(pick(m, 0, &p, &err), 0);
    assert_int_equal(p.weight, 2);
    assert_false(p.tar);
    assert_string_equal(p.format, "docker-model");
    assert_int_equal(pick(m, 1, &p, &err), 0);
    assert_int_equal(p.weight, 3);
}

static void test_modelpack(void **state)
{
    struct source_ref_pick p;
    struct mf_err err;
    const char *m = "{\"artifactType\":\"application/vnd.cncf.model.manifest.v1+json\","
        "\"layers\":[" LA("application/vnd.cncf.model.weight.config.v1.raw", D("a"), "config.json") ","
        LA("application/vnd.cncf.model.doc.v1.raw", D("b"), "README.gguf") ","
        LA("application/vnd.cncf.model.weight.v1.raw", D("c"), "model-q4.gguf") "]}";
    (void)state;
    assert_int_equal(pick(m, 0, &p, &err), 0);
    assert_int_equal(p.weight, 2);
    assert_false(p.tar);
    assert_string_equal(p.format, "modelpack");
    /* a raw weight without a .gguf path is not taken for one */
    const char *st = "{\"layers\":[" LA("application/vnd.cncf.model.weight.v1.raw", D("c"),
                                       "model.safetensors") "]}";
    assert_int_equal(pick(st, 0, &p, &err), MF_ENOTFOUND);
    const char *tar = "{\"layers\":[" LA("application/vnd.cncf.model.weight.v1.tar", D("c"),
                                        "/m/x.gguf") "]}";
    assert_int_equal(pick(tar, 0, &p, &err), 0);
    assert_true(p.tar);
    assert_string_equal(p.member, "m/x.gguf");
}

static void test_ollama(void **state)
{
    struct source_ref_pick p;
    struct mf_err err;
    const char *m = "{\"mediaType\":\"application/vnd.docker.distribution.manifest.v2+json\","
        "\"layers\":[" L("application/vnd.ollama.image.model", D("a")) ","
        L("application/vnd.ollama.image.template", D("b")) ","
        L("application/vnd.ollama.image.system", D("c")) ","
        L("application/vnd.ollama.image.params", D("d")) ","
        L("application/vnd.ollama.image.license", D("e")) "]}";
    (void)state;
    assert_int_equal(pick(m, 0, &p, &err), 0);
    assert_int_equal(p.weight, 0);
    assert_string_equal(p.format, "ollama");
    assert_int_equal(p.tmpl, 1);
    assert_int_equal(p.system, 2);
    assert_int_equal(p.params, 3);
    assert_int_equal(p.messages, -1);
    assert_int_equal(pick(m, 1, &p, &err), 0); /* an adapter image: its one GGUF */
    const char *none = "{\"layers\":[" L("application/vnd.ollama.image.license", D("e")) "]}";
    assert_int_equal(pick(none, 0, &p, &err), MF_ENOTFOUND);
    assert_non_null(strstr(err.msg, "no GGUF model layer"));
}

static void test_remote(void **state)
{
    char out[256];
    struct mf_err err;
    (void)state;
    assert_int_equal(source_ref_remote("llama3", out, sizeof out, &err), 0);
    assert_string_equal(out, "registry.ollama.ai/library/llama3");
    assert_int_equal(source_ref_remote("ns/m:7b", out, sizeof out, &err), 0);
    assert_string_equal(out, "registry.ollama.ai/ns/m:7b");
    assert_int_equal(source_ref_remote("127.0.0.1:5000/t/m:1", out, sizeof out, &err), 0);
    assert_string_equal(out, "127.0.0.1:5000/t/m:1");
    assert_int_equal(source_ref_remote("docker.io/ai/smollm2", out, sizeof out, &err), 0);
    assert_string_equal(out, "docker.io/ai/smollm2");
    assert_int_equal(source_ref_remote("localhost/x", out, sizeof out, &err), 0);
    assert_string_equal(out, "localhost/x");
}

static void test_yaml(void **state)
{
    const char *y = "schema: \"mfc.config/v1\"\nparams:\n  temperature: 0.5\n  num_ctx: 4096\n"
                    "  stop:\n  - \"<|end|>\"\n  mirostat: \"2\"\n  penalize_newline: true\n"
                    "system: |-\n  be brief\n  really\n";
    struct mf_err err;
    (void)state;
    json_t *v = source_ref_yaml_json(y, strlen(y), &err);
    assert_non_null(v);
    json_t *params = json_object_get(v, "params");
    assert_true(json_is_real(json_object_get(params, "temperature")));
    assert_int_equal(json_integer_value(json_object_get(params, "num_ctx")), 4096);
    assert_string_equal(json_string_value(json_object_get(params, "mirostat")), "2");
    assert_true(json_is_true(json_object_get(params, "penalize_newline")));
    assert_string_equal(json_string_value(json_array_get(json_object_get(params, "stop"), 0)),
                        "<|end|>");
    assert_string_equal(json_string_value(json_object_get(v, "system")), "be brief\nreally");
    json_decref(v);
    assert_null(source_ref_yaml_json("- a\n", 4, &err));
    assert_null(source_ref_yaml_json("a: [\n", 5, &err));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mfc_image), cmocka_unit_test(test_adapter_ambiguous),
        cmocka_unit_test(test_docker_model), cmocka_unit_test(test_modelpack),
        cmocka_unit_test(test_ollama), cmocka_unit_test(test_remote), cmocka_unit_test(test_yaml),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
