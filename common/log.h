/*
 * log.h: leveled logging to a stream, owned by whoever creates the logger.
 *
 * There is no global logger: main() builds one (level from -v/-q or
 * MFC_LOG_LEVEL) and hands a pointer to the code that may log. Library code
 * that must stay silent is simply given NULL, which drops every message.
 */
#ifndef MF_LOG_H
#define MF_LOG_H

#include <stdio.h>

enum mf_log_level { MF_LOG_DEBUG, MF_LOG_INFO, MF_LOG_WARN, MF_LOG_ERROR, MF_LOG_OFF };

struct mf_log {
    enum mf_log_level level; /* messages below this are dropped */
    FILE *out;               /* borrowed; usually stderr */
    int timestamps;          /* nonzero: prefix each line with UTC ISO-8601 time */
    const char *prog;        /* borrowed; prefix such as "mfc" or "mfc-serve", may be NULL */
};

/* Sets up a logger writing to out at level. */
void mf_log_init(struct mf_log *lg, FILE *out, enum mf_log_level level, const char *prog);

/* Parses "debug", "info", "warn"/"warning", "error", "off" (any case).
 * Returns 0 and sets *level, or MF_EINVAL leaving *level untouched. */
int mf_log_parse_level(const char *s, enum mf_log_level *level);

/* Writes one line "prog: level: message" if level passes. lg may be NULL. */
void mf_log_msg(const struct mf_log *lg, enum mf_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define mf_log_debug(lg, ...) mf_log_msg((lg), MF_LOG_DEBUG, __VA_ARGS__)
#define mf_log_info(lg, ...) mf_log_msg((lg), MF_LOG_INFO, __VA_ARGS__)
#define mf_log_warn(lg, ...) mf_log_msg((lg), MF_LOG_WARN, __VA_ARGS__)
#define mf_log_error(lg, ...) mf_log_msg((lg), MF_LOG_ERROR, __VA_ARGS__)

#endif
