/*
 * gram_schema.c: JSON Schema to GBNF, for OpenAI's response_format and
 * tools and Ollama's format.
 *
 * Each schema node becomes one rule (r1, r2, ...); a $ref target is
 * compiled once under its own rule, so recursive schemas give recursive
 * rules. The shared JSON rules (value, object, string, ...) follow, fixed.
 * Every generated value ends with `space`, a bounded run of whitespace.
 * Numbers have at most 16 integer digits, 16 fraction digits and 2 exponent
 * digits, so every bounded schema has only finite outputs. Properties come
 * in the order `properties` lists them (required or optional);
 * additionalProperties absent means none (llama.cpp's reading), true or a
 * schema adds any further "key": value pairs. Number bounds are met by
 * integer-part ranges (a sound subset where a bound is fractional).
 * Keywords outside the supported set fail with MF_EUNSUPPORTED naming the
 * keyword and where it is (a JSON pointer); annotations are ignored.
 */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "runtime/grammar/gram.h"

#define MAX_DEPTH 64
#define MAX_RULES 100000
#define GBNF_MAX (GRAM_MAX_SOURCE)

struct ref {
    char *ref;
    int rule;
};

struct sc {
    struct mf_buf all;  /* finished rules */
    struct mf_buf *cur; /* the rule being written (one per gen() level) */
    const json_t *root;
    const char *where;
    struct mf_err *err;
    int n_rules;
    struct ref *refs;
    size_t n_refs;
    int depth;
};

static const char *const SHARED =
    "space ::= | \" \" | \"\\n\" [ \\t]{0,20}\n"
    "char ::= [^\"\\\\\\x7F\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4})\n"
    "string ::= \"\\\"\" char* \"\\\"\" space\n"
    "integral ::= \"0\" | [1-9] [0-9]{0,15}\n"
    "fraction ::= \".\" [0-9]{1,16}\n"
    "exponent ::= [eE] [-+]? [0-9]{1,2}\n"
    "number ::= \"-\"? integral fraction? exponent? space\n"
    "integer ::= \"-\"? integral space\n"
    "boolean ::= (\"true\" | \"false\") space\n"
    "null ::= \"null\" space\n"
    "value ::= object | array | string | number | boolean | null\n"
    "object ::= \"{\" space ( string \":\" space value (\",\" space string \":\" space value)* )? "
    "\"}\" space\n"
    "array ::= \"[\" space ( value (\",\" space value)* )? \"]\" space\n"
    "digit ::= [0-9]\n"
    "hex ::= [0-9a-fA-F]\n"
    "date ::= [0-9]{4} \"-\" ( \"0\" [1-9] | \"1\" [0-2] ) \"-\" ( \"0\" [1-9] | [1-2] [0-9] | "
    "\"3\" [0-1] )\n"
    "time ::= ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] \":\" [0-5] [0-9] ( \".\" "
    "[0-9]{1,9} )? ( \"Z\" | [+-] ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] )\n"
    "uuid ::= hex{8} \"-\" hex{4} \"-\" hex{4} \"-\" hex{4} \"-\" hex{12}\n";

/* Keywords that shape the output, and annotations that do not. */
static const char *const KNOWN[] = {"type",
                                    "properties",
                                    "required",
                                    "additionalProperties",
                                    "items",
                                    "prefixItems",
                                    "minItems",
                                    "maxItems",
                                    "enum",
                                    "const",
                                    "anyOf",
                                    "oneOf",
                                    "allOf",
                                    "$ref",
                                    "$defs",
                                    "definitions",
                                    "minimum",
                                    "maximum",
                                    "exclusiveMinimum",
                                    "exclusiveMaximum",
                                    "minLength",
                                    "maxLength",
                                    "pattern",
                                    "format",
                                    "title",
                                    "description",
                                    "default",
                                    "examples",
                                    "$schema",
                                    "$id",
                                    "$comment",
                                    "deprecated",
                                    "readOnly",
                                    "writeOnly",
                                    "nullable",
                                    "strict",
                                    NULL};

static int fail(struct sc *c, int code, const char *ptr, const char *msg)
{
    return mf_err_set(c->err, code, "%s: %s (at %s)", c->where, msg, *ptr ? ptr : "/");
}

static int put(struct sc *c, const char *s)
{
    return mf_buf_puts(c->cur, s, c->err);
}

/* A GBNF string literal of bytes s[0..n). */
static int put_lit(struct sc *c, const char *s, size_t n)
{
    int rc = mf_buf_putc(c->cur, '"', c->err);
    for (size_t i = 0; i < n && !rc; i++) {
        unsigned char b = (unsigned char)s[i];
        if (b == '"' || b == '\\')
            rc = mf_buf_printf(c->cur, c->err, "\\%c", b);
        else if (b < 0x20 || b == 0x7F)
            rc = mf_buf_printf(c->cur, c->err, "\\x%02X", b);
        else
            rc = mf_buf_putc(c->cur, (char)b, c->err);
    }
    return rc ? rc : mf_buf_putc(c->cur, '"', c->err);
}

/* A literal for the JSON text of v, then space. */
static int put_json_lit(struct sc *c, const json_t *v)
{
    char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!s)
        return mf_err_set(c->err, MF_ENOMEM, "%s: out of memory", c->where);
    int rc = put_lit(c, s, strlen(s));
    free(s);
    return rc ? rc : put(c, " space");
}

