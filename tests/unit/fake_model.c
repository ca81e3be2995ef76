/*
 * fake_model.c: the deterministic fake model of fake_model.h, shared by
 * test_sched and test_engine. The next token is an FNV-1a hash of the whole
 * context and of the adapter tags read back from the paged arena, so it
 * depends on every token and block the scheduler and kv.c handed over.
 */
#include "tests/unit/fake_model.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

static uint32_t lora_tag(const struct batch_lora *l)
{
    uint32_t h = 2166136261u;
    for (int32_t i = 0; i < l->n; i++) {
        uint32_t bits;
        memcpy(&bits, &l->scales[i], sizeof bits);
        h = (h ^ (uint32_t)(l->ids[i] + 1)) * 16777619u;
        h = (h ^ bits) * 16777619u;
    }
    return h;
}

static int32_t next_from(const int32_t *ctx, int32_t n, uint32_t tag, int32_t n_vocab)
{
    uint64_t h = 1469598103934665603u ^ tag;
    for (int32_t i = 0; i < n; i++)
        h = (h ^ (uint32_t)ctx[i]) * 1099511628211u;
    h ^= h >> 29;
    return (int32_t)(h % (uint64_t)n_vocab);
}

int32_t fake_next_token(const int32_t *ctx, int32_t n, const struct batch_lora *lora,
                        int32_t n_vocab)
{
    return next_from(ctx, n, lora_tag(lora), n_vocab);
}

