/*
 * tokenizer_compare.c: whether two tokenizers give token ids the same
 * meaning (tok_same_vocab), which a speculative-decoding draft model needs:
 * the model verifies the draft's token ids as its own, so every id must
 * name the same text and kind of token, and the special ids (BOS, EOS,
 * EOT, ...) must be the same ones. The split of text into tokens (scores,
 * merges, pre-tokenizer) is not compared: the draft never tokenizes, it
 * only reads and proposes ids.
 *
 * Owns nothing. The first difference is named, with both sides' values.
 */
#include "text/tokenizer_int.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

static const char *const special_names[TOK_ID_COUNT] = {"BOS", "EOS", "UNK", "SEP",
                                                        "PAD", "EOT", "EOM"};

/* The first 40 bytes of id's text, printable, into buf. */
static const char *shown(const struct tok *t, uint32_t id, char *buf, size_t cap)
{
    const char *s = t->text + t->text_off[id];
    size_t n = t->text_off[id + 1] - t->text_off[id] - 1, o = 0;
    for (size_t i = 0; i < n && i < 40 && o + 5 < cap; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c < 0x7f && c != '\'')
            buf[o++] = (char)c;
        else
            o += (size_t)snprintf(buf + o, cap - o, "\\x%02x", c);
    }
    if (n > 40 && o + 4 < cap)
        o += (size_t)snprintf(buf + o, cap - o, "...");
    buf[o] = '\0';
    return buf;
}

int tok_same_vocab(const struct tok *a, const struct tok *b, struct mf_err *err)
{
    char x[200], y[200];

    if (a->model != b->model)
        return mf_err_set(err, MF_EINVAL, "tokenizer models differ: %s against %s",
                          a->model == TOK_MODEL_SPM ? "llama" : "gpt2",
                          b->model == TOK_MODEL_SPM ? "llama" : "gpt2");
    if (a->n_vocab != b->n_vocab)
        return mf_err_set(err, MF_EINVAL, "vocabularies of %" PRIu32 " and %" PRIu32 " tokens",
                          a->n_vocab, b->n_vocab);
    for (uint32_t id = 0; id < a->n_vocab; id++) {
        uint32_t la = a->text_off[id + 1] - a->text_off[id];
        uint32_t lb = b->text_off[id + 1] - b->text_off[id];
        if (la != lb || memcmp(a->text + a->text_off[id], b->text + b->text_off[id], la) != 0)
            return mf_err_set(err, MF_EINVAL, "token %" PRIu32 " is '%s' against '%s'", id,
                              shown(a, id, x, sizeof x), shown(b, id, y, sizeof y));
        if (a->type[id] != b->type[id])
            return mf_err_set(err, MF_EINVAL, "token %" PRIu32 " ('%s') is of type %d against %d",
                              id, shown(a, id, x, sizeof x), a->type[id], b->type[id]);
    }
    for (int i = 0; i < TOK_ID_COUNT; i++) {
        if (a->special[i] != b->special[i])
            return mf_err_set(err, MF_EINVAL, "the %s token is %" PRId32 " against %" PRId32,
                              special_names[i], a->special[i], b->special[i]);
    }
    if (a->add_bos != b->add_bos || a->add_eos != b->add_eos)
        return mf_err_set(err, MF_EINVAL, "add_bos_token/add_eos_token are %d/%d against %d/%d",
                          a->add_bos, a->add_eos, b->add_bos, b->add_eos);
    return 0;
}
