/*
 * test_sandbox.c: the RUN sandbox (exec/sandbox.h): bwrap's argv (the
 * namespaces, the uid inside, the read-only base, mfc's own /etc and never
 * the host's, the cleared environment, the order of mounts, secrets copied
 * in, --share-net only when asked), the output tail kept for errors, and
 * running: exit status, timeout (the process group killed), who the step
 * is outside (nobody when the test runs as root), no host secret readable,
 * a secret readable whatever its file mode, the mask applied or the output
 * withheld, a missing bwrap and a bwrap that fails named as such.
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

#include <fcntl.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "common/buf.h"
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
    struct sandbox_bind binds[] = {{"/host/ctx", "/context", 0, 0},
                                   {"/host/out", "/out", 1, 0},
                                   {"/host/token", "/run/secrets/t", 0, 1}};
    struct sandbox_spec sp = {.argv = sh_true, .argc = 3, .env = env, .n_env = 2,
                              .binds = binds, .n_binds = 3, .cwd = "/context"};
    char **argv;
    size_t argc;
    struct mf_err err;
    assert_int_equal(sandbox_argv(&sp, NULL, &argv, &argc, &err), 0);
    assert_string_equal(argv[0], "bwrap");
    /* the step is uid and gid 1000 inside, and may not make user namespaces */
    int uid = find(argv, "--uid"), gid = find(argv, "--gid");
    assert_true(uid > 0 && gid > 0);
    assert_string_equal(argv[uid + 1], "1000");
    assert_string_equal(argv[gid + 1], "1000");
    assert_true(find(argv, "--disable-userns") > 0);
    /* /etc is mfc's: passwd from fd 3, group from 4, ...; the host's is never bound */
    int pw = find(argv, "/etc/passwd");
    assert_string_equal(argv[pw - 2], "--file");
    assert_string_equal(argv[pw - 1], "3");
    assert_string_equal(argv[pw - 3], "0644");
    assert_string_equal(argv[find(argv, "/etc/resolv.conf") - 1], "7");
    assert_int_equal(find(argv, "/etc"), -1);
    assert_int_equal(find(argv, "/etc/shadow"), -1);
    assert_int_equal(find(argv, "/etc/ssl/certs"), -1); /* no network, no CA certificates */
    /* the secret is copied from the fd after /etc's, read-only, owner-only */
    int sec = find(argv, "/run/secrets/t");
    assert_string_equal(argv[sec - 2], "--ro-bind-data");
    assert_string_equal(argv[sec - 1], "8");
    assert_string_equal(argv[sec - 3], "0400");
    assert_int_equal(find(argv, "/host/token"), -1);
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
    sp.root = 1;
    int fds[] = {20, 21, 22, 23, 24, 25};
    assert_int_equal(sandbox_argv(&sp, fds, &argv, &argc, &err), 0);
    assert_true(find(argv, "--share-net") > 0);
    assert_string_equal(argv[find(argv, "--uid") + 1], "0");
    assert_string_equal(argv[find(argv, "/etc/passwd") - 1], "20");
    assert_string_equal(argv[find(argv, "/run/secrets/t") - 1], "25");
    int certs = find(argv, "/etc/ssl/certs");
    assert_string_equal(argv[certs - 1], "--ro-bind-try");
    sandbox_argv_free(argv);
}

static void test_etc(void **state)
{
    (void)state;
    struct sandbox_spec sp = {.argv = sh_true, .argc = 3};
    struct mf_buf b;
    struct mf_err err;
    const char *path;
    mf_buf_init(&b, SANDBOX_ETC_MAX);
    assert_int_equal(sandbox_etc(&sp, 0, &b, &path, &err), 0);
    assert_string_equal(path, "/etc/passwd");
    assert_non_null(strstr(b.data, "root:x:0:0:"));
    assert_non_null(strstr(b.data, "mfc:x:1000:1000:"));
    assert_non_null(strstr(b.data, "nobody:x:65534:65534:"));
    assert_int_equal(sandbox_etc(&sp, 1, &b, &path, &err), 0);
    assert_string_equal(path, "/etc/group");
    assert_non_null(strstr(b.data, "mfc:x:1000:"));
    assert_int_equal(sandbox_etc(&sp, 2, &b, &path, &err), 0);
    assert_non_null(strstr(b.data, "localhost"));
    assert_int_equal(sandbox_etc(&sp, 3, &b, &path, &err), 0);
    assert_string_equal(path, "/etc/nsswitch.conf");
    assert_non_null(strstr(b.data, "passwd: files"));
    /* no network: no name server */
    assert_int_equal(sandbox_etc(&sp, 4, &b, &path, &err), 0);
    assert_string_equal(path, "/etc/resolv.conf");
    assert_null(strstr(b.data, "nameserver"));
    assert_int_equal(sandbox_etc(&sp, 5, &b, &path, &err), MF_EINVAL);
    mf_buf_free(&b);
}

