/*
 * fuzz_modelfile.c: libFuzzer target for the Modelfile front end
 * (compiler/modelfile*.c).
 *
 * Parses the input (with one build-arg, so ARG expansion runs both ways),
 * renders the diagnostics and the JSON, and when the file parses: formats
 * it, parses the output again and aborts if the instructions differ
 * (parse(fmt(x)) == parse(x)), then formats that parse and aborts unless
 * the text is the same (fmt is idempotent). mf_modelfile_format checks the
 * first property itself; this target checks it independently. Seeds in
 * corpus/modelfile/ cover every instruction, quote form and encoding.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "compiler/modelfile.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const struct mf_build_arg build_args[] = {{"MODEL", "llama3"}, {"CTX", "4096"}};
static const struct mf_modelfile_opts opts = {
    .name = "fuzz", .build_args = build_args, .n_build_args = 2};

static json_t *meaning(const struct mf_modelfile *mf)
{
    return mf_modelfile_to_json(mf, MF_MODELFILE_JSON_NO_POS | MF_MODELFILE_JSON_NO_DIAGS);
}

/* fmt(x), parse again: same meaning; fmt again: same text. */
static void round_trip(const struct mf_modelfile *mf)
{
    struct mf_err err;
    struct mf_buf once, twice;
    struct mf_modelfile *again = NULL;
    mf_buf_init(&once, (size_t)1 << 27);
    mf_buf_init(&twice, (size_t)1 << 27);
    if (mf_modelfile_format(mf, &opts, &once, &err) != 0)
        abort(); /* every file that parses must format */
    if (mf_modelfile_parse(once.data ? once.data : "", once.len, &opts, &again, &err) != 0)
        abort();
    json_t *a = meaning(mf), *b = meaning(again);
    if (!a || !b || !json_equal(a, b))
        abort();
    if (mf_modelfile_format(again, &opts, &twice, &err) != 0 || twice.len != once.len ||
        memcmp(twice.data, once.data, once.len) != 0)
        abort();
    json_decref(a);
    json_decref(b);
    mf_modelfile_free(again);
    mf_buf_free(&once);
    mf_buf_free(&twice);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct mf_modelfile *mf = NULL;
    struct mf_err err;
    struct mf_buf out;
    int rc = mf_modelfile_parse((const char *)data, size, &opts, &mf, &err);
    if (!mf)
        return 0;
    mf_buf_init(&out, (size_t)1 << 27);
    mf_modelfile_render_diags(mf, 1, &out, &err);
    mf_buf_free(&out);
    json_decref(mf_modelfile_to_json(mf, 0));
    if (rc == 0)
        round_trip(mf);
    mf_modelfile_free(mf);
    return 0;
}
