/*
 * run_server.c: the mfc-serve process behind `mfc serve` and `mfc run`:
 * finding the binary, its argv for a model (byte ranges of blobs for an
 * image), a free loopback port, starting it with its output kept in a memfd
 * (shown only when it fails to start), waiting for /health, stopping it.
 */
#include "cli/run.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>

#define SERVER_BIN "mfc-serve"
#define LOG_TAIL 1500 /* bytes of the server's output quoted when it fails to start */

static int is_exec_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode) && access(path, X_OK) == 0;
}

int run_locate_server(char **path, struct mf_err *err)
{
    const char *env = getenv("MFC_SERVE");
    *path = NULL;
    if (env && env[0]) {
        if (!is_exec_file(env))
            return mf_err_set(err, MF_ENOTFOUND, "MFC_SERVE=%s is not an executable file", env);
        *path = strdup(env);
        return *path ? 0 : mf_err_set(err, MF_ENOMEM, "out of memory");
    }
    char *self = realpath("/proc/self/exe", NULL);
    char *slash = self ? strrchr(self, '/') : NULL;
    if (slash) {
        size_t n = (size_t)(slash - self) + sizeof "/" SERVER_BIN;
        if ((*path = malloc(n)))
            snprintf(*path, n, "%.*s/%s", (int)(slash - self), self, SERVER_BIN);
        if (*path && !is_exec_file(*path)) {
            free(*path);
            *path = NULL;
        }
    }
    free(self);
    return 0;
}

int run_find_server(char **path, struct mf_err *err)
{
    int rc = run_locate_server(path, err);
    if (rc == 0 && !*path)
        return mf_err_set(err, MF_ENOTFOUND,
                          "no %s next to mfc (build it, or set MFC_SERVE to the binary)",
                          SERVER_BIN);
    return rc;
}

void run_argv_free(char **argv)
{
    for (size_t i = 0; argv && argv[i]; i++)
        free(argv[i]);
    free(argv);
}

struct argv_b {
    char **v;
    size_t n, cap;
    int oom;
};

static void push(struct argv_b *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void push(struct argv_b *a, const char *fmt, ...)
{
    if (a->oom)
        return;
    if (a->n + 2 > a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 16;
        char **v = realloc(a->v, cap * sizeof *v);
        if (!v) {
            a->oom = 1;
            return;
        }
        a->v = v, a->cap = cap;
    }
    va_list ap;
    va_start(ap, fmt);
    int rc = vasprintf(&a->v[a->n], fmt, ap);
    va_end(ap);
    if (rc < 0) {
        a->oom = 1;
        return;
    }
    a->v[++a->n] = NULL;
}

int run_server_argv(const struct run_model *m, const char *bin, const char *name,
                    const char *host, int port, const char *api_key, char ***argv,
                    struct mf_err *err)
{
    struct argv_b a = {0};
    push(&a, "%s", bin);
    if (m->config_fd >= 0) {
        push(&a, "--config");
        push(&a, "/proc/self/fd/%d", m->config_fd);
        push(&a, "--config-name"); /* errors name the image's file, not the memfd */
        push(&a, "%s:/etc/mfc/model.yaml", name ? name : "image");
    }
    push(&a, "--model");
    push(&a, "%s", m->weights.path);
    if (m->weights.offset || m->weights.size) {
        push(&a, "--model-offset");
        push(&a, "%llu", (unsigned long long)m->weights.offset);
        push(&a, "--model-size");
        push(&a, "%llu", (unsigned long long)m->weights.size);
    }
    /* with a model.yaml the adapters (named or not) are in it, paths rewritten
     * to their blobs with offset: and size: */
    for (size_t i = 0; m->config_fd < 0 && i < m->n_adapters; i++) {
        const struct run_file *f = &m->adapters[i].file;
        push(&a, "--adapter");
        if (f->offset || f->size)
            push(&a, "%s=%s@%llu:%llu", m->adapters[i].name, f->path,
                 (unsigned long long)f->offset, (unsigned long long)f->size);
        else
            push(&a, "%s=%s", m->adapters[i].name, f->path);
    }
    if (m->config_fd < 0 && m->draft.path) { /* else model.yaml's draft: names it */
        push(&a, "--draft");
        push(&a, "%s@%llu:%llu", m->draft.path, (unsigned long long)m->draft.offset,
             (unsigned long long)m->draft.size);
    }
    if (name) {
        push(&a, "--name");
        push(&a, "%s", name);
    }
    if (host) {
        push(&a, "--host");
        push(&a, "%s", host);
    }
    if (port > 0) {
        push(&a, "--port");
        push(&a, "%d", port);
    }
    if (api_key) {
        push(&a, "--api-key");
        push(&a, "%s", api_key);
    }
    if (a.oom) {
        run_argv_free(a.v);
        return mf_err_set(err, MF_ENOMEM, "out of memory");
    }
    *argv = a.v;
    return 0;
}

int run_free_port(int *port, struct mf_err *err)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return mf_err_sys(err, MF_EIO, errno, "socket");
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof sa;
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 ||
        getsockname(fd, (struct sockaddr *)&sa, &len) != 0) {
        int e = errno;
        close(fd);
        return mf_err_sys(err, MF_EIO, e, "finding a free port on 127.0.0.1");
    }
    close(fd);
    *port = ntohs(sa.sin_port);
    return 0;
}

