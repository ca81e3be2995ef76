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

/* One GGUF tensor to write. */
struct hf_tensor {
    char name[64];               /* GGUF name, "blk.3.attn_q.weight" */
    const struct st_file *f;     /* borrowed: the shard holding the source; NULL: generated */
    const struct st_tensor *src; /* borrowed: the source tensor; NULL: generated */
    const float *gen;            /* borrowed: data of a generated F32 tensor (rope_freqs) */
    int64_t perm_heads;          /* >0: rows permuted for llama's RoPE with this many heads */
    enum ggml_type type;         /* type written */
    uint32_t n_dims;             /* 1 or 2 */
    uint64_t ne[2];              /* ggml order: ne[0] is the row length */
    uint64_t bytes;              /* bytes written */
};

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
 * which must hold head_dim/2 floats and outlive the table. Types are not
 * chosen yet (hf_tensors_types). *out is malloc'd, *n its length. */
int hf_tensors_plan(const struct hf_config *c, const struct hf_shards *s, const float *rope,
                    struct hf_tensor **out, size_t *n, struct mf_err *err);

/* Picks each tensor's output type for o and fills bytes; *ft gets the file
 * type written in general.file_type. */
int hf_tensors_types(const struct hf_config *c, const struct hf_convert_opts *o,
                     struct hf_tensor *t, size_t n, enum quant_ftype *ft, struct mf_err *err);

/* Output row r of t: the source row it comes from (RoPE permutation). */
uint64_t hf_tensor_src_row(const struct hf_tensor *t, uint64_t r);

/* The source bytes of output rows r0.. when they can be written as they are
 * (same type, no permutation), else NULL. */
const void *hf_tensor_direct(const struct hf_tensor *t, uint64_t r0);

/* Converts output rows [r0, r0 + nr) of t into dst (nr * row bytes), using
 * tmp (ne[0] floats) as scratch. */
int hf_tensor_rows(const struct hf_tensor *t, uint64_t r0, uint64_t nr, void *dst, float *tmp,
                   struct mf_err *err);

#endif
