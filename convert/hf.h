/*
 * hf.h: Hugging Face model directory -> GGUF, in C (no Python).
 *
 * A directory holds config.json, model.safetensors or shards named by
 * model.safetensors.index.json, tokenizer.json, tokenizer_config.json and
 * optionally chat_template.jinja. hf_convert() writes one GGUF the way
 * llama.cpp's convert_hf_to_gguf.py does for LlamaForCausalLM and
 * MistralForCausalLM: the same metadata keys and types, the same tensor names,
 * q/k rows permuted for llama's RoPE layout (LlamaModel.permute), 1-D tensors
 * kept F32, rope_freqs.weight for Llama 3.x rope_scaling (rope_type llama3).
 * Tensors are streamed one at a time from the mapped shards through the GGUF
 * writer, so memory stays a few MB above the vocabulary whatever the model
 * size. docs/convert.md describes the choices.
 *
 * Files: hf_config.c (config.json -> hyperparameters and llama.* keys),
 * hf_tokenizer.c (tokenizer files -> tokenizer.* keys), hf_tensors.c (the
 * tensor table: names, shapes, types, permutation, row conversion),
 * hf_convert.c (the driver).
 */
#ifndef MFC_HF_H
#define MFC_HF_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "common/quant.h"

struct gguf_writer;

/* ---- config.json (hf_config.c) ---- */

enum hf_rope_scaling {
    HF_ROPE_NONE = 0,
    HF_ROPE_LINEAR = 1, /* rope_scaling.type "linear": llama.rope.scaling.* keys */
    HF_ROPE_LLAMA3 = 2, /* rope_type "llama3": the rope_freqs.weight tensor */
};

struct hf_config {
    char arch[64];             /* architectures[0], e.g. "LlamaForCausalLM" */
    int64_t n_vocab;           /* vocab_size */
    int64_t n_embd;            /* hidden_size */
    int64_t n_layer;           /* num_hidden_layers */
    int64_t n_ff;              /* intermediate_size */
    int64_t n_head;            /* num_attention_heads */
    int64_t n_head_kv;         /* num_key_value_heads (= n_head when absent) */
    int64_t n_ctx;             /* max_position_embeddings; 0 when absent */
    int64_t head_dim;          /* head_dim, or n_embd / n_head */
    int has_head_kv;           /* num_key_value_heads was given (the key is written only then) */
    int has_head_dim;          /* head_dim was given (key_length/value_length are written) */
    int has_rms_eps;           /* rms_norm_eps was given */
    int has_theta;             /* rope_theta was given */
    double rms_eps;            /* rms_norm_eps */
    double rope_theta;         /* rope_theta, 10000 when absent */
    int tied;                  /* tie_word_embeddings (default false for llama) */
    enum hf_rope_scaling rope; /* rope_scaling kind */
    double rope_factor;        /* rope_scaling.factor */
    double rope_low;           /* low_freq_factor (llama3; default 1) */
    double rope_high;          /* high_freq_factor (llama3; default 4) */
    double rope_orig_ctx;      /* original_max_position_embeddings (llama3; default 8192) */
    int64_t bos_id, eos_id, pad_id; /* config.json's *_token_id (ints only); -1 when absent */
};

/* Parses config.json text (what: the path, for messages). Refuses an
 * architecture other than LlamaForCausalLM / MistralForCausalLM with
 * MF_EUNSUPPORTED naming it, a missing or non-positive size, heads that do
 * not divide the width, n_head not a multiple of n_head_kv, an odd head_dim
 * (MF_EINVAL / MF_EFORMAT). */
int hf_config_parse(const char *text, size_t len, const char *what, struct hf_config *c,
                    struct mf_err *err);

/* Adds the llama.* keys and general.file_type in convert_hf_to_gguf.py's
 * order and types (Model + LlamaModel.set_gguf_parameters). */
int hf_config_write(const struct hf_config *c, enum quant_ftype ft, struct gguf_writer *w,
                    struct mf_err *err);

/* The n_rot/2 llama3 rope factors (LlamaModel.generate_extra_tensors), in
 * float as torch computes them. out holds head_dim/2 floats. */
void hf_config_rope_factors(const struct hf_config *c, float *out);

