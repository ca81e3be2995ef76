/*
 * template.c: the parser of Ollama's TEMPLATE language (Go text/template),
 * template compilation, and the tree rewrites Ollama applies.
 *
 * A port of Go's text/template/parse/parse.go: the same grammar, the same
 * variable scoping (a variable lives until the {{end}} of the control
 * structure that declared it), the same "else if"/"else with" rewrite, the
 * same errors. Not supported, with a clear error: {{define}}, {{template}},
 * {{block}}, floating-point and complex constants, and the functions html,
 * js, urlquery and call (no Ollama template uses them).
 *
 * Owns: the copy of the source, the parse tree, the unquoted strings, all in
 * one arena freed by tmpl_free. The tree is immutable after tmpl_compile, so
 * executions may run concurrently. Two trees may exist: root, and for
 * templates without .Messages, "legacy", a copy of root cut after the first
 * {{ .Response }} the way Ollama's deleteNode cuts it (template.go), which
 * shares the untouched leaves with root.
 */
#include "text/template_int.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/num.h"
#include "common/utf8.h"

/* ---- limits -------------------------------------------------------------- */

void tmpl_limits_default(struct tmpl_limits *lim)
{
    lim->max_source = 256u << 10;
    lim->max_depth = 64;
    lim->max_output = 16u << 20;
    lim->max_iterations = 1000000;
    lim->max_steps = 20000000;
    lim->max_scratch = 64u << 20;
}

/* ---- arena --------------------------------------------------------------- */

struct tmpl_arena_block {
    struct tmpl_arena_block *next; /* older block */
    size_t used;                   /* bytes handed out */
    size_t cap;                    /* bytes in data */
    max_align_t data[];
};

#define ARENA_BLOCK (16u << 10)

/* Zeroed, aligned memory that lives until arena_free; NULL past a->max. */
static void *arena_alloc(struct tmpl_arena *a, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    struct tmpl_arena_block *b = a->head;
    if (!b || b->cap - b->used < n) {
        size_t cap = n > ARENA_BLOCK ? n : ARENA_BLOCK;
        if (a->total + cap > a->max)
            return NULL;
        b = calloc(1, sizeof *b + cap);
        if (!b)
            return NULL;
        b->cap = cap;
        b->next = a->head;
        a->head = b;
        a->total += cap;
    }
    void *p = (char *)b->data + b->used;
    b->used += n;
    return p;
}

static void arena_free(struct tmpl_arena *a)
{
    struct tmpl_arena_block *b = a->head;
    while (b) {
        struct tmpl_arena_block *next = b->next;
        free(b);
        b = next;
    }
    a->head = NULL;
    a->total = 0;
}

/* ---- functions ------------------------------------------------------------- */

static const char *const fn_names[FN_COUNT] = {
    [FN_AND] = "and",     [FN_OR] = "or",         [FN_NOT] = "not",         [FN_LEN] = "len",
    [FN_INDEX] = "index", [FN_SLICE] = "slice",   [FN_EQ] = "eq",           [FN_NE] = "ne",
    [FN_LT] = "lt",       [FN_LE] = "le",         [FN_GT] = "gt",           [FN_GE] = "ge",
    [FN_PRINT] = "print", [FN_PRINTF] = "printf", [FN_PRINTLN] = "println", [FN_JSON] = "json",
    [FN_TOJSON] = "tojson",
};

int tmpl_fn_lookup(const char *name, size_t n)
{
    for (int i = 0; i < FN_COUNT; i++)
        if (strlen(fn_names[i]) == n && memcmp(fn_names[i], name, n) == 0)
            return i;
    return -1;
}

const char *tmpl_fn_name(int fn)
{
    return fn >= 0 && fn < FN_COUNT ? fn_names[fn] : "?";
}

void tmpl_linecol(const struct tmpl *t, uint32_t pos, unsigned *line, unsigned *col)
{
    unsigned l = 1;
    size_t bol = 0;
    for (size_t i = 0; i < pos && i < t->len; i++)
        if (t->src[i] == '\n') {
            l++;
            bol = i + 1;
        }
    *line = l;
    *col = (unsigned)(pos - bol) + 1;
}

/* ---- parser state ------------------------------------------------------------ */

struct pvar {
    const char *s; /* "$name", borrowed from the source */
    size_t n;
};

struct parser {
    struct tmpl *t;
    const struct tmpl_token *toks; /* borrowed from the lexer */
    size_t n_toks;
    size_t i;           /* next token */
    const char *lexmsg; /* the lexer's error message */
    struct pvar *vars;  /* variables in scope, innermost last */
    size_t n_vars;
    size_t cap_vars;
    unsigned depth;       /* control structures and parentheses open */
    unsigned range_depth; /* ranges open (break/continue allowed) */
    struct mf_err *err;
};

/* What text_or_action found when it was not a node. */
enum { CTL_NONE, CTL_END, CTL_ELSE };

struct vec {
    struct tmpl_node **v;
    size_t n;
    size_t cap;
};

