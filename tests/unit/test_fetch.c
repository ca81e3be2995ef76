/*
 * test_fetch.c: unit tests for source resolution (fetch/fetch.c): the
 * hf:// mapping and its validation, pins and --checksum, paths against the
 * base directory and ~, model names, and directory layouts. Downloads are
 * tested end to end in tests/cli/fetch.bats against a local server.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/file.h"
#include "fetch/fetch.h"

#define H "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
#define W "486ea46224d1bb4fb680f34f7c9ad96a8f24ec88be73ea8e5a6c65260e9cb8a7"

struct fixture {
    char dir[64];        /* a temporary base directory */
    struct fetch_opts o; /* base_dir = dir, home = dir/home */
    char home[128];      /* dir/home */
};

static int rm_entry(const char *p, const struct stat *st, int flag, struct FTW *f)
{
    return remove(p);
}

static int setup(void **state)
{
    struct fixture *fx = calloc(1, sizeof *fx);
    snprintf(fx->dir, sizeof fx->dir, "/tmp/test-fetch-XXXXXX");
    if (!mkdtemp(fx->dir))
        return -1;
    snprintf(fx->home, sizeof fx->home, "%s/home", fx->dir);
    mkdir(fx->home, 0755);
    memset(&fx->o, 0, sizeof fx->o);
    fx->o.base_dir = fx->dir;
    fx->o.home = fx->home;
    fx->o.hf_endpoint = "http://127.0.0.1:9/";
    *state = fx;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *fx = *state;
    nftw(fx->dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    free(fx);
    return 0;
}

static void touch(const struct fixture *fx, const char *rel)
{
    char p[256];
    struct mf_err err;
    snprintf(p, sizeof p, "%s/%s", fx->dir, rel);
    assert_int_equal(mf_file_write_atomic(p, "x", 1, &err), 0);
}

static void test_hf_maps_to_resolve_url(void **state)
{
    struct fixture *fx = *state;
    struct fetch_source src;
    struct mf_err err;
    assert_int_equal(fetch_resolve("hf://acme/tiny/model.gguf", &fx->o, &src, &err), 0);
    assert_int_equal(src.kind, FETCH_URL);
    assert_true(src.hf);
    assert_string_equal(src.location, "http://127.0.0.1:9/acme/tiny/resolve/main/model.gguf");
    assert_string_equal(src.display, "hf://acme/tiny/model.gguf");
    fetch_source_fini(&src);
    assert_int_equal(
        fetch_resolve("hf://acme/tiny@v1.0/sub dir/q4 k.gguf@sha256:" H, &fx->o, &src, &err), 0);
    assert_string_equal(src.location,
                        "http://127.0.0.1:9/acme/tiny/resolve/v1.0/sub%20dir/q4%20k.gguf");
    assert_string_equal(src.pin, "sha256:" H);
    fetch_source_fini(&src);
    fx->o.hf_endpoint = NULL;
    assert_int_equal(fetch_resolve("hf://a/b/c.gguf", &fx->o, &src, &err), 0);
    assert_string_equal(src.location, "https://huggingface.co/a/b/resolve/main/c.gguf");
    fetch_source_fini(&src);
}

static void test_hf_rejects_bad_parts(void **state)
{
    struct fixture *fx = *state;
    static const char *const bad[] = {
        "hf://acme/model.gguf", "hf://acme/tiny/",          "hf://ac me/tiny/x.gguf",
        "hf://acme/tiny/../x",  "hf://acme/tiny/a//b.gguf", "hf://acme/tiny@/x.gguf",
        "hf://acme/tiny@a%b/x", "hf://../tiny/x.gguf",      "hf://acme/tiny/./x",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct fetch_source src;
        struct mf_err err;
        assert_int_equal(fetch_resolve(bad[i], &fx->o, &src, &err), MF_EINVAL);
        assert_null(src.location);
    }
}

static void test_pins_and_checksum(void **state)
{
    struct fixture *fx = *state;
    struct fetch_source src;
    struct mf_err err;
    assert_int_equal(fetch_resolve("https://example.com/m.gguf@sha256:" H, &fx->o, &src, &err), 0);
    assert_string_equal(src.location, "https://example.com/m.gguf");
    assert_string_equal(src.pin, "sha256:" H);
    fetch_source_fini(&src);
    fx->o.checksum = "sha256:" H;
    assert_int_equal(fetch_resolve("https://example.com/m.gguf", &fx->o, &src, &err), 0);
    assert_string_equal(src.pin, "sha256:" H);
    fetch_source_fini(&src);
    assert_int_equal(fetch_resolve("https://example.com/m.gguf@sha256:" W, &fx->o, &src, &err),
                     MF_EINVAL);
    assert_non_null(strstr(err.msg, "--checksum"));
    fx->o.checksum = "md5:abc";
    assert_int_equal(fetch_resolve("https://example.com/m.gguf", &fx->o, &src, &err), MF_EINVAL);
    fx->o.checksum = NULL;
    assert_int_equal(fetch_resolve("https://example.com/m.gguf@sha256:ABC", &fx->o, &src, &err),
                     MF_EINVAL);
    assert_int_equal(fetch_resolve("ftp://example.com/m.gguf", &fx->o, &src, &err),
                     MF_EUNSUPPORTED);
    assert_int_equal(fetch_resolve("http://exa mple.com/m.gguf", &fx->o, &src, &err), MF_EINVAL);
}

static void test_paths_and_names(void **state)
{
    struct fixture *fx = *state;
    struct fetch_source src;
    struct mf_err err;
    char want[256];
    touch(fx, "m.gguf");
    touch(fx, "home/h.gguf");
    assert_int_equal(fetch_resolve("m.gguf", &fx->o, &src, &err), 0);
    assert_int_equal(src.kind, FETCH_FILE);
    snprintf(want, sizeof want, "%s/m.gguf", fx->dir);
    assert_string_equal(src.location, want);
    fetch_source_fini(&src);
    assert_int_equal(fetch_resolve("~/h.gguf", &fx->o, &src, &err), 0);
    snprintf(want, sizeof want, "%s/h.gguf", fx->home);
    assert_string_equal(src.location, want);
    fetch_source_fini(&src);
    /* Ollama: a path that does not exist is a model name ... */
    assert_int_equal(fetch_resolve("llama3.2:1b", &fx->o, &src, &err), 0);
    assert_int_equal(src.kind, FETCH_NAME);
    assert_string_equal(src.location, "llama3.2:1b");
    fetch_source_fini(&src);
    /* ... unless it plainly names a file */
    assert_int_equal(fetch_resolve("./gone.gguf", &fx->o, &src, &err), MF_ENOTFOUND);
    assert_int_equal(fetch_resolve("gone.gguf", &fx->o, &src, &err), MF_ENOTFOUND);
    assert_int_equal(fetch_resolve("", &fx->o, &src, &err), MF_EINVAL);
    fx->o.home = NULL;
    assert_int_equal(fetch_resolve("~/h.gguf", &fx->o, &src, &err), MF_EINVAL);
}

static void test_directory_layouts(void **state)
{
    struct fixture *fx = *state;
    struct fetch_source src;
    struct mf_err err;
    char p[256];
    static const char *const dirs[] = {"one", "two", "peft", "hf", "none"};
    for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
        snprintf(p, sizeof p, "%s/%s", fx->dir, dirs[i]);
        mkdir(p, 0755);
    }
    touch(fx, "one/a.gguf");
    touch(fx, "one/notes.txt");
    touch(fx, "two/b.gguf");
    touch(fx, "two/a.gguf");
    touch(fx, "peft/adapter_config.json");
    touch(fx, "peft/adapter_model.safetensors");
    touch(fx, "hf/config.json");
    touch(fx, "hf/model-00001-of-00002.safetensors");
    touch(fx, "none/readme.md");

    assert_int_equal(fetch_resolve("one", &fx->o, &src, &err), 0);
    assert_int_equal(src.kind, FETCH_FILE);
    snprintf(p, sizeof p, "%s/one/a.gguf", fx->dir);
    assert_string_equal(src.location, p);
    fetch_source_fini(&src);
    assert_int_equal(fetch_resolve("two", &fx->o, &src, &err), MF_EINVAL);
    assert_non_null(strstr(err.msg, "2 GGUF files (a.gguf, b.gguf)"));
    assert_int_equal(fetch_resolve("peft", &fx->o, &src, &err), 0);
    assert_int_equal(src.kind, FETCH_DIR);
    assert_int_equal(src.layout, FETCH_LAYOUT_PEFT);
    fetch_source_fini(&src);
    assert_int_equal(fetch_resolve("hf", &fx->o, &src, &err), 0);
    assert_int_equal(src.layout, FETCH_LAYOUT_SAFETENSORS);
    fetch_source_fini(&src);
    assert_int_equal(fetch_resolve("none", &fx->o, &src, &err), MF_ENOTFOUND);
}

