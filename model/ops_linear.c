/* model/ops_linear.c: bias-free Linear through model_gemm (mapping table in gemm.h). */
#include "model/ops.h"
#include "model/gemm.h"
#include "model/gemm_impl.h"
#include "model/ops_bf16.h"
#include "model/ops_clones.h"

precision_t ops_product_precision = PRECISION_FP32;

/* Up to this many rows (a decode step's) a Linear forward is done by the loop below instead
 * of through model_gemm: OpenBLAS's sgemm packs the whole weight matrix into a buffer on every call,
 * whatever n is (for a decode row that copy was 67% of the time, perf on config S), and its
 * sgemv kernel depends on the core type OpenBLAS detects (on this VM's unrecognised Xeon it
 * picks the SSE3 "Prescott" kernels: 2x slower than with OPENBLAS_CORETYPE=Haswell). The
 * loop below reads each weight once per call, 4 rows at a time so each x load serves 4 FMAs,
 * and tiles of 4 weight rows x 4 x rows when several sequences decode together (config S, 4
 * sequences: 658 tok/s through sgemm, 1095 with one x row at a time, 1840 with the tiles);
 * it is built for every instruction-set level (ops_clones.h). Sums are in a compile-time order:
 * deterministic. (Moved here from the generator: it is how the CPU multiplies few rows.) */
#define LINEAR_GEMV_ROWS 16

/* y (N,out) = x (N,in) W^T for a few rows: each block of 4 weight rows is read from memory
 * once and, while it sits in L1, dotted with every x row (the batch of a decode step). */
OPS_VARIANTS(void, linear_matvec, (float *restrict y, const float *restrict w,
                                    const float *restrict x, int N, int out, int in),
             (y, w, x, N, out, in)) {
    int o = 0;
    for (; o + 4 <= out; o += 4) {
        const float *w0 = w + (size_t)o * in, *w1 = w0 + in, *w2 = w1 + in, *w3 = w2 + in;
        int n = 0;
        /* 4 x rows at a time: 8 loads feed 16 FMAs */
        for (; n + 4 <= N; n += 4) {
            const float *x0 = x + (size_t)n * in, *x1 = x0 + in, *x2 = x1 + in, *x3 = x2 + in;
            float a00 = 0, a01 = 0, a02 = 0, a03 = 0, a10 = 0, a11 = 0, a12 = 0, a13 = 0;
            float a20 = 0, a21 = 0, a22 = 0, a23 = 0, a30 = 0, a31 = 0, a32 = 0, a33 = 0;
#pragma omp simd reduction(+ : a00, a01, a02, a03, a10, a11, a12, a13, a20, a21, a22, a23, a30, a31, a32, a33)
            for (int i = 0; i < in; i++) {
                const float u0 = w0[i], u1 = w1[i], u2 = w2[i], u3 = w3[i];
                a00 += u0 * x0[i]; a01 += u1 * x0[i]; a02 += u2 * x0[i]; a03 += u3 * x0[i];
                a10 += u0 * x1[i]; a11 += u1 * x1[i]; a12 += u2 * x1[i]; a13 += u3 * x1[i];
                a20 += u0 * x2[i]; a21 += u1 * x2[i]; a22 += u2 * x2[i]; a23 += u3 * x2[i];
                a30 += u0 * x3[i]; a31 += u1 * x3[i]; a32 += u2 * x3[i]; a33 += u3 * x3[i];
            }
            float *y0 = y + (size_t)n * out + o, *y1 = y0 + out, *y2 = y1 + out, *y3 = y2 + out;
            y0[0] = a00; y0[1] = a01; y0[2] = a02; y0[3] = a03;
            y1[0] = a10; y1[1] = a11; y1[2] = a12; y1[3] = a13;
            y2[0] = a20; y2[1] = a21; y2[2] = a22; y2[3] = a23;
            y3[0] = a30; y3[1] = a31; y3[2] = a32; y3[3] = a33;
        }
        for (; n < N; n++) {
            const float *xn = x + (size_t)n * in;
            float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
#pragma omp simd reduction(+ : s0, s1, s2, s3)
            for (int i = 0; i < in; i++) {
                s0 += w0[i] * xn[i];
                s1 += w1[i] * xn[i];
                s2 += w2[i] * xn[i];
                s3 += w3[i] * xn[i];
            }
            float *yn = y + (size_t)n * out + o;
            yn[0] = s0; yn[1] = s1; yn[2] = s2; yn[3] = s3;
        }
    }
    for (; o < out; o++) {
        const float *wr = w + (size_t)o * in;
        for (int n = 0; n < N; n++) {
            const float *xn = x + (size_t)n * in;
            float s = 0.0f;
#pragma omp simd reduction(+ : s)
            for (int i = 0; i < in; i++) s += wr[i] * xn[i];
            y[(size_t)n * out + o] = s;
        }
    }
}


