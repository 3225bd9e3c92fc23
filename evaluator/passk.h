/* evaluator/passk.h: the pass@k estimator of Chen et al. (2021), "Evaluating Large Language
 * Models Trained on Code", section 2.1.
 *
 * With n samples of a problem of which c pass, the unbiased estimate of the probability that
 * at least one of k samples passes is 1 - C(n-c, k) / C(n, k). The binomials overflow doubles
 * long before n = 200, so it is computed as the product
 *     C(n-c, k) / C(n, k) = prod_{i = n-c+1}^{n} (1 - k / i),
 * c factors each in [0, 1): no overflow, no cancellation beyond the final 1 - x. */
#ifndef EVALUATOR_PASSK_H
#define EVALUATOR_PASSK_H

/* 1 - C(n-c, k) / C(n, k); 1 when n - c < k; NAN unless 1 <= k <= n and 0 <= c <= n. */
double eval_pass_at_k(int n, int c, int k);

/* The estimator's mean and variance over c ~ Binomial(n, p), for one problem whose samples
 * pass with probability p: the mean is 1 - (1 - p)^k (it is unbiased), the variance says how
 * noisy one problem's estimate is with n samples (docs/evaluator.md). 0, or -1 on bad input. */
int eval_pass_at_k_moments(int n, int k, double p, double *mean, double *var);
#endif
