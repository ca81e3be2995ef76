/*
 * test_gguf.c: unit tests for common/gguf (reader and writer).
 *
 * Bad files are built in memory with a tiny byte writer (struct bw), one
 * defect each, and every reader error path is checked for its error class
 * and for a message that names the key or tensor and the byte offset.
 * Good files come from the writer and are read back (every KV type, arrays,
 * nested arrays, alignments); the writer's atomicity is checked on disk.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <dirent.h>

#include "common/err.h"
#include "common/file.h"
#include "common/gguf.h"

/* ---------------------------------------------------------------------------
 * byte writer for crafted files
 * ------------------------------------------------------------------------- */

struct bw {
    uint8_t *p; /* owned */
    size_t n;   /* bytes used */
    size_t cap; /* bytes allocated */
};

static void bw_raw(struct bw *b, const void *d, size_t n)
{
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        assert_non_null(b->p);
    }
    if (n)
        memcpy(b->p + b->n, d, n);
    b->n += n;
}

static void bw_le(struct bw *b, uint64_t v, int n)
{
    uint8_t x[8];
    for (int i = 0; i < n; i++)
        x[i] = (uint8_t)(v >> (8 * i));
    bw_raw(b, x, (size_t)n);
}

static void bw_u32(struct bw *b, uint32_t v)
{
    bw_le(b, v, 4);
}
static void bw_u64(struct bw *b, uint64_t v)
{
    bw_le(b, v, 8);
}

static void bw_strn(struct bw *b, const char *s, size_t n)
{
    bw_u64(b, n);
    bw_raw(b, s, n);
}

static void bw_str(struct bw *b, const char *s)
{
    bw_strn(b, s, strlen(s));
}

static void bw_header(struct bw *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv)
{
    bw_raw(b, "GGUF", 4);
    bw_u32(b, version);
    bw_u64(b, n_tensors);
    bw_u64(b, n_kv);
}

/* A key and its value type; returns the KV's offset. */
static size_t bw_kv(struct bw *b, const char *key, uint32_t type)
{
    size_t at = b->n;
    bw_str(b, key);
    bw_u32(b, type);
    return at;
}

/* A tensor info; returns its offset. */
static size_t bw_tensor(struct bw *b, const char *name, uint32_t n_dims, const uint64_t *ne,
                        uint32_t type, uint64_t offset)
{
    size_t at = b->n;
    bw_str(b, name);
    bw_u32(b, n_dims);
    for (uint32_t d = 0; d < n_dims; d++)
        bw_u64(b, ne[d]);
    bw_u32(b, type);
    bw_u64(b, offset);
    return at;
}

static void bw_pad(struct bw *b, size_t a)
{
    while (b->n % a)
        bw_le(b, 0, 1);
}

static void bw_zeros(struct bw *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        bw_le(b, 0, 1);
}

/* Opens b from memory and expects failure with code and each substring
 * (NULL-terminated list) in the message. */
static void expect_bad(const struct bw *b, int code, ...)
{
    struct gguf_file *gf = (struct gguf_file *)1;
    struct mf_err err;
    mf_err_clear(&err);
    int rc = gguf_open_mem(b->p, b->n, "bad.gguf", &gf, &err);
    if (rc != code)
        print_error("rc %d, message: %s\n", rc, err.msg);
    assert_int_equal(rc, code);
    assert_null(gf);
    assert_int_equal(err.code, code);
    va_list ap;
    va_start(ap, code);
    for (const char *s = va_arg(ap, const char *); s; s = va_arg(ap, const char *)) {
        if (!strstr(err.msg, s))
            print_error("message '%s' lacks '%s'\n", err.msg, s);
        assert_non_null(strstr(err.msg, s));
    }
    va_end(ap);
}

static struct gguf_file *expect_good(const struct bw *b)
{
    struct gguf_file *gf = NULL;
    struct mf_err err;
    mf_err_clear(&err);
    int rc = gguf_open_mem(b->p, b->n, "good.gguf", &gf, &err);
    if (rc)
        print_error("%s\n", err.msg);
    assert_int_equal(rc, 0);
    assert_non_null(gf);
    return gf;
}

/* The base file: 1 tensor, 2 KVs, F32 "t0" {32, 2} at offset 0. */
struct base {
    struct bw b;  /* the bytes */
    size_t kv[2]; /* KV offsets */
    size_t t0;    /* tensor info offset */
};

static void build_base(struct base *x)
{
    static const uint64_t ne[2] = {32, 2};
    memset(x, 0, sizeof *x);
    bw_header(&x->b, 3, 1, 2);
    x->kv[0] = bw_kv(&x->b, "general.architecture", GGUF_TYPE_STRING);
    bw_str(&x->b, "llama");
    x->kv[1] = bw_kv(&x->b, "x.count", GGUF_TYPE_UINT32);
    bw_u32(&x->b, 7);
    x->t0 = bw_tensor(&x->b, "t0", 2, ne, GGML_TYPE_F32, 0);
    bw_pad(&x->b, 32);
    bw_zeros(&x->b, 256);
}

static char at_msg[64];
static const char *at(size_t off)
{
    snprintf(at_msg, sizeof at_msg, "byte %zu:", off);
    return at_msg;
}

/* ---------------------------------------------------------------------------
 * header errors
 * ------------------------------------------------------------------------- */

static void test_base_is_valid(void **state)
{
    struct base x;
    build_base(&x);
    struct gguf_file *gf = expect_good(&x.b);
    assert_int_equal(gguf_version(gf), 3);
    assert_int_equal(gguf_n_kv(gf), 2);
    assert_int_equal(gguf_n_tensors(gf), 1);
    assert_int_equal(gguf_alignment(gf), 32);
    assert_int_equal(gguf_data_offset(gf) % 32, 0);
    const struct gguf_tensor *t = gguf_find_tensor(gf, "t0");
    assert_non_null(t);
    assert_int_equal(t->n_elements, 64);
    assert_int_equal(t->n_bytes, 256);
    assert_ptr_equal(t->data, x.b.p + gguf_data_offset(gf));
    assert_int_equal(t->info_offset, x.t0);
    gguf_close(gf);
    free(x.b.p);
}

