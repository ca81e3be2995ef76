/*
 * inspect.c: builds the JSON summary of an open GGUF (see inspect.h).
 *
 * Owns nothing beyond the JSON it returns. Reads only what gguf_open already
 * validated: KVs through the typed getters (a key with an unexpected type
 * reads as absent, so a summary never fails on odd metadata) and tensor
 * infos; tensor data pages are never touched. Architecture keys are looked
 * up under the "<general.architecture>." prefix as llama.cpp names them
 * (gguf-py constants.py). Strings from the file that are not valid UTF-8
 * are shown with '?' for the bad bytes, since JSON must be UTF-8.
 */
#include "common/inspect.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/arch.h"
#include "common/num.h"
#include "common/quant.h"
#include "common/utf8.h"

/* A JSON builder that remembers whether any allocation failed. */
struct jb {
    int oom; /* nonzero once a json_* call failed */
};

static void put(struct jb *b, json_t *obj, const char *key, json_t *v)
{
    if (!v || json_object_set_new(obj, key, v) != 0)
        b->oom = 1;
}

static void append(struct jb *b, json_t *arr, json_t *v)
{
    if (!v || json_array_append_new(arr, v) != 0)
        b->oom = 1;
}

/* A GGUF string as a JSON string; invalid UTF-8 bytes become '?'. */
static json_t *jstr(struct gguf_str s)
{
    if (mf_utf8_valid(s.p, (size_t)s.len, NULL))
        return json_stringn(s.p, (size_t)s.len);
    char *c = malloc((size_t)s.len + 1);
    if (!c)
        return NULL;
    size_t i = 0, o = 0;
    while (i < s.len) {
        uint32_t cp;
        int n = mf_utf8_decode(s.p + i, (size_t)(s.len - i), &cp);
        if (n == 0) {
            c[o++] = '?';
            i++;
        } else {
            memcpy(c + o, s.p + i, (size_t)n);
            o += (size_t)n;
            i += (size_t)n;
        }
    }
    json_t *v = json_stringn(c, o);
    free(c);
    return v;
}

static json_t *jcstr(const char *z)
{
    struct gguf_str s = {z, strlen(z)};
    return jstr(s);
}

/* "<arch>.<suffix>", or just suffix when there is no architecture. */
static const char *akey(char *buf, size_t cap, const char *arch, const char *suffix)
{
    snprintf(buf, cap, "%s%s%s", arch ? arch : "", arch ? "." : "", suffix);
    return buf;
}

static json_t *get_uint(const struct gguf_file *gf, const char *key)
{
    uint64_t v;
    if (gguf_get_u64(gf, key, &v, NULL) != 0 || v > (uint64_t)INT64_MAX)
        return json_null();
    return json_integer((json_int_t)v);
}

static json_t *get_real(const struct gguf_file *gf, const char *key)
{
    double v;
    return gguf_get_f64(gf, key, &v, NULL) == 0 ? json_real(v) : json_null();
}

static json_t *get_string(const struct gguf_file *gf, const char *key)
{
    struct gguf_str s;
    return gguf_get_str(gf, key, &s, NULL) == 0 ? jstr(s) : json_null();
}

static json_t *get_flag(const struct gguf_file *gf, const char *key)
{
    int v;
    return gguf_get_bool(gf, key, &v, NULL) == 0 ? json_boolean(v) : json_null();
}

static json_t *arr_len(const struct gguf_file *gf, const char *key)
{
    const struct gguf_array *a;
    return gguf_get_arr(gf, key, &a, NULL) == 0 ? json_integer((json_int_t)a->n) : json_null();
}

void mf_inspect_count(uint64_t n, char *buf, size_t cap)
{
    if (n >= 1000000000ull)
        snprintf(buf, cap, "%.2fB", (double)n / 1e9);
    else if (n >= 1000000ull)
        snprintf(buf, cap, "%.1fM", (double)n / 1e6);
    else if (n >= 1000ull)
        snprintf(buf, cap, "%.1fK", (double)n / 1e3);
    else
        snprintf(buf, cap, "%" PRIu64, n);
}

void mf_inspect_bytes(uint64_t n, char *buf, size_t cap)
{
    mf_num_fmt_bytes(n, 0, buf, cap);
}

