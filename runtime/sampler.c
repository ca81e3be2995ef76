/*
 * sampler.c: the token sampler (chain and order in sampler.h).
 *
 * Owns, per request: a copy of the parameters and logit biases, the PRNG
 * (xoshiro256**, seeded through splitmix64, so equal seeds give equal
 * streams on every machine), the penalty history (a ring of the last
 * repeat_last_n tokens) and a candidate array of n_vocab entries reused for
 * every token, so sampling allocates nothing.
 *
 * Candidates are (id, logit) pairs. Filters shrink the array in place; a flag
 * says whether it is sorted by logit (descending, ties by id, so results do
 * not depend on the partition order). top_k keeps a k-heap over one pass
 * (quickselect past 4096) and sorts only the k kept; top_p sorts a growing prefix (256, 1024, ...
 * candidates) until the prefix reaches p, which on real models is the first step.
 *
 * Penalties follow llama.cpp's penalties sampler: a token seen c > 0 times in
 * the window has its logit divided by repeat_penalty when positive (multiplied
 * when not), then lowered by c * frequency_penalty + presence_penalty.
 */
#include "runtime/sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct cand {
    int32_t id;
    float logit;
};

struct sampler {
    struct sampler_params p;   /* copy; p.bias points at bias below */
    struct sampler_bias *bias; /* owned copy of the logit biases */
    int32_t n_vocab;
    uint64_t rng[4];   /* xoshiro256** state */
    int32_t *hist;     /* ring of the last repeat_last_n tokens (owned) */
    int32_t n_hist;    /* tokens in the ring */
    int32_t hist_pos;  /* next slot to write */
    int32_t *scratch;  /* repeat_last_n ids, for counting (owned) */
    struct cand *cand; /* n_vocab candidates (owned) */
    size_t n_cand;
    int sorted; /* cand[0..n_cand) sorted by logit, descending */
};

/* ---- PRNG ----------------------------------------------------------------- */

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

static uint64_t next_u64(uint64_t s[4])
{
    uint64_t r = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return r;
}

/* Uniform in [0, 1) with 53 random bits. */
static double next_unit(uint64_t s[4])
{
    return (double)(next_u64(s) >> 11) * 0x1.0p-53;
}

/* ---- setup ---------------------------------------------------------------- */

void sampler_params_default(struct sampler_params *p)
{
    *p = (struct sampler_params){
        .temperature = 0.8f,
        .top_k = 40,
        .top_p = 0.9f,
        .min_p = 0.0f,
        .typical_p = 1.0f,
        .repeat_penalty = 1.1f,
        .repeat_last_n = 64,
    };
}

static int check_params(int32_t n_vocab, const struct sampler_params *p, struct mf_err *err)
{
    if (n_vocab <= 0)
        return mf_err_set(err, MF_EINVAL, "sampler: vocabulary of %d tokens", n_vocab);
    if (isnan(p->temperature))
        return mf_err_set(err, MF_ERANGE, "sampler: temperature is not a number");
    if (!(p->top_p > 0 && p->top_p <= 1))
        return mf_err_set(err, MF_ERANGE, "sampler: top_p %g is outside (0, 1]", p->top_p);
    if (!(p->min_p >= 0 && p->min_p <= 1))
        return mf_err_set(err, MF_ERANGE, "sampler: min_p %g is outside [0, 1]", p->min_p);
    if (!(p->typical_p > 0 && p->typical_p <= 1))
        return mf_err_set(err, MF_ERANGE, "sampler: typical_p %g is outside (0, 1]", p->typical_p);
    if (!(p->repeat_penalty > 0) || !isfinite(p->repeat_penalty) ||
        !isfinite(p->presence_penalty) || !isfinite(p->frequency_penalty))
        return mf_err_set(err, MF_ERANGE,
                          "sampler: repeat_penalty must be > 0 and penalties "
                          "finite");
    if (p->repeat_last_n < 0 || p->repeat_last_n > SAMPLER_MAX_HISTORY)
        return mf_err_set(err, MF_ERANGE, "sampler: repeat_last_n %d is outside 0..%d",
                          p->repeat_last_n, SAMPLER_MAX_HISTORY);
    if (p->n_logprobs < 0 || p->n_logprobs > SAMPLER_MAX_LOGPROBS)
        return mf_err_set(err, MF_ERANGE, "sampler: logprobs %d is outside 0..%d", p->n_logprobs,
                          SAMPLER_MAX_LOGPROBS);
    for (size_t i = 0; i < p->n_bias; i++)
        if (p->bias[i].token < 0 || p->bias[i].token >= n_vocab || isnan(p->bias[i].bias))
            return mf_err_set(err, MF_ERANGE,
                              "sampler: logit_bias names token %d (vocabulary "
                              "0..%d) or is not a number",
                              p->bias[i].token, n_vocab - 1);
    return 0;
}

