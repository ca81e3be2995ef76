/*
 * test_quant.c: unit tests for common/quant (placeholder, filled next).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "common/quant.h"

static void test_placeholder(void **state)
{
    assert_true(quant_can_quantize(GGML_TYPE_Q4_K));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_placeholder),
    };
    return cmocka_run_group_tests_name("quant", tests, NULL, NULL);
}
