/*
 * store_oci.c: validation of the OCI JSON the store reads back from disk.
 *
 * index.json and manifest blobs are untrusted: another tool may have written
 * them, or the disk may have rotted. Every descriptor is checked field by
 * field (image-spec descriptor.md): a string mediaType, a sha256 digest of 64
 * lowercase hex digits (the only algorithm the store holds), a non-negative
 * integer size, string-valued annotations. Counts are capped so a hostile file
 * cannot make gc allocate without bound. Nothing here touches the file system.
 */
#include "store/store.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/json.h"

#define MAX_REFS 65536       /* descriptors in one index or manifest; real ones have < 100 */
#define MAX_ANNOTATION 65536 /* bytes of one annotation value */

int store_oci_is_manifest(const char *mt)
{
    return mt &&
           (strcmp(mt, STORE_MT_OCI_MANIFEST) == 0 || strcmp(mt, STORE_MT_OCI_INDEX) == 0 ||
            strcmp(mt, STORE_MT_DOCKER_MANIFEST) == 0 || strcmp(mt, STORE_MT_DOCKER_LIST) == 0);
}

static int is_index_type(const char *mt)
{
    return strcmp(mt, STORE_MT_OCI_INDEX) == 0 || strcmp(mt, STORE_MT_DOCKER_LIST) == 0;
}

/* RFC 6838 restricted names: type "/" subtype, each from [A-Za-z0-9!#$&^_.+-]. */
static int media_type_valid(const char *s)
{
    size_t n = strlen(s);
    int slashes = 0;
    if (n == 0 || n >= STORE_MEDIA_TYPE_MAX || s[0] == '/' || s[n - 1] == '/')
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c == '/')
            slashes++;
        else if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                   strchr("!#$&^_.+-", c)))
            return 0;
    }
    return slashes == 1;
}

static int check_annotations(const json_t *v, const char *what, struct mf_err *err)
{
    json_t *ann = json_object_get(v, "annotations");
    if (!ann)
        return 0;
    if (!json_is_object(ann))
        return mf_err_set(err, MF_EFORMAT, "%s: \"annotations\" must be an object", what);
    const char *key;
    json_t *val;
    json_object_foreach (ann, key, val) {
        if (!json_is_string(val) || json_string_length(val) > MAX_ANNOTATION)
            return mf_err_set(err, MF_EFORMAT,
                              "%s: annotation \"%.80s\" must be a string of at most %d bytes", what,
                              key, MAX_ANNOTATION);
    }
    return 0;
}

int store_oci_parse_desc(const json_t *v, const char *what, struct store_desc *d,
                         struct mf_err *err)
{
    const char *mt, *digest;
    int64_t size;
    if (!json_is_object(v))
        return mf_err_set(err, MF_EFORMAT, "%s: a descriptor must be an object", what);
    int rc = mf_json_get_str(v, "mediaType", what, &mt, err);
    if (!rc && !media_type_valid(mt))
        rc = mf_err_set(err, MF_EFORMAT, "%s: \"%.80s\" is not a media type", what, mt);
    if (!rc)
        rc = mf_json_get_str(v, "digest", what, &digest, err);
    if (!rc)
        rc = store_digest_check(digest, what, err);
    if (!rc)
        rc = mf_json_get_int(v, "size", what, &size, err);
    if (!rc && size < 0)
        rc = mf_err_set(err, MF_EFORMAT, "%s: size %lld is negative", what, (long long)size);
    if (!rc)
        rc = check_annotations(v, what, err);
    /* A missing field or a bad digest string inside a document is a malformed
     * document, whatever the helper that noticed calls it. */
    if (rc == MF_ENOTFOUND || rc == MF_EINVAL) {
        rc = MF_EFORMAT;
        if (err)
            err->code = rc;
    }
    if (rc)
        return rc;
    snprintf(d->media_type, sizeof d->media_type, "%s", mt);
    snprintf(d->digest, sizeof d->digest, "%s", digest);
    d->size = (uint64_t)size;
    return 0;
}

static int check_schema(const json_t *v, const char *what, struct mf_err *err)
{
    int64_t ver;
    if (!json_is_object(v))
        return mf_err_set(err, MF_EFORMAT, "%s: must be a JSON object", what);
    int rc = mf_json_get_int(v, "schemaVersion", what, &ver, err);
    if (rc)
        return rc == MF_ENOTFOUND ? mf_err_set(err, MF_EFORMAT, "%s has no schemaVersion", what)
                                  : rc;
    if (ver != 2)
        return mf_err_set(err, MF_EUNSUPPORTED, "%s: schemaVersion %lld is not 2", what,
                          (long long)ver);
    return 0;
}

