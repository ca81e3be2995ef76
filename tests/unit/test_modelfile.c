/*
 * test_modelfile.c: unit tests for the Modelfile front end (compiler/modelfile*.c).
 *
 * Three layers: (1) Ollama's own parser tests (parser/parser_test.go),
 * ported case by case against the lexer alone, comparing the commands
 * Ollama's ParseFile would return; (2) golden files: every
 * tests/data/modelfile/NAME.Modelfile is parsed (with NAME.args as
 * --build-args when present) and compared with NAME.expect, which holds
 * the JSON when the file is valid or the rendered diagnostics when not
 * (MFC_UPDATE_GOLDEN=1 rewrites them; review the diff); (3) properties:
 * parse(fmt(x)) == parse(x) and fmt(fmt(x)) == fmt(x) over every golden
 * and every fuzz seed, plus encodings, CRLF line numbers, error recovery,
 * build-args, and the helpers (semver, durations, suggestions, IsPrint).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <dirent.h>

#include "common/file.h"
#include "common/json.h"
#include "common/utf8.h"
#include "compiler/modelfile.h"
#include "compiler/modelfile_int.h"

static const char *srcdir(void)
{
    const char *s = getenv("MFC_SRCDIR");
    return s ? s : ".";
}

static struct mf_modelfile *parse_n(const char *s, size_t n, const struct mf_build_arg *ba,
                                    size_t nba, int *rc)
{
    struct mf_modelfile_opts o = {.name = "Modelfile", .build_args = ba, .n_build_args = nba};
    struct mf_modelfile *mf = NULL;
    struct mf_err err;
    *rc = mf_modelfile_parse(s, n, &o, &mf, &err);
    assert_non_null(mf);
    return mf;
}

static struct mf_modelfile *parse(const char *s, int *rc)
{
    return parse_n(s, strlen(s), NULL, 0, rc);
}

static char *render(const struct mf_modelfile *mf)
{
    struct mf_buf b;
    struct mf_err err;
    mf_buf_init(&b, 1 << 24);
    assert_int_equal(mf_modelfile_render_diags(mf, 0, &b, &err), 0);
    return mf_buf_take(&b);
}

static char *to_json_text(const struct mf_modelfile *mf, unsigned flags)
{
    struct mf_buf b;
    struct mf_err err;
    json_t *j = mf_modelfile_to_json(mf, flags);
    assert_non_null(j);
    mf_buf_init(&b, 1 << 26);
    assert_int_equal(mf_json_dump(j, JSON_INDENT(2) | JSON_REAL_PRECISION(15), &b, &err), 0);
    json_decref(j);
    assert_int_equal(mf_buf_putc(&b, '\n', &err), 0);
    return mf_buf_take(&b);
}

static char *format_with(const struct mf_modelfile *mf, const struct mf_modelfile_opts *o,
                         int *rc, struct mf_err *err)
{
    struct mf_buf b;
    mf_buf_init(&b, 1 << 26);
    *rc = mf_modelfile_format(mf, o, &b, err);
    return mf_buf_take(&b);
}

static char *format(const struct mf_modelfile *mf, int *rc, struct mf_err *err)
{
    return format_with(mf, NULL, rc, err);
}

/* parse(fmt(x)) has the meaning of x, and fmt(fmt(x)) == fmt(x), with the
 * build-args x was parsed with. */
static void check_round_trip_args(const struct mf_modelfile *mf, const struct mf_build_arg *ba,
                                  size_t nba, const char *what)
{
    struct mf_modelfile_opts o = {.name = "Modelfile", .build_args = ba, .n_build_args = nba};
    struct mf_err err;
    int rc, rc2;
    char *once = format_with(mf, &o, &rc, &err);
    if (rc != 0)
        fail_msg("%s: fmt failed: %s", what, err.msg);
    struct mf_modelfile *again = parse_n(once, strlen(once), ba, nba, &rc2);
    assert_int_equal(rc2, 0);
    char *a = to_json_text(mf, MF_MODELFILE_JSON_NO_POS | MF_MODELFILE_JSON_NO_DIAGS);
    char *b = to_json_text(again, MF_MODELFILE_JSON_NO_POS | MF_MODELFILE_JSON_NO_DIAGS);
    assert_string_equal(a, b);
    char *twice = format_with(again, &o, &rc2, &err);
    assert_int_equal(rc2, 0);
    assert_string_equal(once, twice);
    free(a);
    free(b);
    free(once);
    free(twice);
    mf_modelfile_free(again);
}

static void check_round_trip(const struct mf_modelfile *mf, const char *what)
{
    check_round_trip_args(mf, NULL, 0, what);
}

/* -------------------------------------------- Ollama's parser_test.go */

/* The commands Ollama's ParseFile returns, one "name=args" per line, newlines
 * in args shown as \n; "ERROR" when the lexer reports an error. */
