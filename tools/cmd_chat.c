/* cmd_chat.c: `cpulm chat`: an interactive multi-turn REPL.
 *
 * Each turn re-renders the whole conversation with the chat template, tokenizes it, and
 * evaluates only the tokens after the longest prefix already in the KV cache, so history is
 * never re-processed (only a few tokens at the end of the previous reply may be, when the
 * template renders it differently from how it was generated). Ctrl-C stops the current
 * reply; at the prompt it (or end of input) ends the program. */
#define _POSIX_C_SOURCE 200809L
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tools_api.h"
#include "chat_common.h"
#include "commands.h"
#include "common.h"

static volatile sig_atomic_t interrupted;

static void on_sigint(int sig) {
    (void)sig;
    interrupted = 1;
}

typedef struct chat_opts {
    const char *model, *system, *tmpl_override;
    int n_predict, n_threads, n_ctx, hide_think, no_think;
    cpulm_sampler_params sp;
} chat_opts;

typedef struct chat_state {
    const cpulm_model *m;
    cpulm_ctx *ctx;
    cpulm_sampler *smp;
    const char *tmpl;
    cpulm_buf msgs;      /* the conversation as a JSON array text, without the closing ']' */
    cpulm_token *cached; /* tokens in the KV cache of sequence 0 */
    int32_t n_cached;
} chat_state;

static void chat_usage(FILE *f) {
    fprintf(f, "usage: cpulm chat [-m MODEL] [--system TEXT] [options]\n"
               "  --chat-template NAME|FILE  override the model's template (llama3, llama2,\n"
               "                             mistral, chatml, deepseek-r1, plain, or a file)\n"
               "  --hide-think               do not show <think>...</think> reasoning\n"
               "  --no-think                 ask templates that support it not to think\n"
               "  -n N                       most tokens per reply (default 1024)\n"
               "  -c N, -t N            context size, threads\n" CLI_SAMPLER_HELP
               "Type a message and press enter. Ctrl-C stops a reply; Ctrl-D or Ctrl-C at the\n"
               "prompt quits. /reset clears the conversation.\n");
}

static int parse_chat(int argc, char **argv, chat_opts *o) {
    cli c = {.cmd = "chat", .argc = argc, .argv = argv};
    o->sp = cpulm_sampler_default_params();
    o->n_predict = 1024;
    for (c.i = 1; c.i < argc; c.i++) {
        int sf = cli_sampler_flag(&c, &o->sp);
        if (sf < 0) return EXIT_USAGE;
        if (sf > 0) continue;
        if (cli_flag(&c, "-h", "--help")) {
            chat_usage(stdout);
            exit(0);
        } else if (cli_flag(&c, "-m", "--model")) {
            if (!(o->model = cli_value(&c))) return EXIT_USAGE;
        } else if (cli_flag(&c, "--system", "-sys")) {
            if (!(o->system = cli_value(&c))) return EXIT_USAGE;
        } else if (cli_flag(&c, "--chat-template", NULL)) {
            if (!(o->tmpl_override = cli_value(&c))) return EXIT_USAGE;
        } else if (cli_flag(&c, "--hide-think", NULL)) {
            o->hide_think = 1;
        } else if (cli_flag(&c, "--no-think", NULL)) {
            o->no_think = 1;
        } else if (cli_flag(&c, "-n", "--n-predict")) {
            if (!cli_int(&c, 1, 1 << 24, &o->n_predict)) return EXIT_USAGE;
        } else if (cli_flag(&c, "-c", "--ctx-size")) {
            if (!cli_int(&c, 0, 1 << 24, &o->n_ctx)) return EXIT_USAGE;
        } else if (cli_flag(&c, "-t", "--threads")) {
            if (!cli_int(&c, 1, 512, &o->n_threads)) return EXIT_USAGE;
        } else {
            return cli_unknown(&c);
        }
    }
    return 0;
}

static void add_message(cpulm_buf *msgs, const char *role, const char *content, size_t len) {
    cpulm_buf_puts(msgs, msgs->len > 1 ? ", {\"role\": " : "{\"role\": ");
    cpulm_json_quote(msgs, role, strlen(role), 0);
    cpulm_buf_puts(msgs, ", \"content\": ");
    cpulm_json_quote(msgs, content, len, 0);
    cpulm_buf_putc(msgs, '}');
}

