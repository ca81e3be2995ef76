/*
 * kv.c: paged KV cache bookkeeping: block allocator, block tables and the
 * automatic prefix cache (reference/vllm.md §2, vLLM V1's BlockPool).
 *
 * Owns n_blocks block ids of KV_BLOCK_TOKENS tokens each, their refcounts,
 * the FREE list, the CACHED list (LRU order), the prefix-hash table and the
 * block table of every open sequence. Does not own the K/V bytes (the
 * backend's arena, indexed by these ids), requests (sched.c) or weights.
 *
 * Block states:  FREE   --kv_alloc------------------------>  USED
 *                USED   --kv_commit (full, computed)------>  USED+hash
 *                USED   --kv_seq_release, ref 0, no hash-->  FREE
 *                USED+hash --kv_seq_release, ref 0-------->  CACHED
 *                CACHED --kv_match_prefix----------------->  USED+hash
 *                CACHED --kv_alloc, FREE list empty (LRU)->  USED  (hash dropped)
 *                CACHED --kv_clear_prefix_cache----------->  FREE
 *                USED   --kv_seq_drop, ref 0 (as release)->  CACHED or FREE
 *                USED   --kv_seq_trim (past the accepted)-->  FREE (never committed)
 *                (the kv_check invariants hold after each transition)
 *
 * A model whose every layer attends within a sliding window never reads a
 * sequence's blocks before its window again: kv_seq_drop gives them back
 * while the sequence runs, leaving -1 in its table (batch.h), so a long
 * sequence holds only its window's blocks (kv_config.window).
 *
 * A cached block's identity is (parent block id + its epoch, its 16 token
 * ids, and for a root block the adapter set): the 64-bit hash
 * H(parent hash, tokens, adapter) only picks the bucket, and every hit is
 * verified field by field, so a hash collision costs a compare, never wrong
 * K/V. A block's epoch bumps whenever it loses its identity, which makes
 * children of an evicted parent unreachable instead of wrong.
 *
 * Invariants (kv_check): (1) refcount == number of block tables naming the
 * block; (2) ref 0 and no hash <=> on the FREE list; ref 0 and hash <=> on
 * the CACHED list; nothing is on both, nothing on neither (no leaks);
 * (3) ref > 1 implies a hash: only full, computed blocks are shared, so new
 * tokens are never written into a block another sequence reads;
 * (4) hashed <=> in its bucket chain; (5) a table names a block at most once.
 */
#include "runtime/engine/kv.h"

#include <assert.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/num.h"

/* ---------------------------------------------------------------- types */

struct kv_list {
    int32_t head; /* first block id, -1 when empty (LRU: least recently used) */
    int32_t tail; /* last block id, -1 when empty */
    int32_t n;    /* blocks on the list */
};

struct kv_block {
    int32_t ref;                     /* block tables naming this block */
    int32_t prev;                    /* FREE/CACHED list neighbour, -1 at the end */
    int32_t next;                    /* FREE/CACHED list neighbour, -1 at the end */
    int32_t hnext;                   /* next block in the same hash bucket, -1 ends */
    int32_t hashed;                  /* 1: registered in the prefix cache */
    uint32_t epoch;                  /* bumps each time the block loses its identity */
    int32_t parent;                  /* hashed: parent block id, -1 for a root block */
    uint32_t parent_epoch;           /* hashed: the parent's epoch when registered */
    uint64_t hash;                   /* hashed: H(parent hash, tokens, adapter) */
    int32_t tokens[KV_BLOCK_TOKENS]; /* hashed: the token ids the block holds */
    struct batch_lora lora;          /* hashed root blocks: the adapter set */
    uint32_t gen;                    /* hashed root blocks: kv->gen when registered */
};

/* One position of a block table. */
struct kv_entry {
    int32_t block;        /* physical block id */
    int32_t ident;        /* committed: the hashed block naming this prefix (block itself,
                             or an equal block cached earlier), for chaining children */
    uint32_t ident_epoch; /* committed: ident's epoch when recorded */
    uint64_t hash;        /* committed: chain hash of the prefix ending here */
};

