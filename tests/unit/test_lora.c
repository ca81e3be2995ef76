/*
 * test_lora.c: unit tests for convert/lora_check.c and lora_peft.c's name
 * map.
 *
 * A base model and adapters are written with the GGUF writer into a temp
 * directory (tensor data zero: the check reads headers only). Each adapter
 * has one defect of the kinds the issue lists (other architecture, other
 * hidden size, missing base tensor, transposed lora_a, rank mismatch) plus
 * the others llama.cpp refuses (missing half, bad suffix, quantized half,
 * not an adapter, embedding vocabulary); each error class and message (the
 * tensor and both shapes) is checked. A good adapter's summary is checked
 * field by field. PEFT conversion paths the CLI tests do not reach (a qwen2
 * base, which is not permuted; an unknown architecture; config fields a
 * GGUF LoRA cannot express) use a PEFT directory written here.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/err.h"
#include "common/file.h"
#include "common/gguf.h"
#include "exec/exec_int.h"
#include "convert/lora.h"

#define EMBD 32
#define FF 48
#define VOCAB 300
#define QKV 32 /* 4 heads x 8 */
#define KV 16  /* 2 kv heads x 8 */

static char dir[64];

struct tdef {
    const char *name;
    uint32_t type;
    uint64_t ne0, ne1; /* ne1 0: 1-D */
};

/* Writes a GGUF with the KVs (NULL-ended key/value string pairs; the value
 * "@alpha=X" writes adapter.lora.alpha as f32) and tensors. */
static void write_gguf(const char *name, const char *const *kvs, const struct tdef *t, size_t n)
{
    char path[128];
    struct gguf_writer *w;
    struct mf_err err;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    assert_int_equal(gguf_writer_open(path, &w, &err), 0);
    for (size_t i = 0; kvs && kvs[i]; i += 2) {
        if (strncmp(kvs[i], "@alpha=", 7) == 0)
            assert_int_equal(gguf_writer_add_f32(w, "adapter.lora.alpha",
                                                 strtof(kvs[i] + 7, NULL), &err), 0);
        else
            assert_int_equal(gguf_writer_add_cstr(w, kvs[i], kvs[i + 1], &err), 0);
        if (strncmp(kvs[i], "@", 1) == 0)
            i--; /* "@..." entries take one slot */
    }
    for (size_t i = 0; i < n; i++) {
        uint64_t ne[2] = {t[i].ne0, t[i].ne1 ? t[i].ne1 : 1};
        assert_int_equal(gguf_writer_add_tensor(w, t[i].name, (enum ggml_type)t[i].type,
                                                t[i].ne1 ? 2 : 1, ne, &err), 0);
    }
    for (size_t i = 0; i < n; i++) {
        uint64_t bytes = gguf_writer_tensor_bytes(w, i);
        void *z = calloc(1, bytes ? bytes : 1);
        assert_int_equal(gguf_writer_write(w, z, bytes, &err), 0);
        free(z);
    }
    assert_int_equal(gguf_writer_finish(w, &err), 0);
    gguf_writer_free(w);
}

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/test_lora.XXXXXX");
    assert_non_null(mkdtemp(dir));
    static const char *const kv[] = {"general.architecture", "llama", NULL};
    const struct tdef base[] = {
        {"token_embd.weight", GGML_TYPE_F32, EMBD, VOCAB},
        {"blk.0.attn_q.weight", GGML_TYPE_F32, EMBD, QKV},
        {"blk.0.attn_k.weight", GGML_TYPE_F32, EMBD, KV},
        {"blk.0.attn_v.weight", GGML_TYPE_F32, EMBD, KV},
        {"blk.0.ffn_down.weight", GGML_TYPE_F32, FF, EMBD},
        {"blk.1.attn_q.weight", GGML_TYPE_F32, EMBD, QKV},
        {"blk.0.attn_norm.weight", GGML_TYPE_F32, EMBD, 0},
    };
    write_gguf("base.gguf", kv, base, sizeof base / sizeof base[0]);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
    return 0;
}

