/*
 * modelfile.c: the Modelfile front end: mf_modelfile_parse() and the AST.
 *
 * Owns the arena every AST string lives in, and the analysis that turns
 * each lexed instruction (modelfile_lex.c) into a struct mf_instr, in file
 * order: ARG/ENV expansion (modelfile_vars.c), flags and pins
 * (modelfile_flags.c), PARAMETER names and types (modelfile_param.c), and
 * the file-wide rules (a FROM exists; a later SYSTEM, TEMPLATE, REQUIRES,
 * RENDERER, PARSER, DRAFT or scalar PARAMETER replaces an earlier one, which
 * is marked ignored, as Ollama's CreateRequest keeps only the last).
 * Does not print: diagnostics are data (modelfile_diag.c renders them).
 *
 * Invariant: an instruction reaches mf->instrs only when it has no error,
 * so a file without errors is fully described by mf->instrs.
 */
#include "compiler/modelfile_int.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/num.h"
#include "common/params.h"
#include "text/template.h"

/* ------------------------------------------------------------------ arena */

struct arena_block {
    struct arena_block *next; /* older block */
    size_t size, used;        /* bytes in data[] */
    _Alignas(16) unsigned char data[];
};

struct mf_modelfile_arena {
    struct arena_block *head; /* newest block */
    size_t total;             /* bytes allocated, checked against MF_MODELFILE_ARENA_MAX */
};

void *mf_modelfile_alloc(struct mf_modelfile_arena *a, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    if (n == 0)
        n = 16;
    struct arena_block *b = a->head;
    if (!b || b->size - b->used < n) {
        size_t size = n > 65536 ? n : 65536;
        if (n > MF_MODELFILE_ARENA_MAX || a->total + size > MF_MODELFILE_ARENA_MAX)
            return NULL;
        b = malloc(sizeof *b + size);
        if (!b)
            return NULL;
        b->size = size;
        b->used = 0;
        b->next = a->head;
        a->head = b;
        a->total += size;
    }
    void *p = b->data + b->used;
    b->used += n;
    memset(p, 0, n);
    return p;
}

char *mf_modelfile_strndup(struct mf_modelfile_arena *a, const char *s, size_t n)
{
    if (n >= MF_MODELFILE_ARENA_MAX)
        return NULL;
    char *d = mf_modelfile_alloc(a, n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = '\0';
    }
    return d;
}

int mf_modelfile_vec_push(struct mf_vec *v, const void *e)
{
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 8;
        void *d = cap < ((size_t)1 << 40) / v->elem ? realloc(v->data, cap * v->elem) : NULL;
        if (!d)
            return MF_ENOMEM;
        v->data = d;
        v->cap = cap;
    }
    memcpy((char *)v->data + v->n * v->elem, e, v->elem);
    v->n++;
    return 0;
}

void *mf_modelfile_vec_finish(struct mf_vec *v, struct mf_modelfile_arena *a, size_t *n,
                              int *oom)
{
    void *d = NULL;
    *n = 0;
    if (v->n) {
        d = mf_modelfile_alloc(a, v->n * v->elem);
        if (d) {
            memcpy(d, v->data, v->n * v->elem);
            *n = v->n;
        } else {
            *oom = 1;
        }
    }
    mf_modelfile_vec_free(v);
    return d;
}

void mf_modelfile_vec_free(struct mf_vec *v)
{
    free(v->data);
    v->data = NULL;
    v->n = v->cap = 0;
}

/* ------------------------------------------------------------ diagnostics */

/* vprintf into the arena; NULL (and p->oom set) on failure. */
static char *arena_vfmt(struct mf_modelfile_parser *p, const char *fmt, va_list ap)
{
    va_list again;
    va_copy(again, ap);
    int n = vsnprintf(NULL, 0, fmt, ap);
    char *s = n >= 0 ? mf_modelfile_alloc(p->arena, (size_t)n + 1) : NULL;
    if (s)
        vsnprintf(s, (size_t)n + 1, fmt, again);
    else
        p->oom = 1;
    va_end(again);
    return s;
}

