/*
 * test_store.c: unit tests for the content store (store/store*.c): blobs
 * in and out with digest checks, partial blobs, tags in index.json, the stat
 * cache, cache records, locking between processes, and garbage collection.
 * Each test gets a fresh store in a temporary directory.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <errno.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/file.h"
#include "common/json.h"
#include "common/sha256.h"
#include "store/store.h"
#include "store/store_int.h"
#include "tests/unit/tmpdir.h"

/* sha256("hello") and sha256("world") */
#define D_HELLO "sha256:2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
#define D_WORLD "sha256:486ea46224d1bb4fb680f34f7c9ad96a8f24ec88be73ea8e5a6c65260e9cb8a7"

struct fixture {
    char dir[64];    /* the temporary store root */
    struct store *s; /* open on dir */
};

static int setup(void **state)
{
    struct fixture *fx = calloc(1, sizeof *fx);
    if (!fx || test_tmpdir_make(fx->dir, sizeof fx->dir, "store") != 0)
        return -1;
    struct mf_err err;
    if (store_open(&fx->s, fx->dir, &err) != 0) {
        fprintf(stderr, "store_open: %s\n", err.msg);
        return -1;
    }
    *state = fx;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *fx = *state;
    store_close(fx->s);
    test_tmpdir_remove(fx->dir);
    free(fx);
    return 0;
}

static char *path_in(const struct fixture *fx, const char *rel)
{
    char *p = NULL;
    assert_true(asprintf(&p, "%s/%s", fx->dir, rel) > 0);
    return p;
}

static void write_file(const char *path, const char *text)
{
    struct mf_err err;
    assert_int_equal(mf_file_write_atomic(path, text, strlen(text), &err), 0);
}

static int count_files(const char *dir)
{
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        n += e->d_name[0] != '.';
    if (d)
        closedir(d);
    return n;
}

static void put(struct store *s, const char *text, char digest[STORE_DIGEST_BUF])
{
    struct mf_err err;
    assert_int_equal(store_put_mem(s, text, strlen(text), digest, &err), 0);
}

/* ---- blobs ------------------------------------------------------------------------ */

static void test_layout_is_created(void **state)
{
    struct fixture *fx = *state;
    char *p = path_in(fx, "oci-layout");
    char *text;
    size_t len;
    struct mf_err err;
    assert_int_equal(mf_file_read(p, 100, &text, &len, &err), 0);
    assert_non_null(strstr(text, "\"imageLayoutVersion\":\"1.0.0\""));
    free(text);
    free(p);
    p = path_in(fx, "blobs/sha256");
    struct stat st;
    assert_int_equal(stat(p, &st), 0);
    assert_true(S_ISDIR(st.st_mode));
    free(p);
}

static void test_blob_put_read_verify(void **state)
{
    struct fixture *fx = *state;
    struct mf_err err;
    char d[STORE_DIGEST_BUF];
    put(fx->s, "hello", d);
    assert_string_equal(d, D_HELLO);
    assert_true(store_blob_exists(fx->s, D_HELLO));
    uint64_t size = 0;
    assert_int_equal(store_blob_size(fx->s, D_HELLO, &size, &err), 0);
    assert_int_equal(size, 5);
    char *data;
    size_t len;
    assert_int_equal(store_blob_read(fx->s, D_HELLO, 100, &data, &len, &err), 0);
    assert_string_equal(data, "hello");
    free(data);

    /* Rot on disk is caught on the read paths that verify. */
    char *p = NULL;
    assert_int_equal(store_blob_path(fx->s, D_HELLO, &p, &err), 0);
    write_file(p, "jello");
    assert_int_equal(store_blob_read(fx->s, D_HELLO, 100, &data, &len, &err), MF_EINTEGRITY);
    assert_non_null(strstr(err.msg, "corrupt"));
    int fd;
    assert_int_equal(store_blob_open(fx->s, D_HELLO, 1, &fd, &err), MF_EINTEGRITY);
    assert_int_equal(fd, -1);
    assert_int_equal(store_blob_open(fx->s, D_HELLO, 0, &fd, &err), 0);
    close(fd);
    free(p);
}

static void test_digest_validation(void **state)
{
    struct fixture *fx = *state;
    struct mf_err err;
    assert_true(store_digest_valid(D_HELLO));
    assert_false(store_digest_valid(
        "sha256:2CF24DBA5FB0A30E26E83B2AC5B9E29E1B161E5C1FA7425E73043362938B9824"));
    assert_false(store_digest_valid("sha256:2cf2"));
    assert_false(store_digest_valid(D_HELLO "0"));
    assert_false(store_digest_valid("sha256:../../../../etc/passwd"));
    assert_int_equal(store_digest_check("sha512:abc", "x", &err), MF_EUNSUPPORTED);
    char *p = NULL;
    assert_int_equal(store_blob_path(fx->s, "sha256:../../x", &p, &err), MF_EINVAL);
    assert_null(p);
    assert_false(store_blob_exists(fx->s, "sha256:../oci-layout"));
}

