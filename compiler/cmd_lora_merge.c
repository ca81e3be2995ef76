/*
 * cmd_lora_merge.c: mfc lora merge (placeholder until merging lands).
 */
#include "compiler/cli.h"

int mfc_lora_merge(int argc, char **argv, struct mfc_ctx *ctx)
{
    return mfc_usage_error(ctx, "lora merge", "not built yet");
}
