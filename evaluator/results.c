/* evaluator/results.c: the JSONL results file (see results.h). */
#include "evaluator/results.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

char *eval_record_json(const eval_record_t *r) {
    json_t *vals = json_object();
    for (uint32_t i = 0; vals && i < r->values->n; i++)
        json_object_set_new(vals, r->values->kv[i].name,
                            isfinite(r->values->kv[i].value) ? json_real(r->values->kv[i].value)
                                                             : json_null());
    json_t *o = json_pack("{s:s, s:s, s:I, s:f, s:s, s:o}", "run", r->run, "task", r->task, "step",
                          (json_int_t)r->step, "time", r->time, "ckpt", r->ckpt ? r->ckpt : "",
                          "values", vals);
    if (!o) return NULL;
    /* JSON_REAL_PRECISION 17: doubles round-trip exactly. JSON has no NaN: a non-finite value
     * (a diverged model) is written as null above. */
    char *s = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17));
    json_decref(o);
    return s;
}

static int write_all(int fd, const char *p, size_t n) {
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

int eval_results_append(const char *path, const eval_record_t *r, char *err, size_t errlen) {
    char *line = eval_record_json(r);
    if (!line) return snprintf(err, errlen, "out of memory writing %s", path), EVAL_ENOMEM;
    int fd = open(path, O_RDWR | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        free(line);
        return EVAL_EIO;
    }
    /* a predecessor killed mid-line left no newline: start ours on a fresh line */
    struct stat st;
    int rc = 0;
    if (fstat(fd, &st) == 0 && st.st_size > 0) {
        char last = '\n';
        if (pread(fd, &last, 1, st.st_size - 1) == 1 && last != '\n') rc = write_all(fd, "\n", 1);
    }
    size_t n = strlen(line);
    line[n] = '\n'; /* one write of line + newline: O_APPEND keeps it whole beside other writers */
    if (!rc) rc = write_all(fd, line, n + 1);
    if (!rc) rc = fsync(fd);
    if (rc) snprintf(err, errlen, "%s: %s", path, strerror(errno));
    close(fd);
    free(line);
    return rc ? EVAL_EIO : 0;
}

int eval_results_done(const char *path, const char *run, const char *task, int64_t **steps,
                      int *n, char *err, size_t errlen) {
    *steps = NULL;
    *n = 0;
    FILE *f = fopen(path, "r");
    if (!f) {
        if (errno == ENOENT) return 0;
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return EVAL_EIO;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int cnt = 0, scap = 0;
    int64_t *s = NULL;
    while ((len = getline(&line, &cap, f)) >= 0) {
        json_t *o = json_loadb(line, (size_t)len, 0, NULL);
        const char *r = json_string_value(json_object_get(o, "run"));
        const char *t = json_string_value(json_object_get(o, "task"));
        json_t *st = json_object_get(o, "step");
        if (r && t && json_is_integer(st) && !strcmp(r, run) && !strcmp(t, task)) {
            if (cnt == scap) {
                scap = scap ? 2 * scap : 32;
                int64_t *p = realloc(s, sizeof *p * scap);
                if (!p) {
                    json_decref(o);
                    free(s);
                    free(line);
                    fclose(f);
                    return snprintf(err, errlen, "out of memory"), EVAL_ENOMEM;
                }
                s = p;
            }
            s[cnt++] = json_integer_value(st);
        }
        json_decref(o);
    }
    free(line);
    fclose(f);
    *steps = s;
    *n = cnt;
    return 0;
}
