/* chat.c: chat templates applied to conversations: the public cpulm_chat_* API, the named
 * built-in templates, recognition of known template families, and the <think> filter.
 *
 * The built-ins are our own Jinja sources that reproduce each family's prompt format (for
 * plain user/system/assistant conversations); the reference templates' renders in
 * testdata/chat are the check. Variables go to the interpreter as one JSON object, so the
 * server can pass OpenAI messages (tool calls included) through unchanged.
 */
#include "chat/chat.h"

#include <stdlib.h>
#include <string.h>

/* ---- built-in templates ---- */

/* Meta Llama 3 Instruct: headers per turn, trimmed content, <|eot_id|> after each. */
static const char tmpl_llama3[] =
    "{%- for message in messages -%}\n"
    "{%- if loop.first %}{{ bos_token }}{% endif -%}\n"
    "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + "
    "(message['content'] or '') | trim + '<|eot_id|>' -}}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}"
    "{%- endif -%}\n";

/* Llama 2 chat: [INST] turns; the system prompt sits in <<SYS>> inside the first turn. */
static const char tmpl_llama2[] =
    "{%- set ns = namespace(sys='') -%}\n"
    "{%- if messages and messages[0]['role'] == 'system' -%}\n"
    "{%- set ns.sys = '<<SYS>>\\n' + messages[0]['content'] + '\\n<</SYS>>\\n\\n' -%}\n"
    "{%- set messages = messages[1:] -%}\n"
    "{%- endif -%}\n"
    "{%- for m in messages -%}\n"
    "{%- if m['role'] == 'user' -%}\n"
    "{{- bos_token + '[INST] ' + (ns.sys if loop.first else '') + (m['content'] or '') | trim + ' "
    "[/INST]' -}}\n"
    "{%- elif m['role'] == 'assistant' -%}\n"
    "{{- ' ' + (m['content'] or '') | trim + ' ' + eos_token -}}\n"
    "{%- endif -%}\n"
    "{%- endfor -%}\n";

/* Mistral Instruct: one BOS, [INST] turns, the system prompt before the first user text. */
static const char tmpl_mistral[] =
    "{%- set ns = namespace(sys='') -%}\n"
    "{%- if messages and messages[0]['role'] == 'system' -%}\n"
    "{%- set ns.sys = messages[0]['content'] + '\\n\\n' -%}\n"
    "{%- set messages = messages[1:] -%}\n"
    "{%- endif -%}\n"
    "{{- bos_token -}}\n"
    "{%- for m in messages -%}\n"
    "{%- if m['role'] == 'user' -%}\n"
    "{{- '[INST] ' + (ns.sys if loop.first else '') + (m['content'] or '') + ' [/INST]' -}}\n"
    "{%- elif m['role'] == 'assistant' -%}\n"
    "{{- (m['content'] or '') + eos_token -}}\n"
    "{%- endif -%}\n"
    "{%- endfor -%}\n";

/* ChatML (Qwen, many fine-tunes). */
static const char tmpl_chatml[] =
    "{%- for m in messages -%}\n"
    "{{- '<|im_start|>' + m['role'] + '\\n' + (m['content'] or '') + '<|im_end|>\\n' -}}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}\n";

/* DeepSeek-R1 (and its distills): the last system prompt first, reasoning dropped from
 * earlier assistant turns, and the generation prompt opens a <think> block. */
static const char tmpl_deepseek_r1[] =
    "{%- set ns = namespace(sys='') -%}\n"
    "{%- for m in messages if m['role'] == 'system' -%}{%- set ns.sys = m['content'] -%}{%- endfor "
    "-%}\n"
    "{{- bos_token + ns.sys -}}\n"
    "{%- for m in messages -%}\n"
    "{%- if m['role'] == 'user' -%}\n"
    "{{- '<\xef\xbd\x9cUser\xef\xbd\x9c>' + (m['content'] or '') -}}\n"
    "{%- elif m['role'] == 'assistant' -%}\n"
    "{{- '<\xef\xbd\x9c"
    "Assistant\xef\xbd\x9c>' + (m['content'] or '').split('</think>')[-1] + "
    "'<\xef\xbd\x9c"
    "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>' -}}\n"
    "{%- endif -%}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}{{- '<\xef\xbd\x9c"
    "Assistant\xef\xbd\x9c><think>\\n' -}}{%- endif -%}\n";

