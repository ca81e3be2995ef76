/*
 * run_image.c: the model that `mfc serve` / `mfc run` serve, from a GGUF path
 * or from an image in the store, read in place.
 *
 * An image's weights and adapter layers are uncompressed tars (docs/image.md),
 * so each GGUF in them is a contiguous byte range of the layer blob: walking
 * the tar headers (lseek past the data, so a 5 GB layer costs a few reads)
 * gives the offset, and mfc-serve maps that range of the blob. The config
 * layer is tar+gzip; its model.yaml (kilobytes) is inflated into a memfd.
 * Also holds the tar walker, which reads untrusted bytes (fuzz_run_tar).
 */
#include "compiler/run.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <zlib.h>

#include "compiler/layer.h"
#include "compiler/oci.h"
#include "compiler/store.h"

#define TAR_BLOCK 512
#define PAX_MAX (1u << 20)        /* bytes of one pax extended header we accept */
#define CONFIG_YAML_MAX (64u << 20)
#define WEIGHTS_PATH "models/model.gguf"
#define CONFIG_PATH "etc/mfc/model.yaml"

/* ---- tar walker ------------------------------------------------------------------- */

/* An octal or base-256 numeric field; -1 when malformed. */
static int tar_num(const unsigned char *f, size_t n, uint64_t *out)
{
    uint64_t v = 0;
    if (f[0] & 0x80) { /* base-256 (GNU): big-endian, the first byte's top bit set */
        if (f[0] != 0x80)
            return -1; /* negative or wider than we take */
        for (size_t i = 1; i < n; i++) {
            if (v >> 56)
                return -1;
            v = (v << 8) | f[i];
        }
        *out = v;
        return 0;
    }
    size_t i = 0;
    while (i < n && f[i] == ' ')
        i++;
    int digits = 0;
    for (; i < n && f[i] >= '0' && f[i] <= '7'; i++, digits++) {
        if (v >> 60)
            return -1;
        v = v * 8 + (uint64_t)(f[i] - '0');
    }
    for (; i < n; i++)
        if (f[i] != ' ' && f[i] != 0)
            return -1;
    if (!digits)
        return -1;
    *out = v;
    return 0;
}

static int tar_checksum_ok(const unsigned char *h)
{
    uint64_t want;
    if (tar_num(h + 148, 8, &want) != 0)
        return 0;
    uint64_t sum = 0;
    for (int i = 0; i < TAR_BLOCK; i++)
        sum += (i >= 148 && i < 156) ? ' ' : h[i];
    return sum == want;
}

static int all_zero(const unsigned char *h)
{
    for (int i = 0; i < TAR_BLOCK; i++)
        if (h[i])
            return 0;
    return 1;
}

static int read_full(const struct run_tar_io *io, void *buf, size_t n)
{
    long r = io->read(io->arg, buf, n);
    return r == (long)n ? 0 : -1;
}

/* Copies a name, dropping leading "./" and "/"; MF_EFORMAT when too long. */
static int set_name(char *dst, const char *src, size_t n, const char *what, struct mf_err *err)
{
    while (n > 0 && (src[0] == '/' || (n > 1 && src[0] == '.' && src[1] == '/'))) {
        size_t k = src[0] == '/' ? 1 : 2;
        src += k, n -= k;
    }
    if (n >= RUN_TAR_NAME_MAX)
        return mf_err_set(err, MF_EFORMAT, "%s: a tar entry name is longer than %d bytes", what,
                          RUN_TAR_NAME_MAX - 1);
    memcpy(dst, src, n);
    dst[n] = 0;
    return 0;
}

