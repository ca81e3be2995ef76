/*
 * gram_gbnf.c: the GBNF parser (llama.cpp's grammar syntax) into the
 * byte-level rules of gram_int.h.
 *
 * Syntax: `name ::= alternatives`, alternatives split by `|`, sequences of
 * "literals", [classes] (ranges, ^ negation, escapes), `.` (any character),
 * (groups), rule names, each optionally followed by * + ? {m} {m,} {m,n}
 * {,n}; `#` comments to the end of the line; a rule ends at a newline
 * unless inside parentheses or right after `|`. Escapes: \n \r \t \\ \" \[
 * \] \- \^ \/ \xHH \uHHHH \UHHHHHHHH (a code point, written as UTF-8).
 *
 * Checks after parsing: every referenced rule is defined, "root" exists,
 * and no rule can reach itself without consuming a byte (left recursion,
 * which a top-down matcher would loop on). Every input byte is read
 * through the bounds of [p, end); sizes are capped by gram.h's limits.
 */
#include <stdlib.h>
#include <string.h>

#include "runtime/grammar/gram.h"
#include "runtime/grammar/gram_int.h"

struct prule {
    char *name; /* owned; NULL for helper rules */
    struct gel *el;
    uint32_t n, cap;
    int defined;
    uint32_t rep_k; /* a bounded repetition's helper O_k (see repeat), else 0 */
};

struct parser {
    const char *src, *p, *end;
    struct prule *rules;
    uint32_t n_rules, cap_rules;
    uint32_t (*sets)[8];
    uint32_t n_sets, cap_sets;
    size_t total;      /* elements so far */
    uint32_t any_rule; /* the `.` rule, UINT32_MAX until made */
    int depth;
    struct mf_err *err;
};

/* line and column of p, for messages */
static int fail(struct parser *ps, const char *p, const char *msg)
{
    int line = 1, col = 1;
    for (const char *q = ps->src; q < p && q < ps->end; q++) {
        if (*q == '\n') {
            line++;
            col = 1;
        } else {
            col++;
        }
    }
    return mf_err_set(ps->err, MF_EINVAL, "grammar: line %d, column %d: %s", line, col, msg);
}

static int oom(struct parser *ps)
{
    return mf_err_set(ps->err, MF_ENOMEM, "grammar: more than %u elements or out of memory",
                      GRAM_MAX_ELEMENTS);
}

static int grow(void **v, uint32_t *cap, uint32_t need, size_t size)
{
    if (need <= *cap)
        return 0;
    uint32_t c = *cap ? *cap : 8;
    while (c < need)
        c *= 2;
    void *n = realloc(*v, (size_t)c * size);
    if (!n)
        return -1;
    *v = n;
    *cap = c;
    return 0;
}

static int new_rule(struct parser *ps, const char *name, size_t len, uint32_t *id)
{
    if (ps->n_rules >= GRAM_MAX_ELEMENTS ||
        grow((void **)&ps->rules, &ps->cap_rules, ps->n_rules + 1, sizeof *ps->rules))
        return oom(ps);
    struct prule *r = &ps->rules[ps->n_rules];
    memset(r, 0, sizeof *r);
    if (name) {
        r->name = malloc(len + 1);
        if (!r->name)
            return oom(ps);
        memcpy(r->name, name, len);
        r->name[len] = 0;
    }
    *id = ps->n_rules++;
    return 0;
}

static int rule_by_name(struct parser *ps, const char *name, size_t len, uint32_t *id)
{
    for (uint32_t i = 0; i < ps->n_rules; i++) {
        const char *n = ps->rules[i].name;
        if (n && strlen(n) == len && memcmp(n, name, len) == 0) {
            *id = i;
            return 0;
        }
    }
    return new_rule(ps, name, len, id);
}

