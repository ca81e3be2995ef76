/*
 * serve_req.c: request bodies of the four generation endpoints (OpenAI chat
 * and completions, Ollama generate and chat) parsed into one struct
 * serve_req, and Ollama option objects into struct serve_opts.
 *
 * Untrusted input: the body goes through mf_json_parse (size cap, duplicate
 * keys refused); every field is type- and range-checked and a failure names
 * the field the way the client wrote it ("'messages[1].content' must be a
 * string"), which the HTTP layer returns as a 400. Unknown fields are
 * ignored, as OpenAI and Ollama servers do.
 */
#include "runtime/serve/serve.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/json.h"
#include "common/params.h"

#define REQ_MAX_BODY (64u << 20)
#define REQ_MAX_TOKENS (1u << 20) /* token ids in a prompt or context */

/* ---- options ---- */

static int int_field(const json_t *v, const char *what, const char *key, int64_t lo, int64_t hi,
                     int64_t *out, struct mf_err *err)
{
    double d;
    if (json_is_real(v)) { /* 40.0 is fine, 40.5 is not */
        d = json_real_value(v);
        if (d != floor(d))
            return mf_err_set(err, MF_EINVAL, "'%s%s' must be a whole number", what, key);
        if (d < (double)lo || d > (double)hi)
            return mf_err_set(err, MF_EINVAL, "'%s%s' is %g; allowed %lld to %lld", what, key, d,
                              (long long)lo, (long long)hi);
        *out = (int64_t)d;
        return 0;
    }
    if (!json_is_integer(v))
        return mf_err_set(err, MF_EINVAL, "'%s%s' must be an integer", what, key);
    json_int_t i = json_integer_value(v);
    if (i < lo || i > hi)
        return mf_err_set(err, MF_EINVAL, "'%s%s' is %lld; allowed %lld to %lld", what, key,
                          (long long)i, (long long)lo, (long long)hi);
    *out = i;
    return 0;
}

int serve_opts_add_stop(struct serve_opts *o, const char *s, const char *what, struct mf_err *err)
{
    if (o->n_stops >= SERVE_MAX_STOPS)
        return mf_err_set(err, MF_EINVAL, "'%s' has more than %d stop strings", what,
                          SERVE_MAX_STOPS);
    size_t n = strlen(s);
    if (n == 0 || n > SERVE_MAX_STOP_LEN)
        return mf_err_set(err, MF_EINVAL, "'%s' holds a stop string of %zu bytes (allowed 1..%d)",
                          what, n, SERVE_MAX_STOP_LEN);
    if (!(o->stops[o->n_stops] = strdup(s)))
        return mf_err_set(err, MF_ENOMEM, "out of memory");
    o->n_stops++;
    return 0;
}

void serve_opts_free(struct serve_opts *o)
{
    for (int i = 0; i < o->n_stops; i++)
        free(o->stops[i]);
    o->n_stops = 0;
}

/* stop: a string or an array of strings; replaces earlier stops. */
static int stops_field(struct serve_opts *o, const json_t *v, const char *what, struct mf_err *err)
{
    size_t i;
    json_t *x;
    serve_opts_free(o);
    o->stops_set = 1;
    if (json_is_null(v))
        return 0;
    if (json_is_string(v))
        return json_string_length(v) ? serve_opts_add_stop(o, json_string_value(v), what, err)
                                     : 0;
    if (!json_is_array(v))
        return mf_err_set(err, MF_EINVAL, "'%s' must be a string or an array of strings", what);
    json_array_foreach (v, i, x) {
        if (!json_is_string(x))
            return mf_err_set(err, MF_EINVAL, "'%s[%zu]' must be a string", what, i);
        int rc = serve_opts_add_stop(o, json_string_value(x), what, err);
        if (rc)
            return rc;
    }
    return 0;
}

struct opt_spec {
    const char *key;
    unsigned bit;
    size_t off; /* float or int32/int64 field */
    int kind;   /* 0 float, 1 int32, 2 int64; the range is common/params.c's */
};

