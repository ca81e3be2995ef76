/*
 * fuzz_run_ndjson.c: libFuzzer target for the NDJSON stream parser of
 * `mfc run` (cli/run_client.c), fed mfc-serve's /api/chat answer in
 * pieces cut where the first byte says. The text handed on must add up to
 * the reply it keeps, and a failure must name its cause.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cli/run.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void count(void *arg, const char *text, size_t n)
{
    if (n == 0 || !text)
        abort();
    *(size_t *)arg += n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    size_t piece = (size_t)data[0] % 17 + 1, seen = 0;
    data++, size--;
    struct run_ndjson p;
    run_ndjson_init(&p, count, &seen);
    struct mf_err err = {0};
    int rc = 0;
    for (size_t at = 0; at < size && rc == 0; at += piece) {
        size_t k = size - at < piece ? size - at : piece;
        rc = run_ndjson_feed(&p, (const char *)data + at, k, &err);
    }
    if (rc < 0 && !err.msg[0])
        abort();
    if (seen != p.reply.len)
        abort();
    run_ndjson_free(&p);
    return 0;
}
