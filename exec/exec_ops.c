/*
 * exec_ops.c: what each plan node does when the executor runs it.
 *
 *   source   a local file: its digest through the stat cache, not copied (the
 *            record keeps its path and size/mtime/inode; check and layer read
 *            the file itself and refuse it if it changed); a URL: fetch_run
 *            into the store (the blob is the output);
 *            a name: source_ref_resolve (a local or registry image's GGUF,
 *            its tar layer when it has one, and its config defaults)
 *   check    gguf_open on the blob: a base needs a general.architecture that
 *            common/arch.h runs (or it is refused naming it and those it runs), an
 *            adapter general.type=adapter (the LoRA issue adds the check
 *            against the base, whose check node is already an input)
 *   layer    layer_write: its input blob as a deterministic one-file tar at the
 *            node's path (weights and adapters plain, the config gzip'd); the
 *            weights' layer also records the GGUF header facts the labels need
 *   config   the config document as YAML, stored as a blob; FROM an image:
 *            the image's template/system/params/messages are its defaults
 *   image    oci_image_write: the runtime layer (layer_write_runtime, when the
 *            caller found an mfc-serve), the input layers, and a config with
 *            entrypoint, env, labels and history; the caller tags the manifest
 *   run      exec_run.c: the command in a bubblewrap sandbox; its /out as a
 *            layer; a "run-output" source takes one of its files (docs/run.md)
 *   convert, merge, quantize: their own files (exec_convert.c, exec_merge.c)
 *
 * Owns nothing past one call; every blob enters the store through the store's
 * atomic writers, so a failure here leaves no partial blob.
 *
 * Layers and the image depend on more than their inputs: the mtime of every
 * tar entry and the image's created time (SOURCE_DATE_EPOCH), and the runtime
 * binary. exec_op_content hashes those into the key, so an unchanged rebuild
 * is all CACHED and gives the same digest, and a new mfc-serve re-runs only
 * the image node.
 */
#include "exec/exec_int.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <sys/stat.h>
#include <unistd.h>

#include "common/arch.h"
#include "common/buf.h"
#include "common/gguf.h"
#include "common/json.h"
#include "common/progress.h"
#include "common/sha256.h"
#include "common/inspect.h"
#include "image/layer.h"
#include "image/oci.h"
#include "registry/registry.h"
#include "fetch/source_ref.h"

#define IMAGE_MAX_LAYERS 64 /* runtime + weights + adapters + config; ADAPTER lines are few */
#define IMAGE_MAX_KV 256    /* labels or env entries of one image */
#define RUNTIME_NAME "mfc-serve"
#define CONFIG_IN_IMAGE "/" PLAN_CONFIG_PATH

const struct exec_node *exec_input(const struct exec_job *j, size_t i)
{
    return &j->b->nodes[j->node->inputs[i]];
}

/* A layer write's bytes on its step's progress line. */
struct layer_progress {
    struct progress *pg; /* a scope on the step, or NULL */
    int id;              /* its job */
};

static void on_layer_progress(void *arg, uint64_t done, uint64_t total)
{
    struct layer_progress *lp = arg;
    progress_update(lp->pg, lp->id, done, total);
}

/* ---- source ---------------------------------------------------------------------- */

/* The key content of a layer or the image: sha256 of the entries' mtime and,
 * for the image, the runtime layer's key (every file in it, stat-cached, and
 * its compression: layer_runtime_digest) or "none". */
static int build_content(const struct exec_job *j, char content[STORE_DIGEST_BUF],
                         struct mf_err *err)
{
    char runtime[STORE_DIGEST_BUF] = "none", text[512], hex[MF_SHA256_HEX_LEN + 1];
    uint8_t d[MF_SHA256_LEN];
    enum layer_compression comp;
    int64_t mtime;
    int rc = layer_source_date(&mtime, err);
    if (!rc && j->node->op == PLAN_IMAGE && j->o->runtime) {
        rc = layer_runtime_compression(&comp, err);
        if (!rc)
            rc = layer_runtime_digest(j->s, j->o->runtime, RUNTIME_NAME, mtime, comp, runtime,
                                      err);
    }
    if (rc)
        return rc;
    /* the recorded model name is in the image config: part of the image's key */
    const char *name = j->node->op == PLAN_IMAGE && j->o->model_name ? j->o->model_name : "";
    int n = snprintf(text, sizeof text, "mtime=%" PRId64 " runtime=%s name=%.300s", mtime,
                     runtime, name);
    rc = mf_sha256_mem(text, (size_t)n, d, err);
    if (rc)
        return rc;
    mf_sha256_hex(d, hex);
    snprintf(content, STORE_DIGEST_BUF, "sha256:%s", hex);
    return 0;
}