#define OFF(f) offsetof(struct serve_opts, f)
static const struct opt_spec opt_specs[] = {
    {"temperature", SO_TEMPERATURE, OFF(temperature), 0},
    {"top_p", SO_TOP_P, OFF(top_p), 0},
    {"min_p", SO_MIN_P, OFF(min_p), 0},
    {"typical_p", SO_TYPICAL_P, OFF(typical_p), 0},
    {"repeat_penalty", SO_REPEAT_PENALTY, OFF(repeat_penalty), 0},
    {"presence_penalty", SO_PRESENCE, OFF(presence), 0},
    {"frequency_penalty", SO_FREQUENCY, OFF(frequency), 0},
    {"top_k", SO_TOP_K, OFF(top_k), 1},
    {"repeat_last_n", SO_REPEAT_LAST_N, OFF(repeat_last_n), 1},
    {"num_ctx", SO_NUM_CTX, OFF(num_ctx), 1},
    {"seed", SO_SEED, OFF(seed), 2},
    {"num_predict", SO_NUM_PREDICT, OFF(num_predict), 2},
};

/* One known option key into o, checked against common/params.c's table;
 * field names it in messages as the client wrote it ("options.top_p",
 * "repetition_penalty"). 1 when key is not an option. */
static int opt_set(struct serve_opts *o, const char *key, const json_t *v, const char *field,
                   struct mf_err *err)
{
    if (!strcmp(key, "stop"))
        return stops_field(o, v, field, err);
    if (!strcmp(key, "speculative")) { /* mfc: speculative decoding on or off */
        if (json_is_null(v))
            return 0;
        if (!json_is_boolean(v))
            return mf_err_set(err, MF_EINVAL, "'%s' must be true or false", field);
        o->speculative = json_is_true(v);
        o->set |= SO_SPECULATIVE;
        return 0;
    }
    for (size_t i = 0; i < sizeof opt_specs / sizeof opt_specs[0]; i++) {
        const struct opt_spec *sp = &opt_specs[i];
        if (strcmp(key, sp->key))
            continue;
        if (json_is_null(v))
            return 0;
        if (!json_is_number(v))
            return mf_err_set(err, MF_EINVAL, "'%s' must be a number", field);
        double d = json_number_value(v);
        int rc = mf_params_check(field, key, d, err);
        if (rc)
            return rc;
        char *base = (char *)o + sp->off;
        if (sp->kind == 0)
            *(float *)(void *)base = (float)d;
        else if (sp->kind == 1)
            *(int32_t *)(void *)base = (int32_t)d;
        else /* an integer keeps every bit of a 64-bit seed */
            *(int64_t *)(void *)base = json_is_integer(v) ? json_integer_value(v) : (int64_t)d;
        o->set |= sp->bit;
        return 0;
    }
    return 1;
}

int serve_opts_from_json(struct serve_opts *o, const json_t *obj, const char *what,
                         struct mf_err *err)
{
    const char *k;
    json_t *v;
    if (!obj || json_is_null(obj))
        return 0;
    if (!json_is_object(obj))
        return mf_err_set(err, MF_EINVAL, "'%s' must be an object", what);
    char field[128];
    json_object_foreach ((json_t *)obj, k, v) {
        snprintf(field, sizeof field, "%s.%s", what, k);
        int rc = opt_set(o, k, v, field, err);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* ---- requests ---- */

void serve_req_free(struct serve_req *rq)
{
    free(rq->model);
    free(rq->prompt);
    free(rq->suffix);
    free(rq->system);
    free(rq->template_src);
    for (size_t i = 0; i < rq->n_msgs; i++) {
        free(rq->msgs[i].role);
        free(rq->msgs[i].content);
        json_decref(rq->msgs[i].tool_calls);
        free(rq->msgs[i].tool_call_id);
        free(rq->msgs[i].tool_name);
    }
    free(rq->msgs);
    free(rq->tokens);
    serve_opts_free(&rq->opts);
    free(rq->grammar);
    json_decref(rq->tools);
    free(rq->tool_name);
    memset(rq, 0, sizeof *rq);
}

static int str_field(const json_t *body, const char *key, char **out, struct mf_err *err)
{
    json_t *v = json_object_get(body, key);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_string(v))
        return mf_err_set(err, MF_EINVAL, "'%s' must be a string", key);
    if (!(*out = strdup(json_string_value(v))))
        return mf_err_set(err, MF_ENOMEM, "out of memory");
    return 0;
}

static int bool_field(const json_t *body, const char *key, int *out, struct mf_err *err)
{
    json_t *v = json_object_get(body, key);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_boolean(v))
        return mf_err_set(err, MF_EINVAL, "'%s' must be true or false", key);
    *out = json_is_true(v);
    return 0;
}

