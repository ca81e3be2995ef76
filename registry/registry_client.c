/*
 * registry_client.c: the HTTP session with one registry (see registry.c for
 * the auth state machine it implements): send a request, read a bounded
 * reply, answer a 401 once with Basic credentials or a Bearer token.
 *
 * Owns the curl handle, the credentials copy and the Authorization value;
 * wipes both on close. Replies are untrusted: each header line is cut at
 * 8 KB, error bodies at REGISTRY_ERRBODY_MAX, 2xx bodies at their sink's
 * limit, and token replies at REGISTRY_TOKEN_MAX.
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

#define HEADER_LINE_MAX 8192

/* ---- callbacks -------------------------------------------------------------------- */

static void copy_printable(char *dst, size_t cap, const char *src)
{
    size_t k = 0;
    for (; *src && k + 1 < cap; src++)
        dst[k++] = (unsigned char)*src >= 0x20 && (unsigned char)*src < 0x7f ? *src : '?';
    dst[k] = '\0';
}

static void on_header_value(struct registry_req *r, const char *name, const char *v)
{
    if (strcasecmp(name, "Location") == 0) {
        if (strlen(v) < sizeof r->location)
            copy_printable(r->location, sizeof r->location, v);
    } else if (strcasecmp(name, "Docker-Content-Digest") == 0) {
        if (store_digest_valid(v))
            snprintf(r->digest, sizeof r->digest, "%s", v);
    } else if (strcasecmp(name, "Content-Type") == 0) {
        size_t k = strcspn(v, "; ");
        if (k < sizeof r->content_type_got)
            snprintf(r->content_type_got, sizeof r->content_type_got, "%.*s", (int)k, v);
    } else if (strcasecmp(name, "Content-Range") == 0) {
        const char *p = v + strcspn(v, "0123456789");
        r->range_start = strtoull(p, NULL, 10);
    } else if (strcasecmp(name, "WWW-Authenticate") == 0) {
        int bearer = strncasecmp(v, "Bearer", 6) == 0;
        if ((!r->challenge[0] || bearer) && strlen(v) < sizeof r->challenge)
            snprintf(r->challenge, sizeof r->challenge, "%s", v);
    }
}

static size_t on_header(char *p, size_t size, size_t nitems, void *arg)
{
    struct registry_req *r = arg;
    size_t n = size * nitems;
    if (n >= HEADER_LINE_MAX)
        return n; /* too long to be one we need; ignored, not truncated into a wrong value */
    char line[HEADER_LINE_MAX];
    memcpy(line, p, n);
    while (n && (line[n - 1] == '\n' || line[n - 1] == '\r' || line[n - 1] == ' '))
        n--;
    line[n] = '\0';
    if (strncmp(line, "HTTP/", 5) == 0) { /* a new response: forget the previous one */
        const char *sp = strchr(line, ' ');
        r->status = sp ? strtol(sp + 1, NULL, 10) : 0;
        r->location[0] = r->digest[0] = r->content_type_got[0] = r->challenge[0] = '\0';
        return size * nitems;
    }
    char *colon = strchr(line, ':');
    if (colon) {
        *colon = '\0';
        char *v = colon + 1;
        while (*v == ' ' || *v == '\t')
            v++;
        on_header_value(r, line, v);
    }
    return size * nitems;
}

static size_t on_body(char *p, size_t size, size_t nitems, void *arg)
{
    struct registry_req *r = arg;
    size_t n = size * nitems;
    if (r->status < 200 || r->status >= 300) {
        mf_buf_append(&r->errbody, p, n, NULL); /* beyond the limit it is simply dropped */
        return n;
    }
    int rc = 0;
    if (r->w && !r->body_started) {
        r->body_started = 1;
        uint64_t have = store_blob_writer_size(r->w);
        if (r->status == 206 && r->range_start != have)
            rc = mf_err_set(&r->werr, MF_ENET, "asked for bytes %llu- and got bytes %llu-",
                            (unsigned long long)have, (unsigned long long)r->range_start);
        else if (r->status != 206 && have)
            rc = store_blob_writer_reset(r->w, &r->werr); /* Range ignored: start over */
    }
    if (rc != 0) {
    } else if (r->w) {
        if (store_blob_writer_size(r->w) + n > r->w_max)
            rc = mf_err_set(&r->werr, MF_EINTEGRITY,
                            "the registry sent more than the %llu bytes the manifest announced",
                            (unsigned long long)r->w_max);
        else
            rc = store_blob_writer_write(r->w, p, n, &r->werr);
        if (rc == 0 && r->meter)
            registry_meter_update(r->meter, store_blob_writer_size(r->w));
    } else if (r->out) {
        rc = mf_buf_append(r->out, p, n, &r->werr);
    }
    if (rc != 0) {
        r->failed = 1;
        return 0;
    }
    return n;
}

