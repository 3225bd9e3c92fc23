/* model/ops_decode.c: the ops of a decode step over rows that belong to different sequences
 * (ops.h): products whose rows do not depend on each other, RoPE at per-row positions,
 * single-query attention over each row's own slot of a KV cache, scattered row writes. */
#include "model/ops.h"
#include "model/gemm_impl.h"
#include "model/ops_bf16.h"
#include "model/ops_clones.h"
#include "model/ops_math.h"
#include <math.h>
#include <omp.h>
#include <string.h>

/* 1 when linear_rows' tasks are worth a parallel region (ops_par): a product of at least 2^20
 * multiply-adds. Otherwise the tasks run in a plain loop (~21 futex wakes a token at config S
 * with a region, strace). */
static int rows_parallel(int N, int in, int out) {
    return ops_par((double)N * in * out, 1 << 20);
}

/* Output columns per parallel task of linear_rows (a task reads its 64 weight rows once per
 * pair of input rows). */
#define ROWS_COLS_PER_TASK 48

/* Eight lanes as one value: GCC's vector extension keeps each accumulator in a register
 * (one AVX register, or two SSE ones at x86-64-v2; the lanes compute the same either way).
 * The helpers are always inlined, so the ABI note GCC gives for passing such a value from
 * code built without AVX concerns no real call. */
#pragma GCC diagnostic ignored "-Wpsabi"
typedef float v8f __attribute__((vector_size(32)));
static inline __attribute__((always_inline)) v8f ld8(const float *p) {
    v8f v;
    memcpy(&v, p, sizeof v);
    return v;
}
/* Lanes of a and b added in pairs, as vhaddps does: (a0+a1, a2+a3, b0+b1, b2+b3, a4+a5, a6+a7,
 * b4+b5, b6+b7). */
typedef int v8i __attribute__((vector_size(32)));
static inline __attribute__((always_inline)) v8f hadd8(v8f a, v8f b) {
    const v8i even = {0, 2, 8, 10, 4, 6, 12, 14}, odd = {1, 3, 9, 11, 5, 7, 13, 15};
    return __builtin_shuffle(a, b, even) + __builtin_shuffle(a, b, odd);
}

/* The lanes of four accumulators combined at once, each as ops_dot8 combines its own:
 * hadd8(hadd8(a0, a1), hadd8(a2, a3)) holds (l0+l1)+(l2+l3) of a0..a3 in lanes 0..3 and
 * (l4+l5)+(l6+l7) in lanes 4..7, so y[k] = lane k + lane k+4 is ops_dot8's sum of a_k's lanes,
 * bit for bit, for a tenth of the instructions of four finish8; then each one's tail. */
static inline __attribute__((always_inline)) void finish4(float *y, v8f a0, v8f a1, v8f a2, v8f a3,
                                                         const float *w, size_t ldw, const float *x,
                                                         int i, int in) {
    const v8f h = hadd8(hadd8(a0, a1), hadd8(a2, a3));
    for (int k = 0; k < 4; k++) {
        float s = h[k] + h[k + 4]; /* (a lane of a3 that is a copy of a0 costs nothing) */
        for (int t = i; t < in; t++) s += w[k * ldw + t] * x[t];
        y[k] = s;
    }
}

/* The tiles: 3 weight rows x 3 input rows (9 independent accumulators, and the 6 vectors they
 * read, fill 15 of AVX2's 16 registers: each weight vector is loaded once per 3 input rows and
 * each input vector once per 3 weight rows), and for the 1 or 2 input rows left over, 4 weight
 * rows x 1 or 2 (4 or 8 accumulators, so that a single row, a batch of one, still keeps 4
 * chains of FMAs in flight). Every dot product keeps ops_dot8's 8 lanes (lane j: elements j,
 * j + 8, ... in order) and combines them the same way (finish4), so every element equals
 * ops_dot8(w_o, x_n) bit for bit whichever tile computed it. */
