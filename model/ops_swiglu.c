/* model/ops_swiglu.c: the SwiGLU gate, out = silu(gate) * up (math in ops_math.h). */
#include "model/ops.h"
#include "model/ops_bf16.h"
#include <stddef.h>
#include "model/ops_clones.h"
#include "model/ops_exp16.h"
#include "model/ops_math.h"
#include "model/ops_pack16.h"

/* At v4-bf16 (where shadows exist) the shadow-alone loops below run as one pass on 16 lanes:
 * the exponential of ops_exp16.h, the v4 build's operations for the rest (the sigmoid's
 * division, silu's and the gradients' products, the one fused multiply-add GCC forms in
 * 1 + g (1 - s)), so the v4 build's bits; each value rounded to bf16 as it is made
 * (ops_pack16.h) instead of through a chunk buffer. A remainder shorter than 16 goes through
 * masked loads and stores (the lanes are independent). */
#if OPS_EXP16 && OPS_PACK16_NATIVE
#define SWIGLU_NATIVE 1
/* The inputs come from memory (the products' outputs, megabytes a layer): each stream is
 * prefetched into L2 this many floats (16 KB) ahead, a line per vector; the hardware prefetcher
 * alone kept too few lines in flight on the Zen 5 (S at one thread, ABBA: forward 2.65 -> 2.19 ms,
 * backward 3.71 -> 3.34; 4 KB ahead gained less, 32 KB nothing more). */
#define SWIGLU_PF 4096
static inline OPS_TARGET_BF16 __attribute__((always_inline)) __m512 swiglu_sigmoid16_(__m512 g) {
    const __m512 one = _mm512_set1_ps(1.0f);
    return _mm512_div_ps(one, _mm512_add_ps(one, ops_expf16(_mm512_sub_ps(_mm512_setzero_ps(), g))));
}
static OPS_TARGET_BF16 __attribute__((noinline)) void swiglu_fwd_only16_native_(
    uint16_t *restrict o16, const float *restrict gate, const float *restrict up, size_t lo, size_t hi) {
    size_t i = lo;
    for (; i + 16 <= hi; i += 16) {
        if (i + SWIGLU_PF < hi) {
            _mm_prefetch((const char *)(gate + i + SWIGLU_PF), _MM_HINT_T1);
            _mm_prefetch((const char *)(up + i + SWIGLU_PF), _MM_HINT_T1);
        }
        const __m512 g = _mm512_loadu_ps(gate + i);
        const __m512 h = _mm512_mul_ps(_mm512_mul_ps(g, swiglu_sigmoid16_(g)), _mm512_loadu_ps(up + i));
        _mm256_storeu_si256((__m256i *)(o16 + i), ops_pack16_vec_(h));
    }
    if (i < hi) {   /* (masked: a masked store is slow on Zen, kept out of the loop) */
        const __mmask16 m = (__mmask16)((1u << (hi - i)) - 1);
        const __m512 g = _mm512_maskz_loadu_ps(m, gate + i);
        const __m512 h = _mm512_mul_ps(_mm512_mul_ps(g, swiglu_sigmoid16_(g)), _mm512_maskz_loadu_ps(m, up + i));
        _mm256_mask_storeu_epi16(o16 + i, m, ops_pack16_vec_(h));
    }
}
/* swiglu_grad's d u (s (1 + g (1 - s))) and d (g s) on 16 lanes, rounded to bf16 */
static inline OPS_TARGET_BF16 __attribute__((always_inline)) void swiglu_grad16_(__m256i *dg16, __m256i *du16,
                                                                                __m512 d, __m512 g, __m512 u) {
    const __m512 one = _mm512_set1_ps(1.0f), s = swiglu_sigmoid16_(g);
    *dg16 = ops_pack16_vec_(
        _mm512_mul_ps(_mm512_mul_ps(d, u), _mm512_mul_ps(s, _mm512_fmadd_ps(g, _mm512_sub_ps(one, s), one))));
    *du16 = ops_pack16_vec_(_mm512_mul_ps(d, _mm512_mul_ps(g, s)));
}
static OPS_TARGET_BF16 __attribute__((noinline)) void swiglu_bwd_only16_native_(
    uint16_t *restrict dg16, uint16_t *restrict du16, const float *restrict dout,
    const float *restrict gate, const float *restrict up, size_t lo, size_t hi) {
    size_t i = lo;
    for (; i + 16 <= hi; i += 16) {
        if (i + SWIGLU_PF < hi) {
            _mm_prefetch((const char *)(dout + i + SWIGLU_PF), _MM_HINT_T1);
            _mm_prefetch((const char *)(gate + i + SWIGLU_PF), _MM_HINT_T1);
            _mm_prefetch((const char *)(up + i + SWIGLU_PF), _MM_HINT_T1);
        }
        __m256i a, b;
        swiglu_grad16_(&a, &b, _mm512_loadu_ps(dout + i), _mm512_loadu_ps(gate + i), _mm512_loadu_ps(up + i));
        _mm256_storeu_si256((__m256i *)(dg16 + i), a);
        _mm256_storeu_si256((__m256i *)(du16 + i), b);
    }
    if (i < hi) {
        const __mmask16 m = (__mmask16)((1u << (hi - i)) - 1);
        __m256i a, b;
        swiglu_grad16_(&a, &b, _mm512_maskz_loadu_ps(m, dout + i), _mm512_maskz_loadu_ps(m, gate + i),
                       _mm512_maskz_loadu_ps(m, up + i));
        _mm256_mask_storeu_epi16(dg16 + i, m, a);
        _mm256_mask_storeu_epi16(du16 + i, m, b);
    }
}
#else
#define SWIGLU_NATIVE 0
#endif

