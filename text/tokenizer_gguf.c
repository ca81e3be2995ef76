/*
 * tokenizer_gguf.c: tok_load_gguf, which reads the tokenizer.ggml.* keys of
 * an open GGUF into a struct tok_desc and builds the tokenizer from it.
 *
 * Token and merge strings are borrowed views into the GGUF mapping for the
 * length of the call (tok_new copies them); scores and types are decoded
 * into temporary arrays. Keys, their GGUF types and the defaults follow
 * llama.cpp's llama_vocab::impl::load, except that a special id outside the
 * vocabulary is an error here rather than a warning.
 */
#include "text/tokenizer.h"

#include <stdlib.h>
#include <string.h>

#include "common/gguf.h"

/* Arrays decoded for one load; all owned, freed by free_arrays. */
struct loaded {
    struct tok_str *tokens;
    struct tok_str *merges;
    float *scores;
    int32_t *types;
    char model[32];
    char pre[64];
    char name[128];
};

static void free_arrays(struct loaded *l)
{
    free(l->tokens);
    free(l->merges);
    free(l->scores);
    free(l->types);
}

/* Copies an optional string key into out (cut to fit); "" when absent. */
static int get_str(const struct gguf_file *gf, const char *key, char *out, size_t cap,
                   struct mf_err *err)
{
    struct gguf_str s;
    out[0] = '\0';
    int rc = gguf_get_str(gf, key, &s, err);
    if (rc == MF_ENOTFOUND)
        return 0;
    if (rc)
        return rc;
    size_t n = s.len < cap - 1 ? (size_t)s.len : cap - 1;
    memcpy(out, s.p, n);
    out[n] = '\0';
    if (memchr(out, '\0', n))
        return mf_err_set(err, MF_EFORMAT, "%s: %s contains a NUL byte", gguf_name(gf), key);
    return 0;
}

static int is_string_type(uint32_t type)
{
    return type == GGUF_TYPE_STRING;
}

static int is_float_type(uint32_t type)
{
    return type == GGUF_TYPE_FLOAT32 || type == GGUF_TYPE_FLOAT64;
}

static int is_int_type(uint32_t type)
{
    return type <= GGUF_TYPE_INT32 ? type != GGUF_TYPE_FLOAT32
                                   : type == GGUF_TYPE_UINT64 || type == GGUF_TYPE_INT64;
}

/* The array at key when its elements pass elem_ok and there are at most
 * limit of them; *out = NULL when the key is absent. `what` names the
 * element kind in the message. */
static int get_arr(const struct gguf_file *gf, const char *key, int (*elem_ok)(uint32_t),
                   const char *what, uint64_t limit, const struct gguf_array **out,
                   struct mf_err *err)
{
    *out = NULL;
    int rc = gguf_get_arr(gf, key, out, err);
    if (rc == MF_ENOTFOUND) {
        *out = NULL;
        return 0;
    }
    if (rc)
        return rc;
    if (!elem_ok((*out)->type))
        return mf_err_set(err, MF_EFORMAT, "%s: %s is an array of %s, not of %s", gguf_name(gf),
                          key, gguf_type_name((*out)->type), what);
    if ((*out)->n > limit)
        return mf_err_set(err, MF_ENOMEM, "%s: %s has %llu entries (limit %llu)", gguf_name(gf),
                          key, (unsigned long long)(*out)->n, (unsigned long long)limit);
    return 0;
}

/* A string array as tok_str views into the map; *n = 0 when absent. */
static int get_strings(const struct gguf_file *gf, const char *key, struct tok_str **out,
                       uint32_t *n, uint64_t limit, struct mf_err *err)
{
    const struct gguf_array *a;
    int rc = get_arr(gf, key, is_string_type, "strings", limit, &a, err);
    if (rc || !a)
        return rc;
    *out = malloc((a->n + 1) * sizeof **out);
    if (!*out)
        return mf_err_set(err, MF_ENOMEM, "%s: no memory for %s", gguf_name(gf), key);
    for (uint64_t i = 0; i < a->n; i++) {
        struct gguf_str s = gguf_arr_str(a, i);
        (*out)[i] = (struct tok_str){s.p, (size_t)s.len};
    }
    *n = (uint32_t)a->n;
    return 0;
}

static int get_scores(const struct gguf_file *gf, struct loaded *l, struct tok_desc *d,
                      struct mf_err *err)
{
    static const char key[] = "tokenizer.ggml.scores";
    const struct gguf_array *a;
    int rc = get_arr(gf, key, is_float_type, "floats", TOK_MAX_VOCAB, &a, err);
    if (rc || !a)
        return rc;
    l->scores = malloc((a->n + 1) * sizeof *l->scores);
    if (!l->scores)
        return mf_err_set(err, MF_ENOMEM, "%s: no memory for %s", gguf_name(gf), key);
    for (uint64_t i = 0; i < a->n; i++)
        l->scores[i] = a->type == GGUF_TYPE_FLOAT32 ? gguf_arr_f32(a, i) : (float)gguf_arr_f64(a, i);
    d->scores = l->scores;
    d->n_scores = (uint32_t)a->n;
    return 0;
}

