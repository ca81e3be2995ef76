/*
 * params.c: the one table of parameter limits (params.h).
 *
 * The ranges are what mfc-serve's sampler and scheduler accept. temperature
 * and the presence/frequency penalties use OpenAI's ranges (0 to 2, -2 to 2)
 * on every route: a Modelfile or an Ollama request asking for temperature 5
 * gets the same answer as an OpenAI client, rather than a sampler that turns
 * text into noise. num_ctx and num_predict stop at 16M tokens (no model has
 * more context); top_k at 1M (the largest vocabularies are ~260k); -1 in
 * top_k and repeat_last_n means "the whole vocabulary / context", as in
 * llama.cpp. Owns only constant data.
 */
#include "common/params.h"

#include <math.h>
#include <string.h>

#include "common/limits.h"

#define MAX_TOKENS_LIMIT 16777216.0 /* 1 << 24 */

static const struct mf_param_limit limits[] = {
    {"temperature", 0, 2, 0},
    {"top_p", 0, 1, 0},
    {"min_p", 0, 1, 0},
    {"typical_p", 0, 1, 0},
    {"repeat_penalty", 0, 100, 0},
    {"presence_penalty", -2, 2, 0},
    {"frequency_penalty", -2, 2, 0},
    {"top_k", -1, 1048576, 1},
    {"repeat_last_n", -1, 1048576, 1},
    {"num_ctx", 0, MAX_TOKENS_LIMIT, 1},
    {"num_predict", -2, MAX_TOKENS_LIMIT, 1},
    {"num_keep", -1, MAX_TOKENS_LIMIT, 1},
    {"num_batch", 1, MAX_TOKENS_LIMIT, 1},
    {"num_thread", 0, 4096, 1},
    /* mfc's speculative decoding (docs/spec.md): the verify rows mfc-serve sizes */
    {"draft_max", 1, MF_SPEC_DRAFT_MAX, 1},
    {"draft_min", 0, MF_SPEC_DRAFT_MAX, 1},
    {"draft_p_min", 0, 1, 0},
    {"lookup_ngram", 1, MF_SPEC_NGRAM_MAX, 1},
    {"lookup_ngram_min", 1, MF_SPEC_NGRAM_MAX, 1},
    /* INT64_MIN exactly; the top stays below 2^63, which a double cannot hold as int64 */
    {"seed", -9223372036854775808.0, 9.2e18, 1},
};

const struct mf_param_limit *mf_params_find(const char *name)
{
    for (size_t i = 0; i < sizeof limits / sizeof limits[0]; i++)
        if (strcmp(limits[i].name, name) == 0)
            return &limits[i];
    return NULL;
}

int mf_params_check(const char *field, const char *name, double v, struct mf_err *err)
{
    const struct mf_param_limit *l = mf_params_find(name);
    if (!l)
        return 0;
    if (l->integer && isfinite(v) && v != floor(v))
        return mf_err_set(err, MF_EINVAL, "'%s' must be a whole number", field);
    if (!isfinite(v) || v < l->lo || v > l->hi)
        return mf_err_set(err, MF_EINVAL, "'%s' is %g; allowed %g to %g", field, v, l->lo, l->hi);
    return 0;
}