/* Renders the conversation (with the generation prompt) into *prompt (malloc'd). */
static int render(chat_state *st, const chat_opts *o, char **prompt) {
    cpulm_chat_params p = cpulm_chat_default_params();
    p.add_generation_prompt = 1;
    p.bos_token = cli_bos_text(st->m);
    p.eos_token = cli_eos_text(st->m);
    p.enable_thinking = !o->no_think;
    cpulm_buf_putc(&st->msgs, ']');
    cpulm_error err = {0};
    cpulm_status s = cpulm_chat_render_json(st->tmpl, st->msgs.data, &p, prompt, &err);
    cpulm_buf_truncate(&st->msgs, st->msgs.len - 1);
    if (s != CPULM_OK) fprintf(stderr, "cpulm chat: template: %s\n", err.msg);
    return s == CPULM_OK;
}

/* Tokenizes the rendered prompt (special tokens parsed; BOS added when the vocabulary asks
 * and the template did not write it) and evaluates what the cache does not hold yet. */
static int feed_prompt(chat_state *st, const char *prompt) {
    cpulm_token *toks = NULL;
    int32_t n = cli_tokenize(st->m, prompt, strlen(prompt), 0, 1, &toks);
    if (n < 0) return 0;
    cpulm_token bos = cpulm_token_bos(st->m);
    if (cpulm_vocab_add_bos(st->m) && bos >= 0 && (n == 0 || toks[0] != bos)) {
        cpulm_token *t2 = malloc(sizeof(cpulm_token) * (size_t)(n + 1));
        if (!t2) return 0;
        t2[0] = bos;
        memcpy(t2 + 1, toks, sizeof(cpulm_token) * (size_t)n);
        free(toks);
        toks = t2;
        n++;
    }
    int32_t keep = 0;
    while (keep < n && keep < st->n_cached && toks[keep] == st->cached[keep]) keep++;
    if (keep == n) keep--; /* re-evaluate the last token so its logits are fresh */
    if (n >= cpulm_ctx_n_ctx(st->ctx)) {
        fprintf(stderr, "cpulm chat: the conversation (%d tokens) no longer fits the context of "
                        "%d; use /reset or a larger -c\n", n, cpulm_ctx_n_ctx(st->ctx));
        free(toks);
        return 0;
    }
    cpulm_ctx_seq_rm(st->ctx, 0, keep);
    for (int32_t i = keep; i < n; i += 512) {
        cpulm_batch b = {.n = n - i < 512 ? n - i : 512, .token = toks + i};
        if (cpulm_ctx_decode(st->ctx, &b) != CPULM_OK) {
            free(toks);
            return 0;
        }
    }
    free(st->cached);
    st->cached = toks;
    st->n_cached = n;
    return 1;
}

/* Records a generated token as cached (it is in the KV once decoded). */
static void cache_push(chat_state *st, cpulm_token t) {
    cpulm_token *c = realloc(st->cached, sizeof(cpulm_token) * (size_t)(st->n_cached + 1));
    if (!c) return;
    st->cached = c;
    st->cached[st->n_cached++] = t;
}

static void emit(const chat_opts *o, cpulm_chat_think *think, const char *s, int32_t n) {
    char out[1024 + 16];
    if (o->hide_think) n = cpulm_chat_think_push(think, s, n, out, sizeof out), s = out;
    if (n > 0) fwrite(s, 1, (size_t)n, stdout);
    fflush(stdout);
}

/* Does the generation prompt already open a reasoning block (DeepSeek-R1 templates)? */
static int ends_with_think(const char *prompt) {
    size_t n = strlen(prompt);
    while (n > 0 && (prompt[n - 1] == '\n' || prompt[n - 1] == ' ')) n--;
    return n >= 7 && memcmp(prompt + n - 7, "<think>", 7) == 0;
}

