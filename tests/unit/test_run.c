/*
 * test_run.c: the untrusted-input parsers behind `mfc serve` / `mfc run`:
 * the tar walker (ustar prefix, pax path/size records, GNU long names,
 * base-256 sizes, checksums, truncation) and the /api/chat NDJSON stream
 * parser (lines cut anywhere, "\u0000" content, error lines, the done line).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cli/run.h"

/* ---- building tars in memory ---- */

struct tar {
    unsigned char data[16384];
    size_t len;
};

/* n - 1 octal digits and a NUL (v must fit) */
static void octal(unsigned char *f, size_t n, uint64_t v)
{
    for (size_t i = n - 1; i-- > 0; v >>= 3)
        f[i] = (unsigned char)('0' + (v & 7));
    f[n - 1] = 0;
}

static void header(struct tar *t, const char *name, const char *prefix, char type, uint64_t size,
                   int base256)
{
    unsigned char *h = t->data + t->len;
    memset(h, 0, 512);
    memcpy(h, name, strnlen(name, 100));
    memcpy(h + 100, "0000644", 7);
    if (base256) {
        h[124] = 0x80;
        for (int i = 0; i < 8; i++)
            h[135 - i] = (unsigned char)(size >> (8 * i));
    } else {
        octal(h + 124, 12, size);
    }
    h[156] = (unsigned char)type;
    memcpy(h + 257, "ustar", 6);
    memcpy(h + 263, "00", 2);
    if (prefix)
        memcpy(h + 345, prefix, strlen(prefix));
    memset(h + 148, ' ', 8);
    unsigned sum = 0;
    for (int i = 0; i < 512; i++)
        sum += h[i];
    snprintf((char *)h + 148, 8, "%06o", sum);
    t->len += 512;
}

/* size bytes of data (records padded to 512), the first strlen(p) from p */
static void body(struct tar *t, const char *p, size_t size)
{
    memset(t->data + t->len, 0, (size + 511) / 512 * 512);
    memcpy(t->data + t->len, p, strlen(p) < size ? strlen(p) : size);
    t->len += (size + 511) / 512 * 512;
}

static void end(struct tar *t)
{
    memset(t->data + t->len, 0, 1024);
    t->len += 1024;
}

struct mem {
    const unsigned char *p;
    size_t n, at;
};

static long mem_read(void *arg, void *buf, size_t n)
{
    struct mem *m = arg;
    size_t k = m->n - m->at < n ? m->n - m->at : n;
    memcpy(buf, m->p + m->at, k);
    m->at += k;
    return (long)k;
}

static int mem_skip(void *arg, uint64_t n)
{
    struct mem *m = arg;
    if (n > m->n - m->at)
        return -1;
    m->at += (size_t)n;
    return 0;
}

struct seen {
    char names[8][RUN_TAR_NAME_MAX];
    uint64_t offsets[8], sizes[8];
    int n;
    const char *stop_at;
};

static int record(void *arg, const char *name, uint64_t offset, uint64_t size,
                  struct mf_err *err)
{
    (void)err;
    struct seen *s = arg;
    if (s->n < 8) {
        snprintf(s->names[s->n], RUN_TAR_NAME_MAX, "%s", name);
        s->offsets[s->n] = offset;
        s->sizes[s->n] = size;
    }
    s->n++;
    return s->stop_at && !strcmp(name, s->stop_at) ? 1 : 0;
}

static int walk(const struct tar *t, size_t len, struct seen *s, struct mf_err *err)
{
    struct mem m = {t->data, len, 0};
    struct run_tar_io io = {mem_read, mem_skip, &m};
    return run_tar_walk(&io, "test.tar", record, s, err);
}

static void test_tar_entries(void **state)
{
    (void)state;
    static struct tar t;
    t.len = 0;
    header(&t, "./models/", NULL, '5', 0, 0);
    header(&t, "models/model.gguf", NULL, '0', 5, 0);
    body(&t, "GGUF!", 5);
    header(&t, "x.gguf", "adapters", '0', 3, 0);      /* ustar prefix */
    body(&t, "abc", 3);
    header(&t, "big.bin", NULL, '0', 600, 1);        /* base-256 size */
    body(&t, "", 600);
    header(&t, "link", NULL, '2', 0, 0);             /* symlinks are not files */
    char pax[] = "32 path=adapters/long-name.gguf\n12 size=700\n";
    header(&t, "PaxHeader/x", NULL, 'x', strlen(pax), 0);
    body(&t, pax, strlen(pax));
    header(&t, "short", NULL, '0', 0, 0);            /* pax size wins over 0 */
    body(&t, "", 700);
    char longname[] = "etc/mfc/a-gnu-long-name-that-does-not-fit-in-one-hundred-bytes-of-the-ustar-name-field-at-all.yaml";
    header(&t, "././@LongLink", NULL, 'L', strlen(longname) + 1, 0);
    body(&t, longname, strlen(longname) + 1); /* the NUL comes from the padding */
    header(&t, "trunc", NULL, '0', 1, 0);
    body(&t, "y", 1);
    end(&t);
    struct seen s = {0};
    struct mf_err err = {0};
    assert_int_equal(walk(&t, t.len, &s, &err), 0);
    assert_int_equal(s.n, 5);
    assert_string_equal(s.names[0], "models/model.gguf");
    assert_int_equal(s.offsets[0], 1024);
    assert_int_equal(s.sizes[0], 5);
    assert_memory_equal(t.data + s.offsets[0], "GGUF!", 5);
    assert_string_equal(s.names[1], "adapters/x.gguf");
    assert_memory_equal(t.data + s.offsets[1], "abc", 3);
    assert_string_equal(s.names[2], "big.bin");
    assert_int_equal(s.sizes[2], 600);
    assert_string_equal(s.names[3], "adapters/long-name.gguf");
    assert_int_equal(s.sizes[3], 700);
    assert_string_equal(s.names[4], longname);

    /* the callback stops the walk at an entry, its data next */
    struct seen s2 = {.stop_at = "adapters/x.gguf"};
    assert_int_equal(walk(&t, t.len, &s2, &err), 1);
    assert_int_equal(s2.n, 2);
}

