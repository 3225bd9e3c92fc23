/* bus/zap.c: see zap.h. */
#include "bus/zap.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>
#include <zmq.h>

#include "bus/bus.h"
#include "bus/net.h"
#include "common/errmsg.h"

#define ZAP_ENDPOINT "inproc://zeromq.zap.01"
#define ZAP_FRAMES 7 /* version, request id, domain, address, identity, mechanism, credentials */

#define ZAP_MAX_WATCH 16 /* server sockets watched per context: a program has a few */

static atomic_ullong g_refused;

#define REFUSAL_SLOTS 32
typedef struct {
    char key[160];             /* reason and client, or reason and endpoint */
    time_t last;
    unsigned long long unsaid; /* refusals not logged since then */
} refusal_t;

/* One server socket's handshake failures: its monitor's PAIR end and its endpoint. */
typedef struct {
    void *pair;
    char ep[256];
} watch_t;

typedef struct {
    void *zctx, *sock;
    bus_zap_allow_fn allow;
    pthread_mutex_t mu;       /* guards pending (the thread adopts them) */
    watch_t pending[ZAP_MAX_WATCH], watch[ZAP_MAX_WATCH];
    int n_pending, n_watch;
} zap_t;

/* The handlers of the process, one per context. */
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static zap_t *g_zaps[8];

/* One line on stderr for a refused client: the first time for each reason and client (or
 * endpoint), then at most every REFUSAL_QUIET_S seconds with the count since, since a refused
 * ZeroMQ client retries every 100 ms, forever. Called from the handler threads and from the
 * programs that read their server socket's monitor themselves (bus_zap_refusal). */
#define REFUSAL_QUIET_S 10
static pthread_mutex_t g_said_mu = PTHREAD_MUTEX_INITIALIZER;
static refusal_t g_said[REFUSAL_SLOTS];

static void refusal_line(const char *key, const char *fmt, ...) {
    atomic_fetch_add(&g_refused, 1);
    time_t now = time(NULL);
    pthread_mutex_lock(&g_said_mu);
    refusal_t *r = NULL, *oldest = &g_said[0];
    for (int i = 0; i < REFUSAL_SLOTS && !r; i++) {
        if (!strcmp(g_said[i].key, key)) r = &g_said[i];
        else if (g_said[i].last < oldest->last) oldest = &g_said[i];
    }
    if (r && now - r->last < REFUSAL_QUIET_S) {
        r->unsaid++;
        pthread_mutex_unlock(&g_said_mu);
        return;
    }
    if (!r) {
        r = oldest;
        snprintf(r->key, sizeof r->key, "%s", key);
        r->unsaid = 0;
    }
    char line[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (r->unsaid)
        fprintf(stderr, "%s: %s (and %llu times more since the last line)\n", program_invocation_short_name, line,
                r->unsaid);
    else
        fprintf(stderr, "%s: %s\n", program_invocation_short_name, line);
    r->last = now;
    r->unsaid = 0;
    pthread_mutex_unlock(&g_said_mu);
}

int bus_zap_refusal(unsigned event, unsigned value, const char *ep) {
    /* libzmq names our own endpoint here, not the client's address: the log names the socket */
    char what[160];
    snprintf(what, sizeof what, "hs %u %x %s", event, value, ep);
    if (event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL && value == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH)
        refusal_line(what, "refused a client on %s: it does not speak CURVE (clear text?)", ep);
    else if (event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL)
        refusal_line(what, "refused a client on %s: its CURVE handshake failed (protocol error 0x%x: a wrong "
                     "server key in its trust file?)", ep, value);
    else if (event == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL)
        refusal_line(what, "refused a client on %s: it broke off its handshake (%s: a client in clear text "
                     "does so when it sees our CURVE greeting first)", ep, zmq_strerror((int)value));
    else
        return 0;
    return 1;
}

static void frame_text(zmq_msg_t *f, char *out, size_t cap) {
    size_t n = zmq_msg_size(f) < cap - 1 ? zmq_msg_size(f) : cap - 1;
    memcpy(out, zmq_msg_data(f), n);
    out[n] = 0;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)out[i] < 0x20 || (unsigned char)out[i] > 0x7e) out[i] = '?';
}

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

