/*
 * cmd_store.c: the store commands: `mfc images`, `mfc tag`, `mfc rmi`,
 * `mfc prune` and `mfc du`.
 *
 * Thin: each parses its options, opens the store at $MFC_HOME (default
 * ~/.local/share/mfc) and prints what store/store.h returns. Tables go to
 * stdout, errors to stderr; --json output is for scripts and tests.
 */
#include "config.h"

#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/json.h"
#include "cli/cli.h"
#include "common/progress.h"
#include "store/store.h"

/* Opens the default store; returns 0 or the exit status after reporting. */
static int open_store(struct mfc_ctx *ctx, struct store **s)
{
    struct mf_err err;
    char *root = NULL;
    int rc = store_default_root(&root, &err);
    if (!rc)
        rc = store_open(s, root, &err);
    free(root);
    return rc ? mfc_report(ctx, &err) : 0;
}

/* Parses the options every store command shares (--help, and --json where
 * json is not NULL), checks the argument count, and opens the store.
 * Returns -1 with *s open to go on, or the exit status to return. */
static int start(int argc, char **argv, struct mfc_ctx *ctx, const char *usage, int *json,
                 int min_args, int max_args, struct store **s)
{
    static const struct option opts[] = {
        {"help", no_argument, NULL, 'h'}, {"json", no_argument, NULL, 'j'}, {NULL, 0, NULL, 0}};
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        if (c == 'h') {
            fputs(usage, ctx->out);
            return 0;
        }
        if (c == 'j' && json) {
            *json = 1;
            continue;
        }
        return mfc_usage_error(ctx, argv[0], "unknown option '%s'", argv[optind - 1]);
    }
    int n = argc - optind;
    if (n < min_args || n > max_args)
        return mfc_usage_error(ctx, argv[0],
                               n < min_args ? "missing arguments" : "too many arguments");
    int st = open_store(ctx, s);
    return st ? st : -1;
}

/* ---- mfc images ------------------------------------------------------------------- */

/* Bytes of an image: the manifest and what it references; -1 when unreadable. */
static int64_t image_size(struct store *s, const struct store_desc *d)
{
    char *text = NULL;
    size_t len = 0, n = 0;
    struct store_desc *refs = NULL;
    if (store_blob_read(s, d->digest, STORE_MANIFEST_MAX, &text, &len, NULL) != 0)
        return -1;
    int64_t total = -1;
    if (store_oci_manifest_refs(text, len, d->media_type, d->digest, &refs, &n, NULL) == 0) {
        total = (int64_t)len;
        for (size_t i = 0; i < n; i++)
            total += (int64_t)refs[i].size;
    }
    free(refs);
    free(text);
    return total;
}

static void images_json(struct mfc_ctx *ctx, struct store *s, const struct store_tag *t, size_t n)
{
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++) {
        int64_t size = image_size(s, &t[i].desc);
        json_array_append_new(arr, json_pack("{s:s, s:s, s:s, s:I, s:s?}", "tag", t[i].name,
                                             "digest", t[i].desc.digest, "mediaType",
                                             t[i].desc.media_type, "size", (json_int_t)size,
                                             "created", t[i].created[0] ? t[i].created : NULL));
    }
    char *text = json_dumps(arr, JSON_INDENT(2));
    if (text)
        fprintf(ctx->out, "%s\n", text);
    free(text);
    json_decref(arr);
}

static void images_table(struct mfc_ctx *ctx, struct store *s, const struct store_tag *t, size_t n)
{
    size_t w = 3;
    for (size_t i = 0; i < n; i++)
        w = strlen(t[i].name) > w ? strlen(t[i].name) : w;
    fprintf(ctx->out, "%-*s  %-12s  %10s  %s\n", (int)w, "TAG", "DIGEST", "SIZE", "CREATED");
    for (size_t i = 0; i < n; i++) {
        char size[32] = "-";
        int64_t bytes = image_size(s, &t[i].desc);
        if (bytes >= 0)
            progress_fmt_bytes((uint64_t)bytes, size, sizeof size);
        fprintf(ctx->out, "%-*s  %.12s  %10s  %s\n", (int)w, t[i].name, t[i].desc.digest + 7, size,
                t[i].created[0] ? t[i].created : "-");
    }
}

int mfc_cmd_images(int argc, char **argv, struct mfc_ctx *ctx)
{
    int json = 0;
    struct store *s;
    int st = start(argc, argv, ctx,
                   "Usage: mfc images [--json]\n\n"
                   "List the tagged images in the store ($MFC_HOME): tag, digest, size\n"
                   "(manifest, config and layers) and creation time.\n",
                   &json, 0, 0, &s);
    if (st >= 0)
        return st;
    st = 0;
    struct mf_err err;
    struct store_tag *tags = NULL;
    size_t n = 0;
    st = store_tag_list(s, &tags, &n, &err) ? mfc_report(ctx, &err) : 0;
    if (!st && json)
        images_json(ctx, s, tags, n);
    else if (!st)
        images_table(ctx, s, tags, n);
    free(tags);
    store_close(s);
    return st;
}

