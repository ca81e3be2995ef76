/*
 * serve_tools.c: structured output and tool calling on the request side:
 * the fields that constrain or shape an answer (OpenAI response_format,
 * tools, tool_choice, parallel_tool_calls, messages' tool_calls and
 * tool_call_id; Ollama format, tools, messages' tool_calls and tool_name;
 * llama-server's grammar), checked and normalized into struct serve_req;
 * the grammar a forced tool call must follow and the parser that finds tool
 * calls in a model's text, both per tool-call syntax (serve_toolfmt); and
 * the template values (.Tools, .ToolCalls) a chat template renders.
 *
 * Normal forms: rq->tools is [{name, description, parameters}] (parameters
 * defaulting to an empty object schema); a message's tool_calls is
 * [{id, name, arguments}] with arguments a JSON object. Every schema is
 * compiled to GBNF while the request is parsed, so a bad one is a 400
 * naming the field before anything is queued.
 */
#include "runtime/serve/serve_int.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "runtime/grammar/gram.h"
#include "text/template.h"

#define TOOLS_MAX 128
#define GBNF_CAP (GRAM_MAX_SOURCE)

/* ---- tool-call syntaxes ------------------------------------------------------ */

static const struct serve_toolfmt fmt_json = {"json", "", "", "", "arguments", 1};
static const struct serve_toolfmt fmt_llama31 = {"llama3.1", "", "", "", "parameters", 0};
static const struct serve_toolfmt fmt_hermes = {"hermes",         "<tool_call>", "<tool_call>\n",
                                                "\n</tool_call>", "arguments",   1};
static const struct serve_toolfmt fmt_mistral = {"mistral", "[TOOL_CALLS]", "[TOOL_CALLS]",
                                                 "",        "arguments",    1};

const struct serve_toolfmt *serve_toolfmt_for(const char *family)
{
    if (!family)
        return &fmt_json;
    if (!strcmp(family, "llama3.1"))
        return &fmt_llama31;
    if (!strcmp(family, "qwen2.5") || !strcmp(family, "qwen3") || !strcmp(family, "hermes") ||
        !strcmp(family, "chatml"))
        return &fmt_hermes;
    if (!strncmp(family, "mistral", 7))
        return &fmt_mistral;
    return &fmt_json;
}

/* ---- request fields ------------------------------------------------------------ */

static int schema_to_gbnf(const json_t *schema, const char *where, char **out, struct mf_err *err)
{
    struct mf_buf b;
    struct gram *g = NULL;
    mf_buf_init(&b, GBNF_CAP);
    int rc = gram_schema_gbnf(schema, where, &b, err);
    if (!rc && (rc = gram_new(b.data, b.len, NULL, &g, err)) == 0)
        gram_unref(g);
    if (rc) {
        mf_buf_free(&b);
        return rc == MF_ENOMEM ? rc : MF_EINVAL;
    }
    *out = mf_buf_take(&b);
    return *out ? 0 : mf_err_set(err, MF_ENOMEM, "out of memory");
}

static int json_mode(char **out, struct mf_err *err)
{
    struct mf_buf b;
    mf_buf_init(&b, GBNF_CAP);
    int rc = gram_json_gbnf(1, &b, err);
    if (rc) {
        mf_buf_free(&b);
        return rc;
    }
    *out = mf_buf_take(&b);
    return *out ? 0 : mf_err_set(err, MF_ENOMEM, "out of memory");
}

static int response_format(struct serve_req *rq, const json_t *v, struct mf_err *err)
{
    if (!v || json_is_null(v))
        return 0;
    const char *type = json_string_value(json_object_get(v, "type"));
    if (!json_is_object(v) || !type)
        return mf_err_set(err, MF_EINVAL,
                          "'response_format' must be an object with a 'type' (text, "
                          "json_object or json_schema)");
    if (!strcmp(type, "text"))
        return 0;
    if (!strcmp(type, "json_object"))
        return json_mode(&rq->grammar, err);
    if (strcmp(type, "json_schema"))
        return mf_err_set(err, MF_EINVAL,
                          "'response_format.type' is \"%.40s\"; expected text, json_object or "
                          "json_schema",
                          type);
    const json_t *js = json_object_get(v, "json_schema");
    if (!json_is_object(js))
        return mf_err_set(err, MF_EINVAL, "'response_format.json_schema' must be an object");
    const json_t *name = json_object_get(js, "name"), *strict = json_object_get(js, "strict");
    if (name && !json_is_string(name))
        return mf_err_set(err, MF_EINVAL, "'response_format.json_schema.name' must be a string");
    if (strict && !json_is_boolean(strict) && !json_is_null(strict))
        return mf_err_set(err, MF_EINVAL,
                          "'response_format.json_schema.strict' must be true or false");
    const json_t *schema = json_object_get(js, "schema");
    if (!schema || json_is_null(schema)) /* OpenAI: no schema allows any JSON object */
        return json_mode(&rq->grammar, err);
    return schema_to_gbnf(schema, "'response_format.json_schema.schema'", &rq->grammar, err);
}