char *mf_modelfile_fmt(struct mf_modelfile_parser *p, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *s = arena_vfmt(p, fmt, ap);
    va_end(ap);
    return s;
}

void mf_modelfile_diag(struct mf_modelfile_parser *p, enum mf_severity sev, int line, int col,
                       int len, const char *hint, const char *fmt, ...)
{
    struct mf_diag d = {.severity = sev, .line = line, .col = col, .len = len > 0 ? len : 1,
                        .hint = hint};
    va_list ap;
    if (p->stopped || (sev == MF_DIAG_WARNING && p->mf->n_warnings >= MF_MODELFILE_MAX_WARNINGS))
        return;
    va_start(ap, fmt);
    char *m = arena_vfmt(p, fmt, ap);
    va_end(ap);
    if (!m)
        return;
    d.message = m;
    if (mf_modelfile_vec_push(&p->diags, &d) != 0)
        p->oom = 1;
    if (sev == MF_DIAG_ERROR && ++p->mf->n_errors >= MF_MODELFILE_MAX_ERRORS)
        p->stopped = 1;
    if (sev == MF_DIAG_WARNING)
        p->mf->n_warnings++;
}

int mf_modelfile_col_at(const struct mf_lexcmd *c, size_t off)
{
    if (!c->single_line)
        return c->val_col;
    int col = c->val_col;
    for (size_t i = 0; i < off && c->raw[i]; i++)
        if (((unsigned char)c->raw[i] & 0xC0) != 0x80)
            col++;
    return col;
}

/* -------------------------------------------------------------- analysis */

/* Marks the earlier instruction of the same slot ignored: Ollama keeps the
 * last SYSTEM, TEMPLATE, ..., and the last value of a scalar PARAMETER. */
static void replaces(struct mf_modelfile_parser *p, size_t *slot, const struct mf_lexcmd *c,
                     const char *what)
{
    struct mf_instr *all = p->instrs.data;
    if (*slot) {
        struct mf_instr *old = &all[*slot - 1];
        old->ignored = 1;
        mf_modelfile_diag(p, MF_DIAG_WARNING, c->line, c->col, c->kw_len,
                          "delete one of them", "%s replaces the one on line %d", what,
                          old->line);
    }
    *slot = p->instrs.n + 1; /* this instruction is pushed next */
}

/* Ollama values are expanded only once an ARG or ENV exists (see
 * modelfile_vars.c); before that a $NAME is text, noted for a warning. */
static int expand_value(struct mf_modelfile_parser *p, const struct mf_lexcmd *c, const char *s,
                        const char **out, int *unset)
{
    if (p->vars_active)
        return mf_modelfile_expand(p, c, s, 0, out, unset);
    mf_modelfile_note_refs(p, c, s);
    *out = s;
    return 0;
}

static int analyze_source(struct mf_modelfile_parser *p, const struct mf_lexcmd *c,
                          struct mf_instr *in)
{
    const char *ref_raw, *ref;
    const char *kw = mf_modelfile_kind_name(c->kind);
    if (mf_modelfile_source_flags(p, c, in, &ref_raw) != 0 ||
        expand_value(p, c, ref_raw, &ref, NULL) != 0)
        return -1;
    if (!ref[0]) {
        mf_modelfile_diag(p, MF_DIAG_ERROR, c->line, c->col, c->kw_len,
                          c->kind == MF_INSTR_ADAPTER ? "e.g. ADAPTER ./lora.gguf"
                                                      : "e.g. FROM llama3.2 or FROM ./model.gguf",
                          "%s needs a model name or path", kw);
        return -1;
    }
    if (!c->quoted && strstr(ref, " #"))
        mf_modelfile_diag(p, MF_DIAG_WARNING, c->val_line, c->val_col, (int)strlen(c->raw),
                          "put comments on their own line",
                          "'#' here is part of the %s value: there are no end-of-line comments",
                          kw);
    in->value = ref;
    if (mf_modelfile_source_pin(p, c, in, ref) != 0)
        return -1;
    if (c->kind == MF_INSTR_DRAFT)
        replaces(p, &p->last_of[MF_INSTR_DRAFT], c, "DRAFT");
    return 0;
}