static int perr(struct parser *p, uint32_t pos, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int perr(struct parser *p, uint32_t pos, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    unsigned line, col;
    tmpl_linecol(p->t, pos, &line, &col);
    return mf_err_set(p->err, MF_EINVAL, "template:%u:%u: %s", line, col, msg);
}

static int nomem(struct parser *p)
{
    return mf_err_set(p->err, MF_ENOMEM, "template: out of memory (or over the size limit)");
}

static const struct tmpl_token *tok_at(const struct parser *p, size_t i)
{
    return &p->toks[i < p->n_toks ? i : p->n_toks - 1];
}

static const struct tmpl_token *next(struct parser *p)
{
    return tok_at(p, p->i++);
}

static const struct tmpl_token *peek(const struct parser *p)
{
    return tok_at(p, p->i);
}

static void backup(struct parser *p)
{
    p->i--;
}

static const struct tmpl_token *next_nonspace(struct parser *p)
{
    const struct tmpl_token *tk;
    do
        tk = next(p);
    while (tk->type == TK_SPACE);
    return tk;
}

static const struct tmpl_token *peek_nonspace(struct parser *p)
{
    const struct tmpl_token *tk = next_nonspace(p);
    backup(p);
    return tk;
}

static const char *tok_text(const struct parser *p, const struct tmpl_token *tk)
{
    return p->t->src + tk->pos;
}

/* Go's item.String(): EOF, the lexer's message, <keyword>, or quoted text
 * cut at 10 bytes. */
static const char *tok_desc(const struct parser *p, const struct tmpl_token *tk, char *buf,
                            size_t size)
{
    if (tk->type == TK_EOF)
        return "EOF";
    if (tk->type == TK_ERROR)
        return p->lexmsg;
    if (tk->type > TK_KEYWORD || tk->type == TK_DOT || tk->type == TK_NIL)
        snprintf(buf, size, "<%.*s>", (int)tk->len, tok_text(p, tk));
    else if (tk->len > 10)
        snprintf(buf, size, "\"%.10s\"...", tok_text(p, tk));
    else
        snprintf(buf, size, "\"%.*s\"", (int)tk->len, tok_text(p, tk));
    return buf;
}

static int unexpected(struct parser *p, const struct tmpl_token *tk, const char *context)
{
    char buf[64];
    if (tk->type == TK_ERROR)
        return perr(p, tk->pos, "%s", p->lexmsg);
    return perr(p, tk->pos, "unexpected %s in %s", tok_desc(p, tk, buf, sizeof buf), context);
}

static struct tmpl_node *new_node(struct parser *p, enum tmpl_node_kind kind,
                                  const struct tmpl_token *tk)
{
    struct tmpl_node *n = arena_alloc(&p->t->arena, sizeof *n);
    if (n) {
        n->kind = kind;
        n->pos = tk->pos;
        n->end = tk->pos + tk->len;
    }
    return n;
}

/* End offset of the last token consumed. */
static uint32_t last_end(const struct parser *p)
{
    const struct tmpl_token *tk = tok_at(p, p->i ? p->i - 1 : 0);
    return tk->pos + tk->len;
}

static char *arena_strndup(struct parser *p, const char *s, size_t n)
{
    char *d = arena_alloc(&p->t->arena, n + 1);
    if (d && n)
        memcpy(d, s, n);
    return d;
}

static int vec_push(struct parser *p, struct vec *v, struct tmpl_node *n)
{
    if (!n)
        return nomem(p);
    if (v->n == v->cap) {
        size_t ncap = v->cap ? v->cap * 2 : 8;
        struct tmpl_node **nv = realloc(v->v, ncap * sizeof *nv);
        if (!nv)
            return nomem(p);
        v->v = nv;
        v->cap = ncap;
    }
    v->v[v->n++] = n;
    return 0;
}

/* Moves the collected children into the arena as owner's kids; frees v. */
static int vec_finish(struct parser *p, struct vec *v, struct tmpl_node *owner)
{
    int rc = 0;
    if (v->n) {
        owner->kids = arena_alloc(&p->t->arena, v->n * sizeof *owner->kids);
        if (owner->kids) {
            memcpy(owner->kids, v->v, v->n * sizeof *owner->kids);
            owner->n_kids = (uint32_t)v->n;
        } else {
            rc = nomem(p);
        }
    }
    free(v->v);
    *v = (struct vec){0};
    return rc;
}

/* ---- variables ---------------------------------------------------------------- */

static int push_var(struct parser *p, const char *s, size_t n)
{
    if (p->n_vars == p->cap_vars) {
        size_t ncap = p->cap_vars ? p->cap_vars * 2 : 16;
        struct pvar *nv = realloc(p->vars, ncap * sizeof *nv);
        if (!nv)
            return nomem(p);
        p->vars = nv;
        p->cap_vars = ncap;
    }
    p->vars[p->n_vars++] = (struct pvar){s, n};
    return 0;
}

static int var_defined(const struct parser *p, const char *s, size_t n)
{
    for (size_t i = p->n_vars; i-- > 0;)
        if (p->vars[i].n == n && memcmp(p->vars[i].s, s, n) == 0)
            return 1;
    return 0;
}

static int use_var(struct parser *p, const struct tmpl_token *tk)
{
    if (!var_defined(p, tok_text(p, tk), tk->len))
        return perr(p, tk->pos, "undefined variable \"%.*s\"", (int)tk->len, tok_text(p, tk));
    return 0;
}

/* ---- literals ------------------------------------------------------------------ */

/* Reads n hex digits at s (s < e). Returns the value, or -1. */
static long read_hex(const char *s, const char *e, int n)
{
    long v = 0;
    if (e - s < n)
        return -1;
    for (int i = 0; i < n; i++) {
        int h = mf_num_hex_digit((unsigned char)s[i]);
        if (h < 0)
            return -1;
        v = v * 16 + h;
    }
    return v;
}

/* One escape after a backslash (Go's strconv.UnquoteChar). Writes the bytes
 * to out (room for 4), sets *adv to the source bytes consumed. Returns the
 * number of bytes written, or -1 for invalid syntax. */
static int unescape(const char *s, const char *e, int quote, char *out, size_t *adv)
{
    static const char simple[] = "a\ab\bf\fn\nr\rt\tv\v\\\\";
    if (s >= e)
        return -1;
    int c = (unsigned char)*s;
    for (const char *q = simple; *q; q += 2)
        if (c == q[0]) {
            out[0] = q[1];
            *adv = 1;
            return 1;
        }
    if (c == '\'' || c == '"') {
        out[0] = (char)c;
        *adv = 1;
        return c == quote ? 1 : -1;
    }
    long v;
    if (c == 'x') {
        v = read_hex(s + 1, e, 2);
        *adv = 3;
        out[0] = (char)v;
        return v < 0 ? -1 : 1;
    }
    if (c >= '0' && c <= '7') {
        if (e - s < 3 || s[1] < '0' || s[1] > '7' || s[2] < '0' || s[2] > '7')
            return -1;
        v = (c - '0') * 64 + (s[1] - '0') * 8 + (s[2] - '0');
        *adv = 3;
        out[0] = (char)v;
        return v > 255 ? -1 : 1;
    }
    if (c == 'u' || c == 'U') {
        int nd = c == 'u' ? 4 : 8;
        v = read_hex(s + 1, e, nd);
        *adv = (size_t)nd + 1;
        int k = v < 0 ? 0 : mf_utf8_encode((uint32_t)v, out);
        return k ? k : -1;
    }
    return -1;
}

/* Unquotes a "..." or `...` token into the arena. */
static int unquote(struct parser *p, const struct tmpl_token *tk, const char **out, size_t *n)
{
    const char *s = tok_text(p, tk) + 1, *e = tok_text(p, tk) + tk->len - 1;
    char *d = arena_alloc(&p->t->arena, tk->len + 1);
    size_t k = 0;
    if (!d)
        return nomem(p);
    while (s < e) {
        if (tk->type == TK_RAWSTRING || *s != '\\') {
            if (!(tk->type == TK_RAWSTRING && *s == '\r')) /* Go drops CR in raw strings */
                d[k++] = *s;
            s++;
            continue;
        }
        size_t adv;
        int w = unescape(s + 1, e, '"', d + k, &adv);
        if (w < 0)
            return perr(p, tk->pos, "invalid syntax in quoted string %.*s", (int)tk->len,
                        tok_text(p, tk));
        k += (size_t)w;
        s += 1 + adv;
    }
    *out = d;
    *n = k;
    return 0;
}

/* 'c' as a number: exactly one (possibly escaped) code point. */
static int char_constant(struct parser *p, const struct tmpl_token *tk, int64_t *v)
{
    const char *s = tok_text(p, tk) + 1, *e = tok_text(p, tk) + tk->len - 1;
    uint32_t cp = 0;
    size_t used = 0;
    if (s < e && *s == '\\') {
        char buf[4];
        size_t adv = 0;
        int w = unescape(s + 1, e, '\'', buf, &adv);
        int wide = s + 1 < e && (s[1] == 'u' || s[1] == 'U');
        if (w > 0 && !wide)
            cp = (unsigned char)buf[0]; /* \x and octal escapes are byte values */
        if (w > 0 && (!wide || mf_utf8_decode(buf, (size_t)w, &cp)))
            used = 1 + adv;
    } else if (s < e) {
        used = (size_t)mf_utf8_decode(s, (size_t)(e - s), &cp);
    }
    if (!used || s + used != e)
        return perr(p, tk->pos, "malformed character constant: %.*s", (int)tk->len,
                    tok_text(p, tk));
    *v = cp;
    return 0;
}

/* Digits of base b with Go's underscore rule (only between digits). */
static int parse_digits(const char *s, size_t n, int base, int64_t *v)
{
    uint64_t acc = 0;
    int prev_digit = 0, any = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '_') {
            if (!prev_digit)
                return -1;
            prev_digit = 0;
            continue;
        }
        int d = mf_num_hex_digit((unsigned char)s[i]);
        if (d < 0 || d >= base)
            return -1;
        if (acc > (UINT64_MAX - (uint64_t)d) / (uint64_t)base)
            return -2;
        acc = acc * (uint64_t)base + (uint64_t)d;
        prev_digit = any = 1;
    }
    if (!any || !prev_digit)
        return -1;
    if (acc > (uint64_t)INT64_MAX + 1)
        return -2;
    *v = (int64_t)acc; /* the caller negates; INT64_MIN round-trips */
    return 0;
}

