/*
 * stop.c: stop-string matching across token boundaries (states in stop.h).
 *
 * Owns copies of the stop strings and the held-back text. Invariant between
 * calls: held is shorter than the longest stop string plus 3 bytes, since
 * everything else was either released or matched; so each feed costs
 * O((held + piece) * total stop length) and nothing grows with the reply.
 *
 * After appending a piece, the occurrence of a stop that ends first ends the
 * stream (as it would have, had the text come one byte at a time). Otherwise the longest tail of
 * held that is a proper prefix of some stop stays held, moved back to a character boundary, and so
 * does an incomplete UTF-8 sequence at the very end.
 */
#include "runtime/engine/stop.h"

#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

enum { STREAMING, STOPPED, FLUSHED };

struct stop {
    char **strs;        /* owned copies of the non-empty stop strings */
    size_t *lens;       /* their lengths */
    int *orig;          /* their indexes in the caller's list */
    size_t n;           /* strings kept */
    struct mf_buf held; /* text received but not yet released */
    int state;          /* STREAMING, STOPPED or FLUSHED */
    int which;          /* orig index of the match, or -1 */
};

int stop_new(struct stop **out, const char *const *stops, size_t n, struct mf_err *err)
{
    *out = NULL;
    if (n > STOP_MAX_STRINGS)
        return mf_err_set(err, MF_ERANGE, "stop: %zu stop strings (limit %d)", n, STOP_MAX_STRINGS);
    for (size_t i = 0; i < n; i++)
        if (strlen(stops[i]) > STOP_MAX_LEN)
            return mf_err_set(err, MF_ERANGE, "stop: stop string %zu is %zu bytes (limit %d)", i,
                              strlen(stops[i]), STOP_MAX_LEN);
    struct stop *s = calloc(1, sizeof *s);
    if (s) {
        s->strs = calloc(n ? n : 1, sizeof *s->strs);
        s->lens = calloc(n ? n : 1, sizeof *s->lens);
        s->orig = calloc(n ? n : 1, sizeof *s->orig);
        s->which = -1;
    }
    int ok = s && s->strs && s->lens && s->orig;
    for (size_t i = 0; ok && i < n; i++) {
        if (!stops[i][0])
            continue;
        ok = (s->strs[s->n] = strdup(stops[i])) != NULL;
        s->lens[s->n] = strlen(stops[i]);
        s->orig[s->n++] = (int)i;
    }
    if (!ok) {
        stop_free(s);
        return mf_err_set(err, MF_ENOMEM, "stop: out of memory");
    }
    /* the held text never exceeds one piece plus a stop; pieces are tokens */
    mf_buf_init(&s->held, (size_t)1 << 30);
    *out = s;
    return 0;
}

void stop_free(struct stop *s)
{
    if (!s)
        return;
    for (size_t i = 0; s->strs && i < s->n; i++)
        free(s->strs[i]);
    free(s->strs);
    free(s->lens);
    free(s->orig);
    mf_buf_free(&s->held);
    free(s);
}

int stop_which(const struct stop *s)
{
    return s->which;
}

/* The stop occurrence in held that ends first (then starts first): its
 * offset, with *idx set; or -1. Ending first is what a byte-at-a-time stream
 * would see first, so the result does not depend on how text was split. */
static ssize_t find_stop(const struct stop *s, size_t *idx)
{
    ssize_t best = -1;
    size_t best_end = 0;
    for (size_t i = 0; i < s->n; i++) {
        const char *hit = memmem(s->held.data, s->held.len, s->strs[i], s->lens[i]);
        if (!hit)
            continue;
        ssize_t at = hit - s->held.data;
        size_t end = (size_t)at + s->lens[i];
        if (best < 0 || end < best_end || (end == best_end && at < best)) {
            best = at;
            best_end = end;
            *idx = i;
        }
    }
    return best;
}

/* Longest tail of held that is a proper prefix of a stop string. */
static size_t prefix_tail(const struct stop *s)
{
    size_t keep = 0;
    for (size_t i = 0; i < s->n; i++) {
        size_t k = s->lens[i] - 1;
        if (k > s->held.len)
            k = s->held.len;
        for (; k > keep; k--)
            if (memcmp(s->held.data + s->held.len - k, s->strs[i], k) == 0) {
                keep = k;
                break;
            }
    }
    return keep;
}

/* Bytes of held that may be released: before any possible stop start, and
 * not splitting or ending inside a UTF-8 character. */
static size_t releasable(const struct stop *s)
{
    const unsigned char *h = (const unsigned char *)s->held.data;
    size_t len = s->held.len, r = len - prefix_tail(s);
    for (int i = 0; i < 3 && r > 0 && r < len && (h[r] & 0xC0) == 0x80; i++)
        r--;
    if (r == len && r > 0) {
        size_t lead = r;
        for (int i = 0; i < 4 && lead > 0 && (h[lead - 1] & 0xC0) == 0x80; i++)
            lead--;
        if (lead > 0) {
            unsigned char c = h[lead - 1];
            size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
            if (c >= 0xC0 && (lead - 1) + need > len)
                r = lead - 1;
        }
    }
    return r;
}

/* Moves held[0..r) to out, keeping the rest held. */
static int release(struct stop *s, size_t r, struct mf_buf *out, struct mf_err *err)
{
    if (!s->held.data)
        return 0;
    int rc = r ? mf_buf_append(out, s->held.data, r, err) : 0;
    if (rc)
        return rc;
    memmove(s->held.data, s->held.data + r, s->held.len - r);
    s->held.len -= r;
    s->held.data[s->held.len] = '\0';
    return 0;
}

int stop_feed(struct stop *s, const char *text, size_t n, struct mf_buf *out, struct mf_err *err)
{
    if (s->state != STREAMING)
        return 0;
    size_t before = s->held.len;
    int rc = mf_buf_append(&s->held, text, n, err);
    if (rc)
        return rc;
    if (!s->held.data)
        return 0;
    size_t idx = 0;
    ssize_t at = find_stop(s, &idx);
    rc = release(s, at >= 0 ? (size_t)at : releasable(s), out, err);
    if (rc) {
        s->held.len = before; /* unchanged, as promised */
        s->held.data[before] = '\0';
        return rc;
    }
    if (at < 0)
        return 0;
    s->state = STOPPED;
    s->which = s->orig[idx];
    mf_buf_reset(&s->held);
    return 1;
}

int stop_flush(struct stop *s, struct mf_buf *out, struct mf_err *err)
{
    if (s->state != STREAMING)
        return 0;
    int rc = release(s, s->held.len, out, err);
    if (!rc)
        s->state = FLUSHED;
    return rc;
}