static void test_blob_mismatch_leaves_nothing(void **state)
{
    struct fixture *fx = *state;
    struct mf_err err;
    struct store_blob_writer *w;
    assert_int_equal(store_blob_writer_open(fx->s, D_WORLD, &w, &err), 0);
    assert_int_equal(store_blob_writer_write(w, "hello", 5, &err), 0);
    char d[STORE_DIGEST_BUF];
    assert_int_equal(store_blob_writer_commit(w, d, NULL, &err), MF_EINTEGRITY);
    assert_non_null(strstr(err.msg, D_WORLD));
    assert_non_null(strstr(err.msg, D_HELLO));
    assert_false(store_blob_exists(fx->s, D_HELLO));
    assert_false(store_blob_exists(fx->s, D_WORLD));
    char *tmp = path_in(fx, "tmp");
    assert_int_equal(count_files(tmp), 0);

    /* The same through store_put_file, which names the file. */
    char *src = path_in(fx, "src.txt");
    write_file(src, "hello");
    struct store_put_opts o = {.expect = D_WORLD};
    assert_int_equal(store_put_file(fx->s, src, &o, d, NULL, &err), MF_EINTEGRITY);
    assert_non_null(strstr(err.msg, "src.txt"));
    assert_false(store_blob_exists(fx->s, D_HELLO));
    assert_int_equal(count_files(tmp), 0);
    free(src);
    free(tmp);
}

static void test_partial_blob_resumes(void **state)
{
    struct fixture *fx = *state;
    struct mf_err err;
    struct store_blob_writer *w;
    assert_int_equal(store_blob_writer_open_partial(fx->s, "dl1", D_HELLO, &w, &err), 0);
    assert_int_equal(store_blob_writer_size(w), 0);
    assert_int_equal(store_blob_writer_write(w, "hel", 3, &err), 0);
    store_blob_writer_abort(w); /* interrupted: kept for later */
    char *p = path_in(fx, "tmp/partial-dl1");
    struct stat st;
    assert_int_equal(stat(p, &st), 0);
    assert_int_equal(st.st_size, 3);

    assert_int_equal(store_blob_writer_open_partial(fx->s, "dl1", D_HELLO, &w, &err), 0);
    assert_int_equal(store_blob_writer_size(w), 3);
    assert_int_equal(store_blob_writer_write(w, "lo", 2, &err), 0);
    char d[STORE_DIGEST_BUF];
    uint64_t size;
    assert_int_equal(store_blob_writer_commit(w, d, &size, &err), 0);
    assert_string_equal(d, D_HELLO);
    assert_int_equal(size, 5);
    assert_int_not_equal(stat(p, &st), 0);

    /* reset drops what a server refused to continue */
    assert_int_equal(store_blob_writer_open_partial(fx->s, "dl2", NULL, &w, &err), 0);
    assert_int_equal(store_blob_writer_write(w, "garbage", 7, &err), 0);
    assert_int_equal(store_blob_writer_reset(w, &err), 0);
    assert_int_equal(store_blob_writer_write(w, "world", 5, &err), 0);
    assert_int_equal(store_blob_writer_commit(w, d, NULL, &err), 0);
    assert_string_equal(d, D_WORLD);
    assert_int_equal(store_blob_writer_open_partial(fx->s, "../x", NULL, &w, &err), MF_EINVAL);
    free(p);
}

/* ---- tags ------------------------------------------------------------------------- */