static inline __attribute__((always_inline)) void tile3x3(float *y, const float *w, const float *x,
                                                         int n, int o, int in, int in8, int out) {
    const float *w0 = w + (size_t)o * in, *w1 = w0 + in, *w2 = w1 + in;
    const float *x0 = x + (size_t)n * in, *x1 = x0 + in, *x2 = x1 + in;
    v8f a0 = {0}, a1 = {0}, a2 = {0}, b0 = {0}, b1 = {0}, b2 = {0}, c0 = {0}, c1 = {0}, c2 = {0};
    for (int i = 0; i < in8; i += 8) {
        const v8f k0 = ld8(w0 + i), k1 = ld8(w1 + i), k2 = ld8(w2 + i);
        const v8f u0 = ld8(x0 + i), u1 = ld8(x1 + i), u2 = ld8(x2 + i);
        a0 += k0 * u0; a1 += k1 * u0; a2 += k2 * u0;
        b0 += k0 * u1; b1 += k1 * u1; b2 += k2 * u1;
        c0 += k0 * u2; c1 += k1 * u2; c2 += k2 * u2;
    }
    float t[4];
    finish4(t, a0, a1, a2, a0, w0, in, x0, in8, in);
    memcpy(y + (size_t)n * out + o, t, 3 * sizeof(float));
    finish4(t, b0, b1, b2, b0, w0, in, x1, in8, in);
    memcpy(y + (size_t)(n + 1) * out + o, t, 3 * sizeof(float));
    finish4(t, c0, c1, c2, c0, w0, in, x2, in8, in);
    memcpy(y + (size_t)(n + 2) * out + o, t, 3 * sizeof(float));
}

static inline __attribute__((always_inline)) void tile4xR(float *y, const float *w, const float *x,
                                                         int n, int R, int o, int in, int in8, int out) {
    const float *w0 = w + (size_t)o * in, *w1 = w0 + in, *w2 = w1 + in, *w3 = w2 + in;
    const float *x0 = x + (size_t)n * in, *x1 = x0 + (R > 1 ? in : 0);
    v8f a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0}, b0 = {0}, b1 = {0}, b2 = {0}, b3 = {0};
    if (R > 1) {
        for (int i = 0; i < in8; i += 8) {
            const v8f u0 = ld8(x0 + i), u1 = ld8(x1 + i);
            const v8f c0 = ld8(w0 + i), c1 = ld8(w1 + i), c2 = ld8(w2 + i), c3 = ld8(w3 + i);
            a0 += c0 * u0; a1 += c1 * u0; a2 += c2 * u0; a3 += c3 * u0;
            b0 += c0 * u1; b1 += c1 * u1; b2 += c2 * u1; b3 += c3 * u1;
        }
        finish4(y + (size_t)(n + 1) * out + o, b0, b1, b2, b3, w0, in, x1, in8, in);
    } else {
        for (int i = 0; i < in8; i += 8) {
            const v8f u0 = ld8(x0 + i);
            a0 += ld8(w0 + i) * u0; a1 += ld8(w1 + i) * u0;
            a2 += ld8(w2 + i) * u0; a3 += ld8(w3 + i) * u0;
        }
    }
    finish4(y + (size_t)n * out + o, a0, a1, a2, a3, w0, in, x0, in8, in);
}

/* Output columns o0..o1 of rows n0..n1, in blocks of 12 weight rows (four 3x3 tiles or three
 * 4xR tiles each) read from cache by every row of the batch; then blocks of 4 (4xR tiles). */
OPS_VARIANTS(void, rows_tile, (float *y, const float *w, const float *x, int n0, int n1, int o0,
                               int o1, int in, int out),
             (y, w, x, n0, n1, o0, o1, in, out)) {
    const int in8 = in / 8 * 8, n3 = n0 + (n1 - n0) / 3 * 3;
    int o = o0;
    for (; o + 12 <= o1; o += 12) {
        for (int n = n0; n < n3; n += 3)
            for (int k = 0; k < 12; k += 3) tile3x3(y, w, x, n, o + k, in, in8, out);
        if (n3 + 2 == n1)
            for (int k = 0; k < 12; k += 4) tile4xR(y, w, x, n3, 2, o + k, in, in8, out);
        else if (n3 + 1 == n1)
            for (int k = 0; k < 12; k += 4) tile4xR(y, w, x, n3, 1, o + k, in, in8, out);
    }
    for (; o + 4 <= o1; o += 4) {
        int n = n0;
        for (; n + 2 <= n1; n += 2) tile4xR(y, w, x, n, 2, o, in, in8, out);
        if (n < n1) tile4xR(y, w, x, n, 1, o, in, in8, out);
    }
    for (; o < o1; o++)
        for (int n = n0; n < n1; n++) y[(size_t)n * out + o] = ops_dot8(w + (size_t)o * in, x + (size_t)n * in, in);
}

