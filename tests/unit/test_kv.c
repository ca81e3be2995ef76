/*
 * test_kv.c: unit tests for runtime/engine/kv.c, the paged KV block manager:
 * allocation and refcounts, exact prefix-hit accounting, partial blocks,
 * adapter isolation, LRU eviction order, hash collisions (with the hash cut
 * to one bit) and the memory budget. kv_check runs after every operation.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "runtime/engine/kv.h"

#define B KV_BLOCK_TOKENS

static const struct batch_lora base; /* no adapter */

static void check(const struct kv_cache *kv)
{
    struct mf_err err;
    mf_err_clear(&err);
    if (kv_check(kv, &err))
        fail_msg("kv_check: %s", err.msg);
}

static struct kv_cache *open_kv(int32_t n_blocks, int32_t hash_bits)
{
    struct kv_config cfg = {.n_blocks = n_blocks, .hash_bits = hash_bits};
    struct kv_cache *kv;
    struct mf_err err;
    assert_int_equal(kv_open(&kv, &cfg, &err), 0);
    check(kv);
    return kv;
}

static struct kv_seq *open_seq(struct kv_cache *kv, const struct batch_lora *lora,
                               int32_t max_tokens)
{
    struct kv_seq *seq;
    struct mf_err err;
    assert_int_equal(kv_seq_open(kv, lora ? lora : &base, max_tokens, &seq, &err), 0);
    check(kv);
    return seq;
}

/* tokens[i] = base + i */
static void fill(int32_t *t, int32_t n, int32_t first)
{
    for (int32_t i = 0; i < n; i++)
        t[i] = first + i;
}

/* A sequence that computes tokens[0..n) from scratch (match, alloc, commit). */
static struct kv_seq *run_seq(struct kv_cache *kv, const struct batch_lora *lora,
                              const int32_t *tokens, int32_t n, int32_t *hit_tokens)
{
    struct kv_seq *seq = open_seq(kv, lora, n);
    struct mf_err err;
    int32_t hit = kv_match_prefix(kv, seq, tokens, n);
    check(kv);
    assert_int_equal(kv_alloc(kv, seq, n, &err), 0);
    check(kv);
    kv_commit(kv, seq, tokens, n);
    check(kv);
    if (hit_tokens)
        *hit_tokens = hit;
    return seq;
}

static struct kv_stats stats(const struct kv_cache *kv)
{
    struct kv_stats st;
    kv_get_stats(kv, &st);
    return st;
}

static void test_alloc_release_refcounts(void **state)
{
    struct kv_cache *kv = open_kv(8, 0);
    struct kv_seq *a = open_seq(kv, NULL, 8 * B);
    struct kv_seq *b = open_seq(kv, NULL, 8 * B);
    struct mf_err err;

    assert_int_equal(kv_alloc(kv, a, 20, &err), 0);
    check(kv);
    assert_int_equal(kv_seq_n_blocks(a), 2);
    assert_int_equal(kv_alloc(kv, a, 32, &err), 0); /* still 2 blocks */
    assert_int_equal(kv_seq_n_blocks(a), 2);
    assert_int_equal(kv_alloc(kv, b, 6 * B, &err), 0);
    check(kv);
    assert_int_equal(stats(kv).blocks_used, 8);
    assert_int_equal(stats(kv).blocks_free, 0);
    /* Out of blocks: refused, nothing changes. */
    assert_int_equal(kv_alloc(kv, a, 3 * B, &err), MF_EBUSY);
    check(kv);
    assert_int_equal(kv_seq_n_blocks(a), 2);
    /* Distinct ids across tables. */
    for (int32_t i = 0; i < 2; i++)
        for (int32_t j = 0; j < 6; j++)
            assert_int_not_equal(kv_seq_blocks(a)[i], kv_seq_blocks(b)[j]);
    kv_seq_release(kv, b);
    check(kv);
    assert_int_equal(stats(kv).blocks_free, 6);
    assert_int_equal(stats(kv).blocks_cached, 0); /* nothing was committed */
    assert_int_equal(kv_alloc(kv, a, 3 * B, &err), 0);
    kv_seq_close(kv, a);
    kv_seq_close(kv, b);
    check(kv);
    assert_int_equal(stats(kv).blocks_used, 0);
    assert_int_equal(stats(kv).blocks_free, 8);
    kv_close(kv);
}

/* A sliding model's sequence (kv_config.window) may be longer than the
 * pool; kv_seq_drop gives its leading committed blocks back (-1 in the
 * table, CACHED since they are full), keeps the last committed block, and
 * the chain of hashes goes on: a second sequence still hits the whole
 * prefix, dropped blocks included, while they stay cached. */
