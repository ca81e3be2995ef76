/*
 * serve_int.h: what the server's own files share: one generation in flight
 * (struct serve_gen, serve_gen.c) and the wire-format writers of
 * serve_openai.c and serve_ollama.c that turn its events into bytes.
 */
#ifndef MFC_SERVE_INT_H
#define MFC_SERVE_INT_H

#include <pthread.h>

#include "runtime/engine/engine.h"
#include "runtime/serve/serve.h"

struct serve_choice {
    uint64_t id;               /* engine request id */
    int live;                  /* submitted and its final event not read yet */
    struct engine_text text;   /* detokenizer with the stop strings */
    struct mf_buf acc;         /* whole text (non-streaming responses) */
    struct mf_buf delta;       /* text released by the current event */
    json_t *lp;                /* non-streaming logprobs collected: chat content list or
                                  completions {tokens, token_logprobs, top_logprobs} */
    struct tok_ids out;        /* output token ids (Ollama generate's context) */
    size_t lp_off;             /* completions logprobs: text_offset of the next token */
    enum sched_finish finish;  /* NONE until the final event */
    struct engine_summary sum; /* filled by the final event */
};

struct serve_gen {
    struct serve *s;            /* borrowed */
    struct serve_req rq;        /* owned */
    char id[48];                /* "chatcmpl-..." */
    int64_t created;            /* unix seconds */
    int64_t t0;                 /* arrival, monotonic ns */
    struct tok_ids prompt;      /* the prompt tokens */
    int32_t max_tokens;         /* resolved allowance */
    int n;                      /* choices */
    struct serve_choice ch[SERVE_MAX_N];
    pthread_mutex_t mu;         /* guards pending */
    pthread_cond_t cv;          /* signalled by the engine's notify */
    int pending;                /* events may be waiting */
    int finals_sent;            /* the closing chunks are in wbuf */
    int failed;                 /* an engine error ended a choice */
    struct mf_err err;          /* that error */
    struct mf_buf wbuf;         /* bytes for the client not sent yet */
    size_t woff;                /* of wbuf, bytes sent */
    int fd;                     /* the connection's socket, for disconnect checks */
    atomic_int refs;            /* the HTTP response and the request context */
    atomic_int *active;         /* s->active, decremented on free */
};

/* Starts a generation for a parsed request (taking rq over): renders the
 * prompt, tokenizes, submits n engine requests. Returns 0 and *out, or an
 * MF_E* code with err and *status the HTTP status to answer (400, 404, 429,
 * 500, 503); rq is freed either way. An Ollama request with nothing to
 * generate gives *out with n == 0 (answered with done_reason "load"). */
int serve_gen_start(struct serve *s, struct serve_req *rq, struct serve_gen **out, int *status,
                    struct mf_err *err);
/* Tokenizes a request's prompt as a generation would (template, system,
 * messages) into out (tok_ids_free it); /tokenize uses it. Frees rq. */
int serve_gen_tokens(struct serve *s, struct serve_req *rq, struct tok_ids *out,
                     struct mf_err *err);
/* Waits up to timeout_ms for events and turns them into output: streamed
 * chunks into g->wbuf, or collected text for the whole response. Returns 1
 * when every choice has finished, 0 otherwise. */
int serve_gen_pump(struct serve_gen *g, int timeout_ms);
/* Appends the closing chunks of a stream ([DONE], Ollama's done object). */
void serve_gen_close_stream(struct serve_gen *g);
/* The whole JSON response of a finished non-streaming generation. */
json_t *serve_gen_response(struct serve_gen *g);
/* Drops one reference; the last releases unfinished engine requests (their
 * KV blocks free at once) and frees g. */
void serve_gen_unref(struct serve_gen *g);
/* Totals for the access log. */
void serve_gen_counts(const struct serve_gen *g, int *prompt, int *completion,
                      const char **finish);
/* Speculative proposals verified and accepted over its choices (finished
 * ones), for the access log. */
void serve_gen_spec_counts(const struct serve_gen *g, uint64_t *proposed, uint64_t *accepted);
/* "stop", "length", "abort", "error". */
const char *serve_finish_name(enum sched_finish f);
/* The model name a response echoes. */
const char *serve_gen_model(const struct serve_gen *g);

/* serve_openai.c */
void oai_chunk(struct serve_gen *g, int i, const struct engine_event *ev);
void oai_final_chunk(struct serve_gen *g, int i);
void oai_close(struct serve_gen *g);
void oai_collect_logprobs(struct serve_gen *g, int i, const struct engine_event *ev);
json_t *oai_response(struct serve_gen *g);
json_t *oai_error(const char *msg, const char *type, const char *param, const char *code);
json_t *oai_models(const struct serve *s);

/* serve_ollama.c */
void ollama_chunk(struct serve_gen *g, int i);
void ollama_close(struct serve_gen *g);
json_t *ollama_response(struct serve_gen *g);
json_t *ollama_tags(const struct serve *s, int ps);
json_t *ollama_show(const struct serve *s, const char *name);
/* RFC 3339 UTC time now with nanoseconds ("2024-05-01T10:00:00.123456789Z"). */
void ollama_time(char *buf, size_t cap);

/* serve_embed.c: the embeddings state, made by serve_load, freed by
 * serve_unload (open: MF_ENOMEM; close accepts a server without one). */
int serve_embed_open(struct serve *s, struct mf_err *err);
void serve_embed_close(struct serve *s);
/* Answers an embeddings request body for api: 0 with *out the response and
 * *status 200, or MF_E* with err and *status 400 (bad input, over-long
 * input: MF_ERANGE), 404 (unknown model) or 500. */
int serve_embed_handle(struct serve *s, enum serve_embed_api api, const char *body, size_t len,
                       json_t **out, int *status, struct mf_err *err);

/* Appends a compact JSON dump of v (stolen) to b, with prefix and suffix. */
void serve_put_json(struct mf_buf *b, const char *prefix, json_t *v, const char *suffix);

#endif
