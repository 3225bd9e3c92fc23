/* model/prof.h: wall-clock timers around the device's ops, for profiling a step.
 *
 * perf counters are not available on every machine we measure on (a VM without a PMU), and
 * valgrind cannot run the AVX-512 code of the bf16 path, so a step is profiled by timers: while
 * prof_start() is in force, every DEV() call (device.h) adds its wall time to a line named after
 * its op, and the matrix product (gemm.c) splits its own time into "gemm.product" (oneDNN or
 * OpenBLAS running) and "gemm.round" (operands rounded to bf16) -- for products called outside
 * a parallel region; those inside one (attention's blocks) count in their op's line only.
 * Off, a timer costs one load and one branch per op call. The lines live for the process;
 * prof_snapshot copies them, so a caller can take per-step differences and their medians
 * (bench/train_step --profile). CPU ops are synchronous, so their times are theirs; a GPU op
 * only queues work, so on a GPU these times are launch times (the CUDA device has its own
 * product timer, device.h profile_gemm). Not thread-safe: a step runs its ops from one host
 * thread. */
#ifndef MODEL_PROF_H
#define MODEL_PROF_H
#include <stddef.h>

#define PROF_LINES 96

typedef struct {
    const char *name;   /* static storage: the op's name as DEV() spells it */
    const char *in;     /* for a product's lines: the op it ran in (NULL: none) */
    double seconds;
    long calls;
} prof_line_t;

extern int prof_on_;
/* The op whose DEV() call is running (NULL between ops). */
extern const char *prof_op_;

double prof_now(void);
/* Adds one call of `seconds` to the line `name` (a string of static storage); a name that
 * starts with "gemm." is a product's line, kept apart per op that runs it. */
void prof_add(const char *name, double seconds);
/* Zeroes the lines and turns the timers on / off. cpu_clock: time by the calling thread's CPU
 * clock instead of the wall clock -- for a one-thread run on a machine shared with other work,
 * where the wall clock also counts the time other processes held the core. */
void prof_start(int cpu_clock);
void prof_stop(void);
/* Turns the timers back on after prof_stop, the lines kept (a pause). */
void prof_resume(void);
/* Copies the lines (at most cap) into out; returns how many there are. */
int prof_snapshot(prof_line_t *out, int cap);

typedef struct {
    const char *name;
    double t0;
} prof_timer_t;

static inline prof_timer_t prof_begin(const char *name) {
    prof_timer_t t = {name, 0.0};
    if (prof_on_) t.t0 = prof_now(), prof_op_ = name;
    return t;
}
static inline void prof_end(prof_timer_t *t) {
    if (prof_on_) prof_add(t->name, prof_now() - t->t0), prof_op_ = NULL;
}
#endif