int sampler_new(struct sampler **out, int32_t n_vocab, const struct sampler_params *p,
                struct mf_err *err)
{
    *out = NULL;
    int rc = check_params(n_vocab, p, err);
    if (rc)
        return rc;
    struct sampler *s = calloc(1, sizeof *s);
    size_t nh = p->repeat_last_n ? (size_t)p->repeat_last_n : 1;
    if (s) {
        s->cand = malloc((size_t)n_vocab * sizeof *s->cand);
        s->hist = malloc(nh * sizeof *s->hist);
        s->scratch = malloc(nh * sizeof *s->scratch);
        s->bias = p->n_bias ? malloc(p->n_bias * sizeof *s->bias) : NULL;
    }
    if (!s || !s->cand || !s->hist || !s->scratch || (p->n_bias && !s->bias)) {
        sampler_free(s);
        return mf_err_set(err, MF_ENOMEM, "sampler: out of memory for %d tokens", n_vocab);
    }
    s->p = *p;
    if (p->n_bias)
        memcpy(s->bias, p->bias, p->n_bias * sizeof *s->bias);
    s->p.bias = s->bias;
    s->n_vocab = n_vocab;
    uint64_t x = p->seed;
    for (int i = 0; i < 4; i++)
        s->rng[i] = splitmix64(&x);
    *out = s;
    return 0;
}

void sampler_free(struct sampler *s)
{
    if (!s)
        return;
    free(s->cand);
    free(s->hist);
    free(s->scratch);
    free(s->bias);
    free(s);
}

void sampler_accept(struct sampler *s, int32_t token)
{
    if (token < 0 || token >= s->n_vocab || s->p.repeat_last_n == 0)
        return;
    s->hist[s->hist_pos] = token;
    s->hist_pos = (s->hist_pos + 1) % s->p.repeat_last_n;
    if (s->n_hist < s->p.repeat_last_n)
        s->n_hist++;
}

/* ---- ordering --------------------------------------------------------------- */

/* Higher logit first; equal logits by lower id, so order is total. */
static int before(const struct cand *a, const struct cand *b)
{
    return a->logit > b->logit || (a->logit == b->logit && a->id < b->id);
}

static int cmp_cand(const void *a, const void *b)
{
    const struct cand *x = a, *y = b;
    return before(x, y) ? -1 : before(y, x) ? 1 : 0;
}

static void swap(struct cand *a, struct cand *b)
{
    struct cand t = *a;
    *a = *b;
    *b = t;
}

/* Moves the k best of c[0..n) to the front, unordered (quickselect with a
 * median-of-three pivot; after 2 log2(n) rounds it falls back to sorting, so
 * the worst case stays O(n log n)). */
