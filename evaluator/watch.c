/* evaluator/watch.c: the evaluator's loop (see watch.h). */
#include "evaluator/watch.h"

#include <jansson.h>
#include <libgen.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "bus/beat.h"
#include "bus/bus.h"
#include "bus/log.h"
#include "common/path_inside.h"
#include "evaluator/results.h"
#include "model/checkpoint.h"

typedef struct {
    int64_t *v;
    int n, cap;
} stepset_t;

static int set_has(const stepset_t *s, int64_t x) {
    for (int i = 0; i < s->n; i++)
        if (s->v[i] == x) return 1;
    return 0;
}
static int set_add(stepset_t *s, int64_t x) {
    if (set_has(s, x)) return 0;
    if (s->n == s->cap) {
        int nc = s->cap ? 2 * s->cap : 32;
        int64_t *p = realloc(s->v, sizeof *p * nc);
        if (!p) return EVAL_ENOMEM;
        s->v = p;
        s->cap = nc;
    }
    s->v[s->n++] = x;
    return 0;
}

typedef struct {
    const eval_watch_cfg_t *c;
    char run_dir[2048];
    void *zctx, *sub, *pub;
    bus_log_t log, log_q; /* its lines (bus/log.h); log_q's are those --quiet keeps off stderr */
    bus_beat_t *beat;    /* stage/evaluator/<name> every second (NULL: no bus, or --once) */
    stepset_t done, skipped;
    stepset_t starved;   /* given up on after oom_tries tries short of memory: not scored, not damaged */
    stepset_t tried;     /* checkpoints short of memory so far, and how often (tries[i] for tried.v[i]) */
    int *tries;
    char *warned;        /* every warning line printed so far, '\n'-separated, printed once */
    int evaluated;
    /* after an out-of-memory (not damage: the checkpoint stays to do), nothing is tried again
     * before retry_at (CLOCK_MONOTONIC s); oom_ms, the wait, doubles from --poll-ms to 60 s
     * while it lasts and is forgotten after an evaluation that went through, or when a
     * checkpoint is given up on (the next one is tried at once) */
    int oom_ms;
    double retry_at;
    /* test hook (README, "Fault injection"): $FT_EVALUATOR_FAULT_KILL_AFTER_EVALS=N raises
     * SIGKILL right after the N-th result is recorded, so a test kills at an exact point */
    long long fault_kill_after;
} watch_t;

static double unix_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Prints each line of warn not printed before (ckpt_list reports a corrupt checkpoint on
 * every rescan; the user needs to hear it once). */
static void warn_once(watch_t *w, const char *warn) {
    const char *p = warn;
    while (p && *p) {
        const char *e = strchr(p, '\n');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        char line[1200];
        snprintf(line, sizeof line, "%.*s\n", (int)(n < 1100 ? n : 1100), p);
        if (n && (!w->warned || !strstr(w->warned, line))) {
            bus_log(&w->log, "%s", line);
            size_t have = w->warned ? strlen(w->warned) : 0;
            char *q = realloc(w->warned, have + strlen(line) + 1);
            if (q) {
                strcpy(q + have, line);
                w->warned = q;
            }
        }
        p = e ? e + 1 : NULL;
    }
}

/* Steps of the complete checkpoints on disk (manifest and sizes checked; the full hash check
 * comes before loading). */
static int scan(watch_t *w, int64_t **steps, int *n, char *err, size_t errlen) {
    char warn[4096] = "";
    int rc = ckpt_list(w->run_dir, 0, steps, n, warn, sizeof warn, err, errlen);
    warn_once(w, warn);
    return rc ? EVAL_EIO : 0;
}

static void publish(watch_t *w, const eval_record_t *r) {
    if (!w->pub) return;
    wire_msg_t m;
    memset(&m, 0, sizeof m);
    m.type = MSG_EVAL;
    msg_eval_t *e = &m.u.eval;
    snprintf(e->run, sizeof e->run, "%s", r->run);
    snprintf(e->task, sizeof e->task, "%s", r->task);
    e->step = (uint64_t)r->step;
    e->time = r->time;
    e->ckpt = (char *)r->ckpt;
    e->n = r->values->n;
    memcpy(e->values, r->values->kv, sizeof(wire_kv_t) * r->values->n);
    char topic[WIRE_NAME_LEN + 8];
    snprintf(topic, sizeof topic, "eval/%s", r->run);
    bus_publish(w->pub, topic, &m); /* dropped when nobody listens: monitoring never blocks */
}

