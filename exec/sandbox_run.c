/*
 * sandbox_run.c: starting bwrap for one RUN step (sandbox.h): the files it
 * copies in (mfc's /etc as memfds, secrets opened by mfc), who it runs as,
 * the timeout, the memory limit, and the output's tail after the mask.
 *
 * Owns, for one call: the pipe, the descriptors bwrap copies from, the
 * staging directory and its placeholders, and the child; all are closed or
 * removed before sandbox_run returns.
 *
 * Staging (mfc running as root): bwrap is started as SANDBOX_NOBODY, which
 * cannot open the store or a context under a 0700 home. So the child, still
 * root, enters a private mount namespace (propagation off, so nothing shows
 * on the host) and bind-mounts each source onto an empty placeholder under a
 * fresh 0711 directory of /tmp (made by the parent, removed after the run);
 * bwrap then binds from there. Where the child cannot create a mount
 * namespace (no CAP_SYS_ADMIN), it binds from the original paths, which
 * works wherever nobody may reach them. Writable sources (/out, cache
 * mounts) are handed to nobody first.
 */
#include "exec/sandbox.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include "common/buf.h"

#define PROBE_TIMEOUT_MS 20000
#define KILL_GRACE_MS 5000 /* after SIGKILL, how long the pipe may stay open */
#define STAGE_NOTE                                                                                 \
    "mfc: cannot stage the RUN step's mounts (no mount namespace); "                               \
    "binding them by path\n"

/* What one run prepares before the fork. */
struct prep {
    int exe;            /* owned: bwrap, opened by mfc (nobody may not reach its path) */
    int *fds;           /* owned: /etc memfds, then one per data bind */
    size_t n_fds;       /* entries in fds (each >= 3) */
    int *keep;          /* owned: fds and exe sorted, for the child */
    size_t n_keep;      /* entries in keep */
    int drop;           /* 1: mfc is root; bwrap runs as SANDBOX_NOBODY */
    char *stage;        /* owned: the staging directory, or NULL */
    char **stage_src;   /* owned: per staged bind, the source (borrowed strings) */
    char **stage_dst;   /* owned: per staged bind, its placeholder (owned strings) */
    size_t n_stage;     /* entries in stage_src/stage_dst */
    char **argv;        /* owned: bwrap's argv with the original paths */
    char **argv_staged; /* owned: with the placeholders, or NULL */
};

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
                      "unsandboxed: install it (apt-get install bubblewrap)",
                      name);
}

/* ---- preparing -------------------------------------------------------------------- */

/* fd moved to a number >= 3 (stdin/out/err are replaced in the child), CLOEXEC. */
static int high_fd(int fd)
{
    if (fd < 0 || fd >= 3)
        return fd;
    int h = fcntl(fd, F_DUPFD_CLOEXEC, 3);
    close(fd);
    return h;
}

static int memfd_with(const char *name, const struct mf_buf *b, struct mf_err *err)
{
    int fd = high_fd(memfd_create(name, MFD_CLOEXEC));
    if (fd < 0)
        return mf_err_sys(err, MF_EIO, errno, "cannot create a memfd for the sandbox's %s", name);
    size_t off = 0;
    while (off < b->len) {
        ssize_t w = write(fd, b->data + off, b->len - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            close(fd);
            return mf_err_sys(err, MF_EIO, errno, "cannot write the sandbox's %s", name);
        }
        off += (size_t)w;
    }
    if (lseek(fd, 0, SEEK_SET) != 0) {
        close(fd);
        return mf_err_sys(err, MF_EIO, errno, "cannot rewind the sandbox's %s", name);
    }
    return fd;
}

/* The /etc files and the data binds' sources, opened by mfc. */
static int open_fds(const struct sandbox_spec *sp, struct prep *p, struct mf_err *err)
{
    struct mf_buf b;
    int rc = 0;
    p->fds = calloc(SANDBOX_ETC_FILES + sp->n_binds, sizeof *p->fds);
    p->keep = calloc(SANDBOX_ETC_FILES + sp->n_binds + 1, sizeof *p->keep);
    if (!p->fds || !p->keep)
        return mf_err_set(err, MF_ENOMEM, "out of memory");
    mf_buf_init(&b, SANDBOX_ETC_MAX);
    for (int i = 0; !rc && i < SANDBOX_ETC_FILES; i++) {
        const char *path;
        rc = sandbox_etc(sp, i, &b, &path, err);
        int fd = rc ? -1 : memfd_with(path, &b, err);
        if (fd < 0)
            rc = rc ? rc : err->code;
        else
            p->fds[p->n_fds++] = fd;
    }
    mf_buf_free(&b);
    for (size_t i = 0; !rc && i < sp->n_binds; i++) {
        if (!sp->binds[i].data)
            continue;
        int fd = high_fd(open(sp->binds[i].src, O_RDONLY | O_CLOEXEC | O_NOCTTY));
        if (fd < 0)
            rc = mf_err_sys(err, MF_EIO, errno, "cannot open %s for %s", sp->binds[i].src,
                            sp->binds[i].dst);
        else
            p->fds[p->n_fds++] = fd;
    }
    return rc;
}

