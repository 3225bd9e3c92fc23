/* trainer/dp_link.c: the rendezvous and the heartbeat (see dp_link.h). */
#include "trainer/dp_link.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "bus/net.h"
#include "bus/wire.h"
#include "common/errmsg.h"
#include "common/progress.h"
#include "common/saylimit.h"
#include "trainer/dp.h"

#define ID_MAX 256 /* ZeroMQ routing ids are at most 255 bytes */
#define BAD_PER_S 10 /* lines a second about frames that do not decode; the rest are counted */

typedef struct {
    unsigned char id[ID_MAX];
    size_t idlen;
    int fd;          /* the connection its last message came on (ZMQ_SRCFD) */
    double seen;     /* when it was last heard from */
    double closed_at; /* when its connection closed (0: open); a loss unless a bye follows */
    int joined, bye;
    char host[128];
    long long pid;
} peer_t;

struct dp_link {
    dp_link_cfg_t cfg;
    char run[WIRE_NAME_LEN], *flags, *nccl_id;
    void *sock, *mon;
    char mon_ep[64];
    char bound[DP_LINK_EP_LEN]; /* rank 0: where its ROUTER is bound, for refusal lines */
    peer_t *peers;          /* rank 0: one per rank (index = rank); others: [0] is rank 0 */
    pthread_t thread;
    int thread_up;
    atomic_int quit, orderly;
    atomic_llong step;
    pthread_mutex_t mu;     /* guards lost, why and the peers' seen times */
    int lost;
    char why[512];
    char farewell[512];     /* a rank that stops alone: why, sent as it leaves */
    int refused;            /* rank 0 refused the group: its refusals must get out on close */
    /* frames that did not decode: said BAD_PER_S a second, the others counted; one thread at
     * a time reads the socket (the rendezvous, then the beats) */
    saylimit_t bad;
};


/* A closed connection is a loss only if no bye or farewell arrives within this long: the socket
 * monitor can report the close before the socket hands over the last message that came on it. */
#define CLOSE_GRACE_S 0.25

static double beat_interval(const dp_link_t *l) {
    double ivl = l->cfg.lost_after_s / 5;
    return ivl < 0.05 ? 0.05 : ivl > 1.0 ? 1.0 : ivl;
}

/* ---- frames: a DEALER sends [body]; the ROUTER sees [routing id][body] ------------------ */

static int send_msg(void *s, const unsigned char *id, size_t idlen, const wire_msg_t *m, int flags) {
    void *buf = NULL;
    size_t len = 0;
    if (wire_encode(m, &buf, &len)) return -1;
    int rc = 0;
    if (id && zmq_send(s, id, idlen, ZMQ_SNDMORE | flags) < 0) rc = -1;
    if (!rc && zmq_send(s, buf, len, flags) < 0) rc = -1;
    free(buf);
    return rc;
}

/* Receives one message without waiting: 1 with m filled (and id, fd for a ROUTER), 0 when
 * nothing is there, -1 for a frame that does not decode (dropped; why says what was wrong). */
static int recv_msg(void *s, int router, unsigned char *id, size_t *idlen, int *fd, wire_msg_t *m, char *why,
                    size_t whylen) {
    zmq_msg_t part;
    int got = 0, n = 0, rc = -1;
    size_t nid = 0;
    snprintf(why, whylen, "a message without a body");
    for (int more = 1; more; n++) {
        zmq_msg_init(&part);
        if (zmq_msg_recv(&part, s, n == 0 ? ZMQ_DONTWAIT : 0) < 0) {
            zmq_msg_close(&part);
            if (n) snprintf(why, whylen, "a message cut after %d frame(s): %s", n, zmq_strerror(zmq_errno()));
            return n == 0 ? 0 : -1;
        }
        more = zmq_msg_more(&part);
        if (router && n == 0) {
            nid = zmq_msg_size(&part) < ID_MAX ? zmq_msg_size(&part) : ID_MAX;
            memcpy(id, zmq_msg_data(&part), nid);
        } else if (!more) { /* the body is the last frame */
            got = 1;
            rc = wire_decode(zmq_msg_data(&part), zmq_msg_size(&part), m, why, whylen) == 0 ? 1 : -1;
            if (fd) *fd = zmq_msg_get(&part, ZMQ_SRCFD);
        }
        zmq_msg_close(&part);
    }
    if (idlen) *idlen = nid;
    return got ? rc : -1;
}

