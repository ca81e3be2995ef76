/*
 * draft_image.c: the DRAFT of a built image, for `mfc inspect IMAGE`.
 *
 * An image built from a Modelfile with DRAFT holds the draft model as
 * /models/draft.gguf in a layer of its own (an uncompressed tar, so the
 * GGUF is a byte range of the blob, found by run_model_resolve) and names it
 * in /etc/mfc/model.yaml under draft:, with the speculative-decoding
 * PARAMETERs under params:. This reads the draft's GGUF header (the build
 * checked it against the model) and those settings.
 *
 * Owns nothing after it returns; maps the draft's range read-only while it
 * reads the header.
 */
#include "cli/run.h"

#include <stdlib.h>
#include <string.h>

#include "common/gguf.h"
#include "common/inspect.h"
#include "fetch/source_ref.h"

static const char *const spec_params[] = {"speculative",  "draft_max",    "draft_min",
                                          "draft_p_min",  "lookup_ngram", "lookup_ngram_min"};

/* The model.yaml params that steer speculation, as the YAML has them. */
static json_t *settings(const struct run_model *m)
{
    struct mf_err ignored;
    json_t *cfg = m->config_text
                      ? source_ref_yaml_json(m->config_text, strlen(m->config_text), &ignored)
                      : NULL;
    json_t *p = json_object_get(cfg, "params"), *out = json_object();
    for (size_t i = 0; out && i < sizeof spec_params / sizeof spec_params[0]; i++) {
        json_t *v = json_object_get(p, spec_params[i]);
        if (v)
            json_object_set(out, spec_params[i], v);
    }
    json_decref(cfg);
    return out;
}

int draft_image_describe(const char *store_root, const char *ref, json_t **out,
                         struct mf_err *err)
{
    struct run_model m;
    struct gguf_file *gf = NULL;
    json_t *sum = NULL;
    int rc;

    *out = NULL;
    memset(&m, 0, sizeof m);
    rc = run_model_resolve(store_root, ref, &m, err);
    if (rc || !m.draft.path) {
        run_model_free(&m);
        return rc;
    }
    rc = gguf_open_range(m.draft.path, m.draft.offset, m.draft.size, &gf, err);
    if (!rc && !(sum = mf_inspect_gguf(gf, 0, err)))
        rc = err->code ? err->code : MF_ENOMEM;
    if (!rc) {
        *out = json_pack("{s:s, s:O?, s:O?, s:O?, s:O?, s:I, s:o}", "path", "/models/draft.gguf",
                         "architecture", json_object_get(sum, "architecture"), "parameters",
                         json_object_get(sum, "parameters"), "quantization",
                         json_object_get(json_object_get(sum, "file_type"), "name"), "name",
                         json_object_get(sum, "name"), "size", (json_int_t)gguf_file_size(gf),
                         "settings", settings(&m));
        rc = *out ? 0 : mf_err_set(err, MF_ENOMEM, "out of memory");
    }
    json_decref(sum);
    gguf_close(gf);
    run_model_free(&m);
    return rc;
}