static int emit(struct parser *ps, uint32_t rule, uint32_t kind, uint32_t v)
{
    struct prule *r = &ps->rules[rule];
    if (ps->total >= GRAM_MAX_ELEMENTS || grow((void **)&r->el, &r->cap, r->n + 1, sizeof *r->el))
        return oom(ps);
    r->el[r->n++] = (struct gel){kind, v};
    ps->total++;
    return 0;
}

static int add_set(struct parser *ps, const uint32_t set[8], uint32_t *idx)
{
    for (uint32_t i = 0; i < ps->n_sets; i++) {
        if (memcmp(ps->sets[i], set, 32) == 0) {
            *idx = i;
            return 0;
        }
    }
    if (ps->n_sets >= GRAM_MAX_ELEMENTS ||
        grow((void **)&ps->sets, &ps->cap_sets, ps->n_sets + 1, sizeof *ps->sets))
        return oom(ps);
    memcpy(ps->sets[ps->n_sets], set, 32);
    *idx = ps->n_sets++;
    return 0;
}

static int emit_range(struct parser *ps, uint32_t rule, unsigned lo, unsigned hi)
{
    uint32_t set[8] = {0}, idx;
    for (unsigned b = lo; b <= hi; b++)
        set[b >> 5] |= 1u << (b & 31);
    int rc = add_set(ps, set, &idx);
    return rc ? rc : emit(ps, rule, GEL_SET, idx);
}

/* ---- lexical ---------------------------------------------------------- */

static int is_word(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_';
}

