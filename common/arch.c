/*
 * arch.c: the table of model families (see arch.h).
 *
 * Each entry's values come from llama.cpp's loader and graph for the family
 * (src/models/<name>.cpp): Gemma 2's default window 4096 and period 2,
 * soft-caps 50 and 30; Gemma 3's period 6 and sliding-layer RoPE base 10000
 * with no scaling; Gemma's 27B models (46 and 62 blocks) scaling q by
 * 1/sqrt(n_embd / n_head), which no GGUF key records; gpt-oss's
 * (openai-moe.cpp) sinks, biases, SwiGLU with clamps, top-k-then-softmax
 * gating and every other layer sliding, with the window key required.
 * Owns nothing.
 */
#include "common/arch.h"

#include <string.h>

static const struct arch_desc archs[] = {
    {"llama", "Llama 2/3.x, Mistral, Mixtral (experts), TinyLlama", ARCH_ROPE_NORMAL, ARCH_ACT_SILU,
     ARCH_EXPERTS, 0, 0, 0.0f, 0.0f, 0.0f, 0, ARCH_GATE_SOFTMAX},
    {"qwen2", "Qwen2, Qwen2.5, DeepSeek-R1-Distill-Qwen", ARCH_ROPE_NEOX, ARCH_ACT_SILU, 0, 0, 0,
     0.0f, 0.0f, 0.0f, 0, ARCH_GATE_SOFTMAX},
    {"qwen3", "Qwen3, DeepSeek-R1-0528-Qwen3", ARCH_ROPE_NEOX, ARCH_ACT_SILU, ARCH_QK_NORM, 0, 0,
     0.0f, 0.0f, 0.0f, 0, ARCH_GATE_SOFTMAX},
    {"qwen3moe", "Qwen3 mixture of experts (Qwen3-30B-A3B, 235B-A22B)", ARCH_ROPE_NEOX,
     ARCH_ACT_SILU, ARCH_QK_NORM | ARCH_EXPERTS | ARCH_ALL_EXPERTS, 0, 0, 0.0f, 0.0f, 0.0f, 0,
     ARCH_GATE_SOFTMAX},
    {"gemma2", "Gemma 2", ARCH_ROPE_NEOX, ARCH_ACT_GELU,
     ARCH_POST_NORMS | ARCH_EMBD_SCALE | ARCH_Q_PRESCALE | ARCH_TIED_ALWAYS, 2, 4096, 0.0f, 50.0f,
     30.0f, 46, ARCH_GATE_SOFTMAX},
    {"gemma3", "Gemma 3 (text)", ARCH_ROPE_NEOX, ARCH_ACT_GELU,
     ARCH_QK_NORM | ARCH_POST_NORMS | ARCH_EMBD_SCALE | ARCH_Q_PRESCALE, 6, 0, 10000.0f, 0.0f, 0.0f,
     62, ARCH_GATE_SOFTMAX},
    {"phi3", "Phi-3, Phi-3.5, Phi-4", ARCH_ROPE_NEOX, ARCH_ACT_SILU,
     ARCH_Q_PRESCALE | ARCH_FUSED_UP | ARCH_ROPE_FACTORS, 0, 0, 0.0f, 0.0f, 0.0f, 0,
     ARCH_GATE_SOFTMAX},
    {"gpt-oss", "OpenAI gpt-oss-20b, gpt-oss-120b", ARCH_ROPE_NEOX, ARCH_ACT_SWIGLU_OAI,
     ARCH_EXPERTS | ARCH_ALL_EXPERTS | ARCH_SINKS | ARCH_O_BIAS | ARCH_EXPERT_BIASES |
         ARCH_FFN_NORM_POST_ATTN | ARCH_SWA_KEY | ARCH_ROPE_FULL,
     2, 0, 0.0f, 0.0f, 0.0f, 0, ARCH_GATE_TOPK_SOFTMAX},
};

const struct arch_desc *arch_find(const char *name, size_t len)
{
    for (size_t i = 0; i < sizeof archs / sizeof archs[0]; i++)
        if (strlen(archs[i].name) == len && memcmp(archs[i].name, name, len) == 0)
            return &archs[i];
    return NULL;
}

const struct arch_desc *arch_all(size_t *n)
{
    *n = sizeof archs / sizeof archs[0];
    return archs;
}

const char *arch_names(void)
{
    return "llama, qwen2, qwen3, qwen3moe, gemma2, gemma3, phi3, gpt-oss";
}
