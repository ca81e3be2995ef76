/*
 * exec_lora.c: the adapter-against-base check of a build (placeholder: only
 * general.type is checked, in exec_ops.c, until adapter validation lands).
 */
#include "compiler/exec_int.h"

int exec_check_adapter(const struct exec_job *j, const struct gguf_file *adapter,
                       struct mf_err *err)
{
    return 0;
}

int exec_convert_peft(const struct exec_job *j, struct exec_node *r, int *cached,
                      struct mf_err *err)
{
    *cached = 0;
    return mf_err_set(err, MF_EUNSUPPORTED,
                      "converting a PEFT adapter directory is not supported yet (give a GGUF LoRA)");
}
