/*
 * test_safetensors.c: unit tests for common/safetensors (the reader).
 *
 * Files are built in memory from a JSON header string and a data blob (the
 * same bytes a Python writer produces: u64le length, JSON, data). Good files
 * are read back (names in header order, shapes, offsets, metadata, F32/F16/
 * BF16/F64 conversion with known values); every validation rule has a bad
 * file with one defect whose error class and message are checked.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/err.h"
#include "common/file.h"
#include "common/safetensors.h"

/* A file of: u64le strlen(header), header, then ndata bytes of data. */
static uint8_t *make(const char *header, const void *data, size_t ndata, size_t *size)
{
    size_t n = strlen(header);
    *size = 8 + n + ndata;
    uint8_t *p = malloc(*size ? *size : 1);
    assert_non_null(p);
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)((uint64_t)n >> (8 * i));
    memcpy(p + 8, header, n);
    if (ndata)
        memcpy(p + 8 + n, data, ndata);
    return p;
}

/* Opens header+data from memory; returns the code, fills err; *out on 0. */
static int open_hdr(const char *header, size_t ndata, struct st_file **out, uint8_t **buf,
                    struct mf_err *err)
{
    static uint8_t zeros[4096];
    size_t size;
    assert_true(ndata <= sizeof zeros);
    *buf = make(header, zeros, ndata, &size);
    return st_open_mem(*buf, size, "t.safetensors", out, err);
}

/* Expects header+data to fail with code and a message containing want. */
static void expect_bad(const char *header, size_t ndata, int code, const char *want)
{
    struct st_file *f = NULL;
    uint8_t *buf;
    struct mf_err err;
    mf_err_clear(&err);
    int rc = open_hdr(header, ndata, &f, &buf, &err);
    if (rc != code || !strstr(err.msg, want))
        fail_msg("header %s: rc %d (want %d), message \"%s\" (want \"%s\")", header, rc, code,
                 err.msg, want);
    assert_null(f);
    free(buf);
}

static void test_good(void **state)
{
    (void)state;
    /* a: F32 [2,3] = 0..5; b: F16 [2] = 1.0, -2.0; c: BF16 [1] = 3.0;
     * d: F64 [1] = 0.25; e: I32 [0] (empty) */
    uint8_t data[24 + 4 + 2 + 8];
    float af[6] = {0, 1, 2, 3, 4, 5};
    memcpy(data, af, 24); /* little-endian host assumed by the test only */
    const uint8_t f16[4] = {0x00, 0x3c, 0x00, 0xc0};
    memcpy(data + 24, f16, 4);
    const uint8_t bf16[2] = {0x40, 0x40};
    memcpy(data + 28, bf16, 2);
    double d = 0.25;
    memcpy(data + 30, &d, 8);
    const char *hdr =
        "{\"__metadata__\":{\"format\":\"pt\"},"
        "\"b\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[24,28]},"
        "\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
        "\"c\":{\"dtype\":\"BF16\",\"shape\":[1],\"data_offsets\":[28,30]},"
        "\"d\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[30,38]},"
        "\"e\":{\"dtype\":\"I32\",\"shape\":[0],\"data_offsets\":[38,38]}}";
    size_t size;
    uint8_t *buf = make(hdr, data, sizeof data, &size);
    struct st_file *f;
    struct mf_err err;
    assert_int_equal(st_open_mem(buf, size, "g.safetensors", &f, &err), 0);
    assert_string_equal(st_name(f), "g.safetensors");
    assert_int_equal(st_count(f), 5);
    assert_string_equal(st_at(f, 0)->name, "b");
    assert_string_equal(st_at(f, 1)->name, "a");
    assert_null(st_at(f, 5));
    const struct st_tensor *a = st_find(f, "a");
    assert_non_null(a);
    assert_int_equal(a->dtype, ST_F32);
    assert_int_equal(a->n_dims, 2);
    assert_int_equal(a->shape[0], 2);
    assert_int_equal(a->shape[1], 3);
    assert_int_equal(a->n_elements, 6);
    assert_int_equal(a->offset, 8 + strlen(hdr));
    assert_int_equal(a->size, 24);
    assert_ptr_equal(st_data(f, a), buf + 8 + strlen(hdr));
    assert_null(st_find(f, "zz"));
    assert_string_equal(st_metadata(f, "format"), "pt");
    assert_null(st_metadata(f, "nope"));

    float out[6];
    assert_int_equal(st_read_f32(f, a, 1, 5, out, &err), 0);
    for (int i = 0; i < 5; i++)
        assert_true(out[i] == (float)(i + 1));
    assert_int_equal(st_read_f32(f, a, 4, 3, out, &err), MF_ERANGE);
    assert_non_null(strstr(err.msg, "tensor a"));
    assert_int_equal(st_read_f32(f, st_find(f, "b"), 0, 2, out, &err), 0);
    assert_true(out[0] == 1.0f && out[1] == -2.0f);
    assert_int_equal(st_read_f32(f, st_find(f, "c"), 0, 1, out, &err), 0);
    assert_true(out[0] == 3.0f);
    assert_int_equal(st_read_f32(f, st_find(f, "d"), 0, 1, out, &err), 0);
    assert_true(out[0] == 0.25f);
    assert_int_equal(st_read_f32(f, st_find(f, "e"), 0, 0, out, &err), MF_EUNSUPPORTED);
    assert_non_null(strstr(err.msg, "I32"));
    st_close(f);
    free(buf);
}

