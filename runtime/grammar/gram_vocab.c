/*
 * gram_vocab.c: the vocabulary side of constrained decoding: every token's
 * bytes (as the detokenizer emits them) in a trie laid out in preorder, so
 * a mask walk is one forward pass that jumps over rejected subtrees.
 *
 * Built once per tokenizer by sorting the tokens' byte strings: each token
 * adds the nodes past its longest common prefix with the one before it.
 * Tokens a grammar can never produce (control and unknown tokens, empty
 * pieces, pieces over 65535 bytes) stay out of the trie; end-of-generation
 * tokens are listed apart, allowed only where a grammar may end.
 */
#include <stdlib.h>
#include <string.h>

#include "runtime/grammar/gram.h"
#include "runtime/grammar/gram_int.h"

/* qsort has no context argument: sort (offset, length, id) triples instead */
struct key {
    const unsigned char *p;
    uint32_t len;
    int32_t id;
};

static int cmp_key(const void *a, const void *b)
{
    const struct key *x = a, *y = b;
    uint32_t n = x->len < y->len ? x->len : y->len;
    int c = memcmp(x->p, y->p, n);
    if (c)
        return c;
    if (x->len != y->len)
        return x->len < y->len ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

static int build_trie(struct gram_vocab *v, struct mf_err *err)
{
    struct key *keys = NULL;
    size_t n_keys = 0, total = 0, cap;
    uint32_t *open = NULL; /* node index per depth on the current path */
    int rc = 0;

    for (int32_t i = 0; i < v->n_vocab; i++)
        if (v->kind[i] == GRAM_TOK_TEXT)
            total += v->piece_off[i + 1] - v->piece_off[i];
    cap = total + 1;
    keys = malloc(((size_t)v->n_vocab + 1) * sizeof *keys);
    v->byte = malloc(cap);
    v->depth = malloc(cap * sizeof *v->depth);
    v->next = malloc(cap * sizeof *v->next);
    v->tok_off = calloc(cap + 1, sizeof *v->tok_off);
    v->tok_ids = malloc(((size_t)v->n_vocab + 1) * sizeof *v->tok_ids);
    open = malloc(65537 * sizeof *open);
    if (!keys || !v->byte || !v->depth || !v->next || !v->tok_off || !v->tok_ids || !open) {
        rc = mf_err_set(err, MF_ENOMEM, "grammar vocabulary: out of memory");
        goto out;
    }
    for (int32_t i = 0; i < v->n_vocab; i++) {
        if (v->kind[i] != GRAM_TOK_TEXT)
            continue;
        keys[n_keys++] = (struct key){(const unsigned char *)v->pieces + v->piece_off[i],
                                      v->piece_off[i + 1] - v->piece_off[i], i};
    }
    qsort(keys, n_keys, sizeof *keys, cmp_key);
    /* tokens per node are counted first (tok_off[node + 1]), then prefix-summed */
    size_t n = 0;
    uint32_t depth = 0; /* length of the current path */
    const struct key *prev = NULL;
    for (size_t k = 0; k < n_keys; k++) {
        const struct key *x = &keys[k];
        uint32_t lcp = 0;
        if (prev) {
            uint32_t m = prev->len < x->len ? prev->len : x->len;
            while (lcp < m && prev->p[lcp] == x->p[lcp])
                lcp++;
        }
        while (depth > lcp) { /* close the subtrees we leave */
            v->next[open[depth]] = (uint32_t)n;
            depth--;
        }
        while (depth < x->len) {
            v->byte[n] = x->p[depth];
            v->depth[n] = (uint16_t)(depth + 1);
            open[++depth] = (uint32_t)n;
            n++;
        }
        v->tok_off[open[depth] + 1]++;
        if (depth > v->max_depth)
            v->max_depth = depth;
        prev = x;
    }
    while (depth > 0) {
        v->next[open[depth]] = (uint32_t)n;
        depth--;
    }
    v->n_nodes = n;
    for (size_t i = 0; i < n; i++)
        v->tok_off[i + 1] += v->tok_off[i];
    /* keys are in node order (preorder follows sorted order), so filling in
       key order fills each node's slice in turn */
    for (size_t k = 0; k < n_keys; k++)
        v->tok_ids[k] = keys[k].id;
    v->nodes = malloc((n ? n : 1) * sizeof *v->nodes);
    if (!v->nodes) {
        rc = mf_err_set(err, MF_ENOMEM, "grammar vocabulary: out of memory");
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        uint32_t a = v->tok_off[i], b = v->tok_off[i + 1];
        v->nodes[i] = (struct gram_tnode){v->next[i], a < b ? v->tok_ids[a] : -1, v->depth[i],
                                          v->byte[i], (uint8_t)(b - a > 1)};
    }
out:
    free(keys);
    free(open);
    return rc;
}

static int vocab_alloc(int32_t n, size_t bytes, struct gram_vocab **out, struct mf_err *err)
{
    struct gram_vocab *v = calloc(1, sizeof *v);
    *out = NULL;
    if (v) {
        v->n_vocab = n;
        v->kind = calloc((size_t)n + 1, 1);
        v->piece_off = calloc((size_t)n + 1, sizeof *v->piece_off);
        v->pieces = malloc(bytes + 1);
        v->eog = malloc(((size_t)n + 1) * sizeof *v->eog);
    }
    if (!v || !v->kind || !v->piece_off || !v->pieces || !v->eog) {
        gram_vocab_free(v);
        return mf_err_set(err, MF_ENOMEM, "grammar vocabulary: out of memory");
    }
    *out = v;
    return 0;
}

int gram_vocab_from_pieces(const char *const *pieces, const size_t *lens, const uint8_t *eog,
                           int32_t n, struct gram_vocab **out, struct mf_err *err)
{
    struct gram_vocab *v = NULL;
    size_t bytes = 0;
    int rc;

    *out = NULL;
    if (n <= 0)
        return mf_err_set(err, MF_EINVAL, "grammar vocabulary: no tokens");
    for (int32_t i = 0; i < n; i++) {
        if (pieces[i] && lens[i] <= 65535 && !(eog && eog[i]))
            bytes += lens[i];
        if (bytes > UINT32_MAX - 65536)
            return mf_err_set(err, MF_ENOMEM, "grammar vocabulary: over 4 GiB of token text");
    }
    if ((rc = vocab_alloc(n, bytes, &v, err)))
        return rc;
    uint32_t off = 0;
    for (int32_t i = 0; i < n; i++) {
        v->piece_off[i] = off;
        if (eog && eog[i]) {
            v->kind[i] = GRAM_TOK_EOG;
            v->eog[v->n_eog++] = i;
        } else if (pieces[i] && lens[i] > 0 && lens[i] <= 65535) {
            v->kind[i] = GRAM_TOK_TEXT;
            memcpy(v->pieces + off, pieces[i], lens[i]);
            off += (uint32_t)lens[i];
        }
    }
    v->piece_off[n] = off;
    if ((rc = build_trie(v, err))) {
        gram_vocab_free(v);
        return rc;
    }
    *out = v;
    return 0;
}

void gram_vocab_free(struct gram_vocab *v)
{
    if (!v)
        return;
    free(v->kind);
    free(v->piece_off);
    free(v->pieces);
    free(v->eog);
    free(v->byte);
    free(v->depth);
    free(v->next);
    free(v->tok_off);
    free(v->tok_ids);
    free(v->nodes);
    free(v);
}

int32_t gram_vocab_size(const struct gram_vocab *v)
{
    return v->n_vocab;
}

size_t gram_vocab_nodes(const struct gram_vocab *v)
{
    return v->n_nodes;
}

uint32_t gram_vocab_max_len(const struct gram_vocab *v)
{
    return v->max_depth;
}
