/*
 * test_layer.c: unit tests for image/layer.c: two writes of the same
 * entries give the same digest (plain and gzip), the tar holds what was
 * asked with fixed metadata, paths are checked, ldd output is parsed, the
 * runtime layer of a CUDA build carries the cuBLAS beside its libcudart, and
 * layer_tar_write_fd (kernel copy) writes the same bytes as layer_tar_stream,
 * but for files of 64 MiB or more, whose content it starts on a 512 KiB
 * boundary behind a pax "comment" pad that libarchive reads through.
 * Each test gets a fresh store in a temporary directory.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <archive.h>
#include <archive_entry.h>

#include "common/buf.h"
#include "common/file.h"
#include "image/layer.h"
#include "store/store.h"
#include "tests/unit/tmpdir.h"

struct fixture {
    char dir[64];    /* the temporary store root */
    struct store *s; /* open on dir */
    char file[96];   /* a host file with known content */
};

static int setup(void **state)
{
    struct fixture *fx = calloc(1, sizeof *fx);
    struct mf_err err;
    if (!fx)
        return -1;
    if (test_tmpdir_make(fx->dir, sizeof fx->dir, "layer") != 0 ||
        store_open(&fx->s, fx->dir, &err) != 0)
        return -1;
    snprintf(fx->file, sizeof fx->file, "%s/weights.gguf", fx->dir);
    FILE *f = fopen(fx->file, "w");
    if (!f)
        return -1;
    for (int i = 0; i < 300000; i++)
        fputc("GGUF"[i % 4], f);
    fclose(f);
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

static void write_two(struct fixture *fx, enum layer_compression c, struct layer_result *r)
{
    struct mf_err err;
    struct layer_entry e[] = {
        {.path = "etc/mfc/model.yaml", .data = "a: 1\n", .len = 5, .mode = 0644},
        {.path = "models/m.gguf", .src = fx->file, .mode = 0644},
    };
    assert_int_equal(layer_write(fx->s, e, 2, c, 0, r, &err), 0);
}

static void test_deterministic(void **state)
{
    struct fixture *fx = *state;
    struct layer_result a, b, g1, g2;
    write_two(fx, LAYER_NONE, &a);
    write_two(fx, LAYER_NONE, &b);
    assert_string_equal(a.desc.digest, b.desc.digest);
    assert_string_equal(a.diff_id, a.desc.digest);
    assert_string_equal(a.desc.media_type, LAYER_MT_TAR);
    assert_string_equal(a.filepath, "");
    write_two(fx, LAYER_GZIP, &g1);
    write_two(fx, LAYER_GZIP, &g2);
    assert_string_equal(g1.desc.digest, g2.desc.digest);
    assert_string_equal(g1.diff_id, a.diff_id); /* the same tar inside */
    assert_string_not_equal(g1.desc.digest, g1.diff_id);
    assert_string_equal(g1.desc.media_type, LAYER_MT_TAR_GZIP);
    assert_true(g1.desc.size < a.desc.size);
}

/* Reads the layer back: entries in order, with fixed metadata. */
static void test_contents(void **state)
{
    struct fixture *fx = *state;
    struct layer_result r;
    struct mf_err err;
    struct layer_entry e = {.path = "models/m.gguf", .src = fx->file, .mode = 0644};
    assert_int_equal(layer_write(fx->s, &e, 1, LAYER_NONE, 1700000000, &r, &err), 0);
    assert_string_equal(r.filepath, "/models/m.gguf");
    char *path;
    assert_int_equal(store_blob_path(fx->s, r.desc.digest, &path, &err), 0);
    struct archive *a = archive_read_new();
    archive_read_support_format_tar(a);
    assert_int_equal(archive_read_open_filename(a, path, 65536), ARCHIVE_OK);
    struct archive_entry *ae;
    const char *want[] = {"models/", "models/m.gguf"};
    for (int i = 0; i < 2; i++) {
        assert_int_equal(archive_read_next_header(a, &ae), ARCHIVE_OK);
        assert_string_equal(archive_entry_pathname(ae), want[i]);
        assert_int_equal(archive_entry_uid(ae), 0);
        assert_int_equal(archive_entry_mtime(ae), 1700000000);
        assert_int_equal(archive_entry_perm(ae), i ? 0644 : 0755);
        assert_false(archive_entry_atime_is_set(ae));
    }
    assert_int_equal(archive_entry_size(ae), 300000);
    assert_int_equal(archive_read_next_header(a, &ae), ARCHIVE_EOF);
    archive_read_free(a);
    free(path);
    /* 512 header + 512 header + 300000 rounded to 512 + 1024 end */
    assert_int_equal(r.desc.size, 512 + 512 + 300032 + 1024);
}

static void test_bad_entries(void **state)
{
    struct fixture *fx = *state;
    struct layer_result r;
    struct mf_err err;
    const char *bad[] = {"/abs", "a/../b", "a//b", "./a", "a/", ""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct layer_entry e = {.path = bad[i], .data = "x", .len = 1, .mode = 0644};
        assert_int_equal(layer_write(fx->s, &e, 1, LAYER_NONE, 0, &r, &err), MF_EINVAL);
    }
    struct layer_entry dup[] = {
        {.path = "a/b", .data = "x", .len = 1, .mode = 0644},
        {.path = "a", .data = "y", .len = 1, .mode = 0644},
    };
    assert_int_equal(layer_write(fx->s, dup, 2, LAYER_NONE, 0, &r, &err), MF_EINVAL);
    assert_non_null(strstr(err.msg, "twice"));
    struct layer_entry mode = {.path = "x", .data = "x", .len = 1, .mode = 04755};
    assert_int_equal(layer_write(fx->s, &mode, 1, LAYER_NONE, 0, &r, &err), MF_EINVAL);
    struct layer_entry missing = {.path = "x", .src = "/nonexistent/file", .mode = 0644};
    assert_int_equal(layer_write(fx->s, &missing, 1, LAYER_NONE, 0, &r, &err), MF_EIO);
    assert_int_equal(store_stats(fx->s)->blobs_written, 0);
}

static void test_parse_ldd(void **state)
{
    (void)state;
    const char *out = "\tlinux-vdso.so.1 (0x00007ffd)\n"
                      "\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f)\n"
                      "\t/lib64/ld-linux-x86-64.so.2 (0x00007f)\n"
                      "\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f)\n";
    char **p;
    size_t n;
    struct mf_err err;
    assert_int_equal(layer_parse_ldd(out, &p, &n, &err), 0);
    assert_int_equal(n, 2);
    assert_string_equal(p[0], "/lib/x86_64-linux-gnu/libc.so.6");
    assert_string_equal(p[1], "/lib64/ld-linux-x86-64.so.2");
    for (size_t i = 0; i < n; i++)
        free(p[i]);
    free(p);
    assert_int_equal(layer_parse_ldd("\tnot a dynamic executable\n", &p, &n, &err), 0);
    assert_int_equal(n, 0);
    assert_int_equal(layer_parse_ldd("\tlibx.so => not found\n", &p, &n, &err), MF_ENOTFOUND);
}

static void test_runtime(void **state)
{
    struct fixture *fx = *state;
    struct layer_result r;
    struct mf_err err;
    int cached = -1;
    assert_int_equal(layer_write_runtime(fx->s, "/bin/true", "mfc-serve", 0, LAYER_GZIP, NULL,
                                         NULL, &r, &cached, &err),
                     0);
    assert_string_equal(r.desc.media_type, LAYER_MT_TAR_GZIP);
    assert_int_equal(cached, 0);
    assert_int_equal(layer_write_runtime(fx->s, "/bin/true", "a/b", 0, LAYER_GZIP, NULL, NULL, &r,
                                         NULL, &err),
                     MF_EINVAL);
}

static void copy_to(const char *from, const char *to);

/* Progress seen by a layer write: the last report is total of total. */
struct seen {
    uint64_t done, total;
    int calls;
};

static void on_progress(void *arg, uint64_t done, uint64_t total)
{
    struct seen *s = arg;
    s->done = done;
    s->total = total;
    s->calls++;
}

/* The runtime layer is written once per set of inputs: the second call is a
 * cache hit with the same descriptor; another compression, mtime or a changed
 * input file is another key, and a removed blob is written again. */
static void test_runtime_cache(void **state)
{
    struct fixture *fx = *state;
    struct layer_result a, b, z;
    struct mf_err err;
    struct seen seen = {0};
    char k1[STORE_DIGEST_BUF], k2[STORE_DIGEST_BUF], bin[4096];
    int cached = -1;
    assert_int_equal(layer_write_runtime(fx->s, "/bin/true", "mfc-serve", 0, LAYER_ZSTD,
                                         on_progress, &seen, &a, &cached, &err),
                     0);
    assert_string_equal(a.desc.media_type, LAYER_MT_TAR_ZSTD);
    assert_int_equal(cached, 0);
    assert_true(seen.calls >= 1);
    assert_true(seen.total > 0);
    assert_int_equal(seen.done, seen.total);
    seen.calls = 0;
    assert_int_equal(layer_write_runtime(fx->s, "/bin/true", "mfc-serve", 0, LAYER_ZSTD,
                                         on_progress, &seen, &b, &cached, &err),
                     0);
    assert_int_equal(cached, 1);
    assert_int_equal(seen.calls, 0);
    assert_string_equal(a.desc.digest, b.desc.digest);
    assert_string_equal(a.diff_id, b.diff_id);
    assert_int_equal(a.desc.size, b.desc.size);
    /* the same tar under both compressions: one diff_id, two blobs */
    assert_int_equal(layer_write_runtime(fx->s, "/bin/true", "mfc-serve", 0, LAYER_GZIP, NULL,
                                         NULL, &z, &cached, &err),
                     0);
    assert_int_equal(cached, 0);
    assert_string_equal(z.diff_id, a.diff_id);
    assert_string_not_equal(z.desc.digest, a.desc.digest);
    assert_int_equal(layer_runtime_digest(fx->s, "/bin/true", "mfc-serve", 0, LAYER_ZSTD, k1, &err),
                     0);
    assert_int_equal(layer_runtime_digest(fx->s, "/bin/true", "mfc-serve", 1, LAYER_ZSTD, k2, &err),
                     0);
    assert_string_not_equal(k1, k2);
    /* a copy of the binary with one more byte: another input digest, another key */
    snprintf(bin, sizeof bin, "%s/runtime-bin", fx->dir);
    copy_to("/bin/true", bin);
    assert_int_equal(chmod(bin, 0755), 0);
    assert_int_equal(layer_runtime_digest(fx->s, bin, "mfc-serve", 0, LAYER_ZSTD, k2, &err), 0);
    assert_string_equal(k1, k2); /* same bytes, other path on the host: same layer */
    FILE *f = fopen(bin, "ab");
    assert_non_null(f);
    fputc(0, f);
    fclose(f);
    assert_int_equal(layer_runtime_digest(fx->s, bin, "mfc-serve", 0, LAYER_ZSTD, k2, &err), 0);
    assert_string_not_equal(k1, k2);
    /* the blob gone (pruned): written again, same digest */
    char *path = NULL;
    assert_int_equal(store_blob_path(fx->s, a.desc.digest, &path, &err), 0);
    assert_int_equal(unlink(path), 0);
    free(path);
    assert_int_equal(layer_write_runtime(fx->s, "/bin/true", "mfc-serve", 0, LAYER_ZSTD, NULL,
                                         NULL, &b, &cached, &err),
                     0);
    assert_int_equal(cached, 0);
    assert_string_equal(a.desc.digest, b.desc.digest);
}

/* Copies the file from to to (both small). */
static void copy_to(const char *from, const char *to)
{
    char *d = NULL;
    size_t n = 0;
    struct mf_err err;
    assert_int_equal(mf_file_read(from, 64u << 20, &d, &n, &err), 0);
    FILE *f = fopen(to, "w");
    assert_non_null(f);
    assert_int_equal(fwrite(d, 1, n, f), n);
    fclose(f);
    free(d);
}

/* The regular files of the gzip'd layer with the given digest, as
 * "\npath size" lines and a last "\n", in the tar's order; NUL-terminated. */
static void layer_listing(struct store *s, const char *digest, struct mf_buf *out)
{
    struct mf_err err;
    char *path, line[1200];
    assert_int_equal(store_blob_path(s, digest, &path, &err), 0);
    struct archive *a = archive_read_new();
    struct archive_entry *ae;
    archive_read_support_filter_gzip(a);
    archive_read_support_format_tar(a);
    assert_int_equal(archive_read_open_filename(a, path, 65536), ARCHIVE_OK);
    assert_int_equal(mf_buf_append(out, "\n", 1, &err), 0);
    while (archive_read_next_header(a, &ae) == ARCHIVE_OK) {
        if (archive_entry_filetype(ae) != AE_IFREG)
            continue;
        int k = snprintf(line, sizeof line, "%s %lld\n", archive_entry_pathname(ae),
                         (long long)archive_entry_size(ae));
        assert_int_equal(mf_buf_append(out, line, (size_t)k, &err), 0);
    }
    assert_int_equal(mf_buf_append(out, "", 1, &err), 0);
    archive_read_free(a);
    free(path);
}

/* A runtime layer whose binary's ldd list holds a libcudart carries the
 * cuBLAS beside it, as a regular file under the symlink's name, and what ldd
 * lists for that cuBLAS, each once. No CUDA needed: ldd lists an LD_PRELOAD
 * library as it lists a DT_NEEDED one, so /bin/true with a copy of cmocka's
 * shared library preloaded as libcudart.so.13 stands for a CUDA mfc-serve,
 * and another copy stands for cuBLAS (its ldd list: libc, the loader, the
 * preload again). Skipped where the loader does not take the preload (cmocka
 * linked statically, /tmp mounted noexec). */
static void test_runtime_cuda(void **state)
{
    struct fixture *fx = *state;
    struct layer_result r;
    struct mf_err err;
    Dl_info di;
    if (!dladdr((void *)_cmocka_run_group_tests, &di) || !di.dli_fname ||
        !strstr(di.dli_fname, ".so"))
        skip();
    char cudart[128], blas[128], link[128], want[300];
    snprintf(cudart, sizeof cudart, "%s/libcudart.so.13", fx->dir);
    snprintf(blas, sizeof blas, "%s/libcublas.so.13.0.1", fx->dir);
    snprintf(link, sizeof link, "%s/libcublas.so.13", fx->dir);
    copy_to(di.dli_fname, cudart);
    copy_to(di.dli_fname, blas);
    assert_int_equal(symlink("libcublas.so.13.0.1", link), 0);
    struct stat st;
    assert_int_equal(stat(blas, &st), 0);

    const char *old = getenv("LD_PRELOAD");
    char *saved = old ? strdup(old) : NULL;
    assert_int_equal(setenv("LD_PRELOAD", cudart, 1), 0);
    int rc = layer_write_runtime(fx->s, "/bin/true", "mfc-serve", 0, LAYER_GZIP, NULL, NULL, &r,
                                 NULL, &err);
    assert_int_equal(saved ? setenv("LD_PRELOAD", saved, 1) : unsetenv("LD_PRELOAD"), 0);
    free(saved);
    assert_int_equal(rc, 0);

    struct mf_buf ls;
    mf_buf_init(&ls, 1 << 20);
    layer_listing(fx->s, r.desc.digest, &ls);
    snprintf(want, sizeof want, "\n%s ", cudart + 1);
    if (!strstr(ls.data, want)) {
        mf_buf_free(&ls);
        skip();
    }
    snprintf(want, sizeof want, "\n%s %lld\n", link + 1, (long long)st.st_size);
    assert_non_null(strstr(ls.data, want));
    assert_null(strstr(ls.data, "libcublas.so.13.0.1"));
    assert_non_null(strstr(ls.data, "usr/bin/mfc-serve "));
    mf_buf_free(&ls);
}

/* Makes dir/name: a file holding "x", or a symlink to target when target is not NULL. */
static void make_file(const char *dir, const char *name, const char *target)
{
    char p[160];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    if (target) {
        assert_int_equal(symlink(target, p), 0);
        return;
    }
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fputc('x', f);
    fclose(f);
}

/* layer_cublas_path on an ldd-like list naming dir/cudart (or no cudart when
 * cudart is NULL): the path it finds, dir/want, or none when want is NULL. */
static void check_cublas(const char *dir, const char *cudart, const char *want)
{
    char lib[160], exp[160], unset, *got = &unset;
    struct mf_err err;
    snprintf(lib, sizeof lib, "%s/%s", dir, cudart ? cudart : "libz.so.1");
    char *libs[] = {"/lib/x86_64-linux-gnu/libc.so.6", lib, "/lib64/ld-linux-x86-64.so.2"};
    assert_int_equal(layer_cublas_path(libs, 3, &got, &err), 0);
    if (!want) {
        assert_null(got);
        return;
    }
    snprintf(exp, sizeof exp, "%s/%s", dir, want);
    assert_non_null(got);
    assert_string_equal(got, exp);
    free(got);
}

/* cuBLAS is looked for beside libcudart only, in open_cublas's order of
 * names; a symlink counts when it leads to a file. */
static void test_cublas_path(void **state)
{
    struct fixture *fx = *state;
    char d[5][96];
    for (int i = 0; i < 5; i++) {
        snprintf(d[i], sizeof d[i], "%s/cuda%d", fx->dir, i);
        assert_int_equal(mkdir(d[i], 0755), 0);
        make_file(d[i], "libcudart.so.13", NULL);
    }
    make_file(d[0], "libcublas.so.13", NULL);
    make_file(d[0], "libcublas.so.12", NULL);
    check_cublas(d[0], "libcudart.so.13", "libcublas.so.13");
    make_file(d[1], "libcublas.so.12", NULL);
    check_cublas(d[1], "libcudart.so.13", "libcublas.so.12");
    check_cublas(d[1], "libcudart.so", "libcublas.so.12"); /* any libcudart.so* name */
    /* none, or only a dangling symlink or a directory of that name */
    make_file(d[2], "libcublas.so", "libcublas.so.13.1.0");
    char sub[160];
    snprintf(sub, sizeof sub, "%s/libcublas.so.13", d[2]);
    assert_int_equal(mkdir(sub, 0755), 0);
    check_cublas(d[2], "libcudart.so.13", NULL);
    make_file(d[3], "libcublas.so.13.1.0", NULL);
    make_file(d[3], "libcublas.so", "libcublas.so.13.1.0");
    check_cublas(d[3], "libcudart.so.13", "libcublas.so");
    /* cuBLAS beside some other library, no libcudart listed */
    make_file(d[4], "libcublas.so.13", NULL);
    check_cublas(d[4], NULL, NULL);
    char unset, *got = &unset;
    struct mf_err err;
    assert_int_equal(layer_cublas_path(NULL, 0, &got, &err), 0);
    assert_null(got);
}

static int buf_out(void *arg, const void *p, size_t n, struct mf_err *err)
{
    return mf_buf_append(arg, p, n, err);
}

/* Writes the tar of e to a new file at path with layer_tar_write_fd and
 * checks it equals want byte for byte. */
static void check_fd_tar(const char *path, const struct layer_entry *e, size_t n,
                         const struct mf_buf *want)
{
    struct mf_err err;
    FILE *f = fopen(path, "w+");
    assert_non_null(f);
    assert_int_equal(layer_tar_write_fd(e, n, 1700000000, fileno(f), &err), 0);
    struct stat st;
    assert_int_equal(fstat(fileno(f), &st), 0);
    assert_int_equal((size_t)st.st_size, want->len);
    char *got = malloc(want->len);
    assert_non_null(got);
    rewind(f);
    assert_int_equal(fread(got, 1, want->len, f), want->len);
    assert_memory_equal(got, want->data, want->len);
    free(got);
    fclose(f);
    unlink(path);
}

/* The kernel-copy writer (copy_file_range, or sendfile across file systems)
 * gives the streamed tar's bytes, for a file spanning several 8 MiB
 * placeholder writes and not a multiple of 512, next to small ones. */
static void test_write_fd(void **state)
{
    struct fixture *fx = *state;
    struct mf_err err;
    char big[96], out[96];
    snprintf(big, sizeof big, "%s/big.bin", fx->dir);
    FILE *f = fopen(big, "w");
    assert_non_null(f);
    for (long i = 0; i < (17L << 20) + 123; i++)
        fputc((int)((i * 2654435761u) >> 13) & 0xff, f);
    fclose(f);
    struct layer_entry e[] = {
        {.path = "blobs/sha256/big", .src = big, .mode = 0644},
        {.path = "blobs/sha256/small", .src = fx->file, .mode = 0644},
        {.path = "index.json", .data = "{}", .len = 2, .mode = 0644},
    };
    struct mf_buf want;
    mf_buf_init(&want, 64u << 20);
    assert_int_equal(layer_tar_stream(e, 3, 1700000000, buf_out, &want, &err), 0);
    assert_true(want.len > (17u << 20));
    snprintf(out, sizeof out, "%s/out.tar", fx->dir);
    check_fd_tar(out, e, 3, &want);
    struct stat st;
    if (stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) && access("/dev/shm", W_OK) == 0) {
        /* usually another file system than /tmp: copy_file_range says EXDEV */
        snprintf(out, sizeof out, "/dev/shm/test-layer-%ld.tar", (long)getpid());
        check_fd_tar(out, e, 3, &want);
    }
    mf_buf_free(&want);
    struct layer_entry missing = {.path = "x", .src = "/nonexistent/file", .mode = 0644};
    snprintf(out, sizeof out, "%s/bad.tar", fx->dir);
    f = fopen(out, "w");
    assert_non_null(f);
    assert_int_equal(layer_tar_write_fd(&missing, 1, 0, fileno(f), &err), MF_EIO);
    assert_non_null(strstr(err.msg, "/nonexistent/file"));
    fclose(f);
}

