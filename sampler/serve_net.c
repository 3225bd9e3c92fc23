/* sampler/serve_net.c: the service behind its sockets (see serve.h): one poll loop over the
 * ROUTER, the disconnect monitor and the bus; between polls, one step of the batch.
 *
 * Disconnects: the installed libzmq (4.3.4, built without the draft API, so no
 * ZMQ_ROUTER_NOTIFY) reports them through a socket monitor, ZMQ_EVENT_DISCONNECTED with the
 * connection's file descriptor, and a received frame names the descriptor it came from
 * (zmq_msg_get ZMQ_SRCFD). A descriptor is reused by the next connection, so a request is
 * tagged (fd, generation): the monitor is drained after each request is read and before it
 * is tagged (the disconnect of fd's previous connection was queued before any frame of the
 * next one could arrive), and each disconnect of fd ends one generation. inproc peers have no
 * descriptor: their work is never dropped this way. */
#include "sampler/serve.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "bus/beat.h"
#include "bus/bus.h"
#include "bus/log.h"
#include "bus/net.h"
#include "common/path_inside.h"
#include "sampler/model_impl.h"

#define SERVE_MAX_FRAMES 16  /* envelope frames echoed; a request with more is dropped */
#define SERVE_READ_BURST 256 /* requests read between two steps at most */
#define SERVE_MONITOR "inproc://sampler-serve-monitor"

typedef struct {
    sampler_server_t *s;
    const sampler_serve_opts_t *o;
    device_t *dev;         /* where reloaded models go */
    void *router, *monitor, *sub;
    uint32_t *fd_gen;      /* (n_fd) generation of each descriptor's connection */
    int n_fd;
    char refused[WIRE_MAX_STR + 1]; /* the last announced path outside the run directory */
    bus_beat_t *beat;      /* stage/sampler/<name> every second (NULL: not on a bus) */
    void *pub;             /* its log/sampler lines (NULL: not on a bus) */
    bus_log_t log, log_q;  /* its lines (bus/log.h); log_q's are those --quiet keeps off stderr */
    uint64_t answered;     /* final replies sent ("gen" or "error"; parts not counted) */
    char serving[WIRE_MAX_STR + 1]; /* the newest checkpoint loaded */
} loop_t;

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

static uint32_t *fd_slot(loop_t *l, int fd) {
    if (fd < 0 || fd > (1 << 20)) return NULL;
    if (fd >= l->n_fd) {
        int n = fd + 64;
        uint32_t *g = realloc(l->fd_gen, sizeof *g * n);
        if (!g) return NULL;
        memset(g + l->n_fd, 0, sizeof *g * (n - l->n_fd));
        l->fd_gen = g;
        l->n_fd = n;
    }
    return &l->fd_gen[fd];
}

/* The connection key of descriptor fd now: fd and its generation (0: none). */
static uint64_t conn_of(loop_t *l, int fd) {
    uint32_t *g = fd_slot(l, fd);
    return g ? ((uint64_t)(fd + 1) << 32) | *g : 0;
}

/* Every disconnect the monitor has reported: that connection's work is dropped. */
static void drain_monitor(loop_t *l) {
    for (;;) {
        zmq_msg_t ev, addr;
        zmq_msg_init(&ev);
        if (zmq_msg_recv(&ev, l->monitor, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&ev);
            return;
        }
        uint16_t event = 0;
        uint32_t fd = 0;
        if (zmq_msg_size(&ev) >= 6) {
            memcpy(&event, zmq_msg_data(&ev), 2);
            memcpy(&fd, (char *)zmq_msg_data(&ev) + 2, 4);
        }
        int more = zmq_msg_more(&ev);
        zmq_msg_close(&ev);
        if (more) { /* the endpoint frame */
            zmq_msg_init(&addr);
            zmq_msg_recv(&addr, l->monitor, 0);
            zmq_msg_close(&addr);
        }
        if (bus_net_refusal(event, fd, l->o->bind)) continue; /* a refused client: logged */
        uint32_t *g = event == ZMQ_EVENT_DISCONNECTED ? fd_slot(l, (int)fd) : NULL;
        if (!g) continue;
        sampler_server_disconnect(l->s, conn_of(l, (int)fd));
        (*g)++;
    }
}

