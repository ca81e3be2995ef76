/*
 * tokenizer.c: the model-independent half of the tokenizer: building a
 * struct tok from a description, the text -> id map, splitting special
 * tokens out of the text, the encode driver (BOS/EOS, SPM's space prefix),
 * decoding, and the streaming detokenizer.
 *
 * Owns every array of struct tok; the model halves (tokenizer_spm.c,
 * tokenizer_bpe.c) fill the parts they own through tok_*_init. The behaviour
 * follows llama.cpp's src/llama-vocab.cpp (tokenize_impl,
 * tokenizer_st_partition, token_to_piece) so ids match it and the HF
 * tokenizers the GGUF was converted from; where llama.cpp would crash or
 * print, this file returns an error or takes the documented fallback.
 *
 * Invariants after tok_new: every id in special[] and byte_tok[] is -1 or
 * < n_vocab; text_off/piece_off are monotonic; the map holds each distinct
 * text once, mapped to its last id (llama.cpp's token_to_id[word] = i);
 * nothing is written after tok_new returns, so encode/decode are thread-safe.
 */
#include "text/tokenizer.h"

#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "text/tokenizer_int.h"

#define TOK_MAX_TEXT ((size_t)256 << 20) /* bytes of one text to encode: keeps every
                                            symbol index of an SPM word in int32 */
#define SP_BUCKETS 4096                  /* hash buckets of the special-token prefilter */
#define MEMO_MIN_TEXT 4096               /* bytes of text from which a call keeps a memo */
#define MEMO_SLOTS 65536                 /* most memo entries (used up to 3/4) */
#define MEMO_MAX_PIECE 64                /* bytes of the longest piece remembered */

/* ---------------------------------------------------------------------------
 * text -> id map
 * ------------------------------------------------------------------------- */

/* A fast multiplicative hash over 8-byte chunks; lookups hash every
 * candidate SPM bigram, so this sits on the encode hot path. */
static uint64_t hash_bytes(const char *s, size_t n)
{
    uint64_t h = 0x9E3779B97F4A7C15ull ^ ((uint64_t)n * 0xff51afd7ed558ccdull);
    uint64_t v;
    while (n >= 8) {
        memcpy(&v, s, 8);
        h = (h ^ v) * 0xbf58476d1ce4e5b9ull;
        h ^= h >> 29;
        s += 8;
        n -= 8;
    }
    v = 0;
    memcpy(&v, s, n);
    h = (h ^ v) * 0x94d049bb133111ebull;
    return h ^ (h >> 31);
}

static const char *token_text(const struct tok *t, int32_t id, size_t *len)
{
    *len = t->text_off[id + 1] - t->text_off[id] - 1;
    return t->text + t->text_off[id];
}

int32_t tok_lookup(const struct tok *t, const char *s, size_t len)
{
    if (len == 0 || len > t->max_token_len)
        return -1;
    uint64_t h = hash_bytes(s, len);
    uint32_t tag = (uint32_t)(h >> 32);
    for (uint64_t i = h & t->map_mask;; i = (i + 1) & t->map_mask) {
        const struct tok_slot *slot = &t->map[i];
        if (slot->id1 == 0)
            return -1;
        if (slot->tag != tag)
            continue; /* the tag spares a text compare (a cache miss) per probe */
        size_t n;
        const char *p = token_text(t, (int32_t)(slot->id1 - 1), &n);
        if (n == len && memcmp(p, s, len) == 0)
            return (int32_t)(slot->id1 - 1);
    }
}

/* Smallest power of two >= n * 4 / 3 + 1 (load factor at most 3/4). */
static uint64_t table_size(uint64_t n)
{
    uint64_t want = n + n / 3 + 1, size = 16;
    while (size < want)
        size <<= 1;
    return size;
}

/* Inserts every non-empty token; a repeated text maps to its last id. */
static int build_map(struct tok *t, struct mf_err *err)
{
    uint64_t size = table_size(t->n_vocab);
    t->map = calloc(size, sizeof *t->map);
    if (!t->map)
        return mf_err_set(err, MF_ENOMEM, "tokenizer: no memory for a %u-token map", t->n_vocab);
    t->map_mask = (uint32_t)(size - 1);
    for (uint32_t id = 0; id < t->n_vocab; id++) {
        size_t len;
        const char *s = token_text(t, (int32_t)id, &len);
        if (len == 0)
            continue; /* never looked up; llama.cpp renames these [EMPTY_i] */
        uint64_t h = hash_bytes(s, len), i = h & t->map_mask;
        for (; t->map[i].id1; i = (i + 1) & t->map_mask) {
            size_t n;
            const char *p = token_text(t, (int32_t)(t->map[i].id1 - 1), &n);
            if (n == len && memcmp(p, s, len) == 0)
                break;
        }
        t->map[i] = (struct tok_slot){id + 1, (uint32_t)(h >> 32)};
    }
    return 0;
}

/* ---------------------------------------------------------------------------
 * build: validation and copies
 * ------------------------------------------------------------------------- */

void tok_desc_init(struct tok_desc *d)
{
    memset(d, 0, sizeof *d);
    for (int i = 0; i < TOK_ID_COUNT; i++)
        d->special[i] = -1;
    d->add_bos = -1;
    d->add_eos = -1;
    d->add_space_prefix = -1;
}

static const char *const special_names[TOK_ID_COUNT] = {"bos", "eos", "unk", "sep",
                                                         "pad", "eot", "eom"};

