/* trainer/data.c: see data.h. */
#include "trainer/data.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "bus/bus.h"
#include "bus/net.h"
#include "common/progress.h"
#include "loader/batch.h"
#include "loader/client.h"

#define MAX_LOADERS 64

struct trainer_data {
    void *zctx, *sub;
    const trainer_opts_t *o;
    char *eps[MAX_LOADERS];
    int n_eps, n_given;       /* eps[0, n_given) came from --loaders, the rest from the bus */
    char foreign[MAX_LOADERS];/* the probe found another dataset there (already reported) */
    loader_client_t *client;
    uint64_t start_epoch, start_step;
    uint32_t rank, world;
    const bus_log_t *log;     /* the trainer's lines (bus/log.h) */
    int dataset_said;         /* the dataset's line was logged (setup may ask again: a resume's retry) */
};

static int add_endpoint(trainer_data_t *d, const char *ep) {
    for (int i = 0; i < d->n_eps; i++)
        if (!strcmp(d->eps[i], ep)) return 0;
    if (d->n_eps == MAX_LOADERS || !(d->eps[d->n_eps] = strdup(ep))) return -1;
    d->n_eps++;
    if (d->client) loader_client_add_endpoint(d->client, ep);
    return 1;
}

int trainer_data_open(trainer_data_t **out, void *zctx, const trainer_opts_t *o, const bus_log_t *log, char *err,
                      size_t errlen) {
    trainer_data_t *d = calloc(1, sizeof *d);
    if (!d) return snprintf(err, errlen, "out of memory"), -1;
    d->zctx = zctx, d->o = o, d->log = log;
    d->world = 1;
    if (o->loaders) {
        char *list = strdup(o->loaders), *save = NULL;
        for (char *tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
            if (*tok && add_endpoint(d, tok) < 0) {
                free(list);
                trainer_data_close(&d);
                return snprintf(err, errlen, "too many loader endpoints (at most %d)", MAX_LOADERS), -1;
            }
        free(list);
    }
    d->n_given = d->n_eps;
    if (o->discover) {
        const char *prefix = "loader/";
        d->sub = bus_sub_open(zctx, bus_endpoint_sub(o->bus_sub), &prefix, 1, err, errlen);
        if (!d->sub) {
            trainer_data_close(&d);
            return -1;
        }
    }
    *out = d;
    return 0;
}

void trainer_data_set_rank(trainer_data_t *d, int rank, int world) {
    d->rank = (uint32_t)rank, d->world = (uint32_t)world;
}

void trainer_data_poll(trainer_data_t *d) {
    if (!d->sub) return;
    for (;;) {
        char topic[128], e[256];
        wire_msg_t m;
        int rc = bus_recv(d->sub, 0, topic, sizeof topic, &m, e, sizeof e);
        if (rc == BUS_TIMEOUT || rc == BUS_ERR_INTR || rc == BUS_ERR_ZMQ) return;
        if (rc == 0 && m.type == MSG_LOADER && m.u.loader.endpoint && add_endpoint(d, m.u.loader.endpoint) == 1)
            bus_log(d->log, "discovered loader %s at %s", m.u.loader.name, m.u.loader.endpoint);
        if (rc == 0) wire_msg_free(&m);
    }
}

static uint8_t layout_of(const trainer_opts_t *o) { return strcmp(o->layout, "pad") ? WIRE_PACK : WIRE_PAD; }

/* The client's hooks: discovery while a batch is awaited, and its lines about loaders. */
static void poll_hook(void *arg) { trainer_data_poll(arg); }
static void notice_hook(void *arg, const char *line) { bus_log(((trainer_data_t *)arg)->log, "%s", line); }

int trainer_data_probe(trainer_data_t *d, const loader_identity_t *expect, trainer_data_info_t *info, char *err,
                       size_t errlen) {
    const trainer_opts_t *o = d->o;
    double t0 = progress_now(), wait_s = o->timeout_ms / 1000.0 * 6;
    int tried = 0;
    for (;;) {
        trainer_data_poll(d);
        for (; tried < d->n_eps; tried++) {
            char why[512];
            void *s = bus_net_socket(d->zctx, ZMQ_DEALER, BUS_PEER_REPLIES, why, sizeof why);
            if (!s || bus_net_connect(s, d->eps[tried], why, sizeof why)) {
                snprintf(err, errlen, "loader endpoint '%s': %s", d->eps[tried], why);
                if (s) zmq_close(s);
                return -1;
            }
            wire_msg_t req = {.type = MSG_INFO_REQ}, rep;
            req.u.info_req = (msg_info_req_t){.req_id = 1, .world = d->world, .B = (uint32_t)o->B, .T = (uint32_t)o->T,
                                              .layout = layout_of(o), .split = WIRE_TRAIN};
            char e[256];
            int rc = bus_request(s, &req, &rep, o->timeout_ms, e, sizeof e);
            zmq_close(s);
            if (rc == BUS_ERR_INTR) return snprintf(err, errlen, "interrupted"), -1;
            if (rc) {
                bus_log(d->log, "loader %s did not answer info_req (%s)", d->eps[tried],
                        rc == BUS_TIMEOUT ? "time-out" : e);
                continue;
            }
            if (rep.type == MSG_ERROR) {
                snprintf(err, errlen, "loader %s refused B=%d T=%d %s: %s", d->eps[tried], o->B, o->T, o->layout,
                         rep.u.error.message ? rep.u.error.message : "?");
                wire_msg_free(&rep);
                return -1;
            }
            if (rep.type != MSG_INFO) {
                wire_msg_free(&rep);
                continue;
            }
            loader_identity_from_info(&info->id, &rep.u.info);
            info->steps_per_epoch = rep.u.info.steps_per_epoch;
            snprintf(info->endpoint, sizeof info->endpoint, "%s", d->eps[tried]);
            wire_msg_free(&rep);
            if (expect && !loader_identity_same(&info->id, expect)) {
                char got[512], want[512];
                loader_identity_describe(&info->id, got, sizeof got);
                loader_identity_describe(expect, want, sizeof want);
                if (tried < d->n_given)
                    return snprintf(err, errlen, "loader %s serves %s, but the run was trained on %s", d->eps[tried], got,
                                    want), -1;
                bus_log(d->log, "loader %s serves %s, not the run's %s: not used", d->eps[tried], got, want);
                d->foreign[tried] = 1;
                continue;
            }
            if (info->steps_per_epoch == 0)
                return snprintf(err, errlen, "dataset %s holds no full batch of B=%d x T=%d", info->id.dataset, o->B, o->T), -1;
            if (!d->dataset_said++)
                bus_log(d->log, "dataset %s: %llu docs, %llu tokens, vocab %u (%s), %llu steps per epoch",
                        info->id.dataset, (unsigned long long)info->id.n_docs, (unsigned long long)info->id.n_tokens,
                        info->id.vocab_size, info->id.tokenizer, (unsigned long long)info->steps_per_epoch);
            return 0;
        }
        if (bus_signal_received()) return snprintf(err, errlen, "interrupted"), -1;
        if (progress_now() - t0 > wait_s) {
            snprintf(err, errlen, "no loader answered within %.0f s (%d endpoint%s known%s)", wait_s, d->n_eps,
                     d->n_eps == 1 ? "" : "s", d->sub ? ", listening on the bus" : "");
            return -1;
        }
        if (d->sub) {
            char topic[128], e[256];
            wire_msg_t m;
            if (bus_recv(d->sub, 200, topic, sizeof topic, &m, e, sizeof e) == 0) {
                if (m.type == MSG_LOADER && m.u.loader.endpoint) add_endpoint(d, m.u.loader.endpoint);
                wire_msg_free(&m);
            }
        } else {
            tried = 0; /* retry the known ones */
            zmq_poll(NULL, 0, 200);
        }
    }
}

int trainer_data_start(trainer_data_t *d, const loader_identity_t *id, uint64_t epoch, uint64_t step, char *err,
                       size_t errlen) {
    const trainer_opts_t *o = d->o;
    loader_client_cfg_t cfg = {.seed = (uint64_t)o->data_seed, .B = (uint32_t)o->B, .T = (uint32_t)o->T,
                               .rank = d->rank, .world = d->world, .layout = layout_of(o), .split = WIRE_TRAIN,
                               .window = (uint32_t)o->window, .timeout_ms = o->timeout_ms,
                               .start_epoch = epoch, .start_step = step, .stop = bus_signal_flag(),
                               .expect = id, .on_wait = d->sub ? poll_hook : NULL, .notice = notice_hook,
                               .hook_arg = d};
    const char *use[MAX_LOADERS];
    int n = 0;
    for (int i = 0; i < d->n_eps; i++)
        if (!d->foreign[i]) use[n++] = d->eps[i];
    return loader_client_open(&d->client, d->zctx, use, n, &cfg, err, errlen);
}

int trainer_data_next(trainer_data_t *d, msg_batch_t *b, char *err, size_t errlen) {
    return loader_client_next(d->client, b, err, errlen);
}

void trainer_data_cursor(const trainer_data_t *d, uint64_t *epoch, uint64_t *step) {
    loader_client_cursor(d->client, epoch, step);
}

void trainer_data_stats(const trainer_data_t *d, uint64_t *sent, uint64_t *reissued, uint64_t *dropped) {
    loader_client_stats(d->client, sent, reissued, dropped);
}

void trainer_data_close(trainer_data_t **dp) {
    trainer_data_t *d = *dp;
    if (!d) return;
    loader_client_close(&d->client);
    bus_close(&d->sub);
    for (int i = 0; i < d->n_eps; i++) free(d->eps[i]);
    free(d);
    *dp = NULL;
}
