/* tests/test_loader_client.c: the client against live bin/loader processes.
 *
 * Two loaders serve one dataset; the client fetches 300 batches while loader 0 is killed with
 * SIGKILL at batch 100 and restarted at batch 200. Every batch must equal the one the batch
 * function computes in-process, in order, none missing or repeated. Then a "restarted
 * trainer" opens at a saved cursor and must get exactly the following batches. Also: fresh
 * clients get their first batch without waiting out a time-out, a loader added from the
 * on_wait hook is used at once, a third loader serving another dataset is never used, a loader
 * that stops answering is named when it does and when it answers again, and the
 * server's error replies to bad and garbage requests, and its info reply. Needs bin/loader
 * (built by `make all`, which tests/run.sh runs after). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

#include "bus/utf8.h"
#include "bus/wire.h"
#include "common/progress.h"
#include "loader/batch.h"
#include "loader/client.h"
#include "loader/mkdata.h"
#include "tests/check.h"
#include "tests/mp_frame.h"

static char tmp[1024], data[1200], data2[1200], ep[3][1200];
static pid_t kids[3];
static const loader_mkdata_t DATA = {.seed = 9, .n_docs = 3000, .vocab_size = 3000, .min_len = 1, .max_len = 200};
/* another dataset of the same vocabulary, served by loader 2 */
static const loader_mkdata_t DATA2 = {.seed = 10, .n_docs = 2500, .vocab_size = 3000, .min_len = 1, .max_len = 200};

static pid_t loader_start(int i) {
    pid_t p = fork();
    if (p == 0) {
        char name[16];
        snprintf(name, sizeof name, "t%d", i);
        execl("bin/loader", "bin/loader", "--data", i == 2 ? data2 : data, "--bind", ep[i], "--name", name,
              "--val-docs", "200", "--quiet", (char *)NULL);
        _exit(127);
    }
    return p;
}

static void kids_kill(void) {
    for (int i = 0; i < 3; i++)
        if (kids[i] > 0) {
            kill(kids[i], SIGKILL);
            waitpid(kids[i], NULL, 0);
            kids[i] = 0;
        }
}

static void on_fatal(int sig) {
    kids_kill();
    signal(sig, SIG_DFL);
    raise(sig);
}

static loader_client_cfg_t client_cfg(void) {
    loader_client_cfg_t c = {.seed = 77, .B = 4, .T = 64, .rank = 0, .world = 1, .layout = WIRE_PACK,
                             .split = WIRE_TRAIN, .window = 8, .timeout_ms = 700, .give_up_ms = 30000};
    return c;
}

/* Compares a delivered batch with the batch function's; returns 1 when equal. */
static int batch_ok(loader_src_t *src, const loader_client_cfg_t *cc, const msg_batch_t *b, uint64_t epoch,
                    uint64_t step, uint32_t *want) {
    char err[256];
    loader_params_t p = {.seed = cc->seed, .epoch = epoch, .step = step, .rank = cc->rank, .world = cc->world,
                         .B = cc->B, .T = cc->T, .layout = cc->layout, .split = cc->split};
    if (loader_batch_make(src, &p, want, NULL, NULL, err, sizeof err)) return 0;
    return b->epoch == epoch && b->step == step && b->tokens &&
           memcmp(b->tokens, want, (size_t)cc->B * (cc->T + 1) * sizeof *want) == 0;
}

static void *zctx;
static loader_src_t *src;
static int raw_msg(const wire_msg_t *q, wire_msg_t *rep);