/* Array lengths, limits, types, scores and special ids. */
static int check_desc(const struct tok_desc *d, struct mf_err *err)
{
    if (d->n_tokens == 0 || !d->tokens)
        return mf_err_set(err, MF_EFORMAT, "tokenizer: the vocabulary has no tokens");
    if (d->n_tokens > TOK_MAX_VOCAB)
        return mf_err_set(err, MF_ENOMEM, "tokenizer: %u tokens exceed the limit of %u",
                          d->n_tokens, TOK_MAX_VOCAB);
    if (d->scores && d->n_scores != d->n_tokens)
        return mf_err_set(err, MF_EFORMAT, "tokenizer: %u scores for %u tokens", d->n_scores,
                          d->n_tokens);
    if (d->types && d->n_types != d->n_tokens)
        return mf_err_set(err, MF_EFORMAT, "tokenizer: %u token types for %u tokens",
                          d->n_types, d->n_tokens);
    if (d->n_merges > TOK_MAX_MERGES)
        return mf_err_set(err, MF_ENOMEM, "tokenizer: %u merges exceed the limit of %u",
                          d->n_merges, TOK_MAX_MERGES);
    for (uint32_t i = 0; i < d->n_tokens; i++) {
        if (d->tokens[i].len > TOK_MAX_TOKEN_BYTES)
            return mf_err_set(err, MF_ENOMEM, "tokenizer: token %u is %zu bytes (limit %u)", i,
                              d->tokens[i].len, TOK_MAX_TOKEN_BYTES);
        if (d->tokens[i].len && !d->tokens[i].p)
            return mf_err_set(err, MF_EINVAL, "tokenizer: token %u has no text", i);
        if (d->types && (d->types[i] < TOK_TYPE_UNDEFINED || d->types[i] > TOK_TYPE_BYTE))
            return mf_err_set(err, MF_EFORMAT, "tokenizer: token %u has type %d (expected 0..6)",
                              i, (int)d->types[i]);
        if (d->scores && isnan(d->scores[i]))
            return mf_err_set(err, MF_EFORMAT, "tokenizer: token %u has a NaN score", i);
    }
    for (int k = 0; k < TOK_ID_COUNT; k++)
        if (d->special[k] < -1 || d->special[k] >= (int64_t)d->n_tokens)
            return mf_err_set(err, MF_ERANGE,
                              "tokenizer: %s token id %d is outside the vocabulary (0..%u)",
                              special_names[k], (int)d->special[k], d->n_tokens - 1);
    if (d->add_bos == 1 && d->special[TOK_ID_BOS] < 0)
        return mf_err_set(err, MF_ERANGE, "tokenizer: add_bos is set but there is no BOS token");
    if (d->add_eos == 1 && d->special[TOK_ID_EOS] < 0)
        return mf_err_set(err, MF_ERANGE, "tokenizer: add_eos is set but there is no EOS token");
    return 0;
}

/* Copies texts (NUL-terminated), types and scores. */
static int copy_vocab(struct tok *t, const struct tok_desc *d, struct mf_err *err)
{
    uint64_t total = 0;
    for (uint32_t i = 0; i < d->n_tokens; i++)
        total += d->tokens[i].len + 1;
    if (total > UINT32_MAX)
        return mf_err_set(err, MF_ENOMEM, "tokenizer: token texts total %llu bytes (limit 4 GiB)",
                          (unsigned long long)total);
    t->n_vocab = d->n_tokens;
    t->text = malloc(total);
    t->text_off = malloc(((size_t)t->n_vocab + 1) * sizeof *t->text_off);
    t->scores = calloc(t->n_vocab, sizeof *t->scores);
    t->type = malloc(t->n_vocab);
    t->flags = calloc(t->n_vocab, 1);
    if (!t->text || !t->text_off || !t->scores || !t->type || !t->flags)
        return mf_err_set(err, MF_ENOMEM, "tokenizer: no memory for %u tokens", t->n_vocab);
    uint32_t off = 0;
    for (uint32_t i = 0; i < t->n_vocab; i++) {
        size_t len = d->tokens[i].len;
        t->text_off[i] = off;
        if (len)
            memcpy(t->text + off, d->tokens[i].p, len);
        t->text[off + len] = '\0';
        off += (uint32_t)len + 1;
        if (len > t->max_token_len)
            t->max_token_len = (uint32_t)len;
        t->type[i] = (uint8_t)(d->types ? d->types[i] : TOK_TYPE_NORMAL);
        /* +0.0f folds -0.0 into 0.0: llama.cpp compares scores as floats */
        t->scores[i] = d->scores ? d->scores[i] + 0.0f : 0.0f;
    }
    t->text_off[t->n_vocab] = off;
    return 0;
}

/* ---------------------------------------------------------------------------
 * build: pieces, special tokens, end-of-generation
 * ------------------------------------------------------------------------- */

/* SPM text to bytes: U+2581 (LOWER ONE EIGHTH BLOCK) is sentencepiece's space. */
static size_t spm_unescape(const char *s, size_t len, char *out)
{
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (i + 2 < len && memcmp(s + i, "\xe2\x96\x81", 3) == 0) {
            out[n++] = ' ';
            i += 2;
        } else {
            out[n++] = s[i];
        }
    }
    return n;
}

