/*
 * plan_config.c: the model config document and its YAML form.
 *
 * The config document is what the image carries as /etc/mfc/model.yaml and
 * what the runtime reads instead of Ollama's params/template/system layers:
 * schema, model path, adapters (name, scale, path; an ADAPTER without --name
 * is named after its source's file name), draft, params (Ollama
 * types: int, float32, bool, stop as a list), template, system, messages,
 * license, requires, renderer, parser, labels, env. It is built from the AST
 * alone, never from fetched content, so it is known at plan time and its
 * cache key changes only when these instructions change.
 *
 * Owns nothing past one call. YAML goes through libyaml's emitter; output is
 * deterministic (insertion order, no line folding, fixed scalar styles).
 */
#include "compiler/plan.h"

#include <stdlib.h>
#include <string.h>

#include <yaml.h>

#include "common/buf.h"

#define CONFIG_SCHEMA "mfc.config/v1"
#define CONFIG_YAML_MAX (64u << 20) /* MF_MODELFILE_MAX_BYTES expanded by quoting */
#define CONFIG_MAX_DEPTH 8          /* the document is 3 deep; anything more is a bug */

/* ---- building the document ------------------------------------------------------ */

static json_t *param_value(const struct mf_param *pr)
{
    char num[48];
    switch (pr->type) {
    case MF_PARAM_INT:
        return json_integer((json_int_t)pr->i);
    case MF_PARAM_FLOAT:
        /* via the shortest float32 decimal, so 0.7 stays 0.7 in every output */
        mf_modelfile_float_str(pr->f, num, sizeof num);
        return json_real(strtod(num, NULL));
    case MF_PARAM_BOOL:
        return json_boolean(pr->b);
    default:
        return json_string(pr->text);
    }
}

/* PARAMETER: the last value wins, except stop, which appends (Ollama). */
static int add_param(json_t *params, const struct mf_param *pr)
{
    if (pr->type == MF_PARAM_STRING) {
        json_t *list = json_object_get(params, pr->name);
        if (!list) {
            list = json_array();
            if (json_object_set_new(params, pr->name, list) != 0)
                return -1;
        }
        return json_array_append_new(list, json_string(pr->text));
    }
    return json_object_set_new(params, pr->name, param_value(pr));
}

static int add_kv(json_t *obj, const struct mf_instr *in)
{
    for (size_t i = 0; i < in->u.kv.n; i++) {
        const struct mf_kv *kv = &in->u.kv.items[i];
        if (json_object_set_new(obj, kv->key, json_string(kv->value ? kv->value : "")) != 0)
            return -1;
    }
    return 0;
}

/* A name usable as a file name as is: 1 to 64 of [A-Za-z0-9._-], starting
 * with a letter or digit, not all digits (those are the unnamed adapters'). */
static int plain_name(const char *s)
{
    static const char ok[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-";
    size_t n = strlen(s);
    return n > 0 && n <= 64 && strspn(s, ok) == n && strspn(s, "0123456789") < n &&
           s[0] != '.' && s[0] != '_' && s[0] != '-';
}

static int path_taken(const json_t *adapters, const char *path)
{
    size_t i;
    json_t *a;
    json_array_foreach (adapters, i, a)
        if (strcmp(json_string_value(json_object_get(a, "path")), path) == 0)
            return 1;
    return 0;
}

/* ---- adapter names ---------------------------------------------------------------- */

#define ADAPTER_NAME_MAX 64
#define ADAPTER_DEDUP_MAX 99 /* sql-lora-2 ... sql-lora-99, then the index */

static int name_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '.' || c == '_' || c == '-';
}

/* The part of an ADAPTER source that names it, as [*start, *start + *len):
 * the last path component (trailing '/' dropped), without its extension.
 * A URL or hf:// source loses its query and fragment first; a name that is
 * not a path (a registry or Ollama reference) loses its ":tag" and keeps its
 * dots, except a final ".gguf"; a directory (trailing '/') keeps its dots. */