static void test_tag_grammar(void **state)
{
    static const char *const good[] = {"a",    "llama3-lora", "llama3:latest", "ns/model:v1.2",
                                       "a--b", "x@y",         "v1+build"};
    static const char *const bad[] = {"",    "-a", "a-",   "a//b", "/a",   "a/",
                                      "a b", "a:", "a..b", "a\n",  "../x", "a/../b"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
        assert_true(store_tag_valid(good[i]));
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_false(store_tag_valid(bad[i]));
    char big[STORE_REF_MAX + 1];
    memset(big, 'a', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    assert_false(store_tag_valid(big));
}

static struct store_desc desc_of(const char *digest, uint64_t size)
{
    struct store_desc d = {.size = size};
    snprintf(d.media_type, sizeof d.media_type, "%s", STORE_MT_OCI_MANIFEST);
    snprintf(d.digest, sizeof d.digest, "%s", digest);
    return d;
}

static void test_tags_round_trip(void **state)
{
    struct fixture *fx = *state;
    struct mf_err err;
    struct store_desc a = desc_of(D_HELLO, 5), b = desc_of(D_WORLD, 5);
    assert_int_equal(store_tag_set(fx->s, "zeta", &a, "2026-01-02T03:04:05Z", &err), 0);
    assert_int_equal(store_tag_set(fx->s, "alpha:v1", &b, NULL, &err), 0);
    assert_int_equal(store_tag_set(fx->s, "bad name", &b, NULL, &err), MF_EINVAL);
    struct store_tag *tags;
    size_t n;
    assert_int_equal(store_tag_list(fx->s, &tags, &n, &err), 0);
    assert_int_equal(n, 2);
    assert_string_equal(tags[0].name, "alpha:v1");
    assert_string_equal(tags[0].desc.digest, D_WORLD);
    assert_string_equal(tags[1].name, "zeta");
    assert_string_equal(tags[1].created, "2026-01-02T03:04:05Z");
    free(tags);

    /* Retagging moves the tag; removing drops only it. */
    assert_int_equal(store_tag_set(fx->s, "zeta", &b, NULL, &err), 0);
    struct store_tag t;
    assert_int_equal(store_tag_get(fx->s, "zeta", &t, &err), 0);
    assert_string_equal(t.desc.digest, D_WORLD);
    assert_int_equal(store_tag_remove(fx->s, "zeta", &err), 0);
    assert_int_equal(store_tag_get(fx->s, "zeta", &t, &err), MF_ENOTFOUND);
    assert_int_equal(store_tag_remove(fx->s, "zeta", &err), MF_ENOTFOUND);
    assert_int_equal(store_tag_get(fx->s, "alpha:v1", &t, &err), 0);

    /* What is on disk is a valid image index, as OCI tools will read it. */
    char *p = path_in(fx, "index.json"), *text;
    size_t len;
    json_t *index;
    assert_int_equal(mf_file_read(p, 1 << 20, &text, &len, &err), 0);
    assert_int_equal(store_oci_parse_index(text, len, p, &index, &err), 0);
    assert_int_equal(json_array_size(json_object_get(index, "manifests")), 1);
    json_decref(index);
    free(text);
    free(p);
}

static void test_unknown_index_fields_are_kept(void **state)
{
    struct fixture *fx = *state;
    struct mf_err err;
    char *p = path_in(fx, "index.json");
    write_file(p, "{\"schemaVersion\":2,\"manifests\":[{\"mediaType\":\"" STORE_MT_OCI_MANIFEST
                  "\",\"digest\":\"" D_HELLO
                  "\",\"size\":5,\"platform\":{\"os\":\"linux\"}}],\"annotations\":{\"x\":\"y\"}}");
    struct store_desc b = desc_of(D_WORLD, 5);
    assert_int_equal(store_tag_set(fx->s, "t", &b, NULL, &err), 0);
    char *text;
    size_t len;
    assert_int_equal(mf_file_read(p, 1 << 20, &text, &len, &err), 0);
    assert_non_null(strstr(text, "\"platform\""));
    assert_non_null(strstr(text, "\"x\": \"y\""));
    free(text);
    free(p);
}

static void test_corrupt_index_rejected_not_overwritten(void **state)
{
    struct fixture *fx = *state;
    static const char *const bad[] = {
        "{\"schemaVersion\":2,\"manifests\":[",
        "[]",
        "{\"schemaVersion\":1,\"manifests\":[]}",
        "{\"schemaVersion\":2}",
        "{\"schemaVersion\":2,\"manifests\":[{\"mediaType\":\"a/"
        "b\",\"digest\":\"sha256:"
        "2CF24DBA5FB0A30E26E83B2AC5B9E29E1B161E5C1FA7425E73043362938B9824\",\"size\":5}]}",
        "{\"schemaVersion\":2,\"manifests\":[{\"mediaType\":\"a/b\",\"digest\":\"" D_HELLO
        "\",\"size\":-1}]}",
        "{\"schemaVersion\":2,\"manifests\":[{\"mediaType\":\"a/b\",\"digest\":\"" D_HELLO
        "\",\"size\":5,\"annotations\":{\"" STORE_ANN_REF_NAME "\":7}}]}",
    };
    char *p = path_in(fx, "index.json");
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct mf_err err;
        write_file(p, bad[i]);
        struct store_desc b = desc_of(D_WORLD, 5);
        int rc = store_tag_set(fx->s, "t", &b, NULL, &err);
        assert_true(rc == MF_EFORMAT || rc == MF_EUNSUPPORTED);
        assert_non_null(strstr(err.msg, "index.json"));
        assert_non_null(strstr(err.msg, "left as it is"));
        struct store_tag *tags;
        size_t n;
        assert_int_not_equal(store_tag_list(fx->s, &tags, &n, &err), 0);
        struct store_usage u;
        assert_int_not_equal(store_gc_run(fx->s, 0, NULL, NULL, &u, &err), 0);
        char *text;
        size_t len;
        assert_int_equal(mf_file_read(p, 1 << 20, &text, &len, &err), 0);
        assert_string_equal(text, bad[i]);
        free(text);
    }
    free(p);
}

/* ---- two processes ---------------------------------------------------------------- */

static void child_tags(const char *root, int id, int count)
{
    struct store *s;
    struct mf_err err;
    if (store_open(&s, root, &err) != 0)
        _exit(2);
    for (int i = 0; i < count; i++) {
        char text[64], name[64], d[STORE_DIGEST_BUF];
        snprintf(text, sizeof text, "blob %d from %d", i, id);
        snprintf(name, sizeof name, "p%d-%d", id, i);
        if (store_put_mem(s, text, strlen(text), d, &err) != 0)
            _exit(3);
        struct store_desc desc = desc_of(d, strlen(text));
        if (store_tag_set(s, name, &desc, NULL, &err) != 0)
            _exit(4);
    }
    store_close(s);
    _exit(0);
}

static void test_concurrent_writers_lose_nothing(void **state)
{
    struct fixture *fx = *state;
    enum { PROCS = 3, EACH = 25 };
    pid_t pids[PROCS];
    for (int i = 0; i < PROCS; i++) {
        pids[i] = fork();
        assert_true(pids[i] >= 0);
        if (pids[i] == 0)
            child_tags(fx->dir, i, EACH);
    }
    for (int i = 0; i < PROCS; i++) {
        int status;
        assert_int_equal(waitpid(pids[i], &status, 0), pids[i]);
        assert_true(WIFEXITED(status));
        assert_int_equal(WEXITSTATUS(status), 0);
    }
    struct store_tag *tags;
    size_t n;
    struct mf_err err;
    assert_int_equal(store_tag_list(fx->s, &tags, &n, &err), 0);
    assert_int_equal(n, PROCS * EACH);
    for (size_t i = 0; i < n; i++)
        assert_true(store_blob_exists(fx->s, tags[i].desc.digest));
    free(tags);
}

/* ---- stat cache ------------------------------------------------------------------- */

static void backdate(const char *path, int seconds_ago)
{
    struct timespec ts[2];
    clock_gettime(CLOCK_REALTIME, &ts[0]);
    ts[0].tv_sec -= seconds_ago;
    ts[1] = ts[0];
    assert_int_equal(utimensat(AT_FDCWD, path, ts, 0), 0);
}

static void test_stat_cache_skips_hashing(void **state)
{
    struct fixture *fx = *state;
    struct mf_err err;
    fx->s->racy_ns = 0; /* ctime cannot be backdated; see store_stat.c */
    char *src = path_in(fx, "model.gguf");
    write_file(src, "hello");
    backdate(src, 3600);
    char d[STORE_DIGEST_BUF];
    uint64_t size;
    const struct store_stats *st = store_stats(fx->s);
    assert_int_equal(store_put_file(fx->s, src, NULL, d, &size, &err), 0);
    assert_string_equal(d, D_HELLO);
    assert_int_equal(st->hashed_bytes, 5);
    assert_int_equal(st->stat_hits, 0);

    assert_int_equal(store_put_file(fx->s, src, NULL, d, &size, &err), 0);
    assert_string_equal(d, D_HELLO);
    assert_int_equal(size, 5);
    assert_int_equal(st->hashed_bytes, 5); /* nothing read again */
    assert_int_equal(st->stat_hits, 1);
    assert_int_equal(store_digest_file(fx->s, src, d, &size, &err), 0);
    assert_int_equal(st->hashed_bytes, 5);

    /* Same size, new content: the stat changed, so it is hashed again. */
    write_file(src, "world");
    backdate(src, 1800);
    assert_int_equal(store_put_file(fx->s, src, NULL, d, &size, &err), 0);
    assert_string_equal(d, D_WORLD);
    assert_int_equal(st->hashed_bytes, 10);
    free(src);
}

static void test_stat_cache_ignores_racy_files(void **state)
{
    struct fixture *fx = *state;
    struct mf_err err;
    char *src = path_in(fx, "fresh.gguf");
    write_file(src, "hello"); /* ctime is now: inside the default 2 s margin */
    char d[STORE_DIGEST_BUF];
    assert_int_equal(store_digest_file(fx->s, src, d, NULL, &err), 0);
    assert_int_equal(store_digest_file(fx->s, src, d, NULL, &err), 0);
    assert_int_equal(store_stats(fx->s)->hashed_bytes, 10);
    assert_int_equal(store_stats(fx->s)->stat_hits, 0);
    free(src);
}

/* ---- cache records ---------------------------------------------------------------- */

static void test_cache_records(void **state)
{
    struct fixture *fx = *state;
    struct mf_err err;
    json_t *r = json_pack("{s:s, s:i}", "layer", D_HELLO, "n", 3), *got = NULL;
    assert_int_equal(store_cache_get(fx->s, D_WORLD, &got, &err), MF_ENOTFOUND);
    assert_int_equal(store_cache_put(fx->s, D_WORLD, r, &err), 0);
    assert_int_equal(store_cache_get(fx->s, D_WORLD, &got, &err), 0);
    assert_true(json_equal(r, got));
    json_decref(got);
    assert_int_equal(store_cache_put(fx->s, "sha256:nothex", r, &err), MF_EINVAL);
    assert_int_equal(store_cache_remove(fx->s, D_WORLD, &err), 0);
    assert_int_equal(store_cache_remove(fx->s, D_WORLD, &err), MF_ENOTFOUND);
    json_decref(r);
}

/* ---- gc --------------------------------------------------------------------------- */

/* Puts a manifest referencing config and layer blobs; returns its descriptor. */
static struct store_desc make_image(struct store *s, const char *tag, const char *layer_text)
{
    char cfg[STORE_DIGEST_BUF], layer[STORE_DIGEST_BUF], man[STORE_DIGEST_BUF];
    put(s, "{\"architecture\":\"amd64\",\"os\":\"linux\",\"rootfs\":{\"type\":\"layers\"}}", cfg);
    put(s, layer_text, layer);
    char text[1024];
    snprintf(
        text, sizeof text,
        "{\"schemaVersion\":2,\"mediaType\":\"%s\",\"config\":{\"mediaType\":\"application/"
        "vnd.oci.image.config.v1+json\",\"digest\":\"%s\",\"size\":60},\"layers\":[{\"mediaType\":"
        "\"application/vnd.oci.image.layer.v1.tar\",\"digest\":\"%s\",\"size\":%zu}]}",
        STORE_MT_OCI_MANIFEST, cfg, layer, strlen(layer_text));
    put(s, text, man);
    struct store_desc d = desc_of(man, strlen(text));
    struct mf_err err;
    if (tag)
        assert_int_equal(store_tag_set(s, tag, &d, NULL, &err), 0);
    return d;
}

struct seen {
    int blobs;      /* "blob" callbacks */
    uint64_t bytes; /* their sizes */
};

static void on_remove(void *arg, const char *kind, const char *name, uint64_t bytes)
{
    struct seen *s = arg;
    if (strcmp(kind, "blob") == 0) {
        s->blobs++;
        s->bytes += bytes;
    }
}

static void test_gc_marks_and_sweeps(void **state)
{
    struct fixture *fx = *state;
    struct mf_err err;
    struct store_desc img = make_image(fx->s, "keep", "layer one");
    char orphan[STORE_DIGEST_BUF], cached[STORE_DIGEST_BUF];
    put(fx->s, "orphan", orphan);
    put(fx->s, "cached", cached);
    json_t *rec = json_pack("{s:{s:s}}", "out", "digest", cached);
    assert_int_equal(store_cache_put(fx->s, D_WORLD, rec, &err), 0);
    json_decref(rec);
    /* an untagged image kept only by a cache record: its layer must survive too */
    struct store_desc img2 = make_image(fx->s, NULL, "layer two");
    rec = json_pack("{s:s}", "manifest", img2.digest);
    assert_int_equal(store_cache_put(fx->s, D_HELLO, rec, &err), 0);
    json_decref(rec);

    struct store_usage u;
    assert_int_equal(store_gc_usage(fx->s, &u, &err), 0);
    assert_int_equal(u.ref_blobs, 6); /* a shared config, 2 layers, 2 manifests, cached */
    assert_int_equal(u.unref_blobs, 1);
    assert_int_equal(u.cache_records, 2);

    struct seen seen = {0};
    assert_int_equal(store_gc_run(fx->s, STORE_GC_DRY_RUN, on_remove, &seen, &u, &err), 0);
    assert_int_equal(seen.blobs, 1);
    assert_int_equal(seen.bytes, 6);
    assert_true(store_blob_exists(fx->s, orphan)); /* dry run */

    assert_int_equal(store_gc_run(fx->s, 0, NULL, NULL, &u, &err), 0);
    assert_int_equal(u.unref_blobs, 1);
    assert_false(store_blob_exists(fx->s, orphan));
    assert_true(store_blob_exists(fx->s, cached));
    assert_true(store_blob_exists(fx->s, img.digest));
    assert_true(store_blob_exists(fx->s, img2.digest));

    /* --all drops the cache records, so only the tagged image stays. */
    assert_int_equal(store_gc_run(fx->s, STORE_GC_ALL, NULL, NULL, &u, &err), 0);
    assert_int_equal(u.cache_records, 2);
    assert_false(store_blob_exists(fx->s, cached));
    assert_false(store_blob_exists(fx->s, img2.digest));
    assert_true(store_blob_exists(fx->s, img.digest));
    assert_int_equal(store_gc_usage(fx->s, &u, &err), 0);
    assert_int_equal(u.ref_blobs, 3);

    /* Untagging makes the image garbage. */
    assert_int_equal(store_tag_remove(fx->s, "keep", &err), 0);
    assert_int_equal(store_gc_run(fx->s, 0, NULL, NULL, &u, &err), 0);
    assert_int_equal(u.unref_blobs, 3);
    char *blobs = path_in(fx, "blobs/sha256");
    assert_int_equal(count_files(blobs), 0);
    free(blobs);
}

static void test_gc_stops_on_corrupt_manifest(void **state)
{
    struct fixture *fx = *state;
    struct mf_err err;
    char orphan[STORE_DIGEST_BUF];
    struct store_desc img = make_image(fx->s, "keep", "layer");
    put(fx->s, "orphan", orphan);
    char *p;
    assert_int_equal(store_blob_path(fx->s, img.digest, &p, &err), 0);
    write_file(p, "{\"schemaVersion\":2}");
    struct store_usage u;
    assert_int_equal(store_gc_run(fx->s, 0, NULL, NULL, &u, &err), MF_EINTEGRITY);
    assert_non_null(strstr(err.msg, "nothing was removed"));
    assert_true(store_blob_exists(fx->s, orphan));
    free(p);
}

static void test_gc_refuses_while_store_in_use(void **state)
{
    struct fixture *fx = *state;
    struct mf_err err;
    struct store *other;
    assert_int_equal(store_open(&other, fx->dir, &err), 0);
    struct store_usage u;
    assert_int_equal(store_gc_run(fx->s, 0, NULL, NULL, &u, &err), MF_EBUSY);
    assert_non_null(strstr(err.msg, "in use"));
    assert_int_equal(store_gc_run(fx->s, STORE_GC_DRY_RUN, NULL, NULL, &u, &err), 0);
    store_close(other);
    assert_int_equal(store_gc_run(fx->s, 0, NULL, NULL, &u, &err), 0);
}

/* A child that opens the store, starts a blob and a conversion-like tmp
 * directory, tells the parent (one byte on ready), then dies without
 * cleaning up (die) or waits for the parent to close hold. Returns its pid. */
static pid_t tmp_owner(const char *root, int ready, int hold, int hold_w, int die)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid > 0)
        return pid;
    close(hold_w); /* so the parent's close is an EOF here */
    struct store *s;
    struct store_blob_writer *w;
    struct mf_err err;
    char *dir = NULL, name[64], c;
    snprintf(name, sizeof name, "run-%ld-1-ab", (long)getpid());
    if (store_open(&s, root, &err) != 0 || store_blob_writer_open(s, NULL, &w, &err) != 0 ||
        store_blob_writer_write(w, "half", 4, &err) != 0 ||
        store_tmp_path(s, name, &dir, &err) != 0 || mkdir(dir, 0700) != 0)
        _exit(1);
    char *f = NULL;
    if (asprintf(&f, "%s/out.bin", dir) < 0)
        _exit(1);
    write_file(f, "x");
    if (write(ready, "r", 1) != 1)
        _exit(1);
    if (!die)
        while (read(hold, &c, 1) < 0 && errno == EINTR)
            ;
    _exit(0); /* no abort, no store_close: as a killed build leaves things */
}

