/* server_int.h: the server object shared by server.c (sockets, loop, lifecycle) and
 * routes.c (HTTP endpoints). Everything here runs on the I/O thread, except the fields
 * marked as written by the loader thread, which are published through loaded_efd. */
#ifndef CPULM_SERVER_SERVER_INT_H
#define CPULM_SERVER_SERVER_INT_H

#include <pthread.h>
#include <stdatomic.h>

#include "server/conn.h"
#include "server/evict.h"
#include "server/http.h"
#include "server/loop.h"
#include "server/metrics.h"
#include "server/oai.h"
#include "server/prep.h"
#include "server/sched.h"
#include "server/server.h"

#define CPULM_SERVER_MAX_CONNS 65535 /* request ids carry the connection index in 16 bits */
/* Preparing one request (parsing, templates, tokenizing, grammars) may take at most this
 * long on a request worker; past it the request fails with 504 (checked between pieces of
 * work, see prep.h). */
#define CPULM_SERVER_PREP_LIMIT_S 30.0
/* Bodies larger than this (and requests that may compile a grammar) are prepared in the
 * request workers' heavy lane. */
#define CPULM_SERVER_LIGHT_BODY (64u << 10)
/* Shutdown: how long the server waits for a worker or the scheduler to leave what it is
 * doing once cancelled, before it exits without them. */
#define CPULM_SERVER_STOP_WAIT_S 1.0

struct cpulm_server {
    cpulm_server_params p;
    char *alias;
    int listen_fd, port;
    cpulm_loop *loop;
    cpulm_loop_handler h_listen, h_sched, h_signal, h_loaded;
    int sig_fd, loaded_efd;
    cpulm_http_limits lim;
    cpulm_metrics *metrics;

    cpulm_conn **conns; /* [max_conns]; NULL = free */
    cpulm_conn **dead;  /* closed during this loop iteration; freed after it */
    int32_t n_conns, n_dead;
    int spare_fd;                  /* /dev/null, given up to drain the accept queue at EMFILE */
    uint64_t n_evicted, n_refused; /* connections closed for room; connections refused */
    cpulm_conn_budget budget;      /* request bodies' memory (--max-body-total) */
    cpulm_evict *evict;            /* scratch of the eviction choice */
    uint64_t next_serial;
    int64_t created; /* unix time of start, for /v1/models */

    /* written by the loader thread before it signals loaded_efd */
    pthread_t loader;
    int loader_started;
    cpulm_model *model;
    cpulm_model *draft_model; /* -md, or NULL */
    cpulm_spec_params spec;   /* speculation as resolved (kind NONE: off), for /props */
    cpulm_sched *sched_loaded;
    char *chat_tmpl;                 /* tokenizer.chat_template or NULL (owned) */
    const char *bos_text, *eos_text; /* borrowed from the model; NULL if none */
    cpulm_ctx *embd_ctx;             /* --embeddings: used by the scheduler thread only */
    cpulm_error load_err;
    /* I/O thread's view: set once loaded_efd fired */
    cpulm_sched *sched;
    cpulm_prep *prep; /* the request workers, started with the scheduler */
    cpulm_loop_handler h_prep;
    int load_failed;

    int draining, stop, expired;
    double drain_deadline, stop_deadline; /* stop_deadline: last flush after expiry */
};

/* Sends what conn c has buffered; when its response is complete and sent, goes on with the
 * next request (keep-alive) or closes. May close c: do not use c after this returns < 0. */
int cpulm_server_output(cpulm_server *s, cpulm_conn *c);

/* Whose API a request speaks: the shapes of its answers and errors (conn.api). */
enum { CPULM_API_OPENAI = 0, CPULM_API_LLAMA = 1, CPULM_API_OLLAMA = 2 };
/* cpulm_routes_embeddings / cpulm_embed_job_new: a rerank request (llama-server's /rerank,
 * Jina's and Cohere's /v1/rerank shapes; errors in llama-server's shape) */
#define CPULM_API_RERANK 3
/* Generation flavors: the request and answer shapes of a generation request. */
enum {
    CPULM_GEN_OPENAI = 0,          /* /v1/chat/completions, /v1/completions */
    CPULM_GEN_LLAMA = 1,           /* llama-server's POST /completion */
    CPULM_GEN_OLLAMA_GENERATE = 2, /* Ollama's POST /api/generate */
    CPULM_GEN_OLLAMA_CHAT = 3,     /* Ollama's POST /api/chat */
    CPULM_GEN_INFILL = 4,          /* llama-server's POST /infill (answered as /completion) */
};

/* routes.c */
int cpulm_routes_ready(const cpulm_server *s); /* loaded, warmed up, not draining */
int cpulm_routes_authorized(const cpulm_server *s, const cpulm_http_msg *m);
/* A generation request (body in c) of the given kind and flavor (CPULM_GEN_*): on to the
 * request worker, then the scheduler; answered from the scheduler's events. */
void cpulm_routes_generate(cpulm_server *s, cpulm_conn *c, cpulm_oai_kind kind, int flavor);
/* An embedding request (body in c), answered in the shape of api (CPULM_API_*): a request
 * worker tokenizes, the scheduler embeds, a worker writes the answer (embed.c). */
void cpulm_routes_embeddings(cpulm_server *s, cpulm_conn *c, int api);
/* A zeroed job of size bytes (a cpulm_prep_job first) for c's request, its id set, and a
 * copy of c's body in *body (owned by the caller); NULL once answered (503 while the model
 * loads or the server drains, 500 out of memory). */
void *cpulm_routes_new_job(cpulm_server *s, cpulm_conn *c, size_t size, char **body);
/* Hands j to the request workers for c's request, with the preparation deadline (c is busy
 * until it comes back through cpulm_routes_prepared). */
