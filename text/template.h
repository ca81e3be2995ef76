/*
 * template.h: Ollama's TEMPLATE language (the Go text/template subset Ollama
 * templates use), compiled once and executed many times, and chat rendering
 * the way Ollama does it.
 *
 * A template is parsed by tmpl_compile into an immutable object; any number of
 * threads may execute it at once. Execution reads a tree of typed values the
 * caller builds (string, int, bool, list, map, struct) and appends text to an
 * mf_buf. Everything is bounded: template size, nesting depth, output bytes,
 * range iterations, evaluation steps and bytes of intermediate strings.
 * Errors read like Go's: "template:3:14: function \"foo\" not defined"
 * (line and column are 1-based; the column counts bytes).
 */
#ifndef MFC_RUNTIME_TEMPLATE_H
#define MFC_RUNTIME_TEMPLATE_H

#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"
#include "common/err.h"

/* ---- values ------------------------------------------------------------ */

/* What a template sees. MAP is Go's map[string]any: a missing key reads as
 * nil. STRUCT is a Go struct: fields print in the order they were set and a
 * missing field is an execution error ("can't evaluate field"). */
enum tmpl_kind {
    TMPL_NIL,    /* Go's nil interface (a missing map key) */
    TMPL_STRING, /* bytes, usually UTF-8 */
    TMPL_INT,    /* int64 */
    TMPL_BOOL,
    TMPL_LIST,   /* []any */
    TMPL_MAP,    /* map[string]any; ranges and prints in key order */
    TMPL_STRUCT, /* named fields */
};

/* Reference-counted (atomically, so a data tree may be shared by concurrent
 * executions). Constructors return a new reference or NULL when memory runs
 * out; NULL is accepted by every function below taking a value to adopt. */
struct tmpl_value;

struct tmpl_value *tmpl_value_str(const char *s, size_t n);
struct tmpl_value *tmpl_value_cstr(const char *s);
struct tmpl_value *tmpl_value_int(int64_t v);
struct tmpl_value *tmpl_value_bool(int v);
struct tmpl_value *tmpl_value_list(void);
struct tmpl_value *tmpl_value_map(void);
/* type_name appears in messages ("can't evaluate field X in type api.Message"). */
struct tmpl_value *tmpl_value_struct(const char *type_name);
/* A STRUCT that prints, and marshals, as the given JSON text (a Go type
 * with String and MarshalJSON methods, as Ollama's api.Tool and
 * api.ToolCallFunctionArguments); its fields are still read by name. */
struct tmpl_value *tmpl_value_struct_json(const char *type_name, const char *json);

/* Appends item to list, adopting the caller's reference even on failure (so
 * calls can be chained: tmpl_value_push(l, tmpl_value_cstr("x"), err)). A NULL
 * item (a failed constructor) gives MF_ENOMEM. */
int tmpl_value_push(struct tmpl_value *list, struct tmpl_value *item, struct mf_err *err);
/* Sets key of a MAP or field of a STRUCT (replacing an earlier value),
 * adopting v like tmpl_value_push. */
int tmpl_value_set(struct tmpl_value *obj, const char *key, struct tmpl_value *v,
                   struct mf_err *err);

struct tmpl_value *tmpl_value_ref(struct tmpl_value *v);
/* Drops one reference; the last frees the value and its children. Accepts NULL. */
void tmpl_value_unref(struct tmpl_value *v);

enum tmpl_kind tmpl_value_kind(const struct tmpl_value *v);

/* ---- compiling and executing -------------------------------------------- */

struct tmpl_limits {
    size_t max_source;       /* bytes of template text */
    unsigned max_depth;      /* nesting of if/range/with/else-if and parentheses */
    size_t max_output;       /* bytes one execution may append */
    uint64_t max_iterations; /* range iterations in one execution, all loops together */
    uint64_t max_steps;      /* nodes and commands evaluated in one execution */
    size_t max_scratch;      /* bytes of strings and lists built while evaluating */
};

/* 256 KiB source, depth 64, 16 MiB output, 1M iterations, 20M steps, 64 MiB scratch. */
void tmpl_limits_default(struct tmpl_limits *lim);