/* ---- tokenizer files (hf_tokenizer.c) ---- */

struct hf_vocab; /* the tokenizer.* keys, ready to write */

/* Inputs as text; tok_config, template may be NULL (absent files). n_vocab
 * is config.json's vocab_size (0: the tokenizer's own size): the token list
 * is padded to it with "[PAD<i>]" tokens of type UNUSED, as the converter
 * does. c supplies config.json's special ids as the fallback. */
struct hf_tokenizer_src {
    const char *tok_json; /* tokenizer.json */
    size_t tok_json_len;
    const char *tok_config; /* tokenizer_config.json or NULL */
    size_t tok_config_len;
    const char *template; /* chat_template.jinja or NULL */
    size_t template_len;
};

/* Builds the vocabulary. model.type BPE without byte_fallback: byte-level
 * BPE (tokenizer.ggml.model gpt2, merges, pre chosen from the pre-tokenizer:
 * llama-bpe, gpt-2, qwen2, ... or MF_EUNSUPPORTED naming the regex); BPE
 * with byte_fallback or Unigram: SentencePiece-style (llama, scores, byte
 * tokens). Errors name the file and the JSON path. */
int hf_vocab_build(const struct hf_tokenizer_src *src, const struct hf_config *c,
                   struct hf_vocab **out, struct mf_err *err);
/* Reads the files from dir (tokenizer.json is required). */
int hf_vocab_load(const char *dir, const struct hf_config *c, struct hf_vocab **out,
                  struct mf_err *err);
/* Adds the tokenizer.* keys in the converter's order. */
int hf_vocab_write(const struct hf_vocab *v, struct gguf_writer *w, struct mf_err *err);
uint32_t hf_vocab_size(const struct hf_vocab *v);
const char *hf_vocab_model(const struct hf_vocab *v); /* "gpt2" or "llama" */
const char *hf_vocab_pre(const struct hf_vocab *v);   /* "llama-bpe", "default", ... */
void hf_vocab_free(struct hf_vocab *v);

/* ---- conversion (hf_tensors.c, hf_convert.c) ---- */

enum hf_outtype {
    HF_OUT_AUTO = 0, /* F16 and BF16 weights keep their type, F32 becomes F16 */
    HF_OUT_F32,
    HF_OUT_F16,
    HF_OUT_BF16,
};

/* Parses "auto", "f32", "f16", "bf16" (any case); -1 for anything else. */
int hf_outtype_parse(const char *s, enum hf_outtype *out);

typedef void (*hf_progress_fn)(void *arg, uint64_t done, uint64_t total);

struct hf_convert_opts {
    enum hf_outtype outtype; /* used when quantize is 0 */
    int quantize;            /* 1: ftype picks per-tensor types (llama.cpp's mixes) */
    enum quant_ftype ftype;  /* with quantize: Q8_0, Q4_K_M, ... */
    const char *name;        /* general.name; NULL: the directory's base name */
    int threads;             /* rows converted in parallel; 0: online CPUs (at most 16) */
    hf_progress_fn progress; /* bytes of tensor data written of total; may be NULL */
    void *progress_arg;
};

/* Facts about a finished conversion, for messages. */
struct hf_convert_info {
    uint64_t n_tensors;     /* tensors written */
    uint64_t bytes;         /* tensor bytes written */
    uint64_t src_bytes;     /* tensor bytes read */
    enum quant_ftype ftype; /* general.file_type */
};

/* Converts dir into out_path (atomically: nothing is left there on failure).
 * Errors name the file, tensor or key: MF_ENOTFOUND for a missing
 * config.json / tokenizer.json / weights, MF_EUNSUPPORTED for an
 * architecture or dtype mfc does not convert, MF_EFORMAT for malformed files
 * and shapes that contradict config.json. info may be NULL. */
int hf_convert(const char *dir, const char *out_path, const struct hf_convert_opts *o,
               struct hf_convert_info *info, struct mf_err *err);

/* 1 when dir looks like a Hugging Face model (has config.json), 2 when it is
 * a PEFT adapter (has adapter_config.json), 0 otherwise. */
int hf_dir_kind(const char *dir);

#endif
