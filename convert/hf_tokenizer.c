/*
 * hf_tokenizer.c: tokenizer.json, tokenizer_config.json and chat_template.jinja
 * -> the tokenizer.* GGUF keys, as llama.cpp's converter writes them.
 *
 * Two shapes, chosen by tokenizer.json's model:
 *   byte-level BPE (model.type "BPE" without byte_fallback): as
 *     Model._set_vocab_gpt2 / get_vocab_base: model "gpt2", the pre-tokenizer
 *     name, tokens (added tokens by their content), token types (added tokens
 *     CONTROL when special or looking special, else USER_DEFINED), merges.
 *     llama.cpp names the pre-tokenizer by hashing what the HF tokenizer does
 *     to a test text; without Python we name it by the pre-tokenizer's regex
 *     (the same regexes are what llama.cpp then runs), and refuse one we do not
 *     know rather than write a tokenizer that splits text differently.
 *   SentencePiece-style (BPE with byte_fallback, or Unigram): as
 *     _set_vocab_sentencepiece would from tokenizer.model: model "llama", pre
 *     "default", tokens, scores, types (UNKNOWN for the unk piece, BYTE for
 *     <0xXX>, CONTROL/USER_DEFINED for added tokens). Unigram scores are the
 *     model's; a BPE piece's score is minus the rank of the first merge that
 *     makes it, so llama.cpp's highest-score-first merging picks the merges
 *     in the order HF applies them (sentencepiece's own scores order the same
 *     way).
 * Both pad the list to config.json's vocab_size with "[PAD<i>]" (UNUSED).
 * Then SpecialVocab: bos/eos/unk/sep/pad ids from tokenizer_config.json's
 * *_token looked up among added_tokens, config.json's *_token_id as the
 * fallback, add_bos_token/add_eos_token, the chat template (tokenizer_config
 * first, then chat_template.jinja). We also write eot_token_id when a control
 * token spells an end of turn (<|eot_id|>, <|im_end|>, ...): llama.cpp derives
 * the same id from the text at load time; mfc's runtime reads the key.
 */
#include "convert/hf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/file.h"
#include "common/gguf.h"
#include "common/json.h"

#define HF_TOK_MAX_FILE (512u << 20) /* tokenizer.json is ~10-35 MB for real vocabularies */
#define HF_TOK_MAX_VOCAB (1u << 22)
#define N_SPECIAL 7

enum { TT_NORMAL = 1, TT_UNKNOWN = 2, TT_CONTROL = 3, TT_USER = 4, TT_UNUSED = 5, TT_BYTE = 6 };

static const char *const special_names[N_SPECIAL] = {"bos", "eos", "unk", "sep",
                                                     "pad", "cls", "mask"};
static const char *const special_keys[N_SPECIAL] = {
    "tokenizer.ggml.bos_token_id",     "tokenizer.ggml.eos_token_id",
    "tokenizer.ggml.unknown_token_id", "tokenizer.ggml.seperator_token_id",
    "tokenizer.ggml.padding_token_id", "tokenizer.ggml.cls_token_id",
    "tokenizer.ggml.mask_token_id"};

struct hf_vocab {
    char model[8];  /* "gpt2" or "llama" */
    char pre[32];   /* tokenizer.ggml.pre */
    uint32_t n;     /* tokens */
    char **tokens;  /* owned: n strings (NULL entries never survive build) */
    float *scores;  /* owned: n, or NULL (gpt2) */
    int32_t *types; /* owned: n */
    char **merges;  /* owned: n_merges "a b" strings */
    uint32_t n_merges;
    int64_t special[N_SPECIAL]; /* ids or -1 */
    int order[N_SPECIAL];       /* special types in the order they were found */
    int n_order;
    int64_t eot;         /* -1: none */
    int add[2];          /* add_bos_token, add_eos_token: 1/0, -1 absent */
    int space_prefix;    /* add_space_prefix: 1/0, -1 not written */
    char *chat_template; /* owned or NULL */
};

