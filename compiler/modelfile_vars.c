/*
 * modelfile_vars.c: ARG/ENV variables and their expansion, Dockerfile-style.
 *
 * Owns the parser's vars and early_refs vectors. A variable is in scope from
 * the line after its ARG or ENV to the end of the file; ENV beats ARG for
 * the same name; an ARG takes its --build-arg value, else its default, else
 * it has no value (expands to nothing, and *unset tells the caller so that
 * `mfc fmt` can skip checks). Expansion applies to RUN-less Dockerfile lines
 * (ENV, ARG, LABEL) always, and to FROM, ADAPTER, DRAFT, PARAMETER, REQUIRES,
 * RENDERER and PARSER only once an ARG or ENV has been seen, so that a plain
 * Ollama Modelfile reads exactly as Ollama reads it. TEMPLATE, SYSTEM,
 * MESSAGE and LICENSE are never expanded (Go templates use $ themselves).
 */
#include "compiler/modelfile_int.h"

#include <stdlib.h>
#include <string.h>

/* One expansion in progress. */
struct xctx {
    struct mf_modelfile_parser *p;
    const struct mf_lexcmd *c;
    size_t base;    /* offset of the expanded text inside c->raw */
    int unset;      /* a variable without a value was used */
    int failed;     /* an error was reported */
};

static int name_start(char ch) { return ch == '_' || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z'); }
static int name_char(char ch) { return name_start(ch) || (ch >= '0' && ch <= '9'); }

int mf_modelfile_var_name_ok(const char *s, size_t n)
{
    if (n == 0 || !name_start(s[0]))
        return 0;
    for (size_t i = 1; i < n; i++)
        if (!name_char(s[i]))
            return 0;
    return 1;
}

/* Variables by name: open addressing, so that a hostile file with many
 * names and many uses stays linear. */
#define VAR_MAX 4096
#define VAR_SLOTS 8192 /* a power of two, twice VAR_MAX */

struct vslot {
    const char *name;  /* NULL: free slot */
    const char *arg;   /* ARG's value in effect, NULL without one */
    const char *env;   /* ENV's value */
    int arg_line;      /* line of the last ARG naming it, 0: none */
    int env_line;      /* line of the last ENV naming it, 0: none */
};

struct mf_modelfile_vartab {
    struct vslot slot[VAR_SLOTS];
    size_t n; /* names in use */
};

static struct vslot *lookup(struct mf_modelfile_parser *p, const char *name, size_t n, int add)
{
    struct mf_modelfile_vartab *t = p->vartab;
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)name[i]) * 16777619u;
    for (size_t k = 0; t && k < VAR_SLOTS; k++) {
        struct vslot *v = &t->slot[(h + k) & (VAR_SLOTS - 1)];
        if (v->name && strlen(v->name) == n && memcmp(v->name, name, n) == 0)
            return v;
        if (!v->name) {
            if (!add || t->n >= VAR_MAX)
                return NULL;
            t->n++;
            v->name = name;
            return v;
        }
    }
    return NULL;
}

/* The value in effect (ENV beats ARG); NULL when there is none. */
static const char *var_value(const struct vslot *v)
{
    return v->env_line ? v->env : v->arg;
}

int mf_modelfile_var_set(struct mf_modelfile_parser *p, const char *name, const char *value,
                         int line, int is_env)
{
    if (!p->vartab && !(p->vartab = calloc(1, sizeof *p->vartab)))
        return p->oom = 1, -1;
    struct vslot *v = lookup(p, name, strlen(name), 1);
    p->vars_active = 1;
    if (!v)
        return -1;
    if (is_env) {
        v->env = value;
        v->env_line = line;
    } else {
        v->arg = value;
        v->arg_line = line;
    }
    return 0;
}

void mf_modelfile_vars_free(struct mf_modelfile_parser *p)
{
    free(p->vartab);
    p->vartab = NULL;
}

static void x_error(struct xctx *x, size_t off, int len, const char *hint, const char *msg)
{
    const struct mf_lexcmd *c = x->c;
    mf_modelfile_diag(x->p, MF_DIAG_ERROR, c->val_line, mf_modelfile_col_at(c, x->base + off),
                      len, hint, "%s", msg);
    x->failed = 1;
}

static void x_put(struct xctx *x, struct mf_buf *out, const char *s, size_t n)
{
    struct mf_err e;
    if (x->failed)
        return;
    if (mf_buf_append(out, s, n, &e) != 0)
        x_error(x, 0, 1, "shorten the value or the variables it uses",
                "value is too long after ARG expansion (limit 1 MiB)");
}

static void expand_into(struct xctx *x, const char *s, size_t n, size_t at, struct mf_buf *out,
                        int depth);