/* A message that did not decode (a stray client, a fuzzer, a rank of another build) is
 * dropped, and said on stderr in one line: what was wrong and where it came from (rank 0: the
 * connection's address; another rank hears only rank 0). BAD_PER_S lines a second at most;
 * the others are counted into the next line. */
static void bad_flush(dp_link_t *l, double now) {
    unsigned long long n = saylimit_unsaid(&l->bad, now);
    if (n) fprintf(stderr, "trainer: rank %d: %llu more data-parallel messages dropped in the last second(s), not said one by one\n",
                   l->cfg.rank, n);
}

static void bad_frame(dp_link_t *l, int fd, const char *why) {
    double now = progress_now();
    bad_flush(l, now);
    if (!saylimit_take(&l->bad, now, BAD_PER_S)) return;
    char from[320] = "rank 0", addr[96];
    if (l->cfg.rank == 0 && saylimit_peer_addr(fd, addr, sizeof addr) == 0)
        snprintf(from, sizeof from, "%s (to %.200s)", addr, l->bound);
    else if (l->cfg.rank == 0)
        snprintf(from, sizeof from, "a connection to %.200s", l->bound);
    fprintf(stderr, "trainer: rank %d: dropped a data-parallel message from %s: %s\n", l->cfg.rank, from, why);
}

/* ---- creating the socket ------------------------------------------------------------------ */

void dp_link_close(dp_link_t **lp, int orderly, const char *why) {
    dp_link_t *l = lp ? *lp : NULL;
    if (!l) return;
    if (!orderly && why && *why) snprintf(l->farewell, sizeof l->farewell, "it stopped: %.480s", why);
    if (l->thread_up) {
        atomic_store(&l->orderly, orderly);
        atomic_store(&l->quit, 1);
        pthread_join(l->thread, NULL);
    }
    if (l->mon) zmq_close(l->mon);
    if (l->sock) {
        /* the bye or the farewell must get out; a broken run must not wait */
        int linger = orderly || l->farewell[0] || l->refused ? 1000 : 0;
        zmq_setsockopt(l->sock, ZMQ_LINGER, &linger, sizeof linger);
        zmq_close(l->sock);
    }
    pthread_mutex_destroy(&l->mu);
    free(l->flags), free(l->nccl_id), free(l->peers);
    free(l);
    *lp = NULL;
}

int dp_link_create(dp_link_t **out, const dp_link_cfg_t *cfg, const char *endpoint, char *bound, size_t cap,
                   char *err, size_t errlen) {
    *out = NULL;
    dp_link_t *l = calloc(1, sizeof *l);
    if (!l) return err_fail(err, errlen, DP_ENOMEM, "out of memory");
    l->cfg = *cfg;
    snprintf(l->run, sizeof l->run, "%s", cfg->run ? cfg->run : "");
    l->flags = strdup(cfg->flags ? cfg->flags : "");
    l->nccl_id = strdup(cfg->nccl_id ? cfg->nccl_id : "");
    l->peers = calloc(cfg->world > 0 ? cfg->world : 1, sizeof *l->peers);
    l->lost = -1;
    pthread_mutex_init(&l->mu, NULL);
    if (!l->flags || !l->nccl_id || !l->peers) {
        dp_link_close(&l, 0, NULL);
        return err_fail(err, errlen, DP_ENOMEM, "out of memory");
    }
    char why[512];
    int rank0 = cfg->rank == 0;
    l->sock = bus_net_socket(cfg->zctx, rank0 ? ZMQ_ROUTER : ZMQ_DEALER, rank0 ? BUS_PEER_REQUESTS : BUS_PEER_REPLIES,
                             why, sizeof why);
    if (!l->sock) {
        dp_link_close(&l, 0, NULL);
        return err_fail(err, errlen, DP_ESETUP, "rendezvous socket: %s", why);
    }
    if (rank0) {
        if (bus_net_bind(cfg->zctx, l->sock, endpoint, why, sizeof why)) {
            dp_link_close(&l, 0, NULL);
            return err_fail(err, errlen, DP_ESETUP, "rendezvous %s: %s", endpoint, why);
        }
        size_t n = sizeof l->bound;
        zmq_getsockopt(l->sock, ZMQ_LAST_ENDPOINT, l->bound, &n);
        if (bound) bus_net_advertised(l->sock, endpoint, bound, cap); /* a wildcard named by host name */
    }
    *out = l;
    return 0;
}

/* ---- the rendezvous -------------------------------------------------------------------------- */

