/*
 * template_int.h: internals shared by the template modules (lexer, parser,
 * executor, values, chat rendering) and their unit tests. Not an API.
 *
 * The parse tree mirrors Go's text/template/parse node types, so the
 * executor can follow Go's exec.go rule by rule.
 */
#ifndef MFC_RUNTIME_TEMPLATE_INT_H
#define MFC_RUNTIME_TEMPLATE_INT_H

#include <stddef.h>
#include <stdint.h>

#include "text/template.h"

/* ---- values ------------------------------------------------------------ */

struct tmpl_value {
    enum tmpl_kind kind;
    uint32_t refs;             /* atomic; 0 marks an immortal constant (nil, true, false) */
    int64_t i;                 /* INT value; BOOL 0 or 1 */
    char *s;                   /* STRING: owned, NUL-terminated; STRUCT: type name */
    size_t n;                  /* STRING: bytes */
    struct tmpl_value **items; /* LIST items; MAP/STRUCT values (owned references) */
    char **keys;               /* MAP/STRUCT: owned keys, parallel to items */
    size_t len;                /* items used */
    size_t cap;                /* items allocated */
    char *json;                /* STRUCT: owned JSON text it prints as (a Go type with
                                  a String method, as Ollama's api.Tool), or NULL */
};

/* The immortal constants: never freed, references not counted. */
struct tmpl_value *tmpl_value_nil(void);
struct tmpl_value *tmpl_value_true(void);
struct tmpl_value *tmpl_value_false(void);

/* A STRING adopting s (malloc'd, NUL-terminated at s[n]); frees s and
 * returns NULL when out of memory. */
struct tmpl_value *tmpl_value_take_str(char *s, size_t n);

/* The value under key in a MAP or STRUCT, borrowed, or NULL when absent. */
struct tmpl_value *tmpl_value_get(const struct tmpl_value *obj, const char *key, size_t klen);

/* Go's type name of v, for messages ("string", "[]interface {}", ...). */
const char *tmpl_value_type(const struct tmpl_value *v);

/* Go's truth (text/template isTrue): false for nil, "", 0, false and empty
 * lists and maps; true for everything else, structs included. v may be NULL
 * (Go's invalid value). */
int tmpl_value_truth(const struct tmpl_value *v);

/* Appends fmt.Sprint's text for v (%v). NULL prints "<no value>" when
 * top-level is set, otherwise "<nil>"; nil prints "<nil>". */
int tmpl_value_print(struct mf_buf *b, const struct tmpl_value *v, int top, struct mf_err *err);

/* Appends Go's json.Marshal text for v (HTML-safe escapes, sorted map keys,
 * struct fields in order). */
int tmpl_value_json(struct mf_buf *b, const struct tmpl_value *v, struct mf_err *err);

/* Indexes of a MAP's keys in sorted order (Go's fmt and range order), in a
 * new array the caller frees; NULL when out of memory or empty. */
size_t *tmpl_value_sorted_keys(const struct tmpl_value *map);

/* ---- lexer ---------------------------------------------------------------- */

enum tmpl_tok {
    TK_EOF,
    TK_ERROR,     /* lexer error; message in the lexer */
    TK_TEXT,      /* plain text, trimming already applied */
    TK_LDELIM,    /* {{ or {{- */
    TK_RDELIM,    /* }} or -}} */
    TK_SPACE,     /* run of spaces inside an action */
    TK_IDENT,     /* function name */
    TK_FIELD,     /* .Name */
    TK_VAR,       /* $ or $name */
    TK_DOT,       /* . */
    TK_STRING,    /* "quoted", still escaped */
    TK_RAWSTRING, /* `raw` */
    TK_CHAR,      /* 'c' character constant */
    TK_NUMBER,
    TK_BOOL,
    TK_NIL,
    TK_PIPE, /* | */
    TK_LPAREN,
    TK_RPAREN,
    TK_DECLARE, /* := */
    TK_ASSIGN,  /* = */
    TK_SYM,     /* any other printable ASCII character (',' in range) */
    TK_KEYWORD, /* marks the start of the keywords below */
    TK_BLOCK,
    TK_BREAK,
    TK_CONTINUE,
    TK_DEFINE,
    TK_ELSE,
    TK_END,
    TK_IF,
    TK_RANGE,
    TK_TEMPLATE,
    TK_WITH,
};

struct tmpl_token {
    enum tmpl_tok type;
    uint32_t pos; /* byte offset in the source */
    uint32_t len; /* bytes of source text */
};

struct tmpl_lexer {
    struct tmpl_token *toks; /* owned; ends with TK_EOF or TK_ERROR */
    size_t n;                /* tokens */
    char msg[160];           /* the TK_ERROR message */
};

