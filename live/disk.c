/* live/disk.c: run directories and results files followed on disk (live/disk.h). */
#include "live/disk.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bus/utf8.h"

#define SCAN_BUDGET 20000 /* directory entries looked at per scan */

typedef enum { FILE_METRICS, FILE_EVALS } file_kind;

typedef struct {
    char *path;
    file_kind kind;
    dev_t dev;
    ino_t ino;
    off_t off;     /* bytes consumed (whole lines) */
    int dir;       /* index of its run directory, -1 for --results files */
    char run[WIRE_NAME_LEN]; /* metrics: the run and step of the last line, to see a resume */
    int64_t step;
} tail_t;

typedef struct {
    char *path;    /* realpath */
    int64_t ckpt_step;
} rundir_t;

struct live_disk {
    live_store_t *s;
    char **roots;
    int nroots;
    rundir_t dirs[LIVE_DISK_MAX_DIRS];
    int ndirs;
    tail_t files[LIVE_DISK_MAX_FILES];
    int nfiles;
    char *line;    /* LIVE_DISK_LINE_MAX + 1 */
    char reloaded[64][WIRE_NAME_LEN]; /* runs that got points this pass */
    int nreloaded;
};

int live_disk_dirs(const live_disk_t *d) { return d->ndirs; }

static int add_file(live_disk_t *d, const char *path, file_kind kind, int dir) {
    for (int i = 0; i < d->nfiles; i++)
        if (!strcmp(d->files[i].path, path)) return 0;
    if (d->nfiles == LIVE_DISK_MAX_FILES) return -1;
    char *p = strdup(path);
    if (!p) return -1;
    d->files[d->nfiles++] = (tail_t){.path = p, .kind = kind, .dir = dir};
    return 0;
}