static void test_argv_refuses(void **state)
{
    (void)state;
    static const char *const bad_env[] = {"NOEQUALS"};
    struct sandbox_bind rel[] = {{"/x", "relative", 0, 0}};
    struct sandbox_spec sp = {.argv = sh_true, .argc = 3};
    char **argv = (char **)1;
    size_t argc;
    struct mf_err err;
    sp.binds = rel;
    sp.n_binds = 1;
    assert_int_equal(sandbox_argv(&sp, NULL, &argv, &argc, &err), MF_EINVAL);
    assert_null(argv);
    sp.n_binds = 0;
    sp.env = bad_env;
    sp.n_env = 1;
    assert_int_equal(sandbox_argv(&sp, NULL, &argv, &argc, &err), MF_EINVAL);
    sp.n_env = 0;
    sp.argc = 0;
    assert_int_equal(sandbox_argv(&sp, NULL, &argv, &argc, &err), MF_EINVAL);
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

/* The host's secrets are not there, and the step is not root outside: a
 * file it makes in a writable bind belongs to nobody when the test runs as
 * root (mfc then starts bwrap as 65534), else to the test's own user. */
static void test_run_identity(void **state)
{
    (void)state;
    char dir[] = "/tmp/test_sandbox_XXXXXX", out[64], secret[64], made[96];
    assert_non_null(mkdtemp(dir));
    snprintf(out, sizeof out, "%s/out", dir);
    snprintf(secret, sizeof secret, "%s/token", dir);
    assert_int_equal(mkdir(out, 0700), 0);
    int fd = open(secret, O_WRONLY | O_CREAT | O_EXCL, 0600); /* only its owner may read */
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "tok-42\n", 7), 7);
    close(fd);
    assert_int_equal(chmod(dir, 0700), 0); /* nobody could not even reach it by path */
    static const char *const cmd[] = {
        "/bin/sh", "-c",
        "test ! -e /etc/shadow && test ! -e /etc/gshadow && test ! -e /root && "
        "test \"$(id -u):$(id -g)\" = 1000:1000 && test \"$(cat /run/secrets/t)\" = tok-42 && "
        "touch /out/made && ! touch /usr/x 2>/dev/null && ! touch /etc/x 2>/dev/null && "
        "grep -q '^mfc:' /etc/passwd && echo ok"};
    struct sandbox_bind binds[] = {{out, "/out", 1, 0}, {secret, "/run/secrets/t", 0, 1}};
    struct sandbox_spec sp = {.argv = cmd, .argc = 3, .binds = binds, .n_binds = 2};
    struct sandbox_result res;
    struct mf_err err;
    assert_int_equal(sandbox_run(&sp, &res, &err), 0);
    assert_string_equal(res.tail, "ok");
    assert_int_equal(res.status, 0);
    struct stat st;
    snprintf(made, sizeof made, "%s/made", out);
    assert_int_equal(stat(made, &st), 0);
    assert_int_equal(st.st_uid, geteuid() == 0 ? SANDBOX_NOBODY : geteuid());
    /* RUN --user=0: root inside, still not root outside */
    static const char *const as_root[] = {"/bin/sh", "-c",
                                          "test \"$(id -u)\" = 0 && touch /out/root && echo ok"};
    sp.argv = as_root;
    sp.root = 1;
    assert_int_equal(sandbox_run(&sp, &res, &err), 0);
    assert_string_equal(res.tail, "ok");
    snprintf(made, sizeof made, "%s/root", out);
    assert_int_equal(stat(made, &st), 0);
    assert_int_equal(st.st_uid, geteuid() == 0 ? SANDBOX_NOBODY : geteuid());
    unlink(made);
    snprintf(made, sizeof made, "%s/made", out);
    unlink(made);
    rmdir(out);
    unlink(secret);
    rmdir(dir);
    /* the staging directory is gone */
    assert_int_equal(system("! ls -d /tmp/mfc-stage-* 2>/dev/null | grep -q ."), 0);
}

static int hide_x(void *arg, char *out, size_t n)
{
    (void)arg;
    for (size_t i = 0; i < n; i++)
        if (out[i] == 'x')
            out[i] = '*';
    return 0;
}

static int refuse(void *arg, char *out, size_t n)
{
    (void)arg, (void)out, (void)n;
    return -1;
}

static void test_run_mask(void **state)
{
    (void)state;
    static const char *const cmd[] = {"/bin/sh", "-c", "echo axbxc; exit 1"};
    struct sandbox_spec sp = {.argv = cmd, .argc = 3, .mask = hide_x};
    struct sandbox_result res;
    struct mf_err err;
    assert_int_equal(sandbox_run(&sp, &res, &err), 0);
    assert_string_equal(res.tail, "a*b*c");
    sp.mask = refuse;
    assert_int_equal(sandbox_run(&sp, &res, &err), 0);
    assert_int_equal(res.status, 1);
    assert_null(strstr(res.tail, "axbxc"));
    assert_non_null(strstr(res.tail, "withheld"));
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
        cmocka_unit_test(test_etc),             cmocka_unit_test(test_run_identity),
        cmocka_unit_test(test_run_mask),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
