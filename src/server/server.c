/* server.c: the server's lifecycle and I/O thread: listening socket, connection table,
 * epoll callbacks, background model loading, timers (slow or idle clients) and the
 * SIGTERM drain. HTTP semantics live in conn.c and routes.c.
 */
#define _GNU_SOURCE
#include "server/server_int.h"

#include "base/clock.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define TICK_MS           100  /* timer resolution: slow clients, drain progress */
#define REQUEST_TIMEOUT_S 30.0 /* to receive a whole request once it started (slowloris) */
#define BODY_STALL_S      1.0  /* a body that sent nothing for this long may lose its budget */
#define LINGER_S          2.0  /* a closing connection waits this long for the client's EOF */

cpulm_server_params cpulm_server_default_params(void) {
    cpulm_server_params p = {.host = "127.0.0.1",
                             .port = 8080,
                             .sched = cpulm_sched_default_params(),
                             .timeout_s = 600,
                             .grace_s = 30,
                             .idle_timeout_s = 60,
                             .max_body = 1 << 20,
                             .max_conns = 1024,
                             .max_conns_per_client = 256,
                             .head_timeout_s = 10,
                             .body_timeout_s = 10,
                             .pooling = CPULM_POOLING_UNSPECIFIED};
    return p;
}

size_t cpulm_server_body_budget(const cpulm_server_params *p) {
    if (p->max_body_total) return p->max_body_total;
    size_t one = 16 * 1024 + p->max_body + 65536; /* a request's largest read buffer */
    size_t least = (size_t)64 << 20;
    if (one > SIZE_MAX / 4) return SIZE_MAX;
    return 4 * one > least ? 4 * one : least;
}

/* ---- connections ---- */

static void set_events(cpulm_server *s, cpulm_conn *c) {
    int ev = 0;
    if (c->state == CPULM_CONN_CLOSING || cpulm_conn_wants_input(c)) ev |= CPULM_LOOP_READ;
    if (c->woff < c->wbuf.len) ev |= CPULM_LOOP_WRITE;
    if (ev != c->events && cpulm_loop_mod(s->loop, c->fd, ev, &c->h) == CPULM_OK) c->events = ev;
}

static void conn_close(cpulm_server *s, cpulm_conn *c) {
    cpulm_routes_abort(s, c);
    cpulm_loop_del(s->loop, c->fd);
    cpulm_conn_release(c);
    s->conns[c->index] = NULL;
    s->n_conns--;
    s->dead[s->n_dead++] = c; /* events for c may still be in this epoll batch */
}

int cpulm_server_output(cpulm_server *s, cpulm_conn *c) {
    double now = cpulm_clock_s();
    int f = cpulm_conn_flush(c, now);
    if (f < 0) {
        conn_close(s, c);
        return -1;
    }
    if (f == 0 && c->done) {
        cpulm_metrics_http_status(s->metrics, c->status);
        if (s->draining) c->keep_alive = 0;
        if (cpulm_conn_next(c) != 0) { /* lingering close: FIN now, close on EOF */
            shutdown(c->fd, SHUT_WR);
            c->done = 0;
            c->state = CPULM_CONN_CLOSING;
            c->t_active = now;
        }
    }
    set_events(s, c);
    return 0;
}

/* Answers c's request (whose body may be incomplete) with an error, then closes. */
static void refuse(cpulm_server *s, cpulm_conn *c, int status, const char *why) {
    c->bad_status = status;
    c->bad_reason = why;
    c->state = CPULM_CONN_BUSY;
    cpulm_routes_bad_request(s, c);
}

/* Answers every complete request buffered on c, in order (pipelining), until one has to
 * wait for the model or more bytes are needed. */
