/*
 * modelfile.h: the Modelfile language: parse a Modelfile into an AST, report
 * diagnostics, export JSON, and print the canonical form (docs/modelfile.md).
 *
 * The grammar is Ollama's (parser/parser.go) to the rune: a file Ollama
 * accepts parses here to the same values, and a file it rejects is rejected.
 * mfc adds RUN, ENV, ARG and LABEL (Dockerfile-like), flags and digest pins
 * on FROM/ADAPTER/DRAFT, and validates PARAMETER names and types up front.
 *
 * For the planner: walk mf->instrs in order (instructions may come in any
 * order, and order matters for MESSAGE, LICENSE, stop and repeated keys) and
 * skip any with `ignored` set. Sources are FROM, ADAPTER and DRAFT (u.src);
 * RUN (u.run) runs a command; the config comes from PARAMETER (u.param),
 * TEMPLATE, SYSTEM, LICENSE, REQUIRES, RENDERER, PARSER (value), MESSAGE
 * (u.msg), ENV and LABEL (u.kv). Every string is expanded (ARG/ENV) already
 * and every value validated; nothing needs re-checking.
 *
 * Ownership: a struct mf_modelfile owns everything reachable from it (one
 * arena); pointers into it stay valid until mf_modelfile_free().
 */
#ifndef MF_MODELFILE_H
#define MF_MODELFILE_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "common/buf.h"
#include "common/err.h"

/* Largest Modelfile accepted, in bytes (after decoding to UTF-8). */
#define MF_MODELFILE_MAX_BYTES (16u << 20)
/* Parsing stops after this many errors; warnings past their limit are dropped. */
#define MF_MODELFILE_MAX_ERRORS 50
#define MF_MODELFILE_MAX_WARNINGS 100

enum mf_instr_kind {
    MF_INSTR_FROM,      /* u.src: base model (name or path), required at least once */
    MF_INSTR_ADAPTER,   /* u.src: LoRA adapter, with --name/--scale/--merge */
    MF_INSTR_DRAFT,     /* u.src: speculative-decoding draft model */
    MF_INSTR_PARAMETER, /* u.param: one runtime option */
    MF_INSTR_TEMPLATE,  /* value: Go text/template prompt template */
    MF_INSTR_SYSTEM,    /* value: system prompt */
    MF_INSTR_MESSAGE,   /* u.msg: one conversation turn */
    MF_INSTR_LICENSE,   /* value: license text; repeatable, each one a layer */
    MF_INSTR_REQUIRES,  /* value: minimum Ollama version (semver, no 'v') */
    MF_INSTR_RENDERER,  /* value: name of a built-in prompt renderer */
    MF_INSTR_PARSER,    /* value: name of a built-in output parser */
    MF_INSTR_RUN,       /* u.run: mfc: a build step */
    MF_INSTR_ENV,       /* u.kv: mfc: environment for RUN and the image */
    MF_INSTR_ARG,       /* u.kv: mfc: build arguments (value: the one in effect) */
    MF_INSTR_LABEL,     /* u.kv: mfc: OCI image labels */
    MF_INSTR_KIND_COUNT
};

enum mf_param_type {
    MF_PARAM_INT,    /* int64 (Go ParseInt base 10) */
    MF_PARAM_FLOAT,  /* float32 (Go ParseFloat bitSize 32), finite */
    MF_PARAM_BOOL,   /* Go ParseBool spellings */
    MF_PARAM_STRING, /* repeatable, appends (only `stop`) */
    MF_PARAM_DEPRECATED /* accepted, warned about and ignored */
};

enum mf_role { MF_ROLE_SYSTEM, MF_ROLE_USER, MF_ROLE_ASSISTANT };

enum mf_network { MF_NET_DEFAULT, MF_NET_NONE, MF_NET_HOST };

enum mf_mount_type { MF_MOUNT_CACHE, MF_MOUNT_SECRET };

enum mf_severity { MF_DIAG_ERROR, MF_DIAG_WARNING };

/* A comment line, kept so that `mfc fmt` can write it back. */
struct mf_comment {
    const char *text; /* after the '#', as written, trailing blanks removed */
    int line;         /* 1-based */
    int blank_before; /* 1 if a blank line separates it from the item above */
};

