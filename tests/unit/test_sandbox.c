/*
 * test_sandbox.c: the RUN sandbox (exec/sandbox.h): bwrap's argv (the
 * namespaces, the read-only base, the cleared environment, the order of
 * mounts, --share-net only when asked), the output tail kept for errors, and
 * running: exit status, timeout (the process group killed), a missing bwrap
 * and a bwrap that fails named as such.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <sys/stat.h>

#include <cmocka.h>

#include "exec/sandbox.h"

static const char *const sh_true[] = {"/bin/sh", "-c", "true"};

/* Index of s in argv, or -1. */
static int find(char **argv, const char *s)
{
    for (int i = 0; argv[i]; i++)
        if (!strcmp(argv[i], s))
            return i;
    return -1;
}

static void test_argv_defaults(void **state)
{
    (void)state;
    static const char *const env[] = {"A=1", "B=x=y"};
    struct sandbox_bind binds[] = {{"/host/ctx", "/context", 0}, {"/host/out", "/out", 1}};
    struct sandbox_spec sp = {.argv = sh_true, .argc = 3, .env = env, .n_env = 2,
                              .binds = binds, .n_binds = 2, .cwd = "/context"};
    char **argv;
    size_t argc;
    struct mf_err err;
    assert_int_equal(sandbox_argv(&sp, &argv, &argc, &err), 0);
    assert_string_equal(argv[0], "bwrap");
    assert_true(find(argv, "--unshare-all") > 0);
    assert_true(find(argv, "--unshare-user") > 0);
    assert_int_equal(find(argv, "--share-net"), -1);
    assert_true(find(argv, "--die-with-parent") > 0);
    assert_true(find(argv, "--new-session") > 0);
    int clear = find(argv, "--clearenv"), setenv = find(argv, "--setenv");
    assert_true(clear > 0 && setenv > clear);
    assert_string_equal(argv[setenv + 1], "A");
    assert_string_equal(argv[setenv + 2], "1");
    assert_string_equal(argv[setenv + 4], "B");
    assert_string_equal(argv[setenv + 5], "x=y");
    /* the host root is never bound as a whole, and never writable */
    for (int i = 0; argv[i]; i++)
        if (!strcmp(argv[i], "--bind") || !strcmp(argv[i], "--ro-bind"))
            assert_string_not_equal(argv[i + 1], "/");
    int ro = find(argv, "/host/ctx"), rw = find(argv, "/host/out");
    assert_string_equal(argv[ro - 1], "--ro-bind");
    assert_string_equal(argv[rw - 1], "--bind");
    assert_true(ro < rw);
    int tmp = find(argv, "--tmpfs"), rem = find(argv, "--remount-ro");
    assert_string_equal(argv[tmp + 1], "/tmp");
    assert_true(rem > rw);
    int dd = find(argv, "--");
    assert_string_equal(argv[dd + 1], "/bin/sh");
    assert_string_equal(argv[dd + 3], "true");
    assert_null(argv[dd + 4]);
    assert_int_equal((size_t)dd + 4, argc);
    sandbox_argv_free(argv);

    sp.share_net = 1;
    assert_int_equal(sandbox_argv(&sp, &argv, &argc, &err), 0);
    assert_true(find(argv, "--share-net") > 0);
    sandbox_argv_free(argv);
}

static void test_argv_refuses(void **state)
{
    (void)state;
    static const char *const bad_env[] = {"NOEQUALS"};
    struct sandbox_bind rel[] = {{"/x", "relative", 0}};
    struct sandbox_spec sp = {.argv = sh_true, .argc = 3};
    char **argv = (char **)1;
    size_t argc;
    struct mf_err err;
    sp.binds = rel;
    sp.n_binds = 1;
    assert_int_equal(sandbox_argv(&sp, &argv, &argc, &err), MF_EINVAL);
    assert_null(argv);
    sp.n_binds = 0;
    sp.env = bad_env;
    sp.n_env = 1;
    assert_int_equal(sandbox_argv(&sp, &argv, &argc, &err), MF_EINVAL);
    sp.n_env = 0;
    sp.argc = 0;
    assert_int_equal(sandbox_argv(&sp, &argv, &argc, &err), MF_EINVAL);
}

static void test_tail(void **state)
{
    (void)state;
    char out[SANDBOX_TAIL_MAX];
    const char *t = "one\ntwo\nthree\nfour\n\n\n";
    sandbox_tail_lines(t, strlen(t), 2, out, sizeof out);
    assert_string_equal(out, "three\nfour");
    sandbox_tail_lines(t, strlen(t), 10, out, sizeof out);
    assert_string_equal(out, "one\ntwo\nthree\nfour");
    sandbox_tail_lines("", 0, 3, out, sizeof out);
    assert_string_equal(out, "");
    sandbox_tail_lines("a\x01\x1b[0mb", 7, 3, out, sizeof out);
    assert_string_equal(out, "a??[0mb");
    /* a long last line is cut at the front, keeping its end */
    char big[1000];
    memset(big, 'x', sizeof big);
    big[sizeof big - 1] = 'E';
    char small[16];
    sandbox_tail_lines(big, sizeof big, 3, small, sizeof small);
    assert_int_equal(strlen(small), sizeof small - 1);
    assert_memory_equal(small, "...", 3);
    assert_int_equal(small[strlen(small) - 1], 'E');
}

