/*
 * source_ref.c: FROM/ADAPTER by name: a local or registry image -> a GGUF
 * blob and the base's defaults (source_ref.h says how names are looked up
 * and which layer is picked).
 *
 * Resolution [source_ref_resolve]:
 *   LOOKUP   --oci_resolve(name | name:latest) hit-----------------> MANIFEST (local)
 *   LOOKUP   --miss: registry_pull_open + registry_pull_manifest---> MANIFEST (remote)
 *   MANIFEST --source_ref_pick--------------------------------------> PICKED
 *   PICKED   --remote: weight + config/text layers, verified--------> BLOBS
 *   BLOBS    --tar: the member copied out (cached by layer digest)--> GGUF
 *   GGUF     --defaults from model.yaml or the Ollama layers--------> DONE
 *
 * Invariants: nothing is tagged; a blob enters the store only through the
 * store's verifying writers (registry_pull_blob, store_blob_writer_commit),
 * so a tampered layer leaves nothing behind; a tar layer is never rewritten,
 * so an image built from it can carry the same layer digest.
 */
#include "fetch/source_ref.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <archive.h>
#include <archive_entry.h>
#include <yaml.h>

#include "common/json.h"
#include "common/sha256.h"
#include "image/oci.h"

#define MT_OLLAMA "application/vnd.ollama.image."
#define MT_DMR_GGUF "application/vnd.docker.ai.gguf.v3"
#define MT_MP_WEIGHT "application/vnd.cncf.model.weight.v1."
#define MFC_CONFIG_MEMBER "etc/mfc/model.yaml"
#define MFC_MODEL_MEMBER "models/model.gguf"
#define EXTRACT_SALT "mfc-source-ref/v1" /* bump when an extraction record changes meaning */
#define COPY_CHUNK (1u << 20)
#define YAML_DEPTH_MAX 16

/* ---- picking the layer ----------------------------------------------------------- */

enum cls { CLS_NONE, CLS_MODEL, CLS_ADAPTER, CLS_OTHER };

static int has_suffix(const char *s, const char *suf)
{
    size_t n = strlen(s), k = strlen(suf);
    return n >= k && strcmp(s + n - k, suf) == 0;
}

static int is_tar_mt(const char *mt)
{
    return strcmp(mt, "application/vnd.oci.image.layer.v1.tar") == 0 ||
           strcmp(mt, "application/vnd.docker.image.rootfs.diff.tar") == 0;
}

/* Classifies one layer; *tar and member are set for a GGUF inside a tar. */
static enum cls classify(const char *mt, const char *fp, int *tar)
{
    *tar = 0;
    if (strncmp(mt, MT_OLLAMA, strlen(MT_OLLAMA)) == 0) {
        const char *k = mt + strlen(MT_OLLAMA);
        return strcmp(k, "model") == 0     ? CLS_MODEL
               : strcmp(k, "adapter") == 0 ? CLS_ADAPTER
               : strcmp(k, "projector") == 0 || strcmp(k, "draft") == 0 ? CLS_OTHER
                                                                        : CLS_NONE;
    }
    if (strcmp(mt, MT_DMR_GGUF) == 0)
        return CLS_MODEL;
    if (strcmp(mt, MT_DMR_GGUF ".lora") == 0)
        return CLS_ADAPTER;
    if (strcmp(mt, MT_DMR_GGUF ".mmproj") == 0 || strcmp(mt, "application/vnd.docker.ai.mmproj") == 0)
        return CLS_OTHER;
    int gguf_path = fp && has_suffix(fp, ".gguf");
    if (strncmp(mt, MT_MP_WEIGHT, strlen(MT_MP_WEIGHT)) == 0) {
        const char *k = mt + strlen(MT_MP_WEIGHT);
        if (strcmp(k, "gguf") == 0 || (strcmp(k, "raw") == 0 && gguf_path))
            return CLS_MODEL;
        if (strcmp(k, "tar") == 0 && gguf_path) {
            *tar = 1;
            return CLS_MODEL;
        }
        return CLS_NONE;
    }
    if (is_tar_mt(mt) && gguf_path) {
        *tar = 1;
        if (strncmp(fp, "adapters/", 9) == 0)
            return CLS_ADAPTER;
        if (strcmp(fp, "models/draft.gguf") == 0)
            return CLS_OTHER;
        return CLS_MODEL;
    }
    return CLS_NONE;
}

static const char *strip_slash(const char *s)
{
    while (s && *s == '/')
        s++;
    return s;
}