static void test_kill_and_restart(void) {
    loader_client_cfg_t cc = client_cfg();
    const char *eps[2] = {ep[0], ep[1]};
    char err[256] = "";
    loader_client_t *c = NULL;
    CHECK(loader_client_open(&c, zctx, eps, 2, &cc, err, sizeof err) == 0, "%s", err);
    if (!c) return;
    uint32_t *want = malloc((size_t)cc.B * (cc.T + 1) * sizeof *want);
    uint64_t epoch = 0, step = 0, spe = 0;
    int bad = 0, got = 0;
    for (int k = 0; k < 300; k++) {
        if (k == 100) { kill(kids[0], SIGKILL); waitpid(kids[0], NULL, 0); kids[0] = 0; }
        if (k == 200) kids[0] = loader_start(0);
        msg_batch_t b;
        int rc = loader_client_next(c, &b, err, sizeof err);
        if (rc) { CHECK(rc == 0, "batch %d: %s", k, err); break; }
        spe = loader_client_steps_per_epoch(c);
        bad += !batch_ok(src, &cc, &b, epoch, step, want);
        got++;
        loader_batch_release(&b);
        if (++step == spe) { step = 0; epoch++; }
    }
    CHECK(got == 300 && bad == 0, "%d of %d batches wrong or out of order", bad, got);
    uint64_t ce, cs, sent, reissued, dropped;
    loader_client_cursor(c, &ce, &cs);
    CHECK(ce == epoch && cs == step, "cursor %llu/%llu", (unsigned long long)ce, (unsigned long long)cs);
    loader_client_stats(c, &sent, &reissued, &dropped);
    fprintf(stderr, "  300 batches: %llu requests sent, %llu re-issued, %llu replies dropped, %llu steps/epoch\n",
            (unsigned long long)sent, (unsigned long long)reissued, (unsigned long long)dropped,
            (unsigned long long)spe);
    loader_client_close(&c);
    CHECK(c == NULL, "close did not NULL the handle");
    free(want);
}

/* A trainer restarted at a cursor near the end of an epoch gets the next batches, crossing
 * into the next epoch. */
static void test_resume_at_cursor(void) {
    loader_client_cfg_t cc = client_cfg();
    cc.layout = WIRE_PAD;
    cc.world = 2;
    cc.rank = 1;
    char err[256] = "";
    loader_params_t p = {.world = 2, .B = cc.B, .T = cc.T, .layout = WIRE_PAD, .split = WIRE_TRAIN};
    uint64_t spe = 0;
    loader_steps_per_epoch(src, &p, &spe, err, sizeof err);
    cc.start_epoch = 3;
    cc.start_step = spe - 5;
    const char *eps[1] = {ep[1]};
    loader_client_t *c = NULL;
    CHECK(loader_client_open(&c, zctx, eps, 1, &cc, err, sizeof err) == 0, "%s", err);
    if (!c) return;
    CHECK(loader_client_add_endpoint(c, ep[0]) == 0, "add endpoint");
    uint32_t *want = malloc((size_t)cc.B * (cc.T + 1) * sizeof *want);
    uint64_t epoch = 3, step = spe - 5;
    int bad = 0;
    for (int k = 0; k < 20; k++) {
        msg_batch_t b;
        if (loader_client_next(c, &b, err, sizeof err)) { CHECK(0, "batch %d: %s", k, err); break; }
        bad += !batch_ok(src, &cc, &b, epoch, step, want) || !b.mask;
        loader_batch_release(&b);
        if (++step == spe) { step = 0; epoch++; }
    }
    CHECK(bad == 0, "%d resumed batches wrong", bad);
    loader_client_close(&c);

    /* a configuration the dataset cannot serve is an error, not a hang */
    cc = client_cfg();
    cc.T = 2000000;
    CHECK(loader_client_open(&c, zctx, eps, 1, &cc, err, sizeof err) == 0, "%s", err);
    msg_batch_t b;
    CHECK(loader_client_next(c, &b, err, sizeof err) == LOADER_EPARAM, "T=2e6 accepted: %s", err);
    loader_client_close(&c);
    free(want);
}

/* A client opened a moment before its connection is up (the trainer's case) must not lose a
 * whole time-out on its first request: ten fresh clients in a row, each with timeout_ms 10000,
 * must each have their first batch within half of it (0.2 s is usual; the margin is for a
 * loaded machine). Before the fix every one waited the whole time-out: the info_req was
 * refused by ZMQ_IMMEDIATE and only re-sent after it. */
