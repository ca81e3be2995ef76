/*
 * test_secret_mask.c: secret masking (exec/secret_mask.h): every run of 8 or
 * more bytes of a secret, of its reverse, of its base64 (both alphabets, all
 * three alignments, checked against an independent encoder) and of its hex
 * is hidden, shorter runs are not, short secrets are hidden whole; the mask
 * equals a brute-force reference on random texts; an unreadable or oversized
 * secret makes the mask refuse. Prints the time of masking a 1 MiB log
 * against 100 secrets, and what the brute force takes on 64 KiB.
 */
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "exec/secret_mask.h"

static const char *secret = "S3CR3T-abcdefghij0123456789";

static struct secret_mask *mask_of(const char *s, size_t n)
{
    struct secret_mask *m;
    struct mf_err err;
    assert_int_equal(secret_mask_new(&m, &err), 0);
    assert_int_equal(secret_mask_add(m, s, n, &err), 0);
    return m;
}

/* text with the span [at, at+n) expected masked and the rest untouched. */
static void expect_span(const struct secret_mask *m, const char *text, size_t at, size_t n)
{
    size_t len = strlen(text);
    char *t = strdup(text);
    assert_non_null(t);
    assert_int_equal(secret_mask_apply(m, t, len), (long)n);
    for (size_t i = 0; i < len; i++)
        if (i >= at && i < at + n)
            assert_int_equal(t[i], '*');
        else
            assert_int_equal(t[i], text[i]);
    free(t);
}

static void test_substrings(void **state)
{
    (void)state;
    struct secret_mask *m = mask_of(secret, strlen(secret));
    char text[128];
    /* head -c 10 and an inner run of 12 */
    snprintf(text, sizeof text, "token: %.10s!", secret);
    expect_span(m, text, 7, 10);
    snprintf(text, sizeof text, "[%.12s]", secret + 5);
    expect_span(m, text, 1, 12);
    /* 7 bytes are not enough: "S3CR3T-" alone is left */
    snprintf(text, sizeof text, "a %.7s b", secret);
    expect_span(m, text, 0, 0);
    /* the whole secret, twice, and its reverse */
    snprintf(text, sizeof text, "%s %s", secret, secret);
    char *t = strdup(text);
    assert_int_equal(secret_mask_apply(m, t, strlen(t)), 2 * (long)strlen(secret));
    free(t);
    char rev[64];
    size_t n = strlen(secret);
    for (size_t i = 0; i < n; i++)
        rev[i] = secret[n - 1 - i];
    snprintf(text, sizeof text, "x%.*sy", (int)n, rev);
    expect_span(m, text, 1, n);
    secret_mask_free(m);
}

/* An encoder independent of the one under test (RFC 4648, with padding). */
static size_t b64(const unsigned char *s, size_t n, const char *alpha, char *out)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)s[i] << 16 | (i + 1 < n ? (uint32_t)s[i + 1] << 8 : 0) |
                     (i + 2 < n ? s[i + 2] : 0);
        out[o++] = alpha[v >> 18 & 63];
        out[o++] = alpha[v >> 12 & 63];
        out[o++] = i + 1 < n ? alpha[v >> 6 & 63] : '=';
        out[o++] = i + 2 < n ? alpha[v & 63] : '=';
    }
    out[o] = '\0';
    return o;
}