int run_server_start(char *const *argv, struct run_server *srv, struct mf_err *err)
{
    srv->pid = -1;
    srv->log_fd = memfd_create("mfc-serve.log", MFD_CLOEXEC);
    if (srv->log_fd < 0)
        return mf_err_sys(err, MF_EIO, errno, "memfd_create");
    fflush(NULL);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        close(srv->log_fd);
        srv->log_fd = -1;
        return mf_err_sys(err, MF_EIO, e, "fork");
    }
    if (pid == 0) {
        int null = open("/dev/null", O_RDONLY);
        if (null >= 0)
            dup2(null, 0);
        dup2(srv->log_fd, 1);
        dup2(srv->log_fd, 2);
        signal(SIGINT, SIG_IGN); /* Ctrl-C in the chat is for the chat, not the server */
        signal(SIGTERM, SIG_DFL);
        signal(SIGPIPE, SIG_DFL);
        /* the server goes when mfc run goes, however it goes (even SIGKILL) */
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent)
            _exit(1);
        execv(argv[0], argv);
        dprintf(2, "mfc: cannot execute %s (errno %d)\n", argv[0], errno);
        _exit(127);
    }
    srv->pid = pid;
    return 0;
}

/* The last LOG_TAIL bytes of the server's output, for an error message. */
static void log_tail(const struct run_server *srv, char *out, size_t cap)
{
    out[0] = 0;
    off_t end = lseek(srv->log_fd, 0, SEEK_END);
    if (end <= 0)
        return;
    off_t from = end > (off_t)(cap - 1) ? end - (off_t)(cap - 1) : 0;
    ssize_t n = pread(srv->log_fd, out, (size_t)(end - from), from);
    out[n > 0 ? n : 0] = 0;
    size_t l = strlen(out);
    while (l > 0 && (out[l - 1] == '\n' || out[l - 1] == ' '))
        out[--l] = 0;
}

static size_t discard(char *p, size_t size, size_t n, void *arg)
{
    (void)p, (void)arg;
    return size * n;
}

static long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int run_server_wait_ready(struct run_server *srv, const char *base_url, long timeout_ms,
                          struct mf_err *err)
{
    char url[256];
    snprintf(url, sizeof url, "%s/health", base_url);
    CURL *c = curl_easy_init();
    if (!c)
        return mf_err_set(err, MF_ENOMEM, "curl_easy_init failed");
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, discard);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 2000L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_NOPROXY, "*");
    long start = now_ms(), delay = 10;
    int rc = 0;
    for (;;) {
        int status;
        pid_t w = waitpid(srv->pid, &status, WNOHANG);
        if (w == srv->pid) {
            char tail[LOG_TAIL];
            srv->pid = -1;
            log_tail(srv, tail, sizeof tail);
            rc = mf_err_set(err, MF_EIO, "mfc-serve %s %d before it was ready%s%s",
                            WIFEXITED(status) ? "exited with status" : "was killed by signal",
                            WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status),
                            tail[0] ? ":\n" : "", tail);
            break;
        }
        long code = 0;
        if (curl_easy_perform(c) == CURLE_OK &&
            curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code) == CURLE_OK && code == 200)
            break;
        if (now_ms() - start > timeout_ms) {
            rc = mf_err_set(err, MF_EBUSY, "mfc-serve was not ready after %ld s (%s)",
                            timeout_ms / 1000, url);
            break;
        }
        struct timespec ts = {0, delay * 1000000L};
        nanosleep(&ts, NULL);
        if (delay < 200)
            delay *= 2;
    }
    curl_easy_cleanup(c);
    return rc;
}

void run_server_stop(struct run_server *srv)
{
    if (srv->pid > 0) {
        kill(srv->pid, SIGTERM);
        int status;
        long start = now_ms();
        while (waitpid(srv->pid, &status, WNOHANG) == 0) {
            if (now_ms() - start > 5000) {
                kill(srv->pid, SIGKILL);
                waitpid(srv->pid, &status, 0);
                break;
            }
            struct timespec ts = {0, 10 * 1000000L};
            nanosleep(&ts, NULL);
        }
        srv->pid = -1;
    }
    if (srv->log_fd >= 0)
        close(srv->log_fd);
    srv->log_fd = -1;
}
