/*
 * test_tokenizer_vocab.c: llama.cpp's tokenizer test vectors against
 * runtime/tokenizer, one test per vocabulary in $MFC_SHARED/data/vocab.
 *
 * For ggml-vocab-NAME.gguf, every string of NAME.gguf.inp must encode (no
 * special tokens added, special tokens not parsed: llama.cpp's
 * test-tokenizer-0) to exactly the ids on its line of NAME.gguf.out, and
 * decode back to itself (SPM with its prefix space stripped), both at once
 * and through the streaming detokenizer one id at a time. llama-bpe has
 * no vocabulary GGUF: it is built from llama3-tokenizer.json twice, once
 * straight into a struct tok_desc with jansson, once into a GGUF by
 * tests/tools/mkmodel and loaded with tok_load_gguf. Each test prints its
 * counts as a TAP comment. Without $MFC_SHARED the tests skip, saying why.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "common/buf.h"
#include "common/file.h"
#include "common/gguf.h"
#include "common/json.h"
#include "common/num.h"
#include "common/utf8.h"
#include "text/tokenizer.h"

#define SEP "\n__ggml_vocab_test__\n"
#define MAX_CASES 256
#define MAX_FILE ((size_t)64 << 20)

/* One vocabulary's test vectors. */
struct vectors {
    char *inp;                 /* owned: the .inp file; cases point into it */
    char *out;                 /* owned: the .out file */
    const char *text[MAX_CASES]; /* borrowed from inp: each case's text */
    size_t len[MAX_CASES];     /* bytes of each text */
    char *ids[MAX_CASES];      /* borrowed from out: each case's id line (NUL-terminated) */
    size_t n;                  /* cases */
};

static const char *shared_dir(void)
{
    const char *s = getenv("MFC_SHARED");
    return s && s[0] ? s : NULL;
}

/* Returns 1 and fills path when $MFC_SHARED/data/vocab/<file> exists. */
static int vocab_path(char *path, size_t cap, const char *file)
{
    const char *dir = shared_dir();
    if (!dir)
        return 0;
    snprintf(path, cap, "%s/data/vocab/%s", dir, file);
    return access(path, R_OK) == 0;
}

static void skip_without(const char *file)
{
    char path[4096];
    if (!vocab_path(path, sizeof path, file)) {
        print_message("# skipped: %s not found (set MFC_SHARED to the shared/ directory)\n",
                      shared_dir() ? path : "$MFC_SHARED");
        skip();
    }
}

static void load_vectors(const char *name, struct vectors *v)
{
    char path[4096], file[256];
    size_t n_inp, n_out;
    struct mf_err err;
    memset(v, 0, sizeof *v);
    snprintf(file, sizeof file, "ggml-vocab-%s.gguf.inp", name);
    assert_true(vocab_path(path, sizeof path, file));
    assert_int_equal(mf_file_read(path, MAX_FILE, &v->inp, &n_inp, &err), 0);
    snprintf(file, sizeof file, "ggml-vocab-%s.gguf.out", name);
    assert_true(vocab_path(path, sizeof path, file));
    assert_int_equal(mf_file_read(path, MAX_FILE, &v->out, &n_out, &err), 0);
    /* .inp: every case is followed by the separator, the last one too */
    for (char *p = v->inp, *end = v->inp + n_inp; p < end;) {
        char *s = memmem(p, (size_t)(end - p), SEP, strlen(SEP));
        if (!s)
            break;
        assert_true(v->n < MAX_CASES);
        v->text[v->n] = p;
        v->len[v->n++] = (size_t)(s - p);
        p = s + strlen(SEP);
    }
    size_t lines = 0;
    for (char *p = v->out; *p && lines < MAX_CASES;) {
        char *nl = strchr(p, '\n');
        if (nl)
            *nl = '\0';
        v->ids[lines++] = p;
        p = nl ? nl + 1 : p + strlen(p);
    }
    assert_int_equal(lines, v->n);
}

static void free_vectors(struct vectors *v)
{
    free(v->inp);
    free(v->out);
}