static int param_value_error(struct mf_modelfile_parser *p, const struct mf_lexcmd *c,
                             const struct mf_param_def *d, const char *v, int unset)
{
    static const char *const kinds[] = {"int", "float", "bool"};
    static const char *const want[] = {"a whole number", "a finite number", "true or false"};
    const char *hint = unset ? "an ARG used here has no value: give it a default or pass "
                               "--build-arg"
                       : strchr(v, '#') ? "there are no end-of-line comments: '#' and what "
                                          "follows are part of the value"
                       : mf_modelfile_fmt(p, "%s takes %s (Ollama's default: %s)", d->name,
                                          want[d->type], d->deflt);
    mf_modelfile_diag(p, MF_DIAG_ERROR, c->val_line, c->val_col, (int)strlen(c->raw), hint,
                      "invalid %s value '%s' for %s", kinds[d->type], v, d->name);
    return -1;
}

/* A value mfc-serve would refuse (common/params.c, the table both share):
 * an error at the value, so `mfc check` catches what would fail at serve. */
static int param_range_error(struct mf_modelfile_parser *p, const struct mf_lexcmd *c,
                             const struct mf_param *pm)
{
    const struct mf_param_limit *l = mf_params_find(pm->name);
    struct mf_err e;
    if (!l || (pm->type != MF_PARAM_INT && pm->type != MF_PARAM_FLOAT))
        return 0;
    double v = pm->type == MF_PARAM_INT ? (double)pm->i : (double)pm->f;
    if (mf_params_check(pm->name, pm->name, v, &e) == 0)
        return 0;
    mf_modelfile_diag(p, MF_DIAG_ERROR, c->val_line, c->val_col, (int)strlen(c->raw),
                      mf_modelfile_fmt(p, "mfc-serve accepts %s from %g to %g", pm->name, l->lo,
                                       l->hi),
                      "%s %s is out of range", pm->name, pm->text);
    return -1;
}

/* Go's ParseInt(v, 10, 64) / ParseFloat(v, 32) / ParseBool. Floats must
 * also be finite: Ollama stores params as JSON, which has no NaN or Inf. */
static int param_typed(struct mf_param *pm, const char *v)
{
    double d;
    switch (pm->type) {
    case MF_PARAM_INT: return mf_num_parse_i64(v, &pm->i);
    case MF_PARAM_FLOAT:
        /* strtod's syntax is Go's, except that Go wants a 'p' exponent in hex */
        if (mf_num_parse_f64(v, &d) != 0 || (strpbrk(v, "xX") && !strpbrk(v, "pP")))
            return -1;
        pm->f = strtof(v, NULL); /* rounds once, like ParseFloat(v, 32) */
        return isfinite(pm->f) ? 0 : -1;
    case MF_PARAM_BOOL: return mf_num_parse_bool(v, &pm->b);
    default: return 0;
    }
}

