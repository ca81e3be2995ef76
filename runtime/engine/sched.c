/*
 * sched.c: continuous-batching scheduler in the style of vLLM V1
 * (reference/vllm.md §2): no prefill or decode phase, each request has
 * n_computed tokens in the KV cache out of n_tokens known (prompt + output),
 * and every step hands out tokens so the two catch up, under a token budget.
 *
 * Owns the requests (their token streams and block tables, through kv.c),
 * the waiting queue and the running list. Does not own the KV pool (borrowed
 * from the engine), the model, sampling or the consumers.
 *
 * Request states:
 *   WAITING   --sched_schedule, admitted------------------>  RUNNING
 *   RUNNING   --sched_schedule, blocks ran out, newest---->  PREEMPTED
 *             (blocks freed, n_computed = 0, queued at the front; recomputes
 *              later, cheaply when its blocks are still in the prefix cache)
 *   PREEMPTED --sched_schedule, admitted------------------>  RUNNING
 *   RUNNING   --sched_update, max_tokens reached---------->  FINISHED (LENGTH)
 *   any       --sched_finish (stop, cancel, error)-------->  FINISHED
 *   FINISHED  --sched_free_req---------------------------->  (gone)
 *
 * Speculative decoding: the engine may give a running request proposals
 * (sched_set_draft), kept after its known tokens; a decode step then
 * computes its last token and the proposals that fit the budget, wanting
 * every row (a verify step), and sched_update_n counts only the accepted
 * positions as computed, trimming the blocks past them (kv_seq_trim).
 *
 * Invariants (sched_check): a request is on the waiting queue iff WAITING
 * or PREEMPTED, on the running list iff RUNNING; waiting and finished
 * requests hold no blocks; a running one holds blocks for its n_computed
 * tokens and n_computed < n_tokens <= n_prompt + max_tokens. A request that
 * could never fit (context length, whole cache) is refused at submit, so the
 * oldest running request can always make progress: no livelock.
 *
 * Prefill beside decode: a step's cost grows with its tokens, so a step
 * that carries a long prefill chunk slows every decoding stream in it (a
 * 512-token chunk beside 64 decodes halves their speed on a GPU). Decodes
 * are scheduled first, one token each; prompt tokens then share the rest
 * of max_num_batched_tokens, capped at max_prefill_tokens when the step
 * holds a decode (a step with none spends the whole budget: no stream is
 * waiting on it). So a decode step does at most n_decode +
 * max_prefill_tokens tokens of work, and a waiting or prefilling request
 * still advances every step the budget leaves room (the oldest first).
 */
#include "runtime/engine/sched.h"

#include <assert.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- types */

struct sched_req {
    uint64_t id;              /* submission number, from 1 */
    enum sched_state state;   /* see the state machine above */
    enum sched_finish finish; /* why it finished, SCHED_FINISH_NONE before */
    struct sched_req *prev;   /* waiting-queue neighbours */
    struct sched_req *next;   /* waiting-queue neighbours */
    struct sched_req *aprev;  /* s->all neighbours (every live request) */
    struct sched_req *anext;  /* s->all neighbours */
    int32_t *tokens;          /* owned: n_prompt + max_tokens entries */
    int32_t n_tokens;         /* known tokens: prompt + output */
    int32_t n_prompt;         /* prompt tokens */
    int32_t max_tokens;       /* output tokens allowed */
    int32_t n_computed;       /* leading tokens whose K/V is in the cache */
    int32_t priority;         /* lower runs first */
    uint64_t order;           /* admission stamp: the largest is the newest */
    int32_t n_cached;         /* prompt tokens hit in the prefix cache, first admission */
    int32_t n_preempt;        /* times preempted */
    int32_t admitted;         /* 1 once it has run */
    int32_t paused;           /* 1: skipped by sched_schedule */
    int32_t slot;             /* index in the step being built / run, -1 if none */
    int32_t n_draft;          /* proposals kept at tokens[n_tokens ..] (sched_set_draft) */
    int32_t draft_used;       /* of those, computed in the step being built / run */
    struct batch_lora lora;   /* adapters */
    struct kv_seq *seq;       /* owned: block table */
    void *user;               /* borrowed: the engine's request */
};

