/* model/ops_qkv.c: the fused q|k|v product's rows split into q, k, v with RoPE, and the
 * backward that joins their gradients (ops.h). The rotation is rope_forward's
 * (ops_rope_rotate), reading the strided rows of the fused product. */
#include "model/ops.h"
#include "model/ops_bf16.h"
#include "model/ops_clones.h"
#include "model/ops_math.h"
#include "model/ops_pack16.h"
#include <string.h>

/* The row loops are built per level (ops_clones.h) without FMA contraction (the Makefile:
 * a rotation is two products and a sum, which contraction would round once less), so every
 * level gives the baseline's bits, faster (they were only built for x86-64-v2). */
/* One head's rotation (ops_rope_rotate's expressions, in its order), then with r32 the outputs
 * rounded in place (ops_bf16_round_out) while they are in L1 (the bf16 shadows are written
 * a row at a time by the callers: ops_pack16_row is a call). out and x never overlap here (the split writes q
 * and k apart from the fused rows, the join the fused rows from dq and dk), so the loop is
 * declared vectorisable: GCC at -O2 kept ops_rope_rotate scalar (out may alias x there), 1.3 ns
 * an element of the split at config M; without contraction (the Makefile) each lane gives the
 * scalar bits. */
static inline __attribute__((always_inline)) void qkv_rotate16(float *restrict out,
                                                               const float *restrict x,
                                                               const float *restrict cs,
                                                               const float *restrict sn, int hd,
                                                               float sign, int r32) {
    const int h = hd / 2;
    OPS_SIMD
    for (int i = 0; i < h; i++) {
        const float a = x[i], b = x[i + h], c = cs[i], s = sign * sn[i];
        out[i] = a * c - b * s;
        out[i + h] = b * c + a * s;
    }
    if (r32) ops_bf16_round_row(out, (size_t)hd);
}
/* dv's row copied into the fused rows: as it is, or rounded (r32) */
static inline __attribute__((always_inline)) void qkv_copy16(float *restrict out,
                                                             const float *restrict x, int n, int r32) {
    if (r32) {
        ops_bf16_round_row_to(out, x, (size_t)n);
        return;
    }
    memcpy(out, x, sizeof(float) * n);
}

OPS_VARIANTS(void, split_rows, (float *q, float *k, float *v, uint16_t *q16, uint16_t *k16,
                                uint16_t *v16, const float *qkv, const float *cos_t,
                                const float *sin_t, int n0, int n1, int T, int H, int Hkv, int hd,
                                int pos0),
             (q, k, v, q16, k16, v16, qkv, cos_t, sin_t, n0, n1, T, H, Hkv, hd, pos0)) {
    const int Dq = H * hd, Dkv = Hkv * hd, ld = Dq + 2 * Dkv, h2 = hd / 2;
    for (int n = n0; n < n1; n++) {
        const size_t t = (size_t)(pos0 + n % T);
        /* ops_qkv_split_row's work, each row's bf16 written in the same loops */
        const float *row = qkv + (size_t)n * ld, *cs = cos_t + t * h2, *sn = sin_t + t * h2;
        /* (each row's bf16 in one call after its heads: ops_pack16_row is a call) */
        if (q) {
            for (int h = 0; h < H; h++)
                qkv_rotate16(q + (size_t)n * Dq + h * hd, row + h * hd, cs, sn, hd, 1.0f, 0);
            if (q16) ops_pack16_row(q16 + (size_t)n * Dq, q + (size_t)n * Dq, (size_t)Dq);
        }
        if (k) {
            for (int h = 0; h < Hkv; h++)
                qkv_rotate16(k + (size_t)n * Dkv + h * hd, row + Dq + h * hd, cs, sn, hd, 1.0f, 0);
            if (k16) ops_pack16_row(k16 + (size_t)n * Dkv, k + (size_t)n * Dkv, (size_t)Dkv);
        }
        if (v) {
            float *restrict vr = v + (size_t)n * Dkv;
            const float *restrict src = row + Dq + Dkv;
            memcpy(vr, src, sizeof(float) * Dkv);
            if (v16) ops_pack16_row(v16 + (size_t)n * Dkv, src, (size_t)Dkv);
        }
    }
}

OPS_VARIANTS(void, join_rows, (float *dqkv, uint16_t *d16, int r32, const float *dq,
                               const float *dk, const float *dv, const float *cos_t,
                               const float *sin_t, int n0, int n1, int T, int H, int Hkv, int hd,
                               int pos0),
             (dqkv, d16, r32, dq, dk, dv, cos_t, sin_t, n0, n1, T, H, Hkv, hd, pos0)) {
    const int Dq = H * hd, Dkv = Hkv * hd, ld = Dq + 2 * Dkv, h2 = hd / 2;
    for (int n = n0; n < n1; n++) {
        const size_t t = (size_t)(pos0 + n % T);
        /* ops_qkv_join_row's work, the row's bf16 written in the same loops */
        float *row = dqkv + (size_t)n * ld;
        uint16_t *r16 = d16 ? d16 + (size_t)n * ld : NULL;
        const float *cs = cos_t + t * h2, *sn = sin_t + t * h2;
        for (int h = 0; h < H; h++)
            qkv_rotate16(row + h * hd, dq + (size_t)n * Dq + h * hd, cs, sn, hd, -1.0f, r32);
        for (int h = 0; h < Hkv; h++)
            qkv_rotate16(row + Dq + h * hd, dk + (size_t)n * Dkv + h * hd, cs, sn, hd, -1.0f, r32);
        qkv_copy16(row + Dq + Dkv, dv + (size_t)n * Dkv, Dkv, r32);
        if (r16) ops_pack16_row(r16, row, (size_t)ld);   /* the whole row's bf16 in one call */
    }
}