static void test_drop_leading_blocks(void **state)
{
    struct kv_config cfg = {.n_blocks = 6, .window = 32};
    struct kv_cache *kv;
    struct kv_seq *a, *b;
    struct mf_err err;
    int32_t tok[10 * B];

    assert_int_equal(kv_open(&kv, &cfg, &err), 0);
    fill(tok, 10 * B, 100);
    a = open_seq(kv, NULL, 10 * B); /* 10 blocks of table over a pool of 6 */
    assert_int_equal(kv_alloc(kv, a, 4 * B, &err), 0);
    kv_commit(kv, a, tok, 4 * B);
    kv_seq_drop(kv, a, 10); /* clamped: block 3 parents the next */
    check(kv);
    for (int32_t i = 0; i < 3; i++)
        assert_int_equal(kv_seq_blocks(a)[i], -1);
    assert_true(kv_seq_blocks(a)[3] >= 0);
    assert_int_equal(stats(kv).blocks_used, 1);
    assert_int_equal(stats(kv).blocks_cached, 3);
    assert_int_equal(kv_alloc(kv, a, 6 * B, &err), 0); /* past the pool's 6 blocks of table */
    kv_commit(kv, a, tok, 6 * B);
    kv_seq_drop(kv, a, 4);
    check(kv);
    assert_int_equal(stats(kv).blocks_used, 2);
    /* the dropped blocks are cached under the same chain */
    b = open_seq(kv, NULL, 6 * B);
    assert_int_equal(kv_match_prefix(kv, b, tok, 6 * B), 5 * B);
    check(kv);
    kv_seq_close(kv, b);
    kv_seq_close(kv, a);
    check(kv);
    assert_int_equal(stats(kv).blocks_used, 0);
    kv_close(kv);
}

static void test_table_capacity_and_bad_config(void **state)
{
    struct kv_config cfg = {.n_blocks = 0};
    struct kv_cache *kv;
    struct kv_seq *seq;
    struct mf_err err;

    assert_int_equal(kv_open(&kv, &cfg, &err), MF_ERANGE);
    assert_null(kv);
    kv = open_kv(4, 0);
    assert_int_equal(kv_seq_open(kv, &base, 4 * B + 1, &seq, &err), MF_ERANGE);
    assert_null(seq);
    seq = open_seq(kv, NULL, 2 * B);
    assert_int_equal(kv_alloc(kv, seq, 2 * B + 1, &err), MF_ERANGE);
    assert_int_equal(kv_seq_n_blocks(seq), 0);
    check(kv);
    kv_close(kv); /* closes the open sequence too */
}

static void test_prefix_hits_counted_exactly(void **state)
{
    struct kv_cache *kv = open_kv(32, 0);
    int32_t t[64];
    int32_t hit = -1;
    struct kv_seq *a;
    struct kv_seq *b;
    struct kv_seq *c;
    struct kv_seq *d;

    fill(t, 64, 100);
    a = run_seq(kv, NULL, t, 40, &hit); /* 2 full blocks + 8 */
    assert_int_equal(hit, 0);
    assert_int_equal(stats(kv).prefix_queries, 40);
    assert_int_equal(stats(kv).prefix_hits, 0);

    b = run_seq(kv, NULL, t, 40, &hit); /* same prompt: both full blocks shared */
    assert_int_equal(hit, 32);
    assert_int_equal(kv_seq_blocks(b)[0], kv_seq_blocks(a)[0]);
    assert_int_equal(kv_seq_blocks(b)[1], kv_seq_blocks(a)[1]);
    assert_int_not_equal(kv_seq_blocks(b)[2], kv_seq_blocks(a)[2]); /* partial: private */
    assert_int_equal(stats(kv).blocks_used, 4);

    /* Exactly two blocks long: the last token must be computed, so one block hits. */
    c = run_seq(kv, NULL, t, 32, &hit);
    assert_int_equal(hit, 16);
    /* Diverges inside the second block: one block hits. */
    t[20] = -7;
    d = run_seq(kv, NULL, t, 40, &hit);
    assert_int_equal(hit, 16);
    assert_int_equal(stats(kv).prefix_queries, 40 + 40 + 32 + 40);
    assert_int_equal(stats(kv).prefix_hits, 32 + 16 + 16);

    kv_seq_close(kv, a);
    check(kv);
    kv_seq_close(kv, b);
    check(kv);
    kv_seq_close(kv, c);
    kv_seq_close(kv, d);
    check(kv);
    assert_int_equal(stats(kv).blocks_used, 0);
    /* a's two full blocks, c's second block (copy of a's: private), d's two
     * full ones of which the first is a's: cached = a0, a1, d1. */
    assert_int_equal(stats(kv).blocks_cached, 3);
    kv_close(kv);
}