/* The next build reclaims a dead process's tmp files by lock; a live
 * process's files and partial downloads stay. */
static void test_tmp_reclaim(void **state)
{
    struct fixture *fx = *state;
    struct mf_err err;
    int rp[2], hp[2], status;
    char c;
    assert_int_equal(pipe(rp), 0);
    assert_int_equal(pipe(hp), 0);
    pid_t dead = tmp_owner(fx->dir, rp[1], hp[0], hp[1], 1);
    assert_int_equal(read(rp[0], &c, 1), 1);
    assert_int_equal(waitpid(dead, &status, 0), dead);
    assert_int_equal(WEXITSTATUS(status), 0);
    pid_t live = tmp_owner(fx->dir, rp[1], hp[0], hp[1], 0);
    assert_int_equal(read(rp[0], &c, 1), 1);
    char *part = path_in(fx, "tmp/partial-abc");
    write_file(part, "half a download");
    char *tmp = path_in(fx, "tmp");
    assert_int_equal(count_files(tmp), 5); /* 2 blobs, 2 run dirs, the partial */
    uint64_t files = 0, bytes = 0;
    assert_int_equal(store_tmp_reclaim(fx->s, &files, &bytes, &err), 0);
    assert_int_equal(files, 2);
    assert_int_equal(bytes, 4);
    assert_int_equal(count_files(tmp), 3);
    char *lock = NULL;
    assert_true(asprintf(&lock, "%s/tmp-owners/%ld", fx->dir, (long)dead) > 0);
    assert_int_not_equal(access(lock, F_OK), 0); /* the dead owner's lock file went too */
    assert_int_equal(access(part, F_OK), 0);
    /* the live one's go once it is gone */
    close(hp[1]);
    assert_int_equal(waitpid(live, &status, 0), live);
    assert_int_equal(store_tmp_reclaim(fx->s, &files, NULL, &err), 0);
    assert_int_equal(files, 2);
    assert_int_equal(count_files(tmp), 1);
    /* only this process's lock file is left: gone owners' go, files or not */
    char *owners = path_in(fx, "tmp-owners");
    assert_int_equal(count_files(owners), 1);
    free(owners);
    close(rp[0]);
    close(rp[1]);
    close(hp[0]);
    free(lock);
    free(tmp);
    free(part);
}