static int analyze_param(struct mf_modelfile_parser *p, const struct mf_lexcmd *c,
                         struct mf_instr *in)
{
    size_t n;
    const struct mf_param_def *table = mf_modelfile_param_table(&n);
    const struct mf_param_def *d = mf_modelfile_param_find(c->arg);
    struct mf_param *pm = &in->u.param;
    int unset = 0;
    if (!c->arg[0]) {
        mf_modelfile_diag(p, MF_DIAG_ERROR, c->line, c->col, c->kw_len,
                          "write one space between PARAMETER and the name",
                          "PARAMETER has an empty name");
        return -1;
    }
    if (!d) {
        static const char *const removed[] = {"numa", "num_gqa", "rope_frequency_base",
                                              "rope_frequency_scale", "tfs_z"};
        const char *best = mf_modelfile_param_suggest(c->arg);
        for (size_t i = 0; i < sizeof removed / sizeof removed[0]; i++)
            if (strcmp(c->arg, removed[i]) == 0)
                best = NULL;
        mf_modelfile_diag(p, MF_DIAG_ERROR, c->arg_line, c->arg_col, (int)strlen(c->arg),
                          best ? mf_modelfile_fmt(p, "did you mean %s?", best)
                               : "see docs/modelfile.md for the PARAMETER table",
                          "unknown parameter '%s'", c->arg);
        return -1;
    }
    pm->name = d->name;
    pm->type = d->type;
    if (d->type == MF_PARAM_DEPRECATED) {
        mf_modelfile_diag(p, MF_DIAG_WARNING, c->arg_line, c->arg_col, (int)strlen(c->arg),
                          "delete the line", "parameter %s is deprecated and ignored", d->name);
        in->ignored = 1;
        pm->text = c->raw;
        return 0;
    }
    if (expand_value(p, c, c->raw, &pm->text, &unset) != 0)
        return -1;
    in->value = pm->text;
    if (!(unset && p->opts->lenient_args) && param_typed(pm, pm->text) != 0)
        return param_value_error(p, c, d, pm->text, unset);
    if (!(unset && p->opts->lenient_args) && param_range_error(p, c, pm) != 0)
        return -1;
    if (d->type != MF_PARAM_STRING)
        replaces(p, &p->last_param[d - table], c, mf_modelfile_fmt(p, "PARAMETER %s", d->name));
    return 0;
}

/* A TEMPLATE that mfc-serve's parser (text/template.c, the one the image
 * runs) refuses: an error at the template's own position in the Modelfile.
 * The value's first byte is at (val_line, val_col); the template's line L,
 * column C is the Modelfile's val_line + L - 1, and column val_col + C - 1
 * on its first line, C on the others (a quoted value is taken verbatim). */
static int template_error(struct mf_modelfile_parser *p, const struct mf_lexcmd *c)
{
    struct tmpl *t = NULL;
    struct mf_err e = {0};
    unsigned line = 1, col = 1;
    int off = 0;
    if (tmpl_compile(&t, c->raw, strlen(c->raw), NULL, TMPL_F_OLLAMA, &e) == 0) {
        tmpl_free(t);
        return 0;
    }
    /* "template:L:C: message" (template.h) */
    if (strncmp(e.msg, "template:", 9) == 0) {
        char *end = NULL;
        unsigned long tl = strtoul(e.msg + 9, &end, 10), tc = 0;
        if (end && *end == ':')
            tc = strtoul(end + 1, &end, 10);
        if (end && end[0] == ':' && end[1] == ' ' && tl >= 1 && tl < 1000000 && tc >= 1 &&
            tc < 1000000) {
            line = (unsigned)tl, col = (unsigned)tc;
            off = (int)(end + 2 - e.msg);
        }
    }
    int mline = c->val_line + (int)line - 1;
    int mcol = line == 1 ? c->val_col + (int)col - 1 : (int)col;
    mf_modelfile_diag(p, MF_DIAG_ERROR, mline, mcol, 1,
                      "mfc-serve would refuse this template at start; see docs/modelfile.md, "
                      "TEMPLATE",
                      "TEMPLATE: %s", e.msg + off);
    return -1;
}

