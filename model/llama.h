/* model/llama.h: the Llama-style decoder (seed 002) on the CPU.
 *
 * Parameters live in ONE contiguous float buffer (gradients in a second one of the same
 * layout), in Hugging Face order, exposed as named views ("model.embed_tokens.weight", ...,
 * "lm_head.weight" only when untied). Activations are allocated once for (Bmax, Tmax) and
 * reused; a forward may use any B <= Bmax, T <= Tmax (llama_set_shape).
 *
 * Step: llama_zero_grad; llama_forward(tokens, targets, mask, &loss); llama_backward
 * (accumulates into the gradients, so several micro-batches add up; see llama_set_grad_scale);
 * then the optimizer (adamw.h) on llama_params / llama_grads.
 *
 * For the Free Transformer the forward is also available in pieces over the residual stream:
 * llama_embed -> llama_blocks_forward(l0, l1) -> llama_head_forward, with the matching
 * backward pieces; the stream after block l is llama_stream(m, l + 1). */
#ifndef MODEL_LLAMA_H
#define MODEL_LLAMA_H
#include <stddef.h>
#include <stdint.h>
#include "model/config.h"
#include "model/device.h"
#include "model/llama_block.h"
#include "model/tensor.h"

/* Error codes (0 ok). Every failing call writes one line into err. */
enum { LLAMA_EARG = -1, LLAMA_ENOMEM = -2, LLAMA_ECONFIG = -3, LLAMA_ETOKEN = -4 };

typedef struct llama llama_t;

/* Checks that cfg describes a model we can build and that (B, T) fits it. */
int llama_config_check(const model_config_t *cfg, int B, int T, char *err, size_t errlen);

/* Builds the model on device dev (every buffer is allocated there: parameters, gradients and
 * activations, one allocation each) with weights initialised from seed (see llama_init). The
 * model keeps a copy of cfg and borrows dev. An activation allocation that does not fit names
 * the largest batch that would. llama_create is llama_create_on the CPU device. */
int llama_create_on(llama_t **m, device_t *dev, const model_config_t *cfg, int Bmax, int Tmax,
                    uint64_t seed, char *err, size_t errlen);
int llama_create(llama_t **m, const model_config_t *cfg, int Bmax, int Tmax, uint64_t seed,
                 char *err, size_t errlen);
void llama_destroy(llama_t **m);

/* Init: every matrix (embeddings, projections, lm_head) ~ normal(0, 0.02), as HF's
 * initializer_range; no extra scaling of output projections; norms = 1. Drawn on the host in
 * parameter order from common/rng.h seeded with seed, so the same seed gives the same weights
 * on every device. 0, or LLAMA_ENOMEM (the host staging buffer). */
int llama_init(llama_t *m, uint64_t seed);

/* Bytes of each buffer kind, for the report programs print at start. */
void llama_memory(const llama_t *m, model_memory_t *out);
/* Activation bytes a model of this config would allocate for (Bmax, Tmax). */
size_t llama_activation_bytes(const model_config_t *cfg, int Bmax, int Tmax);
device_t *llama_device(const llama_t *m);

const model_config_t *llama_config(const llama_t *m);
/* Active batch shape for the next forward (B <= Bmax, T <= Tmax). */
int llama_set_shape(llama_t *m, int B, int T, char *err, size_t errlen);
void llama_shape(const llama_t *m, int *B, int *T);

/* Views onto parameters / gradients (same names, same order). Returns the number of tensors;
 * views may be NULL to ask for the count; at most cap are written. */
int llama_params(llama_t *m, tensor_view_t *views, int cap);
int llama_grads(llama_t *m, tensor_view_t *views, int cap);
/* The whole contiguous buffers (device pointers; for the optimizer and tests). */
float *llama_param_data(llama_t *m, size_t *n);
float *llama_grad_data(llama_t *m, size_t *n);
void llama_zero_grad(llama_t *m);

/* Full forward on tokens (B,T). With targets (B,T) (the next token of each position), also
 * the mean cross-entropy over the positions where mask (B,T) is non-zero (all when NULL) into
 * *loss; targets NULL computes logits only. Token or target ids >= vocab are refused. */
int llama_forward(llama_t *m, const uint32_t *tokens, const uint32_t *targets,
                  const uint8_t *mask, float *loss, char *err, size_t errlen);
/* Backward of the last forward with targets; accumulates into the gradients. */
int llama_backward(llama_t *m, char *err, size_t errlen);
/* dloss used by llama_backward (default 1). With n micro-batches of equal counted targets,
 * set 1/n so the accumulated gradient is that of the mean loss over the whole batch. */
void llama_set_grad_scale(llama_t *m, float s);
/* (B,T,V) logits of the last forward on the HOST (downloaded when the device is not the host;
 * NULL if the host buffer could not be allocated), valid until the next forward or backward:
 * a forward with targets writes dlogits over the logits, and this computes them again. */
const float *llama_logits(llama_t *m);
/* The same buffer on the device: the logits after a forward without targets (or after
 * llama_logits), the gradient after one with targets. */
const float *llama_logits_dev(const llama_t *m);
/* Counted targets of the last forward. */
int llama_target_count(const llama_t *m);

/* ---- pieces (Free Transformer); every pointer is the model's device's ---- */
float *llama_stream(llama_t *m, int l);            /* (B,T,D) input of block l, l in [0, L] */
float *llama_dstream(llama_t *m);                  /* (B,T,D) gradient wrt the current stream */
llama_block_w_t llama_block_weights(llama_t *m, int l);
llama_block_w_t llama_block_grads(llama_t *m, int l);
const float *llama_rope_cos(const llama_t *m);     /* (max_seq, hd/2) */
const float *llama_rope_sin(const llama_t *m);
llama_block_scratch_t *llama_scratch(llama_t *m);
llama_block_acts_t *llama_block_acts(llama_t *m, int l); /* what block l's forward kept */
int llama_embed(llama_t *m, const uint32_t *tokens, char *err, size_t errlen);
void llama_blocks_forward(llama_t *m, int l0, int l1);    /* stream l0 -> stream l1 */
int llama_head_forward(llama_t *m, const uint32_t *targets, const uint8_t *mask, float *loss,
                       char *err, size_t errlen);
void llama_head_backward(llama_t *m);            /* sets dstream to d loss / d stream L */
void llama_head_backward_input(llama_t *m);      /* the same without the head's weight gradients */
void llama_blocks_backward(llama_t *m, int l1, int l0); /* dstream: d stream l1 -> d stream l0 */
void llama_embed_backward(llama_t *m);
/* Block l (stream l -> stream l+1) with keys/values read from x_kv (B,T,D) instead of stream l:
 * the Free Transformer's injection block (x_kv = x + r). x_kv NULL is the plain block. */
void llama_block_forward_kv(llama_t *m, int l, const float *x_kv);
/* Its backward: dstream goes from d stream l+1 to d stream l, and the gradient wrt x_kv is
 * accumulated (+=) into dx_kv (B,T,D). Pass the x_kv of the forward. */
void llama_block_backward_kv(llama_t *m, int l, const float *x_kv, float *dx_kv);
#endif
