/*
 * store_tmp.c: who owns a file in tmp/, and reclaiming those of processes
 * that died (a killed build's half-written blob, conversion output or RUN
 * /out directory).
 *
 * Ownership is a lock, not a guess from a pid: every open store holds a
 * shared flock on tmp-owners/<pid> for its lifetime (store_tmp_owner_open;
 * several handles of one process share it), and the files a process makes
 * in tmp/ are named <kind>-<pid>-<rest> (blob writers, exec_tmp_path, RUN
 * /out directories). store_tmp_reclaim takes each other pid's lock file
 * exclusively without waiting: it succeeds only when no live process holds
 * it, and then that pid's files are removed, then its lock file (while still
 * locked). A reused pid held by a live mfc keeps its lock, so at worst a dead
 * owner's files wait for a later build; a live owner's are never touched.
 * A lock file re-created between the unlink and the owner's flock is caught
 * by store_tmp_owner_open, which checks that the locked file is still the one
 * at the path. Partial downloads (partial-*) are not owned by a process: they
 * stay, to be resumed, and `mfc prune --all` drops them.
 */
#include "store/store_int.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#define OWNER_TRIES 8 /* re-opens when a reclaimer unlinked the lock file under us */

static int lock_path(const struct store *s, long pid, char **path, struct mf_err *err)
{
    char rel[64];
    snprintf(rel, sizeof rel, STORE_OWNERS_DIR "/%ld", pid);
    *path = store_join(s, rel, err);
    return *path ? 0 : MF_ENOMEM;
}

int store_tmp_owner_open(struct store *s, struct mf_err *err)
{
    char *path = NULL;
    int rc = lock_path(s, (long)getpid(), &path, err);
    for (int i = 0; rc == 0 && i < OWNER_TRIES; i++) {
        struct stat a, b;
        int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        if (fd < 0) {
            rc = mf_err_sys(err, MF_EIO, errno, "cannot open %s", path);
            break;
        }
        int r;
        while ((r = flock(fd, LOCK_SH)) != 0 && errno == EINTR)
            ;
        if (r == 0 && fstat(fd, &a) == 0 && stat(path, &b) == 0 && a.st_ino == b.st_ino &&
            a.st_dev == b.st_dev) {
            s->owner_fd = fd;
            free(path);
            return 0;
        }
        close(fd); /* reclaimed and unlinked while we waited: take the new one */
    }
    if (rc == 0)
        rc = mf_err_set(err, MF_EIO, "cannot hold %s", path);
    free(path);
    return rc;
}

/* The pid in "<kind>-<pid>-<rest>", or 0 when name is not of that form. */
static long owner_pid(const char *name)
{
    const char *dash = strchr(name, '-');
    if (!dash || strncmp(name, STORE_PARTIAL_PREFIX, strlen(STORE_PARTIAL_PREFIX)) == 0)
        return 0;
    long pid = 0;
    const char *p = dash + 1;
    for (; *p >= '0' && *p <= '9' && pid < 100000000; p++)
        pid = pid * 10 + (*p - '0');
    return *p == '-' && p > dash + 1 ? pid : 0;
}

/* 1 when pid's lock file exists and no one holds it; *fd keeps it locked. */
static int owner_dead(const struct store *s, long pid, int *fd)
{
    char *path = NULL;
    struct mf_err ignored;
    *fd = -1;
    if (lock_path(s, pid, &path, &ignored) != 0)
        return 0;
    int f = open(path, O_RDWR | O_CLOEXEC);
    free(path);
    if (f < 0)
        return 0; /* no lock file: an mfc that names no owner, or gone already */
    if (flock(f, LOCK_EX | LOCK_NB) != 0) {
        close(f);
        return 0;
    }
    *fd = f;
    return 1;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)ftw;
    return flag == FTW_DP ? rmdir(path) : unlink(path);
}

/* Removes tmp/<name> (a file or a tree) and adds what it held to *bytes. */
static void remove_tmp(const char *dir, const char *name, uint64_t *bytes)
{
    char path[4096];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (lstat(path, &st) != 0)
        return;
    if (S_ISDIR(st.st_mode)) {
        nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    } else if (unlink(path) == 0) {
        *bytes += (uint64_t)st.st_size;
    }
}

/* Removes the lock files of owners that are gone, whether or not they left
 * files (every mfc process makes one): those nobody holds, taken
 * exclusively before the unlink so a live owner is never touched. */
static void drop_dead_owners(const struct store *s)
{
    struct mf_err ignored;
    char *dir = store_join(s, STORE_OWNERS_DIR, &ignored);
    DIR *d = dir ? opendir(dir) : NULL;
    struct dirent *e;
    while (d && (e = readdir(d))) {
        char *end = NULL;
        long pid = strtol(e->d_name, &end, 10);
        int fd;
        if (pid <= 0 || *end || pid == (long)getpid() || !owner_dead(s, pid, &fd))
            continue;
        char *path = NULL;
        if (lock_path(s, pid, &path, &ignored) == 0)
            unlink(path);
        free(path);
        close(fd);
    }
    if (d)
        closedir(d);
    free(dir);
}

/* Up to this many dead owners are reclaimed per call (a killed build leaves one). */
#define MAX_DEAD 64

int store_tmp_reclaim(struct store *s, uint64_t *files, uint64_t *bytes, struct mf_err *err)
{
    long dead[MAX_DEAD], live[MAX_DEAD];
    int fds[MAX_DEAD];
    size_t n_dead = 0, n_live = 0;
    uint64_t nf = 0, nb = 0;
    char *dir = store_join(s, STORE_TMP_DIR, err);
    if (!dir)
        return MF_ENOMEM;
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        long pid = owner_pid(e->d_name);
        if (pid <= 0 || pid == (long)getpid())
            continue;
        size_t k = 0;
        while (k < n_dead && dead[k] != pid)
            k++;
        int known_live = 0;
        for (size_t i = 0; i < n_live; i++)
            known_live |= live[i] == pid;
        if (known_live)
            continue;
        if (k == n_dead) {
            int fd;
            if (!owner_dead(s, pid, &fd) || n_dead == MAX_DEAD) {
                if (fd >= 0)
                    close(fd);
                if (n_live < MAX_DEAD)
                    live[n_live++] = pid;
                continue;
            }
            dead[n_dead] = pid;
            fds[n_dead++] = fd;
        }
        remove_tmp(dir, e->d_name, &nb);
        nf++;
    }
    if (d)
        closedir(d);
    for (size_t i = 0; i < n_dead; i++) {
        char *path = NULL;
        if (lock_path(s, dead[i], &path, err) == 0)
            unlink(path); /* still locked: a new owner's open finds another inode */
        free(path);
        close(fds[i]);
    }
    free(dir);
    drop_dead_owners(s);
    if (files)
        *files = nf;
    if (bytes)
        *bytes = nb;
    return 0;
}
