/*
 * layer_runtime.c: the runtime layer — mfc-serve, its shared-library closure
 * (ldd) and, for a CUDA build, cuBLAS — and its cache.
 *
 * The runtime layer is the same in every image a given mfc builds (hundreds
 * of MB with cuBLAS), so it is written once and reused: its key is the
 * sha256 of a text listing every input (format version, name, mtime,
 * compression and compressor version, then per file its path in the layer,
 * mode and content digest, through the store's stat cache), and the layer's
 * descriptor is kept as a build-cache record under that key. A hit needs the
 * record and its blob; anything else writes the layer again. ldd runs on
 * every build (tens of ms) because the closure depends on more than the
 * binary (ld.so.conf, RUNPATH, LD_LIBRARY_PATH): only its answer, hashed
 * file by file, says whether the layer is still the same.
 *
 * Owns nothing past one call.
 */
#include "image/layer.h"

#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>
#include <zlib.h>
#include <zstd.h>

#include "common/buf.h"
#include "common/sha256.h"

#define LDD_OUT_MAX (64u << 10) /* bytes of `ldd` output we agree to read */
#define KEY_TEXT_MAX (1u << 20) /* bytes of the key's text (4096 entries of ~200 bytes) */

extern char **environ;

static int paths_add(char ***paths, size_t *n, const char *p, size_t len, struct mf_err *err)
{
    for (size_t i = 0; i < *n; i++)
        if (strlen((*paths)[i]) == len && memcmp((*paths)[i], p, len) == 0)
            return 0;
    char **grown = realloc(*paths, (*n + 1) * sizeof *grown);
    char *s = grown ? strndup(p, len) : NULL;
    if (grown)
        *paths = grown;
    if (!s)
        return mf_err_set(err, MF_ENOMEM, "out of memory reading ldd output");
    grown[(*n)++] = s;
    return 0;
}

/* One line of ldd: "\tname => /path (0x..)", "\t/path (0x..)", "\tlinux-vdso.so.1 (0x..)". */
static int ldd_line(const char *line, size_t len, char ***paths, size_t *n, struct mf_err *err)
{
    const char *end = line + len;
    const char *arrow = memmem(line, len, "=> ", 3);
    const char *p = arrow ? arrow + 3 : line;
    while (p < end && (*p == ' ' || *p == '\t'))
        p++;
    if (end - p >= 9 && memcmp(p, "not found", 9) == 0)
        return mf_err_set(err, MF_ENOTFOUND, "runtime library not found: %.*s", (int)len, line);
    if (p >= end || *p != '/')
        return 0; /* the vDSO, "statically linked", "not a dynamic executable" */
    const char *q = memmem(p, (size_t)(end - p), " (", 2);
    return paths_add(paths, n, p, q ? (size_t)(q - p) : (size_t)(end - p), err);
}

int layer_parse_ldd(const char *text, char ***paths, size_t *n, struct mf_err *err)
{
    char **ps = NULL;
    size_t k = 0;
    int rc = 0;
    for (const char *l = text; rc == 0 && *l;) {
        const char *nl = strchr(l, '\n');
        size_t len = nl ? (size_t)(nl - l) : strlen(l);
        rc = ldd_line(l, len, &ps, &k, err);
        l += len + (nl != NULL);
    }
    if (rc != 0) {
        for (size_t i = 0; i < k; i++)
            free(ps[i]);
        free(ps);
        return rc;
    }
    *paths = ps;
    *n = k;
    return 0;
}

