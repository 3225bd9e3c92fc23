/* live/sample.c: jobs for a sampler service, run by the bus thread (live/sample.h). */
#include "live/sample.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "bus/bus.h"
#include "bus/net.h"

#define MAX_SOCKS 8 /* sampler endpoints talked to; the least recently used is closed for a new one */

typedef struct {
    char ep[1024];
    void *sock;
    double used;
} sock_t;

struct live_sampler {
    pthread_mutex_t mu;
    void *zctx;
    live_store_t *store;
    char explicit_ep[1024];
    int wake;           /* eventfd */
    live_job_t *jobs;   /* queued and in flight, oldest first */
    int njobs;
    uint64_t next_id;
    sock_t socks[MAX_SOCKS];
};

int live_sampler_new(live_sampler_t **out, void *zctx, live_store_t *store, const char *explicit_ep, char *err,
                     size_t errlen) {
    *out = NULL;
    live_sampler_t *sp = calloc(1, sizeof *sp);
    if (!sp) return snprintf(err, errlen, "out of memory"), -1;
    sp->wake = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (sp->wake < 0) {
        snprintf(err, errlen, "eventfd: %s", strerror(errno));
        free(sp);
        return -1;
    }
    pthread_mutex_init(&sp->mu, NULL);
    sp->zctx = zctx;
    sp->store = store;
    sp->next_id = 1;
    if (explicit_ep) snprintf(sp->explicit_ep, sizeof sp->explicit_ep, "%s", explicit_ep);
    *out = sp;
    return 0;
}

void live_job_free(live_job_t *job) {
    if (!job) return;
    for (int i = 0; i < LIVE_SAMPLE_MAX_N; i++) free(job->texts[i]);
    free(job);
}

void live_sampler_free(live_sampler_t **spp) {
    if (!spp || !*spp) return;
    live_sampler_t *sp = *spp;
    for (live_job_t *j = sp->jobs, *nx; j; j = nx) {
        nx = j->next;
        if (j->abandoned) live_job_free(j); /* the others belong to their submitters, who are gone by now */
    }
    for (int i = 0; i < MAX_SOCKS; i++) bus_close(&sp->socks[i].sock);
    close(sp->wake);
    pthread_mutex_destroy(&sp->mu);
    free(sp);
    *spp = NULL;
}

int live_sampler_wake_fd(const live_sampler_t *sp) { return sp->wake; }
void live_sampler_lock(live_sampler_t *sp) { pthread_mutex_lock(&sp->mu); }
void live_sampler_unlock(live_sampler_t *sp) { pthread_mutex_unlock(&sp->mu); }

int live_sampler_submit_locked(live_sampler_t *sp, live_job_t *job) {
    if (sp->njobs >= LIVE_SAMPLE_JOBS) return -1;
    job->id = sp->next_id++;
    job->sock = -1;
    job->next = NULL;
    live_job_t **tail = &sp->jobs;
    while (*tail) tail = &(*tail)->next;
    *tail = job;
    sp->njobs++;
    uint64_t one = 1;
    if (write(sp->wake, &one, sizeof one) < 0) { /* the counter is full: the thread is awake anyway */
    }
    return 0;
}

static void unlink_job(live_sampler_t *sp, live_job_t *job) {
    for (live_job_t **p = &sp->jobs; *p; p = &(*p)->next)
        if (*p == job) {
            *p = job->next;
            sp->njobs--;
            return;
        }
}

void live_sampler_abandon(live_sampler_t *sp, live_job_t *job) {
    pthread_mutex_lock(&sp->mu);
    if (job->finished) live_job_free(job);
    else job->abandoned = 1;
    pthread_mutex_unlock(&sp->mu);
}