static void test_first_request_fast(void) {
    loader_client_cfg_t cc = client_cfg();
    cc.timeout_ms = 10000;
    const char *eps[1] = {ep[1]};
    double worst = 0;
    for (int k = 0; k < 10; k++) {
        char err[256] = "";
        loader_client_t *c = NULL;
        double t0 = progress_now();
        CHECK(loader_client_open(&c, zctx, eps, 1, &cc, err, sizeof err) == 0, "%s", err);
        if (!c) return;
        msg_batch_t b;
        int rc = loader_client_next(c, &b, err, sizeof err);
        double dt = progress_now() - t0;
        CHECK(rc == 0, "start %d: %s", k, err);
        if (rc == 0) loader_batch_release(&b);
        if (dt > worst) worst = dt;
        loader_client_close(&c);
    }
    CHECK(worst < 5, "the slowest of 10 first batches took %.2f s (time-out 10 s)", worst);
    fprintf(stderr, "  10 fresh clients: slowest first batch %.3f s\n", worst);
}

/* The time the caller spends away from the client (a training step longer than give_up_ms: a
 * large model on a CPU, or a trainer stopped with SIGSTOP and continued) is not time the loaders
 * failed to answer: after steps of 1.5 s with give_up_ms 1000, next() must still deliver, in
 * order. Before the fix it failed at once with "no loader answered", batches ready in its window. */
static void test_long_steps(void) {
    loader_client_cfg_t cc = client_cfg();
    cc.give_up_ms = 1000;
    const char *eps[1] = {ep[1]};
    char err[256] = "";
    loader_client_t *c = NULL;
    CHECK(loader_client_open(&c, zctx, eps, 1, &cc, err, sizeof err) == 0, "%s", err);
    if (!c) return;
    uint32_t *want = malloc((size_t)cc.B * (cc.T + 1) * sizeof *want);
    int bad = 0, got = 0;
    for (int k = 0; k < 3; k++) {
        msg_batch_t b;
        int rc = loader_client_next(c, &b, err, sizeof err);
        if (rc) { CHECK(rc == 0, "batch %d after a 1.5 s step: %s", k, err); break; }
        bad += !batch_ok(src, &cc, &b, 0, (uint64_t)k, want);
        got++;
        loader_batch_release(&b);
        usleep(1500 * 1000);
    }
    CHECK(got == 3 && bad == 0, "%d of %d batches wrong", bad, got);
    loader_client_close(&c);
    /* and a loader that is gone is still given up on: give_up_ms of waiting inside next() */
    cc.give_up_ms = 500;
    const char *none[1] = {"ipc:///nonexistent/ft-test-no-loader"};
    CHECK(loader_client_open(&c, zctx, none, 1, &cc, err, sizeof err) == 0, "%s", err);
    if (c) {
        msg_batch_t b;
        double t0 = progress_now();
        int rc = loader_client_next(c, &b, err, sizeof err);
        double dt = progress_now() - t0;
        CHECK(rc != 0 && strstr(err, "no loader answered") && dt >= 0.45 && dt < 10,
              "no loader: rc %d after %.2f s: %s", rc, dt, err);
        loader_client_close(&c);
    }
    free(want);
}

/* The on_wait hook runs while next() waits, so a loader added there is used at once: the only
 * known endpoint has no loader behind it, the hook adds a live one after a few passes. */
typedef struct {
    loader_client_t *c;
    int calls;
} hook_t;

static void add_live_loader(void *arg) {
    hook_t *h = arg;
    if (++h->calls == 5) loader_client_add_endpoint(h->c, ep[1]);
}

