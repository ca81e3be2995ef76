/*
 * test_template.c: conformance of mfc's TEMPLATE engine with Go's
 * text/template, and the mfc-specific parts (values, limits, errors with
 * line:col, Ollama's chat rendering and touch-ups).
 *
 * tests/data/template/conformance.json holds cases whose expected text or
 * error Go itself produced (tests/tools/gotmpl/main.go, run on
 * tests/data/template/data.json); each case is one test here. Errors must
 * match Go's message after its position prefix, and the line, unless the
 * case is marked loose (then failing is enough) or manual (the expectation
 * is written by hand, with the reason in "why").
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "common/buf.h"
#include "common/err.h"
#include "text/template.h"

/* ---- helpers ------------------------------------------------------------- */

/* JSON to template values: objects become maps, as Ollama's map[string]any. */
static struct tmpl_value *from_json(const json_t *j)
{
    struct mf_err err;
    struct tmpl_value *v = NULL;
    size_t i;
    const char *k;
    json_t *x;
    switch (json_typeof(j)) {
    case JSON_STRING:
        return tmpl_value_str(json_string_value(j), json_string_length(j));
    case JSON_INTEGER:
        return tmpl_value_int(json_integer_value(j));
    case JSON_TRUE:
        return tmpl_value_bool(1);
    case JSON_FALSE:
        return tmpl_value_bool(0);
    case JSON_ARRAY:
        v = tmpl_value_list();
        json_array_foreach(j, i, x) assert_int_equal(tmpl_value_push(v, from_json(x), &err), 0);
        return v;
    case JSON_OBJECT:
        v = tmpl_value_map();
        json_object_foreach((json_t *)j, k, x)
            assert_int_equal(tmpl_value_set(v, k, from_json(x), &err), 0);
        return v;
    default:
        fail_msg("unsupported JSON value in test data");
    }
    return NULL;
}

static json_t *load_json(const char *name)
{
    const char *src = getenv("MFC_SRCDIR");
    char path[2048];
    snprintf(path, sizeof path, "%s/tests/data/template/%s", src ? src : ".", name);
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je);
    if (!j)
        fail_msg("%s: %s", path, je.text);
    return j;
}

/* Compiles and runs src over data; returns the rc, output in *out (caller
 * frees) and the message in err. */
static int run(const char *src, struct tmpl_value *data, const struct tmpl_limits *lim,
               unsigned flags, char **out, struct mf_err *err)
{
    struct tmpl *t;
    struct mf_buf b;
    mf_buf_init(&b, 1 << 26);
    mf_err_clear(err);
    int rc = tmpl_compile(&t, src, strlen(src), lim, flags, err);
    if (!rc)
        rc = tmpl_execute(t, data, &b, err);
    tmpl_free(t);
    *out = mf_buf_take(&b);
    return rc;
}

static void expect_out(const char *src, struct tmpl_value *data, const char *want)
{
    char *out;
    struct mf_err err;
    int rc = run(src, data, NULL, 0, &out, &err);
    if (rc)
        fail_msg("%s: %s", src, err.msg);
    assert_string_equal(out, want);
    free(out);
}

static void expect_err(const char *src, struct tmpl_value *data, const char *want)
{
    char *out;
    struct mf_err err;
    int rc = run(src, data, NULL, 0, &out, &err);
    free(out);
    if (!rc)
        fail_msg("%s: no error, want %s", src, want);
    if (!strstr(err.msg, want))
        fail_msg("%s: got \"%s\", want \"%s\"", src, err.msg, want);
}

/* ---- Go conformance ---------------------------------------------------------- */

struct gcase {
    const char *name;
    const char *tmpl;
    const char *out; /* expected text, or NULL */
    const char *err; /* expected Go message (or core, when manual) */
    int loose;
    int manual;
};

static struct {
    json_t *cases;
    struct tmpl_value *data;
    struct gcase c[400];
    size_t n;
} g;

/* The part of a message after its position: Go writes "template: t:L:C:
 * executing "t" at <...>: core" or "template: t:L: core"; mfc writes
 * "template:L:C: executing at <...>: core" or "template:L:C: core". */