/* The first word of a that differs from b's word in the same place ("batch=4"), for lines
 * that say which flag two ranks disagree on. */
static void first_difference(const char *a, const char *b, char *wa, char *wb, size_t cap) {
    for (;;) {
        size_t na = strcspn(a, " "), nb = strcspn(b, " ");
        if (na != nb || strncmp(a, b, na)) {
            snprintf(wa, cap, "%.*s", (int)na, a);
            snprintf(wb, cap, "%.*s", (int)nb, b);
            return;
        }
        if (!a[na] || !b[nb]) {
            snprintf(wa, cap, "%s", a[na] ? a + na + 1 : "(end)");
            snprintf(wb, cap, "%s", b[nb] ? b + nb + 1 : "(end)");
            return;
        }
        a += na + 1, b += nb + 1;
    }
}

static void send_welcome(dp_link_t *l, const peer_t *p, int code, const char *message) {
    wire_msg_t w = {.type = MSG_DP_WELCOME};
    w.u.dp_welcome = (msg_dp_welcome_t){.code = code, .message = (char *)message, .world = (uint32_t)l->cfg.world,
                                        .nccl_id = code ? "" : l->nccl_id};
    send_msg(l->sock, p->id, p->idlen, &w, ZMQ_DONTWAIT);
}

/* Rank 0's side: a hello from another run is refused and waited past; anything else that
 * does not fit the group ends the rendezvous for every rank. */
static int rendezvous_rank0(dp_link_t *l, char *err, size_t errlen) {
    const dp_link_cfg_t *c = &l->cfg;
    double deadline = progress_now() + c->timeout_s;
    int joined = 0, rc = 0;
    char fail[1024] = "";
    while (joined < c->world - 1 && !fail[0]) {
        if (c->stop && *c->stop) return err_fail(err, errlen, DP_ESETUP, "interrupted while the ranks met");
        if (progress_now() > deadline) {
            char missing[256] = "";
            for (int r = 1; r < c->world; r++)
                if (!l->peers[r].joined)
                    snprintf(missing + strlen(missing), sizeof missing - strlen(missing), "%s%d", missing[0] ? ", " : "", r);
            return err_fail(err, errlen, DP_ETIMEOUT, "rendezvous: %d of %d ranks joined within %.0f s (missing: %s)",
                            joined + 1, c->world, c->timeout_s, missing);
        }
        zmq_pollitem_t it = {l->sock, 0, ZMQ_POLLIN, 0};
        zmq_poll(&it, 1, 100);
        peer_t p = {0};
        wire_msg_t m;
        char bad[256];
        int got = recv_msg(l->sock, 1, p.id, &p.idlen, &p.fd, &m, bad, sizeof bad);
        if (got < 0) bad_frame(l, p.fd, bad);
        if (got <= 0) continue;
        if (m.type != MSG_DP_HELLO) { /* a late beat or a stray peer: not part of the meeting */
            wire_msg_free(&m);
            continue;
        }
        const msg_dp_hello_t *h = &m.u.dp_hello;
        char why[768] = "", wa[128], wb[128];
        if (strcmp(h->run, l->run)) {
            snprintf(why, sizeof why, "rank %u of run '%s' came to run '%s''s rendezvous", h->rank, h->run, l->run);
            send_welcome(l, &p, DP_ESETUP, why);
            wire_msg_free(&m);
            continue; /* not ours: the group is still forming */
        }
        if (h->world != (uint32_t)c->world)
            snprintf(why, sizeof why, "rank %u (%s, pid %llu) has --world %u, rank 0 has %d", h->rank, h->host ? h->host : "?",
                     (unsigned long long)h->pid, h->world, c->world);
        else if (h->rank == 0 || h->rank >= (uint32_t)c->world)
            snprintf(why, sizeof why, "a rank %u (%s, pid %llu) in a world of %d", h->rank, h->host ? h->host : "?",
                     (unsigned long long)h->pid, c->world);
        else if (l->peers[h->rank].joined)
            snprintf(why, sizeof why, "rank %u joined twice (%s pid %lld, then %s pid %llu): two processes were given --rank %u",
                     h->rank, l->peers[h->rank].host, l->peers[h->rank].pid, h->host ? h->host : "?",
                     (unsigned long long)h->pid, h->rank);
        else if (strcmp(h->flags ? h->flags : "", l->flags)) {
            first_difference(h->flags ? h->flags : "", l->flags, wa, wb, sizeof wa);
            snprintf(why, sizeof why, "rank %u (%s) has other flags than rank 0: %s, rank 0 has %s", h->rank,
                     h->host ? h->host : "?", wa, wb);
        }
        if (why[0]) {
            send_welcome(l, &p, DP_ESETUP, why);
            snprintf(fail, sizeof fail, "%s", why);
        } else {
            peer_t *q = &l->peers[h->rank];
            *q = p;
            q->joined = 1;
            q->seen = progress_now();
            snprintf(q->host, sizeof q->host, "%s", h->host ? h->host : "?");
            q->pid = (long long)h->pid;
            joined++;
        }
        wire_msg_free(&m);
    }
    for (int r = 1; r < c->world; r++)
        if (l->peers[r].joined) send_welcome(l, &l->peers[r], fail[0] ? DP_ESETUP : 0, fail[0] ? fail : "");
    if (fail[0]) {
        l->refused = 1;
        rc = err_fail(err, errlen, DP_ESETUP, "rendezvous refused: %s", fail);
    }
    return rc;
}

