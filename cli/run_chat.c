/*
 * run_chat.c: the conversation side of `mfc run`, after `ollama run`: one
 * prompt answered and done, or an interactive loop with history kept across
 * turns, `/set parameter NAME VALUE`, `/set system TEXT`, `/show`, `/clear`,
 * `/bye`, `"""` multi-line input and streamed replies (run_client.c).
 * Ctrl-C during a reply stops it (the partial reply is dropped from the
 * history); at the prompt it says how to leave.
 */
#include "cli/run_chat.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/num.h"

#define INPUT_MAX (16u << 20) /* one message typed or piped in */

int run_chat_init(struct run_chat *ch, const struct run_client *cl, const char *model, FILE *in,
                  FILE *out, FILE *diag, struct mf_err *err)
{
    memset(ch, 0, sizeof *ch);
    ch->cl = cl, ch->model = model, ch->in = in, ch->out = out, ch->diag = diag;
    ch->messages = json_array();
    ch->options = json_object();
    if (!ch->messages || !ch->options) {
        run_chat_free(ch);
        return mf_err_set(err, MF_ENOMEM, "out of memory");
    }
    return 0;
}

void run_chat_free(struct run_chat *ch)
{
    json_decref(ch->messages);
    json_decref(ch->options);
    free(ch->system);
    ch->messages = ch->options = NULL;
    ch->system = NULL;
}

static void emit(void *arg, const char *text, size_t n)
{
    struct run_chat *ch = arg;
    fwrite(text, 1, n, ch->out);
    fflush(ch->out);
    ch->emitted_nl = text[n - 1] == '\n';
}

/* Sends the history plus `prompt` and streams the reply; on success both
 * stay in the history. */
static int turn(struct run_chat *ch, const char *prompt, struct mf_err *err)
{
    json_t *msgs = json_array();
    if (ch->system)
        json_array_append_new(msgs,
                              json_pack("{s:s,s:s}", "role", "system", "content", ch->system));
    json_array_extend(msgs, ch->messages);
    json_t *user = json_pack("{s:s,s:s}", "role", "user", "content", prompt);
    json_array_append(msgs, user);
    json_t *req = json_pack("{s:s,s:o,s:b}", "model", ch->model, "messages", msgs, "stream", 1);
    if (req && json_object_size(ch->options))
        json_object_set(req, "options", ch->options);
    if (!req || !user) {
        json_decref(req);
        json_decref(user);
        return mf_err_set(err, MF_ENOMEM, "out of memory");
    }
    char *reply = NULL;
    struct run_stats st = {0};
    ch->emitted_nl = 1;
    int rc = run_chat_stream(ch->cl, req, emit, ch, &reply, &st, err);
    json_decref(req);
    if (reply && reply[0] && !ch->emitted_nl)
        fputc('\n', ch->out);
    fflush(ch->out);
    if (!rc) {
        json_array_append(ch->messages, user);
        json_array_append_new(ch->messages,
                              json_pack("{s:s,s:s}", "role", "assistant", "content", reply));
        if (ch->verbose && st.eval_duration > 0)
            fprintf(ch->diag,
                    "prompt eval count: %lld token(s)\neval count: %lld token(s)\n"
                    "eval rate: %.2f tokens/s\n",
                    (long long)st.prompt_eval_count, (long long)st.eval_count,
                    (double)st.eval_count * 1e9 / (double)st.eval_duration);
    }
    json_decref(user);
    free(reply);
    return rc;
}

int run_chat_once(struct run_chat *ch, const char *prompt, struct mf_err *err)
{
    return turn(ch, prompt, err);
}

/* ---- /set parameter -------------------------------------------------------------- */

enum ptype { P_INT, P_FLOAT, P_LIST };
static const struct {
    const char *name;
    enum ptype type;
} params[] = {
    {"temperature", P_FLOAT},
    {"top_p", P_FLOAT},
    {"min_p", P_FLOAT},
    {"top_k", P_INT},
    {"seed", P_INT},
    {"num_predict", P_INT},
    {"num_ctx", P_INT},
    {"repeat_last_n", P_INT},
    {"repeat_penalty", P_FLOAT},
    {"presence_penalty", P_FLOAT},
    {"frequency_penalty", P_FLOAT},
    {"stop", P_LIST},
};

