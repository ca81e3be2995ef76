/*
 * fetch.c: resolving FROM/ADAPTER references, and local sources.
 *
 * Turns what a Modelfile says into a struct fetch_source: an absolute path
 * (with "~" and the Modelfile's directory applied, as Ollama's expandPath
 * does), a directory examined for its one GGUF or for a safetensors/PEFT
 * layout, an http(s) URL, or an hf:// reference mapped to the Hub's resolve
 * URL. Pins (@sha256:<hex>, --checksum) are parsed here and enforced when the
 * content enters the store. Downloads are fetch_http.c; this file owns no
 * state beyond the source it fills.
 *
 * Every piece of a reference that ends up in a URL or a path is validated:
 * hf:// owner and repo names are [A-Za-z0-9._-], path segments are never "."
 * or "..", and each segment is percent-encoded.
 *
 * The build context is a boundary, as Docker's is: a relative path (with a
 * base_dir) must stay inside base_dir once ".." and symlinks are resolved,
 * and so must every symlink in a directory source under it; only a path the
 * Modelfile names explicitly (absolute, or "~") may point elsewhere.
 */
#include "fetch/fetch.h"

#include <curl/curl.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/buf.h"
#include "fetch/fetch_int.h"

#define HF_DEFAULT "https://huggingface.co"
#define MAX_DIR_GGUF 1024 /* GGUF files we list from one directory */
#define REF_MAX 8192      /* bytes of one reference */
#define CONFINE_DEPTH 8   /* directory levels of a source checked for escaping symlinks */
#define CONFINE_MAX 100000 /* entries checked */

int fetch_global_init(struct mf_err *err)
{
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
        return mf_err_set(err, MF_ENOMEM, "cannot initialise libcurl");
    return 0;
}

void fetch_global_cleanup(void)
{
    curl_global_cleanup();
}

static const char *env_nonempty(const char *name)
{
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

void fetch_opts_init(struct fetch_opts *o)
{
    memset(o, 0, sizeof *o);
    o->home = env_nonempty("HOME");
    o->hf_endpoint = env_nonempty("HF_ENDPOINT");
    o->hf_token = env_nonempty("HF_TOKEN");
    o->retries = 4;
    o->retry_base_ms = 500;
    o->connect_timeout_s = 30;
    o->stall_timeout_s = 60;
    o->max_redirects = 10;
}

void fetch_source_fini(struct fetch_source *src)
{
    free(src->location);
    free(src->display);
    memset(src, 0, sizeof *src);
}

/* ---- pins ------------------------------------------------------------------------- */

/* Splits "X@sha256:<hex>" into X and the pin. A "@sha256:" that is not
 * followed by exactly 64 lowercase hex digits is an error. */
static int split_pin(const char *ref, char **body, char pin[STORE_DIGEST_BUF], struct mf_err *err)
{
    const char *at = strstr(ref, "@sha256:");
    size_t n = at ? (size_t)(at - ref) : strlen(ref);
    if (at && !store_digest_valid(at + 1))
        return mf_err_set(err, MF_EINVAL,
                          "%.300s: the pin after @ must be sha256: and 64 lowercase hex digits",
                          ref);
    pin[0] = '\0';
    if (at)
        snprintf(pin, STORE_DIGEST_BUF, "%s", at + 1);
    *body = strndup(ref, n);
    return *body ? 0 : mf_err_set(err, MF_ENOMEM, "out of memory");
}

static int merge_checksum(const char *ref, const char *checksum, char pin[STORE_DIGEST_BUF],
                          struct mf_err *err)
{
    if (!checksum)
        return 0;
    int rc = store_digest_check(checksum, "--checksum", err);
    if (rc)
        return rc;
    if (pin[0] && strcmp(pin, checksum) != 0)
        return mf_err_set(err, MF_EINVAL, "%.300s: pinned to %s but --checksum says %s", ref, pin,
                          checksum);
    snprintf(pin, STORE_DIGEST_BUF, "%s", checksum);
    return 0;
}

/* ---- URLs ------------------------------------------------------------------------- */

/* Validates an http(s) URL through libcurl's parser; *out = its normalised form. */
static int check_url(const char *url, const char *what, char **out, struct mf_err *err)
{
    CURLU *u = curl_url();
    char *norm = NULL, *scheme = NULL;
    int rc = u ? 0 : mf_err_set(err, MF_ENOMEM, "out of memory");
    if (!rc && (curl_url_set(u, CURLUPART_URL, url, 0) != CURLUE_OK ||
                curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) != CURLUE_OK ||
                curl_url_get(u, CURLUPART_URL, &norm, 0) != CURLUE_OK))
        rc = mf_err_set(err, MF_EINVAL, "%s: \"%.300s\" is not a valid URL", what, url);
    if (!rc && strcmp(scheme, "http") != 0 && strcmp(scheme, "https") != 0)
        rc = mf_err_set(err, MF_EUNSUPPORTED, "%s: only http and https URLs can be fetched", what);
    if (!rc && !(*out = strdup(norm)))
        rc = mf_err_set(err, MF_ENOMEM, "out of memory");
    curl_free(norm);
    curl_free(scheme);
    curl_url_cleanup(u);
    return rc;
}

