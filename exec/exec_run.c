/*
 * exec_run.c: the RUN step: a command in a bubblewrap sandbox (sandbox.h)
 * whose /out becomes an image layer and whose files later FROM/ADAPTER/DRAFT
 * lines can name as /out/PATH (docs/run.md).
 *
 * The node's args (plan.c) carry the command (shell or argv), network,
 * mounts (cache: target/id; secret: id/target/required, never content),
 * timeout, the ENV/ARG environment in effect, the paths its inputs get
 * under /inputs, and the /out files later lines consume (kept out of the
 * layer: they go into the image through their own layer). The key's content
 * (exec_run_content) is a digest of the build context's tree; cache mounts'
 * and secrets' contents are not in the key, as in BuildKit.
 *
 * Inside: /context (the build context, read-only), /inputs (earlier outputs,
 * read-only), /out (a fresh directory under the store's tmp/, writable),
 * cache mounts under <store>/run-cache/, secrets copied to /run/secrets/ID,
 * mfc at /opt/mfc/bin/mfc. After a zero exit every /out file is stored as a
 * blob (the record's "files" map, merged with the previous RUN's) and tarred
 * into one deterministic layer at out/...; the temp directory is always
 * removed. A failure names the status and the last output lines, with every
 * secret of the build masked in them (secret_mask.h), or withheld.
 */
#include "exec/exec_int.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sys/stat.h>

#include "common/buf.h"
#include "common/file.h"
#include "common/sha256.h"
#include "image/layer.h"
#include "exec/exec_allow.h"
#include "exec/sandbox.h"
#include "exec/secret_mask.h"

#define RUN_MAX_BINDS 4096         /* inputs, mounts and secrets of one RUN */
#define RUN_MAX_CONTEXT 100000     /* entries of the build context we hash */
#define RUN_MAX_DEPTH 64           /* directory depth walked (context and /out) */
#define RUN_DEFAULT_PATH "/opt/mfc/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#define RUN_MFC_PATH "/opt/mfc/bin/mfc"
#define RUN_EMPTY_TAR_LEN 1024     /* two zero records: an empty tar */

/* ---- small helpers ---------------------------------------------------------------- */

static int digest_text(const void *p, size_t n, char out[STORE_DIGEST_BUF], struct mf_err *err)
{
    uint8_t d[MF_SHA256_LEN];
    char hex[MF_SHA256_HEX_LEN + 1];
    int rc = mf_sha256_mem(p, n, d, err);
    if (!rc) {
        mf_sha256_hex(d, hex);
        snprintf(out, STORE_DIGEST_BUF, "sha256:%s", hex);
    }
    return rc;
}

/* Removes path and everything under it, making directories writable first
 * (a RUN may chmod what it wrote). Best effort; never follows symlinks. */
static void remove_tree(const char *path, int depth)
{
    struct stat st;
    if (lstat(path, &st) != 0)
        return;
    if (S_ISDIR(st.st_mode) && depth < RUN_MAX_DEPTH + 2) {
        chmod(path, 0700);
        DIR *d = opendir(path);
        struct dirent *e;
        while (d && (e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
                continue;
            char *c = NULL;
            if (asprintf(&c, "%s/%s", path, e->d_name) > 0) {
                remove_tree(c, depth + 1);
                free(c);
            }
        }
        if (d)
            closedir(d);
        rmdir(path);
    } else {
        unlink(path);
    }
}

static int name_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The entry names of dir, sorted bytewise (not by locale). */
static int list_dir(const char *dir, char ***names, size_t *n, struct mf_err *err)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    char **v = NULL;
    size_t cap = 0;
    *n = 0;
    if (!d)
        return mf_err_sys(err, MF_EIO, errno, "cannot read directory %s", dir);
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        if (*n == cap) {
            char **nv = realloc(v, (cap = cap ? cap * 2 : 16) * sizeof *nv);
            if (!nv)
                break;
            v = nv;
        }
        if (!(v[*n] = strdup(e->d_name)))
            break;
        (*n)++;
    }
    int oom = e != NULL;
    closedir(d);
    if (oom) {
        for (size_t i = 0; i < *n; i++)
            free(v[i]);
        free(v);
        return mf_err_set(err, MF_ENOMEM, "out of memory");
    }
    if (*n)
        qsort(v, *n, sizeof *v, name_cmp);
    *names = v;
    return 0;
}

