/*
 * test_serve_tools.c: the request side of structured output and tool calls
 * (runtime/serve/serve_tools.c): fields parsed into their normal forms and
 * refused with a message naming the field; the grammar of a forced call
 * accepts calls in each template family's syntax and nothing else; calls
 * found in a model's text (auto) for each syntax, and text that is not one.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "runtime/grammar/gram.h"
#include "runtime/serve/serve_int.h"

static const char TOOLS[] =
    "[{\"type\": \"function\", \"function\": {\"name\": \"add\", \"description\": \"Adds\", "
    "\"parameters\": {\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"integer\"}, "
    "\"b\": {\"type\": \"integer\"}}, \"required\": [\"a\", \"b\"]}}}, {\"type\": "
    "\"function\", \"function\": {\"name\": \"now\"}}]";

static int parse(enum serve_api api, const char *extra, struct serve_req *rq, struct mf_err *err)
{
    char body[4096];
    snprintf(body, sizeof body,
             "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"tools\": %s%s}", TOOLS,
             extra);
    return serve_req_parse(api, body, strlen(body), rq, err);
}

static void refused(enum serve_api api, const char *extra, const char *needle)
{
    struct serve_req rq;
    struct mf_err err = {0};
    assert_int_equal(parse(api, extra, &rq, &err), MF_EINVAL);
    if (!strstr(err.msg, needle))
        fail_msg("'%s' lacks '%s'", err.msg, needle);
    serve_req_free(&rq);
}

static void test_fields(void **state)
{
    (void)state;
    struct serve_req rq;
    struct mf_err err = {0};
    assert_int_equal(parse(SERVE_OAI_CHAT,
                           ", \"tool_choice\": {\"type\": \"function\", \"function\": {\"name\": "
                           "\"add\"}}, \"parallel_tool_calls\": false",
                           &rq, &err),
                     0);
    assert_int_equal(rq.tool_choice, SERVE_TOOLS_NAMED);
    assert_string_equal(rq.tool_name, "add");
    assert_int_equal(rq.parallel_tools, 0);
    assert_int_equal(json_array_size(rq.tools), 2);
    /* a tool without parameters takes an empty object schema */
    const json_t *p = json_object_get(json_array_get(rq.tools, 1), "parameters");
    assert_string_equal(json_string_value(json_object_get(p, "type")), "object");
    serve_req_free(&rq);

    refused(SERVE_OAI_CHAT,
            ", \"tool_choice\": {\"type\": \"function\", \"function\": {\"name\": "
            "\"sub\"}}",
            "'tool_choice' names function \"sub\", which is not in 'tools'");
    refused(SERVE_OAI_CHAT, ", \"tool_choice\": \"always\"", "'tool_choice' is \"always\"");
    refused(SERVE_OAI_CHAT, ", \"parallel_tool_calls\": 1", "'parallel_tool_calls'");
    refused(SERVE_OAI_CHAT, ", \"response_format\": {\"type\": \"yaml\"}", "response_format.type");
    refused(SERVE_OAI_CHAT,
            ", \"response_format\": {\"type\": \"json_schema\", \"json_schema\": {\"schema\": "
            "{\"type\": \"object\", \"dependentRequired\": {}}}}",
            "keyword 'dependentRequired' is not supported");
    refused(SERVE_OLLAMA_CHAT, ", \"format\": \"xml\"", "'format' is \"xml\"");
    refused(SERVE_OAI_COMPLETION, ", \"prompt\": \"x\", \"grammar\": \"root ::= (\"",
            "'grammar': grammar: line 1");

    /* OpenAI history: arguments as a string of JSON, the result named by its call */
    const char *chat =
        "{\"messages\": [{\"role\": \"user\", \"content\": \"1+2\"}, {\"role\": \"assistant\", "
        "\"content\": null, \"tool_calls\": [{\"id\": \"call_9\", \"type\": \"function\", "
        "\"function\": {\"name\": \"add\", \"arguments\": \"{\\\"a\\\": 1, \\\"b\\\": 2}\"}}]}, "
        "{\"role\": \"tool\", \"tool_call_id\": \"call_9\", \"content\": \"3\"}]}";
    assert_int_equal(serve_req_parse(SERVE_OAI_CHAT, chat, strlen(chat), &rq, &err), 0);
    const json_t *call = json_array_get(rq.msgs[1].tool_calls, 0);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(call, "arguments"), "b")),
                     2);
    assert_string_equal(rq.msgs[2].tool_name, "add");
    assert_string_equal(rq.msgs[2].tool_call_id, "call_9");
    serve_req_free(&rq);
    const char *bad = "{\"messages\": [{\"role\": \"assistant\", \"tool_calls\": [{\"function\": "
                      "{\"name\": \"add\", \"arguments\": \"{nope\"}}]}]}";
    assert_int_equal(serve_req_parse(SERVE_OAI_CHAT, bad, strlen(bad), &rq, &err), MF_EINVAL);
    assert_non_null(strstr(err.msg, "'messages[0].tool_calls[0].function.arguments' is not JSON"));
    serve_req_free(&rq);
}

