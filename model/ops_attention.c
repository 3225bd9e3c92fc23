/* model/ops_attention.c: grouped-query scaled dot-product attention, flash-style on the CPU.
 *
 * Main path (see "blocked attention" below): the query rows of one key/value group's heads at
 * up to 64 positions, stacked into one block; the block's scores against every key it may see
 * are one model_gemm product (at most 128 x Tk floats per thread for groups of up to 128
 * heads: O(T), never a T x T matrix), the softmax runs over whole rows, P V is a second
 * product, and only each row's log-sum-exp is kept. The backward recomputes the same score
 * block and forms dV, dP, dK, dQ with four products.
 * Fallback when a thread cannot get its scratch: the row kernels, which need none --
 * forward one query row at a time with an online softmax (ops_math.h) over key blocks of
 * ATT_BLOCK; backward one (query row, key block) at a time, key blocks outermost.
 * Both backwards split work over (batch, key/value head) so that every dk/dv row (and the dq
 * rows of that head's query group) is written by one thread in a fixed order (deterministic
 * without atomics).
 * A sliding window (attention_window_*) narrows each row's keys to a range [lo, hi)
 * (ops_math.h ops_att_range); a block's products then run over the keys its rows see, so a
 * window W costs O(T W), not O(T^2). */
#include "model/gemm.h"
#include "model/gemm_impl.h"
#include "model/ops.h"
#include "model/ops_bf16.h"
#include "model/ops_clones.h"
#include "model/ops_exp16.h"
#include "model/ops_math.h"
#include "model/ops_pack16.h"
#include <math.h>
#include <stdlib.h>
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


/* The per-row and per-block kernels are built for AVX-512, AVX2+FMA and the baseline the
 * Makefile targets, the one level cpu_isa() chose running (ops_clones.h; 1.6x measured for
 * AVX2 over the baseline). */

/* Query row i of head h in batch b: online softmax over key blocks of ATT_BLOCK. */
OPS_VARIANTS(void, att_row_forward, (float *out, float *lse, const float *q, const float *k, const float *v,
                            int b, int h, int i, int Tq, int Tk, int H, int Hkv, int hd,
                            int causal, int window),
             (out, lse, q, k, v, b, h, i, Tq, Tk, H, Hkv, hd, causal, window)) {
    const int kh = h / (H / Hkv);
    int klo, nk;
    ops_att_range(i, Tq, Tk, causal, window, &klo, &nk);
    const float scale = 1.0f / sqrtf((float)hd);
    const float *qi = q + (((size_t)b * Tq + i) * H + h) * hd;
    float *oi = out + (((size_t)b * Tq + i) * H + h) * hd;
    float acc[hd], s[ATT_BLOCK];
    float m = -INFINITY, l = 0.0f;
    memset(acc, 0, sizeof(acc));
    for (int j0 = klo; j0 < nk; j0 += ATT_BLOCK) {
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

/* Every query head of key/value head kh in batch b: all of dk/dv for that head (and dq of
 * its query heads) is written here, in a fixed order. Keys are visited in blocks of
 * ATT_BWD_BLOCK, outermost, so the block's k, v, dk, dv rows (4 x 32 x hd floats) stay in L1
 * while every query row that sees them streams past (1.6x over a row-major order). */
#define ATT_BWD_BLOCK 32
OPS_VARIANTS(void, att_group_backward, (float *dq, float *dk, float *dv, const float *dout,
                               const float *out, const float *lse, const float *q, const float *k,
                               const float *v, int b, int kh, int Tq, int Tk, int H, int Hkv,
                               int hd, int causal, int window),
             (dq, dk, dv, dout, out, lse, q, k, v, b, kh, Tq, Tk, H, Hkv, hd, causal, window)) {
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
                int lo, nk;
                ops_att_range(i, Tq, Tk, causal, window, &lo, &nk);
                if (lo >= j1) break;   /* later rows' windows start later still */
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
                for (int jj = lo > j0 ? lo - j0 : 0; jj < nb; jj++) {
                    const size_t ko = (((size_t)b * Tk + j0 + jj) * Hkv + kh) * hd;
                    axpy(dv + ko, p[jj], doi, hd);
                    axpy(dk + ko, ds[jj], qi, hd);
                    if (dq) axpy(dq + qo, ds[jj], k + ko, hd);
                }
            }
    }
}


/* ---- blocked attention through model_gemm ----------------------------------------------
 * A block is the query rows of every head of one key/value group at ATT_QB or fewer
 * consecutive positions, stacked head by head into one contiguous (rows x hd) copy: they all
 * see the same keys, so the scores (rows x nk, at most max(ATT_ROWS, group) x Tk floats per
 * thread: O(T), never T x T) are one product, the row
 * softmax runs over whole rows (no online rescaling), and P V is a second product. The
 * backward recomputes the same score block with the same product (same bits as the forward),
 * then dV += P^T dO, dP = dO V^T, dQ = dS K, dK += dS^T Q are four products.
 * Small products of shape (64 x T x hd) run at several times the speed of per-key dot
 * products (measured on config S: attention went from ~20% to ~5% of a training step);
 * stacking the group's heads doubles m (or k) for config S's 2 query heads per key/value head
 * and halves the calls (measured on one layer of S, best of 60: forward -1 to -3%, backward
 * ~-8%; within the noise of a whole training step).
 *
 * Row-major <-> column-major (gemm.h): a row-major (r, c) block with row stride ld is a
 * column-major (c x r) matrix with leading dimension ld. Q rows of head h have stride H*hd
 * (the stacked copies hd), K/V rows of head kh stride Hkv*hd, score rows stride Tk. */
#define ATT_QB 64
#define ATT_ROWS 128
/* Blocks of fewer stacked rows than this go through the row kernel instead: a decoding step
 * (one new row per head) paid two product calls for a single row (measured, 257 keys: 63 us
 * blocked vs 27 us per row kernel for 1 row; 67 vs 92 us for 4 rows). */
#define ATT_QB_MIN 3

/* Positions per block for a group of `group` query heads: ATT_ROWS stacked rows, at most
 * ATT_QB positions (more positions per block would compute more masked scores). */
static int att_block_positions(int group) {
    int np = ATT_ROWS / group;
    return np > ATT_QB ? ATT_QB : (np < 1 ? 1 : np);
}

/* S (rows, nk) = scale * Qs K^T, Qs the stacked (rows, hd) copy; at precision pr. */
static void att_scores(precision_t pr, float *S, const float *qs, const float *k, int ldk, int rows,
                       int nk, int hd, int Tk, float scale) {
    model_gemm_prec(pr, GEMM_T, GEMM_N, nk, rows, hd, scale, k, ldk, qs, hd, 0.0f, S, Tk);
}

/* Row (head j of the group, position i0 + i) of batch b in a (B, Tq, H, hd) array. */
static inline size_t att_row(int b, int kh, int group, int j, int i0, int i, int Tq, int H,
                             int hd) {
    return ((size_t)b * Tq + i0 + i) * H * hd + (size_t)(kh * group + j) * hd;
}

/* Offset of the log-sum-exp of head j of the group at position i0 of batch b ((B, H, Tq)). */
static inline size_t att_lse_at(int b, int kh, int group, int j, int i0, int Tq, int H) {
    return ((size_t)b * H + kh * group + j) * Tq + i0;
}

/* The rows of the group's heads at positions [i0, i0 + np) of batch b, copied from x into xs
 * head by head (np rows each, stride hd); esz: the element's bytes (fp32, or bf16 patterns) ... */
static void att_gather_e(void *xs, const void *x, size_t esz, int b, int kh, int group, int i0,
                         int np, int Tq, int H, int hd) {
    /* a row of 64 bf16 (hd 64, the bench's configs): a copy of constant size, inlined, instead
     * of a call to memcpy per row */
    if (esz * hd == 128) {
        for (int j = 0; j < group; j++)
            for (int i = 0; i < np; i++)
                memcpy((char *)xs + ((size_t)j * np + i) * 128,
                       (const char *)x + att_row(b, kh, group, j, i0, i, Tq, H, hd) * esz, 128);
        return;
    }
    for (int j = 0; j < group; j++)
        for (int i = 0; i < np; i++)
            memcpy((char *)xs + ((size_t)j * np + i) * hd * esz,
                   (const char *)x + att_row(b, kh, group, j, i0, i, Tq, H, hd) * esz, esz * hd);
}
static void att_gather(float *xs, const float *x, int b, int kh, int group, int i0, int np,
                       int Tq, int H, int hd) {
    att_gather_e(xs, x, sizeof(float), b, kh, group, i0, np, Tq, H, hd);
}
/* The same rounded to bf16 as fp32 values (the emulated operand: bf16 emulated, ops_bf16.h), in
 * the copy's one pass; built per level (ops_clones.h): the copy and a rounding pass over it at
 * the baseline's width were twice the work. */
