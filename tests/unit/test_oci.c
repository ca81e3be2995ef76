/*
 * test_oci.c: unit tests for image/oci.c: the config document (fields,
 * diff_ids, history), stable image digests, archive member checks, output
 * specs, a docker archive round trip through oci_export / oci_load, and the
 * check of a docker manifest.json against the index (image/oci_docker.c).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "image/oci.h"
#include "store/store.h"
#include "tests/unit/tmpdir.h"

struct fixture {
    char dir[64];    /* the temporary store root */
    struct store *s; /* open on dir */
};

static int setup(void **state)
{
    struct fixture *fx = calloc(1, sizeof *fx);
    struct mf_err err;
    if (!fx)
        return -1;
    if (test_tmpdir_make(fx->dir, sizeof fx->dir, "oci") != 0 ||
        store_open(&fx->s, fx->dir, &err) != 0)
        return -1;
    *state = fx;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *fx = *state;
    store_close(fx->s);
    test_tmpdir_remove(fx->dir);
    free(fx);
    return 0;
}

static const char *ep[] = {"/usr/bin/mfc-serve", "--config", "/etc/mfc/model.yaml"};
static const struct oci_kv labels[] = {{"org.opencontainers.image.title", "t"}};

static int make_image(struct store *s, const char *tag, struct store_desc *m, struct mf_err *err)
{
    struct layer_result w, c;
    struct layer_entry we = {.path = "models/m.gguf", .data = "GGUF", .len = 4, .mode = 0644};
    struct layer_entry ce = {.path = "etc/mfc/model.yaml", .data = "a: 1\n", .len = 5,
                             .mode = 0644};
    int rc = layer_write(s, &we, 1, LAYER_NONE, 0, &w, err);
    if (rc == 0)
        rc = layer_write(s, &ce, 1, LAYER_GZIP, 0, &c, err);
    struct oci_layer ls[] = {{&w, "FROM ./m.gguf"}, {&c, "PARAMETER x"}};
    struct oci_image img = {.entrypoint = ep, .n_entrypoint = 3, .labels = labels, .n_labels = 1,
                            .layers = ls, .n_layers = 2, .architecture = "amd64"};
    return rc ? rc : oci_image_write(s, &img, tag, m, err);
}

static void test_config(void **state)
{
    struct fixture *fx = *state;
    struct mf_err err;
    struct layer_result c;
    struct layer_entry ce = {.path = "a", .data = "x", .len = 1, .mode = 0644};
    assert_int_equal(layer_write(fx->s, &ce, 1, LAYER_GZIP, 0, &c, &err), 0);
    struct oci_layer ls[] = {{&c, "FROM x"}};
    const char *notes[] = {"SYSTEM hi"};
    struct oci_image img = {.entrypoint = ep, .n_entrypoint = 3, .layers = ls, .n_layers = 1,
                            .notes = notes, .n_notes = 1, .created = 86400};
    json_t *cfg;
    assert_int_equal(oci_config_json(&img, &cfg, &err), 0);
    assert_string_equal(json_string_value(json_object_get(cfg, "os")), "linux");
    assert_string_equal(json_string_value(json_object_get(cfg, "created")), "1970-01-02T00:00:00Z");
    json_t *diff = json_object_get(json_object_get(cfg, "rootfs"), "diff_ids");
    assert_string_equal(json_string_value(json_array_get(diff, 0)), c.diff_id);
    json_t *conf = json_object_get(cfg, "config");
    assert_non_null(json_object_get(json_object_get(conf, "ExposedPorts"), "8080/tcp"));
    json_t *hist = json_object_get(cfg, "history");
    assert_int_equal(json_array_size(hist), 2);
    assert_true(json_is_true(json_object_get(json_array_get(hist, 1), "empty_layer")));
    json_decref(cfg);
}

