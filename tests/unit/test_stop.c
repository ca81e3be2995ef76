/*
 * test_stop.c: stop strings over a streamed reply: matches split across many
 * pieces, overlapping prefixes, text held back and released, UTF-8 pieces.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "runtime/engine/stop.h"

struct run {
    char out[512]; /* everything released */
    int matched;   /* stop_feed returned 1 */
    int which;
    size_t max_held_lag; /* largest gap between fed and released bytes */
};

/* Feeds pieces (NULL-terminated) and flushes; records what came out. */
static struct run feed(const char *const *stops, size_t n_stops, const char *const *pieces)
{
    struct run r = {.which = -1};
    struct stop *s;
    struct mf_err err = {0};
    struct mf_buf out;
    size_t fed = 0;
    assert_int_equal(stop_new(&s, stops, n_stops, &err), 0);
    mf_buf_init(&out, 4096);
    for (size_t i = 0; pieces[i] && !r.matched; i++) {
        int rc = stop_feed(s, pieces[i], strlen(pieces[i]), &out, &err);
        assert_true(rc >= 0);
        fed += strlen(pieces[i]);
        if (fed - out.len > r.max_held_lag)
            r.max_held_lag = fed - out.len;
        r.matched = rc == 1;
    }
    if (!r.matched)
        assert_int_equal(stop_flush(s, &out, &err), 0);
    r.which = stop_which(s);
    snprintf(r.out, sizeof r.out, "%s", out.data ? out.data : "");
    mf_buf_free(&out);
    stop_free(s);
    return r;
}

static void test_split_over_many_tokens(void **state)
{
    const char *stops[] = {"<|im_end|>"};
    const char *pieces[] = {"Hello", " world", "<|", "im", "_", "end", "|>", "more", NULL};
    struct run r = feed(stops, 1, pieces);
    assert_true(r.matched);
    assert_int_equal(r.which, 0);
    assert_string_equal(r.out, "Hello world");
}

static void test_one_byte_pieces(void **state)
{
    const char *stops[] = {"STOP"};
    const char *text = "abcSTOxSTSTOP tail";
    char bytes[32][2];
    const char *pieces[33];
    size_t n = strlen(text);
    for (size_t i = 0; i < n; i++) {
        bytes[i][0] = text[i];
        bytes[i][1] = '\0';
        pieces[i] = bytes[i];
    }
    pieces[n] = NULL;
    struct run r = feed(stops, 1, pieces);
    assert_true(r.matched);
    assert_string_equal(r.out, "abcSTOxST");
    assert_true(r.max_held_lag <= strlen("STOP") - 1 + 1);
}

static void test_false_prefix_is_released(void **state)
{
    const char *stops[] = {"</s>"};
    const char *pieces[] = {"a </", "b> c <", "/", "x", NULL};
    struct run r = feed(stops, 1, pieces);
    assert_false(r.matched);
    assert_int_equal(r.which, -1);
    assert_string_equal(r.out, "a </b> c </x");
}

static void test_overlapping_stops(void **state)
{
    /* "abcd" and "bce": after "abc", both are live; "bce" completes first */
    const char *stops[] = {"abcd", "bce"};
    const char *p1[] = {"xab", "c", "e!", NULL};
    struct run r = feed(stops, 2, p1);
    assert_true(r.matched);
    assert_int_equal(r.which, 1);
    assert_string_equal(r.out, "xa");

    /* two stops in one piece: the earliest wins */
    const char *p2[] = {"--bce--abcd", NULL};
    r = feed(stops, 2, p2);
    assert_int_equal(r.which, 1);
    assert_string_equal(r.out, "--");

    /* a stop that is a prefix of another: the shorter matches first */
    const char *nested[] = {"<|eot_id|>", "<|eot"};
    const char *p3[] = {"hi<|e", "ot_id|>", NULL};
    r = feed(nested, 2, p3);
    assert_int_equal(r.which, 1);
    assert_string_equal(r.out, "hi");

    /* self-overlapping stop "aab" after "aaa" */
    const char *self[] = {"aab"};
    const char *p4[] = {"a", "a", "a", "a", "b", NULL};
    r = feed(self, 1, p4);
    assert_true(r.matched);
    assert_string_equal(r.out, "aa");
}

static void test_held_text_released_at_end(void **state)
{
    const char *stops[] = {"<|end|>"};
    const char *pieces[] = {"answer <|en", NULL};
    struct run r = feed(stops, 1, pieces);
    assert_false(r.matched);
    assert_string_equal(r.out, "answer <|en");
}

static void test_utf8_held_until_complete(void **state)
{
    const char *stops[] = {"\xef\xbd\x9cUser\xef\xbd\x9c"}; /* <｜User｜> without the brackets */
    struct stop *s;
    struct mf_err err = {0};
    struct mf_buf out;
    mf_buf_init(&out, 4096);
    assert_int_equal(stop_new(&s, stops, 1, &err), 0);
    assert_int_equal(stop_feed(s, "caf\xc3", 4, &out, &err), 0);
    assert_string_equal(out.data, "caf"); /* half of é is held */
    assert_int_equal(stop_feed(s, "\xa9 \xef\xbd", 4, &out, &err), 0);
    assert_string_equal(out.data, "caf\xc3\xa9 "); /* start of ｜ could begin the stop */
    assert_int_equal(stop_feed(s, "\x9cUser\xef\xbd\x9c after", 14, &out, &err), 1);
    assert_string_equal(out.data, "caf\xc3\xa9 ");
    assert_int_equal(stop_feed(s, "ignored", 7, &out, &err), 0);
    assert_int_equal(stop_flush(s, &out, &err), 0);
    assert_string_equal(out.data, "caf\xc3\xa9 ");
    stop_free(s);
    mf_buf_free(&out);
}

static void test_no_stops_and_limits(void **state)
{
    const char *pieces[] = {"plain ", "text", NULL};
    struct run r = feed(NULL, 0, pieces);
    assert_string_equal(r.out, "plain text");

    const char *empty[] = {"", "x"};
    const char *p2[] = {"abxcd", NULL};
    r = feed(empty, 2, p2);
    assert_int_equal(r.which, 1); /* index in the caller's list */
    assert_string_equal(r.out, "ab");

    struct stop *s;
    struct mf_err err = {0};
    char big[STOP_MAX_LEN + 2];
    memset(big, 'a', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    const char *too_long[] = {big};
    assert_int_equal(stop_new(&s, too_long, 1, &err), MF_ERANGE);
    assert_null(s);
    stop_free(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_split_over_many_tokens),
        cmocka_unit_test(test_one_byte_pieces),
        cmocka_unit_test(test_false_prefix_is_released),
        cmocka_unit_test(test_overlapping_stops),
        cmocka_unit_test(test_held_text_released_at_end),
        cmocka_unit_test(test_utf8_held_until_complete),
        cmocka_unit_test(test_no_stops_and_limits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
