/*
 * exec_int.h: what exec.c (scheduling, caching, progress) shares with
 * exec_ops.c (what each node type does). Internal to the executor.
 */
#ifndef MFC_EXEC_INT_H
#define MFC_EXEC_INT_H

#include "compiler/exec.h"

/* One node being run by one worker. */
struct exec_job {
    const struct plan *plan;      /* borrowed */
    const struct plan_node *node; /* borrowed: the node being run */
    const struct exec_opts *o;    /* borrowed */
    const struct exec_build *b;   /* borrowed: the inputs' entries are final (read-only) */
    struct store *s;              /* borrowed: this worker's own store handle */
};

/* The content digest that goes into the node's key (a local file's, through
 * the stat cache; a pinned URL's pin), or "" when the op has none. *cacheable
 * is 0 when a record must not be trusted without running the op (a URL
 * without a pin: the server decides, cheaply, with If-None-Match). */
int exec_op_content(const struct exec_job *j, char content[STORE_DIGEST_BUF], int *cacheable,
                    struct mf_err *err);

/* Runs the op: fills r->digest, r->size and r->result (the cache record);
 * *cached is set when the op found its work already done (HTTP 304). On
 * failure r is left without a result and nothing is stored. */
int exec_op_run(const struct exec_job *j, struct exec_node *r, int *cached, struct mf_err *err);

#endif