static void test_gc_cleans_tmp_keeps_partials(void **state)
{
    struct fixture *fx = *state;
    struct mf_err err;
    char *dead = path_in(fx, "tmp/blob-dead01"), *part = path_in(fx, "tmp/partial-abc");
    write_file(dead, "half a blob");
    write_file(part, "half a download");
    struct store_usage u;
    assert_int_equal(store_gc_run(fx->s, 0, NULL, NULL, &u, &err), 0);
    assert_int_equal(u.tmp_files, 1);
    assert_int_not_equal(access(dead, F_OK), 0);
    assert_int_equal(access(part, F_OK), 0);
    assert_int_equal(store_gc_run(fx->s, STORE_GC_ALL, NULL, NULL, &u, &err), 0);
    assert_int_not_equal(access(part, F_OK), 0);
    free(dead);
    free(part);
}

/* ---- manifest parsing ------------------------------------------------------------- */

static void test_manifest_refs(void **state)
{
    struct mf_err err;
    struct store_desc *refs;
    size_t n;
    const char *idx = "{\"schemaVersion\":2,\"manifests\":[{\"mediaType\":\"" STORE_MT_OCI_MANIFEST
                      "\",\"digest\":\"" D_HELLO
                      "\",\"size\":5}],\"subject\":{\"mediaType\":\"a/b\",\"digest\":\"" D_WORLD
                      "\",\"size\":5}}";
    assert_int_equal(
        store_oci_manifest_refs(idx, strlen(idx), STORE_MT_OCI_INDEX, "i", &refs, &n, &err), 0);
    assert_int_equal(n, 2);
    assert_string_equal(refs[0].digest, D_HELLO);
    assert_string_equal(refs[1].digest, D_WORLD);
    free(refs);
    assert_int_equal(store_oci_manifest_refs(idx, strlen(idx), "text/plain", "i", &refs, &n, &err),
                     0);
    assert_int_equal(n, 0);
    const char *no_config = "{\"schemaVersion\":2,\"layers\":[]}";
    assert_int_equal(store_oci_manifest_refs(no_config, strlen(no_config), STORE_MT_OCI_MANIFEST,
                                             "m", &refs, &n, &err),
                     MF_EFORMAT);
    assert_non_null(strstr(err.msg, "config"));
}

