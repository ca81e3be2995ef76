/*
 * store_cache.c: build-cache records, cache/<hex>.json, one per cache key.
 *
 * The executor computes a key (a sha256 digest of the step and its inputs,
 * BuildKit style) and stores the step's result as JSON. The store does not
 * interpret results except for one rule that gc relies on: every string in a
 * record that is a valid digest keeps that blob alive. So a result names its
 * blobs the natural way ({"layer": {"digest": "sha256:..."}}) and no separate
 * list can drift out of sync. A false positive only keeps a blob longer.
 *
 * Records are written atomically under index.lock; a record is disposable, so
 * a corrupt one is reported (MF_EFORMAT) and gc removes it.
 */
#include "store/store.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/file.h"
#include "common/json.h"
#include "store/store_int.h"

#define MAX_DEPTH 64 /* nesting we follow when collecting digests; results are shallow */

static char *record_path(struct store *s, const char *key, struct mf_err *err)
{
    if (store_digest_check(key, "cache key", err) != 0)
        return NULL;
    return store_digest_join(s, STORE_CACHE_DIR, key, ".json", err);
}

int store_cache_get(struct store *s, const char *key, json_t **result, struct mf_err *err)
{
    char *path = record_path(s, key, err);
    if (!path)
        return err ? err->code : MF_EINVAL;
    char *text = NULL;
    size_t len = 0;
    int rc = mf_file_read(path, STORE_CACHE_RECORD_MAX, &text, &len, err);
    if (rc == MF_ENOTFOUND)
        mf_err_set(err, rc, "no cache record for %s", key);
    if (!rc) {
        json_t *v = mf_json_parse(text, len, path, err);
        if (v)
            *result = v;
        else
            rc = MF_EFORMAT;
    }
    free(text);
    free(path);
    return rc;
}

int store_cache_put(struct store *s, const char *key, const json_t *result, struct mf_err *err)
{
    char *path = record_path(s, key, err);
    if (!path)
        return err ? err->code : MF_EINVAL;
    struct mf_buf b;
    mf_buf_init(&b, STORE_CACHE_RECORD_MAX);
    int rc = mf_json_dump(result, JSON_COMPACT | JSON_SORT_KEYS, &b, err);
    if (!rc)
        rc = mf_buf_putc(&b, '\n', err);
    if (!rc)
        rc = store_lock_index(s, err);
    if (!rc) {
        rc = mf_file_write_atomic(path, b.data, b.len, err);
        store_unlock_index(s);
    }
    mf_buf_free(&b);
    free(path);
    return rc;
}

int store_cache_remove(struct store *s, const char *key, struct mf_err *err)
{
    char *path = record_path(s, key, err);
    if (!path)
        return err ? err->code : MF_EINVAL;
    int rc = store_lock_index(s, err);
    if (!rc) {
        if (unlink(path) != 0)
            rc = mf_err_sys(err, errno == ENOENT ? MF_ENOTFOUND : MF_EIO, errno,
                            "cannot remove cache record %s", key);
        store_unlock_index(s);
    }
    free(path);
    return rc;
}

static int push_digest(const char *d, char (**list)[STORE_DIGEST_BUF], size_t *n, size_t *cap,
                       struct mf_err *err)
{
    if (*n == *cap) {
        size_t nc = *cap ? *cap * 2 : 64;
        void *p = realloc(*list, nc * sizeof **list);
        if (!p)
            return mf_err_set(err, MF_ENOMEM, "out of memory");
        *list = p;
        *cap = nc;
    }
    memcpy((*list)[(*n)++], d, STORE_DIGEST_BUF);
    return 0;
}

static int collect(const json_t *v, int depth, char (**list)[STORE_DIGEST_BUF], size_t *n,
                   size_t *cap, struct mf_err *err)
{
    if (depth > MAX_DEPTH)
        return 0;
    if (json_is_string(v)) {
        const char *str = json_string_value(v);
        return store_digest_valid(str) ? push_digest(str, list, n, cap, err) : 0;
    }
    int rc = 0;
    if (json_is_array(v)) {
        size_t i;
        json_t *e;
        json_array_foreach (v, i, e) {
            if (!rc)
                rc = collect(e, depth + 1, list, n, cap, err);
        }
    } else if (json_is_object(v)) {
        const char *k;
        json_t *e;
        json_object_foreach ((json_t *)v, k, e) {
            if (!rc)
                rc = collect(e, depth + 1, list, n, cap, err);
        }
    }
    return rc;
}

int store_cache_collect(const json_t *v, char (**list)[STORE_DIGEST_BUF], size_t *n, size_t *cap,
                        struct mf_err *err)
{
    return collect(v, 0, list, n, cap, err);
}
