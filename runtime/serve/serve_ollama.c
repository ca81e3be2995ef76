/*
 * serve_ollama.c: the Ollama wire format (Ollama's docs/api.md): NDJSON
 * streaming of /api/generate and /api/chat with the closing done object
 * (durations in nanoseconds, generate's context), whole responses for
 * stream:false, and the model listings /api/tags, /api/ps, /api/show.
 */
#include "runtime/serve/serve_int.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#include "runtime/model/model.h"
#include "text/template.h"

void ollama_time(char *buf, size_t cap)
{
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    snprintf(buf, cap, "%04d-%02d-%02dT%02d:%02d:%02d.%09ldZ", tm.tm_year + 1900, tm.tm_mon + 1,
             tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec);
}

static int is_chat(const struct serve_gen *g)
{
    return g->rq.api == SERVE_OLLAMA_CHAT;
}

static json_t *head(const struct serve_gen *g)
{
    char t[48];
    ollama_time(t, sizeof t);
    return json_pack("{s:s, s:s}", "model", serve_gen_model(g), "created_at", t);
}

static void set_text(const struct serve_gen *g, json_t *o, const char *p, size_t n)
{
    json_t *s = json_stringn_nocheck(p ? p : "", n);
    if (is_chat(g))
        json_object_set_new(o, "message",
                            json_pack("{s:s, s:o}", "role", "assistant", "content", s));
    else
        json_object_set_new(o, "response", s);
}

/* Ollama's tool calls: [{function: {index, name, arguments (an object)}}] */
static json_t *tool_calls(const struct serve_choice *c)
{
    json_t *out = json_array();
    size_t k;
    const json_t *call;
    json_array_foreach (c->calls, k, call)
        json_array_append_new(out, json_pack("{s:{s:i, s:O, s:O}}", "function", "index", (int)k,
                                             "name", json_object_get(call, "name"), "arguments",
                                             json_object_get(call, "arguments")));
    return out;
}

void ollama_tool_chunk(struct serve_gen *g)
{
    struct serve_choice *c = &g->ch[0];
    json_t *o = head(g);
    set_text(g, o, c->call_text, c->call_text ? strlen(c->call_text) : 0);
    json_object_set_new(json_object_get(o, "message"), "tool_calls", tool_calls(c));
    json_object_set_new(o, "done", json_false());
    serve_put_json(&g->wbuf, "", o, "\n");
}

void ollama_chunk(struct serve_gen *g, int i)
{
    struct serve_choice *c = &g->ch[i];
    json_t *o = head(g);
    set_text(g, o, c->delta.data, c->delta.len);
    json_object_set_new(o, "done", json_false());
    serve_put_json(&g->wbuf, "", o, "\n");
}

/* The done object's fields, added to o. */
static void done_fields(struct serve_gen *g, json_t *o)
{
    int64_t now = serve_now_ns();
    const struct serve_choice *c = g->n ? &g->ch[0] : NULL;
    int64_t total = now - g->t0;
    int64_t ttft = c && c->sum.ttft_s >= 0 ? (int64_t)(c->sum.ttft_s * 1e9) : total;
    int64_t eval = total - ttft > 0 ? total - ttft : 0;
    const char *reason = !c ? "load" : c->finish == SCHED_FINISH_LENGTH ? "length" : "stop";

    json_object_set_new(o, "done", json_true());
    json_object_set_new(o, "done_reason", json_string(reason));
    if (!is_chat(g) && c) {
        json_t *ctx = json_array();
        for (size_t k = 0; k < g->prompt.n; k++)
            json_array_append_new(ctx, json_integer(g->prompt.v[k]));
        for (size_t k = 0; k < c->out.n; k++)
            json_array_append_new(ctx, json_integer(c->out.v[k]));
        json_object_set_new(o, "context", ctx);
    }
    json_object_set_new(o, "total_duration", json_integer(total));
    json_object_set_new(o, "load_duration", json_integer(c ? 0 : g->s->load_ns));
    if (!c)
        return;
    json_object_set_new(o, "prompt_eval_count", json_integer((json_int_t)g->prompt.n));
    json_object_set_new(o, "prompt_eval_duration", json_integer(ttft));
    json_object_set_new(o, "eval_count", json_integer((json_int_t)c->out.n));
    json_object_set_new(o, "eval_duration", json_integer(eval));
}