/* "NAME VALUE..." -> options[NAME]; a message to the user on a bad value. */
static void set_parameter(struct run_chat *ch, char *args)
{
    char *name = args + strspn(args, " \t");
    char *sp = name + strcspn(name, " \t");
    char *value = *sp ? sp + 1 + strspn(sp + 1, " \t") : sp;
    *sp = 0;
    if (!*name || !*value) {
        fprintf(ch->out, "Usage:\n  /set parameter <name> <value>\n");
        return;
    }
    for (size_t i = 0; i < sizeof params / sizeof params[0]; i++) {
        if (strcmp(params[i].name, name) != 0)
            continue;
        json_t *v = NULL;
        if (params[i].type == P_INT) {
            int64_t x;
            if (mf_num_parse_i64(value, &x) == 0)
                v = json_integer((json_int_t)x);
        } else if (params[i].type == P_FLOAT) {
            double x;
            if (mf_num_parse_f64(value, &x) == 0)
                v = json_real(x);
        } else { /* stop: each word is one stop sequence, as in ollama */
            v = json_array();
            for (char *w = value; *w;) {
                size_t k = strcspn(w, " \t");
                json_array_append_new(v, json_stringn(w, k));
                w += k;
                w += strspn(w, " \t");
            }
        }
        if (!v) {
            fprintf(ch->out, "Couldn't set parameter: '%s' is not a valid value for %s\n", value,
                    name);
            return;
        }
        json_object_set_new(ch->options, name, v);
        fprintf(ch->out, "Set parameter '%s' to '%s'\n", name, value);
        return;
    }
    fprintf(ch->out, "Couldn't set parameter: unknown parameter '%s'\n", name);
}

/* The model's own /api/show answer (its model.yaml's system, parameters,
 * template), or NULL with the error printed. */
static json_t *model_show(struct run_chat *ch)
{
    struct mf_err e = {0};
    json_t *req = json_pack("{s:s}", "model", ch->model), *res = NULL;
    if (run_client_json(ch->cl, "/api/show", req, &res, &e) != 0) {
        fprintf(ch->out, "error: %s\n", e.msg);
        res = NULL;
    }
    json_decref(req);
    return res;
}

/* /show parameters as ollama run shows them: the model's, then this
 * session's /set parameter values. */
static void show_parameters(struct run_chat *ch)
{
    json_t *res = model_show(ch);
    const char *mp = json_string_value(json_object_get(res, "parameters"));
    const int model_has = mp && *mp;
    if (model_has) {
        /* lines "key<padding> value", as the server formats them */
        fprintf(ch->out, "Model defined parameters:\n%s%s", mp,
                mp[strlen(mp) - 1] == '\n' ? "" : "\n");
    }
    json_decref(res); /* mp points into res */
    if (json_object_size(ch->options)) {
        fprintf(ch->out, "User defined parameters:\n");
        const char *k;
        json_t *v;
        json_object_foreach(ch->options, k, v)
        {
            char *s = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
            fprintf(ch->out, "%-30s %s\n", k, s ? s : "?");
            free(s);
        }
    }
    if (!model_has && !json_object_size(ch->options))
        fprintf(ch->out, "No parameters were specified for this model.\n");
}

/* /show system: this session's /set system, else the model's own. */
static void show_system(struct run_chat *ch)
{
    if (ch->system) {
        fprintf(ch->out, "%s\n", ch->system);
        return;
    }
    json_t *res = model_show(ch);
    const char *s = json_string_value(json_object_get(res, "system"));
    fprintf(ch->out, "%s\n", s && *s ? s : "No system message was specified for this model.");
    json_decref(res);
}

static void show(struct run_chat *ch, const char *what)
{
    struct mf_err e = {0};
    if (!strcmp(what, "parameters")) {
        show_parameters(ch);
    } else if (!strcmp(what, "system")) {
        show_system(ch);
    } else if (!strcmp(what, "info") || !strcmp(what, "template") || !strcmp(what, "modelfile") ||
               !strcmp(what, "license")) {
        json_t *req = json_pack("{s:s}", "model", ch->model), *res = NULL;
        if (run_client_json(ch->cl, "/api/show", req, &res, &e) != 0) {
            fprintf(ch->out, "error: %s\n", e.msg);
        } else if (!strcmp(what, "info")) {
            const json_t *d = json_object_get(res, "details");
            const char *k;
            json_t *v;
            fprintf(ch->out, "  Model\n");
            json_object_foreach((json_t *)d, k, v)
            {
                if (json_is_string(v) && json_string_length(v))
                    fprintf(ch->out, "    %-20s %s\n", k, json_string_value(v));
            }
        } else {
            const json_t *v = json_object_get(res, what);
            fprintf(ch->out, "%s\n", json_is_string(v) ? json_string_value(v) : "(none)");
        }
        json_decref(req);
        json_decref(res);
    } else {
        fprintf(ch->out, "Available Commands:\n  /show info\n  /show license\n"
                         "  /show modelfile\n  /show parameters\n  /show system\n"
                         "  /show template\n");
    }
}

static void help(FILE *out)
{
    fprintf(out, "Available Commands:\n"
                 "  /set parameter NAME VALUE   Set a parameter (temperature, top_p, top_k, seed,\n"
                 "                              num_predict, stop, ...)\n"
                 "  /set system TEXT            Set the system message\n"
                 "  /show [parameters|system|info|template|modelfile|license]\n"
                 "  /clear                      Clear the session context\n"
                 "  /bye                        Exit\n"
                 "  /?, /help                   This help\n\n"
                 "Use \"\"\" to begin a multi-line message.\n");
}

