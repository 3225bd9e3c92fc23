/* tests/test_bus_sock.c: bus/bus.h socket helpers over inproc endpoints: endpoint
 * resolution, publisher ready-wait and publish through an XSUB, bus_recv's time-out and
 * malformed-event answers, bus_request's framing, stale-reply skipping, time-out and bad
 * replies, and the signal flag ending a wait. */
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "bus/bus.h"
#include "tests/check.h"

#pragma GCC diagnostic ignored "-Wformat-zero-length" /* CHECK(cond) without a message */

static void *g_ctx;

static void test_endpoints(void) {
    unsetenv(BUS_ENV_PUB);
    unsetenv(BUS_ENV_SUB);
    CHECK(strcmp(bus_endpoint_pub(NULL), BUS_DEFAULT_PUB) == 0);
    CHECK(strcmp(bus_endpoint_sub(""), BUS_DEFAULT_SUB) == 0);
    setenv(BUS_ENV_PUB, "ipc:///tmp/x", 1);
    CHECK(strcmp(bus_endpoint_pub(NULL), "ipc:///tmp/x") == 0);
    CHECK(strcmp(bus_endpoint_pub("tcp://h:1"), "tcp://h:1") == 0, "flag beats env");
    unsetenv(BUS_ENV_PUB);
}

static void test_publish_through_xsub(void) {
    void *xsub = zmq_socket(g_ctx, ZMQ_XSUB);
    CHECK(zmq_bind(xsub, "inproc://xsub") == 0);
    CHECK(zmq_send(xsub, "\x01", 1, 0) == 1); /* subscribe to all, as bin/bus does */
    char err[128];
    void *pub = bus_pub_open(g_ctx, "inproc://xsub", err, sizeof err);
    CHECK(pub != NULL, "%s", err);
    /* a socket attaches new peers only when its own thread touches it (bin/bus polls its
     * XSUB all the time); here we touch it between short waits */
    int ready = BUS_TIMEOUT;
    for (int i = 0; i < 100 && ready == BUS_TIMEOUT; i++) {
        int ev;
        size_t evl = sizeof ev;
        zmq_getsockopt(xsub, ZMQ_EVENTS, &ev, &evl);
        ready = bus_pub_wait(pub, 50);
    }
    CHECK(ready == 0, "the XSUB's subscription should arrive");
    wire_msg_t m = {.type = MSG_LOG};
    strcpy(m.u.log.program, "t");
    m.u.log.line = "hi";
    CHECK(bus_publish(pub, "log/t", &m) == 0);
    /* the XSUB end reads it back as an ordinary event */
    char topic[32];
    wire_msg_t got;
    int rc = bus_recv(xsub, 5000, topic, sizeof topic, &got, err, sizeof err);
    CHECK(rc == 0, "rc=%d %s", rc, err);
    CHECK(strcmp(topic, "log/t") == 0 && got.type == MSG_LOG && strcmp(got.u.log.line, "hi") == 0);
    wire_msg_free(&got);
    wire_msg_t bad = {.type = MSG_NONE};
    CHECK(bus_publish(pub, "x", &bad) == WIRE_ERR_ARG);
    bus_close(&pub);
    CHECK(pub == NULL);
    zmq_close(xsub);
}

static void test_recv_timeout_and_malformed(void) {
    void *raw = zmq_socket(g_ctx, ZMQ_PUB);
    CHECK(zmq_bind(raw, "inproc://raw") == 0);
    char err[128], topic[32];
    const char *all[] = {"metrics", "log"};
    void *sub = bus_sub_open(g_ctx, "inproc://raw", all, 2, err, sizeof err);
    CHECK(sub != NULL, "%s", err);
    wire_msg_t m;
    CHECK(bus_recv(sub, 50, topic, sizeof topic, &m, err, sizeof err) == BUS_TIMEOUT);
    /* inproc subscriptions are delivered on connect, but give the pipe a moment by
     * resending until one arrives (bounded) */
    int rc = BUS_TIMEOUT;
    for (int i = 0; i < 50 && rc == BUS_TIMEOUT; i++) {
        zmq_send(raw, "metrics/x\0\xc1", 11, 0);
        rc = bus_recv(sub, 100, topic, sizeof topic, &m, err, sizeof err);
    }
    CHECK(rc == WIRE_ERR_MALFORMED, "rc=%d", rc);
    CHECK(strcmp(topic, "metrics/x") == 0, "topic kept for the error line: %s", topic);
    /* a two-frame event is not ours */
    zmq_send(raw, "log/a", 5, ZMQ_SNDMORE);
    zmq_send(raw, "b", 1, 0);
    CHECK(bus_recv(sub, 5000, topic, sizeof topic, &m, err, sizeof err) == WIRE_ERR_MALFORMED);
    /* filtered: "ckpt" is not subscribed, so this times out */
    zmq_send(raw, "ckpt/x\0\x80", 8, 0);
    CHECK(bus_recv(sub, 100, topic, sizeof topic, &m, err, sizeof err) == BUS_TIMEOUT);
    bus_close(&sub);
    zmq_close(raw);
}

