/* live/live.c: the bus thread of bin/live: events in, disk followed, pages kicked (live/live.h). */
#include "live/live.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <zmq.h>

#include "bus/bus.h"
#include "common/progress.h"
#include "live/assets.h"
#include "live/disk.h"
#include "live/http.h"
#include "live/sample.h"

#define READ_BURST 2000   /* events read before the other duties get a turn */
#define KICK_S 0.02       /* pages are resumed at most this often: updates go out in batches */
#define TICK_S 0.25       /* liveness of the stages */
#define POLL_S 1.0        /* files followed */
#define SCAN_S 10.0       /* new run directories */

static void on_event(live_store_t *s, live_disk_t *d, const char *topic, const wire_msg_t *m, double mono) {
    switch (m->type) {
    case MSG_METRICS: {
        const msg_metrics_t *x = &m->u.metrics;
        char want[WIRE_NAME_LEN + 16];
        snprintf(want, sizeof want, "metrics/%s", x->run);
        if (strcmp(topic, want)) break; /* a data-parallel rank's own numbers (metrics/<run>/<rank>) */
        live_store_metrics(s, LIVE_SRC_BUS, x->run, x->step, x->time, x->values, x->n, mono);
        break;
    }
    case MSG_EVAL: {
        const msg_eval_t *x = &m->u.eval;
        live_store_eval(s, LIVE_SRC_BUS, x->run, x->task, x->step, x->time, x->values, x->n);
        break;
    }
    case MSG_CKPT:
        live_store_ckpt(s, m->u.ckpt.run, m->u.ckpt.step, m->u.ckpt.time, m->u.ckpt.path, m->u.ckpt.model);
        if (d) live_disk_ckpt_announced(d, m->u.ckpt.path);
        break;
    case MSG_CKPT_INDEX:
        for (uint32_t i = 0; i < m->u.ckpt_index.n; i++) {
            const msg_ckpt_t *c = &m->u.ckpt_index.items[i];
            live_store_ckpt(s, c->run, c->step, c->time, c->path, c->model);
            if (d) live_disk_ckpt_announced(d, c->path);
        }
        break;
    case MSG_LOADER: live_store_loader(s, &m->u.loader, mono); break;
    case MSG_STAGE: live_store_stage(s, &m->u.stage, mono); break;
    case MSG_LOG: live_store_log(s, m->u.log.program, m->u.log.line, 0); break;
    default: break;
    }
}

static int make_token(char *out, size_t cap) {
    unsigned char r[16];
    if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r || cap < 33) return -1;
    for (int i = 0; i < 16; i++) snprintf(out + 2 * i, 3, "%02x", r[i]);
    return 0;
}