/* A variable's value, with a ${NAME<op>word} modifier applied. */
static void substitute(struct xctx *x, const char *name, size_t nlen, char op, int colon,
                       const char *word, size_t wlen, size_t at, struct mf_buf *out, int depth)
{
    const struct vslot *v = lookup(x->p, name, nlen, 0);
    const char *val = v ? var_value(v) : NULL;
    int set = val != NULL, nonempty = set && val[0] != '\0';
    if (op == '-' && (colon ? !nonempty : !set)) {
        expand_into(x, word, wlen, at, out, depth + 1);
        return;
    }
    if (op == '+') {
        if (colon ? nonempty : set)
            expand_into(x, word, wlen, at, out, depth + 1);
        return;
    }
    if (!v)
        mf_modelfile_diag(x->p, MF_DIAG_WARNING, x->c->val_line,
                          mf_modelfile_col_at(x->c, x->base + at), (int)nlen + 1,
                          "declare it with ARG or ENV above this line, or write \\$ for a "
                          "literal $", "$%.*s is not declared by an earlier ARG or ENV; it "
                          "expands to nothing", (int)nlen, name);
    else if (!val)
        x->unset = 1;
    if (val)
        x_put(x, out, val, strlen(val));
}

/* ${...} at s[i] ('$'); returns the offset just past the closing brace. */
static size_t braced(struct xctx *x, const char *s, size_t n, size_t i, size_t at,
                     struct mf_buf *out, int depth)
{
    size_t j = i + 2, name = j, depth_b = 1, w;
    while (j < n && name_char(s[j]))
        j++;
    size_t nlen = j - name;
    int colon = j < n && s[j] == ':';
    char op = 0;
    if (colon)
        j++;
    if (j < n && (s[j] == '-' || s[j] == '+'))
        op = s[j++];
    for (w = j; j < n; j++) {
        depth_b += s[j] == '{';
        depth_b -= s[j] == '}';
        if (depth_b == 0)
            break;
    }
    if (j >= n || nlen == 0 || !name_start(s[name]) || (colon && !op) ||
        (!op && w != j)) {
        x_error(x, at + i, (int)(j < n ? j - i + 1 : n - i),
                "write ${NAME}, ${NAME:-default} or ${NAME:+value}; \\$ is a literal $",
                "bad variable substitution");
        return n;
    }
    substitute(x, s + name, nlen, op, colon, s + w, j - w, at + i, out, depth);
    return j + 1;
}

static void expand_into(struct xctx *x, const char *s, size_t n, size_t at, struct mf_buf *out,
                        int depth)
{
    size_t i = 0, run = 0;
    if (depth > 8) {
        x_error(x, at, 1, NULL, "variable substitutions nested too deeply");
        return;
    }
    while (i < n && !x->failed) {
        if (s[i] == '\\' && i + 1 < n && s[i + 1] == '$') {
            x_put(x, out, s + run, i - run);
            run = ++i; /* keep the '$' as text */
            i++;
        } else if (s[i] == '$' && i + 1 < n && (s[i + 1] == '{' || name_start(s[i + 1]))) {
            x_put(x, out, s + run, i - run);
            if (s[i + 1] == '{') {
                i = braced(x, s, n, i, at, out, depth);
            } else {
                size_t j = i + 1;
                while (j < n && name_char(s[j]))
                    j++;
                substitute(x, s + i + 1, j - i - 1, 0, 0, NULL, 0, at + i, out, depth);
                i = j;
            }
            run = i;
        } else {
            i++;
        }
    }
    x_put(x, out, s + run, (i < n ? i : n) - run);
}

int mf_modelfile_expand(struct mf_modelfile_parser *p, const struct mf_lexcmd *c, const char *s,
                        size_t off, const char **out, int *unset)
{
    struct xctx x = {.p = p, .c = c, .base = off};
    struct mf_buf b;
    if (!strchr(s, '$')) {
        *out = s;
        return 0;
    }
    mf_buf_init(&b, MF_MODELFILE_EXPAND_MAX);
    expand_into(&x, s, strlen(s), 0, &b, 0);
    if (!x.failed) {
        *out = mf_modelfile_strndup(p->arena, b.data ? b.data : "", b.len);
        if (!*out)
            p->oom = 1;
    }
    mf_buf_free(&b);
    if (x.unset && unset)
        *unset = 1;
    return x.failed || p->oom ? -1 : 0;
}

/* ------------------------------------------------------------ shell words */

struct wctx {
    struct xctx x;
    struct mf_buf cur;  /* the word being built */
    struct mf_vec out;  /* struct mf_word */
    struct mf_word w;   /* the word being built: off and eq */
    int in_word;
};

static void w_end(struct wctx *w)
{
    if (!w->in_word || w->x.failed)
        return;
    w->w.text = mf_modelfile_strndup(w->x.p->arena, w->cur.data ? w->cur.data : "", w->cur.len);
    if (!w->w.text || mf_modelfile_vec_push(&w->out, &w->w) != 0)
        w->x.p->oom = w->x.failed = 1;
    mf_buf_reset(&w->cur);
    w->in_word = 0;
}

static void w_start(struct wctx *w, size_t off)
{
    if (w->in_word)
        return;
    w->in_word = 1;
    w->w.off = off;
    w->w.eq = -1;
}

