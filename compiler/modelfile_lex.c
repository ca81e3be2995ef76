/*
 * modelfile_lex.c: decodes a Modelfile and splits it into instructions.
 *
 * A rune-for-rune port of Ollama's parser/parser.go ParseFile, so that mfc
 * reads exactly the values Ollama reads, plus what Ollama lacks: true line
 * and column numbers, better messages, and recovery after an error so that
 * one run reports several. Owns nothing: it fills the parser's cmds and
 * diags vectors. Does not interpret values (modelfile.c does).
 *
 * States (Ollama's names in brackets), for Ollama's instructions:
 *   L_NIL   [stateNil]  --'#'---------------> L_COMMENT --newline--> L_NIL
 *   L_NIL   --other rune (name starts)------> L_NAME    [stateName]
 *   L_NAME  --space, PARAMETER--------------> L_PARAM   [stateParameter]
 *   L_NAME  --space, MESSAGE----------------> L_ROLE    [stateMessage]
 *   L_NAME  --space, other keyword----------> L_VALUE   [stateValue]
 *   L_PARAM, L_ROLE --space-----------------> L_VALUE
 *   L_VALUE --newline, unquote() complete---> L_NIL     (finish_value)
 * and for mfc's RUN/ENV/ARG/LABEL, Dockerfile lines with '\' continuation:
 *   L_NAME  --space, RUN|ENV|ARG|LABEL------> L_DVALUE
 *   L_DVALUE --newline after '\'------------> L_DCONT --other--> L_DVALUE
 *   L_DCONT  --'#' (comment line)-----------> L_DCOMMENT --newline--> L_DCONT
 *   L_DVALUE --newline----------------------> L_NIL     (finish_dvalue)
 * Errors: a bad rune in a name skips the line (L_SKIP); an unknown keyword,
 * role or parameter name consumes its value like Ollama would (discard set)
 * so a quoted multi-line value does not cascade into more errors.
 *
 * Quirks kept on purpose (docs/modelfile.md, "Compatibility"): runes that
 * fail strconv.IsPrint are dropped except blanks inside values; a quoted
 * value only ends at a line whose trimmed text ends with its quote; \r and
 * \n both end a line (mfc counts CRLF as one line when reporting), and in a
 * value both become \n (crlf_to_lf; Ollama keeps the \r).
 */
#include "compiler/modelfile_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/utf8.h"

enum lstate { L_NIL, L_NAME, L_PARAM, L_ROLE, L_VALUE, L_COMMENT, L_SKIP, L_DVALUE, L_DCONT,
              L_DCOMMENT };

struct lexer {
    struct mf_modelfile_parser *p;
    enum lstate st;
    size_t off;             /* byte offset of the rune being handled */
    int line, col;          /* its position */
    size_t kw_off;          /* offset of the current keyword */
    int discard;            /* the value is consumed after an error, then dropped */
    struct mf_buf word;     /* keyword, parameter name or role */
    struct mf_buf val;      /* value bytes, as Ollama's buffer b holds them */
    size_t v_first, v_end;  /* non-blank range of val (v_first == v_end: blank) */
    int v_any;              /* val has a non-blank byte */
    int vline, vcol;        /* position of val's first non-blank rune */
    int conts;              /* '\' continuations joined into a RUN/ENV/... value */
    struct mf_buf dpend;    /* leading blanks of a continuation line */
    struct mf_lexcmd cmd;   /* the instruction being read */
    struct mf_vec comments; /* struct mf_comment waiting for their instruction */
    struct mf_buf ctext;    /* the comment being read */
    struct mf_comment cur;  /* its line and blank_before */
    int last_end;           /* line where the previous item ended, 0 at the top */
    int warned_line;        /* line that already has an invisible-rune warning */
};

static const struct {
    const char *name;
    enum mf_instr_kind kind;
} keywords[] = {
    {"FROM", MF_INSTR_FROM},         {"ADAPTER", MF_INSTR_ADAPTER},
    {"DRAFT", MF_INSTR_DRAFT},       {"PARAMETER", MF_INSTR_PARAMETER},
    {"TEMPLATE", MF_INSTR_TEMPLATE}, {"SYSTEM", MF_INSTR_SYSTEM},
    {"MESSAGE", MF_INSTR_MESSAGE},   {"LICENSE", MF_INSTR_LICENSE},
    {"REQUIRES", MF_INSTR_REQUIRES}, {"RENDERER", MF_INSTR_RENDERER},
    {"PARSER", MF_INSTR_PARSER},     {"RUN", MF_INSTR_RUN},
    {"ENV", MF_INSTR_ENV},           {"ARG", MF_INSTR_ARG},
    {"LABEL", MF_INSTR_LABEL},
};
#define N_KEYWORDS (sizeof keywords / sizeof keywords[0])

