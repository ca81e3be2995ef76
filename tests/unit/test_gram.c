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

#include "runtime/grammar/gram.h"

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
    for (int walk = 0; walk < 8; walk++) {
        uint32_t st = gram_start(g, &err);
        for (int step = 0; step < 40; step++) {
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
    assert_true(s.mask_hits > 0); /* states recur: the cache served some */
    gram_unref(g);
    mf_buf_free(&src);
    free_vocab(&w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gbnf_basics),
        cmocka_unit_test(test_gbnf_utf8),
        cmocka_unit_test(test_gbnf_errors),
        cmocka_unit_test(test_mask_brute_force),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
