/* live/disk.h: the history already on disk, for a bin/live started late or restarted.
 *
 * Run directories are found under the roots bin/live was given (--runs; realpath'd): a
 * directory up to LIVE_DISK_DEPTH levels below a root that holds a trainer's metrics.jsonl or
 * checkpoints, and the directory of a checkpoint the bus announces when it lies under a root
 * (the bus says which run, never where to read: a path outside every root is not opened). In
 * each run directory:
 *   - metrics.jsonl (written by bin/trainer, docs/FORMATS.md §3): the metrics of every step;
 *   - every other *.jsonl: evaluator results lines (docs/evaluator.md, "Results"); lines of
 *     other shapes are skipped;
 *   - the newest ckpt-* directory: the run's last checkpoint and, from its state.json, the
 *     run's name and model when the bus has not said.
 * Files given with --results are read as evaluator results wherever they are. Every file is
 * followed like `tail -f` (a file that shrank or was replaced is read again from the start);
 * a line longer than LIVE_DISK_LINE_MAX or not JSON is skipped. Points read from disk reach
 * the pages as one "run" update per run and pass, not one per line. */
#ifndef LIVE_DISK_H
#define LIVE_DISK_H
#include <stddef.h>

#include "live/store.h"

#define LIVE_DISK_DEPTH 3
#define LIVE_DISK_LINE_MAX (64 << 10)
#define LIVE_DISK_MAX_DIRS 256
#define LIVE_DISK_MAX_FILES 1024

typedef struct live_disk live_disk_t;

/* roots: directories under which run directories may be read (each must exist); results:
 * evaluator results files. 0, or -1 with err set. */
int live_disk_new(live_disk_t **d, live_store_t *s, const char *const *roots, int nroots, const char *const *results,
                  int nresults, char *err, size_t errlen);
void live_disk_free(live_disk_t **d);
/* Looks for run directories under the roots (bounded: at most 20000 directory entries). */
void live_disk_scan(live_disk_t *d);
/* Reads what was appended to every followed file, and each run directory's newest checkpoint. */
void live_disk_poll(live_disk_t *d);
/* A checkpoint path from the bus: its directory is followed when it lies under a root. */
void live_disk_ckpt_announced(live_disk_t *d, const char *ckpt_path);
/* Run directories followed. */
int live_disk_dirs(const live_disk_t *d);
#endif