static int ollama_format(struct serve_req *rq, const json_t *v, struct mf_err *err)
{
    if (!v || json_is_null(v))
        return 0;
    if (json_is_string(v)) {
        const char *f = json_string_value(v);
        if (!f[0])
            return 0;
        if (!strcmp(f, "json"))
            return json_mode(&rq->grammar, err);
        return mf_err_set(err, MF_EINVAL,
                          "'format' is \"%.40s\"; expected \"json\" or a JSON schema object", f);
    }
    if (!json_is_object(v))
        return mf_err_set(err, MF_EINVAL, "'format' must be \"json\" or a JSON schema object");
    return schema_to_gbnf(v, "'format'", &rq->grammar, err);
}

static int grammar_field(struct serve_req *rq, const json_t *v, struct mf_err *err)
{
    struct gram *g = NULL;
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_string(v))
        return mf_err_set(err, MF_EINVAL, "'grammar' must be a string of GBNF");
    if (!json_string_length(v))
        return 0;
    if (gram_new(json_string_value(v), json_string_length(v), NULL, &g, err))
        return mf_err_prefix(err, "'grammar'"), MF_EINVAL;
    gram_unref(g);
    rq->grammar = strdup(json_string_value(v));
    return rq->grammar ? 0 : mf_err_set(err, MF_ENOMEM, "out of memory");
}

/* tools: OpenAI and Ollama write [{type: "function", function: {name,
 * description, parameters}}]. */
static int tools_field(struct serve_req *rq, const json_t *v, struct mf_err *err)
{
    size_t i;
    const json_t *t;
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_array(v))
        return mf_err_set(err, MF_EINVAL, "'tools' must be an array");
    if (json_array_size(v) > TOOLS_MAX)
        return mf_err_set(err, MF_EINVAL, "'tools' has more than %d entries", TOOLS_MAX);
    if (!json_array_size(v))
        return 0;
    rq->tools = json_array();
    if (!rq->tools)
        return mf_err_set(err, MF_ENOMEM, "out of memory");
    json_array_foreach(v, i, t)
    {
        const json_t *fn = json_object_get(t, "function"), *type = json_object_get(t, "type");
        if (!json_is_object(t))
            return mf_err_set(err, MF_EINVAL, "'tools[%zu]' must be an object", i);
        if (type && !(json_is_string(type) && !strcmp(json_string_value(type), "function")))
            return mf_err_set(err, MF_EINVAL, "'tools[%zu].type' must be \"function\"", i);
        if (!json_is_object(fn))
            return mf_err_set(err, MF_EINVAL, "'tools[%zu].function' must be an object", i);
        const json_t *name = json_object_get(fn, "name"),
                     *desc = json_object_get(fn, "description");
        const json_t *params = json_object_get(fn, "parameters");
        if (!json_is_string(name) || !json_string_length(name))
            return mf_err_set(err, MF_EINVAL,
                              "'tools[%zu].function.name' must be a non-empty string", i);
        for (size_t k = 0; k < json_array_size(rq->tools); k++)
            if (!strcmp(json_string_value(json_object_get(json_array_get(rq->tools, k), "name")),
                        json_string_value(name)))
                return mf_err_set(err, MF_EINVAL, "'tools[%zu].function.name' repeats \"%.64s\"", i,
                                  json_string_value(name));
        if (desc && !json_is_null(desc) && !json_is_string(desc))
            return mf_err_set(err, MF_EINVAL, "'tools[%zu].function.description' must be a string",
                              i);
        if (params && !json_is_null(params) && !json_is_object(params))
            return mf_err_set(err, MF_EINVAL,
                              "'tools[%zu].function.parameters' must be a JSON schema object", i);
        char where[64], *gbnf = NULL;
        snprintf(where, sizeof where, "'tools[%zu].function.parameters'", i);
        json_t *p = params && json_is_object(params)
                        ? json_deep_copy(params)
                        : json_pack("{s:s, s:{}}", "type", "object", "properties");
        int rc = p ? schema_to_gbnf(p, where, &gbnf, err) : MF_ENOMEM;
        free(gbnf);
        if (rc) {
            json_decref(p);
            return rc;
        }
        json_t *n = json_pack("{s:O, s:s, s:o}", "name", name, "description",
                              json_is_string(desc) ? json_string_value(desc) : "", "parameters", p);
        if (!n || json_array_append_new(rq->tools, n))
            return mf_err_set(err, MF_ENOMEM, "out of memory");
    }
    return 0;
}