/* Gemma (2, 3): user and model turns; a system prompt opens the first user turn; content
 * trimmed, <end_of_turn> after each turn. */
static const char tmpl_gemma[] =
    "{{- bos_token -}}\n"
    "{%- set ns = namespace(sys='') -%}\n"
    "{%- if messages and messages[0]['role'] == 'system' -%}\n"
    "{%- set ns.sys = (messages[0]['content'] or '') + '\\n\\n' -%}\n"
    "{%- set messages = messages[1:] -%}\n"
    "{%- endif -%}\n"
    "{%- for m in messages -%}\n"
    "{{- '<start_of_turn>' + ('model' if m['role'] == 'assistant' else m['role']) + '\\n' + "
    "(ns.sys if loop.first else '') + (m['content'] or '') | trim + '<end_of_turn>\\n' -}}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}{{- '<start_of_turn>model\\n' -}}{%- endif -%}\n";
/* Gemma 4: a system turn when there is a system prompt, then user and model turns, each
 * "<|turn>" + role + "\n" + trimmed content + "<turn|>\n"; the generation prompt opens a
 * model turn with an empty thought channel (thinking off, as the model's template does when
 * enable_thinking is not set). Text only: the model's own template adds tools and media. */
static const char tmpl_gemma4[] =
    "{{- bos_token -}}\n"
    "{%- if messages and messages[0]['role'] in ['system', 'developer'] -%}\n"
    "{{- '<|turn>system\\n' + (messages[0]['content'] or '') | trim + '<turn|>\\n' -}}\n"
    "{%- set messages = messages[1:] -%}\n"
    "{%- endif -%}\n"
    "{%- for m in messages -%}\n"
    "{{- '<|turn>' + ('model' if m['role'] == 'assistant' else m['role']) + '\\n' + "
    "(m['content'] or '') | trim + '<turn|>\\n' -}}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}{{- '<|turn>model\\n<|channel>thought\\n<channel|>' -}}"
    "{%- endif -%}\n";
/* OpenAI harmony (gpt-oss): a system message with the reasoning effort, the system prompt
 * and tools in a developer message (tools as one line per function with its JSON-schema
 * parameters, where the model's own template writes TypeScript types), earlier turns' final
 * answers and tool calls, tool results as messages from functions.NAME, and the generation
 * prompt <|start|>assistant, after which the model writes a channel. */
