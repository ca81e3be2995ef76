/*
 * oci.c: image config and manifest, and image archives in and out.
 *
 * Owns the JSON documents of an image (config, manifest, index.json of an
 * export, docker's manifest.json and repositories); the store owns the blobs
 * and tags, layer.c the tar bytes. Invariants:
 *   (1) every document is dumped with JSON_SORT_KEYS | JSON_COMPACT and
 *       every time in it comes from oci_image.created, so digests are stable;
 *   (2) a tag is set only after everything it reaches is in the store and
 *       verified (oci_image_write: config and manifest put first; oci_load:
 *       all blobs verified against their names, all references checked);
 *   (3) an archive member is used only after oci_member_check and a size
 *       check; the tar is read once, in order, blobs streamed to the store.
 *
 * oci_load's states: READING (members, oci_load_member) -> CHECKING (index
 * and manifests, check_index; docker's manifest.json against them,
 * check_docker and oci_docker.c) -> TAGGING (set_tags) -> done; any failure
 * before TAGGING leaves the tags as they were.
 */
#include "image/oci.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <archive.h>
#include <archive_entry.h>

#include "common/buf.h"
#include "common/file.h"
#include "common/json.h"

#define JSON_CANON (JSON_SORT_KEYS | JSON_COMPACT)
#define DEFAULT_PATH "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#define LAYOUT_MAX 4096u  /* bytes of oci-layout we agree to parse */
#define MEMBERS_MAX 1000000u /* regular members of an archive we keep the names of */
#define COPY_CHUNK (1u << 20)

#if defined(__x86_64__)
#define HOST_ARCH "amd64"
#elif defined(__aarch64__)
#define HOST_ARCH "arm64"
#else
#define HOST_ARCH "unknown"
#endif

/* ---- small JSON helpers ---- */

