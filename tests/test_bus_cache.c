/* tests/test_bus_cache.c: the bus's latest-checkpoint-per-run table behind the welcome
 * message: which event wins for a run, eviction order at the cap, and the frame it builds. */
#include <stdlib.h>
#include <string.h>

#include "bus/ckpt_cache.h"
#include "tests/check.h"

#pragma GCC diagnostic ignored "-Wformat-zero-length" /* CHECK(cond) without a message */

static msg_ckpt_t ck(const char *run, uint64_t step, const char *path) {
    msg_ckpt_t c = {.step = step, .time = (double)step, .path = (char *)path, .model = "free"};
    strncpy(c.run, run, WIRE_NAME_LEN - 1);
    return c;
}

/* Decodes the welcome frame into m; returns the number of items or -1. */
static int frame_items(const bus_ckpt_cache_t *c, wire_msg_t *m) {
    void *frame = NULL;
    size_t len = 0;
    char topic[32], err[128];
    if (bus_ckpt_cache_frame(c, &frame, &len) != 0) return -1;
    int rc = wire_event_unpack(frame, len, topic, sizeof topic, m, err, sizeof err);
    free(frame);
    if (rc || strcmp(topic, BUS_WELCOME_TOPIC) || m->type != MSG_CKPT_INDEX) return -1;
    return (int)m->u.ckpt_index.n;
}

static void test_latest_step_wins(void) {
    bus_ckpt_cache_t *c = bus_ckpt_cache_new(8);
    msg_ckpt_t a = ck("r1", 100, "/a"), b = ck("r1", 50, "/b"), d = ck("r1", 100, "/d");
    CHECK(bus_ckpt_cache_update(c, &a) == 1);
    CHECK(bus_ckpt_cache_update(c, &b) == 0, "an older step must not replace");
    CHECK(bus_ckpt_cache_update(c, &d) == 1, "same step: the later event wins");
    CHECK(bus_ckpt_cache_count(c) == 1);
    wire_msg_t m;
    CHECK(frame_items(c, &m) == 1);
    CHECK(strcmp(m.u.ckpt_index.items[0].path, "/d") == 0);
    wire_msg_free(&m);
    bus_ckpt_cache_free(&c);
    CHECK(c == NULL);
}

static void test_eviction_oldest_update(void) {
    bus_ckpt_cache_t *c = bus_ckpt_cache_new(3);
    msg_ckpt_t r1 = ck("r1", 1, "/1"), r2 = ck("r2", 1, "/2"), r3 = ck("r3", 1, "/3");
    msg_ckpt_t r1b = ck("r1", 2, "/1b"), r4 = ck("r4", 1, "/4");
    bus_ckpt_cache_update(c, &r1);
    bus_ckpt_cache_update(c, &r2);
    bus_ckpt_cache_update(c, &r3);
    bus_ckpt_cache_update(c, &r1b); /* r1 is now the freshest; r2 the stalest */
    CHECK(bus_ckpt_cache_update(c, &r4) == 1);
    CHECK(bus_ckpt_cache_count(c) == 3);
    wire_msg_t m;
    CHECK(frame_items(c, &m) == 3);
    const char *want[3] = {"r3", "r1", "r4"}; /* oldest update first */
    for (int i = 0; i < 3 && i < (int)m.u.ckpt_index.n; i++)
        CHECK(strcmp(m.u.ckpt_index.items[i].run, want[i]) == 0, "item %d is %s", i,
              m.u.ckpt_index.items[i].run);
    wire_msg_free(&m);
    bus_ckpt_cache_free(&c);
}

static void test_empty_and_bad_args(void) {
    CHECK(bus_ckpt_cache_new(0) == NULL);
    CHECK(bus_ckpt_cache_new(WIRE_MAX_ITEMS + 1) == NULL);
    bus_ckpt_cache_t *c = bus_ckpt_cache_new(2);
    wire_msg_t m;
    CHECK(frame_items(c, &m) == 0, "an empty cache still makes a valid (empty) index");
    wire_msg_free(&m);
    msg_ckpt_t nul = ck("x", 1, NULL);
    nul.model = NULL;
    CHECK(bus_ckpt_cache_update(c, &nul) == 1);
    CHECK(frame_items(c, &m) == 1 && m.u.ckpt_index.items[0].path == NULL);
    wire_msg_free(&m);
    msg_ckpt_t bad = ck("y", 1, "/y");
    memset(bad.run, 'z', WIRE_NAME_LEN); /* unterminated name */
    CHECK(bus_ckpt_cache_update(c, &bad) == WIRE_ERR_ARG);
    bus_ckpt_cache_free(&c);
    bus_ckpt_cache_free(&c); /* idempotent on NULL */
}

/* A ckpt whose run, path or model is not UTF-8 is not kept: the welcome frame built after it
 * still decodes, and names only the good runs. */
static void test_not_utf8_not_cached(void) {
    bus_ckpt_cache_t *c = bus_ckpt_cache_new(4);
    msg_ckpt_t good = ck("good", 5, "/runs/good/ckpt-5");
    CHECK(bus_ckpt_cache_update(c, &good) == 1);
    msg_ckpt_t bad_path = ck("good", 9, "/runs/\xff/ckpt-9");
    CHECK(bus_ckpt_cache_update(c, &bad_path) == WIRE_ERR_MISTYPED);
    msg_ckpt_t bad_run = ck("r\xc3", 1, "/runs/r/ckpt-1");
    CHECK(bus_ckpt_cache_update(c, &bad_run) == WIRE_ERR_MISTYPED);
    msg_ckpt_t bad_model = ck("m", 1, "/runs/m/ckpt-1");
    bad_model.model = "fr\xe9" "e";
    CHECK(bus_ckpt_cache_update(c, &bad_model) == WIRE_ERR_MISTYPED);
    wire_msg_t m;
    CHECK(frame_items(c, &m) == 1 && m.u.ckpt_index.items[0].step == 5, "only the good run, step 5");
    wire_msg_free(&m);
    bus_ckpt_cache_free(&c);
}

int main(void) {
    RUN(test_latest_step_wins);
    RUN(test_eviction_oldest_update);
    RUN(test_empty_and_bad_args);
    RUN(test_not_utf8_not_cached);
    return check_summary();
}
