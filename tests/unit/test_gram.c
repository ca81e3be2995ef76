/*
 * test_gram.c: the grammar engine: GBNF parsing and its errors, the
 * byte-level matcher on sentences and non-sentences (UTF-8 classes,
 * repetitions, recursion), token masks against a brute-force check of
 * every token, JSON Schema compilation (outputs generated at random through
 * the masks validate against the schema) and its errors.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <regex.h>

#include "runtime/engine/sampler.h"
#include <jansson.h>

#include "runtime/grammar/gram.h"
#include "text/tokenizer.h"

static struct gram *compile(const char *src, const struct gram_vocab *v)
{
    struct gram *g = NULL;
    struct mf_err err = {0};
    int rc = gram_new(src, strlen(src), v, &g, &err);
    if (rc)
        fail_msg("%s", err.msg);
    return g;
}

/* 1: whole sentence, 0: prefix only, -1: rejected */
static int match(struct gram *g, const char *s)
{
    struct mf_err err = {0};
    uint32_t st = gram_start(g, &err);
    st = gram_feed(g, st, s, strlen(s), &err);
    if (st == GRAM_DEAD)
        return -1;
    return gram_accepting(g, st) ? 1 : 0;
}

static void test_gbnf_basics(void **state)
{
    (void)state;
    struct gram *g = compile("root ::= \"a\" [b-d]+ (\"x\" | \"yz\")? # comment\n", NULL);
    assert_int_equal(match(g, "ab"), 1);
    assert_int_equal(match(g, "abcdd"), 1);
    assert_int_equal(match(g, "abx"), 1);
    assert_int_equal(match(g, "aby"), 0);
    assert_int_equal(match(g, "abyz"), 1);
    assert_int_equal(match(g, "a"), 0);
    assert_int_equal(match(g, "ae"), -1);
    assert_int_equal(match(g, "abxx"), -1);
    gram_unref(g);

    g = compile("root ::= x{2,3} y{2} z{1,} w{,2}\nx ::= \"x\"\ny ::= \"y\"\nz ::= \"z\"\n"
                "w ::= \"w\"",
                NULL);
    assert_int_equal(match(g, "xyyz"), -1);
    assert_int_equal(match(g, "xxyyz"), 1);
    assert_int_equal(match(g, "xxxyyzzzww"), 1);
    assert_int_equal(match(g, "xxxxyyz"), -1);
    assert_int_equal(match(g, "xxyyzwww"), -1);
    gram_unref(g);

    /* alternatives continue after a trailing | on the next line; groups span lines */
    g = compile("root ::= \"a\" |\n  \"b\" (\n \"c\"\n | \"d\" )\n", NULL);
    assert_int_equal(match(g, "a"), 1);
    assert_int_equal(match(g, "bc"), 1);
    assert_int_equal(match(g, "bd"), 1);
    assert_int_equal(match(g, "b"), 0);
    gram_unref(g);

    /* recursion: balanced parentheses */
    g = compile("root ::= p\np ::= \"(\" p* \")\"\n", NULL);
    assert_int_equal(match(g, "(()(()))"), 1);
    assert_int_equal(match(g, "(()"), 0);
    assert_int_equal(match(g, "())"), -1);
    gram_unref(g);
}

