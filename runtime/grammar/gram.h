/*
 * gram.h: constrained decoding. A grammar (GBNF, llama.cpp's syntax, or a
 * JSON Schema compiled to GBNF) is compiled to a byte-level pushdown
 * automaton; a vocabulary (struct gram_vocab, a trie of every token's bytes)
 * turns any state of it into the set of tokens that may come next.
 *
 * Shape (docs/grammar.md):
 *   gram_vocab  - per tokenizer, immutable once built, shared by everything.
 *   gram        - per grammar text: the compiled rules plus a lazily built
 *                 DFA over stack sets and a cache of token masks per DFA
 *                 state; reference counted, so requests with the same grammar
 *                 share what the others computed. Thread-safe (one mutex).
 *   gram_state  - per request: a DFA state id (uint32_t). Copyable, no memory.
 *
 * A request's step costs a cache lookup and one pass over the mask words
 * when its state was seen before; the first visit of a state walks the
 * vocabulary trie, pruning every subtree whose prefix the grammar rejects.
 */
#ifndef MFC_GRAMMAR_GRAM_H
#define MFC_GRAMMAR_GRAM_H

#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"
#include "common/err.h"
#include "text/tokenizer.h"

#define GRAM_MAX_SOURCE (1u << 20)         /* bytes of GBNF text */
#define GRAM_MAX_ELEMENTS (1u << 20)       /* compiled elements, repetitions expanded */
#define GRAM_MAX_REPEAT 10000              /* the m and n of x{m,n} */
#define GRAM_MAX_STATES (1u << 20)         /* DFA states one grammar may build */
#define GRAM_MAX_NODES (1u << 22)          /* stack nodes one grammar may build */
#define GRAM_MASK_CACHE_BYTES (256u << 20) /* token masks kept per grammar */

/* ---- vocabulary ---- */

struct gram_vocab;

/* Builds the trie of t's tokens as they decode (tok_piece without flags):
 * normal, user-defined and byte tokens; control and unknown tokens are never
 * allowed by a grammar, except a control token whose text is one of
 * markers[] (NULL-terminated, or NULL for none: a chat family's tool-call
 * opening such as Mistral's [TOOL_CALLS], which the model writes as one
 * token), which stands for that text; end-of-generation ones (tok_is_eog)
 * only where the grammar may end. MF_ENOMEM on failure, *out NULL. */
int gram_vocab_new(const struct tok *t, const char *const *markers, struct gram_vocab **out,
                   struct mf_err *err);
/* The same from raw pieces (tests, benchmarks): piece i of len[i] bytes is
 * token i; eog[i] nonzero marks an end-of-generation token; a NULL piece
 * marks a token no grammar allows. */
int gram_vocab_from_pieces(const char *const *pieces, const size_t *lens, const uint8_t *eog,
                           int32_t n, struct gram_vocab **out, struct mf_err *err);
void gram_vocab_free(struct gram_vocab *v);
int32_t gram_vocab_size(const struct gram_vocab *v);
/* Trie nodes (a measure of the work one uncached mask costs). */
size_t gram_vocab_nodes(const struct gram_vocab *v);
/* The longest token a grammar may allow, bytes. */
uint32_t gram_vocab_max_len(const struct gram_vocab *v);

/* ---- grammars ---- */

struct gram;

/* Compiles GBNF text src[0..len) whose start rule is "root", for vocabulary
 * v (borrowed: must outlive the grammar). Errors (MF_EINVAL) say where:
 * "grammar: line 3, column 7: ..."; an undefined rule, a missing root and
 * left recursion are errors too. v may be NULL to only check the grammar
 * (gram_mask then fails). */
int gram_new(const char *src, size_t len, const struct gram_vocab *v, struct gram **out,
             struct mf_err *err);
struct gram *gram_ref(struct gram *g);
/* Tokens in the grammar's vocabulary (0 without one). */
int32_t gram_n_vocab(const struct gram *g);
/* Drops a reference; the last frees. Accepts NULL. */
void gram_unref(struct gram *g);

/* ---- matching ---- */