/* ---- bf16 with shadows (ops_bf16.h) ----
 * The weight's shadow is kept across products; x and dy are the shadows their producers
 * wrote, or rounded here once for both products of a backward (into per-thread buffers).
 * Every operand is compact, as model_gemm_prec packs them: the same bits as without. */
static const uint16_t *act16(const float *x, size_t n, int slot) {
    const uint16_t *s = ops_bf16_shadow_find(x, n);
    if (s) return s;
    uint16_t *buf = gemm_tls_buffer(slot, n * sizeof(uint16_t));
    if (buf) ops_bf16_pack(buf, x, n);
    return buf;
}

/* The weight's shadow, else w rounded into this thread's buffer: an activation that has only its
 * shadow (ops_bf16.h, "products only") must be read through this path, never the fp32 one. */
static const uint16_t *weight16(const float *w, size_t n) {
    const uint16_t *s = ops_bf16_shadow_weight(w, n);
    if (s) return s;
    uint16_t *buf = gemm_tls_buffer(GEMM_TLS_OPS_W, n * sizeof(uint16_t));
    if (buf) ops_bf16_pack(buf, w, n);
    return buf;
}

static int linear_forward_bf16(float *y, const float *x, const float *w, int N, int in, int out) {
    const uint16_t *w16 = weight16(w, (size_t)out * in);
    const uint16_t *x16 = w16 ? act16(x, (size_t)N * in, GEMM_TLS_OPS_X) : NULL;
    if (!x16) return -1;
    model_gemm_bf16(GEMM_T, GEMM_N, out, N, in, 1.0f, w16, in, x16, in, 0.0f, y, out);
    return 0;
}

/* dx = dy W (+ dx when dx_beta is 1), dw += dy^T x */
static int linear_backward_bf16(float *dx, float dx_beta, float *dw, const float *dy,
                                const float *x, const float *w, int N, int in, int out) {
    const uint16_t *dy16 = act16(dy, (size_t)N * out, GEMM_TLS_OPS_Y), *w16 = NULL, *x16 = NULL;
    if (!dy16 || (dx && !(w16 = weight16(w, (size_t)out * in))) ||
        (dw && !(x16 = act16(x, (size_t)N * in, GEMM_TLS_OPS_X))))
        return -1;
    if (dx) model_gemm_bf16(GEMM_N, GEMM_N, in, N, out, 1.0f, w16, in, dy16, out, dx_beta, dx, in);
    if (dw) model_gemm_bf16(GEMM_N, GEMM_T, in, out, N, 1.0f, x16, in, dy16, out, 1.0f, dw, in);
    return 0;
}

/* ---- bf16 emulated (no native bf16 products: x86-64-v3 and below) ----
 * model_gemm_prec rounds both operands of every product into the thread's buffers as fp32
 * values with the low 16 bits zero and runs the fp32 product on them. Here each operand is that
 * rounding done once: the fp32 shadow its producer left (ops_bf16.h: a products-only tensor
 * rounded in place; a weight's rounded copy, kept until the optimizer writes it), else rounded
 * into the thread's buffer once for both products of a backward. The products then run at fp32
 * on the same values, compact as model_gemm_prec packs them, on the same engine: the same bits.
 * (At S on x86-64-v3, before the shadows, the rounding was 31 ms of a 626 ms step.) */
static const float *rounded(const float *x, size_t n, int slot) {
    const float *s = ops_bf16_shadow_find_f32(x, n);
    if (s) return s;
    float *buf = gemm_tls_buffer(slot, n * sizeof(float));
    if (buf) ops_bf16_pack_f32(buf, x, n);
    return buf;
}
static const float *rounded_weight(const float *w, size_t n) {
    const float *s = ops_bf16_shadow_weight_f32(w, n);
    return s ? s : rounded(w, n, GEMM_TLS_A);
}