static const char *const adapter_kv[] = {"general.architecture", "llama", "general.type",
                                         "adapter", "adapter.type", "lora", "@alpha=16", NULL};

/* Writes adapter tensors t (with adapter_kv unless kvs given) and checks it;
 * returns the code, err and sum filled. */
static int check(const char *const *kvs, const struct tdef *t, size_t n,
                 struct lora_summary *sum, struct mf_err *err)
{
    char a[128], b[128];
    write_gguf("a.gguf", kvs ? kvs : adapter_kv, t, n);
    snprintf(a, sizeof a, "%s/a.gguf", dir);
    snprintf(b, sizeof b, "%s/base.gguf", dir);
    mf_err_clear(err);
    return lora_check_files(a, b, sum, err);
}

#define N(x) (sizeof(x) / sizeof((x)[0]))

static void expect(int rc, const struct mf_err *err, int code, const char *want)
{
    if (rc != code || !strstr(err->msg, want))
        fail_msg("rc %d (want %d): \"%s\" lacks \"%s\"", rc, code, err->msg, want);
}

static void test_good(void **state)
{
    (void)state;
    const struct tdef t[] = {
        {"blk.0.attn_q.weight.lora_a", GGML_TYPE_F32, EMBD, 4},
        {"blk.0.attn_q.weight.lora_b", GGML_TYPE_F16, 4, QKV},
        {"blk.1.attn_q.weight.lora_a", GGML_TYPE_BF16, EMBD, 4},
        {"blk.1.attn_q.weight.lora_b", GGML_TYPE_F32, 4, QKV},
        {"blk.0.ffn_down.weight.lora_a", GGML_TYPE_F32, FF, 8},
        {"blk.0.ffn_down.weight.lora_b", GGML_TYPE_F32, 8, EMBD},
        {"blk.0.attn_norm.weight", GGML_TYPE_F32, EMBD, 0},
    };
    struct lora_summary s;
    struct mf_err err;
    assert_int_equal(check(NULL, t, N(t), &s, &err), 0);
    assert_string_equal(s.arch, "llama");
    assert_int_equal(s.rank_min, 4);
    assert_int_equal(s.rank_max, 8);
    assert_true(s.has_alpha);
    assert_true(s.alpha == 16.0f);
    assert_int_equal(s.n_pairs, 3);
    assert_int_equal(s.n_ignored, 1);
    assert_int_equal(s.n_layers, 2);
    assert_string_equal(s.targets, "attn_q ffn_down");
    assert_string_equal(s.warning, "");
}

static void test_embedding(void **state)
{
    (void)state;
    const struct tdef good[] = {
        {"token_embd.weight.lora_a", GGML_TYPE_F32, 4, VOCAB},
        {"token_embd.weight.lora_b", GGML_TYPE_F32, 4, EMBD},
    };
    struct lora_summary s;
    struct mf_err err;
    assert_int_equal(check(NULL, good, N(good), &s, &err), 0);
    assert_string_equal(s.targets, "token_embd");
    assert_non_null(strstr(s.warning, "token_embd"));
    const struct tdef vocab[] = {
        {"token_embd.weight.lora_a", GGML_TYPE_F32, 4, VOCAB + 10},
        {"token_embd.weight.lora_b", GGML_TYPE_F32, 4, EMBD},
    };
    expect(check(NULL, vocab, N(vocab), &s, &err), &err, MF_EINVAL,
           "embedding lora_a 'token_embd.weight.lora_a' is [4, 310] but base tensor "
           "'token_embd.weight' is [32, 300]: the adapter covers 310 tokens, the base "
           "vocabulary has 300");
    const struct tdef width[] = {
        {"token_embd.weight.lora_a", GGML_TYPE_F32, 4, VOCAB},
        {"token_embd.weight.lora_b", GGML_TYPE_F32, 4, 64},
    };
    expect(check(NULL, width, N(width), &s, &err), &err, MF_EINVAL,
           "embedding lora_b 'token_embd.weight.lora_b' is [4, 64] but base tensor "
           "'token_embd.weight' is [32, 300]: embedding width 64 against the base's 32");
    const struct tdef rank[] = {
        {"token_embd.weight.lora_a", GGML_TYPE_F32, 4, VOCAB},
        {"token_embd.weight.lora_b", GGML_TYPE_F32, 8, EMBD},
    };
    expect(check(NULL, rank, N(rank), &s, &err), &err, MF_EINVAL, "rank mismatch");
}

