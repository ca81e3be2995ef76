/*
 * tokenizer_spm.c: SentencePiece-style encoding (tokenizer.ggml.model =
 * "llama"), as llama.cpp's llm_tokenizer_spm_session does it.
 *
 * The text (with ' ' escaped to U+2581 and, when asked, one U+2581 in
 * front) is cut into UTF-8 characters by their lead byte; then, repeatedly,
 * the neighbouring pair whose concatenation is the token with the highest
 * score (leftmost on ties) is merged, from a heap of candidates that are
 * checked for staleness when popped. What is left is either a token or a
 * character the vocabulary lacks, which falls back to its <0xXX> byte tokens.
 * O(n log n) in the text length; there is no pre-tokenizer.
 *
 * Word by word: when no token has U+2581 right after another character
 * (Llama 2, phi-3: checked at init, spm_split), no merge can join the
 * characters on both sides of a point where a run of U+2581 starts, so the
 * text is merged piece by piece between such points. Merges in different
 * pieces never touch the same symbols and keep their order within a piece,
 * so the result is the same as one merge over the whole text; the heaps stay
 * small, which is what makes a long text fast (about 10x on 800 kB).
 *
 * Owns nothing: writes struct tok's byte_tok at init and uses the caller's
 * scratch when encoding.
 */
#include "text/tokenizer_int.h"

#include <string.h>

#include "common/num.h"

#define SPACE "\xe2\x96\x81" /* U+2581 LOWER ONE EIGHTH BLOCK, sentencepiece's space */

/* Bytes of the character a lead byte starts (llama.cpp unicode_len_utf8). */
static const uint8_t lead_len[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};

