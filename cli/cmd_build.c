/*
 * cmd_build.c: `mfc build` (plan, execute, tag) and `mfc plan` (print the DAG).
 *
 * Options follow docker build: PATH is a Modelfile or a directory holding
 * one (the build context is the Modelfile's directory unless PATH is a
 * directory); -f, -t (repeatable), --build-arg (repeatable), --no-cache,
 * --progress, -q, -o/--output (type=oci|docker,dest=... or
 * type=registry[,name=REF], a push as `mfc push` does), --allow (BuildKit's
 * entitlements: network.host); mfc's own
 * --quantize TYPE (Ollama's create -q) and --merge-adapters (every ADAPTER
 * as if it had --merge; docs/merge.md). Progress and
 * diagnostics go to stderr; stdout gets the image digest (with -q, nothing
 * else is printed). Exit status: 0, 1 (bad Modelfile or failed build), 2
 * (usage).
 *
 * The image's runtime layer is the mfc-serve binary from $MFC_SERVE or next
 * to this executable; without one the image is built with no runtime layer
 * (and a warning), its entrypoint set all the same.
 *
 * Owns the parsed Modelfile, the plan and the store handle for one command;
 * a tag is set only after every node succeeded and the --output was written
 * (exec/exec.h), and an output is written to a temporary name and
 * renamed into place, so a failed build moves no tag and leaves no half
 * output.
 */
#include "config.h"

#include <errno.h>
#include <ftw.h>
#include <getopt.h>
#include <inttypes.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/file.h"
#include "common/num.h"
#include "cli/cli.h"
#include "cli/run.h"
#include "exec/exec.h"
#include "exec/exec_allow.h"
#include "convert/lora_merge.h"
#include "image/oci.h"
#include "compiler/plan.h"

#define BUILD_MAX_ARGS 256 /* -t and --build-arg entries: far more than a command line needs */

struct build_cli {
    const char *cmd;                              /* "build" or "plan" */
    const char *path;                             /* PATH, or "." */
    const char *file;                             /* -f, or NULL */
    const char *tags[BUILD_MAX_ARGS];             /* -t values */
    size_t n_tags;                                /* entries in tags */
    struct mf_build_arg args[BUILD_MAX_ARGS];     /* --build-arg (value points into argv) */
    char *arg_names[BUILD_MAX_ARGS];              /* owned: names cut from NAME=VALUE */
    size_t n_args;                                /* entries in args */
    int no_cache;                                 /* --no-cache */
    const char *quantize;                         /* --quantize: canonical file type name */
    int merge_adapters;                           /* --merge-adapters */
    int quiet;                                    /* -q */
    int jobs;                                     /* --jobs (0: default) */
    enum progress_mode mode;                      /* --progress */
    enum plan_format format;                      /* mfc plan --format */
    struct oci_output output;                     /* --output; type 0: the store only */
    char *modelfile;                              /* owned: the Modelfile's path */
    char *context;                                /* owned: the build context directory */
    struct exec_secret secrets[BUILD_MAX_ARGS];   /* --secret (strings owned) */
    size_t n_secrets;                             /* entries in secrets */
    int64_t run_timeout_ms;                       /* --run-timeout (default 1h) */
    uint64_t run_memory;                          /* --run-memory (0: none) */
    unsigned allow;                               /* --allow: EXEC_ALLOW_* granted */
};