static void test_gbnf_utf8(void **state)
{
    (void)state;
    struct gram *g = compile("root ::= [^\"\\\\]* \"\\\"\"\n", NULL);
    assert_int_equal(match(g, "h\xC3\xA9llo \xE2\x82\xAC \xF0\x9F\x98\x80\""), 1);
    assert_int_equal(match(g, "\xC3"), 0);          /* inside a character */
    assert_int_equal(match(g, "\xFF"), -1);         /* never UTF-8 */
    assert_int_equal(match(g, "\xED\xA0\x80"), -1); /* a surrogate */
    assert_int_equal(match(g, "\xC0\xAF"), -1);     /* overlong */
    assert_int_equal(match(g, "a\\"), -1);
    gram_unref(g);

    g = compile("root ::= [^] [^\\x00-\\x7F]\n", NULL); /* an empty negated class: any */
    assert_int_equal(match(g, "a\xC3\xA9"), 1);
    assert_int_equal(match(g, "ab"), -1);
    gram_unref(g);

    g = compile("root ::= [α-γ] . \"\\u00e9\" [\\x41-\\x43]\n", NULL);
    assert_int_equal(match(g, "\xCE\xB2z\xC3\xA9"
                              "B"),
                     1);
    assert_int_equal(match(g, "\xCE\xB4z\xC3\xA9"
                              "B"),
                     -1);
    assert_int_equal(match(g, "\xCE\xB1\xE2\x82\xAC\xC3\xA9"
                              "C"),
                     1);
    assert_int_equal(match(g, "\xCE\xB1\n\xC3\xA9"
                              "D"),
                     -1);
    gram_unref(g);
}

static void expect_error(const char *src, const char *needle)
{
    struct gram *g = NULL;
    struct mf_err err = {0};
    int rc = gram_new(src, strlen(src), NULL, &g, &err);
    assert_int_not_equal(rc, 0);
    assert_null(g);
    if (!strstr(err.msg, needle))
        fail_msg("error '%s' lacks '%s'", err.msg, needle);
}

static void test_gbnf_errors(void **state)
{
    (void)state;
    expect_error("rot ::= \"a\"\n", "no rule named 'root'");
    expect_error("root ::= a\n", "rule 'a' is used but not defined");
    expect_error("root ::= root \"a\" | \"b\"\n", "left recursion");
    expect_error("root ::= x\nx ::= y? root\ny ::= \"a\"\n", "left recursion");
    expect_error("root ::= \"a\n", "line 1, column 10: unterminated string");
    expect_error("root ::= \"a\"\nb ::= [z-a]\n", "line 2");
    expect_error("root ::= \"a\"{3,2}\n", "n < m");
    expect_error("root ::= \"a\"{20000}\n", "above 10000");
    expect_error("root ::= ( \"a\"\n", "expected ')'");
    expect_error("root ::= \"\\q\"\n", "unknown escape");
    expect_error("root ::= \"a\"\nroot ::= \"b\"\n", "defined twice");
    expect_error("root ::= * \"a\"\n", "nothing before it");
    expect_error("root ::= \"\\xFF\xFF\"\n", "invalid UTF-8");
}

/* ---- masks ---- */

static uint64_t rng = 88172645463325252ull;
static uint32_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)rng;
}

struct vocab {
    char **pieces;
    size_t *lens;
    uint8_t *eog;
    int32_t n;
    struct gram_vocab *v;
};

/* Random tokens over alphabet, plus every single byte, plus one EOG and
 * one never-allowed token. */
static void make_vocab(struct vocab *w, const char *alphabet, int32_t n)
{
    size_t na = strlen(alphabet);
    struct mf_err err = {0};
    w->n = n;
    w->pieces = calloc((size_t)n, sizeof *w->pieces);
    w->lens = calloc((size_t)n, sizeof *w->lens);
    w->eog = calloc((size_t)n, 1);
    for (int32_t i = 0; i < n; i++) {
        char buf[16];
        size_t len;
        if (i < 256) {
            buf[0] = (char)i;
            len = 1;
        } else {
            len = 1 + rnd() % 6;
            for (size_t k = 0; k < len; k++)
                buf[k] = alphabet[rnd() % na];
        }
        w->pieces[i] = malloc(len);
        memcpy(w->pieces[i], buf, len);
        w->lens[i] = len;
    }
    w->eog[n - 1] = 1;
    free(w->pieces[n - 2]);
    w->pieces[n - 2] = NULL; /* a control token */
    assert_int_equal(
        gram_vocab_from_pieces((const char *const *)w->pieces, w->lens, w->eog, n, &w->v, &err), 0);
}