struct sched {
    struct sched_config cfg;     /* limits, max_model_len clamped to the cache */
    struct kv_cache *kv;         /* borrowed: the block pool */
    struct sched_req *wait_head; /* waiting queue, by priority then FCFS */
    struct sched_req *wait_tail; /* waiting queue tail */
    int32_t n_waiting;           /* requests on the waiting queue */
    struct sched_req **running;  /* owned: max_num_seqs entries, in admission order */
    int32_t n_running;           /* entries used */
    struct sched_req **snap;     /* owned: scratch copy of running for iteration */
    struct sched_req *all;       /* every live request, for sched_close and checks */
    struct sched_req **ent_req;  /* owned: max_num_seqs step entries (NULL: dropped) */
    int32_t *ent_n;              /* owned: tokens for each entry */
    int32_t n_ent;               /* entries in the current step */
    struct batch_seq *seqs;      /* owned: the current step's batch, compacted */
    int32_t n_logits;            /* want_logits sequences in the current step */
    int32_t n_rows;              /* logits rows in the current step */
    uint64_t next_id;            /* next request id */
    uint64_t next_order;         /* next admission stamp */
    uint64_t n_preemptions;      /* total preemptions */
};

/* State of one sched_schedule call. */
struct plan {
    int32_t budget;      /* tokens left this step */
    int32_t prefill;     /* prompt tokens left this step (<= budget once decodes are in) */
    int32_t n_decode;    /* decode entries so far */
    int32_t n_preempted; /* preemptions so far this step */
    int32_t spare_rows;  /* logits rows left for proposals (past one a sequence) */
    int32_t decodes_left; /* decodes not yet placed this step, each owed one token */
};

/* ---------------------------------------------------------------- queues */

static void wait_link(struct sched *s, struct sched_req *r, struct sched_req *before)
{
    r->next = before;
    r->prev = before ? before->prev : s->wait_tail;
    if (r->prev)
        r->prev->next = r;
    else
        s->wait_head = r;
    if (before)
        before->prev = r;
    else
        s->wait_tail = r;
    s->n_waiting++;
}

/* New requests go behind everyone of equal or better priority (FCFS). */
static void wait_push_back(struct sched *s, struct sched_req *r)
{
    struct sched_req *q = s->wait_tail;
    while (q && q->priority > r->priority)
        q = q->prev;
    wait_link(s, r, q ? q->next : s->wait_head);
}

/* Preempted requests go ahead of everyone of equal or worse priority. */
static void wait_push_front(struct sched *s, struct sched_req *r)
{
    struct sched_req *q = s->wait_head;
    while (q && q->priority < r->priority)
        q = q->next;
    wait_link(s, r, q);
}

static void wait_remove(struct sched *s, struct sched_req *r)
{
    if (r->prev)
        r->prev->next = r->next;
    else
        s->wait_head = r->next;
    if (r->next)
        r->next->prev = r->prev;
    else
        s->wait_tail = r->prev;
    r->prev = r->next = NULL;
    s->n_waiting--;
}

static void running_remove(struct sched *s, struct sched_req *r)
{
    for (int32_t i = 0; i < s->n_running; i++) {
        if (s->running[i] != r)
            continue;
        memmove(&s->running[i], &s->running[i + 1],
                (size_t)(s->n_running - i - 1) * sizeof s->running[0]);
        s->n_running--;
        return;
    }
    assert(!"running request not on the running list");
}

/* ---------------------------------------------------------------- lifecycle */