#ifdef OPS_TARGET_V4
/* x86-64-v4: 16-lane FMAs, each holding one weight row's 8 lanes against two input rows (the
 * weight chunk in both halves, the rows' chunks side by side), so every dot product keeps
 * ops_dot8's 8 lanes and order and is finished by finish4 as above: the same bits as the
 * 8-lane tiles at this level (test_decode_ops), at twice the width. 4 weight rows x P pairs of
 * input rows (P <= 4: 16 accumulators, 4 weight and 1 row vectors of AVX-512's 32; 8 rows a
 * tile, so a batch of 32 is four full tiles, where tiles of 6 left a pair that used a third of
 * the FMA width: config S's products 5-7% faster at 16 and 32 rows, 16% at 8, one thread). */
typedef float v16f __attribute__((vector_size(64)));
static inline __attribute__((always_inline)) v16f pair16(const float *a, const float *b) {
    const v8f lo = ld8(a), hi = ld8(b);
    return __builtin_shufflevector(lo, hi, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
}
static inline __attribute__((always_inline)) v8f half8(v16f v, int hi) {
    return hi ? __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15)
              : __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7);
}
static inline __attribute__((always_inline)) void tile4xP(float *y, const float *w, const float *x,
                                                         int n, int P, int o, int in, int in8, int out) {
    const float *w0 = w + (size_t)o * in, *w1 = w0 + in, *w2 = w1 + in, *w3 = w2 + in;
    /* rows past the P pairs are not read, nor pointed at (they may be past the array) */
    const float *x0 = x + (size_t)n * in, *x1 = x0 + in, *x2 = P > 1 ? x1 + in : x1;
    const float *x3 = P > 1 ? x2 + in : x1, *x4 = P > 2 ? x3 + in : x1, *x5 = P > 2 ? x4 + in : x1;
    const float *x6 = P > 3 ? x5 + in : x1, *x7 = P > 3 ? x6 + in : x1;
    /* named accumulators, not an array: GCC kept an array's in memory */
    v16f a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0}, b0 = {0}, b1 = {0}, b2 = {0}, b3 = {0};
    v16f c0 = {0}, c1 = {0}, c2 = {0}, c3 = {0}, d0 = {0}, d1 = {0}, d2 = {0}, d3 = {0};
    for (int i = 0; i < in8; i += 8) {
        const v16f k0 = pair16(w0 + i, w0 + i), k1 = pair16(w1 + i, w1 + i);
        const v16f k2 = pair16(w2 + i, w2 + i), k3 = pair16(w3 + i, w3 + i);
        const v16f u = pair16(x0 + i, x1 + i);
        a0 += k0 * u; a1 += k1 * u; a2 += k2 * u; a3 += k3 * u;
        if (P > 1) {
            const v16f v = pair16(x2 + i, x3 + i);
            b0 += k0 * v; b1 += k1 * v; b2 += k2 * v; b3 += k3 * v;
        }
        if (P > 2) {
            const v16f t = pair16(x4 + i, x5 + i);
            c0 += k0 * t; c1 += k1 * t; c2 += k2 * t; c3 += k3 * t;
        }
        if (P > 3) {
            const v16f s = pair16(x6 + i, x7 + i);
            d0 += k0 * s; d1 += k1 * s; d2 += k2 * s; d3 += k3 * s;
        }
    }
#define FINISH_PAIR(r, q0, q1, q2, q3, xa, xb)                                                    \
    do {                                                                                           \
        finish4(y + (size_t)(r) * out + o, half8(q0, 0), half8(q1, 0), half8(q2, 0), half8(q3, 0), \
                w0, in, xa, in8, in);                                                              \
        finish4(y + (size_t)((r) + 1) * out + o, half8(q0, 1), half8(q1, 1), half8(q2, 1),         \
                half8(q3, 1), w0, in, xb, in8, in);                                                \
    } while (0)
    FINISH_PAIR(n, a0, a1, a2, a3, x0, x1);
    if (P > 1) FINISH_PAIR(n + 2, b0, b1, b2, b3, x2, x3);
    if (P > 2) FINISH_PAIR(n + 4, c0, c1, c2, c3, x4, x5);
    if (P > 3) FINISH_PAIR(n + 6, d0, d1, d2, d3, x6, x7);
