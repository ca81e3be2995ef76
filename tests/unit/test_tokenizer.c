/*
 * test_tokenizer.c: unit tests for runtime/tokenizer on small vocabularies
 * built in the test: SPM merges by score and byte fallback, BPE merges by
 * rank over the byte-level alphabet, special tokens (parse_special on/off,
 * user-defined always, BOS/EOS flags), decoding, the streaming detokenizer
 * (characters split across tokens, invalid bytes, limits), malformed
 * descriptions and GGUF metadata, invalid UTF-8 and long inputs.
 * The vocabularies llama.cpp tests with are in test_tokenizer_vocab.c.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/buf.h"
#include "common/gguf.h"
#include "common/utf8.h"
#include "text/tokenizer.h"

#define SP "\xe2\x96\x81" /* U+2581, SPM's space */
#define MAXV 600          /* tokens in a test vocabulary */

/* A vocabulary under construction: texts, scores, types, merges. */
struct vocab {
    struct tok_str tok[MAXV];
    char text[MAXV][32];
    float score[MAXV];
    int32_t type[MAXV];
    uint32_t n;
    struct tok_str merge[64];
    uint32_t n_merges;
    struct tok_desc d;
};

static int32_t add(struct vocab *v, const char *s, float score, int32_t type)
{
    assert_true(v->n < MAXV && strlen(s) < sizeof v->text[0]);
    snprintf(v->text[v->n], sizeof v->text[0], "%s", s);
    v->tok[v->n] = (struct tok_str){v->text[v->n], strlen(s)};
    v->score[v->n] = score;
    v->type[v->n] = type;
    return (int32_t)v->n++;
}

static void add_merge(struct vocab *v, const char *m)
{
    v->merge[v->n_merges++] = (struct tok_str){m, strlen(m)};
}

static void finish(struct vocab *v, const char *model, const char *pre)
{
    tok_desc_init(&v->d);
    v->d.model = model;
    v->d.pre = pre;
    v->d.tokens = v->tok;
    v->d.n_tokens = v->n;
    v->d.scores = v->score;
    v->d.n_scores = v->n;
    v->d.types = v->type;
    v->d.n_types = v->n;
    v->d.merges = v->merge;
    v->d.n_merges = v->n_merges;
}

/* SPM: <unk> <s> </s>, 256 byte tokens, then pieces with scores. */
enum { S_UNK, S_BOS, S_EOS, S_BYTE0 };
enum { S_SP = 259, S_A, S_B, S_C, S_SPA, S_AB, S_SPAB, S_USER, S_CTRL, S_N };

static struct vocab *spm_vocab(void)
{
    struct vocab *v = calloc(1, sizeof *v);
    assert_non_null(v);
    add(v, "<unk>", 0, TOK_TYPE_UNKNOWN);
    add(v, "<s>", 0, TOK_TYPE_CONTROL);
    add(v, "</s>", 0, TOK_TYPE_CONTROL);
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        add(v, name, 0, TOK_TYPE_BYTE);
    }
    add(v, SP, -3, TOK_TYPE_NORMAL);
    add(v, "a", -4, TOK_TYPE_NORMAL);
    add(v, "b", -4, TOK_TYPE_NORMAL);
    add(v, "c", -4, TOK_TYPE_NORMAL);
    add(v, SP "a", -1, TOK_TYPE_NORMAL);
    add(v, "ab", -2, TOK_TYPE_NORMAL);
    add(v, SP "ab", -0.5f, TOK_TYPE_NORMAL);
    add(v, "<|user|>", 0, TOK_TYPE_USER_DEFINED);
    add(v, "<|ctl|>", 0, TOK_TYPE_CONTROL);
    assert_int_equal(v->n, S_N);
    finish(v, "llama", NULL);
    v->d.special[TOK_ID_BOS] = S_BOS;
    v->d.special[TOK_ID_EOS] = S_EOS;
    v->d.special[TOK_ID_UNK] = S_UNK;
    return v;
}

/* GPT-2's byte-to-unicode map, written independently of the tokenizer's. */
static uint32_t gpt2_cp(unsigned b)
{
    static uint32_t map[256];
    if (!map['!']) {
        uint32_t n = 0;
        for (unsigned i = 0; i < 256; i++)
            map[i] = (i >= '!' && i <= '~') || (i >= 0xA1 && i <= 0xAC) || i >= 0xAE ? i
                                                                                 : 256 + n++;
    }
    return map[b];
}

