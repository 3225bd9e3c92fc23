/* model/ops_attention.c: grouped-query scaled dot-product attention, flash-style on the CPU.
 *
 * Forward: one query row at a time, keys visited in blocks of ATT_BLOCK with an online softmax
 * (ops_math.h), so memory is O(block) per row and only the row's log-sum-exp is kept.
 * Backward: probabilities recomputed from q, k and lse, one (query row, key block) at a time,
 * key blocks outermost. Work is split over (batch, key/value head) so that every dk/dv row
 * (and the dq rows of that head's query group) is written by one thread in a fixed order
 * (deterministic without atomics). Neither pass holds more than a row or a block of scores. */
#include "model/ops.h"
#include "model/ops_math.h"
#include <math.h>
#include <string.h>

#define ATT_BLOCK 64

/* `omp simd reduction` lets the compiler vectorise the sum (plain C forbids reassociating
 * float adds); the order it picks is fixed at compile time, so results stay deterministic. */
static inline float dot(const float *a, const float *b, int n) {
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}
static inline void axpy(float *restrict y, float a, const float *restrict x, int n) {
#pragma omp simd
    for (int i = 0; i < n; i++) y[i] += a * x[i];
}

/* Number of keys query row i may see. */
static inline int att_visible(int i, int Tq, int Tk, int causal) {
    if (!causal) return Tk;
    int n = i + (Tk - Tq) + 1;
    return n < 0 ? 0 : (n > Tk ? Tk : n);
}

/* The per-row kernels are built twice, for AVX2+FMA and for the baseline the Makefile targets,
 * and the loader picks one per machine (GCC function multi-versioning): the build stays
 * portable and the hot loops get 8-wide FMAs where the CPU has them (1.6x measured). Both
 * versions are deterministic; they differ from each other in the last bits (FMA rounding),
 * so bit-exact resume assumes the same kind of CPU. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && !defined(__CUDACC__)
#define ATT_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define ATT_CLONES
#endif

/* Query row i of head h in batch b: online softmax over key blocks of ATT_BLOCK. */
ATT_CLONES
static void att_row_forward(float *out, float *lse, const float *q, const float *k, const float *v,
                            int b, int h, int i, int Tq, int Tk, int H, int Hkv, int hd,
                            int causal) {
    const int kh = h / (H / Hkv), nk = att_visible(i, Tq, Tk, causal);
    const float scale = 1.0f / sqrtf((float)hd);
    const float *qi = q + (((size_t)b * Tq + i) * H + h) * hd;
    float *oi = out + (((size_t)b * Tq + i) * H + h) * hd;
    float acc[hd], s[ATT_BLOCK];
    float m = -INFINITY, l = 0.0f;
    memset(acc, 0, sizeof(acc));
    for (int j0 = 0; j0 < nk; j0 += ATT_BLOCK) {
        int nb = nk - j0 < ATT_BLOCK ? nk - j0 : ATT_BLOCK;
        float bmax = -INFINITY;
        for (int jj = 0; jj < nb; jj++) {
            const float *kj = k + (((size_t)b * Tk + j0 + jj) * Hkv + kh) * hd;
            s[jj] = dot(qi, kj, hd) * scale;
            bmax = s[jj] > bmax ? s[jj] : bmax;
        }
        float f = ops_online_softmax_rescale(&m, &l, bmax);
        if (f != 1.0f)
            for (int d = 0; d < hd; d++) acc[d] *= f;
#pragma omp simd
        for (int jj = 0; jj < nb; jj++) s[jj] = ops_expf(s[jj] - m);
        for (int jj = 0; jj < nb; jj++) {
            const float *vj = v + (((size_t)b * Tk + j0 + jj) * Hkv + kh) * hd;
            l += s[jj];
            axpy(acc, s[jj], vj, hd);
        }
    }
    float inv = l > 0.0f ? 1.0f / l : 0.0f;
    for (int d = 0; d < hd; d++) oi[d] = acc[d] * inv;
    /* A row that sees no key gets lse = +inf, so the backward's probabilities are 0. */
    lse[((size_t)b * H + h) * Tq + i] = l > 0.0f ? m + logf(l) : INFINITY;
}

void attention_forward(float *out, float *lse, const float *q, const float *k, const float *v,
                       int B, int Tq, int Tk, int H, int Hkv, int hd, int causal) {
#pragma omp parallel for collapse(3) schedule(dynamic, 16)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < Tq; i++)
                att_row_forward(out, lse, q, k, v, b, h, i, Tq, Tk, H, Hkv, hd, causal);
}

