/*
 * oci.h: OCI images from layers: config, manifest, tags, and the ways out of
 * and into the store (an OCI layout directory or tar, a docker-archive tar).
 *
 * How a build becomes an image (the executor's `image` node):
 *
 *   struct layer_result w, a, c, r;            // layer.h, each already in the store
 *   layer_write(s, &(struct layer_entry){"models/m.gguf", src, ...}, 1, LAYER_NONE, t, &w, e);
 *   layer_write_runtime(s, "/path/mfc-serve", "mfc-serve", t, &r, e);
 *   struct oci_layer ls[] = {{&r, "mfc-serve"}, {&w, "FROM ./m.gguf"}, ...};
 *   struct oci_image img = {.layers = ls, .n_layers = 4, .entrypoint = ep, ...};
 *   oci_image_write(s, &img, "llama3-lora", &manifest, e);  // config, manifest, tag
 *
 * Everything is canonical JSON (sorted keys, compact) and every time comes
 * from img->created, so equal inputs give equal config and manifest digests.
 * A failed call may leave unreferenced blobs (gc removes them), never a tag.
 */
#ifndef MFC_OCI_H
#define MFC_OCI_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "common/err.h"
#include "image/layer.h"
#include "store/store.h"

#define OCI_MT_CONFIG "application/vnd.oci.image.config.v1+json"
#define OCI_ANN_TITLE "org.opencontainers.image.title"
#define OCI_ANN_FILEPATH "org.cncf.model.filepath"
#define OCI_ANN_CONTAINERD_NAME "io.containerd.image.name"
#define OCI_BLOB_MAX ((uint64_t)1 << 40) /* bytes of one blob we accept from an archive */

/* One layer of an image, base first. */
struct oci_layer {
    const struct layer_result *layer; /* borrowed: as layer_write filled it */
    const char *created_by;           /* borrowed: history, e.g. the Modelfile line */
};

/* A label (config.Labels) or an environment variable. */
struct oci_kv {
    const char *key;   /* borrowed */
    const char *value; /* borrowed */
};

/* What an image is made of. NULL/0 fields take the documented default. */
struct oci_image {
    const char *architecture;        /* GOARCH ("amd64", "arm64"); NULL: the host's */
    const char *os;                  /* NULL: "linux" */
    const char *const *entrypoint;   /* borrowed: argv of the runtime */
    size_t n_entrypoint;             /* entries of entrypoint */
    const struct oci_kv *env;        /* borrowed: Env, after the defaults (PATH) */
    size_t n_env;                    /* entries of env */
    const struct oci_kv *labels;     /* borrowed: Labels (org.opencontainers.image.*, mfc.*) */
    size_t n_labels;                 /* entries of labels */
    const struct oci_layer *layers;  /* borrowed: base first */
    size_t n_layers;                 /* entries of layers, >= 1 */
    const char *const *notes;        /* borrowed: history entries with no layer (PARAMETER …) */
    size_t n_notes;                  /* entries of notes */
    int64_t created;                 /* seconds since the epoch (layer_source_date) */
};

/* Images in the store. */

/* Writes config and manifest blobs and, when tag is not NULL, points the tag
 * at the manifest. *manifest gets the manifest descriptor. On failure no tag
 * changes and *manifest is untouched. Port 8080/tcp is always exposed. */
int oci_image_write(struct store *s, const struct oci_image *img, const char *tag,
                    struct store_desc *manifest, struct mf_err *err);

/* Resolves a tag or a manifest digest in the store (MF_ENOTFOUND when absent). */
int oci_resolve(struct store *s, const char *ref, struct store_desc *d, struct mf_err *err);

/* *out = {"name", "digest", "mediaType", "size", "manifest", "config"} for an
 * image in the store (a new reference); digests verified on read. */
int oci_inspect(struct store *s, const char *ref, json_t **out, struct mf_err *err);

/* Outputs (`--output`, docker build style) and archives. */

enum oci_output_type { OCI_OUT_OCI = 1, OCI_OUT_DOCKER = 2, OCI_OUT_REGISTRY = 3 };

struct oci_output {
    enum oci_output_type type; /* type= */
    char dest[4096];           /* dest= (a directory, or a file ending in .tar) */
    int tar;                   /* nonzero: dest is a tar file */
    char name[1024];           /* type=registry: name= (where to push; "": every -t) */
    int insecure;              /* type=registry: registry.insecure=true */
};

/* Parses "type=oci,dest=DIR|FILE.tar", "type=docker,dest=FILE.tar",
 * "type=registry[,name=REF][,registry.insecure=true]" or a bare path
 * ("X.tar": docker; else an OCI dir). name= and registry.* go with
 * type=registry only. */
int oci_output_parse(const char *spec, struct oci_output *o, struct mf_err *err);

/* Writes the image `ref` (from the store) to o: an OCI layout directory
 * (blobs copied, index.json naming it), or a deterministic tar of one; a
 * docker tar is an OCI layout plus manifest.json and repositories, so both
 * `docker load` stores and `podman load` accept it. name is the name the
 * image gets in the output ("repo[:tag]"; NULL: ref). A tar is written to a
 * temporary file and renamed into place. */
int oci_export(struct store *s, const char *ref, const char *name, const struct oci_output *o,
               struct mf_err *err);

/* Loads an OCI layout tar or a docker tar written as above (or by `docker
 * save` >= 25) into the store. Entries are checked before use (relative
 * paths, no "..", regular files or directories, blobs at most OCI_BLOB_MAX,
 * JSON files at most STORE_INDEX_MAX), every blob is verified against its
 * name, every manifest's config and layers must be present with their
 * sizes, and a docker manifest.json must describe the same images through
 * members of the archive (oci_docker_check). Only then are the tags set:
 * name when not NULL, else each index
 * entry's io.containerd.image.name or ref.name. On failure no tag changes
 * (verified blobs may stay, unreferenced, for gc). *n_loaded counts images. */
int oci_load(struct store *s, const char *tar_path, const char *name, size_t *n_loaded,
             struct mf_err *err);

/* Internals for tests. */

#define OCI_DOCKER_MAX_IMAGES 16 /* images of one archive (as index.json may list) */

/* One image as an archive's index.json describes it, for oci_docker_check. */
struct oci_docker_image {
    char config[STORE_DIGEST_BUF];     /* its config's digest */
    char (*layers)[STORE_DIGEST_BUF];  /* borrowed: its layers' digests, in order */
    size_t n_layers;                   /* entries in layers */
};

/* Checks a docker archive's manifest.json (text[0..len), untrusted) against
 * the n_imgs images of its index.json and the names of the n_members
 * regular members the archive holds (oci_member_check'ed): a list of as
 * many entries as images, each naming by safe relative member paths one
 * image's config (Config) and its layers in order (Layers), no image twice,
 * RepoTags null or names. 0, or MF_EFORMAT naming the entry and field. */
int oci_docker_check(const char *text, size_t len, const struct oci_docker_image *imgs,
                     size_t n_imgs, const char *const *members, size_t n_members,
                     struct mf_err *err);

/* Checks one archive member name: relative, no "..", no empty components
 * (a leading "./" is dropped). *clean points into name. 0 or MF_EFORMAT. */
int oci_member_check(const char *name, const char **clean, struct mf_err *err);
/* Builds the config document for img (a new reference). */
int oci_config_json(const struct oci_image *img, json_t **out, struct mf_err *err);

#endif