/* BPE: the 256 byte-level characters (id = byte), then merged tokens. */
enum { B_GT = 256, B_HE, B_GTHE, B_AA, B_BC, B_AB, B_ENDTEXT, B_USER, B_N };

static struct vocab *bpe_vocab(int bc_first)
{
    struct vocab *v = calloc(1, sizeof *v);
    assert_non_null(v);
    for (unsigned b = 0; b < 256; b++) {
        char u[5] = {0};
        assert_true(mf_utf8_encode(gpt2_cp(b), u) > 0);
        add(v, u, 0, TOK_TYPE_NORMAL);
    }
    add(v, "Ġt", 0, TOK_TYPE_NORMAL);
    add(v, "he", 0, TOK_TYPE_NORMAL);
    add(v, "Ġthe", 0, TOK_TYPE_NORMAL);
    add(v, "aa", 0, TOK_TYPE_NORMAL);
    add(v, "bc", 0, TOK_TYPE_NORMAL);
    add(v, "ab", 0, TOK_TYPE_NORMAL);
    add(v, "<|endoftext|>", 0, TOK_TYPE_CONTROL);
    add(v, "<|user|>", 0, TOK_TYPE_USER_DEFINED);
    assert_int_equal(v->n, B_N);
    add_merge(v, "Ġ t");
    add_merge(v, "h e");
    add_merge(v, "Ġt he");
    add_merge(v, "a a");
    add_merge(v, bc_first ? "b c" : "a b");
    add_merge(v, bc_first ? "a b" : "b c");
    finish(v, "gpt2", "gpt-2");
    v->d.scores = NULL;
    v->d.n_scores = 0;
    v->d.special[TOK_ID_BOS] = B_ENDTEXT;
    v->d.special[TOK_ID_EOS] = B_ENDTEXT;
    return v;
}

static struct tok *build(struct vocab *v)
{
    struct tok *t;
    struct mf_err err;
    int rc = tok_new(&v->d, &t, &err);
    if (rc)
        print_message("# %s\n", err.msg);
    assert_int_equal(rc, 0);
    return t;
}

/* Encodes s and checks the ids against want[0..n). */
#define ENCODES(t, s, flags, ...)                                                                 \
    do {                                                                                          \
        const int32_t want_[] = {__VA_ARGS__};                                                    \
        check_ids(t, s, flags, want_, sizeof want_ / sizeof want_[0]);                            \
    } while (0)

static void check_ids(const struct tok *t, const char *s, unsigned flags, const int32_t *want,
                      size_t n)
{
    struct tok_ids ids;
    struct mf_err err;
    tok_ids_init(&ids, 1 << 20);
    assert_int_equal(tok_encode(t, s, strlen(s), flags, &ids, &err), 0);
    if (ids.n != n || (n && memcmp(ids.v, want, n * sizeof *want) != 0)) {
        print_message("# '%s' gave", s);
        for (size_t i = 0; i < ids.n; i++)
            print_message(" %d", (int)ids.v[i]);
        print_message("\n");
    }
    assert_int_equal(ids.n, n);
    if (n)
        assert_memory_equal(ids.v, want, n * sizeof *want);
    tok_ids_free(&ids);
}

static void check_decode(const struct tok *t, const int32_t *ids, size_t n, unsigned flags,
                         const char *want)
{
    struct mf_buf b;
    struct mf_err err;
    mf_buf_init(&b, 1 << 20);
    assert_int_equal(tok_decode(t, ids, n, flags, &b, &err), 0);
    assert_int_equal(b.len, strlen(want));
    if (b.len)
        assert_memory_equal(b.data, want, b.len);
    mf_buf_free(&b);
}

/* ---- SPM ---- */

static void test_spm_merges_by_score(void **state)
{
    struct vocab *v = spm_vocab();
    struct tok *t = build(v);
    assert_int_equal(tok_model(t), TOK_MODEL_SPM);
    /* "▁ab▁c": ▁a (-1) first, then ▁ab (-0.5); "▁c" is no token */
    ENCODES(t, "ab c", 0, S_SPAB, S_SP, S_C);
    /* without the leading "▁", "ab" (-2) is the only merge */
    ENCODES(t, "ab", 0, S_SPAB);
    ENCODES(t, "", 0);
    ENCODES(t, " ", 0, S_SP, S_SP);
    tok_free(t);
    v->d.add_space_prefix = 0;
    t = build(v);
    ENCODES(t, "ab", 0, S_AB);
    ENCODES(t, "cab", 0, S_C, S_AB);
    tok_free(t);
    free(v);
}