/* Runs `ldd binary` (argv, no shell) and collects its stdout, at most LDD_OUT_MAX. */
static int run_ldd(const char *binary, struct mf_buf *out, struct mf_err *err)
{
    int pfd[2];
    if (pipe2(pfd, O_CLOEXEC) != 0)
        return mf_err_sys(err, MF_EIO, errno, "cannot run ldd on %s", binary);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, pfd[1], 1);
    char *argv[] = {"ldd", (char *)binary, NULL};
    pid_t pid;
    int sr = posix_spawnp(&pid, "ldd", &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(pfd[1]);
    int rc = sr ? mf_err_sys(err, MF_EIO, sr, "cannot run ldd on %s", binary) : 0;
    char buf[4096];
    ssize_t got;
    while (rc == 0 && ((got = read(pfd[0], buf, sizeof buf)) > 0 || (got < 0 && errno == EINTR)))
        if (got > 0)
            rc = mf_buf_append(out, buf, (size_t)got, err);
    close(pfd[0]);
    int status = 0;
    while (sr == 0 && waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    /* ldd exits 1 for a static binary ("not a dynamic executable"): not an error */
    return rc;
}

/* Runs ldd on file and adds the paths it lists to *libs (no duplicates). */
static int ldd_add(const char *file, char ***libs, size_t *n, struct mf_err *err)
{
    struct mf_buf b;
    char **got = NULL;
    size_t k = 0;
    mf_buf_init(&b, LDD_OUT_MAX);
    int rc = run_ldd(file, &b, err);
    if (rc == 0)
        rc = layer_parse_ldd(b.data ? b.data : "", &got, &k, err);
    for (size_t i = 0; i < k; i++) {
        if (rc == 0)
            rc = paths_add(libs, n, got[i], strlen(got[i]), err);
        free(got[i]);
    }
    free(got);
    mf_buf_free(&b);
    return rc;
}

int layer_cublas_path(char *const *libs, size_t n, char **path, struct mf_err *err)
{
    /* open_cublas's names, in its order (kernels/gemm.cu) */
    static const char *const names[] = {"libcublas.so.13", "libcublas.so.12", "libcublas.so"};
    const char *cudart = NULL;
    *path = NULL;
    for (size_t i = 0; i < n && !cudart; i++) {
        const char *base = strrchr(libs[i], '/');
        if (base && strncmp(base + 1, "libcudart.so", 12) == 0)
            cudart = libs[i];
    }
    if (!cudart)
        return 0;
    size_t dir = (size_t)(strrchr(cudart, '/') - cudart) + 1; /* with the '/' */
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        size_t len = strlen(names[k]);
        char *p = malloc(dir + len + 1);
        if (!p)
            return mf_err_set(err, MF_ENOMEM, "out of memory looking for cuBLAS");
        memcpy(p, cudart, dir);
        memcpy(p + dir, names[k], len + 1);
        struct stat st;
        if (stat(p, &st) == 0 && S_ISREG(st.st_mode)) {
            *path = p;
            return 0;
        }
        free(p);
    }
    return 0;
}

/* The runtime's libraries: ldd's list for binary, plus, beside a listed
 * libcudart, cuBLAS and ldd's list for it (libcublasLt among it). The
 * cuBLAS path is the one found (often the soname symlink): layer_write
 * stores the file it points to under that name, where open_cublas looks.
 * *libs holds what was collected so far even on failure; the caller frees it. */
static int runtime_libs(const char *binary, char ***libs, size_t *n, struct mf_err *err)
{
    char *blas = NULL;
    int rc = ldd_add(binary, libs, n, err);
    if (rc == 0)
        rc = layer_cublas_path(*libs, *n, &blas, err);
    if (rc == 0 && blas)
        rc = paths_add(libs, n, blas, strlen(blas), err);
    if (rc == 0 && blas && (rc = ldd_add(blas, libs, n, err)) != 0)
        mf_err_prefix(err, "cuBLAS %s (dlopen'd by the runtime)", blas);
    free(blas);
    return rc;
}

int layer_runtime_compression(enum layer_compression *comp, struct mf_err *err)
{
    const char *v = getenv("MFC_RUNTIME_COMPRESSION");
    if (!v || !*v || strcmp(v, "zstd") == 0)
        *comp = LAYER_ZSTD;
    else if (strcmp(v, "gzip") == 0)
        *comp = LAYER_GZIP;
    else
        return mf_err_set(err, MF_EINVAL, "MFC_RUNTIME_COMPRESSION='%.40s': use zstd or gzip", v);
    return 0;
}

/* The compressor and its version: a new zlib or libzstd may write other
 * bytes for the same tar, so it is part of the key. */
