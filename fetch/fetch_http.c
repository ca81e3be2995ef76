/*
 * fetch_http.c: http(s) downloads into the store: streamed, resumable,
 * retried, verified.
 *
 * Bytes go from libcurl's write callback straight into a store blob writer:
 * one pass, no second read. libcurl receives into a 512 KiB buffer but calls
 * back with 16 KiB pieces; they are gathered into 256 KiB slots, so a GiB is
 * ~4k write+hash calls instead of ~65k. The writer hashes in a second thread
 * (store_blob_writer_hash_async_slots, 4 slots of 256 KiB): the receiving
 * thread writes each full slot to the file and hands it over, and the hasher
 * hashes it on the other core while it is still in cache, so SHA-256
 * overlaps receiving instead of adding to it. (The writer's default 4 MiB
 * slots were measured slower: hashed out of cache; bench/README.md, "Fetch".)
 * When that thread cannot start, the pieces are gathered here (body_append)
 * and written and hashed in line. The
 * writer is the named partial tmp/partial-<H(url)>, and beside it
 * tmp/partial-<H(url)>.json records the URL and the validator (ETag or
 * Last-Modified) of the bytes so far, so an interrupted download, in this run
 * or a later one, continues with "Range: bytes=N-" + "If-Range". A server
 * that answers 200 instead (no range support, or the file changed) restarts
 * the blob from zero.
 *
 * Download states (one fetch_http_run):
 *   START     --pin already in the store------------------------> DONE (cached)
 *   START     --open partial (kept bytes need a validator)------> REQUEST
 *   REQUEST   --200/206 body streamed, length reached-----------> COMPLETE
 *   REQUEST   --304 to If-None-Match on our last ETag-----------> DONE (cached)
 *   REQUEST   --dropped, 408/429/5xx, timeout-------------------> WAIT --backoff--> REQUEST
 *   REQUEST   --416 and we already hold every byte--------------> COMPLETE
 *   COMPLETE  --commit: digest == pin (if any)------------------> DONE; URL record saved
 *   any       --4xx, mismatch, retries exhausted----------------> FAILED
 * A failure keeps the partial for the next run unless its bytes are useless
 * (no validator) or wrong (digest mismatch: nothing is stored).
 *
 * Retries count consecutive attempts that moved no byte, so a connection
 * that drops every gigabyte still finishes. Backoff doubles from
 * retry_base_ms up to 8 s; Retry-After is honoured up to 30 s.
 */
#include "fetch/fetch.h"

#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/file.h"
#include "common/json.h"
#include "common/num.h"
#include "common/sha256.h"
#include "fetch/fetch_int.h"

#define VALIDATOR_MAX 256 /* bytes of an ETag or Last-Modified value we keep */
#define META_MAX 4096     /* bytes of a partial's metadata file */
#define BACKOFF_MAX_MS 8000
#define RETRY_AFTER_MAX_S 30
#define RECV_BUFFER (512L << 10)    /* libcurl's receive buffer: fewer, larger recv calls */
#define PEND_BYTES (256u << 10)     /* body bytes gathered before one write + hash (a slot) */
#define PROGRESS_BYTES (1u << 20)   /* report progress after this many bytes ... */
#define PROGRESS_NS 100000000LL     /* ... or this much time, whichever comes first */

/* The validator of partial bytes: what If-Range sends. */
struct validator {
    char etag[VALIDATOR_MAX];          /* strong ETag, quotes included, or "" */
    char last_modified[VALIDATOR_MAX]; /* HTTP date, or "" */
};