static uint64_t mix(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* The row from the context (arena values, -2 for poisoned slots) into row
 * (NULL: none); returns its argmax. */
static int32_t row_from(const int32_t *ctx, int32_t n, uint32_t tag, uint32_t salt, float soft,
                        int32_t n_vocab, float *row)
{
    int32_t best = next_from(ctx, n, tag ^ salt, n_vocab);
    uint64_t h = (uint64_t)best * 0x9e3779b97f4a7c15ull ^ salt;
    float top = -1.0f;

    if (soft <= 0) {
        if (row) {
            memset(row, 0, (size_t)n_vocab * sizeof *row);
            row[best] = 1.0f;
        }
        return best;
    }
    for (int32_t v = 0; v < n_vocab; v++) {
        float x = soft * (float)((double)(mix(h + (uint64_t)v) >> 11) * 0x1.0p-53);
        if (row)
            row[v] = x;
        if (x > top) {
            top = x;
            best = v;
        }
    }
    return best;
}

int32_t fake_logits(const int32_t *ctx, int32_t n, const struct batch_lora *lora, uint32_t salt,
                    float soft, int32_t n_vocab, float *row)
{
    return row_from(ctx, n, lora_tag(lora), salt, soft, n_vocab, row);
}

int fake_model_init(struct fake_model *m, int32_t n_blocks, int32_t max_ctx, int32_t n_vocab)
{
    size_t slots = (size_t)n_blocks * KV_BLOCK_TOKENS;
    memset(m, 0, sizeof *m);
    m->arena = malloc(slots * sizeof *m->arena);
    m->tags = calloc(slots, sizeof *m->tags);
    m->ctx = malloc((size_t)max_ctx * sizeof *m->ctx);
    if (!m->arena || !m->tags || !m->ctx) {
        fake_model_fini(m);
        return MF_ENOMEM;
    }
    memset(m->arena, 0xff, slots * sizeof *m->arena);
    m->n_blocks = n_blocks;
    m->max_ctx = max_ctx;
    m->n_vocab = n_vocab;
    return 0;
}

void fake_model_fini(struct fake_model *m)
{
    free(m->arena);
    free(m->tags);
    free(m->ctx);
    memset(m, 0, sizeof *m);
}

/* The arena slot of position p, or -1 when the table doesn't cover it. */
static int64_t slot_of(const struct fake_model *m, const struct batch_seq *q, int32_t p)
{
    int32_t bi = p / KV_BLOCK_TOKENS;
    if (bi >= q->n_blocks || q->block_table[bi] < 0 || q->block_table[bi] >= m->n_blocks)
        return -1;
    return (int64_t)q->block_table[bi] * KV_BLOCK_TOKENS + p % KV_BLOCK_TOKENS;
}

static int write_seq(struct fake_model *m, const struct batch_seq *q, uint32_t tag,
                     struct mf_err *err)
{
    if (q->n_tokens < 1 || q->n_past < 0 || q->n_past + q->n_tokens > m->max_ctx)
        return mf_err_set(err, MF_EINVAL, "sequence of %" PRId32 " new tokens at %" PRId32,
                          q->n_tokens, q->n_past);
    for (int32_t i = 0; i < q->n_tokens; i++) {
        int64_t s = slot_of(m, q, q->n_past + i);
        if (s < 0)
            return mf_err_set(err, MF_EINVAL, "position %" PRId32 " not covered by the table",
                              q->n_past + i);
        m->arena[s] = q->tokens[i];
        m->tags[s] = tag;
    }
    return 0;
}

/* Reads the first n positions back (a slot written under another adapter
 * poisons the context) and computes their row into row (NULL: none). */
static int32_t read_next(struct fake_model *m, const struct batch_seq *q, int32_t n, uint32_t tag,
                         float *row)
{
    for (int32_t p = 0; p < n; p++) {
        int64_t s = slot_of(m, q, p);
        m->ctx[p] = m->tags[s] == tag ? m->arena[s] : -2;
    }
    m->n_rows++;
    return row_from(m->ctx, n, tag, m->salt, m->soft, m->n_vocab, row);
}

int fake_model_step(struct fake_model *m, const struct batch *b, int32_t *next, struct mf_err *err)
{
    int32_t j = 0;
    m->n_steps++;
    if (m->fail_step && m->n_steps == m->fail_step)
        return mf_err_set(err, MF_EIO, "fake model: injected failure at step %" PRId64, m->n_steps);
    if (b->n_seqs > m->max_batch)
        m->max_batch = b->n_seqs;
    for (int32_t i = 0; i < b->n_seqs; i++) {
        int rc = write_seq(m, &b->seqs[i], lora_tag(&b->seqs[i].lora), err);
        if (rc)
            return rc;
        m->n_tokens += b->seqs[i].n_tokens;
    }
    for (int32_t i = 0; i < b->n_seqs; i++) {
        const struct batch_seq *q = &b->seqs[i];
        int32_t end = q->n_past + q->n_tokens;
        if (q->want_logits < 0 || q->want_logits > q->n_tokens)
            return mf_err_set(err, MF_EINVAL,
                              "sequence %" PRId32 " wants %" PRId32 " rows of %" PRId32 " tokens",
                              i, q->want_logits, q->n_tokens);
        for (int32_t r = q->want_logits; r > 0; r--, j++) {
            float *row = b->logits ? b->logits + (size_t)j * (size_t)m->n_vocab : NULL;
            int32_t t = read_next(m, q, end - r + 1, lora_tag(&q->lora), row);
            if (next)
                next[j] = t;
        }
    }
    return 0;
}

int32_t fake_reference(const int32_t *prompt, int32_t n_prompt, int32_t max_tokens,
                       const struct batch_lora *lora, int32_t n_vocab, int32_t eos, int32_t *out)
{
    int32_t *ctx = malloc(((size_t)n_prompt + (size_t)max_tokens) * sizeof *ctx);
    int32_t n = 0;
    if (!ctx)
        return -1;
    memcpy(ctx, prompt, (size_t)n_prompt * sizeof *ctx);
    while (n < max_tokens) {
        int32_t t = fake_next_token(ctx, n_prompt + n, lora, n_vocab);
        ctx[n_prompt + n] = t;
        out[n++] = t;
        if (t == eos)
            break;
    }
    free(ctx);
    return n;
}
