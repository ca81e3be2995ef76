/*
 * store_stat.c: the stat cache, so an unchanged multi-GB file is hashed once.
 *
 * <root>/stat-cache maps an absolute path to the (size, mtime ns, ctime ns,
 * inode, dev) it had when hashed, and the digest. A file whose stat still
 * matches is taken to have the same content, as git's index and BuildKit's
 * content hash cache do. ctime is in the key because `touch -d` can put mtime
 * back but nothing can put ctime back.
 *
 * Racy entries: a file written in the same timestamp tick as our hash could
 * change again without changing its stat, so an entry is recorded only when
 * both mtime and ctime are older than the hash start by s->racy_ns (2 s:
 * FAT's mtime granularity is 2 s; ext4's is a scheduler tick). A just
 * downloaded file is therefore hashed again on its first reuse, once.
 *
 * The file is JSON {"version":1,"entries":{path:{...}}}, at most MAX_ENTRIES
 * entries, oldest dropped first (jansson keeps insertion order). Updates are
 * read-merge-write under index.lock so concurrent builds do not lose entries.
 * Any problem (missing, corrupt, unwritable) only costs a re-hash.
 */
#include "store/store.h"

#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/file.h"
#include "common/json.h"
#include "store/store_int.h"

#define MAX_ENTRIES 4096         /* sources remembered; more than any set of builds uses at once */
#define STAT_FILE_MAX (8u << 20) /* bytes: MAX_ENTRIES entries of a long path each */

static int64_t ts_ns(const struct timespec *t)
{
    return (int64_t)t->tv_sec * 1000000000 + t->tv_nsec;
}

/* The entry as JSON, or NULL when out of memory. */
static json_t *entry_new(const struct stat *st, const char *digest)
{
    return json_pack("{s:I, s:I, s:I, s:I, s:I, s:s}", "size", (json_int_t)st->st_size, "mtime_ns",
                     (json_int_t)ts_ns(&st->st_mtim), "ctime_ns", (json_int_t)ts_ns(&st->st_ctim),
                     "ino", (json_int_t)st->st_ino, "dev", (json_int_t)st->st_dev, "digest",
                     digest);
}

static int entry_matches(const json_t *e, const struct stat *st)
{
    static const char *const keys[] = {"size", "mtime_ns", "ctime_ns", "ino", "dev"};
    json_int_t want[] = {(json_int_t)st->st_size, (json_int_t)ts_ns(&st->st_mtim),
                         (json_int_t)ts_ns(&st->st_ctim), (json_int_t)st->st_ino,
                         (json_int_t)st->st_dev};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        json_t *v = json_object_get(e, keys[i]);
        if (!json_is_integer(v) || json_integer_value(v) != want[i])
            return 0;
    }
    return 1;
}

/* Loads the cache; a missing or malformed file gives a fresh, empty one. */
static json_t *load(struct store *s)
{
    char *path = store_join(s, STORE_STAT_FILE, NULL);
    char *text = NULL;
    size_t len = 0;
    json_t *v = NULL;
    if (path && mf_file_read(path, STAT_FILE_MAX, &text, &len, NULL) == 0)
        v = mf_json_parse(text, len, path, NULL);
    json_t *entries = json_object_get(v, "entries");
    json_t *ver = json_object_get(v, "version");
    if (!json_is_object(entries) || !json_is_integer(ver) || json_integer_value(ver) != 1) {
        json_decref(v);
        v = json_pack("{s:i, s:{}}", "version", 1, "entries");
    }
    free(text);
    free(path);
    return v;
}

int store_stat_lookup(struct store *s, const char *abspath, const struct stat *st,
                      char digest[STORE_DIGEST_BUF])
{
    json_t *cache = load(s);
    json_t *e = json_object_get(json_object_get(cache, "entries"), abspath);
    const char *d = json_string_value(json_object_get(e, "digest"));
    int hit = d && store_digest_valid(d) && entry_matches(e, st);
    if (hit)
        memcpy(digest, d, STORE_DIGEST_BUF);
    json_decref(cache);
    return hit;
}

static void evict_oldest(json_t *entries)
{
    while (json_object_size(entries) > MAX_ENTRIES) {
        void *it = json_object_iter(entries);
        if (!it)
            break;
        json_object_del(entries, json_object_iter_key(it));
    }
}

static void save(struct store *s, json_t *cache)
{
    struct mf_buf b;
    mf_buf_init(&b, STAT_FILE_MAX);
    char *path = store_join(s, STORE_STAT_FILE, NULL);
    if (path && mf_json_dump(cache, JSON_COMPACT, &b, NULL) == 0 &&
        mf_buf_putc(&b, '\n', NULL) == 0)
        mf_file_write_atomic(path, b.data, b.len, NULL);
    mf_buf_free(&b);
    free(path);
}

void store_stat_record(struct store *s, const char *abspath, const struct stat *st,
                       int64_t hash_start_ns, const char *digest)
{
    int64_t newest = ts_ns(&st->st_mtim);
    if (ts_ns(&st->st_ctim) > newest)
        newest = ts_ns(&st->st_ctim);
    if (newest > hash_start_ns - s->racy_ns)
        return; /* racy: see the header comment */
    json_t *e = entry_new(st, digest);
    if (!e || store_lock_index(s, NULL) != 0) {
        json_decref(e);
        return;
    }
    json_t *cache = load(s);
    json_t *entries = json_object_get(cache, "entries");
    if (entries) {
        json_object_del(entries, abspath); /* re-insert at the end: newest last */
        json_object_set(entries, abspath, e);
        evict_oldest(entries);
        save(s, cache);
    }
    store_unlock_index(s);
    json_decref(cache);
    json_decref(e);
}
