/*
 * template_funcs.c: the built-in functions of templates (Go's text/template
 * funcs.go: not len index slice eq ne lt le gt ge print printf println) and
 * Ollama's json. and/or live in the executor, which short-circuits them.
 *
 * Each function takes evaluated arguments (borrowed) and returns a new
 * reference. Comparison follows Go: basic kinds (string, int, bool) compare
 * by value, a nil operand compares unequal to anything but nil, other
 * mixtures are "incompatible types", lists and maps are not comparable and
 * structs compare by identity (Ollama passes messages as pointers).
 * printf implements the verbs templates use (%v %s %q %d %x %X %o %b %c %t
 * %U %%) with flags, width and precision, and Go's %!verb(type=value)
 * complaints; floats do not exist here.
 */
#include "text/template_int.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "common/utf8.h"

struct call {
    char *msg; /* where the error sentence goes */
    size_t msg_size;
    size_t left;  /* bytes the result may still build */
    size_t *used; /* bytes built */
};

static int fail(struct call *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(struct call *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->msg, c->msg_size, fmt, ap);
    va_end(ap);
    return MF_EINVAL;
}

static int out_of_memory(struct call *c)
{
    snprintf(c->msg, c->msg_size,
             "intermediate values exceed the scratch limit (or memory ran out)");
    return MF_ENOMEM;
}

/* Adopts a built buffer as the string result. */
static int take_buf(struct call *c, struct mf_buf *b, struct tmpl_value **out)
{
    size_t n = b->len;
    char *s = mf_buf_take(b);
    *c->used += n;
    *out = s ? tmpl_value_take_str(s, n) : NULL;
    return *out ? 0 : out_of_memory(c);
}

/* ---- comparison ----------------------------------------------------------- */

enum cls { C_NIL, C_STR, C_INT, C_BOOL, C_OTHER };

static enum cls cls(const struct tmpl_value *v)
{
    if (!v || v->kind == TMPL_NIL)
        return C_NIL;
    switch (v->kind) {
    case TMPL_STRING:
        return C_STR;
    case TMPL_INT:
        return C_INT;
    case TMPL_BOOL:
        return C_BOOL;
    default:
        return C_OTHER;
    }
}

static int eq2(struct call *c, const struct tmpl_value *a, const struct tmpl_value *b, int *truth)
{
    enum cls ka = cls(a), kb = cls(b);
    *truth = 0;
    if (ka != kb)
        return ka == C_NIL || kb == C_NIL ? 0 : fail(c, "incompatible types for comparison");
    switch (ka) {
    case C_NIL:
        *truth = 1;
        return 0;
    case C_STR:
        *truth = a->n == b->n && memcmp(a->s, b->s, a->n) == 0;
        return 0;
    case C_INT:
    case C_BOOL:
        *truth = a->i == b->i;
        return 0;
    case C_OTHER:
        break;
    }
    if (a->kind == TMPL_STRUCT && b->kind == TMPL_STRUCT) {
        *truth = a == b;
        return 0;
    }
    const struct tmpl_value *bad = a->kind == TMPL_STRUCT ? b : a;
    struct mf_buf text;
    struct mf_err err;
    mf_buf_init(&text, 64);
    tmpl_value_print(&text, bad, 0, &err); /* cut at 64 bytes is fine here */
    int rc =
        fail(c, "non-comparable type %s: %s", text.data ? text.data : "", tmpl_value_type(bad));
    mf_buf_free(&text);
    return rc;
}

static int lt2(struct call *c, const struct tmpl_value *a, const struct tmpl_value *b, int *truth)
{
    enum cls ka = cls(a), kb = cls(b);
    *truth = 0;
    if (ka == C_NIL || ka == C_OTHER || kb == C_NIL || kb == C_OTHER)
        return fail(c, "invalid type for comparison");
    if (ka != kb)
        return fail(c, "incompatible types for comparison");
    if (ka == C_BOOL)
        return fail(c, "invalid type for comparison");
    if (ka == C_INT) {
        *truth = a->i < b->i;
    } else {
        size_t n = a->n < b->n ? a->n : b->n;
        int d = memcmp(a->s, b->s, n);
        *truth = d < 0 || (d == 0 && a->n < b->n);
    }
    return 0;
}