static int linear_forward_emulated(float *y, const float *x, const float *w, int N, int in, int out) {
    const float *w2 = rounded_weight(w, (size_t)out * in);
    const float *x2 = w2 ? rounded(x, (size_t)N * in, GEMM_TLS_OPS_X) : NULL;
    if (!x2) return -1;
    model_gemm_prec(PRECISION_FP32, GEMM_T, GEMM_N, out, N, in, 1.0f, w2, in, x2, in, 0.0f, y, out);
    return 0;
}

static int linear_backward_emulated(float *dx, float dx_beta, float *dw, const float *dy,
                                    const float *x, const float *w, int N, int in, int out) {
    const float *dy2 = rounded(dy, (size_t)N * out, GEMM_TLS_OPS_Y), *w2 = NULL, *x2 = NULL;
    if (!dy2 || (dx && !(w2 = rounded_weight(w, (size_t)out * in))) ||
        (dw && !(x2 = rounded(x, (size_t)N * in, GEMM_TLS_OPS_X))))
        return -1;
    if (dx) model_gemm_prec(PRECISION_FP32, GEMM_N, GEMM_N, in, N, out, 1.0f, w2, in, dy2, out, dx_beta, dx, in);
    if (dw) model_gemm_prec(PRECISION_FP32, GEMM_N, GEMM_T, in, out, N, 1.0f, x2, in, dy2, out, 1.0f, dw, in);
    return 0;
}

/* 1 when the op's products are bf16 emulated in fp32 (see above): with the shadows on, every
 * product; with them off (FT_BF16_SHADOWS=0), only a backward with both products, where dy is
 * shared (model_gemm_prec rounds the rest, as before the shadows) */
static int linear_emulated(const float *dx, const float *dw) {
    if (ops_bf16_emulated()) return 1;
    return dx && dw && ops_product_precision == PRECISION_BF16 && !model_gemm_bf16_native();
}

void linear_forward(float *y, const float *x, const float *w, int N, int in, int out) {
    if (ops_bf16_shadows() && !linear_forward_bf16(y, x, w, N, in, out)) return;
    if (ops_bf16_emulated() && !linear_forward_emulated(y, x, w, N, in, out)) return;
    /* (the loop is fp32: a bf16 run's few-row products go through the product too) */
    if (N <= LINEAR_GEMV_ROWS && ops_product_precision == PRECISION_FP32) { linear_matvec(y, w, x, N, out, in); return; }
    model_gemm_prec(ops_product_precision, GEMM_T, GEMM_N, out, N, in, 1.0f, w, in, x, in, 0.0f, y, out);
}

void linear_backward(float *dx, float *dw, const float *dy, const float *x, const float *w, int N,
                     int in, int out) {
    if (ops_bf16_shadows() && !linear_backward_bf16(dx, 1.0f, dw, dy, x, w, N, in, out)) return;
    if (linear_emulated(dx, dw) && !linear_backward_emulated(dx, 1.0f, dw, dy, x, w, N, in, out)) return;
    if (dx) model_gemm_prec(ops_product_precision, GEMM_N, GEMM_N, in, N, out, 1.0f, w, in, dy, out, 1.0f, dx, in);
    if (dw) model_gemm_prec(ops_product_precision, GEMM_N, GEMM_T, in, out, N, 1.0f, x, in, dy, out, 1.0f, dw, in);
}

void linear_backward_set(float *dx, float *dw, const float *dy, const float *x, const float *w,
                         int N, int in, int out) {
    if (ops_bf16_shadows() && !linear_backward_bf16(dx, 0.0f, dw, dy, x, w, N, in, out)) return;
    if (linear_emulated(dx, dw) && !linear_backward_emulated(dx, 0.0f, dw, dy, x, w, N, in, out)) return;
    if (dx) model_gemm_prec(ops_product_precision, GEMM_N, GEMM_N, in, N, out, 1.0f, w, in, dy, out, 0.0f, dx, in);
    if (dw) model_gemm_prec(ops_product_precision, GEMM_N, GEMM_T, in, out, N, 1.0f, x, in, dy, out, 1.0f, dw, in);
}
