/*
 * cmd_convert.c: mfc convert (placeholder until Hugging Face import lands).
 */
#include "compiler/cli.h"

int mfc_cmd_convert(int argc, char **argv, struct mfc_ctx *ctx)
{
    return mfc_usage_error(ctx, "convert", "not built yet");
}