static int compare(struct call *c, int fn, struct tmpl_value **a, size_t na, int *truth)
{
    int rc = 0, t = 0;
    switch (fn) {
    case FN_EQ:
        if (na < 2)
            return fail(c, "missing argument for comparison");
        for (size_t i = 1; i < na && !rc && !t; i++)
            rc = eq2(c, a[0], a[i], &t);
        *truth = t;
        return rc;
    case FN_NE:
        rc = eq2(c, a[0], a[1], &t);
        *truth = !t;
        return rc;
    case FN_LT:
    case FN_GE:
        rc = lt2(c, a[0], a[1], &t);
        *truth = fn == FN_LT ? t : !t;
        return rc;
    default: /* le, gt */
        rc = lt2(c, a[0], a[1], &t);
        if (!rc && !t)
            rc = eq2(c, a[0], a[1], &t);
        *truth = fn == FN_LE ? t : !t;
        return rc;
    }
}

/* ---- len, index, slice -------------------------------------------------------- */

static int fn_len(struct call *c, const struct tmpl_value *v, struct tmpl_value **out)
{
    int64_t n;
    if (!v || v->kind == TMPL_NIL)
        return fail(c, "len of nil pointer");
    switch (v->kind) {
    case TMPL_STRING:
        n = (int64_t)v->n;
        break;
    case TMPL_LIST:
    case TMPL_MAP:
        n = (int64_t)v->len;
        break;
    default:
        return fail(c, "len of type %s", tmpl_value_type(v));
    }
    *out = tmpl_value_int(n);
    return *out ? 0 : out_of_memory(c);
}

/* Go's indexArg: an int in [0, cap]. */
static int index_arg(struct call *c, const struct tmpl_value *i, size_t cap, int64_t *x)
{
    if (!i || i->kind == TMPL_NIL)
        return fail(c, "cannot index slice/array with nil");
    if (i->kind != TMPL_INT)
        return fail(c, "cannot index slice/array with type %s", tmpl_value_type(i));
    if (i->i < 0 || (uint64_t)i->i > cap)
        return fail(c, "index out of range: %" PRId64, i->i);
    *x = i->i;
    return 0;
}

static int fn_index(struct call *c, struct tmpl_value **a, size_t na, struct tmpl_value **out)
{
    struct tmpl_value *item = a[0];
    struct tmpl_value *byte = NULL; /* a string's byte, once indexed */
    if (!item || item->kind == TMPL_NIL)
        return fail(c, "index of untyped nil");
    for (size_t k = 1; k < na; k++) {
        const struct tmpl_value *i = a[k];
        int64_t x = 0;
        int rc;
        if (byte) {
            tmpl_value_unref(byte);
            return fail(c, "can't index item of type uint8");
        }
        switch (item->kind) {
        case TMPL_NIL:
            return fail(c, "index of nil pointer");
        case TMPL_LIST:
        case TMPL_STRING: {
            size_t len = item->kind == TMPL_LIST ? item->len : item->n;
            rc = index_arg(c, i, len, &x);
            if (!rc && (size_t)x == len)
                rc = fail(c, "index out of range: %" PRId64, x);
            if (rc)
                return rc;
            if (item->kind == TMPL_LIST)
                item = item->items[x];
            else if (!(byte = tmpl_value_int((unsigned char)item->s[x])))
                return out_of_memory(c);
            break;
        }
        case TMPL_MAP:
            if (!i || i->kind != TMPL_STRING)
                return fail(c, "value has type %s; should be string", tmpl_value_type(i));
            item = tmpl_value_get(item, i->s, i->n);
            if (!item)
                item = tmpl_value_nil();
            break;
        default:
            return fail(c, "can't index item of type %s", tmpl_value_type(item));
        }
    }
    *out = byte ? byte : tmpl_value_ref(item);
    return 0;
}

static int slice_result(struct call *c, const struct tmpl_value *item, const int64_t idx[3],
                        struct tmpl_value **out)
{
    size_t n = (size_t)(idx[1] - idx[0]);
    if (item->kind == TMPL_STRING) {
        if (n > c->left)
            return out_of_memory(c);
        *c->used += n;
        *out = tmpl_value_str(item->s + idx[0], n);
        return *out ? 0 : out_of_memory(c);
    }
    if (n * sizeof(void *) > c->left)
        return out_of_memory(c);
    *c->used += n * sizeof(void *);
    struct tmpl_value *l = tmpl_value_list();
    if (l && n && !(l->items = malloc(n * sizeof *l->items))) {
        tmpl_value_unref(l);
        l = NULL;
    }
    if (!l)
        return out_of_memory(c);
    for (size_t i = 0; i < n; i++)
        l->items[i] = tmpl_value_ref(item->items[idx[0] + (int64_t)i]);
    l->len = l->cap = n;
    *out = l;
    return 0;
}