/* ------------------------------------------------------------------------
 * sections
 * ------------------------------------------------------------------------ */

static void file_facts(struct jb *b, json_t *o, const struct gguf_file *gf)
{
    put(b, o, "file", jcstr(gguf_name(gf)));
    put(b, o, "size", json_integer((json_int_t)gguf_file_size(gf)));
    put(b, o, "gguf_version", json_integer(gguf_version(gf)));
    put(b, o, "alignment", json_integer(gguf_alignment(gf)));
    put(b, o, "data_offset", json_integer((json_int_t)gguf_data_offset(gf)));
    put(b, o, "kv_count", json_integer((json_int_t)gguf_n_kv(gf)));
    put(b, o, "tensor_count", json_integer((json_int_t)gguf_n_tensors(gf)));
    json_t *type = get_string(gf, "general.type");
    put(b, o, "type", json_is_null(type) ? json_string("model") : type);
    if (json_is_null(type))
        json_decref(type);
    put(b, o, "architecture", get_string(gf, "general.architecture"));
    put(b, o, "name", get_string(gf, "general.name"));
    put(b, o, "quantization_version", get_uint(gf, "general.quantization_version"));
}

static void file_type(struct jb *b, json_t *o, const struct gguf_file *gf)
{
    uint32_t ft;
    if (gguf_get_u32(gf, "general.file_type", &ft, NULL) != 0) {
        put(b, o, "file_type", json_null());
        return;
    }
    const char *name = quant_ftype_name((enum quant_ftype)ft);
    json_t *f = json_object();
    put(b, o, "file_type", f);
    if (!f)
        return;
    put(b, f, "id", json_integer(ft));
    put(b, f, "name", name ? json_string(name) : json_null());
}

/* Parameter count and the tensor-type histogram. */
static void params(struct jb *b, json_t *o, const struct gguf_file *gf)
{
    uint64_t n = 0, count[GGML_TYPE_COUNT] = {0};
    for (uint64_t i = 0; i < gguf_n_tensors(gf); i++) {
        const struct gguf_tensor *t = gguf_tensor_at(gf, i);
        n += t->n_elements; /* each < 2^63; a sum past 2^64 would need 2^33 tensors */
        count[t->type]++;
    }
    char h[32];
    mf_inspect_count(n, h, sizeof h);
    put(b, o, "parameters", json_integer((json_int_t)(n > INT64_MAX ? INT64_MAX : n)));
    put(b, o, "parameters_human", json_string(h));
    json_t *types = json_object();
    put(b, o, "tensor_types", types);
    for (uint32_t t = 0; types && t < GGML_TYPE_COUNT; t++)
        if (count[t])
            put(b, types, ggml_type_name(t), json_integer((json_int_t)count[t]));
}

static void hparams(struct jb *b, json_t *o, const struct gguf_file *gf, const char *arch)
{
    static const char *const keys[][2] = {
        {"context_length", "context_length"},     {"block_count", "block_count"},
        {"embedding_length", "embedding_length"}, {"feed_forward_length", "feed_forward_length"},
        {"head_count", "attention.head_count"},   {"head_count_kv", "attention.head_count_kv"},
    };
    char k[160];
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        put(b, o, keys[i][0], get_uint(gf, akey(k, sizeof k, arch, keys[i][1])));
    uint64_t embd, heads;
    json_t *hd = get_uint(gf, akey(k, sizeof k, arch, "attention.key_length"));
    if (json_is_null(hd) &&
        gguf_get_u64(gf, akey(k, sizeof k, arch, "embedding_length"), &embd, NULL) == 0 &&
        gguf_get_u64(gf, akey(k, sizeof k, arch, "attention.head_count"), &heads, NULL) == 0 &&
        heads > 0) {
        json_decref(hd);
        hd = json_integer((json_int_t)(embd / heads));
    }
    put(b, o, "head_dim", hd);
    json_t *vs = get_uint(gf, akey(k, sizeof k, arch, "vocab_size"));
    if (json_is_null(vs)) {
        json_decref(vs);
        vs = arr_len(gf, "tokenizer.ggml.tokens");
    }
    put(b, o, "vocab_size", vs);
    json_t *eps = get_real(gf, akey(k, sizeof k, arch, "attention.layer_norm_rms_epsilon"));
    if (json_is_null(eps)) {
        json_decref(eps);
        eps = get_real(gf, akey(k, sizeof k, arch, "attention.layer_norm_epsilon"));
    }
    put(b, o, "norm_eps", eps);
}

