/*
 * oci_docker.c: the check of a docker archive's manifest.json at `mfc load`
 * (oci_docker_check, oci.h), as strict as the OCI index's.
 *
 * An archive that is both an OCI layout and a `docker save` archive is read
 * two ways: mfc and podman follow index.json, `docker load` (before 25)
 * follows manifest.json. So manifest.json must describe the very images the
 * index does, through members the archive holds: an array of at most
 * OCI_DOCKER_MAX_IMAGES objects, each a Config path and Layers paths that
 * are safe relative member names (no "..", not absolute: oci_member_check),
 * present in the archive, and exactly the config and layers, in order, of
 * one image of the index; RepoTags null or names. Owns nothing; pure.
 */
#include "image/oci.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/json.h"

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* 1 when path is one of the sorted members. */
static int member(const char *path, const char *const *members, size_t n)
{
    return n && bsearch(&path, members, n, sizeof *members, cmp_str) != NULL;
}

/* A path of entry i's field: safe, a member, and when it is blobs/sha256/HEX
 * its digest ("sha256:HEX") into digest; "" for any other member. */
static int check_path(const json_t *v, size_t i, const char *field, const char *const *members,
                      size_t n_members, char digest[STORE_DIGEST_BUF], struct mf_err *err)
{
    const char *p = json_string_value(v), *clean;
    if (!p)
        return mf_err_set(err, MF_EFORMAT,
                          "manifest.json: entry %zu: %s must be a path "
                          "(a string)",
                          i + 1, field);
    if (oci_member_check(p, &clean, err) != 0)
        return mf_err_set(err, MF_EFORMAT,
                          "manifest.json: entry %zu: %s '%.200s' is not a "
                          "safe relative path inside the archive",
                          i + 1, field, p);
    if (!member(clean, members, n_members))
        return mf_err_set(err, MF_EFORMAT,
                          "manifest.json: entry %zu: %s '%.200s' is not in "
                          "the archive",
                          i + 1, field, p);
    digest[0] = '\0';
    if (!strncmp(clean, "blobs/sha256/", 13) && strlen(clean + 13) == 64)
        snprintf(digest, STORE_DIGEST_BUF, "sha256:%s", clean + 13);
    return 0;
}

/* Entry i (an object) against the index's images: its Config picks one,
 * whose layers its Layers must list in order. *which gets that image. */
static int check_entry(const json_t *e, size_t i, const struct oci_docker_image *imgs,
                       size_t n_imgs, const char *const *members, size_t n_members, size_t *which,
                       struct mf_err *err)
{
    char d[STORE_DIGEST_BUF];
    const json_t *layers = json_object_get(e, "Layers"), *tags = json_object_get(e, "RepoTags");
    if (!json_is_object(e))
        return mf_err_set(err, MF_EFORMAT, "manifest.json: entry %zu is not an object", i + 1);
    int rc = check_path(json_object_get(e, "Config"), i, "Config", members, n_members, d, err);
    size_t k = 0;
    while (!rc && k < n_imgs && strcmp(imgs[k].config, d) != 0)
        k++;
    if (!rc && k == n_imgs)
        return mf_err_set(err, MF_EFORMAT,
                          "manifest.json: entry %zu: its Config is not the "
                          "config of any image in index.json (docker load would load another "
                          "image than mfc load)",
                          i + 1);
    if (!rc && (!json_is_array(layers) || json_array_size(layers) != imgs[k].n_layers))
        return mf_err_set(err, MF_EFORMAT,
                          "manifest.json: entry %zu: Layers must list the "
                          "image's %zu layers",
                          i + 1, imgs[k].n_layers);
    for (size_t l = 0; !rc && l < imgs[k].n_layers; l++) {
        char field[32];
        snprintf(field, sizeof field, "Layers[%zu]", l);
        rc = check_path(json_array_get(layers, l), i, field, members, n_members, d, err);
        if (!rc && strcmp(d, imgs[k].layers[l]) != 0)
            rc = mf_err_set(err, MF_EFORMAT,
                            "manifest.json: entry %zu: %s is not layer %zu "
                            "of the image index.json lists",
                            i + 1, field, l + 1);
    }
    if (!rc && tags && !json_is_null(tags)) {
        size_t t;
        json_t *tag;
        if (!json_is_array(tags))
            return mf_err_set(err, MF_EFORMAT,
                              "manifest.json: entry %zu: RepoTags must be a "
                              "list of names",
                              i + 1);
        json_array_foreach(
            tags, t,
            tag) if (!json_is_string(tag) || json_string_length(tag) == 0 ||
                     json_string_length(tag) >= STORE_REF_MAX ||
                     strcspn(json_string_value(tag), " \t\r\n") !=
                         json_string_length(
                             tag)) return mf_err_set(err, MF_EFORMAT,
                                                     "manifest.json: entry %zu: RepoTags[%zu] "
                                                     "is not an image name",
                                                     i + 1, t);
    }
    *which = k;
    return rc;
}

int oci_docker_check(const char *text, size_t len, const struct oci_docker_image *imgs,
                     size_t n_imgs, const char *const *members, size_t n_members,
                     struct mf_err *err)
{
    json_t *doc = mf_json_parse(text, len, "manifest.json", err);
    const char **sorted = NULL;
    unsigned char seen[OCI_DOCKER_MAX_IMAGES] = {0};
    size_t i, which = 0;
    json_t *e;
    int rc = doc ? 0 : MF_EFORMAT;
    if (!rc && (!json_is_array(doc) || json_array_size(doc) == 0))
        rc = mf_err_set(err, MF_EFORMAT, "manifest.json must be a non-empty list of images");
    if (!rc && (json_array_size(doc) != n_imgs || n_imgs > OCI_DOCKER_MAX_IMAGES))
        rc = mf_err_set(err, MF_EFORMAT, "manifest.json lists %zu images, index.json %zu",
                        json_array_size(doc), n_imgs);
    if (!rc && n_members && !(sorted = malloc(n_members * sizeof *sorted)))
        rc = mf_err_set(err, MF_ENOMEM, "out of memory");
    if (!rc && n_members) {
        memcpy(sorted, members, n_members * sizeof *sorted);
        qsort(sorted, n_members, sizeof *sorted, cmp_str);
    }
    json_array_foreach(doc, i, e)
    {
        if (rc)
            break;
        rc = check_entry(e, i, imgs, n_imgs, sorted, n_members, &which, err);
        if (!rc && seen[which]++)
            rc = mf_err_set(err, MF_EFORMAT,
                            "manifest.json: entry %zu names the same image as "
                            "an earlier one",
                            i + 1);
    }
    free(sorted);
    json_decref(doc);
    return rc;
}
