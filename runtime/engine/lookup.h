/*
 * lookup.h: prompt lookup, the proposer of speculative decoding that needs
 * no second model: the tokens that followed the latest earlier occurrence
 * of the sequence's last n tokens (vLLM's "ngram" method, llama.cpp's
 * lookup decoding without its caches). Copy-heavy requests (editing code or
 * a document given in the prompt) repeat long runs of their context.
 */
#ifndef MFC_LOOKUP_H
#define MFC_LOOKUP_H

#include <stdint.h>

#include "common/limits.h"

#define LOOKUP_NGRAM_MAX MF_SPEC_NGRAM_MAX /* the longest n-gram looked up */

/* Proposes up to max tokens to follow hist[0..n): for g from ngram_max down
 * to ngram_min (clamped to 1..LOOKUP_NGRAM_MAX), the latest i < n - g with
 * hist[i..i+g) == hist[n-g..n) gives hist[i+g ..], as many as exist up to
 * max; the first g that matches wins. Writes them to out (max entries) and
 * returns how many (0: no match, or n too short). Pure; O(n x ngram_max). */
int32_t lookup_propose(const int32_t *hist, int32_t n, int32_t ngram_min, int32_t ngram_max,
                       int32_t max, int32_t *out);

#endif
