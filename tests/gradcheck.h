/* tests/gradcheck.h: the finite-difference harness of the gradient checks
 * (tests/test_gradcheck.c, tests/test_mixer_gradcheck.c).
 *
 * Method: each op's output is reduced to a scalar by a fixed random projection,
 * loss = sum(w * out) (summed in double), so one backward with dout = w gives the gradient of
 * every input. For a sample of input entries the central difference (L(x+e) - L(x-e)) / 2e is
 * compared with the analytic gradient.
 *
 * The ops run in float, so e cannot be tiny: e = 1e-2 on inputs of size O(1). Truncation error
 * is O(e^2 * f''') ~ 1e-4 relative; float rounding of the outputs (~6e-8 relative each, random
 * sign) moves L by ~6e-8 * sqrt(#outputs) * |w*out|, i.e. ~1e-5 / 2e in the derivative. We
 * therefore compare the sampled gradient VECTORS by their relative error
 * ||num - ana|| / max(||num||, ||ana||) with tolerance 1e-2: two orders above the expected
 * noise, and a wrong backward (a sign, a missing term, a wrong index) gives errors of O(1). */
#ifndef TESTS_GRADCHECK_H
#define TESTS_GRADCHECK_H
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/rng.h"
#include "tests/check.h"

#ifndef EPS
#define EPS 1e-2f
#endif
#define TOL 1e-2
#define SAMPLES 40

static rng_t R;

static float *rnd(size_t n, float scale) {
    float *p = malloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++) p[i] = scale * rng_normal(&R);
    return p;
}
static float *zeros(size_t n) { return calloc(n, sizeof(float)); }

/* One checked input: its values and the analytic gradient the backward wrote. */
typedef struct { const char *name; float *x; float *dx; size_t n; } gc_in_t;

typedef struct gc_case gc_case_t;
struct gc_case {
    void (*forward)(gc_case_t *);   /* out <- f(inputs) */
    void (*backward)(gc_case_t *);  /* inputs' dx += df/dx . dout (dout = w) */
    float *out, *w;
    size_t n_out;
    gc_in_t in[8];
    int n_in;
    void *ctx;
};

static double gc_loss(gc_case_t *c) {
    c->forward(c);
    double s = 0.0;
    for (size_t i = 0; i < c->n_out; i++) s += (double)c->w[i] * c->out[i];
    return s;
}

/* Runs the check for every input of c; returns the worst relative error seen. */
static double gc_run(const char *what, gc_case_t *c) {
    for (int i = 0; i < c->n_in; i++) memset(c->in[i].dx, 0, sizeof(float) * c->in[i].n);
    c->forward(c);
    c->backward(c);
    double worst = 0.0;
    for (int i = 0; i < c->n_in; i++) {
        gc_in_t *in = &c->in[i];
        double dn = 0, nn = 0, na = 0;
        int ns = in->n < SAMPLES ? (int)in->n : SAMPLES;
        for (int s = 0; s < ns; s++) {
            size_t j = in->n <= SAMPLES ? (size_t)s : rng_below(&R, in->n);
            float x0 = in->x[j];
            in->x[j] = x0 + EPS;
            double lp = gc_loss(c);
            in->x[j] = x0 - EPS;
            double lm = gc_loss(c);
            in->x[j] = x0;
            double num = (lp - lm) / (2.0 * EPS), ana = in->dx[j];
            dn += (num - ana) * (num - ana);
            nn += num * num;
            na += ana * ana;
        }
        double denom = sqrt(nn > na ? nn : na);
        double rel = denom > 0 ? sqrt(dn) / denom : sqrt(dn);
        CHECK(rel < TOL, "%s: d/d%s relative error %.3g (|num| %.3g, |ana| %.3g)", what, in->name,
              rel, sqrt(nn), sqrt(na));
        /* A gradient that is identically zero would pass trivially: require signal. */
        CHECK(denom > 1e-6, "%s: d/d%s is zero, the check is vacuous", what, in->name);
        if (rel > worst) worst = rel;
    }
    return worst;
}
#endif
