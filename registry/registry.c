/*
 * registry.c: image references, WWW-Authenticate challenges, and the HTTP
 * session every registry operation goes through.
 *
 * Owns the curl handle and the Authorization value of one session; does not
 * own credentials storage (registry_auth.c) or the push/pull sequences
 * (registry_xfer.c). A session's auth state:
 *
 *   ANON     --request answered 2xx/3xx/4xx but 401---------------> ANON
 *   ANON     --401 Basic, we hold credentials [auth_answer]-------> BASIC  (send again)
 *   ANON     --401 Bearer [auth_answer -> fetch_token]------------> BEARER (send again)
 *   BEARER   --401 (token expired, other scope) [auth_answer]------> BEARER (send again)
 *   any      --401 on the request sent again-----------------------> FAILED "authentication failed"
 *
 * Invariants: (1) a request is sent at most twice; (2) the Authorization
 * header only goes to URLs under the registry's own base (libcurl drops it
 * on redirects to another host); (3) credentials and tokens never appear in
 * an mf_err, a log line or a progress note; (4) every header value is cut
 * at a fixed size and every body at a limit before it is looked at.
 */
#include "registry/registry.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "common/json.h"
#include "registry/registry_int.h"

#define DOCKER_HUB "docker.io"
#define DOCKER_HUB_API "registry-1.docker.io"

void registry_opts_init(struct registry_opts *o)
{
    memset(o, 0, sizeof *o);
    /* A blob up to 512 MiB goes in one PUT, a bigger one in 512 MiB PATCHes:
     * docker-registry treats each PATCH as a resumed upload, and at 16 MiB
     * the ~190 requests of a 3 GB layer cost 1.5-2x of one curl -T PUT
     * (bench/README.md, Image). */
    o->chunk_size = 512u << 20;
    o->connect_timeout_s = 15;
    o->stall_timeout_s = 60;
    const char *f = getenv("REGISTRY_AUTH_FILE");
    o->auth_file = f && *f ? f : NULL;
}

/* ---- references ------------------------------------------------------------------- */

static int is_lower_alnum(char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9');
}

/* A separator inside a path component: ".", "_", "__" or a run of "-". */
static int sep_valid(const char *s, size_t k)
{
    if (k == 1)
        return 1;
    if (k == 2 && s[0] == '_' && s[1] == '_')
        return 1;
    for (size_t j = 0; j < k; j++)
        if (s[j] != '-')
            return 0;
    return k > 0;
}

/* The distribution spec's name grammar:
 * [a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*(\/[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*)* */
static int repo_valid(const char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        if (!is_lower_alnum(s[i]))
            return 0;
        while (i < n && is_lower_alnum(s[i]))
            i++;
        if (i == n)
            return 1;
        if (s[i] == '/') {
            i++;
            continue;
        }
        size_t sep = i;
        while (i < n && (s[i] == '.' || s[i] == '_' || s[i] == '-'))
            i++;
        if (!sep_valid(s + sep, i - sep))
            return 0;
        if (i == n || !is_lower_alnum(s[i]))
            return 0;
    }
    return 0; /* empty, or a trailing "/" */
}

static int tag_valid(const char *s, size_t n)
{
    if (n == 0 || n >= REGISTRY_TAG_MAX)
        return 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        int ok = isalnum(ch) || ch == '_' || (i > 0 && (ch == '.' || ch == '-'));
        if (!ok)
            return 0;
    }
    return 1;
}

