/* bench/stats.h: the few statistics the bench programs share -- the median of repeated timings
 * and a bootstrap interval for the median of paired ratios (train_step --versus, generate
 * --versus). Header-only: each bench program is one translation unit.
 *
 * Why a bootstrap of the median: the paired ratios of a noisy VM have outliers (a round slowed
 * by a neighbour), so the median, not the mean, is reported; its spread has no closed form, so it
 * is resampled. The seed is fixed so the same timings always give the same interval. */
#ifndef BENCH_STATS_H
#define BENCH_STATS_H

#include <stdlib.h>
#include "common/rng.h"

static inline int bench_cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* the median of v[0 .. n) (sorts v in place); n >= 1 */
static inline double bench_median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, bench_cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* the 5% and 95% points of the median of x[0 .. n) resampled with replacement, 2000 times,
 * seed 2026: 0, or -1 (lo = hi = 0) when memory runs out */
static inline int bench_median_interval(const double *x, int n, double *lo, double *hi) {
    enum { RESAMPLES = 2000 };
    double *med = malloc(sizeof(double) * RESAMPLES), *v = malloc(sizeof(double) * (size_t)n);
    int rc = -1;
    *lo = *hi = 0.0;
    if (med && v) {
        rng_t r;
        rng_seed(&r, 2026);
        for (int k = 0; k < RESAMPLES; k++) {
            for (int i = 0; i < n; i++) v[i] = x[rng_below(&r, (uint64_t)n)];
            med[k] = bench_median(v, n);
        }
        qsort(med, RESAMPLES, sizeof *med, bench_cmp_double);
        *lo = med[RESAMPLES / 20], *hi = med[RESAMPLES - 1 - RESAMPLES / 20];
        rc = 0;
    }
    free(med), free(v);
    return rc;
}

#endif