int source_ref_pick(const json_t *manifest, int adapter, struct source_ref_pick *p,
                    struct mf_err *err)
{
    const json_t *layers = json_object_get(manifest, "layers");
    const char *cfg_mt =
        json_string_value(json_object_get(json_object_get(manifest, "config"), "mediaType"));
    const char *art = json_string_value(json_object_get(manifest, "artifactType"));
    int cand[2] = {-1, -1}, n_cand = 0, other[2] = {-1, -1}, n_other = 0, mfc_model = -1;
    size_t i;
    json_t *l;
    memset(p, 0, sizeof *p);
    p->weight = p->config = p->tmpl = p->system = p->params = p->messages = -1;
    p->format = "oci";
    if ((cfg_mt && strncmp(cfg_mt, "application/vnd.docker.ai.", 26) == 0))
        p->format = "docker-model";
    else if ((cfg_mt && strncmp(cfg_mt, "application/vnd.cncf.model.", 27) == 0) ||
             (art && strncmp(art, "application/vnd.cncf.model.", 27) == 0))
        p->format = "modelpack";
    if (!json_is_array(layers))
        return mf_err_set(err, MF_EFORMAT, "the manifest has no layers");
    json_array_foreach (layers, i, l) {
        const char *mt = json_string_value(json_object_get(l, "mediaType"));
        const char *fp = strip_slash(json_string_value(
            json_object_get(json_object_get(l, "annotations"), OCI_ANN_FILEPATH)));
        int tar, idx = (int)i;
        if (!mt)
            continue;
        if (strncmp(mt, MT_OLLAMA, strlen(MT_OLLAMA)) == 0) {
            const char *k = mt + strlen(MT_OLLAMA);
            p->format = "ollama";
            if (strcmp(k, "template") == 0 || (strcmp(k, "prompt") == 0 && p->tmpl < 0))
                p->tmpl = idx;
            else if (strcmp(k, "system") == 0)
                p->system = idx;
            else if (strcmp(k, "params") == 0)
                p->params = idx;
            else if (strcmp(k, "messages") == 0)
                p->messages = idx;
        }
        if (fp && strcmp(fp, MFC_CONFIG_MEMBER) == 0) {
            p->config = idx;
            p->format = "mfc";
        }
        enum cls c = classify(mt, fp, &tar);
        enum cls want = adapter ? CLS_ADAPTER : CLS_MODEL;
        if (c == want || (adapter && c == CLS_MODEL)) {
            int *arr = c == want ? cand : other, *n = c == want ? &n_cand : &n_other;
            if (*n < 2)
                arr[*n] = idx;
            (*n)++;
            if (!adapter && tar && fp && strcmp(fp, MFC_MODEL_MEMBER) == 0)
                mfc_model = idx;
        }
    }
    /* mfc's own model layer wins over any other GGUF-looking layer */
    if (mfc_model >= 0) {
        cand[0] = mfc_model;
        n_cand = 1;
    }
    /* an adapter image may carry its LoRA as its only, model-typed GGUF */
    if (adapter && n_cand == 0) {
        memcpy(cand, other, sizeof cand);
        n_cand = n_other;
    }
    if (n_cand == 0)
        return mf_err_set(err, MF_ENOTFOUND, "the %s manifest has no GGUF %s layer", p->format,
                          adapter ? "adapter" : "model");
    if (n_cand > 1) {
        const char *d0 = json_string_value(json_object_get(json_array_get(layers, cand[0]), "digest"));
        const char *d1 = json_string_value(json_object_get(json_array_get(layers, cand[1]), "digest"));
        return mf_err_set(err, MF_EINVAL,
                          "the image has %d GGUF %s layers (%s, %s, ...), so which one is meant "
                          "is ambiguous; name a file or an image with one",
                          n_cand, adapter ? "adapter" : "model", d0 ? d0 : "?", d1 ? d1 : "?");
    }
    p->weight = cand[0];
    const json_t *w = json_array_get(layers, (size_t)p->weight);
    const char *fp = strip_slash(json_string_value(
        json_object_get(json_object_get(w, "annotations"), OCI_ANN_FILEPATH)));
    classify(json_string_value(json_object_get(w, "mediaType")), fp, &p->tar);
    if (p->tar)
        snprintf(p->member, sizeof p->member, "%s", fp);
    return 0;
}

/* ---- YAML -> JSON ---------------------------------------------------------------- */