static char *ollama_view(const char *data, size_t len)
{
    struct mf_modelfile *mf;
    struct mf_lexcmd *c = NULL;
    size_t n = 0;
    struct mf_buf b;
    struct mf_err err;
    assert_int_equal(mf_modelfile_lex_only(data, len, &mf, &c, &n), 0);
    mf_buf_init(&b, 1 << 20);
    if (mf->n_errors)
        mf_buf_puts(&b, "ERROR", &err);
    for (size_t i = 0; !mf->n_errors && i < n; i++) {
        const char *name = c[i].kind == MF_INSTR_FROM        ? "model"
                           : c[i].kind == MF_INSTR_PARAMETER ? c[i].arg
                                                             : mf_modelfile_kind_name(c[i].kind);
        for (const char *p = name; *p; p++)
            mf_buf_putc(&b, (char)(*p >= 'A' && *p <= 'Z' ? *p - 'A' + 'a' : *p), &err);
        mf_buf_putc(&b, '=', &err);
        if (c[i].kind == MF_INSTR_MESSAGE)
            mf_buf_printf(&b, &err, "%s: ", c[i].arg);
        for (const char *p = c[i].raw; *p; p++)
            mf_buf_puts(&b, *p == '\n' ? "\\n" : *p == '\r' ? "\\r" : (char[]){*p, 0}, &err);
        mf_buf_putc(&b, '\n', &err);
    }
    mf_modelfile_free(mf);
    return mf_buf_take(&b);
}

struct ocase {
    const char *input;
    const char *want; /* ollama_view(), or "ERROR" */
};

static void run_ocases(const struct ocase *c, size_t n, const char *prefix)
{
    for (size_t i = 0; i < n; i++) {
        char in[2048];
        snprintf(in, sizeof in, "%s%s", prefix, c[i].input);
        char *got = ollama_view(in, strlen(in));
        if (strcmp(got, c[i].want) != 0)
            fail_msg("case %zu %s: got [%s] want [%s]", i, c[i].input, got, c[i].want);
        free(got);
    }
}

static void test_ollama_from(void **state)
{
    static const struct ocase c[] = {
        {"FROM \"FOO  BAR  \"", "model=FOO  BAR  \n"},
        {"FROM \"FOO BAR\"\nPARAMETER param1 value1", "model=FOO BAR\nparam1=value1\n"},
        {"FROM     FOOO BAR    ", "model=FOOO BAR\n"},
        {"FROM /what/is/the path ", "model=/what/is/the path\n"},
        {"FROM foo", "model=foo\n"},
        {"FROM /path/to/model/fp16.bin", "model=/path/to/model/fp16.bin\n"},
        {"FROM llama3:7b-instruct-q4_K_M", "model=llama3:7b-instruct-q4_K_M\n"},
        {"PARAMETER param1 value1\nFROM foo", "param1=value1\nmodel=foo\n"},
        {"PARAMETER what the \nFROM lemons make lemonade ",
         "what=the\nmodel=lemons make lemonade\n"},
    };
    run_ocases(c, sizeof c / sizeof c[0], "");
    int rc;
    mf_modelfile_free(parse("", &rc)); /* errMissingFrom */
    assert_int_equal(rc, MF_EINVAL);
    mf_modelfile_free(parse("PARAMETER top_k 1", &rc));
    assert_int_equal(rc, MF_EINVAL);
}

static void test_ollama_parameters(void **state)
{
    static const struct ocase c[] = {
        {"numa true", "numa=true\n"},
        {"num_ctx 1", "num_ctx=1\n"},
        {"use_mmap true", "use_mmap=true\n"},
        {"top_p 1.0", "top_p=1.0\n"},
        {"min_p 0.05", "min_p=0.05\n"},
        {"penalize_newline true", "penalize_newline=true\n"},
        {"stop ### User:", "stop=### User:\n"},
        {"stop ### User: ", "stop=### User:\n"},
        {"stop \"### User:\"", "stop=### User:\n"},
        {"stop \"### User: \"", "stop=### User: \n"},
        {"stop \"\"\"### User:\"\"\"", "stop=### User:\n"},
        {"stop \"\"\"### User:\n\"\"\"", "stop=### User:\\n\n"},
        {"stop <|endoftext|>", "stop=<|endoftext|>\n"},
        {"stop </s>", "stop=</s>\n"},
        {" x 1", "=x 1\n"},       /* PARAMETER  x 1: empty name */
        {"num-ctx 1", "ERROR"},   /* unexpected EOF: num */
        {"num_ctx\n", "ERROR"},
    };
    static const char *pre = "FROM foo\nPARAMETER ";
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        char want[256];
        snprintf(want, sizeof want, "%s%s", strcmp(c[i].want, "ERROR") ? "model=foo\n" : "",
                 c[i].want);
        struct ocase one = {c[i].input, want};
        run_ocases(&one, 1, pre);
    }
}