OPS_VARIANTS(void, att_gather_round, (float *xs, const float *x, int b, int kh, int group, int i0,
                                      int np, int Tq, int H, int hd),
             (xs, x, b, kh, group, i0, np, Tq, H, hd)) {
    for (int j = 0; j < group; j++)
        for (int i = 0; i < np; i++)
            ops_bf16_round_row_to(xs + ((size_t)j * np + i) * hd,
                                  x + att_row(b, kh, group, j, i0, i, Tq, H, hd), (size_t)hd);
}

/* ... and back: written over x's rows (add 0), or added into them (add 1), or written as added
 * to zeros (ATT_SET: 0 + x, the bits of att_zero_owned's zeros with the rows added, -0 made +0,
 * without the zeroing pass and without reading the rows). Built per level (ops_clones.h): the
 * backward's dq adds ran 4 lanes wide in the baseline build (an add per element either way:
 * the same bits). */
#define ATT_SET 2
OPS_VARIANTS(void, att_scatter, (float *x, const float *xs, int add, int b, int kh, int group,
                                 int i0, int np, int Tq, int H, int hd),
             (x, xs, add, b, kh, group, i0, np, Tq, H, hd)) {
    for (int j = 0; j < group; j++)
        for (int i = 0; i < np; i++) {
            float *restrict row = x + att_row(b, kh, group, j, i0, i, Tq, H, hd);
            const float *restrict srow = xs + ((size_t)j * np + i) * hd;
            if (!add) memcpy(row, srow, sizeof(float) * hd);
            else if (add == ATT_SET)
#pragma omp simd
                for (int d = 0; d < hd; d++) row[d] = 0.0f + srow[d];
            else
#pragma omp simd
                for (int d = 0; d < hd; d++) row[d] += srow[d];
        }
}

/* att_scatter's overwrite of out's rows from the stacked rows xs, with each row also converted
 * by conv_ into the shadow sh_ (same offsets as out) while it is in L1: one loop for the fp32
 * shadow of the emulated path (att_scatter_out32) and the bf16 one of the native (..._out16). */
#define ATT_SCATTER_SHADOW(sh_, conv_)                                                        \
    for (int j = 0; j < group; j++)                                                           \
        for (int i = 0; i < np; i++) {                                                        \
            const size_t o = att_row(b, kh, group, j, i0, i, Tq, H, hd);                      \
            float *restrict row = out + o;                                                    \
            __typeof__(sh_) restrict rsh = (sh_) + o;                                         \
            const float *restrict srow = xs + ((size_t)j * np + i) * hd;                      \
            OPS_SIMD                                                                          \
            for (int d = 0; d < hd; d++) {                                                    \
                row[d] = srow[d];                                                             \
                rsh[d] = conv_(srow[d]);                                                      \
            }                                                                                 \
        }

/* o32: out's fp32 shadow at bf16 emulated (ops_bf16_shadow_take_f32) */
OPS_VARIANTS(void, att_scatter_out32, (float *out, float *o32, const float *xs, int b, int kh,
                                       int group, int i0, int np, int Tq, int H, int hd),
             (out, o32, xs, b, kh, group, i0, np, Tq, H, hd)) {
    ATT_SCATTER_SHADOW(o32, ops_bf16_round)
}
/* The block's output rows Os into out (and its shadow o32 when not NULL) */
static void att_put_out(float *out, float *o32, const float *Os, int b, int kh, int group, int i0,
                        int np, int Tq, int H, int hd) {
    if (o32) att_scatter_out32(out, o32, Os, b, kh, group, i0, np, Tq, H, hd);
    else att_scatter(out, Os, 0, b, kh, group, i0, np, Tq, H, hd);
}

/* max of s[lo .. hi): 16 lane maxima, folded pairwise, then the tail in order. A max is exact
 * in any order (vectorised, the same value; the scalar loop's compare-and-branch cost a tenth
 * of a bf16 step's attention). The one thing the order can change is the sign of a zero
 * maximum, which moves no bit below: s - (+0) and s - (-0) differ only for s = 0, whose exp is
 * 1 either way, and the log-sum-exp adds mx to log(l) >= +0. This form replaces `omp simd
 * reduction(max)`, whose lanes went through memory around every row: 16 scalar stores
 * before and 16 dependent scalar maxima after each row's vector loop. */
static inline __attribute__((always_inline)) float att_row_max(const float *s, int lo, int hi) {
    float m[16];
    for (int u = 0; u < 16; u++) m[u] = -INFINITY;
    int j = lo;
    for (; j + 16 <= hi; j += 16)
        for (int u = 0; u < 16; u++) m[u] = s[j + u] > m[u] ? s[j + u] : m[u];
    /* (the folds written out: a loop over the widths stayed scalar) */
    for (int u = 0; u < 8; u++) m[u] = m[u + 8] > m[u] ? m[u + 8] : m[u];
    for (int u = 0; u < 4; u++) m[u] = m[u + 4] > m[u] ? m[u + 4] : m[u];
    for (int u = 0; u < 2; u++) m[u] = m[u + 2] > m[u] ? m[u + 2] : m[u];
    float mx = m[1] > m[0] ? m[1] : m[0];
    for (; j < hi; j++) mx = s[j] > mx ? s[j] : mx;
    return mx;
}

/* The end of a row's elementwise loops (ATT_P_ROW, ATT_GRAD_ROW): [lo, hi) widened to a whole
 * number of ATT_VW columns where the block's nk columns allow (the masked columns past hi are
 * computed from the block's scores, which the product wrote, then zeroed): each element is the
 * same function of its own inputs, so the same bits, and the vector loop runs to the end of the
 * row. The rows' lengths step by one (a causal row sees one key more than the row above), which
 * had left up to 31 columns a row to the loop's epilogue and scalar tail (~30 instructions an
 * element): ~40% of att_block_grad's samples at config S (perf), and the softmax's exponentials
 * likewise; measured on one layer's attention at S, one thread: forward -5%, backward -5%. */
#define ATT_VW 32
static inline __attribute__((always_inline)) int att_row_end(int lo, int hi, int nk) {
    const int hx = lo + ((hi - lo + ATT_VW - 1) & ~(ATT_VW - 1));
    return hx < nk ? hx : (hi > nk ? hi : nk);
}
/* Softmax of the rows of S in place; S's columns are keys klo .. klo + nk - 1, and the keys a
 * row does not see get 0. Writes each row's log-sum-exp (+inf when the row sees no key).
 * With P (bf16 patterns, rows Tk apart) the probabilities go there, rounded, instead of into S
 * (which is then left as scratch): the bf16 blocks' fused rounding; with Pc (rows nk apart)
 * there, rounded, as fp32 values: the emulated bf16 operand, compact. Pc may be S itself (P
 * compacted in place: element j of row r goes to r * nk + j, never past where it is read,
 * r * Tk + j, nor into a later row, and rows run in order: nothing is written before it is read). */
#define ATT_P_ROW(dst_, conv_, zero_)                                                         \
    do {                                                                                    \
        __typeof__(dst_) pd = (dst_);                                                       \
        _Pragma("omp simd")                                                                 \
        for (int j = lo; j < hx; j++) pd[j] = conv_(s[j] * inv);                            \
        for (int j = 0; j < lo; j++) pd[j] = zero_;                                         \
        for (int j = hi; j < nk; j++) pd[j] = zero_;                                        \
    } while (0)