static void free_vocab(struct vocab *w)
{
    for (int32_t i = 0; i < w->n; i++)
        free(w->pieces[i]);
    free(w->pieces);
    free(w->lens);
    free(w->eog);
    gram_vocab_free(w->v);
}

/* The mask of st against feeding every token on its own. */
static void check_mask(struct gram *g, struct vocab *w, uint32_t st)
{
    struct mf_err err = {0};
    uint32_t *m = calloc(((size_t)w->n + 31) / 32, sizeof *m);
    assert_int_equal(gram_mask(g, st, m, &err), 0);
    for (int32_t i = 0; i < w->n; i++) {
        int want;
        if (w->eog[i])
            want = gram_accepting(g, st);
        else if (!w->pieces[i])
            want = 0;
        else
            want = gram_feed(g, st, w->pieces[i], w->lens[i], &err) != GRAM_DEAD;
        int got = (int)((m[i >> 5] >> (i & 31)) & 1u);
        if (got != want)
            fail_msg("token %d ('%.*s'): mask %d, brute force %d", i, (int)w->lens[i],
                     w->pieces[i] ? w->pieces[i] : "", got, want);
        assert_int_equal(gram_feed_token(g, st, i, &err) != GRAM_DEAD, want);
    }
    free(m);
}

/* Picks a random allowed token; -1 when only EOG (or nothing) is left. */
static int32_t pick(struct gram *g, struct vocab *w, uint32_t st, int prefer_end)
{
    struct mf_err err = {0};
    uint32_t *m = calloc(((size_t)w->n + 31) / 32, sizeof *m);
    int32_t *ok = malloc((size_t)w->n * sizeof *ok), n = 0, tok = -1;
    assert_int_equal(gram_mask(g, st, m, &err), 0);
    for (int32_t i = 0; i < w->n; i++)
        if (((m[i >> 5] >> (i & 31)) & 1u) && !w->eog[i])
            ok[n++] = i;
    if (n && !(prefer_end && gram_accepting(g, st)))
        tok = ok[rnd() % (uint32_t)n];
    free(m);
    free(ok);
    return tok;
}

static void test_mask_brute_force(void **state)
{
    (void)state;
    struct vocab w;
    make_vocab(&w, "{}[]\",:0123456789.-eE+ \ntruefalsn\\u\xC3\xA9", 3000);
    struct mf_buf src;
    struct mf_err err = {0};
    mf_buf_init(&src, 1 << 20);
    assert_int_equal(gram_json_gbnf(0, &src, &err), 0);
    struct gram *g = compile(src.data, w.v);
    for (int walk = 0; walk < 12; walk++) {
        uint32_t st = gram_start(g, &err);
        for (int step = 0; step < 60; step++) {
            check_mask(g, &w, st);
            int32_t t = pick(g, &w, st, step > 30);
            if (t < 0)
                break;
            st = gram_feed_token(g, st, t, &err);
            assert_int_not_equal(st, GRAM_DEAD);
        }
    }
    struct gram_stats s;
    gram_stats(g, &s);
    assert_true(s.mask_hits > 0);  /* states recur: the cache served some */
    assert_true(s.core_masks > 0); /* and some masks came from a shared core */
    gram_unref(g);
    /* bounded strings (cores cap their repetitions at the longest token) */
    mf_buf_reset(&src);
    json_t *schema = json_loads("{\"type\":\"object\",\"properties\":{\"s\":{\"type\":"
                                "\"string\",\"maxLength\":40},\"t\":{\"type\":\"array\","
                                "\"items\":{\"type\":\"string\",\"minLength\":2,\"maxLength\":"
                                "12}}},\"required\":[\"s\",\"t\"]}",
                                0, NULL);
    assert_int_equal(gram_schema_gbnf(schema, "schema", &src, &err), 0);
    json_decref(schema);
    g = compile(src.data, w.v);
    for (int walk = 0; walk < 12; walk++) {
        uint32_t st = gram_start(g, &err);
        for (int step = 0; step < 60; step++) {
            check_mask(g, &w, st);
            int32_t t = pick(g, &w, st, step > 45);
            if (t < 0)
                break;
            st = gram_feed_token(g, st, t, &err);
            assert_int_not_equal(st, GRAM_DEAD);
        }
    }
    gram_stats(g, &s);
    assert_true(s.core_masks > 0);
    gram_unref(g);
    mf_buf_free(&src);
    free_vocab(&w);
}