/* Every query head of key/value head kh in batch b: all of dk/dv for that head (and dq of
 * its query heads) is written here, in a fixed order. Keys are visited in blocks of
 * ATT_BWD_BLOCK, outermost, so the block's k, v, dk, dv rows (4 x 32 x hd floats) stay in L1
 * while every query row that sees them streams past (1.6x over a row-major order). */
#define ATT_BWD_BLOCK 32
ATT_CLONES
static void att_group_backward(float *dq, float *dk, float *dv, const float *dout,
                               const float *out, const float *lse, const float *q, const float *k,
                               const float *v, int b, int kh, int Tq, int Tk, int H, int Hkv,
                               int hd, int causal) {
    const int group = H / Hkv;
    const float scale = 1.0f / sqrtf((float)hd);
    float kt[hd][ATT_BWD_BLOCK], vt[hd][ATT_BWD_BLOCK];
    for (int j0 = 0; j0 < Tk; j0 += ATT_BWD_BLOCK) {
        const int j1 = j0 + ATT_BWD_BLOCK < Tk ? j0 + ATT_BWD_BLOCK : Tk;
        /* the block's keys and values transposed (hd, block): the row's scores q.k_j and
         * dout.v_j for the whole block are then axpys over j, which vectorise without a
         * horizontal sum per key (2.5x fewer instructions than one dot per key) */
        for (int jj = 0; jj < j1 - j0; jj++) {
            const size_t ko = (((size_t)b * Tk + j0 + jj) * Hkv + kh) * hd;
            for (int d = 0; d < hd; d++) { kt[d][jj] = k[ko + d]; vt[d][jj] = v[ko + d]; }
        }
        for (int jj = j1 - j0; jj < ATT_BWD_BLOCK; jj++)   /* unused lanes: defined values */
            for (int d = 0; d < hd; d++) kt[d][jj] = vt[d][jj] = 0.0f;
        /* the first query row that sees key j0 */
        const int i0 = causal && j0 - (Tk - Tq) > 0 ? j0 - (Tk - Tq) : 0;
        for (int h = kh * group; h < (kh + 1) * group; h++)
            for (int i = i0; i < Tq; i++) {
                const int nk = att_visible(i, Tq, Tk, causal);
                const int nb = (nk < j1 ? nk : j1) - j0;
                if (nb <= 0) continue;
                const size_t qo = (((size_t)b * Tq + i) * H + h) * hd;
                const float *qi = q + qo, *doi = dout + qo;
                const float L = lse[((size_t)b * H + h) * Tq + i];
                /* D_i = sum_j p_ij dp_ij = dout_i . out_i (recomputed per block: 1 dot in ~160) */
                const float Di = dot(doi, out + qo, hd);
                float p[ATT_BWD_BLOCK], ds[ATT_BWD_BLOCK];
                /* all ATT_BWD_BLOCK lanes are computed (fixed trip count, vectorises fully);
                 * lanes >= nb are ignored below */
                for (int jj = 0; jj < ATT_BWD_BLOCK; jj++) p[jj] = ds[jj] = 0.0f;
                for (int d = 0; d < hd; d++) {
                    const float qd = qi[d], gd = doi[d];
#pragma omp simd
                    for (int jj = 0; jj < ATT_BWD_BLOCK; jj++) {
                        p[jj] += qd * kt[d][jj];
                        ds[jj] += gd * vt[d][jj];
                    }
                }
#pragma omp simd
                for (int jj = 0; jj < ATT_BWD_BLOCK; jj++) {
                    p[jj] = ops_expf(p[jj] * scale - L);
                    ds[jj] = p[jj] * (ds[jj] - Di) * scale;
                }
                for (int jj = 0; jj < nb; jj++) {
                    const size_t ko = (((size_t)b * Tk + j0 + jj) * Hkv + kh) * hd;
                    axpy(dv + ko, p[jj], doi, hd);
                    axpy(dk + ko, ds[jj], qi, hd);
                    if (dq) axpy(dq + qo, ds[jj], k + ko, hd);
                }
            }
    }
}

void attention_backward(float *dq, float *dk, float *dv, const float *dout, const float *out,
                        const float *lse, const float *q, const float *k, const float *v, int B,
                        int Tq, int Tk, int H, int Hkv, int hd, int causal) {
#pragma omp parallel for collapse(2) schedule(dynamic, 1)
    for (int b = 0; b < B; b++)
        for (int kh = 0; kh < Hkv; kh++)
            att_group_backward(dq, dk, dv, dout, out, lse, q, k, v, b, kh, Tq, Tk, H, Hkv, hd,
                               causal);
}
