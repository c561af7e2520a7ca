/* cmd_chat.c: `cpulm chat`: an interactive multi-turn REPL.
 *
 * Each turn re-renders the whole conversation with the chat template, tokenizes it, and
 * evaluates only the tokens after the longest prefix already in the KV cache, so history is
 * never re-processed (only a few tokens at the end of the previous reply may be, when the
 * template renders it differently from how it was generated).
 *
 * When the conversation outgrows the context, the oldest user/assistant turns are dropped
 * (the system message stays) until the rendered prompt leaves room for a reply; the kept
 * turns are then evaluated again once. Why not llama.cpp's context shift (discarding KV
 * entries and re-rotating the rest): it cuts turns in the middle and leaves the template's
 * structure broken, while dropping whole turns keeps every prompt one the template could
 * have rendered, and costs one prompt evaluation per overflow. A reply that fills the
 * context is stopped and the next turn drops turns. Ctrl-C stops the current reply; at the
 * prompt it (or Ctrl-D) ends the program. */
#define _POSIX_C_SOURCE 200809L
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tools_api.h"
#include "chat_common.h"
#include "chat_input.h"
#include "commands.h"
#include "common.h"
#include "options.h"
#include "spec_cli.h"

static volatile sig_atomic_t interrupted;

static void on_sigint(int sig) {
    (void)sig;
    interrupted = 1;
}

typedef struct chat_opts {
    const char *model, *system, *system_file, *tmpl_override;
    int n_predict, n_threads, n_threads_batch, n_ctx, hide_think, no_think;
    cpulm_kv_type kv;
    cpulm_sampler_params sp;
    cli_spec spec; /* --spec ngram, -md, ... */
} chat_opts;

typedef struct chat_msg {
    char *role, *content;
} chat_msg;

typedef struct chat_state {
    const cpulm_model *m;
    cpulm_ctx *ctx;
    cpulm_sampler *smp;
    const char *tmpl, *tmpl_name, *model_path;
    chat_msg *msgs; /* the conversation; msgs[0] is the system message when there is one */
    int n_msgs, cap_msgs;
    cpulm_token *cached; /* tokens in the KV cache of sequence 0 */
    int32_t n_cached;
    cpulm_spec *spec; /* speculation, when asked for */
    cpulm_model *draft;
} chat_state;

static void chat_usage(FILE *f) {
    fprintf(f, "usage: cpulm chat [-m MODEL] [--system TEXT] [options]\n");
    cli_help(f, "chat");
    fputs("Type a message and press Enter. A line ending in \\ continues the message; lines\n"
          "between two \"\"\" lines are one message; lines pasted together are one message.\n"
          "Commands: /help, /exit, /clear, /save FILE, /load FILE. Ctrl-C stops a reply;\n"
          "Ctrl-D or Ctrl-C at the prompt quits. Line editing and history (arrow keys) use\n"
          "libedit when stdin is a terminal.\n" CLI_COMPAT_HELP,
          f);
}

/* One option of the table (options.def); returns 0 or EXIT_USAGE. */
static int chat_opt(cli *c, int id, const cli_val *v, void *ctx) {
    chat_opts *o = ctx;
    switch (id) {
    case OPT_MODEL: o->model = v->s; break;
    case OPT_SYSTEM:
    case OPT_PROMPT: o->system = v->s; break;
    case OPT_FILE: o->system_file = v->s; break;
    case OPT_CHAT_TEMPLATE: o->tmpl_override = v->s; break;
    case OPT_HIDE_THINK: o->hide_think = 1; break;
    case OPT_NO_THINK: o->no_think = 1; break;
    case OPT_N_PREDICT: o->n_predict = (int)v->i; break;
    case OPT_CTX: o->n_ctx = (int)v->i; break;
    case OPT_THREADS: o->n_threads = (int)v->i; break;
    case OPT_THREADS_BATCH: o->n_threads_batch = (int)v->i; break;
    case OPT_KV: o->kv = (cpulm_kv_type)v->i; break;
    case OPT_NUMA: break;         /* applied by the parser */
    case OPT_CONVERSATION: break; /* `cpulm run -cnv` lands here: chat is that mode */
    case OPT_ESCAPE:
    case OPT_NO_ESCAPE:
    case OPT_NO_DISPLAY_PROMPT:
    case OPT_IGNORE_EOS: break; /* llama-cli habits with nothing to change in a chat */
    default:
        if (cli_sampler_opt(id, v, &o->sp) || cli_spec_opt(id, v, &o->spec)) break;
        return cli_unhandled(c, v);
    }
    return 0;
}

