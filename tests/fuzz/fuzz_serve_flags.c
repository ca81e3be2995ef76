/*
 * fuzz_serve_flags.c: libFuzzer target for mfc-serve's command line
 * (serve_config_parse in runtime/serve/serve_config.c), above all
 * --adapter NAME=PATH[@OFFSET:SIZE], which `mfc serve` uses to point at an
 * adapter lying inside an image layer.
 *
 * The input's first line is one --adapter value, checked against an oracle
 * written here: NAME is what precedes the first '=', and a trailing
 * "@DIGITS:DIGITS" (numbers that fit in 64 bits, a non-empty path before it)
 * is the range, otherwise the whole rest is the path. The other lines are a
 * whole argv, parsed first with no environment; on success every adapter must
 * have a name and a path. --config is skipped (it would read a file).
 * corpus/serve_flags/getopt-group is the regression input for a second parse
 * reading the first's freed argv (getopt's position inside "-hqh").
 */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "runtime/serve/serve.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *no_env(const char *name)
{
    (void)name;
    return NULL;
}

static int all_digits(const char *s, size_t n)
{
    return n > 0 && strspn(s, "0123456789") >= n;
}

/* The oracle for the range suffix of v (the part after NAME=). */
static int expect_range(const char *v, size_t *path_len, uint64_t *off, uint64_t *sz)
{
    const char *at = strrchr(v, '@');
    if (!at || at == v)
        return 0;
    const char *colon = strchr(at + 1, ':');
    if (!colon || !all_digits(at + 1, (size_t)(colon - at - 1)) ||
        (size_t)(colon - at - 1) != strspn(at + 1, "0123456789") ||
        !all_digits(colon + 1, strlen(colon + 1)))
        return 0;
    errno = 0;
    unsigned long long a = strtoull(at + 1, NULL, 10), b = strtoull(colon + 1, NULL, 10);
    if (errno)
        return 0;
    *path_len = (size_t)(at - v);
    *off = a;
    *sz = b;
    return 1;
}

static void check_adapter_value(const char *v)
{
    size_t vl = strlen(v);
    char *arg = malloc(vl + 11);
    if (!arg)
        return;
    memcpy(arg, "--adapter=", 10);
    memcpy(arg + 10, v, vl + 1);
    char *argv[] = {"mfc-serve", "--model", "m.gguf", arg, NULL};
    struct serve_config c;
    struct mf_err err;
    int help = 0;
    serve_config_init(&c);
    int rc = serve_config_parse(&c, 4, argv, no_env, &help, &err);
    const char *eq = strchr(v, '=');
    if (!eq || eq == v || !eq[1]) {
        if (rc != MF_EUSAGE)
            abort();
    } else if (rc == 0) {
        size_t nl = (size_t)(eq - v), pl;
        uint64_t off = 0, sz = 0;
        if (!expect_range(eq + 1, &pl, &off, &sz))
            pl = strlen(eq + 1);
        const struct serve_adapter_cfg *a = &c.adapters[0];
        if (c.n_adapters != 1 || !a->name || strlen(a->name) != nl ||
            memcmp(a->name, v, nl) != 0 || !a->path || strlen(a->path) != pl ||
            memcmp(a->path, eq + 1, pl) != 0 || a->offset != off || a->size != sz)
            abort();
    } else if (rc != MF_ENOMEM) {
        abort(); /* a well-formed NAME=PATH is never refused */
    }
    serve_config_free(&c);
    free(arg);
}

static void check_argv(char *text)
{
    char *argv[64];
    int argc = 0;
    argv[argc++] = "mfc-serve";
    for (char *p = text; p && argc < 63;) {
        char *nl = strchr(p, '\n');
        if (nl)
            *nl = '\0';
        if (!strncmp(p, "--config", 8) || !strncmp(p, "--conf", 6))
            return; /* would load a file (abbreviations are taken by getopt) */
        argv[argc++] = p;
        p = nl ? nl + 1 : NULL;
    }
    argv[argc] = NULL;
    struct serve_config c;
    struct mf_err err;
    int help = 0;
    serve_config_init(&c);
    if (serve_config_parse(&c, argc, argv, no_env, &help, &err) == 0 && !help) {
        if (!c.model_path || c.n_adapters < 0 || c.n_adapters > SERVE_MAX_ADAPTERS)
            abort();
        for (int i = 0; i < c.n_adapters; i++)
            if (!c.adapters[i].name || !c.adapters[i].name[0] || !c.adapters[i].path ||
                !c.adapters[i].path[0])
                abort();
    }
    serve_config_free(&c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 4096 || memchr(data, '\0', size))
        return 0;
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    char *nl = strchr(text, '\n');
    if (nl)
        *nl = '\0';
    if (nl)
        check_argv(nl + 1); /* first: what it leaves in getopt must not matter */
    check_adapter_value(text);
    free(text);
    return 0;
}
