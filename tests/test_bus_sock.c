/* tests/test_bus_sock.c: bus/bus.h socket helpers over inproc endpoints: endpoint
 * resolution, publisher ready-wait and publish through an XSUB, bus_recv's time-out and
 * malformed-event answers, bus_request's framing, stale-reply skipping, time-out and bad
 * replies, the signal flag ending a wait, and bus/log.h: a line on stderr whole and on the bus cut
 * to the protocol's limit on a character boundary. */
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "bus/bus.h"
#include "bus/log.h"
#include "bus/utf8.h"
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

/* bus_log_fit: what fits is kept as it is (bad bytes made U+FFFD); what does not is cut on a
 * character boundary and ends with U+2026 within cap - 1 bytes. */
static void test_log_fit(void) {
    char out[16];
    CHECK(bus_log_fit(out, 4, "abc", 3) == 3 && strcmp(out, "abc") == 0, "%s", out);
    CHECK(bus_log_fit(out, 6, "abcdef", 6) == 5 && strcmp(out, "ab\xe2\x80\xa6") == 0, "%s", out);
    /* "a" + three e-acute (7 bytes): at cap 7 two characters and the mark (6 bytes); at cap 6
     * the second e-acute would need a byte more than the room left, so it goes whole */
    CHECK(bus_log_fit(out, 7, "a\xc3\xa9\xc3\xa9\xc3\xa9", 7) == 6 && strcmp(out, "a\xc3\xa9\xe2\x80\xa6") == 0, "%s", out);
    CHECK(bus_log_fit(out, 6, "a\xc3\xa9\xc3\xa9\xc3\xa9", 7) == 4 && strcmp(out, "a\xe2\x80\xa6") == 0, "%s", out);
    CHECK(bus_log_fit(out, sizeof out, "a\xff" "b", 3) == 5 && strcmp(out, "a\xef\xbf\xbd" "b") == 0, "%s", out);
    CHECK(bus_log_fit(out, 3, "abc", 3) == 0 && out[0] == 0, "no room for the mark: nothing");
}

/* Runs bus_log with stderr in a file; what it wrote there into got (NUL-terminated). */
static int log_capturing(const bus_log_t *lg, const char *text, char *got, size_t cap) {
    fflush(stderr);
    FILE *f = tmpfile();
    int saved = dup(2);
    dup2(fileno(f), 2);
    int rc = bus_log(lg, "%s", text);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    rewind(f);
    size_t n = fread(got, 1, cap - 1, f);
    got[n] = 0;
    fclose(f);
    return rc;
}

/* bus_log: each line on stderr whole with the program's prefix, and on the bus as a "log"
 * event under log/<program>, cut to BUS_LOG_MAX bytes of valid UTF-8; quiet is the bus only;
 * no publisher is stderr only; a name that is not one fails the event, not the stderr line. */
static void test_log(void) {
    void *xsub = zmq_socket(g_ctx, ZMQ_XSUB);
    CHECK(zmq_bind(xsub, "inproc://xsub-log") == 0);
    CHECK(zmq_send(xsub, "\x01", 1, 0) == 1);
    char err[128];
    void *pub = bus_pub_open(g_ctx, "inproc://xsub-log", err, sizeof err);
    CHECK(pub != NULL, "%s", err);
    int ready = BUS_TIMEOUT;
    for (int i = 0; i < 100 && ready == BUS_TIMEOUT; i++) { /* as in test_publish_through_xsub */
        int ev;
        size_t evl = sizeof ev;
        zmq_getsockopt(xsub, ZMQ_EVENTS, &ev, &evl);
        ready = bus_pub_wait(pub, 50);
    }
    CHECK(ready == 0);
    /* 3000 e-acute (6000 bytes) then a second line */
    size_t nlong = 6000;
    char *text = malloc(nlong + 16), *got = malloc(3 * nlong);
    for (size_t i = 0; i < nlong; i += 2) memcpy(text + i, "\xc3\xa9", 2);
    strcpy(text + nlong, "\n\nsecond\n");
    bus_log_t lg = {"tester", pub, 0};
    int rc = log_capturing(&lg, text, got, 3 * nlong);
    CHECK(rc == 0, "rc=%d", rc);
    CHECK(strncmp(got, "tester: ", 8) == 0 && strncmp(got + 8, text, nlong) == 0 &&
          strcmp(got + 8 + nlong, "\ntester: second\n") == 0, "stderr: the whole line, then the second");
    char topic[64];
    wire_msg_t m;
    rc = bus_recv(xsub, 5000, topic, sizeof topic, &m, err, sizeof err);
    CHECK(rc == 0 && m.type == MSG_LOG, "rc=%d %s", rc, err);
    if (rc == 0) {
        size_t n = strlen(m.u.log.line);
        CHECK(strcmp(topic, "log/tester") == 0 && strcmp(m.u.log.program, "tester") == 0, "%s", topic);
        CHECK(n <= BUS_LOG_MAX && n > BUS_LOG_MAX - 4, "cut to %zu bytes", n);
        CHECK(wire_utf8_valid(m.u.log.line, n) && strcmp(m.u.log.line + n - 3, "\xe2\x80\xa6") == 0 &&
              strncmp(m.u.log.line, text, n - 3) == 0, "a prefix of the line and the mark");
        wire_msg_free(&m);
    }
    rc = bus_recv(xsub, 5000, topic, sizeof topic, &m, err, sizeof err);
    CHECK(rc == 0 && m.type == MSG_LOG && strcmp(m.u.log.line, "second") == 0, "the empty line is skipped");
    if (rc == 0) wire_msg_free(&m);
    lg.quiet = 1;
    CHECK(log_capturing(&lg, "hush", got, 64) == 0 && got[0] == 0, "quiet: nothing on stderr (%s)", got);
    rc = bus_recv(xsub, 5000, topic, sizeof topic, &m, err, sizeof err);
    CHECK(rc == 0 && strcmp(m.u.log.line, "hush") == 0, "quiet: the bus still hears it");
    if (rc == 0) wire_msg_free(&m);
    bus_log_t nopub = {"tester", NULL, 0};
    CHECK(log_capturing(&nopub, "alone", got, 64) == 0 && strcmp(got, "tester: alone\n") == 0, "%s", got);
    bus_log_t badname = {"a-program-name-much-longer-than-the-47-bytes-of-a-name", pub, 0};
    CHECK(log_capturing(&badname, "x", got, 128) == BUS_ERR_ARG && strstr(got, ": x\n"), "%s", got);
    CHECK(bus_log(NULL, "x") == BUS_ERR_ARG);
    CHECK(bus_recv(xsub, 100, topic, sizeof topic, &m, err, sizeof err) == BUS_TIMEOUT, "nothing else was sent");
    free(text);
    free(got);
    bus_close(&pub);
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
    RUN(test_log_fit);
    RUN(test_log);
    RUN(test_recv_timeout_and_malformed);
    RUN(test_request);
    RUN(test_signal_ends_wait); /* last: the flag stays set */
    zmq_ctx_term(g_ctx);
    return check_summary();
}