/* ---- mfc tag ---------------------------------------------------------------------- */

/* Finds what SRC (a tag, or a digest some tag points at) names. */
static int find_source(struct store *s, const char *src, struct store_tag *out, struct mf_err *err)
{
    if (!store_digest_valid(src))
        return store_tag_get(s, src, out, err);
    struct store_tag *tags = NULL;
    size_t n = 0;
    int rc = store_tag_list(s, &tags, &n, err);
    if (!rc)
        rc = mf_err_set(err, MF_ENOTFOUND, "no image with digest %s in the store", src);
    for (size_t i = 0; i < n && rc == MF_ENOTFOUND; i++)
        if (strcmp(tags[i].desc.digest, src) == 0) {
            *out = tags[i];
            rc = 0;
        }
    free(tags);
    return rc;
}

int mfc_cmd_tag(int argc, char **argv, struct mfc_ctx *ctx)
{
    struct store *s;
    int st = start(argc, argv, ctx,
                   "Usage: mfc tag SOURCE TARGET\n\n"
                   "Give the image SOURCE (a tag or a digest) the additional tag TARGET.\n"
                   "An existing TARGET is moved.\n",
                   NULL, 2, 2, &s);
    if (st >= 0)
        return st;
    const char *src = argv[optind], *dst = argv[optind + 1];
    struct mf_err err;
    struct store_tag t;
    if (!store_tag_valid(dst)) {
        st = mfc_usage_error(
            ctx, "tag",
            "'%s' is not a valid tag (letters, digits and -._:@+ between them, / between parts)",
            dst);
    } else if (find_source(s, src, &t, &err) != 0 ||
               store_tag_set(s, dst, &t.desc, t.created, &err) != 0) {
        st = mfc_report(ctx, &err);
    } else {
        st = 0;
    }
    store_close(s);
    return st;
}

/* ---- mfc rmi ---------------------------------------------------------------------- */

/* Untags NAME, or every tag of a digest. */
static int untag(struct mfc_ctx *ctx, struct store *s, const char *name, struct mf_err *err)
{
    if (!store_digest_valid(name)) {
        int rc = store_tag_remove(s, name, err);
        if (!rc)
            fprintf(ctx->out, "Untagged: %s\n", name);
        return rc;
    }
    struct store_tag *tags = NULL;
    size_t n = 0, removed = 0;
    int rc = store_tag_list(s, &tags, &n, err);
    for (size_t i = 0; !rc && i < n; i++) {
        if (strcmp(tags[i].desc.digest, name) != 0)
            continue;
        rc = store_tag_remove(s, tags[i].name, err);
        if (!rc) {
            fprintf(ctx->out, "Untagged: %s\n", tags[i].name);
            removed++;
        }
    }
    free(tags);
    if (!rc && !removed)
        rc = mf_err_set(err, MF_ENOTFOUND, "no image with digest %s in the store", name);
    return rc;
}

int mfc_cmd_rmi(int argc, char **argv, struct mfc_ctx *ctx)
{
    struct store *s;
    int st = start(argc, argv, ctx,
                   "Usage: mfc rmi NAME...\n\n"
                   "Remove tags (or, for a digest, every tag of that image). The blobs\n"
                   "stay until 'mfc prune' finds nothing else uses them.\n",
                   NULL, 1, 1 << 20, &s);
    if (st >= 0)
        return st;
    st = 0;
    for (int i = optind; i < argc; i++) {
        struct mf_err err;
        if (untag(ctx, s, argv[i], &err) != 0) {
            int e = mfc_report(ctx, &err);
            st = st ? st : e;
        }
    }
    store_close(s);
    return st;
}

/* ---- mfc prune -------------------------------------------------------------------- */

struct prune_out {
    struct mfc_ctx *ctx; /* borrowed */
    int dry;             /* nonzero: "would remove" */
};

static void on_removed(void *arg, const char *kind, const char *name, uint64_t bytes)
{
    struct prune_out *p = arg;
    char size[32];
    progress_fmt_bytes(bytes, size, sizeof size);
    fprintf(p->ctx->out, "%s %s %s (%s)\n", p->dry ? "would remove" : "removed", kind, name, size);
}

