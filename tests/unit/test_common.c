/*
 * test_common.c: unit tests for common/ basics: errors, buffers, numbers,
 * UTF-8/UTF-16, SHA-256, atomic files and JSON.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <dirent.h>

#include "common/buf.h"
#include "common/err.h"
#include "common/file.h"
#include "common/json.h"
#include "common/num.h"
#include "common/sha256.h"
#include "common/utf8.h"

static void test_err_set_and_prefix(void **state)
{
    struct mf_err err;
    mf_err_clear(&err);
    assert_int_equal(mf_err_set(&err, MF_EFORMAT, "tensor %s is bad", "blk.0"), MF_EFORMAT);
    assert_string_equal(err.msg, "tensor blk.0 is bad");
    mf_err_prefix(&err, "Modelfile:%d", 3);
    assert_string_equal(err.msg, "Modelfile:3: tensor blk.0 is bad");
    assert_int_equal(mf_err_exit_status(MF_EUSAGE), 2);
    assert_int_equal(mf_err_exit_status(MF_EFORMAT), 1);
    assert_int_equal(mf_err_exit_status(0), 0);
}

static void test_err_truncates_long_messages(void **state)
{
    struct mf_err err;
    char big[2000];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    mf_err_set(&err, MF_EINVAL, "%s", big);
    assert_int_equal(strlen(err.msg), MF_ERR_MSG_MAX - 1);
    assert_string_equal(err.msg + MF_ERR_MSG_MAX - 4, "...");
}

static void test_buf_limit_leaves_buffer_unchanged(void **state)
{
    struct mf_buf b;
    struct mf_err err;
    mf_buf_init(&b, 8);
    assert_int_equal(mf_buf_puts(&b, "abcdef", &err), 0);
    assert_int_equal(mf_buf_puts(&b, "xyz", &err), MF_ENOMEM);
    assert_string_equal(b.data, "abcdef");
    assert_int_equal(mf_buf_printf(&b, &err, "%d", 42), 0);
    assert_string_equal(b.data, "abcdef42");
    char *s = mf_buf_take(&b);
    assert_string_equal(s, "abcdef42");
    assert_null(b.data);
    free(s);
}

static void test_buf_unlimited_grows(void **state)
{
    struct mf_buf b;
    struct mf_err err;
    mf_buf_init(&b, SIZE_MAX);
    for (int i = 0; i < 100; i++)
        assert_int_equal(mf_buf_puts(&b, "0123456789", &err), 0);
    assert_int_equal(b.len, 1000);
    assert_true(b.cap > b.len);
    mf_buf_free(&b);
}

static void test_num_strict(void **state)
{
    int64_t i = 7;
    double d = 0;
    int b = -1;
    assert_int_equal(mf_num_parse_i64("-12", &i), 0);
    assert_int_equal(i, -12);
    assert_int_equal(mf_num_parse_i64("12x", &i), MF_EINVAL);
    assert_int_equal(mf_num_parse_i64("", &i), MF_EINVAL);
    assert_int_equal(mf_num_parse_i64(" 1", &i), MF_EINVAL);
    assert_int_equal(mf_num_parse_i64("99999999999999999999", &i), MF_ERANGE);
    assert_int_equal(i, -12);
    assert_int_equal(mf_num_parse_f64("0.5", &d), 0);
    assert_true(d == 0.5);
    assert_int_equal(mf_num_parse_f64("nan", &d), MF_EINVAL);
    assert_int_equal(mf_num_parse_bool("True", &b), 0);
    assert_int_equal(b, 1);
    assert_int_equal(mf_num_parse_bool("yes", &b), MF_EINVAL);
}

static void test_utf8_decode_rejects_bad_forms(void **state)
{
    uint32_t cp;
    assert_int_equal(mf_utf8_decode("\xC3\xA9", 2, &cp), 2);
    assert_int_equal(cp, 0xE9);
    assert_int_equal(mf_utf8_decode("\xC0\xAF", 2, &cp), 0);          /* overlong '/' */
    assert_int_equal(mf_utf8_decode("\xED\xA0\x80", 3, &cp), 0);      /* surrogate */
    assert_int_equal(mf_utf8_decode("\xF0\x9F\x98", 3, &cp), 0);      /* truncated */
    assert_int_equal(mf_utf8_decode("\xF0\x9F\x98\x80", 4, &cp), 4);
    assert_int_equal(cp, 0x1F600);
    size_t bad = 0;
    assert_false(mf_utf8_valid("ab\xFF", 3, &bad));
    assert_int_equal(bad, 2);
}