/* Reads the tar at path with libarchive: each entry's name, size and
 * content (compared with want[i], or with the file src[i]). */
static void check_read_back(const char *path, const char *const *names, const char *const *src,
                            size_t n)
{
    struct archive *a = archive_read_new();
    struct archive_entry *ae;
    assert_int_equal(archive_read_support_format_tar(a), ARCHIVE_OK);
    assert_int_equal(archive_read_open_filename(a, path, 1 << 16), ARCHIVE_OK);
    size_t i = 0;
    char *got = malloc(1 << 16), *exp = malloc(1 << 16);
    assert_non_null(got);
    assert_non_null(exp);
    while (archive_read_next_header(a, &ae) == ARCHIVE_OK) {
        if (archive_entry_filetype(ae) == AE_IFDIR)
            continue;
        assert_true(i < n);
        assert_string_equal(archive_entry_pathname(ae), names[i]);
        assert_int_equal(archive_entry_mode(ae) & 07777, 0644);
        assert_int_equal(archive_entry_mtime(ae), 1700000000);
        FILE *f = fopen(src[i], "r");
        assert_non_null(f);
        struct stat st;
        assert_int_equal(fstat(fileno(f), &st), 0);
        assert_int_equal(archive_entry_size(ae), st.st_size);
        la_ssize_t k;
        int64_t total = 0;
        while ((k = archive_read_data(a, got, 1 << 16)) > 0) {
            assert_int_equal(fread(exp, 1, (size_t)k, f), (size_t)k);
            assert_memory_equal(got, exp, (size_t)k);
            total += k;
        }
        assert_int_equal(k, 0);
        assert_int_equal(total, st.st_size);
        fclose(f);
        i++;
    }
    assert_int_equal(i, n);
    free(got);
    free(exp);
    archive_read_free(a);
}

