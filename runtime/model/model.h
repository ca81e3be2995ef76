/*
 * model.h: a decoder-only transformer loaded from GGUF, in any family of
 * common/arch.h (Llama/Mistral/Mixtral, Qwen2/3, Qwen3-MoE, Gemma 2/3, Phi-3,
 * gpt-oss).
 *
 * model_open() maps the file through gguf.h and checks everything a backend
 * relies on before returning: architecture, hyper-parameters, every tensor's
 * presence, type and exact shape. After that a backend may index any weight
 * row without further checks. Weights are borrowed pointers into the GGUF
 * mapping; nothing is copied. The struct is public because every backend
 * (cpu.c, the CUDA host code) reads it; only model*.c and lora.c write it.
 *
 * The family's switches are resolved here into plain values (hp.q_scale,
 * hp.attn_softcap, a layer's swa flag and RoPE base, ...), so a backend
 * computes one forward pass whatever the family: docs/families.md.
 * Fused projections (attn_qkv, Phi-3's gate+up ffn_up) are bound as views
 * of their rows, so the q/k/v and gate/up weights below always exist.
 *
 * Shapes below are in ggml order, [ne0, ne1]: ne0 is the row length (the
 * input dimension of a projection), ne1 the number of rows (its output).
 */
#ifndef MFC_MODEL_H
#define MFC_MODEL_H

#include <stdint.h>

#include "common/arch.h"
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
#define MODEL_MAX_EXPERTS 512     /* expert_count */

struct model_hparams {
    const struct arch_desc *arch; /* the family; keys below are "<arch>.<key>" */
    int32_t n_ctx_train;   /* context_length: positions seen in training */
    int32_t n_embd;        /* embedding_length: residual width */
    int32_t n_ff;          /* feed_forward_length: gated FFN hidden width */
    int32_t n_layer;       /* block_count */
    int32_t n_head;        /* attention.head_count: query heads */
    int32_t n_head_kv;     /* attention.head_count_kv: K/V heads (GQA); = n_head if absent */
    int32_t head_dim;      /* attention.key_length, or n_embd / n_head */
    int32_t n_rot;         /* rope.dimension_count: rotated dims per head (even) */
    int32_t n_vocab;       /* rows of token_embd.weight */
    float rope_base;       /* rope.freq_base (10000 if absent) */
    float rope_freq_scale; /* 1 / rope.scaling.factor for linear and YaRN scaling, else 1 */
    float rms_eps;         /* attention.layer_norm_rms_epsilon */
    int rope_neox;         /* 1: pairs (i, i + n_rot / 2); 0: (2i, 2i + 1) */
    float rope_mscale;     /* cos and sin are scaled by it (YaRN, LongRoPE; else 1) */
    float yarn_ext;        /* YaRN's extrapolation mix (1 with YaRN, else 0) */
    int32_t n_ctx_orig;    /* rope.scaling.original_context_length, else n_ctx_train */
    int32_t n_swa;         /* sliding window in positions (a query at p sees keys
                              p - n_swa < k <= p); 0: no layer slides */
    float q_scale;         /* q *= q_scale before attention (1 unless ARCH_Q_PRESCALE) */
    float kq_scale;        /* scores scale inside the softmax (1 / sqrt(head_dim), or 1) */
    float attn_softcap;    /* scores become c tanh(s / c) before the softmax; 0: none */
    float final_softcap;   /* logits become c tanh(l / c); 0: none */
    float embd_scale;      /* embedding rows times this (sqrt(n_embd) or 1) */
    int32_t n_expert;      /* expert_count; 0: dense FFN everywhere */
    int32_t n_expert_used; /* expert_used_count: experts a token goes to */
    int32_t n_ff_exp;      /* expert_feed_forward_length, else n_ff: an expert's width */
};

