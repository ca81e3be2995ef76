/*
 * fuzz_plan_config.c: libFuzzer target for the config document
 * (compiler/plan_config.c), above all the adapter names an ADAPTER without
 * --name gets from its source's file name.
 *
 * Parses the input as a Modelfile; when it parses, builds the config
 * document and aborts unless every adapter has a unique path
 * /adapters/<x>.gguf and, when named, a unique name, where a name that was
 * not given by --name is a plain file name (1..64 of [A-Za-z0-9._-], first a
 * letter or digit, not all digits) and is its own path's <x>. Then renders
 * the YAML. Seeds in corpus/plan_config/ cover the source forms.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "compiler/plan.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int plain(const char *s)
{
    static const char ok[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-";
    size_t n = strlen(s);
    return n > 0 && n <= 64 && strspn(s, ok) == n && strspn(s, "0123456789") < n &&
           !strchr("._-", s[0]);
}

/* The --name values, in ADAPTER order (merged ones included). */
static int given(const struct mf_modelfile *mf, const char *name)
{
    for (size_t i = 0; i < mf->n_instrs; i++)
        if (mf->instrs[i].kind == MF_INSTR_ADAPTER && mf->instrs[i].u.src.name &&
            strcmp(mf->instrs[i].u.src.name, name) == 0)
            return 1;
    return 0;
}

static void check(const struct mf_modelfile *mf, const json_t *adapters)
{
    size_t i, k;
    json_t *a, *b;
    json_array_foreach (adapters, i, a) {
        const char *name = json_string_value(json_object_get(a, "name"));
        const char *path = json_string_value(json_object_get(a, "path"));
        size_t n = path ? strlen(path) : 0;
        if (!path || n < 16 || strncmp(path, "/adapters/", 10) != 0 ||
            strcmp(path + n - 5, ".gguf") != 0)
            abort();
        if (name && !given(mf, name) &&
            (!plain(name) || strlen(name) != n - 15 || strncmp(path + 10, name, n - 15) != 0))
            abort();
        json_array_foreach (adapters, k, b) {
            const char *name2 = json_string_value(json_object_get(b, "name"));
            if (k < i && strcmp(json_string_value(json_object_get(b, "path")), path) == 0)
                abort();
            if (k < i && name && name2 && strcmp(name, name2) == 0)
                abort();
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct mf_modelfile *mf = NULL;
    struct mf_err err;
    static const struct mf_modelfile_opts opts = {.name = "fuzz"};
    if (mf_modelfile_parse((const char *)data, size, &opts, &mf, &err) == 0) {
        json_t *doc = plan_config_doc(mf);
        if (doc) {
            char *yaml = NULL;
            size_t len = 0;
            check(mf, json_object_get(doc, "adapters"));
            if (plan_config_yaml(doc, &yaml, &len, &err) == 0)
                free(yaml);
            json_decref(doc);
        }
    }
    mf_modelfile_free(mf);
    return 0;
}
