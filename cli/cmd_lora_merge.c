/*
 * cmd_lora_merge.c: `mfc lora merge BASE ADAPTER[:SCALE]... -o OUT.gguf
 * [--quantize TYPE] [--threads N]`: bake GGUF LoRA adapters into a base
 * model's weights (convert/lora_merge.h), optionally requantizing.
 *
 * An adapter's scale is written after its path with a colon (":0.5"); a
 * path that itself ends in ":<number>" can be given as "PATH:1". `--scale S`
 * sets the scale of the adapter named just before it instead. Every adapter
 * is checked against the base before anything is written; the output is
 * written atomically (nothing is left at OUT on failure). stdout gets one
 * summary line; errors name the tensor and both shapes.
 */
#include "config.h"

#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/num.h"
#include "cli/cli.h"
#include "convert/lora_merge.h"

#define CMD "lora merge"

static void usage(FILE *f)
{
    fputs("Usage: mfc lora merge BASE.gguf ADAPTER.gguf[:SCALE]... -o OUT.gguf [OPTIONS]\n\n"
          "Bake GGUF LoRA adapters into the base weights: W' = W + SCALE*(alpha/rank)*B*A\n"
          "for every adapted tensor, computed in F32 and encoded again in the tensor's\n"
          "own type (or the --quantize type). Other tensors are copied byte for byte.\n\n"
          "  -o, --output=FILE    where to write the merged GGUF (required)\n"
          "  -s, --scale=S        scale of the adapter named just before (default 1)\n"
          "  -q, --quantize=TYPE  write file type TYPE: Q4_K_M, Q5_K_M, Q8_0, F16, ...\n"
          "                       (a quantized TYPE needs an F32/F16/BF16 base)\n"
          "  -j, --threads=N      rows encoded in parallel (default: online CPUs)\n",
          f);
}

/* Splits "path:scale" in place when the part after the last colon is a
 * number (the colon becomes the path's end). */
static float split_scale(char *arg)
{
    char *colon = strrchr(arg, ':');
    double v;
    if (colon && colon != arg && mf_num_parse_f64(colon + 1, &v) == 0) {
        *colon = '\0';
        return (float)v;
    }
    return 1.0f;
}

static int default_threads(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > 16 ? 16 : (int)n;
}

int mfc_lora_merge(int argc, char **argv, struct mfc_ctx *ctx)
{
    static const struct option opts[] = {{"help", no_argument, NULL, 'h'},
                                         {"output", required_argument, NULL, 'o'},
                                         {"scale", required_argument, NULL, 's'},
                                         {"quantize", required_argument, NULL, 'q'},
                                         {"threads", required_argument, NULL, 'j'},
                                         {NULL, 0, NULL, 0}};
    struct lora_merge_adapter ad[LORA_MERGE_MAX_ADAPTERS];
    struct lora_merge_opts o = {.adapters = ad, .threads = default_threads()};
    struct lora_merge_stats st;
    struct mf_err err;
    const char *base = NULL, *out = NULL;
    size_t n = 0;
    int c;
    double v;
    int64_t iv;
    optind = 0;
    opterr = 0;
    /* "-" first: positionals come back in order, so --scale follows its adapter */
    while ((c = getopt_long(argc, argv, "-ho:s:q:j:", opts, NULL)) != -1) {
        switch (c) {
        case 1:
            if (!base) {
                base = optarg;
            } else if (n == LORA_MERGE_MAX_ADAPTERS) {
                return mfc_usage_error(ctx, CMD, "at most %d adapters", LORA_MERGE_MAX_ADAPTERS);
            } else {
                ad[n].scale = split_scale(optarg);
                ad[n].path = optarg;
                n++;
            }
            break;
        case 'h':
            usage(ctx->out);
            return 0;
        case 'o':
            out = optarg;
            break;
        case 's':
            if (n == 0)
                return mfc_usage_error(ctx, CMD, "--scale goes after the adapter it scales");
            if (mf_num_parse_f64(optarg, &v) != 0)
                return mfc_usage_error(ctx, CMD, "--scale takes a number, not '%s'", optarg);
            ad[n - 1].scale = (float)v;
            break;
        case 'q':
            if (lora_merge_parse_ftype(optarg, &o.ftype, &err) != 0)
                return mfc_usage_error(ctx, CMD, "--quantize: %s", err.msg);
            o.quantize = 1;
            break;
        case 'j':
            if (mf_num_parse_i64(optarg, &iv) != 0 || iv < 1 || iv > 64)
                return mfc_usage_error(ctx, CMD, "--threads takes 1 to 64");
            o.threads = (int)iv;
            break;
        default:
            return mfc_usage_error(ctx, CMD, "unknown option '%s'", argv[optind - 1]);
        }
    }
    if (!base)
        return mfc_usage_error(ctx, CMD, "missing BASE.gguf");
    if (n == 0 && !o.quantize)
        return mfc_usage_error(ctx, CMD, "missing ADAPTER.gguf (or --quantize TYPE)");
    if (!out)
        return mfc_usage_error(ctx, CMD, "missing -o OUT.gguf");
    o.n_adapters = n;
    if (lora_merge_file(base, out, &o, &st, &err) != 0)
        return mfc_report(ctx, &err);
    fprintf(ctx->out,
            "%s: %" PRIu64 " tensors, %" PRIu64 " merged (%" PRIu64 " LoRA pairs from %zu "
            "adapter%s), %" PRIu64 " re-encoded, %" PRIu64 " copied\n",
            out, st.n_tensors, st.n_merged, st.n_pairs, n, n == 1 ? "" : "s", st.n_requant,
            st.n_copied);
    if (st.n_ignored)
        fprintf(ctx->err, "mfc: %" PRIu64 " adapter norm tensor%s ignored (as llama.cpp does)\n",
                st.n_ignored, st.n_ignored == 1 ? " was" : "s were");
    return 0;
}
