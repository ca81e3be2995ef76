/*
 * mkimage.c: builds an mfc image in the store at $MFC_HOME from files, the
 * way the executor's image node does (layer.h + oci.h), so the image tests
 * do not depend on `mfc build`. Prints the manifest digest.
 *
 *   mkimage NAME --runtime BIN --weights FILE [--adapter FILE]... [--config TEXT]
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "image/layer.h"
#include "image/oci.h"
#include "store/store.h"

#define MAX_ADAPTERS 8

static const char *base(const char *p)
{
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

static int build(struct store *s, const char *name, const char *runtime, const char *weights,
                 const char **adapters, int n_ad, const char *config, struct mf_err *err)
{
    int64_t t;
    struct layer_result res[MAX_ADAPTERS + 3];
    struct oci_layer ls[MAX_ADAPTERS + 3];
    char paths[MAX_ADAPTERS + 1][512], by[MAX_ADAPTERS + 1][600];
    enum layer_compression comp;
    int n = 0, rc = layer_source_date(&t, err);
    if (rc == 0)
        rc = layer_runtime_compression(&comp, err); /* as mfc build: MFC_RUNTIME_COMPRESSION */
    if (rc == 0 && (rc = layer_write_runtime(s, runtime, "mfc-serve", t, comp, NULL, NULL,
                                             &res[n], NULL, err)) == 0)
        ls[n] = (struct oci_layer){&res[n], "COPY mfc-serve /usr/bin/mfc-serve"}, n++;
    for (int i = -1; rc == 0 && i < n_ad; i++) {
        const char *src = i < 0 ? weights : adapters[i];
        snprintf(paths[i + 1], sizeof paths[0], "%s/%s", i < 0 ? "models" : "adapters", base(src));
        snprintf(by[i + 1], sizeof by[0], "%s %s", i < 0 ? "FROM" : "ADAPTER", src);
        struct layer_entry e = {.path = paths[i + 1], .src = src, .mode = 0644};
        if ((rc = layer_write(s, &e, 1, LAYER_NONE, t, &res[n], err)) == 0)
            ls[n] = (struct oci_layer){&res[n], by[i + 1]}, n++;
    }
    struct layer_entry ce = {.path = "etc/mfc/model.yaml", .data = config, .len = strlen(config),
                             .mode = 0644};
    if (rc == 0 && (rc = layer_write(s, &ce, 1, LAYER_GZIP, t, &res[n], err)) == 0)
        ls[n] = (struct oci_layer){&res[n], "PARAMETER/TEMPLATE/SYSTEM -> model.yaml"}, n++;
    const char *ep[] = {"/usr/bin/mfc-serve", "--config", "/etc/mfc/model.yaml"};
    const struct oci_kv labels[] = {{"org.opencontainers.image.title", "mfc-test"},
                                    {"io.mfc.adapters", n_ad ? "yes" : "none"}};
    const struct oci_kv env[] = {{"MFC_PORT", "8080"}};
    const char *notes[] = {"PARAMETER temperature 0.7"};
    struct oci_image img = {.entrypoint = ep, .n_entrypoint = 3, .env = env, .n_env = 1,
                            .labels = labels, .n_labels = 2, .layers = ls, .n_layers = (size_t)n,
                            .notes = notes, .n_notes = 1, .created = t};
    struct store_desc m;
    if (rc == 0 && (rc = oci_image_write(s, &img, name, &m, err)) == 0)
        printf("%s\n", m.digest);
    return rc;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {{"runtime", required_argument, NULL, 'r'},
                                         {"weights", required_argument, NULL, 'w'},
                                         {"adapter", required_argument, NULL, 'a'},
                                         {"config", required_argument, NULL, 'c'},
                                         {NULL, 0, NULL, 0}};
    const char *runtime = NULL, *weights = NULL, *config = "model: m\n", *ad[MAX_ADAPTERS];
    int n_ad = 0, c;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (c == 'r')
            runtime = optarg;
        else if (c == 'w')
            weights = optarg;
        else if (c == 'a' && n_ad < MAX_ADAPTERS)
            ad[n_ad++] = optarg;
        else if (c == 'c')
            config = optarg;
        else
            return 2;
    }
    if (optind != argc - 1 || !runtime || !weights) {
        fprintf(stderr, "usage: mkimage NAME --runtime BIN --weights FILE [--adapter FILE]...\n");
        return 2;
    }
    struct mf_err err;
    struct store *s = NULL;
    char *root = NULL;
    int rc = store_default_root(&root, &err);
    if (rc == 0)
        rc = store_open(&s, root, &err);
    if (rc == 0)
        rc = build(s, argv[optind], runtime, weights, ad, n_ad, config, &err);
    if (rc)
        fprintf(stderr, "mkimage: %s\n", err.msg);
    store_close(s);
    free(root);
    return rc ? 1 : 0;
}