void hf_vocab_free(struct hf_vocab *v)
{
    if (!v)
        return;
    for (uint32_t i = 0; v->tokens && i < v->n; i++)
        free(v->tokens[i]);
    for (uint32_t i = 0; v->merges && i < v->n_merges; i++)
        free(v->merges[i]);
    free(v->tokens);
    free(v->scores);
    free(v->types);
    free(v->merges);
    free(v->chat_template);
    free(v);
}

uint32_t hf_vocab_size(const struct hf_vocab *v)
{
    return v->n;
}
const char *hf_vocab_model(const struct hf_vocab *v)
{
    return v->model;
}
const char *hf_vocab_pre(const struct hf_vocab *v)
{
    return v->pre;
}
void hf_vocab_set_add_space_prefix(struct hf_vocab *v, int on)
{
    v->space_prefix = on != 0;
}

/* ---- pre-tokenizer names ---- */

#define RE_LLAMA3_A "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
#define RE_LLAMA3_B " ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"

/* Split regexes and the llama.cpp pre-tokenizer that runs the same split. */
static const struct {
    const char *re;
    const char *pre;
} split_names[] = {
    {RE_LLAMA3_A "\\p{N}{1,3}|" RE_LLAMA3_B, "llama-bpe"},
    {RE_LLAMA3_A "\\p{N}|" RE_LLAMA3_B, "qwen2"},
    {RE_GPT2, "gpt-2"},
};

/* Names the pre-tokenizer: a ByteLevel with use_regex (GPT-2's own split),
 * or a Sequence of Split(regex) and a ByteLevel without it. */
static int pre_name(const json_t *pt, const char *what, char *out, size_t cap, struct mf_err *err)
{
    const char *type = json_string_value(json_object_get(pt, "type"));
    const char *re = NULL;
    int byte_level = 0, use_regex = 0;
    if (type && strcmp(type, "ByteLevel") == 0) {
        byte_level = 1;
        use_regex = !json_is_false(json_object_get(pt, "use_regex"));
    } else if (type && strcmp(type, "Sequence") == 0) {
        const json_t *list = json_object_get(pt, "pretokenizers");
        size_t i;
        const json_t *p;
        json_array_foreach(list, i, p)
        {
            const char *t = json_string_value(json_object_get(p, "type"));
            if (t && strcmp(t, "ByteLevel") == 0) {
                byte_level = 1;
                use_regex |= !json_is_false(json_object_get(p, "use_regex"));
            } else if (t && strcmp(t, "Split") == 0 && !re) {
                re = json_string_value(json_object_get(json_object_get(p, "pattern"), "Regex"));
                if (!re)
                    re = "(not a regex)";
            } else {
                re = "(unrecognised)";
            }
        }
    }
    if (byte_level && !re && use_regex) {
        snprintf(out, cap, "gpt-2");
        return 0;
    }
    if (byte_level && re && !use_regex)
        for (size_t i = 0; i < sizeof split_names / sizeof split_names[0]; i++)
            if (strcmp(re, split_names[i].re) == 0) {
                snprintf(out, cap, "%s", split_names[i].pre);
                return 0;
            }
    return mf_err_set(err, MF_EUNSUPPORTED,
                      "%s: the BPE pre-tokenizer is not one mfc recognises (%s%.200s); known: "
                      "Llama 3 (llama-bpe), Qwen2, GPT-2 byte-level",
                      what, re ? "split regex " : "type ",
                      re     ? re
                      : type ? type
                             : "none");
}

/* ---- helpers ---- */

/* llama.cpp's does_token_look_special. */
static int looks_special(const char *t)
{
    size_t n = strlen(t);
#define ENDS(s) (n >= sizeof(s) - 1 && strcmp(t + n - (sizeof(s) - 1), s) == 0)
#define STARTS(s) (strncmp(t, s, sizeof(s) - 1) == 0)
    if (!strcmp(t, "<pad>") || !strcmp(t, "<mask>") || !strcmp(t, "<2mass>") ||
        !strcmp(t, "[@BOS@]"))
        return 1;
    if (STARTS("<|") && ENDS("|>"))
        return 1;
    if (STARTS("<\xef\xbd\x9c") && ENDS("\xef\xbd\x9c>")) /* <｜ ... ｜> */
        return 1;
    return STARTS("<unused") && ENDS(">");
#undef ENDS
#undef STARTS
}