/* What one token decodes to, written at out (which has room for its text). */
static size_t make_piece(const struct tok *t, int32_t id, char *out)
{
    size_t len;
    const char *s = token_text(t, id, &len);
    switch (t->type[id]) {
    case TOK_TYPE_CONTROL:
    case TOK_TYPE_UNKNOWN:
    case TOK_TYPE_USER_DEFINED:
        memcpy(out, s, len);
        return len;
    case TOK_TYPE_NORMAL:
        if (t->model == TOK_MODEL_BPE)
            return tok_bpe_unmap(s, len, out);
        return spm_unescape(s, len, out);
    case TOK_TYPE_BYTE:
        if (t->model == TOK_MODEL_SPM) {
            out[0] = (char)strtol(s + 3, NULL, 16); /* "<0xHH>", checked by tok_spm_init */
            return 1;
        }
        return 0;
    default:
        return 0; /* unused and undefined tokens render as nothing, as in llama.cpp */
    }
}

static int build_pieces(struct tok *t, struct mf_err *err)
{
    t->piece = malloc(t->text_off[t->n_vocab] + 1);
    t->piece_off = malloc(((size_t)t->n_vocab + 1) * sizeof *t->piece_off);
    if (!t->piece || !t->piece_off)
        return mf_err_set(err, MF_ENOMEM, "tokenizer: no memory for decoded pieces");
    uint32_t off = 0;
    for (uint32_t id = 0; id < t->n_vocab; id++) {
        t->piece_off[id] = off;
        off += (uint32_t)make_piece(t, (int32_t)id, t->piece + off);
    }
    t->piece_off[t->n_vocab] = off;
    return 0;
}

static int is_special_type(uint8_t type)
{
    return type == TOK_TYPE_CONTROL || type == TOK_TYPE_USER_DEFINED ||
           type == TOK_TYPE_UNKNOWN;
}

struct sp_sort {
    uint32_t len; /* bytes of the token text */
    int32_t id;   /* token */
};