static size_t on_read(char *p, size_t size, size_t nitems, void *arg)
{
    struct registry_body *b = arg;
    size_t n = size * nitems;
    if (n > b->len)
        n = (size_t)b->len;
    if (n == 0)
        return 0;
    if (b->mem) {
        memcpy(p, (const char *)b->mem + b->off, n);
    } else {
        ssize_t got = pread(b->fd, p, n, (off_t)b->off);
        if (got <= 0)
            return CURL_READFUNC_ABORT;
        n = (size_t)got;
    }
    b->off += n;
    b->len -= n;
    if (b->meter)
        registry_meter_update(b->meter, b->off);
    return n;
}

void registry_meter_update(struct registry_meter *m, uint64_t done)
{
    if (!m->pg || (done - m->shown < REGISTRY_PROGRESS_STEP && done < m->total))
        return;
    m->shown = done;
    progress_update(m->pg, m->id, done, m->total);
}

/* ---- one exchange ----------------------------------------------------------------- */

static int add_header(struct curl_slist **h, const char *line)
{
    struct curl_slist *n = curl_slist_append(*h, line);
    if (!n)
        return -1;
    *h = n;
    return 0;
}

static struct curl_slist *build_headers(struct registry_client *c, struct registry_req *r)
{
    struct curl_slist *h = NULL;
    char line[512];
    int bad = add_header(&h, "Expect:"); /* no 100-continue round trip per chunk */
    if (r->accept) {
        snprintf(line, sizeof line, "Accept: %s", r->accept);
        bad |= add_header(&h, line);
    }
    if (r->content_type) {
        snprintf(line, sizeof line, "Content-Type: %s", r->content_type);
        bad |= add_header(&h, line);
    }
    if (r->content_range) {
        snprintf(line, sizeof line, "Content-Range: %s", r->content_range);
        bad |= add_header(&h, line);
    }
    if (r->range_from) {
        snprintf(line, sizeof line, "Range: bytes=%llu-", (unsigned long long)r->range_from);
        bad |= add_header(&h, line);
    }
    /* invariant (2): our Authorization only goes to our registry's base URL */
    size_t bl = strlen(c->base);
    if (c->authz && strncmp(r->url, c->base, bl) == 0 && strchr("/?", r->url[bl])) {
        struct mf_buf a;
        mf_buf_init(&a, REGISTRY_TOKEN_MAX + 64);
        bad |= mf_buf_printf(&a, NULL, "Authorization: %s", c->authz) != 0 ||
               add_header(&h, a.data) != 0;
        memset(a.data, 0, a.len);
        mf_buf_free(&a);
    }
    if (bad) {
        curl_slist_free_all(h);
        return NULL;
    }
    return h;
}

static void setup(struct registry_client *c, struct registry_req *r, struct registry_body *b)
{
    CURL *h = c->curl;
    curl_easy_reset(h);
    curl_easy_setopt(h, CURLOPT_URL, r->url);
#if LIBCURL_VERSION_NUM >= 0x075500
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
#endif
    curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, strcmp(r->method, "GET") == 0 ? 1L : 0L);
    curl_easy_setopt(h, CURLOPT_MAXREDIRS, 5L);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, c->o->connect_timeout_s);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, c->o->stall_timeout_s);
    curl_easy_setopt(h, CURLOPT_USERAGENT, "mfc");
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, r);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, c->errbuf);
    if (c->o->insecure) {
        curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 0L);
        curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 0L);
    }
    if (strcmp(r->method, "HEAD") == 0) {
        curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
    } else if (b->mem || b->fd >= 0) {
        curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
        curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE, (curl_off_t)b->len);
        curl_easy_setopt(h, CURLOPT_READFUNCTION, on_read);
        /* libcurl's largest upload buffer (2 MiB, default 64 KiB): a multi-GB layer
         * then costs 32x fewer preads, callbacks and sends */
        if (b->len > (64u << 10))
            curl_easy_setopt(h, CURLOPT_UPLOAD_BUFFERSIZE, 2L << 20);
        curl_easy_setopt(h, CURLOPT_READDATA, b);
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, r->method);
    } else if (strcmp(r->method, "GET") != 0) {
        /* a bodyless POST/PUT still says Content-Length: 0 */
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, "");
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, 0L);
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, r->method);
    }
}

