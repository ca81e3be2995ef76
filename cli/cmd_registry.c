/*
 * cmd_registry.c: `mfc push`, `mfc pull`, `mfc login`, `mfc logout`.
 *
 * Thin: parse options, open the store at $MFC_HOME, call registry/registry.h,
 * print one summary line. A password comes only from stdin (--password-stdin,
 * or typed at a terminal without echo), never from argv, and is never printed.
 */
#include "config.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <unistd.h>

#include "common/num.h"
#include "cli/cli.h"
#include "fetch/fetch.h"
#include "registry/registry.h"
#include "store/store.h"

/* Options every registry command shares. */
struct reg_cli {
    struct registry_opts o;  /* what registry.h gets */
    enum progress_mode mode; /* --progress (push, pull) */
    struct mf_err err;       /* the failure to report */
};

static int open_store(struct store **s, struct mf_err *err)
{
    char *root = NULL;
    int rc = store_default_root(&root, err);
    if (rc == 0)
        rc = store_open(s, root, err);
    free(root);
    return rc;
}

/* MFC_PUSH_CHUNK_SIZE (bytes) overrides the chunked-upload threshold, so
 * tests exercise PATCH uploads without multi-MB blobs. */
static void reg_cli_init(struct reg_cli *r)
{
    registry_opts_init(&r->o);
    uint64_t v = 0;
    const char *cs = getenv("MFC_PUSH_CHUNK_SIZE");
    if (cs && mf_num_parse_u64(cs, &v) == 0 && v > 0)
        r->o.chunk_size = v;
    r->mode = PROGRESS_AUTO;
    mf_err_clear(&r->err);
}

static const struct option xfer_opts[] = {{"insecure", no_argument, NULL, 'k'},
                                          {"progress", required_argument, NULL, 'p'},
                                          {"quiet", no_argument, NULL, 'q'},
                                          {"help", no_argument, NULL, 'h'},
                                          {NULL, 0, NULL, 0}};

/* Parses --insecure/--help; returns -1 to go on, else an exit status. */
static int xfer_args(int argc, char **argv, struct mfc_ctx *ctx, struct reg_cli *r,
                     const char *usage)
{
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "hq", xfer_opts, NULL)) != -1) {
        if (c == 'h')
            return fputs(usage, ctx->out), 0;
        if (c == 'k')
            r->o.insecure = 1;
        else if (c == 'q')
            r->mode = PROGRESS_QUIET;
        else if (c == 'p' && progress_parse_mode(optarg, &r->mode, &r->err) != 0)
            return mfc_usage_error(ctx, argv[0], "%s", r->err.msg);
        else if (c != 'p')
            return mfc_usage_error(ctx, argv[0], "unknown option '%s'", argv[optind - 1]);
    }
    return -1;
}

/* "VERB REF DIGEST" to line, the blob counts to ctx->err. */
static void summary(struct mfc_ctx *ctx, FILE *line, const char *verb, const char *ref,
                    const char *digest, const struct registry_stats *st)
{
    fprintf(line, "%s %s %s\n", verb, ref, digest);
    fprintf(ctx->err,
                "blobs: %llu uploaded (%llu PUT, %llu PATCH, %llu bytes), %llu present, "
                "%llu mounted, %llu downloaded (%llu bytes)",
                (unsigned long long)st->blobs_uploaded, (unsigned long long)st->blob_puts,
                (unsigned long long)st->blob_patches, (unsigned long long)st->bytes_up,
                (unsigned long long)st->blobs_present, (unsigned long long)st->blobs_mounted,
                (unsigned long long)st->blobs_fetched, (unsigned long long)st->bytes_down);
    fputc('\n', ctx->err);
}

static const char push_usage[] =
    "Usage: mfc push [--insecure] [--progress=MODE] NAME[:TAG] [REF]\n\n"
    "Push an image from the store to a registry (REF defaults to NAME[:TAG]).\n"
    "  --insecure       allow https without certificate checks, or plain http\n"
    "                   (localhost and 127.0.0.1 use http without it)\n"
    "  --progress=MODE  auto, tty, plain, json or quiet (each blob's bytes; -q: quiet)\n";

/* push and pull differ only in direction: which argument is the store's
 * name, which call moves the bytes, and the verb of the summary. */
struct xfer_cmd {
    const char *name;  /* "push" or "pull" */
    const char *usage; /* full --help text */
    const char *args;  /* what the positional arguments are, for usage errors */
    int push;          /* 1: argv = NAME [REF]; 0: argv = REF [NAME] */
};