#define ATT_AS_IS(x) (x)
OPS_VARIANTS(void, att_block_softmax, (float *S, uint16_t *P, float *Pc, float *lse, int i0, int nq,
                              int klo, int nk, int Tq, int Tk, int causal, int window),
             (S, P, Pc, lse, i0, nq, klo, nk, Tq, Tk, causal, window)) {
    /* Two stages a row, skewed by one row: row r's maximum, exponentials and sum, then row
     * r - 1's probabilities. A row's sum ends in a serial chain (the lanes added in order, then
     * 1 / l: ~20% of this function's samples, perf annotate) that the next row's independent
     * work now overlaps. Each row's operations and their order are unchanged: the same bits. */
    int plo = 0, phi = 0, phx = 0;
    float pl = 0.0f, pmx = 0.0f;
    for (int r = 0; r <= nq; r++) {
        int lo = 0, hi = 0, hx = 0;
        float mx = 0.0f, l = 0.0f;
        if (r < nq) {
            float *s = S + (size_t)r * Tk;
            ops_att_range(i0 + r, Tq, Tk, causal, window, &lo, &hi);
            lo -= klo, hi -= klo;
            if (hi < lo) hi = lo;
            hx = att_row_end(lo, hi, nk);
            mx = att_row_max(s, lo, hi);
            /* the exponentials over the widened row (att_row_end), then their sum over [lo, hi)
             * in a loop of its own: the same reduction as when the two were one loop (checked at
             * every level: lanes of the vector width, the tail into lane 0, then the lanes in
             * order), so the same bits, and no scalar exponential in the tail */
#pragma omp simd
            for (int j = lo; j < hx; j++) s[j] = ops_expf(s[j] - mx);
#pragma omp simd reduction(+ : l)
            for (int j = lo; j < hi; j++) l += s[j];
        }
        if (r > 0) {   /* row r - 1's probabilities */
            const int q = r - 1;
            const float *s = S + (size_t)q * Tk;
            const float inv = pl > 0.0f ? 1.0f / pl : 0.0f;
            {
                const int lo = plo, hi = phi, hx = phx;
                if (Pc) ATT_P_ROW(Pc + (size_t)q * nk, ops_bf16_round, 0.0f);
                else if (P) ATT_P_ROW(P + (size_t)q * Tk, ops_bf16_from_float, 0);
                else ATT_P_ROW((float *)s, ATT_AS_IS, 0.0f);
            }
            lse[q] = pl > 0.0f ? pmx + logf(pl) : INFINITY;
        }
        plo = lo, phi = hi, phx = hx, pl = l, pmx = mx;
    }
}

/* The keys [*klo, *khi) that rows [i0, i0 + n) see together (the first row's window starts
 * first, the last row sees the newest key). */
static void att_block_keys(int i0, int n, int Tq, int Tk, int causal, int window, int *klo, int *khi) {
    int lo, hi;
    ops_att_range(i0, Tq, Tk, causal, window, klo, &hi);
    ops_att_range(i0 + n - 1, Tq, Tk, causal, window, &lo, khi);
}

/* The group of key/value head kh in batch b at positions [i0, i0 + np) (S: ATT_ROWS x Tk,
 * Qs: ATT_ROWS x hd scratch, both sized for group * np rows). At bf16 emulated (ops_bf16.h; e
 * not NULL) each operand is rounded once, as the backward's (att_group_backward_blocked): the
 * head's keys and values from e (rounded once for all its blocks), Q in its gathered copy, P
 * as the softmax makes it (compact, over S): the operands model_gemm_prec packs and
 * rounds, passed to the same fp32 product. */
typedef struct {
    const float *Kc, *Vc;   /* the head's keys and values rounded, compact (Tk x hd) */
    float *o32;             /* the output's fp32 shadow (the o projection's operand) or NULL */
} att_emu_t;
static void att_block_forward(float *out, float *lse, const float *q, const float *k,
                              const float *v, float *S, float *Qs, const att_emu_t *e, int b,
                              int kh, int i0, int np, int Tq, int Tk, int H, int Hkv, int hd,
                              int causal, int window) {
    const int group = H / Hkv, rows = group * np, ldk = Hkv * hd;
    int klo, khi;
    att_block_keys(i0, np, Tq, Tk, causal, window, &klo, &khi);
    const int nk = khi - klo;
    /* the block's keys start at klo: the products and S's columns run over them only */
    const size_t ko = (size_t)b * Tk * ldk + (size_t)klo * ldk + (size_t)kh * hd;
    if (nk <= 0) {
        memset(Qs, 0, sizeof(float) * rows * hd);
        att_put_out(out, e ? e->o32 : NULL, Qs, b, kh, group, i0, np, Tq, H, hd);
        for (int j = 0; j < group; j++)
            for (int r = 0; r < np; r++) lse[att_lse_at(b, kh, group, j, i0 + r, Tq, H)] = INFINITY;
        return;
    }
    const precision_t pr = e ? PRECISION_FP32 : ops_product_precision;
    const float *K = e ? e->Kc + (size_t)klo * hd : k + ko, *V = e ? e->Vc + (size_t)klo * hd : v + ko;
    const int ldkv = e ? hd : ldk;
    if (e) att_gather_round(Qs, q, b, kh, group, i0, np, Tq, H, hd);
    else att_gather(Qs, q, b, kh, group, i0, np, Tq, H, hd);
    att_scores(pr, S, Qs, K, ldkv, rows, nk, hd, Tk, 1.0f / sqrtf((float)hd));
    for (int j = 0; j < group; j++)
        att_block_softmax(S + (size_t)j * np * Tk, NULL, e ? S + (size_t)j * np * nk : NULL,
                          lse + att_lse_at(b, kh, group, j, i0, Tq, H), i0, np, klo, nk, Tq, Tk,
                          causal, window);
    /* O (rows, hd) = P V, into the stacked copy (Q is no longer needed), then back in place */
    model_gemm_prec(pr, GEMM_N, GEMM_N, hd, rows, nk, 1.0f, V, ldkv, S, e ? nk : Tk,
                    0.0f, Qs, hd);
    att_put_out(out, e ? e->o32 : NULL, Qs, b, kh, group, i0, np, Tq, H, hd);
}

/* K and V of head kh in batch b rounded, compact (Tk x hd): the emulated operands. Built per
 * level (ops_clones.h) with the rounding inlined: a call of ops_bf16_pack_f32 per row of hd
 * floats (two per position) cost more than the rounding itself. */
OPS_VARIANTS(void, att_round_kv, (float *Kc, float *Vc, const float *k, const float *v, int b,
                                  int kh, int Tk, int Hkv, int hd),
             (Kc, Vc, k, v, b, kh, Tk, Hkv, hd)) {
    for (int t = 0; t < Tk; t++) {
        const size_t o = ((size_t)b * Tk + t) * Hkv * hd + (size_t)kh * hd;
        ops_bf16_round_row_to(Kc + (size_t)t * hd, k + o, (size_t)hd);
        ops_bf16_round_row_to(Vc + (size_t)t * hd, v + o, (size_t)hd);
    }
}

/* The same on bf16 operands where bf16 products are native (below); -1 when not used. */
static int att_forward16(float *out, float *lse, const float *q, const float *k, const float *v,
                         int B, int Tq, int Tk, int H, int Hkv, int hd, int causal, int window);
/* attention_backward_qkv's join (qkv_join_unrope_group), run by the worker of each (b, kh)
 * after its last block; NULL in the plain backward */
typedef struct {
    float *dqkv;     /* NULL: the shadow alone (qkv_join_unrope_group) */
    uint16_t *d16;   /* dqkv's shadow or NULL */
    int r32;         /* dqkv written rounded in place (ops_bf16_round_out) */
    const float *cos_t, *sin_t;
    int pos0;
} att_join_t;
static int att_backward16(float *dq, float *dk, float *dv, const float *dout, const float *out,
                          const float *lse, const float *q, const float *k, const float *v, int B,
                          int Tq, int Tk, int H, int Hkv, int hd, int causal, int window, int set,
                          const att_join_t *join);

void attention_window_forward(float *out, float *lse, const float *q, const float *k,
                              const float *v, int B, int Tq, int Tk, int H, int Hkv, int hd,
                              int causal, int window) {
    if (!att_forward16(out, lse, q, k, v, B, Tq, Tk, H, Hkv, hd, causal, window)) return;
    const int group = H / Hkv, np = att_block_positions(group), nqb = (Tq + np - 1) / np;
    const int rows = group * (Tq < np ? Tq : np), emulated = ops_bf16_emulated();
    /* the work items: the blocks, in (b, kh, block) order; at bf16 emulated a head's blocks
     * together, which share its rounded keys and values */
    const int per = emulated && nqb > 0 ? nqb : 1, items = B * Hkv * (nqb / per);
    /* the output's fp32 shadow at bf16 emulated, written as the blocks scatter their rows (out
     * is read by the backward in fp32 too: a copy, not rounded in place) */
    float *o32 = emulated ? ops_bf16_shadow_take_f32(out, (size_t)B * Tq * H * hd) : NULL;
    int fell_back = 0;
#pragma omp parallel reduction(| : fell_back)
    {
        /* one score block and one stacked copy per thread; without them (or for a block of
         * too few rows), the row-at-a-time kernel (no scratch) */
        float *S = NULL, *Qs = NULL, *Kc = NULL, *Vc = NULL;
        if (rows >= ATT_QB_MIN) {
            S = malloc(sizeof(float) * (size_t)rows * (size_t)(Tk > 0 ? Tk : 1));
            Qs = malloc(sizeof(float) * (size_t)rows * hd);
            if (emulated) {
                Kc = malloc(sizeof(float) * (size_t)(Tk > 0 ? Tk : 1) * hd);
                Vc = malloc(sizeof(float) * (size_t)(Tk > 0 ? Tk : 1) * hd);
            }
        }
        const att_emu_t emu = {Kc, Vc, o32}, *e = Kc && Vc ? &emu : NULL;
        fell_back |= o32 && !e;   /* (this thread writes rows without the shadow) */
#pragma omp for schedule(dynamic, 1)
        for (int it = 0; it < items; it++) {
            const int b = it / (Hkv * (nqb / per)), kh = it / (nqb / per) % Hkv;
            const int qb0 = it % (nqb / per) * per;
            if (e) att_round_kv(Kc, Vc, k, v, b, kh, Tk, Hkv, hd);
            for (int qb = qb0; qb < qb0 + per; qb++) {
                const int i0 = qb * np, n = Tq - i0 < np ? Tq - i0 : np;
                if (S && Qs && group * n >= ATT_QB_MIN)
                    att_block_forward(out, lse, q, k, v, S, Qs, e, b, kh, i0, n, Tq, Tk, H, Hkv,
                                      hd, causal, window);
                else {
                    fell_back = 1;
                    for (int h = kh * group; h < (kh + 1) * group; h++)
                        for (int i = i0; i < i0 + n; i++)
                            att_row_forward(out, lse, q, k, v, b, h, i, Tq, Tk, H, Hkv, hd,
                                            causal, window);
                }
            }
        }
        float *bufs[] = {S, Qs, Kc, Vc};
        for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) free(bufs[i]);
    }
    if (fell_back && o32) ops_bf16_clobber(out, sizeof(float) * B * Tq * H * hd);
}

