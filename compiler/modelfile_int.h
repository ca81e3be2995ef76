/*
 * modelfile_int.h: internals shared by the compiler/modelfile*.c files and
 * their unit test; not an API (compiler/modelfile.h is).
 *
 * Parsing runs in three steps over one struct mf_modelfile_parser:
 *   decode (modelfile_lex.c)   bytes -> UTF-8 text, Go's replacement rules
 *   lex    (modelfile_lex.c)   text  -> struct mf_lexcmd list (Ollama's state
 *                              machine, plus mfc's Dockerfile-style lines)
 *   analyze (modelfile.c)      each mf_lexcmd -> struct mf_instr, in order
 *                              (ARG/ENV expansion, flags, PARAMETER types)
 * Every string lives in the modelfile's arena.
 */
#ifndef MF_MODELFILE_INT_H
#define MF_MODELFILE_INT_H

#include <stddef.h>
#include <stdint.h>

#include "compiler/modelfile.h"

/* Arena limit: the input cap times a margin for ARG expansion. */
#define MF_MODELFILE_ARENA_MAX ((size_t)256 << 20)
/* Longest value after ARG expansion, in bytes. */
#define MF_MODELFILE_EXPAND_MAX ((size_t)1 << 20)

/* ---- arena (modelfile.c) ---- */

/* Returns n zeroed bytes owned by the arena, or NULL when the arena limit
 * or malloc fails. */
void *mf_modelfile_alloc(struct mf_modelfile_arena *a, size_t n);
/* Copies s[0..n) plus a NUL into the arena; NULL on failure. */
char *mf_modelfile_strndup(struct mf_modelfile_arena *a, const char *s, size_t n);

/* A growable array on the heap, moved into the arena when complete. */
struct mf_vec {
    void *data;  /* owned until mf_vec_finish */
    size_t n;    /* elements used */
    size_t cap;  /* elements allocated */
    size_t elem; /* bytes per element */
};
/* Appends one element (copied from e); returns 0, or MF_ENOMEM leaving v as it was. */
int mf_modelfile_vec_push(struct mf_vec *v, const void *e);
/* Copies the elements into the arena (NULL when empty), stores their count
 * in *n and leaves v empty; sets *oom on failure. */
void *mf_modelfile_vec_finish(struct mf_vec *v, struct mf_modelfile_arena *a, size_t *n,
                              int *oom);
void mf_modelfile_vec_free(struct mf_vec *v);

/* ---- one lexed instruction (modelfile_lex.c -> modelfile.c) ---- */

struct mf_lexcmd {
    enum mf_instr_kind kind;
    int line, col;          /* of the keyword */
    int kw_len;             /* characters in the keyword */
    int end_line;           /* last line of the value */
    const char *arg;        /* PARAMETER name or MESSAGE role, else NULL */
    int arg_line, arg_col;  /* position of arg */
    const char *raw;        /* the value, unquoted (Ollama) or joined (RUN...) */
    int quoted;             /* the value was written as "..." or """...""" */
    int val_line, val_col;  /* first character of the value (after a quote) */
    int single_line;        /* raw sits on one source line from val_col on, so
                               byte offsets map to columns */
    const struct mf_comment *comments;
    size_t n_comments;
    int blank_before;
};

/* ---- the parser context ---- */

struct mf_modelfile_vartab; /* modelfile_vars.c */

