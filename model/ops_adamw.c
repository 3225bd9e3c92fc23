/* model/ops_adamw.c: AdamW's element loops and the gradient norm's sum of squares (ops.h);
 * model/adamw.c forms the scalars with PyTorch's arithmetic. */
#include "model/ops.h"
#include "model/gemm_impl.h"
#include "model/ops_bf16.h"
#include "model/ops_clones.h"
#include "model/ops_math.h"
#include <math.h>
#include <stdlib.h>

/* The element loop, vectorised and built per level (ops_clones.h). Its bits are the scalar
 * loop's at every level: the file is compiled without FMA contraction (the Makefile), and
 * IEEE square root and division are exact in any lane. A clip or decay of 1 is passed as the
 * constant, so each of the four loops has no branch (the scalar loop ran at ~10 cycles an
 * element, the optimizer's step was 7% of an M step at bf16). */
/* p16 (a weight's bf16 shadow, ops_bf16.h, or NULL), p32 (its fp32 shadow at an emulated
 * level, or NULL): the new p rounded into it in the same loop, the refresh of the shadow once
 * per optimizer step. */
#define ADAMW_FOR(clip_, decay_, store_)                                                       \
    do {                                                                                     \
        OPS_SIMD                                                                             \
        for (size_t j = lo; j < hi; j++) {                                                   \
            ops_adamw_element(&p[j], &g[j], &m[j], &v[j], clip_, decay_, b1, b2, eps,        \
                              step_size, bc2_sqrt);                                          \
            store_;                                                                          \
        }                                                                                    \
    } while (0)
#define ADAMW_LOOP(clip_, decay_)                                                              \
    do {                                                                                     \
        if (p16) ADAMW_FOR(clip_, decay_, p16[j] = ops_bf16_from_float(p[j]));               \
        else if (p32) ADAMW_FOR(clip_, decay_, p32[j] = ops_bf16_round(p[j]));               \
        else ADAMW_FOR(clip_, decay_, (void)0);                                              \
    } while (0)
OPS_VARIANTS(void, adamw_range, (float *restrict p, uint16_t *restrict p16, float *restrict p32,
                                 float *restrict g, float *restrict m, float *restrict v, size_t lo,
                                 size_t hi, const adamw_scalars_t *s),
             (p, p16, p32, g, m, v, lo, hi, s)) {
    const float clip = s->clip, decay_mul = s->decay_mul, b1 = s->beta1, b2 = s->beta2;
    const float eps = s->eps, step_size = s->step_size, bc2_sqrt = s->bc2_sqrt;
    if (clip != 1.0f && decay_mul != 1.0f) ADAMW_LOOP(clip, decay_mul);
    else if (clip != 1.0f) ADAMW_LOOP(clip, 1.0f);
    else if (decay_mul != 1.0f) ADAMW_LOOP(1.0f, decay_mul);
    else ADAMW_LOOP(1.0f, 1.0f);
}

void ops_bf16_adamw_update(float *p, void *sh, int f32, float *g, float *m, float *v, size_t n,
                           const adamw_scalars_t *s) {
    uint16_t *p16 = f32 ? NULL : sh;
    float *p32 = f32 ? sh : NULL;
    if (n < 32768) {   /* (no parallel pragma for small tensors: ops_bf16.c says why) */
        adamw_range(p, p16, p32, g, m, v, 0, n, s);
        return;
    }
#pragma omp parallel
    {
        size_t lo, hi;
        ops_thread_range(n, &lo, &hi);
        adamw_range(p, p16, p32, g, m, v, lo, hi, s);
    }
}

/* One region for the list: a region per tensor made the second thread wait at each of a
 * step's ~40 joins, and run none of the small tensors (norm weights) it could have. */