/* Applies pax records "LEN key=value\n" (path, size) to the next entry. */
static int pax_apply(const char *p, size_t n, char *name, int *have_name, uint64_t *size,
                     int *have_size, const char *what, struct mf_err *err)
{
    size_t at = 0;
    while (at < n) {
        size_t len = 0, i = at;
        while (i < n && p[i] >= '0' && p[i] <= '9' && len < PAX_MAX)
            len = len * 10 + (size_t)(p[i++] - '0');
        if (i == at || i >= n || p[i] != ' ' || len <= i - at + 1 || len > n - at ||
            p[at + len - 1] != '\n')
            return mf_err_set(err, MF_EFORMAT, "%s: a malformed pax record at byte %zu", what,
                              at);
        const char *kv = p + i + 1, *end = p + at + len - 1;
        const char *eq = memchr(kv, '=', (size_t)(end - kv));
        if (!eq)
            return mf_err_set(err, MF_EFORMAT, "%s: a pax record without '='", what);
        size_t klen = (size_t)(eq - kv), vlen = (size_t)(end - eq - 1);
        if (klen == 4 && memcmp(kv, "path", 4) == 0) {
            int rc = set_name(name, eq + 1, vlen, what, err);
            if (rc)
                return rc;
            *have_name = 1;
        } else if (klen == 4 && memcmp(kv, "size", 4) == 0) {
            uint64_t v = 0;
            if (vlen == 0 || vlen > 19)
                return mf_err_set(err, MF_EFORMAT, "%s: a bad pax size", what);
            for (size_t k = 0; k < vlen; k++) {
                if (eq[1 + k] < '0' || eq[1 + k] > '9')
                    return mf_err_set(err, MF_EFORMAT, "%s: a bad pax size", what);
                v = v * 10 + (uint64_t)(eq[1 + k] - '0');
            }
            *size = v, *have_size = 1;
        }
        at += len;
    }
    return 0;
}

static uint64_t padded(uint64_t n)
{
    return (n + TAR_BLOCK - 1) / TAR_BLOCK * TAR_BLOCK;
}

int run_tar_walk(const struct run_tar_io *io, const char *what, run_tar_entry_fn fn, void *arg,
                 struct mf_err *err)
{
    unsigned char h[TAR_BLOCK];
    char *name = malloc(RUN_TAR_NAME_MAX), *ext = NULL;
    if (!name)
        return mf_err_set(err, MF_ENOMEM, "out of memory");
    uint64_t pos = 0, next_size = 0;
    int have_name = 0, have_size = 0, rc = 0;
    for (;;) {
        if (read_full(io, h, TAR_BLOCK) != 0) {
            rc = mf_err_set(err, MF_EFORMAT, "%s: the tar ends inside a header at byte %llu",
                            what, (unsigned long long)pos);
            break;
        }
        pos += TAR_BLOCK;
        if (all_zero(h)) {
            rc = 0; /* end of archive (one zero record is enough for us) */
            break;
        }
        if (!tar_checksum_ok(h)) {
            rc = mf_err_set(err, MF_EFORMAT, "%s: a tar header with a bad checksum at byte %llu",
                            what, (unsigned long long)(pos - TAR_BLOCK));
            break;
        }
        uint64_t size;
        if (tar_num(h + 124, 12, &size) != 0) {
            rc = mf_err_set(err, MF_EFORMAT, "%s: a bad tar size field at byte %llu", what,
                            (unsigned long long)(pos - TAR_BLOCK));
            break;
        }
        char type = (char)h[156];
        if (type == 'x' || type == 'L') { /* pax extended header / GNU long name */
            if (size > PAX_MAX) {
                rc = mf_err_set(err, MF_EFORMAT, "%s: an extended tar header of %llu bytes",
                                what, (unsigned long long)size);
                break;
            }
            free(ext);
            ext = malloc((size_t)padded(size) + 1);
            if (!ext) {
                rc = mf_err_set(err, MF_ENOMEM, "out of memory");
                break;
            }
            if (read_full(io, ext, (size_t)padded(size)) != 0) {
                rc = mf_err_set(err, MF_EFORMAT, "%s: the tar ends inside an extended header",
                                what);
                break;
            }
            pos += padded(size);
            if (type == 'x')
                rc = pax_apply(ext, (size_t)size, name, &have_name, &next_size, &have_size, what,
                               err);
            else {
                size_t n = strnlen(ext, (size_t)size);
                rc = set_name(name, ext, n, what, err);
                have_name = 1;
            }
            if (rc)
                break;
            continue;
        }
        if (have_size)
            size = next_size;
        if (!have_name) {
            char full[256 + 100 + 2];
            size_t pn = strnlen((const char *)h + 345, 155), nn = strnlen((const char *)h, 100);
            int ustar = memcmp(h + 257, "ustar", 5) == 0;
            if (ustar && pn)
                snprintf(full, sizeof full, "%.*s/%.*s", (int)pn, (const char *)h + 345, (int)nn,
                         (const char *)h);
            else
                snprintf(full, sizeof full, "%.*s", (int)nn, (const char *)h);
            rc = set_name(name, full, strlen(full), what, err);
            if (rc)
                break;
        }
        have_name = have_size = 0;
        if (type == '0' || type == 0 || type == '7') {
            rc = fn(arg, name, pos, size, err);
            if (rc != 0)
                break;
        } else if (type >= '1' && type <= '6') {
            size = 0; /* links, devices, directories, fifos carry no data */
        }
        uint64_t skip = padded(size);
        if (skip < size || (skip && io->skip(io->arg, skip) != 0)) {
            rc = mf_err_set(err, MF_EFORMAT, "%s: the tar ends inside the data of %s", what,
                            name);
            break;
        }
        pos += skip;
    }
    free(ext);
    free(name);
    return rc;
}