static void process_requests(cpulm_server *s, cpulm_conn *c) {
    while (s->conns[c->index] == c && c->state == CPULM_CONN_READING && c->rlen > 0) {
        cpulm_conn_parse_result r = cpulm_conn_parse(c, &s->lim);
        if (r == CPULM_CONN_NEED_MORE) {
            cpulm_server_output(s, c); /* maybe a 100 Continue */
            return;
        }
        if (r == CPULM_CONN_BAD) {
            refuse(s, c, c->bad_status, c->bad_reason);
        } else {
            c->state = CPULM_CONN_BUSY;
            cpulm_routes_handle(s, c);
        }
    }
}

static void on_conn(cpulm_loop_handler *h, int events) {
    cpulm_conn *c = (cpulm_conn *)((char *)h - offsetof(cpulm_conn, h));
    cpulm_server *s = c->owner;
    if (c->fd < 0) return; /* closed earlier in this batch */
    if (events & (CPULM_LOOP_READ | CPULM_LOOP_HUP)) {
        if (c->state == CPULM_CONN_CLOSING) c->rlen = 0; /* discard */
        if (cpulm_conn_fill(c, cpulm_clock_s()) < 0) {   /* EOF: the client is gone */
            conn_close(s, c);
            return;
        }
        if (c->state == CPULM_CONN_CLOSING) return;
    }
    if ((events & CPULM_LOOP_WRITE) && cpulm_server_output(s, c) < 0) return;
    process_requests(s, c);
    if (s->conns[c->index] == c) set_events(s, c);
}

/* ---- admission: connection limits ---- */

/* The client key of a peer address: IPv4 (also when mapped into IPv6), or the /64 prefix of
 * an IPv6 address (one host usually owns a whole /64). */
static void peer_key(const struct sockaddr_storage *ss, uint8_t key[16]) {
    memset(key, 0, 16);
    if (ss->ss_family == AF_INET) {
        memcpy(key, &((const struct sockaddr_in *)ss)->sin_addr, 4);
    } else if (ss->ss_family == AF_INET6) {
        const uint8_t *a = ((const struct sockaddr_in6 *)ss)->sin6_addr.s6_addr;
        static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
        if (memcmp(a, mapped, 12) == 0)
            memcpy(key, a + 12, 4);
        else {
            key[4] = 6; /* never equal to an IPv4 key */
            memcpy(key + 8, a, 8);
        }
    }
}

/* Closes the connection the query picks (evict.h). Returns 1 if one was closed. */
static int evict_one(cpulm_server *s, const cpulm_evict_query *q) {
    int32_t i = cpulm_evict_pick(s->evict, s->conns, s->p.max_conns, q);
    if (i < 0) return 0;
    s->n_evicted++;
    conn_close(s, s->conns[i]);
    return 1;
}

static int32_t count_client(const cpulm_server *s, const uint8_t key[16]) {
    int32_t n = 0;
    for (int32_t i = 0; i < s->p.max_conns; i++)
        n += s->conns[i] && memcmp(s->conns[i]->peer, key, 16) == 0;
    return n;
}

/* Makes room for a new connection from key: over the client's limit, its own least recently
 * active connection without a request being answered goes (idle, or a head or body still
 * arriving); with the table full, one chosen fairly (evict.h: a client over its share loses
 * its own first, else the client with the most connections). So a flood of connections that
 * never finish a request only ever displaces such connections, and a new one always gets a
 * slot unless every slot is busy answering a request. Returns a free slot, or -1. */
static int32_t admit(cpulm_server *s, const uint8_t key[16]) {
    cpulm_evict_query q = {.kind = CPULM_EVICT_SLOT, .key = key, .limit = (uint64_t)s->p.max_conns};
    if (s->p.max_conns_per_client > 0 && count_client(s, key) >= s->p.max_conns_per_client) {
        q.own_only = 1;
        if (!evict_one(s, &q)) return -1;
        q.own_only = 0;
    }
    if (s->n_conns >= s->p.max_conns && !evict_one(s, &q)) return -1;
    int32_t i = 0;
    while (i < s->p.max_conns && s->conns[i])
        i++;
    return i < s->p.max_conns ? i : -1;
}