struct kv_seq {
    struct kv_seq *prev;    /* kv->seqs neighbours */
    struct kv_seq *next;    /* kv->seqs neighbours */
    struct kv_entry *ents;  /* owned: cap entries, n_blocks used */
    int32_t *ids;           /* owned: cap entries, the block ids alone (batch.h layout) */
    int32_t n_blocks;       /* table length, blocks */
    int32_t cap;            /* table capacity, blocks */
    int32_t n_committed;    /* leading blocks processed by kv_commit / kv_match_prefix */
    int32_t n_dropped;      /* leading entries given back by kv_seq_drop (block -1; their
                               hash and identity kept for the chain), < n_committed */
    struct batch_lora lora; /* the sequence's adapters */
    uint64_t lora_hash;     /* hash of lora, folded into every block hash */
};

struct kv_cache {
    struct kv_block *blocks; /* owned: n_blocks entries */
    int32_t n_blocks;        /* pool size */
    int32_t window;          /* kv_config.window: positions a sliding model looks back */
    int32_t *buckets;        /* owned: n_buckets chain heads, -1 empty */
    uint64_t bucket_mask;    /* n_buckets - 1 (a power of two >= n_blocks) */
    uint64_t hash_mask;      /* bits of the block hash kept (tests shrink it) */
    struct kv_list free;     /* ref 0, no hash */
    struct kv_list lru;      /* ref 0, hashed: head is evicted first */
    struct kv_seq *seqs;     /* open sequences, for kv_check and kv_close */
    uint64_t prefix_queries; /* tokens looked up */
    uint64_t prefix_hits;    /* tokens found */
    uint64_t evictions;      /* CACHED blocks reclaimed */
    uint32_t gen;            /* bumped by kv_clear_prefix_cache: older roots never match */
};

/* The parent hash of a root block: any fixed value (vLLM's NONE_HASH). */
#define KV_ROOT_HASH UINT64_C(0x6d66632d6b762d30)

/* ---------------------------------------------------------------- lists */

static void list_init(struct kv_list *l)
{
    l->head = l->tail = -1;
    l->n = 0;
}

static void list_push_tail(struct kv_cache *kv, struct kv_list *l, int32_t id)
{
    struct kv_block *b = &kv->blocks[id];
    b->prev = l->tail;
    b->next = -1;
    if (l->tail >= 0)
        kv->blocks[l->tail].next = id;
    else
        l->head = id;
    l->tail = id;
    l->n++;
}

static void list_remove(struct kv_cache *kv, struct kv_list *l, int32_t id)
{
    struct kv_block *b = &kv->blocks[id];
    if (b->prev >= 0)
        kv->blocks[b->prev].next = b->next;
    else
        l->head = b->next;
    if (b->next >= 0)
        kv->blocks[b->next].prev = b->prev;
    else
        l->tail = b->prev;
    b->prev = b->next = -1;
    l->n--;
}

/* ---------------------------------------------------------------- hashing */

/* splitmix64's finalizer: every input bit flips about half the output bits. */
static uint64_t mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= UINT64_C(0xbf58476d1ce4e5b9);
    x ^= x >> 27;
    x *= UINT64_C(0x94d049bb133111eb);
    return x ^ (x >> 31);
}

static uint64_t lora_hash(const struct batch_lora *l)
{
    uint64_t h = mix64((uint64_t)l->n);
    for (int32_t i = 0; i < l->n; i++) {
        uint32_t bits;
        memcpy(&bits, &l->scales[i], sizeof bits);
        h = mix64(h ^ (uint32_t)l->ids[i]);
        h = mix64(h ^ bits);
    }
    return h;
}

static int lora_equal(const struct batch_lora *a, const struct batch_lora *b)
{
    return a->n == b->n && memcmp(a->ids, b->ids, (size_t)a->n * sizeof a->ids[0]) == 0 &&
           memcmp(a->scales, b->scales, (size_t)a->n * sizeof a->scales[0]) == 0;
}