/* The tests below run bwrap; this machine (and CI) has it. */
static int have_bwrap(void)
{
    return access("/usr/bin/bwrap", X_OK) == 0;
}

static void test_run_status_and_output(void **state)
{
    (void)state;
    static const char *const cmd[] = {"/bin/sh", "-c", "echo hello; echo \"v=$V\"; exit 3"};
    static const char *const env[] = {"V=42"};
    struct sandbox_spec sp = {.argv = cmd, .argc = 3, .env = env, .n_env = 1};
    struct sandbox_result res;
    struct mf_err err;
    assert_true(have_bwrap());
    assert_int_equal(sandbox_run(&sp, &res, &err), 0);
    assert_int_equal(res.status, 3);
    assert_int_equal(res.timed_out, 0);
    assert_string_equal(res.tail, "hello\nv=42");
}

static void test_run_timeout(void **state)
{
    (void)state;
    /* a child that ignores TERM and a grandchild: the whole sandbox must go */
    static const char *const cmd[] = {"/bin/sh", "-c",
                                      "trap '' TERM; echo started; sleep 30 & sleep 30"};
    struct sandbox_spec sp = {.argv = cmd, .argc = 3, .timeout_ms = 300};
    struct sandbox_result res;
    struct mf_err err;
    time_t t0 = time(NULL);
    assert_int_equal(sandbox_run(&sp, &res, &err), 0);
    assert_true(time(NULL) - t0 < 10);
    assert_int_equal(res.timed_out, 1);
    assert_string_equal(res.tail, "started");
}

static void test_run_memory_limit(void **state)
{
    (void)state;
    /* 256 MiB fits without a limit, not in 128 MiB of address space */
    static const char *const cmd[] = {"python3", "-c", "b = bytearray(256 << 20); print(len(b))"};
    struct sandbox_spec sp = {.argv = cmd, .argc = 3};
    struct sandbox_result res;
    struct mf_err err;
    assert_int_equal(sandbox_run(&sp, &res, &err), 0);
    assert_int_equal(res.status, 0);
    assert_string_equal(res.tail, "268435456");
    sp.mem_limit = 128u << 20;
    assert_int_equal(sandbox_run(&sp, &res, &err), 0);
    assert_int_not_equal(res.status, 0);
    assert_non_null(strstr(res.tail, "MemoryError"));
}

static void test_missing_bwrap(void **state)
{
    (void)state;
    struct sandbox_spec sp = {.bwrap = "/nonexistent/bwrap", .argv = sh_true, .argc = 3};
    struct sandbox_result res;
    struct mf_err err;
    assert_int_equal(sandbox_run(&sp, &res, &err), MF_EUNSUPPORTED);
    assert_non_null(strstr(err.msg, "bubblewrap"));
    assert_non_null(strstr(err.msg, "unsandboxed"));
}

static void test_probe(void **state)
{
    (void)state;
    struct sandbox_spec sp = {.argv = sh_true, .argc = 3};
    struct mf_err err;
    assert_int_equal(sandbox_probe(&sp, &err), 0);
    /* a bwrap that cannot create namespaces: its message and the fix are named */
    char dir[] = "/tmp/test_sandbox_XXXXXX", fake[64];
    assert_non_null(mkdtemp(dir));
    snprintf(fake, sizeof fake, "%s/bwrap", dir);
    FILE *f = fopen(fake, "w");
    assert_non_null(f);
    fputs("#!/bin/sh\necho 'bwrap: No permissions to creating new namespace' >&2\nexit 1\n", f);
    fclose(f);
    assert_int_equal(chmod(fake, 0755), 0);
    sp.bwrap = fake;
    assert_int_equal(sandbox_probe(&sp, &err), MF_EUNSUPPORTED);
    assert_non_null(strstr(err.msg, "No permissions to creating new namespace"));
    assert_non_null(strstr(err.msg, "unprivileged_userns_clone"));
    assert_non_null(strstr(err.msg, "--privileged"));
    unlink(fake);
    rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_argv_defaults),   cmocka_unit_test(test_argv_refuses),
        cmocka_unit_test(test_tail),            cmocka_unit_test(test_run_status_and_output),
        cmocka_unit_test(test_run_timeout),     cmocka_unit_test(test_run_memory_limit),
        cmocka_unit_test(test_missing_bwrap),   cmocka_unit_test(test_probe),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
