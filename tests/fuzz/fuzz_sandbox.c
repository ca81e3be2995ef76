/*
 * fuzz_sandbox.c: libFuzzer target for what the RUN sandbox does with
 * untrusted bytes: sandbox_tail_lines over a command's raw output (any
 * bytes, any line count and buffer size), sandbox_argv over environment
 * entries, bind paths and a command made from the input (never executed),
 * the secret mask over a command's output (a secret cut from the input
 * never survives in it, and nothing else changes length), and the names
 * mfc build --allow takes.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "exec/exec_allow.h"
#include "exec/sandbox.h"
#include "exec/secret_mask.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    size_t lines = data[0] % 12, cap = 1 + data[1] % 64;
    char out[SANDBOX_TAIL_MAX + 64];
    sandbox_tail_lines((const char *)data + 2, size - 2, lines, out, cap);
    if (strlen(out) >= cap)
        abort();
    sandbox_tail_lines((const char *)data + 2, size - 2, SANDBOX_TAIL_LINES, out,
                       SANDBOX_TAIL_MAX);

    /* the rest as NUL-separated strings: env entries, then bind pairs, then argv */
    char *copy = malloc(size - 1);
    if (!copy)
        return 0;
    memcpy(copy, data + 2, size - 2);
    copy[size - 2] = '\0';
    const char *strs[64];
    size_t n = 0;
    for (char *p = copy; n < 64 && p < copy + size - 2; p += strlen(p) + 1)
        strs[n++] = p;
    size_t ne = n / 3, nb = (n - ne) / 4;
    struct sandbox_bind binds[16];
    for (size_t i = 0; i < nb && i < 16; i++)
        binds[i] = (struct sandbox_bind){strs[ne + 2 * i], strs[ne + 2 * i + 1], (int)(i & 1),
                                         (int)(i % 3 == 2)};
    size_t used = ne + 2 * (nb < 16 ? nb : 16);
    struct sandbox_spec sp = {.argv = strs + used, .argc = n - used, .env = strs, .n_env = ne,
                              .binds = binds, .n_binds = nb < 16 ? nb : 16,
                              .share_net = data[0] & 1, .root = (data[1] >> 7) & 1};
    char **argv = NULL;
    size_t argc = 0;
    struct mf_err err;
    if (sandbox_argv(&sp, NULL, &argv, &argc, &err) == 0) {
        if (!argv || argv[argc] != NULL)
            abort();
        sandbox_argv_free(argv);
    }
    free(copy);

    /* the first k bytes a secret, the rest a command's output */
    size_t k = 4 + data[1] % 40;
    struct secret_mask *m;
    if (size - 2 > k && secret_mask_new(&m, &err) == 0) {
        const char *sec = (const char *)data + 2;
        size_t n = size - 2 - k;
        char *out = malloc(n + 1);
        if (out && secret_mask_add(m, sec, k, &err) == 0) {
            memcpy(out, data + 2 + k, n);
            long r = secret_mask_apply(m, out, n);
            if (r < 0 || (size_t)r > n)
                abort();
            if (!memchr(sec, '*', k) && n >= k && memmem(out, n, sec, k))
                abort(); /* the whole secret survived */
        }
        free(out);
        secret_mask_free(m);
    }
    unsigned bits = 0;
    char name[32];
    size_t nl = size - 2 < sizeof name - 1 ? size - 2 : sizeof name - 1;
    memcpy(name, data + 2, nl);
    name[nl] = '\0';
    if (exec_allow_parse(name, &bits, &err) == 0 && strcmp(name, "network.host") != 0)
        abort();
    return 0;
}
