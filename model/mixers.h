/* model/mixers.h: the masked-mixer families of seed 004, written once over the device table
 * and over block stacks (blockstack.h) whose blocks are masked-mixer blocks (mixer_block.h)
 * or Llama blocks (llama_block.h, the "transformer twins"):
 *
 *   mixer      causal mixer language model: embed -> mixer blocks (masked) -> norm -> head;
 *              targets are the next tokens, as the baseline's.
 *   mixer-ae   autoencoder: embed -> encoder blocks -> e = the LAST position's hidden vector
 *   llama-ae     (the one embedding) -> [d -> d_e -> d] -> the decoder's input: e repeated T
 *              times, or "unrolled" (seed 004: position i gets W_u e[i .. i + d/2), the window
 *              wrapping around to e's start) -> decoder blocks -> norm -> head: every token of
 *              the input predicted in one pass.
 *   mixer-mem  memory model ("oracle" memory, token-dimension concatenation): the encoder's
 *   llama-mem    stored embedding m = [down] e (d_e floats), projected to d, takes decoder
 *              position 0; positions 1..T-1 hold the tokens 0..T-2; the causal decoder
 *              predicts token t at position t (token 0 from the memory alone). With
 *              cfg.memory_start a learned vector memory.start (D, init 0) is added there:
 *              without it position 0 is the decoder's only input that does not depend on the
 *              tokens, the decoder reads it as a constant and the encoder's gradient asks
 *              every chunk for that one vector (README: what it changes, measured).
 *
 * What the autoencoders and memory models predict is the chunk itself: a forward's `targets`
 * only say "compute the loss" (the trainer's next-token targets are not read); the loss is
 * the mean cross-entropy over the chunk's tokens, token t counted when t = 0 or mask[t-1]
 * (the mask marks real targets, i.e. tokens 1..T; token 0 is real when any is).
 * The stored embedding is n_p = d_e floats per chunk of T tokens (mixers_embed_floats): the
 * evaluator charges its bits per byte (seed 004: n_p b_p / (T L_b / L_t)).
 *
 * The embedding's codec, so the bits charged are the bits the decoder uses: with
 * cfg.embed_range R > 0, down(e) is brought to unit RMS over its d_e floats (an RMS norm
 * without weight) and every float clamped to [-R, R]; an evaluation at b bits
 * (mixers_set_embed_eval) rounds it to the nearest of 2^b evenly spaced levels over [-R, R]
 * before the decoder (or the memory projection) reads it: the decoder reads exactly what a
 * b-bit code stores (ops_math.h ops_embed_code). Training with cfg.embed_noise_bits b adds
 * uniform noise of half a b-bit step instead (seed 004's quantization-aware training,
 * x + U(-q, q)); the gradient passes the noise and the rounding straight through and is 0
 * where the clamp cut. Why the norm: with a bare clamp the training drove every float of the
 * embedding out to +-R (louder than the noise), where the clamp's gradient is 0, and the
 * embedding died (measured: 100% of the floats at the clamp after 600-1000 steps in three of
 * four runs of make mixers); at unit RMS its scale is fixed, the noise's share with it, and the
 * clamp cuts beyond R standard deviations only. R = 0 (checkpoints before the codec): no
 * norm, unbounded, 32 bits only.
 *
 * Masks: the encoder's blocks are causal unless cfg.no_mask_encoder, the decoder's unless
 * cfg.no_mask_decoder (a masked mixing multiplies by tril(W) and masks W's gradient; a Llama
 * block's attention is causal). The memory model's decoder must stay causal.
 *
 * Parameters, in view order (shapes: V vocab, D d_model, F d_ff, d_e, nd = D/2; blocks as in
 * mixer_block.h / HF Llama names):
 *   [encoder]  encoder.embed_tokens.weight (V,D), encoder.layers.<l>.*, encoder.down.weight
 *              (d_e,D) when d_e < D          -- autoencoders and memory models
 *   autoencoder: decoder.up.weight (D,d_e) when d_e < D, decoder.unroll.weight (D,nd) when
 *              unrolled, decoder.layers.<l>.*, decoder.norm.weight (D), lm_head.weight (V,D)
 *              untied only (tied: the encoder's embedding)
 *   memory:    memory.proj.weight (D,d_e), [memory.start (D)], model.embed_tokens.weight, model.layers.<l>.*,
 *              model.norm.weight, lm_head.weight untied only (tied: model.embed_tokens)
 *   mixer:     model.embed_tokens.weight, model.layers.<l>.*, model.norm.weight,
 *              lm_head.weight untied only
 * Init, drawn on the host in view order from common/rng.h seeded with seed: mixer.weight and
 * mixer.bias uniform in +-1/sqrt(k T) (torch's Conv1d default, fan-in k T), other 1-D
 * tensors (norms) 1, other matrices normal(0, 0.02).
 *
 * Status: 0, or a negative LLAMA_E* code (llama.h) with one line in err. */