void cpulm_routes_push_job(cpulm_server *s, cpulm_conn *c, cpulm_prep_job *j);
void cpulm_routes_handle(cpulm_server *s, cpulm_conn *c);      /* c holds a complete request */
void cpulm_routes_bad_request(cpulm_server *s, cpulm_conn *c); /* framing error: answer, close */
void cpulm_routes_event(cpulm_server *s, cpulm_conn *c, const cpulm_sched_event *e);
void cpulm_routes_abort(cpulm_server *s, cpulm_conn *c); /* c is closing: cancel its work */
/* c's request came back from a request worker (parsed, tokenized; or an embedding
 * response written): submit it to the scheduler, or answer. Returns 1 when the job went on
 * (to the scheduler or a worker again: no longer the caller's), 0 when the caller destroys
 * it. */
int cpulm_routes_prepared(cpulm_server *s, cpulm_conn *c, cpulm_prep_job *job);
/* embed.c: POST /v1/embeddings: tokenized on a request worker, embedded by the scheduler,
 * written on a request worker (see embed.c). */
cpulm_status cpulm_embed_open(cpulm_server *s, cpulm_error *err); /* loader: s->embd_ctx */
/* A job embedding body[0..n) (copied), answered in the shape of api (CPULM_API_OPENAI's
 * /v1/embeddings, CPULM_API_OLLAMA's /api/embed or CPULM_API_LLAMA's /embedding); NULL when
 * out of memory. */
cpulm_prep_job *cpulm_embed_job_new(const cpulm_server *s, const char *body, size_t n, uint64_t id,
                                    int api);
int cpulm_embed_job_is(const cpulm_prep_job *j);
/* After its first stage: the job's inputs as a scheduler request, or NULL when the stage
 * ended in an error response (cpulm_embed_job_result). */
cpulm_sched_embed *cpulm_embed_job_ready(cpulm_prep_job *j);
/* The scheduler handed se back: its job, set to write the response on a worker. */
cpulm_prep_job *cpulm_embed_job_embedded(cpulm_sched_embed *se);
/* A finished job's HTTP status and JSON body (borrowed from the job). */
int cpulm_embed_job_result(const cpulm_prep_job *j, const char **body, size_t *n);
/* The grace period ended: end c's request now (an error event, [DONE] and the final chunk
 * for a stream that started; a 503 for anything that sent nothing yet). */
void cpulm_routes_expire(cpulm_server *s, cpulm_conn *c);

/* ---- native.c and ollama.c: llama-server's and Ollama's APIs ---- */

/* c's request matched none of routes.c's paths: answers it (or queues its work) if it is
 * one of llama-server's or Ollama's routes and returns 1; else 0 (routes.c answers 404). */
int cpulm_native_handle(cpulm_server *s, cpulm_conn *c);
/* Work of a native route run on the request worker (tokenize, detokenize, apply-template,
 * Ollama's show): whether j is one, and its HTTP status and JSON body (borrowed). */
int cpulm_native_job_is(const cpulm_prep_job *j);
int cpulm_native_job_result(const cpulm_prep_job *j, const char **body, size_t *n);
/* Errors in api's shape (CPULM_API_*): OpenAI's and llama-server's {"error": {...}},
 * Ollama's {"error": "message"}; and inside a stream that already started. */
void cpulm_api_write_error(int api, cpulm_buf *out, const cpulm_oai_error *e);
void cpulm_api_write_stream_error(int api, cpulm_buf *out, const cpulm_oai_error *e);
/* The end of handling event e for llama-server's and Ollama's answers: an error event in
 * api's shape (an error response when nothing was sent yet), b sent as a stream frame, the
 * stream closed after the last event. */
void cpulm_api_event_send(cpulm_conn *c, int api, const cpulm_sched_event *e, cpulm_buf *b);
/* A generation body of flavor (CPULM_GEN_*, not OPENAI) into q, with that API's defaults
 * and field names; as cpulm_oai_parse otherwise (m: for /infill's prompt tokens). */
cpulm_status cpulm_api_parse(int flavor, const cpulm_model *m, const char *body, size_t n,
                             size_t max_body, cpulm_oai_request *q, cpulm_oai_error *e);
/* infill.c: the model's fill-in-the-middle tokens (prefix, suffix, middle): 1 when it has
 * all three, found by their spellings in the families' vocabularies. */
int cpulm_infill_tokens(const cpulm_model *m, cpulm_token fim[3]);
/* /infill's prompt as a JSON array of token ids appended to ids: [BOS] <PRE> input_prefix
 * prompt <SUF> input_suffix <MID>. Returns 0, or -1 with e set (501 without FIM tokens). */
int cpulm_infill_prompt(const cpulm_model *m, const cpulm_json *root, cpulm_buf *ids,
                        cpulm_oai_error *e);
/* think code of harmony replies: CPULM_THINK_HARMONY + cpulm_harmony_start (route_new) */
#define CPULM_THINK_HARMONY 3
/* The answer state of an accepted request of that flavor (r: its scheduler request, read
 * for the prompt length; think as routes.c's route_new). NULL when out of memory. */
void *cpulm_api_state_new(int flavor, const cpulm_server *s, const cpulm_oai_request *q,
                          const cpulm_sched_req *r, int think);
void cpulm_api_state_free(void *st); /* NULL is a no-op */
/* One scheduler event of such a request, written to c in the flavor's shape (a stream's
 * header with the first event; the end of the stream or the whole answer with DONE or
 * ERROR). routes.c then ends the request. */
void cpulm_api_event(cpulm_server *s, cpulm_conn *c, void *st, const cpulm_sched_event *e);

#endif