static int new_rule(struct sc *c, int *id)
{
    if (c->n_rules >= MAX_RULES)
        return mf_err_set(c->err, MF_ENOMEM, "%s: the schema needs more than %d rules", c->where,
                          MAX_RULES);
    *id = ++c->n_rules;
    return 0;
}

static int gen(struct sc *c, const json_t *s, const char *ptr, int *rule);

/* ---- integers --------------------------------------------------------------- */

static int all_of(const char *s, size_t n, char c)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] != c)
            return 0;
    return 1;
}

/* Fixed-length digit strings from x to y (same length, x <= y). Each level
 * has at most one non-trivial side per bound, so the output grows with the
 * square of the length, not exponentially. */
static int digits_range(struct sc *c, const char *x, const char *y, size_t n)
{
    int rc, alts = 0;
    if (n == 0)
        return 0;
    if (memcmp(x, y, n) == 0)
        return put_lit(c, x, n);
    if (all_of(x + 1, n - 1, '0') && all_of(y + 1, n - 1, '9'))
        return n > 1 ? mf_buf_printf(c->cur, c->err, "[%c-%c] [0-9]{%zu}", x[0], y[0], n - 1)
                     : mf_buf_printf(c->cur, c->err, "[%c-%c]", x[0], y[0]);
    if (x[0] == y[0]) {
        if ((rc = mf_buf_printf(c->cur, c->err, "\"%c\" (", x[0])) ||
            (rc = digits_range(c, x + 1, y + 1, n - 1)))
            return rc;
        return put(c, ")");
    }
    char nines[24], zeros[24];
    memset(nines, '9', n - 1);
    memset(zeros, '0', n - 1);
    char lo = x[0], hi = y[0];
    if ((rc = put(c, "(")))
        return rc;
    if (!all_of(x + 1, n - 1, '0')) {
        if ((rc = mf_buf_printf(c->cur, c->err, " \"%c\" (", x[0])) ||
            (rc = digits_range(c, x + 1, nines, n - 1)) || (rc = put(c, ")")))
            return rc;
        lo++;
        alts++;
    }
    if (!all_of(y + 1, n - 1, '9'))
        hi--;
    if (lo <= hi) {
        if ((rc = mf_buf_printf(c->cur, c->err, "%s [%c-%c] [0-9]{%zu}", alts ? " |" : "", lo, hi,
                                n - 1)))
            return rc;
        alts++;
    }
    if (!all_of(y + 1, n - 1, '9')) {
        if ((rc = mf_buf_printf(c->cur, c->err, "%s \"%c\" (", alts ? " |" : "", y[0])) ||
            (rc = digits_range(c, zeros, y + 1, n - 1)) || (rc = put(c, ")")))
            return rc;
    }
    return put(c, " )");
}

/* Decimal strings without leading zeros for [a, b]; b < 0: unbounded. At
 * least one alternative is written (a <= b). */
static int nonneg_range(struct sc *c, int64_t a, int64_t b)
{
    char xs[24], ys[24];
    int rc, first = 1;
    int la = snprintf(xs, sizeof xs, "%" PRId64, a);
    int lb = b < 0 ? 16 : snprintf(ys, sizeof ys, "%" PRId64, b);
    if ((rc = put(c, "(")))
        return rc;
    for (int len = la; len <= lb; len++) {
        char lo[24], hi[24];
        int64_t p = 1;
        for (int i = 1; i < len; i++)
            p *= 10;
        int64_t l = len == la ? a : p, h = (b >= 0 && len == lb) ? b : p * 10 - 1;
        if (len == 1 && l > 0 && len != la)
            l = 0;
        snprintf(lo, sizeof lo, "%0*" PRId64, len, l);
        snprintf(hi, sizeof hi, "%0*" PRId64, len, h);
        if ((rc = put(c, first ? " " : " | ")) || (rc = digits_range(c, lo, hi, (size_t)len)))
            return rc;
        first = 0;
    }
    return put(c, " )");
}

/* Integers in [lo, hi] (has_lo/has_hi: bounded), without space. */
static int int_range(struct sc *c, int has_lo, int64_t lo, int has_hi, int64_t hi)
{
    int rc, alts = 0;
    const int64_t big = 999999999999999LL; /* 15 digits: far inside int64 */
    if (has_lo && lo < -big)
        has_lo = 0;
    if (has_hi && hi > big)
        has_hi = 0;
    if ((rc = put(c, "(")))
        return rc;
    if (!has_hi || hi >= 0) { /* the non-negative part [max(lo,0), hi] */
        int64_t a = has_lo && lo > 0 ? lo : 0;
        if (has_lo && lo > big)
            a = big;
        if ((rc = put(c, " ")) || (rc = nonneg_range(c, a, has_hi ? hi : -1)))
            return rc;
        alts++;
    }
    if (!has_lo || lo < 0) { /* the negative part: "-" k, k in [max(1,-hi), -lo] */
        int64_t a = has_hi && hi < 0 ? -hi : 1;
        if ((rc = put(c, alts ? " | \"-\" " : " \"-\" ")) ||
            (rc = nonneg_range(c, a, has_lo ? -lo : -1)))
            return rc;
    }
    return put(c, " )");
}