/* sha256 of v's canonical JSON (the inherited defaults; null: "null"). */
static int json_content(const json_t *v, char content[STORE_DIGEST_BUF], struct mf_err *err)
{
    uint8_t d[MF_SHA256_LEN];
    char hex[MF_SHA256_HEX_LEN + 1];
    char *text = v ? json_dumps(v, JSON_SORT_KEYS | JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
    int rc = mf_sha256_mem(text ? text : "null", strlen(text ? text : "null"), d, err);
    free(text);
    if (!rc) {
        mf_sha256_hex(d, hex);
        snprintf(content, STORE_DIGEST_BUF, "sha256:%s", hex);
    }
    return rc;
}

int exec_op_content(const struct exec_job *j, char content[STORE_DIGEST_BUF], int *cacheable,
                    struct mf_err *err)
{
    const struct fetch_source *src = &j->node->src;
    uint64_t size;
    *cacheable = 1;
    content[0] = '\0';
    if (j->node->op == PLAN_LAYER || j->node->op == PLAN_IMAGE)
        return build_content(j, content, err);
    if (j->node->op == PLAN_CONFIG && j->node->n_inputs)
        return json_content(json_object_get(exec_input(j, 0)->result, "defaults"), content, err);
    if (j->node->op == PLAN_RUN)
        return exec_run_content(j, content, err);
    if (j->node->op == PLAN_CONVERT && j->node->role == PLAN_ROLE_ADAPTER)
        return exec_peft_content(j, content, err);
    if (j->node->op == PLAN_CONVERT)
        return exec_convert_content(j, content, err);
    if (j->node->op != PLAN_SOURCE || exec_is_run_output(j->node))
        return 0;
    if (src->kind == FETCH_NAME) {
        *cacheable = 0; /* a tag may move: resolve it every time (cheap when nothing changed) */
        return 0;
    }
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

/* FROM/ADAPTER NAME: the record carries the GGUF digest (the output), the
 * picked tar layer when there is one (op_layer reuses it as is) and the
 * base's defaults (op_config merges them). */
static int op_source_name(const struct exec_job *j, struct exec_node *r, int *cached,
                          struct mf_err *err)
{
    const struct fetch_source *src = &j->node->src;
    struct registry_opts ro;
    struct source_ref_result sr;
    char name[4200];
    registry_opts_init(&ro);
    ro.progress = j->o->progress;
    snprintf(name, sizeof name, "%s%s%s", src->location, src->pin[0] ? "@" : "", src->pin);
    int rc = source_ref_resolve(j->s, name, j->node->role == PLAN_ROLE_ADAPTER, &ro, &sr, err);
    if (rc)
        return rc;
    snprintf(r->digest, sizeof r->digest, "%s", sr.gguf);
    r->size = sr.gguf_size;
    *cached = !sr.transferred;
    r->result = json_pack("{s:s, s:I, s:s, s:s, s:O}", "digest", sr.gguf, "size",
                          (json_int_t)sr.gguf_size, "manifest", sr.manifest, "from", sr.where,
                          "defaults", sr.defaults);
    if (r->result && sr.layer_tar)
        json_object_set_new(r->result, "layer",
                            json_pack("{s:s, s:I, s:s, s:s, s:s}", "digest", sr.layer.digest,
                                      "size", (json_int_t)sr.layer.size, "mediaType",
                                      sr.layer.media_type, "diffId", sr.layer.digest, "filepath",
                                      sr.filepath));
    source_ref_result_fini(&sr);
    return r->result ? 0 : mf_err_set(err, MF_ENOMEM, "out of memory");
}

/* 1 when the node's own cache record already names r->digest: a local
 * source (and its check) runs again on every build because its output is the
 * user's file, not a blob, but it found its work done. */
int exec_record_matches(const struct exec_job *j, const struct exec_node *r)
{
    json_t *rec = NULL;
    struct mf_err ignored;
    if (j->o->no_cache || store_cache_get(j->s, r->key, &rec, &ignored) != 0)
        return 0;
    const char *d = json_string_value(json_object_get(rec, "digest"));
    int same = d && strcmp(d, r->digest) == 0;
    json_decref(rec);
    return same;
}

/* What identifies a file's version: size, mtime, inode, device. */
static json_t *file_stat_json(const struct stat *st)
{
    return json_pack("{s:I, s:I, s:I, s:I, s:I}", "size", (json_int_t)st->st_size, "mtime_s",
                     (json_int_t)st->st_mtim.tv_sec, "mtime_ns", (json_int_t)st->st_mtim.tv_nsec,
                     "ino", (json_int_t)st->st_ino, "dev", (json_int_t)st->st_dev);
}

/* 0 when path is still the file a source record describes; otherwise
 * MF_EINTEGRITY: its bytes may no longer hash to the record's digest, which
 * is in the cache key, so nothing may be built from them. */
static int file_unchanged(const json_t *rec, const char *path, struct mf_err *err)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return mf_err_sys(err, MF_EINTEGRITY, errno, "%s is gone since the build hashed it", path);
    json_t *now = file_stat_json(&st);
    int same = now && json_equal(now, json_object_get(rec, "file"));
    json_decref(now);
    if (!same)
        return mf_err_set(err, MF_EINTEGRITY,
                          "%s changed during the build (size, mtime or inode differ from when "
                          "its digest %s was computed); nothing was built from it: build again",
                          path, json_string_value(json_object_get(rec, "digest")));
    return 0;
}

/* The file holding the bytes of this node's input 0 (a source, or a check of
 * one): the blob when the store has it (URL and image sources, builds before
 * local files stopped being copied), else the local file the source record
 * names, checked unchanged. *path is malloc'd; *local is the source record
 * in the second case (re-check with file_unchanged after reading), else NULL. */
int exec_input_file(const struct exec_job *j, char **path, const json_t **local,
                    struct mf_err *err)
{
    return exec_input_file_at(j, 0, path, local, err);
}

int exec_local_unchanged(const json_t *local, const char *path, struct mf_err *err)
{
    return local ? file_unchanged(local, path, err) : 0;
}

int exec_tmp_path(const struct exec_job *j, const char *what, char **path, struct mf_err *err)
{
    char name[128];
    snprintf(name, sizeof name, "%.32s-%ld-%zu.gguf", what, (long)getpid(), j->node->id);
    return store_tmp_path(j->s, name, path, err);
}

int exec_input_file_at(const struct exec_job *j, size_t i, char **path, const json_t **local,
                       struct mf_err *err)
{
    const struct exec_node *in = exec_input(j, i);
    size_t k = j->node->inputs[i];
    *local = NULL;
    if (j->plan->nodes[k].op == PLAN_CHECK && j->plan->nodes[k].n_inputs)
        k = j->plan->nodes[k].inputs[0];
    const json_t *rec = j->b->nodes[k].result;
    const char *p = json_string_value(json_object_get(rec, "path"));
    if (j->plan->nodes[k].op != PLAN_SOURCE || !p || strcmp(j->b->nodes[k].digest, in->digest) ||
        store_blob_exists(j->s, in->digest))
        return store_blob_path(j->s, in->digest, path, err);
    int rc = file_unchanged(rec, p, err);
    if (!rc && !(*path = strdup(p)))
        rc = mf_err_set(err, MF_ENOMEM, "out of memory");
    if (!rc)
        *local = rec;
    return rc;
}

/* A local file is not copied into the store (ARCHITECTURE.md: weights are
 * big): its digest comes through the stat cache (exec_op_content has just
 * filled it, so nothing is read here), and the record keeps the file's path
 * and identity (size, mtime, inode) for the check and layer steps, which read
 * the file itself and refuse it if it changed since. */
static int op_source_file(const struct exec_job *j, struct exec_node *r, int *cached,
                          struct mf_err *err)
{
    const char *path = j->node->src.location;
    struct stat a, b;
    char *abspath = NULL;
    if (stat(path, &a) != 0)
        return mf_err_sys(err, MF_ENOTFOUND, errno, "cannot stat %s", path);
    int rc = store_digest_file(j->s, path, r->digest, &r->size, err);
    if (!rc && (stat(path, &b) != 0 || a.st_size != b.st_size || a.st_ino != b.st_ino ||
                a.st_dev != b.st_dev || a.st_mtim.tv_sec != b.st_mtim.tv_sec ||
                a.st_mtim.tv_nsec != b.st_mtim.tv_nsec))
        rc = mf_err_set(err, MF_EIO, "%s changed while it was being read; build again", path);
    if (!rc && !(abspath = realpath(path, NULL)))
        rc = mf_err_sys(err, MF_EIO, errno, "cannot resolve %s", path);
    if (!rc)
        r->result = json_pack("{s:s, s:I, s:s, s:o}", "digest", r->digest, "size",
                              (json_int_t)r->size, "path", abspath, "file", file_stat_json(&a));
    free(abspath);
    if (!rc && !r->result)
        rc = mf_err_set(err, MF_ENOMEM, "out of memory");
    if (!rc) {
        /* the bytes this step vouches for (hashed while its key was computed) */
        struct progress *pg = progress_scope(j->o->progress, (int)j->node->id + 1);
        int id = progress_begin(pg, "hash", path);
        progress_update(pg, id, r->size, r->size);
        progress_close(pg);
        *cached = exec_record_matches(j, r);
    }
    return rc;
}

static int op_source(const struct exec_job *j, struct exec_node *r, int *cached,
                     struct mf_err *err)
{
    const struct fetch_source *src = &j->node->src;
    struct fetch_opts fo = *j->o->fo;
    struct fetch_result fr;
    if (exec_is_run_output(j->node))
        return exec_run_output(j, r, cached, err);
    if (src->kind == FETCH_NAME)
        return op_source_name(j, r, cached, err);
    if (src->kind == FETCH_FILE)
        return op_source_file(j, r, cached, err);
    /* a download's or a copy's bytes show on this step's line, numbered as the plan is */
    fo.progress = progress_scope(j->o->progress, (int)j->node->id + 1);
    int rc = fetch_run(j->s, src, &fo, &fr, err);
    progress_close(fo.progress);
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
        if (gguf_get_str(gf, "general.type", &s, err) != 0 || !gguf_str_eq(s, "adapter"))
            return mf_err_set(err, MF_EINVAL,
                              "%s: not a GGUF adapter (general.type is not \"adapter\")",
                              gguf_name(gf));
        return 0;
    }
    if (gguf_get_str(gf, "general.architecture", &s, err) != 0)
        return mf_err_prefix(err, "not a GGUF model");
    /* mfc-serve would refuse it at start: say so at build time (common/arch.h) */
    if (!arch_find(s.p, (size_t)s.len))
        return mf_err_set(err, MF_EUNSUPPORTED,
                          "%s: architecture '%.*s' is not supported (mfc runs %s)", gguf_name(gf),
                          (int)(s.len > 64 ? 64 : s.len), s.p, arch_names());
    return 0;
}

