/* evaluator/results.h: the results file, one JSON object per line per evaluation:
 *   {"run":"a","task":"val","step":20,"time":1763779200.5,"ckpt":"runs/a/ckpt-00000020",
 *    "values":{"ce":2.1,"ppl":8.2,"bpb":3.0,"tokens":4096,"tokens_seen":25600,"eval_s":0.4}}
 * Lines are appended with O_APPEND and fsynced one by one, so several evaluators may share a
 * file and a crash loses at most the line being written; a reader skips a torn last line. */
#ifndef EVALUATOR_RESULTS_H
#define EVALUATOR_RESULTS_H
#include <stddef.h>
#include <stdint.h>

#include "evaluator/task.h"

typedef struct {
    const char *run, *task, *ckpt;
    int64_t step;
    double time;
    const eval_values_t *values;
} eval_record_t;

/* The record as one JSON line (no newline) into a malloc'd string; NULL on out-of-memory. */
char *eval_record_json(const eval_record_t *r);
/* Appends the line (and '\n') to path, creating it; fsyncs before returning. */
int eval_results_append(const char *path, const eval_record_t *r, char *err, size_t errlen);
/* Steps already recorded in path for (run, task), in file order (*steps malloc'd, caller
 * frees; NULL when *n == 0). A missing file is no results; lines that do not parse are
 * skipped. */
int eval_results_done(const char *path, const char *run, const char *task, int64_t **steps,
                      int *n, char *err, size_t errlen);
#endif