static int get_bound(const json_t *s, const char *key, int *has, double *v)
{
    const json_t *x = json_object_get(s, key);
    if (!x)
        return 0;
    if (!json_is_number(x))
        return -1;
    *has = 1;
    *v = json_number_value(x);
    return 0;
}

/* Integer bounds of s (inclusive), from minimum/maximum/exclusive*. */
static int int_bounds(struct sc *c, const json_t *s, const char *ptr, int *has_lo, int64_t *lo,
                      int *has_hi, int64_t *hi)
{
    double v;
    int h = 0;
    *has_lo = *has_hi = 0;
    if (get_bound(s, "minimum", &h, &v))
        return fail(c, MF_EINVAL, ptr, "'minimum' must be a number");
    if (h) {
        *has_lo = 1;
        *lo = (int64_t)ceil(fmax(fmin(v, 9e15), -9e15));
    }
    h = 0;
    if (get_bound(s, "exclusiveMinimum", &h, &v))
        return fail(c, MF_EINVAL, ptr, "'exclusiveMinimum' must be a number");
    if (h) {
        int64_t l = (int64_t)floor(fmax(fmin(v, 9e15), -9e15)) + 1;
        if (!*has_lo || l > *lo)
            *lo = l;
        *has_lo = 1;
    }
    h = 0;
    if (get_bound(s, "maximum", &h, &v))
        return fail(c, MF_EINVAL, ptr, "'maximum' must be a number");
    if (h) {
        *has_hi = 1;
        *hi = (int64_t)floor(fmax(fmin(v, 9e15), -9e15));
    }
    h = 0;
    if (get_bound(s, "exclusiveMaximum", &h, &v))
        return fail(c, MF_EINVAL, ptr, "'exclusiveMaximum' must be a number");
    if (h) {
        int64_t u = (int64_t)ceil(fmax(fmin(v, 9e15), -9e15)) - 1;
        if (!*has_hi || u < *hi)
            *hi = u;
        *has_hi = 1;
    }
    if (*has_lo && *has_hi && *lo > *hi)
        return fail(c, MF_EINVAL, ptr, "no integer lies between the minimum and the maximum");
    return 0;
}

static int gen_integer(struct sc *c, const json_t *s, const char *ptr)
{
    int has_lo, has_hi, rc;
    int64_t lo = 0, hi = 0;
    if ((rc = int_bounds(c, s, ptr, &has_lo, &lo, &has_hi, &hi)))
        return rc;
    if (!has_lo && !has_hi)
        return put(c, "integer");
    if ((rc = int_range(c, has_lo, lo, has_hi, hi)))
        return rc;
    return put(c, " space");
}

/* Numbers: the integer part from the bounds' integer range; a fraction
 * only where it cannot cross a bound (below hi on the positive side, above
 * -lo's magnitude on the negative side). */
static int gen_number(struct sc *c, const json_t *s, const char *ptr)
{
    int has_lo, has_hi, rc;
    int64_t lo = 0, hi = 0;
    if ((rc = int_bounds(c, s, ptr, &has_lo, &lo, &has_hi, &hi)))
        return rc;
    if (!has_lo && !has_hi)
        return put(c, "number");
    /* value = integer i, or i with a fraction when [i, i+1) (i >= 0) or
       (i-1, i] (i < 0) stays inside [lo, hi] */
    if ((rc = put(c, "( ")) || (rc = int_range(c, has_lo, lo, has_hi, hi)))
        return rc;
    int64_t a_pos = has_lo && lo > 0 ? lo : 0;
    if (!has_hi || hi - 1 >= a_pos) { /* i.f with i in [max(lo, 0), hi - 1] */
        if ((rc = put(c, " | ")) || (rc = nonneg_range(c, a_pos, has_hi ? hi - 1 : -1)) ||
            (rc = put(c, " fraction")))
            return rc;
    }
    int64_t a_neg = has_hi && hi < 0 ? -hi : 1;
    if (!has_lo || -lo - 1 >= a_neg) { /* -k.f with k in [max(1, -hi), -lo - 1] */
        if ((rc = put(c, " | \"-\" ")) || (rc = nonneg_range(c, a_neg, has_lo ? -lo - 1 : -1)) ||
            (rc = put(c, " fraction")))
            return rc;
    }
    return put(c, " ) space");
}

/* ---- strings ------------------------------------------------------------------ */

static int get_count(struct sc *c, const json_t *s, const char *key, const char *ptr, int64_t *out)
{
    const json_t *x = json_object_get(s, key);
    if (!x)
        return 0;
    if (!json_is_integer(x) || json_integer_value(x) < 0)
        return mf_err_set(c->err, MF_EINVAL, "%s: '%s' must be a non-negative integer (at %s)",
                          c->where, key, *ptr ? ptr : "/");
    *out = json_integer_value(x);
    if (*out > GRAM_MAX_REPEAT)
        return mf_err_set(c->err, MF_EUNSUPPORTED, "%s: '%s' above %d is not supported (at %s)",
                          c->where, key, GRAM_MAX_REPEAT, *ptr ? ptr : "/");
    return 0;
}