/* Splits src into tokens as Go's lexer does (trim markers, comments, nested
 * parentheses). Lexing errors become a final TK_ERROR token, reported when the
 * parser reaches it, as in Go. Fails only for lack of memory. */
int tmpl_lex(struct tmpl_lexer *lx, const char *src, size_t len, struct mf_err *err);
void tmpl_lex_free(struct tmpl_lexer *lx);

/* ---- parse tree ------------------------------------------------------------- */

enum tmpl_node_kind {
    TN_LIST,
    TN_TEXT,
    TN_ACTION,
    TN_IF,
    TN_RANGE,
    TN_WITH,
    TN_BREAK,
    TN_CONTINUE,
    TN_PIPE,
    TN_CMD,
    TN_FIELD,
    TN_VAR,
    TN_CHAIN,
    TN_IDENT,
    TN_DOT,
    TN_NIL,
    TN_BOOL,
    TN_NUMBER,
    TN_STRING,
};

struct tmpl_node {
    enum tmpl_node_kind kind;
    uint32_t pos; /* source bytes [pos, end) this node came from */
    uint32_t end;
    struct tmpl_node **kids; /* LIST: items; PIPE: commands; CMD: arguments */
    uint32_t n_kids;
    struct tmpl_node *pipe;  /* ACTION/IF/RANGE/WITH: the pipeline; CHAIN: the operand */
    struct tmpl_node *list;  /* IF/RANGE/WITH: the body */
    struct tmpl_node *elist; /* IF/RANGE/WITH: the else branch, or NULL */
    const char *s;           /* TEXT/STRING: bytes; VAR: "$name"; IDENT: function name */
    size_t n;                /* bytes at s */
    const char **idents;     /* FIELD/CHAIN: field names; VAR: fields after the name */
    uint32_t n_idents;
    int64_t num;         /* NUMBER/BOOL: the value; IDENT: enum tmpl_fn */
    const char *decl[2]; /* PIPE: variables declared (:=) or assigned (=) */
    uint8_t n_decl;
    uint8_t is_assign;
};

/* Built-in functions: Go's text/template set minus html/js/urlquery/call,
 * plus Ollama's json. */
enum tmpl_fn {
    FN_AND,
    FN_OR,
    FN_NOT,
    FN_LEN,
    FN_INDEX,
    FN_SLICE,
    FN_EQ,
    FN_NE,
    FN_LT,
    FN_LE,
    FN_GT,
    FN_GE,
    FN_PRINT,
    FN_PRINTF,
    FN_PRINTLN,
    FN_JSON,
    FN_TOJSON, /* mfc's: Jinja's tojson (Python's separators; optional indent) */
    FN_COUNT
};

/* The function called name, or -1. */
int tmpl_fn_lookup(const char *name, size_t n);
const char *tmpl_fn_name(int fn);

/* Calls builtin fn (not and/or, which the executor short-circuits) on
 * a[0..na), arity already checked. Returns 0 and a new reference in *out, or
 * MF_EINVAL with msg saying what is wrong with the arguments, or MF_ENOMEM
 * (memory, or more than scratch_left bytes built). *used gets the bytes of
 * strings and lists built. */
int tmpl_call(int fn, struct tmpl_value **a, size_t na, size_t scratch_left, size_t *used,
              struct tmpl_value **out, char *msg, size_t msg_size);

struct tmpl_arena_block;

/* Bump allocator for the parse tree; freed all at once. */
struct tmpl_arena {
    struct tmpl_arena_block *head; /* owned chain of blocks */
    size_t total;                  /* bytes allocated so far */
    size_t max;                    /* limit on total */
};

struct tmpl {
    char *src;                /* owned copy of the source, NUL-terminated */
    size_t len;               /* source bytes */
    struct tmpl_node *root;   /* the parsed template */
    struct tmpl_node *legacy; /* root cut after the first .Response (for chats
                                 of templates without .Messages), or NULL */
    int uses_messages;        /* tmpl_uses(t, "messages") */
    struct tmpl_limits lim;   /* copied at compile time */
    struct tmpl_arena arena;  /* owns every node and unquoted string */
};

/* Source line and column (1-based) of byte offset pos. */
void tmpl_linecol(const struct tmpl *t, uint32_t pos, unsigned *line, unsigned *col);

/* Executes from node root (t->root or t->legacy). */
int tmpl_exec_node(const struct tmpl *t, const struct tmpl_node *root, struct tmpl_value *data,
                   struct mf_buf *out, struct mf_err *err);

#endif
