/*
 * test_template_jinja.c: checks chat-template family detection and the
 * derived Ollama templates against a real Jinja engine.
 *
 * Every Jinja template in ../shared/data/chat-templates/ and
 * tests/data/chat-templates/ is recognised, then rendered for several chats
 * by @huggingface/jinja (tests/tools/jinja-render.mjs, one node process for
 * all cases) and by mfc's engine through the family's Ollama template with
 * tmpl_render_chat; the texts must be identical, byte for byte, except for
 * the leading bos_token a family leaves to the tokenizer. Templates mfc
 * recognises but cannot match exactly are listed with the reason and only
 * their detection is checked. Families that render tools (llama3.1, qwen2.5,
 * qwen3, mistral-nemo, hermes) are also compared on chats with tools, tool calls
 * and tool results, built the way mfc-serve builds them; the Hermes tool_use
 * templates only there (they fail without tools), the family writing plain
 * ChatML otherwise. Skips, saying why, without MFC_SHARED data,
 * node, or @huggingface/jinja under MFC_NODE_MODULES.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "common/buf.h"
#include "common/err.h"
#include "text/template.h"
#include "runtime/serve/serve_int.h"

#define BOS "<s>"
#define EOS "</s>"

enum conv_set { ALL_CONVS, NO_SYSTEM };

struct expect {
    const char *file;   /* template file name */
    const char *family; /* expected family */
    int exact;          /* 1: renders must match; 2: only the chats with tools; 0: detection only */
    enum conv_set convs;
    const char *why; /* for exact == 0, or a restriction */
    int tools_empty; /* pass tools=[] (the template fails on undefined tools) */
};

static const struct expect expects[] = {
    {"meta-llama-Llama-3.1-8B-Instruct.jinja", "llama3.1", 1, ALL_CONVS, NULL, 0},
    {"meta-llama-Llama-3.2-3B-Instruct.jinja", "llama3.1", 1, ALL_CONVS, NULL, 0},
    {"meta-llama-Llama-3.3-70B-Instruct.jinja", "llama3.1", 1, ALL_CONVS, NULL, 0},
    {"meta-llama-Meta-Llama-3-8B-Instruct.jinja", "llama3", 1, ALL_CONVS, NULL, 0},
    {"Qwen-Qwen2.5-7B-Instruct.jinja", "qwen2.5", 1, ALL_CONVS, NULL, 0},
    {"teknium-OpenHermes-2.5-Mistral-7B.jinja", "chatml", 1, ALL_CONVS, NULL, 0},
    {"deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja", "deepseek-r1", 1, ALL_CONVS, NULL, 0},
    {"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", "deepseek-r1", 1, ALL_CONVS, NULL, 0},
    {"llama-cpp-deepseek-r1.jinja", "deepseek-r1-llamacpp", 1, ALL_CONVS, NULL, 0},
    {"microsoft-Phi-3.5-mini-instruct.jinja", "phi3", 1, ALL_CONVS, NULL, 0},
    {"microsoft-phi-4.jinja", "phi4", 1, ALL_CONVS, NULL, 0},
    {"Qwen-Qwen3-0.6B.jinja", "qwen3", 1, ALL_CONVS, NULL, 0},
    {"google-gemma-3-4b-it.jinja", "gemma3", 1, ALL_CONVS, NULL, 0},
    {"mistralai-Mistral-Nemo-Instruct-2407.jinja", "mistral-nemo", 1, ALL_CONVS, NULL, 0},
    {"mistralai-Mistral-7B-Instruct-v0.2.jinja", "mistral", 1, NO_SYSTEM,
     "the Jinja template rejects system messages", 0},
    {"google-gemma-2-2b-it.jinja", "gemma2", 1, NO_SYSTEM,
     "the Jinja template rejects system messages", 0},
    {"HuggingFaceH4-zephyr-7b-beta.jinja", "zephyr", 1, ALL_CONVS, NULL, 0},
    {"CohereForAI-c4ai-command-r-plus.jinja", "command-r", 1, ALL_CONVS, NULL, 0},
    {"CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja", "cohere2", 1, ALL_CONVS,
     "rendered with tools=[]", 1},
    {"meetkai-functionary-medium-v3.1.jinja", "functionary-v3.1", 1, ALL_CONVS,
     "rendered with tools=[]", 1},
    {"meetkai-functionary-medium-v3.2.jinja", "functionary-v3.2", 1, ALL_CONVS,
     "rendered with tools=[]", 1},
    {"CohereForAI-c4ai-command-r-plus-tool_use.jinja", "command-r", 0, ALL_CONVS,
     "the tool_use variant always renders its tool preamble; the family follows the default "
     "Command-R template",
     0},
    {"NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja", "hermes", 2, ALL_CONVS,
     "the Jinja template fails without tools; the family writes plain ChatML then", 0},
    {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja", "hermes", 2, ALL_CONVS,
     "the Jinja template fails without tools; the family writes plain ChatML then", 0},
    {"fireworks-ai-llama-3-firefunction-v2.jinja", "llama3", 0, ALL_CONVS,
     "firefunction always renders its function spec and today's date into the system turn", 0},
};