static int is_byte_token(const char *t)
{
    static const char hex[] = "0123456789abcdefABCDEF";
    return strlen(t) == 6 && !strncmp(t, "<0x", 3) && t[5] == '>' && strchr(hex, t[3]) &&
           strchr(hex, t[4]);
}

/* Replaces each U+2581 with a space, in place. */
static void unescape_spaces(char *s)
{
    char *w = s;
    for (const char *r = s; *r;) {
        if (!strncmp(r, "\xe2\x96\x81", 3)) {
            *w++ = ' ';
            r += 3;
        } else {
            *w++ = *r++;
        }
    }
    *w = '\0';
}

static int set_token(struct hf_vocab *v, int64_t id, const char *text, const char *what,
                     struct mf_err *err)
{
    if (id < 0 || id >= v->n)
        return mf_err_set(err, MF_EFORMAT,
                          "%s: token \"%.80s\" has id %lld, outside the vocabulary of %u "
                          "(config.json vocab_size)",
                          what, text, (long long)id, v->n);
    char *dup = strdup(text);
    if (!dup)
        return mf_err_set(err, MF_ENOMEM, "out of memory");
    free(v->tokens[id]);
    v->tokens[id] = dup;
    return 0;
}

/* A merge "a b" from a string or a [a, b] pair (spaces in parts become U+0120). */
static char *merge_text(const json_t *m)
{
    if (json_is_string(m))
        return strdup(json_string_value(m));
    if (!json_is_array(m) || json_array_size(m) != 2 || !json_is_string(json_array_get(m, 0)) ||
        !json_is_string(json_array_get(m, 1)))
        return NULL;
    const char *a = json_string_value(json_array_get(m, 0)),
               *b = json_string_value(json_array_get(m, 1));
    size_t na = strlen(a), nb = strlen(b);
    char *s = malloc(2 * (na + nb) + 2), *w = s;
    if (!s)
        return NULL;
    for (int k = 0; k < 2; k++) {
        for (const char *r = k ? b : a; *r; r++) {
            if (*r == ' ') {
                *w++ = (char)0xc4; /* U+0120 */
                *w++ = (char)0xa0;
            } else {
                *w++ = *r;
            }
        }
        if (!k)
            *w++ = ' ';
    }
    *w = '\0';
    return s;
}

/* ---- the model's vocabulary ---- */

static int load_merges(struct hf_vocab *v, const json_t *model, const char *what,
                       struct mf_err *err)
{
    const json_t *merges = json_object_get(model, "merges");
    if (!json_is_array(merges))
        return mf_err_set(err, MF_EFORMAT, "%s: model.merges must be an array", what);
    size_t n = json_array_size(merges);
    if (n > HF_TOK_MAX_VOCAB * 4u)
        return mf_err_set(err, MF_ENOMEM, "%s: %zu merges is too many", what, n);
    v->merges = calloc(n ? n : 1, sizeof *v->merges);
    if (!v->merges)
        return mf_err_set(err, MF_ENOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        v->merges[i] = merge_text(json_array_get(merges, i));
        if (!v->merges[i])
            return mf_err_set(err, MF_EFORMAT,
                              "%s: model.merges[%zu] must be \"a b\" or [\"a\", \"b\"]", what, i);
        v->n_merges = (uint32_t)(i + 1);
    }
    return 0;
}

/* SentencePiece-style BPE scores: minus the rank of the first merge that
 * makes the piece; pieces no merge makes get 0 (they are never merge results). */