/* Dockerfile instructions mfc does not have, for a better message. */
static const char *const docker_only[] = {"ADD", "COPY", "CMD", "ENTRYPOINT", "EXPOSE",
                                          "HEALTHCHECK", "ONBUILD", "SHELL", "STOPSIGNAL",
                                          "USER", "VOLUME", "WORKDIR", "MAINTAINER"};

const char *mf_modelfile_kind_name(enum mf_instr_kind kind)
{
    for (size_t i = 0; i < N_KEYWORDS; i++)
        if (keywords[i].kind == kind)
            return keywords[i].name;
    return "?";
}

int mf_modelfile_keyword(const char *name, size_t len)
{
    for (size_t i = 0; i < N_KEYWORDS; i++)
        if (strlen(keywords[i].name) == len && strncasecmp(keywords[i].name, name, len) == 0)
            return (int)keywords[i].kind;
    return -1;
}

static int is_space(uint32_t r) { return r == ' ' || r == '\t'; }
static int is_newline(uint32_t r) { return r == '\r' || r == '\n'; }
static int is_alpha(uint32_t r) { return (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z'); }
static int is_digit(uint32_t r) { return r >= '0' && r <= '9'; }

/* ------------------------------------------------------------------ decoding */

static int push_cp(struct mf_buf *b, uint32_t cp, struct mf_err *err)
{
    char u[4];
    int k = mf_utf8_encode(cp, u);
    if (k == 0)
        k = mf_utf8_encode(0xFFFD, u);
    return mf_buf_append(b, u, (size_t)k, err);
}

/* Notes a replacement the decoder made at output offset off. */
static void bad_input(struct mf_modelfile_parser *p, size_t off)
{
    if (p->n_bad_utf8++ == 0)
        p->first_bad_utf8 = off;
}

/* x/text's UTF-16 decoder: pairs combine, a lone surrogate or an odd
 * trailing byte becomes U+FFFD. */
static int decode_utf16(struct mf_modelfile_parser *p, const unsigned char *u, size_t n, int big,
                        struct mf_buf *out, struct mf_err *err)
{
    int rc = 0;
    size_t i = 0;
    while (rc == 0 && i + 1 < n) {
        uint32_t c = big ? (uint32_t)(u[i] << 8 | u[i + 1]) : (uint32_t)(u[i + 1] << 8 | u[i]);
        i += 2;
        if (c >= 0xD800 && c <= 0xDBFF && i + 1 < n) {
            uint32_t lo = big ? (uint32_t)(u[i] << 8 | u[i + 1]) : (uint32_t)(u[i + 1] << 8 | u[i]);
            if (lo >= 0xDC00 && lo <= 0xDFFF) {
                c = 0x10000 + ((c - 0xD800) << 10) + (lo - 0xDC00);
                i += 2;
            }
        }
        if (c >= 0xD800 && c <= 0xDFFF) {
            bad_input(p, out->len);
            c = 0xFFFD;
        }
        rc = push_cp(out, c, err);
    }
    if (rc == 0 && i < n) {
        bad_input(p, out->len);
        rc = push_cp(out, 0xFFFD, err);
    }
    return rc;
}

/* Go's UTF-8 decoding: every byte that does not start a valid sequence is
 * one U+FFFD. Valid runs are copied as they are. */
static int decode_utf8(struct mf_modelfile_parser *p, const char *s, size_t n,
                       struct mf_buf *out, struct mf_err *err)
{
    size_t i = 0, run = 0;
    int rc = 0;
    while (rc == 0 && i < n) {
        uint32_t cp;
        int k = mf_utf8_decode(s + i, n - i, &cp);
        if (k > 0) {
            i += (size_t)k;
            continue;
        }
        rc = mf_buf_append(out, s + run, i - run, err);
        if (rc == 0) {
            bad_input(p, out->len);
            rc = push_cp(out, 0xFFFD, err);
        }
        run = ++i;
    }
    if (rc == 0)
        rc = mf_buf_append(out, s + run, n - run, err);
    return rc;
}

static int build_line_table(struct mf_modelfile_parser *p, struct mf_err *err)
{
    const char *s = p->mf->text;
    size_t n = p->mf->text_len, lines = 1;
    for (size_t i = 0; i < n; i++)
        if (s[i] == '\n' || (s[i] == '\r' && (i + 1 >= n || s[i + 1] != '\n')))
            lines++;
    size_t *starts = mf_modelfile_alloc(p->arena, lines * sizeof *starts);
    if (!starts)
        return mf_err_set(err, MF_ENOMEM, "%s: out of memory", p->mf->name);
    p->mf->line_starts = starts;
    p->mf->n_lines = 1;
    for (size_t i = 0; i < n; i++)
        if (s[i] == '\n' || (s[i] == '\r' && (i + 1 >= n || s[i + 1] != '\n')))
            starts[p->mf->n_lines++] = i + 1;
    return 0;
}

int mf_modelfile_decode(struct mf_modelfile_parser *p, const char *data, size_t len,
                        struct mf_err *err)
{
    const unsigned char *u = (const unsigned char *)data;
    struct mf_buf out;
    int rc;

    /* decoded UTF-8 is at most 3/2 of the input (UTF-16 BMP text), so the
     * buffer's own cap never hits before the size check below */
    mf_buf_init(&out, 6 * (size_t)MF_MODELFILE_MAX_BYTES);
    p->first_bad_utf8 = SIZE_MAX;
    if (len > 4 * (size_t)MF_MODELFILE_MAX_BYTES)
        return mf_err_set(err, MF_EINVAL, "%s: larger than %u bytes", p->mf->name,
                          MF_MODELFILE_MAX_BYTES);
    if (len >= 2 && u[0] == 0xFE && u[1] == 0xFF)
        rc = decode_utf16(p, u + 2, len - 2, 1, &out, err);
    else if (len >= 2 && u[0] == 0xFF && u[1] == 0xFE)
        rc = decode_utf16(p, u + 2, len - 2, 0, &out, err);
    else if (len >= 3 && u[0] == 0xEF && u[1] == 0xBB && u[2] == 0xBF)
        rc = decode_utf8(p, data + 3, len - 3, &out, err);
    else
        rc = decode_utf8(p, data, len, &out, err);
    if (rc)
        goto fail;
    if (out.len > MF_MODELFILE_MAX_BYTES) {
        rc = mf_err_set(err, MF_EINVAL, "%s: larger than %u bytes", p->mf->name,
                        MF_MODELFILE_MAX_BYTES);
        goto fail;
    }
    p->mf->text_len = out.len;
    p->mf->text = mf_modelfile_strndup(p->arena, out.data ? out.data : "", out.len);
    rc = p->mf->text ? build_line_table(p, err)
                     : mf_err_set(err, MF_ENOMEM, "%s: out of memory", p->mf->name);
fail:
    mf_buf_free(&out);
    return rc;
}

/* -------------------------------------------------------------- unquoting */

int mf_modelfile_unquote(const char *s, size_t first, size_t end, size_t *start, size_t *len,
                         int *quote)
{
    size_t n = end - first;
    const char *t = s ? s + first : ""; /* an empty mf_buf has no data */
    *quote = 0;
    *start = first;
    *len = n;
    if (n >= 3 && memcmp(t, "\"\"\"", 3) == 0) {
        *quote = 3;
        if (n < 6 || memcmp(t + n - 3, "\"\"\"", 3) != 0)
            return 0;
    } else if (n >= 1 && t[0] == '"') {
        *quote = 1;
        if (n < 2 || t[n - 1] != '"')
            return 0;
    }
    *start = first + (size_t)*quote;
    *len = n - 2 * (size_t)*quote;
    return 1;
}

/* ------------------------------------------------------------------ helpers */

/* The token starting at off: up to the next blank or end of line. */
static char *token_at(struct lexer *lx, size_t off)
{
    const char *s = lx->p->mf->text;
    size_t e = off;
    while (e < lx->p->mf->text_len && !mf_modelfile_is_blank((unsigned char)s[e]) && e - off < 64)
        e++;
    char *t = mf_modelfile_strndup(lx->p->arena, s + off, e - off);
    for (char *q = t; q && *q; q++)
        if ((unsigned char)*q < 0x20 || *q == 0x7F)
            *q = '?'; /* keep control characters out of messages */
    return t;
}

/* Keeps r's bytes in b when Ollama would (printable, or a blank when
 * blanks count); warns once per line about a dropped invisible rune. */
static void keep(struct lexer *lx, struct mf_buf *b, uint32_t r, const char *bytes, int nb,
                 int blanks)
{
    struct mf_err e;
    if (mf_modelfile_isprint(r) || (blanks && is_space(r))) {
        if (mf_buf_append(b, bytes, (size_t)nb, &e) != 0)
            lx->p->oom = 1;
        return;
    }
    if (lx->warned_line == lx->line)
        return;
    lx->warned_line = lx->line;
    mf_modelfile_diag(lx->p, MF_DIAG_WARNING, lx->line, lx->col, 1,
                      "delete it, or use a visible character (Ollama drops it too)",
                      "invisible character U+%04X is ignored", (unsigned)r);
}

/* Starts a comment or an instruction at the current line. */
static int item_blank(struct lexer *lx)
{
    return lx->last_end > 0 && lx->line > lx->last_end + 1;
}

static void begin_value(struct lexer *lx, enum lstate st)
{
    mf_buf_reset(&lx->val);
    lx->v_any = 0;
    lx->v_first = lx->v_end = 0;
    lx->conts = 0;
    lx->vline = lx->line;
    lx->vcol = lx->col + 1;
    lx->st = st;
}

static void push_cmd(struct lexer *lx)
{
    int oom = 0;
    lx->cmd.comments = mf_modelfile_vec_finish(&lx->comments, lx->p->arena, &lx->cmd.n_comments,
                                               &oom);
    if (oom || mf_modelfile_vec_push(&lx->p->cmds, &lx->cmd) != 0)
        lx->p->oom = 1;
}

/* ----------------------------------------------------------------- values */

static void value_rune(struct lexer *lx, uint32_t r, const char *bytes, int nb)
{
    size_t before = lx->val.len;
    keep(lx, &lx->val, r, bytes, nb, 1);
    if (lx->val.len == before || is_space(r))
        return;
    if (!lx->v_any) {
        lx->v_any = 1;
        lx->v_first = before;
        lx->vline = lx->line;
        lx->vcol = lx->col;
    }
    lx->v_end = lx->val.len;
}

/* A multi-line value's line breaks as LF: CRLF (a Modelfile saved on
 * Windows) and a lone CR both become "\n", so no value carries a '\r' into
 * the image (Ollama keeps them; a template or SYSTEM with "\r\n" then
 * renders differently from the same file saved with LF). In place; returns
 * the new length. */
static size_t crlf_to_lf(char *s, size_t n)
{
    size_t w = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '\r' && i + 1 < n && s[i + 1] == '\n')
            continue;
        s[w++] = s[i] == '\r' ? '\n' : s[i];
    }
    s[w] = '\0';
    return w;
}

