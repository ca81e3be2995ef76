/*
 * test_plan.c: unit tests for the build planner (compiler/plan*.c): DAG shape
 * for representative Modelfiles, cache keys that change exactly when an
 * input changes, the config document (adapters named after their files),
 * and text/json/dot output. Execution is
 * tested end to end in tests/cli/build.bats.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/file.h"
#include "compiler/plan.h"
#include "config.h"
#include "tests/unit/tmpdir.h"

#define D1 "sha256:1111111111111111111111111111111111111111111111111111111111111111"
#define D2 "sha256:2222222222222222222222222222222222222222222222222222222222222222"

struct fixture {
    char dir[64];        /* holds base.gguf and a.gguf (resolution only stats them) */
    struct fetch_opts o; /* base_dir = dir */
};

static int setup(void **state)
{
    struct fixture *fx = calloc(1, sizeof *fx);
    char path[128];
    if (test_tmpdir_make(fx->dir, sizeof fx->dir, "plan") != 0)
        return -1;
    snprintf(path, sizeof path, "%s/base.gguf", fx->dir);
    mf_file_write_atomic(path, "x", 1, NULL);
    snprintf(path, sizeof path, "%s/a.gguf", fx->dir);
    mf_file_write_atomic(path, "y", 1, NULL);
    fx->o.base_dir = fx->dir;
    *state = fx;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *fx = *state;
    test_tmpdir_remove(fx->dir);
    free(fx);
    return 0;
}

static struct plan *plan_of(struct fixture *fx, const char *text)
{
    struct mf_modelfile *mf = NULL;
    struct plan *p = NULL;
    struct mf_err err;
    assert_int_equal(mf_modelfile_parse(text, strlen(text), NULL, &mf, &err), 0);
    struct plan_opts po = {.modelfile = "Modelfile", .fo = &fx->o};
    int rc = plan_build(mf, &po, &p, &err);
    if (rc)
        fail_msg("plan_build: %s", err.msg);
    mf_modelfile_free(mf);
    return p;
}

static size_t find(const struct plan *p, enum plan_op op, enum plan_role role)
{
    for (size_t i = 0; i < p->n_nodes; i++)
        if (p->nodes[i].op == op && p->nodes[i].role == role)
            return i;
    fail_msg("no %s node", plan_op_name(op));
    return 0;
}

/* Inputs come first (topological ids), the image is last, and nodes keep their lines. */
static void test_shape_base_adapter(void **state)
{
    struct plan *p = plan_of(*state, "FROM ./base.gguf\nADAPTER --name=x ./a.gguf\n"
                                     "SYSTEM hi\nPARAMETER temperature 0.5\n");
    assert_int_equal(p->n_nodes, 9);
    assert_int_equal(p->image, p->n_nodes - 1);
    for (size_t i = 0; i < p->n_nodes; i++)
        for (size_t k = 0; k < p->nodes[i].n_inputs; k++)
            assert_true(p->nodes[i].inputs[k] < i);
    size_t chk = find(p, PLAN_CHECK, PLAN_ROLE_ADAPTER);
    assert_int_equal(p->nodes[chk].n_inputs, 2); /* the source and the base check (LoRA hook) */
    assert_int_equal(p->nodes[chk].line, 2);
    size_t cfg = find(p, PLAN_CONFIG, PLAN_ROLE_CONFIG);
    assert_int_equal(p->nodes[cfg].n_inputs, 0); /* config never waits for a source */
    assert_int_equal(p->nodes[cfg].line, 3);
    assert_int_equal(p->nodes[p->image].n_inputs, 3);
    assert_int_equal(p->nodes[p->image].line, 0);
    plan_free(p);
}

static void test_shape_run_merge_draft(void **state)
{
    struct plan *p = plan_of(*state, "RUN echo hi\nFROM ./base.gguf\n"
                                     "ADAPTER --merge ./a.gguf\nDRAFT ./a.gguf\n");
    size_t run = find(p, PLAN_RUN, PLAN_ROLE_NONE);
    size_t src = find(p, PLAN_SOURCE, PLAN_ROLE_BASE);
    assert_int_equal(p->nodes[src].n_inputs, 1); /* a RUN may write the base */
    assert_int_equal(p->nodes[src].inputs[0], run);
    size_t merge = find(p, PLAN_MERGE, PLAN_ROLE_BASE);
    size_t weights = SIZE_MAX;
    for (size_t i = 0; i < p->n_nodes; i++)
        if (p->nodes[i].op == PLAN_LAYER && p->nodes[i].role == PLAN_ROLE_BASE)
            weights = i;
    assert_int_equal(p->nodes[weights].inputs[0], merge);
    find(p, PLAN_LAYER, PLAN_ROLE_DRAFT);
    plan_free(p);
}

