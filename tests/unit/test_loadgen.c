/*
 * test_loadgen.c: unit tests for bench/loadgen_sse.c, the load generator's
 * response parser: chunked, Content-Length and close-delimited bodies fed
 * whole and a byte at a time give the same events; a non-200 body is kept
 * for the message; malformed heads, chunk sizes and overlong lines end with
 * LG_ERROR and a sentence; the JSON walker finds text, finish_reason, usage
 * and errors only where OpenAI's shapes put them (not inside strings).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "bench/loadgen_sse.h"

struct seen {
    char events[8][256];
    int n;
    int stop_after; /* return 1 from the callback at this many events (0: never) */
};

static int collect(void *user, const char *data, size_t n)
{
    struct seen *s = user;
    if (s->n < 8) {
        size_t k = n < 255 ? n : 255;
        memcpy(s->events[s->n], data, k);
        s->events[s->n][k] = '\0';
    }
    s->n++;
    return s->stop_after && s->n >= s->stop_after;
}

/* Feeds msg whole (step 0) or in pieces of step bytes; returns the last rc. */
static int feed(struct lg_resp *r, const char *msg, size_t step, struct seen *s)
{
    size_t n = strlen(msg);
    int rc = LG_MORE;
    if (!step)
        step = n;
    for (size_t i = 0; i < n && rc == LG_MORE; i += step)
        rc = lg_resp_feed(r, msg + i, n - i < step ? n - i : step, collect, s);
    return rc;
}