/* out may alias gate (generate.c computes in place): element i is read before it is written,
 * which `omp simd` keeps true lane by lane, so no restrict here. */
OPS_VARIANTS(void, swiglu_fwd_range, (float *out, const float *gate, const float *up, size_t lo,
                             size_t hi),
             (out, gate, up, lo, hi)) {
    OPS_SIMD
    for (size_t i = lo; i < hi; i++) out[i] = ops_silu(gate[i]) * up[i];
}
/* The loops that write bf16 (shadows, ops_bf16.h) go in chunks: a chunk's values into fp32
 * (the output, or a buffer on the stack while it is in L1), then its bf16 in one call of
 * ops_pack16_row (the CPU's conversion at v4-bf16, where shadows exist: a third of the loop's
 * instructions were the integer rounding). The values are the same expressions as before. */
#define SWIGLU_CHUNK 512
/* the length of the chunk at c of a range ending at hi */
static inline size_t swiglu_chunk(size_t c, size_t hi) {
    return hi - c < SWIGLU_CHUNK ? hi - c : SWIGLU_CHUNK;
}
/* The same writing the output's bf16 shadow o16 too. */
OPS_VARIANTS(void, swiglu_fwd_range16, (float *out, uint16_t *restrict o16, const float *gate,
                               const float *up, size_t lo, size_t hi),
             (out, o16, gate, up, lo, hi)) {
    for (size_t c = lo, m; c < hi; c += m) {
        m = swiglu_chunk(c, hi);
        OPS_SIMD
        for (size_t i = c; i < c + m; i++) out[i] = ops_silu(gate[i]) * up[i];
        ops_pack16_row(o16 + c, out + c, m);
    }
}

/* The shadow alone (the output is read by products only: ops_bf16.h). */
OPS_VARIANTS(void, swiglu_fwd_only16, (uint16_t *restrict o16, const float *restrict gate,
                                       const float *restrict up, size_t lo, size_t hi),
             (o16, gate, up, lo, hi)) {
#if SWIGLU_NATIVE
    if (cpu_isa() >= CPU_ISA_V4_BF16) {
        swiglu_fwd_only16_native_(o16, gate, up, lo, hi);
        return;
    }
#endif
    float h[SWIGLU_CHUNK];
    for (size_t c = lo, m; c < hi; c += m) {
        m = swiglu_chunk(c, hi);
        const float *restrict g = gate + c, *restrict u = up + c;
        OPS_SIMD
        for (size_t i = 0; i < m; i++) h[i] = ops_silu(g[i]) * u[i];
        ops_pack16_row(o16 + c, h, m);
    }
}