static void test_dtypes(void **state)
{
    (void)state;
    assert_string_equal(st_dtype_name(ST_BF16), "BF16");
    assert_string_equal(st_dtype_name(ST_F8_E4M3), "F8_E4M3");
    assert_int_equal(st_dtype_size(ST_F64), 8);
    assert_int_equal(st_dtype_size(ST_BOOL), 1);
    assert_int_equal(st_dtype_size(ST_I16), 2);
    /* every name is accepted back with its size checked */
    for (int t = 0; t < ST_N_DTYPES; t++) {
        char hdr[200];
        snprintf(hdr, sizeof hdr, "{\"x\":{\"dtype\":\"%s\",\"shape\":[3],\"data_offsets\":[0,%zu]}}",
                 st_dtype_name((enum st_dtype)t), 3 * st_dtype_size((enum st_dtype)t));
        struct st_file *f;
        uint8_t *buf;
        struct mf_err err;
        assert_int_equal(open_hdr(hdr, 3 * st_dtype_size((enum st_dtype)t), &f, &buf, &err), 0);
        assert_int_equal(st_at(f, 0)->dtype, t);
        st_close(f);
        free(buf);
    }
}

static void test_scalar_and_empty(void **state)
{
    (void)state;
    struct st_file *f;
    uint8_t *buf;
    struct mf_err err;
    assert_int_equal(open_hdr("{\"s\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]}}",
                              4, &f, &buf, &err),
                     0);
    assert_int_equal(st_at(f, 0)->n_dims, 0);
    assert_int_equal(st_at(f, 0)->n_elements, 1);
    st_close(f);
    free(buf);
    assert_int_equal(open_hdr("{}", 0, &f, &buf, &err), 0);
    assert_int_equal(st_count(f), 0);
    st_close(f);
    free(buf);
}

static void test_bad_header_length(void **state)
{
    (void)state;
    struct st_file *f;
    struct mf_err err;
    uint8_t tiny[5] = {0};
    assert_int_equal(st_open_mem(tiny, sizeof tiny, "t", &f, &err), MF_EFORMAT);
    assert_non_null(strstr(err.msg, "too short"));
    /* length says 100, file has 10 header bytes */
    uint8_t p[18] = {100, 0, 0, 0, 0, 0, 0, 0, '{', '}'};
    assert_int_equal(st_open_mem(p, sizeof p, "t", &f, &err), MF_EFORMAT);
    assert_non_null(strstr(err.msg, "header length 100"));
    /* huge length (overflow if added naively) */
    uint8_t q[16] = {0xf8, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
    assert_int_equal(st_open_mem(q, sizeof q, "t", &f, &err), MF_EFORMAT);
    assert_non_null(strstr(err.msg, "header length"));
    /* a text file: its first 8 bytes are not quoted, not even as a number */
    const char *key = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n";
    assert_int_equal(st_open_mem((const uint8_t *)key, strlen(key), "id", &f, &err), MF_EFORMAT);
    assert_non_null(strstr(err.msg, "not a safetensors file"));
    char n[32];
    uint64_t v = 0;
    memcpy(&v, key, 8); /* as rd_u64le reads it on a little-endian host */
    snprintf(n, sizeof n, "%llu", (unsigned long long)v);
    assert_null(strstr(err.msg, n));
    assert_null(strstr(err.msg, "BEGIN"));
}

static void test_bad_json(void **state)
{
    (void)state;
    expect_bad("{\"a\":", 0, MF_EFORMAT, "invalid JSON");
    expect_bad("[1,2]", 0, MF_EFORMAT, "must be a JSON object");
    expect_bad("{\"a\":1}", 0, MF_EFORMAT, "tensor a: entry must be an object");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
               "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
               8, MF_EFORMAT, "invalid JSON");
    expect_bad("{\"__metadata__\":[1]}", 0, MF_EFORMAT, "__metadata__");
    expect_bad("{\"__metadata__\":{\"k\":1}}", 0, MF_EFORMAT, "__metadata__ \"k\" must be a string");
}

