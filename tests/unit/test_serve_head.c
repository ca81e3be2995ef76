/*
 * test_serve_head.c: the front door's reading of request heads
 * (runtime/serve/serve_head.c): good heads (HTTP/1.0 and 1.1, chunked,
 * leading blank lines, bare LF), incomplete ones (more is asked for, also
 * byte by byte), every refusal with its status and code (malformed lines,
 * versions, Host, Content-Length forms and smuggling shapes, folded lines,
 * control bytes, the target, header and head limits), the error body's two
 * shapes; and that no parse reads past the bytes it is given (each prefix of
 * every case is parsed from an exactly sized heap copy, for ASan).
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

#include "runtime/serve/serve_door.h"

static const struct serve_head_limits lim = {SERVE_HEAD_MAX, SERVE_TARGET_MAX, 4096};

/* Parses an exact-size heap copy of s[0..n). */
static int parse(const char *s, size_t n, struct serve_head *h)
{
    char *copy = malloc(n ? n : 1);
    memcpy(copy, s, n);
    int r = serve_head_parse(copy, n, &lim, h);
    free(copy);
    return r;
}

static void good(const char *s)
{
    struct serve_head h;
    size_t n = strlen(s);
    assert_int_equal(parse(s, n, &h), 0);
    if (h.status)
        fail_msg("'%s': %d %s", s, h.status, h.msg);
    assert_int_equal(h.len, n);
    /* every proper prefix asks for more */
    for (size_t k = 0; k < n; k++)
        assert_int_equal(parse(s, k, &h), SERVE_HEAD_MORE);
}

static void bad(const char *s, int status, const char *code)
{
    struct serve_head h;
    assert_int_equal(parse(s, strlen(s), &h), 0);
    if (h.status != status)
        fail_msg("'%s': got %d (%s), want %d", s, h.status, h.msg, status);
    assert_string_equal(h.code, code);
    assert_true(strlen(h.msg) > 0);
}