/* Parses " 1 2 3" into ids; returns the count. */
static size_t parse_ids(const char *line, int32_t *ids, size_t cap)
{
    size_t n = 0;
    char buf[32];
    for (const char *p = line; *p;) {
        while (*p == ' ')
            p++;
        size_t k = strcspn(p, " ");
        if (k == 0)
            break;
        assert_true(k < sizeof buf && n < cap);
        memcpy(buf, p, k);
        buf[k] = '\0';
        int64_t v;
        assert_int_equal(mf_num_parse_i64(buf, &v), 0);
        ids[n++] = (int32_t)v;
        p += k;
    }
    return n;
}

static void print_ids(const char *what, const int32_t *ids, size_t n)
{
    char line[2048];
    size_t k = 0;
    for (size_t i = 0; i < n && k + 16 < sizeof line; i++)
        k += (size_t)snprintf(line + k, sizeof line - k, " %d", (int)ids[i]);
    line[k] = '\0';
    print_message("#   %s:%s\n", what, line);
}

/* The text the streaming detokenizer makes of ids (caller frees); every
 * prefix it hands out must be valid UTF-8. */
static char *stream_ids(const struct tok *t, const int32_t *ids, size_t n, unsigned flags)
{
    struct tok_stream st;
    struct mf_buf b;
    struct mf_err err;
    mf_buf_init(&b, 1 << 20);
    tok_stream_init(&st, t, flags);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(tok_stream_push(&st, ids[i], &b, &err), 0);
        assert_true(mf_utf8_valid(b.data ? b.data : "", b.len, NULL));
    }
    assert_int_equal(tok_stream_flush(&st, &b, &err), 0);
    return mf_buf_take(&b);
}

/* Runs every case; prints and checks the counts. */
static void check_vectors(const struct tok *t, const char *name)
{
    struct vectors v;
    load_vectors(name, &v);
    size_t same = 0, round = 0;
    static int32_t want[4096];
    for (size_t i = 0; i < v.n; i++) {
        struct tok_ids ids;
        struct mf_err err;
        struct mf_buf back;
        tok_ids_init(&ids, 1 << 20);
        mf_buf_init(&back, 1 << 20);
        assert_int_equal(tok_encode(t, v.text[i], v.len[i], 0, &ids, &err), 0);
        size_t n = parse_ids(v.ids[i], want, 4096);
        if (n == ids.n && (n == 0 || memcmp(want, ids.v, n * sizeof *want) == 0)) {
            same++;
        } else {
            print_message("# %s case %zu differs: '%.*s'\n", name, i, (int)v.len[i], v.text[i]);
            print_ids("want", want, n);
            print_ids("got ", ids.v, ids.n);
        }
        unsigned df = tok_model(t) == TOK_MODEL_SPM ? TOK_STRIP_SPACE : 0;
        assert_int_equal(tok_decode(t, ids.v, ids.n, df, &back, &err), 0);
        char *streamed = stream_ids(t, ids.v, ids.n, df);
        if (back.len == v.len[i] && memcmp(back.data ? back.data : "", v.text[i], back.len) == 0 &&
            strlen(streamed) == v.len[i] && memcmp(streamed, v.text[i], v.len[i]) == 0)
            round++;
        else
            print_message("# %s case %zu does not round-trip: '%.*s' -> '%s'\n", name, i,
                          (int)v.len[i], v.text[i], back.data ? back.data : "");
        free(streamed);
        tok_ids_free(&ids);
        mf_buf_free(&back);
    }
    print_message("# vocab %s: %zu/%zu identical to llama.cpp, %zu/%zu round-trip\n", name,
                  same, v.n, round, v.n);
    assert_int_equal(same, v.n);
    assert_int_equal(round, v.n);
    free_vectors(&v);
}

/* Opens ggml-vocab-NAME.gguf (skipping without it). */
static struct tok *open_vocab(const char *name)
{
    char file[256], path[4096];
    snprintf(file, sizeof file, "ggml-vocab-%s.gguf", name);
    skip_without(file);
    assert_true(vocab_path(path, sizeof path, file));
    struct gguf_file *gf;
    struct tok *t;
    struct mf_err err;
    assert_int_equal(gguf_open(path, &gf, &err), 0);
    int rc = tok_load_gguf(gf, &t, &err);
    if (rc)
        print_message("# %s\n", err.msg);
    assert_int_equal(rc, 0);
    gguf_close(gf);
    return t;
}