static int check_config(const struct sched_config *c, struct mf_err *err)
{
    if (c->max_num_seqs < 1 || c->max_num_seqs > 65536)
        return mf_err_set(err, MF_ERANGE, "max_num_seqs %" PRId32 " (allowed 1..65536)",
                          c->max_num_seqs);
    if (c->max_num_batched_tokens < 1)
        return mf_err_set(err, MF_ERANGE, "max_num_batched_tokens %" PRId32 " (must be >= 1)",
                          c->max_num_batched_tokens);
    if (c->max_model_len < 2)
        return mf_err_set(err, MF_ERANGE, "max_model_len %" PRId32 " (must be >= 2)",
                          c->max_model_len);
    if (c->max_waiting < 1)
        return mf_err_set(err, MF_ERANGE, "max_waiting %" PRId32 " (must be >= 1)", c->max_waiting);
    if (c->max_prefill_tokens < 0)
        return mf_err_set(err, MF_ERANGE,
                          "max_prefill_tokens %" PRId32 " (must be >= 0; 0: no cap)",
                          c->max_prefill_tokens);
    if (c->max_num_logits != 0 && c->max_num_logits < c->max_num_seqs)
        return mf_err_set(err, MF_ERANGE,
                          "max_num_logits %" PRId32 " (0, or at least max_num_seqs %" PRId32 ")",
                          c->max_num_logits, c->max_num_seqs);
    return 0;
}

int sched_open(struct sched **out, const struct sched_config *cfg, struct kv_cache *kv,
               struct mf_err *err)
{
    struct sched *s;
    struct kv_stats st;
    size_t n;
    int rc;

    *out = NULL;
    rc = check_config(cfg, err);
    if (rc)
        return rc;
    n = (size_t)cfg->max_num_seqs;
    s = calloc(1, sizeof *s);
    if (s) {
        s->running = calloc(n, sizeof *s->running);
        s->snap = calloc(n, sizeof *s->snap);
        s->ent_req = calloc(n, sizeof *s->ent_req);
        s->ent_n = calloc(n, sizeof *s->ent_n);
        s->seqs = calloc(n, sizeof *s->seqs);
    }
    if (!s || !s->running || !s->snap || !s->ent_req || !s->ent_n || !s->seqs) {
        sched_close(s);
        return mf_err_set(err, MF_ENOMEM, "scheduler for %zu sequences: out of memory", n);
    }
    s->cfg = *cfg;
    if (!s->cfg.max_num_logits)
        s->cfg.max_num_logits = cfg->max_num_seqs;
    s->kv = kv;
    kv_get_stats(kv, &st);
    /* vLLM refuses to start when max_model_len exceeds the cache; clamping
     * instead keeps a small-memory host serving shorter requests. */
    if (!s->cfg.window && (int64_t)st.blocks_total * KV_BLOCK_TOKENS < s->cfg.max_model_len)
        s->cfg.max_model_len = st.blocks_total * KV_BLOCK_TOKENS;
    s->next_id = 1;
    *out = s;
    return 0;
}

static void req_destroy(struct sched *s, struct sched_req *r)
{
    kv_seq_close(s->kv, r->seq);
    free(r->tokens);
    free(r);
}

void sched_close(struct sched *s)
{
    if (!s)
        return;
    while (s->all) {
        struct sched_req *r = s->all;
        s->all = r->anext;
        req_destroy(s, r);
    }
    free(s->running);
    free(s->snap);
    free(s->ent_req);
    free(s->ent_n);
    free(s->seqs);
    free(s);
}

/* ---------------------------------------------------------------- requests */

/* Fills *max_tokens with the output allowance, or says why it can't run. */
static int check_request(const struct sched *s, const struct sched_submit *in, int32_t *max_tokens,
                         struct mf_err *err)
{
    int32_t ctx = s->cfg.max_model_len;
    int32_t mt = in->max_tokens;

