/* wpm_tables.h: the codepoint maps of WordPiece preprocessing (generated into
 * wpm_tables.c by scripts/gen_wpm_tables.py): NFD's first codepoint and lower case. */
#ifndef CPULM_TOKENIZER_WPM_TABLES_H
#define CPULM_TOKENIZER_WPM_TABLES_H

#include <stdint.h>

extern const uint32_t cpulm_wpm_nfd[][3]; /* {first, last, value}, sorted by first */
extern const int32_t cpulm_wpm_n_nfd;
extern const uint32_t cpulm_wpm_lower[][2]; /* {cp, lower}, sorted by cp */
extern const int32_t cpulm_wpm_n_lower;

#endif