static int bpe_scores(struct hf_vocab *v, const json_t *vocab, struct mf_err *err)
{
    char *buf = NULL;
    size_t cap = 0;
    for (uint32_t r = v->n_merges; r-- > 0;) {
        const char *m = v->merges[r], *sp = strchr(m, ' ');
        if (!sp)
            continue;
        size_t n = strlen(m);
        if (n + 1 > cap) {
            char *nb = realloc(buf, n + 1);
            if (!nb) {
                free(buf);
                return mf_err_set(err, MF_ENOMEM, "out of memory");
            }
            buf = nb;
            cap = n + 1;
        }
        size_t a = (size_t)(sp - m);
        memcpy(buf, m, a);
        memcpy(buf + a, sp + 1, n - a - 1);
        buf[n - 1] = '\0';
        json_t *id = json_object_get(vocab, buf);
        if (json_is_integer(id) && json_integer_value(id) >= 0 && json_integer_value(id) < v->n)
            v->scores[json_integer_value(id)] = -(float)r - 1.0f; /* r counts down: first wins */
    }
    free(buf);
    return 0;
}

static int load_model(struct hf_vocab *v, const json_t *root, const char *what, int *unk_id,
                      struct mf_err *err)
{
    const json_t *model = json_object_get(root, "model");
    const char *type = json_string_value(json_object_get(model, "type"));
    const json_t *vocab = json_object_get(model, "vocab");
    *unk_id = -1;
    if (!type)
        return mf_err_set(err, MF_EFORMAT, "%s: model.type is missing", what);
    if (strcmp(type, "Unigram") == 0) {
        if (!json_is_array(vocab))
            return mf_err_set(err, MF_EFORMAT, "%s: model.vocab must be an array", what);
        snprintf(v->model, sizeof v->model, "llama");
        size_t i;
        const json_t *e;
        json_array_foreach(vocab, i, e)
        {
            const char *p = json_string_value(json_array_get(e, 0));
            const json_t *s = json_array_get(e, 1);
            if (!p || !json_is_number(s))
                return mf_err_set(err, MF_EFORMAT, "%s: model.vocab[%zu] must be [piece, score]",
                                  what, i);
            int rc = set_token(v, (int64_t)i, p, what, err);
            if (rc)
                return rc;
            v->scores[i] = (float)json_number_value(s);
        }
        const json_t *u = json_object_get(model, "unk_id");
        *unk_id = json_is_integer(u) ? (int)json_integer_value(u) : -1;
        return 0;
    }
    if (strcmp(type, "BPE") != 0)
        return mf_err_set(err, MF_EUNSUPPORTED,
                          "%s: tokenizer model type \"%s\" is not supported (BPE or Unigram)", what,
                          type);
    if (!json_is_object(vocab))
        return mf_err_set(err, MF_EFORMAT, "%s: model.vocab must be an object", what);
    int spm = json_is_true(json_object_get(model, "byte_fallback"));
    snprintf(v->model, sizeof v->model, "%s", spm ? "llama" : "gpt2");
    const char *key;
    const json_t *id;
    json_object_foreach((json_t *)vocab, key, id)
    {
        if (!json_is_integer(id))
            return mf_err_set(err, MF_EFORMAT, "%s: model.vocab[\"%.80s\"] must be an id", what,
                              key);
        int rc = set_token(v, (int64_t)json_integer_value(id), key, what, err);
        if (rc)
            return rc;
    }
    int rc = load_merges(v, model, what, err);
    if (!rc && spm) {
        rc = bpe_scores(v, vocab, err);
        const char *unk = json_string_value(json_object_get(model, "unk_token"));
        const json_t *u = unk ? json_object_get(vocab, unk) : NULL;
        *unk_id = json_is_integer(u) ? (int)json_integer_value(u) : -1;
    }
    if (!rc && !spm)
        rc = pre_name(json_object_get(root, "pre_tokenizer"), what, v->pre, sizeof v->pre, err);
    return rc;
}

