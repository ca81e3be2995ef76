/*
 * test_spec.c: unit tests for speculative decoding's parts that need no
 * model: prompt lookup (runtime/engine/lookup.c), the rejection rule of
 * runtime/engine/spec.c checked statistically (the tokens it keeps follow
 * the target distribution p whatever the proposal distribution q: a
 * chi-square test over seeded draws), the adaptive k and the throughput
 * guard, and the config checks. The rule inside the engine is tested in
 * test_engine.c (a soft fake model whose distribution is known).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <string.h>

#include <cmocka.h>

#include "runtime/engine/lookup.h"
#include "runtime/engine/spec.h"

/* ------------------------------------------------ lookup */

static void test_lookup_latest_longest(void **state)
{
    /* "1 2 3 9 | 1 2 3 7 8 | ... 2 3" : the 2-gram "2 3" last occurred
     * before 7 8; the 3-gram "1 2 3" is not the suffix */
    const int32_t h[] = {1, 2, 3, 9, 5, 1, 2, 3, 7, 8, 6, 2, 3};
    int32_t out[8];
    int32_t n = lookup_propose(h, 13, 1, 3, 4, out);
    assert_int_equal(n, 4);
    assert_int_equal(out[0], 7);
    assert_int_equal(out[1], 8);
    assert_int_equal(out[2], 6);
    assert_int_equal(out[3], 2);
    /* max limits the count; the end of the history limits it too */
    assert_int_equal(lookup_propose(h, 13, 1, 3, 1, out), 1);
    const int32_t rep[] = {4, 5, 4, 5};
    n = lookup_propose(rep, 4, 1, 3, 8, out);
    assert_int_equal(n, 2); /* "4 5" at 0, followed by what the history has: 4 5 */
    assert_int_equal(out[0], 4);
    assert_int_equal(out[1], 5);
}

static void test_lookup_longest_wins(void **state)
{
    /* the 1-gram "3" last occurred before 4; the 2-gram "2 3" before 9 */
    const int32_t h[] = {2, 3, 9, 0, 3, 4, 2, 3};
    int32_t out[4];
    assert_int_equal(lookup_propose(h, 8, 1, 2, 1, out), 1);
    assert_int_equal(out[0], 9);
    assert_int_equal(lookup_propose(h, 8, 1, 1, 1, out), 1);
    assert_int_equal(out[0], 4);
    /* ngram_min above every match: nothing */
    const int32_t u[] = {1, 2, 3, 4, 5, 6, 5};
    assert_int_equal(lookup_propose(u, 7, 2, 3, 4, out), 0);
    assert_int_equal(lookup_propose(u, 7, 1, 3, 4, out), 2); /* "5" -> 6 5 */
    assert_int_equal(out[0], 6);
    /* degenerate inputs */
    assert_int_equal(lookup_propose(u, 1, 1, 3, 4, out), 0);
    assert_int_equal(lookup_propose(NULL, 0, 1, 3, 4, out), 0);
    assert_int_equal(lookup_propose(u, 7, 1, 3, 0, out), 0);
}

/* ------------------------------------------------ the rule, statistically */

static uint64_t rng_state;

static double unit(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (double)(z >> 11) * 0x1.0p-53;
}

static int32_t draw_from(const float *p, int32_t n)
{
    double u = unit(), cum = 0;
    for (int32_t i = 0; i < n; i++) {
        cum += p[i];
        if (u < cum)
            return i;
    }
    return n - 1;
}

#define V 6
#define DRAWS 200000

/* Pearson's chi-square of counts against probabilities p over V cells. */
static double chi2(const long *counts, const float *p, long n)
{
    double x = 0;
    for (int32_t i = 0; i < V; i++) {
        double e = (double)n * p[i];
        if (e > 0)
            x += (counts[i] - e) * (counts[i] - e) / e;
        else
            assert_int_equal(counts[i], 0); /* never a token p rules out */
    }
    return x;
}

/* DRAWS rounds of: d ~ q (or d fixed, q one-hot), accept by the rule, else
 * the residual draw; the kept token's counts must fit p. */
static double run_rule(const float *p, const float *q, int32_t fixed_d, long *counts)
{
    int32_t ids[V];
    float qd[V];
    for (int32_t i = 0; i < V; i++)
        ids[i] = i;
    memset(counts, 0, V * sizeof *counts);
    for (long t = 0; t < DRAWS; t++) {
        int32_t d = q ? draw_from(q, V) : fixed_d;
        float q_d = q ? q[d] : 1.0f;
        int32_t tok = d;
        if (!spec_accept_rule(ids, p, V, d, q_d, unit())) {
            if (q)
                memcpy(qd, q, sizeof qd);
            tok = spec_residual_draw(ids, p, V, q ? qd : NULL, d, unit());
            assert_true(tok >= 0 && tok < V);
        }
        counts[tok]++;
    }
    return chi2(counts, p, DRAWS);
}

