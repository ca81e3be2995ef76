/*
 * run.h: what `mfc serve` and `mfc run` need besides the command line:
 * the model an argument names (a GGUF file, or an image in the store read in
 * place), the mfc-serve process, and an HTTP client for its Ollama API.
 *
 *   struct run_model m;
 *   run_model_resolve(store_root, "llama3-sql", &m, err);  // weights = blob range
 *   run_model_materialize(&m, err);  // model.yaml (adapter ranges) into a memfd
 *   run_server_argv(&m, bin, "llama3-sql", "127.0.0.1", port, NULL, &argv, err);
 *   run_server_start(argv, &srv, err); run_server_wait_ready(&srv, url, 60000, err);
 *   run_chat_stream(&client, req, on_text, arg, &reply, &stats, err);
 *   run_server_stop(&srv); run_argv_free(argv); run_model_free(&m);
 *
 * An image's weights and adapter layers are uncompressed tars whose
 * /models/model.gguf and /adapters/NAME.gguf are byte ranges of their blobs:
 * mfc-serve maps each range in place (--model BLOB --model-offset N
 * --model-size N; an adapter's model.yaml entry names the blob with offset:
 * and size:, or --adapter NAME=BLOB@OFFSET:SIZE), nothing is copied. The
 * config layer is gzip'd: its
 * /etc/mfc/model.yaml (small) is extracted into a memfd that mfc-serve reads
 * as /proc/self/fd/N.
 * Functions that can fail return 0 or a negative MF_E* code with err filled.
 */
#ifndef MFC_RUN_H
#define MFC_RUN_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <jansson.h>

#include "common/buf.h"
#include "common/err.h"

#define RUN_TAR_NAME_MAX 4096

/* One file of the model: a whole file (size 0, offset 0) or a byte range. */
struct run_file {
    char *path;      /* owned */
    uint64_t offset; /* where the GGUF starts inside path */
    uint64_t size;   /* its length; 0: to the end of the file */
};

struct run_adapter {
    char *name;          /* owned: /adapters/<name>.gguf */
    struct run_file file;
};

/* What mfc-serve is started with. */
struct run_model {
    char *name;                   /* owned: the argument as given */
    char *served;                 /* owned: the image's MFC_MODEL_NAME (the API's model name
                                     under podman run too), or NULL */
    struct run_file weights;      /* the base GGUF */
    struct run_file draft;        /* the DRAFT's /models/draft.gguf; path NULL: none */
    struct run_adapter *adapters; /* owned; n_adapters entries */
    size_t n_adapters;
    int config_fd;                /* memfd with model.yaml (inherited by mfc-serve), or -1 */
    char *config_text;            /* owned: model.yaml as the image has it, or NULL */
};

/* ---- tar (untrusted bytes; exported for the fuzzer) ---- */

/* Reads up to n bytes: returns how many (fewer only at the end), or -1. */
typedef long (*run_tar_read_fn)(void *arg, void *buf, size_t n);
/* Skips n bytes forward: 0, or -1 (also when the input ends first). */
typedef int (*run_tar_skip_fn)(void *arg, uint64_t n);
/* Called for each regular file: name without a leading "./" or "/", the
 * offset of its data from the start of the tar, its size. Returns 0 to go
 * on, 1 to stop at this entry (its data is next in the input), or -1 to fail
 * (err filled). */
typedef int (*run_tar_entry_fn)(void *arg, const char *name, uint64_t offset, uint64_t size,
                                struct mf_err *err);

struct run_tar_io {
    run_tar_read_fn read;
    run_tar_skip_fn skip;
    void *arg;
};

/* Walks a ustar/pax/GNU tar (checksums verified; pax path and size records
 * and GNU long names honoured; sizes octal or base-256). `what` names the
 * input in errors. Returns 1 when fn stopped the walk, 0 at the end of the
 * archive, or a negative MF_E* (MF_EFORMAT for a malformed header). */
int run_tar_walk(const struct run_tar_io *io, const char *what, run_tar_entry_fn fn, void *arg,
                 struct mf_err *err);

/* ---- the model ---- */

/* Fills m for arg: a path to an existing file (or one ending in .gguf) is
 * served as it is; anything else is an image name or digest in the store at
 * store_root: weights and adapters become byte ranges of their layer blobs,
 * model.yaml goes into a memfd. MF_ENOTFOUND for an unknown image,
 * MF_EFORMAT for an image without /models/model.gguf. On failure m is
 * cleared. */
int run_model_resolve(const char *store_root, const char *arg, struct run_model *m,
                      struct mf_err *err);
