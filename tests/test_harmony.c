/* test_harmony.c: splitting harmony replies (server/harmony.h) into content, reasoning and
 * tool calls, whole and streamed in pieces. */
#include <string.h>

#include "cpulm.h"
#include "server/harmony.h"
#include "server/oai.h"
#include "server/oai_tools.h"
#include "test.h"

#define GEN_PROMPT "<|start|>user<|message|>hi<|end|><|start|>assistant"

typedef struct split {
    cpulm_buf text, reasoning;
} split;

/* The reply r after prompt p, fed in pieces of `piece` bytes (0: whole). */
static split run(const char *p, const char *r, size_t piece) {
    cpulm_harmony h;
    split o;
    cpulm_buf_init(&o.text, 0);
    cpulm_buf_init(&o.reasoning, 0);
    cpulm_harmony_init(&h, p, strlen(p));
    const size_t n = strlen(r), step = piece ? piece : n;
    for (size_t i = 0; i < n; i += step) {
        const size_t k = n - i < step ? n - i : step;
        cpulm_harmony_feed(&h, r + i, k, 0, &o.text, &o.reasoning);
    }
    cpulm_harmony_feed(&h, NULL, 0, 1, &o.text, &o.reasoning);
    cpulm_harmony_free(&h);
    cpulm_buf_puts(&o.text, "");
    cpulm_buf_puts(&o.reasoning, "");
    return o;
}

static int same(const cpulm_buf *b, const char *want) {
    if (b->len == strlen(want) && !memcmp(b->data, want, b->len)) return 1;
    fprintf(stderr, "  got '%.*s', want '%s'\n", (int)b->len, b->data ? b->data : "", want);
    return 0;
}

static void release(split *o) {
    cpulm_buf_release(&o->text);
    cpulm_buf_release(&o->reasoning);
}

/* Every piece size gives the same split as the whole reply. */
static void check_all_pieces(test_ctx *t, const char *p, const char *r, const char *text,
                             const char *reasoning) {
    for (size_t piece = 0; piece <= 9; piece++) {
        split o = run(p, r, piece);
        CHECK(t, same(&o.text, text));
        CHECK(t, same(&o.reasoning, reasoning));
        release(&o);
    }
}

TEST(harmony_analysis_then_final) {
    check_all_pieces(t, GEN_PROMPT,
                     "<|channel|>analysis<|message|>User says hi. a<b, x|y.<|end|>"
                     "<|start|>assistant<|channel|>final<|message|>Hello <there>!",
                     "Hello <there>!", "User says hi. a<b, x|y.");
    /* the final message's <|return|> (an end-of-generation token) may or may not be text */
    check_all_pieces(t, GEN_PROMPT, "<|channel|>final<|message|>4<|return|>", "4", "");
}

TEST(harmony_tool_call_both_header_orders) {
    const char *want = "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Paris\"}}"
                       "</tool_call>";
    check_all_pieces(t, GEN_PROMPT,
                     "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant"
                     "<|channel|>commentary to=functions.get_weather <|constrain|>json"
                     "<|message|>{\"city\":\"Paris\"}<|call|>",
                     want, "Need weather.");
    check_all_pieces(t, GEN_PROMPT,
                     " to=functions.get_weather<|channel|>commentary json<|message|>"
                     "{\"city\":\"Paris\"}",
                     want, "");
    /* what the scanner makes of it: one complete call, its name and arguments */
    split o =
        run(GEN_PROMPT,
            "<|channel|>commentary to=functions.get_weather<|message|>{\"city\":\"Paris\"}", 0);
    cpulm_oai_scan sc;
    cpulm_oai_scan_calls(o.text.data, o.text.len, 1, 0, &sc);
    REQUIRE(t, sc.n_calls == 1);
    CHECK(t, sc.calls[0].complete);
    cpulm_buf name, args;
    cpulm_buf_init(&name, 0);
    cpulm_buf_init(&args, 0);
    cpulm_oai_call_name(o.text.data, &sc.calls[0], &name);
    cpulm_oai_call_args(o.text.data, &sc.calls[0], NULL, &args);
    CHECK(t, same(&name, "get_weather"));
    CHECK(t, same(&args, "{\"city\":\"Paris\"}"));
    CHECK_EQ_INT(t, sc.content_len, 0);
    cpulm_buf_release(&name);
    cpulm_buf_release(&args);
    release(&o);
}