static uint64_t block_hash(const struct kv_cache *kv, uint64_t parent, const int32_t *tokens,
                           uint64_t adapter)
{
    uint64_t h = mix64(parent ^ adapter);
    for (int i = 0; i < KV_BLOCK_TOKENS; i++)
        h = mix64(h ^ (uint32_t)tokens[i]);
    return h & kv->hash_mask;
}

/* The hashed block with exactly this identity, or -1. */
static int32_t find_cached(const struct kv_cache *kv, uint64_t h, int32_t parent,
                           uint32_t parent_epoch, const int32_t *tokens,
                           const struct batch_lora *lora)
{
    for (int32_t id = kv->buckets[h & kv->bucket_mask]; id >= 0; id = kv->blocks[id].hnext) {
        const struct kv_block *b = &kv->blocks[id];
        if (b->hash != h || b->parent != parent)
            continue;
        if (parent >= 0 ? b->parent_epoch != parent_epoch
                        : b->gen != kv->gen || !lora_equal(&b->lora, lora))
            continue;
        if (memcmp(b->tokens, tokens, sizeof b->tokens) == 0)
            return id;
    }
    return -1;
}

static void hash_insert(struct kv_cache *kv, int32_t id)
{
    int32_t *head = &kv->buckets[kv->blocks[id].hash & kv->bucket_mask];
    kv->blocks[id].hnext = *head;
    *head = id;
    kv->blocks[id].hashed = 1;
}

/* Removes the block's cache identity (eviction or a cache clear). */
static void hash_drop(struct kv_cache *kv, int32_t id)
{
    struct kv_block *b = &kv->blocks[id];
    int32_t *link = &kv->buckets[b->hash & kv->bucket_mask];
    while (*link != id)
        link = &kv->blocks[*link].hnext;
    *link = b->hnext;
    b->hnext = -1;
    b->hashed = 0;
    b->epoch++;
    memset(&b->lora, 0, sizeof b->lora);
}

/* ---------------------------------------------------------------- lifecycle */

int kv_open(struct kv_cache **out, const struct kv_config *cfg, struct mf_err *err)
{
    struct kv_cache *kv;
    uint64_t nb = 1;

    *out = NULL;
    if (cfg->n_blocks < 1 || cfg->n_blocks > KV_MAX_BLOCKS)
        return mf_err_set(err, MF_ERANGE, "KV cache of %" PRId32 " blocks (allowed 1..%d)",
                          cfg->n_blocks, KV_MAX_BLOCKS);
    if (cfg->hash_bits < 0 || cfg->hash_bits > 63)
        return mf_err_set(err, MF_ERANGE, "KV hash_bits %" PRId32 " (allowed 0..63)",
                          cfg->hash_bits);
    while (nb < (uint64_t)cfg->n_blocks)
        nb <<= 1;
    kv = calloc(1, sizeof *kv);
    if (kv) {
        kv->blocks = calloc((size_t)cfg->n_blocks, sizeof *kv->blocks);
        kv->buckets = malloc(nb * sizeof *kv->buckets);
    }
    if (!kv || !kv->blocks || !kv->buckets) {
        kv_close(kv);
        return mf_err_set(err, MF_ENOMEM, "KV cache of %" PRId32 " blocks: out of memory",
                          cfg->n_blocks);
    }
    kv->n_blocks = cfg->n_blocks;
    kv->window = cfg->window > 0 ? cfg->window : 0;
    kv->bucket_mask = nb - 1;
    kv->hash_mask = cfg->hash_bits ? (UINT64_C(1) << cfg->hash_bits) - 1 : UINT64_MAX;
    memset(kv->buckets, 0xff, nb * sizeof *kv->buckets);
    list_init(&kv->free);
    list_init(&kv->lru);
    for (int32_t i = 0; i < kv->n_blocks; i++) {
        kv->blocks[i].hnext = -1;
        list_push_tail(kv, &kv->free, i);
    }
    *out = kv;
    return 0;
}

