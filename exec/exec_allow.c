/*
 * exec_allow.c: entitlements (exec_allow.h): the table of privileges a
 * Modelfile flag can ask for, the names `mfc build --allow` takes, and the
 * check of a whole plan before the executor starts.
 *
 * One table row per privilege: its --allow name, its bit, the Modelfile
 * flag that asks for it and how a plan node shows that it asks. Owns
 * nothing; no state.
 */
#include "exec/exec_allow.h"

#include <string.h>

#include <jansson.h>

struct entitlement {
    const char *name; /* what --allow takes, BuildKit's spelling */
    unsigned bit;     /* EXEC_ALLOW_* */
    const char *flag; /* the Modelfile flag that asks for it */
    const char *key;  /* the RUN node's argument that says so ... */
    const char *val;  /* ... when it has this value */
};

static const struct entitlement table[] = {
    {"network.host", EXEC_ALLOW_NETWORK_HOST, "--network=host", "network", "host"},
};

#define N_ENTITLEMENTS (sizeof table / sizeof table[0])

int exec_allow_parse(const char *name, unsigned *bits, struct mf_err *err)
{
    for (size_t i = 0; i < N_ENTITLEMENTS; i++)
        if (!strcmp(name, table[i].name)) {
            *bits |= table[i].bit;
            return 0;
        }
    return mf_err_set(err, MF_EUSAGE,
                      "--allow: unknown entitlement '%.100s' (mfc grants "
                      "network.host)",
                      name);
}

unsigned exec_allow_needed(const struct plan_node *n, const char **flag)
{
    if (n->op != PLAN_RUN)
        return 0;
    for (size_t i = 0; i < N_ENTITLEMENTS; i++) {
        const char *v = json_string_value(json_object_get(n->args, table[i].key));
        if (v && !strcmp(v, table[i].val)) {
            if (flag)
                *flag = table[i].flag;
            return table[i].bit;
        }
    }
    return 0;
}

static const char *name_of(unsigned bit)
{
    for (size_t i = 0; i < N_ENTITLEMENTS; i++)
        if (table[i].bit == bit)
            return table[i].name;
    return "?";
}

int exec_allow_check(const struct plan *p, unsigned allow, struct mf_err *err)
{
    for (size_t i = 0; i < p->n_nodes; i++) {
        const struct plan_node *n = &p->nodes[i];
        const char *flag = "";
        unsigned need = exec_allow_needed(n, &flag);
        if (!need || (need & allow) == need)
            continue;
        return mf_err_set(err, MF_EINVAL,
                          "%s:%d: %.200s: %s needs the %s entitlement, which this build does "
                          "not grant: run mfc build --allow %s (nothing was run)",
                          p->modelfile, n->line, n->instr, flag, name_of(need), name_of(need));
    }
    return 0;
}