static int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* Root: placeholders for every bound source, and the writable ones handed
 * to nobody. *staged gets a copy of sp's binds pointing at them. */
static int stage(const struct sandbox_spec *sp, struct prep *p, struct sandbox_bind **staged,
                 struct mf_err *err)
{
    char dir[] = "/tmp/mfc-stage-XXXXXX";
    *staged = calloc(sp->n_binds + 1, sizeof **staged);
    p->stage_src = calloc(sp->n_binds + 1, sizeof *p->stage_src);
    p->stage_dst = calloc(sp->n_binds + 1, sizeof *p->stage_dst);
    if (!*staged || !p->stage_src || !p->stage_dst)
        return mf_err_set(err, MF_ENOMEM, "out of memory");
    if (!mkdtemp(dir) || chmod(dir, 0711) != 0 || !(p->stage = strdup(dir)))
        return mf_err_sys(err, MF_EIO, errno, "cannot create a staging directory in /tmp");
    for (size_t i = 0; i < sp->n_binds; i++) {
        const struct sandbox_bind *bd = &sp->binds[i];
        struct stat st;
        (*staged)[i] = *bd;
        if (bd->data)
            continue;
        if (bd->rw && chown(bd->src, SANDBOX_NOBODY, SANDBOX_NOBODY) != 0)
            return mf_err_sys(err, MF_EIO, errno, "cannot hand %s to the sandbox's user", bd->src);
        char *ph = NULL;
        if (asprintf(&ph, "%s/%zu", dir, p->n_stage) < 0)
            return mf_err_set(err, MF_ENOMEM, "out of memory");
        p->stage_dst[p->n_stage] = ph;
        p->stage_src[p->n_stage++] = (char *)bd->src;
        int made = stat(bd->src, &st);
        if (made == 0 && S_ISDIR(st.st_mode))
            made = mkdir(ph, 0755);
        else if (made == 0 && (made = open(ph, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644)) >= 0)
            made = close(made);
        if (made != 0)
            return mf_err_sys(err, MF_EIO, errno, "cannot stage %s for %s", bd->src, bd->dst);
        (*staged)[i].src = ph;
    }
    return 0;
}

static void prep_fini(struct prep *p)
{
    if (p->exe >= 0)
        close(p->exe);
    for (size_t i = 0; i < p->n_fds; i++)
        close(p->fds[i]);
    for (size_t i = 0; i < p->n_stage; i++) {
        if (p->stage_dst[i] && rmdir(p->stage_dst[i]) != 0)
            unlink(p->stage_dst[i]);
        free(p->stage_dst[i]);
    }
    if (p->stage)
        rmdir(p->stage);
    free(p->stage);
    free(p->stage_src);
    free(p->stage_dst);
    free(p->fds);
    free(p->keep);
    sandbox_argv_free(p->argv);
    sandbox_argv_free(p->argv_staged);
    memset(p, 0, sizeof *p);
}

static int prepare(const struct sandbox_spec *sp, const char *exe, struct prep *p,
                   struct mf_err *err)
{
    size_t argc;
    struct sandbox_bind *staged = NULL;
    p->drop = geteuid() == 0;
    p->exe = high_fd(open(exe, O_RDONLY | O_CLOEXEC));
    int rc = p->exe < 0 ? mf_err_sys(err, MF_EIO, errno, "cannot open %s", exe) : 0;
    if (!rc)
        rc = open_fds(sp, p, err);
    if (!rc)
        rc = sandbox_argv(sp, p->fds, &p->argv, &argc, err);
    if (!rc && p->drop && sp->n_binds)
        rc = stage(sp, p, &staged, err);
    if (!rc && p->n_stage) {
        struct sandbox_spec s2 = *sp;
        s2.binds = staged;
        rc = sandbox_argv(&s2, p->fds, &p->argv_staged, &argc, err);
    }
    free(staged);
    if (p->keep) {
        memcpy(p->keep, p->fds, p->n_fds * sizeof *p->fds);
        p->n_keep = p->n_fds;
        if (p->exe >= 0)
            p->keep[p->n_keep++] = p->exe;
        qsort(p->keep, p->n_keep, sizeof *p->keep, cmp_int);
    }
    return rc;
}

/* ---- the child ------------------------------------------------------------------- */

static void close_range_fds(unsigned lo, unsigned hi)
{
    if (lo > hi)
        return;
#ifdef SYS_close_range
    if (syscall(SYS_close_range, lo, hi, 0u) == 0)
        return;
#endif
    long max = sysconf(_SC_OPEN_MAX);
    unsigned top = max > 0 && max < 65536 ? (unsigned)max : 65536;
    for (unsigned fd = lo; fd <= hi && fd < top; fd++)
        close((int)fd);
}

