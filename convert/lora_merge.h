/*
 * lora_merge.h: folding GGUF LoRA adapters into a base model's weights, and
 * requantizing a GGUF to another file type, in one streaming pass.
 *
 * For every base tensor W that one or more adapters adapt:
 *
 *     W' = W + sum over adapters of  s * B·A,   s = scale * alpha / rank
 *
 * (s = scale when the adapter has no adapter.lora.alpha, or alpha is 0: the
 * rule llama.cpp uses at run time), computed in F32 from the dequantized
 * base rows, then encoded again in the tensor's own type, or in the type the
 * --quantize file type picks for it. GGUF LoRA layout (llama.cpp's
 * convert_lora_to_gguf.py): "<base>.lora_a" ne = [base ne0, rank] and
 * "<base>.lora_b" ne = [rank, base ne1]; token_embd.weight's pair is stored
 * the other way (lora_a [rank, n_vocab], lora_b [rank, n_embd]) and gives
 * W'[t][e] = W[t][e] + s * sum_k A[t][k]·B[e][k], as llama.cpp applies it.
 *
 * Tensors no adapter touches and whose type does not change are copied byte
 * for byte; metadata is copied key by key in order (general.file_type is
 * set when requantizing, general.quantization_version added when requantizing
 * gives quantized tensors). The output is written through a temporary next
 * to it and renamed at the end: on any failure nothing is left at out_path.
 * Memory: the adapters' A and B of one tensor in F32 plus a window of rows
 * (a few MB), never a whole tensor or model.
 */
#ifndef MFC_LORA_MERGE_H
#define MFC_LORA_MERGE_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "common/quant.h"

#define LORA_MERGE_MAX_ADAPTERS 64
#define LORA_MERGE_MAX_RANK 65536

/* One adapter to fold in. */
struct lora_merge_adapter {
    const char *path; /* borrowed: a GGUF LoRA */
    float scale;      /* the user's scale (Modelfile --scale, ADAPTER:SCALE); 1 by default */
};

struct lora_merge_opts {
    const struct lora_merge_adapter *adapters; /* borrowed; may be NULL when n_adapters is 0 */
    size_t n_adapters;                         /* 0..LORA_MERGE_MAX_ADAPTERS */
    int quantize;           /* nonzero: every tensor gets the type ftype's mix picks */
    enum quant_ftype ftype; /* with quantize: the target file type (quant_ftype_can_build) */
    int threads;            /* rows encoded at once; 0 or 1: the calling thread only */
};

/* What a merge did. */
struct lora_merge_stats {
    uint64_t n_tensors;   /* tensors in the output */
    uint64_t n_merged;    /* tensors at least one adapter changed */
    uint64_t n_requant;   /* tensors written in another type than the base's */
    uint64_t n_copied;    /* tensors copied byte for byte */
    uint64_t n_pairs;     /* lora_a/lora_b pairs applied, over all adapters */
    uint64_t n_ignored;   /* adapter tensors skipped (mergekit-style *_norm.weight) */
    uint64_t bytes_out;   /* tensor data bytes written */
};

/*
 * Checks every adapter against the base (identity keys, architecture, pair
 * completeness, base tensor present and 2-D, shapes, rank, types it can
 * decode) without writing anything. Returns 0, or MF_EFORMAT /
 * MF_EUNSUPPORTED / MF_EINVAL with err naming the adapter file, the tensor
 * and both shapes. lora_merge_file runs the same check first.
 */
int lora_merge_check(const char *base_path, const struct lora_merge_opts *o, struct mf_err *err);

/*
 * Writes base + adapters (requantized when o->quantize) to out_path.
 * Refuses (MF_EUNSUPPORTED) to quantize a base holding quantized tensors to a
 * quantized file type, as `ollama create -q` does, naming the first such
 * tensor (F32/F16/BF16 targets are accepted from any base: decoding upward
 * loses nothing, and merging into F16 avoids re-encoding error), and (MF_EINVAL)
 * an out_path that exists and is not a regular file (a device, FIFO,
 * directory or symlink: it would be replaced by the rename). st may be NULL.
 * Returns 0, or a negative MF_E* code with err filled; nothing is left at
 * out_path on failure (a file already there is kept as it was).
 */
int lora_merge_file(const char *base_path, const char *out_path, const struct lora_merge_opts *o,
                    struct lora_merge_stats *st, struct mf_err *err);

/*
 * Parses a --quantize name as mfc build and mfc lora merge accept it
 * (Q4_K_M, Q5_K_M, Q8_0, F16, and the other file types quant.h can build;
 * any case). Returns 0 and sets *ft, or MF_EUSAGE naming the accepted ones.
 */
int lora_merge_parse_ftype(const char *name, enum quant_ftype *ft, struct mf_err *err);

#endif
