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
        float g = gate[i];
        dgate[i] += dout[i] * up[i] * ops_silu_grad(g);
        dup[i] += dout[i] * ops_silu(g);
    }
}