static int prune_opts(int argc, char **argv, struct mfc_ctx *ctx, unsigned *flags)
{
    static const struct option opts[] = {{"help", no_argument, NULL, 'h'},
                                         {"dry-run", no_argument, NULL, 'n'},
                                         {"all", no_argument, NULL, 'a'},
                                         {NULL, 0, NULL, 0}};
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "hna", opts, NULL)) != -1) {
        if (c == 'n') {
            *flags |= STORE_GC_DRY_RUN;
        } else if (c == 'a') {
            *flags |= STORE_GC_ALL;
        } else if (c == 'h') {
            fputs("Usage: mfc prune [--dry-run] [--all]\n\n"
                  "Remove blobs no tag and no build-cache record references, and files\n"
                  "left by interrupted writes. Prints what goes and the bytes freed.\n\n"
                  "  -n, --dry-run  only report what would be removed\n"
                  "  -a, --all      also drop the build cache, partial downloads and the\n"
                  "                 stat cache (the next build starts cold)\n",
                  ctx->out);
            return 0;
        } else {
            return mfc_usage_error(ctx, "prune", "unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc)
        return mfc_usage_error(ctx, "prune", "takes no arguments");
    return -1;
}

int mfc_cmd_prune(int argc, char **argv, struct mfc_ctx *ctx)
{
    unsigned flags = 0;
    int st = prune_opts(argc, argv, ctx, &flags);
    if (st >= 0)
        return st;
    struct store *s;
    st = open_store(ctx, &s);
    if (st)
        return st;
    struct mf_err err;
    struct store_usage u;
    struct prune_out po = {ctx, (flags & STORE_GC_DRY_RUN) != 0};
    if (store_gc_run(s, flags, on_removed, &po, &u, &err) != 0) {
        st = mfc_report(ctx, &err);
    } else {
        uint64_t freed = u.unref_bytes + u.cache_bytes + u.tmp_bytes;
        char size[32];
        progress_fmt_bytes(freed, size, sizeof size);
        fprintf(ctx->out,
                "%s %s (%" PRIu64 " bytes): %" PRIu64 " blobs, %" PRIu64 " cache records, %" PRIu64
                " tmp files\n",
                po.dry ? "would free" : "freed", size, freed, u.unref_blobs, u.cache_records,
                u.tmp_files);
    }
    store_close(s);
    return st;
}

/* ---- mfc du ----------------------------------------------------------------------- */

static void du_row(struct mfc_ctx *ctx, const char *kind, uint64_t count, uint64_t bytes)
{
    char size[32];
    progress_fmt_bytes(bytes, size, sizeof size);
    fprintf(ctx->out, "%-22s %8" PRIu64 "  %10s  %" PRIu64 "\n", kind, count, size, bytes);
}

static void du_print(struct mfc_ctx *ctx, struct store *s, const struct store_usage *u, int json)
{
    uint64_t total = u->ref_bytes + u->unref_bytes + u->cache_bytes + u->tmp_bytes;
    if (json) {
        json_t *v = json_pack(
            "{s:s, s:{s:I, s:I}, s:{s:I, s:I}, s:{s:I, s:I}, s:{s:I, s:I}, s:I}", "root",
            store_root(s), "referenced", "count", (json_int_t)u->ref_blobs, "bytes",
            (json_int_t)u->ref_bytes, "unreferenced", "count", (json_int_t)u->unref_blobs, "bytes",
            (json_int_t)u->unref_bytes, "cache", "count", (json_int_t)u->cache_records, "bytes",
            (json_int_t)u->cache_bytes, "tmp", "count", (json_int_t)u->tmp_files, "bytes",
            (json_int_t)u->tmp_bytes, "total", (json_int_t)total);
        char *text = v ? json_dumps(v, JSON_INDENT(2)) : NULL;
        if (text)
            fprintf(ctx->out, "%s\n", text);
        free(text);
        json_decref(v);
        return;
    }
    fprintf(ctx->out, "store %s\n%-22s %8s  %10s  %s\n", store_root(s), "KIND", "COUNT", "SIZE",
            "BYTES");
    du_row(ctx, "blobs (referenced)", u->ref_blobs, u->ref_bytes);
    du_row(ctx, "blobs (unreferenced)", u->unref_blobs, u->unref_bytes);
    du_row(ctx, "build cache records", u->cache_records, u->cache_bytes);
    du_row(ctx, "tmp and partial files", u->tmp_files, u->tmp_bytes);
    du_row(ctx, "total", u->ref_blobs + u->unref_blobs + u->cache_records + u->tmp_files, total);
}

int mfc_cmd_du(int argc, char **argv, struct mfc_ctx *ctx)
{
    int json = 0;
    struct store *s;
    int st = start(argc, argv, ctx,
                   "Usage: mfc du [--json]\n\n"
                   "Show the store's disk use: blobs that tags or the build cache\n"
                   "reference, blobs 'mfc prune' would remove, cache records, and\n"
                   "tmp files (interrupted writes, resumable downloads).\n",
                   &json, 0, 0, &s);
    if (st >= 0)
        return st;
    st = 0;
    struct mf_err err;
    struct store_usage u;
    if (store_gc_usage(s, &u, &err) != 0)
        st = mfc_report(ctx, &err);
    else
        du_print(ctx, s, &u, json);
    store_close(s);
    return st;
}
