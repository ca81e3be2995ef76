/*
 * exec_lora.c: the build's adapter steps (plan.h):
 *
 *   check    of an ADAPTER (input 0: its source or convert node, input 1:
 *            the base's check): lora_check against the base, before anything
 *            is baked; a warning (no alpha, embedding pair) becomes a
 *            progress note on the step.
 *   convert  of an ADAPTER naming a PEFT directory (inputs: the RUN before
 *            it, if any, and the base's check): lora_peft_convert into the
 *            store's tmp directory, then stored as the node's blob. Its key
 *            content is the digest of the directory's two files
 *            (exec_peft_content), so an edited adapter converts again.
 *   image    the "dev.mfc.adapters.merged" label (exec_merged_label): which
 *            adapters the weights' merge step folded in, with their scale,
 *            rank and alpha (from the check records, exec_adapter_facts),
 *            so mfc inspect can list merged adapters too.
 *
 * Does not own the rules (lora_check.c, lora_peft.c) or the store layout.
 */
#include "exec/exec_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "common/gguf.h"
#include "common/sha256.h"
#include "convert/lora.h"
#include "common/progress.h"

/* The index of the input that is the base's check node, or SIZE_MAX. */
static size_t base_input(const struct exec_job *j)
{
    for (size_t i = 0; i < j->node->n_inputs; i++) {
        const struct plan_node *n = &j->plan->nodes[j->node->inputs[i]];
        if (n->op == PLAN_CHECK && n->role == PLAN_ROLE_BASE)
            return i;
    }
    return SIZE_MAX;
}

/* A warning on this step's progress line. */
static void step_note(const struct exec_job *j, const char *msg)
{
    char line[MF_ERR_MSG_MAX + 16];
    struct progress *pg = progress_scope(j->o->progress, (int)j->node->id + 1);
    int id = progress_begin(pg, "check", j->node->name);
    snprintf(line, sizeof line, "warning: %s", msg);
    progress_note(pg, id, line);
    progress_close(pg);
}

int exec_check_adapter(const struct exec_job *j, const struct gguf_file *adapter,
                       struct mf_err *err)
{
    size_t bi = base_input(j);
    if (bi == SIZE_MAX)
        return 0; /* a plan without the base hook (mfc lora check runs its own) */
    char *path = NULL;
    const json_t *local = NULL;
    struct gguf_file *base = NULL;
    struct lora_tensor *ts = NULL;
    struct lora_view v;
    struct lora_summary sum;
    int rc = exec_input_file_at(j, bi, &path, &local, err);
    if (!rc)
        rc = gguf_open(path, &base, err);
    if (!rc)
        rc = lora_view_gguf(adapter, &v, &ts, err);
    if (!rc)
        rc = lora_check(base, &v, &sum, err);
    if (!rc && sum.warning[0])
        step_note(j, sum.warning);
    free(ts);
    gguf_close(base);
    free(path);
    return rc;
}

int exec_peft_content(const struct exec_job *j, char content[STORE_DIGEST_BUF],
                      struct mf_err *err)
{
    static const char *const files[] = {"adapter_config.json", "adapter_model.safetensors"};
    char text[2 * STORE_DIGEST_BUF + 8], path[4096], hex[MF_SHA256_HEX_LEN + 1];
    uint8_t d[MF_SHA256_LEN];
    size_t n = 0;
    for (size_t i = 0; i < 2; i++) {
        char dg[STORE_DIGEST_BUF];
        uint64_t size;
        snprintf(path, sizeof path, "%s/%s", j->node->src.location, files[i]);
        int rc = store_digest_file(j->s, path, dg, &size, err);
        if (rc)
            return rc;
        n += (size_t)snprintf(text + n, sizeof text - n, "%s\n", dg);
    }
    int rc = mf_sha256_mem(text, n, d, err);
    if (!rc) {
        mf_sha256_hex(d, hex);
        snprintf(content, STORE_DIGEST_BUF, "sha256:%s", hex);
    }
    return rc;
}

