/*
 * fuzz_sched.c: libFuzzer target for the scheduler and the KV block manager
 * (runtime/engine/sched.c, runtime/engine/kv.c), driven through the paged fake model.
 *
 * The input is a program: seven header bytes pick the pool size, batching
 * limits, hash width (down to 1 bit, so every lookup collides), the
 * prefill cap beside decodes and the logits rows; then each
 * byte group is an op: submit (prompt over a tiny alphabet, so prefixes
 * repeat), step, cancel, cancel inside a step, free, pause/unpause, clear the
 * prefix cache, a step with proposals (some right, then wrong ones: a
 * greedy verify keeps the right ones and rolls the rest back).
 * sched_check (and so kv_check) runs after every op, each plain step keeps
 * every decode, advances prompts and honours the prefill cap (check_step),
 * every
 * request that finishes by length must equal its solo output, and at the end
 * no block may be in use. Any violation traps. Seeds in corpus/sched/.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/engine/sched.h"
#include "tests/unit/fake_model.c" /* one translation unit: the runner builds one file */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define VOCAB 64
#define MAX_REQS 48
#define MAX_PROMPT 80
#define MAX_ROWS 64 /* max_num_logits, at most */

struct prog {
    const uint8_t *p;   /* next input byte */
    const uint8_t *end; /* end of input */
};

struct world {
    struct kv_cache *kv;
    struct sched *s;
    struct fake_model fm;
    struct sched_req *reqs[MAX_REQS]; /* NULL once freed */
    struct batch_lora lora[MAX_REQS]; /* each request's adapters */
    int paused[MAX_REQS];             /* 1 while paused */
    int n_reqs;                       /* slots used */
    int32_t budget;                   /* max_num_batched_tokens */
    int32_t prefill_cap;              /* max_prefill_tokens */
};

static unsigned byte(struct prog *pr)
{
    return pr->p < pr->end ? *pr->p++ : 0;
}

static void must(int ok)
{
    if (!ok)
        __builtin_trap();
}

static void check(const struct world *w)
{
    struct mf_err err;
    must(sched_check(w->s, &err) == 0);
}

/* A request that finished by length produced exactly its solo output. */
static void verify(const struct world *w, int i)
{
    const struct sched_req *r = w->reqs[i];
    int32_t want[MAX_PROMPT + 64];
    int32_t n;
    const int32_t *t = sched_req_tokens(r, &n);
    int32_t np = sched_req_n_prompt(r);
    int32_t no = sched_req_n_output(r);

    if (sched_req_finish(r) != SCHED_FINISH_LENGTH)
        return;
    must(fake_reference(t, np, no, &w->lora[i], VOCAB, -1, want) == no);
    must(memcmp(t + np, want, (size_t)no * sizeof want[0]) == 0);
}

static void op_submit(struct world *w, struct prog *pr)
{
    int32_t prompt[MAX_PROMPT];
    unsigned shape = byte(pr);
    struct sched_submit in = {.prompt = prompt};
    struct mf_err err;
    int i = w->n_reqs;

    if (i >= MAX_REQS)
        return;
    in.n_prompt = (int32_t)(byte(pr) % MAX_PROMPT) + (shape & 1 ? 0 : 1); /* 0 is refused */
    for (int32_t k = 0; k < in.n_prompt; k++)
        prompt[k] = (int32_t)((shape >> 1) + (unsigned)(k / 7)) % 3;
    in.max_tokens = (int32_t)(byte(pr) % 64);
    in.priority = (int32_t)(shape >> 6);
    memset(&w->lora[i], 0, sizeof w->lora[i]);
    w->lora[i].n = (shape >> 4) & 1;
    w->lora[i].scales[0] = 1.0f;
    in.lora = &w->lora[i];
    if (sched_submit(w->s, &in, &w->reqs[i], &err) == 0)
        w->n_reqs++;
}

/* Prefill beside decode (sched.c): with nothing preempted, every running
 * request that had one token left is in the step with it (when the budget
 * holds them all); prompt work of
 * running requests advances when the budget has room past those (and any
 * proposals they carry); and
 * beside such a decode the prompts take at most max_prefill_tokens. */