/* One whole download. */
struct dl {
    struct store *s;                  /* borrowed */
    const struct fetch_source *src;   /* borrowed */
    const struct fetch_opts *o;       /* borrowed */
    CURL *curl;                       /* owned; reused across attempts (keeps the connection) */
    struct store_blob_writer *w;      /* owned: the partial blob */
    char *meta_path;                  /* owned: tmp/partial-<hex>.json */
    char name[MF_SHA256_HEX_LEN + 1]; /* hex of H(url): the partial's name */
    char url_key[STORE_DIGEST_BUF];   /* cache key of the URL record */
    struct validator have;            /* validator of the bytes in w */
    uint64_t total;                   /* the resource's length, 0 until known */
    int job;                          /* progress job */
    char errbuf[CURL_ERROR_SIZE];     /* libcurl's detail for the last failure */
    unsigned char *pend;              /* owned: PEND_BYTES of body not yet in w, or NULL */
    size_t pend_len;                  /* bytes in pend; 0 between attempts */
    int async;                        /* nonzero: w hashes in its own thread and gathers */
};

/* One HTTP request and its final response (redirects reset it). */
struct attempt {
    struct dl *dl;           /* borrowed */
    long status;             /* status code of the current response */
    uint64_t content_length; /* Content-Length, 0 when absent */
    int has_length;          /* nonzero when Content-Length was sent */
    int has_range;           /* nonzero when Content-Range was sent */
    uint64_t range_start;    /* Content-Range first byte */
    uint64_t range_total;    /* Content-Range total, 0 when "*" */
    struct validator got;    /* this response's validator */
    long retry_after;        /* seconds, or -1 */
    int body_started;        /* nonzero once the body's treatment was decided */
    uint64_t shown;          /* size last reported to progress */
    int64_t shown_ns;        /* when (CLOCK_MONOTONIC_COARSE) */
    int failed;              /* nonzero: the write callback stopped the transfer */
    struct mf_err werr;      /* why */
};

enum outcome { OUT_DONE, OUT_NOT_MODIFIED, OUT_RETRY, OUT_FATAL };

/* ---- response headers ------------------------------------------------------------- */

static void reset_response(struct attempt *a)
{
    a->content_length = a->range_start = a->range_total = 0;
    a->has_length = a->has_range = 0;
    a->got.etag[0] = a->got.last_modified[0] = '\0';
    a->retry_after = -1;
}

static int parse_u64(const char *s, size_t n, uint64_t *out)
{
    char tmp[32];
    if (n == 0 || n >= sizeof tmp)
        return -1;
    memcpy(tmp, s, n);
    tmp[n] = '\0';
    return mf_num_parse_u64(tmp, out);
}

/* Content-Range (RFC 9110 14.4): "bytes A-B/T", or on a 416 "bytes * /T" (no space). */
static void parse_content_range(struct attempt *a, const char *v)
{
    if (strncasecmp(v, "bytes ", 6) != 0)
        return;
    v += 6;
    const char *slash = strchr(v, '/');
    const char *dash = strchr(v, '-');
    if (!slash)
        return;
    if (strcmp(slash + 1, "*") != 0 && parse_u64(slash + 1, strlen(slash + 1), &a->range_total))
        return;
    if (v[0] == '*') {
        a->has_range = 0;
        return;
    }
    if (dash && dash < slash && parse_u64(v, (size_t)(dash - v), &a->range_start) == 0)
        a->has_range = 1;
}

static void header_value(struct attempt *a, const char *name, const char *v)
{
    uint64_t n;
    if (strcasecmp(name, "content-length") == 0 && parse_u64(v, strlen(v), &n) == 0) {
        a->content_length = n;
        a->has_length = 1;
    } else if (strcasecmp(name, "content-range") == 0) {
        parse_content_range(a, v);
    } else if (strcasecmp(name, "etag") == 0 && strncmp(v, "W/", 2) != 0) {
        snprintf(a->got.etag, sizeof a->got.etag, "%s", v); /* weak ETags cannot do If-Range */
    } else if (strcasecmp(name, "last-modified") == 0) {
        snprintf(a->got.last_modified, sizeof a->got.last_modified, "%s", v);
    } else if (strcasecmp(name, "retry-after") == 0 && parse_u64(v, strlen(v), &n) == 0) {
        a->retry_after = n > RETRY_AFTER_MAX_S ? RETRY_AFTER_MAX_S : (long)n;
    }
}