static int has_tool(const struct serve_req *rq, const char *name)
{
    for (size_t k = 0; k < json_array_size(rq->tools); k++)
        if (!strcmp(json_string_value(json_object_get(json_array_get(rq->tools, k), "name")), name))
            return 1;
    return 0;
}

static int tool_choice_field(struct serve_req *rq, const json_t *v, struct mf_err *err)
{
    rq->tool_choice = SERVE_TOOLS_AUTO;
    if (!v || json_is_null(v))
        return 0;
    if (json_is_string(v)) {
        const char *c = json_string_value(v);
        if (!strcmp(c, "auto"))
            rq->tool_choice = SERVE_TOOLS_AUTO;
        else if (!strcmp(c, "none"))
            rq->tool_choice = SERVE_TOOLS_NONE;
        else if (!strcmp(c, "required"))
            rq->tool_choice = SERVE_TOOLS_REQUIRED;
        else
            return mf_err_set(err, MF_EINVAL,
                              "'tool_choice' is \"%.40s\"; expected auto, none, required or "
                              "{\"type\": \"function\", \"function\": {\"name\": ...}}",
                              c);
    } else {
        const char *name =
            json_string_value(json_object_get(json_object_get(v, "function"), "name"));
        if (!json_is_object(v) || !name)
            return mf_err_set(err, MF_EINVAL,
                              "'tool_choice' must be a string or {\"type\": \"function\", "
                              "\"function\": {\"name\": ...}}");
        if (!(rq->tool_name = strdup(name)))
            return mf_err_set(err, MF_ENOMEM, "out of memory");
        rq->tool_choice = SERVE_TOOLS_NAMED;
    }
    if (rq->tool_choice >= SERVE_TOOLS_REQUIRED && !rq->tools)
        return mf_err_set(err, MF_EINVAL,
                          "'tool_choice' asks for a tool call but 'tools' is empty");
    if (rq->tool_choice == SERVE_TOOLS_NAMED && !has_tool(rq, rq->tool_name))
        return mf_err_set(err, MF_EINVAL,
                          "'tool_choice' names function \"%.64s\", which is not in 'tools'",
                          rq->tool_name);
    return 0;
}

/* A new tool call id: "call_" and 24 random hex digits. */
void serve_call_id(char *buf, size_t cap)
{
    uint64_t r[2] = {0, 0};
    if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r)
        r[0] = (uint64_t)(uintptr_t)buf ^ 0x9e3779b97f4a7c15ull;
    snprintf(buf, cap, "call_%016" PRIx64 "%08" PRIx64, r[0], r[1] & 0xffffffffu);
}

