/* evaluator/probe.c: the linear probe of probe.h. Products through model_gemm (row-major
 * arrays read as column-major transposes, as model/gemm.h explains). */
#include "evaluator/probe.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "evaluator/lm.h"
#include "model/gemm.h"

#define PROBE_STEPS 200
#define PROBE_LR 0.05
static const double L2S[] = {1e-4, 1e-3, 1e-2, 1e-1};

typedef struct {
    int F, C;
    float *W, *b;          /* (F, C), (C) */
    float *mW, *vW, *mb, *vb;
    float *L, *G, *dW;     /* (n, C), (n, C), (F, C) */
} fit_t;

static void fit_free(fit_t *f) {
    void *p[] = {f->W, f->b, f->mW, f->vW, f->mb, f->vb, f->L, f->G, f->dW};
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++) free(p[i]);
    memset(f, 0, sizeof *f);
}
static int fit_alloc(fit_t *f, int n, int F, int C) {
    memset(f, 0, sizeof *f);
    f->F = F, f->C = C;
    const size_t w = (size_t)F * C;
    f->W = calloc(w, sizeof(float)), f->mW = calloc(w, sizeof(float)), f->vW = calloc(w, sizeof(float));
    f->dW = calloc(w, sizeof(float));
    f->b = calloc(C, sizeof(float)), f->mb = calloc(C, sizeof(float)), f->vb = calloc(C, sizeof(float));
    f->L = calloc((size_t)n * C, sizeof(float)), f->G = calloc((size_t)n * C, sizeof(float));
    if (f->W && f->mW && f->vW && f->dW && f->b && f->mb && f->vb && f->L && f->G) return 0;
    fit_free(f);
    return -1;
}

/* Logits L (n, C) of rows X (n, F) (already centred). */
static void logits(const fit_t *f, const float *X, int n) {
    model_gemm(GEMM_N, GEMM_N, f->C, n, f->F, 1.0f, f->W, f->C, X, f->F, 0.0f, f->L, f->C);
    for (int i = 0; i < n; i++)
        for (int c = 0; c < f->C; c++) f->L[(size_t)i * f->C + c] += f->b[c];
}

/* Mean CE (nats) of rows X with labels y; with G non-NULL also d CE / d logits into G. */
static double ce_rows(fit_t *f, const float *X, const int *y, int n, int grad, eval_probe_t *score) {
    logits(f, X, n);
    double ce = 0;
    long hit = 0, hit2 = 0;
    double ae = 0;
    for (int i = 0; i < n; i++) {
        const float *l = f->L + (size_t)i * f->C;
        int am = eval_argmax(l, f->C);
        ce -= eval_logprob(l, f->C, (uint32_t)y[i]);
        hit += am == y[i];
        hit2 += abs(am - y[i]) <= 2;
        ae += abs(am - y[i]);
        if (!grad) continue;
        double mx = l[am], s = 0;
        for (int c = 0; c < f->C; c++) s += exp(l[c] - mx);
        float *g = f->G + (size_t)i * f->C;
        for (int c = 0; c < f->C; c++) g[c] = (float)((exp(l[c] - mx) / s - (c == y[i])) / n);
    }
    if (score) score->acc = (double)hit / n, score->acc2 = (double)hit2 / n, score->mae = ae / n;
    return ce / n;
}

static void adam(float *p, float *m, float *v, const float *g, size_t n, int t) {
    const double b1 = 0.9, b2 = 0.999, c1 = 1 - pow(b1, t), c2 = 1 - pow(b2, t);
    for (size_t i = 0; i < n; i++) {
        m[i] = (float)(b1 * m[i] + (1 - b1) * g[i]);
        v[i] = (float)(b2 * v[i] + (1 - b2) * (double)g[i] * g[i]);
        p[i] -= (float)(PROBE_LR * (m[i] / c1) / (sqrt(v[i] / c2) + 1e-8));
    }
}

/* Fits from zero on rows X (n, F), then returns the mean CE (nats) on rows Xt (nt, F). */
static double fit_score(fit_t *f, const float *X, const int *y, int n, const float *Xt, const int *yt, int nt,
                        double l2, eval_probe_t *score) {
    const size_t w = (size_t)f->F * f->C;
    memset(f->W, 0, sizeof(float) * w), memset(f->mW, 0, sizeof(float) * w), memset(f->vW, 0, sizeof(float) * w);
    memset(f->b, 0, sizeof(float) * f->C), memset(f->mb, 0, sizeof(float) * f->C), memset(f->vb, 0, sizeof(float) * f->C);
    float db[4096];
    for (int t = 1; t <= PROBE_STEPS; t++) {
        ce_rows(f, X, y, n, 1, NULL);
        /* dW = X^T G + l2 W; db = column sums of G */
        model_gemm(GEMM_N, GEMM_T, f->C, f->F, n, 1.0f, f->G, f->C, X, f->F, 0.0f, f->dW, f->C);
        for (size_t i = 0; i < w; i++) f->dW[i] += (float)(l2 * f->W[i]);
        for (int c = 0; c < f->C; c++) {
            double s = 0;
            for (int i = 0; i < n; i++) s += f->G[(size_t)i * f->C + c];
            db[c] = (float)s;
        }
        adam(f->W, f->mW, f->vW, f->dW, w, t);
        adam(f->b, f->mb, f->vb, db, f->C, t);
    }
    return ce_rows(f, Xt, yt, nt, 0, score);
}

int eval_probe_run(const float *X0, const int *y, int n, int n_train, int F, int C, eval_probe_t *out, char *err,
                   int errlen) {
    if (n_train < 10 || n_train >= n || C < 2 || C > 4096 || F < 1) {
        snprintf(err, (size_t)errlen, "probe: %d rows, %d for training, %d classes: not enough to fit and score", n,
                 n_train, C);
        return EVAL_EARG;
    }
    float *X = malloc(sizeof(float) * (size_t)n * F);
    double *mean = calloc((size_t)F, sizeof(double));
    fit_t f;
    if (!X || !mean || fit_alloc(&f, n, F, C)) {
        free(X);
        free(mean);
        snprintf(err, (size_t)errlen, "out of memory");
        return EVAL_ENOMEM;
    }
    /* centred by the training rows' mean */
    for (int i = 0; i < n_train; i++)
        for (int j = 0; j < F; j++) mean[j] += X0[(size_t)i * F + j] / (double)n_train;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < F; j++) X[(size_t)i * F + j] = (float)(X0[(size_t)i * F + j] - mean[j]);
    const int nv = n_train / 5, nf = n_train - nv;
    double best = INFINITY;
    for (size_t k = 0; k < sizeof L2S / sizeof L2S[0]; k++) {
        const double ce = fit_score(&f, X, y, nf, X + (size_t)nf * F, y + nf, nv, L2S[k], NULL);
        if (ce < best) best = ce, out->l2 = L2S[k];
    }
    out->ce_bits = fit_score(&f, X, y, n_train, X + (size_t)n_train * F, y + n_train, n - n_train, out->l2, out) / M_LN2;
    fit_free(&f);
    free(X);
    free(mean);
    return 0;
}