/* ---- JSON Schema ---- */

static struct gram *schema_gram(const char *schema_text, const struct gram_vocab *v)
{
    struct mf_err err = {0};
    struct mf_buf src;
    json_error_t je;
    json_t *s = json_loads(schema_text, 0, &je);
    assert_non_null(s);
    mf_buf_init(&src, 1 << 22);
    if (gram_schema_gbnf(s, "schema", &src, &err))
        fail_msg("%s", err.msg);
    struct gram *g = compile(src.data, v);
    mf_buf_free(&src);
    json_decref(s);
    return g;
}

static int schema_error(const char *schema_text, const char *needle)
{
    struct mf_err err = {0};
    struct mf_buf src;
    json_t *s = json_loads(schema_text, 0, NULL);
    assert_non_null(s);
    mf_buf_init(&src, 1 << 22);
    int rc = gram_schema_gbnf(s, "response_format.json_schema.schema", &src, &err);
    if (!rc)
        fail_msg("schema %s compiled", schema_text);
    if (!strstr(err.msg, needle))
        fail_msg("error '%s' lacks '%s'", err.msg, needle);
    mf_buf_free(&src);
    json_decref(s);
    return rc;
}

static void test_schema_integers(void **state)
{
    (void)state;
    static const struct {
        const char *schema;
        long lo, hi;
    } cases[] = {
        {"{\"type\":\"integer\",\"minimum\":-5,\"maximum\":120}", -5, 120},
        {"{\"type\":\"integer\",\"minimum\":0,\"maximum\":0}", 0, 0},
        {"{\"type\":\"integer\",\"minimum\":7,\"maximum\":7}", 7, 7},
        {"{\"type\":\"integer\",\"minimum\":-120,\"maximum\":-5}", -120, -5},
        {"{\"type\":\"integer\",\"minimum\":1,\"maximum\":1000}", 1, 1000},
        {"{\"type\":\"integer\",\"maximum\":15}", -100000, 15},
        {"{\"type\":\"integer\",\"exclusiveMinimum\":99}", 100, 100000},
        {"{\"type\":\"integer\",\"minimum\":-1234,\"exclusiveMaximum\":987}", -1234, 986},
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        struct gram *g = schema_gram(cases[k].schema, NULL);
        for (long i = -1500; i <= 1500; i++) {
            char buf[32];
            snprintf(buf, sizeof buf, "%ld", i);
            int in = i >= cases[k].lo && i <= cases[k].hi;
            if ((match(g, buf) == 1) != in)
                fail_msg("%s: %ld %s", cases[k].schema, i, in ? "rejected" : "accepted");
        }
        assert_int_equal(match(g, "007"), -1);
        gram_unref(g);
    }
    struct gram *g = schema_gram("{\"type\":\"number\",\"minimum\":-2,\"maximum\":3}", NULL);
    assert_int_equal(match(g, "2.75"), 1);
    assert_int_equal(match(g, "3"), 1);
    assert_int_equal(match(g, "3.5"), -1);
    assert_int_equal(match(g, "-1.5"), 1);
    assert_int_equal(match(g, "-2"), 1);
    assert_int_equal(match(g, "-2.5"), -1);
    assert_int_equal(match(g, "4"), -1);
    gram_unref(g);
}

/* A validator for the keywords the test schema uses. */
static int validate(const json_t *root, const json_t *s, const json_t *v);