static void source_stem(const struct mf_source *src, const char **start, size_t *len)
{
    const char *ref = src->ref, *scheme = strstr(ref, "://");
    size_t n = scheme ? strcspn(ref, "?#") : strlen(ref);
    int dir = 0;
    while (n > 0 && ref[n - 1] == '/') {
        n--;
        dir = 1;
    }
    const char *s = ref + n, *min = scheme ? scheme + 3 : ref;
    while (s > min && s[-1] != '/')
        s--;
    size_t k = (size_t)(ref + n - s);
    if (!scheme && !src->is_path) {
        const char *colon = memchr(s, ':', k);
        if (colon) {
            *start = s;
            *len = (size_t)(colon - s);
            return; /* "ns/m:7b" -> "m" */
        }
        if (k > 5 && memcmp(s + k - 5, ".gguf", 5) == 0)
            k -= 5;
    } else if (!dir) {
        const char *dot = NULL;
        for (const char *q = s + 1; q < s + k; q++)
            if (*q == '.')
                dot = q;
        if (dot)
            k = (size_t)(dot - s);
    }
    *start = s;
    *len = k;
}

/* Copies s[0..n) into out (cap > ADAPTER_NAME_MAX) as a plain name: each run
 * of bytes outside [A-Za-z0-9._-] becomes one '-', and leading and trailing
 * '.', '_', '-' are dropped; at most max bytes. Returns 1 when the result is
 * a plain_name, else 0 (out is then meaningless). */
static int sanitize_name(const char *s, size_t n, char *out, size_t max)
{
    size_t k = 0;
    int gap = 0;
    for (size_t i = 0; i < n && k < max; i++) {
        if (!name_char(s[i]) || (k == 0 && strchr("._-", s[i]))) {
            gap = 1;
            continue;
        }
        if (gap && k > 0) {
            if (k + 1 >= max)
                break;
            out[k++] = '-';
        }
        gap = 0;
        out[k++] = s[i];
    }
    while (k > 0 && strchr("._-", out[k - 1]))
        k--;
    out[k] = '\0';
    return plain_name(out);
}

/* 1 when name is an ADAPTER's --name anywhere in the Modelfile, or the name
 * of an adapter already in the list. */
static int name_taken(const struct mf_modelfile *mf, const json_t *adapters, const char *name)
{
    size_t i;
    json_t *a;
    for (i = 0; i < mf->n_instrs; i++) {
        const struct mf_instr *in = &mf->instrs[i];
        if (in->kind == MF_INSTR_ADAPTER && !in->ignored && in->u.src.name &&
            strcmp(in->u.src.name, name) == 0)
            return 1;
    }
    json_array_foreach (adapters, i, a) {
        const char *have = json_string_value(json_object_get(a, "name"));
        if (have && strcmp(have, name) == 0)
            return 1;
    }
    return 0;
}

/* The name of an ADAPTER without --name, from its source (source_stem,
 * sanitize_name), made unique with "-2", "-3", ... Returns 1 with the name in
 * out (cap > ADAPTER_NAME_MAX), or 0 when the source gives no usable name:
 * the adapter is then unnamed and known by its index. */
static int default_name(const struct mf_modelfile *mf, const json_t *adapters,
                        const struct mf_source *src, char *out)
{
    const char *s;
    size_t n;
    char stem[ADAPTER_NAME_MAX + 1];
    source_stem(src, &s, &n);
    if (!sanitize_name(s, n, stem, ADAPTER_NAME_MAX - 3)) /* room for "-99" */
        return 0;
    snprintf(out, ADAPTER_NAME_MAX + 1, "%s", stem);
    for (int k = 2; name_taken(mf, adapters, out); k++) {
        if (k > ADAPTER_DEDUP_MAX)
            return 0;
        snprintf(out, ADAPTER_NAME_MAX + 1, "%.*s-%d", ADAPTER_NAME_MAX - 3, stem, k);
    }
    return 1;
}

/* The name is --name, else default_name's, else none (JSON null). The path
 * is the one the adapter's layer gets (plan.c reads it from here):
 * /adapters/<name>.gguf for a plain name not taken yet, else
 * /adapters/<index>.gguf. */
static int add_adapter(json_t *adapters, const struct mf_modelfile *mf, const struct mf_instr *in)
{
    char path[96], derived[ADAPTER_NAME_MAX + 1];
    const char *name = in->u.src.name;
    if (!name && default_name(mf, adapters, &in->u.src, derived))
        name = derived;
    snprintf(path, sizeof path, "/adapters/%s.gguf", name ? name : "");
    if (!name || !plain_name(name) || path_taken(adapters, path))
        snprintf(path, sizeof path, "/adapters/%zu.gguf", json_array_size(adapters));
    json_t *a = json_pack("{s:o, s:f, s:s}", "name", name ? json_string(name) : json_null(),
                          "scale", in->u.src.scale, "path", path);
    return json_array_append_new(adapters, a);
}

