/*
 * kv.h: paged KV block manager: block ids, per-sequence block tables, the
 * free list, refcounts and the automatic prefix cache (design in kv.c).
 *
 * The K/V storage itself lives in the model's backend, indexed by the block
 * ids handed out here (runtime/model/batch.h). Not thread-safe: one owner (the
 * scheduler, under the engine's lock) calls everything.
 */
#ifndef MFC_KV_H
#define MFC_KV_H

#include <stdint.h>

#include "common/err.h"
#include "runtime/model/batch.h"

struct kv_cache;
struct kv_seq;

/* Upper bound on the pool, so block ids and counts stay far from int32 overflow. */
#define KV_MAX_BLOCKS (1 << 24)

/* Blocks needed to hold n_tokens positions. */
#define KV_BLOCKS_FOR(n_tokens) (((n_tokens) + KV_BLOCK_TOKENS - 1) / KV_BLOCK_TOKENS)

struct kv_config {
    int32_t n_blocks;  /* pool size, 1 .. KV_MAX_BLOCKS */
    int32_t window;    /* the model's every layer sees this many positions back (sliding
                          window); 0: a sequence needs all its blocks */
    int32_t hash_bits; /* 0: 64-bit block hashes; 1..63 keeps only that many bits
                          (tests use it to force collisions, which must be harmless) */
};

/* Counters for /metrics; the prefix numbers count tokens, like vLLM's
 * prefix_cache_queries / prefix_cache_hits (reference/vllm.md §6). */
struct kv_stats {
    int32_t blocks_total;    /* pool size */
    int32_t blocks_used;     /* named by at least one block table */
    int32_t blocks_free;     /* unused and holding nothing worth keeping */
    int32_t blocks_cached;   /* unused but kept for prefix hits (evictable, LRU) */
    uint64_t prefix_queries; /* prompt tokens looked up, tokens */
    uint64_t prefix_hits;    /* of those, found in the cache, tokens */
    uint64_t evictions;      /* cached blocks reclaimed for new allocations */
};

/* Lifecycle */

/* Creates a pool of cfg->n_blocks free blocks. Returns 0 and *out, or a
 * negative MF_E* code with err filled and *out NULL. Free with kv_close. */
int kv_open(struct kv_cache **out, const struct kv_config *cfg, struct mf_err *err);
/* Frees the pool and every sequence still open. Accepts NULL. */
void kv_close(struct kv_cache *kv);

/* Sequences (one block table each) */

/* Opens an empty block table able to grow to max_tokens positions, for a
 * sequence running with the adapters in lora (copied: part of every block's
 * cache identity, so different adapters never share K/V). The table is
 * allocated here, so nothing later allocates. Returns 0 and *out, or
 * MF_EINVAL/MF_ENOMEM with *out NULL. */
int kv_seq_open(struct kv_cache *kv, const struct batch_lora *lora, int32_t max_tokens,
                struct kv_seq **out, struct mf_err *err);
/* Releases the table's blocks (kv_seq_release) and frees it. Accepts NULL. */
void kv_seq_close(struct kv_cache *kv, struct kv_seq *seq);
/* Drops every block from the table (finish, cancel, preemption): refcounts
 * fall; a block reaching 0 becomes CACHED if it holds a registered full
 * block, FREE otherwise. Blocks go to the LRU tail last-block-first, so a
 * sequence's tail is evicted before its (more shareable) head. Can't fail. */
void kv_seq_release(struct kv_cache *kv, struct kv_seq *seq);

/* Gives back the first n blocks of seq's table, which no step reads again
 * (positions before every layer's sliding window), as kv_seq_release does
 * one block; their entries become -1. Keeps at least the last committed
 * block (it parents the next). Can't fail. */
void kv_seq_drop(struct kv_cache *kv, struct kv_seq *seq, int32_t n);

/* Shortens seq's table to the blocks covering its first n_tokens positions
 * (never below its committed blocks), giving the rest back as
 * kv_seq_release does: after a verify step, the blocks that held only
 * rejected proposals. They were never committed, so they go FREE. Can't
 * fail. */
