/*
 * fuzz_hf_config.c: libFuzzer target for the Hugging Face importer's text
 * parsers (convert/hf_config.c, convert/hf_tokenizer.c).
 *
 * The input is up to four parts separated by NUL bytes: config.json,
 * tokenizer.json, tokenizer_config.json, chat_template.jinja (missing parts
 * are absent files). The config is parsed (a failed parse falls back to no
 * config, vocabulary sizes above 65536 are dropped so one input stays cheap),
 * its family's keys and the vocabulary's added to a GGUF writer that is then
 * discarded (nothing is written). Seeds in corpus/hf_config/ are small
 * Llama 3, GPT-2 and SentencePiece-style directories flattened this way, and
 * the config.json of every family mfc converts (fam-*: Qwen2/3, Qwen3-MoE,
 * Mixtral, Gemma 2/3 and its multimodal wrapper, Phi-3 with LongRoPE).
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/gguf.h"
#include "convert/hf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *part[4] = {NULL, NULL, NULL, NULL};
    size_t len[4] = {0, 0, 0, 0};
    size_t at = 0;
    for (int i = 0; i < 4 && at <= size; i++) {
        const uint8_t *nul = memchr(data + at, 0, size - at);
        size_t end = nul ? (size_t)(nul - data) : size;
        part[i] = (const char *)data + at;
        len[i] = end - at;
        at = end + 1;
        if (!nul)
            break;
    }
    struct mf_err err;
    struct hf_config c;
    int have_cfg = part[0] && hf_config_parse(part[0], len[0], "config.json", &c, &err) == 0;
    if (have_cfg && c.n_vocab > 65536)
        c.n_vocab = 0;
    struct hf_vocab *v = NULL;
    if (part[1]) {
        struct hf_tokenizer_src src = {part[1], len[1], part[2], len[2], part[3], len[3]};
        if (hf_vocab_build(&src, have_cfg ? &c : NULL, &v, &err) != 0)
            v = NULL;
    }
    if (!have_cfg && !v)
        return 0;
    char path[64];
    snprintf(path, sizeof path, "/tmp/fuzz_hf_config_%ld.gguf", (long)getpid());
    struct gguf_writer *w = NULL;
    if (gguf_writer_open(path, &w, &err) == 0) {
        int rc = have_cfg ? hf_config_write(&c, QUANT_FTYPE_MOSTLY_F16, w, &err) : 0;
        if (!rc && v)
            (void)hf_vocab_write(v, w, &err);
    }
    gguf_writer_free(w);
    hf_vocab_free(v);
    return 0;
}