static void test_ollama_messages(void **state)
{
    static const struct ocase c[] = {
        {"MESSAGE system You are a file parser. Always parse things.\n",
         "model=foo\nmessage=system: You are a file parser. Always parse things.\n"},
        {"MESSAGE system You are a file parser. Always parse things.",
         "model=foo\nmessage=system: You are a file parser. Always parse things.\n"},
        {"MESSAGE system You are.\nMESSAGE user Hey there!\nMESSAGE assistant Hello!\n",
         "model=foo\nmessage=system: You are.\nmessage=user: Hey there!\n"
         "message=assistant: Hello!\n"},
        {"MESSAGE system \"\"\"\nYou are a multiline file parser.\n\"\"\"\n",
         "model=foo\nmessage=system: \\nYou are a multiline file parser.\\n\n"},
        {"MESSAGE badguy I'm a bad guy!\n", "ERROR"},
        {"MESSAGE system\n", "ERROR"},
        {"MESSAGE system", "ERROR"},
        {"MESSAGE System hi\n", "ERROR"},
    };
    run_ocases(c, sizeof c / sizeof c[0], "FROM foo\n");
}

static void test_ollama_quoted(void **state)
{
    static const struct ocase c[] = {
        {"SYSTEM \"\"\"\nThis is a\nmultiline system.\n\"\"\"\n",
         "model=foo\nsystem=\\nThis is a\\nmultiline system.\\n\n"},
        {"SYSTEM \"\"\"\nThis is a\nmultiline system.\"\"\"\n",
         "model=foo\nsystem=\\nThis is a\\nmultiline system.\n"},
        {"SYSTEM \"\"\"This is a\nmultiline system.\"\"\"\n",
         "model=foo\nsystem=This is a\\nmultiline system.\n"},
        {"SYSTEM \"\"\"This is a multiline system.\"\"\"\n",
         "model=foo\nsystem=This is a multiline system.\n"},
        {"SYSTEM \"\"\"This is a multiline system.\"\"\n", "ERROR"},
        {"SYSTEM \"\n", "ERROR"},
        {"SYSTEM \"\"\"\nThis is a multiline system with \"quotes\".\n\"\"\"\n",
         "model=foo\nsystem=\\nThis is a multiline system with \"quotes\".\\n\n"},
        {"SYSTEM \"\"\"\"\"\"\n", "model=foo\nsystem=\n"},
        {"SYSTEM \"\"\n", "model=foo\nsystem=\n"},
        {"SYSTEM \"'\"\n", "model=foo\nsystem='\n"},
        {"SYSTEM \"\"\"''\"'\"\"'\"\"'\"'''''\"\"'\"\"'\"\"\"\n",
         "model=foo\nsystem=''\"'\"\"'\"\"'\"'''''\"\"'\"\"'\n"},
        {"TEMPLATE \"\"\"\n{{ .Prompt }}\n\"\"\"", "model=foo\ntemplate=\\n{{ .Prompt }}\\n\n"},
        {"SYSTEM \"a\" b\n", "ERROR"},               /* never closes */
        {"SYSTEM \"a\" b\nc\"\n", "model=foo\nsystem=a\" b\\nc\n"}, /* ... until it does */
        {"SYSTEM \r\n", "model=foo\nsystem=\n"},
        {"SYSTEM\n", "ERROR"},
        {"SYSTEM", "ERROR"},
        {"SYSTEM ", "model=foo\nsystem=\n"},
        /* Ollama keeps "a\r\nb"; mfc makes a value's line breaks LF (docs/modelfile.md) */
        {"SYSTEM \"\"\"a\r\nb\"\"\"\r\n", "model=foo\nsystem=a\\nb\n"},
    };
    run_ocases(c, sizeof c / sizeof c[0], "FROM foo\n");
}

static void test_ollama_misc(void **state)
{
    static const struct ocase c[] = {
        {"\n# comment\nFROM foo\n\t", "model=foo\n"},
        {"FROM foo # x", "model=foo # x\n"},
        {"\nFROM foo\nBADCOMMAND param1 value1\n", "ERROR"},
        {"FROM foo\nFROM3 bar\n", "ERROR"},
        {"from foo\nAdApTeR bar\nlicense a\nrequires 0.1.0\ndraft d\nrenderer r\nparser p\n",
         "model=foo\nadapter=bar\nlicense=a\nrequires=0.1.0\ndraft=d\nrenderer=r\nparser=p\n"},
        {"FROM foo\x01\nSYSTEM a\x02" "b\n", "model=foo\nsystem=ab\n"}, /* not IsPrint: dropped */
        {"\x01" "FROM foo\n", "model=foo\n"}, /* a dropped rune may start the name */
        {"FROM foo\nSYSTEM a\tb\n", "model=foo\nsystem=a\tb\n"},
        {"FROM\tfoo\n", "model=foo\n"},
        {"FROM foo\rSYSTEM x\r", "model=foo\nsystem=x\n"},
    };
    run_ocases(c, sizeof c / sizeof c[0], "");
}