#undef FINISH_PAIR
}
static OPS_TARGET_V4 void rows_tile_wide(float *y, const float *w, const float *x, int n0, int n1,
                                         int o0, int o1, int in, int out) {
    const int in8 = in / 8 * 8, n8 = n0 + (n1 - n0) / 8 * 8, left = (n1 - n8) / 2;
    int o = o0;
    for (; o + 4 <= o1; o += 4) { /* blocks of 4 weight rows (12 KB at d = 768: in L1) */
        for (int n = n0; n < n8; n += 8) tile4xP(y, w, x, n, 4, o, in, in8, out);
        if (left == 3) tile4xP(y, w, x, n8, 3, o, in, in8, out);
        else if (left == 2) tile4xP(y, w, x, n8, 2, o, in, in8, out);
        else if (left == 1) tile4xP(y, w, x, n8, 1, o, in, in8, out);
        if ((n1 - n8) % 2) tile4xR(y, w, x, n1 - 1, 1, o, in, in8, out);
    }
    for (; o < o1; o++)
        for (int n = n0; n < n1; n++) y[(size_t)n * out + o] = ops_dot8(w + (size_t)o * in, x + (size_t)n * in, in);
}
#endif

#ifdef OPS_TARGET_V4
/* ---- bf16 rows (precision bf16 where the CPU has AVX512-BF16: ops_bf16.h) -----------------
 * y = x W^T with x's rows rounded to bf16 and W's shadow (its elements rounded once, kept while
 * the weight is unchanged: a generation reads bf16 weights, half the bytes of fp32 ones). Each
 * element is one dot product of 32-element chunks by vdpbf16ps (16 fp32 lanes, lane j adding
 * elements 2j and 2j+1 of each chunk; the last chunk zero-filled by a masked load), the lanes
 * then summed by _mm512_reduce_add_ps: a fixed sequence per (weight row, input row) whichever
 * tile computes it, so a row's result does not depend on the batch or the thread count (the
 * instruction treats bf16 subnormals as zero, as oneDNN's bf16 products do). Tiles of 4 weight
 * rows x up to 4 input rows (16 accumulators): each weight chunk is loaded once per 4 rows. */
#include <immintrin.h>
#define OPS_TARGET_BF16                                                                          \
    __attribute__((target("avx,avx2,bmi,bmi2,f16c,fma,lzcnt,movbe,xsave,avx512f,avx512bw,"      \
                          "avx512cd,avx512dq,avx512vl,avx512bf16")))

static inline __attribute__((always_inline)) OPS_TARGET_BF16 __m512bh ld_bh(const uint16_t *p, __mmask32 m) {
    return (__m512bh)_mm512_maskz_loadu_epi16(m, p);
}
static inline __attribute__((always_inline)) OPS_TARGET_BF16 __m512 dp(__m512 acc, __m512bh a, __m512bh b) {
    return _mm512_dpbf16_ps(acc, a, b);
}