static void test_bad_tensor(void **state)
{
    (void)state;
    expect_bad("{\"w\":{\"dtype\":\"F17\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
               MF_EUNSUPPORTED, "tensor w: unknown dtype \"F17\"");
    expect_bad("{\"w\":{\"dtype\":3,\"shape\":[1],\"data_offsets\":[0,4]}}", 4, MF_EFORMAT,
               "tensor w: \"dtype\" must be a string");
    expect_bad("{\"w\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4, MF_EFORMAT,
               "tensor w has no \"shape\"");
    expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4, MF_EFORMAT,
               "shape[0] must be a non-negative integer");
    expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}",
               4, MF_EFORMAT, "9 dimensions");
    expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],"
               "\"data_offsets\":[0,4]}}",
               4, MF_EFORMAT, "overflows");
    expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[1152921504606846976],"
               "\"data_offsets\":[0,4]}}",
               4, MF_EFORMAT, "need");
    expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", 8, MF_EFORMAT,
               "tensor w: 2 elements of F32 need 8 bytes but data_offsets [0, 4] give 4");
    expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 4, MF_EFORMAT,
               "tensor w: data_offsets [4, 8] outside the 4 data bytes");
    expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,4]}}", 8, MF_EFORMAT,
               "outside");
    expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", 4, MF_EFORMAT,
               "\"data_offsets\" must be [begin, end]");
    expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,\"4\"]}}", 4,
               MF_EFORMAT, "\"data_offsets\" must be [begin, end]");
}

static void test_overlap(void **state)
{
    (void)state;
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
               "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
               12, MF_EFORMAT, "tensors a and b overlap");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
               "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
               4, MF_EFORMAT, "overlap");
    /* touching ranges and empty tensors inside another are fine */
    struct st_file *f;
    uint8_t *buf;
    struct mf_err err;
    assert_int_equal(open_hdr("{\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]},"
                              "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                              "\"e\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[2,2]}}",
                              8, &f, &buf, &err),
                     0);
    st_close(f);
    free(buf);
}

static void test_nul_in_header(void **state)
{
    (void)state;
    uint8_t p[8 + 4] = {4, 0, 0, 0, 0, 0, 0, 0, '{', 0, '}', ' '};
    struct st_file *f;
    struct mf_err err;
    assert_int_equal(st_open_mem(p, sizeof p, "t", &f, &err), MF_EFORMAT);
    assert_non_null(strstr(err.msg, "NUL"));
}

static void test_file(void **state)
{
    (void)state;
    char dir[] = "/tmp/test_st.XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[256];
    snprintf(path, sizeof path, "%s/x.safetensors", dir);
    float v[2] = {1.5f, -0.5f};
    size_t size;
    uint8_t *buf = make("{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", v, 8,
                        &size);
    struct mf_err err;
    assert_int_equal(mf_file_write_atomic(path, buf, size, &err), 0);
    struct st_file *f;
    assert_int_equal(st_open(path, &f, &err), 0);
    assert_string_equal(st_name(f), path);
    float out[2];
    assert_int_equal(st_read_f32(f, st_find(f, "x"), 0, 2, out, &err), 0);
    assert_true(out[0] == 1.5f && out[1] == -0.5f);
    st_close(f);
    st_close(NULL);
    /* truncated on disk */
    assert_int_equal(mf_file_write_atomic(path, buf, size - 1, &err), 0);
    assert_int_equal(st_open(path, &f, &err), MF_EFORMAT);
    assert_non_null(strstr(err.msg, path));
    assert_non_null(strstr(err.msg, "tensor x"));
    unlink(path);
    assert_int_equal(st_open(path, &f, &err), MF_ENOTFOUND);
    assert_int_equal(st_open(dir, &f, &err), MF_EINVAL);
    rmdir(dir);
    free(buf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_good),          cmocka_unit_test(test_dtypes),
        cmocka_unit_test(test_scalar_and_empty), cmocka_unit_test(test_bad_header_length),
        cmocka_unit_test(test_bad_json),      cmocka_unit_test(test_bad_tensor),
        cmocka_unit_test(test_overlap),       cmocka_unit_test(test_nul_in_header),
        cmocka_unit_test(test_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
