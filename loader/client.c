/* loader/client.c: in-order batch delivery over many loaders (loader/client.h).
 *
 * Batches are numbered g = epoch * steps_per_epoch + step. Slot g % window holds request g
 * from the time it is issued until its batch is delivered; request g may be issued once
 * next_g <= g < next_g + window. A reply is accepted only for a slot still waiting for exactly
 * that (epoch, step) under our configuration, so duplicates and stale replies fall out.
 *
 * A send can be refused locally (ZMQ_IMMEDIATE: the loader is not connected, yet or any more).
 * Such a request was never sent, so it is tried again on the next pass instead of waiting out
 * a time-out: a client opened a moment before its connection is up must not lose timeout_ms. */
#include "common/errmsg.h"
#include "loader/client.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "bus/net.h"
#include "common/progress.h"
#include "common/saylimit.h"
#include "loader/batch.h"

#define INFO_REQ_BIT (1ull << 63) /* req_id of info requests, told apart from batch ones */
#define BAD_PER_S 10              /* lines a second about bad replies; the rest are counted */

enum { PEER_UNKNOWN = 0, PEER_OK = 1, PEER_FOREIGN = -1 }; /* what its info reply showed */

typedef struct {
    char *ep;
    void *sock;
    int inflight;
    double dead_until; /* treated as down until then (after a time-out or a refused send) */
    int state;         /* PEER_*: only PEER_OK loaders are sent batch requests */
    int info_out;      /* an info_req went out at info_sent and is unanswered */
    double info_sent;
    double rtt, rtt_at; /* its round trip (s, a moving average; 0: not measured) and when measured */
    int silent;        /* a request to it timed out, and nothing came from it since */
    int said;          /* that silence was reported (cfg.notice), so its end will be too */
    double silent_at;  /* when the request that timed out was sent */
    double back_at;    /* when it last answered after a silence */
} peer_t;

typedef struct {
    int used, have;
    int unsent;        /* no loader took the latest attempt: try again on the next pass */
    uint64_t g;
    int peer;          /* where the latest copy of the request went; -1: not sent yet */
    double sent_at;
    msg_batch_t b;
} slot_t;

struct loader_client {
    void *zctx;
    loader_client_cfg_t cfg;
    peer_t *peers;
    int npeers, peers_cap;
    slot_t *slots;
    uint64_t spe;             /* steps per epoch; 0 until the info reply */
    uint64_t next_g, issue_g; /* next to deliver, next to issue */
    uint64_t req_seq;
    int started;              /* the cursor has been placed (needs spe) */
    double last_answer;       /* any reply from any loader */
    loader_identity_t expect; /* the dataset accepted */
    int have_expect;          /* from cfg, or from the first info reply */
    uint64_t sent, reissued, dropped;
    /* bad replies (malformed, or answering nothing we asked): one line each through
     * cfg.notice, BAD_PER_S a second; the others are counted */
    saylimit_t bad;
    char why[512];            /* why the last endpoint could not be added */
};

void loader_identity_from_info(loader_identity_t *id, const msg_info_t *in) {
    memset(id, 0, sizeof *id);
    id->vocab_size = in->vocab_size;
    id->eot_id = in->eot_id;
    id->n_docs = in->n_docs;
    id->n_tokens = in->n_tokens;
    id->n_bytes = in->n_bytes;
    snprintf(id->tokenizer, sizeof id->tokenizer, "%s", in->tokenizer ? in->tokenizer : "");
    snprintf(id->tokenizer_hash, sizeof id->tokenizer_hash, "%s", in->tokenizer_hash ? in->tokenizer_hash : "");
    snprintf(id->dataset, sizeof id->dataset, "%s", in->dataset ? in->dataset : "");
}

int loader_identity_same(const loader_identity_t *a, const loader_identity_t *b) {
    return a->vocab_size == b->vocab_size && a->eot_id == b->eot_id && a->n_docs == b->n_docs &&
           a->n_tokens == b->n_tokens && a->n_bytes == b->n_bytes && !strcmp(a->tokenizer, b->tokenizer) &&
           !strcmp(a->tokenizer_hash, b->tokenizer_hash);
}

