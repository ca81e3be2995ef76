/*
 * test_hf.c: unit tests for the Hugging Face importer (convert/hf*.c):
 * config.json rules and errors, the llama3 rope factors, the q/k row
 * permutation against LlamaModel.permute's reshape/swapaxes, and tokenizer
 * JSON -> tokenizer.* keys (written through the GGUF writer and read back
 * with the GGUF reader): byte-level BPE (merges as pairs, pre-tokenizer
 * names, added tokens, padding, special ids and their fallbacks, the chat
 * template's sources), SentencePiece-style BPE and Unigram, and errors.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/gguf.h"
#include "convert/hf.h"
#include "convert/hf_int.h"

#define CFG_BASE                                                                                   \
    "\"vocab_size\": 10, \"hidden_size\": 64, \"num_hidden_layers\": 2, "                          \
    "\"intermediate_size\": 128, \"num_attention_heads\": 8"

static int cfg(const char *text, struct hf_config *c, struct mf_err *err)
{
    return hf_config_parse(text, strlen(text), "config.json", c, err);
}

static void test_config(void **state)
{
    struct hf_config c;
    struct mf_err err;
    (void)state;
    assert_int_equal(cfg("{\"architectures\": [\"LlamaForCausalLM\"], " CFG_BASE
                         ", \"head_dim\": null, \"rope_scaling\": null, \"eos_token_id\": [1, 2]}",
                         &c, &err),
                     0);
    assert_int_equal(c.n_head_kv, 8);
    assert_int_equal(c.has_head_kv, 0);
    assert_int_equal(c.head_dim, 8);
    assert_int_equal(c.has_head_dim, 0);
    assert_int_equal(c.has_theta, 0);
    assert_true(c.rope_theta == 10000.0);
    assert_int_equal(c.tied, 0);
    assert_int_equal(c.rope, HF_ROPE_NONE);
    assert_int_equal(c.eos_id, -1); /* a list is not an id (the converter ignores it too) */
    assert_int_equal(cfg("{\"architectures\": [\"MistralForCausalLM\"], " CFG_BASE
                         ", \"num_key_value_heads\": 2, \"rope_theta\": 1e6, "
                         "\"tie_word_embeddings\": true, \"head_dim\": 16, \"bos_token_id\": 1}",
                         &c, &err),
                     0);
    assert_int_equal(c.n_head_kv, 2);
    assert_int_equal(c.head_dim, 16);
    assert_int_equal(c.tied, 1);
    assert_int_equal(c.bos_id, 1);
    assert_true(c.rope_theta == 1e6);

    assert_int_equal(cfg("{\"architectures\": [\"FalconForCausalLM\"], " CFG_BASE "}", &c, &err),
                     MF_EUNSUPPORTED);
    assert_non_null(strstr(err.msg, "architecture FalconForCausalLM is not supported"));
    assert_non_null(strstr(err.msg, "Qwen2ForCausalLM, Qwen3ForCausalLM"));
    assert_int_equal(
        cfg("{\"architectures\": [\"LlamaForCausalLM\"], \"vocab_size\": 10}", &c, &err),
        MF_EFORMAT);
    assert_non_null(strstr(err.msg, "\"hidden_size\" is missing"));
    assert_int_equal(cfg("{\"architectures\": [\"LlamaForCausalLM\"], " CFG_BASE
                         ", \"num_key_value_heads\": 3}",
                         &c, &err),
                     MF_EFORMAT);
    assert_non_null(strstr(err.msg, "not a multiple of num_key_value_heads 3"));
    assert_int_equal(cfg("{\"architectures\": [\"LlamaForCausalLM\"], " CFG_BASE
                         ", \"hidden_size\": -4}",
                         &c, &err),
                     MF_EFORMAT); /* duplicate key: refused by the parser */
    assert_int_equal(cfg("{\"architectures\": [\"LlamaForCausalLM\"], \"vocab_size\": 10, "
                         "\"hidden_size\": 60, \"num_hidden_layers\": 2, "
                         "\"intermediate_size\": 128, \"num_attention_heads\": 8}",
                         &c, &err),
                     MF_EFORMAT);
    assert_non_null(strstr(err.msg, "not a multiple of num_attention_heads"));
    assert_int_equal(cfg("[1]", &c, &err), MF_EFORMAT);
    assert_int_equal(cfg("{\"architectures\": [\"LlamaForCausalLM\"], " CFG_BASE
                         ", \"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4}}",
                         &c, &err),
                     MF_EFORMAT);
    assert_non_null(strstr(err.msg, "original_max_position_embeddings"));
    assert_int_equal(cfg("{\"architectures\": [\"LlamaForCausalLM\"], " CFG_BASE
                         ", \"rope_scaling\": {\"rope_type\": \"dynamic\", \"factor\": 4}}",
                         &c, &err),
                     MF_EUNSUPPORTED);
    assert_non_null(strstr(err.msg, "\"dynamic\" is not supported"));
    assert_int_equal(cfg("{\"architectures\": [\"LlamaForCausalLM\"], " CFG_BASE
                         ", \"rope_scaling\": {\"type\": \"linear\", \"factor\": 4}}",
                         &c, &err),
                     0);
    assert_int_equal(c.rope, HF_ROPE_LINEAR);
    assert_true(c.rope_factor == 4.0);
    /* transformers 5: rope_parameters instead of rope_theta / rope_scaling */
    assert_int_equal(cfg("{\"architectures\": [\"LlamaForCausalLM\"], " CFG_BASE
                         ", \"rope_parameters\": {\"rope_type\": \"default\", "
                         "\"rope_theta\": 250000.0}}",
                         &c, &err),
                     0);
    assert_int_equal(c.has_theta, 1);
    assert_true(c.rope_theta == 250000.0);
    assert_int_equal(c.rope, HF_ROPE_NONE);
    assert_int_equal(cfg("{\"architectures\": [\"LlamaForCausalLM\"], " CFG_BASE
                         ", \"rope_parameters\": {\"rope_type\": \"llama3\", \"factor\": 32, "
                         "\"rope_theta\": 500000.0, \"original_max_position_embeddings\": 64}}",
                         &c, &err),
                     0);
    assert_int_equal(c.rope, HF_ROPE_LLAMA3);
    assert_true(c.rope_factor == 32.0 && c.rope_orig_ctx == 64.0 && c.rope_theta == 500000.0);
}

