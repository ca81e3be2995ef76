/*
 * hf_convert.c: hf_convert, the streaming driver of the Hugging Face importer.
 *
 * Order of work: config.json (refuses other architectures before anything
 * big is opened), tokenizer files, shards (each mapped and validated whole),
 * the tensor table (names, dtypes, shapes checked: every error is found
 * before a byte is written), then the GGUF: KVs in convert_hf_to_gguf.py's
 * order (general.architecture, general.type, general.name, <arch>.*,
 * general.file_type, tokenizer.*, general.quantization_version), tensor infos,
 * and the data tensor by tensor through a 4 MiB buffer (rows that need
 * converting are split among threads, one per CPU by default). Source pages are
 * dropped from the mapping (MADV_DONTNEED) as the rows are done, so the
 * resident size stays near the buffer, the vocabulary and one tensor's pages
 * whatever the model size. The GGUF writer writes a temporary and renames it
 * at the end: a failure leaves nothing at the output path.
 */
#include "convert/hf_int.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/file.h"
#include "common/gguf.h"

#define HF_CONFIG_MAX (4u << 20)
#define HF_BUF (4u << 20)
#define HF_MAX_THREADS 16
#define GGML_QUANT_VERSION 2

int hf_dir_kind(const char *dir)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/adapter_config.json", dir);
    if (access(path, F_OK) == 0)
        return 2;
    snprintf(path, sizeof path, "%s/config.json", dir);
    return access(path, F_OK) == 0 ? 1 : 0;
}

/* Drops the mapped pages of t's source rows [0, rows) (clean file pages:
 * reading them again would fault them back in), so the resident size stays
 * near one buffer's worth of source rows even inside a big tensor. */
static void drop_src(const struct st_file *f, const struct st_tensor *s, uint64_t end)
{
    long page = sysconf(_SC_PAGESIZE);
    uintptr_t a = (uintptr_t)st_data(f, s), e = a + end;
    uintptr_t lo = (a + (uintptr_t)page - 1) & ~((uintptr_t)page - 1);
    uintptr_t hi = e & ~((uintptr_t)page - 1);
    if (hi > lo)
        (void)madvise((void *)lo, hi - lo, MADV_DONTNEED);
}

static void drop_rows(const struct hf_tensor *t, uint64_t rows)
{
    if (!t->src)
        return;
    if (t->blk_rows) { /* expert blocks: their sources are dropped when all are done */
        if (rows != UINT64_MAX)
            return;
        uint64_t nb = t->xs ? t->ne[2] : 1;
        for (uint64_t b = 0; b < nb; b++)
            drop_src(t->xs ? t->xf[b] : t->f, t->xs ? t->xs[b] : t->src,
                     (t->xs ? t->xs[b] : t->src)->size);
        return;
    }
    long page = sysconf(_SC_PAGESIZE);
    uint64_t total = t->n_dims == 2 ? t->ne[1] : 1;
    uint64_t end = rows >= total ? t->src->size : rows * (t->src->size / total);
    uintptr_t a = (uintptr_t)st_data(t->f, t->src), e = a + end;
    uintptr_t lo = (a + (uintptr_t)page - 1) & ~((uintptr_t)page - 1);
    uintptr_t hi = e & ~((uintptr_t)page - 1);
    if (hi > lo)
        (void)madvise((void *)lo, hi - lo, MADV_DONTNEED);
}

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22 /* Linux 5.14 */
#endif

/* Maps [p, p + n) in one call (MADV_POPULATE_READ: no page fault per 4 KiB
 * page; kernels without it ignore the advice and the pages fault in as read). */
static void populate(const void *p, uint64_t n)
{
    long page = sysconf(_SC_PAGESIZE);
    uintptr_t lo = (uintptr_t)p & ~((uintptr_t)page - 1);
    (void)madvise((void *)lo, (uintptr_t)p + n - lo, MADV_POPULATE_READ);
}

/* Source rows no output row at or after r needs: all before r's head (q/k
 * rows move only within their head), or before r itself. */
static uint64_t rows_done(const struct hf_tensor *t, uint64_t r)
{
    if (t->perm_heads <= 0 || t->n_dims != 2 || t->blk_rows)
        return r;
    uint64_t hd = t->ne[1] / (uint64_t)t->perm_heads;
    return r / hd * hd;
}

/* One slice of a chunk's rows, converted by one thread. */
struct slice {
    const struct hf_tensor *t;
    uint64_t r0, nr;
    uint8_t *dst;
    float *tmp;
    int rc;
    struct mf_err err;
};

