/*
 * cuda_plan.h: the CUDA backend's host-side planning, which needs no GPU
 * and is unit-tested everywhere (tests/unit/test_cuda_host.c):
 *
 *   - weight placement: every tensor a step reads gets a 256-byte aligned
 *     offset in one device buffer, in its GGUF block format (a tied output
 *     shares token_embd's copy);
 *   - the KV budget: MFC_GPU_MEMORY_UTILIZATION's share of the device's
 *     memory minus what is already in use (vLLM's gpu_memory_utilization);
 *   - one step's bookkeeping: the per-token arrays, the flattened block
 *     tables and the RoPE angles, laid out in one buffer that a single copy
 *     moves to the device.
 *
 * Nothing here allocates device memory or calls CUDA; runtime/cuda/cuda.c does.
 */
#ifndef MFC_CUDA_PLAN_H
#define MFC_CUDA_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "kernels/kernels.h"
#include "runtime/engine/backend.h"
#include "runtime/model/batch.h"
#include "runtime/model/model.h"
#include "runtime/engine/sampler.h"

#define CUDA_PLAN_ALIGN 256 /* device offsets of weights and step arrays */
#define CUDA_DEFAULT_UTILIZATION 0.9

/* 1 if the CUDA kernels handle a projection/embedding of type t with rows
 * of ne0 elements (the same rule as kernels.h mfk_weight_ok). */
int cuda_plan_type_ok(enum ggml_type t, int64_t ne0);

/* ---- weights ------------------------------------------------------------ */

struct cuda_wslot {
    const struct model_weight *w; /* borrowed from the model */
    uint64_t off;                 /* byte offset in the device buffer */
    uint64_t bytes;               /* ne1 * row_bytes, times ne2 for an expert tensor */
};

struct cuda_wplan {
    struct cuda_wslot *slots; /* owned: one per distinct tensor, in upload order */
    int32_t n;
    uint64_t total; /* bytes of the device buffer */
};

/* Layer l's attention shape with the family's switches resolved (NeoX
 * pairs, the q and score scales, Gemma 2's soft-cap, the layer's sliding
 * window) over an arena of kv (F16; Q8 and FP8 the 8-bit layout, FP8's
 * bytes e4m3). Returns 1 when the layer masks scores (a window or a
 * soft-cap, which the decode tiles do not take: its decode tokens go one at
 * a time), else 0. */
int cuda_plan_layer_shape(const struct model *m, int32_t l, enum backend_kv_type kv,
                          struct mfk_kv_shape *ks);

/* 1 when the CUDA backend keeps K/V of type t: F16, Q8 (int8) or FP8
 * (e4m3), each scale a float per token, head and K or V. */
int cuda_plan_kv_ok(enum backend_kv_type t);

/* Places every tensor of m: token_embd, output (unless tied), output_norm,
 * and per layer attn_norm, the 7 projections, ffn_norm, and a routed
 * layer's router (ffn_gate_inp) and expert tensors (each 3-D tensor whole,
 * its experts one after another). Fails with
 * MF_EUNSUPPORTED naming the first tensor the kernels cannot read,
 * MF_ENOMEM; *p is empty then. */
int cuda_plan_weights(const struct model *m, struct cuda_wplan *p, struct mf_err *err);
void cuda_wplan_free(struct cuda_wplan *p); /* accepts an empty plan */
/* The slot of w in p (by pointer, or by data for a tied output), or NULL. */
const struct cuda_wslot *cuda_wplan_find(const struct cuda_wplan *p, const struct model_weight *w);

/* ---- KV budget ---------------------------------------------------------- */

/* Bytes for the KV arena. kv_bytes (the backend config) wins when nonzero.
 * Otherwise util (MFC_GPU_MEMORY_UTILIZATION as read by the caller, NULL
 * for 0.9) is the share of total_b the process may fill, and the budget is
 * util * total_b minus what is in use now (total_b - free_b: weights,
 * scratch, other processes). MF_EINVAL for a util that is not a number in
 * (0, 1], MF_ENOMEM when nothing is left. */
int cuda_plan_kv_budget(uint64_t total_b, uint64_t free_b, const char *util, uint64_t kv_bytes,
                        uint64_t *budget, struct mf_err *err);