static size_t on_header(char *p, size_t size, size_t nitems, void *arg)
{
    struct attempt *a = arg;
    size_t n = size * nitems;
    char line[1024];
    size_t k = n < sizeof line - 1 ? n : sizeof line - 1;
    memcpy(line, p, k);
    while (k && (line[k - 1] == '\n' || line[k - 1] == '\r' || line[k - 1] == ' '))
        k--;
    line[k] = '\0';
    if (strncmp(line, "HTTP/", 5) == 0) { /* a new response (after a redirect or 100) */
        reset_response(a);
        const char *sp = strchr(line, ' ');
        uint64_t code = 0;
        a->status = sp && parse_u64(sp + 1, 3, &code) == 0 ? (long)code : 0;
        return n;
    }
    char *colon = strchr(line, ':');
    if (colon) {
        *colon = '\0';
        char *v = colon + 1;
        while (*v == ' ' || *v == '\t')
            v++;
        header_value(a, line, v);
    }
    return n;
}

/* ---- the partial's metadata ------------------------------------------------------- */

static void meta_save(struct dl *dl)
{
    json_t *v = json_pack("{s:s, s:s, s:s, s:I}", "url", dl->src->location, "etag", dl->have.etag,
                          "last_modified", dl->have.last_modified, "total", (json_int_t)dl->total);
    struct mf_buf b;
    mf_buf_init(&b, META_MAX);
    if (v && mf_json_dump(v, JSON_COMPACT, &b, NULL) == 0)
        mf_file_write_atomic(dl->meta_path, b.data, b.len, NULL); /* best effort: a lost one
                                                                     costs a re-download */
    mf_buf_free(&b);
    json_decref(v);
}

/* Loads the validator of kept bytes; 0 when they belong to this URL and can be resumed. */
static int meta_load(struct dl *dl)
{
    char *text = NULL;
    size_t len = 0;
    json_t *v = NULL;
    int ok = 0;
    if (mf_file_read(dl->meta_path, META_MAX, &text, &len, NULL) == 0)
        v = mf_json_parse(text, len, dl->meta_path, NULL);
    const char *url = json_string_value(json_object_get(v, "url"));
    const char *etag = json_string_value(json_object_get(v, "etag"));
    const char *lm = json_string_value(json_object_get(v, "last_modified"));
    json_t *total = json_object_get(v, "total");
    if (url && strcmp(url, dl->src->location) == 0 && etag && lm && (*etag || *lm) &&
        json_is_integer(total) && json_integer_value(total) >= 0) {
        snprintf(dl->have.etag, sizeof dl->have.etag, "%s", etag);
        snprintf(dl->have.last_modified, sizeof dl->have.last_modified, "%s", lm);
        dl->total = (uint64_t)json_integer_value(total);
        ok = 1;
    }
    json_decref(v);
    free(text);
    return ok ? 0 : -1;
}

/* ---- the body --------------------------------------------------------------------- */

/* Decides, at the first body byte, how this response continues the blob.
 * Returns 0, or -1 with a->werr filled. */
static int begin_body(struct attempt *a)
{
    struct dl *dl = a->dl;
    uint64_t have = store_blob_writer_size(dl->w);
    uint64_t total = a->has_length ? a->content_length : 0;
    a->body_started = 1;
    if (a->status == 206 && (!a->has_range || a->range_start != have)) {
        mf_err_set(&a->werr, MF_ENET, "%s: asked for bytes %llu- and got bytes %llu-",
                   dl->src->display, (unsigned long long)have, (unsigned long long)a->range_start);
        return -1;
    }
    if (a->status == 206) {
        total = a->range_total;
        if (dl->total && total && total != dl->total) {
            mf_err_set(&a->werr, MF_ENET,
                       "%s: the length changed from %llu to %llu bytes between requests",
                       dl->src->display, (unsigned long long)dl->total, (unsigned long long)total);
            return -1;
        }
    } else if (have && store_blob_writer_reset(dl->w, &a->werr) != 0) {
        return -1; /* a 200 to our Range request: the whole body follows, start over */
    }
    dl->total = total;
    dl->have = a->got;
    if (dl->have.etag[0] || dl->have.last_modified[0])
        meta_save(dl); /* now even a kill -9 mid-transfer can be resumed */
    return 0;
}