static void free_names(char **v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

/* ---- the key's content: the build context ---------------------------------------- */

struct ctx_walk {
    struct store *s;
    struct mf_sha256 h;
    struct stat skip;   /* the store's root, when it lies inside the context */
    int have_skip;
    size_t n;
};

static int ctx_line(struct ctx_walk *w, const char *rel, const char *kind, const char *what,
                    struct mf_err *err)
{
    int rc = mf_sha256_update(&w->h, rel, strlen(rel) + 1, err);
    if (!rc)
        rc = mf_sha256_update(&w->h, kind, strlen(kind) + 1, err);
    if (!rc)
        rc = mf_sha256_update(&w->h, what, strlen(what) + 1, err);
    return rc;
}

static int ctx_dir(struct ctx_walk *w, const char *dir, const char *rel, int depth,
                   struct mf_err *err)
{
    char **names;
    size_t n;
    if (depth > RUN_MAX_DEPTH)
        return mf_err_set(err, MF_EINVAL, "the build context is nested deeper than %d at %s",
                          RUN_MAX_DEPTH, dir);
    int rc = list_dir(dir, &names, &n, err);
    for (size_t i = 0; !rc && i < n; i++) {
        char *path = NULL, *r = NULL;
        struct stat st;
        if (++w->n > RUN_MAX_CONTEXT) {
            rc = mf_err_set(err, MF_ERANGE, "the build context has more than %d entries; "
                            "point mfc build at a smaller directory", RUN_MAX_CONTEXT);
            break;
        }
        if (asprintf(&path, "%s/%s", dir, names[i]) < 0 ||
            asprintf(&r, "%s%s%s", rel, rel[0] ? "/" : "", names[i]) < 0) {
            free(path);
            rc = mf_err_set(err, MF_ENOMEM, "out of memory");
            break;
        }
        if (lstat(path, &st) != 0) {
            rc = mf_err_sys(err, MF_EIO, errno, "cannot stat %s", path);
        } else if (S_ISDIR(st.st_mode)) {
            if (!(w->have_skip && st.st_dev == w->skip.st_dev && st.st_ino == w->skip.st_ino))
                rc = ctx_line(w, r, "dir", "", err);
            if (!rc && !(w->have_skip && st.st_dev == w->skip.st_dev &&
                         st.st_ino == w->skip.st_ino))
                rc = ctx_dir(w, path, r, depth + 1, err);
        } else if (S_ISREG(st.st_mode)) {
            char d[STORE_DIGEST_BUF];
            uint64_t size;
            rc = store_digest_file(w->s, path, d, &size, err);
            if (!rc)
                rc = ctx_line(w, r, (st.st_mode & 0111) ? "exec" : "file", d, err);
        } else if (S_ISLNK(st.st_mode)) {
            char t[PATH_MAX];
            ssize_t k = readlink(path, t, sizeof t - 1);
            t[k > 0 ? k : 0] = '\0';
            rc = ctx_line(w, r, "link", t, err);
        }
        free(path);
        free(r);
    }
    free_names(names, n);
    return rc;
}

int exec_run_content(const struct exec_job *j, char content[STORE_DIGEST_BUF], struct mf_err *err)
{
    struct ctx_walk w = {.s = j->s};
    uint8_t d[MF_SHA256_LEN];
    char hex[MF_SHA256_HEX_LEN + 1];
    const char *dir = j->o->fo && j->o->fo->base_dir ? j->o->fo->base_dir : ".";
    w.have_skip = stat(store_root(j->s), &w.skip) == 0;
    int rc = mf_sha256_init(&w.h, err);
    if (rc)
        return rc;
    rc = ctx_dir(&w, dir, "", 0, err);
    if (rc) {
        mf_sha256_abort(&w.h);
        return mf_err_prefix(err, "hashing the build context");
    }
    rc = mf_sha256_final(&w.h, d, err);
    if (!rc) {
        mf_sha256_hex(d, hex);
        snprintf(content, STORE_DIGEST_BUF, "sha256:%s", hex);
    }
    return rc;
}

/* ---- /out PATH sources ------------------------------------------------------------ */

int exec_is_run_output(const struct plan_node *n)
{
    const char *k = json_string_value(json_object_get(n->args, "kind"));
    return n->op == PLAN_SOURCE && k && !strcmp(k, "run-output");
}

int exec_run_output(const struct exec_job *j, struct exec_node *r, int *cached, struct mf_err *err)
{
    const char *path = json_string_value(json_object_get(j->node->args, "path"));
    const json_t *files = json_object_get(exec_input(j, 0)->result, "files");
    const json_t *f = path ? json_object_get(files, path) : NULL;
    const char *d = json_string_value(json_object_get(f, "digest"));
    *cached = 0;
    if (!d) {
        char have[200] = "";
        size_t len = 0;
        const char *k;
        json_t *v;
        json_object_foreach ((json_t *)files, k, v) {
            int n = snprintf(have + len, sizeof have - len, "%s/out/%s", len ? ", " : "", k);
            if (n < 0 || (size_t)n >= sizeof have - len)
                break;
            len += (size_t)n;
        }
        return mf_err_set(err, MF_ENOTFOUND, "no RUN before this line wrote /out/%s (%s%s)",
                          path ? path : "?", have[0] ? "they wrote " : "their /out was empty",
                          have);
    }
    const char *pin = json_string_value(json_object_get(j->node->args, "pin"));
    if (pin && pin[0] && strcmp(pin, d) != 0)
        return mf_err_set(err, MF_EINTEGRITY, "/out/%s has digest %s, but it is pinned to %s",
                          path, d, pin);
    if (!store_blob_exists(j->s, d))
        return mf_err_set(err, MF_ENOTFOUND, "/out/%s (%s) is gone from the store; build "
                          "again with --no-cache", path, d);
    snprintf(r->digest, sizeof r->digest, "%s", d);
    r->size = (uint64_t)json_integer_value(json_object_get(f, "size"));
    r->result = json_pack("{s:s, s:I, s:s}", "digest", d, "size", (json_int_t)r->size, "from",
                          "run");
    return r->result ? 0 : mf_err_set(err, MF_ENOMEM, "out of memory");
}

/* ---- the sandbox's mounts -------------------------------------------------------- */

/* Strings owned for the duration of one RUN. */
struct run_ctx {
    const struct exec_job *j;
    struct sandbox_bind binds[RUN_MAX_BINDS];
    size_t n_binds;
    char *owned[RUN_MAX_BINDS * 2];
    size_t n_owned;
    char *out_dir;               /* the temp /out on the host */
};

static char *own(struct run_ctx *c, char *s)
{
    if (s && c->n_owned < sizeof c->owned / sizeof c->owned[0])
        return c->owned[c->n_owned++] = s;
    free(s);
    return NULL;
}

/* Adds a bind (rw: writable, 2: src's bytes copied in, for a secret); src or
 * dst NULL (an allocation or own() failed) is an error. */
static int bind(struct run_ctx *c, const char *src, const char *dst, int rw, struct mf_err *err)
{
    if (!src || !dst)
        return mf_err_set(err, MF_ENOMEM, "out of memory (or too many mounts and inputs)");
    if (c->n_binds == RUN_MAX_BINDS)
        return mf_err_set(err, MF_ERANGE, "a RUN has at most %d mounts and inputs",
                          RUN_MAX_BINDS);
    c->binds[c->n_binds++] = (struct sandbox_bind){src, dst, rw == 1, rw == 2};
    return 0;
}

/* The host file of a check or source node's output (the user's local file,
 * when the build did not copy it, else the blob). */
static int node_file(struct run_ctx *c, size_t k, char **path, struct mf_err *err)
{
    const struct exec_job *j = c->j;
    const struct exec_node *out = &j->b->nodes[k];
    if (j->plan->nodes[k].op == PLAN_CHECK && j->plan->nodes[k].n_inputs)
        k = j->plan->nodes[k].inputs[0];
    const char *p = json_string_value(json_object_get(j->b->nodes[k].result, "path"));
    if (j->plan->nodes[k].op == PLAN_SOURCE && p && !store_blob_exists(j->s, out->digest) &&
        !strcmp(j->b->nodes[k].digest, out->digest))
        return (*path = strdup(p)) ? 0 : mf_err_set(err, MF_ENOMEM, "out of memory");
    return store_blob_path(j->s, out->digest, path, err);
}

/* /inputs: each input at the path the plan gave it; a previous RUN's files
 * under /inputs/out/. */
static int bind_inputs(struct run_ctx *c, struct mf_err *err)
{
    const struct exec_job *j = c->j;
    const json_t *paths = json_object_get(j->node->args, "inputs");
    int rc = 0;
    for (size_t i = 0; !rc && i < j->node->n_inputs; i++) {
        const char *at = json_string_value(json_array_get(paths, i));
        size_t k = j->node->inputs[i];
        if (!at)
            continue;
        if (j->plan->nodes[k].op == PLAN_RUN) {
            const char *name;
            json_t *f;
            json_object_foreach (json_object_get(j->b->nodes[k].result, "files"), name, f) {
                char *src = NULL, *dst = NULL;
                rc = store_blob_path(j->s, json_string_value(json_object_get(f, "digest")), &src,
                                     err);
                if (rc)
                    break;
                src = own(c, src);
                if (asprintf(&dst, "/inputs/%s/%s", at, name) < 0)
                    dst = NULL;
                if ((rc = bind(c, src, own(c, dst), 0, err)) != 0)
                    break;
            }
        } else {
            char *src = NULL, *dst = NULL;
            rc = node_file(c, k, &src, err);
            if (!rc) {
                src = own(c, src);
                if (asprintf(&dst, "/inputs/%s", at) < 0)
                    dst = NULL;
                rc = bind(c, src, own(c, dst), 0, err);
            }
        }
    }
    return rc;
}

/* Cache mounts (<store>/run-cache/<sha256 of id or target>) and secrets. */
static int bind_mounts(struct run_ctx *c, struct mf_err *err)
{
    const struct exec_job *j = c->j;
    size_t i;
    json_t *m;
    int rc = 0;
    json_array_foreach (json_object_get(j->node->args, "mounts"), i, m) {
        const char *type = json_string_value(json_object_get(m, "type"));
        const char *id = json_string_value(json_object_get(m, "id"));
        const char *target = json_string_value(json_object_get(m, "target"));
        if (type && !strcmp(type, "cache")) {
            char key[STORE_DIGEST_BUF], *dir = NULL, *text = NULL;
            if (asprintf(&text, "%s:%s", id ? "id" : "target", id ? id : target) < 0)
                return mf_err_set(err, MF_ENOMEM, "out of memory");
            rc = digest_text(text, strlen(text), key, err);
            free(text);
            if (!rc && asprintf(&dir, "%s/run-cache/%.32s", store_root(j->s), key + 7) < 0)
                rc = mf_err_set(err, MF_ENOMEM, "out of memory");
            if (!rc && !(dir = own(c, dir)))
                rc = mf_err_set(err, MF_ERANGE, "a RUN has too many mounts and inputs");
            if (!rc && (rc = mf_file_mkdirs(dir, err)) == 0)
                rc = bind(c, dir, target, 1, err);
        } else {
            const struct exec_secret *s = NULL;
            for (size_t k = 0; id && k < j->o->n_secrets; k++)
                if (!strcmp(j->o->secrets[k].id, id))
                    s = &j->o->secrets[k];
            int required = json_is_true(json_object_get(m, "required"));
            if (!s && required)
                return mf_err_set(err, MF_ENOTFOUND, "secret '%s' is required: pass "
                                  "--secret id=%s,src=FILE to mfc build", id, id);
            if (!s)
                continue; /* BuildKit: a missing optional secret is just not mounted */
            char *dst = NULL;
            if (!target && asprintf(&dst, "/run/secrets/%s", id) < 0)
                dst = NULL;
            rc = bind(c, s->src, target ? target : own(c, dst), 2, err);
        }
        if (rc)
            return rc;
    }
    return 0;
}

/* "KEY=VALUE" entries: PATH and HOME defaults unless ENV/ARG set them. */
static int run_env(const json_t *env, const char ***out, size_t *n)
{
    const char *k;
    json_t *v;
    size_t cap = json_object_size(env) + 2, i = 0;
    const char **e = calloc(cap, sizeof *e);
    if (!e)
        return -1;
    if (!json_object_get(env, "PATH"))
        e[i++] = strdup("PATH=" RUN_DEFAULT_PATH);
    if (!json_object_get(env, "HOME"))
        e[i++] = strdup("HOME=/tmp");
    json_object_foreach ((json_t *)env, k, v) {
        char *s = NULL;
        if (asprintf(&s, "%s=%s", k, json_string_value(v) ? json_string_value(v) : "") < 0)
            s = NULL;
        e[i++] = s;
    }
    *out = e;
    *n = i;
    for (size_t x = 0; x < i; x++)
        if (!e[x])
            return -1;
    return 0;
}

static void free_env(const char **e, size_t n)
{
    for (size_t i = 0; e && i < n; i++)
        free((char *)e[i]);
    free(e);
}

/* ---- /out into blobs and a layer ------------------------------------------------- */

struct out_walk {
    struct store *s;
    const json_t *exclude;
    json_t *files;                  /* rel -> {digest, size, mode} */
    struct layer_entry *e;          /* the layer's entries */
    size_t n, cap;
    char **owned;                   /* paths the entries borrow */
};

static int excluded(const json_t *ex, const char *rel)
{
    size_t i;
    json_t *v;
    json_array_foreach (ex, i, v)
        if (json_string_value(v) && !strcmp(json_string_value(v), rel))
            return 1;
    return 0;
}

static int out_file(struct out_walk *w, char *path, char *rel, const struct stat *st,
                    struct mf_err *err)
{
    char d[STORE_DIGEST_BUF];
    uint64_t size;
    unsigned mode = (st->st_mode & 0111) ? 0755 : 0644;
    int rc = store_put_file(w->s, path, NULL, d, &size, err);
    if (!rc && json_object_set_new(w->files, rel,
                                   json_pack("{s:s, s:I, s:i}", "digest", d, "size",
                                             (json_int_t)size, "mode", (int)mode)) != 0)
        rc = mf_err_set(err, MF_ENOMEM, "out of memory");
    if (rc || excluded(w->exclude, rel))
        return rc;
    if (w->n == LAYER_MAX_ENTRIES)
        return mf_err_set(err, MF_ERANGE, "a RUN may leave at most %d files in /out",
                          LAYER_MAX_ENTRIES);
    if (w->n == w->cap) {
        size_t cap = w->cap ? w->cap * 2 : 16;
        struct layer_entry *e = realloc(w->e, cap * sizeof *e);
        char **o = e ? realloc(w->owned, cap * 2 * sizeof *o) : NULL;
        if (e)
            w->e = e;
        if (!o)
            return mf_err_set(err, MF_ENOMEM, "out of memory");
        w->owned = o;
        w->cap = cap;
    }
    char *lp = NULL;
    if (asprintf(&lp, "out/%s", rel) < 0)
        return mf_err_set(err, MF_ENOMEM, "out of memory");
    char *src = strdup(path);
    if (!src) {
        free(lp);
        return mf_err_set(err, MF_ENOMEM, "out of memory");
    }
    w->owned[2 * w->n] = lp;
    w->owned[2 * w->n + 1] = src;
    w->e[w->n++] = (struct layer_entry){.path = lp, .src = src, .mode = mode};
    return 0;
}

static int out_dir(struct out_walk *w, const char *dir, const char *rel, int depth,
                   struct mf_err *err)
{
    char **names;
    size_t n;
    if (depth > RUN_MAX_DEPTH)
        return mf_err_set(err, MF_EINVAL, "/out is nested deeper than %d", RUN_MAX_DEPTH);
    chmod(dir, 0700); /* a RUN may have left it unreadable */
    int rc = list_dir(dir, &names, &n, err);
    for (size_t i = 0; !rc && i < n; i++) {
        char *path = NULL, *r = NULL;
        struct stat st;
        if (asprintf(&path, "%s/%s", dir, names[i]) < 0 ||
            asprintf(&r, "%s%s%s", rel, rel[0] ? "/" : "", names[i]) < 0) {
            free(path);
            rc = mf_err_set(err, MF_ENOMEM, "out of memory");
            break;
        }
        if (lstat(path, &st) != 0)
            rc = mf_err_sys(err, MF_EIO, errno, "cannot stat /out/%s", r);
        else if (S_ISDIR(st.st_mode))
            rc = out_dir(w, path, r, depth + 1, err);
        else if (S_ISREG(st.st_mode))
            rc = (chmod(path, (st.st_mode & 0777) | 0400), out_file(w, path, r, &st, err));
        else
            rc = mf_err_set(err, MF_EUNSUPPORTED, "the RUN left /out/%s, which is not a "
                            "regular file or directory (symlinks and devices are not kept)", r);
        free(path);
        free(r);
    }
    free_names(names, n);
    return rc;
}

/* Stores /out: each file a blob, the layer of those not excluded. */
static int store_out(const struct exec_job *j, const char *dir, struct exec_node *r,
                     struct mf_err *err)
{
    struct out_walk w = {.s = j->s, .exclude = json_object_get(j->node->args, "exclude"),
                         .files = json_object()};
    struct layer_result lr;
    int64_t mtime;
    if (!w.files)
        return mf_err_set(err, MF_ENOMEM, "out of memory");
    int rc = out_dir(&w, dir, "", 0, err);
    if (!rc)
        rc = layer_source_date(&mtime, err);
    if (!rc && w.n) {
        rc = layer_write(j->s, w.e, w.n, LAYER_NONE, mtime, &lr, err);
    } else if (!rc) {
        static const char empty[RUN_EMPTY_TAR_LEN];
        memset(&lr, 0, sizeof lr);
        rc = store_put_mem(j->s, empty, sizeof empty, lr.desc.digest, err);
        lr.desc.size = sizeof empty;
        snprintf(lr.desc.media_type, sizeof lr.desc.media_type, "%s", LAYER_MT_TAR);
        snprintf(lr.diff_id, sizeof lr.diff_id, "%s", lr.desc.digest);
    }
    /* files of the previous RUN that this one did not replace stay visible */
    for (size_t i = 0; !rc && i < j->node->n_inputs; i++) {
        if (j->plan->nodes[j->node->inputs[i]].op != PLAN_RUN)
            continue;
        const char *k;
        json_t *v;
        json_object_foreach (json_object_get(exec_input(j, i)->result, "files"), k, v)
            if (!json_object_get(w.files, k))
                json_object_set(w.files, k, v);
    }
    if (!rc) {
        r->result = json_pack("{s:s, s:I, s:s, s:s, s:s, s:O}", "digest", lr.desc.digest, "size",
                              (json_int_t)lr.desc.size, "mediaType", lr.desc.media_type,
                              "diffId", lr.diff_id, "filepath", lr.filepath, "files", w.files);
        if (!r->result)
            rc = mf_err_set(err, MF_ENOMEM, "out of memory");
        snprintf(r->digest, sizeof r->digest, "%s", lr.desc.digest);
        r->size = lr.desc.size;
    }
    for (size_t i = 0; i < 2 * w.n; i++)
        free(w.owned[i]);
    free(w.owned);
    free(w.e);
    json_decref(w.files);
    return rc;
}

/* ---- the step --------------------------------------------------------------------- */

/* The mask of every secret given to the build, not only those this RUN
 * mounts: an earlier step may have left one in a cache mount. A secret that
 * cannot be read leaves the mask unusable, so the output is withheld rather
 * than printed unmasked; NULL (out of memory) withholds it too. */
static struct secret_mask *build_mask(const struct exec_job *j)
{
    struct secret_mask *m = NULL;
    struct mf_err ignored;
    if (secret_mask_new(&m, &ignored) != 0)
        return NULL;
    for (size_t k = 0; k < j->o->n_secrets; k++)
        if (secret_mask_add_file(m, j->o->secrets[k].src, &ignored) != 0)
            break;
    return m;
}

static int mask_output(void *arg, char *out, size_t n)
{
    return arg && secret_mask_apply(arg, out, n) >= 0 ? 0 : -1;
}

static int run_failed(const struct sandbox_result *res, int64_t timeout_ms, struct mf_err *err)
{
    char what[96];
    if (res->timed_out)
        snprintf(what, sizeof what, "timed out after %" PRId64 " ms and was killed", timeout_ms);
    else if (res->signal)
        snprintf(what, sizeof what, "was killed by signal %d", res->signal);
    else
        snprintf(what, sizeof what, "exited with status %d", res->status);
    return mf_err_set(err, MF_EINVAL, "the command %s; %s%s", what,
                      res->tail[0] ? "its last output:\n" : "it printed nothing",
                      res->tail);
}

/* The command: ["/bin/sh", "-c", shell] or the exec form. */
static int run_argv(const json_t *a, const char ***argv, size_t *argc)
{
    const json_t *v = json_object_get(a, "argv");
    if (json_is_array(v)) {
        size_t i, n = json_array_size(v);
        json_t *s;
        if (!(*argv = calloc(n + 1, sizeof **argv)))
            return -1;
        json_array_foreach (v, i, s)
            (*argv)[i] = json_string_value(s) ? json_string_value(s) : "";
        *argc = n;
        return 0;
    }
    if (!(*argv = calloc(4, sizeof **argv)))
        return -1;
    (*argv)[0] = "/bin/sh";
    (*argv)[1] = "-c";
    (*argv)[2] = json_string_value(json_object_get(a, "shell"));
    *argc = 3;
    return (*argv)[2] ? 0 : -1;
}

/* Removes the temp /out directories (tmp/run-PID-...) that an mfc killed
 * mid-step left behind, when PID is no longer running. Best effort. */
static void sweep_stale(struct store *s)
{
    char *tmp = NULL;
    struct mf_err ignored;
    if (store_tmp_path(s, "x", &tmp, &ignored) != 0)
        return;
    tmp[strlen(tmp) - 2] = '\0'; /* the tmp directory itself */
    DIR *d = opendir(tmp);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        long pid = 0;
        char *end;
        if (strncmp(e->d_name, "run-", 4) != 0)
            continue;
        pid = strtol(e->d_name + 4, &end, 10);
        if (pid <= 0 || *end != '-' || pid == (long)getpid() ||
            !(kill((pid_t)pid, 0) != 0 && errno == ESRCH))
            continue;
        char *path = NULL;
        if (asprintf(&path, "%s/%s", tmp, e->d_name) > 0) {
            remove_tree(path, 0);
            free(path);
        }
    }
    if (d)
        closedir(d);
    free(tmp);
}

