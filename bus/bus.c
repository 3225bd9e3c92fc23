/* bus/bus.c: socket helpers (see bus.h). */
#include "common/errmsg.h"
#include "bus/bus.h"
#include "bus/net.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

static volatile sig_atomic_t g_signal;
/* The self-pipe: the handler writes a byte, and every wait without a short time-out polls the
 * read end beside its sockets. Checking the flag before zmq_poll is not enough: zmq_poll
 * handles libzmq's commands (a peer that connected or went away) between its poll(2) calls
 * without returning, and a signal that lands there, outside poll(2), interrupts nothing, so
 * the wait went on until the next message, forever once the last peer had gone (bin/bus hung
 * so; tests/lib/bus_stress.py reproduced it in a third of its tries). */
static int g_sigpipe[2] = {-1, -1};

static const char *resolve(const char *flag, const char *env, const char *dflt) {
    if (flag && *flag) return flag;
    const char *e = getenv(env);
    return e && *e ? e : dflt;
}

const char *bus_endpoint_pub(const char *flag) { return resolve(flag, BUS_ENV_PUB, BUS_DEFAULT_PUB); }
const char *bus_endpoint_sub(const char *flag) { return resolve(flag, BUS_ENV_SUB, BUS_DEFAULT_SUB); }

static void on_signal(int sig) {
    int saved = errno;
    g_signal = sig;
    if (g_sigpipe[1] >= 0) {
        char b = 1;
        ssize_t n = write(g_sigpipe[1], &b, 1); /* full pipe: a byte is there already */
        (void)n;
    }
    errno = saved;
}