/* ---- tar over a gzFile (plain files are read directly by zlib) -------------------- */

static long gz_read(void *arg, void *buf, size_t n)
{
    size_t got = 0;
    while (got < n) {
        unsigned want = n - got > (1u << 30) ? (1u << 30) : (unsigned)(n - got);
        int r = gzread((gzFile)arg, (char *)buf + got, want);
        if (r < 0)
            return -1;
        if (r == 0)
            break;
        got += (size_t)r;
    }
    return (long)got;
}

static int gz_skip(void *arg, uint64_t n)
{
    gzFile gz = arg;
    if (gzdirect(gz)) {
        z_off_t at = gztell(gz);
        if (at < 0 || (uint64_t)at + n > (uint64_t)INT64_MAX)
            return -1;
        return gzseek(gz, (z_off_t)n, SEEK_CUR) < 0 ? -1 : 0;
    }
    char buf[16384];
    while (n > 0) {
        size_t k = n > sizeof buf ? sizeof buf : (size_t)n;
        if (gz_read(gz, buf, k) != (long)k)
            return -1;
        n -= k;
    }
    return 0;
}

/* ---- the model from an image -------------------------------------------------------- */

static void file_free(struct run_file *f)
{
    free(f->path);
    f->path = NULL;
    if (f->fd >= 0)
        close(f->fd);
    f->fd = -1;
}

void run_model_free(struct run_model *m)
{
    free(m->name);
    file_free(&m->weights);
    for (size_t i = 0; i < m->n_adapters; i++) {
        free(m->adapters[i].name);
        file_free(&m->adapters[i].file);
    }
    free(m->adapters);
    if (m->config_fd >= 0)
        close(m->config_fd);
    free(m->config_text);
    memset(m, 0, sizeof *m);
    m->config_fd = -1;
}

struct scan {
    struct run_model *m;
    const char *blob;     /* path of the layer blob being walked */
    uint64_t blob_size;
    int want_config;      /* stop at model.yaml */
    int found_config;
    uint64_t config_size;
};

/* An adapter file name "adapters/<name>.gguf" -> name (malloc'd), or NULL. */
static char *adapter_name(const char *path)
{
    const char *p = path + strlen("adapters/");
    size_t n = strlen(p);
    if (n <= 5 || strcmp(p + n - 5, ".gguf") != 0 || memchr(p, '/', n))
        return NULL;
    return strndup(p, n - 5);
}

