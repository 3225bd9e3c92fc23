/* model/ops_crossentropy.c: softmax cross-entropy over the vocabulary, mean over counted
 * targets, with an optional fused gradient (row math in ops_math.h). */
#include "model/ops.h"
#include "model/gemm_impl.h"
#include "model/ops_bf16.h"
#include "model/ops_clones.h"
#include "model/ops_exp16.h"
#include "model/ops_math.h"
#include <stdlib.h>
#include <string.h>

static int ce_count(const uint8_t *mask, int N) {
    if (!mask) return N;
    int c = 0;
    for (int n = 0; n < N; n++) c += mask[n] != 0;
    return c;
}

/* One row: its log-sum-exp into *lse, its loss returned (0 when not counted), and the fused
 * gradient into dz (fp32, rounded to bf16 when r32: ops_bf16_round_out; may alias z) and/or dz16
 * (its bf16 shadow, ops_bf16.h, packed while the row is in cache), either may be NULL: dz NULL with dz16 is a shadow written alone (the
 * logits' buffer marked products-only). e: the thread's scratch row of V floats, which keeps
 * exp(z - max) between the sum and the gradient (one exponential per logit, ops_math.h; V
 * floats stay in the core's cache from row to row, where the fp32 dz would go out to memory).
 * mx: the row's max (ops_max_row); zn: the next row of the thread or NULL, whose max goes to *mxn
 * (at v4 taken in the exponentials' pass, ops_exp16.h, with their bits); zp: the row after zn
 * or NULL (at v4 prefetched in that pass). */
OPS_VARIANTS(float, ce_row_forward, (float *dz, uint16_t *dz16, int r32, float *lse, float *e,
                                     const float *z, uint32_t t, int counted, int V, float scale,
                                     float mx, const float *zn, float *mxn, const float *zp),
             (dz, dz16, r32, lse, e, z, t, counted, V, scale, mx, zn, mxn, zp)) {
    /* before dz, which may overwrite z; a row not counted may carry any target (never read) */
    const float loss_z = counted ? z[t] : 0.0f;
    float s;
#if OPS_EXP16
    if (cpu_isa() >= CPU_ISA_V4 && V % 16 == 0) s = ops_exp_row16(e, z, mx, V, zn, mxn, zp);
    else
#endif
    {
        s = ops_exp_row(e, z, mx, V);
        if (zn) *mxn = ops_max_row(zn, V);
    }
    const float l = mx + logf(s);
    *lse = l;
    if (!counted) {
        if (dz) memset(dz, 0, sizeof(float) * V);
        if (dz16) memset(dz16, 0, sizeof(uint16_t) * V);   /* bf16 zero: all bits 0 */
        return 0.0f;
    }
    const float c = ops_ce_factor(mx, l, scale), gt = ops_ce_grad_target(e[t], c, scale);
    if (dz && dz16) {   /* dz and its rounding in one loop (the same values) */
        OPS_SIMD
        for (int i = 0; i < V; i++) {
            const float g = ops_ce_grad(e[i], c);
            dz[i] = g;
            dz16[i] = ops_bf16_from_float(g);
        }
    } else if (dz && r32) {   /* rounded in place (ops_bf16_round_out) */
        OPS_SIMD
        for (int i = 0; i < V; i++) dz[i] = ops_bf16_round(ops_ce_grad(e[i], c));
    } else if (dz) {
        OPS_SIMD
        for (int i = 0; i < V; i++) dz[i] = ops_ce_grad(e[i], c);
    } else if (dz16) {
        OPS_SIMD
        for (int i = 0; i < V; i++) dz16[i] = ops_bf16_from_float(ops_ce_grad(e[i], c));
    }
    if (dz) dz[t] = r32 ? ops_bf16_round(gt) : gt;
    if (dz16) dz16[t] = ops_bf16_from_float(gt);
    return l - loss_z;
}

OPS_VARIANTS(float, ce_row_max, (const float *z, int V), (z, V)) { return ops_max_row(z, V); }

OPS_VARIANTS(void, ce_row_backward, (float *dz, const float *z, float lse, uint32_t t, int counted, int V,
                            float scale),
             (dz, z, lse, t, counted, V, scale)) {
    if (!counted) memset(dz, 0, sizeof(float) * V);
    else ops_crossentropy_row_backward(dz, z, lse, (int)t, V, scale);
}

float crossentropy_forward(float *dlogits, float *lse, int *count, const float *logits,
                           const uint32_t *targets, const uint8_t *mask, int N, int V,
                           float dloss) {
    int cnt = ce_count(mask, N);
    if (count) *count = cnt;
    float scale = cnt > 0 ? dloss / (float)cnt : 0.0f;
    /* Per-row losses are kept aside because dlogits may overwrite the logits. */
    float *row_loss = malloc(sizeof(float) * (N > 0 ? N : 1));
    if (!row_loss) return NAN;
    /* at native bf16 the shadow of dlogits; alone (no fp32 dlogits) where the family marked the
     * buffer products-only (device.h): the head's two products are dlogits' only readers */
    int only = 0, fail = 0;
    uint16_t *d16 = dlogits ? ops_bf16_shadow_take_out(dlogits, (size_t)N * V, &only) : NULL;
    float *dz = only ? NULL : dlogits;
    /* bf16 emulated: dlogits rounded as they are written (ops_bf16.h) */
    const int r32 = dlogits && !d16 && ops_bf16_round_out(dlogits, (size_t)N * V);
#pragma omp parallel
    {
        /* the thread's scratch row, kept across calls (gemm_impl.h; was a malloc and free per
         * thread and call) */
        float *e = gemm_tls_buffer(GEMM_TLS_OPS_ROW, sizeof(float) * (V > 0 ? V : 1));
        if (!e) {
#pragma omp atomic write
            fail = 1;
        }
        /* the thread's rows in order, each handing the next its max (ce_row_forward) */
        size_t lo, hi;
        ops_thread_range((size_t)N, &lo, &hi);
        float mx = e && lo < hi ? ce_row_max(logits + lo * V, V) : 0.0f;
        for (size_t n = lo; e && n < hi; n++) {
            const float *z = logits + n * V;
            row_loss[n] = ce_row_forward(dz ? dz + n * V : NULL, d16 ? d16 + n * V : NULL, r32, &lse[n], e,
                                         z, targets[n], !mask || mask[n], V, scale, mx,
                                         n + 1 < hi ? z + V : NULL, &mx, n + 2 < hi ? z + 2 * (size_t)V : NULL);
        }
    }
    if (only) ops_bf16_only_done(dlogits, (size_t)N * V);
    if (fail) {
        free(row_loss);
        return NAN;
    }
    /* Summed serially in row order (N terms; cheap) for determinism, in double so the mean
     * is as exact as the row losses themselves. */
    double sum = 0.0;
    for (int n = 0; n < N; n++) sum += row_loss[n];
    free(row_loss);
    return cnt > 0 ? (float)(sum / cnt) : 0.0f;
}

void crossentropy_backward(float *dlogits, const float *logits, const float *lse,
                           const uint32_t *targets, const uint8_t *mask, int N, int V,
                           float dloss) {
    int cnt = ce_count(mask, N);
    float scale = cnt > 0 ? dloss / (float)cnt : 0.0f;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++)
        ce_row_backward(dlogits + (size_t)n * V, logits + (size_t)n * V, lse[n], targets[n],
                        !mask || mask[n], V, scale);
}