/* The output rounded in place (ops_bf16_round_out: bf16 emulated, read by products only). */
OPS_VARIANTS(void, swiglu_fwd_round, (float *restrict out, const float *restrict gate,
                                      const float *restrict up, size_t lo, size_t hi),
             (out, gate, up, lo, hi)) {
    OPS_SIMD
    for (size_t i = lo; i < hi; i++) out[i] = ops_bf16_round(ops_silu(gate[i]) * up[i]);
}

/* swiglu_forward's elements [lo, hi) through the loop its output's form asks for */
static inline void swiglu_fwd_part(float *out, uint16_t *o16, const float *gate, const float *up,
                                   size_t lo, size_t hi, int r32, int only) {
    if (r32) swiglu_fwd_round(out, gate, up, lo, hi);
    else if (only) swiglu_fwd_only16(o16, gate, up, lo, hi);
    else if (o16) swiglu_fwd_range16(out, o16, gate, up, lo, hi);
    else swiglu_fwd_range(out, gate, up, lo, hi);
}

void swiglu_forward(float *out, const float *gate, const float *up, int N, int F) {
    size_t n = (size_t)N * F;
    int only = 0;
    uint16_t *o16 = out != gate && out != up ? ops_bf16_shadow_take_out(out, n, &only)
                                             : ops_bf16_shadows() ? ops_bf16_shadow_take(out, n) : NULL;
    const int r32 = !o16 && out != gate && out != up && ops_bf16_round_out(out, n);
    if (!ops_par((double)n, 2)) {   /* a team of one (ops_par): all n in a plain call */
        swiglu_fwd_part(out, o16, gate, up, 0, n, r32, only);
    } else {
#pragma omp parallel
        {
            size_t lo, hi;
            ops_thread_range(n, &lo, &hi);
            swiglu_fwd_part(out, o16, gate, up, lo, hi, r32, only);
        }
    }
    if (only) ops_bf16_only_done(out, n);
}

/* Element i's gradients: one sigmoid for both silu and its derivative (ops_math.h's formulas,
 * inlined), for every loop below (their bits are this expression's). */
static inline __attribute__((always_inline)) void swiglu_grad(float d, float g, float u, float *dg,
                                                               float *du) {
    const float s = ops_sigmoid(g);
    *dg = d * u * (s * (1.0f + g * (1.0f - s))), *du = d * (g * s);
}
/* The loop of the accumulating and overwriting backwards: acc = 1 adds
 * into dgate/dup (the op's contract), acc = 0 overwrites them: the same bits as adding into
 * zeroes, without the zeroing pass; rnd = 1 (overwriting only) writes them rounded to bf16.
 * acc and rnd are constants at each call, so each clone below gets a branch-free loop. */
