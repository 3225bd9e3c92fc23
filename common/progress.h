/* common/progress.h: the progress line every long job shows on a terminal.
 *
 * Draws "label [=====>    ] 42% 1.2M/3.0M 310k/s ETA 0:05" on stderr, at most ~10 times a
 * second, and only when stderr is a terminal (logs and CI stay clean). total may be 0 when
 * unknown: then it shows the count and the rate only. */
#ifndef COMMON_PROGRESS_H
#define COMMON_PROGRESS_H
#include <stdint.h>

typedef struct {
    const char *label;
    const char *unit;     /* "tok", "B", "step", ... */
    uint64_t total;       /* 0: unknown */
    double t_start, t_last_draw;
    int enabled;          /* stderr is a tty (or FT_PROGRESS=1) */
    char extra[96];       /* free text appended to the line (loss, lr, ...) */
} progress_t;

void progress_init(progress_t *p, const char *label, const char *unit, uint64_t total);
/* Redraws if enough time passed since the last draw; cheap to call in a hot loop. */
void progress_update(progress_t *p, uint64_t done);
/* Final draw and a newline. */
void progress_finish(progress_t *p, uint64_t done);
/* Monotonic seconds. */
double progress_now(void);
#endif