static void test_other_arch(void **state)
{
    (void)state;
    static const char *const kv[] = {"general.architecture", "qwen2", "general.type", "adapter",
                                     "adapter.type", "lora", "@alpha=16", NULL};
    const struct tdef t[] = {
        {"blk.0.attn_q.weight.lora_a", GGML_TYPE_F32, EMBD, 4},
        {"blk.0.attn_q.weight.lora_b", GGML_TYPE_F32, 4, QKV},
    };
    struct mf_err err;
    expect(check(kv, t, N(t), NULL, &err), &err, MF_EINVAL,
           "a.gguf is an adapter for architecture 'qwen2', but the base model");
    assert_non_null(strstr(err.msg, "base.gguf is 'llama'"));
}

static void test_hidden_size(void **state)
{
    (void)state;
    const struct tdef t[] = {
        {"blk.0.attn_q.weight.lora_a", GGML_TYPE_F32, 64, 4},
        {"blk.0.attn_q.weight.lora_b", GGML_TYPE_F32, 4, QKV},
    };
    struct mf_err err;
    expect(check(NULL, t, N(t), NULL, &err), &err, MF_EINVAL,
           "lora_a 'blk.0.attn_q.weight.lora_a' is [64, 4] but base tensor "
           "'blk.0.attn_q.weight' is [32, 32]: lora_a ne0 must be the base's ne0 (32) "
           "(other hidden size?");
    const struct tdef out[] = {
        {"blk.0.attn_k.weight.lora_a", GGML_TYPE_F32, EMBD, 4},
        {"blk.0.attn_k.weight.lora_b", GGML_TYPE_F32, 4, 32},
    };
    expect(check(NULL, out, N(out), NULL, &err), &err, MF_EINVAL,
           "lora_b 'blk.0.attn_k.weight.lora_b' is [4, 32] but base tensor "
           "'blk.0.attn_k.weight' is [32, 16]: lora_b ne1 must be the base's ne1 (16)");
}

static void test_missing_tensor(void **state)
{
    (void)state;
    const struct tdef t[] = {
        {"blk.7.attn_q.weight.lora_a", GGML_TYPE_F32, EMBD, 4},
        {"blk.7.attn_q.weight.lora_b", GGML_TYPE_F32, 4, QKV},
    };
    struct mf_err err;
    expect(check(NULL, t, N(t), NULL, &err), &err, MF_EINVAL,
           "tensor 'blk.7.attn_q.weight.lora_a' adapts 'blk.7.attn_q.weight', which the base "
           "model");
    assert_non_null(strstr(err.msg, "wrong base model?"));
    const struct tdef o[] = {
        {"output.weight.lora_a", GGML_TYPE_F32, EMBD, 4},
        {"output.weight.lora_b", GGML_TYPE_F32, 4, VOCAB},
    };
    expect(check(NULL, o, N(o), NULL, &err), &err, MF_EINVAL, "tied to token_embd.weight");
}

static void test_transposed_a(void **state)
{
    (void)state;
    const struct tdef t[] = {
        {"blk.0.attn_q.weight.lora_a", GGML_TYPE_F32, 4, EMBD},
        {"blk.0.attn_q.weight.lora_b", GGML_TYPE_F32, 4, QKV},
    };
    struct mf_err err;
    expect(check(NULL, t, N(t), NULL, &err), &err, MF_EINVAL,
           "lora_a 'blk.0.attn_q.weight.lora_a' is [4, 32] but base tensor "
           "'blk.0.attn_q.weight' is [32, 32]: lora_a ne0 must be the base's ne0 (32) (lora_a "
           "looks transposed");
}