/* Validates every element of arr as a descriptor; with out, appends copies. */
static int parse_desc_array(const json_t *arr, const char *key, const char *what,
                            struct store_desc *out, size_t *n, struct mf_err *err)
{
    if (!json_is_array(arr))
        return mf_err_set(err, MF_EFORMAT, "%s: \"%s\" must be an array", what, key);
    if (json_array_size(arr) > MAX_REFS)
        return mf_err_set(err, MF_ERANGE, "%s: \"%s\" has %zu entries (limit %d)", what, key,
                          json_array_size(arr), MAX_REFS);
    size_t i;
    json_t *v;
    json_array_foreach (arr, i, v) {
        char sub[200];
        snprintf(sub, sizeof sub, "%s: %s[%zu]", what, key, i);
        struct store_desc d;
        int rc = store_oci_parse_desc(v, sub, &d, err);
        if (rc)
            return rc;
        if (out)
            out[(*n)++] = d;
    }
    return 0;
}

int store_oci_parse_index(const char *text, size_t len, const char *what, json_t **index,
                          struct mf_err *err)
{
    if (len > STORE_INDEX_MAX)
        return mf_err_set(err, MF_ERANGE, "%s is larger than %u bytes", what, STORE_INDEX_MAX);
    json_t *v = mf_json_parse(text, len, what, err);
    if (!v)
        return MF_EFORMAT;
    const char *mt = NULL;
    int rc = check_schema(v, what, err);
    if (!rc && json_object_get(v, "mediaType")) {
        rc = mf_json_get_str(v, "mediaType", what, &mt, err);
        if (!rc && strcmp(mt, STORE_MT_OCI_INDEX) != 0)
            rc = mf_err_set(err, MF_EFORMAT, "%s: mediaType \"%.80s\" is not an image index", what,
                            mt);
    }
    json_t *m = json_object_get(v, "manifests");
    if (!rc && !m)
        rc = mf_err_set(err, MF_EFORMAT, "%s has no \"manifests\" array", what);
    if (!rc)
        rc = parse_desc_array(m, "manifests", what, NULL, NULL, err);
    if (rc) {
        json_decref(v);
        return rc;
    }
    *index = v;
    return 0;
}

static size_t count_refs(const json_t *v, int index)
{
    json_t *arr = json_object_get(v, index ? "manifests" : "layers");
    return json_array_size(arr) + 2; /* + config + subject */
}

static int collect_refs(const json_t *v, int index, const char *what, struct store_desc *out,
                        size_t *n, struct mf_err *err)
{
    const char *key = index ? "manifests" : "layers";
    json_t *arr = json_object_get(v, key);
    char sub[200];
    if (!arr)
        return mf_err_set(err, MF_EFORMAT, "%s has no \"%s\" array", what, key);
    if (!index) {
        json_t *cfg = json_object_get(v, "config");
        snprintf(sub, sizeof sub, "%s: config", what);
        if (!cfg)
            return mf_err_set(err, MF_EFORMAT, "%s has no \"config\"", what);
        int rc = store_oci_parse_desc(cfg, sub, &out[(*n)++], err);
        if (rc)
            return rc;
    }
    int rc = parse_desc_array(arr, key, what, out, n, err);
    json_t *subj = json_object_get(v, "subject");
    snprintf(sub, sizeof sub, "%s: subject", what);
    if (!rc && subj)
        rc = store_oci_parse_desc(subj, sub, &out[(*n)++], err);
    return rc;
}

int store_oci_manifest_refs(const char *text, size_t len, const char *media_type, const char *what,
                            struct store_desc **refs, size_t *n, struct mf_err *err)
{
    *refs = NULL;
    *n = 0;
    if (!store_oci_is_manifest(media_type))
        return 0;
    if (len > STORE_MANIFEST_MAX)
        return mf_err_set(err, MF_ERANGE, "%s is larger than %u bytes", what, STORE_MANIFEST_MAX);
    json_t *v = mf_json_parse(text, len, what, err);
    if (!v)
        return MF_EFORMAT;
    int index = is_index_type(media_type);
    int rc = check_schema(v, what, err);
    struct store_desc *out = NULL;
    size_t k = 0;
    if (!rc && json_array_size(json_object_get(v, index ? "manifests" : "layers")) > MAX_REFS)
        rc = mf_err_set(err, MF_ERANGE, "%s references more than %d blobs", what, MAX_REFS);
    if (!rc && !(out = calloc(count_refs(v, index), sizeof *out)))
        rc = mf_err_set(err, MF_ENOMEM, "out of memory");
    if (!rc)
        rc = collect_refs(v, index, what, out, &k, err);
    json_decref(v);
    if (rc) {
        free(out);
        return rc;
    }
    *refs = k ? out : NULL;
    if (!k)
        free(out);
    *n = k;
    return 0;
}