/* The frames before the body as one blob: (u32 length, bytes) per frame. */
static void *pack_env(zmq_msg_t *f, int n, size_t *len) {
    size_t total = 0;
    for (int i = 0; i < n; i++) total += 4 + zmq_msg_size(&f[i]);
    char *b = malloc(total ? total : 1), *p = b;
    if (!b) return NULL;
    for (int i = 0; i < n; i++) {
        uint32_t k = (uint32_t)zmq_msg_size(&f[i]);
        memcpy(p, &k, 4);
        memcpy(p + 4, zmq_msg_data(&f[i]), k);
        p += 4 + k;
    }
    *len = total;
    return b;
}

/* Reads one multipart request off the ROUTER and gives it to the server. 0 when none waited. */
static int read_one(loop_t *l) {
    zmq_msg_t f[SERVE_MAX_FRAMES], tmp;
    int n = 0, more = 1, over = 0;
    while (more) {
        zmq_msg_t *cur = n < SERVE_MAX_FRAMES ? &f[n] : &tmp;
        zmq_msg_init(cur);
        if (zmq_msg_recv(cur, l->router, n == 0 && !over ? ZMQ_DONTWAIT : 0) < 0) {
            zmq_msg_close(cur);
            break;
        }
        more = zmq_msg_more(cur);
        if (cur == &tmp) { zmq_msg_close(cur); over = 1; } else n++;
    }
    if (n >= 2 && !over) {
        const int fd = zmq_msg_get(&f[n - 1], ZMQ_SRCFD);
        drain_monitor(l); /* a disconnect of fd's previous connection first (top of file) */
        size_t envlen = 0;
        void *env = pack_env(f, n - 1, &envlen);
        if (env)
            sampler_server_request(l->s, env, envlen, conn_of(l, fd), zmq_msg_data(&f[n - 1]),
                                   zmq_msg_size(&f[n - 1]), now_ms());
        free(env);
    }
    for (int i = 0; i < n; i++) zmq_msg_close(&f[i]);
    return n > 0 || over;
}

/* Sends every reply waiting: its envelope frames, then the body. ROUTER drops replies to peers
 * that are gone, and to a peer whose queue is full (ZMQ_SNDHWM messages). */
static void flush(loop_t *l) {
    void *env, *body;
    size_t envlen, len;
    while (sampler_server_reply(l->s, &env, &envlen, &body, &len)) {
        for (size_t off = 0; off + 4 <= envlen;) {
            uint32_t k;
            memcpy(&k, (char *)env + off, 4);
            zmq_send(l->router, (char *)env + off + 4, k, ZMQ_SNDMORE | ZMQ_DONTWAIT);
            off += 4 + k;
        }
        zmq_send(l->router, body, len, ZMQ_DONTWAIT);
        if (!memmem(body, len, "\xa8gen_part", 9)) l->answered++; /* "type": "gen_part" as a fixstr */
        free(env);
        free(body);
    }
}