/* Writes (and hashes) the gathered body bytes into the blob; pend is empty
 * afterwards whatever happens. Returns 0 or a negative MF_E* code. */
static int flush_pending(struct dl *dl, struct mf_err *err)
{
    size_t n = dl->pend_len;
    dl->pend_len = 0;
    return n ? store_blob_writer_write(dl->w, dl->pend, n, err) : 0;
}

/* libcurl 7.x hands the body over in 16 KiB pieces (CURL_MAX_WRITE_SIZE)
 * whatever its receive buffer; a write(2) and a hash update per piece cost
 * ~65k syscalls per GiB, so pieces are gathered to PEND_BYTES first (the
 * bench: bench/README.md, "Fetch"). */
static int body_append(struct dl *dl, const char *p, size_t n, struct mf_err *err)
{
    if (dl->async) /* the writer's slots gather them */
        return store_blob_writer_write(dl->w, p, n, err);
    if (!dl->pend && !(dl->pend = malloc(PEND_BYTES)))
        return store_blob_writer_write(dl->w, p, n, err);
    if (dl->pend_len + n > PEND_BYTES && flush_pending(dl, err) != 0)
        return err ? err->code : MF_EIO;
    if (n >= PEND_BYTES)
        return store_blob_writer_write(dl->w, p, n, err);
    memcpy(dl->pend + dl->pend_len, p, n);
    dl->pend_len += n;
    return 0;
}

static size_t on_body(char *p, size_t size, size_t nitems, void *arg)
{
    struct attempt *a = arg;
    struct dl *dl = a->dl;
    size_t n = size * nitems;
    if (a->status < 200 || a->status >= 300)
        return n; /* an error page: curl reports the status, we keep none of it */
    if (!a->body_started && begin_body(a) != 0) {
        a->failed = 1;
        return 0;
    }
    uint64_t have = store_blob_writer_size(dl->w) + dl->pend_len;
    if (dl->total && have + n > dl->total) {
        mf_err_set(&a->werr, MF_ENET, "%s: the server sent more than the %llu bytes it announced",
                   dl->src->display, (unsigned long long)dl->total);
        a->failed = 1;
        return 0;
    }
    if (body_append(dl, p, n, &a->werr) != 0) {
        a->failed = 1;
        return 0;
    }
    return n;
}

/* libcurl calls this after every receive; progress_update takes a lock and
 * may redraw, so it is only called every PROGRESS_BYTES or PROGRESS_NS. */