TEST(harmony_preamble_builtin_tools_and_prefill) {
    /* a commentary message without a recipient is a preamble for the user */
    check_all_pieces(t, GEN_PROMPT,
                     "<|channel|>commentary<|message|>Checking.<|end|><|start|>assistant"
                     "<|channel|>commentary to=functions.f<|message|>{}<|call|>",
                     "Checking.<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>", "");
    /* the built-in browser tool is not the client's to run */
    check_all_pieces(t, GEN_PROMPT,
                     "<|channel|>analysis to=browser.search<|message|>{\"query\":\"x\"}<|call|>",
                     "", "{\"query\":\"x\"}");
    /* a prompt that opened the final channel itself: the reply is content from the start */
    check_all_pieces(t, GEN_PROMPT "<|channel|>final<|message|>", "Sure.<|return|>", "Sure.", "");
    /* no harmony message opened at all: plain text is content, unknown tokens dropped */
    check_all_pieces(t, "plain prompt", "text <|foo|>more", "text more", "");
}

TEST(harmony_held_token_is_flushed_at_the_end) {
    cpulm_harmony h;
    cpulm_buf text, rsn;
    cpulm_buf_init(&text, 0);
    cpulm_buf_init(&rsn, 0);
    cpulm_harmony_init(&h, GEN_PROMPT, strlen(GEN_PROMPT));
    const char *r = "<|channel|>final<|message|>a <|ret";
    cpulm_harmony_feed(&h, r, strlen(r), 0, &text, &rsn);
    CHECK_EQ_INT(t, text.len, 2); /* "a " sent, "<|ret" held: it may be a token */
    cpulm_harmony_feed(&h, NULL, 0, 1, &text, &rsn);
    cpulm_buf_puts(&text, "");
    CHECK(t, same(&text, "a <|ret"));
    cpulm_harmony_free(&h);
    cpulm_buf_release(&text);
    cpulm_buf_release(&rsn);
    CHECK(t, cpulm_harmony_template("x<|start|>assistant<|channel|>final"));
    CHECK(t, !cpulm_harmony_template("<|im_start|>"));
}

/* A chat request rendered with the harmony built-in (what a gpt-oss file whose own template
 * our Jinja cannot run gets): reasoning_effort in the system message, the system prompt and
 * tools in the developer message, tool calls and results in harmony's form; the reply is
 * split from the first header on. */
TEST(harmony_render_request) {
    const char *body =
        "{\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},"
        "{\"role\":\"user\",\"content\":\"Weather in Paris?\"},"
        "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"c1\",\"type\":"
        "\"function\",\"function\":{\"name\":\"get_weather\",\"arguments\":"
        "\"{\\\"city\\\":\\\"Paris\\\"}\"}}]},"
        "{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"18C\"}],"
        "\"reasoning_effort\":\"high\",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":"
        "\"get_weather\",\"description\":\"Weather of a city\",\"parameters\":{\"type\":"
        "\"object\",\"properties\":{\"city\":{\"type\":\"string\"}}}}}]}";
    cpulm_oai_request q;
    cpulm_oai_error e;
    REQUIRE(t, cpulm_oai_parse(CPULM_OAI_CHAT, body, strlen(body), 1 << 20, &q, &e) == CPULM_OK);
    CHECK(t, !strcmp(q.reasoning_effort, "high"));
    cpulm_buf b;
    cpulm_buf_init(&b, 0);
    cpulm_oai_chat_prompt info;
    REQUIRE(t, cpulm_oai_render_chat_req(cpulm_chat_builtin("harmony"), NULL, NULL, &q, &b, &info,
                                         &e) == CPULM_OK);
    cpulm_buf_puts(&b, "");
    static const char *const want[] = {
        "<|start|>system<|message|>",
        "Reasoning: high\n\n# Valid channels: analysis, commentary, final.",
        "<|start|>developer<|message|># Instructions\n\nBe brief.\n\n# Tools",
        "// Weather of a city\ntype get_weather = (_: {\"type\":",
        "<|start|>user<|message|>Weather in Paris?<|end|>",
        "<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>"
        "{\"city\":",
        "<|call|><|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>"
        "\"18C\"<|end|><|start|>assistant"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        if (!strstr(b.data, want[i])) {
            fprintf(stderr, "  missing '%s' in:\n%s\n", want[i], b.data);
            t->n_fail++;
        }
    CHECK(t, info.harmony && !info.think);
    CHECK_EQ_INT(t, info.harmony_start, CPULM_HARMONY_HEAD);
    cpulm_buf_release(&b);
    cpulm_oai_request_release(&q);
    /* an effort other than low, medium, high is refused */
    const char *bad = "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
                      "\"reasoning_effort\":\"max\"}";
    CHECK(t, cpulm_oai_parse(CPULM_OAI_CHAT, bad, strlen(bad), 1 << 20, &q, &e) != CPULM_OK);
    CHECK(t, e.status == 400 && !strcmp(e.param, "reasoning_effort"));
}
