/* model/ops_qkv.c: the fused q|k|v product's rows split into q, k, v with RoPE, and the
 * backward that joins their gradients (ops.h). The rotation is rope_forward's
 * (ops_rope_rotate), reading the strided rows of the fused product. */
#include "model/ops.h"
#include "model/ops_bf16.h"
#include "model/ops_math.h"

void qkv_split_rope(float *q, float *k, float *v, const float *qkv, const float *cos_t,
                    const float *sin_t, int N, int T, int H, int Hkv, int hd, int pos0) {
    const int Dq = H * hd, Dkv = Hkv * hd, ld = Dq + 2 * Dkv, h2 = hd / 2;
    /* the bf16 shadows of q, k, v (ops_bf16.h: attention's operands), each row packed as it
     * is written */
    const int sh = ops_bf16_shadows();
    uint16_t *q16 = sh && q ? ops_bf16_shadow_take(q, (size_t)N * Dq) : NULL;
    uint16_t *k16 = sh && k ? ops_bf16_shadow_take(k, (size_t)N * Dkv) : NULL;
    uint16_t *v16 = sh && v ? ops_bf16_shadow_take(v, (size_t)N * Dkv) : NULL;
#pragma omp parallel for schedule(static) if ((size_t)N * ld >= 32768)
    for (int n = 0; n < N; n++) {
        const size_t t = (size_t)(pos0 + n % T);
        ops_qkv_split_row(q ? q + (size_t)n * Dq : NULL, k ? k + (size_t)n * Dkv : NULL,
                          v ? v + (size_t)n * Dkv : NULL, qkv + (size_t)n * ld, cos_t + t * h2,
                          sin_t + t * h2, H, Hkv, hd);
        if (q16) ops_bf16_pack_serial(q16 + (size_t)n * Dq, q + (size_t)n * Dq, (size_t)Dq);
        if (k16) ops_bf16_pack_serial(k16 + (size_t)n * Dkv, k + (size_t)n * Dkv, (size_t)Dkv);
        if (v16) ops_bf16_pack_serial(v16 + (size_t)n * Dkv, v + (size_t)n * Dkv, (size_t)Dkv);
    }
}

void qkv_join_unrope(float *dqkv, const float *dq, const float *dk, const float *dv,
                     const float *cos_t, const float *sin_t, int N, int T, int H, int Hkv, int hd,
                     int pos0) {
    const int Dq = H * hd, Dkv = Hkv * hd, ld = Dq + 2 * Dkv, h2 = hd / 2;
    uint16_t *d16 = ops_bf16_shadows() ? ops_bf16_shadow_take(dqkv, (size_t)N * ld) : NULL;
#pragma omp parallel for schedule(static) if ((size_t)N * ld >= 32768)
    for (int n = 0; n < N; n++) {
        const size_t t = (size_t)(pos0 + n % T);
        ops_qkv_join_row(dqkv + (size_t)n * ld, dq + (size_t)n * Dq, dk + (size_t)n * Dkv,
                         dv + (size_t)n * Dkv, cos_t + t * h2, sin_t + t * h2, H, Hkv, hd);
        if (d16) ops_bf16_pack_serial(d16 + (size_t)n * ld, dqkv + (size_t)n * ld, (size_t)ld);
    }
}