static const char *core(const char *msg, unsigned *line)
{
    const char *p = strstr(msg, "executing");
    const char *s = strstr(msg, "template:");
    *line = 0;
    if (s) {
        s += 9;
        if (*s == ' ')
            s += 3; /* " t:" */
        *line = (unsigned)strtoul(s, NULL, 10);
    }
    if (p) {
        p = strstr(p, ">: ");
        return p ? p + 3 : msg;
    }
    if (!s)
        return msg;
    while (*s && (*s == ':' || (*s >= '0' && *s <= '9')))
        s++;
    return *s == ' ' ? s + 1 : s;
}

static void test_go_case(void **state)
{
    const struct gcase *c = *state;
    char *out;
    struct mf_err err;
    int rc = run(c->tmpl, g.data, NULL, 0, &out, &err);
    if (c->out) {
        if (rc)
            fail_msg("%s: error %s", c->name, err.msg);
        if (strcmp(out, c->out) != 0)
            fail_msg("%s: got \"%s\", want \"%s\"", c->name, out, c->out);
        free(out);
        return;
    }
    free(out);
    if (!rc)
        fail_msg("%s: no error, want %s", c->name, c->err);
    unsigned gl, ml;
    const char *want = c->manual ? c->err : core(c->err, &gl);
    const char *got = core(err.msg, &ml);
    if (c->loose) {
        print_message("# %s: go: %s | mfc: %s\n", c->name, c->err, err.msg);
        return;
    }
    if (strcmp(want, got) != 0)
        fail_msg("%s: got \"%s\", want \"%s\"", c->name, err.msg, want);
    if (!c->manual && gl != ml)
        fail_msg("%s: line %u, Go says %u (%s)", c->name, ml, gl, err.msg);
}

static void load_go_cases(void)
{
    json_t *d = load_json("data.json");
    g.data = from_json(d);
    json_decref(d);
    g.cases = load_json("conformance.json");
    size_t i;
    json_t *x;
    json_array_foreach(g.cases, i, x)
    {
        if (g.n == sizeof g.c / sizeof g.c[0])
            break;
        struct gcase *c = &g.c[g.n++];
        c->name = json_string_value(json_object_get(x, "name"));
        c->tmpl = json_string_value(json_object_get(x, "tmpl"));
        c->out = json_string_value(json_object_get(x, "out"));
        c->err = json_string_value(json_object_get(x, "err"));
        c->loose = json_is_true(json_object_get(x, "loose"));
        c->manual = json_is_true(json_object_get(x, "manual"));
    }
}

/* ---- mfc-specific ---------------------------------------------------------------- */

static struct tmpl_value *message(const char *role, const char *content)
{
    struct mf_err err;
    struct tmpl_value *m = tmpl_value_struct("api.Message");
    assert_int_equal(tmpl_value_set(m, "Role", tmpl_value_cstr(role), &err), 0);
    assert_int_equal(tmpl_value_set(m, "Content", tmpl_value_cstr(content), &err), 0);
    return m;
}

static void test_struct_fields(void **state)
{
    struct tmpl_value *m = message("user", "hi");
    expect_out("{{.Role}}:{{.Content}} {{.}}", m, "user:hi {user hi}");
    expect_err("{{.Nope}}", m, "can't evaluate field Nope in type api.Message");
    expect_err("{{.Role 1}}", m, "Role has arguments but cannot be invoked as function");
    expect_out("{{if .}}truthy{{end}} {{len .Content}}", m, "truthy 2");
    expect_out("{{eq . .}}", m, "true");
    tmpl_value_unref(m);
}

static void test_error_positions(void **state)
{
    expect_err("line one\nline two\n{{ .Prompt }} {{ foo }}", NULL,
               "template:3:18: function \"foo\" not defined");
    expect_err("ab\n  {{.Nope.Deeper}}", g.data,
               "template:2:5: executing at <.Nope.Deeper>: nil pointer evaluating interface "
               "{}.Deeper");
    expect_err("{{ if .T }}", NULL, "template:1:12: unexpected EOF");
    expect_err("x {{ .Prompt", NULL, "template:1:13: unclosed action");
    expect_err("{{ 1.5 }}", NULL, "template:1:4: floating-point");
}