static int hf_name_valid(const char *s, size_t n)
{
    if (n == 0 || n > 96 || (n <= 2 && strncmp(s, "..", n) == 0))
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-'))
            return 0;
    }
    return 1;
}

/* Appends "/seg" for each segment of path, percent-encoded. */
static int append_path(struct mf_buf *b, const char *ref, const char *path, struct mf_err *err)
{
    const char *p = path;
    int rc = 0;
    while (!rc) {
        const char *slash = strchr(p, '/');
        size_t n = slash ? (size_t)(slash - p) : strlen(p);
        if (n == 0 || (n == 1 && p[0] == '.') || (n == 2 && strncmp(p, "..", 2) == 0))
            return mf_err_set(err, MF_EINVAL,
                              "%.300s: the file path has an empty, \".\" or \"..\" part", ref);
        char *esc = curl_easy_escape(NULL, p, (int)n);
        rc = esc ? mf_buf_printf(b, err, "/%s", esc) : mf_err_set(err, MF_ENOMEM, "out of memory");
        curl_free(esc);
        if (!slash)
            break;
        p = slash + 1;
    }
    return rc;
}

/* hf://owner/repo[@rev]/path -> <endpoint>/owner/repo/resolve/<rev>/<path>. */
static int resolve_hf(const char *ref, const char *body, const struct fetch_opts *o,
                      struct fetch_source *src, struct mf_err *err)
{
    const char *p = body + 5, *owner = p;
    const char *s1 = strchr(p, '/');
    const char *s2 = s1 ? strchr(s1 + 1, '/') : NULL;
    if (!s1 || !s2 || !s2[1])
        return mf_err_set(err, MF_EINVAL, "%.300s: expected hf://owner/repo[@revision]/path", ref);
    const char *repo = s1 + 1, *at = memchr(repo, '@', (size_t)(s2 - repo));
    size_t repo_n = (size_t)((at ? at : s2) - repo);
    const char *rev = at ? at + 1 : "main";
    size_t rev_n = at ? (size_t)(s2 - rev) : 4;
    if (!hf_name_valid(owner, (size_t)(s1 - owner)) || !hf_name_valid(repo, repo_n))
        return mf_err_set(err, MF_EINVAL,
                          "%.300s: owner and repo names are letters, digits and ._-", ref);
    if (!hf_name_valid(rev, rev_n))
        return mf_err_set(err, MF_EINVAL,
                          "%.300s: a revision is a branch, tag or commit (letters, digits and ._-)",
                          ref);
    const char *endpoint = o->hf_endpoint ? o->hf_endpoint : HF_DEFAULT;
    size_t en = strlen(endpoint);
    while (en && endpoint[en - 1] == '/')
        en--;
    struct mf_buf b;
    mf_buf_init(&b, REF_MAX);
    int rc = mf_buf_printf(&b, err, "%.*s/%.*s/%.*s/resolve/%.*s", (int)en, endpoint,
                           (int)(s1 - owner), owner, (int)repo_n, repo, (int)rev_n, rev);
    if (!rc)
        rc = append_path(&b, ref, s2 + 1, err);
    if (!rc)
        rc = check_url(b.data, "HF_ENDPOINT", &src->location, err);
    mf_buf_free(&b);
    src->kind = FETCH_URL;
    src->hf = 1;
    return rc;
}

