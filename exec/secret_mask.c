/*
 * secret_mask.c: the set of 8-grams a build must never print (secret_mask.h).
 *
 * Owns one open-addressed table of 64-bit keys (an 8-gram read as a native
 * uint64; 0 marks an empty slot, so the all-NUL gram is a flag of its own)
 * and the short secrets matched whole. Invariants: the table is at most
 * half full; once an add fails (memory, SECRET_MASK_MAX_GRAMS, an unreadable
 * secret) the mask is "broken" for good and secret_mask_apply refuses, so a
 * caller can never print text that a complete mask would have changed.
 *
 * Why 8-grams cover every longer run: a run of n >= 8 bytes of a form is the
 * union of its n - 7 windows, each of which is in the set; applying marks
 * every window that hits, so the whole run is marked.
 */
#include "exec/secret_mask.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/file.h"

#define SHORT_MAX 16 /* short secrets (and their reverses) matched whole */

struct secret_mask {
    uint64_t *slot;                          /* owned: cap keys, 0 = empty */
    size_t cap;                              /* slots, a power of two (0 before the first add) */
    unsigned bits;                           /* log2(cap) */
    size_t n;                                /* keys in slot (the zero gram not counted) */
    int has_zero;                            /* the all-NUL gram is in the set */
    int broken;                              /* an add failed: apply refuses */
    char whole[SHORT_MAX][SECRET_MASK_GRAM]; /* short secrets, matched whole */
    size_t whole_len[SHORT_MAX];             /* their lengths, 4..7 */
    size_t n_whole;                          /* entries in whole */
};