/* The errors[0] of a distribution-spec error reply, printable, for messages. */
static void error_message(struct registry_req *r)
{
    json_t *v = r->errbody.len ? mf_json_parse(r->errbody.data, r->errbody.len, "reply", NULL)
                               : NULL;
    json_t *e0 = json_array_get(json_object_get(v, "errors"), 0);
    const char *code = json_string_value(json_object_get(e0, "code"));
    const char *msg = json_string_value(json_object_get(e0, "message"));
    char tmp[256];
    snprintf(tmp, sizeof tmp, "%s%s%s", code ? code : "", code && msg ? ": " : "", msg ? msg : "");
    copy_printable(r->errmsg, sizeof r->errmsg, tmp);
    json_decref(v);
}

/* One exchange; 0 for any HTTP reply, MF_ENET when none came. */
static int exchange(struct registry_client *c, struct registry_req *r, struct mf_err *err)
{
    struct registry_body b = r->body; /* a copy: a second send starts at the range's start */
    struct curl_slist *h = build_headers(c, r);
    if (!h)
        return mf_err_set(err, MF_ENOMEM, "out of memory");
    setup(c, r, &b);
    curl_easy_setopt(c->curl, CURLOPT_HTTPHEADER, h);
    r->status = 0;
    r->failed = 0;
    r->body_started = 0;
    mf_buf_free(&r->errbody);
    mf_buf_init(&r->errbody, REGISTRY_ERRBODY_MAX);
    c->errbuf[0] = '\0';
    CURLcode cc = curl_easy_perform(c->curl);
    curl_slist_free_all(h);
    if (r->failed)
        return *err = r->werr, r->werr.code;
    if (cc != CURLE_OK) {
        const char *why = c->errbuf[0] ? c->errbuf : curl_easy_strerror(cc);
        return mf_err_set(err, MF_ENET, "cannot reach the registry %s: %s", c->host, why);
    }
    error_message(r);
    return 0;
}

/* ---- auth ------------------------------------------------------------------------- */

static int set_authz(struct registry_client *c, const char *scheme, const char *value,
                     struct mf_err *err)
{
    struct mf_buf b;
    mf_buf_init(&b, REGISTRY_TOKEN_MAX + 16);
    int rc = mf_buf_printf(&b, err, "%s %s", scheme, value);
    if (rc == 0) {
        if (c->authz)
            memset(c->authz, 0, strlen(c->authz));
        free(c->authz);
        c->authz = mf_buf_take(&b);
    }
    mf_buf_free(&b);
    return rc;
}

static int basic_value(const struct registry_cred *cr, char **out, struct mf_err *err)
{
    char pair[REGISTRY_USER_MAX + REGISTRY_SECRET_MAX + 2];
    int n = snprintf(pair, sizeof pair, "%s:%s", cr->user, cr->secret);
    int rc = registry_b64_encode(pair, (size_t)n, out, err);
    memset(pair, 0, sizeof pair);
    return rc;
}

/* A token is sent as a header value: no CR, LF or other controls (header injection). */
static int token_ok(const char *t)
{
    size_t n = strlen(t);
    if (n == 0 || n >= REGISTRY_TOKEN_MAX)
        return 0;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)t[i] <= 0x20 || (unsigned char)t[i] >= 0x7f)
            return 0;
    return 1;
}

static int token_url(struct registry_client *c, const struct registry_challenge *ch,
                     struct mf_buf *u, struct mf_err *err)
{
    if (strncmp(ch->realm, "https://", 8) != 0 && strncmp(ch->realm, "http://", 7) != 0)
        return mf_err_set(err, MF_ENET, "the registry %s named a token realm that is not http(s)",
                          c->host);
    char scope[REGISTRY_PARAM_MAX + 64];
    if (ch->scope[0])
        snprintf(scope, sizeof scope, "%s", ch->scope);
    else
        snprintf(scope, sizeof scope, "repository:%s:%s", c->repo, c->actions);
    char *svc = curl_easy_escape(c->curl, ch->service, 0);
    char *sc = curl_easy_escape(c->curl, scope, 0);
    int rc = svc && sc ? 0 : mf_err_set(err, MF_ENOMEM, "out of memory");
    if (rc == 0)
        rc = mf_buf_printf(u, err, "%s%cservice=%s&scope=%s", ch->realm,
                           strchr(ch->realm, '?') ? '&' : '?', svc, sc);
    curl_free(svc);
    curl_free(sc);
    return rc;
}

