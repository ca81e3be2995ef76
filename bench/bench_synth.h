/*
 * bench_synth.h: models of real shapes synthesized in memory for the
 * benchmarks (bench_synth.c).
 */
#ifndef MFC_BENCH_SYNTH_H
#define MFC_BENCH_SYNTH_H

#include <stddef.h>
#include <stdint.h>

#include "common/ggml_type.h"
#include "runtime/model/model.h"

/* A model shape: mkmodel's presets, each family with its own switches
 * (common/arch.h): Qwen's q/k/v biases, Gemma's wide heads, post-norms,
 * soft-caps and sliding layers, Phi-3's ungrouped heads. */
struct bench_shape {
    const char *name;
    const char *arch; /* general.architecture */
    int32_t n_layer, n_embd, n_ff, n_head, n_head_kv, n_vocab;
    int32_t head_dim;                   /* 0: n_embd / n_head */
    int32_t swa, swa_period;            /* sliding window and layer pattern; 0: none */
    int32_t n_expert, n_used, n_ff_exp; /* routed layers (every one); 0: dense */
};

/* The shapes: 1b, llama3-8b, qwen2.5-7b, gemma2-9b, phi3-mini, qwen3-30b-a3b. */
extern const struct bench_shape bench_shapes[];
extern const size_t bench_n_shapes;

/* Random bytes made into valid, small values of type t: ne1 rows of ne0;
 * *row_bytes their row size. Exits when out of memory. */
void *bench_synth_data(enum ggml_type t, int64_t ne0, int64_t ne1, uint64_t *row_bytes);

/* The shape's hyperparameters and layer kinds, no weights (cuda_bench's
 * plan mode). Exits when out of memory. */
struct model *bench_synth_shape(const struct bench_shape *s);

/* The model of shape s in type's mix (f16, bf16, q8_0, q4_k_m as llama.cpp
 * mixes it, q4_k: every matrix Q4_K); a routed shape has every layer
 * routed. Exits on an unknown type. */
struct model *bench_synth(const struct bench_shape *s, const char *type);

#endif
