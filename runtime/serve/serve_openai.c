/*
 * serve_openai.c: the OpenAI wire format (as OpenAI's API reference and
 * vLLM's server write it): chat.completion(.chunk) and text_completion
 * objects, SSE framing ("data: {...}\n\n", closed by "data: [DONE]\n\n"),
 * usage, logprobs in the chat and the legacy completions shapes, model
 * lists, and error objects {"error": {message, type, param, code}}.
 */
#include "runtime/serve/serve_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/model/model.h"
#include "text/tokenizer.h"

json_t *oai_error(const char *msg, const char *type, const char *param, const char *code)
{
    return json_pack("{s:{s:s, s:s, s:o, s:o}}", "error", "message", msg, "type", type, "param",
                     param ? json_string(param) : json_null(), "code",
                     code ? json_string(code) : json_null());
}

static int is_chat(const struct serve_gen *g)
{
    return g->rq.api == SERVE_OAI_CHAT;
}

static json_t *usage(const struct serve_gen *g)
{
    int p, c;
    const char *f;
    serve_gen_counts(g, &p, &c, &f);
    return json_pack("{s:i, s:i, s:i}", "prompt_tokens", p, "completion_tokens", c,
                     "total_tokens", p + c);
}

static json_t *token_text(const struct serve_gen *g, int32_t tok)
{
    const char *p = "";
    size_t n = 0;
    json_t *v;
    if (tok_piece(g->s->tok, tok, TOK_RENDER_SPECIAL, &p, &n, NULL))
        n = 0;
    v = json_stringn(p, n); /* NULL for a piece that ends inside a character */
    return v ? v : json_string("\xef\xbf\xbd");
}

static json_t *token_bytes(const struct serve_gen *g, int32_t tok)
{
    const char *p = "";
    size_t n = 0;
    json_t *a = json_array();
    if (tok_piece(g->s->tok, tok, TOK_RENDER_SPECIAL, &p, &n, NULL))
        n = 0;
    for (size_t i = 0; a && i < n; i++)
        json_array_append_new(a, json_integer((unsigned char)p[i]));
    return a;
}

static json_t *lp_value(float lp)
{
    return json_real(isfinite(lp) ? lp : -9999.0);
}

/* Chat: one entry of logprobs.content. */
static json_t *chat_lp_entry(const struct serve_gen *g, const struct engine_event *ev)
{
    json_t *top = json_array();
    for (int k = 0; k < ev->n_top && k < g->rq.top_logprobs; k++)
        json_array_append_new(top, json_pack("{s:o, s:o, s:o}", "token",
                                             token_text(g, ev->top[k].token), "logprob",
                                             lp_value(ev->top[k].logprob), "bytes",
                                             token_bytes(g, ev->top[k].token)));
    return json_pack("{s:o, s:o, s:o, s:o}", "token", token_text(g, ev->token), "logprob",
                     lp_value(ev->logprob), "bytes", token_bytes(g, ev->token), "top_logprobs",
                     top);
}

/* Completions: appends to {tokens, token_logprobs, top_logprobs, text_offset};
 * offsets count the bytes of the tokens before, as vLLM's do. */
static void cmpl_lp_add(const struct serve_gen *g, struct serve_choice *c, json_t *lp,
                        const struct engine_event *ev)
{
    const char *piece = "";
    size_t plen = 0;
    if (tok_piece(g->s->tok, ev->token, 0, &piece, &plen, NULL))
        plen = 0;
    json_t *top = json_object();
    for (int k = 0; k < ev->n_top && k < g->rq.top_logprobs; k++) {
        json_t *t = token_text(g, ev->top[k].token);
        json_object_set_new(top, json_string_value(t), lp_value(ev->top[k].logprob));
        json_decref(t);
    }
    json_array_append_new(json_object_get(lp, "tokens"), token_text(g, ev->token));
    json_array_append_new(json_object_get(lp, "token_logprobs"), lp_value(ev->logprob));
    json_array_append_new(json_object_get(lp, "top_logprobs"), top);
    json_array_append_new(json_object_get(lp, "text_offset"), json_integer((json_int_t)c->lp_off));
    c->lp_off += plen;
}

