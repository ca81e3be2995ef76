/*
 * cmd_check.c: `mfc check [-f FILE] [--json] [--build-arg K=V]... [PATH]`.
 *
 * Validates a Modelfile (docs/modelfile.md) and prints what it parsed: one
 * line per instruction, or with --json the whole parse as JSON (also when
 * the file has errors). Diagnostics go to stderr. Exit status: 0 valid
 * (warnings allowed), 1 errors or unreadable, 2 usage.
 */
#include "config.h"

#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "common/json.h"
#include "cli/cli.h"
#include "cli/cmd_modelfile.h"

#define PREVIEW 60 /* characters of a long value shown in the summary */

static void usage(FILE *f)
{
    fprintf(f, "Usage: mfc check [-f FILE] [--json] [--build-arg NAME=VALUE]... [PATH]\n\n"
               "Check a Modelfile and print the instructions it holds.\n\n"
               "  PATH                  the Modelfile, or a directory holding one (default .)\n"
               "  -f, --file FILE       the Modelfile to read ('-' reads stdin)\n"
               "      --json            print the parsed file as JSON\n"
               "      --build-arg N=V   a value for ARG N (N alone: from the environment)\n"
               "  -h, --help            show this help\n\n"
               "Exit status: 0 valid, 1 invalid, 2 usage error.\n");
}

/* s quoted, newlines shown as \n, cut after PREVIEW characters. */
static void preview(FILE *f, const char *s)
{
    size_t lines = 1, shown = 0;
    fputc('"', f);
    for (const char *p = s; *p; p++) {
        lines += *p == '\n';
        if (shown >= PREVIEW)
            continue;
        if (*p == '\n' || *p == '\r' || *p == '\t')
            fprintf(f, "\\%c", *p == '\n' ? 'n' : *p == '\r' ? 'r' : 't');
        else
            fputc(*p, f);
        shown += ((unsigned char)*p & 0xC0) != 0x80;
    }
    fprintf(f, "%s\"", shown >= PREVIEW ? "..." : "");
    if (lines > 1)
        fprintf(f, " (%zu lines)", lines);
}

static void show_source(FILE *f, const struct mf_source *s)
{
    fprintf(f, "%s", s->ref);
    if (s->digest)
        fprintf(f, " @%.19s...", s->digest);
    if (s->name)
        fprintf(f, " name=%s", s->name);
    if (s->has_scale)
        fprintf(f, " scale=%g", s->scale);
    if (s->merge)
        fprintf(f, " merge");
}

static void show_param(FILE *f, const struct mf_param *pm)
{
    fprintf(f, "%s = ", pm->name);
    switch (pm->type) {
    case MF_PARAM_INT: fprintf(f, "%lld", (long long)pm->i); break;
    case MF_PARAM_FLOAT: {
        char b[32];
        mf_modelfile_float_str(pm->f, b, sizeof b);
        fputs(b, f);
        break;
    }
    case MF_PARAM_BOOL: fprintf(f, "%s", pm->b ? "true" : "false"); break;
    default: preview(f, pm->text); break;
    }
}

static void show_run(FILE *f, const struct mf_run *r)
{
    if (r->network != MF_NET_DEFAULT)
        fprintf(f, "[network=%s] ", r->network == MF_NET_NONE ? "none" : "host");
    for (size_t i = 0; i < r->n_mounts; i++)
        fprintf(f, "[%s %s] ", r->mounts[i].type == MF_MOUNT_CACHE ? "cache" : "secret",
                r->mounts[i].target ? r->mounts[i].target : r->mounts[i].id);
    if (r->timeout_ms)
        fprintf(f, "[timeout=%llds] ", (long long)(r->timeout_ms / 1000));
    if (r->shell) {
        preview(f, r->shell);
        return;
    }
    for (size_t i = 0; i < r->argc; i++)
        fprintf(f, "%s%s", i ? " " : "[", r->argv[i]);
    fputc(']', f);
}

