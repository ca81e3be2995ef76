/*
 * fuzz_template.c: libFuzzer target for runtime/template.
 *
 * The input is template text. It is compiled (plain and with Ollama's
 * touch-up) under tight limits and executed against a fixed data set with
 * every kind of value, then rendered as a chat (messages mode or Ollama's
 * legacy per-turn mode with the cut tree, and fill-in-the-middle), and finally offered to the
 * chat-template family detector as if it were Jinja. Errors are expected;
 * crashes, leaks, hangs past the limits and sanitizer reports are not.
 * The data set is built once per process (static state is fine here).
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "common/buf.h"
#include "common/err.h"
#include "text/template.h"

static struct tmpl_value *data;
static struct tmpl_value *tools;

static struct tmpl_value *message(const char *role, const char *content, struct mf_err *err)
{
    struct tmpl_value *m = tmpl_value_struct("api.Message");
    tmpl_value_set(m, "Role", tmpl_value_cstr(role), err);
    tmpl_value_set(m, "Content", tmpl_value_cstr(content), err);
    tmpl_value_set(m, "ToolCalls", tmpl_value_list(), err);
    return m;
}

static void build_data(void)
{
    struct mf_err err;
    struct tmpl_value *list = tmpl_value_list(), *map = tmpl_value_map(), *msgs = tmpl_value_list();
    data = tmpl_value_map();
    tmpl_value_set(data, "System", tmpl_value_cstr("You are terse."), &err);
    tmpl_value_set(data, "Prompt", tmpl_value_cstr("Hi <there> & \"you\""), &err);
    tmpl_value_set(data, "Response", tmpl_value_cstr(""), &err);
    tmpl_value_set(data, "N", tmpl_value_int(3), &err);
    tmpl_value_set(data, "Neg", tmpl_value_int(-7), &err);
    tmpl_value_set(data, "T", tmpl_value_bool(1), &err);
    tmpl_value_set(data, "F", tmpl_value_bool(0), &err);
    tmpl_value_push(list, tmpl_value_cstr("a"), &err);
    tmpl_value_push(list, tmpl_value_int(2), &err);
    tmpl_value_push(list, tmpl_value_cstr("h\xc3\xa9"), &err);
    tmpl_value_set(map, "b", tmpl_value_int(2), &err);
    tmpl_value_set(map, "a", tmpl_value_ref(list), &err);
    tmpl_value_set(data, "List", list, &err);
    tmpl_value_set(data, "Map", map, &err);
    tmpl_value_push(msgs, message("system", "sys", &err), &err);
    tmpl_value_push(msgs, message("user", "hello", &err), &err);
    tmpl_value_push(msgs, message("assistant", "hi", &err), &err);
    tmpl_value_set(data, "Messages", msgs, &err);
    tools = tmpl_value_list();
    tmpl_value_push(tools, tmpl_value_map(), &err);
}

static void limits(struct tmpl_limits *lim)
{
    tmpl_limits_default(lim);
    lim->max_source = 64 << 10;
    lim->max_depth = 32;
    lim->max_output = 256 << 10;
    lim->max_iterations = 20000;
    lim->max_steps = 200000;
    lim->max_scratch = 1 << 20;
}

static void run_chat(const struct tmpl *t)
{
    static const struct tmpl_message msgs[] = {
        {.role = "system", .content = "sys"},   {.role = "user", .content = "u1"},
        {.role = "assistant", .content = "a1"}, {.role = "user", .content = "u2"},
        {.role = "user", .content = "u3"},      {.role = "tool", .content = "t"},
    };
    struct tmpl_chat chat = {.msgs = msgs, .n_msgs = 6, .tools = tools, .is_think_set = 1};
    struct mf_buf out;
    struct mf_err err;
    mf_buf_init(&out, 1 << 20);
    tmpl_render_chat(t, &chat, &out, &err);
    mf_buf_reset(&out);
    chat.prompt = "def f(";
    chat.suffix = "return x"; /* fill-in-the-middle mode */
    tmpl_render_chat(t, &chat, &out, &err);
    mf_buf_free(&out);
}

int LLVMFuzzerTestOneInput(const uint8_t *buf, size_t len);
int LLVMFuzzerTestOneInput(const uint8_t *buf, size_t len)
{
    struct tmpl_limits lim;
    struct mf_err err;
    if (!data)
        build_data();
    limits(&lim);
    for (unsigned flags = 0; flags <= TMPL_F_OLLAMA; flags++) {
        struct tmpl *t;
        if (tmpl_compile(&t, (const char *)buf, len, &lim, flags, &err))
            continue;
        struct mf_buf out;
        mf_buf_init(&out, 1 << 20);
        tmpl_execute(t, data, &out, &err);
        mf_buf_reset(&out);
        tmpl_execute(t, NULL, &out, &err);
        mf_buf_free(&out);
        if (flags)
            run_chat(t);
        tmpl_uses(t, "messages");
        tmpl_free(t);
    }
    const struct tmpl_family *fam;
    tmpl_family_detect((const char *)buf, len, &fam, &err);
    return 0;
}