static void test_rule_keeps_p(void **state)
{
    /* chi-square with 5 degrees of freedom: 20.5 is its 0.999 quantile;
     * fixed seeds make the test repeatable */
    static const float p[V] = {0.05f, 0.30f, 0.10f, 0.25f, 0.20f, 0.10f};
    static const float q_far[V] = {0.40f, 0.05f, 0.30f, 0.05f, 0.10f, 0.10f};
    static const float q_near[V] = {0.06f, 0.28f, 0.12f, 0.24f, 0.20f, 0.10f};
    static const float q_narrow[V] = {0.0f, 0.0f, 0.0f, 0.0f, 1.0f, 0.0f};
    static const float p_gap[V] = {0.0f, 0.5f, 0.0f, 0.25f, 0.25f, 0.0f};
    long counts[V];

    rng_state = 12345;
    assert_true(run_rule(p, q_far, 0, counts) < 20.5);
    assert_true(run_rule(p, q_near, 0, counts) < 20.5);
    assert_true(run_rule(p, q_narrow, 0, counts) < 20.5);
    /* a deterministic proposer (prompt lookup): q one-hot at d */
    assert_true(run_rule(p, NULL, 1, counts) < 20.5);
    assert_true(run_rule(p, NULL, 0, counts) < 20.5);
    /* p with zeros: never a token p rules out (chi2 asserts it) */
    assert_true(run_rule(p_gap, q_far, 0, counts) < 20.5);
    assert_true(run_rule(p_gap, NULL, 2, counts) < 20.5);
}

static void test_rule_is_a_test(void **state)
{
    /* the same statistic catches a wrong rule: accepting every proposal
     * keeps q, not p */
    static const float p[V] = {0.05f, 0.30f, 0.10f, 0.25f, 0.20f, 0.10f};
    static const float q[V] = {0.40f, 0.05f, 0.30f, 0.05f, 0.10f, 0.10f};
    long counts[V] = {0};
    rng_state = 99;
    for (long t = 0; t < DRAWS; t++)
        counts[draw_from(q, V)]++;
    assert_true(chi2(counts, p, DRAWS) > 1000);
}

static void test_rule_greedy(void **state)
{
    /* at temperature 0 p is one-hot: exactly the argmax survives */
    const int32_t ids[1] = {3};
    const float one[1] = {1.0f};
    assert_int_equal(spec_accept_rule(ids, one, 1, 3, 1.0f, 0.999), 1);
    assert_int_equal(spec_accept_rule(ids, one, 1, 2, 1.0f, 0.0), 0);
    assert_int_equal(spec_residual_draw(ids, one, 1, NULL, 2, 0.7), 3);
    /* p == q: nothing left to draw from */
    float qd[4] = {0, 0, 0, 1.0f};
    assert_int_equal(spec_residual_draw(ids, one, 1, qd, 3, 0.5), -1);
}

/* ------------------------------------------------ policy */

static void test_config(void **state)
{
    struct spec_config c;
    struct mf_err err;
    spec_config_default(&c, SPEC_LOOKUP);
    assert_int_equal(spec_config_check(&c, &err), 0);
    c.draft_max = 0;
    assert_int_equal(spec_config_check(&c, &err), MF_ERANGE);
    assert_non_null(strstr(err.msg, "draft_max"));
    spec_config_default(&c, SPEC_LOOKUP);
    c.draft_min = c.draft_max + 1;
    assert_int_equal(spec_config_check(&c, &err), MF_ERANGE);
    spec_config_default(&c, SPEC_LOOKUP);
    c.p_min = 1.5f;
    assert_int_equal(spec_config_check(&c, &err), MF_ERANGE);
    spec_config_default(&c, SPEC_LOOKUP);
    c.ngram_min = 4;
    c.ngram_max = 3;
    assert_int_equal(spec_config_check(&c, &err), MF_ERANGE);
    assert_non_null(strstr(err.msg, "lookup_ngram"));
    spec_config_default(&c, SPEC_DRAFT);
    assert_int_equal(spec_config_check(&c, &err), MF_ERANGE); /* no draft pool */
    struct spec *sp;
    spec_config_default(&c, SPEC_DRAFT);
    c.draft_kv_blocks = 4;
    assert_int_equal(spec_open(&sp, &c, 16, NULL, NULL, 4, &err), MF_EINVAL); /* no draft */
    assert_null(sp);
}

