/*
 * fuzz_serve_json.c: libFuzzer target for mfc-serve's untrusted inputs:
 * request bodies (runtime/serve/serve_req.c, all four generation APIs) and
 * model.yaml text (serve_yaml_to_json in runtime/serve/serve_config.c).
 *
 * The first input byte picks the parser (0-3: the API, 4: YAML, 5-7: the
 * embeddings APIs of runtime/serve/serve_embed_req.c); the rest is the body. A
 * parsed request must satisfy the documented ranges (n, stop count and
 * lengths, top_logprobs, token ids; embeddings: 1..SERVE_EMBED_MAX_INPUTS
 * inputs, each a non-empty text or token list, one kind per request); a
 * failed parse must leave a message. Any violation traps. Seeds in
 * corpus/serve_json/.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/serve/serve.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(const struct serve_req *rq)
{
    if (rq->n < 1 || rq->n > SERVE_MAX_N || rq->opts.n_stops > SERVE_MAX_STOPS ||
        rq->top_logprobs < 0 || rq->top_logprobs > SAMPLER_MAX_LOGPROBS)
        __builtin_trap();
    for (int i = 0; i < rq->opts.n_stops; i++) {
        size_t n = strlen(rq->opts.stops[i]);
        if (n == 0 || n > SERVE_MAX_STOP_LEN)
            __builtin_trap();
    }
    for (size_t i = 0; i < rq->n_tokens; i++)
        if (rq->tokens[i] < 0)
            __builtin_trap();
    for (size_t i = 0; i < rq->n_msgs; i++)
        if (!rq->msgs[i].role || !rq->msgs[i].content)
            __builtin_trap();
}

static void check_embed(const struct serve_embed_req *rq)
{
    if (rq->n_in < 1 || rq->n_in > SERVE_EMBED_MAX_INPUTS || !rq->in)
        __builtin_trap();
    for (size_t i = 0; i < rq->n_in; i++) {
        const struct serve_embed_in *in = &rq->in[i];
        if (!in->text == !in->tokens || !in->text != !rq->in[0].text)
            __builtin_trap();
        if (in->text && (in->text_len == 0 || in->n_tokens))
            __builtin_trap();
        if (in->tokens && (in->n_tokens == 0 || in->n_tokens > SERVE_EMBED_MAX_TOKENS))
            __builtin_trap();
        for (size_t j = 0; in->tokens && j < in->n_tokens; j++)
            if (in->tokens[j] < 0)
                __builtin_trap();
    }
    if (rq->api != SERVE_EMBED_OAI && (rq->in[0].tokens || rq->base64 || rq->dimensions != -1))
        __builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct mf_err err;
    if (size < 1 || size > (1u << 20))
        return 0;
    unsigned which = data[0] % 8;
    const char *body = (const char *)data + 1;
    size_t len = size - 1;
    if (which >= 5) {
        struct serve_embed_req er;
        err.msg[0] = '\0';
        if (serve_embed_parse((enum serve_embed_api)(which - 5), body, len, &er, &err) == 0)
            check_embed(&er);
        else if (!err.msg[0])
            __builtin_trap();
        serve_embed_req_free(&er);
        return 0;
    }
    if (which == 4) {
        json_t *j = serve_yaml_to_json(body, len, "fuzz", &err);
        if (!j && !err.msg[0])
            __builtin_trap();
        if (j) {
            struct serve_opts o = {0};
            if (json_is_object(j))
                serve_opts_from_json(&o, json_object_get(j, "params"), "params", &err);
            serve_opts_free(&o);
        }
        json_decref(j);
        return 0;
    }
    struct serve_req rq;
    err.msg[0] = '\0';
    int rc = serve_req_parse((enum serve_api)which, body, len, &rq, &err);
    if (rc == 0)
        check(&rq);
    else if (!err.msg[0])
        __builtin_trap();
    serve_req_free(&rq);
    return 0;
}
