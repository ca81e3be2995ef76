/*
 * test_registry.c: the registry client's parsers over untrusted text:
 * image references (docker's rules), WWW-Authenticate challenges (hostile
 * inputs included), auth files (docker config.json / podman auth.json) and
 * base64.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "registry/registry.h"
#include "registry/registry_int.h"

struct ref_case {
    const char *in;     /* the reference */
    const char *host;   /* expected host, or NULL for "must fail" */
    const char *domain; /* expected domain */
    const char *repo;   /* expected repository */
    const char *tag;    /* expected tag */
    int plain;          /* expected plain_http */
};

#define D64 "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

static const struct ref_case refs[] = {
    {"alpine", "registry-1.docker.io", "docker.io", "library/alpine", "latest", 0},
    {"alpine:3.19", "registry-1.docker.io", "docker.io", "library/alpine", "3.19", 0},
    {"docker.io/alpine", "registry-1.docker.io", "docker.io", "library/alpine", "latest", 0},
    {"user/app:v1", "registry-1.docker.io", "docker.io", "user/app", "v1", 0},
    {"127.0.0.1:5000/team/m:v1", "127.0.0.1:5000", "127.0.0.1:5000", "team/m", "v1", 1},
    {"localhost/m", "localhost", "localhost", "m", "latest", 1},
    {"localhost:5000/a/b/c", "localhost:5000", "localhost:5000", "a/b/c", "latest", 1},
    {"ghcr.io/o/r:tag_1.2-x", "ghcr.io", "ghcr.io", "o/r", "tag_1.2-x", 0},
    {"quay.io/a__b/c--d", "quay.io", "quay.io", "a__b/c--d", "latest", 0},
    {"[::1]:5000/m", "[::1]:5000", "[::1]:5000", "m", "latest", 1},
    {"reg.example.com/m@" D64, "reg.example.com", "reg.example.com", "m", "", 0},
    {"reg.example.com/m:t@" D64, "reg.example.com", "reg.example.com", "m", "t", 0},
    /* Hugging Face's mixed-case names, as Ollama takes them; sent lowercased */
    {"hf.co/bartowski/Llama-3.2-1B-Instruct-GGUF:Q4_K_M", "hf.co", "hf.co",
     "bartowski/llama-3.2-1b-instruct-gguf", "Q4_K_M", 0},
    {"huggingface.co/Qwen/Qwen2.5-0.5B-Instruct-GGUF", "huggingface.co", "huggingface.co",
     "qwen/qwen2.5-0.5b-instruct-gguf", "latest", 0},
    {"ghcr.io/Owner/Repo", NULL, NULL, NULL, NULL, 0}, /* elsewhere names are lowercase */
    {"", NULL, NULL, NULL, NULL, 0},
    {"Alpine", NULL, NULL, NULL, NULL, 0},
    {"a//b", NULL, NULL, NULL, NULL, 0},
    {"a/", NULL, NULL, NULL, NULL, 0},
    {"a:", NULL, NULL, NULL, NULL, 0},
    {"a:.x", NULL, NULL, NULL, NULL, 0},
    {"a@sha256:12", NULL, NULL, NULL, NULL, 0},
    {"a___b", NULL, NULL, NULL, NULL, 0},
    {"a.-b", NULL, NULL, NULL, NULL, 0},
    {"host:99999999/m", NULL, NULL, NULL, NULL, 0},
    {"-host.com/m", NULL, NULL, NULL, NULL, 0},
    {"host.com:/m", NULL, NULL, NULL, NULL, 0},
    {"m:t\n", NULL, NULL, NULL, NULL, 0},
};

static void test_ref_parse(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof refs / sizeof refs[0]; i++) {
        const struct ref_case *c = &refs[i];
        struct registry_ref r;
        struct mf_err err;
        int rc = registry_ref_parse(c->in, &r, &err);
        if (!c->host) {
            if (rc == 0)
                fail_msg("'%s' parsed but must not", c->in);
            assert_int_equal(r.host[0], '\0');
            continue;
        }
        if (rc != 0)
            fail_msg("'%s': %s", c->in, err.msg);
        assert_string_equal(r.host, c->host);
        assert_string_equal(r.domain, c->domain);
        assert_string_equal(r.repo, c->repo);
        assert_string_equal(r.tag, c->tag);
        assert_int_equal(r.plain_http, c->plain);
    }
}

