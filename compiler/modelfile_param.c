/*
 * modelfile_param.c: Ollama's PARAMETER table, "did you mean" suggestions,
 * and the semver check REQUIRES needs.
 *
 * The table mirrors the json tags of api.Options/api.Runner in Ollama's
 * api/types.go (FormatParams builds its map from them by reflection) and
 * the deprecatedParameters list in parser/parser.go. Names are matched
 * exactly (case-sensitive), as FormatParams does. mfc's own parameters
 * (speculative decoding) follow; their ranges are in common/params.c with
 * everyone else's. Owns only constant data.
 */
#include "compiler/modelfile_int.h"

#include <ctype.h>
#include <string.h>

static const struct mf_param_def params[] = {
    {"num_ctx", MF_PARAM_INT, "0 (auto; OLLAMA_CONTEXT_LENGTH)"},
    {"num_batch", MF_PARAM_INT, "512"},
    {"num_gpu", MF_PARAM_INT, "-1 (auto)"},
    {"main_gpu", MF_PARAM_INT, "unset"},
    {"use_mmap", MF_PARAM_BOOL, "unset (auto)"},
    {"num_thread", MF_PARAM_INT, "0 (auto)"},
    {"draft_num_predict", MF_PARAM_INT, "4"},
    {"num_keep", MF_PARAM_INT, "4"},
    {"seed", MF_PARAM_INT, "-1 (random)"},
    {"num_predict", MF_PARAM_INT, "-1 (no limit)"},
    {"top_k", MF_PARAM_INT, "40"},
    {"top_p", MF_PARAM_FLOAT, "0.9"},
    {"min_p", MF_PARAM_FLOAT, "0"},
    {"typical_p", MF_PARAM_FLOAT, "1.0"},
    {"repeat_last_n", MF_PARAM_INT, "64"},
    {"temperature", MF_PARAM_FLOAT, "0.8"},
    {"repeat_penalty", MF_PARAM_FLOAT, "1.0"},
    {"presence_penalty", MF_PARAM_FLOAT, "0"},
    {"frequency_penalty", MF_PARAM_FLOAT, "0"},
    {"stop", MF_PARAM_STRING, "none"},
    /* mfc: speculative decoding (docs/modelfile.md, DRAFT) */
    {"speculative", MF_PARAM_BOOL, "true"},
    {"draft_max", MF_PARAM_INT, "8"},
    {"draft_min", MF_PARAM_INT, "1"},
    {"draft_p_min", MF_PARAM_FLOAT, "0.75"},
    {"lookup_ngram", MF_PARAM_INT, "3"},
    {"lookup_ngram_min", MF_PARAM_INT, "2"},
    /* parser.go deprecatedParameters: warned about and dropped */
    {"penalize_newline", MF_PARAM_DEPRECATED, NULL},
    {"low_vram", MF_PARAM_DEPRECATED, NULL},
    {"f16_kv", MF_PARAM_DEPRECATED, NULL},
    {"logits_all", MF_PARAM_DEPRECATED, NULL},
    {"vocab_only", MF_PARAM_DEPRECATED, NULL},
    {"use_mlock", MF_PARAM_DEPRECATED, NULL},
    {"mirostat", MF_PARAM_DEPRECATED, NULL},
    {"mirostat_tau", MF_PARAM_DEPRECATED, NULL},
    {"mirostat_eta", MF_PARAM_DEPRECATED, NULL},
};
#define N_PARAMS (sizeof params / sizeof params[0])

const struct mf_param_def *mf_modelfile_param_find(const char *name)
{
    for (size_t i = 0; i < N_PARAMS; i++)
        if (strcmp(params[i].name, name) == 0)
            return &params[i];
    return NULL;
}

const struct mf_param_def *mf_modelfile_param_table(size_t *n)
{
    *n = N_PARAMS;
    return params;
}

/* Levenshtein distance, case-insensitive, of words up to 64 bytes (longer
 * ones are cut: they are no keyword's typo anyway). */
static size_t distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    size_t row[65];
    la = la > 64 ? 64 : la;
    lb = lb > 64 ? 64 : lb;
    for (size_t j = 0; j <= lb; j++)
        row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j];
            size_t cost = tolower((unsigned char)a[i - 1]) != tolower((unsigned char)b[j - 1]);
            size_t best = diag + cost;
            if (up + 1 < best)
                best = up + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

const char *mf_modelfile_suggest(const char *word, const char *const *cands, size_t n)
{
    size_t len = strlen(word);
    size_t limit = len <= 3 ? 1 : len <= 8 ? 2 : 3;
    const char *best = NULL;
    size_t best_d = limit + 1;
    for (size_t i = 0; i < n; i++) {
        size_t d = distance(word, cands[i]);
        if (d < best_d) {
            best_d = d;
            best = cands[i];
        }
    }
    return best;
}

const char *mf_modelfile_param_suggest(const char *word)
{
    const char *names[N_PARAMS];
    size_t n = 0;
    for (size_t i = 0; i < N_PARAMS; i++)
        if (params[i].type != MF_PARAM_DEPRECATED)
            names[n++] = params[i].name;
    return mf_modelfile_suggest(word, names, n);
}

/* ------------------------------------------------------------------ semver */

/* x/mod/semver parseInt: digits, no leading zero. Returns the length or 0. */
static size_t sv_int(const char *s)
{
    size_t i = 0;
    while (s[i] >= '0' && s[i] <= '9')
        i++;
    if (i == 0 || (s[0] == '0' && i != 1))
        return 0;
    return i;
}

static int sv_ident_char(char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '-';
}

/* A numeric identifier with a leading zero ("01"), invalid in a prerelease. */
static int sv_bad_num(const char *s, size_t n)
{
    size_t i = 0;
    while (i < n && s[i] >= '0' && s[i] <= '9')
        i++;
    return i == n && i > 1 && s[0] == '0';
}

/* Dot-separated identifiers after '-' or '+', up to stop. Returns the length
 * consumed (including the lead character) or 0. */
static size_t sv_idents(const char *s, char stop, int check_num)
{
    size_t i = 1, start = 1;
    for (; s[i] && s[i] != stop; i++) {
        if (!sv_ident_char(s[i]) && s[i] != '.')
            return 0;
        if (s[i] == '.') {
            if (start == i || (check_num && sv_bad_num(s + start, i - start)))
                return 0;
            start = i + 1;
        }
    }
    if (start == i || (check_num && sv_bad_num(s + start, i - start)))
        return 0;
    return i;
}

int mf_modelfile_semver_ok(const char *s)
{
    for (int part = 0; part < 3; part++) {
        size_t n = sv_int(s);
        if (n == 0)
            return 0;
        s += n;
        if (*s == '\0' && part < 2)
            return 1; /* "1" and "1.2" are valid shorthands */
        if (part < 2 && *s++ != '.')
            return 0;
    }
    if (*s == '-') {
        size_t n = sv_idents(s, '+', 1);
        if (n == 0)
            return 0;
        s += n;
    }
    if (*s == '+') {
        size_t n = sv_idents(s, '\0', 0);
        if (n == 0)
            return 0;
        s += n;
    }
    return *s == '\0';
}