static void test_header_errors(void **state)
{
    struct bw b = {0};
    bw_raw(&b, "GGUF\3\0\0\0", 8);
    expect_bad(&b, MF_EFORMAT, "bad.gguf: byte 0:", "too short", NULL);
    b.n = 0;
    bw_header(&b, 3, 0, 0);
    memcpy(b.p, "GGML", 4);
    expect_bad(&b, MF_EFORMAT, "byte 0:", "not a GGUF file", NULL);
    /* a file that is not GGUF is never quoted: neither as bytes nor as text */
    b.n = 0;
    bw_raw(&b, "root:$y$j9T$Zq0s4:19000:0:99999:7:::\n", 38);
    struct gguf_file *gf = NULL;
    struct mf_err err;
    assert_int_equal(gguf_open_mem(b.p, b.n, "shadow", &gf, &err), MF_EFORMAT);
    assert_non_null(strstr(err.msg, "not a GGUF file"));
    assert_null(strstr(err.msg, "72 6f"));
    assert_null(strstr(err.msg, "root"));
    b.n = 0;
    bw_header(&b, 1, 0, 0);
    expect_bad(&b, MF_EUNSUPPORTED, "byte 4:", "version 1 is no longer supported", NULL);
    b.n = 0;
    bw_header(&b, 4, 0, 0);
    expect_bad(&b, MF_EUNSUPPORTED, "byte 4:", "version 4 is not supported", NULL);
    b.n = 0;
    bw_header(&b, 0x03000000u, 0, 0); /* a big-endian v3 file read little-endian */
    expect_bad(&b, MF_EUNSUPPORTED, "byte 4:", "big-endian", NULL);
    b.n = 0;
    bw_header(&b, 3, 0, (uint64_t)1 << 40);
    expect_bad(&b, MF_EFORMAT, "byte 8:", "cannot fit", NULL);
    b.n = 0;
    bw_header(&b, 3, UINT64_MAX, 0);
    expect_bad(&b, MF_EFORMAT, "byte 8:", "cannot fit", NULL);
    b.n = 0;
    bw_header(&b, 2, 0, 0); /* v2 is read like v3 */
    gguf_close(expect_good(&b));
    free(b.p);
}

/* ---------------------------------------------------------------------------
 * KV errors
 * ------------------------------------------------------------------------- */

/* A header declaring one KV, ready for that KV. */
static void one_kv(struct bw *b)
{
    b->n = 0;
    bw_header(b, 3, 0, 1);
}

static void test_key_errors(void **state)
{
    struct bw b = {0};
    one_kv(&b);
    bw_u64(&b, 1000); /* key length past the end */
    bw_zeros(&b, 8);
    expect_bad(&b, MF_EFORMAT, "byte 24:", "a key is 1000 bytes long but only", NULL);
    one_kv(&b);
    bw_kv(&b, "", GGUF_TYPE_UINT8);
    bw_le(&b, 1, 1);
    expect_bad(&b, MF_EFORMAT, "byte 24:", "empty key", NULL);
    one_kv(&b);
    bw_strn(&b, "a\0b", 3);
    bw_u32(&b, GGUF_TYPE_UINT8);
    bw_le(&b, 1, 1);
    expect_bad(&b, MF_EFORMAT, "byte 24:", "NUL byte", NULL);
    b.n = 0;
    bw_header(&b, 3, 0, 2);
    bw_kv(&b, "dup.key", GGUF_TYPE_UINT8);
    bw_le(&b, 1, 1);
    size_t second = bw_kv(&b, "dup.key", GGUF_TYPE_UINT8);
    bw_le(&b, 2, 1);
    expect_bad(&b, MF_EFORMAT, at(second), "key 'dup.key' appears twice (first at byte 24)", NULL);
    one_kv(&b);
    bw_kv(&b, "odd.type", 13);
    bw_zeros(&b, 8);
    expect_bad(&b, MF_EFORMAT, "byte 40:", "key 'odd.type' has unknown value type 13", NULL);
    free(b.p);
}

static void test_value_errors(void **state)
{
    struct bw b = {0};
    one_kv(&b);
    bw_kv(&b, "short.u64", GGUF_TYPE_UINT64);
    bw_zeros(&b, 3);
    expect_bad(&b, MF_EFORMAT, "key 'short.u64': the value needs 8 bytes but only 3 remain", NULL);
    one_kv(&b);
    size_t v = bw_kv(&b, "long.str", GGUF_TYPE_STRING) + 8 + 8 + 4;
    bw_u64(&b, 500);
    bw_raw(&b, "abc", 3);
    expect_bad(&b, MF_EFORMAT, at(v), "key 'long.str': the string value is 500 bytes long", NULL);
    one_kv(&b);
    v = bw_kv(&b, "arr.type", GGUF_TYPE_ARRAY) + 8 + 8 + 4;
    bw_u32(&b, 99);
    bw_u64(&b, 0);
    expect_bad(&b, MF_EFORMAT, at(v), "key 'arr.type': array element type 99", NULL);
    one_kv(&b);
    v = bw_kv(&b, "arr.count", GGUF_TYPE_ARRAY) + 8 + 9 + 4;
    bw_u32(&b, GGUF_TYPE_UINT32);
    bw_u64(&b, (uint64_t)1 << 62);
    bw_zeros(&b, 16);
    expect_bad(&b, MF_EFORMAT, at(v), "key 'arr.count': array of 4611686018427387904 u32",
               "cannot fit", NULL);
    one_kv(&b);
    bw_kv(&b, "arr.str", GGUF_TYPE_ARRAY);
    bw_u32(&b, GGUF_TYPE_STRING);
    bw_u64(&b, 2);
    bw_str(&b, "ok");
    bw_u64(&b, 99); /* the second string runs past the end */
    bw_zeros(&b, 8);
    expect_bad(&b, MF_EFORMAT, "key 'arr.str': the string value is 99 bytes long", NULL);
    free(b.p);
}