/* An integer constant the way Go's strconv.ParseInt(text, 0, 64) reads it. */
static int number_constant(struct parser *p, const struct tmpl_token *tk, int64_t *v)
{
    const char *s = tok_text(p, tk);
    size_t n = tk->len;
    int neg = 0, base = 10;
    if (n && (s[0] == '+' || s[0] == '-')) {
        neg = s[0] == '-';
        s++;
        n--;
    }
    int hex = n > 1 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X');
    const char *exp = hex ? "pP" : "eE";
    if (memchr(s, '.', n) || memchr(s, 'i', n) || memchr(s, exp[0], n) || memchr(s, exp[1], n))
        return perr(p, tk->pos, "floating-point and complex constants are not supported: %.*s",
                    (int)tk->len, tok_text(p, tk));
    if (n > 1 && s[0] == '0') {
        int c = tolower((unsigned char)s[1]);
        base = c == 'x' ? 16 : c == 'o' ? 8 : c == 'b' ? 2 : 8;
        if (c == 'x' || c == 'o' || c == 'b') {
            s += 2;
            n -= 2;
            if (n && s[0] == '_') { /* Go allows "0x_1f" */
                s++;
                n--;
            }
        }
    }
    int rc = parse_digits(s, n, base, v);
    if (rc == 0 && !neg && *v == INT64_MIN)
        rc = -2;
    if (rc == -2)
        return perr(p, tk->pos, "integer overflow: \"%.*s\"", (int)tk->len, tok_text(p, tk));
    if (rc)
        return perr(p, tk->pos, "illegal number syntax: \"%.*s\"", (int)tk->len, tok_text(p, tk));
    if (neg)
        *v = (int64_t)(0 - (uint64_t)*v);
    return 0;
}