static const char *chunked =
    "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    "22\r\ndata: {\"choices\":[{\"text\":\"a\"}]}\n\n\r\n"
    "a;ext=1\r\n: comment\n\r\n"
    "e\r\ndata: [DONE]\n\n\r\n"
    "0\r\n\r\n";

static void test_chunked_whole_and_bytewise(void **state)
{
    for (size_t step = 0; step <= 3; step += 1) {
        struct lg_resp r;
        struct seen s = {0};
        lg_resp_init(&r);
        assert_int_equal(feed(&r, chunked, step, &s), LG_DONE);
        assert_int_equal(r.status, 200);
        assert_int_equal(s.n, 2);
        assert_string_equal(s.events[0], "{\"choices\":[{\"text\":\"a\"}]}");
        assert_string_equal(s.events[1], "[DONE]");
        lg_resp_free(&r);
    }
}

static void test_length_body_and_multiline_data(void **state)
{
    const char *body = "data: one\r\ndata:two\r\n\r\nevent: x\ndata: three\n\n";
    char msg[512];
    struct lg_resp r;
    struct seen s = {0};
    snprintf(msg, sizeof msg, "HTTP/1.1 200 OK\r\nContent-Length: %zu\r\n\r\n%sIGNORED",
             strlen(body), body);
    lg_resp_init(&r);
    assert_int_equal(feed(&r, msg, 5, &s), LG_DONE);
    assert_int_equal(s.n, 2);
    assert_string_equal(s.events[0], "one\ntwo");
    assert_string_equal(s.events[1], "three");
    lg_resp_free(&r);
}

static void test_close_delimited_last_event_at_eof(void **state)
{
    struct lg_resp r;
    struct seen s = {0};
    lg_resp_init(&r);
    assert_int_equal(feed(&r, "HTTP/1.0 200 OK\n\ndata: a\n\ndata: b", 0, &s), LG_MORE);
    assert_int_equal(s.n, 1);
    assert_int_equal(lg_resp_eof(&r, collect, &s), LG_DONE);
    assert_int_equal(s.n, 2);
    assert_string_equal(s.events[1], "b");
    lg_resp_free(&r);
}

static void test_stop_from_callback(void **state)
{
    struct lg_resp r;
    struct seen s = {.stop_after = 1};
    lg_resp_init(&r);
    assert_int_equal(feed(&r, chunked, 0, &s), LG_STOP);
    assert_int_equal(s.n, 1);
    lg_resp_free(&r);
}

static void test_error_status_keeps_body(void **state)
{
    const char *msg = "HTTP/1.1 100 Continue\r\n\r\n"
                      "HTTP/1.1 429 Too Many Requests\r\nContent-Length: 40\r\n\r\n"
                      "{\"error\":{\"message\":\"server overloaded\"}}";
    struct lg_resp r;
    struct seen s = {0};
    lg_resp_init(&r);
    assert_int_equal(feed(&r, msg, 7, &s), LG_DONE);
    assert_int_equal(r.status, 429);
    assert_int_equal(s.n, 0);
    assert_non_null(strstr(r.errbody, "server overloaded"));
    lg_resp_free(&r);
}

static void test_malformed(void **state)
{
    static const char *bad[] = {
        "SMTP 220 hello\r\n",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabcd\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct lg_resp r;
        struct seen s = {0};
        lg_resp_init(&r);
        assert_int_equal(feed(&r, bad[i], 0, &s), LG_ERROR);
        assert_true(strlen(r.why) > 10);
        lg_resp_free(&r);
    }
    /* a head line past LG_LINE_MAX */
    char *big = malloc(LG_LINE_MAX + 64);
    struct lg_resp r;
    struct seen s = {0};
    assert_non_null(big);
    memset(big, 'x', LG_LINE_MAX + 63);
    memcpy(big, "HTTP/1.1 200 OK\r\nX: ", 20);
    big[LG_LINE_MAX + 63] = '\0';
    lg_resp_init(&r);
    assert_int_equal(feed(&r, big, 0, &s), LG_ERROR);
    lg_resp_free(&r);
    free(big);
    assert_non_null(strstr(r.why, "8 KiB"));
    /* the connection ends inside a chunked body, or before any answer */
    lg_resp_init(&r);
    assert_int_equal(
        feed(&r, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab", 0, &s), LG_MORE);
    assert_int_equal(lg_resp_eof(&r, collect, &s), LG_ERROR);
    assert_non_null(strstr(r.why, "middle"));
    lg_resp_free(&r);
    lg_resp_init(&r);
    assert_int_equal(lg_resp_eof(&r, collect, &s), LG_ERROR);
    assert_non_null(strstr(r.why, "without answering"));
    lg_resp_free(&r);
}

static void test_json_fields(void **state)
{
    struct lg_event ev;
    const char *cmpl = "{\"id\":\"x\",\"choices\":[{\"index\":0,\"text\":\"hi\",\"logprobs\":null,"
                       "\"finish_reason\":null}],\"usage\":null}";
    assert_int_equal(lg_json_scan(cmpl, strlen(cmpl), &ev), 0);
    assert_true(ev.text);
    assert_false(ev.finish);
    assert_int_equal(ev.completion_tokens, -1);

    const char *fin = "{ \"choices\" : [ { \"text\" : \"\", \"finish_reason\" : \"length\" } ] }";
    assert_int_equal(lg_json_scan(fin, strlen(fin), &ev), 0);
    assert_false(ev.text);
    assert_true(ev.finish);
    assert_string_equal(ev.finish_reason, "length");

    const char *use = "{\"choices\":[],\"usage\":{\"prompt_tokens\":512,\"completion_tokens\":128,"
                      "\"total_tokens\":640}}";
    assert_int_equal(lg_json_scan(use, strlen(use), &ev), 0);
    assert_int_equal(ev.completion_tokens, 128);

    const char *chat = "{\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"x\"}}]}";
    assert_int_equal(lg_json_scan(chat, strlen(chat), &ev), 0);
    assert_true(ev.text);

    /* text that looks like members is not read as them */
    const char *tricky = "{\"choices\":[{\"text\":\"\\\"finish_reason\\\":\\\"stop\\\", "
                         "\\\"completion_tokens\\\":9\"}]}";
    assert_int_equal(lg_json_scan(tricky, strlen(tricky), &ev), 0);
    assert_true(ev.text);
    assert_false(ev.finish);
    assert_int_equal(ev.completion_tokens, -1);

    /* a "text" outside choices, completion_tokens outside usage */
    const char *other = "{\"text\":\"x\",\"completion_tokens\":3,\"a\":[1.5e3,-2,true,false]}";
    assert_int_equal(lg_json_scan(other, strlen(other), &ev), 0);
    assert_false(ev.text);
    assert_int_equal(ev.completion_tokens, -1);

    const char *err = "{\"error\":{\"message\":\"bad \\\"x\\\"\\nline\",\"type\":\"t\"}}";
    assert_int_equal(lg_json_scan(err, strlen(err), &ev), 0);
    assert_true(ev.error);
    assert_string_equal(ev.message, "bad \"x\"\nline");
    const char *err2 = "{\"error\":\"overloaded\"}";
    assert_int_equal(lg_json_scan(err2, strlen(err2), &ev), 0);
    assert_true(ev.error);
    assert_string_equal(ev.message, "overloaded");
}

static void test_json_malformed(void **state)
{
    static const char *bad[] = {"",        "{",           "{\"a\":}", "{\"a\":1,}",  "[1 2]",
                                "\"\\x\"", "{\"a\":1} x", "01x",      "{\"a\":tru}", "\"\\u12\"",
                                "-",       "1."};
    struct lg_event ev;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_int_equal(lg_json_scan(bad[i], strlen(bad[i]), &ev), -1);
    char deep[200];
    memset(deep, '[', 100);
    memset(deep + 100, ']', 100);
    assert_int_equal(lg_json_scan(deep, 200, &ev), -1); /* 100 deep: over the 64 limit */
    assert_int_equal(lg_json_scan(deep + 40, 120, &ev), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chunked_whole_and_bytewise),
        cmocka_unit_test(test_length_body_and_multiline_data),
        cmocka_unit_test(test_close_delimited_last_event_at_eof),
        cmocka_unit_test(test_stop_from_callback),
        cmocka_unit_test(test_error_status_keeps_body),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_json_fields),
        cmocka_unit_test(test_json_malformed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