static void show_instr(FILE *f, const struct mf_instr *in)
{
    fprintf(f, "%5d  %-9s  ", in->line, mf_modelfile_kind_name(in->kind));
    switch (in->kind) {
    case MF_INSTR_FROM:
    case MF_INSTR_ADAPTER:
    case MF_INSTR_DRAFT: show_source(f, &in->u.src); break;
    case MF_INSTR_PARAMETER: show_param(f, &in->u.param); break;
    case MF_INSTR_MESSAGE:
        fprintf(f, "%s: ", mf_modelfile_role_name(in->u.msg.role));
        preview(f, in->u.msg.content);
        break;
    case MF_INSTR_RUN: show_run(f, &in->u.run); break;
    case MF_INSTR_ENV:
    case MF_INSTR_ARG:
    case MF_INSTR_LABEL:
        for (size_t i = 0; i < in->u.kv.n; i++) {
            fprintf(f, "%s%s", i ? " " : "", in->u.kv.items[i].key);
            if (in->u.kv.items[i].value) {
                fputc('=', f);
                preview(f, in->u.kv.items[i].value);
            }
        }
        break;
    default: preview(f, in->value); break;
    }
    if (in->ignored)
        fprintf(f, "  (ignored: %s)", in->kind == MF_INSTR_PARAMETER &&
                                              in->u.param.type == MF_PARAM_DEPRECATED
                                          ? "deprecated" : "replaced later");
    fputc('\n', f);
}

static int print_json(struct mfc_ctx *ctx, const struct mf_modelfile *mf)
{
    struct mf_err err;
    struct mf_buf b;
    json_t *j = mf_modelfile_to_json(mf, 0);
    int rc = j ? 0 : mf_err_set(&err, MF_ENOMEM, "out of memory");
    mf_buf_init(&b, (size_t)1 << 30);
    if (rc == 0)
        rc = mf_json_dump(j, JSON_INDENT(2) | JSON_REAL_PRECISION(15), &b, &err);
    if (rc == 0)
        fprintf(ctx->out, "%s\n", b.data);
    json_decref(j);
    mf_buf_free(&b);
    return rc ? mfc_report(ctx, &err) : 0;
}

/* Adds one --build-arg; NAME alone takes its value from the environment
 * (and is skipped when unset), as docker build does. */
static int add_build_arg(struct mfc_ctx *ctx, const char *arg, struct mf_build_arg *ba,
                         size_t *n)
{
    const char *eq = strchr(arg, '=');
    if (eq == arg || !arg[0])
        return mfc_usage_error(ctx, "check", "--build-arg needs NAME=VALUE, got '%s'", arg);
    if (!eq) {
        const char *v = getenv(arg);
        if (v)
            ba[(*n)++] = (struct mf_build_arg){.name = arg, .value = v};
        return 0;
    }
    /* the name is cut out of argv in place: argv strings are writable */
    ((char *)eq)[0] = '\0';
    ba[(*n)++] = (struct mf_build_arg){.name = arg, .value = eq + 1};
    return 0;
}

int mfc_cmd_check(int argc, char **argv, struct mfc_ctx *ctx)
{
    static const struct option longopts[] = {{"file", required_argument, NULL, 'f'},
                                             {"json", no_argument, NULL, 'j'},
                                             {"build-arg", required_argument, NULL, 'b'},
                                             {"help", no_argument, NULL, 'h'},
                                             {NULL, 0, NULL, 0}};
    struct mf_build_arg *ba = calloc((size_t)argc + 1, sizeof *ba);
    struct mf_modelfile_opts opts = {.build_args = ba};
    struct cmd_modelfile m = {0};
    const char *file = NULL;
    int json = 0, c, rc = 0;
    while (ba && rc == 0 && (c = getopt_long(argc, argv, "f:h", longopts, NULL)) != -1) {
        if (c == 'f')
            file = optarg;
        else if (c == 'j')
            json = 1;
        else if (c == 'b')
            rc = add_build_arg(ctx, optarg, ba, &opts.n_build_args);
        else if (c == 'h')
            usage(ctx->out), rc = -1;
        else
            rc = mfc_usage_error(ctx, "check", "unknown option");
    }
    if (rc == 0)
        rc = ba ? cmd_modelfile_resolve(ctx, "check", file, argc - optind, argv + optind, &m)
                : mfc_usage_error(ctx, "check", "out of memory");
    if (rc == 0) {
        rc = cmd_modelfile_load(ctx, &opts, 1, &m);
        if (json && m.mf)
            rc = print_json(ctx, m.mf) ? 1 : rc;
        else if (rc == 0)
            fprintf(ctx->out, "%s: ok, %zu instructions, %zu warnings\n", m.mf->name,
                    m.mf->n_instrs, m.mf->n_warnings);
        for (size_t i = 0; !json && rc == 0 && i < m.mf->n_instrs; i++)
            show_instr(ctx->out, &m.mf->instrs[i]);
        if (rc == 1 && m.mf)
            fprintf(ctx->err, "%s: %zu error%s, %zu warning%s\n", m.mf->name, m.mf->n_errors,
                    m.mf->n_errors == 1 ? "" : "s", m.mf->n_warnings,
                    m.mf->n_warnings == 1 ? "" : "s");
    }
    cmd_modelfile_fini(&m);
    free(ba);
    return rc < 0 ? 0 : rc;
}