static void rope(struct jb *b, json_t *o, const struct gguf_file *gf, const char *arch)
{
    char k[160];
    json_t *r = json_object();
    put(b, o, "rope", r);
    if (!r)
        return;
    put(b, r, "dimension_count", get_uint(gf, akey(k, sizeof k, arch, "rope.dimension_count")));
    put(b, r, "freq_base", get_real(gf, akey(k, sizeof k, arch, "rope.freq_base")));
    put(b, r, "scaling_type", get_string(gf, akey(k, sizeof k, arch, "rope.scaling.type")));
    put(b, r, "scaling_factor", get_real(gf, akey(k, sizeof k, arch, "rope.scaling.factor")));
    put(b, r, "original_context_length",
        get_uint(gf, akey(k, sizeof k, arch, "rope.scaling.original_context_length")));
    put(b, r, "freqs_tensor", json_boolean(gguf_find_tensor(gf, "rope_freqs.weight") != NULL));
    put(b, r, "attn_factor", get_real(gf, akey(k, sizeof k, arch, "rope.scaling.attn_factor")));
    put(b, r, "long_factors",
        json_boolean(gguf_find_tensor(gf, "rope_factors_long.weight") != NULL));
}

/* A key's unsigned value, else def (the family's default); 0 reads as none. */
static uint64_t uint_or(const struct gguf_file *gf, const char *key, uint64_t def)
{
    uint64_t v;
    return gguf_get_u64(gf, key, &v, NULL) == 0 ? v : def;
}

static double real_or(const struct gguf_file *gf, const char *key, double def)
{
    double v;
    return gguf_get_f64(gf, key, &v, NULL) == 0 ? v : def;
}

/* What the family is and what sets it apart, with common/arch.h's defaults
 * for keys a file leaves out (Gemma 2's window and soft-caps): the values
 * mfc-serve runs with. */
