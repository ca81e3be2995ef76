/*
 * serve_config.c: mfc-serve's settings: defaults, the image's model.yaml
 * (schema mfc.config/v1, written by compiler/plan_config.c), MFC_* variables
 * and command-line flags, in that order of precedence (flags win).
 *
 * YAML is read with libyaml's document loader and turned into jansson values
 * so the rest of the server handles one tree type; plain scalars resolve to
 * int, float, bool or null as YAML 1.2's core schema says, quoted ones stay
 * strings (plan_config.c quotes every string). Bounded: file size, depth.
 */
#include "runtime/serve/serve.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <yaml.h>

#include "common/file.h"

#define YAML_MAX_DEPTH 16

const char serve_usage[] =
    "usage: mfc-serve --model FILE.gguf [--config model.yaml] [--host ADDR] [--port N]\n"
    "                 [--api-key KEY] [--adapter NAME=PATH[@OFFSET:SIZE]]... [--threads N]\n"
    "                 [--name NAME] [--ctx N] [--max-seqs N] [--max-batch-tokens N]\n"
    "                 [--max-prefill-tokens N] [--kv-cache-gb G]\n"
    "                 [--kv-cache-type f16|q8|fp8] [--log-level LEVEL]\n"
    "                 [--model-offset BYTES [--model-size BYTES]] [--config-name NAME]\n"
    "                 [--read-timeout S] [--max-connections N] [--max-connections-per-client N]\n"
    "                 [--draft PATH[@OFFSET:SIZE]] [--spec-max-batch N]\n"
    "Serves a GGUF model over the OpenAI and Ollama HTTP APIs (docs/api.md).\n"
    "Environment: MFC_CONFIG MFC_MODEL MFC_HOST MFC_PORT MFC_API_KEY MFC_MODEL_NAME\n"
    "  MFC_KV_CACHE_GB MFC_KV_CACHE_TYPE MFC_MAX_SEQS MFC_MAX_BATCH_TOKENS MFC_MAX_REQUESTS\n"
    "  MFC_MAX_PREFILL_TOKENS MFC_MAX_WAITING\n"
    "  MFC_MAX_BODY MFC_CTX MFC_THREADS MFC_DEVICE MFC_DRAIN_TIMEOUT MFC_LOG_LEVEL\n"
    "  MFC_READ_TIMEOUT MFC_MAX_CONNECTIONS MFC_MAX_CONNECTIONS_PER_CLIENT MFC_DRAFT\n"
    "  MFC_SPEC_MAX_BATCH\n"
    "model.yaml's server: mapping sets the same by flag name (server: {read-timeout: 5}).\n"
    "--model-offset/--model-size, and an adapter's @OFFSET:SIZE, serve a GGUF lying inside\n"
    "a bigger file (a tar layer), mapped in place. --draft: the speculative-decoding draft\n"
    "model (model.yaml's draft:), a GGUF of the same vocabulary (docs/spec.md).\n";

static char *dup_or_null(const char *s)
{
    return s ? strdup(s) : NULL;
}

static void set_str(char **dst, const char *s)
{
    free(*dst);
    *dst = dup_or_null(s);
}

void serve_config_init(struct serve_config *c)
{
    memset(c, 0, sizeof *c);
    c->host = strdup("0.0.0.0");
    c->port = 8080;
    c->device = strdup("auto"); /* the GPU when one is visible (serve_load.c pick_backend) */
    c->max_seqs = 64;
    c->max_batch_tokens = 512;
    c->max_prefill_tokens = -1; /* the backend's (serve_load.c) */
    c->max_requests = 256;
    c->max_waiting = 256;
    c->max_body = 4u << 20;
    c->drain_s = 30;
    c->read_timeout = 10;
    c->max_connections = 4096;
    c->max_conns_per_client = 512;
    c->spec_max_batch = 32; /* SPEC_DEFAULT_MAX_BATCH */
    c->params = json_object();
    c->messages = json_array();
    c->doc = json_object();
    c->log_level = MF_LOG_INFO;
}