/* One row of att_block_grad into pd_ and dd_ (the probabilities and score gradients, through
 * conv_), zeros where masked. */
#define ATT_GRAD_ROW(pd_, dd_, conv_, zero_)                                                  \
    do {                                                                                    \
        __typeof__(pd_) pd = (pd_), dd = (dd_);                                             \
        _Pragma("omp simd")                                                                 \
        for (int j = lo; j < hx; j++) {                                                     \
            const float pj = ops_expf(p[j] - L);                                            \
            pd[j] = conv_(pj);                                                              \
            dd[j] = conv_(pj * (ds[j] - Di) * scale);                                       \
        }                                                                                   \
        for (int j = 0; j < lo; j++) pd[j] = dd[j] = zero_;                                 \
        for (int j = hi; j < nk; j++) pd[j] = dd[j] = zero_;                                \
    } while (0)
/* Probabilities and score gradients of one head's np rows: P <- exp(S - lse) (0 where
 * masked), dP <- P * (dP - D_i) * scale with D_i = dout_i . out_i (Dr: one per row), in place;
 * or, with P16 and dS16 (bf16 patterns, rows Tk apart), rounded into those instead (P and dP,
 * the block's scratch, get the fp32 values): the bf16 blocks' fused rounding; or, with Pc and dSc (rows nk apart),
 * rounded into those as fp32 values: the emulated bf16 operands, compact; Pc and dSc may be P
 * and dP themselves (compacted in place, safe as in att_block_softmax). */
OPS_VARIANTS(void, att_block_grad, (float *P, float *dP, uint16_t *P16, uint16_t *dS16, float *Pc,
                           float *dSc, const float *lrow, const float *Dr, int i0, int nq, int klo,
                           int nk, int Tq, int Tk, int causal, int window, float scale),
             (P, dP, P16, dS16, Pc, dSc, lrow, Dr, i0, nq, klo, nk, Tq, Tk, causal, window, scale)) {
    for (int r = 0; r < nq; r++) {
        float *p = P + (size_t)r * Tk, *ds = dP + (size_t)r * Tk;
        int lo, hi;
        ops_att_range(i0 + r, Tq, Tk, causal, window, &lo, &hi);
        lo -= klo, hi -= klo;
        if (hi < lo) hi = lo;
        const int hx = att_row_end(lo, hi, nk);
        const float L = lrow[r], Di = Dr[r];
        if (Pc) ATT_GRAD_ROW(Pc + (size_t)r * nk, dSc + (size_t)r * nk, ops_bf16_round, 0.0f);
        else if (P16) {
            /* P and dP are the block's scratch here (att_group_backward16 recomputes them per
             * block): the row's values in fp32 in place, then packed (ops_pack16.h) */
            uint16_t *restrict pd = P16 + (size_t)r * Tk, *restrict dd = dS16 + (size_t)r * Tk;
#pragma omp simd
            for (int j = lo; j < hx; j++) {
                const float pj = ops_expf(p[j] - L);
                p[j] = pj;
                ds[j] = pj * (ds[j] - Di) * scale;
            }
            if (hx > lo) {
                ops_pack16_row(pd + lo, p + lo, (size_t)(hx - lo));
                ops_pack16_row(dd + lo, ds + lo, (size_t)(hx - lo));
            }
            for (int j = 0; j < lo; j++) pd[j] = dd[j] = 0;
            for (int j = hi; j < nk; j++) pd[j] = dd[j] = 0;
        }
        else ATT_GRAD_ROW(p, ds, ATT_AS_IS, 0.0f);
    }
}

/* Scratch of one thread for the blocked backward. */
typedef struct {
    float *P, *dP;     /* rows x Tk: probabilities, score gradients */
    float *Qs, *dOs;   /* rows x hd: stacked Q and dO (dO's copy then receives dQ) */
    float *D;          /* rows: dout . out */
    /* bf16 emulated (att_group_backward_blocked), else NULL: P and dS rounded (rows x nk,
     * compacted over P and dP), the head's keys and values rounded (Tk x hd) */
    float *Pc, *dSc, *Kc, *Vc;
} att_bwd_scratch;

/* The backward's block of positions [i0, i0 + n) (n = np or what is left): its rows, the keys
 * it sees [klo, klo + nk) and the offset ko of the first one in k/v; 0 when it sees none. */
static int att_bwd_block(int i0, int np, int group, int b, int kh, int Tq, int Tk, int Hkv, int hd,
                         int causal, int window, int *n, int *rows, int *klo, int *nk, size_t *ko) {
    int khi;
    *n = Tq - i0 < np ? Tq - i0 : np;
    *rows = group * *n;
    att_block_keys(i0, *n, Tq, Tk, causal, window, klo, &khi);
    *nk = khi - *klo;
    *ko = (size_t)b * Tk * Hkv * hd + (size_t)*klo * Hkv * hd + (size_t)kh * hd;
    return *nk > 0;
}

/* The rows of the backward's outputs that the worker of (b, kh) owns, zeroed (the _set ops):
 * dk and dv at every key position of that head, dq of the group's query heads (adjacent in a
 * row: one run of group x hd floats a position). Written just before the worker adds into
 * them, so they are in its cache when its first block reads them. */
static void att_zero_owned(float *dq, float *dk, float *dv, int b, int kh, int Tq, int Tk, int H,
                           int Hkv, int hd) {
    const int group = H / Hkv;
    for (int t = 0; t < Tk; t++) {
        const size_t o = (((size_t)b * Tk + t) * Hkv + kh) * hd;
        memset(dk + o, 0, sizeof(float) * hd);
        memset(dv + o, 0, sizeof(float) * hd);
    }
    if (dq)
        for (int t = 0; t < Tq; t++)
            memset(dq + (((size_t)b * Tq + t) * H + (size_t)kh * group) * hd, 0,
                   sizeof(float) * group * hd);
}

/* D_i = dout_i . out_i for the block's rows (stacked order). */
static void att_block_D(float *D, const float *dout, const float *out, int b, int kh, int group,
                        int i0, int n, int Tq, int H, int hd) {
    for (int j = 0; j < group; j++)
        for (int i = 0; i < n; i++) {
            const size_t o = att_row(b, kh, group, j, i0, i, Tq, H, hd);
            D[j * n + i] = dot(dout + o, out + o, hd);
        }
}

/* Every query head of key/value head kh in batch b, position blocks in order: dk/dv of that
 * head are written by this call alone.
 * At bf16 emulated (no native bf16 products, ops_bf16.h; w->Kc set) each operand is rounded
 * once, where model_gemm_prec would round both operands of each of the five products of every
 * block (K twice a block, Q and dO twice): K and V of the head once for all its blocks, compact
 * (Tk x hd, so a block's keys are a compact nk x hd run of them); Q and dO gathered compact,
 * rounded as they are copied; P and dS rounded as they are made, compact (rows x nk, att_block_grad).
 * Those are the operands model_gemm_prec packs (compact: leading dimension = rows) and rounds,
 * passed to the same fp32 product: the same bits. */
