/*
 * file.c: capped whole-file reads and crash-safe atomic writes.
 *
 * Temporaries are named "<target>.tmp-<pid>-<random>" beside the target so the
 * final rename stays on one file system (rename is only atomic there) and two
 * processes writing the same target never share a temporary.
 */
#include "file.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/rand.h>

int mf_file_map_range(const char *path, uint64_t offset, uint64_t size, uint64_t min,
                      const char *what, struct mf_file_map *m, struct mf_err *err)
{
    memset(m, 0, sizeof *m);
    int whole = offset == 0 && size == 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return mf_err_sys(err, errno == ENOENT ? MF_ENOTFOUND : MF_EIO, errno, "cannot open %s",
                          path);
    struct stat st;
    int rc = 0;
    uint64_t fsize = 0;
    if (fstat(fd, &st) != 0) {
        rc = mf_err_sys(err, MF_EIO, errno, "cannot stat %s", path);
    } else if (!S_ISREG(st.st_mode)) {
        rc = mf_err_set(err, MF_EINVAL, "%s is not a regular file", path);
    } else {
        fsize = (uint64_t)st.st_size;
        if (offset > fsize || size > fsize - offset)
            rc = mf_err_set(err, MF_ERANGE,
                            "%s: the range at offset %llu of %llu bytes lies past the end of "
                            "the file (%llu bytes)",
                            path, (unsigned long long)offset, (unsigned long long)size,
                            (unsigned long long)fsize);
        else if (!size)
            size = fsize - offset;
    }
    if (!rc && (size < min || size == 0))
        rc = mf_err_set(err, MF_EFORMAT, "%s: byte %llu: %s is %llu bytes, too short for %s",
                        path, (unsigned long long)offset, whole ? "file" : "range",
                        (unsigned long long)size, what);
    if (!rc) {
        long page = sysconf(_SC_PAGESIZE);
        uint64_t delta = offset % (uint64_t)(page > 0 ? page : 4096);
        void *p = mmap(NULL, (size_t)(size + delta), PROT_READ, MAP_PRIVATE, fd,
                       (off_t)(offset - delta));
        if (p == MAP_FAILED) {
            rc = mf_err_sys(err, MF_EIO, errno, "cannot map %s", path);
        } else {
            m->map = p;
            m->map_len = (size_t)(size + delta);
            m->data = (const uint8_t *)p + delta;
            m->size = size;
        }
    }
    close(fd);
    return rc;
}

void mf_file_unmap(struct mf_file_map *m)
{
    if (m->map)
        munmap(m->map, m->map_len);
    memset(m, 0, sizeof *m);
}

int mf_file_read(const char *path, size_t max, char **data, size_t *len, struct mf_err *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return mf_err_sys(err, errno == ENOENT ? MF_ENOTFOUND : MF_EIO, errno,
                          "cannot open %s", path);
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return mf_err_sys(err, MF_EIO, e, "cannot stat %s", path);
    }
    if (S_ISDIR(st.st_mode)) {
        close(fd);
        return mf_err_set(err, MF_EINVAL, "%s is a directory, not a file", path);
    }
    size_t cap = S_ISREG(st.st_mode) && (uint64_t)st.st_size < max ? (size_t)st.st_size + 1 : 4096;
    size_t n = 0;
    char *buf = malloc(cap);
    int rc = 0;
    if (!buf) {
        rc = mf_err_set(err, MF_ENOMEM, "out of memory reading %s", path);
        goto out;
    }
    for (;;) {
        if (n + 1 >= cap) {
            if (cap > max) {
                rc = mf_err_set(err, MF_ENOMEM, "%s is larger than the %zu-byte limit", path, max);
                goto out;
            }
            char *p = realloc(buf, cap * 2);
            if (!p) {
                rc = mf_err_set(err, MF_ENOMEM, "out of memory reading %s", path);
                goto out;
            }
            buf = p;
            cap *= 2;
        }
        ssize_t r = read(fd, buf + n, cap - n - 1);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            rc = mf_err_sys(err, MF_EIO, errno, "cannot read %s", path);
            goto out;
        }
        if (r == 0)
            break;
        n += (size_t)r;
        if (n > max) {
            rc = mf_err_set(err, MF_ENOMEM, "%s is larger than the %zu-byte limit", path, max);
            goto out;
        }
    }
    buf[n] = '\0';
    *data = buf;
    *len = n;
    buf = NULL;
out:
    free(buf);
    close(fd);
    return rc;
}

