/*
 * serve.c: mfc-serve's HTTP layer on libmicrohttpd: the daemon, routing,
 * bearer auth, body and concurrency limits, streaming responses, disconnect
 * handling, the access log and the SIGTERM drain. Connections come from the
 * front door (serve_door.h), which has checked their heads; every response
 * closes its connection, so every request passes the door.
 *
 * Threading: MHD runs one thread per connection, so a handler may block:
 * a stream's content reader waits on the engine (serve_gen_pump) and a
 * non-streaming request generates inside the handler. Both poll the socket
 * for a hang-up while they wait; a client that goes away gets its engine
 * requests released (serve_gen_unref -> engine_release) and their KV blocks
 * freed. Errors are OpenAI-shaped except under /api/, where Ollama's
 * {"error": "..."} is used.
 */
#include "runtime/serve/serve_int.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <microhttpd.h>

#include "common/json.h"
#include "config.h"
#include "runtime/serve/serve_door.h"
#include "runtime/model/model.h"
#include "text/tokenizer.h"

#define STREAM_BLOCK 4096
#define PUMP_MS 50
#define RESPONSE_IDLE_S 600 /* a response's writes may stall this long (a slow reader) */

/* One HTTP request, from its headers to MHD's completion callback. */
struct reqctx {
    struct serve *s;     /* borrowed: the server */
    int64_t t0;          /* arrival, monotonic ns (the access log's ms) */
    char method[12];     /* "GET", "POST", ... (cut) */
    char path[160];      /* URL path (cut) */
    int status;          /* the status queued; 0: none yet (499 in the log) */
    int ollama;          /* errors in Ollama's shape */
    struct mf_buf body;  /* the request body */
    int too_big;         /* more than max_body arrived */
    int in;              /* the whole request arrived */
    struct serve_gen *g; /* a reference, or NULL */
};

/* ---- responses ---- */

/* Queues a copy of data[0..len) with status; records the status in rc.
 * MHD_NO when MHD refuses (the connection is then closed). */
