/*
 * template_chat.c: renders a chat through a template the way Ollama's
 * template.Execute does.
 *
 * Fill-in-the-middle requests (a prompt and a suffix) run the template once
 * over {Prompt, Suffix}. Otherwise messages are first collated: consecutive messages of one role
 * are merged with "\n\n" (tool messages never are) and all system messages, joined by
 * "\n\n", become .System. Then one of two modes:
 *   - the template uses .Messages: one execution over
 *     {System, Messages[]{Role, Content, Thinking, Images, ToolCalls, ToolName,
 *     ToolCallID}, Tools, Response: "", Think, IsThinkSet};
 *   - otherwise (legacy templates with .System/.Prompt/.Response): one
 *     execution per turn, a turn being flushed when a system message follows
 *     a prompt or response, or a user message follows a response; the last
 *     turn runs the tree cut after {{ .Response }} (tmpl->legacy), so the text
 *     ends where the model's reply begins.
 * Owns nothing beyond one call; the chat's strings and values are borrowed.
 */
#include "text/template_int.h"

#include <stdlib.h>
#include <string.h>

/* Bound on one merged message or the joined system text; the request layer
 * caps bodies far lower. (Not SIZE_MAX: mf_buf reserves max + 1.) */
#define CHAT_TEXT_MAX ((size_t)1 << 30)

/* A collated message. */
struct cmsg {
    const struct tmpl_message *m; /* the first message of the run (borrowed) */
    struct mf_buf content;        /* merged content (owned) */
};

static int add_text(struct mf_buf *b, const char *sep, const char *s, struct mf_err *err)
{
    int rc = mf_buf_puts(b, sep, err);
    return rc ? rc : mf_buf_puts(b, s ? s : "", err);
}

static int same_role(const char *a, const char *b)
{
    return strcmp(a ? a : "", b ? b : "") == 0;
}

/* Go's collate(): merged runs in c (n_c of them) and joined system text. */
static int collate(const struct tmpl_chat *chat, struct cmsg *c, size_t *n_c, struct mf_buf *system,
                   struct mf_err *err)
{
    int rc = 0;
    size_t n_sys = 0;
    *n_c = 0;
    for (size_t i = 0; i < chat->n_msgs && !rc; i++) {
        const struct tmpl_message *m = &chat->msgs[i];
        if (same_role(m->role, "system"))
            rc = add_text(system, n_sys++ ? "\n\n" : "", m->content, err);
        if (rc)
            break;
        if (*n_c && same_role(c[*n_c - 1].m->role, m->role) && !same_role(m->role, "tool")) {
            rc = add_text(&c[*n_c - 1].content, "\n\n", m->content, err);
            continue;
        }
        c[*n_c].m = m;
        mf_buf_init(&c[*n_c].content, CHAT_TEXT_MAX);
        rc = add_text(&c[*n_c].content, "", m->content, err);
        ++*n_c;
    }
    return rc;
}

static const char *text(const struct mf_buf *b)
{
    return b->data ? b->data : "";
}

static struct tmpl_value *list_or_empty(struct tmpl_value *v)
{
    return v ? tmpl_value_ref(v) : tmpl_value_list();
}

static struct tmpl_value *message_value(const struct cmsg *c, struct mf_err *err)
{
    const struct tmpl_message *m = c->m;
    struct tmpl_value *v = tmpl_value_struct("api.Message");
    int rc = v ? 0 : mf_err_set(err, MF_ENOMEM, "template: out of memory");
    if (!rc)
        rc = tmpl_value_set(v, "Role", tmpl_value_cstr(m->role), err);
    if (!rc)
        rc = tmpl_value_set(v, "Content", tmpl_value_cstr(text(&c->content)), err);
    if (!rc)
        rc = tmpl_value_set(v, "Thinking", tmpl_value_cstr(m->thinking), err);
    if (!rc)
        rc = tmpl_value_set(v, "Images", tmpl_value_list(), err);
    if (!rc)
        rc = tmpl_value_set(v, "ToolCalls", list_or_empty(m->tool_calls), err);
    if (!rc)
        rc = tmpl_value_set(v, "ToolName", tmpl_value_cstr(m->tool_name), err);
    if (!rc)
        rc = tmpl_value_set(v, "ToolCallID", tmpl_value_cstr(m->tool_call_id ? m->tool_call_id : ""), err);
    if (rc) {
        tmpl_value_unref(v);
        return NULL;
    }
    return v;
}

/* Adds the string fields keys[i] = vals[i], Think and IsThinkSet to data
 * (adopted; NULL means its allocation failed), executes root over it and
 * drops it. */
