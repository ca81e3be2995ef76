/*
 * cmd_modelfile.h: what `mfc check` and `mfc fmt` share: finding the
 * Modelfile (-f FILE, PATH, a directory holding Modelfile, or stdin),
 * reading it, parsing it and printing its diagnostics.
 */
#ifndef MFC_CMD_MODELFILE_H
#define MFC_CMD_MODELFILE_H

#include <stddef.h>

#include "cli/cli.h"
#include "compiler/modelfile.h"

/* Largest file read, in bytes (UTF-16 doubles the size of the text). */
#define CMD_MODELFILE_READ_MAX (4 * (size_t)MF_MODELFILE_MAX_BYTES)

struct cmd_modelfile {
    char *path;              /* owned: the file to read; "-" for stdin */
    char *data;              /* owned: its bytes */
    size_t len;              /* bytes in data */
    struct mf_modelfile *mf; /* owned: the parse, NULL before cmd_modelfile_load */
};

/* Picks the file from `-f FILE` (may be NULL) and the positional arguments
 * (at most one PATH, default "."). Returns 0, or 2 after a usage message. */
int cmd_modelfile_resolve(struct mfc_ctx *ctx, const char *cmd, const char *file, int nargs,
                          char **args, struct cmd_modelfile *m);

/* Reads and parses m->path, printing the diagnostics to ctx->err (warnings
 * only when `warnings` is set). Returns 0 when the file has no errors, 1
 * when it has some or cannot be read (m->mf NULL then). */
int cmd_modelfile_load(struct mfc_ctx *ctx, const struct mf_modelfile_opts *opts, int warnings,
                       struct cmd_modelfile *m);

/* Frees what m owns. Accepts a zeroed m. */
void cmd_modelfile_fini(struct cmd_modelfile *m);

#endif