static int fn_slice(struct call *c, struct tmpl_value **a, size_t na, struct tmpl_value **out)
{
    const struct tmpl_value *item = a[0];
    size_t n_idx = na - 1, cap;
    if (!item || item->kind == TMPL_NIL)
        return fail(c, "slice of untyped nil");
    if (n_idx > 3)
        return fail(c, "too many slice indexes: %zu", n_idx);
    if (item->kind == TMPL_STRING) {
        if (n_idx == 3)
            return fail(c, "cannot 3-index slice a string");
        cap = item->n;
    } else if (item->kind == TMPL_LIST) {
        cap = item->len;
    } else {
        return fail(c, "can't slice item of type %s", tmpl_value_type(item));
    }
    int64_t idx[3] = {0, (int64_t)cap, (int64_t)cap};
    for (size_t k = 0; k < n_idx; k++) {
        int rc = index_arg(c, a[k + 1], cap, &idx[k]);
        if (rc)
            return rc;
    }
    if (idx[0] > idx[1])
        return fail(c, "invalid slice index: %" PRId64 " > %" PRId64, idx[0], idx[1]);
    if (n_idx == 3 && idx[1] > idx[2])
        return fail(c, "invalid slice index: %" PRId64 " > %" PRId64, idx[1], idx[2]);
    return slice_result(c, item, idx, out);
}

/* ---- printf --------------------------------------------------------------------- */

struct spec {
    int minus, plus, sharp, space, zero; /* flags */
    int width;                           /* -1: none */
    int prec;                            /* -1: none */
};

static size_t rune_count(const char *s, size_t n)
{
    size_t r = 0;
    for (size_t i = 0; i < n; i++)
        r += ((unsigned char)s[i] & 0xC0) != 0x80;
    return r;
}

static int pad(struct mf_buf *b, const struct spec *sp, const char *s, size_t n, int numeric,
               struct mf_err *err)
{
    size_t runes = rune_count(s, n);
    size_t fill = sp->width > 0 && (size_t)sp->width > runes ? (size_t)sp->width - runes : 0;
    int rc = 0;
    if (sp->minus) {
        rc = mf_buf_append(b, s, n, err);
        while (!rc && fill--)
            rc = mf_buf_putc(b, ' ', err);
        return rc;
    }
    char fc = sp->zero ? '0' : ' ';
    if (fc == '0' && numeric && n && (s[0] == '-' || s[0] == '+' || s[0] == ' ')) {
        rc = mf_buf_putc(b, s[0], err); /* zeros go after the sign */
        s++;
        n--;
    }
    while (!rc && fill--)
        rc = mf_buf_putc(b, fc, err);
    return rc ? rc : mf_buf_append(b, s, n, err);
}

static char simple_escape(uint32_t cp)
{
    switch (cp) {
    case '\a':
        return 'a';
    case '\b':
        return 'b';
    case '\f':
        return 'f';
    case '\n':
        return 'n';
    case '\r':
        return 'r';
    case '\t':
        return 't';
    case '\v':
        return 'v';
    }
    return 0;
}

/* strconv.Quote, near enough: escapes, \x for bad bytes and controls. */
static int quote(struct mf_buf *b, const char *s, size_t n, char q, struct mf_err *err)
{
    int rc = mf_buf_putc(b, q, err);
    for (size_t i = 0; i < n && !rc;) {
        uint32_t cp;
        int k = mf_utf8_decode(s + i, n - i, &cp);
        if (k == 0) {
            rc = mf_buf_printf(b, err, "\\x%02x", (unsigned char)s[i]);
            k = 1;
        } else if (cp == (uint32_t)q || cp == '\\') {
            rc = mf_buf_printf(b, err, "\\%c", (char)cp);
        } else if (simple_escape(cp)) {
            rc = mf_buf_printf(b, err, "\\%c", simple_escape(cp));
        } else if (cp < 0x20 || cp == 0x7f) {
            rc = mf_buf_printf(b, err, "\\x%02x", (unsigned)cp);
        } else if (cp >= 0x80 && cp < 0xa0) {
            rc = mf_buf_printf(b, err, "\\u%04x", (unsigned)cp);
        } else {
            rc = mf_buf_append(b, s + i, (size_t)k, err);
        }
        i += (size_t)k;
    }
    return rc ? rc : mf_buf_putc(b, q, err);
}

