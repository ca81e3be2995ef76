/*
 * store_tag.c: tags, kept where OCI tools look for them: descriptors in
 * index.json annotated org.opencontainers.image.ref.name (image-layout.md).
 *
 * Every change is read-modify-write of the whole index under the exclusive
 * index.lock, written atomically (tmp + fsync + rename), so two builds tagging
 * at once both land and a reader sees the old or the new index, never a mix.
 * The lock is a separate file because index.json itself is replaced by rename:
 * a lock on it would stay with the old inode. Readers take no lock.
 *
 * A corrupt index.json is reported and never overwritten: losing every tag to
 * "repair" one bad byte is worse than asking the user to look. Descriptors
 * and fields we do not know (platform, other annotations) are kept as read.
 */
#include "store/store.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/file.h"
#include "common/json.h"
#include "store/store_int.h"

/* ---- the ref.name grammar --------------------------------------------------------- */

static int is_alnum(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

/* Length of the separator at s ("--" or one of -._:@+), 0 if none. */
static size_t separator_len(const char *s)
{
    if (s[0] == '-' && s[1] == '-')
        return 2;
    return s[0] && strchr("-._:@+", s[0]) ? 1 : 0;
}

int store_tag_valid(const char *name)
{
    size_t n = name ? strlen(name) : 0;
    if (n == 0 || n >= STORE_REF_MAX)
        return 0;
    const char *p = name;
    for (;;) {
        /* a component: alphanum (separator alphanum)* */
        if (!is_alnum(*p))
            return 0;
        while (is_alnum(*p))
            p++;
        size_t sep = separator_len(p);
        if (sep) {
            p += sep;
            continue; /* must be followed by alphanum: checked at the loop top */
        }
        if (*p == '\0')
            return 1;
        if (*p != '/')
            return 0;
        p++;
    }
}

/* ---- index.json ------------------------------------------------------------------- */

static json_t *empty_index(void)
{
    return json_pack("{s:i, s:s, s:[]}", "schemaVersion", 2, "mediaType", STORE_MT_OCI_INDEX,
                     "manifests");
}

int store_index_load(struct store *s, json_t **index, struct mf_err *err)
{
    char *path = store_join(s, STORE_INDEX_FILE, err);
    if (!path)
        return MF_ENOMEM;
    char *text = NULL;
    size_t len = 0;
    int rc = mf_file_read(path, STORE_INDEX_MAX, &text, &len, err);
    if (rc == MF_ENOTFOUND) {
        *index = empty_index();
        rc = *index ? 0 : mf_err_set(err, MF_ENOMEM, "out of memory");
    } else if (!rc) {
        rc = store_oci_parse_index(text, len, path, index, err);
    }
    if (rc && rc != MF_ENOMEM && err && err->code == rc) {
        char msg[MF_ERR_MSG_MAX];
        snprintf(msg, sizeof msg, "%s", err->msg);
        mf_err_set(err, rc,
                   "%s (the store's tags are unreadable; index.json was left as it is: repair or "
                   "remove it)",
                   msg);
    }
    free(text);
    free(path);
    return rc;
}

int store_index_save(struct store *s, json_t *index, struct mf_err *err)
{
    assert(s->index_locked);
    struct mf_buf b;
    mf_buf_init(&b, STORE_INDEX_MAX);
    char *path = store_join(s, STORE_INDEX_FILE, err);
    int rc = path ? mf_json_dump(index, JSON_INDENT(2) | JSON_SORT_KEYS, &b, err) : MF_ENOMEM;
    if (!rc)
        rc = mf_buf_putc(&b, '\n', err);
    if (!rc)
        rc = mf_file_write_atomic(path, b.data, b.len, err);
    mf_buf_free(&b);
    free(path);
    return rc;
}

/* The tag of a descriptor in the index, or NULL (validated by store_oci_parse_index). */
static const char *desc_tag(const json_t *d)
{
    return json_string_value(
        json_object_get(json_object_get(d, "annotations"), STORE_ANN_REF_NAME));
}

/* Removes every descriptor tagged name; returns how many went. */
static size_t drop_tag(json_t *manifests, const char *name)
{
    size_t dropped = 0;
    for (size_t i = json_array_size(manifests); i-- > 0;) {
        const char *t = desc_tag(json_array_get(manifests, i));
        if (t && strcmp(t, name) == 0) {
            json_array_remove(manifests, i);
            dropped++;
        }
    }
    return dropped;
}

static json_t *make_desc(const char *name, const struct store_desc *d, const char *created,
                         struct mf_err *err)
{
    json_t *ann = json_pack("{s:s}", STORE_ANN_REF_NAME, name);
    if (ann && created && *created)
        json_object_set_new(ann, STORE_ANN_CREATED, json_string(created));
    json_t *v = ann ? json_pack("{s:s, s:s, s:I, s:o}", "mediaType", d->media_type, "digest",
                                d->digest, "size", (json_int_t)d->size, "annotations", ann)
                    : NULL;
    if (!v) {
        mf_err_set(err, MF_ENOMEM, "out of memory");
        return NULL;
    }
    struct store_desc check;
    if (store_oci_parse_desc(v, name, &check, err) != 0) {
        json_decref(v);
        return NULL;
    }
    return v;
}

/* ---- the tag API ------------------------------------------------------------------ */

int store_tag_set(struct store *s, const char *name, const struct store_desc *d,
                  const char *created, struct mf_err *err)
{
    if (!store_tag_valid(name))
        return mf_err_set(err, MF_EINVAL,
                          "\"%.300s\" is not a valid tag (letters, digits and -._:@+ between them, "
                          "/ between parts, at most %d chars)",
                          name, STORE_REF_MAX - 1);
    json_t *desc = make_desc(name, d, created, err);
    if (!desc)
        return err ? err->code : MF_EINVAL;
    json_t *index = NULL;
    int rc = store_lock_index(s, err);
    if (!rc)
        rc = store_index_load(s, &index, err);
    if (!rc) {
        json_t *m = json_object_get(index, "manifests");
        drop_tag(m, name);
        rc = json_array_append(m, desc) ? mf_err_set(err, MF_ENOMEM, "out of memory") : 0;
    }
    if (!rc)
        rc = store_index_save(s, index, err);
    store_unlock_index(s);
    json_decref(index);
    json_decref(desc);
    return rc;
}

static void fill_tag(const json_t *v, struct store_tag *t)
{
    const char *name = desc_tag(v);
    const char *created =
        json_string_value(json_object_get(json_object_get(v, "annotations"), STORE_ANN_CREATED));
    snprintf(t->name, sizeof t->name, "%s", name ? name : "");
    snprintf(t->created, sizeof t->created, "%s", created ? created : "");
    store_oci_parse_desc(v, "index.json", &t->desc, NULL); /* validated when loaded */
}

int store_tag_get(struct store *s, const char *name, struct store_tag *t, struct mf_err *err)
{
    json_t *index = NULL;
    int rc = store_index_load(s, &index, err);
    if (rc)
        return rc;
    json_t *m = json_object_get(index, "manifests");
    const json_t *found = NULL;
    for (size_t i = 0; i < json_array_size(m); i++) {
        const char *tag = desc_tag(json_array_get(m, i));
        if (tag && strcmp(tag, name) == 0)
            found = json_array_get(m, i); /* the last one, if a hand-made index repeats it */
    }
    if (found)
        fill_tag(found, t);
    else
        rc = mf_err_set(err, MF_ENOTFOUND, "no image tagged %.300s in %s", name, s->root);
    json_decref(index);
    return rc;
}

int store_tag_remove(struct store *s, const char *name, struct mf_err *err)
{
    json_t *index = NULL;
    int rc = store_lock_index(s, err);
    if (!rc)
        rc = store_index_load(s, &index, err);
    if (!rc && drop_tag(json_object_get(index, "manifests"), name) == 0)
        rc = mf_err_set(err, MF_ENOTFOUND, "no image tagged %.300s in %s", name, s->root);
    if (!rc)
        rc = store_index_save(s, index, err);
    store_unlock_index(s);
    json_decref(index);
    return rc;
}

static int cmp_tag(const void *a, const void *b)
{
    return strcmp(((const struct store_tag *)a)->name, ((const struct store_tag *)b)->name);
}

int store_tag_list(struct store *s, struct store_tag **tags, size_t *n, struct mf_err *err)
{
    json_t *index = NULL;
    int rc = store_index_load(s, &index, err);
    if (rc)
        return rc;
    json_t *m = json_object_get(index, "manifests");
    struct store_tag *out = calloc(json_array_size(m) + 1, sizeof *out);
    size_t k = 0, i;
    json_t *v;
    if (!out) {
        json_decref(index);
        return mf_err_set(err, MF_ENOMEM, "out of memory");
    }
    json_array_foreach (m, i, v) {
        if (desc_tag(v))
            fill_tag(v, &out[k++]);
    }
    json_decref(index);
    qsort(out, k, sizeof *out, cmp_tag);
    if (!k) {
        free(out);
        out = NULL;
    }
    *tags = out;
    *n = k;
    return 0;
}