/* ---- local paths ------------------------------------------------------------------ */

/* "~", "~/x", "~user/x" -> the home directory joined with the rest. */
static int expand_tilde(const char *body, const struct fetch_opts *o, struct mf_buf *b,
                        struct mf_err *err)
{
    const char *slash = strchr(body, '/');
    size_t user_n = slash ? (size_t)(slash - body - 1) : strlen(body) - 1;
    const char *rest = slash ? slash : "";
    if (user_n == 0) {
        if (!o->home)
            return mf_err_set(err, MF_EINVAL, "%.300s: HOME is not set, so ~ cannot be expanded",
                              body);
        return mf_buf_printf(b, err, "%s%s", o->home, rest);
    }
    char user[256], pwbuf[4096];
    struct passwd pw, *res = NULL;
    if (user_n >= sizeof user)
        return mf_err_set(err, MF_EINVAL, "%.300s: user name too long", body);
    snprintf(user, sizeof user, "%.*s", (int)user_n, body + 1);
    if (getpwnam_r(user, &pw, pwbuf, sizeof pwbuf, &res) != 0 || !res)
        return mf_err_set(err, MF_ENOTFOUND, "%.300s: no user named %s", body, user);
    return mf_buf_printf(b, err, "%s%s", pw.pw_dir, rest);
}

static int expand_path(const char *body, const struct fetch_opts *o, char **out, struct mf_err *err)
{
    struct mf_buf b;
    mf_buf_init(&b, PATH_MAX);
    int rc;
    char cwd[PATH_MAX];
    if (body[0] == '~') {
        rc = expand_tilde(body, o, &b, err);
    } else if (body[0] == '/') {
        rc = mf_buf_puts(&b, body, err);
    } else if (o->base_dir) {
        rc = mf_buf_printf(&b, err, "%s/%s", o->base_dir, body);
    } else if (getcwd(cwd, sizeof cwd)) {
        rc = mf_buf_printf(&b, err, "%s/%s", cwd, body);
    } else {
        rc = mf_err_sys(err, MF_EIO, errno, "cannot get the current directory");
    }
    if (rc) {
        mf_buf_free(&b);
        return rc;
    }
    *out = mf_buf_take(&b);
    return *out ? 0 : mf_err_set(err, MF_ENOMEM, "out of memory");
}

/* A reference that plainly names a file, so "no such file" beats "model name". */
static int looks_like_path(const char *body)
{
    size_t n = strlen(body);
    return body[0] == '/' || body[0] == '~' || strncmp(body, "./", 2) == 0 ||
           strncmp(body, "../", 3) == 0 || (n > 5 && strcmp(body + n - 5, ".gguf") == 0) ||
           (n > 12 && strcmp(body + n - 12, ".safetensors") == 0);
}

static int has_suffix(const char *s, const char *suf)
{
    size_t n = strlen(s), k = strlen(suf);
    return n > k && strcmp(s + n - k, suf) == 0;
}

static int is_file_in(int dfd, const char *name)
{
    struct stat st;
    return fstatat(dfd, name, &st, 0) == 0 && S_ISREG(st.st_mode); /* follows symlinks, as the
                                                                      HF cache uses them */
}

struct dir_scan {
    char *gguf[MAX_DIR_GGUF]; /* owned: names of *.gguf files */
    size_t n_gguf;            /* how many (counting past the array when there are more) */
    int safetensors;          /* nonzero: some *.safetensors file */
    int config, adapter_config, adapter_model; /* the files that mark HF and PEFT layouts */
};

