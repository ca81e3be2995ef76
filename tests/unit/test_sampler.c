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

#include "runtime/engine/sampler.h"

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

/* ---- drawing elsewhere: the plan is the device's contract ------------------ */

/* Random logits with a few NaN and -inf, like a model gone partly wrong. */
static void odd_logits(float *l, int32_t n, uint32_t seed)
{
    fake_logits(l, n, seed);
    for (int32_t i = (int32_t)(seed % 13); i < n; i += 97)
        l[i] = i % 2 ? NAN : -INFINITY;
}

/* Asserts that survivors and draws of a and c agree on every bit. */
static void assert_same_chain(struct sampler *a, const float *la, struct sampler *c,
                              const float *lc, int32_t n)
{
    int32_t *ia = malloc((size_t)n * sizeof *ia), *ic = malloc((size_t)n * sizeof *ic);
    float *oa = malloc((size_t)n * sizeof *oa), *oc = malloc((size_t)n * sizeof *oc);
    size_t ka, kc;
    struct mf_err err = {0};
    assert_int_equal(sampler_survivors(a, la, ia, oa, &ka, &err), 0);
    assert_int_equal(sampler_survivors(c, lc, ic, oc, &kc, &err), 0);
    assert_int_equal(ka, kc);
    assert_memory_equal(ia, ic, ka * sizeof *ia);
    assert_memory_equal(oa, oc, ka * sizeof *oa);
    free(ia);
    free(ic);
    free(oa);
    free(oc);
}

/* The adjust list d must be, computed apart: one entry per token with a
 * bias or (penalties on) a place in the window hist[0..n), ascending, with
 * its biases summed in order and its count. */
static void assert_adjust_list(const struct sampler_draw *d, const struct sampler_params *p,
                               const int32_t *hist, int32_t n, int32_t n_vocab)
{
    int pen = p->repeat_penalty != 1.0f || p->presence_penalty != 0.0f ||
              p->frequency_penalty != 0.0f;
    int32_t k = 0;
    for (int32_t t = 0; t < n_vocab; t++) {
        int32_t count = 0, named = 0;
        float bias = 0;
        for (int32_t i = n - p->repeat_last_n > 0 ? n - p->repeat_last_n : 0; pen && i < n; i++)
            count += hist[i] == t;
        for (size_t i = 0; i < p->n_bias; i++)
            if (p->bias[i].token == t) {
                bias = named++ ? bias + p->bias[i].bias : p->bias[i].bias;
            }
        if (!count && !named)
            continue;
        assert_true(k < d->n_adjust);
        assert_int_equal(d->adjust[k].token, t);
        assert_int_equal(d->adjust[k].count, count);
        assert_memory_equal(&d->adjust[k].bias, &bias, sizeof bias);
        k++;
    }
    assert_int_equal(k, d->n_adjust);
}

/* One chain: sampler a with biases and penalties against the plan of an
 * equal sampler b, its adjust list applied with sampler_adjust_logit and
 * the rest run by sampler c without biases or penalties: equal survivors
 * (bit for bit) and equal tokens over many steps. */
