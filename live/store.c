/* live/store.c: runs, series, stages and the update ring (live/store.h). */
#include "live/store.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    double step, v;
} pt_t;

enum { KIND_METRICS = 0, KIND_EVAL = 1 };

typedef struct {
    char name[LIVE_NAME_MAX];
    int kind;
    pt_t *p;
    int n, cap;
} series_t;

typedef struct {
    char name[WIRE_NAME_LEN], model[WIRE_NAME_LEN];
    series_t *ser;
    int nser, capser;
    int64_t bus_step;   /* the last step the bus gave (-1: none): a lower one is a resume */
    int64_t last_step;  /* newest metrics step held */
    double last_time;   /* its unix time */
    double last_mono;   /* when a metrics event last came (the trainer's liveness; 0: never) */
    double step_dt;     /* smoothed seconds between metrics events */
    int trainer_alive;
    double stage_pushed;   /* when its trainer row last went to the pages (once a second) */
    double data_wait, tok_s; /* of the newest step */
    int64_t ckpt_step;  /* -1: none */
    double ckpt_time;
    char *ckpt_path;
    uint64_t touched;   /* seq of its last update, for eviction */
} run_t;

typedef struct {
    int used;
    live_stage_kind kind;
    char name[WIRE_NAME_LEN], run[WIRE_NAME_LEN];
    uint64_t pid, done;
    char *endpoint, *state, *dataset;
    double first_mono, last_mono;
    int alive, bye;
} stage_t;

typedef struct {
    uint64_t seq;
    char *text; /* the whole SSE event: "id: ..\nevent: ..\ndata: ..\n\n" */
    size_t len;
} entry_t;

struct live_store {
    pthread_mutex_t mu;
    live_limits_t lim;
    run_t *runs;
    int nruns;
    stage_t stages[LIVE_MAX_STAGES];
    json_t *log;     /* the last LIVE_LOG_LINES log lines */
    entry_t *ring;
    int head, count; /* oldest entry's slot, entries held */
    size_t ring_bytes;
    uint64_t seq;
    uint64_t bus_events; /* events taken in from the bus */
    char boot[24];   /* this process's id: a page that reconnects to another one reloads */
};

static const char *KIND_NAMES[] = {"trainer", "loader", "evaluator", "sampler"};

live_limits_t live_limits_default(void) {
    return (live_limits_t){.series_cap = 2048, .max_runs = 32, .max_series = 128, .ring_entries = 8192,
                           .ring_bytes = 8u << 20, .gone_after = 3.0, .forget_after = 600.0};
}

int live_store_new(live_store_t **out, const live_limits_t *lim) {
    *out = NULL;
    live_store_t *s = calloc(1, sizeof *s);
    if (!s) return -1;
    s->lim = lim ? *lim : live_limits_default();
    if (s->lim.series_cap < 16) s->lim.series_cap = 16;
    if (s->lim.max_runs < 1) s->lim.max_runs = 1;
    if (s->lim.max_series < 1) s->lim.max_series = 1;
    if (s->lim.ring_entries < 16) s->lim.ring_entries = 16;
    s->runs = calloc((size_t)s->lim.max_runs, sizeof *s->runs);
    s->ring = calloc((size_t)s->lim.ring_entries, sizeof *s->ring);
    if (!s->runs || !s->ring) {
        free(s->runs), free(s->ring), free(s);
        return -1;
    }
    s->log = json_array();
    uint64_t r[2] = {0, 0};
    FILE *f = fopen("/dev/urandom", "rb");
    if (!f || fread(r, sizeof r[0], 1, f) != 1) r[0] = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    if (f) fclose(f);
    snprintf(s->boot, sizeof s->boot, "%016llx", (unsigned long long)r[0]);
    pthread_mutex_init(&s->mu, NULL);
    *out = s;
    return 0;
}

static void run_clear(run_t *r) {
    for (int i = 0; i < r->nser; i++) free(r->ser[i].p);
    free(r->ser);
    free(r->ckpt_path);
    memset(r, 0, sizeof *r);
}

static void stage_clear(stage_t *st) {
    free(st->endpoint), free(st->state), free(st->dataset);
    memset(st, 0, sizeof *st);
}

