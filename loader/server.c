/* loader/server.c: the loader service (loader/server.h).
 *
 * One thread: the poll loop reads a request off the ROUTER, answers it and sends the reply.
 * N threads: the poll loop forwards whole multipart requests to an inproc DEALER that spreads
 * them over N worker DEALER sockets, and forwards their replies back; each worker has its own
 * dataset handle (LMDB read transactions are per thread). Either way the loop wakes at least
 * once a second to publish the bus announcement and to notice a stop request. */
#include "loader/server.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "bus/beat.h"
#include "bus/bus.h"
#include "bus/log.h"
#include "bus/net.h"
#include "common/progress.h"
#include "common/saylimit.h"
#include "bus/wire.h"

#define MAX_FRAMES 16 /* envelope frames we echo; a request with more is dropped */
#define SAY_PER_S 10  /* lines a second about refused requests; the rest are counted */

/* What the handlers have to say: one line per refused or dropped request (what was wrong, from
 * where), and the error the service stops on (a dataset cut under it). The poll loop says them
 * (say_drain): it owns the bus socket, which a worker thread may not touch. A flood of bad
 * requests is said SAY_PER_S lines a second, then one line with the count of the others. */
typedef struct {
    pthread_mutex_t mu;
    char line[SAY_PER_S][480];
    int n;               /* queued */
    saylimit_t lim;
    atomic_int stop;     /* fatal holds the error the service stops on */
    char fatal[600];
} say_t;

static void say_add(say_t *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say_add(say_t *s, const char *fmt, ...) {
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    if (s->n < SAY_PER_S && saylimit_take(&s->lim, progress_now(), SAY_PER_S)) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(s->line[s->n++], sizeof s->line[0], fmt, ap);
        va_end(ap);
    } else if (s->n == SAY_PER_S) {
        s->lim.unsaid++; /* the queue is full (not drained yet): counted like the rest */
    }
    pthread_mutex_unlock(&s->mu);
}

static void say_drain(say_t *s, bus_log_t *lg) {
    char line[SAY_PER_S][480];
    pthread_mutex_lock(&s->mu);
    int n = s->n;
    memcpy(line, s->line, sizeof line[0] * (size_t)n);
    s->n = 0;
    unsigned long long unsaid = saylimit_unsaid(&s->lim, progress_now());
    pthread_mutex_unlock(&s->mu);
    for (int i = 0; i < n; i++) bus_log(lg, "%s", line[i]);
    if (unsaid) bus_log(lg, "%llu more refused request(s) in the last second(s), not said one by one", unsaid);
}

struct loader_handler {
    loader_src_t *src;
    const char *dataset;
    uint32_t *tokens;
    uint8_t *mask;
    size_t tok_cap, mask_cap;
    atomic_uint_fast64_t *served, *errors; /* shared counters (may be NULL) */
    say_t *say;                            /* shared (NULL: nothing is said) */
    char said[320];                        /* the message of the last error reply */
};

int loader_handler_open(loader_handler_t **out, const loader_server_cfg_t *cfg, char *err, size_t errlen) {
    loader_handler_t *h = calloc(1, sizeof *h);
    if (!h) return LOADER_ENOMEM;
    int rc = loader_src_open(&h->src, cfg->data, cfg->val_data, cfg->val_docs, err, errlen);
    if (rc) {
        free(h);
        return rc;
    }
    h->dataset = cfg->data;
    *out = h;
    return LOADER_OK;
}

void loader_handler_close(loader_handler_t **ph) {
    if (!ph || !*ph) return;
    loader_src_close(&(*ph)->src);
    free((*ph)->tokens);
    free((*ph)->mask);
    free(*ph);
    *ph = NULL;
}

static int reply_error(loader_handler_t *h, uint64_t req_id, int code, const char *msg, void **reply, size_t *rlen) {
    snprintf(h->said, sizeof h->said, "%s", msg);
    if (wire_error_encode(req_id, code, msg, reply, rlen) != WIRE_OK) {
        *reply = NULL;
        return LOADER_EIO - 1;
    }
    return code;
}