static void finish_value(struct lexer *lx, size_t start, size_t len, int quote)
{
    int end_line = lx->line;
    lx->last_end = end_line;
    lx->st = L_NIL;
    if (lx->discard) {
        lx->discard = 0;
        lx->comments.n = 0;
        return;
    }
    char *raw = mf_modelfile_strndup(lx->p->arena, lx->val.data ? lx->val.data + start : "", len);
    if (!raw) {
        lx->p->oom = 1;
        return;
    }
    len = crlf_to_lf(raw, len);
    lx->cmd.raw = raw;
    lx->cmd.quoted = quote > 0;
    lx->cmd.val_line = lx->vline;
    lx->cmd.val_col = lx->vcol + quote;
    lx->cmd.single_line = !memchr(lx->cmd.raw, '\n', len) && !memchr(lx->cmd.raw, '\r', len);
    lx->cmd.end_line = end_line;
    push_cmd(lx);
}

/* Reports a quote that never closed, with the quirk that causes most of
 * them: text after the closing quote on the same line. */
static void unterminated(struct lexer *lx, int quote)
{
    const char *v = lx->val.data + lx->v_first;
    size_t n = lx->v_end - lx->v_first, eol = 0;
    while (eol < n && v[eol] != '\n' && v[eol] != '\r')
        eol++;
    const char *q = quote == 3 ? "\"\"\"" : "\"";
    int trailing = 0;
    for (size_t i = (size_t)quote; i + (size_t)quote <= eol; i++)
        if (memcmp(v + i, q, (size_t)quote) == 0 && i + (size_t)quote < eol)
            trailing = 1;
    mf_modelfile_diag(lx->p, MF_DIAG_ERROR, lx->vline, lx->vcol, quote,
                      trailing ? mf_modelfile_fmt(lx->p, "a quoted value ends only at a line that "
                                                  "ends with %s; text after the closing quote "
                                                  "keeps it open", q)
                               : mf_modelfile_fmt(lx->p, "end the value with %s", q),
                      "unterminated %s value: no later line ends with %s",
                      quote == 3 ? "\"\"\"" : "quoted", q);
}