/* The job is over: out of the list, to its submitter (or freed when it went away). Lock held. */
static void finish(live_sampler_t *sp, live_job_t *job, int status, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void finish(live_sampler_t *sp, live_job_t *job, int status, const char *fmt, ...) {
    unlink_job(sp, job);
    job->status = status;
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(job->error, sizeof job->error, fmt, ap);
        va_end(ap);
    }
    job->finished = 1;
    if (job->abandoned) live_job_free(job);
    else if (job->done) job->done(job);
}

/* The socket for endpoint ep, opened (with the security policy of bus/net.h) when new. */
static int sock_for(live_sampler_t *sp, const char *ep, double mono, char *err, size_t errlen) {
    int lru = 0;
    for (int i = 0; i < MAX_SOCKS; i++) {
        if (sp->socks[i].sock && !strcmp(sp->socks[i].ep, ep)) {
            sp->socks[i].used = mono;
            return i;
        }
        if (!sp->socks[i].sock || sp->socks[i].used < sp->socks[lru].used) lru = i;
    }
    for (live_job_t *j = sp->jobs; j; j = j->next)
        if (j->sock == lru) return snprintf(err, errlen, "too many sampler endpoints in use"), -1;
    bus_close(&sp->socks[lru].sock);
    void *s = bus_net_socket(sp->zctx, ZMQ_DEALER, BUS_PEER_REPLIES, err, errlen);
    if (!s) return -1;
    if (bus_net_connect(s, ep, err, errlen)) {
        zmq_close(s);
        return -1;
    }
    sp->socks[lru] = (sock_t){.sock = s, .used = mono};
    snprintf(sp->socks[lru].ep, sizeof sp->socks[lru].ep, "%s", ep);
    return lru;
}

/* Sends the job's n requests. Lock held. */
static void start(live_sampler_t *sp, live_job_t *job, double mono) {
    char ep[1024] = "", err[512];
    job->model[0] = 0;
    if (sp->explicit_ep[0]) {
        snprintf(ep, sizeof ep, "%s", sp->explicit_ep);
        live_store_sampler_for(sp->store, job->run, err, sizeof err, job->model, sizeof job->model, mono);
    } else if (!live_store_sampler_for(sp->store, job->run, ep, sizeof ep, job->model, sizeof job->model, mono)) {
        finish(sp, job, 503, "no sampler service is alive%s%s (start bin/sampler --serve EP --follow RUN, or give bin/live --sampler EP)",
               job->run[0] ? " for run " : "", job->run);
        return;
    }
    snprintf(job->endpoint, sizeof job->endpoint, "%s", ep);
    int k = sock_for(sp, ep, mono, err, sizeof err);
    if (k < 0) {
        finish(sp, job, 502, "sampler %s: %s", ep, err);
        return;
    }
    job->sock = k;
    job->deadline = mono + LIVE_SAMPLE_TIMEOUT_S;
    for (int i = 0; i < job->n; i++) {
        wire_msg_t m = {.type = MSG_GEN_REQ};
        msg_gen_req_t *g = &m.u.gen_req;
        g->req_id = job->id * 16 + (uint64_t)i;
        g->prompt = job->prompt;
        g->max_new = job->max_new;
        g->temperature = job->temperature;
        g->top_k = job->top_k;
        g->top_p = job->top_p;
        g->seed = job->seed;
        g->latent = "independent";
        g->index = (uint32_t)i; /* sample i of one series: its own latent (docs/sampler.md, "Seeds") */
        g->group = 1;
        g->deadline_ms = LIVE_SAMPLE_TIMEOUT_S * 1000;
        void *body = NULL;
        size_t len = 0;
        int rc = wire_encode(&m, &body, &len);
        if (rc) {
            finish(sp, job, 502, "encoding the request: %s", wire_strerror(rc));
            return;
        }
        int sent = zmq_send(sp->socks[k].sock, "", 0, ZMQ_SNDMORE | ZMQ_DONTWAIT) >= 0 &&
                   zmq_send(sp->socks[k].sock, body, len, ZMQ_DONTWAIT) >= 0;
        free(body);
        if (!sent) {
            finish(sp, job, 502, "sampler %s: cannot send: %s", ep, zmq_strerror(zmq_errno()));
            return;
        }
    }
}