static int parse_chat(int argc, char **argv, chat_opts *o) {
    cli c = {.cmd = "chat", .argc = argc, .argv = argv};
    o->sp = cpulm_sampler_default_params();
    o->n_predict = 1024;
    cli_spec_init(&o->spec);
    if (cli_parse(&c, chat_usage, chat_opt, o)) return EXIT_USAGE;
    if (o->system && o->system_file) {
        fprintf(stderr, "cpulm chat: give the system message with -sys/-p or -f, not both\n");
        return EXIT_USAGE;
    }
    return cli_spec_check(&c, &o->spec);
}

/* ---- the conversation ---- */

static int push_msg(chat_state *st, const char *role, const char *content, size_t len) {
    if (st->n_msgs == st->cap_msgs) {
        int cap = st->cap_msgs ? st->cap_msgs * 2 : 16;
        chat_msg *nm = realloc(st->msgs, sizeof *nm * (size_t)cap);
        if (!nm) return 0;
        st->msgs = nm;
        st->cap_msgs = cap;
    }
    chat_msg *m = &st->msgs[st->n_msgs];
    m->role = strdup(role);
    m->content = malloc(len + 1);
    if (!m->role || !m->content) {
        free(m->role);
        free(m->content);
        return 0;
    }
    memcpy(m->content, content, len);
    m->content[len] = 0;
    st->n_msgs++;
    return 1;
}

static void drop_msgs(chat_state *st, int from, int count) {
    if (count <= 0) return;
    for (int i = from; i < from + count; i++)
        free(st->msgs[i].role), free(st->msgs[i].content);
    memmove(st->msgs + from, st->msgs + from + count,
            sizeof *st->msgs * (size_t)(st->n_msgs - from - count));
    st->n_msgs -= count;
}

static int has_system(const chat_state *st) {
    return st->n_msgs > 0 && !strcmp(st->msgs[0].role, "system");
}

static void clear_conversation(chat_state *st, const char *system) {
    drop_msgs(st, 0, st->n_msgs);
    if (system && *system) push_msg(st, "system", system, strlen(system));
}

static void msgs_json(const chat_state *st, cpulm_buf *out) {
    cpulm_json_writer w;
    cpulm_json_writer_init(&w, out, 0, 1);
    cpulm_json_arr_begin(&w);
    for (int i = 0; i < st->n_msgs; i++) {
        cpulm_json_obj_begin(&w);
        cpulm_json_kv_str(&w, "role", st->msgs[i].role);
        cpulm_json_kv_str(&w, "content", st->msgs[i].content);
        cpulm_json_obj_end(&w);
    }
    cpulm_json_arr_end(&w);
}

/* Renders the conversation (with the generation prompt) into *prompt (malloc'd). */
static int render(const chat_state *st, const chat_opts *o, char **prompt) {
    cpulm_chat_params p = cpulm_chat_default_params();
    p.add_generation_prompt = 1;
    p.bos_token = cli_bos_text(st->m);
    p.eos_token = cli_eos_text(st->m);
    p.enable_thinking = !o->no_think;
    cpulm_buf js;
    cpulm_buf_init(&js, 0);
    msgs_json(st, &js);
    cpulm_error err = {0};
    cpulm_status s =
        js.status ? js.status : cpulm_chat_render_json(st->tmpl, js.data, &p, prompt, &err);
    cpulm_buf_release(&js);
    if (s != CPULM_OK)
        fprintf(stderr, "cpulm chat: template: %s\n", err.msg[0] ? err.msg : cpulm_status_str(s));
    return s == CPULM_OK;
}

/* Tokenizes the rendered prompt (special tokens parsed; BOS added when the vocabulary asks
 * and the template did not write it). Returns the count, -1 on failure. */
static int32_t tokenize_prompt(const chat_state *st, const char *prompt, cpulm_token **out) {
    cpulm_token *toks = NULL;
    int32_t n = cli_tokenize(st->m, prompt, strlen(prompt), 0, 1, &toks);
    if (n < 0) return -1;
    cpulm_token bos = cpulm_token_bos(st->m);
    if (cpulm_vocab_add_bos(st->m) && bos >= 0 && (n == 0 || toks[0] != bos)) {
        cpulm_token *t2 = malloc(sizeof(cpulm_token) * (size_t)(n + 1));
        if (!t2) {
            free(toks);
            return -1;
        }
        t2[0] = bos;
        memcpy(t2 + 1, toks, sizeof(cpulm_token) * (size_t)n);
        free(toks);
        toks = t2;
        n++;
    }
    *out = toks;
    return n;
}

