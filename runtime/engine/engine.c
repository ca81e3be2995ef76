/*
 * engine.c: the engine loop: one step thread drives scheduler -> model ->
 * sampler -> per-request event queues, and HTTP threads submit, consume,
 * cancel and read metrics through a mutex-guarded API.
 *
 * Owns the KV pool, the scheduler, the requests' event queues (and each
 * request's sampling params once submitted) and the metrics. Does not own
 * the model or sampler (borrowed interfaces; engine_sampler_std adapts
 * runtime/engine/sampler.h), the tokenizer or stop strings (consumer side, through
 * engine_text_*, which end a request with engine_stop) or the consumers'
 * state (user pointers).
 *
 * Threading: e->mu guards everything below except the model step and the
 * sampling, which the step thread runs unlocked with e->in_step set. While
 * in_step, the requests in the step are not freed or finished: a cancel of a
 * running request is deferred to the step's end, engine_release waits for
 * it. Consumers wait on their request's condition variable, the step
 * thread on e->work_cv (timed when something is paused).
 *
 * Engine request states (on top of the scheduler's):
 *   LIVE      --step: token event queued--------------------> LIVE
 *   LIVE      --queue reaches queue_events - 1: pause--------> PAUSED (not scheduled,
 *                                                               keeps its blocks)
 *   PAUSED    --engine_next drains to half: unpause----------> LIVE
 *   PAUSED    --stall_ms without a read (cut_stalled)--------> FINISHED (ERROR)
 *   LIVE      --EOS/stop/length/cancel/error (finish_req)----> FINISHED (final event queued)
 *   FINISHED  --engine_next pops the final event------------> freed
 *   any       --engine_release: cancel, then freed at finish-> freed
 * A slow consumer therefore never blocks the step thread: its request just
 * stops being scheduled. One slot of every queue is kept for the final event.
 *
 * Drawing: when the model can draw (engine_model.sample) and every logits
 * row's params allow it (engine_sampler.draw_ok), the step runs with no
 * logits buffer, each row's draw is planned on the host (history, PRNG) and
 * the model draws them all where the logits are; rows it gives back, and
 * every row of any other step, are drawn here (sample_all). Either way a
 * row ends in row_end, so the bookkeeping is one path.
 *
 * Speculation (runtime/engine/spec.h, off unless configured): before each
 * schedule, spec_round picks the decoding requests that propose this time,
 * spec_propose fills their proposals with the lock released (in_step set,
 * as for a step: the draft model runs there), and sched_set_draft hands
 * them over. A verify sequence's rows go through spec_verify, which keeps
 * 1..k+1 tokens; emit_end runs on_token over them and cuts them at an end
 * of generation, and complete_step delivers each as an event. A request
 * proposes only as many tokens as its event queue has room for, so the
 * queue never overflows. Requests freed on other threads retire their
 * speculation state to the step thread (spec_req_retire, spec_reap).
 */
#include "runtime/engine/engine.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/engine/spec.h"
#include "runtime/engine/stop.h"
#include "text/tokenizer.h"

#define ENGINE_BUCKETS 1024      /* id table chains; ids are sequential */
#define ENGINE_DEFAULT_EVENTS 64 /* per-request queue when the config says 0 */
#define ENGINE_MAX_EVENTS 65536  /* per-request queue limit */

/* ---------------------------------------------------------------- types */

struct engine_req {
    uint64_t id;                      /* engine id, from 1 */
    struct engine_req *hnext;         /* id table chain */
    struct engine_req *prev;          /* e->active neighbours */
    struct engine_req *next;          /* e->active neighbours */
    struct sched_req *sr;             /* owned through the scheduler; NULL once finished */
    struct engine_event *q;           /* owned: ring of queue_events events */
    int32_t q_head;                   /* oldest event */
    int32_t q_n;                      /* events queued */
    pthread_cond_t cv;                /* consumers wait here for events */
    int32_t finished;                 /* 1: final event queued (or dropped when released) */
    int32_t released;                 /* 1: the consumer is gone */
    int32_t cancel_pending;           /* sched_finish to apply when the step ends; 0: none */
    int32_t paused;                   /* 1: queue full, not scheduled */
    double paused_at;                 /* when it paused, seconds */
    int32_t ignore_eos;               /* eos ids don't finish it */
    int32_t stop_now;                 /* step thread: on_token asked to stop */
    int32_t sample_failed;            /* step thread: sampler failed, reason in sum.err */
    int32_t on_device;                /* step thread: this step's token came from model.sample */
    void *sampling;                   /* owned: sampler params */
    struct spec_req *spec;            /* owned: speculation state (NULL: engine without) */
    int32_t no_spec;                  /* 1: the request never speculates */
    const int32_t *script;            /* borrowed: benchmarks' proposals, or NULL */
    int32_t n_script;                 /* entries in script */
    int (*on_token)(void *, int32_t); /* borrowed hook, may be NULL */
    void (*notify)(void *);           /* borrowed hook, may be NULL */
    void *user;                       /* borrowed: the consumer's */
    double t_arrival;                 /* submit time, seconds */
    double t_sched;                   /* first scheduled, -1 before */
    double t_first;                   /* first token, -1 before */
    double t_last;                    /* latest token */
    int32_t n_out;                    /* tokens delivered */
    int32_t n_fed;                    /* step thread: history tokens the sampler has seen */
    struct engine_summary sum;        /* filled at finish */
};

