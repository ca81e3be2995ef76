/*
 * fuzz_serve_head.c: libFuzzer target for mfc-serve's front door
 * (runtime/serve/serve_head.c): any bytes as a request head, parsed from an
 * exactly sized copy (so ASan sees a read past the end), with limits taken
 * from the first bytes; a good head must end inside the input, a refusal
 * must carry a 4xx/5xx status, a code and a message, and the door's error
 * response for it must be whole JSON behind a status line.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "runtime/serve/serve_door.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 3)
        return 0;
    struct serve_head_limits lim = {
        .max_head = 64 + (size_t)data[0] * 128, /* 64 .. 32704 */
        .max_target = 1 + (size_t)data[1] * 32,
        .max_body = (size_t)data[2] * 1000,
    };
    size_t n = size - 3;
    char *buf = malloc(n ? n : 1);
    if (!buf)
        return 0;
    memcpy(buf, data + 3, n);
    struct serve_head h;
    int r = serve_head_parse(buf, n, &lim, &h);
    if (r == SERVE_HEAD_MORE) {
        if (n >= lim.max_head)
            abort(); /* past the limit it must decide */
    } else if (r != 0) {
        abort();
    } else if (!h.status) {
        if (h.len == 0 || h.len > n || h.len > lim.max_head)
            abort();
    } else {
        if (h.status < 400 || h.status > 599 || !h.code || !h.msg[0])
            abort();
        char out[1024];
        size_t k = serve_door_error(h.status, h.code, h.msg, h.ollama, 0, out, sizeof out);
        const char *body = k ? strstr(out, "\r\n\r\n") : NULL;
        json_error_t je;
        json_t *v = body ? json_loads(body + 4, 0, &je) : NULL;
        if (!v)
            abort();
        json_decref(v);
    }
    if (strlen(h.method) >= sizeof h.method || strlen(h.path) >= sizeof h.path)
        abort();
    free(buf);
    return 0;
}