static inline __attribute__((always_inline)) OPS_TARGET_BF16 void tile16(float *y, const uint16_t *w,
                                                        const uint16_t *x, int n, int R, int o,
                                                        int in, int out) {
    const uint16_t *w0 = w + (size_t)o * in, *w1 = w0 + in, *w2 = w1 + in, *w3 = w2 + in;
    /* rows past R are not read (they point at row n) */
    const uint16_t *x0 = x + (size_t)n * in, *x1 = R > 1 ? x0 + in : x0;
    const uint16_t *x2 = R > 2 ? x1 + in : x0, *x3 = R > 3 ? x2 + in : x0;
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0;
    __m512 c0 = a0, c1 = a0, c2 = a0, c3 = a0, d0 = a0, d1 = a0, d2 = a0, d3 = a0;
    for (int i = 0; i < in; i += 32) {
        const __mmask32 m = in - i >= 32 ? 0xffffffffu : (1u << (in - i)) - 1u;
        const __m512bh k0 = ld_bh(w0 + i, m), k1 = ld_bh(w1 + i, m), k2 = ld_bh(w2 + i, m),
                       k3 = ld_bh(w3 + i, m);
        const __m512bh u = ld_bh(x0 + i, m);
        a0 = dp(a0, k0, u); a1 = dp(a1, k1, u); a2 = dp(a2, k2, u); a3 = dp(a3, k3, u);
        if (R > 1) {
            const __m512bh v = ld_bh(x1 + i, m);
            b0 = dp(b0, k0, v); b1 = dp(b1, k1, v); b2 = dp(b2, k2, v); b3 = dp(b3, k3, v);
        }
        if (R > 2) {
            const __m512bh t = ld_bh(x2 + i, m);
            c0 = dp(c0, k0, t); c1 = dp(c1, k1, t); c2 = dp(c2, k2, t); c3 = dp(c3, k3, t);
        }
        if (R > 3) {
            const __m512bh q = ld_bh(x3 + i, m);
            d0 = dp(d0, k0, q); d1 = dp(d1, k1, q); d2 = dp(d2, k2, q); d3 = dp(d3, k3, q);
        }
    }
#define PUT16(r, q0, q1, q2, q3)                                                                 \
    do {                                                                                         \
        float *yr = y + (size_t)(r) * out + o;                                                   \
        yr[0] = _mm512_reduce_add_ps(q0); yr[1] = _mm512_reduce_add_ps(q1);                      \
        yr[2] = _mm512_reduce_add_ps(q2); yr[3] = _mm512_reduce_add_ps(q3);                      \
    } while (0)
    PUT16(n, a0, a1, a2, a3);
    if (R > 1) PUT16(n + 1, b0, b1, b2, b3);
    if (R > 2) PUT16(n + 2, c0, c1, c2, c3);
    if (R > 3) PUT16(n + 3, d0, d1, d2, d3);
#undef PUT16
}

/* One element alone: the same chunks, lanes and sum as the tiles. */
static inline __attribute__((always_inline)) OPS_TARGET_BF16 float dot16(const uint16_t *w, const uint16_t *x, int in) {
    __m512 a = _mm512_setzero_ps();
    for (int i = 0; i < in; i += 32) {
        const __mmask32 m = in - i >= 32 ? 0xffffffffu : (1u << (in - i)) - 1u;
        a = dp(a, ld_bh(w + i, m), ld_bh(x + i, m));
    }
    return _mm512_reduce_add_ps(a);
}

static OPS_TARGET_BF16 void rows_tile16(float *y, const uint16_t *w, const uint16_t *x, int N,
                                        int o0, int o1, int in, int out) {
    const int n4 = N / 4 * 4;
    int o = o0;
    for (; o + 4 <= o1; o += 4) { /* 4 weight rows: 4 x 2 KB at d = 1024, in L1 */
        for (int n = 0; n < n4; n += 4) tile16(y, w, x, n, 4, o, in, out);
        if (N - n4 == 3) tile16(y, w, x, n4, 3, o, in, out);
        else if (N - n4 == 2) tile16(y, w, x, n4, 2, o, in, out);
        else if (N - n4 == 1) tile16(y, w, x, n4, 1, o, in, out);
    }
    for (; o < o1; o++)
        for (int n = 0; n < N; n++) y[(size_t)n * out + o] = dot16(w + (size_t)o * in, x + (size_t)n * in, in);
}

/* Task t of linear_rows_bf16: output columns [t*cols, (t+1)*cols). */
static inline void rows_task16(float *y, const uint16_t *w16, const uint16_t *x16, int N, int in, int out,
                               int cols, int t) {
    const int o0 = t * cols, o1 = o0 + cols < out ? o0 + cols : out;
    rows_tile16(y, w16, x16, N, o0, o1, in, out);
}