struct msg {
    const char *role;
    const char *content;
};

struct conv {
    const char *name;
    int has_system;
    struct msg msgs[6];
};

static const struct conv convs[] = {
    {"system+user", 1, {{"system", "You are terse."}, {"user", "Hello!"}}},
    {"multi-turn",
     1,
     {{"system", "You are a helpful assistant."},
      {"user", "Hi"},
      {"assistant", "Hello, how can I help?"},
      {"user", "Tell me a joke."}}},
    {"no system",
     0,
     {{"user", "Hi"},
      {"assistant", "Hello."},
      {"user", "What is 2+2?"},
      {"assistant", "4"},
      {"user", "Bye"}}},
    {"single user", 0, {{"user", "Write a haiku about C."}}},
};

#define N_CONVS (sizeof convs / sizeof convs[0])

/* Chats with tools, in OpenAI's shape (arguments as objects, as Hugging Face
 * templates take them); ids of 9 characters, as Mistral's template wants. */
static const char TOOLS[] =
    "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": "
    "\"Get the weather\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": "
    "{\"type\": \"string\", \"description\": \"City name\"}, \"days\": {\"type\": "
    "\"integer\"}}, \"required\": [\"city\"]}}}, {\"type\": \"function\", \"function\": "
    "{\"name\": \"add\", \"description\": \"Add two numbers\", \"parameters\": {\"type\": "
    "\"object\", \"properties\": {\"a\": {\"type\": \"integer\"}, \"b\": {\"type\": "
    "\"integer\"}}, \"required\": [\"a\", \"b\"]}}}]";

static const char *const tool_convs[] = {
    "[{\"role\": \"system\", \"content\": \"You are terse.\"}, {\"role\": \"user\", "
    "\"content\": \"Weather in Paris?\"}]",
    "[{\"role\": \"user\", \"content\": \"Add 1 and 2.\"}, {\"role\": \"assistant\", "
    "\"content\": \"\", \"tool_calls\": [{\"id\": \"abcDEF123\", \"type\": \"function\", "
    "\"function\": {\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}}]}, {\"role\": "
    "\"tool\", \"tool_call_id\": \"abcDEF123\", \"content\": \"3\"}]",
    "[{\"role\": \"system\", \"content\": \"S\"}, {\"role\": \"user\", \"content\": "
    "\"Both?\"}, {\"role\": \"assistant\", \"content\": \"\", \"tool_calls\": [{\"id\": "
    "\"xyz987ABC\", \"type\": \"function\", \"function\": {\"name\": \"get_weather\", "
    "\"arguments\": {\"city\": \"Oslo\", \"days\": 2}}}]}, {\"role\": \"tool\", "
    "\"tool_call_id\": \"xyz987ABC\", \"content\": \"cold, 3 \\u00b0C\"}, {\"role\": "
    "\"assistant\", \"content\": \"It is cold.\"}, {\"role\": \"user\", \"content\": "
    "\"thanks\"}]",
};

#define N_TOOL_CONVS (sizeof tool_convs / sizeof tool_convs[0])

/* TOOLS with every parameter described, in the order a Go template ranges
 * over them: the Hermes tool_use template fails on a parameter without a
 * description, and @huggingface/jinja on an array parameter (Python's Jinja
 * writes list[Any], as the family does); jinja keeps the properties' order,
 * Go sorts the keys; Go templates have no trim, so descriptions go as given. */
