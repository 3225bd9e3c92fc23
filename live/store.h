/* live/store.h: what bin/live knows about the runs, the pipeline's stages, and the stream of
 * updates it pushes to pages (docs/live.md).
 *
 * One store, one mutex: the bus thread (live/live.c) writes, the HTTP threads (live/http.c)
 * read; every function takes the lock itself unless it says "lock held".
 *
 * Memory is bounded whatever the run's length (docs/live.md, "Memory"):
 *   - a series (one metric of one run, or one evaluator value of one run) holds at most
 *     `series_cap` points; when it is full, every second point of its older three quarters is
 *     dropped (the newest quarter is never thinned), so old points keep an even spacing that
 *     doubles each time and the recent past stays at full resolution;
 *   - at most `max_runs` runs (a new run beyond evicts the run updated longest ago) with at most
 *     `max_series` series each (more are not recorded), and at most LIVE_MAX_STAGES stages;
 *   - the update stream is a ring of the last `ring_entries` updates, `ring_bytes` at most;
 *     a page that falls further behind than the ring is told to reload (event "reset"), never
 *     silently skipped: every update has a sequence number, consecutive from 1.
 *
 * Sources: points come from the bus (source LIVE_SRC_BUS) and from the files on disk
 * (LIVE_SRC_DISK). A point of a step already held replaces it (the same value from both
 * sources changes nothing). A metrics event of the bus whose step is below the last step the
 * bus gave for that run is a resumed run: the run's metric points from that step on are
 * dropped first (event "resume"). */
#ifndef LIVE_STORE_H
#define LIVE_STORE_H
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "bus/wire.h"

#define LIVE_MAX_STAGES 256
#define LIVE_NAME_MAX 128 /* series names: "<metric>" or "<task>/<value>" */

typedef enum { LIVE_SRC_BUS, LIVE_SRC_DISK } live_src;
typedef enum { LIVE_STAGE_TRAINER, LIVE_STAGE_LOADER, LIVE_STAGE_EVALUATOR, LIVE_STAGE_SAMPLER } live_stage_kind;

typedef struct {
    int series_cap;      /* points per series before thinning (>= 16) */
    int max_runs;
    int max_series;      /* per run, metrics and evaluator values together */
    int ring_entries;    /* updates kept for pages that are behind */
    size_t ring_bytes;
    double gone_after;   /* seconds without a beat before a stage is shown gone */
    double forget_after; /* seconds after which a gone stage is dropped */
} live_limits_t;

/* The defaults of docs/live.md. */
live_limits_t live_limits_default(void);

typedef struct live_store live_store_t;

int live_store_new(live_store_t **s, const live_limits_t *lim);
void live_store_free(live_store_t **s);
const live_limits_t *live_store_limits(const live_store_t *s);

/* ---- ingest (the bus thread) --------------------------------------------------------------
 * now: wall-clock unix seconds; mono: monotonic seconds (stage liveness). Names are wire names
 * (valid UTF-8, < WIRE_NAME_LEN bytes); the caller has checked them. Each returns 1 when
 * something changed (and an update was queued for the pages), else 0. */
int live_store_metrics(live_store_t *s, live_src src, const char *run, uint64_t step, double time,
                       const wire_kv_t *kv, uint32_t n, double mono);
int live_store_eval(live_store_t *s, live_src src, const char *run, const char *task, uint64_t step, double time,
                    const wire_kv_t *kv, uint32_t n);
/* A checkpoint (from the bus, the welcome index, or a run directory's listing). dir is the
 * run directory when known ("" or NULL: not known). */
int live_store_ckpt(live_store_t *s, const char *run, uint64_t step, double time, const char *path,
                    const char *model);
/* A beat of a stage: a loader's "loader" event or an evaluator's/sampler's "stage" event. */
int live_store_loader(live_store_t *s, const msg_loader_t *l, double mono);
int live_store_stage(live_store_t *s, const msg_stage_t *st, double mono);
/* A log/<program> line: the last LIVE_LOG_LINES are kept. */
#define LIVE_LOG_LINES 64
void live_store_log(live_store_t *s, const char *program, const char *line, double time);
/* Marks the stages whose beats stopped as gone (and forgets the long gone). */
void live_store_tick(live_store_t *s, double mono);
/* The run's metric points from step `from` on are dropped (a resume seen in a metrics file). */
int live_store_truncate(live_store_t *s, const char *run, uint64_t from);
/* Points of a run were added from disk in bulk: one "run" update tells pages to reload it. */
void live_store_run_reloaded(live_store_t *s, const char *run);

/* ---- read (HTTP threads) ----------------------------------------------------------------- */
/* The state as JSON (new reference): {"boot", "seq", "cap", "runs": [...], "stages": [...], "log": [...]}.
 * runs: NULL for every run, else only those named (n_runs of them); points: at most this many
 * per series (evenly spaced over the series, the newest always included). */
json_t *live_store_state(live_store_t *s, const char *const *runs, int n_runs, int points, double mono);
/* The stages only: {"seq", "now", "stages": [...]}. */
json_t *live_store_health(live_store_t *s, double mono);
/* 1 when a run of that name is held. */
int live_store_has_run(live_store_t *s, const char *run);
/* One series (kind "metrics" or "eval"), points with lo <= step <= hi, at most `points` of
 * them: {"run", "name", "kind", "points": [[step, value], ...]}; NULL when there is no such
 * series. */
json_t *live_store_series(live_store_t *s, const char *run, const char *kind, const char *name, double lo,
                          double hi, int points);
/* Newest sequence number (0 before the first update). */
uint64_t live_store_seq(live_store_t *s);
uint64_t live_store_seq_locked(const live_store_t *s); /* lock held */
/* This process's random id ("boot" in the state and the streams' hello). */
const char *live_store_boot(const live_store_t *s);
/* Server-Sent Events text of the updates from seq `from` on, as many whole events as fit in
 * cap bytes (at least one even when it is larger than cap: then *need says how much room it
 * needs and 0 is returned). Returns the bytes written; *next is the seq after the last one
 * written. -1 when `from` is older than the ring holds (the page must reload). Lock held. */
long live_store_sse_locked(live_store_t *s, uint64_t from, char *buf, size_t cap, uint64_t *next, size_t *need);
void live_store_lock(live_store_t *s);
void live_store_unlock(live_store_t *s);
/* One more event taken in from the bus (counted for /api/health's "bus_events"). */
void live_store_count_event(live_store_t *s);
/* Memory held by points, stages and the ring, in bytes (for the load test and /api/health). */
size_t live_store_bytes(live_store_t *s);

/* Where the alive sampler services are: the endpoint of the freshest one for run (any run
 * when run is NULL or ""), copied into ep; 0 when there is none. Also the run's model
 * ("free", ...) into model when known. */
int live_store_sampler_for(live_store_t *s, const char *run, char *ep, size_t eplen, char *model, size_t mlen,
                           double mono);
#endif