static void att_group_backward_blocked(float *dq, float *dk, float *dv, const float *dout,
                                       const float *out, const float *lse, const float *q,
                                       const float *k, const float *v, att_bwd_scratch *w,
                                       int b, int kh, int Tq, int Tk, int H, int Hkv, int hd,
                                       int causal, int window) {
    const int group = H / Hkv, ldk = Hkv * hd, np = att_block_positions(group), emu = w->Kc != NULL;
    const float scale = 1.0f / sqrtf((float)hd);
    const precision_t pr = emu ? PRECISION_FP32 : ops_product_precision;
    if (emu) att_round_kv(w->Kc, w->Vc, k, v, b, kh, Tk, Hkv, hd);
    for (int i0 = 0; i0 < Tq; i0 += np) {
        int n, rows, klo, nk;
        size_t ko;
        if (!att_bwd_block(i0, np, group, b, kh, Tq, Tk, Hkv, hd, causal, window, &n, &rows, &klo,
                           &nk, &ko))
            continue;
        /* the operands: K, V (ldkv apart), P, dS (ldp apart) */
        const float *K = emu ? w->Kc + (size_t)klo * hd : k + ko, *V = emu ? w->Vc + (size_t)klo * hd : v + ko;
        const float *Pm = emu ? w->Pc : w->P, *dS = emu ? w->dSc : w->dP;
        const int ldkv = emu ? hd : ldk, ldp = emu ? nk : Tk;
        if (emu) {
            att_gather_round(w->Qs, q, b, kh, group, i0, n, Tq, H, hd);
            att_gather_round(w->dOs, dout, b, kh, group, i0, n, Tq, H, hd);
        } else {
            att_gather(w->Qs, q, b, kh, group, i0, n, Tq, H, hd);
            att_gather(w->dOs, dout, b, kh, group, i0, n, Tq, H, hd);
        }
        att_block_D(w->D, dout, out, b, kh, group, i0, n, Tq, H, hd);
        /* S = scale Q K^T, dP = dO V^T */
        att_scores(pr, w->P, w->Qs, K, ldkv, rows, nk, hd, Tk, scale);
        att_scores(pr, w->dP, w->dOs, V, ldkv, rows, nk, hd, Tk, 1.0f);
        for (int j = 0; j < group; j++)
            att_block_grad(w->P + (size_t)j * n * Tk, w->dP + (size_t)j * n * Tk, NULL, NULL,
                           emu ? w->Pc + (size_t)j * n * nk : NULL, emu ? w->dSc + (size_t)j * n * nk : NULL,
                           lse + att_lse_at(b, kh, group, j, i0, Tq, H), w->D + j * n, i0, n,
                           klo, nk, Tq, Tk, causal, window, scale);
        /* dV += P^T dO, dK += dS^T Q, dQ += dS K (through dO's copy, no longer needed) */
        model_gemm_prec(pr, GEMM_N, GEMM_T, hd, nk, rows, 1.0f, w->dOs, hd, Pm, ldp, 1.0f, dv + ko, ldk);
        model_gemm_prec(pr, GEMM_N, GEMM_T, hd, nk, rows, 1.0f, w->Qs, hd, dS, ldp, 1.0f, dk + ko, ldk);
        if (dq) {
            model_gemm_prec(pr, GEMM_N, GEMM_N, hd, rows, nk, 1.0f, K, ldkv, dS, ldp, 0.0f, w->dOs, hd);
            att_scatter(dq, w->dOs, 1, b, kh, group, i0, n, Tq, H, hd);
        }
    }
}

/* set: the outputs overwritten (att_zero_owned), else added into; join (Tq = Tk): each
 * (b, kh)'s rows joined after (att_join_t) */
static void att_backward(float *dq, float *dk, float *dv, const float *dout, const float *out,
                         const float *lse, const float *q, const float *k, const float *v, int B,
                         int Tq, int Tk, int H, int Hkv, int hd, int causal, int window, int set,
                         const att_join_t *join) {
    if (!att_backward16(dq, dk, dv, dout, out, lse, q, k, v, B, Tq, Tk, H, Hkv, hd, causal, window,
                        set, join))
        return;
    const int group = H / Hkv, np = att_block_positions(group);
    const size_t rows = (size_t)group * (Tq < np ? (Tq > 0 ? Tq : 1) : np);
    const int emulated = ops_bf16_emulated();
#pragma omp parallel
    {
        const size_t n = rows * (size_t)(Tk > 0 ? Tk : 1), nkv = (size_t)(Tk > 0 ? Tk : 1) * hd;
        att_bwd_scratch w = {malloc(sizeof(float) * n), malloc(sizeof(float) * n),
                             malloc(sizeof(float) * rows * hd), malloc(sizeof(float) * rows * hd),
                             malloc(sizeof(float) * rows), NULL, NULL, NULL, NULL};
        if (emulated)
            w.Pc = w.P, w.dSc = w.dP, w.Kc = malloc(sizeof(float) * nkv),
            w.Vc = malloc(sizeof(float) * nkv);
        const int ok = w.P && w.dP && w.Qs && w.dOs && w.D;
        if (!(w.Pc && w.dSc && w.Kc && w.Vc)) free(w.Kc), w.Kc = NULL;   /* (model_gemm_prec rounds) */
#pragma omp for collapse(2) schedule(dynamic, 1)
        for (int b = 0; b < B; b++)
            for (int kh = 0; kh < Hkv; kh++) {
                if (set) att_zero_owned(dq, dk, dv, b, kh, Tq, Tk, H, Hkv, hd);
                if (ok)
                    att_group_backward_blocked(dq, dk, dv, dout, out, lse, q, k, v, &w, b, kh, Tq,
                                               Tk, H, Hkv, hd, causal, window);
                else   /* no scratch: the key-block kernel, which needs none */
                    att_group_backward(dq, dk, dv, dout, out, lse, q, k, v, b, kh, Tq, Tk, H,
                                       Hkv, hd, causal, window);
                if (join)
                    qkv_join_unrope_group(join->dqkv, join->d16, join->r32, dq, dk, dv, join->cos_t,
                                          join->sin_t, b, kh, Tq, H, Hkv, hd, join->pos0);
            }
        float *bufs[] = {w.P, w.dP, w.Qs, w.dOs, w.D, w.Kc, w.Vc};
        for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) free(bufs[i]);
    }
}

void attention_window_backward(float *dq, float *dk, float *dv, const float *dout,
                               const float *out, const float *lse, const float *q, const float *k,
                               const float *v, int B, int Tq, int Tk, int H, int Hkv, int hd,
                               int causal, int window) {
    att_backward(dq, dk, dv, dout, out, lse, q, k, v, B, Tq, Tk, H, Hkv, hd, causal, window, 0, NULL);
}

void attention_window_backward_set(float *dq, float *dk, float *dv, const float *dout,
                                   const float *out, const float *lse, const float *q,
                                   const float *k, const float *v, int B, int Tq, int Tk, int H,
                                   int Hkv, int hd, int causal, int window) {
    att_backward(dq, dk, dv, dout, out, lse, q, k, v, B, Tq, Tk, H, Hkv, hd, causal, window, 1, NULL);
}

void attention_backward_qkv(float *dqkv, float *dq, float *dk, float *dv, const float *dout,
                            const float *out, const float *lse, const float *q, const float *k,
                            const float *v, const float *cos_t, const float *sin_t, int B, int T,
                            int H, int Hkv, int hd, int causal, int window, int pos0) {
    /* dqkv's shadow taken here, on the calling thread (the table's lock), as qkv_join_unrope
     * takes it; at bf16 emulated, dqkv rounded in place where it is read by products only (the
     * fused projection's backward: ops_bf16_round_out), which that product then finds */
    const size_t n = (size_t)B * T * (H + 2 * Hkv) * hd;
    /* where dqkv is read by products only (native bf16), its shadow alone is written
     * (ops_bf16_shadow_take_out; the join's dqkv NULL): the fp32 store, 4 of the join's 10
     * bytes an element, to rows not in cache */
    int only = 0;
    uint16_t *d16 = ops_bf16_shadow_take_out(dqkv, n, &only);
    const att_join_t join = {only ? NULL : dqkv, d16, !d16 && ops_bf16_round_out(dqkv, n), cos_t,
                             sin_t, pos0};
    att_backward(dq, dk, dv, dout, out, lse, q, k, v, B, T, T, H, Hkv, hd, causal, window, 1, &join);
    if (only) ops_bf16_only_done(dqkv, n);
}

/* ---- bf16 blocks (ops_bf16.h) ------------------------------------------------------------
 * Where bf16 products are native, the blocked attention takes its operands as bf16 once per
 * call -- q, k, v (the shadows qkv_split_rope wrote, else packed here) and, in the backward,
 * dO -- and its block products read them in place: the K and V blocks with their row stride,
 * the stacked Q and dO rows gathered as bf16 (half the bytes of the fp32 copies). The softmax
 * writes P, and the backward's pass writes P and dS, as bf16 directly (the rounding fused into
 * the pass that computes them), and the forward writes its output's shadow as it scatters the
 * rows (the o projection's operand). These are the values the fp32-operand path rounds at each
 * product's input; only the products' order of summation can differ. */