static json_t *cmpl_lp_new(void)
{
    return json_pack("{s:[], s:[], s:[], s:[]}", "tokens", "token_logprobs", "top_logprobs",
                     "text_offset");
}

void oai_collect_logprobs(struct serve_gen *g, int i, const struct engine_event *ev)
{
    struct serve_choice *c = &g->ch[i];
    if (!c->lp)
        c->lp = is_chat(g) ? json_array() : cmpl_lp_new();
    if (is_chat(g))
        json_array_append_new(c->lp, chat_lp_entry(g, ev));
    else
        cmpl_lp_add(g, c, c->lp, ev);
}

static json_t *chunk_head(const struct serve_gen *g)
{
    json_t *o = json_pack("{s:s, s:s, s:I, s:s, s:s, s:[]}", "id", g->id, "object",
                          is_chat(g) ? "chat.completion.chunk" : "text_completion", "created",
                          (json_int_t)g->created, "model", serve_gen_model(g),
                          "system_fingerprint", "mfc", "choices");
    if (g->rq.include_usage)
        json_object_set_new(o, "usage", json_null());
    return o;
}

void oai_chunk(struct serve_gen *g, int i, const struct engine_event *ev)
{
    struct serve_choice *c = &g->ch[i];
    json_t *o = chunk_head(g);
    json_t *lp = json_null();
    json_t *ch;
    if (g->rq.logprobs && ev->token >= 0) {
        json_decref(lp);
        if (is_chat(g)) {
            lp = json_pack("{s:[o]}", "content", chat_lp_entry(g, ev));
        } else {
            lp = cmpl_lp_new();
            cmpl_lp_add(g, c, lp, ev);
        }
    }
    if (is_chat(g)) {
        json_t *delta = json_object();
        if (!c->acc.len) /* the first chunk names the role */
            json_object_set_new(delta, "role", json_string("assistant"));
        json_object_set_new(delta, "content",
                            json_stringn_nocheck(c->delta.data ? c->delta.data : "", c->delta.len));
        ch = json_pack("{s:i, s:o, s:o, s:n}", "index", i, "delta", delta, "logprobs", lp,
                       "finish_reason");
    } else {
        ch = json_pack("{s:i, s:o, s:o, s:n}", "index", i, "text",
                       json_stringn_nocheck(c->delta.data ? c->delta.data : "", c->delta.len),
                       "logprobs", lp, "finish_reason");
    }
    json_array_append_new(json_object_get(o, "choices"), ch);
    mf_buf_append(&c->acc, "x", 1, NULL); /* marks "text was sent" for the role rule */
    serve_put_json(&g->wbuf, "data: ", o, "\n\n");
}

/* finish_reason: "tool_calls" when the answer was tool calls. */
static const char *finish_reason(const struct serve_choice *c)
{
    if (c->calls || (c->streamed_calls && c->finish != SCHED_FINISH_LENGTH))
        return "tool_calls";
    return c->finish == SCHED_FINISH_LENGTH ? "length" : "stop";
}