void bus_signals_install(void) {
    if (g_sigpipe[0] < 0 && pipe2(g_sigpipe, O_NONBLOCK | O_CLOEXEC) != 0)
        g_sigpipe[0] = g_sigpipe[1] = -1; /* then the waits rely on EINTR alone */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0; /* no SA_RESTART: zmq_poll must return EINTR */
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

int bus_signal_received(void) { return g_signal != 0; }
int bus_signal_fd(void) { return g_sigpipe[0]; }
volatile sig_atomic_t *bus_signal_flag(void) { return &g_signal; }

void bus_close(void **sock) {
    if (!sock || !*sock) return;
    zmq_close(*sock);
    *sock = NULL;
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* Milliseconds left until deadline (a now_ms value); -1 stays "forever". */
static long left_ms(double deadline) {
    if (deadline < 0) return -1;
    double d = deadline - now_ms();
    return d > 0 ? (long)d + 1 : 0;
}

/* zmq_poll on one socket for ZMQ_POLLIN: 1 readable, 0 time-out, <0 status. */
static int poll_in(void *sock, long timeout_ms, char *err, size_t errlen) {
    if (g_signal) return BUS_ERR_INTR;
    zmq_pollitem_t it[2] = {{sock, 0, ZMQ_POLLIN, 0}, {NULL, g_sigpipe[0], ZMQ_POLLIN, 0}};
    int rc = zmq_poll(it, g_sigpipe[0] >= 0 ? 2 : 1, timeout_ms);
    if (rc < 0) {
        if (zmq_errno() == EINTR) return BUS_ERR_INTR;
        return err_fail(err, errlen, BUS_ERR_ZMQ, "zmq_poll: %s", zmq_strerror(zmq_errno()));
    }
    if (g_signal) return BUS_ERR_INTR;
    return rc > 0 && (it[0].revents & ZMQ_POLLIN) ? 1 : 0;
}

void *bus_pub_open(void *zctx, const char *endpoint, char *err, size_t errlen) {
    if (!zctx || !endpoint) {
        err_fail(err, errlen, BUS_ERR_ARG, "bus_pub_open: NULL argument");
        return NULL;
    }
    /* it hears the bus's subscriptions only */
    void *s = bus_net_socket(zctx, ZMQ_XPUB, BUS_PEER_EVENTS, err, errlen);
    if (!s) return NULL;
    int linger = 1000;
    zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger);
    if (bus_net_connect(s, endpoint, err, errlen) != 0) {
        zmq_close(s);
        return NULL;
    }
    return s;
}

static int sock_type(void *s) {
    int t = -1;
    size_t n = sizeof t;
    if (zmq_getsockopt(s, ZMQ_TYPE, &t, &n) != 0) return -1;
    return t;
}

/* Reads pending subscription frames of an XPUB publisher; returns how many subscribed
 * (first byte 1). Left unread they would pile up, one per bus (re)connection. */
static int drain_subscriptions(void *pub) {
    int subs = 0;
    for (;;) {
        zmq_msg_t msg;
        zmq_msg_init(&msg);
        if (zmq_msg_recv(&msg, pub, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&msg);
            return subs;
        }
        if (zmq_msg_size(&msg) > 0 && ((uint8_t *)zmq_msg_data(&msg))[0] == 1) subs++;
        zmq_msg_close(&msg);
    }
}

int bus_pub_wait(void *pub, int timeout_ms) {
    if (!pub || sock_type(pub) != ZMQ_XPUB) return BUS_ERR_ARG;
    double deadline = timeout_ms < 0 ? -1 : now_ms() + timeout_ms;
    for (;;) {
        int rc = poll_in(pub, left_ms(deadline), NULL, 0);
        if (rc < 0) return rc;
        if (rc == 0) return BUS_TIMEOUT;
        if (drain_subscriptions(pub) > 0) return 0;
    }
}

int bus_publish(void *pub, const char *topic, const wire_msg_t *m) {
    if (!pub || !topic || !m) return BUS_ERR_ARG;
    if (sock_type(pub) == ZMQ_XPUB) drain_subscriptions(pub);
    void *frame = NULL;
    size_t len = 0;
    int rc = wire_event_pack(topic, m, &frame, &len);
    if (rc) return rc;
    rc = zmq_send(pub, frame, len, ZMQ_DONTWAIT);
    free(frame);
    if (rc < 0) return zmq_errno() == EAGAIN ? 1 : BUS_ERR_ZMQ;
    return 0;
}

void *bus_sub_open(void *zctx, const char *endpoint, const char **prefixes, int n, char *err,
                   size_t errlen) {
    if (!zctx || !endpoint || n < 0 || (n > 0 && !prefixes)) {
        err_fail(err, errlen, BUS_ERR_ARG, "bus_sub_open: bad argument");
        return NULL;
    }
    void *s = bus_net_socket(zctx, ZMQ_SUB, BUS_PEER_SUB, err, errlen);
    if (!s) return NULL;
    int rc = 0;
    if (n == 0) rc = zmq_setsockopt(s, ZMQ_SUBSCRIBE, "", 0);
    for (int i = 0; i < n && rc == 0; i++)
        rc = zmq_setsockopt(s, ZMQ_SUBSCRIBE, prefixes[i], strlen(prefixes[i]));
    if (rc != 0) {
        err_fail(err, errlen, BUS_ERR_ZMQ, "subscribe: %s", zmq_strerror(zmq_errno()));
        zmq_close(s);
        return NULL;
    }
    if (bus_net_connect(s, endpoint, err, errlen) != 0) {
        zmq_close(s);
        return NULL;
    }
    return s;
}

/* Receives every frame of one message: the first `cap` into parts (*n of them, caller
 * closes), the rest discarded; *total counts all. Our protocol has single-frame events and
 * two-frame replies, so anything longer is reported by the caller as malformed. Returns 0,
 * BUS_TIMEOUT when nothing was there after all, or a negative status. */
static int recv_parts(void *sock, zmq_msg_t *parts, int cap, int *n, int *total, char *err,
                      size_t errlen) {
    *n = 0;
    *total = 0;
    int more = 1;
    while (more) {
        zmq_msg_t tmp;
        zmq_msg_t *dst = *total < cap ? &parts[*total] : &tmp;
        zmq_msg_init(dst);
        if (zmq_msg_recv(dst, sock, *total ? 0 : ZMQ_DONTWAIT) < 0) {
            int e = zmq_errno();
            zmq_msg_close(dst);
            for (int i = 0; i < *n; i++) zmq_msg_close(&parts[i]);
            *n = 0;
            if (e == EAGAIN && *total == 0) return BUS_TIMEOUT; /* poll said yes, nothing came */
            if (e == EINTR) return BUS_ERR_INTR;
            return err_fail(err, errlen, BUS_ERR_ZMQ, "zmq_msg_recv: %s", zmq_strerror(e));
        }
        more = zmq_msg_more(dst);
        if (*total < cap) (*n)++;
        else zmq_msg_close(&tmp);
        (*total)++;
    }
    return 0;
}

int bus_recv(void *sub, int timeout_ms, char *topic, size_t cap, wire_msg_t *m, char *err,
             size_t errlen) {
    if (err && errlen) err[0] = 0;
    if (topic && cap) topic[0] = 0;
    if (!sub || !m) return err_fail(err, errlen, BUS_ERR_ARG, "bus_recv: NULL argument");
    memset(m, 0, sizeof *m);
    int rc = poll_in(sub, timeout_ms, err, errlen);
    if (rc <= 0) return rc < 0 ? rc : BUS_TIMEOUT;
    zmq_msg_t part;
    int n = 0, total = 0;
    rc = recv_parts(sub, &part, 1, &n, &total, err, errlen);
    if (rc) return rc;
    if (total > 1) {
        zmq_msg_close(&part);
        return err_fail(err, errlen, WIRE_ERR_MALFORMED, "event of %d frames (want 1)", total);
    }
    rc = wire_event_unpack(zmq_msg_data(&part), zmq_msg_size(&part), topic, cap, m, err, errlen);
    zmq_msg_close(&part);
    return rc;
}

/* The req_id of the messages that carry one; 0 and *has = 0 for the others. */
static uint64_t msg_req_id(const wire_msg_t *m, int *has) {
    *has = 1;
    switch (m->type) {
    case MSG_BATCH_REQ: return m->u.batch_req.req_id;
    case MSG_BATCH: return m->u.batch.req_id;
    case MSG_INFO_REQ: return m->u.info_req.req_id;
    case MSG_INFO: return m->u.info.req_id;
    case MSG_ERROR: return m->u.error.req_id;
    default: *has = 0; return 0;
    }
}

int bus_request(void *sock, const wire_msg_t *req, wire_msg_t *rep, int timeout_ms, char *err,
                size_t errlen) {
    if (err && errlen) err[0] = 0;
    if (!sock || !req || !rep) return err_fail(err, errlen, BUS_ERR_ARG, "bus_request: NULL argument");
    memset(rep, 0, sizeof *rep);
    void *body = NULL;
    size_t len = 0;
    int rc = wire_encode(req, &body, &len);
    if (rc) return err_fail(err, errlen, rc, "encode %s: %s", wire_type_name(req->type),
                        wire_strerror(rc));
    /* DONTWAIT: with no peer connected a DEALER send would block; report it instead */
    if (zmq_send(sock, "", 0, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0 ||
        zmq_send(sock, body, len, ZMQ_DONTWAIT) < 0) {
        int e = zmq_errno();
        free(body);
        if (e == EAGAIN) return err_fail(err, errlen, BUS_TIMEOUT, "no peer to send to");
        if (e == EINTR) return BUS_ERR_INTR;
        return err_fail(err, errlen, BUS_ERR_ZMQ, "send: %s", zmq_strerror(e));
    }
    free(body);
    int has_id;
    uint64_t want_id = msg_req_id(req, &has_id);
    double deadline = timeout_ms < 0 ? -1 : now_ms() + timeout_ms;
    for (;;) {
        rc = poll_in(sock, left_ms(deadline), err, errlen);
        if (rc < 0) return rc;
        if (rc == 0) return err_fail(err, errlen, BUS_TIMEOUT, "no reply within %d ms", timeout_ms);
        zmq_msg_t parts[2];
        int n = 0, total = 0;
        rc = recv_parts(sock, parts, 2, &n, &total, err, errlen);
        if (rc == BUS_TIMEOUT) continue;
        if (rc < 0) return rc;
        int shape_ok = total == 2 && zmq_msg_size(&parts[0]) == 0;
        if (shape_ok)
            rc = wire_decode(zmq_msg_data(&parts[1]), zmq_msg_size(&parts[1]), rep, err, errlen);
        for (int i = 0; i < n; i++) zmq_msg_close(&parts[i]);
        if (!shape_ok)
            return err_fail(err, errlen, WIRE_ERR_MALFORMED,
                        "reply of %d frames (want an empty delimiter and a body)", total);
        if (rc) return rc;
        int rep_has;
        uint64_t got_id = msg_req_id(rep, &rep_has);
        if (has_id && rep_has && got_id != want_id) { /* a late answer to an older request */
            wire_msg_free(rep);
            continue;
        }
        return 0;
    }
}
