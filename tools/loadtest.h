/* loadtest.h: the small blocking HTTP/1.1 client behind `cpulm loadtest` (one per worker
 * thread): keep-alive connections to one address, JSON POSTs, and responses read with the
 * server's own parser (src/server/http.h), including chunked SSE streams whose events are
 * timestamped as they arrive. Only the address given on the command line is contacted. */
#ifndef CPULM_TOOLS_LOADTEST_H
#define CPULM_TOOLS_LOADTEST_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

typedef struct lt_url {
    char host[256], port[8];
    char prefix[256];             /* path before /v1/..., usually "" */
    struct sockaddr_storage addr; /* resolved once */
    socklen_t addr_len;
} lt_url;

/* Parses "http://HOST[:PORT][/PREFIX]" and resolves HOST. Returns 0, or -1 with a message
 * in why. */
int lt_url_parse(const char *url, lt_url *u, char *why, size_t why_cap);

typedef struct lt_conn {
    int fd;    /* -1 when not connected */
    char *buf; /* response bytes; the decoded body follows the head */
    size_t len, cap;
} lt_conn;

typedef struct lt_result {
    int status;       /* HTTP status; 0 when the exchange failed */
    char error[128];  /* "" when ok */
    double t_first;   /* seconds from send to the first streamed text (-1 if none) */
    double t_total;   /* seconds from send to the end of the response */
    double *t_events; /* [n_events] arrival times of streamed texts (owned) */
    int32_t n_events, cap_events;
    int32_t prompt_tokens, completion_tokens; /* from "usage" (-1 if absent) */
    int32_t n_tokens; /* a /tokenize answer's "tokens" count (-1 if absent) */
} lt_result;

void lt_conn_init(lt_conn *c);
void lt_conn_close(lt_conn *c);
void lt_result_release(lt_result *r);

/* POSTs body to u's prefix + path and reads the answer (an SSE stream when stream != 0).
 * Bounded by timeout_s for the whole exchange. Reconnects once if a kept-alive connection
 * turned out closed. Fills r (call lt_result_release after). */
void lt_post(lt_conn *c, const lt_url *u, const char *path, const char *body, size_t n,
             const char *api_key, int stream, double timeout_s, lt_result *r);

/* GETs u's prefix + path (no body): the readiness probe before a run. */
void lt_get(lt_conn *c, const lt_url *u, const char *path, const char *api_key, double timeout_s,
            lt_result *r);

double lt_now(void);

#endif