/* --secret id=ID,src=FILE (also source=): the file must be readable now. */
static int add_secret(struct build_cli *cli, const char *s)
{
    char *id = NULL, *src = NULL;
    while (*s) {
        size_t n = strcspn(s, ",");
        if (!strncmp(s, "id=", 3) && n > 3 && !id)
            id = strndup(s + 3, n - 3);
        else if (!strncmp(s, "src=", 4) && n > 4 && !src)
            src = strndup(s + 4, n - 4);
        else if (!strncmp(s, "source=", 7) && n > 7 && !src)
            src = strndup(s + 7, n - 7);
        else
            break;
        s += n + (s[n] == ',');
    }
    if (*s || !id || !src || cli->n_secrets == BUILD_MAX_ARGS || access(src, R_OK) != 0 ||
        strspn(id, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") !=
            strlen(id)) {
        free(id);
        free(src);
        return -1;
    }
    char *abs = realpath(src, NULL); /* bwrap must not depend on mfc's cwd */
    free(src);
    if (!abs) {
        free(id);
        return -1;
    }
    cli->secrets[cli->n_secrets].id = id;
    cli->secrets[cli->n_secrets++].src = abs;
    return 0;
}

/* 512M, 8G, 1T (also 8GB, 8GiB; powers of 1024) or bytes. */
static int parse_size(const char *s, uint64_t *out)
{
    static const char units[] = "KMGT";
    char *end;
    int shift = 0;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || s[0] == '-' || v == 0)
        return -1;
    if (*end) {
        const char *u = strchr(units, *end >= 'a' && *end <= 'z' ? *end - 'a' + 'A' : *end);
        if (!u || !*u)
            return -1;
        shift = 10 * (int)(u - units + 1);
        end++;
        if (*end && strcmp(end, "B") != 0 && strcmp(end, "iB") != 0)
            return -1;
    }
    if (v > (UINT64_MAX >> shift))
        return -1;
    *out = (uint64_t)v << shift;
    return 0;
}

static void usage(FILE *f, const char *cmd)
{
    if (strcmp(cmd, "plan") == 0) {
        fputs("Usage: mfc plan [OPTIONS] [PATH]\n\n"
              "Print the build DAG of a Modelfile without executing anything.\n\n"
              "  -f, --file=FILE        the Modelfile (default PATH/Modelfile)\n"
              "      --build-arg=K=V    set a build argument (ARG)\n"
              "      --format=FMT       text, json or dot (default text)\n"
              "      --quantize=TYPE    as mfc build\n"
              "      --merge-adapters   as mfc build\n",
              f);
        return;
    }
    fputs("Usage: mfc build [OPTIONS] [PATH]\n\n"
          "Build an image from a Modelfile. PATH is a Modelfile or a directory holding\n"
          "one (default .): the build context, where relative sources resolve (a\n"
          "Modelfile's own directory when PATH names it).\n\n"
          "  -f, --file=FILE        the Modelfile (default PATH/Modelfile)\n"
          "  -t, --tag=NAME         tag the image (repeatable)\n"
          "      --build-arg=K=V    set a build argument (ARG; repeatable)\n"
          "      --secret=id=ID,src=FILE  a secret for RUN --mount=type=secret (repeatable)\n"
          "      --run-timeout=DUR  a RUN's timeout unless it sets --timeout (default 1h)\n"
          "      --run-memory=SIZE  address-space limit of each RUN (e.g. 8G; default none)\n"
          "      --allow=ENT        grant an entitlement RUN steps ask for: network.host\n"
          "                         (RUN --network=host; repeatable)\n"
          "      --no-cache         run every step, ignoring the build cache\n"
          "      --progress=MODE    auto, tty, plain, json or quiet (default auto)\n"
          "  -q, --quiet            print only the image digest\n"
          "  -j, --jobs=N           steps run at once (default 4)\n"
          "      --quantize=TYPE    write the weights as Q4_K_M, Q5_K_M, Q8_0, F16, ...\n"
          "                         (quantized types from an F32/F16/BF16 model)\n"
          "      --merge-adapters   bake every ADAPTER into the weights (as --merge)\n"
          "  -o, --output=SPEC      also write the image: type=oci,dest=DIR|FILE.tar,\n"
          "                         type=docker,dest=FILE.tar, or push it:\n"
          "                         type=registry[,name=REF][,registry.insecure=true]\n"
          "                         (REF defaults to every -t)\n\n"
          "Environment: MFC_HOME (the store), MFC_SERVE (the runtime binary; empty: none),\n"
          "HF_TOKEN, HF_ENDPOINT, MFC_FETCH_TIMEOUT (seconds a download may stall,\n"
          "default 60), SOURCE_DATE_EPOCH (layer and image times, default 0).\n",
          f);
}

