/* trainer/dp_train.h: one optimizer step spread over the ranks of a data-parallel group.
 *
 * The rows. --batch B is per rank. Micro-batch j (of --accum A) of optimizer step k is loader
 * step s = k*A + j, and rank r asks for rows [(s*W + r)*B, +B) of the epoch's row sequence
 * (loader/batch.h): the ranks' rows never overlap, and together they are the rows one process
 * with batch W*B would take. Row b of rank r in micro-batch j is row g = (j*W + r)*B + b of
 * the step's global batch of W*B*A rows; a family that draws random numbers per row keys them
 * by g (family.h's set_row), so a step draws the same numbers whatever the world size.
 *
 * The flat gradient. The model's gradient tensors, in the parameters' order, are copied end to
 * end into one device buffer (DEV copy ops; a family's gradients may live in several buffers)
 * of P floats, padded to W*S: S is a whole number of norm chunks of C floats, and rank r owns
 * shard r = [r*S, (r+1)*S). One reduce-scatter (dp.h: the sum in rank order) leaves each
 * rank its shard of the sum, which it scales by 1/(W*A): every rank's gradient is that of the
 * mean loss over its own rows, so this is their mean, as --accum's 1/A is.
 *   plain: an all-gather completes the sum on every rank (together: the all-reduce); every
 *          rank updates every parameter with the same AdamW, so the weights stay identical.
 *   ZeRO-1 (--zero 1): rank r keeps AdamW's moments for its shard only (an AdamW over views cut
 *          to the shard, each decaying as the tensor it is cut from), updates the parameters
 *          of its shard, and an all-gather of the updated parameters gives every rank the
 *          whole model.
 * The gradient norm (for clipping) is the same number in both: the sum of squares of each
 * chunk of C floats of the scaled flat gradient (DEV sumsq), the chunks' values added in
 * chunk order in double; under ZeRO-1 each rank computes its own chunks and the values are
 * gathered. So ZeRO-1 and plain data parallelism give the same bits.
 *
 * Checkpoints hold the whole model and whole moments in the parameters' layout, as a single
 * process writes them: under ZeRO-1 the moments are gathered to rank 0 first. */
#ifndef TRAINER_DP_TRAIN_H
#define TRAINER_DP_TRAIN_H
#include <stddef.h>
#include <stdint.h>

#include "model/adamw.h"
#include "model/tensor.h"
#include "trainer/dp.h"

typedef struct dp_train dp_train_t;

/* params and grads: the model's n views (same order and shapes; copied). zero: 0 plain, 1
 * ZeRO-1. Allocates two device buffers of W*S floats (the flat gradient and the all-to-all's
 * receiving side) and the optimizer. */
int dp_train_create(dp_train_t **t, dp_t *dp, device_t *dev, const tensor_view_t *params,
                    const tensor_view_t *grads, int n, const adamw_config_t *ac, int zero, char *err,
                    size_t errlen);
void dp_train_destroy(dp_train_t **t);

/* The optimizer step after every rank's backward: the sum of the gradients over the ranks,
 * scaled by grad_scale / W (grad_scale = 1/accum), clipped to max_norm (<= 0: off) and AdamW
 * at lr. *norm: the norm before clipping, as adamw_step's. A DP_E* status from a collective,
 * or -2 with err set when the norm is not finite (every rank finds the same). */
int dp_train_step(dp_train_t *t, float lr, float grad_scale, float max_norm, double *norm, char *err,
                  size_t errlen);

/* Views named like the parameters (n of them) holding the moments "exp_avg" (m) and
 * "exp_avg_sq" (v) in the parameters' layout: where rank 0 loads a checkpoint's moments before
 * dp_train_sync, and where it reads them for a checkpoint after dp_train_gather_moments. */
void dp_train_moment_views(dp_train_t *t, const tensor_view_t **m, const tensor_view_t **v);
/* Collective: rank 0's parameters (and, with moments, its moment views) to every rank, so
 * every rank starts from the same weights and optimizer state. */
int dp_train_sync(dp_train_t *t, int moments, char *err, size_t errlen);
/* Collective: under ZeRO-1 every shard's moments into rank 0's moment views (no-op when plain). */
int dp_train_gather_moments(dp_train_t *t, char *err, size_t errlen);
/* Wall seconds this rank spent in the steps' gradient collectives so far (the reduce-scatter and
 * all-gather of dp_train_step, waits for slower ranks included): data parallelism's cost. */
double dp_train_comm_seconds(const dp_train_t *t);
/* AdamW's step count (a resume). */
void dp_train_set_steps(dp_train_t *t, int64_t steps);
/* A hash of this rank's parameters (every byte, XXH3-64), to compare across ranks. */
uint64_t dp_train_checksum(dp_train_t *t);

typedef struct {
    size_t moments;       /* AdamW's two moments held by this rank */
    size_t buffers;       /* the flat gradient and the receiving buffer */
    size_t params;        /* P: floats of the model */
    size_t shard, chunk;  /* S and C (floats) */
} dp_train_memory_t;
void dp_train_memory(const dp_train_t *t, dp_train_memory_t *out);
#endif
