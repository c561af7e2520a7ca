/* chat_input.c: one chat message per call, from a terminal (libedit: arrow keys, history,
 * Ctrl-A/E/K/W...) or from a pipe (plain reads, no prompts). See chat_input.h for the
 * multi-line conventions; they are llama-cli's ('\' at the end of a line) and Ollama's
 * (""" blocks), so users of either keep their habits. */
#define _POSIX_C_SOURCE 200809L
#include "chat_input.h"

#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef CPULM_HAVE_LIBEDIT
#include <editline/readline.h>
#endif

void chat_input_init(chat_input *ci) {
    memset(ci, 0, sizeof *ci);
    ci->in = stdin;
    ci->tty = isatty(0);
#ifdef CPULM_HAVE_LIBEDIT
    if (ci->tty) {
        ci->editline = 1;
        rl_readline_name = "cpulm";
        rl_inhibit_completion = 1; /* Tab inserts a tab: there are no file names to complete */
        using_history();
        stifle_history(1000);
    }
#endif
}

const char *chat_input_kind(const chat_input *ci) {
    return ci->editline ? "libedit line editing" : ci->tty ? "plain reads" : "piped input";
}

/* One line without its newline (malloc'd), or NULL at end of input. */
static char *read_line(chat_input *ci, const char *prompt) {
#ifdef CPULM_HAVE_LIBEDIT
    if (ci->editline) {
        char *s = readline(prompt);
        if (s && *s) add_history(s);
        return s;
    }
#endif
    if (ci->tty) fputs(prompt, stdout), fflush(stdout);
    char *line = NULL;
    size_t cap = 0;
    ssize_t n = getline(&line, &cap, ci->in);
    if (n < 0) {
        free(line);
        return NULL;
    }
    line[strcspn(line, "\r\n")] = 0;
    return line;
}

/* More input already waiting a moment after Enter means the lines were pasted together. */
static int input_pending(const chat_input *ci) {
    if (!ci->tty) return 0;
    struct pollfd p = {.fd = 0, .events = POLLIN};
    return poll(&p, 1, 25) > 0 && (p.revents & POLLIN);
}

static int is_fence(const char *s) {
    return !strcmp(s, "\"\"\"");
}

int chat_input_read(chat_input *ci, cpulm_buf *msg) {
    cpulm_buf_reset(msg);
    int fenced = 0, first = 1;
    for (;;) {
        char *line = read_line(ci, first ? "> " : ". ");
        if (!line) {
            if (ci->tty) fputc('\n', stdout), fflush(stdout); /* the shell prompt on its own line */
            return !first;                                    /* a partial message still counts */
        }
        size_t n = strlen(line);
        int more = 0;
        if (is_fence(line)) {
            fenced = !fenced;
            more = fenced;
            n = 0;
        } else if (!fenced && n > 0 && line[n - 1] == '\\') {
            n--; /* a trailing backslash continues the message on the next line */
            more = 1;
        }
        if (n > 0 || (fenced && !is_fence(line))) {
            if (msg->len > 0) cpulm_buf_putc(msg, '\n');
            cpulm_buf_append(msg, line, n);
        }
        free(line);
        first = 0;
        if (!more && !fenced && !input_pending(ci)) break;
    }
    cpulm_buf_putc(msg, 0);
    cpulm_buf_truncate(msg, msg->len - 1);
    return 1;
}