/* PARAMETER num_ctx above the base's <arch>.context_length: a warning on the
 * check step (mfc-serve caps the context at the model's, and warns again). */
static void warn_num_ctx(const struct exec_job *j, const struct gguf_file *gf,
                         struct gguf_str arch)
{
    const json_t *v = json_object_get(json_object_get(j->plan->config, "params"), "num_ctx");
    char key[128], line[MF_ERR_MSG_MAX];
    uint32_t n_ctx;
    struct mf_err ignored;
    snprintf(key, sizeof key, "%.*s.context_length", (int)(arch.len < 64 ? arch.len : 64),
             arch.p);
    if (!json_is_integer(v) || gguf_get_u32(gf, key, &n_ctx, &ignored) != 0 ||
        json_integer_value(v) <= (json_int_t)n_ctx)
        return;
    snprintf(line, sizeof line,
             "warning: PARAMETER num_ctx %" JSON_INTEGER_FORMAT " is larger than the model's "
             "context length %u (%s); mfc-serve will use %u",
             json_integer_value(v), n_ctx, key, n_ctx);
    struct progress *pg = progress_scope(j->o->progress, (int)j->node->id + 1);
    progress_note(pg, progress_begin(pg, "check", j->node->name), line);
    progress_close(pg);
}

static int op_check(const struct exec_job *j, struct exec_node *r, int *cached,
                    struct mf_err *err)
{
    const struct exec_node *in = exec_input(j, 0);
    struct gguf_file *gf = NULL;
    struct gguf_str arch = {"", 0};
    char *path = NULL;
    const json_t *local = NULL;
    int rc = exec_input_file(j, &path, &local, err);
    if (!rc)
        rc = gguf_open(path, &gf, err);
    if (!rc)
        rc = check_gguf(gf, j->node->role, err);
    if (!rc && j->node->role == PLAN_ROLE_ADAPTER)
        rc = exec_check_adapter(j, gf, err);
    if (!rc) {
        struct mf_err ignored;
        if (gguf_get_str(gf, "general.architecture", &arch, &ignored) != 0)
            arch.len = 0;
        else if (j->node->role == PLAN_ROLE_BASE)
            warn_num_ctx(j, gf, arch);
        r->result = json_pack("{s:s, s:I, s:s%}", "digest", in->digest, "size",
                              (json_int_t)in->size, "architecture", arch.p, (size_t)arch.len);
        rc = r->result ? 0 : mf_err_set(err, MF_ENOMEM, "out of memory");
        if (!rc && j->node->role == PLAN_ROLE_ADAPTER)
            exec_adapter_facts(gf, r->result); /* rank, alpha: for the merged-adapters label */
        if (!rc && j->node->role == PLAN_ROLE_DRAFT)
            rc = exec_check_draft(j, gf, r->result, err);
    }
    if (!rc) {
        snprintf(r->digest, sizeof r->digest, "%s", in->digest);
        r->size = in->size;
        *cached = local && exec_record_matches(j, r); /* a local file: no blob for the cache to find */
    }
    gguf_close(gf);
    free(path);
    return rc;
}

