/*
 * serve_gen.c: one generation request in flight, independent of the wire
 * format: builds the prompt (template or raw), tokenizes it, merges the
 * model's parameters with the request's into one sampler per choice,
 * submits to the engine, and turns engine events into text through
 * engine_text (stop strings) for the OpenAI and Ollama writers.
 *
 * Threading: the HTTP connection thread owns a serve_gen; the engine's
 * step thread only calls notify(), which signals g->cv. The generation is
 * reference-counted because two MHD callbacks (response free, request
 * completed) end its life in no fixed order; the last reference releases
 * unfinished engine requests (engine_release frees their KV blocks).
 */
#include "runtime/serve/serve_int.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "runtime/grammar/gram.h"
#include "runtime/model/model.h"
#include "text/template.h"
#include "text/tokenizer.h"

#define GEN_TEXT_MAX (64u << 20)

const char *serve_finish_name(enum sched_finish f)
{
    switch (f) {
    case SCHED_FINISH_STOP:
        return "stop";
    case SCHED_FINISH_LENGTH:
        return "length";
    case SCHED_FINISH_CANCELLED:
        return "abort";
    case SCHED_FINISH_ERROR:
        return "error";
    default:
        return "none";
    }
}

const char *serve_gen_model(const struct serve_gen *g)
{
    return g->rq.model && g->rq.model[0] ? g->rq.model : g->s->cfg.model_name;
}