/* The body budget is short by `need` bytes for `asking`: close connections whose bodies
 * stalled (evict.h) until it is not, or none is left. */
static void reclaim_budget(void *user, size_t need, const cpulm_conn *asking) {
    cpulm_server *s = user;
    cpulm_evict_query q = {.kind = CPULM_EVICT_BUDGET,
                           .key = asking->peer,
                           .asking = asking,
                           .limit = s->budget.limit,
                           .now = cpulm_clock_s(),
                           .stall_s = BODY_STALL_S};
    size_t target = s->budget.used > need ? s->budget.used - need : 0;
    while (s->budget.used > target && evict_one(s, &q)) {
    }
}

/* accept() failed for lack of descriptors: make one free (an idle connection, else the
 * spare kept for this) so the pending connection is taken off the queue instead of
 * keeping the listener readable, which would spin the loop. */
static void out_of_fds(cpulm_server *s) {
    cpulm_evict_query q = {.kind = CPULM_EVICT_SLOT, .limit = (uint64_t)s->p.max_conns};
    if (evict_one(s, &q)) return;
    if (s->spare_fd >= 0) close(s->spare_fd);
    int fd = accept4(s->listen_fd, NULL, NULL, SOCK_CLOEXEC);
    if (fd >= 0) close(fd);
    s->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
}

static void on_accept(cpulm_loop_handler *h, int events) {
    cpulm_server *s = (cpulm_server *)((char *)h - offsetof(cpulm_server, h_listen));
    (void)events;
    for (int k = 0; k < 64; k++) { /* bounded per wake-up, so other work keeps flowing */
        struct sockaddr_storage ss;
        socklen_t sl = sizeof ss;
        memset(&ss, 0, sizeof ss);
        int fd = accept4(s->listen_fd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EMFILE || errno == ENFILE) out_of_fds(s);
            if (errno == EINTR || errno == ECONNABORTED || errno == EMFILE || errno == ENFILE)
                continue;
            return;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one); /* tokens go out at once */
        uint8_t key[16];
        peer_key(&ss, key);
        int32_t i = admit(s, key);
        cpulm_conn *c = i >= 0 ? malloc(sizeof *c) : NULL;
        if (!c) {
            s->n_refused++;
            close(fd); /* every slot (of this client) is busy with a request */
            continue;
        }
        cpulm_conn_init(c, fd, i, s->lim.max_head + s->lim.max_body + 65536, cpulm_clock_s());
        memcpy(c->peer, key, 16);
        c->budget = &s->budget;
        c->h.fn = on_conn;
        c->owner = s;
        c->events = CPULM_LOOP_READ;
        if (cpulm_loop_add(s->loop, fd, c->events, &c->h) != CPULM_OK) {
            cpulm_conn_release(c);
            free(c);
            continue;
        }
        s->conns[i] = c;
        s->n_conns++;
    }
}

/* ---- scheduler events and model loading ---- */

static void on_sched(cpulm_loop_handler *h, int events) {
    cpulm_server *s = (cpulm_server *)((char *)h - offsetof(cpulm_server, h_sched));
    (void)events;
    cpulm_sched_event *e = cpulm_sched_drain(s->sched);
    while (e) {
        cpulm_sched_event *next = e->next;
        cpulm_conn *c = s->conns[e->id & 0xFFFF];
        if (c && c->req_id == e->id) {
            cpulm_routes_event(s, c, e);
            if (s->conns[e->id & 0xFFFF] == c) process_requests(s, c); /* pipelined */
        } else if (e->kind == CPULM_SCHED_EV_EMBED) { /* its client left: drop the request */
            e->embed->destroy(e->embed);
        }
        free(e);
        e = next;
    }
}

/* Jobs back from the request workers: go on with those whose connection still waits; the
 * others (cancelled: their client left) are dropped. */