static size_t count(const struct plan *p, enum plan_op op, enum plan_role role)
{
    size_t n = 0;
    for (size_t i = 0; i < p->n_nodes; i++)
        n += p->nodes[i].op == op && p->nodes[i].role == role;
    return n;
}

/* One file named by three ADAPTER lines is one source step (BuildKit
 * solves a vertex once); each line keeps its own check and layer. The same
 * file as a DRAFT is another role: its own source. After a RUN, a local
 * source is another step (the RUN may have rewritten the file). */
static void test_same_source_once(void **state)
{
    struct plan *p = plan_of(*state, "FROM ./base.gguf\nADAPTER --name=x ./a.gguf\n"
                                     "ADAPTER --name=y ./a.gguf\nADAPTER --merge ./a.gguf\n"
                                     "DRAFT ./a.gguf\n");
    assert_int_equal(count(p, PLAN_SOURCE, PLAN_ROLE_ADAPTER), 1);
    assert_int_equal(count(p, PLAN_CHECK, PLAN_ROLE_ADAPTER), 3);
    assert_int_equal(count(p, PLAN_LAYER, PLAN_ROLE_ADAPTER), 2);
    assert_int_equal(count(p, PLAN_SOURCE, PLAN_ROLE_DRAFT), 1);
    size_t src = find(p, PLAN_SOURCE, PLAN_ROLE_ADAPTER);
    for (size_t i = 0; i < p->n_nodes; i++)
        if (p->nodes[i].op == PLAN_CHECK && p->nodes[i].role == PLAN_ROLE_ADAPTER)
            assert_int_equal(p->nodes[i].inputs[0], src);
    plan_free(p);
    p = plan_of(*state, "FROM ./base.gguf\nADAPTER --name=x ./a.gguf\nRUN echo hi\n"
                        "ADAPTER --name=y ./a.gguf\n");
    assert_int_equal(count(p, PLAN_SOURCE, PLAN_ROLE_ADAPTER), 2);
    plan_free(p);
}

static void key_of(const struct plan *p, size_t id, const char *in_digest, const char *content,
                   char key[STORE_DIGEST_BUF])
{
    const char *keys[4] = {D1, D1, D1, D1}, *digests[4] = {in_digest, D1, D1, D1};
    struct mf_err err;
    assert_int_equal(plan_node_key(&p->nodes[id], keys, digests, content, key, &err), 0);
}

/* SYSTEM changes the config key only; content and input digests change what reads them. */
static void test_keys(void **state)
{
    struct plan *a = plan_of(*state, "FROM ./base.gguf\nSYSTEM one\n");
    struct plan *b = plan_of(*state, "FROM ./base.gguf\nSYSTEM two\n");
    char ka[STORE_DIGEST_BUF], kb[STORE_DIGEST_BUF];
    size_t cfg = find(a, PLAN_CONFIG, PLAN_ROLE_CONFIG);
    key_of(a, cfg, NULL, NULL, ka);
    key_of(b, cfg, NULL, NULL, kb);
    assert_string_not_equal(ka, kb);
    size_t src = find(a, PLAN_SOURCE, PLAN_ROLE_BASE), chk = find(a, PLAN_CHECK, PLAN_ROLE_BASE);
    key_of(a, src, NULL, D1, ka);
    key_of(b, src, NULL, D1, kb);
    assert_string_equal(ka, kb); /* same file content, same key */
    key_of(a, src, NULL, D2, kb);
    assert_string_not_equal(ka, kb);
    key_of(a, chk, D1, NULL, ka);
    key_of(b, chk, D1, NULL, kb);
    assert_string_equal(ka, kb);
    key_of(a, chk, D2, NULL, kb);
    assert_string_not_equal(ka, kb);
    plan_free(a);
    plan_free(b);
}

static char *printed(const struct plan *p, enum plan_format f)
{
    char *buf = NULL;
    size_t len = 0;
    struct mf_err err;
    FILE *out = open_memstream(&buf, &len);
    assert_int_equal(plan_print(p, f, out, &err), 0);
    fclose(out);
    return buf;
}

