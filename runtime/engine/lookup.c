/*
 * lookup.c: prompt lookup proposals (lookup.h).
 *
 * Owns nothing. A scan backwards from the end finds the latest earlier
 * occurrence of the last g tokens, longest g first: the latest occurrence
 * is the one a copy in progress is most likely following (an edited
 * function repeats the nearest original, not the first one). The scan
 * compares the last token first, so a mismatch costs one compare at most
 * positions; a 4096-token history with n-grams up to 3 takes a few
 * microseconds, which is why there is no index to keep in step with the
 * sequence (vLLM's ngram proposer scans too).
 */
#include "runtime/engine/lookup.h"

/* 1 when hist[i..i+g) equals hist[n-g..n), compared from the end. */
static int same(const int32_t *hist, int32_t n, int32_t i, int32_t g)
{
    for (int32_t j = g - 1; j >= 0; j--) {
        if (hist[i + j] != hist[n - g + j])
            return 0;
    }
    return 1;
}

int32_t lookup_propose(const int32_t *hist, int32_t n, int32_t ngram_min, int32_t ngram_max,
                       int32_t max, int32_t *out)
{
    if (ngram_min < 1)
        ngram_min = 1;
    if (ngram_max > LOOKUP_NGRAM_MAX)
        ngram_max = LOOKUP_NGRAM_MAX;
    if (!hist || max < 1 || n < 2)
        return 0;
    for (int32_t g = ngram_max; g >= ngram_min; g--) {
        if (g >= n)
            continue;
        /* i + g < n: at least one token follows the occurrence */
        for (int32_t i = n - g - 1; i >= 0; i--) {
            if (!same(hist, n, i, g))
                continue;
            int32_t k = 0;
            while (k < max && i + g + k < n) {
                out[k] = hist[i + g + k];
                k++;
            }
            return k;
        }
    }
    return 0;
}