static int gen_string(struct sc *c, const json_t *s, const char *ptr)
{
    const json_t *fmt = json_object_get(s, "format"), *pat = json_object_get(s, "pattern");
    int64_t min = 0, max = -1;
    int rc;
    if (fmt) {
        const char *f = json_string_value(fmt);
        if (!f)
            return fail(c, MF_EINVAL, ptr, "'format' must be a string");
        if (!strcmp(f, "date") || !strcmp(f, "time") || !strcmp(f, "uuid"))
            return mf_buf_printf(c->cur, c->err, "\"\\\"\" %s \"\\\"\" space", f);
        if (!strcmp(f, "date-time"))
            return put(c, "\"\\\"\" date \"T\" time \"\\\"\" space");
        return mf_err_set(c->err, MF_EUNSUPPORTED,
                          "%s: string format '%s' is not supported (date, time, date-time and "
                          "uuid are) (at %s)",
                          c->where, f, *ptr ? ptr : "/");
    }
    if (pat) {
        const char *re = json_string_value(pat);
        char name[32];
        int id = 0;
        struct mf_buf sub;
        if (!re)
            return fail(c, MF_EINVAL, ptr, "'pattern' must be a string");
        if ((rc = new_rule(c, &id)))
            return rc;
        snprintf(name, sizeof name, "p%d", id);
        mf_buf_init(&sub, GBNF_MAX);
        rc = gram_regex_gbnf(re, name, &sub, c->err);
        if (rc) {
            mf_buf_free(&sub);
            return mf_err_prefix(c->err, "%s (at %s)", c->where, *ptr ? ptr : "/");
        }
        rc = mf_buf_append(&c->all, sub.data, sub.len, c->err);
        mf_buf_free(&sub);
        return rc ? rc : mf_buf_printf(c->cur, c->err, "\"\\\"\" %s \"\\\"\" space", name);
    }
    if ((rc = get_count(c, s, "minLength", ptr, &min)) ||
        (rc = get_count(c, s, "maxLength", ptr, &max)))
        return rc;
    if (max >= 0 && max < min)
        return fail(c, MF_EINVAL, ptr, "maxLength is below minLength");
    if (min == 0 && max < 0)
        return put(c, "string");
    if (max < 0)
        return mf_buf_printf(c->cur, c->err, "\"\\\"\" char{%" PRId64 ",} \"\\\"\" space", min);
    return mf_buf_printf(c->cur, c->err, "\"\\\"\" char{%" PRId64 ",%" PRId64 "} \"\\\"\" space",
                         min, max);
}

/* ---- objects -------------------------------------------------------------------- */

struct prop {
    const char *key;
    int rule;
    int required;
};

static int is_required(const json_t *req, const char *key)
{
    size_t i;
    const json_t *x;
    json_array_foreach(req, i, x)
    {
        if (json_is_string(x) && strcmp(json_string_value(x), key) == 0)
            return 1;
    }
    return 0;
}

/* Writes "key" : value for property p. */
static int put_kv(struct sc *c, const struct prop *p)
{
    json_t *k = json_string(p->key);
    if (!k)
        return mf_err_set(c->err, MF_EINVAL, "%s: property name is not UTF-8", c->where);
    char *s = json_dumps(k, JSON_ENCODE_ANY);
    json_decref(k);
    if (!s)
        return mf_err_set(c->err, MF_ENOMEM, "%s: out of memory", c->where);
    int rc = put_lit(c, s, strlen(s));
    free(s);
    return rc ? rc : mf_buf_printf(c->cur, c->err, " space \":\" space r%d", p->rule);
}

/* Objects: rules first_k (nothing written yet, properties k.. to come) and
 * rest_k (something written: each next one preceded by a comma). */
static int gen_object_props(struct sc *c, struct prop *ps, size_t n, int extra, int self)
{
    int rc, base = c->n_rules + 1;
    /* rule ids: first_k = base + k, rest_k = base + n + 1 + k, for k in 0..n */
    for (size_t k = 0; k <= 2 * n + 1; k++) {
        int id;
        if ((rc = new_rule(c, &id)))
            return rc;
    }
    /* extra pairs (additionalProperties): "," string ":" value, repeated */
    for (size_t k = 0; k <= n; k++) { /* first_k */
        if ((rc = mf_buf_printf(c->cur, c->err, "r%d ::= ", base + (int)k)))
            return rc;
        if (k == n) {
            rc = extra ? mf_buf_printf(c->cur, c->err, "( string \":\" space r%d r%d )?\n", extra,
                                       base + (int)(n + 1 + n))
                       : put(c, "\"\"\n");
            if (rc)
                return rc;
            continue;
        }
        if ((rc = put_kv(c, &ps[k])) ||
            (rc = mf_buf_printf(c->cur, c->err, " r%d", base + (int)(n + 1 + k + 1))))
            return rc;
        if (!ps[k].required && (rc = mf_buf_printf(c->cur, c->err, " | r%d", base + (int)(k + 1))))
            return rc;
        if ((rc = put(c, "\n")))
            return rc;
    }
    for (size_t k = 0; k <= n; k++) { /* rest_k */
        if ((rc = mf_buf_printf(c->cur, c->err, "r%d ::= ", base + (int)(n + 1 + k))))
            return rc;
        if (k == n) {
            rc = extra ? mf_buf_printf(c->cur, c->err, "( \",\" space string \":\" space r%d )*\n",
                                       extra)
                       : put(c, "\"\"\n");
            if (rc)
                return rc;
            continue;
        }
        if ((rc = put(c, ps[k].required ? "\",\" space " : "( \",\" space ")) ||
            (rc = put_kv(c, &ps[k])) || (rc = put(c, ps[k].required ? " " : " )? ")) ||
            (rc = mf_buf_printf(c->cur, c->err, "r%d\n", base + (int)(n + 1 + k + 1))))
            return rc;
    }
    return mf_buf_printf(c->cur, c->err, "r%d ::= \"{\" space r%d \"}\" space\n", self, base);
}

