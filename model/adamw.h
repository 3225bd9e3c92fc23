/* model/adamw.h: AdamW with decoupled weight decay, global-norm clipping and gradient
 * accumulation, with torch.optim.AdamW's arithmetic (PyTorch 1.13, single-tensor path):
 *     p   <- p * (1 - lr * wd)                 (only tensors flagged for decay)
 *     m   <- b1 m + (1 - b1) g
 *     v   <- b2 v + (1 - b2) g^2
 *     p   <- p - (lr / (1 - b1^t)) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
 * with t the 1-based step. Clipping is torch.nn.utils.clip_grad_norm_'s: the global L2 norm
 * over all gradients; if above max_norm, every gradient is multiplied by
 * max_norm / (norm + 1e-6).
 *
 * The moments live in two contiguous buffers with the parameters' layout and are exposed as
 * views with the parameters' names (for checkpoints: the checkpoint writer adds a prefix). */
#ifndef MODEL_ADAMW_H
#define MODEL_ADAMW_H
#include <stddef.h>
#include <stdint.h>
#include "model/tensor.h"

typedef struct {
    float beta1, beta2, eps, weight_decay;
    int decay_embeddings;   /* 1: the embedding table decays like other matrices */
} adamw_config_t;

/* beta1 0.9, beta2 0.95, eps 1e-8, weight_decay 0.1, embeddings not decayed. */
adamw_config_t adamw_config_default(void);

typedef struct adamw adamw_t;

/* Optimizer over n parameter tensors (views are copied; their data must outlive o). Decay
 * flags start at: decay every tensor of 2 or more dims, except "model.embed_tokens.weight"
 * unless cfg->decay_embeddings; norms (1-D) never. */
int adamw_create(adamw_t **o, const tensor_view_t *params, int n, const adamw_config_t *cfg,
                 char *err, size_t errlen);
void adamw_destroy(adamw_t **o);

/* The decay flag adamw_create gives a tensor (the rule above), e.g. for views of parts of the
 * parameters (a data-parallel shard) that must decay like the tensors they are cut from. */
int adamw_default_decay(const tensor_view_t *param, const adamw_config_t *cfg);
void adamw_set_decay(adamw_t *o, int i, int decay);
int adamw_get_decay(const adamw_t *o, int i);

/* Global L2 norm of grads (n views, in the params' order), summed in double in a fixed order
 * so the result does not depend on the thread count. */
double adamw_grad_norm(const tensor_view_t *grads, int n);

/* One update. grads: the same n tensors as the params. grad_scale first multiplies the
 * gradients (1/k after accumulating k micro-batches each giving the gradient of its mean loss,
 * so the step sees the mean over the whole batch; 1 otherwise). max_norm <= 0 disables
 * clipping. *norm_out (may be NULL) receives the norm before clipping (after grad_scale).
 * The grads are scaled in place by grad_scale (as PyTorch's loss scaling leaves them) but not
 * clipped in place, unlike clip_grad_norm_: the update reads g * clip and leaves g as it was
 * (nothing reads a gradient after the step before zero_grad; on a GPU the store back was 4 of
 * the update's 34 bytes a parameter, bench/NOTES.md 2026-11-27). */
int adamw_step(adamw_t *o, const tensor_view_t *grads, int n, float lr, float grad_scale,
               float max_norm, double *norm_out, char *err, size_t errlen);

/* adamw_step's update with the gradient norm given: grads are already scaled, and `norm` is
 * the global L2 norm of all of them, computed by the caller (data parallelism: the optimizer
 * holds one shard of the parameters, the norm spans every shard). Clips like adamw_step;
 * -2 (step skipped) when norm is not finite. */
int adamw_step_normed(adamw_t *o, const tensor_view_t *grads, int n, float lr, float max_norm,
                      double norm, char *err, size_t errlen);

/* Number of steps taken (t of the last step); settable for a resume. */
int64_t adamw_steps(const adamw_t *o);
void adamw_set_steps(adamw_t *o, int64_t t);
/* Views of the first (which = 0, "exp_avg") or second (which = 1, "exp_avg_sq") moments. */
int adamw_moments(adamw_t *o, int which, tensor_view_t *views, int cap);
#endif