/* ---- layer, config ----------------------------------------------------------------- */

/* The GGUF header facts the image labels need, read from the weights (the
 * header only: tensor data is never touched). *out is a new object. */
static int model_facts(const char *path, json_t **out, struct mf_err *err)
{
    struct gguf_file *gf = NULL;
    struct gguf_str lic;
    struct mf_err ignored;
    json_t *sum = NULL;
    int rc = gguf_open(path, &gf, err);
    if (!rc && !(sum = mf_inspect_gguf(gf, 0, err)))
        rc = err->code ? err->code : MF_ENOMEM;
    if (!rc) {
        *out = json_pack("{s:O?, s:O?, s:O?, s:O?, s:O?}", "architecture",
                         json_object_get(sum, "architecture"), "parameters",
                         json_object_get(sum, "parameters"), "quantization",
                         json_object_get(json_object_get(sum, "file_type"), "name"),
                         "context_length", json_object_get(sum, "context_length"), "name",
                         json_object_get(sum, "name"));
        if (*out && gguf_get_str(gf, "general.license", &lic, &ignored) == 0)
            json_object_set_new(*out, "license", json_stringn(lic.p, lic.len));
        rc = *out ? 0 : mf_err_set(err, MF_ENOMEM, "out of memory");
    }
    json_decref(sum);
    gguf_close(gf);
    return rc;
}

/* The tar layer of an image source when it already holds the GGUF at the
 * path this layer would write (uncompressed, so digest == diffId): NULL when
 * there is none. The layer node reads check -> source. */