static void test_partial_blocks_never_shared(void **state)
{
    struct kv_cache *kv = open_kv(8, 0);
    int32_t t[40];
    int32_t hit = -1;
    struct kv_seq *a;
    struct kv_seq *b;
    struct kv_seq *c;
    struct mf_err err;

    fill(t, 40, 1);
    a = open_seq(kv, NULL, 40);
    kv_match_prefix(kv, a, t, 40);
    assert_int_equal(kv_alloc(kv, a, 40, &err), 0);
    kv_commit(kv, a, t, 15); /* first block not yet full of computed tokens */
    check(kv);
    b = run_seq(kv, NULL, t, 40, &hit);
    assert_int_equal(hit, 0);
    kv_commit(kv, a, t, 40);
    check(kv);
    c = run_seq(kv, NULL, t, 40, &hit);
    assert_int_equal(hit, 32); /* b filled its blocks first: a's equal ones stay private */
    assert_int_equal(kv_seq_blocks(c)[0], kv_seq_blocks(b)[0]);
    assert_int_equal(kv_seq_blocks(c)[1], kv_seq_blocks(b)[1]);
    assert_int_not_equal(kv_seq_blocks(c)[2], kv_seq_blocks(b)[2]);
    kv_close(kv);
}

static void test_adapters_never_share(void **state)
{
    struct kv_cache *kv = open_kv(16, 0);
    struct batch_lora l1 = {.n = 1, .ids = {0}, .scales = {1.0f}};
    struct batch_lora l2 = {.n = 1, .ids = {0}, .scales = {0.5f}};
    struct batch_lora l3 = {.n = 1, .ids = {1}, .scales = {1.0f}};
    int32_t t[33];
    int32_t hit = -1;

    fill(t, 33, 5);
    kv_seq_release(kv, run_seq(kv, &l1, t, 33, &hit));
    kv_seq_release(kv, run_seq(kv, &l2, t, 33, &hit));
    assert_int_equal(hit, 0);
    kv_seq_release(kv, run_seq(kv, &l3, t, 33, &hit));
    assert_int_equal(hit, 0);
    kv_seq_release(kv, run_seq(kv, NULL, t, 33, &hit));
    assert_int_equal(hit, 0);
    kv_seq_release(kv, run_seq(kv, &l2, t, 33, &hit));
    assert_int_equal(hit, 32);
    check(kv);
    kv_close(kv);
}

/* Release pushes a table's blocks last-first, so a sequence's tail is
 * evicted before its head; a hit moves a block to the most-recent end. */
static void test_lru_eviction_order(void **state)
{
    struct kv_cache *kv = open_kv(4, 0);
    int32_t ta[33];
    int32_t tb[17];
    int32_t hit = -1;
    int32_t unused = -1;
    struct kv_seq *probe;
    struct kv_seq *c;
    struct mf_err err;

    fill(ta, 33, 1000);
    fill(tb, 17, 2000);
    kv_seq_close(kv, run_seq(kv, NULL, ta, 33, &hit)); /* LRU: a1 a0 (+ a2 freed) */
    kv_seq_close(kv, run_seq(kv, NULL, tb, 17, &hit)); /* LRU: a1 a0 b0 */
    check(kv);
    assert_int_equal(stats(kv).blocks_cached, 3);
    assert_int_equal(stats(kv).blocks_free, 1);
    probe = open_seq(kv, NULL, 64);
    assert_int_equal(kv_probe_prefix(kv, probe, ta, 33, &unused), 2);
    assert_int_equal(unused, 2);

    c = open_seq(kv, NULL, 64);
    assert_int_equal(kv_alloc(kv, c, 2 * B, &err), 0); /* the free block, then a1 */
    check(kv);
    assert_int_equal(stats(kv).evictions, 1);
    assert_int_equal(kv_probe_prefix(kv, probe, ta, 33, &unused), 1);
    assert_int_equal(kv_probe_prefix(kv, probe, tb, 17, &unused), 1);

    /* Touch b0 (hit, release): now a0 is the least recently used. */
    {
        struct kv_seq *touch = open_seq(kv, NULL, 17);
        assert_int_equal(kv_match_prefix(kv, touch, tb, 17), 16);
        check(kv);
        kv_seq_close(kv, touch);
        check(kv);
    }
    assert_int_equal(kv_alloc(kv, c, 3 * B, &err), 0);
    assert_int_equal(kv_probe_prefix(kv, probe, ta, 33, &unused), 0);
    assert_int_equal(kv_probe_prefix(kv, probe, tb, 17, &unused), 1);
    assert_int_equal(kv_alloc(kv, c, 4 * B, &err), 0);
    assert_int_equal(kv_probe_prefix(kv, probe, tb, 17, &unused), 0);
    assert_int_equal(stats(kv).evictions, 3);
    assert_int_equal(kv_alloc(kv, c, 5 * B, &err), MF_ERANGE); /* c's table holds 4 */
    check(kv);
    kv_close(kv);
}

