/*
 * fuzz_gguf.c: libFuzzer target for the GGUF reader (common/gguf.c) and the
 * inspect summary built on it (common/inspect.c).
 *
 * Opens the input from memory (the same validation path as gguf_open), then
 * walks every KV through the typed getters, every array element (nested
 * arrays recursively, strings by pointer+length), every tensor (first and
 * last data byte, so a bad bounds check reads outside the input and ASan
 * sees it) and builds the inspect JSON with the tensor table. Seeds in
 * corpus/gguf/ come from mkmodel and the writer.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <jansson.h>

#include "common/gguf.h"
#include "common/inspect.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile uint64_t sink; /* keeps the reads from being optimised away */

static void walk_array(const struct gguf_array *a)
{
    for (uint64_t i = 0; i < a->n; i++) {
        switch (a->type) {
        case GGUF_TYPE_STRING: {
            struct gguf_str s = gguf_arr_str(a, i);
            sink += s.len ? (uint8_t)s.p[s.len - 1] : 0;
            break;
        }
        case GGUF_TYPE_ARRAY:
            walk_array(gguf_arr_sub(a, i));
            break;
        case GGUF_TYPE_FLOAT32:
            sink += gguf_arr_f32(a, i) > 0.0f;
            break;
        case GGUF_TYPE_FLOAT64:
            sink += gguf_arr_f64(a, i) > 0.0;
            break;
        default:
            sink += gguf_arr_u64(a, i);
            break;
        }
    }
}

static void walk_kv(const struct gguf_file *gf, const struct gguf_kv *kv)
{
    uint64_t u;
    int64_t i;
    double d;
    float f;
    uint32_t u32;
    int32_t i32;
    int b;
    struct gguf_str s;
    const struct gguf_array *a;
    sink += gguf_kv_u64(gf, kv, &u, NULL) == 0 ? u : 0;
    sink += gguf_kv_i64(gf, kv, &i, NULL) == 0 ? (uint64_t)i : 0;
    sink += gguf_kv_f64(gf, kv, &d, NULL) == 0;
    sink += gguf_get_f32(gf, kv->key, &f, NULL) == 0;
    sink += gguf_get_u32(gf, kv->key, &u32, NULL) == 0 ? u32 : 0;
    sink += gguf_get_i32(gf, kv->key, &i32, NULL) == 0 ? (uint64_t)i32 : 0;
    sink += gguf_get_bool(gf, kv->key, &b, NULL) == 0 ? (uint64_t)b : 0;
    if (gguf_get_str(gf, kv->key, &s, NULL) == 0) {
        sink += s.len ? (uint8_t)s.p[s.len - 1] : 0;
        free(gguf_str_dup(s));
    }
    if (gguf_get_arr(gf, kv->key, &a, NULL) == 0)
        walk_array(a);
    sink += gguf_find_kv(gf, kv->key) == kv;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct gguf_file *gf;
    struct mf_err err;
    if (gguf_open_mem(data, size, "fuzz.gguf", &gf, &err) != 0)
        return 0;
    for (uint64_t k = 0; k < gguf_n_kv(gf); k++)
        walk_kv(gf, gguf_kv_at(gf, k));
    for (uint64_t k = 0; k < gguf_n_tensors(gf); k++) {
        const struct gguf_tensor *t = gguf_tensor_at(gf, k);
        const uint8_t *p = t->data;
        if (t->n_bytes)
            sink += p[0] + p[t->n_bytes - 1];
        sink += gguf_find_tensor(gf, t->name) == t;
    }
    json_t *summary = mf_inspect_gguf(gf, 1, &err);
    json_decref(summary);
    gguf_close(gf);
    return 0;
}