/* GETs a token from the challenge's realm, with Basic credentials if we have any. */
static int fetch_token(struct registry_client *c, const struct registry_challenge *ch,
                       struct mf_err *err)
{
    struct mf_buf u, body;
    mf_buf_init(&u, REGISTRY_REALM_MAX + 3 * REGISTRY_PARAM_MAX * 2 + 64);
    mf_buf_init(&body, REGISTRY_TOKEN_MAX);
    struct registry_req r = {.method = "GET", .out = &body, .body = {.fd = -1}};
    int rc = token_url(c, ch, &u, err);
    char *saved = c->authz;
    c->authz = NULL;
    char *basic = NULL;
    if (rc == 0 && c->cred.user[0] && (rc = basic_value(&c->cred, &basic, err)) == 0)
        rc = set_authz(c, "Basic", basic, err);
    /* the realm is another URL: send Basic there only (base check relaxed for it) */
    char base_saved[sizeof c->base];
    memcpy(base_saved, c->base, sizeof c->base);
    snprintf(c->base, sizeof c->base, "%s", rc == 0 ? ch->realm : "");
    c->base[strcspn(c->base, "?")] = '\0';
    r.url = u.data;
    if (rc == 0)
        rc = exchange(c, &r, err);
    memcpy(c->base, base_saved, sizeof c->base);
    if (c->authz)
        memset(c->authz, 0, strlen(c->authz));
    free(c->authz);
    c->authz = saved;
    if (basic)
        memset(basic, 0, strlen(basic));
    free(basic);
    if (rc == 0 && (r.status == 401 || r.status == 403))
        rc = mf_err_set(err, MF_EINVAL, "authentication failed for %s (check mfc login)", c->host);
    else if (rc == 0 && r.status != 200)
        rc = mf_err_set(err, MF_ENET, "the token server of %s answered HTTP %ld", c->host,
                        r.status);
    json_t *v = rc == 0 ? mf_json_parse(body.data, body.len, "token reply", err) : NULL;
    const char *tok = json_string_value(json_object_get(v, "token"));
    if (!tok)
        tok = json_string_value(json_object_get(v, "access_token"));
    if (rc == 0 && (!tok || !token_ok(tok)))
        rc = mf_err_set(err, MF_ENET, "the token server of %s sent no usable token", c->host);
    if (rc == 0)
        rc = set_authz(c, "Bearer", tok, err);
    json_decref(v);
    if (body.data)
        memset(body.data, 0, body.len);
    mf_buf_free(&body);
    mf_buf_free(&u);
    return rc;
}

/* Turns a 401's challenge into a new Authorization value. MF_EINVAL when we
 * have nothing better to offer. */
static int auth_answer(struct registry_client *c, const struct registry_req *r, struct mf_err *err)
{
    struct registry_challenge ch;
    if (registry_challenge_parse(r->challenge, sizeof r->challenge, &ch, NULL) != 0 ||
        strcasecmp(ch.scheme, "Basic") == 0) {
        if (!c->cred.user[0] || (c->authz && strncmp(c->authz, "Basic ", 6) == 0))
            return mf_err_set(err, MF_EINVAL, "authentication failed for %s (check mfc login)",
                              c->host);
        char *v = NULL;
        int rc = basic_value(&c->cred, &v, err);
        if (rc == 0)
            rc = set_authz(c, "Basic", v, err);
        if (v)
            memset(v, 0, strlen(v));
        free(v);
        return rc;
    }
    return fetch_token(c, &ch, err);
}

int registry_client_do(struct registry_client *c, struct registry_req *r, struct mf_err *err)
{
    int rc = exchange(c, r, err);
    if (rc == 0 && r->status == 401) {
        if (r->w && store_blob_writer_size(r->w) != r->range_from)
            rc = store_blob_writer_reset(r->w, err);
        if (rc == 0)
            rc = auth_answer(c, r, err);
        if (rc == 0)
            rc = exchange(c, r, err);
        if (rc == 0 && r->status == 401)
            rc = mf_err_set(err, MF_EINVAL, "authentication failed for %s (check mfc login)",
                            c->host);
    }
    mf_buf_free(&r->errbody);
    return rc;
}