/* The bf16 row products; -1 (nothing written) when they do not apply here. */
static int linear_rows_bf16(float *y, const float *x, const float *w, int N, int in, int out) {
    if (!ops_bf16_native() || cpu_isa() < CPU_ISA_V4_BF16) return -1;
    const uint16_t *w16 = ops_bf16_shadow_weight(w, (size_t)out * in);
    uint16_t *x16 = w16 ? gemm_tls_buffer(GEMM_TLS_OPS_X, sizeof(uint16_t) * (size_t)N * in) : NULL;
    if (!x16) return -1;
    ops_bf16_pack(x16, x, (size_t)N * in);
    const int cols = 16, tasks = (out + cols - 1) / cols;
    if (rows_parallel(N, in, out)) {
#pragma omp parallel for schedule(static)
        for (int t = 0; t < tasks; t++) rows_task16(y, w16, x16, N, in, out, cols, t);
    } else {
        for (int t = 0; t < tasks; t++) rows_task16(y, w16, x16, N, in, out, cols, t);
    }
    return 0;
}
#endif

/* Task t of linear_rows: output columns [t*cols, (t+1)*cols). */
static void rows_task(float *y, const float *x, const float *w, int N, int in, int out, int cols,
                      int wide, int t) {
    const int o0 = t * cols, o1 = o0 + cols < out ? o0 + cols : out;
#ifdef OPS_TARGET_V4
    if (wide) {
        rows_tile_wide(y, w, x, 0, N, o0, o1, in, out);
        return;
    }
#endif
    (void)wide;
    rows_tile(y, w, x, 0, N, o0, o1, in, out);
}

void linear_rows(float *y, const float *x, const float *w, int N, int in, int out) {
#ifdef OPS_TARGET_V4
    if (!linear_rows_bf16(y, x, w, N, in, out)) return;
    const int wide = N >= 2 && cpu_isa() >= CPU_ISA_V4;
#else
    const int wide = 0;
#endif
    /* the wide tiles go 4 weight rows at a time, so their tasks can be small: 16 columns split
     * config S's 512- and 256-wide products evenly between two threads (48 left one thread
     * 6 tasks against 5, and 3 against 3 of unequal width) */
    const int cols = wide ? 16 : ROWS_COLS_PER_TASK, tasks = (out + cols - 1) / cols;
    if (rows_parallel(N, in, out)) {
#pragma omp parallel for schedule(static)
        for (int t = 0; t < tasks; t++) rows_task(y, x, w, N, in, out, cols, wide, t);
    } else {
        for (int t = 0; t < tasks; t++) rows_task(y, x, w, N, in, out, cols, wide, t);
    }
}

void qkv_split_rope_rows(float *q, float *k, float *v, const float *qkv, const float *cos_t,
                         const float *sin_t, int N, int H, int Hkv, int hd, const int *pos) {
    const int Dq = H * hd, Dkv = Hkv * hd, ld = Dq + 2 * Dkv, h2 = hd / 2;
    for (int n = 0; n < N; n++) {
        const float *row = qkv + (size_t)n * ld;
        const float *cs = cos_t + (size_t)pos[n] * h2, *sn = sin_t + (size_t)pos[n] * h2;
        if (q)
            for (int h = 0; h < H; h++)
                ops_rope_rotate(q + (size_t)n * Dq + h * hd, row + h * hd, cs, sn, hd, 1.0f);
        if (k)
            for (int h = 0; h < Hkv; h++)
                ops_rope_rotate(k + (size_t)n * Dkv + h * hd, row + Dq + h * hd, cs, sn, hd, 1.0f);
        if (v) memcpy(v + (size_t)n * Dkv, row + Dq + Dkv, sizeof(float) * Dkv);
    }
}

void rope_rows(float *out, const float *x, const float *cos_t, const float *sin_t, int N, int H,
               int hd, const int *pos) {
    const int h2 = hd / 2;
    for (int n = 0; n < N; n++)
        for (int h = 0; h < H; h++) {
            const size_t off = ((size_t)n * H + h) * hd;
            ops_rope_rotate(out + off, x + off, cos_t + (size_t)pos[n] * h2, sin_t + (size_t)pos[n] * h2, hd, 1.0f);
        }
}

/* One query row of one head over len keys of its cache rows (ops_math.h ops_attention_row, the
 * GPU kernel's body too), online softmax. For hd % 8 == 0 the output row
 * is kept in registers (8 lanes a vector, up to 256 dimensions): element by element the same
 * operations as a loop over o[d] in memory, which the compiler left scalar (o may alias the
 * cache), so the bits are the same and a decode step of 32 rows spends a third of the time it
 * did here. */