typedef struct {
    const uint16_t *q, *k, *v, *dout;
    uint16_t *own[4];   /* those packed here (no shadow), freed after the call */
    float *D;           /* the backward's dout . out per row (att_D_pack) */
} att16_t;

static const uint16_t *att16_operand(att16_t *a, int slot, const float *x, size_t n) {
    const uint16_t *sh = ops_bf16_shadows() ? ops_bf16_shadow_find(x, n) : NULL;
    if (sh) return sh;
    uint16_t *p = malloc(sizeof(uint16_t) * (n ? n : 1));
    if (p) ops_bf16_pack(p, x, n);
    a->own[slot] = p;
    return p;
}
static void att16_free(att16_t *a) {
    for (int i = 0; i < 4; i++) free(a->own[i]);
    free(a->D);
}

/* Os's rows (the stacked copy) into out's rows and, as bf16, into out16's, in one pass over
 * each row while it is in L1 (a copy and a rounding: the same bits at every level). Was a
 * memcpy and a packing call per row of hd floats: two calls and two loops per head and position. */
OPS_VARIANTS(void, att_scatter_out16, (float *out, uint16_t *out16, const float *xs, int b, int kh,
                                       int group, int i0, int np, int Tq, int H, int hd),
             (out, out16, xs, b, kh, group, i0, np, Tq, H, hd)) {
    ATT_SCATTER_SHADOW(out16, ops_bf16_from_float)
}

/* The bf16 blocks' element-wise passes on 16 lanes. P16 and dS16 are written only where bf16
 * products are native (x86-64-v4-bf16 and up), where att_block_softmax and att_block_grad run
 * their v4 build; these are the same rows written with ops_expf16 (ops_exp16.h: the v4 build's
 * exponentials) and VCVTNEPS2BF16 (ops_pack16.h: ops_bf16_from_float's bits), in fewer passes:
 * the softmax's exponentials and their sum in one pass, the rounding of P and dS in the pass that
 * computes them (no fp32 store and packing pass), the rows' ragged ends masked instead of
 * widened. Each element is the same function of its inputs as in the v4 build; a row's sum keeps
 * that build's association (below); a row's maximum is exact in any order (att_row_max). */
#if OPS_EXP16 && OPS_PACK16_NATIVE
#define ATT_ROWS16 1

/* lanes [0, n) of 16, n >= 0 */
static inline __attribute__((always_inline)) __mmask16 att_mask16(int n) {
    return n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1u);
}

/* max of s[lo .. hi) (att_row_max's value) */
static inline OPS_TARGET_BF16 __attribute__((always_inline)) float att_max16(const float *s, int lo,
                                                                            int hi) {
    __m512 m = _mm512_set1_ps(-INFINITY);
    int j = lo;
    for (; j + 16 <= hi; j += 16) m = _mm512_max_ps(_mm512_loadu_ps(s + j), m);
    if (j < hi) {
        const __mmask16 k = att_mask16(hi - j);
        m = _mm512_mask_max_ps(m, k, _mm512_maskz_loadu_ps(k, s + j), m);
    }
    return _mm512_reduce_max_ps(m);
}

/* s[j] = exp(s[j] - mx) over [lo, hi), in place; *acc: the 16-lane sum of the whole vectors
 * from lo, *rem: the remaining elements' exponentials in lanes 0 .. hi - lo mod 16, the other
 * lanes zero (att_block_softmax16 adds them up) */
static inline OPS_TARGET_BF16 __attribute__((always_inline)) void att_exp16(float *s, int lo, int hi,
                                                                           float mx, float *acc,
                                                                           float *rem) {
    const __m512 m = _mm512_set1_ps(mx);
    __m512 a = _mm512_setzero_ps(), e = _mm512_setzero_ps();
    int j = lo;
    for (; j + 16 <= hi; j += 16) {
        const __m512 x = ops_expf16(_mm512_sub_ps(_mm512_loadu_ps(s + j), m));
        _mm512_storeu_ps(s + j, x);
        a = _mm512_add_ps(a, x);
    }
    if (j < hi) {
        const __mmask16 k = att_mask16(hi - j);
        e = _mm512_maskz_mov_ps(k, ops_expf16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, s + j), m)));
        _mm512_mask_storeu_ps(s + j, k, e);
    }
    _mm512_storeu_ps(acc, a);
    _mm512_storeu_ps(rem, e);
}

/* 16 lanes rounded to bf16, stored: the lanes of kv as they are, the others of kw as zeros */
static inline OPS_TARGET_BF16 __attribute__((always_inline)) void att_put16(uint16_t *y, __m512 x,
                                                                           __mmask16 kv,
                                                                           __mmask16 kw) {
    _mm256_mask_storeu_epi16(y, kw, ops_pack16_vec_(_mm512_maskz_mov_ps(kv, x)));
}

/* att_block_softmax with P (bf16 patterns, rows Tk apart), 16 rows at a time: each row's
 * maximum and exponentials, then the 16 rows' sums together, then their probabilities. A row's
 * sum keeps the association of att_block_softmax's `omp simd` reduction in the v4 build: one
 * 16-lane accumulator over the whole vectors from lo, the remaining elements added in order
 * into lane 0, then lanes 0..15 in order to a zero. Here lane r of a vector is row r's: the
 * accumulators' lane u of the 16 rows in one gather, the remainder as 15 lanes, those past the
 * row's end zero (x + 0 is x for every x but -0, and lane 0 is a sum of exponentials from +0,
 * never -0). Row by row, those 31 dependent additions were the pass's critical path (a third
 * of its samples), and the remainder's loop, of a length that changes from row to row, a
 * mispredicted branch a row. */
static OPS_TARGET_BF16 void att_block_softmax16(float *S, uint16_t *P, float *lse, int i0, int nq,
                                                int klo, int nk, int Tq, int Tk, int causal,
                                                int window) {
    float acc[16][16], rem[16][16], mxs[16], ls[16], invs[16];
    int los[16], his[16];
    const __m512i ix = _mm512_mullo_epi32(
        _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), _mm512_set1_epi32(16));
    for (int r0 = 0; r0 < nq; r0 += 16) {
        const int g = nq - r0 < 16 ? nq - r0 : 16;
        for (int r = 0; r < 16; r++) {
            if (r >= g) {   /* (lanes of no row: defined values) */
                _mm512_storeu_ps(acc[r], _mm512_setzero_ps());
                _mm512_storeu_ps(rem[r], _mm512_setzero_ps());
                continue;
            }
            float *s = S + (size_t)(r0 + r) * Tk;
            int lo, hi;
            ops_att_range(i0 + r0 + r, Tq, Tk, causal, window, &lo, &hi);
            lo -= klo, hi -= klo;
            if (hi < lo) hi = lo;
            los[r] = lo, his[r] = hi;
            mxs[r] = att_max16(s, lo, hi);
            att_exp16(s, lo, hi, mxs[r], acc[r], rem[r]);
        }
        __m512 a0 = _mm512_i32gather_ps(ix, &acc[0][0], 4);
        for (int u = 0; u < 15; u++) a0 = _mm512_add_ps(a0, _mm512_i32gather_ps(ix, &rem[0][u], 4));
        __m512 l = _mm512_add_ps(_mm512_setzero_ps(), a0);
        for (int u = 1; u < 16; u++) l = _mm512_add_ps(l, _mm512_i32gather_ps(ix, &acc[0][u], 4));
        _mm512_storeu_ps(ls, l);
        _mm512_storeu_ps(invs, _mm512_maskz_div_ps(_mm512_cmp_ps_mask(l, _mm512_setzero_ps(), _CMP_GT_OQ),
                                                   _mm512_set1_ps(1.0f), l));
        for (int r = 0; r < g; r++) {   /* [lo, hi) rounded, zeros elsewhere */
            const float *s = S + (size_t)(r0 + r) * Tk;
            uint16_t *pd = P + (size_t)(r0 + r) * Tk;
            const int lo = los[r], hi = his[r];
            const __m512 vi = _mm512_set1_ps(invs[r]);
            if (lo > 0) memset(pd, 0, sizeof(uint16_t) * lo);
            int j = lo;
            for (; j + 16 <= hi; j += 16)
                _mm256_storeu_si256((__m256i *)(pd + j),
                                    ops_pack16_vec_(_mm512_mul_ps(_mm512_loadu_ps(s + j), vi)));
            if (j < nk) {
                const __mmask16 kv = att_mask16(hi - j);
                att_put16(pd + j, _mm512_mul_ps(_mm512_maskz_loadu_ps(kv, s + j), vi), kv,
                          att_mask16(nk - j));
                if (j + 16 < nk) memset(pd + j + 16, 0, sizeof(uint16_t) * (nk - j - 16));
            }
            lse[r0 + r] = ls[r] > 0.0f ? mxs[r] + logf(ls[r]) : INFINITY;
        }
    }
}

