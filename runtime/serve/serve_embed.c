/*
 * serve_embed.c: mfc-serve's embeddings: OpenAI POST /v1/embeddings, Ollama
 * POST /api/embed and the legacy POST /api/embeddings (bodies parsed by
 * serve_embed_req.c; wire formats in docs/api.md).
 *
 * What an embedding is here: the input's tokens run through the model's
 * forward pass; the residual stream after the last layer and output_norm
 * (llama.cpp's "result_norm", the row llama.cpp's embeddings read) is
 * averaged over every token of the input, BOS included: llama.cpp's
 * LLAMA_POOLING_TYPE_MEAN. /v1/embeddings and /api/embed then divide by the
 * L2 norm (as Ollama does); the legacy /api/embeddings returns the mean as
 * is. Texts are tokenized with the model's special tokens (BOS when the
 * GGUF says add_bos), token arrays are used as given.
 *
 * Where it runs: not through the engine's scheduler, which only produces
 * logits, but on a second CPU backend instance (runtime/engine/backend.h's
 * hidden-state step) over the same mapped weights, created at the first
 * embeddings request with its own KV arena of one context's blocks and its
 * own thread pool. Generations therefore never wait for, share KV blocks
 * with or get preempted by an embedding; the two only share CPU time.
 * Embeddings requests run one at a time (mu); the input is fed in chunks of
 * MFC_MAX_BATCH_TOKENS tokens, each chunk attending to the ones before it.
 */
#include "runtime/serve/serve_int.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "runtime/engine/backend.h"
#include "runtime/model/model.h"
#include "text/tokenizer.h"

struct serve_embedder {
    pthread_mutex_t mu;   /* one embeddings request at a time; guards the rest */
    struct backend *be;   /* owned; NULL until the first request */
    int32_t n_blocks;     /* KV blocks of be's arena */
    int32_t chunk;        /* tokens per step */
    int32_t *table;       /* owned: block ids 0..n_blocks-1 */
    float *hidden;        /* owned: chunk * n_embd floats, one step's rows */
    double *acc;          /* owned: n_embd running sums */
};

int serve_embed_open(struct serve *s, struct mf_err *err)
{
    struct serve_embedder *e = calloc(1, sizeof *e);
    if (!e || pthread_mutex_init(&e->mu, NULL)) {
        free(e);
        return mf_err_set(err, MF_ENOMEM, "out of memory for the embeddings state");
    }
    s->emb = e;
    return 0;
}

void serve_embed_close(struct serve *s)
{
    struct serve_embedder *e = s->emb;
    if (!e)
        return;
    backend_free(e->be);
    free(e->table);
    free(e->hidden);
    free(e->acc);
    pthread_mutex_destroy(&e->mu);
    free(e);
    s->emb = NULL;
}

/* Creates the CPU backend and its arena (under mu). *load_ns gets the time
 * it took. */
static int embedder_ready(struct serve *s, int64_t *load_ns, struct mf_err *err)
{
    struct serve_embedder *e = s->emb;
    const struct model_hparams *hp = &s->m->hp;
    int64_t t0 = serve_now_ns();
    int32_t blocks = (s->n_ctx + KV_BLOCK_TOKENS - 1) / KV_BLOCK_TOKENS;
    struct backend_config bc = {.n_threads = s->cfg.threads, .max_seqs = 1};
    int rc;

    if (e->be)
        return 0;
    e->chunk = s->cfg.max_batch_tokens > 0 ? s->cfg.max_batch_tokens : 512;
    if (e->chunk > s->n_ctx)
        e->chunk = s->n_ctx;
    bc.max_tokens = e->chunk;
    bc.kv_type = BACKEND_KV_F16;
    bc.kv_bytes = (uint64_t)blocks * backend_kv_block_bytes(s->m, bc.kv_type);
    e->table = calloc((size_t)blocks, sizeof *e->table);
    e->hidden = calloc((size_t)e->chunk * (size_t)hp->n_embd, sizeof *e->hidden);
    e->acc = calloc((size_t)hp->n_embd, sizeof *e->acc);
    if (!e->table || !e->hidden || !e->acc)
        rc = mf_err_set(err, MF_ENOMEM, "out of memory for the embeddings buffers");
    else if (!(rc = backend_create(&cpu_backend_ops, s->m, &bc, &e->be, err)))
        rc = backend_kv_alloc(e->be, &e->n_blocks, err);
    if (rc) {
        backend_free(e->be);
        e->be = NULL;
        return mf_err_prefix(err, "embeddings backend");
    }
    for (int32_t i = 0; i < blocks; i++)
        e->table[i] = i;
    mf_log_info(&s->log, "embeddings: CPU backend with %d KV blocks, %d tokens per step",
                (int)e->n_blocks, (int)e->chunk);
    *load_ns = serve_now_ns() - t0;
    return 0;
}

