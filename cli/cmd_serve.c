/*
 * cmd_serve.c: `mfc serve` and `mfc run` (docs/cli.md).
 *
 * serve: resolves IMAGE|FILE.gguf (run_image.c: an image's weights are read
 * in place from the store) and replaces itself with mfc-serve.
 * run: starts mfc-serve on a free 127.0.0.1 port with a random API key,
 * waits for /health, then answers a prompt (argument and/or stdin) or opens
 * an interactive chat (run_chat.c), and stops the server on the way out.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <curl/curl.h>

#include "common/buf.h"
#include "common/num.h"
#include "cli/cli.h"
#include "cli/run.h"
#include "cli/run_chat.h"
#include "store/store.h"

#define STDIN_MAX (16u << 20)  /* a piped prompt */
#define READY_TIMEOUT_MS 120000 /* loading a big model from a cold disk */

static void serve_usage(FILE *f)
{
    fputs("Usage: mfc serve [OPTIONS] IMAGE|FILE.gguf\n\n"
          "Run mfc-serve (OpenAI and Ollama APIs, docs/api.md) on a model: a GGUF file, or an\n"
          "image in the store, whose weights are mapped from the store in place.\n\n"
          "  -p, --port PORT      port (default $MFC_PORT, else 8080)\n"
          "      --host HOST      address to listen on (default $MFC_HOST, else 127.0.0.1)\n"
          "      --api-key KEY    require 'Authorization: Bearer KEY' (default $MFC_API_KEY)\n\n"
          "Environment: MFC_HOME (the store), MFC_SERVE (the server binary; default\n"
          "mfc-serve next to mfc), and mfc-serve's own MFC_* settings.\n",
          f);
}

static void run_usage(FILE *f)
{
    fputs("Usage: mfc run [OPTIONS] IMAGE|FILE.gguf [PROMPT...]\n\n"
          "Start mfc-serve privately on 127.0.0.1 and chat with the model, like `ollama run`.\n"
          "With PROMPT, or with stdin not a terminal, answer once (stdin first, then PROMPT)\n"
          "and exit; otherwise chat interactively (/? lists the commands).\n\n"
          "  -i, --interactive    chat even when stdin is not a terminal\n"
          "      --adapter NAME   talk to the image's adapter NAME (the request's model)\n"
          "      --system TEXT    the system message\n"
          "      --verbose        token counts and rate after each reply (stderr)\n"
          "      --timeout SEC    how long to wait for the server to load (default 120)\n\n"
          "Environment: MFC_HOME (the store), MFC_SERVE (the server binary).\n",
          f);
}

static int parse_port(const char *s, int *port)
{
    int64_t v;
    if (mf_num_parse_i64(s, &v) != 0 || v < 1 || v > 65535)
        return -1;
    *port = (int)v;
    return 0;
}

/* The model and the server's argv for either command. An image is served
 * under its name; a GGUF under mfc-serve's default (the file's stem). */
static int prepare(struct mfc_ctx *ctx, const char *arg, const char *host, int port,
                   const char *api_key, struct run_model *m, char ***argv, struct mf_err *err)
{
    char *root = NULL, *bin = NULL;
    int rc = run_find_server(&bin, err);
    if (!rc)
        rc = store_default_root(&root, err);
    if (!rc) {
        rc = run_model_resolve(root, arg, m, err);
        /* a registry reference not in the store: pulled first, as docker run does */
        if (rc == MF_ENOTFOUND && mfc_pull_missing(ctx, root, arg, err) == 0)
            rc = run_model_resolve(root, arg, m, err);
    }
    if (!rc) {
        int image = m->weights.offset || m->weights.size;
        rc = run_model_materialize(m, err); /* every layer stays in place */
        if (!rc)
            rc = run_server_argv(m, bin, image ? (m->served ? m->served : arg) : NULL, host,
                                 port, api_key, argv, err);
        if (rc)
            run_model_free(m);
    }
    free(root);
    free(bin);
    return rc;
}