/* NAME=VALUE, or NAME alone (the value comes from the environment, as in docker). */
static int add_build_arg(struct build_cli *cli, char *s)
{
    if (cli->n_args == BUILD_MAX_ARGS)
        return -1;
    char *eq = strchr(s, '=');
    char *name = eq ? strndup(s, (size_t)(eq - s)) : strdup(s);
    if (!name || !name[0]) {
        free(name);
        return -1;
    }
    cli->arg_names[cli->n_args] = name;
    cli->args[cli->n_args].name = name;
    cli->args[cli->n_args++].value = eq ? eq + 1 : getenv(name);
    return 0;
}

static int parse_int(const char *s, int min, int max, int *out)
{
    int64_t v;
    if (mf_num_parse_i64(s, &v) != 0 || v < min || v > max)
        return -1;
    *out = (int)v;
    return 0;
}

static int parse_one(struct build_cli *cli, int c, struct mfc_ctx *ctx)
{
    struct mf_err err;
    switch (c) {
    case 'f':
        cli->file = optarg;
        return -1;
    case 't':
        if (cli->n_tags == BUILD_MAX_ARGS || !store_tag_valid(optarg))
            return mfc_usage_error(ctx, cli->cmd, "invalid tag '%s'", optarg);
        cli->tags[cli->n_tags++] = optarg;
        return -1;
    case 'a':
        if (add_build_arg(cli, optarg) != 0)
            return mfc_usage_error(ctx, cli->cmd, "--build-arg takes NAME=VALUE");
        return -1;
    case 'n':
        cli->no_cache = 1;
        return -1;
    case 'q':
        cli->quiet = 1;
        cli->mode = PROGRESS_QUIET;
        return -1;
    case 'j':
        if (parse_int(optarg, 1, EXEC_MAX_JOBS, &cli->jobs) != 0)
            return mfc_usage_error(ctx, cli->cmd, "--jobs takes 1 to %d", EXEC_MAX_JOBS);
        return -1;
    case 'p':
        if (progress_parse_mode(optarg, &cli->mode, &err) != 0)
            return mfc_usage_error(ctx, cli->cmd, "%s", err.msg);
        return -1;
    case 'o':
        if (oci_output_parse(optarg, &cli->output, &err) != 0)
            return mfc_usage_error(ctx, cli->cmd, "--output: %s", err.msg);
        return -1;
    case 'Q': {
        enum quant_ftype ft;
        if (lora_merge_parse_ftype(optarg, &ft, &err) != 0)
            return mfc_usage_error(ctx, cli->cmd, "--quantize: %s", err.msg);
        cli->quantize = quant_ftype_name(ft);
        return -1;
    }
    case 'M':
        cli->merge_adapters = 1;
        return -1;
    case 'S':
        if (add_secret(cli, optarg) != 0)
            return mfc_usage_error(ctx, cli->cmd, "--secret takes id=ID,src=FILE with a "
                                   "readable FILE: '%s'", optarg);
        return -1;
    case 'T':
        if (strcmp(optarg, "0") == 0)
            cli->run_timeout_ms = 0;
        else if (mf_modelfile_duration_ms(optarg, &cli->run_timeout_ms) != 0)
            return mfc_usage_error(ctx, cli->cmd, "--run-timeout takes a duration such as "
                                   "90s, 10m or 0 for none: '%s'", optarg);
        return -1;
    case 'm':
        if (parse_size(optarg, &cli->run_memory) != 0)
            return mfc_usage_error(ctx, cli->cmd, "--run-memory takes a size such as 512M or "
                                   "8G: '%s'", optarg);
        return -1;
    case 'A':
        if (exec_allow_parse(optarg, &cli->allow, &err) != 0)
            return mfc_usage_error(ctx, cli->cmd, "%s", err.msg);
        return -1;
    case 'F':
        if (plan_parse_format(optarg, &cli->format, &err) != 0)
            return mfc_usage_error(ctx, cli->cmd, "%s", err.msg);
        return -1;
    case 'h':
        usage(ctx->out, cli->cmd);
        return 0;
    default:
        return mfc_usage_error(ctx, cli->cmd, "unknown option");
    }
}

