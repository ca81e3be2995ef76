/*
 * test_sampler.c: the sampler's chain, checked by its documented formulas
 * and by statistics with fixed seeds (so every run draws the same numbers).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "runtime/sampler.h"

/* Filters off: the draw sees the plain distribution. */
static struct sampler_params plain(float temperature)
{
    struct sampler_params p;
    sampler_params_default(&p);
    p.temperature = temperature;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.repeat_penalty = 1.0f;
    p.seed = 42;
    return p;
}

static struct sampler *make(int32_t n_vocab, const struct sampler_params *p)
{
    struct sampler *s;
    struct mf_err err = {0};
    if (sampler_new(&s, n_vocab, p, &err))
        fail_msg("sampler_new: %s", err.msg);
    return s;
}

static int32_t sample(struct sampler *s, const float *logits)
{
    struct sampler_result r;
    struct mf_err err = {0};
    if (sampler_sample(s, logits, &r, &err))
        fail_msg("sample: %s", err.msg);
    return r.token;
}

/* Deterministic pseudo-random logits, like a model's, for n tokens. */
static void fake_logits(float *l, int32_t n, uint32_t seed)
{
    uint32_t x = seed * 2654435761u + 1;
    for (int32_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        l[i] = (float)(x % 20000) / 1000.0f - 10.0f;
    }
}

static int32_t argmax(const float *l, int32_t n)
{
    int32_t b = 0;
    for (int32_t i = 1; i < n; i++)
        if (l[i] > l[b])
            b = i;
    return b;
}

static void test_greedy_and_top_k_1(void **state)
{
    enum { V = 128000 };
    float *l = malloc(V * sizeof *l);
    struct sampler_params g = plain(0.0f), k1 = plain(1.5f);
    k1.top_k = 1;
    struct sampler *sg = make(V, &g), *sk = make(V, &k1);
    for (uint32_t t = 0; t < 20; t++) {
        fake_logits(l, V, t);
        int32_t want = argmax(l, V);
        assert_int_equal(sample(sg, l), want);
        assert_int_equal(sample(sk, l), want);
    }
    sampler_free(sg);
    sampler_free(sk);
    free(l);
}

static void test_same_seed_same_sequence(void **state)
{
    enum { V = 5000, N = 200 };
    float *l = malloc(V * sizeof *l);
    struct sampler_params p;
    sampler_params_default(&p); /* Ollama's defaults: top_k 40, top_p 0.9, penalties */
    p.seed = 1234;
    struct sampler *a = make(V, &p), *b = make(V, &p);
    p.seed = 1235;
    struct sampler *c = make(V, &p);
    int differs = 0;
    for (uint32_t t = 0; t < N; t++) {
        fake_logits(l, V, t % 7);
        int32_t x = sample(a, l), y = sample(b, l), z = sample(c, l);
        assert_int_equal(x, y);
        differs |= x != z;
        sampler_accept(a, x);
        sampler_accept(b, y);
        sampler_accept(c, z);
    }
    assert_true(differs);
    sampler_free(a);
    sampler_free(b);
    sampler_free(c);
    free(l);
}

/* The first draws for seed 42 are fixed forever: a change to the PRNG or
 * the draw would silently change every seeded reply. */
static void test_seed_stream_is_stable(void **state)
{
    float l[4] = {0, 0, 0, 0};
    struct sampler_params p = plain(1.0f);
    struct sampler *s = make(4, &p);
    static const int32_t want[12] = {0, 1, 2, 3, 3, 3, 2, 3, 3, 2, 2, 1};
    for (int i = 0; i < 12; i++)
        assert_int_equal(sample(s, l), want[i]);
    sampler_free(s);
}

static void survivors(struct sampler_params *p, const float *l, int32_t n, int32_t *ids, float *out,
                      size_t *k)
{
    struct sampler *s = make(n, p);
    struct mf_err err = {0};
    if (sampler_survivors(s, l, ids, out, k, &err))
        fail_msg("%s", err.msg);
    sampler_free(s);
}