static void test_add_while_waiting(void) {
    loader_client_cfg_t cc = client_cfg();
    cc.give_up_ms = 20000;
    hook_t h = {0};
    cc.on_wait = add_live_loader;
    cc.hook_arg = &h;
    char dead[1300], err[256] = "";
    snprintf(dead, sizeof dead, "ipc://%s/nobody", tmp);
    const char *eps[1] = {dead};
    CHECK(loader_client_open(&h.c, zctx, eps, 1, &cc, err, sizeof err) == 0, "%s", err);
    if (!h.c) return;
    uint32_t *want = malloc((size_t)cc.B * (cc.T + 1) * sizeof *want);
    double t0 = progress_now();
    int bad = 0, rc = 0;
    for (uint64_t k = 0; k < 5 && !rc; k++) {
        msg_batch_t b;
        rc = loader_client_next(h.c, &b, err, sizeof err);
        CHECK(rc == 0, "batch %llu: %s", (unsigned long long)k, err);
        if (!rc) bad += !batch_ok(src, &cc, &b, 0, k, want);
        loader_batch_release(&b);
    }
    CHECK(bad == 0 && h.calls >= 5, "%d wrong batches, %d hook calls", bad, h.calls);
    CHECK(progress_now() - t0 < 10, "the added loader was used only after %.1f s", progress_now() - t0);
    loader_client_close(&h.c);
    free(want);
}

/* A loader of another dataset is asked info_req, reported once and never used: every batch
 * comes from the dataset the client expects, whichever loader answers first. */
static void note(void *arg, const char *line) {
    int *n = arg;
    if (strstr(line, ep[2]) && strstr(line, "not used")) ++*n;
    else fprintf(stderr, "  unexpected notice: %s\n", line);
}

static void test_foreign_loader(void) {
    loader_client_cfg_t cc = client_cfg();
    char err[256] = "";
    loader_params_t p = {.world = 1, .B = cc.B, .T = cc.T, .layout = cc.layout, .split = WIRE_TRAIN};
    uint64_t spe = 0;
    loader_steps_per_epoch(src, &p, &spe, err, sizeof err);
    const dataset_meta_t *dm = loader_src_meta(src);
    /* what the loaders report for the train split of DATA */
    wire_msg_t q = {.type = MSG_INFO_REQ}, r;
    q.u.info_req = (msg_info_req_t){.req_id = 5, .world = 1, .B = cc.B, .T = cc.T, .layout = cc.layout, .split = WIRE_TRAIN};
    CHECK(raw_msg(&q, &r) == 0 && r.type == MSG_INFO, "info from loader 1");
    if (r.type != MSG_INFO) return;
    loader_identity_t want_id;
    loader_identity_from_info(&want_id, &r.u.info);
    wire_msg_free(&r);
    CHECK(want_id.vocab_size == dm->vocab_size && !strcmp(want_id.tokenizer_hash, dm->tokenizer_hash), "identity");
    int notices = 0;
    cc.expect = &want_id;
    cc.notice = note;
    cc.hook_arg = &notices;
    const char *eps[2] = {ep[2], ep[1]}; /* the foreign one first */
    loader_client_t *c = NULL;
    CHECK(loader_client_open(&c, zctx, eps, 2, &cc, err, sizeof err) == 0, "%s", err);
    if (!c) return;
    uint32_t *want = malloc((size_t)cc.B * (cc.T + 1) * sizeof *want);
    int bad = 0;
    for (uint64_t k = 0; k < 40; k++) {
        msg_batch_t b;
        if (loader_client_next(c, &b, err, sizeof err)) { CHECK(0, "batch %llu: %s", (unsigned long long)k, err); break; }
        bad += !batch_ok(src, &cc, &b, 0, k, want);
        loader_batch_release(&b);
    }
    CHECK(bad == 0, "%d of 40 batches not from the expected dataset", bad);
    CHECK(loader_client_steps_per_epoch(c) == spe, "steps per epoch %llu, want %llu",
          (unsigned long long)loader_client_steps_per_epoch(c), (unsigned long long)spe);
    CHECK(notices == 1, "%d notices about the foreign loader (want 1)", notices);
    loader_client_close(&c);
    free(want);
}

/* A loader that stops answering (SIGSTOP) is named once through cfg.notice and again when it
 * answers (SIGCONT, sent from the on_wait hook while next() waits); a short stall soon after
 * its return is not named (a link slower than timeout_ms would be named every few seconds),
 * one that lasts 5 x timeout_ms is. timeout_ms 300: the grace is 1.5 s (margins for a loaded machine). */
