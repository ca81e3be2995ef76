/*
 * exec.c: the build executor's scheduler: worker threads, cache keys and
 * records, cancellation and progress (state machine in exec.h).
 *
 * Owns the worker threads (joined before exec_run returns), one store handle
 * per worker (a store handle is not thread-safe: its index lock is per
 * handle), and the exec_build results. Borrows the plan, the options and the
 * progress output. What each op does lives in exec_ops.c.
 *
 * Invariants: every field of b->nodes[i] is written only by the worker that
 * runs node i, before its final state is published under mu; a node is
 * picked only when all its inputs are final and successful, so reading an
 * input's digest without the lock is safe. Plan ids are topological, so one
 * forward scan from a failed node cancels all that depend on it.
 */
#include "exec/exec.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "exec/exec_int.h"

struct exec_ctx {
    const struct plan *p;     /* borrowed */
    const struct exec_opts *o; /* borrowed */
    struct exec_build *b;     /* borrowed: results, guarded by mu for state */
    pthread_mutex_t mu;       /* guards every node's state and n_open */
    pthread_cond_t cv;        /* signalled when a node becomes final */
    size_t n_open;            /* nodes not yet final */
};

struct exec_worker {
    struct exec_ctx *x; /* borrowed */
    struct store *s;    /* owned: this worker's store handle */
    pthread_t tid;      /* the thread */
};