/* "<0xHH>" with upper- or lower-case hex; the byte, or -1. */
static int parse_byte_token(const char *s, size_t len)
{
    if (len != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>')
        return -1;
    int v = 0;
    for (int i = 3; i < 5; i++) {
        int d = mf_num_hex_digit((unsigned char)s[i]);
        if (d < 0)
            return -1;
        v = v * 16 + d;
    }
    return v;
}

/* Checks every BYTE token's text and finds each byte's fallback token:
 * "<0xHH>" as llama.cpp's byte_to_token spells it, else the one-byte text. */
int tok_spm_init(struct tok *t, struct mf_err *err)
{
    for (uint32_t id = 0; id < t->n_vocab; id++) {
        size_t len;
        const char *s = tok_token_text(t, (int32_t)id, &len);
        if (t->type[id] == TOK_TYPE_BYTE && parse_byte_token(s, len) < 0)
            return mf_err_set(err, MF_EFORMAT,
                              "tokenizer: byte token %u is '%.*s', not <0xHH>", id,
                              (int)(len > 32 ? 32 : len), s);
    }
    t->spm_split = 1;
    for (uint32_t id = 0; id < t->n_vocab && t->spm_split; id++) {
        size_t len;
        const char *s = tok_token_text(t, (int32_t)id, &len);
        for (size_t i = 3; i + 3 <= len; i++)
            if (memcmp(s + i, SPACE, 3) == 0 && memcmp(s + i - 3, SPACE, 3) != 0)
                t->spm_split = 0;
    }
    static const char hex[] = "0123456789ABCDEF";
    for (int b = 0; b < 256; b++) {
        char name[6] = {'<', '0', 'x', hex[b >> 4], hex[b & 15], '>'};
        char one = (char)b;
        int32_t id = tok_lookup(t, name, sizeof name);
        t->byte_tok[b] = id >= 0 ? id : tok_lookup(t, &one, 1);
    }
    return 0;
}

/* Orders floats as unsigned integers (sign-magnitude to biased). */
static uint32_t float_order(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return (u & 0x80000000u) ? ~u : u | 0x80000000u;
}

/* Queues the merge of symbols l and r when their concatenation is a token. */
static void add_pair(const struct tok *t, struct tok_scratch *s, const char *text, int32_t l,
                     int32_t r)
{
    if (l < 0 || r < 0)
        return;
    const struct tok_sym *a = &s->sym[l], *b = &s->sym[r];
    size_t size = a->len + b->len;
    int32_t id = tok_lookup(t, text + a->off, size);
    if (id < 0)
        return;
    /* highest score first, then leftmost: llm_bigram_spm::comparator */
    struct tok_pair p = {
        .key = (uint64_t)(~float_order(t->scores[id])) << 32 | (uint32_t)l,
        .left = l,
        .right = r,
        .a = (int32_t)size,
    };
    tok_heap_push(s, &p);
}

/* Splits text into characters by lead byte (llama.cpp unicode_len_utf8:
 * no validation, so a bad byte is a one-byte symbol) and merges them. */
static int merge(const struct tok *t, struct tok_scratch *s, const char *text, size_t len,
                 struct mf_err *err)
{
    int rc = tok_scratch_reserve(s, len, err);
    if (rc)
        return rc;
    int32_t n = 0;
    for (size_t off = 0; off < len; n++) {
        size_t k = lead_len[(unsigned char)text[off] >> 4];
        if (k > len - off)
            k = len - off;
        s->sym[n] = (struct tok_sym){.off = off, .len = k, .prev = n - 1, .next = n + 1};
        off += k;
    }
    s->sym[n - 1].next = -1;
    for (int32_t i = 1; i < n; i++)
        add_pair(t, s, text, i - 1, i);
    struct tok_pair p;
    while (tok_heap_pop(s, &p)) {
        struct tok_sym *a = &s->sym[p.left], *b = &s->sym[p.right];
        if (a->len == 0 || b->len == 0 || a->len + b->len != (size_t)p.a)
            continue; /* one side was merged away since this pair was queued */
        a->len += b->len;
        b->len = 0;
        a->next = b->next;
        if (b->next >= 0)
            s->sym[b->next].prev = p.left;
        add_pair(t, s, text, a->prev, p.left);
        add_pair(t, s, text, p.left, a->next);
    }
    return 0;
}

/* A leftover symbol that is not a token goes out as byte tokens; a byte the
 * vocabulary has no token for becomes UNK (llama.cpp would throw), or is
 * dropped when there is no UNK either. */
static int emit(const struct tok *t, const char *p, size_t len, struct tok_ids *out,
                struct mf_err *err)
{
    int32_t id = tok_lookup(t, p, len);
    if (id >= 0)
        return tok_ids_push(out, id, err);
    for (size_t i = 0; i < len; i++) {
        id = t->byte_tok[(unsigned char)p[i]];
        if (id < 0)
            id = t->special[TOK_ID_UNK];
        if (id >= 0) {
            int rc = tok_ids_push(out, id, err);
            if (rc)
                return rc;
        }
    }
    return 0;
}

/* Merges text[0..len) and appends its tokens. */
static int encode_piece(const struct tok *t, struct tok_scratch *s, const char *text, size_t len,
                        struct tok_ids *out, struct mf_err *err)
{
    int rc;
    if (tok_memo_get(s, text, len, out, err, &rc))
        return rc;
    size_t first = out->n;
    rc = merge(t, s, text, len, err);
    for (int32_t i = 0; !rc && i >= 0; i = s->sym[i].next)
        rc = emit(t, text + s->sym[i].off, s->sym[i].len, out, err);
    if (!rc && out->n > first)
        tok_memo_put(s, text, len, out->v + first, out->n - first);
    return rc;
}

/* Merges the escaped text piece by piece (see the header) or whole. */
static int encode_escaped(const struct tok *t, struct tok_scratch *s, const char *text,
                          size_t len, struct tok_ids *out, struct mf_err *err)
{
    if (!t->spm_split)
        return encode_piece(t, s, text, len, out, err);
    size_t start = 0, i = 0;
    int prev_space = 0, rc = 0;
    while (i < len && !rc) {
        size_t k = lead_len[(unsigned char)text[i] >> 4];
        if (k > len - i)
            k = len - i;
        int space = k == 3 && memcmp(text + i, SPACE, 3) == 0;
        if (space && !prev_space && i > start) {
            rc = encode_piece(t, s, text + start, i - start, out, err);
            start = i;
        }
        prev_space = space;
        i += k;
    }
    if (!rc)
        rc = encode_piece(t, s, text + start, len - start, out, err);
    return rc;
}

int tok_spm_encode(const struct tok *t, struct tok_scratch *s, const char *text, size_t len,
                   int space_prefix, struct tok_ids *out, struct mf_err *err)
{
    int rc = tok_scratch_buf(&s->buf, &s->buf_cap, 3 * len + 3, err);
    if (rc)
        return rc;
    size_t n = 0;
    if (space_prefix) {
        memcpy(s->buf, SPACE, 3);
        n = 3;
    }
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') {
            memcpy(s->buf + n, SPACE, 3);
            n += 3;
        } else {
            s->buf[n++] = text[i];
        }
    }
    return n ? encode_escaped(t, s, s->buf, n, out, err) : 0;
}
