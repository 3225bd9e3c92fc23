/* model/prof.c: the op timers (prof.h). */
#include "model/prof.h"
#include <string.h>
#include <time.h>

int prof_on_;
const char *prof_op_;
static prof_line_t lines[PROF_LINES];
static int nlines;
static clockid_t clock_id = CLOCK_MONOTONIC;

double prof_now(void) {
    struct timespec ts;
    clock_gettime(clock_id, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

void prof_add(const char *name, double seconds) {
    int i = 0;
    const char *in = strncmp(name, "gemm.", 5) ? NULL : prof_op_;
    /* names are literals: the same op usually has the same pointer, strcmp catches the rest */
    while (i < nlines && ((lines[i].name != name && strcmp(lines[i].name, name)) || lines[i].in != in)) i++;
    if (i == nlines) {
        if (nlines == PROF_LINES) return;   /* more op names than lines: the rest uncounted */
        lines[nlines++] = (prof_line_t){name, in, 0.0, 0};
    }
    lines[i].seconds += seconds;
    lines[i].calls++;
}

void prof_start(int cpu_clock) {
    nlines = 0;
    clock_id = cpu_clock ? CLOCK_THREAD_CPUTIME_ID : CLOCK_MONOTONIC;
    prof_on_ = 1;
}

void prof_stop(void) { prof_on_ = 0; }

void prof_resume(void) { prof_on_ = 1; }

int prof_snapshot(prof_line_t *out, int cap) {
    for (int i = 0; i < nlines && i < cap; i++) out[i] = lines[i];
    return nlines;
}