static void select_top(struct cand *c, size_t n, size_t k)
{
    size_t lo = 0, hi = n, budget = 2;
    for (size_t m = n; m > 1; m >>= 1)
        budget += 2;
    while (hi - lo > 1 && k > lo && k < hi) {
        if (budget-- == 0) {
            qsort(c + lo, hi - lo, sizeof *c, cmp_cand);
            return;
        }
        size_t mid = lo + (hi - lo) / 2;
        if (before(&c[hi - 1], &c[lo]))
            swap(&c[hi - 1], &c[lo]);
        if (before(&c[mid], &c[lo]))
            swap(&c[mid], &c[lo]);
        if (before(&c[hi - 1], &c[mid]))
            swap(&c[hi - 1], &c[mid]);
        struct cand pivot = c[mid];
        swap(&c[mid], &c[hi - 1]);
        size_t store = lo;
        for (size_t i = lo; i + 1 < hi; i++)
            if (before(&c[i], &pivot))
                swap(&c[i], &c[store++]);
        swap(&c[store], &c[hi - 1]);
        if (store == k || store + 1 == k)
            return;
        if (store > k)
            hi = store;
        else
            lo = store + 1;
    }
}

/* Restores the heap c[0..k) (worst candidate at the root) below slot i. */
static void sift_down(struct cand *c, size_t k, size_t i)
{
    for (;;) {
        size_t w = i, l = 2 * i + 1, r = l + 1;
        if (l < k && before(&c[w], &c[l]))
            w = l;
        if (r < k && before(&c[w], &c[r]))
            w = r;
        if (w == i)
            return;
        swap(&c[i], &c[w]);
        i = w;
    }
}

/* Moves the k best of c[0..n) to the front with a k-heap: one pass in which
 * nearly every candidate costs a single comparison with the heap's worst,
 * several times faster than quickselect's passes for k in the hundreds. */
static void heap_top(struct cand *c, size_t n, size_t k)
{
    for (size_t i = k / 2; i-- > 0;)
        sift_down(c, k, i);
    for (size_t i = k; i < n; i++)
        if (before(&c[i], &c[0])) {
            swap(&c[i], &c[0]);
            sift_down(c, k, 0);
        }
}

/* Sorts the best k of the candidates, leaving them first. */
static void sort_top(struct sampler *s, size_t k)
{
    if (k >= s->n_cand) {
        qsort(s->cand, s->n_cand, sizeof *s->cand, cmp_cand);
        s->sorted = 1;
        return;
    }
    if (k <= 4096)
        heap_top(s->cand, s->n_cand, k);
    else
        select_top(s->cand, s->n_cand, k);
    qsort(s->cand, k, sizeof *s->cand, cmp_cand);
}

/* ---- the chain ------------------------------------------------------------------ */

static int cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

static void apply_penalties(struct sampler *s)
{
    const struct sampler_params *p = &s->p;
    if (s->n_hist == 0 ||
        (p->repeat_penalty == 1.0f && p->presence_penalty == 0.0f && p->frequency_penalty == 0.0f))
        return;
    memcpy(s->scratch, s->hist, (size_t)s->n_hist * sizeof *s->scratch);
    qsort(s->scratch, (size_t)s->n_hist, sizeof *s->scratch, cmp_i32);
    for (int32_t i = 0; i < s->n_hist;) {
        int32_t id = s->scratch[i], c = 0;
        while (i < s->n_hist && s->scratch[i] == id) {
            c++;
            i++;
        }
        float l = s->cand[id].logit; /* the array is still indexed by id here */
        l = l > 0 ? l / p->repeat_penalty : l * p->repeat_penalty;
        s->cand[id].logit = l - (float)c * p->frequency_penalty - p->presence_penalty;
    }
}

/* Candidates = all tokens, with biases and penalties applied. */
static void load(struct sampler *s, const float *logits)
{
    for (int32_t i = 0; i < s->n_vocab; i++)
        s->cand[i] = (struct cand){i, isnan(logits[i]) ? -INFINITY : logits[i]};
    for (size_t i = 0; i < s->p.n_bias; i++)
        s->cand[s->bias[i].token].logit += s->bias[i].bias;
    apply_penalties(s);
    s->n_cand = (size_t)s->n_vocab;
    s->sorted = 0;
}