static void check_adjust_equivalence(struct sampler_params p)
{
    enum { V = 1000, STEPS = 300 };
    struct sampler_bias bias[40];
    float *l = malloc(V * sizeof *l), *adj = malloc(V * sizeof *adj);
    int32_t hist[50 + STEPS], n_hist = 0;
    size_t nb = 0;
    int listed_twice = 0;

    for (int32_t i = 0; i < 16; i++) /* near-favourites, some twice */
        bias[nb++] = (struct sampler_bias){(i * 61) % V, 0.1f + 0.7f * (float)i};
    for (int32_t i = 0; i < 8; i++)
        bias[nb++] = (struct sampler_bias){(i * 61) % V, 0.2f + 0.13f * (float)i};
    for (int32_t i = 0; i < 6; i++) /* bans, one on a token also boosted */
        bias[nb++] = (struct sampler_bias){(i * 122 + 61) % V, -INFINITY};
    bias[nb++] = (struct sampler_bias){999, 12.5f};
    bias[nb++] = (struct sampler_bias){999, -0.3f};
    p.bias = bias;
    p.n_bias = nb;
    struct sampler_params q = p; /* c: the chain after the adjustments */
    q.bias = NULL;
    q.n_bias = 0;
    q.repeat_penalty = 1.0f;
    q.presence_penalty = q.frequency_penalty = 0.0f;
    struct sampler *a = make(V, &p), *b = make(V, &p), *c = make(V, &q);
    assert_true(sampler_draw_ok(b));
    for (int32_t i = 0; i < 50; i++) { /* a prompt with repeats */
        hist[n_hist++] = (i * 7) % 23;
        sampler_accept(a, (i * 7) % 23);
        sampler_accept(b, (i * 7) % 23);
    }
    for (uint32_t t = 0; t < STEPS; t++) {
        struct sampler_draw d;
        odd_logits(l, V, t);
        sampler_draw_plan(b, &d);
        assert_adjust_list(&d, &p, hist, n_hist, V);
        assert_true(d.temperature == p.temperature && d.top_k == p.top_k &&
                    d.top_p == p.top_p && d.min_p == p.min_p &&
                    d.repeat_penalty == p.repeat_penalty &&
                    d.presence_penalty == p.presence_penalty &&
                    d.frequency_penalty == p.frequency_penalty);
        memcpy(adj, l, V * sizeof *adj);
        for (int32_t i = 0; i < d.n_adjust; i++) {
            const struct sampler_adjust *e = &d.adjust[i];
            listed_twice |= e->token == 0 && e->bias == 0.1f + 0.2f;
            adj[e->token] = sampler_adjust_logit(&d, e, l[e->token]);
        }
        assert_same_chain(a, l, c, adj, V);
        int32_t x = sample(a, l), y = sample(c, adj);
        assert_int_equal(x, y);
        hist[n_hist++] = x;
        sampler_accept(a, x);
        sampler_accept(b, x);
    }
    assert_true(listed_twice); /* token 0's 0.1 and 0.2 were summed */
    sampler_free(a);
    sampler_free(b);
    sampler_free(c);
    free(l);
    free(adj);
}

static void test_plan_adjust_list_is_the_chain(void **state)
{
    struct sampler_params p;
    sampler_params_default(&p);
    p.temperature = 0.9f;
    p.top_p = 0.95f;
    p.min_p = 0.02f;
    p.repeat_penalty = 1.3f;
    p.presence_penalty = 0.4f;
    p.frequency_penalty = 0.2f;
    p.repeat_last_n = 32;
    p.seed = 5;
    check_adjust_equivalence(p);
    p.top_k = 0; /* no sort before top_p; then no filter at all */
    check_adjust_equivalence(p);
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.temperature = 1.7f;
    check_adjust_equivalence(p);
    p.temperature = 0.0f; /* greedy sees the adjustments too */
    check_adjust_equivalence(p);
    p.temperature = 0.8f; /* penalties off: biases only, the window unlisted */
    p.repeat_penalty = 1.0f;
    p.presence_penalty = p.frequency_penalty = 0.0f;
    check_adjust_equivalence(p);
}

/* A plan spends the number a sample would: samplers planning and samplers
 * sampling stay in step, a row given back to the host draws with the plan's
 * number, a host draw after a device draw takes a fresh one, one candidate
 * left still costs a number, and greedy costs none. */