#define ATT_MAX_VEC 32
OPS_VARIANTS(void, rows_att_head, (float *o, const float *q, const float *kc, const float *vc,
                                   int len, int ldk, int hd),
             (o, q, kc, vc, len, ldk, hd)) {
    if (hd % 8 == 0 && hd / 8 <= ATT_MAX_VEC) {
        const float scale = 1.0f / sqrtf((float)hd);
        float m = -INFINITY, l = 0.0f;
        const int nv = hd / 8;
        v8f acc[ATT_MAX_VEC];
        for (int i = 0; i < nv; i++) acc[i] = (v8f){0};
        for (int j = 0; j < len; j++) {
            const float *kj = kc + (size_t)j * ldk, *vj = vc + (size_t)j * ldk;
            const float s = ops_dot8(q, kj, hd) * scale;
            const float f = ops_online_softmax_rescale(&m, &l, s);
            if (f != 1.0f)
                for (int i = 0; i < nv; i++) acc[i] *= f;
            const float p = ops_expf(s - m);
            l += p;
            for (int i = 0; i < nv; i++) acc[i] += p * ld8(vj + 8 * i);
        }
        const float inv = l > 0.0f ? 1.0f / l : 0.0f;
        for (int i = 0; i < nv; i++) {
            const v8f r = acc[i] * inv;
            memcpy(o + 8 * i, &r, sizeof r);
        }
        return;
    }
    ops_attention_row(o, q, kc, vc, len, (size_t)ldk, hd);
}

#ifdef OPS_TARGET_V4
/* x86-64-v4: two query heads that read the same key/value head (grouped-query attention with
 * an even H / Hkv: heads h and h + 1) in one pass over the keys. Each key and value row is
 * loaded once for both, and the two heads' chains of dependent operations (dot, online
 * softmax, exp) interleave, where one head alone waits on each. Each head's operations are
 * rows_att_head's vector path, in its order: the same bits (test_decode_ops). At hd = 64 both
 * heads' outputs take 16 of AVX-512's 32 registers. One thread, 32 rows of 16-80 keys, 4 heads
 * over 2: 8.9 against 13.4 ns a key and head at hd 64, 17.2 against 23.0 at hd 128 (Zen 5). */
#define ATT_PAIR_MAX_VEC 16
/* ops_dot8(q, k, 8 * nv) as one 8-lane accumulator: lane j sums elements j, j + 8, ... with
 * the same (contracted) operations in the same order, then the same pairwise combination */
static inline __attribute__((always_inline)) float dot_v8(const float *q, const float *k, int nv) {
    v8f d = {0};
#pragma GCC unroll 16
    for (int i = 0; i < nv; i++) d += ld8(q + 8 * i) * ld8(k + 8 * i);
    return ((d[0] + d[1]) + (d[2] + d[3])) + ((d[4] + d[5]) + (d[6] + d[7]));
}
/* The body for nv = hd / 8 vectors a head; the callers pass constants, so that the loops over
 * i unroll and both heads' outputs stay in registers (with a variable nv GCC kept them on the
 * stack: a load and a store around every FMA) */