static void test_spm_byte_fallback_and_decode(void **state)
{
    struct vocab *v = spm_vocab();
    struct tok *t = build(v);
    /* "é" and "\n" are no tokens: their bytes are */
    ENCODES(t, "a\xc3\xa9\n", 0, S_SPA, S_BYTE0 + 0xC3, S_BYTE0 + 0xA9, S_BYTE0 + '\n');
    /* invalid UTF-8 goes through the byte tokens too, and comes back */
    ENCODES(t, "\xff\x80", 0, S_SP, S_BYTE0 + 0xFF, S_BYTE0 + 0x80);
    const int32_t ids[] = {S_SPAB, S_SP, S_C, S_BYTE0 + 0xC3, S_BYTE0 + 0xA9};
    check_decode(t, ids, 5, 0, " ab c\xc3\xa9");
    check_decode(t, ids, 5, TOK_STRIP_SPACE, "ab c\xc3\xa9");
    tok_free(t);
    free(v);
}

static void test_spm_special_tokens(void **state)
{
    struct vocab *v = spm_vocab();
    struct tok *t = build(v);
    assert_int_equal(tok_adds_bos(t), 1);
    assert_int_equal(tok_adds_eos(t), 0);
    ENCODES(t, "ab", TOK_ADD_SPECIAL, S_BOS, S_SPAB);
    ENCODES(t, "ab", TOK_ADD_SPECIAL | TOK_NO_BOS | TOK_EOS, S_SPAB, S_EOS);
    ENCODES(t, "", TOK_ADD_SPECIAL, S_BOS);
    /* control tokens only with parse_special; a space goes after each */
    ENCODES(t, "<s>ab", TOK_PARSE_SPECIAL, S_BOS, S_SPAB);
    ENCODES(t, "<s>", 0, S_SP, S_BYTE0 + '<', S_BYTE0 + 's', S_BYTE0 + '>');
    /* user-defined tokens always, as in llama.cpp and HF */
    ENCODES(t, "a<|user|>b", 0, S_SPA, S_USER, S_SP, S_B);
    ENCODES(t, "<|ctl|>", TOK_PARSE_SPECIAL, S_CTRL);
    const int32_t ids[] = {S_BOS, S_SPA, S_CTRL, S_USER};
    check_decode(t, ids, 4, 0, " a<|user|>");
    check_decode(t, ids, 4, TOK_RENDER_SPECIAL, "<s> a<|ctl|><|user|>");
    tok_free(t);
    free(v);
}

/* ---- BPE ---- */

static void test_bpe_merges_by_rank(void **state)
{
    struct vocab *v = bpe_vocab(1);
    struct tok *t = build(v);
    assert_string_equal(tok_pre(t), "gpt-2");
    /* "the" and " the" are separate pre-tokens (gpt-2 regex) */
    ENCODES(t, "the the", 0, 't', B_HE, B_GTHE);
    /* rank decides: b c (rank 4) before a b (rank 5) */
    ENCODES(t, "abc", 0, 'a', B_BC);
    /* one pair twice: the leftmost merges first */
    ENCODES(t, "aaa", 0, B_AA, 'a');
    tok_free(t);
    free(v);
    v = bpe_vocab(0);
    t = build(v);
    ENCODES(t, "abc", 0, B_AB, 'c');
    tok_free(t);
    free(v);
}

