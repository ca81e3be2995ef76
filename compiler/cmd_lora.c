/*
 * cmd_lora.c: mfc lora check|merge (placeholder until adapter checks land).
 */
#include <string.h>

#include "compiler/cli.h"

int mfc_cmd_lora(int argc, char **argv, struct mfc_ctx *ctx)
{
    if (argc >= 2 && strcmp(argv[1], "merge") == 0)
        return mfc_lora_merge(argc - 1, argv + 1, ctx);
    return mfc_usage_error(ctx, "lora", "not built yet");
}
