/*
 * plan.c: the build planner: Modelfile AST -> DAG of typed steps (plan.h).
 *
 * Owns the nodes, their names and argument objects and the resolved sources;
 * borrows nothing from the modelfile after plan_build returns (every string
 * is copied). Does not execute anything (exec/exec.c does) and does not
 * open the store.
 *
 * Invariants: node ids are a topological order (inputs are created first);
 * the image node is the last node; every node but the image names the
 * Modelfile line it came from; args are JSON objects whose canonical dump
 * (sorted keys) is part of the node's cache key, so anything that changes a
 * node's output must be in its args or its inputs, and nothing else may be
 * (a file's path is not: a moved but unchanged file is a cache hit).
 *
 * Multiple FROM lines: the last one wins, as in `ollama create`. A RUN step
 * feeds every local FROM/ADAPTER/DRAFT source that follows it.
 */
#include "compiler/plan.h"

#include <assert.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/json.h"
#include "common/sha256.h"
#include "config.h"

#define NO_NODE SIZE_MAX
#define PLAN_KEY_SALT "mfc-plan-key/v1" /* bump when a key's meaning changes */
#define PLAN_TEXT_MAX (1u << 20)        /* bytes of one node's args when hashed */

static const char *const op_names[PLAN_OP_COUNT] = {
    "source", "convert", "check", "merge", "quantize", "run", "config", "layer", "image",
};

const char *plan_op_name(enum plan_op op)
{
    return (unsigned)op < PLAN_OP_COUNT ? op_names[op] : "?";
}

const char *plan_role_name(enum plan_role role)
{
    static const char *const names[] = {"", "base", "adapter", "draft", "config"};
    return (unsigned)role < sizeof names / sizeof names[0] ? names[role] : "";
}

/* ---- building ------------------------------------------------------------------- */

/* What plan_build collects from one pass over the instructions. */
struct walk {
    const struct mf_instr *from;     /* borrowed: the FROM in effect (the last) */
    size_t from_run;                 /* the RUN node before it, or NO_NODE */
    const struct mf_instr **extra;   /* owned array of borrowed ADAPTER/DRAFT instrs */
    size_t *extra_run;               /* owned: the RUN node before each */
    size_t n_extra;                  /* entries in extra and extra_run */
    int config_line;                 /* first line that feeds the config, or 0 */
    /* RUN (docs/run.md): */
    const struct fetch_opts *fo;     /* borrowed: to plan sources a RUN reads early */
    const struct mf_instr *instrs;   /* borrowed: mf->instrs (indexes checked[]) */
    size_t *checked;                 /* owned: per instruction, its check node, or NO_NODE */
    size_t *runs;                    /* owned: the RUN nodes, in order (their layers) */
    size_t n_runs;
};

/* Appends a node; args is stolen (also on failure). Returns its id, or
 * NO_NODE when memory ran out. */
static size_t node_add(struct plan *p, enum plan_op op, enum plan_role role, int line,
                       const char *name, const char *instr, json_t *args, const size_t *inputs,
                       size_t n_inputs)
{
    struct plan_node *a = realloc(p->nodes, (p->n_nodes + 1) * sizeof *a);
    if (!a || !args) {
        json_decref(args);
        return NO_NODE;
    }
    p->nodes = a;
    struct plan_node *n = &a[p->n_nodes];
    memset(n, 0, sizeof *n);
    n->id = p->n_nodes++;
    n->op = op;
    n->role = role;
    n->line = line;
    n->args = args;
    n->name = strdup(name);
    n->instr = strdup(instr);
    n->inputs = n_inputs ? malloc(n_inputs * sizeof *n->inputs) : NULL;
    if (!n->name || !n->instr || (n_inputs && !n->inputs))
        return NO_NODE; /* plan_free releases the half-built node */
    for (size_t i = 0; i < n_inputs; i++)
        n->inputs[n->n_inputs++] = inputs[i];
    return n->id;
}

static int plan_checked(struct plan *p, const struct mf_instr *in, size_t run, size_t base_check,
                        const struct fetch_opts *fo, size_t *out, struct mf_err *err);

/* plan_checked once per instruction: a source a RUN reads is planned when
 * the RUN is, and reused by the image's part of the plan. */