/* Longest first, then lowest id. */
static int cmp_special(const void *a, const void *b)
{
    const struct sp_sort *x = a, *y = b;
    if (x->len != y->len)
        return x->len > y->len ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* Bucket of a special token's first two bytes (one byte: its own bucket). */
static uint32_t sp_bucket(const char *s, size_t len)
{
    unsigned b0 = (unsigned char)s[0], b1 = len > 1 ? (unsigned char)s[1] + 1u : 0;
    return (b0 * 257u + b1) % SP_BUCKETS;
}

/* The bucket index of the specials that `all` selects (else only the
 * user-defined ones): a counting sort, so each bucket keeps priority order. */
static int build_sp_index(struct tok *t, int all, struct mf_err *err)
{
    struct tok_sp_index *ix = &t->sp_ix[all];
    ix->start = calloc(SP_BUCKETS + 1, sizeof *ix->start);
    ix->idx = malloc(((size_t)t->n_specials + 1) * sizeof *ix->idx);
    if (!ix->start || !ix->idx)
        return mf_err_set(err, MF_ENOMEM, "tokenizer: no memory for %u special tokens",
                          t->n_specials);
    size_t len;
    for (uint32_t i = 0; i < t->n_specials; i++) {
        const char *s = token_text(t, t->specials[i], &len);
        if (all || t->type[t->specials[i]] == TOK_TYPE_USER_DEFINED)
            ix->start[sp_bucket(s, len) + 1]++;
    }
    for (uint32_t b = 0; b < SP_BUCKETS; b++)
        ix->start[b + 1] += ix->start[b];
    ix->n = ix->start[SP_BUCKETS];
    uint32_t pos[SP_BUCKETS];
    memcpy(pos, ix->start, sizeof pos);
    for (uint32_t i = 0; i < t->n_specials; i++) {
        const char *s = token_text(t, t->specials[i], &len);
        if (all || t->type[t->specials[i]] == TOK_TYPE_USER_DEFINED)
            ix->idx[pos[sp_bucket(s, len)]++] = i;
    }
    return 0;
}

/*
 * The partition list: control, user-defined and unknown tokens, longest
 * first (llama.cpp's cache_special_tokens; it breaks ties arbitrarily, this
 * by id), plus two bucket indexes by their first two bytes (user-defined
 * only, for plain encoding; all, for parse_special) so tok_encode finds the
 * ones a text contains in one pass.
 */
static int sort_specials(struct tok *t, struct mf_err *err)
{
    uint32_t n = 0;
    for (uint32_t id = 0; id < t->n_vocab; id++)
        n += is_special_type(t->type[id]) && t->text_off[id + 1] - t->text_off[id] > 1;
    t->specials = malloc(((size_t)n + 1) * sizeof *t->specials);
    struct sp_sort *order = malloc(((size_t)n + 1) * sizeof *order);
    if (!t->specials || !order) {
        free(order);
        return mf_err_set(err, MF_ENOMEM, "tokenizer: no memory for %u special tokens", n);
    }
    n = 0;
    for (uint32_t id = 0; id < t->n_vocab; id++)
        if (is_special_type(t->type[id]) && t->text_off[id + 1] - t->text_off[id] > 1)
            order[n++] = (struct sp_sort){t->text_off[id + 1] - t->text_off[id], (int32_t)id};
    qsort(order, n, sizeof *order, cmp_special);
    for (uint32_t i = 0; i < n; i++)
        t->specials[i] = order[i].id;
    free(order);
    t->n_specials = n;
    int rc = build_sp_index(t, 0, err);
    return rc ? rc : build_sp_index(t, 1, err);
}

/* llama.cpp sets RSTRIP on phi-3's added tokens by model name (llama-vocab.cpp
 * "phi-3"/"phi3"), so "<|user|>\n" eats the newline as HF's tokenizer does. */
static void apply_name_quirks(struct tok *t, const char *name)
{
    char low[128];
    size_t n = 0;
    for (; name && name[n] && n + 1 < sizeof low; n++)
        low[n] = (char)tolower((unsigned char)name[n]);
    low[n] = '\0';
    if (!strstr(low, "phi-3") && !strstr(low, "phi3"))
        return;
    for (uint32_t id = 0; id < t->n_vocab; id++)
        if (is_special_type(t->type[id]))
            t->flags[id] |= TOKF_RSTRIP;
    static const char *const on[] = {"</s>"}, *const off[] = {"<unk>", "<s>", "<|endoftext|>"};
    int32_t id = tok_lookup(t, on[0], strlen(on[0]));
    if (id >= 0)
        t->flags[id] |= TOKF_RSTRIP;
    for (size_t i = 0; i < sizeof off / sizeof off[0]; i++)
        if ((id = tok_lookup(t, off[i], strlen(off[i]))) >= 0)
            t->flags[id] &= (uint8_t)~TOKF_RSTRIP;
}

/* End-of-generation tokens: EOS/EOT/EOM and the texts llama.cpp recognises
 * (special_eog_ids, "</s>" included since paddleocr), which it also forces to
 * CONTROL so they are neither matched in plain text nor rendered by default
 * (phi-3's user-defined "</s>" among them). The first of them found
 * becomes EOT when the metadata names none. */
static void mark_eog(struct tok *t)
{
    static const char *const eog[] = {
        "<|eot_id|>",    "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
        "<|eom_id|>",    "<EOT>",      "_<EOT>",  "<|end_of_text|>", "<end_of_utterance>",
        "<|return|>",    "<|call|>",   "</s>",
    };
    for (size_t i = 0; i < sizeof eog / sizeof eog[0]; i++) {
        int32_t id = tok_lookup(t, eog[i], strlen(eog[i]));
        if (id < 0)
            continue;
        t->flags[id] |= TOKF_EOG;
        t->type[id] = TOK_TYPE_CONTROL;
        if (t->special[TOK_ID_EOT] < 0 && i < 4)
            t->special[TOK_ID_EOT] = id; /* the turn-end spellings, not <|endoftext|> */
    }
    static const int which[] = {TOK_ID_EOS, TOK_ID_EOT, TOK_ID_EOM};
    for (size_t i = 0; i < sizeof which / sizeof which[0]; i++)
        if (t->special[which[i]] >= 0)
            t->flags[t->special[which[i]]] |= TOKF_EOG;
}

/* add_bos/add_eos/add_space_prefix: the description, else the model's default. */
static void resolve_flags(struct tok *t, const struct tok_desc *d, int pre_add_bos)
{
    memcpy(t->special, d->special, sizeof t->special);
    int def_bos = t->model == TOK_MODEL_SPM ? 1 : pre_add_bos;
    t->add_bos = d->add_bos >= 0 ? d->add_bos : def_bos && t->special[TOK_ID_BOS] >= 0;
    t->add_eos = d->add_eos > 0;
    t->add_space_prefix =
        d->add_space_prefix >= 0 ? d->add_space_prefix : t->model == TOK_MODEL_SPM;
}

int tok_new(const struct tok_desc *d, struct tok **out, struct mf_err *err)
{
    *out = NULL;
    struct tok *t = calloc(1, sizeof *t);
    if (!t)
        return mf_err_set(err, MF_ENOMEM, "tokenizer: no memory");
    int rc;
    if (!d->model || (strcmp(d->model, "llama") && strcmp(d->model, "gpt2"))) {
        rc = mf_err_set(err, MF_EUNSUPPORTED,
                        "tokenizer: model '%s' is not supported (only llama and gpt2)",
                        d->model ? d->model : "(none)");
        goto fail;
    }
    t->model = strcmp(d->model, "llama") == 0 ? TOK_MODEL_SPM : TOK_MODEL_BPE;
    rc = check_desc(d, err);
    if (rc)
        goto fail;
    rc = copy_vocab(t, d, err);
    if (rc)
        goto fail;
    rc = build_map(t, err);
    if (rc)
        goto fail;
    rc = t->model == TOK_MODEL_SPM ? tok_spm_init(t, err) : tok_bpe_init(t, d, err);
    if (rc)
        goto fail;
    resolve_flags(t, d, t->model == TOK_MODEL_BPE && tok_bpe_pre_adds_bos(t));
    apply_name_quirks(t, d->name);
    mark_eog(t);
    rc = build_pieces(t, err);
    if (rc)
        goto fail;
    rc = sort_specials(t, err);
    if (rc)
        goto fail;
    *out = t;
    return 0;

fail:
    tok_free(t);
    return rc;
}

void tok_free(struct tok *t)
{
    if (!t)
        return;
    tok_bpe_fini(t);
    free(t->text);
    free(t->text_off);
    free(t->piece);
    free(t->piece_off);
    free(t->scores);
    free(t->type);
    free(t->flags);
    free(t->map);
    free(t->specials);
    for (int i = 0; i < 2; i++) {
        free(t->sp_ix[i].start);
        free(t->sp_ix[i].idx);
    }
    free(t);
}

/* ---------------------------------------------------------------------------
 * facts
 * ------------------------------------------------------------------------- */

enum tok_model tok_model(const struct tok *t)
{
    return t->model;
}

const char *tok_pre(const struct tok *t)
{
    return t->model == TOK_MODEL_BPE ? tok_bpe_pre_name(t) : "default";
}

uint32_t tok_n_vocab(const struct tok *t)
{
    return t->n_vocab;
}

int32_t tok_special_id(const struct tok *t, enum tok_special which)
{
    return (unsigned)which < TOK_ID_COUNT ? t->special[which] : -1;
}

int tok_adds_bos(const struct tok *t)
{
    return t->add_bos;
}

int tok_adds_eos(const struct tok *t)
{
    return t->add_eos;
}

int tok_is_eog(const struct tok *t, int32_t id)
{
    return id >= 0 && (uint32_t)id < t->n_vocab && (t->flags[id] & TOKF_EOG);
}

enum tok_type tok_token_type(const struct tok *t, int32_t id)
{
    if (id < 0 || (uint32_t)id >= t->n_vocab)
        return TOK_TYPE_UNDEFINED;
    return (enum tok_type)t->type[id];
}

const char *tok_token_text(const struct tok *t, int32_t id, size_t *len)
{
    if (id < 0 || (uint32_t)id >= t->n_vocab)
        return NULL;
    size_t n;
    const char *s = token_text(t, id, &n);
    if (len)
        *len = n;
    return s;
}

int32_t tok_find(const struct tok *t, const char *s, size_t len)
{
    return tok_lookup(t, s, len);
}

/* ---------------------------------------------------------------------------
 * id lists and scratch memory
 * ------------------------------------------------------------------------- */

void tok_ids_init(struct tok_ids *ids, size_t max)
{
    ids->v = NULL;
    ids->n = 0;
    ids->cap = 0;
    ids->max = max;
}

void tok_ids_free(struct tok_ids *ids)
{
    if (!ids)
        return;
    free(ids->v);
    ids->v = NULL;
    ids->n = 0;
    ids->cap = 0;
}

int tok_ids_push(struct tok_ids *ids, int32_t id, struct mf_err *err)
{
    if (ids->n >= ids->max)
        return mf_err_set(err, MF_ENOMEM, "tokenizer: more than %zu tokens", ids->max);
    if (ids->n == ids->cap) {
        size_t cap = ids->cap ? ids->cap * 2 : 64;
        if (cap > ids->max)
            cap = ids->max;
        int32_t *v = realloc(ids->v, cap * sizeof *v);
        if (!v)
            return mf_err_set(err, MF_ENOMEM, "tokenizer: no memory for %zu tokens", cap);
        ids->v = v;
        ids->cap = cap;
    }
    ids->v[ids->n++] = id;
    return 0;
}

int tok_grow(void **arr, size_t *cap, size_t n, size_t size, struct mf_err *err)
{
    if (n < *cap)
        return 0;
    size_t c = *cap ? *cap : 64;
    while (c <= n)
        c *= 2;
    void *p = realloc(*arr, c * size);
    if (!p)
        return mf_err_set(err, MF_ENOMEM, "tokenizer: no memory for %zu entries", c);
    *arr = p;
    *cap = c;
    return 0;
}

int tok_scratch_buf(char **buf, size_t *cap, size_t need, struct mf_err *err)
{
    return need ? tok_grow((void **)buf, cap, need - 1, 1, err) : 0;
}

int tok_scratch_reserve(struct tok_scratch *s, size_t n, struct mf_err *err)
{
    s->heap_n = 0;
    if (n <= s->sym_cap)
        return 0;
    size_t cap = s->sym_cap ? s->sym_cap : 64;
    while (cap < n)
        cap *= 2;
    struct tok_sym *sym = realloc(s->sym, cap * sizeof *sym);
    if (!sym)
        return mf_err_set(err, MF_ENOMEM, "tokenizer: no memory for a %zu-byte word", n);
    s->sym = sym;
    s->sym_cap = cap;
    struct tok_pair *heap = realloc(s->heap, 3 * cap * sizeof *heap);
    if (!heap)
        return mf_err_set(err, MF_ENOMEM, "tokenizer: no memory for a %zu-byte word", n);
    s->heap = heap;
    s->heap_cap = 3 * cap;
    return 0;
}

void tok_heap_push(struct tok_scratch *s, const struct tok_pair *p)
{
    size_t i = s->heap_n++;
    while (i > 0) {
        size_t up = (i - 1) / 2;
        if (s->heap[up].key <= p->key)
            break;
        s->heap[i] = s->heap[up];
        i = up;
    }
    s->heap[i] = *p;
}

int tok_heap_pop(struct tok_scratch *s, struct tok_pair *out)
{
    if (s->heap_n == 0)
        return 0;
    *out = s->heap[0];
    struct tok_pair last = s->heap[--s->heap_n];
    size_t i = 0, n = s->heap_n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && s->heap[c + 1].key < s->heap[c].key)
            c++;
        if (last.key <= s->heap[c].key)
            break;
        s->heap[i] = s->heap[c];
        i = c;
    }
    if (n)
        s->heap[i] = last;
    return 1;
}