static void test_stable_digest(void **state)
{
    struct fixture *fx = *state;
    struct mf_err err;
    struct store_desc a, b;
    assert_int_equal(make_image(fx->s, "img:1", &a, &err), 0);
    assert_int_equal(make_image(fx->s, "img:2", &b, &err), 0);
    assert_string_equal(a.digest, b.digest);
    json_t *v;
    assert_int_equal(oci_inspect(fx->s, "img:1", &v, &err), 0);
    json_t *l0 = json_array_get(json_object_get(json_object_get(v, "manifest"), "layers"), 0);
    json_t *ann = json_object_get(l0, "annotations");
    assert_string_equal(json_string_value(json_object_get(ann, OCI_ANN_FILEPATH)), "/models/m.gguf");
    assert_string_equal(json_string_value(json_object_get(ann, OCI_ANN_TITLE)), "m.gguf");
    json_decref(v);
    assert_int_equal(oci_inspect(fx->s, "nope", &v, &err), MF_ENOTFOUND);
}

static void test_member_check(void **state)
{
    (void)state;
    struct mf_err err;
    const char *c;
    assert_int_equal(oci_member_check("./blobs/sha256/ab", &c, &err), 0);
    assert_string_equal(c, "blobs/sha256/ab");
    assert_int_equal(oci_member_check("blobs/", &c, &err), 0);
    const char *bad[] = {"/etc/passwd", "../x", "a/../../x", "a//b", "a/./b", ""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_int_equal(oci_member_check(bad[i], &c, &err), MF_EFORMAT);
}

static void test_output_parse(void **state)
{
    (void)state;
    struct oci_output o;
    struct mf_err err;
    assert_int_equal(oci_output_parse("type=oci,dest=/tmp/x", &o, &err), 0);
    assert_int_equal(o.type, OCI_OUT_OCI);
    assert_false(o.tar);
    assert_int_equal(oci_output_parse("type=oci,dest=x.tar", &o, &err), 0);
    assert_true(o.tar);
    assert_int_equal(oci_output_parse("x.tar", &o, &err), 0);
    assert_int_equal(o.type, OCI_OUT_DOCKER);
    assert_int_equal(oci_output_parse("type=docker,dest=dir", &o, &err), MF_EINVAL);
    assert_int_equal(oci_output_parse("type=zip,dest=x", &o, &err), MF_EINVAL);
    assert_int_equal(oci_output_parse("type=oci", &o, &err), MF_EINVAL);
    /* type=registry: name= and registry.insecure=true, no dest= */
    assert_int_equal(oci_output_parse("type=registry", &o, &err), 0);
    assert_int_equal(o.type, OCI_OUT_REGISTRY);
    assert_string_equal(o.name, "");
    assert_false(o.insecure);
    assert_int_equal(oci_output_parse("type=registry,name=r:5000/a/b:1,registry.insecure=true",
                                      &o, &err), 0);
    assert_string_equal(o.name, "r:5000/a/b:1");
    assert_true(o.insecure);
    assert_int_equal(oci_output_parse("type=registry,dest=x", &o, &err), MF_EINVAL);
    assert_int_equal(oci_output_parse("type=oci,dest=x,name=y", &o, &err), MF_EINVAL);
    assert_int_equal(oci_output_parse("type=registry,registry.insecure=yes", &o, &err), MF_EINVAL);
}

static void test_roundtrip(void **state)
{
    struct fixture *fx = *state;
    struct mf_err err;
    struct store_desc a;
    assert_int_equal(make_image(fx->s, "img", &a, &err), 0);
    char tar[96];
    snprintf(tar, sizeof tar, "%s/out.tar", fx->dir);
    struct oci_output o;
    assert_int_equal(oci_output_parse(tar, &o, &err), 0);
    assert_int_equal(oci_export(fx->s, "img", "example.com/x:v1", &o, &err), 0);
    size_t n = 0;
    assert_int_equal(oci_load(fx->s, tar, NULL, &n, &err), 0);
    assert_int_equal(n, 1);
    struct store_tag t;
    assert_int_equal(store_tag_get(fx->s, "example.com/x:v1", &t, &err), 0);
    assert_string_equal(t.desc.digest, a.digest);
    assert_int_equal(oci_load(fx->s, "/nonexistent.tar", NULL, &n, &err), MF_EIO);
}

#define HA "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define HB "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
#define HC "cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc"

static int docker(const char *text, struct mf_err *err)
{
    static char layers[2][STORE_DIGEST_BUF] = {"sha256:" HB, "sha256:" HC};
    struct oci_docker_image img = {.config = "sha256:" HA, .layers = layers, .n_layers = 2};
    static const char *const members[] = {"index.json", "oci-layout", "blobs/sha256/" HC,
                                          "blobs/sha256/" HA, "blobs/sha256/" HB,
                                          "manifest.json", "repositories"};
    return oci_docker_check(text, strlen(text), &img, 1, members, 7, err);
}

static void test_docker_manifest(void **state)
{
    (void)state;
    struct mf_err err;
    assert_int_equal(docker("[{\"Config\":\"blobs/sha256/" HA "\",\"RepoTags\":[\"demo:1\"],"
                            "\"Layers\":[\"blobs/sha256/" HB "\",\"./blobs/sha256/" HC "\"]}]",
                            &err),
                     0);
    assert_int_equal(docker("[{\"Config\":\"blobs/sha256/" HA "\",\"RepoTags\":null,"
                            "\"Layers\":[\"blobs/sha256/" HB "\",\"blobs/sha256/" HC "\"]}]",
                            &err),
                     0);
    static const struct {
        const char *text, *says;
    } bad[] = {
        {"{}", "non-empty list"},
        {"[]", "non-empty list"},
        {"[1]", "entry 1 is not an object"},
        {"[{\"Config\":\"../x\",\"Layers\":[]}]", "Config '../x' is not a safe relative"},
        {"[{\"Config\":\"/etc/passwd\",\"Layers\":[]}]", "not a safe relative path"},
        {"[{\"Config\":\"blobs/sha256/" HA "/../../x\",\"Layers\":[]}]", "not a safe"},
        {"[{\"Config\":\"blobs/sha256/" HA "x\",\"Layers\":[]}]", "is not in the archive"},
        {"[{\"Config\":7,\"Layers\":[]}]", "Config must be a path"},
        {"[{\"Config\":\"blobs/sha256/" HB "\",\"Layers\":[]}]", "not the config of any"},
        {"[{\"Config\":\"index.json\",\"Layers\":[]}]", "not the config of any"},
        {"[{\"Config\":\"blobs/sha256/" HA "\",\"Layers\":[\"blobs/sha256/" HB "\"]}]",
         "Layers must list the image's 2 layers"},
        {"[{\"Config\":\"blobs/sha256/" HA "\",\"Layers\":[\"blobs/sha256/" HC "\","
         "\"blobs/sha256/" HB "\"]}]",
         "Layers[0] is not layer 1"},
        {"[{\"Config\":\"blobs/sha256/" HA "\",\"Layers\":[\"blobs/sha256/" HB "\","
         "\"repositories\"]}]",
         "Layers[1] is not layer 2"},
        {"[{\"Config\":\"blobs/sha256/" HA "\",\"RepoTags\":[\"a b\"],\"Layers\":["
         "\"blobs/sha256/" HB "\",\"blobs/sha256/" HC "\"]}]",
         "RepoTags[0] is not an image name"},
        {"[{\"Config\":\"blobs/sha256/" HA "\",\"Layers\":[\"blobs/sha256/" HB "\","
         "\"blobs/sha256/" HC "\"]},{\"Config\":\"blobs/sha256/" HA "\",\"Layers\":[]}]",
         "lists 2 images, index.json 1"},
        {"[{\"Config\": root:x:0:0}]", "invalid JSON"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(docker(bad[i].text, &err), MF_EFORMAT);
        if (!strstr(err.msg, bad[i].says))
            fail_msg("%s: '%s' lacks '%s'", bad[i].text, err.msg, bad[i].says);
    }
    assert_null(strstr(err.msg, "root")); /* a JSON error does not quote the file */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_config, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stable_digest, setup, teardown),
        cmocka_unit_test(test_member_check),
        cmocka_unit_test(test_output_parse),
        cmocka_unit_test_setup_teardown(test_roundtrip, setup, teardown),
        cmocka_unit_test(test_docker_manifest),
    };
    return cmocka_run_group_tests_name("oci", tests, NULL, NULL);
}
