/*
 * err.h: the error idiom every mfc module uses.
 *
 * A function that can fail returns int: 0 on success or a negative MF_E*
 * code, and fills the caller's struct mf_err with one human sentence that
 * names the input (file:line:col, tensor, URL, digest). Library code never
 * prints and never exits; only main() and the HTTP layer turn an mf_err into
 * output. The struct is plain data: no allocation, nothing to free.
 */
#ifndef MF_ERR_H
#define MF_ERR_H

#include <stdarg.h>

#ifdef __cplusplus
extern "C" { /* kernels/ (CUDA C++) report errors through this too */
#endif

enum {
    MF_OK = 0,
    MF_EINVAL = -1,       /* bad input: a file, a request, a value */
    MF_EIO = -2,          /* the operating system refused (open, read, write) */
    MF_ENOMEM = -3,       /* allocation failed or a size limit was hit */
    MF_EFORMAT = -4,      /* a binary or text format is malformed */
    MF_EUNSUPPORTED = -5, /* well formed, but not something mfc handles */
    MF_ENOTFOUND = -6,    /* a named thing does not exist */
    MF_EEXIST = -7,       /* a thing exists that must not */
    MF_EUSAGE = -8,       /* the command line is wrong */
    MF_ERANGE = -9,       /* a number is outside its allowed range */
    MF_EBUSY = -10,       /* a lock or a resource is held by someone else */
    MF_ENET = -11,        /* a network peer failed or answered badly */
    MF_EINTEGRITY = -12,  /* a digest or checksum did not match */
};

#define MF_ERR_MSG_MAX 512

struct mf_err {
    int code;                 /* 0, or a negative MF_E* value */
    char msg[MF_ERR_MSG_MAX]; /* one sentence naming the input; no trailing newline */
};

/* Clears err to "no error". Accepts NULL. */
void mf_err_clear(struct mf_err *err);

/* Fills err (when not NULL) and returns code, so callers can write
 * `return mf_err_set(err, MF_EINVAL, "...")`. A message longer than
 * MF_ERR_MSG_MAX is cut with "...". */
int mf_err_set(struct mf_err *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int mf_err_setv(struct mf_err *err, int code, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));

/* Like mf_err_set, and appends ": " and the system text for errnum. */
int mf_err_sys(struct mf_err *err, int code, int errnum, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Prepends "prefix: " to an already filled message (for context from a caller,
 * e.g. the Modelfile line that led to a failing fetch). Returns err->code. */
int mf_err_prefix(struct mf_err *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* A short name for a code ("invalid input", "I/O error", ...). Never NULL. */
const char *mf_err_name(int code);

/* The process exit status mfc documents for a code: 2 for usage, 1 otherwise. */
int mf_err_exit_status(int code);

#ifdef __cplusplus
}
#endif

#endif
