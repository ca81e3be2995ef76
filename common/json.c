/*
 * json.c: the narrow waist between jansson and mfc's error handling.
 * Parse errors name the line and column but never quote the input.
 *
 * Integers beyond int64 are valid JSON, and Python writes them: transformers
 * sets tokenizer_config.json's model_max_length to int(1e30) =
 * 1000000000000000019884624838656 for most tokenizers (Llama 3's included).
 * jansson refuses them ("too big integer"); mf_json_parse then parses a copy
 * in which each such integer is written as a real (".0" appended, jansson
 * reads it as a double, 1e30), so only those values change type and every
 * other integer stays an integer.
 */
#include "json.h"

#include <stdlib.h>
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

#define INT64_DIGITS 19 /* digits of INT64_MAX */

/* A copy of text in which every integer literal outside int64 gets ".0" (a
 * real); NULL when out of memory. *n_out gets its length. */
static char *ints_as_reals(const char *text, size_t len, size_t *n_out)
{
    size_t extra = 0, i = 0, w = 0;
    for (int pass = 0; pass < 2; pass++) {
        char *out = pass ? malloc(len + extra + 1) : NULL;
        if (pass && !out)
            return NULL;
        int in_str = 0;
        for (i = 0, w = 0; i < len;) {
            char c = text[i];
            if (in_str) {
                if (c == '\\' && i + 1 < len) {
                    if (out)
                        out[w] = c, out[w + 1] = text[i + 1];
                    w += 2, i += 2;
                    continue;
                }
                in_str = c != '"';
            } else if (c == '"') {
                in_str = 1;
            } else if ((c >= '0' && c <= '9') || c == '-') {
                size_t j = i + (c == '-');
                while (j < len && text[j] >= '0' && text[j] <= '9')
                    j++;
                int integer = j >= len || (text[j] != '.' && text[j] != 'e' && text[j] != 'E');
                size_t digits = j - i - (c == '-');
                if (out)
                    memcpy(out + w, text + i, j - i);
                w += j - i;
                const char *d0 = text + i + (c == '-');
                const char *lim = c == '-' ? "9223372036854775808" : "9223372036854775807";
                if (integer && (digits > INT64_DIGITS ||
                                (digits == INT64_DIGITS && memcmp(d0, lim, INT64_DIGITS) > 0))) {
                    if (out)
                        memcpy(out + w, ".0", 2);
                    w += 2;
                    extra += pass ? 0 : 2;
                }
                i = j;
                continue;
            }
            if (out)
                out[w] = c;
            w++, i++;
        }
        if (pass) {
            out[w] = '\0';
            *n_out = w;
            return out;
        }
    }
    return NULL;
}

json_t *mf_json_parse(const char *text, size_t len, const char *what, struct mf_err *err)
{
    json_error_t je;
    char why[sizeof je.text];
    const size_t flags = JSON_REJECT_DUPLICATES | JSON_DECODE_ANY;
    json_t *v = json_loadb(text, len, flags, &je);
    if (!v && strstr(je.text, "too big integer")) {
        size_t n = 0;
        char *copy = ints_as_reals(text, len, &n);
        json_error_t je2;
        v = copy ? json_loadb(copy, n, flags, &je2) : NULL;
        free(copy);
    }
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
