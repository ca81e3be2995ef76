/*
 * fuzz_schema.c: libFuzzer target for runtime/grammar's JSON Schema and
 * regex compilers.
 *
 * The input is taken as JSON; a schema (any JSON value) is compiled to GBNF,
 * which must then parse: a schema the compiler accepts and the grammar
 * parser refuses is a bug (abort). The input is also offered as a `pattern`
 * through the regex compiler, whose output must parse inside a grammar too.
 * Errors are expected; crashes, leaks and sanitizer reports are not.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "runtime/grammar/gram.h"

static void must_parse(const struct mf_buf *b)
{
    struct gram *g = NULL;
    struct mf_err err;
    int rc = gram_new(b->data, b->len, NULL, &g, &err);
    if (rc && rc != MF_ENOMEM)
        abort();
    gram_unref(g);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct mf_err err;
    struct mf_buf b;
    json_t *s = json_loadb((const char *)data, size, JSON_DECODE_ANY, NULL);
    if (s) {
        mf_buf_init(&b, 1u << 22);
        if (gram_schema_gbnf(s, "schema", &b, &err) == 0)
            must_parse(&b);
        mf_buf_free(&b);
        json_decref(s);
    }
    char *re = malloc(size + 1);
    if (!re)
        return 0;
    memcpy(re, data, size);
    re[size] = 0;
    mf_buf_init(&b, 1u << 22);
    if (mf_buf_puts(&b, "root ::= \"\\\"\" p \"\\\"\"\n", &err) == 0 &&
        gram_regex_gbnf(re, "p", &b, &err) == 0 && gram_json_shared(&b, &err) == 0)
        must_parse(&b);
    mf_buf_free(&b);
    free(re);
    return 0;
}