static int grow(void **buf, size_t *cap, size_t need) {
    if (need <= *cap) return 0;
    void *nb = realloc(*buf, need);
    if (!nb) return -1;
    *buf = nb;
    *cap = need;
    return 0;
}

static int reply_batch(loader_handler_t *h, const msg_batch_req_t *q, void **reply, size_t *rlen) {
    char err[256] = "";
    loader_params_t p = {.seed = q->seed, .epoch = q->epoch, .step = q->step, .rank = q->rank,
                         .world = q->world, .B = q->B, .T = q->T, .layout = q->layout, .split = q->split};
    uint64_t steps = 0;
    int rc = loader_steps_per_epoch(h->src, &p, &steps, err, sizeof err);
    if (rc) return reply_error(h, q->req_id, rc, err, reply, rlen);
    size_t ntok = (size_t)q->B * (q->T + 1), nmask = q->layout == WIRE_PAD ? (size_t)q->B * q->T : 0;
    if (grow((void **)&h->tokens, &h->tok_cap, ntok * sizeof *h->tokens) ||
        grow((void **)&h->mask, &h->mask_cap, nmask ? nmask : 1))
        return reply_error(h, q->req_id, LOADER_ENOMEM, "out of memory for the batch", reply, rlen);
    rc = loader_batch_make(h->src, &p, h->tokens, nmask ? h->mask : NULL, &steps, err, sizeof err);
    if (rc) return reply_error(h, q->req_id, rc, err, reply, rlen);
    wire_msg_t m;
    memset(&m, 0, sizeof m);
    m.type = MSG_BATCH;
    msg_batch_t *b = &m.u.batch;
    b->req_id = q->req_id;
    b->seed = q->seed;
    b->epoch = q->epoch;
    b->step = q->step;
    b->rank = q->rank;
    b->world = q->world;
    b->B = q->B;
    b->T = q->T;
    b->layout = q->layout;
    b->split = q->split;
    b->steps_per_epoch = steps;
    b->tokens = h->tokens;
    b->mask = nmask ? h->mask : NULL;
    if (wire_encode(&m, reply, rlen) != WIRE_OK)
        return reply_error(h, q->req_id, LOADER_ENOMEM, "could not encode the batch", reply, rlen);
    return LOADER_OK;
}

static int reply_info(loader_handler_t *h, const msg_info_req_t *q, void **reply, size_t *rlen) {
    char err[256] = "";
    loader_params_t p = {.world = q->world, .B = q->B, .T = q->T, .layout = q->layout, .split = q->split};
    uint64_t steps = 0;
    int rc = loader_steps_per_epoch(h->src, &p, &steps, err, sizeof err);
    if (rc) return reply_error(h, q->req_id, rc, err, reply, rlen);
    const dataset_meta_t *dm = loader_src_meta(h->src);
    loader_split_info_t si;
    loader_src_split_info(h->src, q->split, &si);
    wire_msg_t m;
    memset(&m, 0, sizeof m);
    m.type = MSG_INFO;
    msg_info_t *i = &m.u.info;
    i->req_id = q->req_id;
    i->vocab_size = dm->vocab_size;
    i->eot_id = dm->eot_id;
    i->n_docs = si.n_docs;
    i->n_tokens = si.n_tokens;
    i->n_bytes = si.n_bytes;
    i->steps_per_epoch = steps;
    i->tokenizer = (char *)dm->tokenizer;
    i->tokenizer_hash = (char *)dm->tokenizer_hash;
    i->dataset = (char *)h->dataset;
    if (wire_encode(&m, reply, rlen) != WIRE_OK)
        return reply_error(h, q->req_id, LOADER_ENOMEM, "could not encode the info", reply, rlen);
    return LOADER_OK;
}

/* The code of a request that did not decode: a layout or split that is not one of the
 * names is a parameter error (EPARAM, PROTOCOL.md §1.3) like a bad B or T, anything else
 * is malformed. */