/* Encodes UTF-8 s as UTF-16 with a BOM (the test makes its own files). */
static char *to_utf16(const char *s, int big, size_t *len)
{
    size_t n = strlen(s), o = 0;
    char *out = malloc(4 * n + 2);
    unsigned units[2];
    out[o++] = big ? (char)0xFE : (char)0xFF;
    out[o++] = big ? (char)0xFF : (char)0xFE;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        int k = mf_utf8_decode(s + i, n - i, &cp);
        assert_true(k > 0);
        i += (size_t)k;
        int nu = 1;
        units[0] = cp;
        if (cp >= 0x10000) {
            units[0] = 0xD800 + ((cp - 0x10000) >> 10);
            units[1] = 0xDC00 + ((cp - 0x10000) & 0x3FF);
            nu = 2;
        }
        for (int u = 0; u < nu; u++) {
            out[o++] = (char)(big ? units[u] >> 8 : units[u] & 0xFF);
            out[o++] = (char)(big ? units[u] & 0xFF : units[u] >> 8);
        }
    }
    *len = o;
    return out;
}

static void test_ollama_utf16(void **state)
{
    const char *data = "FROM bob\nPARAMETER param1 1\nPARAMETER param2 4096\n"
                       "SYSTEM You are a utf16 file.\n";
    for (int big = 0; big <= 1; big++) {
        size_t n;
        char *u = to_utf16(data, big, &n);
        char *got = ollama_view(u, n);
        assert_string_equal(got, "model=bob\nparam1=1\nparam2=4096\n"
                                 "system=You are a utf16 file.\n");
        free(got);
        free(u);
    }
}

/* ------------------------------------------------------------ encodings */

static void test_utf16_same_meaning(void **state)
{
    const char *data = "# \xc3\xa9t\xc3\xa9\nFROM llama3\nSYSTEM h\xc3\xa9llo \xf0\x9f\x98\x80 "
                       "\xe4\xb8\xad\xe6\x96\x87\nMESSAGE user \"\"\"a\r\nb\"\"\"\r\n";
    int rc;
    struct mf_modelfile *ref = parse(data, &rc);
    assert_int_equal(rc, 0);
    char *want = to_json_text(ref, MF_MODELFILE_JSON_NO_DIAGS);
    for (int big = 0; big <= 1; big++) {
        size_t n;
        char *u = to_utf16(data, big, &n);
        struct mf_modelfile *mf = parse_n(u, n, NULL, 0, &rc);
        assert_int_equal(rc, 0);
        assert_int_equal(mf->n_warnings, 0);
        char *got = to_json_text(mf, MF_MODELFILE_JSON_NO_DIAGS);
        assert_string_equal(got, want);
        free(got);
        free(u);
        mf_modelfile_free(mf);
    }
    free(want);
    mf_modelfile_free(ref);
}

static void test_bad_encoding_is_replaced(void **state)
{
    /* UTF-16LE: a lone high surrogate, then an odd trailing byte */
    static const char le[] = "\xff\xfe" "F\0R\0O\0M\0 \0x\0\n\0S\0Y\0S\0T\0E\0M\0 \0"
                             "\x00\xd8" "a\0\n\0#\0 \0c\0" "Z";
    int rc;
    struct mf_modelfile *mf = parse_n(le, sizeof le - 1, NULL, 0, &rc);
    assert_int_equal(rc, 0);
    assert_int_equal(mf->n_instrs, 2);
    assert_string_equal(mf->instrs[1].value, "\xef\xbf\xbd" "a");
    assert_int_equal(mf->n_warnings, 1);
    assert_string_equal(mf->diags[0].message, "2 invalid byte sequence(s) read as U+FFFD");
    assert_string_equal(mf->trailing_comments[0].text, " c\xef\xbf\xbd");
    mf_modelfile_free(mf);
}

/* ------------------------------------------------- lines, errors, recovery */

static void test_crlf_true_line_numbers(void **state)
{
    int rc;
    struct mf_modelfile *mf = parse("FROM x\r\nPARAMETER top_k x\r\nSYSTEM \"\"\"a\r\nb\"\"\"\r\n"
                                    "FORM y\r\n",
                                    &rc);
    assert_int_equal(rc, MF_EINVAL);
    assert_int_equal(mf->n_errors, 2);
    assert_int_equal(mf->diags[0].line, 2);
    assert_int_equal(mf->diags[0].col, 17);
    assert_int_equal(mf->diags[1].line, 5); /* Ollama would say 9: it counts \r and \n */
    assert_int_equal(mf->diags[1].col, 1);
    assert_string_equal(mf->instrs[1].value, "a\nb"); /* CRLF inside """ becomes LF */
    char *text = render(mf);
    assert_non_null(strstr(text, "Modelfile:5:1: error: unknown instruction 'FORM'\n"
                                 "    5 | FORM y\n      | ^~~~\nhint: did you mean FROM?\n"));
    free(text);
    mf_modelfile_free(mf);
    mf = parse("FROM x\rFORM y\r", &rc); /* a lone CR ends a line too */
    assert_int_equal(mf->diags[0].line, 2);
    mf_modelfile_free(mf);
}

