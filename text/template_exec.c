/*
 * template_exec.c: executes a parsed template, following Go's
 * text/template/exec.go rule by rule, with its built-in functions.
 *
 * Owns only per-execution state: the variable stack (each slot holds a
 * reference) and the budgets. Reads the template (immutable) and the caller's
 * value tree (never modified). Values flow as new references: every eval_*
 * function hands its result to the caller, who unrefs it.
 *
 * Go's two kinds of "nothing" are kept apart because they behave
 * differently: a missing map key is Go's nil interface (TMPL_NIL: truthy
 * false, fine in eq, an error to take a field of), and a pipeline turns it
 * into the invalid value (a NULL pointer here: prints "<no value>", a field of
 * it is again invalid, an error as an argument of eq/len/index/not/and/or).
 *
 * Walk results: 0, or WALK_BREAK / WALK_CONTINUE travelling up to the
 * enclosing range, or a negative MF_E* code with err filled.
 */
#include "text/template_int.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/utf8.h"

enum { WALK_BREAK = 1, WALK_CONTINUE = 2 };

/* How a function parameter takes its argument (Go's parameter types). */
enum want {
    W_VALUE,  /* reflect.Value: an invalid value is an error */
    W_ANY,    /* any: an invalid value becomes nil */
    W_STRING, /* string (printf's format) */
    W_RAW,    /* no check (the operand of a chain) */
};

struct xvar {
    const char *name;     /* "$x", borrowed from the template */
    size_t n;             /* bytes of name */
    struct tmpl_value *v; /* owned reference, or NULL (invalid) */
};

struct exec {
    const struct tmpl *t;
    struct mf_buf *out; /* the caller's buffer */
    size_t out_start;   /* out->len when execution began */
    struct xvar *vars;  /* owned stack; vars[0] is $ */
    size_t n_vars;
    size_t cap_vars;
    uint64_t iters; /* range iterations so far */
    uint64_t steps; /* nodes and commands evaluated so far */
    size_t scratch; /* bytes of strings and lists built so far */
    struct mf_err *err;
};

/* ---- errors and budgets ----------------------------------------------------- */