void live_store_free(live_store_t **sp) {
    if (!sp || !*sp) return;
    live_store_t *s = *sp;
    for (int i = 0; i < s->nruns; i++) run_clear(&s->runs[i]);
    for (int i = 0; i < LIVE_MAX_STAGES; i++) stage_clear(&s->stages[i]);
    for (int i = 0; i < s->count; i++) free(s->ring[(s->head + i) % s->lim.ring_entries].text);
    free(s->runs), free(s->ring);
    json_decref(s->log);
    pthread_mutex_destroy(&s->mu);
    free(s);
    *sp = NULL;
}

const live_limits_t *live_store_limits(const live_store_t *s) { return &s->lim; }
void live_store_lock(live_store_t *s) { pthread_mutex_lock(&s->mu); }
void live_store_unlock(live_store_t *s) { pthread_mutex_unlock(&s->mu); }

/* ---- the update ring -------------------------------------------------------------------- */

/* Queues one update: event name t, data o (stolen). Lock held. */
static void push(live_store_t *s, const char *t, json_t *o) {
    if (!o) return;
    json_object_set_new(o, "t", json_string(t));
    char *data = json_dumps(o, JSON_COMPACT | JSON_ENSURE_ASCII);
    json_decref(o);
    if (!data) return;
    uint64_t seq = s->seq + 1;
    size_t cap = strlen(data) + 64;
    char *text = malloc(cap);
    if (!text) {
        free(data);
        return;
    }
    int len = snprintf(text, cap, "id: %llu\nevent: %s\ndata: %s\n\n", (unsigned long long)seq, t, data);
    free(data);
    s->seq = seq;
    if (s->count == s->lim.ring_entries) { /* the oldest makes room */
        free(s->ring[s->head].text);
        s->ring_bytes -= s->ring[s->head].len;
        s->head = (s->head + 1) % s->lim.ring_entries;
        s->count--;
    }
    s->ring[(s->head + s->count) % s->lim.ring_entries] = (entry_t){seq, text, (size_t)len};
    s->count++;
    s->ring_bytes += (size_t)len;
    while (s->count > 1 && s->ring_bytes > s->lim.ring_bytes) {
        free(s->ring[s->head].text);
        s->ring_bytes -= s->ring[s->head].len;
        s->head = (s->head + 1) % s->lim.ring_entries;
        s->count--;
    }
}

long live_store_sse_locked(live_store_t *s, uint64_t from, char *buf, size_t cap, uint64_t *next, size_t *need) {
    *need = 0;
    *next = from;
    if (from > s->seq) return 0; /* nothing new */
    uint64_t oldest = s->count ? s->ring[s->head].seq : s->seq + 1;
    if (from < oldest) return -1;
    size_t used = 0;
    for (uint64_t q = from; q <= s->seq; q++) {
        const entry_t *e = &s->ring[(s->head + (int)(q - oldest)) % s->lim.ring_entries];
        if (used + e->len > cap) {
            if (used == 0) *need = e->len;
            break;
        }
        memcpy(buf + used, e->text, e->len);
        used += e->len;
        *next = q + 1;
    }
    return (long)used;
}

uint64_t live_store_seq_locked(const live_store_t *s) { return s->seq; }
const char *live_store_boot(const live_store_t *s) { return s->boot; }

uint64_t live_store_seq(live_store_t *s) {
    pthread_mutex_lock(&s->mu);
    uint64_t q = s->seq;
    pthread_mutex_unlock(&s->mu);
    return q;
}

/* ---- runs and series ---------------------------------------------------------------------- */

static run_t *run_find(live_store_t *s, const char *name) {
    for (int i = 0; i < s->nruns; i++)
        if (!strcmp(s->runs[i].name, name)) return &s->runs[i];
    return NULL;
}

/* The run, created when new (evicting the one updated longest ago when full). Lock held. */
static run_t *run_get(live_store_t *s, const char *name) {
    run_t *r = run_find(s, name);
    if (r) return r;
    if (s->nruns == s->lim.max_runs) {
        int old = 0;
        for (int i = 1; i < s->nruns; i++)
            if (s->runs[i].touched < s->runs[old].touched) old = i;
        json_t *o = json_pack("{s:s}", "run", s->runs[old].name);
        run_clear(&s->runs[old]);
        s->runs[old] = s->runs[--s->nruns];
        memset(&s->runs[s->nruns], 0, sizeof s->runs[0]);
        push(s, "evict", o);
    }
    r = &s->runs[s->nruns++];
    memset(r, 0, sizeof *r);
    snprintf(r->name, sizeof r->name, "%s", name);
    r->bus_step = r->last_step = r->ckpt_step = -1;
    return r;
}