void kv_seq_trim(struct kv_cache *kv, struct kv_seq *seq, int32_t n_tokens);

/* The physical block ids of seq, valid until its next kv_* call; -1 for
 * blocks kv_seq_drop gave back. */
const int32_t *kv_seq_blocks(const struct kv_seq *seq);
int32_t kv_seq_n_blocks(const struct kv_seq *seq);

/* Prefix cache */

/* Looks the full blocks of tokens[0..n_tokens) up without changing anything.
 * At most (n_tokens - 1) / KV_BLOCK_TOKENS blocks can hit: the last token is
 * always computed, to get its logits. Returns the hit count in blocks and
 * sets *n_unused_hits to how many of them are CACHED, i.e. would stop being
 * allocatable once taken. */
int32_t kv_probe_prefix(const struct kv_cache *kv, const struct kv_seq *seq, const int32_t *tokens,
                        int32_t n_tokens, int32_t *n_unused_hits);
/* Takes the blocks kv_probe_prefix finds into seq's (empty) table, refcount
 * +1 each, and counts n_tokens queries and the hit tokens in the stats.
 * Returns the number of tokens whose K/V is now present (a multiple of
 * KV_BLOCK_TOKENS). Can't fail. */
int32_t kv_match_prefix(struct kv_cache *kv, struct kv_seq *seq, const int32_t *tokens,
                        int32_t n_tokens);
/* Registers seq's blocks that are full and computed (the first n_computed
 * of tokens, the sequence's whole token stream) in the prefix cache, so later
 * sequences can share them. A block equal to one already cached stays
 * private (it is freed, not cached, on release). Can't fail. */
void kv_commit(struct kv_cache *kv, struct kv_seq *seq, const int32_t *tokens, int32_t n_computed);
/* Forgets every cached block (after adapters are reloaded under the same
 * ids, for instance): CACHED blocks become FREE; used blocks stay in their
 * tables but are no longer shareable. Can't fail. */
void kv_clear_prefix_cache(struct kv_cache *kv);

/* Allocation */

/* Blocks an allocation can take now: FREE plus CACHED (evictable). */
int32_t kv_n_allocatable(const struct kv_cache *kv);
/* Grows seq's table to cover n_tokens positions, taking FREE blocks first and
 * evicting the least recently used CACHED block when none is left. Returns 0,
 * or MF_EBUSY when the pool lacks the blocks (the caller preempts someone),
 * or MF_ERANGE past the table's max_tokens; on failure nothing changes. */
int kv_alloc(struct kv_cache *kv, struct kv_seq *seq, int32_t n_tokens, struct mf_err *err);

/* Accounting and checks */

void kv_get_stats(const struct kv_cache *kv, struct kv_stats *st);
/* Verifies every invariant listed in kv.c (refcounts equal table references,
 * list membership, no leaks, hash-table consistency). Returns 0, or
 * MF_EINTEGRITY with err naming the first broken invariant. O(pool). */
int kv_check(const struct kv_cache *kv, struct mf_err *err);

/* Memory budget */

struct kv_budget {
    const char *cache_gb;     /* MFC_KV_CACHE_GB as read by the caller, or NULL */
    uint64_t free_bytes;      /* memory free for the KV arena now (device or host) */
    double fraction;          /* share of free_bytes to use when cache_gb is NULL, (0, 1] */
    uint64_t bytes_per_block; /* the backend's K+V bytes for one block, all layers */
};

/* Computes the pool size: cache_gb GiB when set, else fraction * free_bytes,
 * divided by bytes_per_block and capped at KV_MAX_BLOCKS. Returns 0 and
 * *n_blocks, or MF_EINVAL (bad setting) / MF_ENOMEM (not even one block)
 * with err filled and *n_blocks untouched. */
int kv_budget_blocks(const struct kv_budget *b, int32_t *n_blocks, struct mf_err *err);

#endif
