/* test_oai.c: OpenAI request validation and response shapes (src/server/oai.c).
 * Responses are parsed back with the JSON reader and checked field by field. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/json.h"
#include "server/oai.h"
#include "test.h"

static cpulm_status parse_kind(cpulm_oai_kind k, const char *body, cpulm_oai_request *r,
                               cpulm_oai_error *e) {
    return cpulm_oai_parse(k, body, strlen(body), 1 << 20, r, e);
}

TEST(oai_parses_chat_request) {
    const char *body =
        "{\"model\":\"m\",\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},"
        "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"Hi\"}]}],"
        "\"max_tokens\":5,\"max_completion_tokens\":7,\"temperature\":0,"
        "\"top_p\":0.5,\"stop\":[\"a\",\"bb\"],\"seed\":42,\"n\":2,"
        "\"presence_penalty\":0.5,\"frequency_penalty\":-0.5,\"logprobs\":true,"
        "\"top_logprobs\":3,\"stream\":true,"
        "\"stream_options\":{\"include_usage\":true},\"user\":\"x\"}";
    cpulm_oai_request r;
    cpulm_oai_error e;
    REQUIRE(t, parse_kind(CPULM_OAI_CHAT, body, &r, &e) == CPULM_OK);
    CHECK_EQ_INT(t, cpulm_json_len(r.messages), 2);
    CHECK(t, r.model && strcmp(r.model, "m") == 0);
    CHECK_EQ_INT(t, r.max_tokens, 7);
    CHECK(t, r.sp.temp == 0.0f && r.sp.top_p == 0.5f);
    CHECK(t, r.sp.presence_penalty == 0.5f && r.sp.frequency_penalty == -0.5f);
    CHECK_EQ_INT(t, r.sp.seed, 42);
    CHECK_EQ_INT(t, r.n, 2);
    CHECK_EQ_INT(t, r.n_stop, 2);
    CHECK(t, strcmp(r.stop[1], "bb") == 0);
    CHECK_EQ_INT(t, r.logprobs, 3);
    CHECK(t, r.stream && r.include_usage);
    cpulm_buf b;
    cpulm_buf_init(&b, 0);
    cpulm_oai_chat_prompt info;
    REQUIRE(t, cpulm_oai_render_chat(NULL, "<s>", "</s>", r.messages, &b, &info, &e) == CPULM_OK);
    CHECK(t, strcmp(b.data, "System: Be brief.\nUser: Hi\nAssistant:") == 0);
    CHECK(t, strcmp(info.extra_stop, "\nUser:") == 0);
    CHECK(t, info.add_bos && !info.parse_special);
    cpulm_buf_release(&b);
    cpulm_oai_request_release(&r);
}

TEST(oai_renders_model_chat_templates) {
    const char *body = "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\","
                       "\"text\":\"a\"},{\"type\":\"text\",\"text\":\"b\"}]},"
                       "{\"role\":\"assistant\",\"content\":\"c\"}]}";
    cpulm_oai_request r;
    cpulm_oai_error e;
    REQUIRE(t, parse_kind(CPULM_OAI_CHAT, body, &r, &e) == CPULM_OK);
    const char *tmpl = "{{ bos_token }}{% for m in messages %}<|{{ m.role }}|>{{ m.content }}"
                       "{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}";
    cpulm_buf b;
    cpulm_buf_init(&b, 0);
    cpulm_oai_chat_prompt info;
    REQUIRE(t, cpulm_oai_render_chat(tmpl, "<s>", "</s>", r.messages, &b, &info, &e) == CPULM_OK);
    CHECK(t, strcmp(b.data, "<s><|user|>a\nb<|assistant|>c<|assistant|>") == 0);
    CHECK(t, info.parse_special && !info.add_bos); /* the template wrote BOS itself */
    CHECK(t, strcmp(info.extra_stop, "") == 0);
    cpulm_buf_reset(&b);
    CHECK(t, cpulm_oai_render_chat("{{ raise_exception('no system role') }}", NULL, NULL,
                                   r.messages, &b, &info, &e) != CPULM_OK);
    CHECK_EQ_INT(t, e.status, 400);
    CHECK(t, strstr(e.message, "no system role") != NULL);
    cpulm_buf_release(&b);
    cpulm_oai_request_release(&r);
}

TEST(oai_defaults_follow_openai) {
    cpulm_oai_request r;
    cpulm_oai_error e;
    REQUIRE(t, parse_kind(CPULM_OAI_COMPLETION, "{\"prompt\":\"Once\"}", &r, &e) == CPULM_OK);
    CHECK(t, r.prompt && r.prompt_len == 4);
    CHECK(t, r.sp.temp == 1.0f && r.sp.top_p == 1.0f && r.sp.top_k == 0 && r.sp.min_p == 0);
    CHECK_EQ_INT(t, r.max_tokens, -1);
    CHECK_EQ_INT(t, r.n, 1);
    CHECK_EQ_INT(t, r.logprobs, -1);
    CHECK_EQ_INT(t, r.stream, 0);
    CHECK_EQ_INT(t, r.priority, 0);
    cpulm_oai_request_release(&r);
    REQUIRE(t, parse_kind(CPULM_OAI_COMPLETION, "{\"prompt\":\"x\",\"priority\":-5}", &r, &e) ==
                   CPULM_OK);
    CHECK_EQ_INT(t, r.priority, -5);
    cpulm_oai_request_release(&r);
    REQUIRE(t, parse_kind(CPULM_OAI_COMPLETION,
                          "{\"prompt\":[\"x\"],\"stop\":\"\\n\","
                          "\"logprobs\":2}",
                          &r, &e) == CPULM_OK);
    CHECK(t, r.prompt && strcmp(r.prompt, "x") == 0);
    CHECK_EQ_INT(t, r.n_stop, 1);
    CHECK_EQ_INT(t, r.logprobs, 2);
    cpulm_oai_request_release(&r);
    REQUIRE(t, parse_kind(CPULM_OAI_COMPLETION, "{\"prompt\":[1,15,20],\"max_tokens\":null}", &r,
                          &e) == CPULM_OK);
    CHECK_EQ_INT(t, cpulm_json_len(r.prompt_tokens), 3);
    cpulm_oai_request_release(&r);
}

