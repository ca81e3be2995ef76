/*
 * quant.h: ggml's tensor codecs (dequantize, quantize) and llama.cpp's
 * file-type mixes, bit-compatible with llama.cpp.
 *
 * Block layouts are those of ggml-common.h; sizes come from ggml_type.h.
 * Dequantization is bit-exact with ggml's dequantize_row_*; quantization is
 * byte-identical with ggml's quantize_row_*_ref (no importance matrix).
 * The vectorised dequantizers produce the same bits as the portable ones
 * (tests/unit/test_quant.c checks both against each other and against ggml).
 *
 * Nothing here allocates or keeps mutable state; the SIMD dispatch table is
 * chosen once per process (pthread_once) and is const afterwards.
 */
#ifndef MF_QUANT_H
#define MF_QUANT_H

#include <stdint.h>

#include "err.h"
#include "ggml_type.h"

/* ---- fp16 / bf16 scalars ---------------------------------------------- */

/* IEEE half to float; exact for every input (inf, NaN, subnormals). */
float quant_f16_to_f32(uint16_t h);
/* Float to IEEE half, round to nearest even; overflow gives inf, NaN stays
 * NaN (quiet, sign kept). Matches ggml's GGML_FP32_TO_FP16. */
uint16_t quant_f32_to_f16(float f);
/* bf16 to float: the bits shifted up 16 (exact). */
float quant_bf16_to_f32(uint16_t b);
/* Float to bf16, round to nearest even; NaN becomes a quiet NaN (ggml's
 * ggml_compute_fp32_to_bf16). */
uint16_t quant_f32_to_bf16(float f);

/* ---- rows --------------------------------------------------------------- */

/* 1 if quant_dequantize_row handles t: F32, F16, BF16, Q4_0, Q4_1, Q5_0,
 * Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, MXFP4. */
int quant_can_dequantize(enum ggml_type t);

/* 1 if quant_quantize_row handles t: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1,
 * Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, MXFP4. */
int quant_can_quantize(enum ggml_type t);

/* Decodes n elements of type t at src (n / block_size blocks, any
 * alignment) into dst[0..n). Returns 0, or MF_EUNSUPPORTED for a type not
 * handled, MF_EINVAL when n is negative or not a multiple of t's block size;
 * dst is untouched on failure. Uses the fastest implementation this CPU has. */
int quant_dequantize_row(enum ggml_type t, const void *src, float *dst, int64_t n,
                         struct mf_err *err);

/* Encodes src[0..n) as type t into dst, which must hold
 * ggml_type_row_size(t, n) bytes (any alignment). Same errors as
 * quant_dequantize_row; dst is untouched on failure. */
int quant_quantize_row(enum ggml_type t, const float *src, void *dst, int64_t n,
                       struct mf_err *err);

/* ---- implementation choice (tests, benchmarks) ------------------------ */

enum quant_isa {
    QUANT_ISA_SCALAR = 0, /* portable C; always available */
    QUANT_ISA_AVX2 = 1,   /* x86-64 AVX2 + FMA + F16C */
    QUANT_ISA_AVX512 = 2, /* AVX2 set plus AVX-512 F/BW/VL */
    QUANT_ISA_COUNT = 3,
};

/* One dequantizer per type; n is a valid multiple of the block size, src
 * and dst need no alignment. */
struct quant_ops {
    enum quant_isa isa; /* which instruction set these functions use */
    const char *name;   /* "scalar", "avx2", "avx512" */
    void (*dequantize[GGML_TYPE_COUNT])(const void *src, float *dst,
                                        int64_t n); /* NULL: type not handled */
};

/* The table quant_dequantize_row uses: the best this CPU supports, chosen on
 * the first call (thread-safe) and fixed for the process. Never NULL. */
const struct quant_ops *quant_ops_get(void);

/* The table for isa, or NULL when this CPU (or this build) lacks it. */
const struct quant_ops *quant_ops_for_isa(enum quant_isa isa);

/* ---- file types (llama.cpp's llama_ftype) ----------------------------- */

