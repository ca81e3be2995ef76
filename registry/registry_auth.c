/*
 * registry_auth.c: registry credentials: read from docker's config.json or
 * podman's auth.json, asked of docker-credential-* helpers, written by
 * `mfc login`, removed by `mfc logout`.
 *
 * Lookup order for a registry domain D (docker's, plus $REGISTRY_AUTH_FILE
 * first as podman does):
 *   1. credHelpers.D          -> docker-credential-<helper> get  (stdin: the server URL)
 *   2. auths.D.auth           -> base64 "user:password"
 *      auths.D.username/password, auths.D.identitytoken
 *   3. credsStore             -> docker-credential-<store> get
 *   4. nothing                -> anonymous (not an error)
 * An auths key matches D after dropping "http(s)://" and anything from the
 * first '/', so "https://index.docker.io/v1/" and podman's "host/repo" keys
 * work; docker.io also answers to index.docker.io.
 *
 * Owns nothing beyond a call. Secrets live in struct registry_cred and are
 * wiped after use; no message here ever contains one. The auth file is
 * rewritten whole (tmp + fsync + rename) with mode 0600, so a crash leaves
 * the old file or the new one.
 */
#include "registry/registry.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/file.h"
#include "common/json.h"
#include "registry/registry_int.h"

#define HELPER_OUT_MAX (64u << 10) /* bytes of a credential helper's answer */
#define HELPER_TIMEOUT_MS 30000

extern char **environ;

void registry_cred_wipe(struct registry_cred *c)
{
    if (c)
        memset(c, 0, sizeof *c);
}

const char *registry_auth_key(const char *domain)
{
    return strcmp(domain, "docker.io") == 0 ? "https://index.docker.io/v1/" : domain;
}

/* 1 when an auths key names domain. */
static int key_matches(const char *key, const char *domain)
{
    if (strncmp(key, "https://", 8) == 0)
        key += 8;
    else if (strncmp(key, "http://", 7) == 0)
        key += 7;
    size_t n = strcspn(key, "/");
    if (strlen(domain) == n && strncmp(key, domain, n) == 0)
        return 1;
    return strcmp(domain, "docker.io") == 0 && n == 15 && strncmp(key, "index.docker.io", n) == 0;
}

static int helper_name_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n >= 64)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!(s[i] == '-' || s[i] == '_' || s[i] == '.' || (s[i] >= 'a' && s[i] <= 'z') ||
              (s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= '0' && s[i] <= '9')))
            return 0;
    return 1;
}

static int copy_field(char *dst, size_t cap, const char *src, struct mf_err *err)
{
    if (strlen(src) >= cap)
        return mf_err_set(err, MF_ERANGE, "a credential in the auth file is too long");
    /* Credentials end up in HTTP headers (Basic, Bearer): a CR or LF there
     * would split the request, so no control character is ever accepted. */
    for (const unsigned char *p = (const unsigned char *)src; *p; p++)
        if (*p < 0x20 || *p == 0x7f)
            return mf_err_set(err, MF_EFORMAT,
                              "a credential in the auth file contains a control character");
    snprintf(dst, cap, "%s", src);
    return 0;
}

/* auths.<key> entry -> c. MF_ENOTFOUND when it holds no credentials (a
 * credsStore placeholder "{}"). */
static int entry_creds(const json_t *e, struct registry_cred *c, struct mf_err *err)
{
    const char *auth = json_string_value(json_object_get(e, "auth"));
    const char *user = json_string_value(json_object_get(e, "username"));
    const char *pass = json_string_value(json_object_get(e, "password"));
    const char *idt = json_string_value(json_object_get(e, "identitytoken"));
    if (idt && *idt)
        return copy_field(c->user, sizeof c->user, "<token>", err) ||
               copy_field(c->secret, sizeof c->secret, idt, err);
    if (user && *user && pass)
        return copy_field(c->user, sizeof c->user, user, err) ||
               copy_field(c->secret, sizeof c->secret, pass, err);
    if (!auth || !*auth)
        return MF_ENOTFOUND;
    char plain[REGISTRY_USER_MAX + REGISTRY_SECRET_MAX];
    size_t n = 0;
    int rc = registry_b64_decode(auth, strlen(auth), plain, sizeof plain, &n, err);
    char *colon = rc == 0 ? memchr(plain, ':', n) : NULL;
    if (rc == 0 && (!colon || memchr(plain, '\0', n)))
        rc = mf_err_set(err, MF_EFORMAT, "an auth entry is not base64 of \"user:password\"");
    if (rc == 0) {
        *colon = '\0';
        rc = copy_field(c->user, sizeof c->user, plain, err);
        if (rc == 0)
            rc = copy_field(c->secret, sizeof c->secret, colon + 1, err);
    }
    memset(plain, 0, sizeof plain);
    return rc;
}