static void rfc3339(int64_t t, char out[STORE_TIME_MAX])
{
    time_t tt = (time_t)t;
    struct tm tm;
    if (!gmtime_r(&tt, &tm) || strftime(out, STORE_TIME_MAX, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
        memcpy(out, "1970-01-01T00:00:00Z", 21);
}

static json_t *desc_json(const struct store_desc *d)
{
    return json_pack("{s:s, s:s, s:I}", "mediaType", d->media_type, "digest", d->digest, "size",
                     (json_int_t)d->size);
}

static json_t *str_array(const char *const *v, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; a && i < n; i++)
        json_array_append_new(a, json_string(v[i]));
    return a;
}

/* Dumps v canonically and stores it; d gets media type mt. Consumes v. */
static int put_json(struct store *s, json_t *v, const char *mt, struct store_desc *d,
                    struct mf_err *err)
{
    struct mf_buf b;
    mf_buf_init(&b, STORE_MANIFEST_MAX);
    int rc = v ? mf_json_dump(v, JSON_CANON, &b, err)
               : mf_err_set(err, MF_ENOMEM, "out of memory building %s", mt);
    if (rc == 0)
        rc = store_put_mem(s, b.data, b.len, d->digest, err);
    if (rc == 0) {
        d->size = b.len;
        snprintf(d->media_type, sizeof d->media_type, "%s", mt);
    }
    mf_buf_free(&b);
    json_decref(v);
    return rc;
}

/* ---- config and manifest ---- */

static json_t *config_section(const struct oci_image *img)
{
    json_t *env = json_array(), *labels = json_object();
    json_array_append_new(env, json_string(DEFAULT_PATH));
    for (size_t i = 0; i < img->n_env; i++) {
        json_t *kv = json_sprintf("%s=%s", img->env[i].key, img->env[i].value);
        json_array_append_new(env, kv);
    }
    for (size_t i = 0; i < img->n_labels; i++)
        json_object_set_new(labels, img->labels[i].key, json_string(img->labels[i].value));
    return json_pack("{s:o, s:o, s:{s:{}}, s:o, s:s}", "Entrypoint",
                     str_array(img->entrypoint, img->n_entrypoint), "Env", env, "ExposedPorts",
                     "8080/tcp", "Labels", labels, "WorkingDir", "/");
}

int oci_config_json(const struct oci_image *img, json_t **out, struct mf_err *err)
{
    char created[STORE_TIME_MAX];
    rfc3339(img->created, created);
    json_t *diff = json_array(), *hist = json_array();
    for (size_t i = 0; i < img->n_layers; i++) {
        json_array_append_new(diff, json_string(img->layers[i].layer->diff_id));
        const char *by = img->layers[i].created_by ? img->layers[i].created_by : "";
        json_array_append_new(hist, json_pack("{s:s, s:s}", "created", created, "created_by", by));
    }
    for (size_t i = 0; i < img->n_notes; i++)
        json_array_append_new(hist, json_pack("{s:s, s:s, s:b}", "created", created, "created_by",
                                              img->notes[i], "empty_layer", 1));
    json_t *c = json_pack("{s:s, s:s, s:s, s:o, s:{s:s, s:o}, s:o}", "architecture",
                          img->architecture ? img->architecture : HOST_ARCH, "os",
                          img->os ? img->os : "linux", "created", created, "config",
                          config_section(img), "rootfs", "type", "layers", "diff_ids", diff,
                          "history", hist);
    if (!c)
        return mf_err_set(err, MF_ENOMEM, "cannot build the image config (bad UTF-8 in a "
                          "label, env or history entry?)");
    *out = c;
    return 0;
}

static json_t *layer_desc_json(const struct layer_result *l)
{
    json_t *d = desc_json(&l->desc);
    if (d && l->filepath[0]) {
        const char *base = strrchr(l->filepath, '/');
        json_object_set_new(d, "annotations",
                            json_pack("{s:s, s:s}", OCI_ANN_FILEPATH, l->filepath, OCI_ANN_TITLE,
                                      base ? base + 1 : l->filepath));
    }
    return d;
}

int oci_image_write(struct store *s, const struct oci_image *img, const char *tag,
                    struct store_desc *manifest, struct mf_err *err)
{
    if (img->n_layers == 0 || img->n_entrypoint == 0)
        return mf_err_set(err, MF_EINVAL, "an image needs at least one layer and an entrypoint");
    if (tag && !store_tag_valid(tag))
        return mf_err_set(err, MF_EINVAL, "'%s' is not a valid image name", tag);
    json_t *cfg = NULL;
    struct store_desc cd, md;
    int rc = oci_config_json(img, &cfg, err);
    if (rc == 0)
        rc = put_json(s, cfg, OCI_MT_CONFIG, &cd, err);
    if (rc != 0)
        return rc;
    char created[STORE_TIME_MAX];
    rfc3339(img->created, created);
    json_t *layers = json_array();
    for (size_t i = 0; i < img->n_layers; i++)
        json_array_append_new(layers, layer_desc_json(img->layers[i].layer));
    json_t *m = json_pack("{s:i, s:s, s:o, s:o, s:{s:s}}", "schemaVersion", 2, "mediaType",
                          STORE_MT_OCI_MANIFEST, "config", desc_json(&cd), "layers", layers,
                          "annotations", STORE_ANN_CREATED, created);
    rc = put_json(s, m, STORE_MT_OCI_MANIFEST, &md, err);
    if (rc == 0 && tag)
        rc = store_tag_set(s, tag, &md, created, err);
    if (rc == 0)
        *manifest = md;
    return rc;
}

/* ---- reading images back ---- */

int oci_resolve(struct store *s, const char *ref, struct store_desc *d, struct mf_err *err)
{
    if (!store_digest_valid(ref)) {
        struct store_tag t;
        int rc = store_tag_get(s, ref, &t, err);
        if (rc == 0)
            *d = t.desc;
        return rc;
    }
    uint64_t size;
    int rc = store_blob_size(s, ref, &size, err);
    if (rc == 0) {
        snprintf(d->media_type, sizeof d->media_type, "%s", STORE_MT_OCI_MANIFEST);
        snprintf(d->digest, sizeof d->digest, "%s", ref);
        d->size = size;
    }
    return rc;
}

/* Reads and parses a JSON blob (verified). *out is a new reference. */
static int read_json_blob(struct store *s, const char *digest, json_t **out, struct mf_err *err)
{
    char *text = NULL;
    size_t len = 0;
    int rc = store_blob_read(s, digest, STORE_MANIFEST_MAX, &text, &len, err);
    json_t *v = rc ? NULL : mf_json_parse(text, len, digest, err);
    free(text);
    if (rc == 0 && !v)
        rc = err->code;
    if (rc == 0)
        *out = v;
    return rc;
}

int oci_inspect(struct store *s, const char *ref, json_t **out, struct mf_err *err)
{
    struct store_desc d;
    json_t *m = NULL, *cfg = NULL;
    const char *cd = NULL;
    int rc = oci_resolve(s, ref, &d, err);
    if (rc == 0)
        rc = read_json_blob(s, d.digest, &m, err);
    if (rc == 0 && (!json_is_object(json_object_get(m, "config")) ||
                    mf_json_get_str(json_object_get(m, "config"), "digest", d.digest, &cd, err) ||
                    !store_digest_valid(cd)))
        rc = mf_err_set(err, MF_EFORMAT, "manifest %s has no valid config descriptor", d.digest);
    if (rc == 0)
        rc = read_json_blob(s, cd, &cfg, err);
    if (rc == 0)
        *out = json_pack("{s:s, s:s, s:s, s:I, s:O, s:O}", "name", ref, "digest", d.digest,
                         "mediaType", d.media_type, "size", (json_int_t)d.size, "manifest", m,
                         "config", cfg);
    if (rc == 0 && !*out)
        rc = mf_err_set(err, MF_ENOMEM, "out of memory describing %s", ref);
    json_decref(m);
    json_decref(cfg);
    return rc;
}

/* The blobs of one image: [0] the manifest, then config and layers. */
struct blobs {
    struct store_desc *d; /* owned: n descriptors */
    size_t n;             /* entries of d */
    char cfg_hex[65];     /* the config digest's hex (docker manifest.json) */
};

static int image_blobs(struct store *s, const struct store_desc *m, struct blobs *b,
                       struct mf_err *err)
{
    char *text = NULL;
    size_t len = 0, n = 0;
    struct store_desc *refs = NULL;
    if (strcmp(m->media_type, STORE_MT_OCI_MANIFEST) != 0)
        return mf_err_set(err, MF_EUNSUPPORTED, "%s is a %s; only single-platform OCI "
                          "manifests can be exported", m->digest, m->media_type);
    int rc = store_blob_read(s, m->digest, STORE_MANIFEST_MAX, &text, &len, err);
    if (rc == 0)
        rc = store_oci_manifest_refs(text, len, m->media_type, m->digest, &refs, &n, err);
    free(text);
    struct store_desc *all = rc ? NULL : calloc(n + 1, sizeof *all);
    if (rc == 0 && !all)
        rc = mf_err_set(err, MF_ENOMEM, "out of memory listing %s", m->digest);
    if (rc == 0) {
        all[0] = *m;
        memcpy(all + 1, refs, n * sizeof *refs);
        b->d = all;
        b->n = n + 1;
        snprintf(b->cfg_hex, sizeof b->cfg_hex, "%s", n ? refs[0].digest + 7 : "");
    }
    free(refs);
    return rc;
}

/* ---- names: "repo[:tag]" ---- */

struct name {
    char repo[STORE_REF_MAX]; /* "example.com/a/b" or "llama" */
    char tag[STORE_REF_MAX];  /* "latest" when none was given */
};

static void name_split(const char *ref, struct name *nm)
{
    const char *slash = strrchr(ref, '/');
    const char *colon = strrchr(slash ? slash : ref, ':');
    size_t rlen = colon ? (size_t)(colon - ref) : strlen(ref);
    snprintf(nm->repo, sizeof nm->repo, "%.*s", (int)rlen, ref);
    snprintf(nm->tag, sizeof nm->tag, "%s", colon ? colon + 1 : "latest");
}

/* docker.io/library/x:t, as containerd and `docker save` name images. */
static void name_full(const struct name *nm, char *out, size_t cap)
{
    const char *slash = strchr(nm->repo, '/');
    size_t first = slash ? (size_t)(slash - nm->repo) : 0;
    int domain = slash && (memchr(nm->repo, '.', first) || memchr(nm->repo, ':', first) ||
                           strncmp(nm->repo, "localhost/", 10) == 0);
    snprintf(out, cap, "%s%s:%s", domain ? "" : slash ? "docker.io/" : "docker.io/library/",
             nm->repo, nm->tag);
}

/* ---- export ---- */

int oci_output_parse(const char *spec, struct oci_output *o, struct mf_err *err)
{
    struct oci_output r = {0};
    const char *p = spec;
    while (p && *p) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len > 5 && strncmp(p, "type=", 5) == 0) {
            r.type = len == 8 && !strncmp(p + 5, "oci", 3)         ? OCI_OUT_OCI
                     : len == 11 && !strncmp(p + 5, "docker", 6)   ? OCI_OUT_DOCKER
                     : len == 13 && !strncmp(p + 5, "registry", 8) ? OCI_OUT_REGISTRY
                                                                   : 0;
            if (!r.type)
                return mf_err_set(err, MF_EINVAL, "output '%s': unknown type '%.*s' (use oci, "
                                  "docker or registry)", spec, (int)len - 5, p + 5);
        } else if (len > 5 && strncmp(p, "dest=", 5) == 0 && len - 5 < sizeof r.dest) {
            memcpy(r.dest, p + 5, len - 5);
        } else if (len > 5 && strncmp(p, "name=", 5) == 0 && len - 5 < sizeof r.name) {
            memcpy(r.name, p + 5, len - 5);
        } else if (len == 22 && strncmp(p, "registry.insecure=true", 22) == 0) {
            r.insecure = 1;
        } else if (!end && p == spec && len < sizeof r.dest && !memchr(p, '=', len)) {
            memcpy(r.dest, p, len); /* a bare path */
        } else
            return mf_err_set(err, MF_EINVAL, "output '%s': cannot parse '%.*s'", spec, (int)len,
                              p);
        p = end ? end + 1 : NULL;
    }
    size_t dl = strlen(r.dest);
    r.tar = dl > 4 && strcmp(r.dest + dl - 4, ".tar") == 0;
    if (!r.type)
        r.type = r.tar ? OCI_OUT_DOCKER : OCI_OUT_OCI;
    if (r.type != OCI_OUT_REGISTRY && (r.name[0] || r.insecure))
        return mf_err_set(err, MF_EINVAL, "output '%s': name= and registry.insecure= go with "
                          "type=registry", spec);
    if (r.type == OCI_OUT_REGISTRY && dl)
        return mf_err_set(err, MF_EINVAL, "output '%s': type=registry takes name=, not dest=",
                          spec);
    if (r.type != OCI_OUT_REGISTRY && !dl)
        return mf_err_set(err, MF_EINVAL, "output '%s' needs dest=", spec);
    if (r.type == OCI_OUT_DOCKER && !r.tar)
        return mf_err_set(err, MF_EINVAL, "output '%s': type=docker needs dest=FILE.tar", spec);
    *o = r;
    return 0;
}

