/* model/ops_rows.c: element-wise and row helpers (ops.h). Each element's result is one
 * expression, or a sum in the order of n, so the thread count changes no bit. */
#include "model/ops.h"
#include "model/ops_clones.h"
#include <omp.h>
#include <string.h>

/* Below this many elements a loop is not worth a parallel region. */
#define ROWS_PAR_MIN 32768

/* The additions below run without any region when it would be a team of one (ops_par): 8
 * futex wakes a decode token at config S (strace). */
void add_forward(float *y, const float *a, const float *b, size_t n) {
    if (!ops_par((double)n, ROWS_PAR_MIN)) {
        for (size_t i = 0; i < n; i++) y[i] = a[i] + b[i];
        return;
    }
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) y[i] = a[i] + b[i];
}

void add_inplace(float *y, const float *x, size_t n) {
    if (!ops_par((double)n, ROWS_PAR_MIN)) {
        for (size_t i = 0; i < n; i++) y[i] += x[i];
        return;
    }
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) y[i] += x[i];
}

void scale_inplace(float *x, float s, size_t n) {
#pragma omp parallel for schedule(static) if (n >= ROWS_PAR_MIN)
    for (size_t i = 0; i < n; i++) x[i] *= s;
}

void repeat_rows(float *out, const float *row, int N, int D) {
#pragma omp parallel for schedule(static) if ((size_t)N * D >= ROWS_PAR_MIN)
    for (int n = 0; n < N; n++) memcpy(out + (size_t)n * D, row, sizeof(float) * D);
}

void sum_rows(float *out, const float *x, int N, int D) {
    /* threads own columns; each still sums over n in order (the same bits as serial) */
#pragma omp parallel for schedule(static) if ((size_t)N * D >= ROWS_PAR_MIN)
    for (int i = 0; i < D; i++)
        for (int n = 0; n < N; n++) out[i] += x[(size_t)n * D + i];
}

void copy_rows(float *dst, int ld_dst, const float *src, int ld_src, int rows, int D) {
    for (int i = 0; i < rows; i++)
        memcpy(dst + (size_t)i * ld_dst, src + (size_t)i * ld_src, sizeof(float) * D);
}