static void on_value(struct lexer *lx, uint32_t r, const char *bytes, int nb)
{
    size_t s, n;
    int q;
    if (!is_newline(r)) {
        value_rune(lx, r, bytes, nb);
        return;
    }
    if (!mf_modelfile_unquote(lx->val.data, lx->v_first, lx->v_end, &s, &n, &q)) {
        struct mf_err e;
        if (mf_buf_append(&lx->val, bytes, (size_t)nb, &e) != 0)
            lx->p->oom = 1;
        return;
    }
    finish_value(lx, s, n, q);
}

/* Dockerfile's line continuation: a '\' ending the line, blanks after it
 * allowed (BuildKit's `\\[ \t]*$`). Removes it and returns 1. */
static int continues(struct mf_buf *v)
{
    size_t k = v->len;
    while (k > 0 && is_space((unsigned char)v->data[k - 1]))
        k--;
    if (k == 0 || v->data[k - 1] != '\\')
        return 0;
    v->len = k - 1;
    v->data[v->len] = '\0';
    return 1;
}

static void finish_dvalue(struct lexer *lx)
{
    const char *v = lx->val.data ? lx->val.data : "";
    size_t a = 0, b = lx->val.len;
    while (a < b && is_space((unsigned char)v[a]))
        a++;
    while (b > a && is_space((unsigned char)v[b - 1]))
        b--;
    if (lx->conts == 0)
        lx->vcol += (int)a; /* on the keyword's line: leading blanks are 1 column each */
    finish_value(lx, a, b - a, 0);
    lx->cmd.single_line = lx->conts == 0;
}