static series_t *series_get(live_store_t *s, run_t *r, int kind, const char *name) {
    for (int i = 0; i < r->nser; i++)
        if (r->ser[i].kind == kind && !strcmp(r->ser[i].name, name)) return &r->ser[i];
    if (r->nser >= s->lim.max_series) return NULL; /* bounded: more series are not recorded */
    if (r->nser == r->capser) {
        int nc = r->capser ? 2 * r->capser : 16;
        series_t *p = realloc(r->ser, sizeof *p * (size_t)nc);
        if (!p) return NULL;
        r->ser = p;
        r->capser = nc;
    }
    series_t *x = &r->ser[r->nser++];
    memset(x, 0, sizeof *x);
    x->kind = kind;
    snprintf(x->name, sizeof x->name, "%s", name);
    return x;
}

/* The thinning rule of store.h: every second point of the older three quarters goes. */
static void thin(series_t *x) {
    int keep = x->n / 4, old = x->n - keep, j = 0;
    for (int i = 0; i < old; i += 2) x->p[j++] = x->p[i];
    memmove(x->p + j, x->p + old, sizeof *x->p * (size_t)keep);
    x->n = j + keep;
}

/* Puts (step, v) in place (sorted by step). 1 when the series changed. */
static int series_put(live_store_t *s, series_t *x, double step, double v) {
    int lo = 0, hi = x->n; /* first index with p.step >= step */
    if (x->n && x->p[x->n - 1].step < step) lo = x->n;
    else
        while (lo < hi) {
            int mid = (lo + hi) / 2;
            if (x->p[mid].step < step) lo = mid + 1;
            else hi = mid;
        }
    if (lo < x->n && x->p[lo].step == step) {
        double old = x->p[lo].v;
        if (old == v || (isnan(old) && isnan(v))) return 0;
        x->p[lo].v = v;
        return 1;
    }
    if (x->n == x->cap) {
        if (x->cap >= s->lim.series_cap) {
            thin(x);
            return series_put(s, x, step, v);
        }
        int nc = x->cap ? 2 * x->cap : 64;
        if (nc > s->lim.series_cap) nc = s->lim.series_cap;
        pt_t *p = realloc(x->p, sizeof *p * (size_t)nc);
        if (!p) return 0;
        x->p = p;
        x->cap = nc;
    }
    memmove(x->p + lo + 1, x->p + lo, sizeof *x->p * (size_t)(x->n - lo));
    x->p[lo] = (pt_t){step, v};
    x->n++;
    return 1;
}

static void series_truncate(series_t *x, double from) {
    while (x->n && x->p[x->n - 1].step >= from) x->n--;
}

static void run_truncate(run_t *r, uint64_t from) {
    for (int i = 0; i < r->nser; i++)
        if (r->ser[i].kind == KIND_METRICS) series_truncate(&r->ser[i], (double)from);
    r->last_step = -1;
    for (int i = 0; i < r->nser; i++)
        if (r->ser[i].kind == KIND_METRICS && r->ser[i].n)
            r->last_step = (int64_t)fmax((double)r->last_step, r->ser[i].p[r->ser[i].n - 1].step);
}

int live_store_truncate(live_store_t *s, const char *run, uint64_t from) {
    pthread_mutex_lock(&s->mu);
    run_t *r = run_find(s, run);
    int changed = 0;
    for (int i = 0; r && i < r->nser; i++)
        changed |= r->ser[i].kind == KIND_METRICS && r->ser[i].n && r->ser[i].p[r->ser[i].n - 1].step >= (double)from;
    if (changed) run_truncate(r, from);
    pthread_mutex_unlock(&s->mu);
    return changed;
}

static json_t *num(double v) { return isfinite(v) ? json_real(v) : json_null(); }

static json_t *values_json(const wire_kv_t *kv, uint32_t n) {
    json_t *o = json_object();
    for (uint32_t i = 0; i < n; i++) json_object_set_new(o, kv[i].name, num(kv[i].value));
    return o;
}