static const json_t *reusable_layer(const struct exec_job *j, const char *path)
{
    const struct plan_node *chk = &j->plan->nodes[j->node->inputs[0]];
    if (chk->op != PLAN_CHECK || chk->n_inputs == 0)
        return NULL;
    const json_t *l = json_object_get(j->b->nodes[chk->inputs[0]].result, "layer");
    const char *fp = json_string_value(json_object_get(l, "filepath"));
    const char *d = json_string_value(json_object_get(l, "digest"));
    if (!fp || !d || !path || strcmp(fp + (fp[0] == '/'), path) != 0 ||
        !store_blob_exists(j->s, d))
        return NULL;
    return l;
}

/* The node's input blob as a one-file layer at args.path; an image source's
 * own layer when it has the same path (FROM an image shares its layer). */
static int op_layer(const struct exec_job *j, struct exec_node *r, struct mf_err *err)
{
    const json_t *reuse = reusable_layer(j, json_string_value(json_object_get(j->node->args, "path")));
    if (reuse) {
        char *src = NULL;
        json_t *facts = NULL;
        int rc = 0;
        const json_t *local = NULL;
        if (j->node->role == PLAN_ROLE_BASE)
            rc = exec_input_file(j, &src, &local, err);
        if (!rc && src)
            rc = model_facts(src, &facts, err);
        free(src);
        if (!rc && !(r->result = json_deep_copy(reuse)))
            rc = mf_err_set(err, MF_ENOMEM, "out of memory");
        if (!rc) {
            json_object_set(r->result, "role", json_object_get(j->node->args, "role"));
            if (facts)
                json_object_set(r->result, "model", facts);
            snprintf(r->digest, sizeof r->digest, "%s",
                     json_string_value(json_object_get(reuse, "digest")));
            r->size = (uint64_t)json_integer_value(json_object_get(reuse, "size"));
        }
        json_decref(facts);
        return rc;
    }
    const json_t *a = j->node->args;
    struct layer_entry e = {.path = json_string_value(json_object_get(a, "path")), .mode = 0644};
    enum layer_compression comp = j->node->role == PLAN_ROLE_CONFIG ? LAYER_GZIP : LAYER_NONE;
    struct layer_result lr;
    json_t *facts = NULL;
    char *src = NULL;
    const json_t *local = NULL;
    int64_t mtime;
    int rc = layer_source_date(&mtime, err);
    /* a local file is tarred straight from where it is: one read, one write */
    if (!rc)
        rc = exec_input_file(j, &src, &local, err);
    if (!rc && j->node->role == PLAN_ROLE_BASE)
        rc = model_facts(src, &facts, err);
    e.src = src;
    struct layer_progress lp = {progress_scope(j->o->progress, (int)j->node->id + 1), 0};
    lp.id = progress_begin(lp.pg, "layer", e.path ? e.path : "");
    if (!rc)
        rc = layer_write_progress(j->s, &e, 1, comp, mtime, on_layer_progress, &lp, &lr, err);
    progress_close(lp.pg);
    /* changed while tarred: the blob is whole and named by its own digest, but
     * it is not what the key promises, so no record names it (gc drops it) */
    if (!rc && local)
        rc = file_unchanged(local, src, err);
    if (!rc) {
        r->result = json_pack("{s:s, s:I, s:s, s:s, s:s, s:O}", "digest", lr.desc.digest, "size",
                              (json_int_t)lr.desc.size, "mediaType", lr.desc.media_type,
                              "diffId", lr.diff_id, "filepath", lr.filepath, "role",
                              json_object_get(a, "role"));
        if (!r->result || (facts && json_object_set(r->result, "model", facts) != 0))
            rc = mf_err_set(err, MF_ENOMEM, "out of memory");
    }
    if (!rc) {
        snprintf(r->digest, sizeof r->digest, "%s", lr.desc.digest);
        r->size = lr.desc.size;
    }
    json_decref(facts);
    free(src);
    return rc;
}

/* The document with a base image's defaults under it, as `ollama create`
 * does: TEMPLATE and SYSTEM replace the base's (an empty one inherits),
 * PARAMETERs merge per key (the Modelfile's win; its stop list replaces the
 * base's), MESSAGEs and LICENSE replace the base's when there are any. The
 * base's adapters are not inherited (op_config warns). */
static json_t *config_inherit(const json_t *doc, const json_t *base)
{
    json_t *out = json_deep_copy(doc), *v;
    const char *k;
    if (!out || !json_is_object(base))
        return out;
    json_t *params = json_object_get(out, "params");
    json_object_foreach ((json_t *)json_object_get(base, "params"), k, v)
        if (json_is_object(params) && !json_object_get(params, k))
            json_object_set(params, k, v);
    static const char *const text[] = {"template", "system"};
    for (size_t i = 0; i < 2; i++) {
        const char *mine = json_string_value(json_object_get(out, text[i]));
        if ((!mine || !*mine) && json_is_string(json_object_get(base, text[i])))
            json_object_set(out, text[i], json_object_get(base, text[i]));
    }
    static const char *const lists[] = {"messages", "license"};
    for (size_t i = 0; i < 2; i++)
        if (json_array_size(json_object_get(out, lists[i])) == 0 &&
            json_array_size(json_object_get(base, lists[i])) > 0)
            json_object_set(out, lists[i], json_object_get(base, lists[i]));
    return out;
}