int mfc_cmd_serve(int argc, char **argv, struct mfc_ctx *ctx)
{
    static const struct option opts[] = {{"help", no_argument, NULL, 'h'},
                                         {"port", required_argument, NULL, 'p'},
                                         {"host", required_argument, NULL, 'H'},
                                         {"api-key", required_argument, NULL, 'k'},
                                         {NULL, 0, NULL, 0}};
    const char *host = NULL, *key = NULL;
    int port = 0, c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "hp:", opts, NULL)) != -1) {
        switch (c) {
        case 'h':
            serve_usage(ctx->out);
            return 0;
        case 'p':
            if (parse_port(optarg, &port) != 0)
                return mfc_usage_error(ctx, "serve", "--port %s: not a port (1-65535)", optarg);
            break;
        case 'H':
            host = optarg;
            break;
        case 'k':
            key = optarg;
            break;
        default:
            return mfc_usage_error(ctx, "serve", "unknown option '%s'", argv[optind - 1]);
        }
    }
    if (argc - optind != 1)
        return mfc_usage_error(ctx, "serve", "expected one IMAGE or FILE.gguf");
    /* mfc-serve alone listens on all addresses (its home is a container);
     * on a workstation mfc serve stays on loopback unless asked, as ollama */
    if (!host && !(host = getenv("MFC_HOST")))
        host = "127.0.0.1";
    struct mf_err err = {0};
    struct run_model m;
    char **sargv = NULL;
    int rc = prepare(ctx, argv[optind], host, port, key, &m, &sargv, &err);
    if (rc)
        return mfc_report(ctx, &err);
    fflush(NULL);
    execv(sargv[0], sargv);
    mf_err_sys(&err, MF_EIO, errno, "cannot execute %s", sargv[0]);
    run_argv_free(sargv);
    run_model_free(&m);
    return mfc_report(ctx, &err);
}

/* ---- mfc run ---------------------------------------------------------------------- */

static volatile int interrupted;

static void on_sigint(int sig)
{
    (void)sig;
    interrupted = 1;
}

/* A random API key, so other local users cannot use the private server. */
static int random_key(char *out, size_t cap, struct mf_err *err)
{
    unsigned char r[16];
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    ssize_t n = fd >= 0 ? read(fd, r, sizeof r) : -1;
    if (fd >= 0)
        close(fd);
    if (n != (ssize_t)sizeof r || cap < 2 * sizeof r + 1)
        return mf_err_set(err, MF_EIO, "cannot read /dev/urandom");
    for (size_t i = 0; i < sizeof r; i++)
        snprintf(out + 2 * i, 3, "%02x", r[i]);
    return 0;
}

/* The model name the server lists first (/api/tags), for requests. */
static char *served_name(const struct run_client *cl, const char *fallback)
{
    struct mf_err e = {0};
    json_t *tags = NULL;
    char *name = NULL;
    if (run_client_json(cl, "/api/tags", NULL, &tags, &e) == 0) {
        const json_t *m0 = json_array_get(json_object_get(tags, "models"), 0);
        const json_t *n = json_object_get(m0, "name");
        if (!json_is_string(n))
            n = json_object_get(m0, "model");
        if (json_is_string(n))
            name = strdup(json_string_value(n));
    }
    json_decref(tags);
    return name ? name : strdup(fallback);
}

/* stdin (when piped) and the PROMPT words, joined as ollama joins them. */
static int read_prompt(int argc, char **argv, int use_stdin, char **out, struct mf_err *err)
{
    struct mf_buf b;
    mf_buf_init(&b, STDIN_MAX);
    int rc = 0;
    if (use_stdin) {
        char chunk[65536];
        size_t n;
        while (!rc && (n = fread(chunk, 1, sizeof chunk, stdin)) > 0)
            rc = mf_buf_append(&b, chunk, n, err);
        if (!rc && ferror(stdin))
            rc = mf_err_sys(err, MF_EIO, errno, "reading the prompt from stdin");
        while (!rc && b.len > 0 && (b.data[b.len - 1] == '\n' || b.data[b.len - 1] == '\r'))
            b.data[--b.len] = 0;
    }
    for (int i = 0; !rc && i < argc; i++) {
        if (b.len)
            rc = mf_buf_putc(&b, ' ', err);
        if (!rc)
            rc = mf_buf_puts(&b, argv[i], err);
    }
    if (rc) {
        mf_buf_free(&b);
        return rc;
    }
    *out = mf_buf_take(&b);
    return *out ? 0 : mf_err_set(err, MF_ENOMEM, "out of memory");
}