/* Returns -1 to go on, or the exit status. */
static int parse_opts(int argc, char **argv, struct mfc_ctx *ctx, struct build_cli *cli)
{
    static const struct option build_opts[] = {
        {"help", no_argument, NULL, 'h'},          {"file", required_argument, NULL, 'f'},
        {"secret", required_argument, NULL, 'S'},  {"run-timeout", required_argument, NULL, 'T'},
        {"run-memory", required_argument, NULL, 'm'}, {"allow", required_argument, NULL, 'A'},
        {"tag", required_argument, NULL, 't'},     {"build-arg", required_argument, NULL, 'a'},
        {"no-cache", no_argument, NULL, 'n'},      {"progress", required_argument, NULL, 'p'},
        {"quiet", no_argument, NULL, 'q'},         {"jobs", required_argument, NULL, 'j'},
        {"output", required_argument, NULL, 'o'},  {"quantize", required_argument, NULL, 'Q'},
        {"merge-adapters", no_argument, NULL, 'M'}, {NULL, 0, NULL, 0}};
    static const struct option plan_opts[] = {{"help", no_argument, NULL, 'h'},
                                              {"file", required_argument, NULL, 'f'},
                                              {"build-arg", required_argument, NULL, 'a'},
                                              {"format", required_argument, NULL, 'F'},
                                              {"quantize", required_argument, NULL, 'Q'},
                                              {"merge-adapters", no_argument, NULL, 'M'},
                                              {NULL, 0, NULL, 0}};
    int is_plan = strcmp(cli->cmd, "plan") == 0, c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, is_plan ? "hf:" : "hf:t:qj:o:", is_plan ? plan_opts : build_opts,
                            NULL)) != -1) {
        if (c == '?')
            return mfc_usage_error(ctx, cli->cmd, "unknown option or missing value: '%s'",
                                   argv[optind - 1]);
        int st = parse_one(cli, c, ctx);
        if (st >= 0)
            return st;
    }
    if (argc - optind > 1)
        return mfc_usage_error(ctx, cli->cmd, "takes one PATH (a Modelfile or a directory)");
    /* a docker archive names its image in manifest.json's RepoTags; a digest is no tag */
    if (cli->output.type == OCI_OUT_DOCKER && !cli->n_tags)
        return mfc_usage_error(ctx, cli->cmd, "--output type=docker needs a -t NAME for the "
                               "archive's image name");
    if (cli->output.type == OCI_OUT_REGISTRY && !cli->output.name[0] && !cli->n_tags)
        return mfc_usage_error(ctx, cli->cmd, "--output type=registry needs name=REF or a -t "
                               "NAME to push to");
    cli->path = optind < argc ? argv[optind] : ".";
    return -1;
}

/* The Modelfile and the context from PATH and -f (docker's rules). */
static int locate(struct build_cli *cli, struct mf_err *err)
{
    struct stat st;
    if (stat(cli->path, &st) != 0)
        return mf_err_sys(err, MF_ENOTFOUND, errno, "%s", cli->path);
    int is_dir = S_ISDIR(st.st_mode);
    size_t n = (cli->file ? strlen(cli->file) : strlen(cli->path)) + 16;
    cli->modelfile = malloc(n);
    if (!cli->modelfile)
        return mf_err_set(err, MF_ENOMEM, "out of memory");
    if (cli->file)
        snprintf(cli->modelfile, n, "%s", cli->file);
    else if (is_dir)
        snprintf(cli->modelfile, n, "%s/Modelfile", cli->path);
    else
        snprintf(cli->modelfile, n, "%s", cli->path);
    char *copy = strdup(is_dir ? cli->path : cli->modelfile);
    if (!copy)
        return mf_err_set(err, MF_ENOMEM, "out of memory");
    char *dir = is_dir ? copy : dirname(copy);
    cli->context = realpath(dir, NULL);
    free(copy);
    if (!cli->context)
        return mf_err_sys(err, MF_ENOTFOUND, errno, "%s", cli->path);
    /* PATH/Modelfile is the context's: a symlink to a host file is not read (its
     * lines would be quoted in the diagnostics); -f FILE or PATH=FILE name one */
    return cli->file || !is_dir ? 0 : fetch_confined(cli->modelfile, cli->context, err);
}