static enum MHD_Result queue(struct MHD_Connection *c, struct reqctx *rc, int status,
                             const char *type, const char *data, size_t len, int retry)
{
    struct MHD_Response *r =
        MHD_create_response_from_buffer(len, (void *)data, MHD_RESPMEM_MUST_COPY);
    if (!r)
        return MHD_NO;
    MHD_add_response_header(r, "Content-Type", type);
    MHD_add_response_header(r, "Connection", "close"); /* the next request passes the door */
    if (retry)
        MHD_add_response_header(r, "Retry-After", "1");
    if (status == 401)
        MHD_add_response_header(r, "WWW-Authenticate", "Bearer");
    rc->status = status;
    enum MHD_Result ret = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result send_json(struct MHD_Connection *c, struct reqctx *rc, int status,
                                 json_t *v)
{
    char *s = v ? json_dumps(v, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(v);
    if (!s)
        return queue(c, rc, 500, "application/json", "{\"error\":\"out of memory\"}", 25, 0);
    enum MHD_Result ret = queue(c, rc, status, "application/json", s, strlen(s), 0);
    free(s);
    return ret;
}

/* The field a message names ('messages[1].role' -> messages[1].role), or
 * null. Only a message that starts with the field names one: a JSON syntax
 * error quotes the body's text ("near 'x'"), which is no parameter. */
static json_t *param_of(const char *msg)
{
    const char *a = msg[0] == '\'' ? msg : NULL, *b = a ? strchr(a + 1, '\'') : NULL;
    return a && b && b > a + 1 ? json_stringn(a + 1, (size_t)(b - a - 1)) : json_null();
}

static enum MHD_Result send_error(struct MHD_Connection *c, struct reqctx *rc, int status,
                                  const char *code, const char *msg)
{
    json_t *v;
    if (rc->ollama) {
        v = json_pack("{s:s}", "error", msg);
    } else {
        const char *type = status == 429   ? "rate_limit_error"
                           : status >= 500 ? "server_error"
                                           : "invalid_request_error";
        v = oai_error(msg, type, NULL, code);
        if (v && status == 400)
            json_object_set_new(json_object_get(v, "error"), "param", param_of(msg));
    }
    if (!v)
        return MHD_NO;
    char *s = json_dumps(v, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(v);
    if (!s)
        return MHD_NO;
    enum MHD_Result ret = queue(c, rc, status, "application/json", s, strlen(s), status == 429);
    free(s);
    return ret;
}

/* ---- auth ---- */

/* 1 when the request carries "Authorization: Bearer <cfg.api_key>". The
 * comparison touches every key byte whatever matches, so its time does not
 * tell how much of a guess was right. */
static int key_ok(const struct serve *s, struct MHD_Connection *c)
{
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    const char *key = s->cfg.api_key;
    size_t kn = strlen(key), hn;
    unsigned char diff = 0;
    if (!h || strncasecmp(h, "Bearer ", 7) != 0)
        return 0;
    h += 7;
    hn = strlen(h);
    /* constant time in the key's length: every byte compared whatever matches */
    for (size_t i = 0; i < kn; i++)
        diff |= (unsigned char)(key[i] ^ (i < hn ? h[i] : 0));
    return diff == 0 && hn == kn;
}

/* ---- disconnects ---- */

/* 1 when the client has closed its side (EOF or an error on the socket);
 * pipelined request bytes waiting to be read do not count. Never blocks. */
static int peer_gone(int fd)
{
    struct pollfd p = {.fd = fd, .events = POLLIN | POLLRDHUP};
    if (fd < 0)
        return 0;
    if (poll(&p, 1, 0) <= 0)
        return 0;
    if (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL))
        return 1;
    if (p.revents & POLLIN) { /* readable: data (pipelining) or EOF */
        char b;
        return recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
    }
    return 0;
}

static int conn_fd(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    return ci ? (int)ci->connect_fd : -1;
}

/* ---- streaming ---- */

/* MHD's content reader for SSE/NDJSON: hands out g->wbuf, pumping the
 * engine (blocking up to PUMP_MS at a time) when it is empty; ends the
 * stream after the closing chunks, or with an error when the client has
 * gone (stream_free then releases the engine requests). */
static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    struct serve_gen *g = cls;
    for (;;) {
        if (g->woff < g->wbuf.len) {
            size_t n = g->wbuf.len - g->woff;
            if (n > max)
                n = max;
            memcpy(buf, g->wbuf.data + g->woff, n);
            g->woff += n;
            if (g->woff == g->wbuf.len) {
                mf_buf_reset(&g->wbuf);
                g->woff = 0;
            }
            return (ssize_t)n;
        }
        if (g->finals_sent)
            return MHD_CONTENT_READER_END_OF_STREAM;
        if (atomic_load(&g->s->draining) == 2)
            return MHD_CONTENT_READER_END_WITH_ERROR;
        if (serve_gen_pump(g, PUMP_MS))
            serve_gen_close_stream(g);
        else if (g->wbuf.len == 0 && peer_gone(g->fd))
            return MHD_CONTENT_READER_END_WITH_ERROR;
    }
}

static void stream_free(void *cls)
{
    serve_gen_unref(cls);
}

/* ---- routes ---- */

/* The four generation routes: parse, admit (429 past max_requests), start,
 * then stream or generate in place and answer the whole response. */
static enum MHD_Result generate(struct MHD_Connection *c, struct reqctx *rc, enum serve_api api)
{
    struct serve *s = rc->s;
    struct serve_req rq;
    struct serve_gen *g;
    struct mf_err err;
    int status;

    if (atomic_load(&s->draining))
        return send_error(c, rc, 503, "service_unavailable", "the server is shutting down");
    if (serve_req_parse(api, rc->body.data, rc->body.len, &rq, &err)) {
        serve_req_free(&rq);
        return send_error(c, rc, 400, "invalid_value", err.msg);
    }
    if (atomic_fetch_add(&s->active, 1) >= s->cfg.max_requests) {
        atomic_fetch_sub(&s->active, 1);
        serve_req_free(&rq);
        return send_error(c, rc, 429, "rate_limit_exceeded",
                          "too many requests in flight; retry later");
    }
    if (serve_gen_start(s, &rq, &g, &status, &err)) {
        atomic_fetch_sub(&s->active, 1);
        const char *code = status == 404   ? "model_not_found"
                           : status == 429 ? "rate_limit_exceeded"
                           : err.code == MF_ERANGE ? "context_length_exceeded"
                           : status == 400 ? "invalid_value"
                                           : "internal_error";
        return send_error(c, rc, status, code, err.msg);
    }
    g->active = &s->active;
    g->fd = conn_fd(c);
    rc->g = g;
    if (g->rq.stream && g->n > 0) {
        struct MHD_Response *r = MHD_create_response_from_callback(
            MHD_SIZE_UNKNOWN, STREAM_BLOCK, stream_read, g, stream_free);
        if (!r)
            return MHD_NO;
        atomic_fetch_add(&g->refs, 1);
        MHD_add_response_header(r, "Content-Type",
                                rc->ollama ? "application/x-ndjson" : "text/event-stream");
        MHD_add_response_header(r, "Cache-Control", "no-cache");
        MHD_add_response_header(r, "Connection", "close");
        rc->status = 200;
        enum MHD_Result ret = MHD_queue_response(c, 200, r);
        MHD_destroy_response(r);
        return ret;
    }
    while (!serve_gen_pump(g, PUMP_MS)) {
        if (peer_gone(g->fd) || atomic_load(&s->draining) == 2) {
            rc->status = 499; /* client closed: nothing is sent */
            return MHD_NO;
        }
    }
    if (g->failed)
        return send_error(c, rc, 500, "internal_error",
                          g->err.msg[0] ? g->err.msg : "generation failed");
    return send_json(c, rc, 200, serve_gen_response(g));
}

static enum MHD_Result show(struct MHD_Connection *c, struct reqctx *rc)
{
    struct mf_err err;
    struct batch_lora lora;
    json_t *body = rc->body.len ? mf_json_parse(rc->body.data, rc->body.len, "request body", &err)
                                : json_object();
    const char *name;
    if (!body)
        return send_error(c, rc, 400, "invalid_value", err.msg);
    name = json_string_value(json_object_get(body, "model"));
    if (!name)
        name = json_string_value(json_object_get(body, "name"));
    if (serve_pick_model(rc->s, name, &lora, &err)) {
        json_decref(body);
        return send_error(c, rc, 404, "model_not_found", err.msg);
    }
    json_t *o = ollama_show(rc->s, name);
    json_decref(body);
    return send_json(c, rc, 200, o);
}

static enum MHD_Result tokenize(struct MHD_Connection *c, struct reqctx *rc)
{
    struct serve *s = rc->s;
    struct mf_err err;
    struct serve_req rq;
    struct tok_ids ids;
    json_t *body = mf_json_parse(rc->body.data ? rc->body.data : "", rc->body.len,
                                 "request body", &err);
    int add_special = 1;
    if (!body || !json_is_object(body)) {
        json_decref(body);
        return send_error(c, rc, 400, "invalid_value",
                          body ? "request body must be a JSON object" : err.msg);
    }
    json_t *as = json_object_get(body, "add_special_tokens");
    if (!as)
        as = json_object_get(body, "add_special");
    if (as && !json_is_boolean(as)) {
        json_decref(body);
        return send_error(c, rc, 400, "invalid_value", "'add_special_tokens' must be true or false");
    }
    if (as)
        add_special = json_is_true(as);
    const char *model = json_string_value(json_object_get(body, "model"));
    struct batch_lora lora;
    if (serve_pick_model(s, model, &lora, &err)) {
        json_decref(body);
        return send_error(c, rc, 404, "model_not_found", err.msg);
    }
    if (json_object_get(body, "messages")) {
        json_decref(body);
        if (serve_req_parse(SERVE_OAI_CHAT, rc->body.data, rc->body.len, &rq, &err)) {
            serve_req_free(&rq);
            return send_error(c, rc, 400, "invalid_value", err.msg);
        }
        if (serve_gen_tokens(s, &rq, &ids, &err)) {
            tok_ids_free(&ids);
            return send_error(c, rc, 400, "invalid_value", err.msg);
        }
    } else {
        json_t *p = json_object_get(body, "prompt");
        if (!p)
            p = json_object_get(body, "content");
        if (!json_is_string(p)) {
            json_decref(body);
            return send_error(c, rc, 400, "invalid_value",
                              "'prompt' must be a string (or give 'messages')");
        }
        tok_ids_init(&ids, 1u << 24);
        unsigned fl = TOK_PARSE_SPECIAL | (add_special ? TOK_ADD_SPECIAL : TOK_NO_BOS);
        int r = tok_encode(s->tok, json_string_value(p), json_string_length(p), fl, &ids, &err);
        json_decref(body);
        if (r) {
            tok_ids_free(&ids);
            return send_error(c, rc, 400, "invalid_value", err.msg);
        }
    }
    json_t *toks = json_array();
    for (size_t i = 0; i < ids.n; i++)
        json_array_append_new(toks, json_integer(ids.v[i]));
    tok_ids_free(&ids);
    return send_json(c, rc, 200,
                     json_pack("{s:i, s:i, s:o}", "count", (int)json_array_size(toks),
                               "max_model_len", (int)s->n_ctx, "tokens", toks));
}

static enum MHD_Result detokenize(struct MHD_Connection *c, struct reqctx *rc)
{
    struct serve *s = rc->s;
    struct mf_err err;
    json_t *body = mf_json_parse(rc->body.data ? rc->body.data : "", rc->body.len,
                                 "request body", &err);
    json_t *toks = json_object_get(body, "tokens");
    struct tok_stream ts;
    struct mf_buf out;
    size_t i;
    json_t *x;
    if (!body || !json_is_array(toks)) {
        json_decref(body);
        return send_error(c, rc, 400, "invalid_value",
                          body ? "'tokens' must be an array of token ids" : err.msg);
    }
    mf_buf_init(&out, 64u << 20);
    tok_stream_init(&ts, s->tok, TOK_RENDER_SPECIAL);
    json_array_foreach (toks, i, x) {
        json_int_t t = json_is_integer(x) ? json_integer_value(x) : -1;
        if (t < 0 || t >= (json_int_t)tok_n_vocab(s->tok) ||
            tok_stream_push(&ts, (int32_t)t, &out, &err)) {
            char msg[160];
            snprintf(msg, sizeof msg, "'tokens[%zu]' must be a token id below %u", i,
                     tok_n_vocab(s->tok));
            json_decref(body);
            mf_buf_free(&out);
            return send_error(c, rc, 400, "invalid_value", msg);
        }
    }
    tok_stream_flush(&ts, &out, &err);
    json_decref(body);
    json_t *v = json_pack("{s:s%}", "prompt", out.data ? out.data : "", out.len);
    mf_buf_free(&out);
    return send_json(c, rc, 200, v);
}

/* The embeddings routes: admitted like a generation (429 past max_requests,
 * counted for the drain), answered whole. */
static enum MHD_Result embed(struct MHD_Connection *c, struct reqctx *rc, enum serve_embed_api api)
{
    struct serve *s = rc->s;
    struct mf_err err;
    json_t *out;
    int status;

    if (atomic_load(&s->draining))
        return send_error(c, rc, 503, "service_unavailable", "the server is shutting down");
    if (atomic_fetch_add(&s->active, 1) >= s->cfg.max_requests) {
        atomic_fetch_sub(&s->active, 1);
        return send_error(c, rc, 429, "rate_limit_exceeded",
                          "too many requests in flight; retry later");
    }
    int r = serve_embed_handle(s, api, rc->body.data ? rc->body.data : "", rc->body.len, &out,
                               &status, &err);
    atomic_fetch_sub(&s->active, 1);
    if (r) {
        const char *code = status == 404          ? "model_not_found"
                           : err.code == MF_ERANGE ? "context_length_exceeded"
                           : status == 400         ? "invalid_value"
                                                   : "internal_error";
        return send_error(c, rc, status, code, err.msg);
    }
    return send_json(c, rc, 200, out);
}

static int is(const char *path, const char *p)
{
    return !strcmp(path, p);
}

static enum MHD_Result route(struct MHD_Connection *c, struct reqctx *rc)
{
    struct serve *s = rc->s;
    const char *p = rc->path;
    int get = is(rc->method, "GET") || is(rc->method, "HEAD");
    int post = is(rc->method, "POST");
    struct mf_buf b;

    if (is(p, "/"))
        return queue(c, rc, 200, "text/plain; charset=utf-8", "mfc is running", 14, 0);
    if (is(p, "/health")) {
        int ready = atomic_load(&s->ready), dr = atomic_load(&s->draining);
        const char *st = dr ? "draining" : ready ? "ok" : "loading";
        return send_json(c, rc, ready && !dr ? 200 : 503, json_pack("{s:s}", "status", st));
    }
    if (is(p, "/api/version"))
        return send_json(c, rc, 200, json_pack("{s:s}", "version", PACKAGE_VERSION));
    if (s->cfg.api_key && !key_ok(s, c))
        return send_error(c, rc, 401, "invalid_api_key",
                          "missing or invalid API key: send 'Authorization: Bearer KEY'");
    if (!atomic_load(&s->ready))
        return send_error(c, rc, 503, "service_unavailable", "the model is loading");

    static const struct {
        const char *path;
        int post;
    } routes[] = {
        {"/metrics", 0},          {"/v1/models", 0},   {"/api/tags", 0},
        {"/api/ps", 0},           {"/api/show", 1},    {"/tokenize", 1},
        {"/detokenize", 1},       {"/v1/chat/completions", 1},
        {"/v1/completions", 1},   {"/api/generate", 1}, {"/api/chat", 1},
        {"/v1/embeddings", 1},    {"/api/embed", 1},    {"/api/embeddings", 1},
    };
    int known = !strncmp(p, "/v1/models/", 11);
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++)
        if (is(p, routes[i].path)) {
            known = 1;
            if (routes[i].post ? !post : !get)
                return send_error(c, rc, 405, "method_not_allowed", "method not allowed");
        }
    if (!known)
        return send_error(c, rc, 404, "not_found", "no such route");
    if (!get && !strncmp(p, "/v1/models/", 11))
        return send_error(c, rc, 405, "method_not_allowed", "method not allowed");

    if (is(p, "/metrics")) {
        struct mf_err err;
        mf_buf_init(&b, 1u << 20);
        if (serve_metrics_text(s, &b, &err)) {
            mf_buf_free(&b);
            return send_error(c, rc, 500, "internal_error", err.msg);
        }
        enum MHD_Result r =
            queue(c, rc, 200, "text/plain; version=0.0.4; charset=utf-8", b.data, b.len, 0);
        mf_buf_free(&b);
        return r;
    }
    if (is(p, "/v1/models"))
        return send_json(c, rc, 200, oai_models(s));
    if (!strncmp(p, "/v1/models/", 11)) {
        json_t *all = oai_models(s), *m;
        size_t i;
        json_array_foreach (json_object_get(all, "data"), i, m)
            if (is(json_string_value(json_object_get(m, "id")), p + 11)) {
                json_incref(m);
                json_decref(all);
                return send_json(c, rc, 200, m);
            }
        json_decref(all);
        char msg[256];
        snprintf(msg, sizeof msg, "The model '%.200s' does not exist", p + 11);
        return send_error(c, rc, 404, "model_not_found", msg);
    }
    if (is(p, "/api/tags"))
        return send_json(c, rc, 200, ollama_tags(s, 0));
    if (is(p, "/api/ps"))
        return send_json(c, rc, 200, ollama_tags(s, 1));
    if (is(p, "/api/show"))
        return show(c, rc);
    if (is(p, "/tokenize"))
        return tokenize(c, rc);
    if (is(p, "/detokenize"))
        return detokenize(c, rc);
    if (is(p, "/v1/embeddings"))
        return embed(c, rc, SERVE_EMBED_OAI);
    if (is(p, "/api/embed"))
        return embed(c, rc, SERVE_EMBED_OLLAMA);
    if (is(p, "/api/embeddings"))
        return embed(c, rc, SERVE_EMBED_LEGACY);
    if (is(p, "/v1/chat/completions"))
        return generate(c, rc, SERVE_OAI_CHAT);
    if (is(p, "/v1/completions"))
        return generate(c, rc, SERVE_OAI_COMPLETION);
    if (is(p, "/api/generate"))
        return generate(c, rc, SERVE_OLLAMA_GENERATE);
    return generate(c, rc, SERVE_OLLAMA_CHAT);
}

