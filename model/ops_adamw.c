/* model/ops_adamw.c: AdamW's element loops and the gradient norm's sum of squares (ops.h);
 * model/adamw.c forms the scalars with PyTorch's arithmetic. */
#include "model/ops.h"
#include "model/ops_math.h"
#include <math.h>
#include <stdlib.h>

void adamw_update(float *p, float *g, float *m, float *v, size_t n, const adamw_scalars_t *s) {
    const float clip = s->clip, decay_mul = s->decay_mul, b1 = s->beta1, b2 = s->beta2;
    const float eps = s->eps, step_size = s->step_size, bc2_sqrt = s->bc2_sqrt;
#pragma omp parallel for schedule(static) if (n >= 32768)
    for (size_t j = 0; j < n; j++) ops_adamw_element(&p[j], &g[j], &m[j], &v[j], clip, decay_mul, b1, b2, eps, step_size, bc2_sqrt);
}

double sumsq(const float *x, size_t n) {
    const size_t nch = (n + OPS_SUMSQ_CHUNK - 1) / OPS_SUMSQ_CHUNK;
    double stack_part[64], *part = nch <= 64 ? stack_part : malloc(sizeof(double) * nch);
    if (!part) return NAN;
#pragma omp parallel for schedule(static) if (n >= 32768)
    for (size_t c = 0; c < nch; c++) {
        const size_t lo = c * OPS_SUMSQ_CHUNK, hi = lo + OPS_SUMSQ_CHUNK < n ? lo + OPS_SUMSQ_CHUNK : n;
        double sum = 0.0;
        for (size_t j = lo; j < hi; j++) sum += (double)x[j] * x[j];
        part[c] = sum;
    }
    double total = 0.0;
    for (size_t c = 0; c < nch; c++) total += part[c];
    if (part != stack_part) free(part);
    return total;
}

void adamw_update_multi(const adamw_tensor_t *t, int count, const adamw_scalars_t *s) {
    for (int i = 0; i < count; i++) {
        adamw_scalars_t si = *s;
        if (!t[i].decay) si.decay_mul = 1.0f;
        adamw_update(t[i].p, t[i].g, t[i].m, t[i].v, t[i].n, &si);
    }
}

double sumsq_multi(const float *const *x, const size_t *n, int count) {
    double total = 0.0;
    for (int i = 0; i < count; i++) total += sumsq(x[i], n[i]);
    return total;
}