/* Reads, parses and plans. Returns -1 to go on, or the exit status. */
static int load_plan(struct build_cli *cli, struct mfc_ctx *ctx, const struct fetch_opts *fo,
                     struct plan **plan)
{
    struct mf_err err;
    struct mf_modelfile *mf = NULL;
    char *data = NULL;
    size_t len = 0;
    int rc = locate(cli, &err);
    if (!rc)
        rc = mf_file_read(cli->modelfile, MF_MODELFILE_MAX_BYTES, &data, &len, &err);
    if (rc)
        return mfc_report(ctx, &err);
    /* messages say "Modelfile:3: ...", as docker names "Dockerfile:3" */
    const char *slash = strrchr(cli->modelfile, '/');
    const char *name = slash ? slash + 1 : cli->modelfile;
    struct mf_modelfile_opts mo = {
        .name = name, .build_args = cli->args, .n_build_args = cli->n_args};
    rc = mf_modelfile_parse(data, len, &mo, &mf, &err);
    free(data);
    if (rc == MF_EINVAL || (!rc && mf->n_warnings)) {
        struct mf_buf out;
        mf_buf_init(&out, 1u << 20);
        if (mf_modelfile_render_diags(mf, ctx->color, &out, &err) == 0 && out.data)
            fputs(out.data, ctx->err);
        mf_buf_free(&out);
    }
    if (rc) {
        mf_modelfile_free(mf);
        return rc == MF_EINVAL ? 1 : mfc_report(ctx, &err);
    }
    struct fetch_opts pfo = *fo;
    pfo.base_dir = cli->context;
    struct plan_opts po = {.modelfile = name, .fo = &pfo, .quantize = cli->quantize};
    for (size_t i = 0; cli->merge_adapters && i < mf->n_instrs; i++)
        if (mf->instrs[i].kind == MF_INSTR_ADAPTER)
            mf->instrs[i].u.src.merge = 1; /* --merge-adapters: as if each had --merge */
    rc = plan_build(mf, &po, plan, &err);
    mf_modelfile_free(mf);
    return rc ? mfc_report(ctx, &err) : -1;
}

static void cli_fini(struct build_cli *cli)
{
    for (size_t i = 0; i < cli->n_args; i++)
        free(cli->arg_names[i]);
    for (size_t i = 0; i < cli->n_secrets; i++) {
        free((char *)cli->secrets[i].id);
        free((char *)cli->secrets[i].src);
    }
    free(cli->modelfile);
    free(cli->context);
}

/* Points every -t at the image manifest; a tag is all or nothing per name. */
static int tag_image(struct store *s, const struct build_cli *cli, const struct exec_node *img,
                     struct mf_err *err)
{
    struct store_desc d = {.size = img->size};
    char created[STORE_TIME_MAX];
    struct tm tm;
    time_t t = time(NULL);
    snprintf(d.media_type, sizeof d.media_type, "%s", STORE_MT_OCI_MANIFEST);
    snprintf(d.digest, sizeof d.digest, "%s", img->digest);
    if (!gmtime_r(&t, &tm) || !strftime(created, sizeof created, "%Y-%m-%dT%H:%M:%SZ", &tm))
        created[0] = '\0';
    for (size_t i = 0; i < cli->n_tags; i++) {
        int rc = store_tag_set(s, cli->tags[i], &d, created, err);
        if (rc)
            return rc;
    }
    return 0;
}

/* ---- runtime and --output ---- */

/* The runtime binary for the image: none when $MFC_SERVE is set but empty,
 * else run_locate_server's. A $MFC_SERVE naming no executable file is an
 * error: a typo must not silently drop the runtime. */