static int on_entry(void *arg, const char *name, uint64_t offset, uint64_t size,
                    struct mf_err *err)
{
    struct scan *sc = arg;
    if (sc->want_config) {
        if (strcmp(name, CONFIG_PATH) != 0)
            return 0;
        sc->found_config = 1;
        sc->config_size = size;
        return 1;
    }
    if (offset > sc->blob_size || size > sc->blob_size - offset)
        return mf_err_set(err, MF_EFORMAT, "%s: %s lies past the end of the blob", sc->blob,
                          name);
    struct run_file f = {.offset = offset, .size = size, .fd = -1};
    if (strcmp(name, WEIGHTS_PATH) == 0) {
        if (sc->m->weights.path)
            return mf_err_set(err, MF_EFORMAT, "the image has two /%s", WEIGHTS_PATH);
        if (!(f.path = strdup(sc->blob)))
            return mf_err_set(err, MF_ENOMEM, "out of memory");
        sc->m->weights = f;
    } else if (strncmp(name, "adapters/", 9) == 0) {
        char *an = adapter_name(name);
        if (!an)
            return 0;
        struct run_adapter *a =
            realloc(sc->m->adapters, (sc->m->n_adapters + 1) * sizeof *sc->m->adapters);
        if (!a || !(f.path = strdup(sc->blob))) {
            free(an);
            if (a)
                sc->m->adapters = a;
            return mf_err_set(err, MF_ENOMEM, "out of memory");
        }
        sc->m->adapters = a;
        a[sc->m->n_adapters++] = (struct run_adapter){.name = an, .file = f};
    }
    return 0;
}

/* Walks one layer blob; for the config, inflates model.yaml into a memfd. */
static int scan_layer(struct store *s, const struct store_desc *d, struct scan *sc,
                      struct mf_err *err)
{
    char *path = NULL;
    int fd = -1, rc = store_blob_path(s, d->digest, &path, err);
    if (rc)
        return rc;
    rc = store_blob_open(s, d->digest, sc->want_config, &fd, err);
    if (rc) {
        free(path);
        return rc;
    }
    gzFile gz = gzdopen(fd, "rb");
    if (!gz) {
        close(fd);
        free(path);
        return mf_err_set(err, MF_ENOMEM, "out of memory opening %s", d->digest);
    }
    gzbuffer(gz, 1u << 16);
    sc->blob = path;
    sc->blob_size = d->size;
    struct run_tar_io io = {gz_read, gz_skip, gz};
    rc = run_tar_walk(&io, d->digest, on_entry, sc, err);
    if (rc == 1 && sc->want_config) {
        rc = 0;
        if (sc->config_size > CONFIG_YAML_MAX)
            rc = mf_err_set(err, MF_EFORMAT, "/%s in %s is %llu bytes", CONFIG_PATH, d->digest,
                            (unsigned long long)sc->config_size);
        char *text = rc ? NULL : malloc((size_t)sc->config_size + 1);
        if (!rc && !text)
            rc = mf_err_set(err, MF_ENOMEM, "out of memory");
        if (!rc && gz_read(gz, text, (size_t)sc->config_size) != (long)sc->config_size)
            rc = mf_err_set(err, MF_EFORMAT, "%s: the tar ends inside /%s", d->digest,
                            CONFIG_PATH);
        if (!rc) {
            text[sc->config_size] = 0;
            if (strlen(text) != sc->config_size)
                rc = mf_err_set(err, MF_EFORMAT, "/%s in %s holds a NUL byte", CONFIG_PATH,
                                d->digest);
        }
        if (!rc) {
            sc->m->config_text = text;
            text = NULL;
        }
        free(text);
    }
    gzclose(gz);
    free(path);
    sc->blob = NULL;
    return rc;
}