static void on_dvalue(struct lexer *lx, uint32_t r, const char *bytes, int nb)
{
    if (!is_newline(r)) {
        keep(lx, &lx->val, r, bytes, nb, 1);
        return;
    }
    if (continues(&lx->val)) {
        lx->conts++;
        mf_buf_reset(&lx->dpend);
        lx->st = L_DCONT;
        return;
    }
    finish_dvalue(lx);
}

/* The start of a continuation line: comment and blank lines are skipped
 * (Dockerfile rules); anything else joins the value, leading blanks kept. */
static void on_dcont(struct lexer *lx, uint32_t r, const char *bytes, int nb)
{
    struct mf_err e;
    if (is_space(r)) {
        if (mf_buf_append(&lx->dpend, bytes, (size_t)nb, &e) != 0)
            lx->p->oom = 1;
    } else if (r == '#') {
        lx->st = L_DCOMMENT;
    } else if (is_newline(r)) {
        mf_buf_reset(&lx->dpend);
    } else {
        if (lx->dpend.len && mf_buf_append(&lx->val, lx->dpend.data, lx->dpend.len, &e) != 0)
            lx->p->oom = 1;
        lx->st = L_DVALUE;
        on_dvalue(lx, r, bytes, nb);
    }
}

/* ------------------------------------------------------------------- names */

static void error_unknown(struct lexer *lx)
{
    struct mf_modelfile_parser *p = lx->p;
    char *tok = token_at(lx, lx->kw_off);
    const char *names[N_KEYWORDS];
    for (size_t i = 0; i < N_KEYWORDS; i++)
        names[i] = keywords[i].name;
    const char *hint = NULL;
    const char *best = tok ? mf_modelfile_suggest(tok, names, N_KEYWORDS) : NULL;
    for (size_t i = 0; tok && i < sizeof docker_only / sizeof docker_only[0]; i++)
        if (strcasecmp(tok, docker_only[i]) == 0)
            hint = mf_modelfile_fmt(p, "%s is a Dockerfile instruction that mfc does not "
                                       "have; see docs/modelfile.md", docker_only[i]);
    if (!hint && best)
        hint = mf_modelfile_fmt(p, "did you mean %s?", best);
    if (!hint)
        hint = "instructions are FROM, ADAPTER, PARAMETER, TEMPLATE, SYSTEM, MESSAGE, "
               "LICENSE, REQUIRES, DRAFT, RENDERER, PARSER, RUN, ENV, ARG, LABEL; "
               "comments start with #";
    int len = tok ? (int)strlen(tok) : 1;
    mf_modelfile_diag(p, MF_DIAG_ERROR, lx->cmd.line, lx->cmd.col, len ? len : 1, hint,
                      "unknown instruction '%s'", tok ? tok : "");
}