static void on_prep(cpulm_loop_handler *h, int events) {
    cpulm_server *s = (cpulm_server *)((char *)h - offsetof(cpulm_server, h_prep));
    (void)events;
    cpulm_prep_job *j = cpulm_prep_drain(s->prep);
    while (j) {
        cpulm_prep_job *next = j->next;
        cpulm_conn *c = s->conns[j->id & 0xFFFF];
        int kept = 0;
        if (c && c->req_id == j->id && !atomic_load(&j->cancel)) {
            kept = cpulm_routes_prepared(s, c, j);
            if (s->conns[j->id & 0xFFFF] == c) process_requests(s, c); /* pipelined */
        }
        if (!kept) j->destroy(j);
        j = next;
    }
}

/* The model's chat template text, or NULL when it has none. Owned. */
static char *chat_template(const cpulm_model *m) {
    size_t n = 0;
    char probe[1];
    cpulm_status st = cpulm_model_meta(m, "tokenizer.chat_template", probe, sizeof probe, &n);
    if (st != CPULM_ERR_TOO_SMALL && st != CPULM_OK) return NULL;
    char *t = malloc(n + 1);
    if (t && cpulm_model_meta(m, "tokenizer.chat_template", t, n + 1, &n) != CPULM_OK) {
        free(t);
        t = NULL;
    }
    return t;
}

/* The scheduler's speculation from the flags; loads the draft model (-md). */
static cpulm_status spec_params(cpulm_server *s, cpulm_spec_params *sp) {
    const cpulm_server_params *p = &s->p;
    *sp = cpulm_spec_default_params();
    if (p->spec && cpulm_spec_kind_parse(p->spec, &sp->kind) != CPULM_OK)
        return cpulm_errf(&s->load_err, CPULM_ERR_INVALID_ARG,
                          "--spec takes ngram, draft or none, not '%s'", p->spec);
    if (p->draft_path && !p->spec) sp->kind = CPULM_SPEC_DRAFT;
    if ((sp->kind == CPULM_SPEC_DRAFT) != (p->draft_path != NULL))
        return cpulm_errf(&s->load_err, CPULM_ERR_INVALID_ARG,
                          "--spec draft and -md FILE go together");
    if (p->draft_max > 0) sp->draft_max = p->draft_max;
    sp->draft_min = p->draft_min;
    sp->p_min = p->draft_p_min;
    if (p->ngram_max > 0) sp->ngram_max = p->ngram_max;
    if (p->ngram_min > 0) sp->ngram_min = p->ngram_min;
    if (sp->ngram_min > sp->ngram_max) sp->ngram_min = sp->ngram_max;
    sp->adaptive = !p->spec_fixed;
    if (sp->kind != CPULM_SPEC_NONE)
        cpulm_logf(CPULM_LOG_INFO, "speculative decoding: %s%s%s, draft-max %d, %s length",
                   cpulm_spec_kind_name(sp->kind), p->draft_path ? " " : "",
                   p->draft_path ? p->draft_path : "", sp->draft_max,
                   sp->adaptive ? "adaptive" : "fixed");
    if (sp->kind != CPULM_SPEC_DRAFT) return CPULM_OK;
    s->draft_model = cpulm_model_load(p->draft_path, NULL, &s->load_err);
    if (!s->draft_model) return s->load_err.code;
    sp->draft_model = s->draft_model;
    sp->draft_ctx.n_threads = p->n_threads_draft ? p->n_threads_draft : p->sched.n_threads;
    sp->draft_ctx.no_pin = p->sched.no_pin;
    return CPULM_OK;
}