static void test_bpe_bytes_and_decode(void **state)
{
    struct vocab *v = bpe_vocab(1);
    struct tok *t = build(v);
    /* "€" is three byte-level tokens, each one byte */
    ENCODES(t, "\xe2\x82\xac", 0, 0xE2, 0x82, 0xAC);
    /* an invalid byte becomes U+FFFD before pre-tokenizing (llama.cpp) */
    ENCODES(t, "a\xff", 0, 'a', 0xEF, 0xBF, 0xBD);
    ENCODES(t, "\tthe\n", 0, '\t', 't', B_HE, '\n');
    const int32_t ids[] = {'t', B_HE, B_GTHE, 0xE2, 0x82, 0xAC, '\n', B_ENDTEXT, B_USER};
    check_decode(t, ids, 9, 0, "the the\xe2\x82\xac\n<|user|>");
    check_decode(t, ids, 9, TOK_RENDER_SPECIAL, "the the\xe2\x82\xac\n<|endoftext|><|user|>");
    assert_int_equal(tok_adds_bos(t), 0); /* gpt-2 adds no BOS by default */
    ENCODES(t, "the", TOK_ADD_SPECIAL, 't', B_HE);
    ENCODES(t, "the<|endoftext|>", TOK_PARSE_SPECIAL | TOK_BOS, B_ENDTEXT, 't', B_HE, B_ENDTEXT);
    ENCODES(t, "<|user|>the", 0, B_USER, 't', B_HE);
    tok_free(t);
    free(v);
}

static void test_bpe_llama3_ignore_merges_and_default_bos(void **state)
{
    struct vocab *v = bpe_vocab(1);
    add(v, "thee", 0, TOK_TYPE_NORMAL); /* a whole word with no merge path */
    finish(v, "gpt2", "llama-bpe");
    v->d.scores = NULL;
    v->d.n_scores = 0;
    v->d.special[TOK_ID_BOS] = B_ENDTEXT;
    struct tok *t = build(v);
    assert_int_equal(tok_adds_bos(t), 1);
    ENCODES(t, "thee", 0, B_N);            /* ignore_merges: the word is a token */
    ENCODES(t, "the", TOK_ADD_SPECIAL, B_ENDTEXT, 't', B_HE);
    /* \p{N}{1,3}: digits in threes */
    ENCODES(t, "12345", 0, '1', '2', '3', '4', '5');
    tok_free(t);
    free(v);
}

static void test_eog_and_facts(void **state)
{
    struct vocab *v = bpe_vocab(1);
    struct tok *t = build(v);
    assert_int_equal(tok_n_vocab(t), B_N);
    assert_true(tok_is_eog(t, B_ENDTEXT));
    assert_false(tok_is_eog(t, 'a'));
    assert_false(tok_is_eog(t, -1));
    assert_false(tok_is_eog(t, B_N));
    assert_int_equal(tok_special_id(t, TOK_ID_EOS), B_ENDTEXT);
    assert_int_equal(tok_special_id(t, TOK_ID_PAD), -1);
    assert_int_equal(tok_token_type(t, B_USER), TOK_TYPE_USER_DEFINED);
    assert_int_equal(tok_token_type(t, 99999), TOK_TYPE_UNDEFINED);
    size_t len;
    assert_string_equal(tok_token_text(t, B_GTHE, &len), "Ġthe");
    assert_int_equal(len, strlen("Ġthe"));
    assert_null(tok_token_text(t, -5, &len));
    assert_int_equal(tok_find(t, "he", 2), B_HE);
    assert_int_equal(tok_find(t, "zz", 2), -1);
    tok_free(t);
    free(v);
}

/* tok_same_vocab: a draft model's vocabulary against its model's; scores and
 * merges may differ, token meanings may not; the first difference named. */
static void test_same_vocab(void **state)
{
    struct mf_err err;
    struct vocab *a = spm_vocab(), *b = spm_vocab();
    struct tok *ta = build(a), *tb;
    b->score[S_A] = -9; /* another score: the same ids */
    tb = build(b);
    assert_int_equal(tok_same_vocab(ta, tb, &err), 0);
    tok_free(tb);
    snprintf(b->text[S_C], sizeof b->text[S_C], "d");
    tb = build(b);
    assert_int_equal(tok_same_vocab(ta, tb, &err), MF_EINVAL);
    assert_string_equal(err.msg, "token 262 is 'c' against 'd'");
    tok_free(tb);
    snprintf(b->text[S_C], sizeof b->text[S_C], "c");
    b->type[S_USER] = TOK_TYPE_CONTROL;
    tb = build(b);
    assert_int_equal(tok_same_vocab(ta, tb, &err), MF_EINVAL);
    assert_non_null(strstr(err.msg, "token 266 ('<|user|>') is of type 4 against 3"));
    tok_free(tb);
    b->type[S_USER] = TOK_TYPE_USER_DEFINED;
    b->d.special[TOK_ID_EOS] = S_CTRL;
    tb = build(b);
    assert_int_equal(tok_same_vocab(ta, tb, &err), MF_EINVAL);
    assert_string_equal(err.msg, "the EOS token is 2 against 267");
    tok_free(tb);
    struct vocab *c = bpe_vocab(1); /* another model and size */
    struct tok *tc = build(c);
    assert_int_equal(tok_same_vocab(ta, tc, &err), MF_EINVAL);
    assert_non_null(strstr(err.msg, "tokenizer models differ"));
    tok_free(tc);
    tok_free(ta);
    free(a);
    free(b);
    free(c);
}