static double mono_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* One more try of checkpoint step that ran out of memory: how many so far. */
static int tries_bump(watch_t *w, int64_t step) {
    for (int i = 0; i < w->tried.n; i++)
        if (w->tried.v[i] == step) return ++w->tries[i];
    if (w->tried.n == w->tried.cap) { /* tries grows with tried (set_add doubles its cap) */
        int *t = realloc(w->tries, sizeof *t * (size_t)(w->tried.cap ? 2 * w->tried.cap : 32));
        if (!t) return 1;
        w->tries = t;
    }
    if (set_add(&w->tried, step)) return 1;
    return w->tries[w->tried.n - 1] = 1;
}

/* Checkpoint dir (step) could not be loaded or scored for lack of memory (why: the reason,
 * with what it needed where the model says). That is no damage: it is neither skipped nor
 * marked. --once: the error the evaluator exits on (EVAL_ENOMEM). Watching: one line, and
 * everything waits oom_ms (doubling) before the next try, since memory may come back (the
 * trainer's peak passes) and every checkpoint of the run needs about as much; after oom_tries
 * tries of this one, one line gives it up (not scored for lack of memory) and the others go on. */
static int out_of_memory(watch_t *w, int64_t step, const char *dir, const char *during, const char *why, char *err,
                         size_t errlen) {
    const eval_watch_cfg_t *c = w->c;
    const size_t dl = strlen(dir);
    if (!strncmp(why, dir, dl) && !strncmp(why + dl, ": ", 2)) why += dl + 2; /* ckpt_open's "<dir>: " */
    if (c->once)
        return snprintf(err, errlen, "%s: out of memory %s, not damage (the checkpoint is not skipped): %s", dir,
                        during, why),
               EVAL_ENOMEM;
    const int poll = c->poll_ms > 0 ? c->poll_ms : 2000, n = tries_bump(w, step);
    char state[2400];
    if (c->oom_tries > 0 && n >= c->oom_tries) {
        set_add(&w->starved, step);
        w->oom_ms = 0;
        w->retry_at = 0;
        bus_log(&w->log, "%s: out of memory %s, not damage; giving up on it after %d tries: not scored for lack of "
                "memory (a restart, or --once on it, with more memory scores it): %s", dir, during, n, why);
        snprintf(state, sizeof state, "gave up on %.2000s: out of memory %d times, not scored", dir, n);
        bus_beat_set(w->beat, state, (uint64_t)w->evaluated);
        return 0;
    }
    w->oom_ms = w->oom_ms ? (w->oom_ms > 30000 ? 60000 : 2 * w->oom_ms) : poll;
    w->retry_at = mono_now() + w->oom_ms / 1000.0;
    char left[48] = "";
    if (c->oom_tries > 0) snprintf(left, sizeof left, ", try %d of %d", n + 1, c->oom_tries);
    bus_log(&w->log, "%s: out of memory %s, not damage (not skipped; trying again in %.1f s%s): %s", dir, during,
            w->oom_ms / 1000.0, left, why);
    snprintf(state, sizeof state, "out of memory on %.2000s, trying again in %.1f s%s", dir, w->oom_ms / 1000.0, left);
    bus_beat_set(w->beat, state, (uint64_t)w->evaluated);
    return 0;
}

static double state_tokens_seen(const char *dir) {
    json_t *st = NULL;
    char e[256];
    if (ckpt_load_state(dir, &st, e, sizeof e)) return NAN;
    json_t *x = json_object_get(st, "tokens_seen");
    double v = json_is_number(x) ? json_number_value(x) : NAN;
    json_decref(st);
    return v;
}

typedef struct {
    eval_lm_t *lm;
    device_t *dev;
    int Bmax, Tmax;
} lm_load_t;

/* ckpt_load_fn: the model of dir, for the task's largest batch. */
static int load_lm(void *ctx, const char *dir, char *err, size_t errlen) {
    lm_load_t *l = ctx;
    int rc = eval_lm_load(&l->lm, l->dev, dir, l->Bmax, l->Tmax, err, errlen);
    /* EVAL_EMODEL: config.json or the tensors do not load, the checkpoint's damage */
    return rc == 0 ? 0 : rc == EVAL_ENOMEM ? CKPT_ENOMEM : CKPT_EFORMAT;
}