static void expect_400(test_ctx *t, cpulm_oai_kind k, const char *body, const char *param) {
    cpulm_oai_request r;
    cpulm_oai_error e;
    cpulm_status s = parse_kind(k, body, &r, &e);
    if (s == CPULM_OK || e.status != 400 || strcmp(e.param, param ? param : "") != 0 ||
        !e.message[0] || strcmp(e.type, "invalid_request_error") != 0) {
        fprintf(stderr, "  body %s: status %d param '%s' (%s)\n", body,
                s == CPULM_OK ? 200 : e.status, s == CPULM_OK ? "" : e.param,
                s == CPULM_OK ? "accepted" : e.message);
        t->n_fail++;
    }
    if (s == CPULM_OK) cpulm_oai_request_release(&r);
}

TEST(oai_rejects_bad_requests_naming_the_param) {
    expect_400(t, CPULM_OAI_CHAT, "{", NULL);
    expect_400(t, CPULM_OAI_CHAT, "[]", NULL);
    expect_400(t, CPULM_OAI_CHAT, "{}", "messages");
    expect_400(t, CPULM_OAI_CHAT, "{\"messages\":[]}", "messages");
    expect_400(t, CPULM_OAI_CHAT, "{\"messages\":[{\"content\":\"x\"}]}", "messages");
    expect_400(t, CPULM_OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":5}]}", "messages");
    expect_400(t, CPULM_OAI_CHAT,
               "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":"
               "\"image_url\"}]}]}",
               "messages");
    const char *ok = "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]";
    char body[512];
    const struct {
        const char *extra, *param;
    } cases[] = {
        {"\"temperature\":3", "temperature"},
        {"\"temperature\":\"hot\"", "temperature"},
        {"\"top_p\":1.5", "top_p"},
        {"\"max_tokens\":0", "max_tokens"},
        {"\"max_tokens\":1.5", "max_tokens"},
        {"\"max_completion_tokens\":-1", "max_completion_tokens"},
        {"\"n\":0", "n"},
        {"\"n\":129", "n"},
        {"\"stop\":5", "stop"},
        {"\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\"]", "stop"},
        {"\"stop\":[1]", "stop"},
        {"\"presence_penalty\":2.5", "presence_penalty"},
        {"\"frequency_penalty\":-3", "frequency_penalty"},
        {"\"seed\":1.5", "seed"},
        {"\"logprobs\":1", "logprobs"},
        {"\"top_logprobs\":2", "top_logprobs"},
        {"\"logprobs\":true,\"top_logprobs\":21", "top_logprobs"},
        {"\"stream\":\"yes\"", "stream"},
        {"\"stream_options\":{\"include_usage\":true}", "stream_options"},
        {"\"stream\":true,\"stream_options\":{\"include_usage\":1}", "include_usage"},
        {"\"model\":5", "model"},
        {"\"echo\":true", "echo"},
        {"\"priority\":1.5", "priority"},
        {"\"priority\":\"high\"", "priority"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(body, sizeof body, "{%s,%s}", ok, cases[i].extra);
        expect_400(t, CPULM_OAI_CHAT, body, cases[i].param);
    }
    expect_400(t, CPULM_OAI_COMPLETION, "{}", "prompt");
    expect_400(t, CPULM_OAI_COMPLETION, "{\"prompt\":[\"a\",\"b\"]}", "prompt");
    expect_400(t, CPULM_OAI_COMPLETION, "{\"prompt\":[1,\"a\"]}", "prompt");
    expect_400(t, CPULM_OAI_COMPLETION, "{\"prompt\":\"x\",\"logprobs\":6}", "logprobs");
    expect_400(t, CPULM_OAI_COMPLETION, "{\"prompt\":\"x\",\"logprobs\":true}", "logprobs");
}

TEST(oai_limits_nesting_and_size) {
    char deep[400];
    int n = 0;
    n += snprintf(deep + n, sizeof deep - n, "{\"prompt\":\"x\",\"a\":");
    for (int i = 0; i < 100; i++)
        deep[n++] = '[';
    for (int i = 0; i < 100; i++)
        deep[n++] = ']';
    deep[n++] = '}';
    deep[n] = 0;
    cpulm_oai_request r;
    cpulm_oai_error e;
    CHECK(t, parse_kind(CPULM_OAI_COMPLETION, deep, &r, &e) != CPULM_OK);
    CHECK_EQ_INT(t, e.status, 400);
    const char *body = "{\"prompt\":\"0123456789\"}";
    CHECK(t, cpulm_oai_parse(CPULM_OAI_COMPLETION, body, strlen(body), 10, &r, &e) != CPULM_OK);
}

TEST(oai_error_shape) {
    cpulm_oai_error e;
    cpulm_oai_error_set(&e, 429, NULL, "queue full (%d waiting)", 3);
    cpulm_buf b;
    cpulm_buf_init(&b, 0);
    cpulm_oai_write_error(&b, &e);
    cpulm_json_doc *d = NULL;
    REQUIRE(t, cpulm_json_parse(b.data, b.len, NULL, &d, NULL, NULL) == CPULM_OK);
    const cpulm_json *err = cpulm_json_get(cpulm_json_root(d), "error");
    CHECK(t, strcmp(cpulm_json_str(cpulm_json_get(err, "message")), "queue full (3 waiting)") == 0);
    CHECK(t, strcmp(cpulm_json_str(cpulm_json_get(err, "type")), "rate_limit_error") == 0);
    CHECK(t, cpulm_json_get(err, "param")->type == CPULM_JSON_NULL);
    CHECK(t, strcmp(cpulm_json_str(cpulm_json_get(err, "code")), "rate_limit_exceeded") == 0);
    cpulm_json_free(d);
    cpulm_buf_release(&b);
    cpulm_oai_error_set(&e, 401, NULL, "bad key");
    CHECK(t, strcmp(e.type, "authentication_error") == 0 && strcmp(e.code, "invalid_api_key") == 0);
}

static cpulm_json_doc *parse_sse(test_ctx *t, const cpulm_buf *b) {
    if (b->len < 8 || strncmp(b->data, "data: ", 6) != 0 || strcmp(b->data + b->len - 2, "\n\n")) {
        t->n_fail++;
        return NULL;
    }
    cpulm_json_doc *d = NULL;
    if (cpulm_json_parse(b->data + 6, b->len - 8, NULL, &d, NULL, NULL) != CPULM_OK) t->n_fail++;
    return d;
}

TEST(oai_writes_chat_response_and_chunks) {
    cpulm_oai_meta meta = {.kind = CPULM_OAI_CHAT,
                           .id = "chatcmpl-1",
                           .created = 123,
                           .model = "stories",
                           .logprobs = -1};
    cpulm_oai_choice ch[2];
    cpulm_oai_choice_init(&ch[0]);
    cpulm_oai_choice_init(&ch[1]);
    cpulm_buf_puts(&ch[0].text, "Hi \"there\"");
    ch[0].finish = CPULM_FINISH_STOP;
    ch[1].finish = CPULM_FINISH_LENGTH;
    cpulm_oai_usage u = {5, 7, 2, 0, 0};
    cpulm_buf b;
    cpulm_buf_init(&b, 0);
    cpulm_oai_write_response(&b, &meta, ch, 2, &u);
    cpulm_json_doc *d = NULL;
    REQUIRE(t, cpulm_json_parse(b.data, b.len, NULL, &d, NULL, NULL) == CPULM_OK);
    const cpulm_json *root = cpulm_json_root(d);
    CHECK(t, strcmp(cpulm_json_str(cpulm_json_get(root, "object")), "chat.completion") == 0);
    CHECK_EQ_INT(t, cpulm_json_num(cpulm_json_get(root, "created"), 0), 123);
    const cpulm_json *c0 = cpulm_json_at(cpulm_json_get(root, "choices"), 0);
    const cpulm_json *msg = cpulm_json_get(c0, "message");
    CHECK(t, strcmp(cpulm_json_str(cpulm_json_get(msg, "content")), "Hi \"there\"") == 0);
    CHECK(t, strcmp(cpulm_json_str(cpulm_json_get(msg, "role")), "assistant") == 0);
    CHECK(t, strcmp(cpulm_json_str(cpulm_json_get(c0, "finish_reason")), "stop") == 0);
    const cpulm_json *c1 = cpulm_json_at(cpulm_json_get(root, "choices"), 1);
    CHECK(t, strcmp(cpulm_json_str(cpulm_json_get(c1, "finish_reason")), "length") == 0);
    const cpulm_json *usage = cpulm_json_get(root, "usage");
    CHECK_EQ_INT(t, cpulm_json_num(cpulm_json_get(usage, "total_tokens"), 0), 12);
    CHECK_EQ_INT(
        t,
        cpulm_json_num(
            cpulm_json_get(cpulm_json_get(usage, "prompt_tokens_details"), "cached_tokens"), 0),
        2);
    cpulm_json_free(d);
    /* first chunk: role + empty content; later: content only; finish: empty delta */
    meta.include_usage = 1;
    cpulm_oai_delta dl = {.index = 1, .text = "", .finish = -1, .first = 1};
    cpulm_buf_reset(&b);
    cpulm_oai_write_chunk(&b, &meta, &dl);
    d = parse_sse(t, &b);
    REQUIRE(t, d);
    root = cpulm_json_root(d);
    CHECK(t, strcmp(cpulm_json_str(cpulm_json_get(root, "object")), "chat.completion.chunk") == 0);
    c0 = cpulm_json_at(cpulm_json_get(root, "choices"), 0);
    CHECK_EQ_INT(t, cpulm_json_num(cpulm_json_get(c0, "index"), -1), 1);
    CHECK(t, strcmp(cpulm_json_str(cpulm_json_get(cpulm_json_get(c0, "delta"), "role")),
                    "assistant") == 0);
    CHECK(t, cpulm_json_get(c0, "finish_reason")->type == CPULM_JSON_NULL);
    CHECK(t, cpulm_json_get(root, "usage")->type == CPULM_JSON_NULL);
    cpulm_json_free(d);
    dl = (cpulm_oai_delta){.index = 0, .finish = CPULM_FINISH_LENGTH};
    cpulm_buf_reset(&b);
    cpulm_oai_write_chunk(&b, &meta, &dl);
    d = parse_sse(t, &b);
    REQUIRE(t, d);
    c0 = cpulm_json_at(cpulm_json_get(cpulm_json_root(d), "choices"), 0);
    CHECK_EQ_INT(t, cpulm_json_len(cpulm_json_get(c0, "delta")), 0);
    CHECK(t, strcmp(cpulm_json_str(cpulm_json_get(c0, "finish_reason")), "length") == 0);
    cpulm_json_free(d);
    /* reasoning (<think> text) travels as reasoning_content, never inside content */
    dl = (cpulm_oai_delta){.index = 0, .reasoning = "plan", .n_reasoning = 4, .finish = -1};
    cpulm_buf_reset(&b);
    cpulm_oai_write_chunk(&b, &meta, &dl);
    d = parse_sse(t, &b);
    REQUIRE(t, d);
    const cpulm_json *delta =
        cpulm_json_get(cpulm_json_at(cpulm_json_get(cpulm_json_root(d), "choices"), 0), "delta");
    CHECK(t, strcmp(cpulm_json_str(cpulm_json_get(delta, "reasoning_content")), "plan") == 0);
    CHECK(t, cpulm_json_get(delta, "content") == NULL);
    cpulm_json_free(d);
    cpulm_buf_puts(&ch[0].reasoning, "think\n");
    cpulm_buf_reset(&b);
    cpulm_oai_write_response(&b, &meta, ch, 1, &u);
    REQUIRE(t, cpulm_json_parse(b.data, b.len, NULL, &d, NULL, NULL) == CPULM_OK);
    msg =
        cpulm_json_get(cpulm_json_at(cpulm_json_get(cpulm_json_root(d), "choices"), 0), "message");
    CHECK(t, strcmp(cpulm_json_str(cpulm_json_get(msg, "reasoning_content")), "think") == 0);
    CHECK(t, strcmp(cpulm_json_str(cpulm_json_get(msg, "content")), "Hi \"there\"") == 0);
    cpulm_json_free(d);
    cpulm_buf_reset(&b);
    cpulm_oai_write_usage_chunk(&b, &meta, &u);
    d = parse_sse(t, &b);
    REQUIRE(t, d);
    CHECK_EQ_INT(t, cpulm_json_len(cpulm_json_get(cpulm_json_root(d), "choices")), 0);
    CHECK_EQ_INT(
        t,
        cpulm_json_num(
            cpulm_json_get(cpulm_json_get(cpulm_json_root(d), "usage"), "completion_tokens"), 0),
        7);
    cpulm_json_free(d);
    cpulm_buf_release(&b);
    cpulm_oai_choice_release(&ch[0]);
    cpulm_oai_choice_release(&ch[1]);
}

TEST(oai_writes_logprobs_in_both_shapes) {
    const char *path = test_shared_path("models/stories260K.gguf");
    if (!path) SKIP(t, "stories260K.gguf not found (set CPULM_SHARED)");
    cpulm_model_params mp = cpulm_model_default_params();
    mp.vocab_only = 1;
    cpulm_model *m = cpulm_model_load(path, &mp, NULL);
    REQUIRE(t, m);
    cpulm_token ids[8];
    int32_t n = 0;
    CHECK(t, cpulm_tokenize(m, "cat", 3, 0, 0, ids, 8, &n) == CPULM_OK); /* SPM: " c" "at" */
    REQUIRE(t, n >= 1);
    char want[32];
    int32_t wn = 0;
    REQUIRE(t, cpulm_token_to_piece(m, ids[0], 0, want, sizeof want - 1, &wn) == CPULM_OK);
    want[wn] = 0;
    REQUIRE(t, wn > 0);
    cpulm_sched_lp lp = {.token = ids[0], .logprob = -0.25f, .n_top = 2};
    lp.top[0] = (cpulm_sched_top){ids[0], -0.25f};
    lp.top[1] = (cpulm_sched_top){3 + 'A', -2.0f}; /* byte token <0x41> */
    cpulm_oai_choice c;
    cpulm_oai_choice_init(&c);
    cpulm_buf_puts(&c.text, " cat");
    cpulm_oai_choice_add_lp(&c, &lp);
    cpulm_oai_choice_add_lp(&c, &lp);
    c.finish = 0;
    cpulm_oai_meta meta = {.kind = CPULM_OAI_CHAT, .id = "x", .model = "m", .m = m, .logprobs = 2};
    cpulm_oai_usage u = {1, 2, 0, 0, 0};
    cpulm_buf b;
    cpulm_buf_init(&b, 0);
    cpulm_oai_write_response(&b, &meta, &c, 1, &u);
    cpulm_json_doc *d = NULL;
    REQUIRE(t, cpulm_json_parse(b.data, b.len, NULL, &d, NULL, NULL) == CPULM_OK);
    const cpulm_json *ch0 = cpulm_json_at(cpulm_json_get(cpulm_json_root(d), "choices"), 0);
    const cpulm_json *content = cpulm_json_get(cpulm_json_get(ch0, "logprobs"), "content");
    CHECK_EQ_INT(t, cpulm_json_len(content), 2);
    const cpulm_json *e0 = cpulm_json_at(content, 0);
    CHECK(t, strcmp(cpulm_json_str(cpulm_json_get(e0, "token")), want) == 0);
    CHECK_NEAR(t, cpulm_json_num(cpulm_json_get(e0, "logprob"), 0), -0.25, 1e-6);
    CHECK_EQ_INT(t, cpulm_json_len(cpulm_json_get(e0, "bytes")), wn);
    CHECK_EQ_INT(t, cpulm_json_num(cpulm_json_at(cpulm_json_get(e0, "bytes"), 0), 0),
                 (unsigned char)want[0]);
    const cpulm_json *top1 = cpulm_json_at(cpulm_json_get(e0, "top_logprobs"), 1);
    CHECK(t, strcmp(cpulm_json_str(cpulm_json_get(top1, "token")), "A") == 0);
    cpulm_json_free(d);
    meta.kind = CPULM_OAI_COMPLETION;
    cpulm_buf_reset(&b);
    cpulm_oai_write_response(&b, &meta, &c, 1, &u);
    REQUIRE(t, cpulm_json_parse(b.data, b.len, NULL, &d, NULL, NULL) == CPULM_OK);
    ch0 = cpulm_json_at(cpulm_json_get(cpulm_json_root(d), "choices"), 0);
    const cpulm_json *lpo = cpulm_json_get(ch0, "logprobs");
    CHECK(t, strcmp(cpulm_json_str(cpulm_json_at(cpulm_json_get(lpo, "tokens"), 1)), want) == 0);
    CHECK_EQ_INT(t, cpulm_json_num(cpulm_json_at(cpulm_json_get(lpo, "text_offset"), 1), -1), wn);
    CHECK_NEAR(t,
               cpulm_json_num(
                   cpulm_json_get(cpulm_json_at(cpulm_json_get(lpo, "top_logprobs"), 0), "A"), 0),
               -2.0, 1e-6);
    CHECK(t, strcmp(cpulm_json_str(cpulm_json_get(ch0, "text")), " cat") == 0);
    cpulm_json_free(d);
    cpulm_buf_release(&b);
    cpulm_oai_choice_release(&c);
    cpulm_model_free(m);
}

TEST(oai_writes_models_list) {
    cpulm_buf b;
    cpulm_buf_init(&b, 0);
    cpulm_oai_write_models(&b, "stories260K", 7);
    cpulm_json_doc *d = NULL;
    REQUIRE(t, cpulm_json_parse(b.data, b.len, NULL, &d, NULL, NULL) == CPULM_OK);
    const cpulm_json *m0 = cpulm_json_at(cpulm_json_get(cpulm_json_root(d), "data"), 0);
    CHECK(t, strcmp(cpulm_json_str(cpulm_json_get(m0, "id")), "stories260K") == 0);
    CHECK(t, strcmp(cpulm_json_str(cpulm_json_get(m0, "object")), "model") == 0);
    cpulm_json_free(d);
    cpulm_buf_release(&b);
}

/* Issue #9 (minor): a chat role outside OpenAI's set is a 400 naming 'messages'; the known
 * roles (tool calls included) still parse. */
TEST(oai_rejects_unknown_chat_roles) {
    expect_400(t, CPULM_OAI_CHAT, "{\"messages\":[{\"role\":\"evil\",\"content\":\"x\"}]}",
               "messages");
    expect_400(t, CPULM_OAI_CHAT,
               "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"},"
               "{\"role\":\"User\",\"content\":\"y\"}]}",
               "messages");
    expect_400(t, CPULM_OAI_CHAT, "{\"messages\":[{\"role\":\"\",\"content\":\"x\"}]}", "messages");
    const char *roles[] = {"system", "developer", "user", "assistant", "tool"};
    for (size_t k = 0; k < sizeof roles / sizeof roles[0]; k++) {
        char body[128];
        snprintf(body, sizeof body, "{\"messages\":[{\"role\":\"%s\",\"content\":\"x\"}]}",
                 roles[k]);
        cpulm_oai_request r;
        cpulm_oai_error e;
        CHECK_EQ_INT(t, cpulm_oai_parse(CPULM_OAI_CHAT, body, strlen(body), 1 << 20, &r, &e),
                     CPULM_OK);
        cpulm_oai_request_release(&r);
    }
}