/* messages[i].tool_calls into the normal form. */
static int msg_tool_calls(struct serve_msg *m, const json_t *v, size_t i, int oai,
                          struct mf_err *err)
{
    size_t k;
    const json_t *c;
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_array(v))
        return mf_err_set(err, MF_EINVAL, "'messages[%zu].tool_calls' must be an array", i);
    if (!(m->tool_calls = json_array()))
        return mf_err_set(err, MF_ENOMEM, "out of memory");
    json_array_foreach(v, k, c)
    {
        const json_t *fn = json_object_get(c, "function");
        const char *name = json_string_value(json_object_get(fn, "name"));
        const json_t *args = json_object_get(fn, "arguments"), *id = json_object_get(c, "id");
        json_t *a;
        char idbuf[48];
        if (!json_is_object(fn) || !name)
            return mf_err_set(err, MF_EINVAL,
                              "'messages[%zu].tool_calls[%zu].function.name' must be a string", i,
                              k);
        if (json_is_string(args)) { /* OpenAI: a JSON text */
            json_error_t je;
            a = json_loads(json_string_value(args), JSON_DECODE_ANY, &je);
            if (!a)
                return mf_err_set(err, MF_EINVAL,
                                  "'messages[%zu].tool_calls[%zu].function.arguments' is not JSON: "
                                  "%s",
                                  i, k, je.text);
        } else if (json_is_object(args) && !oai) {
            a = json_deep_copy(args);
        } else if (!args || json_is_null(args)) {
            a = json_object();
        } else {
            return mf_err_set(err, MF_EINVAL,
                              oai ? "'messages[%zu].tool_calls[%zu].function.arguments' must be a "
                                    "string of JSON"
                                  : "'messages[%zu].tool_calls[%zu].function.arguments' must be an "
                                    "object",
                              i, k);
        }
        if (id && !json_is_string(id)) {
            json_decref(a);
            return mf_err_set(err, MF_EINVAL, "'messages[%zu].tool_calls[%zu].id' must be a string",
                              i, k);
        }
        if (!id)
            serve_call_id(idbuf, sizeof idbuf);
        json_t *n = json_pack("{s:s, s:s, s:o}", "id", id ? json_string_value(id) : idbuf, "name",
                              name, "arguments", a);
        if (!n || json_array_append_new(m->tool_calls, n))
            return mf_err_set(err, MF_ENOMEM, "out of memory");
    }
    return 0;
}

static int msg_str(char **out, const json_t *m, const char *key, size_t i, struct mf_err *err)
{
    const json_t *v = json_object_get(m, key);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_string(v))
        return mf_err_set(err, MF_EINVAL, "'messages[%zu].%s' must be a string", i, key);
    *out = strdup(json_string_value(v));
    return *out ? 0 : mf_err_set(err, MF_ENOMEM, "out of memory");
}

static int messages_tools(struct serve_req *rq, const json_t *body, struct mf_err *err)
{
    const json_t *v = json_object_get(body, "messages");
    int oai = rq->api == SERVE_OAI_CHAT;
    for (size_t i = 0; i < rq->n_msgs && i < json_array_size(v); i++) {
        const json_t *m = json_array_get(v, i);
        struct serve_msg *sm = &rq->msgs[i];
        int rc = msg_tool_calls(sm, json_object_get(m, "tool_calls"), i, oai, err);
        if (!rc)
            rc = msg_str(&sm->tool_call_id, m, "tool_call_id", i, err);
        if (!rc)
            rc = msg_str(&sm->tool_name, m, oai ? "name" : "tool_name", i, err);
        if (!rc && !sm->tool_name && !oai)
            rc = msg_str(&sm->tool_name, m, "name", i, err);
        if (rc)
            return rc;
    }
    /* OpenAI names a tool result by its call id: find the call's name */
    for (size_t i = 0; oai && i < rq->n_msgs; i++) {
        struct serve_msg *sm = &rq->msgs[i];
        if (strcmp(sm->role, "tool") || sm->tool_name || !sm->tool_call_id)
            continue;
        for (size_t j = i; j-- > 0 && !sm->tool_name;) {
            size_t k;
            const json_t *c;
            json_array_foreach(rq->msgs[j].tool_calls, k, c)
            {
                if (!strcmp(json_string_value(json_object_get(c, "id")), sm->tool_call_id)) {
                    sm->tool_name = strdup(json_string_value(json_object_get(c, "name")));
                    break;
                }
            }
        }
    }
    return 0;
}

int serve_req_structured(struct serve_req *rq, const json_t *body, struct mf_err *err)
{
    int rc = 0;
    int oai = rq->api == SERVE_OAI_CHAT || rq->api == SERVE_OAI_COMPLETION;
    int chat = rq->api == SERVE_OAI_CHAT || rq->api == SERVE_OLLAMA_CHAT;
    rq->parallel_tools = 1;
    if (oai)
        rc = response_format(rq, json_object_get(body, "response_format"), err);
    else
        rc = ollama_format(rq, json_object_get(body, "format"), err);
    if (!rc && !rq->grammar)
        rc = grammar_field(rq, json_object_get(body, "grammar"), err);
    if (rc || !chat)
        return rc;
    if ((rc = tools_field(rq, json_object_get(body, "tools"), err)))
        return rc;
    if (oai) {
        const json_t *p = json_object_get(body, "parallel_tool_calls");
        if (p && !json_is_null(p) && !json_is_boolean(p))
            return mf_err_set(err, MF_EINVAL, "'parallel_tool_calls' must be true or false");
        if (p && json_is_false(p))
            rq->parallel_tools = 0;
        if ((rc = tool_choice_field(rq, json_object_get(body, "tool_choice"), err)))
            return rc;
    }
    return messages_tools(rq, body, err);
}

