/*
 * test_sched_draft.c: the scheduler's and the KV manager's part of
 * speculative decoding (runtime/engine/sched.c sched_set_draft,
 * sched_update_n; runtime/engine/kv.c kv_seq_trim): proposals extend a
 * decode into a verify sequence that wants every row, as far as the token
 * budget, the spare logits rows, the output room and the free blocks allow
 * (never by preempting anyone); only accepted positions count as computed,
 * the blocks of rejected ones go back FREE, and only accepted full blocks
 * enter the prefix cache. sched_check (with kv_check) runs after each step.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "runtime/engine/sched.h"

struct rig {
    struct kv_cache *kv;
    struct sched *s;
    struct sched_config cfg;
    struct sched_step st;
};

static void check(const struct rig *r)
{
    struct mf_err err;
    if (sched_check(r->s, &err))
        fail_msg("sched_check: %s", err.msg);
}

static void rig_open(struct rig *r, int32_t blocks, int32_t budget, int32_t logits)
{
    struct kv_config kc = {.n_blocks = blocks};
    struct mf_err err;
    memset(r, 0, sizeof *r);
    r->cfg.max_num_seqs = 4;
    r->cfg.max_num_batched_tokens = budget;
    r->cfg.max_num_logits = logits;
    r->cfg.max_model_len = 1024;
    r->cfg.max_waiting = 8;
    assert_int_equal(kv_open(&r->kv, &kc, &err), 0);
    assert_int_equal(sched_open(&r->s, &r->cfg, r->kv, &err), 0);
}

static void rig_close(struct rig *r, struct sched_req **reqs, int n)
{
    struct kv_stats st;
    for (int i = 0; i < n; i++)
        sched_free_req(r->s, reqs[i]);
    check(r);
    kv_get_stats(r->kv, &st);
    assert_int_equal(st.blocks_used, 0);
    sched_close(r->s);
    kv_close(r->kv);
}

static struct sched_req *submit(struct rig *r, const int32_t *prompt, int32_t n, int32_t max_tokens)
{
    struct sched_submit in = {.prompt = prompt, .n_prompt = n, .max_tokens = max_tokens};
    struct sched_req *q;
    struct mf_err err;
    assert_int_equal(sched_submit(r->s, &in, &q, &err), 0);
    return q;
}

/* Schedules a step and completes it with one token per logits sequence. */
static void plain_step(struct rig *r, int32_t token)
{
    int32_t toks[8] = {token, token, token, token, token, token, token, token};
    struct mf_err err;
    sched_schedule(r->s, &r->st);
    assert_int_equal(r->st.n_rows, r->st.n_logits);
    assert_int_equal(sched_update(r->s, toks, r->st.n_logits, &err), 0);
    check(r);
}

static int32_t blocks_used(const struct rig *r)
{
    struct kv_stats st;
    kv_get_stats(r->kv, &st);
    return st.blocks_used;
}