#ifndef MODEL_MIXERS_H
#define MODEL_MIXERS_H
#include <stddef.h>
#include <stdint.h>

#include "model/blockstack.h"
#include "model/config.h"
#include "model/device.h"
#include "model/mixer_config.h"
#include "model/tensor.h"

typedef struct mixers mixers_t;

/* The shape checks of llama_config_check and mixer_config_validate, a kind of this file, a
 * causal memory decoder, and (B, T) within max_seq. */
int mixers_config_check(const model_config_t *cfg, int B, int T, char *err, size_t errlen);
/* Builds the model on dev (parameters, gradients, activations for (Bmax, Tmax): one
 * allocation each) with weights from seed. */
int mixers_create_on(mixers_t **m, device_t *dev, const model_config_t *cfg, int Bmax, int Tmax,
                     uint64_t seed, char *err, size_t errlen);
void mixers_destroy(mixers_t **m);
int mixers_init(mixers_t *m, uint64_t seed);
void mixers_memory(const mixers_t *m, model_memory_t *out);
device_t *mixers_device(const mixers_t *m);
const model_config_t *mixers_config(const mixers_t *m);
int mixers_set_shape(mixers_t *m, int B, int T, char *err, size_t errlen);

int mixers_params(mixers_t *m, tensor_view_t *views, int cap);
int mixers_grads(mixers_t *m, tensor_view_t *views, int cap);
void mixers_zero_grad(mixers_t *m);
void mixers_set_grad_scale(mixers_t *m, float s);

/* Forward on tokens (B,T); with targets non-NULL also the loss (see above for what each kind
 * predicts) into *loss. Ids outside the vocabulary are refused. */
int mixers_forward(mixers_t *m, const uint32_t *tokens, const uint32_t *targets,
                   const uint8_t *mask, float *loss, char *err, size_t errlen);
/* The same with the encoder reading enc_tokens (B,T) instead of tokens (NULL: tokens): the
 * decoder then reads the embedding of other rows (the evaluator's shuffled control). */
int mixers_forward_enc(mixers_t *m, const uint32_t *tokens, const uint32_t *enc_tokens,
                       const uint32_t *targets, const uint8_t *mask, float *loss, char *err,
                       size_t errlen);
int mixers_backward(mixers_t *m, char *err, size_t errlen);
/* The training noise's draws (embed_noise_bits): keyed by (seed, optimizer step); the next
 * forward's first row is row row0 of the step's global batch (family.h set_step/set_row). */
void mixers_set_step(mixers_t *m, uint64_t step);
void mixers_set_row(mixers_t *m, uint64_t row0);
/* What the decoder reads from the next forwards on (autoencoders and memory models): bits 0
 * (the default) is training: the clamped embedding plus, with embed_noise_bits, its noise;
 * bits 1..24: the clamped embedding rounded to the 2^bits levels of its range, the code an
 * evaluation charges (a bounded embedding only: embed_range > 0); 32: the clamped float
 * itself. zero 1: the decoder reads zeros instead (a control). 0, or LLAMA_EARG with one line. */
int mixers_set_embed_eval(mixers_t *m, int bits, int zero, char *err, size_t errlen);
/* (B,T,V) logits of the last forward on the HOST (NULL: no host memory): row t predicts token
 * t+1 (mixer) or token t itself (autoencoders, memory models). A forward with targets writes
 * dlogits over the logits; this computes them again (the same bits). */
const float *mixers_logits(mixers_t *m);
/* Floats of the one stored embedding per chunk (d_e), 0 for the causal mixer. */
int mixers_embed_floats(const mixers_t *m);
/* The stored embeddings (B, d_e) of the last forward on the HOST (autoencoders, memory
 * models; NULL otherwise). */
const float *mixers_embedding(mixers_t *m);

/* Memory models: 1 when view i is the encoder's and the encoder is frozen. */
int mixers_frozen(const mixers_t *m, int i);
/* Memory models: loads the encoder (its views: encoder.*) from the checkpoint in dir, an
 * autoencoder of the same block kind (or a memory model) whose encoder has this model's
 * shape; a different shape or kind is refused with one line naming the field. */
int mixers_load_encoder(mixers_t *m, const char *dir, char *err, size_t errlen);

/* The causal mixer's weights, for its generator (model/mixer_gen.h). */
typedef struct {
    const float *embed, *norm, *head;   /* (V,D), (D), (V,D) */
    const blockstack_t *blocks;         /* the decoder stack's weights */
} mixers_lm_t;
mixers_lm_t mixers_lm(const mixers_t *m);
#endif
