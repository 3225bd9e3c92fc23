/* model/ops_rmsnorm.c: RMSNorm over rows (row math in ops_math.h). */
#include "model/ops.h"
#include <stddef.h>
#include "model/ops_math.h"

void rmsnorm_forward(float *out, float *rstd, const float *x, const float *w, int N, int D,
                     float eps) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++)
        rstd[n] = ops_rmsnorm_row(out + (size_t)n * D, x + (size_t)n * D, w, D, eps);
}

void rmsnorm_backward(float *dx, float *dw, const float *dout, const float *x, const float *w,
                      const float *rstd, int N, int D) {
    if (dx) {
#pragma omp parallel for schedule(static)
        for (int n = 0; n < N; n++)
            ops_rmsnorm_row_backward(dx + (size_t)n * D, dout + (size_t)n * D, x + (size_t)n * D, w,
                                     rstd[n], D);
    }
    /* dw sums over all rows: split columns, not rows, so each sum runs in row order. */
    const int CH = 64;
    int nch = (D + CH - 1) / CH;
#pragma omp parallel for schedule(static)
    for (int c = 0; c < nch; c++) {
        int lo = c * CH, hi = lo + CH < D ? lo + CH : D;
        for (int n = 0; n < N; n++) {
            const float *dy = dout + (size_t)n * D, *xr = x + (size_t)n * D;
            float r = rstd[n];
            for (int i = lo; i < hi; i++) dw[i] += dy[i] * xr[i] * r;
        }
    }
}