static void family(struct jb *b, json_t *o, const struct gguf_file *gf, const char *arch)
{
    const struct arch_desc *d = arch ? arch_find(arch, strlen(arch)) : NULL;
    char k[160];
    json_t *f = json_object();
    put(b, o, "family", f);
    if (!f)
        return;
    put(b, f, "name", arch ? jcstr(arch) : json_null());
    put(b, f, "supported", json_boolean(d != NULL));
    put(b, f, "known_as", d ? jcstr(d->models) : json_null());
    if (!d)
        return;
    json_t *traits = json_array();
    put(b, f, "traits", traits);
    if (traits) {
        append(b, traits, jcstr(d->rope == ARCH_ROPE_NEOX ? "neox_rope" : "normal_rope"));
        append(b, traits, jcstr(d->act == ARCH_ACT_GELU         ? "gelu_gate"
                                : d->act == ARCH_ACT_SWIGLU_OAI ? "swiglu_oai_gate"
                                                                : "silu_gate"));
        if (d->flags & ARCH_QK_NORM)
            append(b, traits, jcstr("qk_norm"));
        if (d->flags & ARCH_POST_NORMS)
            append(b, traits, jcstr("post_norms"));
        if (d->flags & ARCH_EMBD_SCALE)
            append(b, traits, jcstr("embedding_scale"));
        if (gguf_find_tensor(gf, "blk.0.attn_qkv.weight"))
            append(b, traits, jcstr("fused_qkv"));
        if (d->flags & ARCH_FUSED_UP)
            append(b, traits, jcstr("fused_gate_up"));
        if (gguf_find_tensor(gf, "blk.0.attn_q.bias"))
            append(b, traits, jcstr("qkv_bias"));
        if (!gguf_find_tensor(gf, "output.weight") || (d->flags & ARCH_TIED_ALWAYS))
            append(b, traits, jcstr("tied_output"));
        if (d->flags & ARCH_SINKS)
            append(b, traits, jcstr("attn_sinks"));
        if (d->flags & ARCH_O_BIAS)
            append(b, traits, jcstr("o_bias"));
        if (d->flags & ARCH_EXPERT_BIASES)
            append(b, traits, jcstr("expert_biases"));
        if (d->gating == ARCH_GATE_TOPK_SOFTMAX)
            append(b, traits, jcstr("topk_softmax_gating"));
    }
    uint64_t n_exp = uint_or(gf, akey(k, sizeof k, arch, "expert_count"), 0);
    json_t *e = n_exp > 1 ? json_object() : json_null();
    put(b, f, "experts", e);
    if (n_exp > 1 && e) {
        put(b, e, "count", json_integer((json_int_t)n_exp));
        put(b, e, "used", get_uint(gf, akey(k, sizeof k, arch, "expert_used_count")));
        json_t *ff = get_uint(gf, akey(k, sizeof k, arch, "expert_feed_forward_length"));
        if (json_is_null(ff)) { /* Mixtral: each expert is a full-width FFN */
            json_decref(ff);
            ff = get_uint(gf, akey(k, sizeof k, arch, "feed_forward_length"));
        }
        put(b, e, "feed_forward_length", ff);
    }
    uint64_t win =
        uint_or(gf, akey(k, sizeof k, arch, "attention.sliding_window"), (uint64_t)d->swa_window);
    json_t *w = win ? json_object() : json_null();
    put(b, f, "sliding_window", w);
    if (win && w) {
        put(b, w, "window", json_integer((json_int_t)win));
        uint64_t per = uint_or(gf, akey(k, sizeof k, arch, "attention.sliding_window_pattern"),
                               (uint64_t)d->swa_period);
        /* layer il slides iff il % period < period - 1; 0: every layer */
        put(b, w, "period", json_integer((json_int_t)per));
        double base = real_or(gf, akey(k, sizeof k, arch, "rope.freq_base_swa"), d->swa_rope_base);
        if (!(base > 0)) /* the sliding layers share the model's base */
            base = real_or(gf, akey(k, sizeof k, arch, "rope.freq_base"), 10000.0);
        put(b, w, "freq_base", json_real(base));
    }
    double ac = real_or(gf, akey(k, sizeof k, arch, "attn_logit_softcapping"), d->attn_softcap);
    double fc = real_or(gf, akey(k, sizeof k, arch, "final_logit_softcapping"), d->final_softcap);
    put(b, f, "attn_softcap", ac > 0 ? json_real(ac) : json_null());
    put(b, f, "final_softcap", fc > 0 ? json_real(fc) : json_null());
}

static void tokenizer(struct jb *b, json_t *o, const struct gguf_file *gf)
{
    static const char *const ids[] = {"bos_token_id", "eos_token_id", "eot_token_id",
                                      "unknown_token_id", "padding_token_id"};
    char k[96];
    json_t *t = json_object();
    put(b, o, "tokenizer", t);
    if (!t)
        return;
    put(b, t, "model", get_string(gf, "tokenizer.ggml.model"));
    put(b, t, "pre", get_string(gf, "tokenizer.ggml.pre"));
    put(b, t, "tokens", arr_len(gf, "tokenizer.ggml.tokens"));
    put(b, t, "merges", arr_len(gf, "tokenizer.ggml.merges"));
    put(b, t, "scores", json_boolean(gguf_find_kv(gf, "tokenizer.ggml.scores") != NULL));
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++) {
        snprintf(k, sizeof k, "tokenizer.ggml.%s", ids[i]);
        put(b, t, ids[i], get_uint(gf, k));
    }
    put(b, t, "add_bos_token", get_flag(gf, "tokenizer.ggml.add_bos_token"));
    put(b, t, "add_eos_token", get_flag(gf, "tokenizer.ggml.add_eos_token"));
    struct gguf_str tpl;
    json_t *c = json_object();
    put(b, o, "chat_template", c);
    int has = gguf_get_str(gf, "tokenizer.chat_template", &tpl, NULL) == 0;
    if (c) {
        put(b, c, "present", json_boolean(has));
        put(b, c, "length", has ? json_integer((json_int_t)tpl.len) : json_null());
    }
}