static int get_types(const struct gguf_file *gf, struct loaded *l, struct tok_desc *d,
                     struct mf_err *err)
{
    static const char key[] = "tokenizer.ggml.token_type";
    const struct gguf_array *a;
    int rc = get_arr(gf, key, is_int_type, "integers", TOK_MAX_VOCAB, &a, err);
    if (rc || !a)
        return rc;
    l->types = malloc((a->n + 1) * sizeof *l->types);
    if (!l->types)
        return mf_err_set(err, MF_ENOMEM, "%s: no memory for %s", gguf_name(gf), key);
    for (uint64_t i = 0; i < a->n; i++) {
        int64_t v = gguf_arr_int(a, i);
        /* out-of-range values become -1, which tok_new rejects by token index */
        l->types[i] = v >= 0 && v <= 255 ? (int32_t)v : -1;
    }
    d->types = l->types;
    d->n_types = (uint32_t)a->n;
    return 0;
}

/* Special ids and the add_* flags; SPM gets llama.cpp's default ids. */
static int get_ids(const struct gguf_file *gf, struct tok_desc *d, struct mf_err *err)
{
    static const char *const keys[TOK_ID_COUNT] = {
        "tokenizer.ggml.bos_token_id",     "tokenizer.ggml.eos_token_id",
        "tokenizer.ggml.unknown_token_id", "tokenizer.ggml.seperator_token_id",
        "tokenizer.ggml.padding_token_id", "tokenizer.ggml.eot_token_id",
        "tokenizer.ggml.eom_token_id",
    };
    int spm = strcmp(d->model, "llama") == 0;
    const int32_t spm_default[TOK_ID_COUNT] = {1, 2, 0, -1, -1, -1, -1};
    for (int k = 0; k < TOK_ID_COUNT; k++) {
        int64_t v;
        int rc = gguf_get_i64(gf, keys[k], &v, err);
        if (rc == MF_ENOTFOUND) {
            int32_t def = spm ? spm_default[k] : -1;
            d->special[k] = def < (int64_t)d->n_tokens ? def : -1;
            continue;
        }
        if (rc)
            return rc;
        if (v < 0 || v >= (int64_t)d->n_tokens)
            return mf_err_set(err, MF_ERANGE, "%s: %s is %lld, outside the vocabulary (0..%u)",
                              gguf_name(gf), keys[k], (long long)v, d->n_tokens - 1);
        d->special[k] = (int32_t)v;
    }
    static const char *const flags[3] = {"tokenizer.ggml.add_bos_token",
                                         "tokenizer.ggml.add_eos_token",
                                         "tokenizer.ggml.add_space_prefix"};
    int *dst[3] = {&d->add_bos, &d->add_eos, &d->add_space_prefix};
    for (int k = 0; k < 3; k++) {
        int v, rc = gguf_get_bool(gf, flags[k], &v, err);
        if (rc == MF_ENOTFOUND)
            continue;
        if (rc)
            return rc;
        *dst[k] = v != 0;
    }
    return 0;
}

static int fill_desc(const struct gguf_file *gf, struct loaded *l, struct tok_desc *d,
                     struct mf_err *err)
{
    int rc = get_str(gf, "tokenizer.ggml.model", l->model, sizeof l->model, err);
    if (!rc && !l->model[0])
        rc = mf_err_set(err, MF_EFORMAT, "%s: tokenizer.ggml.model is missing", gguf_name(gf));
    if (!rc)
        rc = get_str(gf, "tokenizer.ggml.pre", l->pre, sizeof l->pre, err);
    if (!rc)
        rc = get_str(gf, "general.name", l->name, sizeof l->name, err);
    d->model = l->model;
    d->pre = l->pre;
    d->name = l->name;
    if (!rc)
        rc = get_strings(gf, "tokenizer.ggml.tokens", &l->tokens, &d->n_tokens, TOK_MAX_VOCAB,
                         err);
    if (!rc && d->n_tokens == 0)
        rc = mf_err_set(err, MF_EFORMAT, "%s: tokenizer.ggml.tokens is missing or empty",
                        gguf_name(gf));
    d->tokens = l->tokens;
    if (!rc)
        rc = get_strings(gf, "tokenizer.ggml.merges", &l->merges, &d->n_merges, TOK_MAX_MERGES,
                         err);
    d->merges = l->merges;
    if (!rc && strcmp(l->model, "gpt2") == 0 && !l->merges)
        rc = mf_err_set(err, MF_EFORMAT, "%s: a gpt2 tokenizer needs tokenizer.ggml.merges",
                        gguf_name(gf));
    if (!rc)
        rc = get_scores(gf, l, d, err);
    if (!rc)
        rc = get_types(gf, l, d, err);
    if (!rc)
        rc = get_ids(gf, d, err);
    return rc;
}

int tok_load_gguf(const struct gguf_file *gf, struct tok **out, struct mf_err *err)
{
    struct loaded l;
    struct tok_desc d;
    memset(&l, 0, sizeof l);
    tok_desc_init(&d);
    *out = NULL;
    int rc = fill_desc(gf, &l, &d, err);
    if (!rc) {
        rc = tok_new(&d, out, err);
        if (rc)
            mf_err_prefix(err, "%s", gguf_name(gf));
    }
    free_arrays(&l);
    return rc;
}