static const char TOOLS_DESCRIBED[] =
    "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": "
    "\"Get the weather\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": "
    "{\"type\": \"string\", \"description\": \"City name\"}, \"days\": {\"type\": "
    "\"integer\", \"description\": \"Days ahead\"}, \"hourly\": {\"type\": \"boolean\", "
    "\"description\": \"Hour by hour\"}}, \"required\": [\"city\"]}}}, "
    "{\"type\": \"function\", \"function\": {\"name\": \"add\", \"description\": \"Add two "
    "numbers\", \"parameters\": {\"type\": \"object\", \"properties\": {\"a\": {\"type\": "
    "\"number\", \"description\": \"first\"}, \"b\": {\"type\": \"object\", \"description\": "
    "\"second\"}}, \"required\": [\"a\", \"b\"]}}}, {\"type\": \"function\", \"function\": "
    "{\"name\": \"now\", \"description\": \"The time\", \"parameters\": {\"type\": "
    "\"object\", \"properties\": {}}}}]";

static const char *tools_for(const struct expect *e)
{
    return !strcmp(e->family, "hermes") ? TOOLS_DESCRIBED : TOOLS;
}

/* The families whose templates render tools (template_family.c). */
static int tool_family(const struct expect *e)
{
    return e->exact && (!strcmp(e->family, "llama3.1") || !strcmp(e->family, "qwen2.5") ||
                        !strcmp(e->family, "qwen3") || !strcmp(e->family, "mistral-nemo") ||
                        !strcmp(e->family, "hermes"));
}

/* One template file found on disk. */
struct tfile {
    char path[2200];
    const struct expect *exp;
    char *jinja;                   /* file contents */
    const struct tmpl_family *fam; /* detected family or NULL */
    size_t first_case;             /* index of its first case in the node reply */
    size_t n_cases;
};

struct ctx {
    struct tfile files[64];
    size_t n_files;
    json_t *reply;      /* node's {"results": [...]} */
    const char *skip;   /* reason to skip everything, or NULL */
    const char *broken; /* reason every comparison fails, or NULL */
    char skip_buf[1200];
};

static struct ctx g_ctx;

static char *read_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    struct mf_buf b;
    struct mf_err err;
    mf_buf_init(&b, 1 << 20);
    char chunk[4096];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
        if (mf_buf_append(&b, chunk, n, &err)) {
            mf_buf_free(&b);
            fclose(f);
            return NULL;
        }
    fclose(f);
    return mf_buf_take(&b);
}

static const struct expect *find_expect(const char *name)
{
    for (size_t i = 0; i < sizeof expects / sizeof expects[0]; i++)
        if (strcmp(expects[i].file, name) == 0)
            return &expects[i];
    return NULL;
}

static int conv_applies(const struct expect *e, const struct conv *c)
{
    if (e->exact == 2)
        return 0;
    return e->convs == ALL_CONVS || !c->has_system;
}

static json_t *conv_json(const struct conv *c)
{
    json_t *a = json_array();
    for (size_t i = 0; i < 6 && c->msgs[i].role; i++)
        json_array_append_new(
            a, json_pack("{s:s,s:s}", "role", c->msgs[i].role, "content", c->msgs[i].content));
    return a;
}

static void add_file(struct ctx *x, const char *dir, const char *name)
{
    if (x->n_files == sizeof x->files / sizeof x->files[0])
        return;
    struct tfile *f = &x->files[x->n_files];
    snprintf(f->path, sizeof f->path, "%s/%s", dir, name);
    f->exp = find_expect(name);
    f->jinja = read_file(f->path);
    if (f->jinja)
        x->n_files++;
}

/* Every name in expects[] that exists in either directory. */
static void find_files(struct ctx *x, const char *shared_dir, const char *local_dir)
{
    for (size_t i = 0; i < sizeof expects / sizeof expects[0]; i++) {
        char p[2200];
        struct stat st;
        snprintf(p, sizeof p, "%s/%s", shared_dir, expects[i].file);
        if (stat(p, &st) == 0) {
            add_file(x, shared_dir, expects[i].file);
            continue;
        }
        snprintf(p, sizeof p, "%s/%s", local_dir, expects[i].file);
        if (stat(p, &st) == 0)
            add_file(x, local_dir, expects[i].file);
    }
}