/* A flag as written, after validation (e.g. {"name", "pirate"}). */
struct mf_flag {
    const char *name;  /* without the dashes: "name", "scale", "merge", "mount" */
    const char *value; /* text after '=', or NULL for a bare flag (--merge) */
};

/* FROM, ADAPTER, DRAFT. */
struct mf_source {
    const char *ref;    /* model name or path, pin removed; never empty */
    const char *digest; /* "sha256:<64 lower-case hex>" pin, or NULL */
    int is_path;        /* 1: ref starts with '/', '.' or '~' (Ollama still checks
                           the disk: a name that exists as a path is a path) */
    const char *name;   /* ADAPTER --name, or NULL */
    double scale;       /* ADAPTER --scale, 1.0 when not given; finite */
    int has_scale;      /* 1 if --scale was given */
    int merge;          /* ADAPTER --merge: fold into the weights at build time */
};

/* PARAMETER. */
struct mf_param {
    const char *name;        /* a name from Ollama's table (docs/modelfile.md) */
    enum mf_param_type type; /* decides which of i/f/b is set */
    int64_t i;               /* MF_PARAM_INT value */
    float f;                 /* MF_PARAM_FLOAT value (float32 like Ollama) */
    int b;                   /* MF_PARAM_BOOL value, 0 or 1 */
    const char *text;        /* the value as text; for stop, the stop string */
};

/* MESSAGE. */
struct mf_message {
    enum mf_role role;
    const char *content; /* the text, may be empty or span lines */
};

/* RUN --mount. */
struct mf_mount {
    enum mf_mount_type type;
    const char *target; /* cache: required absolute path; secret: path or NULL */
    const char *id;     /* cache: optional id; secret: required id */
    int required;       /* secret: fail when the secret is missing (default 0) */
};

/* RUN. Exactly one of shell and argv is set. */
struct mf_run {
    const char *shell;       /* shell form: passed to /bin/sh -c, or NULL */
    const char *const *argv; /* exec form (JSON array), NULL-terminated, or NULL */
    size_t argc;             /* entries in argv */
    enum mf_network network; /* --network; MF_NET_DEFAULT when not given */
    const struct mf_mount *mounts; /* --mount, in order */
    size_t n_mounts;
    int64_t timeout_ms;      /* --timeout, 0 when not given */
    int root;                /* --user=0: uid 0 inside the sandbox (still nobody outside) */
};

/* One KEY=VALUE of ENV, LABEL or ARG. */
struct mf_kv {
    const char *key;
    const char *value;   /* ENV/LABEL: the value; ARG: the value in effect
                            (build-arg, else default), NULL if it has none */
    const char *deflt;   /* ARG: the default as written (expanded), or NULL */
    int from_build_arg;  /* ARG: 1 if --build-arg supplied the value */
};

struct mf_instr {
    enum mf_instr_kind kind;
    int line, col;        /* of the keyword, 1-based, true lines (CRLF = one) */
    int end_line;         /* last line the instruction occupies */
    const char *raw;      /* the value as written, unquoted, before ARG expansion
                             (for PARAMETER/MESSAGE: after the name/role) */
    const char *value;    /* raw after ARG expansion; what Ollama reads */
    const struct mf_flag *flags; /* FROM/ADAPTER/DRAFT/RUN flags, in order */
    size_t n_flags;
    int ignored;          /* 1: deprecated PARAMETER, warned; not for the config */
    union {
        struct mf_source src;   /* FROM, ADAPTER, DRAFT */
        struct mf_param param;  /* PARAMETER */
        struct mf_message msg;  /* MESSAGE */
        struct mf_run run;      /* RUN */
        struct {
            const struct mf_kv *items;
            size_t n;
        } kv;                   /* ENV, ARG, LABEL */
    } u;
    /* For `mfc fmt` only: */
    const struct mf_comment *comments; /* comment lines just above it */
    size_t n_comments;
    int blank_before;     /* 1 if a blank line separates it from the item above */
    int quoted;           /* 1 if the value was written in quotes */
};

struct mf_diag {
    enum mf_severity severity;
    int line, col;        /* 1-based; line 0 for the whole file */
    int len;              /* characters to underline (at least 1) */
    const char *message;  /* one sentence, no trailing newline */
    const char *hint;     /* a suggestion, or NULL */
};

struct mf_modelfile_arena; /* private */

