/*
 * json.c: the narrow waist between jansson and mfc's error handling.
 * Parse errors name the line and column but never quote the input.
 */
#include "json.h"

#include <string.h>

/* jansson's reason without the input it quotes ("invalid token near 'root:$y'",
 * "unable to decode byte 0x9c"): the text may be any file's (a symlink to a
 * secret), and an error message ends up in logs. Line and column stay. */
static void reason(const char *text, char *out, size_t cap)
{
    static const struct {
        const char *prefix, *says;
    } quoting[] = {
        {"unable to decode byte", "invalid UTF-8"},
        {"control character", "a control character in a string"},
        {"invalid Unicode", "an invalid \\u escape"},
        {"invalid escape", "an invalid escape"},
    };
    for (size_t i = 0; i < sizeof quoting / sizeof quoting[0]; i++)
        if (!strncmp(text, quoting[i].prefix, strlen(quoting[i].prefix))) {
            snprintf(out, cap, "%s", quoting[i].says);
            return;
        }
    const char *near = strstr(text, " near ");
    snprintf(out, cap, "%.*s", (int)(near ? (size_t)(near - text) : strlen(text)), text);
}

json_t *mf_json_parse(const char *text, size_t len, const char *what, struct mf_err *err)
{
    json_error_t je;
    char why[sizeof je.text];
    json_t *v = json_loadb(text, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &je);
    if (!v) {
        reason(je.text, why, sizeof why);
        mf_err_set(err, MF_EFORMAT, "%s:%d:%d: invalid JSON: %s", what, je.line, je.column, why);
    }
    return v;
}

static int dump_cb(const char *p, size_t n, void *data)
{
    struct mf_buf *b = data;
    return mf_buf_append(b, p, n, NULL) ? -1 : 0;
}

int mf_json_dump(const json_t *v, size_t flags, struct mf_buf *b, struct mf_err *err)
{
    if (json_dump_callback(v, dump_cb, b, flags | JSON_ENCODE_ANY) != 0)
        return mf_err_set(err, MF_ENOMEM, "cannot serialise JSON (out of memory or over %zu bytes)",
                          b->max);
    return 0;
}

static int get_typed(const json_t *obj, const char *key, const char *what, json_type type,
                     const char *tname, json_t **out, struct mf_err *err)
{
    json_t *v = json_is_object(obj) ? json_object_get(obj, key) : NULL;
    if (!v)
        return mf_err_set(err, MF_ENOTFOUND, "%s has no \"%s\"", what, key);
    int ok = json_typeof(v) == type ||
             (type == JSON_TRUE && json_is_boolean(v)) ||
             (type == JSON_REAL && json_is_number(v));
    if (!ok)
        return mf_err_set(err, MF_EFORMAT, "%s: \"%s\" must be %s", what, key, tname);
    *out = v;
    return 0;
}

int mf_json_get_str(const json_t *obj, const char *key, const char *what, const char **out,
                    struct mf_err *err)
{
    json_t *v = NULL;
    int rc = get_typed(obj, key, what, JSON_STRING, "a string", &v, err);
    if (!rc)
        *out = json_string_value(v);
    return rc;
}

int mf_json_get_int(const json_t *obj, const char *key, const char *what, int64_t *out,
                    struct mf_err *err)
{
    json_t *v = NULL;
    int rc = get_typed(obj, key, what, JSON_INTEGER, "an integer", &v, err);
    if (!rc)
        *out = (int64_t)json_integer_value(v);
    return rc;
}

int mf_json_get_num(const json_t *obj, const char *key, const char *what, double *out,
                    struct mf_err *err)
{
    json_t *v = NULL;
    int rc = get_typed(obj, key, what, JSON_REAL, "a number", &v, err);
    if (!rc)
        *out = json_number_value(v);
    return rc;
}

int mf_json_get_bool(const json_t *obj, const char *key, const char *what, int *out,
                     struct mf_err *err)
{
    json_t *v = NULL;
    int rc = get_typed(obj, key, what, JSON_TRUE, "true or false", &v, err);
    if (!rc)
        *out = json_is_true(v);
    return rc;
}