static void check_gguf_vocab(const char *name)
{
    struct tok *t = open_vocab(name); /* the GGUF is closed: the tokenizer keeps nothing of it */
    check_vectors(t, name);
    tok_free(t);
}

/* One test per vocabulary GGUF, named after it; the state is the name. */
static void test_vocab(void **state)
{
    check_gguf_vocab(*state);
}

#define VOCAB_TEST(name) {"vocab " name, test_vocab, NULL, NULL, name}

static void expect_ids(const struct tok *t, const char *text, unsigned flags, const int32_t *want,
                       size_t n)
{
    struct tok_ids ids;
    struct mf_err err;
    tok_ids_init(&ids, 4096);
    assert_int_equal(tok_encode(t, text, strlen(text), flags, &ids, &err), 0);
    if (ids.n != n || (n && memcmp(ids.v, want, n * sizeof *want) != 0)) {
        print_message("# '%s':\n", text);
        print_ids("want", want, n);
        print_ids("got ", ids.v, ids.n);
    }
    assert_int_equal(ids.n, n);
    if (n)
        assert_memory_equal(ids.v, want, n * sizeof *want);
    tok_ids_free(&ids);
}

#define EXPECT(t, text, flags, ...)                                                               \
    do {                                                                                          \
        const int32_t w_[] = {__VA_ARGS__};                                                       \
        expect_ids(t, text, flags, w_, sizeof w_ / sizeof w_[0]);                                 \
    } while (0)

/* Control tokens only with parse_special; BOS per metadata; phi-3's added
 * tokens eat the whitespace to their right. Expected ids are llama.cpp's
 * (node-llama-cpp 3.21.1). */
static void test_special_tokens(void **state)
{
    struct tok *t = open_vocab("llama-spm");
    EXPECT(t, "<s>Hello", 0, 529, 29879, 29958, 10994);
    EXPECT(t, "<s>Hello", TOK_PARSE_SPECIAL, 1, 15043);
    EXPECT(t, "Hello</s>", TOK_PARSE_SPECIAL | TOK_ADD_SPECIAL, 1, 15043, 2);
    EXPECT(t, "Hello", TOK_ADD_SPECIAL | TOK_EOS, 1, 15043, 2);
    assert_true(tok_is_eog(t, 2));
    tok_free(t);
    t = open_vocab("phi-3");
    EXPECT(t, "<|user|>\nHi<|end|>\n<|assistant|>", TOK_PARSE_SPECIAL, 32010, 6324, 32007, 32001);
    EXPECT(t, "Hello</s>", 0, 15043, 829, 29879, 29958); /* "</s>" is EOG, hence control */
    assert_true(tok_is_eog(t, 32007));                    /* <|end|> */
    assert_int_equal(tok_special_id(t, TOK_ID_EOT), 32007);
    tok_free(t);
}

/* llama3-tokenizer.json holds GGUF key names: tokens, token_type, merges,
 * pre, model and the special ids. */
static struct tok_str *json_strings(json_t *arr, uint32_t *n)
{
    assert_true(json_is_array(arr));
    *n = (uint32_t)json_array_size(arr);
    struct tok_str *s = calloc(*n + 1, sizeof *s);
    assert_non_null(s);
    for (uint32_t i = 0; i < *n; i++) {
        json_t *e = json_array_get(arr, i);
        s[i].p = json_string_value(e);
        s[i].len = json_string_length(e);
    }
    return s;
}