/* Tokens a step needs for the tensor-core GEMM on quantized weights, from
 * MFC_CUDA_GEMM_MIN as read by the caller (NULL or "": 5, the crossover
 * measured on an H200; 0: never). MF_EINVAL naming v for anything but an
 * integer in 0..1000000. */
#define CUDA_DEFAULT_GEMM_MIN 5
int cuda_plan_gemm_min(const char *v, int32_t *out, struct mf_err *err);

/* Tokens up to which the tensor-core GEMM takes Q4_K and Q6_K weights to
 * kernels/qgemm.cu (dequantized in registers) rather than dequantizing
 * them to bf16 for cuBLAS, from MFC_CUDA_QGEMM_MAX as read by the caller
 * (NULL or "": MFK_QGEMM_MAX_TOKENS; 0: never); MF_EINVAL as above. */
int cuda_plan_qgemm_max(const char *v, int32_t *out, struct mf_err *err);

/* Tokens from which a product with weights of type t goes to the
 * tensor-core GEMM (mfk_gemm: cuBLAS, or kernels/qgemm.cu for Q4_K/Q6_K
 * steps of up to MFK_QGEMM_MAX_TOKENS), 0 for never, given gemm_min
 * (above) and mmq (MFC_CUDA_MMQ): F32/F16/BF16 weights from 2 (read in
 * place); Q4_K, with mmq, past CUDA_PLAN_MMQ_MAX, below which its integer
 * tensor-core kernel (kernels/mmq.cu, from MFK_MMQ_MIN tokens) is faster;
 * the other types from gemm_min. H200, Llama-3-8B Q4_K_M: mmq.cu against
 * qgemm.cu 1,380 against 1,038 tokens/s at batch 8, 1,964 against 2,177
 * at 16, 3,413 against 3,921 at 32, 4,666 against 5,428 at 64 (9 to 15
 * not measured); mmq.cu also beats dequantization + cuBLAS up to 64
 * tokens (4,245 against 4,088 at 64). */
#define CUDA_PLAN_MMQ_MAX 8
int32_t cuda_plan_gemm_from(enum ggml_type t, int32_t gemm_min, int mmq);

/* 1 when the kernel making the input of n products (weight types types[],
 * rows ne0 wide) over T tokens should also write its 8-bit form (struct
 * mfk_q8, a buffer of min(max_tokens, CUDA_PLAN_MMQ_MAX) rows): T at most
 * that, ne0 a multiple of 256, and one of the weights a Q4_K or Q6_K
 * product that stays off the tensor-core GEMM (cuda_plan_gemm_from), the
 * GEMV or mmq.cu, which read that form. 0: they quantize for themselves if
 * they must. */
int cuda_plan_q8_input(int n, const enum ggml_type *types, int64_t ne0, int32_t T,
                       int32_t max_tokens, int32_t gemm_min, int mmq);

/* 1 when SwiGLU should write the down product's input already rounded for
 * the tensor-core GEMM (mfk_swiglu_half, mfk_gemm_rounded): the down weight
 * (type t) takes the GEMM at T tokens (cuda_plan_gemm_from), rounds its
 * input (not F32), and no adapter of the step needs the float input. */
int cuda_plan_swiglu_rounded(enum ggml_type t, int32_t T, int32_t gemm_min, int mmq,
                             int adapters);

/* 1 when RMSNorm should write its output rounded for the tensor-core GEMM
 * too (mfk_rmsnorm_rounded, mfk_gemm_rounded) for the n weights it feeds:
 * every one takes the GEMM at T tokens (cuda_plan_gemm_from) and rounds its
 * input the same way (none F32; all F16, fp16, or none, bf16). Adapters do
 * not matter: the float output is still written. */
int cuda_plan_norm_rounded(int n, const enum ggml_type *types, int32_t T, int32_t gemm_min,
                           int mmq);

/* Splits of each context for mfk_attention's T tokens on a device of sms
 * multiprocessors, max_ctx the longest context: 1 (none) when T x n_head_kv
 * blocks already fill the multiprocessors, or when a context has fewer than
 * 2 x CUDA_PLAN_SPLIT_BLOCKS KV blocks; else enough splits for about two
 * blocks per multiprocessor, each split keeping CUDA_PLAN_SPLIT_BLOCKS KV
 * blocks at least (one per warp of the split kernel). */
#define CUDA_PLAN_SPLIT_BLOCKS 4
int32_t cuda_plan_att_splits(int32_t T, int32_t n_head_kv, int32_t sms, int32_t max_ctx);

