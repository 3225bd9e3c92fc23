/* model/ops_rmsnorm.c: RMSNorm over rows (row math in ops_math.h). */
#include "model/ops.h"
#include "model/ops_bf16.h"
#include <stddef.h>
#include "model/ops_clones.h"
#include "model/ops_math.h"
#include "model/ops_pack16.h"

/* o16: the output's bf16 shadow (ops_bf16.h) or NULL; each row packed while it is in L1.
 * only: the output is read by products only (ops_bf16.h): each row goes through a buffer on
 * the stack into its shadow, out is not written. r32: the output is written rounded in place
 * (ops_bf16_round_out: bf16 emulated, read by products only), each row while it is in L1. */
#define RMS_ONLY_MAX 16384   /* the widest row that may skip its fp32 copy (the stack buffer) */
static inline float *rms_out_row(float *out, float *tmp, int only, int n, int D) {
    return only ? tmp : out + (size_t)n * D;
}
OPS_VARIANTS(void, rms_fwd_rows, (float *out, uint16_t *o16, int only, int r32, float *rstd,
                                  const float *x, const float *w, int n0, int n1, int D, float eps),
             (out, o16, only, r32, rstd, x, w, n0, n1, D, eps)) {
    float tmp[only ? D : 1];
    for (int n = n0; n < n1; n++) {
        float *o = rms_out_row(out, tmp, only, n, D);
        rstd[n] = ops_rmsnorm_row(o, x + (size_t)n * D, w, D, eps);
        if (o16) ops_pack16_row(o16 + (size_t)n * D, o, (size_t)D);
        if (r32) ops_bf16_round_row(o, (size_t)D);
    }
}

/* the output's shadow (ops_bf16_shadow_take_out) and whether it alone is written; where none is
 * taken, *r32: whether out is written rounded in place (ops_bf16_round_out) */
static uint16_t *rms_out16(const float *out, int N, int D, int *only, int *r32) {
    uint16_t *o16 = ops_bf16_shadow_take_out(out, (size_t)N * D, only);
    if (D > RMS_ONLY_MAX) *only = 0;
    *r32 = !o16 && ops_bf16_round_out(out, (size_t)N * D);
    return o16;
}

void rmsnorm_forward(float *out, float *rstd, const float *x, const float *w, int N, int D,
                     float eps) {
    int only, r32;
    uint16_t *o16 = rms_out16(out, N, D, &only, &r32);
    if (!ops_par(N, 2)) {   /* a team of one (ops_par): the rows in a plain loop */
        rms_fwd_rows(out, o16, only, r32, rstd, x, w, 0, N, D, eps);
    } else {
#pragma omp parallel
        {
            size_t lo, hi;
            ops_thread_range((size_t)N, &lo, &hi);
            rms_fwd_rows(out, o16, only, r32, rstd, x, w, (int)lo, (int)hi, D, eps);
        }
    }
    if (only) ops_bf16_only_done(out, (size_t)N * D);
}

/* y = a + b, then RMSNorm of y, a row at a time: the sum is the add_forward's expression and
 * the norm reads the row from L1 (one pass over a and b instead of add_forward's pass and the
 * norm's read of y) */
OPS_VARIANTS(void, add_rms_fwd_rows, (float *y, float *out, uint16_t *o16, int only, int r32,
                                      float *rstd, const float *a, const float *b, const float *w,
                                      int n0, int n1, int D, float eps),
             (y, out, o16, only, r32, rstd, a, b, w, n0, n1, D, eps)) {
    float tmp[only ? D : 1];
    for (int n = n0; n < n1; n++) {
        float *yr = y + (size_t)n * D, *o = rms_out_row(out, tmp, only, n, D);
        const float *ar = a + (size_t)n * D, *br = b + (size_t)n * D;
        OPS_SIMD
        for (int i = 0; i < D; i++) yr[i] = ar[i] + br[i];
        rstd[n] = ops_rmsnorm_row(o, yr, w, D, eps);
        if (o16) ops_pack16_row(o16 + (size_t)n * D, o, (size_t)D);
        if (r32) ops_bf16_round_row(o, (size_t)D);
    }
}

void add_rmsnorm_forward(float *y, float *out, float *rstd, const float *a, const float *b,
                         const float *w, int N, int D, float eps) {
    int only, r32;
    uint16_t *o16 = rms_out16(out, N, D, &only, &r32);
    if (!ops_par(N, 2)) {   /* (as rmsnorm_forward) */
        add_rms_fwd_rows(y, out, o16, only, r32, rstd, a, b, w, 0, N, D, eps);
    } else {
#pragma omp parallel
        {
            size_t lo, hi;
            ops_thread_range((size_t)N, &lo, &hi);
            add_rms_fwd_rows(y, out, o16, only, r32, rstd, a, b, w, (int)lo, (int)hi, D, eps);
        }
    }
    if (only) ops_bf16_only_done(out, (size_t)N * D);
}

/* Row n + RMS_PF of the three arrays the backward's row reads (dout, x, res), asked for a line
 * at a time while row n is computed. With the hardware prefetcher alone, the row's first two
 * loops (where its loads from memory land) held 80% of rms_bwd_rows_dw's samples (perf, S at
 * one thread); measured on one call at S (N 2048, D 256, caches flushed, one thread, medians of
 * 50 alternated in one process): 0.41 -> 0.35 ms at 4 rows ahead (2 and 8 alike). The forward's
 * add_rms_fwd_rows, which writes more than it reads, gained nothing measurable from the same. */