static int analyze_text(struct mf_modelfile_parser *p, const struct mf_lexcmd *c,
                        struct mf_instr *in)
{
    const char *kw = mf_modelfile_kind_name(c->kind);
    int unset = 0;
    switch (c->kind) {
    case MF_INSTR_MESSAGE:
        in->u.msg.role = c->arg[0] == 's' ? MF_ROLE_SYSTEM
                         : c->arg[0] == 'u' ? MF_ROLE_USER : MF_ROLE_ASSISTANT;
        in->u.msg.content = c->raw;
        return 0;
    case MF_INSTR_LICENSE: return 0;
    case MF_INSTR_SYSTEM:
    case MF_INSTR_TEMPLATE: break;
    default:
        if (expand_value(p, c, c->raw, &in->value, &unset) != 0)
            return -1;
    }
    if (c->kind == MF_INSTR_TEMPLATE && template_error(p, c) != 0)
        return -1;
    if (c->kind == MF_INSTR_REQUIRES && !(unset && p->opts->lenient_args) &&
        !mf_modelfile_semver_ok(in->value)) {
        mf_modelfile_diag(p, MF_DIAG_ERROR, c->val_line, c->val_col, (int)strlen(c->raw),
                          in->value[0] == 'v' ? "drop the leading 'v'" : "e.g. REQUIRES 0.14.0",
                          "REQUIRES must be a valid semver version, not '%s'", in->value);
        return -1;
    }
    replaces(p, &p->last_of[c->kind], c, kw);
    return 0;
}

/* ---------------------------------------------------- ENV, ARG and LABEL */

static int kv_error(struct mf_modelfile_parser *p, const struct mf_lexcmd *c,
                    const struct mf_word *w, const char *hint, const char *msg)
{
    mf_modelfile_diag(p, MF_DIAG_ERROR, c->val_line, mf_modelfile_col_at(c, w->off),
                      (int)strlen(w->text), hint, "%s", msg);
    return -1;
}

/* One word of ENV/ARG/LABEL into kv; legacy: ENV's "KEY VALUE" form. */
static int kv_word(struct mf_modelfile_parser *p, const struct mf_lexcmd *c,
                   const struct mf_word *w, struct mf_kv *kv)
{
    size_t kl = w->eq >= 0 ? (size_t)w->eq : strlen(w->text);
    kv->key = mf_modelfile_strndup(p->arena, w->text, kl);
    kv->value = w->eq >= 0 ? w->text + kl + 1 : NULL;
    if (!kv->key)
        return p->oom = 1, -1;
    if (c->kind == MF_INSTR_LABEL) {
        if (!kv->value || kl == 0)
            return kv_error(p, c, w, "write LABEL key=value ...",
                            mf_modelfile_fmt(p, "LABEL '%s' needs key=value", w->text));
        return 0;
    }
    if (!mf_modelfile_var_name_ok(kv->key, kl))
        return kv_error(p, c, w, "names are letters, digits and '_', not starting with a digit",
                        mf_modelfile_fmt(p, "invalid %s name '%s'",
                                         mf_modelfile_kind_name(c->kind), kv->key));
    if (c->kind == MF_INSTR_ENV && !kv->value)
        return kv_error(p, c, w, "write ENV KEY=VALUE ...",
                        mf_modelfile_fmt(p, "ENV '%s' needs a value", w->text));
    return 0;
}

/* ARG: the value in effect is the last --build-arg of that name, else the default. */
static void arg_resolve(struct mf_modelfile_parser *p, struct mf_kv *kv)
{
    const struct mf_modelfile_opts *o = p->opts;
    kv->deflt = kv->value;
    for (size_t i = o->n_build_args; i-- > 0;)
        if (strcmp(o->build_args[i].name, kv->key) == 0) {
            if (!kv->from_build_arg)
                kv->value = mf_modelfile_strndup(p->arena, o->build_args[i].value,
                                                 strlen(o->build_args[i].value));
            kv->from_build_arg = 1;
            p->build_arg_used[i] = 1;
        }
    if (kv->from_build_arg && !kv->value)
        p->oom = 1;
}

/* ENV KEY VALUE (Docker's legacy form): the first token has no '=' and
 * something follows; the rest of the line is one value, blanks kept. */