/* One event of a watched socket's monitor: [u16 event, u32 value][peer address]. A refusal by
 * the key check is logged by the handler itself (it knows the key), so only the handshakes
 * that never reach it are logged here: clear text, or CURVE with a wrong server key. */
static int read_event(watch_t *w) {
    zmq_msg_t ev, addr;
    zmq_msg_init(&ev);
    zmq_msg_init(&addr);
    if (zmq_msg_recv(&ev, w->pair, ZMQ_DONTWAIT) < 0) {
        zmq_msg_close(&ev);
        return zmq_errno() == EAGAIN ? 0 : -1;
    }
    if (zmq_msg_more(&ev)) zmq_msg_recv(&addr, w->pair, 0);
    if (zmq_msg_size(&ev) == 6) {
        uint16_t event;
        uint32_t value;
        memcpy(&event, zmq_msg_data(&ev), 2);
        memcpy(&value, (char *)zmq_msg_data(&ev) + 2, 4);
        bus_zap_refusal(event, value, w->ep);
    }
    zmq_msg_close(&ev);
    zmq_msg_close(&addr);
    return 0;
}

static void *zap_main(void *arg) {
    zap_t *z = arg;
    for (;;) {
        pthread_mutex_lock(&z->mu); /* adopt the sockets bus_zap_watch handed over */
        for (int i = 0; i < z->n_pending && z->n_watch < ZAP_MAX_WATCH; i++) z->watch[z->n_watch++] = z->pending[i];
        z->n_pending = 0;
        pthread_mutex_unlock(&z->mu);
        zmq_pollitem_t it[1 + ZAP_MAX_WATCH] = {{z->sock, 0, ZMQ_POLLIN, 0}};
        for (int i = 0; i < z->n_watch; i++) it[1 + i] = (zmq_pollitem_t){z->watch[i].pair, 0, ZMQ_POLLIN, 0};
        /* a bounded wait: a socket handed over meanwhile is watched within 200 ms */
        if (zmq_poll(it, 1 + z->n_watch, 200) < 0) {
            if (zmq_errno() == EINTR) continue;
            break; /* ETERM: the context is terminating */
        }
        int dead = 0;
        for (int i = 0; i < z->n_watch; i++)
            if ((it[1 + i].revents & ZMQ_POLLIN) && read_event(&z->watch[i]) < 0) dead = 1;
        if (dead) break;
        if (!(it[0].revents & ZMQ_POLLIN)) continue;
        zmq_msg_t f[ZAP_FRAMES];
        int n = read_request(z->sock, f);
        if (n < 0) break;
        int ok = 0;
        int curve = n == ZAP_FRAMES && zmq_msg_size(&f[5]) == 5 && !memcmp(zmq_msg_data(&f[5]), "CURVE", 5) &&
                    zmq_msg_size(&f[6]) == 32;
        if (curve) ok = z->allow((const uint8_t *)zmq_msg_data(&f[6]));
        if (!ok) {
            char addr[64] = "?", key[41] = "?";
            if (n >= 4) frame_text(&f[3], addr, sizeof addr);
            if (curve) zmq_z85_encode(key, (const uint8_t *)zmq_msg_data(&f[6]), 32);
            char what[160];
            snprintf(what, sizeof what, "key %s %s", addr, key);
            refusal_line(what, "refused a client from %s: its key %s is not in --authorized", addr, key);
        }
        if (n >= 2) reply(z->sock, &f[1], ok);
        for (int i = 0; i < n && i < ZAP_FRAMES; i++) zmq_msg_close(&f[i]);
    }
    /* lets zmq_ctx_term finish */
    pthread_mutex_lock(&g_mu);
    for (size_t i = 0; i < sizeof g_zaps / sizeof g_zaps[0]; i++)
        if (g_zaps[i] == z) g_zaps[i] = NULL;
    pthread_mutex_unlock(&g_mu);
    pthread_mutex_lock(&z->mu);
    for (int i = 0; i < z->n_pending; i++) zmq_close(z->pending[i].pair);
    z->n_pending = 0;
    pthread_mutex_unlock(&z->mu);
    for (int i = 0; i < z->n_watch; i++) zmq_close(z->watch[i].pair);
    zmq_close(z->sock);
    pthread_mutex_destroy(&z->mu);
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
    zap_t *z = calloc(1, sizeof *z);
    if (!z) {
        zmq_close(s);
        return err_fail(err, errlen, BUS_ERR_ZMQ, "zap: out of memory");
    }
    z->zctx = zctx, z->sock = s, z->allow = allow;
    pthread_mutex_init(&z->mu, NULL);
    /* The thread starts with every signal blocked: SIGINT/SIGTERM must reach the program's
     * own thread, whose zmq_poll returning EINTR is how it notices them. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    /* registered before the thread runs: it unregisters itself when it ends */
    pthread_mutex_lock(&g_mu);
    size_t slot = 0;
    while (slot < sizeof g_zaps / sizeof g_zaps[0] && g_zaps[slot]) slot++;
    if (slot < sizeof g_zaps / sizeof g_zaps[0]) g_zaps[slot] = z;
    pthread_mutex_unlock(&g_mu);
    pthread_t th;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    int rc = pthread_create(&th, &attr, zap_main, z);
    pthread_attr_destroy(&attr);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        pthread_mutex_lock(&g_mu);
        if (slot < sizeof g_zaps / sizeof g_zaps[0]) g_zaps[slot] = NULL;
        pthread_mutex_unlock(&g_mu);
        zmq_close(s);
        pthread_mutex_destroy(&z->mu);
        free(z);
        return err_fail(err, errlen, BUS_ERR_ZMQ, "zap: cannot start the handler thread");
    }
    return 0;
}