static int rendezvous_rank(dp_link_t *l, const char *endpoint, char *nccl_id, size_t cap, char *err, size_t errlen) {
    const dp_link_cfg_t *c = &l->cfg;
    char why[512], host[128] = "?";
    if (bus_net_connect(l->sock, endpoint, why, sizeof why))
        return err_fail(err, errlen, DP_ESETUP, "rendezvous %s: %s", endpoint, why);
    gethostname(host, sizeof host - 1);
    wire_msg_t m = {.type = MSG_DP_HELLO};
    snprintf(m.u.dp_hello.run, sizeof m.u.dp_hello.run, "%s", l->run);
    m.u.dp_hello.rank = (uint32_t)c->rank, m.u.dp_hello.world = (uint32_t)c->world;
    m.u.dp_hello.pid = (uint64_t)getpid(), m.u.dp_hello.host = host, m.u.dp_hello.flags = l->flags;
    if (send_msg(l->sock, NULL, 0, &m, 0))
        return err_fail(err, errlen, DP_ESETUP, "rendezvous %s: cannot send hello (%s)", endpoint, zmq_strerror(zmq_errno()));
    double deadline = progress_now() + c->timeout_s;
    for (;;) {
        if (c->stop && *c->stop) return err_fail(err, errlen, DP_ESETUP, "interrupted while the ranks met");
        if (progress_now() > deadline)
            return err_fail(err, errlen, DP_ETIMEOUT, "rendezvous %s: no welcome from rank 0 within %.0f s", endpoint,
                            c->timeout_s);
        zmq_pollitem_t it = {l->sock, 0, ZMQ_POLLIN, 0};
        zmq_poll(&it, 1, 100);
        wire_msg_t w;
        char why[256];
        int got = recv_msg(l->sock, 0, NULL, NULL, NULL, &w, why, sizeof why);
        if (got < 0) bad_frame(l, -1, why);
        if (got <= 0) continue;
        if (w.type != MSG_DP_WELCOME) {
            wire_msg_free(&w);
            continue;
        }
        int rc = 0;
        if (w.u.dp_welcome.code)
            rc = err_fail(err, errlen, DP_ESETUP, "rank 0 refused rank %d: %s", c->rank,
                          w.u.dp_welcome.message ? w.u.dp_welcome.message : "?");
        else if (w.u.dp_welcome.world != (uint32_t)c->world)
            rc = err_fail(err, errlen, DP_ESETUP, "rank 0 has a world of %u, this rank %d", w.u.dp_welcome.world, c->world);
        else if (nccl_id)
            snprintf(nccl_id, cap, "%s", w.u.dp_welcome.nccl_id ? w.u.dp_welcome.nccl_id : "");
        wire_msg_free(&w);
        l->peers[0].seen = progress_now();
        return rc;
    }
}

/* ---- the heartbeat ----------------------------------------------------------------------------- */

static void set_lost(dp_link_t *l, int rank, const char *why) {
    pthread_mutex_lock(&l->mu);
    if (l->lost < 0) {
        l->lost = rank;
        snprintf(l->why, sizeof l->why, "%.500s", why);
    }
    pthread_mutex_unlock(&l->mu);
}

int dp_link_lost(dp_link_t *l, char *why, size_t cap) {
    if (!l) return -1;
    pthread_mutex_lock(&l->mu);
    int r = l->lost;
    if (r >= 0 && why) snprintf(why, cap, "%s", l->why);
    pthread_mutex_unlock(&l->mu);
    return r;
}