/* 1 when a step's attention writes the output projection's 8-bit input
 * itself (mfk_attention's q8: its split combine): every token split (no
 * tiles, splits > 1) and at most CUDA_PLAN_COMBINE_Q8_MAX tokens. H200,
 * Llama-3-8B Q4_K_M, one launch a layer fewer: batch 1 343.5 -> 347.3
 * tokens/s, batch 8 1,096 -> 1,102, but batch 16 1,582 -> 1,555 (not
 * traced), hence the limit. */
#define CUDA_PLAN_COMBINE_Q8_MAX 8
int cuda_plan_combine_q8(int32_t T, int32_t n_tiles, int32_t splits);

/* An on/off setting (the MFC_CUDA_* switches) as read by the caller:
 * NULL or "": def, "1": 1, "0": 0; anything else MF_EINVAL naming name
 * and v. */
int cuda_plan_switch(const char *name, const char *v, int def, int *on, struct mf_err *err);

/* ---- one step ----------------------------------------------------------- */

/* Attention takes a step's tokens two ways (kernels.h): a sequence with
 * CUDA_PLAN_TILE_MIN new tokens or more, or a context longer than the
 * per-token kernel holds, goes in tiles of up to CUDA_PLAN_TILE tokens
 * (tensor cores, one K/V read per tile); the others (decode steps) one
 * token at a time. */
#define CUDA_PLAN_TILE 16
#define CUDA_PLAN_TILE_MIN 4
/* A verify step's sequence (want_logits == n_tokens: the decode token and
 * its proposals, runtime/engine/spec.c) of up to this many tokens is
 * attended one token at a time whatever its count, as decode tokens are:
 * its rows then come from the decode path's kernels, and a step of such
 * sequences is a decode step that may be recorded as a graph. */
#define CUDA_PLAN_VERIFY_MAX 16
/* A step with more one-at-a-time tokens than this (and decode_tiles on:
 * MFC_CUDA_DECODE_TILES) gives each of them a tile of its own instead: at
 * 40 tokens and more the tile kernel's tensor cores beat the per-token
 * kernel (H200, Llama-3-8B, 512-token contexts: batch 64 16.9 -> 16.0 ms a
 * step, batch 128 21.7 -> 20.4; batch 32 11.7 against 12.2 the other way).
 * A multiple of 8, so a recorded step's padded count (cuda_plan_graph_tokens)
 * never straddles it. */
#define CUDA_PLAN_DECODE_TILES 32
/* With k_flash_dec (the tiles' own kernel for 1-token tiles, its warps
 * chosen for the grid), tiles also win from 4 tokens on while the contexts
 * are short. H200, Q4_K_M, 512-token contexts: batch 4 719 -> 741
 * tokens/s, 8 1,088 -> 1,168, 16 1,566 -> 1,721, 32 2,758 -> 3,005 (BF16:
 * 8 1,264 -> 1,381, 32 4,127 -> 4,700); 2048-token contexts: 4 595 -> 630,
 * 8 858 -> 1,035, 16 1,182 -> 1,510, 32 2,090 -> 2,410. At batch 2 of
 * 2048 tokens they lost (465 -> 422) and at batch 1 of 512 they only tie
 * the split per-token kernel, whose splits a long context wants: fewer
 * tokens, or contexts past CUDA_PLAN_DECODE_TILES_CTX (longer ones were not
 * measured), keep the per-token kernel up to CUDA_PLAN_DECODE_TILES. */
#define CUDA_PLAN_DECODE_TILES_MIN 4
#define CUDA_PLAN_DECODE_TILES_CTX 2048

