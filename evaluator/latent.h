/* evaluator/latent.h: where the evaluator's latent indices Z come from.
 *
 * Prior: Z_t uniform over the 2^H one-hot vectors, independently per position (seed 000).
 * Posterior q(Z_t | x): H independent bits, bit h = 1 with probability sigmoid(l_h) where l
 * is the encoder's bit logits; Z_t = sum_h 2^h bit_h (model/free.h's Binary Mapper).
 * Draws use common/rng.h so a (seed, item) pair always gives the same latents. */
#ifndef EVALUATOR_LATENT_H
#define EVALUATOR_LATENT_H
#include <stddef.h>
#include <stdint.h>

#include "common/rng.h"

/* n prior draws into z. */
void eval_z_prior(rng_t *r, uint32_t *z, size_t n, int H);
/* n posterior draws from bit logits l (n,H) into z; logq (may be NULL) receives log q(z_t). */
void eval_z_posterior(rng_t *r, const float *l, uint32_t *z, double *logq, size_t n, int H);
/* log q(d) for one position's bit logits l (H). */
double eval_z_logq(const float *l, uint32_t d, int H);
/* KL(q(.|x) || uniform) of one position in nats: H ln 2 - sum_h binary_entropy(sigmoid(l_h)). */
double eval_z_kl(const float *l, int H);
/* log(mean(exp(a[0..n)))) computed stably. */
double eval_logmeanexp(const double *a, int n);

/* A Latent-thought LM's bounds on -log p(x) from S fresh draws of each row's fitted posterior
 * (model/ltm.h ltm_score: ce (S,B) -log p(x_b | z_s), kl (B), logw (S,B) the importance
 * weights), summed over the B rows into acc (nats; add batches by calling again):
 *   ce, kl      sum_b mean_s ce[s,b], sum_b kl[b]: their sum is the NELBO, an unbiased
 *               estimate of sum_b E_eps[-log p(x_b | z) + KL_b] >= -log p(x);
 *   var_nelbo   the variance of that estimate over the noise: sum_b s_b^2 / S, s_b^2 the row's
 *               sample variance over its S draws (rows draw independently);
 *   iw          sum_b mean_g -log mean_{k in group g} exp(logw[k,b]), G = S / Kw groups of Kw
 *               draws (the IWAE bound with Kw samples, Burda et al. 2016: >= -log p(x) in
 *               expectation, tighter than the NELBO), var_iw its variance likewise over the
 *               G groups (G >= 2; draws beyond G Kw count in the NELBO only). */
typedef struct {
    double ce, kl, var_nelbo, iw, var_iw;
} eval_ltm_acc_t;
/* 0, or -1 when S < 2 Kw, Kw < 1 or out of memory. */
int eval_ltm_accumulate(eval_ltm_acc_t *acc, const double *ce, const double *kl, const double *logw, int S,
                        int B, int Kw);
#endif