/* ---- the grammar of a forced call ------------------------------------------------ */

static int lit(struct mf_buf *b, const char *s, struct mf_err *err)
{
    int rc = mf_buf_putc(b, '"', err);
    for (; *s && !rc; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            rc = mf_buf_printf(b, err, "\\%c", c);
        else if (c < 0x20)
            rc = mf_buf_printf(b, err, "\\x%02X", c);
        else
            rc = mf_buf_putc(b, (char)c, err);
    }
    return rc ? rc : mf_buf_putc(b, '"', err);
}

int serve_tools_grammar(const struct serve_req *rq, const struct serve_toolfmt *f, char **out,
                        struct mf_err *err)
{
    struct mf_buf b, rules;
    int next = 0, rc = 0, n_calls = 0;
    size_t i;
    const json_t *t;
    mf_buf_init(&b, GBNF_CAP);
    mf_buf_init(&rules, GBNF_CAP);
    rc = mf_buf_puts(&rules, "call ::=", err);
    json_array_foreach(rq->tools, i, t)
    {
        const char *name = json_string_value(json_object_get(t, "name"));
        int root = 0;
        if (rq->tool_choice == SERVE_TOOLS_NAMED && strcmp(name, rq->tool_name))
            continue;
        if (rc)
            break;
        char where[64];
        snprintf(where, sizeof where, "'tools[%zu].function.parameters'", i);
        if ((rc =
                 gram_schema_rules(json_object_get(t, "parameters"), where, &next, &root, &b, err)))
            break;
        /* {"name": "fn", "<args_key>": {...}} */
        char key[48];
        snprintf(key, sizeof key, "\"%s\"", f->args_key);
        char namejson[300];
        snprintf(namejson, sizeof namejson, "\"%s\"", name);
        if (!(rc = mf_buf_puts(&rules, n_calls++ ? " | " : " ", err)) &&
            !(rc = mf_buf_puts(&rules, "\"{\" space \"\\\"name\\\"\" space \":\" space ", err)) &&
            !(rc = lit(&rules, namejson, err)) &&
            !(rc = mf_buf_puts(&rules, " space \",\" space ", err)) &&
            !(rc = lit(&rules, key, err)))
            rc = mf_buf_printf(&rules, err, " space \":\" space r%d \"}\"", root);
    }
    if (!rc)
        rc = mf_buf_puts(&rules, "\n", err);
    const char *many = rq->parallel_tools && f->multi ? "*" : "{0,0}";
    if (!rc) {
        if (!strcmp(f->name, "hermes"))
            rc = mf_buf_printf(&b, err,
                               "root ::= one (\"\\n\" one)%s\none ::= \"<tool_call>\\n\" call "
                               "\"\\n</tool_call>\"\n",
                               many);
        else if (!strcmp(f->name, "mistral"))
            rc = mf_buf_printf(&b, err,
                               "root ::= \"[TOOL_CALLS]\" space \"[\" space call space (\",\" "
                               "space call space)%s \"]\"\n",
                               many);
        else if (rq->parallel_tools && f->multi)
            rc = mf_buf_puts(
                &b, "root ::= call | \"[\" space call space (\",\" space call space)* \"]\"\n",
                err);
        else
            rc = mf_buf_puts(&b, "root ::= call\n", err);
    }
    if (!rc)
        rc = mf_buf_append(&b, rules.data, rules.len, err);
    if (!rc)
        rc = gram_json_shared(&b, err);
    mf_buf_free(&rules);
    if (rc) {
        mf_buf_free(&b);
        return rc;
    }
    *out = mf_buf_take(&b);
    return *out ? 0 : mf_err_set(err, MF_ENOMEM, "out of memory");
}

/* ---- finding calls in text ----------------------------------------------------------- */

/* One call object {"name": s, "arguments"|"parameters": {...}} into calls;
 * 0 when it is not one or names no tool. */
static int add_call(json_t *calls, const json_t *o, const json_t *tools)
{
    const char *name = json_string_value(json_object_get(o, "name"));
    const json_t *args = json_object_get(o, "arguments");
    if (!args)
        args = json_object_get(o, "parameters");
    if (!json_is_object(o) || !name || (args && !json_is_object(args)))
        return 0;
    int known = 0;
    for (size_t k = 0; k < json_array_size(tools); k++)
        known |=
            !strcmp(json_string_value(json_object_get(json_array_get(tools, k), "name")), name);
    if (!known)
        return 0;
    char id[48];
    serve_call_id(id, sizeof id);
    json_array_append_new(calls, json_pack("{s:s, s:s, s:O}", "id", id, "name", name, "arguments",
                                           args ? args : json_object()));
    return 1;
}