/* chat_template_kwargs.enable_thinking reaches the template; templates that write <think>
 * blocks are flagged for splitting, and prompts that open one (DeepSeek-R1) start inside. */
TEST(oai_template_kwargs_and_think_flags) {
    const char *msgs = "\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}]";
    char body[256];
    cpulm_oai_request r;
    cpulm_oai_error e;
    snprintf(body, sizeof body, "{%s}", msgs);
    REQUIRE(t, parse_kind(CPULM_OAI_CHAT, body, &r, &e) == CPULM_OK);
    CHECK_EQ_INT(t, r.enable_thinking, 1);
    cpulm_oai_request_release(&r);
    snprintf(body, sizeof body, "{%s,\"chat_template_kwargs\":{\"enable_thinking\":false,\"x\":1}}",
             msgs);
    REQUIRE(t, parse_kind(CPULM_OAI_CHAT, body, &r, &e) == CPULM_OK);
    CHECK_EQ_INT(t, r.enable_thinking, 0);
    const char *tmpl =
        "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
        "{% endfor %}<|im_start|>assistant\n{% if enable_thinking is defined and "
        "enable_thinking is false %}<think>\n\n</think>\n\n{% endif %}";
    cpulm_buf b;
    cpulm_buf_init(&b, 0);
    cpulm_oai_chat_prompt info;
    REQUIRE(t, cpulm_oai_render_chat_full(tmpl, NULL, NULL, r.messages, NULL, 0, &b, &info, &e) ==
                   CPULM_OK);
    CHECK(t, strstr(b.data, "assistant\n<think>\n\n</think>\n\n") != NULL);
    CHECK(t, info.think && !info.think_open);
    cpulm_buf_reset(&b);
    REQUIRE(t, cpulm_oai_render_chat_full(tmpl, NULL, NULL, r.messages, NULL, 1, &b, &info, &e) ==
                   CPULM_OK);
    CHECK(t, strstr(b.data, "<think>") == NULL && info.think && !info.think_open);
    cpulm_buf_reset(&b);
    REQUIRE(t, cpulm_oai_render_chat_full(cpulm_chat_builtin("deepseek-r1"), NULL, NULL, r.messages,
                                          NULL, 1, &b, &info, &e) == CPULM_OK);
    CHECK(t, info.think && info.think_open);
    cpulm_buf_reset(&b);
    REQUIRE(t, cpulm_oai_render_chat(NULL, NULL, NULL, r.messages, &b, &info, &e) == CPULM_OK);
    CHECK(t, !info.think && !info.think_open);
    cpulm_buf_release(&b);
    cpulm_oai_request_release(&r);
    snprintf(body, sizeof body, "{%s,\"chat_template_kwargs\":[]}", msgs);
    CHECK(t, parse_kind(CPULM_OAI_CHAT, body, &r, &e) != CPULM_OK && e.status == 400);
    CHECK(t, strcmp(e.param, "chat_template_kwargs") == 0);
    snprintf(body, sizeof body, "{%s,\"chat_template_kwargs\":{\"enable_thinking\":\"no\"}}", msgs);
    CHECK(t, parse_kind(CPULM_OAI_CHAT, body, &r, &e) != CPULM_OK && e.status == 400);
    CHECK(t, strcmp(e.param, "enable_thinking") == 0);
}

