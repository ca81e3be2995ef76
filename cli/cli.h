/*
 * cli.h: what every `mfc` subcommand gets and returns.
 *
 * A subcommand is a function taking its own argv (argv[0] is its name) and
 * a context owned by main(). It returns the process exit status: 0 success,
 * 1 invalid input or a failed operation, 2 usage error (docs/cli.md).
 * Subcommands print their results to ctx->out and diagnostics to ctx->err;
 * the library code they call never prints.
 */
#ifndef MFC_CLI_H
#define MFC_CLI_H

#include <stdio.h>

#include "common/err.h"
#include "common/log.h"

struct mfc_ctx {
    FILE *out;          /* borrowed: results (stdout) */
    FILE *err;          /* borrowed: diagnostics (stderr) */
    struct mf_log log;  /* level from MFC_LOG_LEVEL, -v or -q */
    int color;          /* nonzero: diagnostics may use ANSI colour */
};

struct mfc_cmd {
    const char *name;     /* as typed after `mfc` */
    int (*run)(int argc, char **argv, struct mfc_ctx *ctx);
    const char *summary;  /* one line for `mfc help` */
};

/* Prints "mfc: <message>" for a failed operation and returns its exit status. */
int mfc_report(struct mfc_ctx *ctx, const struct mf_err *err);

/* Prints a usage error ("mfc CMD: message", then "Try 'mfc help CMD'") and returns 2. */
int mfc_usage_error(struct mfc_ctx *ctx, const char *cmd, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The subcommands; each lives in compiler/cmd_<name>.c. */
int mfc_cmd_check(int argc, char **argv, struct mfc_ctx *ctx);
int mfc_cmd_fmt(int argc, char **argv, struct mfc_ctx *ctx);
int mfc_cmd_inspect(int argc, char **argv, struct mfc_ctx *ctx);
int mfc_cmd_images(int argc, char **argv, struct mfc_ctx *ctx); /* cmd_store.c */
int mfc_cmd_tag(int argc, char **argv, struct mfc_ctx *ctx);    /* cmd_store.c */
int mfc_cmd_rmi(int argc, char **argv, struct mfc_ctx *ctx);    /* cmd_store.c */
int mfc_cmd_prune(int argc, char **argv, struct mfc_ctx *ctx);  /* cmd_store.c */
int mfc_cmd_du(int argc, char **argv, struct mfc_ctx *ctx);     /* cmd_store.c */
int mfc_cmd_fetch(int argc, char **argv, struct mfc_ctx *ctx);
int mfc_cmd_save(int argc, char **argv, struct mfc_ctx *ctx);    /* cmd_image.c */
int mfc_cmd_load(int argc, char **argv, struct mfc_ctx *ctx);    /* cmd_image.c */
int mfc_image_inspect(const char *ref, struct mfc_ctx *ctx);     /* cmd_image.c: mfc inspect IMAGE */
int mfc_cmd_build(int argc, char **argv, struct mfc_ctx *ctx); /* cmd_build.c */
int mfc_cmd_plan(int argc, char **argv, struct mfc_ctx *ctx);  /* cmd_build.c */
int mfc_cmd_push(int argc, char **argv, struct mfc_ctx *ctx);   /* cmd_registry.c */
/* cmd_registry.c: the push of `mfc push` for another command (`mfc build
 * --output type=registry`): pushes local (a tag or digest in s) to remote
 * with the same options and driver; on success prints "Pushed REMOTE
 * DIGEST" to line (NULL: nothing) and the blob counts to ctx->err, on
 * failure reports the error. Needs fetch_global_init. Returns 0 or 1. */
struct store;
int mfc_push_stored(struct mfc_ctx *ctx, struct store *s, const char *local, const char *remote,
                    int insecure, FILE *line);
int mfc_cmd_pull(int argc, char **argv, struct mfc_ctx *ctx);   /* cmd_registry.c */
/* mfc run/serve of a reference that is not in the store pulls it, as docker
 * run and ollama run do, with each blob's progress on ctx->err (cmd_registry.c).
 * 0 when pulled; otherwise err says why (the reference is no registry
 * reference: MF_ENOTFOUND, kept from the store lookup's message). */
int mfc_pull_missing(struct mfc_ctx *ctx, const char *root, const char *ref, struct mf_err *err);
int mfc_cmd_login(int argc, char **argv, struct mfc_ctx *ctx);  /* cmd_registry.c */
int mfc_cmd_logout(int argc, char **argv, struct mfc_ctx *ctx); /* cmd_registry.c */
int mfc_cmd_serve(int argc, char **argv, struct mfc_ctx *ctx);  /* cmd_serve.c */
int mfc_cmd_run(int argc, char **argv, struct mfc_ctx *ctx);    /* cmd_serve.c */
int mfc_cmd_lora(int argc, char **argv, struct mfc_ctx *ctx);   /* cmd_lora.c: check, merge */
int mfc_lora_merge(int argc, char **argv, struct mfc_ctx *ctx); /* cmd_lora_merge.c: mfc lora merge */
int mfc_cmd_convert(int argc, char **argv, struct mfc_ctx *ctx); /* cmd_convert.c */
int mfc_cmd_manifest(int argc, char **argv, struct mfc_ctx *ctx); /* cmd_manifest.c */

#endif