static void test_utf8_from_text_boms(void **state)
{
    struct mf_err err;
    char *out = NULL;
    size_t n = 0;
    /* UTF-16 LE "Hé😀" with BOM */
    const char le[] = "\xFF\xFE" "H\0" "\xE9\0" "\x3D\xD8\x00\xDE";
    assert_int_equal(mf_utf8_from_text(le, sizeof le - 1, "t", &out, &n, &err), 0);
    assert_string_equal(out, "H\xC3\xA9\xF0\x9F\x98\x80");
    free(out);
    const char be[] = "\xFE\xFF" "\0H" "\0i";
    assert_int_equal(mf_utf8_from_text(be, sizeof be - 1, "t", &out, &n, &err), 0);
    assert_string_equal(out, "Hi");
    free(out);
    const char bom8[] = "\xEF\xBB\xBF" "FROM x";
    assert_int_equal(mf_utf8_from_text(bom8, sizeof bom8 - 1, "t", &out, &n, &err), 0);
    assert_string_equal(out, "FROM x");
    assert_int_equal(n, 6);
    free(out);
    const char lone[] = "\xFF\xFE" "\x3D\xD8" "a\0";
    out = NULL;
    assert_int_equal(mf_utf8_from_text(lone, sizeof lone - 1, "t", &out, &n, &err), MF_EFORMAT);
    assert_null(out);
    assert_non_null(strstr(err.msg, "surrogate"));
}

