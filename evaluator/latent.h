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
#endif