static int scan_dir(const char *path, struct dir_scan *d, struct mf_err *err)
{
    DIR *dir = opendir(path);
    if (!dir)
        return mf_err_sys(err, MF_EIO, errno, "cannot read directory %s", path);
    struct dirent *e;
    while ((e = readdir(dir))) {
        const char *n = e->d_name;
        if (n[0] == '.' || !is_file_in(dirfd(dir), n))
            continue;
        if (has_suffix(n, ".gguf")) {
            if (d->n_gguf < MAX_DIR_GGUF)
                d->gguf[d->n_gguf] = strdup(n);
            d->n_gguf++;
        }
        d->safetensors |= has_suffix(n, ".safetensors");
        d->config |= strcmp(n, "config.json") == 0;
        d->adapter_config |= strcmp(n, "adapter_config.json") == 0;
        d->adapter_model |= strcmp(n, "adapter_model.safetensors") == 0;
    }
    closedir(dir);
    return 0;
}

static int cmp_str(const void *a, const void *b)
{
    const char *x = *(char *const *)a, *y = *(char *const *)b;
    return strcmp(x ? x : "", y ? y : "");
}

static int too_many_ggufs(const char *path, struct dir_scan *d, struct mf_err *err)
{
    size_t shown = d->n_gguf < MAX_DIR_GGUF ? d->n_gguf : MAX_DIR_GGUF;
    qsort(d->gguf, shown, sizeof d->gguf[0], cmp_str);
    struct mf_buf list;
    mf_buf_init(&list, 300);
    for (size_t i = 0; i < shown; i++)
        if (mf_buf_printf(&list, NULL, "%s%s", i ? ", " : "", d->gguf[i] ? d->gguf[i] : "?"))
            break;
    mf_err_set(err, MF_EINVAL, "%s has %zu GGUF files (%s%s); name the one to use", path, d->n_gguf,
               list.data ? list.data : "", list.len < 300 && shown == d->n_gguf ? "" : ", ...");
    mf_buf_free(&list);
    return MF_EINVAL;
}

/* A directory: its one GGUF (a FILE source), or a safetensors/PEFT layout. */
static int examine_dir(const char *path, struct fetch_source *src, struct mf_err *err)
{
    struct dir_scan d = {0};
    int rc = scan_dir(path, &d, err);
    if (!rc && d.n_gguf > 1) {
        rc = too_many_ggufs(path, &d, err);
    } else if (!rc && d.n_gguf == 1) {
        struct mf_buf b;
        mf_buf_init(&b, PATH_MAX);
        rc = d.gguf[0] ? mf_buf_printf(&b, err, "%s/%s", path, d.gguf[0])
                       : mf_err_set(err, MF_ENOMEM, "out of memory");
        src->kind = FETCH_FILE;
        src->location = rc ? NULL : mf_buf_take(&b);
        mf_buf_free(&b);
    } else if (!rc && d.adapter_config && d.adapter_model) {
        src->kind = FETCH_DIR;
        src->layout = FETCH_LAYOUT_PEFT;
    } else if (!rc && d.config && d.safetensors) {
        src->kind = FETCH_DIR;
        src->layout = FETCH_LAYOUT_SAFETENSORS;
    } else if (!rc) {
        rc = mf_err_set(err, MF_ENOTFOUND,
                        "%s has no .gguf file, no safetensors model (config.json + *.safetensors) "
                        "and no PEFT adapter (adapter_config.json + adapter_model.safetensors)",
                        path);
    }
    if (!rc && src->kind == FETCH_DIR && !(src->location = strdup(path)))
        rc = mf_err_set(err, MF_ENOMEM, "out of memory");
    for (size_t i = 0; i < d.n_gguf && i < MAX_DIR_GGUF; i++)
        free(d.gguf[i]);
    return rc;
}

/* ---- the build context's boundary ------------------------------------------------- */

/* 1 when real (resolved) is ctx or lies under it. */
static int inside(const char *real, const char *ctx)
{
    size_t n = strlen(ctx);
    if (n == 1 && ctx[0] == '/')
        return 1;
    return strncmp(real, ctx, n) == 0 && (real[n] == '\0' || real[n] == '/');
}