static void test_limits(void **state)
{
    struct tmpl_limits lim;
    char *out;
    struct mf_err err;
    char deep[600] = "";

    tmpl_limits_default(&lim);
    lim.max_source = 10;
    assert_int_equal(run("{{ .Prompt }}", g.data, &lim, 0, &out, &err), MF_ENOMEM);
    free(out);

    tmpl_limits_default(&lim);
    lim.max_depth = 8;
    for (int i = 0; i < 10; i++)
        memcpy(deep + 9 * i, "{{if .T}}", 9);
    for (int i = 0; i < 10; i++)
        memcpy(deep + 90 + 7 * i, "{{end}}", 8);
    assert_int_equal(run(deep, g.data, &lim, 0, &out, &err), MF_EINVAL);
    assert_non_null(strstr(err.msg, "nesting too deep"));
    free(out);
    assert_int_equal(run("{{((((((((((1))))))))))}}", g.data, &lim, 0, &out, &err), MF_EINVAL);
    free(out);

    tmpl_limits_default(&lim);
    lim.max_output = 100;
    assert_int_equal(run("{{range 1000}}xx{{end}}", g.data, &lim, 0, &out, &err), MF_ENOMEM);
    assert_non_null(strstr(err.msg, "output exceeds 100 bytes"));
    free(out);

    tmpl_limits_default(&lim);
    lim.max_iterations = 1000;
    assert_int_equal(run("{{range 100}}{{range 100}}{{end}}{{end}}", g.data, &lim, 0, &out, &err),
                     MF_ENOMEM);
    assert_non_null(strstr(err.msg, "range iterations exceed 1000"));
    free(out);

    tmpl_limits_default(&lim);
    lim.max_steps = 5000;
    assert_int_equal(run("{{range 3000}}{{.}}{{end}}", g.data, &lim, 0, &out, &err), MF_ENOMEM);
    assert_non_null(strstr(err.msg, "steps"));
    free(out);

    /* a string doubling 40 times would need a terabyte */
    tmpl_limits_default(&lim);
    lim.max_scratch = 1 << 20;
    assert_int_equal(
        run("{{$s := \"ab\"}}{{range 40}}{{$s = print $s $s}}{{end}}", g.data, &lim, 0, &out, &err),
        MF_ENOMEM);
    free(out);
}

static void test_uses_and_touchup(void **state)
{
    struct tmpl *t;
    struct mf_err err;
    const char *src = "{{ range $i, $m := .Messages }}{{ $m.Content }}{{ end }}";
    assert_int_equal(tmpl_compile(&t, src, strlen(src), NULL, 0, &err), 0);
    assert_true(tmpl_uses(t, "messages"));
    assert_true(tmpl_uses(t, "MESSAGES"));
    assert_true(tmpl_uses(t, "content"));
    assert_true(tmpl_uses(t, "$m"));
    assert_false(tmpl_uses(t, "response"));
    tmpl_free(t);

    char *out;
    struct tmpl_value *d = tmpl_value_map();
    assert_int_equal(tmpl_value_set(d, "Prompt", tmpl_value_cstr("P"), &err), 0);
    assert_int_equal(tmpl_value_set(d, "Response", tmpl_value_cstr("R"), &err), 0);
    assert_int_equal(run("[{{ .Prompt }}]", d, NULL, TMPL_F_OLLAMA, &out, &err), 0);
    assert_string_equal(out, "[P]R");
    free(out);
    assert_int_equal(run("[{{ .Prompt }}]{{ .Response }}", d, NULL, TMPL_F_OLLAMA, &out, &err), 0);
    assert_string_equal(out, "[P]R");
    free(out);
    assert_int_equal(run("[{{ .Prompt }}]", d, NULL, 0, &out, &err), 0);
    assert_string_equal(out, "[P]");
    free(out);
    tmpl_value_unref(d);
}