static void test_rope_factors(void **state)
{
    /* Llama 3.1 8B: head_dim 128, theta 500000, factor 8, low 1, high 4, 8192 */
    struct hf_config c;
    struct mf_err err;
    float f[64];
    (void)state;
    assert_int_equal(cfg("{\"architectures\": [\"LlamaForCausalLM\"], \"vocab_size\": 10, "
                         "\"hidden_size\": 4096, \"num_hidden_layers\": 1, "
                         "\"intermediate_size\": 64, \"num_attention_heads\": 32, "
                         "\"rope_theta\": 500000.0, \"rope_scaling\": {\"factor\": 8.0, "
                         "\"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, "
                         "\"original_max_position_embeddings\": 8192, \"rope_type\": \"llama3\"}}",
                         &c, &err),
                     0);
    assert_int_equal(c.rope, HF_ROPE_LLAMA3);
    hf_config_rope_factors(&c, f);
    /* wavelengths below 2048 keep 1, above 8192 get the factor, between them
     * the smooth blend, which only grows */
    assert_true(f[0] == 1.0f);
    assert_true(f[63] == 8.0f);
    int blended = 0;
    for (int i = 1; i < 64; i++) {
        assert_true(f[i] >= f[i - 1]);
        blended += f[i] > 1.0f && f[i] < 8.0f;
    }
    assert_true(blended > 0 && blended < 20);
    /* i = 23: wavelen = 2pi * 500000^(46/128) = 2 pi * 111.6... ~ 7.1e2 -> 1 ;
     * spot value at i = 30: smooth = (8192 / wl - 1) / 3 */
    double wl = 2 * M_PI * pow(500000.0, 60.0 / 128.0);
    double s = (8192.0 / wl - 1.0) / 3.0;
    double want = wl > 8192 ? 8.0 : wl < 2048 ? 1.0 : 1.0 / ((1 - s) / 8.0 + s);
    assert_true(fabs(f[30] - want) < 1e-5 * want);
}

static void test_permute(void **state)
{
    (void)state;
    /* LlamaModel.permute: w.reshape(n_head, 2, hd/2, ...).swapaxes(1, 2): the
     * new [h][j][t] is the old [h][t][j] */
    for (int heads = 1; heads <= 4; heads++) {
        for (int hd = 2; hd <= 16; hd += 2) {
            struct hf_tensor t = {
                .perm_heads = heads, .n_dims = 2, .ne = {5, (uint64_t)(heads * hd)}};
            int seen[64] = {0};
            for (int h = 0; h < heads; h++)
                for (int j = 0; j < hd / 2; j++)
                    for (int k = 0; k < 2; k++) {
                        uint64_t out = (uint64_t)(h * hd + j * 2 + k);
                        uint64_t src = (uint64_t)(h * hd + k * (hd / 2) + j);
                        assert_int_equal(hf_tensor_src_row(&t, out), src);
                        seen[src]++;
                    }
            for (int r = 0; r < heads * hd; r++)
                assert_int_equal(seen[r], 1);
        }
    }
    struct hf_tensor id = {.perm_heads = 0, .n_dims = 2, .ne = {4, 8}};
    assert_int_equal(hf_tensor_src_row(&id, 5), 5);
}

