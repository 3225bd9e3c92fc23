/* evaluator/watch.h: following a run and evaluating each of its checkpoints once.
 *
 * The run's checkpoint directory is the source of truth; the bus only says when to look
 * again (a ckpt event whose path is not inside it is ignored, with one line). A subscription to "ckpt" brings the bus's welcome message (the latest checkpoint of
 * every run) and every new announcement; without a bus the directory is rescanned every
 * poll_ms. The evaluator only reads checkpoints and only publishes events, so starting,
 * killing or replacing it never affects the trainer.
 *
 * Which checkpoints: at start, the newest usable one (or every one with `all`); after that
 * every newer one as it appears, newest first. Steps already in the results file for this
 * (run, task) are not redone, and when that file shows predecessors, the replacement resumes
 * where they stopped: every checkpoint still on disk from the oldest step they recorded on
 * that the file lacks (newest first, then the backlog), each once, however many were killed.
 * A checkpoint that is not usable (model/checkpoint.h's rule, ckpt_open) is skipped with one
 * line on stderr, once. Running out of memory loading or scoring one is no damage: it is not
 * skipped; once, the error returned (EVAL_ENOMEM); watching, one line and another try after
 * poll_ms, doubling up to 60 s, and after oom_tries tries of one checkpoint one line that gives
 * it up, unscored, while newer ones go on (docs/evaluator.md). */
#ifndef EVALUATOR_WATCH_H
#define EVALUATOR_WATCH_H
#include "model/device.h"
#include <signal.h>
#include <stddef.h>

#include "evaluator/task.h"

typedef struct {
    const char *run;       /* run name: topic "ckpt/<run>", "eval/<run>" */
    const char *run_dir;   /* checkpoint directory; NULL: learnt from the bus's announcements */
    const char *bus_sub;   /* endpoints as given (NULL: $FT_BUS_SUB / default) */
    const char *bus_pub;
    int no_bus;            /* neither subscribe nor publish */
    const char *out;       /* results file (NULL: stdout only) */
    const char *tag;       /* task name in results and events */
    const char *name;      /* instance name in its "stage" beats (NULL: <tag>-<pid>) */
    int once;              /* evaluate the newest checkpoint (with all: every one) and return */
    int all;               /* also evaluate the checkpoints older than the newest at start */
    int poll_ms;           /* directory rescan period when the bus is quiet */
    int oom_tries;         /* watching: tries of a checkpoint short of memory before giving it up (0: never) */
    int quiet;             /* no progress lines on stderr (they still go to the bus, log/evaluator) */
    eval_task_t *task;
    device_t *dev;         /* where the evaluated models run (NULL: the CPU) */
    volatile sig_atomic_t *stop;
} eval_watch_cfg_t;

/* Runs until stop is set (returns 0), or with once after one evaluation (0), or on an error
 * that makes watching pointless (negative, err set): a task that cannot run on this run's
 * model, an unwritable results file, --once with no checkpoint. */
int eval_watch_run(const eval_watch_cfg_t *c, char *err, size_t errlen);
#endif