void serve_config_free(struct serve_config *c)
{
    free(c->host);
    free(c->api_key);
    free(c->model_path);
    free(c->draft_path);
    free(c->config_path);
    free(c->config_name);
    free(c->model_name);
    free(c->device);
    free(c->kv_cache_gb);
    for (int i = 0; i < c->n_adapters; i++) {
        free(c->adapters[i].name);
        free(c->adapters[i].path);
    }
    json_decref(c->params);
    free(c->template_src);
    free(c->system);
    json_decref(c->messages);
    json_decref(c->doc);
    memset(c, 0, sizeof *c);
}

/* ---- YAML to JSON ---- */

static json_t *plain_scalar(const char *s, size_t n)
{
    char *end;
    if (n == 0 || strcmp(s, "~") == 0 || strcmp(s, "null") == 0 || strcmp(s, "Null") == 0 ||
        strcmp(s, "NULL") == 0)
        return json_null();
    if (strcmp(s, "true") == 0 || strcmp(s, "True") == 0 || strcmp(s, "TRUE") == 0)
        return json_true();
    if (strcmp(s, "false") == 0 || strcmp(s, "False") == 0 || strcmp(s, "FALSE") == 0)
        return json_false();
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (*end == '\0' && errno == 0 && end != s)
        return json_integer(v);
    if (strspn(s, "+-0123456789.eE") == n) {
        double d = strtod(s, &end);
        if (*end == '\0' && end != s && isfinite(d))
            return json_real(d);
    }
    if (strcmp(s, ".inf") == 0 || strcmp(s, ".nan") == 0 || strcmp(s, "-.inf") == 0)
        return json_string(s); /* JSON has no such numbers */
    return json_stringn(s, n);
}

static json_t *node_to_json(yaml_document_t *doc, yaml_node_t *node, int depth)
{
    if (!node || depth > YAML_MAX_DEPTH)
        return NULL;
    switch (node->type) {
    case YAML_SCALAR_NODE: {
        const char *v = (const char *)node->data.scalar.value;
        size_t n = node->data.scalar.length;
        if (node->data.scalar.style == YAML_PLAIN_SCALAR_STYLE)
            return plain_scalar(v, n);
        return json_stringn(v, n);
    }
    case YAML_SEQUENCE_NODE: {
        json_t *a = json_array();
        for (yaml_node_item_t *it = node->data.sequence.items.start;
             a && it < node->data.sequence.items.top; it++) {
            json_t *x = node_to_json(doc, yaml_document_get_node(doc, *it), depth + 1);
            if (!x || json_array_append_new(a, x)) {
                json_decref(a);
                return NULL;
            }
        }
        return a;
    }
    case YAML_MAPPING_NODE: {
        json_t *o = json_object();
        for (yaml_node_pair_t *p = node->data.mapping.pairs.start;
             o && p < node->data.mapping.pairs.top; p++) {
            yaml_node_t *k = yaml_document_get_node(doc, p->key);
            if (!k || k->type != YAML_SCALAR_NODE) {
                json_decref(o);
                return NULL;
            }
            json_t *x = node_to_json(doc, yaml_document_get_node(doc, p->value), depth + 1);
            if (!x || json_object_setn_new(o, (const char *)k->data.scalar.value,
                                           k->data.scalar.length, x)) {
                json_decref(o);
                return NULL;
            }
        }
        return o;
    }
    default:
        return NULL;
    }
}

json_t *serve_yaml_to_json(const char *text, size_t len, const char *what, struct mf_err *err)
{
    yaml_parser_t p;
    yaml_document_t doc;
    json_t *out = NULL;

    if (!yaml_parser_initialize(&p)) {
        mf_err_set(err, MF_ENOMEM, "%s: cannot start the YAML parser", what);
        return NULL;
    }
    yaml_parser_set_input_string(&p, (const unsigned char *)text, len);
    if (!yaml_parser_load(&p, &doc)) {
        mf_err_set(err, MF_EFORMAT, "%s:%zu:%zu: %s", what, p.problem_mark.line + 1,
                   p.problem_mark.column + 1, p.problem ? p.problem : "invalid YAML");
        yaml_parser_delete(&p);
        return NULL;
    }
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    if (!root)
        out = json_object(); /* empty document */
    else if (!(out = node_to_json(&doc, root, 0)))
        mf_err_set(err, MF_EFORMAT,
                   "%s: YAML nesting deeper than %d, a non-scalar key, or out of memory", what,
                   YAML_MAX_DEPTH);
    yaml_document_delete(&doc);
    yaml_parser_delete(&p);
    return out;
}