static void chat_expect(const char *src, const struct tmpl_message *m, size_t n, const char *want)
{
    struct tmpl *t;
    struct mf_err err;
    struct mf_buf b;
    struct tmpl_chat chat = {.msgs = m, .n_msgs = n};
    mf_buf_init(&b, 1 << 20);
    if (tmpl_compile(&t, src, strlen(src), NULL, TMPL_F_OLLAMA, &err))
        fail_msg("%s", err.msg);
    if (tmpl_render_chat(t, &chat, &b, &err))
        fail_msg("%s", err.msg);
    assert_string_equal(b.data ? b.data : "", want);
    mf_buf_free(&b);
    tmpl_free(t);
}

static void test_chat_legacy(void **state)
{
    const char *src = "{{ if .System }}S:{{ .System }}\n{{ end }}{{ if .Prompt }}U:{{ .Prompt }}\n"
                      "{{ end }}A:{{ .Response }}<end>\n";
    struct tmpl_message m[] = {
        {.role = "system", .content = "sys"},
        {.role = "user", .content = "hi"},
        {.role = "assistant", .content = "hello"},
        {.role = "user", .content = "bye"},
    };
    chat_expect(src, m, 4, "S:sys\nU:hi\nA:hello<end>\nU:bye\nA:");
    chat_expect(src, m, 2, "S:sys\nU:hi\nA:");
    chat_expect(src, NULL, 0, "A:");
    /* the last turn keeps {{ .Response }} and drops everything after it */
    chat_expect("<{{ .Prompt }}>{{ if .Response }}[{{ .Response }}]{{ end }}!", m + 1, 3,
                "<hi>[hello]!<bye>");
    /* Ollama appends {{ .Response }} to a template that lacks it */
    chat_expect("U:{{ .Prompt }} A:", m + 1, 3, "U:hi A:helloU:bye A:");
    /* a command whose arguments are all cut takes its action along (Ollama's deleteNode) */
    chat_expect("{{ .Prompt }}={{ .Response | printf \"%s.\" }};", m + 1, 1, "hi=");
}

/* A legacy template with or without {{ .Response }}, and a .Messages one,
 * render a chat the same way; a trailing assistant message is a prefill
 * that the reply continues. */
static void test_chat_modes_agree(void **state)
{
    const char *no_resp = "<q>{{ if .System }}{{ .System }}\n\n{{ end }}{{ .Prompt }}</q> ";
    const char *resp =
        "<q>{{ if .System }}{{ .System }}\n\n{{ end }}{{ .Prompt }}</q> {{ .Response }}";
    const char *msgs = "<q>{{ if .System }}{{ .System }}\n\n{{ end }}\n{{- range .Messages }}\n"
                       "{{- if eq .Role \"user\" }}{{ .Content }}</q> {{ else if eq .Role "
                       "\"assistant\" }}{{ .Content }}<q>{{ end }}\n{{- end }}";
    struct tmpl_message m[] = {
        {.role = "system", .content = "Be kind."},
        {.role = "user", .content = "one"},
        {.role = "assistant", .content = "two"},
        {.role = "user", .content = "three"},
    };
    const char *want = "<q>Be kind.\n\none</q> two<q>three</q> ";
    chat_expect(no_resp, m, 4, want);
    chat_expect(resp, m, 4, want);
    chat_expect(msgs, m, 4, want);
    chat_expect(no_resp, m + 1, 3, "<q>one</q> two<q>three</q> ");

    struct tmpl_message pre[] = {
        {.role = "user", .content = "a"},
        {.role = "assistant", .content = "b"},
        {.role = "user", .content = "c"},
        {.role = "assistant", .content = "The answer is"},
    };
    chat_expect("[{{ .Prompt }}] ", pre, 4, "[a] b[c] The answer is");
    chat_expect("[{{ .Prompt }}] {{ .Response }}", pre, 4, "[a] b[c] The answer is");
}