/* 1 when the forced-call grammar for family matches text whole. */
static int forced_matches(const char *family, int choice, int parallel, const char *text)
{
    struct serve_req rq;
    struct mf_err err = {0};
    char *src = NULL;
    struct gram *g = NULL;
    assert_int_equal(parse(SERVE_OAI_CHAT, "", &rq, &err), 0);
    rq.tool_choice = choice;
    rq.parallel_tools = parallel;
    if (choice == SERVE_TOOLS_NAMED)
        rq.tool_name = strdup("now");
    assert_int_equal(serve_tools_grammar(&rq, serve_toolfmt_for(family), &src, &err), 0);
    if (gram_new(src, strlen(src), NULL, &g, &err))
        fail_msg("%s", err.msg);
    uint32_t st = gram_feed(g, gram_start(g, &err), text, strlen(text), &err);
    int ok = st != GRAM_DEAD && gram_accepting(g, st);
    gram_unref(g);
    free(src);
    serve_req_free(&rq);
    return ok;
}

static void test_forced_grammar(void **state)
{
    (void)state;
    const int R = SERVE_TOOLS_REQUIRED, N = SERVE_TOOLS_NAMED;
    assert_true(forced_matches("llama3.1", R, 1,
                               "{\"name\": \"add\", \"parameters\": {\"a\": 1, \"b\": -2}}"));
    assert_false(forced_matches("llama3.1", R, 1,
                                "{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}"));
    assert_false(
        forced_matches("llama3.1", R, 1, "{\"name\": \"add\", \"parameters\": {\"a\": 1}}"));
    assert_false(forced_matches("llama3.1", R, 1, "{\"name\": \"sub\", \"parameters\": {}}"));
    assert_true(forced_matches("qwen2.5", R, 1,
                               "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>\n"
                               "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": "
                               "2}}\n</tool_call>"));
    assert_false(
        forced_matches("qwen2.5", R, 0,
                       "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>\n"
                       "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>"));
    assert_true(forced_matches("mistral-nemo", R, 1,
                               "[TOOL_CALLS] [{\"name\": \"now\", \"arguments\": {}}, {\"name\": "
                               "\"add\", \"arguments\": {\"b\": 0, \"a\": 5}}]") == 0);
    assert_true(forced_matches("mistral-nemo", R, 1,
                               "[TOOL_CALLS] [{\"name\": \"now\", \"arguments\": {}}, {\"name\": "
                               "\"add\", \"arguments\": {\"a\": 5, \"b\": 0}}]"));
    assert_true(forced_matches(NULL, N, 1, "{\"name\": \"now\", \"arguments\": {}}"));
    assert_false(
        forced_matches(NULL, N, 1, "{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}"));
}