int registry_auth_parse(const char *text, size_t len, const char *domain, struct registry_cred *c,
                        char helper[64], struct mf_err *err)
{
    memset(c, 0, sizeof *c);
    helper[0] = '\0';
    if (len > REGISTRY_AUTH_FILE_MAX)
        return mf_err_set(err, MF_ENOMEM, "the auth file is larger than %u bytes",
                          REGISTRY_AUTH_FILE_MAX);
    json_t *v = mf_json_parse(text, len, "auth file", err);
    if (!v)
        return err ? err->code : MF_EFORMAT;
    int rc = MF_ENOTFOUND;
    const char *h = json_string_value(json_object_get(json_object_get(v, "credHelpers"), domain));
    if (h && helper_name_ok(h)) {
        snprintf(helper, 64, "%s", h);
        rc = 0;
    }
    const char *key;
    json_t *e;
    json_object_foreach (json_object_get(v, "auths"), key, e) {
        if (rc != MF_ENOTFOUND)
            break;
        if (key_matches(key, domain))
            rc = entry_creds(e, c, err);
    }
    const char *store = json_string_value(json_object_get(v, "credsStore"));
    if (rc == MF_ENOTFOUND && store && helper_name_ok(store)) {
        snprintf(helper, 64, "%s", store);
        rc = 0;
    }
    json_decref(v);
    if (rc != 0)
        memset(c, 0, sizeof *c);
    if (rc == MF_ENOTFOUND)
        mf_err_set(err, MF_ENOTFOUND, "no credentials for %s", domain);
    return rc;
}

/* ---- credential helpers ----------------------------------------------------------- */

/* Reads the child's stdout until EOF, HELPER_OUT_MAX or the timeout. */
static int read_child(int fd, struct mf_buf *out)
{
    char chunk[4096];
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int pr = poll(&p, 1, HELPER_TIMEOUT_MS);
        if (pr <= 0)
            return -1;
        ssize_t n = read(fd, chunk, sizeof chunk);
        if (n == 0)
            return 0;
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 || mf_buf_append(out, chunk, (size_t)n, NULL) != 0)
            return -1;
    }
}

