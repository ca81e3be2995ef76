/*
 * stop.h: stop strings on a streamed, detokenized reply.
 *
 * Text arrives in pieces (one token's text at a time) and a stop string may
 * span many pieces. The matcher releases text as soon as it cannot be the
 * start of a stop string, holds back the rest, and on a match releases the
 * text before the stop and nothing after: the stop string itself is never
 * emitted. It also holds back an incomplete UTF-8 sequence at the end, so
 * every released piece is whole characters (stop_flush releases it anyway).
 *
 * States:  STREAMING --stop_feed, no match--> STREAMING
 *          STREAMING --stop_feed, match-----> STOPPED  (stop_feed returns 1)
 *          STREAMING --stop_flush-----------> FLUSHED  (held text released)
 *          STOPPED / FLUSHED: stop_feed and stop_flush release nothing
 */
#ifndef MFC_RUNTIME_STOP_H
#define MFC_RUNTIME_STOP_H

#include <stddef.h>

#include "common/buf.h"
#include "common/err.h"

#define STOP_MAX_STRINGS 64 /* stop strings per request */
#define STOP_MAX_LEN 1024   /* bytes per stop string */

struct stop;

/* Copies stops[0..n) (empty strings are ignored). Returns 0 and *out, or
 * MF_ERANGE when there are too many or one is too long, or MF_ENOMEM;
 * *out is NULL on failure. n may be 0: then text only passes through the
 * UTF-8 hold. */
int stop_new(struct stop **out, const char *const *stops, size_t n, struct mf_err *err);
/* Accepts NULL. */
void stop_free(struct stop *s);

/* Feeds text[0..n), appending what can be released to out. Returns 1 when a
 * stop string completed (see stop_which), 0 otherwise, or a negative MF_E*
 * code when out refused the text (the matcher is then unchanged). */
int stop_feed(struct stop *s, const char *text, size_t n, struct mf_buf *out, struct mf_err *err);

/* End of stream without a match: releases the held text. Returns 0 or a
 * negative code from out. */
int stop_flush(struct stop *s, struct mf_buf *out, struct mf_err *err);

/* Index (into the stops given to stop_new) of the string that matched, or -1. */
int stop_which(const struct stop *s);

#endif