static void test_parse_calls(void **state)
{
    (void)state;
    struct serve_req rq;
    struct mf_err err = {0};
    char *content = NULL;
    assert_int_equal(parse(SERVE_OAI_CHAT, "", &rq, &err), 0);
    const char *h =
        "Let me add.\n<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": "
        "2}}\n</tool_call>\n<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>";
    json_t *calls =
        serve_tools_parse(serve_toolfmt_for("qwen2.5"), h, strlen(h), rq.tools, &content);
    assert_int_equal(json_array_size(calls), 2);
    assert_string_equal(json_string_value(json_object_get(json_array_get(calls, 1), "name")),
                        "now");
    assert_string_equal(content, "Let me add.");
    assert_memory_equal(json_string_value(json_object_get(json_array_get(calls, 0), "id")), "call_",
                        5);
    json_decref(calls);
    free(content);
    const char *l = " {\"name\": \"add\", \"parameters\": {\"a\": 4, \"b\": 5}}";
    calls = serve_tools_parse(serve_toolfmt_for("llama3.1"), l, strlen(l), rq.tools, &content);
    assert_int_equal(json_integer_value(json_object_get(
                         json_object_get(json_array_get(calls, 0), "arguments"), "b")),
                     5);
    json_decref(calls);
    const char *m = "[TOOL_CALLS] [{\"name\": \"now\", \"arguments\": {}}]";
    calls = serve_tools_parse(serve_toolfmt_for("mistral"), m, strlen(m), rq.tools, &content);
    assert_int_equal(json_array_size(calls), 1);
    json_decref(calls);
    /* not calls: plain text, an unknown function, broken JSON */
    const char *no[] = {"Hello there", "{\"name\": \"sub\", \"arguments\": {}}",
                        "{\"name\": \"add\", \"arguments\": {\"a\": 1", "{\"a\": 1}"};
    for (size_t i = 0; i < sizeof no / sizeof *no; i++) {
        assert_null(
            serve_tools_parse(serve_toolfmt_for(NULL), no[i], strlen(no[i]), rq.tools, &content));
        assert_null(content);
    }
    /* where auto mode decides */
    const struct serve_toolfmt *f = serve_toolfmt_for("hermes");
    assert_int_equal(serve_tools_starts(f, "  <tool", 7), 0);
    assert_int_equal(serve_tools_starts(f, "\n<tool_call>", 12), 1);
    assert_int_equal(serve_tools_starts(f, "Sure", 4), -1);
    assert_int_equal(serve_tools_starts(serve_toolfmt_for(NULL), " {", 2), 1);
    assert_int_equal(serve_tools_starts(serve_toolfmt_for(NULL), "  ", 2), 0);
    serve_req_free(&rq);
}

/* Calls found while they are written: names once whole, argument spans
 * growing with the text, objects inside arguments not taken for calls. */
static void test_scan(void **state)
{
    (void)state;
    struct serve_call_span sp[4];
    const char *h = "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": {\"x\": [1, "
                    "{\"y\": \"}\"}]}, \"b\": 2}}\n</tool_call>\n<tool_call>\n{\"name\": \"now\"";
    size_t n = strlen(h);
    /* cut inside the first name: no name yet */
    assert_int_equal(serve_tools_scan(h, 22, sp, 4), 1);
    assert_false(sp[0].has_name);
    /* cut inside the arguments: the span is open */
    size_t cut = (size_t)(strstr(h, "\"b\"") - h);
    assert_int_equal(serve_tools_scan(h, cut, sp, 4), 1);
    assert_true(sp[0].has_name && sp[0].name_len == 3 && !memcmp(h + sp[0].name, "add", 3));
    assert_true(sp[0].has_args && sp[0].args_end == 0);
    assert_int_equal(h[sp[0].args], '{');
    /* the whole text: the arguments closed, a second call named */
    assert_int_equal(serve_tools_scan(h, n, sp, 4), 2);
    assert_true(sp[0].closed);
    assert_int_equal(h[sp[0].args_end - 1], '}');
    json_t *a = json_loadb(h + sp[0].args, sp[0].args_end - sp[0].args, 0, NULL);
    assert_non_null(a);
    assert_int_equal(json_integer_value(json_object_get(a, "b")), 2);
    json_decref(a);
    assert_true(sp[1].has_name && !memcmp(h + sp[1].name, "now", 3));
    assert_false(sp[1].has_args);
    /* Mistral's array and Llama's parameters */
    const char *m = "[TOOL_CALLS] [{\"name\": \"a\", \"arguments\": {}}, {\"name\": \"b\", "
                    "\"parameters\": {\"k\": [1]}}]";
    assert_int_equal(serve_tools_scan(m, strlen(m), sp, 4), 2);
    assert_true(sp[1].has_args && sp[1].args_end > sp[1].args);
    assert_true(!memcmp(m + sp[1].args, "{\"k\": [1]}", sp[1].args_end - sp[1].args));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fields),
        cmocka_unit_test(test_forced_grammar),
        cmocka_unit_test(test_parse_calls),
        cmocka_unit_test(test_scan),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