typedef struct {
    double cont_at;        /* progress_now() after which the loader gets SIGCONT; 0: sent */
    int lost, back, other; /* the notices seen */
} stall_t;

static void stall_note(void *arg, const char *line) {
    stall_t *s = arg;
    if (strstr(line, ep[1]) && strstr(line, "has not answered for ")) s->lost++;
    else if (strstr(line, ep[1]) && strstr(line, "answers again")) s->back++;
    else s->other++, fprintf(stderr, "  unexpected notice: %s\n", line);
}

static void stall_wait(void *arg) {
    stall_t *s = arg;
    if (s->cont_at > 0 && progress_now() >= s->cont_at) {
        kill(kids[1], SIGCONT);
        s->cont_at = 0;
    }
}

/* SIGSTOP, then the next batch with SIGCONT after stop_s; 1 when the batch came. */
static int stalled_batch(loader_client_t *c, stall_t *s, double stop_s) {
    char err[256];
    msg_batch_t b;
    kill(kids[1], SIGSTOP);
    s->cont_at = progress_now() + stop_s;
    int rc = loader_client_next(c, &b, err, sizeof err);
    if (s->cont_at > 0) kill(kids[1], SIGCONT), s->cont_at = 0;
    if (rc) return fprintf(stderr, "  %s\n", err), 0;
    loader_batch_release(&b);
    /* the replies to the copies sent during the stall come now: take them */
    for (int k = 0; k < 8 && !loader_client_next(c, &b, err, sizeof err); k++) loader_batch_release(&b);
    return 1;
}

static void test_silent_loader(void) {
    loader_client_cfg_t cc = client_cfg();
    cc.timeout_ms = 300;
    cc.window = 1; /* one request at a time: each stall holds the batch next() waits for */
    stall_t s = {0};
    cc.notice = stall_note;
    cc.on_wait = stall_wait;
    cc.hook_arg = &s;
    const char *eps[1] = {ep[1]};
    char err[256] = "";
    loader_client_t *c = NULL;
    CHECK(loader_client_open(&c, zctx, eps, 1, &cc, err, sizeof err) == 0, "%s", err);
    if (!c) return;
    msg_batch_t b;
    CHECK(loader_client_next(c, &b, err, sizeof err) == 0, "%s", err);
    loader_batch_release(&b);
    CHECK(stalled_batch(c, &s, 0.8) && s.lost == 1 && s.back == 1, "a 0.8 s stall: %d lost, %d back (want 1, 1)",
          s.lost, s.back);
    CHECK(stalled_batch(c, &s, 0.5) && s.lost == 1 && s.back == 1, "a short stall right after: %d lost, %d back (want "
          "still 1, 1)", s.lost, s.back);
    CHECK(stalled_batch(c, &s, 2.2) && s.lost == 2 && s.back == 2, "a 2.2 s stall right after: %d lost, %d back (want "
          "2, 2)", s.lost, s.back);
    CHECK(s.other == 0, "%d other notices", s.other);
    loader_client_close(&c);
}

/* Raw REQ exchanges with a loader: garbage, wrong type, bad parameters, info. */
static int raw(const void *body, size_t len, wire_msg_t *rep) {
    void *s = zmq_socket(zctx, ZMQ_REQ);
    int zero = 0, to = 10000, rc = -1;
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(s, ZMQ_RCVTIMEO, &to, sizeof to);
    zmq_connect(s, ep[1]);
    char buf[4096], err[256];
    if (zmq_send(s, body, len, 0) >= 0) {
        int n = zmq_recv(s, buf, sizeof buf, 0);
        if (n > 0 && n <= (int)sizeof buf && wire_decode(buf, n, rep, err, sizeof err) == WIRE_OK) rc = 0;
    }
    zmq_close(s);
    return rc;
}

static int raw_msg(const wire_msg_t *q, wire_msg_t *rep) {
    void *buf;
    size_t len;
    if (wire_encode(q, &buf, &len) != WIRE_OK) return -1;
    int rc = raw(buf, len, rep);
    free(buf);
    return rc;
}

