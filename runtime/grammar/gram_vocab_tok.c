/*
 * gram_vocab_tok.c: a grammar vocabulary from a tokenizer (text/): every
 * token's bytes as the detokenizer emits them (tok_piece without flags);
 * end-of-generation tokens marked as such; control tokens left out but for
 * the markers asked for (their text); unknown and unused tokens left out.
 * Apart from gram_vocab.c so a program that builds vocabularies from raw
 * pieces (the GPU tests) needs no tokenizer.
 */
#include <stdlib.h>
#include <string.h>

#include "runtime/grammar/gram.h"

/* Whether control token id's text is one of markers[]. */
static int is_marker(const struct tok *t, int32_t id, const char *const *markers)
{
    size_t n = 0;
    const char *text = tok_token_text(t, id, &n);
    for (size_t i = 0; markers && markers[i] && text; i++)
        if (strlen(markers[i]) == n && !memcmp(markers[i], text, n))
            return 1;
    return 0;
}

int gram_vocab_new(const struct tok *t, const char *const *markers, struct gram_vocab **out,
                   struct mf_err *err)
{
    int32_t n = (int32_t)tok_n_vocab(t);
    const char **pieces = calloc((size_t)n + 1, sizeof *pieces);
    size_t *lens = calloc((size_t)n + 1, sizeof *lens);
    uint8_t *eog = calloc((size_t)n + 1, 1);
    int rc = 0;

    *out = NULL;
    if (!pieces || !lens || !eog) {
        rc = mf_err_set(err, MF_ENOMEM, "grammar vocabulary: out of memory");
        goto out;
    }
    for (int32_t i = 0; i < n; i++) {
        enum tok_type ty = tok_token_type(t, i);
        eog[i] = (uint8_t)(tok_is_eog(t, i) != 0);
        if (!eog[i] && ty == TOK_TYPE_CONTROL && is_marker(t, i, markers)) {
            pieces[i] = tok_token_text(t, i, &lens[i]);
            continue;
        }
        if (eog[i] || ty == TOK_TYPE_CONTROL || ty == TOK_TYPE_UNKNOWN || ty == TOK_TYPE_UNUSED)
            continue;
        if (tok_piece(t, i, 0, &pieces[i], &lens[i], err)) {
            rc = err->code;
            goto out;
        }
    }
    rc = gram_vocab_from_pieces(pieces, lens, eog, n, out, err);
out:
    free(pieces);
    free(lens);
    free(eog);
    return rc;
}
