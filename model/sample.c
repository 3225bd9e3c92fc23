/* model/sample.c: temperature, top-k and nucleus sampling (see sample.h). */
#include "model/sample.h"
#include "model/ops_clones.h"
#include "model/ops_math.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

struct sample {
    int V;
    float *p;        /* (V) unnormalised probabilities exp((z - max) / temperature) */
    uint32_t *idx;   /* (V) ids by decreasing probability (only when a filter is on) */
};

int sample_create(sample_t **ps, int V, char *err, size_t errlen) {
    *ps = NULL;
    if (V <= 0) { snprintf(err, errlen, "sample_create: vocabulary size %d", V); return -1; }
    sample_t *s = calloc(1, sizeof(*s));
    if (s) { s->p = malloc(sizeof(float) * V); s->idx = malloc(sizeof(uint32_t) * V); }
    if (!s || !s->p || !s->idx) {
        if (s) { free(s->p); free(s->idx); free(s); }
        snprintf(err, errlen, "sample_create: out of memory for V=%d", V);
        return -1;
    }
    s->V = V;
    *ps = s;
    return 0;
}

void sample_destroy(sample_t **ps) {
    if (!ps || !*ps) return;
    free((*ps)->p);
    free((*ps)->idx);
    free(*ps);
    *ps = NULL;
}

int sample_opts_check(const sample_opts_t *o, char *err, size_t errlen) {
    if (!(o->temperature >= 0.0f) || isinf(o->temperature)) {
        snprintf(err, errlen, "temperature %g must be finite and >= 0", o->temperature);
        return -1;
    }
    if (!(o->top_p > 0.0f && o->top_p <= 1.0f)) {
        snprintf(err, errlen, "top-p %g must be in (0, 1]", o->top_p);
        return -1;
    }
    return 0;
}

uint32_t sample_argmax(const float *z, int V) {
    int best = 0;
    for (int i = 1; i < V; i++)
        if (z[i] > z[best]) best = i;
    return (uint32_t)best;
}

/* Decreasing probability, then increasing id: a total order, so the kept set is unique. */
static int by_prob_desc(const void *a, const void *b, void *ctx) {
    const float *p = ctx;
    uint32_t i = *(const uint32_t *)a, j = *(const uint32_t *)b;
    if (p[i] != p[j]) return p[i] > p[j] ? -1 : 1;
    return i < j ? -1 : (i > j);
}

/* p[i] = exp((z[i] - max z) * inv_t) with ops_math.h's float exp, and their sum, each loop
 * vectorised over the vocabulary (the exp within a few ulp of libm's): libm's double exp, 4096
 * a token, and the scalar max and sum were a fifth of a 32-row serving step (bench/NOTES.md).
 * GCC if-converts the compares, and so vectorises, only when float compares may be assumed not
 * to trap (nothing here reads the FP exception flags). Built per instruction-set level like the
 * ops (ops_clones.h), so the bits are those of the level cpu_isa() chose, as the logits' are. */
#pragma GCC push_options
#pragma GCC optimize("no-trapping-math")
OPS_VARIANTS(double, exps, (float *p, const float *z, int V, float inv_t), (p, z, V, inv_t)) {
    float mx = z[0];
    OPS_SIMD_MAX(mx)
    for (int i = 1; i < V; i++) mx = z[i] > mx ? z[i] : mx;
    OPS_SIMD
    for (int i = 0; i < V; i++) p[i] = ops_expf((z[i] - mx) * inv_t);
    double total = 0.0;
    OPS_SIMD_SUM(total)
    for (int i = 0; i < V; i++) total += p[i];
    return total;
}
#pragma GCC pop_options

/* Fills s->p; returns the kept count n and the kept mass in *mass. With a filter on, the kept
 * ids are s->idx[0..n); without, every id is kept (n == V) and s->idx is not used. */
static int distribution(sample_t *s, const float *z, const sample_opts_t *o, double *mass,
                        int *filtered) {
    const int V = s->V;
    /* a temperature below ~3e-39 has no float reciprocal: the largest float keeps (z - max) *
     * inv_t at 0 for the maximum (not 0 * inf) and -inf for the rest, so the pick is greedy */
    const float r = 1.0f / o->temperature, inv_t = isinf(r) ? FLT_MAX : r;
    const double total = exps(s->p, z, V, inv_t);
    int k = (o->top_k > 0 && o->top_k < V) ? o->top_k : V;
    *filtered = k < V || o->top_p < 1.0f;
    if (!*filtered) { *mass = total; return V; }
    for (int i = 0; i < V; i++) s->idx[i] = (uint32_t)i;
    qsort_r(s->idx, V, sizeof(uint32_t), by_prob_desc, s->p);
    double kept = 0.0;
    for (int i = 0; i < k; i++) kept += s->p[s->idx[i]];
    if (o->top_p < 1.0f) {
        /* smallest prefix whose share of the top-k mass reaches top_p */
        double goal = (double)o->top_p * kept, cum = 0.0;
        int n = 0;
        while (n < k) {
            cum += s->p[s->idx[n++]];
            if (cum >= goal) break;
        }
        k = n;
        kept = cum;
    }
    *mass = kept;
    return k;
}

int sample_probs(sample_t *s, const float *z, const sample_opts_t *o, float *probs) {
    const int V = s->V;
    if (o->temperature <= 0.0f) {
        for (int i = 0; i < V; i++) probs[i] = 0.0f;
        probs[sample_argmax(z, V)] = 1.0f;
        return 1;
    }
    double mass;
    int filtered, n = distribution(s, z, o, &mass, &filtered);
    if (!filtered) {
        for (int i = 0; i < V; i++) probs[i] = (float)(s->p[i] / mass);
        return n;
    }
    for (int i = 0; i < V; i++) probs[i] = 0.0f;
    for (int i = 0; i < n; i++) probs[s->idx[i]] = (float)(s->p[s->idx[i]] / mass);
    return n;
}

uint32_t sample_pick(sample_t *s, const float *z, const sample_opts_t *o, rng_t *r) {
    if (o->temperature <= 0.0f) return sample_argmax(z, s->V);
    double mass;
    int filtered, n = distribution(s, z, o, &mass, &filtered);
    double u = rng_f64(r) * mass, cum = 0.0;
    for (int i = 0; i < n; i++) {
        uint32_t id = filtered ? s->idx[i] : (uint32_t)i;
        cum += s->p[id];
        if (u < cum) return id;
    }
    /* u past the last partial sum (rounding; and the total is summed in vector order, the
     * running sum in index order, so they may differ in the last bits): the last kept id with
     * non-zero probability */
    for (int i = n - 1; i >= 0; i--) {
        uint32_t id = filtered ? s->idx[i] : (uint32_t)i;
        if (s->p[id] > 0.0) return id;
    }
    return sample_argmax(z, s->V);
}