int exec_op_sandbox(const struct exec_job *j, struct exec_node *r, int *cached, struct mf_err *err)
{
    struct run_ctx *c = calloc(1, sizeof *c);
    const json_t *a = j->node->args;
    const char **argv = NULL, **env = NULL;
    size_t argc = 0, n_env = 0;
    struct sandbox_result res;
    char *name = NULL;
    *cached = 0;
    if (!c)
        return mf_err_set(err, MF_ENOMEM, "out of memory");
    c->j = j;
    sweep_stale(j->s);
    int rc = 0;
    if (asprintf(&name, "run-%ld-%zu-%lx", (long)getpid(), j->node->id, (unsigned long)random()) < 0)
        rc = mf_err_set(err, MF_ENOMEM, "out of memory");
    if (!rc)
        rc = store_tmp_path(j->s, name, &c->out_dir, err);
    if (!rc && mkdir(c->out_dir, 0700) != 0)
        rc = mf_err_sys(err, MF_EIO, errno, "cannot create %s", c->out_dir);
    const char *ctx = j->o->fo && j->o->fo->base_dir ? j->o->fo->base_dir : ".";
    char *ctx_abs = realpath(ctx, NULL);
    if (!rc && !ctx_abs)
        rc = mf_err_sys(err, MF_EIO, errno, "cannot resolve the build context %s", ctx);
    if (!rc)
        rc = bind(c, ctx_abs, "/context", 0, err);
    if (!rc)
        rc = bind_inputs(c, err);
    if (!rc)
        rc = bind(c, c->out_dir, "/out", 1, err);
    if (!rc)
        rc = bind_mounts(c, err);
    if (!rc && j->o->self_exe)
        rc = bind(c, j->o->self_exe, RUN_MFC_PATH, 0, err);
    if (!rc && (run_argv(a, &argv, &argc) != 0 ||
                run_env(json_object_get(a, "env"), &env, &n_env) != 0))
        rc = mf_err_set(err, MF_ENOMEM, "out of memory");
    int64_t timeout = json_integer_value(json_object_get(a, "timeout_ms"));
    if (!timeout)
        timeout = j->o->run_timeout_ms;
    const char *net = json_string_value(json_object_get(a, "network"));
    struct secret_mask *mask = j->o->n_secrets ? build_mask(j) : NULL;
    struct sandbox_spec sp = {
        .bwrap = j->o->bwrap, .argv = argv, .argc = argc, .env = env, .n_env = n_env,
        .binds = c->binds, .n_binds = c->n_binds, .share_net = net && !strcmp(net, "host"),
        .cwd = "/context", .timeout_ms = timeout, .mem_limit = j->o->run_memory,
        .root = json_integer_value(json_object_get(a, "user")) == 0 &&
                json_object_get(a, "user") != NULL,
        .mask = j->o->n_secrets ? mask_output : NULL, .mask_arg = mask};
    /* exec_allow_check refuses this before the build; here too for a caller that skipped it */
    const char *flag = "";
    if (!rc && (exec_allow_needed(j->node, &flag) & ~j->o->allow))
        rc = mf_err_set(err, MF_EINVAL, "%s needs an entitlement this build does not grant "
                        "(mfc build --allow)", flag);
    if (!rc)
        rc = sandbox_run(&sp, &res, err);
    if (!rc && (res.status != 0 || res.timed_out || res.signal)) {
        /* bwrap's own failure looks like the command's: ask the probe which it was */
        struct sandbox_spec bare = sp;
        bare.binds = NULL;
        bare.n_binds = 0;
        if (!res.timed_out && res.status == 1 && strstr(res.tail, "bwrap:") &&
            (rc = sandbox_probe(&bare, err)) != 0)
            ;
        else
            rc = run_failed(&res, timeout, err);
    }
    if (!rc)
        rc = store_out(j, c->out_dir, r, err);
    if (c->out_dir)
        remove_tree(c->out_dir, 0);
    free(c->out_dir);
    for (size_t i = 0; i < c->n_owned; i++)
        free(c->owned[i]);
    free(c);
    free(ctx_abs);
    free(argv);
    free_env(env, n_env);
    free(name);
    secret_mask_free(mask);
    return rc;
}
