/*
 * run_client.c: the HTTP client of `mfc run`: mfc-serve's Ollama API over
 * libcurl. /api/chat streams NDJSON, one JSON object per line
 * ({"message": {"content": "..."}, "done": false} ... {"done": true, ...});
 * the write callback cuts lines and hands each piece of text on at once, so
 * the reply appears as it is generated. Lines are untrusted (fuzz_run_ndjson).
 */
#include "cli/run.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>

#include "common/json.h"

#define LINE_MAX_BYTES (4u << 20)   /* one NDJSON line */
#define REPLY_MAX_BYTES (64u << 20) /* a whole reply */
#define JSON_REPLY_MAX (16u << 20)  /* a non-streamed answer */

void run_ndjson_init(struct run_ndjson *p, run_text_fn fn, void *arg)
{
    memset(p, 0, sizeof *p);
    mf_buf_init(&p->line, LINE_MAX_BYTES);
    mf_buf_init(&p->reply, REPLY_MAX_BYTES);
    p->fn = fn;
    p->arg = arg;
}

void run_ndjson_free(struct run_ndjson *p)
{
    mf_buf_free(&p->line);
    mf_buf_free(&p->reply);
}

static void get_i64(const json_t *o, const char *k, int64_t *out)
{
    const json_t *v = json_object_get(o, k);
    if (json_is_integer(v))
        *out = json_integer_value(v);
}

/* One complete line. */
static int ndjson_line(struct run_ndjson *p, const char *s, size_t n, struct mf_err *err)
{
    while (n > 0 && (s[n - 1] == '\r' || s[n - 1] == ' '))
        n--;
    if (n == 0)
        return 0;
    /* not mf_json_parse: a token may decode to a NUL byte, sent as "\u0000" */
    json_error_t je;
    json_t *o = json_loadb(s, n, JSON_ALLOW_NUL, &je);
    if (!o)
        return mf_err_set(err, MF_ENET, "a line of mfc-serve's stream: %s at column %d", je.text,
                          je.column);
    int rc = 0;
    const json_t *e = json_object_get(o, "error");
    if (e) {
        const char *msg = json_is_string(e) ? json_string_value(e)
                          : json_is_string(json_object_get(e, "message"))
                              ? json_string_value(json_object_get(e, "message"))
                              : "an error without a message";
        rc = mf_err_set(err, MF_ENET, "mfc-serve: %s", msg);
    } else if (!json_is_object(o)) {
        rc = mf_err_set(err, MF_ENET, "mfc-serve streamed a line that is not an object");
    }
    const json_t *msg = json_object_get(o, "message");
    const json_t *c = json_is_object(msg) ? json_object_get(msg, "content")
                                          : json_object_get(o, "response"); /* /api/generate */
    if (!rc && json_is_string(c) && json_string_length(c) > 0) {
        const char *t = json_string_value(c);
        size_t tl = json_string_length(c);
        rc = mf_buf_append(&p->reply, t, tl, err);
        if (!rc && p->fn)
            p->fn(p->arg, t, tl);
    }
    if (!rc && json_is_true(json_object_get(o, "done"))) {
        p->done = 1;
        get_i64(o, "prompt_eval_count", &p->st.prompt_eval_count);
        get_i64(o, "eval_count", &p->st.eval_count);
        get_i64(o, "total_duration", &p->st.total_duration);
        get_i64(o, "eval_duration", &p->st.eval_duration);
        const json_t *r = json_object_get(o, "done_reason");
        if (json_is_string(r))
            snprintf(p->st.done_reason, sizeof p->st.done_reason, "%s", json_string_value(r));
    }
    json_decref(o);
    return rc;
}

int run_ndjson_feed(struct run_ndjson *p, const char *data, size_t n, struct mf_err *err)
{
    while (n > 0) {
        if (p->done)
            return 1; /* anything after the last object is ignored */
        const char *nl = memchr(data, '\n', n);
        size_t k = nl ? (size_t)(nl - data) : n;
        int rc;
        if (nl && p->line.len == 0) {
            rc = ndjson_line(p, data, k, err);
        } else {
            rc = mf_buf_append(&p->line, data, k, err);
            if (!rc && nl) {
                rc = ndjson_line(p, p->line.data, p->line.len, err);
                mf_buf_reset(&p->line);
            }
        }
        if (rc)
            return rc;
        data += k + (nl ? 1 : 0);
        n -= k + (nl ? 1 : 0);
    }
    return p->done;
}

/* ---- libcurl ---------------------------------------------------------------------- */

struct xfer {
    struct run_ndjson nd;
    struct mf_buf body;  /* a non-2xx or non-streamed answer */
    struct mf_err err;
    int rc;
    long status;
    CURL *c;
    const struct run_client *cl;
};

static int status_of(struct xfer *x)
{
    if (!x->status)
        curl_easy_getinfo(x->c, CURLINFO_RESPONSE_CODE, &x->status);
    return (int)x->status;
}

static size_t on_stream(char *p, size_t size, size_t n, void *arg)
{
    struct xfer *x = arg;
    size_t len = size * n;
    if (status_of(x) / 100 != 2) { /* an error answer: keep it for the message */
        if (mf_buf_append(&x->body, p, len, &x->err) != 0)
            return 0;
        return len;
    }
    int rc = run_ndjson_feed(&x->nd, p, len, &x->err);
    if (rc < 0) {
        x->rc = rc;
        return 0; /* stop the transfer */
    }
    return len;
}

