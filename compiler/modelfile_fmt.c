/*
 * modelfile_fmt.c: the canonical form of a Modelfile (`mfc fmt`).
 *
 * Keywords upper case, one space between fields, LF line ends, comments
 * kept, runs of blank lines folded to one. A value is written by one rule
 * (quote_form): bare when Ollama reads it back unchanged, else """...""" when
 * it holds a newline or a '"', else "...", else """...""". Whether a form
 * reads back is not guessed but simulated with the lexer's own closing rule
 * (mf_modelfile_unquote at every line end), so the rule cannot drift from
 * the parser. A value no form can carry (Ollama has no escapes: e.g. a line
 * ending in """ followed by a line ending in ") is reported. Finally the
 * output is parsed again and compared with the input's JSON, so fmt never
 * changes what a file means. Owns nothing; appends to the caller's buffer.
 */
#include "compiler/modelfile_int.h"

#include <stdlib.h>
#include <string.h>

#include "common/utf8.h"

struct fmt {
    const struct mf_modelfile *mf;
    struct mf_buf out;  /* the formatted text */
    char *tmp;          /* scratch for fits(), big enough for any value + 6 */
    struct mf_err *err;
};

/* Whether Ollama's lexer, reading quote q (0, 1 or 3 '"'), v[0..n) and the
 * quote again, keeps every rune and ends the value exactly there with v. */
static int fits(char *tmp, const char *v, size_t n, int q)
{
    size_t len = 0, first = 0, end = 0, s, l;
    int any = 0, qq;
    memcpy(tmp, "\"\"\"", (size_t)q);
    memcpy(tmp + q, v, n);
    memcpy(tmp + q + n, "\"\"\"", (size_t)q);
    len = n + 2 * (size_t)q;
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        int k = mf_utf8_decode(tmp + i, len - i, &cp);
        if (k == 0)
            return 0;
        if (cp == '\r' || cp == '\n') {
            /* the lexer checks for the end of the value before each line end */
            if (mf_modelfile_unquote(tmp, first, end, &s, &l, &qq))
                return 0;
        } else if (cp != ' ' && cp != '\t') {
            if (!mf_modelfile_isprint(cp))
                return 0; /* Ollama would drop it */
            first = any ? first : i;
            any = 1;
            end = i + (size_t)k;
        }
        i += (size_t)k;
    }
    return mf_modelfile_unquote(tmp, first, end, &s, &l, &qq) && l == n &&
           memcmp(tmp + s, v, n) == 0;
}

/* The canonical quote for v: 0 bare, 1 "...", 3 """...""", or -1 if none. */
static int quote_form(char *tmp, const char *v, int bare_ok)
{
    size_t n = strlen(v);
    if (n == 0)
        return 1;
    if (bare_ok && fits(tmp, v, n, 0))
        return 0;
    if (strpbrk(v, "\r\n\"") && fits(tmp, v, n, 3))
        return 3;
    if (fits(tmp, v, n, 1))
        return 1;
    return fits(tmp, v, n, 3) ? 3 : -1;
}

/* A blank-separated token starting with "--" (a flag once unquoted). */
static int has_flag_token(const char *s)
{
    for (const char *d = strstr(s, "--"); d; d = strstr(d + 1, "--"))
        if (d == s || d[-1] == ' ' || d[-1] == '\t')
            return 1;
    return 0;
}

static int put_value(struct fmt *f, const struct mf_instr *in, const char *v, int bare_ok)
{
    int q = quote_form(f->tmp, v, bare_ok);
    if (q < 0)
        return mf_err_set(f->err, MF_EINVAL,
                          "%s:%d: the %s value cannot be written in Modelfile syntax (it has "
                          "a line ending in \"\"\" and a later line ending in \"; Ollama has "
                          "no escapes)", f->mf->name, in->line, mf_modelfile_kind_name(in->kind));
    const char *qs = q == 3 ? "\"\"\"" : q == 1 ? "\"" : "";
    return mf_buf_printf(&f->out, f->err, "%s%s%s\n", qs, v, qs);
}