struct engine {
    pthread_mutex_t mu;            /* guards everything but the unlocked step */
    pthread_cond_t work_cv;        /* the step thread waits here for work */
    pthread_cond_t step_cv;        /* broadcast when a step ends */
    pthread_t thread;              /* the step thread */
    int started;                   /* 1: thread running */
    int stopping;                  /* 1: engine_close asked the thread to exit */
    int in_step;                   /* 1: model step or sampling in progress, unlocked */
    double t_model;                /* this step's seconds inside the model's calls */
    struct engine_model model;     /* copy of the caller's interface */
    struct engine_sampler sampler; /* copy; sample NULL: greedy */
    struct engine_config cfg;      /* limits, defaults applied */
    struct kv_cache *kv;           /* owned */
    struct sched *s;               /* owned */
    struct engine_req *buckets[ENGINE_BUCKETS]; /* id table */
    struct engine_req *active;                  /* every request not yet popped or freed */
    uint64_t next_id;                           /* next request id */
    int32_t n_paused;                           /* requests paused */
    int32_t n_cancel_pending;                   /* requests with cancel_pending */
    struct sched_step step;                     /* the step being run */
    struct engine_req **lg_req;     /* owned: max_num_seqs, request of each logits row */
    int32_t *sampled;               /* owned: max_num_seqs, token of each logits row */
    struct sampler_result *results; /* owned: max_num_seqs, the draw of each logits row */
    struct sampler_draw *draws;     /* owned: max_num_seqs, the plan of each logits row */
    int32_t *ids;                   /* owned: max_num_seqs, model.sample's token per row */
    float *logits;                  /* owned: rows of n_vocab floats */
    size_t logits_cap;              /* floats allocated */
    struct engine_metrics m;        /* counters and histograms (gauges filled on read) */
    int32_t *lg_row0;               /* owned: max_num_seqs, first logits row of each
                                       logits sequence (more than one: a verify) */
    int32_t *lg_rows;               /* owned: max_num_seqs, its rows */
    int32_t *emit;                  /* owned: max_num_logits, the tokens each logits
                                       sequence keeps, from its lg_row0 on */
    int32_t *n_emit;                /* owned: max_num_seqs, how many */
    struct spec *spec;              /* owned: speculation, or NULL when off */
    struct spec_cand *cands;        /* owned: max_num_seqs, a round's candidates */
    struct engine_req **cand_req;   /* owned: max_num_seqs, their requests */
};

/* Bucket bounds from vLLM's Prometheus logger (vllm/v1/metrics/loggers.py). */
static const double ttft_bounds[] = {0.001, 0.005, 0.01, 0.02,  0.04,  0.06,  0.08, 0.1,
                                     0.25,  0.5,   0.75, 1.0,   2.5,   5.0,   7.5,  10.0,
                                     20.0,  40.0,  80.0, 160.0, 640.0, 2560.0};
static const double itl_bounds[] = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,  0.3,  0.4, 0.5,
                                    0.75, 1.0,   2.5,  5.0,   7.5, 10.0, 20.0, 40.0, 80.0};
static const double req_bounds[] = {0.3,  0.5,   0.8,   1.0,   1.5,   2.0,    2.5,
                                    5.0,  10.0,  15.0,  20.0,  30.0,  40.0,   50.0,
                                    60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};

#define NBOUNDS(a) ((int32_t)(sizeof(a) / sizeof((a)[0])))

/* ---------------------------------------------------------------- helpers */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void hist_init(struct engine_hist *h, const double *bounds, int32_t n)
{
    memset(h, 0, sizeof *h);
    h->bounds = bounds;
    h->n_bounds = n;
}

static void hist_observe(struct engine_hist *h, double v)
{
    int32_t i = 0;
    while (i < h->n_bounds && v > h->bounds[i])
        i++;
    h->counts[i]++;
    h->count++;
    h->sum += v;
}

static int cond_init_monotonic(pthread_cond_t *cv)
{
    pthread_condattr_t a;
    int rc = pthread_condattr_init(&a);
    if (rc)
        return rc;
    rc = pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    if (!rc)
        rc = pthread_cond_init(cv, &a);
    pthread_condattr_destroy(&a);
    return rc;
}

/* Waits on cv up to ms (< 0: forever). Returns ETIMEDOUT or 0. */
static int wait_ms(pthread_cond_t *cv, pthread_mutex_t *mu, int ms)
{
    struct timespec ts;
    if (ms < 0)
        return pthread_cond_wait(cv, mu);
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return pthread_cond_timedwait(cv, mu, &ts);
}

/* ---------------------------------------------------------------- requests */

static struct engine_req *find_req(const struct engine *e, uint64_t id)
{
    struct engine_req *r = e->buckets[id % ENGINE_BUCKETS];
    while (r && r->id != id)
        r = r->hnext;
    return r;
}

static void link_req(struct engine *e, struct engine_req *r)
{
    struct engine_req **head = &e->buckets[r->id % ENGINE_BUCKETS];
    r->hnext = *head;
    *head = r;
    r->next = e->active;
    if (e->active)
        e->active->prev = r;
    e->active = r;
}

/* Forgets and frees r (finished or never submitted to the scheduler). */
static void free_req(struct engine *e, struct engine_req *r)
{
    struct engine_req **link = &e->buckets[r->id % ENGINE_BUCKETS];
    while (*link && *link != r)
        link = &(*link)->hnext;
    if (*link) {
        *link = r->hnext;
        if (r->prev)
            r->prev->next = r->next;
        else
            e->active = r->next;
        if (r->next)
            r->next->prev = r->prev;
    }
    if (r->sr)
        sched_free_req(e->s, r->sr);
    if (r->spec)
        spec_req_retire(e->spec, r->spec); /* the draft's pool is the step thread's */
    if (r->sampling && e->sampler.free_params)
        e->sampler.free_params(e->sampler.ctx, r->sampling);
    pthread_cond_destroy(&r->cv);
    free(r->q);
    free(r);
}

/* Queues an event (with res's token, or none) for the consumer and wakes it. */
static void deliver(struct engine *e, struct engine_req *r, const struct sampler_result *res,
                    enum sched_finish why)
{
    struct engine_event *ev = &r->q[(r->q_head + r->q_n) % e->cfg.queue_events];
    ev->token = res ? res->token : -1;
    ev->finish = why;
    ev->logprob = res ? res->logprob : NAN;
    ev->n_top = res ? res->n_top : 0;
    if (ev->n_top)
        memcpy(ev->top, res->top, (size_t)ev->n_top * sizeof ev->top[0]);
    r->q_n++;
    pthread_cond_signal(&r->cv);
    if (r->notify)
        r->notify(r->user);
}

static void set_paused(struct engine *e, struct engine_req *r, int paused)
{
    if (r->paused == paused)
        return;
    r->paused = paused;
    r->paused_at = now_s();
    e->n_paused += paused ? 1 : -1;
    sched_set_paused(e->s, r->sr, paused);
}

/* LIVE/PAUSED -> FINISHED: releases the scheduler side at once and queues
 * the final event (with res's token, or none when res is NULL). Not for a
 * request inside the running step. A released request is freed here. */