const char *exec_state_name(enum exec_state s)
{
    static const char *const names[] = {"PENDING", "RUNNING", "DONE",
                                        "CACHED",  "FAILED",  "CANCELLED"};
    return (unsigned)s < sizeof names / sizeof names[0] ? names[s] : "?";
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ---- one node -------------------------------------------------------------------- */

/* A record is a hit when it names a digest whose blob is still present (a
 * pruned blob makes the node run again). */
static int cache_lookup(struct store *s, struct exec_node *r)
{
    struct mf_err ignored;
    json_t *rec = NULL, *d, *sz;
    if (store_cache_get(s, r->key, &rec, &ignored) != 0)
        return 0; /* absent or corrupt: run the op, which rewrites the record */
    d = json_object_get(rec, "digest");
    sz = json_object_get(rec, "size");
    if (!json_is_string(d) || !json_is_integer(sz) || !store_blob_exists(s, json_string_value(d))) {
        json_decref(rec);
        return 0;
    }
    snprintf(r->digest, sizeof r->digest, "%s", json_string_value(d));
    r->size = (uint64_t)json_integer_value(sz);
    r->result = rec;
    return 1;
}

static int node_key(const struct exec_job *j, const char *content, struct exec_node *r,
                    struct mf_err *err)
{
    const struct plan_node *n = j->node;
    const char **keys = calloc(n->n_inputs + 1, sizeof *keys);
    const char **digests = calloc(n->n_inputs + 1, sizeof *digests);
    int rc = keys && digests ? 0 : mf_err_set(err, MF_ENOMEM, "out of memory");
    for (size_t i = 0; !rc && i < n->n_inputs; i++) {
        keys[i] = j->b->nodes[n->inputs[i]].key;
        digests[i] = j->b->nodes[n->inputs[i]].digest;
    }
    if (!rc)
        rc = plan_node_key(n, keys, digests, content, r->key, err);
    free(keys);
    free(digests);
    return rc;
}

/* Key, cache lookup, op, record: returns the node's final state. */
static enum exec_state run_cached(const struct exec_job *j, struct exec_node *r)
{
    char content[STORE_DIGEST_BUF] = "";
    int cacheable = 1, cached = 0;
    int rc = exec_op_content(j, content, &cacheable, &r->err);
    if (!rc)
        rc = node_key(j, content, r, &r->err);
    if (rc)
        return EXEC_FAILED;
    if (cacheable && !j->o->no_cache && cache_lookup(j->s, r))
        return EXEC_CACHED;
    rc = exec_op_run(j, r, &cached, &r->err);
    if (!rc)
        rc = store_cache_put(j->s, r->key, r->result, &r->err);
    if (rc)
        return EXEC_FAILED;
    return cached ? EXEC_CACHED : EXEC_DONE;
}

static enum exec_state run_node(struct exec_ctx *x, struct store *s, size_t id)
{
    const struct plan_node *n = &x->p->nodes[id];
    struct exec_node *r = &x->b->nodes[id];
    struct exec_job j = {.plan = x->p, .node = n, .o = x->o, .b = x->b, .s = s};
    double t0 = now_s();
    int pid = progress_step_begin(x->o->progress, (int)id + 1, plan_op_name(n->op), n->name);
    enum exec_state st = run_cached(&j, r);
    r->secs = now_s() - t0;
    if (st == EXEC_FAILED) {
        if (n->line)
            mf_err_prefix(&r->err, "%s:%d: %s", x->p->modelfile, n->line, n->instr);
        else
            mf_err_prefix(&r->err, "%s: %s", x->p->modelfile, n->instr);
        progress_fail(x->o->progress, pid, r->err.msg);
    } else {
        progress_end(x->o->progress, pid, st == EXEC_CACHED ? "CACHED" : "DONE");
    }
    return st;
}

/* ---- scheduling ------------------------------------------------------------------ */

static int input_state_is(const struct exec_ctx *x, const struct plan_node *n, int ok)
{
    for (size_t i = 0; i < n->n_inputs; i++) {
        enum exec_state s = x->b->nodes[n->inputs[i]].state;
        int good = s == EXEC_DONE || s == EXEC_CACHED;
        int bad = s == EXEC_FAILED || s == EXEC_CANCELLED;
        if (ok ? !good : bad)
            return !ok;
    }
    return ok;
}

/* Under mu: a PENDING node whose inputs all succeeded becomes RUNNING. */
static int pick_ready(struct exec_ctx *x, size_t *id)
{
    for (size_t i = 0; i < x->p->n_nodes; i++) {
        if (x->b->nodes[i].state == EXEC_PENDING && input_state_is(x, &x->p->nodes[i], 1)) {
            x->b->nodes[i].state = EXEC_RUNNING;
            *id = i;
            return 1;
        }
    }
    return 0;
}

/* Under mu: everything downstream of a failure is CANCELLED (ids are topological). */
static void cancel_after(struct exec_ctx *x, size_t failed)
{
    for (size_t i = failed + 1; i < x->p->n_nodes; i++) {
        const struct plan_node *n = &x->p->nodes[i];
        if (x->b->nodes[i].state != EXEC_PENDING || !input_state_is(x, n, 0))
            continue;
        x->b->nodes[i].state = EXEC_CANCELLED;
        x->n_open--;
        int pid = progress_step_begin(x->o->progress, (int)i + 1, plan_op_name(n->op), n->name);
        progress_end(x->o->progress, pid, "CANCELED");
    }
}

static void *worker_main(void *arg)
{
    struct exec_worker *w = arg;
    struct exec_ctx *x = w->x;
    size_t id;
    pthread_mutex_lock(&x->mu);
    for (;;) {
        while (x->n_open && !pick_ready(x, &id))
            pthread_cond_wait(&x->cv, &x->mu);
        if (!x->n_open)
            break;
        pthread_mutex_unlock(&x->mu);
        enum exec_state st = run_node(x, w->s, id);
        pthread_mutex_lock(&x->mu);
        x->b->nodes[id].state = st;
        x->n_open--;
        if (st == EXEC_FAILED)
            cancel_after(x, id);
        pthread_cond_broadcast(&x->cv);
    }
    pthread_mutex_unlock(&x->mu);
    return NULL;
}

/* ---- API --------------------------------------------------------------------------- */

static void tally(const struct plan *p, struct exec_build *b, struct mf_err *err)
{
    int first = 1;
    for (size_t i = 0; i < p->n_nodes; i++) {
        struct exec_node *r = &b->nodes[i];
        b->n_done += r->state == EXEC_DONE;
        b->n_cached += r->state == EXEC_CACHED;
        b->n_cancelled += r->state == EXEC_CANCELLED;
        if (r->state == EXEC_FAILED) {
            b->n_failed++;
            if (first && err)
                *err = r->err;
            first = 0;
        }
    }
}

static int start_workers(struct exec_ctx *x, struct exec_worker *w, int n, int *started,
                         struct mf_err *err)
{
    for (int i = 0; i < n; i++) {
        w[i].x = x;
        int rc = store_open(&w[i].s, x->o->store_root, err);
        if (rc)
            return rc;
        /* a killed build's temporary files (its owner lock is free): reclaimed now,
         * not only by mfc prune */
        if (i == 0)
            store_tmp_reclaim(w[i].s, NULL, NULL, err);
        if (pthread_create(&w[i].tid, NULL, worker_main, &w[i]) != 0) {
            store_close(w[i].s);
            w[i].s = NULL;
            return mf_err_set(err, MF_ENOMEM, "cannot start a build worker thread");
        }
        (*started)++;
    }
    return 0;
}

int exec_run(const struct plan *p, const struct exec_opts *o, struct exec_build *b,
             struct mf_err *err)
{
    struct exec_ctx x = {.p = p, .o = o, .b = b, .n_open = p->n_nodes};
    int n = o->jobs > 0 ? (o->jobs < EXEC_MAX_JOBS ? o->jobs : EXEC_MAX_JOBS) : EXEC_DEFAULT_JOBS;
    int started = 0;
    memset(b, 0, sizeof *b);
    b->nodes = calloc(p->n_nodes, sizeof *b->nodes);
    struct exec_worker *w = calloc((size_t)n, sizeof *w);
    if (!b->nodes || !w) {
        free(w);
        return mf_err_set(err, MF_ENOMEM, "out of memory");
    }
    b->n_nodes = p->n_nodes;
    pthread_mutex_init(&x.mu, NULL);
    pthread_cond_init(&x.cv, NULL);
    /* workers that did start finish the whole build even if a later one failed to */
    int rc = start_workers(&x, w, n, &started, err);
    for (int i = 0; i < started; i++) {
        pthread_join(w[i].tid, NULL);
        store_close(w[i].s);
    }
    pthread_cond_destroy(&x.cv);
    pthread_mutex_destroy(&x.mu);
    free(w);
    if (rc)
        return rc;
    tally(p, b, err);
    return b->n_failed ? err->code : 0;
}

void exec_build_fini(struct exec_build *b)
{
    for (size_t i = 0; b->nodes && i < b->n_nodes; i++)
        json_decref(b->nodes[i].result);
    free(b->nodes);
    memset(b, 0, sizeof *b);
}
