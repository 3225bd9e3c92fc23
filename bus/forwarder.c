/* bus/forwarder.c: bin/bus's forwarding loop (see forwarder.h). */
#include "common/errmsg.h"
#include "bus/forwarder.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zmq.h>

#include "bus/bus.h"
#include "bus/ckpt_cache.h"
#include "bus/net.h"
#include "bus/utf8.h"

typedef struct {
    const bus_forwarder_cfg_t *cfg;
    void *xsub, *xpub;
    bus_ckpt_cache_t *cache;
    bus_forwarder_stats_t st;
    time_t last_warn;        /* malformed-event lines: at most one a second */
    uint64_t warn_suppressed;
} fwd_t;

static void warn_malformed(fwd_t *f, const char *topic, const char *why) {
    time_t now = time(NULL);
    if (now == f->last_warn) {
        f->warn_suppressed++;
        return;
    }
    if (!f->cfg->quiet) {
        fprintf(stderr, "bus: malformed event on \"%s\": %s (dropped)", topic, why);
        if (f->warn_suppressed)
            fprintf(stderr, "; %llu more since the last line",
                    (unsigned long long)f->warn_suppressed);
        fputc('\n', stderr);
    }
    f->last_warn = now;
    f->warn_suppressed = 0;
}

/* Looks at one single-frame event on its way down: remembers a ckpt and renews the welcome
 * message. Returns 1 when the event is to be forwarded, 0 when it does not decode: the
 * subscribers the protocol documents decode every frame they receive (a str that is not
 * UTF-8 makes Python's msgpack raise), so the bus passes on only what they can read. */
static int inspect_event(fwd_t *f, const void *data, size_t len) {
    char topic[WIRE_MAX_TOPIC + 1], err[256];
    wire_msg_t m;
    int rc = wire_event_unpack(data, len, topic, sizeof topic, &m, err, sizeof err);
    if (rc) {
        f->st.malformed++;
        char shown[3 * sizeof topic];
        wire_utf8_clean(shown, sizeof shown, topic, strlen(topic));
        warn_malformed(f, shown, err);
        return 0;
    }
    if (m.type == MSG_CKPT) {
        f->st.ckpts++;
        if (bus_ckpt_cache_update(f->cache, &m.u.ckpt) == 1) {
            void *frame = NULL;
            size_t flen = 0;
            /* set before the next subscriber connects: libzmq copies it on every attach */
            if (bus_ckpt_cache_frame(f->cache, &frame, &flen) == 0)
                zmq_setsockopt(f->xpub, ZMQ_XPUB_WELCOME_MSG, frame, flen);
            else if (!f->cfg->quiet)
                fprintf(stderr, "bus: could not build the welcome message\n");
            free(frame);
        }
    }
    wire_msg_free(&m);
    return 1;
}

/* Moves every message waiting on `from` to `to`, frame by frame; events (downstream) that
 * are not one decodable frame are dropped instead. Returns 0 or BUS_ERR_*. */
static int pump(fwd_t *f, void *from, void *to, int downstream) {
    for (int budget = 1000; budget > 0; budget--) { /* let the other direction have a turn */
        int first = 1, more = 1, drop = 0;
        while (more) {
            zmq_msg_t msg;
            zmq_msg_init(&msg);
            if (zmq_msg_recv(&msg, from, first ? ZMQ_DONTWAIT : 0) < 0) {
                int e = zmq_errno();
                zmq_msg_close(&msg);
                if (first && e == EAGAIN) return 0;
                return e == EINTR ? BUS_ERR_INTR : BUS_ERR_ZMQ;
            }
            more = zmq_msg_more(&msg);
            if (downstream && first) {
                f->st.events++;
                if (more) { /* an event is one frame: this is no event of ours */
                    f->st.malformed++;
                    warn_malformed(f, "", "a message of several frames");
                    drop = 1;
                } else {
                    drop = !inspect_event(f, zmq_msg_data(&msg), zmq_msg_size(&msg));
                }
            } else if (!downstream && first) {
                f->st.subscriptions++;
            }
            /* XPUB drops for a slow subscriber and XSUB never blocks on subscriptions, so
             * this send cannot stall the loop */
            if (drop || zmq_msg_send(&msg, to, more ? ZMQ_SNDMORE : 0) < 0) zmq_msg_close(&msg);
            first = 0;
        }
    }
    return 0;
}

/* The place an endpoint binds, to tell whether two endpoints are one: an ipc path made absolute
 * with its folder resolved (./, .., symlinks), so ipc://x and ipc://$PWD/x compare equal;
 * anything else (tcp, an abstract "ipc://@name") as written. */
static void endpoint_place(const char *ep, char *out, size_t cap) {
    const char *path = ep + 6;
    char dir[PATH_MAX], real[PATH_MAX];
    const char *slash = strrchr(path, '/');
    if (strncmp(ep, "ipc://", 6) || !path[0] || path[0] == '@' || (slash && !slash[1])) {
        snprintf(out, cap, "%s", ep);
        return;
    }
    if (!slash) snprintf(dir, sizeof dir, ".");
    else if (slash == path) snprintf(dir, sizeof dir, "/");
    else snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    if (!realpath(dir, real)) { /* a folder that is not there: the bind will say so */
        snprintf(out, cap, "%s", ep);
        return;
    }
    snprintf(out, cap, "ipc://%s/%s", strcmp(real, "/") ? real : "", slash ? slash + 1 : path);
}