static int add_message(json_t *msgs, const struct mf_instr *in)
{
    return json_array_append_new(msgs, json_pack("{s:s, s:s}", "role",
                                                 mf_modelfile_role_name(in->u.msg.role),
                                                 "content", in->u.msg.content));
}

/* One instruction's contribution; 0, or -1 when memory ran out. */
static int add_instr(json_t *doc, const struct mf_instr *in)
{
    switch (in->kind) {
    case MF_INSTR_PARAMETER:
        return add_param(json_object_get(doc, "params"), &in->u.param);
    case MF_INSTR_ADAPTER:
        return 0; /* plan_config_doc calls add_adapter: it needs the whole Modelfile */
    case MF_INSTR_DRAFT:
        return json_object_set_new(doc, "draft", json_pack("{s:s}", "path", "/" PLAN_DRAFT_PATH));
    case MF_INSTR_TEMPLATE:
        return json_object_set_new(doc, "template", json_string(in->value));
    case MF_INSTR_SYSTEM:
        return json_object_set_new(doc, "system", json_string(in->value));
    case MF_INSTR_REQUIRES:
        return json_object_set_new(doc, "requires", json_string(in->value));
    case MF_INSTR_RENDERER:
        return json_object_set_new(doc, "renderer", json_string(in->value));
    case MF_INSTR_PARSER:
        return json_object_set_new(doc, "parser", json_string(in->value));
    case MF_INSTR_MESSAGE:
        return add_message(json_object_get(doc, "messages"), in);
    case MF_INSTR_LICENSE:
        return json_array_append_new(json_object_get(doc, "license"), json_string(in->value));
    case MF_INSTR_LABEL:
        return add_kv(json_object_get(doc, "labels"), in);
    case MF_INSTR_ENV:
        return add_kv(json_object_get(doc, "env"), in);
    default:
        return 0; /* FROM, RUN, ARG: not part of the config */
    }
}

json_t *plan_config_doc(const struct mf_modelfile *mf)
{
    json_t *doc = json_pack("{s:s, s:{s:s}, s:[], s:{}, s:[], s:[], s:{}, s:{}}", "schema",
                            CONFIG_SCHEMA, "model", "path", "/" PLAN_MODEL_PATH, "adapters",
                            "params", "messages", "license", "labels", "env");
    if (!doc)
        return NULL;
    for (size_t i = 0; i < mf->n_instrs; i++) {
        if (mf->instrs[i].ignored)
            continue;
        const struct mf_instr *in = &mf->instrs[i];
        int rc = in->kind != MF_INSTR_ADAPTER ? add_instr(doc, in)
                 : in->u.src.merge            ? 0
                                   : add_adapter(json_object_get(doc, "adapters"), mf, in);
        if (rc != 0) {
            json_decref(doc);
            return NULL;
        }
    }
    return doc;
}

/* ---- YAML ------------------------------------------------------------------------ */

static int write_out(void *data, unsigned char *buffer, size_t size)
{
    return mf_buf_append(data, buffer, size, NULL) == 0;
}

static int scalar(yaml_emitter_t *e, const char *s, int plain)
{
    yaml_event_t ev;
    yaml_scalar_style_t style = YAML_PLAIN_SCALAR_STYLE;
    if (!plain) /* literal blocks read best for templates; libyaml falls back when unfit */
        style = strchr(s, '\n') ? YAML_LITERAL_SCALAR_STYLE : YAML_DOUBLE_QUOTED_SCALAR_STYLE;
    if (!yaml_scalar_event_initialize(&ev, NULL, NULL, (yaml_char_t *)s, (int)strlen(s), plain,
                                      !plain, style))
        return -1;
    return yaml_emitter_emit(e, &ev) ? 0 : -1;
}

static int emit_value(yaml_emitter_t *e, const json_t *v, int depth);