static void test_output(void **state)
{
    struct plan *p = plan_of(*state, "FROM ./base.gguf\nSYSTEM say \"hi\"\n");
    char *dot = printed(p, PLAN_FMT_DOT);
    assert_non_null(strstr(dot, "digraph plan {"));
    assert_non_null(strstr(dot, "n1 -> n2;"));
    char *text = printed(p, PLAN_FMT_TEXT);
    assert_non_null(strstr(text, "#1 source   FROM ./base.gguf (Modelfile:1)"));
    char *js = printed(p, PLAN_FMT_JSON);
    json_error_t je;
    json_t *doc = json_loads(js, 0, &je);
    assert_non_null(doc);
    assert_int_equal(json_array_size(json_object_get(doc, "nodes")), p->n_nodes);
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(doc, "config"), "system")), "say \"hi\"");
    json_decref(doc);
    free(dot);
    free(text);
    free(js);
    plan_free(p);
}

static void test_config_yaml(void **state)
{
    struct plan *p = plan_of(*state, "FROM ./base.gguf\nPARAMETER temperature 0.7\n"
                                     "PARAMETER stop a\nPARAMETER stop b\nPARAMETER num_ctx 8\n"
                                     "TEMPLATE \"\"\"x\ny\"\"\"\nLABEL k=\"true\"\n");
    char *yaml = NULL;
    size_t len = 0;
    struct mf_err err;
    assert_int_equal(plan_config_yaml(p->config, &yaml, &len, &err), 0);
    assert_non_null(strstr(yaml, "  temperature: 0.7\n"));
    assert_non_null(strstr(yaml, "  stop:\n  - \"a\"\n  - \"b\"\n"));
    assert_non_null(strstr(yaml, "  num_ctx: 8\n"));
    assert_non_null(strstr(yaml, "template: |-\n  x\n  y\n"));
    assert_non_null(strstr(yaml, "  k: \"true\"\n")); /* a string stays a string */
    free(yaml);
    plan_free(p);
}

static void test_errors(void **state)
{
    struct fixture *fx = *state;
    struct mf_modelfile *mf = NULL;
    struct plan *p = NULL;
    struct mf_err err;
    const char *text = "SYSTEM x\nFROM ./missing/dir/x.gguf\n";
    assert_int_equal(mf_modelfile_parse(text, strlen(text), NULL, &mf, &err), 0);
    struct plan_opts po = {.modelfile = "Modelfile", .fo = &fx->o};
    int rc = plan_build(mf, &po, &p, &err);
    /* a missing path is a name to fetch_resolve; names fail at execution */
    if (rc)
        assert_non_null(strstr(err.msg, "Modelfile:2: FROM"));
    else
        assert_int_equal(p->nodes[0].src.kind, FETCH_NAME);
    plan_free(p);
    mf_modelfile_free(mf);
}

/* An ADAPTER without --name is named after its source's file name: sanitized,
 * made unique (-2), never taking a --name given anywhere; no usable name
 * leaves it unnamed, known by its index. */
static void test_adapter_names(void **state)
{
    (void)state;
    static const char text[] = "FROM ./base.gguf\n"
                               "ADAPTER ./sql-lora.gguf\n"
                               "ADAPTER ./other/sql-lora.gguf --scale=0.5\n"
                               "ADAPTER ./adapters/pirate/\n"
                               "ADAPTER --merge ./merged.gguf\n"
                               "ADAPTER hf://org/repo/loras/chat.v2.gguf\n"
                               "ADAPTER https://example.com/a/tone.gguf?download=true#x\n"
                               "ADAPTER registry.example.com/team/style-lora:v1\n"
                               "ADAPTER ns/m:7b\n"
                               "ADAPTER ./2024.gguf\n"
                               "ADAPTER \"./my lora (v2).gguf\"\n"
                               "ADAPTER ./late.gguf\n"
                               "ADAPTER ./x.gguf --name=late\n"
                               "ADAPTER ./___.gguf\n"
                               "ADAPTER ../lora.safetensors.d/\n";
    static const struct {
        const char *name, *path; /* name NULL: JSON null */
    } want[] = {
        {"sql-lora", "/adapters/sql-lora.gguf"},
        {"sql-lora-2", "/adapters/sql-lora-2.gguf"},
        {"pirate", "/adapters/pirate.gguf"},
        {"chat.v2", "/adapters/chat.v2.gguf"},
        {"tone", "/adapters/tone.gguf"},
        {"style-lora", "/adapters/style-lora.gguf"},
        {"m", "/adapters/m.gguf"},
        {NULL, "/adapters/7.gguf"}, /* all digits: the index, as an unnamed adapter */
        {"my-lora-v2", "/adapters/my-lora-v2.gguf"},
        {"late-2", "/adapters/late-2.gguf"}, /* "late" is a --name further down */
        {"late", "/adapters/late.gguf"},
        {NULL, "/adapters/11.gguf"},
        {"lora.safetensors.d", "/adapters/lora.safetensors.d.gguf"}, /* a directory keeps dots */
    };
    struct mf_modelfile *mf = NULL;
    struct mf_err err;
    if (mf_modelfile_parse(text, strlen(text), NULL, &mf, &err) != 0)
        fail_msg("parse: %s", err.msg);
    json_t *doc = plan_config_doc(mf);
    assert_non_null(doc);
    const json_t *list = json_object_get(doc, "adapters");
    assert_int_equal(json_array_size(list), sizeof want / sizeof want[0]);
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const json_t *a = json_array_get(list, i);
        const json_t *name = json_object_get(a, "name");
        if (want[i].name)
            assert_string_equal(json_string_value(name), want[i].name);
        else
            assert_true(json_is_null(name));
        assert_string_equal(json_string_value(json_object_get(a, "path")), want[i].path);
    }
    assert_true(json_real_value(json_object_get(json_array_get(list, 1), "scale")) == 0.5);
    json_decref(doc);
    mf_modelfile_free(mf);
}

