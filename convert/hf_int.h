/*
 * hf_int.h: what hf_tensors.c (the tensor table and row conversion) shares
 * with hf_convert.c (the driver). Internal to the Hugging Face importer.
 */
#ifndef MFC_HF_INT_H
#define MFC_HF_INT_H

#include <stddef.h>
#include <stdint.h>

#include "common/ggml_type.h"
#include "common/safetensors.h"
#include "convert/hf.h"

/* One GGUF tensor to write. Its rows come from one source tensor, or in
 * blocks of blk_rows (one expert's rows of a 3-D *_exps tensor) from one
 * source each (xs) or from one stacked source (blocks blk_stride rows
 * apart); blk_off skips rows in each block (the up half of a fused
 * gate_up_proj). */
struct hf_tensor {
    char name[64];               /* GGUF name, "blk.3.attn_q.weight" */
    const struct st_file *f;     /* borrowed: the shard holding the source; NULL: generated */
    const struct st_tensor *src; /* borrowed: the (first) source tensor; NULL: generated */
    const float *gen;            /* borrowed: data of a generated F32 tensor (rope_freqs) */
    int64_t perm_heads;          /* >0: rows permuted for llama's RoPE with this many heads */
    const struct st_file **xf;   /* owned: each block's shard, or NULL */
    const struct st_tensor **xs; /* owned: each block's source, or NULL */
    uint64_t blk_rows;           /* output rows per block; 0: rows map one to one */
    uint64_t blk_stride;         /* rows between blocks of a stacked source */
    uint64_t blk_off;            /* first source row of a block */
    float add;                   /* added to each value (Gemma's RMSNorm weight + 1) */
    int add_f16;                 /* round the sum to F16, as torch adds in an F16 source */
    enum ggml_type type;         /* type written */
    uint32_t n_dims;             /* 1, 2 or 3 */
    uint64_t ne[3];              /* ggml order: ne[0] is the row length; unused dims 1 */
    uint64_t bytes;              /* bytes written */
};

/* Rows of t (the product of its dimensions after the first). */
uint64_t hf_tensor_nrows(const struct hf_tensor *t);

/* Frees the tables hf_tensors_plan made. */
void hf_tensors_free(struct hf_tensor *t, size_t n);

/* The open weights: every shard, in name order. */
struct hf_shards {
    struct st_file **f; /* owned */
    size_t n;
};

/* Opens model.safetensors.index.json's shards, or model.safetensors. */
int hf_shards_open(const char *dir, struct hf_shards *s, struct mf_err *err);
void hf_shards_close(struct hf_shards *s);

/* Maps every source tensor to its GGUF tensor, in the GGUF order (rope
 * factors, token_embd, blocks, output_norm, output), checking names, dtypes
 * and shapes against c; rope_freqs (when c asks for it) points at rope,
 * which must hold head_dim/2 floats and outlive the table, LongRoPE's
 * tables at c's. Types are not chosen yet (hf_tensors_types). *out is
 * freed with hf_tensors_free, *n its length. */
int hf_tensors_plan(const struct hf_config *c, const struct hf_shards *s, const float *rope,
                    struct hf_tensor **out, size_t *n, struct mf_err *err);

/* Picks each tensor's output type for o and fills bytes; *ft gets the file
 * type written in general.file_type. */
int hf_tensors_types(const struct hf_config *c, const struct hf_convert_opts *o,
                     struct hf_tensor *t, size_t n, enum quant_ftype *ft, struct mf_err *err);

/* Output row r of t: the source row it comes from in its source (RoPE
 * permutation, expert blocks). */
uint64_t hf_tensor_src_row(const struct hf_tensor *t, uint64_t r);

/* The source bytes of output rows r0.. when they can be written as they are
 * (same type, no permutation), else NULL. */
const void *hf_tensor_direct(const struct hf_tensor *t, uint64_t r0);

/* Converts output rows [r0, r0 + nr) of t into dst (nr * row bytes), using
 * tmp (ne[0] floats) as scratch. */
int hf_tensor_rows(const struct hf_tensor *t, uint64_t r0, uint64_t nr, void *dst, float *tmp,
                   struct mf_err *err);

#endif