static json_t *build_request(struct ctx *x)
{
    json_t *cases = json_array();
    size_t k = 0;
    for (size_t i = 0; i < x->n_files; i++) {
        struct tfile *f = &x->files[i];
        f->first_case = k;
        if (!f->exp->exact)
            continue;
        for (size_t c = 0; c < N_CONVS; c++) {
            if (!conv_applies(f->exp, &convs[c]))
                continue;
            json_t *vars = json_pack("{s:s,s:s,s:s}", "bos_token", BOS, "eos_token", EOS,
                                     "date_string", "26 Jul 2024");
            if (f->exp->tools_empty)
                json_object_set_new(vars, "tools", json_array());
            json_array_append_new(cases, json_pack("{s:s,s:o,s:o}", "template", f->jinja,
                                                   "messages", conv_json(&convs[c]), "vars", vars));
            k++;
            f->n_cases++;
        }
        for (size_t c = 0; tool_family(f->exp) && c < N_TOOL_CONVS; c++) {
            json_t *vars = json_pack("{s:s,s:s,s:s,s:o}", "bos_token", BOS, "eos_token", EOS,
                                     "date_string", "26 Jul 2024", "tools",
                                     json_loads(tools_for(f->exp), 0, NULL));
            json_array_append_new(cases, json_pack("{s:s,s:o,s:o}", "template", f->jinja,
                                                   "messages", json_loads(tool_convs[c], 0, NULL),
                                                   "vars", vars));
            k++;
            f->n_cases++;
        }
    }
    return json_pack("{s:o}", "cases", cases);
}

static int run_node(struct ctx *x, const char *srcdir, json_t *req)
{
    char reqpath[] = "/tmp/mfc-jinja-req-XXXXXX";
    char outpath[] = "/tmp/mfc-jinja-out-XXXXXX";
    int fd1 = mkstemp(reqpath), fd2 = mkstemp(outpath);
    if (fd1 < 0 || fd2 < 0)
        return -1;
    close(fd2);
    FILE *f = fdopen(fd1, "w");
    json_dumpf(req, f, JSON_COMPACT);
    fclose(f);
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "node '%s/tests/tools/jinja-render.mjs' < '%s' > '%s'", srcdir,
             reqpath, outpath);
    int rc = system(cmd);
    char *text = rc == 0 ? read_file(outpath) : NULL;
    unlink(reqpath);
    unlink(outpath);
    if (!text)
        return -1;
    x->reply = json_loads(text, 0, NULL);
    free(text);
    return x->reply ? 0 : -1;
}

static int group_setup(void **state)
{
    struct ctx *x = &g_ctx;
    const char *shared = getenv("MFC_SHARED");
    const char *srcdir = getenv("MFC_SRCDIR");
    const char *nm = getenv("MFC_NODE_MODULES");
    char shared_dir[1024], local_dir[1024], probe[1024];
    struct stat st;
    *state = x;
    if (!srcdir)
        srcdir = ".";
    snprintf(local_dir, sizeof local_dir, "%s/tests/data/chat-templates", srcdir);
    snprintf(shared_dir, sizeof shared_dir, "%s/data/chat-templates", shared ? shared : "");
    if (!shared || stat(shared_dir, &st) != 0) {
        snprintf(x->skip_buf, sizeof x->skip_buf, "shared chat templates not found at %s",
                 shared_dir);
        x->skip = x->skip_buf;
        return 0;
    }
    find_files(x, shared_dir, local_dir);
    for (size_t i = 0; i < x->n_files; i++) {
        struct mf_err err;
        x->files[i].fam = NULL;
        tmpl_family_detect(x->files[i].jinja, strlen(x->files[i].jinja), &x->files[i].fam, &err);
    }
    snprintf(probe, sizeof probe, "%s/@huggingface/jinja/package.json", nm ? nm : "");
    if (!nm || stat(probe, &st) != 0) {
        snprintf(x->skip_buf, sizeof x->skip_buf, "@huggingface/jinja not found under %s",
                 nm ? nm : "(MFC_NODE_MODULES unset)");
        x->skip = x->skip_buf;
        return 0;
    }
    if (system("node --version >/dev/null 2>&1") != 0) {
        x->skip = "node is not installed";
        return 0;
    }
    json_t *req = build_request(x);
    int rc = run_node(x, srcdir, req);
    json_decref(req);
    if (rc)
        x->broken = "node tests/tools/jinja-render.mjs failed (see its stderr above)";
    return 0;
}

static int group_teardown(void **state)
{
    struct ctx *x = &g_ctx;
    for (size_t i = 0; i < x->n_files; i++)
        free(x->files[i].jinja);
    json_decref(x->reply);
    return 0;
}