static void test_top_p_cuts_exact_set(void **state)
{
    /* probabilities 0.5, 0.25, 0.125, 0.0625, 0.0625 */
    float l[5] = {logf(8), logf(4), logf(2), 0, 0};
    int32_t ids[5];
    size_t k;
    struct sampler_params p = plain(1.0f);
    p.top_p = 0.7f; /* 0.5 < 0.7 <= 0.75: tokens 0 and 1 */
    survivors(&p, l, 5, ids, NULL, &k);
    assert_int_equal(k, 2);
    assert_int_equal(ids[0], 0);
    assert_int_equal(ids[1], 1);
    p.top_p = 0.75f; /* mass 0.75 reached with two tokens: still 2 */
    survivors(&p, l, 5, ids, NULL, &k);
    assert_int_equal(k, 2);
    p.top_p = 0.76f;
    survivors(&p, l, 5, ids, NULL, &k);
    assert_int_equal(k, 3);
    p.top_p = 0.5f;
    survivors(&p, l, 5, ids, NULL, &k);
    assert_int_equal(k, 1);

    /* a large flat vocabulary: the prefix grows past 256 candidates */
    enum { V = 10000 };
    float *flat = calloc(V, sizeof *flat);
    int32_t *fid = malloc(V * sizeof *fid);
    p.top_p = 0.50005f; /* 5000 tokens hold 0.5, one more is needed */
    survivors(&p, flat, V, fid, NULL, &k);
    assert_int_equal(k, V / 2 + 1);
    for (size_t i = 0; i < k; i++)
        assert_int_equal(fid[i], (int32_t)i); /* ties broken by id */
    free(flat);
    free(fid);
}

static void test_top_k_min_p_typical(void **state)
{
    float l[6] = {1, 5, 3, 4, 2, 0};
    int32_t ids[6];
    size_t k;
    struct sampler_params p = plain(1.0f);
    p.top_k = 3;
    survivors(&p, l, 6, ids, NULL, &k);
    assert_int_equal(k, 3);
    assert_int_equal(ids[0], 1);
    assert_int_equal(ids[1], 3);
    assert_int_equal(ids[2], 2);

    /* min_p keeps p_i >= min_p * p_max, i.e. logit >= max + ln(min_p) */
    p = plain(1.0f);
    p.min_p = expf(-2.5f);
    survivors(&p, l, 6, ids, NULL, &k);
    assert_int_equal(k, 3); /* logits 5, 4, 3 */

    /* typical_p: entropy-closest first; a near-uniform head keeps its mass */
    float t[4] = {0, 0, 0, -20};
    p = plain(1.0f);
    p.typical_p = 0.5f;
    survivors(&p, t, 4, ids, NULL, &k);
    assert_int_equal(k, 2);
    assert_true(ids[0] < 3 && ids[1] < 3);
}

static void test_penalties_formula(void **state)
{
    float l[4] = {2, -2, 1, 0}, out[4];
    int32_t ids[4];
    size_t k;
    struct sampler_params p = plain(1.0f);
    p.repeat_penalty = 2.0f;
    p.presence_penalty = 0.5f;
    p.frequency_penalty = 0.25f;
    p.repeat_last_n = 3;
    struct sampler *s = make(4, &p);
    sampler_accept(s, 3); /* falls out of the window of 3 */
    sampler_accept(s, 0);
    sampler_accept(s, 1);
    sampler_accept(s, 1);
    struct mf_err err = {0};
    assert_int_equal(sampler_survivors(s, l, ids, out, &k, &err), 0);
    assert_int_equal(k, 4);
    float want[4];
    want[0] = 2.0f / 2 - (1 * 0.25f + 0.5f);  /* seen once: 0.25 */
    want[1] = -2.0f * 2 - (2 * 0.25f + 0.5f); /* seen twice: -5 */
    want[2] = 1;
    want[3] = 0; /* outside the window */
    for (size_t i = 0; i < k; i++)
        assert_float_equal(out[i], want[ids[i]], 1e-6);
    sampler_free(s);
}

static void test_bias_and_temperature(void **state)
{
    float l[3] = {1, 2, 3}, out[3];
    int32_t ids[3];
    size_t k;
    struct sampler_bias b[2] = {{2, -INFINITY}, {0, 10.0f}};
    struct sampler_params p = plain(0.5f);
    p.bias = b;
    p.n_bias = 2;
    survivors(&p, l, 3, ids, out, &k);
    assert_int_equal(k, 2); /* token 2 banned */
    assert_int_equal(ids[0], 0);
    assert_float_equal(out[0], 11.0f / 0.5f, 1e-5);
    assert_float_equal(out[1], 2.0f / 0.5f, 1e-5);

    p = plain(0.0f);
    p.bias = b;
    p.n_bias = 2;
    struct sampler *s = make(3, &p);
    assert_int_equal(sample(s, l), 0); /* greedy sees the bias */
    sampler_free(s);
}