/* Room a reply needs: -n tokens, but at most a quarter of the context (at least 1). */
static int32_t reply_room(const chat_state *st, const chat_opts *o) {
    int32_t q = cpulm_ctx_n_ctx(st->ctx) / 4;
    int32_t r = o->n_predict < 0 || o->n_predict > q ? q : o->n_predict;
    return r > 0 ? r : 1;
}

/* Renders and tokenizes, dropping the oldest turns until prompt + reply room fit the
 * context. 0 when even the newest message alone does not fit (it is removed again). */
static int fit_prompt(chat_state *st, const chat_opts *o, char **prompt, cpulm_token **toks,
                      int32_t *n) {
    const int32_t limit = cpulm_ctx_n_ctx(st->ctx) - reply_room(st, o);
    int dropped = 0;
    for (;;) {
        *prompt = NULL;
        *toks = NULL;
        if (!render(st, o, prompt) || (*n = tokenize_prompt(st, *prompt, toks)) < 0) break;
        if (*n <= limit) {
            if (dropped)
                fprintf(stderr,
                        "cpulm chat: [the conversation outgrew the context of %d tokens: "
                        "dropped the %d oldest messages]\n",
                        cpulm_ctx_n_ctx(st->ctx), dropped);
            return 1;
        }
        free(*prompt);
        free(*toks);
        int first = has_system(st) ? 1 : 0;
        if (st->n_msgs - first <= 1) { /* only the new message is left */
            fprintf(stderr,
                    "cpulm chat: that message (%d tokens with the template) does not fit "
                    "the context of %d with room for a reply; try a larger -c\n",
                    *n, cpulm_ctx_n_ctx(st->ctx));
            drop_msgs(st, st->n_msgs - 1, 1);
            return 0;
        }
        /* one turn: the user message and the reply after it (when there is one) */
        int k = st->n_msgs - first > 2 && !strcmp(st->msgs[first + 1].role, "assistant") ? 2 : 1;
        drop_msgs(st, first, k);
        dropped += k;
    }
    free(*prompt);
    free(*toks);
    *prompt = NULL;
    *toks = NULL;
    return -1;
}