    if (in->n_prompt < 1)
        return mf_err_set(err, MF_EINVAL, "empty prompt: at least one token is needed");
    if (in->lora && (in->lora->n < 0 || in->lora->n > BATCH_MAX_LORAS))
        return mf_err_set(err, MF_EINVAL, "%" PRId32 " adapters on one request (limit %d)",
                          in->lora->n, BATCH_MAX_LORAS);
    if (in->n_prompt >= ctx)
        return mf_err_set(err, MF_ERANGE,
                          "prompt of %" PRId32 " tokens leaves no room to generate in a "
                          "context of %" PRId32 " tokens (model length or KV cache size)",
                          in->n_prompt, ctx);
    if (mt <= 0)
        mt = ctx - in->n_prompt;
    if ((int64_t)in->n_prompt + mt > ctx)
        return mf_err_set(err, MF_ERANGE,
                          "prompt of %" PRId32 " tokens plus max_tokens %" PRId32
                          " exceeds the context of %" PRId32
                          " tokens (model length or KV cache size)",
                          in->n_prompt, mt, ctx);
    if (s->n_waiting >= s->cfg.max_waiting)
        return mf_err_set(err, MF_EBUSY,
                          "server overloaded: %" PRId32 " requests waiting (limit %" PRId32
                          "); retry later",
                          s->n_waiting, s->cfg.max_waiting);
    *max_tokens = mt;
    return 0;
}

int sched_submit(struct sched *s, const struct sched_submit *in, struct sched_req **out,
                 struct mf_err *err)
{
    static const struct batch_lora no_lora;
    struct sched_req *r;
    int32_t mt = 0;
    int rc;

    *out = NULL;
    rc = check_request(s, in, &mt, err);
    if (rc)
        return rc;
    r = calloc(1, sizeof *r);
    if (!r)
        return mf_err_set(err, MF_ENOMEM, "request of %" PRId32 " tokens: out of memory",
                          in->n_prompt);
    r->lora = in->lora ? *in->lora : no_lora;
    /* The last output token is sampled but never computed: no KV slot. */
    rc = kv_seq_open(s->kv, &r->lora, in->n_prompt + mt - 1, &r->seq, err);
    r->tokens = rc ? NULL : malloc(((size_t)in->n_prompt + (size_t)mt) * sizeof *r->tokens);
    if (!r->tokens) {
        kv_seq_close(s->kv, r->seq);
        free(r);
        return rc ? rc
                  : mf_err_set(err, MF_ENOMEM,
                               "request of %" PRId32 " tokens: out of "
                               "memory",
                               in->n_prompt);
    }
    memcpy(r->tokens, in->prompt, (size_t)in->n_prompt * sizeof *r->tokens);
    r->id = s->next_id++;
    r->n_tokens = r->n_prompt = in->n_prompt;
    r->max_tokens = mt;
    r->priority = in->priority;
    r->slot = -1;
    r->user = in->user;
    r->state = SCHED_WAITING;
    r->anext = s->all;
    if (s->all)
        s->all->aprev = r;
    s->all = r;
    wait_push_back(s, r);
    *out = r;
    return 0;
}

void sched_finish(struct sched *s, struct sched_req *r, enum sched_finish why)
{
    assert(why != SCHED_FINISH_NONE);
    if (r->state == SCHED_FINISHED)
        return;
    if (r->state == SCHED_RUNNING)
        running_remove(s, r);
    else
        wait_remove(s, r);
    kv_seq_release(s->kv, r->seq);
    r->state = SCHED_FINISHED;
    r->finish = why;
}

void sched_free_req(struct sched *s, struct sched_req *r)
{
    if (!r)
        return;
    if (r->state != SCHED_FINISHED)
        sched_finish(s, r, SCHED_FINISH_CANCELLED);
    if (r->slot >= 0 && r->slot < s->n_ent && s->ent_req[r->slot] == r)
        s->ent_req[r->slot] = NULL; /* sched_update skips it */
    if (r->aprev)
        r->aprev->anext = r->anext;
    else
        s->all = r->anext;
    if (r->anext)
        r->anext->aprev = r->aprev;
    req_destroy(s, r);
}

void sched_set_paused(struct sched *s, struct sched_req *r, int paused)
{
    r->paused = paused != 0;
}

int32_t sched_set_draft(struct sched *s, struct sched_req *r, const int32_t *tokens, int32_t n)
{
    /* room: the draws after n accepted proposals still fit max_tokens */
    int32_t room = r->n_prompt + r->max_tokens - r->n_tokens - 1;

    if (r->state == SCHED_FINISHED || n < 0)
        n = 0;
    if (n > room)
        n = room > 0 ? room : 0;
    if (n)
        memcpy(r->tokens + r->n_tokens, tokens, (size_t)n * sizeof *tokens);
    r->n_draft = n;
    return n;
}