static int on_xfer(void *arg, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                   curl_off_t ulnow)
{
    struct attempt *a = arg;
    if (!a->body_started)
        return 0;
    uint64_t size = store_blob_writer_size(a->dl->w) + a->dl->pend_len;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    int64_t now = (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
    if (size - a->shown < PROGRESS_BYTES && size != a->dl->total &&
        now - a->shown_ns < PROGRESS_NS)
        return 0;
    a->shown = size;
    a->shown_ns = now;
    progress_update(a->dl->o->progress, a->dl->job, size, a->dl->total);
    return 0;
}

/* ---- one request ------------------------------------------------------------------ */

static int setup_curl(struct dl *dl, struct mf_err *err)
{
    const struct fetch_opts *o = dl->o;
    CURL *c = dl->curl = curl_easy_init();
    if (!c)
        return mf_err_set(err, MF_ENOMEM, "cannot create a libcurl handle");
    curl_easy_setopt(c, CURLOPT_URL, dl->src->location);
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(c, CURLOPT_MAXREDIRS, o->max_redirects);
#if LIBCURL_VERSION_NUM >= 0x075500 /* 7.85 replaced the bitmask options */
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
#else
    curl_easy_setopt(c, CURLOPT_PROTOCOLS, (long)(CURLPROTO_HTTP | CURLPROTO_HTTPS));
    curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS, (long)(CURLPROTO_HTTP | CURLPROTO_HTTPS));
#endif
    curl_easy_setopt(c, CURLOPT_FAILONERROR, 1L);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, o->connect_timeout_s);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L); /* a stall, not a slow link, times out */
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, o->stall_timeout_s);
    curl_easy_setopt(c, CURLOPT_USERAGENT, o->user_agent ? o->user_agent : "mfc");
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L); /* the executor fetches from threads */
    curl_easy_setopt(c, CURLOPT_BUFFERSIZE, RECV_BUFFER);
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_xfer);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, dl->errbuf);
    if (dl->src->hf && o->hf_token) {
        /* libcurl's own bearer auth, not a raw header: it is not sent on to
         * another host when the Hub redirects to its CDN. */
        curl_easy_setopt(c, CURLOPT_HTTPAUTH, (long)CURLAUTH_BEARER);
        curl_easy_setopt(c, CURLOPT_XOAUTH2_BEARER, o->hf_token);
    }
    return 0;
}

static int add_header(struct curl_slist **h, const char *name, const char *value,
                      struct mf_err *err)
{
    char line[VALIDATOR_MAX + 32];
    snprintf(line, sizeof line, "%s: %s", name, value);
    struct curl_slist *n = curl_slist_append(*h, line);
    if (!n)
        return mf_err_set(err, MF_ENOMEM, "out of memory");
    *h = n;
    return 0;
}

static int transient(CURLcode cc)
{
    switch (cc) {
    case CURLE_PARTIAL_FILE:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_COULDNT_CONNECT:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
    case CURLE_SSL_CONNECT_ERROR:
        return 1;
    default:
        return 0;
    }
}

static enum outcome http_error(struct dl *dl, struct attempt *a, struct mf_buf *why,
                               struct mf_err *err)
{
    uint64_t have = store_blob_writer_size(dl->w);
    if (a->status == 416 && a->range_total && a->range_total == have) {
        dl->total = have; /* the kept bytes were already the whole file */
        return OUT_DONE;
    }
    if (a->status == 416) {
        mf_buf_printf(why, NULL, "HTTP 416 to bytes=%llu-, starting over",
                      (unsigned long long)have);
        return store_blob_writer_reset(dl->w, err) ? OUT_FATAL : OUT_RETRY;
    }
    if (a->status == 408 || a->status == 429 || a->status >= 500) {
        mf_buf_printf(why, NULL, "HTTP %ld", a->status);
        return OUT_RETRY;
    }
    int denied = a->status == 401 || a->status == 403;
    mf_err_set(err, a->status == 404 ? MF_ENOTFOUND : MF_ENET, "%s: HTTP %ld from %s%s",
               dl->src->display, a->status, dl->src->location,
               denied && dl->src->hf && !dl->o->hf_token
                   ? " (a gated or private repository: set HF_TOKEN)"
                   : "");
    return OUT_FATAL;
}

static enum outcome classify(struct dl *dl, struct attempt *a, CURLcode cc, struct mf_buf *why,
                             struct mf_err *err)
{
    uint64_t have = store_blob_writer_size(dl->w);
    if (a->failed && a->werr.code == MF_ENET) {
        mf_buf_printf(why, NULL, "%s; starting over", a->werr.msg);
        dl->total = 0;
        return store_blob_writer_reset(dl->w, err) ? OUT_FATAL : OUT_RETRY;
    }
    if (a->failed) {
        *err = a->werr;
        return OUT_FATAL;
    }
    if (cc == CURLE_OK && a->status == 304)
        return OUT_NOT_MODIFIED;
    if (cc == CURLE_OK && dl->total && have < dl->total) {
        mf_buf_printf(why, NULL, "connection closed at %llu of %llu bytes",
                      (unsigned long long)have, (unsigned long long)dl->total);
        return OUT_RETRY;
    }
    if (cc == CURLE_OK)
        return OUT_DONE;
    if (cc == CURLE_HTTP_RETURNED_ERROR)
        return http_error(dl, a, why, err);
    const char *detail = dl->errbuf[0] ? dl->errbuf : curl_easy_strerror(cc);
    if (transient(cc)) {
        mf_buf_printf(why, NULL, "%s", detail);
        return OUT_RETRY;
    }
    if (cc == CURLE_TOO_MANY_REDIRECTS)
        mf_err_set(err, MF_ENET, "%s: more than %ld redirects", dl->src->display,
                   dl->o->max_redirects);
    else
        mf_err_set(err, MF_ENET, "%s: %s", dl->src->display, detail);
    return OUT_FATAL;
}

