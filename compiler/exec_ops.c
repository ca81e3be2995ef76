/*
 * exec_ops.c: what each plan node does when the executor runs it.
 *
 *   source   fetch_run: a file or URL into the store (the blob is the output)
 *   check    gguf_open on the blob: a base needs general.architecture, an
 *            adapter general.type=adapter (the LoRA issue adds the check
 *            against the base, whose check node is already an input)
 *   layer    records the descriptor of its input blob (media type, path in the
 *            image); the image issue replaces this with a deterministic tar
 *   config   the config document as YAML, stored as a blob
 *   image    a build record (config, layers, Modelfile digest, labels) and an
 *            OCI artifact manifest over it, so the store stays a valid OCI
 *            layout and gc keeps the layers; the caller tags the manifest
 *   convert, merge, quantize, run: not yet (a clear error naming the line)
 *
 * Owns nothing past one call; every blob enters the store through the store's
 * atomic writers, so a failure here leaves no partial blob.
 */
#include "compiler/exec_int.h"

#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/gguf.h"
#include "common/json.h"

#define RECORD_MAX (16u << 20) /* a build record or manifest: tens of layers at most */

static const struct exec_node *input(const struct exec_job *j, size_t i)
{
    return &j->b->nodes[j->node->inputs[i]];
}

/* ---- source ---------------------------------------------------------------------- */

int exec_op_content(const struct exec_job *j, char content[STORE_DIGEST_BUF], int *cacheable,
                    struct mf_err *err)
{
    const struct fetch_source *src = &j->node->src;
    uint64_t size;
    *cacheable = 1;
    content[0] = '\0';
    if (j->node->op != PLAN_SOURCE)
        return 0;
    if (src->kind == FETCH_URL) {
        *cacheable = src->pin[0] != '\0';
        return 0; /* the pin is in the node's args already */
    }
    if (src->kind != FETCH_FILE)
        return 0;
    int rc = store_digest_file(j->s, src->location, content, &size, err);
    if (!rc && src->pin[0] && strcmp(src->pin, content) != 0)
        rc = mf_err_set(err, MF_EINTEGRITY, "%s has digest %s, but it is pinned to %s",
                        src->location, content, src->pin);
    return rc;
}

static int op_source(const struct exec_job *j, struct exec_node *r, int *cached,
                     struct mf_err *err)
{
    const struct fetch_source *src = &j->node->src;
    struct fetch_opts fo = *j->o->fo;
    struct fetch_result fr;
    if (src->kind == FETCH_NAME)
        return mf_err_set(err, MF_EUNSUPPORTED,
                          "'%s' is not a file, and building from a model or image name is not "
                          "supported yet (use a GGUF path, an http(s):// URL or hf://)",
                          src->location);
    /* a download shows its bytes as a sub-job; a local copy is fast enough not to */
    fo.progress = src->kind == FETCH_URL ? j->o->progress : NULL;
    int rc = fetch_run(j->s, src, &fo, &fr, err);
    if (rc)
        return rc;
    snprintf(r->digest, sizeof r->digest, "%s", fr.digest);
    r->size = fr.size;
    *cached = src->kind == FETCH_URL && fr.cached;
    r->result = json_pack("{s:s, s:I}", "digest", fr.digest, "size", (json_int_t)fr.size);
    return r->result ? 0 : mf_err_set(err, MF_ENOMEM, "out of memory");
}

/* ---- check ----------------------------------------------------------------------- */

static int check_gguf(const struct gguf_file *gf, enum plan_role role, struct mf_err *err)
{
    struct gguf_str s;
    if (gguf_n_tensors(gf) == 0)
        return mf_err_set(err, MF_EFORMAT, "%s: the GGUF file has no tensors", gguf_name(gf));
    if (role == PLAN_ROLE_ADAPTER) {
        /* LoRA hook: the LoRA issue opens the base (input 1) and checks shapes here */
        if (gguf_get_str(gf, "general.type", &s, err) != 0 || !gguf_str_eq(s, "adapter"))
            return mf_err_set(err, MF_EINVAL,
                              "%s: not a GGUF adapter (general.type is not \"adapter\")",
                              gguf_name(gf));
        return 0;
    }
    if (gguf_get_str(gf, "general.architecture", &s, err) != 0)
        return mf_err_prefix(err, "not a GGUF model");
    return 0;
}

static int op_check(const struct exec_job *j, struct exec_node *r, struct mf_err *err)
{
    const struct exec_node *in = input(j, 0);
    struct gguf_file *gf = NULL;
    struct gguf_str arch = {"", 0};
    char *path = NULL;
    int rc = store_blob_path(j->s, in->digest, &path, err);
    if (!rc)
        rc = gguf_open(path, &gf, err);
    if (!rc)
        rc = check_gguf(gf, j->node->role, err);
    if (!rc) {
        struct mf_err ignored;
        if (gguf_get_str(gf, "general.architecture", &arch, &ignored) != 0)
            arch.len = 0;
        r->result = json_pack("{s:s, s:I, s:s%}", "digest", in->digest, "size",
                              (json_int_t)in->size, "architecture", arch.p, (size_t)arch.len);
        rc = r->result ? 0 : mf_err_set(err, MF_ENOMEM, "out of memory");
    }
    if (!rc) {
        snprintf(r->digest, sizeof r->digest, "%s", in->digest);
        r->size = in->size;
    }
    gguf_close(gf);
    free(path);
    return rc;
}

/* ---- layer, config ----------------------------------------------------------------- */