/* Mean of the final normed hidden state over toks[0..n) into out (n_embd
 * floats), L2-normalised when norm is set. Caller holds mu, be is ready and
 * 1 <= n <= n_blocks * KV_BLOCK_TOKENS. */
static int embed_tokens(struct serve *s, const int32_t *toks, int32_t n,
                        const struct batch_lora *lora, int norm, float *out, struct mf_err *err)
{
    struct serve_embedder *e = s->emb;
    int32_t E = s->m->hp.n_embd;
    double ss = 0;

    memset(e->acc, 0, (size_t)E * sizeof *e->acc);
    for (int32_t off = 0; off < n; off += e->chunk) {
        int32_t k = n - off < e->chunk ? n - off : e->chunk;
        struct batch_seq sq = {
            .tokens = toks + off,
            .n_tokens = k,
            .n_past = off,
            .block_table = e->table,
            .n_blocks = (off + k + KV_BLOCK_TOKENS - 1) / KV_BLOCK_TOKENS,
            .lora = *lora,
        };
        struct batch b = {.n_seqs = 1, .seqs = &sq, .hidden = e->hidden};
        int rc = backend_step(e->be, &b, err);
        if (rc)
            return rc;
        for (int32_t t = 0; t < k; t++)
            for (int32_t d = 0; d < E; d++)
                e->acc[d] += e->hidden[(size_t)t * (size_t)E + (size_t)d];
    }
    for (int32_t d = 0; d < E; d++) {
        e->acc[d] /= n;
        ss += e->acc[d] * e->acc[d];
    }
    ss = norm && ss > 0 ? 1.0 / sqrt(ss) : 1.0;
    for (int32_t d = 0; d < E; d++)
        out[d] = (float)(e->acc[d] * ss);
    return 0;
}

/* The token ids of input i into ids: a text is tokenized, a token list
 * checked against the vocabulary. Over-long inputs are cut to n_ctx when
 * truncate is set, else refused. */
static int input_tokens(struct serve *s, const struct serve_embed_req *rq, size_t i,
                        struct tok_ids *ids, struct mf_err *err)
{
    const struct serve_embed_in *in = &rq->in[i];
    const char *key = rq->api == SERVE_EMBED_LEGACY ? "prompt" : "input";
    char what[48];
    int rc;

    if (rq->n_in > 1)
        snprintf(what, sizeof what, "%s[%zu]", key, i);
    else
        snprintf(what, sizeof what, "%s", key);
    if (in->text) {
        rc = tok_encode(s->tok, in->text, in->text_len, TOK_ADD_SPECIAL | TOK_PARSE_SPECIAL, ids,
                        err);
        if (rc)
            return mf_err_prefix(err, "'%s'", what);
        if (ids->n == 0)
            return mf_err_set(err, MF_EINVAL, "'%s' has no tokens: there is nothing to embed",
                              what);
    } else {
        for (size_t j = 0; j < in->n_tokens; j++) {
            if (in->tokens[j] >= s->m->hp.n_vocab)
                return mf_err_set(err, MF_EINVAL,
                                  "'%s[%zu]' is token %d; the vocabulary has %d tokens", what, j,
                                  (int)in->tokens[j], (int)s->m->hp.n_vocab);
            if ((rc = tok_ids_push(ids, in->tokens[j], err)))
                return rc;
        }
    }
    if (ids->n > (size_t)s->n_ctx) {
        if (!rq->truncate || rq->api != SERVE_EMBED_OLLAMA)
            return mf_err_set(err, MF_ERANGE,
                              "'%s' has %zu tokens, more than the context length of %d; "
                              "shorten it%s",
                              what, ids->n, (int)s->n_ctx,
                              rq->api == SERVE_EMBED_OLLAMA ? " or leave 'truncate' true" : "");
        ids->n = (size_t)s->n_ctx; /* Ollama's truncate: keep the start */
    }
    return 0;
}

/* base64 of n little-endian float32 values (OpenAI's encoding_format). */
static json_t *base64_floats(const float *v, int32_t n)
{
    size_t bytes = (size_t)n * sizeof(float);
    unsigned char *raw = malloc(bytes ? bytes : 1), *enc = malloc(4 * ((bytes + 2) / 3) + 1);
    json_t *j = NULL;
    if (raw && enc) {
        for (int32_t i = 0; i < n; i++) { /* x86 and arm64 are little-endian; spell it out */
            uint32_t u;
            memcpy(&u, &v[i], sizeof u);
            for (int b = 0; b < 4; b++)
                raw[(size_t)i * 4 + (size_t)b] = (unsigned char)(u >> (8 * b));
        }
        int len = EVP_EncodeBlock(enc, raw, (int)bytes);
        j = len >= 0 ? json_stringn((const char *)enc, (size_t)len) : NULL;
    }
    free(raw);
    free(enc);
    return j;
}