/* Files of 64 MiB or more start on a 512 KiB boundary of the archive (the
 * kernel copies faster so); libarchive reads every entry back unchanged,
 * names over 100 bytes included; the same input gives the same bytes. */
static void test_write_fd_aligned(void **state)
{
    struct fixture *fx = *state;
    struct mf_err err;
    char big[2][96], out[96], out2[96], head[2][4096];
    for (int b = 0; b < 2; b++) {
        snprintf(big[b], sizeof big[b], "%s/big%d.bin", fx->dir, b);
        FILE *f = fopen(big[b], "w");
        assert_non_null(f);
        for (size_t i = 0; i < sizeof head[b]; i++)
            head[b][i] = (char)(((i + 977u * (unsigned)b) * 2654435761u) >> 13);
        assert_int_equal(fwrite(head[b], 1, sizeof head[b], f), sizeof head[b]);
        /* mostly a hole: 64 MiB + 1000 (b = 0) or + 3 bytes (b = 1) */
        assert_int_equal(ftruncate(fileno(f), (64L << 20) + (b ? 3 : 1000)), 0);
        assert_int_equal(fseek(f, -1, SEEK_END), 0);
        fputc('Z', f);
        fclose(f);
    }
    char longname[160];
    snprintf(longname, sizeof longname, "blobs/sha256/%0120d", 7);
    struct layer_entry e[] = {
        {.path = "blobs/sha256/a-small", .src = fx->file, .mode = 0644},
        {.path = "blobs/sha256/b-big", .src = big[0], .mode = 0644},
        {.path = longname, .src = big[1], .mode = 0644},
        {.path = "index.json", .data = "{}", .len = 2, .mode = 0644},
    };
    snprintf(out, sizeof out, "%s/aligned.tar", fx->dir);
    snprintf(out2, sizeof out2, "%s/aligned2.tar", fx->dir);
    const char *outs[] = {out, out2};
    for (int k = 0; k < 2; k++) {
        FILE *f = fopen(outs[k], "w");
        assert_non_null(f);
        assert_int_equal(layer_tar_write_fd(e, 4, 1700000000, fileno(f), &err), 0);
        fclose(f);
    }
    /* each big file's first 4 KiB sit at a multiple of 512 KiB, after its ustar header */
    FILE *f = fopen(out, "r");
    assert_non_null(f);
    int found[2] = {0, 0};
    char blk[4096];
    for (long off = 512L << 10; fseek(f, off, SEEK_SET) == 0 && fread(blk, 1, 4096, f) == 4096;
         off += 512L << 10)
        for (int b = 0; b < 2; b++)
            if (memcmp(blk, head[b], 4096) == 0) {
                char h[512];
                assert_int_equal(fseek(f, off - 512, SEEK_SET), 0);
                assert_int_equal(fread(h, 1, 512, f), 512);
                assert_int_equal(h[156], '0');
                assert_memory_equal(h + 257, "ustar", 6);
                found[b]++;
            }
    fclose(f);
    assert_int_equal(found[0], 1);
    assert_int_equal(found[1], 1);
    /* in the tar's (sorted) order */
    const char *names[] = {e[2].path, e[0].path, e[1].path, "index.json"};
    char idx[96];
    snprintf(idx, sizeof idx, "%s/index.json", fx->dir);
    f = fopen(idx, "w");
    assert_non_null(f);
    fputs("{}", f);
    fclose(f);
    const char *srcs[] = {big[1], fx->file, big[0], idx};
    check_read_back(out, names, srcs, 4);
    /* deterministic: the second write is the same file */
    char *d1 = NULL, *d2 = NULL;
    size_t n1 = 0, n2 = 0;
    assert_int_equal(mf_file_read(out, 256u << 20, &d1, &n1, &err), 0);
    assert_int_equal(mf_file_read(out2, 256u << 20, &d2, &n2, &err), 0);
    assert_int_equal(n1, n2);
    assert_memory_equal(d1, d2, n1);
    free(d1);
    free(d2);
}

