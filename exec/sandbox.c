/*
 * sandbox.c: bubblewrap's argv for a RUN step, and running it with a
 * timeout, a memory limit and its output's last lines kept (sandbox.h).
 *
 * Why a fresh root with a few read-only binds instead of --ro-bind / /: the
 * sandbox must not see the host's home, the build store or the test's temp
 * directory at all, and bwrap needs a writable root to create the mount
 * points /context, /inputs, /out and the cache targets; the root is
 * remounted read-only once everything is mounted.
 */
#include "exec/sandbox.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>

/* The host directories every sandbox sees, read-only. */
static const char *const base_dirs[] = {"/usr", "/bin", "/sbin", "/lib", "/lib32",
                                        "/lib64", "/libx32", "/etc"};

#define PROBE_TIMEOUT_MS 20000
#define KILL_GRACE_MS 5000 /* after SIGKILL, how long the pipe may stay open */

struct argv_b {
    char **v;
    size_t n, cap;
    int oom;
};

static void push(struct argv_b *b, const char *s)
{
    if (b->oom)
        return;
    if (b->n + 2 > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 64;
        char **v = cap <= SANDBOX_MAX_ARGS ? realloc(b->v, cap * sizeof *v) : NULL;
        if (!v) {
            b->oom = 1;
            return;
        }
        b->v = v;
        b->cap = cap;
    }
    if (!(b->v[b->n] = strdup(s))) {
        b->oom = 1;
        return;
    }
    b->v[++b->n] = NULL;
}

static void push3(struct argv_b *b, const char *a, const char *c, const char *d)
{
    push(b, a);
    push(b, c);
    if (d)
        push(b, d);
}

void sandbox_argv_free(char **argv)
{
    for (size_t i = 0; argv && argv[i]; i++)
        free(argv[i]);
    free(argv);
}

/* The read-only base: each host directory that exists, a symlink as itself
 * (Debian's /bin -> usr/bin), so paths resolve inside as they do outside. */
static void base(struct argv_b *b)
{
    for (size_t i = 0; i < sizeof base_dirs / sizeof base_dirs[0]; i++) {
        struct stat st;
        char target[PATH_MAX];
        if (lstat(base_dirs[i], &st) != 0)
            continue;
        if (S_ISLNK(st.st_mode)) {
            ssize_t n = readlink(base_dirs[i], target, sizeof target - 1);
            if (n <= 0)
                continue;
            target[n] = '\0';
            push3(b, "--symlink", target, base_dirs[i]);
        } else if (S_ISDIR(st.st_mode)) {
            push3(b, "--ro-bind", base_dirs[i], base_dirs[i]);
        }
    }
}

int sandbox_argv(const struct sandbox_spec *sp, char ***argv, size_t *argc, struct mf_err *err)
{
    struct argv_b b = {0};
    *argv = NULL;
    if (!sp->argc || !sp->argv || !sp->argv[0])
        return mf_err_set(err, MF_EINVAL, "the sandbox needs a command");
    for (size_t i = 0; i < sp->n_binds; i++)
        if (!sp->binds[i].dst || sp->binds[i].dst[0] != '/' || !sp->binds[i].src)
            return mf_err_set(err, MF_EINVAL, "sandbox mount '%s' is not an absolute path",
                              sp->binds[i].dst ? sp->binds[i].dst : "(null)");
    for (size_t i = 0; i < sp->n_env; i++)
        if (!sp->env[i] || !strchr(sp->env[i], '=') || sp->env[i][0] == '=')
            return mf_err_set(err, MF_EINVAL, "sandbox environment entry '%s' is not KEY=VALUE",
                              sp->env[i] ? sp->env[i] : "(null)");
    push(&b, sp->bwrap ? sp->bwrap : "bwrap");
    push(&b, "--unshare-all");
    push(&b, "--unshare-user");
    if (sp->share_net)
        push(&b, "--share-net");
    push(&b, "--die-with-parent");
    push(&b, "--new-session");
    push3(&b, "--cap-drop", "ALL", NULL);
    push(&b, "--clearenv");
    for (size_t i = 0; i < sp->n_env; i++) {
        const char *eq = strchr(sp->env[i], '=');
        char *key = strndup(sp->env[i], (size_t)(eq - sp->env[i]));
        if (!key) {
            b.oom = 1;
            break;
        }
        push3(&b, "--setenv", key, eq + 1);
        free(key);
    }
    base(&b);
    push3(&b, "--dev", "/dev", NULL);
    push3(&b, "--proc", "/proc", NULL);
    push3(&b, "--tmpfs", "/tmp", NULL);
    for (size_t i = 0; i < sp->n_binds; i++)
        push3(&b, sp->binds[i].rw ? "--bind" : "--ro-bind", sp->binds[i].src, sp->binds[i].dst);
    push3(&b, "--remount-ro", "/", NULL);
    push3(&b, "--chdir", sp->cwd ? sp->cwd : "/", NULL);
    push(&b, "--");
    for (size_t i = 0; i < sp->argc; i++)
        push(&b, sp->argv[i] ? sp->argv[i] : "");
    if (b.oom) {
        sandbox_argv_free(b.v);
        return mf_err_set(err, MF_ENOMEM, "the sandbox's command line is too long");
    }
    *argv = b.v;
    *argc = b.n;
    return 0;
}