static int has_suffix(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* The base names of .lora_a/.lora_b pairs, the rank and unpaired halves. */
static void lora_tensors(struct jb *b, json_t *a, const struct gguf_file *gf)
{
    json_t *targets = json_array(), *unpaired = json_array();
    put(b, a, "targets", targets);
    put(b, a, "unpaired", unpaired);
    int64_t rank = -1, pairs = 0;
    char other[GGUF_MAX_NAME + 8];
    for (uint64_t i = 0; targets && unpaired && i < gguf_n_tensors(gf); i++) {
        const struct gguf_tensor *t = gguf_tensor_at(gf, i);
        int is_a = has_suffix(t->name, ".lora_a");
        if (!is_a && !has_suffix(t->name, ".lora_b"))
            continue;
        size_t base = strlen(t->name) - 7;
        snprintf(other, sizeof other, "%.*s.lora_%c", (int)base, t->name, is_a ? 'b' : 'a');
        if (!gguf_find_tensor(gf, other)) {
            append(b, unpaired, jcstr(t->name));
            continue;
        }
        if (!is_a)
            continue;
        struct gguf_str bn = {t->name, base};
        append(b, targets, jstr(bn));
        pairs++;
        if (rank < 0)
            rank = (int64_t)t->ne[1];
    }
    put(b, a, "rank", rank >= 0 ? json_integer(rank) : json_null());
    put(b, a, "pairs", json_integer(pairs));
}

static void adapter(struct jb *b, json_t *o, const struct gguf_file *gf)
{
    struct gguf_str type;
    int is_adapter =
        gguf_get_str(gf, "general.type", &type, NULL) == 0 && gguf_str_eq(type, "adapter");
    if (!is_adapter)
        return;
    json_t *a = json_object();
    put(b, o, "adapter", a);
    if (!a)
        return;
    put(b, a, "type", get_string(gf, "adapter.type"));
    put(b, a, "alpha", get_real(gf, "adapter.lora.alpha"));
    lora_tensors(b, a, gf);
}

static void tensor_table(struct jb *b, json_t *o, const struct gguf_file *gf)
{
    json_t *arr = json_array();
    put(b, o, "tensors", arr);
    for (uint64_t i = 0; arr && i < gguf_n_tensors(gf); i++) {
        const struct gguf_tensor *t = gguf_tensor_at(gf, i);
        json_t *e = json_object(), *shape = json_array();
        append(b, arr, e);
        if (!e)
            break;
        put(b, e, "name", jcstr(t->name));
        put(b, e, "type", json_string(ggml_type_name(t->type)));
        put(b, e, "shape", shape);
        for (uint32_t d = 0; shape && d < t->n_dims; d++)
            append(b, shape, json_integer((json_int_t)t->ne[d]));
        put(b, e, "elements", json_integer((json_int_t)t->n_elements));
        put(b, e, "bytes",
            json_integer((json_int_t)(t->n_bytes > INT64_MAX ? INT64_MAX : t->n_bytes)));
        put(b, e, "offset", json_integer((json_int_t)t->offset));
        put(b, e, "file_offset", json_integer((json_int_t)t->file_offset));
    }
}

json_t *mf_inspect_gguf(const struct gguf_file *gf, int with_tensors, struct mf_err *err)
{
    struct jb b = {0};
    json_t *o = json_object();
    if (!o) {
        mf_err_set(err, MF_ENOMEM, "out of memory summarising %s", gguf_name(gf));
        return NULL;
    }
    struct gguf_str s;
    char *arch = NULL;
    if (gguf_get_str(gf, "general.architecture", &s, NULL) == 0)
        arch = gguf_str_dup(s); /* NULL (no prefix) if it holds a NUL byte */
    file_facts(&b, o, gf);
    file_type(&b, o, gf);
    params(&b, o, gf);
    hparams(&b, o, gf, arch);
    rope(&b, o, gf, arch);
    family(&b, o, gf, arch);
    tokenizer(&b, o, gf);
    adapter(&b, o, gf);
    if (with_tensors)
        tensor_table(&b, o, gf);
    free(arch);
    if (b.oom) {
        json_decref(o);
        mf_err_set(err, MF_ENOMEM, "out of memory summarising %s", gguf_name(gf));
        return NULL;
    }
    return o;
}