static void finish_req(struct engine *e, struct engine_req *r, enum sched_finish why,
                       const struct sampler_result *res)
{
    double t = now_s();
    struct engine_summary *sum = &r->sum;

    if (r->paused)
        set_paused(e, r, 0);
    if (r->cancel_pending) {
        r->cancel_pending = 0;
        e->n_cancel_pending--;
    }
    sum->finish = why;
    sum->n_prompt = sched_req_n_prompt(r->sr);
    sum->n_output = r->n_out;
    sum->n_cached = sched_req_n_cached(r->sr);
    sum->n_preemptions = sched_req_n_preemptions(r->sr);
    spec_req_counts(r->spec, &sum->n_proposed, &sum->n_accepted);
    sum->queue_s = r->t_sched >= 0 ? r->t_sched - r->t_arrival : -1;
    sum->ttft_s = r->t_first >= 0 ? r->t_first - r->t_arrival : -1;
    sum->e2e_s = t - r->t_arrival;
    if (why != SCHED_FINISH_ERROR)
        mf_err_clear(&sum->err);
    sched_finish(e->s, r->sr, why);
    sched_free_req(e->s, r->sr);
    r->sr = NULL;
    r->finished = 1;
    e->m.finished[why]++;
    hist_observe(&e->m.e2e, sum->e2e_s);
    if (r->released)
        free_req(e, r);
    else
        deliver(e, r, res, why);
}

static void fail_req(struct engine *e, struct engine_req *r, const struct mf_err *err)
{
    r->sum.err = *err;
    finish_req(e, r, SCHED_FINISH_ERROR, NULL);
}

/* Finishes for why (CANCELLED or STOP) now, or at the end of the running
 * step if r is in it. */
static void cancel_req(struct engine *e, struct engine_req *r, enum sched_finish why)
{
    if (r->finished)
        return;
    if (e->in_step && sched_req_state(r->sr) == SCHED_RUNNING) {
        if (!r->cancel_pending)
            e->n_cancel_pending++;
        r->cancel_pending = (int32_t)why;
        return;
    }
    finish_req(e, r, why, NULL);
}

/* ---------------------------------------------------------------- the step */

static float *logits_alloc(struct engine *e, size_t bytes)
{
    return e->model.logits_alloc ? e->model.logits_alloc(e->model.ctx, bytes) : malloc(bytes);
}

static void logits_free(struct engine *e, float *p)
{
    if (e->model.logits_free)
        e->model.logits_free(e->model.ctx, p);
    else
        free(p);
}

/* Greedy: argmax, the lowest id on ties. */
static int32_t argmax(const float *row, int32_t n)
{
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++) {
        if (row[i] > row[best])
            best = i;
    }
    return best;
}

/* Greedy draw for an engine without a sampler. */
static void draw_greedy(const float *row, int32_t n_vocab, struct sampler_result *res)
{
    res->token = argmax(row, n_vocab);
    res->logprob = NAN;
    res->n_top = 0;
}

static int is_eos(const struct engine *e, int32_t tok)
{
    for (int32_t i = 0; i < e->model.n_eos; i++) {
        if (e->model.eos[i] == tok)
            return 1;
    }
    return 0;
}

/* Step thread: clears logits sequence j's per-step state. */
static void row_begin(struct engine *e, int32_t j)
{
    struct engine_req *r = e->lg_req[j];
    r->sample_failed = 0;
    r->stop_now = 0;
    r->on_device = 0;
    e->results[j].token = -1;
    e->n_emit[j] = 0;
}

/* Step thread, unlocked: draws row j from e->logits on the host, feeding
 * the sampler the history it has not seen (none when the row was planned). */
static int host_draw(struct engine *e, int32_t j)
{
    struct engine_req *r = e->lg_req[j];
    struct sampler_result *res = &e->results[j];
    float *row = e->logits + (size_t)e->lg_row0[j] * (size_t)e->model.n_vocab;
    int32_t n_hist;
    const int32_t *hist = sched_req_tokens(r->sr, &n_hist);
    int32_t n_new = n_hist - r->n_fed;

    r->n_fed = n_hist;
    if (!e->sampler.sample) {
        draw_greedy(row, e->model.n_vocab, res);
        return 0;
    }
    return e->sampler.sample(e->sampler.ctx, r->sampling, row, e->model.n_vocab, hist, n_hist,
                             n_new, res, &r->sum.err);
}

/* Step thread, unlocked: verifies logits sequence j's proposals (its
 * tokens after the first: hist continues with them) into e->emit. */
static int verify_draw(struct engine *e, int32_t j, const struct batch_seq *sq)
{
    struct engine_req *r = e->lg_req[j];
    int32_t n_hist, k = e->lg_rows[j] - 1, n_out = 0;
    const int32_t *hist = sched_req_tokens(r->sr, &n_hist);
    int rc = spec_verify(e->spec, r->spec, r->sampling,
                         e->logits + (size_t)e->lg_row0[j] * (size_t)e->model.n_vocab,
                         sq->tokens + 1, k, hist, n_hist, n_hist - r->n_fed,
                         e->emit + e->lg_row0[j], &n_out, &e->results[j], &r->sum.err);

    if (rc)
        return rc;
    r->n_fed = n_hist + n_out - 1; /* the proposals it accepted were fed to the sampler */
    e->n_emit[j] = n_out;
    spec_settle(e->spec, r->spec, n_hist, k, n_out);
    return 0;
}

/* Step thread, unlocked: after logits sequence j's draws (rc: their
 * result), marks a failure or a token outside the vocabulary, runs
 * on_token over the kept tokens and cuts them after an end of generation
 * or a stop (a verify may keep tokens past one). */
static void row_end(struct engine *e, int32_t j, int rc)
{
    struct engine_req *r = e->lg_req[j];
    struct sampler_result *res = &e->results[j];
    int32_t *toks = e->emit + e->lg_row0[j];

    if (!e->n_emit[j]) { /* a plain draw: its token is the result's */
        toks[0] = res->token;
        e->n_emit[j] = 1;
    }
    for (int32_t i = 0; i < e->n_emit[j]; i++) {
        if (rc || toks[i] < 0 || toks[i] >= e->model.n_vocab) {
            r->sample_failed = 1;
            if (!r->sum.err.code)
                mf_err_set(&r->sum.err, MF_ERANGE, "sampler returned token %" PRId32, toks[i]);
            toks[0] = res->token = 0;
            e->n_emit[j] = 1;
            return;
        }
    }
    for (int32_t i = 0; i < e->n_emit[j]; i++) {
        if (r->on_token)
            r->stop_now = r->on_token(r->user, toks[i]) == 1;
        if (r->stop_now || (is_eos(e, toks[i]) && !r->ignore_eos)) {
            e->n_emit[j] = i + 1;
            break;
        }
    }
    if (e->n_emit[j] > 1 || toks[0] != res->token) /* an event's logprobs are its draw's */
        *res = (struct sampler_result){.token = toks[e->n_emit[j] - 1], .logprob = NAN};
}