/* Proposals make a verify sequence; a rejection takes positions back. */
static void test_verify_and_rollback(void **state)
{
    struct rig r;
    int32_t prompt[15], n;
    const int32_t d[4] = {500, 501, 502, 503};
    struct mf_err err;
    for (int i = 0; i < 15; i++)
        prompt[i] = 100 + i;
    rig_open(&r, 16, 64, 16);
    struct sched_req *q = submit(&r, prompt, 15, 40);
    plain_step(&r, 7); /* prefill: 15 tokens, then token 7 sampled */
    assert_true(sched_req_decoding(q));
    assert_int_equal(sched_set_draft(r.s, q, d, 4), 4);
    assert_int_equal(sched_req_n_draft(q), 4);
    sched_schedule(r.s, &r.st);
    const struct batch_seq *sq = &r.st.batch.seqs[0];
    assert_int_equal(sq->n_tokens, 5);
    assert_int_equal(sq->want_logits, 5);
    assert_int_equal(sq->n_past, 15);
    assert_int_equal(sq->tokens[0], 7);
    assert_memory_equal(sq->tokens + 1, d, sizeof d);
    assert_int_equal(r.st.n_rows, 5);
    assert_int_equal(r.st.n_logits, 1);
    assert_true(sq->n_blocks >= 2); /* positions 15..19 cross into block 1 */
    assert_int_equal(blocks_used(&r), 2);
    /* one accepted (500) and the draw after it (42): rows 0 and 1 */
    const int32_t out[5] = {500, 42, -1, -1, -1};
    const int32_t n_out = 2;
    assert_int_equal(sched_update_n(r.s, out, &n_out, 1, &err), 0);
    check(&r);
    const int32_t *t = sched_req_tokens(q, &n);
    assert_int_equal(n, 18); /* 15 + 7 + 500 + 42 */
    assert_int_equal(t[15], 7);
    assert_int_equal(t[16], 500);
    assert_int_equal(t[17], 42);
    assert_int_equal(sched_req_n_draft(q), 0);
    assert_int_equal(blocks_used(&r), 2); /* 17 computed: block 1 holds position 16 */
    /* a round with every proposal rejected: the block past them goes back */
    plain_step(&r, 8); /* n_computed 18, tokens 19 */
    const int32_t d2[3] = {600, 601, 602};
    sched_set_draft(r.s, q, d2, 3);
    sched_schedule(r.s, &r.st);
    assert_int_equal(r.st.batch.seqs[0].want_logits, 4);
    const int32_t out2[4] = {9, -1, -1, -1};
    const int32_t n2 = 1;
    assert_int_equal(sched_update_n(r.s, out2, &n2, 1, &err), 0);
    check(&r);
    t = sched_req_tokens(q, &n);
    assert_int_equal(n, 20);
    assert_int_equal(t[19], 9);
    assert_int_equal(blocks_used(&r), 2);
    /* a count out of range changes nothing */
    sched_schedule(r.s, &r.st);
    const int32_t bad = 2;
    assert_int_equal(sched_update_n(r.s, out2, &bad, 1, &err), MF_EINVAL);
    rig_close(&r, &q, 1);
}