/* store_put_file copies through a ring of 4 x 4 MiB buffers with a hashing
 * thread: a file of several rings plus an odd tail must hash exactly as in
 * one pass, report progress up to its size, and, with a wrong pin, leave
 * nothing behind. */
static void test_put_file_larger_than_ring(void **state)
{
    struct fixture *fx = *state;
    struct mf_err err;
    size_t n = 37u * 1024 * 1024 + 12345;
    unsigned char *data = malloc(n);
    assert_non_null(data);
    uint32_t x = 2463534242u;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 17, x ^= x << 5;
        data[i] = (unsigned char)x;
    }
    char *src = path_in(fx, "big.bin");
    assert_int_equal(mf_file_write_atomic(src, data, n, &err), 0);
    uint8_t raw[MF_SHA256_LEN];
    char want[STORE_DIGEST_BUF] = "sha256:", d[STORE_DIGEST_BUF];
    assert_int_equal(mf_sha256_mem(data, n, raw, &err), 0);
    mf_sha256_hex(raw, want + 7);
    free(data);

    struct store_put_opts bad = {.expect = D_HELLO};
    assert_int_equal(store_put_file(fx->s, src, &bad, d, NULL, &err), MF_EINTEGRITY);
    assert_false(store_blob_exists(fx->s, want));
    char *tmp = path_in(fx, "tmp");
    assert_int_equal(count_files(tmp), 0);

    uint64_t size = 0;
    assert_int_equal(store_put_file(fx->s, src, NULL, d, &size, &err), 0);
    assert_string_equal(d, want);
    assert_int_equal(size, n);
    int fd = -1;
    assert_int_equal(store_blob_open(fx->s, want, 1, &fd, &err), 0);
    close(fd);
    assert_int_equal(count_files(tmp), 0);
    free(tmp);
    free(src);
}