static size_t on_body(char *p, size_t size, size_t n, void *arg)
{
    struct xfer *x = arg;
    return mf_buf_append(&x->body, p, size * n, &x->err) == 0 ? size * n : 0;
}

static int on_progress(void *arg, curl_off_t a, curl_off_t b, curl_off_t c, curl_off_t d)
{
    (void)a, (void)b, (void)c, (void)d;
    const struct xfer *x = arg;
    return x->cl->cancel && *x->cl->cancel ? 1 : 0;
}

/* The message of an error answer: OpenAI's {"error": {"message"}} or
 * Ollama's {"error": "..."}, else the body's first line. */
static void error_message(const struct mf_buf *b, char *out, size_t cap)
{
    struct mf_err e = {0};
    json_t *o = b->len ? mf_json_parse(b->data, b->len, "an error answer", &e) : NULL;
    const json_t *v = json_object_get(o, "error");
    if (json_is_object(v))
        v = json_object_get(v, "message");
    if (json_is_string(v))
        snprintf(out, cap, "%s", json_string_value(v));
    else if (b->len)
        snprintf(out, cap, "%.*s", (int)strcspn(b->data, "\r\n"), b->data);
    else
        snprintf(out, cap, "no message");
    json_decref(o);
}

static int perform(struct xfer *x, const char *path, const json_t *body, int stream,
                   struct mf_err *err)
{
    char url[512];
    snprintf(url, sizeof url, "%s%s", x->cl->base_url, path);
    struct mf_buf req;
    mf_buf_init(&req, JSON_REPLY_MAX);
    struct curl_slist *h = NULL;
    int rc = body ? mf_json_dump(body, JSON_COMPACT, &req, err) : 0;
    if (rc) {
        mf_buf_free(&req);
        return rc;
    }
    if (!(x->c = curl_easy_init())) {
        mf_buf_free(&req);
        return mf_err_set(err, MF_ENOMEM, "curl_easy_init failed");
    }
    h = curl_slist_append(h, "Content-Type: application/json");
    char auth[512];
    if (x->cl->api_key && x->cl->api_key[0]) {
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", x->cl->api_key);
        h = curl_slist_append(h, auth);
    }
    curl_easy_setopt(x->c, CURLOPT_URL, url);
    curl_easy_setopt(x->c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(x->c, CURLOPT_NOPROXY, "*");
    curl_easy_setopt(x->c, CURLOPT_HTTPHEADER, h);
    if (body) {
        curl_easy_setopt(x->c, CURLOPT_POSTFIELDS, req.data);
        curl_easy_setopt(x->c, CURLOPT_POSTFIELDSIZE, (long)req.len);
    }
    curl_easy_setopt(x->c, CURLOPT_WRITEFUNCTION, stream ? on_stream : on_body);
    curl_easy_setopt(x->c, CURLOPT_WRITEDATA, x);
    curl_easy_setopt(x->c, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(x->c, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(x->c, CURLOPT_XFERINFODATA, x);
    CURLcode cc = curl_easy_perform(x->c);
    status_of(x);
    if (x->rc) {
        rc = x->rc;
        *err = x->err;
    } else if (cc == CURLE_ABORTED_BY_CALLBACK) {
        rc = mf_err_set(err, MF_EBUSY, "interrupted");
    } else if (cc == CURLE_WRITE_ERROR && x->err.code) {
        rc = x->err.code;
        *err = x->err;
    } else if (cc != CURLE_OK) {
        rc = mf_err_set(err, MF_ENET, "%s: %s", url, curl_easy_strerror(cc));
    } else if (x->status / 100 != 2) {
        char msg[400];
        error_message(&x->body, msg, sizeof msg);
        rc = mf_err_set(err, MF_ENET, "mfc-serve answered %ld: %s", x->status, msg);
    }
    curl_slist_free_all(h);
    curl_easy_cleanup(x->c);
    mf_buf_free(&req);
    return rc;
}

int run_chat_stream(const struct run_client *c, const json_t *req, run_text_fn fn, void *arg,
                    char **reply, struct run_stats *st, struct mf_err *err)
{
    struct xfer x = {.cl = c};
    run_ndjson_init(&x.nd, fn, arg);
    mf_buf_init(&x.body, JSON_REPLY_MAX);
    int rc = perform(&x, "/api/chat", req, 1, err);
    if (!rc && !x.nd.done)
        rc = mf_err_set(err, MF_ENET, "mfc-serve ended the stream without a final \"done\" line");
    if (st)
        *st = x.nd.st;
    *reply = mf_buf_take(&x.nd.reply);
    run_ndjson_free(&x.nd);
    mf_buf_free(&x.body);
    return rc;
}

int run_client_json(const struct run_client *c, const char *path, const json_t *body,
                    json_t **out, struct mf_err *err)
{
    struct xfer x = {.cl = c};
    mf_buf_init(&x.body, JSON_REPLY_MAX);
    int rc = perform(&x, path, body, 0, err);
    if (!rc) {
        *out = mf_json_parse(x.body.data ? x.body.data : "", x.body.len, path, err);
        if (!*out)
            rc = err->code ? err->code : MF_ENET;
    }
    mf_buf_free(&x.body);
    return rc;
}