/* Collects properties/required of s into ps (allOf: of each part). */
static int collect_props(struct sc *c, const json_t *s, const char *ptr, struct prop **ps,
                         size_t *n, const json_t **req_out, int *extra)
{
    const json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required");
    const json_t *add = json_object_get(s, "additionalProperties");
    const char *key;
    const json_t *sub;
    char p2[512];
    int rc;
    if (props && !json_is_object(props))
        return fail(c, MF_EINVAL, ptr, "'properties' must be an object");
    if (req && !json_is_array(req))
        return fail(c, MF_EINVAL, ptr, "'required' must be an array of names");
    if (req) {
        size_t i;
        const json_t *x;
        json_array_foreach(req, i, x)
        {
            if (!json_is_string(x))
                return fail(c, MF_EINVAL, ptr, "'required' must be an array of names");
            if (!props || !json_object_get(props, json_string_value(x))) {
                if (!add || json_is_false(add))
                    return mf_err_set(c->err, MF_EINVAL,
                                      "%s: required property '%s' is not in 'properties' (at %s)",
                                      c->where, json_string_value(x), *ptr ? ptr : "/");
            }
        }
    }
    *req_out = req;
    json_object_foreach((json_t *)props, key, sub)
    {
        struct prop *np = realloc(*ps, (*n + 1) * sizeof *np);
        if (!np)
            return mf_err_set(c->err, MF_ENOMEM, "%s: out of memory", c->where);
        *ps = np;
        for (size_t i = 0; i < *n; i++)
            if (strcmp((*ps)[i].key, key) == 0)
                return mf_err_set(c->err, MF_EUNSUPPORTED,
                                  "%s: property '%s' defined twice through allOf (at %s)", c->where,
                                  key, *ptr ? ptr : "/");
        snprintf(p2, sizeof p2, "%s/properties/%s", ptr, key);
        (*ps)[*n] = (struct prop){key, 0, is_required(req, key)};
        if ((rc = gen(c, sub, p2, &(*ps)[*n].rule)))
            return rc;
        (*n)++;
    }
    if (add && !json_is_false(add)) {
        if (json_is_true(add)) {
            *extra = -1; /* any value */
        } else if (json_is_object(add)) {
            snprintf(p2, sizeof p2, "%s/additionalProperties", ptr);
            if ((rc = gen(c, add, p2, extra)))
                return rc;
        } else {
            return fail(c, MF_EINVAL, ptr, "'additionalProperties' must be a boolean or schema");
        }
    }
    return 0;
}

static const json_t *resolve(struct sc *c, const json_t *s, const char *ptr, int *rc);

static int gen_object(struct sc *c, const json_t *s, const char *ptr, int self)
{
    struct prop *ps = NULL;
    size_t n = 0;
    const json_t *req = NULL, *all = json_object_get(s, "allOf");
    int extra = 0, rc;
    int has_shape =
        json_object_get(s, "properties") || json_object_get(s, "additionalProperties") || all;
    if (!has_shape) {
        rc = mf_buf_printf(c->cur, c->err, "r%d ::= object\n", self);
        return rc;
    }
    rc = collect_props(c, s, ptr, &ps, &n, &req, &extra);
    if (!rc && all) {
        size_t i;
        const json_t *part;
        char p2[512];
        if (!json_is_array(all))
            rc = fail(c, MF_EINVAL, ptr, "'allOf' must be an array");
        json_array_foreach(all, i, part)
        {
            if (rc)
                break;
            snprintf(p2, sizeof p2, "%s/allOf/%zu", ptr, i);
            const json_t *r = resolve(c, part, p2, &rc);
            if (rc)
                break;
            const json_t *ty = json_object_get(r, "type");
            if (!json_is_object(r) ||
                (ty && !(json_is_string(ty) && strcmp(json_string_value(ty), "object") == 0)) ||
                (!ty && !json_object_get(r, "properties"))) {
                rc = fail(c, MF_EUNSUPPORTED, p2,
                          "allOf is supported only over object schemas with properties");
                break;
            }
            const json_t *preq = NULL;
            int pextra = 0;
            rc = collect_props(c, r, p2, &ps, &n, &preq, &pextra);
            if (!rc && preq) { /* required names of a part apply to its properties */
                for (size_t k = 0; k < n; k++)
                    if (is_required(preq, ps[k].key))
                        ps[k].required = 1;
            }
        }
    }
    if (!rc) {
        if (extra == -1 && !(rc = new_rule(c, &extra)))
            rc = mf_buf_printf(c->cur, c->err, "r%d ::= value\n", extra);
        if (!rc)
            rc = gen_object_props(c, ps, n, extra, self);
    }
    free(ps);
    return rc;
}

/* ---- arrays ---------------------------------------------------------------------- */