static int is_existing_file(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

static int resolve_image(const char *store_root, const char *ref, struct run_model *m,
                         struct mf_err *err)
{
    struct store *s = NULL;
    json_t *info = NULL;
    int rc = store_open(&s, store_root, err);
    if (!rc)
        rc = oci_inspect(s, ref, &info, err);
    const json_t *layers = rc ? NULL : json_object_get(json_object_get(info, "manifest"),
                                                         "layers");
    if (!rc && !json_is_array(layers))
        rc = mf_err_set(err, MF_EFORMAT, "image %s: its manifest has no layers", ref);
    struct scan sc = {.m = m};
    size_t i;
    const json_t *l;
    /* weights and adapters: the plain tar layers */
    json_array_foreach(rc ? NULL : layers, i, l)
    {
        struct store_desc d;
        rc = store_oci_parse_desc(l, "a layer", &d, err);
        if (rc)
            break;
        if (strcmp(d.media_type, LAYER_MT_TAR) != 0)
            continue;
        rc = scan_layer(s, &d, &sc, err);
        if (rc)
            break;
    }
    if (!rc && !m->weights.path)
        rc = mf_err_set(err, MF_EFORMAT, "image %s has no /%s", ref, WEIGHTS_PATH);
    /* the config: the last gzip layer that holds model.yaml (it is the top one) */
    for (size_t k = rc ? 0 : json_array_size(layers); k-- > 0 && !sc.found_config;) {
        struct store_desc d;
        rc = store_oci_parse_desc(json_array_get(layers, k), "a layer", &d, err);
        if (rc)
            break;
        if (strcmp(d.media_type, LAYER_MT_TAR_GZIP) != 0 || d.size > CONFIG_YAML_MAX)
            continue; /* the runtime layer is megabytes; the config one kilobytes */
        sc.want_config = 1;
        rc = scan_layer(s, &d, &sc, err);
        if (rc == MF_EFORMAT) /* not a layer we can read: not the config */
            rc = 0;
        if (rc)
            break;
    }
    json_decref(info);
    store_close(s);
    return rc;
}

int run_model_resolve(const char *store_root, const char *arg, struct run_model *m,
                      struct mf_err *err)
{
    memset(m, 0, sizeof *m);
    m->config_fd = -1;
    m->weights.fd = -1;
    int rc = 0;
    if (!(m->name = strdup(arg)))
        return mf_err_set(err, MF_ENOMEM, "out of memory");
    size_t n = strlen(arg);
    if (is_existing_file(arg) || (n > 5 && strcmp(arg + n - 5, ".gguf") == 0)) {
        if (!is_existing_file(arg))
            rc = mf_err_set(err, MF_ENOTFOUND, "%s: no such file", arg);
        else if (!(m->weights.path = strdup(arg)))
            rc = mf_err_set(err, MF_ENOMEM, "out of memory");
    } else {
        rc = resolve_image(store_root, arg, m, err);
    }
    if (rc)
        run_model_free(m);
    return rc;
}

/* ---- making it servable ---------------------------------------------------------------- */

/* Copies f's byte range into an unlinked file under dir; f->path becomes
 * /proc/self/fd/N (the fd is inherited by mfc-serve). */
static int copy_range(const char *dir, struct run_file *f, uint64_t *copied, struct mf_err *err)
{
    int src = open(f->path, O_RDONLY | O_CLOEXEC);
    if (src < 0)
        return mf_err_sys(err, MF_EIO, errno, "%s", f->path);
    int dst = open(dir, O_TMPFILE | O_RDWR, 0600);
    if (dst < 0) { /* a file system without O_TMPFILE: a named file, unlinked at once */
        size_t n = strlen(dir) + sizeof "/run-XXXXXX";
        char *t = malloc(n);
        if (t) {
            snprintf(t, n, "%s/run-XXXXXX", dir);
            dst = mkstemp(t);
            if (dst >= 0)
                unlink(t);
            free(t);
        }
    }
    if (dst < 0) {
        int e = errno;
        close(src);
        return mf_err_sys(err, MF_EIO, e, "creating a temporary file in %s", dir);
    }
    uint64_t size = f->size;
    if (!size) {
        struct stat st;
        size = fstat(src, &st) == 0 && (uint64_t)st.st_size > f->offset
                   ? (uint64_t)st.st_size - f->offset
                   : 0;
    }
    off_t in = (off_t)f->offset;
    uint64_t done = 0;
    int rc = 0, plain = 0;
    char *buf = NULL;
    while (!rc && done < size) {
        size_t want = size - done > (1u << 30) ? (1u << 30) : (size_t)(size - done);
        ssize_t k = -1;
        if (!plain) {
            k = copy_file_range(src, &in, dst, NULL, want, 0);
            if (k < 0 && (errno == EXDEV || errno == ENOSYS || errno == EINVAL ||
                          errno == EOPNOTSUPP)) {
                plain = 1;
                continue;
            }
        } else {
            if (!buf && !(buf = malloc(1u << 20))) {
                rc = mf_err_set(err, MF_ENOMEM, "out of memory");
                break;
            }
            k = pread(src, buf, want > (1u << 20) ? (1u << 20) : want, in);
            for (ssize_t w = 0, o = 0; k > 0 && o < k; o += w) {
                w = write(dst, buf + o, (size_t)(k - o));
                if (w <= 0) {
                    k = -1;
                    break;
                }
            }
            if (k > 0)
                in += k;
        }
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            rc = k == 0 ? mf_err_set(err, MF_EFORMAT, "%s ends before byte %llu", f->path,
                                     (unsigned long long)(f->offset + size))
                        : mf_err_sys(err, MF_EIO, errno, "copying from %s", f->path);
        else
            done += (uint64_t)k;
    }
    free(buf);
    close(src);
    if (rc) {
        close(dst);
        return rc;
    }
    char *p = NULL;
    if (asprintf(&p, "/proc/self/fd/%d", dst) < 0) {
        close(dst);
        return mf_err_set(err, MF_ENOMEM, "out of memory");
    }
    free(f->path);
    f->path = p;
    f->fd = dst;
    f->offset = f->size = 0;
    *copied += size;
    return 0;
}

/* model.yaml with each `path: "/adapters/X.gguf"` pointing at the adapter's file. */
static int rewrite_config(const struct run_model *m, struct mf_buf *out, struct mf_err *err)
{
    int rc = 0;
    for (const char *l = m->config_text; !rc && *l;) {
        size_t n = strcspn(l, "\n");
        const char *k = l + strspn(l, " ");
        if (k[0] == '-' && k[1] == ' ')
            k += 2;
        const struct run_adapter *hit = NULL;
        if ((size_t)(k - l) < n && !strncmp(k, "path: ", 6)) {
            const char *v = k + 6;
            size_t vl = n - (size_t)(v - l);
            if (vl >= 2 && v[0] == '"' && v[vl - 1] == '"')
                v++, vl -= 2;
            for (size_t i = 0; i < m->n_adapters && !hit; i++) {
                const char *an = m->adapters[i].name;
                size_t al = strlen(an);
                if (vl == 10 + al + 5 && !strncmp(v, "/adapters/", 10) &&
                    !strncmp(v + 10, an, al) && !strncmp(v + 10 + al, ".gguf", 5))
                    hit = &m->adapters[i];
            }
        }
        if (hit)
            rc = mf_buf_printf(out, err, "%.*spath: \"%s\"\n", (int)(k - l), l, hit->file.path);
        else
            rc = mf_buf_printf(out, err, "%.*s\n", (int)n, l);
        l += n + (l[n] == '\n');
    }
    return rc;
}

int run_model_materialize(const char *store_root, struct run_model *m, int map_ranges,
                          struct mf_err *err)
{
    char *dir = NULL;
    if (asprintf(&dir, "%s/tmp", store_root) < 0)
        return mf_err_set(err, MF_ENOMEM, "out of memory");
    int rc = 0;
    if (!map_ranges && (m->weights.offset || m->weights.size))
        rc = copy_range(dir, &m->weights, &m->copied_bytes, err);
    for (size_t i = 0; !rc && i < m->n_adapters; i++)
        if (m->adapters[i].file.offset || m->adapters[i].file.size)
            rc = copy_range(dir, &m->adapters[i].file, &m->copied_bytes, err);
    free(dir);
    if (rc || !m->config_text)
        return rc;
    struct mf_buf b;
    mf_buf_init(&b, 2 * (size_t)CONFIG_YAML_MAX);
    rc = rewrite_config(m, &b, err);
    int fd = rc ? -1 : memfd_create("model.yaml", 0); /* inherited by mfc-serve */
    if (!rc && fd < 0)
        rc = mf_err_sys(err, MF_EIO, errno, "memfd_create");
    for (size_t off = 0; !rc && off < b.len;) {
        ssize_t w = write(fd, b.data + off, b.len - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            rc = mf_err_sys(err, MF_EIO, errno, "writing model.yaml to a memfd");
        else
            off += (size_t)w;
    }
    if (rc && fd >= 0)
        close(fd);
    else if (!rc)
        m->config_fd = fd;
    mf_buf_free(&b);
    return rc;
}