/* The documents an export writes next to the blobs, as canonical JSON text. */
struct docs {
    char *layout;     /* owned: oci-layout */
    char *index;      /* owned: index.json */
    char *manifest;   /* owned: docker manifest.json, or NULL */
    char *repos;      /* owned: docker repositories, or NULL */
};

static char *dump(json_t *v)
{
    char *t = v ? json_dumps(v, JSON_CANON) : NULL;
    json_decref(v);
    return t;
}

static int make_docs(const struct blobs *b, const char *name, int docker, struct docs *d,
                     struct mf_err *err)
{
    struct name nm;
    char full[2 * STORE_REF_MAX + 32], short_name[2 * STORE_REF_MAX];
    name_split(name, &nm);
    name_full(&nm, full, sizeof full);
    snprintf(short_name, sizeof short_name, "%s:%s", nm.repo, nm.tag);
    json_t *m = desc_json(&b->d[0]);
    /* docker save: ref.name is the tag and the full name goes to containerd's key */
    json_object_set_new(m, "annotations",
                        docker ? json_pack("{s:s, s:s}", STORE_ANN_REF_NAME, nm.tag,
                                           OCI_ANN_CONTAINERD_NAME, full)
                               : json_pack("{s:s}", STORE_ANN_REF_NAME, name));
    d->layout = dump(json_pack("{s:s}", "imageLayoutVersion", "1.0.0"));
    d->index = dump(json_pack("{s:i, s:s, s:[o]}", "schemaVersion", 2, "mediaType",
                              STORE_MT_OCI_INDEX, "manifests", m));
    if (docker) {
        json_t *layers = json_array();
        for (size_t i = 2; i < b->n; i++)
            json_array_append_new(layers, json_sprintf("blobs/sha256/%s", b->d[i].digest + 7));
        d->manifest = dump(json_pack("[{s:o, s:[s], s:o}]", "Config",
                                     json_sprintf("blobs/sha256/%s", b->cfg_hex), "RepoTags",
                                     short_name, "Layers", layers));
        d->repos = dump(json_pack("{s:{s:s}}", nm.repo, nm.tag, b->cfg_hex));
    }
    if (!d->layout || !d->index || (docker && (!d->manifest || !d->repos)))
        return mf_err_set(err, MF_ENOMEM, "out of memory writing the index of %s", name);
    return 0;
}