void loader_identity_describe(const loader_identity_t *id, char *buf, size_t cap) {
    snprintf(buf, cap, "%s (tokenizer %s %s, %llu docs, %llu tokens, %llu bytes)", id->dataset[0] ? id->dataset : "?",
             id->tokenizer, id->tokenizer_hash, (unsigned long long)id->n_docs, (unsigned long long)id->n_tokens,
             (unsigned long long)id->n_bytes);
}

static void notice(loader_client_t *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void notice(loader_client_t *c, const char *fmt, ...) {
    if (!c->cfg.notice) return;
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    c->cfg.notice(c->cfg.hook_arg, line);
}

/* Says the count of bad replies not said one by one, once their second is over. */
static void bad_flush(loader_client_t *c, double now) {
    unsigned long long n = saylimit_unsaid(&c->bad, now);
    if (n) notice(c, "%llu more bad replies from loaders in the last second(s), not said one by one", n);
}

/* A reply from loader p dropped for what it is (not for coming late or twice, which re-issued
 * requests make normal): counted, and said in one line, what was wrong and from which loader. */
static void bad_reply(loader_client_t *c, const peer_t *p, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void bad_reply(loader_client_t *c, const peer_t *p, const char *fmt, ...) {
    c->dropped++;
    double now = progress_now();
    bad_flush(c, now);
    if (!saylimit_take(&c->bad, now, BAD_PER_S)) return;
    char line[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    notice(c, "dropped a reply from loader %s: %s", p->ep, line);
}

void loader_batch_release(msg_batch_t *b) {
    if (!b) return;
    wire_msg_t m;
    memset(&m, 0, sizeof m);
    m.type = MSG_BATCH;
    m.u.batch = *b;
    wire_msg_free(&m);
    memset(b, 0, sizeof *b);
}

int loader_client_add_endpoint(loader_client_t *c, const char *ep) {
    if (!c || !ep || !*ep) return LOADER_EPARAM;
    for (int i = 0; i < c->npeers; i++)
        if (!strcmp(c->peers[i].ep, ep)) return LOADER_OK;
    if (c->npeers == c->peers_cap) {
        int cap = c->peers_cap ? 2 * c->peers_cap : 4;
        peer_t *np = realloc(c->peers, cap * sizeof *np);
        if (!np) return LOADER_ENOMEM;
        c->peers = np;
        c->peers_cap = cap;
    }
    peer_t *p = &c->peers[c->npeers];
    memset(p, 0, sizeof *p);
    p->ep = strdup(ep);
    p->sock = bus_net_socket(c->zctx, ZMQ_DEALER, BUS_PEER_REPLIES, c->why, sizeof c->why);
    if (!p->ep || !p->sock) {
        free(p->ep);
        if (p->sock) zmq_close(p->sock);
        return p->ep ? LOADER_EIO : LOADER_ENOMEM;
    }
    /* IMMEDIATE: a send to a loader we are not connected to fails at once (EAGAIN) instead of
     * queueing for a peer that may never come back; reconnects happen by themselves.
     * MAXMSGSIZE: no reply we wait for is larger than a batch of our geometry (tokens, mask
     * and the map around them), so a loader cannot make us hold more than that. */
    int one = 1, ivl = 100;
    int64_t max = (int64_t)c->cfg.B * ((int64_t)c->cfg.T + 1) * 4 + (int64_t)c->cfg.B * c->cfg.T + (64 << 10);
    zmq_setsockopt(p->sock, ZMQ_IMMEDIATE, &one, sizeof one);
    zmq_setsockopt(p->sock, ZMQ_RECONNECT_IVL, &ivl, sizeof ivl);
    zmq_setsockopt(p->sock, ZMQ_MAXMSGSIZE, &max, sizeof max);
    if (bus_net_connect(p->sock, ep, c->why, sizeof c->why) != 0) {
        zmq_close(p->sock);
        free(p->ep);
        return LOADER_EIO;
    }
    c->npeers++;
    return LOADER_OK;
}

int loader_client_open(loader_client_t **out, void *zctx, const char *const *endpoints, int n,
                       const loader_client_cfg_t *cfg, char *err, size_t errlen) {
    if (!out || !zctx || !cfg || n < 0) return LOADER_EPARAM;
    *out = NULL;
    loader_client_t *c = calloc(1, sizeof *c);
    if (!c) return LOADER_ENOMEM;
    c->zctx = zctx;
    c->cfg = *cfg;
    if (!c->cfg.window) c->cfg.window = 8;
    if (c->cfg.timeout_ms <= 0) c->cfg.timeout_ms = 2000;
    if (c->cfg.give_up_ms <= 0) c->cfg.give_up_ms = 60000;
    if (cfg->expect) {
        c->expect = *cfg->expect;
        c->have_expect = 1;
    }
    c->cfg.expect = NULL; /* copied: the caller's may go away */
    c->slots = calloc(c->cfg.window, sizeof *c->slots);
    if (!c->slots) {
        free(c);
        return LOADER_ENOMEM;
    }
    for (int i = 0; i < n; i++) {
        int rc = loader_client_add_endpoint(c, endpoints[i]);
        if (rc) {
            err_fail(err, errlen, 0, "loader endpoint %s: %s", endpoints[i],
                   rc == LOADER_EIO ? c->why : loader_strerror(rc));
            loader_client_close(&c);
            return rc;
        }
    }
    c->last_answer = progress_now();
    *out = c;
    return LOADER_OK;
}

void loader_client_close(loader_client_t **pc) {
    if (!pc || !*pc) return;
    loader_client_t *c = *pc;
    for (int i = 0; i < c->npeers; i++) {
        zmq_close(c->peers[i].sock);
        free(c->peers[i].ep);
    }
    for (uint32_t i = 0; c->slots && i < c->cfg.window; i++) loader_batch_release(&c->slots[i].b);
    free(c->peers);
    free(c->slots);
    free(c);
    *pc = NULL;
}

void loader_client_cursor(const loader_client_t *c, uint64_t *epoch, uint64_t *step) {
    if (!c->spe) {
        *epoch = c->cfg.start_epoch;
        *step = c->cfg.start_step;
        return;
    }
    *epoch = c->next_g / c->spe;
    *step = c->next_g % c->spe;
}

uint64_t loader_client_steps_per_epoch(const loader_client_t *c) { return c->spe; }

void loader_client_stats(const loader_client_t *c, uint64_t *sent, uint64_t *reissued, uint64_t *dropped) {
    if (sent) *sent = c->sent;
    if (reissued) *reissued = c->reissued;
    if (dropped) *dropped = c->dropped;
}

/* Sends [empty][body]; -1 when the loader is not connected (IMMEDIATE) or the pipe is full. */
static int peer_send(peer_t *p, const void *body, size_t len) {
    if (zmq_send(p->sock, "", 0, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0) return -1;
    /* The second part of a multipart cannot fail with EAGAIN once the first went. */
    if (zmq_send(p->sock, body, len, ZMQ_DONTWAIT) < 0) return -1;
    return 0;
}

/* A round trip measured for p (a reply to what was sent to it, or a time-out): folded into its
 * moving average. */
static double peer_rtt(const peer_t *p, double now);
static void rtt_sample(peer_t *p, double sample, double now) {
    double was = peer_rtt(p, now); /* the decayed value: a loader back from slow converges fast */
    p->rtt = was > 0 ? 0.7 * was + 0.3 * sample : sample;
    p->rtt_at = now;
}

/* p's round trip as the picker sees it: the average halves every RTT_HALF_LIFE_S it goes
 * unmeasured, so a loader that was slow (a slow link, or a cut one that timed out) is tried
 * again now and then and taken back when it has become fast. */
#define RTT_HALF_LIFE_S 2.0
static double peer_rtt(const peer_t *p, double now) {
    return p->rtt > 0 ? p->rtt * exp2(-(now - p->rtt_at) / RTT_HALF_LIFE_S) : 0;
}

/* The live loader of our dataset that should answer first: the fewest requests in flight, each
 * weighted by the loader's round trip (peer_rtt; an unmeasured loader counts as instant), so a
 * loader behind a slow link gets a request only when the fast ones are that much busier, and
 * the trainer's pace follows the fast ones. `avoid` is passed over when another exists; when
 * all look down, the one whose down time ends first. -1 when there is no loader of our dataset. */
static int peer_pick(loader_client_t *c, int avoid, double now) {
    int best = -1;
    double best_cost = 0;
    for (int pass = 0; pass < 2 && best < 0; pass++)
        for (int i = 0; i < c->npeers; i++) {
            peer_t *p = &c->peers[i];
            if (p->state != PEER_OK || p->dead_until > now || (pass == 0 && i == avoid)) continue;
            double cost = (p->inflight + 1) * peer_rtt(p, now);
            if (best < 0 || cost < best_cost || (cost == best_cost && p->inflight < c->peers[best].inflight))
                best = i, best_cost = cost;
        }
    if (best < 0)
        for (int i = 0; i < c->npeers; i++)
            if (c->peers[i].state == PEER_OK && (best < 0 || c->peers[i].dead_until < c->peers[best].dead_until))
                best = i;
    return best;
}

static int slot_send(loader_client_t *c, slot_t *s, double now) {
    wire_msg_t m;
    memset(&m, 0, sizeof m);
    m.type = MSG_BATCH_REQ;
    msg_batch_req_t *q = &m.u.batch_req;
    q->req_id = ++c->req_seq;
    q->seed = c->cfg.seed;
    q->epoch = s->g / c->spe;
    q->step = s->g % c->spe;
    q->rank = c->cfg.rank;
    q->world = c->cfg.world;
    q->B = c->cfg.B;
    q->T = c->cfg.T;
    q->layout = c->cfg.layout;
    q->split = c->cfg.split;
    void *buf = NULL;
    size_t len = 0;
    if (wire_encode(&m, &buf, &len) != WIRE_OK) return LOADER_ENOMEM;
    int avoid = s->peer, ok = 0;
    for (int tries = 0; tries < c->npeers && !ok; tries++) {
        int i = peer_pick(c, avoid, now);
        if (i < 0) break;
        if (peer_send(&c->peers[i], buf, len) == 0) {
            if (s->peer >= 0 && c->peers[s->peer].inflight > 0) c->peers[s->peer].inflight--;
            s->peer = i;
            c->peers[i].inflight++;
            ok = 1;
        } else {
            c->peers[i].dead_until = now + c->cfg.timeout_ms / 1000.0;
            avoid = i;
        }
    }
    free(buf);
    s->sent_at = now;
    s->unsent = !ok;
    if (ok) c->sent++;
    return LOADER_OK;
}

static void issue(loader_client_t *c, double now) {
    while (c->issue_g < c->next_g + c->cfg.window) {
        slot_t *s = &c->slots[c->issue_g % c->cfg.window];
        memset(s, 0, sizeof *s);
        s->used = 1;
        s->g = c->issue_g++;
        s->peer = -1;
        slot_send(c, s, now);
    }
}

/* Asks every loader whose dataset is not known yet: again after timeout_ms when one went out
 * unanswered, on the next pass when the send was refused (not connected yet). */
static void send_info(loader_client_t *c, double now) {
    void *buf = NULL;
    size_t len = 0;
    for (int i = 0; i < c->npeers; i++) {
        peer_t *p = &c->peers[i];
        if (p->state != PEER_UNKNOWN || (p->info_out && (now - p->info_sent) * 1000 < c->cfg.timeout_ms)) continue;
        if (!buf) {
            wire_msg_t m;
            memset(&m, 0, sizeof m);
            m.type = MSG_INFO_REQ;
            m.u.info_req = (msg_info_req_t){.req_id = INFO_REQ_BIT | ++c->req_seq, .world = c->cfg.world,
                                            .B = c->cfg.B, .T = c->cfg.T, .layout = c->cfg.layout,
                                            .split = c->cfg.split};
            if (wire_encode(&m, &buf, &len) != WIRE_OK) return;
        }
        p->info_out = peer_send(p, buf, len) == 0;
        p->info_sent = now;
    }
    free(buf);
}

/* An info reply from peer p: its dataset decides whether it is used. */
static int on_info(loader_client_t *c, peer_t *p, const msg_info_t *in, char *err, size_t errlen) {
    if (p->state != PEER_UNKNOWN) return LOADER_OK; /* an answer to a repeated info_req */
    p->info_out = 0;
    loader_identity_t id;
    loader_identity_from_info(&id, in);
    if (!c->have_expect) {
        c->expect = id;
        c->have_expect = 1;
    }
    if (!loader_identity_same(&id, &c->expect) || (c->spe && in->steps_per_epoch != c->spe)) {
        char got[512], want[512];
        loader_identity_describe(&id, got, sizeof got);
        loader_identity_describe(&c->expect, want, sizeof want);
        p->state = PEER_FOREIGN;
        notice(c, "loader %s serves %s, not %s: not used", p->ep, got, want);
        return LOADER_OK;
    }
    if (!c->spe) {
        if (in->steps_per_epoch == 0)
            return err_fail(err, errlen, LOADER_EEMPTY, "loader %s: the split holds no batch for this B/T/world", p->ep);
        c->spe = in->steps_per_epoch;
    }
    p->state = PEER_OK;
    return LOADER_OK;
}

static int same_config(const loader_client_t *c, const msg_batch_t *b) {
    return b->seed == c->cfg.seed && b->rank == c->cfg.rank && b->world == c->cfg.world && b->B == c->cfg.B &&
           b->T == c->cfg.T && b->layout == c->cfg.layout && b->split == c->cfg.split &&
           b->steps_per_epoch == c->spe && b->step < c->spe;
}

/* A loader whose request timed out (sent at sent_at) is reported silent once, and back at its
 * next reply. A link slower than timeout_ms would report both every few seconds for the whole
 * run, so a silence that starts within 5 x timeout_ms of the loader's last return is reported
 * only once it has lasted 5 x timeout_ms (a loader killed right after a short stall is still
 * named). */
static void peer_silent(loader_client_t *c, peer_t *p, double sent_at, double now) {
    const double grace = 5.0 * c->cfg.timeout_ms / 1000.0;
    if (!p->silent) {
        p->silent = 1, p->said = 0;
        p->silent_at = sent_at;
        if (p->back_at > 0 && now - p->back_at < grace) return;
    } else if (p->said || now - p->silent_at < grace) {
        return;
    }
    p->said = 1;
    notice(c, "loader %s has not answered for %.1f s: its requests go out again", p->ep, now - p->silent_at);
}

static void peer_heard(loader_client_t *c, peer_t *p, double now) {
    if (!p->silent) return;
    if (p->said) notice(c, "loader %s answers again", p->ep);
    p->silent = p->said = 0;
    p->back_at = now;
}

/* Handles one reply from peer i. Returns a LOADER_E* status for a fatal error reply. */
static int on_reply(loader_client_t *c, int i, const void *body, size_t len, double now, char *err, size_t errlen) {
    wire_msg_t m;
    char why[256];
    if (wire_decode(body, len, &m, why, sizeof why) != WIRE_OK) {
        bad_reply(c, &c->peers[i], "%s", why);
        return LOADER_OK;
    }
    int rc = LOADER_OK;
    peer_t *p = &c->peers[i];
    c->last_answer = now;
    p->dead_until = 0;
    peer_heard(c, p, now);
    if (m.type == MSG_INFO && p->info_out) rtt_sample(p, now - p->info_sent, now);
    if (m.type == MSG_INFO) {
        rc = on_info(c, p, &m.u.info, err, errlen);
    } else if (m.type == MSG_BATCH && c->spe && p->state == PEER_OK && same_config(c, &m.u.batch)) {
        uint64_t g = m.u.batch.epoch * c->spe + m.u.batch.step;
        slot_t *s = &c->slots[g % c->cfg.window];
        if (g >= c->next_g && g < c->issue_g && s->used && s->g == g && !s->have) {
            s->have = 1;
            s->b = m.u.batch;
            memset(&m, 0, sizeof m); /* ownership moved to the slot */
            if (s->peer == i) rtt_sample(p, now - s->sent_at, now);
            if (s->peer >= 0 && c->peers[s->peer].inflight > 0) c->peers[s->peer].inflight--;
        } else {
            c->dropped++;
        }
    } else if (m.type == MSG_ERROR && (m.u.error.req_id & INFO_REQ_BIT) && c->spe) {
        /* a loader added later that cannot serve what the first one serves: other data */
        if (p->state == PEER_UNKNOWN) {
            p->state = PEER_FOREIGN;
            notice(c, "loader %s refused our info_req (error %d: %s): not used", p->ep, m.u.error.code,
                   m.u.error.message ? m.u.error.message : "");
        }
    } else if (m.type == MSG_ERROR) {
        /* A loader refusing our request means the configuration does not fit its dataset:
         * asking another loader would give the same answer. */
        err_fail(err, errlen, 0, "loader %s: error %d: %s", p->ep, m.u.error.code,
               m.u.error.message ? m.u.error.message : "");
        rc = m.u.error.code < 0 ? m.u.error.code : LOADER_EPARAM;
    } else if (m.type == MSG_BATCH) { /* we asked it for nothing of the kind */
        const msg_batch_t *b = &m.u.batch;
        if (!c->spe || p->state != PEER_OK)
            bad_reply(c, p, "a batch before we accepted its info reply (req_id %llu)", (unsigned long long)b->req_id);
        else
            bad_reply(c, p, "a batch for a request not ours (req_id %llu: seed %llu, rank %u/%u, B %u, T %u, layout %u, split %u, "
                      "step %llu of %llu; we ask seed %llu, rank %u/%u, B %u, T %u, layout %u, split %u, %llu steps)",
                      (unsigned long long)b->req_id, (unsigned long long)b->seed, b->rank, b->world, b->B, b->T,
                      b->layout, b->split, (unsigned long long)b->step, (unsigned long long)b->steps_per_epoch,
                      (unsigned long long)c->cfg.seed, c->cfg.rank, c->cfg.world, c->cfg.B, c->cfg.T, c->cfg.layout,
                      c->cfg.split, (unsigned long long)c->spe);
    } else {
        bad_reply(c, p, "a %s message, which is no reply of a loader", wire_type_name(m.type));
    }
    wire_msg_free(&m);
    return rc;
}

/* Waits up to ms for replies and handles all that came. */
static int pump(loader_client_t *c, int ms, char *err, size_t errlen) {
    zmq_pollitem_t items[64];
    int n = c->npeers < 64 ? c->npeers : 64;
    for (int i = 0; i < n; i++) items[i] = (zmq_pollitem_t){c->peers[i].sock, 0, ZMQ_POLLIN, 0};
    int r = zmq_poll(items, n, ms);
    if (r < 0) return zmq_errno() == EINTR ? LOADER_OK : LOADER_EIO;
    double now = progress_now();
    bad_flush(c, now);
    for (int i = 0; i < n; i++) {
        if (!(items[i].revents & ZMQ_POLLIN)) continue;
        for (;;) {
            zmq_msg_t f[2];
            int nf = 0, more = 1, bad = 0;
            while (more) {
                zmq_msg_t tmp, *fr = nf < 2 ? &f[nf] : &tmp;
                zmq_msg_init(fr);
                if (zmq_msg_recv(fr, c->peers[i].sock, ZMQ_DONTWAIT) < 0) {
                    zmq_msg_close(fr);
                    bad = -1;
                    break;
                }
                more = zmq_msg_more(fr);
                if (fr == &tmp) { zmq_msg_close(fr); bad = 1; }
                else nf++;
            }
            int rc = LOADER_OK;
            if (bad == 0 && nf == 2 && zmq_msg_size(&f[0]) == 0)
                rc = on_reply(c, i, zmq_msg_data(&f[1]), zmq_msg_size(&f[1]), now, err, errlen);
            else if (bad > 0)
                bad_reply(c, &c->peers[i], "more than 2 frames (a reply is an empty frame and the body)");
            else if (bad == 0)
                bad_reply(c, &c->peers[i], "%d frame%s%s (a reply is an empty frame and the body)", nf,
                          nf == 1 ? "" : "s", nf == 2 ? ", the first not empty" : "");
            for (int k = 0; k < nf; k++) zmq_msg_close(&f[k]);
            if (bad < 0) break;
            if (rc) return rc;
        }
    }
    return LOADER_OK;
}

int loader_client_next(loader_client_t *c, msg_batch_t *out, char *err, size_t errlen) {
    if (!c || !out) return LOADER_EPARAM;
    memset(out, 0, sizeof *out);
    /* The time the caller spent away (a training step, which may outlast give_up_ms on a CPU,
     * or a process stopped and continued) is not the loaders' silence: the replies that came
     * meanwhile are taken first, and only the time waited here counts toward give_up_ms. */
    int rc0 = pump(c, 0, err, errlen);
    if (rc0) return rc0;
    const double wait_from = progress_now();
    for (;;) {
        double now = progress_now();
        if (c->cfg.stop && *c->cfg.stop) {
            err_fail(err, errlen, 0, "interrupted");
            return LOADER_EIO;
        }
        const double quiet_from = c->last_answer > wait_from ? c->last_answer : wait_from;
        if ((now - quiet_from) * 1000 > c->cfg.give_up_ms) {
            int foreign = 0;
            char also[64] = "";
            for (int i = 0; i < c->npeers; i++) foreign += c->peers[i].state == PEER_FOREIGN;
            if (foreign) snprintf(also, sizeof also, ", %d of them serving another dataset", foreign);
            err_fail(err, errlen, 0, "no loader answered for %d ms (%d known%s)", c->cfg.give_up_ms, c->npeers, also);
            return LOADER_EIO;
        }
        send_info(c, now);
        if (c->spe) {
            if (!c->started) {
                if (c->cfg.start_step >= c->spe) {
                    err_fail(err, errlen, 0, "start step %llu beyond the %llu steps of an epoch",
                           (unsigned long long)c->cfg.start_step, (unsigned long long)c->spe);
                    return LOADER_ERANGE;
                }
                c->next_g = c->issue_g = c->cfg.start_epoch * c->spe + c->cfg.start_step;
                c->started = 1;
            }
            slot_t *s = &c->slots[c->next_g % c->cfg.window];
            if (s->used && s->g == c->next_g && s->have) {
                *out = s->b;
                memset(s, 0, sizeof *s);
                c->next_g++;
                issue(c, now);
                return LOADER_OK;
            }
            issue(c, now);
            /* send what no loader took last time; re-issue what has waited too long, marking
             * its loader down for a while */
            for (uint64_t g = c->next_g; g < c->issue_g; g++) {
                slot_t *w = &c->slots[g % c->cfg.window];
                if (w->have) continue;
                if (w->unsent) {
                    slot_send(c, w, now);
                    continue;
                }
                if ((now - w->sent_at) * 1000 < c->cfg.timeout_ms) continue;
                if (w->peer >= 0) peer_silent(c, &c->peers[w->peer], w->sent_at, now);
                if (w->peer >= 0) rtt_sample(&c->peers[w->peer], now - w->sent_at, now);
                if (w->peer >= 0) c->peers[w->peer].dead_until = now + 2.0 * c->cfg.timeout_ms / 1000.0;
                if (w->peer >= 0) c->reissued++;
                slot_send(c, w, now);
            }
        }
        int rc = pump(c, c->npeers ? 50 : 100, err, errlen);
        if (rc) return rc;
        if (c->cfg.on_wait) c->cfg.on_wait(c->cfg.hook_arg);
    }
}