int exec_convert_peft(const struct exec_job *j, struct exec_node *r, int *cached,
                      struct mf_err *err)
{
    const char *dir = j->node->src.location;
    size_t bi = base_input(j);
    char *base = NULL, *tmp = NULL;
    const json_t *local = NULL;
    struct lora_peft_info info;
    *cached = 0;
    if (!lora_peft_is_dir(dir))
        return mf_err_set(err, MF_EUNSUPPORTED,
                          "%s is a directory without adapter_config.json: an ADAPTER directory "
                          "must be a PEFT adapter (adapter_config.json + "
                          "adapter_model.safetensors)",
                          dir);
    if (bi == SIZE_MAX)
        return mf_err_set(err, MF_EINVAL, "converting %s needs the base model (FROM)", dir);
    int rc = exec_input_file_at(j, bi, &base, &local, err);
    if (!rc)
        rc = exec_tmp_path(j, "peft", &tmp, err);
    if (!rc)
        rc = lora_peft_convert_ex(dir, base, tmp, &info, err);
    if (!rc)
        rc = exec_local_unchanged(local, base, err);
    if (!rc)
        rc = store_put_file(j->s, tmp, NULL, r->digest, &r->size, err);
    if (tmp)
        unlink(tmp);
    free(tmp);
    free(base);
    if (rc)
        return rc;
    /* a warning (no alpha) is shown once, by the check step that follows */
    r->result = json_pack("{s:s, s:I, s:s, s:i, s:f, s:b, s:I, s:I}", "digest", r->digest, "size",
                          (json_int_t)r->size, "from", "peft", "rank", (int)info.rank, "alpha",
                          (double)info.alpha, "rslora", info.rslora, "pairs",
                          (json_int_t)info.n_pairs, "permuted", (json_int_t)info.n_permuted);
    return r->result ? 0 : mf_err_set(err, MF_ENOMEM, "out of memory");
}

void exec_adapter_facts(const struct gguf_file *adapter, json_t *result)
{
    struct lora_view v;
    struct lora_tensor *ts = NULL;
    struct lora_summary sum;
    struct mf_err ignored;
    if (!result || lora_view_gguf(adapter, &v, &ts, &ignored) != 0 || lora_describe(&v, &sum)) {
        free(ts);
        return; /* the check itself has refused it already, or out of memory: no facts */
    }
    json_object_set_new(result, "rank", json_integer(sum.rank_max));
    json_object_set_new(result, "alpha", sum.has_alpha ? json_real(sum.alpha) : json_null());
    json_object_set_new(result, "pairs", json_integer((json_int_t)sum.n_pairs));
    free(ts);
}

const char *exec_adapter_name(const char *source, size_t *len)
{
    static const char *const exts[] = {".gguf", ".safetensors"};
    size_t n = strlen(source);
    const char *base;

    while (n > 1 && source[n - 1] == '/') /* "./my.adapter/" is a PEFT directory */
        n--;
    base = source + n;
    while (base > source && base[-1] != '/')
        base--;
    n -= (size_t)(base - source);
    for (size_t i = 0; i < sizeof exts / sizeof exts[0]; i++) {
        size_t e = strlen(exts[i]);
        if (n > e && strncasecmp(base + n - e, exts[i], e) == 0) {
            n -= e;
            break;
        }
    }
    *len = n;
    return base;
}

int exec_merged_label(const struct exec_job *j, char *out, size_t cap)
{
    const struct plan_node *m = NULL;
    out[0] = '\0';
    for (size_t i = 0; i < j->plan->n_nodes && !m; i++)
        if (j->plan->nodes[i].op == PLAN_MERGE)
            m = &j->plan->nodes[i];
    if (!m || m->n_inputs < 2)
        return 0;
    json_t *arr = json_array();
    const json_t *scales = json_object_get(m->args, "scales");
    for (size_t k = 1; arr && k < m->n_inputs; k++) {
        const struct plan_node *c = &j->plan->nodes[m->inputs[k]];
        const json_t *rec = j->b->nodes[m->inputs[k]].result;
        const char *src = strncmp(c->name, "ADAPTER ", 8) == 0 ? c->name + 8 : c->name;
        size_t nlen;
        const char *name = exec_adapter_name(src, &nlen);
        json_t *a = json_pack("{s:s%, s:s, s:O?, s:O?, s:O?}", "name", name, nlen, "source",
                              src, "scale", json_array_get(scales, k - 1), "rank",
                              json_object_get(rec, "rank"), "alpha",
                              json_object_get(rec, "alpha"));
        if (!a || json_array_append_new(arr, a) != 0) {
            json_decref(arr);
            arr = NULL;
        }
    }
    char *text = arr ? json_dumps(arr, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    int ok = text && strlen(text) < cap;
    if (ok)
        snprintf(out, cap, "%s", text);
    free(text);
    json_decref(arr);
    return ok;
}