/* ---- the grammar ----------------------------------------------------------------- */

static int pipeline(struct parser *p, const char *context, enum tmpl_tok end,
                    struct tmpl_node **out);
static int item_list(struct parser *p, struct tmpl_node **list, int *ctl, uint32_t *ctl_pos);

static int enter(struct parser *p, uint32_t pos)
{
    if (++p->depth > p->t->lim.max_depth)
        return perr(p, pos, "template nesting too deep (limit %u)", p->t->lim.max_depth);
    return 0;
}

/* Field names: ".A" of a token, without the dot, as arena strings. */
static int add_ident(struct parser *p, struct tmpl_node *n, const struct tmpl_token *tk)
{
    const char **ids = arena_alloc(&p->t->arena, (n->n_idents + 1) * sizeof *ids);
    char *name = arena_strndup(p, tok_text(p, tk) + 1, tk->len - 1);
    if (!ids || !name)
        return nomem(p);
    if (n->n_idents)
        memcpy(ids, n->idents, n->n_idents * sizeof *ids);
    ids[n->n_idents++] = name;
    n->idents = ids;
    n->end = tk->pos + tk->len;
    return 0;
}

static int term_literal(struct parser *p, const struct tmpl_token *tk, struct tmpl_node *n)
{
    switch (tk->type) {
    case TK_BOOL:
        n->num = tk->len == 4; /* "true" */
        return 0;
    case TK_CHAR:
        return char_constant(p, tk, &n->num);
    case TK_NUMBER:
        return number_constant(p, tk, &n->num);
    default:
        return unquote(p, tk, &n->s, &n->n);
    }
}

/* Go's term(): a literal, function name, ., nil, $var, .Field or (pipeline).
 * *out stays NULL (and the token unread) when none starts here. */
static int term(struct parser *p, struct tmpl_node **out)
{
    static const enum tmpl_node_kind kinds[] = {
        [TK_IDENT] = TN_IDENT,      [TK_DOT] = TN_DOT,       [TK_NIL] = TN_NIL,
        [TK_VAR] = TN_VAR,          [TK_FIELD] = TN_FIELD,   [TK_BOOL] = TN_BOOL,
        [TK_CHAR] = TN_NUMBER,      [TK_NUMBER] = TN_NUMBER, [TK_STRING] = TN_STRING,
        [TK_RAWSTRING] = TN_STRING,
    };
    const struct tmpl_token *tk = next_nonspace(p);
    *out = NULL;
    if (tk->type == TK_LPAREN) {
        int rc = enter(p, tk->pos);
        if (!rc)
            rc = pipeline(p, "parenthesized pipeline", TK_RPAREN, out);
        p->depth--;
        return rc;
    }
    if (tk->type >= sizeof kinds / sizeof kinds[0] || (!kinds[tk->type] && tk->type != TK_IDENT)) {
        backup(p);
        return 0;
    }
    int fn = tk->type == TK_IDENT ? tmpl_fn_lookup(tok_text(p, tk), tk->len) : -1;
    if (tk->type == TK_IDENT && fn < 0)
        return perr(p, tk->pos, "function \"%.*s\" not defined", (int)tk->len, tok_text(p, tk));
    int rc = tk->type == TK_VAR ? use_var(p, tk) : 0;
    if (rc)
        return rc;
    struct tmpl_node *n = new_node(p, kinds[tk->type], tk);
    if (!n)
        return nomem(p);
    if (tk->type == TK_IDENT || tk->type == TK_VAR) {
        n->s = tok_text(p, tk);
        n->n = tk->len;
        n->num = fn;
    } else if (tk->type == TK_FIELD) {
        rc = add_ident(p, n, tk);
    } else if (kinds[tk->type] == TN_NUMBER || kinds[tk->type] == TN_STRING ||
               tk->type == TK_BOOL) {
        rc = term_literal(p, tk, n);
    }
    *out = n;
    return rc;
}

/* "unexpected . after term", quoting the term as Go's %q does. */
static int unexpected_dot(struct parser *p, const struct tmpl_node *n)
{
    char q[96];
    size_t k = 0;
    for (uint32_t i = n->pos; i < n->end && k + 3 < sizeof q; i++) {
        char c = p->t->src[i];
        if (c == '"' || c == '\\')
            q[k++] = '\\';
        q[k++] = c;
    }
    q[k] = '\0';
    return perr(p, n->pos, "unexpected . after term \"%s\"", q);
}

/* Go's operand(): a term followed by .Field chains. */
static int operand(struct parser *p, struct tmpl_node **out)
{
    struct tmpl_node *n;
    int rc = term(p, &n);
    *out = n;
    if (rc || !n || peek(p)->type != TK_FIELD)
        return rc;
    switch (n->kind) {
    case TN_BOOL:
    case TN_STRING:
    case TN_NUMBER:
    case TN_NIL:
    case TN_DOT:
        return unexpected_dot(p, n);
    case TN_FIELD:
    case TN_VAR:
        break;
    default: {
        struct tmpl_node *chain = new_node(p, TN_CHAIN, peek(p));
        if (!chain)
            return nomem(p);
        chain->pos = n->pos;
        chain->pipe = n;
        *out = n = chain;
    }
    }
    while (!rc && peek(p)->type == TK_FIELD)
        rc = add_ident(p, n, next(p));
    return rc;
}