static void docs_free(struct docs *d)
{
    free(d->layout);
    free(d->index);
    free(d->manifest);
    free(d->repos);
}

static int copy_blob(struct store *s, const char *digest, const char *dest, struct mf_err *err)
{
    char *src = NULL;
    int rc = store_blob_path(s, digest, &src, err);
    if (rc == 0 && link(src, dest) != 0 && errno != EEXIST) {
        /* another file system: copy (in the kernel where it can), atomically */
        struct mf_file_tmp t;
        struct stat st;
        int fd = open(src, O_RDONLY | O_CLOEXEC);
        rc = fd < 0 || fstat(fd, &st) != 0 ? mf_err_sys(err, MF_EIO, errno, "cannot read %s", src)
                                           : mf_file_tmp_open(&t, dest, err);
        int opened = rc == 0;
        if (rc == 0)
            rc = layer_copy_fd(fd, t.fd, (uint64_t)st.st_size, src, err);
        if (rc == 0)
            rc = mf_file_tmp_commit(&t, err);
        else if (opened)
            mf_file_tmp_abort(&t);
        if (fd >= 0)
            close(fd);
    }
    free(src);
    return rc;
}

static int write_file_in(const char *dir, const char *name, const char *text, struct mf_err *err)
{
    char path[8192];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return mf_file_write_atomic(path, text, strlen(text), err);
}

