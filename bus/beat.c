/* bus/beat.c: the stage announcement thread (bus/beat.h). */
#include "bus/beat.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bus/bus.h"
#include "bus/utf8.h"

struct bus_beat {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stop;
    void *zctx;
    char endpoint[1024];
    char topic[WIRE_MAX_TOPIC + 1];
    msg_stage_t st;              /* the event; state/endpoint owned here */
    char served[WIRE_MAX_STR + 1];
    char state[WIRE_MAX_STR + 1];
    int open_rc;                 /* the thread's socket: 0 or the failure */
    char open_err[256];
    int opened;
};

static void beat_send(struct bus_beat *b, void *pub, int bye) {
    wire_msg_t m = {.type = MSG_STAGE};
    pthread_mutex_lock(&b->mu);
    m.u.stage = b->st;
    m.u.stage.endpoint = b->served;
    char state[WIRE_MAX_STR + 1];
    memcpy(state, b->state, sizeof state);
    pthread_mutex_unlock(&b->mu);
    m.u.stage.state = state;
    m.u.stage.bye = (uint8_t)bye;
    bus_publish(pub, b->topic, &m); /* dropped when nobody listens */
}

static void *beat_main(void *arg) {
    struct bus_beat *b = arg;
    char err[256] = "";
    void *pub = bus_pub_open(b->zctx, b->endpoint, err, sizeof err);
    pthread_mutex_lock(&b->mu);
    b->open_rc = pub ? 0 : BUS_ERR_ZMQ;
    snprintf(b->open_err, sizeof b->open_err, "%s", err);
    b->opened = 1;
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
    if (!pub) return NULL;
    bus_pub_wait(pub, 500); /* so the first beat is not lost to a subscription in flight */
    for (;;) {
        beat_send(b, pub, 0);
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += BUS_BEAT_MS / 1000;
        until.tv_nsec += (long)(BUS_BEAT_MS % 1000) * 1000000L;
        if (until.tv_nsec >= 1000000000L) until.tv_sec++, until.tv_nsec -= 1000000000L;
        pthread_mutex_lock(&b->mu);
        int rc = 0;
        while (!b->stop && rc != ETIMEDOUT) rc = pthread_cond_timedwait(&b->cv, &b->mu, &until);
        int stop = b->stop;
        pthread_mutex_unlock(&b->mu);
        if (stop) break;
    }
    beat_send(b, pub, 1);
    bus_close(&pub); /* linger 1 s: the bye gets out */
    return NULL;
}

int bus_name_check(const char *name, const char *what, int may_be_empty, char *err, size_t errlen) {
    size_t n = name ? strlen(name) : 0;
    if (n >= WIRE_NAME_LEN || (!n && !may_be_empty) || (name && !wire_utf8_valid(name, n))) {
        snprintf(err, errlen, "%s \"%.60s\" is not a name of %s%d bytes of UTF-8", what, name ? name : "",
                 may_be_empty ? "at most " : "1..", WIRE_NAME_LEN - 1);
        return BUS_ERR_ARG;
    }
    return 0;
}

static int copy_name(char *dst, const char *src, const char *what, char *err, size_t errlen) {
    if (bus_name_check(src, what, 1, err, errlen)) return BUS_ERR_ARG;
    memcpy(dst, src ? src : "", strlen(src ? src : "") + 1);
    return 0;
}

int bus_beat_start(bus_beat_t **out, void *zctx, const char *bus_pub, const char *program, const char *name,
                   const char *run, const char *served, char *err, size_t errlen) {
    if (!out || !zctx || !bus_pub || !program || !program[0] || !name || !name[0]) {
        snprintf(err, errlen, "bus_beat_start: bad argument");
        return BUS_ERR_ARG;
    }
    *out = NULL;
    struct bus_beat *b = calloc(1, sizeof *b);
    if (!b) return snprintf(err, errlen, "out of memory"), BUS_ERR_ARG;
    int rc = copy_name(b->st.program, program, "program", err, errlen);
    if (!rc) rc = copy_name(b->st.name, name, "stage name", err, errlen);
    if (!rc) rc = copy_name(b->st.run, run, "run name", err, errlen);
    if (rc) return free(b), rc;
    b->st.pid = (uint64_t)getpid();
    wire_utf8_clean(b->served, sizeof b->served, served ? served : "", served ? strlen(served) : 0);
    snprintf(b->state, sizeof b->state, "starting");
    snprintf(b->endpoint, sizeof b->endpoint, "%s", bus_pub);
    snprintf(b->topic, sizeof b->topic, "stage/%s/%s", program, name);
    b->zctx = zctx;
    pthread_mutex_init(&b->mu, NULL);
    pthread_cond_init(&b->cv, NULL);
    if (pthread_create(&b->thread, NULL, beat_main, b)) {
        snprintf(err, errlen, "cannot start the beat thread: %s", strerror(errno));
        pthread_mutex_destroy(&b->mu), pthread_cond_destroy(&b->cv), free(b);
        return BUS_ERR_ARG;
    }
    pthread_mutex_lock(&b->mu);
    while (!b->opened) pthread_cond_wait(&b->cv, &b->mu);
    rc = b->open_rc;
    pthread_mutex_unlock(&b->mu);
    if (rc) {
        snprintf(err, errlen, "%s", b->open_err);
        pthread_join(b->thread, NULL);
        pthread_mutex_destroy(&b->mu), pthread_cond_destroy(&b->cv), free(b);
        return rc;
    }
    *out = b;
    return 0;
}

void bus_beat_set(bus_beat_t *b, const char *state, uint64_t done) {
    if (!b) return;
    pthread_mutex_lock(&b->mu);
    wire_utf8_clean(b->state, sizeof b->state, state ? state : "", state ? strlen(state) : 0);
    b->st.done = done;
    pthread_mutex_unlock(&b->mu);
}

void bus_beat_stop(bus_beat_t **bp) {
    if (!bp || !*bp) return;
    struct bus_beat *b = *bp;
    pthread_mutex_lock(&b->mu);
    b->stop = 1;
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
    pthread_join(b->thread, NULL);
    pthread_mutex_destroy(&b->mu);
    pthread_cond_destroy(&b->cv);
    free(b);
    *bp = NULL;
}