static void test_tar_malformed(void **state)
{
    (void)state;
    static struct tar t;
    struct mf_err err = {0};
    struct seen s = {0};
    t.len = 0;
    header(&t, "a", NULL, '0', 100, 0);
    body(&t, "x", 100);
    end(&t);
    /* data cut short */
    assert_int_equal(walk(&t, 600, &s, &err), MF_EFORMAT);
    assert_non_null(strstr(err.msg, "test.tar"));
    /* a header cut short */
    assert_int_equal(walk(&t, 100, &s, &err), MF_EFORMAT);
    /* a bad checksum */
    t.data[0] = 'b';
    assert_int_equal(walk(&t, t.len, &s, &err), MF_EFORMAT);
    assert_non_null(strstr(err.msg, "checksum"));
    /* a malformed pax record */
    t.len = 0;
    char pax[] = "99 path=x\n";
    header(&t, "p", NULL, 'x', strlen(pax), 0);
    body(&t, pax, strlen(pax));
    header(&t, "a", NULL, '0', 0, 0);
    end(&t);
    assert_int_equal(walk(&t, t.len, &s, &err), MF_EFORMAT);
    assert_non_null(strstr(err.msg, "pax"));
    /* a size field that is not a number */
    t.len = 0;
    header(&t, "a", NULL, '0', 0, 0);
    memcpy(t.data + 124, "12x", 3);
    memset(t.data + 148, ' ', 8);
    unsigned sum = 0;
    for (int i = 0; i < 512; i++)
        sum += t.data[i];
    snprintf((char *)t.data + 148, 8, "%06o", sum);
    end(&t);
    assert_int_equal(walk(&t, t.len, &s, &err), MF_EFORMAT);
}

/* ---- NDJSON ---- */

struct text {
    char buf[256];
    size_t len;
    int calls;
};

static void collect(void *arg, const char *p, size_t n)
{
    struct text *t = arg;
    memcpy(t->buf + t->len, p, n);
    t->len += n;
    t->calls++;
}

static void test_ndjson_pieces(void **state)
{
    (void)state;
    const char *stream =
        "{\"message\":{\"role\":\"assistant\",\"content\":\"Hel\"},\"done\":false}\n"
        "{\"message\":{\"role\":\"assistant\",\"content\":\"lo\\u0000!\"},\"done\":false}\r\n"
        "\n"
        "{\"message\":{\"role\":\"assistant\",\"content\":\"\"},\"done\":true,"
        "\"done_reason\":\"stop\",\"prompt_eval_count\":7,\"eval_count\":3,\"eval_duration\":1500}\n"
        "{\"ignored\":1}\n";
    size_t n = strlen(stream);
    for (size_t piece = 1; piece <= n; piece += (piece < 8 ? 1 : 37)) {
        struct text t = {0};
        struct run_ndjson p;
        struct mf_err err = {0};
        run_ndjson_init(&p, collect, &t);
        int rc = 0;
        for (size_t at = 0; at < n && rc == 0; at += piece)
            rc = run_ndjson_feed(&p, stream + at, n - at < piece ? n - at : piece, &err);
        assert_int_equal(rc, 1);
        assert_int_equal(t.len, 7);
        assert_memory_equal(t.buf, "Hello\0!", 7);
        assert_int_equal(p.reply.len, 7);
        assert_int_equal(p.st.prompt_eval_count, 7);
        assert_int_equal(p.st.eval_count, 3);
        assert_int_equal(p.st.eval_duration, 1500);
        assert_string_equal(p.st.done_reason, "stop");
        run_ndjson_free(&p);
    }
}

static void test_ndjson_errors(void **state)
{
    (void)state;
    struct text t = {0};
    struct run_ndjson p;
    struct mf_err err = {0};
    run_ndjson_init(&p, collect, &t);
    const char *e = "{\"message\":{\"content\":\"a\"}}\n{\"error\":\"model 'x' not found\"}\n";
    assert_int_equal(run_ndjson_feed(&p, e, strlen(e), &err), MF_ENET);
    assert_non_null(strstr(err.msg, "model 'x' not found"));
    assert_int_equal(t.len, 1);
    run_ndjson_free(&p);

    run_ndjson_init(&p, collect, &t);
    const char *bad = "{\"message\":\n";
    assert_int_equal(run_ndjson_feed(&p, bad, strlen(bad), &err), MF_ENET);
    run_ndjson_free(&p);

    run_ndjson_init(&p, NULL, NULL);
    const char *arr = "[1,2]\n";
    assert_int_equal(run_ndjson_feed(&p, arr, strlen(arr), &err), MF_ENET);
    run_ndjson_free(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tar_entries),
        cmocka_unit_test(test_tar_malformed),
        cmocka_unit_test(test_ndjson_pieces),
        cmocka_unit_test(test_ndjson_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