/* ---- tail ------------------------------------------------------------------------ */

void sandbox_tail_lines(const char *buf, size_t n, size_t max_lines, char *out, size_t cap)
{
    size_t end = n, start, lines = 0;
    if (!cap)
        return;
    out[0] = '\0';
    while (end > 0 && (buf[end - 1] == '\n' || buf[end - 1] == '\r' || buf[end - 1] == ' ' ||
                       buf[end - 1] == '\t'))
        end--;
    if (end == 0 || max_lines == 0)
        return;
    for (start = end; start > 0; start--)
        if (buf[start - 1] == '\n' && ++lines == max_lines)
            break;
    int cut = 0;
    if (end - start > cap - 1) {
        cut = cap > 4; /* room for "..." */
        start = end - (cut ? cap - 4 : cap - 1);
        while (start < end && ((unsigned char)buf[start] & 0xC0) == 0x80)
            start++; /* do not begin inside a UTF-8 sequence */
    }
    size_t o = 0;
    if (cut) {
        memcpy(out, "...", 3);
        o = 3;
    }
    for (size_t i = start; i < end && o + 1 < cap; i++) {
        unsigned char ch = (unsigned char)buf[i];
        out[o++] = (ch == '\n' || ch == '\t' || ch >= 0x20) && ch != 0x7f ? (char)ch : '?';
    }
    out[o] = '\0';
}

/* ---- running --------------------------------------------------------------------- */

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The executable bwrap names: a path as is, a name through $PATH. */
static int find_bwrap(const char *name, char out[PATH_MAX], struct mf_err *err)
{
    const char *path = getenv("PATH");
    if (strchr(name, '/')) {
        if (access(name, X_OK) == 0) {
            snprintf(out, PATH_MAX, "%s", name);
            return 0;
        }
    } else {
        for (const char *p = path ? path : "/usr/bin:/bin"; *p;) {
            size_t l = strcspn(p, ":");
            int n = snprintf(out, PATH_MAX, "%.*s/%s", (int)l, l ? p : ".", name);
            if (n > 0 && n < PATH_MAX && access(out, X_OK) == 0)
                return 0;
            p += l + (p[l] == ':');
        }
    }
    return mf_err_set(err, MF_EUNSUPPORTED,
                      "bubblewrap (%s) is not installed, and mfc never runs RUN steps "
                      "unsandboxed: install it (apt-get install bubblewrap)", name);
}

/* In the child, between fork and exec: only async-signal-safe calls. */
static void child(const char *exe, char **argv, int out, int devnull, uint64_t mem)
{
    setpgid(0, 0);
    if (dup2(devnull, 0) < 0 || dup2(out, 1) < 0 || dup2(out, 2) < 0)
        _exit(126);
#ifdef SYS_close_range
    if (syscall(SYS_close_range, 3u, ~0u, 0u) != 0)
#endif
    {
        long max = sysconf(_SC_OPEN_MAX);
        for (int fd = 3; fd < (max > 0 && max < 65536 ? max : 65536); fd++)
            close(fd);
    }
    if (mem) {
        struct rlimit rl = {.rlim_cur = (rlim_t)mem, .rlim_max = (rlim_t)mem};
        if (setrlimit(RLIMIT_AS, &rl) != 0)
            _exit(126);
    }
    signal(SIGPIPE, SIG_DFL);
    execv(exe, argv);
    _exit(127);
}

/* Reads the child's output into ring until EOF, killing the process group
 * when the deadline passes. */
