/*
 * fuzz_tokenizer.c: libFuzzer target for runtime/tokenizer.
 *
 * Built once per process (static state is fine in a fuzzer): one SPM and
 * several byte-level BPE tokenizers (one per pre-tokenizer regex family)
 * over small vocabularies made here. The first input byte picks what to do:
 *   0-3  encode the rest with SPM or BPE, flags from the second byte: any
 *        bytes, invalid UTF-8 included, must encode without error, and
 *        valid UTF-8 must decode back to the same bytes (for SPM, when the
 *        text has no U+2581 and no added token, which get spaces around);
 *   4    decode the rest as 16-bit ids: ids outside the vocabulary must be
 *        rejected with MF_ERANGE, the others decode;
 *   5    stream the rest as 16-bit ids: every output prefix must be valid
 *        UTF-8 and an out-of-range id rejected without changing the stream;
 *   6    build a tokenizer from a description cut out of the rest (tokens,
 *        types, merges, special ids): it builds or fails with a message,
 *        and when it builds, it encodes and decodes the input.
 * Invalid UTF-8 is defined to become U+FFFD for BPE and byte tokens for SPM
 * (both as llama.cpp does; SPM's characters are cut by lead byte, so a space
 * right after a truncated sequence may come back as U+2581's bytes), so
 * only valid input must round-trip.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/utf8.h"
#include "text/tokenizer.h"

#define N_BPE 9

static const char *const pres[N_BPE] = {"gpt-2",  "llama-bpe", "deepseek-llm",
                                        "deepseek-coder", "falcon", "default",
                                        "qwen2", "bloom", "starcoder"};

struct fixture {
    struct tok *spm;
    struct tok *bpe[N_BPE];
};

static uint32_t gpt2_cp(unsigned b)
{
    if ((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE)
        return b;
    return b <= 0x20 ? 0x100 + b : b < 0xAD ? 0x100 + 33 + (b - 0x7F) : 0x100 + 67;
}

static struct tok *make(const char *model, const char *pre, const char *const *extra, size_t n_extra,
                        const char *const *merges, size_t n_merges)
{
    static char text[600][24];
    static struct tok_str toks[600], mg[32];
    static float scores[600];
    static int32_t types[600];
    uint32_t n = 0;
    if (strcmp(model, "llama") == 0) {
        const char *head[3] = {"<unk>", "<s>", "</s>"};
        for (int i = 0; i < 3; i++) {
            snprintf(text[n], sizeof text[n], "%s", head[i]);
            types[n++] = i ? TOK_TYPE_CONTROL : TOK_TYPE_UNKNOWN;
        }
        for (int b = 0; b < 256; b++) {
            snprintf(text[n], sizeof text[n], "<0x%02X>", b);
            types[n++] = TOK_TYPE_BYTE;
        }
    } else {
        for (unsigned b = 0; b < 256; b++) {
            char u[5] = {0};
            mf_utf8_encode(gpt2_cp(b), u);
            snprintf(text[n], sizeof text[n], "%s", u);
            types[n++] = TOK_TYPE_NORMAL;
        }
    }
    for (size_t i = 0; i < n_extra; i++) {
        snprintf(text[n], sizeof text[n], "%s", extra[i]);
        types[n++] = extra[i][0] == '<' ? (extra[i][2] == 'u' ? TOK_TYPE_USER_DEFINED
                                                              : TOK_TYPE_CONTROL)
                                        : TOK_TYPE_NORMAL;
    }
    for (uint32_t i = 0; i < n; i++) {
        toks[i] = (struct tok_str){text[i], strlen(text[i])};
        scores[i] = -(float)(i % 7);
    }
    for (size_t i = 0; i < n_merges; i++)
        mg[i] = (struct tok_str){merges[i], strlen(merges[i])};
    struct tok_desc d;
    tok_desc_init(&d);
    d.model = model;
    d.pre = pre;
    d.tokens = toks;
    d.n_tokens = n;
    d.scores = scores;
    d.n_scores = n;
    d.types = types;
    d.n_types = n;
    d.merges = mg;
    d.n_merges = (uint32_t)n_merges;
    d.special[TOK_ID_BOS] = (int32_t)n - 2;
    d.special[TOK_ID_EOS] = (int32_t)n - 2;
    struct tok *t;
    struct mf_err err;
    if (tok_new(&d, &t, &err)) {
        fprintf(stderr, "fuzz_tokenizer: %s\n", err.msg);
        abort();
    }
    return t;
}

static const struct fixture *fixture(void)
{
    static struct fixture f;
    if (f.spm)
        return &f;
    static const char *const spm_extra[] = {"\xe2\x96\x81", "\xe2\x96\x81t", "he", "\xe2\x96\x81the",
                                            "a", "b", "ab", "<|user|>", "<|ctl|>", "<|end|>"};
    f.spm = make("llama", NULL, spm_extra, 10, NULL, 0);
    static const char *const bpe_extra[] = {"Ġt", "he", "Ġthe", "in", "ing", "ĠĠ", "12",
                                            "<|user|>", "<|ctl|>", "<|end|>"};
    static const char *const merges[] = {"Ġ t", "h e", "Ġt he", "i n", "in g", "Ġ Ġ", "1 2"};
    for (int i = 0; i < N_BPE; i++)
        f.bpe[i] = make("gpt2", pres[i], bpe_extra, 10, merges, 7);
    return &f;
}

static int contains(const uint8_t *p, size_t n, const char *s)
{
    return memmem(p, n, s, strlen(s)) != NULL;
}

static void encode(const struct tok *t, const uint8_t *p, size_t n, unsigned flags, int spm)
{
    struct tok_ids ids;
    struct mf_buf back;
    struct mf_err err;
    tok_ids_init(&ids, 4 * n + 16);
    mf_buf_init(&back, 64 * n + 1024);
    if (tok_encode(t, (const char *)p, n, flags, &ids, &err) != 0)
        abort(); /* any bytes encode */
    for (size_t i = 0; i < ids.n; i++)
        if (ids.v[i] < 0 || (uint32_t)ids.v[i] >= tok_n_vocab(t))
            abort();
    unsigned df = TOK_RENDER_SPECIAL | (spm ? TOK_STRIP_SPACE : 0);
    if (tok_decode(t, ids.v, ids.n, df, &back, &err) != 0)
        abort();
    int check = flags == 0 && mf_utf8_valid((const char *)p, n, NULL) &&
                (!spm || (!contains(p, n, "\xe2\x96\x81") && !contains(p, n, "<|user|>")));
    if (check && (back.len != n || (n && memcmp(back.data, p, n) != 0)))
        abort(); /* lossless where the model is */
    tok_ids_free(&ids);
    mf_buf_free(&back);
}