/* A '$' at s[i] inside a word: expands it, returns the offset after it. */
static size_t w_dollar(struct wctx *w, const char *s, size_t n, size_t i)
{
    size_t j = i + 1;
    if (j < n && s[j] == '{') {
        int d = 0;
        for (; j < n; j++) {
            d += s[j] == '{';
            d -= s[j] == '}';
            if (d == 0)
                break;
        }
        j = j < n ? j + 1 : n;
    } else {
        while (j < n && name_char(s[j]))
            j++;
    }
    expand_into(&w->x, s + i, j - i, i, &w->cur, 0);
    return j;
}

/* The next character of s at i in quote state *q (0, '"' or '\''). */
static size_t w_step(struct wctx *w, const char *s, size_t n, size_t i, char *q, int split)
{
    char ch = s[i];
    if (*q == '\'') {
        if (ch == '\'')
            *q = 0;
        else
            x_put(&w->x, &w->cur, &ch, 1);
        return i + 1;
    }
    if (*q == 0 && split && (ch == ' ' || ch == '\t')) {
        w_end(w);
        return i + 1;
    }
    w_start(w, i);
    if (ch == '$' && i + 1 < n && (s[i + 1] == '{' || name_start(s[i + 1])))
        return w_dollar(w, s, n, i);
    if (ch == '\\' && i + 1 < n && (*q == 0 || strchr("\"\\$", s[i + 1]))) {
        x_put(&w->x, &w->cur, s + i + 1, 1);
        return i + 2;
    }
    if ((ch == '"' && (*q == 0 || *q == '"')) || (ch == '\'' && *q == 0)) {
        *q = *q ? 0 : ch;
        return i + 1;
    }
    if (ch == '=' && *q == 0 && w->w.eq < 0)
        w->w.eq = (long)w->cur.len;
    x_put(&w->x, &w->cur, &ch, 1);
    return i + 1;
}

int mf_modelfile_words(struct mf_modelfile_parser *p, const struct mf_lexcmd *c, size_t from,
                       int split, struct mf_word **words, size_t *n, int *unset)
{
    struct wctx w = {.x = {.p = p, .c = c, .base = 0}};
    const char *s = c->raw;
    size_t len = strlen(s), i = from, qoff = 0;
    char q = 0;
    int oom = 0;
    mf_buf_init(&w.cur, MF_MODELFILE_EXPAND_MAX);
    w.out.elem = sizeof(struct mf_word);
    while (i < len && !w.x.failed) {
        if (q == 0)
            qoff = i;
        i = w_step(&w, s, len, i, &q, split);
    }
    if (q && !w.x.failed)
        x_error(&w.x, qoff, 1, "close the quote on the same line",
                q == '"' ? "unterminated \" in value" : "unterminated ' in value");
    w_end(&w);
    *words = mf_modelfile_vec_finish(&w.out, p->arena, n, &oom);
    mf_buf_free(&w.cur);
    if (oom)
        p->oom = 1;
    if (w.x.unset && unset)
        *unset = 1;
    return w.x.failed || p->oom ? -1 : 0;
}

/* ------------------------------------------------------ literal $NAME uses */

void mf_modelfile_note_refs(struct mf_modelfile_parser *p, const struct mf_lexcmd *c,
                            const char *s)
{
    for (const char *d = strchr(s, '$'); d; d = strchr(d + 1, '$')) {
        const char *a = d + 1 + (d[1] == '{');
        size_t n = 0;
        while (name_char(a[n]))
            n++;
        if (n == 0 || !name_start(a[0]))
            continue;
        if (p->early_refs.n >= 100)
            return; /* only for warnings: the first hundred are plenty */
        struct mf_var v = {.name = mf_modelfile_strndup(p->arena, a, n),
                           .line = c->val_line,
                           .col = mf_modelfile_col_at(c, (size_t)(d - s))};
        if (!v.name || mf_modelfile_vec_push(&p->early_refs, &v) != 0)
            p->oom = 1;
    }
}

void mf_modelfile_vars_finish(struct mf_modelfile_parser *p)
{
    const struct mf_var *r = p->early_refs.data;
    for (size_t i = 0; i < p->early_refs.n; i++) {
        const struct vslot *v = lookup(p, r[i].name, strlen(r[i].name), 0);
        if (v)
            mf_modelfile_diag(p, MF_DIAG_WARNING, r[i].line, r[i].col, (int)strlen(r[i].name) + 1,
                              mf_modelfile_fmt(p, "move %s %s above its first use",
                                               v->env_line ? "ENV" : "ARG", r[i].name),
                              "$%s is read literally: it is used before line %d declares it",
                              r[i].name, v->env_line ? v->env_line : v->arg_line);
    }
    for (size_t i = 0; i < p->opts->n_build_args; i++)
        if (!p->build_arg_used[i])
            mf_modelfile_diag(p, MF_DIAG_WARNING, 0, 0, 0,
                              "declare it with ARG, or drop the --build-arg",
                              "build-arg %s was not consumed: no ARG declares it",
                              p->opts->build_args[i].name);
}