/* A ROUTER peer: answers each request with a stale reply (req_id - 1) first, then the
 * right one, or garbage, or nothing, depending on mode. */
typedef struct {
    void *router;
    int mode; /* 0: stale then right, 1: garbage body, 2: silent */
} peer_t;

static void *peer_main(void *arg) {
    peer_t *p = arg;
    zmq_pollitem_t it = {p->router, 0, ZMQ_POLLIN, 0};
    if (zmq_poll(&it, 1, 5000) <= 0) return NULL;
    zmq_msg_t id, empty, body;
    zmq_msg_init(&id), zmq_msg_init(&empty), zmq_msg_init(&body);
    zmq_msg_recv(&id, p->router, 0);
    zmq_msg_recv(&empty, p->router, 0);
    zmq_msg_recv(&body, p->router, 0);
    wire_msg_t req;
    char err[128];
    if (p->mode != 2 && wire_decode(zmq_msg_data(&body), zmq_msg_size(&body), &req, err,
                                    sizeof err) == 0) {
        for (int k = (p->mode == 0 ? 0 : 1); k < 2; k++) {
            wire_msg_t rep = {.type = MSG_INFO};
            rep.u.info.req_id = req.u.info_req.req_id - (k == 0);
            rep.u.info.vocab_size = 256;
            rep.u.info.tokenizer = "bytes";
            void *buf;
            size_t len;
            wire_encode(&rep, &buf, &len);
            zmq_send(p->router, zmq_msg_data(&id), zmq_msg_size(&id), ZMQ_SNDMORE);
            zmq_send(p->router, "", 0, ZMQ_SNDMORE);
            if (p->mode == 1) zmq_send(p->router, "\xc1", 1, 0);
            else zmq_send(p->router, buf, len, 0);
            free(buf);
        }
        wire_msg_free(&req);
    }
    zmq_msg_close(&id), zmq_msg_close(&empty), zmq_msg_close(&body);
    return NULL;
}

static int request_with_peer(int mode, int timeout_ms, wire_msg_t *rep, char *err, size_t n) {
    char ep[32];
    snprintf(ep, sizeof ep, "inproc://router%d", mode);
    peer_t p = {zmq_socket(g_ctx, ZMQ_ROUTER), mode};
    zmq_bind(p.router, ep);
    void *dealer = zmq_socket(g_ctx, ZMQ_DEALER);
    int linger = 0;
    zmq_setsockopt(dealer, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt(p.router, ZMQ_LINGER, &linger, sizeof linger);
    zmq_connect(dealer, ep);
    pthread_t th;
    pthread_create(&th, NULL, peer_main, &p);
    wire_msg_t req = {.type = MSG_INFO_REQ};
    req.u.info_req.req_id = 77;
    req.u.info_req.B = 4, req.u.info_req.T = 8, req.u.info_req.world = 1;
    int rc = bus_request(dealer, &req, rep, timeout_ms, err, n);
    pthread_join(th, NULL);
    zmq_close(dealer);
    zmq_close(p.router);
    return rc;
}

static void test_request(void) {
    wire_msg_t rep;
    char err[128];
    int rc = request_with_peer(0, 5000, &rep, err, sizeof err);
    CHECK(rc == 0, "rc=%d %s", rc, err);
    CHECK(rep.type == MSG_INFO && rep.u.info.req_id == 77, "the stale reply (76) is skipped");
    CHECK(rep.u.info.tokenizer && strcmp(rep.u.info.tokenizer, "bytes") == 0);
    wire_msg_free(&rep);
    CHECK(request_with_peer(1, 5000, &rep, err, sizeof err) == WIRE_ERR_MALFORMED);
    CHECK(request_with_peer(2, 200, &rep, err, sizeof err) == BUS_TIMEOUT);
    CHECK(rep.type == MSG_NONE);
}

static void test_signal_ends_wait(void) {
    bus_signals_install();
    raise(SIGTERM); /* handled: sets the flag instead of killing us */
    CHECK(bus_signal_received());
    void *raw = zmq_socket(g_ctx, ZMQ_PUB);
    zmq_bind(raw, "inproc://sig");
    char err[64], topic[16];
    void *sub = bus_sub_open(g_ctx, "inproc://sig", NULL, 0, err, sizeof err);
    wire_msg_t m;
    CHECK(bus_recv(sub, 10000, topic, sizeof topic, &m, err, sizeof err) == BUS_ERR_INTR);
    bus_close(&sub);
    zmq_close(raw);
}

int main(void) {
    g_ctx = zmq_ctx_new();
    RUN(test_endpoints);
    RUN(test_publish_through_xsub);
    RUN(test_recv_timeout_and_malformed);
    RUN(test_request);
    RUN(test_signal_ends_wait); /* last: the flag stays set */
    zmq_ctx_term(g_ctx);
    return check_summary();
}