static void error_missing_value(struct lexer *lx, int kind)
{
    const char *kw = mf_modelfile_kind_name((enum mf_instr_kind)kind);
    const char *hint = NULL, *what = "a value";
    if (kind == MF_INSTR_SYSTEM || kind == MF_INSTR_TEMPLATE || kind == MF_INSTR_LICENSE)
        hint = mf_modelfile_fmt(lx->p, "write %s \"\" for an empty value", kw);
    if (kind == MF_INSTR_PARAMETER)
        what = "a name and a value";
    else if (kind == MF_INSTR_MESSAGE)
        what = "a role and the message text";
    else if (kind == MF_INSTR_RUN)
        what = "a command";
    else if (kind == MF_INSTR_ENV || kind == MF_INSTR_LABEL || kind == MF_INSTR_ARG)
        what = "NAME=VALUE";
    mf_modelfile_diag(lx->p, MF_DIAG_ERROR, lx->cmd.line, lx->cmd.col, lx->cmd.kw_len, hint,
                      "%s needs %s", kw, what);
}

/* The keyword ended with something other than a blank (Ollama:
 * errInvalidCommand, or unexpected EOF at the end of the file). */
static void name_error(struct lexer *lx, uint32_t r, int at_eof)
{
    int kind = lx->word.len ? mf_modelfile_keyword(lx->word.data, lx->word.len) : -1;
    lx->cmd.kw_len = (int)lx->word.len;
    if (kind >= 0 && (at_eof || is_newline(r)))
        error_missing_value(lx, kind);
    else if (kind >= 0 && !is_alpha(r) && !is_digit(r))
        mf_modelfile_diag(lx->p, MF_DIAG_ERROR, lx->line, lx->col, 1, NULL,
                          "expected a space after %s", mf_modelfile_kind_name(kind));
    else
        error_unknown(lx);
    lx->last_end = lx->line;
    lx->comments.n = 0;
    lx->st = at_eof || is_newline(r) ? L_NIL : L_SKIP;
}

static void name_done(struct lexer *lx)
{
    int kind = lx->word.len ? mf_modelfile_keyword(lx->word.data, lx->word.len) : -1;
    lx->cmd.kw_len = (int)lx->word.len;
    if (kind < 0) {
        error_unknown(lx);
        lx->discard = 1;
        begin_value(lx, L_VALUE);
        return;
    }
    lx->cmd.kind = (enum mf_instr_kind)kind;
    mf_buf_reset(&lx->word);
    lx->cmd.arg_line = lx->line;
    lx->cmd.arg_col = lx->col + 1;
    switch (kind) {
    case MF_INSTR_PARAMETER: lx->st = L_PARAM; break;
    case MF_INSTR_MESSAGE: lx->st = L_ROLE; break;
    case MF_INSTR_RUN:
    case MF_INSTR_ENV:
    case MF_INSTR_ARG:
    case MF_INSTR_LABEL: begin_value(lx, L_DVALUE); break;
    default: begin_value(lx, L_VALUE); break;
    }
}

static void on_name(struct lexer *lx, uint32_t r, const char *bytes, int nb)
{
    struct mf_err e;
    if (is_alpha(r)) {
        /* past the buffer's 256 bytes the name is no keyword anyway: keep going */
        (void)mf_buf_append(&lx->word, bytes, (size_t)nb, &e);
    } else if (is_space(r)) {
        name_done(lx);
    } else {
        name_error(lx, r, 0);
    }
}

/* ------------------------------------------------------ PARAMETER / MESSAGE */

static int role_ok(const char *s)
{
    return strcmp(s, "system") == 0 || strcmp(s, "user") == 0 || strcmp(s, "assistant") == 0;
}