static void compressor_name(enum layer_compression comp, char *buf, size_t cap)
{
    if (comp == LAYER_ZSTD)
        snprintf(buf, cap, "zstd-%s-level%d", ZSTD_versionString(), LAYER_ZSTD_LEVEL);
    else if (comp == LAYER_GZIP)
        snprintf(buf, cap, "gzip-zlib%s-level6", zlibVersion());
    else
        snprintf(buf, cap, "none");
}

static int entry_cmp(const void *a, const void *b)
{
    return strcmp(((const struct layer_entry *)a)->path, ((const struct layer_entry *)b)->path);
}

int layer_runtime_key(struct store *s, const struct layer_entry *e, size_t n, int64_t mtime,
                      enum layer_compression comp, char key[STORE_DIGEST_BUF], struct mf_err *err)
{
    char cname[96], digest[STORE_DIGEST_BUF], hex[MF_SHA256_HEX_LEN + 1];
    uint8_t d[MF_SHA256_LEN];
    uint64_t size;
    struct mf_buf b;
    struct layer_entry *sorted = malloc((n ? n : 1) * sizeof *sorted);
    if (!sorted)
        return mf_err_set(err, MF_ENOMEM, "out of memory for the runtime layer's key");
    memcpy(sorted, e, n * sizeof *e);
    qsort(sorted, n, sizeof *sorted, entry_cmp); /* ldd's order may vary; the tar's does not */
    compressor_name(comp, cname, sizeof cname);
    mf_buf_init(&b, KEY_TEXT_MAX);
    int rc = mf_buf_printf(&b, err, "mfc runtime layer v1\nmtime %lld\ncompression %s\n",
                           (long long)mtime, cname);
    for (size_t i = 0; rc == 0 && i < n; i++) {
        if (sorted[i].src)
            rc = store_digest_file(s, sorted[i].src, digest, &size, err);
        else
            rc = mf_sha256_mem(sorted[i].data, sorted[i].len, d, err);
        if (rc == 0 && !sorted[i].src) {
            mf_sha256_hex(d, hex);
            snprintf(digest, sizeof digest, "sha256:%s", hex);
        }
        if (rc == 0)
            rc = mf_buf_printf(&b, err, "%s %o %s\n", sorted[i].path, sorted[i].mode, digest);
    }
    if (rc == 0)
        rc = mf_sha256_mem(b.data, b.len, d, err);
    if (rc == 0) {
        mf_sha256_hex(d, hex);
        snprintf(key, STORE_DIGEST_BUF, "sha256:%s", hex);
    }
    mf_buf_free(&b);
    free(sorted);
    return rc;
}

/* The layer a cache record describes, when its blob is present: 1, else 0. */
static int cache_hit(struct store *s, const char *key, struct layer_result *out)
{
    json_t *rec = NULL;
    struct mf_err ignored;
    if (store_cache_get(s, key, &rec, &ignored) != 0)
        return 0;
    const char *mt = json_string_value(json_object_get(rec, "mediaType"));
    const char *d = json_string_value(json_object_get(rec, "digest"));
    const char *diff = json_string_value(json_object_get(rec, "diffId"));
    json_t *size = json_object_get(rec, "size");
    int hit = mt && d && diff && json_is_integer(size) && store_digest_valid(diff) &&
              strlen(mt) < sizeof out->desc.media_type && store_blob_exists(s, d);
    if (hit) {
        memset(out, 0, sizeof *out);
        snprintf(out->desc.media_type, sizeof out->desc.media_type, "%s", mt);
        snprintf(out->desc.digest, sizeof out->desc.digest, "%s", d);
        snprintf(out->diff_id, sizeof out->diff_id, "%s", diff);
        out->desc.size = (uint64_t)json_integer_value(size);
    }
    json_decref(rec);
    return hit;
}

