/* model/ops_swiglu.c: the SwiGLU gate, out = silu(gate) * up (math in ops_math.h). */
#include "model/ops.h"
#include <stddef.h>
#include "model/ops_clones.h"
#include "model/ops_math.h"

/* out may alias gate (generate.c computes in place): element i is read before it is written,
 * which `omp simd` keeps true lane by lane, so no restrict here. */
OPS_CLONES
static void swiglu_fwd_range(float *out, const float *gate, const float *up, size_t lo,
                             size_t hi) {
    OPS_SIMD
    for (size_t i = lo; i < hi; i++) out[i] = ops_silu(gate[i]) * up[i];
}

void swiglu_forward(float *out, const float *gate, const float *up, int N, int F) {
    size_t n = (size_t)N * F;
#pragma omp parallel
    {
        size_t lo, hi;
        ops_thread_range(n, &lo, &hi);
        swiglu_fwd_range(out, gate, up, lo, hi);
    }
}

OPS_CLONES
static void swiglu_bwd_range(float *restrict dgate, float *restrict dup,
                             const float *restrict dout, const float *restrict gate,
                             const float *restrict up, size_t lo, size_t hi) {
    OPS_SIMD
    for (size_t i = lo; i < hi; i++) {
        /* one sigmoid for both silu and its derivative (ops_math.h's formulas, inlined) */
        float g = gate[i], s = ops_sigmoid(g);
        dgate[i] += dout[i] * up[i] * (s * (1.0f + g * (1.0f - s)));
        dup[i] += dout[i] * (g * s);
    }
}

void swiglu_backward(float *dgate, float *dup, const float *dout, const float *gate,
                     const float *up, int N, int F) {
    size_t n = (size_t)N * F;
#pragma omp parallel
    {
        size_t lo, hi;
        ops_thread_range(n, &lo, &hi);
        swiglu_bwd_range(dgate, dup, dout, gate, up, lo, hi);
    }
}
