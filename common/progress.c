/* common/progress.c: see progress.h. */
#include "common/progress.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

double progress_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

void progress_init(progress_t *p, const char *label, const char *unit, uint64_t total) {
    memset(p, 0, sizeof *p);
    p->label = label;
    p->unit = unit;
    p->total = total;
    p->t_start = progress_now();
    const char *force = getenv("FT_PROGRESS");
    p->enabled = force ? atoi(force) != 0 : isatty(STDERR_FILENO);
}

static void human(char *buf, size_t n, double v) {
    if (v >= 1e9) snprintf(buf, n, "%.2fG", v / 1e9);
    else if (v >= 1e6) snprintf(buf, n, "%.2fM", v / 1e6);
    else if (v >= 1e4) snprintf(buf, n, "%.1fk", v / 1e3);
    else snprintf(buf, n, "%.0f", v);
}

static void draw(progress_t *p, uint64_t done, int final) {
    double now = progress_now(), dt = now - p->t_start;
    double rate = dt > 0 ? done / dt : 0;
    char sdone[32], stot[32], srate[32], bar[32] = "";
    human(sdone, sizeof sdone, (double)done);
    human(stot, sizeof stot, (double)p->total);
    human(srate, sizeof srate, rate);
    if (p->total) {
        double f = (double)done / p->total;
        if (f > 1) f = 1;
        int w = 20, k = (int)(f * w);
        for (int i = 0; i < w; i++) bar[i] = i < k ? '=' : (i == k ? '>' : ' ');
        bar[w] = 0;
        double eta = rate > 0 ? (p->total - (done < p->total ? done : p->total)) / rate : 0;
        int es = (int)eta;
        fprintf(stderr, "\r%s [%s] %3.0f%% %s/%s %s %s/s ETA %d:%02d:%02d %s\033[K", p->label, bar,
                100 * f, sdone, stot, p->unit, srate, es / 3600, es / 60 % 60, es % 60, p->extra);
    } else {
        fprintf(stderr, "\r%s %s %s %s/s %s\033[K", p->label, sdone, p->unit, srate, p->extra);
    }
    if (final) fputc('\n', stderr);
    fflush(stderr);
    p->t_last_draw = now;
}

void progress_update(progress_t *p, uint64_t done) {
    if (!p->enabled) return;
    if (progress_now() - p->t_last_draw < 0.1) return;
    draw(p, done, 0);
}

void progress_finish(progress_t *p, uint64_t done) {
    if (p->enabled) draw(p, done, 1);
}
