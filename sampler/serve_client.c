/* sampler/serve_client.c: bin/sampler --connect's side of the service (see serve.h): the
 * requests go out together over one DEALER, the answers come back in any order. */
#include "sampler/serve.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zmq.h>

#include "bus/bus.h"
#include "bus/net.h"

/* Requests in flight at most: enough to fill a server's batch, few enough that a large --n
 * does not overflow its queue (the rest follow as answers come). */
#define CLIENT_WINDOW 32

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

/* Sends m as [empty][body], as a REQ socket frames it: 0, BUS_TIMEOUT while no connection is
 * up (a DEALER has no pipe until then), or a negative status with err set. */
static int send_msg(void *sock, const wire_msg_t *m, char *err, size_t errlen) {
    void *body = NULL;
    size_t len = 0;
    int rc = wire_encode(m, &body, &len);
    if (rc) {
        snprintf(err, errlen, "encode %s: %s", wire_type_name(m->type), wire_strerror(rc));
        return rc;
    }
    if (zmq_send(sock, "", 0, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0 || zmq_send(sock, body, len, ZMQ_DONTWAIT) < 0) {
        int e = zmq_errno();
        rc = e == EAGAIN ? BUS_TIMEOUT : e == EINTR ? BUS_ERR_INTR : BUS_ERR_ZMQ;
        snprintf(err, errlen, "send: %s", zmq_strerror(e));
    }
    free(body);
    return rc;
}

/* Receives one [empty][body] message into m: 0, BUS_TIMEOUT when none is waiting, or a
 * negative status. */
static int recv_msg(void *sock, wire_msg_t *m, char *err, size_t errlen) {
    zmq_msg_t f[2];
    int n = 0, more = 1, total = 0;
    while (more) {
        zmq_msg_t tmp, *cur = n < 2 ? &f[n] : &tmp;
        zmq_msg_init(cur);
        if (zmq_msg_recv(cur, sock, total == 0 ? ZMQ_DONTWAIT : 0) < 0) {
            zmq_msg_close(cur);
            if (total == 0 && zmq_errno() == EAGAIN) return BUS_TIMEOUT;
            break;
        }
        more = zmq_msg_more(cur);
        total++;
        if (cur == &tmp) zmq_msg_close(cur); else n++;
    }
    int rc = WIRE_ERR_MALFORMED;
    if (total == 2 && n == 2 && zmq_msg_size(&f[0]) == 0)
        rc = wire_decode(zmq_msg_data(&f[1]), zmq_msg_size(&f[1]), m, err, errlen);
    else
        snprintf(err, errlen, "reply of %d frames (want an empty delimiter and a body)", total);
    for (int i = 0; i < n; i++) zmq_msg_close(&f[i]);
    return rc;
}

static uint64_t reply_id(const wire_msg_t *m) {
    return m->type == MSG_GEN ? m->u.gen.req_id : m->type == MSG_GEN_PART ? m->u.gen_part.req_id
                                                                            : m->u.error.req_id;
}

/* The loop of sampler_client_request on an open socket. */
static int exchange(void *sock, const wire_msg_t *reqs, int n, wire_msg_t *reps, int timeout_ms,
                    sampler_part_fn on_part, void *ctx, char *err, size_t errlen) {
    char *answered = calloc(n, 1);
    if (!answered) { snprintf(err, errlen, "out of memory"); return BUS_ERR_ARG; }
    int rc = 0, sent = 0, left = n, cancelling = 0;
    double deadline = now_ms() + timeout_ms;
    while (left > 0) {
        if (bus_signal_received() && !cancelling) {
            /* the user gave up: the server drops what it has not finished */
            for (int i = 0; i < n; i++) {
                if (answered[i] || i >= sent) continue;
                wire_msg_t c = {.type = MSG_GEN_CANCEL};
                c.u.gen_cancel.req_id = reqs[i].u.gen_req.req_id;
                send_msg(sock, &c, err, errlen);
            }
            cancelling = 1;
            rc = BUS_ERR_INTR;
            deadline = now_ms() + 1000; /* a moment for the cancellations to be answered */
        }
        while (sent < n && !cancelling && sent - (n - left) < CLIENT_WINDOW) {
            int s = send_msg(sock, &reqs[sent], err, errlen);
            if (s == BUS_TIMEOUT) break; /* not connected yet: again after the poll below */
            if (s) { rc = s; goto out; }
            sent++;
        }
        const double wait = deadline - now_ms();
        if (wait <= 0) {
            if (!cancelling) {
                snprintf(err, errlen, "no reply within %d ms%s", timeout_ms, sent < n ? " (not connected)" : "");
                rc = BUS_TIMEOUT;
            }
            break;
        }
        zmq_pollitem_t it = {sock, 0, ZMQ_POLLIN, 0};
        if (zmq_poll(&it, 1, sent < n ? 50 : (long)(wait < 200 ? wait + 1 : 200)) < 0 && zmq_errno() != EINTR) {
            snprintf(err, errlen, "poll: %s", zmq_strerror(zmq_errno()));
            rc = BUS_ERR_ZMQ;
            break;
        }
        wire_msg_t m;
        int r;
        while ((r = recv_msg(sock, &m, err, errlen)) != BUS_TIMEOUT) {
            if (r) { rc = r; goto out; }
            deadline = cancelling ? deadline : now_ms() + timeout_ms;
            int i = 0;
            const uint64_t id = reply_id(&m);
            while (i < n && (answered[i] || reqs[i].u.gen_req.req_id != id)) i++;
            if (i == n && m.type == MSG_ERROR && id == 0) /* a request that did not decode */
                for (i = 0; i < n && answered[i]; i++) {}
            if (i < n && (m.type == MSG_GEN || m.type == MSG_ERROR)) {
                reps[i] = m;
                answered[i] = 1;
                left--;
                continue;
            }
            if (i < n && m.type == MSG_GEN_PART && on_part && !cancelling) on_part(ctx, &m.u.gen_part);
            wire_msg_free(&m); /* a part, or an answer to nothing of ours */
        }
    }
out:
    if (rc)
        for (int i = 0; i < n; i++)
            if (answered[i]) wire_msg_free(&reps[i]);
    free(answered);
    return rc;
}

int sampler_client_request(const char *endpoint, const wire_msg_t *reqs, int n, wire_msg_t *reps,
                           int timeout_ms, sampler_part_fn on_part, void *ctx, char *err,
                           size_t errlen) {
    char why[512] = "zmq_ctx_new failed";
    memset(reps, 0, sizeof *reps * n);
    void *zctx = zmq_ctx_new();
    void *sock = zctx ? bus_net_socket(zctx, ZMQ_DEALER, BUS_PEER_REPLIES, why, sizeof why) : NULL;
    int rc;
    if (!sock || bus_net_connect(sock, endpoint, why, sizeof why) != 0) {
        snprintf(err, errlen, "--connect %s: %s", endpoint, why);
        rc = SAMPLER_EARG;
    } else {
        bus_signals_install();
        rc = exchange(sock, reqs, n, reps, timeout_ms, on_part, ctx, why, sizeof why);
        if (rc == BUS_TIMEOUT) snprintf(err, errlen, "%s: %s", endpoint, why);
        else if (rc == BUS_ERR_INTR) snprintf(err, errlen, "%s: interrupted; the requests not answered were cancelled", endpoint);
        else if (rc) snprintf(err, errlen, "%s: %s", endpoint, why);
    }
    if (sock) {
        int linger = 200; /* the cancellations get out */
        zmq_setsockopt(sock, ZMQ_LINGER, &linger, sizeof linger);
        zmq_close(sock);
    }
    if (zctx) zmq_ctx_term(zctx);
    return rc;
}