static int undecoded_code(int status, const wire_diag_t *d) {
    int request = d->type == MSG_BATCH_REQ || d->type == MSG_INFO_REQ;
    int enum_field = d->field && (!strcmp(d->field, "layout") || !strcmp(d->field, "split"));
    return request && enum_field && status == WIRE_ERR_MISTYPED ? LOADER_EPARAM : LOADER_EMALFORMED;
}

int loader_handler_reply(loader_handler_t *h, const void *req, size_t len, void **reply, size_t *rlen) {
    wire_msg_t m;
    wire_diag_t d;
    char err[256] = "", line[320];
    *reply = NULL;
    *rlen = 0;
    int rc = wire_decode_diag(req, len, &m, &d, err, sizeof err);
    if (rc != WIRE_OK) {
        snprintf(line, sizeof line, "request not understood: %s", err);
        rc = reply_error(h, d.has_req_id ? d.req_id : 0, undecoded_code(rc, &d), line, reply, rlen);
    } else if (m.type == MSG_BATCH_REQ) {
        rc = reply_batch(h, &m.u.batch_req, reply, rlen);
    } else if (m.type == MSG_INFO_REQ) {
        rc = reply_info(h, &m.u.info_req, reply, rlen);
    } else {
        snprintf(line, sizeof line, "a loader answers batch_req and info_req, not %s", wire_type_name(m.type));
        rc = reply_error(h, d.has_req_id ? d.req_id : 0, LOADER_ETYPE, line, reply, rlen);
    }
    /* served counts batches (what the announcement's "served" means, PROTOCOL.md §2.3);
     * info replies and error replies are not batches */
    if (h->served && rc == LOADER_OK && m.type == MSG_BATCH_REQ) atomic_fetch_add(h->served, 1);
    if (h->errors && rc != LOADER_OK) atomic_fetch_add(h->errors, 1);
    wire_msg_free(&m);
    return rc;
}

/* ---- sockets ---------------------------------------------------------------------------- */

/* a worker's messages carry one frame more: where they came from (peer_from) */
typedef struct {
    zmq_msg_t f[MAX_FRAMES + 1];
    int n;
} multipart_t;

static void mp_close(multipart_t *m) {
    for (int i = 0; i < m->n; i++) zmq_msg_close(&m->f[i]);
    m->n = 0;
}

/* Where a request came from, for a line about it, from what the frames the peer sent carry
 * (on the ROUTER itself: the poll loop says it to a worker thread in a frame of its own,
 * peer_from, since the frames it passes on over inproc lose what they carried): over
 * TCP its address and port (the connection's, ZMQ_SRCFD), over ipc its process (ZeroMQ's
 * Peer-Address there is "localhost:UID:GID:PID"); always the routing id the ROUTER gave the
 * connection, the first frame (m: the message as the ROUTER delivered it). */
static void peer_of(multipart_t *m, char *out, size_t cap) {
    size_t n = m->n ? zmq_msg_size(&m->f[0]) : 0, k = 0;
    const unsigned char *id = m->n ? zmq_msg_data(&m->f[0]) : NULL;
    char hex[80] = "", where[160] = "";
    for (size_t i = 0; i < n && i < 32 && k + 3 < sizeof hex; i++) k += (size_t)snprintf(hex + k, sizeof hex - k, "%02x", id[i]);
    zmq_msg_t *last = m->n > 1 ? &m->f[m->n - 1] : NULL;
    if (last && saylimit_peer_addr(zmq_msg_get(last, ZMQ_SRCFD), where, sizeof where - 1) == 0) strcat(where, " ");
    const char *a = last && !where[0] ? zmq_msg_gets(last, "Peer-Address") : NULL;
    unsigned long uid, gid, pid;
    if (a && sscanf(a, "localhost:%lu:%lu:%lu", &uid, &gid, &pid) == 3)
        snprintf(where, sizeof where, "process %lu (uid %lu) ", pid, uid);
    else if (a && *a)
        snprintf(where, sizeof where, "%.100s ", a);
    if (where[0]) snprintf(out, cap, "%s(routing id %s)", where, n ? hex : "none");
    else snprintf(out, cap, "the peer with routing id %s", n ? hex : "none");
}