/* ---- input ----------------------------------------------------------------------- */

/* One line without its newline into *line (getline's buffer); -1 at EOF. */
static ssize_t read_line(struct run_chat *ch, char **line, size_t *cap)
{
    for (;;) {
        errno = 0;
        ssize_t n = getline(line, cap, ch->in);
        if (n < 0 && errno == EINTR && ch->cancel && *ch->cancel) {
            clearerr(ch->in);
            *ch->cancel = 0;
            fprintf(ch->out, "\nUse Ctrl + d or /bye to exit.\n>>> ");
            fflush(ch->out);
            continue;
        }
        if (n < 0)
            return -1;
        while (n > 0 && ((*line)[n - 1] == '\n' || (*line)[n - 1] == '\r'))
            (*line)[--n] = 0;
        return n;
    }
}

/* A `"""` message: what follows the opening quotes up to a line ending in
 * `"""`. Returns the text (malloc'd) or NULL at EOF. */
static char *read_multiline(struct run_chat *ch, const char *first, char **line, size_t *cap)
{
    struct mf_buf b;
    struct mf_err e = {0};
    mf_buf_init(&b, INPUT_MAX);
    const char *s = first;
    for (int n = 0;; n++) {
        size_t len = strlen(s);
        int closes = len >= 3 && !strcmp(s + len - 3, "\"\"\"");
        if (n > 0 && mf_buf_putc(&b, '\n', &e))
            break;
        if (mf_buf_append(&b, s, closes ? len - 3 : len, &e))
            break;
        if (closes)
            return mf_buf_take(&b);
        fprintf(ch->out, "... ");
        fflush(ch->out);
        if (read_line(ch, line, cap) < 0)
            break;
        s = *line;
    }
    mf_buf_free(&b);
    return NULL;
}

int run_chat_loop(struct run_chat *ch, struct mf_err *err)
{
    char *line = NULL;
    size_t cap = 0;
    int rc = 0;
    for (;;) {
        fprintf(ch->out, ">>> ");
        fflush(ch->out);
        if (read_line(ch, &line, &cap) < 0) {
            fputc('\n', ch->out);
            break;
        }
        char *s = line + strspn(line, " \t");
        char *msg = NULL;
        if (!strncmp(s, "\"\"\"", 3)) {
            msg = read_multiline(ch, s + 3, &line, &cap);
            if (!msg)
                break;
        } else if (!strcmp(s, "/bye") || !strcmp(s, "/exit")) {
            break;
        } else if (!strcmp(s, "/clear")) {
            json_array_clear(ch->messages);
            fprintf(ch->out, "Cleared session context\n");
            continue;
        } else if (!strcmp(s, "/?") || !strcmp(s, "/help")) {
            help(ch->out);
            continue;
        } else if (!strncmp(s, "/set parameter", 14) && (!s[14] || s[14] == ' ')) {
            set_parameter(ch, s + 14);
            continue;
        } else if (!strncmp(s, "/set system", 11) && (!s[11] || s[11] == ' ')) {
            const char *t = s + 11 + strspn(s + 11, " \t");
            char *copy = NULL;
            if (!strncmp(t, "\"\"\"", 3))
                copy = read_multiline(ch, t + 3, &line, &cap);
            else
                copy = strdup(t);
            free(ch->system);
            ch->system = copy && copy[0] ? copy : NULL;
            if (copy && !copy[0])
                free(copy);
            fprintf(ch->out, ch->system ? "Set system message.\n" : "Cleared system message.\n");
            continue;
        } else if (!strncmp(s, "/show", 5) && (!s[5] || s[5] == ' ')) {
            show(ch, s + 5 + strspn(s + 5, " \t"));
            continue;
        } else if (s[0] == '/') {
            fprintf(ch->out, "Unknown command '%.*s'. Type /? for help\n", (int)strcspn(s, " "), s);
            continue;
        } else if (!*s) {
            continue;
        }
        struct mf_err e = {0};
        int r = turn(ch, msg ? msg : s, &e);
        free(msg);
        if (r == MF_EBUSY && ch->cancel && *ch->cancel) {
            *ch->cancel = 0;
            fprintf(ch->out, "\n");
        } else if (r) {
            /* the server refused this turn (too long, busy): say so and go on, as
             * ollama does; a dead server ends the session */
            fprintf(ch->diag, "Error: %s\n", e.msg);
            if (r != MF_ENET || strstr(e.msg, "Couldn't connect") ||
                strstr(e.msg, "Connection refused")) {
                *err = e;
                rc = r;
                break;
            }
        }
        fputc('\n', ch->out);
    }
    free(line);
    return rc;
}