/* What a failed attempt tells the retry loop. */
struct retry_info {
    uint64_t moved;   /* bytes this attempt added to the blob */
    long retry_after; /* the server's Retry-After in seconds, or -1 */
};

/* Sends one GET (ranged when bytes are kept) and sorts out what came back. */
static enum outcome request(struct dl *dl, const char *inm, struct mf_buf *why,
                            struct retry_info *ri, struct mf_err *err)
{
    struct attempt a = {.dl = dl, .retry_after = -1};
    struct curl_slist *h = NULL;
    uint64_t have = store_blob_writer_size(dl->w);
    char range[32];
    int rc = 0;
    snprintf(range, sizeof range, "%llu-", (unsigned long long)have);
    if (have)
        rc = add_header(&h, "If-Range", dl->have.etag[0] ? dl->have.etag : dl->have.last_modified,
                        err);
    if (!rc && inm)
        rc = add_header(&h, "If-None-Match", inm, err);
    if (rc) {
        curl_slist_free_all(h);
        return OUT_FATAL;
    }
    curl_easy_setopt(dl->curl, CURLOPT_RANGE, have ? range : NULL);
    curl_easy_setopt(dl->curl, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(dl->curl, CURLOPT_HEADERDATA, &a);
    curl_easy_setopt(dl->curl, CURLOPT_WRITEDATA, &a);
    curl_easy_setopt(dl->curl, CURLOPT_XFERINFODATA, &a);
    dl->errbuf[0] = '\0';
    CURLcode cc = curl_easy_perform(dl->curl);
    /* every byte received goes into the blob before anything looks at it;
     * after a failed write the rest are dropped (a resume asks again) */
    if (a.failed)
        dl->pend_len = 0;
    else if (flush_pending(dl, &a.werr) != 0)
        a.failed = 1;
    curl_easy_setopt(dl->curl, CURLOPT_HTTPHEADER, NULL);
    curl_slist_free_all(h);
    /* An empty body never reached on_body, yet a 200 still says "the whole
     * resource is this": drop kept bytes and take its validator. */
    if (cc == CURLE_OK && a.status >= 200 && a.status < 300 && !a.body_started && !a.failed &&
        begin_body(&a) != 0)
        a.failed = 1;
    uint64_t base = a.status == 206 ? have : 0; /* a 200 rewrote the blob from zero */
    uint64_t now = store_blob_writer_size(dl->w);
    ri->moved = a.body_started && now > base ? now - base : 0;
    ri->retry_after = a.retry_after;
    return classify(dl, &a, cc, why, err);
}

/* ---- the retry loop --------------------------------------------------------------- */

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

static long backoff_ms(const struct fetch_opts *o, int failures, long retry_after)
{
    long ms = o->retry_base_ms;
    for (int i = 1; i < failures && ms < BACKOFF_MAX_MS; i++)
        ms *= 2;
    if (ms > BACKOFF_MAX_MS)
        ms = BACKOFF_MAX_MS;
    if (retry_after >= 0 && retry_after * 1000 > ms)
        ms = retry_after * 1000;
    return ms;
}

static enum outcome transfer(struct dl *dl, const char *inm, struct mf_err *err)
{
    int failures = 0;
    for (;;) {
        struct mf_buf why;
        struct retry_info ri;
        mf_buf_init(&why, 400);
        int fresh = store_blob_writer_size(dl->w) == 0;
        enum outcome out = request(dl, fresh ? inm : NULL, &why, &ri, err);
        if (out == OUT_RETRY) {
            failures = ri.moved ? 1 : failures + 1; /* progress forgives earlier failures */
            if (failures > dl->o->retries) {
                mf_err_set(err, MF_ENET, "%s: gave up after %d failed attempt%s: %s",
                           dl->src->display, failures, failures == 1 ? "" : "s",
                           why.data ? why.data : "?");
                out = OUT_FATAL;
            }
        }
        if (out != OUT_RETRY) {
            mf_buf_free(&why);
            return out;
        }
        long ms = backoff_ms(dl->o, failures, ri.retry_after);
        char note[600];
        snprintf(note, sizeof note, "retrying in %ld ms: %s (%llu bytes kept)", ms,
                 why.data ? why.data : "?", (unsigned long long)store_blob_writer_size(dl->w));
        progress_note(dl->o->progress, dl->job, note);
        mf_buf_free(&why);
        sleep_ms(ms);
    }
}

/* ---- URL records: ETag -> digest, so an unchanged URL is not downloaded again ----- */

static void url_key(const char *url, char key[STORE_DIGEST_BUF])
{
    struct mf_buf b;
    uint8_t d[MF_SHA256_LEN];
    mf_buf_init(&b, 1 << 16);
    key[0] = '\0';
    if (mf_buf_printf(&b, NULL, "mfc fetch url\n%s", url) == 0 &&
        mf_sha256_mem(b.data, b.len, d, NULL) == 0) {
        char hex[MF_SHA256_HEX_LEN + 1];
        mf_sha256_hex(d, hex);
        snprintf(key, STORE_DIGEST_BUF, "sha256:%s", hex);
    }
    mf_buf_free(&b);
}

/* The ETag of the last download of this URL when its blob is still here. */
static json_t *load_record(struct dl *dl, const char **etag)
{
    json_t *rec = NULL;
    *etag = NULL;
    if (!dl->url_key[0] || store_cache_get(dl->s, dl->url_key, &rec, NULL) != 0)
        return NULL;
    const char *url = json_string_value(json_object_get(rec, "url"));
    const char *tag = json_string_value(json_object_get(rec, "etag"));
    const char *digest = json_string_value(json_object_get(rec, "digest"));
    if (url && strcmp(url, dl->src->location) == 0 && tag && *tag && digest &&
        store_blob_exists(dl->s, digest))
        *etag = tag;
    return rec;
}

static void save_record(struct dl *dl, const struct fetch_result *r)
{
    if (!dl->url_key[0] || !dl->have.etag[0])
        return;
    json_t *rec = json_pack("{s:s, s:s, s:s, s:I}", "url", dl->src->location, "etag", dl->have.etag,
                            "digest", r->digest, "size", (json_int_t)r->size);
    if (rec)
        store_cache_put(dl->s, dl->url_key, rec, NULL); /* only an optimisation */
    json_decref(rec);
}

/* ---- the download ----------------------------------------------------------------- */

static int prepare(struct dl *dl, const char *pin, struct mf_err *err)
{
    char meta[MF_SHA256_HEX_LEN + 32];
    url_key(dl->src->location, dl->url_key);
    if (!dl->url_key[0])
        return mf_err_set(err, MF_ENOMEM, "out of memory");
    snprintf(dl->name, sizeof dl->name, "%s", dl->url_key + 7);
    snprintf(meta, sizeof meta, "partial-%s.json", dl->name);
    int rc = store_tmp_path(dl->s, meta, &dl->meta_path, err);
    if (!rc)
        rc = store_blob_writer_open_partial(dl->s, dl->name, pin, &dl->w, err);
    if (!rc && store_blob_writer_size(dl->w) && meta_load(dl) != 0)
        rc = store_blob_writer_reset(dl->w, err); /* kept bytes we cannot vouch for */
    return rc;
}

static int complete(struct dl *dl, struct fetch_result *r, struct mf_err *err)
{
    uint64_t have = store_blob_writer_size(dl->w);
    if (dl->total && have != dl->total)
        return mf_err_set(err, MF_ENET, "%s: got %llu bytes of %llu", dl->src->display,
                          (unsigned long long)have, (unsigned long long)dl->total);
    struct store_blob_writer *w = dl->w;
    dl->w = NULL; /* commit releases it, whatever happens */
    int rc = store_blob_writer_commit(w, r->digest, &r->size, err);
    unlink(dl->meta_path);
    if (rc)
        return mf_err_prefix(err, "%s", dl->src->display);
    save_record(dl, r);
    return 0;
}

static int download(struct dl *dl, struct fetch_result *r, struct mf_err *err)
{
    const char *etag = NULL;
    /* With a pin the content is checked as it arrives; a record of what the
     * URL held last time must not stand in for that check. */
    json_t *rec = dl->src->pin[0] ? NULL : load_record(dl, &etag);
    enum outcome out = transfer(dl, etag, err);
    int rc = 0;
    if (out == OUT_NOT_MODIFIED && etag) {
        snprintf(r->digest, sizeof r->digest, "%s",
                 json_string_value(json_object_get(rec, "digest")));
        rc = store_blob_size(dl->s, r->digest, &r->size, err);
        r->cached = 1;
    } else if (out == OUT_NOT_MODIFIED) {
        rc = mf_err_set(err, MF_ENET, "%s: HTTP 304 to a request that was not conditional",
                        dl->src->display);
    } else if (out == OUT_DONE) {
        rc = complete(dl, r, err);
    } else {
        rc = err && err->code ? err->code : MF_ENET;
    }
    json_decref(rec);
    return rc;
}

/* Keeps a partial that a later run can resume; drops one it could not. */
static void release(struct dl *dl, int rc)
{
    if (dl->w && rc && store_blob_writer_size(dl->w) &&
        (dl->have.etag[0] || dl->have.last_modified[0])) {
        meta_save(dl);
        store_blob_writer_abort(dl->w);
    } else if (dl->w) {
        store_blob_writer_discard(dl->w);
        if (dl->meta_path)
            unlink(dl->meta_path);
    }
    dl->w = NULL;
    if (dl->curl)
        curl_easy_cleanup(dl->curl);
    free(dl->meta_path);
    free(dl->pend);
}

int fetch_http_run(struct store *s, const struct fetch_source *src, const struct fetch_opts *o,
                   struct fetch_result *r, struct mf_err *err)
{
    struct dl dl = {.s = s, .src = src, .o = o};
    const char *pin = src->pin[0] ? src->pin : NULL;
    int rc = 0, hit = pin && store_blob_exists(s, pin);
    dl.job = progress_begin(o->progress, "fetch", src->display);
    if (!hit)
        rc = prepare(&dl, pin, err);
    /* Another mfc may have finished this download while we waited for its lock. */
    hit = hit || (!rc && pin && store_blob_exists(s, pin));
    if (!rc && hit) {
        snprintf(r->digest, sizeof r->digest, "%s", pin);
        rc = store_blob_size(s, pin, &r->size, err);
        r->cached = 1;
    } else if (!rc) {
        /* best effort: without the thread, bytes are hashed in line */
        dl.async = store_blob_writer_hash_async_slots(dl.w, PEND_BYTES, NULL) == 0;
        rc = setup_curl(&dl, err);
        if (!rc)
            rc = download(&dl, r, err);
    }
    release(&dl, rc);
    if (rc)
        progress_fail(o->progress, dl.job, err ? err->msg : mf_err_name(rc));
    else
        progress_end(o->progress, dl.job, r->cached ? "CACHED" : "done");
    return rc;
}
