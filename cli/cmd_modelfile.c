/*
 * cmd_modelfile.c: the input side of `mfc check` and `mfc fmt`: resolve
 * -f FILE / PATH / stdin, read with a size cap, parse, print diagnostics.
 *
 * Owns the struct cmd_modelfile it fills (path, bytes, parse); the caller
 * releases it with cmd_modelfile_fini. The display name in messages is the
 * path as the user gave it, or "<stdin>".
 */
#include "cli/cmd_modelfile.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/file.h"

int cmd_modelfile_resolve(struct mfc_ctx *ctx, const char *cmd, const char *file, int nargs,
                          char **args, struct cmd_modelfile *m)
{
    struct stat st;
    const char *path = nargs > 0 ? args[0] : ".";
    memset(m, 0, sizeof *m);
    if (nargs > 1)
        return mfc_usage_error(ctx, cmd, "takes at most one PATH");
    if (file && nargs > 0)
        return mfc_usage_error(ctx, cmd, "give either -f FILE or PATH, not both");
    if (file) {
        m->path = strdup(file);
    } else if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        size_t n = strlen(path);
        m->path = malloc(n + sizeof "/Modelfile");
        if (m->path)
            snprintf(m->path, n + sizeof "/Modelfile", "%s%sModelfile", path,
                     n && path[n - 1] == '/' ? "" : "/");
    } else {
        m->path = strdup(path);
    }
    if (!m->path) {
        struct mf_err e;
        mf_err_set(&e, MF_ENOMEM, "out of memory");
        return mfc_report(ctx, &e);
    }
    return 0;
}

int cmd_modelfile_load(struct mfc_ctx *ctx, const struct mf_modelfile_opts *opts, int warnings,
                       struct cmd_modelfile *m)
{
    struct mf_modelfile_opts o = *opts;
    struct mf_err err;
    struct mf_buf out;
    int stdin_ = strcmp(m->path, "-") == 0;
    int rc = mf_file_read(stdin_ ? "/dev/stdin" : m->path, CMD_MODELFILE_READ_MAX, &m->data,
                          &m->len, &err);
    if (rc)
        return mfc_report(ctx, &err);
    o.name = stdin_ ? "<stdin>" : m->path;
    rc = mf_modelfile_parse(m->data, m->len, &o, &m->mf, &err);
    if (!m->mf)
        return mfc_report(ctx, &err);
    if (!warnings && m->mf->n_errors == 0)
        return 0;
    mf_buf_init(&out, 1u << 24);
    if (mf_modelfile_render_diags(m->mf, ctx->color, &out, &err) == 0 && out.len)
        fwrite(out.data, 1, out.len, ctx->err);
    mf_buf_free(&out);
    return rc ? 1 : 0;
}

void cmd_modelfile_fini(struct cmd_modelfile *m)
{
    mf_modelfile_free(m->mf);
    free(m->data);
    free(m->path);
    memset(m, 0, sizeof *m);
}
