/*
 * cmd_lora.c: `mfc lora check ADAPTER --base MODEL [--json]`, `mfc lora
 * convert PEFT_DIR --base MODEL -o OUT.gguf`, and the dispatch of `mfc lora
 * merge` to cmd_lora_merge.c.
 *
 * check runs the validation mfc build runs before baking an adapter
 * (convert/lora_check.c) on its own: ADAPTER is a GGUF LoRA or a PEFT
 * directory (converted into a temporary GGUF first, which is removed), MODEL
 * a GGUF file or an image in the store (its weight layer read in place). Exit 0 with a summary on stdout (architecture, rank, alpha,
 * pairs, targets) and any warning on stderr; 1 with the error (naming the
 * tensor and both shapes); 2 for a usage error. convert writes the GGUF LoRA
 * mfc build would bake for `ADAPTER PEFT_DIR` (atomically) and prints the
 * same summary.
 */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/json.h"
#include "cli/cli.h"
#include "convert/lora.h"
#include "store/store.h"

#define CMD "lora check"

static void usage(FILE *f)
{
    fputs("Usage: mfc lora check ADAPTER --base MODEL.gguf [--json]\n"
          "       mfc lora convert PEFT_DIR --base MODEL.gguf -o OUT.gguf [--json]\n"
          "       mfc lora merge BASE.gguf ADAPTER.gguf[:SCALE]... -o OUT.gguf [OPTIONS]\n\n"
          "check: validate a LoRA adapter against a base model, as mfc build does before\n"
          "baking it: architecture, every adapted tensor present in the base, lora_a\n"
          "[base ne0, rank] and lora_b [rank, base ne1], alpha. ADAPTER is a GGUF LoRA or\n"
          "a PEFT directory (adapter_config.json + adapter_model.safetensors).\n\n"
          "convert: write a PEFT directory as a GGUF LoRA (llama.cpp's format) for MODEL.\n\n"
          "  -b, --base=MODEL   the base model: a GGUF file, or an image in the store\n"
          "                     (its weights are read in place); required\n"
          "  -o, --output=FILE  convert: where to write the GGUF LoRA (required)\n"
          "      --json         print the summary as one JSON object\n",
          f);
}

/* The base: a GGUF file, or else an image in the store (its weights read in
 * place). Exactly one of *gf / b->gf is set on success. */
static int open_base(const char *arg, struct gguf_file **gf, struct lora_image_base *b,
                     struct mf_err *err)
{
    char *root = NULL;
    *gf = NULL;
    memset(b, 0, sizeof *b);
    if (access(arg, F_OK) == 0 || strchr(arg, '/') || strstr(arg, ".gguf"))
        return gguf_open(arg, gf, err);
    int rc = store_default_root(&root, err);
    if (!rc)
        rc = lora_image_base_open(root, arg, b, err);
    free(root);
    return rc;
}

/* A GGUF adapter against the base. */
static int check_gguf(const char *path, const struct gguf_file *base, struct lora_summary *sum,
                      struct mf_err *err)
{
    struct gguf_file *a = NULL;
    struct lora_tensor *ts = NULL;
    struct lora_view v;
    int rc = gguf_open(path, &a, err);
    if (!rc)
        rc = lora_view_gguf(a, &v, &ts, err);
    if (!rc)
        rc = lora_check(base, &v, sum, err);
    free(ts);
    gguf_close(a);
    return rc;
}

/* Checks a PEFT directory by converting it into a temporary GGUF. */
static int check_peft(const char *dir, const struct gguf_file *base, struct lora_summary *sum,
                      struct lora_peft_info *info, struct mf_err *err)
{
    char tmpl[] = "/tmp/mfc-lora-check-XXXXXX";
    char path[64];
    if (!mkdtemp(tmpl))
        return mf_err_sys(err, MF_EIO, errno, "cannot create a temporary directory");
    snprintf(path, sizeof path, "%s/adapter.gguf", tmpl);
    int rc = lora_peft_convert_gf(dir, base, path, info, err);
    if (!rc)
        *sum = info->sum;
    unlink(path);
    rmdir(tmpl);
    return rc;
}

static void print_text(FILE *f, const struct lora_summary *s, const struct lora_peft_info *pi)
{
    fprintf(f, "architecture: %s\n", s->arch);
    if (s->rank_min == s->rank_max)
        fprintf(f, "rank: %d\n", (int)s->rank_min);
    else
        fprintf(f, "rank: %d..%d\n", (int)s->rank_min, (int)s->rank_max);
    if (s->has_alpha)
        fprintf(f, "alpha: %g (scale = %g x user scale)\n", (double)s->alpha,
                (double)s->alpha / (double)s->rank_max);
    else
        fprintf(f, "alpha: none (scale = user scale)\n");
    fprintf(f, "tensors: %zu pairs in %lld layers%s\n", s->n_pairs, (long long)s->n_layers,
            s->n_ignored ? " (norm tensors ignored)" : "");
    fprintf(f, "targets: %s\n", s->targets);
    if (pi) {
        fprintf(f, "peft: r=%d lora_alpha=%g%s, %zu q/k lora_b permuted", (int)pi->rank,
                (double)pi->peft_alpha, pi->rslora ? " use_rslora (alpha written as alpha*sqrt(r))" : "",
                pi->n_permuted);
        if (pi->base_model[0])
            fprintf(f, ", base_model_name_or_path %s", pi->base_model);
        fputc('\n', f);
    }
}