void kv_close(struct kv_cache *kv)
{
    if (!kv)
        return;
    while (kv->seqs)
        kv_seq_close(kv, kv->seqs);
    free(kv->buckets);
    free(kv->blocks);
    free(kv);
}

int kv_seq_open(struct kv_cache *kv, const struct batch_lora *lora, int32_t max_tokens,
                struct kv_seq **out, struct mf_err *err)
{
    struct kv_seq *seq;
    int32_t cap = KV_BLOCKS_FOR(max_tokens);

    *out = NULL;
    /* a sliding model's sequence holds its window's blocks, plus one chunk */
    if (max_tokens < 1 || (kv->window ? KV_BLOCKS_FOR(kv->window) + 2 : cap) > kv->n_blocks)
        return mf_err_set(err, MF_ERANGE,
                          "a sequence of %" PRId32 " tokens does not fit a KV cache of %" PRId32
                          " blocks of %d tokens",
                          max_tokens, kv->n_blocks, KV_BLOCK_TOKENS);
    if (lora->n < 0 || lora->n > BATCH_MAX_LORAS)
        return mf_err_set(err, MF_EINVAL, "%" PRId32 " adapters on one sequence (limit %d)",
                          lora->n, BATCH_MAX_LORAS);
    seq = calloc(1, sizeof *seq);
    if (seq) {
        seq->ents = calloc((size_t)cap, sizeof *seq->ents);
        seq->ids = calloc((size_t)cap, sizeof *seq->ids);
    }
    if (!seq || !seq->ents || !seq->ids) {
        if (seq) {
            free(seq->ents);
            free(seq->ids);
        }
        free(seq);
        return mf_err_set(err, MF_ENOMEM, "block table of %" PRId32 " blocks: out of memory", cap);
    }
    seq->cap = cap;
    memset(&seq->lora, 0, sizeof seq->lora);
    seq->lora.n = lora->n;
    memcpy(seq->lora.ids, lora->ids, (size_t)lora->n * sizeof lora->ids[0]);
    memcpy(seq->lora.scales, lora->scales, (size_t)lora->n * sizeof lora->scales[0]);
    seq->lora_hash = lora_hash(&seq->lora);
    seq->next = kv->seqs;
    if (kv->seqs)
        kv->seqs->prev = seq;
    kv->seqs = seq;
    *out = seq;
    return 0;
}

void kv_seq_close(struct kv_cache *kv, struct kv_seq *seq)
{
    if (!seq)
        return;
    kv_seq_release(kv, seq);
    if (seq->prev)
        seq->prev->next = seq->next;
    else
        kv->seqs = seq->next;
    if (seq->next)
        seq->next->prev = seq->prev;
    free(seq->ents);
    free(seq->ids);
    free(seq);
}

/* Gives back entry i's block: a reference fewer, and at 0 the CACHED or
 * FREE list. */
static void put_block(struct kv_cache *kv, struct kv_seq *seq, int32_t i)
{
    int32_t id = seq->ents[i].block;
    struct kv_block *b = &kv->blocks[id];

    seq->ents[i].block = -1;
    seq->ids[i] = -1;
    if (--b->ref > 0)
        return;
    list_push_tail(kv, b->hashed ? &kv->lru : &kv->free, id);
}

void kv_seq_release(struct kv_cache *kv, struct kv_seq *seq)
{
    for (int32_t i = seq->n_blocks - 1; i >= seq->n_dropped; i--)
        put_block(kv, seq, i);
    seq->n_blocks = 0;
    seq->n_committed = 0;
    seq->n_dropped = 0;
}

void kv_seq_drop(struct kv_cache *kv, struct kv_seq *seq, int32_t n)
{
    if (n > seq->n_committed - 1)
        n = seq->n_committed - 1; /* the last committed block parents the next */
    for (int32_t i = seq->n_dropped; i < n; i++)
        put_block(kv, seq, i);
    if (n > seq->n_dropped)
        seq->n_dropped = n;
}