/* arguments as OpenAI sends them: a string of JSON */
static json_t *args_text(const json_t *call)
{
    char *a = json_dumps(json_object_get(call, "arguments"), JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_t *v = json_string(a ? a : "{}");
    free(a);
    return v;
}

static json_t *tool_calls_json(const struct serve_choice *c)
{
    json_t *out = json_array();
    size_t k;
    const json_t *call;
    json_array_foreach (c->calls, k, call)
        json_array_append_new(out, json_pack("{s:O, s:s, s:{s:O, s:o}}", "id",
                                             json_object_get(call, "id"), "type", "function",
                                             "function", "name", json_object_get(call, "name"),
                                             "arguments", args_text(call)));
    return out;
}

/* One chunk whose delta carries one tool call piece. */
static void tool_delta(struct serve_gen *g, int i, json_t *call_delta, int first)
{
    struct serve_choice *c = &g->ch[i];
    json_t *o = chunk_head(g);
    json_t *delta = json_object();
    if (first && !c->acc.len)
        json_object_set_new(delta, "role", json_string("assistant"));
    if (first)
        json_object_set_new(delta, "content", json_null());
    json_object_set_new(delta, "tool_calls", json_pack("[o]", call_delta));
    json_array_append_new(json_object_get(o, "choices"),
                          json_pack("{s:i, s:o, s:n, s:n}", "index", i, "delta", delta,
                                    "logprobs", "finish_reason"));
    serve_put_json(&g->wbuf, "data: ", o, "\n\n");
}

void oai_tool_chunks(struct serve_gen *g, int i)
{
    struct serve_choice *c = &g->ch[i];
    size_t k;
    const json_t *call;
    if (c->call_text && c->call_text[0]) {
        mf_buf_reset(&c->delta);
        mf_buf_puts(&c->delta, c->call_text, NULL);
        struct engine_event ev = {.token = -1};
        oai_chunk(g, i, &ev);
        mf_buf_reset(&c->delta);
    }
    json_array_foreach (c->calls, k, call) {
        /* the name once, with the id; then the arguments in pieces of 32 bytes */
        tool_delta(g, i,
                   json_pack("{s:i, s:O, s:s, s:{s:O, s:s}}", "index", (int)k, "id",
                             json_object_get(call, "id"), "type", "function", "function", "name",
                             json_object_get(call, "name"), "arguments", ""),
                   k == 0);
        json_t *a = args_text(call);
        const char *p = json_string_value(a);
        size_t n = json_string_length(a);
        for (size_t off = 0; off < n;) {
            size_t len = n - off < 32 ? n - off : 32;
            while (off + len < n && ((unsigned char)p[off + len] & 0xC0) == 0x80)
                len++; /* whole UTF-8 characters */
            tool_delta(g, i,
                       json_pack("{s:i, s:{s:s%}}", "index", (int)k, "function", "arguments",
                                 p + off, len),
                       0);
            off += len;
        }
        json_decref(a);
    }
    mf_buf_append(&c->acc, "x", 1, NULL);
}

void oai_tool_progress(struct serve_gen *g, int i, int final)
{
    struct serve_choice *c = &g->ch[i];
    struct serve_call_span sp[SERVE_MAX_CALLS];
    const char *p = c->held.data ? c->held.data : "";
    int n = serve_tools_scan(p, c->held.len, sp, SERVE_MAX_CALLS);
    (void)final;
    for (int k = 0; k < n && k < SERVE_MAX_CALLS; k++) {
        if (k >= c->streamed_calls) {
            if (!sp[k].has_name || (k > 0 && !sp[k - 1].closed))
                break; /* calls go out in order, each once its name is whole */
            json_t *name = json_stringn(p + sp[k].name, sp[k].name_len);
            serve_call_id(c->stream_ids[k], sizeof c->stream_ids[k]);
            tool_delta(g, i,
                       json_pack("{s:i, s:s, s:s, s:{s:o, s:s}}", "index", k, "id",
                                 c->stream_ids[k], "type", "function", "function", "name",
                                 name ? name : json_string(""), "arguments", ""),
                       k == 0);
            c->streamed_calls = k + 1;
            c->streamed_args[k] = 0;
        }
        if (!sp[k].has_args)
            continue;
        size_t end = sp[k].args_end ? sp[k].args_end : c->held.len;
        size_t from = sp[k].args + c->streamed_args[k];
        if (end > from) {
            tool_delta(g, i,
                       json_pack("{s:i, s:{s:s%}}", "index", k, "function", "arguments", p + from,
                                 end - from),
                       0);
            c->streamed_args[k] += end - from;
        }
    }
    if (c->streamed_calls)
        mf_buf_append(&c->acc, "x", 1, NULL);
}

void oai_final_chunk(struct serve_gen *g, int i)
{
    struct serve_choice *c = &g->ch[i];
    json_t *o = chunk_head(g);
    const char *fr = finish_reason(c);
    json_t *ch;
    if (is_chat(g)) {
        json_t *delta = json_object();
        if (!c->acc.len)
            json_object_set_new(delta, "role", json_string("assistant"));
        ch = json_pack("{s:i, s:o, s:n, s:s}", "index", i, "delta", delta, "logprobs",
                       "finish_reason", fr);
    } else {
        ch = json_pack("{s:i, s:s, s:n, s:s}", "index", i, "text", "", "logprobs",
                       "finish_reason", fr);
    }
    json_array_append_new(json_object_get(o, "choices"), ch);
    serve_put_json(&g->wbuf, "data: ", o, "\n\n");
}

void oai_close(struct serve_gen *g)
{
    if (g->failed) { /* an engine error mid-stream: an error event, as vLLM sends */
        serve_put_json(&g->wbuf, "data: ",
                       oai_error(g->err.msg[0] ? g->err.msg : "generation failed", "server_error",
                                 NULL, "internal_error"),
                       "\n\n");
    }
    if (g->rq.include_usage) {
        json_t *o = chunk_head(g);
        json_object_set_new(o, "usage", usage(g));
        serve_put_json(&g->wbuf, "data: ", o, "\n\n");
    }
    mf_buf_puts(&g->wbuf, "data: [DONE]\n\n", NULL);
}

json_t *oai_response(struct serve_gen *g)
{
    json_t *choices = json_array();
    for (int i = 0; i < g->n; i++) {
        struct serve_choice *c = &g->ch[i];
        const char *fr = finish_reason(c);
        json_t *text = json_stringn_nocheck(c->acc.data ? c->acc.data : "", c->acc.len);
        if (c->calls) {
            json_decref(text);
            text = c->call_text ? json_string(c->call_text) : json_null();
        }
        json_t *lp = json_null();
        if (g->rq.logprobs) {
            json_decref(lp);
            lp = is_chat(g) ? json_pack("{s:o}", "content", c->lp ? json_incref(c->lp)
                                                                    : json_array())
                            : (c->lp ? json_incref(c->lp) : cmpl_lp_new());
        }
        if (is_chat(g)) {
            json_t *msg = json_pack("{s:s, s:o}", "role", "assistant", "content", text);
            if (c->calls)
                json_object_set_new(msg, "tool_calls", tool_calls_json(c));
            json_array_append_new(choices,
                                  json_pack("{s:i, s:o, s:o, s:s}", "index", i, "message", msg,
                                            "logprobs", lp, "finish_reason", fr));
        }
        else
            json_array_append_new(choices,
                                  json_pack("{s:i, s:o, s:o, s:s}", "index", i, "text", text,
                                            "logprobs", lp, "finish_reason", fr));
    }
    return json_pack("{s:s, s:s, s:I, s:s, s:s, s:o, s:o}", "id", g->id, "object",
                     is_chat(g) ? "chat.completion" : "text_completion", "created",
                     (json_int_t)g->created, "model", serve_gen_model(g), "system_fingerprint",
                     "mfc", "choices", choices, "usage", usage(g));
}

json_t *oai_models(const struct serve *s)
{
    json_t *data = json_array();
    json_array_append_new(data, json_pack("{s:s, s:s, s:I, s:s, s:s, s:n, s:i}", "id",
                                          s->cfg.model_name, "object", "model", "created",
                                          (json_int_t)s->started, "owned_by", "mfc", "root",
                                          s->cfg.model_path, "parent", "max_model_len",
                                          (int)s->n_ctx));
    for (int i = 0; i < s->n_adapters; i++)
        if (s->adapters[i].name)
            json_array_append_new(
                data, json_pack("{s:s, s:s, s:I, s:s, s:s, s:s, s:i}", "id", s->adapters[i].name,
                                "object", "model", "created", (json_int_t)s->started, "owned_by",
                                "mfc", "root", s->cfg.adapters[i].path, "parent",
                                s->cfg.model_name, "max_model_len", (int)s->n_ctx));
    return json_pack("{s:s, s:o}", "object", "list", "data", data);
}