static int print_json(FILE *f, const struct lora_summary *s, const struct lora_peft_info *pi,
                      struct mf_err *err)
{
    json_t *o = json_pack("{s:s, s:i, s:i, s:b, s:f, s:I, s:I, s:I, s:s, s:s}", "architecture",
                          s->arch, "rank_min", (int)s->rank_min, "rank_max", (int)s->rank_max,
                          "has_alpha", s->has_alpha, "alpha", (double)s->alpha, "pairs",
                          (json_int_t)s->n_pairs, "layers", (json_int_t)s->n_layers, "ignored",
                          (json_int_t)s->n_ignored, "targets", s->targets, "warning",
                          s->warning);
    if (o && pi)
        json_object_set_new(o, "peft",
                            json_pack("{s:i, s:f, s:b, s:I, s:s}", "r", (int)pi->rank,
                                      "lora_alpha", (double)pi->peft_alpha, "use_rslora",
                                      pi->rslora, "permuted", (json_int_t)pi->n_permuted,
                                      "base_model", pi->base_model));
    struct mf_buf b;
    mf_buf_init(&b, 1u << 20);
    int rc = o ? mf_json_dump(o, JSON_SORT_KEYS | JSON_COMPACT, &b, err)
               : mf_err_set(err, MF_ENOMEM, "out of memory");
    if (!rc)
        fprintf(f, "%.*s\n", (int)b.len, b.data);
    mf_buf_free(&b);
    json_decref(o);
    return rc;
}

/* check (convert == 0) or convert (convert == 1). */
static int lora_check_cmd(int argc, char **argv, int convert, struct mfc_ctx *ctx)
{
    static const struct option opts[] = {{"help", no_argument, NULL, 'h'},
                                         {"base", required_argument, NULL, 'b'},
                                         {"output", required_argument, NULL, 'o'},
                                         {"json", no_argument, NULL, 'J'},
                                         {NULL, 0, NULL, 0}};
    const char *cmd = convert ? "lora convert" : CMD;
    const char *base = NULL, *out = NULL;
    int json = 0, c;
    optind = 0;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "hb:o:", opts, NULL)) != -1) {
        if (c == 'h') {
            usage(ctx->out);
            return 0;
        } else if (c == 'b') {
            base = optarg;
        } else if (c == 'o' && convert) {
            out = optarg;
        } else if (c == 'J') {
            json = 1;
        } else {
            return mfc_usage_error(ctx, cmd, "unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind + 1 != argc)
        return mfc_usage_error(ctx, cmd,
                               convert ? "expected one PEFT directory"
                                       : "expected one ADAPTER (a GGUF LoRA or a PEFT directory)");
    if (!base)
        return mfc_usage_error(ctx, cmd, "--base MODEL.gguf is required");
    if (convert && !out)
        return mfc_usage_error(ctx, cmd, "-o OUT.gguf is required");
    const char *adapter = argv[optind];
    struct lora_summary sum;
    struct lora_peft_info info;
    struct mf_err err;
    mf_err_clear(&err);
    int peft = lora_peft_is_dir(adapter);
    struct gguf_file *bgf = NULL;
    struct lora_image_base img;
    int rc = open_base(base, &bgf, &img, &err);
    const struct gguf_file *b = bgf ? bgf : img.gf;
    if (!rc && convert && !peft)
        rc = mf_err_set(&err, MF_EINVAL,
                        "%s is not a PEFT adapter directory (no adapter_config.json)", adapter);
    else if (!rc && convert)
        rc = lora_peft_convert_gf(adapter, b, out, &info, &err);
    else if (!rc)
        rc = peft ? check_peft(adapter, b, &sum, &info, &err)
                  : check_gguf(adapter, b, &sum, &err);
    gguf_close(bgf);
    lora_image_base_close(&img);
    if (!rc && convert)
        sum = info.sum;
    if (!rc && json)
        rc = print_json(ctx->out, &sum, peft ? &info : NULL, &err);
    else if (!rc)
        print_text(ctx->out, &sum, peft ? &info : NULL);
    if (rc)
        return mfc_report(ctx, &err);
    if (sum.warning[0])
        fprintf(ctx->err, "mfc %s: warning: %s\n", cmd, sum.warning);
    return 0;
}

int mfc_cmd_lora(int argc, char **argv, struct mfc_ctx *ctx)
{
    if (argc >= 2 && strcmp(argv[1], "merge") == 0)
        return mfc_lora_merge(argc - 1, argv + 1, ctx);
    if (argc >= 2 && strcmp(argv[1], "check") == 0)
        return lora_check_cmd(argc - 1, argv + 1, 0, ctx);
    if (argc >= 2 && strcmp(argv[1], "convert") == 0)
        return lora_check_cmd(argc - 1, argv + 1, 1, ctx);
    if (argc >= 2 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)) {
        usage(ctx->out);
        return 0;
    }
    return mfc_usage_error(ctx, "lora", "expected 'check', 'convert' or 'merge'");
}
