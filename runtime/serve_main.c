/*
 * serve_main.c: main() of mfc-serve. Reads the settings (flags, MFC_*,
 * model.yaml), starts listening at once (so /health answers 503 while the
 * model loads), loads the model, then waits for SIGTERM or SIGINT and
 * drains: in-flight requests finish, new connections are refused, exit 0.
 *
 * Signals are blocked in every thread (the mask is set before any thread
 * starts) and taken with sigwait here, so no handler runs async code.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/serve.h"

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
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);

    if (serve_start(&s, &err)) {
        mf_log_error(&s.log, "%s", err.msg);
        serve_config_free(&s.cfg);
        return 1;
    }
    if (serve_load(&s, &err)) {
        mf_log_error(&s.log, "%s", err.msg);
        serve_stop(&s);
        serve_unload(&s);
        serve_config_free(&s.cfg);
        return 1;
    }
    s.started = (int64_t)time(NULL);
    atomic_store(&s.ready, 1);
    mf_log_info(&s.log, "ready: model %s on port %d", s.cfg.model_name, s.cfg.port);
    sigwait(&set, &sig);
    mf_log_info(&s.log, "%s: draining %d requests", sig == SIGINT ? "SIGINT" : "SIGTERM",
                atomic_load(&s.active));
    serve_stop(&s);
    serve_unload(&s);
    serve_config_free(&s.cfg);
    mf_log_info(&s.log, "stopped");
    return 0;
}