static int fmt_int(struct mf_buf *b, const struct spec *sp, char verb, int64_t v,
                   struct mf_err *err)
{
    static const char lower[] = "0123456789abcdef", upper[] = "0123456789ABCDEF";
    unsigned base = verb == 'x' || verb == 'X' ? 16 : verb == 'o' ? 8 : verb == 'b' ? 2 : 10;
    const char *digits = verb == 'X' ? upper : lower;
    char tmp[96];
    size_t at = sizeof tmp;
    uint64_t mag = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    do
        tmp[--at] = digits[mag % base];
    while ((mag /= base) != 0);
    if (sp->sharp && base != 10) {
        const char *pre = base == 16 ? (verb == 'X' ? "0X" : "0x") : base == 8 ? "0" : "0b";
        for (size_t k = strlen(pre); k-- > 0;)
            tmp[--at] = pre[k];
    }
    if (v < 0)
        tmp[--at] = '-';
    else if (sp->plus)
        tmp[--at] = '+';
    else if (sp->space)
        tmp[--at] = ' ';
    return pad(b, sp, tmp + at, sizeof tmp - at, 1, err);
}

static int bad_verb(struct mf_buf *b, char verb, const struct tmpl_value *v, struct mf_err *err)
{
    if (!v || v->kind == TMPL_NIL)
        return mf_buf_printf(b, err, "%%!%c(<nil>)", verb);
    int rc = mf_buf_printf(b, err, "%%!%c(%s=", verb, tmpl_value_type(v));
    if (!rc)
        rc = tmpl_value_print(b, v, 0, err);
    return rc ? rc : mf_buf_putc(b, ')', err);
}

/* %v (and %s of composites): the value's text, padded. */
static int fmt_value(struct mf_buf *b, const struct spec *sp, const struct tmpl_value *v,
                     struct mf_err *err)
{
    struct mf_buf tmp;
    mf_buf_init(&tmp, b->max);
    int rc = tmpl_value_print(&tmp, v, 0, err);
    if (!rc)
        rc = pad(b, sp, tmp.data ? tmp.data : "", tmp.len, 0, err);
    mf_buf_free(&tmp);
    return rc;
}

static int fmt_string(struct mf_buf *b, const struct spec *sp, const struct tmpl_value *v,
                      struct mf_err *err)
{
    size_t n = v->n;
    if (sp->prec >= 0) { /* precision counts runes */
        size_t r = 0, i = 0;
        while (i < v->n && r < (size_t)sp->prec) {
            i++;
            while (i < v->n && ((unsigned char)v->s[i] & 0xC0) == 0x80)
                i++;
            r++;
        }
        n = i;
    }
    return pad(b, sp, v->s, n, 0, err);
}

static int fmt_quoted(struct mf_buf *b, const struct spec *sp, const struct tmpl_value *v,
                      struct mf_err *err)
{
    struct mf_buf tmp;
    char rune[4];
    mf_buf_init(&tmp, b->max);
    int rc;
    if (v->kind == TMPL_STRING) {
        rc = quote(&tmp, v->s, v->n, '"', err);
    } else {
        int k = v->i >= 0 && v->i <= 0x10FFFF ? mf_utf8_encode((uint32_t)v->i, rune) : 0;
        rc = k ? quote(&tmp, rune, (size_t)k, '\'', err) : mf_buf_puts(&tmp, "'\\ufffd'", err);
    }
    if (!rc)
        rc = pad(b, sp, tmp.data, tmp.len, 0, err);
    mf_buf_free(&tmp);
    return rc;
}

static int fmt_hex_string(struct mf_buf *b, const struct spec *sp, char verb,
                          const struct tmpl_value *v, struct mf_err *err)
{
    struct mf_buf tmp;
    mf_buf_init(&tmp, b->max);
    int rc = 0;
    for (size_t i = 0; i < v->n && !rc; i++)
        rc = mf_buf_printf(&tmp, err, verb == 'x' ? "%02x" : "%02X", (unsigned char)v->s[i]);
    if (!rc)
        rc = pad(b, sp, tmp.data ? tmp.data : "", tmp.len, 0, err);
    mf_buf_free(&tmp);
    return rc;
}