/* Two sequences computing the same prefix at once: the second's blocks stay
 * private, and its later blocks chain to the cached copy so they are found. */
static void test_duplicate_blocks_chain_to_cached_copy(void **state)
{
    struct kv_cache *kv = open_kv(16, 0);
    int32_t t[49];
    int32_t u[49];
    int32_t hit = -1;
    struct kv_seq *a;
    struct kv_seq *b;
    struct mf_err err;

    fill(t, 49, 1);
    memcpy(u, t, sizeof u);
    u[20] = 99; /* b diverges in its second block */
    a = open_seq(kv, NULL, 49);
    b = open_seq(kv, NULL, 49);
    kv_match_prefix(kv, a, t, 49);
    kv_match_prefix(kv, b, u, 49);
    assert_int_equal(kv_alloc(kv, a, 49, &err), 0);
    assert_int_equal(kv_alloc(kv, b, 49, &err), 0);
    kv_commit(kv, a, t, 49);
    kv_commit(kv, b, u, 49);
    check(kv);
    kv_seq_close(kv, run_seq(kv, NULL, u, 49, &hit));
    assert_int_equal(hit, 48); /* a's block 0, then b's blocks 1 and 2 */
    kv_seq_close(kv, a);
    kv_seq_close(kv, b);
    check(kv);
    assert_int_equal(stats(kv).blocks_cached, 5); /* a0 a1 a2 b1 b2; b0 freed */
    kv_close(kv);
}

/* ------------------------------------------------ collisions, at random */

/* What each physical block really holds: the token prefix it was computed
 * for, and the adapter. A hit is right iff the shadow says so. */
struct shadow {
    int32_t len[64];        /* prefix length, tokens (0: nothing) */
    int32_t tok[64][6 * B]; /* the prefix */
    int32_t adapter[64];    /* lora id, -1 for base */
};

static void shadow_write(struct shadow *sh, const struct kv_seq *seq, const int32_t *t, int32_t n,
                         int32_t adapter)
{
    for (int32_t i = 0; i * B < n; i++) {
        int32_t id = kv_seq_blocks(seq)[i];
        sh->len[id] = (i + 1) * B;
        memcpy(sh->tok[id], t, (size_t)(i + 1) * B * sizeof t[0]);
        sh->adapter[id] = adapter;
    }
}

static void shadow_verify_hits(const struct shadow *sh, const struct kv_seq *seq, const int32_t *t,
                               int32_t hit_tokens, int32_t adapter)
{
    for (int32_t i = 0; i * B < hit_tokens; i++) {
        int32_t id = kv_seq_blocks(seq)[i];
        assert_int_equal(sh->len[id], (i + 1) * B);
        assert_memory_equal(sh->tok[id], t, (size_t)(i + 1) * B * sizeof t[0]);
        assert_int_equal(sh->adapter[id], adapter);
    }
}

/* Random prompts over a tiny alphabet (so prefixes repeat), random adapters,
 * a pool small enough to evict constantly: every hit must hold exactly the
 * tokens asked for. With hash_bits 1 every lookup collides. */