/* ---- decoding errors and the streaming detokenizer ---- */

static void test_decode_rejects_out_of_range(void **state)
{
    struct vocab *v = bpe_vocab(1);
    struct tok *t = build(v);
    struct mf_buf b;
    struct mf_err err;
    mf_buf_init(&b, 1024);
    const int32_t ids[] = {'a', B_N, 'b'};
    assert_int_equal(tok_decode(t, ids, 3, 0, &b, &err), MF_ERANGE);
    assert_non_null(strstr(err.msg, "id 1 of 3"));
    assert_non_null(strstr(err.msg, "outside the vocabulary"));
    assert_string_equal(b.data, "a"); /* what came before stays */
    const char *p;
    size_t n;
    assert_int_equal(tok_piece(t, -1, 0, &p, &n, &err), MF_ERANGE);
    assert_int_equal(tok_piece(t, B_ENDTEXT, 0, &p, &n, &err), 0);
    assert_int_equal(n, 0);
    assert_int_equal(tok_piece(t, B_ENDTEXT, TOK_RENDER_SPECIAL, &p, &n, &err), 0);
    assert_int_equal(n, strlen("<|endoftext|>"));
    mf_buf_free(&b);
    tok_free(t);
    free(v);
}

/* Pushes ids one at a time; returns the text (caller frees). */
static char *stream(const struct tok *t, unsigned flags, const int32_t *ids, size_t n,
                    size_t *lens)
{
    struct tok_stream s;
    struct mf_buf b;
    struct mf_err err;
    tok_stream_init(&s, t, flags);
    mf_buf_init(&b, 1 << 20);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(tok_stream_push(&s, ids[i], &b, &err), 0);
        assert_true(mf_utf8_valid(b.data ? b.data : "", b.len, NULL));
        if (lens)
            lens[i] = b.len;
    }
    assert_int_equal(tok_stream_flush(&s, &b, &err), 0);
    return mf_buf_take(&b);
}

static void test_stream_holds_split_characters(void **state)
{
    struct vocab *v = bpe_vocab(1);
    struct tok *t = build(v);
    /* "a€b" as byte tokens: nothing of "€" shows until its last byte */
    const int32_t ids[] = {'a', 0xE2, 0x82, 0xAC, 'b'};
    size_t lens[5];
    char *s = stream(t, 0, ids, 5, lens);
    assert_string_equal(s, "a\xe2\x82\xac" "b");
    assert_int_equal(lens[0], 1);
    assert_int_equal(lens[1], 1);
    assert_int_equal(lens[2], 1);
    assert_int_equal(lens[3], 4);
    free(s);
    /* a 4-byte emoji, byte by byte */
    const int32_t emoji[] = {0xF0, 0x9F, 0xA6, 0x99};
    s = stream(t, 0, emoji, 4, lens);
    assert_string_equal(s, "\xf0\x9f\xa6\x99");
    assert_int_equal(lens[2], 0);
    free(s);
    /* broken and dangling sequences become U+FFFD, one per maximal subpart */
    const int32_t broken[] = {0xE2, 0x82, 'x', 0xFF, 0xC0, 0xED, 0xA0, 0xE2};
    s = stream(t, 0, broken, 8, NULL);
    assert_string_equal(s, "\xef\xbf\xbdx\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"
                           "\xef\xbf\xbd");
    free(s);
    tok_free(t);
    free(v);
}

