/*
 * fuzz_safetensors.c: libFuzzer target for the safetensors reader
 * (common/safetensors.c).
 *
 * Opens the input from memory (the same validation path as st_open), then
 * touches the first and last byte of every tensor (so a bad bounds check
 * reads outside the input and ASan sees it), converts float tensors with
 * st_read_f32 in small windows, and looks every name and one metadata key
 * up again. Seeds in corpus/safetensors/ are tiny PEFT-like files.
 */
#include <stddef.h>
#include <stdint.h>

#include "common/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile uint64_t sink; /* keeps the reads from being optimised away */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct st_file *f;
    struct mf_err err;
    if (st_open_mem(data, size, "fuzz.safetensors", &f, &err) != 0)
        return 0;
    for (size_t i = 0; i < st_count(f); i++) {
        const struct st_tensor *t = st_at(f, i);
        const uint8_t *p = st_data(f, t);
        if (t->size)
            sink += p[0] + p[t->size - 1];
        sink += st_find(f, t->name) == t;
        float out[16];
        size_t n = t->n_elements < 16 ? (size_t)t->n_elements : 16;
        if (st_read_f32(f, t, t->n_elements - n, n, out, &err) == 0 && n)
            sink += out[n - 1] > 0.0f;
        sink += st_read_f32(f, t, t->n_elements, 1, out, &err) == 0; /* must fail */
    }
    const char *m = st_metadata(f, "format");
    sink += m ? (uint8_t)m[0] : 0;
    st_close(f);
    return 0;
}
