/*
 * test_progress.c: unit tests for progress output (common/progress.c):
 * byte and rate formatting, plain lines and their throttling, JSON events,
 * and the tty redraw, all against a fake clock so nothing depends on timing.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "common/progress.h"

#define SEC 1000000000LL
#define MIB (1024 * 1024)

static int64_t fake_now;

static int64_t fake_clock(void *arg)
{
    return *(int64_t *)arg;
}

struct capture {
    char *text; /* what was written, after close_capture */
    size_t len; /* its length */
    FILE *f;    /* open_memstream */
    struct progress *p;
};

static void open_capture(struct capture *c, enum progress_mode mode)
{
    struct mf_err err;
    c->f = open_memstream(&c->text, &c->len);
    assert_non_null(c->f);
    assert_int_equal(progress_open(&c->p, c->f, mode, &err), 0);
    fake_now = 0;
    progress_set_clock(c->p, fake_clock, &fake_now);
}

static void close_capture(struct capture *c)
{
    progress_close(c->p);
    fclose(c->f);
}

static void test_formatting(void **state)
{
    char b[32];
    progress_fmt_bytes(0, b, sizeof b);
    assert_string_equal(b, "0 B");
    progress_fmt_bytes(1023, b, sizeof b);
    assert_string_equal(b, "1023 B");
    progress_fmt_bytes(1536, b, sizeof b);
    assert_string_equal(b, "1.5 KiB");
    progress_fmt_bytes(4939212390ULL, b, sizeof b); /* 4.6 GiB */
    assert_string_equal(b, "4.6 GiB");
    progress_fmt_bytes(12ULL << 30, b, sizeof b);
    assert_string_equal(b, "12 GiB");
    progress_fmt_rate(310e6, b, sizeof b);
    assert_string_equal(b, "310 MB/s");
    progress_fmt_rate(1.5e6, b, sizeof b);
    assert_string_equal(b, "1.5 MB/s");
    progress_fmt_rate(999, b, sizeof b);
    assert_string_equal(b, "999 B/s");
    struct mf_err err;
    enum progress_mode m = PROGRESS_TTY;
    assert_int_equal(progress_parse_mode("json", &m, &err), 0);
    assert_int_equal(m, PROGRESS_JSON);
    assert_int_equal(progress_parse_mode("loud", &m, &err), MF_EUSAGE);
    assert_int_equal(m, PROGRESS_JSON);
}

static void test_plain_lines_are_throttled(void **state)
{
    struct capture c;
    open_capture(&c, PROGRESS_PLAIN);
    int id = progress_begin(c.p, "fetch", "https://h/m.gguf");
    assert_int_equal(id, 1);
    progress_update(c.p, id, 0, 4 * MIB);
    fake_now = SEC; /* within 2 s of the begin line: nothing */
    progress_update(c.p, id, 1 * MIB, 4 * MIB);
    fake_now = 3 * SEC;
    progress_update(c.p, id, 3 * MIB, 4 * MIB);
    fake_now = 4 * SEC; /* within 2 s of the last line: nothing */
    progress_update(c.p, id, 4 * MIB, 4 * MIB);
    progress_note(c.p, id, "retrying in 500 ms: HTTP 503");
    progress_end(c.p, id, "done");
    progress_update(c.p, id, 5 * MIB, 4 * MIB); /* after the end: ignored */
    close_capture(&c);
    assert_string_equal(c.text, "#1 fetch https://h/m.gguf\n"
                                "#1 fetch https://h/m.gguf 3.0 MiB / 4.0 MiB 1.0 MB/s\n"
                                "#1 retrying in 500 ms: HTTP 503\n"
                                "#1 fetch https://h/m.gguf done 4.0 MiB in 4s\n");
    free(c.text);
}

static void test_json_events(void **state)
{
    struct capture c;
    open_capture(&c, PROGRESS_JSON);
    int a = progress_begin(c.p, "fetch", "u1");
    int b = progress_begin(c.p, "copy", "p\"2");
    progress_update(c.p, a, 10, 100);
    fake_now = 2 * SEC;
    progress_update(c.p, a, 60, 100);
    progress_fail(c.p, b, "HTTP 404");
    progress_end(c.p, a, "CACHED");
    close_capture(&c);
    const char *want[] = {
        "{\"id\": 1, \"event\": \"begin\", \"verb\": \"fetch\", \"name\": \"u1\"}",
        "{\"id\": 2, \"event\": \"begin\", \"verb\": \"copy\", \"name\": \"p\\\"2\"}",
        "{\"id\": 1, \"event\": \"progress\", \"done\": 60, \"bytes\": 60, \"total\": 100, "
        "\"rate\": 25}",
        "{\"id\": 2, \"event\": \"error\", \"message\": \"HTTP 404\"}",
        "{\"id\": 1, \"event\": \"end\", \"status\": \"CACHED\", \"done\": 60, \"ms\": 2000}",
    };
    char *line = c.text;
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        char *nl = strchr(line, '\n');
        assert_non_null(nl);
        *nl = '\0';
        json_t *got = json_loads(line, 0, NULL), *exp = json_loads(want[i], 0, NULL);
        assert_non_null(got);
        assert_true(json_equal(got, exp));
        json_decref(got);
        json_decref(exp);
        line = nl + 1;
    }
    assert_string_equal(line, "");
    free(c.text);
}

