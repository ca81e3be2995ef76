/*
 * cmd_manifest.c: `mfc manifest IMAGE --kubernetes|--compose`.
 *
 * Thin: parse options, read the image's config from the store (oci_inspect:
 * digests verified), build the documents (cli/manifest.h) and print the
 * YAML on stdout. The image must be in the local store, so what is printed
 * always matches an image that exists; --image names where a cluster pulls
 * it from (docs/deploy.md).
 */
#include "config.h"

#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/num.h"
#include "cli/cli.h"
#include "cli/manifest.h"
#include "image/oci.h"
#include "store/store.h"

static const char manifest_usage[] =
    "Usage: mfc manifest (--kubernetes | --compose) [--name NAME] [--image REF]\n"
    "                    [--port PORT] [--gpus N] [--replicas N] IMAGE\n\n"
    "Print deployment manifests (YAML) for an image in the store: a Kubernetes\n"
    "Deployment and Service, or a Compose file. The container runs the image's own\n"
    "entrypoint with its Env, asks for GPUs, is probed on /health and scraped by\n"
    "Prometheus on /metrics.\n"
    "  -k, --kubernetes  a Deployment and a Service (two YAML documents)\n"
    "  -c, --compose     a Compose file with one service\n"
    "  -n, --name NAME   the app/service name (default: from IMAGE, e.g. 'llama3-sql')\n"
    "  -i, --image REF   the reference to pull, e.g. registry.example.com/team/m:1\n"
    "                    (default: IMAGE, or the registry name it was pushed as, pinned\n"
    "                    by digest: REGISTRY/NAME@sha256:...)\n"
    "  -p, --port PORT   the port to serve on (default: the image's MFC_PORT, else 8080)\n"
    "  -g, --gpus N      GPUs per replica (default: 1 when the image's runtime is a\n"
    "                    CUDA build, else none; 0 for none)\n"
    "  -r, --replicas N  Kubernetes replicas (default 1)\n";

/* 1 when ref names a registry host (docker's rule: a first component with a
 * '.' or ':', or localhost), so a cluster can pull it. */
static int has_registry(const char *ref)
{
    const char *slash = strchr(ref, '/');
    if (!slash)
        return 0;
    size_t k = (size_t)(slash - ref);
    return memchr(ref, '.', k) || memchr(ref, ':', k) || (k == 9 && !strncmp(ref, "localhost", 9));
}

/* ref without its tag or digest, "@" and digest: what a cluster pulls, pinned.
 * For a local name, the first tag in the store with a registry host that
 * points at the same manifest (mfc push records the pushed name). NULL when
 * there is none; otherwise malloc'd. */
static char *pullable_ref(struct store *s, const char *ref, const char *digest)
{
    struct store_tag *tags = NULL;
    size_t n = 0;
    struct mf_err ignored;
    const char *use = has_registry(ref) ? ref : NULL;
    if (!use && store_tag_list(s, &tags, &n, &ignored) == 0)
        for (size_t i = 0; i < n && !use; i++)
            if (has_registry(tags[i].name) && digest && !strcmp(tags[i].desc.digest, digest))
                use = tags[i].name;
    char *out = NULL;
    if (use && digest) {
        const char *slash = strrchr(use, '/');
        size_t len = strcspn(slash ? slash : use, ":@") + (size_t)(slash ? slash - use : 0);
        if (asprintf(&out, "%.*s@%s", (int)len, use, digest) < 0)
            out = NULL;
    }
    free(tags);
    return out;
}

/* Bytes of the weights' and adapters' layers (plain tar layers). */
static uint64_t model_bytes(const json_t *manifest)
{
    uint64_t sum = 0;
    size_t i;
    const json_t *l;
    json_array_foreach(json_object_get(manifest, "layers"), i, l)
    {
        const char *mt = json_string_value(json_object_get(l, "mediaType"));
        if (mt && !strcmp(mt, "application/vnd.oci.image.layer.v1.tar"))
            sum += (uint64_t)json_integer_value(json_object_get(l, "size"));
    }
    return sum;
}