/* Step thread, unlocked: draws every logits sequence's tokens (verifying
 * proposals where it has them) and runs on_token. */
static void sample_all(struct engine *e)
{
    for (int32_t i = 0, j = 0; i < e->step.batch.n_seqs; i++) {
        const struct batch_seq *sq = &e->step.batch.seqs[i];
        if (!sq->want_logits)
            continue;
        row_begin(e, j);
        row_end(e, j, sq->want_logits > 1 ? verify_draw(e, j, sq) : host_draw(e, j));
        j++;
    }
}

/* Step thread, unlocked: 1 when the model can draw every logits row. */
static int draws_on_device(const struct engine *e)
{
    if (!e->model.sample || !e->sampler.draw_ok || !e->sampler.plan || e->step.n_logits == 0 ||
        e->step.n_rows != e->step.n_logits)
        return 0;
    for (int32_t j = 0; j < e->step.n_logits; j++) {
        if (!e->sampler.draw_ok(e->sampler.ctx, e->lg_req[j]->sampling))
            return 0;
    }
    return 1;
}

/* Step thread, unlocked: plans every row, runs the step with the logits
 * left on the device, draws there, and draws here the rows given back.
 * On failure (step or draw) no row is finished: the caller fails the step. */
static int step_on_device(struct engine *e, struct mf_err *err)
{
    int32_t n = e->step.n_logits;
    double t = now_s();
    int rc;

    e->step.batch.logits = NULL;
    rc = e->model.step(e->model.ctx, &e->step.batch, err);
    e->step.batch.logits = e->logits;
    e->t_model += now_s() - t;
    /* the plans after the step is queued: a device step may still run (its
     * logits stay there, backend.h), and the plans need none of its results */
    for (int32_t j = 0; !rc && j < n; j++) {
        struct engine_req *r = e->lg_req[j];
        int32_t n_hist;
        const int32_t *hist = sched_req_tokens(r->sr, &n_hist);
        e->sampler.plan(e->sampler.ctx, r->sampling, hist, n_hist, n_hist - r->n_fed,
                        &e->draws[j]);
        r->n_fed = n_hist;
    }
    t = now_s();
    if (!rc)
        rc = e->model.sample(e->model.ctx, n, e->draws, e->ids, e->logits, err);
    e->t_model += now_s() - t;
    if (rc)
        return rc;
    for (int32_t j = 0; j < n; j++) {
        struct sampler_result *res = &e->results[j];
        row_begin(e, j);
        if (e->ids[j] < 0) {
            row_end(e, j, host_draw(e, j));
            continue;
        }
        *res = (struct sampler_result){.token = e->ids[j], .logprob = NAN};
        e->lg_req[j]->on_device = 1;
        row_end(e, j, 0);
    }
    return 0;
}

/* Locked: the timing and token counters for one delivered token. */
static void count_token(struct engine *e, struct engine_req *r, double t)
{
    if (r->t_first < 0) {
        r->t_first = t;
        hist_observe(&e->m.ttft, t - r->t_arrival);
        e->m.prompt_tokens += (uint64_t)sched_req_n_prompt(r->sr);
    } else {
        hist_observe(&e->m.itl, t - r->t_last);
    }
    r->t_last = t;
    r->n_out++;
    e->m.generation_tokens++;
    if (r->on_device)
        e->m.device_draws++;
    else
        e->m.host_draws++;
}

/* Locked, after a good model step: hands the tokens to the scheduler, then
 * to the consumers, finishing on eos, stop, length or sampler failure. */
static void complete_step(struct engine *e)
{
    struct mf_err err;
    double t = now_s();

    if (sched_update_n(e->s, e->emit, e->n_emit, e->step.n_logits, &err))
        return; /* unreachable: the counts are the scheduler's own */
    if (e->spec)
        spec_get_stats(e->spec, &e->m.spec);
    for (int32_t j = 0; j < e->step.n_logits; j++) {
        struct engine_req *r = e->lg_req[j];
        const int32_t *toks = e->emit + e->lg_row0[j];
        int32_t last = e->n_emit[j] - 1;
        enum sched_finish why = sched_req_finish(r->sr);
        if (r->sample_failed) {
            finish_req(e, r, SCHED_FINISH_ERROR, NULL);
            continue;
        }
        /* a verify's tokens before its last: room was kept in the queue */
        for (int32_t i = 0; i < last; i++) {
            struct sampler_result res = {.token = toks[i], .logprob = NAN};
            count_token(e, r, t);
            deliver(e, r, &res, SCHED_FINISH_NONE);
        }
        count_token(e, r, t);
        if ((is_eos(e, toks[last]) && !r->ignore_eos) || r->stop_now)
            why = SCHED_FINISH_STOP;
        if (why != SCHED_FINISH_NONE) {
            finish_req(e, r, why, &e->results[j]);
            continue;
        }
        deliver(e, r, &e->results[j], SCHED_FINISH_NONE);
        if (r->q_n >= e->cfg.queue_events - 1)
            set_paused(e, r, 1);
    }
}

/* Locked: the model step failed; every request in it ends with its error. */
static void fail_step(struct engine *e, const struct mf_err *err)
{
    for (int32_t i = 0; i < e->step.batch.n_seqs; i++) {
        struct engine_req *r = sched_req_user(e->step.reqs[i]);
        fail_req(e, r, err);
    }
}