/* ---------------------------------------------------------------------------
 * per-call memo: natural text repeats its words, and a remembered word
 * costs one probe in a small hot table instead of a merge over cold vocab
 * and merge tables (3-4x on English prose). Per call, so struct tok stays
 * immutable and shared between threads.
 * ------------------------------------------------------------------------- */

struct tok_memo_ent {
    uint64_t hash;    /* of the piece; 0 marks an empty slot */
    uint32_t key;     /* offset of the piece's bytes in keys */
    uint32_t len;     /* bytes of the piece */
    uint32_t ids;     /* offset of its ids in idv */
    uint32_t n_ids;   /* ids */
};

struct tok_memo {
    struct tok_memo_ent *slot; /* owned: n_slots entries, open addressing */
    uint32_t n_slots;          /* a power of two; used up to 3/4 */
    uint32_t used;             /* slots taken */
    char *keys;                /* owned: piece bytes */
    uint32_t keys_cap;         /* bytes allocated (n_slots * 12: words average < 8) */
    uint32_t keys_used;        /* bytes taken */
    int32_t *idv;              /* owned: ids of every piece */
    uint32_t idv_cap;          /* entries allocated (n_slots * 3) */
    uint32_t idv_used;         /* entries taken */
};

/* A memo sized for a text of len bytes (about one slot per 4 bytes, at most
 * MEMO_SLOTS), or NULL: the memo is optional, so failing to get one is not
 * an error. */
