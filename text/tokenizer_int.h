/*
 * tokenizer_int.h: internals shared by text/tokenizer*.c and the tokenizer
 * tests. Not an API: everything here may change with the implementation.
 *
 * tokenizer.c      build, vocabulary map, special-token partition, encode
 *                  driver, decode, streaming detokenizer
 * tokenizer_spm.c  SentencePiece-style merge by score with byte fallback
 * tokenizer_bpe.c  pre-tokenizer regexes (PCRE2), byte-level alphabet,
 *                  ranked BPE merges
 * tokenizer_gguf.c tok_load_gguf: tokenizer.ggml.* -> struct tok_desc
 */
#ifndef MF_TOKENIZER_INT_H
#define MF_TOKENIZER_INT_H

#include <stddef.h>
#include <stdint.h>

#include "text/tokenizer.h"

/* Per-token flags kept next to the type (llama.cpp LLAMA_TOKEN_ATTR_*). */
enum {
    TOKF_LSTRIP = 1u << 0, /* a match in text eats the whitespace to its left */
    TOKF_RSTRIP = 1u << 1, /* ... and to its right (phi-3's added tokens) */
    TOKF_EOG = 1u << 2,    /* ends generation */
};

/* One merge of the BPE table, keyed by the ids of its two parts. */
struct tok_merge {
    uint64_t key;   /* (left id << 32) | right id; valid when rank != UINT32_MAX */
    uint32_t rank;  /* position in tokenizer.ggml.merges: lower merges first */
    int32_t result; /* id of left+right (checked to exist at build) */
};

struct tok_pre_def; /* tokenizer_bpe.c: one pre-tokenizer's regexes */

/* Special tokens grouped by a hash of their first two bytes (one byte for a
 * one-byte token), for finding the ones a text contains. */
struct tok_sp_index {
    uint32_t *start; /* owned: 4097 offsets into idx, one run per bucket */
    uint32_t *idx;   /* owned: indices into struct tok's specials, by bucket */
    uint32_t n;      /* entries in idx */
};

/* One slot of the text -> id map. */
struct tok_slot {
    uint32_t id1; /* token id + 1; 0 for an empty slot */
    uint32_t tag; /* high half of the text's hash */
};

struct tok {
    enum tok_model model;         /* SPM or BPE */
    const struct tok_pre_def *pre; /* BPE pre-tokenizer; NULL for SPM */
    uint32_t n_vocab;             /* tokens */
    char *text;                   /* owned: every token's text, each NUL-terminated */
    uint32_t *text_off;           /* owned: (n_vocab + 1) offsets into text; the NUL is
                                     not counted in off[i+1] - off[i] - 1 */
    char *piece;                  /* owned: every token's decoded bytes, concatenated */
    uint32_t *piece_off;          /* owned: (n_vocab + 1) offsets into piece */
    float *scores;                /* owned: n_vocab SPM scores */
    uint8_t *type;                /* owned: n_vocab enum tok_type */
    uint8_t *flags;               /* owned: n_vocab TOKF_* */
    struct tok_slot *map;         /* owned: text -> id hash, open addressing, linear
                                     probing; (map_mask + 1) slots, at most 3/4 full */
    uint32_t map_mask;            /* slots - 1 (a power of two minus one) */
    uint32_t max_token_len;       /* bytes of the longest token text */
    struct tok_merge *merges;     /* owned: BPE (left, right) -> rank; NULL for SPM */
    uint32_t merge_mask;          /* slots - 1 */
    int32_t byte_tok[256];        /* SPM: the <0xXX> token (or the 1-byte token) of each
                                     byte; BPE: the token of each byte's byte-level char;
                                     -1 when the vocabulary lacks it */
    char byte_utf8[256][2];       /* BPE: each byte's char of the GPT-2 byte-level alphabet */
    uint8_t byte_utf8_len[256];   /* BPE: its UTF-8 length, 1 or 2 */
    int32_t special[TOK_ID_COUNT]; /* ids or -1 */
    int add_bos;                  /* TOK_ADD_SPECIAL adds BOS */
    int add_eos;                  /* TOK_ADD_SPECIAL adds EOS */
    int add_space_prefix;         /* SPM: a space goes in front of the text (and after
                                     each special token), as sentencepiece does */
    int spm_split;                /* SPM: no token has U+2581 after another character, so
                                     a text can be merged word by word (see tokenizer_spm.c) */
    int32_t *specials;            /* owned: control, user-defined and unknown ids, longest
                                     text first (ties by id), for the partition */
    uint32_t n_specials;          /* entries in specials */
    struct tok_sp_index sp_ix[2]; /* [0]: the user-defined specials, [1]: all of them */
    void **re;                    /* owned: BPE pre-tokenizer regexes (pcre2_code *) */
    uint32_t n_re;                /* entries in re */
};

/* A run of bytes of the text being encoded. */
struct tok_span {
    size_t off; /* bytes from the start of the text */
    size_t len; /* bytes */
};