/* Calls in p[0..n): JSON objects or arrays of them, one after another. */
static int parse_json_calls(json_t *calls, const char *p, size_t n, const json_t *tools)
{
    size_t off = 0;
    int any = 0;
    while (off < n) {
        while (off < n && (p[off] == ' ' || p[off] == '\n' || p[off] == '\t' || p[off] == '\r' ||
                           p[off] == ';' || p[off] == ','))
            off++;
        if (off >= n)
            break;
        json_error_t je;
        json_t *v = json_loadb(p + off, n - off, JSON_DISABLE_EOF_CHECK | JSON_DECODE_ANY, &je);
        if (!v)
            return 0;
        off += je.position;
        if (json_is_array(v)) {
            size_t i;
            json_t *o;
            json_array_foreach(v, i, o)
            {
                if (!add_call(calls, o, tools)) {
                    json_decref(v);
                    return 0;
                }
            }
            any |= json_array_size(v) > 0;
        } else if (!add_call(calls, v, tools)) {
            json_decref(v);
            return 0;
        } else {
            any = 1;
        }
        json_decref(v);
    }
    return any;
}

int serve_tools_starts(const struct serve_toolfmt *f, const char *p, size_t n)
{
    const char *open = f->open[0] ? f->open : "{";
    size_t k = strlen(open), i = 0;
    while (i < n && (p[i] == ' ' || p[i] == '\n' || p[i] == '\t' || p[i] == '\r'))
        i++;
    if (i == n)
        return 0; /* undecided */
    size_t m = n - i < k ? n - i : k;
    if (memcmp(p + i, open, m) != 0 && !(f->open[0] == 0 && p[i] == '['))
        return -1;
    return m == k || p[i] == '[' ? 1 : 0;
}

json_t *serve_tools_parse(const struct serve_toolfmt *f, const char *p, size_t n,
                          const json_t *tools, char **content)
{
    json_t *calls = json_array();
    *content = NULL;
    if (!calls)
        return NULL;
    if (!strcmp(f->name, "hermes")) {
        const char *q = p, *end = p + n, *first = NULL;
        while (q < end) {
            const char *s = memmem(q, (size_t)(end - q), "<tool_call>", 11);
            if (!s)
                break;
            const char *e = memmem(s + 11, (size_t)(end - s - 11), "</tool_call>", 12);
            const char *stop = e ? e : end;
            if (!first)
                first = s;
            if (!parse_json_calls(calls, s + 11, (size_t)(stop - s - 11), tools))
                break;
            q = e ? e + 12 : end;
        }
        if (json_array_size(calls) && first > p) { /* text before the first call */
            size_t len = (size_t)(first - p);
            while (len && (p[len - 1] == '\n' || p[len - 1] == ' '))
                len--;
            if (len && (*content = malloc(len + 1))) {
                memcpy(*content, p, len);
                (*content)[len] = 0;
            }
        }
    } else {
        size_t skip = 0;
        if (!strcmp(f->name, "mistral")) {
            const char *s = memmem(p, n, "[TOOL_CALLS]", 12);
            if (!s)
                skip = n;
            else
                skip = (size_t)(s - p) + 12;
        }
        if (!parse_json_calls(calls, p + skip, n - skip, tools))
            json_array_clear(calls);
    }
    if (!json_array_size(calls)) {
        json_decref(calls);
        free(*content);
        *content = NULL;
        return NULL;
    }
    return calls;
}

/* ---- template values --------------------------------------------------------------------- */

static char *dump(const json_t *v)
{
    return json_dumps(v, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_ENCODE_ANY);
}

/* A JSON value as a template value: objects as structs printing as their
 * JSON (fields by key), arrays as lists, scalars as themselves. */
