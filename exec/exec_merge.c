/*
 * exec_merge.c: the build's merge and quantize steps (plan.h): the weights'
 * GGUF with every `ADAPTER --merge` (or, with mfc build --merge-adapters,
 * every ADAPTER) folded in and/or requantized to --quantize's file type,
 * through convert/lora_merge.h.
 *
 *   merge     inputs: the weights (check of FROM), then each merged adapter's
 *             check, in Modelfile order; args: scales (one per adapter),
 *             quantize (a file type name, or absent: each tensor keeps its type)
 *   quantize  input: the weights; args: type
 *
 * The output is a new GGUF blob in the store, which the weights layer then
 * tars. It is written to the store's tmp directory first and then stored
 * by store_put_file, so a failure leaves no blob and no record (the tmp
 * file is removed on every path). The node's key covers the inputs' digests
 * and the args, so a changed scale, adapter or type reruns it.
 */
#include "exec/exec_int.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "convert/lora_merge.h"
#include "common/progress.h"

#define MERGE_MAX_THREADS 16

struct merge_inputs {
    char *paths[LORA_MERGE_MAX_ADAPTERS + 1];         /* owned: base, then adapters */
    const json_t *local[LORA_MERGE_MAX_ADAPTERS + 1]; /* borrowed: source records of local files */
    size_t n;                                         /* entries used */
};

static void inputs_fini(struct merge_inputs *in)
{
    for (size_t i = 0; i < in->n; i++)
        free(in->paths[i]);
}

/* The files behind every input. */
static int inputs_get(const struct exec_job *j, struct merge_inputs *in, struct mf_err *err)
{
    memset(in, 0, sizeof *in);
    if (j->node->n_inputs == 0 || j->node->n_inputs > LORA_MERGE_MAX_ADAPTERS + 1)
        return mf_err_set(err, MF_EINVAL, "a merge takes the weights and 0 to %d adapters",
                          LORA_MERGE_MAX_ADAPTERS);
    for (size_t i = 0; i < j->node->n_inputs; i++) {
        int rc = exec_input_file_at(j, i, &in->paths[i], &in->local[i], err);
        if (rc)
            return rc;
        in->n++;
    }
    return 0;
}

static int merge_threads(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > MERGE_MAX_THREADS ? MERGE_MAX_THREADS : (int)n;
}

/* Runs the merge of inputs into a tmp file and stores it as r's blob. */
static int merge_to_store(const struct exec_job *j, struct exec_node *r,
                          const struct merge_inputs *in, struct lora_merge_opts *mo,
                          struct mf_err *err)
{
    struct lora_merge_adapter ad[LORA_MERGE_MAX_ADAPTERS];
    const json_t *scales = json_object_get(j->node->args, "scales");
    struct lora_merge_stats st;
    char *tmp = NULL;
    for (size_t i = 1; i < in->n; i++) {
        const json_t *s = json_array_get(scales, i - 1);
        ad[i - 1].path = in->paths[i];
        ad[i - 1].scale = s ? (float)json_number_value(s) : 1.0f;
    }
    mo->adapters = ad;
    mo->n_adapters = in->n - 1;
    mo->threads = merge_threads();
    int rc = exec_tmp_path(j, "merge", &tmp, err);
    struct progress *pg = progress_scope(j->o->progress, (int)j->node->id + 1);
    int id = progress_begin(pg, j->node->op == PLAN_MERGE ? "merge" : "quantize", in->paths[0]);
    if (!rc)
        rc = lora_merge_file(in->paths[0], tmp, mo, &st, err);
    for (size_t i = 0; !rc && i < in->n; i++)
        rc = exec_local_unchanged(in->local[i], in->paths[i], err);
    if (!rc)
        rc = store_put_file(j->s, tmp, NULL, r->digest, &r->size, err);
    if (!rc)
        progress_update(pg, id, r->size, r->size);
    progress_close(pg);
    if (tmp)
        unlink(tmp);
    free(tmp);
    if (rc)
        return rc;
    r->result = json_pack("{s:s, s:I, s:I, s:I, s:I, s:s?}", "digest", r->digest, "size",
                          (json_int_t)r->size, "adapters", (json_int_t)mo->n_adapters, "merged",
                          (json_int_t)st.n_merged, "requantized", (json_int_t)st.n_requant,
                          "quantize", mo->quantize ? quant_ftype_name(mo->ftype) : NULL);
    return r->result ? 0 : mf_err_set(err, MF_ENOMEM, "out of memory");
}

/* Runs a merge or quantize node whose file type is args[key] (or absent). */
static int run(const struct exec_job *j, struct exec_node *r, int *cached, const char *key,
               struct mf_err *err)
{
    struct lora_merge_opts mo = {0};
    struct merge_inputs in;
    const char *type = json_string_value(json_object_get(j->node->args, key));
    *cached = 0;
    if (type && lora_merge_parse_ftype(type, &mo.ftype, err) != 0)
        return err->code;
    mo.quantize = type != NULL;
    int rc = inputs_get(j, &in, err);
    if (!rc)
        rc = merge_to_store(j, r, &in, &mo, err);
    inputs_fini(&in);
    return rc;
}

int exec_op_merge(const struct exec_job *j, struct exec_node *r, int *cached, struct mf_err *err)
{
    return run(j, r, cached, "quantize", err);
}

int exec_op_quantize(const struct exec_job *j, struct exec_node *r, int *cached,
                     struct mf_err *err)
{
    return run(j, r, cached, "type", err);
}
