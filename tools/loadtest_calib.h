/* loadtest_calib.h: sizing `cpulm loadtest`'s prompts in the server's tokens. A workload's
 * lengths are tokens and its text is English words; what a word costs depends on the
 * server's tokenizer (one token in GPT-2/Llama vocabularies, about 1.8 in stories260K's 512).
 * Before the first level loadtest measures it once against the server:
 * - tokenize: POST /tokenize (cpulm serve, llama-server) of "The" and of "The" + each word:
 *   every word's own cost, and the tokens add_special puts in front (BOS). Per-word costs
 *   make the sizes exact where tokens do not cross the spaces between words (SentencePiece
 *   and BPE vocabularies split there). With the chat API one probe adds the template's tokens.
 * - probe: where no such /tokenize answers (vLLM's takes other fields, OpenAI's API has
 *   none), two requests with max_tokens 1, "The" and "The" + the 130 words: tokens per word
 *   and the tokens added to a prompt (BOS, a chat template's) from their usage.prompt_tokens.
 * Only the given URL is contacted. */
#ifndef CPULM_TOOLS_LOADTEST_CALIB_H
#define CPULM_TOOLS_LOADTEST_CALIB_H

#include "loadtest.h"
#include "workload.h"

typedef enum { LT_CAL_AUTO, LT_CAL_PROBE, LT_CAL_OFF } lt_cal_mode; /* --calibrate's order */

typedef struct lt_calibration {
    wl_vocab vocab;
    char method[16];        /* "tokenize", "probe", or "off"/"failed": one word one token */
    double tokens_per_word; /* mean over the words (1 when not calibrated) */
    char why[200];          /* why an earlier method or the calibration failed ("" if not) */
} lt_calibration;

/* Measures c->vocab against the server at u (chat: prompts go to /v1/chat/completions).
 * Returns 0 when c->vocab holds the server's costs, -1 when it could not (c->method
 * "failed", c->why says what answered). LT_CAL_OFF returns -1 at once with method "off". */
int lt_calibrate(const lt_url *u, const char *api_key, int chat, lt_cal_mode mode, double timeout_s,
                 lt_calibration *c);

#endif