static void say(const char *s)
{
    ssize_t ignored = write(2, s, strlen(s));
    (void)ignored;
}

/* In the child, between fork and exec: only async-signal-safe calls. */
static void child(const struct prep *p, int out, int devnull, uint64_t mem)
{
    extern char **environ;
    char **argv = p->argv;
    setpgid(0, 0);
    if (dup2(devnull, 0) < 0 || dup2(out, 1) < 0 || dup2(out, 2) < 0)
        _exit(126);
    unsigned next = 3;
    for (size_t i = 0; i < p->n_keep; i++) { /* every fd but bwrap's inputs goes */
        close_range_fds(next, (unsigned)p->keep[i] - 1);
        if (fcntl(p->keep[i], F_SETFD, p->keep[i] == p->exe ? FD_CLOEXEC : 0) != 0)
            _exit(126);
        next = (unsigned)p->keep[i] + 1;
    }
    close_range_fds(next, ~0u);
    if (mem) {
        struct rlimit rl = {.rlim_cur = (rlim_t)mem, .rlim_max = (rlim_t)mem};
        if (setrlimit(RLIMIT_AS, &rl) != 0)
            _exit(126);
    }
    if (p->n_stage) {
        if (unshare(CLONE_NEWNS) == 0 && mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) == 0) {
            for (size_t i = 0; i < p->n_stage; i++)
                if (mount(p->stage_src[i], p->stage_dst[i], NULL, MS_BIND | MS_REC, NULL) != 0) {
                    say("mfc: cannot bind-mount ");
                    say(p->stage_src[i]);
                    say(" for the RUN step\n");
                    _exit(125);
                }
            argv = p->argv_staged;
        } else {
            say(STAGE_NOTE);
        }
    }
    if (p->drop && (setgroups(0, NULL) != 0 ||
                    setresgid(SANDBOX_NOBODY, SANDBOX_NOBODY, SANDBOX_NOBODY) != 0 ||
                    setresuid(SANDBOX_NOBODY, SANDBOX_NOBODY, SANDBOX_NOBODY) != 0)) {
        say("mfc: cannot become nobody to start bwrap\n");
        _exit(125);
    }
    signal(SIGPIPE, SIG_DFL);
    fexecve(p->exe, argv, environ);
    if (errno == ENOENT && fcntl(p->exe, F_SETFD, 0) == 0) /* a script: its interpreter */
        fexecve(p->exe, argv, environ);                    /* opens /dev/fd/N */
    say("mfc: cannot execute bwrap\n");
    _exit(127);
}

/* ---- running --------------------------------------------------------------------- */

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

/* The output's tail, after the caller's mask (withheld when it fails). */
static void keep_tail(const struct sandbox_spec *sp, char *ring, size_t total,
                      struct sandbox_result *res)
{
    size_t n = total < SANDBOX_RING ? total : SANDBOX_RING;
    char *lin = malloc(SANDBOX_RING);
    if (!lin) {
        snprintf(res->tail, sizeof res->tail, "(output withheld: out of memory)");
        return;
    }
    size_t at = total <= SANDBOX_RING ? 0 : total % SANDBOX_RING;
    memcpy(lin, ring + at, n - at);
    memcpy(lin + n - at, ring, at);
    if (sp->mask && sp->mask(sp->mask_arg, lin, n) != 0)
        snprintf(res->tail, sizeof res->tail,
                 "(output withheld: the secrets of this step could not be masked in it)");
    else
        sandbox_tail_lines(lin, n, SANDBOX_TAIL_LINES, res->tail, sizeof res->tail);
    memset(lin, 0, n);
    free(lin);
}

int sandbox_run(const struct sandbox_spec *sp, struct sandbox_result *res, struct mf_err *err)
{
    char exe[PATH_MAX], *ring = NULL;
    size_t total = 0;
    int fds[2] = {-1, -1}, devnull = -1, timed_out = 0, st = 0;
    struct prep p;
    memset(&p, 0, sizeof p);
    p.exe = -1;
    int rc = find_bwrap(sp->bwrap ? sp->bwrap : "bwrap", exe, err);
    if (!rc)
        rc = prepare(sp, exe, &p, err);
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
        child(&p, fds[1], devnull, sp->mem_limit);
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
        keep_tail(sp, ring, total, res);
    }
    for (int i = 0; i < 2; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    if (devnull >= 0)
        close(devnull);
    if (ring)
        memset(ring, 0, SANDBOX_RING);
    free(ring);
    prep_fini(&p);
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
    p.mask = NULL;
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
                      "with --privileged or --security-opt seccomp=unconfined%s",
                      why[0]          ? why
                      : res.timed_out ? "it timed out"
                                      : "it failed",
                      geteuid() == 0 ? " (mfc runs as root, so bwrap runs as nobody, 65534)" : "");
}