static void render_ours(const struct tmpl *t, const struct conv *c, struct mf_buf *out)
{
    struct tmpl_message m[6] = {0};
    size_t n = 0;
    for (; n < 6 && c->msgs[n].role; n++) {
        m[n].role = c->msgs[n].role;
        m[n].content = c->msgs[n].content;
    }
    struct tmpl_chat chat = {.msgs = m, .n_msgs = n};
    struct mf_err err = {0};
    int rc = tmpl_render_chat(t, &chat, out, &err);
    if (rc)
        fail_msg("render: %s", err.msg);
}

/* A chat with tools the way mfc-serve renders one: its request parser's
 * normal forms (serve_req_structured, Ollama's shape: arguments as objects,
 * as the Jinja side has them) and its template values. */
static void render_tools(const struct tmpl *t, const char *tools, const char *msgs_json,
                         struct mf_buf *out)
{
    char body[8192];
    struct serve_req rq;
    struct mf_err err = {0};
    snprintf(body, sizeof body, "{\"messages\": %s, \"tools\": %s}", msgs_json, tools);
    if (serve_req_parse(SERVE_OLLAMA_CHAT, body, strlen(body), &rq, &err))
        fail_msg("parse: %s", err.msg);
    struct tmpl_message m[8] = {0};
    size_t n = 0;
    for (; n < rq.n_msgs && n < 8; n++) {
        m[n].role = rq.msgs[n].role;
        m[n].content = rq.msgs[n].content;
        m[n].tool_name = rq.msgs[n].tool_name;
        m[n].tool_call_id = rq.msgs[n].tool_call_id;
        if (rq.msgs[n].tool_calls)
            m[n].tool_calls = serve_tool_calls_value(rq.msgs[n].tool_calls);
    }
    struct tmpl_chat chat = {.msgs = m, .n_msgs = n, .tools = serve_tools_value(rq.tools)};
    int rc = tmpl_render_chat(t, &chat, out, &err);
    for (size_t i = 0; i < n; i++)
        tmpl_value_unref(m[i].tool_calls);
    tmpl_value_unref(chat.tools);
    serve_req_free(&rq);
    if (rc)
        fail_msg("render: %s", err.msg);
}

/* Prints the first difference, so a failing family is quick to fix. */
static void show_diff(const char *want, const char *got)
{
    size_t i = 0;
    while (want[i] && want[i] == got[i])
        i++;
    size_t from = i > 40 ? i - 40 : 0;
    print_message("# first difference at byte %zu\n# jinja: %.80s\n# mfc:   %.80s\n", i,
                  want + from, got + from);
}