static json_t *plain_scalar(const char *v, size_t n)
{
    char *end;
    if (n == 4 && memcmp(v, "true", 4) == 0)
        return json_true();
    if (n == 5 && memcmp(v, "false", 5) == 0)
        return json_false();
    if ((n == 4 && memcmp(v, "null", 4) == 0) || (n == 1 && v[0] == '~'))
        return json_null();
    if (n > 0) {
        long long i = strtoll(v, &end, 10);
        if ((size_t)(end - v) == n)
            return json_integer(i);
        double d = strtod(v, &end);
        if ((size_t)(end - v) == n)
            return json_real(d);
    }
    return json_stringn(v, n);
}

static json_t *yaml_node_json(yaml_document_t *doc, yaml_node_t *n, int depth)
{
    if (!n || depth > YAML_DEPTH_MAX)
        return NULL;
    if (n->type == YAML_SCALAR_NODE) {
        const char *v = (const char *)n->data.scalar.value;
        size_t len = n->data.scalar.length;
        return n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE ? plain_scalar(v, len)
                                                               : json_stringn(v, len);
    }
    if (n->type == YAML_SEQUENCE_NODE) {
        json_t *a = json_array();
        for (yaml_node_item_t *it = n->data.sequence.items.start; a && it < n->data.sequence.items.top; it++)
            if (json_array_append_new(a, yaml_node_json(doc, yaml_document_get_node(doc, *it),
                                                        depth + 1)) != 0) {
                json_decref(a);
                a = NULL;
            }
        return a;
    }
    json_t *o = json_object();
    for (yaml_node_pair_t *pr = n->data.mapping.pairs.start; o && pr < n->data.mapping.pairs.top; pr++) {
        yaml_node_t *k = yaml_document_get_node(doc, pr->key);
        if (!k || k->type != YAML_SCALAR_NODE ||
            json_object_setn_new(o, (const char *)k->data.scalar.value, k->data.scalar.length,
                                 yaml_node_json(doc, yaml_document_get_node(doc, pr->value),
                                                depth + 1)) != 0) {
            json_decref(o);
            o = NULL;
        }
    }
    return o;
}

json_t *source_ref_yaml_json(const char *text, size_t len, struct mf_err *err)
{
    yaml_parser_t ps;
    yaml_document_t doc;
    json_t *out = NULL;
    if (!yaml_parser_initialize(&ps)) {
        mf_err_set(err, MF_ENOMEM, "out of memory");
        return NULL;
    }
    yaml_parser_set_input_string(&ps, (const unsigned char *)text, len);
    if (!yaml_parser_load(&ps, &doc)) {
        mf_err_set(err, MF_EFORMAT, "model.yaml: %s at line %zu",
                   ps.problem ? ps.problem : "not YAML", ps.problem_mark.line + 1);
        yaml_parser_delete(&ps);
        return NULL;
    }
    out = yaml_node_json(&doc, yaml_document_get_root_node(&doc), 0);
    if (!json_is_object(out)) {
        json_decref(out);
        out = NULL;
        mf_err_set(err, MF_EFORMAT, "model.yaml is not a mapping");
    }
    yaml_document_delete(&doc);
    yaml_parser_delete(&ps);
    return out;
}

/* ---- tar members ------------------------------------------------------------------ */

/* Opens the tar (gzip'd or not) blob and positions it at member. */
static int tar_find(struct store *s, const char *digest, const char *member, struct archive **out,
                    int *fd, struct mf_err *err)
{
    struct archive_entry *e;
    struct archive *a = archive_read_new();
    int rc = a ? store_blob_open(s, digest, 0, fd, err) : mf_err_set(err, MF_ENOMEM, "out of memory");
    *out = NULL;
    if (rc) {
        archive_read_free(a);
        return rc;
    }
    archive_read_support_format_tar(a);
    archive_read_support_filter_gzip(a);
    archive_read_support_filter_zstd(a);
    if (archive_read_open_fd(a, *fd, 65536) != ARCHIVE_OK)
        rc = mf_err_set(err, MF_EFORMAT, "layer %s: %s", digest, archive_error_string(a));
    while (!rc) {
        int r = archive_read_next_header(a, &e);
        if (r == ARCHIVE_EOF) {
            rc = mf_err_set(err, MF_ENOTFOUND, "layer %s has no %s", digest, member);
            break;
        }
        if (r != ARCHIVE_OK && r != ARCHIVE_WARN) {
            rc = mf_err_set(err, MF_EFORMAT, "layer %s: %s", digest, archive_error_string(a));
            break;
        }
        const char *name = archive_entry_pathname(e);
        if (name && strncmp(name, "./", 2) == 0)
            name += 2;
        if (name && strcmp(strip_slash(name), member) == 0 &&
            archive_entry_filetype(e) == AE_IFREG) {
            *out = a;
            return 0;
        }
    }
    archive_read_free(a);
    close(*fd);
    *fd = -1;
    return rc;
}

