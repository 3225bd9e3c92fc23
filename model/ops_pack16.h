/* model/ops_pack16.h: a row of fp32 to bf16 patterns with the CPU's own conversion, for the
 * element-wise ops that write bf16 shadows (CPU only, not for nvcc).
 *
 * ops_pack16_row(y, x, n) gives ops_bf16_from_float's bits (ops_math.h). Shadows exist only
 * where bf16 products run natively (ops_bf16.h: x86-64-v4-bf16 and up), and there the row
 * goes through VCVTNEPS2BF16 (AVX512-BF16: round to nearest even, a NaN quieted with its sign
 * and top payload bits: the integer formula's bits), one instruction for 16 elements where the
 * integer formula took nine. The instruction reads a subnormal as zero, so a vector holding
 * one (fpclass, rare: a well-predicted branch) takes the integer formula's bits for those
 * lanes. The same bits as ops_bf16_from_float for all 2^32 patterns (checked once on Zen 5,
 * 2026-12-07; tests/test_bf16_shadow.c checks every subnormal and a spread of the rest). Below
 * v4-bf16 (never with shadows, but callable) it is the inlined integer loop. */
#ifndef MODEL_OPS_PACK16_H
#define MODEL_OPS_PACK16_H
#include <stddef.h>
#include <stdint.h>
#include "model/cpu_isa.h"
#include "model/ops_bf16.h"
#include "model/ops_math.h"

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && !defined(__CUDACC__)
#include <immintrin.h>
#define OPS_PACK16_NATIVE 1
#define OPS_TARGET_BF16                                                                       \
    __attribute__((target("avx,avx2,bmi,bmi2,f16c,fma,lzcnt,movbe,xsave,avx512f,avx512bw,"  \
                          "avx512cd,avx512dq,avx512vl,avx512bf16")))

/* 16 lanes of x to bf16 */
static inline OPS_TARGET_BF16 __attribute__((always_inline)) __m256i ops_pack16_vec_(__m512 v) {
    __m256i h = (__m256i)_mm512_cvtneps_pbh(v);
    const __mmask16 sub = _mm512_fpclass_ps_mask(v, 0x20);   /* subnormal lanes */
    if (__builtin_expect(sub != 0, 0)) {
        /* ops_bf16_from_float's rounding (no NaN among subnormals) for those lanes */
        const __m512i u = _mm512_castps_si512(v);
        const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
        const __m512i r = _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb);
        h = _mm256_mask_blend_epi16(sub, h, _mm512_cvtepi32_epi16(_mm512_srli_epi32(r, 16)));
    }
    return h;
}

static OPS_TARGET_BF16 __attribute__((noinline, unused)) void ops_pack16_native_(uint16_t *restrict y,
                                                                         const float *restrict x,
                                                                         size_t n) {
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        const __m256i a = ops_pack16_vec_(_mm512_loadu_ps(x + i));
        const __m256i b = ops_pack16_vec_(_mm512_loadu_ps(x + i + 16));
        _mm256_storeu_si256((__m256i *)(y + i), a);
        _mm256_storeu_si256((__m256i *)(y + i + 16), b);
    }
    for (; i < n; i += 16) {
        const __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
        _mm256_mask_storeu_epi16(y + i, m, ops_pack16_vec_(_mm512_maskz_loadu_ps(m, x + i)));
    }
}
#else
#define OPS_PACK16_NATIVE 0
#endif

static inline __attribute__((always_inline)) void ops_pack16_row(uint16_t *restrict y,
                                                                 const float *restrict x, size_t n) {
#if OPS_PACK16_NATIVE
    if (cpu_isa() >= CPU_ISA_V4_BF16) {
        ops_pack16_native_(y, x, n);
        return;
    }
#endif
    ops_bf16_pack_row(y, x, n);
}
#endif