/* Temperature 1, no filters: frequencies follow softmax (chi-square, 7 df,
 * critical value 24.32 at p = 0.001; the seed makes the run reproducible). */
static void test_chi_square(void **state)
{
    enum { V = 8, N = 80000 };
    float l[V] = {0.1f, 1.0f, -0.5f, 2.0f, 0.0f, 1.5f, -1.0f, 0.7f};
    double pr[V], z = 0, chi = 0;
    long hits[V] = {0};
    for (int i = 0; i < V; i++)
        z += exp(l[i]);
    for (int i = 0; i < V; i++)
        pr[i] = exp(l[i]) / z;
    struct sampler_params p = plain(1.0f);
    p.seed = 7;
    struct sampler *s = make(V, &p);
    for (int i = 0; i < N; i++)
        hits[sample(s, l)]++;
    sampler_free(s);
    for (int i = 0; i < V; i++) {
        double e = pr[i] * N;
        chi += (hits[i] - e) * (hits[i] - e) / e;
    }
    print_message("# chi-square %.2f (7 df)\n", chi);
    assert_true(chi < 24.32);

    /* temperature 2 flattens: the rarest token gains */
    p.temperature = 2.0f;
    s = make(V, &p);
    long rare = 0;
    for (int i = 0; i < N; i++)
        rare += sample(s, l) == 6;
    sampler_free(s);
    assert_true(rare > hits[6] * 1.5);
}

static void test_logprobs(void **state)
{
    float l[5] = {0, 1, 2, 3, -1};
    struct sampler_params p = plain(0.0f);
    p.logprobs = 1;
    p.n_logprobs = 3;
    struct sampler *s = make(5, &p);
    struct sampler_result r;
    struct mf_err err = {0};
    assert_int_equal(sampler_sample(s, l, &r, &err), 0);
    double z = 0;
    for (int i = 0; i < 5; i++)
        z += exp(l[i]);
    assert_int_equal(r.token, 3);
    assert_float_equal(r.logprob, 3 - log(z), 1e-5);
    assert_int_equal(r.n_top, 3);
    assert_int_equal(r.top[0].token, 3);
    assert_int_equal(r.top[1].token, 2);
    assert_int_equal(r.top[2].token, 1);
    assert_float_equal(r.top[2].logprob, 1 - log(z), 1e-5);
    sampler_free(s);

    p.logprobs = 0;
    s = make(5, &p);
    assert_int_equal(sampler_sample(s, l, &r, &err), 0);
    assert_true(isnan(r.logprob));
    assert_int_equal(r.n_top, 0);
    sampler_free(s);
}

static void test_bad_params(void **state)
{
    struct sampler *s;
    struct mf_err err = {0};
    struct sampler_params p = plain(1.0f);
    p.top_p = 0;
    assert_int_equal(sampler_new(&s, 10, &p, &err), MF_ERANGE);
    assert_null(s);
    p = plain(1.0f);
    p.n_logprobs = SAMPLER_MAX_LOGPROBS + 1;
    assert_int_equal(sampler_new(&s, 10, &p, &err), MF_ERANGE);
    struct sampler_bias b = {10, 1.0f};
    p = plain(1.0f);
    p.bias = &b;
    p.n_bias = 1;
    assert_int_equal(sampler_new(&s, 10, &p, &err), MF_ERANGE);
    assert_non_null(strstr(err.msg, "logit_bias"));

    float l[3] = {-INFINITY, NAN, -INFINITY};
    p = plain(1.0f);
    s = make(3, &p);
    struct sampler_result r;
    assert_int_equal(sampler_sample(s, l, &r, &err), MF_EINVAL);
    sampler_free(s);
    sampler_free(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy_and_top_k_1),
        cmocka_unit_test(test_same_seed_same_sequence),
        cmocka_unit_test(test_seed_stream_is_stable),
        cmocka_unit_test(test_top_p_cuts_exact_set),
        cmocka_unit_test(test_top_k_min_p_typical),
        cmocka_unit_test(test_penalties_formula),
        cmocka_unit_test(test_bias_and_temperature),
        cmocka_unit_test(test_chi_square),
        cmocka_unit_test(test_logprobs),
        cmocka_unit_test(test_bad_params),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