/* Downloads hash in the second thread: a resumed partial's kept bytes come
 * first in the digest, abort keeps the held slot's bytes, and reset mid-stream
 * (a server ignored Range) drains the hasher and starts the digest over. */
static void test_async_writer_resume_and_reset(void **state)
{
    struct fixture *fx = *state;
    struct mf_err err;
    size_t n = 13u * 1024 * 1024 + 777; /* three full 4 MiB slots and a tail */
    unsigned char *data = malloc(n);
    assert_non_null(data);
    uint32_t x = 88172645u;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 17, x ^= x << 5;
        data[i] = (unsigned char)x;
    }
    uint8_t raw[MF_SHA256_LEN];
    char want[STORE_DIGEST_BUF] = "sha256:", d[STORE_DIGEST_BUF];
    assert_int_equal(mf_sha256_mem(data, n, raw, &err), 0);
    mf_sha256_hex(raw, want + 7);
    size_t cut = 5u * 1024 * 1024 + 3; /* one slot published, 1 MiB + 3 held */

    /* interrupted with bytes still in the held slot: the partial keeps them all */
    struct store_blob_writer *w;
    assert_int_equal(store_blob_writer_open_partial(fx->s, "a1", want, &w, &err), 0);
    assert_int_equal(store_blob_writer_hash_async(w, &err), 0);
    assert_int_equal(store_blob_writer_write(w, data, cut, &err), 0);
    assert_int_equal(store_blob_writer_size(w), cut);
    store_blob_writer_abort(w);
    char *p = path_in(fx, "tmp/partial-a1");
    struct stat st;
    assert_int_equal(stat(p, &st), 0);
    assert_int_equal((uint64_t)st.st_size, cut);

    /* resumed: kept bytes were hashed at open, the rest in the second thread */
    assert_int_equal(store_blob_writer_open_partial(fx->s, "a1", want, &w, &err), 0);
    assert_int_equal(store_blob_writer_size(w), cut);
    assert_int_equal(store_blob_writer_hash_async(w, &err), 0);
    assert_int_equal(store_blob_writer_write(w, data + cut, n - cut, &err), 0);
    uint64_t size = 0;
    assert_int_equal(store_blob_writer_commit(w, d, &size, &err), 0);
    assert_string_equal(d, want);
    assert_int_equal(size, n);
    assert_int_not_equal(stat(p, &st), 0);
    free(p);

    /* reset mid-stream after a resume: slots published and held are dropped */
    assert_int_equal(store_blob_writer_open_partial(fx->s, "a2", want, &w, &err), 0);
    assert_int_equal(store_blob_writer_write(w, "kept", 4, &err), 0);
    store_blob_writer_abort(w);
    assert_int_equal(store_blob_writer_open_partial(fx->s, "a2", want, &w, &err), 0);
    assert_int_equal(store_blob_writer_hash_async(w, &err), 0);
    assert_int_equal(store_blob_writer_write(w, data + 1, 9u * 1024 * 1024, &err), 0);
    assert_int_equal(store_blob_writer_reset(w, &err), 0);
    assert_int_equal(store_blob_writer_size(w), 0);
    p = path_in(fx, "tmp/partial-a2");
    assert_int_equal(stat(p, &st), 0);
    assert_int_equal(st.st_size, 0);
    assert_int_equal(store_blob_writer_write(w, data, cut, &err), 0);
    assert_int_equal(store_blob_writer_reset(w, &err), 0); /* twice, with a slot held */
    for (size_t off = 0; off < n; off += 16384) /* curl-sized pieces */
        assert_int_equal(store_blob_writer_write(w, data + off, n - off < 16384 ? n - off : 16384,
                                                 &err),
                         0);
    assert_int_equal(store_blob_writer_commit(w, d, &size, &err), 0);
    assert_string_equal(d, want);
    assert_int_equal(size, n);
    assert_int_not_equal(stat(p, &st), 0);

    /* a reset then wrong content: nothing is stored, nothing is left */
    assert_int_equal(store_blob_writer_open_partial(fx->s, "a3", D_HELLO, &w, &err), 0);
    assert_int_equal(store_blob_writer_hash_async(w, &err), 0);
    assert_int_equal(store_blob_writer_write(w, data, cut, &err), 0);
    assert_int_equal(store_blob_writer_reset(w, &err), 0);
    assert_int_equal(store_blob_writer_write(w, "world", 5, &err), 0);
    assert_int_equal(store_blob_writer_commit(w, d, NULL, &err), MF_EINTEGRITY);
    assert_false(store_blob_exists(fx->s, D_WORLD));
    char *tmp = path_in(fx, "tmp");
    assert_int_equal(count_files(tmp), 0);
    free(tmp);
    free(p);
    free(data);
}