int mfc_cmd_run(int argc, char **argv, struct mfc_ctx *ctx)
{
    static const struct option opts[] = {{"help", no_argument, NULL, 'h'},
                                         {"interactive", no_argument, NULL, 'i'},
                                         {"system", required_argument, NULL, 's'},
                                         {"adapter", required_argument, NULL, 'a'},
                                         {"verbose", no_argument, NULL, 'V'},
                                         {"timeout", required_argument, NULL, 't'},
                                         {NULL, 0, NULL, 0}};
    const char *system = NULL, *adapter = NULL;
    int interactive = 0, verbose = 0, c;
    long timeout_ms = READY_TIMEOUT_MS;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "hi", opts, NULL)) != -1) {
        switch (c) {
        case 'h':
            run_usage(ctx->out);
            return 0;
        case 'i':
            interactive = 1;
            break;
        case 's':
            system = optarg;
            break;
        case 'a':
            adapter = optarg;
            break;
        case 'V':
            verbose = 1;
            break;
        case 't': {
            int64_t v;
            if (mf_num_parse_i64(optarg, &v) != 0 || v < 1 || v > 3600)
                return mfc_usage_error(ctx, "run", "--timeout %s: not a number of seconds",
                                       optarg);
            timeout_ms = (long)v * 1000;
            break;
        }
        default:
            return mfc_usage_error(ctx, "run", "unknown option '%s'", argv[optind - 1]);
        }
    }
    if (argc - optind < 1)
        return mfc_usage_error(ctx, "run", "expected an IMAGE or FILE.gguf");
    const char *model_arg = argv[optind];
    char **words = argv + optind + 1;
    int n_words = argc - optind - 1;
    int stdin_tty = isatty(0);
    if (interactive && n_words)
        return mfc_usage_error(ctx, "run", "--interactive takes no PROMPT");
    int once = !interactive && (n_words > 0 || !stdin_tty);

    struct mf_err err = {0};
    char *prompt = NULL;
    /* read a piped prompt before anything starts, as ollama does */
    if (once && read_prompt(n_words, words, !stdin_tty, &prompt, &err) != 0)
        return mfc_report(ctx, &err);

    char key[40];
    int port = 0, rc = run_free_port(&port, &err);
    if (!rc)
        rc = random_key(key, sizeof key, &err);
    struct run_model m;
    char **sargv = NULL;
    /* the key goes through the environment: argv is world-readable in ps */
    if (!rc && setenv("MFC_API_KEY", key, 1) != 0)
        rc = mf_err_sys(&err, MF_EIO, errno, "setenv");
    if (!rc)
        rc = prepare(ctx, model_arg, "127.0.0.1", port, NULL, &m, &sargv, &err);
    if (rc) {
        free(prompt);
        return mfc_report(ctx, &err);
    }
    curl_global_init(CURL_GLOBAL_DEFAULT);
    struct run_server srv = {.pid = -1, .log_fd = -1};
    struct run_client cl = {.api_key = key, .cancel = &interrupted};
    snprintf(cl.base_url, sizeof cl.base_url, "http://127.0.0.1:%d", port);
    /* SIGTERM keeps its default: the server follows through PR_SET_PDEATHSIG */
    struct sigaction sa = {.sa_handler = on_sigint}, old_int;
    sigemptyset(&sa.sa_mask); /* no SA_RESTART: Ctrl-C interrupts a read at the prompt */
    sigaction(SIGINT, &sa, &old_int);
    rc = run_server_start(sargv, &srv, &err);
    if (!rc) {
        rc = run_server_wait_ready(&srv, cl.base_url, timeout_ms, &err);
        if (!rc && interrupted)
            rc = mf_err_set(&err, MF_EBUSY, "interrupted");
    }
    char *name = rc ? NULL : adapter ? strdup(adapter) : served_name(&cl, model_arg);
    struct run_chat ch;
    if (!rc && !name)
        rc = mf_err_set(&err, MF_ENOMEM, "out of memory");
    if (!rc)
        rc = run_chat_init(&ch, &cl, name, stdin, ctx->out, ctx->err, &err);
    if (!rc) {
        ch.cancel = &interrupted;
        ch.verbose = verbose;
        if (system && !(ch.system = strdup(system)))
            rc = mf_err_set(&err, MF_ENOMEM, "out of memory");
        if (!rc)
            rc = once ? run_chat_once(&ch, prompt, &err) : run_chat_loop(&ch, &err);
        run_chat_free(&ch);
    }
    run_server_stop(&srv);
    sigaction(SIGINT, &old_int, NULL);
    curl_global_cleanup();
    free(name);
    free(prompt);
    run_argv_free(sargv);
    run_model_free(&m);
    return rc ? mfc_report(ctx, &err) : 0;
}