void kv_seq_trim(struct kv_cache *kv, struct kv_seq *seq, int32_t n_tokens)
{
    int32_t keep = KV_BLOCKS_FOR(n_tokens > 0 ? n_tokens : 0);

    if (keep < seq->n_committed)
        keep = seq->n_committed;
    for (int32_t i = seq->n_blocks - 1; i >= keep; i--) {
        assert(!kv->blocks[seq->ents[i].block].hashed); /* past the committed blocks */
        put_block(kv, seq, i);
    }
    if (keep < seq->n_blocks)
        seq->n_blocks = keep;
}

const int32_t *kv_seq_blocks(const struct kv_seq *seq)
{
    return seq->ids;
}

int32_t kv_seq_n_blocks(const struct kv_seq *seq)
{
    return seq->n_blocks;
}

/* ---------------------------------------------------------------- prefix cache */

/* Walks the cache along tokens' full blocks (all but the last token). Calls
 * nothing and changes nothing; fills hits[] (block ids, at most max_out) and
 * returns how many consecutive blocks hit. */
static int32_t walk_prefix(const struct kv_cache *kv, const struct kv_seq *seq,
                           const int32_t *tokens, int32_t n_tokens, int32_t *n_unused,
                           struct kv_entry *hits)
{
    int32_t max_hit = n_tokens > 0 ? (n_tokens - 1) / KV_BLOCK_TOKENS : 0;
    uint64_t parent_hash = KV_ROOT_HASH;
    int32_t parent = -1;
    uint32_t parent_epoch = 0;
    int32_t n = 0;

    *n_unused = 0;
    if (max_hit > seq->cap)
        max_hit = seq->cap;
    for (; n < max_hit; n++) {
        const int32_t *t = tokens + (size_t)n * KV_BLOCK_TOKENS;
        uint64_t h = block_hash(kv, parent_hash, t, seq->lora_hash);
        int32_t id = find_cached(kv, h, parent, parent_epoch, t, &seq->lora);
        if (id < 0)
            break;
        if (kv->blocks[id].ref == 0)
            (*n_unused)++;
        if (hits) {
            hits[n].block = id;
            hits[n].ident = id;
            hits[n].ident_epoch = kv->blocks[id].epoch;
            hits[n].hash = h;
        }
        parent_hash = h;
        parent = id;
        parent_epoch = kv->blocks[id].epoch;
    }
    return n;
}

int32_t kv_probe_prefix(const struct kv_cache *kv, const struct kv_seq *seq, const int32_t *tokens,
                        int32_t n_tokens, int32_t *n_unused_hits)
{
    return walk_prefix(kv, seq, tokens, n_tokens, n_unused_hits, NULL);
}

int32_t kv_match_prefix(struct kv_cache *kv, struct kv_seq *seq, const int32_t *tokens,
                        int32_t n_tokens)
{
    int32_t n_unused;
    int32_t n;

    assert(seq->n_blocks == 0);
    n = walk_prefix(kv, seq, tokens, n_tokens, &n_unused, seq->ents);
    for (int32_t i = 0; i < n; i++) {
        int32_t id = seq->ents[i].block;
        if (kv->blocks[id].ref++ == 0)
            list_remove(kv, &kv->lru, id);
        seq->ids[i] = id;
    }
    seq->n_blocks = seq->n_committed = n;
    kv->prefix_queries += (uint64_t)(n_tokens > 0 ? n_tokens : 0);
    kv->prefix_hits += (uint64_t)n * KV_BLOCK_TOKENS;
    return n * KV_BLOCK_TOKENS;
}

/* Gives block i of seq (full and computed) its cache identity, or points it
 * at an equal block already cached. */