/* A PARAMETER name or MESSAGE role ended with a blank. */
static void arg_done(struct lexer *lx)
{
    const char *a = mf_modelfile_strndup(lx->p->arena, lx->word.data ? lx->word.data : "",
                                         lx->word.len);
    if (!a) {
        lx->p->oom = 1;
        return;
    }
    lx->cmd.arg = a;
    if (lx->st == L_ROLE && !role_ok(a)) {
        static const char *const roles[] = {"system", "user", "assistant"};
        const char *best = mf_modelfile_suggest(a, roles, 3);
        mf_modelfile_diag(
            lx->p, MF_DIAG_ERROR, lx->cmd.arg_line, lx->cmd.arg_col, a[0] ? (int)strlen(a) : 1,
            best ? mf_modelfile_fmt(lx->p, "did you mean %s? (roles are lower case)", best)
                 : "the role is system, user or assistant, in lower case",
            "message role must be system, user or assistant, not '%s'", a);
        lx->discard = 1;
    }
    begin_value(lx, L_VALUE);
}

/* A PARAMETER name or MESSAGE role ended with a newline, end of file, or a
 * rune that cannot be in it (Ollama: "unexpected EOF: <name so far>"). */
static void arg_error(struct lexer *lx, uint32_t r, int at_eof)
{
    struct mf_modelfile_parser *p = lx->p;
    int param = lx->st == L_PARAM;
    const char *kw = param ? "PARAMETER" : "MESSAGE";
    lx->comments.n = 0;
    if (at_eof || is_newline(r)) {
        if (lx->word.len)
            mf_modelfile_diag(p, MF_DIAG_ERROR, lx->cmd.line, lx->cmd.col, lx->cmd.kw_len, NULL,
                              "%s %s needs %s", kw, lx->word.data,
                              param ? "a value" : "the message text");
        else
            mf_modelfile_diag(p, MF_DIAG_ERROR, lx->cmd.line, lx->cmd.col, lx->cmd.kw_len, NULL,
                              "%s needs a %s and a value", kw, param ? "name" : "role");
        lx->last_end = lx->line;
        lx->st = L_NIL;
        return;
    }
    char *tok = token_at(lx, lx->off - lx->word.len);
    const char *best = !tok ? NULL : param ? mf_modelfile_param_suggest(tok) : NULL;
    char shown[8];
    if (r >= 0x20 && r < 0x7F)
        snprintf(shown, sizeof shown, "'%c'", (char)r);
    else
        snprintf(shown, sizeof shown, "U+%04X", (unsigned)r);
    mf_modelfile_diag(p, MF_DIAG_ERROR, lx->line, lx->col, 1,
                      best ? mf_modelfile_fmt(p, "did you mean %s?", best)
                      : param ? "parameter names are letters, digits and '_'"
                              : "the role is system, user or assistant",
                      "invalid character %s in %s %s", shown, kw, param ? "name" : "role");
    lx->discard = 1;
    begin_value(lx, L_VALUE);
}

static void on_arg(struct lexer *lx, uint32_t r, const char *bytes, int nb)
{
    struct mf_err e;
    int ok = lx->st == L_PARAM ? is_alpha(r) || is_digit(r) || r == '_' : is_alpha(r);
    if (ok) {
        if (mf_buf_append(&lx->word, bytes, (size_t)nb, &e) != 0)
            lx->p->oom = 1;
    } else if (is_space(r)) {
        arg_done(lx);
    } else {
        arg_error(lx, r, 0);
    }
}

/* ---------------------------------------------------------- nil, comments */

static void on_nil(struct lexer *lx, uint32_t r, const char *bytes, int nb)
{
    if (is_space(r) || is_newline(r))
        return;
    if (r == '#') {
        mf_buf_reset(&lx->ctext);
        lx->cur.line = lx->line;
        lx->cur.blank_before = item_blank(lx);
        lx->st = L_COMMENT;
        return;
    }
    memset(&lx->cmd, 0, sizeof lx->cmd);
    lx->cmd.line = lx->line;
    lx->cmd.col = lx->col;
    lx->cmd.blank_before = item_blank(lx);
    lx->kw_off = lx->off;
    lx->discard = 0;
    mf_buf_reset(&lx->word);
    lx->st = L_NAME;
    keep(lx, &lx->word, r, bytes, nb, 0);
}

static void finish_comment(struct lexer *lx)
{
    char *t = lx->ctext.data ? lx->ctext.data : "";
    size_t n = 0;
    for (size_t i = 0; i < lx->ctext.len; i++)
        if (t[i] != '\0') /* a NUL would cut the text short when written back */
            t[n++] = t[i];
    while (n > 0 && is_space((unsigned char)t[n - 1]))
        n--;
    lx->cur.text = mf_modelfile_strndup(lx->p->arena, t, n);
    if (!lx->cur.text || mf_modelfile_vec_push(&lx->comments, &lx->cur) != 0)
        lx->p->oom = 1;
    lx->last_end = lx->cur.line;
    lx->st = L_NIL;
}