static void test_rank_mismatch(void **state)
{
    (void)state;
    const struct tdef t[] = {
        {"blk.0.attn_q.weight.lora_a", GGML_TYPE_F32, EMBD, 4},
        {"blk.0.attn_q.weight.lora_b", GGML_TYPE_F32, 8, QKV},
    };
    struct mf_err err;
    expect(check(NULL, t, N(t), NULL, &err), &err, MF_EINVAL,
           "rank mismatch: lora_a 'blk.0.attn_q.weight.lora_a' is [32, 4] and lora_b "
           "'blk.0.attn_q.weight.lora_b' is [8, 32]");
}

static void test_rank_limits(void **state)
{
    (void)state;
    struct lora_summary s;
    struct mf_err err;
    const struct tdef big[] = {
        {"blk.0.attn_q.weight.lora_a", GGML_TYPE_F16, EMBD, 1025},
        {"blk.0.attn_q.weight.lora_b", GGML_TYPE_F16, 1025, QKV},
    };
    assert_int_equal(check(NULL, big, N(big), &s, &err), 0);
    assert_non_null(strstr(s.warning, "rank 1025 is above the 1024 mfc-serve applies"));
    const struct tdef huge[] = {
        {"blk.0.attn_q.weight.lora_a", GGML_TYPE_F16, EMBD, 65537},
        {"blk.0.attn_q.weight.lora_b", GGML_TYPE_F16, 65537, QKV},
    };
    expect(check(NULL, huge, N(huge), &s, &err), &err, MF_EUNSUPPORTED,
           "tensor 'blk.0.attn_q.weight.lora_a' has rank 65537 (at most 65536)");
}

static void test_pairs_and_names(void **state)
{
    (void)state;
    struct mf_err err;
    const struct tdef no_b[] = {{"blk.0.attn_q.weight.lora_a", GGML_TYPE_F32, EMBD, 4}};
    expect(check(NULL, no_b, N(no_b), NULL, &err), &err, MF_EFORMAT,
           "tensor 'blk.0.attn_q.weight.lora_a' has no matching 'blk.0.attn_q.weight.lora_b'");
    const struct tdef no_a[] = {{"blk.0.attn_q.weight.lora_b", GGML_TYPE_F32, 4, QKV}};
    expect(check(NULL, no_a, N(no_a), NULL, &err), &err, MF_EFORMAT,
           "tensor 'blk.0.attn_q.weight.lora_b' has no matching 'blk.0.attn_q.weight.lora_a'");
    const struct tdef suffix[] = {
        {"blk.0.attn_q.weight.lora_a", GGML_TYPE_F32, EMBD, 4},
        {"blk.0.attn_q.weight.lora_b", GGML_TYPE_F32, 4, QKV},
        {"blk.0.attn_q.weight.lora_c", GGML_TYPE_F32, 4, QKV},
    };
    expect(check(NULL, suffix, N(suffix), NULL, &err), &err, MF_EFORMAT,
           "tensor 'blk.0.attn_q.weight.lora_c' is neither a .lora_a nor a .lora_b");
    const struct tdef quant[] = {
        {"blk.0.attn_q.weight.lora_a", GGML_TYPE_Q8_0, EMBD, 4},
        {"blk.0.attn_q.weight.lora_b", GGML_TYPE_F32, 4, QKV},
    };
    expect(check(NULL, quant, N(quant), NULL, &err), &err, MF_EUNSUPPORTED,
           "tensor 'blk.0.attn_q.weight.lora_a' has type Q8_0; adapters must be F32, F16 or "
           "BF16");
    expect(check(NULL, NULL, 0, NULL, &err), &err, MF_EFORMAT, "has no lora_a/lora_b tensors");
}