int bus_zap_watch(void *zctx, void *server, const char *endpoint) {
    static atomic_int seq;
    char mon[64];
    snprintf(mon, sizeof mon, "inproc://ft-refusals-%d", atomic_fetch_add(&seq, 1));
    /* A client in clear text fails with a mechanism mismatch when we read its greeting first,
     * and with NO_DETAIL (EPIPE, ECONNRESET) when it read ours first and hung up: both are
     * logged. Watched before the bind, so that no client comes before the watch. */
    if (zmq_socket_monitor(server, mon, BUS_NET_REFUSAL_EVENTS) != 0)
        return -1;
    void *pair = zmq_socket(zctx, ZMQ_PAIR);
    int zero = 0;
    if (!pair || zmq_setsockopt(pair, ZMQ_LINGER, &zero, sizeof zero) || zmq_connect(pair, mon) != 0) {
        if (pair) zmq_close(pair);
        zmq_socket_monitor(server, NULL, 0);
        return -1;
    }
    int rc = -1;
    pthread_mutex_lock(&g_mu);
    for (size_t i = 0; i < sizeof g_zaps / sizeof g_zaps[0]; i++) {
        zap_t *z = g_zaps[i];
        if (!z || z->zctx != zctx) continue;
        pthread_mutex_lock(&z->mu);
        if (z->n_pending + z->n_watch < ZAP_MAX_WATCH) {
            watch_t *w = &z->pending[z->n_pending++];
            w->pair = pair; /* the thread owns it from here */
            snprintf(w->ep, sizeof w->ep, "%s", endpoint);
            rc = 0;
        }
        pthread_mutex_unlock(&z->mu);
        break;
    }
    pthread_mutex_unlock(&g_mu);
    if (rc) {
        zmq_close(pair);
        zmq_socket_monitor(server, NULL, 0);
    }
    return rc;
}

unsigned long long bus_zap_refused(void) { return atomic_load(&g_refused); }