static const char tmpl_harmony[] =
    "{%- set ns = namespace(dev='', last_call='') -%}\n"
    "{%- if messages and messages[0]['role'] in ['system', 'developer'] -%}\n"
    "{%- set ns.dev = messages[0]['content'] or '' -%}\n"
    "{%- set messages = messages[1:] -%}\n"
    "{%- endif -%}\n"
    "{{- '<|start|>system<|message|>You are ChatGPT, a large language model trained by "
    "OpenAI.\\nKnowledge cutoff: 2024-06\\nCurrent date: ' + strftime_now('%Y-%m-%d') + "
    "'\\n\\nReasoning: ' + (reasoning_effort if reasoning_effort is defined else 'medium') + "
    "'\\n\\n# Valid channels: analysis, commentary, final. Channel must be included for every "
    "message.' -}}\n"
    "{%- if tools -%}{{- '\\nCalls to these tools must go to the commentary channel: "
    "\\'functions\\'.' -}}{%- endif -%}\n"
    "{{- '<|end|>' -}}\n"
    "{%- if ns.dev or tools -%}\n"
    "{{- '<|start|>developer<|message|>' -}}\n"
    "{%- if ns.dev -%}{{- '# Instructions\\n\\n' + ns.dev + '\\n\\n' -}}{%- endif -%}\n"
    "{%- if tools -%}\n"
    "{{- '# Tools\\n\\n## functions\\n\\nnamespace functions {\\n\\n' -}}\n"
    "{%- for t in tools -%}\n"
    "{%- set f = t['function'] if t['function'] is defined else t -%}\n"
    "{{- '// ' + (f['description'] or '') + '\\ntype ' + f['name'] + ' = (_: ' + "
    "(f['parameters'] | tojson) + ') => any;\\n\\n' -}}\n"
    "{%- endfor -%}\n"
    "{{- '} // namespace functions' -}}\n"
    "{%- endif -%}\n"
    "{{- '<|end|>' -}}\n"
    "{%- endif -%}\n"
    "{%- for m in messages -%}\n"
    "{%- if m['role'] == 'user' -%}\n"
    "{{- '<|start|>user<|message|>' + (m['content'] or '') + '<|end|>' -}}\n"
    "{%- elif m['role'] == 'assistant' and m['tool_calls'] -%}\n"
    "{%- for c in m['tool_calls'] -%}\n"
    "{%- set f = c['function'] if c['function'] is defined else c -%}\n"
    "{{- '<|start|>assistant to=functions.' + f['name'] + '<|channel|>commentary "
    "json<|message|>' + (f['arguments'] if f['arguments'] is string else f['arguments'] | "
    "tojson) + '<|call|>' -}}\n"
    "{%- set ns.last_call = f['name'] -%}\n"
    "{%- endfor -%}\n"
    "{%- elif m['role'] == 'assistant' -%}\n"
    "{{- '<|start|>assistant<|channel|>final<|message|>' + (m['content'] or '') + '<|end|>' "
    "-}}\n"
    "{%- elif m['role'] == 'tool' -%}\n"
    "{{- '<|start|>functions.' + (m['name'] if m['name'] is defined and m['name'] else "
    "ns.last_call) + ' to=assistant<|channel|>commentary<|message|>' + (m['content'] | tojson) "
    "+ '<|end|>' -}}\n"
    "{%- endif -%}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}{{- '<|start|>assistant' -}}{%- endif -%}\n";

/* For models without a template (base models): "Role: content" lines, no special tokens. */
static const char tmpl_plain[] =
    "{%- for m in messages -%}\n"
    "{{- m['role'] | capitalize + ': ' + (m['content'] or '') + '\\n' -}}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}{{- 'Assistant:' -}}{%- endif -%}\n";

static const struct {
    const char *name;
    const char *src;
} builtins[] = {
    {"llama3", tmpl_llama3}, {"llama2", tmpl_llama2},           {"mistral", tmpl_mistral},
    {"chatml", tmpl_chatml}, {"deepseek-r1", tmpl_deepseek_r1}, {"gemma", tmpl_gemma},
    {"gemma4", tmpl_gemma4}, {"harmony", tmpl_harmony},         {"plain", tmpl_plain},
};

const char *cpulm_chat_builtin(const char *name) {
    for (size_t i = 0; name && i < sizeof builtins / sizeof builtins[0]; i++)
        if (!strcmp(builtins[i].name, name)) return builtins[i].src;
    return NULL;
}

/* Markers are the families' special tokens, checked most specific first (a DeepSeek
 * template may mention other formats' tokens in tool instructions, not the reverse). */
