/*
 * modelfile_json.c: a parsed Modelfile as JSON, for `mfc check --json`,
 * the golden files of the tests, and fmt's meaning-preserved check.
 *
 * One object per instruction, in file order, with "kind" (lower case) and
 * the fields of its kind (docs/modelfile.md, "JSON output"). Floats are the
 * float32 values Ollama stores, written in their shortest decimal form.
 * Builds a new jansson tree; owns nothing else.
 */
#include "compiler/modelfile.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Sets key to v (stealing the reference); counts a failure in *bad. */
static void put(json_t *o, const char *key, json_t *v, int *bad)
{
    if (!v || json_object_set_new(o, key, v) != 0)
        *bad = 1;
}

static void put_str(json_t *o, const char *key, const char *s, int *bad)
{
    put(o, key, s ? json_string(s) : json_null(), bad);
}

void mf_modelfile_float_str(float f, char *out, size_t size)
{
    for (int prec = 1; prec <= 9; prec++) { /* 9 digits always round-trip a float32 */
        snprintf(out, size, "%.*g", prec, (double)f);
        if (strtof(out, NULL) == f)
            return;
    }
}

static json_t *float32_json(float f)
{
    char b[32];
    mf_modelfile_float_str(f, b, sizeof b);
    return json_real(strtod(b, NULL));
}

static void source_json(json_t *o, const struct mf_instr *in, int *bad)
{
    const struct mf_source *s = &in->u.src;
    put_str(o, "ref", s->ref, bad);
    if (s->digest)
        put_str(o, "digest", s->digest, bad);
    put(o, "path", json_boolean(s->is_path), bad);
    if (in->kind == MF_INSTR_ADAPTER) {
        if (s->name)
            put_str(o, "name", s->name, bad);
        put(o, "scale", json_real(s->scale), bad);
        put(o, "merge", json_boolean(s->merge), bad);
    }
}

static void param_json(json_t *o, const struct mf_param *pm, int *bad)
{
    static const char *const types[] = {"int", "float", "bool", "string", "deprecated"};
    put_str(o, "name", pm->name, bad);
    put_str(o, "type", types[pm->type], bad);
    switch (pm->type) {
    case MF_PARAM_INT: put(o, "value", json_integer(pm->i), bad); break;
    case MF_PARAM_FLOAT: put(o, "value", float32_json(pm->f), bad); break;
    case MF_PARAM_BOOL: put(o, "value", json_boolean(pm->b), bad); break;
    default: put_str(o, "value", pm->text, bad); break;
    }
}

static json_t *mount_json(const struct mf_mount *m)
{
    json_t *o = json_object();
    int bad = !o;
    if (o) {
        put_str(o, "type", m->type == MF_MOUNT_CACHE ? "cache" : "secret", &bad);
        if (m->target)
            put_str(o, "target", m->target, &bad);
        if (m->id)
            put_str(o, "id", m->id, &bad);
        if (m->type == MF_MOUNT_SECRET)
            put(o, "required", json_boolean(m->required), &bad);
    }
    if (bad)
        json_decref(o);
    return bad ? NULL : o;
}

static void run_json(json_t *o, const struct mf_run *r, int *bad)
{
    if (r->shell) {
        put_str(o, "command", r->shell, bad);
    } else {
        json_t *a = json_array();
        for (size_t i = 0; a && i < r->argc; i++)
            if (json_array_append_new(a, json_string(r->argv[i])) != 0)
                *bad = 1;
        put(o, "argv", a, bad);
    }
    if (r->network != MF_NET_DEFAULT)
        put_str(o, "network", r->network == MF_NET_NONE ? "none" : "host", bad);
    if (r->n_mounts) {
        json_t *a = json_array();
        for (size_t i = 0; a && i < r->n_mounts; i++)
            if (json_array_append_new(a, mount_json(&r->mounts[i])) != 0)
                *bad = 1;
        put(o, "mounts", a, bad);
    }
    if (r->timeout_ms)
        put(o, "timeout_ms", json_integer(r->timeout_ms), bad);
    if (r->root)
        put(o, "user", json_integer(0), bad);
}

static void kv_json(json_t *o, const struct mf_instr *in, int *bad)
{
    json_t *a = json_array();
    for (size_t i = 0; a && i < in->u.kv.n; i++) {
        const struct mf_kv *kv = &in->u.kv.items[i];
        json_t *e = json_object();
        if (!e || json_array_append_new(a, e) != 0) {
            *bad = 1;
            break;
        }
        put_str(e, "key", kv->key, bad);
        put_str(e, "value", kv->value, bad);
        if (in->kind == MF_INSTR_ARG) {
            put_str(e, "default", kv->deflt, bad);
            put(e, "build_arg", json_boolean(kv->from_build_arg), bad);
        }
    }
    put(o, "items", a, bad);
}

