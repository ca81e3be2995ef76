/*
 * exec_run.c: the RUN step (placeholder until the sandbox lands).
 */
#include "compiler/exec_int.h"

int exec_op_sandbox(const struct exec_job *j, struct exec_node *r, int *cached, struct mf_err *err)
{
    *cached = 0;
    return mf_err_set(err, MF_EUNSUPPORTED, "RUN is not supported yet");
}