static int gen_array(struct sc *c, const json_t *s, const char *ptr)
{
    const json_t *items = json_object_get(s, "items"), *prefix = json_object_get(s, "prefixItems");
    int64_t min = 0, max = -1;
    int rc, item = 0;
    char p2[512];
    if ((rc = get_count(c, s, "minItems", ptr, &min)) ||
        (rc = get_count(c, s, "maxItems", ptr, &max)))
        return rc;
    if (max >= 0 && max < min)
        return fail(c, MF_EINVAL, ptr, "maxItems is below minItems");
    if (prefix) {
        size_t i;
        const json_t *x;
        if (!json_is_array(prefix) || json_array_size(prefix) == 0)
            return fail(c, MF_EINVAL, ptr, "'prefixItems' must be a non-empty array");
        if (min || max >= 0 || (items && !json_is_false(items)))
            return fail(c, MF_EUNSUPPORTED, ptr,
                        "prefixItems with items, minItems or maxItems is not supported");
        int *ids = calloc(json_array_size(prefix), sizeof *ids);
        if (!ids)
            return mf_err_set(c->err, MF_ENOMEM, "%s: out of memory", c->where);
        json_array_foreach(prefix, i, x)
        {
            snprintf(p2, sizeof p2, "%s/prefixItems/%zu", ptr, i);
            if ((rc = gen(c, x, p2, &ids[i])))
                break;
        }
        if (!rc)
            rc = put(c, "\"[\" space");
        for (i = 0; !rc && i < json_array_size(prefix); i++)
            rc = mf_buf_printf(c->cur, c->err, "%s r%d", i ? " \",\" space" : "", ids[i]);
        free(ids);
        return rc ? rc : put(c, " \"]\" space");
    }
    if (items && json_is_false(items)) {
        max = 0;
    } else if (items) {
        snprintf(p2, sizeof p2, "%s/items", ptr);
        if ((rc = gen(c, items, p2, &item)))
            return rc;
    }
    char it[32];
    if (item)
        snprintf(it, sizeof it, "r%d", item);
    else
        snprintf(it, sizeof it, "value");
    if (max == 0)
        return put(c, "\"[\" space \"]\" space");
    if ((rc = put(c, "\"[\" space ")))
        return rc;
    if (min == 0 && (rc = put(c, "( ")))
        return rc;
    if ((rc = mf_buf_printf(c->cur, c->err, "%s ( \",\" space %s )", it, it)))
        return rc;
    int64_t lo = min > 0 ? min - 1 : 0;
    if (max < 0)
        rc = mf_buf_printf(c->cur, c->err, "{%" PRId64 ",}", lo);
    else
        rc = mf_buf_printf(c->cur, c->err, "{%" PRId64 ",%" PRId64 "}", lo, max - 1);
    if (!rc && min == 0)
        rc = put(c, " )?");
    return rc ? rc : put(c, " \"]\" space");
}

/* ---- dispatch ----------------------------------------------------------------------- */

/* JSON pointer fragment "#/a/b" into c->root; NULL with *rc set if absent. */
static const json_t *lookup_ref(struct sc *c, const char *ref, const char *ptr, int *rc)
{
    const json_t *cur = c->root;
    if (ref[0] != '#') {
        *rc = mf_err_set(c->err, MF_EUNSUPPORTED,
                         "%s: $ref '%s' is not supported: only local references (#/...) are "
                         "(at %s)",
                         c->where, ref, *ptr ? ptr : "/");
        return NULL;
    }
    const char *p = ref + 1;
    while (*p == '/') {
        char tok[256];
        size_t n = 0;
        p++;
        while (*p && *p != '/' && n + 1 < sizeof tok) {
            if (p[0] == '~' && p[1] == '0') {
                tok[n++] = '~';
                p += 2;
            } else if (p[0] == '~' && p[1] == '1') {
                tok[n++] = '/';
                p += 2;
            } else {
                tok[n++] = *p++;
            }
        }
        tok[n] = 0;
        cur = json_is_array(cur) ? json_array_get(cur, (size_t)strtoul(tok, NULL, 10))
                                 : json_object_get(cur, tok);
        if (!cur)
            break;
    }
    if (!cur || *p) {
        *rc = mf_err_set(c->err, MF_EINVAL, "%s: $ref '%s' points at nothing (at %s)", c->where,
                         ref, *ptr ? ptr : "/");
        return NULL;
    }
    return cur;
}

static const json_t *resolve(struct sc *c, const json_t *s, const char *ptr, int *rc)
{
    for (int hops = 0; hops < 32; hops++) {
        const json_t *r = json_object_get(s, "$ref");
        if (!r)
            return s;
        if (!json_is_string(r)) {
            *rc = fail(c, MF_EINVAL, ptr, "'$ref' must be a string");
            return NULL;
        }
        s = lookup_ref(c, json_string_value(r), ptr, rc);
        if (!s)
            return NULL;
    }
    *rc = fail(c, MF_EINVAL, ptr, "$ref chain longer than 32");
    return NULL;
}

static int check_keywords(struct sc *c, const json_t *s, const char *ptr)
{
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)s, key, v)
    {
        int ok = 0;
        for (int i = 0; KNOWN[i] && !ok; i++)
            ok = strcmp(KNOWN[i], key) == 0;
        if (!ok)
            return mf_err_set(c->err, MF_EUNSUPPORTED,
                              "%s: schema keyword '%s' is not supported (at %s)", c->where, key,
                              *ptr ? ptr : "/");
    }
    return 0;
}