static struct tok_memo *memo_new(size_t len)
{
    uint32_t n = 1024;
    while (n < MEMO_SLOTS && n < len / 4)
        n *= 2;
    struct tok_memo *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    m->n_slots = n;
    m->keys_cap = n * 12;
    m->idv_cap = n * 3;
    m->slot = calloc(n, sizeof *m->slot);
    m->keys = malloc(m->keys_cap);
    m->idv = malloc(m->idv_cap * sizeof *m->idv);
    if (!m->slot || !m->keys || !m->idv) {
        free(m->slot);
        free(m->keys);
        free(m->idv);
        free(m);
        return NULL;
    }
    return m;
}

static void memo_free(struct tok_memo *m)
{
    if (!m)
        return;
    free(m->slot);
    free(m->keys);
    free(m->idv);
    free(m);
}

static uint64_t memo_hash(const char *p, size_t n)
{
    return hash_bytes(p, n) | 1; /* never 0, the empty mark */
}

int tok_memo_get(struct tok_scratch *s, const char *p, size_t n, struct tok_ids *out,
                 struct mf_err *err, int *rc)
{
    struct tok_memo *m = s->memo;
    if (!m || n > MEMO_MAX_PIECE)
        return 0;
    uint64_t h = memo_hash(p, n);
    for (uint32_t i = (uint32_t)h & (m->n_slots - 1);; i = (i + 1) & (m->n_slots - 1)) {
        const struct tok_memo_ent *e = &m->slot[i];
        if (e->hash == 0)
            return 0;
        if (e->hash == h && e->len == n && memcmp(m->keys + e->key, p, n) == 0) {
            *rc = 0;
            for (uint32_t k = 0; k < e->n_ids && !*rc; k++)
                *rc = tok_ids_push(out, m->idv[e->ids + k], err);
            return 1;
        }
    }
}

void tok_memo_put(struct tok_scratch *s, const char *p, size_t n, const int32_t *ids,
                  size_t n_ids)
{
    struct tok_memo *m = s->memo;
    if (!m || n > MEMO_MAX_PIECE || n_ids > MEMO_MAX_PIECE || m->used >= m->n_slots / 4 * 3 ||
        m->keys_used + n > m->keys_cap || m->idv_used + n_ids > m->idv_cap)
        return;
    uint64_t h = memo_hash(p, n);
    uint32_t i = (uint32_t)h & (m->n_slots - 1);
    while (m->slot[i].hash)
        i = (i + 1) & (m->n_slots - 1);
    m->slot[i] = (struct tok_memo_ent){h, m->keys_used, (uint32_t)n, m->idv_used, (uint32_t)n_ids};
    memcpy(m->keys + m->keys_used, p, n);
    memcpy(m->idv + m->idv_used, ids, n_ids * sizeof *ids);
    m->keys_used += (uint32_t)n;
    m->idv_used += (uint32_t)n_ids;
    m->used++;
}

static void scratch_fini(struct tok_scratch *s)
{
    memo_free(s->memo);
    free(s->buf);
    free(s->word);
    free(s->sym);
    free(s->heap);
    free(s->span[0]);
    free(s->span[1]);
    free(s->frag[0]);
    free(s->frag[1]);
    free(s->present);
    tok_bpe_scratch_fini(s);
}

/* ---------------------------------------------------------------------------
 * special-token partition (llama.cpp tokenizer_st_partition)
 * ------------------------------------------------------------------------- */

static int frag_push(struct tok_scratch *s, int k, int32_t id, size_t off, size_t len,
                     struct mf_err *err)
{
    int rc = tok_grow((void **)&s->frag[k], &s->frag_cap[k], s->frag_n[k], sizeof *s->frag[k], err);
    if (!rc)
        s->frag[k][s->frag_n[k]++] = (struct tok_frag){.id = id, .off = off, .len = len};
    return rc;
}

/* Marks in s->present the specials of index ix that occur anywhere in text:
 * one pass over the text, each position checked only against its buckets. */
static int find_present(const struct tok *t, const struct tok_sp_index *ix,
                        struct tok_scratch *s, const char *text, size_t len, struct mf_err *err)
{
    free(s->present);
    s->present = calloc(t->n_specials + 1, 1);
    if (!s->present)
        return mf_err_set(err, MF_ENOMEM, "tokenizer: no memory");
    for (size_t i = 0; i < len; i++) {
        for (int two = 0; two < 2 && i + two < len; two++) {
            uint32_t b = sp_bucket(text + i, two ? 2 : 1);
            for (uint32_t k = ix->start[b]; k < ix->start[b + 1]; k++) {
                uint32_t sp = ix->idx[k];
                size_t n;
                const char *p = token_text(t, t->specials[sp], &n);
                if (!s->present[sp] && (n > 1) == two && n <= len - i &&
                    memcmp(p, text + i, n) == 0)
                    s->present[sp] = 1;
            }
        }
    }
    return 0;
}

/* Splits every raw fragment of list `from` on occurrences of special id into
 * list `to`, leftmost first, stripping whitespace next to it where the token
 * says so (llama.cpp's LSTRIP/RSTRIP; isspace over ASCII as there). */