int32_t sched_req_n_draft(const struct sched_req *r)
{
    return r->n_draft;
}

/* ---------------------------------------------------------------- scheduling */

/* Prompt tokens this step can still take: the budget, capped once the
 * step holds a decode. */
static int32_t prefill_room(const struct sched *s, const struct plan *p)
{
    int32_t cap = s->cfg.max_prefill_tokens;
    if (p->n_decode == 0 || cap == 0)
        return p->budget;
    return p->prefill < p->budget ? p->prefill : p->budget;
}

/* Tokens r's decode computes this step: its last token and the proposals
 * the budget and the spare logits rows take. */
static int32_t decode_tokens(const struct plan *p, const struct sched_req *r)
{
    int32_t k = r->n_draft;

    if (k > p->budget - p->decodes_left) /* every later decode keeps its token */
        k = p->budget - p->decodes_left;
    if (k > p->spare_rows)
        k = p->spare_rows;
    return 1 + (k > 0 ? k : 0);
}

static void add_entry(struct sched *s, struct plan *p, struct sched_req *r, int32_t n, int decode)
{
    assert(s->n_ent < s->cfg.max_num_seqs && n >= 1 && n <= p->budget);
    s->ent_req[s->n_ent] = r;
    s->ent_n[s->n_ent] = n;
    r->slot = s->n_ent++;
    p->budget -= n;
    if (decode)
        p->n_decode++;
    else
        p->prefill -= n;
    /* past the known tokens: proposals (a decode's; see decode_tokens) */
    r->draft_used = r->n_computed + n - r->n_tokens;
    if (r->draft_used < 0)
        r->draft_used = 0;
    p->spare_rows -= r->draft_used;
}

/* The running request to give up: lowest priority, then newest (vLLM V1). */
static struct sched_req *pick_victim(const struct sched *s)
{
    struct sched_req *v = NULL;
    for (int32_t i = 0; i < s->n_running; i++) {
        struct sched_req *r = s->running[i];
        if (!v || r->priority > v->priority || (r->priority == v->priority && r->order > v->order))
            v = r;
    }
    return v;
}

/* RUNNING -> PREEMPTED: frees its blocks and takes back its tokens this step. */
static void preempt(struct sched *s, struct plan *p, struct sched_req *v)
{
    if (v->slot >= 0) { /* its tokens return; a preempted decode still counts as one */
        p->budget += s->ent_n[v->slot];
        if (v->n_tokens - v->n_computed > 1)
            p->prefill += s->ent_n[v->slot];
        p->spare_rows += v->draft_used;
        s->ent_req[v->slot] = NULL;
        v->slot = -1;
    }
    v->n_draft = v->draft_used = 0;
    running_remove(s, v);
    kv_seq_release(s->kv, v->seq);
    v->n_computed = 0;
    v->state = SCHED_PREEMPTED;
    v->n_preempt++;
    s->n_preemptions++;
    p->n_preempted++;
    wait_push_front(s, v);
}

/* Grows r's table to n_tokens positions, preempting until it fits. Returns
 * 1, or 0 when r itself was preempted (or failed: finished with ERROR). */
static int make_room(struct sched *s, struct plan *p, struct sched_req *r, int32_t n_tokens)
{
    for (;;) {
        int rc = kv_alloc(s->kv, r->seq, n_tokens, NULL);
        struct sched_req *v;
        if (rc == 0)
            return 1;
        if (rc != MF_EBUSY) {
            sched_finish(s, r, SCHED_FINISH_ERROR); /* table too small: a bug, not a hang */
            return 0;
        }
        v = pick_victim(s);
        preempt(s, p, v);
        if (v == r)
            return 0;
    }
}

/* Running requests in admission order: decodes (one token left) when
 * decodes is set, else prefill chunks. */