/* A piece of the text after the special-token partition. */
struct tok_frag {
    int32_t id; /* the special token matched here, or -1 for raw text */
    size_t off; /* bytes from the start of the text */
    size_t len; /* bytes */
};

/* Per-call working memory of tok_encode (never shared between threads). */
struct tok_scratch {
    char *buf;            /* owned: escaped (SPM) or sanitised (BPE) text */
    size_t buf_cap;       /* bytes allocated */
    char *word;           /* owned: byte-level form of one pre-token (BPE) */
    size_t word_cap;      /* bytes allocated */
    struct tok_sym *sym;  /* owned: merge symbols of one word */
    size_t sym_cap;       /* entries allocated */
    struct tok_pair *heap; /* owned: candidate merges, a binary heap */
    size_t heap_n;        /* entries used */
    size_t heap_cap;      /* entries allocated */
    struct tok_span *span[2]; /* owned: pre-token lists, current and next */
    size_t span_n[2];     /* entries used */
    size_t span_cap[2];   /* entries allocated */
    struct tok_frag *frag[2]; /* owned: partition lists, current and next */
    size_t frag_n[2];     /* entries used */
    size_t frag_cap[2];   /* entries allocated */
    unsigned char *present; /* owned: n_specials flags: occurs in the text */
    struct tok_memo *memo; /* owned: piece -> ids for this call, NULL for short texts */
    void *md;             /* owned: pcre2_match_data * */
};

/* One symbol of a word being merged: a run of bytes, a doubly linked list. */
struct tok_sym {
    size_t off;   /* bytes from the start of the word */
    size_t len;   /* bytes; 0 once merged into its left neighbour */
    int32_t id;   /* BPE: token id of the bytes, or -1 */
    int32_t prev; /* index of the left neighbour, or -1 */
    int32_t next; /* index of the right neighbour, or -1 */
};

/* One candidate merge of two neighbouring symbols. The heap pops the
 * smallest key first: BPE (rank << 32 | left), SPM (descending score << 32 |
 * left), which is llama.cpp's order (best merge, then leftmost). */
struct tok_pair {
    uint64_t key;  /* priority, see above */
    int32_t left;  /* symbol index */
    int32_t right; /* symbol index */
    int32_t a;     /* SPM: bytes of the merged text; BPE: id of the left part when queued */
    int32_t b;     /* BPE: id of the right part when queued (staleness check) */
    int32_t c;     /* BPE: id of the merged token */
};

/* tokenizer.c */
/* Appends the ids remembered for piece p[0..n) and returns 1, or returns 0
 * (not remembered, or no memo for this call). */
int tok_memo_get(struct tok_scratch *s, const char *p, size_t n, struct tok_ids *out,
                 struct mf_err *err, int *rc);
/* Remembers that p[0..n) encodes to ids[0..n_ids); silently does nothing
 * when the memo is absent or full. */
void tok_memo_put(struct tok_scratch *s, const char *p, size_t n, const int32_t *ids,
                  size_t n_ids);
int32_t tok_lookup(const struct tok *t, const char *s, size_t len);
/* Makes room in the array *arr (of *cap elements of size bytes) for
 * element index n, doubling; MF_ENOMEM on failure with *arr kept. */
int tok_grow(void **arr, size_t *cap, size_t n, size_t size, struct mf_err *err);
/* Grows *buf to at least need bytes (MF_ENOMEM on failure, *buf kept). */
int tok_scratch_buf(char **buf, size_t *cap, size_t need, struct mf_err *err);
/* Makes room for a word of n symbols: n tok_sym and 3n heap pairs (n - 1
 * initial pairs plus at most two per merge), so pushes cannot fail. */
int tok_scratch_reserve(struct tok_scratch *s, size_t n, struct mf_err *err);
void tok_heap_push(struct tok_scratch *s, const struct tok_pair *p);
/* Pops the smallest key into *out; 0 when the heap is empty. */
int tok_heap_pop(struct tok_scratch *s, struct tok_pair *out);

/* tokenizer_spm.c */
int tok_spm_init(struct tok *t, struct mf_err *err);
int tok_spm_encode(const struct tok *t, struct tok_scratch *s, const char *text, size_t len,
                   int space_prefix, struct tok_ids *out, struct mf_err *err);

/* tokenizer_bpe.c */
int tok_bpe_init(struct tok *t, const struct tok_desc *d, struct mf_err *err);
void tok_bpe_fini(struct tok *t);
const char *tok_bpe_pre_name(const struct tok *t);
int tok_bpe_pre_adds_bos(const struct tok *t); /* llama3-style pre-tokenizers default to BOS */
/* Decodes a byte-level token text to bytes into out (at most len bytes). */
size_t tok_bpe_unmap(const char *s, size_t len, char *out);
int tok_bpe_encode(const struct tok *t, struct tok_scratch *s, const char *text, size_t len,
                   struct tok_ids *out, struct mf_err *err);
void tok_bpe_scratch_fini(struct tok_scratch *s);

#endif
