/*
 * fetch.h: sources for FROM and ADAPTER, resolved to blobs in the store.
 *
 * Two steps, so the planner can classify a source without I/O beyond a
 * stat() and fetch it later (in parallel, cached):
 *
 *   fetch_resolve(ref)  -> struct fetch_source: kind, absolute path or URL, pin
 *   fetch_run(source)   -> struct fetch_result: digest and size of the blob
 *
 * Reference forms (docs/store.md, "Sources"):
 *   ./model.gguf, /abs/x.gguf, ~/m.gguf   a file (relative to the Modelfile's directory;
 *                                         with a base_dir, a relative path and the
 *                                         symlinks it reaches stay inside base_dir)
 *   ./dir                                 a directory: its one *.gguf, or a safetensors
 *                                         model / PEFT adapter (FETCH_DIR, for the converter)
 *   https://host/x.gguf, http://...       a download (resumable, retried, verified)
 *   hf://owner/repo[@rev]/path/x.gguf     https://huggingface.co/owner/repo/resolve/<rev>/<path>
 *   any of the above + @sha256:<hex>      a pin: the content must have this digest
 *   llama3.2, ns/model:tag                not a path that exists: a model name (FETCH_NAME)
 */
#ifndef MFC_FETCH_H
#define MFC_FETCH_H

#include <stdint.h>

#include "common/err.h"
#include "common/progress.h"
#include "store/store.h"

enum fetch_kind {
    FETCH_FILE, /* a local regular file; fetch_run copies it into the store */
    FETCH_DIR,  /* a local safetensors model or PEFT adapter directory; not fetched */
    FETCH_URL,  /* http:// or https:// (hf:// is mapped to one) */
    FETCH_NAME, /* no such path: a model or image name, for the planner to resolve */
};

enum fetch_layout {
    FETCH_LAYOUT_NONE,        /* not a directory source */
    FETCH_LAYOUT_SAFETENSORS, /* config.json + *.safetensors (a Hugging Face model) */
    FETCH_LAYOUT_PEFT,        /* adapter_config.json + adapter_model.safetensors */
};

/* What a reference resolved to. All strings owned; release with fetch_source_fini. */
struct fetch_source {
    enum fetch_kind kind;
    char *location;             /* FILE/DIR: absolute path; URL: the http(s) URL; NAME: the name */
    char *display;              /* as shown to people: the reference without its pin */
    char pin[STORE_DIGEST_BUF]; /* the digest the content must have, or "" */
    enum fetch_layout layout;   /* DIR only */
    int hf;                     /* nonzero: from hf://, so HF_TOKEN is sent */
};

struct fetch_opts {
    const char *base_dir;      /* borrowed: relative paths resolve here; NULL: the cwd */
    const char *home;          /* borrowed: for "~"; NULL: "~" is an error */
    const char *checksum;      /* borrowed: "sha256:<hex>" from --checksum, or NULL */
    const char *hf_endpoint;   /* borrowed: hf:// base URL; NULL: https://huggingface.co */
    const char *hf_token;      /* borrowed: bearer token for hf:// downloads, or NULL */
    const char *user_agent;    /* borrowed: NULL: "mfc" */
    struct progress *progress; /* borrowed, may be NULL */
    int retries;               /* attempts after a failure that made no progress (default 4) */
    long retry_base_ms;        /* first backoff, doubled per retry up to 8 s (default 500) */
    long connect_timeout_s;    /* default 30 */
    long stall_timeout_s;      /* a transfer with no byte for this long fails (default 60) */
    long max_redirects;        /* default 10 */
};

struct fetch_result {
    char digest[STORE_DIGEST_BUF]; /* the blob in the store */
    uint64_t size;                 /* its bytes */
    int cached;                    /* nonzero: nothing was transferred (pin, ETag or stat cache) */
};

/* Call once per process before any thread fetches (libcurl's global state). */
int fetch_global_init(struct mf_err *err);
void fetch_global_cleanup(void);

/* Defaults (above), with hf_endpoint, hf_token and home from the environment
 * (HF_ENDPOINT, HF_TOKEN, HOME). The strings are borrowed from environ. */
void fetch_opts_init(struct fetch_opts *o);

/* Classifies ref. Touches the file system only to stat paths and list a
 * directory. An unusable reference (two GGUFs in a directory, a bad hf://
 * path, a pin that disagrees with --checksum) is an error naming it. On
 * failure src is zeroed (safe to fini). */
int fetch_resolve(const char *ref, const struct fetch_opts *o, struct fetch_source *src,
                  struct mf_err *err);
void fetch_source_fini(struct fetch_source *src);

/* 0 when path, resolved (".." and symlinks), lies inside the directory ctx;
 * MF_EINVAL naming both otherwise (as for a relative source that leaves the
 * build context), MF_ENOTFOUND when either does not resolve. */
int fetch_confined(const char *path, const char *ctx, struct mf_err *err);

/* Brings a FILE or URL source into the store and verifies its pin. A partial
 * download is kept in the store's tmp/ and resumed by the next call. A digest
 * mismatch stores nothing and names both digests (MF_EINTEGRITY). DIR and
 * NAME sources are MF_EINVAL. */
int fetch_run(struct store *s, const struct fetch_source *src, const struct fetch_opts *o,
              struct fetch_result *r, struct mf_err *err);

#endif