int live_store_metrics(live_store_t *s, live_src src, const char *run, uint64_t step, double time,
                       const wire_kv_t *kv, uint32_t n, double mono) {
    pthread_mutex_lock(&s->mu);
    run_t *r = run_get(s, run);
    int changed = 0;
    if (src == LIVE_SRC_BUS) {
        if (r->bus_step >= 0 && (int64_t)step < r->bus_step) { /* a resumed run */
            run_truncate(r, step);
            push(s, "resume", json_pack("{s:s,s:I}", "run", run, "from", (json_int_t)step));
        }
        r->bus_step = (int64_t)step;
        if (r->last_mono > 0) {
            double dt = mono - r->last_mono;
            r->step_dt = r->step_dt > 0 ? 0.9 * r->step_dt + 0.1 * dt : dt;
        }
        r->last_mono = mono;
        if (!r->trainer_alive) {
            r->trainer_alive = 1;
            changed = 1;
        }
    }
    for (uint32_t i = 0; i < n; i++) {
        series_t *x = series_get(s, r, KIND_METRICS, kv[i].name);
        if (x) changed |= series_put(s, x, (double)step, kv[i].value);
    }
    if ((int64_t)step >= r->last_step) {
        r->last_step = (int64_t)step;
        r->last_time = time;
        for (uint32_t i = 0; i < n; i++) {
            if (!strcmp(kv[i].name, "data_wait_s")) r->data_wait = kv[i].value;
            if (!strcmp(kv[i].name, "tok_s")) r->tok_s = kv[i].value;
        }
    }
    if (changed) r->touched = s->seq + 1;
    if (changed && src == LIVE_SRC_BUS) { /* disk points go out as one "run" update per pass (live/disk.h) */
        push(s, "metrics", json_pack("{s:s,s:I,s:o,s:o,s:b}", "run", run, "step", (json_int_t)step, "time", num(time),
                                     "v", values_json(kv, n), "live", src == LIVE_SRC_BUS));
    }
    pthread_mutex_unlock(&s->mu);
    return changed;
}

int live_store_eval(live_store_t *s, live_src src, const char *run, const char *task, uint64_t step, double time,
                    const wire_kv_t *kv, uint32_t n) {
    pthread_mutex_lock(&s->mu);
    run_t *r = run_get(s, run);
    int changed = 0;
    for (uint32_t i = 0; i < n; i++) {
        char name[LIVE_NAME_MAX];
        snprintf(name, sizeof name, "%s/%s", task, kv[i].name);
        series_t *x = series_get(s, r, KIND_EVAL, name);
        if (x) changed |= series_put(s, x, (double)step, kv[i].value);
    }
    if (changed) r->touched = s->seq + 1;
    if (changed && src == LIVE_SRC_BUS) {
        push(s, "eval", json_pack("{s:s,s:s,s:I,s:o,s:o}", "run", run, "task", task, "step", (json_int_t)step, "time",
                                  num(time), "v", values_json(kv, n)));
    }
    pthread_mutex_unlock(&s->mu);
    return changed;
}

int live_store_ckpt(live_store_t *s, const char *run, uint64_t step, double time, const char *path,
                    const char *model) {
    pthread_mutex_lock(&s->mu);
    run_t *r = run_get(s, run);
    int changed = 0;
    if (model && model[0] && strcmp(r->model, model)) {
        snprintf(r->model, sizeof r->model, "%s", model);
        changed = 1;
    }
    if ((int64_t)step > r->ckpt_step || ((int64_t)step == r->ckpt_step && time > r->ckpt_time)) {
        char *p = strdup(path ? path : "");
        if (p) {
            free(r->ckpt_path);
            r->ckpt_path = p;
            r->ckpt_step = (int64_t)step;
            r->ckpt_time = time;
            changed = 1;
        }
    }
    if (changed) {
        r->touched = s->seq + 1;
        push(s, "ckpt", json_pack("{s:s,s:I,s:o,s:s,s:s}", "run", run, "step", (json_int_t)r->ckpt_step, "time",
                                  num(r->ckpt_time), "path", r->ckpt_path ? r->ckpt_path : "", "model", r->model));
    }
    pthread_mutex_unlock(&s->mu);
    return changed;
}