/* The id of the added token whose content is text, or -1. */
static int64_t added_id(const json_t *added, const char *text)
{
    size_t i;
    const json_t *a;
    json_array_foreach(added, i, a)
    {
        const char *c = json_string_value(json_object_get(a, "content"));
        const json_t *id = json_object_get(a, "id");
        if (c && json_is_integer(id) && strcmp(c, text) == 0)
            return (int64_t)json_integer_value(id);
    }
    return -1;
}

static void set_special(struct hf_vocab *v, int typ, int64_t id)
{
    if (id < 0 || id >= v->n || v->special[typ] >= 0)
        return;
    v->special[typ] = id;
    v->order[v->n_order++] = typ;
}

/* tokenizer_config.json: special tokens, add_*_token, the chat template. */
static int load_config(struct hf_vocab *v, const struct hf_tokenizer_src *src, const json_t *added,
                       struct mf_err *err)
{
    const char *what = "tokenizer_config.json";
    json_t *tc = mf_json_parse(src->tok_config, src->tok_config_len, what, err);
    if (!tc)
        return err->code;
    int rc = 0;
    if (!json_is_object(tc)) {
        rc = mf_err_set(err, MF_EFORMAT, "%s: not a JSON object", what);
        goto out;
    }
    for (int typ = 0; typ < N_SPECIAL; typ++) {
        char key[32];
        snprintf(key, sizeof key, "add_%s_token", special_names[typ]);
        const json_t *a = json_object_get(tc, key);
        if (typ < 2 && json_is_boolean(a))
            v->add[typ] = json_is_true(a);
        snprintf(key, sizeof key, "%s_token", special_names[typ]);
        const json_t *e = json_object_get(tc, key);
        const char *content = json_string_value(e);
        if (!content)
            content = json_string_value(json_object_get(e, "content"));
        if (content)
            set_special(v, typ, added_id(added, content));
    }
    const json_t *t = json_object_get(tc, "chat_template");
    const char *tmpl = json_string_value(t);
    if (json_is_array(t)) {
        size_t i;
        const json_t *e;
        json_array_foreach(t, i, e)
        {
            const char *name = json_string_value(json_object_get(e, "name"));
            if (name && strcmp(name, "default") == 0)
                tmpl = json_string_value(json_object_get(e, "template"));
        }
    }
    if (tmpl && !(v->chat_template = strdup(tmpl)))
        rc = mf_err_set(err, MF_ENOMEM, "out of memory");
out:
    json_decref(tc);
    return rc;
}

static const char *const eot_texts[] = {"<|eot_id|>",      "<|im_end|>", "<|end|>", "<end_of_turn>",
                                        "<|end_of_turn|>", "<EOT>",      "<|eot|>"};