static int run_with(const struct tmpl *t, const struct tmpl_node *root,
                    const struct tmpl_chat *chat, struct tmpl_value *data, const char *const *keys,
                    const char *const *vals, int n, struct mf_buf *out, struct mf_err *err)
{
    int rc = data ? 0 : mf_err_set(err, MF_ENOMEM, "template: out of memory");
    for (int k = 0; k < n && !rc; k++)
        rc = tmpl_value_set(data, keys[k], tmpl_value_cstr(vals[k]), err);
    if (!rc)
        rc = tmpl_value_set(data, "Think", tmpl_value_bool(chat->think), err);
    if (!rc)
        rc = tmpl_value_set(data, "IsThinkSet", tmpl_value_bool(chat->is_think_set), err);
    if (!rc)
        rc = tmpl_exec_node(t, root, data, out, err);
    tmpl_value_unref(data);
    return rc;
}

static int render_messages(const struct tmpl *t, const struct tmpl_chat *chat, const struct cmsg *c,
                           size_t n_c, const struct mf_buf *system, struct mf_buf *out,
                           struct mf_err *err)
{
    struct tmpl_value *data = tmpl_value_map();
    struct tmpl_value *msgs = tmpl_value_list();
    int rc = data && msgs ? 0 : mf_err_set(err, MF_ENOMEM, "template: out of memory");
    for (size_t i = 0; i < n_c && !rc; i++)
        rc = tmpl_value_push(msgs, message_value(&c[i], err), err);
    if (!rc)
        rc = tmpl_value_set(data, "System", tmpl_value_cstr(text(system)), err);
    if (!rc) {
        rc = tmpl_value_set(data, "Messages", msgs, err);
        msgs = NULL;
    }
    if (!rc)
        rc = tmpl_value_set(data, "Tools", list_or_empty(chat->tools), err);
    tmpl_value_unref(msgs);
    if (rc) {
        tmpl_value_unref(data);
        return rc;
    }
    static const char *const keys[] = {"Response"}, *const vals[] = {""};
    return run_with(t, t->root, chat, data, keys, vals, 1, out, err);
}

/* One legacy execution over {System, Prompt, Response}; root is the whole
 * tree, or the cut one for the last turn. */
static int run_turn(const struct tmpl *t, const struct tmpl_node *root,
                    const struct tmpl_chat *chat, const char *turn[3], struct mf_buf *out,
                    struct mf_err *err)
{
    static const char *const keys[3] = {"System", "Prompt", "Response"};
    int rc = run_with(t, root, chat, tmpl_value_map(), keys, turn, 3, out, err);
    turn[0] = turn[1] = turn[2] = "";
    return rc;
}

static int render_legacy(const struct tmpl *t, const struct tmpl_chat *chat, const struct cmsg *c,
                         size_t n_c, struct mf_buf *out, struct mf_err *err)
{
    const char *turn[3] = {"", "", ""}; /* system, prompt, response */
    int rc = 0;
    for (size_t i = 0; i < n_c && !rc; i++) {
        const char *role = c[i].m->role, *content = text(&c[i].content);
        if (same_role(role, "system")) {
            if (*turn[1] || *turn[2])
                rc = run_turn(t, t->root, chat, turn, out, err);
            turn[0] = content;
        } else if (same_role(role, "user")) {
            if (*turn[2])
                rc = run_turn(t, t->root, chat, turn, out, err);
            turn[1] = content;
        } else if (same_role(role, "assistant")) {
            turn[2] = content;
        }
    }
    return rc ? rc : run_turn(t, t->legacy, chat, turn, out, err);
}

/* Ollama's fill-in-the-middle mode: one run over the prompt and suffix. */
static int render_fim(const struct tmpl *t, const struct tmpl_chat *chat, struct mf_buf *out,
                      struct mf_err *err)
{
    static const char *const keys[3] = {"Prompt", "Suffix", "Response"};
    const char *vals[3] = {chat->prompt, chat->suffix, ""};
    return run_with(t, t->root, chat, tmpl_value_map(), keys, vals, 3, out, err);
}

int tmpl_render_chat(const struct tmpl *t, const struct tmpl_chat *chat, struct mf_buf *out,
                     struct mf_err *err)
{
    if (chat->prompt && *chat->prompt && chat->suffix && *chat->suffix)
        return render_fim(t, chat, out, err);
    struct mf_buf system;
    size_t n_c = 0;
    struct cmsg *c = calloc(chat->n_msgs ? chat->n_msgs : 1, sizeof *c);
    if (!c)
        return mf_err_set(err, MF_ENOMEM, "template: out of memory");
    mf_buf_init(&system, CHAT_TEXT_MAX);
    int rc = collate(chat, c, &n_c, &system, err);
    if (!rc && t->uses_messages)
        rc = render_messages(t, chat, c, n_c, &system, out, err);
    else if (!rc)
        rc = render_legacy(t, chat, c, n_c, out, err);
    for (size_t i = 0; i < n_c; i++)
        mf_buf_free(&c[i].content);
    mf_buf_free(&system);
    free(c);
    return rc;
}