/* A token id array into rq->tokens. */
static int tokens_field(struct serve_req *rq, const json_t *v, const char *what,
                        struct mf_err *err)
{
    size_t i, n = json_array_size(v);
    json_t *x;
    if (n > REQ_MAX_TOKENS)
        return mf_err_set(err, MF_EINVAL, "'%s' has more than %u tokens", what, REQ_MAX_TOKENS);
    free(rq->tokens);
    rq->tokens = calloc(n ? n : 1, sizeof *rq->tokens);
    rq->n_tokens = 0;
    if (!rq->tokens)
        return mf_err_set(err, MF_ENOMEM, "out of memory");
    json_array_foreach (v, i, x) {
        if (!json_is_integer(x) || json_integer_value(x) < 0 || json_integer_value(x) > INT32_MAX)
            return mf_err_set(err, MF_EINVAL, "'%s[%zu]' must be a token id (an integer >= 0)",
                              what, i);
        rq->tokens[rq->n_tokens++] = (int32_t)json_integer_value(x);
    }
    return 0;
}

/* message content: a string, or OpenAI's array of parts (text parts joined). */
static int content_text(const json_t *c, size_t idx, char **out, struct mf_err *err)
{
    size_t i;
    json_t *p;
    struct mf_buf b;
    if (!c || json_is_null(c)) {
        *out = strdup("");
        return *out ? 0 : mf_err_set(err, MF_ENOMEM, "out of memory");
    }
    if (json_is_string(c)) {
        *out = strdup(json_string_value(c));
        return *out ? 0 : mf_err_set(err, MF_ENOMEM, "out of memory");
    }
    if (!json_is_array(c))
        return mf_err_set(err, MF_EINVAL,
                          "'messages[%zu].content' must be a string or an array of parts", idx);
    mf_buf_init(&b, REQ_MAX_BODY);
    json_array_foreach (c, i, p) {
        const char *type = json_string_value(json_object_get(p, "type"));
        json_t *text = json_object_get(p, "text");
        if (!type || strcmp(type, "text") || !json_is_string(text)) {
            mf_buf_free(&b);
            return mf_err_set(err, MF_EINVAL,
                              "'messages[%zu].content[%zu]' must be {\"type\": \"text\", "
                              "\"text\": string} (only text parts are supported)",
                              idx, i);
        }
        if (mf_buf_puts(&b, json_string_value(text), err)) {
            mf_buf_free(&b);
            return err->code;
        }
    }
    *out = mf_buf_take(&b);
    return *out ? 0 : mf_err_set(err, MF_ENOMEM, "out of memory");
}

static int messages_field(struct serve_req *rq, const json_t *body, struct mf_err *err)
{
    json_t *v = json_object_get(body, "messages");
    size_t i;
    json_t *m;
    if (!v || json_is_null(v)) {
        if (rq->api == SERVE_OLLAMA_CHAT)
            return 0; /* Ollama: an empty chat loads the model */
        return mf_err_set(err, MF_EINVAL, "'messages' is required");
    }
    if (!json_is_array(v))
        return mf_err_set(err, MF_EINVAL, "'messages' must be an array");
    if (json_array_size(v) == 0 && rq->api == SERVE_OAI_CHAT)
        return mf_err_set(err, MF_EINVAL, "'messages' must not be empty");
    if (json_array_size(v) > SERVE_MAX_MSGS)
        return mf_err_set(err, MF_EINVAL, "'messages' has more than %d entries", SERVE_MAX_MSGS);
    rq->msgs = calloc(json_array_size(v) + 1, sizeof *rq->msgs);
    if (!rq->msgs)
        return mf_err_set(err, MF_ENOMEM, "out of memory");
    json_array_foreach (v, i, m) {
        json_t *role = json_object_get(m, "role");
        if (!json_is_object(m))
            return mf_err_set(err, MF_EINVAL, "'messages[%zu]' must be an object", i);
        if (!json_is_string(role))
            return mf_err_set(err, MF_EINVAL, "'messages[%zu].role' must be a string", i);
        const char *r = json_string_value(role);
        if (strcmp(r, "system") && strcmp(r, "user") && strcmp(r, "assistant") &&
            strcmp(r, "tool") && strcmp(r, "developer"))
            return mf_err_set(err, MF_EINVAL,
                              "'messages[%zu].role' is \"%.40s\"; expected system, user, "
                              "assistant or tool",
                              i, r);
        struct serve_msg *sm = &rq->msgs[rq->n_msgs];
        if (!(sm->role = strdup(strcmp(r, "developer") ? r : "system")))
            return mf_err_set(err, MF_ENOMEM, "out of memory");
        rq->n_msgs++;
        int rc = content_text(json_object_get(m, "content"), i, &sm->content, err);
        if (rc)
            return rc;
    }
    return 0;
}