double dp_link_silence(dp_link_t *l, int r) {
    if (!l || r < 0 || r >= l->cfg.world || (l->cfg.rank != 0 && r != 0)) return -1;
    pthread_mutex_lock(&l->mu);
    double seen = l->peers[r].seen;
    pthread_mutex_unlock(&l->mu);
    return seen > 0 ? progress_now() - seen : -1;
}

void dp_link_set_step(dp_link_t *l, long long step) {
    if (l) atomic_store(&l->step, step);
}

/* bye: the last beat of an orderly end; otherwise the verdict so far, or this rank's own
 * farewell when it leaves alone. */
static void send_beat(dp_link_t *l, const peer_t *to, int bye) {
    wire_msg_t b = {.type = MSG_DP_BEAT};
    pthread_mutex_lock(&l->mu);
    char why[512];
    snprintf(why, sizeof why, "%s", l->why);
    int lost = l->lost;
    pthread_mutex_unlock(&l->mu);
    if (atomic_load(&l->quit) && l->farewell[0]) {
        lost = l->cfg.rank;
        snprintf(why, sizeof why, "%s", l->farewell);
    }
    b.u.dp_beat = (msg_dp_beat_t){.rank = (uint32_t)l->cfg.rank, .step = (uint64_t)atomic_load(&l->step),
                                  .lost = lost, .why = why, .bye = (uint32_t)bye};
    send_msg(l->sock, to ? to->id : NULL, to ? to->idlen : 0, &b, ZMQ_DONTWAIT);
}

/* Everything that arrived on the rendezvous socket. */
static void read_beats(dp_link_t *l) {
    const int rank0 = l->cfg.rank == 0;
    bad_flush(l, progress_now());
    for (;;) {
        unsigned char id[ID_MAX];
        size_t idlen = 0;
        int fd = -1;
        wire_msg_t m;
        char why[256];
        int got = recv_msg(l->sock, rank0, id, &idlen, &fd, &m, why, sizeof why);
        if (got == 0) return;
        if (got < 0) {
            bad_frame(l, fd, why);
            continue;
        }
        if (m.type == MSG_DP_BEAT) {
            const msg_dp_beat_t *b = &m.u.dp_beat;
            if (rank0 && b->rank > 0 && b->rank < (uint32_t)l->cfg.world && l->peers[b->rank].joined &&
                l->peers[b->rank].idlen == idlen && !memcmp(l->peers[b->rank].id, id, idlen)) {
                pthread_mutex_lock(&l->mu);
                peer_t *p = &l->peers[b->rank];
                p->seen = progress_now(), p->fd = fd, p->bye |= b->bye != 0;
                pthread_mutex_unlock(&l->mu);
                if (b->lost == (int32_t)b->rank) set_lost(l, (int)b->rank, b->why ? b->why : "it stopped");
            } else if (!rank0 && b->rank == 0) {
                pthread_mutex_lock(&l->mu);
                l->peers[0].seen = progress_now();
                l->peers[0].bye |= b->bye != 0;
                pthread_mutex_unlock(&l->mu);
                if (b->lost >= 0) set_lost(l, b->lost, b->why ? b->why : "?"); /* rank 0's verdict, as it found it */
            }
        }
        wire_msg_free(&m);
    }
}

/* The socket monitor: a closed connection of a rank that did not say bye. */
static void read_events(dp_link_t *l) {
    for (;;) {
        zmq_msg_t a, b;
        zmq_msg_init(&a);
        zmq_msg_init(&b);
        if (zmq_msg_recv(&a, l->mon, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&a), zmq_msg_close(&b);
            return;
        }
        zmq_msg_recv(&b, l->mon, 0); /* the endpoint frame */
        uint16_t event = 0;
        uint32_t value = 0;
        if (zmq_msg_size(&a) >= 6) {
            memcpy(&event, zmq_msg_data(&a), 2);
            memcpy(&value, (char *)zmq_msg_data(&a) + 2, 4);
        }
        zmq_msg_close(&a), zmq_msg_close(&b);
        if (bus_net_refusal(event, value, l->bound)) continue; /* a refused client: logged */
        if (event != ZMQ_EVENT_DISCONNECTED) continue;
        const double now = progress_now();
        if (l->cfg.rank != 0) {
            if (!l->peers[0].closed_at) l->peers[0].closed_at = now;
            continue;
        }
        for (int r = 1; r < l->cfg.world; r++)
            if (l->peers[r].joined && l->peers[r].fd == (int)value && !l->peers[r].closed_at) l->peers[r].closed_at = now;
    }
}