/* FROM an image with adapters: they are not carried over (the build takes
 * only the base's GGUF), which the config step says, naming them. */
static void warn_adapters(const struct exec_job *j, const json_t *base)
{
    const json_t *ads = json_object_get(base, "adapters"), *a;
    char names[512] = "", line[MF_ERR_MSG_MAX];
    size_t i, len = 0;
    if (!json_array_size(ads))
        return;
    json_array_foreach (ads, i, a) {
        const char *n = json_string_value(json_object_get(a, "name"));
        int w = snprintf(names + len, sizeof names - len, "%s%s", i ? ", " : "", n ? n : "?");
        if (w < 0 || (size_t)w >= sizeof names - len)
            break;
        len += (size_t)w;
    }
    snprintf(line, sizeof line,
             "warning: %s: the base image's %zu adapter(s) (%s) are not inherited; add an "
             "ADAPTER line for each one to keep it",
             exec_input(j, 0)->result ? j->plan->nodes[j->node->inputs[0]].name : "FROM",
             json_array_size(ads), names);
    struct progress *pg = progress_scope(j->o->progress, (int)j->node->id + 1);
    progress_note(pg, progress_begin(pg, "config", j->node->name), line);
    progress_close(pg);
}

static int op_config(const struct exec_job *j, struct exec_node *r, struct mf_err *err)
{
    char *yaml = NULL;
    size_t len = 0;
    if (j->node->n_inputs)
        warn_adapters(j, json_object_get(exec_input(j, 0)->result, "defaults"));
    json_t *doc = config_inherit(json_object_get(j->node->args, "document"),
                                 j->node->n_inputs
                                     ? json_object_get(exec_input(j, 0)->result, "defaults")
                                     : NULL);
    if (!doc)
        return mf_err_set(err, MF_ENOMEM, "out of memory");
    int rc = plan_config_yaml(doc, &yaml, &len, err);
    json_decref(doc);
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

/* What op_image assembles (too big for a worker's stack: heap-allocated). */
struct image_parts {
    struct layer_result res[IMAGE_MAX_LAYERS]; /* runtime (optional), then the inputs' */
    struct oci_layer layers[IMAGE_MAX_LAYERS]; /* res[i] with its history line */
    char by[IMAGE_MAX_LAYERS][512];            /* history: "Modelfile:1: FROM ./b.gguf" */
    size_t n_layers;                           /* entries used in the three above */
    struct oci_kv labels[IMAGE_MAX_KV];        /* borrowed strings; a later key wins */
    size_t n_labels;                           /* entries in labels */
    struct oci_kv env[IMAGE_MAX_KV];           /* borrowed strings */
    size_t n_env;                              /* entries in env */
    char created[32];                          /* RFC 3339 of SOURCE_DATE_EPOCH */
    char params[24], ctx_len[24];              /* decimal label values */
    char adapters[2048];                       /* "sql,chat": the adapters' names */
    char merged[2048];                         /* JSON: merged adapters (exec_lora.c) */
};

static void kv_add(struct oci_kv *kv, size_t *n, const char *key, const char *value)
{
    if (value && *n < IMAGE_MAX_KV)
        kv[(*n)++] = (struct oci_kv){key, value};
}

/* A layer as its node's cache record describes it; MF_EFORMAT if the record
 * lacks a field (written by an older mfc). */
static int layer_from_record(const json_t *rec, struct layer_result *l, struct mf_err *err)
{
    const char *mt = json_string_value(json_object_get(rec, "mediaType"));
    const char *d = json_string_value(json_object_get(rec, "digest"));
    const char *diff = json_string_value(json_object_get(rec, "diffId"));
    const char *fp = json_string_value(json_object_get(rec, "filepath"));
    if (!mt || !d || !diff || !fp)
        return mf_err_set(err, MF_EFORMAT, "the layer's cache record is incomplete "
                          "(rebuild with --no-cache)");
    memset(l, 0, sizeof *l);
    snprintf(l->desc.media_type, sizeof l->desc.media_type, "%s", mt);
    snprintf(l->desc.digest, sizeof l->desc.digest, "%s", d);
    l->desc.size = (uint64_t)json_integer_value(json_object_get(rec, "size"));
    snprintf(l->diff_id, sizeof l->diff_id, "%s", diff);
    snprintf(l->filepath, sizeof l->filepath, "%s", fp);
    return 0;
}

/* The runtime layer: from the build cache when its inputs are unchanged
 * (layer_write_runtime), else written with its bytes on the step's line. */
static int image_runtime(const struct exec_job *j, struct image_parts *P, int64_t mtime,
                         struct mf_err *err)
{
    enum layer_compression comp;
    struct layer_progress lp = {progress_scope(j->o->progress, (int)j->node->id + 1), 0};
    int cached = 0;
    int rc = layer_runtime_compression(&comp, err);
    lp.id = progress_begin(lp.pg, "layer", RUNTIME_NAME);
    if (!rc)
        rc = layer_write_runtime(j->s, j->o->runtime, RUNTIME_NAME, mtime, comp,
                                 on_layer_progress, &lp, &P->res[0], &cached, err);
    if (!rc && cached)
        progress_note(lp.pg, lp.id, "runtime layer CACHED");
    progress_close(lp.pg);
    return rc;
}

/* The runtime layer (when there is a runtime), then one per input, base first. */
static int image_layers(const struct exec_job *j, struct image_parts *P, int64_t mtime,
                        struct mf_err *err)
{
    if (j->o->runtime) {
        int rc = image_runtime(j, P, mtime, err);
        if (rc)
            return mf_err_prefix(err, "runtime %s", j->o->runtime);
        snprintf(P->by[0], sizeof P->by[0], "COPY %s /usr/bin/%s", RUNTIME_NAME, RUNTIME_NAME);
        P->n_layers = 1;
    }
    if (P->n_layers + j->node->n_inputs > IMAGE_MAX_LAYERS)
        return mf_err_set(err, MF_EINVAL, "an image has at most %d layers", IMAGE_MAX_LAYERS);
    for (size_t i = 0; i < j->node->n_inputs; i++) {
        const struct plan_node *pn = &j->plan->nodes[j->node->inputs[i]];
        size_t k = P->n_layers++;
        int rc = layer_from_record(exec_input(j, i)->result, &P->res[k], err);
        if (rc)
            return mf_err_prefix(err, "%s", pn->name);
        if (pn->role == PLAN_ROLE_CONFIG)
            snprintf(P->by[k], sizeof P->by[k], "%s: PARAMETER, TEMPLATE, SYSTEM, ... -> %s",
                     j->plan->modelfile, CONFIG_IN_IMAGE);
        else
            snprintf(P->by[k], sizeof P->by[k], "%s:%d: %s", j->plan->modelfile, pn->line,
                     pn->instr);
    }
    for (size_t i = 0; i < P->n_layers; i++)
        P->layers[i] = (struct oci_layer){&P->res[i], P->by[i]};
    return 0;
}

/* "sql,chat": each adapter's name, or its file name without .gguf. */
static void adapter_names(const json_t *adapters, char *out, size_t cap)
{
    size_t i, len = 0;
    json_t *a;
    out[0] = '\0';
    json_array_foreach (adapters, i, a) {
        const char *name = json_string_value(json_object_get(a, "name"));
        const char *path = json_string_value(json_object_get(a, "path"));
        const char *base = path ? strrchr(path, '/') : NULL;
        int n = name ? snprintf(out + len, cap - len, "%s%s", i ? "," : "", name)
                     : snprintf(out + len, cap - len, "%s%.*s", i ? "," : "",
                                base ? (int)strcspn(base + 1, ".") : 0, base ? base + 1 : "");
        if (n < 0 || (size_t)n >= cap - len)
            break; /* a label is a summary; the YAML has every adapter */
        len += (size_t)n;
    }
}

/* LICENSE as an SPDX-ish label: a one-line LICENSE of up to 128 bytes is
 * taken as the licence's identifier; a full licence text is NOASSERTION
 * (SPDX's word for "not stated here"); the text stays in the YAML. */
static const char *license_label(const json_t *license)
{
    const char *first = json_string_value(json_array_get(license, 0));
    if (!first)
        return NULL;
    return json_array_size(license) == 1 && strlen(first) <= 128 && !strchr(first, '\n')
               ? first
               : "NOASSERTION";
}

/* Labels: defaults from the build and the base GGUF, then the Modelfile's
 * LABELs (which win over the defaults: oci.c sets them in order). */
static void image_labels(const struct exec_job *j, struct image_parts *P, const json_t *facts)
{
    const json_t *cfg = j->plan->config;
    const json_t *v;
    const char *key;
    json_t *val;
    kv_add(P->labels, &P->n_labels, "org.opencontainers.image.created", P->created);
    kv_add(P->labels, &P->n_labels, "org.opencontainers.image.title",
           json_string_value(json_object_get(facts, "name")));
    kv_add(P->labels, &P->n_labels, "org.opencontainers.image.licenses",
           json_string_value(json_object_get(facts, "license")));
    kv_add(P->labels, &P->n_labels, "org.opencontainers.image.licenses",
           license_label(json_object_get(cfg, "license")));
    /* what mfc manifest reads to ask for a GPU only for an image that can use one */
    if (j->o->runtime)
        kv_add(P->labels, &P->n_labels, "dev.mfc.runtime", P->res[0].cuda ? "cuda" : "cpu");
    kv_add(P->labels, &P->n_labels, "dev.mfc.architecture",
           json_string_value(json_object_get(facts, "architecture")));
    if (json_is_integer(v = json_object_get(facts, "parameters"))) {
        snprintf(P->params, sizeof P->params, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        kv_add(P->labels, &P->n_labels, "dev.mfc.parameters", P->params);
    }
    kv_add(P->labels, &P->n_labels, "dev.mfc.quantization",
           json_string_value(json_object_get(facts, "quantization")));
    if (json_is_integer(v = json_object_get(facts, "context_length"))) {
        snprintf(P->ctx_len, sizeof P->ctx_len, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        kv_add(P->labels, &P->n_labels, "dev.mfc.context_length", P->ctx_len);
    }
    adapter_names(json_object_get(cfg, "adapters"), P->adapters, sizeof P->adapters);
    if (P->adapters[0])
        kv_add(P->labels, &P->n_labels, "dev.mfc.adapters", P->adapters);
    if (exec_merged_label(j, P->merged, sizeof P->merged))
        kv_add(P->labels, &P->n_labels, "dev.mfc.adapters.merged", P->merged);
    json_object_foreach ((json_t *)json_object_get(j->node->args, "labels"), key, val)
        kv_add(P->labels, &P->n_labels, key, json_string_value(val));
}

/* Env: the runtime's defaults unless ENV sets them, then ENV in order. The
 * model name (the build's first tag) is MFC_MODEL_NAME, so the image
 * serves the same name under podman/docker run as under mfc serve/run,
 * which read it back (run_image.c). */
static void image_env(const struct exec_job *j, struct image_parts *P)
{
    const struct oci_kv defaults[] = {{"MFC_CONFIG", CONFIG_IN_IMAGE},
                                      {"MFC_PORT", "8080"},
                                      {"MFC_MODEL_NAME", j->o->model_name}};
    json_t *env = json_object_get(j->plan->config, "env"), *val;
    const char *key;
    for (size_t i = 0; i < sizeof defaults / sizeof defaults[0]; i++)
        if (!json_object_get(env, defaults[i].key))
            kv_add(P->env, &P->n_env, defaults[i].key, defaults[i].value);
    json_object_foreach (env, key, val)
        kv_add(P->env, &P->n_env, key, json_string_value(val));
}

/* The base's facts, from the weights layer's record (NULL when absent). */
static const json_t *base_facts(const struct exec_job *j)
{
    for (size_t i = 0; i < j->node->n_inputs; i++)
        if (j->plan->nodes[j->node->inputs[i]].role == PLAN_ROLE_BASE)
            return json_object_get(exec_input(j, i)->result, "model");
    return NULL;
}

static int op_image(const struct exec_job *j, struct exec_node *r, struct mf_err *err)
{
    static const char *const entrypoint[] = {"/usr/bin/" RUNTIME_NAME, "--config",
                                             CONFIG_IN_IMAGE};
    struct image_parts *P = calloc(1, sizeof *P);
    struct store_desc md;
    int64_t mtime;
    if (!P)
        return mf_err_set(err, MF_ENOMEM, "out of memory");
    int rc = layer_source_date(&mtime, err);
    if (!rc)
        rc = image_layers(j, P, mtime, err);
    if (!rc) {
        time_t t = (time_t)mtime;
        struct tm tm;
        if (!gmtime_r(&t, &tm) || !strftime(P->created, sizeof P->created, "%Y-%m-%dT%H:%M:%SZ", &tm))
            snprintf(P->created, sizeof P->created, "1970-01-01T00:00:00Z");
        image_labels(j, P, base_facts(j));
        image_env(j, P);
        struct oci_image img = {
            .entrypoint = entrypoint, .n_entrypoint = 3, .env = P->env, .n_env = P->n_env,
            .labels = P->labels, .n_labels = P->n_labels, .layers = P->layers,
            .n_layers = P->n_layers, .created = mtime};
        rc = oci_image_write(j->s, &img, NULL, &md, err);
    }
    if (!rc) {
        snprintf(r->digest, sizeof r->digest, "%s", md.digest);
        r->size = md.size;
        r->result = json_pack("{s:s, s:I, s:s, s:b}", "digest", md.digest, "size",
                              (json_int_t)md.size, "mediaType", md.media_type, "runtime",
                              j->o->runtime != NULL);
        rc = r->result ? 0 : mf_err_set(err, MF_ENOMEM, "out of memory");
    }
    free(P);
    return rc;
}

int exec_op_run(const struct exec_job *j, struct exec_node *r, int *cached, struct mf_err *err)
{
    *cached = 0;
    switch (j->node->op) {
    case PLAN_SOURCE:
        return op_source(j, r, cached, err);
    case PLAN_CHECK:
        return op_check(j, r, cached, err);
    case PLAN_LAYER:
        return op_layer(j, r, err);
    case PLAN_CONFIG:
        return op_config(j, r, err);
    case PLAN_IMAGE:
        return op_image(j, r, err);
    case PLAN_RUN:
        return exec_op_sandbox(j, r, cached, err);
    case PLAN_CONVERT:
        return exec_op_convert(j, r, cached, err);
    case PLAN_MERGE:
        return exec_op_merge(j, r, cached, err);
    case PLAN_QUANTIZE:
        return exec_op_quantize(j, r, cached, err);
    default:
        return mf_err_set(err, MF_EUNSUPPORTED, "%s steps are not supported yet",
                          plan_op_name(j->node->op));
    }
}