int hf_vocab_build(const struct hf_tokenizer_src *src, const struct hf_config *c,
                   struct hf_vocab **out, struct mf_err *err)
{
    const char *what = "tokenizer.json";
    *out = NULL;
    json_t *root = mf_json_parse(src->tok_json, src->tok_json_len, what, err);
    if (!root)
        return err->code;
    struct hf_vocab *v = calloc(1, sizeof *v);
    int rc = v ? 0 : mf_err_set(err, MF_ENOMEM, "out of memory");
    const json_t *added = json_object_get(root, "added_tokens");
    if (!rc && !json_is_object(root))
        rc = mf_err_set(err, MF_EFORMAT, "%s: not a JSON object", what);
    if (rc)
        goto out;
    for (int i = 0; i < N_SPECIAL; i++)
        v->special[i] = -1;
    v->eot = -1;
    v->add[0] = v->add[1] = -1;
    v->space_prefix = -1;
    /* the size: config.json's vocab_size, else the largest id + 1 */
    int64_t n = c && c->n_vocab ? c->n_vocab : 0;
    if (!n) {
        const json_t *vocab = json_object_get(json_object_get(root, "model"), "vocab");
        n = json_is_array(vocab) ? (int64_t)json_array_size(vocab) : 0;
        const char *k;
        const json_t *id;
        if (json_is_object(vocab)) {
            json_object_foreach((json_t *)vocab, k, id)
            {
                if (json_integer_value(id) >= n)
                    n = json_integer_value(id) + 1;
            }
        }
        size_t i;
        const json_t *a;
        json_array_foreach(added, i, a)
        {
            json_int_t id_a = json_integer_value(json_object_get(a, "id"));
            if (id_a >= n)
                n = id_a + 1;
        }
    }
    if (n <= 0 || n > HF_TOK_MAX_VOCAB) {
        rc = mf_err_set(err, MF_EFORMAT, "%s: vocabulary size %lld is outside 1..%u", what,
                        (long long)n, HF_TOK_MAX_VOCAB);
        goto out;
    }
    v->n = (uint32_t)n;
    v->tokens = calloc(v->n, sizeof *v->tokens);
    v->types = calloc(v->n, sizeof *v->types);
    v->scores = calloc(v->n, sizeof *v->scores);
    if (!v->tokens || !v->types || !v->scores) {
        rc = mf_err_set(err, MF_ENOMEM, "out of memory");
        goto out;
    }
    int unk = -1;
    if ((rc = load_model(v, root, what, &unk, err)))
        goto out;
    int spm = strcmp(v->model, "llama") == 0;
    if (spm)
        snprintf(v->pre, sizeof v->pre, "default");
    else {
        free(v->scores);
        v->scores = NULL;
    }
    for (uint32_t i = 0; i < v->n; i++)
        v->types[i] = !v->tokens[i]                        ? TT_UNUSED
                      : spm && (int64_t)i == unk           ? TT_UNKNOWN
                      : spm && is_byte_token(v->tokens[i]) ? TT_BYTE
                                                           : TT_NORMAL;
    /* added tokens: their content is the token's text */
    size_t i;
    const json_t *a;
    if (added && !json_is_array(added)) {
        rc = mf_err_set(err, MF_EFORMAT, "%s: added_tokens must be an array", what);
        goto out;
    }
    json_array_foreach(added, i, a)
    {
        const char *content = json_string_value(json_object_get(a, "content"));
        const json_t *id = json_object_get(a, "id");
        if (!content || !json_is_integer(id)) {
            rc = mf_err_set(err, MF_EFORMAT, "%s: added_tokens[%zu] needs id and content", what, i);
            goto out;
        }
        int64_t k = (int64_t)json_integer_value(id);
        if ((rc = set_token(v, k, content, what, err)))
            goto out;
        if (json_is_true(json_object_get(a, "special")) || looks_special(content)) {
            v->types[k] = spm && k == unk ? TT_UNKNOWN : TT_CONTROL;
        } else {
            v->types[k] = TT_USER;
            unescape_spaces(v->tokens[k]); /* pre-normalised user-defined spaces */
        }
    }
    for (uint32_t k = 0; k < v->n; k++) {
        if (v->tokens[k])
            continue;
        char pad[32];
        snprintf(pad, sizeof pad, "[PAD%u]", k);
        if ((rc = set_token(v, k, pad, what, err)))
            goto out;
    }
    if (src->tok_config && (rc = load_config(v, src, added, err)))
        goto out;
    set_special(v, 0, c ? c->bos_id : -1);
    set_special(v, 1, c ? c->eos_id : -1);
    set_special(v, 4, c ? c->pad_id : -1);
    if (!v->chat_template && src->template &&
        !(v->chat_template = strndup(src->template, src->template_len))) {
        rc = mf_err_set(err, MF_ENOMEM, "out of memory");
        goto out;
    }
    for (uint32_t k = 0; k < v->n && v->eot < 0; k++)
        for (size_t e = 0; e < sizeof eot_texts / sizeof eot_texts[0]; e++)
            if (v->types[k] == TT_CONTROL && strcmp(v->tokens[k], eot_texts[e]) == 0)
                v->eot = k;
out:
    json_decref(root);
    if (rc)
        hf_vocab_free(v);
    else
        *out = v;
    return rc;
}

