/*
 * cmd_image.c: `mfc save`, `mfc load`, and `mfc inspect IMAGE` (reached from
 * cmd_inspect.c when the argument is not a file).
 *
 * Thin: parse options, open the store at $MFC_HOME, call image/oci.h,
 * print. Nothing here knows about tar or JSON layouts.
 */
#include "config.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/json.h"
#include "cli/cli.h"
#include "cli/run.h"
#include "convert/lora.h"
#include "image/oci.h"
#include "store/store.h"

static int open_default_store(struct store **s, struct mf_err *err)
{
    char *root = NULL;
    int rc = store_default_root(&root, err);
    if (rc == 0)
        rc = store_open(s, root, err);
    free(root);
    return rc;
}

static const char save_usage[] =
    "Usage: mfc save [--output SPEC | -o FILE] [--name NAME] IMAGE\n\n"
    "Write an image from the store to an archive or an OCI layout directory.\n"
    "  -o, --output SPEC  FILE.tar (docker+OCI archive), DIR (OCI layout), or\n"
    "                     type=oci,dest=DIR|FILE.tar / type=docker,dest=FILE.tar\n"
    "      --name NAME    the name the image gets in the output (default IMAGE)\n";

int mfc_cmd_save(int argc, char **argv, struct mfc_ctx *ctx)
{
    static const struct option opts[] = {{"output", required_argument, NULL, 'o'},
                                         {"name", required_argument, NULL, 'n'},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    const char *spec = NULL, *name = NULL;
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "ho:", opts, NULL)) != -1) {
        if (c == 'h')
            return fputs(save_usage, ctx->out), 0;
        if (c == 'o')
            spec = optarg;
        else if (c == 'n')
            name = optarg;
        else
            return mfc_usage_error(ctx, "save", "unknown option '%s'", argv[optind - 1]);
    }
    if (optind != argc - 1 || !spec)
        return mfc_usage_error(ctx, "save", "expects one IMAGE and -o");
    struct mf_err err;
    struct oci_output o;
    struct store *s = NULL;
    int rc = oci_output_parse(spec, &o, &err);
    if (rc == 0)
        rc = open_default_store(&s, &err);
    if (rc == 0)
        rc = oci_export(s, argv[optind], name, &o, &err);
    store_close(s);
    return rc ? mfc_report(ctx, &err) : 0;
}

static const char load_usage[] =
    "Usage: mfc load -i FILE.tar [-t NAME]\n\n"
    "Load an OCI layout tar or a docker archive into the store, verifying every digest.\n"
    "  -i, --input FILE  the archive\n"
    "  -t, --tag NAME    tag the (single) image NAME instead of the archive's name\n";

int mfc_cmd_load(int argc, char **argv, struct mfc_ctx *ctx)
{
    static const struct option opts[] = {{"input", required_argument, NULL, 'i'},
                                         {"tag", required_argument, NULL, 't'},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    const char *in = NULL, *tag = NULL;
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "hi:t:", opts, NULL)) != -1) {
        if (c == 'h')
            return fputs(load_usage, ctx->out), 0;
        if (c == 'i')
            in = optarg;
        else if (c == 't')
            tag = optarg;
        else
            return mfc_usage_error(ctx, "load", "unknown option '%s'", argv[optind - 1]);
    }
    if (optind != argc || !in)
        return mfc_usage_error(ctx, "load", "expects -i FILE.tar and no other arguments");
    struct mf_err err;
    struct store *s = NULL;
    size_t n = 0;
    int rc = open_default_store(&s, &err);
    if (rc == 0)
        rc = oci_load(s, in, tag, &n, &err);
    store_close(s);
    if (rc)
        return mfc_report(ctx, &err);
    fprintf(ctx->out, "Loaded %zu image%s from %s\n", n, n == 1 ? "" : "s", in);
    return 0;
}

/* v["adapters"]: the image's adapters with name, scale, rank, alpha
 * (cli/lora_image.c); left out for an image that is not an mfc model
 * image (no /models/model.gguf layer), which inspect still shows. */
static void inspect_adapters(const char *ref, json_t *v)
{
    char *root = NULL;
    json_t *list = NULL;
    struct mf_err ignored;
    json_t *draft = NULL;
    if (store_default_root(&root, &ignored) == 0 &&
        lora_image_adapters(root, ref, v, &list, &ignored) == 0)
        json_object_set_new(v, "adapters", list);
    if (root && draft_image_describe(root, ref, &draft, &ignored) == 0 && draft)
        json_object_set_new(v, "draft", draft);
    free(root);
}

int mfc_image_inspect(const char *ref, struct mfc_ctx *ctx)
{
    struct mf_err err;
    struct store *s = NULL;
    json_t *v = NULL;
    int rc = open_default_store(&s, &err);
    if (rc == 0)
        rc = oci_inspect(s, ref, &v, &err);
    store_close(s);
    if (rc)
        return mfc_report(ctx, &err);
    inspect_adapters(ref, v);
    json_dumpf(v, ctx->out, JSON_INDENT(2) | JSON_SORT_KEYS);
    fputc('\n', ctx->out);
    json_decref(v);
    return 0;
}
