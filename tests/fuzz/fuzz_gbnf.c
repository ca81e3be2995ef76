/*
 * fuzz_gbnf.c: libFuzzer target for runtime/grammar's GBNF parser and
 * matcher.
 *
 * The input is grammar text. A grammar that compiles is run: its start
 * state, then the bytes of the input fed one by one, and token masks over a
 * small vocabulary (every single byte, a few multi-byte pieces, one
 * end-of-generation token) for each state reached, each checked against
 * feeding the token alone. Errors are expected; crashes, leaks, mask
 * disagreements and hangs past the state limits are not. The vocabulary is
 * built once per process.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/grammar/gram.h"

#define NV 264

static struct gram_vocab *vocab;
static char pieces[NV][4];
static size_t lens[NV];

static void build_vocab(void)
{
    static const char *extra[] = {"{\"", "\":", "ab", "\xC3\xA9", "\xE2\x82", "\\n", "  "};
    const char *ptrs[NV];
    uint8_t eog[NV] = {0};
    struct mf_err err;
    for (int i = 0; i < NV; i++) {
        if (i < 256) {
            pieces[i][0] = (char)i;
            lens[i] = 1;
        } else if (i - 256 < 7) {
            lens[i] = strlen(extra[i - 256]);
            memcpy(pieces[i], extra[i - 256], lens[i]);
        }
        ptrs[i] = pieces[i];
    }
    eog[NV - 1] = 1;
    gram_vocab_from_pieces(ptrs, lens, eog, NV, &vocab, &err);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct gram *g = NULL;
    struct mf_err err;
    uint32_t mask[(NV + 31) / 32];
    if (!vocab)
        build_vocab();
    if (gram_new((const char *)data, size, vocab, &g, &err))
        return 0;
    uint32_t st = gram_start(g, &err);
    for (size_t i = 0; i <= size && i < 64 && st != GRAM_DEAD; i++) {
        if (gram_mask(g, st, mask, &err) == 0) {
            for (int t = 0; t < NV; t++) {
                int bit = (int)((mask[t >> 5] >> (t & 31)) & 1u);
                int ok = gram_feed_token(g, st, t, &err) != GRAM_DEAD;
                if (bit != ok)
                    abort();
            }
        }
        if (i < size)
            st = gram_feed(g, st, data + i, 1, &err);
    }
    gram_unref(g);
    return 0;
}