/* Downloads use small slots (store_blob_writer_hash_async_slots): sizes out
 * of range are refused; abort keeps the held slot, a resume and a reset with
 * many slots in flight still give the in-line digest. */
static void test_async_writer_small_slots(void **state)
{
    struct fixture *fx = *state;
    struct mf_err err;
    size_t slot = 256u << 10, n = 3u * 1024 * 1024 + 12345; /* 12 slots and a tail */
    unsigned char *data = malloc(n);
    assert_non_null(data);
    uint32_t x = 2463534242u;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 17, x ^= x << 5;
        data[i] = (unsigned char)x;
    }
    uint8_t raw[MF_SHA256_LEN];
    char want[STORE_DIGEST_BUF] = "sha256:", d[STORE_DIGEST_BUF];
    assert_int_equal(mf_sha256_mem(data, n, raw, &err), 0);
    mf_sha256_hex(raw, want + 7);

    struct store_blob_writer *w;
    assert_int_equal(store_blob_writer_open_partial(fx->s, "s1", want, &w, &err), 0);
    assert_int_equal(store_blob_writer_hash_async_slots(w, 1024, &err), MF_EINVAL);
    assert_int_equal(store_blob_writer_hash_async_slots(w, 8u << 20, &err), MF_EINVAL);
    assert_int_equal(store_blob_writer_hash_async_slots(w, slot, &err), 0);
    size_t cut = 5 * slot + 100; /* five slots published, 100 bytes held */
    for (size_t off = 0; off < cut; off += 16384)
        assert_int_equal(
            store_blob_writer_write(w, data + off, cut - off < 16384 ? cut - off : 16384, &err), 0);
    assert_int_equal(store_blob_writer_size(w), cut);
    store_blob_writer_abort(w);
    char *p = path_in(fx, "tmp/partial-s1");
    struct stat st;
    assert_int_equal(stat(p, &st), 0);
    assert_int_equal((uint64_t)st.st_size, cut);

    /* resumed, a reset with slots in flight, then the whole file again */
    assert_int_equal(store_blob_writer_open_partial(fx->s, "s1", want, &w, &err), 0);
    assert_int_equal(store_blob_writer_hash_async_slots(w, slot, &err), 0);
    assert_int_equal(store_blob_writer_write(w, data + cut, n - cut, &err), 0);
    assert_int_equal(store_blob_writer_reset(w, &err), 0);
    assert_int_equal(store_blob_writer_size(w), 0);
    for (size_t off = 0; off < n; off += 16384)
        assert_int_equal(
            store_blob_writer_write(w, data + off, n - off < 16384 ? n - off : 16384, &err), 0);
    uint64_t size = 0;
    assert_int_equal(store_blob_writer_commit(w, d, &size, &err), 0);
    assert_string_equal(d, want);
    assert_int_equal(size, n);
    assert_int_not_equal(stat(p, &st), 0);
    free(p);
    free(data);
}

int main(void)
{
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(test_layout_is_created),
        T(test_blob_put_read_verify),
        T(test_digest_validation),
        T(test_blob_mismatch_leaves_nothing),
        T(test_partial_blob_resumes),
        cmocka_unit_test(test_tag_grammar),
        T(test_tags_round_trip),
        T(test_unknown_index_fields_are_kept),
        T(test_corrupt_index_rejected_not_overwritten),
        T(test_concurrent_writers_lose_nothing),
        T(test_stat_cache_skips_hashing),
        T(test_stat_cache_ignores_racy_files),
        T(test_cache_records),
        T(test_gc_marks_and_sweeps),
        T(test_gc_stops_on_corrupt_manifest),
        T(test_gc_refuses_while_store_in_use),
        T(test_gc_cleans_tmp_keeps_partials),
        T(test_tmp_reclaim),
        cmocka_unit_test(test_manifest_refs),
        T(test_put_file_larger_than_ring),
        T(test_async_writer_resume_and_reset),
        T(test_async_writer_small_slots),
    };
    return cmocka_run_group_tests_name("store", tests, NULL, NULL);
}