/* A terminal of 72 columns or more gets a bar when the total is known. */
static void test_tty_bar(void **state)
{
    struct capture c;
    open_capture(&c, PROGRESS_TTY);
    progress_set_width(c.p, 100);
    int id = progress_begin(c.p, "layer", "models/model.gguf");
    fake_now = SEC;
    progress_update(c.p, id, 0, 100 * MIB);
    fake_now = 2 * SEC;
    progress_update(c.p, id, 25 * MIB, 100 * MIB);
    int u = progress_begin(c.p, "fetch", "https://h/x"); /* no total: no bar */
    fake_now = 3 * SEC;
    progress_update(c.p, u, 5 * MIB, 0);
    progress_end(c.p, id, "done");
    progress_end(c.p, u, "done");
    close_capture(&c);
    assert_non_null(strstr(c.text, "#1 layer models/model.gguf [=====>              ] 25 MiB / "
                                   "100 MiB 26 MB/s ETA 3s\n"));
    assert_non_null(strstr(c.text, "#2 fetch https://h/x 5.0 MiB\n"));
    free(c.text);
    (void)state;
}

static void test_tty_redraws_in_place(void **state)
{
    struct capture c;
    open_capture(&c, PROGRESS_TTY);
    progress_set_width(c.p, 50);
    int id = progress_begin(c.p, "fetch",
                            "https://huggingface.co/acme/a-very-long-repository-name/m.gguf");
    fake_now = SEC;
    progress_update(c.p, id, 0, 100 * MIB);
    fake_now = 2 * SEC;
    progress_update(c.p, id, 50 * MIB, 100 * MIB);
    progress_end(c.p, id, "done");
    close_capture(&c);
    /* each redraw: cursor up one line, clear it, the line with the URL cut
     * in the middle so the amounts fit */
    assert_non_null(strstr(
        c.text, "\x1b[1F\x1b[2K#1 fetch https://hugg\xe2\x80\xa6y-name/m.gguf 0 B / 100 MiB\n"));
    assert_non_null(strstr(
        c.text, "\x1b[1F\x1b[2K#1 fetch htt\xe2\x80\xa6gguf 50 MiB / 100 MiB 52 MB/s ETA 1s\n"));
    /* no line is wider than the terminal (the ellipsis counts as one column) */
    for (char *l = c.text;;) {
        char *nl = strchr(l, '\n');
        if (!nl)
            break;
        char *start = strstr(l, "#1");
        if (start && start < nl) {
            size_t cols = 0;
            for (char *q = start; q < nl; q++)
                cols += ((unsigned char)*q & 0xc0) != 0x80;
            assert_true(cols < 50);
        }
        l = nl + 1;
    }
    assert_non_null(strstr(c.text, "done 50 MiB in 2s\n"));
    free(c.text);
}

static void test_null_progress_is_a_no_op(void **state)
{
    assert_int_equal(progress_begin(NULL, "fetch", "x"), 0);
    progress_update(NULL, 0, 1, 2);
    progress_note(NULL, 0, "x");
    progress_end(NULL, 0, "done");
    progress_fail(NULL, 0, "x");
    progress_close(NULL);
    assert_int_equal(progress_get_mode(NULL), PROGRESS_QUIET);
}

/* Steps on a tty: a header redrawn in place above every step's line, bytes
 * from a scope (a download inside the step) on the step's line, redraws at
 * most every 100 ms, lines cut to a narrow terminal, and the final state
 * (FINISHED, DONE/CACHED) left on screen by close. */