/* Reads one whole multipart message (non-blocking: call after poll said POLLIN) of at most
 * MAX_FRAMES + extra frames (extra 1: a worker's, which begins with where it came from).
 * Returns 0, -1 when nothing was there, or -2 when it had too many frames (then it is consumed
 * and dropped, and s says so). */
static int mp_recv(void *sock, multipart_t *m, int extra, say_t *s) {
    m->n = 0;
    int more = 1, over = 0;
    while (more) {
        zmq_msg_t tmp, *f = m->n < MAX_FRAMES + extra ? &m->f[m->n] : &tmp;
        zmq_msg_init(f);
        if (zmq_msg_recv(f, sock, m->n == 0 && !over ? ZMQ_DONTWAIT : 0) < 0) {
            zmq_msg_close(f);
            mp_close(m);
            return -1;
        }
        more = zmq_msg_more(f);
        if (f == &tmp) { zmq_msg_close(f); over = 1; }
        else m->n++;
    }
    if (over) {
        char from[160];
        peer_of(m, from, sizeof from);
        say_add(s, "dropped a request from %s: more than %d frames (PROTOCOL.md §1.3)", from, MAX_FRAMES);
        mp_close(m);
        return -2;
    }
    return 0;
}

/* Sends frames [i0, n) then, if body != NULL, body as the last frame; frees nothing. */
static void mp_send(void *sock, multipart_t *m, int i0, int n, const void *body, size_t blen) {
    for (int i = i0; i < n; i++) {
        int more = (i < n - 1 || body) ? ZMQ_SNDMORE : 0;
        zmq_msg_send(&m->f[i], sock, more | ZMQ_DONTWAIT); /* ROUTER drops unroutable replies */
    }
    if (body) zmq_send(sock, body, blen, ZMQ_DONTWAIT);
}

/* Answers one multipart request read from sock on the same socket. via: sock is a worker's
 * (inproc), whose messages begin with a frame saying where they came from (peer_from), which
 * the reply leaves out; else sock is the ROUTER. */
static void serve_one(loader_handler_t *h, void *sock, int via) {
    multipart_t m;
    if (mp_recv(sock, &m, via, h->say)) return;
    if (m.n >= 1 + via) {
        void *reply = NULL;
        size_t rlen = 0;
        zmq_msg_t *body = &m.f[m.n - 1];
        int rc = loader_handler_reply(h, zmq_msg_data(body), zmq_msg_size(body), &reply, &rlen);
        /* the dataset was cut under us: every later batch would fail too; the service stops
         * (after this reply), and its error line is the one line said about it */
        const int fatal = rc == LOADER_EDATA && h->say && loader_src_shrunk(h->src);
        if (rc != LOADER_OK && !fatal) { /* what was refused, from where (the error reply says it to the peer too) */
            char from[200];
            if (!via) peer_of(&m, from, sizeof from);
            else snprintf(from, sizeof from, "%.*s", (int)zmq_msg_size(&m.f[0]), (const char *)zmq_msg_data(&m.f[0]));
            say_add(h->say, "refused a request from %s: error %d (%s): %s", from, rc, loader_strerror(rc),
                    reply ? h->said : "not even an error reply could be encoded");
        }
        if (reply) mp_send(sock, &m, via, m.n - 1, reply, rlen);
        free(reply);
        if (fatal) {
            pthread_mutex_lock(&h->say->mu);
            if (!atomic_load(&h->say->stop)) snprintf(h->say->fatal, sizeof h->say->fatal, "%s", h->said);
            atomic_store(&h->say->stop, 1);
            pthread_mutex_unlock(&h->say->mu);
        }
    }
    mp_close(&m);
}

typedef struct {
    void *zctx;
    const loader_server_cfg_t *cfg;
    loader_handler_t *h;
    volatile sig_atomic_t *stop;
    atomic_int *quit;
} worker_t;

