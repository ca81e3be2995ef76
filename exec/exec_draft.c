/*
 * exec_draft.c: the build's check of a DRAFT model (plan.h: the check node
 * of a DRAFT has input 0, its source, and input 1, the model's check), run
 * before anything is layered, with the same code mfc-serve uses:
 *
 *   - (its architecture is one mfc runs: op_check's check of every model);
 *   - its tokenizer gives every token id the meaning the model's does
 *     (text/tokenizer.h tok_same_vocab: the same texts, types and special
 *     ids; the first difference is named), and its logits rows are as wide,
 *     since the model verifies the draft's ids as its own;
 *   - it is smaller than the model (a draft as big as its model costs a
 *     step as dear as the one it hopes to save); more than half the model's
 *     size is allowed with a warning on the step.
 *
 * Owns nothing after it returns.
 */
#include "exec/exec_int.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/gguf.h"
#include "common/progress.h"
#include "text/tokenizer.h"

/* The index of the input that is the model's check node, or SIZE_MAX. */
static size_t model_input(const struct exec_job *j)
{
    for (size_t i = 0; i < j->node->n_inputs; i++) {
        const struct plan_node *n = &j->plan->nodes[j->node->inputs[i]];
        if (n->op == PLAN_CHECK && n->role == PLAN_ROLE_BASE)
            return i;
    }
    return SIZE_MAX;
}

static uint64_t n_params(const struct gguf_file *gf)
{
    uint64_t n = 0;
    for (uint64_t i = 0; i < gguf_n_tensors(gf); i++)
        n += gguf_tensor_at(gf, i)->n_elements;
    return n;
}

/* Rows of token_embd: the width of the logits (a tied output is that). */
static int64_t vocab_rows(const struct gguf_file *gf)
{
    const struct gguf_tensor *t = gguf_find_tensor(gf, "token_embd.weight");
    return t && t->n_dims == 2 ? (int64_t)t->ne[1] : -1;
}

static int check_vocab(const struct gguf_file *model, const struct gguf_file *draft,
                       struct mf_err *err)
{
    struct tok *tm = NULL, *td = NULL;
    int rc = tok_load_gguf(model, &tm, err);
    if (rc)
        return mf_err_prefix(err, "the model's tokenizer");
    rc = tok_load_gguf(draft, &td, err);
    if (rc)
        mf_err_prefix(err, "the draft's tokenizer");
    else if ((rc = tok_same_vocab(tm, td, err)))
        mf_err_prefix(err, "the draft's tokenizer is not the model's (the model's value first)");
    else if (vocab_rows(model) != vocab_rows(draft))
        rc = mf_err_set(err, MF_EINVAL,
                        "the draft's logits have %" PRId64 " rows, the model's %" PRId64
                        " (token_embd.weight)",
                        vocab_rows(draft), vocab_rows(model));
    tok_free(tm);
    tok_free(td);
    return rc;
}

static void step_note(const struct exec_job *j, const char *msg)
{
    struct progress *pg = progress_scope(j->o->progress, (int)j->node->id + 1);
    int id = progress_begin(pg, "check", j->node->name);
    progress_note(pg, id, msg);
    progress_close(pg);
}

int exec_check_draft(const struct exec_job *j, const struct gguf_file *draft, json_t *result,
                     struct mf_err *err)
{
    size_t mi = model_input(j);
    char *path = NULL;
    const json_t *local = NULL;
    struct gguf_file *model = NULL;
    int rc;

    if (mi == SIZE_MAX)
        return 0; /* a plan without the model's check: nothing to compare with */
    rc = exec_input_file_at(j, mi, &path, &local, err);
    if (!rc)
        rc = gguf_open(path, &model, err);
    if (!rc)
        rc = check_vocab(model, draft, err);
    if (!rc) {
        uint64_t nd = n_params(draft), nm = n_params(model);
        json_object_set_new(result, "parameters", json_integer((json_int_t)nd));
        json_object_set_new(result, "model_parameters", json_integer((json_int_t)nm));
        if (nd >= nm)
            rc = mf_err_set(err, MF_EINVAL,
                            "the draft has %" PRIu64 " parameters, the model %" PRIu64
                            ": a draft must be smaller than its model",
                            nd, nm);
        else if (nd * 2 > nm)
            step_note(j, "warning: the draft is more than half the model's size; speculation "
                         "gains little from it");
    }
    gguf_close(model);
    free(path);
    return rc;
}