/* att_block_grad with P16 and dS16: P <- exp(S - lse), dS <- P (dP - D_i) scale, rounded
 * straight into P16 and dS16 (P and dP only read) */
static OPS_TARGET_BF16 void att_block_grad16(const float *P, const float *dP, uint16_t *P16,
                                             uint16_t *dS16, const float *lrow, const float *Dr,
                                             int i0, int nq, int klo, int nk, int Tq, int Tk,
                                             int causal, int window, float scale) {
    const __m512 vs = _mm512_set1_ps(scale);
    for (int r = 0; r < nq; r++) {
        const float *p = P + (size_t)r * Tk, *ds = dP + (size_t)r * Tk;
        uint16_t *pd = P16 + (size_t)r * Tk, *dd = dS16 + (size_t)r * Tk;
        int lo, hi;
        ops_att_range(i0 + r, Tq, Tk, causal, window, &lo, &hi);
        lo -= klo, hi -= klo;
        if (hi < lo) hi = lo;
        const __m512 vL = _mm512_set1_ps(lrow[r]), vD = _mm512_set1_ps(Dr[r]);
        if (lo > 0) {
            memset(pd, 0, sizeof(uint16_t) * lo);
            memset(dd, 0, sizeof(uint16_t) * lo);
        }
        int j = lo;
        for (; j + 16 <= hi; j += 16) {
            const __m512 pj = ops_expf16(_mm512_sub_ps(_mm512_loadu_ps(p + j), vL));
            const __m512 g = _mm512_mul_ps(
                _mm512_mul_ps(pj, _mm512_sub_ps(_mm512_loadu_ps(ds + j), vD)), vs);
            _mm256_storeu_si256((__m256i *)(pd + j), ops_pack16_vec_(pj));
            _mm256_storeu_si256((__m256i *)(dd + j), ops_pack16_vec_(g));
        }
        if (j < nk) {
            const __mmask16 kv = att_mask16(hi - j), kw = att_mask16(nk - j);
            const __m512 pj = ops_expf16(_mm512_sub_ps(_mm512_maskz_loadu_ps(kv, p + j), vL));
            const __m512 g = _mm512_mul_ps(
                _mm512_mul_ps(pj, _mm512_sub_ps(_mm512_maskz_loadu_ps(kv, ds + j), vD)), vs);
            att_put16(pd + j, pj, kv, kw);
            att_put16(dd + j, g, kv, kw);
            if (j + 16 < nk) {
                memset(pd + j + 16, 0, sizeof(uint16_t) * (nk - j - 16));
                memset(dd + j + 16, 0, sizeof(uint16_t) * (nk - j - 16));
            }
        }
    }
}
#else
#define ATT_ROWS16 0
#endif

/* One thread's scratch for the bf16 blocks (rows x Tk and rows x hd): att16_scratch_alloc. */
typedef struct {
    float *S, *dP, *Os;
    uint16_t *P16, *dS16, *Qs16, *dOs16;
} att16_scratch;

/* The thread's buffer (gemm_tls_buffer, kept across calls) carved into the pieces, each 64-byte
 * aligned. Was seven mallocs and frees per thread per call (~450 KB at config S: a share of
 * malloc_consolidate, _int_malloc and _int_free in every call). */
static int att16_scratch_alloc(att16_scratch *w, size_t rows, int Tk, int hd, int backward) {
    const size_t st = rows * (size_t)(Tk > 0 ? Tk : 1), sh = rows * (size_t)hd;
#define ATT16_UP(x) (((x) + 63) & ~(size_t)63)
    const size_t nf = ATT16_UP(sizeof(float) * st), nh = ATT16_UP(sizeof(uint16_t) * st);
    const size_t of = ATT16_UP(sizeof(float) * sh), oh = ATT16_UP(sizeof(uint16_t) * sh);
#undef ATT16_UP
    const size_t bytes = nf + of + nh + oh + (backward ? nf + nh + oh : 0);
    char *p = gemm_tls_buffer(GEMM_TLS_OPS_ATT, bytes);
    memset(w, 0, sizeof *w);
    if (!p) return 0;
    w->S = (float *)p, p += nf;
    w->Os = (float *)p, p += of;
    w->P16 = (uint16_t *)p, p += nh;
    w->Qs16 = (uint16_t *)p, p += oh;
    if (backward) {
        w->dP = (float *)p, p += nf;
        w->dS16 = (uint16_t *)p, p += nh;
        w->dOs16 = (uint16_t *)p;
    }
    return 1;
}

static void att_block_forward16(float *out, uint16_t *out16, float *lse, const att16_t *a,
                                att16_scratch *w, int b, int kh, int i0, int np, int Tq, int Tk,
                                int H, int Hkv, int hd, int causal, int window) {
    const int group = H / Hkv, rows = group * np, ldk = Hkv * hd;
    int klo, khi;
    att_block_keys(i0, np, Tq, Tk, causal, window, &klo, &khi);
    const int nk = khi - klo;
    const size_t ko = (size_t)b * Tk * ldk + (size_t)klo * ldk + (size_t)kh * hd;
    if (nk <= 0) {
        memset(w->Os, 0, sizeof(float) * rows * hd);
        for (int j = 0; j < group; j++)
            for (int r = 0; r < np; r++) lse[att_lse_at(b, kh, group, j, i0 + r, Tq, H)] = INFINITY;
    } else {
        att_gather_e(w->Qs16, a->q, sizeof(uint16_t), b, kh, group, i0, np, Tq, H, hd);
        model_gemm_bf16(GEMM_T, GEMM_N, nk, rows, hd, 1.0f / sqrtf((float)hd), a->k + ko, ldk,
                        w->Qs16, hd, 0.0f, w->S, Tk);
        for (int j = 0; j < group; j++)
#if ATT_ROWS16
            att_block_softmax16(w->S + (size_t)j * np * Tk, w->P16 + (size_t)j * np * Tk,
                                lse + att_lse_at(b, kh, group, j, i0, Tq, H), i0, np, klo, nk, Tq,
                                Tk, causal, window);
#else
            att_block_softmax(w->S + (size_t)j * np * Tk, w->P16 + (size_t)j * np * Tk, NULL,
                              lse + att_lse_at(b, kh, group, j, i0, Tq, H), i0, np, klo, nk, Tq, Tk,
                              causal, window);
#endif
        model_gemm_bf16(GEMM_N, GEMM_N, hd, rows, nk, 1.0f, a->v + ko, ldk, w->P16, Tk, 0.0f, w->Os,
                        hd);
    }
    if (out16) att_scatter_out16(out, out16, w->Os, b, kh, group, i0, np, Tq, H, hd);
    else att_scatter(out, w->Os, 0, b, kh, group, i0, np, Tq, H, hd);
}

/* The forward on bf16 blocks; -1 (nothing written) when it does not apply or has no memory. */
static int att_forward16(float *out, float *lse, const float *q, const float *k, const float *v,
                         int B, int Tq, int Tk, int H, int Hkv, int hd, int causal, int window) {
    const int group = H / Hkv, np = att_block_positions(group), nqb = (Tq + np - 1) / np;
    const size_t rows = (size_t)group * (Tq < np ? Tq : np);
    if (!ops_bf16_native() || rows < ATT_QB_MIN) return -1;
    att16_t a = {0};
    a.q = att16_operand(&a, 0, q, (size_t)B * Tq * H * hd);
    a.k = att16_operand(&a, 1, k, (size_t)B * Tk * Hkv * hd);
    a.v = att16_operand(&a, 2, v, (size_t)B * Tk * Hkv * hd);
    if (!a.q || !a.k || !a.v) {
        att16_free(&a);
        return -1;
    }
    uint16_t *out16 = ops_bf16_shadows() ? ops_bf16_shadow_take(out, (size_t)B * Tq * H * hd) : NULL;
    int fell_back = 0;
#pragma omp parallel reduction(| : fell_back)
    {
        att16_scratch w;
        const int ok = att16_scratch_alloc(&w, rows, Tk, hd, 0);
#pragma omp for collapse(3) schedule(dynamic, 1)
        for (int b = 0; b < B; b++)
            for (int kh = 0; kh < Hkv; kh++)
                for (int qb = 0; qb < nqb; qb++) {
                    const int i0 = qb * np, n = Tq - i0 < np ? Tq - i0 : np;
                    if (ok) {
                        att_block_forward16(out, out16, lse, &a, &w, b, kh, i0, n, Tq, Tk, H, Hkv,
                                            hd, causal, window);
                        continue;
                    }
                    fell_back = 1;   /* no scratch: the row kernel, which needs none */
                    for (int h = kh * group; h < (kh + 1) * group; h++)
                        for (int i = i0; i < i0 + n; i++)
                            att_row_forward(out, lse, q, k, v, b, h, i, Tq, Tk, H, Hkv, hd, causal,
                                            window);
                }
    }
    if (fell_back && out16) ops_bf16_clobber(out, sizeof(float) * B * Tq * H * hd);
    att16_free(&a);
    return 0;
}