static live_job_t *job_of(live_sampler_t *sp, uint64_t req_id) {
    for (live_job_t *j = sp->jobs; j; j = j->next)
        if (j->id == req_id / 16 && j->sock >= 0) return j;
    return NULL;
}

/* Reads every reply waiting on socket k. Lock held. */
static void read_replies(live_sampler_t *sp, int k) {
    for (;;) {
        zmq_msg_t f[2], tmp;
        int n = 0, more = 1, total = 0;
        while (more) {
            zmq_msg_t *cur = n < 2 ? &f[n] : &tmp;
            zmq_msg_init(cur);
            if (zmq_msg_recv(cur, sp->socks[k].sock, total == 0 ? ZMQ_DONTWAIT : 0) < 0) {
                zmq_msg_close(cur);
                break;
            }
            more = zmq_msg_more(cur);
            total++;
            if (cur == &tmp) zmq_msg_close(cur);
            else n++;
        }
        if (total == 0) return;
        wire_msg_t m;
        char err[256];
        int ok = n == 2 && total == 2 &&
                 wire_decode(zmq_msg_data(&f[1]), zmq_msg_size(&f[1]), &m, err, sizeof err) == 0;
        for (int i = 0; i < n; i++) zmq_msg_close(&f[i]);
        if (!ok) continue;
        uint64_t id = m.type == MSG_GEN ? m.u.gen.req_id : m.type == MSG_ERROR ? m.u.error.req_id : 0;
        live_job_t *job = (m.type == MSG_GEN || m.type == MSG_ERROR) ? job_of(sp, id) : NULL;
        int i = (int)(id % 16);
        if (job && i < job->n && m.type == MSG_ERROR) {
            finish(sp, job, 502, "sampler %s: error %d: %s", job->endpoint, m.u.error.code,
                   m.u.error.message ? m.u.error.message : "");
        } else if (job && i < job->n && !job->texts[i]) {
            job->texts[i] = strdup(m.u.gen.text ? m.u.gen.text : "");
            snprintf(job->ckpt, sizeof job->ckpt, "%s", m.u.gen.ckpt ? m.u.gen.ckpt : "");
            job->step = m.u.gen.step;
            if (++job->got == job->n) finish(sp, job, 200, NULL);
        }
        wire_msg_free(&m);
    }
}

int live_sampler_pollitems(live_sampler_t *sp, void *items, int cap) {
    zmq_pollitem_t *it = items;
    int n = 0;
    pthread_mutex_lock(&sp->mu);
    for (int k = 0; k < MAX_SOCKS && n < cap; k++)
        if (sp->socks[k].sock) it[n++] = (zmq_pollitem_t){sp->socks[k].sock, 0, ZMQ_POLLIN, 0};
    pthread_mutex_unlock(&sp->mu);
    return n;
}

void live_sampler_work(live_sampler_t *sp, double mono) {
    uint64_t cnt;
    if (read(sp->wake, &cnt, sizeof cnt) < 0) { /* nothing was signalled */
    }
    pthread_mutex_lock(&sp->mu);
    for (int k = 0; k < MAX_SOCKS; k++)
        if (sp->socks[k].sock) read_replies(sp, k);
    for (live_job_t *j = sp->jobs, *nx; j; j = nx) {
        nx = j->next;
        if (j->sock < 0) start(sp, j, mono);
        else if (mono > j->deadline)
            finish(sp, j, 504, "sampler %s: no answer within %d s", j->endpoint, LIVE_SAMPLE_TIMEOUT_S);
    }
    pthread_mutex_unlock(&sp->mu);
}

void live_sampler_fail_all(live_sampler_t *sp) {
    pthread_mutex_lock(&sp->mu);
    while (sp->jobs) finish(sp, sp->jobs, 503, "bin/live is stopping");
    pthread_mutex_unlock(&sp->mu);
}