int live_run(const live_opts_t *o, char *err, size_t errlen) {
    live_store_t *s = NULL;
    live_disk_t *d = NULL;
    live_sampler_t *sp = NULL;
    live_http_t *h = NULL;
    void *zctx = NULL, *sub = NULL;
    int rc = -1;
    char token[80] = "";
    const char *host = o->host ? o->host : "127.0.0.1";
    if (o->token) snprintf(token, sizeof token, "%s", o->token);
    else if (!live_http_is_loopback(host) && make_token(token, sizeof token)) {
        snprintf(err, errlen, "no random bytes for a token; give --token");
        return -1;
    }
    bus_signals_install();
    if (live_store_new(&s, &o->lim)) {
        snprintf(err, errlen, "out of memory");
        goto out;
    }
    static const char *dot[] = {"."};
    if (live_disk_new(&d, s, o->nroots ? o->roots : dot, o->nroots ? o->nroots : 1, o->results, o->nresults, err, errlen))
        goto out;
    live_disk_scan(d); /* the history first, so the first page already has it */
    live_disk_poll(d);
    zctx = zmq_ctx_new();
    if (!zctx) {
        snprintf(err, errlen, "zmq_ctx_new failed");
        goto out;
    }
    if (!o->no_bus) {
        /* "ckpt" also matches the welcome index ("ckpt/"): subscribed before connecting (bus.h) */
        const char *pre[] = {"metrics/", "ckpt", "eval/", "loader/", "stage/", "log/"};
        char why[512];
        sub = bus_sub_open(zctx, bus_endpoint_sub(o->bus_sub), pre, 6, why, sizeof why);
        if (!sub) {
            snprintf(err, errlen, "bus %s: %s", bus_endpoint_sub(o->bus_sub), why);
            goto out;
        }
    }
    if (live_sampler_new(&sp, zctx, s, o->sampler, err, errlen)) goto out;
    live_http_opts_t ho = {.host = host, .port = o->port, .token = token, .max_streams = o->max_streams};
    if (live_http_start(&h, s, sp, &ho, err, errlen)) goto out;
    int v6 = strchr(host, ':') != NULL, any = !strcmp(host, "0.0.0.0") || !strcmp(host, "::");
    printf("live: http://%s%s%s:%d/%s%s\n", v6 ? "[" : "", host, v6 ? "]" : "", live_http_port(h), token[0] ? "?token=" : "",
           token);
    fflush(stdout);
    if (!o->quiet) {
        fprintf(stderr, "live: %d run director%s followed under %d root%s; %s\n", live_disk_dirs(d),
                live_disk_dirs(d) == 1 ? "y" : "ies", o->nroots ? o->nroots : 1, o->nroots > 1 ? "s" : "",
                o->no_bus ? "no bus (--no-bus)" : bus_endpoint_sub(o->bus_sub));
        if (!live_have_uplot)
            fprintf(stderr, "live: built without uPlot (npm was unreachable): the page shows tables, not curves; "
                            "make live-vendor\n");
        if (token[0])
            fprintf(stderr, "live: every request needs the token (the URL above carries it)%s\n",
                    any ? "; from another machine use this machine's name or address in place of the one above" : "");
    }
    double now = progress_now(), t_kick = now, t_tick = now, t_poll = now, t_scan = now;
    int news = 0;
    while (!bus_signal_received()) {
        zmq_pollitem_t it[2 + 8];
        int n = 0;
        if (sub) it[n++] = (zmq_pollitem_t){sub, 0, ZMQ_POLLIN, 0};
        it[n++] = (zmq_pollitem_t){NULL, live_sampler_wake_fd(sp), ZMQ_POLLIN, 0};
        n += live_sampler_pollitems(sp, it + n, 8);
        int np = zmq_poll(it, n, news ? (long)(KICK_S * 1000) : 50);
        if (np < 0 && zmq_errno() != EINTR) {
            snprintf(err, errlen, "poll: %s", zmq_strerror(zmq_errno()));
            goto out;
        }
        now = progress_now();
        for (int k = 0; sub && k < READ_BURST; k++) {
            char topic[WIRE_MAX_TOPIC + 1], why[256];
            wire_msg_t m;
            int r = bus_recv(sub, 0, topic, sizeof topic, &m, why, sizeof why);
            if (r == BUS_TIMEOUT || r == BUS_ERR_INTR) break;
            if (r) continue; /* a malformed event: the bus drops those, a direct publisher may not */
            live_store_count_event(s);
            on_event(s, d, topic, &m, now);
            wire_msg_free(&m);
            news = 1;
        }
        live_sampler_work(sp, now);
        if (now - t_tick >= TICK_S) {
            live_store_tick(s, now);
            t_tick = now;
            news = 1;
        }
        if (now - t_scan >= SCAN_S) {
            live_disk_scan(d);
            t_scan = now;
        }
        if (now - t_poll >= POLL_S) {
            live_disk_poll(d);
            t_poll = now;
            news = 1;
        }
        if (news && now - t_kick >= KICK_S) {
            live_http_kick(h, now);
            t_kick = now;
            news = 0;
        }
    }
    if (!o->quiet) fprintf(stderr, "live: stopped by signal\n");
    rc = 0;
out:
    if (sp) live_sampler_fail_all(sp);
    live_http_stop(&h);
    live_sampler_free(&sp);
    bus_close(&sub);
    if (zctx) zmq_ctx_term(zctx);
    live_disk_free(&d);
    live_store_free(&s);
    return rc;
}
