/*
 * cmd_fetch.c: `mfc fetch [OPTIONS] SOURCE...`: bring model sources into the
 * store ahead of a build, the way FROM and ADAPTER will.
 *
 * Each SOURCE is resolved (fetch/fetch.h: path, directory, URL, hf://)
 * and fetched; stdout gets one line per source, "<digest> <bytes> <source>",
 * for scripts. Progress goes to stderr (--progress). A source that fails
 * does not stop the others; the exit status is 1 if any failed.
 */
#include "config.h"

#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/num.h"
#include "cli/cli.h"
#include "fetch/fetch.h"
#include "common/progress.h"
#include "store/store.h"

struct fetch_cli {
    struct fetch_opts fo;    /* options for every source */
    enum progress_mode mode; /* --progress */
};

static void usage(FILE *f)
{
    fputs("Usage: mfc fetch [OPTIONS] SOURCE...\n\n"
          "Fetch model sources into the store ($MFC_HOME) and print\n"
          "\"<digest> <bytes> <source>\" for each. SOURCE is what FROM and ADAPTER take:\n"
          "  ./model.gguf, /abs/path.gguf, ~/m.gguf   a local file\n"
          "  ./dir                                    a directory holding exactly one .gguf\n"
          "  https://host/x.gguf                      a download (resumed, retried)\n"
          "  hf://owner/repo[@revision]/path.gguf     a file on the Hugging Face Hub\n"
          "  SOURCE@sha256:<hex>                      pinned: the content must match\n\n"
          "  --checksum=sha256:<hex>   pin the content (one SOURCE only)\n"
          "  --progress=MODE           auto, tty, plain, json or quiet (default auto)\n"
          "  --retries=N               retries of a download that makes no progress (4)\n"
          "  --retry-delay=MS          first retry delay, doubled each time (500)\n\n"
          "Environment: MFC_HOME (the store), HF_ENDPOINT (hf:// base URL),\n"
          "HF_TOKEN (bearer token for hf://).\n",
          f);
}

static int parse_long(const char *s, long min, long max, long *out)
{
    int64_t v;
    if (mf_num_parse_i64(s, &v) != 0 || v < min || v > max)
        return -1;
    *out = (long)v;
    return 0;
}

/* Returns -1 to go on, or the exit status. */
static int parse_opts(int argc, char **argv, struct mfc_ctx *ctx, struct fetch_cli *cli)
{
    static const struct option opts[] = {{"help", no_argument, NULL, 'h'},
                                         {"checksum", required_argument, NULL, 'c'},
                                         {"progress", required_argument, NULL, 'p'},
                                         {"retries", required_argument, NULL, 'r'},
                                         {"retry-delay", required_argument, NULL, 'd'},
                                         {NULL, 0, NULL, 0}};
    struct mf_err err;
    long v;
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'h':
            usage(ctx->out);
            return 0;
        case 'c':
            cli->fo.checksum = optarg;
            break;
        case 'p':
            if (progress_parse_mode(optarg, &cli->mode, &err) != 0)
                return mfc_usage_error(ctx, "fetch", "%s", err.msg);
            break;
        case 'r':
            if (parse_long(optarg, 0, 100, &v) != 0)
                return mfc_usage_error(ctx, "fetch", "--retries takes 0 to 100");
            cli->fo.retries = (int)v;
            break;
        case 'd':
            if (parse_long(optarg, 0, 600000, &cli->fo.retry_base_ms) != 0)
                return mfc_usage_error(ctx, "fetch", "--retry-delay takes 0 to 600000 ms");
            break;
        default:
            return mfc_usage_error(ctx, "fetch", "unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind >= argc)
        return mfc_usage_error(ctx, "fetch", "no SOURCE given");
    if (cli->fo.checksum && argc - optind > 1)
        return mfc_usage_error(
            ctx, "fetch", "--checksum applies to one SOURCE; pin several with SOURCE@sha256:<hex>");
    return -1;
}

/* Resolves and fetches one source; prints its line or reports the error. */
static int fetch_one(struct mfc_ctx *ctx, struct store *s, const char *ref,
                     const struct fetch_opts *fo)
{
    struct fetch_source src;
    struct fetch_result r;
    struct mf_err err;
    int rc = fetch_resolve(ref, fo, &src, &err);
    if (!rc)
        rc = fetch_run(s, &src, fo, &r, &err);
    if (!rc)
        fprintf(ctx->out, "%s %" PRIu64 " %s\n", r.digest, r.size, src.display);
    fetch_source_fini(&src);
    return rc ? mfc_report(ctx, &err) : 0;
}

static int run_all(struct mfc_ctx *ctx, int first, int argc, char **argv, struct fetch_cli *cli)
{
    struct mf_err err;
    struct store *s = NULL;
    struct progress *p = NULL;
    char *root = NULL;
    int rc = store_default_root(&root, &err);
    if (!rc)
        rc = store_open(&s, root, &err);
    if (!rc)
        rc = progress_open(&p, ctx->err, cli->mode, &err);
    free(root);
    if (rc) {
        store_close(s);
        return mfc_report(ctx, &err);
    }
    cli->fo.progress = p;
    int st = 0;
    for (int i = first; i < argc; i++) {
        int e = fetch_one(ctx, s, argv[i], &cli->fo);
        st = st ? st : e;
    }
    progress_close(p);
    store_close(s);
    return st;
}

int mfc_cmd_fetch(int argc, char **argv, struct mfc_ctx *ctx)
{
    struct fetch_cli cli = {.mode = PROGRESS_AUTO};
    struct mf_err err;
    fetch_opts_init(&cli.fo);
    cli.fo.user_agent = "mfc/" PACKAGE_VERSION;
    int st = parse_opts(argc, argv, ctx, &cli);
    if (st >= 0)
        return st;
    if (fetch_global_init(&err) != 0)
        return mfc_report(ctx, &err);
    st = run_all(ctx, optind, argc, argv, &cli);
    fetch_global_cleanup();
    return st;
}
