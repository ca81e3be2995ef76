/*
 * exec_convert.c: the convert step: `FROM ./dir` with a Hugging Face model
 * directory becomes a GGUF blob in the store (convert/hf.h does the work).
 *
 * Key content (exec_convert_content): the digests of the files the converter
 * reads (*.json, *.safetensors, *.jinja directly in the directory, through
 * the store's stat cache, so an unchanged directory is not read again) and
 * the converter's version, hashed together: editing any of them re-runs the
 * step; an unchanged rebuild is CACHED without converting. The GGUF is
 * written to a temporary in the store's tmp directory and then enters the
 * store through store_put_file (hashed while copied, atomic); the temporary
 * is removed whatever happens. ADAPTER directories (PEFT) go to
 * exec_convert_peft (exec_lora.c) instead.
 */
#include "exec/exec_int.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/sha256.h"
#include "convert/hf.h"
#include "common/progress.h"

/* Bump when the GGUF written for the same input changes. */
#define HF_CONVERTER_VERSION "mfc-hf-convert 1"

static int wanted(const char *name)
{
    size_t n = strlen(name);
#define ENDS(s) (n > sizeof(s) - 1 && strcmp(name + n - (sizeof(s) - 1), s) == 0)
    return name[0] != '.' && (ENDS(".json") || ENDS(".safetensors") || ENDS(".jinja"));
#undef ENDS
}

static int cmp_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int exec_convert_content(const struct exec_job *j, char content[STORE_DIGEST_BUF],
                         struct mf_err *err)
{
    const char *dir = j->node->src.location;
    DIR *d = opendir(dir);
    if (!d)
        return mf_err_sys(err, MF_ENOTFOUND, errno, "cannot open directory %s", dir);
    char **names = NULL;
    size_t n = 0, cap = 0;
    int rc = 0;
    struct dirent *e;
    while (!rc && (e = readdir(d))) {
        if (!wanted(e->d_name))
            continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 16;
            char **nn = realloc(names, cap * sizeof *nn);
            if (!nn) {
                rc = mf_err_set(err, MF_ENOMEM, "out of memory");
                break;
            }
            names = nn;
        }
        if (!(names[n] = strdup(e->d_name)))
            rc = mf_err_set(err, MF_ENOMEM, "out of memory");
        else
            n++;
    }
    closedir(d);
    struct mf_buf b;
    mf_buf_init(&b, 1u << 20);
    if (!rc) {
        qsort(names, n, sizeof *names, cmp_name);
        rc = mf_buf_printf(&b, err, "%s\n", HF_CONVERTER_VERSION);
    }
    for (size_t i = 0; !rc && i < n; i++) {
        char path[4096], digest[STORE_DIGEST_BUF];
        uint64_t size;
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        if (stat(path, &st) != 0 || !S_ISREG(st.st_mode))
            continue;
        rc = store_digest_file(j->s, path, digest, &size, err);
        if (!rc)
            rc = mf_buf_printf(&b, err, "%s %s\n", names[i], digest);
    }
    if (!rc) {
        uint8_t h[MF_SHA256_LEN];
        char hex[MF_SHA256_HEX_LEN + 1];
        rc = mf_sha256_mem(b.data ? b.data : "", b.len, h, err);
        if (!rc) {
            mf_sha256_hex(h, hex);
            snprintf(content, STORE_DIGEST_BUF, "sha256:%s", hex);
        }
    }
    mf_buf_free(&b);
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    return rc;
}

struct conv_progress {
    struct progress *pg;
    int id;
};

static void on_progress(void *arg, uint64_t done, uint64_t total)
{
    struct conv_progress *p = arg;
    progress_update(p->pg, p->id, done, total);
}

int exec_op_convert(const struct exec_job *j, struct exec_node *r, int *cached, struct mf_err *err)
{
    if (j->node->role == PLAN_ROLE_ADAPTER)
        return exec_convert_peft(j, r, cached, err);
    *cached = 0;
    const char *dir = j->node->src.location;
    char *tmp = NULL;
    int rc = exec_tmp_path(j, "convert", &tmp, err);
    if (rc)
        return rc;
    struct conv_progress cp = {progress_scope(j->o->progress, (int)j->node->id + 1), 0};
    cp.id = progress_begin(cp.pg, "convert", dir);
    struct hf_convert_opts o = {
        .outtype = HF_OUT_AUTO, .progress = on_progress, .progress_arg = &cp};
    struct hf_convert_info info;
    rc = hf_convert(dir, tmp, &o, &info, err);
    if (!rc)
        rc = store_put_file(j->s, tmp, NULL, r->digest, &r->size, err);
    unlink(tmp);
    free(tmp);
    if (rc)
        progress_fail(cp.pg, cp.id, err->msg);
    else
        progress_end(cp.pg, cp.id, "done");
    progress_close(cp.pg);
    if (rc)
        return rc;
    const char *ft = quant_ftype_name(info.ftype);
    r->result =
        json_pack("{s:s, s:I, s:s, s:s, s:I}", "digest", r->digest, "size", (json_int_t)r->size,
                  "from", dir, "file_type", ft ? ft : "?", "tensors", (json_int_t)info.n_tensors);
    return r->result ? 0 : mf_err_set(err, MF_ENOMEM, "out of memory");
}
