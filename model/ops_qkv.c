/* model/ops_qkv.c: the fused q|k|v product's rows split into q, k, v with RoPE, and the
 * backward that joins their gradients (ops.h). The rotation is rope_forward's
 * (ops_rope_rotate), reading the strided rows of the fused product. */
#include "model/ops.h"
#include "model/ops_math.h"

void qkv_split_rope(float *q, float *k, float *v, const float *qkv, const float *cos_t,
                    const float *sin_t, int N, int T, int H, int Hkv, int hd, int pos0) {
    const int Dq = H * hd, Dkv = Hkv * hd, ld = Dq + 2 * Dkv, h2 = hd / 2;
#pragma omp parallel for schedule(static) if ((size_t)N * ld >= 32768)
    for (int n = 0; n < N; n++) {
        const size_t t = (size_t)(pos0 + n % T);
        ops_qkv_split_row(q ? q + (size_t)n * Dq : NULL, k ? k + (size_t)n * Dkv : NULL,
                          v ? v + (size_t)n * Dkv : NULL, qkv + (size_t)n * ld, cos_t + t * h2,
                          sin_t + t * h2, H, Hkv, hd);
    }
}

void qkv_join_unrope(float *dqkv, const float *dq, const float *dk, const float *dv,
                     const float *cos_t, const float *sin_t, int N, int T, int H, int Hkv, int hd,
                     int pos0) {
    const int Dq = H * hd, Dkv = Hkv * hd, ld = Dq + 2 * Dkv, h2 = hd / 2;
#pragma omp parallel for schedule(static) if ((size_t)N * ld >= 32768)
    for (int n = 0; n < N; n++) {
        const size_t t = (size_t)(pos0 + n % T);
        ops_qkv_join_row(dqkv + (size_t)n * ld, dq + (size_t)n * Dq, dk + (size_t)n * Dkv,
                         dv + (size_t)n * Dkv, cos_t + t * h2, sin_t + t * h2, H, Hkv, hd);
    }
}