const char *cpulm_chat_detect(const char *tmpl) {
    static const struct {
        const char *marker, *family;
    } marks[] = {
        {"<\xef\xbd\x9cUser\xef\xbd\x9c>", "deepseek-r1"},
        {"<|channel|>", "harmony"},
        {"<|start_header_id|>", "llama3"},
        {"<|im_start|>", "chatml"},
        {"<<SYS>>", "llama2"},
        {"[INST]", "mistral"},
        {"<start_of_turn>", "gemma"},
        {"<|turn>", "gemma4"},
    };
    for (size_t i = 0; tmpl && i < sizeof marks / sizeof marks[0]; i++)
        if (strstr(tmpl, marks[i].marker)) return marks[i].family;
    return NULL;
}

/* ---- rendering ---- */

static cpulm_status render_source(const char *src, const cpulm_json *vars,
                                  const cpulm_jinja_opts *opts, cpulm_buf *out, cpulm_error *err) {
    cpulm_jinja *t = NULL;
    cpulm_status st = cpulm_jinja_parse(src, strlen(src), NULL, &t, err);
    if (st) return st;
    st = cpulm_jinja_render(t, vars, opts, out, err);
    cpulm_jinja_free(t);
    return st;
}

cpulm_status cpulm_chat_render_vars(const char *tmpl, const cpulm_json *vars,
                                    const cpulm_jinja_opts *opts, char **out, cpulm_error *err) {
    *out = NULL;
    const char *src = tmpl && *tmpl ? tmpl : tmpl_plain;
    cpulm_buf b;
    cpulm_buf_init(&b, 0);
    cpulm_status st = render_source(src, vars, opts, &b, err);
    const char *family = cpulm_chat_detect(src);
    if ((st == CPULM_ERR_FORMAT || st == CPULM_ERR_UNSUPPORTED) && family && src != tmpl_plain) {
        cpulm_error fallback_err;
        cpulm_buf_reset(&b);
        if (render_source(cpulm_chat_builtin(family), vars, opts, &b, &fallback_err) == CPULM_OK)
            st = CPULM_OK; /* the family's format, rendered by our own template */
    }
    if (st == CPULM_OK && cpulm_buf_status(&b))
        st = cpulm_errf(err, cpulm_buf_status(&b), "chat: out of memory");
    if (st == CPULM_OK && !(*out = cpulm_buf_detach(&b, NULL)))
        st = cpulm_errf(err, CPULM_ERR_NOMEM, "chat: out of memory");
    cpulm_buf_release(&b);
    return st;
}

cpulm_chat_params cpulm_chat_default_params(void) {
    cpulm_chat_params p;
    memset(&p, 0, sizeof p);
    p.enable_thinking = 1;
    p.now = -1;
    return p;
}

/* The variables object: messages, the standard variables (unless extra_json sets them), then
 * extra_json's members. Written as JSON text and read back, so every input is validated
 * by the one strict reader. */
static cpulm_status build_vars(const cpulm_json *msgs, const cpulm_json *extra,
                               const cpulm_chat_params *p, cpulm_json_doc **out, cpulm_error *err) {
    cpulm_buf b;
    cpulm_json_writer w;
    cpulm_buf_init(&b, 0);
    cpulm_json_writer_init(&w, &b, 0, 0);
    cpulm_json_obj_begin(&w);
    if (!cpulm_json_get(extra, "messages")) {
        cpulm_json_key(&w, "messages");
        cpulm_json_write_value(&w, msgs);
    }
    static const char *const std_names[] = {"add_generation_prompt", "bos_token", "eos_token",
                                            "enable_thinking"};
    for (int i = 0; i < 4; i++) {
        if (cpulm_json_get(extra, std_names[i])) continue;
        cpulm_json_key(&w, std_names[i]);
        if (i == 0) cpulm_json_write_bool(&w, p->add_generation_prompt);
        if (i == 1) cpulm_json_write_str(&w, p->bos_token ? p->bos_token : "");
        if (i == 2) cpulm_json_write_str(&w, p->eos_token ? p->eos_token : "");
        if (i == 3) cpulm_json_write_bool(&w, p->enable_thinking);
    }
    for (size_t i = 0; i < cpulm_json_len(extra); i++) {
        const cpulm_json *m = cpulm_json_at(extra, i);
        cpulm_json_keyn(&w, m->key, m->key_len);
        cpulm_json_write_value(&w, m);
    }
    cpulm_json_obj_end(&w);
    cpulm_status st = cpulm_json_writer_status(&w);
    if (st)
        st = cpulm_errf(err, st, "chat: cannot build the variables");
    else
        st = cpulm_json_parse(b.data, b.len, NULL, out, NULL, err);
    cpulm_buf_release(&b);
    return st;
}