static int xerr(struct exec *x, const struct tmpl_node *n, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int xerr(struct exec *x, const struct tmpl_node *n, int code, const char *fmt, ...)
{
    char msg[320];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    unsigned line, col;
    tmpl_linecol(x->t, n->pos, &line, &col);
    if (n->kind == TN_IF || n->kind == TN_RANGE || n->kind == TN_WITH || n->kind == TN_ACTION)
        n = n->pipe;
    const char *text = x->t->src + n->pos;
    int len = (int)(n->end - n->pos);
    if (len == 0 && n->kind == TN_FIELD) { /* the synthetic {{ .Response }} */
        text = ".Response";
        len = 9;
    }
    return mf_err_set(x->err, code, "template:%u:%u: executing at <%.*s%s>: %s", line, col,
                      len > 48 ? 48 : len, text, len > 48 ? "..." : "", msg);
}

static int step(struct exec *x, const struct tmpl_node *n)
{
    if (++x->steps > x->t->lim.max_steps)
        return xerr(x, n, MF_ENOMEM, "evaluation exceeds %" PRIu64 " steps", x->t->lim.max_steps);
    return 0;
}

static int charge(struct exec *x, const struct tmpl_node *n, size_t bytes)
{
    x->scratch += bytes;
    if (x->scratch > x->t->lim.max_scratch)
        return xerr(x, n, MF_ENOMEM, "intermediate values exceed %zu bytes", x->t->lim.max_scratch);
    return 0;
}

static int nomem(struct exec *x, const struct tmpl_node *n)
{
    return xerr(x, n, MF_ENOMEM, "out of memory");
}

/* ---- variables ---------------------------------------------------------------- */

/* Pushes a variable, adopting v. */
static int push_var(struct exec *x, const struct tmpl_node *n, const char *name, size_t len,
                    struct tmpl_value *v)
{
    if (x->n_vars == x->cap_vars) {
        size_t ncap = x->cap_vars ? x->cap_vars * 2 : 16;
        struct xvar *nv = realloc(x->vars, ncap * sizeof *nv);
        if (!nv) {
            tmpl_value_unref(v);
            return nomem(x, n);
        }
        x->vars = nv;
        x->cap_vars = ncap;
    }
    x->vars[x->n_vars++] = (struct xvar){name, len, v};
    return 0;
}

static void pop_vars(struct exec *x, size_t mark)
{
    while (x->n_vars > mark)
        tmpl_value_unref(x->vars[--x->n_vars].v);
}

static struct xvar *find_var(struct exec *x, const char *name, size_t len)
{
    for (size_t i = x->n_vars; i-- > 0;)
        if (x->vars[i].n == len && memcmp(x->vars[i].name, name, len) == 0)
            return &x->vars[i];
    return NULL;
}

/* Assigns the nearest variable called name, adopting v. */
static int set_var(struct exec *x, const struct tmpl_node *n, const char *name,
                   struct tmpl_value *v)
{
    struct xvar *xv = find_var(x, name, strlen(name));
    if (!xv) {
        tmpl_value_unref(v);
        return xerr(x, n, MF_EINVAL, "undefined variable: %s", name);
    }
    tmpl_value_unref(xv->v);
    xv->v = v;
    return 0;
}

/* Replaces the k-th variable from the top (1 = top), adopting v. */
static void set_top_var(struct exec *x, size_t k, struct tmpl_value *v)
{
    struct xvar *xv = &x->vars[x->n_vars - k];
    tmpl_value_unref(xv->v);
    xv->v = v;
}

/* ---- evaluation ---------------------------------------------------------------- */

static int eval_pipeline(struct exec *x, struct tmpl_value *dot, const struct tmpl_node *pipe,
                         struct tmpl_value **out);
static int eval_arg(struct exec *x, struct tmpl_value *dot, const struct tmpl_node *arg,
                    enum want want, struct tmpl_value **out);
static int eval_function(struct exec *x, struct tmpl_value *dot, const struct tmpl_node *ident,
                         const struct tmpl_node *cmd, struct tmpl_value *final, int has_final,
                         struct tmpl_value **out);

/* One field of receiver (Go's evalField). */
static int eval_field(struct exec *x, const struct tmpl_node *n, const char *name,
                      struct tmpl_value *recv, int has_args, struct tmpl_value **out)
{
    *out = NULL;
    if (!recv)
        return 0;
    struct tmpl_value *v;
    switch (recv->kind) {
    case TMPL_NIL:
        return xerr(x, n, MF_EINVAL, "nil pointer evaluating interface {}.%s", name);
    case TMPL_STRUCT:
        v = tmpl_value_get(recv, name, strlen(name));
        if (!v)
            return xerr(x, n, MF_EINVAL, "can't evaluate field %s in type %s", name,
                        tmpl_value_type(recv));
        if (has_args)
            return xerr(x, n, MF_EINVAL, "%s has arguments but cannot be invoked as function",
                        name);
        *out = tmpl_value_ref(v);
        return 0;
    case TMPL_MAP:
        if (has_args)
            return xerr(x, n, MF_EINVAL, "%s is not a method but has arguments", name);
        v = tmpl_value_get(recv, name, strlen(name));
        *out = v ? tmpl_value_ref(v) : tmpl_value_nil();
        return 0;
    default:
        break;
    }
    /* Go names the static type, and a value taken from map[string]any is an
     * interface {} whatever it holds */
    return xerr(x, n, MF_EINVAL, "can't evaluate field %s in type interface {}", name);
}

static int eval_field_chain(struct exec *x, const struct tmpl_node *n, struct tmpl_value *recv,
                            int has_args, struct tmpl_value **out)
{
    struct tmpl_value *cur = tmpl_value_ref(recv);
    for (uint32_t i = 0; i < n->n_idents; i++) {
        struct tmpl_value *nx;
        int rc = eval_field(x, n, n->idents[i], cur, i + 1 == n->n_idents && has_args, &nx);
        tmpl_value_unref(cur);
        if (rc) {
            *out = NULL;
            return rc;
        }
        cur = nx;
    }
    *out = cur;
    return 0;
}

static int eval_variable(struct exec *x, const struct tmpl_node *n, int has_args,
                         struct tmpl_value **out)
{
    struct xvar *xv = find_var(x, n->s, n->n);
    *out = NULL;
    if (!xv)
        return xerr(x, n, MF_EINVAL, "undefined variable: %.*s", (int)n->n, n->s);
    if (n->n_idents)
        return eval_field_chain(x, n, xv->v, has_args, out);
    if (has_args)
        return xerr(x, n, MF_EINVAL, "can't give argument to non-function %.*s", (int)n->n, n->s);
    *out = tmpl_value_ref(xv->v);
    return 0;
}

/* (pipeline).Field */
static int eval_chain(struct exec *x, struct tmpl_value *dot, const struct tmpl_node *n,
                      int has_args, struct tmpl_value **out)
{
    struct tmpl_value *v;
    *out = NULL;
    if (n->pipe->kind == TN_NIL)
        return xerr(x, n, MF_EINVAL, "indirection through explicit nil");
    int rc = eval_arg(x, dot, n->pipe, W_RAW, &v);
    if (!rc)
        rc = eval_field_chain(x, n, v, has_args, out);
    tmpl_value_unref(v);
    return rc;
}

static int literal(struct exec *x, const struct tmpl_node *n, struct tmpl_value **out)
{
    switch (n->kind) {
    case TN_BOOL:
        *out = tmpl_value_bool((int)n->num);
        return 0;
    case TN_NUMBER:
        *out = tmpl_value_int(n->num);
        return *out ? 0 : nomem(x, n);
    default:
        *out = NULL;
        if (charge(x, n, n->n))
            return x->err->code;
        *out = tmpl_value_str(n->s, n->n);
        return *out ? 0 : nomem(x, n);
    }
}

/* Go's validateType for the parameter kinds builtins have; adopts v. */
static int validate(struct exec *x, const struct tmpl_node *n, struct tmpl_value *v, enum want want,
                    struct tmpl_value **out)
{
    *out = NULL;
    if (want == W_RAW) {
        *out = v;
        return 0;
    }
    if (!v) {
        if (want == W_ANY) {
            *out = tmpl_value_nil();
            return 0;
        }
        return xerr(x, n, MF_EINVAL, "invalid value; expected %s",
                    want == W_STRING ? "string" : "reflect.Value");
    }
    if (want == W_STRING && v->kind != TMPL_STRING) {
        const char *type = tmpl_value_type(v);
        tmpl_value_unref(v);
        return xerr(x, n, MF_EINVAL, "wrong type for value; expected string; got %s", type);
    }
    *out = v;
    return 0;
}

static int eval_arg(struct exec *x, struct tmpl_value *dot, const struct tmpl_node *arg,
                    enum want want, struct tmpl_value **out)
{
    struct tmpl_value *v = NULL;
    int rc;
    *out = NULL;
    switch (arg->kind) {
    case TN_DOT:
        v = tmpl_value_ref(dot);
        rc = 0;
        break;
    case TN_NIL:
        if (want == W_ANY || want == W_RAW) {
            *out = tmpl_value_nil();
            return 0;
        }
        return xerr(x, arg, MF_EINVAL, "cannot assign nil to %s",
                    want == W_STRING ? "string" : "reflect.Value");
    case TN_FIELD:
        rc = eval_field_chain(x, arg, dot, 0, &v);
        break;
    case TN_VAR:
        rc = eval_variable(x, arg, 0, &v);
        break;
    case TN_PIPE:
        rc = eval_pipeline(x, dot, arg, &v);
        break;
    case TN_IDENT:
        rc = eval_function(x, dot, arg, NULL, NULL, 0, &v);
        break;
    case TN_CHAIN:
        rc = eval_chain(x, dot, arg, 0, &v);
        break;
    case TN_BOOL:
    case TN_NUMBER:
    case TN_STRING:
        if (want == W_STRING && arg->kind != TN_STRING)
            return xerr(x, arg, MF_EINVAL, "expected string; found %.*s",
                        (int)(arg->end - arg->pos), x->t->src + arg->pos);
        rc = literal(x, arg, &v);
        break;
    default:
        return xerr(x, arg, MF_EINVAL, "can't handle argument");
    }
    if (rc) {
        tmpl_value_unref(v);
        return rc;
    }
    return validate(x, arg, v, want, out);
}

static int not_a_function(struct exec *x, const struct tmpl_node *cmd, int has_final)
{
    if (cmd->n_kids > 1 || has_final) {
        const struct tmpl_node *a = cmd->kids[0];
        return xerr(x, a, MF_EINVAL, "can't give argument to non-function %.*s",
                    (int)(a->end - a->pos), x->t->src + a->pos);
    }
    return 0;
}

/* Go's evalCommand: the first word decides what the command is. */
static int eval_command(struct exec *x, struct tmpl_value *dot, const struct tmpl_node *cmd,
                        struct tmpl_value *final, int has_final, struct tmpl_value **out)
{
    const struct tmpl_node *first = cmd->kids[0];
    int has_args = cmd->n_kids > 1 || has_final;
    int rc = step(x, cmd);
    *out = NULL;
    if (rc)
        return rc;
    switch (first->kind) {
    case TN_FIELD:
        return eval_field_chain(x, first, dot, has_args, out);
    case TN_CHAIN:
        return eval_chain(x, dot, first, has_args, out);
    case TN_IDENT:
        return eval_function(x, dot, first, cmd, final, has_final, out);
    case TN_VAR:
        return eval_variable(x, first, has_args, out);
    default:
        break;
    }
    rc = not_a_function(x, cmd, has_final);
    if (rc)
        return rc;
    switch (first->kind) {
    case TN_PIPE:
        return eval_pipeline(x, dot, first, out);
    case TN_DOT:
        *out = tmpl_value_ref(dot);
        return 0;
    case TN_NIL:
        return xerr(x, first, MF_EINVAL, "nil is not a command");
    default:
        return literal(x, first, out);
    }
}

static int eval_pipeline(struct exec *x, struct tmpl_value *dot, const struct tmpl_node *pipe,
                         struct tmpl_value **out)
{
    struct tmpl_value *v = NULL;
    *out = NULL;
    for (uint32_t i = 0; i < pipe->n_kids; i++) {
        struct tmpl_value *nv;
        int rc = eval_command(x, dot, pipe->kids[i], v, i > 0, &nv);
        tmpl_value_unref(v);
        if (rc)
            return rc;
        /* Go digs the value out of an interface{}: a nil one becomes invalid */
        v = nv && nv->kind == TMPL_NIL ? NULL : nv;
    }
    for (uint8_t i = 0; i < pipe->n_decl; i++) {
        int rc = pipe->is_assign
                     ? set_var(x, pipe, pipe->decl[i], tmpl_value_ref(v))
                     : push_var(x, pipe, pipe->decl[i], strlen(pipe->decl[i]), tmpl_value_ref(v));
        if (rc) {
            tmpl_value_unref(v);
            return rc;
        }
    }
    *out = v;
    return 0;
}

/* ---- built-in functions ------------------------------------------------------------- */

/* Runs a builtin on evaluated arguments; its errors get the position, and
 * argument errors Go's "error calling f:" prefix. */
static int call_builtin(struct exec *x, const struct tmpl_node *n, int fn, struct tmpl_value **a,
                        size_t na, struct tmpl_value **out)
{
    char msg[256];
    size_t used = 0;
    size_t left = x->t->lim.max_scratch -
                  (x->scratch < x->t->lim.max_scratch ? x->scratch : x->t->lim.max_scratch);
    int rc = tmpl_call(fn, a, na, left, &used, out, msg, sizeof msg);
    x->scratch += used;
    if (rc == MF_EINVAL)
        return xerr(x, n, rc, "error calling %s: %s", tmpl_fn_name(fn), msg);
    if (rc)
        return xerr(x, n, rc, "%s", msg);
    return 0;
}

/* Arity of each builtin: minimum, and maximum (-1 for variadic). */
static const struct {
    int min;
    int max;
} arity[FN_COUNT] = {
    [FN_AND] = {1, -1},   [FN_OR] = {1, -1},     [FN_NOT] = {1, 1},      [FN_LEN] = {1, 1},
    [FN_INDEX] = {1, -1}, [FN_SLICE] = {1, -1},  [FN_EQ] = {1, -1},      [FN_NE] = {2, 2},
    [FN_LT] = {2, 2},     [FN_LE] = {2, 2},      [FN_GT] = {2, 2},       [FN_GE] = {2, 2},
    [FN_PRINT] = {0, -1}, [FN_PRINTF] = {1, -1}, [FN_PRINTLN] = {0, -1}, [FN_JSON] = {1, 1},
    [FN_TOJSON] = {1, 2},
};

static enum want param_want(int fn, size_t i)
{
    if (fn == FN_PRINTF && i == 0)
        return W_STRING;
    if (fn == FN_PRINT || fn == FN_PRINTF || fn == FN_PRINTLN || fn == FN_JSON ||
        (fn == FN_TOJSON && i == 0))
        return W_ANY;
    return W_VALUE;
}

/* and/or short-circuit: the first operand that decides, or the last. */
static int eval_and_or(struct exec *x, struct tmpl_value *dot, int fn,
                       const struct tmpl_node *const *args, size_t nargs, struct tmpl_value *final,
                       int has_final, const struct tmpl_node *n, struct tmpl_value **out)
{
    struct tmpl_value *v = NULL;
    for (size_t i = 0; i < nargs; i++) {
        tmpl_value_unref(v);
        int rc = eval_arg(x, dot, args[i], W_VALUE, &v);
        if (rc)
            return rc;
        if (tmpl_value_truth(v) == (fn == FN_OR)) {
            *out = v;
            return 0;
        }
    }
    if (has_final) {
        tmpl_value_unref(v);
        return validate(x, n, tmpl_value_ref(final), W_VALUE, out);
    }
    *out = v;
    return 0;
}

static int eval_args(struct exec *x, struct tmpl_value *dot, int fn,
                     const struct tmpl_node *const *args, size_t nargs, struct tmpl_value *final,
                     int has_final, const struct tmpl_node *n, struct tmpl_value **vals)
{
    for (size_t i = 0; i < nargs; i++) {
        int rc = eval_arg(x, dot, args[i], param_want(fn, i), &vals[i]);
        if (rc)
            return rc;
    }
    if (has_final)
        return validate(x, n, tmpl_value_ref(final), param_want(fn, nargs), &vals[nargs]);
    return 0;
}

static int eval_function(struct exec *x, struct tmpl_value *dot, const struct tmpl_node *ident,
                         const struct tmpl_node *cmd, struct tmpl_value *final, int has_final,
                         struct tmpl_value **out)
{
    int fn = (int)ident->num;
    const struct tmpl_node *const *args =
        cmd ? (const struct tmpl_node *const *)cmd->kids + 1 : NULL;
    size_t nargs = cmd ? cmd->n_kids - 1 : 0;
    size_t total = nargs + (has_final ? 1 : 0);
    *out = NULL;
    if (total < (size_t)arity[fn].min && arity[fn].max < 0)
        return xerr(x, ident, MF_EINVAL, "wrong number of args for %s: want at least %d got %zu",
                    tmpl_fn_name(fn), arity[fn].min, nargs);
    if (arity[fn].max >= 0 && arity[fn].min != arity[fn].max &&
        (total < (size_t)arity[fn].min || total > (size_t)arity[fn].max))
        return xerr(x, ident, MF_EINVAL, "wrong number of args for %s: want %d to %d got %zu",
                    tmpl_fn_name(fn), arity[fn].min, arity[fn].max, total);
    if (arity[fn].max >= 0 && arity[fn].min == arity[fn].max && total != (size_t)arity[fn].max)
        return xerr(x, ident, MF_EINVAL, "wrong number of args for %s: want %d got %zu",
                    tmpl_fn_name(fn), arity[fn].max, total);
    if (fn == FN_AND || fn == FN_OR)
        return eval_and_or(x, dot, fn, args, nargs, final, has_final, ident, out);
    struct tmpl_value *small[8] = {0};
    struct tmpl_value **vals = total <= 8 ? small : calloc(total, sizeof *vals);
    if (!vals)
        return nomem(x, ident);
    int rc = eval_args(x, dot, fn, args, nargs, final, has_final, ident, vals);
    if (!rc) /* Go shows the whole command in "executing at <...>" */
        rc = call_builtin(x, cmd ? cmd : ident, fn, vals, total, out);
    for (size_t i = 0; i < total; i++)
        tmpl_value_unref(vals[i]);
    if (vals != small)
        free(vals);
    return rc;
}

/* ---- walking the tree ------------------------------------------------------------- */

static int walk(struct exec *x, struct tmpl_value *dot, const struct tmpl_node *n);

static int check_output(struct exec *x, const struct tmpl_node *n, int rc)
{
    if (rc)
        return xerr(x, n, rc, "output does not fit its buffer");
    if (x->out->len - x->out_start > x->t->lim.max_output)
        return xerr(x, n, MF_ENOMEM, "output exceeds %zu bytes", x->t->lim.max_output);
    return 0;
}

static int walk_action(struct exec *x, struct tmpl_value *dot, const struct tmpl_node *n)
{
    struct tmpl_value *v;
    int rc = eval_pipeline(x, dot, n->pipe, &v);
    if (!rc && n->pipe->n_decl == 0)
        rc = check_output(x, n, tmpl_value_print(x->out, v, 1, x->err));
    tmpl_value_unref(v);
    return rc;
}

static int walk_if_with(struct exec *x, struct tmpl_value *dot, const struct tmpl_node *n)
{
    size_t mark = x->n_vars;
    struct tmpl_value *v;
    int rc = eval_pipeline(x, dot, n->pipe, &v);
    if (!rc) {
        if (tmpl_value_truth(v))
            rc = walk(x, n->kind == TN_WITH ? v : dot, n->list);
        else if (n->elist)
            rc = walk(x, dot, n->elist);
    }
    pop_vars(x, mark);
    tmpl_value_unref(v);
    return rc;
}

/* One pass of a range body with index (adopted) and elem (borrowed); the
 * variables the body declares are dropped back to mark afterwards. */
static int range_one(struct exec *x, const struct tmpl_node *r, struct tmpl_value *index,
                     struct tmpl_value *elem, size_t mark)
{
    const struct tmpl_node *pipe = r->pipe;
    int rc = 0;
    if (++x->iters > x->t->lim.max_iterations) {
        tmpl_value_unref(index);
        return xerr(x, r, MF_ENOMEM, "range iterations exceed %" PRIu64, x->t->lim.max_iterations);
    }
    if (pipe->n_decl > 0) {
        if (pipe->is_assign)
            rc = set_var(x, r, pipe->decl[0], tmpl_value_ref(pipe->n_decl > 1 ? index : elem));
        else
            set_top_var(x, 1, tmpl_value_ref(elem));
    }
    if (!rc && pipe->n_decl > 1) {
        if (pipe->is_assign)
            rc = set_var(x, r, pipe->decl[1], tmpl_value_ref(elem));
        else
            set_top_var(x, 2, tmpl_value_ref(index));
    }
    tmpl_value_unref(index);
    if (!rc)
        rc = walk(x, elem, r->list);
    pop_vars(x, mark);
    return rc == WALK_CONTINUE ? 0 : rc;
}

static int range_list(struct exec *x, const struct tmpl_node *r, struct tmpl_value *v)
{
    size_t mark = x->n_vars;
    for (size_t i = 0; i < v->len; i++) {
        struct tmpl_value *idx = tmpl_value_int((int64_t)i);
        if (!idx)
            return nomem(x, r);
        int rc = range_one(x, r, idx, v->items[i], mark);
        if (rc)
            return rc;
    }
    return 0;
}

static int range_map(struct exec *x, const struct tmpl_node *r, struct tmpl_value *v)
{
    size_t mark = x->n_vars;
    size_t *order = tmpl_value_sorted_keys(v);
    if (!order)
        return nomem(x, r);
    int rc = 0;
    for (size_t j = 0; j < v->len && !rc; j++) {
        size_t i = order[j];
        rc = charge(x, r, strlen(v->keys[i]));
        struct tmpl_value *key = rc ? NULL : tmpl_value_cstr(v->keys[i]);
        if (!rc && !key)
            rc = nomem(x, r);
        if (!rc)
            rc = range_one(x, r, key, v->items[i], mark);
    }
    free(order);
    return rc;
}

/* Go 1.22's range over an integer: 0..n-1 as both index and element. */
static int range_int(struct exec *x, const struct tmpl_node *r, struct tmpl_value *v)
{
    size_t mark = x->n_vars;
    if (r->pipe->n_decl > 1)
        return xerr(x, r, MF_EINVAL, "can't use %" PRId64 " to iterate over more than one variable",
                    v->i);
    for (int64_t i = 0; i < v->i; i++) {
        struct tmpl_value *e = tmpl_value_int(i);
        if (!e)
            return nomem(x, r);
        int rc = range_one(x, r, tmpl_value_ref(e), e, mark);
        tmpl_value_unref(e);
        if (rc)
            return rc;
    }
    return 0;
}

static int walk_range(struct exec *x, struct tmpl_value *dot, const struct tmpl_node *r)
{
    size_t mark = x->n_vars;
    struct tmpl_value *v;
    int rc = eval_pipeline(x, dot, r->pipe, &v);
    int ran = 0;
    if (!rc && v) {
        switch (v->kind) {
        case TMPL_LIST:
            ran = v->len > 0;
            rc = range_list(x, r, v);
            break;
        case TMPL_MAP:
            ran = v->len > 0;
            rc = ran ? range_map(x, r, v) : 0;
            break;
        case TMPL_INT:
            ran = v->i > 0;
            rc = range_int(x, r, v);
            break;
        default: {
            struct mf_buf b;
            struct mf_err perr;
            mf_buf_init(&b, 64);
            tmpl_value_print(&b, v, 0, &perr);
            rc = xerr(x, r, MF_EINVAL, "range can't iterate over %s", b.data ? b.data : "");
            mf_buf_free(&b);
        }
        }
    }
    if (rc == WALK_BREAK)
        rc = 0;
    if (!rc && !ran && r->elist)
        rc = walk(x, dot, r->elist);
    pop_vars(x, mark);
    tmpl_value_unref(v);
    return rc;
}

static int walk(struct exec *x, struct tmpl_value *dot, const struct tmpl_node *n)
{
    int rc = step(x, n);
    if (rc)
        return rc;
    switch (n->kind) {
    case TN_LIST:
        for (uint32_t i = 0; i < n->n_kids && !rc; i++)
            rc = walk(x, dot, n->kids[i]);
        return rc;
    case TN_TEXT:
        return check_output(x, n, mf_buf_append(x->out, n->s, n->n, x->err));
    case TN_ACTION:
        return walk_action(x, dot, n);
    case TN_IF:
    case TN_WITH:
        return walk_if_with(x, dot, n);
    case TN_RANGE:
        return walk_range(x, dot, n);
    case TN_BREAK:
        return WALK_BREAK;
    case TN_CONTINUE:
        return WALK_CONTINUE;
    default:
        return xerr(x, n, MF_EINVAL, "unknown node");
    }
}

int tmpl_exec_node(const struct tmpl *t, const struct tmpl_node *root, struct tmpl_value *data,
                   struct mf_buf *out, struct mf_err *err)
{
    struct exec x = {.t = t, .out = out, .out_start = out->len, .err = err};
    int rc = push_var(&x, root, "$", 1, tmpl_value_ref(data));
    if (!rc)
        rc = walk(&x, data, root);
    pop_vars(&x, 0);
    free(x.vars);
    /* break/continue cannot escape a range: the parser rejects them outside */
    return rc > 0 ? 0 : rc;
}