static int fmt_one(struct mf_buf *b, const struct spec *sp, char verb, const struct tmpl_value *v,
                   struct mf_err *err)
{
    enum tmpl_kind k = v ? v->kind : TMPL_NIL;
    char rune[4];
    if (verb == 'v' || (verb == 's' && (k == TMPL_LIST || k == TMPL_MAP || k == TMPL_STRUCT)))
        return fmt_value(b, sp, v, err);
    switch (verb) {
    case 's':
        return k == TMPL_STRING ? fmt_string(b, sp, v, err) : bad_verb(b, verb, v, err);
    case 'q':
        return k == TMPL_STRING || k == TMPL_INT ? fmt_quoted(b, sp, v, err)
                                                 : bad_verb(b, verb, v, err);
    case 'x':
    case 'X':
        if (k == TMPL_STRING)
            return fmt_hex_string(b, sp, verb, v, err);
        /* fall through */
    case 'd':
    case 'o':
    case 'b':
        return k == TMPL_INT ? fmt_int(b, sp, verb, v->i, err) : bad_verb(b, verb, v, err);
    case 'c': {
        if (k != TMPL_INT)
            return bad_verb(b, verb, v, err);
        int w = v->i >= 0 && v->i <= 0x10FFFF ? mf_utf8_encode((uint32_t)v->i, rune) : 0;
        return w ? pad(b, sp, rune, (size_t)w, 0, err) : pad(b, sp, "\xef\xbf\xbd", 3, 0, err);
    }
    case 't':
        return k == TMPL_BOOL ? pad(b, sp, v->i ? "true" : "false", v->i ? 4 : 5, 0, err)
                              : bad_verb(b, verb, v, err);
    case 'U':
        return k == TMPL_INT ? mf_buf_printf(b, err, "U+%04" PRIX64, (uint64_t)v->i)
                             : bad_verb(b, verb, v, err);
    default:
        return bad_verb(b, verb, v, err);
    }
}

/* Flags, width and precision after '%'; *i moves past them. */
static void parse_spec(const char *f, size_t n, size_t *i, struct spec *sp)
{
    *sp = (struct spec){.width = -1, .prec = -1};
    for (; *i < n; (*i)++) {
        char c = f[*i];
        if (c == '-')
            sp->minus = 1;
        else if (c == '+')
            sp->plus = 1;
        else if (c == '#')
            sp->sharp = 1;
        else if (c == ' ')
            sp->space = 1;
        else if (c == '0')
            sp->zero = !sp->minus;
        else
            break;
    }
    for (; *i < n && f[*i] >= '0' && f[*i] <= '9' && sp->width < 100000; (*i)++)
        sp->width = (sp->width < 0 ? 0 : sp->width * 10) + (f[*i] - '0');
    if (*i < n && f[*i] == '.') {
        (*i)++;
        sp->prec = 0;
        for (; *i < n && f[*i] >= '0' && f[*i] <= '9' && sp->prec < 100000; (*i)++)
            sp->prec = sp->prec * 10 + (f[*i] - '0');
    }
}

static int extra_args(struct mf_buf *b, struct tmpl_value **a, size_t na, size_t from,
                      struct mf_err *err)
{
    int rc = mf_buf_puts(b, "%!(EXTRA ", err);
    for (size_t i = from; i < na && !rc; i++) {
        if (i > from)
            rc = mf_buf_puts(b, ", ", err);
        if (!rc && a[i] && a[i]->kind != TMPL_NIL)
            rc = mf_buf_printf(b, err, "%s=", tmpl_value_type(a[i]));
        if (!rc)
            rc = tmpl_value_print(b, a[i], 0, err);
    }
    return rc ? rc : mf_buf_putc(b, ')', err);
}

/* fmt.Sprintf(a[0], a[1:]...) for the verbs above. */
static int do_printf(struct mf_buf *b, struct tmpl_value **a, size_t na, struct mf_err *err)
{
    const char *f = a[0]->s;
    size_t n = a[0]->n, ai = 1;
    int rc = 0;
    for (size_t i = 0; i < n && !rc;) {
        const char *pct = memchr(f + i, '%', n - i);
        size_t lit = pct ? (size_t)(pct - (f + i)) : n - i;
        rc = mf_buf_append(b, f + i, lit, err);
        i += lit + 1;
        if (rc || !pct)
            break;
        struct spec sp;
        parse_spec(f, n, &i, &sp);
        if (i >= n) {
            rc = mf_buf_puts(b, "%!(NOVERB)", err);
            break;
        }
        char verb = f[i++];
        if (verb == '%')
            rc = mf_buf_putc(b, '%', err);
        else if (ai >= na)
            rc = mf_buf_printf(b, err, "%%!%c(MISSING)", verb);
        else
            rc = fmt_one(b, &sp, verb, a[ai++], err);
    }
    if (!rc && ai < na)
        rc = extra_args(b, a, na, ai, err);
    return rc;
}