/* Go's command(): operands separated by spaces, ended by | ) or }}. */
static int command(struct parser *p, struct tmpl_node **out)
{
    struct tmpl_node *cmd = new_node(p, TN_CMD, peek_nonspace(p));
    struct vec args = {0};
    int rc = cmd ? 0 : nomem(p);
    while (!rc) {
        struct tmpl_node *arg;
        peek_nonspace(p);
        rc = operand(p, &arg);
        if (!rc && arg)
            rc = vec_push(p, &args, arg);
        if (rc)
            break;
        const struct tmpl_token *tk = next(p);
        if (tk->type == TK_SPACE)
            continue;
        if (tk->type == TK_RDELIM || tk->type == TK_RPAREN)
            backup(p);
        else if (tk->type != TK_PIPE)
            rc = unexpected(p, tk, "operand");
        break;
    }
    if (!rc && args.n == 0)
        rc = perr(p, cmd->pos, "empty command");
    if (!rc)
        cmd->end = args.v[args.n - 1]->end;
    int frc = cmd ? vec_finish(p, &args, cmd) : (free(args.v), 0);
    *out = cmd;
    return rc ? rc : frc;
}

static int check_pipeline(struct parser *p, struct tmpl_node *pipe, const char *context)
{
    if (pipe->n_kids == 0)
        return perr(p, pipe->pos, "missing value for %s", context);
    for (uint32_t i = 1; i < pipe->n_kids; i++) {
        switch (pipe->kids[i]->kids[0]->kind) {
        case TN_BOOL:
        case TN_DOT:
        case TN_NIL:
        case TN_NUMBER:
        case TN_STRING:
            return perr(p, pipe->kids[i]->pos, "non executable command in pipeline stage %u",
                        i + 1);
        default:
            break;
        }
    }
    return 0;
}

static int add_decl(struct parser *p, struct tmpl_node *pipe, const struct tmpl_token *v,
                    int assign)
{
    int rc = assign ? use_var(p, v) : 0;
    if (rc)
        return rc;
    char *name = arena_strndup(p, tok_text(p, v), v->len);
    if (!name)
        return nomem(p);
    pipe->decl[pipe->n_decl++] = name;
    pipe->is_assign = (uint8_t)assign;
    return assign ? 0 : push_var(p, tok_text(p, v), v->len);
}

/* Declarations at the start of a pipeline: "$x :=", "$x =", and in range
 * "$i, $e :=". Leaves the tokens unread when "$x" is just an operand. */
static int declarations(struct parser *p, struct tmpl_node *pipe, const char *context)
{
    while (peek_nonspace(p)->type == TK_VAR) {
        size_t save = p->i;
        const struct tmpl_token *v = next(p);
        const struct tmpl_token *nx = peek_nonspace(p);
        if (nx->type == TK_ASSIGN || nx->type == TK_DECLARE) {
            next_nonspace(p);
            return add_decl(p, pipe, v, nx->type == TK_ASSIGN);
        }
        if (nx->type == TK_SYM && tok_text(p, nx)[0] == ',') {
            next_nonspace(p);
            int rc = add_decl(p, pipe, v, 0);
            if (rc)
                return rc;
            if (strcmp(context, "range") == 0 && pipe->n_decl < 2) {
                enum tmpl_tok t = peek_nonspace(p)->type;
                if (t == TK_VAR || t == TK_RDELIM || t == TK_RPAREN)
                    continue;
                return perr(p, v->pos, "range can only initialize variables");
            }
            return perr(p, v->pos, "too many declarations in %s", context);
        }
        p->i = save;
        break;
    }
    return 0;
}

/* Go's pipeline(): optional declarations, then commands joined by |, up to
 * the end token. */
static int pipeline(struct parser *p, const char *context, enum tmpl_tok end,
                    struct tmpl_node **out)
{
    struct tmpl_node *pipe = new_node(p, TN_PIPE, peek_nonspace(p));
    struct vec cmds = {0};
    if (!pipe)
        return nomem(p);
    *out = pipe;
    int rc = declarations(p, pipe, context);
    while (!rc) {
        const struct tmpl_token *tk = next_nonspace(p);
        if (tk->type == end)
            break;
        switch (tk->type) {
        case TK_BOOL:
        case TK_CHAR:
        case TK_DOT:
        case TK_FIELD:
        case TK_IDENT:
        case TK_NUMBER:
        case TK_NIL:
        case TK_RAWSTRING:
        case TK_STRING:
        case TK_VAR:
        case TK_LPAREN: {
            struct tmpl_node *cmd;
            backup(p);
            rc = command(p, &cmd);
            if (!rc)
                rc = vec_push(p, &cmds, cmd);
            break;
        }
        default:
            rc = unexpected(p, tk, context);
        }
    }
    pipe->end = cmds.n ? cmds.v[cmds.n - 1]->end : pipe->pos;
    int frc = vec_finish(p, &cmds, pipe);
    if (!rc)
        rc = frc;
    return rc ? rc : check_pipeline(p, pipe, context);
}

static int control(struct parser *p, enum tmpl_node_kind kind, const struct tmpl_token *kw,
                   struct tmpl_node **out);