/* A ckpt event (or the bus's welcome index) for the followed run: load it if newer. */
static void maybe_reload(loop_t *l, const wire_msg_t *m) {
    const sampler_serve_opts_t *o = l->o;
    const msg_ckpt_t *ck = NULL;
    if (m->type == MSG_CKPT && !strcmp(m->u.ckpt.run, o->follow)) ck = &m->u.ckpt;
    if (m->type == MSG_CKPT_INDEX)
        for (uint32_t i = 0; i < m->u.ckpt_index.n; i++)
            if (!strcmp(m->u.ckpt_index.items[i].run, o->follow)) ck = &m->u.ckpt_index.items[i];
    if (!ck || !ck->path || (int64_t)ck->step <= sampler_server_newest_step(l->s)) return;
    if (!path_inside(o->run_dir, ck->path)) {
        /* the bus says which checkpoint, never where: only the run directory is opened */
        struct stat st;
        if (strcmp(l->refused, ck->path)) { /* once, not on every repeat of the welcome index */
            if (stat(ck->path, &st) != 0) /* a path that is not there at all: say that */
                bus_log(&l->log, "not reloading %s: %s", ck->path, strerror(errno));
            else
                bus_log(&l->log, "not reloading %s: not a checkpoint inside the run directory %s", ck->path,
                        o->run_dir ? o->run_dir : "(none)");
        }
        snprintf(l->refused, sizeof l->refused, "%s", ck->path);
        return;
    }
    char err[1024];
    sampler_model_t *nm = NULL;
    if (sampler_model_load(&nm, l->dev, ck->path, err, sizeof err)) {
        bus_log(&l->log, "not reloading: %s", err);
        return;
    }
    if (sampler_model_config(nm)->vocab_size != (int)bpe_vocab_size(o->vocab)) {
        bus_log(&l->log, "not reloading %s: vocab_size %d, the vocabulary has %u", ck->path,
                sampler_model_config(nm)->vocab_size, bpe_vocab_size(o->vocab));
        sampler_model_free(&nm);
        return;
    }
    if (sampler_server_reload(l->s, nm, ck->path, (int64_t)ck->step, err, sizeof err))
        bus_log(&l->log, "not reloading %s: %s", ck->path, err);
    else
        snprintf(l->serving, sizeof l->serving, "%s", ck->path);
}

/* The beat's line: which checkpoint, how busy. */
static void beat_state(loop_t *l, int work) {
    if (!l->beat) return;
    char st[WIRE_MAX_STR + 64];
    snprintf(st, sizeof st, "serving %.4000s (step %lld), %d requests queued or running", l->serving,
             (long long)sampler_server_newest_step(l->s), work);
    bus_beat_set(l->beat, st, l->answered);
}