static int find_runtime(char **path, struct mf_err *err)
{
    const char *env = getenv("MFC_SERVE");
    *path = NULL;
    return env && !env[0] ? 0 : run_locate_server(path, err);
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

/* Writes the image to --output. A tar goes through oci_export's temporary
 * file and rename. A new directory is written as DEST.tmp-PID, renamed into
 * place, and removed on failure; an existing one is written in place
 * (index.json last, so it holds the old layout or the complete new one). */
static int write_output(struct store *s, const struct build_cli *cli, const char *digest,
                        struct mf_err *err)
{
    const struct oci_output *o = &cli->output;
    const char *name = cli->n_tags ? cli->tags[0] : NULL;
    struct oci_output tmp = *o;
    struct stat st;
    if (o->tar || stat(o->dest, &st) == 0)
        return oci_export(s, digest, name, o, err);
    int n = snprintf(tmp.dest, sizeof tmp.dest, "%s.tmp-%ld", o->dest, (long)getpid());
    if (n < 0 || (size_t)n >= sizeof tmp.dest)
        return mf_err_set(err, MF_EINVAL, "--output dest=%s: the path is too long", o->dest);
    int rc = oci_export(s, digest, name, &tmp, err);
    if (!rc && rename(tmp.dest, o->dest) != 0)
        rc = mf_err_sys(err, MF_EIO, errno, "renaming %s to %s", tmp.dest, o->dest);
    if (rc)
        nftw(tmp.dest, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    return rc;
}

/* --output type=registry: pushes the image to name=, else to every -t (as
 * docker buildx --push does), through `mfc push`'s driver. The first failed
 * push stops the build before any tag moves. Returns 0 or 1 (reported). */
static int push_output(struct mfc_ctx *ctx, struct store *s, const struct build_cli *cli,
                       const char *digest)
{
    const struct oci_output *o = &cli->output;
    FILE *line = cli->quiet ? NULL : ctx->err; /* stdout holds only the digest */
    if (o->name[0])
        return mfc_push_stored(ctx, s, digest, o->name, o->insecure, line);
    for (size_t i = 0; i < cli->n_tags; i++)
        if (mfc_push_stored(ctx, s, digest, cli->tags[i], o->insecure, line) != 0)
            return 1;
    return 0;
}

/* The BuildKit-style summary line, and every failure with its Modelfile line. */
static void report_build(struct mfc_ctx *ctx, const struct plan *p, const struct exec_build *b,
                         enum progress_mode mode, double secs)
{
    size_t finished = b->n_done + b->n_cached;
    if (mode == PROGRESS_JSON) {
        fprintf(ctx->err,
                "{\"event\":\"build\",\"status\":\"%s\",\"steps\":%zu,\"done\":%zu,"
                "\"cached\":%zu,\"failed\":%zu,\"cancelled\":%zu,\"ms\":%.0f}\n",
                b->n_failed ? "error" : "done", p->n_nodes, b->n_done, b->n_cached, b->n_failed,
                b->n_cancelled, secs * 1000);
    } else if (mode != PROGRESS_QUIET && mode != PROGRESS_TTY) { /* a tty's block has it */
        fprintf(ctx->err, "[+] Building %.1fs (%zu/%zu) %s\n", secs, finished, p->n_nodes,
                b->n_failed ? "ERROR" : "FINISHED");
    }
    for (size_t i = 0; i < b->n_nodes; i++)
        if (b->nodes[i].state == EXEC_FAILED)
            mfc_report(ctx, &b->nodes[i].err);
}

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int execute(struct mfc_ctx *ctx, struct build_cli *cli, const struct plan *p,
                   struct fetch_opts *fo, struct store *s, const char *root, const char *runtime)
{
    struct mf_err err;
    struct progress *pr = NULL;
    struct exec_build b = {0};
    double t0 = mono_s();
    if (progress_open(&pr, ctx->err, cli->mode, &err) != 0)
        return mfc_report(ctx, &err);
    progress_set_steps(pr, (int)p->n_nodes); /* "#N" and "[N/M]" are the plan's numbers */
    fo->progress = pr;
    fo->base_dir = cli->context;
    struct exec_opts eo = {
        .store_root = root, .fo = fo,           .progress = pr,     .jobs = cli->jobs,
        .no_cache = cli->no_cache, .runtime = runtime};
    char self[PATH_MAX];
    ssize_t self_len = readlink("/proc/self/exe", self, sizeof self - 1);
    self[self_len > 0 ? self_len : 0] = '\0';
    eo.bwrap = getenv("MFC_BWRAP") && *getenv("MFC_BWRAP") ? getenv("MFC_BWRAP") : NULL;
    eo.self_exe = self[0] ? self : NULL;
    eo.secrets = cli->secrets;
    eo.n_secrets = cli->n_secrets;
    eo.run_timeout_ms = cli->run_timeout_ms;
    eo.run_memory = cli->run_memory;
    eo.allow = cli->allow;
    eo.model_name = cli->n_tags ? cli->tags[0] : NULL; /* the name the image serves */
    int rc = exec_run(p, &eo, &b, &err);
    enum progress_mode mode = progress_get_mode(pr);
    progress_close(pr);
    if (rc && !b.n_failed) /* the executor itself failed (store, threads) */
        mfc_report(ctx, &err);
    report_build(ctx, p, &b, mode, mono_s() - t0);
    if (!rc && cli->output.type == OCI_OUT_REGISTRY)
        rc = push_output(ctx, s, cli, b.nodes[p->image].digest);
    else if (!rc && cli->output.type &&
             (rc = write_output(s, cli, b.nodes[p->image].digest, &err)) != 0)
        mfc_report(ctx, &err);
    if (!rc && (rc = tag_image(s, cli, &b.nodes[p->image], &err)) != 0)
        mfc_report(ctx, &err);
    if (!rc)
        fprintf(ctx->out, "%s\n", b.nodes[p->image].digest);
    exec_build_fini(&b);
    return rc ? 1 : 0;
}

static int build(struct mfc_ctx *ctx, struct build_cli *cli, struct fetch_opts *fo)
{
    struct mf_err err;
    struct plan *p = NULL;
    struct store *s = NULL;
    char *root = NULL, *runtime = NULL;
    int st = load_plan(cli, ctx, fo, &p);
    if (st >= 0)
        return st;
    int rc = exec_allow_check(p, cli->allow, &err); /* before anything runs */
    if (!rc)
        rc = find_runtime(&runtime, &err);
    if (!rc && !runtime && !cli->quiet) /* -q: the digest and errors only */
        fputs("mfc: warning: no mfc-serve found; the image has no runtime yet "
              "(set MFC_SERVE to add one)\n",
              ctx->err);
    if (!rc)
        rc = store_default_root(&root, &err);
    if (!rc)
        rc = store_open(&s, root, &err);
    if (!rc)
        rc = fetch_global_init(&err);
    st = rc ? mfc_report(ctx, &err) : execute(ctx, cli, p, fo, s, root, runtime);
    if (!rc)
        fetch_global_cleanup();
    store_close(s);
    free(runtime);
    free(root);
    plan_free(p);
    return st;
}

static void fetch_env(struct fetch_opts *fo)
{
    const char *v = getenv("MFC_FETCH_TIMEOUT");
    int64_t n;
    if (v && mf_num_parse_i64(v, &n) == 0 && n > 0 && n < 86400)
        fo->stall_timeout_s = (long)n;
    v = getenv("MFC_FETCH_RETRY_DELAY_MS");
    if (v && mf_num_parse_i64(v, &n) == 0 && n >= 0 && n < 600000)
        fo->retry_base_ms = (long)n;
}

int mfc_cmd_build(int argc, char **argv, struct mfc_ctx *ctx)
{
    struct build_cli cli = {.cmd = "build", .mode = PROGRESS_AUTO, .run_timeout_ms = 3600000};
    struct fetch_opts fo;
    fetch_opts_init(&fo);
    fo.user_agent = "mfc/" PACKAGE_VERSION;
    fetch_env(&fo);
    int st = parse_opts(argc, argv, ctx, &cli);
    if (st < 0)
        st = build(ctx, &cli, &fo);
    cli_fini(&cli);
    return st;
}

int mfc_cmd_plan(int argc, char **argv, struct mfc_ctx *ctx)
{
    struct build_cli cli = {.cmd = "plan", .format = PLAN_FMT_TEXT};
    struct fetch_opts fo;
    struct plan *p = NULL;
    struct mf_err err;
    fetch_opts_init(&fo);
    int st = parse_opts(argc, argv, ctx, &cli);
    if (st < 0)
        st = load_plan(&cli, ctx, &fo, &p);
    if (st < 0)
        st = plan_print(p, cli.format, ctx->out, &err) ? mfc_report(ctx, &err) : 0;
    plan_free(p);
    cli_fini(&cli);
    return st;
}