void ollama_close(struct serve_gen *g)
{
    if (g->failed) {
        serve_put_json(&g->wbuf, "",
                       json_pack("{s:s}", "error",
                                 g->err.msg[0] ? g->err.msg : "generation failed"),
                       "\n");
        return;
    }
    json_t *o = head(g);
    set_text(g, o, "", 0);
    done_fields(g, o);
    serve_put_json(&g->wbuf, "", o, "\n");
}

json_t *ollama_response(struct serve_gen *g)
{
    json_t *o = head(g);
    if (g->n && g->ch[0].calls && is_chat(g)) {
        const char *t = g->ch[0].call_text;
        set_text(g, o, t, t ? strlen(t) : 0);
        json_object_set_new(json_object_get(o, "message"), "tool_calls", tool_calls(&g->ch[0]));
    } else if (g->n) {
        set_text(g, o, g->ch[0].acc.data, g->ch[0].acc.len);
    } else {
        set_text(g, o, "", 0);
    }
    done_fields(g, o);
    return o;
}

static json_t *details(const struct serve *s)
{
    char size[32];
    double p = (double)s->n_params;
    if (p >= 1e9)
        snprintf(size, sizeof size, "%.1fB", p / 1e9);
    else
        snprintf(size, sizeof size, "%.2fM", p / 1e6);
    const char *fam = s->arch[0] ? s->arch : "llama"; /* Ollama: general.architecture */
    return json_pack("{s:s, s:s, s:s, s:[s], s:s, s:s}", "parent_model", "", "format", "gguf",
                     "family", fam, "families", fam, "parameter_size", size, "quantization_level",
                     s->quant);
}

static json_t *entry(const struct serve *s, const char *name, int ps)
{
    char full[160], t[48];
    snprintf(full, sizeof full, "%s%s", name, strchr(name, ':') ? "" : ":latest");
    ollama_time(t, sizeof t);
    json_t *o = json_pack("{s:s, s:s, s:I, s:s, s:o}", "name", full, "model", full, "size",
                          (json_int_t)s->model_bytes, "digest", s->digest + 7, "details",
                          details(s));
    if (ps) {
        json_object_set_new(o, "expires_at", json_string("2318-01-01T00:00:00Z"));
        json_object_set_new(o, "size_vram", json_integer(0));
        json_object_set_new(o, "context_length", json_integer(s->n_ctx));
    } else {
        json_object_set_new(o, "modified_at", json_string(t));
    }
    return o;
}

json_t *ollama_tags(const struct serve *s, int ps)
{
    json_t *list = json_array();
    json_array_append_new(list, entry(s, s->cfg.model_name, ps));
    for (int i = 0; i < s->n_adapters; i++)
        if (s->adapters[i].name)
            json_array_append_new(list, entry(s, s->adapters[i].name, ps));
    return json_pack("{s:o}", "models", list);
}

static void param_line(struct mf_buf *b, const char *k, const json_t *v)
{
    char *s;
    if (json_is_string(v)) {
        mf_buf_printf(b, NULL, "%-30s \"%s\"\n", k, json_string_value(v));
        return;
    }
    /* 15 digits: the 0.3 a Modelfile wrote, not the double's 0.29999999999999999 */
    if (!(s = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT | JSON_REAL_PRECISION(15))))
        return;
    mf_buf_printf(b, NULL, "%-30s %s\n", k, s);
    free(s);
}