/* host[:port]: DNS labels or an IPv4 address, or [IPv6]; a numeric port. */
static int host_valid(const char *s, size_t n)
{
    if (n == 0 || n >= REGISTRY_HOST_MAX)
        return 0;
    size_t i = 0;
    if (s[0] == '[') {
        while (i < n && s[i] != ']')
            i++;
        if (i == n || i < 3)
            return 0;
        for (size_t j = 1; j < i; j++)
            if (!isxdigit((unsigned char)s[j]) && s[j] != ':')
                return 0;
        i++;
    } else {
        while (i < n && (isalnum((unsigned char)s[i]) || s[i] == '.' || s[i] == '-'))
            i++;
        if (i == 0 || s[0] == '.' || s[0] == '-' || s[i - 1] == '.' || s[i - 1] == '-')
            return 0;
    }
    if (i == n)
        return 1;
    if (s[i] != ':' || i + 1 == n || n - i - 1 > 5)
        return 0;
    for (size_t j = i + 1; j < n; j++)
        if (!isdigit((unsigned char)s[j]))
            return 0;
    return 1;
}

static int host_is_local(const char *h, size_t n)
{
    static const char *const local[] = {"localhost", "127.0.0.1", "[::1]"};
    for (size_t i = 0; i < sizeof local / sizeof local[0]; i++) {
        size_t k = strlen(local[i]);
        if (n >= k && strncmp(h, local[i], k) == 0 && (n == k || h[k] == ':'))
            return 1;
    }
    return 0;
}

/* Splits off a leading domain the way docker does: the first component is a
 * host when it has a '.' or ':' or is "localhost". */
static size_t domain_len(const char *s, size_t n)
{
    const char *slash = memchr(s, '/', n);
    if (!slash)
        return 0;
    size_t k = (size_t)(slash - s);
    if (memchr(s, '.', k) || memchr(s, ':', k) || (k == 9 && strncmp(s, "localhost", 9) == 0) ||
        (k > 0 && s[0] == '['))
        return k;
    return 0;
}

/* Hugging Face's registry (hf.co, the form Hugging Face shows for Ollama)
 * names repositories as the Hub does, in mixed case, and matches them
 * without regard to case: such a name is accepted as Ollama accepts it and
 * sent lowercased, the distribution spec's form. */
static int hf_domain(const char *s, size_t dl)
{
    return (dl == 5 && strncasecmp(s, "hf.co", 5) == 0) ||
           (dl == 14 && strncasecmp(s, "huggingface.co", 14) == 0);
}

static int parse_name(const char *s, size_t n, struct registry_ref *r, const char *what,
                      struct mf_err *err)
{
    size_t dl = domain_len(s, n);
    const char *name = dl ? s + dl + 1 : s;
    size_t nl = dl ? n - dl - 1 : n;
    if (dl && !host_valid(s, dl))
        return mf_err_set(err, MF_EINVAL, "%s: bad registry host", what);
    const char *slash = memrchr(name, '/', nl);
    const char *colon = memrchr(name, ':', nl);
    size_t repo_n = nl;
    if (colon && (!slash || colon > slash)) {
        repo_n = (size_t)(colon - name);
        size_t tn = nl - repo_n - 1;
        if (!tag_valid(colon + 1, tn))
            return mf_err_set(err, MF_EINVAL, "%s: bad tag (want [A-Za-z0-9_][A-Za-z0-9._-]*)",
                              what);
        memcpy(r->tag, colon + 1, tn);
    }
    char low[REGISTRY_REPO_MAX];
    if (dl && hf_domain(s, dl) && repo_n < sizeof low) {
        for (size_t i = 0; i < repo_n; i++)
            low[i] = (char)tolower((unsigned char)name[i]);
        name = low;
    }
    int hub = !dl || (dl == 9 && strncmp(s, DOCKER_HUB, 9) == 0);
    const char *lib = hub && !memchr(name, '/', repo_n) ? "library/" : "";
    if (!repo_valid(name, repo_n) || strlen(lib) + repo_n >= REGISTRY_REPO_MAX)
        return mf_err_set(err, MF_EINVAL,
                          "%s: bad repository name (lowercase letters, digits, . _ - and /)", what);
    snprintf(r->repo, sizeof r->repo, "%s%.*s", lib, (int)repo_n, name);
    snprintf(r->domain, sizeof r->domain, "%.*s", dl ? (int)dl : 9, dl ? s : DOCKER_HUB);
    snprintf(r->host, sizeof r->host, "%s", hub ? DOCKER_HUB_API : r->domain);
    r->plain_http = dl && host_is_local(s, dl);
    return 0;
}

