/* ngram.c: prompt-lookup drafting. The continuation of the most recent earlier occurrence
 * of the sequence's last n tokens is a good guess wherever the output quotes its input (RAG
 * answers, code edits, JSON re-emitted by agents). A backward linear scan: O(n_hist * n) per
 * call, microseconds next to a forward pass even for long prompts, and no index to keep. */
#include "spec/spec.h"

/* Does hist[a..a+n) equal hist[b..b+n)? */
static int same(const cpulm_token *hist, int32_t a, int32_t b, int32_t n) {
    for (int32_t i = 0; i < n; i++)
        if (hist[a + i] != hist[b + i]) return 0;
    return 1;
}

int32_t cpulm_spec_ngram_draft(const cpulm_token *hist, int32_t n_hist, int32_t n_min,
                               int32_t n_max, int32_t k_max, cpulm_token *out) {
    if (n_min < 1) n_min = 1;
    if (k_max <= 0) return 0;
    for (int32_t n = n_max; n >= n_min; n--) {
        int32_t key = n_hist - n; /* the key is hist[key..n_hist) */
        if (key < 1) continue;
        /* j + n < n_hist: the match must be followed by at least one token */
        for (int32_t j = key - 1; j >= 0; j--) {
            if (!same(hist, j, key, n)) continue;
            int32_t k = 0;
            for (int32_t i = j + n; i < n_hist && k < k_max; i++)
                out[k++] = hist[i];
            return k;
        }
    }
    return 0;
}
