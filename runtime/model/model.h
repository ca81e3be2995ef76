/*
 * model.h: a llama-family model loaded from GGUF (Llama 2, Llama 3.x with
 * rope_freqs, Mistral, TinyLlama; GQA; tied or separate output).
 *
 * model_open() maps the file through gguf.h and checks everything a backend
 * relies on before returning: architecture, hyper-parameters, every tensor's
 * presence, type and exact shape. After that a backend may index any weight
 * row without further checks. Weights are borrowed pointers into the GGUF
 * mapping; nothing is copied. The struct is public because every backend
 * (cpu.c, the CUDA host code) reads it; only model.c and lora.c write it.
 *
 * Shapes below are in ggml order, [ne0, ne1]: ne0 is the row length (the
 * input dimension of a projection), ne1 the number of rows (its output).
 */
#ifndef MFC_MODEL_H
#define MFC_MODEL_H

#include <stdint.h>

#include "common/err.h"
#include "common/ggml_type.h"

struct gguf_file;
struct lora;

/* Hard limits on what model_open accepts (malformed headers are refused
 * before any size arithmetic can overflow). */
#define MODEL_MAX_LAYERS 1024
#define MODEL_MAX_HEADS 1024
#define MODEL_MAX_DIM (1 << 20)   /* n_embd, n_ff, n_vocab */
#define MODEL_MAX_LORAS 64        /* adapters attached to one model */

struct model_hparams {
    int32_t n_ctx_train;   /* llama.context_length: positions seen in training */
    int32_t n_embd;        /* llama.embedding_length: residual width */
    int32_t n_ff;          /* llama.feed_forward_length: SwiGLU hidden width */
    int32_t n_layer;       /* llama.block_count */
    int32_t n_head;        /* llama.attention.head_count: query heads */
    int32_t n_head_kv;     /* llama.attention.head_count_kv: K/V heads (GQA); = n_head if absent */
    int32_t head_dim;      /* llama.attention.key_length, or n_embd / n_head */
    int32_t n_rot;         /* llama.rope.dimension_count: rotated dims per head (even) */
    int32_t n_vocab;       /* rows of token_embd.weight */
    float rope_base;       /* llama.rope.freq_base (10000 if absent) */
    float rope_freq_scale; /* 1 / llama.rope.scaling.factor for "linear" scaling, else 1 */
    float rms_eps;         /* llama.attention.layer_norm_rms_epsilon */
};

/* One weight matrix (or vector) as it lies in the file. */
struct model_weight {
    const void *data;   /* borrowed: points into the GGUF map; NULL when absent */
    enum ggml_type type; /* F32/F16/BF16/Q4_0/Q5_0/Q5_1/Q8_0/Q4_K/Q5_K/Q6_K (norms: F32) */
    int64_t ne0;        /* elements per row (input dimension) */
    int64_t ne1;        /* rows (output dimension); 1 for vectors */
    uint64_t row_bytes; /* bytes of one row: ggml_type_row_size(type, ne0) */
    const char *name;   /* borrowed from the GGUF file: "blk.3.attn_k.weight" */
};

/* The projections LoRA can target, per layer. Tables over all targets use
 * index layer * MODEL_W_PER_LAYER + wid; the output projection follows at
 * n_layer * MODEL_W_PER_LAYER (model_n_targets() entries in all). */
enum model_wid {
    MODEL_W_Q = 0,    /* attn_q */
    MODEL_W_K = 1,    /* attn_k */
    MODEL_W_V = 2,    /* attn_v */
    MODEL_W_O = 3,    /* attn_output */
    MODEL_W_GATE = 4, /* ffn_gate */
    MODEL_W_UP = 5,   /* ffn_up */
    MODEL_W_DOWN = 6, /* ffn_down */
    MODEL_W_PER_LAYER = 7,
};

struct model_layer {
    struct model_weight attn_norm; /* (n_embd) F32 */
    struct model_weight w[MODEL_W_PER_LAYER]; /* indexed by enum model_wid:
                                                 Q: [n_embd, n_head * head_dim]
                                                 K, V: [n_embd, n_head_kv * head_dim]
                                                 O: [n_head * head_dim, n_embd]
                                                 GATE, UP: [n_embd, n_ff]
                                                 DOWN: [n_ff, n_embd] */
    struct model_weight ffn_norm;  /* (n_embd) F32 */
};

struct model {
    struct model_hparams hp;       /* validated hyper-parameters */
    struct model_weight tok_embd;  /* [n_embd, n_vocab] */
    struct model_weight out_norm;  /* (n_embd) F32 */
    struct model_weight output;    /* [n_embd, n_vocab]; token_embd's view when tied */
    int tied;                      /* 1: no output.weight, output reuses token_embd */
    struct model_weight rope_freqs; /* (n_rot / 2) F32 llama3 frequency divisors, or data NULL */
    struct model_layer *layers;    /* owned: n_layer entries */
    struct lora **loras;           /* owned: adapters attached by model_add_lora */
    int32_t n_loras;               /* entries in loras; batch_lora.ids index them */
    struct gguf_file *gf;          /* owned: the mapping every weight points into */
};

/* ---- open and close ---- */

/* Maps the GGUF at path and validates it as a llama model. Returns 0 with
 * *out owning the model, or a negative MF_E* code with err saying why (the
 * tensor, its shape and the expected one; the architecture or type that is
 * not supported) and *out NULL. */
int model_open(const char *path, struct model **out, struct mf_err *err);

/* Same, over an already open GGUF, whose ownership passes to the model on
 * success and on failure (it is closed then). */
int model_open_gguf(struct gguf_file *gf, struct model **out, struct mf_err *err);

/* Frees the model, its adapters and the mapping. Accepts NULL. */
void model_close(struct model *m);

/* ---- adapters ---- */

/* Attaches an adapter opened by lora_open against m; the model owns it from
 * then on (also on failure, when it is closed). *id is its index for
 * batch_lora.ids. MF_ENOMEM or MF_ERANGE (more than MODEL_MAX_LORAS). */
int model_add_lora(struct model *m, struct lora *l, int32_t *id, struct mf_err *err);

/* ---- facts ---- */

/* The weight a (layer, wid) pair names; layer == n_layer (any wid) gives the
 * output projection. Borrowed from m. */
const struct model_weight *model_weight_at(const struct model *m, int32_t layer,
                                           enum model_wid wid);

/* Number of LoRA-targetable projections: n_layer * MODEL_W_PER_LAYER + 1. */
int32_t model_n_targets(const struct model *m);

/* 1 if a projection of this type is supported by model_open. */
int model_type_supported(enum ggml_type t);

/* Bytes of KV storage one KV_BLOCK_TOKENS block takes over all layers with
 * elements of elem_bytes bytes (2 for F16): n_layer * 2 * n_head_kv *
 * KV_BLOCK_TOKENS * head_dim * elem_bytes. */
uint64_t model_kv_block_bytes(const struct model *m, int elem_bytes);

#endif
