/*
 * test_manifest.c: cli/manifest.c without the store: names from image
 * references, the port an image config gives, option checks, and YAML that
 * libyaml's own parser reads back with the same scalars (strings that look
 * like numbers, booleans or ports stay strings; multi-line values survive).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <yaml.h>

#include "cli/manifest.h"

static void test_names(void **state)
{
    (void)state;
    static const char *const cases[][2] = {
        {"llama3-sql", "llama3-sql"},
        {"Team/Llama3_SQL:1", "llama3-sql"},
        {"127.0.0.1:5000/team/m:v1", "m"},
        {"reg.example.com/a/b@sha256:0123", "b"},
        {"__x__", "x"},
        {"___", "mfc"},
        {"sha256:abc", "sha256"},
        {"caf\xc3\xa9", "caf"},
    };
    char out[MANIFEST_NAME_MAX];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        manifest_name_from_ref(cases[i][0], out);
        assert_string_equal(out, cases[i][1]);
        assert_true(manifest_name_valid(out));
    }
    char longref[200];
    memset(longref, 'a', sizeof longref - 1);
    longref[sizeof longref - 1] = '\0';
    manifest_name_from_ref(longref, out);
    assert_int_equal(strlen(out), 63);
    assert_true(manifest_name_valid(out));
    assert_false(manifest_name_valid(""));
    assert_false(manifest_name_valid("-a"));
    assert_false(manifest_name_valid("a-"));
    assert_false(manifest_name_valid("A"));
    assert_false(manifest_name_valid("a_b"));
    assert_true(manifest_name_valid("a-1"));
}

static json_t *config(const char *env_json, const char *ports_json)
{
    char buf[512];
    snprintf(buf, sizeof buf, "{\"config\": {\"Env\": %s, \"ExposedPorts\": %s}}", env_json,
             ports_json);
    json_t *c = json_loads(buf, 0, NULL);
    assert_non_null(c);
    return c;
}

static void test_port(void **state)
{
    (void)state;
    json_t *c = config("[\"PATH=/bin\", \"MFC_PORT=9000\"]", "{\"8080/tcp\": {}}");
    assert_int_equal(manifest_image_port(c), 9000);
    json_decref(c);
    c = config("[\"MFC_PORT=99999\", \"MFC_PORT=x\"]", "{\"7000/udp\": {}, \"7001/tcp\": {}}");
    assert_int_equal(manifest_image_port(c), 7001);
    json_decref(c);
    c = config("[]", "{}");
    assert_int_equal(manifest_image_port(c), 8080);
    json_decref(c);
}

static void test_bad_options(void **state)
{
    (void)state;
    json_t *c = config("[]", "{}"), *docs = NULL;
    struct mf_err err;
    struct manifest_opts o = {.name = "m", .image = "m", .gpus = 1, .replicas = 1};
    o.name = "Bad";
    assert_int_equal(manifest_docs(c, &o, &docs, &err), MF_EINVAL);
    assert_non_null(strstr(err.msg, "\"Bad\""));
    o.name = "m";
    o.gpus = 65;
    assert_int_equal(manifest_docs(c, &o, &docs, &err), MF_EINVAL);
    o.gpus = 1;
    o.replicas = 0;
    assert_int_equal(manifest_docs(c, &o, &docs, &err), MF_EINVAL);
    o.replicas = 1;
    o.image = "";
    assert_int_equal(manifest_docs(c, &o, &docs, &err), MF_EINVAL);
    assert_null(docs);
    json_decref(c);
}

/* The scalar that follows the key `key` anywhere in the YAML stream y, with
 * whether it was quoted; asserts it is found. */
static void find_scalar(const char *y, const char *key, char *value, size_t n, int *quoted)
{
    yaml_parser_t p;
    yaml_event_t ev;
    int next = 0, found = 0;
    assert_true(yaml_parser_initialize(&p));
    yaml_parser_set_input_string(&p, (const unsigned char *)y, strlen(y));
    for (;;) {
        assert_true(yaml_parser_parse(&p, &ev));
        if (ev.type == YAML_STREAM_END_EVENT) {
            yaml_event_delete(&ev);
            break;
        }
        if (ev.type == YAML_SCALAR_EVENT) {
            const char *s = (const char *)ev.data.scalar.value;
            if (next && !found) {
                snprintf(value, n, "%s", s);
                *quoted = ev.data.scalar.style != YAML_PLAIN_SCALAR_STYLE;
                found = 1;
            }
            next = strcmp(s, key) == 0;
        } else {
            next = 0;
        }
        yaml_event_delete(&ev);
    }
    yaml_parser_delete(&p);
    assert_true(found);
}

static void test_yaml_scalars(void **state)
{
    (void)state;
    json_t *c = config("[\"PATH=/bin\", \"A=yes\", \"B=1e3\", \"C=two\\nlines\", \"D=\", "
                       "\"E=plain text\", \"F=.inf\", \"G=-1\", \"H=Null\"]",
                       "{\"8080/tcp\": {}}"),
           *docs = NULL;
    struct mf_err err;
    struct manifest_opts o = {.kind = MANIFEST_COMPOSE, .name = "m", .image = "r/m:1",
                              .port = 8081, .gpus = 2, .replicas = 1};
    assert_int_equal(manifest_docs(c, &o, &docs, &err), 0);
    char *y = NULL;
    size_t len = 0;
    assert_int_equal(manifest_yaml(docs, &y, &len, &err), 0);
    assert_int_equal(strlen(y), len);
    assert_null(strstr(y, "PATH"));
    static const struct {
        const char *key, *value;
        int quoted;
    } want[] = {
        {"A", "yes", 1},    {"B", "1e3", 1},        {"C", "two\nlines", 1},
        {"D", "", 1},       {"E", "plain text", 0}, {"F", ".inf", 1},
        {"G", "-1", 1},     {"H", "Null", 1},       {"MFC_PORT", "8081", 1},
        {"count", "2", 0},  {"image", "r/m:1", 0},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        char v[64];
        int quoted = -1;
        find_scalar(y, want[i].key, v, sizeof v, &quoted);
        assert_string_equal(v, want[i].value);
        assert_int_equal(quoted, want[i].quoted);
    }
    assert_non_null(strstr(y, "- \"8081:8081\"\n"));
    free(y);
    json_decref(docs);
    json_decref(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_port),
        cmocka_unit_test(test_bad_options),
        cmocka_unit_test(test_yaml_scalars),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