static int extract_key(const char *layer, const char *member, char key[STORE_DIGEST_BUF],
                       struct mf_err *err)
{
    char text[STORE_DIGEST_BUF + SOURCE_REF_PATH_MAX + 32], hex[MF_SHA256_HEX_LEN + 1];
    uint8_t d[MF_SHA256_LEN];
    int n = snprintf(text, sizeof text, "%s%c%s%c%s", EXTRACT_SALT, 0, layer, 0, member);
    int rc = mf_sha256_mem(text, (size_t)n, d, err);
    if (!rc) {
        mf_sha256_hex(d, hex);
        snprintf(key, STORE_DIGEST_BUF, "sha256:%s", hex);
    }
    return rc;
}

/* The GGUF member of a tar layer as its own blob (a build record maps layer
 * -> blob, so the copy is made once per layer). */
static int extract_gguf(struct store *s, struct source_ref_result *r, const char *member,
                        struct mf_err *err)
{
    char key[STORE_DIGEST_BUF];
    json_t *rec = NULL;
    struct mf_err ignored;
    struct archive *a = NULL;
    struct store_blob_writer *w = NULL;
    int fd = -1;
    int rc = extract_key(r->layer.digest, member, key, err);
    if (!rc && store_cache_get(s, key, &rec, &ignored) == 0) {
        const char *d = json_string_value(json_object_get(rec, "digest"));
        if (d && store_blob_exists(s, d)) {
            snprintf(r->gguf, sizeof r->gguf, "%s", d);
            r->gguf_size = (uint64_t)json_integer_value(json_object_get(rec, "size"));
            json_decref(rec);
            return 0;
        }
        json_decref(rec);
    }
    if (!rc)
        rc = tar_find(s, r->layer.digest, member, &a, &fd, err);
    if (!rc)
        rc = store_blob_writer_open(s, NULL, &w, err);
    char *buf = rc ? NULL : malloc(COPY_CHUNK);
    if (!rc && !buf)
        rc = mf_err_set(err, MF_ENOMEM, "out of memory");
    la_ssize_t got = 0;
    while (!rc && (got = archive_read_data(a, buf, COPY_CHUNK)) > 0)
        rc = store_blob_writer_write(w, buf, (size_t)got, err);
    if (!rc && got < 0)
        rc = mf_err_set(err, MF_EFORMAT, "layer %s: %s", r->layer.digest, archive_error_string(a));
    if (!rc) {
        rc = store_blob_writer_commit(w, r->gguf, &r->gguf_size, err);
        w = NULL;
    }
    store_blob_writer_abort(w);
    free(buf);
    archive_read_free(a);
    if (fd >= 0)
        close(fd);
    if (!rc) {
        r->transferred = 1;
        rec = json_pack("{s:s, s:I}", "digest", r->gguf, "size", (json_int_t)r->gguf_size);
        if (rec)
            store_cache_put(s, key, rec, &ignored); /* best effort: costs a copy next time */
        json_decref(rec);
    }
    return rc;
}

/* A small member of a tar layer into memory. */
static int tar_read(struct store *s, const char *digest, const char *member, char **text,
                    size_t *len, struct mf_err *err)
{
    struct archive *a = NULL;
    int fd = -1;
    int rc = tar_find(s, digest, member, &a, &fd, err);
    struct mf_buf b;
    mf_buf_init(&b, SOURCE_REF_TEXT_MAX);
    char chunk[8192];
    la_ssize_t got = 0;
    while (!rc && (got = archive_read_data(a, chunk, sizeof chunk)) > 0)
        rc = mf_buf_append(&b, chunk, (size_t)got, err);
    if (!rc && got < 0)
        rc = mf_err_set(err, MF_EFORMAT, "layer %s: %s", digest, archive_error_string(a));
    archive_read_free(a);
    if (fd >= 0)
        close(fd);
    if (!rc && !(*text = malloc(b.len + 1)))
        rc = mf_err_set(err, MF_ENOMEM, "out of memory");
    if (!rc) {
        memcpy(*text, b.len ? b.data : "", b.len);
        (*text)[b.len] = '\0';
        *len = b.len;
    }
    mf_buf_free(&b);
    return rc;
}