int registry_ref_parse(const char *s, struct registry_ref *r, struct mf_err *err)
{
    memset(r, 0, sizeof *r);
    size_t n = strnlen(s, REGISTRY_HOST_MAX + REGISTRY_REPO_MAX + REGISTRY_TAG_MAX + 80);
    const char *what = "image reference";
    if (n == 0 || s[n] != '\0')
        return mf_err_set(err, MF_EINVAL, "%s is empty or too long", what);
    const char *at = memchr(s, '@', n);
    size_t name_n = at ? (size_t)(at - s) : n;
    int rc = 0;
    if (at) {
        rc = store_digest_check(at + 1, what, err);
        if (rc == 0)
            snprintf(r->digest, sizeof r->digest, "%s", at + 1);
    }
    if (rc == 0)
        rc = parse_name(s, name_n, r, what, err);
    if (rc == 0 && !r->tag[0] && !r->digest[0])
        snprintf(r->tag, sizeof r->tag, "latest");
    if (rc != 0) {
        mf_err_prefix(err, "'%.*s'", (int)(n < 200 ? n : 200), s);
        memset(r, 0, sizeof *r);
    }
    return rc;
}

/* ---- WWW-Authenticate (RFC 7235 section 4.1) -------------------------------------- */

static int is_tchar(char ch)
{
    return isalnum((unsigned char)ch) || (ch && strchr("!#$%&'*+-.^_`|~", ch));
}

static void skip_ows(const char *v, size_t n, size_t *i)
{
    while (*i < n && (v[*i] == ' ' || v[*i] == '\t'))
        (*i)++;
}

/* Reads a token or a quoted-string into out (cap bytes); -1 on bad syntax or overflow. */
static int read_value(const char *v, size_t n, size_t *i, char *out, size_t cap)
{
    size_t k = 0;
    if (*i < n && v[*i] == '"') {
        for ((*i)++; *i < n && v[*i] != '"'; (*i)++) {
            if (v[*i] == '\\' && *i + 1 < n)
                (*i)++;
            if ((unsigned char)v[*i] < 0x20 || k + 1 >= cap)
                return -1;
            out[k++] = v[*i];
        }
        if (*i == n)
            return -1;
        (*i)++;
    } else {
        for (; *i < n && is_tchar(v[*i]) ; (*i)++) {
            if (k + 1 >= cap)
                return -1;
            out[k++] = v[*i];
        }
        /* '/' ':' '=' are not tchars but unquoted realms carry them; accept up to ',' */
        for (; *i < n && v[*i] != ',' && v[*i] != ' ' && (unsigned char)v[*i] > 0x20; (*i)++) {
            if (k + 1 >= cap)
                return -1;
            out[k++] = v[*i];
        }
    }
    out[k] = '\0';
    return 0;
}

static void set_param(struct registry_challenge *c, const char *key, const char *val)
{
    char *dst = NULL;
    size_t cap = 0;
    if (strcasecmp(key, "realm") == 0)
        dst = c->realm, cap = sizeof c->realm;
    else if (strcasecmp(key, "service") == 0)
        dst = c->service, cap = sizeof c->service;
    else if (strcasecmp(key, "scope") == 0)
        dst = c->scope, cap = sizeof c->scope;
    if (dst)
        snprintf(dst, cap, "%s", val);
}

/* Parses "Scheme k=v, k="v", ..." starting at *i; stops before the next
 * challenge's scheme. 0, or -1 on bad syntax. */