static void test_stream_special_and_spm(void **state)
{
    struct vocab *v = spm_vocab();
    struct tok *t = build(v);
    /* SPM byte fallback across tokens; a skipped control token in between
     * does not break the character; TOK_STRIP_SPACE eats the prefix space */
    const int32_t ids[] = {S_SPA, S_BYTE0 + 0xC3, S_BOS, S_BYTE0 + 0xA9, S_CTRL};
    char *s = stream(t, TOK_STRIP_SPACE, ids, 5, NULL);
    assert_string_equal(s, "a\xc3\xa9");
    free(s);
    /* rendered, the control token breaks it */
    s = stream(t, TOK_RENDER_SPECIAL, ids, 5, NULL);
    assert_string_equal(s, " a\xef\xbf\xbd<s>\xef\xbf\xbd<|ctl|>");
    free(s);
    /* errors: an unknown id changes nothing; a full output neither */
    struct tok_stream st;
    struct mf_buf b;
    struct mf_err err;
    tok_stream_init(&st, t, 0);
    mf_buf_init(&b, 2);
    assert_int_equal(tok_stream_push(&st, S_BYTE0 + 0xC3, &b, &err), 0);
    assert_int_equal(tok_stream_push(&st, S_N + 7, &b, &err), MF_ERANGE);
    assert_int_equal(st.n_pend, 1);
    assert_int_equal(tok_stream_push(&st, S_SPAB, &b, &err), MF_ENOMEM);
    assert_int_equal(st.n_pend, 1);
    assert_int_equal(b.len, 0);
    assert_int_equal(tok_stream_push(&st, S_BYTE0 + 0xA9, &b, &err), 0);
    assert_string_equal(b.data, "\xc3\xa9");
    mf_buf_free(&b);
    tok_free(t);
    free(v);
}

/* ---- malformed descriptions ---- */

/* Builds v (after a mutation) and expects code with a message containing what. */
static void rejects(struct vocab *v, int code, const char *what)
{
    struct tok *t = (struct tok *)&t;
    struct mf_err err;
    mf_err_clear(&err);
    int rc = tok_new(&v->d, &t, &err);
    if (rc != code || !strstr(err.msg, what))
        print_message("# got %d '%s', want %d '%s'\n", rc, err.msg, code, what);
    assert_int_equal(rc, code);
    assert_null(t);
    assert_non_null(strstr(err.msg, what));
}

static void test_rejects_malformed_descriptions(void **state)
{
    struct vocab *v = bpe_vocab(1);
    v->d.n_types = v->n - 1;
    rejects(v, MF_EFORMAT, "token types for");
    v->d.n_types = v->n;
    v->d.scores = v->score;
    v->d.n_scores = 3;
    rejects(v, MF_EFORMAT, "3 scores for");
    v->d.scores = NULL;
    v->d.n_scores = 0;
    v->merge[1] = (struct tok_str){"h zz", 4};
    rejects(v, MF_EFORMAT, "merge 1 'h zz' names 'zz', which is not a token");
    v->merge[1] = (struct tok_str){"he", 2};
    rejects(v, MF_EFORMAT, "merge 1 'he' has no space");
    v->merge[1] = (struct tok_str){"e h", 3};
    rejects(v, MF_EFORMAT, "makes 'eh', which is not a token");
    v->merge[1] = (struct tok_str){"h e", 3};
    v->d.special[TOK_ID_EOS] = (int32_t)v->n;
    rejects(v, MF_ERANGE, "eos token id");
    v->d.special[TOK_ID_EOS] = -7;
    rejects(v, MF_ERANGE, "outside the vocabulary");
    v->d.special[TOK_ID_EOS] = B_ENDTEXT;
    v->d.special[TOK_ID_BOS] = -1;
    v->d.add_bos = 1;
    rejects(v, MF_ERANGE, "no BOS token");
    v->d.add_bos = -1;
    v->type[5] = 9;
    rejects(v, MF_EFORMAT, "token 5 has type 9");
    v->type[5] = TOK_TYPE_NORMAL;
    v->d.pre = "no-such-pre";
    rejects(v, MF_EUNSUPPORTED, "pre-tokenizer 'no-such-pre'");
    v->d.pre = "gpt-2";
    v->d.model = "t5";
    rejects(v, MF_EUNSUPPORTED, "model 't5'");
    v->d.model = "gpt2";
    v->d.n_tokens = 0;
    rejects(v, MF_EFORMAT, "no tokens");
    free(v);

    v = spm_vocab();
    v->text[S_BYTE0 + 7][4] = 'G'; /* "<0x0G>" */
    rejects(v, MF_EFORMAT, "byte token 10 is '<0x0G>', not <0xHH>");
    free(v);
    v = spm_vocab();
    v->score[S_A] = NAN;
    rejects(v, MF_EFORMAT, "NaN score");
    free(v);
}

/* ---- GGUF loading ---- */