/* OpenAI's sampling fields at the top level, named as OpenAI/vLLM name them;
 * their ranges are the Ollama options' (common/params.c), so both routes
 * refuse the same values with the same sentence. */
static int oai_sampling(struct serve_req *rq, const json_t *body, struct mf_err *err)
{
    static const struct {
        const char *oai, *ollama;
    } map[] = {
        {"temperature", "temperature"},
        {"top_p", "top_p"},
        {"top_k", "top_k"},
        {"min_p", "min_p"},
        {"seed", "seed"},
        {"presence_penalty", "presence_penalty"},
        {"frequency_penalty", "frequency_penalty"},
        {"repetition_penalty", "repeat_penalty"},
        {"stop", "stop"},
    };
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++) {
        json_t *v = json_object_get(body, map[i].oai);
        if (!v)
            continue;
        int rc = opt_set(&rq->opts, map[i].ollama, v, map[i].oai, err);
        if (rc < 0)
            return rc;
    }
    return 0;
}

static int oai_fields(struct serve_req *rq, const json_t *body, struct mf_err *err)
{
    json_t *v;
    int64_t x;
    int rc;

    if ((v = json_object_get(body, "n")) && !json_is_null(v)) {
        if ((rc = int_field(v, "", "n", 1, SERVE_MAX_N, &x, err)))
            return rc;
        rq->n = (int)x;
    }
    for (int i = 0; i < 2; i++) {
        const char *k = i ? "max_completion_tokens" : "max_tokens";
        if ((v = json_object_get(body, k)) && !json_is_null(v)) {
            if ((rc = int_field(v, "", k, 1, 1 << 24, &x, err)))
                return rc;
            rq->max_tokens = x;
        }
    }
    if ((rc = bool_field(body, "stream", &rq->stream, err)) ||
        (rc = bool_field(body, "ignore_eos", &rq->ignore_eos, err)))
        return rc;
    /* mfc's extension, as vLLM's and llama.cpp's servers take extra body fields */
    if ((v = json_object_get(body, "speculative")) &&
        (rc = opt_set(&rq->opts, "speculative", v, "speculative", err)) < 0)
        return rc;
    if ((v = json_object_get(body, "stream_options")) && !json_is_null(v)) {
        if (!json_is_object(v))
            return mf_err_set(err, MF_EINVAL, "'stream_options' must be an object");
        json_t *u = json_object_get(v, "include_usage");
        if (u && !json_is_boolean(u) && !json_is_null(u))
            return mf_err_set(err, MF_EINVAL,
                              "'stream_options.include_usage' must be true or false");
        rq->include_usage = json_is_true(u);
    }
    if ((v = json_object_get(body, "logprobs")) && !json_is_null(v)) {
        if (rq->api == SERVE_OAI_CHAT) {
            if (!json_is_boolean(v))
                return mf_err_set(err, MF_EINVAL, "'logprobs' must be true or false");
            rq->logprobs = json_is_true(v);
        } else { /* completions: the number of alternatives */
            if ((rc = int_field(v, "", "logprobs", 0, 5, &x, err)))
                return rc;
            rq->logprobs = 1;
            rq->top_logprobs = (int)x;
        }
    }
    if ((v = json_object_get(body, "top_logprobs")) && !json_is_null(v)) {
        if ((rc = int_field(v, "", "top_logprobs", 0, SAMPLER_MAX_LOGPROBS, &x, err)))
            return rc;
        if (!rq->logprobs && rq->api == SERVE_OAI_CHAT && x > 0)
            return mf_err_set(err, MF_EINVAL, "'top_logprobs' needs 'logprobs': true");
        rq->top_logprobs = (int)x;
    }
    return oai_sampling(rq, body, err);
}