/* A body arriving slower than the read timeout allows: libmicrohttpd cannot
 * queue a response mid-body, so the 408 is written to the socket here, on
 * the connection's own thread (nothing else writes to it while the body is
 * read), and the connection is closed. Best effort: a client still sending
 * may see the reset before the answer. */
static enum MHD_Result body_late(struct MHD_Connection *c, struct reqctx *rc)
{
    char out[1024], msg[96];
    snprintf(msg, sizeof msg, "the request body did not arrive within the read timeout (%d s "
             "and 1 s per 64 KiB)", rc->s->cfg.read_timeout);
    size_t n = serve_door_error(408, "request_timeout", msg, rc->ollama, 0, out, sizeof out);
    int fd = conn_fd(c);
    if (n && fd >= 0)
        (void)!send(fd, out, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    rc->status = 408;
    return MHD_NO;
}

/* A body that stopped arriving for the read timeout: libmicrohttpd's
 * timeout ends the connection without a word, so the 408 is written here,
 * before it closes the socket. */
static void body_silent(struct MHD_Connection *c, struct reqctx *rc)
{
    char out[1024], msg[96];
    snprintf(msg, sizeof msg, "the request body stopped arriving for the read timeout (%d s)",
             rc->s->cfg.read_timeout);
    size_t n = serve_door_error(408, "request_timeout", msg, rc->ollama, 0, out, sizeof out);
    int fd = conn_fd(c);
    if (n && fd >= 0 && send(fd, out, n, MSG_NOSIGNAL | MSG_DONTWAIT) == (ssize_t)n)
        rc->status = 408;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_data_size,
                                  void **con_cls)
{
    struct serve *s = cls;
    struct reqctx *rc = *con_cls;

    if (!rc) {
        if (!(rc = calloc(1, sizeof *rc)))
            return MHD_NO;
        rc->s = s;
        rc->t0 = serve_now_ns();
        snprintf(rc->method, sizeof rc->method, "%s", method);
        snprintf(rc->path, sizeof rc->path, "%s", url);
        rc->ollama = !strncmp(url, "/api/", 5);
        mf_buf_init(&rc->body, s->cfg.max_body);
        *con_cls = rc;
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
        if (cl && strtoull(cl, NULL, 10) > s->cfg.max_body) {
            char msg[128];
            snprintf(msg, sizeof msg, "request body of %s bytes is over the limit of %zu bytes",
                     cl, s->cfg.max_body);
            return send_error(c, rc, 413, "request_too_large", msg);
        }
        return MHD_YES;
    }
    if (*upload_data_size) {
        if (!rc->too_big && mf_buf_append(&rc->body, upload_data, *upload_data_size, NULL))
            rc->too_big = 1;
        *upload_data_size = 0;
        if (serve_door_body_late(s->cfg.read_timeout, rc->t0, serve_now_ns(), rc->body.len))
            return body_late(c, rc);
        return MHD_YES;
    }
    if (rc->status) /* answered already (413 at the headers) */
        return MHD_YES;
    /* the request is in: the response may take its time (a stream, a long generation) */
    rc->in = 1;
    MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, (unsigned)RESPONSE_IDLE_S);
    if (rc->too_big) {
        char msg[128];
        snprintf(msg, sizeof msg, "request body is over the limit of %zu bytes", s->cfg.max_body);
        return send_error(c, rc, 413, "request_too_large", msg);
    }
    return route(c, rc);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    struct serve *s = cls;
    struct reqctx *rc = *con_cls;
    int pt = 0, ct = 0;
    uint64_t sp = 0, sa = 0;
    char spec[64] = "";
    const char *fin = "-";
    if (!rc)
        return;
    if (toe == MHD_REQUEST_TERMINATED_TIMEOUT_REACHED && !rc->in && !rc->status)
        body_silent(c, rc);
    if (rc->g) {
        serve_gen_counts(rc->g, &pt, &ct, &fin);
        serve_gen_spec_counts(rc->g, &sp, &sa);
    }
    if (sp) /* speculative decoding: proposals verified and accepted */
        snprintf(spec, sizeof spec, " draft_tokens=%" PRIu64 " accepted_tokens=%" PRIu64, sp, sa);
    mf_log_info(&s->log,
                "access method=%s path=%s status=%d ms=%.1f prompt_tokens=%d "
                "completion_tokens=%d finish=%s%s%s",
                rc->method, rc->path, rc->status ? rc->status : 499,
                (double)(serve_now_ns() - rc->t0) / 1e6, pt, ct, fin, spec,
                toe == MHD_REQUEST_TERMINATED_COMPLETED_OK ? "" : " aborted=1");
    serve_gen_unref(rc->g);
    mf_buf_free(&rc->body);
    free(rc);
    *con_cls = NULL;
}