static void test_ref_long(void **state)
{
    (void)state;
    char big[2000];
    memset(big, 'a', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    struct registry_ref r;
    assert_int_not_equal(registry_ref_parse(big, &r, NULL), 0);
    memset(big, 'a', 300);
    big[300] = '\0'; /* a repository over the 255-byte limit */
    assert_int_not_equal(registry_ref_parse(big, &r, NULL), 0);
}

static void test_challenge(void **state)
{
    (void)state;
    struct registry_challenge c;
    const char *v = "Bearer realm=\"https://auth.docker.io/token\",service=\"registry.docker.io\","
                    "scope=\"repository:samalba/my-app:pull,push\"";
    assert_int_equal(registry_challenge_parse(v, strlen(v), &c, NULL), 0);
    assert_string_equal(c.scheme, "Bearer");
    assert_string_equal(c.realm, "https://auth.docker.io/token");
    assert_string_equal(c.service, "registry.docker.io");
    assert_string_equal(c.scope, "repository:samalba/my-app:pull,push");

    v = "Basic realm=\"basic-realm\"";
    assert_int_equal(registry_challenge_parse(v, strlen(v), &c, NULL), 0);
    assert_string_equal(c.scheme, "Basic");

    /* unquoted values, odd spacing, escapes, case, a Basic first */
    v = "Basic realm=x, bearer  REALM=http://h:1/t?a=b ,  Service = \"s\\\"q\" , other=1";
    assert_int_equal(registry_challenge_parse(v, strlen(v), &c, NULL), 0);
    assert_string_equal(c.scheme, "bearer");
    assert_string_equal(c.realm, "http://h:1/t?a=b");
    assert_string_equal(c.service, "s\"q");
}

static void test_challenge_hostile(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "", " ", ",", "=", "Bearer realm=\"unterminated", "Bearer realm=\"a\x01b\"",
        "Negotiate abc", "Bearer =x", "\"Bearer\" realm=x",
    };
    struct registry_challenge c;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = registry_challenge_parse(bad[i], strlen(bad[i]), &c, NULL);
        if (rc == 0 && strcasecmp(c.scheme, "Basic") != 0 && !c.realm[0])
            fail_msg("'%s' gave a Bearer challenge without a realm", bad[i]);
    }
    /* a realm longer than the buffer is refused, not cut */
    char big[REGISTRY_CHALLENGE_MAX + 100];
    int n = snprintf(big, sizeof big, "Bearer realm=\"");
    memset(big + n, 'r', sizeof big - (size_t)n - 2);
    big[sizeof big - 2] = '"';
    big[sizeof big - 1] = '\0';
    assert_int_not_equal(registry_challenge_parse(big, strlen(big), &c, NULL), 0);
    /* len bounds the read: no NUL needed within it */
    const char v[] = {'B', 'a', 's', 'i', 'c'};
    assert_int_equal(registry_challenge_parse(v, sizeof v, &c, NULL), 0);
}

static void test_auth_parse(void **state)
{
    (void)state;
    struct registry_cred c;
    char helper[64];
    /* "alice:s3cr:et" */
    const char *t = "{\"auths\":{\"https://127.0.0.1:5000/v1/\":{\"auth\":\"YWxpY2U6czNjcjpldA==\"}}}";
    assert_int_equal(registry_auth_parse(t, strlen(t), "127.0.0.1:5000", &c, helper, NULL), 0);
    assert_string_equal(c.user, "alice");
    assert_string_equal(c.secret, "s3cr:et");
    assert_string_equal(helper, "");
    assert_int_equal(registry_auth_parse(t, strlen(t), "127.0.0.1:5001", &c, helper, NULL),
                     MF_ENOTFOUND);
    t = "{\"auths\":{\"https://index.docker.io/v1/\":{}},\"credsStore\":\"desktop\"}";
    assert_int_equal(registry_auth_parse(t, strlen(t), "docker.io", &c, helper, NULL), 0);
    assert_string_equal(helper, "desktop");
    t = "{\"credHelpers\":{\"ghcr.io\":\"gh\"},\"credsStore\":\"x\"}";
    assert_int_equal(registry_auth_parse(t, strlen(t), "ghcr.io", &c, helper, NULL), 0);
    assert_string_equal(helper, "gh");
    t = "{\"auths\":{\"quay.io/org\":{\"username\":\"u\",\"password\":\"p\"}}}";
    assert_int_equal(registry_auth_parse(t, strlen(t), "quay.io", &c, helper, NULL), 0);
    assert_string_equal(c.user, "u");
    t = "{\"credsStore\":\"../../bin/sh\"}"; /* a helper name is a suffix, never a path */
    assert_int_equal(registry_auth_parse(t, strlen(t), "x.io", &c, helper, NULL), MF_ENOTFOUND);
    static const char *const bad[] = {
        "{\"auths\":{\"x.io\":{\"auth\":\"!!!\"}}}", "{\"auths\":{\"x.io\":{\"auth\":\"bm9jb2xvbg==\"}}}",
        "not json", "{\"auths\":{\"x.io\":{\"auth\":\"YQBiOmM=\"}}}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = registry_auth_parse(bad[i], strlen(bad[i]), "x.io", &c, helper, NULL);
        assert_true(rc != 0 && rc != MF_ENOTFOUND);
        assert_int_equal(c.user[0], '\0');
    }
}

static void test_b64(void **state)
{
    (void)state;
    static const char *const plain[] = {"", "f", "fo", "foo", "foob", "fooba", "foobar"};
    static const char *const enc[] = {"", "Zg==", "Zm8=", "Zm9v", "Zm9vYg==", "Zm9vYmE=",
                                      "Zm9vYmFy"};
    for (size_t i = 0; i < 7; i++) {
        char *e = NULL, out[16];
        size_t n = 0;
        assert_int_equal(registry_b64_encode(plain[i], strlen(plain[i]), &e, NULL), 0);
        assert_string_equal(e, enc[i]);
        free(e);
        assert_int_equal(registry_b64_decode(enc[i], strlen(enc[i]), out, sizeof out, &n, NULL), 0);
        assert_string_equal(out, plain[i]);
    }
    char small[4];
    size_t n;
    assert_int_not_equal(registry_b64_decode("Zm9vYmFy", 8, small, sizeof small, &n, NULL), 0);
    assert_int_not_equal(registry_b64_decode("Zg==Zg", 6, small, sizeof small, &n, NULL), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ref_parse),        cmocka_unit_test(test_ref_long),
        cmocka_unit_test(test_challenge),        cmocka_unit_test(test_challenge_hostile),
        cmocka_unit_test(test_auth_parse),       cmocka_unit_test(test_b64),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