/* ---- model.yaml ---- */

static int apply(struct serve_config *c, const char *key, const char *v, struct mf_err *err);
static int known_setting(const char *key);

/* server: {read-timeout: 5, max-connections: 2048, ...}: any setting an MFC_*
 * variable sets, by its flag name; the variables and flags still win. */
static int load_server(struct serve_config *c, const json_t *server, const char *file,
                       struct mf_err *err)
{
    const char *k;
    json_t *v;
    if (!server || json_is_null(server))
        return 0;
    if (!json_is_object(server))
        return mf_err_set(err, MF_EFORMAT, "%s: 'server' must be a mapping", file);
    json_object_foreach ((json_t *)server, k, v) {
        char text[64];
        if (!known_setting(k))
            return mf_err_set(err, MF_EFORMAT, "%s: server.%s is not a setting (they are the "
                              "flags of mfc-serve --help, such as read-timeout)", file, k);
        if (json_is_integer(v))
            snprintf(text, sizeof text, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        else if (json_is_real(v))
            snprintf(text, sizeof text, "%g", json_real_value(v));
        else if (json_is_string(v) && json_string_length(v) < sizeof text)
            snprintf(text, sizeof text, "%s", json_string_value(v));
        else
            return mf_err_set(err, MF_EFORMAT, "%s: server.%s must be a number or a short "
                              "string", file, k);
        int rc = apply(c, k, text, err);
        if (rc) {
            mf_err_prefix(err, "%s: server.%s", file, k);
            err->code = MF_EFORMAT;
            return MF_EFORMAT;
        }
    }
    return 0;
}

/* path, made absolute against dir when relative. */
static char *resolve(const char *dir, const char *path)
{
    if (path[0] == '/' || !dir)
        return strdup(path);
    size_t n = strlen(dir) + strlen(path) + 2;
    char *s = malloc(n);
    if (s)
        snprintf(s, n, "%s/%s", dir, path);
    return s;
}

static int cfg_str(const json_t *doc, const char *key, const char *file, const char **out,
                   struct mf_err *err)
{
    json_t *v = json_object_get(doc, key);
    *out = NULL;
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_string(v))
        return mf_err_set(err, MF_EFORMAT, "%s: '%s' must be a string", file, key);
    *out = json_string_value(v);
    return 0;
}

static int load_adapters(struct serve_config *c, const json_t *list, const char *dir,
                         const char *file, struct mf_err *err)
{
    size_t i;
    json_t *a;
    if (!list || json_is_null(list))
        return 0;
    if (!json_is_array(list))
        return mf_err_set(err, MF_EFORMAT, "%s: 'adapters' must be a list", file);
    json_array_foreach (list, i, a) {
        json_t *name = json_object_get(a, "name");
        json_t *path = json_object_get(a, "path");
        json_t *scale = json_object_get(a, "scale");
        if (!json_is_object(a) || !json_is_string(path))
            return mf_err_set(err, MF_EFORMAT, "%s: adapters[%zu] needs a string 'path'", file,
                              i);
        if (name && !json_is_null(name) && !json_is_string(name))
            return mf_err_set(err, MF_EFORMAT, "%s: adapters[%zu].name must be a string", file,
                              i);
        if (scale && !json_is_number(scale))
            return mf_err_set(err, MF_EFORMAT, "%s: adapters[%zu].scale must be a number",
                              file, i);
        json_t *off = json_object_get(a, "offset");
        json_t *size = json_object_get(a, "size");
        if ((off && !json_is_null(off) && (!json_is_integer(off) || json_integer_value(off) < 0)) ||
            (size && !json_is_null(size) &&
             (!json_is_integer(size) || json_integer_value(size) < 0)))
            return mf_err_set(err, MF_EFORMAT,
                              "%s: adapters[%zu].offset and .size must be byte counts "
                              "(whole numbers >= 0)",
                              file, i);
        if (c->n_adapters >= SERVE_MAX_ADAPTERS)
            return mf_err_set(err, MF_ERANGE, "%s: more than %d adapters", file,
                              SERVE_MAX_ADAPTERS);
        struct serve_adapter_cfg *ac = &c->adapters[c->n_adapters++];
        ac->offset = json_is_integer(off) ? (uint64_t)json_integer_value(off) : 0;
        ac->size = json_is_integer(size) ? (uint64_t)json_integer_value(size) : 0;
        ac->name = json_is_string(name) ? strdup(json_string_value(name)) : NULL;
        ac->path = resolve(dir, json_string_value(path));
        ac->scale = scale ? (float)json_number_value(scale) : 1.0f;
    }
    return 0;
}