static cpulm_status parse_json_arg(const char *what, const char *text, cpulm_json_type want,
                                   cpulm_json_doc **out, cpulm_error *err) {
    cpulm_error e;
    size_t off = 0;
    *out = NULL;
    if (!text) return CPULM_OK;
    cpulm_status st = cpulm_json_parse(text, strlen(text), NULL, out, &off, &e);
    if (st) return cpulm_errf(err, st, "chat: %s: %s", what, e.msg);
    if (cpulm_json_root(*out)->type != want) {
        cpulm_json_free(*out);
        *out = NULL;
        return cpulm_errf(err, CPULM_ERR_FORMAT, "chat: %s must be a JSON %s", what,
                          want == CPULM_JSON_ARRAY ? "array" : "object");
    }
    return CPULM_OK;
}

cpulm_status cpulm_chat_render_json(const char *tmpl, const char *messages_json,
                                    const cpulm_chat_params *params, char **out, cpulm_error *err) {
    cpulm_chat_params p = params ? *params : cpulm_chat_default_params();
    cpulm_json_doc *msgs = NULL, *extra = NULL, *vars = NULL;
    *out = NULL;
    cpulm_status st = parse_json_arg("messages", messages_json ? messages_json : "[]",
                                     CPULM_JSON_ARRAY, &msgs, err);
    if (!st) st = parse_json_arg("extra_json", p.extra_json, CPULM_JSON_OBJECT, &extra, err);
    if (!st)
        st = build_vars(cpulm_json_root(msgs), extra ? cpulm_json_root(extra) : NULL, &p, &vars,
                        err);
    if (!st) {
        cpulm_jinja_opts o = cpulm_jinja_default_opts();
        o.now = p.now;
        o.now_utc = p.now_utc;
        st = cpulm_chat_render_vars(tmpl, cpulm_json_root(vars), &o, out, err);
    }
    cpulm_json_free(msgs);
    cpulm_json_free(extra);
    cpulm_json_free(vars);
    return st;
}

cpulm_status cpulm_chat_render(const char *tmpl, const cpulm_chat_msg *msgs, int32_t n,
                               int add_generation_prompt, const char *bos, const char *eos,
                               char **out, cpulm_error *err) {
    *out = NULL;
    if (n < 0 || (n > 0 && !msgs))
        return cpulm_errf(err, CPULM_ERR_INVALID_ARG, "chat: bad message array");
    cpulm_buf b;
    cpulm_json_writer w;
    cpulm_buf_init(&b, 0);
    cpulm_json_writer_init(&w, &b, 0, 0);
    cpulm_json_arr_begin(&w);
    for (int32_t i = 0; i < n; i++) {
        cpulm_json_obj_begin(&w);
        cpulm_json_kv_str(&w, "role", msgs[i].role ? msgs[i].role : "");
        cpulm_json_key(&w, "content");
        if (msgs[i].content)
            cpulm_json_write_str(&w, msgs[i].content);
        else
            cpulm_json_write_null(&w);
        cpulm_json_obj_end(&w);
    }
    cpulm_json_arr_end(&w);
    cpulm_status st = cpulm_json_writer_status(&w);
    if (st) st = cpulm_errf(err, st, "chat: out of memory");
    cpulm_chat_params p = cpulm_chat_default_params();
    p.add_generation_prompt = add_generation_prompt;
    p.bos_token = bos;
    p.eos_token = eos;
    if (!st) st = cpulm_chat_render_json(tmpl, b.data, &p, out, err);
    cpulm_buf_release(&b);
    return st;
}