static int escapes(const char *ref, const char *what, const char *real, const char *ctx,
                   struct mf_err *err)
{
    return mf_err_set(err, MF_EINVAL,
                      "%.300s: %s leaves the build context %s (it resolves to %s); as in "
                      "docker build, a relative path and the symlinks it reaches must stay "
                      "inside the context: name a file outside it by its absolute path, or "
                      "move it into the context",
                      ref, what, ctx, real);
}

/* Every symlink under dir (CONFINE_DEPTH levels) resolves inside ctx. */
static int dir_confined(const char *ref, const char *dir, const char *ctx, int depth, size_t *n,
                        struct mf_err *err)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    int rc = 0;
    if (!d)
        return mf_err_sys(err, MF_EIO, errno, "cannot read directory %s", dir);
    while (!rc && (e = readdir(d))) {
        struct stat st;
        char path[PATH_MAX];
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        if (++*n > CONFINE_MAX) {
            rc = mf_err_set(err, MF_ERANGE, "%.300s: more than %d entries to check", ref,
                            CONFINE_MAX);
            break;
        }
        int pn = snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (pn < 0 || pn >= (int)sizeof path || lstat(path, &st) != 0)
            continue;
        if (S_ISLNK(st.st_mode)) {
            char *real = realpath(path, NULL);
            if (real && !inside(real, ctx))
                rc = escapes(ref, path, real, ctx, err);
            free(real); /* a dangling link reads nothing */
        } else if (S_ISDIR(st.st_mode) && depth < CONFINE_DEPTH) {
            rc = dir_confined(ref, path, ctx, depth + 1, n, err);
        }
    }
    closedir(d);
    return rc;
}

int fetch_confined(const char *path, const char *ctx, struct mf_err *err)
{
    char *real = realpath(path, NULL), *c = realpath(ctx, NULL);
    int rc = !real || !c ? mf_err_sys(err, MF_ENOTFOUND, errno, "%s", !real ? path : ctx)
             : inside(real, c) ? 0
                                : escapes(path, "the path", real, c, err);
    free(real);
    free(c);
    return rc;
}

/* For a relative reference with a base_dir: real (the source resolved) and,
 * for a directory, the symlinks under it must stay inside base_dir. */
static int confine(const char *ref, const char *body, const struct fetch_opts *o,
                   const char *real, int is_dir, struct mf_err *err)
{
    if (!o->base_dir || body[0] == '/' || body[0] == '~')
        return 0; /* named explicitly: may be anywhere (docs/modelfile.md) */
    char *ctx = realpath(o->base_dir, NULL);
    size_t n = 0;
    if (!ctx)
        return mf_err_sys(err, MF_EIO, errno, "cannot resolve the build context %s",
                          o->base_dir);
    int rc = inside(real, ctx) ? 0 : escapes(ref, "the path", real, ctx, err);
    if (!rc && is_dir)
        rc = dir_confined(ref, real, ctx, 0, &n, err);
    free(ctx);
    return rc;
}

static int resolve_path(const char *ref, const char *body, const struct fetch_opts *o,
                        struct fetch_source *src, struct mf_err *err)
{
    char *path = NULL, *real = NULL;
    int rc = expand_path(body, o, &path, err);
    struct stat st;
    if (!rc && stat(path, &st) != 0) {
        if (errno != ENOENT && errno != ENOTDIR)
            rc = mf_err_sys(err, MF_EIO, errno, "cannot stat %s", path);
        else if (looks_like_path(body))
            rc = mf_err_set(err, MF_ENOTFOUND, "%.300s: no such file (looked for %s)", ref, path);
        else if (!(src->location = strdup(body)))
            rc = mf_err_set(err, MF_ENOMEM, "out of memory");
        src->kind = FETCH_NAME;
        free(path);
        return rc;
    }
    if (!rc && !(real = realpath(path, NULL)))
        rc = mf_err_sys(err, MF_EIO, errno, "cannot resolve %s", path);
    if (!rc)
        rc = confine(ref, body, o, real, S_ISDIR(st.st_mode), err);
    if (!rc && S_ISDIR(st.st_mode)) {
        rc = examine_dir(real, src, err);
    } else if (!rc && S_ISREG(st.st_mode)) {
        src->kind = FETCH_FILE;
        src->location = real;
        real = NULL;
    } else if (!rc) {
        rc = mf_err_set(err, MF_EINVAL, "%s is not a regular file or a directory", path);
    }
    free(real);
    free(path);
    return rc;
}