static void test_nested_arrays(void **state)
{
    struct bw b = {0};
    one_kv(&b);
    bw_kv(&b, "deep", GGUF_TYPE_ARRAY);
    for (int i = 0; i < GGUF_MAX_DEPTH + 1; i++) {
        bw_u32(&b, GGUF_TYPE_ARRAY);
        bw_u64(&b, 1);
    }
    bw_u32(&b, GGUF_TYPE_UINT8);
    bw_u64(&b, 0);
    expect_bad(&b, MF_EUNSUPPORTED, "key 'deep': arrays nest deeper than 8 levels", NULL);
    /* [[1, 2], [], [3]] as u16 arrays, and then a KV after it */
    b.n = 0;
    bw_header(&b, 3, 0, 2);
    bw_kv(&b, "nest", GGUF_TYPE_ARRAY);
    bw_u32(&b, GGUF_TYPE_ARRAY);
    bw_u64(&b, 3);
    const uint16_t vals[3][2] = {{1, 2}, {0, 0}, {3, 0}};
    const int lens[3] = {2, 0, 1};
    for (int i = 0; i < 3; i++) {
        bw_u32(&b, GGUF_TYPE_UINT16);
        bw_u64(&b, (uint64_t)lens[i]);
        for (int j = 0; j < lens[i]; j++)
            bw_le(&b, vals[i][j], 2);
    }
    bw_kv(&b, "after", GGUF_TYPE_BOOL);
    bw_le(&b, 1, 1);
    struct gguf_file *gf = expect_good(&b);
    const struct gguf_array *a = NULL;
    assert_int_equal(gguf_get_arr(gf, "nest", &a, NULL), 0);
    assert_int_equal(a->type, GGUF_TYPE_ARRAY);
    assert_int_equal(a->n, 3);
    for (int i = 0; i < 3; i++) {
        const struct gguf_array *s = gguf_arr_sub(a, (uint64_t)i);
        assert_int_equal(s->type, GGUF_TYPE_UINT16);
        assert_int_equal(s->n, (uint64_t)lens[i]);
        for (int j = 0; j < lens[i]; j++)
            assert_int_equal(gguf_arr_int(s, (uint64_t)j), vals[i][j]);
    }
    int flag = 0;
    assert_int_equal(gguf_get_bool(gf, "after", &flag, NULL), 0);
    assert_true(flag);
    gguf_close(gf);
    free(b.p);
}

static void test_alignment_key_errors(void **state)
{
    struct bw b = {0};
    one_kv(&b);
    bw_kv(&b, "general.alignment", GGUF_TYPE_UINT64);
    bw_u64(&b, 32);
    expect_bad(&b, MF_EFORMAT, "byte 24:", "key 'general.alignment' is u64; it must be u32", NULL);
    one_kv(&b);
    bw_kv(&b, "general.alignment", GGUF_TYPE_UINT32);
    bw_u32(&b, 48);
    expect_bad(&b, MF_EFORMAT, "byte 24:", "48, which is not a power of two", NULL);
    one_kv(&b);
    bw_kv(&b, "general.alignment", GGUF_TYPE_UINT32);
    bw_u32(&b, 0);
    expect_bad(&b, MF_EFORMAT, "not a power of two", NULL);
    free(b.p);
}

/* ---------------------------------------------------------------------------
 * tensor errors
 * ------------------------------------------------------------------------- */

/* A header with n tensors and no KVs. */
static void tensors_hdr(struct bw *b, uint64_t n)
{
    b->n = 0;
    bw_header(b, 3, n, 0);
}

static void test_tensor_name_errors(void **state)
{
    struct bw b = {0};
    const uint64_t ne[1] = {8};
    char longname[65];
    memset(longname, 'n', 64);
    longname[64] = '\0';
    tensors_hdr(&b, 1);
    bw_tensor(&b, longname, 1, ne, GGML_TYPE_F32, 0);
    bw_pad(&b, 32);
    bw_zeros(&b, 32);
    expect_bad(&b, MF_EFORMAT, "byte 24:", "a tensor name is 64 bytes long (limit 63)", NULL);
    tensors_hdr(&b, 2);
    bw_tensor(&b, "same", 1, ne, GGML_TYPE_F32, 0);
    size_t second = bw_tensor(&b, "same", 1, ne, GGML_TYPE_F32, 32);
    bw_pad(&b, 32);
    bw_zeros(&b, 64);
    expect_bad(&b, MF_EFORMAT, at(second), "tensor 'same' appears twice (first at byte 24)", NULL);
    tensors_hdr(&b, 1);
    bw_u64(&b, 1000);
    bw_zeros(&b, 30);
    expect_bad(&b, MF_EFORMAT, "byte 24:", "a tensor name is 1000 bytes long but only 30", NULL);
    free(b.p);
}

static void test_tensor_shape_errors(void **state)
{
    struct bw b = {0};
    const uint64_t five[5] = {1, 1, 1, 1, 1};
    tensors_hdr(&b, 1);
    bw_tensor(&b, "t5", 5, five, GGML_TYPE_F32, 0);
    expect_bad(&b, MF_EFORMAT, "byte 24:", "tensor 't5' has 5 dimensions (at most 4)", NULL);
    const uint64_t huge[1] = {(uint64_t)1 << 63};
    tensors_hdr(&b, 1);
    bw_tensor(&b, "big", 1, huge, GGML_TYPE_F32, 0);
    expect_bad(&b, MF_EFORMAT, "byte 24:", "tensor 'big' dimension 0", "above 2^63-1", NULL);
    const uint64_t over[2] = {(uint64_t)1 << 32, (uint64_t)1 << 32};
    tensors_hdr(&b, 1);
    bw_tensor(&b, "over", 2, over, GGML_TYPE_F32, 0);
    expect_bad(&b, MF_EFORMAT, "byte 24:", "tensor 'over' has more than 2^63 elements", NULL);
    const uint64_t ne[1] = {32};
    tensors_hdr(&b, 1);
    bw_tensor(&b, "retired", 1, ne, 4, 0); /* Q4_2: retired id */
    expect_bad(&b, MF_EFORMAT, "byte 24:", "tensor 'retired' has invalid ggml type 4", NULL);
    tensors_hdr(&b, 1);
    bw_tensor(&b, "nope", 1, ne, 200, 0);
    expect_bad(&b, MF_EFORMAT, "tensor 'nope' has invalid ggml type 200", NULL);
    const uint64_t odd[2] = {33, 2};
    tensors_hdr(&b, 1);
    bw_tensor(&b, "blocky", 2, odd, GGML_TYPE_Q4_0, 0);
    expect_bad(&b, MF_EFORMAT, "byte 24:", "tensor 'blocky' (Q4_0) has 33 elements per row",
               "block size 32", NULL);
    tensors_hdr(&b, 1);
    bw_tensor(&b, "trunc", 1, ne, GGML_TYPE_F32, 0);
    b.n -= 4; /* the offset field is cut */
    expect_bad(&b, MF_EFORMAT, "tensor 'trunc': the data offset needs 8 bytes", NULL);
    free(b.p);
}