/* The else branch after "{{else": "{{else if ...}}" and "{{else with ...}}"
 * become an else list holding one nested if/with, as Go rewrites them. */
static int else_branch(struct parser *p, enum tmpl_node_kind kind, struct tmpl_node *n)
{
    const struct tmpl_token *tk = peek(p);
    if ((kind == TN_IF && tk->type == TK_IF) || (kind == TN_WITH && tk->type == TK_WITH)) {
        next(p);
        struct tmpl_node *inner, *list = new_node(p, TN_LIST, tk);
        struct vec one = {0};
        int rc = list ? control(p, kind, tk, &inner) : nomem(p);
        if (!rc)
            rc = vec_push(p, &one, inner);
        if (!rc)
            rc = vec_finish(p, &one, list);
        free(one.v);
        n->elist = list;
        return rc;
    }
    int ctl;
    uint32_t ctl_pos;
    int rc = item_list(p, &n->elist, &ctl, &ctl_pos);
    if (!rc && ctl != CTL_END)
        rc = perr(p, ctl_pos, "expected end; found {{else}}");
    return rc;
}

/* Go's parseControl for if/range/with: the pipeline, the body, an optional
 * else branch; variables declared here go out of scope at {{end}}. */
static int control(struct parser *p, enum tmpl_node_kind kind, const struct tmpl_token *kw,
                   struct tmpl_node **out)
{
    static const char *const ctx[] = {[TN_IF] = "if", [TN_RANGE] = "range", [TN_WITH] = "with"};
    size_t saved_vars = p->n_vars;
    struct tmpl_node *n = new_node(p, kind, kw);
    *out = n;
    if (!n)
        return nomem(p);
    int rc = enter(p, kw->pos);
    if (!rc)
        rc = pipeline(p, ctx[kind], TK_RDELIM, &n->pipe);
    int ctl = CTL_NONE;
    uint32_t ctl_pos = 0;
    if (!rc) {
        p->range_depth += kind == TN_RANGE;
        rc = item_list(p, &n->list, &ctl, &ctl_pos);
        p->range_depth -= kind == TN_RANGE;
    }
    if (!rc && ctl == CTL_ELSE)
        rc = else_branch(p, kind, n);
    p->depth--;
    p->n_vars = saved_vars;
    if (!rc)
        n->end = last_end(p);
    return rc;
}

static int expect_rdelim(struct parser *p, const char *context)
{
    const struct tmpl_token *tk = next_nonspace(p);
    return tk->type == TK_RDELIM ? 0 : unexpected(p, tk, context);
}

/* Go's action(): a keyword form or a plain pipeline. *ctl reports {{end}}
 * and {{else}}, which end the enclosing list instead of being nodes. */
static int action(struct parser *p, const struct tmpl_token *ld, struct tmpl_node **out, int *ctl)
{
    const struct tmpl_token *tk = next_nonspace(p);
    *out = NULL;
    switch (tk->type) {
    case TK_BLOCK:
    case TK_DEFINE:
    case TK_TEMPLATE:
        return perr(p, tk->pos, "{{%.*s}} is not supported in mfc templates", (int)tk->len,
                    tok_text(p, tk));
    case TK_BREAK:
    case TK_CONTINUE: {
        int is_break = tk->type == TK_BREAK;
        int rc = expect_rdelim(p, is_break ? "{{break}}" : "{{continue}}");
        if (!rc && p->range_depth == 0)
            rc = perr(p, tk->pos, "{{%s}} outside {{range}}", is_break ? "break" : "continue");
        if (!rc && !(*out = new_node(p, is_break ? TN_BREAK : TN_CONTINUE, tk)))
            rc = nomem(p);
        return rc;
    }
    case TK_ELSE: {
        *ctl = CTL_ELSE;
        enum tmpl_tok t = peek_nonspace(p)->type;
        return t == TK_IF || t == TK_WITH ? 0 : expect_rdelim(p, "else");
    }
    case TK_END:
        *ctl = CTL_END;
        return expect_rdelim(p, "end");
    case TK_IF:
        return control(p, TN_IF, tk, out);
    case TK_RANGE:
        return control(p, TN_RANGE, tk, out);
    case TK_WITH:
        return control(p, TN_WITH, tk, out);
    default:
        break;
    }
    backup(p);
    struct tmpl_node *n = new_node(p, TN_ACTION, ld);
    if (!n)
        return nomem(p);
    *out = n;
    int rc = pipeline(p, "command", TK_RDELIM, &n->pipe);
    n->end = last_end(p);
    return rc;
}

static int text_or_action(struct parser *p, struct tmpl_node **out, int *ctl)
{
    const struct tmpl_token *tk = next_nonspace(p);
    *ctl = CTL_NONE;
    *out = NULL;
    if (tk->type == TK_TEXT) {
        struct tmpl_node *n = new_node(p, TN_TEXT, tk);
        if (!n)
            return nomem(p);
        n->s = tok_text(p, tk);
        n->n = tk->len;
        *out = n;
        return 0;
    }
    if (tk->type == TK_LDELIM)
        return action(p, tk, out, ctl);
    return unexpected(p, tk, "input");
}