/* "scheme://" (RFC 3986 scheme characters), which a file name never starts with. */
static int has_scheme(const char *s)
{
    const char *p = s;
    while ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
           *p == '+' || *p == '-' || *p == '.')
        p++;
    return p > s && strncmp(p, "://", 3) == 0;
}

int fetch_resolve(const char *ref, const struct fetch_opts *o, struct fetch_source *src,
                  struct mf_err *err)
{
    memset(src, 0, sizeof *src);
    char *body = NULL;
    int rc = strlen(ref) > REF_MAX
                 ? mf_err_set(err, MF_EINVAL, "a source reference is longer than %d bytes", REF_MAX)
                 : 0;
    if (!rc && !*ref)
        rc = mf_err_set(err, MF_EINVAL, "the source reference is empty");
    if (!rc)
        rc = split_pin(ref, &body, src->pin, err);
    if (!rc)
        rc = merge_checksum(ref, o->checksum, src->pin, err);
    if (!rc && !(src->display = strdup(body)))
        rc = mf_err_set(err, MF_ENOMEM, "out of memory");
    if (rc)
        goto out;
    if (strncmp(body, "http://", 7) == 0 || strncmp(body, "https://", 8) == 0) {
        src->kind = FETCH_URL;
        rc = check_url(body, ref, &src->location, err);
    } else if (strncmp(body, "hf://", 5) == 0) {
        rc = resolve_hf(ref, body, o, src, err);
    } else if (has_scheme(body)) {
        rc = mf_err_set(err, MF_EUNSUPPORTED,
                        "%.300s: only http://, https:// and hf:// sources can be fetched", ref);
    } else {
        rc = resolve_path(ref, body, o, src, err);
    }
out:
    free(body);
    if (rc)
        fetch_source_fini(src);
    return rc;
}

/* ---- running a source ------------------------------------------------------------- */

struct copy_progress {
    struct progress *p; /* borrowed */
    int id;             /* job number */
};

static void on_copy(void *arg, uint64_t done, uint64_t total)
{
    struct copy_progress *c = arg;
    progress_update(c->p, c->id, done, total);
}

static int run_file(struct store *s, const struct fetch_source *src, const struct fetch_opts *o,
                    struct fetch_result *r, struct mf_err *err)
{
    struct copy_progress cp = {o->progress, progress_begin(o->progress, "copy", src->display)};
    struct store_put_opts po = {
        .expect = src->pin[0] ? src->pin : NULL, .progress = on_copy, .progress_arg = &cp};
    uint64_t hits = store_stats(s)->stat_hits;
    int rc = store_put_file(s, src->location, &po, r->digest, &r->size, err);
    if (rc) {
        progress_fail(o->progress, cp.id, err ? err->msg : mf_err_name(rc));
        return rc;
    }
    r->cached = store_stats(s)->stat_hits > hits;
    progress_end(o->progress, cp.id, r->cached ? "CACHED" : "done");
    return 0;
}

int fetch_run(struct store *s, const struct fetch_source *src, const struct fetch_opts *o,
              struct fetch_result *r, struct mf_err *err)
{
    memset(r, 0, sizeof *r);
    switch (src->kind) {
    case FETCH_FILE:
        return run_file(s, src, o, r, err);
    case FETCH_URL:
        return fetch_http_run(s, src, o, r, err);
    case FETCH_DIR:
        return mf_err_set(err, MF_EINVAL, "%s is a %s directory: it is converted, not fetched",
                          src->location,
                          src->layout == FETCH_LAYOUT_PEFT ? "PEFT adapter" : "safetensors model");
    case FETCH_NAME:
        break;
    }
    return mf_err_set(
        err, MF_EUNSUPPORTED,
        "%.300s is not a file, directory or URL; pulling models by name is not supported yet",
        src->location);
}