static int utf8_len(const char *s)
{
    int n = 0;
    for (; *s; s++)
        n += ((unsigned char)*s & 0xC0) != 0x80;
    return n;
}

static int validate(const json_t *root, const json_t *s, const json_t *v)
{
    const json_t *x;
    if ((x = json_object_get(s, "$ref"))) {
        const char *ref = json_string_value(x); /* "#/$defs/name" */
        return validate(root, json_object_get(json_object_get(root, "$defs"), ref + 8), v);
    }
    if ((x = json_object_get(s, "const")) && !json_equal(x, v))
        return 0;
    if ((x = json_object_get(s, "enum"))) {
        size_t i;
        const json_t *e;
        int any = 0;
        json_array_foreach(x, i, e) any |= json_equal(e, v);
        if (!any)
            return 0;
    }
    if ((x = json_object_get(s, "anyOf"))) {
        size_t i;
        const json_t *e;
        int any = 0;
        json_array_foreach(x, i, e) any |= validate(root, e, v);
        if (!any)
            return 0;
    }
    if ((x = json_object_get(s, "type"))) {
        int ok = 0;
        for (size_t i = 0; i < (json_is_array(x) ? json_array_size(x) : 1); i++) {
            const char *t = json_string_value(json_is_array(x) ? json_array_get(x, i) : x);
            ok |= (!strcmp(t, "object") && json_is_object(v)) ||
                  (!strcmp(t, "array") && json_is_array(v)) ||
                  (!strcmp(t, "string") && json_is_string(v)) ||
                  (!strcmp(t, "integer") && json_is_integer(v)) ||
                  (!strcmp(t, "number") && json_is_number(v)) ||
                  (!strcmp(t, "boolean") && json_is_boolean(v)) ||
                  (!strcmp(t, "null") && json_is_null(v));
        }
        if (!ok)
            return 0;
    }
    if (json_is_number(v)) {
        double d = json_number_value(v);
        if ((x = json_object_get(s, "minimum")) && d < json_number_value(x))
            return 0;
        if ((x = json_object_get(s, "maximum")) && d > json_number_value(x))
            return 0;
    }
    if (json_is_string(v)) {
        const char *str = json_string_value(v);
        if ((x = json_object_get(s, "maxLength")) && utf8_len(str) > json_integer_value(x))
            return 0;
        if ((x = json_object_get(s, "minLength")) && utf8_len(str) < json_integer_value(x))
            return 0;
        if ((x = json_object_get(s, "pattern"))) {
            regex_t re;
            assert_int_equal(regcomp(&re, json_string_value(x), REG_EXTENDED | REG_NOSUB), 0);
            int ok = regexec(&re, str, 0, NULL, 0) == 0;
            regfree(&re);
            if (!ok)
                return 0;
        }
        if ((x = json_object_get(s, "format"))) {
            int y, m, d;
            char tail;
            if (sscanf(str, "%4d-%2d-%2d%c", &y, &m, &d, &tail) != 3 || m < 1 || m > 12 || d < 1 ||
                d > 31 || strlen(str) != 10)
                return 0;
        }
    }
    if (json_is_array(v)) {
        if ((x = json_object_get(s, "maxItems")) &&
            (json_int_t)json_array_size(v) > json_integer_value(x))
            return 0;
        if ((x = json_object_get(s, "minItems")) &&
            (json_int_t)json_array_size(v) < json_integer_value(x))
            return 0;
        if ((x = json_object_get(s, "items"))) {
            size_t i;
            const json_t *e;
            json_array_foreach(v, i, e) if (!validate(root, x, e)) return 0;
        }
    }
    if (json_is_object(v) && json_object_get(s, "properties")) {
        const json_t *props = json_object_get(s, "properties"), *req;
        const char *key;
        const json_t *e;
        json_object_foreach((json_t *)v, key, e)
        {
            const json_t *ps = json_object_get(props, key);
            if (!ps || !validate(root, ps, e))
                return 0; /* additionalProperties absent: none generated */
        }
        if ((req = json_object_get(s, "required"))) {
            size_t i;
            json_array_foreach(req, i, e) if (!json_object_get(v, json_string_value(e))) return 0;
        }
    }
    return 1;
}

