/*
 * sandbox.h: run one command inside a bubblewrap (bwrap) sandbox, for RUN.
 *
 * The sandbox (docs/run.md) gets new user, mount, pid, ipc, uts, cgroup and
 * network namespaces (--unshare-all --unshare-user; --share-net only when
 * asked; no further user namespaces inside), all capabilities dropped, and a
 * fresh root holding read-only binds of the host's tool folders (/usr, /bin,
 * /sbin, /lib*; symlinks kept as symlinks), a synthesized /etc (passwd,
 * group, hosts, nsswitch.conf, resolv.conf written by mfc, plus the few
 * public host files tools read: the dynamic linker's cache, alternatives,
 * time zone; CA certificates only with the host's network), --dev /dev,
 * --proc /proc, a private tmpfs /tmp, then the caller's binds in order, and
 * the root remounted read-only. Nothing else of the host's /etc (shadow,
 * ssh keys, credentials) is there at all.
 *
 * Who the step is: uid and gid SANDBOX_USER inside (0 with spec.root, RUN
 * --user=0), in a user namespace that maps it to the invoking user outside,
 * or to SANDBOX_NOBODY when mfc runs as root: bwrap is then started as
 * nobody, after mfc has bind-mounted the caller's sources, in a private
 * mount namespace, at paths nobody can reach (sandbox.c, "staging").
 *
 * The host environment is cleared; only the caller's KEY=VALUE entries are
 * set. bwrap runs with --die-with-parent and --new-session, in a process
 * group of its own, with stdin from /dev/null and stdout+stderr captured (the
 * last lines are kept for error messages, after the caller's mask hid its
 * secrets). A timeout kills the process group (and with it the sandbox:
 * --die-with-parent, pid namespace); a memory limit is RLIMIT_AS on bwrap
 * and everything it starts.
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
#define SANDBOX_USER 1000       /* the step's uid and gid inside, unless spec.root */
#define SANDBOX_NOBODY 65534    /* the uid and gid outside when mfc runs as root */
#define SANDBOX_ETC_FILES 5     /* files of /etc that mfc writes (sandbox_etc) */
#define SANDBOX_ETC_MAX 65536   /* bytes of one of them (a host resolv.conf or hosts) */

/* One bind mount into the sandbox. */
struct sandbox_bind {
    const char *src; /* borrowed: host path (file or directory) */
    const char *dst; /* borrowed: absolute path inside the sandbox */
    int rw;          /* 1: writable (--bind), 0: read-only (--ro-bind) */
    int data;        /* 1: src's bytes copied into a read-only file at dst that the
                        step's user owns, mode 0400 (secrets: readable inside whoever
                        owns src); rw is then ignored */
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
    int root;                        /* 1: uid and gid 0 inside (RUN --user=0);
                                        0: SANDBOX_USER */
    /* Hides secrets in the command's output before its tail is kept: gets the
     * last SANDBOX_RING bytes (or fewer), returns 0, or -1 when it cannot
     * (the tail is then withheld). NULL: the output is kept as it is. */
    int (*mask)(void *arg, char *out, size_t n);
    void *mask_arg;                  /* borrowed: mask's first argument */
};

struct sandbox_result {
    int status;                    /* exit status when exited, else -1 */
    int signal;                    /* the signal that ended bwrap, else 0 */
    int timed_out;                 /* 1: killed because timeout_ms passed */
    char tail[SANDBOX_TAIL_MAX];   /* the last output lines, '\n'-separated, or "" */
};

/* Builds bwrap's argv for sp (NULL-terminated, malloc'd array of malloc'd
 * strings; free with sandbox_argv_free). fds are the descriptors bwrap
 * copies files from: SANDBOX_ETC_FILES of sandbox_etc's files in its order,
 * then one per data bind in order; NULL numbers them 3, 4, ... (for tests).
 * MF_EINVAL for a relative dst, an environment entry that is not KEY=VALUE
 * or an empty command; MF_ENOMEM past SANDBOX_MAX_ARGS. On failure *argv is
 * NULL. */
int sandbox_argv(const struct sandbox_spec *sp, const int *fds, char ***argv, size_t *argc,
                 struct mf_err *err);
void sandbox_argv_free(char **argv);

/* Runs sp. Returns 0 when the command ran (whatever its status: see res);
 * MF_EIO when it could not be started (fork, pipe, bwrap not found: named),
 * with res untouched then. */
int sandbox_run(const struct sandbox_spec *sp, struct sandbox_result *res, struct mf_err *err);

/* Runs `true` in the sandbox sp describes (its command is ignored). 0 when
 * it works; MF_EUNSUPPORTED when bwrap is missing or cannot create the
 * namespaces, with a message quoting bwrap's error and naming the fix. */
int sandbox_probe(const struct sandbox_spec *sp, struct mf_err *err);

/* The text of synthesized /etc file i (0 <= i < SANDBOX_ETC_FILES) for sp,
 * into out (reset first); *path gets its path inside ("/etc/passwd", ...).
 * passwd and group name root, the step's user and nobody; hosts names
 * localhost; nsswitch.conf reads files (and dns); resolv.conf is empty
 * without the network. With sp->share_net, hosts and resolv.conf are the
 * host's (at most SANDBOX_ETC_MAX bytes each; missing: as without).
 * MF_ENOMEM. */
struct mf_buf;
int sandbox_etc(const struct sandbox_spec *sp, int i, struct mf_buf *out, const char **path,
                struct mf_err *err);

/* The last at most max_lines lines of the n bytes at buf, without trailing
 * blank lines, cut at the front to fit cap (NUL included); non-printable
 * bytes become '?'. For the error message; exported for tests. */
void sandbox_tail_lines(const char *buf, size_t n, size_t max_lines, char *out, size_t cap);

#endif