static void check_step(const struct world *w, const struct sched_step *st,
                       const int32_t *left_before)
{
    int32_t n_last = 0, dec_tokens = 0, prompt = 0;
    int work = 0, advanced = 0;

    if (st->n_preempted)
        return;
    for (int k = 0; k < w->n_reqs; k++)
        n_last += left_before[k] == 1;
    for (int k = 0; k < w->n_reqs; k++) {
        struct sched_req *r = w->reqs[k];
        int32_t in_step = 0;
        for (int32_t i = 0; r && i < st->batch.n_seqs; i++)
            if (st->reqs[i] == r)
                in_step = st->batch.seqs[i].n_tokens;
        if (left_before[k] == 1) {
            must(in_step >= 1 || n_last > w->budget); /* no decode waits (a left-over
                                                        proposal may ride along) */
            dec_tokens += in_step;
        } else if (left_before[k] > 1) {
            work = 1;
            advanced |= in_step > 0;
        }
        /* prompt tokens: every entry but a request's last known token */
        if (in_step && sched_req_n_prompt(r) + sched_req_n_output(r) - sched_req_n_computed(r) > 1)
            prompt += in_step;
    }
    if (work && dec_tokens < w->budget)
        must(advanced); /* prompts advance past the decodes and their proposals */
    if (n_last && w->prefill_cap)
        must(prompt <= w->prefill_cap);
}

/* One step; cancel_at >= 0 cancels that batch entry while the step runs. */
static void op_step(struct world *w, int cancel_at)
{
    struct sched_step st;
    int32_t next[MAX_ROWS];
    int32_t left_before[MAX_REQS];
    struct mf_err err;

    /* tokens left of each running, unpaused request (0: none, or not running) */
    for (int k = 0; k < w->n_reqs; k++) {
        struct sched_req *r = w->reqs[k];
        left_before[k] = 0;
        if (r && sched_req_state(r) == SCHED_RUNNING && !w->paused[k])
            left_before[k] =
                sched_req_n_prompt(r) + sched_req_n_output(r) - sched_req_n_computed(r);
    }
    sched_schedule(w->s, &st);
    check(w);
    check_step(w, &st, left_before);
    if (st.batch.n_seqs == 0)
        return;
    must(fake_model_step(&w->fm, &st.batch, next, &err) == 0);
    if (cancel_at >= 0 && cancel_at < st.batch.n_seqs)
        sched_finish(w->s, st.reqs[cancel_at], SCHED_FINISH_CANCELLED);
    must(sched_update(w->s, next, st.n_logits, &err) == 0);
}

/* Proposals for every decoding request (mode's count of right tokens, then
 * wrong ones), one step, and the greedy rule: a proposal stays while it is
 * the argmax of its row; the row after the last kept one gives the draw. */
static void op_spec_step(struct world *w, struct prog *pr)
{
    unsigned mode = byte(pr);
    int32_t d[16], next[MAX_ROWS], out[MAX_ROWS], n_out[MAX_ROWS];
    struct sched_step st;
    struct mf_err err;

    for (int i = 0; i < w->n_reqs; i++) {
        struct sched_req *r = w->reqs[i];
        int32_t n, good = (int32_t)(mode % 5), bad = (int32_t)((mode >> 3) % 4);
        if (!r || !sched_req_decoding(r))
            continue;
        const int32_t *t = sched_req_tokens(r, &n);
        must(fake_reference(t, n, good, &w->lora[i], VOCAB, -1, d) == good);
        for (int32_t k = good; k < good + bad; k++)
            d[k] = (k ? d[k - 1] : t[n - 1]) * 5 % VOCAB;
        must(sched_set_draft(w->s, r, d, good + bad) <= good + bad);
    }
    sched_schedule(w->s, &st);
    check(w);
    if (st.batch.n_seqs == 0)
        return;
    must(st.n_rows <= MAX_ROWS);
    must(fake_model_step(&w->fm, &st.batch, next, &err) == 0);
    for (int32_t i = 0, j = 0, row = 0; i < st.batch.n_seqs; i++) {
        const struct batch_seq *q = &st.batch.seqs[i];
        int32_t a = 0;
        if (!q->want_logits)
            continue;
        while (a < q->want_logits - 1 && q->tokens[1 + a] == next[row + a]) {
            out[row + a] = q->tokens[1 + a];
            a++;
        }
        out[row + a] = next[row + a];
        n_out[j++] = a + 1;
        row += q->want_logits;
    }
    must(sched_update_n(w->s, out, n_out, st.n_logits, &err) == 0);
}

