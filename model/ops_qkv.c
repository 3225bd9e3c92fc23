/* model/ops_qkv.c: the fused q|k|v product's rows split into q, k, v with RoPE, and the
 * backward that joins their gradients (ops.h). The rotation is rope_forward's
 * (ops_rope_rotate), reading the strided rows of the fused product. */
#include "model/ops.h"
#include "model/ops_math.h"
#include <string.h>

void qkv_split_rope(float *q, float *k, float *v, const float *qkv, const float *cos_t,
                    const float *sin_t, int N, int T, int H, int Hkv, int hd, int pos0) {
    const int Dq = H * hd, Dkv = Hkv * hd, ld = Dq + 2 * Dkv, h2 = hd / 2;
#pragma omp parallel for schedule(static) if ((size_t)N * ld >= 32768)
    for (int n = 0; n < N; n++) {
        const float *row = qkv + (size_t)n * ld;
        const size_t t = (size_t)(pos0 + n % T);
        const float *cs = cos_t + t * h2, *sn = sin_t + t * h2;
        if (q)
            for (int h = 0; h < H; h++)
                ops_rope_rotate(q + (size_t)n * Dq + h * hd, row + h * hd, cs, sn, hd, 1.0f);
        if (k)
            for (int h = 0; h < Hkv; h++)
                ops_rope_rotate(k + (size_t)n * Dkv + h * hd, row + Dq + h * hd, cs, sn, hd, 1.0f);
        if (v) memcpy(v + (size_t)n * Dkv, row + Dq + Dkv, sizeof(float) * Dkv);
    }
}

void qkv_join_unrope(float *dqkv, const float *dq, const float *dk, const float *dv,
                     const float *cos_t, const float *sin_t, int N, int T, int H, int Hkv, int hd,
                     int pos0) {
    const int Dq = H * hd, Dkv = Hkv * hd, ld = Dq + 2 * Dkv, h2 = hd / 2;
#pragma omp parallel for schedule(static) if ((size_t)N * ld >= 32768)
    for (int n = 0; n < N; n++) {
        float *row = dqkv + (size_t)n * ld;
        const size_t t = (size_t)(pos0 + n % T);
        const float *cs = cos_t + t * h2, *sn = sin_t + t * h2;
        for (int h = 0; h < H; h++)
            ops_rope_rotate(row + h * hd, dq + (size_t)n * Dq + h * hd, cs, sn, hd, -1.0f);
        for (int h = 0; h < Hkv; h++)
            ops_rope_rotate(row + Dq + h * hd, dk + (size_t)n * Dkv + h * hd, cs, sn, hd, -1.0f);
        memcpy(row + Dq + Dkv, dv + (size_t)n * Dkv, sizeof(float) * Dkv);
    }
}
