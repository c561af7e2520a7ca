/* server.h: `cpulm serve`: an OpenAI-compatible HTTP/1.1 server over one model.
 *
 * Threads: the caller's thread runs the epoll I/O loop (all sockets, HTTP framing, probes,
 * responses); a request worker (prep.h) parses generation requests' JSON, renders chat
 * templates and tokenizes prompts; a loader thread loads the model in the background so /health
 * answers at once and /ready turns true when the model is warm; the scheduler thread (sched.h) owns
 * the model context. They talk through mutex-protected queues and eventfds only.
 * Logging goes through cpulm_log_set; nothing here prints.
 */
#ifndef CPULM_SERVER_SERVER_H
#define CPULM_SERVER_SERVER_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "server/sched.h"

typedef struct cpulm_server cpulm_server;

typedef struct cpulm_server_params {
    const char *model_path;
    const char *model_alias; /* id in /v1/models and responses; NULL: file name w/o .gguf */
    const char *host;        /* bind address; default 127.0.0.1 */
    int port;                /* 0: any free port (see cpulm_server_port) */
    /* the scheduler's settings (sched.h: slots, context per slot, prompt chunk, step-time
     * target, queue, threads, prompt cache, KV limits, KV type, pinning), nested, not copied:
     * its metrics, embd_ctx and spec are set by the server (spec from the fields below) */
    cpulm_sched_params sched;
    const char *api_key;   /* NULL: no authentication */
    double timeout_s;      /* per-request limit; default 600 */
    double grace_s;        /* SIGTERM: time in-flight requests get to finish; default 30 */
    double idle_timeout_s; /* idle keep-alive connections close; default 60 */
    size_t max_body;       /* request body limit; default 1 MiB */
    int32_t max_conns;     /* open connections; default 1024 */
    int32_t
        max_conns_per_client;  /* per client address (IPv6: per /64); 0 = no limit; default 256 */
    double head_timeout_s;     /* a new connection, or a request once its first byte came,
                                * must deliver a complete head within this; default 10 */
    double body_timeout_s;     /* a request's body may pause this long between bytes
                                * (408 after it); default 10 */
    size_t max_body_total;     /* read-buffer bytes for request bodies, all connections
                                * together (503 past it); 0: cpulm_server_body_budget */
    const char *chat_template; /* Jinja text overriding the model's; NULL: the model's */
    int embeddings;            /* serve POST /v1/embeddings (a second, embeddings-only context) */
    cpulm_pooling pooling;     /* its pooling; UNSPECIFIED: the model's */
    int rerank; /* serve POST /rerank, /v1/rerank, /reranking (llama-server's --rerank): the
                 * embeddings context pools by rank (an encoder with a classification head) */
    /* speculative decoding (docs/SERVER.md): spec "ngram", "draft" (needs draft_path) or
     * NULL / "none" (off); the rest as `cpulm run`'s flags, 0 meaning the default */
    const char *spec;
    const char *draft_path;       /* -md: the draft model (same vocabulary) */
    int32_t draft_max;            /* most tokens drafted per slot and step; 0: 16 */
    int32_t draft_min;            /* a shorter draft is not verified; default 0 */
    float draft_p_min;            /* draft model: stop drafting below this probability; 0: off */
    int32_t ngram_min, ngram_max; /* n-gram sizes looked up; 0: 2 and 3 */
    int spec_fixed;               /* always draft draft_max (default: adaptive per slot) */
    int32_t n_threads_draft;      /* draft model threads; 0: n_threads */
    int no_slots;                 /* GET /slots answers 501 (llama-server's --no-slots) */
} cpulm_server_params;

cpulm_server_params cpulm_server_default_params(void);
/* The body budget p gives: max_body_total, or when 0, 64 MiB or 4 of the largest request
 * buffers (head + max_body + 64 KiB), whichever is more. */
size_t cpulm_server_body_budget(const cpulm_server_params *p);

/* Binds and listens (nothing else starts yet). Returns owned; NULL with err on failure. */
cpulm_server *cpulm_server_new(const cpulm_server_params *p, cpulm_error *err);
/* The bound port (the real one when 0 was asked). */
int cpulm_server_port(const cpulm_server *s);
/* Runs until SIGTERM or SIGINT (which this function blocks in the calling thread and
 * every thread it starts, and receives through a signalfd). After the signal: stop
 * accepting, report not ready, let requests in flight finish within grace_s, return
 * CPULM_OK. Returns an error (with err) if the model cannot be loaded. */
cpulm_status cpulm_server_run(cpulm_server *s, cpulm_error *err);
void cpulm_server_free(cpulm_server *s); /* NULL is a no-op */

#endif