static int env_legacy(struct mf_modelfile_parser *p, const struct mf_lexcmd *c,
                      struct mf_word **w, size_t *n)
{
    const char *s = c->raw;
    size_t k = strcspn(s, " \t=\"'\\"), rest = k + strspn(s + k, " \t");
    struct mf_word *one = mf_modelfile_alloc(p->arena, sizeof *one);
    if (!one)
        return p->oom = 1, -1;
    if (mf_modelfile_words(p, c, rest, 0, w, n, NULL) != 0)
        return -1;
    one->text = *n == 1 ? mf_modelfile_fmt(p, "%.*s=%s", (int)k, s, (*w)[0].text) : NULL;
    one->eq = (long)k;
    *w = one;
    *n = one->text ? 1 : 0;
    return one->text || p->oom ? 0 : -1;
}

static int analyze_kv(struct mf_modelfile_parser *p, const struct mf_lexcmd *c,
                      struct mf_instr *in)
{
    struct mf_word *w;
    size_t n, k = strcspn(c->raw, " \t=\"'\\");
    int legacy = c->kind == MF_INSTR_ENV && (c->raw[k] == ' ' || c->raw[k] == '\t');
    int rc = legacy ? env_legacy(p, c, &w, &n) : mf_modelfile_words(p, c, 0, 1, &w, &n, NULL);
    struct mf_kv *kv = rc == 0 && n ? mf_modelfile_alloc(p->arena, n * sizeof *kv) : NULL;
    if (rc == 0 && n && !kv)
        return p->oom = 1, -1;
    for (size_t i = 0; rc == 0 && i < n; i++)
        rc = kv_word(p, c, &w[i], &kv[i]);
    for (size_t i = 0; rc == 0 && i < n && c->kind != MF_INSTR_LABEL; i++) {
        if (c->kind == MF_INSTR_ARG)
            arg_resolve(p, &kv[i]);
        if (!p->oom && mf_modelfile_var_set(p, kv[i].key, kv[i].value, c->line,
                                            c->kind == MF_INSTR_ENV) != 0 && !p->oom)
            rc = kv_error(p, c, &w[i], "use fewer ARG/ENV names", "too many variables (limit 4096)");
    }
    in->u.kv.items = kv;
    in->u.kv.n = n;
    return rc;
}

/* ----------------------------------------------------------------- driver */

static void analyze(struct mf_modelfile_parser *p, const struct mf_lexcmd *c)
{
    struct mf_instr in = {.kind = c->kind, .line = c->line, .col = c->col,
                          .end_line = c->end_line, .raw = c->raw, .value = c->raw,
                          .comments = c->comments, .n_comments = c->n_comments,
                          .blank_before = c->blank_before, .quoted = c->quoted};
    int rc;
    switch (c->kind) {
    case MF_INSTR_FROM:
    case MF_INSTR_ADAPTER:
    case MF_INSTR_DRAFT: rc = analyze_source(p, c, &in); break;
    case MF_INSTR_PARAMETER: rc = analyze_param(p, c, &in); break;
    case MF_INSTR_RUN: rc = mf_modelfile_run(p, c, &in); break;
    case MF_INSTR_ENV:
    case MF_INSTR_ARG:
    case MF_INSTR_LABEL:
        rc = c->raw[0] ? analyze_kv(p, c, &in) : -1;
        if (!c->raw[0])
            mf_modelfile_diag(p, MF_DIAG_ERROR, c->line, c->col, c->kw_len, NULL,
                              "%s needs a value", mf_modelfile_kind_name(c->kind));
        break;
    default: rc = analyze_text(p, c, &in); break;
    }
    if (rc == 0 && !p->oom && mf_modelfile_vec_push(&p->instrs, &in) != 0)
        p->oom = 1;
}