static void *loader_main(void *arg) {
    cpulm_server *s = arg;
    s->model = cpulm_model_load(s->p.model_path, NULL, &s->load_err);
    if (s->model) {
        s->chat_tmpl = s->p.chat_template ? strdup(s->p.chat_template) : chat_template(s->model);
        cpulm_token bos = cpulm_token_bos(s->model), eos = cpulm_token_eos(s->model);
        s->bos_text = bos >= 0 ? cpulm_token_text(s->model, bos) : NULL;
        s->eos_text = eos >= 0 ? cpulm_token_text(s->model, eos) : NULL;
        cpulm_sched_params sp = s->p.sched;
        sp.metrics = s->metrics;
        cpulm_model_info mi;
        cpulm_model_get_info(s->model, &mi);
        const int enc_bad = cpulm_model_is_encoder(s->model) && !s->p.embeddings;
        if (enc_bad) /* an encoder generates nothing */
            cpulm_errf(&s->load_err, CPULM_ERR_UNSUPPORTED,
                       "this model is an encoder (%s): it computes embeddings only; start the "
                       "server with --embeddings (or --rerank for a reranker)",
                       mi.arch);
        else if (s->p.embeddings && cpulm_embed_open(s, &s->load_err) == CPULM_OK)
            sp.embd_ctx = s->embd_ctx;
        int spec_ok = !enc_bad && spec_params(s, &sp.spec) == CPULM_OK;
        s->spec = sp.spec;
        if (spec_ok && (!s->p.embeddings || s->embd_ctx))
            s->sched_loaded = cpulm_sched_new(s->model, &sp, &s->load_err);
    }
    uint64_t one = 1;
    ssize_t w = write(s->loaded_efd, &one, sizeof one);
    (void)w;
    return NULL;
}

static void on_loaded(cpulm_loop_handler *h, int events) {
    cpulm_server *s = (cpulm_server *)((char *)h - offsetof(cpulm_server, h_loaded));
    (void)events;
    uint64_t v;
    ssize_t r = read(s->loaded_efd, &v, sizeof v);
    (void)r;
    cpulm_loop_del(s->loop, s->loaded_efd);
    if (!s->sched_loaded) {
        s->load_failed = 1;
        s->stop = 1;
        return;
    }
    s->sched = s->sched_loaded;
    cpulm_sched_stats st;
    cpulm_sched_get_stats(s->sched, &st);
    s->p.sched.n_ctx = st.n_ctx;
    s->prep = cpulm_prep_new(st.n_threads, &s->load_err); /* a worker per decode thread */
    if (!s->prep ||
        cpulm_loop_add(s->loop, cpulm_prep_event_fd(s->prep), CPULM_LOOP_READ, &s->h_prep) !=
            CPULM_OK ||
        cpulm_loop_add(s->loop, cpulm_sched_event_fd(s->sched), CPULM_LOOP_READ, &s->h_sched) !=
            CPULM_OK) {
        if (s->prep) cpulm_errf(&s->load_err, CPULM_ERR_IO, "cannot watch the scheduler's eventfd");
        s->load_failed = 1;
        s->stop = 1;
        return;
    }
    cpulm_logf(CPULM_LOG_INFO, "model loaded: %s (%d slots x %d tokens, chat template: %s)",
               s->alias, s->p.sched.n_parallel, s->p.sched.n_ctx,
               !s->chat_tmpl        ? "plain"
               : s->p.chat_template ? "--chat-template"
                                    : "the model's");
}

/* ---- shutdown and timers ---- */

static void start_drain(cpulm_server *s) {
    if (s->draining) return;
    s->draining = 1;
    s->drain_deadline = cpulm_clock_s() + s->p.grace_s;
    if (s->listen_fd >= 0) {
        cpulm_loop_del(s->loop, s->listen_fd);
        close(s->listen_fd);
        s->listen_fd = -1;
    }
    if (s->sched) cpulm_sched_close(s->sched);
    if (!s->sched) s->stop = 1; /* nothing can be in flight before the model is loaded */
    for (int32_t i = 0; i < s->p.max_conns; i++) {
        cpulm_conn *c = s->conns[i];
        if (!c) continue;
        c->keep_alive = 0;
        if ((c->state == CPULM_CONN_READING && c->rlen == 0) || c->state == CPULM_CONN_CLOSING)
            conn_close(s, c);
    }
    cpulm_logf(CPULM_LOG_INFO, "shutting down: %d connections busy, grace %.0f s", s->n_conns,
               s->p.grace_s);
}