/* Nodes up to {{end}} or {{else}} (reported in *ctl, at *ctl_pos). */
static int item_list(struct parser *p, struct tmpl_node **list, int *ctl, uint32_t *ctl_pos)
{
    struct vec items = {0};
    struct tmpl_node *l = new_node(p, TN_LIST, peek_nonspace(p));
    int rc = l ? 0 : nomem(p);
    *list = l;
    *ctl = CTL_NONE;
    while (!rc && peek_nonspace(p)->type != TK_EOF) {
        struct tmpl_node *n;
        *ctl_pos = peek_nonspace(p)->pos;
        rc = text_or_action(p, &n, ctl);
        if (rc || *ctl != CTL_NONE)
            break;
        rc = vec_push(p, &items, n);
    }
    if (!rc && *ctl == CTL_NONE)
        rc = perr(p, peek(p)->pos, "unexpected EOF");
    int frc = l ? vec_finish(p, &items, l) : (free(items.v), 0);
    return rc ? rc : frc;
}

static int parse_root(struct parser *p)
{
    struct vec items = {0};
    struct tmpl_node *root = new_node(p, TN_LIST, peek(p));
    int rc = root ? 0 : nomem(p);
    while (!rc && peek(p)->type != TK_EOF) {
        struct tmpl_node *n;
        int ctl;
        uint32_t pos = peek(p)->pos;
        rc = text_or_action(p, &n, &ctl);
        if (!rc && ctl != CTL_NONE)
            rc = perr(p, pos, "unexpected {{%s}}", ctl == CTL_END ? "end" : "else");
        if (!rc && n)
            rc = vec_push(p, &items, n);
    }
    int frc = root ? vec_finish(p, &items, root) : (free(items.v), 0);
    p->t->root = root;
    return rc ? rc : frc;
}

/* ---- Ollama's rewrites ------------------------------------------------------------ */

static int ident_eq(const char *a, const char *b)
{
    return strcasecmp(a, b) == 0;
}

/* Ollama's Identifiers(): field names and variables, through lists, actions,
 * branches (pipelines included) and nested pipelines, not chains. */
static int node_uses(const struct tmpl_node *n, const char *name)
{
    if (!n)
        return 0;
    switch (n->kind) {
    case TN_LIST:
    case TN_PIPE:
    case TN_CMD:
        for (uint32_t i = 0; i < n->n_kids; i++)
            if (node_uses(n->kids[i], name))
                return 1;
        return 0;
    case TN_ACTION:
        return node_uses(n->pipe, name);
    case TN_IF:
    case TN_RANGE:
    case TN_WITH:
        return node_uses(n->pipe, name) || node_uses(n->list, name) || node_uses(n->elist, name);
    case TN_VAR:
        if (strlen(name) == n->n && strncasecmp(n->s, name, n->n) == 0)
            return 1;
        /* fall through */
    case TN_FIELD:
        for (uint32_t i = 0; i < n->n_idents; i++)
            if (ident_eq(n->idents[i], name))
                return 1;
        return 0;
    default:
        return 0;
    }
}

int tmpl_uses(const struct tmpl *t, const char *name)
{
    return t && name && node_uses(t->root, name);
}

/* Ollama's touch-up: append {{ .Response }} as a synthetic action. */
static int append_response(struct tmpl *t)
{
    struct tmpl_node *act = arena_alloc(&t->arena, sizeof *act);
    struct tmpl_node *pipe = arena_alloc(&t->arena, sizeof *pipe);
    struct tmpl_node *cmd = arena_alloc(&t->arena, sizeof *cmd);
    struct tmpl_node *field = arena_alloc(&t->arena, sizeof *field);
    struct tmpl_node **cmds = arena_alloc(&t->arena, sizeof *cmds);
    struct tmpl_node **args = arena_alloc(&t->arena, sizeof *args);
    const char **ids = arena_alloc(&t->arena, sizeof *ids);
    struct tmpl_node **items = arena_alloc(&t->arena, (t->root->n_kids + 1) * sizeof *items);
    if (!act || !pipe || !cmd || !field || !cmds || !args || !ids || !items)
        return MF_ENOMEM;
    uint32_t at = (uint32_t)t->len;
    *field = (struct tmpl_node){.kind = TN_FIELD, .pos = at, .end = at};
    ids[0] = "Response";
    field->idents = ids;
    field->n_idents = 1;
    args[0] = field;
    *cmd = (struct tmpl_node){.kind = TN_CMD, .pos = at, .end = at, .kids = args, .n_kids = 1};
    cmds[0] = cmd;
    *pipe = (struct tmpl_node){.kind = TN_PIPE, .pos = at, .end = at, .kids = cmds, .n_kids = 1};
    *act = (struct tmpl_node){.kind = TN_ACTION, .pos = at, .end = at, .pipe = pipe};
    if (t->root->n_kids)
        memcpy(items, t->root->kids, t->root->n_kids * sizeof *items);
    items[t->root->n_kids] = act;
    t->root->kids = items;
    t->root->n_kids++;
    return 0;
}

struct cutter {
    struct tmpl *t;
    int cut; /* a .Response field has been passed */
    int nomem;
};

static int is_response_field(const struct tmpl_node *n)
{
    if (n->kind != TN_FIELD)
        return 0;
    for (uint32_t i = 0; i < n->n_idents; i++)
        if (strcmp(n->idents[i], "Response") == 0)
            return 1;
    return 0;
}

static struct tmpl_node *cut_walk(struct cutter *c, const struct tmpl_node *n);
static struct tmpl_node *cut_pipe(struct cutter *c, const struct tmpl_node *n);