static void schedule_running(struct sched *s, struct plan *p, int decodes)
{
    int32_t n = s->n_running;

    memcpy(s->snap, s->running, (size_t)n * sizeof s->snap[0]);
    p->decodes_left = 0;
    for (int32_t i = 0; decodes && i < n; i++) {
        const struct sched_req *r = s->snap[i];
        p->decodes_left += r->state == SCHED_RUNNING && !r->paused && r->slot < 0 &&
                           r->n_tokens - r->n_computed == 1;
    }
    for (int32_t i = 0; i < n && p->budget > 0; i++) {
        struct sched_req *r = s->snap[i];
        int32_t left = r->n_tokens - r->n_computed;
        int32_t room = decodes ? p->budget : prefill_room(s, p);
        int32_t k = left == 1 ? decode_tokens(p, r) : left < room ? left : room;
        if (r->state != SCHED_RUNNING || r->paused || r->slot >= 0 || (left == 1) != decodes)
            continue;
        if (k < 1)
            break;
        if (decodes)
            p->decodes_left--;
        /* proposals never preempt anyone: without free blocks for them, none */
        if (k > left && kv_alloc(s->kv, r->seq, r->n_computed + k, NULL) != 0)
            k = left;
        if (make_room(s, p, r, r->n_computed + k))
            add_entry(s, p, r, k, decodes);
    }
}

/* WAITING/PREEMPTED -> RUNNING if its first chunk's blocks are there.
 * Returns 0 (changing nothing) when they are not. */
static int admit(struct sched *s, struct plan *p, struct sched_req *r)
{
    int32_t unused;
    int32_t hits = kv_probe_prefix(s->kv, r->seq, r->tokens, r->n_tokens, &unused);
    int32_t cached = hits * KV_BLOCK_TOKENS;
    int32_t left = r->n_tokens - cached;
    int32_t room = prefill_room(s, p);
    int32_t k = left < room ? left : room;

    if (KV_BLOCKS_FOR(cached + k) - hits > kv_n_allocatable(s->kv) - unused)
        return 0;
    kv_match_prefix(s->kv, r->seq, r->tokens, r->n_tokens);
    if (kv_alloc(s->kv, r->seq, cached + k, NULL)) {
        kv_seq_release(s->kv, r->seq); /* unreachable: capacity was checked */
        return 0;
    }
    if (!r->admitted)
        r->n_cached = cached;
    r->admitted = 1;
    r->n_computed = cached;
    r->order = s->next_order++;
    r->state = SCHED_RUNNING;
    wait_remove(s, r);
    s->running[s->n_running++] = r;
    add_entry(s, p, r, k, left == 1);
    return 1;
}

/* Head of the queue first; stops at the first that doesn't fit (FCFS). */
static void schedule_waiting(struct sched *s, struct plan *p)
{
    struct sched_req *r = s->wait_head;
    while (r && prefill_room(s, p) > 0 && s->n_running < s->cfg.max_num_seqs) {
        struct sched_req *next = r->next;
        if (!r->paused && !admit(s, p, r))
            break;
        r = next;
    }
}

/* Compacts the entries (preemption leaves holes) into the batch. */
static void build_batch(struct sched *s, struct sched_step *step)
{
    int32_t n = 0;

    memset(step, 0, sizeof *step);
    s->n_logits = s->n_rows = 0;
    for (int32_t i = 0; i < s->n_ent; i++) {
        struct sched_req *r = s->ent_req[i];
        struct batch_seq *q = &s->seqs[n];
        if (!r)
            continue;
        q->tokens = r->tokens + r->n_computed;
        q->n_tokens = s->ent_n[i];
        q->n_past = r->n_computed;
        q->block_table = kv_seq_blocks(r->seq);
        q->n_blocks = kv_seq_n_blocks(r->seq);
        q->lora = r->lora;
        q->want_logits =
            r->n_computed + s->ent_n[i] == r->n_tokens + r->draft_used ? 1 + r->draft_used : 0;
        s->n_logits += q->want_logits > 0;
        s->n_rows += q->want_logits;
        step->n_tokens += q->n_tokens;
        s->ent_req[n] = r;
        s->ent_n[n] = s->ent_n[i];
        r->slot = n++;
    }
    s->n_ent = n;
    step->batch.n_seqs = n;
    step->batch.seqs = s->seqs;
    step->reqs = s->ent_req;
    step->n_logits = s->n_logits;
    step->n_rows = s->n_rows;
}