/* Writes v's tokenizer.* keys (with mistakes chosen by `bad`) to path. */
static void write_gguf(const char *path, const struct vocab *v, int bad)
{
    struct gguf_writer *w;
    struct mf_err err;
    struct gguf_str toks[MAXV], merges[64];
    for (uint32_t i = 0; i < v->n; i++)
        toks[i] = (struct gguf_str){v->tok[i].p, v->tok[i].len};
    for (uint32_t i = 0; i < v->n_merges; i++)
        merges[i] = (struct gguf_str){v->merge[i].p, v->merge[i].len};
    assert_int_equal(gguf_writer_open(path, &w, &err), 0);
    assert_int_equal(gguf_writer_add_cstr(w, "general.name", "test vocab", &err), 0);
    assert_int_equal(gguf_writer_add_cstr(w, "tokenizer.ggml.model", v->d.model, &err), 0);
    assert_int_equal(gguf_writer_add_cstr(w, "tokenizer.ggml.pre", "gpt-2", &err), 0);
    if (bad == 1) /* tokens as an array of integers */
        assert_int_equal(gguf_writer_add_arr(w, "tokenizer.ggml.tokens", GGUF_TYPE_INT32,
                                             v->type, v->n, &err), 0);
    else
        assert_int_equal(gguf_writer_add_arr_str(w, "tokenizer.ggml.tokens", toks, v->n, &err),
                         0);
    assert_int_equal(gguf_writer_add_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32,
                                         v->type, bad == 2 ? v->n - 1 : v->n, &err), 0);
    assert_int_equal(gguf_writer_add_arr_str(w, "tokenizer.ggml.merges", merges, v->n_merges,
                                             &err), 0);
    assert_int_equal(gguf_writer_add_u32(w, "tokenizer.ggml.eos_token_id",
                                         bad == 3 ? 100000 : B_ENDTEXT, &err), 0);
    assert_int_equal(gguf_writer_add_bool(w, "tokenizer.ggml.add_bos_token", 0, &err), 0);
    assert_int_equal(gguf_writer_finish(w, &err), 0);
    gguf_writer_free(w);
}

static int load(const char *path, struct tok **t, struct mf_err *err)
{
    struct gguf_file *gf;
    int rc = gguf_open(path, &gf, err);
    if (rc)
        return rc;
    rc = tok_load_gguf(gf, t, err);
    gguf_close(gf);
    return rc;
}

static void test_load_gguf(void **state)
{
    char dir[] = "/tmp/mfc-tok-XXXXXX", path[64];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/v.gguf", dir);
    struct vocab *v = bpe_vocab(1);
    struct tok *t;
    struct mf_err err;
    write_gguf(path, v, 0);
    assert_int_equal(load(path, &t, &err), 0);
    assert_int_equal(tok_special_id(t, TOK_ID_EOS), B_ENDTEXT);
    assert_int_equal(tok_special_id(t, TOK_ID_BOS), -1);
    ENCODES(t, "the the", TOK_ADD_SPECIAL, 't', B_HE, B_GTHE);
    tok_free(t);
    static const struct {
        int code;
        const char *what;
    } bad[] = {
        {0, NULL},
        {MF_EFORMAT, "tokenizer.ggml.tokens is an array of i32, not of strings"},
        {MF_EFORMAT, "token types for"},
        {MF_ERANGE, "tokenizer.ggml.eos_token_id is 100000, outside the vocabulary"},
    };
    for (int i = 1; i < 4; i++) {
        write_gguf(path, v, i);
        mf_err_clear(&err);
        t = (struct tok *)&t;
        assert_int_equal(load(path, &t, &err), bad[i].code);
        assert_null(t);
        if (!strstr(err.msg, bad[i].what) || !strstr(err.msg, path))
            print_message("# %s\n", err.msg);
        assert_non_null(strstr(err.msg, bad[i].what));
        assert_non_null(strstr(err.msg, path));
    }
    unlink(path);
    rmdir(dir);
    free(v);
}

/* ---- limits and long inputs ---- */

