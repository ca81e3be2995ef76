/*
 * modelfile_diag.c: renders a modelfile's diagnostics the way compilers do:
 *
 *   Modelfile:7:1: error: unknown instruction 'FORM'
 *       7 | FORM llama3
 *         | ^~~~
 *   hint: did you mean FROM?
 *
 * Columns count characters (code points); the caret line copies the tabs
 * of the source line so the caret lands under the right character. Control
 * characters in the shown line become '?'. Owns nothing; writes only into
 * the caller's buffer (library code never prints).
 */
#include "compiler/modelfile.h"

#include <string.h>

#include "common/utf8.h"

#define SHOW_MAX 400 /* bytes of a source line shown; longer lines are cut */

struct style {
    const char *loc, *err, *warn, *caret, *hint, *off;
};

static const struct style plain = {"", "", "", "", "", ""};
static const struct style ansi = {"\033[1m", "\033[1;31m", "\033[1;35m", "\033[1;32m",
                                  "\033[1;36m", "\033[0m"};

/* The text of line (1-based), without its line end. */
static const char *line_text(const struct mf_modelfile *mf, int line, size_t *len)
{
    if (line < 1 || (size_t)line > mf->n_lines || !mf->text)
        return NULL;
    size_t a = mf->line_starts[line - 1];
    size_t b = (size_t)line < mf->n_lines ? mf->line_starts[line] : mf->text_len;
    while (b > a && (mf->text[b - 1] == '\n' || mf->text[b - 1] == '\r'))
        b--;
    *len = b - a;
    return mf->text + a;
}

/* The source line with a gutter, then the caret line. */
static int show_source(const struct mf_modelfile *mf, const struct mf_diag *d,
                       const struct style *st, struct mf_buf *out, struct mf_err *err)
{
    size_t n, i = 0;
    const char *s = line_text(mf, d->line, &n);
    int rc, col = 1, width = 4;
    if (!s || d->col < 1)
        return 0;
    for (int l = d->line; l >= 10000; l /= 10)
        width++;
    rc = mf_buf_printf(out, err, " %*d | ", width, d->line);
    for (size_t k = 0; rc == 0 && k < n && k < SHOW_MAX; k++) {
        unsigned char ch = (unsigned char)s[k];
        rc = mf_buf_putc(out, (ch < 0x20 && ch != '\t') || ch == 0x7F ? '?' : (char)ch, err);
    }
    if (rc == 0 && n > SHOW_MAX)
        rc = mf_buf_puts(out, "...", err);
    if (rc == 0)
        rc = mf_buf_printf(out, err, "\n %*s | %s", width, "", st->caret);
    while (rc == 0 && col < d->col && i < n && i < SHOW_MAX) {
        uint32_t cp;
        int k = mf_utf8_decode(s + i, n - i, &cp);
        rc = mf_buf_putc(out, s[i] == '\t' ? '\t' : ' ', err);
        i += k > 0 ? (size_t)k : 1;
        col++;
    }
    for (int k = 0; rc == 0 && k < d->len && k < 200; k++)
        rc = mf_buf_putc(out, k ? '~' : '^', err);
    return rc ? rc : mf_buf_printf(out, err, "%s\n", st->off);
}

int mf_modelfile_render_diags(const struct mf_modelfile *mf, int color, struct mf_buf *out,
                              struct mf_err *err)
{
    const struct style *st = color ? &ansi : &plain;
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < mf->n_diags; i++) {
        const struct mf_diag *d = &mf->diags[i];
        int e = d->severity == MF_DIAG_ERROR;
        if (d->line > 0)
            rc = mf_buf_printf(out, err, "%s%s:%d:%d:%s ", st->loc, mf->name, d->line, d->col,
                               st->off);
        else
            rc = mf_buf_printf(out, err, "%s%s:%s ", st->loc, mf->name, st->off);
        if (rc == 0)
            rc = mf_buf_printf(out, err, "%s%s:%s %s\n", e ? st->err : st->warn,
                               e ? "error" : "warning", st->off, d->message);
        if (rc == 0)
            rc = show_source(mf, d, st, out, err);
        if (rc == 0 && d->hint)
            rc = mf_buf_printf(out, err, "%shint:%s %s\n", st->hint, st->off, d->hint);
    }
    return rc;
}