static void on_signal(cpulm_loop_handler *h, int events) {
    cpulm_server *s = (cpulm_server *)((char *)h - offsetof(cpulm_server, h_signal));
    (void)events;
    struct signalfd_siginfo si;
    while (read(s->sig_fd, &si, sizeof si) == (ssize_t)sizeof si) {
    }
    start_drain(s);
}

/* The grace period is over: every request still in flight ends now, cleanly (see
 * cpulm_routes_expire); the loop keeps running a moment so those last bytes go out. */
static void expire(cpulm_server *s, double now) {
    s->expired = 1;
    s->stop_deadline = now + 1.0;
    for (int32_t i = 0; i < s->p.max_conns; i++) {
        cpulm_conn *c = s->conns[i];
        if (c && c->req_id) cpulm_routes_expire(s, c);
    }
    if (s->prep) cpulm_prep_cancel_all(s->prep); /* whatever is left stops at its next check */
    cpulm_logf(CPULM_LOG_INFO, "grace period over: open requests ended with 503 or a stream error");
}

/* Connections with bytes still to send. */
static int32_t unsent(const cpulm_server *s) {
    int32_t n = 0;
    for (int32_t i = 0; i < s->p.max_conns; i++)
        n += s->conns[i] && s->conns[i]->woff < s->conns[i]->wbuf.len;
    return n;
}

/* Closes connections that stalled: a request arriving too slowly, an idle keep-alive
 * connection, or a reader that stopped taking our bytes. */
static void tick(cpulm_server *s) {
    double now = cpulm_clock_s();
    int32_t busy = 0;
    for (int32_t i = 0; i < s->p.max_conns; i++) {
        cpulm_conn *c = s->conns[i];
        if (!c) continue;
        int reading = c->state == CPULM_CONN_READING;
        if (c->state == CPULM_CONN_CLOSING) {
            if (now - c->t_active > LINGER_S) conn_close(s, c);
            continue;
        }
        /* a head must come quickly (a new connection, or a request once it started); the
         * body gets longer; an idle keep-alive connection the longest */
        int fresh = reading && c->n_requests == 0 && c->rlen == 0;
        int in_head = reading && c->rlen > 0 && !c->head_done;
        if (reading && c->head_done && now - c->t_active > s->p.body_timeout_s) {
            refuse(s, c, 408, "the request body stopped arriving (--body-timeout)");
            continue;
        }
        if ((fresh && now - c->t_active > s->p.head_timeout_s) ||
            (in_head && now - c->t_request > s->p.head_timeout_s) ||
            (reading && c->rlen > 0 && now - c->t_request > REQUEST_TIMEOUT_S) ||
            (reading && c->rlen == 0 && now - c->t_active > s->p.idle_timeout_s) ||
            (c->woff < c->wbuf.len && now - c->t_active > s->p.idle_timeout_s)) {
            conn_close(s, c);
            continue;
        }
        busy += !reading;
    }
    if (s->draining && !s->expired && busy > 0 && now > s->drain_deadline) expire(s, now);
    if (s->draining && (busy == 0 || (s->expired && (unsent(s) == 0 || now > s->stop_deadline))))
        s->stop = 1;
}

static void free_dead(cpulm_server *s) {
    for (int32_t i = 0; i < s->n_dead; i++)
        free(s->dead[i]);
    s->n_dead = 0;
}

/* ---- lifecycle ---- */