int live_disk_new(live_disk_t **out, live_store_t *s, const char *const *roots, int nroots, const char *const *results,
                  int nresults, char *err, size_t errlen) {
    *out = NULL;
    live_disk_t *d = calloc(1, sizeof *d);
    if (!d || !(d->line = malloc(LIVE_DISK_LINE_MAX + 1)) || !(d->roots = calloc((size_t)nroots + 1, sizeof *d->roots))) {
        if (d) free(d->line), free(d);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    d->s = s;
    for (int i = 0; i < nroots; i++) {
        char rp[PATH_MAX];
        struct stat st;
        if (!realpath(roots[i], rp) || stat(rp, &st) || !S_ISDIR(st.st_mode)) {
            snprintf(err, errlen, "--runs %s: %s", roots[i], errno ? strerror(errno) : "not a directory");
            live_disk_free(&d);
            return -1;
        }
        d->roots[d->nroots++] = strdup(rp);
    }
    for (int i = 0; i < nresults; i++) {
        if (access(results[i], R_OK) && errno != ENOENT) { /* a file not there yet is followed when it comes */
            snprintf(err, errlen, "--results %s: %s", results[i], strerror(errno));
            live_disk_free(&d);
            return -1;
        }
        add_file(d, results[i], FILE_EVALS, -1);
    }
    *out = d;
    return 0;
}

void live_disk_free(live_disk_t **dp) {
    if (!dp || !*dp) return;
    live_disk_t *d = *dp;
    for (int i = 0; i < d->nroots; i++) free(d->roots[i]);
    for (int i = 0; i < d->ndirs; i++) free(d->dirs[i].path);
    for (int i = 0; i < d->nfiles; i++) free(d->files[i].path);
    free(d->roots), free(d->line), free(d);
    *dp = NULL;
}

/* 1 when the resolved path rp lies under a root (or is one). */
static int under_root(const live_disk_t *d, const char *rp) {
    for (int i = 0; i < d->nroots; i++) {
        size_t n = strlen(d->roots[i]);
        if (!strncmp(rp, d->roots[i], n) && (rp[n] == '/' || rp[n] == 0 || (n == 1 && d->roots[i][0] == '/')))
            return 1;
    }
    return 0;
}

/* The *.jsonl files of run directory k (metrics.jsonl as metrics, the others as results). */
static void list_files(live_disk_t *d, int k) {
    DIR *dir = opendir(d->dirs[k].path);
    if (!dir) return;
    struct dirent *e;
    while ((e = readdir(dir))) {
        size_t n = strlen(e->d_name);
        if (e->d_name[0] == '.' || n < 7 || strcmp(e->d_name + n - 6, ".jsonl")) continue;
        char path[PATH_MAX + 256];
        snprintf(path, sizeof path, "%s/%s", d->dirs[k].path, e->d_name);
        add_file(d, path, strcmp(e->d_name, "metrics.jsonl") ? FILE_EVALS : FILE_METRICS, k);
    }
    closedir(dir);
}

static int add_dir(live_disk_t *d, const char *rp) {
    for (int i = 0; i < d->ndirs; i++)
        if (!strcmp(d->dirs[i].path, rp)) return i;
    if (d->ndirs == LIVE_DISK_MAX_DIRS) return -1;
    char *p = strdup(rp);
    if (!p) return -1;
    d->dirs[d->ndirs] = (rundir_t){p, -1};
    list_files(d, d->ndirs);
    return d->ndirs++;
}

/* A run directory holds a metrics.jsonl or a ckpt-<digits> entry. */
static int is_run_dir(const char *path) {
    DIR *dir = opendir(path);
    if (!dir) return 0;
    struct dirent *e;
    int yes = 0;
    while (!yes && (e = readdir(dir)))
        yes = !strcmp(e->d_name, "metrics.jsonl") ||
              (!strncmp(e->d_name, "ckpt-", 5) && strspn(e->d_name + 5, "0123456789") == strlen(e->d_name + 5) &&
               e->d_name[5]);
    closedir(dir);
    return yes;
}

static void walk(live_disk_t *d, const char *path, int depth, int *budget) {
    if (is_run_dir(path)) add_dir(d, path);
    if (depth == LIVE_DISK_DEPTH) return;
    DIR *dir = opendir(path);
    if (!dir) return;
    struct dirent *e;
    while ((e = readdir(dir)) && --*budget > 0) {
        if (e->d_name[0] == '.' || !strncmp(e->d_name, "ckpt-", 5) || !strcmp(e->d_name, "node_modules")) continue;
        char sub[PATH_MAX + 256];
        snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
        struct stat st;
        if (lstat(sub, &st) || !S_ISDIR(st.st_mode)) continue; /* links are not followed out of the root */
        walk(d, sub, depth + 1, budget);
    }
    closedir(dir);
}

void live_disk_scan(live_disk_t *d) {
    int budget = SCAN_BUDGET;
    for (int i = 0; i < d->nroots; i++) walk(d, d->roots[i], 0, &budget);
    for (int k = 0; k < d->ndirs; k++) list_files(d, k); /* results files that appeared since */
}

void live_disk_ckpt_announced(live_disk_t *d, const char *ckpt_path) {
    char tmp[PATH_MAX], rp[PATH_MAX];
    if (!ckpt_path || strlen(ckpt_path) >= sizeof tmp) return;
    snprintf(tmp, sizeof tmp, "%s", ckpt_path);
    char *slash = strrchr(tmp, '/');
    if (!slash) snprintf(tmp, sizeof tmp, ".");
    else if (slash == tmp) tmp[1] = 0;
    else *slash = 0;
    if (!realpath(tmp, rp) || !under_root(d, rp)) return;
    int before = d->ndirs;
    if (add_dir(d, rp) >= before) live_disk_poll(d);
}

/* ---- reading lines ------------------------------------------------------------------------- */

static int valid_name(const char *s) {
    size_t n = s ? strlen(s) : 0;
    return n > 0 && n < WIRE_NAME_LEN && wire_utf8_valid(s, n);
}

/* "values": {name: number|null} into kv; 0 or -1. */
static int read_values(json_t *o, wire_kv_t *kv, uint32_t *n) {
    *n = 0;
    if (!json_is_object(o) || json_object_size(o) > WIRE_MAX_KV) return -1;
    const char *k;
    json_t *v;
    json_object_foreach(o, k, v) {
        if (!valid_name(k)) return -1;
        double x;
        if (json_is_number(v)) x = json_number_value(v);
        else if (json_is_null(v)) x = NAN;
        else continue;
        wire_kv_add(kv, n, k, x);
    }
    return 0;
}

static void mark_reloaded(live_disk_t *d, const char *run) {
    for (int i = 0; i < d->nreloaded; i++)
        if (!strcmp(d->reloaded[i], run)) return;
    if (d->nreloaded < 64) snprintf(d->reloaded[d->nreloaded++], WIRE_NAME_LEN, "%s", run);
}

static void ingest_line(live_disk_t *d, tail_t *f, const char *line, size_t len) {
    json_t *o = json_loadb(line, len, 0, NULL);
    if (!json_is_object(o)) {
        json_decref(o);
        return;
    }
    const char *run = json_string_value(json_object_get(o, "run"));
    json_t *step = json_object_get(o, "step");
    json_t *time = json_object_get(o, "time");
    wire_kv_t kv[WIRE_MAX_KV];
    uint32_t n = 0;
    if (valid_name(run) && json_is_integer(step) && json_integer_value(step) >= 0 &&
        !read_values(json_object_get(o, "values"), kv, &n)) {
        double t = json_is_number(time) ? json_number_value(time) : NAN;
        uint64_t st = (uint64_t)json_integer_value(step);
        int changed = 0;
        if (f->kind == FILE_METRICS) {
            /* the run's own line, not a data-parallel rank's (topic metrics/<run>/<rank>) */
            const char *topic = json_string_value(json_object_get(o, "topic"));
            char want[WIRE_NAME_LEN + 16];
            snprintf(want, sizeof want, "metrics/%s", run);
            if (!topic || !strcmp(topic, want)) {
                if (!strcmp(f->run, run) && (int64_t)st < f->step) /* the run was resumed from an older checkpoint */
                    changed |= live_store_truncate(d->s, run, st);
                snprintf(f->run, sizeof f->run, "%s", run);
                f->step = (int64_t)st;
                changed |= live_store_metrics(d->s, LIVE_SRC_DISK, run, st, t, kv, n, 0);
            }
        } else {
            const char *task = json_string_value(json_object_get(o, "task"));
            if (valid_name(task)) changed = live_store_eval(d->s, LIVE_SRC_DISK, run, task, st, t, kv, n);
        }
        if (changed) mark_reloaded(d, run);
    }
    json_decref(o);
}

/* Reads the whole lines appended to f since the last call. */
static void tail(live_disk_t *d, tail_t *f) {
    int fd = open(f->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    struct stat st;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
        close(fd);
        return;
    }
    if (st.st_dev != f->dev || st.st_ino != f->ino || st.st_size < f->off) { /* new file, or rewritten */
        f->dev = st.st_dev, f->ino = st.st_ino, f->off = 0;
        f->run[0] = 0;
    }
    size_t have = 0;
    int skipping = 0; /* inside a line longer than LIVE_DISK_LINE_MAX */
    while (f->off + (off_t)have < st.st_size) {
        ssize_t r = pread(fd, d->line + have, LIVE_DISK_LINE_MAX - have, f->off + (off_t)have);
        if (r <= 0) break;
        have += (size_t)r;
        size_t start = 0;
        for (size_t i = 0; i < have; i++) {
            if (d->line[i] != '\n') continue;
            if (!skipping && i > start) ingest_line(d, f, d->line + start, i - start);
            skipping = 0;
            start = i + 1;
        }
        f->off += (off_t)start;
        memmove(d->line, d->line + start, have - start);
        have -= start;
        if (have == LIVE_DISK_LINE_MAX) { /* no newline in a whole buffer: drop it */
            f->off += (off_t)have;
            have = 0;
            skipping = 1;
        }
    }
    close(fd);
}

/* The run directory's newest checkpoint: the highest ckpt-<digits> entry holding a MANIFEST
 * (written last, docs/FORMATS.md §3; a save in progress is a ckpt-*.tmp). Only its name, its
 * MANIFEST's time and state.json's "run" and "model" are read: this is for showing, not
 * loading (model/checkpoint.h's full rule would also link the whole model library in). */
static void newest_ckpt(live_disk_t *d, rundir_t *rd) {
    DIR *dd = opendir(rd->path);
    if (!dd) return;
    long long top = -1;
    struct dirent *e;
    char man[PATH_MAX + 96];
    struct stat sb;
    while ((e = readdir(dd))) {
        const char *digits = e->d_name + 5;
        if (strncmp(e->d_name, "ckpt-", 5) || !*digits || strspn(digits, "0123456789") != strlen(digits) ||
            strlen(digits) > 18)
            continue;
        long long step = atoll(digits);
        if (step <= top || step <= rd->ckpt_step) continue;
        snprintf(man, sizeof man, "%s/%s/MANIFEST", rd->path, e->d_name);
        if (!stat(man, &sb)) top = step;
    }
    closedir(dd);
    if (top < 0) return;
    rd->ckpt_step = top;
    char dir[PATH_MAX + 64], state[PATH_MAX + 96];
    snprintf(dir, sizeof dir, "%s/ckpt-%08lld", rd->path, top);
    snprintf(man, sizeof man, "%s/MANIFEST", dir);
    snprintf(state, sizeof state, "%s/state.json", dir);
    if (stat(man, &sb)) return;
    json_t *st = json_load_file(state, 0, NULL);
    const char *run = json_string_value(json_object_get(st, "run"));
    const char *model = json_string_value(json_object_get(st, "model"));
    double t = (double)sb.st_mtim.tv_sec + sb.st_mtim.tv_nsec * 1e-9;
    if (valid_name(run)) live_store_ckpt(d->s, run, (uint64_t)top, t, dir, valid_name(model) ? model : "");
    json_decref(st);
}

void live_disk_poll(live_disk_t *d) {
    d->nreloaded = 0;
    for (int i = 0; i < d->nfiles; i++) tail(d, &d->files[i]);
    for (int k = 0; k < d->ndirs; k++) newest_ckpt(d, &d->dirs[k]);
    for (int i = 0; i < d->nreloaded; i++) live_store_run_reloaded(d->s, d->reloaded[i]);
}
