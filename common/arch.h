/*
 * arch.h: the model families mfc runs, as data.
 *
 * One descriptor per GGUF architecture (general.architecture): the name that
 * prefixes its hyper-parameter keys, and the switches that set how its
 * forward pass differs from Llama's. The loader (runtime/model) binds tensors
 * and reads keys by these switches, and every backend computes one forward
 * pass over them; the compiler side reads the same table to refuse an
 * unsupported architecture at build time and to report a family. Adding a
 * family is an entry here and, at most, a new switch (docs/families.md).
 *
 * Switches describe what llama.cpp's graph for the family computes (its
 * src/models/<arch>.cpp at the version tests/tools/node pins), since that is
 * the reference the numerics tests hold mfc to.
 */
#ifndef MFC_ARCH_H
#define MFC_ARCH_H

#include <stddef.h>
#include <stdint.h>

/* How RoPE pairs a head's dimensions. */
enum arch_rope {
    ARCH_ROPE_NORMAL = 0, /* (2i, 2i + 1): Llama as GGUF stores it (q/k rows permuted) */
    ARCH_ROPE_NEOX = 1,   /* (i, i + n_rot / 2): Qwen, Gemma, Phi-3 */
};

/* The gate's activation in the gated feed-forward act(gate) * up. */
enum arch_act {
    ARCH_ACT_SILU = 0, /* x / (1 + e^-x) */
    ARCH_ACT_GELU = 1, /* GELU, tanh approximation (Gemma) */
    ARCH_ACT_SWIGLU_OAI = 2, /* gpt-oss: x = min(gate, 7), y = clamp(up, -7, 7),
                                x sigmoid(1.702 x) (y + 1) (ggml_swiglu_oai) */
};

/* How a router turns its logits into the chosen experts and their weights. */
enum arch_gating {
    ARCH_GATE_SOFTMAX = 0,      /* softmax over every expert, the n_used best, weights
                                   renormalised to sum to 1 (Mixtral, Qwen3-MoE) */
    ARCH_GATE_TOPK_SOFTMAX = 1, /* the n_used largest logits, softmax over those only
                                   (gpt-oss; llama.cpp's SOFTMAX_WEIGHT): in exact arithmetic
                                   the weights of ARCH_GATE_SOFTMAX, computed as llama.cpp
                                   computes them so that they round alike */
};

/* Switches (arch_desc.flags). */
#define ARCH_QK_NORM (1u << 0)     /* attn_q_norm / attn_k_norm: RMSNorm of each head before RoPE */
#define ARCH_POST_NORMS (1u << 1)  /* attn_post_norm, ffn_post_norm on each block's output
                                      before the residual add (Gemma 2/3 "sandwich") */
#define ARCH_EMBD_SCALE (1u << 2)  /* embeddings times sqrt(n_embd) */
#define ARCH_Q_PRESCALE (1u << 3)  /* q scaled before attention, scores unscaled (Gemma, Phi-3) */
#define ARCH_FUSED_UP (1u << 4)    /* ffn_up is [n_embd, 2 n_ff]: gate rows then up rows; no
                                      ffn_gate (Phi-3) */
#define ARCH_EXPERTS (1u << 5)     /* layers may route to experts (expert_count > 1) */
#define ARCH_ALL_EXPERTS (1u << 6) /* every layer must (qwen3moe) */
#define ARCH_ROPE_FACTORS (1u << 7) /* rope_factors_long/short (LongRoPE) may be present */
#define ARCH_TIED_ALWAYS (1u << 8) /* the output is token_embd even if output.weight exists */
#define ARCH_SINKS (1u << 9)       /* attn_sinks: a learned logit per query head that joins
                                      every softmax denominator (gpt-oss) */
#define ARCH_O_BIAS (1u << 10)     /* attn_output.bias is required */
#define ARCH_EXPERT_BIASES (1u << 11) /* ffn_gate_inp.bias and the experts' biases
                                         ffn_{gate,up,down}_exps.bias are required */
#define ARCH_FFN_NORM_POST_ATTN (1u << 12) /* the FFN's input norm is stored as
                                              post_attention_norm, with no ffn_norm (gpt-oss) */
#define ARCH_SWA_KEY (1u << 13)    /* attention.sliding_window is required */
#define ARCH_ROPE_FULL (1u << 14)  /* rope.dimension_count must be the head width (llama.cpp
                                      shapes the projections and the score scale by it) */

struct arch_desc {
    const char *name;      /* general.architecture, and the prefix of its keys */
    const char *models;    /* what users know the family as */
    enum arch_rope rope;   /* pairing of rotated dimensions */
    enum arch_act act;     /* gate activation */
    uint32_t flags;        /* ARCH_* switches */
    int32_t swa_period;    /* sliding-window layer pattern when a window is set: layer il
                              slides iff il % period < period - 1 (0: every layer) */
    int32_t swa_window;    /* window (positions) when <arch>.attention.sliding_window is
                              absent; 0: no sliding window unless the key gives one */
    float swa_rope_base;   /* RoPE base of sliding layers when rope.freq_base_swa is
                              absent; 0: the model's own base */
    float attn_softcap;    /* score soft-cap when the key is absent; 0: none */
    float final_softcap;   /* logit soft-cap when the key is absent; 0: none */
    int32_t wide_scale_layers; /* at this block count the q scale is 1/sqrt(n_embd / n_head)
                                  instead of 1/sqrt(head_dim) (Gemma 27B); 0: never */
    enum arch_gating gating;   /* the router's gating (ARCH_EXPERTS families) */
};

/* The descriptor of architecture name[0..len), or NULL if mfc does not run it. */
const struct arch_desc *arch_find(const char *name, size_t len);

/* Every descriptor, *n of them, in a fixed order. */
const struct arch_desc *arch_all(size_t *n);

/* "llama, qwen2, ..." for error messages: the names arch_find accepts. */
const char *arch_names(void);

#endif