/* Copies n with kids mapped through cut_walk, dropping those that vanish. */
static struct tmpl_node *cut_kids(struct cutter *c, const struct tmpl_node *n, int drop_empty)
{
    struct tmpl_node *copy = arena_alloc(&c->t->arena, sizeof *copy);
    struct tmpl_node **kids = arena_alloc(&c->t->arena, (n->n_kids + 1) * sizeof *kids);
    if (!copy || !kids) {
        c->nomem = 1;
        return NULL;
    }
    *copy = *n;
    copy->kids = kids;
    copy->n_kids = 0;
    for (uint32_t i = 0; i < n->n_kids; i++) {
        struct tmpl_node *k = cut_walk(c, n->kids[i]);
        if (k)
            kids[copy->n_kids++] = k;
    }
    return drop_empty && copy->n_kids == 0 ? NULL : copy;
}

/* The arguments of each command go through cut_walk (the commands themselves
 * are not visited); a command left with no arguments takes the pipeline. */
static struct tmpl_node *cut_pipe(struct cutter *c, const struct tmpl_node *n)
{
    struct tmpl_node *copy = arena_alloc(&c->t->arena, sizeof *copy);
    struct tmpl_node **cmds = arena_alloc(&c->t->arena, n->n_kids * sizeof *cmds + 1);
    if (!copy || !cmds) {
        c->nomem = 1;
        return NULL;
    }
    *copy = *n;
    copy->kids = cmds;
    for (uint32_t i = 0; i < n->n_kids; i++) {
        cmds[i] = cut_kids(c, n->kids[i], 1);
        if (!cmds[i])
            return NULL;
    }
    return copy;
}

/* Ollama's deleteNode walk: once a .Response field has been seen (it stays),
 * every node visited after it goes. Branch pipelines are not visited, and an
 * else list visited after the cut disappears (where Go would panic). */
static struct tmpl_node *cut_walk(struct cutter *c, const struct tmpl_node *n)
{
    if (is_response_field(n)) {
        c->cut = 1;
        return (struct tmpl_node *)n;
    }
    if (c->cut)
        return NULL;
    struct tmpl_node *copy;
    switch (n->kind) {
    case TN_LIST:
        return cut_kids(c, n, 0);
    case TN_IF:
    case TN_RANGE:
    case TN_WITH:
        copy = arena_alloc(&c->t->arena, sizeof *copy);
        if (!copy) {
            c->nomem = 1;
            return NULL;
        }
        *copy = *n;
        copy->list = cut_walk(c, n->list);
        copy->elist = n->elist ? cut_walk(c, n->elist) : NULL;
        return copy;
    case TN_ACTION:
        copy = arena_alloc(&c->t->arena, sizeof *copy);
        if (!copy) {
            c->nomem = 1;
            return NULL;
        }
        *copy = *n;
        copy->pipe = cut_walk(c, n->pipe);
        return copy->pipe ? copy : NULL;
    case TN_PIPE:
        return cut_pipe(c, n);
    default:
        return (struct tmpl_node *)n;
    }
}

/* ---- compile ---------------------------------------------------------------------- */

static int parse_source(struct tmpl *t, struct mf_err *err)
{
    struct tmpl_lexer lx;
    int rc = tmpl_lex(&lx, t->src, t->len, err);
    if (rc)
        return rc;
    struct parser p = {.t = t, .toks = lx.toks, .n_toks = lx.n, .lexmsg = lx.msg, .err = err};
    rc = push_var(&p, "$", 1);
    if (!rc)
        rc = parse_root(&p);
    free(p.vars);
    tmpl_lex_free(&lx);
    return rc;
}

int tmpl_compile(struct tmpl **out, const char *src, size_t len, const struct tmpl_limits *lim,
                 unsigned flags, struct mf_err *err)
{
    *out = NULL;
    struct tmpl *t = calloc(1, sizeof *t);
    if (!t)
        return mf_err_set(err, MF_ENOMEM, "template: out of memory");
    if (lim)
        t->lim = *lim;
    else
        tmpl_limits_default(&t->lim);
    int rc = 0;
    if (len > t->lim.max_source || len > UINT32_MAX - 1)
        rc = mf_err_set(err, MF_ENOMEM, "template: %zu bytes is over the limit of %zu", len,
                        t->lim.max_source);
    /* "{{.}}" (5 bytes) makes four nodes of ~150 bytes, and the legacy copy
     * can double that: 512x plus slack bounds the tree */
    t->arena.max = len * 512 + (1u << 20);
    if (!rc && !(t->src = malloc(len + 1)))
        rc = mf_err_set(err, MF_ENOMEM, "template: out of memory");
    if (!rc) {
        if (len)
            memcpy(t->src, src, len);
        t->src[len] = '\0';
        t->len = len;
        rc = parse_source(t, err);
    }
    if (!rc && (flags & TMPL_F_OLLAMA) && !tmpl_uses(t, "messages") && !tmpl_uses(t, "response"))
        rc = append_response(t) ? mf_err_set(err, MF_ENOMEM, "template: out of memory") : 0;
    if (!rc) {
        t->uses_messages = tmpl_uses(t, "messages");
        struct cutter c = {.t = t};
        t->legacy = t->uses_messages ? NULL : cut_walk(&c, t->root);
        if (c.nomem)
            rc = mf_err_set(err, MF_ENOMEM, "template: out of memory");
    }
    if (rc) {
        tmpl_free(t);
        return rc;
    }
    *out = t;
    return 0;
}

void tmpl_free(struct tmpl *t)
{
    if (!t)
        return;
    arena_free(&t->arena);
    free(t->src);
    free(t);
}

int tmpl_execute(const struct tmpl *t, struct tmpl_value *data, struct mf_buf *out,
                 struct mf_err *err)
{
    return tmpl_exec_node(t, t->root, data, out, err);
}