/* 1 when pub and sub bind one place. A wildcard (a tcp port "*" or "0", the ipc path "*") binds
 * a new place each time, so two of them are two. */
static int same_endpoint(const char *pub, const char *sub) {
    size_t n = strlen(pub);
    if (!strcmp(pub, "ipc://*") || (n > 2 && (!strcmp(pub + n - 2, ":*") || !strcmp(pub + n - 2, ":0"))))
        return 0;
    char a[PATH_MAX + 16], b[PATH_MAX + 16];
    endpoint_place(pub, a, sizeof a);
    endpoint_place(sub, b, sizeof b);
    return !strcmp(a, b);
}

static void *bound(void *ctx, int type, const char *ep, char *err, size_t errlen) {
    void *s = bus_net_socket(ctx, type, BUS_PEER_EVENTS, err, errlen);
    if (s && bus_net_bind(ctx, s, ep, err, errlen) != 0) bus_close(&s);
    return s;
}

int bus_forwarder_run(const bus_forwarder_cfg_t *cfg, bus_forwarder_stats_t *stats, char *err,
                      size_t errlen) {
    if (!cfg || !cfg->pub_ep || !cfg->sub_ep)
        return err_fail(err, errlen, BUS_ERR_ARG, "forwarder: endpoints missing");
    /* over ipc the second bind takes the path from the first without an error: the bus would
     * start and forward nothing (tcp refuses it as "address in use", later and as exit 1) */
    if (same_endpoint(cfg->pub_ep, cfg->sub_ep))
        return err_fail(err, errlen, BUS_ERR_ARG,
                        "--pub and --sub are one endpoint (%s%s%s): publishers and subscribers need one each",
                        cfg->pub_ep, strcmp(cfg->pub_ep, cfg->sub_ep) ? " and " : "",
                        strcmp(cfg->pub_ep, cfg->sub_ep) ? cfg->sub_ep : "");
    fwd_t f = {.cfg = cfg};
    int rc = 0;
    void *ctx = zmq_ctx_new();
    f.cache = bus_ckpt_cache_new(cfg->max_runs ? cfg->max_runs : BUS_CKPT_RUNS);
    if (!ctx || !f.cache) {
        rc = err_fail(err, errlen, BUS_ERR_ZMQ, "forwarder: cannot create the context or the cache");
        goto done;
    }
    if (!(f.xsub = bound(ctx, ZMQ_XSUB, cfg->pub_ep, err, errlen)) ||
        !(f.xpub = bound(ctx, ZMQ_XPUB, cfg->sub_ep, err, errlen))) {
        rc = BUS_ERR_ZMQ;
        goto done;
    }
    /* subscribe to everything ourselves: XSUB passes this to every publisher that connects */
    if (zmq_send(f.xsub, "\x01", 1, 0) != 1) {
        rc = err_fail(err, errlen, BUS_ERR_ZMQ, "subscribe: %s", zmq_strerror(zmq_errno()));
        goto done;
    }
    if (!cfg->quiet)
        fprintf(stderr, "bus: publishers -> %s, subscribers <- %s\n", cfg->pub_ep, cfg->sub_ep);
    while (!bus_signal_received()) {
        /* the signal pipe beside the sockets: a wait without end must see a SIGTERM that
         * lands while zmq_poll handles libzmq's commands (bus.h) */
        int sigfd = bus_signal_fd();
        zmq_pollitem_t items[3] = {{f.xsub, 0, ZMQ_POLLIN, 0}, {f.xpub, 0, ZMQ_POLLIN, 0},
                                   {NULL, sigfd, ZMQ_POLLIN, 0}};
        if (zmq_poll(items, sigfd >= 0 ? 3 : 2, -1) < 0) {
            if (zmq_errno() == EINTR) continue; /* the loop condition reads the flag */
            rc = err_fail(err, errlen, BUS_ERR_ZMQ, "zmq_poll: %s", zmq_strerror(zmq_errno()));
            break;
        }
        int r = 0;
        if (items[0].revents & ZMQ_POLLIN) r = pump(&f, f.xsub, f.xpub, 1);
        if (!r && (items[1].revents & ZMQ_POLLIN)) r = pump(&f, f.xpub, f.xsub, 0);
        if (r == BUS_ERR_INTR) continue;
        if (r) {
            rc = err_fail(err, errlen, r, "forwarding: %s", zmq_strerror(zmq_errno()));
            break;
        }
    }
    if (!cfg->quiet && rc == 0)
        fprintf(stderr, "bus: stopping: %llu events (%llu malformed), %llu ckpt, %u runs kept, "
                "%llu client handshakes refused\n",
                (unsigned long long)f.st.events, (unsigned long long)f.st.malformed,
                (unsigned long long)f.st.ckpts, bus_ckpt_cache_count(f.cache), bus_net_refused());
done:
    if (stats) *stats = f.st;
    bus_close(&f.xsub);
    bus_close(&f.xpub);
    if (ctx) zmq_ctx_term(ctx);
    bus_ckpt_cache_free(&f.cache);
    return rc;
}
