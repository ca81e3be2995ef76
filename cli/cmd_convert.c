/*
 * cmd_convert.c: `mfc convert DIR -o OUT.gguf [--outtype T] [--quantize T]`:
 * a Hugging Face model directory (convert/hf.h) to one GGUF file.
 *
 * The output is written atomically (nothing is left at OUT on failure);
 * stdout gets one summary line, stderr the error naming the file, tensor or
 * key. A PEFT adapter directory (adapter_config.json) is converted to a GGUF
 * LoRA instead, which needs the base model: --base BASE.gguf.
 */
#include "config.h"

#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/num.h"
#include "common/quant.h"
#include "cli/cli.h"
#include "convert/hf.h"
#include "convert/lora.h"

#define CMD "convert"

static void usage(FILE *f)
{
    fputs("Usage: mfc convert DIR -o OUT.gguf [OPTIONS]\n\n"
          "Convert a Hugging Face model directory (config.json, *.safetensors,\n"
          "tokenizer.json) to GGUF the way llama.cpp's convert_hf_to_gguf.py does.\n"
          "Architectures: LlamaForCausalLM, MistralForCausalLM. A PEFT adapter directory\n"
          "(adapter_config.json) becomes a GGUF LoRA for the model given with --base.\n\n"
          "  -o, --output=FILE    where to write the GGUF (required)\n"
          "  -t, --outtype=TYPE   auto (default: F16 and BF16 weights keep their type,\n"
          "                       F32 becomes F16), f32, f16 or bf16\n"
          "  -q, --quantize=TYPE  write file type TYPE instead: Q8_0, Q4_K_M, Q6_K, ...\n"
          "      --name=NAME      general.name (default: the directory's name)\n"
          "  -b, --base=FILE      the base model's GGUF (PEFT adapters only)\n"
          "  -j, --threads=N      rows converted in parallel (default: online CPUs)\n",
          f);
}

int mfc_cmd_convert(int argc, char **argv, struct mfc_ctx *ctx)
{
    static const struct option opts[] = {
        {"help", no_argument, NULL, 'h'},          {"output", required_argument, NULL, 'o'},
        {"outtype", required_argument, NULL, 't'}, {"quantize", required_argument, NULL, 'q'},
        {"name", required_argument, NULL, 'n'},    {"base", required_argument, NULL, 'b'},
        {"threads", required_argument, NULL, 'j'}, {NULL, 0, NULL, 0}};
    struct hf_convert_opts o = {.outtype = HF_OUT_AUTO};
    struct hf_convert_info info;
    struct mf_err err;
    const char *out = NULL, *base = NULL;
    int c;
    int64_t iv;
    mf_err_clear(&err);
    optind = 0;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "ho:t:q:b:j:", opts, NULL)) != -1) {
        switch (c) {
        case 'h':
            usage(ctx->out);
            return 0;
        case 'o':
            out = optarg;
            break;
        case 't':
            if (hf_outtype_parse(optarg, &o.outtype) != 0)
                return mfc_usage_error(
                    ctx, CMD, "--outtype must be auto, f32, f16 or bf16, not '%s'", optarg);
            break;
        case 'q':
            if (quant_ftype_from_name(optarg, &o.ftype) != 0)
                return mfc_usage_error(ctx, CMD, "unknown quantization type '%s'", optarg);
            o.quantize = 1;
            break;
        case 'n':
            o.name = optarg;
            break;
        case 'b':
            base = optarg;
            break;
        case 'j':
            if (mf_num_parse_i64(optarg, &iv) != 0 || iv < 1 || iv > 16)
                return mfc_usage_error(ctx, CMD, "--threads must be 1..16, not '%s'", optarg);
            o.threads = (int)iv;
            break;
        default:
            return mfc_usage_error(ctx, CMD, "unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind != argc - 1)
        return mfc_usage_error(ctx, CMD, "give exactly one model directory");
    if (!out)
        return mfc_usage_error(ctx, CMD, "-o OUT.gguf is required");
    const char *dir = argv[optind];
    if (hf_dir_kind(dir) == 2) {
        if (!base)
            return mfc_usage_error(ctx, CMD,
                                   "%s is a PEFT adapter: give its base model with --base "
                                   "BASE.gguf",
                                   dir);
        if (lora_peft_convert(dir, base, out, &err) != 0)
            return mfc_report(ctx, &err);
        fprintf(ctx->out, "%s: LoRA adapter written to %s\n", dir, out);
        return 0;
    }
    if (hf_convert(dir, out, &o, &info, &err) != 0)
        return mfc_report(ctx, &err);
    const char *ft = quant_ftype_name(info.ftype);
    fprintf(ctx->out, "%s: %" PRIu64 " tensors, %s, %" PRIu64 " bytes of weights written to %s\n",
            dir, info.n_tensors, ft ? ft : "?", info.bytes, out);
    return 0;
}