static int op_layer(const struct exec_job *j, struct exec_node *r, struct mf_err *err)
{
    const struct exec_node *in = input(j, 0);
    const json_t *a = j->node->args;
    r->result = json_pack("{s:s, s:I, s:O, s:O, s:O}", "digest", in->digest, "size",
                          (json_int_t)in->size, "mediaType", json_object_get(a, "mediaType"),
                          "path", json_object_get(a, "path"), "role", json_object_get(a, "role"));
    if (!r->result)
        return mf_err_set(err, MF_ENOMEM, "out of memory");
    snprintf(r->digest, sizeof r->digest, "%s", in->digest);
    r->size = in->size;
    return 0;
}

static int op_config(const struct exec_job *j, struct exec_node *r, struct mf_err *err)
{
    char *yaml = NULL;
    size_t len = 0;
    int rc = plan_config_yaml(json_object_get(j->node->args, "document"), &yaml, &len, err);
    if (!rc)
        rc = store_put_mem(j->s, yaml, len, r->digest, err);
    free(yaml);
    if (rc)
        return rc;
    r->size = len;
    r->result = json_pack("{s:s, s:I, s:s}", "digest", r->digest, "size", (json_int_t)len,
                          "mediaType", PLAN_MT_CONFIG);
    return r->result ? 0 : mf_err_set(err, MF_ENOMEM, "out of memory");
}

/* ---- image -------------------------------------------------------------------------- */

/* Stores v as canonical JSON (sorted keys, compact): equal inputs, equal digests. */
static int put_json(struct store *s, const json_t *v, char digest[STORE_DIGEST_BUF],
                    uint64_t *size, struct mf_err *err)
{
    struct mf_buf b;
    mf_buf_init(&b, RECORD_MAX);
    int rc = mf_json_dump(v, JSON_SORT_KEYS | JSON_COMPACT, &b, err);
    if (!rc)
        rc = store_put_mem(s, b.data, b.len, digest, err);
    if (!rc)
        *size = b.len;
    mf_buf_free(&b);
    return rc;
}

/* The layer descriptors, config layer included, in input order. */
static json_t *layer_descs(const struct exec_job *j)
{
    json_t *layers = json_array();
    for (size_t i = 0; layers && i < j->node->n_inputs; i++) {
        const json_t *res = input(j, i)->result;
        json_t *d = json_pack("{s:O, s:O, s:O, s:{s:O, s:O}}", "mediaType",
                              json_object_get(res, "mediaType"), "digest",
                              json_object_get(res, "digest"), "size", json_object_get(res, "size"),
                              "annotations", "org.opencontainers.image.title",
                              json_object_get(res, "path"), "dev.mfc.role",
                              json_object_get(res, "role"));
        if (json_array_append_new(layers, d) != 0) {
            json_decref(layers);
            return NULL;
        }
    }
    return layers;
}

static int op_image(const struct exec_job *j, struct exec_node *r, struct mf_err *err)
{
    char rec_digest[STORE_DIGEST_BUF];
    uint64_t rec_size = 0;
    const json_t *a = j->node->args;
    json_t *layers = layer_descs(j), *man = NULL;
    json_t *rec = json_pack("{s:s, s:O, s:O, s:O}", "schema", "mfc.build-record/v1", "modelfile",
                            json_object_get(a, "modelfile"), "labels",
                            json_object_get(a, "labels"), "layers", layers);
    int rc = rec ? put_json(j->s, rec, rec_digest, &rec_size, err)
                 : mf_err_set(err, MF_ENOMEM, "out of memory");
    if (!rc) {
        man = json_pack("{s:i, s:s, s:O, s:{s:s, s:s, s:I}, s:O}", "schemaVersion", 2,
                        "mediaType", STORE_MT_OCI_MANIFEST, "artifactType",
                        json_object_get(a, "artifactType"), "config", "mediaType",
                        PLAN_MT_RECORD, "digest", rec_digest, "size", (json_int_t)rec_size,
                        "layers", layers);
        if (man && json_object_size(json_object_get(a, "labels")))
            json_object_set(man, "annotations", json_object_get(a, "labels"));
        rc = man ? put_json(j->s, man, r->digest, &r->size, err)
                 : mf_err_set(err, MF_ENOMEM, "out of memory");
    }
    if (!rc) {
        r->result = json_pack("{s:s, s:I, s:s, s:s}", "digest", r->digest, "size",
                              (json_int_t)r->size, "mediaType", STORE_MT_OCI_MANIFEST, "record",
                              rec_digest);
        rc = r->result ? 0 : mf_err_set(err, MF_ENOMEM, "out of memory");
    }
    json_decref(man);
    json_decref(rec);
    json_decref(layers);
    return rc;
}

int exec_op_run(const struct exec_job *j, struct exec_node *r, int *cached, struct mf_err *err)
{
    *cached = 0;
    switch (j->node->op) {
    case PLAN_SOURCE:
        return op_source(j, r, cached, err);
    case PLAN_CHECK:
        return op_check(j, r, err);
    case PLAN_LAYER:
        return op_layer(j, r, err);
    case PLAN_CONFIG:
        return op_config(j, r, err);
    case PLAN_IMAGE:
        return op_image(j, r, err);
    case PLAN_RUN:
        return mf_err_set(err, MF_EUNSUPPORTED, "RUN is not supported yet");
    case PLAN_CONVERT:
        return mf_err_set(err, MF_EUNSUPPORTED,
                          "converting a safetensors directory is not supported yet "
                          "(give a GGUF file)");
    case PLAN_MERGE:
        return mf_err_set(err, MF_EUNSUPPORTED, "ADAPTER --merge is not supported yet");
    default:
        return mf_err_set(err, MF_EUNSUPPORTED, "%s steps are not supported yet",
                          plan_op_name(j->node->op));
    }
}
