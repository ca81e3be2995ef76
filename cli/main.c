/*
 * main.c: the `mfc` command: global options, then dispatch to a subcommand.
 *
 * Owns the process-wide pieces (the logger, the output streams) and nothing
 * else; each subcommand parses its own options (docs/cli.md).
 */
#include "config.h"

#include <getopt.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"

static int cmd_version(int argc, char **argv, struct mfc_ctx *ctx);
static int cmd_help(int argc, char **argv, struct mfc_ctx *ctx);

static const struct mfc_cmd commands[] = {
    {"version", cmd_version, "print the version"},
    {"help", cmd_help, "show help for mfc or a subcommand"},
    {"check", mfc_cmd_check, "validate a Modelfile and show what it holds"},
    {"fmt", mfc_cmd_fmt, "print a Modelfile in canonical form"},
    {"inspect", mfc_cmd_inspect, "show what a GGUF model or adapter holds"},
    {"build", mfc_cmd_build, "build an image from a Modelfile"},
    {"plan", mfc_cmd_plan, "print the build steps of a Modelfile without running them"},
    {"fetch", mfc_cmd_fetch, "fetch model sources (files, URLs, hf://) into the store"},
    {"images", mfc_cmd_images, "list the images in the store"},
    {"tag", mfc_cmd_tag, "give an image another tag"},
    {"rmi", mfc_cmd_rmi, "remove image tags"},
    {"prune", mfc_cmd_prune, "remove unreferenced blobs from the store"},
    {"du", mfc_cmd_du, "show the store's disk use"},
    {"save", mfc_cmd_save, "write an image to a docker/OCI archive or an OCI layout"},
    {"load", mfc_cmd_load, "load a docker/OCI archive into the store"},
    {"push", mfc_cmd_push, "push an image to a registry"},
    {"pull", mfc_cmd_pull, "pull an image from a registry into the store"},
    {"login", mfc_cmd_login, "store credentials for a registry"},
    {"logout", mfc_cmd_logout, "remove stored credentials for a registry"},
    {"serve", mfc_cmd_serve, "serve an image or a GGUF file over HTTP (OpenAI and Ollama APIs)"},
    {"run", mfc_cmd_run, "run an image and answer a prompt or chat with it"},
    {"lora", mfc_cmd_lora, "check a LoRA adapter against a base model, or merge adapters into it"},
    {"convert", mfc_cmd_convert, "convert a Hugging Face model or PEFT adapter directory to GGUF"},
    {"manifest", mfc_cmd_manifest, "print Kubernetes or Compose YAML that deploys an image"},
};
#define N_COMMANDS (sizeof commands / sizeof commands[0])

int mfc_report(struct mfc_ctx *ctx, const struct mf_err *err)
{
    fprintf(ctx->err, "mfc: %s\n", err->msg[0] ? err->msg : mf_err_name(err->code));
    return mf_err_exit_status(err->code ? err->code : MF_EINVAL);
}

int mfc_usage_error(struct mfc_ctx *ctx, const char *cmd, const char *fmt, ...)
{
    va_list ap;
    fprintf(ctx->err, "mfc%s%s: ", cmd ? " " : "", cmd ? cmd : "");
    va_start(ap, fmt);
    vfprintf(ctx->err, fmt, ap);
    va_end(ap);
    fprintf(ctx->err, "\nTry 'mfc help%s%s' for more information.\n", cmd ? " " : "",
            cmd ? cmd : "");
    return 2;
}

static int cmd_version(int argc, char **argv, struct mfc_ctx *ctx)
{
    (void)argv;
    if (argc > 1)
        return mfc_usage_error(ctx, "version", "takes no arguments");
    fprintf(ctx->out, "mfc %s\n", PACKAGE_VERSION);
    return 0;
}

static void print_usage(FILE *f)
{
    fprintf(f, "Usage: mfc [-v|-q] COMMAND [ARGS...]\n\n"
               "Compile a Modelfile into a runnable OCI image that serves an LLM.\n\n"
               "Commands:\n");
    for (size_t i = 0; i < N_COMMANDS; i++)
        fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\nRun 'mfc COMMAND --help' for a command's options.\n"
               "Exit status: 0 success, 1 invalid input or failure, 2 usage error.\n");
}

static const struct mfc_cmd *find_command(const char *name)
{
    for (size_t i = 0; i < N_COMMANDS; i++)
        if (strcmp(commands[i].name, name) == 0)
            return &commands[i];
    return NULL;
}

static int cmd_help(int argc, char **argv, struct mfc_ctx *ctx)
{
    if (argc < 2) {
        print_usage(ctx->out);
        return 0;
    }
    const struct mfc_cmd *c = find_command(argv[1]);
    if (!c)
        return mfc_usage_error(ctx, NULL, "unknown command '%s'", argv[1]);
    if (c->run == cmd_help || c->run == cmd_version) {
        fprintf(ctx->out, "Usage: mfc %s\n\n%s.\n", c->name, c->summary);
        return 0;
    }
    char *sub[] = {argv[1], "--help", NULL};
    return c->run(2, sub, ctx);
}

int main(int argc, char **argv)
{
    struct mfc_ctx ctx = {.out = stdout, .err = stderr};
    enum mf_log_level level = MF_LOG_WARN;
    const char *env = getenv("MFC_LOG_LEVEL");
    if (env && mf_log_parse_level(env, &level) != 0)
        fprintf(stderr, "mfc: warning: ignoring MFC_LOG_LEVEL=%s (use debug, info, warn, error)\n",
                env);
    ctx.color = isatty(STDERR_FILENO) && !getenv("NO_COLOR");

    int i = 1;
    for (; i < argc && argv[i][0] == '-'; i++) {
        if (strcmp(argv[i], "-v") == 0 || strcmp(argv[i], "--verbose") == 0)
            level = level > MF_LOG_DEBUG ? level - 1 : level;
        else if (strcmp(argv[i], "-q") == 0 || strcmp(argv[i], "--quiet") == 0)
            level = MF_LOG_ERROR;
        else if (strcmp(argv[i], "--version") == 0)
            return cmd_version(1, argv, &ctx);
        else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0)
            return cmd_help(1, argv, &ctx);
        else
            return mfc_usage_error(&ctx, NULL, "unknown option '%s'", argv[i]);
    }
    mf_log_init(&ctx.log, stderr, level, "mfc");
    if (i >= argc) {
        print_usage(stderr);
        return 2;
    }
    const struct mfc_cmd *c = find_command(argv[i]);
    if (!c)
        return mfc_usage_error(&ctx, NULL, "unknown command '%s'", argv[i]);
    optind = 0; /* each subcommand runs getopt afresh (glibc: 0 also resets its state) */
    int status = c->run(argc - i, argv + i, &ctx);
    if (fflush(stdout) != 0 && status == 0) {
        fprintf(stderr, "mfc: cannot write output\n");
        status = 1;
    }
    return status;
}
