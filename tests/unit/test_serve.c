/*
 * test_serve.c: mfc-serve's settings (runtime/serve/serve_config.c: model.yaml as
 * plan_config.c writes it, MFC_* variables, flags and their precedence) and
 * request parsing (runtime/serve/serve_req.c: the OpenAI and Ollama bodies, and
 * the 400 messages that name the offending field).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <unistd.h>

#include "runtime/serve/serve.h"

/* ------------------------------------------------ a fake environment */

static const char *const *fake_env;

static const char *env_get(const char *k)
{
    for (const char *const *e = fake_env; e && *e; e += 2)
        if (!strcmp(e[0], k))
            return e[1];
    return NULL;
}

static char tmpdir[64];

static int setup_dir(void **state)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/mfc-serve-test-XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown_dir(void **state)
{
    char p[128];
    snprintf(p, sizeof p, "%s/model.yaml", tmpdir);
    unlink(p);
    rmdir(tmpdir);
    return 0;
}

static void write_yaml(const char *text)
{
    char p[128];
    snprintf(p, sizeof p, "%s/model.yaml", tmpdir);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* What plan_config.c writes for a Modelfile with FROM, two adapters,
 * PARAMETERs, TEMPLATE, SYSTEM, MESSAGE and LICENSE. */
static const char plan_yaml[] =
    "schema: \"mfc.config/v1\"\n"
    "model:\n"
    "  path: \"/models/model.gguf\"\n"
    "adapters:\n"
    "- name: \"sql\"\n"
    "  scale: 0.5\n"
    "  path: \"/adapters/sql.gguf\"\n"
    "- name: null\n"
    "  scale: 1\n"
    "  path: \"adapters/1.gguf\"\n"
    "params:\n"
    "  temperature: 0.7\n"
    "  num_ctx: 4096\n"
    "  stop:\n"
    "  - \"<|eot_id|>\"\n"
    "  - \"User:\"\n"
    "template: |-\n"
    "  {{ .System }}\n"
    "  {{ .Prompt }}\n"
    "system: \"You are terse.\"\n"
    "messages:\n"
    "- role: \"user\"\n"
    "  content: \"hi\"\n"
    "license:\n"
    "- \"MIT\"\n"
    "labels: {}\n"
    "env: {}\n";

static void test_yaml_from_plan(void **state)
{
    struct serve_config c;
    struct mf_err err;
    char path[128];
    serve_config_init(&c);
    write_yaml(plan_yaml);
    snprintf(path, sizeof path, "%s/model.yaml", tmpdir);
    assert_int_equal(serve_config_load_yaml(&c, path, &err), 0);
    assert_string_equal(c.model_path, "/models/model.gguf");
    assert_int_equal(c.n_adapters, 2);
    assert_string_equal(c.adapters[0].name, "sql");
    assert_true(c.adapters[0].scale == 0.5f);
    assert_null(c.adapters[1].name);
    char want[160];
    snprintf(want, sizeof want, "%s/adapters/1.gguf", tmpdir); /* relative: from the file */
    assert_string_equal(c.adapters[1].path, want);
    assert_string_equal(c.template_src, "{{ .System }}\n{{ .Prompt }}");
    assert_string_equal(c.system, "You are terse.");
    assert_int_equal(json_array_size(c.messages), 1);

    struct serve_opts o = {0};
    assert_int_equal(serve_opts_from_json(&o, c.params, "params", &err), 0);
    assert_true(o.set & SO_TEMPERATURE);
    assert_true(o.temperature > 0.69f && o.temperature < 0.71f);
    assert_int_equal(o.num_ctx, 4096);
    assert_int_equal(o.n_stops, 2);
    assert_string_equal(o.stops[1], "User:");
    serve_opts_free(&o);
    serve_config_free(&c);
}

static void test_yaml_errors(void **state)
{
    struct serve_config c;
    struct mf_err err;
    char path[128];
    snprintf(path, sizeof path, "%s/model.yaml", tmpdir);

    serve_config_init(&c);
    write_yaml("schema: \"mfc.config/v2\"\n");
    assert_int_equal(serve_config_load_yaml(&c, path, &err), MF_EUNSUPPORTED);
    assert_non_null(strstr(err.msg, "mfc.config/v2"));
    serve_config_free(&c);

    serve_config_init(&c);
    write_yaml("model: [1, 2\n");
    assert_int_equal(serve_config_load_yaml(&c, path, &err), MF_EFORMAT);
    assert_non_null(strstr(err.msg, "model.yaml:"));
    serve_config_free(&c);

    serve_config_init(&c);
    write_yaml("adapters:\n- name: x\n");
    assert_int_equal(serve_config_load_yaml(&c, path, &err), MF_EFORMAT);
    assert_non_null(strstr(err.msg, "adapters[0]"));
    serve_config_free(&c);

    serve_config_init(&c);
    assert_int_equal(serve_config_load_yaml(&c, "/nonexistent/model.yaml", &err), MF_ENOTFOUND);
    serve_config_free(&c);
}

/* adapters[] entries with offset: and size: (a GGUF inside a layer blob, as
 * mfc serve IMAGE writes them), and --adapter NAME=PATH@OFFSET:SIZE. */
static void test_adapter_ranges(void **state)
{
    struct serve_config c;
    struct mf_err err;
    char path[128];
    int help;
    (void)state;
    snprintf(path, sizeof path, "%s/model.yaml", tmpdir);

    write_yaml("adapters:\n"
               "- name: \"sql\"\n"
               "  path: \"/blobs/sha256/ab\"\n"
               "  offset: 1536\n"
               "  size: 40960\n"
               "- name: \"whole\"\n"
               "  path: \"/w.gguf\"\n");
    serve_config_init(&c);
    assert_int_equal(serve_config_load_yaml(&c, path, &err), 0);
    assert_int_equal(c.n_adapters, 2);
    assert_string_equal(c.adapters[0].path, "/blobs/sha256/ab");
    assert_true(c.adapters[0].offset == 1536 && c.adapters[0].size == 40960);
    assert_true(c.adapters[1].offset == 0 && c.adapters[1].size == 0);
    serve_config_free(&c);

    static const char *const bad[] = {"offset: -1\n", "size: \"12\"\n", "offset: 1.5\n"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char y[160];
        snprintf(y, sizeof y, "adapters:\n- path: \"/a\"\n  %s", bad[i]);
        write_yaml(y);
        serve_config_init(&c);
        assert_int_equal(serve_config_load_yaml(&c, path, &err), MF_EFORMAT);
        assert_non_null(strstr(err.msg, "adapters[0].offset and .size"));
        serve_config_free(&c);
    }

    /* flags: a range, a plain path over a yaml range, an '@' that is part of the path */
    write_yaml("adapters:\n- name: \"sql\"\n  path: \"/b\"\n  offset: 512\n  size: 9\n");
    const char *env[] = {"MFC_CONFIG", path, NULL};
    fake_env = env;
    char *argv[] = {"mfc-serve", "--model", "/m.gguf", "--adapter", "r=/x/layer.tar@1024:77",
                    "--adapter", "sql=/x/sql.gguf", "--adapter", "at=/x/a@b.gguf",
                    "--adapter", "odd=/x/c@12:z", NULL};
    serve_config_init(&c);
    assert_int_equal(serve_config_parse(&c, 11, argv, env_get, &help, &err), 0);
    assert_int_equal(c.n_adapters, 4);
    assert_string_equal(c.adapters[0].path, "/x/sql.gguf");
    assert_true(c.adapters[0].offset == 0 && c.adapters[0].size == 0);
    assert_string_equal(c.adapters[1].name, "r");
    assert_string_equal(c.adapters[1].path, "/x/layer.tar");
    assert_true(c.adapters[1].offset == 1024 && c.adapters[1].size == 77);
    assert_string_equal(c.adapters[2].path, "/x/a@b.gguf");
    assert_string_equal(c.adapters[3].path, "/x/c@12:z"); /* not a range: all of it is the path */
    assert_true(c.adapters[3].offset == 0);
    serve_config_free(&c);
    fake_env = NULL;
}

static void test_yaml_scalars(void **state)
{
    struct mf_err err;
    const char y[] = "a: 1\nb: 1.5\nc: true\nd: ~\ne: \"1\"\nf: text\ng: -3\n";
    json_t *j = serve_yaml_to_json(y, strlen(y), "t", &err);
    assert_non_null(j);
    assert_true(json_is_integer(json_object_get(j, "a")));
    assert_true(json_is_real(json_object_get(j, "b")));
    assert_true(json_is_true(json_object_get(j, "c")));
    assert_true(json_is_null(json_object_get(j, "d")));
    assert_true(json_is_string(json_object_get(j, "e")));
    assert_string_equal(json_string_value(json_object_get(j, "f")), "text");
    assert_int_equal(json_integer_value(json_object_get(j, "g")), -3);
    json_decref(j);
    /* nesting is bounded */
    char deep[200];
    memset(deep, '[', 40);
    deep[40] = '\0';
    assert_null(serve_yaml_to_json(deep, strlen(deep), "t", &err));
}

static void test_precedence(void **state)
{
    struct serve_config c;
    struct mf_err err;
    char path[128];
    int help;
    snprintf(path, sizeof path, "%s/model.yaml", tmpdir);
    write_yaml(plan_yaml);

    const char *env[] = {"MFC_CONFIG", path,   "MFC_PORT", "9000", "MFC_HOST", "127.0.0.1",
                         "MFC_API_KEY", "k1", "MFC_MAX_SEQS", "8", "MFC_KV_CACHE_GB", "0.5",
                         "MFC_KV_CACHE_TYPE", "q8_0", NULL};
    fake_env = env;
    char *argv[] = {"mfc-serve", "--port", "9001", "--adapter", "sql=/x/sql2.gguf",
                    "--adapter", "new=/x/new.gguf", NULL};
    serve_config_init(&c);
    assert_int_equal(serve_config_parse(&c, 7, argv, env_get, &help, &err), 0);
    assert_int_equal(help, 0);
    assert_int_equal(c.port, 9001);                 /* flag over env */
    assert_string_equal(c.host, "127.0.0.1");       /* env over default */
    assert_string_equal(c.api_key, "k1");
    assert_int_equal(c.max_seqs, 8);
    assert_string_equal(c.kv_cache_gb, "0.5");
    assert_int_equal(c.kv_8bit, 1); /* MFC_KV_CACHE_TYPE=q8_0 */
    assert_string_equal(c.model_path, "/models/model.gguf"); /* from the yaml */
    assert_string_equal(c.model_name, "model");              /* its stem */
    assert_int_equal(c.n_adapters, 3);
    assert_string_equal(c.adapters[0].path, "/x/sql2.gguf"); /* same name: new path */
    assert_string_equal(c.adapters[2].name, "new");
    serve_config_free(&c);

    /* MFC_MODEL over the yaml's path, --model over MFC_MODEL */
    const char *env2[] = {"MFC_CONFIG", path, "MFC_MODEL", "/e.gguf", NULL};
    fake_env = env2;
    char *argv2[] = {"mfc-serve", NULL};
    serve_config_init(&c);
    assert_int_equal(serve_config_parse(&c, 1, argv2, env_get, &help, &err), 0);
    assert_string_equal(c.model_path, "/e.gguf");
    assert_int_equal(c.kv_8bit, 0); /* the default */
    serve_config_free(&c);
    char *argv3[] = {"mfc-serve", "--model=/f/my-model.gguf", "--name", "m", NULL};
    serve_config_init(&c);
    assert_int_equal(serve_config_parse(&c, 4, argv3, env_get, &help, &err), 0);
    assert_string_equal(c.model_path, "/f/my-model.gguf");
    assert_string_equal(c.model_name, "m");
    serve_config_free(&c);
}

/* The front door's settings: defaults, model.yaml's server: mapping, then
 * MFC_*, then flags; unknown server: keys and bad values refused. */
static void test_limits_settings(void **state)
{
    (void)state;
    struct serve_config c;
    struct mf_err err;
    char path[128];
    int help;
    snprintf(path, sizeof path, "%s/model.yaml", tmpdir);
    serve_config_init(&c);
    assert_int_equal(c.read_timeout, 10);
    assert_int_equal(c.max_connections, 4096);
    assert_int_equal(c.max_conns_per_client, 512);
    serve_config_free(&c);
    write_yaml("schema: \"mfc.config/v1\"\nmodel:\n  path: \"/m.gguf\"\nserver:\n"
               "  read-timeout: 3\n  max-connections: 100\n  max-connections-per-client: 0\n");
    const char *env[] = {"MFC_CONFIG", path, "MFC_MAX_CONNECTIONS", "200", NULL};
    fake_env = env;
    char *argv[] = {"mfc-serve", "--read-timeout", "7", NULL};
    serve_config_init(&c);
    assert_int_equal(serve_config_parse(&c, 3, argv, env_get, &help, &err), 0);
    assert_int_equal(c.read_timeout, 7);          /* flag over yaml */
    assert_int_equal(c.max_connections, 200);     /* env over yaml */
    assert_int_equal(c.max_conns_per_client, 0);  /* yaml over default */
    serve_config_free(&c);
    static const char *const bad_yaml[] = {
        "server:\n  read-timeuot: 3\n",     /* a typo is not ignored */
        "server:\n  read-timeout: 0\n",     /* 1..3600 */
        "server:\n  max-connections: [1]\n",
        "server: 5\n",
    };
    char *argv1[] = {"mfc-serve", NULL};
    const char *env1[] = {"MFC_CONFIG", path, NULL};
    fake_env = env1;
    for (size_t i = 0; i < sizeof bad_yaml / sizeof bad_yaml[0]; i++) {
        write_yaml(bad_yaml[i]);
        serve_config_init(&c);
        assert_int_not_equal(serve_config_parse(&c, 1, argv1, env_get, &help, &err), 0);
        assert_non_null(strstr(err.msg, "server"));
        serve_config_free(&c);
    }
    fake_env = NULL;
    char *argv2[] = {"mfc-serve", "--model", "/m.gguf", "--max-connections-per-client", "-1", NULL};
    serve_config_init(&c);
    assert_int_equal(serve_config_parse(&c, 5, argv2, env_get, &help, &err), MF_EUSAGE);
    serve_config_free(&c);
}

static void test_flag_errors(void **state)
{
    struct serve_config c;
    struct mf_err err;
    int help;
    const char *none[] = {NULL};
    fake_env = none;
    struct {
        int argc;
        char *argv[5];
        const char *msg;
    } cases[] = {
        {3, {"mfc-serve", "--port", "70000"}, "port \"70000\""},
        {3, {"mfc-serve", "--bogus", "1"}, "--bogus"},
        {1, {"mfc-serve"}, "no model"},
        {4, {"mfc-serve", "--model", "m.gguf", "--adapter"}, "needs a value"},
        {5, {"mfc-serve", "--model", "m.gguf", "--adapter", "noequals"}, "NAME=PATH"},
        {5, {"mfc-serve", "--model", "m.gguf", "--kv-cache-gb", "lots"}, "KV cache size"},
        {5, {"mfc-serve", "--model", "m.gguf", "--kv-cache-type", "q4"}, "KV cache type \"q4\""},
        {4, {"mfc-serve", "--model", "m.gguf", "extra"}, "unexpected argument"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        serve_config_init(&c);
        assert_int_equal(serve_config_parse(&c, cases[i].argc, cases[i].argv, env_get, &help, &err),
                         MF_EUSAGE);
        if (!strstr(err.msg, cases[i].msg))
            fail_msg("case %zu: \"%s\" lacks \"%s\"", i, err.msg, cases[i].msg);
        serve_config_free(&c);
    }
    const char *env[] = {"MFC_MAX_SEQS", "0", NULL};
    fake_env = env;
    char *argv[] = {"mfc-serve", "--model", "m.gguf", NULL};
    serve_config_init(&c);
    assert_int_equal(serve_config_parse(&c, 3, argv, env_get, &help, &err), MF_EUSAGE);
    assert_non_null(strstr(err.msg, "MFC_MAX_SEQS"));
    serve_config_free(&c);
    char *argvh[] = {"mfc-serve", "--help", NULL};
    serve_config_init(&c);
    assert_int_equal(serve_config_parse(&c, 2, argvh, env_get, &help, &err), 0);
    assert_int_equal(help, 1);
    serve_config_free(&c);
}

/* ------------------------------------------------ requests */

static int parse(enum serve_api api, const char *body, struct serve_req *rq, struct mf_err *err)
{
    return serve_req_parse(api, body, strlen(body), rq, err);
}

static void test_openai_chat(void **state)
{
    struct serve_req rq;
    struct mf_err err;
    assert_int_equal(parse(SERVE_OAI_CHAT,
                           "{\"model\":\"m\",\"messages\":[{\"role\":\"system\",\"content\":\"s\"},"
                           "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},"
                           "{\"type\":\"text\",\"text\":\"b\"}]}],\"stream\":true,"
                           "\"stream_options\":{\"include_usage\":true},\"n\":2,\"stop\":\"X\","
                           "\"max_completion_tokens\":9,\"temperature\":0.5,\"top_p\":0.9,"
                           "\"seed\":3,\"logprobs\":true,\"top_logprobs\":4,\"user\":\"u\"}",
                           &rq, &err),
                     0);
    assert_string_equal(rq.model, "m");
    assert_int_equal(rq.n_msgs, 2);
    assert_string_equal(rq.msgs[1].content, "ab");
    assert_int_equal(rq.stream, 1);
    assert_int_equal(rq.include_usage, 1);
    assert_int_equal(rq.n, 2);
    assert_int_equal(rq.opts.n_stops, 1);
    assert_string_equal(rq.opts.stops[0], "X");
    assert_int_equal(rq.max_tokens, 9);
    assert_true(rq.opts.set & SO_TEMPERATURE);
    assert_true(rq.opts.set & SO_SEED);
    assert_int_equal(rq.opts.seed, 3);
    assert_int_equal(rq.logprobs, 1);
    assert_int_equal(rq.top_logprobs, 4);
    serve_req_free(&rq);
}

static void test_openai_completion(void **state)
{
    struct serve_req rq;
    struct mf_err err;
    assert_int_equal(parse(SERVE_OAI_COMPLETION, "{\"prompt\":[1,2,3],\"logprobs\":2}", &rq, &err),
                     0);
    assert_null(rq.prompt);
    assert_int_equal(rq.n_tokens, 3);
    assert_int_equal(rq.tokens[2], 3);
    assert_int_equal(rq.top_logprobs, 2);
    assert_int_equal(rq.stream, 0);
    serve_req_free(&rq);
    assert_int_equal(parse(SERVE_OAI_COMPLETION, "{\"prompt\":[\"one\"],\"stop\":[\"a\",\"b\"]}",
                           &rq, &err),
                     0);
    assert_string_equal(rq.prompt, "one");
    assert_int_equal(rq.opts.n_stops, 2);
    serve_req_free(&rq);
}

static void test_ollama(void **state)
{
    struct serve_req rq;
    struct mf_err err;
    assert_int_equal(parse(SERVE_OLLAMA_GENERATE,
                           "{\"model\":\"m\",\"prompt\":\"p\",\"system\":\"s\",\"raw\":true,"
                           "\"context\":[5,6],\"keep_alive\":\"5m\",\"options\":{\"num_predict\":"
                           "7,\"top_k\":20,\"stop\":[\"x\"],\"unknown_option\":1}}",
                           &rq, &err),
                     0);
    assert_int_equal(rq.stream, 1); /* Ollama's default */
    assert_int_equal(rq.raw, 1);
    assert_string_equal(rq.system, "s");
    assert_int_equal(rq.n_tokens, 2);
    assert_int_equal(rq.opts.num_predict, 7);
    assert_int_equal(rq.opts.top_k, 20);
    assert_int_equal(rq.opts.n_stops, 1);
    serve_req_free(&rq);
    assert_int_equal(parse(SERVE_OLLAMA_CHAT, "{\"model\":\"m\",\"stream\":false}", &rq, &err), 0);
    assert_int_equal(rq.n_msgs, 0);
    assert_int_equal(rq.stream, 0);
    serve_req_free(&rq);
}

static void test_errors_name_the_field(void **state)
{
    static const struct {
        enum serve_api api;
        const char *body, *msg;
    } cases[] = {
        {SERVE_OAI_CHAT, "", "empty request body"},
        {SERVE_OAI_CHAT, "[]", "JSON object"},
        {SERVE_OAI_CHAT, "{\"messages\": [", "request body:"},
        {SERVE_OAI_CHAT, "{}", "'messages' is required"},
        {SERVE_OAI_CHAT, "{\"messages\":[]}", "'messages' must not be empty"},
        {SERVE_OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":1}]}",
         "'messages[0].content'"},
        {SERVE_OAI_CHAT, "{\"messages\":[{\"role\":\"wizard\"}]}", "'messages[0].role'"},
        {SERVE_OAI_CHAT, "{\"messages\":[{\"role\":\"user\"}],\"temperature\":3}",
         "'temperature' is 3"},
        {SERVE_OAI_CHAT, "{\"messages\":[{\"role\":\"user\"}],\"top_p\":\"x\"}", "'top_p'"},
        {SERVE_OAI_CHAT, "{\"messages\":[{\"role\":\"user\"}],\"n\":0}", "'n' is 0"},
        {SERVE_OAI_CHAT, "{\"messages\":[{\"role\":\"user\"}],\"max_tokens\":1.5}",
         "'max_tokens' must be a whole number"},
        {SERVE_OAI_CHAT, "{\"messages\":[{\"role\":\"user\"}],\"stop\":[1]}", "'stop[0]'"},
        {SERVE_OAI_CHAT, "{\"messages\":[{\"role\":\"user\"}],\"stream\":\"yes\"}", "'stream'"},
        {SERVE_OAI_CHAT, "{\"messages\":[{\"role\":\"user\"}],\"top_logprobs\":2}",
         "needs 'logprobs'"},
        {SERVE_OAI_CHAT, "{\"messages\":[{\"role\":\"user\"}],\"model\":5}", "'model'"},
        {SERVE_OAI_COMPLETION, "{\"prompt\":[-1]}", "'prompt[0]'"},
        {SERVE_OAI_COMPLETION, "{\"prompt\":[\"a\",\"b\"]}", "several strings"},
        {SERVE_OLLAMA_GENERATE, "{\"options\":{\"temperature\":\"x\"}}", "'options.temperature'"},
        {SERVE_OLLAMA_GENERATE, "{\"options\":[]}", "'options' must be an object"},
        {SERVE_OLLAMA_GENERATE, "{\"context\":[1,\"a\"]}", "'context[1]'"},
        {SERVE_OLLAMA_CHAT, "{\"messages\":{}}", "'messages' must be an array"},
        /* one table of limits (common/params.c): the same sentence on both routes */
        {SERVE_OAI_CHAT, "{\"messages\":[{\"role\":\"user\"}],\"temperature\":-1}",
         "'temperature' is -1; allowed 0 to 2"},
        {SERVE_OAI_CHAT, "{\"messages\":[{\"role\":\"user\"}],\"temperature\":5}",
         "'temperature' is 5; allowed 0 to 2"},
        {SERVE_OLLAMA_CHAT, "{\"options\":{\"temperature\":-1}}",
         "'options.temperature' is -1; allowed 0 to 2"},
        {SERVE_OLLAMA_GENERATE, "{\"options\":{\"temperature\":5}}",
         "'options.temperature' is 5; allowed 0 to 2"},
        {SERVE_OAI_CHAT, "{\"messages\":[{\"role\":\"user\"}],\"repetition_penalty\":-1}",
         "'repetition_penalty' is -1; allowed 0 to 100"},
        {SERVE_OLLAMA_GENERATE, "{\"options\":{\"top_k\":2.5}}",
         "'options.top_k' must be a whole number"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct serve_req rq;
        struct mf_err err;
        int rc = parse(cases[i].api, cases[i].body, &rq, &err);
        if (rc != MF_EINVAL || !strstr(err.msg, cases[i].msg))
            fail_msg("case %zu (%s): rc %d \"%s\" lacks \"%s\"", i, cases[i].body, rc, err.msg,
                     cases[i].msg);
        serve_req_free(&rq);
    }
}

static void test_stop_limits(void **state)
{
    char body[4096];
    struct serve_req rq;
    struct mf_err err;
    size_t n = (size_t)snprintf(body, sizeof body, "{\"prompt\":\"p\",\"stop\":[");
    for (int i = 0; i < SERVE_MAX_STOPS + 1; i++)
        n += (size_t)snprintf(body + n, sizeof body - n, "%s\"s%d\"", i ? "," : "", i);
    snprintf(body + n, sizeof body - n, "]}");
    assert_int_equal(parse(SERVE_OAI_COMPLETION, body, &rq, &err), MF_EINVAL);
    assert_non_null(strstr(err.msg, "more than 16 stop strings"));
    serve_req_free(&rq);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_yaml_from_plan),
        cmocka_unit_test(test_yaml_errors),
        cmocka_unit_test(test_yaml_scalars),
        cmocka_unit_test(test_adapter_ranges),
        cmocka_unit_test(test_precedence),
        cmocka_unit_test(test_flag_errors),
        cmocka_unit_test(test_limits_settings),
        cmocka_unit_test(test_openai_chat),
        cmocka_unit_test(test_openai_completion),
        cmocka_unit_test(test_ollama),
        cmocka_unit_test(test_errors_name_the_field),
        cmocka_unit_test(test_stop_limits),
    };
    return cmocka_run_group_tests(tests, setup_dir, teardown_dir);
}
