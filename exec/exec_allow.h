/*
 * exec_allow.h: entitlements, as BuildKit has them: a privilege a Modelfile
 * line asks for (RUN --network=host) is granted only on the command line
 * (mfc build --allow network.host), and a build that asks for one it was
 * not granted fails before any step runs.
 */
#ifndef MFC_EXEC_ALLOW_H
#define MFC_EXEC_ALLOW_H

#include "common/err.h"
#include "compiler/plan.h"

enum {
    EXEC_ALLOW_NETWORK_HOST = 1u << 0, /* network.host: RUN --network=host */
};

/* Adds the entitlement named (an --allow value: "network.host") to *bits.
 * MF_EUSAGE for an unknown name, naming the ones mfc knows. */
int exec_allow_parse(const char *name, unsigned *bits, struct mf_err *err);

/* The entitlement a plan node asks for (0: none), and in *flag the
 * Modelfile flag that asks ("--network=host"). */
unsigned exec_allow_needed(const struct plan_node *n, const char **flag);

/* 0 when every node of p asks only for what allow grants; else MF_EINVAL
 * with err naming the first such node's Modelfile line, its flag and the
 * --allow it needs. Runs nothing. */
int exec_allow_check(const struct plan *p, unsigned allow, struct mf_err *err);

#endif