/* File-wide rules, after every instruction is analysed. */
static void finish(struct mf_modelfile_parser *p)
{
    const struct mf_instr *in = p->instrs.data;
    int from = 0;
    for (size_t i = 0; i < p->cmds.n; i++)
        from |= ((const struct mf_lexcmd *)p->cmds.data)[i].kind == MF_INSTR_FROM;
    if (!from)
        mf_modelfile_diag(p, MF_DIAG_ERROR, 0, 0, 0,
                          "add a line naming the base model, e.g. FROM llama3.2",
                          "no FROM instruction");
    for (size_t i = 0; i < p->instrs.n; i++) {
        for (size_t j = 0; in[i].kind == MF_INSTR_ADAPTER && in[i].u.src.name && j < i; j++)
            if (in[j].kind == MF_INSTR_ADAPTER && in[j].u.src.name &&
                strcmp(in[j].u.src.name, in[i].u.src.name) == 0)
                mf_modelfile_diag(p, MF_DIAG_ERROR, in[i].line, in[i].col, 7,
                                  "give each adapter its own --name",
                                  "adapter name '%s' is already used on line %d",
                                  in[i].u.src.name, in[j].line);
        if (in[i].kind != MF_INSTR_DRAFT || !in[i].u.src.is_path)
            continue;
        for (size_t j = 0; j < p->instrs.n; j++)
            if (in[j].kind == MF_INSTR_FROM && strcmp(in[j].u.src.ref, in[i].u.src.ref) == 0)
                mf_modelfile_diag(p, MF_DIAG_ERROR, in[i].line, in[i].col, 5,
                                  "the draft must be a smaller, separate model",
                                  "DRAFT must not name the same local path as FROM: %s",
                                  in[i].u.src.ref);
    }
    mf_modelfile_vars_finish(p);
}

static int diag_cmp(const void *a, const void *b)
{
    const struct mf_diag *x = a, *y = b;
    if (x->line != y->line)
        return x->line == 0 ? 1 : y->line == 0 ? -1 : x->line < y->line ? -1 : 1;
    return x->col < y->col ? -1 : x->col > y->col;
}

/* Moves the vectors into mf; instructions with errors never got there. */
static void publish(struct mf_modelfile_parser *p)
{
    struct mf_modelfile *mf = p->mf;
    int oom = 0;
    if (p->stopped) {
        p->stopped = 0;
        mf_modelfile_diag(p, MF_DIAG_ERROR, 0, 0, 0, "fix these first",
                          "too many errors; stopped after %d", MF_MODELFILE_MAX_ERRORS);
    }
    /* stable: mergesort-free insertion keeps equal positions in report order */
    struct mf_diag *d = p->diags.data;
    for (size_t i = 1; i < p->diags.n; i++)
        for (size_t j = i; j > 0 && diag_cmp(&d[j - 1], &d[j]) > 0; j--) {
            struct mf_diag t = d[j];
            d[j] = d[j - 1];
            d[j - 1] = t;
        }
    mf->instrs = mf_modelfile_vec_finish(&p->instrs, p->arena, &mf->n_instrs, &oom);
    mf->diags = mf_modelfile_vec_finish(&p->diags, p->arena, &mf->n_diags, &oom);
    if (oom)
        p->oom = 1;
}

static void parser_fini(struct mf_modelfile_parser *p)
{
    mf_modelfile_vec_free(&p->cmds);
    mf_modelfile_vec_free(&p->instrs);
    mf_modelfile_vec_free(&p->diags);
    mf_modelfile_vars_free(p);
    mf_modelfile_vec_free(&p->early_refs);
    free(p->build_arg_used);
}