static void flags_json(json_t *o, const struct mf_instr *in, int *bad)
{
    json_t *a = json_array();
    for (size_t i = 0; a && i < in->n_flags; i++) {
        json_t *f = json_object();
        if (!f || json_array_append_new(a, f) != 0) {
            *bad = 1;
            break;
        }
        put_str(f, "name", in->flags[i].name, bad);
        put_str(f, "value", in->flags[i].value, bad);
    }
    put(o, "flags", a, bad);
}

static json_t *instr_json(const struct mf_instr *in, unsigned flags)
{
    json_t *o = json_object();
    char kind[16];
    int bad = !o;
    if (bad)
        return NULL;
    snprintf(kind, sizeof kind, "%s", mf_modelfile_kind_name(in->kind));
    for (char *k = kind; *k; k++)
        *k = (char)(*k - 'A' + 'a');
    put_str(o, "kind", kind, &bad);
    if (!(flags & MF_MODELFILE_JSON_NO_POS)) {
        put(o, "line", json_integer(in->line), &bad);
        put(o, "col", json_integer(in->col), &bad);
    }
    if (in->ignored)
        put(o, "ignored", json_true(), &bad);
    switch (in->kind) {
    case MF_INSTR_FROM:
    case MF_INSTR_ADAPTER:
    case MF_INSTR_DRAFT: source_json(o, in, &bad); break;
    case MF_INSTR_PARAMETER: param_json(o, &in->u.param, &bad); break;
    case MF_INSTR_MESSAGE:
        put_str(o, "role", mf_modelfile_role_name(in->u.msg.role), &bad);
        put_str(o, "content", in->u.msg.content, &bad);
        break;
    case MF_INSTR_RUN: run_json(o, &in->u.run, &bad); break;
    case MF_INSTR_ENV:
    case MF_INSTR_ARG:
    case MF_INSTR_LABEL: kv_json(o, in, &bad); break;
    default: put_str(o, "value", in->value, &bad); break;
    }
    if (in->n_flags)
        flags_json(o, in, &bad);
    if (in->raw && in->value && strcmp(in->raw, in->value) != 0)
        put_str(o, "raw", in->raw, &bad);
    if (bad) {
        json_decref(o);
        return NULL;
    }
    return o;
}

static json_t *diag_json(const struct mf_diag *d, unsigned flags)
{
    json_t *o = json_object();
    int bad = !o;
    if (bad)
        return NULL;
    put_str(o, "severity", d->severity == MF_DIAG_ERROR ? "error" : "warning", &bad);
    if (!(flags & MF_MODELFILE_JSON_NO_POS)) {
        put(o, "line", json_integer(d->line), &bad);
        put(o, "col", json_integer(d->col), &bad);
    }
    put_str(o, "message", d->message, &bad);
    if (d->hint)
        put_str(o, "hint", d->hint, &bad);
    if (bad) {
        json_decref(o);
        return NULL;
    }
    return o;
}

json_t *mf_modelfile_to_json(const struct mf_modelfile *mf, unsigned flags)
{
    json_t *o = json_object(), *ins = json_array(), *ds = json_array();
    int bad = !o || !ins || !ds;
    for (size_t i = 0; !bad && i < mf->n_instrs; i++)
        bad = json_array_append_new(ins, instr_json(&mf->instrs[i], flags)) != 0;
    for (size_t i = 0; !bad && i < mf->n_diags; i++)
        bad = json_array_append_new(ds, diag_json(&mf->diags[i], flags)) != 0;
    if (!bad) {
        put_str(o, "file", mf->name, &bad);
        put(o, "ok", json_boolean(mf->n_errors == 0), &bad);
        put(o, "instructions", json_incref(ins), &bad);
        if (!(flags & MF_MODELFILE_JSON_NO_DIAGS)) {
            put(o, "errors", json_integer((json_int_t)mf->n_errors), &bad);
            put(o, "warnings", json_integer((json_int_t)mf->n_warnings), &bad);
            put(o, "diagnostics", json_incref(ds), &bad);
        }
    }
    json_decref(ins);
    json_decref(ds);
    if (bad) {
        json_decref(o);
        return NULL;
    }
    return o;
}
