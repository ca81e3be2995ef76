/*
 * json.h: JSON through jansson, with mfc's error idiom.
 *
 * Parsing untrusted JSON goes through mf_json_parse, which caps the input
 * size, rejects duplicate keys and NUL bytes inside strings, and reports the
 * line and column of the first problem. Output goes through mf_json_dump with
 * sorted keys when determinism matters (digests of OCI configs depend on it).
 */
#ifndef MF_JSON_H
#define MF_JSON_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "buf.h"
#include "err.h"

/* Parses len bytes of text named `what` in messages. Returns a new reference
 * (json_decref it) or NULL with err filled: "what:LINE:COL: invalid JSON:
 * reason", never quoting the input. */
json_t *mf_json_parse(const char *text, size_t len, const char *what, struct mf_err *err);

/* Serialises v into b (appending). flags are jansson's JSON_* flags;
 * JSON_SORT_KEYS gives a canonical order. */
int mf_json_dump(const json_t *v, size_t flags, struct mf_buf *b, struct mf_err *err);

/* Typed lookups: 0 and the value, MF_ENOTFOUND when absent (out untouched),
 * MF_EFORMAT when present with another type. `what` names the object. */
int mf_json_get_str(const json_t *obj, const char *key, const char *what, const char **out,
                    struct mf_err *err);
int mf_json_get_int(const json_t *obj, const char *key, const char *what, int64_t *out,
                    struct mf_err *err);
int mf_json_get_num(const json_t *obj, const char *key, const char *what, double *out,
                    struct mf_err *err);
int mf_json_get_bool(const json_t *obj, const char *key, const char *what, int *out,
                     struct mf_err *err);

#endif