static void *worker_main(void *arg) {
    worker_t *w = arg;
    void *sock = zmq_socket(w->zctx, ZMQ_DEALER);
    int zero = 0;
    zmq_setsockopt(sock, ZMQ_LINGER, &zero, sizeof zero);
    if (zmq_connect(sock, "inproc://loader-workers") != 0) {
        zmq_close(sock);
        return NULL;
    }
    while (!atomic_load(w->quit)) {
        zmq_pollitem_t it = {sock, 0, ZMQ_POLLIN, 0};
        if (zmq_poll(&it, 1, 200) > 0) serve_one(w->h, sock, 1);
    }
    zmq_close(sock);
    return NULL;
}

static void announce(void *pub, const loader_server_cfg_t *cfg, const char *endpoint, uint64_t served) {
    if (!pub) return;
    wire_msg_t m;
    memset(&m, 0, sizeof m);
    m.type = MSG_LOADER;
    snprintf(m.u.loader.name, sizeof m.u.loader.name, "%s", cfg->name);
    m.u.loader.endpoint = (char *)endpoint;
    m.u.loader.dataset = (char *)cfg->data;
    m.u.loader.pid = (uint64_t)getpid();
    m.u.loader.served = served;
    char topic[80];
    snprintf(topic, sizeof topic, "loader/%s", cfg->name);
    bus_publish(pub, topic, &m);
}