static const char SCHEMA[] =
    "{\"type\":\"object\",\"properties\":{"
    "\"name\":{\"type\":\"string\",\"maxLength\":8},"
    "\"age\":{\"type\":\"integer\",\"minimum\":-5,\"maximum\":120},"
    "\"score\":{\"type\":\"number\",\"minimum\":0,\"maximum\":10},"
    "\"tags\":{\"type\":\"array\",\"items\":{\"enum\":[\"a\",\"b\\\"\",3,null]},\"maxItems\":3},"
    "\"kind\":{\"const\":\"x\"},"
    "\"opt\":{\"type\":[\"boolean\",\"null\"]},"
    "\"day\":{\"type\":\"string\",\"format\":\"date\"},"
    "\"code\":{\"type\":\"string\",\"pattern\":\"^[A-Z]{2}-[0-9]{3}(x|yz)?$\"},"
    "\"nested\":{\"$ref\":\"#/$defs/node\"}},"
    "\"required\":[\"name\",\"age\",\"score\",\"tags\",\"kind\",\"day\",\"code\"],"
    "\"additionalProperties\":false,"
    "\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{"
    "\"v\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":9},"
    "\"next\":{\"anyOf\":[{\"$ref\":\"#/$defs/node\"},{\"type\":\"null\"}]}},"
    "\"required\":[\"v\",\"next\"]}}}";

static void test_schema_random_outputs(void **state)
{
    (void)state;
    struct vocab w;
    struct mf_err err = {0};
    make_vocab(&w, "ab", 258); /* the 256 bytes, a control token, EOG */
    struct gram *g = schema_gram(SCHEMA, w.v);
    json_t *schema = json_loads(SCHEMA, 0, NULL);
    int n_opt = 0;
    for (int run = 0; run < 200; run++) {
        char out[8192];
        size_t n = 0;
        uint32_t st = gram_start(g, &err);
        for (;;) {
            assert_true(n < sizeof out - 1);
            int32_t t = pick(g, &w, st, rnd() % 4 == 0);
            if (t < 0)
                break;
            out[n++] = (char)t;
            st = gram_feed_token(g, st, t, &err);
            assert_int_not_equal(st, GRAM_DEAD);
        }
        out[n] = 0;
        assert_true(gram_accepting(g, st));
        json_error_t je;
        json_t *v = json_loads(out, JSON_DECODE_ANY, &je);
        if (!v)
            fail_msg("not JSON: %s (%s)", out, je.text);
        if (!validate(schema, schema, v))
            fail_msg("does not validate: %s", out);
        n_opt += json_object_get(v, "opt") != NULL;
        json_decref(v);
    }
    assert_true(n_opt > 0 && n_opt < 200); /* optional properties come and go */
    json_decref(schema);
    gram_unref(g);
    free_vocab(&w);
}

static void test_schema_errors(void **state)
{
    (void)state;
    assert_int_equal(schema_error("{\"type\":\"object\",\"properties\":{\"x\":{\"not\":{}}}}",
                                  "keyword 'not' is not supported (at /properties/x)"),
                     MF_EUNSUPPORTED);
    schema_error("{\"type\":\"object\",\"properties\":{},\"required\":[\"a\"],"
                 "\"additionalProperties\":false}",
                 "required property 'a'");
    schema_error("{\"$ref\":\"#/$defs/missing\"}", "points at nothing");
    schema_error("{\"$ref\":\"http://x/y\"}", "only local references");
    schema_error("{\"type\":\"strin\"}", "unknown type 'strin'");
    schema_error("{\"type\":\"integer\",\"minimum\":5,\"maximum\":4}", "no integer");
    schema_error("{\"type\":\"string\",\"format\":\"email\"}", "format 'email'");
    schema_error("{\"type\":\"string\",\"pattern\":\"(?=a)\"}", "lookaround");
    schema_error("{\"type\":\"string\",\"pattern\":\"(a)\\\\1\"}", "backreference");
    schema_error("{\"type\":\"array\",\"minItems\":-1}", "non-negative integer");
    schema_error("{\"uniqueItems\":true}", "'uniqueItems'");
}