/* Steps whose output mfc's code makes are keyed by mfc's version too, so an
 * mfc with different image (or config, layer, merge...) output never reuses an
 * older one's cached step; sources and RUN steps are not. */
static void test_keys_version(void **state)
{
    struct plan *p = plan_of(*state, "RUN echo hi\nFROM ./base.gguf\nADAPTER --merge ./a.gguf\n"
                                     "SYSTEM s\n");
    const char *keys[4] = {D1, D1, D1, D1}, *digests[4] = {D2, D2, D2, D2};
    struct mf_err err;
    int seen[PLAN_OP_COUNT] = {0};

    for (size_t i = 0; i < p->n_nodes; i++) {
        const struct plan_node *n = &p->nodes[i];
        char k0[STORE_DIGEST_BUF], k1[STORE_DIGEST_BUF], k2[STORE_DIGEST_BUF], kd[STORE_DIGEST_BUF];
        const char *content = n->op == PLAN_SOURCE ? D1 : NULL;
        assert_int_equal(plan_node_key_at(n, keys, digests, content, "0.1.0", k0, &err), 0);
        assert_int_equal(plan_node_key_at(n, keys, digests, content, "0.1.0", k1, &err), 0);
        assert_int_equal(plan_node_key_at(n, keys, digests, content, "0.2.0", k2, &err), 0);
        assert_int_equal(plan_node_key(n, keys, digests, content, kd, &err), 0);
        assert_string_equal(k0, k1); /* deterministic */
        if (plan_op_versioned(n->op))
            assert_string_not_equal(k0, k2);
        else
            assert_string_equal(k0, k2);
        /* plan_node_key is this build's version */
        assert_int_equal(plan_node_key_at(n, keys, digests, content, PACKAGE_VERSION, k2, &err), 0);
        assert_string_equal(kd, k2);
        seen[n->op] = 1;
    }
    assert_true(seen[PLAN_IMAGE] && seen[PLAN_LAYER] && seen[PLAN_CONFIG] && seen[PLAN_MERGE] &&
                seen[PLAN_SOURCE] && seen[PLAN_RUN]);
    assert_true(plan_op_versioned(PLAN_IMAGE) && plan_op_versioned(PLAN_LAYER) &&
                plan_op_versioned(PLAN_CONFIG) && plan_op_versioned(PLAN_MERGE) &&
                plan_op_versioned(PLAN_QUANTIZE) && plan_op_versioned(PLAN_CONVERT) &&
                plan_op_versioned(PLAN_CHECK));
    assert_false(plan_op_versioned(PLAN_SOURCE) || plan_op_versioned(PLAN_RUN));
    plan_free(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_shape_base_adapter, setup, teardown),
        cmocka_unit_test_setup_teardown(test_shape_run_merge_draft, setup, teardown),
        cmocka_unit_test_setup_teardown(test_same_source_once, setup, teardown),
        cmocka_unit_test_setup_teardown(test_keys, setup, teardown),
        cmocka_unit_test_setup_teardown(test_output, setup, teardown),
        cmocka_unit_test_setup_teardown(test_config_yaml, setup, teardown),
        cmocka_unit_test_setup_teardown(test_errors, setup, teardown),
        cmocka_unit_test(test_adapter_names),
        cmocka_unit_test_setup_teardown(test_keys_version, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