/* Feeds text to cpulm_oai_think_feed in pieces of `step` bytes (0: whole). */
static void think_feed_steps(const char *s, int inside, size_t step, cpulm_buf *txt,
                             cpulm_buf *rsn) {
    cpulm_chat_think f;
    cpulm_chat_think_init(&f, inside);
    size_t n = strlen(s);
    if (!step) step = n;
    for (size_t off = 0; off < n; off += step) {
        size_t k = n - off < step ? n - off : step;
        cpulm_oai_think_feed(&f, s + off, k, 0, txt, rsn);
    }
    cpulm_oai_think_feed(&f, NULL, 0, 1, txt, rsn);
}

/* Recorded Qwen3 / DeepSeek-R1 style replies split the same way whatever the event sizes
 * (tags cut across events, slices beyond the 512-byte scratch). */
TEST(oai_think_feed_splits_reasoning) {
    static const struct {
        const char *in;
        int inside;
        const char *text, *reasoning;
    } cases[] = {
        {"<think>\nI should greet.\n</think>\n\nHello!", 0, "Hello!", "I should greet.\n"},
        {"plan it</think>\n\nanswer <b>", 1, "answer <b>", "plan it"},
        {"no reasoning here <thin", 0, "no reasoning here <thin", ""},
        {"<think>\n\n</think>\n\nDirect.", 0, "Direct.", ""},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        for (size_t step = 0; step < 6; step++) {
            cpulm_buf txt, rsn;
            cpulm_buf_init(&txt, 0);
            cpulm_buf_init(&rsn, 0);
            think_feed_steps(cases[c].in, cases[c].inside, step, &txt, &rsn);
            cpulm_buf_putc(&txt, 0);
            cpulm_buf_putc(&rsn, 0);
            CHECK(t, strcmp(txt.data, cases[c].text) == 0);
            CHECK(t, strcmp(rsn.data, cases[c].reasoning) == 0);
            cpulm_buf_release(&txt);
            cpulm_buf_release(&rsn);
        }
    }
    /* 2000 bytes of reasoning then an answer, in one event: slices of the scratch */
    cpulm_buf in, txt, rsn;
    cpulm_buf_init(&in, 0);
    cpulm_buf_init(&txt, 0);
    cpulm_buf_init(&rsn, 0);
    cpulm_buf_puts(&in, "<think>");
    for (int i = 0; i < 200; i++)
        cpulm_buf_puts(&in, "abcdefghi ");
    cpulm_buf_puts(&in, "</think>ok");
    cpulm_buf_putc(&in, 0);
    think_feed_steps(in.data, 0, 0, &txt, &rsn);
    CHECK_EQ_INT(t, (int)rsn.len, 2000);
    CHECK(t, txt.len == 2 && memcmp(txt.data, "ok", 2) == 0);
    cpulm_buf_release(&in);
    cpulm_buf_release(&txt);
    cpulm_buf_release(&rsn);
}

