/* tests/test_live_store.c: bin/live's store (live/store.h): the downsampling rule that bounds a
 * series, a repeated point that changes nothing, a resume, the update ring's numbering and its
 * "fell behind" answer, an update larger than the caller's buffer, stages going gone and the
 * trainer's row. */
#include <stdlib.h>
#include <string.h>

#include "live/store.h"
#include "tests/check.h"

static live_store_t *store(int cap, int ring) {
    live_limits_t lim = live_limits_default();
    lim.series_cap = cap;
    lim.ring_entries = ring;
    live_store_t *s = NULL;
    CHECK(live_store_new(&s, &lim) == 0);
    return s;
}

static void metric(live_store_t *s, live_src src, const char *run, uint64_t step, double v, double mono) {
    wire_kv_t kv[1];
    uint32_t n = 0;
    wire_kv_add(kv, &n, "loss", v);
    live_store_metrics(s, src, run, step, 1.0, kv, n, mono);
}

static json_t *points(live_store_t *s, const char *run) {
    json_t *o = live_store_series(s, run, "metrics", "loss", 0, 1e18, 1 << 20);
    json_t *p = json_incref(json_object_get(o, "points"));
    json_decref(o);
    return p;
}

/* 100,000 steps into a series of 64 points: at most 64 kept, increasing, the newest 16
 * consecutive, the first and last steps kept. */
static void test_thinning_bounds_a_series(void) {
    live_store_t *s = store(64, 64);
    for (uint64_t i = 1; i <= 100000; i++) metric(s, LIVE_SRC_BUS, "r", i, (double)i, 0);
    json_t *p = points(s, "r");
    size_t n = json_array_size(p);
    CHECK(n <= 64 && n >= 48, "%zu points", n);
    long long prev = -1;
    int sorted = 1;
    for (size_t i = 0; i < n; i++) {
        long long st = json_integer_value(json_array_get(json_array_get(p, i), 0));
        sorted &= st > prev;
        prev = st;
    }
    CHECK(sorted, "steps increasing");
    CHECK(json_integer_value(json_array_get(json_array_get(p, 0), 0)) == 1, "the first step stays");
    CHECK(prev == 100000, "the last step is %lld", prev);
    for (size_t i = n - 16; i < n; i++)
        CHECK(json_integer_value(json_array_get(json_array_get(p, i), 0)) == (json_int_t)(100000 - (n - 1 - i)),
              "the newest quarter at full resolution");
    json_decref(p);
    live_store_free(&s);
}

/* the same point from the bus and then from disk: one update, not two */
static void test_same_point_changes_nothing(void) {
    live_store_t *s = store(64, 64);
    metric(s, LIVE_SRC_BUS, "r", 7, 2.5, 0);
    uint64_t q = live_store_seq(s);
    metric(s, LIVE_SRC_DISK, "r", 7, 2.5, 0);
    CHECK(live_store_seq(s) == q, "no update for an unchanged point");
    metric(s, LIVE_SRC_BUS, "r", 7, 3.5, 0);
    CHECK(live_store_seq(s) == q + 1, "a changed value is an update");
    live_store_free(&s);
}

/* steps 1..10 from the bus, then 5: a resume drops 5..10 first */
static void test_resume_truncates(void) {
    live_store_t *s = store(64, 64);
    for (uint64_t i = 1; i <= 10; i++) metric(s, LIVE_SRC_BUS, "r", i, 1, 0);
    metric(s, LIVE_SRC_BUS, "r", 5, 9, 0);
    json_t *p = points(s, "r");
    CHECK(json_array_size(p) == 5, "%zu points", json_array_size(p));
    CHECK(json_real_value(json_array_get(json_array_get(p, 4), 1)) == 9, "step 5 holds the resumed value");
    json_decref(p);
    char buf[8192];
    uint64_t next;
    size_t need;
    live_store_lock(s);
    long n = live_store_sse_locked(s, 11, buf, sizeof buf, &next, &need);
    live_store_unlock(s);
    CHECK(n > 0 && strstr(buf, "event: resume") && strstr(buf, "\"from\":5"), "a resume update");
    live_store_free(&s);
}