static inline __attribute__((always_inline)) void swiglu_bwd_body(
    float *restrict dgate, float *restrict dup, const float *restrict dout,
    const float *restrict gate, const float *restrict up, size_t lo, size_t hi, int acc, int rnd) {
    OPS_SIMD
    for (size_t i = lo; i < hi; i++) {
        float dg, du;
        swiglu_grad(dout[i], gate[i], up[i], &dg, &du);
        if (rnd) dg = ops_bf16_round(dg), du = ops_bf16_round(du);
        dgate[i] = acc ? dgate[i] + dg : dg;
        dup[i] = acc ? dup[i] + du : du;
    }
}
/* The overwriting one with the gradients' bf16 shadows (ops_bf16.h), a chunk at a time. */
OPS_VARIANTS(void, swiglu_bwd_set16, (float *restrict dgate, float *restrict dup,
                             uint16_t *restrict dg16, uint16_t *restrict du16,
                             const float *restrict dout, const float *restrict gate,
                             const float *restrict up, size_t lo, size_t hi),
             (dgate, dup, dg16, du16, dout, gate, up, lo, hi)) {
    for (size_t c = lo, m; c < hi; c += m) {
        m = swiglu_chunk(c, hi);
        swiglu_bwd_body(dgate, dup, dout, gate, up, c, c + m, 0, 0);
        ops_pack16_row(dg16 + c, dgate + c, m);
        ops_pack16_row(du16 + c, dup + c, m);
    }
}
/* The gradients' shadows alone (read by products only: ops_bf16.h). */
OPS_VARIANTS(void, swiglu_bwd_only16, (uint16_t *restrict dg16, uint16_t *restrict du16,
                                       const float *restrict dout, const float *restrict gate,
                                       const float *restrict up, size_t lo, size_t hi),
             (dg16, du16, dout, gate, up, lo, hi)) {
#if SWIGLU_NATIVE
    if (cpu_isa() >= CPU_ISA_V4_BF16) {
        swiglu_bwd_only16_native_(dg16, du16, dout, gate, up, lo, hi);
        return;
    }
#endif
    float dg[SWIGLU_CHUNK], du[SWIGLU_CHUNK];
    for (size_t c = lo, m; c < hi; c += m) {
        m = swiglu_chunk(c, hi);
        const float *restrict d = dout + c, *restrict g = gate + c, *restrict u = up + c;
        OPS_SIMD
        for (size_t i = 0; i < m; i++) swiglu_grad(d[i], g[i], u[i], &dg[i], &du[i]);
        ops_pack16_row(dg16 + c, dg, m);
        ops_pack16_row(du16 + c, du, m);
    }
}
OPS_VARIANTS(void, swiglu_bwd_add, (float *dgate, float *dup, const float *dout, const float *gate,
                           const float *up, size_t lo, size_t hi),
             (dgate, dup, dout, gate, up, lo, hi)) {
    swiglu_bwd_body(dgate, dup, dout, gate, up, lo, hi, 1, 0);
}
OPS_VARIANTS(void, swiglu_bwd_set, (float *dgate, float *dup, const float *dout, const float *gate,
                           const float *up, size_t lo, size_t hi),
             (dgate, dup, dout, gate, up, lo, hi)) {
    swiglu_bwd_body(dgate, dup, dout, gate, up, lo, hi, 0, 0);
}
/* The overwriting one with the gradients rounded in place (ops_bf16_round_out: bf16 emulated,
 * read by products only). */
OPS_VARIANTS(void, swiglu_bwd_round, (float *dgate, float *dup, const float *dout, const float *gate,
                             const float *up, size_t lo, size_t hi),
             (dgate, dup, dout, gate, up, lo, hi)) {
    swiglu_bwd_body(dgate, dup, dout, gate, up, lo, hi, 0, 1);
}

static void swiglu_bwd(float *dgate, float *dup, const float *dout, const float *gate,
                       const float *up, int N, int F, int acc) {
    size_t n = (size_t)N * F;
    uint16_t *dg16 = NULL, *du16 = NULL;
    int og = 0, ou = 0;
    if (!acc && (dg16 = ops_bf16_shadow_take_out(dgate, n, &og)) &&
        !(du16 = ops_bf16_shadow_take_out(dup, n, &ou)))
        ops_bf16_clobber(dgate, sizeof(float) * n), dg16 = NULL;   /* both or neither */
    const int only = dg16 && og && ou;   /* (both read by products only, else both in fp32) */
    /* emulated: both rounded in place, or neither */
    int r32 = !acc && !dg16 && ops_bf16_round_out(dgate, n);
    if (r32 && !ops_bf16_round_out(dup, n)) ops_bf16_clobber(dgate, sizeof(float) * n), r32 = 0;
#pragma omp parallel
    {
        size_t lo, hi;
        ops_thread_range(n, &lo, &hi);
        if (acc) swiglu_bwd_add(dgate, dup, dout, gate, up, lo, hi);
        else if (r32) swiglu_bwd_round(dgate, dup, dout, gate, up, lo, hi);
        else if (only) swiglu_bwd_only16(dg16, du16, dout, gate, up, lo, hi);
        else if (dg16) swiglu_bwd_set16(dgate, dup, dg16, du16, dout, gate, up, lo, hi);
        else swiglu_bwd_set(dgate, dup, dout, gate, up, lo, hi);
    }
    if (only) ops_bf16_only_done(dgate, n), ops_bf16_only_done(dup, n);
}

void swiglu_backward(float *dgate, float *dup, const float *dout, const float *gate,
                     const float *up, int N, int F) {
    swiglu_bwd(dgate, dup, dout, gate, up, N, F, 1);
}
void swiglu_backward_set(float *dgate, float *dup, const float *dout, const float *gate,
                         const float *up, int N, int F) {
    swiglu_bwd(dgate, dup, dout, gate, up, N, F, 0);
}