#define GRAM_DEAD 0u /* the state no input leads out of: nothing was valid */

/* The state before any output. 0 (GRAM_DEAD) when the grammar's state space
 * limit was hit (err says so). */
uint32_t gram_start(struct gram *g, struct mf_err *err);
/* Feeds bytes: returns the new state, GRAM_DEAD when they are not a prefix
 * of a sentence (or a limit was hit: err->code set then). */
uint32_t gram_feed(struct gram *g, uint32_t st, const void *bytes, size_t n, struct mf_err *err);
/* Feeds token id's bytes. An end-of-generation token leaves an accepting
 * state as it is; anywhere else, and any token the vocabulary marks as never
 * allowed, gives GRAM_DEAD. */
uint32_t gram_feed_token(struct gram *g, uint32_t st, int32_t id, struct mf_err *err);
/* 1 when the output so far is a whole sentence (end-of-generation allowed). */
int gram_accepting(struct gram *g, uint32_t st);
/* 1 when some byte may still follow. */
int gram_can_continue(struct gram *g, uint32_t st);

/* Copies st's token mask (bit i of word i/32: token i allowed) into
 * words[0..(n_vocab+31)/32): the tokens whose bytes keep the output a prefix
 * of a sentence, plus the end-of-generation tokens when st is accepting.
 * Computed once per state, then cached. 0 or MF_E* (no vocabulary, limits). */
int gram_mask(struct gram *g, uint32_t st, uint32_t *words, struct mf_err *err);
/* Sets logits[i] = -INFINITY for every token st does not allow: the same
 * mask, applied without copying it. */
int gram_apply(struct gram *g, uint32_t st, float *logits, int32_t n_vocab, struct mf_err *err);

/* Work counters, for benchmarks and tests. */
struct gram_stats {
    uint64_t states;      /* DFA states built */
    uint64_t nodes;       /* stack nodes built */
    uint64_t mask_builds; /* masks computed by a trie walk */
    uint64_t mask_hits;   /* masks served from the cache */
    uint64_t trie_visits; /* trie nodes visited by those walks */
    uint64_t core_masks;  /* masks made from a core's (gram_dfa.c) and its unsure tokens */
};
void gram_stats(struct gram *g, struct gram_stats *out);
/* Forgets every cached mask (states and transitions stay): benchmarks time
 * a mask walk over known transitions with it. */
void gram_drop_masks(struct gram *g);

/* ---- JSON Schema ---- */

struct json_t; /* jansson's json_t; the GPU tests build this header without jansson */

/* Appends to out GBNF whose sentences are the JSON texts valid under
 * schema (subset and limits in docs/grammar.md); where names the field
 * for messages ("response_format.json_schema.schema"). An unsupported
 * keyword is MF_EUNSUPPORTED naming it and its JSON pointer; a malformed
 * schema MF_EINVAL. */
int gram_schema_gbnf(const struct json_t *schema, const char *where, struct mf_buf *out,
                     struct mf_err *err);
/* The rules of gram_schema_gbnf alone, numbered from *next_rule + 1 (r<N>,
 * p<N>; *next_rule is advanced), so several schemas share one grammar;
 * *root_rule is the schema's rule. They use the shared JSON rules, which
 * gram_json_shared appends (once per grammar). */
int gram_schema_rules(const struct json_t *schema, const char *where, int *next_rule,
                      int *root_rule, struct mf_buf *out, struct mf_err *err);
int gram_json_shared(struct mf_buf *out, struct mf_err *err);
/* GBNF for any JSON value (object_only: any JSON object), as JSON mode. */
int gram_json_gbnf(int object_only, struct mf_buf *out, struct mf_err *err);

/* Appends GBNF rules defining rule `name` as strings (their JSON-escaped
 * content, without quotes) matching the regular expression re (ECMA-262
 * subset: literals, escapes, ., classes, groups, |, * + ? {m,n}, ^ $ at the
 * ends). MF_EUNSUPPORTED names what is not handled. */
int gram_regex_gbnf(const char *re, const char *name, struct mf_buf *out, struct mf_err *err);

#endif