/* Locked: records queue times, maps logits rows to requests, sizes logits. */
static int prepare_step(struct engine *e, struct mf_err *err)
{
    size_t need = (size_t)e->step.n_rows * (size_t)e->model.n_vocab;
    double t = now_s();
    int32_t j = 0, row = 0;

    for (int32_t i = 0; i < e->step.batch.n_seqs; i++) {
        struct engine_req *r = sched_req_user(e->step.reqs[i]);
        int32_t want = e->step.batch.seqs[i].want_logits;
        if (r->t_sched < 0) {
            r->t_sched = t;
            hist_observe(&e->m.queue, t - r->t_arrival);
        }
        if (!want)
            continue;
        e->lg_req[j] = r;
        e->lg_row0[j] = row;
        e->lg_rows[j++] = want;
        row += want;
    }
    if (need > e->logits_cap) {
        /* rows are rewritten every step: nothing to carry over */
        logits_free(e, e->logits);
        e->logits = logits_alloc(e, need * sizeof *e->logits);
        e->logits_cap = e->logits ? need : 0;
        if (!e->logits)
            return mf_err_set(err, MF_ENOMEM, "logits for %" PRId32 " rows: out of memory",
                              e->step.n_rows);
    }
    e->step.batch.logits = e->logits;
    return 0;
}

/* The step's decoding sequences (every new token wants logits: decodes and
 * verifies), or 0 when it computes anything else too (a prefill's time
 * would spoil the throughput guard's figures); *verify: whether one
 * verifies proposals. */
static int32_t decoding_shape(const struct sched_step *st, int *verify)
{
    *verify = 0;
    for (int32_t i = 0; i < st->batch.n_seqs; i++) {
        const struct batch_seq *sq = &st->batch.seqs[i];
        if (sq->want_logits != sq->n_tokens)
            return 0;
        *verify |= sq->n_tokens > 1;
    }
    return st->batch.n_seqs;
}

/* Locked on entry and exit; the model and sampler run unlocked. t_begin:
 * when this step's scheduling began (the host time it counts from). */
static void run_step(struct engine *e, double t_begin)
{
    struct mf_err err;
    int verify;
    int32_t n_dec = decoding_shape(&e->step, &verify);
    double t0;
    int rc;

    mf_err_clear(&err);
    rc = prepare_step(e, &err);
    if (rc) {
        fail_step(e, &err);
        return;
    }
    e->in_step = 1;
    e->t_model = 0;
    pthread_mutex_unlock(&e->mu);
    t0 = now_s();
    if (draws_on_device(e)) {
        rc = step_on_device(e, &err);
    } else {
        double t = now_s();
        rc = e->model.step(e->model.ctx, &e->step.batch, &err);
        e->t_model += now_s() - t;
        if (!rc)
            sample_all(e);
    }
    if (e->spec && !rc) {
        int32_t made = 0;
        for (int32_t j = 0; j < e->step.n_logits; j++)
            made += e->n_emit[j];
        spec_step_end(e->spec, n_dec, verify, made, e->step.n_tokens, now_s() - t0);
    }
    pthread_mutex_lock(&e->mu);
    e->in_step = 0;
    e->m.steps++;
    if (rc)
        fail_step(e, &err);
    else
        complete_step(e);
    e->m.model_s += e->t_model;
    e->m.host_s += now_s() - t_begin - e->t_model;
    pthread_cond_broadcast(&e->step_cv);
}

/* ---------------------------------------------------------------- speculation */

/* Locked: 1 when r decodes next (running, one token to compute). */
static int decoding(const struct engine_req *r)
{
    return r->sr && !r->finished && !r->paused && !r->cancel_pending &&
           sched_req_state(r->sr) == SCHED_RUNNING && sched_req_decoding(r->sr);
}

/* Locked: whether r may propose now, and how many: as spec_want says,
 * within the events its queue can take before it pauses. */
static int32_t spec_room(const struct engine *e, const struct engine_req *r)
{
    if (r->no_spec || !r->spec)
        return 0;
    if (r->sampling && e->sampler.sample && !e->sampler.dist)
        return 0; /* a sampler spec.c cannot verify against */
    if (r->sampling && e->sampler.spec_ok && !e->sampler.spec_ok(e->sampler.ctx, r->sampling))
        return 0;
    return e->cfg.queue_events - 2 - r->q_n;
}

/* Locked on entry and exit: one round of proposals for the requests that
 * decode next (the draft model runs unlocked, in_step set). */
static void spec_round(struct engine *e)
{
    struct mf_err err;
    int32_t n_dec = 0, n = 0;
    int on;

    spec_reap(e->spec);
    for (struct engine_req *r = e->active; r; r = r->next)
        n_dec += decoding(r);
    on = spec_round_on(e->spec, n_dec);
    for (struct engine_req *r = e->active; r; r = r->next) {
        int32_t k = 0;
        if (!decoding(r))
            continue;
        int32_t room = on && n < e->cfg.sched.max_num_seqs ? spec_room(e, r) : 0;
        if (room > 0)
            k = spec_want(e->spec, r->spec, room);
        if (!k) {
            if (sched_req_n_draft(r->sr))
                sched_set_draft(e->s, r->sr, NULL, 0); /* no stale proposals */
            continue;
        }
        struct spec_cand *c = &e->cands[n];
        memset(c, 0, sizeof *c);
        c->r = r->spec;
        c->hist = sched_req_tokens(r->sr, &c->n_hist);
        c->n_prompt = sched_req_n_prompt(r->sr);
        c->sampling = r->sampling;
        c->script = r->script;
        c->n_script = r->n_script;
        c->k = k;
        e->cand_req[n++] = r;
    }
    if (!n)
        return;
    e->in_step = 1;
    pthread_mutex_unlock(&e->mu);
    spec_propose(e->spec, e->cands, n, &err); /* a failed draft step proposes nothing */
    pthread_mutex_lock(&e->mu);
    e->in_step = 0;
    pthread_cond_broadcast(&e->step_cv);
    for (int32_t i = 0; i < n; i++) {
        struct engine_req *r = e->cand_req[i];
        if (!r->finished && !r->cancel_pending && sched_req_state(r->sr) == SCHED_RUNNING)
            sched_set_draft(e->s, r->sr, e->cands[i].out, e->cands[i].n_out);
    }
}

static void apply_pending_cancels(struct engine *e)
{
    struct engine_req *r = e->active;
    while (r && e->n_cancel_pending > 0) {
        struct engine_req *next = r->next; /* finish_req may free r */
        if (r->cancel_pending)
            finish_req(e, r, (enum sched_finish)r->cancel_pending, NULL);
        r = next;
    }
}

