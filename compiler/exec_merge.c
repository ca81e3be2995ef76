/*
 * exec_merge.c: merge and quantize steps (placeholder until they land).
 */
#include "compiler/exec_int.h"

int exec_op_merge(const struct exec_job *j, struct exec_node *r, int *cached, struct mf_err *err)
{
    *cached = 0;
    return mf_err_set(err, MF_EUNSUPPORTED, "ADAPTER --merge is not supported yet");
}

int exec_op_quantize(const struct exec_job *j, struct exec_node *r, int *cached, struct mf_err *err)
{
    *cached = 0;
    return mf_err_set(err, MF_EUNSUPPORTED, "quantize steps are not supported yet");
}
