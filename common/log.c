/*
 * log.c: formatting of log lines.
 *
 * Each line is built in a local buffer and written with one fputs, so lines
 * from several threads sharing a stream do not interleave mid-line.
 */
#include "log.h"

#include <stdarg.h>
#include <strings.h>
#include <time.h>

#include "err.h"

static const char *level_names[] = {"debug", "info", "warning", "error", "off"};

void mf_log_init(struct mf_log *lg, FILE *out, enum mf_log_level level, const char *prog)
{
    lg->level = level;
    lg->out = out;
    lg->timestamps = 0;
    lg->prog = prog;
}

int mf_log_parse_level(const char *s, enum mf_log_level *level)
{
    static const struct { const char *name; enum mf_log_level lv; } names[] = {
        {"debug", MF_LOG_DEBUG}, {"info", MF_LOG_INFO},   {"warn", MF_LOG_WARN},
        {"warning", MF_LOG_WARN}, {"error", MF_LOG_ERROR}, {"off", MF_LOG_OFF},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (strcasecmp(s, names[i].name) == 0) {
            *level = names[i].lv;
            return 0;
        }
    }
    return MF_EINVAL;
}

void mf_log_msg(const struct mf_log *lg, enum mf_log_level level, const char *fmt, ...)
{
    if (!lg || !lg->out || level < lg->level || level >= MF_LOG_OFF)
        return;
    char line[2048];
    size_t n = 0;
    if (lg->timestamps) {
        struct timespec ts;
        struct tm tm;
        clock_gettime(CLOCK_REALTIME, &ts);
        gmtime_r(&ts.tv_sec, &tm);
        n += strftime(line, sizeof line, "%Y-%m-%dT%H:%M:%SZ ", &tm);
    }
    int k = snprintf(line + n, sizeof line - n, "%s%s%s: ", lg->prog ? lg->prog : "",
                     lg->prog ? ": " : "", level_names[level]);
    if (k > 0)
        n += (size_t)k < sizeof line - n ? (size_t)k : sizeof line - n - 1;
    va_list ap;
    va_start(ap, fmt);
    k = vsnprintf(line + n, sizeof line - n, fmt, ap);
    va_end(ap);
    if (k > 0)
        n += (size_t)k < sizeof line - n ? (size_t)k : sizeof line - n - 1;
    if (n + 2 > sizeof line)
        n = sizeof line - 2;
    line[n++] = '\n';
    line[n] = '\0';
    fputs(line, lg->out);
}