/* The body of a rule for s of one type. */
static int gen_typed(struct sc *c, const json_t *s, const char *type, const char *ptr, int self)
{
    int rc;
    if (!strcmp(type, "object"))
        return gen_object(c, s, ptr, self);
    if ((rc = mf_buf_printf(c->cur, c->err, "r%d ::= ", self)))
        return rc;
    if (!strcmp(type, "string"))
        rc = gen_string(c, s, ptr);
    else if (!strcmp(type, "integer"))
        rc = gen_integer(c, s, ptr);
    else if (!strcmp(type, "number"))
        rc = gen_number(c, s, ptr);
    else if (!strcmp(type, "boolean"))
        rc = put(c, "boolean");
    else if (!strcmp(type, "null"))
        rc = put(c, "null");
    else if (!strcmp(type, "array"))
        rc = gen_array(c, s, ptr);
    else
        return mf_err_set(c->err, MF_EINVAL, "%s: unknown type '%s' (at %s)", c->where, type,
                          *ptr ? ptr : "/");
    return rc ? rc : put(c, "\n");
}

/* Rules are written whole, so a nested gen() must not interleave with a
 * rule being written: bodies that call gen (objects, arrays, alternations)
 * generate their parts first, into rules of their own. */
static int gen_alts(struct sc *c, const json_t *list, const char *kw, const char *ptr, int self)
{
    size_t i, n = json_array_size(list);
    const json_t *x;
    int rc = 0;
    char p2[512];
    if (!json_is_array(list) || n == 0)
        return mf_err_set(c->err, MF_EINVAL, "%s: '%s' must be a non-empty array (at %s)", c->where,
                          kw, *ptr ? ptr : "/");
    int *ids = calloc(n, sizeof *ids);
    if (!ids)
        return mf_err_set(c->err, MF_ENOMEM, "%s: out of memory", c->where);
    json_array_foreach(list, i, x)
    {
        snprintf(p2, sizeof p2, "%s/%s/%zu", ptr, kw, i);
        if ((rc = gen(c, x, p2, &ids[i])))
            break;
    }
    if (!rc)
        rc = mf_buf_printf(c->cur, c->err, "r%d ::=", self);
    for (i = 0; !rc && i < n; i++)
        rc = mf_buf_printf(c->cur, c->err, "%s r%d", i ? " |" : "", ids[i]);
    free(ids);
    return rc ? rc : put(c, "\n");
}

