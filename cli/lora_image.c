/*
 * lora_image.c: the adapters of a built image, for `mfc inspect IMAGE`.
 *
 * An image holds its unmerged adapters as /adapters/<name>.gguf inside
 * uncompressed tar layers (byte ranges of the blobs, found by
 * run_model_resolve) and lists them in /etc/mfc/model.yaml with name, scale
 * and path; merged adapters are gone from the files but the build records
 * them in the image label "dev.mfc.adapters.merged" (exec_lora.c). This
 * reads both: each unmerged adapter's GGUF header gives rank, alpha, pairs
 * and targets (lora_describe; nothing is checked against the base here, the
 * build did that), the YAML gives name and scale.
 *
 * Owns nothing after it returns; maps each adapter's blob read-only while it
 * reads the header. lora_image_base_open maps an image's weights the same
 * way, for `mfc lora check --base IMAGE`.
 */
#include "convert/lora.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/json.h"
#include "cli/run.h"
#include "fetch/source_ref.h"

/* Opens the GGUF at rf's byte range of its file into b (mapped in place). */
static int map_range(const struct run_file *rf, struct lora_image_base *b, struct mf_err *err)
{
    memset(b, 0, sizeof *b);
    return gguf_open_range(rf->path, rf->offset, rf->size, &b->gf, err);
}

void lora_image_base_close(struct lora_image_base *b)
{
    gguf_close(b->gf);
    memset(b, 0, sizeof *b);
}

int lora_image_base_open(const char *store_root, const char *ref, struct lora_image_base *b,
                         struct mf_err *err)
{
    struct run_model m;
    memset(&m, 0, sizeof m);
    memset(b, 0, sizeof *b);
    int rc = run_model_resolve(store_root, ref, &m, err);
    if (!rc)
        rc = map_range(&m.weights, b, err);
    run_model_free(&m);
    return rc;
}

/* Describes the adapter GGUF of rf into entry. */
static int describe_range(const struct run_file *rf, json_t *entry, struct mf_err *err)
{
    struct lora_image_base b;
    struct lora_tensor *ts = NULL;
    struct lora_view v;
    struct lora_summary sum;
    int rc = map_range(rf, &b, err);
    if (!rc)
        rc = lora_view_gguf(b.gf, &v, &ts, err);
    if (!rc && lora_describe(&v, &sum) != 0)
        rc = mf_err_set(err, MF_ENOMEM, "out of memory");
    if (!rc) {
        json_object_set_new(entry, "rank", json_integer(sum.rank_max));
        if (sum.rank_min != sum.rank_max)
            json_object_set_new(entry, "rank_min", json_integer(sum.rank_min));
        json_object_set_new(entry, "alpha", sum.has_alpha ? json_real(sum.alpha) : json_null());
        json_object_set_new(entry, "pairs", json_integer((json_int_t)sum.n_pairs));
        json_object_set_new(entry, "targets", json_string(sum.targets));
        json_object_set_new(entry, "architecture", json_string(sum.arch));
    }
    free(ts);
    lora_image_base_close(&b);
    return rc;
}

/* model.yaml's entry for adapter name (path /adapters/<name>.gguf), or NULL. */
static const json_t *yaml_entry(const json_t *cfg, const char *name)
{
    size_t i;
    const json_t *a;
    char path[512];
    snprintf(path, sizeof path, "/adapters/%s.gguf", name);
    json_array_foreach (json_object_get(cfg, "adapters"), i, a)
        if (json_is_string(json_object_get(a, "path")) &&
            strcmp(json_string_value(json_object_get(a, "path")), path) == 0)
            return a;
    return NULL;
}

/* A YAML scalar as a number when it reads as one (the YAML reader gives strings). */
static json_t *number_or_string(const json_t *v)
{
    if (!json_is_string(v))
        return v ? json_deep_copy(v) : json_real(1.0);
    char *end;
    double d = strtod(json_string_value(v), &end);
    return *end == '\0' && end != json_string_value(v) ? json_real(d) : json_deep_copy(v);
}

static int unmerged(const struct run_model *m, json_t *list, struct mf_err *err)
{
    json_t *cfg = NULL;
    if (m->config_text) {
        cfg = source_ref_yaml_json(m->config_text, strlen(m->config_text), err);
        if (!cfg)
            return err->code ? err->code : MF_EFORMAT;
    }
    int rc = 0;
    for (size_t i = 0; !rc && i < m->n_adapters; i++) {
        const json_t *y = yaml_entry(cfg, m->adapters[i].name);
        json_t *e = json_pack("{s:s, s:s++, s:o, s:b}", "name",
                              json_string_value(json_object_get(y, "name"))
                                  ? json_string_value(json_object_get(y, "name"))
                                  : m->adapters[i].name,
                              "path", "/adapters/", m->adapters[i].name, ".gguf", "scale",
                              number_or_string(json_object_get(y, "scale")), "merged", 0);
        if (!e || json_array_append_new(list, e) != 0)
            rc = mf_err_set(err, MF_ENOMEM, "out of memory");
        else
            rc = describe_range(&m->adapters[i].file, e, err);
    }
    json_decref(cfg);
    return rc;
}

/* The merged ones, from the image config's label. */
static void merged(const json_t *inspect, json_t *list)
{
    const json_t *labels =
        json_object_get(json_object_get(json_object_get(inspect, "config"), "config"), "Labels");
    const char *text = json_string_value(json_object_get(labels, "dev.mfc.adapters.merged"));
    json_t *arr = text ? json_loads(text, 0, NULL) : NULL;
    size_t i;
    json_t *a;
    json_array_foreach (arr, i, a) {
        if (!json_is_object(a))
            continue;
        json_object_set_new(a, "merged", json_true());
        json_array_append(list, a);
    }
    json_decref(arr);
}

int lora_image_adapters(const char *store_root, const char *ref, const json_t *inspect,
                        json_t **out, struct mf_err *err)
{
    struct run_model m;
    *out = NULL;
    memset(&m, 0, sizeof m);
    int rc = run_model_resolve(store_root, ref, &m, err);
    json_t *list = rc ? NULL : json_array();
    if (!rc && !list)
        rc = mf_err_set(err, MF_ENOMEM, "out of memory");
    if (!rc)
        rc = unmerged(&m, list, err);
    if (!rc)
        merged(inspect, list);
    run_model_free(&m);
    if (rc) {
        json_decref(list);
        return rc;
    }
    *out = list;
    return 0;
}