static void test_limits_and_long_input(void **state)
{
    struct vocab *v = bpe_vocab(1);
    struct tok *t = build(v);
    struct tok_ids ids;
    struct mf_err err;
    tok_ids_init(&ids, 2);
    assert_int_equal(tok_encode(t, "abcabc", 6, 0, &ids, &err), MF_ENOMEM);
    assert_int_equal(ids.n, 2);
    tok_ids_free(&ids);
    /* one 400 kB pre-token (letters) and one 400 kB run of spaces: the
     * heap merge and the regexes stay near-linear (quadratic would take
     * minutes here) */
    size_t n = 400000;
    char *s = malloc(n + 1);
    assert_non_null(s);
    for (size_t i = 0; i < n; i++)
        s[i] = "abca"[i % 4];
    tok_ids_init(&ids, n + 1);
    assert_int_equal(tok_encode(t, s, n, 0, &ids, &err), 0);
    assert_true(ids.n > 0 && ids.n <= n);
    memset(s, ' ', n);
    ids.n = 0;
    assert_int_equal(tok_encode(t, s, n, 0, &ids, &err), 0);
    assert_int_equal(ids.n, n);
    tok_ids_free(&ids);
    tok_free(t);
    free(v);
    v = spm_vocab();
    t = build(v);
    for (size_t i = 0; i < n; i++)
        s[i] = "ab a"[i % 4];
    tok_ids_init(&ids, 2 * n);
    assert_int_equal(tok_encode(t, s, n, 0, &ids, &err), 0);
    assert_int_equal(ids.n, n / 2);
    tok_ids_free(&ids);
    tok_free(t);
    free(v);
    free(s);
}

/* Every pre-tokenizer on 100 kB runs of one character class each: no
 * PCRE2 JIT stack overflow (a repeated group would need a frame per
 * character), no quadratic rescans, every byte accounted for. */
static void test_every_pre_tokenizer_on_long_runs(void **state)
{
    static const char *const pres[] = {
        "default", "llama-bpe", "dbrx", "qwen2", "deepseek-llm", "deepseek-coder", "falcon",
        "starcoder", "gpt-2", "mpt", "bloom", "viking", "chatglm-bpe"};
    static const char *const units[] = {"中", "！", " \n", "\u3000", "  ", "a", "7", "'s", "é",
                                        "\xe2\x80\x89x"};
    size_t n = 100000;
    char *s = malloc(n + 8);
    assert_non_null(s);
    for (size_t p = 0; p < sizeof pres / sizeof pres[0]; p++) {
        struct vocab *v = bpe_vocab(1);
        finish(v, "gpt2", pres[p]);
        v->d.scores = NULL;
        v->d.n_scores = 0;
        struct tok *t = build(v);
        for (size_t u = 0; u < sizeof units / sizeof units[0]; u++) {
            size_t k = strlen(units[u]), len = 0;
            while (len + k <= n) {
                memcpy(s + len, units[u], k);
                len += k;
            }
            struct tok_ids ids;
            struct mf_buf back;
            struct mf_err err;
            tok_ids_init(&ids, 2 * n);
            mf_buf_init(&back, 2 * n);
            int rc = tok_encode(t, s, len, 0, &ids, &err);
            if (rc)
                print_message("# %s on '%s': %s\n", pres[p], units[u], err.msg);
            assert_int_equal(rc, 0);
            assert_int_equal(tok_decode(t, ids.v, ids.n, 0, &back, &err), 0);
            assert_int_equal(back.len, len);
            assert_memory_equal(back.data, s, len);
            tok_ids_free(&ids);
            mf_buf_free(&back);
        }
        tok_free(t);
        free(v);
    }
    free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_vocab),
        cmocka_unit_test(test_spm_merges_by_score),
        cmocka_unit_test(test_spm_byte_fallback_and_decode),
        cmocka_unit_test(test_spm_special_tokens),
        cmocka_unit_test(test_bpe_merges_by_rank),
        cmocka_unit_test(test_bpe_bytes_and_decode),
        cmocka_unit_test(test_bpe_llama3_ignore_merges_and_default_bos),
        cmocka_unit_test(test_eog_and_facts),
        cmocka_unit_test(test_decode_rejects_out_of_range),
        cmocka_unit_test(test_stream_holds_split_characters),
        cmocka_unit_test(test_stream_special_and_spm),
        cmocka_unit_test(test_rejects_malformed_descriptions),
        cmocka_unit_test(test_load_gguf),
        cmocka_unit_test(test_limits_and_long_input),
        cmocka_unit_test(test_every_pre_tokenizer_on_long_runs),
    };
    return cmocka_run_group_tests_name("tokenizer", tests, NULL, NULL);
}