static void test_identity(void **state)
{
    (void)state;
    struct mf_err err;
    struct lora_summary s;
    const struct tdef t[] = {
        {"blk.0.attn_q.weight.lora_a", GGML_TYPE_F32, EMBD, 4},
        {"blk.0.attn_q.weight.lora_b", GGML_TYPE_F32, 4, QKV},
    };
    static const char *const model[] = {"general.architecture", "llama", NULL};
    expect(check(model, t, N(t), NULL, &err), &err, MF_EFORMAT,
           "is not a LoRA adapter: general.type is not 'adapter'");
    static const char *const cvec[] = {"general.architecture", "llama", "general.type",
                                       "adapter", "adapter.type", "control_vector", NULL};
    expect(check(cvec, t, N(t), NULL, &err), &err, MF_EUNSUPPORTED, "adapter.type is not 'lora'");
    static const char *const noarch[] = {"general.type", "adapter", "adapter.type", "lora",
                                         NULL};
    expect(check(noarch, t, N(t), NULL, &err), &err, MF_EFORMAT,
           "a.gguf has no general.architecture");
    static const char *const noalpha[] = {"general.architecture", "llama", "general.type",
                                          "adapter", "adapter.type", "lora", NULL};
    assert_int_equal(check(noalpha, t, N(t), &s, &err), 0);
    assert_false(s.has_alpha);
    assert_non_null(strstr(s.warning, "no adapter.lora.alpha: the raw scale is used"));
    /* the base given as the adapter: refused as a base */
    char a[128];
    snprintf(a, sizeof a, "%s/a.gguf", dir);
    write_gguf("a.gguf", adapter_kv, t, N(t));
    assert_int_equal(lora_check_files(a, a, NULL, &err), MF_EINVAL);
    assert_non_null(strstr(err.msg, "is itself an adapter"));
}

/* ---- PEFT conversion ---- */

/* Writes dir/adapter_config.json (cfg) and a safetensors holding q_proj's
 * A [4, 32] and B [32, 4] of layer 0 in F32, values 0, 1, 2, ... */
static void write_peft(const char *sub, const char *cfg)
{
    char path[192], hdr[512];
    struct mf_err err;
    snprintf(path, sizeof path, "%s/%s", dir, sub);
    assert_int_equal(mf_file_mkdirs(path, &err), 0);
    snprintf(path, sizeof path, "%s/%s/adapter_config.json", dir, sub);
    assert_int_equal(mf_file_write_atomic(path, cfg, strlen(cfg), &err), 0);
    int n = snprintf(hdr, sizeof hdr,
                     "{\"base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight\":"
                     "{\"dtype\":\"F32\",\"shape\":[4,32],\"data_offsets\":[0,512]},"
                     "\"base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight\":"
                     "{\"dtype\":\"F32\",\"shape\":[32,4],\"data_offsets\":[512,1024]}}");
    size_t size = 8 + (size_t)n + 1024;
    uint8_t *buf = malloc(size);
    assert_non_null(buf);
    for (int i = 0; i < 8; i++)
        buf[i] = (uint8_t)((uint64_t)n >> (8 * i));
    memcpy(buf + 8, hdr, (size_t)n);
    for (int i = 0; i < 256; i++) {
        float f = (float)i;
        memcpy(buf + 8 + n + 4 * i, &f, 4);
    }
    snprintf(path, sizeof path, "%s/%s/adapter_model.safetensors", dir, sub);
    assert_int_equal(mf_file_write_atomic(path, buf, size, &err), 0);
    free(buf);
}

/* Writes a base named name with architecture arch and blk.0.attn_q [32, 32]
 * (no head counts: a llama one cannot be converted for). */
static void write_arch_base(const char *name, const char *arch)
{
    const char *const kv[] = {"general.architecture", arch, NULL};
    const struct tdef t[] = {{"blk.0.attn_q.weight", GGML_TYPE_F32, EMBD, QKV}};
    write_gguf(name, kv, t, N(t));
}