static void forget_step(struct sched *s)
{
    for (int32_t i = 0; i < s->n_ent; i++) {
        if (s->ent_req[i])
            s->ent_req[i]->slot = -1;
    }
    s->n_ent = 0;
    s->n_logits = s->n_rows = 0;
}

void sched_schedule(struct sched *s, struct sched_step *step)
{
    struct plan p = {.budget = s->cfg.max_num_batched_tokens,
                     .prefill = s->cfg.max_prefill_tokens,
                     .spare_rows = s->cfg.max_num_logits - s->cfg.max_num_seqs};

    forget_step(s); /* a step never completed by sched_update is simply redone */
    schedule_running(s, &p, 1);
    schedule_running(s, &p, 0);
    /* vLLM V1 admits nobody in a step that had to preempt: the blocks are short. */
    if (p.n_preempted == 0)
        schedule_waiting(s, &p);
    build_batch(s, step);
    step->n_preempted = p.n_preempted;
}

/* One scheduled sequence computed its n tokens; out[0..n_out) are what it
 * produced (its accepted proposals, then its draw), n_out 0 when it wanted
 * no logits. */
static void advance(struct sched *s, struct sched_req *r, int32_t n, const int32_t *out,
                    int32_t n_out)
{
    /* the rejected proposals' positions are not computed */
    int32_t rejected = n_out ? r->draft_used + 1 - n_out : 0;

    r->n_computed += n - rejected;
    r->n_draft = r->draft_used = 0;
    for (int32_t i = 0; i < n_out && r->n_tokens - r->n_prompt < r->max_tokens; i++)
        r->tokens[r->n_tokens++] = out[i];
    kv_commit(s->kv, r->seq, r->tokens, r->n_computed);
    if (rejected) /* the blocks that held only rejected proposals */
        kv_seq_trim(s->kv, r->seq, r->n_computed);
    if (s->cfg.window) /* the next query, at n_computed, sees no block before these */
        kv_seq_drop(s->kv, r->seq,
                    (r->n_computed - s->cfg.window + 1) / KV_BLOCK_TOKENS);
    if (n_out && r->n_tokens - r->n_prompt >= r->max_tokens)
        sched_finish(s, r, SCHED_FINISH_LENGTH);
}

int sched_update(struct sched *s, const int32_t *sampled, int32_t n_sampled, struct mf_err *err)
{
    return sched_update_n(s, sampled, NULL, n_sampled, err);
}

int sched_update_n(struct sched *s, const int32_t *out, const int32_t *n_out, int32_t n_logits,
                   struct mf_err *err)
{
    int32_t j = 0;
    size_t at = 0;

    if (n_logits != s->n_logits)
        return mf_err_set(err, MF_EINVAL, "step wanted %" PRId32 " sampled tokens, got %" PRId32,
                          s->n_logits, n_logits);
    for (int32_t i = 0; n_out && i < s->n_ent; i++) {
        int32_t rows = s->seqs[i].want_logits;
        if (rows && (n_out[j] < 1 || n_out[j] > rows))
            return mf_err_set(err, MF_EINVAL,
                              "step sequence %" PRId32 " produced %" PRId32 " tokens from %" PRId32
                              " logits rows",
                              i, n_out[j], rows);
        j += rows > 0;
    }
    j = 0;
    for (int32_t i = 0; i < s->n_ent; i++) {
        struct sched_req *r = s->ent_req[i];
        int32_t c = s->seqs[i].want_logits ? (n_out ? n_out[j] : 1) : 0;
        if (r && r->state == SCHED_RUNNING)
            advance(s, r, s->ent_n[i], out + at, c);
        at += (size_t)s->seqs[i].want_logits; /* its tokens start at its first row */
        j += c > 0;
    }
    forget_step(s);
    return 0;
}

/* ---------------------------------------------------------------- inspection */

