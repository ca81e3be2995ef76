/*
 * test_tokenizer.c: unit tests for runtime/tokenizer (placeholder while the
 * suite is written).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "runtime/tokenizer.h"

static void test_desc_init(void **state)
{
    struct tok_desc d;
    tok_desc_init(&d);
    assert_int_equal(d.special[TOK_ID_BOS], -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_desc_init)};
    return cmocka_run_group_tests_name("tokenizer", tests, NULL, NULL);
}