static int export_dir(struct store *s, const struct blobs *b, const struct docs *d,
                      const char *dir, struct mf_err *err)
{
    char path[8192];
    snprintf(path, sizeof path, "%s/blobs/sha256", dir);
    int rc = mf_file_mkdirs(path, err);
    for (size_t i = 0; rc == 0 && i < b->n; i++) {
        snprintf(path, sizeof path, "%s/blobs/sha256/%s", dir, b->d[i].digest + 7);
        rc = copy_blob(s, b->d[i].digest, path, err);
    }
    if (rc == 0)
        rc = write_file_in(dir, "oci-layout", d->layout, err);
    if (rc == 0)
        rc = write_file_in(dir, "index.json", d->index, err); /* last: the layout is complete */
    return rc;
}

static int export_tar(struct store *s, const struct blobs *b, const struct docs *d,
                      const char *dest, struct mf_err *err)
{
    size_t n = 0;
    struct layer_entry *e = calloc(b->n + 4, sizeof *e);
    char(*names)[80] = calloc(b->n, sizeof *names);
    char **paths = calloc(b->n, sizeof *paths);
    int rc = e && names && paths ? 0 : mf_err_set(err, MF_ENOMEM, "out of memory for %s", dest);
    for (size_t i = 0; rc == 0 && i < b->n; i++) {
        snprintf(names[i], sizeof names[i], "blobs/sha256/%s", b->d[i].digest + 7);
        rc = store_blob_path(s, b->d[i].digest, &paths[i], err);
        e[n++] = (struct layer_entry){.path = names[i], .src = paths[i], .mode = 0644};
    }
    const char *fn[] = {"oci-layout", "index.json", "manifest.json", "repositories"};
    const char *tx[] = {d->layout, d->index, d->manifest, d->repos};
    for (size_t i = 0; i < 4; i++)
        if (tx[i])
            e[n++] = (struct layer_entry){.path = fn[i], .data = tx[i], .len = strlen(tx[i]),
                                          .mode = 0644};
    struct mf_file_tmp t;
    if (rc == 0 && (rc = mf_file_tmp_open(&t, dest, err)) == 0) {
        rc = layer_tar_write_fd(e, n, 0, t.fd, err); /* blobs copied in the kernel */
        if (rc == 0)
            rc = mf_file_tmp_commit(&t, err);
        else
            mf_file_tmp_abort(&t);
    }
    for (size_t i = 0; paths && i < b->n; i++)
        free(paths[i]);
    free(paths);
    free(names);
    free(e);
    return rc;
}

int oci_export(struct store *s, const char *ref, const char *name, const struct oci_output *o,
               struct mf_err *err)
{
    struct store_desc m;
    struct blobs b = {0};
    struct docs d = {0};
    if (o->type == OCI_OUT_REGISTRY)
        return mf_err_set(err, MF_EINVAL, "type=registry is a push (mfc push), not an export");
    int rc = oci_resolve(s, ref, &m, err);
    if (rc == 0)
        rc = image_blobs(s, &m, &b, err);
    if (rc == 0)
        rc = make_docs(&b, name ? name : ref, o->type == OCI_OUT_DOCKER, &d, err);
    if (rc == 0)
        rc = o->tar ? export_tar(s, &b, &d, o->dest, err) : export_dir(s, &b, &d, o->dest, err);
    if (rc != 0)
        mf_err_prefix(err, "exporting %s to %s", ref, o->dest);
    docs_free(&d);
    free(b.d);
    return rc;
}

/* ---- load ---- */

int oci_member_check(const char *name, const char **clean, struct mf_err *err)
{
    const char *p = strncmp(name, "./", 2) == 0 ? name + 2 : name;
    size_t n = strlen(p);
    if (n && p[n - 1] == '/')
        n--; /* a directory */
    for (size_t i = 0, start = 0; i <= n; i++) {
        if (i < n && p[i] != '/')
            continue;
        size_t len = i - start;
        if (len == 0 || (len == 1 && p[start] == '.') ||
            (len == 2 && p[start] == '.' && p[start + 1] == '.') || n >= 4096)
            return mf_err_set(err, MF_EFORMAT, "archive member '%s' is not a safe relative path",
                              name);
        start = i + 1;
    }
    *clean = p;
    return 0;
}

/* What the reading pass collected. */
struct loaded {
    struct mf_buf layout;  /* oci-layout text */
    struct mf_buf index;   /* index.json text */
    struct mf_buf docker;  /* manifest.json text */
    int have_layout;       /* nonzero once oci-layout was read */
    int have_index;        /* nonzero once index.json was read */
    int have_docker;       /* nonzero once manifest.json was read */
    char **members;        /* owned: every regular member's clean name */
    size_t n_members;      /* entries in members */
    size_t cap_members;    /* allocated */
};