/* ---- print, println, printf, json ------------------------------------------------ */

static int fn_text(struct call *c, int fn, struct tmpl_value **a, size_t na,
                   struct tmpl_value **out)
{
    struct mf_buf b;
    struct mf_err err;
    int rc = 0;
    mf_buf_init(&b, c->left);
    if (fn == FN_PRINTF) {
        rc = do_printf(&b, a, na, &err);
    } else if (fn == FN_JSON) {
        rc = tmpl_value_json(&b, a[0], &err);
    } else {
        for (size_t i = 0; i < na && !rc; i++) {
            /* Sprint spaces operands when neither is a string; Sprintln always */
            int sp = i > 0 && (fn == FN_PRINTLN || (cls(a[i - 1]) != C_STR && cls(a[i]) != C_STR));
            if (sp)
                rc = mf_buf_putc(&b, ' ', &err);
            if (!rc)
                rc = tmpl_value_print(&b, a[i], 0, &err);
        }
        if (!rc && fn == FN_PRINTLN)
            rc = mf_buf_putc(&b, '\n', &err);
    }
    if (rc) {
        mf_buf_free(&b);
        return out_of_memory(c);
    }
    return take_buf(c, &b, out);
}

/* tojson VALUE [INDENT]: the JSON text Jinja's tojson writes (what
 * Hugging Face chat templates print tools and arguments with): Python's
 * ", " and ": " separators, non-ASCII as is, or INDENT spaces a level.
 * Built from json's text, so a value that prints as JSON keeps its order. */
static int fn_tojson(struct call *c, struct tmpl_value **a, size_t na, struct tmpl_value **out)
{
    struct mf_buf b;
    struct mf_err err;
    int64_t indent = 0;
    if (na > 1) {
        if (tmpl_value_kind(a[1]) != TMPL_INT || a[1]->i < 0 || a[1]->i > 31)
            return fail(c, "tojson: the indent must be an integer from 0 to 31");
        indent = a[1]->i;
    }
    mf_buf_init(&b, c->left);
    if (tmpl_value_json(&b, a[0], &err)) {
        mf_buf_free(&b);
        return out_of_memory(c);
    }
    json_t *v = json_loadb(b.data ? b.data : "null", b.len ? b.len : 4, JSON_DECODE_ANY, NULL);
    mf_buf_free(&b);
    char *s = v ? json_dumps(v, JSON_ENCODE_ANY | JSON_INDENT((size_t)indent)) : NULL;
    json_decref(v);
    if (!s)
        return out_of_memory(c);
    mf_buf_init(&b, c->left);
    int rc = mf_buf_puts(&b, s, &err);
    free(s);
    if (rc) {
        mf_buf_free(&b);
        return out_of_memory(c);
    }
    return take_buf(c, &b, out);
}

int tmpl_call(int fn, struct tmpl_value **a, size_t na, size_t scratch_left, size_t *used,
              struct tmpl_value **out, char *msg, size_t msg_size)
{
    struct call c = {.msg = msg, .msg_size = msg_size, .left = scratch_left, .used = used};
    int truth = 0, rc;
    *out = NULL;
    switch (fn) {
    case FN_NOT:
        *out = tmpl_value_bool(!tmpl_value_truth(a[0]));
        return 0;
    case FN_LEN:
        return fn_len(&c, a[0], out);
    case FN_INDEX:
        return fn_index(&c, a, na, out);
    case FN_SLICE:
        return fn_slice(&c, a, na, out);
    case FN_EQ:
    case FN_NE:
    case FN_LT:
    case FN_LE:
    case FN_GT:
    case FN_GE:
        rc = compare(&c, fn, a, na, &truth);
        if (!rc)
            *out = tmpl_value_bool(truth);
        return rc;
    case FN_PRINT:
    case FN_PRINTF:
    case FN_PRINTLN:
    case FN_JSON:
        return fn_text(&c, fn, a, na, out);
    case FN_TOJSON:
        return fn_tojson(&c, a, na, out);
    default:
        return fail(&c, "function %s is not callable here", tmpl_fn_name(fn));
    }
}