/* Ends requests whose consumer has not read for stall_ms. */
static void cut_stalled(struct engine *e)
{
    double t = now_s();
    struct engine_req *r = e->active;
    while (r && e->cfg.stall_ms > 0) {
        struct engine_req *next = r->next;
        if (r->paused && (t - r->paused_at) * 1000.0 > e->cfg.stall_ms) {
            struct mf_err err;
            mf_err_set(&err, MF_EBUSY, "request %" PRIu64 ": the client read nothing for %d ms",
                       r->id, (int)e->cfg.stall_ms);
            fail_req(e, r, &err);
        }
        r = next;
    }
}

static void *step_main(void *arg)
{
    struct engine *e = arg;

    pthread_mutex_lock(&e->mu);
    while (!e->stopping) {
        if (e->n_paused)
            cut_stalled(e);
        if (!sched_has_work(e->s)) {
            wait_ms(&e->work_cv, &e->mu, e->n_paused ? 50 : -1);
            continue;
        }
        if (e->spec) {
            spec_round(e);
            apply_pending_cancels(e); /* cancels that came while it proposed */
        }
        double t_begin = now_s(); /* after the draft: its model time is not host time */
        sched_schedule(e->s, &e->step);
        if (e->step.batch.n_seqs == 0) {
            /* Work exists but none fits (paused requests hold the blocks). */
            wait_ms(&e->work_cv, &e->mu, 10);
            continue;
        }
        run_step(e, t_begin);
        apply_pending_cancels(e);
    }
    pthread_mutex_unlock(&e->mu);
    return NULL;
}

/* ---------------------------------------------------------------- lifecycle */

static int check_config(struct engine_config *c, const struct engine_model *m, struct mf_err *err)
{
    if (!m->step || m->n_vocab < 1 || m->n_eos < 0 || (m->n_eos > 0 && !m->eos))
        return mf_err_set(err, MF_EINVAL, "engine model interface is incomplete");
    if (c->queue_events == 0)
        c->queue_events = ENGINE_DEFAULT_EVENTS;
    if (c->queue_events < 2 || c->queue_events > ENGINE_MAX_EVENTS)
        return mf_err_set(err, MF_ERANGE, "queue_events %" PRId32 " (allowed 2..%d)",
                          c->queue_events, ENGINE_MAX_EVENTS);
    if (c->stall_ms < 0)
        return mf_err_set(err, MF_ERANGE, "stall_ms %" PRId32 " (must be >= 0)", c->stall_ms);
    return 0;
}

static int open_parts(struct engine *e, struct mf_err *err)
{
    struct kv_config kc = {.n_blocks = e->cfg.n_kv_blocks,
                           .hash_bits = e->cfg.kv_hash_bits,
                           .window = e->cfg.sched.window};
    size_t n = (size_t)e->cfg.sched.max_num_seqs;
    size_t rows = (size_t)(e->cfg.sched.max_num_logits > e->cfg.sched.max_num_seqs
                               ? e->cfg.sched.max_num_logits
                               : e->cfg.sched.max_num_seqs);
    int rc = kc.n_blocks ? 0 : kv_budget_blocks(&e->cfg.budget, &kc.n_blocks, err);

    if (!rc)
        rc = kv_open(&e->kv, &kc, err);
    if (!rc)
        rc = sched_open(&e->s, &e->cfg.sched, e->kv, err);
    if (!rc && e->cfg.spec.source != SPEC_NONE)
        rc = spec_open(&e->spec, &e->cfg.spec, e->model.n_vocab,
                       e->sampler.sample ? &e->sampler : NULL, e->cfg.draft, (int32_t)n, err);
    if (rc)
        return rc;
    e->lg_req = calloc(n, sizeof *e->lg_req);
    e->sampled = calloc(n, sizeof *e->sampled);
    e->results = calloc(n, sizeof *e->results);
    e->draws = calloc(n, sizeof *e->draws);
    e->ids = calloc(n, sizeof *e->ids);
    e->lg_row0 = calloc(n, sizeof *e->lg_row0);
    e->lg_rows = calloc(n, sizeof *e->lg_rows);
    e->n_emit = calloc(n, sizeof *e->n_emit);
    e->emit = calloc(rows, sizeof *e->emit);
    e->cands = calloc(n, sizeof *e->cands);
    e->cand_req = calloc(n, sizeof *e->cand_req);
    if (!e->lg_req || !e->sampled || !e->results || !e->draws || !e->ids || !e->lg_row0 ||
        !e->lg_rows || !e->n_emit || !e->emit || !e->cands || !e->cand_req)
        return mf_err_set(err, MF_ENOMEM, "engine for %zu sequences: out of memory", n);
    e->m.spec_source = (int32_t)e->cfg.spec.source;
    hist_init(&e->m.ttft, ttft_bounds, NBOUNDS(ttft_bounds));
    hist_init(&e->m.itl, itl_bounds, NBOUNDS(itl_bounds));
    hist_init(&e->m.e2e, req_bounds, NBOUNDS(req_bounds));
    hist_init(&e->m.queue, req_bounds, NBOUNDS(req_bounds));
    return 0;
}

int engine_open(const struct engine_config *cfg, const struct engine_model *model,
                const struct engine_sampler *sampler, struct engine **out, struct mf_err *err)
{
    struct engine *e;
    int rc;

    *out = NULL;
    e = calloc(1, sizeof *e);
    if (!e)
        return mf_err_set(err, MF_ENOMEM, "engine: out of memory");
    e->cfg = *cfg;
    e->model = *model;
    if (sampler)
        e->sampler = *sampler;
    e->next_id = 1;
    pthread_mutex_init(&e->mu, NULL);
    if (cond_init_monotonic(&e->work_cv) || cond_init_monotonic(&e->step_cv)) {
        free(e);
        return mf_err_set(err, MF_ENOMEM, "engine: cannot create condition variables");
    }
    rc = check_config(&e->cfg, model, err);
    if (!rc)
        rc = open_parts(e, err);
    if (!rc && pthread_create(&e->thread, NULL, step_main, e) != 0)
        rc = mf_err_set(err, MF_ENOMEM, "engine: cannot start the step thread");
    if (rc) {
        engine_close(e);
        return rc;
    }
    e->started = 1;
    *out = e;
    return 0;
}