int sampler_serve(sampler_model_t *sm, const sampler_serve_opts_t *o, char *err, size_t errlen) {
    loop_t l = {.o = o, .dev = sampler_model_device(sm), .log = {"sampler", NULL, 0}, .log_q = {"sampler", NULL, o->quiet}};
    const int max_seq = sampler_model_config(sm)->max_seq;
    const int positions = o->max_prompt + (long)o->max_new < max_seq ? o->max_prompt + o->max_new : max_seq;
    int rc = sampler_server_new(&l.s, sm, o, err, errlen);
    if (rc) return rc;
    bus_signals_install();
    void *ctx = zmq_ctx_new();
    char why[512];
    if (!ctx) { snprintf(err, errlen, "zmq_ctx_new failed"); rc = SAMPLER_EARG; goto out; }
    if (!(l.router = bus_net_socket(ctx, ZMQ_ROUTER, BUS_PEER_REQUESTS, why, sizeof why)) ||
        bus_net_bind(ctx, l.router, o->bind, why, sizeof why) != 0) {
        snprintf(err, errlen, "--serve %s: %s", o->bind, why);
        rc = SAMPLER_EARG;
        goto out;
    }
    /* this monitor replaces the one bus_net_bind gave a CURVE server: it watches refusals too */
    if (zmq_socket_monitor(l.router, SERVE_MONITOR, ZMQ_EVENT_DISCONNECTED | BUS_NET_REFUSAL_EVENTS) != 0 ||
        !(l.monitor = zmq_socket(ctx, ZMQ_PAIR)) || zmq_connect(l.monitor, SERVE_MONITOR) != 0) {
        snprintf(err, errlen, "--serve %s: socket monitor: %s", o->bind, zmq_strerror(zmq_errno()));
        rc = SAMPLER_EARG;
        goto out;
    }
    if (o->follow) {
        /* "ckpt/" and not "ckpt/<run>": the bus's welcome index comes under "ckpt/" */
        const char *prefix = "ckpt/";
        if (!(l.sub = bus_sub_open(ctx, o->bus_sub, &prefix, 1, why, sizeof why))) {
            snprintf(err, errlen, "bus %s: %s", o->bus_sub, why);
            rc = SAMPLER_EARG;
            goto out;
        }
    }
    snprintf(l.serving, sizeof l.serving, "%s", o->ckpt ? o->ckpt : "");
    if (o->bus_pub) { /* announced on the bus: watchers (bin/live) find the service there */
        char name[WIRE_NAME_LEN];
        if (o->name) snprintf(name, sizeof name, "%s", o->name);
        else snprintf(name, sizeof name, "sampler-%ld", (long)getpid());
        /* optional, as the trainer's events are: the service does not need the bus */
        if (bus_beat_start(&l.beat, ctx, o->bus_pub, "sampler", name, o->follow, o->bind, why, sizeof why))
            bus_log(&l.log, "warning: not announced on the bus (%s)", why);
        beat_state(&l, 0);
        if ((l.pub = bus_pub_open(ctx, o->bus_pub, why, sizeof why))) {
            bus_pub_wait(l.pub, 500); /* so the first line is not lost to a subscription in flight */
            l.log.pub = l.log_q.pub = l.pub;
            sampler_server_set_bus(l.s, l.pub);
        }
    }
    {
        size_t total, cache;
        char a[32], b[32];
        sampler_server_memory(l.s, &total, &cache);
        bus_log(&l.log_q, "serving %s on %s%s%s; %d rows x %d positions: key/value cache %s, "
                "%s on the device in all; queue %d", o->ckpt, o->bind,
                o->follow ? ", following run " : "", o->follow ? o->follow : "", o->max_batch, positions,
                device_bytes_str(cache, b, sizeof b), device_bytes_str(total, a, sizeof a), o->max_queue);
    }
    int work = 0;
    while (!bus_signal_received()) {
        /* the signal's pipe too (bus.h): a SIGTERM taken by another thread, or while zmq_poll was
         * busy outside poll(2), ends the wait at once */
        zmq_pollitem_t it[4] = {{l.router, 0, ZMQ_POLLIN, 0}, {l.monitor, 0, ZMQ_POLLIN, 0},
                                {NULL, bus_signal_fd(), ZMQ_POLLIN, 0}, {l.sub, 0, ZMQ_POLLIN, 0}};
        int ni = bus_signal_fd() >= 0 ? 3 : 2;
        if (ni == 2) it[2] = it[3];
        if (l.sub) ni++;
        /* while rows decode, only a look: the next step is due at once */
        int np = zmq_poll(it, ni, work ? 0 : 500);
        if (np < 0) {
            if (zmq_errno() == EINTR) continue;
            snprintf(err, errlen, "poll: %s", zmq_strerror(zmq_errno()));
            rc = SAMPLER_EARG;
            goto out;
        }
        for (int k = 0; k < SERVE_READ_BURST && read_one(&l); k++) {}
        drain_monitor(&l);
        if (l.sub && (it[ni - 1].revents & ZMQ_POLLIN)) {
            char topic[WIRE_MAX_TOPIC + 1];
            wire_msg_t m;
            if (bus_recv(l.sub, 0, topic, sizeof topic, &m, why, sizeof why) == 0) {
                maybe_reload(&l, &m);
                wire_msg_free(&m);
            }
        }
        work = sampler_server_step(l.s, now_ms());
        flush(&l);
        beat_state(&l, work);
    }
    sampler_server_stop(l.s);
    flush(&l);
    bus_log(&l.log_q, "stopped by signal");
    rc = 0;
out:
    if (rc && l.pub) { /* the error's line on the bus too; bin/sampler prints it to stderr */
        bus_log_t bus_only = {"sampler", l.pub, 1};
        bus_log(&bus_only, "%s", err);
    }
    if (l.s) sampler_server_set_bus(l.s, NULL);
    bus_close(&l.pub);
    bus_beat_stop(&l.beat);
    bus_close(&l.sub);
    if (l.monitor) zmq_close(l.monitor);
    if (l.router) {
        int linger = 500; /* the stop replies get out */
        zmq_setsockopt(l.router, ZMQ_LINGER, &linger, sizeof linger);
        zmq_close(l.router);
    }
    if (ctx) zmq_ctx_term(ctx);
    free(l.fd_gen);
    sampler_server_free(&l.s);
    return rc;
}