static void random_workload(int32_t hash_bits, uint64_t seed)
{
    static struct shadow sh;
    struct kv_cache *kv = open_kv(64, hash_bits);
    struct kv_seq *live[6] = {0};
    struct batch_lora lora = {0};
    uint64_t x = seed;
    uint64_t hits = 0;
    struct mf_err err;

    memset(&sh, 0, sizeof sh);
    for (int op = 0; op < 3000; op++) {
        int32_t t[6 * B];
        int32_t n;
        int32_t adapter;
        int slot;
        int32_t hit;
        x = x * 6364136223846793005u + 1442695040888963407u;
        slot = (int)((x >> 33) % 6);
        n = 1 + (int32_t)((x >> 40) % (6 * B));
        adapter = (int32_t)((x >> 50) % 3) - 1;
        for (int32_t i = 0; i < 6 * B; i++)
            t[i] = i < n ? (int32_t)((x >> (20 + i / 9)) & 1) : -1;
        kv_seq_close(kv, live[slot]);
        live[slot] = NULL;
        check(kv);
        lora.n = adapter >= 0;
        lora.ids[0] = adapter;
        lora.scales[0] = 1.0f;
        live[slot] = open_seq(kv, &lora, 6 * B);
        hit = kv_match_prefix(kv, live[slot], t, n);
        shadow_verify_hits(&sh, live[slot], t, hit, adapter);
        hits += (uint64_t)hit;
        if (kv_alloc(kv, live[slot], n, &err) == 0) {
            shadow_write(&sh, live[slot], t, n, adapter);
            kv_commit(kv, live[slot], t, n);
        } else {
            kv_seq_release(kv, live[slot]);
        }
        check(kv);
    }
    assert_true(hits > 0); /* the workload really exercised the cache */
    assert_int_equal(stats(kv).prefix_hits, hits);
    for (int i = 0; i < 6; i++)
        kv_seq_close(kv, live[i]);
    check(kv);
    assert_int_equal(stats(kv).blocks_used, 0);
    kv_close(kv);
}

static void test_hash_collisions_are_harmless(void **state)
{
    random_workload(1, 42);
    random_workload(2, 7);
    random_workload(0, 42);
}

static void test_clear_prefix_cache(void **state)
{
    struct kv_cache *kv = open_kv(8, 0);
    int32_t t[33];
    int32_t hit = -1;
    struct kv_seq *a;

    fill(t, 33, 3);
    a = run_seq(kv, NULL, t, 33, &hit);
    kv_seq_close(kv, run_seq(kv, NULL, t, 33, &hit));
    assert_int_equal(hit, 32);
    t[0] = -1;
    kv_seq_close(kv, run_seq(kv, NULL, t, 33, &hit));
    t[0] = 3;
    assert_int_equal(stats(kv).blocks_cached, 2);
    kv_clear_prefix_cache(kv);
    check(kv);
    assert_int_equal(stats(kv).blocks_cached, 0);
    assert_int_equal(stats(kv).blocks_free, 5);
    kv_seq_close(kv, run_seq(kv, NULL, t, 33, &hit));
    assert_int_equal(hit, 0); /* a's blocks, still in use, are no longer reachable */
    kv_seq_close(kv, a);
    check(kv);
    kv_close(kv);
}

static void test_budget(void **state)
{
    struct kv_budget b = {.cache_gb = "2", .bytes_per_block = 1 << 20};
    struct mf_err err;
    int32_t n = -1;

    assert_int_equal(kv_budget_blocks(&b, &n, &err), 0);
    assert_int_equal(n, 2048);
    b.cache_gb = "0.5";
    assert_int_equal(kv_budget_blocks(&b, &n, &err), 0);
    assert_int_equal(n, 512);
    b.cache_gb = "lots";
    n = -1;
    assert_int_equal(kv_budget_blocks(&b, &n, &err), MF_EINVAL);
    assert_non_null(strstr(err.msg, "MFC_KV_CACHE_GB"));
    assert_int_equal(n, -1);
    b.cache_gb = "-1";
    assert_int_equal(kv_budget_blocks(&b, &n, &err), MF_EINVAL);
    b.cache_gb = NULL;
    b.free_bytes = 10u << 20;
    b.fraction = 0.5;
    assert_int_equal(kv_budget_blocks(&b, &n, &err), 0);
    assert_int_equal(n, 5);
    b.fraction = 0;
    assert_int_equal(kv_budget_blocks(&b, &n, &err), MF_EINVAL);
    b.fraction = 0.9;
    b.free_bytes = 1000;
    assert_int_equal(kv_budget_blocks(&b, &n, &err), MF_ENOMEM);
    b.bytes_per_block = 1;
    b.free_bytes = UINT64_MAX;
    assert_int_equal(kv_budget_blocks(&b, &n, &err), 0);
    assert_int_equal(n, KV_MAX_BLOCKS);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_alloc_release_refcounts),
        cmocka_unit_test(test_drop_leading_blocks),
        cmocka_unit_test(test_table_capacity_and_bad_config),
        cmocka_unit_test(test_prefix_hits_counted_exactly),
        cmocka_unit_test(test_partial_blocks_never_shared),
        cmocka_unit_test(test_adapters_never_share),
        cmocka_unit_test(test_lru_eviction_order),
        cmocka_unit_test(test_duplicate_blocks_chain_to_cached_copy),
        cmocka_unit_test(test_hash_collisions_are_harmless),
        cmocka_unit_test(test_clear_prefix_cache),
        cmocka_unit_test(test_budget),
    };
    return cmocka_run_group_tests_name("kv", tests, NULL, NULL);
}
