/*
 * gram_regex.c: a JSON Schema `pattern` (an ECMA-262 regular expression)
 * as GBNF over the JSON-escaped content of a string.
 *
 * Handled: literal characters, escapes (\d \w \s \D \W \S, \n \t \r, an
 * escaped punctuation character, \uHHHH), `.`, classes with ranges and
 * negation, groups ( ) and (?: ), alternation, * + ? {m} {m,} {m,n} (a
 * trailing ? for laziness is ignored). A pattern matches anywhere unless
 * anchored: without ^ any string content may precede, without $ any may
 * follow. Characters that JSON must escape come out escaped (" as \", \ as
 * \\); control characters inside classes are left out, and `.`, \D, \W, \S
 * and negated classes match only characters that need no escape besides
 * the ones named, so the grammar allows a subset of the matching strings,
 * never a string that does not match. Lookarounds, backreferences and
 * anchors elsewhere than the ends are MF_EUNSUPPORTED.
 */
#include <stdlib.h>
#include <string.h>

#include "runtime/grammar/gram.h"

#define MAX_NEST 64

struct rx {
    const char *p, *end, *re;
    struct mf_buf *out;
    struct mf_err *err;
    int depth;
};

static int unsupported(struct rx *x, const char *what)
{
    return mf_err_set(x->err, MF_EUNSUPPORTED, "pattern '%.80s': %s is not supported", x->re, what);
}

static int bad(struct rx *x, const char *what)
{
    return mf_err_set(x->err, MF_EINVAL, "pattern '%.80s': %s", x->re, what);
}

static int put(struct rx *x, const char *s)
{
    return mf_buf_puts(x->out, s, x->err);
}

/* A GBNF literal for one code point as JSON writes it inside a string. */
static int put_cp(struct rx *x, uint32_t cp)
{
    if (cp == '"')
        return put(x, "\"\\\\\\\"\"");
    if (cp == '\\')
        return put(x, "\"\\\\\\\\\"");
    if (cp == '\n')
        return put(x, "\"\\\\n\"");
    if (cp == '\t')
        return put(x, "\"\\\\t\"");
    if (cp == '\r')
        return put(x, "\"\\\\r\"");
    if (cp < 0x20 || cp == 0x7F)
        return mf_buf_printf(x->out, x->err, "\"\\\\u%04X\"", cp);
    if (cp >= 0x20 && cp < 0x7F)
        return mf_buf_printf(x->out, x->err, "\"%c\"", (char)cp);
    return mf_buf_printf(x->out, x->err, "\"\\U%08X\"", cp);
}