/* Evaluates checkpoint `step`: 0 done or skipped (with a message), 1 interrupted, negative
 * when the evaluator cannot go on. */
static int evaluate(watch_t *w, int64_t step, char *err, size_t errlen) {
    const eval_watch_cfg_t *c = w->c;
    char dir[2200], why[1400];
    ckpt_dir_name(dir, sizeof dir, w->run_dir, step);
    lm_load_t load = {NULL, c->dev, 0, 0};
    eval_task_shape(c->task, &load.Bmax, &load.Tmax);
    double t0 = unix_now();
    char state[2400];
    snprintf(state, sizeof state, "evaluating %s", dir);
    bus_beat_set(w->beat, state, (uint64_t)w->evaluated);
    int rc = ckpt_open(dir, load_lm, &load, why, sizeof why); /* the rule of model/checkpoint.h */
    if (rc == CKPT_ENOMEM) return out_of_memory(w, step, dir, "loading it", why, err, errlen);
    if (rc) {
        bus_log(&w->log, "skipping %s", why);
        set_add(&w->skipped, step);
        return 0;
    }
    eval_lm_t *lm = load.lm;
    eval_values_t vals;
    rc = eval_task_run(c->task, lm, &vals, (volatile int *)c->stop, why, sizeof why);
    double n_params = (double)lm->n_params;
    const int nomem = rc == EVAL_ENOMEM || (rc == EVAL_EMODEL && lm->nomem);
    eval_lm_free(&lm);
    if (rc == EVAL_EINTR) return 1;
    if (nomem) {
        char during[WIRE_NAME_LEN + 32];
        snprintf(during, sizeof during, "running task %s on it", c->tag);
        return out_of_memory(w, step, dir, during, why, err, errlen);
    }
    if (rc == EVAL_EMODEL) {
        bus_log(&w->log, "skipping %s: %s", dir, why);
        set_add(&w->skipped, step);
        return 0;
    }
    if (rc) {
        snprintf(err, errlen, "task %s on %s: %s", c->tag, dir, why);
        return rc;
    }
    double ts = state_tokens_seen(dir);
    if (isfinite(ts)) eval_values_add(&vals, "tokens_seen", ts);
    eval_values_add(&vals, "params", n_params);
    eval_values_add(&vals, "eval_s", unix_now() - t0);
    eval_record_t r = {c->run, c->tag, dir, step, unix_now(), &vals};
    if (c->out && (rc = eval_results_append(c->out, &r, err, errlen))) return rc;
    char *line = eval_record_json(&r);
    if (line) {
        printf("%s\n", line);
        fflush(stdout);
        free(line);
    }
    publish(w, &r);
    set_add(&w->done, step);
    w->evaluated++;
    w->oom_ms = 0;
    w->retry_at = 0;
    snprintf(state, sizeof state, "idle, last evaluated step %lld", (long long)step);
    bus_beat_set(w->beat, state, (uint64_t)w->evaluated);
    char said[WIRE_MAX_STR];
    size_t k = (size_t)snprintf(said, sizeof said, "%s step %lld %s:", c->run, (long long)step, c->tag);
    for (uint32_t i = 0; i < vals.n && k < sizeof said; i++)
        k += (size_t)snprintf(said + k, sizeof said - k, " %s %.6g", vals.kv[i].name, vals.kv[i].value);
    bus_log(&w->log_q, "%s", said);
    if (w->fault_kill_after && w->evaluated == w->fault_kill_after) raise(SIGKILL);
    return 0;
}

/* Waits up to ms for a checkpoint announcement (any event is just a reason to rescan).
 * Learns run_dir from an announcement of our run when it is not known yet. Returns 1 when
 * stopped. */