static void test_json_mode(void **state)
{
    (void)state;
    struct mf_buf src;
    struct mf_err err = {0};
    mf_buf_init(&src, 1 << 20);
    assert_int_equal(gram_json_gbnf(1, &src, &err), 0);
    struct gram *g = compile(src.data, NULL);
    assert_int_equal(match(g, "{\"a\": [1, -2.5e+3, true, null, \"\\u00e9\\n\"], \"b\": {}}"), 1);
    assert_int_equal(match(g, "[1]"), -1);
    assert_int_equal(match(g, "{\"a\":01}"), -1);
    assert_int_equal(match(g, "{\"a\":\"\x01\"}"), -1);
    assert_int_equal(match(g, "{\"a\":"), 0);
    gram_unref(g);
    mf_buf_free(&src);
}

/* The sampler under a grammar: every drawn token is allowed, the end token
 * comes only once the output is a sentence, the output parses; a device
 * draw's plan carries the same mask. */
static void test_sampler_grammar(void **state)
{
    (void)state;
    struct vocab w;
    struct mf_err err = {0};
    struct mf_buf src;
    make_vocab(&w, "{}[]\",:0123456789 .-truefalsn", 1200);
    mf_buf_init(&src, 1 << 20);
    assert_int_equal(gram_json_gbnf(1, &src, &err), 0);
    struct gram *g = compile(src.data, w.v);
    float *logits = malloc((size_t)w.n * sizeof *logits);
    uint32_t *m = calloc(((size_t)w.n + 31) / 32, sizeof *m);
    int ended = 0;
    for (int run = 0; run < 30; run++) {
        struct sampler_params p;
        struct sampler *s;
        char out[4096];
        size_t n = 0;
        sampler_params_default(&p);
        p.temperature = 1.0f;
        p.top_k = 0;
        p.top_p = 1.0f;
        p.repeat_penalty = 1.0f;
        p.seed = 77 + (uint64_t)run;
        assert_int_equal(sampler_new(&s, w.n, &p, &err), 0);
        assert_int_equal(sampler_set_grammar(s, g, 2, &err), 0);
        sampler_accept(s, 'x'); /* the prompt: not fed to the grammar */
        sampler_accept(s, 'y');
        assert_true(sampler_draw_ok(s));
        uint32_t st = gram_start(g, &err);
        for (int step = 0; step < 400; step++) {
            struct sampler_draw d;
            struct sampler_result r;
            int acc = 0;
            for (int32_t i = 0; i < w.n; i++) /* the end token is favoured: walks end */
                logits[i] = w.eog[i] ? 3.0f : (float)(rnd() % 1000) / 250.0f;
            sampler_draw_plan(s, &d);
            assert_non_null(d.allow);
            assert_int_equal(gram_mask(g, st, m, &err), 0);
            assert_memory_equal(d.allow, m, ((size_t)w.n + 31) / 32 * sizeof *m);
            assert_int_equal(sampler_sample(s, logits, &r, &err), 0);
            assert_true((m[r.token >> 5] >> (r.token & 31)) & 1u);
            assert_int_equal(sampler_grammar_state(s, &acc), 1);
            if (w.eog[r.token]) {
                assert_true(gram_accepting(g, st));
                ended++;
                break;
            }
            assert_true(n + w.lens[r.token] < sizeof out);
            memcpy(out + n, w.pieces[r.token], w.lens[r.token]);
            n += w.lens[r.token];
            st = gram_feed_token(g, st, r.token, &err);
            sampler_accept(s, r.token);
        }
        out[n] = 0;
        if (gram_accepting(g, st)) {
            json_t *v = json_loads(out, 0, NULL);
            if (!json_is_object(v))
                fail_msg("not a JSON object: %s", out);
            json_decref(v);
        }
        sampler_free(s);
    }
    assert_true(ended > 10);
    free(logits);
    free(m);
    gram_unref(g);
    mf_buf_free(&src);
    free_vocab(&w);
}