static void commit_block(struct kv_cache *kv, struct kv_seq *seq, int32_t i, const int32_t *tokens)
{
    struct kv_entry *e = &seq->ents[i];
    const struct kv_entry *up = i > 0 ? &seq->ents[i - 1] : NULL;
    int32_t parent = up ? up->ident : -1;
    uint32_t parent_epoch = up ? up->ident_epoch : 0;
    uint64_t h = block_hash(kv, up ? up->hash : KV_ROOT_HASH, tokens, seq->lora_hash);
    int32_t id = find_cached(kv, h, parent, parent_epoch, tokens, &seq->lora);
    struct kv_block *b = &kv->blocks[e->block];

    assert(!b->hashed); /* fresh from kv_alloc; prefix hits are committed already */
    e->hash = h;
    if (id < 0) {
        b->hash = h;
        b->parent = parent;
        b->parent_epoch = parent_epoch;
        memcpy(b->tokens, tokens, sizeof b->tokens);
        if (parent < 0) {
            b->lora = seq->lora;
            b->gen = kv->gen;
        }
        hash_insert(kv, e->block);
        id = e->block;
    }
    e->ident = id; /* an equal block cached earlier: ours stays private, children chain to it */
    e->ident_epoch = kv->blocks[e->ident].epoch;
}

void kv_commit(struct kv_cache *kv, struct kv_seq *seq, const int32_t *tokens, int32_t n_computed)
{
    int32_t full = n_computed / KV_BLOCK_TOKENS;

    if (full > seq->n_blocks)
        full = seq->n_blocks;
    for (int32_t i = seq->n_committed; i < full; i++)
        commit_block(kv, seq, i, tokens + (size_t)i * KV_BLOCK_TOKENS);
    if (full > seq->n_committed)
        seq->n_committed = full;
}

/* Blocks in use keep their hash (invariant 3) but hang off roots of an old
 * generation, so no lookup reaches them; they are evicted like any other. */
void kv_clear_prefix_cache(struct kv_cache *kv)
{
    kv->gen++;
    while (kv->lru.head >= 0) {
        int32_t id = kv->lru.head;
        list_remove(kv, &kv->lru, id);
        hash_drop(kv, id);
        list_push_tail(kv, &kv->free, id);
    }
}

/* ---------------------------------------------------------------- allocation */

int32_t kv_n_allocatable(const struct kv_cache *kv)
{
    return kv->free.n + kv->lru.n;
}

/* Takes one block for a new table entry: FREE first, else evict the LRU. */
static int32_t take_block(struct kv_cache *kv)
{
    int32_t id = kv->free.head;
    if (id >= 0) {
        list_remove(kv, &kv->free, id);
    } else {
        id = kv->lru.head;
        list_remove(kv, &kv->lru, id);
        hash_drop(kv, id);
        kv->evictions++;
    }
    kv->blocks[id].ref = 1;
    return id;
}

int kv_alloc(struct kv_cache *kv, struct kv_seq *seq, int32_t n_tokens, struct mf_err *err)
{
    int32_t want = KV_BLOCKS_FOR(n_tokens);
    int32_t need = want - seq->n_blocks;

    if (need <= 0)
        return 0;
    if (want > seq->cap)
        return mf_err_set(err, MF_ERANGE,
                          "block table of %" PRId32 " blocks cannot cover %" PRId32 " tokens",
                          seq->cap, n_tokens);
    if (need > kv_n_allocatable(kv))
        return mf_err_set(err, MF_EBUSY,
                          "KV cache full: %" PRId32 " blocks wanted, %" PRId32 " allocatable", need,
                          kv_n_allocatable(kv));
    for (int32_t i = seq->n_blocks; i < want; i++) {
        int32_t id = take_block(kv);
        seq->ents[i].block = id;
        seq->ents[i].ident = -1;
        seq->ids[i] = id;
    }
    seq->n_blocks = want;
    return 0;
}

/* ---------------------------------------------------------------- accounting */

void kv_get_stats(const struct kv_cache *kv, struct kv_stats *st)
{
    st->blocks_total = kv->n_blocks;
    st->blocks_free = kv->free.n;
    st->blocks_cached = kv->lru.n;
    st->blocks_used = kv->n_blocks - kv->free.n - kv->lru.n;
    st->prefix_queries = kv->prefix_queries;
    st->prefix_hits = kv->prefix_hits;
    st->evictions = kv->evictions;
}