/* Ollama's "parameters" text: one "key value" line each, stop repeated. */
static char *parameters_text(const struct serve *s)
{
    struct mf_buf b;
    const char *k;
    json_t *v;
    mf_buf_init(&b, 1u << 20);
    json_object_foreach (s->cfg.params, k, v) {
        size_t i;
        json_t *x;
        if (json_is_array(v))
            json_array_foreach (v, i, x)
                param_line(&b, k, x);
        else
            param_line(&b, k, v);
    }
    /* the chat template family's stop strings, when the Modelfile set none */
    if (!json_object_get(s->cfg.params, "stop"))
        for (int i = 0; i < s->defaults.n_stops; i++) {
            json_t *x = json_string(s->defaults.stops[i]);
            if (x)
                param_line(&b, "stop", x);
            json_decref(x);
        }
    return mf_buf_take(&b);
}

static char *modelfile_text(const struct serve *s, const char *params)
{
    struct mf_buf b;
    mf_buf_init(&b, 16u << 20);
    mf_buf_printf(&b, NULL, "# Modelfile served by mfc-serve\nFROM %s\n", s->cfg.model_path);
    mf_buf_printf(&b, NULL, "TEMPLATE \"\"\"%s\"\"\"\n", s->tmpl_src ? s->tmpl_src : "");
    if (s->cfg.system)
        mf_buf_printf(&b, NULL, "SYSTEM \"\"\"%s\"\"\"\n", s->cfg.system);
    for (int i = 0; i < s->cfg.n_adapters; i++)
        mf_buf_printf(&b, NULL, "ADAPTER %s\n", s->cfg.adapters[i].path);
    const char *p = params;
    while (p && *p) {
        const char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p) : strlen(p);
        mf_buf_printf(&b, NULL, "PARAMETER %.*s\n", (int)n, p);
        p += n + (nl ? 1 : 0);
    }
    size_t i;
    json_t *m;
    json_array_foreach (s->cfg.messages, i, m)
        mf_buf_printf(&b, NULL, "MESSAGE %s \"\"\"%s\"\"\"\n",
                      json_string_value(json_object_get(m, "role")),
                      json_string_value(json_object_get(m, "content")));
    return mf_buf_take(&b);
}

json_t *ollama_show(const struct serve *s, const char *name)
{
    char *params = parameters_text(s);
    char *mf = modelfile_text(s, params);
    char t[48];
    json_t *lic = json_object_get(s->cfg.doc, "license");
    ollama_time(t, sizeof t);
    json_t *o = json_pack("{s:s, s:s, s:s, s:o, s:O, s:[s], s:s}", "modelfile", mf ? mf : "",
                          "parameters", params ? params : "", "template",
                          s->tmpl_src ? s->tmpl_src : "", "details", details(s), "model_info",
                          s->model_info, "capabilities", "completion", "modified_at", t);
    if (o && s->tmpl && tmpl_uses(s->tmpl, "Tools"))
        json_array_append_new(json_object_get(o, "capabilities"), json_string("tools"));
    if (o && s->cfg.system)
        json_object_set_new(o, "system", json_string(s->cfg.system));
    if (o && json_is_array(lic) && json_array_size(lic)) {
        struct mf_buf b;
        size_t i;
        json_t *x;
        mf_buf_init(&b, 16u << 20);
        json_array_foreach (lic, i, x)
            mf_buf_printf(&b, NULL, "%s%s", i ? "\n" : "", json_string_value(x));
        char *l = mf_buf_take(&b);
        json_object_set_new(o, "license", json_string(l ? l : ""));
        free(l);
    }
    if (o && s->cfg.messages && json_array_size(s->cfg.messages))
        json_object_set(o, "messages", s->cfg.messages);
    if (o && name)
        json_object_set_new(o, "model", json_string(name));
    if (o && s->spec_info) /* mfc: speculative decoding (docs/api.md) */
        json_object_set(o, "speculative", s->spec_info);
    free(params);
    free(mf);
    return o;
}