void ops_bf16_adamw_update_multi(const ops_adamw_job_t *job, int count) {
    size_t total = 0;
    for (int i = 0; i < count; i++) total += job[i].n;
    if (total < 32768 || omp_in_parallel()) {   /* (as ops_bf16_adamw_update) */
        for (int i = 0; i < count; i++)
            ops_bf16_adamw_update(job[i].p, job[i].sh, job[i].f32, job[i].g, job[i].m, job[i].v,
                                  job[i].n, job[i].s);
        return;
    }
#pragma omp parallel
    {
        size_t lo, hi, at = 0;   /* the thread's share of the list's elements; at: job i's first */
        ops_thread_range(total, &lo, &hi);
        for (int i = 0; i < count && at < hi; at += job[i].n, i++) {
            const size_t a = lo > at ? lo - at : 0, b = hi - at < job[i].n ? hi - at : job[i].n;
            if (a >= b) continue;
            const int f32 = job[i].f32;
            adamw_range(job[i].p, f32 ? NULL : job[i].sh, f32 ? job[i].sh : NULL, job[i].g,
                        job[i].m, job[i].v, a, b, job[i].s);
        }
    }
}

void adamw_update(float *p, float *g, float *m, float *v, size_t n, const adamw_scalars_t *s) {
    ops_bf16_adamw_update(p, NULL, 0, g, m, v, n, s);
}

/* chunks [c0, c1) of x (n elements) into part[c0 ..] (ops_math.h's order, built per level) */
OPS_VARIANTS(void, sumsq_chunks, (double *part, const float *x, size_t n, size_t c0, size_t c1),
             (part, x, n, c0, c1)) {
    for (size_t c = c0; c < c1; c++) {
        const size_t lo = c * OPS_SUMSQ_CHUNK, hi = lo + OPS_SUMSQ_CHUNK < n ? lo + OPS_SUMSQ_CHUNK : n;
        part[c] = ops_sumsq_chunk(x, lo, hi);
    }
}

/* The list's chunks in one parallel region (a region per tensor: ~40 joins a step, the small
 * tensors on one thread), each thread a contiguous share of them; each tensor's chunks are then
 * added in order into its own sum, and the sums in list order: sumsq's bits, tensor by tensor.
 * The chunk sums go to the calling thread's scratch (gemm_impl.h), not a malloc per tensor. */
double sumsq_multi(const float *const *x, const size_t *n, int count) {
    size_t chunks = 0, total = 0;
    for (int i = 0; i < count; i++) {
        chunks += (n[i] + OPS_SUMSQ_CHUNK - 1) / OPS_SUMSQ_CHUNK;
        total += n[i];
    }
    double *part = gemm_tls_buffer(GEMM_TLS_OPS_ROW, sizeof(double) * (chunks ? chunks : 1));
    if (!part) return NAN;
    if (total < 32768 || omp_in_parallel()) {   /* (no parallel pragma: ops_bf16.c says why) */
        size_t at = 0;
        for (int i = 0; i < count; i++) {
            const size_t nch = (n[i] + OPS_SUMSQ_CHUNK - 1) / OPS_SUMSQ_CHUNK;
            sumsq_chunks(part + at, x[i], n[i], 0, nch);
            at += nch;
        }
    } else {
#pragma omp parallel
        {
            size_t lo, hi, at = 0;   /* the thread's chunks; at: tensor i's first */
            ops_thread_range(chunks, &lo, &hi);
            for (int i = 0; i < count && at < hi; i++) {
                const size_t nch = (n[i] + OPS_SUMSQ_CHUNK - 1) / OPS_SUMSQ_CHUNK;
                const size_t a = lo > at ? lo - at : 0, b = hi - at < nch ? hi - at : nch;
                if (a < b) sumsq_chunks(part + at, x[i], n[i], a, b);
                at += nch;
            }
        }
    }
    double total_sq = 0.0;
    size_t c = 0;
    for (int i = 0; i < count; i++) {
        const size_t nch = (n[i] + OPS_SUMSQ_CHUNK - 1) / OPS_SUMSQ_CHUNK;
        double t = 0.0;
        for (size_t j = 0; j < nch; j++) t += part[c + j];
        total_sq += t;
        c += nch;
    }
    return total_sq;
}

double sumsq(const float *x, size_t n) { return sumsq_multi(&x, &n, 1); }