static void test_llama_bpe_json(void **state)
{
    skip_without("llama3-tokenizer.json");
    char path[4096], *text;
    size_t len;
    struct mf_err err;
    assert_true(vocab_path(path, sizeof path, "llama3-tokenizer.json"));
    assert_int_equal(mf_file_read(path, MAX_FILE, &text, &len, &err), 0);
    json_t *js = mf_json_parse(text, len, path, &err);
    free(text);
    assert_non_null(js);
    struct tok_desc d;
    tok_desc_init(&d);
    d.model = json_string_value(json_object_get(js, "tokenizer.ggml.model"));
    d.pre = json_string_value(json_object_get(js, "tokenizer.ggml.pre"));
    struct tok_str *tokens = json_strings(json_object_get(js, "tokenizer.ggml.tokens"),
                                          &d.n_tokens);
    struct tok_str *merges = json_strings(json_object_get(js, "tokenizer.ggml.merges"),
                                          &d.n_merges);
    json_t *types = json_object_get(js, "tokenizer.ggml.token_type");
    d.n_types = (uint32_t)json_array_size(types);
    int32_t *tv = calloc(d.n_types + 1, sizeof *tv);
    assert_non_null(tv);
    for (uint32_t i = 0; i < d.n_types; i++)
        tv[i] = (int32_t)json_integer_value(json_array_get(types, i));
    d.tokens = tokens;
    d.merges = merges;
    d.types = tv;
    d.special[TOK_ID_BOS] = (int32_t)json_integer_value(
        json_object_get(js, "tokenizer.ggml.bos_token_id"));
    d.special[TOK_ID_EOS] = (int32_t)json_integer_value(
        json_object_get(js, "tokenizer.ggml.eos_token_id"));
    struct tok *t;
    int rc = tok_new(&d, &t, &err);
    if (rc)
        print_message("# %s\n", err.msg);
    assert_int_equal(rc, 0);
    free(tokens);
    free(merges);
    free(tv);
    json_decref(js);
    assert_int_equal(tok_adds_bos(t), 1); /* llama-bpe defaults to BOS, as in llama.cpp */
    check_vectors(t, "llama-bpe");
    tok_free(t);
}

/* Runs mkmodel to write a Llama 3 vocabulary GGUF (smallest model shape). */
static int run_mkmodel(const char *mkmodel, const char *json, const char *out)
{
    pid_t pid = fork();
    if (pid == 0) {
        execl(mkmodel, mkmodel, "-o", out, "--vocab-json", json, "--layers", "1", "--embd",
              "32", "--ff", "32", "--heads", "1", "--kv-heads", "1", "--type", "f16", "--tied",
              (char *)NULL);
        _exit(127);
    }
    int status;
    if (pid < 0 || waitpid(pid, &status, 0) != pid)
        return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static void test_llama_bpe_gguf(void **state)
{
    skip_without("llama3-tokenizer.json");
    const char *bdir = getenv("MFC_BUILDDIR");
    char mk[4096], json[4096], dir[] = "/tmp/mfc-tok-XXXXXX", out[4096];
    snprintf(mk, sizeof mk, "%s/tests/tools/mkmodel", bdir ? bdir : ".");
    if (access(mk, X_OK) != 0) {
        print_message("# skipped: %s not built\n", mk);
        skip();
    }
    assert_true(vocab_path(json, sizeof json, "llama3-tokenizer.json"));
    assert_non_null(mkdtemp(dir));
    snprintf(out, sizeof out, "%s/llama-bpe.gguf", dir);
    assert_int_equal(run_mkmodel(mk, json, out), 0);
    struct gguf_file *gf;
    struct tok *t;
    struct mf_err err;
    assert_int_equal(gguf_open(out, &gf, &err), 0);
    int rc = tok_load_gguf(gf, &t, &err);
    if (rc)
        print_message("# %s\n", err.msg);
    assert_int_equal(rc, 0);
    gguf_close(gf);
    unlink(out);
    rmdir(dir);
    assert_string_equal(tok_pre(t), "llama-bpe");
    check_vectors(t, "llama-bpe");
    tok_free(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        VOCAB_TEST("llama-spm"),
        VOCAB_TEST("phi-3"),
        VOCAB_TEST("gpt-2"),
        VOCAB_TEST("deepseek-llm"),
        VOCAB_TEST("deepseek-coder"),
        VOCAB_TEST("falcon"),
        VOCAB_TEST("starcoder"),
        VOCAB_TEST("mpt"),
        VOCAB_TEST("refact"),
        cmocka_unit_test(test_llama_bpe_json),
        cmocka_unit_test(test_llama_bpe_gguf),
        cmocka_unit_test(test_special_tokens),
    };
    return cmocka_run_group_tests_name("tokenizer_vocab", tests, NULL, NULL);
}