static int wait_event(watch_t *w, int ms) {
    const eval_watch_cfg_t *c = w->c;
    if (c->stop && *c->stop) return 1;
    if (!w->sub) {
        struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
        return c->stop && *c->stop;
    }
    char topic[WIRE_MAX_TOPIC + 1], e[256];
    wire_msg_t m;
    int rc = bus_recv(w->sub, ms, topic, sizeof topic, &m, e, sizeof e);
    if (rc == BUS_ERR_INTR) return 1;
    if (rc != 0) return 0;
    const char *path = NULL;
    if (m.type == MSG_CKPT && !strcmp(m.u.ckpt.run, c->run)) path = m.u.ckpt.path;
    if (m.type == MSG_CKPT_INDEX)
        for (uint32_t i = 0; i < m.u.ckpt_index.n; i++)
            if (!strcmp(m.u.ckpt_index.items[i].run, c->run)) path = m.u.ckpt_index.items[i].path;
    if (path && !w->run_dir[0] && strlen(path) < sizeof w->run_dir) {
        char tmp[2048];
        snprintf(tmp, sizeof tmp, "%s", path);
        snprintf(w->run_dir, sizeof w->run_dir, "%s", dirname(tmp));
        bus_log(&w->log_q, "run %s checkpoints in %s (from the bus)", c->run, w->run_dir);
    }
    /* checkpoints are opened from run_dir only; an event naming a path elsewhere is said */
    if (path && w->run_dir[0] && !path_inside(w->run_dir, path)) {
        char line[3200];
        snprintf(line, sizeof line, "ignoring a ckpt event of run %s: %.1000s is not a checkpoint inside %s",
                 c->run, path, w->run_dir);
        warn_once(w, line);
    }
    wire_msg_free(&m);
    return 0;
}

static int watch_loop(watch_t *w, char *err, size_t errlen) {
    const eval_watch_cfg_t *c = w->c;
    int poll = c->poll_ms > 0 ? c->poll_ms : 2000;
    while (!w->run_dir[0]) {
        if (c->once || !w->sub) return snprintf(err, errlen, "no --run-dir and no bus to learn it from"), EVAL_EARG;
        if (wait_event(w, poll)) return 0;
    }
    int64_t *steps = NULL, *prev = NULL;
    int n = 0, nprev = 0, rc;
    if ((rc = scan(w, &steps, &n, err, errlen))) return rc;
    if (c->out && (rc = eval_results_done(c->out, c->run, c->tag, &prev, &nprev, err, errlen))) {
        free(steps);
        return rc;
    }
    /* floor: the oldest step this evaluator is responsible for. Alone, the newest on disk at
     * start (everything with --all). After predecessors (the results file holds this run and
     * task), the oldest step they recorded: every checkpoint from there on that is still on disk
     * and not in the file is done, newest first, whatever order they were killed in. */
    int64_t newest = n ? steps[n - 1] : -1, floor = c->all ? -1 : newest, first_prev = INT64_MAX;
    for (int i = 0; i < nprev; i++) {
        set_add(&w->done, prev[i]);
        if (prev[i] < first_prev) first_prev = prev[i];
    }
    if (nprev && !c->all && first_prev < floor) floor = first_prev;
    free(prev);
    free(steps);
    if (!c->once)
        bus_log(&w->log_q, "run %s task %s: %d checkpoint(s) on disk, %d already evaluated", c->run,
                c->tag, n, nprev);
    for (;;) {
        if (c->stop && *c->stop) return 0;
        if ((rc = scan(w, &steps, &n, err, errlen))) return rc;
        /* have: the newest checkpoint not found corrupt; pick: the newest one still to do */
        int64_t pick = -1, have = -1, older = -1;
        for (int i = n - 1; i >= 0; i--) {
            if (set_has(&w->skipped, steps[i])) continue;
            if (have < 0) have = steps[i];
            if (pick < 0 && steps[i] >= floor && !set_has(&w->done, steps[i]) && !set_has(&w->starved, steps[i]))
                pick = steps[i];
        }
        for (int i = n - 1; i >= 0; i--)
            if (steps[i] < pick && !set_has(&w->skipped, steps[i])) {
                older = steps[i];
                break;
            }
        free(steps);
        if (c->once && have < 0) {
            struct stat st;
            const int gone = stat(w->run_dir, &st) != 0; /* not "no checkpoint": no run there at all */
            if (gone || !S_ISDIR(st.st_mode))
                return snprintf(err, errlen, "run directory %s: %s", w->run_dir, gone ? strerror(errno) : "not a directory"),
                       EVAL_EIO;
            return (w->skipped.n ? snprintf(err, errlen, "no usable checkpoint in %s (%d damaged)", w->run_dir, w->skipped.n)
                                 : snprintf(err, errlen, "no complete checkpoint in %s", w->run_dir)), EVAL_EIO;
        }
        if (c->once && c->all) {
            if (pick < 0) return 0; /* --once --all: everything on disk done */
        } else if (c->once && pick != have) {
            /* --once is about the newest checkpoint only */
            bus_log(&w->log_q, "step %lld of run %s already evaluated", (long long)have, c->run);
            return 0;
        }
        const double wait_s = pick >= 0 && w->retry_at ? w->retry_at - mono_now() : 0;
        if (wait_s > 0) { /* out of memory a moment ago: give it time (an event ends the wait early) */
            if (wait_event(w, wait_s * 1000 < poll ? (int)(wait_s * 1000) + 1 : poll)) return 0;
            continue;
        }
        if (pick >= 0) {
            rc = evaluate(w, pick, err, errlen);
            if (rc < 0) return rc;
            if (rc == 1) return 0;
            /* the newest at start turned out corrupt: the newest good one takes its place */
            if (set_has(&w->skipped, pick) && pick == floor) floor = older;
            if (c->once && !c->all && set_has(&w->done, pick)) return 0;
            continue;
        }
        if (wait_event(w, poll)) return 0;
    }
}