static void decode(const struct tok *t, const uint8_t *p, size_t n, int streaming)
{
    struct mf_buf out;
    struct mf_err err;
    struct tok_stream st;
    mf_buf_init(&out, 1 << 20);
    tok_stream_init(&st, t, p[0] & 3);
    for (size_t i = 1; i + 1 < n; i += 2) {
        int32_t id = (int32_t)(p[i] | p[i + 1] << 8) - 64;
        int bad = id < 0 || (uint32_t)id >= tok_n_vocab(t);
        int rc = streaming ? tok_stream_push(&st, id, &out, &err)
                           : tok_decode(t, &id, 1, p[0] & 3, &out, &err);
        if (bad != (rc == MF_ERANGE) || (!bad && rc))
            abort();
        if (streaming && !mf_utf8_valid(out.data ? out.data : "", out.len, NULL))
            abort();
    }
    if (streaming && (tok_stream_flush(&st, &out, &err) || st.n_pend ||
                      !mf_utf8_valid(out.data ? out.data : "", out.len, NULL)))
        abort();
    mf_buf_free(&out);
}

/* A description cut from the input: NUL-separated token texts (first 64),
 * their types from the byte after each, the rest as merges. */
static void build(const uint8_t *p, size_t n)
{
    struct tok_str toks[64], merges[64];
    int32_t types[64];
    uint32_t nt = 0, nm = 0;
    size_t i = 0;
    while (i < n && nt < 64) {
        const uint8_t *z = memchr(p + i, 0, n - i);
        size_t len = z ? (size_t)(z - (p + i)) : n - i;
        toks[nt] = (struct tok_str){(const char *)p + i, len};
        types[nt++] = i + len + 1 < n ? p[i + len + 1] % 8 : 1;
        i += len + 2;
    }
    for (uint32_t k = 0; k + 1 < nt && nm < 64; k += 2)
        merges[nm++] = toks[k];
    struct tok_desc d;
    tok_desc_init(&d);
    d.model = n && (p[0] & 1) ? "llama" : "gpt2";
    d.pre = n > 1 ? pres[p[1] % N_BPE] : NULL;
    d.tokens = toks;
    d.n_tokens = nt;
    d.types = types;
    d.n_types = nt;
    d.merges = merges;
    d.n_merges = n > 2 && (p[2] & 1) ? nm : 0;
    d.special[TOK_ID_BOS] = n > 3 ? (int32_t)p[3] - 2 : -1;
    struct tok *t;
    struct mf_err err;
    mf_err_clear(&err);
    if (tok_new(&d, &t, &err)) {
        if (err.msg[0] == '\0' || t)
            abort(); /* a failure always says why and leaves nothing */
        return;
    }
    encode(t, p, n, TOK_PARSE_SPECIAL | TOK_ADD_SPECIAL, 0);
    tok_free(t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const struct fixture *f = fixture();
    if (size < 2)
        return 0;
    uint8_t op = data[0] % 7, sel = data[1];
    const uint8_t *p = data + 2;
    size_t n = size - 2;
    unsigned flags = sel & (TOK_ADD_SPECIAL | TOK_PARSE_SPECIAL);
    switch (op) {
    case 0:
        encode(f->spm, p, n, flags, 1);
        break;
    case 1:
    case 2:
    case 3:
        encode(f->bpe[(sel >> 2) % N_BPE], p, n, flags, 0);
        break;
    case 4:
    case 5:
        decode(sel & 0x80 ? f->spm : f->bpe[sel % N_BPE], data + 1, size - 1, op == 5);
        break;
    default:
        build(p, n);
        break;
    }
    return 0;
}