static void test_sha256_known_answers(void **state)
{
    struct mf_err err;
    uint8_t d[32];
    char hex[65];
    assert_int_equal(mf_sha256_mem("abc", 3, d, &err), 0);
    mf_sha256_hex(d, hex);
    assert_string_equal(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    assert_int_equal(mf_sha256_mem("", 0, d, &err), 0);
    mf_sha256_hex(d, hex);
    assert_string_equal(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    uint8_t back[32];
    assert_int_equal(mf_sha256_parse_hex(hex, back), 0);
    assert_memory_equal(back, d, 32);
    assert_int_equal(mf_sha256_parse_hex("zz", back), MF_EINVAL);
}

/* Counts directory entries other than . and .. */
static int count_entries(const char *dir)
{
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    if (d)
        closedir(d);
    return n;
}

static void test_file_atomic_write_and_abort(void **state)
{
    struct mf_err err;
    char dir[] = "/tmp/mfc-test-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[256];
    snprintf(path, sizeof path, "%s/a.txt", dir);
    assert_int_equal(mf_file_write_atomic(path, "one", 3, &err), 0);
    struct mf_file_tmp t;
    assert_int_equal(mf_file_tmp_open(&t, path, &err), 0);
    assert_int_equal(mf_file_tmp_write(&t, "half", 4, &err), 0);
    mf_file_tmp_abort(&t); /* a failed write: the old content stays, no temporary remains */
    char *data;
    size_t len;
    assert_int_equal(mf_file_read(path, 1 << 20, &data, &len, &err), 0);
    assert_string_equal(data, "one");
    free(data);
    assert_int_equal(count_entries(dir), 1);
    assert_int_equal(mf_file_read(path, 2, &data, &len, &err), MF_ENOMEM);
    snprintf(path, sizeof path, "%s/x/y/z", dir);
    assert_int_equal(mf_file_mkdirs(path, &err), 0);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    /* a FIFO (or /dev/null) at the target is refused, not renamed over */
    snprintf(path, sizeof path, "%s/fifo", dir);
    assert_int_equal(mkfifo(path, 0600), 0);
    assert_int_equal(mf_file_write_atomic(path, "one", 3, &err), MF_EEXIST);
    assert_non_null(strstr(err.msg, "not a regular file"));
    assert_int_equal(stat(path, &st), 0);
    assert_true(S_ISFIFO(st.st_mode));
    assert_int_equal(mf_file_read("/nonexistent/mfc", 10, &data, &len, &err), MF_ENOTFOUND);
    assert_non_null(strstr(err.msg, "/nonexistent/mfc"));
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

/* transformers' model_max_length (int(1e30)) reads as a real; every other
 * integer stays an integer, and strings that look like numbers are kept. */
static void test_json_big_integers(void **state)
{
    struct mf_err err;
    const char *t = "{\"model_max_length\": 1000000000000000019884624838656, \"id\": 128000,"
                    " \"neg\": -99999999999999999999, \"s\": \"12345678901234567890123\","
                    " \"e\": \"\\\"1\", \"max\": 9223372036854775807}";
    json_t *v = mf_json_parse(t, strlen(t), "tokenizer_config.json", &err);
    assert_non_null(v);
    assert_true(json_is_real(json_object_get(v, "model_max_length")));
    assert_true(json_real_value(json_object_get(v, "model_max_length")) > 9.9e29);
    assert_true(json_is_integer(json_object_get(v, "id")));
    assert_int_equal(json_integer_value(json_object_get(v, "id")), 128000);
    assert_true(json_real_value(json_object_get(v, "neg")) < -9e19);
    assert_string_equal(json_string_value(json_object_get(v, "s")), "12345678901234567890123");
    assert_string_equal(json_string_value(json_object_get(v, "e")), "\"1");
    assert_int_equal(json_integer_value(json_object_get(v, "max")), INT64_MAX);
    json_decref(v);
    /* a syntax error still names its position in the original text */
    const char *bad = "{\"a\": 100000000000000000000000,\n]";
    assert_null(mf_json_parse(bad, strlen(bad), "x.json", &err));
    assert_non_null(strstr(err.msg, "x.json:1:"));
}

static void test_json_errors_name_position(void **state)
{
    struct mf_err err;
    json_t *v = mf_json_parse("{\"a\": 1,\n \"a\": 2}", 17, "req.json", &err);
    assert_null(v);
    assert_non_null(strstr(err.msg, "req.json:2:"));
    /* the input is never quoted: a file that is not JSON may be a secret */
    static const char *not_json[] = {"root:$y$j9T$Zq0s4:19000", "{\"k\": tok_3f9a}",
                                     "{\"k\": \"a\\q\"}", "{\"k\": \"\xe9\xff\"}",
                                     "{\"k\": \"\\ud800x\"}", "[\"\x01\"]"};
    for (size_t i = 0; i < sizeof not_json / sizeof not_json[0]; i++) {
        assert_null(mf_json_parse(not_json[i], strlen(not_json[i]), "f.json", &err));
        assert_non_null(strstr(err.msg, "f.json:1:"));
        assert_null(strstr(err.msg, "root"));
        assert_null(strstr(err.msg, "tok_"));
        assert_null(strstr(err.msg, "0x"));
        assert_null(strstr(err.msg, "ud800"));
        assert_null(strstr(err.msg, "near"));
    }
    v = mf_json_parse("{\"n\": 3, \"s\": \"x\"}", 18, "ok", &err);
    assert_non_null(v);
    int64_t n = 0;
    const char *s = NULL;
    assert_int_equal(mf_json_get_int(v, "n", "ok", &n, &err), 0);
    assert_int_equal(n, 3);
    assert_int_equal(mf_json_get_int(v, "s", "ok", &n, &err), MF_EFORMAT);
    assert_int_equal(mf_json_get_str(v, "missing", "ok", &s, &err), MF_ENOTFOUND);
    struct mf_buf b;
    mf_buf_init(&b, 1024);
    assert_int_equal(mf_json_dump(v, JSON_SORT_KEYS | JSON_COMPACT, &b, &err), 0);
    assert_string_equal(b.data, "{\"n\":3,\"s\":\"x\"}");
    mf_buf_free(&b);
    json_decref(v);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_err_set_and_prefix),
        cmocka_unit_test(test_err_truncates_long_messages),
        cmocka_unit_test(test_buf_limit_leaves_buffer_unchanged),
        cmocka_unit_test(test_buf_unlimited_grows),
        cmocka_unit_test(test_num_strict),
        cmocka_unit_test(test_utf8_decode_rejects_bad_forms),
        cmocka_unit_test(test_utf8_from_text_boms),
        cmocka_unit_test(test_sha256_known_answers),
        cmocka_unit_test(test_file_atomic_write_and_abort),
        cmocka_unit_test(test_json_errors_name_position),
        cmocka_unit_test(test_json_big_integers),
    };
    return cmocka_run_group_tests_name("common", tests, NULL, NULL);
}