/* Ollama's touch-up (template.Parse): a template that mentions neither
 * .Messages nor .Response gets {{ .Response }} appended. */
#define TMPL_F_OLLAMA 0x1u

struct tmpl;

/* Parses src[0..len) (need not be NUL-terminated). lim may be NULL for the
 * defaults. Returns 0 and *out (free with tmpl_free), or a negative MF_E*
 * code with err naming line:col and *out set to NULL. */
int tmpl_compile(struct tmpl **out, const char *src, size_t len, const struct tmpl_limits *lim,
                 unsigned flags, struct mf_err *err);
/* Accepts NULL. */
void tmpl_free(struct tmpl *t);

/* Executes t with data as dot and $ (data may be NULL: Go's nil), appending
 * to out. On failure returns a negative MF_E* code with err filled; out keeps
 * the text written before the failure. */
int tmpl_execute(const struct tmpl *t, struct tmpl_value *data, struct mf_buf *out,
                 struct mf_err *err);

/* Whether the template mentions an identifier, case-insensitively, as Ollama's
 * Template.Vars does: field names (.Messages, .Role, ...) and variables ($x). */
int tmpl_uses(const struct tmpl *t, const char *name);

/* ---- chats ---------------------------------------------------------------- */

struct tmpl_message {
    const char *role;              /* "system", "user", "assistant", "tool" */
    const char *content;           /* NUL-terminated; NULL reads as "" */
    const char *thinking;          /* may be NULL */
    struct tmpl_value *tool_calls; /* borrowed list, or NULL for none */
    const char *tool_name;         /* may be NULL */
    const char *tool_call_id;      /* a tool result's call id; may be NULL */
};

struct tmpl_chat {
    const struct tmpl_message *msgs; /* borrowed */
    size_t n_msgs;
    struct tmpl_value *tools; /* borrowed list, or NULL for none */
    int think;                /* .Think */
    int is_think_set;         /* .IsThinkSet */
    const char *prompt;       /* fill-in-the-middle: with suffix (both non-empty) */
    const char *suffix;       /*   the template runs once over {Prompt, Suffix, ...} */
};

/* Renders a chat as Ollama does (template.Execute). With chat->prompt and
 * chat->suffix both set (fill-in-the-middle, /api/generate's suffix), the
 * template runs once over {Prompt, Suffix, Response: "", Think, IsThinkSet}
 * and the messages are ignored. Otherwise consecutive messages of
 * one role are merged with "\n\n" (tool messages excepted) and .System is all
 * system messages joined by "\n\n". A template that uses .Messages runs once
 * with {System, Messages, Tools, Response: "", Think, IsThinkSet}; any other
 * runs once per system/user/assistant turn with {System, Prompt, Response},
 * and the last run stops right after {{ .Response }}, so the text ends where
 * the model's answer starts. Failure is as for tmpl_execute. */
int tmpl_render_chat(const struct tmpl *t, const struct tmpl_chat *chat, struct mf_buf *out,
                     struct mf_err *err);

/* ---- chat template families ------------------------------------------------ */

/* A known chat-template family: the Ollama-language template that renders
 * chats the way the model's own Jinja template does, and its stop strings. */
struct tmpl_family {
    const char *name;         /* "llama3.1", "chatml", "qwen2.5", ... */
    const char *description;  /* models it covers */
    const char *tmpl;         /* Ollama TEMPLATE text */
    const char *const *stops; /* NULL-terminated list of stop strings */
    int bos_from_tokenizer;   /* the Jinja text starts with bos_token, which the
                                 tokenizer adds (add_bos_token), so tmpl omits it */
};

/* Recognises a GGUF tokenizer.chat_template (Jinja source). Returns 0 and
 * *out (static data), or MF_ENOTFOUND with err saying "unrecognised chat
 * template" so the caller can fall back to {{ .Prompt }} and warn. */
int tmpl_family_detect(const char *jinja, size_t len, const struct tmpl_family **out,
                       struct mf_err *err);
/* The family called name, or NULL. */
const struct tmpl_family *tmpl_family_find(const char *name);
/* All families, *n set to their count. */
const struct tmpl_family *tmpl_family_all(size_t *n);

#endif
