/*
 * serve_embed_req.c: request bodies of the three embeddings endpoints
 * (OpenAI POST /v1/embeddings, Ollama POST /api/embed and the legacy
 * POST /api/embeddings) parsed into one struct serve_embed_req.
 *
 * Untrusted input, handled as serve_req.c handles generation bodies: the
 * body goes through mf_json_parse (size cap, duplicate keys refused), every
 * field is type- and range-checked, and a failure names the field the way
 * the client wrote it ("'input[2]' must be a string"), which the HTTP layer
 * answers with a 400. Unknown fields are ignored. What this file does not
 * know (the vocabulary size, the context length, the model's width) is
 * checked by serve_embed.c against the loaded model.
 *
 * Accepted inputs:
 *   OpenAI  input: "text" | ["text", ...] | [id, ...] | [[id, ...], ...]
 *           encoding_format: "float" (default) | "base64"; dimensions: int
 *   Ollama  input: "text" | ["text", ...]; truncate: bool (default true)
 *   legacy  prompt: "text"
 * An empty string, an empty array or an empty token list is refused.
 */
#include "runtime/serve/serve.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/json.h"

void serve_embed_req_free(struct serve_embed_req *rq)
{
    free(rq->model);
    for (size_t i = 0; i < rq->n_in; i++) {
        free(rq->in[i].text);
        free(rq->in[i].tokens);
    }
    free(rq->in);
    memset(rq, 0, sizeof *rq);
}

/* One text input (v a string) into in; what names it in messages. */
static int text_in(struct serve_embed_in *in, const json_t *v, const char *what,
                   struct mf_err *err)
{
    size_t n = json_string_length(v);
    if (n == 0)
        return mf_err_set(err, MF_EINVAL, "'%s' is an empty string: there is nothing to embed",
                          what);
    if (!(in->text = malloc(n + 1)))
        return mf_err_set(err, MF_ENOMEM, "out of memory");
    memcpy(in->text, json_string_value(v), n);
    in->text[n] = '\0';
    in->text_len = n;
    return 0;
}

/* One token-id list (v an array) into in. */
static int tokens_in(struct serve_embed_in *in, const json_t *v, const char *what,
                     struct mf_err *err)
{
    size_t i, n = json_array_size(v);
    json_t *x;
    if (n == 0)
        return mf_err_set(err, MF_EINVAL, "'%s' is an empty token list: there is nothing to embed",
                          what);
    if (n > SERVE_EMBED_MAX_TOKENS)
        return mf_err_set(err, MF_EINVAL, "'%s' has %zu tokens; at most %u are accepted", what, n,
                          SERVE_EMBED_MAX_TOKENS);
    if (!(in->tokens = calloc(n, sizeof *in->tokens)))
        return mf_err_set(err, MF_ENOMEM, "out of memory");
    json_array_foreach (v, i, x) {
        if (!json_is_integer(x) || json_integer_value(x) < 0 || json_integer_value(x) > INT32_MAX)
            return mf_err_set(err, MF_EINVAL, "'%s[%zu]' must be a token id (an integer >= 0)",
                              what, i);
        in->tokens[in->n_tokens++] = (int32_t)json_integer_value(x);
    }
    return 0;
}

/* The input field: a string, or an array of strings; with tokens_ok also a
 * token list or an array of token lists (OpenAI). */
static int input_field(struct serve_embed_req *rq, const json_t *v, const char *key, int tokens_ok,
                       struct mf_err *err)
{
    const char *kinds = tokens_ok ? "a string, an array of strings, an array of token ids or an "
                                    "array of token-id arrays"
                                  : "a string or an array of strings";
    char what[48];
    size_t i, n;
    json_t *x;
    int rc;