static int emit_instr(struct fmt *f, const struct mf_instr *in, int last)
{
    const char *kw = mf_modelfile_kind_name(in->kind);
    int rc = mf_buf_printf(&f->out, f->err, "%s ", kw);
    if (rc)
        return rc;
    switch (in->kind) {
    case MF_INSTR_RUN:
    case MF_INSTR_ENV:
    case MF_INSTR_ARG:
    case MF_INSTR_LABEL: {
        /* a final '\\' would be read as a line continuation: at the end of
         * the file a second one keeps it (the continuation meets EOF) */
        size_t n = strlen(in->raw);
        int bs = n && in->raw[n - 1] == '\\';
        if (bs && !last)
            return mf_err_set(f->err, MF_EINVAL,
                              "%s:%d: the %s value ends with '\\', which would continue onto "
                              "the next line", f->mf->name, in->line, kw);
        return mf_buf_printf(&f->out, f->err, "%s%s\n", in->raw, bs ? "\\" : "");
    }
    case MF_INSTR_PARAMETER:
        rc = mf_buf_printf(&f->out, f->err, "%s ", in->u.param.name);
        return rc ? rc : put_value(f, in, in->raw, 1);
    case MF_INSTR_MESSAGE:
        rc = mf_buf_printf(&f->out, f->err, "%s ", mf_modelfile_role_name(in->u.msg.role));
        return rc ? rc : put_value(f, in, in->raw, 1);
    case MF_INSTR_FROM:
    case MF_INSTR_ADAPTER:
    case MF_INSTR_DRAFT:
        /* unquoted, flags are read out of the value: a quoted one must stay quoted */
        return put_value(f, in, in->raw, !in->quoted || !has_flag_token(in->raw));
    default: return put_value(f, in, in->raw, 1);
    }
}

static int emit_comments(struct fmt *f, const struct mf_comment *c, size_t n)
{
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        if (c[i].blank_before && f->out.len)
            rc = mf_buf_putc(&f->out, '\n', f->err);
        if (rc == 0)
            rc = mf_buf_printf(&f->out, f->err, "#%s\n", c[i].text);
    }
    return rc;
}

/* Parses the output again: the same instructions must come back. */
static int verify(struct fmt *f, const struct mf_modelfile_opts *opts)
{
    struct mf_modelfile_opts o = opts ? *opts : (struct mf_modelfile_opts){0};
    struct mf_modelfile *again = NULL;
    struct mf_err e;
    unsigned fl = MF_MODELFILE_JSON_NO_POS | MF_MODELFILE_JSON_NO_DIAGS;
    o.name = f->mf->name;
    int rc = mf_modelfile_parse(f->out.data ? f->out.data : "", f->out.len, &o, &again, &e);
    json_t *a = rc == 0 ? mf_modelfile_to_json(f->mf, fl) : NULL;
    json_t *b = rc == 0 ? mf_modelfile_to_json(again, fl) : NULL;
    int same = a && b && json_equal(a, b);
    json_decref(a);
    json_decref(b);
    mf_modelfile_free(again);
    if (rc == MF_ENOMEM)
        return mf_err_set(f->err, rc, "%s: %s", f->mf->name, e.msg);
    if (rc != 0)
        return mf_err_set(f->err, MF_EINVAL, "%s: the formatted text does not parse with "
                          "these options (an ARG without a value?)", f->mf->name);
    if (!same)
        return mf_err_set(f->err, MF_EINVAL,
                          "%s: formatting would change what the file means; please report "
                          "this as a bug of mfc fmt", f->mf->name);
    return 0;
}

int mf_modelfile_format(const struct mf_modelfile *mf, const struct mf_modelfile_opts *opts,
                        struct mf_buf *out, struct mf_err *err)
{
    struct fmt f = {.mf = mf, .err = err};
    int rc = 0;
    if (mf->n_errors)
        return mf_err_set(err, MF_EINVAL, "%s: has errors; fix them before formatting",
                          mf->name);
    size_t longest = 0;
    for (size_t i = 0; i < mf->n_instrs; i++)
        if (mf->instrs[i].raw && strlen(mf->instrs[i].raw) > longest)
            longest = strlen(mf->instrs[i].raw);
    mf_buf_init(&f.out, 2 * (size_t)MF_MODELFILE_MAX_BYTES);
    f.tmp = malloc(longest + 8);
    if (!f.tmp)
        rc = mf_err_set(err, MF_ENOMEM, "%s: out of memory", mf->name);
    for (size_t i = 0; rc == 0 && i < mf->n_instrs; i++) {
        const struct mf_instr *in = &mf->instrs[i];
        rc = emit_comments(&f, in->comments, in->n_comments);
        if (rc == 0 && in->blank_before && f.out.len)
            rc = mf_buf_putc(&f.out, '\n', err);
        if (rc == 0)
            rc = emit_instr(&f, in, i + 1 == mf->n_instrs && mf->n_trailing_comments == 0);
    }
    if (rc == 0)
        rc = emit_comments(&f, mf->trailing_comments, mf->n_trailing_comments);
    if (rc == 0)
        rc = verify(&f, opts);
    if (rc == 0)
        rc = mf_buf_append(out, f.out.data ? f.out.data : "", f.out.len, err);
    free(f.tmp);
    mf_buf_free(&f.out);
    return rc;
}
