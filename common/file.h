/*
 * file.h: reading whole files with a size cap, read-only mappings of a byte
 * range, and atomic writes.
 *
 * Atomic writes follow the one recipe that survives crashes on POSIX file
 * systems: write to a temporary file in the destination directory, fsync it,
 * rename() it over the target, fsync the directory. A reader therefore sees
 * the old file or the complete new one, never a half-written one, and a
 * failed write leaves nothing behind.
 */
#ifndef MF_FILE_H
#define MF_FILE_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

/* Reads all of path into a malloc'd buffer (NUL-terminated, the NUL not
 * counted in *len). Fails with MF_ENOMEM if the file is larger than max.
 * On failure *data and *len are untouched. The caller frees *data. */
int mf_file_read(const char *path, size_t max, char **data, size_t *len, struct mf_err *err);

/* A read-only private mapping of a byte range of a regular file. */
struct mf_file_map {
    const uint8_t *data; /* the range's first byte (NULL when nothing is mapped) */
    uint64_t size;       /* bytes in the range */
    void *map;           /* the mapping (from the page at or below the range) */
    size_t map_len;      /* bytes of map */
};

/* Maps size bytes of the regular file path from offset (size 0: to the end
 * of the file) read-only into *m. `min` is the fewest bytes the range may
 * hold, and `what` names what they must hold for the message ("a GGUF header
 * (24 bytes)"). Fails with MF_ENOTFOUND (no such file), MF_EIO (open, stat or
 * mmap failed), MF_EINVAL (not a regular file), MF_ERANGE (the range lies past
 * the end: the message names offset, size and file size) or MF_EFORMAT (the
 * range is shorter than min: "PATH: byte OFFSET: file|range is N bytes, too
 * short for WHAT"); *m is then zeroed. Release with mf_file_unmap. */
int mf_file_map_range(const char *path, uint64_t offset, uint64_t size, uint64_t min,
                      const char *what, struct mf_file_map *m, struct mf_err *err);
/* Unmaps m and zeroes it. Accepts a zeroed m. */
void mf_file_unmap(struct mf_file_map *m);

/* Replaces path atomically with len bytes of data (mode 0644). */
int mf_file_write_atomic(const char *path, const void *data, size_t len, struct mf_err *err);

/* A file being written in place of `path`, for data that comes in pieces. */
struct mf_file_tmp {
    int fd;          /* open temporary file, or -1 */
    char *path;      /* owned: final path */
    char *tmp_path;  /* owned: the temporary's path, in the same directory */
};

/* Creates the temporary. MF_EEXIST when path exists and is not a regular
 * file (a device, FIFO or directory: the rename would replace the node).
 * On failure t is safe to abort. */
int mf_file_tmp_open(struct mf_file_tmp *t, const char *path, struct mf_err *err);
/* Writes all n bytes (retrying short writes and EINTR). */
int mf_file_tmp_write(struct mf_file_tmp *t, const void *p, size_t n, struct mf_err *err);
/* fsync, rename over the final path, fsync the directory, release t. On
 * failure the temporary is removed, the old file (if any) is left as it was,
 * and t is released. */
int mf_file_tmp_commit(struct mf_file_tmp *t, struct mf_err *err);
/* Removes the temporary and releases t. Accepts a released or never-opened t. */
void mf_file_tmp_abort(struct mf_file_tmp *t);

/* mkdir -p with mode 0755. Existing directories are fine. */
int mf_file_mkdirs(const char *path, struct mf_err *err);

#endif