static void *slice_run(void *arg)
{
    struct slice *s = arg;
    s->rc = hf_tensor_rows(s->t, s->r0, s->nr, s->dst, s->tmp, &s->err);
    return NULL;
}

/* Converts rows [r0, r0 + nr) of t into buf with up to nth threads (the
 * calling one included); tmp holds nth scratch rows of stride ne0 floats. */
static int convert_rows(const struct hf_tensor *t, uint64_t r0, uint64_t nr, uint64_t row,
                        uint8_t *buf, float *tmp, uint64_t stride, int nth, struct mf_err *err)
{
    struct slice sl[HF_MAX_THREADS];
    pthread_t th[HF_MAX_THREADS];
    int started[HF_MAX_THREADS] = {0};
    if ((uint64_t)nth > nr)
        nth = (int)nr;
    if (nth < 1)
        nth = 1;
    uint64_t per = (nr + (uint64_t)nth - 1) / (uint64_t)nth, at = 0;
    int k = 0;
    for (; k < nth && at < nr; k++, at += per) {
        uint64_t m = nr - at < per ? nr - at : per;
        sl[k] = (struct slice){t, r0 + at, m, buf + at * row, tmp + (uint64_t)k * stride, 0, {0}};
        if (k > 0)
            started[k] = pthread_create(&th[k], NULL, slice_run, &sl[k]) == 0;
        if (k > 0 && !started[k])
            slice_run(&sl[k]); /* no thread: do it here */
    }
    slice_run(&sl[0]);
    int rc = 0;
    for (int i = 0; i < k; i++) {
        if (started[i])
            pthread_join(th[i], NULL);
        if (sl[i].rc && !rc) {
            rc = sl[i].rc;
            *err = sl[i].err;
        }
    }
    return rc;
}

static int n_threads(const struct hf_convert_opts *o)
{
    long n = o->threads > 0 ? o->threads : sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > HF_MAX_THREADS ? HF_MAX_THREADS : (int)n;
}

static int write_data(struct gguf_writer *w, const struct hf_tensor *t, size_t n,
                      const struct hf_convert_opts *o, uint64_t total, struct mf_err *err)
{
    uint64_t max_ne0 = 1;
    int nth = n_threads(o);
    for (size_t i = 0; i < n; i++)
        if (t[i].ne[0] > max_ne0)
            max_ne0 = t[i].ne[0];
    uint8_t *buf = malloc(HF_BUF);
    float *tmp = malloc(max_ne0 * (uint64_t)nth * sizeof *tmp);
    int rc = buf && tmp ? 0 : mf_err_set(err, MF_ENOMEM, "out of memory");
    uint64_t done = 0;
    for (size_t i = 0; !rc && i < n; i++) {
        uint64_t nrows = hf_tensor_nrows(&t[i]);
        uint64_t row = t[i].bytes / nrows;
        if (row > HF_BUF) { /* a row larger than the buffer: only a vector can be */
            uint8_t *big = malloc(row);
            rc = big ? hf_tensor_rows(&t[i], 0, 1, big, tmp, err)
                     : mf_err_set(err, MF_ENOMEM, "out of memory");
            if (!rc)
                rc = gguf_writer_write(w, big, row, err);
            free(big);
            done += row;
        } else {
            uint64_t per = HF_BUF / row;
            for (uint64_t r = 0; !rc && r < nrows; r += per) {
                uint64_t nr = nrows - r < per ? nrows - r : per;
                const void *direct = hf_tensor_direct(&t[i], r);
                if (direct)
                    populate(direct, nr * row);
                rc = direct ? 0 : convert_rows(&t[i], r, nr, row, buf, tmp, max_ne0, nth, err);
                if (!rc)
                    rc = gguf_writer_write(w, direct ? direct : buf, nr * row, err);
                done += nr * row;
                drop_rows(&t[i], rows_done(&t[i], r + nr));
                if (!rc && o->progress)
                    o->progress(o->progress_arg, done, total);
            }
        }
        drop_rows(&t[i], UINT64_MAX);
    }
    free(buf);
    free(tmp);
    return rc;
}