/* Invariants (1), (3) and (5): counts table references into refs[]. */
static int check_tables(const struct kv_cache *kv, int32_t *refs, int32_t *stamp,
                        struct mf_err *err)
{
    int32_t s = 0;
    for (const struct kv_seq *seq = kv->seqs; seq; seq = seq->next, s++) {
        if (seq->n_blocks < 0 || seq->n_blocks > seq->cap || seq->n_committed > seq->n_blocks)
            return mf_err_set(err, MF_EINTEGRITY,
                              "sequence %" PRId32 ": %" PRId32 " blocks, %" PRId32
                              " committed, capacity %" PRId32,
                              s, seq->n_blocks, seq->n_committed, seq->cap);
        if (seq->n_dropped < 0 || (seq->n_dropped && seq->n_dropped >= seq->n_committed))
            return mf_err_set(err, MF_EINTEGRITY,
                              "sequence %" PRId32 ": %" PRId32 " blocks dropped of %" PRId32
                              " committed",
                              s, seq->n_dropped, seq->n_committed);
        for (int32_t i = 0; i < seq->n_dropped; i++)
            if (seq->ents[i].block != -1 || seq->ids[i] != -1)
                return mf_err_set(err, MF_EINTEGRITY,
                                  "sequence %" PRId32 " entry %" PRId32 " was dropped but names "
                                  "block %" PRId32,
                                  s, i, seq->ids[i]);
        for (int32_t i = seq->n_dropped; i < seq->n_blocks; i++) {
            int32_t id = seq->ents[i].block;
            if (id < 0 || id >= kv->n_blocks || seq->ids[i] != id)
                return mf_err_set(err, MF_EINTEGRITY,
                                  "sequence %" PRId32 " entry %" PRId32 ": bad block id %" PRId32,
                                  s, i, id);
            if (stamp[id] == s + 1)
                return mf_err_set(err, MF_EINTEGRITY,
                                  "sequence %" PRId32 " names block %" PRId32 " twice", s, id);
            stamp[id] = s + 1;
            refs[id]++;
        }
    }
    for (int32_t id = 0; id < kv->n_blocks; id++) {
        const struct kv_block *b = &kv->blocks[id];
        if (b->ref != refs[id])
            return mf_err_set(err, MF_EINTEGRITY,
                              "block %" PRId32 ": refcount %" PRId32 " but %" PRId32
                              " tables name it",
                              id, b->ref, refs[id]);
        if (b->ref > 1 && !b->hashed)
            return mf_err_set(err, MF_EINTEGRITY,
                              "block %" PRId32 " is shared by %" PRId32
                              " tables but is not a cached full block",
                              id, b->ref);
    }
    return 0;
}

/* Invariant (2) for one list; marks visited blocks in seen[]. */
static int check_list(const struct kv_cache *kv, const struct kv_list *l, int hashed,
                      const char *name, int32_t *seen, struct mf_err *err)
{
    int32_t n = 0;
    int32_t prev = -1;
    for (int32_t id = l->head; id >= 0; prev = id, id = kv->blocks[id].next) {
        const struct kv_block *b = &kv->blocks[id];
        if (id >= kv->n_blocks || n >= kv->n_blocks || seen[id])
            return mf_err_set(err, MF_EINTEGRITY,
                              "%s list: block %" PRId32 " out of range or listed twice", name, id);
        if (b->prev != prev || b->ref != 0 || b->hashed != hashed)
            return mf_err_set(err, MF_EINTEGRITY,
                              "%s list: block %" PRId32 " has ref %" PRId32
                              ", hashed %d, prev %" PRId32 " (expected %" PRId32 ")",
                              name, id, b->ref, b->hashed, b->prev, prev);
        seen[id] = 1;
        n++;
    }
    if (n != l->n || prev != l->tail)
        return mf_err_set(err, MF_EINTEGRITY,
                          "%s list: %" PRId32 " blocks walked, %" PRId32 " counted", name, n, l->n);
    return 0;
}