/* A control token is left out of the trie unless its text is a marker the
 * vocabulary was asked for; then it stands for that text, beside the same
 * text spelled by ordinary tokens. */
static void test_vocab_markers(void **state)
{
    (void)state;
    static const struct tok_str texts[] = {
        {"<unk>", 5}, {"<s>", 3}, {"</s>", 4}, {"[TOOL_CALLS]", 12}, {"<|im_end|>", 10},
        {"[", 1},     {"TOOL_CALLS", 10},  {"]", 1},     {"x", 1},
    };
    static const int32_t types[] = {TOK_TYPE_UNKNOWN, TOK_TYPE_CONTROL, TOK_TYPE_CONTROL,
                                    TOK_TYPE_CONTROL, TOK_TYPE_CONTROL, TOK_TYPE_NORMAL,
                                    TOK_TYPE_NORMAL,  TOK_TYPE_NORMAL,  TOK_TYPE_NORMAL};
    const char *const markers[] = {"[TOOL_CALLS]", "<|im_end|>x", NULL};
    struct tok_desc d;
    struct tok *t;
    struct mf_err err = {0};
    tok_desc_init(&d);
    d.model = "llama";
    d.tokens = texts;
    d.n_tokens = d.n_types = sizeof texts / sizeof texts[0];
    d.types = types;
    d.special[TOK_ID_UNK] = 0;
    d.special[TOK_ID_BOS] = 1;
    d.special[TOK_ID_EOS] = 2;
    if (tok_new(&d, &t, &err))
        fail_msg("tok_new: %s", err.msg);
    static const char src[] = "root ::= \"[TOOL_CALLS]\" \"x\"+";
    for (int with = 0; with < 2; with++) {
        struct gram_vocab *v;
        struct gram *g;
        uint32_t m[1] = {0};
        assert_int_equal(gram_vocab_new(t, with ? markers : NULL, &v, &err), 0);
        assert_int_equal(gram_new(src, strlen(src), v, &g, &err), 0);
        uint32_t st = gram_start(g, &err);
        assert_int_equal(gram_mask(g, st, m, &err), 0);
        assert_int_equal((m[0] >> 5) & 1u, 1);    /* "[" spells it out either way */
        assert_int_equal((m[0] >> 3) & 1u, with); /* the marker token only when asked */
        assert_int_equal((m[0] >> 4) & 1u, 0);    /* another control token: never */
        assert_int_equal((m[0] >> 1) & 1u, 0);
        uint32_t after = gram_feed_token(g, st, 3, &err);
        assert_true(with ? after != GRAM_DEAD : after == GRAM_DEAD);
        if (with) /* the same state as the text spelled out */
            assert_int_equal(after, gram_feed(g, st, "[TOOL_CALLS]", 12, &err));
        gram_unref(g);
        gram_vocab_free(v);
    }
    tok_free(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gbnf_basics),     cmocka_unit_test(test_gbnf_utf8),
        cmocka_unit_test(test_gbnf_errors),     cmocka_unit_test(test_mask_brute_force),
        cmocka_unit_test(test_schema_integers), cmocka_unit_test(test_schema_random_outputs),
        cmocka_unit_test(test_schema_errors),   cmocka_unit_test(test_json_mode),
        cmocka_unit_test(test_sampler_grammar), cmocka_unit_test(test_vocab_markers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