/* ---- tokenizer ---- */

struct kvs {
    char path[64];
    struct gguf_file *gf;
};

/* Builds the vocabulary and writes it as a GGUF; *out opened. */
static int vocab_gguf(const char *tok, const char *tcfg, const char *tmpl, int64_t n_vocab,
                      struct kvs *out, struct mf_err *err)
{
    struct hf_tokenizer_src s = {
        tok, strlen(tok), tcfg, tcfg ? strlen(tcfg) : 0, tmpl, tmpl ? strlen(tmpl) : 0};
    struct hf_config c;
    memset(&c, 0, sizeof c);
    c.n_vocab = n_vocab;
    c.bos_id = c.eos_id = c.pad_id = -1;
    c.eos_id = 2;
    struct hf_vocab *v = NULL;
    int rc = hf_vocab_build(&s, &c, &v, err);
    if (rc)
        return rc;
    struct gguf_writer *w = NULL;
    snprintf(out->path, sizeof out->path, "/tmp/test_hf_%ld.gguf", (long)getpid());
    assert_int_equal(gguf_writer_open(out->path, &w, err), 0);
    assert_int_equal(hf_vocab_write(v, w, err), 0);
    assert_int_equal(gguf_writer_finish(w, err), 0);
    gguf_writer_free(w);
    hf_vocab_free(v);
    assert_int_equal(gguf_open(out->path, &out->gf, err), 0);
    return 0;
}

static void kvs_close(struct kvs *k)
{
    gguf_close(k->gf);
    unlink(k->path);
}

static void assert_str(const struct gguf_file *gf, const char *key, const char *want)
{
    struct gguf_str s;
    struct mf_err err;
    assert_int_equal(gguf_get_str(gf, key, &s, &err), 0);
    assert_true(gguf_str_eq(s, want));
}

static int64_t arr_int(const struct gguf_file *gf, const char *key, uint64_t i)
{
    const struct gguf_array *a;
    struct mf_err err;
    assert_int_equal(gguf_get_arr(gf, key, &a, &err), 0);
    return gguf_arr_int(a, i);
}

static struct gguf_str arr_str(const struct gguf_file *gf, const char *key, uint64_t i)
{
    const struct gguf_array *a;
    struct mf_err err;
    assert_int_equal(gguf_get_arr(gf, key, &a, &err), 0);
    assert_true(i < a->n);
    return gguf_arr_str(a, i);
}

static uint32_t u32(const struct gguf_file *gf, const char *key)
{
    uint32_t v = 0;
    struct mf_err err;
    assert_int_equal(gguf_get_u32(gf, key, &v, &err), 0);
    return v;
}

#define LLAMA3_RE                                                                                  \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}{1,3}| "         \
    "?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+"