/* draft: {path, offset?, size?} (plan_config.c writes the path; mfc run
 * rewrites it to a layer blob's range). */
static int load_draft(struct serve_config *c, const json_t *d, const char *dir, const char *file,
                      struct mf_err *err)
{
    if (!d || json_is_null(d))
        return 0;
    json_t *path = json_object_get(d, "path");
    json_t *off = json_object_get(d, "offset");
    json_t *size = json_object_get(d, "size");
    if (!json_is_object(d) || !json_is_string(path))
        return mf_err_set(err, MF_EFORMAT, "%s: 'draft' needs a string 'path'", file);
    if ((off && !json_is_null(off) && (!json_is_integer(off) || json_integer_value(off) < 0)) ||
        (size && !json_is_null(size) && (!json_is_integer(size) || json_integer_value(size) < 0)))
        return mf_err_set(err, MF_EFORMAT,
                          "%s: draft.offset and .size must be byte counts (whole numbers >= 0)",
                          file);
    free(c->draft_path);
    c->draft_path = resolve(dir, json_string_value(path));
    c->draft_offset = json_is_integer(off) ? (uint64_t)json_integer_value(off) : 0;
    c->draft_size = json_is_integer(size) ? (uint64_t)json_integer_value(size) : 0;
    return c->draft_path ? 0 : mf_err_set(err, MF_ENOMEM, "out of memory");
}

int serve_config_load_yaml(struct serve_config *c, const char *path, struct mf_err *err)
{
    char *text = NULL;
    size_t len = 0;
    /* messages name the file as the user knows it (mfc run passes a memfd) */
    const char *shown = c->config_name ? c->config_name : path;
    int rc = mf_file_read(path, SERVE_CONFIG_MAX, &text, &len, err);
    if (rc)
        return c->config_name ? mf_err_prefix(err, "%s", shown) : rc;
    json_t *doc = serve_yaml_to_json(text, len, shown, err);
    free(text);
    if (!doc)
        return err->code ? err->code : MF_EFORMAT;
    if (!json_is_object(doc)) {
        json_decref(doc);
        return mf_err_set(err, MF_EFORMAT, "%s: expected a mapping at the top", shown);
    }
    char *dir = strdup(path);
    char *slash = dir ? strrchr(dir, '/') : NULL;
    if (slash)
        *slash = '\0';
    const char *d = slash ? (dir[0] ? dir : "/") : NULL;
    const char *schema, *tmpl, *sys;
    json_t *model = json_object_get(doc, "model");
    json_t *params = json_object_get(doc, "params");
    json_t *msgs = json_object_get(doc, "messages");

    rc = cfg_str(doc, "schema", shown, &schema, err);
    if (!rc && schema && strcmp(schema, "mfc.config/v1") != 0)
        rc = mf_err_set(err, MF_EUNSUPPORTED, "%s: schema '%s' (this mfc-serve reads mfc.config/v1)",
                        shown, schema);
    if (!rc && model && !json_is_object(model))
        rc = mf_err_set(err, MF_EFORMAT, "%s: 'model' must be a mapping", shown);
    if (!rc && model) {
        json_t *mp = json_object_get(model, "path");
        if (mp && !json_is_string(mp))
            rc = mf_err_set(err, MF_EFORMAT, "%s: 'model.path' must be a string", shown);
        else if (mp && !c->model_path)
            c->model_path = resolve(d, json_string_value(mp));
    }
    if (!rc)
        rc = load_adapters(c, json_object_get(doc, "adapters"), d, shown, err);
    if (!rc)
        rc = load_server(c, json_object_get(doc, "server"), shown, err);
    if (!rc)
        rc = load_draft(c, json_object_get(doc, "draft"), d, shown, err);
    if (!rc && params && !json_is_null(params)) {
        if (!json_is_object(params))
            rc = mf_err_set(err, MF_EFORMAT, "%s: 'params' must be a mapping", shown);
        else {
            json_decref(c->params);
            c->params = json_incref(params);
        }
    }
    if (!rc && msgs && !json_is_null(msgs)) {
        size_t i;
        json_t *m;
        if (!json_is_array(msgs))
            rc = mf_err_set(err, MF_EFORMAT, "%s: 'messages' must be a list", shown);
        json_array_foreach (msgs, i, m)
            if (!rc && (!json_is_string(json_object_get(m, "role")) ||
                        !json_is_string(json_object_get(m, "content"))))
                rc = mf_err_set(err, MF_EFORMAT,
                                "%s: messages[%zu] needs string 'role' and 'content'", shown, i);
        if (!rc) {
            json_decref(c->messages);
            c->messages = json_incref(msgs);
        }
    }
    if (!rc)
        rc = cfg_str(doc, "template", shown, &tmpl, err);
    if (!rc && tmpl)
        set_str(&c->template_src, tmpl);
    if (!rc)
        rc = cfg_str(doc, "system", shown, &sys, err);
    if (!rc && sys)
        set_str(&c->system, sys);
    if (!rc) {
        json_decref(c->doc);
        c->doc = json_incref(doc);
    }
    json_decref(doc);
    free(dir);
    return rc;
}