static int parse_one(const char *v, size_t n, size_t *i, struct registry_challenge *c)
{
    char val[REGISTRY_REALM_MAX];
    size_t k = 0;
    skip_ows(v, n, i);
    while (*i < n && is_tchar(v[*i]) && k + 1 < sizeof c->scheme)
        c->scheme[k++] = v[(*i)++];
    c->scheme[k] = '\0';
    if (k == 0 || (*i < n && v[*i] != ' ' && v[*i] != ','))
        return -1;
    for (;;) {
        skip_ows(v, n, i);
        while (*i < n && v[*i] == ',')
            (*i)++, skip_ows(v, n, i);
        if (*i == n)
            return 0;
        size_t ks = *i;
        while (*i < n && is_tchar(v[*i]))
            (*i)++;
        size_t kn = *i - ks;
        skip_ows(v, n, i);
        if (kn == 0 || kn >= 32)
            return -1;
        if (*i == n || v[*i] != '=') {
            *i = ks; /* a token without '=': the next challenge's scheme */
            return 0;
        }
        (*i)++;
        skip_ows(v, n, i);
        char key[32];
        memcpy(key, v + ks, kn);
        key[kn] = '\0';
        if (read_value(v, n, i, val, sizeof val) != 0)
            return -1;
        set_param(c, key, val);
    }
}

int registry_challenge_parse(const char *v, size_t len, struct registry_challenge *c,
                             struct mf_err *err)
{
    memset(c, 0, sizeof *c);
    size_t n = strnlen(v, len < REGISTRY_CHALLENGE_MAX ? len : REGISTRY_CHALLENGE_MAX);
    size_t i = 0;
    struct registry_challenge one;
    int found = 0;
    while (i < n) {
        memset(&one, 0, sizeof one);
        size_t before = i;
        if (parse_one(v, n, &i, &one) != 0 || i == before)
            break;
        int bearer = strcasecmp(one.scheme, "Bearer") == 0;
        int basic = strcasecmp(one.scheme, "Basic") == 0;
        if ((bearer && one.realm[0]) || (basic && !found)) {
            *c = one;
            found = bearer ? 2 : 1;
        }
        if (found == 2)
            break;
    }
    if (!found) {
        memset(c, 0, sizeof *c);
        return mf_err_set(err, MF_EFORMAT,
                          "the registry's WWW-Authenticate header is not a Basic or Bearer "
                          "challenge");
    }
    return 0;
}

/* ---- base64 ----------------------------------------------------------------------- */

static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

int registry_b64_encode(const void *p, size_t n, char **out, struct mf_err *err)
{
    const unsigned char *s = p;
    if (n > (SIZE_MAX - 1) / 4 * 3 - 3)
        return mf_err_set(err, MF_ENOMEM, "value too large to encode");
    char *o = malloc((n + 2) / 3 * 4 + 1);
    if (!o)
        return mf_err_set(err, MF_ENOMEM, "out of memory");
    size_t k = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)s[i] << 16 | (i + 1 < n ? (uint32_t)s[i + 1] << 8 : 0) |
                     (i + 2 < n ? s[i + 2] : 0);
        o[k++] = b64[v >> 18 & 63];
        o[k++] = b64[v >> 12 & 63];
        o[k++] = i + 1 < n ? b64[v >> 6 & 63] : '=';
        o[k++] = i + 2 < n ? b64[v & 63] : '=';
    }
    o[k] = '\0';
    *out = o;
    return 0;
}

int registry_b64_decode(const char *s, size_t n, char *out, size_t cap, size_t *len,
                        struct mf_err *err)
{
    uint32_t acc = 0;
    int bits = 0;
    size_t k = 0, pad = 0;
    for (size_t i = 0; i < n; i++) {
        const char *q = s[i] ? strchr(b64, s[i]) : NULL;
        if (s[i] == '=') {
            pad++;
            continue;
        }
        if (!q || pad)
            return mf_err_set(err, MF_EFORMAT, "bad base64 in an auth entry");
        acc = acc << 6 | (uint32_t)(q - b64);
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            if (k + 1 >= cap)
                return mf_err_set(err, MF_ENOMEM, "auth entry too long");
            out[k++] = (char)(acc >> bits & 0xff);
        }
    }
    if (pad > 2)
        return mf_err_set(err, MF_EFORMAT, "bad base64 in an auth entry");
    out[k] = '\0';
    *len = k;
    return 0;
}