/* 40 updates in a ring of 16: from 1 is too old (-1), the last 16 come with consecutive ids */
static void test_ring_numbering_and_reset(void) {
    live_store_t *s = store(64, 16);
    for (uint64_t i = 1; i <= 40; i++) metric(s, LIVE_SRC_BUS, "r", i, 1, 0);
    CHECK(live_store_seq(s) == 40);
    char buf[1 << 16];
    uint64_t next;
    size_t need;
    live_store_lock(s);
    CHECK(live_store_sse_locked(s, 1, buf, sizeof buf, &next, &need) == -1, "fell behind the ring");
    long n = live_store_sse_locked(s, 25, buf, sizeof buf, &next, &need);
    live_store_unlock(s);
    buf[n > 0 ? n : 0] = 0;
    CHECK(next == 41, "next %llu", (unsigned long long)next);
    int ids = 0, ok = 1;
    for (char *p = strstr(buf, "id: "); p; p = strstr(p + 1, "id: ")) ok &= atoi(p + 4) == 25 + ids++;
    CHECK(ids == 16 && ok, "%d ids, consecutive %d", ids, ok);
    live_store_lock(s);
    CHECK(live_store_sse_locked(s, 41, buf, sizeof buf, &next, &need) == 0 && next == 41, "nothing new");
    live_store_unlock(s);
    live_store_free(&s);
}

/* an update larger than the buffer: nothing written, *need says how much */
static void test_update_larger_than_buffer(void) {
    live_store_t *s = store(64, 16);
    metric(s, LIVE_SRC_BUS, "r", 1, 1, 0);
    char buf[16];
    uint64_t next;
    size_t need = 0;
    live_store_lock(s);
    long n = live_store_sse_locked(s, 1, buf, sizeof buf, &next, &need);
    live_store_unlock(s);
    CHECK(n == 0 && need > sizeof buf && next == 1, "n %ld need %zu", n, need);
    live_store_free(&s);
}

/* a loader that stops beating is gone after gone_after, one that says bye at once */
static void test_stages_gone(void) {
    live_store_t *s = store(64, 64);
    msg_loader_t l = {.name = "l0", .endpoint = "ipc://x", .dataset = "d", .pid = 1, .served = 5};
    live_store_loader(s, &l, 100.0);
    msg_stage_t st = {.program = "evaluator", .name = "val", .pid = 2, .run = "r", .endpoint = "", .state = "idle"};
    live_store_stage(s, &st, 100.0);
    live_store_tick(s, 102.0);
    json_t *h = live_store_health(s, 102.0);
    json_t *a = json_object_get(h, "stages");
    CHECK(json_array_size(a) == 2 && json_is_true(json_object_get(json_array_get(a, 0), "alive")), "alive at 2 s");
    json_decref(h);
    live_store_tick(s, 103.5);
    h = live_store_health(s, 103.5);
    a = json_object_get(h, "stages");
    int gone = 0;
    for (size_t i = 0; i < json_array_size(a); i++) gone += json_is_false(json_object_get(json_array_get(a, i), "alive"));
    CHECK(gone == 2, "both gone after 3.5 s");
    json_decref(h);
    st.bye = 1;
    live_store_stage(s, &st, 104.0);
    h = live_store_health(s, 104.0);
    a = json_object_get(h, "stages");
    int bye = 0;
    for (size_t i = 0; i < json_array_size(a); i++) bye += json_is_true(json_object_get(json_array_get(a, i), "bye"));
    CHECK(bye == 1, "a bye is shown as stopped");
    json_decref(h);
    live_store_free(&s);
}

/* the trainer's row: alive while metrics come, quiet after; a data-parallel rank's topic is
 * not the run's (live.c filters it; here the store sees only the run's events) */
static void test_trainer_row(void) {
    live_store_t *s = store(64, 64);
    wire_kv_t kv[2];
    uint32_t n = 0;
    wire_kv_add(kv, &n, "loss", 1);
    wire_kv_add(kv, &n, "data_wait_s", 0.25);
    live_store_metrics(s, LIVE_SRC_BUS, "r", 1, 1, kv, n, 10.0);
    live_store_tick(s, 10.5);
    json_t *h = live_store_health(s, 10.5);
    json_t *t = json_array_get(json_object_get(h, "stages"), 0);
    CHECK(!strcmp(json_string_value(json_object_get(t, "kind")), "trainer") && json_is_true(json_object_get(t, "alive")) &&
          json_real_value(json_object_get(t, "data_wait_s")) == 0.25, "the trainer row");
    json_decref(h);
    live_store_tick(s, 14.0);
    h = live_store_health(s, 14.0);
    t = json_array_get(json_object_get(h, "stages"), 0);
    CHECK(json_is_false(json_object_get(t, "alive")), "quiet after 3 s without a step");
    json_decref(h);
    live_store_free(&s);
}

int main(void) {
    RUN(test_thinning_bounds_a_series);
    RUN(test_same_point_changes_nothing);
    RUN(test_resume_truncates);
    RUN(test_ring_numbering_and_reset);
    RUN(test_update_larger_than_buffer);
    RUN(test_stages_gone);
    RUN(test_trainer_row);
    return check_summary();
}