/* ---- environment and flags ---- */

static int parse_int(const char *what, const char *s, long lo, long hi, int *out,
                     struct mf_err *err)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (!*s || *end || errno || v < lo || v > hi)
        return mf_err_set(err, MF_EUSAGE, "%s \"%s\": expected a whole number in %ld..%ld", what,
                          s, lo, hi);
    *out = (int)v;
    return 0;
}

static int parse_u64(const char *what, const char *s, uint64_t *out, struct mf_err *err)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (!*s || *end || errno || s[0] == '-')
        return mf_err_set(err, MF_EUSAGE, "%s \"%s\": expected a byte count", what, s);
    *out = (uint64_t)v;
    return 0;
}

/* "PATH@OFFSET:SIZE" -> the path's length and the numbers, or 0 when the
 * value has no such suffix (then all of it is the path). */
static size_t split_range(const char *v, uint64_t *off, uint64_t *size)
{
    const char *at = strrchr(v, '@');
    if (!at || at == v)
        return 0;
    const char *o = at + 1, *colon = strchr(o, ':');
    if (!colon || colon == o || !colon[1] || strspn(o, "0123456789") != (size_t)(colon - o) ||
        strspn(colon + 1, "0123456789") != strlen(colon + 1))
        return 0;
    char *end;
    errno = 0;
    unsigned long long a = strtoull(o, &end, 10);
    unsigned long long b = strtoull(colon + 1, &end, 10);
    if (errno)
        return 0;
    *off = (uint64_t)a;
    *size = (uint64_t)b;
    return (size_t)(at - v);
}

