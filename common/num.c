/*
 * num.c: strict number parsing on top of strtoll/strtoull/strtod.
 */
#include "num.h"

#include <ctype.h>
#include <inttypes.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"

int mf_num_parse_i64(const char *s, int64_t *out)
{
    if (!*s || isspace((unsigned char)*s))
        return MF_EINVAL;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (*end)
        return MF_EINVAL;
    if (errno == ERANGE)
        return MF_ERANGE;
    *out = v;
    return 0;
}

int mf_num_parse_u64(const char *s, uint64_t *out)
{
    if (!*s || !isdigit((unsigned char)*s))
        return MF_EINVAL;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (*end)
        return MF_EINVAL;
    if (errno == ERANGE)
        return MF_ERANGE;
    *out = v;
    return 0;
}

int mf_num_parse_f64(const char *s, double *out)
{
    if (!*s || isspace((unsigned char)*s))
        return MF_EINVAL;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (*end)
        return MF_EINVAL;
    if (!isfinite(v))
        return MF_EINVAL;
    if (errno == ERANGE && fabs(v) > 1.0)
        return MF_ERANGE;
    *out = v;
    return 0;
}

int mf_num_parse_bool(const char *s, int *out)
{
    static const char *yes[] = {"1", "t", "T", "true", "TRUE", "True"};
    static const char *no[] = {"0", "f", "F", "false", "FALSE", "False"};
    for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++) {
        if (strcmp(s, yes[i]) == 0) {
            *out = 1;
            return 0;
        }
        if (strcmp(s, no[i]) == 0) {
            *out = 0;
            return 0;
        }
    }
    return MF_EINVAL;
}

int mf_num_hex_digit(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

void mf_num_fmt_bytes(uint64_t n, int compact, char *buf, size_t cap)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    double v = (double)n;
    int u = 0;
    while (v >= 1024 && u < 5) {
        v /= 1024;
        u++;
    }
    if (u == 0)
        snprintf(buf, cap, "%" PRIu64 " B", n);
    else if (compact)
        snprintf(buf, cap, v < 10 ? "%.1f %s" : "%.0f %s", v, units[u]);
    else
        snprintf(buf, cap, "%.2f %s", v, units[u]);
}