void live_store_run_reloaded(live_store_t *s, const char *run) {
    pthread_mutex_lock(&s->mu);
    run_t *r = run_find(s, run);
    if (r) {
        r->touched = s->seq + 1;
        push(s, "run", json_pack("{s:s}", "run", run));
    }
    pthread_mutex_unlock(&s->mu);
}

void live_store_log(live_store_t *s, const char *program, const char *line, double time) {
    pthread_mutex_lock(&s->mu);
    json_t *o = json_pack("{s:s,s:s,s:o}", "program", program, "line", line ? line : "", "time", num(time));
    if (o) {
        json_array_append(s->log, o);
        while (json_array_size(s->log) > LIVE_LOG_LINES) json_array_remove(s->log, 0);
        push(s, "log", json_deep_copy(o));
        json_decref(o);
    }
    pthread_mutex_unlock(&s->mu);
}

/* ---- stages ------------------------------------------------------------------------------ */

static json_t *stage_json(const stage_t *st, double mono) {
    return json_pack("{s:s,s:s,s:s,s:I,s:s,s:s,s:s,s:I,s:b,s:b,s:f,s:f}", "kind", KIND_NAMES[st->kind], "name",
                     st->name, "run", st->run, "pid", (json_int_t)st->pid, "endpoint", st->endpoint ? st->endpoint : "",
                     "dataset", st->dataset ? st->dataset : "", "state", st->state ? st->state : "", "done",
                     (json_int_t)st->done, "alive", st->alive, "bye", st->bye, "age", mono - st->last_mono, "up",
                     st->last_mono - st->first_mono);
}

/* The stage (kind, name), created when new (the slot of the stage gone longest ago when full). */
static stage_t *stage_get(live_store_t *s, live_stage_kind kind, const char *name, double mono) {
    stage_t *free_slot = NULL, *oldest = NULL;
    for (int i = 0; i < LIVE_MAX_STAGES; i++) {
        stage_t *st = &s->stages[i];
        if (!st->used) {
            if (!free_slot) free_slot = st;
            continue;
        }
        if (st->kind == kind && !strcmp(st->name, name)) return st;
        if (!oldest || st->last_mono < oldest->last_mono) oldest = st;
    }
    stage_t *st = free_slot ? free_slot : oldest;
    stage_clear(st);
    st->used = 1;
    st->kind = kind;
    snprintf(st->name, sizeof st->name, "%s", name);
    st->first_mono = mono;
    return st;
}

static void set_str(char **dst, const char *src) {
    if (*dst && src && !strcmp(*dst, src)) return;
    char *p = strdup(src ? src : "");
    if (!p) return;
    free(*dst);
    *dst = p;
}

static void beat(live_store_t *s, stage_t *st, double mono, int bye) {
    if (!st->alive && st->last_mono > 0) st->first_mono = mono; /* back after being gone: a new life */
    st->last_mono = mono;
    st->alive = !bye;
    st->bye = bye;
    push(s, "stage", stage_json(st, mono));
}

int live_store_loader(live_store_t *s, const msg_loader_t *l, double mono) {
    pthread_mutex_lock(&s->mu);
    stage_t *st = stage_get(s, LIVE_STAGE_LOADER, l->name, mono);
    st->pid = l->pid;
    st->done = l->served;
    set_str(&st->endpoint, l->endpoint);
    set_str(&st->dataset, l->dataset);
    char line[160];
    snprintf(line, sizeof line, "serving, %llu batches", (unsigned long long)l->served);
    set_str(&st->state, line);
    beat(s, st, mono, 0);
    pthread_mutex_unlock(&s->mu);
    return 1;
}

int live_store_stage(live_store_t *s, const msg_stage_t *m, double mono) {
    live_stage_kind kind;
    if (!strcmp(m->program, "evaluator")) kind = LIVE_STAGE_EVALUATOR;
    else if (!strcmp(m->program, "sampler")) kind = LIVE_STAGE_SAMPLER;
    else return 0; /* a program this page has no place for */
    pthread_mutex_lock(&s->mu);
    stage_t *st = stage_get(s, kind, m->name, mono);
    st->pid = m->pid;
    st->done = m->done;
    snprintf(st->run, sizeof st->run, "%s", m->run);
    set_str(&st->endpoint, m->endpoint);
    set_str(&st->state, m->state);
    beat(s, st, mono, m->bye);
    pthread_mutex_unlock(&s->mu);
    return 1;
}