int registry_client_status_error(struct registry_client *c, const struct registry_req *r,
                                 const char *what, struct mf_err *err)
{
    const char *detail = r->errmsg[0] ? r->errmsg : "no detail";
    switch (r->status) {
    case 403:
        return mf_err_set(err, MF_EINVAL, "the registry %s denied access to %s (%s)", c->host,
                          what, detail);
    case 404:
        return mf_err_set(err, MF_ENOTFOUND, "%s not found on %s (%s)", what, c->host, detail);
    case 413:
        return mf_err_set(err, MF_ERANGE, "the registry %s refused %s as too large (HTTP 413)",
                          c->host, what);
    case 429:
        return mf_err_set(err, MF_EBUSY, "the registry %s is rate-limiting us (HTTP 429) on %s",
                          c->host, what);
    default:
        return mf_err_set(err, MF_ENET, "the registry %s answered HTTP %ld for %s (%s)", c->host,
                          r->status, what, detail);
    }
}

int registry_client_url(const struct registry_client *c, const char *loc, const char *query,
                        struct mf_buf *u, struct mf_err *err)
{
    int rc;
    if (strncmp(loc, "https://", 8) == 0 || strncmp(loc, "http://", 7) == 0)
        rc = mf_buf_puts(u, loc, err);
    else if (loc[0] == '/')
        rc = mf_buf_printf(u, err, "%s%s", c->base, loc);
    else
        return mf_err_set(err, MF_ENET, "the registry %s sent an upload location that is not a URL",
                          c->host);
    if (rc == 0 && query)
        rc = mf_buf_printf(u, err, "%c%s", strchr(loc, '?') ? '&' : '?', query);
    return rc;
}

int registry_client_ping(struct registry_client *c, struct mf_err *err)
{
    char url[sizeof c->base + 8];
    snprintf(url, sizeof url, "%s/v2/", c->base);
    struct registry_req r = {.method = "GET", .url = url, .body = {.fd = -1}};
    struct mf_err first;
    int rc = registry_client_do(c, &r, &first);
    if (rc == MF_ENET && c->o->insecure && strncmp(c->base, "https:", 6) == 0) {
        /* --insecure: a registry without TLS at all, as docker's insecure-registries */
        snprintf(c->base, sizeof c->base, "http://%s", c->host);
        snprintf(url, sizeof url, "%s/v2/", c->base);
        rc = registry_client_do(c, &r, err);
    } else if (rc != 0) {
        *err = first;
    }
    if (rc == 0 && r.status != 200)
        rc = registry_client_status_error(c, &r, "the API root /v2/", err);
    return rc;
}

/* ---- open/close ------------------------------------------------------------------- */

int registry_client_open(struct registry_client **out, const struct registry_ref *ref,
                         const char *actions, const struct registry_opts *o,
                         struct registry_stats *st, struct mf_err *err)
{
    *out = NULL;
    struct registry_client *c = calloc(1, sizeof *c);
    if (!c)
        return mf_err_set(err, MF_ENOMEM, "out of memory");
    c->o = o;
    c->st = st;
    c->actions = actions;
    snprintf(c->host, sizeof c->host, "%s", ref->host);
    snprintf(c->repo, sizeof c->repo, "%s", ref->repo);
    snprintf(c->base, sizeof c->base, "%s://%s", ref->plain_http ? "http" : "https", ref->host);
    int rc = (c->curl = curl_easy_init()) ? 0 : mf_err_set(err, MF_ENOMEM, "cannot start libcurl");
    if (rc == 0)
        rc = registry_auth_lookup(o, ref->domain, &c->cred, err);
    if (rc != 0) {
        registry_client_close(c);
        return rc;
    }
    *out = c;
    return 0;
}

void registry_client_close(struct registry_client *c)
{
    if (!c)
        return;
    if (c->curl)
        curl_easy_cleanup(c->curl);
    registry_cred_wipe(&c->cred);
    if (c->authz)
        memset(c->authz, 0, strlen(c->authz));
    free(c->authz);
    free(c);
}