static int checked_once(struct plan *p, const struct walk *w, const struct mf_instr *in,
                        size_t run, size_t base_check, size_t *out, struct mf_err *err)
{
    size_t i = (size_t)(in - w->instrs);
    if (w->checked[i] != NO_NODE) {
        *out = w->checked[i];
        return 0;
    }
    int rc = plan_checked(p, in, run, base_check, w->fo, out, err);
    if (!rc)
        w->checked[i] = *out;
    return rc;
}

/* "x.gguf" for "/out/x.gguf"; NULL when ref is not a clean path under /out. */
static const char *out_rel(const char *ref)
{
    if (strncmp(ref, "/out/", 5) != 0 || !ref[5] || ref[strlen(ref) - 1] == '/' ||
        strstr(ref, "//") || strstr(ref, "/../") || strstr(ref, "/./") ||
        !strcmp(ref + strlen(ref) - 3, "/..") || !strcmp(ref + strlen(ref) - 2, "/."))
        return NULL;
    return ref + 5;
}

/* The RUN's args: the command, network, mounts (a secret by id only), timeout,
 * the ARG/ENV environment in effect, where each input appears under /inputs,
 * and the /out files later lines take as sources (kept out of its layer). */
static json_t *run_args(const struct mf_modelfile *mf, size_t at, const json_t *env)
{
    const struct mf_instr *in = &mf->instrs[at];
    const struct mf_run *r = &in->u.run;
    static const char *const nets[] = {"default", "none", "host"};
    json_t *a = json_pack("{s:s, s:I, s:s, s:O, s:[], s:[], s:[]}", "command", in->value,
                          "timeout_ms", (json_int_t)r->timeout_ms, "network", nets[r->network],
                          "env", env, "mounts", "inputs", "exclude");
    if (!a)
        return NULL;
    if (r->root) /* only when given, so the keys of other RUN steps stay as they were */
        json_object_set_new(a, "user", json_integer(0));
    if (r->argv) {
        json_t *v = json_array();
        for (size_t i = 0; v && i < r->argc; i++)
            json_array_append_new(v, json_string(r->argv[i]));
        json_object_set_new(a, "argv", v);
    } else {
        json_object_set_new(a, "shell", json_string(r->shell));
    }
    for (size_t i = 0; i < r->n_mounts; i++) {
        const struct mf_mount *m = &r->mounts[i];
        json_array_append_new(json_object_get(a, "mounts"),
                              json_pack("{s:s, s:s?, s:s?, s:b}", "type",
                                        m->type == MF_MOUNT_CACHE ? "cache" : "secret", "target",
                                        m->target, "id", m->id, "required", m->required));
    }
    for (size_t i = at + 1; i < mf->n_instrs; i++) {
        const struct mf_instr *l = &mf->instrs[i];
        const char *rel = (l->kind == MF_INSTR_FROM || l->kind == MF_INSTR_ADAPTER ||
                           l->kind == MF_INSTR_DRAFT)
                              ? out_rel(l->u.src.ref)
                              : NULL;
        if (rel)
            json_array_append_new(json_object_get(a, "exclude"), json_string(rel));
    }
    return a;
}

/* A RUN node: reads the previous RUN's files (/inputs/out), the FROM in
 * effect (/inputs/model.gguf) and the ADAPTERs and DRAFT above it
 * (/inputs/adapters/NAME.gguf, /inputs/draft.gguf), planned here. */