int eval_watch_run(const eval_watch_cfg_t *c, char *err, size_t errlen) {
    if (!c || !c->run || !c->task || !c->tag) return snprintf(err, errlen, "eval_watch_run: bad argument"), EVAL_EARG;
    watch_t w;
    memset(&w, 0, sizeof w);
    w.c = c;
    w.log = (bus_log_t){"evaluator", NULL, 0};
    w.log_q = (bus_log_t){"evaluator", NULL, c->quiet};
    if (c->run_dir) snprintf(w.run_dir, sizeof w.run_dir, "%s", c->run_dir);
    const char *fault = getenv("FT_EVALUATOR_FAULT_KILL_AFTER_EVALS");
    w.fault_kill_after = fault ? atoll(fault) : 0;
    int rc = 0;
    if (!c->no_bus) {
        w.zctx = zmq_ctx_new();
        if (!w.zctx) return snprintf(err, errlen, "zmq_ctx_new failed"), EVAL_EIO;
        char e[256];
        const char *pre[] = {"ckpt"};
        if (!c->once) {
            w.sub = bus_sub_open(w.zctx, bus_endpoint_sub(c->bus_sub), pre, 1, e, sizeof e);
            if (!w.sub) {
                rc = (snprintf(err, errlen, "bus %s: %s", bus_endpoint_sub(c->bus_sub), e), EVAL_EIO);
                goto out;
            }
        }
        w.pub = bus_pub_open(w.zctx, bus_endpoint_pub(c->bus_pub), e, sizeof e);
        if (!w.pub) {
            rc = (snprintf(err, errlen, "bus %s: %s", bus_endpoint_pub(c->bus_pub), e), EVAL_EIO);
            goto out;
        }
        /* give the bus a moment to subscribe first: a replacement evaluator may have its
         * first results (a backlog) ready at once, and a PUB drops what it sends before the
         * subscription arrives (seen: every eval event of a short-lived evaluator lost) */
        bus_pub_wait(w.pub, 500);
        w.log.pub = w.log_q.pub = w.pub;
        if (!c->once) { /* a one-shot evaluation is no stage of a running pipeline */
            char name[WIRE_NAME_LEN];
            if (c->name) snprintf(name, sizeof name, "%s", c->name);
            else snprintf(name, sizeof name, "%.30s-%ld", c->tag, (long)getpid());
            if (bus_beat_start(&w.beat, w.zctx, bus_endpoint_pub(c->bus_pub), "evaluator", name, c->run, "", e, sizeof e)) {
                rc = (snprintf(err, errlen, "--name: %s", e), EVAL_EARG);
                goto out;
            }
            bus_beat_set(w.beat, "idle", 0);
        }
    }
    rc = watch_loop(&w, err, errlen);
    if (!rc && c->stop && *c->stop) bus_log(&w.log_q, "stopped by signal after %d evaluation(s)", w.evaluated);
    if (rc && w.pub) { /* the error's line on the bus too; bin/evaluator prints it to stderr */
        bus_log_t bus_only = {"evaluator", w.pub, 1};
        bus_log(&bus_only, "run %s: %s", c->run, err);
    }
out:
    bus_beat_stop(&w.beat);
    bus_close(&w.sub);
    bus_close(&w.pub);
    if (w.zctx) zmq_ctx_term(w.zctx);
    free(w.done.v);
    free(w.skipped.v);
    free(w.starved.v);
    free(w.tried.v);
    free(w.tries);
    free(w.warned);
    return rc;
}