static void test_tensor_data_errors(void **state)
{
    struct bw b = {0};
    const uint64_t ne[1] = {8}; /* 32 bytes of F32 */
    tensors_hdr(&b, 1);
    bw_tensor(&b, "mis", 1, ne, GGML_TYPE_F32, 16);
    bw_pad(&b, 32);
    bw_zeros(&b, 64);
    expect_bad(&b, MF_EFORMAT, "byte 24:",
               "tensor 'mis' data offset 16 is not a multiple of "
               "the alignment 32",
               NULL);
    const uint64_t q[2] = {32, 1024}; /* 131072 bytes */
    tensors_hdr(&b, 1);
    bw_tensor(&b, "blk.0.attn_q.weight", 2, q, GGML_TYPE_F32, 0);
    bw_pad(&b, 32);
    size_t data = b.n;
    bw_zeros(&b, 100);
    char want[200];
    snprintf(want, sizeof want,
             "bad.gguf: byte 24: tensor 'blk.0.attn_q.weight' data (offset "
             "0, 131072 bytes) runs past the end of the file (size %zu)",
             data + 100);
    expect_bad(&b, MF_EFORMAT, want, NULL);
    tensors_hdr(&b, 1);
    bw_tensor(&b, "far", 1, ne, GGML_TYPE_F32, UINT64_MAX - 31);
    bw_pad(&b, 32);
    expect_bad(&b, MF_EFORMAT, "tensor 'far' data", "runs past the end", NULL);
    const uint64_t two[1] = {16}; /* 64 bytes */
    tensors_hdr(&b, 2);
    bw_tensor(&b, "a", 1, two, GGML_TYPE_F32, 0);
    size_t tb = bw_tensor(&b, "b", 1, ne, GGML_TYPE_F32, 32);
    bw_pad(&b, 32);
    bw_zeros(&b, 128);
    expect_bad(&b, MF_EFORMAT, at(tb),
               "tensor 'b' data (offset 32, 32 bytes) overlaps tensor "
               "'a' (offset 0, 64 bytes)",
               NULL);
    free(b.p);
}

static void test_empty_tensors_allowed(void **state)
{
    struct bw b = {0};
    const uint64_t zero[2] = {0, 4}, ne[1] = {8};
    tensors_hdr(&b, 3);
    bw_tensor(&b, "empty", 2, zero, GGML_TYPE_Q4_K, 0);
    bw_tensor(&b, "scalar", 0, NULL, GGML_TYPE_F32, 0);
    bw_tensor(&b, "x", 1, ne, GGML_TYPE_F32, 32);
    bw_pad(&b, 32);
    bw_zeros(&b, 64);
    struct gguf_file *gf = expect_good(&b);
    assert_int_equal(gguf_find_tensor(gf, "empty")->n_bytes, 0);
    assert_int_equal(gguf_find_tensor(gf, "scalar")->n_elements, 1);
    assert_int_equal(gguf_find_tensor(gf, "scalar")->n_bytes, 4);
    assert_null(gguf_find_tensor(gf, "missing"));
    gguf_close(gf);
    free(b.p);
}

/* ---------------------------------------------------------------------------
 * writer -> reader round trips
 * ------------------------------------------------------------------------- */

static char tmpdir[64];

static int setup_dir(void **state)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/test_gguf.XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown_dir(void **state)
{
    DIR *d = opendir(tmpdir);
    struct dirent *e;
    char p[512];
    while (d && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        snprintf(p, sizeof p, "%s/%s", tmpdir, e->d_name);
        unlink(p);
    }
    if (d)
        closedir(d);
    return rmdir(tmpdir);
}

static const char *tpath(const char *name)
{
    static char p[4][256];
    static int i;
    i = (i + 1) % 4;
    snprintf(p[i], sizeof p[i], "%s/%s", tmpdir, name);
    return p[i];
}

/* Entries in tmpdir (files left behind by a writer). */
static int dir_entries(void)
{
    DIR *d = opendir(tmpdir);
    struct dirent *e;
    int n = 0;
    while (d && (e = readdir(d)) != NULL)
        n += e->d_name[0] != '.';
    if (d)
        closedir(d);
    return n;
}

