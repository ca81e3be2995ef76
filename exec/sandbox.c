/*
 * sandbox.c: bubblewrap's argv for a RUN step, the /etc it gets, and the
 * tail of its output kept for errors (sandbox.h). Running it is
 * sandbox_run.c.
 *
 * Why a fresh root with a few read-only binds instead of --ro-bind / /: the
 * sandbox must not see the host's home, the build store, the test's temp
 * directory or the host's /etc at all, and bwrap needs a writable root to
 * create the mount points /context, /inputs, /out and the cache targets; the
 * root is remounted read-only once everything is mounted.
 */
#include "exec/sandbox.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sys/stat.h>

#include "common/buf.h"

/* The host directories every sandbox sees, read-only. */
static const char *const base_dirs[] = {"/usr", "/bin", "/sbin", "/lib", "/lib32",
                                        "/lib64", "/libx32"};

/* Host files of /etc that hold no secret and that tools read: the dynamic
 * linker's cache, Debian's alternatives (awk, editor, ...), the time zone. */
static const char *const etc_public[] = {
    "/etc/alternatives", "/etc/ld.so.cache",  "/etc/ld.so.conf",     "/etc/ld.so.conf.d",
    "/etc/localtime",    "/etc/os-release",   "/etc/protocols",      "/etc/services",
    "/etc/mime.types",   "/etc/ssl/openssl.cnf"};
/* ... and what TLS and name lookups need, with the host's network only. */
static const char *const etc_net[] = {"/etc/ssl/certs", "/etc/pki", "/etc/ca-certificates",
                                      "/etc/gai.conf"};

#define HOSTNAME "mfc-run"

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

static void push_fd(struct argv_b *b, const char *perms, const char *opt, int fd, const char *dst)
{
    char n[16];
    snprintf(n, sizeof n, "%d", fd);
    push3(b, "--perms", perms, NULL);
    push3(b, opt, n, dst);
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

/* /etc: mfc's own files from fds[0..SANDBOX_ETC_FILES), then the public
 * host files that exist (bwrap skips a missing --ro-bind-try source). */
static void etc(struct argv_b *b, const struct sandbox_spec *sp, const int *fds)
{
    for (int i = 0; i < SANDBOX_ETC_FILES; i++) {
        const char *path = NULL;
        sandbox_etc(NULL, i, NULL, &path, NULL);
        push_fd(b, "0644", "--file", fds ? fds[i] : 3 + i, path);
    }
    for (size_t i = 0; i < sizeof etc_public / sizeof etc_public[0]; i++)
        push3(b, "--ro-bind-try", etc_public[i], etc_public[i]);
    for (size_t i = 0; sp->share_net && i < sizeof etc_net / sizeof etc_net[0]; i++)
        push3(b, "--ro-bind-try", etc_net[i], etc_net[i]);
}

static int check_spec(const struct sandbox_spec *sp, struct mf_err *err)
{
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
    return 0;
}

int sandbox_argv(const struct sandbox_spec *sp, const int *fds, char ***argv, size_t *argc,
                 struct mf_err *err)
{
    struct argv_b b = {0};
    char id[16];
    *argv = NULL;
    int rc = check_spec(sp, err);
    if (rc)
        return rc;
    snprintf(id, sizeof id, "%d", sp->root ? 0 : SANDBOX_USER);
    push(&b, sp->bwrap ? sp->bwrap : "bwrap");
    push(&b, "--unshare-all");
    push(&b, "--unshare-user");
    if (sp->share_net)
        push(&b, "--share-net");
    push3(&b, "--uid", id, NULL);
    push3(&b, "--gid", id, NULL);
    push(&b, "--disable-userns"); /* no nested namespace regains capabilities */
    push3(&b, "--hostname", HOSTNAME, NULL);
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
    etc(&b, sp, fds);
    push3(&b, "--dev", "/dev", NULL);
    push3(&b, "--proc", "/proc", NULL);
    push3(&b, "--tmpfs", "/tmp", NULL);
    for (size_t i = 0, k = SANDBOX_ETC_FILES; i < sp->n_binds; i++) {
        const struct sandbox_bind *bd = &sp->binds[i];
        if (bd->data)
            push_fd(&b, "0400", "--ro-bind-data", fds ? fds[k] : 3 + (int)k, bd->dst), k++;
        else
            push3(&b, bd->rw ? "--bind" : "--ro-bind", bd->src, bd->dst);
    }
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

/* ---- /etc ---------------------------------------------------------------------- */

/* The host's file at path, if it reads, into out; 0 when absent or unreadable. */
static int host_file(const char *path, struct mf_buf *out, struct mf_err *err)
{
    char buf[4096];
    size_t n;
    FILE *f = fopen(path, "re");
    int rc = 0;
    if (!f)
        return 0;
    while (!rc && (n = fread(buf, 1, sizeof buf, f)) > 0)
        rc = mf_buf_append(out, buf, n, err);
    fclose(f);
    return rc;
}

int sandbox_etc(const struct sandbox_spec *sp, int i, struct mf_buf *out, const char **path,
                struct mf_err *err)
{
    static const char *const paths[SANDBOX_ETC_FILES] = {
        "/etc/passwd", "/etc/group", "/etc/hosts", "/etc/nsswitch.conf", "/etc/resolv.conf"};
    if (i < 0 || i >= SANDBOX_ETC_FILES)
        return mf_err_set(err, MF_EINVAL, "no such /etc file");
    *path = paths[i];
    if (!out)
        return 0;
    mf_buf_reset(out);
    int rc = 0;
    switch (i) {
    case 0:
        rc = mf_buf_printf(out, err,
                           "root:x:0:0:root:/tmp:/bin/sh\n"
                           "mfc:x:%d:%d:mfc build step:/tmp:/bin/sh\n"
                           "nobody:x:%d:%d:nobody:/nonexistent:/usr/sbin/nologin\n",
                           SANDBOX_USER, SANDBOX_USER, SANDBOX_NOBODY, SANDBOX_NOBODY);
        break;
    case 1:
        rc = mf_buf_printf(out, err, "root:x:0:\nmfc:x:%d:\nnogroup:x:%d:\n", SANDBOX_USER,
                           SANDBOX_NOBODY);
        break;
    case 2:
        if (sp->share_net)
            rc = host_file("/etc/hosts", out, err);
        if (!rc && !out->len)
            rc = mf_buf_puts(out, "127.0.0.1\tlocalhost " HOSTNAME "\n"
                                  "::1\tlocalhost ip6-localhost ip6-loopback\n", err);
        break;
    case 3:
        rc = mf_buf_puts(out, "passwd: files\ngroup: files\nshadow: files\n"
                              "hosts: files dns\nnetworks: files\nprotocols: files\n"
                              "services: files\n", err);
        break;
    default:
        if (sp->share_net)
            rc = host_file("/etc/resolv.conf", out, err);
        if (!rc && !out->len)
            rc = mf_buf_puts(out, "# no network in this RUN step (RUN --network=host and "
                                  "mfc build --allow network.host give it one)\n", err);
        break;
    }
    return rc;
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