/* Evaluates what the cache does not hold yet of toks[0..n). */
static int feed_prompt(chat_state *st, cpulm_token *toks, int32_t n) {
    int32_t keep = 0;
    while (keep < n && keep < st->n_cached && toks[keep] == st->cached[keep])
        keep++;
    if (keep == n && keep > 0) keep--; /* re-evaluate the last token so its logits are fresh */
    if (cpulm_ctx_seq_rm(st->ctx, 0, keep) != CPULM_OK) {
        /* a hybrid model's recurrent state cannot be cut: evaluate the whole prompt again */
        keep = 0;
        (void)cpulm_ctx_seq_rm(st->ctx, 0, 0); /* clearing (p0 = 0) cannot fail */
    }
    st->n_cached = keep < st->n_cached ? keep : st->n_cached;
    for (int32_t i = keep; i < n; i += 512) {
        cpulm_batch b = {.n = n - i < 512 ? n - i : 512, .token = toks + i};
        cpulm_status s = cpulm_ctx_decode(st->ctx, &b);
        if (s != CPULM_OK) {
            fprintf(stderr, "cpulm chat: decode failed: %s\n", cpulm_status_str(s));
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
    while (n > 0 && (prompt[n - 1] == '\n' || prompt[n - 1] == ' '))
        n--;
    return n >= 7 && memcmp(prompt + n - 7, "<think>", 7) == 0;
}

static cpulm_token chat_pick(void *user, const float *logits) {
    cpulm_sampler *smp = user;
    cpulm_token t = cpulm_sampler_sample(smp, logits);
    cpulm_sampler_accept(smp, t);
    return t;
}

/* Streams out[0..n) as reply() does; returns 1 when the reply ends (end token, -n). */
static int chat_emit(chat_state *st, const chat_opts *o, const cpulm_token *out, int32_t n,
                     cpulm_detok *dt, cpulm_chat_think *think, cpulm_buf *text, int32_t *left) {
    char buf[1024];
    for (int32_t i = 0; i < n; i++) {
        if (cpulm_token_is_eog(st->m, out[i])) return 1;
        int32_t w = cpulm_detok_push(dt, out[i], buf, sizeof buf);
        if (w > 0) {
            cpulm_buf_append(text, buf, (size_t)w);
            emit(o, think, buf, w);
        }
        if (--*left == 0) return 1;
    }
    return 0;
}

/* reply() with speculation (--spec, -md): the same tokens, several per target pass. What
 * each step leaves in the KV cache (the pending token and the accepted drafts) is recorded
 * in st->cached, so the next turn reuses it as reply() would. Returns 1 when the context
 * filled up, -1 after printing why a step failed, else 0. */
static int reply_spec(chat_state *st, const chat_opts *o, cpulm_detok *dt, cpulm_chat_think *think,
                      cpulm_buf *text) {
    int32_t room = cpulm_ctx_n_ctx(st->ctx) - cpulm_ctx_seq_len(st->ctx, 0);
    int32_t left = o->n_predict >= 0 && o->n_predict < room ? o->n_predict : room;
    int full = o->n_predict < 0 || o->n_predict > room; /* reply() would say "context full" */
    cpulm_spec_pick pick = {.fn = chat_pick, .user = st->smp, .smp = st->smp};
    cpulm_token out[257];
    int32_t n = 0;
    if (left > 0 && !interrupted) out[n++] = chat_pick(st->smp, cpulm_ctx_logits(st->ctx, 0));
    while (n > 0 && !interrupted && !chat_emit(st, o, out, n, dt, think, text, &left)) {
        cpulm_token pending = out[n - 1];
        cpulm_status rc = cpulm_spec_step(st->spec, st->ctx, 0, pending, &pick, out, &n);
        if (rc == CPULM_ERR_KV_FULL) return 1;
        if (rc != CPULM_OK) return -cli_gen_status("chat", rc);
        cache_push(st, pending);
        for (int32_t i = 0; i + 1 < n; i++)
            cache_push(st, out[i]);
    }
    return full && left == 0 && !interrupted;
}

/* Generates one reply, streaming it; appends its text to *text. Returns 0 when a decode or
 * speculative step failed (said on stderr: the chat ends), else 1. */
static int reply(chat_state *st, const chat_opts *o, const char *prompt, cpulm_buf *text) {
    cpulm_detok dt;
    cpulm_detok_init(&dt, st->m, 0);
    cpulm_chat_think think;
    cpulm_chat_think_init(&think, ends_with_think(prompt));
    char buf[1024];
    int full = st->spec ? reply_spec(st, o, &dt, &think, text) : 0, ok = full >= 0;
    for (int i = 0; !st->spec && (o->n_predict < 0 || i < o->n_predict) && !interrupted; i++) {
        if (cpulm_ctx_seq_len(st->ctx, 0) >= cpulm_ctx_n_ctx(st->ctx)) {
            full = 1;
            break;
        }
        cpulm_token t = cpulm_sampler_sample(st->smp, cpulm_ctx_logits(st->ctx, 0));
        cpulm_sampler_accept(st->smp, t);
        if (cpulm_token_is_eog(st->m, t)) break;
        int32_t w = cpulm_detok_push(&dt, t, buf, sizeof buf);
        if (w > 0) {
            cpulm_buf_append(text, buf, (size_t)w);
            emit(o, &think, buf, w);
        }
        cpulm_batch b = {.n = 1, .token = &t};
        cpulm_status s = cpulm_ctx_decode(st->ctx, &b);
        if (s != CPULM_OK) {
            full = s == CPULM_ERR_KV_FULL;
            ok = !cli_gen_status("chat", s);
            break;
        }
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
    if (full > 0) fputs(" [context full: older turns will be dropped]", stdout);
    fputs("\n", stdout);
    fflush(stdout);
    return ok;
}

/* One user turn: fit, evaluate, reply. 0 only on a failure that ends the chat. */
static int turn(chat_state *st, const chat_opts *o, const char *text, size_t len) {
    if (!push_msg(st, "user", text, len)) return 0;
    char *prompt;
    cpulm_token *toks;
    int32_t n;
    int fit = fit_prompt(st, o, &prompt, &toks, &n);
    if (fit <= 0) return fit == 0; /* too long a message: said so, the chat goes on */
    cpulm_status sb = CPULM_OK;
    if (!feed_prompt(st, toks, n) ||
        (st->spec && (sb = cpulm_spec_begin(st->spec, st->cached, st->n_cached)) != CPULM_OK)) {
        if (sb != CPULM_OK) fprintf(stderr, "cpulm chat: speculation: %s\n", cpulm_status_str(sb));
        if (st->cached != toks) free(toks);
        free(prompt);
        return 0;
    }
    cpulm_buf out;
    cpulm_buf_init(&out, 0);
    int ok =
        reply(st, o, prompt, &out) && push_msg(st, "assistant", out.data ? out.data : "", out.len);
    cpulm_buf_release(&out);
    free(prompt);
    return ok;
}

/* ---- slash commands ---- */

static void chat_help(void) {
    printf("  /help         this list\n"
           "  /exit         quit (also /quit, Ctrl-D)\n"
           "  /clear        forget the conversation (keeps the system message; also /reset)\n"
           "  /save FILE    write the conversation as a JSON list of {role, content}\n"
           "  /load FILE    replace the conversation with one written by /save\n"
           "  a line ending in \\ continues the message; \"\"\" on a line starts or ends a\n"
           "  multi-line message; pasted lines are one message\n");
}

static int save_conversation(const chat_state *st, const char *path) {
    cpulm_buf js;
    cpulm_buf_init(&js, 0);
    msgs_json(st, &js);
    cpulm_buf_putc(&js, '\n');
    FILE *f = js.status ? NULL : fopen(path, "wb");
    int ok = f && fwrite(js.data, 1, js.len, f) == js.len;
    if (f && fclose(f)) ok = 0;
    cpulm_buf_release(&js);
    if (ok)
        printf("saved %d messages to %s\n", st->n_msgs, path);
    else
        fprintf(stderr, "cpulm chat: cannot write %s\n", path);
    return ok;
}

static int load_conversation(chat_state *st, const char *path) {
    size_t len;
    char *text = cli_read_file(path, &len);
    if (!text) return 0;
    cpulm_json_doc *doc = NULL;
    cpulm_error err = {0};
    int ok = cpulm_json_parse(text, len, NULL, &doc, NULL, &err) == CPULM_OK;
    const cpulm_json *root = ok ? cpulm_json_root(doc) : NULL;
    size_t n = cpulm_json_len(root);
    for (size_t i = 0; ok && i < n; i++) {
        const cpulm_json *m = cpulm_json_at(root, i);
        ok = cpulm_json_str(cpulm_json_get(m, "role")) &&
             cpulm_json_str(cpulm_json_get(m, "content"));
    }
    if (!ok || !cpulm_json_at(root, 0)) {
        fprintf(stderr,
                "cpulm chat: %s: not a conversation saved by /save (a JSON list of "
                "{\"role\", \"content\"})%s%s\n",
                path, err.msg[0] ? ": " : "", err.msg);
    } else {
        drop_msgs(st, 0, st->n_msgs);
        for (size_t i = 0; i < n; i++) {
            const cpulm_json *m = cpulm_json_at(root, i), *c = cpulm_json_get(m, "content");
            push_msg(st, cpulm_json_str(cpulm_json_get(m, "role")), cpulm_json_str(c),
                     cpulm_json_len(c));
        }
        printf("loaded %d messages from %s\n", st->n_msgs, path);
    }
    cpulm_json_free(doc);
    free(text);
    return ok;
}

/* 1 = handled, 0 = not a command (send it to the model), -1 = quit. */
static int command(chat_state *st, const chat_opts *o, const char *line, const char *system) {
    if (line[0] != '/') return 0;
    const char *arg = strchr(line, ' ');
    size_t nlen = arg ? (size_t)(arg - line) : strlen(line);
    while (arg && *arg == ' ')
        arg++;
#define IS(name) (nlen == strlen(name) && !memcmp(line, name, nlen))
    if (IS("/exit") || IS("/quit") || IS("/bye")) return -1;
    if (IS("/help") || IS("/?"))
        chat_help();
    else if (IS("/clear") || IS("/reset")) {
        clear_conversation(st, system);
        printf("conversation cleared\n");
    } else if ((IS("/save") || IS("/load")) && (!arg || !*arg))
        fprintf(stderr, "cpulm chat: %.*s needs a file name\n", (int)nlen, line);
    else if (IS("/save"))
        save_conversation(st, arg);
    else if (IS("/load"))
        load_conversation(st, arg);
    else {
        fprintf(stderr,
                "cpulm chat: unknown command %.*s (/help lists them; start a message "
                "with a space to send a '/' to the model)\n",
                (int)nlen, line);
    }
#undef IS
    (void)o;
    fflush(stdout);
    return 1;
}

static void banner(const chat_state *st, const chat_input *ci) {
    const char *slash = strrchr(st->model_path, '/');
    printf("cpulm chat: %s, template %s, context %d tokens, %s\n",
           slash ? slash + 1 : st->model_path, st->tmpl_name, cpulm_ctx_n_ctx(st->ctx),
           chat_input_kind(ci));
    printf("Commands: /help /exit /clear /save FILE /load FILE. End a line with \\ to continue; "
           "Ctrl-D quits.\n");
    fflush(stdout);
}

static int repl(chat_state *st, const chat_opts *o, const char *system) {
    chat_input ci;
    chat_input_init(&ci);
    cpulm_buf line;
    cpulm_buf_init(&line, 0);
    clear_conversation(st, system);
    if (ci.tty) banner(st, &ci);
    int rc = 0;
    for (;;) {
        interrupted = 0;
        if (!chat_input_read(&ci, &line)) break; /* EOF, or Ctrl-C at the prompt */
        if (line.len == 0) continue;
        int cmd = command(st, o, line.data, system);
        if (cmd < 0) break;
        if (cmd > 0) continue;
        if (!turn(st, o, line.data, line.len)) {
            rc = 1;
            break;
        }
    }
    cpulm_buf_release(&line);
    return rc;
}

static const char *template_name(const chat_opts *o, const char *tmpl) {
    if (o->tmpl_override) return o->tmpl_override;
    return tmpl ? "from the model" : "plain (the model has none)";
}

int cmd_chat(int argc, char **argv) {
    chat_opts o;
    memset(&o, 0, sizeof o);
    int rc = parse_chat(argc, argv, &o);
    if (rc) return rc;
    const char *path = cli_model_path(o.model);
    if (!path) return EXIT_USAGE;
    char *sys_text = NULL;
    if (o.system_file) {
        if (!(sys_text = cli_read_file(o.system_file, NULL))) return EXIT_USAGE;
        cli_chomp(sys_text);
        o.system = sys_text;
    }
    cpulm_model *m = cli_load_model(path, 0, NULL);
    if (!m) {
        free(sys_text);
        return cli_load_failed_rc(path);
    }
    chat_state st = {.m = m, .model_path = path};
    char *owned = NULL;
    cpulm_ctx_params cp = cli_ctx_default_params();
    cp.n_ctx = o.n_ctx;
    cp.n_threads = o.n_threads;
    cp.n_threads_batch = o.n_threads_batch;
    cp.kv_type = o.kv;
    if (o.spec.p.kind != CPULM_SPEC_NONE) cp.n_outputs_max = o.spec.p.draft_max + 1;
    cpulm_error err = {0};
    rc = 1;
    if (!cli_chat_template(m, o.tmpl_override, &st.tmpl, &owned))
        rc = EXIT_USAGE;
    else if (!(st.ctx = cpulm_ctx_new(m, &cp, &err)))
        fprintf(stderr, "cpulm chat: %s\n", err.msg);
    else if ((cp.n_ctx = cpulm_ctx_n_ctx(st.ctx)) &&
             (rc = cli_spec_open("chat", &o.spec, m, &cp, &o.sp, &st.draft, &st.spec)) != 0)
        ;
    else if ((rc = 1) && (st.smp = cpulm_sampler_new(&o.sp, cpulm_vocab_n(m)))) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_sigint; /* no SA_RESTART: Ctrl-C at the prompt ends the read */
        sigaction(SIGINT, &sa, NULL);
        st.tmpl_name = template_name(&o, st.tmpl);
        rc = repl(&st, &o, o.system);
    }
    drop_msgs(&st, 0, st.n_msgs);
    free(st.msgs);
    cpulm_sampler_free(st.smp);
    cpulm_spec_free(st.spec);
    cpulm_model_free(st.draft);
    cpulm_ctx_free(st.ctx);
    free(st.cached);
    free(owned);
    free(sys_text);
    cpulm_model_free(m);
    return rc;
}