static void test_base64_and_hex(void **state)
{
    (void)state;
    static const char *alphas[] = {
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/",
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"};
    /* a secret with bytes that give + / - _ in base64 */
    const unsigned char sec[] = "\xfb\xff\xbe token=\xfa\xfb\xfc\xfd\xfe\xff end";
    size_t n = sizeof sec - 1;
    struct secret_mask *m = mask_of((const char *)sec, n);
    for (int a = 0; a < 2; a++)
        for (size_t k = 0; k < 3; k++) { /* k bytes before the secret in the encoded data */
            unsigned char data[64];
            char enc[128];
            memset(data, 'Q', sizeof data);
            memcpy(data + 6 + k, sec, n); /* 6 + k known bytes, then the secret, then Q's */
            size_t len = b64(data, 6 + k + n + 6, alphas[a], enc);
            char *t = strdup(enc);
            assert_true(secret_mask_apply(m, t, len) > 0);
            /* the characters wholly made of secret bits are hidden ... */
            size_t first = ((6 + k) * 8 + 5) / 6, last = (6 + k + n) * 8 / 6;
            for (size_t i = first; i < last; i++)
                assert_int_equal(t[i], '*');
            /* ... and those of the known bytes around it are not */
            for (size_t i = 0; i + 1 < first && i < 8; i++)
                assert_int_equal(t[i], enc[i]);
            assert_int_equal(t[len - 1], enc[len - 1]);
            free(t);
        }
    /* hex, both cases, inside other text */
    char hex[128], text[160];
    for (int up = 0; up < 2; up++) {
        for (size_t i = 0; i < n; i++)
            snprintf(hex + 2 * i, 3, up ? "%02X" : "%02x", sec[i]);
        snprintf(text, sizeof text, "dump: %s.", hex);
        expect_span(m, text, 6, 2 * n);
    }
    secret_mask_free(m);
}

static void test_short_and_limits(void **state)
{
    (void)state;
    struct secret_mask *m = mask_of("pa55w", 5);
    expect_span(m, "login pa55w ok", 6, 5);
    expect_span(m, "login pa55 ok", 0, 0);
    expect_span(m, "w55ap", 0, 5); /* its reverse, whole */
    secret_mask_free(m);
    /* shorter than SECRET_MASK_MIN_WHOLE: not a secret we can hide; nothing added */
    m = mask_of("abc", 3);
    assert_int_equal(secret_mask_size(m), 0);
    expect_span(m, "abc abc", 0, 0);
    secret_mask_free(m);
    /* an unreadable secret file: the mask refuses from then on */
    struct mf_err err;
    assert_int_equal(secret_mask_new(&m, &err), 0);
    assert_int_not_equal(secret_mask_add_file(m, "/nonexistent/secret", &err), 0);
    char t[] = "nothing to hide";
    assert_int_equal(secret_mask_apply(m, t, strlen(t)), -1);
    assert_string_equal(t, "nothing to hide");
    secret_mask_free(m);
    /* a file larger than the limit, too */
    char path[] = "/tmp/test_secret_mask_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    char *big = calloc(1, SECRET_MASK_MAX_SECRET + 10);
    memset(big, 'k', SECRET_MASK_MAX_SECRET + 9);
    assert_int_equal(write(fd, big, SECRET_MASK_MAX_SECRET + 9), SECRET_MASK_MAX_SECRET + 9);
    close(fd);
    assert_int_equal(secret_mask_new(&m, &err), 0);
    assert_int_equal(secret_mask_add_file(m, path, &err), MF_ERANGE);
    assert_int_equal(secret_mask_apply(m, t, strlen(t)), -1);
    secret_mask_free(m);
    /* a token file's trailing newline is not part of the secret */
    fd = open(path, O_WRONLY | O_TRUNC);
    assert_int_equal(write(fd, "tok-12345678\n", 13), 13);
    close(fd);
    assert_int_equal(secret_mask_new(&m, &err), 0);
    assert_int_equal(secret_mask_add_file(m, path, &err), 0);
    expect_span(m, "got tok-12345678\nnext", 4, 12);
    secret_mask_free(m);
    unlink(path);
    free(big);
    assert_int_equal(secret_mask_apply(NULL, t, strlen(t)), -1);
}

/* ---- against brute force --------------------------------------------------------- */

/* The forms of s (raw, reverse, base64 x2 alphabets x3 alignments, hex x2),
 * computed with the reference encoder and trimmed of the characters that
 * depend on the neighbours. */
static size_t forms(const unsigned char *s, size_t n, char out[16][512], size_t lens[16])
{
    static const char *alphas[] = {
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/",
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"};
    size_t f = 0;
    memcpy(out[f], s, n);
    lens[f++] = n;
    for (size_t i = 0; i < n; i++)
        out[f][i] = (char)s[n - 1 - i];
    lens[f++] = n;
    for (int a = 0; a < 2; a++)
        for (size_t k = 0; k < 3; k++) {
            unsigned char data[300] = {0};
            char enc[512];
            memcpy(data + k, s, n);
            b64(data, k + n, alphas[a], enc);
            size_t first = (k * 8 + 5) / 6, last = (k + n) * 8 / 6;
            lens[f] = last > first ? last - first : 0;
            memcpy(out[f], enc + first, lens[f]);
            f++;
        }
    for (int up = 0; up < 2; up++) {
        for (size_t i = 0; i < n; i++)
            snprintf(out[f] + 2 * i, 3, up ? "%02X" : "%02x", s[i]);
        lens[f++] = 2 * n;
    }
    return f;
}

/* Marks every occurrence of every 8-byte window of every form. */
static void brute(const unsigned char secrets[][64], size_t ns, size_t slen, char *text, size_t len)
{
    char *mark = calloc(1, len);
    for (size_t s = 0; s < ns; s++) {
        char f[16][512];
        size_t fl[16], nf = forms(secrets[s], slen, f, fl);
        for (size_t i = 0; i < nf; i++)
            for (size_t g = 0; g + 8 <= fl[i]; g++)
                for (const char *p = text; (p = memmem(p, len - (size_t)(p - text), f[i] + g, 8));
                     p++)
                    memset(mark + (p - text), 1, 8);
    }
    for (size_t i = 0; i < len; i++)
        if (mark[i])
            text[i] = '*';
    free(mark);
}

static double secs(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Random text over a small alphabet with pieces of the secrets' forms pasted in. */
static void make_text(char *t, size_t len, const unsigned char secrets[][64], size_t ns,
                      unsigned *seed)
{
    for (size_t i = 0; i < len; i++)
        t[i] = "abcdefgh0123 \n"[rand_r(seed) % 14];
    for (size_t k = 0; k < len / 200; k++) {
        char f[16][512];
        size_t fl[16], nf = forms(secrets[rand_r(seed) % ns], 40, f, fl);
        size_t which = (size_t)rand_r(seed) % nf, from = (size_t)rand_r(seed) % fl[which];
        size_t n = 1 + (size_t)rand_r(seed) % 20, at = (size_t)rand_r(seed) % len;
        if (from + n > fl[which])
            n = fl[which] - from;
        if (at + n > len)
            n = len - at;
        memcpy(t + at, f[which] + from, n);
    }
}

static void test_matches_brute_force_and_time(void **state)
{
    (void)state;
    enum { NS = 100, SLEN = 40 };
    static unsigned char secrets[NS][64];
    unsigned seed = 7;
    struct secret_mask *m;
    struct mf_err err;
    assert_int_equal(secret_mask_new(&m, &err), 0);
    for (size_t s = 0; s < NS; s++) {
        for (size_t i = 0; i < SLEN; i++)
            secrets[s][i] = (unsigned char)(rand_r(&seed) & 0xff);
        memcpy(secrets[s], "tok_", 4);
        assert_int_equal(secret_mask_add(m, secrets[s], SLEN, &err), 0);
    }
    size_t small = 64u << 10, big = 1u << 20;
    char *a = malloc(big), *b = malloc(big);
    make_text(a, small, secrets, NS, &seed);
    memcpy(b, a, small);
    double t0 = secs();
    long masked = secret_mask_apply(m, a, small);
    double t1 = secs();
    brute(secrets, NS, SLEN, b, small);
    double t2 = secs();
    assert_true(masked > 0);
    assert_memory_equal(a, b, small);
    make_text(a, big, secrets, NS, &seed);
    double t3 = secs();
    assert_true(secret_mask_apply(m, a, big) > 0);
    double t4 = secs();
    printf("# %zu grams for %d secrets of %d bytes; 64 KiB: mask %.2f ms, brute force %.0f ms; "
           "1 MiB: mask %.1f ms\n",
           secret_mask_size(m), NS, SLEN, (t1 - t0) * 1e3, (t2 - t1) * 1e3, (t4 - t3) * 1e3);
    assert_true(t4 - t3 < 2.0); /* tens of ms here; a bound that only a quadratic scan fails */
    free(a);
    free(b);
    secret_mask_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_substrings),
        cmocka_unit_test(test_base64_and_hex),
        cmocka_unit_test(test_short_and_limits),
        cmocka_unit_test(test_matches_brute_force_and_time),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