    if (!v || json_is_null(v))
        return mf_err_set(err, MF_EINVAL, "'%s' is required: %s", key, kinds);
    if (json_is_string(v)) {
        if (!(rq->in = calloc(1, sizeof *rq->in)))
            return mf_err_set(err, MF_ENOMEM, "out of memory");
        rq->n_in = 1;
        return text_in(&rq->in[0], v, key, err);
    }
    if (!json_is_array(v))
        return mf_err_set(err, MF_EINVAL, "'%s' must be %s", key, kinds);
    n = json_array_size(v);
    if (n == 0)
        return mf_err_set(err, MF_EINVAL, "'%s' is an empty array: there is nothing to embed", key);
    if (tokens_ok && json_is_integer(json_array_get(v, 0))) { /* one token list */
        if (!(rq->in = calloc(1, sizeof *rq->in)))
            return mf_err_set(err, MF_ENOMEM, "out of memory");
        rq->n_in = 1;
        return tokens_in(&rq->in[0], v, key, err);
    }
    if (n > SERVE_EMBED_MAX_INPUTS)
        return mf_err_set(err, MF_EINVAL, "'%s' has %zu entries; at most %d are accepted", key, n,
                          SERVE_EMBED_MAX_INPUTS);
    if (!(rq->in = calloc(n, sizeof *rq->in)))
        return mf_err_set(err, MF_ENOMEM, "out of memory");
    json_array_foreach (v, i, x) {
        snprintf(what, sizeof what, "%s[%zu]", key, i);
        rq->n_in = i + 1;
        if (json_is_string(x))
            rc = text_in(&rq->in[i], x, what, err);
        else if (tokens_ok && json_is_array(x))
            rc = tokens_in(&rq->in[i], x, what, err);
        else
            rc = mf_err_set(err, MF_EINVAL, "'%s' must be %s", what,
                            tokens_ok ? "a string or an array of token ids" : "a string");
        if (rc)
            return rc;
        /* one kind per request, as OpenAI's schema has it */
        if (i > 0 && !rq->in[i].text != !rq->in[0].text)
            return mf_err_set(err, MF_EINVAL,
                              "'%s' mixes strings and token arrays; send one kind per request",
                              key);
    }
    return 0;
}

static int oai_fields(struct serve_embed_req *rq, const json_t *j, struct mf_err *err)
{
    const json_t *v = json_object_get(j, "encoding_format");
    int rc = input_field(rq, json_object_get(j, "input"), "input", 1, err);
    if (rc)
        return rc;
    if (v && !json_is_null(v)) {
        const char *f = json_string_value(v);
        if (!f || (strcmp(f, "float") && strcmp(f, "base64")))
            return mf_err_set(err, MF_EINVAL,
                              "'encoding_format' must be \"float\" or \"base64\"");
        rq->base64 = !strcmp(f, "base64");
    }
    v = json_object_get(j, "dimensions");
    if (v && !json_is_null(v)) {
        if (!json_is_integer(v) || json_integer_value(v) < 1 ||
            json_integer_value(v) > (1 << 20))
            return mf_err_set(err, MF_EINVAL, "'dimensions' must be a positive integer");
        rq->dimensions = json_integer_value(v);
    }
    return 0;
}

static int ollama_fields(struct serve_embed_req *rq, const json_t *j, struct mf_err *err)
{
    const json_t *v = json_object_get(j, "truncate");
    int rc = input_field(rq, json_object_get(j, "input"), "input", 0, err);
    if (rc)
        return rc;
    if (v && !json_is_null(v)) {
        if (!json_is_boolean(v))
            return mf_err_set(err, MF_EINVAL, "'truncate' must be true or false");
        rq->truncate = json_is_true(v);
    }
    v = json_object_get(j, "options");
    if (v && !json_is_null(v) && !json_is_object(v))
        return mf_err_set(err, MF_EINVAL, "'options' must be an object");
    return 0;
}

static int legacy_fields(struct serve_embed_req *rq, const json_t *j, struct mf_err *err)
{
    const json_t *v = json_object_get(j, "prompt");
    if (!v || json_is_null(v))
        return mf_err_set(err, MF_EINVAL, "'prompt' is required: the text to embed");
    if (!json_is_string(v))
        return mf_err_set(err, MF_EINVAL, "'prompt' must be a string");
    if (!(rq->in = calloc(1, sizeof *rq->in)))
        return mf_err_set(err, MF_ENOMEM, "out of memory");
    rq->n_in = 1;
    return text_in(&rq->in[0], v, "prompt", err);
}

int serve_embed_parse(enum serve_embed_api api, const char *body, size_t len,
                      struct serve_embed_req *rq, struct mf_err *err)
{
    json_t *j, *v;
    int rc;

    memset(rq, 0, sizeof *rq);
    rq->api = api;
    rq->truncate = 1;
    rq->dimensions = -1;
    if ((rc = serve_json_object(body, len, &j, err)))
        return rc;
    v = json_object_get(j, "model");
    if (v && !json_is_null(v)) {
        if (!json_is_string(v))
            rc = mf_err_set(err, MF_EINVAL, "'model' must be a string");
        else if (!(rq->model = strdup(json_string_value(v))))
            rc = mf_err_set(err, MF_ENOMEM, "out of memory");
    }
    if (!rc)
        rc = api == SERVE_EMBED_OAI      ? oai_fields(rq, j, err)
             : api == SERVE_EMBED_OLLAMA ? ollama_fields(rq, j, err)
                                         : legacy_fields(rq, j, err);
    json_decref(j);
    if (rc && err->code != MF_ENOMEM)
        err->code = rc = MF_EINVAL;
    return rc;
}