static int gen_body(struct sc *c, const json_t *s, const char *ptr, int *rule)
{
    int rc, self = 0;
    if (++c->depth > MAX_DEPTH) {
        c->depth--;
        return fail(c, MF_EUNSUPPORTED, ptr, "schema nested deeper than 64");
    }
    if (json_is_true(s) || (json_is_object(s) && json_object_size(s) == 0)) {
        if (!(rc = new_rule(c, &self)))
            rc = mf_buf_printf(c->cur, c->err, "r%d ::= value\n", self);
        goto out;
    }
    if (json_is_false(s)) {
        rc = fail(c, MF_EUNSUPPORTED, ptr, "schema 'false' allows no value");
        goto out_nodepth;
    }
    if (!json_is_object(s)) {
        rc = fail(c, MF_EINVAL, ptr, "a schema must be an object or a boolean");
        goto out_nodepth;
    }
    if ((rc = check_keywords(c, s, ptr)))
        goto out_nodepth;
    const json_t *ref = json_object_get(s, "$ref");
    if (ref) {
        if (!json_is_string(ref)) {
            rc = fail(c, MF_EINVAL, ptr, "'$ref' must be a string");
            goto out_nodepth;
        }
        for (size_t i = 0; i < c->n_refs; i++) {
            if (strcmp(c->refs[i].ref, json_string_value(ref)) == 0) {
                self = c->refs[i].rule;
                rc = 0;
                goto out;
            }
        }
        const json_t *target = lookup_ref(c, json_string_value(ref), ptr, &rc);
        if (!target)
            goto out_nodepth;
        struct ref *nr = realloc(c->refs, (c->n_refs + 1) * sizeof *nr);
        if (!nr) {
            rc = mf_err_set(c->err, MF_ENOMEM, "%s: out of memory", c->where);
            goto out_nodepth;
        }
        c->refs = nr;
        if ((rc = new_rule(c, &self)))
            goto out_nodepth;
        c->refs[c->n_refs].ref = strdup(json_string_value(ref));
        if (!c->refs[c->n_refs].ref) {
            rc = mf_err_set(c->err, MF_ENOMEM, "%s: out of memory", c->where);
            goto out_nodepth;
        }
        c->refs[c->n_refs++].rule = self;
        int inner;
        char p2[512];
        snprintf(p2, sizeof p2, "%s", json_string_value(ref) + 1);
        if (!(rc = gen(c, target, p2, &inner)))
            rc = mf_buf_printf(c->cur, c->err, "r%d ::= r%d\n", self, inner);
        goto out;
    }
    if ((rc = new_rule(c, &self)))
        goto out_nodepth;
    const json_t *cst = json_object_get(s, "const"), *en = json_object_get(s, "enum");
    const json_t *any = json_object_get(s, "anyOf"), *one = json_object_get(s, "oneOf");
    const json_t *type = json_object_get(s, "type");
    if (cst) {
        if (!(rc = mf_buf_printf(c->cur, c->err, "r%d ::= ", self)) && !(rc = put_json_lit(c, cst)))
            rc = put(c, "\n");
    } else if (en) {
        size_t i;
        const json_t *x;
        if (!json_is_array(en) || json_array_size(en) == 0) {
            rc = fail(c, MF_EINVAL, ptr, "'enum' must be a non-empty array");
            goto out;
        }
        rc = mf_buf_printf(c->cur, c->err, "r%d ::=", self);
        json_array_foreach(en, i, x)
        {
            if (rc || (rc = put(c, i ? " | " : " ")) || (rc = put_json_lit(c, x)))
                break;
        }
        if (!rc)
            rc = put(c, "\n");
    } else if (any || one) {
        rc = gen_alts(c, any ? any : one, any ? "anyOf" : "oneOf", ptr, self);
    } else if (json_is_array(type)) {
        size_t i, n = json_array_size(type);
        const json_t *x;
        int *ids = calloc(n + 1, sizeof *ids);
        if (!ids || n == 0) {
            free(ids);
            rc = n ? mf_err_set(c->err, MF_ENOMEM, "%s: out of memory", c->where)
                   : fail(c, MF_EINVAL, ptr, "'type' must not be an empty array");
            goto out;
        }
        json_array_foreach(type, i, x)
        {
            if (!json_is_string(x)) {
                rc = fail(c, MF_EINVAL, ptr, "'type' entries must be strings");
                break;
            }
            if ((rc = new_rule(c, &ids[i])) ||
                (rc = gen_typed(c, s, json_string_value(x), ptr, ids[i])))
                break;
        }
        if (!rc)
            rc = mf_buf_printf(c->cur, c->err, "r%d ::=", self);
        for (i = 0; !rc && i < n; i++)
            rc = mf_buf_printf(c->cur, c->err, "%s r%d", i ? " |" : "", ids[i]);
        if (!rc)
            rc = put(c, "\n");
        free(ids);
    } else if (type) {
        if (!json_is_string(type))
            rc = fail(c, MF_EINVAL, ptr, "'type' must be a string or an array of strings");
        else
            rc = gen_typed(c, s, json_string_value(type), ptr, self);
    } else if (json_object_get(s, "properties") || json_object_get(s, "allOf") ||
               json_object_get(s, "additionalProperties")) {
        rc = gen_object(c, s, ptr, self);
    } else if (json_object_get(s, "items") || json_object_get(s, "prefixItems")) {
        rc = gen_typed(c, s, "array", ptr, self);
    } else {
        rc = mf_buf_printf(c->cur, c->err, "r%d ::= value\n", self);
    }
out:
    *rule = self;
out_nodepth:
    c->depth--;
    return rc;
}

/* Writes s's rules into a line buffer of its own, then appends them whole
 * to c->all: rules of nested schemas land there first, never inside it. */
static int gen(struct sc *c, const json_t *s, const char *ptr, int *rule)
{
    struct mf_buf line, *saved = c->cur;
    int rc;
    mf_buf_init(&line, GBNF_MAX);
    c->cur = &line;
    rc = gen_body(c, s, ptr, rule);
    c->cur = saved;
    if (!rc && line.len)
        rc = mf_buf_append(&c->all, line.data, line.len, c->err);
    mf_buf_free(&line);
    return rc;
}

int gram_schema_rules(const struct json_t *schema, const char *where, int *next_rule,
                      int *root_rule, struct mf_buf *out, struct mf_err *err)
{
    struct sc c = {.root = schema, .where = where, .err = err, .n_rules = *next_rule};
    int rule = 0, rc;
    mf_buf_init(&c.all, GBNF_MAX);
    c.cur = &c.all;
    rc = gen(&c, schema, "", &rule);
    if (!rc)
        rc = mf_buf_append(out, c.all.data, c.all.len, err);
    mf_buf_free(&c.all);
    for (size_t i = 0; i < c.n_refs; i++)
        free(c.refs[i].ref);
    free(c.refs);
    *next_rule = c.n_rules;
    *root_rule = rule;
    return rc;
}

int gram_json_shared(struct mf_buf *out, struct mf_err *err)
{
    return mf_buf_puts(out, SHARED, err);
}

int gram_schema_gbnf(const struct json_t *schema, const char *where, struct mf_buf *out,
                     struct mf_err *err)
{
    int next = 0, rule = 0, rc;
    struct mf_buf rules;
    mf_buf_init(&rules, GBNF_MAX);
    rc = gram_schema_rules(schema, where, &next, &rule, &rules, err);
    if (!rc)
        rc = mf_buf_printf(out, err, "root ::= r%d\n", rule);
    if (!rc)
        rc = mf_buf_append(out, rules.data, rules.len, err);
    if (!rc)
        rc = mf_buf_puts(out, SHARED, err);
    mf_buf_free(&rules);
    return rc;
}

int gram_json_gbnf(int object_only, struct mf_buf *out, struct mf_err *err)
{
    int rc = mf_buf_puts(out, object_only ? "root ::= object\n" : "root ::= value\n", err);
    return rc ? rc : mf_buf_puts(out, SHARED, err);
}
