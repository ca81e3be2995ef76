/*
 * test_exec_allow.c: entitlements (exec/exec_allow.h): --allow names, what
 * a RUN node asks for, and the check of a plan, which names the Modelfile
 * line, the flag and the --allow that grants it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "exec/exec_allow.h"

static void test_parse(void **state)
{
    (void)state;
    unsigned bits = 0;
    struct mf_err err;
    assert_int_equal(exec_allow_parse("network.host", &bits, &err), 0);
    assert_int_equal(bits, EXEC_ALLOW_NETWORK_HOST);
    assert_int_equal(exec_allow_parse("security.insecure", &bits, &err), MF_EUSAGE);
    assert_non_null(strstr(err.msg, "security.insecure"));
    assert_non_null(strstr(err.msg, "network.host"));
    assert_int_equal(exec_allow_parse("", &bits, &err), MF_EUSAGE);
    assert_int_equal(bits, EXEC_ALLOW_NETWORK_HOST);
}

static void test_check(void **state)
{
    (void)state;
    struct plan_node nodes[3];
    memset(nodes, 0, sizeof nodes);
    nodes[0].op = PLAN_SOURCE;
    nodes[0].args = json_pack("{s:s}", "network", "host"); /* not a RUN: asks for nothing */
    nodes[1].op = PLAN_RUN;
    nodes[1].line = 2;
    nodes[1].instr = (char *)"RUN --network=none true";
    nodes[1].args = json_pack("{s:s}", "network", "none");
    nodes[2].op = PLAN_RUN;
    nodes[2].line = 3;
    nodes[2].instr = (char *)"RUN --network=host curl -o /out/x https://example.com/x";
    nodes[2].args = json_pack("{s:s}", "network", "host");
    struct plan p = {.nodes = nodes, .n_nodes = 3, .modelfile = (char *)"Modelfile"};
    struct mf_err err;
    const char *flag = NULL;
    assert_int_equal(exec_allow_needed(&nodes[0], &flag), 0);
    assert_int_equal(exec_allow_needed(&nodes[1], &flag), 0);
    assert_int_equal(exec_allow_needed(&nodes[2], &flag), EXEC_ALLOW_NETWORK_HOST);
    assert_string_equal(flag, "--network=host");
    assert_int_equal(exec_allow_check(&p, 0, &err), MF_EINVAL);
    assert_non_null(strstr(err.msg, "Modelfile:3: RUN --network=host curl"));
    assert_non_null(strstr(err.msg, "--allow network.host"));
    assert_int_equal(exec_allow_check(&p, EXEC_ALLOW_NETWORK_HOST, &err), 0);
    p.n_nodes = 2;
    assert_int_equal(exec_allow_check(&p, 0, &err), 0);
    for (int i = 0; i < 3; i++)
        json_decref(nodes[i].args);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse),
        cmocka_unit_test(test_check),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
