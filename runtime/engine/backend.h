/*
 * backend.h: what the engine asks of a compute backend (CPU, CUDA).
 *
 * A backend computes steps (runtime/model/batch.h) for one model: it may prepare
 * the weights (repack, upload), owns the KV arena and all scratch memory,
 * and writes logits into the caller's buffer. The engine drives it through
 * this vtable so the scheduler never knows which device runs the step.
 *
 * Lifecycle:   create --> kv_alloc --> step* --> free
 *              (prepare happens inside create: weights are ready after it)
 *
 * KV arena: n_blocks blocks; block b holds, for every layer l, K then V of
 * KV_BLOCK_TOKENS tokens for every KV head, laid out
 *     (n_blocks, n_layer, 2, n_head_kv, KV_BLOCK_TOKENS x head_dim)
 * so one head's 16 tokens are contiguous (a decode reads them as one run).
 * Inside that last 16 x head_dim tile each backend picks its order (the
 * CPU stores keys transposed, [head_dim][16], and values [16][head_dim]).
 * Block ids in batch_seq.block_table index this arena; kv.c owns which ids
 * are free, the backend only stores what the step writes.
 */
#ifndef MFC_BACKEND_H
#define MFC_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "runtime/model/batch.h"
#include "runtime/model/model.h"
#include "runtime/engine/sampler.h"

/* Element type of the KV arena. */
enum backend_kv_type {
    BACKEND_KV_F16 = 0, /* default: half the bytes, what llama.cpp stores too */
    BACKEND_KV_F32 = 1, /* exact K/V, for numerics checks */
    BACKEND_KV_Q8 = 2,  /* CUDA only: int8 with a float scale per token and head
                           (kernels.h mfk_kv_shape), ~52% of F16's bytes */
    BACKEND_KV_FP8 = 3, /* CUDA only: FP8 e4m3 in the same layout, the scale absmax / 448 */
};

struct backend_config {
    int32_t n_threads;      /* CPU worker threads; 0: one per online core */
    uint64_t kv_bytes;      /* memory budget for the KV arena in bytes; 0: 256 MiB */
    enum backend_kv_type kv_type; /* arena element type */
    int32_t max_tokens;     /* most new tokens in one step (all sequences); 0: 2048 */
    int32_t max_seqs;       /* most sequences in one step; 0: 256 */
    int32_t max_logits;     /* most logits rows in one step (verify steps want several
                               a sequence); 0: max_seqs */
    const char *kernels;    /* CPU: "scalar", "avx2" or "avx512vnni" to force a kernel
                               table (tests, benchmarks); NULL: the best this CPU has */
};

/* One backend instance bound to one model. Each backend embeds this as the
 * first member of its own struct; callers see only the vtable. */
struct backend {
    const struct backend_ops *ops; /* the backend's functions */
};

struct backend_ops {
    const char *name; /* "cpu", "cuda" */
    /* Binds a backend to m (which must outlive it) and prepares the
     * weights. Adapters attached to m later are picked up by step. */
    int (*create)(const struct model *m, const struct backend_config *cfg, struct backend **out,
                  struct mf_err *err);
    /* Allocates the KV arena from cfg.kv_bytes: *n_blocks = budget / block
     * bytes (at least 1, else MF_ENOMEM). Called once. */
    int (*kv_alloc)(struct backend *b, int32_t *n_blocks, struct mf_err *err);
    /* Runs one step: appends every sequence's new K/V to its blocks and
     * writes the logits rows asked for. MF_EINVAL (with the sequence named)
     * for a batch that breaks batch.h's contract; no KV is written then. A
     * step with logits rows and batch.logits NULL may return while the
     * device still computes it (CUDA): the sample that reads the rows is
     * ordered after it and reports its failure. */
    int (*step)(struct backend *b, const struct batch *batch, struct mf_err *err);
    /* Releases everything. Accepts NULL. */
    void (*free)(struct backend *b);
    /* Optional: host memory the backend copies into fastest (the CUDA
     * backend's is page-locked, so a step's logits arrive by DMA instead of
     * through the driver's staging buffer); NULL: malloc and free. */
    void *(*host_alloc)(struct backend *b, size_t bytes);
    void (*host_free)(struct backend *b, void *p);
    /* Optional: draws from the logits rows of the last step where they are
     * (a step run with batch.logits NULL leaves them there): ids[j] from
     * d[j], j < n; -1 for a row given back, whose logits are then copied to
     * logits + j * n_vocab (logits may be NULL only if no row is given
     * back: MF_EINVAL otherwise). engine_model.sample's contract. */
    int (*sample)(struct backend *b, int32_t n, const struct sampler_draw *d, int32_t *ids,
                  float *logits, struct mf_err *err);
};

/* Shorthands for b->ops->... */
int backend_create(const struct backend_ops *ops, const struct model *m,
                   const struct backend_config *cfg, struct backend **out, struct mf_err *err);
int backend_kv_alloc(struct backend *b, int32_t *n_blocks, struct mf_err *err);
int backend_step(struct backend *b, const struct batch *batch, struct mf_err *err);
void backend_free(struct backend *b); /* accepts NULL */
/* ops->host_alloc/host_free, or malloc/free; NULL when out of memory.
 * backend_host_free accepts NULL. */
void *backend_host_alloc(struct backend *b, size_t bytes);
void backend_host_free(struct backend *b, void *p);

/* The same as struct engine_model's callbacks (engine.h), whose ctx is the
 * backend: step, logits_alloc, logits_free and sample (ops->sample, which
 * must be set). */
int backend_engine_step(void *b, struct batch *batch, struct mf_err *err);
void *backend_engine_alloc(void *b, size_t bytes);
void backend_engine_free(void *b, void *p);
int backend_engine_sample(void *b, int32_t n, const struct sampler_draw *d, int32_t *ids,
                          float *logits, struct mf_err *err);

/* The CPU backend (cpu.c). */
extern const struct backend_ops cpu_backend_ops;

/* Bytes of one KV block for model m with arena type t. */
uint64_t backend_kv_block_bytes(const struct model *m, enum backend_kv_type t);

/* How many blocks fit in budget bytes (0 when not even one does, or more
 * than INT32_MAX would: then INT32_MAX). */
int32_t backend_kv_n_blocks(const struct model *m, enum backend_kv_type t, uint64_t budget);

/* Checks a batch against batch.h's contract for model m and an arena of
 * n_blocks blocks: counts, tokens < n_vocab, block tables covering every
 * position with ids in range, adapter ids attached to m, want_logits in
 * 0..n_tokens, total tokens, sequences and logits rows within the limits
 * (cfg's max_tokens, max_seqs, max_logits, defaults filled), a logits
 * buffer when logits are wanted (unless keeps_logits: a backend with
 * ops->sample, whose logits may stay where they are). Returns 0 or
 * MF_EINVAL naming the sequence. */
int backend_check_batch(const struct model *m, int32_t n_blocks, const struct backend_config *cfg,
                        int keeps_logits, const struct batch *batch, struct mf_err *err);

#endif
