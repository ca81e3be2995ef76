/*
 * cmd_inspect.c: `mfc inspect FILE.gguf [--json] [--tensors]`.
 *
 * Opens the file with the GGUF reader (full header validation, mmap),
 * builds the summary of common/inspect.c and prints it as aligned text or,
 * with --json, as the JSON object itself, so both outputs carry the same
 * facts. Only header pages are read: bench/inspect checks with fincore that
 * inspecting a multi-GB model leaves its tensor data out of the page cache.
 */
#include "config.h"

#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/gguf.h"
#include "common/json.h"
#include "cli/cli.h"
#include "common/inspect.h"

static void usage(FILE *f)
{
    fprintf(f, "Usage: mfc inspect [--json] [--tensors] FILE.gguf\n\n"
               "Show what a GGUF model or LoRA adapter holds: architecture, parameter count,\n"
               "file type, dimensions, RoPE, tokenizer, chat template and adapter metadata.\n"
               "Only the header is read, never the tensor data.\n\n"
               "  --json     print the same facts as one JSON object\n"
               "  --tensors  add the tensor table (name, type, shape, bytes, offset)\n");
}

/* ------------------------------------------------------------------------
 * text output
 * ------------------------------------------------------------------------ */

static void row(FILE *f, const char *label, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void row(FILE *f, const char *label, const char *fmt, ...)
{
    va_list ap;
    fprintf(f, "%-16s ", label);
    va_start(ap, fmt);
    vfprintf(f, fmt, ap);
    va_end(ap);
    fputc('\n', f);
}

/* A JSON scalar as text into buf: "-" for null or absent. */
static const char *txt(const json_t *o, const char *key, char *buf, size_t cap)
{
    const json_t *v = json_object_get(o, key);
    if (json_is_string(v))
        snprintf(buf, cap, "%s", json_string_value(v));
    else if (json_is_integer(v))
        snprintf(buf, cap, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
    else if (json_is_real(v))
        snprintf(buf, cap, "%g", json_real_value(v));
    else if (json_is_boolean(v))
        snprintf(buf, cap, "%s", json_is_true(v) ? "yes" : "no");
    else
        snprintf(buf, cap, "-");
    return buf;
}

/* Slot i of the caller's tb[][128]: several texts in one printf. */
#define T(i, o, k) txt((o), (k), tb[i], sizeof tb[0])

static void print_file(FILE *f, const json_t *s)
{
    char tb[4][128], size[32];
    const json_t *ft = json_object_get(s, "file_type");
    mf_inspect_bytes((uint64_t)json_integer_value(json_object_get(s, "size")), size, sizeof size);
    row(f, "file", "%s", T(0, s, "file"));
    row(f, "size", "%s (%s bytes)", size, T(0, s, "size"));
    row(f, "gguf", "version %s, %s KVs, %s tensors, alignment %s", T(0, s, "gguf_version"),
        T(1, s, "kv_count"), T(2, s, "tensor_count"), T(3, s, "alignment"));
    row(f, "type", "%s", T(0, s, "type"));
    row(f, "architecture", "%s", T(0, s, "architecture"));
    row(f, "name", "%s", T(0, s, "name"));
    row(f, "parameters", "%s (%s)", T(0, s, "parameters_human"), T(1, s, "parameters"));
    if (json_is_object(ft))
        row(f, "file type", "%s (%s)", T(0, ft, "name"), T(1, ft, "id"));
    else
        row(f, "file type", "-");
    const char *k;
    json_t *v;
    struct mf_buf types;
    mf_buf_init(&types, 4096);
    json_object_foreach((json_t *)json_object_get(s, "tensor_types"), k, v)
        mf_buf_printf(&types, NULL, "%s%s %" JSON_INTEGER_FORMAT, types.len ? ", " : "", k,
                      json_integer_value(v));
    row(f, "tensor types", "%s", types.len ? types.data : "-");
    mf_buf_free(&types);
}

static void print_model(FILE *f, const json_t *s)
{
    char tb[5][128];
    const json_t *r = json_object_get(s, "rope");
    row(f, "context length", "%s", T(0, s, "context_length"));
    row(f, "layers", "%s", T(0, s, "block_count"));
    row(f, "heads", "%s (kv %s)", T(0, s, "head_count"), T(1, s, "head_count_kv"));
    row(f, "embedding", "%s", T(0, s, "embedding_length"));
    row(f, "feed forward", "%s", T(0, s, "feed_forward_length"));
    row(f, "head dim", "%s", T(0, s, "head_dim"));
    row(f, "vocab size", "%s", T(0, s, "vocab_size"));
    row(f, "norm eps", "%s", T(0, s, "norm_eps"));
    row(f, "rope", "%s dims, freq base %s, scaling %s (factor %s), rope_freqs tensor: %s",
        T(0, r, "dimension_count"), T(1, r, "freq_base"), T(2, r, "scaling_type"),
        T(3, r, "scaling_factor"), T(4, r, "freqs_tensor"));
    if (json_is_true(json_object_get(r, "long_factors")) ||
        json_is_number(json_object_get(r, "original_context_length")))
        row(f, "", "original context %s, attn_factor %s, LongRoPE factors: %s",
            T(0, r, "original_context_length"), T(1, r, "attn_factor"), T(2, r, "long_factors"));
}

/* The family: what users know it as, and what sets its forward pass apart. */
static void print_family(FILE *f, const json_t *s)
{
    char tb[4][128];
    const json_t *fam = json_object_get(s, "family");
    if (!json_is_object(fam) || json_is_null(json_object_get(fam, "name")))
        return;
    if (!json_is_true(json_object_get(fam, "supported"))) {
        row(f, "family", "%s (mfc-serve does not run it)", T(0, fam, "name"));
        return;
    }
    row(f, "family", "%s: %s", T(0, fam, "name"), T(1, fam, "known_as"));
    struct mf_buf tr;
    mf_buf_init(&tr, 1024);
    size_t i;
    json_t *v;
    json_array_foreach(json_object_get(fam, "traits"), i, v)
        mf_buf_printf(&tr, NULL, "%s%s", i ? ", " : "", json_string_value(v));
    row(f, "traits", "%s", tr.len ? tr.data : "-");
    mf_buf_free(&tr);
    const json_t *e = json_object_get(fam, "experts");
    if (json_is_object(e))
        row(f, "experts", "%s, %s used a token (feed forward %s)", T(0, e, "count"),
            T(1, e, "used"), T(2, e, "feed_forward_length"));
    const json_t *w = json_object_get(fam, "sliding_window");
    if (json_is_object(w))
        row(f, "sliding window", "%s positions, period %s, freq base %s", T(0, w, "window"),
            T(1, w, "period"), T(2, w, "freq_base"));
    if (!json_is_null(json_object_get(fam, "attn_softcap")) ||
        !json_is_null(json_object_get(fam, "final_softcap")))
        row(f, "soft-caps", "attention %s, logits %s", T(0, fam, "attn_softcap"),
            T(1, fam, "final_softcap"));
}

static void print_tokenizer(FILE *f, const json_t *s)
{
    char tb[5][128];
    const json_t *t = json_object_get(s, "tokenizer"), *c = json_object_get(s, "chat_template");
    row(f, "tokenizer", "%s (pre %s), %s tokens, %s merges", T(0, t, "model"), T(1, t, "pre"),
        T(2, t, "tokens"), T(3, t, "merges"));
    row(f, "bos / eos", "%s / %s (add bos %s, add eos %s)", T(0, t, "bos_token_id"),
        T(1, t, "eos_token_id"), T(2, t, "add_bos_token"), T(3, t, "add_eos_token"));
    if (json_is_true(json_object_get(c, "present")))
        row(f, "chat template", "yes (%s bytes)", T(0, c, "length"));
    else
        row(f, "chat template", "no");
}

static void print_adapter(FILE *f, const json_t *s)
{
    char tb[5][128];
    const json_t *a = json_object_get(s, "adapter");
    if (!a)
        return;
    row(f, "adapter", "%s, alpha %s, rank %s, %s tensor pairs", T(0, a, "type"), T(1, a, "alpha"),
        T(2, a, "rank"), T(3, a, "pairs"));
    size_t i, n = json_array_size(json_object_get(a, "targets"));
    json_t *v;
    json_array_foreach(json_object_get(a, "targets"), i, v)
    {
        if (i == 8) {
            fprintf(f, "%-16s ... %zu more\n", "", n - 8);
            break;
        }
        row(f, i ? "" : "targets", "%s", json_string_value(v));
    }
    json_array_foreach(json_object_get(a, "unpaired"), i, v)
        row(f, i ? "" : "unpaired", "%s", json_string_value(v));
}

static void print_tensors(FILE *f, const json_t *s)
{
    const json_t *arr = json_object_get(s, "tensors");
    size_t i, d;
    json_t *t, *x;
    if (!arr)
        return;
    fprintf(f, "\n%-40s %-6s %-24s %14s %14s\n", "NAME", "TYPE", "SHAPE", "BYTES", "OFFSET");
    json_array_foreach(arr, i, t)
    {
        char shape[96] = "";
        size_t used = 0;
        json_array_foreach(json_object_get(t, "shape"), d, x)
        {
            int n = snprintf(shape + used, sizeof shape - used, "%s%" JSON_INTEGER_FORMAT,
                             d ? " x " : "", json_integer_value(x));
            if (n < 0 || (size_t)n >= sizeof shape - used)
                break;
            used += (size_t)n;
        }
        fprintf(f, "%-40s %-6s %-24s %14" JSON_INTEGER_FORMAT " %14" JSON_INTEGER_FORMAT "\n",
                json_string_value(json_object_get(t, "name")),
                json_string_value(json_object_get(t, "type")), shape,
                json_integer_value(json_object_get(t, "bytes")),
                json_integer_value(json_object_get(t, "offset")));
    }
}

/* ------------------------------------------------------------------------
 * the command
 * ------------------------------------------------------------------------ */

static int emit(struct mfc_ctx *ctx, const json_t *s, int as_json)
{
    if (!as_json) {
        const json_t *a = json_object_get(s, "adapter");
        print_file(ctx->out, s);
        if (!a) { /* adapters carry no hyperparameters or vocabulary */
            print_family(ctx->out, s);
            print_model(ctx->out, s);
            print_tokenizer(ctx->out, s);
        }
        print_adapter(ctx->out, s);
        print_tensors(ctx->out, s);
        return 0;
    }
    struct mf_buf b;
    struct mf_err err;
    mf_buf_init(&b, (size_t)1 << 30);
    int rc = mf_json_dump(s, JSON_INDENT(2), &b, &err);
    if (!rc)
        fprintf(ctx->out, "%s\n", b.data);
    mf_buf_free(&b);
    return rc ? mfc_report(ctx, &err) : 0;
}

int mfc_cmd_inspect(int argc, char **argv, struct mfc_ctx *ctx)
{
    static const struct option opts[] = {
        {"json", no_argument, NULL, 'j'},
        {"tensors", no_argument, NULL, 't'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int as_json = 0, with_tensors = 0, c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        if (c == 'j')
            as_json = 1;
        else if (c == 't')
            with_tensors = 1;
        else if (c == 'h')
            return usage(ctx->out), 0;
        else
            return mfc_usage_error(ctx, "inspect", "unknown option '%s'", argv[optind - 1]);
    }
    if (optind != argc - 1)
        return mfc_usage_error(ctx, "inspect", "expects one GGUF file");
    struct mf_err err;
    struct gguf_file *gf;
    if (access(argv[optind], F_OK) != 0 && !strstr(argv[optind], ".gguf")) /* an image ref */
        return mfc_image_inspect(argv[optind], ctx);
    if (gguf_open(argv[optind], &gf, &err) != 0)
        return mfc_report(ctx, &err);
    json_t *s = mf_inspect_gguf(gf, with_tensors, &err);
    int status = s ? emit(ctx, s, as_json) : mfc_report(ctx, &err);
    json_decref(s);
    gguf_close(gf);
    return status;
}
