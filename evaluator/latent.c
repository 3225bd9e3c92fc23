/* evaluator/latent.c: prior and posterior draws of Z, log q, KL (see latent.h). */
#include "evaluator/latent.h"

#include <math.h>
#include <stdlib.h>

#include "model/free.h"

/* log sigmoid(x) = -softplus(-x), written so neither branch overflows */
static double log_sigmoid(double x) { return x >= 0 ? -log1p(exp(-x)) : x - log1p(exp(x)); }

void eval_z_prior(rng_t *r, uint32_t *z, size_t n, int H) {
    for (size_t i = 0; i < n; i++) z[i] = (uint32_t)rng_below(r, (uint64_t)1 << H);
}

double eval_z_logq(const float *l, uint32_t d, int H) {
    double s = 0;
    for (int h = 0; h < H; h++) s += (d >> h) & 1 ? log_sigmoid(l[h]) : log_sigmoid(-(double)l[h]);
    return s;
}

void eval_z_posterior(rng_t *r, const float *l, uint32_t *z, double *logq, size_t n, int H) {
    for (size_t i = 0; i < n; i++) {
        const float *li = l + i * (size_t)H;
        uint32_t d = 0;
        for (int h = 0; h < H; h++) {
            double p = 1.0 / (1.0 + exp(-(double)li[h]));
            if (rng_f64(r) < p) d |= 1u << h;
        }
        z[i] = d;
        if (logq) logq[i] = eval_z_logq(li, d, H);
    }
}

double eval_z_kl(const float *l, int H) {
    /* the model's own formula (model/free.h, eq. 4), so evaluation and training agree */
    return (double)binmap_kl(l, H);
}

double eval_logmeanexp(const double *a, int n) {
    double mx = a[0];
    for (int i = 1; i < n; i++)
        if (a[i] > mx) mx = a[i];
    if (isinf(mx)) return mx;
    double s = 0;
    for (int i = 0; i < n; i++) s += exp(a[i] - mx);
    return mx + log(s / n);
}

/* The mean of x (n) and the variance of that mean (0 for n = 1). */
static void mean_var(const double *x, int n, double *mean, double *var_of_mean) {
    double s = 0, q = 0;
    for (int i = 0; i < n; i++) s += x[i];
    const double mu = s / n;
    for (int i = 0; i < n; i++) q += (x[i] - mu) * (x[i] - mu);
    *mean = mu;
    *var_of_mean = n > 1 ? q / (n - 1) / n : 0;
}

int eval_ltm_accumulate(eval_ltm_acc_t *acc, const double *ce, const double *kl, const double *logw, int S,
                        int B, int Kw) {
    if (Kw < 1 || S < 2 * Kw) return -1;
    const int G = S / Kw;
    double *col = malloc(sizeof(double) * S), *iw = malloc(sizeof(double) * G);
    if (!col || !iw) {
        free(col);
        free(iw);
        return -1;
    }
    for (int b = 0; b < B; b++) {
        double m, var;
        for (int s = 0; s < S; s++) col[s] = ce[(size_t)s * B + b];
        mean_var(col, S, &m, &var);
        acc->ce += m;
        acc->kl += kl[b];
        acc->var_nelbo += var;
        for (int g = 0; g < G; g++) {
            for (int k = 0; k < Kw; k++) col[k] = logw[(size_t)(g * Kw + k) * B + b];
            iw[g] = -eval_logmeanexp(col, Kw);
        }
        mean_var(iw, G, &m, &var);
        acc->iw += m;
        acc->var_iw += var;
    }
    free(col);
    free(iw);
    return 0;
}
