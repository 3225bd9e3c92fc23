/* model/ops_exp16.h: ops_expf (ops_math.h) on 16 lanes of AVX-512, for the v4 clones' hottest
 * rows (CPU only, not for nvcc).
 *
 * Why: GCC's vectorisation of ops_expf spends 8 of its ~33 instructions on the two clamps (four
 * compares, four blends: it evaluates the polynomial on x and patches the clamped lanes with
 * constants afterwards), and the cross-entropy row's exponentials were its largest cost
 * (12.2 cycles a vector, measured on the Zen 5 with everything in L1). Here the clamp above is
 * one min and the one below a zeroing mask on the last product: ops_expf's lanes below -87.33654
 * are 0 whatever xc was, so they need no clamp. Every other operation is the one GCC emits for
 * the v4 build of ops_expf, in its order and with its fused multiply-adds (n by one FMA, r by
 * an FNMADD then an FMA, the polynomial by FMAs, p r r + r by a multiply and an FMA), so each lane
 * has the v4 build's bits: checked against it for random rows, +-0, +-inf, NaN and arguments on
 * both sides of each clamp (tests/test_kernels.c). A NaN stays the same NaN: min(hi, x) returns
 * x when x is NaN (the second operand), as the scalar's comparisons let it through.
 *
 * The rows below keep the v4 build's association of their sums: one 16-lane accumulator taken
 * in element order, then its lanes 0..15 added in turn to a zero (GCC's `omp simd` reduction
 * epilogue); likewise the max: lane-wise z > acc ? z : acc, then m > lane ? m : lane from
 * -inf. They need v % 16 == 0 (GCC folds a remainder into lane 0 first): callers fall back to
 * the generic rows otherwise. */
#ifndef MODEL_OPS_EXP16_H
#define MODEL_OPS_EXP16_H
#include <math.h>
#include "model/ops_clones.h"

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && !defined(__CUDACC__)
#include <immintrin.h>
#define OPS_EXP16 1

static inline OPS_TARGET_V4 __attribute__((always_inline)) __m512 ops_expf16(__m512 x) {
    const __mmask16 below = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.33654f), _CMP_LT_OQ);
    const __m512 xc = _mm512_min_ps(_mm512_set1_ps(88.0f), x);
    const __m512 n = _mm512_roundscale_ps(
        _mm512_fmadd_ps(xc, _mm512_set1_ps(1.44269504088896341f), _mm512_set1_ps(0.5f)),
        _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
    const __m512 r = _mm512_fmadd_ps(n, _mm512_set1_ps(2.12194440e-4f),
                                     _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), xc));
    __m512 p = _mm512_fmadd_ps(r, _mm512_set1_ps(1.9875691500e-4f), _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_add_ps(_mm512_fmadd_ps(_mm512_mul_ps(p, r), r, r), _mm512_set1_ps(1.0f));
    const __m512i e2 = _mm512_slli_epi32(
        _mm512_add_epi32(_mm512_cvttps_epi32(n), _mm512_set1_epi32(127)), 23);
    return _mm512_maskz_mul_ps((__mmask16)~below, p, _mm512_castsi512_ps(e2));
}

/* the lanes of a sum accumulator added in order to a zero, and of a max accumulator to -inf */
static inline OPS_TARGET_V4 __attribute__((always_inline)) float ops_sum16_lanes_(__m512 acc) {
    float l[16], s = 0.0f;
    _mm512_storeu_ps(l, acc);
    for (int j = 0; j < 16; j++) s += l[j];
    return s;
}
static inline OPS_TARGET_V4 __attribute__((always_inline)) float ops_max16_lanes_(__m512 acc) {
    float l[16];
    _mm512_storeu_ps(l, acc);
    __m128 m = _mm_set_ss(-INFINITY);
    for (int j = 0; j < 16; j++) m = _mm_max_ss(m, _mm_set_ss(l[j]));
    return _mm_cvtss_f32(m);
}

/* ops_exp_row's v4 bits (e[i] = exp(z[i] - mx), their sum returned; v % 16 == 0), and when zn
 * is not NULL the max of the next row zn (ops_max_row's v4 bits) into *mxn in the same pass:
 * its loads come from memory (the logits go out of the caches between their product and this
 * row) while the exponentials keep the core busy. zp, when not NULL, is the row after zn,
 * prefetched into L2 a line per vector: the loads of zn then stall no more (they held 62% of
 * this pass's samples on the Zen 5; the cross-entropy forward went from 3.9 to 2.8 ms a step at
 * S, the hardware prefetcher alone keeping too few lines in flight). */
static OPS_TARGET_V4 __attribute__((noinline, unused)) float ops_exp_row16(float *e, const float *z,
                                                                           float mx, int v,
                                                                           const float *zn,
                                                                           float *mxn,
                                                                           const float *zp) {
    const __m512 m = _mm512_set1_ps(mx);
    __m512 acc = _mm512_setzero_ps(), macc = _mm512_set1_ps(-INFINITY);
    if (zn) {
        for (int i = 0; i < v; i += 16) {
            const __m512 x = ops_expf16(_mm512_sub_ps(_mm512_loadu_ps(z + i), m));
            _mm512_storeu_ps(e + i, x);
            acc = _mm512_add_ps(acc, x);
            macc = _mm512_max_ps(_mm512_loadu_ps(zn + i), macc);
            if (zp) _mm_prefetch((const char *)(zp + i), _MM_HINT_T1);
        }
        *mxn = ops_max16_lanes_(macc);
    } else {
        for (int i = 0; i < v; i += 16) {
            const __m512 x = ops_expf16(_mm512_sub_ps(_mm512_loadu_ps(z + i), m));
            _mm512_storeu_ps(e + i, x);
            acc = _mm512_add_ps(acc, x);
        }
    }
    return ops_sum16_lanes_(acc);
}
#else
#define OPS_EXP16 0
#endif
#endif