static const char *base_name(const char *dir, char *out, size_t cap)
{
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s", dir);
    size_t n = strlen(tmp);
    while (n > 1 && tmp[n - 1] == '/')
        tmp[--n] = '\0';
    const char *s = strrchr(tmp, '/');
    snprintf(out, cap, "%s", s ? s + 1 : tmp);
    if (!strcmp(out, ".") || !strcmp(out, "..") || !*out) {
        char *abs = realpath(dir, NULL);
        const char *b = abs ? strrchr(abs, '/') : NULL;
        snprintf(out, cap, "%s", b && b[1] ? b + 1 : "model");
        free(abs);
    }
    return out;
}

int hf_convert(const char *dir, const char *out_path, const struct hf_convert_opts *o,
               struct hf_convert_info *info, struct mf_err *err)
{
    char path[4096], name[256];
    char *text = NULL;
    size_t len = 0;
    struct hf_config c;
    struct hf_vocab *v = NULL;
    struct hf_shards sh = {0};
    struct hf_tensor *t = NULL;
    struct gguf_writer *w = NULL;
    float *rope = NULL;
    size_t n = 0;
    enum quant_ftype ft = QUANT_FTYPE_MOSTLY_F16;
    struct stat st;

    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return mf_err_set(err, MF_ENOTFOUND, "%s is not a directory", dir);
    snprintf(path, sizeof path, "%s/config.json", dir);
    int rc = mf_file_read(path, HF_CONFIG_MAX, &text, &len, err);
    if (rc == MF_ENOTFOUND)
        rc = mf_err_set(err, MF_ENOTFOUND,
                        "%s: no config.json (not a Hugging Face model directory)", dir);
    if (!rc)
        rc = hf_config_parse(text, len, path, &c, err);
    free(text);
    if (!rc && c.family == HF_FAM_GEMMA3) {
        /* Gemma3Model drops embedding rows past the tokenizer's tokens */
        struct hf_config sized = c;
        sized.n_vocab = 0;
        rc = hf_vocab_load(dir, &sized, &v, err);
        if (!rc && hf_vocab_size(v) < c.n_vocab) {
            c.n_vocab_src = c.n_vocab;
            c.n_vocab = hf_vocab_size(v);
        }
        hf_vocab_free(v);
        v = NULL;
    }
    if (!rc)
        rc = hf_vocab_load(dir, &c, &v, err);
    if (!rc && (c.family == HF_FAM_GEMMA2 || c.family == HF_FAM_GEMMA3))
        hf_vocab_set_add_space_prefix(v, 0); /* Gemma2Model/Gemma3Model.set_vocab */
    if (!rc)
        rc = hf_shards_open(dir, &sh, err);
    if (!rc && c.rope == HF_ROPE_LLAMA3) {
        if (!(rope = malloc((size_t)c.head_dim / 2 * sizeof *rope)))
            rc = mf_err_set(err, MF_ENOMEM, "out of memory");
        else
            hf_config_rope_factors(&c, rope);
    }
    if (!rc)
        rc = hf_tensors_plan(&c, &sh, rope, &t, &n, err);
    if (!rc)
        rc = hf_tensors_types(&c, o, t, n, &ft, err);
    if (!rc)
        rc = gguf_writer_open(out_path, &w, err);
    if (!rc)
        rc = gguf_writer_add_cstr(w, "general.architecture", c.gguf_arch, err);
    if (!rc)
        rc = hf_family_write_early(&c, w, err);
    if (!rc)
        rc = gguf_writer_add_cstr(w, "general.type", "model", err);
    if (!rc)
        rc = gguf_writer_add_cstr(w, "general.name",
                                  o->name ? o->name : base_name(dir, name, sizeof name), err);
    if (!rc)
        rc = hf_config_write(&c, ft, w, err);
    if (!rc)
        rc = hf_vocab_write(v, w, err);
    if (!rc)
        rc = gguf_writer_add_u32(w, "general.quantization_version", GGML_QUANT_VERSION, err);
    uint64_t total = 0, src_bytes = 0;
    for (size_t i = 0; !rc && i < n; i++) {
        rc = gguf_writer_add_tensor(w, t[i].name, t[i].type, t[i].n_dims, t[i].ne, err);
        total += t[i].bytes;
        src_bytes += t[i].src ? t[i].src->size : 0;
    }
    if (!rc)
        rc = write_data(w, t, n, o, total, err);
    if (!rc)
        rc = gguf_writer_finish(w, err);
    if (!rc && info)
        *info = (struct hf_convert_info){n, total, src_bytes, ft};
    gguf_writer_free(w);
    hf_tensors_free(t, n);
    free(rope);
    hf_shards_close(&sh);
    hf_vocab_free(v);
    return rc;
}