/* ---- <think> filter ---- */

void cpulm_chat_think_init(cpulm_chat_think *f, int starts_inside) {
    memset(f, 0, sizeof *f);
    f->in_think = starts_inside != 0;
    f->skip_rws = f->in_think;
}

static int is_ws(char c) {
    return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

/* Where filtered bytes go: out (visible), and the reasoning when kept (r != NULL). */
typedef struct think_sink {
    char *out, *r;
    int32_t k, rk;
} think_sink;

static void emit_byte(cpulm_chat_think *f, char c, think_sink *o) {
    if (f->in_think) {
        if (!o->r || (f->skip_rws && is_ws(c))) return;
        f->skip_rws = 0;
        o->r[o->rk++] = c;
        return;
    }
    if (f->skip_ws && is_ws(c)) return;
    f->skip_ws = 0;
    o->out[o->k++] = c;
}

/* One byte through the tag matcher: hold[] is always a proper prefix of the tag we look
 * for ("<think>" outside a block, "</think>" inside). */
static void feed(cpulm_chat_think *f, char c, think_sink *o) {
    const char *tag = f->in_think ? "</think>" : "<think>";
    f->hold[f->n_hold++] = c;
    if (!memcmp(f->hold, tag, (size_t)f->n_hold)) {
        if ((size_t)f->n_hold == strlen(tag)) {
            f->n_hold = 0;
            f->in_think = !f->in_think;
            f->skip_ws = !f->in_think;
            f->skip_rws = f->in_think;
        }
        return;
    }
    /* mismatch: the first held byte is plain text; the rest may still start a tag
     * (recursion depth <= the tag length, as each level holds fewer bytes) */
    char rest[16];
    int32_t n_rest = f->n_hold - 1;
    memcpy(rest, f->hold + 1, (size_t)n_rest);
    f->n_hold = 0;
    emit_byte(f, f->hold[0], o);
    for (int32_t i = 0; i < n_rest; i++)
        feed(f, rest[i], o);
}

int32_t cpulm_chat_think_push(cpulm_chat_think *f, const char *s, int32_t n, char *out,
                              int32_t cap) {
    think_sink o = {out, NULL, 0, 0};
    if (n < 0 || cap < n + 16) return CPULM_ERR_TOO_SMALL;
    for (int32_t i = 0; i < n; i++)
        feed(f, s[i], &o);
    return o.k;
}

int32_t cpulm_chat_think_flush(cpulm_chat_think *f, char *out, int32_t cap) {
    think_sink o = {out, NULL, 0, 0};
    if (cap < 16) return CPULM_ERR_TOO_SMALL;
    for (int32_t i = 0; i < f->n_hold; i++)
        emit_byte(f, f->hold[i], &o);
    f->n_hold = 0;
    return o.k;
}

int32_t cpulm_chat_think_split(cpulm_chat_think *f, const char *s, int32_t n, char *out,
                               char *reasoning, int32_t cap, int32_t *n_reasoning) {
    think_sink o = {out, reasoning, 0, 0};
    *n_reasoning = 0;
    if (n < 0 || cap < n + 16 || (!s && n)) return CPULM_ERR_TOO_SMALL;
    if (!s) {
        for (int32_t i = 0; i < f->n_hold; i++)
            emit_byte(f, f->hold[i], &o);
        f->n_hold = 0;
    }
    for (int32_t i = 0; i < n; i++)
        feed(f, s[i], &o);
    *n_reasoning = o.rk;
    return o.k;
}

int cpulm_chat_opens_think(const char *prompt, size_t n) {
    while (n > 0 && is_ws(prompt[n - 1]))
        n--;
    return n >= 7 && memcmp(prompt + n - 7, "<think>", 7) == 0;
}