/* ---- defaults ------------------------------------------------------------------- */

static int layer_desc(const json_t *manifest, int i, struct store_desc *d, struct mf_err *err)
{
    return store_oci_parse_desc(json_array_get(json_object_get(manifest, "layers"), (size_t)i),
                                "layer", d, err);
}

/* mfc: template, system, params, messages, license and adapters of
 * etc/mfc/model.yaml (the adapters only to say that they are not inherited). */
static int mfc_defaults(struct store *s, const json_t *m, const struct source_ref_pick *p,
                        json_t *out, struct mf_err *err)
{
    static const char *const keys[] = {"template", "system", "params",
                                       "messages", "license", "adapters"};
    struct store_desc d;
    char *text = NULL;
    size_t len = 0;
    int rc = layer_desc(m, p->config, &d, err);
    if (!rc)
        rc = tar_read(s, d.digest, MFC_CONFIG_MEMBER, &text, &len, err);
    json_t *doc = rc ? NULL : source_ref_yaml_json(text, len, err);
    if (!rc && !doc)
        rc = err->code;
    for (size_t i = 0; !rc && i < sizeof keys / sizeof keys[0]; i++) {
        json_t *v = json_object_get(doc, keys[i]);
        if (v && json_object_set(out, keys[i], v) != 0)
            rc = mf_err_set(err, MF_ENOMEM, "out of memory");
    }
    json_decref(doc);
    free(text);
    return rc;
}

/* Ollama: the template and system layers are text, params and messages JSON. */
static int ollama_defaults(struct store *s, const json_t *m, const struct source_ref_pick *p,
                           json_t *out, struct mf_err *err)
{
    const int idx[] = {p->tmpl, p->system, p->params, p->messages};
    static const char *const keys[] = {"template", "system", "params", "messages"};
    int rc = 0;
    for (size_t i = 0; !rc && i < 4; i++) {
        struct store_desc d;
        char *text = NULL;
        size_t len = 0;
        if (idx[i] < 0)
            continue;
        rc = layer_desc(m, idx[i], &d, err);
        if (!rc && d.size > SOURCE_REF_TEXT_MAX)
            rc = mf_err_set(err, MF_EFORMAT, "the %s layer is %llu bytes, more than %u", keys[i],
                            (unsigned long long)d.size, SOURCE_REF_TEXT_MAX);
        if (!rc)
            rc = store_blob_read(s, d.digest, SOURCE_REF_TEXT_MAX, &text, &len, err);
        json_t *v = NULL;
        if (!rc)
            v = i < 2 ? json_stringn(text, len) : mf_json_parse(text, len, keys[i], err);
        if (!rc && !v)
            rc = err->code ? err->code : MF_ENOMEM;
        if (!rc && json_object_set_new(out, keys[i], v) != 0)
            rc = mf_err_set(err, MF_ENOMEM, "out of memory");
        free(text);
    }
    return rc;
}

/* ---- resolution ------------------------------------------------------------------ */

int source_ref_remote(const char *name, char *out, size_t cap, struct mf_err *err)
{
    const char *slash = strchr(name, '/');
    size_t first = slash ? (size_t)(slash - name) : strlen(name);
    int host = slash && (memchr(name, '.', first) || memchr(name, ':', first) ||
                         (first == 9 && strncmp(name, "localhost", 9) == 0));
    int n = host    ? snprintf(out, cap, "%s", name)
            : slash ? snprintf(out, cap, "%s/%s", SOURCE_REF_OLLAMA_HOST, name)
                    : snprintf(out, cap, "%s/library/%s", SOURCE_REF_OLLAMA_HOST, name);
    if (n < 0 || (size_t)n >= cap)
        return mf_err_set(err, MF_EINVAL, "'%.200s' is too long for a reference", name);
    return 0;
}

