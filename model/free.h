/* model/free.h: the Free Transformer (seed 000, section 3, Algorithm 2, Figure 2) on the CPU.
 *
 * It is the Llama decoder of model/llama.h (reused, not forked) plus four extras:
 *
 *   tokens -> embed -> blocks 0 .. L/2-1                         -> X      (B,T,D)
 *   encoder:  Y_e = encoder_block(x_q = zeta repeated T times, x_kv = X), NON-causal, RoPE as
 *             in every block, residual on the query stream (zeta)
 *             bit logits  Lg = RMSNorm(Y_e; free.encoder_norm) W_ro^T            (B,T,H)
 *   Binary Mapper (eq. 6-8): p = sigmoid(Lg); bit_h = u_h < p_h (u uniform, given or drawn);
 *             d = sum_h 2^h bit_h (h = 0..H-1, i.e. the paper's 2^(h-1) with 1-based h);
 *             Z = onehot(d) + G - detach(G), G_{d'} = prod_h p_h^{b_h(d')} (1-p_h)^{1-b_h(d')}
 *   post-sampler: R = W_post Z  = the column W_post[:, d]  (a gather; no 2^H x D product)
 *   block L/2 (0-based; the paper's block L/2+1) reads queries from X, keys/values from X + R;
 *   blocks L/2+1 .. L-1 as usual, final norm, lm head.
 *
 * Loss (what the family's forward returns and the backward differentiates):
 *   CE + mean over counted positions (b,t) of max(0, KL_t - kappa),
 *   KL_t = H log 2 - sum_h binary_entropy(p_th)   (nats; eq. 4, the bits being independent).
 * "Counted" = mask != 0 (all positions without a mask), the same positions as the CE.
 *
 * Gradient of the Binary Mapper (the paper's pass-through, NOT straight-through on the sampled
 * entry): Z's forward VALUE is the one-hot, so dL/dW_post = dR Z^T only touches column d;
 * but Z's gradient dZ = W_post^T dR is dense over all 2^H entries and flows to G:
 *   dL/dLg_h = sum_{d'} dZ_{d'} dG_{d'}/dLg_h = sum_{d'} dZ_{d'} G_{d'} (b_h(d') - p_h).
 * The backward computes it exactly (a (N x D) x (D x 2^H) product in row chunks; see
 * post_sampler_backward). With H = 16 that is large, by design of the paper.
 *
 * Checkpoint names: the decoder keeps the Hugging Face Llama names (model.embed_tokens.weight,
 * model.layers.<l>.*, model.norm.weight, lm_head.weight when untied); the extras follow, in
 * this order (docs/FORMATS.md §4):
 *   free.zeta                     (D)         the encoder's learned query input
 *   free.encoder.<suffix>         the encoder block, the 9 suffixes of a llama layer:
 *        input_layernorm.weight (D), self_attn.q_proj.weight (H*hd, D),
 *        self_attn.k_proj.weight (Hkv*hd, D), self_attn.v_proj.weight (Hkv*hd, D),
 *        self_attn.o_proj.weight (D, H*hd), post_attention_layernorm.weight (D),
 *        mlp.gate_proj.weight (F, D), mlp.up_proj.weight (F, D), mlp.down_proj.weight (D, F)
 *   free.encoder_norm.weight      (D)         RMSNorm before the read-out
 *   free.readout.weight           (H, D)      bit logits = x W^T (H = latent_bits)
 *   free.post_sampler.weight      (D, 2^H)    R = W Z: column d is the embedding of latent d
 *
 * Init: the decoder as llama_init (normal(0, 0.02) matrices, norms 1), from the same seed so
 * a Free Transformer and a baseline created with one seed share decoder weights. The extras
 * draw from a second stream (seed, 0xF7EE): every matrix normal(0, 0.02), norms 1, and zeta
 * normal(0, 0.02) too (a small random vector like a token embedding, which is what the paper
 * calls it).
 *
 * Uniforms: by default each training forward draws u (B,T,H) from common/rng.h's
 * counter-based stream keyed by free_set_step(step) (rng_counter_key(seed ^ FREE_U_SALT,
 * step)); the micro-batches of a step take consecutive counters (u of micro-batch j, row n,
 * bit h is number j*N*H + n*H + h), so a resumed run draws what the uninterrupted run drew and
 * every device draws the same numbers. Under data parallelism free_set_row() places each
 * rank's rows at their index in the global batch, so a step draws the same Z whatever the
 * world size. free_set_uniforms() fixes them instead (tests). */
#ifndef MODEL_FREE_H
#define MODEL_FREE_H
#include <stddef.h>
#include <stdint.h>
#include "model/config.h"
#include "model/family.h"
#include "model/llama.h"
#include "model/llama_block.h"
#include "model/ops.h"
#include "model/tensor.h"

enum { FREE_EARG = -1, FREE_ENOMEM = -2, FREE_ECONFIG = -3, FREE_ETOKEN = -4 };
#define FREE_U_SALT 0x55AAF7EEull

typedef struct free_model free_t;

