/*
 * fuzz_run_tar.c: libFuzzer target for the tar reader of `mfc serve IMAGE`
 * (cli/run_tar.c), which finds /models/model.gguf and the adapters in
 * layer blobs. Every entry it reports must lie where the input says:
 * a header inside the input, its data starting on a 512-byte record, a
 * NUL-terminated name without a leading "/" or "./".
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cli/run.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct mem {
    const uint8_t *p;
    size_t n, at;
};

static long mem_read(void *arg, void *buf, size_t n)
{
    struct mem *m = arg;
    size_t k = m->n - m->at < n ? m->n - m->at : n;
    memcpy(buf, m->p + m->at, k);
    m->at += k;
    return (long)k;
}

static int mem_skip(void *arg, uint64_t n)
{
    struct mem *m = arg;
    if (n > m->n - m->at)
        return -1;
    m->at += (size_t)n;
    return 0;
}

static int on_entry(void *arg, const char *name, uint64_t offset, uint64_t size,
                    struct mf_err *err)
{
    const struct mem *m = arg;
    (void)size, (void)err;
    if (offset > m->n || offset % 512 != 0 || offset != m->at)
        abort();
    if (strnlen(name, RUN_TAR_NAME_MAX) >= RUN_TAR_NAME_MAX || name[0] == '/' ||
        (name[0] == '.' && name[1] == '/'))
        abort();
    return strcmp(name, "stop") == 0 ? 1 : 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct mem m = {data, size, 0};
    struct run_tar_io io = {mem_read, mem_skip, &m};
    struct mf_err err = {0};
    int rc = run_tar_walk(&io, "fuzz", on_entry, &m, &err);
    if (rc < 0 && !err.msg[0])
        abort(); /* every failure names its cause */
    if (rc > 1)
        abort();
    return 0;
}