static int oai_prompt(struct serve_req *rq, const json_t *body, struct mf_err *err)
{
    json_t *p = json_object_get(body, "prompt");
    if (!p || json_is_null(p))
        return mf_err_set(err, MF_EINVAL, "'prompt' is required");
    if (json_is_string(p)) {
        rq->prompt = strdup(json_string_value(p));
        return rq->prompt ? 0 : mf_err_set(err, MF_ENOMEM, "out of memory");
    }
    if (!json_is_array(p) || json_array_size(p) == 0)
        return mf_err_set(err, MF_EINVAL,
                          "'prompt' must be a string, an array of one string or an array of "
                          "token ids");
    json_t *first = json_array_get(p, 0);
    if (json_is_string(first)) {
        if (json_array_size(p) != 1)
            return mf_err_set(err, MF_EINVAL, "'prompt' with several strings (batched prompts) "
                                              "is not supported; send one request per prompt");
        rq->prompt = strdup(json_string_value(first));
        return rq->prompt ? 0 : mf_err_set(err, MF_ENOMEM, "out of memory");
    }
    if (json_is_array(first))
        return mf_err_set(err, MF_EINVAL, "'prompt' with several token arrays is not supported");
    return tokens_field(rq, p, "prompt", err);
}

static int ollama_fields(struct serve_req *rq, const json_t *body, struct mf_err *err)
{
    json_t *v;
    int rc;
    rq->stream = 1; /* Ollama streams unless told otherwise */
    if ((rc = bool_field(body, "stream", &rq->stream, err)) ||
        (rc = str_field(body, "template", &rq->template_src, err)))
        return rc;
    if ((rc = serve_opts_from_json(&rq->opts, json_object_get(body, "options"), "options", err)))
        return rc;
    if ((v = json_object_get(body, "keep_alive")) && !json_is_null(v) && !json_is_string(v) &&
        !json_is_number(v))
        return mf_err_set(err, MF_EINVAL, "'keep_alive' must be a duration string or a number");
    if (rq->api == SERVE_OLLAMA_CHAT)
        return messages_field(rq, body, err);
    if ((rc = str_field(body, "prompt", &rq->prompt, err)) ||
        (rc = str_field(body, "suffix", &rq->suffix, err)) ||
        (rc = str_field(body, "system", &rq->system, err)) ||
        (rc = bool_field(body, "raw", &rq->raw, err)))
        return rc;
    if ((v = json_object_get(body, "context")) && !json_is_null(v)) {
        if (!json_is_array(v))
            return mf_err_set(err, MF_EINVAL, "'context' must be an array of token ids");
        if ((rc = tokens_field(rq, v, "context", err)))
            return rc;
    }
    return 0;
}

int serve_json_object(const char *body, size_t len, json_t **out, struct mf_err *err)
{
    json_t *j;
    *out = NULL;
    if (len == 0)
        return mf_err_set(err, MF_EINVAL, "empty request body: expected a JSON object");
    if (!(j = mf_json_parse(body, len, "request body", err)))
        return MF_EINVAL;
    if (!json_is_object(j)) {
        json_decref(j);
        return mf_err_set(err, MF_EINVAL, "request body must be a JSON object");
    }
    *out = j;
    return 0;
}

int serve_req_parse(enum serve_api api, const char *body, size_t len, struct serve_req *rq,
                    struct mf_err *err)
{
    json_t *j;
    int rc;
    memset(rq, 0, sizeof *rq);
    rq->api = api;
    rq->n = 1;
    rq->max_tokens = -1;
    if ((rc = serve_json_object(body, len, &j, err)))
        return rc;
    rc = str_field(j, "model", &rq->model, err);
    if (!rc && (api == SERVE_OAI_CHAT || api == SERVE_OAI_COMPLETION))
        rc = oai_fields(rq, j, err);
    if (!rc && api == SERVE_OAI_CHAT)
        rc = messages_field(rq, j, err);
    if (!rc && api == SERVE_OAI_COMPLETION)
        rc = oai_prompt(rq, j, err);
    if (!rc && (api == SERVE_OLLAMA_GENERATE || api == SERVE_OLLAMA_CHAT))
        rc = ollama_fields(rq, j, err);
    if (!rc)
        rc = serve_req_structured(rq, j, err);
    if (!rc && rq->n > 1 && api != SERVE_OAI_CHAT && api != SERVE_OAI_COMPLETION)
        rc = mf_err_set(err, MF_EINVAL, "'n' is only for the OpenAI endpoints");
    json_decref(j);
    if (rc && err->code != MF_ENOMEM)
        err->code = rc = MF_EINVAL;
    return rc;
}