/* --adapter NAME=PATH or NAME=PATH@OFFSET:SIZE (a GGUF inside a bigger file). */
static int add_adapter_flag(struct serve_config *c, const char *arg, struct mf_err *err)
{
    const char *eq = strchr(arg, '=');
    if (!eq || eq == arg || !eq[1])
        return mf_err_set(err, MF_EUSAGE, "--adapter \"%s\": expected NAME=PATH or "
                          "NAME=PATH@OFFSET:SIZE", arg);
    uint64_t off = 0, size = 0;
    size_t pl = split_range(eq + 1, &off, &size);
    if (!pl)
        pl = strlen(eq + 1);
    char *path = strndup(eq + 1, pl);
    if (!path)
        return mf_err_set(err, MF_ENOMEM, "out of memory");
    size_t nl = (size_t)(eq - arg);
    struct serve_adapter_cfg *a = NULL;
    for (int i = 0; i < c->n_adapters && !a; i++) /* same name as in model.yaml: new path */
        if (c->adapters[i].name && strlen(c->adapters[i].name) == nl &&
            memcmp(c->adapters[i].name, arg, nl) == 0)
            a = &c->adapters[i];
    if (!a) {
        if (c->n_adapters >= SERVE_MAX_ADAPTERS) {
            free(path);
            return mf_err_set(err, MF_EUSAGE, "more than %d adapters", SERVE_MAX_ADAPTERS);
        }
        a = &c->adapters[c->n_adapters++];
        a->name = strndup(arg, nl);
        a->scale = 1.0f;
    }
    free(a->path);
    a->path = path;
    a->offset = off;
    a->size = size;
    return 0;
}

static int kv_gb_ok(const char *s, struct mf_err *err)
{
    char *end;
    double v = strtod(s, &end);
    if (!*s || *end || !(v > 0) || v > 1e6)
        return mf_err_set(err, MF_EUSAGE, "KV cache size \"%s\": expected GiB such as 8 or 0.5",
                          s);
    return 0;
}

/* --draft PATH or PATH@OFFSET:SIZE; "" (MFC_DRAFT=) drops model.yaml's. */
static int set_draft(struct serve_config *c, const char *v, struct mf_err *err)
{
    uint64_t off = 0, size = 0;
    size_t pl = v[0] ? split_range(v, &off, &size) : 0;
    free(c->draft_path);
    c->draft_path = v[0] ? strndup(v, pl ? pl : strlen(v)) : NULL;
    c->draft_offset = off;
    c->draft_size = size;
    return v[0] && !c->draft_path ? mf_err_set(err, MF_ENOMEM, "out of memory") : 0;
}

/* One setting by name, from env or a flag. */
static int apply(struct serve_config *c, const char *key, const char *v, struct mf_err *err)
{
    if (!strcmp(key, "host"))
        set_str(&c->host, v);
    else if (!strcmp(key, "port"))
        return parse_int("port", v, 0, 65535, &c->port, err);
    else if (!strcmp(key, "api-key"))
        set_str(&c->api_key, v[0] ? v : NULL);
    else if (!strcmp(key, "model"))
        set_str(&c->model_path, v);
    else if (!strcmp(key, "model-offset"))
        return parse_u64("--model-offset", v, &c->model_offset, err);
    else if (!strcmp(key, "model-size"))
        return parse_u64("--model-size", v, &c->model_size, err);
    else if (!strcmp(key, "name"))
        set_str(&c->model_name, v);
    else if (!strcmp(key, "device"))
        set_str(&c->device, v);
    else if (!strcmp(key, "kv-cache-gb")) {
        int rc = kv_gb_ok(v, err);
        if (rc)
            return rc;
        set_str(&c->kv_cache_gb, v);
    } else if (!strcmp(key, "kv-cache-type")) {
        /* q8_0: Ollama's name for its 8-bit cache (OLLAMA_KV_CACHE_TYPE); fp8: vLLM's */
        if (!strcmp(v, "f16"))
            c->kv_type = BACKEND_KV_F16;
        else if (!strcmp(v, "q8") || !strcmp(v, "q8_0"))
            c->kv_type = BACKEND_KV_Q8;
        else if (!strcmp(v, "fp8"))
            c->kv_type = BACKEND_KV_FP8;
        else
            return mf_err_set(err, MF_EUSAGE, "KV cache type \"%s\": expected f16, q8 or fp8", v);
    } else if (!strcmp(key, "threads"))
        return parse_int("threads", v, 0, 1024, &c->threads, err);
    else if (!strcmp(key, "max-seqs"))
        return parse_int("max-seqs", v, 1, 4096, &c->max_seqs, err);
    else if (!strcmp(key, "max-batch-tokens"))
        return parse_int("max-batch-tokens", v, 16, 1 << 20, &c->max_batch_tokens, err);
    else if (!strcmp(key, "max-prefill-tokens"))
        return parse_int("max-prefill-tokens", v, 0, 1 << 20, &c->max_prefill_tokens, err);
    else if (!strcmp(key, "max-requests"))
        return parse_int("MFC_MAX_REQUESTS", v, 1, 1 << 20, &c->max_requests, err);
    else if (!strcmp(key, "max-waiting"))
        return parse_int("MFC_MAX_WAITING", v, 1, 1 << 20, &c->max_waiting, err);
    else if (!strcmp(key, "ctx"))
        return parse_int("ctx", v, 0, 1 << 24, &c->ctx, err);
    else if (!strcmp(key, "draft"))
        return set_draft(c, v, err);
    else if (!strcmp(key, "spec-max-batch"))
        return parse_int("MFC_SPEC_MAX_BATCH", v, 0, 1 << 20, &c->spec_max_batch, err);
    else if (!strcmp(key, "drain"))
        return parse_int("MFC_DRAIN_TIMEOUT", v, 0, 86400, &c->drain_s, err);
    else if (!strcmp(key, "read-timeout"))
        return parse_int("read timeout", v, 1, 3600, &c->read_timeout, err);
    else if (!strcmp(key, "max-connections"))
        return parse_int("max connections", v, 1, 1 << 20, &c->max_connections, err);
    else if (!strcmp(key, "max-connections-per-client"))
        return parse_int("max connections per client", v, 0, 1 << 20, &c->max_conns_per_client,
                         err);
    else if (!strcmp(key, "max-body")) {
        int n;
        int rc = parse_int("MFC_MAX_BODY", v, 1024, 1 << 30, &n, err);
        if (rc)
            return rc;
        c->max_body = (size_t)n;
    } else if (!strcmp(key, "log-level")) {
        if (mf_log_parse_level(v, &c->log_level))
            return mf_err_set(err, MF_EUSAGE, "log level \"%s\": expected debug, info, warn or error",
                              v);
    }
    return 0;
}

