/* native.h: what native.c (llama-server's API) and ollama.c (Ollama's) share: the answer
 * state of a generation request in their shapes, and the Ollama entry points native.c's
 * route table and dispatchers call. Internal to the server; I/O thread unless noted. */
#ifndef CPULM_SERVER_NATIVE_H
#define CPULM_SERVER_NATIVE_H

#include "server/harmony.h"
#include "server/server_int.h"

/* A generation request answered in llama-server's or Ollama's shape (routes.c's route.api).
 * Built when the request is accepted by the scheduler; fed its events. */
typedef struct cpulm_api_state {
    int flavor; /* CPULM_GEN_* */
    const cpulm_server *s;
    int stream;
    int32_t n_prompt;
    double t_start, t_first; /* accepted; first text (cpulm_clock_s) */
    cpulm_buf text;          /* the reply (whole answers; held content with tools) */
    cpulm_buf reasoning;     /* <think> text (Ollama's message.thinking) */
    cpulm_chat_think think;  /* the splitter when split_think */
    int split_think;
    cpulm_harmony harmony; /* harmony's channels (gpt-oss) when split_harmony */
    int split_harmony;
    int tools, forced;         /* Ollama chat with tools: calls are parsed from the reply */
    cpulm_json_doc *tool_defs; /* owned copy of the request's tools (types XML arguments) */
    int finish;                /* -1, or cpulm_sched_finish of the (only) choice */
    int32_t stop_word;         /* the FINISH event's */
    cpulm_buf stops;           /* the request's stop strings, each as a size_t length then bytes */
    char model[128];           /* the model the request named (Ollama echoes it), or "" */
} cpulm_api_state;

/* Seconds of prompt processing and of generation for a DONE event e at time now: the
 * scheduler's own timing when it sent it, else the I/O thread's (first text seen). */
void cpulm_api_phase_times(const cpulm_api_state *st, const cpulm_sched_event *e, double now,
                           double *prompt_s, double *predicted_s);

/* "2024-07-22T20:47:51.147561000Z" (RFC 3339, UTC, nanoseconds; Ollama's created_at). */
void cpulm_api_rfc3339(char out[40]);

/* ollama.c */
void cpulm_ollama_tags(cpulm_server *s, cpulm_conn *c);    /* GET /api/tags */
void cpulm_ollama_ps(cpulm_server *s, cpulm_conn *c);      /* GET /api/ps */
void cpulm_ollama_version(cpulm_server *s, cpulm_conn *c); /* GET /api/version */
/* POST /api/show, on the request worker: the JSON answer into out; returns the status. */
int cpulm_ollama_show(const cpulm_server *s, const cpulm_json *req, cpulm_buf *out);

/* A body of /api/generate or /api/chat rewritten in the OpenAI shape cpulm_oai_parse
 * reads (kind set accordingly); returns 0, or -1 with e set. */
int cpulm_ollama_rewrite(int flavor, const cpulm_json *root, cpulm_buf *out, cpulm_oai_kind *kind,
                         cpulm_oai_error *e);
/* Ollama's answer to a request that only loads the model: the rewrite fails with status 200
 * and e->code "load" or "unload" (e->param: "chat" or "generate", e->message: the model). */
void cpulm_ollama_write_load(cpulm_buf *out, const cpulm_oai_error *e);
void cpulm_ollama_event(cpulm_server *s, cpulm_conn *c, cpulm_api_state *st,
                        const cpulm_sched_event *e);

#endif