/* One weight matrix (or vector) as it lies in the file. */
struct model_weight {
    const void *data;   /* borrowed: points into the GGUF map; NULL when absent */
    enum ggml_type type; /* F32/F16/BF16/Q4_0/Q5_0/Q5_1/Q8_0/Q4_K/Q5_K/Q6_K/MXFP4
                            (norms, biases, sinks: F32) */
    int64_t ne0;        /* elements per row (input dimension) */
    int64_t ne1;        /* rows (output dimension); 1 for vectors */
    int64_t ne2;        /* experts: matrices of ne1 rows one after another; else 1 */
    uint64_t row_bytes; /* bytes of one row: ggml_type_row_size(type, ne0) */
    const char *name;   /* borrowed from the GGUF file: "blk.3.attn_k.weight" */
    int64_t row0;       /* first row of this view in the named tensor (fused q/k/v and
                           gate/up are views of one tensor's rows); 0 otherwise */
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

/* The expert tensors of a routed FFN layer (model_layer.exps). */
enum model_exp { MODEL_EXP_GATE = 0, MODEL_EXP_UP = 1, MODEL_EXP_DOWN = 2, MODEL_EXP_COUNT = 3 };

struct model_layer {
    struct model_weight attn_norm; /* (n_embd) F32 */
    struct model_weight w[MODEL_W_PER_LAYER]; /* indexed by enum model_wid:
                                                 Q: [n_embd, n_head * head_dim]
                                                 K, V: [n_embd, n_head_kv * head_dim]
                                                 O: [n_head * head_dim, n_embd]
                                                 GATE, UP: [n_embd, n_ff]
                                                 DOWN: [n_ff, n_embd]
                                                 (GATE/UP/DOWN data NULL in an expert layer) */
    struct model_weight bias[4];   /* (rows of Q, K, V, O: by enum model_wid) F32 biases,
                                      data NULL if absent */
    struct model_weight attn_sinks; /* (n_head) F32 sink logit of each query head, or NULL */
    struct model_weight q_norm;    /* (head_dim) F32 per-head RMSNorm of q, or data NULL */
    struct model_weight k_norm;    /* (head_dim) F32 per-head RMSNorm of k, or data NULL */
    struct model_weight attn_post_norm; /* (n_embd) F32 on the attention output, or NULL */
    struct model_weight ffn_norm;  /* (n_embd) F32 (gpt-oss: post_attention_norm.weight) */
    struct model_weight ffn_post_norm;  /* (n_embd) F32 on the FFN output, or NULL */
    struct model_weight gate_inp;  /* [n_embd, n_expert] router, data NULL in a dense layer */
    struct model_weight gate_inp_b; /* (n_expert) F32 router bias, or NULL */
    struct model_weight exps[MODEL_EXP_COUNT]; /* gate, up: [n_embd, n_ff_exp, n_expert];
                                                  down: [n_ff_exp, n_embd, n_expert] */
    struct model_weight exps_b[MODEL_EXP_COUNT]; /* F32 expert biases, or NULL: gate, up:
                                                    [n_ff_exp, n_expert]; down: [n_embd,
                                                    n_expert] (row e is expert e's) */
    int swa;                       /* 1: this layer attends within hp.n_swa positions */
    int rope_kind;                 /* which RoPE table: 0 global, 1 sliding (own base) */
};

struct model {
    struct model_hparams hp;       /* validated hyper-parameters */
    struct model_weight tok_embd;  /* [n_embd, n_vocab] */
    struct model_weight out_norm;  /* (n_embd) F32 */
    struct model_weight output;    /* [n_embd, n_vocab]; token_embd's view when tied */
    int tied;                      /* 1: no output.weight, output reuses token_embd */
    struct model_weight rope_freqs; /* (n_rot / 2) F32 frequency divisors (llama3, or the
                                       LongRoPE factors model_set_ctx picked), or data NULL */
    struct model_weight rope_long;  /* (n_rot / 2) F32 LongRoPE factors past n_ctx_orig */
    struct model_weight rope_short; /* (n_rot / 2) F32 LongRoPE factors up to n_ctx_orig */
    float rope_bases[2];            /* RoPE base of each rope_kind (global, sliding) */
    float rope_scales[2];           /* frequency scale of each rope_kind */
    float rope_corr[2][2];          /* YaRN's corrected dimension range of each rope_kind */
    int32_t n_rope_kinds;           /* 1, or 2 when sliding layers have their own RoPE */
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

/* For a model built in memory rather than read from a GGUF (benchmarks,
 * tests): the values hp's family and dimensions decide (RoPE pairing, the
 * q and score scales, embedding scale, the family's default soft-caps,
 * mscale 1), as model_open derives them before reading the keys that
 * override some. hp.arch, the dimensions and n_ctx_train must be set. */
void model_hparams_derive(struct model_hparams *hp);

/* Which layers slide (hp.n_swa > 0: layer il does iff period is 0 or
 * il % period < period - 1), each layer's RoPE kind, and the RoPE base,
 * scale and YaRN range of each kind (swa_base: the sliding layers' base,
 * 0 for the family's default). m->layers must be allocated. */
void model_layer_kinds(struct model *m, int32_t period, float swa_base);

/* Tells the model the context a sequence may reach: picks the LongRoPE
 * factors (long past n_ctx_orig, as llama.cpp picks by its context size).
 * Call before a backend is created. Does nothing for other models. */
void model_set_ctx(struct model *m, int32_t n_ctx);

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

/* RoPE's cos and sin for every rotated pair at position pos, for layers of
 * rope_kind kind: cs[2i], cs[2i + 1] for pair i < n_rot / 2. Computed as
 * ggml's rope cache does (theta advanced by repeated multiplication in
 * float, frequency divisors, YaRN ramp, mscale), so angles match llama.cpp
 * bit for bit before the sin/cos. Every backend takes its tables from here. */
void model_rope_row(const struct model *m, int kind, int32_t pos, float *cs);

/* hp.n_swa when every layer slides (a position older than the window is
 * never read again, so its KV blocks can go), else 0. */
int32_t model_window_all(const struct model *m);

/* Bytes of KV storage one KV_BLOCK_TOKENS block takes over all layers with
 * elements of elem_bytes bytes (2 for F16): n_layer * 2 * n_head_kv *
 * KV_BLOCK_TOKENS * head_dim * elem_bytes. */
uint64_t model_kv_block_bytes(const struct model *m, int elem_bytes);

#endif