static const char b64_std[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
static const char b64_url[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

int secret_mask_new(struct secret_mask **m, struct mf_err *err)
{
    *m = calloc(1, sizeof **m);
    return *m ? 0 : mf_err_set(err, MF_ENOMEM, "out of memory for the secret mask");
}

void secret_mask_free(struct secret_mask *m)
{
    if (!m)
        return;
    free(m->slot);
    free(m);
}

size_t secret_mask_size(const struct secret_mask *m)
{
    return m ? m->n + (size_t)m->has_zero : 0;
}

/* ---- the set --------------------------------------------------------------------- */

static uint64_t load8(const void *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static size_t slot_of(uint64_t key, unsigned bits)
{
    return (size_t)((key * 0x9E3779B97F4A7C15ull) >> (64 - bits)); /* Fibonacci hashing */
}

static int contains(const struct secret_mask *m, uint64_t key)
{
    if (!key)
        return m->has_zero;
    if (!m->cap)
        return 0;
    for (size_t i = slot_of(key, m->bits);; i = (i + 1) & (m->cap - 1)) {
        if (m->slot[i] == key)
            return 1;
        if (!m->slot[i])
            return 0;
    }
}

static void put(uint64_t *slot, size_t cap, unsigned bits, uint64_t key, size_t *n)
{
    size_t i = slot_of(key, bits);
    while (slot[i] && slot[i] != key)
        i = (i + 1) & (cap - 1);
    if (!slot[i]) {
        slot[i] = key;
        (*n)++;
    }
}

/* Room for `more` keys at most half full, or MF_ENOMEM. */
static int reserve(struct secret_mask *m, size_t more, struct mf_err *err)
{
    if (m->n + more > SECRET_MASK_MAX_GRAMS)
        return mf_err_set(err, MF_ENOMEM,
                          "the secrets are too large to mask (more than %u "
                          "distinct 8-byte runs)",
                          SECRET_MASK_MAX_GRAMS);
    size_t want = m->cap ? m->cap : 64;
    unsigned bits = m->cap ? m->bits : 6;
    while ((m->n + more) * 2 > want) {
        want *= 2;
        bits++;
    }
    if (want == m->cap)
        return 0;
    uint64_t *slot = calloc(want, sizeof *slot);
    if (!slot)
        return mf_err_set(err, MF_ENOMEM, "out of memory for the secret mask");
    size_t n = 0;
    for (size_t i = 0; i < m->cap; i++)
        if (m->slot[i])
            put(slot, want, bits, m->slot[i], &n);
    free(m->slot);
    m->slot = slot;
    m->cap = want;
    m->bits = bits;
    return 0;
}

/* Every 8-gram of form[0..n) (none when n < 8). */
static int add_grams(struct secret_mask *m, const char *form, size_t n, struct mf_err *err)
{
    if (n < SECRET_MASK_GRAM)
        return 0;
    int rc = reserve(m, n - SECRET_MASK_GRAM + 1, err);
    for (size_t i = 0; !rc && i + SECRET_MASK_GRAM <= n; i++) {
        uint64_t key = load8(form + i);
        if (key)
            put(m->slot, m->cap, m->bits, key, &m->n);
        else
            m->has_zero = 1;
    }
    return rc;
}

/* ---- the forms ------------------------------------------------------------------- */

/* The base64 characters of s[0..n) that depend neither on the k bytes before
 * it (k = 0, 1, 2: where a 3-byte group of the encoded text starts relative
 * to the secret) nor on the bytes after it, in order. Returns their count. */
static size_t b64_inner(const unsigned char *s, size_t n, size_t k, const char *alpha, char *out)
{
    size_t o = 0, first = 8 * k, last = 8 * (k + n);
    for (size_t b = 0; b + 6 <= last; b += 6) {
        if (b < first)
            continue;
        size_t bit = b - first, byte = bit / 8, off = bit % 8;
        unsigned v = (unsigned)s[byte] << 8 | (byte + 1 < n ? s[byte + 1] : 0u);
        out[o++] = alpha[(v >> (10 - off)) & 63];
    }
    return o;
}

static void hex(const unsigned char *s, size_t n, const char *digits, char *out)
{
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[s[i] >> 4];
        out[2 * i + 1] = digits[s[i] & 15];
    }
}

static int add_whole(struct secret_mask *m, const char *s, size_t n, struct mf_err *err)
{
    for (size_t i = 0; i < m->n_whole; i++)
        if (m->whole_len[i] == n && !memcmp(m->whole[i], s, n))
            return 0;
    if (m->n_whole == SHORT_MAX)
        return mf_err_set(err, MF_ENOMEM, "more than %d secrets shorter than %d bytes",
                          SHORT_MAX / 2, SECRET_MASK_GRAM);
    memcpy(m->whole[m->n_whole], s, n);
    m->whole_len[m->n_whole++] = n;
    return 0;
}

/* The secret itself and reversed: whole when short, else by 8-grams. */
static int add_plain(struct secret_mask *m, const char *s, size_t n, struct mf_err *err)
{
    return n < SECRET_MASK_GRAM ? add_whole(m, s, n, err) : add_grams(m, s, n, err);
}

int secret_mask_add(struct secret_mask *m, const void *secret, size_t len, struct mf_err *err)
{
    const unsigned char *s = secret;
    if (m->broken)
        return mf_err_set(err, MF_EINVAL, "the secret mask is unusable after an earlier error");
    if (len < SECRET_MASK_MIN_WHOLE)
        return 0;
    if (len > SECRET_MASK_MAX_SECRET) {
        m->broken = 1;
        return mf_err_set(err, MF_ERANGE, "a secret is larger than %u bytes, too large to mask",
                          SECRET_MASK_MAX_SECRET);
    }
    char *buf = malloc(2 * len + 8); /* the largest form: hex */
    int rc = buf ? 0 : mf_err_set(err, MF_ENOMEM, "out of memory for the secret mask");
    if (!rc)
        rc = add_plain(m, (const char *)s, len, err);
    for (size_t i = 0; !rc && i < len; i++)
        buf[i] = (char)s[len - 1 - i];
    if (!rc)
        rc = add_plain(m, buf, len, err);
    for (size_t k = 0; !rc && k < 3; k++) {
        rc = add_grams(m, buf, b64_inner(s, len, k, b64_std, buf), err);
        if (!rc)
            rc = add_grams(m, buf, b64_inner(s, len, k, b64_url, buf), err);
    }
    if (!rc) {
        hex(s, len, "0123456789abcdef", buf);
        rc = add_grams(m, buf, 2 * len, err);
    }
    if (!rc) {
        hex(s, len, "0123456789ABCDEF", buf);
        rc = add_grams(m, buf, 2 * len, err);
    }
    free(buf);
    if (rc)
        m->broken = 1;
    return rc;
}

int secret_mask_add_file(struct secret_mask *m, const char *path, struct mf_err *err)
{
    char *data = NULL;
    size_t len = 0;
    int rc = mf_file_read(path, SECRET_MASK_MAX_SECRET, &data, &len, err);
    if (rc) {
        m->broken = 1;
        return rc == MF_ENOMEM ? mf_err_set(err, MF_ERANGE,
                                            "secret %s is larger than %u bytes, "
                                            "too large to mask",
                                            path, SECRET_MASK_MAX_SECRET)
                               : rc;
    }
    while (len && (data[len - 1] == '\n' || data[len - 1] == '\r'))
        len--;
    rc = secret_mask_add(m, data, len, err);
    memset(data, 0, len); /* do not leave the secret in freed memory */
    free(data);
    return rc;
}

/* ---- applying -------------------------------------------------------------------- */

long secret_mask_apply(const struct secret_mask *m, char *text, size_t len)
{
    size_t end = 0; /* text[..end) is covered by a window that hit */
    long n = 0;
    int grams = m && (m->n || m->has_zero);
    if (!m || m->broken)
        return -1;
    /* byte i is final once the windows starting at or before i are looked at,
     * and no later window reads it: so it can be overwritten at once */
    for (size_t i = 0; i < len; i++) {
        if (grams && i + SECRET_MASK_GRAM <= len && contains(m, load8(text + i)) &&
            i + SECRET_MASK_GRAM > end)
            end = i + SECRET_MASK_GRAM;
        for (size_t w = 0; w < m->n_whole; w++)
            if (i + m->whole_len[w] <= len && text[i] == m->whole[w][0] &&
                !memcmp(text + i, m->whole[w], m->whole_len[w]) && i + m->whole_len[w] > end)
                end = i + m->whole_len[w];
        if (i < end) {
            text[i] = '*';
            n++;
        }
    }
    return n;
}