/* ---- fields beyond OpenAI's core (oai_fields.c) ---- */

static int parse_ok(test_ctx *t, cpulm_oai_kind k, const char *body, cpulm_oai_request *r) {
    cpulm_oai_error e;
    if (parse_kind(k, body, r, &e) == CPULM_OK) return 1;
    fprintf(stderr, "  body %s: refused: %s\n", body, e.message);
    t->n_fail++;
    return 0;
}

/* Every field of OpenAI's, llama-server's or vLLM's API that would change the output and
 * is not implemented is a 400 naming it; at its neutral value it is accepted, as are
 * fields that do not change the output. */
TEST(oai_refuses_unimplemented_fields) {
    const char *refused[][2] = {
        {"\"mirostat\":2", "mirostat"},
        {"\"tfs_z\":0.9", "tfs_z"},
        {"\"dry_multiplier\":0.8", "dry_multiplier"},
        {"\"xtc_probability\":0.5", "xtc_probability"},
        {"\"top_n_sigma\":1.5", "top_n_sigma"},
        {"\"dynatemp_range\":0.5", "dynatemp_range"},
        {"\"n_probs\":3", "n_probs"},
        {"\"min_keep\":5", "min_keep"},
        {"\"grammar_lazy\":true", "grammar_lazy"},
        {"\"grammar_triggers\":[{\"type\":0,\"value\":\"x\"}]", "grammar_triggers"},
        {"\"samplers\":[\"top_k\"]", "samplers"},
        {"\"suffix\":\"end\"", "suffix"},
        {"\"best_of\":3", "best_of"},
        {"\"best_of\":\"3\"", "best_of"},
        {"\"functions\":[{\"name\":\"f\"}]", "functions"},
        {"\"function_call\":{\"name\":\"f\"}", "function_call"},
        {"\"modalities\":[\"text\",\"audio\"]", "modalities"},
        {"\"audio\":{\"voice\":\"x\"}", "audio"},
        {"\"reasoning_effort\":\"max\"", "reasoning_effort"}, /* low/medium/high: accepted */
        {"\"use_beam_search\":true", "use_beam_search"},
        {"\"stop_token_ids\":[2]", "stop_token_ids"},
        {"\"min_tokens\":4", "min_tokens"},
        {"\"repetition_penalty\":1.2", "repetition_penalty"},
        {"\"guided_json\":{}", "guided_json"},
        {"\"skip_special_tokens\":false", "skip_special_tokens"},
        {"\"add_generation_prompt\":false", "add_generation_prompt"},
        {"\"n_predict\":0", "n_predict"},
        {"\"n_predict\":1.5", "n_predict"},
        {"\"n_keep\":\"all\"", "n_keep"},
        {"\"repeat_last_n\":-2", "repeat_last_n"},
        {"\"typical_p\":1.5", "typical_p"},
        {"\"reasoning_format\":\"deepseek-legacy\"", "reasoning_format"},
    };
    const char *ok = "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]";
    char body[512];
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        snprintf(body, sizeof body, "{%s,%s}", ok, refused[i][0]);
        expect_400(t, CPULM_OAI_CHAT, body, refused[i][1]);
        snprintf(body, sizeof body, "{\"prompt\":\"x\",%s}", refused[i][0]);
        expect_400(t, CPULM_OAI_COMPLETION, body, refused[i][1]);
    }
    /* neutral values (llama-server's web UI sends these) and fields that change nothing */
    snprintf(body, sizeof body,
             "{%s,\"mirostat\":0,\"mirostat_tau\":5,\"tfs_z\":1,\"dry_multiplier\":0,"
             "\"dry_base\":1.75,\"xtc_probability\":0,\"top_n_sigma\":-1,\"dynatemp_range\":0,"
             "\"n_probs\":0,\"min_keep\":0,\"grammar_lazy\":false,\"samplers\":null,"
             "\"suffix\":\"\",\"best_of\":1,\"modalities\":[\"text\"],\"function_call\":\"auto\","
             "\"skip_special_tokens\":true,\"user\":\"u\",\"metadata\":{\"a\":\"b\"},"
             "\"store\":false,\"service_tier\":\"auto\",\"parallel_tool_calls\":true,"
             "\"cache_prompt\":true,\"id_slot\":-1,\"prediction\":null,\"n_keep\":-1}",
             ok);
    cpulm_oai_request r;
    if (parse_ok(t, CPULM_OAI_CHAT, body, &r)) cpulm_oai_request_release(&r);
    if (parse_ok(t, CPULM_OAI_CHAT,
                 "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
                 "\"n\":2,\"best_of\":2}",
                 &r))
        cpulm_oai_request_release(&r);
}