#define OK(call)                                                                                   \
    do {                                                                                           \
        struct mf_err e_;                                                                          \
        mf_err_clear(&e_);                                                                         \
        int rc_ = (call);                                                                          \
        if (rc_)                                                                                   \
            print_error("%s: %s\n", #call, e_.msg);                                                \
        assert_int_equal(rc_, 0);                                                                  \
    } while (0)
#define E (&e_)

static void write_all_types(struct gguf_writer *w)
{
    static const uint32_t u32s[3] = {1, 0xffffffffu, 7};
    static const int64_t i64s[2] = {INT64_MIN, 5};
    static const float f32s[2] = {1.5f, -0.25f};
    static const double f64s[1] = {3.25};
    static const uint8_t bools[3] = {1, 0, 1};
    static const int8_t i8s[2] = {-128, 127};
    struct gguf_str strs[3] = {{"a", 1}, {"", 0}, {"x\0y", 3}};
    OK(gguf_writer_add_u8(w, "t.u8", 200, E));
    OK(gguf_writer_add_i8(w, "t.i8", -5, E));
    OK(gguf_writer_add_u16(w, "t.u16", 60000, E));
    OK(gguf_writer_add_i16(w, "t.i16", -30000, E));
    OK(gguf_writer_add_u32(w, "t.u32", 4000000000u, E));
    OK(gguf_writer_add_i32(w, "t.i32", -2000000000, E));
    OK(gguf_writer_add_f32(w, "t.f32", 0.5f, E));
    OK(gguf_writer_add_bool(w, "t.bool", 1, E));
    OK(gguf_writer_add_str(w, "t.str", "he\0llo", 6, E));
    OK(gguf_writer_add_u64(w, "t.u64", UINT64_MAX, E));
    OK(gguf_writer_add_i64(w, "t.i64", -1, E));
    OK(gguf_writer_add_f64(w, "t.f64", 1e300, E));
    OK(gguf_writer_add_arr(w, "a.u32", GGUF_TYPE_UINT32, u32s, 3, E));
    OK(gguf_writer_add_arr(w, "a.i64", GGUF_TYPE_INT64, i64s, 2, E));
    OK(gguf_writer_add_arr(w, "a.f32", GGUF_TYPE_FLOAT32, f32s, 2, E));
    OK(gguf_writer_add_arr(w, "a.f64", GGUF_TYPE_FLOAT64, f64s, 1, E));
    OK(gguf_writer_add_arr(w, "a.bool", GGUF_TYPE_BOOL, bools, 3, E));
    OK(gguf_writer_add_arr(w, "a.i8", GGUF_TYPE_INT8, i8s, 2, E));
    OK(gguf_writer_add_arr(w, "a.empty", GGUF_TYPE_UINT16, NULL, 0, E));
    OK(gguf_writer_add_arr_str(w, "a.str", strs, 3, E));
}

static void check_scalars(const struct gguf_file *gf)
{
    uint32_t u32 = 0;
    int32_t i32 = 0;
    uint64_t u64 = 0;
    int64_t i64 = 0;
    float f = 0;
    double d = 0;
    int flag = 0;
    struct gguf_str s;
    assert_int_equal(gguf_get_u32(gf, "t.u8", &u32, NULL), 0);
    assert_int_equal(u32, 200);
    assert_int_equal(gguf_get_i32(gf, "t.i8", &i32, NULL), 0);
    assert_int_equal(i32, -5);
    assert_int_equal(gguf_get_u32(gf, "t.u16", &u32, NULL), 0);
    assert_int_equal(u32, 60000);
    assert_int_equal(gguf_get_i64(gf, "t.i16", &i64, NULL), 0);
    assert_int_equal(i64, -30000);
    assert_int_equal(gguf_get_u32(gf, "t.u32", &u32, NULL), 0);
    assert_int_equal(u32, 4000000000u);
    assert_int_equal(gguf_get_i32(gf, "t.i32", &i32, NULL), 0);
    assert_int_equal(i32, -2000000000);
    assert_int_equal(gguf_get_f32(gf, "t.f32", &f, NULL), 0);
    assert_true(f == 0.5f);
    assert_int_equal(gguf_get_bool(gf, "t.bool", &flag, NULL), 0);
    assert_int_equal(flag, 1);
    assert_int_equal(gguf_get_str(gf, "t.str", &s, NULL), 0);
    assert_int_equal(s.len, 6);
    assert_memory_equal(s.p, "he\0llo", 6);
    assert_null(gguf_str_dup(s)); /* holds a NUL */
    assert_int_equal(gguf_get_u64(gf, "t.u64", &u64, NULL), 0);
    assert_true(u64 == UINT64_MAX);
    assert_int_equal(gguf_get_i64(gf, "t.i64", &i64, NULL), 0);
    assert_int_equal(i64, -1);
    assert_int_equal(gguf_get_f64(gf, "t.f64", &d, NULL), 0);
    assert_true(d == 1e300);
}

static void check_arrays(const struct gguf_file *gf)
{
    const struct gguf_array *a;
    assert_int_equal(gguf_get_arr(gf, "a.u32", &a, NULL), 0);
    assert_int_equal(a->type, GGUF_TYPE_UINT32);
    assert_int_equal(a->n, 3);
    assert_true(gguf_arr_u64(a, 1) == 0xffffffffu);
    assert_int_equal(gguf_get_arr(gf, "a.i64", &a, NULL), 0);
    assert_true(gguf_arr_int(a, 0) == INT64_MIN);
    assert_int_equal(gguf_get_arr(gf, "a.f32", &a, NULL), 0);
    assert_true(gguf_arr_f32(a, 1) == -0.25f && gguf_arr_f64(a, 0) == 1.5);
    assert_int_equal(gguf_get_arr(gf, "a.f64", &a, NULL), 0);
    assert_true(gguf_arr_f64(a, 0) == 3.25);
    assert_int_equal(gguf_get_arr(gf, "a.bool", &a, NULL), 0);
    assert_int_equal(gguf_arr_int(a, 0) + gguf_arr_int(a, 1) + gguf_arr_int(a, 2), 2);
    assert_int_equal(gguf_get_arr(gf, "a.i8", &a, NULL), 0);
    assert_int_equal(gguf_arr_int(a, 0), -128);
    assert_int_equal(gguf_get_arr(gf, "a.empty", &a, NULL), 0);
    assert_int_equal(a->n, 0);
    assert_int_equal(a->type, GGUF_TYPE_UINT16);
    assert_int_equal(gguf_get_arr(gf, "a.str", &a, NULL), 0);
    assert_int_equal(a->n, 3);
    assert_true(gguf_str_eq(gguf_arr_str(a, 0), "a"));
    assert_int_equal(gguf_arr_str(a, 1).len, 0);
    assert_int_equal(gguf_arr_str(a, 2).len, 3);
    assert_memory_equal(gguf_arr_str(a, 2).p, "x\0y", 3);
}

/* Writes every KV type to tmpdir/name and opens it again. */
static struct gguf_file *all_types_file(const char *name)
{
    struct gguf_writer *w;
    struct gguf_file *gf;
    const char *path = tpath(name);
    OK(gguf_writer_open(path, &w, E));
    write_all_types(w);
    OK(gguf_writer_finish(w, E));
    gguf_writer_free(w);
    OK(gguf_open(path, &gf, E));
    return gf;
}

static void test_roundtrip_all_types(void **state)
{
    struct gguf_file *gf = all_types_file("types.gguf");
    assert_int_equal(gguf_n_kv(gf), 20);
    assert_string_equal(gguf_kv_at(gf, 0)->key, "t.u8"); /* insertion order kept */
    assert_string_equal(gguf_kv_at(gf, 19)->key, "a.str");
    check_scalars(gf);
    check_arrays(gf);
    gguf_close(gf);
}

static void test_getter_conversions(void **state)
{
    struct gguf_file *gf = all_types_file("conv.gguf");
    struct mf_err err;
    uint32_t u32 = 77;
    int32_t i32 = 77;
    float f = 0;
    int flag;
    struct gguf_str s;
    assert_int_equal(gguf_get_u32(gf, "t.i8", &u32, &err), MF_ERANGE); /* -5 */
    assert_non_null(strstr(err.msg, "key 't.i8'"));
    assert_int_equal(gguf_get_u32(gf, "t.u64", &u32, &err), MF_ERANGE);
    assert_int_equal(gguf_get_i32(gf, "t.u32", &i32, &err), MF_ERANGE);
    assert_int_equal(u32, 77);
    assert_int_equal(i32, 77);
    assert_int_equal(gguf_get_u32(gf, "t.str", &u32, &err), MF_EFORMAT);
    assert_non_null(strstr(err.msg, "key 't.str' is string, expected an integer"));
    assert_non_null(strstr(err.msg, "byte "));
    assert_int_equal(gguf_get_u32(gf, "t.f32", &u32, &err), MF_EFORMAT);
    assert_int_equal(gguf_get_u32(gf, "t.bool", &u32, &err), MF_EFORMAT);
    assert_int_equal(gguf_get_bool(gf, "t.u8", &flag, &err), MF_EFORMAT);
    assert_int_equal(gguf_get_str(gf, "t.u8", &s, &err), MF_EFORMAT);
    assert_int_equal(gguf_get_u32(gf, "no.such", &u32, &err), MF_ENOTFOUND);
    assert_non_null(strstr(err.msg, "key 'no.such' not found"));
    assert_int_equal(gguf_get_f32(gf, "t.f64", &f, &err), 0); /* narrowed */
    assert_true(isinf(f));
    assert_int_equal(gguf_get_f32(gf, "t.u16", &f, &err), 0); /* integers convert */
    assert_true(f == 60000.0f);
    gguf_close(gf);
}

static void test_nested_array_via_raw(void **state)
{
    struct bw v = {0}; /* [[7], ["s"]] as an array of arrays */
    bw_u32(&v, GGUF_TYPE_ARRAY);
    bw_u64(&v, 2);
    bw_u32(&v, GGUF_TYPE_UINT64);
    bw_u64(&v, 1);
    bw_u64(&v, 7);
    bw_u32(&v, GGUF_TYPE_STRING);
    bw_u64(&v, 1);
    bw_str(&v, "s");
    struct gguf_writer *w;
    const char *path = tpath("nested.gguf");
    OK(gguf_writer_open(path, &w, E));
    OK(gguf_writer_add_raw(w, "nested", GGUF_TYPE_ARRAY, v.p, v.n, E));
    OK(gguf_writer_finish(w, E));
    gguf_writer_free(w);
    struct gguf_file *gf;
    OK(gguf_open(path, &gf, E));
    const struct gguf_array *a;
    assert_int_equal(gguf_get_arr(gf, "nested", &a, NULL), 0);
    assert_int_equal(gguf_arr_u64(gguf_arr_sub(a, 0), 0), 7);
    assert_true(gguf_str_eq(gguf_arr_str(gguf_arr_sub(a, 1), 0), "s"));
    /* copying it through add_kv gives the same bytes */
    const char *copy = tpath("nested2.gguf");
    OK(gguf_writer_open(copy, &w, E));
    OK(gguf_writer_add_kv(w, gguf_find_kv(gf, "nested"), E));
    OK(gguf_writer_finish(w, E));
    gguf_writer_free(w);
    gguf_close(gf);
    /* malformed raw bytes are refused and leave nothing */
    OK(gguf_writer_open(tpath("bad.gguf"), &w, E));
    struct mf_err err;
    assert_int_equal(gguf_writer_add_raw(w, "cut", GGUF_TYPE_ARRAY, v.p, v.n - 1, &err),
                     MF_EFORMAT);
    gguf_writer_free(w);
    assert_int_equal(access(tpath("bad.gguf"), F_OK), -1);
    free(v.p);
}

/* Writes tensors of 3, 64 and 1 F32 values with general.alignment a. */
static void write_aligned(const char *path, uint32_t a)
{
    struct gguf_writer *w;
    const uint64_t n0[1] = {3}, n1[2] = {16, 4}, n2[1] = {1};
    float data[3 + 64 + 1];
    for (int i = 0; i < 68; i++)
        data[i] = (float)i;
    OK(gguf_writer_open(path, &w, E));
    OK(gguf_writer_add_u32(w, "general.alignment", a, E));
    OK(gguf_writer_add_tensor(w, "x0", GGML_TYPE_F32, 1, n0, E));
    OK(gguf_writer_add_tensor(w, "x1", GGML_TYPE_F32, 2, n1, E));
    OK(gguf_writer_add_cstr(w, "after.tensors", "kv after infos is fine", E));
    OK(gguf_writer_add_tensor(w, "x2", GGML_TYPE_F32, 1, n2, E));
    OK(gguf_writer_write(w, data, 5 * sizeof(float), E)); /* spans x0 and x1 */
    OK(gguf_writer_write(w, data + 5, 63 * sizeof(float), E));
    OK(gguf_writer_finish(w, E));
    gguf_writer_free(w);
}

static void test_alignments(void **state)
{
    static const uint32_t aligns[] = {1, 8, 32, 64, 4096};
    for (size_t k = 0; k < sizeof aligns / sizeof aligns[0]; k++) {
        const char *path = tpath("aligned.gguf");
        write_aligned(path, aligns[k]);
        struct gguf_file *gf;
        OK(gguf_open(path, &gf, E));
        assert_int_equal(gguf_alignment(gf), aligns[k]);
        assert_int_equal(gguf_data_offset(gf) % aligns[k], 0);
        uint64_t expect_size = gguf_data_offset(gf);
        float want = 0;
        for (uint64_t i = 0; i < gguf_n_tensors(gf); i++) {
            const struct gguf_tensor *t = gguf_tensor_at(gf, i);
            assert_int_equal(t->offset % aligns[k], 0);
            for (uint64_t j = 0; j < t->n_elements; j++, want += 1) {
                float v;
                memcpy(&v, (const uint8_t *)t->data + 4 * j, 4);
                assert_true(v == want);
            }
            expect_size += (t->n_bytes + aligns[k] - 1) / aligns[k] * aligns[k];
        }
        assert_int_equal(gguf_file_size(gf), expect_size); /* padded after the last too */
        gguf_close(gf);
    }
}

/* ---------------------------------------------------------------------------
 * writer failures and atomicity
 * ------------------------------------------------------------------------- */

static void test_writer_atomic_on_failure(void **state)
{
    struct gguf_writer *w;
    struct mf_err err;
    const uint64_t ne[1] = {8};
    const char *path = tpath("atomic.gguf");
    assert_int_equal(mf_file_write_atomic(path, "old", 3, &err), 0);
    int before = dir_entries();
    /* too little data: finish fails, the old file stays, no temporary remains */
    OK(gguf_writer_open(path, &w, E));
    OK(gguf_writer_add_tensor(w, "t", GGML_TYPE_F32, 1, ne, E));
    OK(gguf_writer_write(w, "abcd", 4, E));
    assert_int_equal(gguf_writer_finish(w, &err), MF_EINVAL);
    assert_non_null(strstr(err.msg, "tensor 't' got 4 of its 32 bytes"));
    assert_int_equal(dir_entries(), before);
    assert_int_equal(gguf_writer_write(w, "x", 1, &err), MF_EINVAL); /* FAILED stays */
    gguf_writer_free(w);
    /* too much data */
    OK(gguf_writer_open(path, &w, E));
    OK(gguf_writer_add_tensor(w, "t", GGML_TYPE_F32, 1, ne, E));
    char big[40] = {0};
    assert_int_equal(gguf_writer_write(w, big, sizeof big, &err), MF_EINVAL);
    assert_non_null(strstr(err.msg, "beyond the last tensor"));
    assert_int_equal(dir_entries(), before); /* removed at once, before free */
    gguf_writer_free(w);
    /* freed without finishing */
    OK(gguf_writer_open(path, &w, E));
    OK(gguf_writer_add_u8(w, "k", 1, E));
    gguf_writer_free(w);
    assert_int_equal(dir_entries(), before);
    char *old = NULL;
    size_t len = 0;
    assert_int_equal(mf_file_read(path, 100, &old, &len, &err), 0);
    assert_string_equal(old, "old");
    free(old);
    /* a directory that does not exist */
    assert_int_equal(gguf_writer_open("/nonexistent-dir/x.gguf", &w, &err), MF_EIO);
    assert_null(w);
}

static void test_writer_refuses_bad_input(void **state)
{
    struct gguf_writer *w;
    struct mf_err err;
    const uint64_t ne[2] = {33, 2}, ok[1] = {32};
    const char *path = tpath("refuse.gguf");
    OK(gguf_writer_open(path, &w, E));
    OK(gguf_writer_add_u8(w, "k", 1, E));
    assert_int_equal(gguf_writer_add_u8(w, "k", 2, &err), MF_EEXIST);
    assert_non_null(strstr(err.msg, "key 'k' is already set"));
    assert_int_equal(gguf_writer_add_u8(w, "other", 2, &err), MF_EINVAL); /* FAILED */
    gguf_writer_free(w);
    struct {
        int code;
        const char *want;
    } cases[] = {
        {MF_EINVAL, "not a whole number of Q4_0 blocks"},
        {MF_EEXIST, "tensor 'a' is already added"},
        {MF_EINVAL, "general.alignment 24 is not a power of two"},
        {MF_EINVAL, "key 'general.alignment' must be u32"},
        {MF_EINVAL, "cannot add a KV after tensor data"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        OK(gguf_writer_open(path, &w, E));
        int rc = 0;
        if (i == 0)
            rc = gguf_writer_add_tensor(w, "q", GGML_TYPE_Q4_0, 2, ne, &err);
        if (i == 1 && gguf_writer_add_tensor(w, "a", GGML_TYPE_F32, 1, ok, &err) == 0)
            rc = gguf_writer_add_tensor(w, "a", GGML_TYPE_F32, 1, ok, &err);
        if (i == 2)
            rc = gguf_writer_add_u32(w, "general.alignment", 24, &err);
        if (i == 3)
            rc = gguf_writer_add_u64(w, "general.alignment", 32, &err);
        if (i == 4 && gguf_writer_write(w, NULL, 0, &err) == 0)
            rc = gguf_writer_add_u8(w, "late", 1, &err);
        assert_int_equal(rc, cases[i].code);
        if (!strstr(err.msg, cases[i].want))
            print_error("'%s' lacks '%s'\n", err.msg, cases[i].want);
        assert_non_null(strstr(err.msg, cases[i].want));
        gguf_writer_free(w);
        assert_int_equal(access(path, F_OK), -1);
    }
}

/* ---------------------------------------------------------------------------
 * lookups, files on disk, llama.cpp's files
 * ------------------------------------------------------------------------- */

static void test_many_keys_and_big_string_array(void **state)
{
    enum { NKEYS = 2000, NSTR = 131072 };
    struct gguf_writer *w;
    char key[32];
    const char *path = tpath("many.gguf");
    OK(gguf_writer_open(path, &w, E));
    for (int i = 0; i < NKEYS; i++) {
        snprintf(key, sizeof key, "key.%d", i);
        OK(gguf_writer_add_u32(w, key, (uint32_t)i * 3, E));
    }
    struct gguf_str *strs = calloc(NSTR, sizeof *strs);
    char *pool = malloc((size_t)NSTR * 8);
    assert_non_null(strs);
    assert_non_null(pool);
    for (int i = 0; i < NSTR; i++) {
        snprintf(pool + 8 * i, 8, "%d", i);
        strs[i].p = pool + 8 * i;
        strs[i].len = strlen(strs[i].p);
    }
    OK(gguf_writer_add_arr_str(w, "tokens", strs, NSTR, E));
    OK(gguf_writer_finish(w, E));
    gguf_writer_free(w);
    struct gguf_file *gf;
    OK(gguf_open(path, &gf, E));
    for (int i = 0; i < NKEYS; i++) {
        uint32_t v;
        snprintf(key, sizeof key, "key.%d", i);
        assert_int_equal(gguf_get_u32(gf, key, &v, NULL), 0);
        assert_int_equal(v, (uint32_t)i * 3);
    }
    const struct gguf_array *a;
    assert_int_equal(gguf_get_arr(gf, "tokens", &a, NULL), 0);
    for (int i = 0; i < NSTR; i += 997)
        assert_true(gguf_str_eq(gguf_arr_str(a, (uint64_t)i), pool + 8 * i));
    gguf_close(gf);
    free(strs);
    free(pool);
}

static void test_open_errors(void **state)
{
    struct gguf_file *gf;
    struct mf_err err;
    assert_int_equal(gguf_open(tpath("missing.gguf"), &gf, &err), MF_ENOTFOUND);
    assert_null(gf);
    assert_int_equal(gguf_open(tmpdir, &gf, &err), MF_EINVAL);
    const char *p = tpath("short.gguf");
    assert_int_equal(mf_file_write_atomic(p, "GGUF", 4, &err), 0);
    assert_int_equal(gguf_open(p, &gf, &err), MF_EFORMAT);
    assert_non_null(strstr(err.msg, "short.gguf: byte 0: file is 4 bytes"));
    /* a file that opens from disk opens from memory the same way */
    struct base x;
    build_base(&x);
    p = tpath("base.gguf");
    assert_int_equal(mf_file_write_atomic(p, x.b.p, x.b.n, &err), 0);
    OK(gguf_open(p, &gf, E));
    assert_int_equal(gguf_file_size(gf), x.b.n);
    assert_memory_equal(gguf_base(gf), x.b.p, x.b.n);
    assert_string_equal(gguf_name(gf), p);
    gguf_close(gf);
    gguf_close(NULL);
    free(x.b.p);
}

/* A GGUF inside a bigger file (as in an uncompressed tar layer): opened in
 * place at an offset that is not page-aligned, and every way a range can be
 * wrong refused with its numbers. */
static void test_open_range(void **state)
{
    struct gguf_file *gf;
    struct mf_err err;
    struct base x;
    build_base(&x);
    size_t pre = 5000, post = 777, n = pre + x.b.n + post;
    uint8_t *buf = malloc(n);
    assert_non_null(buf);
    memset(buf, 0xA5, pre);
    memcpy(buf + pre, x.b.p, x.b.n);
    memset(buf + pre + x.b.n, 0x5A, post);
    const char *p = tpath("inside.bin");
    assert_int_equal(mf_file_write_atomic(p, buf, n, &err), 0);

    OK(gguf_open_range(p, pre, x.b.n, &gf, E));
    assert_int_equal(gguf_file_size(gf), x.b.n);
    assert_memory_equal(gguf_base(gf), x.b.p, x.b.n);
    assert_int_equal(gguf_n_tensors(gf), 1);
    gguf_close(gf);

    /* the map itself: data points at offset, whatever the page offset */
    struct mf_file_map m;
    OK(mf_file_map_range(p, pre, 100, 24, "a GGUF header (24 bytes)", &m, E));
    assert_int_equal(m.size, 100);
    assert_memory_equal(m.data, x.b.p, 100);
    mf_file_unmap(&m);
    assert_null(m.data);
    OK(mf_file_map_range(p, 4096, 0, 1, "data", &m, E)); /* size 0: to the end */
    assert_int_equal(m.size, n - 4096);
    assert_memory_equal(m.data, buf + 4096, m.size);
    mf_file_unmap(&m);

    /* past the end: MF_ERANGE naming offset, size and file size */
    assert_int_equal(gguf_open_range(p, pre, n, &gf, &err), MF_ERANGE);
    assert_null(gf);
    char want[160];
    snprintf(want, sizeof want,
             "range at offset %zu of %zu bytes lies past the end of the file (%zu bytes)", pre, n,
             n);
    assert_non_null(strstr(err.msg, want));
    assert_int_equal(gguf_open_range(p, n + 1, 0, &gf, &err), MF_ERANGE);
    assert_int_equal(gguf_open_range(p, UINT64_MAX, 2, &gf, &err), MF_ERANGE); /* no wrap */
    /* too short for a header, and the wrong start */
    assert_int_equal(gguf_open_range(p, pre, 10, &gf, &err), MF_EFORMAT);
    snprintf(want, sizeof want, "byte %zu: range is 10 bytes, too short", pre);
    assert_non_null(strstr(err.msg, want));
    assert_int_equal(gguf_open_range(p, n, 0, &gf, &err), MF_EFORMAT); /* empty range */
    assert_int_equal(gguf_open_range(p, pre + 1, x.b.n - 1, &gf, &err), MF_EFORMAT);
    assert_null(gf);
    /* not a regular file, and missing */
    assert_int_equal(mf_file_map_range(tmpdir, 0, 0, 1, "data", &m, &err), MF_EINVAL);
    assert_null(m.data);
    assert_int_equal(gguf_open_range(tpath("nope.bin"), pre, 10, &gf, &err), MF_ENOTFOUND);
    free(buf);
    free(x.b.p);
}

/* Copies src through reader -> writer to dst. */
static void copy_gguf(const char *src, const char *dst)
{
    struct gguf_file *gf;
    struct gguf_writer *w;
    OK(gguf_open(src, &gf, E));
    OK(gguf_writer_open(dst, &w, E));
    for (uint64_t i = 0; i < gguf_n_kv(gf); i++)
        OK(gguf_writer_add_kv(w, gguf_kv_at(gf, i), E));
    for (uint64_t i = 0; i < gguf_n_tensors(gf); i++) {
        const struct gguf_tensor *t = gguf_tensor_at(gf, i);
        OK(gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, E));
    }
    for (uint64_t i = 0; i < gguf_n_tensors(gf); i++) {
        const struct gguf_tensor *t = gguf_tensor_at(gf, i);
        OK(gguf_writer_write(w, t->data, t->n_bytes, E));
    }
    OK(gguf_writer_finish(w, E));
    gguf_writer_free(w);
    gguf_close(gf);
}

static int same_bytes(const char *a, const char *b)
{
    char *x = NULL, *y = NULL;
    size_t nx = 0, ny = 0;
    int same = mf_file_read(a, (size_t)1 << 30, &x, &nx, NULL) == 0 &&
               mf_file_read(b, (size_t)1 << 30, &y, &ny, NULL) == 0 && nx == ny &&
               memcmp(x, y, nx) == 0;
    free(x);
    free(y);
    return same;
}

static void test_llamacpp_files_copy_byte_for_byte(void **state)
{
    const char *shared = getenv("MFC_SHARED");
    char dir[512], src[1024];
    snprintf(dir, sizeof dir, "%s/data/vocab", shared ? shared : "../shared");
    DIR *d = opendir(dir);
    if (!d) {
        print_message("skipping: vocab GGUFs not found at %s (set MFC_SHARED)\n", dir);
        skip();
    }
    struct dirent *e;
    int n = 0;
    while ((e = readdir(d)) != NULL) {
        size_t len = strlen(e->d_name);
        if (len < 5 || strcmp(e->d_name + len - 5, ".gguf") != 0)
            continue;
        snprintf(src, sizeof src, "%s/%s", dir, e->d_name);
        copy_gguf(src, tpath("copy.gguf"));
        if (!same_bytes(src, tpath("copy.gguf")))
            print_error("%s does not copy byte for byte\n", src);
        assert_true(same_bytes(src, tpath("copy.gguf")));
        n++;
    }
    closedir(d);
    assert_true(n > 0);
    /* and a file with tensors written by our writer copies to itself */
    write_aligned(tpath("t.gguf"), 64);
    copy_gguf(tpath("t.gguf"), tpath("t2.gguf"));
    assert_true(same_bytes(tpath("t.gguf"), tpath("t2.gguf")));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_base_is_valid),
        cmocka_unit_test(test_header_errors),
        cmocka_unit_test(test_key_errors),
        cmocka_unit_test(test_value_errors),
        cmocka_unit_test(test_nested_arrays),
        cmocka_unit_test(test_alignment_key_errors),
        cmocka_unit_test(test_tensor_name_errors),
        cmocka_unit_test(test_tensor_shape_errors),
        cmocka_unit_test(test_tensor_data_errors),
        cmocka_unit_test(test_empty_tensors_allowed),
        cmocka_unit_test(test_roundtrip_all_types),
        cmocka_unit_test(test_getter_conversions),
        cmocka_unit_test(test_nested_array_via_raw),
        cmocka_unit_test(test_alignments),
        cmocka_unit_test(test_writer_atomic_on_failure),
        cmocka_unit_test(test_writer_refuses_bad_input),
        cmocka_unit_test(test_many_keys_and_big_string_array),
        cmocka_unit_test(test_open_errors),
        cmocka_unit_test(test_open_range),
        cmocka_unit_test(test_llamacpp_files_copy_byte_for_byte),
    };
    return cmocka_run_group_tests_name("gguf", tests, setup_dir, teardown_dir);
}
