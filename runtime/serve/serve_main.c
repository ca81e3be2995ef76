/*
 * serve_main.c: main() of mfc-serve. Reads the settings (flags, MFC_*,
 * model.yaml), starts listening at once (so /health answers 503 while the
 * model loads), loads the model, then waits for SIGTERM or SIGINT and
 * drains: in-flight requests finish, new connections are refused, exit 0.
 *
 * Signals are blocked in every thread (the mask is set before any thread
 * starts) and taken with sigwait here, so no handler runs async code; the
 * model loads on a thread of its own, which wakes main with SIGUSR1.
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "runtime/serve/serve.h"

struct loader {
    struct serve *s;
    pthread_t main;   /* woken with SIGUSR1 when loading ends */
    int rc;           /* serve_load's result */
    struct mf_err err;
};

/* Loads the model off the main thread, so SIGTERM during a long load still
 * ends the process at once. */
static void *load_thread(void *arg)
{
    struct loader *l = arg;
    l->rc = serve_load(l->s, &l->err);
    if (!l->rc) {
        l->s->started = (int64_t)time(NULL);
        atomic_store(&l->s->ready, 1);
        mf_log_info(&l->s->log, "ready: model %s on port %d", l->s->cfg.model_name,
                    l->s->cfg.port);
    }
    pthread_kill(l->main, SIGUSR1);
    return NULL;
}

int main(int argc, char **argv)
{
    static struct serve s; /* large; lives for the process */
    struct mf_err err;
    sigset_t set;
    int help = 0, sig = 0;

    serve_config_init(&s.cfg);
    mf_log_init(&s.log, stderr, MF_LOG_INFO, "mfc-serve");
    if (serve_config_parse(&s.cfg, argc, argv, NULL, &help, &err)) {
        fprintf(stderr, "mfc-serve: %s\n%s", err.msg, err.code == MF_EUSAGE ? serve_usage : "");
        serve_config_free(&s.cfg);
        return err.code == MF_EUSAGE ? 2 : 1;
    }
    if (help) {
        fputs(serve_usage, stdout);
        serve_config_free(&s.cfg);
        return 0;
    }
    s.log.level = s.cfg.log_level;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);

    if (serve_start(&s, &err)) {
        mf_log_error(&s.log, "%s", err.msg);
        serve_config_free(&s.cfg);
        return 1;
    }
    static struct loader l;
    pthread_t th;
    l.s = &s;
    l.main = pthread_self();
    if (pthread_create(&th, NULL, load_thread, &l) != 0) {
        mf_log_error(&s.log, "cannot start the loading thread");
        return 1;
    }
    sigwait(&set, &sig);
    if (sig != SIGUSR1) { /* stopped while loading: nothing in flight, leave now */
        mf_log_info(&s.log, "%s while loading: exiting", sig == SIGINT ? "SIGINT" : "SIGTERM");
        serve_stop(&s);
        fflush(stderr);
        _exit(0);
    }
    pthread_join(th, NULL);
    if (l.rc) {
        mf_log_error(&s.log, "%s", l.err.msg);
        serve_stop(&s);
        serve_unload(&s);
        serve_config_free(&s.cfg);
        return 1;
    }
    do
        sigwait(&set, &sig);
    while (sig == SIGUSR1);
    mf_log_info(&s.log, "%s: draining %d requests", sig == SIGINT ? "SIGINT" : "SIGTERM",
                atomic_load(&s.active));
    serve_stop(&s);
    serve_unload(&s);
    serve_config_free(&s.cfg);
    mf_log_info(&s.log, "stopped");
    return 0;
}