/* Runs docker-credential-<name> get with server on stdin; out gets its stdout. */
static int run_helper(const char *name, const char *server, struct mf_buf *out, struct mf_err *err)
{
    char prog[96];
    snprintf(prog, sizeof prog, "docker-credential-%s", name);
    int in[2], outp[2];
    if (pipe2(in, O_CLOEXEC) != 0)
        return mf_err_sys(err, MF_EIO, errno, "cannot run %s", prog);
    if (pipe2(outp, O_CLOEXEC) != 0) {
        close(in[0]), close(in[1]);
        return mf_err_sys(err, MF_EIO, errno, "cannot run %s", prog);
    }
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in[0], 0);
    posix_spawn_file_actions_adddup2(&fa, outp[1], 1);
    char *argv[] = {prog, "get", NULL};
    pid_t pid;
    int sp = posix_spawnp(&pid, prog, &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(in[0]);
    close(outp[1]);
    int rc = 0;
    if (sp != 0) {
        rc = mf_err_sys(err, MF_ENOTFOUND, sp, "cannot run the credential helper %s", prog);
    } else {
        void (*old)(int) = signal(SIGPIPE, SIG_IGN); /* a helper that exits early */
        ssize_t w = write(in[1], server, strlen(server));
        signal(SIGPIPE, old);
        close(in[1]);
        in[1] = -1;
        int rd = w < 0 ? -1 : read_child(outp[0], out);
        if (rd != 0)
            kill(pid, SIGKILL);
        int st = 0;
        while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
            ;
        if (rd != 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
            rc = MF_ENOTFOUND; /* "credentials not found" is an exit status 1 */
    }
    if (in[1] >= 0)
        close(in[1]);
    close(outp[0]);
    return rc;
}

static int ask_helper(const char *helper, const char *domain, struct registry_cred *c,
                      struct mf_err *err)
{
    struct mf_buf out;
    mf_buf_init(&out, HELPER_OUT_MAX);
    int rc = run_helper(helper, registry_auth_key(domain), &out, err);
    json_t *v = rc == 0 ? mf_json_parse(out.data, out.len, "credential helper reply", NULL) : NULL;
    const char *u = json_string_value(json_object_get(v, "Username"));
    const char *s = json_string_value(json_object_get(v, "Secret"));
    if (rc == 0 && (!u || !s))
        rc = mf_err_set(err, MF_EFORMAT, "docker-credential-%s gave no Username and Secret",
                        helper);
    if (rc == 0)
        rc = copy_field(c->user, sizeof c->user, u, err) ||
                     copy_field(c->secret, sizeof c->secret, s, err)
                 ? MF_ERANGE
                 : 0;
    json_decref(v);
    if (out.data)
        memset(out.data, 0, out.len);
    mf_buf_free(&out);
    if (rc == MF_ENOTFOUND)
        rc = 0; /* the helper has nothing for this registry: anonymous */
    if (rc != 0)
        registry_cred_wipe(c);
    return rc;
}

/* ---- lookup ----------------------------------------------------------------------- */

/* The file `mfc login` writes and docker reads: $DOCKER_CONFIG/config.json,
 * else ~/.docker/config.json. *path malloc'd. */
static int docker_config_path(const struct registry_opts *o, char **path, struct mf_err *err)
{
    const char *dir = getenv("DOCKER_CONFIG");
    const char *home = getenv("HOME");
    struct mf_buf b;
    mf_buf_init(&b, 8192);
    int rc;
    if (o->docker_config)
        rc = mf_buf_puts(&b, o->docker_config, err);
    else if (dir && *dir)
        rc = mf_buf_printf(&b, err, "%s/config.json", dir);
    else if (home && *home)
        rc = mf_buf_printf(&b, err, "%s/.docker/config.json", home);
    else
        rc = mf_err_set(err, MF_ENOTFOUND, "neither HOME nor DOCKER_CONFIG is set");
    if (rc == 0)
        *path = mf_buf_take(&b);
    mf_buf_free(&b);
    return rc;
}

/* Looks domain up in one file; MF_ENOTFOUND when the file or the entry is absent. */
static int lookup_file(const char *path, const char *domain, struct registry_cred *c,
                       struct mf_err *err)
{
    char *text = NULL;
    size_t len = 0;
    char helper[64];
    if (mf_file_read(path, REGISTRY_AUTH_FILE_MAX, &text, &len, NULL) != 0)
        return MF_ENOTFOUND;
    int rc = registry_auth_parse(text, len, domain, c, helper, err);
    memset(text, 0, len);
    free(text);
    if (rc == 0 && helper[0])
        rc = ask_helper(helper, domain, c, err);
    if (rc != 0 && rc != MF_ENOTFOUND)
        mf_err_prefix(err, "%s", path);
    return rc;
}

int registry_auth_lookup(const struct registry_opts *o, const char *domain,
                         struct registry_cred *c, struct mf_err *err)
{
    memset(c, 0, sizeof *c);
    int rc = MF_ENOTFOUND;
    if (o->auth_file)
        rc = lookup_file(o->auth_file, domain, c, err);
    char *path = NULL;
    if (rc == MF_ENOTFOUND && docker_config_path(o, &path, NULL) == 0)
        rc = lookup_file(path, domain, c, err);
    free(path);
    if (rc == MF_ENOTFOUND) {
        memset(c, 0, sizeof *c);
        rc = 0;
    }
    return rc;
}

/* ---- login/logout ----------------------------------------------------------------- */

static int load_doc(const char *path, json_t **doc, struct mf_err *err)
{
    char *text = NULL;
    size_t len = 0;
    if (access(path, F_OK) != 0) {
        *doc = json_object();
        return *doc ? 0 : mf_err_set(err, MF_ENOMEM, "out of memory");
    }
    int rc = mf_file_read(path, REGISTRY_AUTH_FILE_MAX, &text, &len, err);
    *doc = rc == 0 ? mf_json_parse(text, len, path, err) : NULL;
    if (rc == 0 && !json_is_object(*doc)) {
        json_decref(*doc);
        *doc = NULL;
        rc = mf_err_set(err, MF_EFORMAT, "%s is not a JSON object", path);
    }
    if (text)
        memset(text, 0, len);
    free(text);
    return rc;
}

/* Writes doc to path: tmp file with mode 0600, then rename. */
static int save_doc(const char *path, const json_t *doc, struct mf_err *err)
{
    struct mf_buf b;
    struct mf_file_tmp t = {.fd = -1};
    mf_buf_init(&b, REGISTRY_AUTH_FILE_MAX);
    char *dir = strdup(path);
    char *slash = dir ? strrchr(dir, '/') : NULL;
    if (slash && slash != dir)
        *slash = '\0';
    int rc = dir ? 0 : mf_err_set(err, MF_ENOMEM, "out of memory");
    if (rc == 0 && slash && slash != dir)
        rc = mf_file_mkdirs(dir, err);
    if (rc == 0)
        rc = mf_json_dump(doc, JSON_INDENT(1) | JSON_SORT_KEYS, &b, err);
    if (rc == 0)
        rc = mf_buf_putc(&b, '\n', err);
    if (rc == 0)
        rc = mf_file_tmp_open(&t, path, err);
    if (rc == 0 && fchmod(t.fd, 0600) != 0)
        rc = mf_err_sys(err, MF_EIO, errno, "%s", path);
    if (rc == 0)
        rc = mf_file_tmp_write(&t, b.data, b.len, err);
    if (rc == 0)
        rc = mf_file_tmp_commit(&t, err);
    else
        mf_file_tmp_abort(&t);
    if (b.data)
        memset(b.data, 0, b.len);
    mf_buf_free(&b);
    free(dir);
    return rc;
}

static int auth_file_path(const struct registry_opts *o, char **path, struct mf_err *err)
{
    if (o->auth_file) {
        *path = strdup(o->auth_file);
        return *path ? 0 : mf_err_set(err, MF_ENOMEM, "out of memory");
    }
    return docker_config_path(o, path, err);
}

/* Stores user:secret for domain in the login file. */
static int store_login(const struct registry_opts *o, const char *domain, const char *user,
                       const char *secret, struct mf_err *err)
{
    char *path = NULL, *enc = NULL;
    json_t *doc = NULL;
    struct mf_buf pair;
    mf_buf_init(&pair, REGISTRY_USER_MAX + REGISTRY_SECRET_MAX);
    int rc = auth_file_path(o, &path, err);
    if (rc == 0)
        rc = load_doc(path, &doc, err);
    if (rc == 0)
        rc = mf_buf_printf(&pair, err, "%s:%s", user, secret);
    if (rc == 0)
        rc = registry_b64_encode(pair.data, pair.len, &enc, err);
    json_t *auths = doc ? json_object_get(doc, "auths") : NULL;
    if (rc == 0 && !json_is_object(auths)) {
        auths = json_object();
        rc = json_object_set_new(doc, "auths", auths) ? mf_err_set(err, MF_ENOMEM, "out of memory")
                                                      : 0;
    }
    if (rc == 0 && json_object_set_new(auths, registry_auth_key(domain),
                                       json_pack("{s:s}", "auth", enc)) != 0)
        rc = mf_err_set(err, MF_ENOMEM, "out of memory");
    if (rc == 0)
        rc = save_doc(path, doc, err);
    if (pair.data)
        memset(pair.data, 0, pair.len);
    mf_buf_free(&pair);
    if (enc)
        memset(enc, 0, strlen(enc));
    free(enc);
    json_decref(doc);
    free(path);
    return rc;
}

int registry_login(const struct registry_opts *o, const char *registry, const char *user,
                   const char *secret, struct mf_err *err)
{
    struct registry_ref ref;
    char name[REGISTRY_HOST_MAX + 16];
    snprintf(name, sizeof name, "%s/x", registry);
    int rc = registry_ref_parse(strcmp(registry, "docker.io") == 0 ? "x" : name, &ref, err);
    if (rc == 0 && (strlen(user) >= REGISTRY_USER_MAX || strlen(secret) >= REGISTRY_SECRET_MAX ||
                    strchr(user, ':')))
        rc = mf_err_set(err, MF_EINVAL, "user name (no ':') or password too long for %s",
                        registry);
    struct registry_stats st;
    struct registry_client *c = NULL;
    if (rc == 0)
        rc = registry_client_open(&c, &ref, "pull", o, &st, err);
    if (rc == 0) {
        registry_cred_wipe(&c->cred); /* check the new credentials, not the stored ones */
        snprintf(c->cred.user, sizeof c->cred.user, "%s", user);
        snprintf(c->cred.secret, sizeof c->cred.secret, "%s", secret);
        rc = registry_client_ping(c, err);
        /* the only credentials sent were these: a refusal is about them */
        if (rc == MF_EINVAL && strstr(err->msg, "authentication failed"))
            rc = mf_err_set(err, MF_EINVAL,
                            "login to %s failed: the registry refused the user name or password "
                            "for '%s' (HTTP 401 Unauthorized); nothing was stored",
                            registry, user);
    }
    registry_client_close(c);
    if (rc == 0)
        rc = store_login(o, ref.domain, user, secret, err);
    return rc;
}

int registry_logout(const struct registry_opts *o, const char *registry, struct mf_err *err)
{
    char *path = NULL;
    json_t *doc = NULL;
    int rc = auth_file_path(o, &path, err);
    if (rc == 0)
        rc = load_doc(path, &doc, err);
    json_t *auths = doc ? json_object_get(doc, "auths") : NULL;
    const char *key;
    json_t *e;
    void *tmp;
    int found = 0;
    json_object_foreach_safe (auths, tmp, key, e) {
        if (key_matches(key, registry)) {
            found = 1;
            json_object_del(auths, key);
        }
    }
    if (rc == 0 && !found)
        rc = mf_err_set(err, MF_ENOTFOUND, "not logged in to %s", registry);
    if (rc == 0)
        rc = save_doc(path, doc, err);
    json_decref(doc);
    free(path);
    return rc;
}