void engine_close(struct engine *e)
{
    if (!e)
        return;
    if (e->started) {
        pthread_mutex_lock(&e->mu);
        e->stopping = 1;
        pthread_cond_signal(&e->work_cv);
        pthread_mutex_unlock(&e->mu);
        pthread_join(e->thread, NULL);
    }
    while (e->active)
        free_req(e, e->active);
    spec_close(e->spec); /* reaps what free_req retired */
    sched_close(e->s);
    kv_close(e->kv);
    free(e->lg_row0);
    free(e->lg_rows);
    free(e->n_emit);
    free(e->emit);
    free(e->cands);
    free(e->cand_req);
    free(e->lg_req);
    free(e->sampled);
    free(e->results);
    free(e->draws);
    free(e->ids);
    logits_free(e, e->logits);
    pthread_cond_destroy(&e->work_cv);
    pthread_cond_destroy(&e->step_cv);
    pthread_mutex_destroy(&e->mu);
    free(e);
}

/* ---------------------------------------------------------------- API */

/* What the model would reject inside a step, which would fail every other
 * request in that step too: refused here instead. */
static int check_input(const struct engine *e, const struct engine_request *rq, struct mf_err *err)
{
    const struct batch_lora *l = &rq->lora;

    for (int32_t i = 0; i < rq->n_prompt; i++) {
        if (rq->prompt[i] < 0 || rq->prompt[i] >= e->model.n_vocab)
            return mf_err_set(err, MF_EINVAL,
                              "prompt token %" PRId32 " at position %" PRId32
                              " is outside the vocabulary of %" PRId32,
                              rq->prompt[i], i, e->model.n_vocab);
    }
    if (l->n < 0 || l->n > BATCH_MAX_LORAS)
        return mf_err_set(err, MF_EINVAL, "%" PRId32 " adapters on one request (limit %d)", l->n,
                          BATCH_MAX_LORAS);
    for (int32_t i = 0; i < l->n; i++) {
        if (l->ids[i] < 0 || l->ids[i] >= e->model.n_loras || !isfinite(l->scales[i]))
            return mf_err_set(err, MF_EINVAL,
                              "adapter %" PRId32 " with scale %g: the model has %" PRId32
                              " adapters and scales must be finite",
                              l->ids[i], (double)l->scales[i], e->model.n_loras);
    }
    return 0;
}

static int new_req(const struct engine *e, const struct engine_request *rq, struct engine_req **out,
                   struct mf_err *err)
{
    struct engine_req *r;
    int rc = check_input(e, rq, err);

    *out = NULL;
    if (rc)
        return rc;
    r = calloc(1, sizeof *r);
    if (r)
        r->q = calloc((size_t)e->cfg.queue_events, sizeof *r->q);
    if (!r || !r->q || cond_init_monotonic(&r->cv)) {
        if (r)
            free(r->q);
        free(r);
        return mf_err_set(err, MF_ENOMEM, "request: out of memory");
    }
    r->ignore_eos = rq->ignore_eos;
    r->no_spec = rq->no_spec;
    r->script = rq->n_spec_script > 0 ? rq->spec_script : NULL;
    r->n_script = r->script ? rq->n_spec_script : 0;
    if (e->spec && !r->no_spec && !(r->spec = spec_req_new(e->spec))) {
        pthread_cond_destroy(&r->cv);
        free(r->q);
        free(r);
        return mf_err_set(err, MF_ENOMEM, "request: out of memory");
    }
    r->on_token = rq->on_token;
    r->notify = rq->notify;
    r->user = rq->user;
    r->t_arrival = now_s();
    r->t_sched = r->t_first = -1;
    *out = r;
    return 0;
}

int engine_submit(struct engine *e, const struct engine_request *rq, uint64_t *id,
                  struct mf_err *err)
{
    struct sched_submit in = {.prompt = rq->prompt,
                              .n_prompt = rq->n_prompt,
                              .max_tokens = rq->max_tokens,
                              .priority = rq->priority,
                              .lora = &rq->lora};
    struct engine_req *r;
    int rc = new_req(e, rq, &r, err);

    if (rc)
        return rc;
    in.user = r;
    pthread_mutex_lock(&e->mu);
    rc = e->stopping ? mf_err_set(err, MF_EBUSY, "server shutting down")
                     : sched_submit(e->s, &in, &r->sr, err);
    if (rc) {
        pthread_mutex_unlock(&e->mu);
        spec_req_free(e->spec, r->spec); /* holds no draft blocks yet */
        r->spec = NULL;
        free_req(e, r); /* not linked, no scheduler request, no params */
        return rc;
    }
    r->sampling = rq->sampling;
    r->id = e->next_id++;
    link_req(e, r);
    *id = r->id;
    pthread_cond_signal(&e->work_cv);
    pthread_mutex_unlock(&e->mu);
    return 0;
}

static int not_found(uint64_t id, struct mf_err *err)
{
    return mf_err_set(err, MF_ENOTFOUND, "no request %" PRIu64 " (finished or never submitted)",
                      id);
}

/* Locked: pops the oldest event; the final one retires the request. */
static void pop_event(struct engine *e, struct engine_req *r, struct engine_event *ev,
                      struct engine_summary *sum)
{
    *ev = r->q[r->q_head];
    r->q_head = (r->q_head + 1) % e->cfg.queue_events;
    r->q_n--;
    if (ev->finish != SCHED_FINISH_NONE) {
        if (sum)
            *sum = r->sum;
        free_req(e, r);
        return;
    }
    if (r->paused && r->q_n <= e->cfg.queue_events / 2) {
        set_paused(e, r, 0);
        pthread_cond_signal(&e->work_cv);
    }
}

int engine_next(struct engine *e, uint64_t id, int timeout_ms, struct engine_event *ev,
                struct engine_summary *sum, struct mf_err *err)
{
    struct engine_req *r;
    int rc = 0;

    pthread_mutex_lock(&e->mu);
    r = find_req(e, id);
    if (!r)
        rc = not_found(id, err);
    while (!rc && r->q_n == 0) {
        if (timeout_ms == 0 || wait_ms(&r->cv, &e->mu, timeout_ms) == ETIMEDOUT)
            rc = r->q_n ? 0 : mf_err_set(err, MF_EBUSY, "request %" PRIu64 ": no event yet", id);
    }
    if (!rc)
        pop_event(e, r, ev, sum);
    pthread_mutex_unlock(&e->mu);
    return rc;
}

static int end_request(struct engine *e, uint64_t id, enum sched_finish why, struct mf_err *err)
{
    struct engine_req *r;
    int rc = 0;

    pthread_mutex_lock(&e->mu);
    r = find_req(e, id);
    if (r)
        cancel_req(e, r, why);
    else
        rc = not_found(id, err);
    pthread_mutex_unlock(&e->mu);
    return rc;
}