static int convert(const char *sub, const char *base, struct lora_peft_info *info,
                   struct mf_err *err)
{
    char d[192], b[192], o[192];
    snprintf(d, sizeof d, "%s/%s", dir, sub);
    snprintf(b, sizeof b, "%s/%s", dir, base);
    snprintf(o, sizeof o, "%s/out.gguf", dir);
    unlink(o);
    mf_err_clear(err);
    return lora_peft_convert_ex(d, b, o, info, err);
}

static void test_peft_qwen2(void **state)
{
    (void)state;
    struct lora_peft_info info;
    struct mf_err err;
    write_arch_base("qwen2.gguf", "qwen2");
    write_peft("pq", "{\"peft_type\":\"LORA\",\"r\":4,\"lora_alpha\":8}");
    assert_int_equal(convert("pq", "qwen2.gguf", &info, &err), 0);
    assert_int_equal(info.n_pairs, 1);
    assert_int_equal(info.n_permuted, 0);
    assert_string_equal(info.sum.arch, "qwen2");
    /* lora_b's rows are the source's, in order (no RoPE permutation for qwen2) */
    char o[192];
    snprintf(o, sizeof o, "%s/out.gguf", dir);
    struct gguf_file *gf;
    assert_int_equal(gguf_open(o, &gf, &err), 0);
    const struct gguf_tensor *b = gguf_find_tensor(gf, "blk.0.attn_q.weight.lora_b");
    assert_non_null(b);
    assert_int_equal(b->ne[0], 4);
    assert_int_equal(b->ne[1], 32);
    for (int i = 0; i < 128; i++) {
        float f;
        memcpy(&f, (const uint8_t *)b->data + 4 * i, 4);
        assert_true(f == (float)(128 + i));
    }
    gguf_close(gf);
}

static void test_peft_refusals(void **state)
{
    (void)state;
    struct lora_peft_info info;
    struct mf_err err;
    write_arch_base("falcon.gguf", "falcon");
    write_peft("pa", "{\"peft_type\":\"LORA\",\"r\":4,\"lora_alpha\":8}");
    expect(convert("pa", "falcon.gguf", &info, &err), &err, MF_EUNSUPPORTED,
           "architecture 'falcon' is not one mfc runs (llama, qwen2");
    static const struct {
        const char *cfg;
        int code;
        const char *want;
    } cases[] = {
        {"{\"r\":4,\"lora_alpha\":8,\"alpha_pattern\":{\"q_proj\":16}}", MF_EUNSUPPORTED,
         "alpha_pattern gives modules their own alpha"},
        {"{\"r\":4,\"lora_alpha\":8,\"fan_in_fan_out\":true}", MF_EUNSUPPORTED,
         "fan_in_fan_out is set"},
        {"{\"r\":4,\"lora_alpha\":8,\"use_dora\":true}", MF_EUNSUPPORTED, "use_dora is set"},
        {"{\"peft_type\":\"IA3\",\"r\":4}", MF_EUNSUPPORTED, "peft_type is \"IA3\""},
        {"{\"lora_alpha\":8}", MF_ENOTFOUND, "has no \"r\""},
        {"{\"r\":0,\"lora_alpha\":8}", MF_ERANGE, "r is 0 (must be 1..65536)"},
        {"{\"r\":4,\"lora_alpha\":\"8\"}", MF_EFORMAT, "\"lora_alpha\" must be a number"},
        {"[1]", MF_EFORMAT, "must be a JSON object"},
    };
    write_arch_base("llama.gguf", "llama");
    for (size_t i = 0; i < N(cases); i++) {
        write_peft("pc", cases[i].cfg);
        expect(convert("pc", "llama.gguf", &info, &err), &err, cases[i].code, cases[i].want);
    }
    /* a llama base without head counts cannot be permuted */
    write_peft("ph", "{\"r\":4,\"lora_alpha\":8}");
    expect(convert("ph", "llama.gguf", &info, &err), &err, MF_ENOTFOUND,
           "llama.attention.head_count");
}

