/*
 * run_image.c: the model that `mfc serve` / `mfc run` serve, from a GGUF path
 * or from an image in the store, read in place.
 *
 * An image's weights and adapter layers are uncompressed tars (docs/image.md),
 * so each GGUF in them is a contiguous byte range of the layer blob: walking
 * the tar headers (lseek past the data, so a 5 GB layer costs a few reads)
 * gives the offset, and mfc-serve maps that range of the blob. The config
 * layer is tar+gzip; its model.yaml (kilobytes) is inflated into a memfd.
 */
#include "cli/run.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <zlib.h>

#include "image/layer.h"
#include "image/oci.h"
#include "store/store.h"

#define CONFIG_YAML_MAX (64u << 20)
#define WEIGHTS_PATH "models/model.gguf"
#define DRAFT_PATH "models/draft.gguf"
#define CONFIG_PATH "etc/mfc/model.yaml"

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
}

void run_model_free(struct run_model *m)
{
    free(m->name);
    free(m->served);
    file_free(&m->weights);
    file_free(&m->draft);
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
    struct run_file f = {.offset = offset, .size = size};
    if (strcmp(name, WEIGHTS_PATH) == 0) {
        if (sc->m->weights.path)
            return mf_err_set(err, MF_EFORMAT, "the image has two /%s", WEIGHTS_PATH);
        if (!(f.path = strdup(sc->blob)))
            return mf_err_set(err, MF_ENOMEM, "out of memory");
        sc->m->weights = f;
    } else if (strcmp(name, DRAFT_PATH) == 0) {
        if (sc->m->draft.path)
            return mf_err_set(err, MF_EFORMAT, "the image has two /%s", DRAFT_PATH);
        if (!(f.path = strdup(sc->blob)))
            return mf_err_set(err, MF_ENOMEM, "out of memory");
        sc->m->draft = f;
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

/* The image's MFC_MODEL_NAME (config.Env, written by mfc build from its
 * first tag) into m->served: the name mfc-serve answers to in a container,
 * so mfc serve/run answer to the same one. None: m->served stays NULL. */
static int served_name(const json_t *cfg, struct run_model *m, struct mf_err *err)
{
    size_t i;
    const json_t *e;
    static const char key[] = "MFC_MODEL_NAME=";
    json_array_foreach(json_object_get(json_object_get(cfg, "config"), "Env"), i, e)
    {
        const char *v = json_string_value(e);
        if (v && strncmp(v, key, sizeof key - 1) == 0 && v[sizeof key - 1]) {
            free(m->served);
            if (!(m->served = strdup(v + sizeof key - 1)))
                return mf_err_set(err, MF_ENOMEM, "out of memory");
        }
    }
    return 0;
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
    if (!rc)
        rc = served_name(json_object_get(info, "config"), m, err);
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

/* model.yaml with each `path: "/adapters/X.gguf"` pointing at the adapter's
 * layer blob, `offset:` and `size:` (same indentation) giving its range;
 * the draft's `path: "/models/draft.gguf"` the same way. */
static int rewrite_config(const struct run_model *m, struct mf_buf *out, struct mf_err *err)
{
    int rc = 0;
    for (const char *l = m->config_text; !rc && *l;) {
        size_t n = strcspn(l, "\n");
        const char *k = l + strspn(l, " ");
        if (k[0] == '-' && k[1] == ' ')
            k += 2;
        const struct run_file *hit = NULL;
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
                    hit = &m->adapters[i].file;
            }
            if (!hit && m->draft.path && vl == strlen(DRAFT_PATH) + 1 && v[0] == '/' &&
                !strncmp(v + 1, DRAFT_PATH, vl - 1))
                hit = &m->draft;
        }
        if (hit)
            rc = mf_buf_printf(out, err, "%.*spath: \"%s\"\n%*soffset: %llu\n%*ssize: %llu\n",
                               (int)(k - l), l, hit->path, (int)(k - l), "",
                               (unsigned long long)hit->offset, (int)(k - l), "",
                               (unsigned long long)hit->size);
        else
            rc = mf_buf_printf(out, err, "%.*s\n", (int)n, l);
        l += n + (l[n] == '\n');
    }
    return rc;
}

int run_model_materialize(struct run_model *m, struct mf_err *err)
{
    int rc = 0;
    if (!m->config_text)
        return 0;
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