static void test_adaptive_k(void **state)
{
    struct spec_config c;
    struct spec *sp;
    struct spec_req *r;
    struct mf_err err;
    int32_t out[SPEC_MAX_DRAFT + 1], n_out, k, d[SPEC_MAX_DRAFT];
    struct sampler_result res;
    const int32_t vocab = 8;
    float rows[(SPEC_MAX_DRAFT + 1) * 8];
    int32_t hist[64] = {0};

    spec_config_default(&c, SPEC_LOOKUP);
    c.draft_max = 6;
    assert_int_equal(spec_open(&sp, &c, vocab, NULL, NULL, 4, &err), 0);
    r = spec_req_new(sp);
    assert_non_null(r);
    /* every proposal right (greedy: argmax of each row is token 1): k grows to the cap */
    for (int round = 0; round < 10; round++) {
        k = spec_want(sp, r, 100);
        assert_true(k >= 1 && k <= 6);
        memset(rows, 0, sizeof rows);
        for (int32_t i = 0; i <= k; i++)
            rows[i * vocab + 1] = 1.0f;
        for (int32_t i = 0; i < k; i++)
            d[i] = hist[10 + i] = 1;
        assert_int_equal(spec_verify(sp, r, NULL, rows, d, k, hist, 10, 1, out, &n_out, &res, &err),
                         0);
        assert_int_equal(n_out, k + 1);
    }
    assert_int_equal(spec_want(sp, r, 100), 6);
    assert_int_equal(spec_want(sp, r, 3), 3); /* room caps it */
    /* every proposal wrong: k falls to 0 and the sequence backs off */
    int zeros = 0;
    for (int round = 0; round < 60; round++) {
        k = spec_want(sp, r, 100);
        if (!k) {
            zeros += round >= 40; /* once it has learnt, it mostly waits */
            continue;
        }
        memset(rows, 0, sizeof rows);
        for (int32_t i = 0; i <= k; i++)
            rows[i * vocab + 1] = 1.0f;
        for (int32_t i = 0; i < k; i++)
            d[i] = hist[10 + i] = 2;
        assert_int_equal(spec_verify(sp, r, NULL, rows, d, k, hist, 10, 1, out, &n_out, &res, &err),
                         0);
        assert_int_equal(n_out, 1); /* the first is rejected, replaced by the argmax */
        assert_int_equal(out[0], 1);
    }
    assert_true(zeros >= 15);
    uint64_t prop, acc;
    spec_req_counts(r, &prop, &acc);
    assert_true(prop > acc && acc > 0);
    struct spec_stats st;
    spec_get_stats(sp, &st);
    assert_int_equal(st.proposed, prop);
    assert_int_equal(st.accepted, acc);
    spec_req_free(sp, r);
    spec_close(sp);
}

static void test_guard(void **state)
{
    struct spec_config c;
    struct spec *sp;
    struct mf_err err;
    int on_count = 0;

    spec_config_default(&c, SPEC_LOOKUP);
    c.max_batch = 8;
    assert_int_equal(spec_open(&sp, &c, 8, NULL, NULL, 4, &err), 0);
    assert_int_equal(spec_round_on(sp, 9), 0); /* past max_batch */
    /* speculation measures slower in this bucket: the guard turns it off,
     * probing now and then */
    for (int i = 0; i < 400; i++) {
        int on = spec_round_on(sp, 4);
        spec_step_end(sp, 4, on, on ? 4 : 8, on ? 20 : 4, 0.01);
        on_count += i >= 100 && on;
    }
    assert_true(on_count > 0 && on_count < 20);
    /* another bucket is measured on its own: faster with speculation, on */
    on_count = 0;
    for (int i = 0; i < 400; i++) {
        int on = spec_round_on(sp, 1);
        spec_step_end(sp, 1, on, on ? 3 : 1, on ? 5 : 1, 0.01);
        on_count += i >= 100 && on;
    }
    assert_true(on_count > 250);
    struct spec_stats st;
    spec_get_stats(sp, &st);
    assert_true(st.busy_steps == 1 && st.guard_off_steps > 0);
    spec_close(sp);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lookup_latest_longest),
        cmocka_unit_test(test_lookup_longest_wins),
        cmocka_unit_test(test_rule_keeps_p),
        cmocka_unit_test(test_rule_is_a_test),
        cmocka_unit_test(test_rule_greedy),
        cmocka_unit_test(test_config),
        cmocka_unit_test(test_adaptive_k),
        cmocka_unit_test(test_guard),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