#define RMS_PF 4
static inline __attribute__((always_inline)) void rms_prefetch(const float *p, const float *q,
                                                               const float *r, int n, int n1, int D) {
    if (n + RMS_PF >= n1) return;
    const size_t o = (size_t)(n + RMS_PF) * D;
    for (int i = 0; i < D; i += 16) {
        __builtin_prefetch(p + o + i);
        __builtin_prefetch(q + o + i);
        __builtin_prefetch(r + o + i);
    }
}

/* dx16: dx's bf16 shadow or NULL, each row packed while it is in L1 (see rmsnorm_backward_res) */
OPS_VARIANTS(void, rms_bwd_rows, (float *dx, uint16_t *dx16, const float *res, const float *dout,
                                  const float *x, const float *w, const float *rstd, int n0, int n1,
                                  int D),
             (dx, dx16, res, dout, x, w, rstd, n0, n1, D)) {
    for (int n = n0; n < n1; n++) {
        rms_prefetch(dout, x, res, n, n1, D);
        ops_rmsnorm_row_backward_res(dx + (size_t)n * D, res + (size_t)n * D, dout + (size_t)n * D,
                                     x + (size_t)n * D, w, rstd[n], D);
        if (dx16) ops_pack16_row(dx16 + (size_t)n * D, dx + (size_t)n * D, (size_t)D);
    }
}

/* dw[lo..hi) += sum over rows of dy * x * r, rows in order (deterministic). */
OPS_VARIANTS(void, rms_dw_cols, (float *dw, const float *dout, const float *x, const float *rstd, int N,
                        int D, int lo, int hi),
             (dw, dout, x, rstd, N, D, lo, hi)) {
    for (int n = 0; n < N; n++) {
        const float *dy = dout + (size_t)n * D, *xr = x + (size_t)n * D;
        const float r = rstd[n];
        OPS_SIMD
        for (int i = lo; i < hi; i++) dw[i] += dy[i] * xr[i] * r;
    }
}

/* One thread, both outputs: each row's dx, then its terms of dw, while the row is in L1 (one
 * pass over dout and x instead of two); dw's sums run in row order as in rms_dw_cols, the
 * same expression, so the same bits. */
OPS_VARIANTS(void, rms_bwd_rows_dw, (float *dx, uint16_t *dx16, float *dw, const float *res,
                                     const float *dout, const float *x, const float *w,
                                     const float *rstd, int N, int D),
             (dx, dx16, dw, res, dout, x, w, rstd, N, D)) {
    for (int n = 0; n < N; n++) {
        const float *dy = dout + (size_t)n * D, *xr = x + (size_t)n * D;
        const float r = rstd[n];
        rms_prefetch(dout, x, res, n, N, D);
        ops_rmsnorm_row_backward_res(dx + (size_t)n * D, res + (size_t)n * D, dy, xr, w, r, D);
        if (dx16) ops_pack16_row(dx16 + (size_t)n * D, dx + (size_t)n * D, (size_t)D);
        OPS_SIMD
        for (int i = 0; i < D; i++) dw[i] += dy[i] * xr[i] * r;
    }
}

/* At bf16 with shadows (ops_bf16.h) dx also gets its bf16 shadow, written in the pass that
 * writes dx: in a Llama or mixer block dx is the residual stream's gradient, which the next
 * backward's first product reads as its dy (the down and output projections' weight and input
 * gradients), and which the Linear op otherwise rounds in a pass of its own (a read of N x D
 * floats and a write of their bf16: 14 ms of an M step at one thread, 2026-11-27). Where no
 * product reads dx (the embedding's gradient) the shadow is an unread write of 2 bytes an
 * element; the fp32 dx is written as before, so nothing else changes. At bf16 emulated dx gets
 * no copy: an fp32 one of its own (ops_bf16_shadow_take_f32) was measured a wash at S (2
 * threads, 8 paired runs, 2026-11-27: the Linear ops' rounding -1.13 ms a step, this op +1.10;
 * the copy's 4-byte stores go to memory not touched since the layer before, where the Linear
 * op's pass reads dx while this op's stores still hold it in cache). */
void rmsnorm_backward_res(float *dx, float *dw, const float *dout, const float *x, const float *w,
                          const float *rstd, const float *res, int N, int D) {
    if (!res) res = dx;
    uint16_t *dx16 = dx && ops_bf16_shadows() ? ops_bf16_shadow_take(dx, (size_t)N * D) : NULL;
    if (dx && dw && (omp_get_max_threads() == 1 || omp_in_parallel())) {
        rms_bwd_rows_dw(dx, dx16, dw, res, dout, x, w, rstd, N, D);
        return;
    }
    /* dw sums over all rows: split columns, not rows, so each sum runs in row order (the
     * split changes no bit). One slab of columns per thread, a multiple of 16 wide: one pass
     * over the rows each (slabs of 64 made D / 64 strided passes). */
#pragma omp parallel
    {
        const int nt = omp_get_num_threads();
        const int CH = ((D + nt - 1) / nt + 15) / 16 * 16, nch = (D + CH - 1) / CH;
        if (dx) {
            size_t lo, hi;
            ops_thread_range((size_t)N, &lo, &hi);
            rms_bwd_rows(dx, dx16, res, dout, x, w, rstd, (int)lo, (int)hi, D);
        }
        /* no barrier needed between the two: dw reads only dout, x and rstd */
#pragma omp for schedule(static)
        for (int c = 0; c < (dw ? nch : 0); c++)
            rms_dw_cols(dw, dout, x, rstd, N, D, c * CH, c * CH + CH < D ? c * CH + CH : D);
    }
}

void rmsnorm_backward(float *dx, float *dw, const float *dout, const float *x, const float *w,
                      const float *rstd, int N, int D) {
    rmsnorm_backward_res(dx, dw, dout, x, w, rstd, dx, N, D);
}