uint64_t sched_req_id(const struct sched_req *r)
{
    return r->id;
}

void *sched_req_user(const struct sched_req *r)
{
    return r->user;
}

enum sched_state sched_req_state(const struct sched_req *r)
{
    return r->state;
}

enum sched_finish sched_req_finish(const struct sched_req *r)
{
    return r->finish;
}

const int32_t *sched_req_tokens(const struct sched_req *r, int32_t *n_tokens)
{
    *n_tokens = r->n_tokens;
    return r->tokens;
}

int32_t sched_req_n_prompt(const struct sched_req *r)
{
    return r->n_prompt;
}

int32_t sched_req_n_computed(const struct sched_req *r)
{
    return r->n_computed;
}

int32_t sched_req_n_output(const struct sched_req *r)
{
    return r->n_tokens - r->n_prompt;
}

int sched_req_decoding(const struct sched_req *r)
{
    return r->state == SCHED_RUNNING && r->n_tokens - r->n_computed == 1;
}

int32_t sched_req_n_cached(const struct sched_req *r)
{
    return r->n_cached;
}

int32_t sched_req_n_preemptions(const struct sched_req *r)
{
    return r->n_preempt;
}

void sched_counts(const struct sched *s, int32_t *n_running, int32_t *n_waiting)
{
    *n_running = s->n_running;
    *n_waiting = s->n_waiting;
}

uint64_t sched_n_preemptions(const struct sched *s)
{
    return s->n_preemptions;
}

int sched_has_work(const struct sched *s)
{
    for (int32_t i = 0; i < s->n_running; i++) {
        if (!s->running[i]->paused)
            return 1;
    }
    for (const struct sched_req *r = s->wait_head; r; r = r->next) {
        if (!r->paused)
            return 1;
    }
    return 0;
}

/* One request's own invariants, given the list it was found on. */
static int check_req(const struct sched_req *r, int on_running, struct mf_err *err)
{
    int32_t held = kv_seq_n_blocks(r->seq) * KV_BLOCK_TOKENS;
    int waiting = r->state == SCHED_WAITING || r->state == SCHED_PREEMPTED;

    if (on_running ? r->state != SCHED_RUNNING : !waiting)
        return mf_err_set(err, MF_EINTEGRITY, "request %" PRIu64 " in state %d is on the %s", r->id,
                          (int)r->state, on_running ? "running list" : "waiting queue");
    if (r->n_tokens - r->n_prompt > r->max_tokens || r->n_computed >= r->n_tokens ||
        (on_running ? held < r->n_computed : held != 0 || r->n_computed != 0))
        return mf_err_set(err, MF_EINTEGRITY,
                          "request %" PRIu64 ": %" PRId32 " tokens, %" PRId32 " computed, %" PRId32
                          " token slots held",
                          r->id, r->n_tokens, r->n_computed, held);
    return 0;
}

int sched_check(const struct sched *s, struct mf_err *err)
{
    int32_t n_wait = 0;
    int32_t n_all = 0;
    int32_t n_done = 0;
    int rc = kv_check(s->kv, err);

    for (int32_t i = 0; !rc && i < s->n_running; i++)
        rc = check_req(s->running[i], 1, err);
    for (const struct sched_req *r = s->wait_head; !rc && r; r = r->next, n_wait++)
        rc = check_req(r, 0, err);
    for (const struct sched_req *r = s->all; !rc && r; r = r->anext, n_all++) {
        if (r->state != SCHED_FINISHED)
            continue;
        n_done++;
        if (kv_seq_n_blocks(r->seq) != 0)
            rc = mf_err_set(err, MF_EINTEGRITY, "finished request %" PRIu64 " holds blocks", r->id);
    }
    if (!rc && (n_wait != s->n_waiting || n_all != s->n_running + n_wait + n_done))
        rc = mf_err_set(err, MF_EINTEGRITY,
                        "%" PRId32 " requests, %" PRId32 " running, %" PRId32
                        " waiting (counted %" PRId32 "), %" PRId32 " finished",
                        n_all, s->n_running, n_wait, s->n_waiting, n_done);
    return rc;
}
