/*
 * sandbox.h: run one command inside a bubblewrap (bwrap) sandbox, for RUN.
 *
 * The sandbox (docs/run.md) gets new user, mount, pid, ipc, uts, cgroup and
 * network namespaces (--unshare-all --unshare-user; --share-net only when
 * asked), all capabilities dropped, a fresh root that holds read-only binds
 * of the host's /usr, /bin, /sbin, /lib* and /etc (symlinks kept as
 * symlinks), --dev /dev, --proc /proc, a private tmpfs /tmp, then the
 * caller's binds in order, and the root remounted read-only. The host
 * environment is cleared; only the caller's KEY=VALUE entries are set.
 * bwrap runs with --die-with-parent and --new-session, in a process group of
 * its own, with stdin from /dev/null and stdout+stderr captured (the last
 * lines are kept for error messages). A timeout kills the process group
 * (and with it the sandbox: --die-with-parent, pid namespace); a memory
 * limit is RLIMIT_AS on bwrap and everything it starts.
 *
 * Nothing here runs a command unsandboxed: when bwrap is missing or cannot
 * create namespaces, sandbox_probe says so and names the fix.
 *
 * Owns nothing past one call; no globals. Safe to call from worker threads
 * (the child does only async-signal-safe work between fork and exec).
 */
#ifndef MFC_SANDBOX_H
#define MFC_SANDBOX_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

#define SANDBOX_TAIL_LINES 6    /* output lines kept for the error message */
#define SANDBOX_TAIL_MAX 240    /* bytes of them (an error message is 512 in all) */
#define SANDBOX_RING 8192       /* bytes of output remembered while it runs */
#define SANDBOX_MAX_ARGS 16384  /* entries of the bwrap argv we agree to build */

/* One bind mount into the sandbox. */
struct sandbox_bind {
    const char *src; /* borrowed: host path (file or directory) */
    const char *dst; /* borrowed: absolute path inside the sandbox */
    int rw;          /* 1: writable (--bind), 0: read-only (--ro-bind) */
};

struct sandbox_spec {
    const char *bwrap;               /* borrowed: the bwrap binary (a path or a name
                                        looked up in $PATH); NULL: "bwrap" */
    const char *const *argv;         /* borrowed: the command inside, argc entries */
    size_t argc;
    const char *const *env;          /* borrowed: "KEY=VALUE" entries, n_env of them */
    size_t n_env;
    const struct sandbox_bind *binds; /* borrowed: mounted in order after the base */
    size_t n_binds;
    int share_net;                   /* 1: keep the host's network (--network=host) */
    const char *cwd;                 /* borrowed: directory inside; NULL: "/" */
    int64_t timeout_ms;              /* 0: none */
    uint64_t mem_limit;              /* RLIMIT_AS in bytes; 0: none */
};

struct sandbox_result {
    int status;                    /* exit status when exited, else -1 */
    int signal;                    /* the signal that ended bwrap, else 0 */
    int timed_out;                 /* 1: killed because timeout_ms passed */
    char tail[SANDBOX_TAIL_MAX];   /* the last output lines, '\n'-separated, or "" */
};

/* Builds bwrap's argv for sp (NULL-terminated, malloc'd array of malloc'd
 * strings; free with sandbox_argv_free). MF_EINVAL for a relative dst or an
 * empty command; MF_ENOMEM past SANDBOX_MAX_ARGS. On failure *argv is NULL. */
int sandbox_argv(const struct sandbox_spec *sp, char ***argv, size_t *argc, struct mf_err *err);
void sandbox_argv_free(char **argv);

/* Runs sp. Returns 0 when the command ran (whatever its status: see res);
 * MF_EIO when it could not be started (fork, pipe, bwrap not found: named),
 * with res untouched then. */
int sandbox_run(const struct sandbox_spec *sp, struct sandbox_result *res, struct mf_err *err);

/* Runs `true` in the sandbox sp describes (its command is ignored). 0 when
 * it works; MF_EUNSUPPORTED when bwrap is missing or cannot create the
 * namespaces, with a message quoting bwrap's error and naming the fix. */
int sandbox_probe(const struct sandbox_spec *sp, struct mf_err *err);

/* The last at most max_lines lines of the n bytes at buf, without trailing
 * blank lines, cut at the front to fit cap (NUL included); non-printable
 * bytes become '?'. For the error message; exported for tests. */
void sandbox_tail_lines(const char *buf, size_t n, size_t max_lines, char *out, size_t cap);

#endif
