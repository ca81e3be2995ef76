/*
 * fuzz_lora.c: libFuzzer target for the adapter check (convert/lora_check.c)
 * and the PEFT conversion (convert/lora_peft.c), with the input as the
 * adapter.
 *
 * A one-layer llama base (4 heads, 2 KV heads, every projection, token
 * embedding, output) is written once into a temporary directory. The first
 * input byte picks the mode: even, the rest is a GGUF LoRA checked against
 * the base (lora_check_files, then lora_describe); odd, the rest is a PEFT
 * adapter_model.safetensors next to a fixed adapter_config.json (use_rslora
 * from bit 1) converted with lora_peft_convert_ex. A conversion must fail
 * with a message and leave no output, or write a GGUF LoRA that passes the
 * check against the same base. Seeds in corpus/lora/ are a valid PEFT file
 * and its conversion for this base.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/file.h"
#include "common/gguf.h"
#include "convert/lora.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char dir[64], base_path[128], peft_dir[128], st_path[192], out_path[128];

static int write_base(void)
{
    static const struct {
        const char *name;
        uint32_t n_dims;
        uint64_t ne0, ne1;
    } ts[] = {
        {"token_embd.weight", 2, 32, 64},     {"blk.0.attn_norm.weight", 1, 32, 1},
        {"blk.0.attn_q.weight", 2, 32, 32},   {"blk.0.attn_k.weight", 2, 32, 16},
        {"blk.0.attn_v.weight", 2, 32, 16},   {"blk.0.attn_output.weight", 2, 32, 32},
        {"blk.0.ffn_gate.weight", 2, 32, 48}, {"blk.0.ffn_up.weight", 2, 32, 48},
        {"blk.0.ffn_down.weight", 2, 48, 32}, {"output.weight", 2, 32, 64},
    };
    struct gguf_writer *w;
    struct mf_err err;
    if (gguf_writer_open(base_path, &w, &err) || gguf_writer_add_cstr(w, "general.architecture",
                                                                     "llama", &err) ||
        gguf_writer_add_u32(w, "llama.attention.head_count", 4, &err) ||
        gguf_writer_add_u32(w, "llama.attention.head_count_kv", 2, &err))
        return -1;
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) {
        uint64_t ne[2] = {ts[i].ne0, ts[i].ne1};
        if (gguf_writer_add_tensor(w, ts[i].name, GGML_TYPE_F32, ts[i].n_dims, ne, &err))
            return -1;
    }
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) {
        uint64_t n = gguf_writer_tensor_bytes(w, i);
        void *z = calloc(1, n);
        int rc = !z || gguf_writer_write(w, z, n, &err);
        free(z);
        if (rc)
            return -1;
    }
    int rc = gguf_writer_finish(w, &err);
    gguf_writer_free(w);
    return rc;
}

static void setup(void)
{
    snprintf(dir, sizeof dir, "/tmp/fuzz_lora.XXXXXX");
    if (!mkdtemp(dir))
        abort();
    snprintf(base_path, sizeof base_path, "%s/base.gguf", dir);
    snprintf(peft_dir, sizeof peft_dir, "%s/peft", dir);
    snprintf(st_path, sizeof st_path, "%s/adapter_model.safetensors", peft_dir);
    snprintf(out_path, sizeof out_path, "%s/out.gguf", dir);
    struct mf_err err;
    if (write_base() || mf_file_mkdirs(peft_dir, &err))
        abort();
}

/* Writes a file plainly (no fsync: the atomic writer's would dominate the run). */
static void put(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f || (n && fwrite(p, 1, n, f) != n) || fclose(f) != 0)
        abort();
}

static void check_gguf(const uint8_t *data, size_t size)
{
    struct mf_err err;
    struct lora_summary sum;
    put(out_path, data, size);
    if (lora_check_files(out_path, base_path, &sum, &err) == 0 && sum.n_pairs == 0)
        abort(); /* a passing adapter has pairs */
    struct gguf_file *gf;
    if (gguf_open(out_path, &gf, &err) == 0) {
        struct lora_view v;
        struct lora_tensor *ts = NULL;
        if (lora_view_gguf(gf, &v, &ts, &err) == 0)
            lora_describe(&v, &sum);
        free(ts);
        gguf_close(gf);
    }
    unlink(out_path);
}

static void convert_peft(uint8_t mode, const uint8_t *data, size_t size)
{
    char cfg[256], path[192];
    struct mf_err err;
    int n = snprintf(cfg, sizeof cfg,
                     "{\"peft_type\": \"LORA\", \"r\": 4, \"lora_alpha\": 8, \"use_rslora\": %s}",
                     mode & 2 ? "true" : "false");
    snprintf(path, sizeof path, "%s/adapter_config.json", peft_dir);
    put(path, cfg, (size_t)n);
    put(st_path, data, size);
    struct lora_peft_info info;
    unlink(out_path);
    int rc = lora_peft_convert_ex(peft_dir, base_path, out_path, &info, &err);
    if (rc) {
        if (!err.msg[0] || access(out_path, F_OK) == 0)
            abort(); /* a failure says why and leaves nothing */
        return;
    }
    struct lora_summary sum;
    if (lora_check_files(out_path, base_path, &sum, &err) != 0 || sum.n_pairs != info.n_pairs)
        abort(); /* what the converter writes, the check accepts */
    unlink(out_path);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!dir[0])
        setup();
    if (size < 1)
        return 0;
    if (data[0] & 1)
        convert_peft(data[0], data + 1, size - 1);
    else
        check_gguf(data + 1, size - 1);
    return 0;
}