static int emit_object(yaml_emitter_t *e, const json_t *v, int depth)
{
    yaml_event_t ev;
    const char *k;
    json_t *x;
    if (!yaml_mapping_start_event_initialize(&ev, NULL, NULL, 1, YAML_BLOCK_MAPPING_STYLE) ||
        !yaml_emitter_emit(e, &ev))
        return -1;
    json_object_foreach ((json_t *)v, k, x) {
        /* keys are plain when YAML allows it: label keys like a.b.c read naturally */
        yaml_event_t kev;
        if (!yaml_scalar_event_initialize(&kev, NULL, NULL, (yaml_char_t *)k, (int)strlen(k), 1,
                                          1, YAML_ANY_SCALAR_STYLE) ||
            !yaml_emitter_emit(e, &kev) || emit_value(e, x, depth + 1) != 0)
            return -1;
    }
    return yaml_mapping_end_event_initialize(&ev) && yaml_emitter_emit(e, &ev) ? 0 : -1;
}

static int emit_array(yaml_emitter_t *e, const json_t *v, int depth)
{
    yaml_event_t ev;
    size_t i;
    json_t *x;
    if (!yaml_sequence_start_event_initialize(&ev, NULL, NULL, 1, YAML_BLOCK_SEQUENCE_STYLE) ||
        !yaml_emitter_emit(e, &ev))
        return -1;
    json_array_foreach (v, i, x)
        if (emit_value(e, x, depth + 1) != 0)
            return -1;
    return yaml_sequence_end_event_initialize(&ev) && yaml_emitter_emit(e, &ev) ? 0 : -1;
}

static int emit_value(yaml_emitter_t *e, const json_t *v, int depth)
{
    char num[48];
    if (depth > CONFIG_MAX_DEPTH)
        return -1;
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        return emit_object(e, v, depth);
    case JSON_ARRAY:
        return emit_array(e, v, depth);
    case JSON_STRING:
        return scalar(e, json_string_value(v), 0);
    case JSON_INTEGER:
        snprintf(num, sizeof num, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        return scalar(e, num, 1);
    case JSON_REAL:
        mf_modelfile_float_str((float)json_real_value(v), num, sizeof num);
        return scalar(e, num, 1);
    case JSON_TRUE:
        return scalar(e, "true", 1);
    case JSON_FALSE:
        return scalar(e, "false", 1);
    default:
        return scalar(e, "null", 1);
    }
}

static int emit_doc(yaml_emitter_t *e, const json_t *config)
{
    yaml_event_t ev;
    if (!yaml_stream_start_event_initialize(&ev, YAML_UTF8_ENCODING) || !yaml_emitter_emit(e, &ev))
        return -1;
    if (!yaml_document_start_event_initialize(&ev, NULL, NULL, NULL, 1) ||
        !yaml_emitter_emit(e, &ev) || emit_value(e, config, 0) != 0)
        return -1;
    if (!yaml_document_end_event_initialize(&ev, 1) || !yaml_emitter_emit(e, &ev))
        return -1;
    return yaml_stream_end_event_initialize(&ev) && yaml_emitter_emit(e, &ev) ? 0 : -1;
}

int plan_config_yaml(const json_t *config, char **out, size_t *len, struct mf_err *err)
{
    yaml_emitter_t e;
    struct mf_buf b;
    mf_buf_init(&b, CONFIG_YAML_MAX);
    if (!yaml_emitter_initialize(&e))
        return mf_err_set(err, MF_ENOMEM, "config: cannot start the YAML emitter");
    yaml_emitter_set_output(&e, write_out, &b);
    yaml_emitter_set_unicode(&e, 1);
    yaml_emitter_set_width(&e, -1); /* no folding: equal configs give equal bytes */
    int rc = emit_doc(&e, config) == 0 && yaml_emitter_flush(&e) ? 0 : -1;
    if (rc)
        rc = mf_err_set(err, MF_ENOMEM, "config: cannot write YAML: %s",
                        e.problem ? e.problem : "output too large");
    yaml_emitter_delete(&e);
    if (rc == 0 && b.data) { /* mf_buf keeps a NUL after len */
        *len = b.len;
        *out = b.data;
        return 0;
    }
    mf_buf_free(&b);
    return rc ? rc : mf_err_set(err, MF_ENOMEM, "config: empty YAML output");
}