static int open_listener(const char *host, int port, int *bound, cpulm_error *err) {
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    int rc = getaddrinfo(host, ps, &hints, &res);
    if (rc != 0)
        return -cpulm_errf(err, CPULM_ERR_INVALID_ARG, "serve: host '%s': %s", host,
                           gai_strerror(rc));
    int fd = socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    if (fd >= 0) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (fd < 0 || bind(fd, res->ai_addr, res->ai_addrlen) != 0 || listen(fd, 512) != 0) {
        cpulm_errf(err, CPULM_ERR_IO, "serve: cannot listen on %s:%d: %s", host, port,
                   strerror(errno));
        if (fd >= 0) close(fd);
        freeaddrinfo(res);
        return -1;
    }
    freeaddrinfo(res);
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    getsockname(fd, (struct sockaddr *)&ss, &sl);
    *bound = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                            : ((struct sockaddr_in *)&ss)->sin_port);
    return fd;
}

static char *alias_from_path(const char *path) {
    const char *b = strrchr(path, '/');
    b = b ? b + 1 : path;
    size_t n = strlen(b);
    if (n > 5 && strcmp(b + n - 5, ".gguf") == 0) n -= 5;
    return strndup(b, n);
}

/* Every connection needs a descriptor: lift the soft limit toward the hard one so that
 * max_conns (plus the model, the loop and the threads' few) fit when the system allows. */
static void raise_fd_limit(int32_t max_conns) {
    struct rlimit rl;
    rlim_t want = (rlim_t)max_conns + 256;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur >= want) return;
    rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > want ? want : rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
}

cpulm_server *cpulm_server_new(const cpulm_server_params *p, cpulm_error *err) {
    if (!p->model_path || p->sched.n_parallel < 1 || p->max_conns < 1 ||
        p->max_conns_per_client < 0 || !(p->head_timeout_s > 0) || !(p->body_timeout_s > 0) ||
        p->max_conns > CPULM_SERVER_MAX_CONNS || p->max_body < 1 ||
        (p->max_body_total && p->max_body_total < p->max_body) ||
        (p->api_key && !*p->api_key)) { /* "" must not silently mean "no authentication" */
        cpulm_errf(err, CPULM_ERR_INVALID_ARG, "serve: invalid parameters");
        return NULL;
    }
    cpulm_server *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->p = *p;
    s->listen_fd = s->sig_fd = s->loaded_efd = -1;
    raise_fd_limit(p->max_conns);
    s->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    s->alias = p->model_alias ? strdup(p->model_alias) : alias_from_path(p->model_path);
    s->conns = calloc((size_t)p->max_conns, sizeof *s->conns);
    /* closed in one loop iteration: every connection open at its start, plus the (at most
     * 64) accepted during it, which admission may evict again */
    s->dead = calloc((size_t)p->max_conns + 64, sizeof *s->dead);
    s->metrics = s->alias ? cpulm_metrics_new(s->alias) : NULL;
    s->lim = cpulm_http_default_limits();
    s->lim.max_body = p->max_body;
    s->budget.limit = cpulm_server_body_budget(p);
    s->budget.reclaim = reclaim_budget;
    s->budget.user = s;
    s->evict = cpulm_evict_new(p->max_conns);
    s->created = (int64_t)time(NULL);
    if (!s->alias || !s->conns || !s->dead || !s->metrics || !s->evict) {
        cpulm_errf(err, CPULM_ERR_NOMEM, "serve: out of memory");
    } else if ((s->loop = cpulm_loop_new(err)) &&
               (s->listen_fd =
                    open_listener(p->host ? p->host : "127.0.0.1", p->port, &s->port, err)) >= 0) {
        return s;
    }
    cpulm_server_free(s);
    return NULL;
}

int cpulm_server_port(const cpulm_server *s) {
    return s->port;
}

