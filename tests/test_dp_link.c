/* tests/test_dp_link.c: the ranks' rendezvous and heartbeat (trainer/dp_link.h), with one
 * process per rank (fork), as ranks launched by hand on several machines meet: no MPI, no GPU.
 *   - the ranks meet and every one gets rank 0's NCCL id; orderly leaves are no loss;
 *   - a rank SIGKILLed is found at once by the others (its connection closed), whichever rank;
 *   - a rank that stops answering (SIGSTOP, as a lost machine) is found by silence;
 *   - a rank that stops alone tells its reason, which every rank repeats;
 *   - refusals: other flags (naming the flag), another run's rank (waited past), a rank taken
 *     twice, and the time-outs of both sides. */
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "tests/check.h"
#include "trainer/dp.h"
#include "trainer/dp_link.h"

#define ID "00112233445566778899aabbccddeeff"

enum { WATCH, DIE, FAREWELL, ORDERLY };

typedef struct {
    int rank, world, action;
    const char *run, *flags;
    double lost_after, timeout, watch_s;
} child_t;

static const char *rank0_stderr; /* rank 0's stderr goes there (NULL: the test's) */

typedef struct {
    int rc;             /* of dp_link_join */
    char id[64], err[512];
    int lost;           /* WATCH: the verdict at the end (-1: none) */
    double seen_at;     /* CLOCK_MONOTONIC when it was seen */
    char why[512];
} report_t;

static char dir[256];