static json_t *trainer_json(const live_store_t *s, const run_t *r, double mono) {
    char state[160];
    snprintf(state, sizeof state, "step %lld", (long long)r->last_step);
    return json_pack("{s:s,s:s,s:s,s:I,s:s,s:s,s:s,s:I,s:b,s:b,s:f,s:f,s:o,s:o}", "kind", "trainer", "name", r->name,
                     "run", r->name, "pid", (json_int_t)0, "endpoint", "", "dataset", "", "state", state, "done",
                     (json_int_t)(r->last_step < 0 ? 0 : r->last_step), "alive", r->trainer_alive, "bye", 0, "age",
                     mono - r->last_mono, "up", 0.0, "data_wait_s", num(r->data_wait), "tok_s", num(r->tok_s));
}

/* A trainer is quiet when no step came for gone_after seconds or five of its usual steps. */
static double trainer_gone_after(const live_store_t *s, const run_t *r) {
    return fmax(s->lim.gone_after, 5 * r->step_dt);
}

void live_store_tick(live_store_t *s, double mono) {
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < LIVE_MAX_STAGES; i++) {
        stage_t *st = &s->stages[i];
        if (!st->used) continue;
        if (st->alive && mono - st->last_mono > s->lim.gone_after) {
            st->alive = 0;
            push(s, "stage", stage_json(st, mono));
        } else if (!st->alive && mono - st->last_mono > s->lim.forget_after) {
            json_t *o = json_pack("{s:s,s:s}", "kind", KIND_NAMES[st->kind], "name", st->name);
            stage_clear(st);
            push(s, "forget", o);
        }
    }
    for (int i = 0; i < s->nruns; i++) {
        run_t *r = &s->runs[i];
        if (r->trainer_alive && mono - r->last_mono > trainer_gone_after(s, r)) {
            r->trainer_alive = 0;
            push(s, "stage", trainer_json(s, r, mono));
        } else if (r->trainer_alive && mono - r->stage_pushed >= 1.0) { /* its step, wait and pace, once a second */
            r->stage_pushed = mono;
            push(s, "stage", trainer_json(s, r, mono));
        }
    }
    pthread_mutex_unlock(&s->mu);
}

/* ---- read ---------------------------------------------------------------------------------- */

static json_t *points_json(const series_t *x, double lo, double hi, int points) {
    int a = 0, b = x->n; /* [a, b): lo <= step <= hi */
    while (a < b && x->p[a].step < lo) a++;
    while (b > a && x->p[b - 1].step > hi) b--;
    int n = b - a;
    json_t *arr = json_array();
    if (points < 1) points = 1;
    for (int k = 0; k < n && k < points; k++) {
        /* evenly spaced, the newest always included */
        int i = n <= points ? a + k : a + (points == 1 ? n - 1 : (int)((double)k * (n - 1) / (points - 1) + 0.5));
        json_array_append_new(arr, json_pack("[I,o]", (json_int_t)x->p[i].step, num(x->p[i].v)));
    }
    return arr;
}

static json_t *run_json(const live_store_t *s, const run_t *r, int points, double mono) {
    json_t *m = json_object(), *e = json_object();
    for (int i = 0; i < r->nser; i++)
        json_object_set_new(r->ser[i].kind == KIND_METRICS ? m : e, r->ser[i].name,
                            points_json(&r->ser[i], -INFINITY, INFINITY, points));
    json_t *ck = r->ckpt_step < 0 ? json_null()
                                  : json_pack("{s:I,s:o,s:s}", "step", (json_int_t)r->ckpt_step, "time",
                                              num(r->ckpt_time), "path", r->ckpt_path ? r->ckpt_path : "");
    return json_pack("{s:s,s:s,s:I,s:o,s:o,s:o,s:o}", "run", r->name, "model", r->model, "last_step",
                     (json_int_t)r->last_step, "last_time", num(r->last_time), "ckpt", ck, "metrics", m, "evals", e);
}

static json_t *stages_json(const live_store_t *s, double mono) {
    json_t *a = json_array();
    for (int i = 0; i < s->nruns; i++)
        if (s->runs[i].last_mono > 0) json_array_append_new(a, trainer_json(s, &s->runs[i], mono));
    for (int i = 0; i < LIVE_MAX_STAGES; i++)
        if (s->stages[i].used) json_array_append_new(a, stage_json(&s->stages[i], mono));
    return a;
}