/* D (B, H, Tq: att_lse_at's layout) = dout . out per query row, and with d16 (not NULL) dout
 * rounded into it, in one pass over dout's rows (each read once, while in L1), instead of a
 * dot per row inside every block (strided rows from memory) and a separate packing pass: the
 * same dot, the same bits (measured on config M, one thread: the two were 4.0 ms per two
 * layers, bench/NOTES.md). */
static void att_D_pack(float *D, uint16_t *d16, const float *dout, const float *out, int B, int Tq,
                       int H, int hd) {
    const size_t N = (size_t)B * Tq, ld = (size_t)H * hd;
#pragma omp parallel if (N * ld >= 32768)
    {
        size_t lo, hi;
        ops_thread_range(N, &lo, &hi);
        for (size_t r = lo; r < hi; r++) {
            const size_t b = r / (size_t)Tq, t = r % (size_t)Tq;
            for (int h = 0; h < H; h++)
                D[(b * H + h) * Tq + t] = dot(dout + r * ld + (size_t)h * hd, out + r * ld + (size_t)h * hd, hd);
            if (d16) ops_bf16_pack_serial(d16 + r * ld, dout + r * ld, ld);
        }
    }
}

static void att_group_backward16(float *dq, float *dk, float *dv, const float *dout,
                                 const float *out, const float *lse, const att16_t *a,
                                 att16_scratch *w, int b, int kh, int Tq, int Tk, int H, int Hkv,
                                 int hd, int causal, int window, int set) {
    const int group = H / Hkv, ldk = Hkv * hd, np = att_block_positions(group);
    const float scale = 1.0f / sqrtf((float)hd);
    for (int i0 = 0; i0 < Tq; i0 += np) {
        int n, rows, klo, nk;
        size_t ko;
        if (!att_bwd_block(i0, np, group, b, kh, Tq, Tk, Hkv, hd, causal, window, &n, &rows, &klo,
                           &nk, &ko)) {
            if (set && dq)   /* rows that see no key: dq 0 (att_zero_owned's zeros) */
                for (int t = i0; t < i0 + n; t++)
                    memset(dq + (((size_t)b * Tq + t) * H + (size_t)kh * group) * hd, 0,
                           sizeof(float) * group * hd);
            continue;
        }
        att_gather_e(w->Qs16, a->q, sizeof(uint16_t), b, kh, group, i0, n, Tq, H, hd);
        att_gather_e(w->dOs16, a->dout, sizeof(uint16_t), b, kh, group, i0, n, Tq, H, hd);
        /* the forward's scores (the same product: the same bits), dP = dO V^T */
        model_gemm_bf16(GEMM_T, GEMM_N, nk, rows, hd, scale, a->k + ko, ldk, w->Qs16, hd, 0.0f,
                        w->S, Tk);
        model_gemm_bf16(GEMM_T, GEMM_N, nk, rows, hd, 1.0f, a->v + ko, ldk, w->dOs16, hd, 0.0f,
                        w->dP, Tk);
        for (int j = 0; j < group; j++)
#if ATT_ROWS16
            att_block_grad16(w->S + (size_t)j * n * Tk, w->dP + (size_t)j * n * Tk,
                             w->P16 + (size_t)j * n * Tk, w->dS16 + (size_t)j * n * Tk,
                             lse + att_lse_at(b, kh, group, j, i0, Tq, H),
                             a->D + att_lse_at(b, kh, group, j, i0, Tq, H), i0, n, klo, nk, Tq,
                             Tk, causal, window, scale);
#else
            att_block_grad(w->S + (size_t)j * n * Tk, w->dP + (size_t)j * n * Tk,
                             w->P16 + (size_t)j * n * Tk, w->dS16 + (size_t)j * n * Tk, NULL, NULL,
                             lse + att_lse_at(b, kh, group, j, i0, Tq, H),
                             a->D + att_lse_at(b, kh, group, j, i0, Tq, H), i0, n,
                             klo, nk, Tq, Tk, causal, window, scale);
#endif
        /* dV += P^T dO, dK += dS^T Q, dQ += dS K */
        model_gemm_bf16(GEMM_N, GEMM_T, hd, nk, rows, 1.0f, w->dOs16, hd, w->P16, Tk, 1.0f, dv + ko,
                        ldk);
        model_gemm_bf16(GEMM_N, GEMM_T, hd, nk, rows, 1.0f, w->Qs16, hd, w->dS16, Tk, 1.0f, dk + ko,
                        ldk);
        if (dq) {
            model_gemm_bf16(GEMM_N, GEMM_N, hd, rows, nk, 1.0f, a->k + ko, ldk, w->dS16, Tk, 0.0f,
                            w->Os, hd);
            att_scatter(dq, w->Os, set ? ATT_SET : 1, b, kh, group, i0, n, Tq, H, hd);
        }
    }
}

/* The backward on bf16 blocks; -1 (nothing written) when it does not apply or has no memory. */
static int att_backward16(float *dq, float *dk, float *dv, const float *dout, const float *out,
                          const float *lse, const float *q, const float *k, const float *v, int B,
                          int Tq, int Tk, int H, int Hkv, int hd, int causal, int window, int set,
                          const att_join_t *join) {
    const int group = H / Hkv, np = att_block_positions(group);
    const size_t rows = (size_t)group * (Tq < np ? (Tq > 0 ? Tq : 1) : np);
    if (!ops_bf16_native() || rows < ATT_QB_MIN) return -1;
    att16_t a = {0};
    a.q = att16_operand(&a, 0, q, (size_t)B * Tq * H * hd);
    a.k = att16_operand(&a, 1, k, (size_t)B * Tk * Hkv * hd);
    a.v = att16_operand(&a, 2, v, (size_t)B * Tk * Hkv * hd);
    /* dout: its shadow, else rounded here in the pass that forms D */
    const size_t nd = (size_t)B * Tq * H * hd;
    a.dout = ops_bf16_shadows() ? ops_bf16_shadow_find(dout, nd) : NULL;
    if (!a.dout) a.dout = a.own[3] = malloc(sizeof(uint16_t) * (nd ? nd : 1));
    a.D = malloc(sizeof(float) * ((size_t)B * H * Tq + 1));
    if (a.dout && a.D) att_D_pack(a.D, a.own[3], dout, out, B, Tq, H, hd);
    if (!a.q || !a.k || !a.v || !a.dout || !a.D) {
        att16_free(&a);
        return -1;
    }
#pragma omp parallel
    {
        att16_scratch w;
        const int ok = att16_scratch_alloc(&w, rows, Tk, hd, 1);
#pragma omp for collapse(2) schedule(dynamic, 1)
        for (int b = 0; b < B; b++)
            for (int kh = 0; kh < Hkv; kh++) {
                /* (with its scratch, the worker writes dq's rows as set: ATT_SET) */
                if (set) att_zero_owned(ok ? NULL : dq, dk, dv, b, kh, Tq, Tk, H, Hkv, hd);
                if (ok)
                    att_group_backward16(dq, dk, dv, dout, out, lse, &a, &w, b, kh, Tq, Tk, H, Hkv,
                                         hd, causal, window, set);
                else   /* no scratch: the key-block kernel, which needs none */
                    att_group_backward(dq, dk, dv, dout, out, lse, q, k, v, b, kh, Tq, Tk, H, Hkv,
                                       hd, causal, window);
                if (join)
                    qkv_join_unrope_group(join->dqkv, join->d16, join->r32, dq, dk, dv, join->cos_t,
                                          join->sin_t, b, kh, Tq, H, Hkv, hd, join->pos0);
            }
    }
    att16_free(&a);
    return 0;
}

void attention_forward(float *out, float *lse, const float *q, const float *k, const float *v,
                       int B, int Tq, int Tk, int H, int Hkv, int hd, int causal) {
    attention_window_forward(out, lse, q, k, v, B, Tq, Tk, H, Hkv, hd, causal, 0);
}

void attention_backward(float *dq, float *dk, float *dv, const float *dout, const float *out,
                        const float *lse, const float *q, const float *k, const float *v, int B,
                        int Tq, int Tk, int H, int Hkv, int hd, int causal) {
    attention_window_backward(dq, dk, dv, dout, out, lse, q, k, v, B, Tq, Tk, H, Hkv, hd, causal, 0);
}
