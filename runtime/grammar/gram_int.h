/*
 * gram_int.h: the compiled grammar the GBNF parser (gram_gbnf.c) writes and
 * the matcher (gram_dfa.c) reads.
 *
 * Every rule is a run of elements in one array: alternatives separated by
 * GEL_ALT, the rule closed by GEL_END. An element is a byte set (one input
 * byte from a 256-bit set) or a reference to a rule. Characters are bytes:
 * a class of code points is compiled to alternatives of UTF-8 byte-range
 * sequences, so the matcher never decodes UTF-8 and a token may end inside
 * a character. Repetitions are expanded into helper rules (x* is
 * R ::= x R | empty), so the matcher only knows sequences and alternatives.
 */
#ifndef MFC_GRAMMAR_GRAM_INT_H
#define MFC_GRAMMAR_GRAM_INT_H

#include <stdint.h>

#include "common/err.h"

enum { GEL_END = 0, GEL_ALT = 1, GEL_SET = 2, GEL_REF = 3 };

struct gel {
    uint32_t kind; /* GEL_* */
    uint32_t v;    /* GEL_SET: index into sets; GEL_REF: rule id */
};

struct gram_rules {
    struct gel *el; /* owned: every rule's elements */
    uint32_t n_el;
    uint32_t *start; /* owned: first element of rule r */
    uint32_t n_rules;
    uint32_t (*sets)[8]; /* owned: 256-bit byte sets */
    uint32_t n_sets;
    uint32_t root;     /* the rule named "root" */
    uint32_t *rep_k;   /* owned: per rule, k for the helper O_k of x{m,n} (O_k ::=
                          x O_{k-1} | empty: at most k more x; O_k's id is O_1's + k - 1),
                          0 for any other rule */
    uint32_t *rule_of; /* owned: per element, its rule */
};

static inline int gram_set_has(const uint32_t set[8], unsigned b)
{
    return (int)((set[b >> 5] >> (b & 31)) & 1u);
}

/* gram_gbnf.c: parses GBNF into r (gram_rules_free it); MF_EINVAL naming
 * line and column, MF_ENOMEM for the size limits. */
int gram_rules_parse(const char *src, size_t len, struct gram_rules *r, struct mf_err *err);
void gram_rules_free(struct gram_rules *r);

#endif

/* gram_vocab.c: the vocabulary trie, nodes in preorder. Node i holds the
 * byte that leads to it from its parent, its depth (1 for the root's
 * children) and next[i], the first node after its subtree (skipping a
 * rejected prefix is one assignment); tok_off[i]..tok_off[i+1] index the
 * tokens whose bytes end there. */
enum { GRAM_TOK_NEVER = 0, GRAM_TOK_TEXT = 1, GRAM_TOK_EOG = 2 };

/* One trie node, packed for the mask walk's single forward pass. */
struct gram_tnode {
    uint32_t next;  /* the first node after this one's subtree */
    int32_t tok;    /* a token whose bytes end here, or -1 */
    uint16_t depth; /* 1 for the root's children */
    uint8_t byte;   /* the byte leading here from the parent */
    uint8_t more;   /* 1: more tokens end here (tok_off/tok_ids) */
};

struct gram_vocab {
    int32_t n_vocab;
    uint8_t *kind;       /* per token: GRAM_TOK_* */
    uint32_t *piece_off; /* per token: its bytes in pieces (n_vocab + 1 offsets) */
    char *pieces;
    int32_t *eog; /* end-of-generation ids */
    int32_t n_eog;
    size_t n_nodes;
    uint8_t *byte;
    uint16_t *depth;
    uint32_t *next;
    uint32_t *tok_off; /* n_nodes + 1 */
    int32_t *tok_ids;
    uint32_t max_depth;
    struct gram_tnode *nodes; /* n_nodes, the same trie packed */
};