json_t *live_store_state(live_store_t *s, const char *const *runs, int n_runs, int points, double mono) {
    pthread_mutex_lock(&s->mu);
    json_t *arr = json_array();
    for (int i = 0; i < s->nruns; i++) {
        int want = !runs;
        for (int k = 0; runs && k < n_runs; k++) want |= !strcmp(runs[k], s->runs[i].name);
        if (want) json_array_append_new(arr, run_json(s, &s->runs[i], points, mono));
    }
    json_t *o = json_pack("{s:s,s:I,s:i,s:i,s:o,s:o,s:O}", "boot", s->boot, "seq", (json_int_t)s->seq, "cap", s->lim.series_cap,
                          "max_series", s->lim.max_series, "runs", arr, "stages", stages_json(s, mono), "log", s->log);
    pthread_mutex_unlock(&s->mu);
    return o;
}

void live_store_count_event(live_store_t *s) {
    pthread_mutex_lock(&s->mu);
    s->bus_events++;
    pthread_mutex_unlock(&s->mu);
}

json_t *live_store_health(live_store_t *s, double mono) {
    pthread_mutex_lock(&s->mu);
    json_t *o = json_pack("{s:s,s:I,s:I,s:o}", "boot", s->boot, "seq", (json_int_t)s->seq, "bus_events",
                          (json_int_t)s->bus_events, "stages", stages_json(s, mono));
    pthread_mutex_unlock(&s->mu);
    return o;
}

int live_store_has_run(live_store_t *s, const char *run) {
    pthread_mutex_lock(&s->mu);
    int has = run_find(s, run) != NULL;
    pthread_mutex_unlock(&s->mu);
    return has;
}

json_t *live_store_series(live_store_t *s, const char *run, const char *kind, const char *name, double lo,
                          double hi, int points) {
    int k = !strcmp(kind, "metrics") ? KIND_METRICS : !strcmp(kind, "eval") ? KIND_EVAL : -1;
    json_t *o = NULL;
    pthread_mutex_lock(&s->mu);
    run_t *r = k < 0 ? NULL : run_find(s, run);
    for (int i = 0; r && i < r->nser; i++)
        if (r->ser[i].kind == k && !strcmp(r->ser[i].name, name)) {
            o = json_pack("{s:s,s:s,s:s,s:o}", "run", run, "kind", kind, "name", name, "points",
                          points_json(&r->ser[i], lo, hi, points));
            break;
        }
    pthread_mutex_unlock(&s->mu);
    return o;
}

size_t live_store_bytes(live_store_t *s) {
    pthread_mutex_lock(&s->mu);
    size_t b = sizeof *s + s->ring_bytes + sizeof(entry_t) * (size_t)s->lim.ring_entries +
               sizeof(run_t) * (size_t)s->lim.max_runs;
    for (int i = 0; i < s->nruns; i++) {
        b += sizeof(series_t) * (size_t)s->runs[i].capser;
        for (int j = 0; j < s->runs[i].nser; j++) b += sizeof(pt_t) * (size_t)s->runs[i].ser[j].cap;
    }
    pthread_mutex_unlock(&s->mu);
    return b;
}

int live_store_sampler_for(live_store_t *s, const char *run, char *ep, size_t eplen, char *model, size_t mlen,
                           double mono) {
    pthread_mutex_lock(&s->mu);
    const stage_t *best = NULL;
    for (int i = 0; i < LIVE_MAX_STAGES; i++) {
        const stage_t *st = &s->stages[i];
        if (!st->used || st->kind != LIVE_STAGE_SAMPLER || !st->alive || !st->endpoint || !st->endpoint[0]) continue;
        int match = run && run[0] ? !strcmp(st->run, run) : 1;
        if (!match) continue;
        if (!best || st->last_mono > best->last_mono) best = st;
    }
    if (best) snprintf(ep, eplen, "%s", best->endpoint);
    if (model && mlen) {
        const run_t *r = run_find(s, best && best->run[0] ? best->run : run ? run : "");
        snprintf(model, mlen, "%s", r ? r->model : "");
    }
    pthread_mutex_unlock(&s->mu);
    return best != NULL;
}
