/*
 * fuzz_loadgen.c: libFuzzer target for bench/loadgen_sse.c, the load
 * generator's response parser. The first byte picks how the rest is fed
 * (whole, or in pieces of 1-16 bytes); the rest is a server's response.
 * Every event's data also goes through lg_json_scan. The parser must never
 * read out of bounds, leak, or report LG_MORE after LG_DONE/LG_ERROR, and
 * its why must be a sentence when it says LG_ERROR. Seeds in corpus/loadgen/.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "bench/loadgen_sse.c" /* one translation unit: the runner builds one file */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int on_event(void *user, const char *d, size_t n)
{
    struct lg_event ev;
    size_t *count = user;
    lg_json_scan(d, n, &ev);
    (*count)++;
    return *count > 1000; /* a callback may stop the response */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct lg_resp r;
    size_t count = 0, step, i = 1;
    int rc = LG_MORE;

    if (size < 1)
        return 0;
    step = data[0] & 15 ? (size_t)(data[0] & 15) : size;
    lg_resp_init(&r);
    while (i < size && rc == LG_MORE) {
        size_t k = size - i < step ? size - i : step;
        rc = lg_resp_feed(&r, (const char *)data + i, k, on_event, &count);
        i += k;
    }
    if (rc == LG_MORE)
        rc = lg_resp_eof(&r, on_event, &count);
    if (rc == LG_ERROR && strlen(r.why) < 10)
        __builtin_trap();
    lg_resp_free(&r);
    /* the whole input as one event's JSON too */
    struct lg_event ev;
    lg_json_scan((const char *)data, size, &ev);
    return 0;
}
