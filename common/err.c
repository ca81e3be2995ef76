/*
 * err.c: filling struct mf_err.
 *
 * Messages are formatted into the fixed buffer inside the struct, so setting
 * an error cannot itself fail or allocate. strerror_r (the XSI or GNU flavour,
 * whichever libc gives) is used because strerror is not thread-safe.
 */
#include "err.h"

#include <stdio.h>
#include <string.h>

void mf_err_clear(struct mf_err *err)
{
    if (!err)
        return;
    err->code = 0;
    err->msg[0] = '\0';
}

static void mark_truncated(char *msg, size_t cap, int n)
{
    if (n >= 0 && (size_t)n >= cap && cap > 4)
        memcpy(msg + cap - 4, "...", 4);
}

int mf_err_setv(struct mf_err *err, int code, const char *fmt, va_list ap)
{
    if (!err)
        return code;
    err->code = code;
    int n = vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    if (n < 0)
        snprintf(err->msg, sizeof err->msg, "%s", mf_err_name(code));
    mark_truncated(err->msg, sizeof err->msg, n);
    return code;
}

int mf_err_set(struct mf_err *err, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    mf_err_setv(err, code, fmt, ap);
    va_end(ap);
    return code;
}

/* strerror_r has two incompatible prototypes; this picks the right use. */
static const char *sys_text(int errnum, char *buf, size_t cap)
{
#if defined(__GLIBC__) && defined(_GNU_SOURCE)
    return strerror_r(errnum, buf, cap);
#else
    if (strerror_r(errnum, buf, cap) != 0)
        snprintf(buf, cap, "error %d", errnum);
    return buf;
#endif
}

int mf_err_sys(struct mf_err *err, int code, int errnum, const char *fmt, ...)
{
    if (!err)
        return code;
    va_list ap;
    va_start(ap, fmt);
    mf_err_setv(err, code, fmt, ap);
    va_end(ap);
    char tmp[128];
    const char *why = sys_text(errnum, tmp, sizeof tmp);
    size_t len = strlen(err->msg);
    int n = snprintf(err->msg + len, sizeof err->msg - len, ": %s", why);
    mark_truncated(err->msg, sizeof err->msg, n < 0 ? n : (int)(len + (size_t)n));
    return code;
}

int mf_err_prefix(struct mf_err *err, const char *fmt, ...)
{
    if (!err)
        return MF_EINVAL;
    char old[MF_ERR_MSG_MAX];
    memcpy(old, err->msg, sizeof old);
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    if (n < 0)
        n = 0;
    size_t len = strlen(err->msg);
    int m = snprintf(err->msg + len, sizeof err->msg - len, ": %s", old);
    mark_truncated(err->msg, sizeof err->msg, m < 0 ? m : (int)(len + (size_t)m));
    return err->code;
}

const char *mf_err_name(int code)
{
    switch (code) {
    case MF_OK: return "success";
    case MF_EINVAL: return "invalid input";
    case MF_EIO: return "I/O error";
    case MF_ENOMEM: return "out of memory";
    case MF_EFORMAT: return "malformed data";
    case MF_EUNSUPPORTED: return "unsupported";
    case MF_ENOTFOUND: return "not found";
    case MF_EEXIST: return "already exists";
    case MF_EUSAGE: return "usage error";
    case MF_ERANGE: return "value out of range";
    case MF_EBUSY: return "busy";
    case MF_ENET: return "network error";
    case MF_EINTEGRITY: return "integrity check failed";
    }
    return "unknown error";
}

int mf_err_exit_status(int code)
{
    if (code == MF_OK)
        return 0;
    return code == MF_EUSAGE ? 2 : 1;
}