static void test_several_errors_in_one_run(void **state)
{
    int rc;
    struct mf_modelfile *mf = parse("FROM x\nPARAMETER num-ctx 1\nPARAMETER top_k 1\n"
                                    "MESSAGE bad \"\"\"\nFORM inside the value\n\"\"\"\n"
                                    "PARAMETER temperature warm\nSYSTEM ok\n",
                                    &rc);
    assert_int_equal(rc, MF_EINVAL);
    assert_int_equal(mf->n_errors, 3); /* FORM inside the discarded value is not an error */
    assert_int_equal(mf->diags[0].line, 2);
    assert_int_equal(mf->diags[1].line, 4);
    assert_int_equal(mf->diags[2].line, 7);
    assert_int_equal(mf->n_instrs, 3); /* FROM, top_k, SYSTEM survive */
    assert_int_equal(mf->instrs[2].kind, MF_INSTR_SYSTEM);
    mf_modelfile_free(mf);
}

static void test_error_limit(void **state)
{
    struct mf_buf b;
    struct mf_err err;
    int rc;
    mf_buf_init(&b, 1 << 20);
    for (int i = 0; i < 200; i++)
        mf_buf_puts(&b, "BAD x\n", &err);
    struct mf_modelfile *mf = parse(b.data, &rc);
    assert_int_equal(rc, MF_EINVAL);
    assert_int_equal(mf->n_errors, MF_MODELFILE_MAX_ERRORS + 1);
    assert_non_null(strstr(mf->diags[mf->n_diags - 1].message, "too many errors"));
    mf_modelfile_free(mf);
    mf_buf_free(&b);
}

static void test_too_large(void **state)
{
    size_t n = MF_MODELFILE_MAX_BYTES + 1;
    char *big = malloc(n);
    int rc;
    memset(big, '#', n);
    struct mf_modelfile *mf = parse_n(big, n, NULL, 0, &rc);
    assert_int_equal(rc, MF_EINVAL);
    assert_non_null(strstr(mf->diags[0].message, "larger than"));
    mf_modelfile_free(mf);
    free(big);
}

static void test_caret_follows_tabs(void **state)
{
    int rc;
    struct mf_modelfile *mf = parse("FROM x\n\tPARAMETER\tnum-ctx 1\n", &rc);
    char *text = render(mf);
    assert_string_equal(text, "Modelfile:2:15: error: invalid character '-' in PARAMETER name\n"
                              "    2 | \tPARAMETER\tnum-ctx 1\n"
                              "      | \t         \t   ^\n"
                              "hint: did you mean num_ctx?\n");
    free(text);
    mf_modelfile_free(mf);
}

/* -------------------------------------------------------------- semantics */

static void test_build_args(void **state)
{
    static const struct mf_build_arg ba[] = {{"MODEL", "mistral"}, {"CTX", "8192"},
                                             {"NOPE", "1"}};
    const char *src = "ARG MODEL=llama3\nARG CTX\nFROM ${MODEL}:latest\n"
                      "PARAMETER num_ctx ${CTX:-2048}\n";
    int rc;
    struct mf_modelfile *mf = parse_n(src, strlen(src), ba, 3, &rc);
    assert_int_equal(rc, 0);
    assert_string_equal(mf->instrs[2].u.src.ref, "mistral:latest");
    assert_string_equal(mf->instrs[2].raw, "${MODEL}:latest");
    assert_int_equal(mf->instrs[3].u.param.i, 8192);
    assert_true(mf->instrs[0].u.kv.items[0].from_build_arg);
    assert_string_equal(mf->instrs[0].u.kv.items[0].deflt, "llama3");
    assert_int_equal(mf->n_warnings, 1);
    assert_non_null(strstr(mf->diags[0].message, "build-arg NOPE was not consumed"));
    mf_modelfile_free(mf);
    mf = parse_n(src, strlen(src), NULL, 0, &rc); /* defaults */
    assert_int_equal(rc, 0);
    assert_string_equal(mf->instrs[2].u.src.ref, "llama3:latest");
    assert_int_equal(mf->instrs[3].u.param.i, 2048);
    mf_modelfile_free(mf);
}