static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode code)
{
    struct serve *s = cls;
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    (void)socket_context;
    serve_door_notify(s->door, code == MHD_CONNECTION_NOTIFY_STARTED,
                      ci ? ci->client_addr : NULL,
                      ci && ci->client_addr && ci->client_addr->sa_family == AF_INET6
                          ? (socklen_t)sizeof(struct sockaddr_in6)
                          : (socklen_t)sizeof(struct sockaddr_in));
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    struct serve *s = cls;
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    size_t n = strlen(msg);
    while (n && msg[n - 1] == '\n')
        msg[--n] = '\0';
    mf_log_debug(&s->log, "microhttpd: %s", msg);
}

int serve_start(struct serve *s, struct mf_err *err)
{
    /* no listening socket: the front door accepts, checks each head and hands
     * the connection over (serve_door.h); its idle timeout is the read timeout
     * until the request is in (on_request raises it for the response) */
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
                     MHD_USE_ITC | MHD_USE_ERROR_LOG | MHD_USE_POLL | MHD_USE_NO_LISTEN_SOCKET;
    s->mhd = MHD_start_daemon(
        flags, 0, NULL, NULL, on_request, s, MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
        MHD_OPTION_NOTIFY_CONNECTION, on_connection, s, MHD_OPTION_CONNECTION_LIMIT,
        (unsigned)s->cfg.max_connections + 64u, MHD_OPTION_CONNECTION_TIMEOUT,
        (unsigned)s->cfg.read_timeout, MHD_OPTION_CONNECTION_MEMORY_LIMIT,
        (size_t)(SERVE_HEAD_MAX * 4), MHD_OPTION_EXTERNAL_LOGGER, mhd_log, s, MHD_OPTION_END);
    if (!s->mhd)
        return mf_err_set(err, MF_EIO, "cannot start libmicrohttpd");
    int rc = serve_door_open(s, s->mhd, &s->door, err);
    if (rc) {
        MHD_stop_daemon(s->mhd);
        s->mhd = NULL;
        return rc;
    }
    mf_log_info(&s->log, "listening on http://%s:%d", s->cfg.host, s->cfg.port);
    return 0;
}

void serve_stop(struct serve *s)
{
    if (!s->mhd)
        return;
    /* the door stays open while requests finish: /health says "draining" (503),
     * new generations get 503; then it closes and the rest is cut */
    atomic_store(&s->draining, 1);
    int64_t until = serve_now_ns() + (int64_t)s->cfg.drain_s * 1000000000;
    int n;
    while ((n = atomic_load(&s->active)) > 0 && serve_now_ns() < until)
        usleep(20000);
    if (n > 0)
        mf_log_warn(&s->log, "drain timeout: cutting %d requests off", n);
    serve_door_close(s->door);
    s->door = NULL;
    atomic_store(&s->draining, 2);
    MHD_stop_daemon(s->mhd);
    s->mhd = NULL;
}