/* After `mfc push NAME REF`, REF is also a tag of the image in the store, as
 * docker's push needs it to be: mfc manifest then finds the name a cluster
 * can pull. Best effort: a name that is no valid tag is skipped. */
static void record_pushed(struct store *s, const char *local, const char *remote)
{
    struct store_tag t;
    struct mf_err ignored;
    if (strcmp(local, remote) != 0 && store_tag_valid(remote) &&
        store_tag_get(s, local, &t, &ignored) == 0)
        store_tag_set(s, remote, &t.desc, t.created, &ignored);
}

static int xfer(int argc, char **argv, struct mfc_ctx *ctx, const struct xfer_cmd *c)
{
    struct reg_cli r;
    reg_cli_init(&r);
    int st = xfer_args(argc, argv, ctx, &r, c->usage);
    if (st >= 0)
        return st;
    if (optind != argc - 1 && optind != argc - 2)
        return mfc_usage_error(ctx, c->name, "expects %s", c->args);
    const char *first = argv[optind], *second = optind + 1 < argc ? argv[optind + 1] : NULL;
    const char *local = c->push ? first : second, *remote = c->push ? second : first;
    struct registry_stats stats = {0};
    char digest[STORE_DIGEST_BUF];
    struct store *s = NULL;
    int rc = fetch_global_init(&r.err);
    if (rc == 0)
        rc = open_store(&s, &r.err);
    /* each blob's bytes, size, rate and ETA (a bar on a tty) */
    if (rc == 0 && r.mode != PROGRESS_QUIET)
        rc = progress_open(&r.o.progress, ctx->err, r.mode, &r.err);
    if (rc == 0)
        rc = c->push ? registry_push(s, local, remote, &r.o, &stats, digest, &r.err)
                     : registry_pull(s, remote, local, &r.o, &stats, digest, &r.err);
    progress_close(r.o.progress);
    if (rc == 0 && c->push && remote)
        record_pushed(s, local, remote);
    store_close(s);
    fetch_global_cleanup();
    if (rc)
        return mfc_report(ctx, &r.err);
    summary(ctx, ctx->out, c->push ? "Pushed" : "Pulled", second ? second : first, digest,
            &stats);
    return 0;
}

int mfc_push_stored(struct mfc_ctx *ctx, struct store *s, const char *local, const char *remote,
                    int insecure, FILE *line)
{
    struct reg_cli r;
    reg_cli_init(&r);
    r.o.insecure = insecure;
    struct registry_stats stats = {0};
    char digest[STORE_DIGEST_BUF];
    if (registry_push(s, local, remote, &r.o, &stats, digest, &r.err) != 0)
        return mfc_report(ctx, &r.err), 1;
    if (line)
        summary(ctx, line, "Pushed", remote, digest, &stats);
    return 0;
}

int mfc_pull_missing(struct mfc_ctx *ctx, const char *root, const char *ref, struct mf_err *err)
{
    struct registry_ref rr;
    struct reg_cli r;
    struct mf_err ignored;
    struct registry_stats stats = {0};
    char digest[STORE_DIGEST_BUF];
    struct store *s = NULL;
    size_t n = strlen(ref);
    /* a path or a GGUF name is a missing file, not an image to pull */
    if (strchr("./~", ref[0]) || (n > 5 && strcmp(ref + n - 5, ".gguf") == 0) ||
        registry_ref_parse(ref, &rr, &ignored) != 0)
        return err->code ? err->code : MF_ENOTFOUND;
    reg_cli_init(&r);
    fprintf(ctx->err, "%s is not in the store; pulling it from %s\n", ref, rr.domain);
    int rc = fetch_global_init(&r.err);
    if (rc == 0)
        rc = store_open(&s, root, &r.err);
    if (rc == 0)
        rc = progress_open(&r.o.progress, ctx->err, PROGRESS_AUTO, &r.err);
    if (rc == 0)
        rc = registry_pull(s, ref, NULL, &r.o, &stats, digest, &r.err);
    progress_close(r.o.progress);
    store_close(s);
    fetch_global_cleanup();
    if (rc)
        return mf_err_set(err, rc, "%s is not in the store, and pulling it failed: %s", ref,
                          r.err.msg);
    fprintf(ctx->err, "pulled %s %s\n", ref, digest);
    return 0;
}

int mfc_cmd_push(int argc, char **argv, struct mfc_ctx *ctx)
{
    static const struct xfer_cmd c = {"push", push_usage, "NAME[:TAG] and an optional REF", 1};
    return xfer(argc, argv, ctx, &c);
}