static const struct {
    const char *env, *key;
} env_map[] = {
    {"MFC_HOST", "host"},
    {"MFC_PORT", "port"},
    {"MFC_API_KEY", "api-key"},
    {"MFC_MODEL", "model"},
    {"MFC_MODEL_NAME", "name"},
    {"MFC_DEVICE", "device"},
    {"MFC_KV_CACHE_GB", "kv-cache-gb"},
    {"MFC_KV_CACHE_TYPE", "kv-cache-type"},
    {"MFC_THREADS", "threads"},
    {"MFC_MAX_SEQS", "max-seqs"},
    {"MFC_MAX_BATCH_TOKENS", "max-batch-tokens"},
    {"MFC_MAX_PREFILL_TOKENS", "max-prefill-tokens"},
    {"MFC_MAX_REQUESTS", "max-requests"},
    {"MFC_MAX_WAITING", "max-waiting"},
    {"MFC_CTX", "ctx"},
    {"MFC_DRAIN_TIMEOUT", "drain"},
    {"MFC_MAX_BODY", "max-body"},
    {"MFC_LOG_LEVEL", "log-level"},
    {"MFC_READ_TIMEOUT", "read-timeout"},
    {"MFC_MAX_CONNECTIONS", "max-connections"},
    {"MFC_MAX_CONNECTIONS_PER_CLIENT", "max-connections-per-client"},
    {"MFC_DRAFT", "draft"},
    {"MFC_SPEC_MAX_BATCH", "spec-max-batch"},
};

static int known_setting(const char *key)
{
    for (size_t i = 0; i < sizeof env_map / sizeof env_map[0]; i++)
        if (!strcmp(env_map[i].key, key))
            return 1;
    return 0;
}