/* Drops candidates at -inf (banned or never possible). */
static void drop_impossible(struct sampler *s)
{
    size_t k = 0;
    for (size_t i = 0; i < s->n_cand; i++)
        if (s->cand[i].logit > -INFINITY)
            s->cand[k++] = s->cand[i];
    s->n_cand = k;
}

static float max_logit(const struct sampler *s)
{
    float m = -INFINITY;
    if (s->sorted)
        return s->n_cand ? s->cand[0].logit : m;
    for (size_t i = 0; i < s->n_cand; i++)
        m = s->cand[i].logit > m ? s->cand[i].logit : m;
    return m;
}

/* sum of exp(logit - m) over the candidates */
static double exp_sum(const struct sampler *s, float m)
{
    double z = 0;
    for (size_t i = 0; i < s->n_cand; i++)
        z += expf(s->cand[i].logit - m); /* float exp: 5x cheaper over 128k tokens */
    return z;
}

static void top_k(struct sampler *s)
{
    int32_t k = s->p.top_k;
    if (k <= 0 || (size_t)k >= s->n_cand)
        return;
    sort_top(s, (size_t)k);
    s->n_cand = (size_t)k;
    s->sorted = 1;
}

struct typ {
    double shift; /* |surprise - entropy| */
    double p;     /* probability */
    struct cand c;
};

/* Smaller shift first; ties in logit order. */
static int cmp_typ(const void *a, const void *b)
{
    const struct typ *x = a, *y = b;
    if (x->shift != y->shift)
        return x->shift < y->shift ? -1 : 1;
    return cmp_cand(&x->c, &y->c);
}

/* llama.cpp's locally typical sampling: keep the tokens whose surprise is
 * closest to the entropy until their mass exceeds typical_p. */
static int typical(struct sampler *s)
{
    if (s->p.typical_p >= 1.0f || s->n_cand < 2)
        return 0;
    float m = max_logit(s);
    double z = exp_sum(s, m), h = 0;
    for (size_t i = 0; i < s->n_cand; i++) {
        double pr = exp((double)s->cand[i].logit - m) / z;
        if (pr > 0)
            h -= pr * log(pr);
    }
    struct typ *t = malloc(s->n_cand * sizeof *t);
    if (!t)
        return MF_ENOMEM;
    for (size_t i = 0; i < s->n_cand; i++) {
        double pr = exp((double)s->cand[i].logit - m) / z;
        t[i] = (struct typ){fabs(-log(pr) - h), pr, s->cand[i]};
    }
    qsort(t, s->n_cand, sizeof *t, cmp_typ);
    double cum = 0;
    size_t keep = s->n_cand;
    for (size_t i = 0; i < s->n_cand; i++) {
        cum += t[i].p;
        if (cum > s->p.typical_p) {
            keep = i + 1;
            break;
        }
    }
    for (size_t i = 0; i < keep; i++)
        s->cand[i] = t[i].c;
    s->n_cand = keep;
    s->sorted = 0;
    free(t);
    return 0;
}

/* Smallest prefix (by logit) whose probability reaches top_p. */
static void top_p(struct sampler *s)
{
    if (s->p.top_p >= 1.0f || s->n_cand < 2)
        return;
    float m = max_logit(s);
    double z = exp_sum(s, m), cum = 0;
    size_t done = 0;
    for (size_t want = 256;; want *= 4) {
        if (!s->sorted)
            sort_top(s, want);
        size_t lim = want < s->n_cand ? want : s->n_cand;
        for (; done < lim; done++) {
            cum += expf(s->cand[done].logit - m) / z;
            if (cum >= s->p.top_p) {
                s->n_cand = done + 1;
                s->sorted = 1;
                return;
            }
        }
        if (lim == s->n_cand)
            return;
    }
}