static int add_member(struct loaded *L, const char *p, struct mf_err *err)
{
    if (L->n_members == MEMBERS_MAX)
        return mf_err_set(err, MF_ERANGE, "the archive has more than %u files", MEMBERS_MAX);
    if (L->n_members == L->cap_members) {
        size_t cap = L->cap_members ? L->cap_members * 2 : 64;
        char **m = realloc(L->members, cap * sizeof *m);
        if (!m)
            return mf_err_set(err, MF_ENOMEM, "out of memory");
        L->members = m;
        L->cap_members = cap;
    }
    if (!(L->members[L->n_members] = strdup(p)))
        return mf_err_set(err, MF_ENOMEM, "out of memory");
    L->n_members++;
    return 0;
}

static int read_member_text(struct archive *a, struct mf_buf *b, const char *what,
                            struct mf_err *err)
{
    char buf[65536];
    la_ssize_t got;
    mf_buf_reset(b);
    while ((got = archive_read_data(a, buf, sizeof buf)) > 0)
        if (mf_buf_append(b, buf, (size_t)got, err) != 0)
            return mf_err_set(err, MF_EFORMAT, "%s is larger than %zu bytes", what, b->max);
    return got < 0 ? mf_err_set(err, MF_EFORMAT, "%s: %s", what, archive_error_string(a)) : 0;
}

static int read_member_blob(struct store *s, struct archive *a, const char *hex, int64_t size,
                            struct mf_err *err)
{
    char digest[STORE_DIGEST_BUF];
    snprintf(digest, sizeof digest, "sha256:%s", hex);
    if (!store_digest_valid(digest))
        return mf_err_set(err, MF_EFORMAT, "archive member blobs/sha256/%s is not a digest", hex);
    if (size < 0 || (uint64_t)size > OCI_BLOB_MAX)
        return mf_err_set(err, MF_EFORMAT, "blob %s: size %lld is out of range", digest,
                          (long long)size);
    struct store_blob_writer *w;
    int rc = store_blob_writer_open(s, digest, &w, err);
    char *buf = rc ? NULL : malloc(COPY_CHUNK);
    la_ssize_t got = 0;
    if (rc == 0 && !buf)
        rc = mf_err_set(err, MF_ENOMEM, "out of memory reading %s", digest);
    while (rc == 0 && (got = archive_read_data(a, buf, COPY_CHUNK)) > 0)
        rc = store_blob_writer_write(w, buf, (size_t)got, err);
    if (rc == 0 && got < 0)
        rc = mf_err_set(err, MF_EFORMAT, "blob %s: %s", digest, archive_error_string(a));
    free(buf);
    if (rc == 0)
        return store_blob_writer_commit(w, digest, NULL, err);
    store_blob_writer_discard(w);
    return rc;
}

static int oci_load_member(struct store *s, struct archive *a, struct archive_entry *ae,
                           struct loaded *L, struct mf_err *err)
{
    const char *name = archive_entry_pathname(ae), *p;
    if (!name || !strcmp(name, ".") || !strcmp(name, "./"))
        return 0;
    int rc = oci_member_check(name, &p, err);
    mode_t type = archive_entry_filetype(ae);
    if (rc == 0 && type == AE_IFDIR)
        return 0;
    if (rc == 0 && type != AE_IFREG)
        return mf_err_set(err, MF_EFORMAT, "archive member '%s' is not a regular file", name);
    if (rc == 0)
        rc = add_member(L, p, err);
    if (rc != 0)
        return rc;
    if (strcmp(p, "oci-layout") == 0 && (rc = read_member_text(a, &L->layout, p, err)) == 0)
        L->have_layout = 1;
    else if (strcmp(p, "index.json") == 0 && (rc = read_member_text(a, &L->index, p, err)) == 0)
        L->have_index = 1;
    else if (strcmp(p, "manifest.json") == 0 &&
             (rc = read_member_text(a, &L->docker, p, err)) == 0)
        L->have_docker = 1;
    else if (strncmp(p, "blobs/sha256/", 13) == 0)
        rc = read_member_blob(s, a, p + 13, archive_entry_size(ae), err);
    return rc; /* other members (repositories, …) are allowed and unused */
}