/* llama-server's names: n_predict is max_tokens (and beats it; max_completion_tokens beats
 * both), repeat_last_n the penalty window, typical_p the sampler stage, reasoning_format
 * "none" keeps <think> text in content; a "\u0000" stop string keeps its length. */
TEST(oai_llama_server_aliases) {
    cpulm_oai_request r;
    if (parse_ok(t, CPULM_OAI_COMPLETION,
                 "{\"prompt\":\"x\",\"max_tokens\":9,\"n_predict\":4,\"repeat_last_n\":16,"
                 "\"typical_p\":0.5,\"stop\":[\"\\u0000\",\"a\\u0000b\"]}",
                 &r)) {
        CHECK_EQ_INT(t, r.max_tokens, 4);
        CHECK_EQ_INT(t, r.sp.repeat_last_n, 16);
        CHECK_NEAR(t, r.sp.typical_p, 0.5, 1e-7);
        CHECK_EQ_INT(t, r.n_stop, 2);
        CHECK(t, r.stop_len[0] == 1 && r.stop[0][0] == 0);
        CHECK(t, r.stop_len[1] == 3 && memcmp(r.stop[1], "a\0b", 3) == 0);
        CHECK_EQ_INT(t, r.reasoning_none, 0);
        cpulm_oai_request_release(&r);
    }
    if (parse_ok(t, CPULM_OAI_COMPLETION,
                 "{\"prompt\":\"x\",\"max_completion_tokens\":9,\"n_predict\":-1}", &r)) {
        CHECK_EQ_INT(t, r.max_tokens, 9);
        cpulm_oai_request_release(&r);
    }
    if (parse_ok(t, CPULM_OAI_COMPLETION, "{\"prompt\":\"x\",\"n_predict\":-1}", &r)) {
        CHECK_EQ_INT(t, r.max_tokens, -1);
        cpulm_oai_request_release(&r);
    }
    if (parse_ok(t, CPULM_OAI_CHAT,
                 "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
                 "\"reasoning_format\":\"none\"}",
                 &r)) {
        CHECK_EQ_INT(t, r.reasoning_none, 1);
        cpulm_oai_request_release(&r);
    }
}

