/* model/ops_latent.c: the LTM's Gaussian latents (ops.h; per-element math in ops_math.h).
 * Every element is one expression of its own inputs, and each sequence's KL is summed in a
 * fixed order, so the thread count changes no bit. */
#include "model/ops.h"
#include "common/rng.h"
#include "model/ops_math.h"

void latent_normal(float *x, int L, int B, int n, uint64_t key, uint64_t row0, float mean,
                   float std) {
#pragma omp parallel for collapse(2) schedule(static) if ((size_t)L * B * n >= 32768)
    for (int l = 0; l < L; l++)
        for (int b = 0; b < B; b++) {
            const uint64_t k = rng_counter_key(key, row0 + (uint64_t)b);
            float *row = x + ((size_t)l * B + b) * n;
            for (int i = 0; i < n; i++)
                row[i] = mean + std * ops_counter_normal(k, (uint64_t)l * n + (uint64_t)i);
        }
}

void latent_sample(float *z, const float *mu, const float *ls, const float *eps, size_t n) {
#pragma omp parallel for schedule(static) if (n >= 32768)
    for (size_t i = 0; i < n; i++) z[i] = mu[i] + expf(ls[i]) * eps[i];
}

void latent_kl_rows(float *kl, const float *mu, const float *ls, int L, int B, int n) {
    for (int b = 0; b < B; b++) {
        double s = 0.0;
        for (int l = 0; l < L; l++) {
            const size_t o = ((size_t)l * B + b) * n;
            for (int i = 0; i < n; i++) s += ops_latent_kl(mu[o + i], ls[o + i]);
        }
        kl[b] = (float)s;
    }
}

void latent_backward(float *dmu, float *dls, const float *dz, const float *mu, const float *ls,
                     const float *eps, float kl_scale, size_t n) {
#pragma omp parallel for schedule(static) if (n >= 32768)
    for (size_t i = 0; i < n; i++)
        ops_latent_grad(&dmu[i], &dls[i], dz[i], mu[i], ls[i], eps[i], kl_scale);
}