/* Offsets (bytes from the buffer start) and counts of a step's arrays. */
struct cuda_step_plan {
    int32_t T;          /* new tokens */
    int32_t n_out;      /* logits rows (want_logits of every sequence) */
    int32_t n_tables;   /* block table entries, all sequences */
    int32_t max_ctx;    /* largest position + 1 */
    int32_t n_tiles;    /* attention tiles */
    int32_t n_long;     /* of those, the tiles of tiled sequences (the others: a
                           one-at-a-time token each, dtiles) */
    int32_t dtiles;     /* 1: one-at-a-time tokens take 1-token tiles */
    int32_t dtile_ctx;  /* largest position + 1 among those (dtiles) */
    int32_t dwarps;     /* the decode kernel's warps (cuda_plan_dec_warps, set by
                           the backend once the step is padded); 0 without dtiles */
    int32_t n_single;   /* tokens attended one at a time */
    int32_t single_ctx; /* largest position + 1 among those */
    int32_t single_cap; /* the cap the step was sized with */
    int32_t att_cap;    /* the context cap the per-token attention is launched with:
                           single_ctx, rounded up in a padded step */
    int32_t n_real;     /* tokens of the batch (T less the padding) */
    int32_t out_real;   /* logits rows of the batch (n_out less the padding's) */
    int32_t pad_blk;    /* the padding's KV block; -1: not padded */
    size_t tok_id;      /* int32 (T): token ids */
    size_t tok_pos;     /* int32 (T): positions */
    size_t tok_blk;     /* int32 (T): physical block the token's K/V goes to */
    size_t tok_toff;    /* int32 (T): offset of its sequence's table in tables */
    size_t out_rows;    /* int32 (n_out): token row of each logits row, sequence by
                           sequence, a sequence's last want_logits tokens in order */
    size_t rope;        /* float (n_rope_kinds, T, n_rot): cos, sin of each rotated pair,
                           a table per rope kind (model_layer.rope_kind) */
    size_t tiles;       /* int32 (n_tiles, 2): first token, tokens (1..CUDA_PLAN_TILE) */
    size_t single;      /* int32 (n_single): tokens attended one at a time */
    size_t tables;      /* int32 (n_tables): the block tables, sequence after sequence
                           (last, so the other offsets depend on the counts only) */
    size_t bytes;       /* total */
};

/* Sizes the step (no writes). The batch must have passed
 * backend_check_batch. single_cap: the longest context the per-token
 * attention kernel takes (mfk_attention_max_ctx); longer ones are tiled.
 * decode_tiles: the one-at-a-time tokens of a step with more than
 * CUDA_PLAN_DECODE_TILES of them, or with CUDA_PLAN_DECODE_TILES_MIN or
 * more and contexts of at most CUDA_PLAN_DECODE_TILES_CTX (heads of 64 or 128 dimensions, which
 * k_flash_dec takes), take a tile each (p->dtiles). */
void cuda_plan_step_size(const struct model *m, const struct batch *bt, int32_t single_cap,
                         int decode_tiles, struct cuda_step_plan *p);

/* mfk_attention_tiles' decode argument for step p: 0 without decode
 * tiles, 2 when every tile is one (k_flash_dec alone), 1 when prompts'
 * tiles share the step (both kernels). */
int cuda_plan_tiles_decode(const struct cuda_step_plan *p);

/* mfk_attention_tiles' warps for the decode kernel's grid of n_tiles x
 * n_head_kv blocks on sms multiprocessors, contexts up to ctx tokens:
 * 3, 4, 6 or 8, each 12 warps a multiprocessor (12 / warps blocks),
 * whichever leaves the fewest waves x a warp's share of the context (see
 * the stash in cuda_plan.c). Llama-3-8B, 8 KV heads on an H200's 132,
 * 512-token contexts: 8 up to batch 16, 6 at 17-33, 4 at 34-49, 3 at 50-66
 * (batch 64's 512 blocks in one wave instead of 1.3 of 4 warps); past
 * 1536 tokens batch 64 takes 6, whose share keeps the stash. A recorded
 * step's warps are part of its graph's shape. */
int cuda_plan_dec_warps(int32_t n_tiles, int32_t n_head, int32_t n_head_kv, int32_t head_dim,
                        int32_t ctx, int32_t sms);

/* Fills buf (p->bytes, from cuda_plan_step_size) with the step's arrays.
 * The RoPE angles are computed as the CPU backend computes them (theta
 * advanced by repeated float multiplication, llama3 frequency divisors,
 * linear scaling), so both backends rotate by the same floats. */
void cuda_plan_step_fill(const struct model *m, const struct batch *bt,
                         const struct cuda_step_plan *p, void *buf);

/* ---- LoRA, grouped by adapter ------------------------------------------- */

/* The rows of one step that an adapter list applies to. */
struct cuda_lora_rows {
    int64_t first;                 /* first row (token) of the sequence in the step's arrays */
    int32_t n;                     /* its rows */
    const struct batch_lora *lora; /* borrowed: its adapters (n > 0) */
};