int loader_server_run(const loader_server_cfg_t *cfg, volatile sig_atomic_t *stop, char *err, size_t errlen) {
    int nthreads = cfg->threads < 1 ? 1 : cfg->threads;
    atomic_uint_fast64_t served = 0, errors = 0;
    atomic_int quit = 0;
    say_t say;
    memset(&say, 0, sizeof say);
    pthread_mutex_init(&say.mu, NULL);
    loader_handler_t *h[64] = {0};
    worker_t wk[64];
    pthread_t th[64];
    int started = 0, rc = LOADER_OK;
    void *zctx = NULL, *router = NULL, *backend = NULL, *pub = NULL;
    if (nthreads > 64) nthreads = 64;
    /* before anything is opened: a name the announcement cannot carry whole is refused, not cut */
    if (bus_name_check(cfg->name, "loader name", 0, err, errlen)) return LOADER_EPARAM;
    for (int i = 0; i < nthreads; i++) {
        if ((rc = loader_handler_open(&h[i], cfg, err, errlen))) goto out;
        h[i]->served = &served;
        h[i]->errors = &errors;
        h[i]->say = &say;
    }
    zctx = zmq_ctx_new();
    int zero = 0, hwm = 10000;
    if (!zctx || !(router = bus_net_socket(zctx, ZMQ_ROUTER, BUS_PEER_REQUESTS, err, errlen))) {
        rc = LOADER_EIO;
        goto out;
    }
    zmq_setsockopt(router, ZMQ_SNDHWM, &hwm, sizeof hwm);
    zmq_setsockopt(router, ZMQ_RCVHWM, &hwm, sizeof hwm);
    if (bus_net_bind(zctx, router, cfg->bind, err, errlen) != 0) {
        rc = LOADER_EIO;
        goto out;
    }
    /* what the announcements name: bound to every interface (a star) or to eth0, the host name or
     * the interface's address announced, so that trainers elsewhere can connect */
    char endpoint[512];
    bus_net_advertised(router, cfg->bind, endpoint, sizeof endpoint);
    /* The bus is optional: without one the announcements are dropped (publishing never
     * blocks) and serving is unaffected. Endpoint: --bus-pub, else $FT_BUS_PUB, else the
     * default, like every program. */
    /* --quiet keeps stderr quiet; the lines still go to the bus, where a dashboard shows them */
    bus_log_t lg = {"loader", NULL, cfg->quiet};
    {
        char berr[256];
        pub = bus_pub_open(zctx, bus_endpoint_pub(cfg->bus_pub), berr, sizeof berr);
        if (!pub) bus_log(&lg, "warning: no bus announcements (%s)", berr);
        /* so the first line is not lost to a subscription in flight; no bus: 0.5 s, once */
        else bus_pub_wait(pub, 500);
        lg.pub = pub;
    }
    if (nthreads > 1) {
        backend = zmq_socket(zctx, ZMQ_DEALER);
        zmq_setsockopt(backend, ZMQ_LINGER, &zero, sizeof zero);
        zmq_bind(backend, "inproc://loader-workers");
        for (int i = 0; i < nthreads; i++) {
            wk[i] = (worker_t){zctx, cfg, h[i], stop, &quit};
            if (pthread_create(&th[i], NULL, worker_main, &wk[i]) != 0) break;
            started++;
        }
    }
    bus_log(&lg, "serving %s at %s (%d thread%s, %llu docs)", cfg->data, endpoint, nthreads, nthreads > 1 ? "s" : "",
            (unsigned long long)loader_src_meta(h[0]->src)->n_docs);
    double t_announce = 0, t_log = progress_now();
    uint64_t logged = 0;
    while (!*stop) {
        say_drain(&say, &lg);
        if (atomic_load(&say.stop)) { /* a worker's last error reply goes out first */
            multipart_t m;
            while (backend && mp_recv(backend, &m, 0, NULL) == 0) {
                mp_send(router, &m, 0, m.n, NULL, 0);
                mp_close(&m);
            }
            snprintf(err, errlen, "%s", say.fatal);
            rc = LOADER_EDATA;
            break;
        }
        double now = progress_now();
        if (now - t_announce >= 1.0) {
            announce(pub, cfg, endpoint, atomic_load(&served));
            t_announce = now;
        }
        if (!cfg->quiet && now - t_log >= 10.0 && atomic_load(&served) != logged) { /* a count: stderr only */
            logged = atomic_load(&served);
            fprintf(stderr, "loader: %llu batches served, %llu errors\n", (unsigned long long)logged,
                    (unsigned long long)atomic_load(&errors));
            t_log = now;
        }
        zmq_pollitem_t it[2] = {{router, 0, ZMQ_POLLIN, 0}, {backend, 0, ZMQ_POLLIN, 0}};
        int n = zmq_poll(it, backend ? 2 : 1, 250);
        if (n < 0) {
            if (zmq_errno() == EINTR) continue;
            break;
        }
        if (!backend) {
            /* drain what is there, but come back to the clock now and then */
            for (int k = 0; k < 64 && (it[0].revents & ZMQ_POLLIN); k++) {
                serve_one(h[0], router, 0);
                int ev = 0;
                size_t evl = sizeof ev;
                zmq_getsockopt(router, ZMQ_EVENTS, &ev, &evl);
                if (!(ev & ZMQ_POLLIN)) break;
            }
            continue;
        }
        multipart_t m;
        if ((it[0].revents & ZMQ_POLLIN) && mp_recv(router, &m, 0, &say) == 0) {
            /* where it came from, first: only here can it be known (peer_of) */
            char from[200];
            peer_of(&m, from, sizeof from);
            if (zmq_send(backend, from, strlen(from), ZMQ_SNDMORE | ZMQ_DONTWAIT) >= 0) mp_send(backend, &m, 0, m.n, NULL, 0);
            mp_close(&m);
        }
        if ((it[1].revents & ZMQ_POLLIN) && mp_recv(backend, &m, 0, NULL) == 0) {
            mp_send(router, &m, 0, m.n, NULL, 0);
            mp_close(&m);
        }
    }
    say_drain(&say, &lg);
    bus_log(&lg, "stopping after %llu batches served, %llu errors", (unsigned long long)atomic_load(&served),
            (unsigned long long)atomic_load(&errors));
out:
    atomic_store(&quit, 1);
    for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
    if (backend) zmq_close(backend);
    bus_close(&pub);
    if (router) zmq_close(router);
    if (zctx) zmq_ctx_term(zctx);
    for (int i = 0; i < nthreads; i++) loader_handler_close(&h[i]);
    pthread_mutex_destroy(&say.mu);
    return rc;
}
