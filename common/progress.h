/*
 * progress.h: build progress for people and for CI.
 *
 * A job (a fetch, later each executor step) is begun, updated with bytes done
 * and total, and ended. Output goes to one stream in one of three forms:
 *   tty    lines redrawn in place, a bar when the total is known:
 *          "#3 fetch https://… [====>     ] 1.2 GiB / 4.6 GiB 310 MB/s ETA 11s"
 *   plain  the same as lines, at most one per job every 2 s (logs, pipes)
 *   json   one JSON object per line per event, for CI (docs/store.md); progress
 *          events carry "bytes" (done) and "total" (0: unknown)
 * All calls are thread-safe (the executor runs jobs in parallel) and accept a
 * NULL struct progress, which does nothing, so library code can take one
 * optionally.
 */
#ifndef MFC_PROGRESS_H
#define MFC_PROGRESS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "common/err.h"

enum progress_mode {
    PROGRESS_AUTO, /* tty when the stream is a terminal, else plain */
    PROGRESS_TTY,
    PROGRESS_PLAIN,
    PROGRESS_JSON,
    PROGRESS_QUIET, /* nothing at all */
};

struct progress;

/* A monotonic clock in nanoseconds; tests inject a fake one. */
typedef int64_t (*progress_clock_fn)(void *arg);

/* "auto", "tty", "plain", "json" or "quiet". Returns 0, or MF_EUSAGE with
 * *mode untouched. */
int progress_parse_mode(const char *s, enum progress_mode *mode, struct mf_err *err);

/* Starts progress output on out (borrowed; usually stderr). On failure *p is NULL. */
int progress_open(struct progress **p, FILE *out, enum progress_mode mode, struct mf_err *err);
/* Ends the output (a tty's last redraw, which stays on screen) and frees p.
 * Accepts NULL and a scope (only the scope is freed). */
void progress_close(struct progress *p);
/* The mode in use after AUTO was resolved. */
enum progress_mode progress_get_mode(const struct progress *p);
/* Replaces the clock (default CLOCK_MONOTONIC). */
void progress_set_clock(struct progress *p, progress_clock_fn fn, void *arg);
/* Terminal width for tty mode (default: the terminal's, else 80). */
void progress_set_width(struct progress *p, int columns);

/* Begins a job; returns its number (#1, #2, ... in begin order), or 0 when p
 * is NULL or out of memory (later calls with 0 do nothing). verb is short
 * ("fetch", "copy"); name is usually a URL or path. Both are copied. */
int progress_begin(struct progress *p, const char *verb, const char *name);
/* Reports done bytes out of total (0: unknown). done may start above 0 (a
 * resumed download): the rate counts only bytes moved since the first update. */
void progress_update(struct progress *p, int id, uint64_t done, uint64_t total);
/* A one-line remark about a job ("retrying in 1 s: HTTP 503"). */
void progress_note(struct progress *p, int id, const char *msg);
/* Ends a job with a short status ("done", "CACHED"). */
void progress_end(struct progress *p, int id, const char *status);
/* Ends a job as failed, with the error's message. */
void progress_fail(struct progress *p, int id, const char *msg);

/* Steps: the executor's plan nodes, shown BuildKit-like (progress.c).
 * Sets the number of steps M: the tty header "(5/8)" and " => [N/M]" lines,
 * and a ticker thread when the stream is a terminal. Call before any step. */
void progress_set_steps(struct progress *p, int n_steps);
/* Begins step number step (1..M, as `mfc plan` prints it: "#step" in plain
 * and json). Returns a job id for update/note/end/fail, or 0 like begin. */
int progress_step_begin(struct progress *p, int step, const char *verb, const char *name);
/* A handle for work inside step number step (a download): begin on it returns
 * the step's job, update and note go to the step's line, end and fail do
 * nothing (the step ends itself). Free it with progress_close. Returns NULL
 * (progress off) when p is NULL, the step was not begun, or out of memory. */
struct progress *progress_scope(struct progress *p, int step);

/* "812 B", "1.2 KiB", "4.6 GiB": binary units, as sizes on disk are
 * (mf_num_fmt_bytes, compact). */
void progress_fmt_bytes(uint64_t n, char *buf, size_t cap);
/* "310 MB/s": decimal units, as network rates are. */
void progress_fmt_rate(double bytes_per_s, char *buf, size_t cap);

#endif
