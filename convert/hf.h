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
    HF_ROPE_LINEAR = 1,   /* rope_scaling.type "linear": <arch>.rope.scaling.* keys */
    HF_ROPE_LLAMA3 = 2,   /* rope_type "llama3": the rope_freqs.weight tensor */
    HF_ROPE_YARN = 3,     /* rope_type "yarn": scaling type, factor, original context */
    HF_ROPE_LONGROPE = 4, /* rope_type "longrope" / "su": Phi-3's rope_factors_long/short */
};

/* The model classes mfc converts, by the GGUF architecture they become
 * (hf_family.c holds the class table and each family's keys). */
enum hf_family {
    HF_FAM_LLAMA = 0, /* LlamaForCausalLM, MistralForCausalLM, MixtralForCausalLM */
    HF_FAM_QWEN2,     /* Qwen2ForCausalLM */
    HF_FAM_QWEN3,     /* Qwen3ForCausalLM */
    HF_FAM_QWEN3MOE,  /* Qwen3MoeForCausalLM */
    HF_FAM_GEMMA2,    /* Gemma2ForCausalLM */
    HF_FAM_GEMMA3,    /* Gemma3ForCausalLM, Gemma3ForConditionalGeneration's text tower */
    HF_FAM_PHI3,      /* Phi3ForCausalLM */
};

#define HF_MAX_ROPE_FACTORS 512 /* LongRoPE factors: rope dimensions / 2 */
#define HF_MAX_EXPERTS 512

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

    /* the family (hf_family.c) */
    enum hf_family family;
    const char *gguf_arch; /* general.architecture written: "llama", "qwen2", ... */
    int multimodal;        /* Gemma3ForConditionalGeneration: text_config, language_model. */
    int64_t n_vocab_src;   /* Gemma 3: embedding rows in the checkpoint when n_vocab was cut
                              to the tokenizer's size; 0 otherwise */
    int has_rope_orig;     /* rope_orig_ctx was given (YaRN, LongRoPE) */
    int64_t n_expert;      /* num_local_experts / num_experts; 0: dense */
    int64_t n_expert_used; /* num_experts_per_tok; 0 when absent */
    int64_t n_ff_exp;      /* moe_intermediate_size (qwen3moe); n_ff for Mixtral */
    int64_t swa;           /* sliding_window written; 0: none */
    int64_t swa_pattern;   /* Gemma 3's layer period when config.json's differs from 6; 0 */
    int64_t rope_dim;      /* rotated dimensions (Phi-3's partial_rotary_factor), head_dim */
    int has_theta_swa;     /* rope_theta of sliding layers was given */
    double rope_theta_swa; /* its value (rope_local_base_freq, sliding_attention) */
    int has_attn_softcap, has_final_softcap;
    double attn_softcap, final_softcap; /* attn_logit_softcapping, final_logit_softcapping */
    int yarn_has[4];         /* extrapolation_factor, attention_factor, beta_fast, beta_slow */
    double yarn[4];          /* their values */
    double rope_attn_factor; /* LongRoPE: sqrt(1 + ln s / ln orig), s = ctx / orig, or 1 */
    uint32_t n_rope_factors; /* LongRoPE: entries of each table (rope_dim / 2) */
    float rope_long[HF_MAX_ROPE_FACTORS], rope_short[HF_MAX_ROPE_FACTORS];
};

/* Parses config.json text (what: the path, for messages). Refuses an
 * architecture hf_family_names() does not list with MF_EUNSUPPORTED naming
 * it, a missing or non-positive size, heads that do not divide the width,
 * n_head not a multiple of n_head_kv, an odd head_dim, and a family's
 * missing or contradictory keys (MF_EFORMAT), each naming the key. */
int hf_config_parse(const char *text, size_t len, const char *what, struct hf_config *c,
                    struct mf_err *err);

/* Adds the <arch>.* keys and general.file_type in convert_hf_to_gguf.py's
 * order and types (TextModel + the family's set_gguf_parameters). */
int hf_config_write(const struct hf_config *c, enum quant_ftype ft, struct gguf_writer *w,
                    struct mf_err *err);

/* The n_rot/2 llama3 rope factors (LlamaModel.generate_extra_tensors), in
 * float as torch computes them. out holds head_dim/2 floats. */
void hf_config_rope_factors(const struct hf_config *c, float *out);

/* ---- families (hf_family.c) ---- */

/* The family of a model class (architectures[0]); -1 when mfc does not
 * convert it. *gguf_arch gets the GGUF architecture name. */
int hf_family_find(const char *cls, enum hf_family *fam, const char **gguf_arch);
/* "LlamaForCausalLM, MistralForCausalLM, ..." for messages. */
const char *hf_family_names(void);
/* The family's config.json keys beyond the llama ones (hf_config_parse
 * calls it with the parsed root); errors name the key. */
struct json_t;
int hf_family_parse(const struct json_t *root, const char *what, struct hf_config *c,
                    struct mf_err *err);
/* The keys of a family other than HF_FAM_LLAMA, in the converter's order. */
int hf_family_write(const struct hf_config *c, enum quant_ftype ft, struct gguf_writer *w,
                    struct mf_err *err);
/* A key written before general.type (Phi-3's rope.scaling.attn_factor comes
 * from generate_extra_tensors, which the converter runs first). */
int hf_family_write_early(const struct hf_config *c, struct gguf_writer *w, struct mf_err *err);

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
/* tokenizer.ggml.add_space_prefix, written last (Gemma's set_vocab writes
 * false); unset by default. */
void hf_vocab_set_add_space_prefix(struct hf_vocab *v, int on);

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