/* Records the layer under key; a failure only costs the next build a rewrite. */
static void cache_record(struct store *s, const char *key, const struct layer_result *r)
{
    struct mf_err ignored;
    json_t *rec = json_pack("{s:s, s:s, s:I, s:s, s:s}", "kind", "runtime-layer", "digest",
                            r->desc.digest, "size", (json_int_t)r->desc.size, "mediaType",
                            r->desc.media_type, "diffId", r->diff_id);
    if (rec)
        store_cache_put(s, key, rec, &ignored);
    json_decref(rec);
}

/* The runtime layer's entries (e, n) and the paths they borrow (libs). On
 * failure everything is freed and the outputs are NULL/0. */
struct runtime_files {
    char **libs;                   /* owned: ldd's paths, each malloc'd */
    size_t n_libs;                 /* entries in libs */
    struct layer_entry *e;         /* owned: n_libs + 1 entries, the binary last */
    char bin_path[LAYER_PATH_MAX]; /* "usr/bin/<name>" */
};

static void runtime_files_free(struct runtime_files *f)
{
    for (size_t i = 0; i < f->n_libs; i++)
        free(f->libs[i]);
    free(f->libs);
    free(f->e);
    memset(f, 0, sizeof *f);
}

static int runtime_files(const char *binary, const char *name, struct runtime_files *f,
                         struct mf_err *err)
{
    memset(f, 0, sizeof *f);
    int rc = runtime_libs(binary, &f->libs, &f->n_libs, err);
    if (rc == 0 && !(f->e = calloc(f->n_libs + 1, sizeof *f->e)))
        rc = mf_err_set(err, MF_ENOMEM, "out of memory for the runtime layer");
    int pn = snprintf(f->bin_path, sizeof f->bin_path, "usr/bin/%s", name);
    if (rc == 0 && (pn < 0 || (size_t)pn >= sizeof f->bin_path || strchr(name, '/')))
        rc = mf_err_set(err, MF_EINVAL, "runtime name '%s' is too long or has a '/'", name);
    for (size_t i = 0; rc == 0 && i < f->n_libs; i++)
        f->e[i] = (struct layer_entry){.path = f->libs[i] + 1, .src = f->libs[i], .mode = 0755};
    if (rc == 0)
        f->e[f->n_libs] = (struct layer_entry){.path = f->bin_path, .src = binary, .mode = 0755};
    if (rc != 0) {
        runtime_files_free(f);
        mf_err_prefix(err, "runtime layer for %s", binary);
    }
    return rc;
}

int layer_runtime_digest(struct store *s, const char *binary, const char *name, int64_t mtime,
                         enum layer_compression comp, char key[STORE_DIGEST_BUF],
                         struct mf_err *err)
{
    struct runtime_files f;
    int rc = runtime_files(binary, name, &f, err);
    if (rc == 0)
        rc = layer_runtime_key(s, f.e, f.n_libs + 1, mtime, comp, key, err);
    runtime_files_free(&f);
    return rc;
}

int layer_write_runtime(struct store *s, const char *binary, const char *name, int64_t mtime,
                        enum layer_compression comp, layer_progress_fn fn, void *arg,
                        struct layer_result *out, int *cached, struct mf_err *err)
{
    char key[STORE_DIGEST_BUF];
    struct runtime_files f;
    size_t n;
    int hit = 0;
    int rc = runtime_files(binary, name, &f, err);
    if (rc != 0)
        return rc;
    n = f.n_libs + 1;
    rc = layer_runtime_key(s, f.e, n, mtime, comp, key, err);
    if (rc == 0 && !(hit = cache_hit(s, key, out))) {
        rc = layer_write_progress(s, f.e, n, comp, mtime, fn, arg, out, err);
        if (rc == 0)
            cache_record(s, key, out);
    }
    if (rc == 0) {
        out->filepath[0] = '\0';
        out->cuda = 0;
        for (size_t i = 0; i < f.n_libs; i++) {
            const char *b = strrchr(f.libs[i], '/');
            out->cuda |= b && strncmp(b + 1, "libcudart.so", 12) == 0;
        }
    }
    if (rc == 0 && cached)
        *cached = hit;
    if (rc != 0)
        mf_err_prefix(err, "runtime layer for %s", binary);
    runtime_files_free(&f);
    return rc;
}