int engine_cancel(struct engine *e, uint64_t id, struct mf_err *err)
{
    return end_request(e, id, SCHED_FINISH_CANCELLED, err);
}

int engine_stop(struct engine *e, uint64_t id, struct mf_err *err)
{
    return end_request(e, id, SCHED_FINISH_STOP, err);
}

int engine_release(struct engine *e, uint64_t id, struct mf_err *err)
{
    struct engine_req *r;

    pthread_mutex_lock(&e->mu);
    r = find_req(e, id);
    if (!r) {
        pthread_mutex_unlock(&e->mu);
        return not_found(id, err);
    }
    r->released = 1;
    if (r->finished) {
        free_req(e, r);
    } else {
        cancel_req(e, r, SCHED_FINISH_CANCELLED);
        /* In the running step the step thread may still call on_token with
         * r->user: wait for the step to end so the caller may free user. */
        while (e->in_step && find_req(e, id))
            pthread_cond_wait(&e->step_cv, &e->mu);
    }
    pthread_mutex_unlock(&e->mu);
    return 0;
}

void engine_metrics(struct engine *e, struct engine_metrics *m)
{
    pthread_mutex_lock(&e->mu);
    *m = e->m;
    sched_counts(e->s, &m->n_running, &m->n_waiting);
    kv_get_stats(e->kv, &m->kv);
    m->preemptions = sched_n_preemptions(e->s);
    pthread_mutex_unlock(&e->mu);
    m->kv_usage = m->kv.blocks_total ? (double)m->kv.blocks_used / m->kv.blocks_total : 0;
}

int32_t engine_eos_from_tok(const struct tok *t, int32_t *ids, int32_t max)
{
    int32_t n = 0;
    uint32_t n_vocab = tok_n_vocab(t);
    for (uint32_t id = 0; id < n_vocab; id++) {
        if (!tok_is_eog(t, (int32_t)id))
            continue;
        if (n < max)
            ids[n] = (int32_t)id;
        n++;
    }
    return n;
}

int engine_check(struct engine *e, struct mf_err *err)
{
    int rc;
    pthread_mutex_lock(&e->mu);
    rc = sched_check(e->s, err);
    pthread_mutex_unlock(&e->mu);
    return rc;
}

/* ---------------------------------------------------------------- adapters */

/* runtime/engine/sampler.h: the penalty history accepts what it has not seen. */
static void std_accept(struct sampler *s, const int32_t *history, int32_t n_history,
                       int32_t n_new)
{
    for (int32_t i = n_history - n_new; i < n_history; i++)
        sampler_accept(s, history[i]);
}

static int std_sample(void *ctx, void *params, float *logits, int32_t n_vocab,
                      const int32_t *history, int32_t n_history, int32_t n_new,
                      struct sampler_result *res, struct mf_err *err)
{
    struct sampler *s = params;
    if (!s)
        return mf_err_set(err, MF_EINVAL, "request has no sampler");
    std_accept(s, history, n_history, n_new);
    return sampler_sample(s, logits, res, err);
}

/* No sampler: the host path, which reports the error. */
static int std_draw_ok(void *ctx, void *params)
{
    return params && sampler_draw_ok(params);
}

static void std_plan(void *ctx, void *params, const int32_t *history, int32_t n_history,
                     int32_t n_new, struct sampler_draw *d)
{
    std_accept(params, history, n_history, n_new);
    sampler_draw_plan(params, d);
}

static void std_free(void *ctx, void *params)
{
    sampler_free(params);
}

static int std_dist(void *ctx, void *params, const float *logits, int32_t n_vocab,
                    const int32_t *history, int32_t n_history, int32_t n_new, int32_t *ids,
                    float *probs, int32_t *n, struct mf_err *err)
{
    struct sampler *s = params;
    size_t got = 0;
    int rc;
    if (!s)
        return mf_err_set(err, MF_EINVAL, "request has no sampler");
    std_accept(s, history, n_history, n_new);
    rc = sampler_probs(s, logits, ids, probs, &got, err);
    *n = (int32_t)got;
    return rc;
}

static double std_uniform(void *ctx, void *params)
{
    return sampler_uniform(params);
}

/* Verify steps give no logprobs. */
static int std_spec_ok(void *ctx, void *params)
{
    return params && !sampler_reports_logprobs(params);
}

const struct engine_sampler engine_sampler_std = {
    .ctx = NULL,
    .sample = std_sample,
    .free_params = std_free,
    .draw_ok = std_draw_ok,
    .plan = std_plan,
    .dist = std_dist,
    .uniform = std_uniform,
    .spec_ok = std_spec_ok,
};

int engine_text_init(struct engine_text *t, const struct tok *tok, unsigned flags,
                     const char *const *stops, size_t n, struct mf_err *err)
{
    memset(t, 0, sizeof *t);
    tok_stream_init(&t->ts, tok, flags);
    mf_buf_init(&t->piece, TOK_MAX_TOKEN_BYTES + 8);
    return stop_new(&t->stop, stops, n, err);
}

int engine_text_feed(struct engine_text *t, int32_t token, struct mf_buf *out, struct mf_err *err)
{
    struct tok_stream saved = t->ts;
    int rc;

    if (t->stopped)
        return 1;
    mf_buf_reset(&t->piece);
    rc = tok_stream_push(&t->ts, token, &t->piece, err);
    if (!rc && t->piece.len)
        rc = stop_feed(t->stop, t->piece.data, t->piece.len, out, err);
    if (rc < 0)
        t->ts = saved; /* stop_feed leaves its matcher unchanged on failure too */
    t->stopped = rc == 1;
    return rc;
}

int engine_text_finish(struct engine_text *t, struct mf_buf *out, struct mf_err *err)
{
    int rc;

    if (t->stopped)
        return 0;
    mf_buf_reset(&t->piece);
    rc = tok_stream_flush(&t->ts, &t->piece, err);
    if (!rc && t->piece.len)
        rc = stop_feed(t->stop, t->piece.data, t->piece.len, out, err);
    if (rc == 1) {
        t->stopped = 1;
        return 0;
    }
    return rc ? rc : stop_flush(t->stop, out, err);
}

void engine_text_fini(struct engine_text *t)
{
    stop_free(t->stop);
    t->stop = NULL;
    mf_buf_free(&t->piece);
}