/* The local manifest for name (name, then name:latest); MF_ENOTFOUND when none. */
static int local_manifest(struct store *s, const char *name, struct store_desc *d, char **text,
                          size_t *len, struct mf_err *err)
{
    char tagged[STORE_REF_MAX + 8];
    const char *slash = strrchr(name, '/');
    int rc = MF_ENOTFOUND;
    struct mf_err e;
    if (store_tag_valid(name) || store_digest_valid(name))
        rc = oci_resolve(s, name, d, &e);
    if (rc == MF_ENOTFOUND && !strchr(slash ? slash : name, ':') &&
        snprintf(tagged, sizeof tagged, "%s:latest", name) < (int)sizeof tagged &&
        store_tag_valid(tagged))
        rc = oci_resolve(s, tagged, d, &e);
    if (rc == MF_ENOTFOUND)
        return rc;
    if (rc) {
        *err = e;
        return rc;
    }
    return store_blob_read(s, d->digest, STORE_MANIFEST_MAX, text, len, err);
}

/* Pulls what p needs from a registry: the weight layer and the small ones. */
static int pull_needed(struct registry_pull_session *ps, struct store *s, const json_t *m,
                       const struct source_ref_pick *p, int *fetched, struct mf_err *err)
{
    const int idx[] = {p->weight, p->config, p->tmpl, p->system, p->params, p->messages};
    int rc = 0;
    for (size_t i = 0; !rc && i < sizeof idx / sizeof idx[0]; i++) {
        struct store_desc d;
        if (idx[i] < 0)
            continue;
        rc = layer_desc(m, idx[i], &d, err);
        if (!rc && !store_blob_exists(s, d.digest)) {
            *fetched = 1;
            rc = registry_pull_blob(ps, s, &d, err);
        }
    }
    return rc;
}

static int from_manifest(struct store *s, struct registry_pull_session *ps, const char *text,
                         size_t len, int adapter, struct source_ref_result *r, struct mf_err *err)
{
    struct source_ref_pick p;
    json_t *m = mf_json_parse(text, len, "manifest", err);
    int rc = m ? source_ref_pick(m, adapter, &p, err) : err->code;
    if (!rc)
        rc = layer_desc(m, p.weight, &r->layer, err);
    if (!rc && ps)
        rc = pull_needed(ps, s, m, &p, &r->transferred, err);
    if (!rc && p.tar) {
        r->layer_tar = 1;
        snprintf(r->filepath, sizeof r->filepath, "/%s", p.member);
        rc = extract_gguf(s, r, p.member, err);
    } else if (!rc) {
        snprintf(r->gguf, sizeof r->gguf, "%s", r->layer.digest);
        r->gguf_size = r->layer.size;
    }
    if (!rc && !(r->defaults = json_object()))
        rc = mf_err_set(err, MF_ENOMEM, "out of memory");
    if (!rc && p.config >= 0)
        rc = mfc_defaults(s, m, &p, r->defaults, err);
    else if (!rc && strcmp(p.format, "ollama") == 0)
        rc = ollama_defaults(s, m, &p, r->defaults, err);
    json_decref(m);
    return rc;
}

int source_ref_resolve(struct store *s, const char *name, int adapter,
                       const struct registry_opts *ro, struct source_ref_result *r,
                       struct mf_err *err)
{
    struct store_desc d;
    struct registry_pull_session *ps = NULL;
    char *text = NULL, remote[1024];
    size_t len = 0;
    memset(r, 0, sizeof *r);
    int rc = local_manifest(s, name, &d, &text, &len, err);
    if (rc == 0) {
        snprintf(r->where, sizeof r->where, "the local image %s", name);
    } else if (rc == MF_ENOTFOUND) {
        struct mf_err e;
        rc = source_ref_remote(name, remote, sizeof remote, err);
        if (!rc)
            rc = registry_pull_open(remote, ro, NULL, &ps, &e);
        if (!rc)
            rc = registry_pull_manifest(ps, &text, &len, &d, &e);
        if (rc && rc != MF_ENOMEM)
            rc = mf_err_set(err, MF_ENOTFOUND,
                            "'%s' is not an image in the store (%s), and %s could not be "
                            "pulled: %s",
                            name, store_root(s), remote, e.msg);
        else if (rc)
            *err = e;
        snprintf(r->where, sizeof r->where, "%s", remote);
    }
    if (!rc)
        snprintf(r->manifest, sizeof r->manifest, "%s", d.digest);
    if (!rc && (rc = from_manifest(s, ps, text, len, adapter, r, err)) != 0)
        mf_err_prefix(err, "%s", r->where);
    if (rc) {
        source_ref_result_fini(r);
        memset(r, 0, sizeof *r);
    }
    registry_pull_close(ps);
    free(text);
    return rc;
}

void source_ref_result_fini(struct source_ref_result *r)
{
    if (!r)
        return;
    json_decref(r->defaults);
    r->defaults = NULL;
}
