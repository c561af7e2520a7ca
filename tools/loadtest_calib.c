/* loadtest_calib.c: what the prompt words cost in the server's tokens (see loadtest_calib.h).
 * A few hundred small requests on one kept-alive connection, before any level runs. */
#include "loadtest_calib.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct cal_conn {
    lt_conn c;
    const lt_url *u;
    const char *api_key;
    double timeout_s;
    int last_status; /* of the last exchange, for the message when a method fails */
} cal_conn;

/* The probe text: "The" and the word list (131 words). */
static void probe_text(cpulm_buf *out) {
    cpulm_buf_puts(out, "The");
    for (int i = 0; i < WL_N_WORDS; i++)
        cpulm_buf_printf(out, " %s", workload_word(i));
}

/* Tokens of text as POST /tokenize counts them; -1 when it does not answer with "tokens". */
static int32_t tokenize(cal_conn *k, const char *text, int add_special) {
    cpulm_buf b;
    cpulm_buf_init(&b, 0);
    cpulm_json_writer w;
    cpulm_json_writer_init(&w, &b, 0, 0);
    cpulm_json_obj_begin(&w);
    cpulm_json_kv_str(&w, "content", text);
    cpulm_json_kv_bool(&w, "add_special", add_special);
    cpulm_json_obj_end(&w);
    lt_result r;
    lt_post(&k->c, k->u, "/tokenize", b.data, b.len, k->api_key, 0, k->timeout_s, &r);
    k->last_status = r.status;
    int32_t n = r.status == 200 && !r.error[0] ? r.n_tokens : -1;
    lt_result_release(&r);
    cpulm_buf_release(&b);
    return n;
}

/* usage.prompt_tokens of a one-token request whose prompt (or user message) is text. */
static int32_t probe(cal_conn *k, int chat, const char *text) {
    cpulm_buf b;
    cpulm_buf_init(&b, 0);
    cpulm_json_writer w;
    cpulm_json_writer_init(&w, &b, 0, 0);
    cpulm_json_obj_begin(&w);
    if (chat) {
        cpulm_json_kv_arr_begin(&w, "messages");
        cpulm_json_obj_begin(&w);
        cpulm_json_kv_str(&w, "role", "user");
        cpulm_json_kv_str(&w, "content", text);
        cpulm_json_obj_end(&w);
        cpulm_json_arr_end(&w);
    } else {
        cpulm_json_kv_str(&w, "prompt", text);
    }
    cpulm_json_kv_int(&w, "max_tokens", 1);
    cpulm_json_obj_end(&w);
    lt_result r;
    lt_post(&k->c, k->u, chat ? "/v1/chat/completions" : "/v1/completions", b.data, b.len,
            k->api_key, 0, k->timeout_s, &r);
    k->last_status = r.status;
    int32_t n = r.status == 200 && !r.error[0] ? r.prompt_tokens : -1;
    lt_result_release(&r);
    cpulm_buf_release(&b);
    return n;
}

/* Every word's cost from /tokenize: tokens("The" + " word") - tokens("The"). */
static int by_tokenize(cal_conn *k, int chat, wl_vocab *v) {
    int32_t the = tokenize(k, "The", 0), with_special = tokenize(k, "The", 1);
    if (the <= 0 || with_special < the) return -1;
    v->first = the;
    v->added = with_special - the;
    char text[64];
    for (int i = 0; i < WL_N_WORDS; i++) {
        snprintf(text, sizeof text, "The %s", workload_word(i));
        int32_t n = tokenize(k, text, 0);
        if (n <= the) return -1;
        v->word[i] = n - the;
    }
    if (chat) { /* the template's tokens around the message: one probe's count minus the text's */
        cpulm_buf t;
        cpulm_buf_init(&t, 0);
        probe_text(&t);
        int32_t got = probe(k, 1, t.data);
        cpulm_buf_release(&t);
        double text_tokens = v->first;
        for (int i = 0; i < WL_N_WORDS; i++)
            text_tokens += v->word[i];
        if (got < 0) return -1;
        v->added = got > text_tokens ? got - text_tokens : 0;
    }
    return 0;
}

/* One cost for every word from two probes' usage counts: "The" alone and "The" with the word
 * list (short enough for a small context): their difference over the list is the mean cost
 * of a word, and what "The" counted beyond one word's cost the tokens added to a prompt. */
static int by_probe(cal_conn *k, int chat, wl_vocab *v) {
    cpulm_buf b;
    cpulm_buf_init(&b, 0);
    probe_text(&b);
    int32_t short_n = probe(k, chat, "The"), long_n = short_n > 0 ? probe(k, chat, b.data) : -1;
    cpulm_buf_release(&b);
    if (short_n <= 0 || long_n <= short_n) return -1;
    double per = (double)(long_n - short_n) / WL_N_WORDS;
    v->first = per;
    for (int i = 0; i < WL_N_WORDS; i++)
        v->word[i] = per;
    v->added = short_n > per ? short_n - per : 0;
    return 0;
}

/* "HTTP 404", or why there was no status. */
static void answered(int status, char *out, size_t cap) {
    if (status == 200)
        snprintf(out, cap, "HTTP 200 without usable token counts");
    else if (status)
        snprintf(out, cap, "HTTP %d", status);
    else
        snprintf(out, cap, "no HTTP answer");
}

int lt_calibrate(const lt_url *u, const char *api_key, int chat, lt_cal_mode mode, double timeout_s,
                 lt_calibration *c) {
    memset(c, 0, sizeof *c);
    c->tokens_per_word = 1;
    snprintf(c->method, sizeof c->method, mode == LT_CAL_OFF ? "off" : "failed");
    if (mode == LT_CAL_OFF) return -1;
    cal_conn k = {.u = u, .api_key = api_key, .timeout_s = timeout_s < 30 ? timeout_s : 30};
    lt_conn_init(&k.c);
    const char *method = "tokenize";
    char what[64];
    int rc = mode == LT_CAL_AUTO ? by_tokenize(&k, chat, &c->vocab) : -1;
    if (rc && mode == LT_CAL_AUTO) {
        answered(k.last_status, what, sizeof what);
        snprintf(c->why, sizeof c->why, "POST /tokenize: %s", what);
    }
    if (rc) {
        memset(&c->vocab, 0, sizeof c->vocab);
        rc = by_probe(&k, chat, &c->vocab);
        method = "probe";
    }
    double per = rc ? 0 : workload_vocab_finish(&c->vocab);
    if (per > 0) {
        c->tokens_per_word = per;
        snprintf(c->method, sizeof c->method, "%s", method);
    } else {
        size_t n = strlen(c->why);
        answered(k.last_status, what, sizeof what);
        snprintf(c->why + n, sizeof c->why - n, "%sprobe requests: %s", n ? "; " : "", what);
    }
    lt_conn_close(&k.c);
    free(k.c.buf);
    return per > 0 ? 0 : -1;
}