struct mf_modelfile_parser {
    struct mf_modelfile *mf;               /* being built */
    const struct mf_modelfile_opts *opts;  /* borrowed */
    struct mf_modelfile_arena *arena;      /* == mf->arena */
    int oom;                               /* set once any allocation failed */
    int stopped;                           /* too many errors: stop reporting */
    struct mf_vec cmds;                    /* struct mf_lexcmd, lexer output */
    struct mf_vec instrs;                  /* struct mf_instr */
    struct mf_vec diags;                   /* struct mf_diag */
    size_t first_bad_utf8;                 /* offset of the first U+FFFD the decoder
                                              made, or SIZE_MAX */
    size_t n_bad_utf8;                     /* how many it made */
    struct mf_modelfile_vartab *vartab;    /* ARG/ENV variables (modelfile_vars.c) */
    int vars_active;                       /* an ARG or ENV came before: expand
                                              $NAME in Ollama's instructions too */
    struct mf_vec early_refs;              /* struct mf_var: $NAME read literally
                                              before any ARG/ENV (for a warning) */
    unsigned char *build_arg_used;         /* per opts->build_args entry (heap) */
    size_t last_of[MF_INSTR_KIND_COUNT];   /* 1 + index of the last instruction of a
                                              kind that replaces earlier ones, or 0 */
    size_t last_param[32];                 /* same, per PARAMETER table entry */
};

/* A literal $NAME use before any ARG/ENV (early_refs). */
struct mf_var {
    const char *name;
    int line, col; /* where it is used */
};

/* One word of an ENV/ARG/LABEL line after quote removal and expansion. */
struct mf_word {
    const char *text; /* in the arena */
    size_t off;       /* byte offset of the word in the raw value */
    long eq;          /* offset in text of the first unquoted '=', or -1 */
};

/* Records a diagnostic (message and hint are printf formats already
 * expanded by the caller through mf_modelfile_fmt). line 0: whole file. */
void mf_modelfile_diag(struct mf_modelfile_parser *p, enum mf_severity sev, int line, int col,
                       int len, const char *hint, const char *fmt, ...)
    __attribute__((format(printf, 7, 8)));