static double mono(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void put(int fd, const report_t *r) {
    if (write(fd, r, sizeof *r) != (ssize_t)sizeof *r) _exit(3);
}

/* One rank: meets the others at ep, reports, then does its action. */
static void child(const child_t *c, const char *ep, int fd) {
    if (c->rank == 0 && rank0_stderr) {
        if (!freopen(rank0_stderr, "w", stderr)) _exit(4);
        setvbuf(stderr, NULL, _IONBF, 0); /* the test SIGKILLs the rank: nothing may wait in a buffer */
    }
    void *zctx = zmq_ctx_new();
    dp_link_cfg_t cfg = {.rank = c->rank, .world = c->world, .run = c->run, .flags = c->flags,
                         .nccl_id = c->rank == 0 ? ID : "", .timeout_s = c->timeout, .lost_after_s = c->lost_after,
                         .zctx = zctx};
    report_t r = {.lost = -1};
    dp_link_t *l = NULL;
    char bound[DP_LINK_EP_LEN];
    r.rc = dp_link_create(&l, &cfg, ep, bound, sizeof bound, r.err, sizeof r.err);
    if (!r.rc) r.rc = dp_link_join(l, ep, r.id, sizeof r.id, r.err, sizeof r.err);
    put(fd, &r);
    if (r.rc) { /* as the trainer does: close, then end the context, which delivers a refusal */
        dp_link_close(&l, 0, NULL);
        zmq_ctx_term(zctx);
        _exit(0);
    }
    double end = mono() + c->watch_s;
    switch (c->action) {
    case WATCH:
        while (mono() < end && (r.lost = dp_link_lost(l, r.why, sizeof r.why)) < 0) usleep(2000);
        r.seen_at = mono();
        put(fd, &r);
        for (;;) pause(); /* alive, as a rank that reported a loss is until it ends: the test kills it */
    case DIE:
        for (;;) pause(); /* until the test kills it */
    case FAREWELL:
        usleep(300000);
        dp_link_close(&l, 0, "device broke");
        zmq_ctx_term(zctx); /* as the trainer ends: the farewell gets out within the linger */
        break;
    case ORDERLY:
        usleep((useconds_t)(c->watch_s * 1e6));
        dp_link_close(&l, 1, NULL);
        zmq_ctx_term(zctx);
        break;
    }
    _exit(0);
}

typedef struct {
    pid_t pid;
    int fd;
    report_t first, last;
} rank_proc_t;

static int get(int fd, report_t *r, int ms) {
    struct pollfd p = {fd, POLLIN, 0};
    return poll(&p, 1, ms) == 1 && read(fd, r, sizeof *r) == (ssize_t)sizeof *r ? 0 : -1;
}

/* Starts n ranks at a fresh endpoint and waits for each one's join report. */
static void start(rank_proc_t *p, const child_t *c, int n, const char *name) {
    char ep[320];
    snprintf(ep, sizeof ep, "ipc://%s/%s", dir, name);
    for (int i = 0; i < n; i++) {
        int fds[2];
        if (pipe(fds)) abort();
        p[i].pid = fork();
        if (p[i].pid == 0) {
            close(fds[0]);
            child(&c[i], ep, fds[1]);
        }
        close(fds[1]);
        p[i].fd = fds[0];
    }
    for (int i = 0; i < n; i++) CHECK(get(p[i].fd, &p[i].first, 15000) == 0, "%s: rank %d reported its join", name, c[i].rank);
}

static void finish(rank_proc_t *p, int n) {
    for (int i = 0; i < n; i++) {
        kill(p[i].pid, SIGKILL);
        waitpid(p[i].pid, NULL, 0);
        close(p[i].fd);
    }
}

static void test_meet(void) {
    child_t c[3] = {{0, 3, WATCH, "r", "a=1", 30, 10, 1.5}, {1, 3, ORDERLY, "r", "a=1", 30, 10, 0.3},
                    {2, 3, ORDERLY, "r", "a=1", 30, 10, 0.3}};
    rank_proc_t p[3];
    start(p, c, 3, "meet");
    for (int i = 0; i < 3; i++) CHECK(p[i].first.rc == 0, "rank %d joined: %s", i, p[i].first.err);
    CHECK(!strcmp(p[1].first.id, ID) && !strcmp(p[2].first.id, ID), "rank 0's id reached everyone (%s, %s)", p[1].first.id,
          p[2].first.id);
    CHECK(get(p[0].fd, &p[0].last, 15000) == 0);
    CHECK(p[0].last.lost == -1, "ranks that left in order are no loss (rank 0 says %d: %s)", p[0].last.lost, p[0].last.why);
    finish(p, 3);
}

/* Kills rank `victim` of 3 (lost_after 30 s: only the closed connection can tell in time). */
static void kill_one(int victim) {
    child_t c[3];
    for (int i = 0; i < 3; i++) c[i] = (child_t){i, 3, i == victim ? DIE : WATCH, "r", "a=1", 30, 10, 8};
    rank_proc_t p[3];
    char name[32];
    snprintf(name, sizeof name, "kill%d", victim);
    start(p, c, 3, name);
    usleep(200000);
    double t0 = mono();
    kill(p[victim].pid, SIGKILL);
    for (int i = 0; i < 3; i++) {
        if (i == victim) continue;
        CHECK(get(p[i].fd, &p[i].last, 15000) == 0);
        double dt = p[i].last.seen_at - t0;
        CHECK(p[i].last.lost == victim && dt < 2.0 && strstr(p[i].last.why, "connection closed"),
              "rank %d: lost %d after %.3f s (%s)", i, p[i].last.lost, dt, p[i].last.why);
    }
    finish(p, 3);
}

static void test_kill_rank1(void) { kill_one(1); }
static void test_kill_rank0(void) { kill_one(0); }

static void test_silence(void) {
    child_t c[2] = {{0, 2, WATCH, "r", "a=1", 1.0, 10, 8}, {1, 2, DIE, "r", "a=1", 1.0, 10, 8}};
    rank_proc_t p[2];
    start(p, c, 2, "silence");
    usleep(300000);
    double t0 = mono();
    kill(p[1].pid, SIGSTOP); /* alive, connected, silent: a machine that froze */
    CHECK(get(p[0].fd, &p[0].last, 15000) == 0);
    double dt = p[0].last.seen_at - t0;
    CHECK(p[0].last.lost == 1 && dt > 0.6 && dt < 3.0 && strstr(p[0].last.why, "silent for"),
          "stopped rank found by silence: lost %d after %.3f s (%s)", p[0].last.lost, dt, p[0].last.why);
    finish(p, 2);
}

static void test_farewell(void) {
    child_t c[3] = {{0, 3, WATCH, "r", "a=1", 30, 10, 8}, {1, 3, FAREWELL, "r", "a=1", 30, 10, 8},
                    {2, 3, WATCH, "r", "a=1", 30, 10, 8}};
    rank_proc_t p[3];
    start(p, c, 3, "farewell");
    for (int i = 0; i < 3; i += 2) {
        CHECK(get(p[i].fd, &p[i].last, 15000) == 0);
        CHECK(p[i].last.lost == 1 && strstr(p[i].last.why, "it stopped: device broke"), "rank %d: lost %d (%s)", i,
              p[i].last.lost, p[i].last.why);
    }
    finish(p, 3);
}

/* A stray client sends rank 0 what is no message (a fuzzer, another program on the port):
 * dropped with one line on stderr that says what was wrong and where it came from; the group
 * goes on (no loss). It used to be dropped without a word. */
static void test_garbage(void) {
    char errf[320], ep[320];
    snprintf(errf, sizeof errf, "%s/garbage.err", dir);
    snprintf(ep, sizeof ep, "ipc://%s/garbage", dir);
    child_t c[2] = {{0, 2, WATCH, "r", "a=1", 30, 10, 2.0}, {1, 2, DIE, "r", "a=1", 30, 10, 8}};
    rank_proc_t p[2];
    rank0_stderr = errf;
    start(p, c, 2, "garbage");
    rank0_stderr = NULL;
    void *zctx = zmq_ctx_new(), *s = zmq_socket(zctx, ZMQ_DEALER);
    int zero = 0;
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
    CHECK(zmq_connect(s, ep) == 0, "connect %s", ep);
    usleep(100000);
    zmq_send(s, "\xc1 not msgpack", 15, 0);
    for (int i = 0; i < 30; i++) zmq_send(s, "\x93\x01\x02", 3, 0); /* a flood: rate-limited */
    CHECK(get(p[0].fd, &p[0].last, 15000) == 0);
    CHECK(p[0].last.lost == -1, "garbage is no loss (rank 0 says %d: %s)", p[0].last.lost, p[0].last.why);
    zmq_close(s);
    zmq_ctx_term(zctx);
    finish(p, 2);
    char text[8192] = "";
    FILE *f = fopen(errf, "r");
    size_t n = f ? fread(text, 1, sizeof text - 1, f) : 0;
    text[n] = 0;
    if (f) fclose(f);
    int lines = 0;
    for (char *q = text; (q = strchr(q, '\n')); q++) lines++;
    char want[400];
    snprintf(want, sizeof want, "trainer: rank 0: dropped a data-parallel message from a connection to %s: ", ep);
    CHECK(strstr(text, want), "the line names where it came from: \"%s\"", text);
    /* (10 lines and "21 more" when the burst falls in one second, as it does unless the machine stalls) */
    CHECK(lines >= 11 && lines <= 21 && strstr(text, " more data-parallel messages dropped in the last "),
          "31 bad messages in a burst: 10 lines a second, then one with the count of the others; got %d: \"%s\"", lines, text);
}

static void test_other_flags(void) {
    child_t c[2] = {{0, 2, WATCH, "r", "a=1 b=2 c=3", 30, 10, 0}, {1, 2, WATCH, "r", "a=1 b=3 c=3", 30, 10, 0}};
    rank_proc_t p[2];
    start(p, c, 2, "flags");
    CHECK(p[0].first.rc == DP_ESETUP && strstr(p[0].first.err, "other flags than rank 0: b=3, rank 0 has b=2"), "rank 0: %s",
          p[0].first.err);
    CHECK(p[1].first.rc == DP_ESETUP && strstr(p[1].first.err, "rank 0 refused rank 1") && strstr(p[1].first.err, "b=3"),
          "rank 1: %s", p[1].first.err);
    finish(p, 2);
}

static void test_other_run(void) {
    child_t c[2] = {{0, 2, WATCH, "mine", "a=1", 30, 1.5, 0}, {1, 2, WATCH, "theirs", "a=1", 30, 1.5, 0}};
    rank_proc_t p[2];
    double t0 = mono();
    start(p, c, 2, "run");
    CHECK(p[1].first.rc == DP_ESETUP && strstr(p[1].first.err, "of run 'theirs' came to run 'mine'"), "stray: %s",
          p[1].first.err);
    CHECK(p[0].first.rc == DP_ETIMEOUT && strstr(p[0].first.err, "1 of 2 ranks joined within 2 s (missing: 1)"),
          "rank 0 waits past it, then times out: %s", p[0].first.err);
    CHECK(mono() - t0 < 6, "the time-out is kept (%.1f s)", mono() - t0);
    finish(p, 2);
}

static void test_rank_twice(void) {
    child_t c[3] = {{0, 3, WATCH, "r", "a=1", 30, 5, 0}, {1, 3, WATCH, "r", "a=1", 30, 5, 0}, {1, 3, WATCH, "r", "a=1", 30, 5, 0}};
    rank_proc_t p[3];
    start(p, c, 3, "twice");
    CHECK(p[0].first.rc == DP_ESETUP && strstr(p[0].first.err, "rank 1 joined twice"), "rank 0: %s", p[0].first.err);
    finish(p, 3);
}

static void test_no_rank0(void) {
    child_t c[1] = {{1, 2, WATCH, "r", "a=1", 30, 1, 0}};
    rank_proc_t p[1];
    start(p, c, 1, "alone");
    CHECK(p[0].first.rc == DP_ETIMEOUT && strstr(p[0].first.err, "no welcome from rank 0 within 1 s"), "%s", p[0].first.err);
    finish(p, 1);
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/test_dp_link.XXXXXX");
    if (!mkdtemp(dir)) return 1;
    RUN(test_meet);
    RUN(test_kill_rank1);
    RUN(test_kill_rank0);
    RUN(test_silence);
    RUN(test_farewell);
    RUN(test_garbage);
    RUN(test_other_flags);
    RUN(test_other_run);
    RUN(test_rank_twice);
    RUN(test_no_rank0);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd)) fprintf(stderr, "could not remove %s\n", dir);
    return check_summary();
}