/* Signals, the loader's eventfd and the listener go into the loop; the loader starts. */
static cpulm_status start(cpulm_server *s, cpulm_error *err) {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set, NULL); /* before any thread starts: they inherit it */
    s->sig_fd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
    s->loaded_efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    s->h_signal.fn = on_signal;
    s->h_loaded.fn = on_loaded;
    s->h_listen.fn = on_accept;
    s->h_sched.fn = on_sched;
    s->h_prep.fn = on_prep;
    if (s->sig_fd < 0 || s->loaded_efd < 0 ||
        cpulm_loop_add(s->loop, s->sig_fd, CPULM_LOOP_READ, &s->h_signal) != CPULM_OK ||
        cpulm_loop_add(s->loop, s->loaded_efd, CPULM_LOOP_READ, &s->h_loaded) != CPULM_OK ||
        cpulm_loop_add(s->loop, s->listen_fd, CPULM_LOOP_READ, &s->h_listen) != CPULM_OK)
        return cpulm_errf(err, CPULM_ERR_IO, "serve: cannot set up the event loop: %s",
                          strerror(errno));
    if (pthread_create(&s->loader, NULL, loader_main, s) != 0)
        return cpulm_errf(err, CPULM_ERR_NOMEM, "serve: cannot start the loader thread");
    s->loader_started = 1;
    return CPULM_OK;
}

cpulm_status cpulm_server_run(cpulm_server *s, cpulm_error *err) {
    cpulm_status st = start(s, err);
    while (st == CPULM_OK && !s->stop) {
        if (cpulm_loop_run_once(s->loop, TICK_MS) < 0) {
            st = cpulm_errf(err, CPULM_ERR_IO, "serve: epoll_wait: %s", strerror(errno));
            break;
        }
        free_dead(s);
        tick(s);
        free_dead(s);
    }
    if (s->loader_started) {
        pthread_join(s->loader, NULL);
        s->loader_started = 0;
        if (!s->sched) s->sched = s->sched_loaded; /* stopped before the loader finished */
    }
    if (st == CPULM_OK && s->load_failed) {
        if (err) *err = s->load_err;
        st = s->load_err.code ? s->load_err.code : CPULM_ERR_IO;
    }
    return st;
}

void cpulm_server_free(cpulm_server *s) {
    if (!s) return;
    if (s->loader_started) pthread_join(s->loader, NULL);
    if (!s->sched) s->sched = s->sched_loaded;
    for (int32_t i = 0; s->conns && i < s->p.max_conns; i++)
        if (s->conns[i]) conn_close(s, s->conns[i]);
    free_dead(s);
    /* bounded: every job and request is cancelled; a worker or the scheduler still inside
     * an uninterruptible piece of work after the wait keeps the model and this server (it
     * reads both): they are left to process exit instead of freed under it */
    if (!cpulm_prep_free(s->prep, CPULM_SERVER_STOP_WAIT_S) ||
        !cpulm_sched_stop(s->sched, CPULM_SERVER_STOP_WAIT_S)) {
        cpulm_logf(CPULM_LOG_WARN, "a worker did not stop within %.0f s: exiting without it",
                   CPULM_SERVER_STOP_WAIT_S);
        return;
    }
    cpulm_sched_free(s->sched);  /* after the connections: their cancels need it */
    cpulm_ctx_free(s->embd_ctx); /* after the request worker stopped */
    cpulm_model_free(s->model);
    cpulm_model_free(s->draft_model); /* after the scheduler, whose draft context reads it */
    free(s->chat_tmpl);
    if (s->listen_fd >= 0) close(s->listen_fd);
    if (s->sig_fd >= 0) close(s->sig_fd);
    if (s->loaded_efd >= 0) close(s->loaded_efd);
    if (s->spare_fd >= 0) close(s->spare_fd);
    cpulm_loop_free(s->loop);
    cpulm_metrics_free(s->metrics);
    free(s->conns);
    free(s->dead);
    cpulm_evict_free(s->evict);
    free(s->alias);
    free(s);
}