/* Pointers to the extras (parameters, or gradients with the same layout). */
typedef struct {
    float *zeta;          /* (D) */
    llama_block_w_t enc;  /* the encoder block */
    float *enc_norm;      /* (D) */
    float *readout;       /* (H, D) */
    float *post;          /* (D, 2^H) row-major: column d = W_post[:, d] */
} free_w_t;

/* llama_config_check plus: kind MODEL_FREE, n_layers >= 2, latent_bits 1..20, kappa >= 0. */
int free_config_check(const model_config_t *cfg, int B, int T, char *err, size_t errlen);
/* Builds the model on device dev (llama_create_on: the decoder, then the extras' parameters,
 * gradients and activations, one allocation each); free_create uses the CPU device. */
int free_create_on(free_t **m, device_t *dev, const model_config_t *cfg, int Bmax, int Tmax,
                   uint64_t seed, char *err, size_t errlen);
int free_create(free_t **m, const model_config_t *cfg, int Bmax, int Tmax, uint64_t seed,
                char *err, size_t errlen);
void free_destroy(free_t **m);
/* 0, or FREE_ENOMEM (a host staging buffer). */
int free_init(free_t *m, uint64_t seed);
void free_memory(const free_t *m, model_memory_t *out);
device_t *free_device(const free_t *m);

const model_config_t *free_config(const free_t *m);
int free_set_shape(free_t *m, int B, int T, char *err, size_t errlen);
/* The decoder (its pieces, KV-cache generation) and the index of the injection block. */
llama_t *free_decoder(free_t *m);
int free_half(const free_t *m);          /* L/2: blocks [0, L/2) give X; block L/2 injects */
free_w_t free_weights(free_t *m);
free_w_t free_grad_weights(free_t *m);

/* Views: the decoder's (HF order) then the extras (order above). */
int free_params(free_t *m, tensor_view_t *views, int cap);
int free_grads(free_t *m, tensor_view_t *views, int cap);
void free_zero_grad(free_t *m);
void free_set_grad_scale(free_t *m, float s);

/* Uniform draws: restart the stream for an optimizer step, or fix u (B,T,H) (host) for every
 * later forward (copied; NULL returns to drawing). The fixed array must match the shape of
 * each forward. */
void free_set_step(free_t *m, uint64_t step);
void free_set_uniforms(free_t *m, const float *u);
/* Data parallelism: the next forward's first row is row `row0` of the step's global batch
 * (rows numbered over every rank and micro-batch, trainer/dp_train.h), so its uniforms are the
 * numbers that row would draw in one process: row r, position t, bit h takes counter
 * (r*T + t)*H + h. Later forwards continue from there, as without this call. */
void free_set_row(free_t *m, uint64_t row0);
/* Test hook: r_off (B,T,D) is added to R in later forwards (copied; NULL: none). The
 * gradient check uses it to evaluate the estimator's surrogate R = W_post (onehot + G - G0)
 * by finite differences; the backward treats it as a constant. */
int free_set_r_offset(free_t *m, const float *r_off);

/* Training forward (encoder -> Binary Mapper -> decoder): *loss = CE + free-bits KL.
 * targets NULL: logits only (Z still from the encoder). */
int free_forward(free_t *m, const uint32_t *tokens, const uint32_t *targets, const uint8_t *mask,
                 float *loss, char *err, size_t errlen);
/* Backward of the last free_forward with targets (accumulates into the gradients). */
int free_backward(free_t *m, char *err, size_t errlen);

/* Forward with Z given as indices z (B,T) in [0, 2^H) (prior samples, or one fixed Z):
 * no encoder; *ce = cross-entropy only (targets NULL: logits only). No backward. */
int free_forward_z(free_t *m, const uint32_t *tokens, const uint32_t *z, const uint32_t *targets,
                   const uint8_t *mask, float *ce, char *err, size_t errlen);
/* Encoder only: embed, blocks [0, L/2), encoder block, read-out. Afterwards free_bit_logits
 * and free_kl hold (B,T,H) and (B,T) for these tokens. */
int free_encode(free_t *m, const uint32_t *tokens, char *err, size_t errlen);

/* Results of the last forward on the HOST (downloaded when the device is not the host; NULL
 * if a host buffer could not be allocated), valid until the next one. */
const float *free_logits(free_t *m);      /* (B,T,V) */
const float *free_bit_logits(free_t *m);  /* (B,T,H) */
const float *free_kl(free_t *m);          /* (B,T) KL_t in nats */
const uint32_t *free_z(free_t *m);        /* (B,T) latent index d used by the decoder */
const float *free_bit_logits_dev(const free_t *m); /* (B,T,H) on the device */
/* "ce", "kl" (mean KL per counted token, nats), "kl_bits", "kl_above_kappa" (fraction of
 * counted tokens whose KL > kappa), "kappa_bits" (the free-bits threshold, so a plot of kl_bits
 * can draw it); the total loss is the forward's own value. */
void free_metrics(free_t *m, family_metrics_t *out);

/* The Binary Mapper and post-sampler ops are in model/ops.h (ops_binmap.c). */
#endif
