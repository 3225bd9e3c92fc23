/* bus/zap.c: see zap.h. */
#include "bus/zap.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <stdatomic.h>
#include <string.h>
#include <zmq.h>

#include "bus/bus.h"
#include "common/errmsg.h"

#define ZAP_ENDPOINT "inproc://zeromq.zap.01"
#define ZAP_FRAMES 7 /* version, request id, domain, address, identity, mechanism, credentials */

static atomic_ullong g_refused;

typedef struct {
    void *sock;
    bus_zap_allow_fn allow;
} zap_t;

/* Reads one request (every frame; the first ZAP_FRAMES kept). Returns the frames read, or -1
 * when the context is terminating. */
static int read_request(void *s, zmq_msg_t *f) {
    int n = 0, more = 1;
    while (more) {
        zmq_msg_t tmp, *dst = n < ZAP_FRAMES ? &f[n] : &tmp;
        zmq_msg_init(dst);
        int rc;
        while ((rc = zmq_msg_recv(dst, s, 0)) < 0 && zmq_errno() == EINTR) {}
        if (rc < 0) {
            zmq_msg_close(dst);
            for (int i = 0; i < n && i < ZAP_FRAMES; i++) zmq_msg_close(&f[i]);
            return -1;
        }
        more = zmq_msg_more(dst);
        if (dst == &tmp) zmq_msg_close(&tmp);
        n++;
    }
    return n;
}

static void reply(void *s, zmq_msg_t *request_id, int ok) {
    zmq_send(s, "1.0", 3, ZMQ_SNDMORE);
    zmq_msg_send(request_id, s, ZMQ_SNDMORE);
    zmq_send(s, ok ? "200" : "400", 3, ZMQ_SNDMORE);
    const char *text = ok ? "OK" : "client key not authorized";
    zmq_send(s, text, strlen(text), ZMQ_SNDMORE);
    zmq_send(s, "", 0, ZMQ_SNDMORE); /* user id */
    zmq_send(s, "", 0, 0);           /* metadata */
}

static void *zap_main(void *arg) {
    zap_t *z = arg;
    for (;;) {
        zmq_msg_t f[ZAP_FRAMES];
        int n = read_request(z->sock, f);
        if (n < 0) break;
        int ok = 0;
        if (n == ZAP_FRAMES && zmq_msg_size(&f[5]) == 5 && !memcmp(zmq_msg_data(&f[5]), "CURVE", 5) &&
            zmq_msg_size(&f[6]) == 32)
            ok = z->allow((const uint8_t *)zmq_msg_data(&f[6]));
        if (!ok) atomic_fetch_add(&g_refused, 1);
        if (n >= 2) reply(z->sock, &f[1], ok);
        for (int i = 0; i < n && i < ZAP_FRAMES; i++) zmq_msg_close(&f[i]);
    }
    zmq_close(z->sock); /* lets zmq_ctx_term finish */
    free(z);
    return NULL;
}

int bus_zap_ensure(void *zctx, bus_zap_allow_fn allow, char *err, size_t errlen) {
    void *s = zmq_socket(zctx, ZMQ_REP);
    if (!s) return err_fail(err, errlen, BUS_ERR_ZMQ, "zap: zmq_socket: %s", zmq_strerror(zmq_errno()));
    int zero = 0;
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
    if (zmq_bind(s, ZAP_ENDPOINT) != 0) {
        int e = zmq_errno();
        zmq_close(s);
        if (e == EADDRINUSE) return 0; /* this context has its handler */
        return err_fail(err, errlen, BUS_ERR_ZMQ, "zap: bind: %s", zmq_strerror(e));
    }
    zap_t *z = malloc(sizeof *z);
    if (!z) {
        zmq_close(s);
        return err_fail(err, errlen, BUS_ERR_ZMQ, "zap: out of memory");
    }
    *z = (zap_t){s, allow};
    /* The thread starts with every signal blocked: SIGINT/SIGTERM must reach the program's
     * own thread, whose zmq_poll returning EINTR is how it notices them. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_t th;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    int rc = pthread_create(&th, &attr, zap_main, z);
    pthread_attr_destroy(&attr);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        zmq_close(s);
        free(z);
        return err_fail(err, errlen, BUS_ERR_ZMQ, "zap: cannot start the handler thread");
    }
    return 0;
}

unsigned long long bus_zap_refused(void) { return atomic_load(&g_refused); }