/* The pad header on its own: every alignment lands, ustar fields that
 * cannot hold a value move to pax records, and libarchive parses it. */
static void test_pax_header(void **state)
{
    (void)state;
    struct mf_err err;
    const uint64_t sizes[] = {5, 9663676416ull}; /* 9 GiB needs a "size" record */
    const uint64_t aligns[] = {1024, 4096, 512u << 10};
    for (size_t s = 0; s < 2; s++)
        for (size_t k = 0; k < 3; k++)
            for (uint64_t pos = 0; pos < 3 * aligns[k]; pos += 512 * 37) {
                struct mf_buf h;
                mf_buf_init(&h, 64u << 20);
                assert_int_equal(layer_pax_aligned_header("models/m.gguf", 0644, sizes[s], 0,
                                                          pos, aligns[k], &h, &err),
                                 0);
                assert_int_equal((pos + h.len) % aligns[k], 0);
                assert_int_equal(h.len % 512, 0);
                /* a pad header stays under the 1 MiB readers accept */
                assert_true(h.len == 512 || (h.len >= 1536 && h.len < (1u << 20)));
                struct archive *a = archive_read_new();
                struct archive_entry *ae;
                archive_read_support_format_tar(a);
                assert_int_equal(archive_read_open_memory(a, h.data, h.len), ARCHIVE_OK);
                assert_int_equal(archive_read_next_header(a, &ae), ARCHIVE_OK);
                assert_string_equal(archive_entry_pathname(ae), "models/m.gguf");
                assert_int_equal((uint64_t)archive_entry_size(ae), sizes[s]);
                assert_int_equal(archive_entry_filetype(ae), AE_IFREG);
                archive_read_free(a);
                mf_buf_free(&h);
            }
    struct mf_buf h;
    mf_buf_init(&h, 1 << 20);
    assert_int_equal(layer_pax_aligned_header("x", 0644, 1, 0, 100, 4096, &h, &err), MF_EINVAL);
    assert_int_equal(layer_pax_aligned_header("x", 0644, 1, 0, 0, 1000, &h, &err), MF_EINVAL);
    assert_int_equal(layer_pax_aligned_header("x", 0644, 1, 0, 0, 1u << 20, &h, &err), MF_EINVAL);
    /* at a boundary less one block, no pad: the ustar header alone */
    assert_int_equal(layer_pax_aligned_header("x", 0644, 1, 0, 4096 - 512, 4096, &h, &err), 0);
    assert_int_equal(h.len, 512);
    mf_buf_free(&h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_deterministic, setup, teardown),
        cmocka_unit_test_setup_teardown(test_contents, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_entries, setup, teardown),
        cmocka_unit_test(test_parse_ldd),
        cmocka_unit_test_setup_teardown(test_runtime, setup, teardown),
        cmocka_unit_test_setup_teardown(test_runtime_cache, setup, teardown),
        cmocka_unit_test_setup_teardown(test_runtime_cuda, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cublas_path, setup, teardown),
        cmocka_unit_test_setup_teardown(test_write_fd, setup, teardown),
        cmocka_unit_test_setup_teardown(test_write_fd_aligned, setup, teardown),
        cmocka_unit_test(test_pax_header),
    };
    return cmocka_run_group_tests_name("layer", tests, NULL, NULL);
}