static const struct option long_opts[] = {
    {"model", 1, 0, 'm'},    {"config", 1, 0, 'c'},       {"host", 1, 0, 'H'},
    {"port", 1, 0, 'p'},     {"api-key", 1, 0, 'k'},      {"adapter", 1, 0, 'a'},
    {"threads", 1, 0, 't'},  {"name", 1, 0, 'n'},         {"ctx", 1, 0, 'C'},
    {"max-seqs", 1, 0, 'S'}, {"kv-cache-gb", 1, 0, 'K'},  {"log-level", 1, 0, 'L'},
    {"model-offset", 1, 0, 'O'}, {"model-size", 1, 0, 'Z'}, {"kv-cache-type", 1, 0, 'T'},
    {"read-timeout", 1, 0, 'R'}, {"max-connections", 1, 0, 'N'},
    {"max-connections-per-client", 1, 0, 'P'},
    {"max-batch-tokens", 1, 0, 'B'}, {"max-prefill-tokens", 1, 0, 'F'},
    {"config-name", 1, 0, 'Y'}, {"draft", 1, 0, 'D'}, {"spec-max-batch", 1, 0, 'X'},
    {"help", 0, 0, 'h'}, {0, 0, 0, 0},
};

static const char *flag_key(int c)
{
    for (const struct option *o = long_opts; o->name; o++)
        if (o->val == c)
            return o->name;
    return NULL;
}

int serve_config_parse(struct serve_config *c, int argc, char **argv,
                       const char *(*env)(const char *), int *help, struct mf_err *err)
{
    const char *(*get)(const char *) = env ? env : (const char *(*)(const char *))getenv;
    const char *config = get("MFC_CONFIG");
    int rc = 0, ch;

    *help = 0;
    /* first pass: --config and --help, so the file loads before env and flags */
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h"))
            *help = 1;
        else if (!strcmp(argv[i], "--config") && i + 1 < argc)
            config = argv[++i];
        else if (!strncmp(argv[i], "--config=", 9))
            config = argv[i] + 9;
        else if (!strcmp(argv[i], "--config-name") && i + 1 < argc)
            set_str(&c->config_name, argv[++i]);
    }
    if (*help)
        return 0;
    if (config && config[0]) {
        set_str(&c->config_path, config);
        rc = serve_config_load_yaml(c, config, err);
        if (rc)
            return rc;
    }
    char *from_yaml = c->model_path; /* env and flags override the file's path */
    c->model_path = NULL;
    for (size_t i = 0; !rc && i < sizeof env_map / sizeof env_map[0]; i++) {
        const char *v = get(env_map[i].env);
        if (v && (v[0] || !strcmp(env_map[i].env, "MFC_API_KEY") ||
                  !strcmp(env_map[i].env, "MFC_DRAFT"))) {
            rc = apply(c, env_map[i].key, v, err);
            if (rc)
                mf_err_prefix(err, "%s", env_map[i].env);
        }
    }
    optind = 0; /* 0, not 1: glibc and musl then also drop the position inside a
                 * previous argv's "-xyz" group, which a second call would read */
    opterr = 0;
    while (!rc && (ch = getopt_long(argc, argv, ":h", long_opts, NULL)) != -1) {
        if (ch == '?' || ch == ':')
            rc = mf_err_set(err, MF_EUSAGE, "%s: %s", argv[optind - 1],
                            ch == '?' ? "unknown option" : "needs a value");
        else if (ch == 'a')
            rc = add_adapter_flag(c, optarg, err);
        else if (ch == 'c' || ch == 'h' || ch == 'Y')
            continue;
        else
            rc = apply(c, flag_key(ch), optarg, err);
    }
    if (!rc && optind < argc)
        rc = mf_err_set(err, MF_EUSAGE, "unexpected argument \"%s\"", argv[optind]);
    if (!c->model_path)
        c->model_path = from_yaml;
    else
        free(from_yaml);
    if (!rc && !c->model_path)
        rc = mf_err_set(err, MF_EUSAGE, "no model: give --model FILE.gguf or --config model.yaml");
    if (!rc && strcmp(c->device, "cpu") && strcmp(c->device, "cuda") && strcmp(c->device, "auto"))
        rc = mf_err_set(err, MF_EUSAGE, "MFC_DEVICE \"%s\": only cpu, cuda and auto are known",
                        c->device);
    if (!rc && !c->model_name) { /* the file's stem */
        const char *b = strrchr(c->model_path, '/');
        b = b ? b + 1 : c->model_path;
        size_t n = strlen(b);
        if (n > 5 && !strcmp(b + n - 5, ".gguf"))
            n -= 5;
        c->model_name = strndup(b, n ? n : 1);
    }
    return rc;
}