struct mf_modelfile {
    const char *name;              /* display name for messages ("Modelfile") */
    struct mf_instr *instrs;       /* in file order; instructions with errors
                                      are left out */
    size_t n_instrs;
    struct mf_diag *diags;         /* errors and warnings, in file order */
    size_t n_diags;
    size_t n_errors, n_warnings;
    const struct mf_comment *trailing_comments; /* after the last instruction */
    size_t n_trailing_comments;
    const char *text;              /* the source decoded to UTF-8 (for diagnostics) */
    size_t text_len;
    const size_t *line_starts;     /* byte offset in text of each line (CRLF, LF or a
                                      lone CR ends a line) */
    size_t n_lines;
    struct mf_modelfile_arena *arena; /* owns all of the above */
};

/* One --build-arg NAME=VALUE. */
struct mf_build_arg {
    const char *name;
    const char *value;
};

struct mf_modelfile_opts {
    const char *name;                      /* for messages; NULL: "Modelfile" */
    const struct mf_build_arg *build_args; /* borrowed; may be NULL */
    size_t n_build_args;
    int lenient_args; /* 1: skip checks of values that use an ARG with no value
                         (mfc fmt formats files meant for --build-arg) */
};

/* Parsing */

/* Parses len bytes of a Modelfile (UTF-8, UTF-8/UTF-16LE/UTF-16BE with a
 * BOM). *out always receives a modelfile to inspect, render and free, unless
 * memory ran out. Returns 0 when the file has no errors (warnings allowed),
 * MF_EINVAL when it has errors (listed in (*out)->diags; instrs holds what
 * parsed), or MF_ENOMEM with err filled and *out NULL. */
int mf_modelfile_parse(const char *data, size_t len, const struct mf_modelfile_opts *opts,
                       struct mf_modelfile **out, struct mf_err *err);

/* Frees mf and everything it owns. Accepts NULL. */
void mf_modelfile_free(struct mf_modelfile *mf);

/* Names and lookups */

/* "FROM", "ADAPTER", ... Never NULL. */
const char *mf_modelfile_kind_name(enum mf_instr_kind kind);
/* "system", "user", "assistant". */
const char *mf_modelfile_role_name(enum mf_role role);

/* Parses a Go duration ("90s", "1h30m", "250ms"; "0" is not one) into
 * milliseconds, as RUN --timeout and mfc build --run-timeout read it.
 * Returns 0, or -1 for a malformed or too large value. */
int mf_modelfile_duration_ms(const char *s, int64_t *ms);

/* Output */

/* Appends every diagnostic, rendered as
 *   Modelfile:7:1: error: message
 *       7 | source line
 *         | ^~~~
 *   hint: suggestion
 * (ANSI colours when color is set). Fails only when out hits its limit. */
int mf_modelfile_render_diags(const struct mf_modelfile *mf, int color, struct mf_buf *out,
                              struct mf_err *err);

/* Writes the shortest decimal that reads back as the float32 f ("0.7", not
 * "0.699999988"), as Go prints float32 values into Ollama's params JSON.
 * out needs at least 32 bytes. */
void mf_modelfile_float_str(float f, char *out, size_t size);

/* Flags for mf_modelfile_to_json. */
#define MF_MODELFILE_JSON_NO_POS 1u   /* leave out line/col (for comparisons) */
#define MF_MODELFILE_JSON_NO_DIAGS 2u /* leave out diagnostics */

/* The parsed file as JSON (docs/modelfile.md, "JSON output"). Returns a new
 * reference, or NULL when memory ran out. Floats are float32 values given
 * in their shortest decimal form; dump with JSON_REAL_PRECISION(15) or more. */
json_t *mf_modelfile_to_json(const struct mf_modelfile *mf, unsigned flags);

/* Appends the canonical form of a modelfile that parsed without errors:
 * upper-case keywords, one space between fields, values quoted by one rule
 * (docs/modelfile.md, "Canonical form"), comments kept, runs of blank lines
 * folded to one, LF line ends, UTF-8 without BOM. The result is checked by
 * parsing it again; a value that cannot be written in Modelfile syntax, or
 * any change of meaning, fails with MF_EINVAL and the line named, and out is
 * left as it was. */
int mf_modelfile_format(const struct mf_modelfile *mf, const struct mf_modelfile_opts *opts,
                        struct mf_buf *out, struct mf_err *err);

#endif
