/*
 * template_value.c: the typed values templates read (string, int, bool, list,
 * map, struct), with Go's truth, fmt printing (%v) and json.Marshal text.
 *
 * Values are reference counted with atomic counts, so one data tree may be
 * read by several executions at once; nothing mutates a value once an
 * execution holds it. nil, true and false are immortal constants whose count
 * is never touched (refs == 0), so hot comparisons allocate nothing.
 * MAP and STRUCT share a layout (parallel keys/items arrays in insertion
 * order); they differ only in how a missing key reads (nil versus an error)
 * and how they print.
 */
#include "text/template_int.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "common/utf8.h"

/* Immutable constants: refs 0 means never counted, never freed. */
static struct tmpl_value value_nil = {.kind = TMPL_NIL};
static struct tmpl_value value_true = {.kind = TMPL_BOOL, .i = 1};
static struct tmpl_value value_false = {.kind = TMPL_BOOL, .i = 0};

struct tmpl_value *tmpl_value_nil(void)
{
    return &value_nil;
}

struct tmpl_value *tmpl_value_true(void)
{
    return &value_true;
}

struct tmpl_value *tmpl_value_false(void)
{
    return &value_false;
}

static struct tmpl_value *value_new(enum tmpl_kind kind)
{
    struct tmpl_value *v = calloc(1, sizeof *v);
    if (v) {
        v->kind = kind;
        v->refs = 1;
    }
    return v;
}

struct tmpl_value *tmpl_value_str(const char *s, size_t n)
{
    struct tmpl_value *v = value_new(TMPL_STRING);
    if (!v)
        return NULL;
    v->s = malloc(n + 1);
    if (!v->s) {
        free(v);
        return NULL;
    }
    if (n)
        memcpy(v->s, s, n);
    v->s[n] = '\0';
    v->n = n;
    return v;
}

struct tmpl_value *tmpl_value_take_str(char *s, size_t n)
{
    struct tmpl_value *v = value_new(TMPL_STRING);
    if (!v) {
        free(s);
        return NULL;
    }
    v->s = s;
    v->n = n;
    return v;
}

struct tmpl_value *tmpl_value_cstr(const char *s)
{
    return tmpl_value_str(s ? s : "", s ? strlen(s) : 0);
}

struct tmpl_value *tmpl_value_int(int64_t i)
{
    struct tmpl_value *v = value_new(TMPL_INT);
    if (v)
        v->i = i;
    return v;
}

struct tmpl_value *tmpl_value_bool(int b)
{
    return b ? &value_true : &value_false;
}

struct tmpl_value *tmpl_value_list(void)
{
    return value_new(TMPL_LIST);
}

struct tmpl_value *tmpl_value_map(void)
{
    return value_new(TMPL_MAP);
}

struct tmpl_value *tmpl_value_struct(const char *type_name)
{
    struct tmpl_value *v = value_new(TMPL_STRUCT);
    if (!v)
        return NULL;
    v->s = strdup(type_name ? type_name : "struct");
    if (!v->s) {
        free(v);
        return NULL;
    }
    return v;
}

struct tmpl_value *tmpl_value_struct_json(const char *type_name, const char *json)
{
    struct tmpl_value *v = tmpl_value_struct(type_name);
    if (v && !(v->json = strdup(json))) {
        tmpl_value_unref(v);
        return NULL;
    }
    return v;
}

struct tmpl_value *tmpl_value_ref(struct tmpl_value *v)
{
    if (v && v->refs)
        __atomic_add_fetch(&v->refs, 1, __ATOMIC_RELAXED);
    return v;
}

void tmpl_value_unref(struct tmpl_value *v)
{
    if (!v || !v->refs)
        return;
    if (__atomic_sub_fetch(&v->refs, 1, __ATOMIC_ACQ_REL) != 0)
        return;
    for (size_t i = 0; i < v->len; i++) {
        tmpl_value_unref(v->items[i]);
        if (v->keys)
            free(v->keys[i]);
    }
    free(v->items);
    free(v->keys);
    free(v->s);
    free(v->json);
    free(v);
}

enum tmpl_kind tmpl_value_kind(const struct tmpl_value *v)
{
    return v ? v->kind : TMPL_NIL;
}

/* Makes room for one more item (and key, for maps and structs). */
static int grow(struct tmpl_value *v, int with_keys)
{
    if (v->len < v->cap)
        return 0;
    size_t ncap = v->cap ? v->cap * 2 : 4;
    struct tmpl_value **items = realloc(v->items, ncap * sizeof *items);
    if (!items)
        return MF_ENOMEM;
    v->items = items;
    if (with_keys) {
        char **keys = realloc(v->keys, ncap * sizeof *keys);
        if (!keys)
            return MF_ENOMEM;
        v->keys = keys;
    }
    v->cap = ncap;
    return 0;
}