static int plan_run(const struct mf_modelfile *mf, size_t at, struct plan *p, struct walk *w,
                    size_t *last_run, const json_t *env, struct mf_err *err)
{
    const struct mf_instr *in = &mf->instrs[at];
    size_t *ins = malloc((w->n_extra + 2) * sizeof *ins), n = 0, base = NO_NODE;
    json_t *args = run_args(mf, at, env);
    json_t *paths = json_object_get(args, "inputs");
    char name[160], path[128];
    int rc = ins && args ? 0 : mf_err_set(err, MF_ENOMEM, "out of memory");
    if (!rc && *last_run != NO_NODE) {
        ins[n++] = *last_run;
        json_array_append_new(paths, json_string("out"));
    }
    if (!rc && w->from && !(rc = checked_once(p, w, w->from, w->from_run, NO_NODE, &base, err))) {
        ins[n++] = base;
        json_array_append_new(paths, json_string("model.gguf"));
    }
    for (size_t i = 0, k = 0; !rc && i < w->n_extra; i++) {
        const struct mf_instr *x = w->extra[i];
        int adapter = x->kind == MF_INSTR_ADAPTER;
        /* an adapter is checked against the base, a draft's vocabulary too */
        rc = checked_once(p, w, x, w->extra_run[i], base, &ins[n], err);
        if (adapter && x->u.src.name)
            snprintf(path, sizeof path, "adapters/%s.gguf", x->u.src.name);
        else if (adapter)
            snprintf(path, sizeof path, "adapters/%zu.gguf", k);
        else
            snprintf(path, sizeof path, "draft.gguf");
        k += adapter;
        if (!rc) {
            n++;
            json_array_append_new(paths, json_string(path));
        }
    }
    snprintf(name, sizeof name, "RUN %.150s", in->value);
    if (!rc) {
        size_t *r = realloc(w->runs, (w->n_runs + 1) * sizeof *r);
        if (!r)
            rc = mf_err_set(err, MF_ENOMEM, "out of memory");
        else
            w->runs = r;
    }
    if (!rc) {
        *last_run = node_add(p, PLAN_RUN, PLAN_ROLE_NONE, in->line, name, name, args, ins, n);
        args = NULL;
        if (*last_run == NO_NODE)
            rc = mf_err_set(err, MF_ENOMEM, "%s:%d: out of memory", p->modelfile, in->line);
        else
            w->runs[w->n_runs++] = *last_run;
    }
    json_decref(args);
    free(ins);
    return rc;
}

static int collect_walk(const struct mf_modelfile *mf, struct plan *p, struct walk *w,
                        json_t *envs, json_t *argvals, struct mf_err *err);