static void test_map_name(void **state)
{
    (void)state;
    static const char *const cases[][2] = {
        {"model.layers.0.self_attn.q_proj", "blk.0.attn_q.weight"},
        {"model.layers.12.self_attn.k_proj", "blk.12.attn_k.weight"},
        {"model.layers.3.self_attn.v_proj", "blk.3.attn_v.weight"},
        {"model.layers.3.self_attn.o_proj", "blk.3.attn_output.weight"},
        {"model.layers.31.mlp.gate_proj", "blk.31.ffn_gate.weight"},
        {"model.layers.31.mlp.up_proj", "blk.31.ffn_up.weight"},
        {"model.layers.31.mlp.down_proj", "blk.31.ffn_down.weight"},
        {"model.embed_tokens", "token_embd.weight"},
        {"lm_head", "output.weight"},
        /* Phi-3's fused projections map to the fused GGUF tensors */
        {"model.layers.2.self_attn.qkv_proj", "blk.2.attn_qkv.weight"},
        {"model.layers.2.mlp.gate_up_proj", "blk.2.ffn_up.weight"},
    };
    char out[64];
    for (size_t i = 0; i < N(cases); i++) {
        assert_int_equal(lora_peft_map_name(cases[i][0], out, sizeof out), 0);
        assert_string_equal(out, cases[i][1]);
    }
    static const char *const bad[] = {"model.layers.0.mlp.experts.0.gate_proj",
                                      "model.layers.x.self_attn.q_proj",
                                      "model.layers.0.mlp.fc1", "transformer.h.0.attn.c_attn",
                                      "model.layers.0.self_attn.q_proj.extra", ""};
    for (size_t i = 0; i < N(bad); i++)
        assert_int_equal(lora_peft_map_name(bad[i], out, sizeof out), MF_EUNSUPPORTED);
    assert_int_equal(lora_peft_map_name("model.layers.0.self_attn.q_proj", out, 8),
                     MF_EUNSUPPORTED);
}

/* The name an adapter gets in the dev.mfc.adapters.merged label: only a final
 * .gguf/.safetensors is cut, so dotted names survive (exec_adapter_name). */
static void test_merged_adapter_name(void **state)
{
    static const char *const cases[][2] = {
        {"./dir/o3.gguf", "o3"},
        {"my.adapter.v2.gguf", "my.adapter.v2"},
        {"/abs/path.with.dots/my.adapter.v2.gguf", "my.adapter.v2"},
        {"./adapters/sql.v1.safetensors", "sql.v1"},
        {"./peft/my.adapter.v2/", "my.adapter.v2"},
        {"./peft/lora-r8", "lora-r8"},
        {"x.GGUF", "x"},
        {"x.gguf.bak", "x.gguf.bak"},
        {"archive.tar.gz", "archive.tar.gz"},
        {"hf://org/repo.v2", "repo.v2"},
        {".gguf", ".gguf"},
        {"plain", "plain"},
    };
    (void)state;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t n = 99;
        const char *p = exec_adapter_name(cases[i][0], &n);
        char got[128];
        snprintf(got, sizeof got, "%.*s", (int)n, p);
        assert_string_equal(got, cases[i][1]);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_good),          cmocka_unit_test(test_embedding),
        cmocka_unit_test(test_other_arch),    cmocka_unit_test(test_hidden_size),
        cmocka_unit_test(test_missing_tensor), cmocka_unit_test(test_transposed_a),
        cmocka_unit_test(test_rank_mismatch), cmocka_unit_test(test_rank_limits),
        cmocka_unit_test(test_pairs_and_names), cmocka_unit_test(test_merged_adapter_name),
        cmocka_unit_test(test_identity),      cmocka_unit_test(test_map_name),
        cmocka_unit_test(test_peft_qwen2),    cmocka_unit_test(test_peft_refusals),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
