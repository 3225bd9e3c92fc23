/* bench/sgemm.c: the machine's matrix-product ceiling, cblas_sgemm at N x N x N.
 * Prints the median GFLOP/s of R repeats; the training benchmark reports its own
 * throughput as a fraction of this number, measured in the same run. */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/progress.h"

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 1024, reps = argc > 2 ? atoi(argv[2]) : 9;
    if (n <= 0 || reps <= 0 || reps > 1000) {
        fprintf(stderr, "usage: sgemm [N] [REPEATS]\n");
        return 2;
    }
    float *a = malloc(sizeof(float) * n * n), *b = malloc(sizeof(float) * n * n),
          *c = malloc(sizeof(float) * n * n);
    double *g = malloc(sizeof(double) * reps);
    if (!a || !b || !c || !g) return 1;
    for (long i = 0; i < (long)n * n; i++) a[i] = (float)(i % 17) / 17.f, b[i] = (float)(i % 13) / 13.f;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.f, a, n, b, n, 0.f, c, n); /* warm */
    for (int r = 0; r < reps; r++) {
        double t = progress_now();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.f, a, n, b, n, 0.f, c, n);
        g[r] = 2.0 * n * n * (double)n / (progress_now() - t) / 1e9;
    }
    qsort(g, reps, sizeof *g, cmp);
    printf("%.2f\n", g[reps / 2]);
    free(a), free(b), free(c), free(g);
    return 0;
}