/* llama-server's per-request speculation limits: dotted keys (what it reads) or a
 * "speculative" object; ranges checked (400 naming speculative); absent: -1. */
TEST(oai_speculative_fields) {
    cpulm_oai_request r;
    if (parse_ok(t, CPULM_OAI_COMPLETION, "{\"prompt\":\"x\"}", &r)) {
        CHECK_EQ_INT(t, r.spec_n_max, -1);
        CHECK_EQ_INT(t, r.spec_n_min, -1);
        CHECK(t, r.spec_p_min < 0);
        cpulm_oai_request_release(&r);
    }
    if (parse_ok(t, CPULM_OAI_COMPLETION,
                 "{\"prompt\":\"x\",\"speculative.n_max\":0,\"speculative.n_min\":2,"
                 "\"speculative.p_min\":0.5}",
                 &r)) {
        CHECK_EQ_INT(t, r.spec_n_max, 0);
        CHECK_EQ_INT(t, r.spec_n_min, 2);
        CHECK_NEAR(t, r.spec_p_min, 0.5, 1e-7);
        cpulm_oai_request_release(&r);
    }
    if (parse_ok(t, CPULM_OAI_CHAT,
                 "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
                 "\"speculative\":{\"n_max\":7}}",
                 &r)) {
        CHECK_EQ_INT(t, r.spec_n_max, 7);
        cpulm_oai_request_release(&r);
    }
    expect_400(t, CPULM_OAI_COMPLETION, "{\"prompt\":\"x\",\"speculative.n_max\":-1}",
               "speculative");
    expect_400(t, CPULM_OAI_COMPLETION, "{\"prompt\":\"x\",\"speculative.n_min\":1.5}",
               "speculative");
    expect_400(t, CPULM_OAI_COMPLETION, "{\"prompt\":\"x\",\"speculative.p_min\":2}",
               "speculative");
}