static const char pull_usage[] =
    "Usage: mfc pull [--insecure] [--progress=MODE] REF [NAME]\n\n"
    "Pull an image (linux/amd64 from an index) into the store, verifying every digest,\n"
    "and tag it NAME (default REF as written).\n"
    "  --insecure       allow https without certificate checks, or plain http\n"
    "  --progress=MODE  auto, tty, plain, json or quiet (each blob's bytes; -q: quiet)\n";

int mfc_cmd_pull(int argc, char **argv, struct mfc_ctx *ctx)
{
    static const struct xfer_cmd c = {"pull", pull_usage, "REF and an optional NAME", 0};
    return xfer(argc, argv, ctx, &c);
}

/* Reads one line of at most cap - 1 bytes; without echo when stdin is a terminal. */
static int read_secret(char *buf, size_t cap, struct mfc_ctx *ctx)
{
    struct termios old, quiet;
    int tty = isatty(0) && tcgetattr(0, &old) == 0;
    if (tty) {
        fputs("Password: ", ctx->err);
        fflush(ctx->err);
        quiet = old;
        quiet.c_lflag &= ~(tcflag_t)ECHO;
        tcsetattr(0, TCSAFLUSH, &quiet);
    }
    char *got = fgets(buf, (int)cap, stdin);
    if (tty) {
        tcsetattr(0, TCSAFLUSH, &old);
        fputc('\n', ctx->err);
    }
    if (!got)
        return -1;
    buf[strcspn(buf, "\r\n")] = '\0';
    return 0;
}

static const char login_usage[] =
    "Usage: mfc login -u USER [--password-stdin] [--insecure] REGISTRY\n\n"
    "Check credentials against REGISTRY and store them (mode 0600) in\n"
    "$REGISTRY_AUTH_FILE if set (podman's auth.json), else $DOCKER_CONFIG/config.json\n"
    "if $DOCKER_CONFIG is set, else ~/.docker/config.json: the files docker and podman\n"
    "read, so either can use the login. The password is read from stdin (typed without\n"
    "echo at a terminal), never from the command line. A wrong password is refused\n"
    "and nothing is stored.\n";

int mfc_cmd_login(int argc, char **argv, struct mfc_ctx *ctx)
{
    static const struct option opts[] = {{"username", required_argument, NULL, 'u'},
                                         {"password-stdin", no_argument, NULL, 'P'},
                                         {"insecure", no_argument, NULL, 'k'},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    struct reg_cli r;
    reg_cli_init(&r);
    const char *user = NULL;
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "hu:", opts, NULL)) != -1) {
        if (c == 'h')
            return fputs(login_usage, ctx->out), 0;
        if (c == 'u')
            user = optarg;
        else if (c == 'k')
            r.o.insecure = 1;
        else if (c != 'P')
            return mfc_usage_error(ctx, "login", "unknown option '%s'", argv[optind - 1]);
    }
    if (optind != argc - 1 || !user)
        return mfc_usage_error(ctx, "login", "expects -u USER and one REGISTRY");
    char secret[REGISTRY_SECRET_MAX];
    if (read_secret(secret, sizeof secret, ctx) != 0 || !secret[0])
        return mfc_usage_error(ctx, "login", "no password on stdin");
    int rc = fetch_global_init(&r.err);
    if (rc == 0)
        rc = registry_login(&r.o, argv[optind], user, secret, &r.err);
    memset(secret, 0, sizeof secret);
    fetch_global_cleanup();
    if (rc)
        return mfc_report(ctx, &r.err);
    fprintf(ctx->out, "Login Succeeded\n");
    return 0;
}

static const char logout_usage[] = "Usage: mfc logout REGISTRY\n\n"
                                   "Remove the stored credentials for REGISTRY.\n";

int mfc_cmd_logout(int argc, char **argv, struct mfc_ctx *ctx)
{
    struct reg_cli r;
    reg_cli_init(&r);
    if (argc == 2 && strcmp(argv[1], "--help") == 0)
        return fputs(logout_usage, ctx->out), 0;
    if (argc != 2)
        return mfc_usage_error(ctx, "logout", "expects one REGISTRY");
    if (registry_logout(&r.o, argv[1], &r.err) != 0)
        return mfc_report(ctx, &r.err);
    fprintf(ctx->out, "Removed login credentials for %s\n", argv[1]);
    return 0;
}