/* Closed connections whose bye did not follow within CLOSE_GRACE_S. */
static void check_closed(dp_link_t *l, double now) {
    const int rank0 = l->cfg.rank == 0;
    for (int r = rank0 ? 1 : 0; r < (rank0 ? l->cfg.world : 1); r++) {
        const peer_t *p = &l->peers[r];
        if (p->closed_at && !p->bye && now - p->closed_at > CLOSE_GRACE_S)
            set_lost(l, r, "its connection closed (the process ended)");
    }
}

static void check_silence(dp_link_t *l, double now) {
    const int rank0 = l->cfg.rank == 0;
    for (int r = rank0 ? 1 : 0; r < (rank0 ? l->cfg.world : 1); r++) {
        const peer_t *p = &l->peers[r];
        if ((rank0 && !p->joined) || p->bye || now - p->seen <= l->cfg.lost_after_s) continue;
        char why[160];
        snprintf(why, sizeof why, "silent for %.1f s (--dp-lost-after %g)", now - p->seen, l->cfg.lost_after_s);
        set_lost(l, r, why);
    }
}

static void *heartbeat(void *arg) {
    dp_link_t *l = arg;
    const int rank0 = l->cfg.rank == 0;
    const double ivl = beat_interval(l);
    double next = 0;
    int told = -1; /* rank 0: the verdict already sent at once */
    while (!atomic_load(&l->quit)) {
        double now = progress_now();
        if (now >= next) {
            if (rank0) {
                for (int r = 1; r < l->cfg.world; r++)
                    if (l->peers[r].joined && !l->peers[r].bye) send_beat(l, &l->peers[r], 0);
            } else {
                send_beat(l, NULL, 0);
            }
            check_silence(l, now);
            next = now + ivl;
        }
        zmq_pollitem_t it[2] = {{l->sock, 0, ZMQ_POLLIN, 0}, {l->mon, 0, ZMQ_POLLIN, 0}};
        long wait_ms = (long)((next - now) * 1000) + 1;
        zmq_poll(it, l->mon ? 2 : 1, wait_ms < 1 ? 1 : wait_ms > 100 ? 100 : wait_ms);
        read_beats(l);
        if (l->mon) read_events(l);
        check_closed(l, progress_now());
        int lost = dp_link_lost(l, NULL, 0);
        if (rank0 && lost >= 0 && told < 0) { /* tell everyone now, not at the next beat */
            told = lost;
            next = 0;
        }
    }
    int orderly = atomic_load(&l->orderly);
    if (orderly || l->farewell[0]) {
        if (rank0) {
            for (int r = 1; r < l->cfg.world; r++)
                if (l->peers[r].joined) send_beat(l, &l->peers[r], orderly);
        } else {
            send_beat(l, NULL, orderly);
        }
    }
    return NULL;
}

int dp_link_join(dp_link_t *l, const char *endpoint, char *nccl_id, size_t cap, char *err, size_t errlen) {
    int rc = l->cfg.rank == 0 ? rendezvous_rank0(l, err, errlen) : rendezvous_rank(l, endpoint, nccl_id, cap, err, errlen);
    if (rc) return rc;
    if (l->cfg.rank == 0 && nccl_id) snprintf(nccl_id, cap, "%s", l->nccl_id);
    snprintf(l->mon_ep, sizeof l->mon_ep, "inproc://dp-link-monitor-%p", (void *)l);
    /* on rank 0 this replaces the monitor bus_net_bind gave a CURVE server: refusals too */
    if (zmq_socket_monitor(l->sock, l->mon_ep, ZMQ_EVENT_DISCONNECTED | BUS_NET_REFUSAL_EVENTS) == 0 &&
        (l->mon = zmq_socket(l->cfg.zctx, ZMQ_PAIR)) && zmq_connect(l->mon, l->mon_ep)) {
        zmq_close(l->mon);
        l->mon = NULL; /* no monitor: losses are found by silence alone */
    }
    double t = progress_now();
    for (int r = 0; r < l->cfg.world; r++) l->peers[r].seen = t;
    if (pthread_create(&l->thread, NULL, heartbeat, l))
        return err_fail(err, errlen, DP_ESETUP, "cannot start the heartbeat thread");
    l->thread_up = 1;
    return 0;
}