static void test_arg_without_value(void **state)
{
    const char *src = "ARG CTX\nFROM x\nPARAMETER num_ctx ${CTX}\n";
    struct mf_modelfile_opts o = {.lenient_args = 1};
    struct mf_modelfile *mf = NULL;
    struct mf_err err;
    int rc;
    mf_modelfile_free(parse(src, &rc)); /* check: "" is no int */
    assert_int_equal(rc, MF_EINVAL);
    assert_int_equal(mf_modelfile_parse(src, strlen(src), &o, &mf, &err), 0); /* fmt: lenient */
    char *out = format(mf, &rc, &err);
    assert_int_equal(rc, MF_EINVAL); /* verify() parses strictly without opts... */
    free(out);
    struct mf_buf b;
    mf_buf_init(&b, 1 << 20);
    assert_int_equal(mf_modelfile_format(mf, &o, &b, &err), 0); /* ...and leniently with them */
    assert_string_equal(b.data, src);
    mf_buf_free(&b);
    mf_modelfile_free(mf);
}

static void test_plain_ollama_file_is_not_expanded(void **state)
{
    int rc;
    struct mf_modelfile *mf = parse("FROM $HOME/models/x\nPARAMETER stop ${X}\n"
                                    "TEMPLATE {{ $x := 1 }}\n", &rc);
    assert_int_equal(rc, 0);
    assert_string_equal(mf->instrs[0].u.src.ref, "$HOME/models/x");
    assert_string_equal(mf->instrs[1].u.param.text, "${X}");
    assert_string_equal(mf->instrs[2].value, "{{ $x := 1 }}");
    assert_int_equal(mf->n_warnings, 0);
    mf_modelfile_free(mf);
}

static void test_float32_json(void **state)
{
    int rc;
    struct mf_modelfile *mf = parse("FROM x\nPARAMETER temperature 0.7\nPARAMETER top_p 0.1\n",
                                    &rc);
    char *j = to_json_text(mf, MF_MODELFILE_JSON_NO_POS);
    assert_non_null(strstr(j, "\"value\": 0.7\n"));
    assert_non_null(strstr(j, "\"value\": 0.1\n"));
    assert_true(mf->instrs[1].u.param.f == 0.7f);
    free(j);
    mf_modelfile_free(mf);
}

/* ------------------------------------------------------------------- fmt */

static void test_fmt_canonical(void **state)
{
    static const char in[] =
        "from  x\nsystem \"\"\"hi\"\"\"\n\n\n# c\n  #indented\nparameter stop \" a\"\n"
        "TEMPLATE \"\"\"l1\nl2\"\"\"\nMESSAGE user \"\"\nLICENSE \"\"\"say \"x\"\"\"\"\n"
        "FROM \"a --b\"\nFROM \"plain\"\nSYSTEM \"\"x\"\nrun   echo  hi  \nSYSTEM \"a\nb\"\n"
        "# end\n";
    static const char want[] =
        "FROM x\nSYSTEM hi\n\n# c\n#indented\nPARAMETER stop \" a\"\n"
        "TEMPLATE \"\"\"l1\nl2\"\"\"\nMESSAGE user \"\"\nLICENSE say \"x\"\n"
        "FROM \"a --b\"\nFROM plain\nSYSTEM \"\"\"\"x\"\"\"\nRUN echo  hi\nSYSTEM \"\"\"a\nb\"\"\"\n"
        "# end\n";
    int rc;
    struct mf_err err;
    struct mf_modelfile *mf = parse(in, &rc);
    assert_int_equal(rc, 0);
    char *out = format(mf, &rc, &err);
    assert_int_equal(rc, 0);
    assert_string_equal(out, want);
    check_round_trip(mf, "canonical");
    free(out);
    mf_modelfile_free(mf);
}

static void test_fmt_reports_unrepresentable(void **state)
{
    int rc;
    struct mf_err err;
    struct mf_modelfile *mf = parse("FROM x\nSYSTEM s\n", &rc);
    mf->instrs[1].raw = "x\"\"\"\ny\""; /* no quote form can carry it */
    char *out = format(mf, &rc, &err);
    assert_int_equal(rc, MF_EINVAL);
    assert_non_null(strstr(err.msg, "Modelfile:2: the SYSTEM value cannot be written"));
    free(out);
    mf->instrs[1].raw = "bell\x07"; /* Ollama would drop the control character */
    out = format(mf, &rc, &err);
    assert_int_equal(rc, MF_EINVAL);
    free(out);
    mf->instrs[1].raw = "s";
    mf->instrs[1].value = "changed"; /* the output would not mean the same */
    out = format(mf, &rc, &err);
    assert_int_equal(rc, MF_EINVAL);
    assert_non_null(strstr(err.msg, "change what the file means"));
    free(out);
    mf_modelfile_free(mf);
}