static int hexv(char c)
{
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

/* Reads one UTF-8 code point at x->p. */
static int read_cp(struct rx *x, uint32_t *cp)
{
    const unsigned char *p = (const unsigned char *)x->p;
    size_t left = (size_t)(x->end - x->p);
    int n = *p < 0x80 ? 1 : (*p >> 5) == 6 ? 2 : (*p >> 4) == 14 ? 3 : (*p >> 3) == 30 ? 4 : 0;
    if (!n || (size_t)n > left)
        return bad(x, "invalid UTF-8");
    uint32_t v = n == 1 ? *p : n == 2 ? (*p & 0x1Fu) : n == 3 ? (*p & 0x0Fu) : (*p & 0x07u);
    for (int i = 1; i < n; i++) {
        if ((p[i] & 0xC0) != 0x80)
            return bad(x, "invalid UTF-8");
        v = (v << 6) | (p[i] & 0x3Fu);
    }
    if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
        return bad(x, "invalid UTF-8");
    *cp = v;
    x->p += n;
    return 0;
}

/* Class escapes as GBNF classes of characters needing no JSON escape. */
static const char *class_escape(char c)
{
    switch (c) {
    case 'd':
        return "[0-9]";
    case 'D':
        return "[^0-9\"\\\\\\x00-\\x1F\\x7F]";
    case 'w':
        return "[a-zA-Z0-9_]";
    case 'W':
        return "[^a-zA-Z0-9_\"\\\\\\x00-\\x1F\\x7F]";
    case 's':
        return "( \" \" | \"\\\\t\" | \"\\\\n\" | \"\\\\r\" )";
    case 'S':
        return "[^ \"\\\\\\x00-\\x1F\\x7F]";
    default:
        return NULL;
    }
}

/* A single escaped code point after '\' (not a class escape). */
static int escape_cp(struct rx *x, uint32_t *cp)
{
    if (x->p >= x->end)
        return bad(x, "ends with '\\'");
    char c = *x->p;
    if ((c >= '1' && c <= '9') || c == 'k')
        return unsupported(x, "a backreference");
    if (c == 'b' || c == 'B')
        return unsupported(x, "a word boundary");
    if (c == 'u') {
        uint32_t v = 0;
        if (x->end - x->p < 5)
            return bad(x, "\\u needs four hex digits");
        for (int i = 1; i <= 4; i++) {
            int h = hexv(x->p[i]);
            if (h < 0)
                return bad(x, "\\u needs four hex digits");
            v = v * 16 + (uint32_t)h;
        }
        if (v >= 0xD800 && v <= 0xDFFF)
            return unsupported(x, "a surrogate escape");
        x->p += 5;
        *cp = v;
        return 0;
    }
    x->p++;
    switch (c) {
    case 'n':
        *cp = '\n';
        return 0;
    case 't':
        *cp = '\t';
        return 0;
    case 'r':
        *cp = '\r';
        return 0;
    case 'f':
        *cp = '\f';
        return 0;
    case 'v':
        *cp = '\v';
        return 0;
    case '0':
        *cp = 0;
        return 0;
    default:
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
            return unsupported(x, "that escape");
        x->p--;
        return read_cp(x, cp);
    }
}

/* A code point inside a GBNF class. */
static int put_class_cp(struct rx *x, uint32_t cp)
{
    if (cp == ']' || cp == '[' || cp == '-' || cp == '^' || cp == '\\' || cp == '"')
        return mf_buf_printf(x->out, x->err, "\\%c", (char)cp);
    if (cp > 0x20 && cp < 0x7F)
        return mf_buf_putc(x->out, (char)cp, x->err);
    return mf_buf_printf(x->out, x->err, "\\U%08X", cp);
}

static int parse_class(struct rx *x)
{
    int neg = 0, rc, quote = 0, bslash = 0, any = 0;
    struct mf_buf saved = *x->out; /* the class is built in a side buffer */
    struct mf_buf cls;
    mf_buf_init(&cls, 1u << 20);
    x->p++; /* '[' */
    if (x->p < x->end && *x->p == '^') {
        neg = 1;
        x->p++;
    }
    struct mf_buf *out = x->out;
    x->out = &cls;
    rc = put(x, neg ? "[^\"\\\\\\x00-\\x1F\\x7F" : "[");
    int first = 1;
    while (!rc) {
        uint32_t lo, hi;
        if (x->p >= x->end) {
            rc = bad(x, "unterminated class");
            break;
        }
        if (*x->p == ']' && !first) {
            x->p++;
            break;
        }
        first = 0;
        if (*x->p == '\\') {
            x->p++;
            const char *ce = x->p < x->end ? class_escape(*x->p) : NULL;
            if (ce) {
                if (neg || (*x->p != 'd' && *x->p != 'w'))
                    rc = unsupported(x, "\\D, \\W, \\s or \\S inside a class");
                else
                    rc = put(x, *x->p == 'd' ? "0-9" : "a-zA-Z0-9_");
                x->p++;
                any = 1;
                continue;
            }
            if ((rc = escape_cp(x, &lo)))
                break;
        } else if ((rc = read_cp(x, &lo))) {
            break;
        }
        hi = lo;
        if (x->end - x->p >= 2 && *x->p == '-' && x->p[1] != ']') {
            x->p++;
            if (*x->p == '\\') {
                x->p++;
                rc = escape_cp(x, &hi);
            } else {
                rc = read_cp(x, &hi);
            }
            if (rc)
                break;
            if (hi < lo) {
                rc = bad(x, "class range out of order");
                break;
            }
        }
        if (neg) { /* excluded: write as is (what JSON escapes is excluded already) */
            if ((rc = put_class_cp(x, lo)))
                break;
            if (hi != lo && ((rc = put(x, "-")) || (rc = put_class_cp(x, hi))))
                break;
            any = 1;
            continue;
        }
        /* included: split around what JSON escapes */
        quote |= lo <= '"' && hi >= '"';
        bslash |= lo <= '\\' && hi >= '\\';
        uint32_t cuts[][2] = {
            {0x20, '"' - 1}, {'"' + 1, '\\' - 1}, {'\\' + 1, 0x7E}, {0x80, 0x10FFFF}};
        for (int k = 0; k < 4 && !rc; k++) {
            uint32_t a = lo > cuts[k][0] ? lo : cuts[k][0], b = hi < cuts[k][1] ? hi : cuts[k][1];
            if (a > b)
                continue;
            if ((rc = put_class_cp(x, a)))
                break;
            if (b != a && ((rc = put(x, "-")) || (rc = put_class_cp(x, b))))
                break;
            any = 1;
        }
    }
    if (!rc)
        rc = put(x, "]");
    x->out = out;
    (void)saved;
    if (!rc) {
        int alts = any + quote + bslash;
        if (!alts)
            rc = unsupported(x, "a class of control characters only");
        else if (alts > 1)
            rc = put(x, "( ");
        int sep = 0;
        if (!rc && any) {
            rc = mf_buf_append(x->out, cls.data, cls.len, x->err);
            sep = 1;
        }
        if (!rc && quote) {
            rc = put(x, sep ? " | \"\\\\\\\"\"" : "\"\\\\\\\"\"");
            sep = 1;
        }
        if (!rc && bslash)
            rc = put(x, sep ? " | \"\\\\\\\\\"" : "\"\\\\\\\\\"");
        if (!rc && alts > 1)
            rc = put(x, " )");
    }
    mf_buf_free(&cls);
    return rc;
}

static int parse_alt(struct rx *x);

static int read_count(struct rx *x, long *v)
{
    long n = 0;
    const char *s = x->p;
    while (x->p < x->end && *x->p >= '0' && *x->p <= '9') {
        n = n * 10 + (*x->p - '0');
        if (n > GRAM_MAX_REPEAT)
            return unsupported(x, "a repetition count above 10000");
        x->p++;
    }
    *v = x->p == s ? -1 : n;
    return 0;
}

static int parse_quant(struct rx *x)
{
    int rc = 0;
    if (x->p >= x->end)
        return 0;
    char c = *x->p;
    if (c == '*' || c == '+' || c == '?') {
        x->p++;
        rc = mf_buf_putc(x->out, c, x->err);
    } else if (c == '{') {
        const char *save = x->p;
        long m, n;
        x->p++;
        if ((rc = read_count(x, &m)))
            return rc;
        if (m < 0) { /* a literal '{' in ECMA's Annex B; take it as unsupported */
            x->p = save;
            return unsupported(x, "a '{' that is not a repetition");
        }
        n = m;
        if (x->p < x->end && *x->p == ',') {
            x->p++;
            if ((rc = read_count(x, &n)))
                return rc;
        }
        if (x->p >= x->end || *x->p != '}')
            return bad(x, "unterminated {m,n}");
        x->p++;
        if (n >= 0 && n < m)
            return bad(x, "{m,n} with n < m");
        rc = n < 0 ? mf_buf_printf(x->out, x->err, "{%ld,}", m)
                   : mf_buf_printf(x->out, x->err, "{%ld,%ld}", m, n);
    } else {
        return 0;
    }
    if (!rc && x->p < x->end && (*x->p == '*' || *x->p == '+' || *x->p == '{'))
        return unsupported(x, "a repetition of a repetition");
    if (!rc && x->p < x->end && *x->p == '?')
        x->p++; /* lazy: same language */
    return rc;
}

static int parse_seq(struct rx *x)
{
    int rc = 0, items = 0;
    while (!rc && x->p < x->end && *x->p != '|' && *x->p != ')') {
        char c = *x->p;
        if (items++ && (rc = put(x, " ")))
            break;
        if (c == '(') {
            x->p++;
            if (x->end - x->p >= 2 && x->p[0] == '?') {
                if (x->p[1] != ':')
                    return unsupported(x, "a lookaround or named group");
                x->p += 2;
            }
            if (++x->depth > MAX_NEST)
                return unsupported(x, "nesting deeper than 64");
            if ((rc = put(x, "( ")) || (rc = parse_alt(x)))
                return rc;
            x->depth--;
            if (x->p >= x->end || *x->p != ')')
                return bad(x, "unbalanced '('");
            x->p++;
            rc = put(x, " )");
        } else if (c == '[') {
            rc = parse_class(x);
        } else if (c == '.') {
            x->p++;
            rc = put(x, "[^\"\\\\\\x00-\\x1F\\x7F]");
        } else if (c == '^' || c == '$') {
            return unsupported(x, "an anchor inside the pattern");
        } else if (c == '*' || c == '+' || c == '?' || c == '{') {
            return bad(x, "a repetition with nothing before it");
        } else if (c == '\\') {
            x->p++;
            const char *ce = x->p < x->end ? class_escape(*x->p) : NULL;
            uint32_t cp;
            if (ce) {
                x->p++;
                rc = put(x, ce);
            } else if (!(rc = escape_cp(x, &cp))) {
                rc = put_cp(x, cp);
            }
        } else {
            uint32_t cp;
            if (!(rc = read_cp(x, &cp)))
                rc = put_cp(x, cp);
        }
        if (!rc)
            rc = parse_quant(x);
    }
    if (!rc && !items)
        rc = put(x, "\"\"");
    return rc;
}

static int parse_alt(struct rx *x)
{
    int rc = parse_seq(x);
    while (!rc && x->p < x->end && *x->p == '|') {
        x->p++;
        if ((rc = put(x, " | ")))
            break;
        rc = parse_seq(x);
    }
    return rc;
}

int gram_regex_gbnf(const char *re, const char *name, struct mf_buf *out, struct mf_err *err)
{
    struct rx x = {.re = re, .p = re, .end = re + strlen(re), .out = out, .err = err};
    int head = 0, tail = 0, rc;
    if (x.p < x.end && *x.p == '^') {
        head = 1;
        x.p++;
    }
    if (x.end > x.p && x.end[-1] == '$' && (x.end - x.p < 2 || x.end[-2] != '\\')) {
        tail = 1;
        x.end--;
    }
    rc = mf_buf_printf(out, err, "%s ::= %s( ", name, head ? "" : "char* ");
    if (!rc)
        rc = parse_alt(&x);
    if (!rc && x.p < x.end)
        rc = bad(&x, "unbalanced ')'");
    if (!rc)
        rc = mf_buf_printf(out, err, " )%s\n", tail ? "" : " char*");
    return rc;
}