void serve_put_json(struct mf_buf *b, const char *prefix, json_t *v, const char *suffix)
{
    char *s = v ? json_dumps(v, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    if (s) {
        mf_buf_puts(b, prefix, NULL);
        mf_buf_puts(b, s, NULL);
        mf_buf_puts(b, suffix, NULL);
    }
    free(s);
    json_decref(v);
}

static void on_notify(void *user)
{
    struct serve_gen *g = user;
    pthread_mutex_lock(&g->mu);
    g->pending = 1;
    pthread_cond_signal(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

/* ---- prompt ---- */

/* Messages of a chat that context truncation may drop: all but system
 * messages and the last message. */
static size_t droppable(const struct serve_gen *g)
{
    const struct serve_req *rq = &g->rq;
    size_t n = json_array_size(g->s->cfg.messages), k = 0;
    for (size_t i = 0; i < rq->n_msgs; i++)
        k += strcmp(rq->msgs[i].role, "system") != 0;
    k += n;
    return k > 0 ? k - 1 : 0;
}

/* Renders the chat without its first `drop` non-system messages (the
 * model.yaml MESSAGEs, then the request's): Ollama's truncation keeps the
 * system prompt and the newest turns. */
static int render_chat(struct serve_gen *g, const struct tmpl *t, size_t drop,
                       struct mf_buf *text, struct mf_err *err)
{
    struct serve *s = g->s;
    struct serve_req *rq = &g->rq;
    size_t n_cfg = json_array_size(s->cfg.messages);
    size_t cap = n_cfg + rq->n_msgs + 2, n = 0;
    struct tmpl_message *msgs = calloc(cap, sizeof *msgs);
    int has_system = 0;
    int rc = 0;

    if (!msgs)
        return mf_err_set(err, MF_ENOMEM, "out of memory");
    for (size_t i = 0; i < rq->n_msgs; i++)
        has_system |= !strcmp(rq->msgs[i].role, "system");
    if (rq->api == SERVE_OLLAMA_GENERATE) {
        const char *sys = rq->system ? rq->system : s->cfg.system;
        if (sys && sys[0])
            msgs[n++] = (struct tmpl_message){.role = "system", .content = sys};
        for (size_t i = 0; i < n_cfg; i++) {
            json_t *m = json_array_get(s->cfg.messages, i);
            msgs[n++] = (struct tmpl_message){
                .role = json_string_value(json_object_get(m, "role")),
                .content = json_string_value(json_object_get(m, "content"))};
        }
        msgs[n++] = (struct tmpl_message){.role = "user", .content = rq->prompt ? rq->prompt : ""};
    } else {
        if (!has_system && s->cfg.system && s->cfg.system[0])
            msgs[n++] = (struct tmpl_message){.role = "system", .content = s->cfg.system};
        for (size_t i = 0; i < n_cfg; i++) {
            json_t *m = json_array_get(s->cfg.messages, i);
            const char *role = json_string_value(json_object_get(m, "role"));
            if (drop && role && strcmp(role, "system")) {
                drop--;
                continue;
            }
            msgs[n++] = (struct tmpl_message){
                .role = role, .content = json_string_value(json_object_get(m, "content"))};
        }
        for (size_t i = 0; i < rq->n_msgs; i++) {
            if (drop && strcmp(rq->msgs[i].role, "system")) {
                drop--;
                continue;
            }
            msgs[n++] = (struct tmpl_message){.role = rq->msgs[i].role,
                                              .content = rq->msgs[i].content,
                                              .tool_name = rq->msgs[i].tool_name,
                                              .tool_call_id = rq->msgs[i].tool_call_id};
            if (rq->msgs[i].tool_calls && json_array_size(rq->msgs[i].tool_calls) &&
                !(msgs[n - 1].tool_calls = serve_tool_calls_value(rq->msgs[i].tool_calls)))
                rc = mf_err_set(err, MF_ENOMEM, "out of memory");
        }
    }
    struct tmpl_chat chat = {.msgs = msgs, .n_msgs = n};
    if (rq->tools && rq->tool_choice != SERVE_TOOLS_NONE && !tmpl_uses(t, "Tools"))
        rc = mf_err_set(err, MF_EINVAL,
                        "'tools': this model's chat template does not render tools (give the "
                        "model a TEMPLATE that uses .Tools)");
    if (rq->tools && rq->tool_choice != SERVE_TOOLS_NONE && !rc &&
        !(chat.tools = serve_tools_value(rq->tools)))
        rc = mf_err_set(err, MF_ENOMEM, "out of memory");
    if (rq->api == SERVE_OLLAMA_GENERATE && rq->suffix && rq->suffix[0]) {
        chat.prompt = rq->prompt ? rq->prompt : "";
        chat.suffix = rq->suffix;
    }
    if (!rc)
        rc = tmpl_render_chat(t, &chat, text, err);
    for (size_t i = 0; i < n; i++)
        tmpl_value_unref(msgs[i].tool_calls);
    tmpl_value_unref(chat.tools);
    free(msgs);
    return rc;
}

/* Fills g->prompt, rendering chats without their first `drop` messages. */
static int build_prompt_drop(struct serve_gen *g, size_t drop, struct mf_err *err)
{
    struct serve *s = g->s;
    struct serve_req *rq = &g->rq;
    const unsigned enc = TOK_ADD_SPECIAL | TOK_PARSE_SPECIAL;
    struct mf_buf text;
    struct tmpl *own = NULL;
    int rc = 0;

    tok_ids_init(&g->prompt, (size_t)s->n_ctx + 1);
    if (rq->api == SERVE_OAI_COMPLETION && !rq->prompt) { /* token ids */
        for (size_t i = 0; i < rq->n_tokens; i++) {
            if (rq->tokens[i] >= s->m->hp.n_vocab)
                return mf_err_set(err, MF_EINVAL, "'prompt[%zu]' is token %d; the vocabulary has %d",
                                  i, (int)rq->tokens[i], (int)s->m->hp.n_vocab);
            if ((rc = tok_ids_push(&g->prompt, rq->tokens[i], err)))
                return MF_ERANGE;
        }
        return 0;
    }
    mf_buf_init(&text, GEN_TEXT_MAX);
    if (rq->api == SERVE_OAI_COMPLETION || (rq->api == SERVE_OLLAMA_GENERATE && rq->raw)) {
        rc = mf_buf_puts(&text, rq->prompt ? rq->prompt : "", err);
    } else {
        const struct tmpl *t = s->tmpl;
        if (rq->template_src) {
            rc = tmpl_compile(&own, rq->template_src, strlen(rq->template_src), NULL,
                              TMPL_F_OLLAMA, err);
            if (rc)
                mf_err_prefix(err, "'template'");
            t = own;
        }
        if (!rc)
            rc = render_chat(g, t, drop, &text, err);
        if (rc && rc != MF_ENOMEM)
            rc = MF_EINVAL;
    }
    tmpl_free(own);
    if (!rc && rq->api == SERVE_OLLAMA_GENERATE && rq->n_tokens) { /* context first */
        for (size_t i = 0; !rc && i < rq->n_tokens; i++) {
            if (rq->tokens[i] >= s->m->hp.n_vocab)
                rc = mf_err_set(err, MF_EINVAL, "'context[%zu]' is token %d; the vocabulary has %d",
                                i, (int)rq->tokens[i], (int)s->m->hp.n_vocab);
            else if (tok_ids_push(&g->prompt, rq->tokens[i], err))
                rc = MF_ERANGE;
        }
        if (!rc && text.len && tok_encode(s->tok, text.data, text.len, enc | TOK_NO_BOS,
                                          &g->prompt, err))
            rc = MF_ERANGE;
    } else if (!rc && tok_encode(s->tok, text.data ? text.data : "", text.len, enc, &g->prompt,
                                 err)) {
        rc = MF_ERANGE;
    }
    mf_buf_free(&text);
    if (rc == MF_ERANGE)
        mf_err_set(err, MF_ERANGE,
                   "This model's maximum context length is %d tokens; the prompt is longer",
                   (int)s->n_ctx);
    return rc;
}

static int is_chat_api(const struct serve_gen *g)
{
    return g->rq.api == SERVE_OAI_CHAT || g->rq.api == SERVE_OLLAMA_CHAT;
}

/* Fills g->prompt. A chat longer than the context loses its oldest
 * non-system messages, as few as make it fit (a binary search: fewer
 * messages never make a longer prompt), as Ollama does; one whose last
 * message alone does not fit is MF_ERANGE. */
static int build_prompt(struct serve_gen *g, struct mf_err *err)
{
    int rc = build_prompt_drop(g, 0, err);
    int32_t n_ctx = g->s->n_ctx;
    if (!rc && (int64_t)g->prompt.n < n_ctx)
        return 0;
    if ((rc && rc != MF_ERANGE) || !is_chat_api(g) || droppable(g) == 0) {
        if (!rc)
            rc = mf_err_set(err, MF_ERANGE,
                            "This model's maximum context length is %d tokens; the prompt has %zu",
                            (int)n_ctx, g->prompt.n);
        return rc;
    }
    size_t lo = 1, hi = droppable(g), best = 0;
    while (lo <= hi) {
        size_t mid = lo + (hi - lo) / 2;
        tok_ids_free(&g->prompt);
        rc = build_prompt_drop(g, mid, err);
        if (!rc && (int64_t)g->prompt.n < n_ctx) {
            best = mid;
            hi = mid - 1;
        } else if (!rc || rc == MF_ERANGE) {
            lo = mid + 1;
        } else {
            return rc;
        }
    }
    tok_ids_free(&g->prompt);
    if (!best)
        return mf_err_set(err, MF_ERANGE,
                          "This model's maximum context length is %d tokens; the last message "
                          "(with the system prompt) does not fit in it",
                          (int)n_ctx);
    if ((rc = build_prompt_drop(g, best, err)))
        return rc;
    mf_log_info(&g->s->log, "chat longer than the context (%d tokens): dropped the oldest %zu "
                            "message(s)",
                (int)n_ctx, best);
    return 0;
}

/* ---- sampling ---- */

static uint64_t random_seed(void)
{
    uint64_t x = 0;
    if (getrandom(&x, sizeof x, 0) != (ssize_t)sizeof x) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        x = (uint64_t)ts.tv_nsec * 0x9E3779B97F4A7C15ull ^ (uint64_t)ts.tv_sec;
    }
    return x;
}

static void apply_opts(struct sampler_params *sp, const struct serve_opts *o)
{
    if (o->set & SO_TEMPERATURE)
        sp->temperature = o->temperature;
    if (o->set & SO_TOP_K)
        sp->top_k = o->top_k;
    if (o->set & SO_TOP_P)
        sp->top_p = o->top_p;
    if (o->set & SO_MIN_P)
        sp->min_p = o->min_p;
    if (o->set & SO_TYPICAL_P)
        sp->typical_p = o->typical_p;
    if (o->set & SO_REPEAT_PENALTY)
        sp->repeat_penalty = o->repeat_penalty;
    if (o->set & SO_PRESENCE)
        sp->presence_penalty = o->presence;
    if (o->set & SO_FREQUENCY)
        sp->frequency_penalty = o->frequency;
    if (o->set & SO_REPEAT_LAST_N)
        sp->repeat_last_n = o->repeat_last_n;
    if (o->set & SO_SEED)
        sp->seed = (uint64_t)o->seed;
}

static int make_sampler(struct serve_gen *g, int i, struct sampler **out, struct mf_err *err)
{
    struct sampler_params sp;
    const struct serve_opts *d = &g->s->defaults, *r = &g->rq.opts;
    sampler_params_default(&sp);
    apply_opts(&sp, d);
    apply_opts(&sp, r);
    if (!((d->set | r->set) & SO_SEED) || ((r->set & SO_SEED) ? r->seed : d->seed) < 0)
        sp.seed = random_seed();
    sp.seed += (uint64_t)i;
    if (sp.repeat_last_n < 0)
        sp.repeat_last_n = g->s->n_ctx;
    if (sp.top_p <= 0)
        sp.top_p = 1;
    if (sp.typical_p <= 0)
        sp.typical_p = 1;
    sp.logprobs = g->rq.logprobs;
    sp.n_logprobs = g->rq.top_logprobs;
    return sampler_new(out, g->s->m->hp.n_vocab, &sp, err);
}

/* The answer's grammar: a forced tool call's, else the request's. */
static int pick_grammar(struct serve_gen *g, struct mf_err *err)
{
    struct serve_req *rq = &g->rq;
    char *own = NULL;
    const char *src = rq->grammar;
    int rc;
    g->tfmt = serve_toolfmt_for(g->s->family && !rq->template_src ? g->s->family : NULL);
    g->tools_on = rq->tools && rq->tool_choice != SERVE_TOOLS_NONE;
    if (g->tools_on && rq->tool_choice >= SERVE_TOOLS_REQUIRED) {
        if ((rc = serve_tools_grammar(rq, g->tfmt, &own, err)))
            return rc == MF_ENOMEM ? rc : MF_EINVAL;
        src = own;
    }
    if (!src)
        return 0;
    rc = serve_gcache_get(g->s, src, &g->gram, err);
    free(own);
    return rc;
}

/* ---- lifecycle ---- */

static struct serve_gen *gen_new(struct serve *s, struct serve_req *rq)
{
    struct serve_gen *g = calloc(1, sizeof *g);
    if (!g)
        return NULL;
    g->s = s;
    g->rq = *rq;
    memset(rq, 0, sizeof *rq);
    g->t0 = serve_now_ns();
    g->created = (int64_t)time(NULL);
    g->fd = -1;
    atomic_init(&g->refs, 1);
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    mf_buf_init(&g->wbuf, GEN_TEXT_MAX);
    uint64_t seq = atomic_fetch_add(&s->seq, 1);
    snprintf(g->id, sizeof g->id, "%s-%016" PRIx64 "%08" PRIx64,
             g->rq.api == SERVE_OAI_CHAT ? "chatcmpl" : "cmpl", random_seed(), seq);
    return g;
}

static void gen_free(struct serve_gen *g)
{
    for (int i = 0; i < g->n; i++) {
        struct serve_choice *c = &g->ch[i];
        if (c->live)
            engine_release(g->s->e, c->id, NULL);
        engine_text_fini(&c->text);
        mf_buf_free(&c->acc);
        mf_buf_free(&c->delta);
        mf_buf_free(&c->held);
        json_decref(c->calls);
        free(c->call_text);
        json_decref(c->lp);
        tok_ids_free(&c->out);
    }
    if (g->active)
        atomic_fetch_sub(g->active, 1);
    tok_ids_free(&g->prompt);
    gram_unref(g->gram);
    serve_req_free(&g->rq);
    mf_buf_free(&g->wbuf);
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->cv);
    free(g);
}

void serve_gen_unref(struct serve_gen *g)
{
    if (g && atomic_fetch_sub(&g->refs, 1) == 1)
        gen_free(g);
}

static int status_for(int rc)
{
    switch (rc) {
    case MF_EINVAL:
    case MF_ERANGE:
        return 400;
    case MF_ENOTFOUND:
        return 404;
    case MF_EBUSY:
        return 429;
    default:
        return 500;
    }
}

int serve_gen_start(struct serve *s, struct serve_req *rq, struct serve_gen **out, int *status,
                    struct mf_err *err)
{
    struct batch_lora lora;
    struct serve_gen *g;
    int rc;

    *out = NULL;
    *status = 500;
    rc = serve_pick_model(s, rq->model, &lora, err);
    if (rc) {
        serve_req_free(rq);
        *status = 404;
        return rc;
    }
    if (!(g = gen_new(s, rq))) {
        serve_req_free(rq);
        return mf_err_set(err, MF_ENOMEM, "out of memory");
    }
    /* Ollama loads the model for an empty prompt and answers done at once */
    if ((g->rq.api == SERVE_OLLAMA_GENERATE && !(g->rq.prompt && g->rq.prompt[0]) &&
         !g->rq.n_tokens) ||
        (g->rq.api == SERVE_OLLAMA_CHAT && g->rq.n_msgs == 0)) {
        *out = g;
        return 0;
    }
    if ((rc = build_prompt(g, err)))
        goto fail;
    if (g->prompt.n == 0) {
        rc = mf_err_set(err, MF_EINVAL, "the prompt is empty after tokenization");
        goto fail;
    }
    if ((int64_t)g->prompt.n >= s->n_ctx) {
        rc = mf_err_set(err, MF_ERANGE,
                        "This model's maximum context length is %d tokens; the prompt has %zu",
                        (int)s->n_ctx, g->prompt.n);
        goto fail;
    }
    {
        int64_t mt = g->rq.max_tokens;
        int64_t room = s->n_ctx - (int64_t)g->prompt.n;
        if (mt < 0 && (g->rq.opts.set & SO_NUM_PREDICT))
            mt = g->rq.opts.num_predict;
        else if (mt < 0 && (s->defaults.set & SO_NUM_PREDICT))
            mt = s->defaults.num_predict;
        if (mt <= 0 || mt > room) /* -1, -2: until the context is full */
            mt = room;
        g->max_tokens = (int32_t)mt;
    }
    if ((rc = pick_grammar(g, err)))
        goto fail;
    const struct serve_opts *so = g->rq.opts.stops_set ? &g->rq.opts : &s->defaults;
    for (int i = 0; i < g->rq.n; i++) {
        struct serve_choice *c = &g->ch[i];
        struct sampler *smp = NULL;
        mf_buf_init(&c->acc, GEN_TEXT_MAX);
        mf_buf_init(&c->delta, GEN_TEXT_MAX);
        mf_buf_init(&c->held, GEN_TEXT_MAX);
        c->tmode = g->tools_on ? (g->rq.tool_choice >= SERVE_TOOLS_REQUIRED ? 1 : 0) : 2;
        tok_ids_init(&c->out, (size_t)s->n_ctx);
        g->n = i + 1;
        if ((rc = engine_text_init(&c->text, s->tok, 0,
                                   (const char *const *)so->stops, (size_t)so->n_stops, err)))
            goto fail;
        if ((rc = make_sampler(g, i, &smp, err))) {
            rc = MF_EINVAL;
            goto fail;
        }
        if (g->gram && (rc = sampler_set_grammar(smp, g->gram, (int32_t)g->prompt.n, err))) {
            sampler_free(smp);
            goto fail;
        }
        const struct serve_opts *sp = (g->rq.opts.set & SO_SPECULATIVE) ? &g->rq.opts
                                                                          : &s->defaults;
        struct engine_request er = {.prompt = g->prompt.v,
                                    .n_prompt = (int32_t)g->prompt.n,
                                    .max_tokens = g->max_tokens,
                                    .ignore_eos = g->rq.ignore_eos,
                                    .no_spec = (sp->set & SO_SPECULATIVE) && !sp->speculative,
                                    .lora = lora,
                                    .sampling = smp,
                                    .notify = on_notify,
                                    .user = g};
        rc = engine_submit(s->e, &er, &c->id, err);
        if (rc) {
            sampler_free(smp);
            goto fail;
        }
        c->live = 1;
    }
    *out = g;
    return 0;
fail:
    *status = status_for(rc);
    gen_free(g);
    return rc;
}

int serve_gen_tokens(struct serve *s, struct serve_req *rq, struct tok_ids *out,
                     struct mf_err *err)
{
    struct serve_gen *g = gen_new(s, rq);
    if (!g) {
        serve_req_free(rq);
        return mf_err_set(err, MF_ENOMEM, "out of memory");
    }
    int rc = build_prompt(g, err);
    *out = g->prompt;
    memset(&g->prompt, 0, sizeof g->prompt);
    gen_free(g);
    return rc;
}

/* ---- events ---- */

static int is_stream(const struct serve_gen *g)
{
    return g->rq.stream;
}

/* A forced call streamed to an OpenAI chat client goes out as it is written. */
static int progressive(const struct serve_gen *g)
{
    return g->rq.stream && g->rq.api == SERVE_OAI_CHAT &&
           g->rq.tool_choice >= SERVE_TOOLS_REQUIRED;
}

/* Tools: routes the released text of choice c. Undecided text is held
 * until it shows whether it starts a call; a call is held whole; plain
 * text passes. At the end the held call is parsed, or released as text. */
static void tools_route(struct serve_gen *g, struct serve_choice *c, int final)
{
    if (c->tmode == 2)
        return;
    mf_buf_append(&c->held, c->delta.data ? c->delta.data : "", c->delta.len, NULL);
    mf_buf_reset(&c->delta);
    if (c->tmode == 0) {
        int st = serve_tools_starts(g->tfmt, c->held.data ? c->held.data : "", c->held.len);
        if (st > 0)
            c->tmode = 1;
        else if (st < 0)
            c->tmode = 2;
    }
    if (final && c->tmode != 2) {
        c->calls = serve_tools_parse(g->tfmt, c->held.data ? c->held.data : "", c->held.len,
                                     g->rq.tools, &c->call_text);
        if (!c->calls && !progressive(g))
            c->tmode = 2; /* a forced call cut short stays a (cut) call */
    }
    if (c->tmode == 2 && c->held.len) { /* release what was held */
        mf_buf_append(&c->delta, c->held.data, c->held.len, NULL);
        mf_buf_reset(&c->held);
    }
}

/* A control token that writes the template's call opening (Mistral's
 * [TOOL_CALLS]) is text the tool parser must see, though the detokenizer
 * drops control tokens. */
static void tool_marker(struct serve_gen *g, struct serve_choice *c, int32_t tok)
{
    size_t n = 0;
    const char *t;
    if (!g->tfmt->open[0] || tok_token_type(g->s->tok, tok) != TOK_TYPE_CONTROL)
        return;
    t = tok_token_text(g->s->tok, tok, &n);
    if (t && n == strlen(g->tfmt->open) && !memcmp(t, g->tfmt->open, n))
        mf_buf_append(&c->delta, t, n, NULL);
}

static void on_event(struct serve_gen *g, int i, struct engine_event *ev)
{
    struct serve_choice *c = &g->ch[i];
    struct mf_err err;
    int counted = 0;
    int oai = g->rq.api == SERVE_OAI_CHAT || g->rq.api == SERVE_OAI_COMPLETION;
    mf_buf_reset(&c->delta);
    /* tokens the engine made after a stop string matched (it may have run
     * ahead of this reader) are not part of the answer */
    if (ev->token >= 0 && !c->text.stopped) {
        counted = 1;
        tok_ids_push(&c->out, ev->token, NULL);
        if (engine_text_feed(&c->text, ev->token, &c->delta, &err) == 1)
            engine_stop(g->s->e, c->id, NULL);
        else if (g->tools_on)
            tool_marker(g, c, ev->token);
    }
    if (g->tools_on && ev->finish == SCHED_FINISH_NONE)
        tools_route(g, c, 0);
    if (ev->finish != SCHED_FINISH_NONE) {
        engine_text_finish(&c->text, &c->delta, &err);
        c->finish = c->text.stopped ? SCHED_FINISH_STOP : ev->finish;
        c->live = 0;
        if (g->tools_on)
            tools_route(g, c, 1);
        if (ev->finish == SCHED_FINISH_ERROR && !g->failed) {
            g->failed = 1;
            g->err = c->sum.err;
        }
    }
    if (!is_stream(g)) {
        if (oai && g->rq.logprobs && counted)
            oai_collect_logprobs(g, i, ev);
        mf_buf_append(&c->acc, c->delta.data ? c->delta.data : "", c->delta.len, NULL);
        return;
    }
    if (oai) {
        if (c->delta.len || (g->rq.logprobs && counted))
            oai_chunk(g, i, ev);
        if (g->tools_on && progressive(g))
            oai_tool_progress(g, i, ev->finish != SCHED_FINISH_NONE);
        if (ev->finish != SCHED_FINISH_NONE) {
            if (c->calls && !progressive(g))
                oai_tool_chunks(g, i);
            oai_final_chunk(g, i);
        }
    } else {
        if (c->delta.len)
            ollama_chunk(g, i);
        if (ev->finish != SCHED_FINISH_NONE && c->calls)
            ollama_tool_chunk(g);
    }
}

int serve_gen_pump(struct serve_gen *g, int timeout_ms)
{
    int all_done = 1;
    for (int i = 0; i < g->n; i++)
        all_done &= !g->ch[i].live;
    if (all_done)
        return 1;
    pthread_mutex_lock(&g->mu);
    if (!g->pending && timeout_ms > 0) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += (long)timeout_ms * 1000000L;
        ts.tv_sec += ts.tv_nsec / 1000000000L;
        ts.tv_nsec %= 1000000000L;
        while (!g->pending && pthread_cond_timedwait(&g->cv, &g->mu, &ts) != ETIMEDOUT)
            ;
    }
    g->pending = 0;
    pthread_mutex_unlock(&g->mu);
    all_done = 1;
    for (int i = 0; i < g->n; i++) {
        struct serve_choice *c = &g->ch[i];
        while (c->live) {
            struct engine_event ev;
            struct mf_err err;
            int rc = engine_next(g->s->e, c->id, 0, &ev, &c->sum, &err);
            if (rc == MF_EBUSY)
                break;
            if (rc) { /* unknown id: treat as an engine error */
                c->live = 0;
                c->finish = SCHED_FINISH_ERROR;
                g->failed = 1;
                g->err = err;
                break;
            }
            on_event(g, i, &ev);
        }
        all_done &= !c->live;
    }
    return all_done;
}

void serve_gen_close_stream(struct serve_gen *g)
{
    if (g->finals_sent)
        return;
    g->finals_sent = 1;
    if (g->rq.api == SERVE_OAI_CHAT || g->rq.api == SERVE_OAI_COMPLETION)
        oai_close(g);
    else
        ollama_close(g);
}

json_t *serve_gen_response(struct serve_gen *g)
{
    if (g->rq.api == SERVE_OAI_CHAT || g->rq.api == SERVE_OAI_COMPLETION)
        return oai_response(g);
    return ollama_response(g);
}

void serve_gen_counts(const struct serve_gen *g, int *prompt, int *completion,
                      const char **finish)
{
    *prompt = (int)g->prompt.n;
    *completion = 0;
    *finish = g->n ? serve_finish_name(g->ch[0].finish) : "load";
    for (int i = 0; i < g->n; i++)
        *completion += (int)g->ch[i].out.n;
}

void serve_gen_spec_counts(const struct serve_gen *g, uint64_t *proposed, uint64_t *accepted)
{
    *proposed = *accepted = 0;
    for (int i = 0; i < g->n; i++) {
        *proposed += g->ch[i].sum.n_proposed;
        *accepted += g->ch[i].sum.n_accepted;
    }
}