/* An integer option within [lo, hi]; 0, or a usage error's 2. */
static int int_opt(struct mfc_ctx *ctx, const char *what, const char *s, int lo, int hi, int *out)
{
    int64_t v;
    if (mf_num_parse_i64(s, &v) != 0 || v < lo || v > hi)
        return mfc_usage_error(ctx, "manifest", "%s '%s': expected a whole number from %d to %d",
                               what, s, lo, hi);
    *out = (int)v;
    return 0;
}

int mfc_cmd_manifest(int argc, char **argv, struct mfc_ctx *ctx)
{
    static const struct option opts[] = {{"kubernetes", no_argument, NULL, 'k'},
                                         {"compose", no_argument, NULL, 'c'},
                                         {"name", required_argument, NULL, 'n'},
                                         {"image", required_argument, NULL, 'i'},
                                         {"port", required_argument, NULL, 'p'},
                                         {"gpus", required_argument, NULL, 'g'},
                                         {"replicas", required_argument, NULL, 'r'},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    struct manifest_opts o = {.kind = MANIFEST_KUBERNETES, .gpus = -1, .replicas = 1};
    int kinds = 0, c, rc = 0;
    opterr = 0;
    while (rc == 0 && (c = getopt_long(argc, argv, ":hkcn:i:p:g:r:", opts, NULL)) != -1) {
        switch (c) {
        case 'h':
            fputs(manifest_usage, ctx->out);
            return 0;
        case 'k':
        case 'c':
            o.kind = c == 'k' ? MANIFEST_KUBERNETES : MANIFEST_COMPOSE;
            kinds |= c == 'k' ? 1 : 2;
            break;
        case 'n':
            o.name = optarg;
            break;
        case 'i':
            o.image = optarg;
            break;
        case 'p':
            rc = int_opt(ctx, "--port", optarg, 1, 65535, &o.port);
            break;
        case 'g':
            rc = int_opt(ctx, "--gpus", optarg, 0, 64, &o.gpus);
            break;
        case 'r':
            rc = int_opt(ctx, "--replicas", optarg, 1, 10000, &o.replicas);
            break;
        case ':':
            return mfc_usage_error(ctx, "manifest", "option '%s' needs a value",
                                   argv[optind - 1]);
        default:
            return mfc_usage_error(ctx, "manifest", "unknown option '%s'", argv[optind - 1]);
        }
    }
    if (rc)
        return rc;
    if (kinds != 1 && kinds != 2)
        return mfc_usage_error(ctx, "manifest", "give one of --kubernetes or --compose");
    if (optind != argc - 1)
        return mfc_usage_error(ctx, "manifest", "expects one IMAGE");
    const char *ref = argv[optind];
    char name[MANIFEST_NAME_MAX];
    if (!o.name) {
        manifest_name_from_ref(ref, name);
        o.name = name;
    } else if (!manifest_name_valid(o.name)) {
        return mfc_usage_error(ctx, "manifest",
                               "--name '%s': use 1 to 63 of a-z, 0-9 and '-', starting and "
                               "ending with a letter or digit",
                               o.name);
    }

    struct mf_err err;
    struct store *s = NULL;
    json_t *info = NULL, *docs = NULL;
    char *root = NULL, *yaml = NULL;
    size_t len = 0;
    char *pinned = NULL;
    rc = store_default_root(&root, &err);
    if (rc == 0)
        rc = store_open(&s, root, &err);
    if (rc == 0)
        rc = oci_inspect(s, ref, &info, &err);
    if (rc == 0) {
        o.digest = json_string_value(json_object_get(info, "digest"));
        o.model_bytes = model_bytes(json_object_get(info, "manifest"));
        if (!o.image && !(o.image = pinned = pullable_ref(s, ref, o.digest)))
            o.image = ref;
        if (o.image == ref && !has_registry(ref))
            fprintf(ctx->err,
                    "mfc: warning: '%s' is a local name a cluster cannot pull: push it (mfc push "
                    "%s REGISTRY/NAME) and run mfc manifest again, or pass --image\n",
                    ref, ref);
        rc = manifest_docs(json_object_get(info, "config"), &o, &docs, &err);
    }
    store_close(s);
    free(root);
    if (rc == 0)
        rc = manifest_yaml(docs, &yaml, &len, &err);
    json_decref(docs);
    json_decref(info);
    free(pinned);
    if (rc)
        return mfc_report(ctx, &err);
    fwrite(yaml, 1, len, ctx->out);
    free(yaml);
    return 0;
}