static int parser_init(struct mf_modelfile_parser *p, const struct mf_modelfile_opts *opts,
                       struct mf_err *err)
{
    static const struct mf_modelfile_opts none = {0};
    memset(p, 0, sizeof *p);
    p->opts = opts ? opts : &none;
    p->cmds.elem = sizeof(struct mf_lexcmd);
    p->instrs.elem = sizeof(struct mf_instr);
    p->diags.elem = sizeof(struct mf_diag);
    p->early_refs.elem = sizeof(struct mf_var);
    p->mf = calloc(1, sizeof *p->mf);
    p->arena = calloc(1, sizeof *p->arena);
    p->build_arg_used = calloc(p->opts->n_build_args + 1, 1);
    if (!p->mf || !p->arena || !p->build_arg_used) {
        free(p->mf);
        free(p->arena);
        return mf_err_set(err, MF_ENOMEM, "out of memory parsing a Modelfile");
    }
    p->mf->arena = p->arena;
    p->mf->name = mf_modelfile_strndup(p->arena, p->opts->name ? p->opts->name : "Modelfile",
                                       strlen(p->opts->name ? p->opts->name : "Modelfile"));
    return p->mf->name ? 0 : mf_err_set(err, MF_ENOMEM, "out of memory parsing a Modelfile");
}

int mf_modelfile_parse(const char *data, size_t len, const struct mf_modelfile_opts *opts,
                       struct mf_modelfile **out, struct mf_err *err)
{
    struct mf_modelfile_parser p;
    struct mf_err derr;
    int rc = parser_init(&p, opts, err);
    *out = NULL;
    if (rc)
        return rc;
    rc = mf_modelfile_decode(&p, data, len, &derr);
    if (rc == MF_EINVAL) { /* too large: a diagnostic like any other */
        p.mf->text = "";
        mf_modelfile_diag(&p, MF_DIAG_ERROR, 0, 0, 0, NULL, "%s", derr.msg);
        publish(&p);
    } else if (rc) {
        mf_err_set(err, rc, "%s", derr.msg);
    } else {
        mf_modelfile_lex(&p);
        for (size_t i = 0; i < p.cmds.n && !p.oom && !p.stopped; i++)
            analyze(&p, &((const struct mf_lexcmd *)p.cmds.data)[i]);
        if (!p.oom && !p.stopped)
            finish(&p);
        if (p.n_bad_utf8 && !p.oom)
            mf_modelfile_diag(&p, MF_DIAG_WARNING, 0, 0, 0, "save the file as UTF-8",
                              "%zu invalid byte sequence(s) read as U+FFFD", p.n_bad_utf8);
        publish(&p);
        if (p.oom)
            rc = mf_err_set(err, MF_ENOMEM, "%s: out of memory (or over %zu MiB after "
                            "expansion)", p.mf->name, MF_MODELFILE_ARENA_MAX >> 20);
    }
    if (rc == 0 || rc == MF_EINVAL)
        *out = p.mf, p.mf = NULL;
    mf_modelfile_free(p.mf);
    parser_fini(&p);
    if (rc == 0 && (*out)->n_errors)
        rc = MF_EINVAL;
    return rc;
}

int mf_modelfile_lex_only(const char *data, size_t len, struct mf_modelfile **out,
                          struct mf_lexcmd **cmds, size_t *n)
{
    struct mf_modelfile_parser p;
    struct mf_err err;
    int oom = 0;
    int rc = parser_init(&p, NULL, &err);
    *out = NULL;
    if (rc)
        return rc;
    rc = mf_modelfile_decode(&p, data, len, &err);
    if (rc == 0) {
        mf_modelfile_lex(&p);
        *cmds = mf_modelfile_vec_finish(&p.cmds, p.arena, n, &oom);
        publish(&p);
        rc = p.oom || oom ? MF_ENOMEM : 0;
    }
    if (rc == 0)
        *out = p.mf, p.mf = NULL;
    mf_modelfile_free(p.mf);
    parser_fini(&p);
    return rc;
}

void mf_modelfile_free(struct mf_modelfile *mf)
{
    if (!mf)
        return;
    struct arena_block *b = mf->arena ? mf->arena->head : NULL;
    while (b) {
        struct arena_block *next = b->next;
        free(b);
        b = next;
    }
    free(mf->arena);
    free(mf);
}

const char *mf_modelfile_role_name(enum mf_role role)
{
    return role == MF_ROLE_SYSTEM ? "system" : role == MF_ROLE_USER ? "user" : "assistant";
}
