/*
 * toktool.c: runtime/tokenizer from the command line, the counterpart of
 * tests/tools/llama-tok.mjs (llama.cpp), for differential tests and the
 * tokenizer benchmark.
 *
 *   toktool ids VOCAB.gguf STRINGS.json [--special | --both]
 *       the ids of each string of a JSON array, as a JSON array of arrays
 *       (no BOS/EOS; --special parses control tokens; --both prints a line
 *       without, then one with), byte for byte what llama-tok.mjs prints
 *   toktool bench VOCAB.gguf TEXT [--seconds S] [--chunk BYTES]
 *       encodes the file repeatedly for S CPU seconds (default 3) and prints
 *       {"bytes","tokens","runs","mb_per_s"} (MB per CPU second); --chunk
 *       encodes it as separate texts of about BYTES each (cut at character
 *       boundaries), like a stream of short prompts
 *
 * Exit status: 0, 1 on any error (named on stderr), 2 for usage.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/err.h"
#include "common/file.h"
#include "common/gguf.h"
#include "common/json.h"
#include "common/num.h"
#include "text/tokenizer.h"

#define MAX_INPUT ((size_t)1 << 30) /* bytes of a strings file or text */

/* CPU seconds of this process: the build machines are shared, so wall time
 * would measure the neighbours too. */
static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int load(const char *path, struct tok **t, struct mf_err *err)
{
    struct gguf_file *gf;
    int rc = gguf_open(path, &gf, err);
    if (rc)
        return rc;
    rc = tok_load_gguf(gf, t, err);
    gguf_close(gf);
    return rc;
}

static int print_ids(const struct tok *t, json_t *js, unsigned flags, struct mf_err *err)
{
    struct tok_ids ids;
    int rc = 0;
    tok_ids_init(&ids, MAX_INPUT);
    putchar('[');
    for (size_t i = 0; i < json_array_size(js) && !rc; i++) {
        json_t *s = json_array_get(js, i);
        ids.n = 0;
        rc = tok_encode(t, json_string_value(s), json_string_length(s), flags, &ids, err);
        printf("%s[", i ? "," : "");
        for (size_t k = 0; k < ids.n && !rc; k++)
            printf("%s%d", k ? "," : "", (int)ids.v[k]);
        putchar(']');
    }
    puts("]");
    tok_ids_free(&ids);
    return rc;
}

static int ids_of_file(const struct tok *t, const char *file, int both, unsigned flags,
                       struct mf_err *err)
{
    char *text;
    size_t len;
    int rc = mf_file_read(file, MAX_INPUT, &text, &len, err);
    if (rc)
        return rc;
    json_t *js = mf_json_parse(text, len, file, err);
    free(text);
    if (!js)
        return err->code;
    if (!json_is_array(js)) {
        json_decref(js);
        return mf_err_set(err, MF_EFORMAT, "%s: not a JSON array", file);
    }
    rc = print_ids(t, js, both ? 0 : flags, err);
    if (!rc && both)
        rc = print_ids(t, js, TOK_PARSE_SPECIAL, err);
    json_decref(js);
    return rc;
}

/* Encodes text[0..len) as one text, or in pieces of about chunk bytes. */
static int encode_all(const struct tok *t, const char *text, size_t len, size_t chunk,
                      struct tok_ids *ids, struct mf_err *err)
{
    int rc = 0;
    ids->n = 0;
    for (size_t off = 0; off < len && !rc;) {
        size_t n = chunk && chunk < len - off ? chunk : len - off;
        while (off + n < len && ((unsigned char)text[off + n] & 0xC0) == 0x80)
            n++; /* do not cut a character */
        rc = tok_encode(t, text + off, n, 0, ids, err);
        off += n;
    }
    return rc;
}

static int bench(const struct tok *t, const char *file, double seconds, size_t chunk,
                 struct mf_err *err)
{
    char *text;
    size_t len;
    int rc = mf_file_read(file, MAX_INPUT, &text, &len, err);
    if (rc)
        return rc;
    struct tok_ids ids;
    tok_ids_init(&ids, MAX_INPUT);
    rc = encode_all(t, text, len, chunk, &ids, err); /* warm-up */
    double t0 = now(), el = 0;
    long runs = 0;
    while (!rc && el < seconds) {
        rc = encode_all(t, text, len, chunk, &ids, err);
        runs++;
        el = now() - t0;
    }
    if (!rc)
        printf("{\"bytes\":%zu,\"tokens\":%zu,\"runs\":%ld,\"mb_per_s\":%.2f}\n", len, ids.n, runs,
               (double)len * (double)runs / el / 1e6);
    tok_ids_free(&ids);
    free(text);
    return rc;
}

int main(int argc, char **argv)
{
    struct mf_err err;
    struct tok *t = NULL;
    mf_err_clear(&err);
    if (argc < 4 || (strcmp(argv[1], "ids") && strcmp(argv[1], "bench"))) {
        fprintf(stderr, "usage: toktool ids VOCAB.gguf STRINGS.json [--special | --both]\n"
                        "       toktool bench VOCAB.gguf TEXT [--seconds S] [--chunk BYTES]\n");
        return 2;
    }
    unsigned flags = 0;
    int both = 0;
    double seconds = 3;
    uint64_t chunk = 0;
    for (int i = 4; i < argc; i++) {
        if (strcmp(argv[i], "--special") == 0) {
            flags |= TOK_PARSE_SPECIAL;
        } else if (strcmp(argv[i], "--chunk") == 0 && i + 1 < argc) {
            if (mf_num_parse_u64(argv[++i], &chunk) || chunk == 0) {
                fprintf(stderr, "toktool: bad --chunk '%s'\n", argv[i]);
                return 2;
            }
        } else if (strcmp(argv[i], "--both") == 0) {
            both = 1;
        } else if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc) {
            if (mf_num_parse_f64(argv[++i], &seconds) || seconds <= 0) {
                fprintf(stderr, "toktool: bad --seconds '%s'\n", argv[i]);
                return 2;
            }
        } else {
            fprintf(stderr, "toktool: unknown argument '%s'\n", argv[i]);
            return 2;
        }
    }
    int rc = load(argv[2], &t, &err);
    if (!rc)
        rc = strcmp(argv[1], "ids") == 0 ? ids_of_file(t, argv[3], both, flags, &err)
                                         : bench(t, argv[3], seconds, (size_t)chunk, &err);
    tok_free(t);
    if (rc) {
        fprintf(stderr, "toktool: %s\n", err.msg);
        return 1;
    }
    return 0;
}
