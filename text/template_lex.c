/*
 * template_lex.c: the lexer of Ollama's TEMPLATE language, a port of Go's
 * text/template/parse/lex.go state machine.
 *
 * Owns the token array it builds; tokens point into the caller's source by
 * offset. The whole template is lexed up front (Go lexes while parsing), and a
 * lexing error becomes the last token, so the parser still reports whichever
 * error comes first in the text, as Go does.
 *
 * Trimming follows Go exactly: "{{- " (a '-' then a space, tab, CR or LF)
 * drops the whitespace before the action, " -}}" the whitespace after it;
 * a comment opens with slash-star right after "{{" (or "{{- ") and must close
 * with star-slash right before "}}" (or " -}}"). Identifier characters beyond ASCII are accepted as
 * letters (Go asks unicode.IsLetter; no template in the wild depends on the gap).
 */
#include "text/template_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct lex {
    struct tmpl_lexer *lx; /* output */
    const char *src;       /* input, src[0..len) */
    size_t len;
    size_t pos;   /* next byte to read */
    size_t start; /* start of the token being scanned */
    size_t cap;   /* tokens allocated */
    int paren;    /* open parentheses in the current action */
    struct mf_err *err;
};

static int is_space(int c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

static int is_alnum(int c)
{
    if (c < 0)
        return 0; /* end of input */
    unsigned char u = (unsigned char)c;
    return u == '_' || (u >= 'a' && u <= 'z') || (u >= 'A' && u <= 'Z') || (u >= '0' && u <= '9') ||
           u >= 0x80;
}

static int peek_at(const struct lex *l, size_t at)
{
    return at < l->len ? (unsigned char)l->src[at] : -1;
}

static int has_prefix(const struct lex *l, size_t at, const char *p)
{
    size_t n = strlen(p);
    return at <= l->len && l->len - at >= n && memcmp(l->src + at, p, n) == 0;
}

static int emit_at(struct lex *l, enum tmpl_tok type, size_t pos, size_t len)
{
    if (l->lx->n == l->cap) {
        size_t ncap = l->cap ? l->cap * 2 : 64;
        struct tmpl_token *nt = realloc(l->lx->toks, ncap * sizeof *nt);
        if (!nt)
            return mf_err_set(l->err, MF_ENOMEM, "template: out of memory while lexing");
        l->lx->toks = nt;
        l->cap = ncap;
    }
    l->lx->toks[l->lx->n++] = (struct tmpl_token){type, (uint32_t)pos, (uint32_t)len};
    return 0;
}

/* Emits src[start..pos) and starts the next token at pos. */
static int emit(struct lex *l, enum tmpl_tok type)
{
    int rc = emit_at(l, type, l->start, l->pos - l->start);
    l->start = l->pos;
    return rc;
}

/* Ends lexing with an error token at the current position. Returns 1 so the
 * state machine stops (0 continues, negative is an allocation failure). */
static int lex_error(struct lex *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int lex_error(struct lex *l, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(l->lx->msg, sizeof l->lx->msg, fmt, ap);
    va_end(ap);
    int rc = emit_at(l, TK_ERROR, l->start, 0);
    return rc ? rc : 1;
}

/* Go's atRightDelim: "}}" or " -}}" at pos; *trim says which. */
static int at_right_delim(const struct lex *l, size_t at, int *trim)
{
    if (is_space(peek_at(l, at)) && peek_at(l, at + 1) == '-' && has_prefix(l, at + 2, "}}")) {
        *trim = 1;
        return 1;
    }
    *trim = 0;
    return has_prefix(l, at, "}}");
}

static int at_terminator(const struct lex *l)
{
    int c = peek_at(l, l->pos);
    if (c < 0 || is_space(c) || c == '.' || c == ',' || c == '|' || c == ':' || c == ')' ||
        c == '(')
        return 1;
    return has_prefix(l, l->pos, "}}");
}

static size_t skip_space(const struct lex *l, size_t at)
{
    while (at < l->len && is_space((unsigned char)l->src[at]))
        at++;
    return at;
}

/* A comment: from "/ *" to "* /" followed directly by the closing delimiter. */
static int lex_comment(struct lex *l)
{
    size_t p = l->pos + 2;
    const char *end = NULL;
    if (p <= l->len)
        end = memmem(l->src + p, l->len - p, "*/", 2);
    if (!end)
        return lex_error(l, "unclosed comment");
    l->pos = (size_t)(end - l->src) + 2;
    int trim;
    if (!at_right_delim(l, l->pos, &trim))
        return lex_error(l, "comment ends before closing delimiter");
    l->pos += (trim ? 2 : 0) + 2;
    if (trim)
        l->pos = skip_space(l, l->pos);
    l->start = l->pos;
    return 0;
}

/* Text up to the next "{{", minus trailing space when that is "{{- ". */
static int lex_text(struct lex *l, int *in_action)
{
    const char *x = NULL;
    if (l->pos < l->len)
        x = memmem(l->src + l->pos, l->len - l->pos, "{{", 2);
    size_t at = x ? (size_t)(x - l->src) : l->len;
    size_t text_end = at;
    int trim = x && peek_at(l, at + 2) == '-' && is_space(peek_at(l, at + 3));
    if (trim)
        while (text_end > l->pos && is_space((unsigned char)l->src[text_end - 1]))
            text_end--;
    if (text_end > l->pos) {
        int rc = emit_at(l, TK_TEXT, l->pos, text_end - l->pos);
        if (rc)
            return rc;
    }
    if (!x) {
        l->pos = l->start = l->len;
        int rc = emit(l, TK_EOF);
        return rc ? rc : 1;
    }
    /* the left delimiter */
    l->pos = at + 2 + (trim ? 2 : 0);
    if (has_prefix(l, l->pos, "/*")) {
        l->start = l->pos;
        return lex_comment(l);
    }
    int rc = emit_at(l, TK_LDELIM, at, l->pos - at);
    l->start = l->pos;
    l->paren = 0;
    *in_action = 1;
    return rc;
}

static int lex_right_delim(struct lex *l, int trim, int *in_action)
{
    size_t at = l->pos + (trim ? 2 : 0);
    int rc = emit_at(l, TK_RDELIM, l->pos, at + 2 - l->pos);
    l->pos = at + 2;
    if (trim)
        l->pos = skip_space(l, l->pos);
    l->start = l->pos;
    *in_action = 0;
    return rc;
}

/* A run of spaces; the last one stays when it starts " -}}". */
static int lex_space(struct lex *l)
{
    size_t n = 0;
    while (is_space(peek_at(l, l->pos))) {
        l->pos++;
        n++;
    }
    if (peek_at(l, l->pos) == '-' && has_prefix(l, l->pos + 1, "}}")) {
        l->pos--;
        if (n == 1)
            return 0;
    }
    return emit(l, TK_SPACE);
}

static int lex_quote(struct lex *l, int q, enum tmpl_tok type, const char *what)
{
    for (;;) {
        int c = peek_at(l, l->pos++);
        if (c == '\\' && q != '`') {
            c = peek_at(l, l->pos++);
            if (c >= 0 && c != '\n')
                continue;
        }
        if (c < 0 || (c == '\n' && q != '`')) {
            l->pos--;
            return lex_error(l, "unterminated %s", what);
        }
        if (c == q)
            return emit(l, type);
    }
}

static int accept(struct lex *l, const char *set)
{
    int c = peek_at(l, l->pos);
    if (c > 0 && strchr(set, c)) {
        l->pos++;
        return 1;
    }
    return 0;
}

static void accept_run(struct lex *l, const char *set)
{
    while (accept(l, set))
        ;
}

/* Go's scanNumber: sign, base prefix, digits, fraction, exponent, 'i'. The
 * parser decides what the text means. */
static int lex_number(struct lex *l)
{
    const char *digits = "0123456789_";
    accept(l, "+-");
    if (accept(l, "0")) {
        if (accept(l, "xX"))
            digits = "0123456789abcdefABCDEF_";
        else if (accept(l, "oO"))
            digits = "01234567_";
        else if (accept(l, "bB"))
            digits = "01_";
    }
    accept_run(l, digits);
    if (accept(l, "."))
        accept_run(l, digits);
    if (strlen(digits) == 11 && accept(l, "eE")) {
        accept(l, "+-");
        accept_run(l, "0123456789_");
    }
    if (strlen(digits) == 23 && accept(l, "pP")) {
        accept(l, "+-");
        accept_run(l, "0123456789_");
    }
    accept(l, "i");
    if (is_alnum(peek_at(l, l->pos))) {
        l->pos++;
        return lex_error(l, "bad number syntax: \"%.*s\"", (int)(l->pos - l->start),
                         l->src + l->start);
    }
    return emit(l, TK_NUMBER);
}

static const struct {
    const char *word;
    enum tmpl_tok type;
} keywords[] = {
    {"block", TK_BLOCK},   {"break", TK_BREAK}, {"continue", TK_CONTINUE},
    {"define", TK_DEFINE}, {"else", TK_ELSE},   {"end", TK_END},
    {"if", TK_IF},         {"range", TK_RANGE}, {"template", TK_TEMPLATE},
    {"with", TK_WITH},     {"nil", TK_NIL},     {"true", TK_BOOL},
    {"false", TK_BOOL},
};

static int lex_identifier(struct lex *l)
{
    while (is_alnum(peek_at(l, l->pos)))
        l->pos++;
    if (!at_terminator(l)) {
        int c = peek_at(l, l->pos);
        return lex_error(l, "bad character U+%04X '%c'", (unsigned)c, c);
    }
    size_t n = l->pos - l->start;
    for (size_t i = 0; i < sizeof keywords / sizeof keywords[0]; i++)
        if (strlen(keywords[i].word) == n && memcmp(keywords[i].word, l->src + l->start, n) == 0)
            return emit(l, keywords[i].type);
    return emit(l, TK_IDENT);
}

/* After '.' or '$': a field or variable name, or a bare "." / "$". */
static int lex_field_or_var(struct lex *l, enum tmpl_tok type)
{
    if (at_terminator(l))
        return emit(l, type == TK_VAR ? TK_VAR : TK_DOT);
    while (is_alnum(peek_at(l, l->pos)))
        l->pos++;
    if (!at_terminator(l)) {
        int c = peek_at(l, l->pos);
        return lex_error(l, "bad character U+%04X '%c'", (unsigned)c, c);
    }
    return emit(l, type);
}

static int lex_punct(struct lex *l, int c)
{
    switch (c) {
    case '=':
        return emit(l, TK_ASSIGN);
    case ':':
        if (peek_at(l, l->pos) != '=')
            return lex_error(l, "expected :=");
        l->pos++;
        return emit(l, TK_DECLARE);
    case '|':
        return emit(l, TK_PIPE);
    case '(':
        l->paren++;
        return emit(l, TK_LPAREN);
    case ')': {
        /* the token first, as Go 1.19 does, so the parser's "unexpected ")""
         * comes before the lexer's complaint */
        int rc = emit(l, TK_RPAREN);
        if (rc == 0 && --l->paren < 0)
            return lex_error(l, "unexpected right paren");
        return rc;
    }
    }
    if (c >= 0x20 && c < 0x7f)
        return emit(l, TK_SYM);
    return lex_error(l, "unrecognized character in action: U+%04X", (unsigned)c);
}

/* One token inside {{ }} (Go's lexInsideAction). */
static int lex_inside(struct lex *l, int *in_action)
{
    int trim;
    if (at_right_delim(l, l->pos, &trim)) {
        if (l->paren == 0)
            return lex_right_delim(l, trim, in_action);
        return lex_error(l, "unclosed left paren");
    }
    int c = peek_at(l, l->pos);
    if (c < 0)
        return lex_error(l, "unclosed action");
    if (is_space(c))
        return lex_space(l);
    l->pos++;
    switch (c) {
    case '"':
        return lex_quote(l, '"', TK_STRING, "quoted string");
    case '`':
        return lex_quote(l, '`', TK_RAWSTRING, "raw quoted string");
    case '\'':
        return lex_quote(l, '\'', TK_CHAR, "character constant");
    case '$':
        return lex_field_or_var(l, TK_VAR);
    case '.': {
        int d = peek_at(l, l->pos);
        if (d < '0' || d > '9')
            return lex_field_or_var(l, TK_FIELD);
        l->pos--;
        return lex_number(l);
    }
    }
    if (c == '+' || c == '-' || (c >= '0' && c <= '9')) {
        l->pos--;
        return lex_number(l);
    }
    if (is_alnum(c)) {
        l->pos--;
        return lex_identifier(l);
    }
    return lex_punct(l, c);
}

int tmpl_lex(struct tmpl_lexer *lx, const char *src, size_t len, struct mf_err *err)
{
    memset(lx, 0, sizeof *lx);
    struct lex l = {.lx = lx, .src = src, .len = len, .err = err};
    int in_action = 0;
    int rc = 0;
    while (rc == 0) {
        l.start = l.pos;
        rc = in_action ? lex_inside(&l, &in_action) : lex_text(&l, &in_action);
    }
    if (rc < 0) {
        tmpl_lex_free(lx);
        return rc;
    }
    return 0;
}

void tmpl_lex_free(struct tmpl_lexer *lx)
{
    if (!lx)
        return;
    free(lx->toks);
    lx->toks = NULL;
    lx->n = 0;
}