static void test_fmt_refuses_errors(void **state)
{
    int rc;
    struct mf_err err;
    struct mf_modelfile *mf = parse("FROM x\nFORM y\n", &rc);
    char *out = format(mf, &rc, &err);
    assert_int_equal(rc, MF_EINVAL);
    free(out);
    mf_modelfile_free(mf);
}

/* --------------------------------------------------------------- helpers */

static void test_semver(void **state)
{
    static const char *ok[] = {"0.14.0", "1", "1.2", "1.2.3-rc.1", "1.2.3+b.5",
                               "1.2.3-0.a-b+x", "10.20.30"};
    static const char *bad[] = {"", "v1.2.3", "01.2.3", "1.02", "1.2.3.4", "1.2-rc1",
                                "1.2.3-01", "1.2.3-", "1.2.3+", "1.2.3-a..b", "1.", "a"};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
        assert_true(mf_modelfile_semver_ok(ok[i]));
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_false(mf_modelfile_semver_ok(bad[i]));
}

static void test_duration(void **state)
{
    int64_t ms;
    assert_int_equal(mf_modelfile_duration_ms("1h30m", &ms), 0);
    assert_int_equal(ms, 5400000);
    assert_int_equal(mf_modelfile_duration_ms("1.5s", &ms), 0);
    assert_int_equal(ms, 1500);
    assert_int_equal(mf_modelfile_duration_ms("250ms", &ms), 0);
    assert_int_equal(ms, 250);
    assert_int_equal(mf_modelfile_duration_ms("2\xc2\xb5s", &ms), 0);
    assert_int_equal(ms, 0);
    assert_int_equal(mf_modelfile_duration_ms("10", &ms), -1);
    assert_int_equal(mf_modelfile_duration_ms("5x", &ms), -1);
    assert_int_equal(mf_modelfile_duration_ms("", &ms), -1);
    assert_int_equal(mf_modelfile_duration_ms("-5s", &ms), -1);
}

static void test_suggest(void **state)
{
    assert_string_equal(mf_modelfile_param_suggest("tempurature"), "temperature");
    assert_string_equal(mf_modelfile_param_suggest("num-ctx"), "num_ctx");
    assert_string_equal(mf_modelfile_param_suggest("NUM_CTX"), "num_ctx");
    assert_null(mf_modelfile_param_suggest("xyzzy"));
    assert_null(mf_modelfile_param_suggest("mirostat")); /* deprecated: never suggested */
}

static void test_isprint_matches_go(void **state)
{
    assert_true(mf_modelfile_isprint('a'));
    assert_true(mf_modelfile_isprint(' '));
    assert_false(mf_modelfile_isprint('\t'));
    assert_false(mf_modelfile_isprint(0x7F));
    assert_false(mf_modelfile_isprint(0xA0));   /* NBSP: Zs, not ASCII space */
    assert_false(mf_modelfile_isprint(0x200B)); /* ZWSP: Cf */
    assert_false(mf_modelfile_isprint(0xFEFF));
    assert_false(mf_modelfile_isprint(0x0378)); /* unassigned */
    assert_false(mf_modelfile_isprint(0xE000)); /* private use */
    assert_true(mf_modelfile_isprint(0xFFFD));
    assert_true(mf_modelfile_isprint(0x1F600));
    assert_true(mf_modelfile_isprint(0x0301));  /* combining mark */
    assert_true(mf_modelfile_isprint(0x1FAE8)); /* added in Unicode 15.0 */
    assert_false(mf_modelfile_isprint(0x1FAE9)); /* still unassigned in 15.0 */
}

/* ---------------------------------------------- golden files and corpora */

static char *read_or_null(const char *path, size_t *len)
{
    char *d = NULL;
    struct mf_err err;
    size_t n = 0;
    if (len)
        *len = 0;
    if (mf_file_read(path, 1 << 26, &d, &n, &err) != 0)
        return NULL;
    if (len)
        *len = n;
    return d;
}

/* NAME.args: one NAME=VALUE per line. */
static size_t read_args(const char *path, char **buf, struct mf_build_arg *ba, size_t max)
{
    size_t n = 0;
    *buf = read_or_null(path, NULL);
    for (char *line = *buf, *next; line && *line && n < max; line = next) {
        next = strchr(line, '\n');
        next = next ? (*next = '\0', next + 1) : line + strlen(line);
        char *eq = strchr(line, '=');
        if (eq) {
            *eq = '\0';
            ba[n++] = (struct mf_build_arg){line, eq + 1};
        }
    }
    return n;
}