/* Invariants (2) no leaks and (4) hash-table consistency. */
static int check_blocks(const struct kv_cache *kv, const int32_t *seen, struct mf_err *err)
{
    int32_t n_hashed = 0;
    int32_t n_chained = 0;
    for (int32_t id = 0; id < kv->n_blocks; id++) {
        const struct kv_block *b = &kv->blocks[id];
        if ((b->ref == 0) != (seen[id] != 0))
            return mf_err_set(err, MF_EINTEGRITY,
                              "block %" PRId32 " (ref %" PRId32 ") is %s a list: leaked or "
                              "double-owned",
                              id, b->ref, seen[id] ? "on" : "on no");
        n_hashed += b->hashed;
    }
    for (uint64_t k = 0; k <= kv->bucket_mask; k++) {
        for (int32_t id = kv->buckets[k]; id >= 0; id = kv->blocks[id].hnext) {
            if (id >= kv->n_blocks || !kv->blocks[id].hashed ||
                (kv->blocks[id].hash & kv->bucket_mask) != k || ++n_chained > n_hashed)
                return mf_err_set(err, MF_EINTEGRITY,
                                  "hash bucket %" PRIu64 " holds bad block %" PRId32, k, id);
        }
    }
    if (n_chained != n_hashed)
        return mf_err_set(err, MF_EINTEGRITY,
                          "%" PRId32 " blocks hashed but %" PRId32 " in the hash table", n_hashed,
                          n_chained);
    return 0;
}

int kv_check(const struct kv_cache *kv, struct mf_err *err)
{
    int32_t *scratch = calloc((size_t)kv->n_blocks * 3, sizeof *scratch);
    int32_t *refs = scratch;
    int32_t *stamp = scratch + kv->n_blocks;
    int32_t *seen = scratch + 2 * (size_t)kv->n_blocks;
    int rc;

    if (!scratch)
        return mf_err_set(err, MF_ENOMEM, "kv_check: out of memory");
    rc = check_tables(kv, refs, stamp, err);
    if (!rc)
        rc = check_list(kv, &kv->free, 0, "FREE", seen, err);
    if (!rc)
        rc = check_list(kv, &kv->lru, 1, "CACHED", seen, err);
    if (!rc)
        rc = check_blocks(kv, seen, err);
    free(scratch);
    return rc;
}

/* ---------------------------------------------------------------- budget */

/* Bytes for the arena: MFC_KV_CACHE_GB when set, else a share of free memory. */
static int budget_bytes(const struct kv_budget *b, double *bytes, struct mf_err *err)
{
    double gb;

    if (b->cache_gb && b->cache_gb[0]) {
        if (mf_num_parse_f64(b->cache_gb, &gb) || !(gb > 0) || gb > 1048576)
            return mf_err_set(err, MF_EINVAL,
                              "MFC_KV_CACHE_GB=\"%s\": expected a size in GiB such as 8 or 0.5",
                              b->cache_gb);
        *bytes = gb * 1073741824.0;
        return 0;
    }
    if (!(b->fraction > 0) || b->fraction > 1)
        return mf_err_set(err, MF_EINVAL, "KV cache memory fraction %g (allowed (0, 1])",
                          b->fraction);
    *bytes = (double)b->free_bytes * b->fraction;
    return 0;
}

int kv_budget_blocks(const struct kv_budget *b, int32_t *n_blocks, struct mf_err *err)
{
    double bytes = 0;
    double n;
    int rc;

    if (b->bytes_per_block == 0)
        return mf_err_set(err, MF_EINVAL, "KV block size of 0 bytes");
    rc = budget_bytes(b, &bytes, err);
    if (rc)
        return rc;
    n = floor(bytes / (double)b->bytes_per_block);
    if (n < 1)
        return mf_err_set(err, MF_ENOMEM,
                          "KV cache budget of %.0f bytes holds no block of %" PRIu64
                          " bytes; raise MFC_KV_CACHE_GB or free memory",
                          bytes, b->bytes_per_block);
    *n_blocks = n > KV_MAX_BLOCKS ? KV_MAX_BLOCKS : (int32_t)n;
    return 0;
}