static int split_on(const struct tok *t, struct tok_scratch *s, const char *text, int from,
                    int32_t id, struct mf_err *err)
{
    int to = !from, rc = 0;
    size_t n;
    const char *p = token_text(t, id, &n);
    s->frag_n[to] = 0;
    for (size_t i = 0; i < s->frag_n[from] && !rc; i++) {
        struct tok_frag f = s->frag[from][i];
        const char *hit;
        while (f.id < 0 && (hit = memmem(text + f.off, f.len, p, n)) != NULL) {
            size_t at = (size_t)(hit - text), left = at - f.off;
            if (t->flags[id] & TOKF_LSTRIP)
                while (left > 0 && isspace((unsigned char)text[f.off + left - 1]))
                    left--;
            if (left > 0 && (rc = frag_push(s, to, -1, f.off, left, err)))
                return rc;
            if ((rc = frag_push(s, to, id, at, n, err)))
                return rc;
            size_t end = f.off + f.len;
            f.off = at + n;
            if (t->flags[id] & TOKF_RSTRIP)
                while (f.off < end && isspace((unsigned char)text[f.off]))
                    f.off++;
            f.len = end - f.off;
        }
        if ((f.id >= 0 || f.len > 0) && (rc = frag_push(s, to, f.id, f.off, f.len, err)))
            return rc;
    }
    return rc;
}

/* Leaves in s->frag[*which] the text cut into raw runs (id -1) and tokens. */
static int partition(const struct tok *t, struct tok_scratch *s, const char *text, size_t len,
                     int parse_special, int *which, struct mf_err *err)
{
    int cur = 0, rc;
    s->frag_n[0] = 0;
    const struct tok_sp_index *ix = &t->sp_ix[parse_special != 0];
    rc = frag_push(s, 0, -1, 0, len, err);
    if (rc || ix->n == 0)
        goto done;
    rc = find_present(t, ix, s, text, len, err);
    for (uint32_t i = 0; i < t->n_specials && !rc; i++) {
        if (!s->present[i])
            continue;
        rc = split_on(t, s, text, cur, t->specials[i], err);
        cur = !cur;
    }
done:
    *which = cur;
    return rc;
}

/* ---------------------------------------------------------------------------
 * encode (llama.cpp tokenize_impl)
 * ------------------------------------------------------------------------- */

static int want(const struct tok *t, unsigned flags, unsigned on, unsigned off, int meta)
{
    if (flags & off)
        return 0;
    return (flags & on) || ((flags & TOK_ADD_SPECIAL) && meta);
}

static int encode_frags(const struct tok *t, struct tok_scratch *s, const char *text, int k,
                        struct tok_ids *out, struct mf_err *err)
{
    /* SPM puts a space in front of the text and after every special token
     * ("prefix with space if previous is special") */
    int prev_special = 1, rc = 0;
    for (size_t i = 0; i < s->frag_n[k] && !rc; i++) {
        struct tok_frag f = s->frag[k][i];
        if (f.id >= 0) {
            rc = tok_ids_push(out, f.id, err);
            prev_special = 1;
        } else if (t->model == TOK_MODEL_SPM) {
            rc = tok_spm_encode(t, s, text + f.off, f.len,
                                t->add_space_prefix && prev_special, out, err);
            prev_special = 0;
        } else {
            rc = tok_bpe_encode(t, s, text + f.off, f.len, out, err);
        }
    }
    return rc;
}

int tok_encode(const struct tok *t, const char *text, size_t len, unsigned flags,
               struct tok_ids *out, struct mf_err *err)
{
    int bos = want(t, flags, TOK_BOS, TOK_NO_BOS, t->add_bos);
    int eos = want(t, flags, TOK_EOS, TOK_NO_EOS, t->add_eos);
    if (bos && t->special[TOK_ID_BOS] < 0)
        return mf_err_set(err, MF_EINVAL, "tokenizer: BOS requested but the vocabulary has none");
    if (eos && t->special[TOK_ID_EOS] < 0)
        return mf_err_set(err, MF_EINVAL, "tokenizer: EOS requested but the vocabulary has none");
    if (len > TOK_MAX_TEXT)
        return mf_err_set(err, MF_ENOMEM, "tokenizer: a text of %zu bytes exceeds the limit of %zu",
                          len, TOK_MAX_TEXT);
    struct tok_scratch s;
    memset(&s, 0, sizeof s);
    if (len >= MEMO_MIN_TEXT)
        s.memo = memo_new(len); /* optional: without it every piece is merged */
    int k = 0, rc = 0;
    if (bos)
        rc = tok_ids_push(out, t->special[TOK_ID_BOS], err);
    if (!rc && len > 0)
        rc = partition(t, &s, text, len, (flags & TOK_PARSE_SPECIAL) != 0, &k, err);
    if (!rc && len > 0)
        rc = encode_frags(t, &s, text, k, out, err);
    if (!rc && eos)
        rc = tok_ids_push(out, t->special[TOK_ID_EOS], err);
    scratch_fini(&s);
    return rc;
}

/* ---------------------------------------------------------------------------
 * decode
 * ------------------------------------------------------------------------- */

static int rendered(const struct tok *t, int32_t id, unsigned flags)
{
    uint8_t type = t->type[id];
    return (flags & TOK_RENDER_SPECIAL) || (type != TOK_TYPE_CONTROL && type != TOK_TYPE_UNKNOWN);
}