int tmpl_value_push(struct tmpl_value *list, struct tmpl_value *item, struct mf_err *err)
{
    if (!item)
        return mf_err_set(err, MF_ENOMEM, "template value: out of memory");
    if (!list || list->kind != TMPL_LIST) {
        tmpl_value_unref(item);
        return mf_err_set(err, MF_EINVAL, "template value: push onto a non-list");
    }
    if (grow(list, 0)) {
        tmpl_value_unref(item);
        return mf_err_set(err, MF_ENOMEM, "template value: out of memory");
    }
    list->items[list->len++] = item;
    return 0;
}

static ssize_t find_key(const struct tmpl_value *obj, const char *key, size_t klen)
{
    for (size_t i = 0; i < obj->len; i++)
        if (strlen(obj->keys[i]) == klen && memcmp(obj->keys[i], key, klen) == 0)
            return (ssize_t)i;
    return -1;
}

int tmpl_value_set(struct tmpl_value *obj, const char *key, struct tmpl_value *v,
                   struct mf_err *err)
{
    if (!v)
        return mf_err_set(err, MF_ENOMEM, "template value: out of memory");
    if (!obj || (obj->kind != TMPL_MAP && obj->kind != TMPL_STRUCT) || !key) {
        tmpl_value_unref(v);
        return mf_err_set(err, MF_EINVAL, "template value: set on a non-map");
    }
    ssize_t at = find_key(obj, key, strlen(key));
    if (at >= 0) {
        tmpl_value_unref(obj->items[at]);
        obj->items[at] = v;
        return 0;
    }
    char *k = strdup(key);
    if (!k || grow(obj, 1)) {
        free(k);
        tmpl_value_unref(v);
        return mf_err_set(err, MF_ENOMEM, "template value: out of memory");
    }
    obj->keys[obj->len] = k;
    obj->items[obj->len++] = v;
    return 0;
}

struct tmpl_value *tmpl_value_get(const struct tmpl_value *obj, const char *key, size_t klen)
{
    ssize_t at = find_key(obj, key, klen);
    return at >= 0 ? obj->items[at] : NULL;
}

const char *tmpl_value_type(const struct tmpl_value *v)
{
    if (!v)
        return "<nil>";
    switch (v->kind) {
    case TMPL_NIL:
        return "interface {}";
    case TMPL_STRING:
        return "string";
    case TMPL_INT:
        return "int";
    case TMPL_BOOL:
        return "bool";
    case TMPL_LIST:
        return "[]interface {}";
    case TMPL_MAP:
        return "map[string]interface {}";
    case TMPL_STRUCT:
        return v->s;
    }
    return "?";
}

int tmpl_value_truth(const struct tmpl_value *v)
{
    if (!v)
        return 0;
    switch (v->kind) {
    case TMPL_NIL:
        return 0;
    case TMPL_STRING:
        return v->n > 0;
    case TMPL_INT:
    case TMPL_BOOL:
        return v->i != 0;
    case TMPL_LIST:
    case TMPL_MAP:
        return v->len > 0;
    case TMPL_STRUCT:
        return 1;
    }
    return 0;
}

/* qsort has no context argument, so the keys travel with each index. */
struct key_ref {
    const char *key;
    size_t index;
};

static int cmp_key_ref(const void *a, const void *b)
{
    return strcmp(((const struct key_ref *)a)->key, ((const struct key_ref *)b)->key);
}

size_t *tmpl_value_sorted_keys(const struct tmpl_value *map)
{
    if (!map->len)
        return NULL;
    struct key_ref *refs = malloc(map->len * sizeof *refs);
    size_t *order = malloc(map->len * sizeof *order);
    if (!refs || !order) {
        free(refs);
        free(order);
        return NULL;
    }
    for (size_t i = 0; i < map->len; i++)
        refs[i] = (struct key_ref){map->keys[i], i};
    qsort(refs, map->len, sizeof *refs, cmp_key_ref);
    for (size_t i = 0; i < map->len; i++)
        order[i] = refs[i].index;
    free(refs);
    return order;
}

/* ---- fmt %v ------------------------------------------------------------ */

static int print_items(struct mf_buf *b, const struct tmpl_value *v, struct mf_err *err)
{
    int rc = 0;
    size_t *order = NULL;
    if (v->kind == TMPL_MAP && v->len) {
        order = tmpl_value_sorted_keys(v);
        if (!order)
            return mf_err_set(err, MF_ENOMEM, "template: out of memory");
    }
    for (size_t j = 0; j < v->len && !rc; j++) {
        size_t i = order ? order[j] : j;
        if (j)
            rc = mf_buf_putc(b, ' ', err);
        if (!rc && v->kind == TMPL_MAP)
            rc = mf_buf_printf(b, err, "%s:", v->keys[i]);
        if (!rc)
            rc = tmpl_value_print(b, v->items[i], 0, err);
    }
    free(order);
    return rc;
}

