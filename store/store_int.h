/*
 * store_int.h: internals shared by the store's files (store.c, store_tag.c,
 * store_cache.c, store_stat.c, store_gc.c, store_oci.c). Not an API.
 */
#ifndef MFC_STORE_INT_H
#define MFC_STORE_INT_H

#include <stdint.h>
#include <sys/stat.h>

#include "store/store.h"

struct store {
    char *root;               /* owned: the store's directory, as given */
    int lock_fd;              /* "lock": LOCK_SH while open, LOCK_EX during gc */
    int index_lock_fd;        /* "index.lock": LOCK_EX around index/cache/stat-cache updates */
    int index_locked;         /* nonzero while this handle holds index.lock */
    int owner_fd;             /* "tmp-owners/<pid>": LOCK_SH while open (store_tmp.c) */
    int64_t racy_ns;          /* stat-cache margin (store_stat.c); tests set 0 */
    struct store_stats stats; /* counters for tests and du */
};

/* Directory and file names under the root. */
#define STORE_BLOBS_DIR "blobs/sha256"
#define STORE_TMP_DIR "tmp"
#define STORE_OWNERS_DIR "tmp-owners" /* <pid>: who owns tmp/<kind>-<pid>-* (store_tmp.c) */
#define STORE_CACHE_DIR "cache"
#define STORE_INDEX_FILE "index.json"
#define STORE_STAT_FILE "stat-cache"
#define STORE_PARTIAL_PREFIX "partial-"

/* malloc'd "<root>/<rel>"; NULL when out of memory (err filled). */
char *store_join(const struct store *s, const char *rel, struct mf_err *err);
/* malloc'd "<root>/<dir>/<hex of digest><suffix>"; digest must be valid. */
char *store_digest_join(const struct store *s, const char *dir, const char *digest,
                        const char *suffix, struct mf_err *err);

/* Takes this process's shared lock on tmp-owners/<pid> into s->owner_fd, which
 * marks the tmp files named <kind>-<pid>-... as live (store_tmp.c). */
int store_tmp_owner_open(struct store *s, struct mf_err *err);

/* Exclusive index.lock, blocking. Not recursive: callers lock once per update. */
int store_lock_index(struct store *s, struct mf_err *err);
void store_unlock_index(struct store *s);

/* Hashes fd from its current offset to EOF into digest, counting the bytes in
 * s->stats.hashed_bytes. */
int store_hash_fd(struct store *s, int fd, const char *what, char digest[STORE_DIGEST_BUF],
                  uint64_t *size, struct mf_err *err);
/* Formats raw digest bytes as "sha256:<hex>". */
void store_digest_format(const uint8_t d[32], char digest[STORE_DIGEST_BUF]);

/* index.json, read and validated (a missing file is an empty index), and
 * written atomically. save needs index.lock held. */
int store_index_load(struct store *s, json_t **index, struct mf_err *err);
int store_index_save(struct store *s, json_t *index, struct mf_err *err);

/* The stat cache. lookup: 1 and the digest when path's current stat matches
 * an entry, 0 otherwise (any problem is a miss). record: remembers the digest
 * for path as stat'ed before hashing, unless the file is too new to trust
 * (docs/store.md, "Stat cache"); failures only lose the optimisation. */
int store_stat_lookup(struct store *s, const char *abspath, const struct stat *st,
                      char digest[STORE_DIGEST_BUF]);
void store_stat_record(struct store *s, const char *abspath, const struct stat *st,
                       int64_t hash_start_ns, const char *digest);

/* Appends every valid digest string found anywhere in v to *list (growing
 * *cap), for marking blobs referenced by cache records. */
int store_cache_collect(const json_t *v, char (**list)[STORE_DIGEST_BUF], size_t *n, size_t *cap,
                        struct mf_err *err);

#endif