/* The budget, the spare rows and the output room cut proposals. */
static void test_limits(void **state)
{
    struct rig r;
    int32_t prompt[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    const int32_t d[8] = {10, 11, 12, 13, 14, 15, 16, 17};
    struct sched_req *q[2];

    rig_open(&r, 32, 3, 6); /* 3 tokens a step; 6 rows for 4 sequences: 2 spare */
    q[0] = submit(&r, prompt, 2, 40);
    q[1] = submit(&r, prompt + 2, 1, 4); /* room: 4 outputs */
    plain_step(&r, 20);
    plain_step(&r, 20);
    assert_true(sched_req_decoding(q[0]) && sched_req_decoding(q[1]));
    assert_int_equal(sched_set_draft(r.s, q[0], d, 8), 8);
    /* q[1] has 2 of 4 outputs: 1 proposal at most (the draw after it must fit) */
    assert_int_equal(sched_set_draft(r.s, q[1], d, 8), 1);
    sched_schedule(r.s, &r.st);
    /* budget 3: q[0] 1 + 1 proposal, leaving q[1] its own token (no
     * proposal: a decode never waits for another's proposals) */
    assert_int_equal(r.st.n_tokens, 3);
    assert_int_equal(r.st.batch.n_seqs, 2);
    assert_int_equal(r.st.batch.seqs[0].want_logits, 2);
    assert_int_equal(r.st.batch.seqs[1].want_logits, 1);
    rig_close(&r, q, 2);

    rig_open(&r, 32, 64, 5); /* rows: 4 sequences + 1 spare */
    q[0] = submit(&r, prompt, 2, 40);
    plain_step(&r, 20);
    sched_set_draft(r.s, q[0], d, 8);
    sched_schedule(r.s, &r.st);
    assert_int_equal(r.st.batch.seqs[0].want_logits, 2);
    rig_close(&r, q, 1);
}

/* With no free block for them, proposals are dropped, nobody preempted. */
static void test_never_preempts(void **state)
{
    struct rig r;
    int32_t prompt[32];
    const int32_t d[4] = {10, 11, 12, 13};
    struct sched_req *q[2];
    for (int i = 0; i < 32; i++)
        prompt[i] = i + 1;
    rig_open(&r, 4, 64, 16);
    q[0] = submit(&r, prompt, 16, 40); /* 2 blocks once it decodes */
    q[1] = submit(&r, prompt + 16, 16, 40);
    plain_step(&r, 50); /* both prefilled: 2 blocks each, 4 in all, the pool */
    plain_step(&r, 51);
    assert_int_equal(blocks_used(&r), 4);
    sched_set_draft(r.s, q[0], d, 4); /* positions 17..21: block 1 holds up to 31 */
    sched_schedule(r.s, &r.st);
    assert_int_equal(r.st.n_preempted, 0);
    assert_int_equal(r.st.batch.n_seqs, 2);
    assert_int_equal(r.st.batch.seqs[0].want_logits, 5); /* fits its own block */
    struct mf_err err;
    const int32_t out[6] = {10, 11, 12, 13, 14, 60};
    const int32_t n_out[2] = {5, 1};
    assert_int_equal(sched_update_n(r.s, out, n_out, 2, &err), 0);
    check(&r);
    /* now q[0] computed 22 positions; 12 proposals would need a third block */
    const int32_t many[12] = {0};
    sched_set_draft(r.s, q[0], many, 12);
    sched_schedule(r.s, &r.st);
    assert_int_equal(r.st.n_preempted, 0);
    assert_int_equal(r.st.batch.n_seqs, 2);
    assert_int_equal(r.st.batch.seqs[0].want_logits, 1); /* proposals dropped */
    rig_close(&r, q, 2);
}

/* Only accepted full blocks are cached: a prompt continuing with the
 * rejected proposals hits the accepted block only. */
static void test_prefix_cache_accepted_only(void **state)
{
    struct rig r;
    int32_t prompt[15], n;
    int32_t d[20];
    struct sched_req *q[3];
    struct mf_err err;
    for (int i = 0; i < 15; i++)
        prompt[i] = 300 + i;
    for (int i = 0; i < 20; i++)
        d[i] = 700 + i;
    rig_open(&r, 32, 64, 32);
    q[0] = submit(&r, prompt, 15, 60);
    plain_step(&r, 5);                 /* tokens: 15 + [5] */
    sched_set_draft(r.s, q[0], d, 20); /* positions 16..35: blocks 1 and 2 */
    sched_schedule(r.s, &r.st);
    assert_int_equal(r.st.batch.seqs[0].want_logits, 21);
    const int32_t out[21] = {6};
    const int32_t one = 1;
    assert_int_equal(sched_update_n(r.s, out, &one, 1, &err), 0); /* all rejected */
    check(&r);
    assert_int_equal(blocks_used(&r), 1); /* 16 computed: blocks 1 and 2 went back */
    /* a prompt of the accepted 16 + the rejected ones: one block hits */
    int32_t p2[40];
    const int32_t *t = sched_req_tokens(q[0], &n);
    memcpy(p2, t, 16 * sizeof *p2);
    memcpy(p2 + 16, d, 20 * sizeof *p2);
    q[1] = submit(&r, p2, 36, 4);
    plain_step(&r, 1);
    assert_int_equal(sched_req_n_cached(q[1]), 16);
    /* the accepted prefix itself hits */
    memcpy(p2, t, 17 * sizeof *p2);
    q[2] = submit(&r, p2, 17, 4);
    plain_step(&r, 1);
    assert_int_equal(sched_req_n_cached(q[2]), 16);
    rig_close(&r, q, 3);
}

/* kv_seq_trim gives back only blocks past the committed ones. */
static void test_kv_trim(void **state)
{
    struct kv_cache *kv;
    struct kv_seq *seq;
    struct kv_config kc = {.n_blocks = 8};
    struct batch_lora none = {0};
    struct mf_err err;
    struct kv_stats st;
    int32_t toks[64];
    for (int i = 0; i < 64; i++)
        toks[i] = i;
    assert_int_equal(kv_open(&kv, &kc, &err), 0);
    assert_int_equal(kv_seq_open(kv, &none, 128, &seq, &err), 0);
    assert_int_equal(kv_alloc(kv, seq, 60, &err), 0);
    kv_commit(kv, seq, toks, 33); /* 2 full blocks committed */
    kv_seq_trim(kv, seq, 40);
    assert_int_equal(kv_seq_n_blocks(seq), 3);
    kv_seq_trim(kv, seq, 5); /* never below the committed */
    assert_int_equal(kv_seq_n_blocks(seq), 2);
    kv_get_stats(kv, &st);
    assert_int_equal(st.blocks_used, 2);
    assert_int_equal(st.blocks_free, 6);
    assert_int_equal(kv_check(kv, &err), 0);
    kv_close(kv);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_verify_and_rollback),
        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_never_preempts),
        cmocka_unit_test(test_prefix_cache_accepted_only),
        cmocka_unit_test(test_kv_trim),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
