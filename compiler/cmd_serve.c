/*
 * cmd_serve.c: mfc serve and mfc run (placeholder until the server lands).
 */
#include "compiler/cli.h"

int mfc_cmd_serve(int argc, char **argv, struct mfc_ctx *ctx)
{
    return mfc_usage_error(ctx, "serve", "not built yet");
}

int mfc_cmd_run(int argc, char **argv, struct mfc_ctx *ctx)
{
    return mfc_usage_error(ctx, "run", "not built yet");
}