#define PRE_LLAMA3                                                                                 \
    "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": "             \
    "{\"Regex\": \"" LLAMA3_RE "\"}}, {\"type\": \"ByteLevel\", \"use_regex\": false}]}"
#define BPE_MODEL                                                                                  \
    "\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 2, \"a b\": 3}, "      \
    "\"merges\": [[\"a\", \"b\"], [\"a \", \"b\"]]}"

static void test_bpe(void **state)
{
    struct kvs k;
    struct mf_err err;
    (void)state;
    const char *tok = "{\"pre_tokenizer\": " PRE_LLAMA3 ", " BPE_MODEL
                      ", \"added_tokens\": [{\"id\": 4, \"content\": \"<|eot_id|>\", "
                      "\"special\": true}, {\"id\": 5, \"content\": \"my\xe2\x96\x81word\", "
                      "\"special\": false}, {\"id\": 6, \"content\": \"<|x|>\", \"special\": "
                      "false}]}";
    const char *tcfg = "{\"bos_token\": {\"content\": \"<|x|>\"}, \"eos_token\": \"<|eot_id|>\", "
                       "\"add_bos_token\": false, \"chat_template\": \"T1\"}";
    assert_int_equal(vocab_gguf(tok, tcfg, "T2", 9, &k, &err), 0);
    assert_str(k.gf, "tokenizer.ggml.model", "gpt2");
    assert_str(k.gf, "tokenizer.ggml.pre", "llama-bpe");
    assert_true(gguf_str_eq(arr_str(k.gf, "tokenizer.ggml.tokens", 5), "my word"));
    assert_true(gguf_str_eq(arr_str(k.gf, "tokenizer.ggml.tokens", 8), "[PAD8]"));
    assert_true(gguf_str_eq(arr_str(k.gf, "tokenizer.ggml.merges", 0), "a b"));
    assert_true(gguf_str_eq(arr_str(k.gf, "tokenizer.ggml.merges", 1), "a\xc4\xa0 b"));
    assert_int_equal(arr_int(k.gf, "tokenizer.ggml.token_type", 0), 1);
    assert_int_equal(arr_int(k.gf, "tokenizer.ggml.token_type", 4), 3);
    assert_int_equal(arr_int(k.gf, "tokenizer.ggml.token_type", 5), 4);
    assert_int_equal(arr_int(k.gf, "tokenizer.ggml.token_type", 6), 3); /* looks special */
    assert_int_equal(arr_int(k.gf, "tokenizer.ggml.token_type", 7), 5);
    assert_null(gguf_find_kv(k.gf, "tokenizer.ggml.scores"));
    assert_int_equal(u32(k.gf, "tokenizer.ggml.bos_token_id"), 6);
    assert_int_equal(u32(k.gf, "tokenizer.ggml.eos_token_id"), 4); /* not config.json's 2 */
    assert_int_equal(u32(k.gf, "tokenizer.ggml.eot_token_id"), 4);
    int b = 1;
    assert_int_equal(gguf_get_bool(k.gf, "tokenizer.ggml.add_bos_token", &b, &err), 0);
    assert_int_equal(b, 0);
    assert_str(k.gf, "tokenizer.chat_template", "T1"); /* tokenizer_config wins */
    kvs_close(&k);

    /* no tokenizer_config: config.json's eos, the .jinja template, GPT-2's own split */
    tok = "{\"pre_tokenizer\": {\"type\": \"ByteLevel\", \"use_regex\": true}, " BPE_MODEL "}";
    assert_int_equal(vocab_gguf(tok, NULL, "T2", 0, &k, &err), 0);
    assert_str(k.gf, "tokenizer.ggml.pre", "gpt-2");
    assert_int_equal(u32(k.gf, "tokenizer.ggml.eos_token_id"), 2);
    assert_null(gguf_find_kv(k.gf, "tokenizer.ggml.bos_token_id"));
    assert_str(k.gf, "tokenizer.chat_template", "T2");
    const struct gguf_array *a;
    assert_int_equal(gguf_get_arr(k.gf, "tokenizer.ggml.tokens", &a, &err), 0);
    assert_int_equal(a->n, 4); /* no vocab_size: the largest id + 1 */
    kvs_close(&k);

    /* chat_template as a list: the "default" one */
    assert_int_equal(vocab_gguf(tok,
                                "{\"chat_template\": [{\"name\": \"tool_use\", \"template\": "
                                "\"X\"}, {\"name\": \"default\", \"template\": \"D\"}]}",
                                NULL, 4, &k, &err),
                     0);
    assert_str(k.gf, "tokenizer.chat_template", "D");
    kvs_close(&k);
}

static void test_bpe_errors(void **state)
{
    struct kvs k;
    struct mf_err err;
    (void)state;
    assert_int_equal(vocab_gguf("{\"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": "
                                "[{\"type\": \"Split\", \"pattern\": {\"Regex\": \"\\\\w+\"}}, "
                                "{\"type\": \"ByteLevel\", \"use_regex\": false}]}, " BPE_MODEL "}",
                                NULL, NULL, 4, &k, &err),
                     MF_EUNSUPPORTED);
    assert_non_null(strstr(err.msg, "split regex \\w+"));
    assert_int_equal(vocab_gguf("{\"pre_tokenizer\": {\"type\": \"Whitespace\"}, " BPE_MODEL "}",
                                NULL, NULL, 4, &k, &err),
                     MF_EUNSUPPORTED);
    assert_int_equal(vocab_gguf("{\"model\": {\"type\": \"WordPiece\", \"vocab\": {}}}", NULL, NULL,
                                4, &k, &err),
                     MF_EUNSUPPORTED);
    assert_non_null(strstr(err.msg, "WordPiece"));
    assert_int_equal(vocab_gguf("{\"pre_tokenizer\": {\"type\": \"ByteLevel\"}, " BPE_MODEL
                                ", \"added_tokens\": [{\"id\": 9, \"content\": \"<x>\"}]}",
                                NULL, NULL, 5, &k, &err),
                     MF_EFORMAT);
    assert_non_null(strstr(err.msg, "outside the vocabulary of 5"));
    assert_int_equal(vocab_gguf("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, "
                                "\"merges\": [7]}}",
                                NULL, NULL, 4, &k, &err),
                     MF_EFORMAT);
    assert_int_equal(vocab_gguf("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}", NULL, NULL,
                                4, &k, &err),
                     MF_EFORMAT);
}

static void test_spm(void **state)
{
    struct kvs k;
    struct mf_err err;
    (void)state;
    /* BPE with byte fallback: SentencePiece-style, scores from merge ranks */
    const char *tok =
        "{\"model\": {\"type\": \"BPE\", \"byte_fallback\": true, \"unk_token\": \"<unk>\", "
        "\"vocab\": {\"<unk>\": 0, \"<s>\": 1, \"</s>\": 2, \"<0x0A>\": 3, \"\xe2\x96\x81\": 4, "
        "\"a\": 5, \"b\": 6, \"ab\": 7, \"\xe2\x96\x81"
        "ab\": 8}, "
        "\"merges\": [\"a b\", \"\xe2\x96\x81 ab\"]}, \"added_tokens\": [{\"id\": 0, \"content\": "
        "\"<unk>\", \"special\": true}, {\"id\": 1, \"content\": \"<s>\", \"special\": true}, "
        "{\"id\": 2, \"content\": \"</s>\", \"special\": true}]}";
    assert_int_equal(
        vocab_gguf(tok, "{\"bos_token\": \"<s>\", \"unk_token\": \"<unk>\"}", NULL, 9, &k, &err),
        0);
    assert_str(k.gf, "tokenizer.ggml.model", "llama");
    assert_str(k.gf, "tokenizer.ggml.pre", "default");
    assert_null(gguf_find_kv(k.gf, "tokenizer.ggml.merges"));
    static const int types[] = {2, 3, 3, 6, 1, 1, 1, 1, 1};
    for (int i = 0; i < 9; i++)
        assert_int_equal(arr_int(k.gf, "tokenizer.ggml.token_type", (uint64_t)i), types[i]);
    const struct gguf_array *a;
    assert_int_equal(gguf_get_arr(k.gf, "tokenizer.ggml.scores", &a, &err), 0);
    assert_true(gguf_arr_f32(a, 7) == -1.0f); /* made by merge 0 */
    assert_true(gguf_arr_f32(a, 8) == -2.0f); /* made by merge 1 */
    assert_true(gguf_arr_f32(a, 5) == 0.0f);  /* no merge makes it */
    assert_true(gguf_arr_f32(a, 7) > gguf_arr_f32(a, 8));
    assert_int_equal(u32(k.gf, "tokenizer.ggml.bos_token_id"), 1);
    assert_int_equal(u32(k.gf, "tokenizer.ggml.unknown_token_id"), 0);
    kvs_close(&k);

    /* Unigram: the model's scores */
    tok = "{\"model\": {\"type\": \"Unigram\", \"unk_id\": 0, \"vocab\": [[\"<unk>\", 0.0], "
          "[\"\xe2\x96\x81x\", -1.5], [\"y\", -2.25]]}}";
    assert_int_equal(vocab_gguf(tok, NULL, NULL, 3, &k, &err), 0);
    assert_str(k.gf, "tokenizer.ggml.model", "llama");
    assert_int_equal(gguf_get_arr(k.gf, "tokenizer.ggml.scores", &a, &err), 0);
    assert_true(gguf_arr_f32(a, 2) == -2.25f);
    assert_int_equal(arr_int(k.gf, "tokenizer.ggml.token_type", 0), 2);
    kvs_close(&k);
    assert_int_equal(vocab_gguf("{\"model\": {\"type\": \"Unigram\", \"vocab\": [[\"a\"]]}}", NULL,
                                NULL, 3, &k, &err),
                     MF_EFORMAT);
}

static void test_outtype(void **state)
{
    enum hf_outtype o;
    (void)state;
    assert_int_equal(hf_outtype_parse("BF16", &o), 0);
    assert_int_equal(o, HF_OUT_BF16);
    assert_int_equal(hf_outtype_parse("auto", &o), 0);
    assert_int_equal(o, HF_OUT_AUTO);
    assert_int_equal(hf_outtype_parse("q8_0", &o), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config),     cmocka_unit_test(test_rope_factors),
        cmocka_unit_test(test_permute),    cmocka_unit_test(test_bpe),
        cmocka_unit_test(test_bpe_errors), cmocka_unit_test(test_spm),
        cmocka_unit_test(test_outtype),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
