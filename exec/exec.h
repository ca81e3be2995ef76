/*
 * exec.h: the build executor: runs a plan's nodes in parallel, cached.
 *
 * Node states (one struct exec_node per plan node, guarded by the executor's
 * mutex):
 *
 *   PENDING --all inputs DONE|CACHED [pick_ready]----------> RUNNING
 *   PENDING --an input FAILED|CANCELLED [cancel_after]-----> CANCELLED
 *   RUNNING --cache record found, blob present [run_node]--> CACHED
 *   RUNNING --op succeeded, record written [run_node]------> DONE
 *   RUNNING --op or store failed [run_node]----------------> FAILED
 *
 * (READY is implicit: a PENDING node whose inputs are all DONE or CACHED is
 * picked by the next free worker.) DONE, CACHED, FAILED and CANCELLED are
 * final. A failure cancels only what depends on it; independent nodes run to
 * the end so their results are cached for the next build.
 *
 * Each node's cache key is plan_node_key(op, args, input keys and digests,
 * content); a local file's content digest comes from the store's stat cache,
 * so an unchanged multi-GB file is not read. A record (cache/<key>.json) is
 * written only after the node's blobs are in the store, and the image is
 * tagged by the caller only after every node succeeded, so a failed or killed
 * build leaves complete blobs and records (reused next time), never a partial
 * blob or a new tag.
 */
#ifndef MFC_EXEC_H
#define MFC_EXEC_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "common/err.h"
#include "fetch/fetch.h"
#include "compiler/plan.h"
#include "common/progress.h"
#include "store/store.h"

#define EXEC_DEFAULT_JOBS 4 /* fetches and copies are I/O bound; 4 keeps a disk and a link busy */
#define EXEC_MAX_JOBS 64

enum exec_state {
    EXEC_PENDING,
    EXEC_RUNNING,
    EXEC_DONE,
    EXEC_CACHED,
    EXEC_FAILED,
    EXEC_CANCELLED,
};

/* One `mfc build --secret id=ID,src=FILE`. */
struct exec_secret {
    const char *id;  /* borrowed */
    const char *src; /* borrowed: the host file, bound read-only; never read by mfc */
};

struct exec_opts {
    const char *store_root;      /* borrowed: each worker opens its own handle on it */
    const struct fetch_opts *fo; /* borrowed: for source nodes (progress taken from here) */
    struct progress *progress;   /* borrowed, may be NULL */
    int jobs;                    /* worker threads; 0: EXEC_DEFAULT_JOBS */
    int no_cache;                /* nonzero: ignore cache records (still write them) */
    const char *runtime;         /* borrowed: the mfc-serve binary for the runtime layer;
                                    NULL: the image gets no runtime layer */
    const char *model_name;      /* borrowed: the name the image serves (MFC_MODEL_NAME in
                                    its config: the first -t), or NULL: none recorded */
    /* RUN steps (docs/run.md): */
    const char *bwrap;           /* borrowed: bubblewrap binary; NULL: "bwrap" in $PATH */
    const char *self_exe;        /* borrowed: mfc, bound at /opt/mfc/bin/mfc; NULL: none */
    const struct exec_secret *secrets; /* borrowed: --secret entries */
    size_t n_secrets;
    int64_t run_timeout_ms;      /* a RUN's timeout when it has no --timeout; 0: none */
    uint64_t run_memory;         /* RLIMIT_AS of each RUN in bytes; 0: none */
    unsigned allow;              /* EXEC_ALLOW_* entitlements --allow granted (exec_allow.h) */
};

/* What happened to one plan node. */
struct exec_node {
    enum exec_state state;          /* final once exec_run returns */
    char key[STORE_DIGEST_BUF];     /* cache key, "" if never computed */
    char digest[STORE_DIGEST_BUF];  /* the node's output blob, "" if none */
    uint64_t size;                  /* bytes of that blob */
    json_t *result;                 /* owned: the cache record (object), or NULL */
    double secs;                    /* wall time of the node */
    struct mf_err err;              /* FAILED: the error, naming the Modelfile line */
};

/* One build's outcome, parallel to plan->nodes. */
struct exec_build {
    struct exec_node *nodes; /* owned: plan->n_nodes entries */
    size_t n_nodes;          /* entries in nodes */
    size_t n_done, n_cached, n_failed, n_cancelled; /* by final state */
};

/* Runs every node of p. Returns 0 when all are DONE or CACHED; otherwise
 * the first failed node's code, with err holding its message
 * ("Modelfile:3: FROM ./x.gguf: ..."), and b telling what became of each
 * node. b must be freed with exec_build_fini in both cases. */
int exec_run(const struct plan *p, const struct exec_opts *o, struct exec_build *b,
             struct mf_err *err);
/* Releases b. Accepts a zeroed b. */
void exec_build_fini(struct exec_build *b);

/* "PENDING", "DONE", ... Never NULL. */
const char *exec_state_name(enum exec_state s);

#endif