static void check_file(struct tfile *f)
{
    struct ctx *x = &g_ctx;
    assert_non_null(f->exp);
    if (!f->fam)
        fail_msg("%s: not recognised (want %s)", f->path, f->exp->family);
    assert_string_equal(f->fam->name, f->exp->family);
    if (!f->exp->exact) {
        print_message("# %s: detected as %s; not compared: %s\n", f->exp->file, f->fam->name,
                      f->exp->why);
        return;
    }
    struct tmpl *t;
    struct mf_err err = {0};
    if (tmpl_compile(&t, f->fam->tmpl, strlen(f->fam->tmpl), NULL, TMPL_F_OLLAMA, &err))
        fail_msg("%s template: %s", f->fam->name, err.msg);
    json_t *results = json_object_get(x->reply, "results");
    size_t k = f->first_case, matched = 0;
    for (size_t c = 0; c < N_CONVS; c++) {
        if (!conv_applies(f->exp, &convs[c]))
            continue;
        json_t *r = json_array_get(results, k++);
        const char *want = json_string_value(json_object_get(r, "text"));
        if (!want)
            fail_msg("%s / %s: jinja failed: %s", f->exp->file, convs[c].name,
                     json_string_value(json_object_get(r, "error")));
        if (f->fam->bos_from_tokenizer && strncmp(want, BOS, strlen(BOS)) == 0)
            want += strlen(BOS);
        struct mf_buf out;
        mf_buf_init(&out, 1 << 20);
        render_ours(t, &convs[c], &out);
        const char *got = out.data ? out.data : "";
        if (strcmp(want, got) != 0) {
            print_message("# %s / %s differs\n", f->exp->file, convs[c].name);
            show_diff(want, got);
        } else {
            matched++;
        }
        mf_buf_free(&out);
    }
    for (size_t c = 0; tool_family(f->exp) && c < N_TOOL_CONVS; c++) {
        json_t *r = json_array_get(results, k++);
        const char *want = json_string_value(json_object_get(r, "text"));
        if (!want)
            fail_msg("%s / tools %zu: jinja failed: %s", f->exp->file, c,
                     json_string_value(json_object_get(r, "error")));
        if (f->fam->bos_from_tokenizer && strncmp(want, BOS, strlen(BOS)) == 0)
            want += strlen(BOS);
        struct mf_buf out;
        mf_buf_init(&out, 1 << 20);
        render_tools(t, tools_for(f->exp), tool_convs[c], &out);
        const char *got = out.data ? out.data : "";
        if (strcmp(want, got) != 0) {
            print_message("# %s / tools %zu differs\n", f->exp->file, c);
            show_diff(want, got);
        } else {
            matched++;
        }
        mf_buf_free(&out);
    }
    if (f->exp->exact == 2) {
        /* without tools the family writes what the plain ChatML family writes */
        const struct tmpl_family *cm = tmpl_family_find("chatml");
        struct tmpl *ct;
        assert_non_null(cm);
        if (tmpl_compile(&ct, cm->tmpl, strlen(cm->tmpl), NULL, TMPL_F_OLLAMA, &err))
            fail_msg("chatml template: %s", err.msg);
        for (size_t c = 0; c < N_CONVS; c++) {
            struct mf_buf a, b;
            mf_buf_init(&a, 1 << 20);
            mf_buf_init(&b, 1 << 20);
            render_ours(t, &convs[c], &a);
            render_ours(ct, &convs[c], &b);
            assert_string_equal(a.data ? a.data : "", b.data ? b.data : "");
            mf_buf_free(&a);
            mf_buf_free(&b);
        }
        tmpl_free(ct);
    }
    print_message("# %s (%s): %zu/%zu renders identical%s%s\n", f->exp->file, f->fam->name, matched,
                  f->n_cases, f->exp->why ? "; " : "", f->exp->why ? f->exp->why : "");
    tmpl_free(t);
    assert_int_equal(matched, f->n_cases);
}

static void test_file(void **state)
{
    struct tfile *f = *state;
    if (g_ctx.broken)
        fail_msg("%s", g_ctx.broken);
    if (g_ctx.skip || !f) {
        print_message("# skipped: %s\n", g_ctx.skip ? g_ctx.skip : "no template files");
        skip();
    }
    check_file(f);
}

static void test_unknown_template(void **state)
{
    const struct tmpl_family *fam = NULL;
    struct mf_err err = {0};
    const char *j = "{% for m in messages %}### {{ m.role }}: {{ m.content }}\n{% endfor %}";
    assert_int_equal(tmpl_family_detect(j, strlen(j), &fam, &err), MF_ENOTFOUND);
    assert_non_null(strstr(err.msg, "unrecognised chat template"));
}

static void test_family_templates_compile(void **state)
{
    size_t n;
    const struct tmpl_family *all = tmpl_family_all(&n);
    assert_true(n >= 14);
    for (size_t i = 0; i < n; i++) {
        struct tmpl *t;
        struct mf_err err = {0};
        if (tmpl_compile(&t, all[i].tmpl, strlen(all[i].tmpl), NULL, TMPL_F_OLLAMA, &err))
            fail_msg("%s: %s", all[i].name, err.msg);
        assert_true(tmpl_uses(t, "messages"));
        assert_non_null(all[i].stops[0]);
        tmpl_free(t);
        assert_ptr_equal(tmpl_family_find(all[i].name), &all[i]);
    }
}

int main(void)
{
    static struct CMUnitTest tests[64 + 2];
    size_t n = 0;
    group_setup(&(void *){NULL});
    tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_unknown_template);
    tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_family_templates_compile);
    for (size_t i = 0; i < g_ctx.n_files; i++) {
        /* one test per file found, so each prints its own ok/not ok line */
        struct CMUnitTest t = cmocka_unit_test_prestate(test_file, &g_ctx.files[i]);
        t.name = g_ctx.files[i].exp->file;
        tests[n++] = t;
    }
    if (g_ctx.n_files == 0) {
        struct CMUnitTest t = cmocka_unit_test_prestate(test_file, NULL);
        t.name = "jinja comparison";
        tests[n++] = t;
    }
    int rc = _cmocka_run_group_tests("template_jinja", tests, n, NULL, group_teardown);
    return rc;
}
