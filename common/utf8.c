/*
 * utf8.c: UTF-8 and UTF-16 handling for text inputs.
 */
#include "utf8.h"

#include <stdlib.h>
#include <string.h>

int mf_utf8_decode(const char *s, size_t n, uint32_t *cp)
{
    const unsigned char *u = (const unsigned char *)s;
    if (n == 0)
        return 0;
    if (u[0] < 0x80) {
        *cp = u[0];
        return 1;
    }
    int len;
    uint32_t c, min;
    if ((u[0] & 0xE0) == 0xC0) {
        len = 2, c = u[0] & 0x1F, min = 0x80;
    } else if ((u[0] & 0xF0) == 0xE0) {
        len = 3, c = u[0] & 0x0F, min = 0x800;
    } else if ((u[0] & 0xF8) == 0xF0) {
        len = 4, c = u[0] & 0x07, min = 0x10000;
    } else {
        return 0;
    }
    if ((size_t)len > n)
        return 0;
    for (int i = 1; i < len; i++) {
        if ((u[i] & 0xC0) != 0x80)
            return 0;
        c = c << 6 | (u[i] & 0x3F);
    }
    if (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF))
        return 0;
    *cp = c;
    return len;
}

int mf_utf8_encode(uint32_t cp, char out[4])
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | cp >> 6);
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp >= 0xD800 && cp <= 0xDFFF)
        return 0;
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | cp >> 12);
        out[1] = (char)(0x80 | (cp >> 6 & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    if (cp > 0x10FFFF)
        return 0;
    out[0] = (char)(0xF0 | cp >> 18);
    out[1] = (char)(0x80 | (cp >> 12 & 0x3F));
    out[2] = (char)(0x80 | (cp >> 6 & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

int mf_utf8_valid(const char *s, size_t n, size_t *bad)
{
    size_t i = 0;
    while (i < n) {
        uint32_t cp;
        int k = mf_utf8_decode(s + i, n - i, &cp);
        if (k == 0) {
            if (bad)
                *bad = i;
            return 0;
        }
        i += (size_t)k;
    }
    return 1;
}

/* UTF-16 (after the BOM) to UTF-8; big selects the byte order. */
static int from_utf16(const unsigned char *p, size_t len, int big, const char *what,
                      char **out, size_t *out_len, struct mf_err *err)
{
    if (len % 2)
        return mf_err_set(err, MF_EFORMAT, "%s: UTF-16 text has an odd number of bytes", what);
    if (len / 2 > (SIZE_MAX - 1) / 3)
        return mf_err_set(err, MF_ENOMEM, "%s: text too large", what);
    char *dst = malloc(len / 2 * 3 + 1); /* a UTF-16 unit never needs more than 3 bytes */
    if (!dst)
        return mf_err_set(err, MF_ENOMEM, "%s: out of memory decoding UTF-16", what);
    size_t o = 0;
    for (size_t i = 0; i < len; i += 2) {
        uint32_t u = big ? (uint32_t)(p[i] << 8 | p[i + 1]) : (uint32_t)(p[i + 1] << 8 | p[i]);
        if (u >= 0xD800 && u <= 0xDBFF) {
            uint32_t lo = 0;
            if (i + 3 < len)
                lo = big ? (uint32_t)(p[i + 2] << 8 | p[i + 3])
                         : (uint32_t)(p[i + 3] << 8 | p[i + 2]);
            if (lo < 0xDC00 || lo > 0xDFFF) {
                free(dst);
                return mf_err_set(err, MF_EFORMAT,
                                  "%s: byte %zu: unpaired UTF-16 surrogate", what, i + 2);
            }
            u = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
            i += 2;
        } else if (u >= 0xDC00 && u <= 0xDFFF) {
            free(dst);
            return mf_err_set(err, MF_EFORMAT, "%s: byte %zu: unpaired UTF-16 surrogate", what,
                              i + 2);
        }
        o += (size_t)mf_utf8_encode(u, dst + o);
    }
    dst[o] = '\0';
    *out = dst;
    *out_len = o;
    return 0;
}

int mf_utf8_from_text(const char *data, size_t len, const char *what, char **out,
                      size_t *out_len, struct mf_err *err)
{
    const unsigned char *u = (const unsigned char *)data;
    if (len >= 2 && u[0] == 0xFF && u[1] == 0xFE)
        return from_utf16(u + 2, len - 2, 0, what, out, out_len, err);
    if (len >= 2 && u[0] == 0xFE && u[1] == 0xFF)
        return from_utf16(u + 2, len - 2, 1, what, out, out_len, err);
    if (len >= 3 && u[0] == 0xEF && u[1] == 0xBB && u[2] == 0xBF) {
        data += 3;
        len -= 3;
    }
    size_t bad;
    if (!mf_utf8_valid(data, len, &bad))
        return mf_err_set(err, MF_EFORMAT, "%s: byte %zu: invalid UTF-8", what, bad);
    char *dst = malloc(len + 1);
    if (!dst)
        return mf_err_set(err, MF_ENOMEM, "%s: out of memory", what);
    memcpy(dst, data, len);
    dst[len] = '\0';
    *out = dst;
    *out_len = len;
    return 0;
}