/* The token rows of one step that one adapter applies to (cuda_lora.c). */
struct cuda_lora_group {
    int32_t lora;  /* adapter id */
    int32_t first; /* its first entry in the rows / scales lists */
    int32_t n;     /* entries: token rows */
    int32_t seqs;  /* sequences they come from; 1: the rows are consecutive */
};

/* Groups a step's adapted rows by adapter, ids ascending: sequence i of
 * seqs has seqs[i].n rows from seqs[i].first and the adapters
 * seqs[i].lora. Each group's entries are its sequences' rows in step order,
 * each row once, rows[e] the row and scales[e] that sequence's scale for
 * the adapter (the sum, for an adapter a sequence names twice). g
 * takes n_loras groups at most; rows and scales the sum of n x lora->n
 * entries at most. Returns the number of groups. */
int32_t cuda_plan_lora_groups(const struct cuda_lora_rows *seqs, int32_t n_seqs, int32_t n_loras,
                              struct cuda_lora_group *g, int32_t *rows, float *scales);

/* ---- decode steps as CUDA graphs ---------------------------------------- */

/* A decode step (no tiles but 1-token ones, no adapters) may be recorded as a CUDA graph and
 * replayed by later steps of the same shape (runtime/cuda/cuda.c). The shape is
 * what the kernels' arguments depend on: the token count, padded to 1, 2,
 * 4 or a multiple of 8, the attention's context cap, rounded up to
 * CUDA_PLAN_GRAPH_CTX, and its split count; everything else the kernels
 * read from the step's arrays. So a batch that grows by one sequence, or a context by one token,
 * mostly replays a graph already made. */
#define CUDA_PLAN_GRAPH_MAX 256 /* tokens of a recorded step, at most */
#define CUDA_PLAN_GRAPH_CTX 256 /* granularity of a recorded step's context cap */

/* The padded token count of a recorded step of T tokens, or 0 when T is
 * below 1 or the padding passes cap (the caller's limit) or
 * CUDA_PLAN_GRAPH_MAX. */
int32_t cuda_plan_graph_tokens(int32_t T, int32_t cap);

/* Pads p (from cuda_plan_step_size, with no tiles but 1-token ones) to
 * T >= p->T tokens (cuda_plan_graph_tokens) and re-lays it out: the padding
 * is token 0 at position 0 of block pad_blk (a block no sequence owns: its
 * K/V land there and its attention reads only that), attended one at a time
 * (a tile each with p->dtiles); n_out
 * becomes T, the rows past the batch's own being copies nobody reads;
 * att_cap is single_ctx rounded up (CUDA_PLAN_GRAPH_CTX, at most
 * single_cap). The attention's split count stays the caller's choice from
 * the real single_ctx, so a padded step computes what an unpadded one
 * would (the kernel partitions each context by its own length). */
void cuda_plan_step_pad(const struct model *m, struct cuda_step_plan *p, int32_t T,
                        int32_t pad_blk);

/* ---- draws on the device ------------------------------------------------- */

/* Packs n plans (runtime/engine/sampler.h) into the kernel's arrays (mfk_sample):
 * hd[j] for d[j], its adjust entries appended to ha (room for n x
 * MFK_SAMPLE_ADJUST), *na = entries used. MF_EINVAL naming the draw for a
 * plan the kernel cannot take: more than MFK_SAMPLE_ADJUST adjustments (or
 * fewer than 0), top_k over MFK_SAMPLE_TOP_K, adjust tokens not ascending
 * ids below n_vocab (the kernel gives each entry its own thread, so a
 * token twice would race). */
/* Grammar masks of the draws (sampler_draw.allow), one after another in hm
 * (room for n rows of cuda_plan_mask_words), each draw's mask_off set in hd
 * (after cuda_plan_draws); *nm words used. Returns 1 when any row has one. */
size_t cuda_plan_mask_words(int32_t n_vocab);
int cuda_plan_masks(const struct sampler_draw *d, int32_t n, int32_t n_vocab,
                    struct mfk_draw *hd, uint32_t *hm, size_t *nm);
int cuda_plan_draws(const struct sampler_draw *d, int32_t n, int32_t n_vocab,
                    struct mfk_draw *hd, struct mfk_adjust *ha, size_t *na, struct mf_err *err);

#endif
