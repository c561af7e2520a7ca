/* chat_input.h: reading one chat message from the user: line editing and history through
 * libedit when stdin is a terminal and cpulm was built with it (plain reads otherwise),
 * multi-line messages (a line ending in '\' continues; lines between two """ lines form one
 * message; on a terminal, lines pasted together arrive as one message). */
#ifndef CPULM_TOOLS_CHAT_INPUT_H
#define CPULM_TOOLS_CHAT_INPUT_H

#include <stdio.h>

#include "tools_api.h"

typedef struct chat_input {
    int tty;      /* stdin is a terminal: prompts are shown */
    int editline; /* libedit is in use */
    FILE *in;
} chat_input;

/* Sets up reading from stdin; history is in memory only (nothing written to disk). */
void chat_input_init(chat_input *ci);
/* Reads the next message into *msg (reset first, NUL-terminated, without the final newline).
 * Returns 1 for a message (possibly empty), 0 at end of input (Ctrl-D) or Ctrl-C at the
 * prompt. */
int chat_input_read(chat_input *ci, cpulm_buf *msg);
/* "libedit" or "plain reads": for the banner. */
const char *chat_input_kind(const chat_input *ci);

#endif