/* With drafts verified, the response carries llama-server's timings.draft_n and
 * draft_n_accepted next to usage; without, no timings object. */
TEST(oai_response_draft_timings) {
    cpulm_oai_meta meta = {.kind = CPULM_OAI_COMPLETION,
                           .id = "cmpl-1",
                           .created = 1,
                           .model = "stories",
                           .logprobs = -1};
    cpulm_oai_choice ch;
    cpulm_oai_choice_init(&ch);
    cpulm_buf_puts(&ch.text, "hi");
    ch.finish = CPULM_FINISH_LENGTH;
    for (int with = 0; with < 2; with++) {
        cpulm_oai_usage u = {3, 9, 0, with ? 12 : 0, with ? 7 : 0};
        cpulm_buf b;
        cpulm_buf_init(&b, 0);
        cpulm_oai_write_response(&b, &meta, &ch, 1, &u);
        cpulm_json_doc *d = NULL;
        REQUIRE(t, cpulm_json_parse(b.data, b.len, NULL, &d, NULL, NULL) == CPULM_OK);
        const cpulm_json *tm = cpulm_json_get(cpulm_json_root(d), "timings");
        CHECK(t, (tm != NULL) == with);
        if (with) {
            CHECK_EQ_INT(t, cpulm_json_num(cpulm_json_get(tm, "draft_n"), 0), 12);
            CHECK_EQ_INT(t, cpulm_json_num(cpulm_json_get(tm, "draft_n_accepted"), 0), 7);
        }
        CHECK_EQ_INT(t,
                     cpulm_json_num(cpulm_json_get(cpulm_json_get(cpulm_json_root(d), "usage"),
                                                   "completion_tokens"),
                                    0),
                     9);
        cpulm_json_free(d);
        cpulm_buf_release(&b);
    }
    cpulm_oai_choice_release(&ch);
}

/* logit_bias: OpenAI's {"id": bias} object, llama-server's [[id or text, bias]] pairs and
 * its false (a ban); shapes and values checked at parse, ids against the vocabulary when
 * resolved (400 naming logit_bias), texts tokenized (each token biased). */
TEST(oai_logit_bias_forms) {
    const char *bad[] = {
        "\"logit_bias\":5",
        "\"logit_bias\":{\"12\":101}",
        "\"logit_bias\":{\"12\":true}",
        "\"logit_bias\":{\"12\":\"-5\"}",
        "\"logit_bias\":[[12]]",
        "\"logit_bias\":[12,5]",
        "\"logit_bias\":[[1.5,5]]",
        "\"logit_bias\":[[12,-100.5]]",
    };
    char body[256];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(body, sizeof body, "{\"prompt\":\"x\",%s}", bad[i]);
        expect_400(t, CPULM_OAI_COMPLETION, body, "logit_bias");
    }
    const char *path = test_shared_path("models/stories260K.gguf");
    cpulm_model *m = path ? cpulm_model_load(path, NULL, NULL) : NULL;
    if (!m) SKIP(t, "stories260K.gguf not found (set CPULM_SHARED)");
    cpulm_oai_request r;
    cpulm_oai_error e;
    cpulm_logit_bias *lb = NULL;
    int32_t n = 0;
    if (parse_ok(t, CPULM_OAI_CHAT,
                 "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
                 "\"logit_bias\":{\"5\":-100,\"300\":12.5,\"7\":false}}",
                 &r)) {
        REQUIRE(t, cpulm_oai_resolve_bias(&r, m, &lb, &n, &e) == 0);
        CHECK_EQ_INT(t, n, 3);
        CHECK(t, n == 3 && lb[0].token == 5 && lb[0].bias == -100.0f);
        CHECK(t, n == 3 && lb[1].token == 300 && lb[1].bias == 12.5f);
        CHECK(t, n == 3 && lb[2].token == 7 && lb[2].bias == -INFINITY);
        free(lb);
        cpulm_oai_request_release(&r);
    }
    int32_t want = 0;
    cpulm_token tok[16];
    REQUIRE(t, cpulm_tokenize(m, "Once upon", 9, 0, 0, tok, 16, &want) == CPULM_OK && want > 1);
    if (parse_ok(t, CPULM_OAI_COMPLETION,
                 "{\"prompt\":\"x\",\"logit_bias\":[[\"Once upon\",false],[9,2]]}", &r)) {
        REQUIRE(t, cpulm_oai_resolve_bias(&r, m, &lb, &n, &e) == 0);
        CHECK_EQ_INT(t, n, want + 1);
        for (int32_t i = 0; i < want && i < n; i++)
            CHECK(t, lb[i].token == tok[i] && lb[i].bias == -INFINITY);
        CHECK(t, n == want + 1 && lb[want].token == 9 && lb[want].bias == 2.0f);
        free(lb);
        cpulm_oai_request_release(&r);
    }
    const char *out_of_vocab[] = {"{\"prompt\":\"x\",\"logit_bias\":{\"512\":1}}",
                                  "{\"prompt\":\"x\",\"logit_bias\":{\"-1\":1}}",
                                  "{\"prompt\":\"x\",\"logit_bias\":[[99999999999999999,1]]}",
                                  "{\"prompt\":\"x\",\"logit_bias\":{\"99999999999999999999\":1}}"};
    for (size_t i = 0; i < 4; i++) {
        if (!parse_ok(t, CPULM_OAI_COMPLETION, out_of_vocab[i], &r)) continue;
        CHECK(t, cpulm_oai_resolve_bias(&r, m, &lb, &n, &e) < 0);
        CHECK(t, e.status == 400 && strcmp(e.param, "logit_bias") == 0 && !lb && n == 0);
        cpulm_oai_request_release(&r);
    }
    cpulm_model_free(m);
}