static struct tmpl_value *to_value(const json_t *v)
{
    if (json_is_string(v))
        return tmpl_value_str(json_string_value(v), json_string_length(v));
    if (json_is_integer(v))
        return tmpl_value_int(json_integer_value(v));
    if (json_is_boolean(v))
        return tmpl_value_bool(json_is_true(v));
    if (json_is_array(v)) {
        struct tmpl_value *l = tmpl_value_list();
        size_t i;
        const json_t *x;
        json_array_foreach(v, i, x)
        {
            if (tmpl_value_push(l, to_value(x), NULL)) {
                tmpl_value_unref(l);
                return NULL;
            }
        }
        return l;
    }
    if (json_is_object(v)) {
        char *j = dump(v);
        struct tmpl_value *m = j ? tmpl_value_map() : NULL;
        const char *k;
        const json_t *x;
        free(j);
        json_object_foreach((json_t *)v, k, x)
        {
            if (tmpl_value_set(m, k, to_value(x), NULL)) {
                tmpl_value_unref(m);
                return NULL;
            }
        }
        return m;
    }
    if (json_is_real(v)) {
        char *j = dump(v);
        struct tmpl_value *s = j ? tmpl_value_cstr(j) : NULL;
        free(j);
        return s;
    }
    return tmpl_value_cstr("");
}

/* A struct of Go-named fields that prints as json's text. */
static struct tmpl_value *json_struct(const char *type, const json_t *json)
{
    char *j = dump(json);
    struct tmpl_value *v = j ? tmpl_value_struct_json(type, j) : NULL;
    free(j);
    return v;
}

struct tmpl_value *serve_tools_value(const json_t *tools)
{
    struct tmpl_value *list = tmpl_value_list();
    size_t i;
    const json_t *t;
    json_array_foreach(tools, i, t)
    {
        const json_t *params = json_object_get(t, "parameters");
        json_t *fjson =
            json_pack("{s:O, s:O, s:O}", "name", json_object_get(t, "name"), "description",
                      json_object_get(t, "description"), "parameters", params);
        json_t *tjson = json_pack("{s:s, s:o}", "type", "function", "function", fjson);
        struct tmpl_value *tool = json_struct("api.Tool", tjson);
        struct tmpl_value *fn = json_struct("api.ToolFunction", fjson);
        struct tmpl_value *pv = json_struct("api.ToolFunctionParameters", params);
        const json_t *req = json_object_get(params, "required");
        json_t *empty = json_array();
        const json_t *props = json_object_get(params, "properties");
        json_t *noprops = json_object();
        int rc = !tool || !fn || !pv;
        rc = rc || tmpl_value_set(pv, "Type", tmpl_value_cstr("object"), NULL);
        rc = rc || tmpl_value_set(pv, "Required", to_value(req ? req : empty), NULL);
        rc = rc || tmpl_value_set(pv, "Properties", to_value(props ? props : noprops), NULL);
        rc = rc || tmpl_value_set(fn, "Name", to_value(json_object_get(t, "name")), NULL);
        rc = rc ||
             tmpl_value_set(fn, "Description", to_value(json_object_get(t, "description")), NULL);
        rc = rc || tmpl_value_set(fn, "Parameters", tmpl_value_ref(pv), NULL);
        rc = rc || tmpl_value_set(tool, "Type", tmpl_value_cstr("function"), NULL);
        rc = rc || tmpl_value_set(tool, "Function", tmpl_value_ref(fn), NULL);
        json_decref(empty);
        json_decref(noprops);
        json_decref(tjson);
        tmpl_value_unref(fn);
        tmpl_value_unref(pv);
        if (rc || tmpl_value_push(list, tool, NULL)) {
            if (rc)
                tmpl_value_unref(tool);
            tmpl_value_unref(list);
            return NULL;
        }
    }
    return list;
}

struct tmpl_value *serve_tool_calls_value(const json_t *calls)
{
    struct tmpl_value *list = tmpl_value_list();
    size_t i;
    const json_t *c;
    json_array_foreach(calls, i, c)
    {
        const json_t *args = json_object_get(c, "arguments");
        json_t *fjson =
            json_pack("{s:O, s:O}", "name", json_object_get(c, "name"), "arguments", args);
        struct tmpl_value *call = tmpl_value_struct("api.ToolCall");
        struct tmpl_value *fn = json_struct("api.ToolCallFunction", fjson);
        struct tmpl_value *av = json_struct("api.ToolCallFunctionArguments", args);
        int rc = !call || !fn || !av;
        const char *k;
        const json_t *x;
        json_object_foreach((json_t *)args, k, x)
        {
            rc = rc || tmpl_value_set(av, k, to_value(x), NULL);
        }
        rc = rc || tmpl_value_set(fn, "Index", tmpl_value_int((int64_t)i), NULL);
        rc = rc || tmpl_value_set(fn, "Name", to_value(json_object_get(c, "name")), NULL);
        rc = rc || tmpl_value_set(fn, "Arguments", av, NULL);
        rc = rc || tmpl_value_set(call, "ID", to_value(json_object_get(c, "id")), NULL);
        rc = rc || tmpl_value_set(call, "Function", fn, NULL);
        json_decref(fjson);
        if (rc || tmpl_value_push(list, call, NULL)) {
            if (rc)
                tmpl_value_unref(call);
            tmpl_value_unref(list);
            return NULL;
        }
    }
    return list;
}