static void test_good_heads(void **state)
{
    (void)state;
    good("GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
    good("GET / HTTP/1.0\r\n\r\n"); /* 1.0 needs no Host */
    good("POST /v1/chat/completions?x=1 HTTP/1.1\r\nHost: a:8080\r\nContent-Type: "
         "application/json\r\nContent-Length: 4096\r\nAuthorization: Bearer k\r\n\r\n");
    good("POST /api/chat HTTP/1.1\r\nhost: x\r\ntransfer-encoding: Chunked \r\n\r\n");
    good("GET / HTTP/1.1\nHost: x\n\n");                            /* bare LF line ends */
    good("\r\n\r\nGET / HTTP/1.1\r\nHost: x\r\nX-Empty:\r\n\r\n");  /* blank lines first */
    good("GET / HTTP/1.1\r\nHost: x\r\nX-T: a\tb\xc3\xa9\r\n\r\n"); /* tab, obs-text */
    good("GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 7\r\nContent-Length: 7\r\n\r\n");
    struct serve_head h;
    const char *s = "POST /api/generate HTTP/1.1\r\nHost: x\r\n\r\n{\"a\":1}";
    assert_int_equal(parse(s, strlen(s), &h), 0);
    assert_int_equal(h.status, 0);
    assert_int_equal(h.len, strlen(s) - 7); /* the body is not the head */
    assert_string_equal(h.method, "POST");
    assert_string_equal(h.path, "/api/generate");
    assert_true(h.ollama);
    s = "GET /v1/models?limit=2 HTTP/1.1\r\nHost: x\r\n\r\n";
    assert_int_equal(parse(s, strlen(s), &h), 0);
    assert_string_equal(h.path, "/v1/models");
    assert_false(h.ollama);
}

static void test_refusals(void **state)
{
    (void)state;
    bad("GARBAGE\r\n\r\n", 400, "invalid_request");
    bad("GET /\r\n\r\n", 400, "invalid_request"); /* HTTP/0.9 */
    bad("GET  / HTTP/1.1\r\nHost: x\r\n\r\n", 400, "invalid_request");
    bad("GET / HTTP/1.1 \r\nHost: x\r\n\r\n", 400, "invalid_request");
    bad("GET / HTTP/2.0\r\n\r\n", 505, "http_version_not_supported");
    bad("GET / HTTP/1.2\r\nHost: x\r\n\r\n", 505, "http_version_not_supported");
    bad("GET / HTTP/0.9\r\n\r\n", 505, "http_version_not_supported");
    bad("GET / HTTX/1.1\r\n\r\n", 400, "invalid_request");
    bad("G(T / HTTP/1.1\r\n\r\n", 400, "invalid_request");
    bad("GET / HTTP/1.1\r\n\r\n", 400, "invalid_request"); /* no Host */
    bad("GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400, "invalid_request");
    bad("GET / HTTP/1.1\r\nHost : x\r\n\r\n", 400, "invalid_request"); /* space before : */
    bad("GET / HTTP/1.1\r\nHost: x\r\nNoColon\r\n\r\n", 400, "invalid_request");
    bad("GET / HTTP/1.1\r\nHost: x\r\nX: a\r\n folded\r\n\r\n", 400, "invalid_request");
    bad("GET / HTTP/1.1\r\nHost: x\r\nX: a\rb\r\n\r\n", 400, "invalid_request"); /* bare CR */
    bad("GET / HTTP/1.1\r\nHost: x\r\nX: a\x01\r\n\r\n", 400, "invalid_request");
    /* Content-Length: not a number, signed, hex, too long, two values */
    bad("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n", 400, "invalid_request");
    bad("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n", 400, "invalid_request");
    bad("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 0x10\r\n\r\n", 400, "invalid_request");
    bad("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1 2\r\n\r\n", 400, "invalid_request");
    bad("POST / HTTP/1.1\r\nHost: x\r\nContent-Length:\r\n\r\n", 400, "invalid_request");
    bad("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999\r\n\r\n", 400,
        "invalid_request");
    bad("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n", 400,
        "invalid_request");
    /* smuggling shapes and codings libmicrohttpd would misread */
    bad("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
        400, "invalid_request");
    bad("POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 501,
        "not_implemented");
    bad("POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: "
        "chunked\r\n\r\n",
        501, "not_implemented");
    /* by length: the body limit from Content-Length alone */
    bad("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 4097\r\n\r\n", 413,
        "request_too_large");
    good("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 4096\r\n\r\n");
}

static void test_limits(void **state)
{
    (void)state;
    struct serve_head h;
    /* a target over the limit: 414 as soon as it is clear, before the line ends */
    size_t n = SERVE_TARGET_MAX + 100;
    char *s = malloc(n);
    memcpy(s, "GET /", 5);
    memset(s + 5, 'a', n - 5);
    assert_int_equal(parse(s, n, &h), 0);
    assert_int_equal(h.status, 414);
    assert_string_equal(h.code, "uri_too_long");
    free(s);
    /* a head over the limit: 431 (one long header, then many headers) */
    n = SERVE_HEAD_MAX;
    s = malloc(n);
    const char *start = "GET / HTTP/1.1\r\nHost: x\r\nX-Big: ";
    memcpy(s, start, strlen(start));
    memset(s + strlen(start), 'b', n - strlen(start));
    assert_int_equal(parse(s, n - 1, &h), SERVE_HEAD_MORE);
    assert_int_equal(parse(s, n, &h), 0);
    assert_int_equal(h.status, 431);
    free(s);
    char many[8192];
    size_t at = (size_t)snprintf(many, sizeof many, "GET / HTTP/1.1\r\nHost: x\r\n");
    for (int i = 0; i < SERVE_HEADERS_MAX + 1; i++)
        at += (size_t)snprintf(many + at, sizeof many - at, "X-%d: y\r\n", i);
    at += (size_t)snprintf(many + at, sizeof many - at, "\r\n");
    assert_int_equal(parse(many, at, &h), 0);
    assert_int_equal(h.status, 431);
    assert_string_equal(h.code, "request_header_fields_too_large");
    /* garbage is judged at the end of its first line, without waiting */
    assert_int_equal(parse("\x16\x03\x01\x02\x00\n", 6, &h), 0);
    assert_int_equal(h.status, 400);
    assert_int_equal(parse("", 0, &h), SERVE_HEAD_MORE);
    assert_int_equal(parse("\r\n\r\n", 4, &h), SERVE_HEAD_MORE);
}

static void test_error_bodies(void **state)
{
    (void)state;
    char out[1024];
    size_t n = serve_door_error(408, "request_timeout", "too \"slow\"", 0, 0, out, sizeof out);
    assert_true(n > 0);
    assert_int_equal(strncmp(out, "HTTP/1.1 408 Request Timeout\r\n", 30), 0);
    assert_non_null(strstr(out, "\r\nContent-Type: application/json\r\n"));
    assert_non_null(strstr(out, "\r\nConnection: close\r\n"));
    assert_null(strstr(out, "Retry-After"));
    const char *body = strstr(out, "\r\n\r\n") + 4;
    char cl[48];
    snprintf(cl, sizeof cl, "Content-Length: %zu\r\n", strlen(body));
    assert_non_null(strstr(out, cl));
    json_error_t je;
    json_t *v = json_loads(body, 0, &je);
    assert_non_null(v);
    json_t *e = json_object_get(v, "error");
    assert_string_equal(json_string_value(json_object_get(e, "message")), "too \"slow\"");
    assert_string_equal(json_string_value(json_object_get(e, "type")), "invalid_request_error");
    assert_string_equal(json_string_value(json_object_get(e, "code")), "request_timeout");
    assert_true(json_is_null(json_object_get(e, "param")));
    json_decref(v);
    /* Ollama's shape, a 503 with Retry-After */
    n = serve_door_error(503, "service_unavailable", "full", 1, 1, out, sizeof out);
    assert_true(n > 0);
    assert_non_null(strstr(out, "\r\nRetry-After: 1\r\n"));
    assert_string_equal(strstr(out, "\r\n\r\n") + 4, "{\"error\":\"full\"}");
    /* too small a buffer: 0, never a cut response */
    assert_int_equal(serve_door_error(400, "x", "y", 0, 0, out, 40), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_good_heads),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_error_bodies),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