static struct sched_req *pick(struct world *w, struct prog *pr, int *slot)
{
    if (w->n_reqs == 0)
        return NULL;
    *slot = (int)(byte(pr) % (unsigned)w->n_reqs);
    return w->reqs[*slot];
}

static void run_op(struct world *w, struct prog *pr)
{
    unsigned op = byte(pr) % 9;
    int slot = 0;
    struct sched_req *r;

    switch (op) {
    case 0:
        op_submit(w, pr);
        break;
    case 1:
    case 2:
        op_step(w, -1);
        break;
    case 3:
        op_step(w, (int)(byte(pr) % 8));
        break;
    case 4:
        r = pick(w, pr, &slot);
        if (r)
            sched_finish(w->s, r, SCHED_FINISH_CANCELLED);
        break;
    case 5:
        r = pick(w, pr, &slot);
        if (r && sched_req_state(r) == SCHED_FINISHED) {
            verify(w, slot);
            sched_free_req(w->s, r);
            w->reqs[slot] = NULL;
        }
        break;
    case 6:
        r = pick(w, pr, &slot);
        if (r && sched_req_state(r) != SCHED_FINISHED) {
            w->paused[slot] = byte(pr) & 1;
            sched_set_paused(w->s, r, w->paused[slot]);
        }
        break;
    case 7:
        kv_clear_prefix_cache(w->kv);
        break;
    default:
        op_spec_step(w, pr);
        break;
    }
    check(w);
}

/* Unpauses everything, runs to completion (bounded), then frees it all. */
static void drain(struct world *w)
{
    struct kv_stats st;
    for (int i = 0; i < w->n_reqs; i++) {
        if (w->reqs[i] && sched_req_state(w->reqs[i]) != SCHED_FINISHED) {
            sched_set_paused(w->s, w->reqs[i], 0);
            w->paused[i] = 0;
        }
    }
    for (int n = 0; sched_has_work(w->s); n++) {
        must(n < 100000); /* the oldest request always progresses: no livelock */
        op_step(w, -1);
        check(w);
    }
    for (int i = 0; i < w->n_reqs; i++) {
        if (!w->reqs[i])
            continue;
        must(sched_req_state(w->reqs[i]) == SCHED_FINISHED);
        verify(w, i);
        sched_free_req(w->s, w->reqs[i]);
    }
    check(w);
    kv_get_stats(w->kv, &st);
    must(st.blocks_used == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct prog pr = {data, data + size};
    struct kv_config kc;
    struct sched_config sc;
    struct world w;
    struct mf_err err;

    memset(&w, 0, sizeof w);
    memset(&sc, 0, sizeof sc);
    memset(&kc, 0, sizeof kc);
    kc.n_blocks = 2 + (int32_t)(byte(&pr) % 40);
    kc.hash_bits = (int32_t)(byte(&pr) % 4); /* 0: full width; 1..3: constant collisions */
    sc.max_num_seqs = 1 + (int32_t)(byte(&pr) % 8);
    sc.max_num_batched_tokens = 1 + (int32_t)(byte(&pr) % 96);
    sc.max_waiting = 1 + (int32_t)(byte(&pr) % 16);
    sc.max_model_len = MAX_PROMPT + 64;
    sc.max_prefill_tokens = (int32_t)(byte(&pr) % 40); /* 0: no cap */
    sc.max_num_logits = sc.max_num_seqs + (int32_t)(byte(&pr) % (MAX_ROWS - 8));
    w.budget = sc.max_num_batched_tokens;
    w.prefill_cap = sc.max_prefill_tokens;
    if (kv_open(&w.kv, &kc, &err) || sched_open(&w.s, &sc, w.kv, &err) ||
        fake_model_init(&w.fm, kc.n_blocks, sc.max_model_len, VOCAB)) {
        sched_close(w.s);
        kv_close(w.kv);
        return 0;
    }
    while (pr.p < pr.end)
        run_op(&w, &pr);
    drain(&w);
    sched_close(w.s);
    kv_close(w.kv);
    fake_model_fini(&w.fm);
    return 0;
}