/* ---- calls as they are written -------------------------------------------------------------- */

/* Scans p[0..n) for call objects (JSON objects not inside another object:
 * at the top or in a top-level array) and, in each, the string value of
 * "name" and the span of "arguments" (or "parameters"), whole or cut at n.
 * Text outside JSON (Hermes' tags, Mistral's opening) is skipped. Fills up
 * to max entries; returns how many calls were seen. */
int serve_tools_scan(const char *p, size_t n, struct serve_call_span *out, int max)
{
    int depth = 0, k = -1, in_str = 0, esc = 0, is_key = 0, key_id = 0, want_val = 0;
    int stack[64]; /* 1: object, 2: array, per depth */
    size_t str_start = 0;
    int val_kind = 0; /* 1: name value (a string), 2: arguments value */
    for (size_t i = 0; i < n; i++) {
        char ch = p[i];
        if (in_str) {
            if (esc) {
                esc = 0;
            } else if (ch == '\\') {
                esc = 1;
            } else if (ch == '"') {
                in_str = 0;
                if (is_key && k >= 0 && k < max && depth == out[k].depth) {
                    size_t len = i - str_start;
                    key_id = len == 4 && !memcmp(p + str_start, "name", 4) ? 1
                             : (len == 9 && !memcmp(p + str_start, "arguments", 9)) ||
                                     (len == 10 && !memcmp(p + str_start, "parameters", 10))
                                 ? 2
                                 : 0;
                } else if (val_kind == 1 && k >= 0 && k < max) {
                    out[k].name = str_start;
                    out[k].name_len = i - str_start;
                    out[k].has_name = 1;
                    val_kind = 0;
                }
            }
            continue;
        }
        if (ch == '"') {
            in_str = 1;
            str_start = i + 1;
            is_key = depth > 0 && stack[depth - 1] == 1 && !want_val;
            if (want_val && key_id == 1 && k >= 0 && depth == out[k].depth)
                val_kind = 1;
            if (want_val && key_id == 2 && k >= 0 && k < max && depth == out[k].depth) {
                out[k].args = i;
                out[k].has_args = 1;
                out[k].args_end = 0;
            }
            want_val = 0;
            continue;
        }
        if (ch == ':' && depth > 0 && stack[depth - 1] == 1) {
            want_val = 1;
            continue;
        }
        if (ch == '{' || ch == '[') {
            int call = ch == '{' && (depth == 0 || (depth == 1 && stack[0] == 2));
            if (want_val && key_id == 2 && k >= 0 && k < max && depth == out[k].depth) {
                out[k].args = i;
                out[k].has_args = 1;
                out[k].args_end = 0;
            }
            want_val = 0;
            if (depth >= (int)(sizeof stack / sizeof *stack))
                return k + 1;
            stack[depth++] = ch == '{' ? 1 : 2;
            if (call) {
                k++;
                if (k < max)
                    out[k] = (struct serve_call_span){.depth = depth};
            }
            continue;
        }
        if (ch == '}' || ch == ']') {
            if (depth == 0)
                continue;
            depth--;
            if (k >= 0 && k < max && out[k].has_args && !out[k].args_end && depth == out[k].depth)
                out[k].args_end = i + 1; /* the arguments value closed */
            if (k >= 0 && k < max && depth == out[k].depth - 1)
                out[k].closed = 1;
            continue;
        }
        if (ch == ',' && k >= 0 && k < max && out[k].has_args && !out[k].args_end &&
            depth == out[k].depth)
            out[k].args_end = i; /* a scalar arguments value ended */
        if (ch != ' ' && ch != '\n' && ch != '\t' && ch != '\r' && ch != ',')
            want_val = want_val && (ch == '-' || (ch >= '0' && ch <= '9') || ch == 't' ||
                                    ch == 'f' || ch == 'n');
    }
    return k + 1;
}
