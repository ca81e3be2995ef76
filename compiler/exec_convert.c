/*
 * exec_convert.c: the convert step (placeholder until Hugging Face import lands).
 */
#include "compiler/exec_int.h"

int exec_op_convert(const struct exec_job *j, struct exec_node *r, int *cached, struct mf_err *err)
{
    if (j->node->role == PLAN_ROLE_ADAPTER)
        return exec_convert_peft(j, r, cached, err);
    *cached = 0;
    return mf_err_set(err, MF_EUNSUPPORTED, "converting a safetensors directory is not supported yet (give a GGUF file)");
}