int tmpl_value_print(struct mf_buf *b, const struct tmpl_value *v, int top, struct mf_err *err)
{
    int rc;
    if (!v)
        return mf_buf_puts(b, top ? "<no value>" : "<nil>", err);
    switch (v->kind) {
    case TMPL_NIL:
        return mf_buf_puts(b, "<nil>", err);
    case TMPL_STRING:
        return mf_buf_append(b, v->s, v->n, err);
    case TMPL_INT:
        return mf_buf_printf(b, err, "%" PRId64, v->i);
    case TMPL_BOOL:
        return mf_buf_puts(b, v->i ? "true" : "false", err);
    case TMPL_LIST:
    case TMPL_MAP:
    case TMPL_STRUCT:
        break;
    }
    if (v->json)
        return mf_buf_puts(b, v->json, err);
    const char *open = v->kind == TMPL_LIST ? "[" : v->kind == TMPL_MAP ? "map[" : "{";
    rc = mf_buf_puts(b, open, err);
    if (!rc)
        rc = print_items(b, v, err);
    if (!rc)
        rc = mf_buf_putc(b, v->kind == TMPL_STRUCT ? '}' : ']', err);
    return rc;
}

/* ---- json.Marshal ------------------------------------------------------- */

/* One code point of a JSON string the way Go's encoder writes it. */
static int json_char(struct mf_buf *b, uint32_t cp, const char *raw, size_t n, struct mf_err *err)
{
    switch (cp) {
    case '"':
        return mf_buf_puts(b, "\\\"", err);
    case '\\':
        return mf_buf_puts(b, "\\\\", err);
    case '\n':
        return mf_buf_puts(b, "\\n", err);
    case '\r':
        return mf_buf_puts(b, "\\r", err);
    case '\t':
        return mf_buf_puts(b, "\\t", err);
    }
    /* Go escapes <, > and & (HTMLEscape is on by default) and the JS line
     * separators U+2028/U+2029. */
    if (cp < 0x20 || cp == '<' || cp == '>' || cp == '&' || cp == 0x2028 || cp == 0x2029)
        return mf_buf_printf(b, err, "\\u%04x", (unsigned)cp);
    return mf_buf_append(b, raw, n, err);
}

static int json_string(struct mf_buf *b, const char *s, size_t n, struct mf_err *err)
{
    int rc = mf_buf_putc(b, '"', err);
    size_t i = 0;
    while (!rc && i < n) {
        uint32_t cp;
        int k = mf_utf8_decode(s + i, n - i, &cp);
        if (k == 0) {
            rc = mf_buf_puts(b, "\\ufffd", err); /* Go replaces invalid UTF-8 */
            i++;
            continue;
        }
        rc = json_char(b, cp, s + i, (size_t)k, err);
        i += (size_t)k;
    }
    return rc ? rc : mf_buf_putc(b, '"', err);
}

static int json_object(struct mf_buf *b, const struct tmpl_value *v, struct mf_err *err)
{
    size_t *order = NULL;
    if (v->kind == TMPL_MAP && v->len) {
        order = tmpl_value_sorted_keys(v);
        if (!order)
            return mf_err_set(err, MF_ENOMEM, "template: out of memory");
    }
    int rc = mf_buf_putc(b, '{', err);
    for (size_t j = 0; j < v->len && !rc; j++) {
        size_t i = order ? order[j] : j;
        if (j)
            rc = mf_buf_putc(b, ',', err);
        if (!rc)
            rc = json_string(b, v->keys[i], strlen(v->keys[i]), err);
        if (!rc)
            rc = mf_buf_putc(b, ':', err);
        if (!rc)
            rc = tmpl_value_json(b, v->items[i], err);
    }
    free(order);
    return rc ? rc : mf_buf_putc(b, '}', err);
}

int tmpl_value_json(struct mf_buf *b, const struct tmpl_value *v, struct mf_err *err)
{
    if (!v)
        return mf_buf_puts(b, "null", err);
    switch (v->kind) {
    case TMPL_NIL:
        return mf_buf_puts(b, "null", err);
    case TMPL_STRING:
        return json_string(b, v->s, v->n, err);
    case TMPL_INT:
        return mf_buf_printf(b, err, "%" PRId64, v->i);
    case TMPL_BOOL:
        return mf_buf_puts(b, v->i ? "true" : "false", err);
    case TMPL_LIST: {
        int rc = mf_buf_putc(b, '[', err);
        for (size_t i = 0; i < v->len && !rc; i++) {
            if (i)
                rc = mf_buf_putc(b, ',', err);
            if (!rc)
                rc = tmpl_value_json(b, v->items[i], err);
        }
        return rc ? rc : mf_buf_putc(b, ']', err);
    }
    case TMPL_MAP:
    case TMPL_STRUCT:
        return v->json ? mf_buf_puts(b, v->json, err) : json_object(b, v, err);
    }
    return 0;
}