static void test_error_replies(void) {
    wire_msg_t r, q;
    memset(&q, 0, sizeof q);
    CHECK(raw("\xc1\xff garbage", 10, &r) == 0 && r.type == MSG_ERROR && r.u.error.code == LOADER_EMALFORMED,
          "garbage frame");
    wire_msg_free(&r);
    CHECK(raw("", 0, &r) == 0 && r.type == MSG_ERROR && r.u.error.code == LOADER_EMALFORMED, "empty frame");
    wire_msg_free(&r);
    q.type = MSG_LOG;
    snprintf(q.u.log.program, sizeof q.u.log.program, "test");
    q.u.log.line = "hello";
    CHECK(raw_msg(&q, &r) == 0 && r.type == MSG_ERROR && r.u.error.code == LOADER_ETYPE, "log to a loader");
    wire_msg_free(&r);
    memset(&q, 0, sizeof q);
    q.type = MSG_BATCH_REQ;
    q.u.batch_req = (msg_batch_req_t){.req_id = 42, .world = 1, .B = 0, .T = 8};
    CHECK(raw_msg(&q, &r) == 0 && r.type == MSG_ERROR && r.u.error.code == LOADER_EPARAM &&
          r.u.error.req_id == 42, "B=0");
    wire_msg_free(&r);
    q.u.batch_req = (msg_batch_req_t){.req_id = 43, .world = 1, .B = 1, .T = 8, .step = 1ull << 40};
    CHECK(raw_msg(&q, &r) == 0 && r.type == MSG_ERROR && r.u.error.code == LOADER_ERANGE, "step 2^40");
    wire_msg_free(&r);
    q.u.batch_req = (msg_batch_req_t){.req_id = 44, .world = 1, .B = 1, .T = 8, .epoch = 1ull << 40};
    CHECK(raw_msg(&q, &r) == 0 && r.type == MSG_ERROR && r.u.error.code == LOADER_ERANGE, "epoch 2^40");
    wire_msg_free(&r);
    q.u.batch_req = (msg_batch_req_t){.req_id = 45, .world = 1, .B = 1, .T = 1u << 21};
    CHECK(raw_msg(&q, &r) == 0 && r.type == MSG_ERROR && r.u.error.code == LOADER_EPARAM, "T too big");
    wire_msg_free(&r);
    memset(&q, 0, sizeof q);
    q.type = MSG_INFO_REQ;
    q.u.info_req = (msg_info_req_t){.req_id = 46, .world = 1, .B = 2, .T = 10, .layout = WIRE_PAD, .split = WIRE_VAL};
    CHECK(raw_msg(&q, &r) == 0 && r.type == MSG_INFO, "info");
    if (r.type == MSG_INFO) {
        CHECK(r.u.info.req_id == 46 && r.u.info.n_docs == 200 && r.u.info.steps_per_epoch == 100,
              "info: %llu docs, %llu steps", (unsigned long long)r.u.info.n_docs,
              (unsigned long long)r.u.info.steps_per_epoch);
        CHECK(r.u.info.vocab_size == DATA.vocab_size && r.u.info.eot_id == 0, "info vocabulary");
    }
    wire_msg_free(&r);
}

/* Requests a client written from PROTOCOL.md may send: an unknown layout or split is a
 * parameter error (-3) that echoes the request's req_id; a type name that is not UTF-8 gets
 * an error whose message is UTF-8 (a msgpack str), whatever bytes it quotes. */
