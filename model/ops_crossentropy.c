/* model/ops_crossentropy.c: softmax cross-entropy over the vocabulary, mean over counted
 * targets, with an optional fused gradient (row math in ops_math.h). */
#include "model/ops.h"
#include "model/ops_bf16.h"
#include "model/ops_clones.h"
#include "model/ops_math.h"
#include <stdlib.h>
#include <string.h>

static int ce_count(const uint8_t *mask, int N) {
    if (!mask) return N;
    int c = 0;
    for (int n = 0; n < N; n++) c += mask[n] != 0;
    return c;
}

/* One row: its log-sum-exp into *lse, its loss returned (0 when not counted), and with dz the
 * fused gradient (the same formula as the separate backward: same bits). */
/* dz16: dz's row of its bf16 shadow (ops_bf16.h) or NULL, packed while the row is in cache */
OPS_VARIANTS(float, ce_row_forward, (float *dz, uint16_t *dz16, float *lse, const float *z, uint32_t t,
                            int counted, int V, float scale),
             (dz, dz16, lse, z, t, counted, V, scale)) {
    float l = ops_logsumexp_row(z, V);
    *lse = l;
    float loss = counted ? l - z[t] : 0.0f;   /* before dz, which may overwrite z */
    if (dz && dz16 && counted) {   /* dz and its rounding in one loop (the same values) */
        OPS_SIMD
        for (int i = 0; i < V; i++) {
            const float g = ops_ce_grad(z[i], l, scale);
            dz[i] = g;
            dz16[i] = ops_bf16_from_float(g);
        }
        dz[t] -= scale;
        dz16[t] = ops_bf16_from_float(dz[t]);
    } else if (dz) {
        if (!counted) memset(dz, 0, sizeof(float) * V);
        else ops_crossentropy_row_backward(dz, z, l, (int)t, V, scale);
        if (dz16) ops_bf16_pack_row(dz16, dz, (size_t)V);
    }
    return loss;
}

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
    uint16_t *d16 = dlogits && ops_bf16_shadows() ? ops_bf16_shadow_take(dlogits, (size_t)N * V) : NULL;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++)
        row_loss[n] = ce_row_forward(dlogits ? dlogits + (size_t)n * V : NULL,
                                     d16 ? d16 + (size_t)n * V : NULL, &lse[n],
                                     logits + (size_t)n * V, targets[n], !mask || mask[n], V,
                                     scale);
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