/* printf into the arena; NULL on failure. */
char *mf_modelfile_fmt(struct mf_modelfile_parser *p, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* For tests: decodes and lexes only (no analysis, no FROM rule), so that
 * the lexer can be compared with Ollama's ParseFile command by command.
 * *cmds lives in (*out)'s arena; (*out)->diags has the lexer's errors. */
int mf_modelfile_lex_only(const char *data, size_t len, struct mf_modelfile **out,
                          struct mf_lexcmd **cmds, size_t *n);

/* ---- decoding and lexing (modelfile_lex.c) ---- */

/* Converts the file's bytes to UTF-8 the way Go's unicode.BOMOverride(UTF8)
 * reader does: UTF-8/UTF-16LE/UTF-16BE BOM honoured and removed; each bad
 * byte (or unpaired surrogate, or odd trailing byte) becomes U+FFFD. Sets
 * mf->text and the line table. 0, or MF_ENOMEM / MF_EINVAL (too large). */
int mf_modelfile_decode(struct mf_modelfile_parser *p, const char *data, size_t len,
                        struct mf_err *err);
/* Runs the lexer over mf->text, filling p->cmds and p->diags. */
void mf_modelfile_lex(struct mf_modelfile_parser *p);

/* Ollama's unquote(strings.TrimSpace(s)) closing rule over s[0..n), given
 * the trimmed range [first, end) (first == end when s is blank). Returns 1
 * and the unquoted range when the value is complete; 0 while a quote is
 * still open. *quote gets 0, 1 or 3 (the delimiter length). */
int mf_modelfile_unquote(const char *s, size_t first, size_t end, size_t *start, size_t *len,
                         int *quote);

/* Blank for Go's TrimSpace over what a value can contain: ' ', \t, \r, \n. */
static inline int mf_modelfile_is_blank(int c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

/* Go's strconv.IsPrint (modelfile_isprint.c). */
int mf_modelfile_isprint(uint32_t cp);

/* The instruction keyword for a lower- or mixed-case name, or -1. */
int mf_modelfile_keyword(const char *name, size_t len);

/* ---- PARAMETER table and suggestions (modelfile_param.c) ---- */

struct mf_param_def {
    const char *name;        /* json tag in Ollama's api.Options */
    enum mf_param_type type;
    const char *deflt;       /* Ollama's default, for docs and hints */
};
/* The entry for name (exact, case-sensitive like Ollama), or NULL. */
const struct mf_param_def *mf_modelfile_param_find(const char *name);
/* Every entry, deprecated ones included; *n gets the count. */
const struct mf_param_def *mf_modelfile_param_table(size_t *n);
/* The candidate closest to word (case-insensitive Levenshtein distance at
 * most 2, or at most a third of the word's length when longer), or NULL. */
const char *mf_modelfile_suggest(const char *word, const char *const *cands, size_t n);
/* The closest PARAMETER name (deprecated ones excluded), or NULL. */
const char *mf_modelfile_param_suggest(const char *word);
/* golang.org/x/mod/semver IsValid("v" + s). */
int mf_modelfile_semver_ok(const char *s);

/* ---- ARG/ENV variables (modelfile_vars.c) ---- */

/* Expands $NAME, ${NAME}, ${NAME:-word}, ${NAME:+word} (and -, + without the
 * colon) in s, where s starts at byte off of c's value (for positions), and
 * `\$` to a literal '$'. Sets *out (arena). *unset becomes 1 when a
 * variable without a value was used. Returns 0, or -1 after reporting. */
int mf_modelfile_expand(struct mf_modelfile_parser *p, const struct mf_lexcmd *c, const char *s,
                        size_t off, const char **out, int *unset);
/* Splits c->raw from byte `from` into shell-like words (blanks separate
 * them; "..." and '...' group; backslash escapes; $ expands outside single
 * quotes). With split 0 the rest is one word, blanks kept (ENV's legacy
 * form). *words is in the arena. Returns 0, or -1 after reporting. */
int mf_modelfile_words(struct mf_modelfile_parser *p, const struct mf_lexcmd *c, size_t from,
                       int split, struct mf_word **words, size_t *n, int *unset);
/* Declares a variable (name and value must live in the arena; value NULL:
 * an ARG without one). Returns 0, or -1 past 4096 names or out of memory. */
int mf_modelfile_var_set(struct mf_modelfile_parser *p, const char *name, const char *value,
                         int line, int is_env);
/* Releases the variable table. */
void mf_modelfile_vars_free(struct mf_modelfile_parser *p);
/* Records literal $NAME uses in s (Ollama instructions before any ARG). */
void mf_modelfile_note_refs(struct mf_modelfile_parser *p, const struct mf_lexcmd *c,
                            const char *s);
/* Reports literal $NAME uses of names declared later, and unused build-args. */
void mf_modelfile_vars_finish(struct mf_modelfile_parser *p);
/* 1 for [A-Za-z_][A-Za-z0-9_]*. */
int mf_modelfile_var_name_ok(const char *s, size_t n);

/* ---- flags, pins and RUN details (modelfile_flags.c) ---- */

/* Splits FROM/ADAPTER/DRAFT's unquoted value into flags and the reference,
 * validates them, and fills in->flags, in->n_flags and in->u.src (ref still
 * unexpanded in *ref_raw). Errors are reported; returns 0 or -1. */
int mf_modelfile_source_flags(struct mf_modelfile_parser *p, const struct mf_lexcmd *c,
                              struct mf_instr *in, const char **ref_raw);
/* Splits a pin "@sha256:<hex>" off ref and merges it with --checksum.
 * Returns 0 or -1 (reported). */
int mf_modelfile_source_pin(struct mf_modelfile_parser *p, const struct mf_lexcmd *c,
                            struct mf_instr *in, const char *ref);
/* Parses RUN's flags and command into in->u.run. Returns 0 or -1. */
int mf_modelfile_run(struct mf_modelfile_parser *p, const struct mf_lexcmd *c,
                     struct mf_instr *in);
/* Go time.ParseDuration, rounded down to milliseconds; 0 or -1. */
int mf_modelfile_duration_ms(const char *s, int64_t *ms);

/* Column of byte offset off inside c's value, when it maps to one. */
int mf_modelfile_col_at(const struct mf_lexcmd *c, size_t off);

#endif