int tok_piece(const struct tok *t, int32_t id, unsigned flags, const char **p, size_t *len,
              struct mf_err *err)
{
    if (id < 0 || (uint32_t)id >= t->n_vocab)
        return mf_err_set(err, MF_ERANGE, "tokenizer: token id %d is outside the vocabulary (0..%u)",
                          (int)id, t->n_vocab - 1);
    *p = t->piece + t->piece_off[id];
    *len = rendered(t, id, flags) ? t->piece_off[id + 1] - t->piece_off[id] : 0;
    return 0;
}

int tok_decode(const struct tok *t, const int32_t *ids, size_t n, unsigned flags,
               struct mf_buf *out, struct mf_err *err)
{
    int strip = (flags & TOK_STRIP_SPACE) != 0;
    for (size_t i = 0; i < n; i++) {
        const char *p = NULL;
        size_t len = 0;
        int rc = tok_piece(t, ids[i], flags, &p, &len, err);
        if (rc)
            return mf_err_prefix(err, "id %zu of %zu", i, n);
        if (len == 0)
            continue;
        if (strip && p[0] == ' ') {
            p++;
            len--;
        }
        strip = 0;
        rc = mf_buf_append(out, p, len, err);
        if (rc)
            return rc;
    }
    return 0;
}

/* ---------------------------------------------------------------------------
 * streaming detokenizer
 * ------------------------------------------------------------------------- */

void tok_stream_init(struct tok_stream *s, const struct tok *t, unsigned flags)
{
    memset(s, 0, sizeof *s);
    s->tok = t;
    s->flags = flags;
}

/* Bytes of the longest valid prefix of a UTF-8 sequence at u[0..n): the
 * whole sequence (its length, complete), or how far a valid start goes
 * before the bytes run out (*partial = 1) or break (*partial = 0). Uses the
 * well-formed table of Unicode 15 §3.9 (no overlongs, no surrogates). */
static size_t utf8_prefix(const unsigned char *u, size_t n, size_t *need, int *partial)
{
    unsigned char lo = 0x80, hi = 0xBF;
    size_t want;
    *partial = 0;
    if (u[0] < 0x80) {
        *need = 1;
        return 1;
    } else if (u[0] >= 0xC2 && u[0] <= 0xDF) {
        want = 2;
    } else if (u[0] >= 0xE0 && u[0] <= 0xEF) {
        want = 3;
        lo = u[0] == 0xE0 ? 0xA0 : 0x80;
        hi = u[0] == 0xED ? 0x9F : 0xBF;
    } else if (u[0] >= 0xF0 && u[0] <= 0xF4) {
        want = 4;
        lo = u[0] == 0xF0 ? 0x90 : 0x80;
        hi = u[0] == 0xF4 ? 0x8F : 0xBF;
    } else {
        *need = 1;
        return 0; /* C0, C1, F5..FF and stray continuation bytes */
    }
    *need = want;
    for (size_t i = 1; i < want; i++) {
        if (i >= n) {
            *partial = 1;
            return i;
        }
        if (u[i] < lo || u[i] > hi)
            return i;
        lo = 0x80;
        hi = 0xBF;
    }
    return want;
}

/* Validates p[0..n) (after the held bytes) into tmp; leaves the incomplete
 * tail in hold/n_hold. */
static int stream_bytes(const unsigned char *p, size_t n, struct mf_buf *tmp,
                        unsigned char *hold, size_t *n_hold, struct mf_err *err)
{
    static const char repl[] = "\xEF\xBF\xBD";
    size_t i = 0;
    int rc = 0;
    while (i < n && !rc) {
        size_t need, k;
        int partial;
        k = utf8_prefix(p + i, n - i, &need, &partial);
        if (partial) {
            memcpy(hold, p + i, n - i);
            *n_hold = n - i;
            return 0;
        }
        if (k == need)
            rc = mf_buf_append(tmp, p + i, k, err);
        else
            rc = mf_buf_append(tmp, repl, 3, err);
        i += k ? k : 1;
    }
    *n_hold = 0;
    return rc;
}

int tok_stream_push(struct tok_stream *s, int32_t id, struct mf_buf *out, struct mf_err *err)
{
    const char *p = NULL;
    size_t len = 0;
    int rc = tok_piece(s->tok, id, s->flags, &p, &len, err);
    if (rc || len == 0)
        return rc;
    if ((s->flags & TOK_STRIP_SPACE) && !s->started && p[0] == ' ') {
        p++;
        len--;
    }
    /* held bytes + piece, validated into a private buffer and appended in one
     * call, so a full `out` leaves the stream as it was */
    struct mf_buf in, tmp;
    mf_buf_init(&in, len + sizeof s->pend);
    mf_buf_init(&tmp, 3 * (len + sizeof s->pend));
    unsigned char hold[4];
    size_t n_hold = 0;
    rc = mf_buf_append(&in, s->pend, s->n_pend, err);
    if (!rc)
        rc = mf_buf_append(&in, p, len, err);
    if (!rc)
        rc = stream_bytes((const unsigned char *)in.data, in.len, &tmp, hold, &n_hold, err);
    if (!rc && tmp.len)
        rc = mf_buf_append(out, tmp.data, tmp.len, err);
    if (!rc) {
        memcpy(s->pend, hold, n_hold);
        s->n_pend = n_hold;
        s->started = 1;
    }
    mf_buf_free(&in);
    mf_buf_free(&tmp);
    return rc;
}

int tok_stream_flush(struct tok_stream *s, struct mf_buf *out, struct mf_err *err)
{
    if (s->n_pend == 0)
        return 0;
    int rc = mf_buf_append(out, "\xEF\xBF\xBD", 3, err);
    if (!rc)
        s->n_pend = 0;
    return rc;
}
