/*
 * sampler.c: the token sampler (chain and order in sampler.h).
 *
 * Owns, per request: a copy of the parameters, the logit biases folded to
 * one sum per token, the PRNG (xoshiro256**, seeded through splitmix64, so
 * equal seeds give equal streams on every machine), the penalty history (a
 * ring of the last repeat_last_n tokens), the adjust list and a candidate
 * array of n_vocab entries reused for every token, so sampling allocates
 * nothing.
 *
 * Biases and penalties reach the logits through one sparse adjust list
 * (build_adjust), applied by sampler_adjust_logit; sampler_draw_plan hands
 * the same list to a device, so both sides do the same float operations.
 * With temperature > 0 every draw spends exactly one PRNG number, even when
 * one candidate survives, so a device draw and a host draw keep a seed's
 * stream in step.
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
 *
 * Biases naming a token twice are summed (in the order given) before being
 * added, so a device adds the same single number; adding them one by one
 * could round differently.
 */
#include "runtime/engine/sampler.h"

#include "runtime/grammar/gram.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

struct cand {
    int32_t id;
    float logit;
};

struct sampler {
    struct sampler_params p;   /* copy; p.bias/p.n_bias: the folded bias below */
    struct sampler_bias *bias; /* owned: one summed bias per token, ascending ids */
    int32_t n_vocab;
    uint64_t rng[4];               /* xoshiro256** state */
    int32_t *hist;                 /* ring of the last repeat_last_n tokens (owned) */
    int32_t n_hist;                /* tokens in the ring */
    int32_t hist_pos;              /* next slot to write */
    struct sampler_adjust *adjust; /* owned: adjust_cap entries, rebuilt per draw */
    int32_t adjust_cap;            /* folded biases + penalty window (when active) */
    double planned_u;              /* the number the last plan spent */
    int planned;                   /* 1: planned_u not yet drawn by the host */
    struct cand *cand;             /* n_vocab candidates (owned) */
    size_t n_cand;
    int sorted; /* cand[0..n_cand) sorted by logit, descending */
    struct gram *gram;   /* a reference, or NULL: unconstrained */
    uint32_t gst;        /* the grammar's state after the output so far */
    int32_t gskip;       /* accepted tokens still to skip (the prompt) */
    uint32_t *mask;      /* owned with gram: the current state's token mask */
    struct mf_err gerr;  /* why gst went dead, when a limit did it */
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

static int penalties_on(const struct sampler_params *p)
{
    return p->repeat_penalty != 1.0f || p->presence_penalty != 0.0f ||
           p->frequency_penalty != 0.0f;
}

static int cmp_bias(const void *a, const void *b)
{
    int32_t x = ((const struct sampler_bias *)a)->token;
    int32_t y = ((const struct sampler_bias *)b)->token;
    return (x > y) - (x < y);
}

/* Folds b[0..n) into s->bias, one entry per token in ascending order, each
 * the sum of that token's biases in the order given. Uses s->cand as
 * scratch. Returns the entries kept. */
static size_t fold_biases(struct sampler *s, const struct sampler_bias *b, size_t n)
{
    size_t k = 0;
    if (n == 0)
        return 0;
    for (size_t i = 0; i < n; i++)
        s->cand[b[i].token].id = -1;
    for (size_t i = 0; i < n; i++) {
        struct cand *c = &s->cand[b[i].token];
        if (c->id < 0)
            *c = (struct cand){b[i].token, b[i].bias};
        else
            c->logit += b[i].bias;
    }
    memcpy(s->bias, b, n * sizeof *s->bias);
    qsort(s->bias, n, sizeof *s->bias, cmp_bias);
    for (size_t i = 0; i < n; i++) {
        int32_t t = s->bias[i].token;
        if (k == 0 || s->bias[k - 1].token != t)
            s->bias[k++] = (struct sampler_bias){t, s->cand[t].logit};
    }
    return k;
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
    /* the raw bias count bounds the folded one; <= 2^20 + n_bias entries */
    size_t na = p->n_bias + (penalties_on(p) ? (size_t)p->repeat_last_n : 0) + 1;
    if (s) {
        s->cand = malloc((size_t)n_vocab * sizeof *s->cand);
        s->hist = malloc(nh * sizeof *s->hist);
        s->bias = p->n_bias ? malloc(p->n_bias * sizeof *s->bias) : NULL;
        s->adjust = na <= INT32_MAX ? malloc(na * sizeof *s->adjust) : NULL;
    }
    if (!s || !s->cand || !s->hist || !s->adjust || (p->n_bias && !s->bias)) {
        sampler_free(s);
        return mf_err_set(err, MF_ENOMEM, "sampler: out of memory for %d tokens", n_vocab);
    }
    s->p = *p;
    s->p.n_bias = fold_biases(s, p->bias, p->n_bias);
    s->p.bias = s->bias;
    s->adjust_cap = (int32_t)s->p.n_bias + (penalties_on(p) ? p->repeat_last_n : 0);
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
    free(s->adjust);
    free(s->bias);
    free(s->mask);
    gram_unref(s->gram);
    free(s);
}

int sampler_set_grammar(struct sampler *s, struct gram *g, int32_t n_skip, struct mf_err *err)
{
    int32_t nv = gram_n_vocab(g) > s->n_vocab ? gram_n_vocab(g) : s->n_vocab;
    uint32_t *mask = calloc(((size_t)nv + 31) / 32, sizeof *mask);
    if (!mask)
        return mf_err_set(err, MF_ENOMEM, "sampler: out of memory for a grammar mask");
    uint32_t st = gram_start(g, err);
    if (st == GRAM_DEAD) {
        free(mask);
        return err->code ? err->code : mf_err_set(err, MF_EINVAL, "grammar: matches nothing");
    }
    free(s->mask);
    gram_unref(s->gram);
    s->gram = gram_ref(g);
    s->gst = st;
    s->gskip = n_skip;
    s->mask = mask;
    return 0;
}

int sampler_grammar_state(const struct sampler *s, int *accepting)
{
    if (!s->gram)
        return 0;
    if (s->gst == GRAM_DEAD)
        return -1;
    *accepting = gram_accepting(s->gram, s->gst);
    return 1;
}

void sampler_accept(struct sampler *s, int32_t token)
{
    s->planned = 0; /* a new token: the planned draw was the device's */
    if (s->gram) {
        if (s->gskip > 0)
            s->gskip--;
        else if (s->gst != GRAM_DEAD)
            s->gst = gram_feed_token(s->gram, s->gst, token, &s->gerr);
    }
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

static int cmp_adjust(const void *a, const void *b)
{
    int32_t x = ((const struct sampler_adjust *)a)->token;
    int32_t y = ((const struct sampler_adjust *)b)->token;
    return (x > y) - (x < y);
}

/* Fills s->adjust: the folded biases merged with the penalty window's
 * counts (when penalties are on), ascending ids. The window is sorted in the
 * tail of the buffer and merged forward: the write index never passes the
 * read index since adjust_cap >= n_bias + n_hist. Returns the entries. */
static int32_t build_adjust(struct sampler *s)
{
    const struct sampler_bias *b = s->bias;
    size_t nb = s->p.n_bias, ib = 0;
    int32_t nh = penalties_on(&s->p) ? s->n_hist : 0, ih = 0, n = 0;
    struct sampler_adjust *h = s->adjust + s->adjust_cap - nh;

    for (int32_t i = 0; i < nh; i++)
        h[i] = (struct sampler_adjust){s->hist[i], 1, 0.0f};
    qsort(h, (size_t)nh, sizeof *h, cmp_adjust);
    while (ib < nb || ih < nh) {
        int32_t t = ib == nb || (ih < nh && h[ih].token < b[ib].token) ? h[ih].token : b[ib].token;
        struct sampler_adjust a = {t, 0, 0.0f};
        if (ib < nb && b[ib].token == t)
            a.bias = b[ib++].bias;
        while (ih < nh && h[ih].token == t) {
            a.count++;
            ih++;
        }
        s->adjust[n++] = a;
    }
    return n;
}

/* The draw's chain parameters and adjust list (u left 0). */
static void fill_draw(struct sampler *s, struct sampler_draw *d)
{
    const struct sampler_params *p = &s->p;
    *d = (struct sampler_draw){.temperature = p->temperature,
                               .top_k = p->top_k,
                               .top_p = p->top_p,
                               .min_p = p->min_p,
                               .repeat_penalty = p->repeat_penalty,
                               .presence_penalty = p->presence_penalty,
                               .frequency_penalty = p->frequency_penalty,
                               .n_adjust = build_adjust(s),
                               .adjust = s->adjust};
}

float sampler_adjust_logit(const struct sampler_draw *d, const struct sampler_adjust *a,
                           float logit)
{
    float l = (isnan(logit) ? -INFINITY : logit) + a->bias;
    if (a->count > 0) {
        l = l > 0 ? l / d->repeat_penalty : l * d->repeat_penalty;
        l = l - (float)a->count * d->frequency_penalty - d->presence_penalty;
    }
    return l;
}

/* Candidates = all tokens, with biases and penalties applied. */
static void load(struct sampler *s, const float *logits)
{
    struct sampler_draw d;
    fill_draw(s, &d);
    for (int32_t i = 0; i < s->n_vocab; i++)
        s->cand[i] = (struct cand){i, isnan(logits[i]) ? -INFINITY : logits[i]};
    for (int32_t i = 0; i < d.n_adjust; i++) {
        struct cand *c = &s->cand[d.adjust[i].token];
        c->logit = sampler_adjust_logit(&d, &d.adjust[i], c->logit);
    }
    if (s->gram) { /* the grammar's mask: whole words of 32 tokens at a time */
        for (int32_t w = 0; w * 32 < s->n_vocab; w++) {
            uint32_t bits = s->mask[w];
            if (bits == UINT32_MAX)
                continue;
            int32_t end = w * 32 + 32 < s->n_vocab ? w * 32 + 32 : s->n_vocab;
            for (int32_t i = w * 32; i < end; i++)
                if (!((bits >> (i & 31)) & 1u))
                    s->cand[i].logit = -INFINITY;
        }
    }
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

/* The grammar's mask for the current state into s->mask. */
static int grammar_mask(struct sampler *s, struct mf_err *err)
{
    if (s->gst == GRAM_DEAD) {
        if (s->gerr.code) {
            *err = s->gerr;
            return err->code;
        }
        return mf_err_set(err, MF_EINVAL, "grammar: the output so far matches no sentence");
    }
    return gram_mask(s->gram, s->gst, s->mask, err);
}

/* The chain up to, not including, the draw. */
static int run_chain(struct sampler *s, const float *logits, struct mf_err *err)
{
    if (s->gram) {
        int rc = grammar_mask(s, err);
        if (rc)
            return rc;
    }
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

/* The uniform number a draw spends: the one the last plan took when its
 * draw came back to the host (no token accepted since), else the next. */
static double take_unit(struct sampler *s)
{
    if (s->planned) {
        s->planned = 0;
        return s->planned_u;
    }
    return next_unit(s->rng);
}

/* Inverse-CDF draw over the candidates' softmax at u in [0, 1). */
static int32_t draw(const struct sampler *s, double u)
{
    if (s->n_cand == 1)
        return s->cand[0].id;
    float m = max_logit(s);
    double z = exp_sum(s, m), cum = 0;
    u *= z;
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
    /* spent first, failure included, as a device draw spends it */
    double u = s->p.temperature > 0 ? take_unit(s) : 0;
    int rc = run_chain(s, logits, err);
    if (rc)
        return rc;
    res->token = s->p.temperature > 0 ? draw(s, u) : s->cand[0].id;
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

/* ---- drawing elsewhere ------------------------------------------------------- */

int sampler_draw_ok(const struct sampler *s)
{
    return s->p.typical_p >= 1.0f && !s->p.logprobs && s->p.top_k <= SAMPLER_DRAW_MAX_TOP_K &&
           s->adjust_cap <= SAMPLER_DRAW_MAX_ADJUST;
}

void sampler_draw_plan(struct sampler *s, struct sampler_draw *d)
{
    assert(sampler_draw_ok(s));
    fill_draw(s, d);
    if (s->gram) {
        struct mf_err err;
        /* a mask that fails (a state limit) bans everything: the device gives
           the row back and the host's draw reports why */
        if (grammar_mask(s, &err))
            memset(s->mask, 0, ((size_t)s->n_vocab + 31) / 32 * sizeof *s->mask);
        d->allow = s->mask;
    }
    s->planned = 0;
    if (s->p.temperature > 0) {
        d->u = next_unit(s->rng);
        s->planned_u = d->u;
        s->planned = 1;
    }
}

/* ---- speculative decoding ------------------------------------------------- */

int sampler_probs(struct sampler *s, const float *logits, int32_t *ids, float *probs, size_t *n,
                  struct mf_err *err)
{
    int rc = run_chain(s, logits, err);
    if (rc)
        return rc;
    /* the weights draw() gives each candidate: expf(l - m) / z */
    float m = max_logit(s);
    double z = s->p.temperature > 0 ? exp_sum(s, m) : 1.0;
    for (size_t i = 0; i < s->n_cand; i++) {
        ids[i] = s->cand[i].id;
        probs[i] = s->p.temperature > 0 ? (float)(expf(s->cand[i].logit - m) / z) : 1.0f;
    }
    *n = s->n_cand;
    return 0;
}

double sampler_uniform(struct sampler *s)
{
    s->planned = 0;
    return next_unit(s->rng);
}

int sampler_reports_logprobs(const struct sampler *s)
{
    return s->p.logprobs != 0;
}