static int check_manifest(struct store *s, const struct store_desc *d, struct mf_err *err)
{
    char *text = NULL;
    size_t len = 0, n = 0;
    struct store_desc *refs = NULL;
    uint64_t size = 0;
    if (strcmp(d->media_type, STORE_MT_OCI_MANIFEST) != 0 &&
        strcmp(d->media_type, STORE_MT_DOCKER_MANIFEST) != 0)
        return mf_err_set(err, MF_EUNSUPPORTED, "index entry %s is a %s, not an image manifest",
                          d->digest, d->media_type);
    int rc = store_blob_size(s, d->digest, &size, err);
    if (rc == 0 && size != d->size)
        rc = mf_err_set(err, MF_EINTEGRITY, "manifest %s: %llu bytes, index says %llu", d->digest,
                        (unsigned long long)size, (unsigned long long)d->size);
    if (rc == 0)
        rc = store_blob_read(s, d->digest, STORE_MANIFEST_MAX, &text, &len, err);
    if (rc == 0)
        rc = store_oci_manifest_refs(text, len, d->media_type, d->digest, &refs, &n, err);
    for (size_t i = 0; rc == 0 && i < n; i++) {
        rc = store_blob_size(s, refs[i].digest, &size, err);
        if (rc == MF_ENOTFOUND)
            rc = mf_err_set(err, MF_ENOTFOUND, "blob %s of manifest %s is not in the archive",
                            refs[i].digest, d->digest);
        else if (rc == 0 && size != refs[i].size)
            rc = mf_err_set(err, MF_EINTEGRITY, "blob %s: %llu bytes, manifest says %llu",
                            refs[i].digest, (unsigned long long)size,
                            (unsigned long long)refs[i].size);
    }
    free(text);
    free(refs);
    return rc;
}

/* The tag an index entry asks for: containerd's full name (docker.io/library/
 * stripped), else ref.name. "" when it names none. */
static void entry_name(const json_t *m, char out[STORE_REF_MAX])
{
    const json_t *ann = json_object_get(m, "annotations");
    const char *full = json_string_value(json_object_get(ann, OCI_ANN_CONTAINERD_NAME));
    const char *ref = json_string_value(json_object_get(ann, STORE_ANN_REF_NAME));
    if (full && strncmp(full, "docker.io/library/", 18) == 0)
        full += 18;
    snprintf(out, STORE_REF_MAX, "%s", full ? full : ref ? ref : "");
}

static int check_index(struct store *s, const struct loaded *L, const char *name,
                       json_t **index, struct mf_err *err)
{
    json_t *lay = NULL, *idx = NULL;
    const char *ver = NULL;
    if (!L->have_layout || !L->have_index)
        return mf_err_set(err, MF_EFORMAT, "not an OCI layout archive (no %s); legacy docker "
                          "archives without index.json are not supported",
                          L->have_layout ? "index.json" : "oci-layout");
    lay = mf_json_parse(L->layout.data, L->layout.len, "oci-layout", err);
    int rc = lay ? mf_json_get_str(lay, "imageLayoutVersion", "oci-layout", &ver, err) : err->code;
    if (rc == 0 && strcmp(ver, "1.0.0") != 0)
        rc = mf_err_set(err, MF_EUNSUPPORTED, "oci-layout version %s (want 1.0.0)", ver);
    json_decref(lay);
    if (rc == 0)
        rc = store_oci_parse_index(L->index.data, L->index.len, "index.json", &idx, err);
    json_t *ms = json_object_get(idx, "manifests");
    if (rc == 0 && (json_array_size(ms) == 0 || (name && json_array_size(ms) != 1)))
        rc = mf_err_set(err, MF_EINVAL, "index.json lists %zu images; %s", json_array_size(ms),
                        name ? "a name can only be given to one" : "nothing to load");
    for (size_t i = 0; rc == 0 && i < json_array_size(ms); i++) {
        struct store_desc d;
        rc = store_oci_parse_desc(json_array_get(ms, i), "index.json", &d, err);
        if (rc == 0)
            rc = check_manifest(s, &d, err);
    }
    if (rc == 0)
        *index = idx;
    else
        json_decref(idx);
    return rc;
}

/* One index entry's image: its manifest's config and layer digests. */
static int docker_image(struct store *s, const json_t *entry, struct oci_docker_image *img,
                        struct mf_err *err)
{
    struct store_desc d;
    char *text = NULL;
    size_t len = 0, i;
    json_t *m = NULL, *l;
    int rc = store_oci_parse_desc(entry, "index.json", &d, err);
    if (!rc)
        rc = store_blob_read(s, d.digest, STORE_MANIFEST_MAX, &text, &len, err);
    if (!rc && !(m = mf_json_parse(text, len, d.digest, err)))
        rc = MF_EFORMAT;
    const char *cfg = json_string_value(json_object_get(json_object_get(m, "config"), "digest"));
    json_t *layers = json_object_get(m, "layers");
    if (!rc && (!cfg || !json_is_array(layers)))
        rc = mf_err_set(err, MF_EFORMAT, "manifest %s has no config or layers", d.digest);
    if (!rc && !(img->layers = calloc(json_array_size(layers) + 1, sizeof *img->layers)))
        rc = mf_err_set(err, MF_ENOMEM, "out of memory");
    if (!rc) {
        snprintf(img->config, sizeof img->config, "%s", cfg);
        json_array_foreach (layers, i, l) {
            const char *ld = json_string_value(json_object_get(l, "digest"));
            snprintf(img->layers[img->n_layers++], STORE_DIGEST_BUF, "%s", ld ? ld : "");
        }
    }
    json_decref(m);
    free(text);
    return rc;
}