static void pump(int fd, pid_t pid, int64_t timeout_ms, char *ring, size_t *total, int *timed_out)
{
    int64_t deadline = timeout_ms > 0 ? now_ms() + timeout_ms : 0, kill_deadline = 0;
    char buf[4096];
    for (;;) {
        int wait = -1;
        int64_t now = now_ms();
        if (kill_deadline)
            wait = now >= kill_deadline ? 0 : (int)(kill_deadline - now);
        else if (deadline)
            wait = now >= deadline ? 0 : (int)(deadline - now > 60000 ? 60000 : deadline - now);
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int r = poll(&p, 1, wait);
        if (r < 0 && errno == EINTR)
            continue;
        if (r == 0 || r < 0) {
            if (kill_deadline)
                return; /* killed, but something still holds the pipe: stop reading */
            if (deadline && now_ms() >= deadline) {
                kill(-pid, SIGKILL);
                *timed_out = 1;
                kill_deadline = now_ms() + KILL_GRACE_MS;
            }
            continue;
        }
        ssize_t n = read(fd, buf, sizeof buf);
        if (n < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (n <= 0)
            return;
        for (ssize_t i = 0; i < n; i++)
            ring[(*total)++ % SANDBOX_RING] = buf[i];
    }
}

int sandbox_run(const struct sandbox_spec *sp, struct sandbox_result *res, struct mf_err *err)
{
    char exe[PATH_MAX], **argv = NULL, *ring = NULL;
    size_t argc, total = 0;
    int fds[2] = {-1, -1}, devnull = -1, timed_out = 0, st = 0;
    int rc = find_bwrap(sp->bwrap ? sp->bwrap : "bwrap", exe, err);
    if (!rc)
        rc = sandbox_argv(sp, &argv, &argc, err);
    if (!rc && !(ring = malloc(SANDBOX_RING)))
        rc = mf_err_set(err, MF_ENOMEM, "out of memory");
    if (!rc && pipe2(fds, O_CLOEXEC) != 0)
        rc = mf_err_sys(err, MF_EIO, errno, "cannot create a pipe for the sandbox");
    if (!rc && (devnull = open("/dev/null", O_RDONLY | O_CLOEXEC)) < 0)
        rc = mf_err_sys(err, MF_EIO, errno, "cannot open /dev/null");
    pid_t pid = -1;
    if (!rc && (pid = fork()) < 0)
        rc = mf_err_sys(err, MF_EIO, errno, "cannot start %s", exe);
    if (!rc && pid == 0)
        child(exe, argv, fds[1], devnull, sp->mem_limit);
    if (!rc) {
        setpgid(pid, pid); /* also here: no window where kill(-pid) misses it */
        close(fds[1]);
        fds[1] = -1;
        pump(fds[0], pid, sp->timeout_ms, ring, &total, &timed_out);
        while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
            ;
        memset(res, 0, sizeof *res);
        res->timed_out = timed_out;
        res->status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
        res->signal = WIFSIGNALED(st) ? WTERMSIG(st) : 0;
        if (total <= SANDBOX_RING) {
            sandbox_tail_lines(ring, total, SANDBOX_TAIL_LINES, res->tail, sizeof res->tail);
        } else {
            char *lin = malloc(SANDBOX_RING);
            size_t at = total % SANDBOX_RING;
            if (lin) {
                memcpy(lin, ring + at, SANDBOX_RING - at);
                memcpy(lin + SANDBOX_RING - at, ring, at);
                sandbox_tail_lines(lin, SANDBOX_RING, SANDBOX_TAIL_LINES, res->tail,
                                   sizeof res->tail);
                free(lin);
            }
        }
    }
    for (int i = 0; i < 2; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    if (devnull >= 0)
        close(devnull);
    free(ring);
    sandbox_argv_free(argv);
    return rc;
}

int sandbox_probe(const struct sandbox_spec *sp, struct mf_err *err)
{
    static const char *const t[] = {"true"};
    struct sandbox_spec p = *sp;
    struct sandbox_result res;
    p.argv = t;
    p.argc = 1;
    p.timeout_ms = PROBE_TIMEOUT_MS;
    p.mem_limit = 0;
    int rc = sandbox_run(&p, &res, err);
    if (rc)
        return rc;
    if (res.status == 0)
        return 0;
    char why[128];
    sandbox_tail_lines(res.tail, strlen(res.tail), 1, why, sizeof why);
    return mf_err_set(err, MF_EUNSUPPORTED,
                      "bubblewrap cannot create the RUN sandbox here (%s), and mfc never runs "
                      "RUN steps unsandboxed: allow unprivileged user namespaces (sysctl -w "
                      "kernel.unprivileged_userns_clone=1; on Ubuntu 24.04 also "
                      "kernel.apparmor_restrict_unprivileged_userns=0), or run the container "
                      "with --privileged or --security-opt seccomp=unconfined",
                      why[0] ? why : res.timed_out ? "it timed out" : "it failed");
}
