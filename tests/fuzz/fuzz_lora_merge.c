/*
 * fuzz_lora_merge.c: libFuzzer target for the adapter checks and the merge
 * of convert/lora_merge.c, with the input as the GGUF LoRA.
 *
 * A small base (F32 and F16 matrices, a 1-D norm, the token embedding) is
 * written once into a temporary directory. Each input's first byte picks
 * the options (scale, --quantize none/Q8_0/Q4_0/F16, threads 1 or 2), the
 * rest is the adapter file; lora_merge_file must either fail cleanly with
 * a message or write a GGUF the reader accepts, and never leave a file at
 * the output path on failure. Seeds in corpus/lora_merge/ are adapters for
 * this base (valid, transposed, rank-mismatched, norm-carrying).
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/gguf.h"
#include "common/quant.h"
#include "convert/lora_merge.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char dir[64], base_path[128], ad_path[128], out_path[128];

static int write_base(void)
{
    static const struct {
        const char *name;
        enum ggml_type type;
        uint32_t n_dims;
        uint64_t ne0, ne1;
    } ts[] = {
        {"token_embd.weight", GGML_TYPE_F16, 2, 32, 16},
        {"blk.0.attn_norm.weight", GGML_TYPE_F32, 1, 32, 1},
        {"blk.0.attn_q.weight", GGML_TYPE_F32, 2, 32, 32},
        {"blk.0.ffn_down.weight", GGML_TYPE_F16, 2, 64, 32},
        {"output.weight", GGML_TYPE_F32, 2, 32, 16},
    };
    struct gguf_writer *w = NULL;
    struct mf_err err;
    float row[64];
    uint8_t enc[256];
    int rc = gguf_writer_open(base_path, &w, &err);
    if (!rc)
        rc = gguf_writer_add_cstr(w, "general.architecture", "llama", &err);
    if (!rc)
        rc = gguf_writer_add_u32(w, "llama.block_count", 1, &err);
    for (size_t i = 0; !rc && i < sizeof ts / sizeof ts[0]; i++) {
        uint64_t ne[2] = {ts[i].ne0, ts[i].ne1};
        rc = gguf_writer_add_tensor(w, ts[i].name, ts[i].type, ts[i].n_dims, ne, &err);
    }
    for (size_t i = 0; !rc && i < sizeof ts / sizeof ts[0]; i++) {
        uint64_t rb = 0;
        ggml_type_row_size(ts[i].type, ts[i].ne0, &rb);
        for (uint64_t r = 0; !rc && r < ts[i].ne1; r++) {
            for (uint64_t k = 0; k < ts[i].ne0; k++)
                row[k] = (float)((r * 31 + k * 7) % 17) / 17.0f - 0.5f;
            rc = quant_quantize_row(ts[i].type, row, enc, (int64_t)ts[i].ne0, &err);
            if (!rc)
                rc = gguf_writer_write(w, enc, rb, &err);
        }
    }
    if (!rc)
        rc = gguf_writer_finish(w, &err);
    gguf_writer_free(w);
    return rc;
}

static int init(void)
{
    snprintf(dir, sizeof dir, "/tmp/fuzz-lora-merge-XXXXXX");
    if (!mkdtemp(dir))
        return -1;
    snprintf(base_path, sizeof base_path, "%s/base.gguf", dir);
    snprintf(ad_path, sizeof ad_path, "%s/adapter.gguf", dir);
    snprintf(out_path, sizeof out_path, "%s/out.gguf", dir);
    return write_base();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int ready = 0;
    static const enum quant_ftype types[] = {QUANT_FTYPE_MOSTLY_Q8_0, QUANT_FTYPE_MOSTLY_Q4_0,
                                             QUANT_FTYPE_MOSTLY_F16};
    if (!ready) {
        if (init() != 0)
            abort();
        ready = 1;
    }
    if (size < 1)
        return 0;
    FILE *f = fopen(ad_path, "wb");
    if (!f)
        abort();
    if (size > 1 && fwrite(data + 1, 1, size - 1, f) != size - 1)
        abort();
    fclose(f);
    uint8_t opt = data[0];
    struct lora_merge_adapter ad = {ad_path, (float)((opt & 7) - 3) * 0.5f};
    struct lora_merge_opts o = {.adapters = &ad, .n_adapters = 1, .threads = 1 + ((opt >> 5) & 1)};
    if ((opt >> 3) & 3) {
        o.quantize = 1;
        o.ftype = types[((opt >> 3) & 3) - 1];
    }
    struct mf_err err;
    unlink(out_path);
    int rc = lora_merge_file(base_path, out_path, &o, NULL, &err);
    if (rc) {
        if (err.msg[0] == '\0' || access(out_path, F_OK) == 0)
            abort(); /* a failure names its cause and leaves nothing behind */
        return 0;
    }
    struct gguf_file *gf = NULL;
    if (gguf_open(out_path, &gf, &err) != 0 || gguf_n_tensors(gf) != 5)
        abort(); /* what the merge writes must read back */
    gguf_close(gf);
    return 0;
}