/* Makes m servable in place: an image's model.yaml, with each adapter's
 * path rewritten to its layer blob plus offset: and size:, goes into a
 * memfd (config_fd, inherited by mfc-serve). Nothing is copied. 0 without
 * a model.yaml; MF_EIO or MF_ENOMEM. */
int run_model_materialize(struct run_model *m, struct mf_err *err);
/* Releases m (closes the memfd). Accepts a cleared m. */
void run_model_free(struct run_model *m);

/* ---- the server process ---- */

/* The mfc-serve binary: $MFC_SERVE when set, else mfc-serve next to this
 * executable. *path is malloc'd, NULL when there is none next to mfc.
 * MF_ENOTFOUND when $MFC_SERVE names no executable file. */
int run_locate_server(char **path, struct mf_err *err);
/* run_locate_server, with none found an MF_ENOTFOUND error. */
int run_find_server(char **path, struct mf_err *err);

/* argv for mfc-serve serving m (after run_model_materialize) on host:port
 * (port 0: leave it to mfc-serve), named name (NULL: mfc-serve's default),
 * plus api_key when not NULL. *argv and its strings are malloc'd: free with
 * run_argv_free. */
int run_server_argv(const struct run_model *m, const char *bin, const char *name,
                    const char *host, int port, const char *api_key, char ***argv,
                    struct mf_err *err);
void run_argv_free(char **argv);

/* A free TCP port on 127.0.0.1 (bound and released; mfc-serve binds it next). */
int run_free_port(int *port, struct mf_err *err);

struct run_server {
    pid_t pid;  /* > 0 while running */
    int log_fd; /* memfd holding its stdout and stderr */
};

/* Starts argv[0] with stdout and stderr into a memfd, stdin from /dev/null. */
int run_server_start(char *const *argv, struct run_server *srv, struct mf_err *err);
/* Polls base_url + "/health" until 200, the process exits (MF_EIO, its last
 * log lines in the message), or timeout_ms passes (MF_EBUSY). */
int run_server_wait_ready(struct run_server *srv, const char *base_url, long timeout_ms,
                          struct mf_err *err);
/* SIGTERM, then SIGKILL after 5 s; reaps it and closes the log. Accepts a
 * stopped one. */
void run_server_stop(struct run_server *srv);

/* ---- the client (cli/run_client.c) ---- */

struct run_client {
    char base_url[128];   /* "http://127.0.0.1:PORT" */
    const char *api_key;  /* borrowed, or NULL */
    volatile int *cancel; /* borrowed: a nonzero value aborts a transfer (Ctrl-C) */
};

/* Called with each piece of streamed text. */
typedef void (*run_text_fn)(void *arg, const char *text, size_t n);

/* What a finished /api/chat stream reported in its last line. */
struct run_stats {
    int64_t prompt_eval_count, eval_count;      /* tokens */
    int64_t total_duration, eval_duration;       /* ns */
    char done_reason[32];
};

/* POSTs req (an /api/chat body with "stream": true) and feeds each NDJSON
 * line's message.content to fn as it arrives; *reply gets the whole
 * assistant text (malloc'd). An {"error": ...} line or an HTTP error is
 * MF_ENET naming the server's message; a cancel is MF_EBUSY ("interrupted")
 * with the text so far in *reply. */
int run_chat_stream(const struct run_client *c, const json_t *req, run_text_fn fn, void *arg,
                    char **reply, struct run_stats *st, struct mf_err *err);

/* Feeds streamed bytes to the NDJSON line parser (exported for the fuzzer):
 * complete lines are parsed and their content passed to fn; a partial line
 * waits in `line`. Returns 0, 1 after the line with "done": true, or a
 * negative MF_E* (an "error" line is MF_ENET). */
struct run_ndjson {
    struct mf_buf line;  /* an incomplete line */
    struct mf_buf reply; /* every content so far */
    struct run_stats st;
    int done;
    run_text_fn fn;
    void *arg;
};
void run_ndjson_init(struct run_ndjson *p, run_text_fn fn, void *arg);
int run_ndjson_feed(struct run_ndjson *p, const char *data, size_t n, struct mf_err *err);
void run_ndjson_free(struct run_ndjson *p);

/* GET or POST (body != NULL) path; *out = the parsed JSON reply. Non-2xx
 * is MF_ENET with the server's error message. */
int run_client_json(const struct run_client *c, const char *path, const json_t *body,
                    json_t **out, struct mf_err *err);

/* ---- the DRAFT of an image (draft_image.c) ---- */

/* For `mfc inspect IMAGE`: *out the image's draft model (its GGUF facts and
 * the speculative settings of model.yaml), or NULL when it has none.
 * Returns 0 or MF_E* (the image or the draft's header unreadable). */
int draft_image_describe(const char *store_root, const char *ref, json_t **out,
                         struct mf_err *err);

#endif