static inline __attribute__((always_inline)) void att_pair_body(float *o, const float *q,
                                                               const float *kc, const float *vc,
                                                               int len, int ldk, int nv) {
    const int hd = 8 * nv;
    const float scale = 1.0f / sqrtf((float)hd);
    const float *qa = q, *qb = q + hd;
    float ma = -INFINITY, la = 0.0f, mb = -INFINITY, lb = 0.0f;
    v8f A[ATT_PAIR_MAX_VEC], Bv[ATT_PAIR_MAX_VEC];
#pragma GCC unroll 16
    for (int i = 0; i < nv; i++) A[i] = Bv[i] = (v8f){0};
    for (int j = 0; j < len; j++) {
        const float *kj = kc + (size_t)j * ldk, *vj = vc + (size_t)j * ldk;
        const float sa = dot_v8(qa, kj, nv) * scale, sb = dot_v8(qb, kj, nv) * scale;
        const float fa = ops_online_softmax_rescale(&ma, &la, sa);
        const float fb = ops_online_softmax_rescale(&mb, &lb, sb);
        if (fa != 1.0f) {
#pragma GCC unroll 16
            for (int i = 0; i < nv; i++) A[i] *= fa;
        }
        if (fb != 1.0f) {
#pragma GCC unroll 16
            for (int i = 0; i < nv; i++) Bv[i] *= fb;
        }
        const float pa = ops_expf(sa - ma), pb = ops_expf(sb - mb);
        la += pa;
        lb += pb;
#pragma GCC unroll 16
        for (int i = 0; i < nv; i++) {
            const v8f v = ld8(vj + 8 * i);
            A[i] += pa * v;
            Bv[i] += pb * v;
        }
    }
    const float inva = la > 0.0f ? 1.0f / la : 0.0f, invb = lb > 0.0f ? 1.0f / lb : 0.0f;
#pragma GCC unroll 16
    for (int i = 0; i < nv; i++) {
        const v8f ra = A[i] * inva, rb = Bv[i] * invb;
        memcpy(o + 8 * i, &ra, sizeof ra);
        memcpy(o + hd + 8 * i, &rb, sizeof rb);
    }
}
static OPS_TARGET_V4 void rows_att_pair(float *o, const float *q, const float *kc, const float *vc,
                                        int len, int ldk, int hd) {
    switch (hd / 8) {
    case 8: att_pair_body(o, q, kc, vc, len, ldk, 8); break;    /* hd 64 */
    case 16: att_pair_body(o, q, kc, vc, len, ldk, 16); break;  /* hd 128 */
    default: att_pair_body(o, q, kc, vc, len, ldk, hd / 8);
    }
}
#endif

/* attention_rows' task (n, h): query head h of row n (two heads h, h + 1 where pair; the
 * caller's h steps by 2 then) */
static inline __attribute__((always_inline)) void att_task(float *out, const float *q,
                                                           const float *kc, const float *vc,
                                                           const int *base, const int *len, int n,
                                                           int h, int H, int rep, int ldk, int hd,
                                                           int pair) {
    const size_t off = ((size_t)n * H + h) * hd, kv = (size_t)base[n] * ldk + (size_t)(h / rep) * hd;
#ifdef OPS_TARGET_V4
    if (pair) {
        rows_att_pair(out + off, q + off, kc + kv, vc + kv, len[n], ldk, hd);
        return;
    }
#endif
    (void)pair;
    rows_att_head(out + off, q + off, kc + kv, vc + kv, len[n], ldk, hd);
}

void attention_rows(float *out, const float *q, const float *kc, const float *vc, const int *base,
                    const int *len, int N, int H, int Hkv, int hd) {
    const int rep = H / Hkv, ldk = Hkv * hd;
    /* parallel when the rows' keys are worth it (~0.1 ms of one core: 32 rows of config S at
     * ~50 positions, not 8); the caller's thread count decides the rest (set_parallel); below
     * that, or at one thread, no region at all (ops_par) */
    double keys = 0.0;
    for (int n = 0; n < N; n++) keys += len[n];
    int pair = 0;
#ifdef OPS_TARGET_V4
    pair = rep % 2 == 0 && hd % 8 == 0 && hd / 8 <= ATT_PAIR_MAX_VEC && cpu_isa() >= CPU_ISA_V4;
#endif
    const int step = pair ? 2 : 1, Hs = H / step;
    if (ops_par(keys * H * hd, 1 << 18)) {
#pragma omp parallel for collapse(2) schedule(static)
        for (int n = 0; n < N; n++)
            for (int hs = 0; hs < Hs; hs++)
                att_task(out, q, kc, vc, base, len, n, hs * step, H, rep, ldk, hd, pair);
        return;
    }
    for (int n = 0; n < N; n++)
        for (int hs = 0; hs < Hs; hs++)
            att_task(out, q, kc, vc, base, len, n, hs * step, H, rep, ldk, hd, pair);
}

void scatter_rows(float *dst, int ld_dst, const int *dst_row, const float *src, int ld_src, int N,
                  int D) {
    for (int n = 0; n < N; n++)
        memcpy(dst + (size_t)dst_row[n] * ld_dst, src + (size_t)n * ld_src, sizeof(float) * D);
}