/* Generates one reply, streaming it; appends its text to *reply. */
static void reply(chat_state *st, const chat_opts *o, const char *prompt, cpulm_buf *text) {
    cpulm_detok dt;
    cpulm_detok_init(&dt, st->m, 0);
    cpulm_chat_think think;
    cpulm_chat_think_init(&think, ends_with_think(prompt));
    char buf[1024];
    for (int i = 0; i < o->n_predict && !interrupted; i++) {
        if (cpulm_ctx_seq_len(st->ctx, 0) >= cpulm_ctx_n_ctx(st->ctx)) break;
        cpulm_token t = cpulm_sampler_sample(st->smp, cpulm_ctx_logits(st->ctx, 0));
        cpulm_sampler_accept(st->smp, t);
        if (cpulm_token_is_eog(st->m, t)) break;
        int32_t w = cpulm_detok_push(&dt, t, buf, sizeof buf);
        if (w > 0) {
            cpulm_buf_append(text, buf, (size_t)w);
            emit(o, &think, buf, w);
        }
        cpulm_batch b = {.n = 1, .token = &t};
        if (cpulm_ctx_decode(st->ctx, &b) != CPULM_OK) break;
        cache_push(st, t);
    }
    int32_t w = cpulm_detok_flush(&dt, buf, sizeof buf);
    if (w > 0) {
        cpulm_buf_append(text, buf, (size_t)w);
        emit(o, &think, buf, w);
    }
    if (o->hide_think && (w = cpulm_chat_think_flush(&think, buf, sizeof buf)) > 0)
        fwrite(buf, 1, (size_t)w, stdout);
    if (interrupted) fputs(" [stopped]", stdout);
    fputs("\n", stdout);
}

static void reset_conversation(chat_state *st, const chat_opts *o) {
    cpulm_buf_reset(&st->msgs);
    cpulm_buf_putc(&st->msgs, '[');
    if (o->system) add_message(&st->msgs, "system", o->system, strlen(o->system));
}

static int repl(chat_state *st, const chat_opts *o) {
    char line[65536];
    int tty = isatty(0);
    reset_conversation(st, o);
    for (;;) {
        interrupted = 0;
        if (tty) fputs("> ", stdout), fflush(stdout);
        if (!fgets(line, sizeof line, stdin)) break; /* EOF, or Ctrl-C at the prompt */
        size_t len = strcspn(line, "\r\n");
        line[len] = 0;
        if (len == 0) continue;
        if (!strcmp(line, "/reset")) {
            reset_conversation(st, o);
            continue;
        }
        add_message(&st->msgs, "user", line, len);
        char *prompt = NULL;
        if (!render(st, o, &prompt) || !feed_prompt(st, prompt)) {
            free(prompt);
            return 1;
        }
        cpulm_buf text;
        cpulm_buf_init(&text, 0);
        reply(st, o, prompt, &text);
        add_message(&st->msgs, "assistant", text.data, text.len);
        cpulm_buf_release(&text);
        free(prompt);
    }
    return 0;
}

int cmd_chat(int argc, char **argv) {
    chat_opts o;
    memset(&o, 0, sizeof o);
    int rc = parse_chat(argc, argv, &o);
    if (rc) return rc;
    const char *path = cli_model_path(o.model);
    if (!path) return EXIT_USAGE;
    cpulm_model *m = cli_load_model(path, 0, NULL);
    if (!m) return cli_load_failed_rc(path);
    chat_state st = {.m = m};
    char *owned = NULL;
    cpulm_buf_init(&st.msgs, 0);
    cpulm_ctx_params cp = cli_ctx_default_params();
    cp.n_ctx = o.n_ctx;
    cp.n_threads = o.n_threads;
    cpulm_error err = {0};
    rc = 1;
    if (!cli_chat_template(m, o.tmpl_override, &st.tmpl, &owned)) rc = EXIT_USAGE;
    else if (!(st.ctx = cpulm_ctx_new(m, &cp, &err))) fprintf(stderr, "cpulm chat: %s\n", err.msg);
    else if ((st.smp = cpulm_sampler_new(&o.sp, cpulm_vocab_n(m)))) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_sigint; /* no SA_RESTART: Ctrl-C at the prompt ends fgets */
        sigaction(SIGINT, &sa, NULL);
        rc = repl(&st, &o);
    }
    cpulm_sampler_free(st.smp);
    cpulm_ctx_free(st.ctx);
    cpulm_buf_release(&st.msgs);
    free(st.cached);
    free(owned);
    cpulm_model_free(m);
    return rc;
}