static int fsync_dir_of(const char *path, struct mf_err *err)
{
    char *copy = strdup(path);
    if (!copy)
        return mf_err_set(err, MF_ENOMEM, "out of memory");
    const char *dir = dirname(copy);
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int rc = 0;
    if (fd < 0)
        rc = mf_err_sys(err, MF_EIO, errno, "cannot open directory %s", dir);
    else if (fsync(fd) != 0 && errno != EINVAL)
        rc = mf_err_sys(err, MF_EIO, errno, "cannot fsync directory %s", dir);
    if (fd >= 0)
        close(fd);
    free(copy);
    return rc;
}

int mf_file_tmp_open(struct mf_file_tmp *t, const char *path, struct mf_err *err)
{
    t->fd = -1;
    t->path = NULL;
    t->tmp_path = NULL;
    /* The commit renames over path: over a device or FIFO (-o /dev/null)
     * that would replace the node itself with a regular file. */
    struct stat st;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode))
        return mf_err_set(err, MF_EEXIST,
                          "%s exists and is not a regular file; refusing to replace it", path);
    t->path = strdup(path);
    t->tmp_path = NULL;
    size_t n = strlen(path) + 48;
    t->tmp_path = malloc(n);
    if (!t->path || !t->tmp_path) {
        mf_file_tmp_abort(t);
        return mf_err_set(err, MF_ENOMEM, "out of memory");
    }
    unsigned char rnd[6];
    if (RAND_bytes(rnd, sizeof rnd) != 1)
        memset(rnd, 0, sizeof rnd);
    snprintf(t->tmp_path, n, "%s.tmp-%ld-%02x%02x%02x%02x%02x%02x", path, (long)getpid(),
             rnd[0], rnd[1], rnd[2], rnd[3], rnd[4], rnd[5]);
    t->fd = open(t->tmp_path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (t->fd < 0) {
        int e = errno;
        free(t->tmp_path);
        t->tmp_path = NULL;   /* nothing to unlink */
        mf_file_tmp_abort(t);
        return mf_err_sys(err, MF_EIO, e, "cannot create a temporary file beside %s", path);
    }
    return 0;
}

int mf_file_tmp_write(struct mf_file_tmp *t, const void *p, size_t n, struct mf_err *err)
{
    const char *c = p;
    while (n) {
        ssize_t w = write(t->fd, c, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return mf_err_sys(err, MF_EIO, errno, "cannot write %s", t->tmp_path);
        c += w;
        n -= (size_t)w;
    }
    return 0;
}

int mf_file_tmp_commit(struct mf_file_tmp *t, struct mf_err *err)
{
    int rc = 0;
    if (fsync(t->fd) != 0)
        rc = mf_err_sys(err, MF_EIO, errno, "cannot fsync %s", t->tmp_path);
    if (!rc && close(t->fd) != 0)
        rc = mf_err_sys(err, MF_EIO, errno, "cannot close %s", t->tmp_path);
    if (!rc)
        t->fd = -1;
    if (!rc && rename(t->tmp_path, t->path) != 0)
        rc = mf_err_sys(err, MF_EIO, errno, "cannot rename %s to %s", t->tmp_path, t->path);
    if (rc) {
        mf_file_tmp_abort(t);
        return rc;
    }
    rc = fsync_dir_of(t->path, err);
    free(t->tmp_path);
    t->tmp_path = NULL;
    mf_file_tmp_abort(t);
    return rc;
}

void mf_file_tmp_abort(struct mf_file_tmp *t)
{
    if (t->fd >= 0)
        close(t->fd);
    t->fd = -1;
    if (t->tmp_path)
        unlink(t->tmp_path);
    free(t->tmp_path);
    free(t->path);
    t->tmp_path = NULL;
    t->path = NULL;
}

int mf_file_write_atomic(const char *path, const void *data, size_t len, struct mf_err *err)
{
    struct mf_file_tmp t;
    int rc = mf_file_tmp_open(&t, path, err);
    if (rc)
        return rc;
    rc = mf_file_tmp_write(&t, data, len, err);
    if (rc) {
        mf_file_tmp_abort(&t);
        return rc;
    }
    return mf_file_tmp_commit(&t, err);
}

int mf_file_mkdirs(const char *path, struct mf_err *err)
{
    char *p = strdup(path);
    if (!p)
        return mf_err_set(err, MF_ENOMEM, "out of memory");
    int rc = 0;
    for (char *s = p + 1;; s++) {
        if (*s != '/' && *s != '\0')
            continue;
        char saved = *s;
        *s = '\0';
        if (mkdir(p, 0755) != 0 && errno != EEXIST) {
            rc = mf_err_sys(err, MF_EIO, errno, "cannot create directory %s", p);
            break;
        }
        *s = saved;
        if (saved == '\0')
            break;
    }
    if (!rc) {
        struct stat st;
        if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
            rc = mf_err_set(err, MF_EIO, "%s exists and is not a directory", path);
    }
    free(p);
    return rc;
}