/* The build context (base_dir) is a boundary for relative paths and the
 * symlinks they reach; an absolute path may name any file. */
static void test_context_boundary(void **state)
{
    struct fixture *fx = *state;
    struct fetch_source src;
    struct mf_err err;
    char ctx[128], p[256], q[256];
    snprintf(ctx, sizeof ctx, "%s/ctx", fx->dir);
    assert_int_equal(mkdir(ctx, 0755), 0);
    touch(fx, "outside.gguf");
    touch(fx, "ctx/in.gguf");
    fx->o.base_dir = ctx;
    assert_int_equal(fetch_resolve("./in.gguf", &fx->o, &src, &err), 0);
    fetch_source_fini(&src);
    /* .. out of the context */
    assert_int_equal(fetch_resolve("../outside.gguf", &fx->o, &src, &err), MF_EINVAL);
    assert_non_null(strstr(err.msg, "leaves the build context"));
    snprintf(q, sizeof q, "%s/sub", ctx);
    assert_int_equal(mkdir(q, 0755), 0);
    assert_int_equal(fetch_resolve("sub/../../outside.gguf", &fx->o, &src, &err), MF_EINVAL);
    /* a symlink in the context to a file outside, and to /etc/passwd */
    snprintf(p, sizeof p, "%s/outside.gguf", fx->dir);
    snprintf(q, sizeof q, "%s/link.gguf", ctx);
    assert_int_equal(symlink(p, q), 0);
    assert_int_equal(fetch_resolve("./link.gguf", &fx->o, &src, &err), MF_EINVAL);
    assert_non_null(strstr(err.msg, "./link.gguf"));
    snprintf(q, sizeof q, "%s/model.gguf", ctx);
    assert_int_equal(symlink("/etc/passwd", q), 0);
    assert_int_equal(fetch_resolve("model.gguf", &fx->o, &src, &err), MF_EINVAL);
    /* a symlink that stays inside is fine */
    snprintf(q, sizeof q, "%s/alias.gguf", ctx);
    assert_int_equal(symlink("in.gguf", q), 0);
    assert_int_equal(fetch_resolve("./alias.gguf", &fx->o, &src, &err), 0);
    fetch_source_fini(&src);
    /* named absolutely (or by ~), a file outside is read as before */
    assert_int_equal(fetch_resolve(p, &fx->o, &src, &err), 0);
    assert_string_equal(src.location, p);
    fetch_source_fini(&src);
    /* a directory source whose file is a symlink out of the context */
    snprintf(q, sizeof q, "%s/peft", ctx);
    assert_int_equal(mkdir(q, 0755), 0);
    touch(fx, "ctx/peft/adapter_config.json");
    snprintf(q, sizeof q, "%s/peft/adapter_model.safetensors", ctx);
    assert_int_equal(symlink(p, q), 0);
    assert_int_equal(fetch_resolve("./peft", &fx->o, &src, &err), MF_EINVAL);
    assert_non_null(strstr(err.msg, "adapter_model.safetensors"));
    /* fetch_confined, as mfc build checks PATH/Modelfile */
    snprintf(q, sizeof q, "%s/Modelfile", ctx);
    assert_int_equal(symlink("/etc/shadow", q), 0);
    assert_int_not_equal(fetch_confined(q, ctx, &err), 0);
    snprintf(q, sizeof q, "%s/in.gguf", ctx);
    assert_int_equal(fetch_confined(q, ctx, &err), 0);
}

int main(void)
{
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(test_hf_maps_to_resolve_url), T(test_hf_rejects_bad_parts), T(test_pins_and_checksum),
        T(test_paths_and_names),        T(test_directory_layouts), T(test_context_boundary),
    };
    return cmocka_run_group_tests_name("fetch", tests, NULL, NULL);
}