static void on_comment(struct lexer *lx, uint32_t r, const char *bytes, int nb)
{
    struct mf_err e;
    if (is_newline(r))
        finish_comment(lx);
    else if (mf_buf_append(&lx->ctext, bytes, (size_t)nb, &e) != 0)
        lx->p->oom = 1;
}

/* ------------------------------------------------------------- the driver */

static void lex_rune(struct lexer *lx, uint32_t r, const char *bytes, int nb)
{
    switch (lx->st) {
    case L_NIL: on_nil(lx, r, bytes, nb); break;
    case L_NAME: on_name(lx, r, bytes, nb); break;
    case L_PARAM:
    case L_ROLE: on_arg(lx, r, bytes, nb); break;
    case L_VALUE: on_value(lx, r, bytes, nb); break;
    case L_COMMENT: on_comment(lx, r, bytes, nb); break;
    case L_SKIP:
        if (is_newline(r))
            lx->st = L_NIL;
        break;
    case L_DVALUE: on_dvalue(lx, r, bytes, nb); break;
    case L_DCONT: on_dcont(lx, r, bytes, nb); break;
    case L_DCOMMENT:
        if (is_newline(r)) {
            mf_buf_reset(&lx->dpend);
            lx->st = L_DCONT;
        }
        break;
    }
}

/* End of input: Ollama's final flush. */
static void lex_eof(struct lexer *lx)
{
    size_t s, n;
    int q;
    switch (lx->st) {
    case L_NIL:
    case L_SKIP: break;
    case L_COMMENT: finish_comment(lx); break;
    case L_NAME: name_error(lx, 0, 1); break;
    case L_PARAM:
    case L_ROLE: arg_error(lx, 0, 1); break;
    case L_VALUE:
        if (mf_modelfile_unquote(lx->val.data, lx->v_first, lx->v_end, &s, &n, &q))
            finish_value(lx, s, n, q);
        else if (!lx->discard)
            unterminated(lx, q);
        break;
    case L_DVALUE:
        /* BuildKit strips a trailing '\' from the last line too */
        lx->conts += continues(&lx->val);
        finish_dvalue(lx);
        break;
    case L_DCONT:
    case L_DCOMMENT: finish_dvalue(lx); break;
    }
}

static void lexer_fini(struct lexer *lx)
{
    struct mf_modelfile *mf = lx->p->mf;
    int oom = 0;
    mf->trailing_comments = mf_modelfile_vec_finish(&lx->comments, lx->p->arena,
                                                    &mf->n_trailing_comments, &oom);
    if (oom)
        lx->p->oom = 1;
    mf_modelfile_vec_free(&lx->comments);
    mf_buf_free(&lx->word);
    mf_buf_free(&lx->val);
    mf_buf_free(&lx->dpend);
    mf_buf_free(&lx->ctext);
}

void mf_modelfile_lex(struct mf_modelfile_parser *p)
{
    struct lexer lx = {.p = p, .st = L_NIL, .line = 1, .col = 1};
    const char *s = p->mf->text;
    size_t n = p->mf->text_len, i = 0;
    int cr = 0;

    mf_buf_init(&lx.word, 256);
    mf_buf_init(&lx.val, MF_MODELFILE_MAX_BYTES);
    mf_buf_init(&lx.dpend, MF_MODELFILE_MAX_BYTES);
    mf_buf_init(&lx.ctext, MF_MODELFILE_MAX_BYTES);
    lx.comments.elem = sizeof(struct mf_comment);
    while (i < n && !p->oom && !p->stopped) {
        uint32_t r;
        int k = mf_utf8_decode(s + i, n - i, &r);
        if (k == 0) /* cannot happen: decode made the text valid */
            r = 0xFFFD, k = 1;
        lx.off = i;
        lex_rune(&lx, r, s + i, k);
        i += (size_t)k;
        if (r == '\n' && cr) {
            cr = 0;
        } else if (is_newline(r)) {
            lx.line++;
            lx.col = 1;
            cr = r == '\r';
        } else {
            lx.col++;
            cr = 0;
        }
    }
    lx.off = n;
    if (!p->oom && !p->stopped)
        lex_eof(&lx);
    lexer_fini(&lx);
}
