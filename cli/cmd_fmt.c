/*
 * cmd_fmt.c: `mfc fmt [-f FILE] [-w | --check] [PATH]`.
 *
 * Prints a Modelfile in canonical form (docs/modelfile.md, "Canonical
 * form"); -w replaces the file atomically (only when it changes), --check
 * only tells whether it is formatted (exit 1 when not). A file with errors
 * is not formatted. Exit status: 0 done, 1 errors or unformatted, 2 usage.
 */
#include "config.h"

#include <getopt.h>
#include <string.h>

#include "common/file.h"
#include "cli/cli.h"
#include "cli/cmd_modelfile.h"

static void usage(FILE *f)
{
    fprintf(f, "Usage: mfc fmt [-f FILE] [-w | --check] [PATH]\n\n"
               "Print a Modelfile in canonical form.\n\n"
               "  PATH              the Modelfile, or a directory holding one (default .)\n"
               "  -f, --file FILE   the Modelfile to read ('-' reads stdin)\n"
               "  -w, --write       rewrite the file in place (atomically)\n"
               "      --check       exit 1 if the file is not formatted; print nothing\n"
               "  -h, --help        show this help\n\n"
               "Exit status: 0 done, 1 invalid or not formatted, 2 usage error.\n");
}

/* Formats m's parse and writes, checks or prints it. */
static int run_fmt(struct mfc_ctx *ctx, struct cmd_modelfile *m, const struct mf_modelfile_opts *o,
                   int write, int check)
{
    struct mf_err err;
    struct mf_buf out;
    int rc;
    mf_buf_init(&out, 4 * (size_t)MF_MODELFILE_MAX_BYTES);
    rc = mf_modelfile_format(m->mf, o, &out, &err);
    int same = rc == 0 && out.len == m->len && memcmp(out.data, m->data, m->len) == 0;
    if (rc != 0)
        rc = mfc_report(ctx, &err);
    else if (check && !same)
        fprintf(ctx->err, "%s: not formatted (run: mfc fmt -w %s)\n", m->mf->name, m->path),
            rc = 1;
    else if (write && !same && mf_file_write_atomic(m->path, out.data, out.len, &err) != 0)
        rc = mfc_report(ctx, &err);
    else if (!write && !check && fwrite(out.data, 1, out.len, ctx->out) != out.len)
        rc = 1;
    mf_buf_free(&out);
    return rc;
}

int mfc_cmd_fmt(int argc, char **argv, struct mfc_ctx *ctx)
{
    static const struct option longopts[] = {{"file", required_argument, NULL, 'f'},
                                             {"write", no_argument, NULL, 'w'},
                                             {"check", no_argument, NULL, 'c'},
                                             {"help", no_argument, NULL, 'h'},
                                             {NULL, 0, NULL, 0}};
    struct mf_modelfile_opts opts = {.lenient_args = 1};
    struct cmd_modelfile m = {0};
    const char *file = NULL;
    int write = 0, check = 0, c;
    while ((c = getopt_long(argc, argv, "f:wh", longopts, NULL)) != -1) {
        if (c == 'f')
            file = optarg;
        else if (c == 'w')
            write = 1;
        else if (c == 'c')
            check = 1;
        else if (c == 'h')
            return usage(ctx->out), 0;
        else
            return mfc_usage_error(ctx, "fmt", "unknown option");
    }
    if (write && check)
        return mfc_usage_error(ctx, "fmt", "-w and --check do not go together");
    int rc = cmd_modelfile_resolve(ctx, "fmt", file, argc - optind, argv + optind, &m);
    if (rc == 0 && write && strcmp(m.path, "-") == 0)
        rc = mfc_usage_error(ctx, "fmt", "-w cannot rewrite stdin");
    if (rc == 0)
        rc = cmd_modelfile_load(ctx, &opts, 0, &m);
    if (rc == 0)
        rc = run_fmt(ctx, &m, &opts, write, check);
    cmd_modelfile_fini(&m);
    return rc;
}
