/* model/ops_swiglu.c: the SwiGLU gate, out = silu(gate) * up (math in ops_math.h). */
#include "model/ops.h"
#include <stddef.h>
#include "model/ops_math.h"

void swiglu_forward(float *out, const float *gate, const float *up, int N, int F) {
    size_t n = (size_t)N * F;
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) out[i] = ops_silu(gate[i]) * up[i];
}

void swiglu_backward(float *dgate, float *dup, const float *dout, const float *gate,
                     const float *up, int N, int F) {
    size_t n = (size_t)N * F;
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) {
        /* one sigmoid for both silu and its derivative (ops_math.h's formulas, inlined) */
        float g = gate[i], s = ops_sigmoid(g);
        dgate[i] += dout[i] * up[i] * (s * (1.0f + g * (1.0f - s)));
        dup[i] += dout[i] * (g * s);
    }
}