/* Reads dir/name into *text (NULL, 0 when absent and optional). */
static int read_opt(const char *dir, const char *name, int required, char **text, size_t *len,
                    struct mf_err *err)
{
    char path[4096];
    *text = NULL;
    *len = 0;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int rc = mf_file_read(path, HF_TOK_MAX_FILE, text, len, err);
    if (rc == MF_ENOTFOUND) {
        if (required)
            return mf_err_set(err, MF_ENOTFOUND,
                              "%s: no %s (mfc converts Hugging Face tokenizers from "
                              "tokenizer.json)",
                              dir, name);
        mf_err_clear(err);
        return 0;
    }
    return rc;
}

int hf_vocab_load(const char *dir, const struct hf_config *c, struct hf_vocab **out,
                  struct mf_err *err)
{
    struct hf_tokenizer_src s = {0};
    char *a = NULL, *b = NULL, *t = NULL;
    int rc = read_opt(dir, "tokenizer.json", 1, &a, &s.tok_json_len, err);
    if (!rc)
        rc = read_opt(dir, "tokenizer_config.json", 0, &b, &s.tok_config_len, err);
    if (!rc)
        rc = read_opt(dir, "chat_template.jinja", 0, &t, &s.template_len, err);
    s.tok_json = a;
    s.tok_config = b;
    s.template = t;
    if (!rc)
        rc = hf_vocab_build(&s, c, out, err);
    if (rc && err->code && !strstr(err->msg, dir))
        mf_err_prefix(err, "%s", dir);
    free(a);
    free(b);
    free(t);
    return rc;
}

int hf_vocab_write(const struct hf_vocab *v, struct gguf_writer *w, struct mf_err *err)
{
    struct gguf_str *strs = calloc(v->n > v->n_merges ? v->n : v->n_merges + 1, sizeof *strs);
    if (!strs)
        return mf_err_set(err, MF_ENOMEM, "out of memory");
    int rc = gguf_writer_add_cstr(w, "tokenizer.ggml.model", v->model, err);
    if (!rc)
        rc = gguf_writer_add_cstr(w, "tokenizer.ggml.pre", v->pre, err);
    for (uint32_t i = 0; !rc && i < v->n; i++)
        strs[i] = (struct gguf_str){v->tokens[i], strlen(v->tokens[i])};
    if (!rc)
        rc = gguf_writer_add_arr_str(w, "tokenizer.ggml.tokens", strs, v->n, err);
    if (!rc && v->scores)
        rc = gguf_writer_add_arr(w, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, v->scores, v->n,
                                 err);
    if (!rc)
        rc = gguf_writer_add_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, v->types, v->n,
                                 err);
    if (!rc && strcmp(v->model, "gpt2") == 0) {
        for (uint32_t i = 0; i < v->n_merges; i++)
            strs[i] = (struct gguf_str){v->merges[i], strlen(v->merges[i])};
        rc = gguf_writer_add_arr_str(w, "tokenizer.ggml.merges", strs, v->n_merges, err);
    }
    free(strs);
    for (int i = 0; !rc && i < v->n_order; i++)
        rc = gguf_writer_add_u32(w, special_keys[v->order[i]], (uint32_t)v->special[v->order[i]],
                                 err);
    if (!rc && v->eot >= 0)
        rc = gguf_writer_add_u32(w, "tokenizer.ggml.eot_token_id", (uint32_t)v->eot, err);
    if (!rc && v->add[0] >= 0)
        rc = gguf_writer_add_bool(w, "tokenizer.ggml.add_bos_token", v->add[0], err);
    if (!rc && v->add[1] >= 0)
        rc = gguf_writer_add_bool(w, "tokenizer.ggml.add_eos_token", v->add[1], err);
    if (!rc && v->chat_template)
        rc = gguf_writer_add_cstr(w, "tokenizer.chat_template", v->chat_template, err);
    if (!rc && v->space_prefix >= 0)
        rc = gguf_writer_add_bool(w, "tokenizer.ggml.add_space_prefix", v->space_prefix, err);
    return rc;
}
