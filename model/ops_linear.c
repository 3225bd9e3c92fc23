/* model/ops_linear.c: bias-free Linear through model_gemm (mapping table in gemm.h). */
#include "model/ops.h"
#include "model/gemm.h"

void linear_forward(float *y, const float *x, const float *w, int N, int in, int out) {
    model_gemm(GEMM_T, GEMM_N, out, N, in, 1.0f, w, in, x, in, 0.0f, y, out);
}

void linear_backward(float *dx, float *dw, const float *dy, const float *x, const float *w, int N,
                     int in, int out) {
    if (dx) model_gemm(GEMM_N, GEMM_N, in, N, out, 1.0f, w, in, dy, out, 1.0f, dx, in);
    if (dw) model_gemm(GEMM_N, GEMM_T, in, out, N, 1.0f, x, in, dy, out, 1.0f, dw, in);
}

void linear_backward_set(float *dx, float *dw, const float *dy, const float *x, const float *w,
                         int N, int in, int out) {
    if (dx) model_gemm(GEMM_N, GEMM_N, in, N, out, 1.0f, w, in, dy, out, 0.0f, dx, in);
    if (dw) model_gemm(GEMM_N, GEMM_T, in, out, N, 1.0f, x, in, dy, out, 1.0f, dw, in);
}