static int collect(const struct mf_modelfile *mf, struct plan *p, struct walk *w,
                   struct mf_err *err)
{
    json_t *env = json_object(), *argv = json_object();
    w->instrs = mf->instrs;
    w->checked = malloc((mf->n_instrs + 1) * sizeof *w->checked);
    if (!env || !argv || !w->checked) {
        json_decref(env);
        json_decref(argv);
        return mf_err_set(err, MF_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < mf->n_instrs; i++)
        w->checked[i] = NO_NODE;
    int rc = collect_walk(mf, p, w, env, argv, err);
    json_decref(env);
    json_decref(argv);
    return rc;
}

/* The walk of collect: env and args hold the ENV and ARG values in effect. */
static int collect_walk(const struct mf_modelfile *mf, struct plan *p, struct walk *w,
                        json_t *envs, json_t *argvals, struct mf_err *err)
{
    size_t last_run = NO_NODE;
    w->from_run = NO_NODE;
    for (size_t i = 0; i < mf->n_instrs; i++) {
        const struct mf_instr *in = &mf->instrs[i];
        if (in->ignored)
            continue;
        if (in->kind == MF_INSTR_ENV || in->kind == MF_INSTR_ARG) {
            for (size_t k = 0; k < in->u.kv.n; k++)
                if (in->u.kv.items[k].value &&
                    json_object_set_new(in->kind == MF_INSTR_ENV ? envs : argvals,
                                        in->u.kv.items[k].key,
                                        json_string(in->u.kv.items[k].value)) != 0)
                    return mf_err_set(err, MF_ENOMEM, "out of memory");
        }
        if (in->kind == MF_INSTR_RUN) {
            /* as in a Dockerfile: ARG values are in a RUN's environment, ENV wins */
            json_t *env = json_deep_copy(argvals);
            int rc = env && json_object_update(env, envs) == 0
                         ? plan_run(mf, i, p, w, &last_run, env, err)
                         : mf_err_set(err, MF_ENOMEM, "out of memory");
            json_decref(env);
            if (rc)
                return rc;
        } else if (in->kind == MF_INSTR_FROM) {
            w->from = in;
            w->from_run = last_run;
        } else if (in->kind == MF_INSTR_ADAPTER || in->kind == MF_INSTR_DRAFT) {
            const struct mf_instr **e = realloc(w->extra, (w->n_extra + 1) * sizeof *e);
            size_t *r = e ? realloc(w->extra_run, (w->n_extra + 1) * sizeof *r) : NULL;
            if (e)
                w->extra = e;
            if (!r)
                return mf_err_set(err, MF_ENOMEM, "%s: out of memory", p->modelfile);
            w->extra_run = r;
            w->extra[w->n_extra] = in;
            w->extra_run[w->n_extra++] = last_run;
        } else if (in->kind != MF_INSTR_ARG && !w->config_line) {
            w->config_line = in->line;
        }
    }
    if (!w->from)
        return mf_err_set(err, MF_EINVAL, "%s: no FROM instruction", p->modelfile);
    return 0;
}

static enum plan_role role_of(const struct mf_instr *in)
{
    return in->kind == MF_INSTR_FROM      ? PLAN_ROLE_BASE
           : in->kind == MF_INSTR_ADAPTER ? PLAN_ROLE_ADAPTER
                                          : PLAN_ROLE_DRAFT;
}

/* The source's args: a file is keyed by its content (added by the executor),
 * not its path; a URL by its location and pin. */
static json_t *source_args(const struct fetch_source *src)
{
    static const char *const kinds[] = {"file", "dir", "url", "name"};
    json_t *a = json_pack("{s:s, s:s}", "kind", kinds[src->kind], "pin", src->pin);
    if (a && src->kind != FETCH_FILE)
        json_object_set_new(a, "location", json_string(src->location));
    return a;
}

/* FROM/ADAPTER/DRAFT /out/PATH after a RUN: that file of the RUN's output
 * (not the host path), a source node reading the RUN node. */
static int plan_run_output(struct plan *p, const struct mf_instr *in, size_t run, size_t *out,
                           struct mf_err *err)
{
    char name[4200];
    snprintf(name, sizeof name, "%s %s", mf_modelfile_kind_name(in->kind), in->u.src.ref);
    json_t *args = json_pack("{s:s, s:s, s:s}", "kind", "run-output", "path",
                             out_rel(in->u.src.ref), "pin",
                             in->u.src.digest ? in->u.src.digest : "");
    size_t id = node_add(p, PLAN_SOURCE, role_of(in), in->line, name, name, args, &run, 1);
    if (id == NO_NODE)
        return mf_err_set(err, MF_ENOMEM, "%s:%d: out of memory", p->modelfile, in->line);
    struct fetch_source *src = &p->nodes[id].src;
    src->kind = FETCH_FILE;
    src->location = strdup(in->u.src.ref);
    src->display = strdup(in->u.src.ref);
    if (!src->location || !src->display)
        return mf_err_set(err, MF_ENOMEM, "%s:%d: out of memory", p->modelfile, in->line);
    *out = id;
    return 0;
}

/* An earlier source or convert node that would do exactly what this one
 * would (same op, role, kind, location, pin and RUN input): one PEFT
 * directory or URL named by several lines is fetched or converted once, as
 * BuildKit solves a vertex once. NO_NODE when there is none. */
static size_t same_source(const struct plan *p, enum plan_op op, enum plan_role role,
                          const struct fetch_source *src, size_t run)
{
    for (size_t i = 0; i < p->n_nodes; i++) {
        const struct plan_node *n = &p->nodes[i];
        if (n->op != op || n->role != role || n->src.kind != src->kind || !n->src.location ||
            strcmp(n->src.location, src->location) || strcmp(n->src.pin, src->pin) ||
            n->src.layout != src->layout || n->src.hf != src->hf)
            continue;
        /* inputs: the RUN it follows, if any (a convert's base check comes later) */
        size_t n_run = 0;
        for (size_t k = 0; k < n->n_inputs; k++)
            n_run += p->nodes[n->inputs[k]].op == PLAN_RUN;
        if (run == NO_NODE ? n_run == 0 : n->n_inputs > 0 && n->inputs[0] == run)
            return i;
    }
    return NO_NODE;
}

/* Plans the source of in (source, or convert for a safetensors directory);
 * *out gets the node whose output is a GGUF blob. */
static int plan_source(struct plan *p, const struct mf_instr *in, size_t run,
                       const struct fetch_opts *fo, size_t *out, struct mf_err *err)
{
    struct fetch_source src;
    char ref[4096], name[4200];
    enum plan_role role = role_of(in);
    if (run != NO_NODE && out_rel(in->u.src.ref))
        return plan_run_output(p, in, run, out, err);
    snprintf(ref, sizeof ref, "%s%s%s", in->u.src.ref, in->u.src.digest ? "@" : "",
             in->u.src.digest ? in->u.src.digest : "");
    int rc = fetch_resolve(ref, fo, &src, err);
    if (rc)
        return mf_err_prefix(err, "%s:%d: %s %s", p->modelfile, in->line,
                             mf_modelfile_kind_name(in->kind), in->u.src.ref);
    snprintf(name, sizeof name, "%s %s", mf_modelfile_kind_name(in->kind), src.display);
    /* a RUN may write a local file; a URL or name cannot come from one */
    int after_run = run != NO_NODE && (src.kind == FETCH_FILE || src.kind == FETCH_DIR);
    enum plan_op op = src.kind == FETCH_DIR ? PLAN_CONVERT : PLAN_SOURCE;
    size_t id = same_source(p, op, role, &src, after_run ? run : NO_NODE);
    if (id != NO_NODE) {
        fetch_source_fini(&src);
        *out = id;
        return 0;
    }
    id = node_add(p, op, role, in->line, name, name, source_args(&src), &run, after_run);
    if (id == NO_NODE) {
        fetch_source_fini(&src);
        return mf_err_set(err, MF_ENOMEM, "%s:%d: out of memory", p->modelfile, in->line);
    }
    p->nodes[id].src = src;
    *out = id;
    return 0;
}

/* source -> check; returns the check node in *out. */
static int plan_checked(struct plan *p, const struct mf_instr *in, size_t run, size_t base_check,
                        const struct fetch_opts *fo, size_t *out, struct mf_err *err)
{
    size_t src, ins[2];
    int rc = plan_source(p, in, run, fo, &src, err);
    if (rc)
        return rc;
    int has_base = 0;
    for (size_t k = 0; k < p->nodes[src].n_inputs; k++)
        has_base |= p->nodes[src].inputs[k] == base_check; /* a source planned before */
    if (p->nodes[src].op == PLAN_CONVERT && p->nodes[src].role == PLAN_ROLE_ADAPTER &&
        base_check != NO_NODE && !has_base) {
        /* a PEFT adapter's conversion reads the base (architecture, head counts) */
        size_t *v = realloc(p->nodes[src].inputs, (p->nodes[src].n_inputs + 1) * sizeof *v);
        if (!v)
            return mf_err_set(err, MF_ENOMEM, "out of memory");
        p->nodes[src].inputs = v;
        v[p->nodes[src].n_inputs++] = base_check;
    }
    const struct plan_node *s = &p->nodes[src];
    ins[0] = src;
    ins[1] = base_check; /* an adapter's base (exec_lora.c), a draft's model (exec_draft.c) */
    json_t *args = json_pack("{s:s}", "role", plan_role_name(s->role));
    *out = node_add(p, PLAN_CHECK, s->role, in->line, s->name, s->instr, args, ins,
                    base_check == NO_NODE ? 1 : 2);
    return *out == NO_NODE ? mf_err_set(err, MF_ENOMEM, "out of memory") : 0;
}

static size_t layer_add(struct plan *p, size_t input, const char *path, const char *media_type)
{
    const struct plan_node *in = &p->nodes[input];
    json_t *args = json_pack("{s:s, s:s, s:s}", "role", plan_role_name(in->role), "path", path,
                             "mediaType", media_type);
    return node_add(p, PLAN_LAYER, in->role, in->line, path, in->instr, args, &input, 1);
}

/* The i-th unmerged adapter's path in the image, as the config document
 * names it (without the leading "/"), so the YAML and the layer agree. */
static const char *adapter_path(const struct plan *p, size_t i)
{
    const json_t *a = json_array_get(json_object_get(p->config, "adapters"), i);
    const char *path = json_string_value(json_object_get(a, "path"));
    return path && path[0] == '/' ? path + 1 : NULL;
}

/* The weights' merge step (ADAPTER --merge, mfc build --merge-adapters: base
 * + every merged adapter's check -> one GGUF, requantized once, to
 * --quantize's type when given), or a quantize step when only --quantize
 * is given. *weights becomes that node. merged[0] is left free for the base. */
static int plan_weights(struct plan *p, const struct plan_opts *o, size_t *weights,
                        size_t *merged, size_t n_merged, json_t *scales, struct mf_err *err)
{
    const struct plan_node *base = &p->nodes[*weights];
    size_t id;
    if (n_merged == 0 && !o->quantize)
        return 0;
    merged[0] = *weights;
    char name[160], instr[4200];
    if (n_merged) {
        /* errors and the weights layer's history name the last merged ADAPTER's line */
        json_t *args = json_pack("{s:O, s:s?}", "scales", scales, "quantize", o->quantize);
        const struct plan_node *last = &p->nodes[merged[n_merged]];
        snprintf(name, sizeof name, "merge %zu adapter%s into the weights%s%.20s", n_merged,
                 n_merged == 1 ? "" : "s", o->quantize ? " as " : "",
                 o->quantize ? o->quantize : "");
        snprintf(instr, sizeof instr, "%.4000s --merge (into %.150s)", last->instr, base->instr);
        id = node_add(p, PLAN_MERGE, PLAN_ROLE_BASE, last->line, name, instr, args, merged,
                      n_merged + 1);
    } else {
        snprintf(name, sizeof name, "quantize %.40s -> %.20s", base->name, o->quantize);
        snprintf(instr, sizeof instr, "%.4000s (--quantize %.20s)", base->instr, o->quantize);
        id = node_add(p, PLAN_QUANTIZE, PLAN_ROLE_BASE, base->line, name, instr,
                      json_pack("{s:s}", "type", o->quantize), merged, 1);
    }
    if (id == NO_NODE)
        return mf_err_set(err, MF_ENOMEM, "out of memory");
    *weights = id;
    return 0;
}

/* The loop of plan_extras: merged adapters' checks go to merged[], their
 * scales to scales; the others get layers. */
static int plan_adapters(struct plan *p, const struct walk *w, const struct fetch_opts *fo,
                         size_t base_check, size_t *merged, size_t *n_merged_out,
                         json_t *scales, size_t *n_adapters_out, size_t *layers,
                         size_t *n_layers, struct mf_err *err)
{
    size_t n_adapters = 0, n_merged = 0;
    for (size_t i = 0; i < w->n_extra; i++) {
        const struct mf_instr *in = w->extra[i];
        int adapter = in->kind == MF_INSTR_ADAPTER;
        size_t chk, id;
        int rc = checked_once(p, w, in, w->extra_run[i], base_check, &chk, err);
        if (rc)
            return rc;
        if (adapter && in->u.src.merge) {
            /* one merge node takes every merged adapter (plan_weights): one requantization */
            id = chk;
            merged[n_merged++] = chk;
            if (json_array_append_new(scales, json_real(in->u.src.scale)) != 0)
                return mf_err_set(err, MF_ENOMEM, "out of memory");
        } else {
            const char *path = adapter ? adapter_path(p, n_adapters++) : PLAN_DRAFT_PATH;
            assert(path); /* plan_config_doc lists every unmerged ADAPTER, in order */
            id = layer_add(p, chk, path, adapter ? PLAN_MT_ADAPTER : PLAN_MT_GGUF);
            layers[(*n_layers)++] = id;
        }
        if (id == NO_NODE)
            return mf_err_set(err, MF_ENOMEM, "out of memory");
    }
    *n_merged_out = n_merged;
    *n_adapters_out = n_adapters;
    return 0;
}

/* Adapters and drafts: check each, merge or layer it; appends layer ids. */
static int plan_extras(struct plan *p, const struct walk *w, const struct plan_opts *o,
                       size_t base_check, size_t *weights, size_t *layers, size_t *n_layers,
                       struct mf_err *err)
{
    const struct fetch_opts *fo = o->fo;
    size_t n_adapters = 0, n_merged = 0;
    size_t *merged = malloc((w->n_extra + 1) * sizeof *merged);
    json_t *scales = json_array();
    int rc = merged && scales ? 0 : mf_err_set(err, MF_ENOMEM, "out of memory");
    if (!rc)
        rc = plan_adapters(p, w, fo, base_check, merged + 1, &n_merged, scales, &n_adapters,
                           layers, n_layers, err);
    if (!rc)
        rc = plan_weights(p, o, weights, merged, n_merged, scales, err);
    free(merged);
    json_decref(scales);
    return rc;
}

/* base_src: the FROM source node when FROM names an image, whose template,
 * system, params and messages are the config's defaults (merged by the
 * executor); NO_NODE otherwise, so the config stays independent of sources. */
static int plan_image(struct plan *p, const struct walk *w, size_t base_src, size_t *layers,
                      size_t n_layers, struct mf_err *err)
{
    json_t *cargs = json_pack("{s:s, s:O}", "format", "yaml", "document", p->config);
    if (cargs && base_src != NO_NODE)
        json_object_set_new(cargs, "inherit", json_true());
    size_t cfg = node_add(p, PLAN_CONFIG, PLAN_ROLE_CONFIG, w->config_line, PLAN_CONFIG_PATH,
                          "config", cargs, &base_src, base_src != NO_NODE);
    if (cfg == NO_NODE)
        return mf_err_set(err, MF_ENOMEM, "out of memory");
    /* each RUN's /out is a layer of its own (the RUN node's record is one) */
    size_t *all = malloc((n_layers + w->n_runs + 1) * sizeof *all);
    if (!all)
        return mf_err_set(err, MF_ENOMEM, "out of memory");
    memcpy(all, layers, n_layers * sizeof *all);
    if (w->n_runs)
        memcpy(all + n_layers, w->runs, w->n_runs * sizeof *all);
    layers = all;
    n_layers += w->n_runs;
    layers[n_layers] = layer_add(p, cfg, PLAN_CONFIG_PATH, PLAN_MT_CONFIG);
    if (layers[n_layers++] == NO_NODE) {
        free(all);
        return mf_err_set(err, MF_ENOMEM, "out of memory");
    }
    json_t *iargs = json_pack("{s:s, s:O, s:s}", "modelfile", p->modelfile_digest, "labels",
                              p->labels, "artifactType", PLAN_ARTIFACT_TYPE);
    p->image = node_add(p, PLAN_IMAGE, PLAN_ROLE_NONE, 0, "image", "image", iargs, layers,
                        n_layers);
    free(all);
    return p->image == NO_NODE ? mf_err_set(err, MF_ENOMEM, "out of memory") : 0;
}

static int plan_nodes(struct plan *p, const struct walk *w, const struct plan_opts *o,
                      struct mf_err *err)
{
    size_t base_check, weights, n_layers = 0;
    /* one layer per adapter or draft, plus the weights and the config */
    size_t *layers = malloc((w->n_extra + 2) * sizeof *layers);
    if (!layers)
        return mf_err_set(err, MF_ENOMEM, "out of memory");
    int rc = checked_once(p, w, w->from, w->from_run, NO_NODE, &base_check, err);
    weights = base_check;
    if (!rc)
        rc = plan_extras(p, w, o, base_check, &weights, layers + 1, &n_layers, err);
    if (!rc) {
        layers[0] = layer_add(p, weights, PLAN_MODEL_PATH, PLAN_MT_GGUF);
        n_layers++;
        rc = layers[0] == NO_NODE ? mf_err_set(err, MF_ENOMEM, "out of memory") : 0;
    }
    if (!rc) {
        size_t src = p->nodes[base_check].inputs[0];
        rc = plan_image(p, w, p->nodes[src].src.kind == FETCH_NAME ? src : NO_NODE, layers,
                        n_layers, err);
    }
    free(layers);
    return rc;
}

static int plan_meta(struct plan *p, const struct mf_modelfile *mf, const struct plan_opts *o,
                     struct mf_err *err)
{
    uint8_t d[MF_SHA256_LEN];
    char hex[MF_SHA256_HEX_LEN + 1];
    p->modelfile = strdup(o->modelfile ? o->modelfile : "Modelfile");
    p->config = plan_config_doc(mf);
    p->labels = p->config ? json_incref(json_object_get(p->config, "labels")) : NULL;
    if (!p->modelfile || !p->labels)
        return mf_err_set(err, MF_ENOMEM, "out of memory");
    int rc = mf_sha256_mem(mf->text, mf->text_len, d, err);
    if (rc)
        return rc;
    mf_sha256_hex(d, hex);
    snprintf(p->modelfile_digest, sizeof p->modelfile_digest, "sha256:%s", hex);
    return 0;
}

int plan_build(const struct mf_modelfile *mf, const struct plan_opts *o, struct plan **out,
               struct mf_err *err)
{
    struct walk w = {.fo = o->fo};
    struct plan *p = calloc(1, sizeof *p);
    *out = NULL;
    if (!p)
        return mf_err_set(err, MF_ENOMEM, "out of memory");
    int rc = plan_meta(p, mf, o, err);
    if (!rc)
        rc = collect(mf, p, &w, err);
    if (!rc)
        rc = plan_nodes(p, &w, o, err);
    free(w.extra);
    free(w.extra_run);
    free(w.checked);
    free(w.runs);
    if (rc) {
        plan_free(p);
        return rc;
    }
    *out = p;
    return 0;
}

void plan_free(struct plan *p)
{
    if (!p)
        return;
    for (size_t i = 0; i < p->n_nodes; i++) {
        struct plan_node *n = &p->nodes[i];
        free(n->name);
        free(n->instr);
        json_decref(n->args);
        free(n->inputs);
        fetch_source_fini(&n->src);
    }
    free(p->nodes);
    free(p->modelfile);
    json_decref(p->config);
    json_decref(p->labels);
    free(p);
}

/* ---- cache keys ----------------------------------------------------------------- */

static int hash_str(struct mf_sha256 *h, const char *s, struct mf_err *err)
{
    /* the NUL separates fields, so ("ab","c") and ("a","bc") differ */
    return mf_sha256_update(h, s ? s : "", strlen(s ? s : "") + 1, err);
}

int plan_op_versioned(enum plan_op op)
{
    /* a source is the fetched bytes (its content digest is in the key) and a
     * RUN's output is the user's command's: neither is made by mfc's code */
    return op != PLAN_SOURCE && op != PLAN_RUN && (unsigned)op < PLAN_OP_COUNT;
}

int plan_node_key(const struct plan_node *n, const char *const *input_keys,
                  const char *const *input_digests, const char *content,
                  char key[STORE_DIGEST_BUF], struct mf_err *err)
{
    return plan_node_key_at(n, input_keys, input_digests, content, PACKAGE_VERSION, key, err);
}

int plan_node_key_at(const struct plan_node *n, const char *const *input_keys,
                     const char *const *input_digests, const char *content,
                     const char *mfc_version, char key[STORE_DIGEST_BUF], struct mf_err *err)
{
    struct mf_sha256 h;
    struct mf_buf args;
    uint8_t d[MF_SHA256_LEN];
    char hex[MF_SHA256_HEX_LEN + 1];
    mf_buf_init(&args, PLAN_TEXT_MAX);
    int rc = mf_json_dump(n->args, JSON_SORT_KEYS | JSON_COMPACT | JSON_REAL_PRECISION(17), &args,
                          err);
    if (!rc)
        rc = mf_sha256_init(&h, err);
    if (rc) {
        mf_buf_free(&args);
        return rc;
    }
    rc = hash_str(&h, PLAN_KEY_SALT, err);
    if (!rc && plan_op_versioned(n->op))
        rc = hash_str(&h, mfc_version, err);
    if (!rc)
        rc = hash_str(&h, plan_op_name(n->op), err);
    if (!rc)
        rc = hash_str(&h, args.data, err);
    for (size_t i = 0; !rc && i < n->n_inputs; i++) {
        rc = hash_str(&h, input_keys[i], err);
        if (!rc)
            rc = hash_str(&h, input_digests[i], err);
    }
    if (!rc)
        rc = hash_str(&h, content, err);
    mf_buf_free(&args);
    if (rc) {
        mf_sha256_abort(&h);
        return rc;
    }
    rc = mf_sha256_final(&h, d, err);
    if (rc)
        return rc;
    mf_sha256_hex(d, hex);
    snprintf(key, STORE_DIGEST_BUF, "sha256:%s", hex);
    return 0;
}