/* docker's manifest.json, when the archive has one, against the index. */
static int check_docker(struct store *s, const struct loaded *L, const json_t *idx,
                        struct mf_err *err)
{
    const json_t *ms = json_object_get(idx, "manifests");
    size_t n = json_array_size(ms);
    struct oci_docker_image imgs[OCI_DOCKER_MAX_IMAGES];
    int rc = 0;
    if (!L->have_docker)
        return 0;
    if (n > OCI_DOCKER_MAX_IMAGES)
        return mf_err_set(err, MF_EUNSUPPORTED, "index.json lists %zu images (at most %d)", n,
                          OCI_DOCKER_MAX_IMAGES);
    memset(imgs, 0, sizeof imgs);
    for (size_t i = 0; !rc && i < n; i++)
        rc = docker_image(s, json_array_get(ms, i), &imgs[i], err);
    if (!rc)
        rc = oci_docker_check(L->docker.data, L->docker.len, imgs, n,
                              (const char *const *)L->members, L->n_members, err);
    for (size_t i = 0; i < n; i++)
        free(imgs[i].layers);
    return rc;
}

static int set_tags(struct store *s, const json_t *idx, const char *name, size_t *n_loaded,
                    struct mf_err *err)
{
    const json_t *ms = json_object_get(idx, "manifests");
    char names[16][STORE_REF_MAX];
    size_t n = json_array_size(ms);
    if (n > 16)
        return mf_err_set(err, MF_EUNSUPPORTED, "index.json lists %zu images (at most 16)", n);
    for (size_t i = 0; i < n; i++) { /* check every name before setting any */
        entry_name(json_array_get(ms, i), names[i]);
        if (name)
            snprintf(names[i], STORE_REF_MAX, "%s", name);
        if (!store_tag_valid(names[i]))
            return mf_err_set(err, MF_EINVAL, "image %zu of the archive has no usable name "
                              "('%s'); give one with -t", i + 1, names[i]);
    }
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        struct store_desc d;
        rc = store_oci_parse_desc(json_array_get(ms, i), "index.json", &d, err);
        if (rc == 0)
            rc = store_tag_set(s, names[i], &d, NULL, err);
    }
    if (rc == 0)
        *n_loaded = n;
    return rc;
}

int oci_load(struct store *s, const char *tar_path, const char *name, size_t *n_loaded,
             struct mf_err *err)
{
    struct loaded L = {0};
    mf_buf_init(&L.layout, LAYOUT_MAX);
    mf_buf_init(&L.index, STORE_INDEX_MAX);
    mf_buf_init(&L.docker, STORE_INDEX_MAX);
    json_t *idx = NULL;
    struct archive *a = archive_read_new();
    struct archive_entry *ae;
    int rc = a ? 0 : mf_err_set(err, MF_ENOMEM, "out of memory for a tar reader");
    if (rc == 0) {
        archive_read_support_format_tar(a);
        archive_read_support_filter_gzip(a);
        if (archive_read_open_filename(a, tar_path, 65536) != ARCHIVE_OK)
            rc = mf_err_set(err, MF_EIO, "%s: %s", tar_path, archive_error_string(a));
    }
    int ar = ARCHIVE_OK;
    while (rc == 0 && (ar = archive_read_next_header(a, &ae)) == ARCHIVE_OK)
        rc = oci_load_member(s, a, ae, &L, err);
    if (rc == 0 && ar != ARCHIVE_EOF)
        rc = mf_err_set(err, MF_EFORMAT, "%s: %s", tar_path, archive_error_string(a));
    if (rc == 0)
        rc = check_index(s, &L, name, &idx, err);
    if (rc == 0)
        rc = check_docker(s, &L, idx, err);
    if (rc == 0)
        rc = set_tags(s, idx, name, n_loaded, err);
    if (rc != 0 && strncmp(err->msg, tar_path, strlen(tar_path)) != 0)
        mf_err_prefix(err, "%s", tar_path);
    json_decref(idx);
    archive_read_free(a);
    mf_buf_free(&L.layout);
    mf_buf_free(&L.index);
    mf_buf_free(&L.docker);
    for (size_t i = 0; i < L.n_members; i++)
        free(L.members[i]);
    free(L.members);
    return rc;
}
