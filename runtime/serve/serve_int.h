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

#define SERVE_MAX_CALLS 16 /* calls of one answer streamed as they are written */

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
    int tmode;                 /* tools: 0 undecided, 1 a tool call (text held), 2 text */
    struct mf_buf held;        /* tools: text held back while undecided or a call */
    json_t *calls;             /* tools: the calls found at the end, or NULL */
    char *call_text;           /* tools: text before the calls (Hermes), or NULL */
    int streamed_calls;        /* forced calls streamed as written: headers sent */
    size_t streamed_args[SERVE_MAX_CALLS]; /* of each, argument bytes sent */
    char stream_ids[SERVE_MAX_CALLS][40];  /* of each, the id sent */
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
    struct gram *gram;          /* a reference, or NULL: the answer's grammar */
    const struct serve_toolfmt *tfmt; /* the template's tool-call syntax */
    int tools_on;               /* tools given and tool_choice not none */
};

/* serve_tools.c: how a template family writes tool calls. */
struct serve_toolfmt {
    const char *name;     /* "json", "llama3.1", "hermes", "mistral" */
    const char *open;     /* what starts the calls ("" : a JSON object or array) */
    const char *call_open, *call_close; /* around each call (Hermes) */
    const char *args_key; /* "arguments" or "parameters" */
    int multi;            /* several calls in one answer */
};
const struct serve_toolfmt *serve_toolfmt_for(const char *family);
/* GBNF for a forced call (tool_choice required or named) in syntax f. */
int serve_tools_grammar(const struct serve_req *rq, const struct serve_toolfmt *f, char **out,
                        struct mf_err *err);
/* Whether text p[0..n) (leading whitespace skipped) starts f's calls: 1
 * yes, -1 no, 0 not known yet. */
int serve_tools_starts(const struct serve_toolfmt *f, const char *p, size_t n);
/* The calls [{id, name, arguments}] in p[0..n), or NULL when it holds none
 * naming a tool of tools; *content: text before them (malloc'd) or NULL. */
json_t *serve_tools_parse(const struct serve_toolfmt *f, const char *p, size_t n,
                          const json_t *tools, char **content);
/* One call object in text being written (serve_tools_scan): offsets into it. */
struct serve_call_span {
    int depth;           /* JSON depth inside the object */
    int has_name;        /* the "name" string is complete: name, name_len */
    size_t name, name_len;
    int has_args;        /* "arguments"/"parameters" began at args */
    size_t args, args_end; /* args_end 0: not complete yet */
    int closed;          /* the call object closed */
};
int serve_tools_scan(const char *p, size_t n, struct serve_call_span *out, int max);
/* A new tool call id: "call_" and 24 random hex digits (cap >= 32). */
void serve_call_id(char *buf, size_t cap);
struct tmpl_value;
/* .Tools and a message's .ToolCalls for a template. NULL: out of memory. */
struct tmpl_value *serve_tools_value(const json_t *tools);
struct tmpl_value *serve_tool_calls_value(const json_t *calls);

/* serve_grammar.c: compiled grammars by GBNF text, shared by requests (a
 * few dozen, least recently used dropped). */
int serve_gcache_open(struct serve *s, struct mf_err *err);
void serve_gcache_close(struct serve *s);
/* A reference to the grammar for src (compiled on a miss); MF_EINVAL. */
int serve_gcache_get(struct serve *s, const char *src, struct gram **out, struct mf_err *err);

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
/* The streamed tool-call deltas of choice i (name once, arguments in pieces),
 * at the end of an answer found to be calls (tool_choice auto). */
void oai_tool_chunks(struct serve_gen *g, int i);
/* A forced call streamed as it is written: the deltas for what choice i's
 * held text adds (a name once complete, new argument bytes); final: the
 * rest. */
void oai_tool_progress(struct serve_gen *g, int i, int final);
void oai_collect_logprobs(struct serve_gen *g, int i, const struct engine_event *ev);
json_t *oai_response(struct serve_gen *g);
json_t *oai_error(const char *msg, const char *type, const char *param, const char *code);
json_t *oai_models(const struct serve *s);

/* serve_ollama.c */
void ollama_chunk(struct serve_gen *g, int i);
void ollama_close(struct serve_gen *g);
/* The streamed message carrying choice 0's tool calls. */
void ollama_tool_chunk(struct serve_gen *g);
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