static void test_chat_messages(void **state)
{
    const char *src = "{{ .System }}|{{ range $i, $m := .Messages }}{{ $i }}{{ .Role }}="
                      "{{ .Content }}[{{ len .ToolCalls }}],{{ end }}|{{ len .Tools }}";
    struct tmpl_message m[] = {
        {.role = "system", .content = "a"},    {.role = "system", .content = "b"},
        {.role = "user", .content = "u1"},     {.role = "user", .content = "u2"},
        {.role = "tool", .content = "t1"},     {.role = "tool", .content = "t2"},
        {.role = "assistant", .content = "x"},
    };
    chat_expect(src, m, 7,
                "a\n\nb|0system=a\n\nb[0],1user=u1\n\nu2[0],2tool=t1[0],3tool=t2[0],"
                "4assistant=x[0],|0");
    chat_expect("{{ if .Messages }}m{{ else }}none{{ end }}", NULL, 0, "none");

    /* fill-in-the-middle */
    const char *fim = "{{- if .Suffix }}<PRE> {{ .Prompt }} <SUF>{{ .Suffix }} <MID>"
                      "{{- else }}{{ .Prompt }}{{- end }}";
    struct tmpl *t;
    struct mf_err err;
    struct mf_buf b;
    struct tmpl_chat chat = {.msgs = m + 2, .n_msgs = 1, .prompt = "def f(", .suffix = "return x"};
    mf_buf_init(&b, 4096);
    assert_int_equal(tmpl_compile(&t, fim, strlen(fim), NULL, TMPL_F_OLLAMA, &err), 0);
    assert_int_equal(tmpl_render_chat(t, &chat, &b, &err), 0);
    assert_string_equal(b.data, "<PRE> def f( <SUF>return x <MID>");
    mf_buf_reset(&b);
    chat.suffix = NULL;
    assert_int_equal(tmpl_render_chat(t, &chat, &b, &err), 0);
    assert_string_equal(b.data, "u1");
    mf_buf_free(&b);
    tmpl_free(t);
}

static void test_value_api(void **state)
{
    struct mf_err err;
    struct tmpl_value *l = tmpl_value_list();
    struct tmpl_value *s = tmpl_value_cstr("x");
    assert_int_equal(tmpl_value_push(l, tmpl_value_ref(s), &err), 0);
    assert_int_equal(tmpl_value_push(l, NULL, &err), MF_ENOMEM);
    assert_int_equal(tmpl_value_push(s, tmpl_value_int(1), &err), MF_EINVAL);
    assert_int_equal(tmpl_value_set(l, "k", tmpl_value_int(1), &err), MF_EINVAL);
    assert_int_equal(tmpl_value_kind(l), TMPL_LIST);
    assert_int_equal(tmpl_value_kind(NULL), TMPL_NIL);
    struct tmpl_value *m = tmpl_value_map();
    assert_int_equal(tmpl_value_set(m, "k", tmpl_value_int(1), &err), 0);
    assert_int_equal(tmpl_value_set(m, "k", tmpl_value_int(2), &err), 0); /* replaces */
    assert_int_equal(tmpl_value_set(m, "l", l, &err), 0);
    expect_out("{{.k}} {{.l}} {{index .l 0}}", m, "2 [x] x");
    expect_out("{{index .l 0 0}}", m, "120"); /* a string's byte */
    /* indexing that byte again is Go's error, and frees it (a fuzzer-found leak) */
    expect_err("{{index .l 0 0 1}}", m, "can't index item of type uint8");
    tmpl_value_unref(m);
    tmpl_value_unref(s);
    tmpl_value_unref(NULL);
}

int main(void)
{
    static struct CMUnitTest tests[400 + 16];
    size_t n = 0;
    load_go_cases();
    for (size_t i = 0; i < g.n; i++) {
        struct CMUnitTest t = cmocka_unit_test_prestate(test_go_case, &g.c[i]);
        t.name = g.c[i].name;
        tests[n++] = t;
    }
    const struct CMUnitTest own[] = {
        cmocka_unit_test(test_struct_fields), cmocka_unit_test(test_error_positions),
        cmocka_unit_test(test_limits),        cmocka_unit_test(test_uses_and_touchup),
        cmocka_unit_test(test_chat_legacy),   cmocka_unit_test(test_chat_modes_agree),
        cmocka_unit_test(test_chat_messages), cmocka_unit_test(test_value_api),
    };
    for (size_t i = 0; i < sizeof own / sizeof own[0]; i++)
        tests[n++] = own[i];
    int rc = _cmocka_run_group_tests("template", tests, n, NULL, NULL);
    tmpl_value_unref(g.data);
    json_decref(g.cases);
    return rc;
}