OPS_VARIANTS(void, join_group, (float *dqkv, uint16_t *d16, int r32, const float *dq,
                                const float *dk, const float *dv, const float *cos_t,
                                const float *sin_t, int b, int kh, int T, int H, int Hkv, int hd,
                                int pos0),
             (dqkv, d16, r32, dq, dk, dv, cos_t, sin_t, b, kh, T, H, Hkv, hd, pos0)) {
    const int Dq = H * hd, Dkv = Hkv * hd, ld = Dq + 2 * Dkv, h2 = hd / 2, group = H / Hkv;
    float tmp[dqkv ? 1 : ld];   /* dqkv NULL: each row's fp32 values here, only packed */
    for (int n = b * T; n < (b + 1) * T; n++) {
        const size_t t = (size_t)(pos0 + n % T);
        /* join_rows' work on the heads of this group: the same calls on the same elements */
        float *row = dqkv ? dqkv + (size_t)n * ld : tmp;
        uint16_t *r16 = d16 ? d16 + (size_t)n * ld : NULL;
        const float *cs = cos_t + t * h2, *sn = sin_t + t * h2;
        for (int h = kh * group; h < (kh + 1) * group; h++)
            qkv_rotate16(row + h * hd, dq + (size_t)n * Dq + h * hd, cs, sn, hd, -1.0f, r32);
        qkv_rotate16(row + Dq + kh * hd, dk + (size_t)n * Dkv + kh * hd, cs, sn, hd, -1.0f, r32);
        qkv_copy16(row + Dq + Dkv + kh * hd, dv + (size_t)n * Dkv + kh * hd, hd, r32);
        if (r16) {   /* the group's q heads in one call, then its k and v heads */
            const size_t q0 = (size_t)kh * group * hd;
            ops_pack16_row(r16 + q0, row + q0, (size_t)group * hd);
            ops_pack16_row(r16 + Dq + kh * hd, row + Dq + kh * hd, (size_t)hd);
            ops_pack16_row(r16 + Dq + Dkv + kh * hd, row + Dq + Dkv + kh * hd, (size_t)hd);
        }
    }
}

void qkv_join_unrope_group(float *dqkv, uint16_t *d16, int r32, const float *dq, const float *dk,
                           const float *dv, const float *cos_t, const float *sin_t, int b, int kh,
                           int T, int H, int Hkv, int hd, int pos0) {
    join_group(dqkv, d16, r32, dq, dk, dv, cos_t, sin_t, b, kh, T, H, Hkv, hd, pos0);
}

/* Rows over the threads (contiguous shares), or on the calling thread for small work (no
 * parallel pragma then: ops_bf16.c says why). */
#define QKV_ROWS(N, work, call)                                                                \
    do {                                                                                       \
        if ((work) < 32768 || omp_in_parallel()) {                                             \
            const int n0 = 0, n1 = (N);                                                        \
            call;                                                                              \
        } else {                                                                               \
            _Pragma("omp parallel") {                                                          \
                size_t lo_, hi_;                                                               \
                ops_thread_range((size_t)(N), &lo_, &hi_);                                     \
                const int n0 = (int)lo_, n1 = (int)hi_;                                        \
                call;                                                                          \
            }                                                                                  \
        }                                                                                      \
    } while (0)

void qkv_split_rope(float *q, float *k, float *v, const float *qkv, const float *cos_t,
                    const float *sin_t, int N, int T, int H, int Hkv, int hd, int pos0) {
    const int Dq = H * hd, Dkv = Hkv * hd, ld = Dq + 2 * Dkv;
    /* the bf16 shadows of q, k, v (ops_bf16.h: attention's operands), each row packed as it
     * is written */
    const int sh = ops_bf16_shadows();
    uint16_t *q16 = sh && q ? ops_bf16_shadow_take(q, (size_t)N * Dq) : NULL;
    uint16_t *k16 = sh && k ? ops_bf16_shadow_take(k, (size_t)N * Dkv) : NULL;
    uint16_t *v16 = sh && v ? ops_bf16_shadow_take(v, (size_t)N * Dkv) : NULL;
    QKV_ROWS(N, (size_t)N * ld,
             split_rows(q, k, v, q16, k16, v16, qkv, cos_t, sin_t, n0, n1, T, H, Hkv, hd, pos0));
}

void qkv_join_unrope(float *dqkv, const float *dq, const float *dk, const float *dv,
                     const float *cos_t, const float *sin_t, int N, int T, int H, int Hkv, int hd,
                     int pos0) {
    const size_t ld = (size_t)(H + 2 * Hkv) * hd;
    uint16_t *d16 = ops_bf16_shadows() ? ops_bf16_shadow_take(dqkv, (size_t)N * ld) : NULL;
    /* bf16 emulated, dqkv read by products only: rounded in place (ops_bf16_round_out) */
    const int r32 = !d16 && ops_bf16_round_out(dqkv, (size_t)N * ld);
    QKV_ROWS(N, (size_t)N * ld,
             join_rows(dqkv, d16, r32, dq, dk, dv, cos_t, sin_t, n0, n1, T, H, Hkv, hd, pos0));
}