static void test_golden(void **state)
{
    const char *path = *state;
    char base[1024], other[1100], *args, *data;
    struct mf_build_arg ba[16];
    size_t len = 0, nba;
    int rc;
    snprintf(base, sizeof base, "%.*s", (int)(strlen(path) - strlen(".Modelfile")), path);
    snprintf(other, sizeof other, "%s.args", base);
    nba = read_args(other, &args, ba, 16);
    data = read_or_null(path, &len);
    assert_non_null(data);
    struct mf_modelfile *mf = parse_n(data, len, ba, nba, &rc);
    char *got = rc == 0 ? to_json_text(mf, 0) : render(mf);
    snprintf(other, sizeof other, "%s.expect", base);
    if (getenv("MFC_UPDATE_GOLDEN")) {
        struct mf_err err;
        assert_int_equal(mf_file_write_atomic(other, got, strlen(got), &err), 0);
    }
    char *want = read_or_null(other, NULL);
    if (!want)
        fail_msg("%s is missing (MFC_UPDATE_GOLDEN=1 writes it)", other);
    assert_string_equal(got, want);
    if (rc == 0)
        check_round_trip_args(mf, ba, nba, path);
    free(want);
    free(got);
    free(data);
    free(args);
    mf_modelfile_free(mf);
}

static void test_round_trip_fuzz_corpus(void **state)
{
    char dir[1024], path[2048];
    snprintf(dir, sizeof dir, "%s/tests/fuzz/corpus/modelfile", srcdir());
    DIR *d = opendir(dir);
    struct dirent *e;
    int parsed = 0, total = 0;
    assert_non_null(d);
    while ((e = readdir(d)) != NULL) {
        size_t len = 0;
        int rc;
        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        char *data = read_or_null(path, &len);
        assert_non_null(data);
        struct mf_modelfile *mf = parse_n(data, len, NULL, 0, &rc);
        total++;
        if (rc == 0) {
            check_round_trip(mf, path);
            parsed++;
        }
        mf_modelfile_free(mf);
        free(data);
    }
    closedir(d);
    assert_true(total >= 20);
    assert_true(parsed >= total / 2); /* most seeds are valid files */
}

static int by_name(const struct dirent **a, const struct dirent **b)
{
    return strcmp((*a)->d_name, (*b)->d_name);
}

static int is_modelfile(const struct dirent *e)
{
    size_t n = strlen(e->d_name);
    return n > 10 && strcmp(e->d_name + n - 10, ".Modelfile") == 0;
}

int main(void)
{
    static const struct CMUnitTest fixed[] = {
        cmocka_unit_test(test_ollama_from),
        cmocka_unit_test(test_ollama_parameters),
        cmocka_unit_test(test_ollama_messages),
        cmocka_unit_test(test_ollama_quoted),
        cmocka_unit_test(test_ollama_misc),
        cmocka_unit_test(test_ollama_utf16),
        cmocka_unit_test(test_utf16_same_meaning),
        cmocka_unit_test(test_bad_encoding_is_replaced),
        cmocka_unit_test(test_crlf_true_line_numbers),
        cmocka_unit_test(test_several_errors_in_one_run),
        cmocka_unit_test(test_error_limit),
        cmocka_unit_test(test_too_large),
        cmocka_unit_test(test_caret_follows_tabs),
        cmocka_unit_test(test_build_args),
        cmocka_unit_test(test_arg_without_value),
        cmocka_unit_test(test_plain_ollama_file_is_not_expanded),
        cmocka_unit_test(test_float32_json),
        cmocka_unit_test(test_fmt_canonical),
        cmocka_unit_test(test_fmt_reports_unrepresentable),
        cmocka_unit_test(test_fmt_refuses_errors),
        cmocka_unit_test(test_semver),
        cmocka_unit_test(test_duration),
        cmocka_unit_test(test_suggest),
        cmocka_unit_test(test_isprint_matches_go),
        cmocka_unit_test(test_round_trip_fuzz_corpus),
    };
    size_t nfixed = sizeof fixed / sizeof fixed[0];
    char dir[1024];
    struct dirent **names = NULL;
    snprintf(dir, sizeof dir, "%s/tests/data/modelfile", srcdir());
    int n = scandir(dir, &names, is_modelfile, by_name);
    if (n < 0)
        n = 0;
    struct CMUnitTest *all = calloc(nfixed + (size_t)n, sizeof *all);
    char **paths = calloc((size_t)n + 1, sizeof *paths);
    memcpy(all, fixed, sizeof fixed);
    for (int i = 0; i < n; i++) {
        size_t len = strlen(dir) + strlen(names[i]->d_name) + 2;
        paths[i] = malloc(len);
        snprintf(paths[i], len, "%s/%s", dir, names[i]->d_name);
        all[nfixed + (size_t)i] = (struct CMUnitTest){
            .name = names[i]->d_name, .test_func = test_golden, .initial_state = paths[i]};
    }
    int rc = _cmocka_run_group_tests("modelfile", all, nfixed + (size_t)n, NULL, NULL);
    for (int i = 0; i < n; i++) {
        free(paths[i]);
        free(names[i]);
    }
    free(names);
    free(paths);
    free(all);
    return rc;
}