/* On-disk values of general.file_type (llama.h); never change them. */
enum quant_ftype {
    QUANT_FTYPE_ALL_F32 = 0,
    QUANT_FTYPE_MOSTLY_F16 = 1,
    QUANT_FTYPE_MOSTLY_Q4_0 = 2,
    QUANT_FTYPE_MOSTLY_Q4_1 = 3,
    QUANT_FTYPE_MOSTLY_Q8_0 = 7,
    QUANT_FTYPE_MOSTLY_Q5_0 = 8,
    QUANT_FTYPE_MOSTLY_Q5_1 = 9,
    QUANT_FTYPE_MOSTLY_Q2_K = 10,
    QUANT_FTYPE_MOSTLY_Q3_K_S = 11,
    QUANT_FTYPE_MOSTLY_Q3_K_M = 12,
    QUANT_FTYPE_MOSTLY_Q3_K_L = 13,
    QUANT_FTYPE_MOSTLY_Q4_K_S = 14,
    QUANT_FTYPE_MOSTLY_Q4_K_M = 15,
    QUANT_FTYPE_MOSTLY_Q5_K_S = 16,
    QUANT_FTYPE_MOSTLY_Q5_K_M = 17,
    QUANT_FTYPE_MOSTLY_Q6_K = 18,
    QUANT_FTYPE_MOSTLY_Q2_K_S = 21,
    QUANT_FTYPE_MOSTLY_BF16 = 32,
    QUANT_FTYPE_MOSTLY_MXFP4_MOE = 38, /* expert tensors MXFP4, other matrices Q8_0 */
};

/* "Q4_K_M", "F16", "BF16", "F32", "MXFP4_MOE", ...; NULL for a value not
 * listed above. */
const char *quant_ftype_name(enum quant_ftype ft);

/* Parses a name as Ollama and llama-quantize spell it ("q4_k_m", "Q8_0",
 * "f16", "bf16", "f32"; any case). Returns 0 and sets *ft, or -1. */
int quant_ftype_from_name(const char *name, enum quant_ftype *ft);

/* 1 if every tensor type the mix can choose is one quant_quantize_row can
 * produce (so mfc can build that file type), else 0. */
int quant_ftype_can_build(enum quant_ftype ft);

/* What llama.cpp's per-tensor rules need to know about the model. */
struct quant_model_info {
    const char *arch; /* general.architecture ("llama", "falcon"); borrowed */
    int32_t n_layer;  /* block count; llama.cpp's n_attention_wv and n_ffn_down */
    int32_t n_expert; /* experts per MoE layer; 0 or 1 for a dense model */
    int32_t n_gqa;    /* n_head / n_head_kv; 0 when unknown (treated as 1) */
    int has_output;   /* 1 if output.weight exists (embeddings not tied) */
    int is_70b;       /* llama.cpp classified it LLM_TYPE_70B (llama, 80 layers, GQA) */
};

/* One tensor as it comes from the converter. */
struct quant_tensor_info {
    const char *name;    /* GGUF name, "blk.3.attn_v.weight"; borrowed */
    enum ggml_type type; /* its type before quantization (F32, F16, BF16) */
    int n_dims;          /* 1..4 */
    int64_t ne[4];       /* ne[0] is the row length; unused dims are 1 */
};

/* The type a tensor gets in file type ft, following llama.cpp's
 * llama_tensor_get_type (src/llama-quant.cpp) without imatrix or overrides:
 * tensors llama.cpp never quantizes (norms, 1-D, gate_inp, ...) keep F32 if
 * 1-D or a norm (as convert_hf_to_gguf.py writes them) and their own type
 * otherwise; the mix rules pick per-layer types; rows that do not divide
 * into the chosen block fall back (Q4_K->Q5_0, Q5_K->Q5_1, Q6_K->Q8_0,
 * Q2_K/Q3_K->Q4_0, then F16). Returns 0 and sets *out, or MF_EUNSUPPORTED
 * for a file type not handled, MF_EINVAL for a malformed tensor (layer index
 * outside n_layer, bad dims); *out is untouched on failure. */
int quant_ftype_tensor_type(enum quant_ftype ft, const struct quant_model_info *mi,
                            const struct quant_tensor_info *ti, enum ggml_type *out,
                            struct mf_err *err);

#endif
