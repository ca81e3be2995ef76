/*
 * plan_print.c: `mfc plan` output: a plan as text, JSON or Graphviz dot.
 *
 * Borrows the plan; owns nothing. Output depends only on the plan, so two
 * runs on one Modelfile print the same bytes (tests compare them).
 */
#include "compiler/plan.h"

#include <string.h>

#include "common/buf.h"
#include "common/json.h"

#define PRINT_MAX (64u << 20) /* a plan's JSON: configs are capped by the Modelfile size */

int plan_parse_format(const char *s, enum plan_format *f, struct mf_err *err)
{
    static const char *const names[] = {"text", "json", "dot"};
    for (int i = 0; i < 3; i++) {
        if (strcmp(s, names[i]) == 0) {
            *f = (enum plan_format)i;
            return 0;
        }
    }
    return mf_err_set(err, MF_EUSAGE, "unknown format '%s' (use text, json or dot)", s);
}

static void print_inputs(const struct plan_node *n, FILE *out)
{
    for (size_t i = 0; i < n->n_inputs; i++)
        fprintf(out, "%s#%zu", i ? ", " : " <- ", n->inputs[i] + 1);
}

static void print_text(const struct plan *p, FILE *out)
{
    for (size_t i = 0; i < p->n_nodes; i++) {
        const struct plan_node *n = &p->nodes[i];
        fprintf(out, "#%zu %-8s %s", n->id + 1, plan_op_name(n->op), n->name);
        if (n->line)
            fprintf(out, " (%s:%d)", p->modelfile, n->line);
        print_inputs(n, out);
        fputc('\n', out);
    }
}

/* Writes s as a dot string body: quotes and backslashes escaped, newlines as \n. */
static void dot_escaped(const char *s, FILE *out)
{
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            fputc('\\', out);
        if (*s == '\n')
            fputs("\\n", out);
        else
            fputc(*s, out);
    }
}

static void print_dot(const struct plan *p, FILE *out)
{
    fputs("digraph plan {\n  rankdir=LR;\n  node [shape=box];\n", out);
    for (size_t i = 0; i < p->n_nodes; i++) {
        const struct plan_node *n = &p->nodes[i];
        fprintf(out, "  n%zu [label=\"#%zu %s\\n", n->id + 1, n->id + 1, plan_op_name(n->op));
        dot_escaped(n->name, out);
        if (n->line)
            fprintf(out, "\\nline %d", n->line);
        fputs("\"];\n", out);
    }
    for (size_t i = 0; i < p->n_nodes; i++)
        for (size_t k = 0; k < p->nodes[i].n_inputs; k++)
            fprintf(out, "  n%zu -> n%zu;\n", p->nodes[i].inputs[k] + 1, i + 1);
    fputs("}\n", out);
}

static json_t *node_json(const struct plan_node *n)
{
    json_t *ins = json_array();
    for (size_t i = 0; i < n->n_inputs; i++)
        json_array_append_new(ins, json_integer((json_int_t)n->inputs[i] + 1));
    json_t *o = json_pack("{s:I, s:s, s:s, s:I, s:s, s:o, s:O}", "id", (json_int_t)n->id + 1, "op",
                          plan_op_name(n->op), "role", plan_role_name(n->role), "line",
                          (json_int_t)n->line, "name", n->name, "inputs", ins, "args", n->args);
    if (o && n->src.location)
        json_object_set_new(o, "location", json_string(n->src.location));
    return o;
}

static int print_json(const struct plan *p, FILE *out, struct mf_err *err)
{
    struct mf_buf b;
    json_t *nodes = json_array();
    for (size_t i = 0; nodes && i < p->n_nodes; i++)
        if (json_array_append_new(nodes, node_json(&p->nodes[i])) != 0)
            return mf_err_set(err, MF_ENOMEM, "out of memory");
    json_t *doc = json_pack("{s:s, s:s, s:o, s:O}", "modelfile", p->modelfile, "digest",
                            p->modelfile_digest, "nodes", nodes, "config", p->config);
    if (!doc)
        return mf_err_set(err, MF_ENOMEM, "out of memory");
    mf_buf_init(&b, PRINT_MAX);
    int rc = mf_json_dump(doc, JSON_INDENT(2) | JSON_REAL_PRECISION(9), &b, err);
    json_decref(doc);
    if (!rc)
        fprintf(out, "%s\n", b.data);
    mf_buf_free(&b);
    return rc;
}

int plan_print(const struct plan *p, enum plan_format f, FILE *out, struct mf_err *err)
{
    int rc = 0;
    if (f == PLAN_FMT_JSON)
        rc = print_json(p, out, err);
    else if (f == PLAN_FMT_DOT)
        print_dot(p, out);
    else
        print_text(p, out);
    if (!rc && ferror(out))
        rc = mf_err_set(err, MF_EIO, "cannot write the plan");
    return rc;
}