static void skip_space(struct parser *ps, int newline_ok)
{
    while (ps->p < ps->end) {
        char c = *ps->p;
        if (c == '#') {
            while (ps->p < ps->end && *ps->p != '\n')
                ps->p++;
        } else if (c == ' ' || c == '\t' || c == '\r' || (newline_ok && c == '\n')) {
            ps->p++;
        } else {
            break;
        }
    }
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* One code point of a literal or class at ps->p: UTF-8 or an escape. */
static int read_char(struct parser *ps, uint32_t *cp)
{
    const unsigned char *p = (const unsigned char *)ps->p, *end = (const unsigned char *)ps->end;
    if (p >= end)
        return fail(ps, ps->p, "unexpected end of input");
    if (*p == '\\') {
        if (p + 1 >= end)
            return fail(ps, ps->p, "unexpected end of input after '\\'");
        int n = 0;
        switch (p[1]) {
        case 'n':
            *cp = '\n';
            break;
        case 'r':
            *cp = '\r';
            break;
        case 't':
            *cp = '\t';
            break;
        case '\\':
        case '"':
        case '[':
        case ']':
        case '-':
        case '^':
        case '/':
        case '\'':
            *cp = p[1];
            break;
        case 'x':
            n = 2;
            break;
        case 'u':
            n = 4;
            break;
        case 'U':
            n = 8;
            break;
        default:
            return fail(ps, ps->p, "unknown escape");
        }
        if (n) {
            uint32_t v = 0;
            if (end - p < 2 + n)
                return fail(ps, ps->p, "escape cut short");
            for (int i = 0; i < n; i++) {
                int h = hexval((char)p[2 + i]);
                if (h < 0)
                    return fail(ps, ps->p, "bad hex digit in escape");
                v = v * 16 + (uint32_t)h;
            }
            if (v > 0x10FFFF)
                return fail(ps, ps->p, "code point above U+10FFFF");
            *cp = v;
        }
        ps->p += 2 + n;
        return 0;
    }
    /* UTF-8 */
    int len = *p < 0x80 ? 1 : (*p >> 5) == 6 ? 2 : (*p >> 4) == 14 ? 3 : (*p >> 3) == 30 ? 4 : 0;
    if (!len || end - p < len)
        return fail(ps, ps->p, "invalid UTF-8");
    uint32_t v = len == 1 ? *p : len == 2 ? (*p & 0x1Fu) : len == 3 ? (*p & 0x0Fu) : (*p & 0x07u);
    for (int i = 1; i < len; i++) {
        if ((p[i] & 0xC0) != 0x80)
            return fail(ps, ps->p, "invalid UTF-8");
        v = (v << 6) | (p[i] & 0x3Fu);
    }
    static const uint32_t min[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (v < min[len] || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
        return fail(ps, ps->p, "invalid UTF-8");
    *cp = v;
    ps->p += len;
    return 0;
}

static int utf8_encode(uint32_t cp, unsigned char *b)
{
    if (cp < 0x80) {
        b[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        b[0] = (unsigned char)(0xC0 | (cp >> 6));
        b[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        b[0] = (unsigned char)(0xE0 | (cp >> 12));
        b[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        b[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    b[0] = (unsigned char)(0xF0 | (cp >> 18));
    b[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    b[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    b[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

/* ---- character classes ------------------------------------------------- */

struct range {
    uint32_t lo, hi;
};

struct ranges {
    struct range *v;
    uint32_t n, cap;
};

static int cmp_range(const void *a, const void *b)
{
    const struct range *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Sorts and merges; with neg, complements within the scalar values. */
static int normalize(struct ranges *r, int neg)
{
    if (r->n)
        qsort(r->v, r->n, sizeof *r->v, cmp_range);
    uint32_t k = 0;
    for (uint32_t i = 0; i < r->n; i++) {
        if (k && r->v[i].lo <= r->v[k - 1].hi + 1) {
            if (r->v[i].hi > r->v[k - 1].hi)
                r->v[k - 1].hi = r->v[i].hi;
        } else {
            r->v[k++] = r->v[i];
        }
    }
    r->n = k;
    if (neg) {
        struct range *o = malloc((size_t)(r->n + 1) * sizeof *o);
        uint32_t m = 0, next = 0;
        if (!o)
            return -1;
        for (uint32_t i = 0; i < r->n; i++) {
            if (r->v[i].lo > next)
                o[m++] = (struct range){next, r->v[i].lo - 1};
            next = r->v[i].hi + 1;
        }
        if (next <= 0x10FFFF)
            o[m++] = (struct range){next, 0x10FFFF};
        free(r->v);
        r->v = o;
        r->n = r->cap = m;
    }
    return 0;
}

/* Emits one alternative per UTF-8 byte-range sequence covering [lo, hi]
 * (same encoded length, each byte position a contiguous range). */
static int emit_utf8(struct parser *ps, uint32_t rule, uint32_t lo, uint32_t hi, int *first)
{
    static const uint32_t bound[4] = {0x7F, 0x7FF, 0xFFFF, 0x10FFFF};
    int rc;
    if (lo <= 0xDFFF && hi >= 0xD800) { /* surrogates are not scalar values */
        if (lo < 0xD800 && (rc = emit_utf8(ps, rule, lo, 0xD7FF, first)))
            return rc;
        return hi > 0xDFFF ? emit_utf8(ps, rule, 0xE000, hi, first) : 0;
    }
    for (int i = 0; i < 3; i++) {
        if (lo <= bound[i] && hi > bound[i]) {
            if ((rc = emit_utf8(ps, rule, lo, bound[i], first)))
                return rc;
            return emit_utf8(ps, rule, bound[i] + 1, hi, first);
        }
    }
    unsigned char a[4], b[4];
    int n = utf8_encode(lo, a);
    for (int i = 1; i < n; i++) {
        uint32_t m = (1u << (6 * i)) - 1;
        if ((lo & ~m) != (hi & ~m)) {
            if ((lo & m) != 0) {
                if ((rc = emit_utf8(ps, rule, lo, lo | m, first)))
                    return rc;
                return emit_utf8(ps, rule, (lo | m) + 1, hi, first);
            }
            if ((hi & m) != m) {
                if ((rc = emit_utf8(ps, rule, lo, (hi & ~m) - 1, first)))
                    return rc;
                return emit_utf8(ps, rule, hi & ~m, hi, first);
            }
        }
    }
    utf8_encode(hi, b);
    if (!*first && (rc = emit(ps, rule, GEL_ALT, 0)))
        return rc;
    *first = 0;
    for (int i = 0; i < n; i++) {
        if ((rc = emit_range(ps, rule, a[i], b[i])))
            return rc;
    }
    return 0;
}

/* Emits into rule the element matching one character of r: a byte set for
 * an ASCII-only class, else a reference to a helper rule. */
static int emit_class(struct parser *ps, uint32_t rule, const struct ranges *r)
{
    uint32_t ascii[8] = {0}, idx, sub;
    int any_ascii = 0, multi = 0, rc;
    for (uint32_t i = 0; i < r->n; i++) {
        for (uint32_t c = r->v[i].lo; c <= r->v[i].hi && c < 0x80; c++) {
            ascii[c >> 5] |= 1u << (c & 31);
            any_ascii = 1;
        }
        multi |= r->v[i].hi >= 0x80;
    }
    if (!multi) {
        if (!any_ascii)
            return fail(ps, ps->p, "empty character class");
        if ((rc = add_set(ps, ascii, &idx)))
            return rc;
        return emit(ps, rule, GEL_SET, idx);
    }
    if ((rc = new_rule(ps, NULL, 0, &sub)))
        return rc;
    int first = 1;
    if (any_ascii) {
        if ((rc = add_set(ps, ascii, &idx)) || (rc = emit(ps, sub, GEL_SET, idx)))
            return rc;
        first = 0;
    }
    for (uint32_t i = 0; i < r->n; i++) {
        uint32_t lo = r->v[i].lo < 0x80 ? 0x80 : r->v[i].lo;
        if (r->v[i].hi >= 0x80 && (rc = emit_utf8(ps, sub, lo, r->v[i].hi, &first)))
            return rc;
    }
    if ((rc = emit(ps, sub, GEL_END, 0)))
        return rc;
    ps->rules[sub].defined = 1;
    return emit(ps, rule, GEL_REF, sub);
}

static int push_range(struct parser *ps, struct ranges *r, uint32_t lo, uint32_t hi)
{
    if (grow((void **)&r->v, &r->cap, r->n + 1, sizeof *r->v))
        return oom(ps);
    r->v[r->n++] = (struct range){lo, hi};
    return 0;
}

static int parse_class(struct parser *ps, uint32_t rule)
{
    struct ranges r = {0};
    const char *open = ps->p;
    int neg = 0, rc = 0;
    ps->p++; /* '[' */
    if (ps->p < ps->end && *ps->p == '^') {
        neg = 1;
        ps->p++;
    }
    for (;;) {
        uint32_t lo, hi;
        if (ps->p >= ps->end) {
            rc = fail(ps, open, "unterminated character class");
            break;
        }
        if (*ps->p == ']') {
            ps->p++;
            break;
        }
        if ((rc = read_char(ps, &lo)))
            break;
        hi = lo;
        if (ps->p + 1 < ps->end && *ps->p == '-' && ps->p[1] != ']') {
            ps->p++;
            if ((rc = read_char(ps, &hi)))
                break;
            if (hi < lo) {
                rc = fail(ps, ps->p, "character range out of order");
                break;
            }
        }
        if ((rc = push_range(ps, &r, lo, hi)))
            break;
    }
    if (!rc && normalize(&r, neg))
        rc = oom(ps);
    if (!rc)
        rc = r.n ? emit_class(ps, rule, &r) : fail(ps, open, "empty character class");
    free(r.v);
    return rc;
}

static int emit_any(struct parser *ps, uint32_t rule)
{
    if (ps->any_rule == UINT32_MAX) {
        struct ranges r = {0};
        int rc = push_range(ps, &r, 0, 0x10FFFF);
        uint32_t before = ps->rules[rule].n;
        if (!rc)
            rc = emit_class(ps, rule, &r);
        free(r.v);
        if (rc)
            return rc;
        ps->any_rule = ps->rules[rule].el[before].v;
        return 0;
    }
    return emit(ps, rule, GEL_REF, ps->any_rule);
}

/* ---- repetition ---------------------------------------------------------- */

/* Copies the item el[from..from+n) of rule into rule dst. */
static int copy_item(struct parser *ps, uint32_t dst, const struct gel *item, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {
        int rc = emit(ps, dst, item[i].kind, item[i].v);
        if (rc)
            return rc;
    }
    return 0;
}

/* Replaces the last item of rule (elements from `from` on) by its
 * repetition {min, max} (max UINT32_MAX: unbounded). */
static int repeat(struct parser *ps, uint32_t rule, uint32_t from, uint32_t min, uint32_t max)
{
    struct prule *r = &ps->rules[rule];
    uint32_t n = r->n - from, sub;
    struct gel item;
    int rc;

    if (n == 0)
        return fail(ps, ps->p, "repetition with nothing before it");
    if (n == 1) {
        item = r->el[from];
    } else { /* wrap the item (a literal's bytes) in a helper rule */
        struct gel *copy = malloc(n * sizeof *copy);
        if (!copy)
            return oom(ps);
        memcpy(copy, r->el + from, n * sizeof *copy);
        if ((rc = new_rule(ps, NULL, 0, &sub)) || (rc = copy_item(ps, sub, copy, n)) ||
            (rc = emit(ps, sub, GEL_END, 0))) {
            free(copy);
            return rc;
        }
        free(copy);
        ps->rules[sub].defined = 1;
        item = (struct gel){GEL_REF, sub};
    }
    ps->total -= n;
    ps->rules[rule].n = from;
    for (uint32_t i = 0; i < min; i++) {
        if ((rc = emit(ps, rule, item.kind, item.v)))
            return rc;
    }
    if (max == UINT32_MAX) { /* R ::= item R | empty */
        if ((rc = new_rule(ps, NULL, 0, &sub)) || (rc = emit(ps, sub, item.kind, item.v)) ||
            (rc = emit(ps, sub, GEL_REF, sub)) || (rc = emit(ps, sub, GEL_ALT, 0)) ||
            (rc = emit(ps, sub, GEL_END, 0)))
            return rc;
        ps->rules[sub].defined = 1;
        return emit(ps, rule, GEL_REF, sub);
    }
    /* O_1 ::= item | empty; O_k ::= item O_{k-1} | empty */
    uint32_t prev = UINT32_MAX;
    for (uint32_t k = 1; k <= max - min; k++) {
        if ((rc = new_rule(ps, NULL, 0, &sub)) || (rc = emit(ps, sub, item.kind, item.v)))
            return rc;
        if (prev != UINT32_MAX && (rc = emit(ps, sub, GEL_REF, prev)))
            return rc;
        if ((rc = emit(ps, sub, GEL_ALT, 0)) || (rc = emit(ps, sub, GEL_END, 0)))
            return rc;
        ps->rules[sub].defined = 1;
        ps->rules[sub].rep_k = k; /* O_k is rule O_1 + k - 1, all alike from O_2 on */
        prev = sub;
    }
    return prev == UINT32_MAX ? 0 : emit(ps, rule, GEL_REF, prev);
}

static int read_uint(struct parser *ps, uint32_t *v)
{
    uint64_t x = 0;
    const char *start = ps->p;
    while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9') {
        x = x * 10 + (uint64_t)(*ps->p - '0');
        if (x > GRAM_MAX_REPEAT)
            return fail(ps, start, "repetition count above 10000");
        ps->p++;
    }
    if (ps->p == start)
        return 1; /* no number */
    *v = (uint32_t)x;
    return 0;
}

static int parse_braces(struct parser *ps, uint32_t rule, uint32_t from)
{
    const char *open = ps->p;
    uint32_t min = 0, max;
    int rc;
    ps->p++;
    skip_space(ps, 1);
    rc = read_uint(ps, &min);
    if (rc < 0)
        return rc;
    skip_space(ps, 1);
    if (ps->p < ps->end && *ps->p == ',') {
        ps->p++;
        skip_space(ps, 1);
        int r2 = read_uint(ps, &max);
        if (r2 < 0)
            return r2;
        if (r2 == 1)
            max = UINT32_MAX;
    } else {
        if (rc == 1)
            return fail(ps, open, "expected a number in {}");
        max = min;
    }
    skip_space(ps, 1);
    if (ps->p >= ps->end || *ps->p != '}')
        return fail(ps, open, "expected '}'");
    ps->p++;
    if (max < min)
        return fail(ps, open, "repetition {m,n} with n < m");
    return repeat(ps, rule, from, min, max);
}

/* ---- structure ------------------------------------------------------------ */

static int parse_alternates(struct parser *ps, uint32_t rule, int nested);

static int parse_sequence(struct parser *ps, uint32_t rule, int nested)
{
    uint32_t last = UINT32_MAX; /* start of the last item */
    int rc;
    for (;;) {
        skip_space(ps, nested);
        if (ps->p >= ps->end)
            return 0;
        char c = *ps->p;
        uint32_t here = ps->rules[rule].n;
        if (c == '"') {
            const char *open = ps->p++;
            for (;;) {
                uint32_t cp;
                unsigned char b[4];
                if (ps->p >= ps->end)
                    return fail(ps, open, "unterminated string literal");
                if (*ps->p == '"') {
                    ps->p++;
                    break;
                }
                if ((rc = read_char(ps, &cp)))
                    return rc;
                int n = utf8_encode(cp, b);
                for (int i = 0; i < n; i++) {
                    if ((rc = emit_range(ps, rule, b[i], b[i])))
                        return rc;
                }
            }
            last = here;
        } else if (c == '[') {
            if ((rc = parse_class(ps, rule)))
                return rc;
            last = here;
        } else if (c == '.') {
            ps->p++;
            if ((rc = emit_any(ps, rule)))
                return rc;
            last = here;
        } else if (c == '(') {
            const char *open = ps->p++;
            uint32_t sub;
            if (++ps->depth > 256)
                return fail(ps, open, "groups nested deeper than 256");
            if ((rc = new_rule(ps, NULL, 0, &sub)) || (rc = parse_alternates(ps, sub, 1)))
                return rc;
            ps->depth--;
            skip_space(ps, 1);
            if (ps->p >= ps->end || *ps->p != ')')
                return fail(ps, open, "expected ')'");
            ps->p++;
            ps->rules[sub].defined = 1;
            if ((rc = emit(ps, rule, GEL_REF, sub)))
                return rc;
            last = here;
        } else if (is_word(c)) {
            const char *name = ps->p;
            uint32_t id;
            while (ps->p < ps->end && is_word(*ps->p))
                ps->p++;
            /* a name followed by ::= starts the next rule */
            const char *save = ps->p;
            skip_space(ps, 0);
            if (ps->end - ps->p >= 3 && memcmp(ps->p, "::=", 3) == 0) {
                if (nested)
                    return fail(ps, name, "rule definition inside a group");
                ps->p = name;
                return 0;
            }
            ps->p = save;
            if ((rc = rule_by_name(ps, name, (size_t)(save - name), &id)) ||
                (rc = emit(ps, rule, GEL_REF, id)))
                return rc;
            last = here;
        } else if (c == '*' || c == '+' || c == '?') {
            if (last == UINT32_MAX)
                return fail(ps, ps->p, "repetition with nothing before it");
            ps->p++;
            if ((rc = repeat(ps, rule, last, c == '+', c == '?' ? 1 : UINT32_MAX)))
                return rc;
            last = UINT32_MAX;
        } else if (c == '{') {
            if (last == UINT32_MAX)
                return fail(ps, ps->p, "repetition with nothing before it");
            if ((rc = parse_braces(ps, rule, last)))
                return rc;
            last = UINT32_MAX;
        } else if (c == '|' || c == ')' || c == '\n') {
            return 0;
        } else {
            return fail(ps, ps->p, "unexpected character");
        }
    }
}

static int parse_alternates(struct parser *ps, uint32_t rule, int nested)
{
    int rc = parse_sequence(ps, rule, nested);
    while (!rc) {
        skip_space(ps, nested);
        if (ps->p >= ps->end || *ps->p != '|')
            break;
        ps->p++;
        skip_space(ps, 1);
        if ((rc = emit(ps, rule, GEL_ALT, 0)))
            return rc;
        rc = parse_sequence(ps, rule, nested);
    }
    return rc ? rc : emit(ps, rule, GEL_END, 0);
}

static int parse_rule(struct parser *ps)
{
    const char *name = ps->p;
    uint32_t id;
    int rc;
    while (ps->p < ps->end && is_word(*ps->p))
        ps->p++;
    if (ps->p == name)
        return fail(ps, ps->p, "expected a rule name");
    size_t len = (size_t)(ps->p - name);
    skip_space(ps, 0);
    if (ps->end - ps->p < 3 || memcmp(ps->p, "::=", 3) != 0)
        return fail(ps, ps->p, "expected '::='");
    ps->p += 3;
    if ((rc = rule_by_name(ps, name, len, &id)))
        return rc;
    if (ps->rules[id].defined)
        return fail(ps, name, "rule defined twice");
    ps->rules[id].defined = 1;
    skip_space(ps, 1);
    return parse_alternates(ps, id, 0);
}

/* ---- checks ----------------------------------------------------------------- */

/* Which rules can match the empty string (fixpoint). */
static void find_nullable(const struct parser *ps, uint8_t *nul)
{
    int changed = 1;
    while (changed) {
        changed = 0;
        for (uint32_t r = 0; r < ps->n_rules; r++) {
            if (nul[r])
                continue;
            const struct prule *pr = &ps->rules[r];
            int ok = 1;
            for (uint32_t i = 0; i < pr->n; i++) {
                const struct gel *e = &pr->el[i];
                if (e->kind == GEL_ALT || e->kind == GEL_END) {
                    if (ok) {
                        nul[r] = 1;
                        changed = 1;
                        break;
                    }
                    ok = 1;
                } else if (e->kind == GEL_SET || !nul[e->v]) {
                    ok = 0;
                }
            }
        }
    }
}

/* DFS over "r may start with s" edges; 1: a cycle through r. */
static int left_cycle(const struct parser *ps, const uint8_t *nul, uint32_t r, uint8_t *mark)
{
    if (mark[r] == 1)
        return 1;
    if (mark[r] == 2)
        return 0;
    mark[r] = 1;
    const struct prule *pr = &ps->rules[r];
    int lead = 1; /* everything before this element is nullable */
    for (uint32_t i = 0; i < pr->n; i++) {
        const struct gel *e = &pr->el[i];
        if (e->kind == GEL_ALT || e->kind == GEL_END) {
            lead = 1;
        } else if (lead && e->kind == GEL_REF) {
            if (left_cycle(ps, nul, e->v, mark))
                return 1;
            lead = nul[e->v];
        } else {
            lead = 0;
        }
    }
    mark[r] = 2;
    return 0;
}

static int check(struct parser *ps, uint32_t *root)
{
    int have_root = 0;
    for (uint32_t r = 0; r < ps->n_rules; r++) {
        if (!ps->rules[r].defined)
            return mf_err_set(ps->err, MF_EINVAL, "grammar: rule '%s' is used but not defined",
                              ps->rules[r].name ? ps->rules[r].name : "?");
        if (ps->rules[r].name && strcmp(ps->rules[r].name, "root") == 0) {
            *root = r;
            have_root = 1;
        }
    }
    if (!have_root)
        return mf_err_set(ps->err, MF_EINVAL, "grammar: no rule named 'root'");
    uint8_t *nul = calloc(ps->n_rules, 1), *mark = calloc(ps->n_rules, 1);
    int rc = 0;
    if (!nul || !mark) {
        rc = oom(ps);
    } else {
        find_nullable(ps, nul);
        for (uint32_t r = 0; r < ps->n_rules && !rc; r++) {
            /* recursion depth is bounded by the rule count; an iterative DFS
               would only matter past GRAM_MAX_ELEMENTS rules */
            if (!mark[r] && left_cycle(ps, nul, r, mark)) {
                const char *name = NULL;
                for (uint32_t k = 0; k < ps->n_rules && !name; k++)
                    if (mark[k] == 1 && ps->rules[k].name)
                        name = ps->rules[k].name;
                rc = mf_err_set(ps->err, MF_EINVAL,
                                "grammar: left recursion through rule '%s' (a rule that can "
                                "reach itself before matching any character)",
                                name ? name : "(a group)");
            }
        }
    }
    free(nul);
    free(mark);
    return rc;
}

static void free_parser(struct parser *ps)
{
    for (uint32_t i = 0; i < ps->n_rules; i++) {
        free(ps->rules[i].name);
        free(ps->rules[i].el);
    }
    free(ps->rules);
    free(ps->sets);
}

int gram_rules_parse(const char *src, size_t len, struct gram_rules *out, struct mf_err *err)
{
    struct parser ps = {.src = src, .p = src, .end = src + len, .any_rule = UINT32_MAX, .err = err};
    int rc = 0;

    memset(out, 0, sizeof *out);
    if (len > GRAM_MAX_SOURCE)
        return mf_err_set(err, MF_EINVAL, "grammar: longer than %u bytes", GRAM_MAX_SOURCE);
    for (;;) {
        skip_space(&ps, 1);
        if (ps.p >= ps.end)
            break;
        if ((rc = parse_rule(&ps)))
            break;
        skip_space(&ps, 0);
        if (ps.p < ps.end && *ps.p != '\n') {
            rc = fail(&ps, ps.p, "unexpected character after a rule");
            break;
        }
    }
    if (!rc)
        rc = check(&ps, &out->root);
    if (!rc) { /* flatten */
        out->start = malloc(((size_t)ps.n_rules + 1) * sizeof *out->start);
        out->rep_k = malloc(((size_t)ps.n_rules + 1) * sizeof *out->rep_k);
        out->rule_of = malloc((ps.total + 1) * sizeof *out->rule_of);
        out->el = malloc((ps.total + 1) * sizeof *out->el);
        if (!out->start || !out->el || !out->rep_k || !out->rule_of) {
            rc = oom(&ps);
        } else {
            uint32_t k = 0;
            for (uint32_t r = 0; r < ps.n_rules; r++) {
                out->start[r] = k;
                out->rep_k[r] = ps.rules[r].rep_k;
                memcpy(out->el + k, ps.rules[r].el, ps.rules[r].n * sizeof *out->el);
                for (uint32_t i = 0; i < ps.rules[r].n; i++)
                    out->rule_of[k + i] = r;
                k += ps.rules[r].n;
            }
            out->n_el = k;
            out->n_rules = ps.n_rules;
            out->sets = ps.sets;
            out->n_sets = ps.n_sets;
            ps.sets = NULL;
        }
    }
    free_parser(&ps);
    if (rc)
        gram_rules_free(out);
    return rc;
}

void gram_rules_free(struct gram_rules *r)
{
    free(r->el);
    free(r->start);
    free(r->rep_k);
    free(r->rule_of);
    free(r->sets);
    memset(r, 0, sizeof *r);
}