static void test_error_codes_and_text(void) {
    static const char *layouts[][2] = {{"spiral", "train"}, {"pack", "test"}, {"PACK", "val"}};
    for (int i = 0; i < 3; i++) {
        size_t len;
        void *f = mp_frame(&len, "usuuuuuuuuss", "v", 1ull, "type", "batch_req", "req_id", 77ull + i,
                           "seed", 1ull, "epoch", 0ull, "step", 0ull, "rank", 0ull, "world", 1ull,
                           "B", 2ull, "T", 8ull, "layout", layouts[i][0], "split", layouts[i][1]);
        wire_msg_t r;
        CHECK(raw(f, len, &r) == 0 && r.type == MSG_ERROR, "layout %s split %s", layouts[i][0], layouts[i][1]);
        if (r.type == MSG_ERROR)
            CHECK(r.u.error.code == LOADER_EPARAM && r.u.error.req_id == 77ull + i, "code %d req_id %llu: %s",
                  r.u.error.code, (unsigned long long)r.u.error.req_id, r.u.error.message);
        wire_msg_free(&r);
        free(f);
    }
    /* same for info_req */
    size_t len;
    void *f = mp_frame(&len, "usuuuuss", "v", 1ull, "type", "info_req", "req_id", 90ull, "world", 1ull,
                       "B", 2ull, "T", 8ull, "layout", "pack", "split", "dev");
    wire_msg_t r;
    CHECK(raw(f, len, &r) == 0 && r.type == MSG_ERROR && r.u.error.code == LOADER_EPARAM &&
          r.u.error.req_id == 90, "info_req split dev");
    wire_msg_free(&r);
    free(f);
    /* a missing field is malformed, but the req_id read before it still comes back */
    f = mp_frame(&len, "usu", "v", 1ull, "type", "batch_req", "req_id", 91ull);
    CHECK(raw(f, len, &r) == 0 && r.type == MSG_ERROR && r.u.error.code == LOADER_EMALFORMED &&
          r.u.error.req_id == 91, "missing fields");
    wire_msg_free(&r);
    free(f);
    /* bytes that are not UTF-8, quoted in the error message */
    f = mp_frame(&len, "us", "v", 1ull, "type", "\xff\xfe\xc3(batch_req");
    memset(&r, 0, sizeof r);
    int got = raw(f, len, &r);
    CHECK(got == 0 && r.type == MSG_ERROR && r.u.error.code == LOADER_EMALFORMED, "bad type name");
    CHECK(got == 0 && r.u.error.message && wire_utf8_valid(r.u.error.message, strlen(r.u.error.message)) &&
          strstr(r.u.error.message, "(batch_req"), "message: %s", r.u.error.message ? r.u.error.message : "-");
    wire_msg_free(&r);
    free(f);
}

int main(void) {
    const char *t = getenv("FT_TEST_TMP");
    snprintf(tmp, sizeof tmp, "%s/test_loader_client.%d", t ? t : "/tmp", (int)getpid());
    mkdir(tmp, 0775);
    snprintf(data, sizeof data, "%s/ds", tmp);
    snprintf(data2, sizeof data2, "%s/ds2", tmp);
    for (int i = 0; i < 3; i++) snprintf(ep[i], sizeof ep[i], "ipc://%s/l%d", tmp, i);
    signal(SIGINT, on_fatal);
    signal(SIGTERM, on_fatal);
    signal(SIGABRT, on_fatal);
    signal(SIGSEGV, on_fatal);
    atexit(kids_kill);
    char err[256] = "";
    CHECK(loader_mkdata_write(&DATA, data, err, sizeof err) == 0, "%s", err);
    CHECK(loader_mkdata_write(&DATA2, data2, err, sizeof err) == 0, "%s", err);
    CHECK(loader_src_open(&src, data, NULL, 200, err, sizeof err) == 0, "%s", err);
    if (access("bin/loader", X_OK) != 0) {
        CHECK(0, "bin/loader not built (run from the repository root after make)");
        return check_summary();
    }
    kids[0] = loader_start(0);
    kids[1] = loader_start(1);
    kids[2] = loader_start(2);
    zctx = zmq_ctx_new();
    if (src) {
        RUN(test_first_request_fast);
        RUN(test_kill_and_restart);
        RUN(test_resume_at_cursor);
        RUN(test_error_replies);
        RUN(test_error_codes_and_text);
        RUN(test_add_while_waiting);
        RUN(test_long_steps);
        RUN(test_foreign_loader);
        RUN(test_silent_loader);
    }
    zmq_ctx_term(zctx);
    kids_kill();
    loader_src_close(&src);
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmp);
    return check_summary();
}
