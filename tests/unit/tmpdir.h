/*
 * tmpdir.h: a scratch directory for a unit test's fixture: made with mkdtemp
 * under /tmp and removed again with everything in it (nftw, no shell, links
 * not followed). Static functions in a header, so each test program that
 * includes it needs no extra object.
 */
#ifndef MFC_TEST_TMPDIR_H
#define MFC_TEST_TMPDIR_H

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

/* Makes "/tmp/test-<name>-XXXXXX" into dir (cap bytes). Returns 0, or -1
 * when dir is too small or mkdtemp fails (dir then holds no directory). */
static inline int test_tmpdir_make(char *dir, size_t cap, const char *name)
{
    int n = snprintf(dir, cap, "/tmp/test-%s-XXXXXX", name);
    if (n < 0 || (size_t)n >= cap)
        return -1;
    return mkdtemp(dir) ? 0 : -1;
}

static inline int test_tmpdir_rm_entry(const char *p, const struct stat *st, int flag, struct FTW *f)
{
    (void)st;
    (void)flag;
    (void)f;
    return remove(p);
}

/* Removes dir and everything below it (rm -rf); stops at the first entry it
 * cannot remove. Returns 0, or -1 then. */
static inline int test_tmpdir_remove(const char *dir)
{
    return nftw(dir, test_tmpdir_rm_entry, 16, FTW_DEPTH | FTW_PHYS) == 0 ? 0 : -1;
}

#endif