static void test_tty_steps_block(void **state)
{
    struct capture c;
    open_capture(&c, PROGRESS_TTY);
    progress_set_width(c.p, 40);
    progress_set_steps(c.p, 3);
    int a = progress_step_begin(c.p, 1, "source", "https://h/a-rather-long-path/x.gguf");
    int b = progress_step_begin(c.p, 3, "config", "etc/mfc/model.yaml");
    struct progress *sc = progress_scope(c.p, 1);
    assert_non_null(sc);
    assert_null(progress_scope(c.p, 2)); /* not begun */
    assert_int_equal(progress_begin(sc, "fetch", "ignored"), a);
    fake_now = SEC;
    progress_update(sc, 7, 0, 100 * MIB); /* the id is the scope's step */
    fake_now = SEC + SEC / 20;            /* 50 ms later: throttled */
    progress_update(sc, 7, 10 * MIB, 100 * MIB);
    fake_now = 2 * SEC;
    progress_update(sc, 7, 50 * MIB, 100 * MIB);
    progress_end(sc, a, "done"); /* a scope's end is the step's business */
    progress_close(sc);
    progress_end(c.p, b, "CACHED");
    fake_now = 3 * SEC;
    progress_end(c.p, a, "DONE");
    close_capture(&c);
    assert_non_null(strstr(c.text, "\x1b[2K[+] Building 1.0s (0/3)\n"));
    assert_non_null(strstr(c.text, "\x1b[3F\x1b[2K[+] Building 2.0s (0/3)\n"));
    assert_null(strstr(c.text, "10 MiB")); /* the throttled update was not drawn */
    assert_non_null(strstr(c.text, " => [1/3] source  50 MiB / 100 MiB 52 M\n")); /* cut */
    assert_non_null(strstr(c.text, "[+] Building 3.0s (2/3) FINISHED\n"));
    assert_non_null(strstr(c.text, " => [3/3] config etc/mfc\xe2\x80\xa6" "el.yaml CACHED\n"));
    assert_null(strstr(c.text, "#1")); /* no separate job for the download */
    /* the last block stays: it ends the output, followed by clear-below only */
    const char *last = strstr(c.text, "FINISHED\n");
    assert_non_null(strstr(last, "DONE 3.0s\n"));
    for (char *l = c.text;;) { /* no line wider than the terminal */
        char *nl = strchr(l, '\n');
        if (!nl)
            break;
        char *start = strstr(l, "\x1b[2K");
        if (start && start < nl) {
            size_t cols = 0;
            for (char *q = start + 4; q < nl; q++)
                cols += ((unsigned char)*q & 0xc0) != 0x80;
            assert_true(cols < 40);
        }
        l = nl + 1;
    }
    free(c.text);
}

/* Steps in plain and json: "#N" is the plan's number, not the begin order,
 * and json events carry step, name, state, bytes, total and elapsed. */
static void test_steps_plain_and_json(void **state)
{
    struct capture c;
    open_capture(&c, PROGRESS_PLAIN);
    progress_set_steps(c.p, 9);
    int id = progress_step_begin(c.p, 4, "config", "etc/mfc/model.yaml");
    fake_now = SEC + SEC / 4;
    progress_end(c.p, id, "DONE");
    id = progress_step_begin(c.p, 2, "check", "FROM ./x.gguf");
    progress_fail(c.p, id, "bad");
    close_capture(&c);
    assert_string_equal(c.text, "#4 config etc/mfc/model.yaml\n"
                                "#4 config etc/mfc/model.yaml DONE in 1.2s\n"
                                "#2 check FROM ./x.gguf\n"
                                "#2 check FROM ./x.gguf ERROR: bad\n");
    free(c.text);

    open_capture(&c, PROGRESS_JSON);
    progress_set_steps(c.p, 9);
    id = progress_step_begin(c.p, 5, "source", "u");
    progress_update(c.p, id, 3, 10);
    fake_now = 2 * SEC;
    progress_end(c.p, id, "DONE");
    close_capture(&c);
    char *last = strrchr(c.text, '{');
    json_t *v = json_loads(last, 0, NULL);
    assert_non_null(v);
    json_t *want = json_pack("{s:i, s:s, s:s, s:I, s:I, s:I, s:i, s:s}", "step", 5, "name", "u",
                             "state", "DONE", "bytes", (json_int_t)3, "total", (json_int_t)10,
                             "elapsed_ms", (json_int_t)2000, "steps", 9, "event", "end");
    const char *k;
    json_t *x;
    json_object_foreach(want, k, x) assert_true(json_equal(json_object_get(v, k), x));
    json_decref(want);
    json_decref(v);
    free(c.text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_formatting),
        cmocka_unit_test(test_plain_lines_are_throttled),
        cmocka_unit_test(test_json_events),
        cmocka_unit_test(test_tty_redraws_in_place),
        cmocka_unit_test(test_tty_bar),
        cmocka_unit_test(test_null_progress_is_a_no_op),
        cmocka_unit_test(test_tty_steps_block),
        cmocka_unit_test(test_steps_plain_and_json),
    };
    return cmocka_run_group_tests_name("progress", tests, NULL, NULL);
}