static void test_plan_spends_prng_like_sample(void **state)
{
    enum { V = 300 };
    float l[V];
    struct sampler_params p = plain(1.0f);
    p.seed = 99;
    struct sampler *planner = make(V, &p), *host = make(V, &p), *twin = make(V, &p);
    struct sampler_draw d, e;

    for (uint32_t t = 0; t < 200; t++) {
        fake_logits(l, V, t);
        for (int32_t i = 0; i < V; i++)
            l[i] *= 0.1f; /* flat: every draw depends on u */
        int32_t x = sample(host, l);
        sampler_draw_plan(twin, &e);
        if (t % 3 == 2) { /* a host step after a device one: a fresh number */
            assert_int_equal(sample(planner, l), x);
        } else {
            sampler_draw_plan(planner, &d);
            assert_true(d.u >= 0 && d.u < 1);
            assert_true(d.u == e.u);
        }
        if (t % 3 == 0) /* given back: the host draws with d.u */
            assert_int_equal(sample(planner, l), x);
        sampler_accept(planner, x);
        sampler_accept(host, x);
        sampler_accept(twin, x);
    }
    sampler_free(planner);
    sampler_free(host);
    sampler_free(twin);

    p.top_k = 1; /* one survivor: the number is spent all the same */
    struct sampler *one = make(V, &p), *ref = make(V, &p);
    for (int i = 0; i < 5; i++) {
        assert_int_equal(sample(one, l), argmax(l, V));
        sampler_draw_plan(ref, &e);
    }
    sampler_draw_plan(one, &d);
    sampler_draw_plan(ref, &e);
    assert_true(d.u == e.u);
    sampler_free(one);
    sampler_free(ref);

    p = plain(0.0f);
    struct sampler *g = make(V, &p);
    sampler_draw_plan(g, &d);
    assert_true(d.u == 0.0);
    assert_int_equal(d.n_adjust, 0);
    sampler_free(g);
}

static int draw_ok(const struct sampler_params *p)
{
    struct sampler *s = make(2000, p);
    int ok = sampler_draw_ok(s);
    sampler_free(s);
    return ok;
}

static void test_draw_ok_limits(void **state)
{
    static struct sampler_bias many[SAMPLER_DRAW_MAX_ADJUST + 1];
    struct sampler_params p;
    sampler_params_default(&p);
    assert_true(draw_ok(&p)); /* Ollama's defaults go to the device */
    p.typical_p = 0.9f;
    assert_false(draw_ok(&p));
    sampler_params_default(&p);
    p.logprobs = 1;
    assert_false(draw_ok(&p));
    sampler_params_default(&p);
    p.top_k = SAMPLER_DRAW_MAX_TOP_K;
    assert_true(draw_ok(&p));
    p.top_k = SAMPLER_DRAW_MAX_TOP_K + 1;
    assert_false(draw_ok(&p));

    sampler_params_default(&p); /* penalties on: the window counts */
    p.repeat_last_n = SAMPLER_DRAW_MAX_ADJUST;
    assert_true(draw_ok(&p));
    p.repeat_last_n = SAMPLER_DRAW_MAX_ADJUST + 1;
    assert_false(draw_ok(&p));
    p.repeat_penalty = 1.0f; /* all off: the window lists nothing */
    assert_true(draw_ok(&p));
    p.frequency_penalty = 0.1f;
    assert_false(draw_ok(&p));

    sampler_params_default(&p);
    p.repeat_penalty = 1.0f;
    for (int32_t i = 0; i <= SAMPLER_DRAW_MAX_ADJUST; i++)
        many[i] = (struct sampler_bias){i, 1.0f};
    p.bias = many;
    p.n_bias = SAMPLER_DRAW_MAX_ADJUST + 1;
    assert_false(draw_ok(&p));
    many[SAMPLER_DRAW_MAX_ADJUST].token = 0; /* named twice: one entry */
    assert_true(draw_ok(&p));
    p.repeat_penalty = 1.1f;
    p.repeat_last_n = 1;
    assert_false(draw_ok(&p)); /* 1024 biases + a window of 1 */
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
        cmocka_unit_test(test_plan_adjust_list_is_the_chain),
        cmocka_unit_test(test_plan_spends_prng_like_sample),
        cmocka_unit_test(test_draw_ok_limits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