static void min_p(struct sampler *s)
{
    if (s->p.min_p <= 0.0f || s->n_cand < 2)
        return;
    float floor = max_logit(s) + logf(s->p.min_p);
    size_t k = 0;
    for (size_t i = 0; i < s->n_cand; i++)
        if (s->cand[i].logit >= floor)
            s->cand[k++] = s->cand[i];
    s->n_cand = k; /* order kept; the maximum always survives */
}

/* The chain up to, not including, the draw. */
static int run_chain(struct sampler *s, const float *logits, struct mf_err *err)
{
    load(s, logits);
    drop_impossible(s);
    if (s->n_cand == 0)
        return mf_err_set(err, MF_EINVAL, "sampler: every token's logit is -inf or NaN");
    if (s->p.temperature <= 0) {
        /* candidates are in id order here, so the first maximum has the lowest id */
        float m = max_logit(s);
        size_t best = 0;
        while (s->cand[best].logit != m)
            best++;
        s->cand[0] = s->cand[best];
        s->n_cand = 1;
        s->sorted = 1;
        return 0;
    }
    top_k(s);
    if (typical(s))
        return mf_err_set(err, MF_ENOMEM, "sampler: out of memory");
    top_p(s);
    min_p(s);
    for (size_t i = 0; i < s->n_cand; i++)
        s->cand[i].logit /= s->p.temperature;
    return 0;
}

/* Inverse-CDF draw over the candidates' softmax. */
static int32_t draw(struct sampler *s)
{
    float m = max_logit(s);
    double z = exp_sum(s, m), u = next_unit(s->rng) * z, cum = 0;
    for (size_t i = 0; i < s->n_cand; i++) {
        cum += expf(s->cand[i].logit - m);
        if (u < cum)
            return s->cand[i].id;
    }
    return s->cand[s->n_cand - 1].id; /* u rounded up to z */
}

/* log-softmax of the raw logits for the token and the n best. Reuses the
 * candidate array, so it runs after the draw. */
static void logprobs(struct sampler *s, const float *logits, struct sampler_result *res)
{
    float m = -INFINITY;
    for (int32_t i = 0; i < s->n_vocab; i++)
        if (logits[i] > m)
            m = logits[i];
    double z = 0;
    for (int32_t i = 0; i < s->n_vocab; i++)
        if (!isnan(logits[i]))
            z += expf(logits[i] - m);
    double lz = (double)m + log(z);
    res->logprob = (float)((double)logits[res->token] - lz);
    res->n_top = s->p.n_logprobs;
    if (!res->n_top)
        return;
    for (int32_t i = 0; i < s->n_vocab; i++)
        s->cand[i] = (struct cand){i, isnan(logits[i]) ? -INFINITY : logits[i]};
    s->n_cand = (size_t)s->n_vocab;
    s->sorted = 0;
    sort_top(s, (size_t)res->n_top);
    if (res->n_top > s->n_vocab)
        res->n_top = s->n_vocab;
    for (int32_t i = 0; i < res->n_top; i++)
        res->top[i] =
            (struct sampler_logprob){s->cand[i].id, (float)((double)s->cand[i].logit - lz)};
}

int sampler_sample(struct sampler *s, const float *logits, struct sampler_result *res,
                   struct mf_err *err)
{
    int rc = run_chain(s, logits, err);
    if (rc)
        return rc;
    res->token = s->n_cand == 1 ? s->cand[0].id : draw(s);
    res->logprob = NAN;
    res->n_top = 0;
    if (s->p.logprobs)
        logprobs(s, logits, res);
    return 0;
}

int sampler_survivors(struct sampler *s, const float *logits, int32_t *ids, float *out_logits,
                      size_t *n, struct mf_err *err)
{
    int rc = run_chain(s, logits, err);
    if (rc)
        return rc;
    qsort(s->cand, s->n_cand, sizeof *s->cand, cmp_cand);
    for (size_t i = 0; i < s->n_cand; i++) {
        if (ids)
            ids[i] = s->cand[i].id;
        if (out_logits)
            out_logits[i] = s->cand[i].logit;
    }
    *n = s->n_cand;
    return 0;
}