static json_t *float_array(const float *v, int32_t n)
{
    json_t *a = json_array();
    for (int32_t i = 0; a && i < n; i++)
        if (json_array_append_new(a, json_real(v[i]))) {
            json_decref(a);
            return NULL;
        }
    return a;
}

/* The response for rq given the vectors vecs (n_in rows of E floats). */
static json_t *response(struct serve *s, const struct serve_embed_req *rq, const float *vecs,
                        int32_t E, size_t tokens, int64_t total_ns, int64_t load_ns)
{
    const char *name = rq->model && rq->model[0] ? rq->model : s->cfg.model_name;
    json_t *list = json_array(), *v;

    if (!list)
        return NULL;
    if (rq->api == SERVE_EMBED_LEGACY) {
        json_decref(list);
        v = float_array(vecs, E);
        return v ? json_pack("{s:o}", "embedding", v) : NULL;
    }
    for (size_t i = 0; i < rq->n_in; i++) {
        const float *row = vecs + i * (size_t)E;
        json_t *x = rq->api == SERVE_EMBED_OAI && rq->base64 ? base64_floats(row, E)
                                                             : float_array(row, E);
        if (x && rq->api == SERVE_EMBED_OAI)
            x = json_pack("{s:s, s:I, s:o}", "object", "embedding", "index", (json_int_t)i,
                          "embedding", x);
        if (!x || json_array_append_new(list, x)) {
            json_decref(list);
            return NULL;
        }
    }
    if (rq->api == SERVE_EMBED_OAI)
        return json_pack("{s:s, s:o, s:s, s:{s:I, s:I}}", "object", "list", "data", list, "model",
                         name, "usage", "prompt_tokens", (json_int_t)tokens, "total_tokens",
                         (json_int_t)tokens);
    return json_pack("{s:s, s:o, s:I, s:I, s:I}", "model", name, "embeddings", list,
                     "total_duration", (json_int_t)total_ns, "load_duration", (json_int_t)load_ns,
                     "prompt_eval_count", (json_int_t)tokens);
}

int serve_embed_handle(struct serve *s, enum serve_embed_api api, const char *body, size_t len,
                       json_t **out, int *status, struct mf_err *err)
{
    struct serve_embed_req rq;
    struct batch_lora lora;
    struct tok_ids *ids = NULL;
    float *vecs = NULL;
    int32_t E = s->m->hp.n_embd;
    int64_t t0 = serve_now_ns(), load_ns = 0;
    size_t tokens = 0;
    int rc;

    *out = NULL;
    *status = 400;
    if ((rc = serve_embed_parse(api, body, len, &rq, err)))
        goto done;
    if ((rc = serve_pick_model(s, rq.model, &lora, err))) {
        *status = 404;
        goto done;
    }
    if (rq.dimensions >= 0 && rq.dimensions != E) {
        rc = mf_err_set(err, MF_EINVAL,
                        "'dimensions' is %lld but this model's embeddings have %d; mfc does not "
                        "shorten them",
                        (long long)rq.dimensions, (int)E);
        goto done;
    }
    ids = calloc(rq.n_in, sizeof *ids);
    vecs = calloc(rq.n_in * (size_t)E, sizeof *vecs);
    if (!ids || !vecs) {
        rc = mf_err_set(err, MF_ENOMEM, "out of memory for %zu embeddings", rq.n_in);
        *status = 500;
        goto done;
    }
    for (size_t i = 0; i < rq.n_in; i++) {
        tok_ids_init(&ids[i], SERVE_EMBED_MAX_TOKENS);
        if ((rc = input_tokens(s, &rq, i, &ids[i], err)))
            goto done;
        tokens += ids[i].n;
    }
    *status = 500;
    pthread_mutex_lock(&s->emb->mu);
    rc = embedder_ready(s, &load_ns, err);
    for (size_t i = 0; !rc && i < rq.n_in; i++)
        rc = embed_tokens(s, ids[i].v, (int32_t)ids[i].n, &lora, api != SERVE_EMBED_LEGACY,
                          vecs + i * (size_t)E, err);
    pthread_mutex_unlock(&s->emb->mu);
    if (rc)
        goto done;
    if (!(*out = response(s, &rq, vecs, E, tokens, serve_now_ns() - t0, load_ns))) {
        rc = mf_err_set(err, MF_ENOMEM, "out of memory building the embeddings response");
        goto done;
    }
    *status = 200;
done:
    for (size_t i = 0; ids && i < rq.n_in; i++)
        tok_ids_free(&ids[i]);
    free(ids);
    free(vecs);
    serve_embed_req_free(&rq);
    return rc;
}
