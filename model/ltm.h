/* model/ltm.h: the Latent-Thought Language Model (seed 003) over the device table.
 *
 * The decoder is the Llama decoder of model/llama.h (reused, not forked: its parameters keep
 * the baseline's names), its self-attention causal with a sliding window (config
 * sliding_window; 0: unlimited), and in every layer l a cross-attention sublayer between the
 * self-attention and the MLP, whose keys and values come from that layer's latent thought
 * vectors z_l (m vectors of width d_model):
 *
 *   x_mid   = x + o(self_attention(rope(q(norm1 x)), rope(k(norm1 x)), v(norm1 x)), window W)
 *   x_cross = x_mid + o_c(attention(rope(q_c(norm_c x_mid)), rope_z(k_c(z_l)), v_c(z_l)))
 *   x_out   = x_cross + down(swiglu(norm2 x_cross))
 *
 * (the public LTM code's block: pre-norm on the token side only, z enters the key/value
 * products unnormalised, the cross-attention sees all m vectors). RoPE on both sides (seed 003
 * A.1): queries at their token positions, latent j of every layer at position
 * j * max(1, floor(max_seq / (L m))) (the public code's spacing: the total latent count
 * divides the context).
 *
 * Prior z ~ N(0, I). Posterior of each sequence: q(z|x) = N(mu, diag sigma^2), sigma = exp(ls),
 * local parameters of that sequence; z = mu + sigma eps (reparameterised). Stochastic
 * variational inference: a fresh eps ~ N(0, I) at every inner step and another for the forward
 * at the final posterior, so the fitted q is good on average over eps, and the final forward's
 * NELBO is an unbiased one-draw estimate of E_eps[NELBO] at q (an upper bound on -log p(x)
 * in expectation). (The public code draws eps once per batch and keeps it through the inner
 * steps and the final forward: the inner loop then fits mu so that that one z explains the
 * row while the KL is charged as if z were random, and the score is the objective it was
 * fitted to, below E_eps[NELBO] and, measured, below the exact -log p(x) of a model whose
 * likelihood is computable: tests/test_ltm_bound.c.) Per sequence
 *   NELBO = sum over its counted targets of -log p(x_t | x_<t, z) + KL(q || N(0, I))
 * (the KL in closed form, ops_math.h ops_latent_kl); the loss a forward returns is the batch's
 * NELBO per counted token, sum_b NELBO_b / count, an upper bound on the NLL per token.
 *
 * Dual-rate learning (seed 003 §2.2, Algorithm 1), all inside ltm_forward:
 *   1. mu ~ 0.01 N(0, 1), ls ~ -2.5 + 0.05 N(0, 1) (the public code's log-variance -5 +- 0.1,
 *      halved), and eps_k ~ N(0, 1) of inner step k = 0..K (k = K: the final forward):
 *      counter-based draws of each sequence (ops.h latent_normal), keyed by (seed, optimizer
 *      step), the sequence's row in the step and k, so a resumed run and every device draw the
 *      same numbers;
 *   2. K = inner_steps AdamW steps on (mu, ls) alone, minimising sum_b NELBO_b: beta 0.9/0.999,
 *      eps 1e-8, decoupled decay 0.01 (torch.optim.AdamW's defaults, which the public code
 *      keeps), fresh moments per batch. The fast rate: seed 003's ramp over training gives the
 *      peak, lr_f(step) = fast_lr + (fast_lr_end - fast_lr) * step / (fast_lr_steps - 1) (0.3
 *      rising to 0.34 in the paper); within the batch, inner step k of K runs at a cosine from
 *      that peak down to a tenth of it, lr_f/10 + 0.9 lr_f (1 + cos(pi k / K)) / 2 (the public
 *      code's get_fast_lr: with a constant 0.3, Adam overshoots log sigma and the KL
 *      oscillates; tests/test_ltm.c). An inner step's backward computes dL/dz only: no decoder
 *      weight gradient, nothing below layer 0's cross-attention;
 *   3. the final forward at z_K = mu_K + sigma_K eps_K, whose backward (ltm_backward) gives the
 *      decoder's gradient for the trainer's slow AdamW step.
 * The slow gradient does NOT flow through the inner loop: (mu_K, sigma_K) are constants for the
 * decoder's update (the public code detaches z after the inner loop), so the decoder's gradient
 * is that of the NELBO at the final posterior, d/dtheta (1/count) sum CE(theta; z_K) (the KL does
 * not depend on theta). (In the public PyTorch code the inner steps' loss.backward() also leaves
 * decoder gradients of the batch-summed NELBO at z_0 .. z_{K-1} in .grad, which its slow step
 * then adds; Algorithm 1 and §2.4's "one additional backward pass in slow learning" describe
 * the update at the final posterior, which is what this does; docs/FORMATS.md §ltm.)
 *
 * Checkpoint names: the decoder's (llama.h), then per layer l (docs/FORMATS.md):
 *   model.layers.<l>.cross_attn_layernorm.weight  (D)
 *   model.layers.<l>.cross_attn.q_proj.weight     (H*hd, D)
 *   model.layers.<l>.cross_attn.k_proj.weight     (Hkv*hd, D)
 *   model.layers.<l>.cross_attn.v_proj.weight     (Hkv*hd, D)
 *   model.layers.<l>.cross_attn.o_proj.weight     (D, H*hd)
 * The latents are per sequence and never saved.
 *
 * Init: the decoder as llama_init (same seed: an LTM and a baseline created with one seed share
 * decoder weights); the cross-attention from a second stream (seed, 0x17A7): q/k/v
 * normal(0, 0.02), o_proj normal(0, 0.02 / sqrt(2 L)) (the public code's scaled init of output
 * projections), norms 1.
 *
 * Latent tensors are laid out (L, B, m, D): layer l's vectors of all sequences are one block of
 * B*m rows (the key/value products take them at once). */
#ifndef MODEL_LTM_H
#define MODEL_LTM_H
#include <stddef.h>
#include <stdint.h>

#include "model/config.h"
#include "model/family.h"
#include "model/generate.h"
#include "model/llama.h"

enum { LTM_EARG = -1, LTM_ENOMEM = -2, LTM_ECONFIG = -3, LTM_ETOKEN = -4 };
#define LTM_SALT 0x17A7F00Dull

typedef struct ltm ltm_t;

/* One layer's cross-attention weights (or gradients; all NULL: none wanted). */
typedef struct {
    float *norm;   /* (D) */
    float *wq;     /* (H*hd, D) */
    float *wk;     /* (Hkv*hd, D) */
    float *wv;     /* (Hkv*hd, D) */
    float *wo;     /* (D, H*hd) */
} ltm_cross_w_t;

/* llama_config_check plus: kind MODEL_LTM, 1 <= latent_vectors <= max_seq, 0 <= sliding_window
 * <= max_seq, inner_steps >= 0, fast rates >= 0, fast_lr_steps >= 1. */
int ltm_config_check(const model_config_t *cfg, int B, int T, char *err, size_t errlen);
/* Builds the model on dev (the decoder through llama_create_on, then the cross-attention's
 * parameters, gradients and activations, one allocation each); ltm_create uses the CPU. */
int ltm_create_on(ltm_t **m, device_t *dev, const model_config_t *cfg, int Bmax, int Tmax,
                  uint64_t seed, char *err, size_t errlen);
int ltm_create(ltm_t **m, const model_config_t *cfg, int Bmax, int Tmax, uint64_t seed,
               char *err, size_t errlen);
void ltm_destroy(ltm_t **m);
int ltm_init(ltm_t *m, uint64_t seed);   /* 0, or LTM_ENOMEM (a host staging buffer) */
void ltm_memory(const ltm_t *m, model_memory_t *out);
device_t *ltm_device(const ltm_t *m);
const model_config_t *ltm_config(const ltm_t *m);
llama_t *ltm_decoder(ltm_t *m);
ltm_cross_w_t ltm_cross_weights(ltm_t *m, int l);
int ltm_set_shape(ltm_t *m, int B, int T, char *err, size_t errlen);

/* Views: the decoder's (HF order), then per layer the five cross-attention tensors. */
int ltm_params(ltm_t *m, tensor_view_t *views, int cap);
int ltm_grads(ltm_t *m, tensor_view_t *views, int cap);
void ltm_zero_grad(ltm_t *m);
void ltm_set_grad_scale(ltm_t *m, float s);

/* The optimizer step whose micro-batches follow: picks the fast rate and the latent draws'
 * key (the micro-batches of a step take consecutive rows of the key's streams). */
void ltm_set_step(ltm_t *m, uint64_t step);
/* Data parallelism: the next forward's first row is row row0 of the step's global batch, so its
 * posterior starts from the draws one process would make for that row (model/family.h). */
void ltm_set_row(ltm_t *m, uint64_t row0);
/* The fast rate of optimizer step `step` (the linear ramp above), and the rate of inner step k
 * of K from that peak (the cosine to a tenth). */
float ltm_fast_lr(const model_config_t *cfg, uint64_t step);
float ltm_inner_lr(float peak, int k, int K);

/* Training forward: draws the posterior's start, runs inner_steps AdamW steps on it, then the
 * final forward at z_K; *loss = NELBO per counted token at z_K. targets are required. */
int ltm_forward(ltm_t *m, const uint32_t *tokens, const uint32_t *targets, const uint8_t *mask,
                float *loss, char *err, size_t errlen);
/* The decoder's gradient at the final posterior (accumulated, times the grad scale). */
int ltm_backward(ltm_t *m, char *err, size_t errlen);
/* "ce" (reconstruction -log p(x|z) per token at z_K), "kl" (per token), "elbo" (their sum: the
 * loss), "elbo_0" (the NELBO per token at the start, before any inner step), "elbo_K" (after the
 * K steps: elbo), "kl_seq" (nats per sequence), "fast_lr", "inner_steps". */
void ltm_metrics(ltm_t *m, family_metrics_t *out);

/* ---- inference (evaluator, sampler, tests) ---- */
typedef struct {
    int steps;           /* inner AdamW steps on (mu, ls); the decoder does not change */
    float lr;            /* the fast rate */
    uint64_t key;        /* the draws of mu's and ls's start and of eps: sequence b uses the */
    uint64_t row0;       /* streams (key, row0 + b), whatever the batch around it */
    const int *record;   /* ascending step counts (each <= steps) after which to record */
    int n_record;
} ltm_infer_t;
/* Infers q(z|x) of every row of tokens (B,T) from its counted targets (the mask selects them:
 * a prompt's positions only, for instance) by stochastic VI (a fresh eps per step, streams
 * (key, row0 + b) and the step); records after record[i] steps the batch's sum of
 * -log p(target | z) over counted targets into ce[i] and its sum of KL into kl[i] (nats; either
 * may be NULL), at that step's own fresh draw: one-draw estimates (ltm_score averages many).
 * Afterwards the model holds z = mu + sigma eps_K of the final forward: ltm_forward_z and
 * ltm_latents_dev use it. */
int ltm_infer(ltm_t *m, const uint32_t *tokens, const uint32_t *targets, const uint8_t *mask,
              const ltm_infer_t *o, double *ce, double *kl, char *err, size_t errlen);
/* Scores the posterior the last ltm_infer fitted (same tokens, targets and mask, shape kept) on
 * S fresh draws z_s = mu + sigma eps_s, eps_s from streams (key, row0 + b) of the inference,
 * apart from the fit's (so reproducible, and independent of the noise q was fitted on). For
 * draw s and row b: ce[s*B + b] = -log p(x_b | z_s) summed over the row's counted targets;
 * kl[b] = KL(q_b || N(0, I)) (closed form; NULL: not wanted); logw[s*B + b] = log p(x_b | z_s)
 * + log N(z_s; 0, I) - log q_b(z_s), the importance weight of an IWAE bound (NULL: not wanted).
 * E_s[ce + kl] >= -log p(x_b) and E[-log mean_{k<K'} exp(logw_k)] >= -log p(x_b) for any q.
 * Afterwards z is the last draw's. Host work per draw: the logits (B,T,V), and with logw the
 * latents (3 L B m D floats). */
int ltm_score(ltm_t *m, const uint32_t *targets, const uint8_t *mask, int S, double *ce, double *kl,
              double *logw, char *err, size_t errlen);
/* z ~ N(0, I) for the current B rows (sequence b: stream (key, row0 + b)). */
void ltm_prior(ltm_t *m, uint64_t key, uint64_t row0);
/* The decoder with the model's current z on tokens (B,T) (B the shape z was made for); with
 * targets, *ce = the mean cross-entropy over counted targets; logits through ltm_logits. */
int ltm_forward_z(ltm_t *m, const uint32_t *tokens, const uint32_t *targets, const uint8_t *mask,
                  float *ce, char *err, size_t errlen);
const float *ltm_logits(ltm_t *m);               /* (B,T,V) on the host, as llama_logits */
const float *ltm_latents_dev(const ltm_t *m);    /* z (L,B,m,D) on the device */
int ltm_batch(const ltm_t *m);                   /* B of the current shape (z's rows) */
/* (m, hd/2) cos/sin tables of the latents' RoPE positions (device), for the generator. */
void ltm_latent_rope(const ltm_t *m, const float **cos_t, const float **sin_t);

/* ---- KV-cache generation (model/kv_ltm.c) ----
 * A gen_t over ltm_decoder(m) (generate.h; the sliding window applies to the cache) with the
 * cross-attention of every block inserted between its self-attention and its MLP. Each cache
 * slot holds its sequence's latents as keys/values per layer: gen_ltm_set_latents takes them
 * from the model's current z (ltm_infer: the posterior inferred from a prompt; ltm_prior: the
 * prior), row b into slots[b]; a chunk may only run on slots that have latents. Decode chunks
 * keep every row independent of the others (linear_rows, attention_rows). */
typedef struct gen_ltm gen_ltm_t;
int gen_ltm_create(gen_ltm_t **g, ltm_t *m, int Bmax, int Tmax, char *err, size_t errlen);
/* The same with chunk buffers for max_rows rows (generate.h gen_create_rows), and its bytes. */
int gen_ltm_create_rows(gen_ltm_t **g, ltm_t *m, int Bmax, int Tmax, int max_rows, char *err,
                        size_t errlen);
size_t gen_ltm_bytes(const gen_ltm_t *g);
void gen_ltm_destroy(gen_ltm_t **g);
void gen_ltm_reset(gen_ltm_t *g);               /* every slot: no positions, no latents */
gen_t *gen_ltm_decoder(gen_ltm_t *g);           /* positions, config, logits */
int gen_ltm_set_latents(gen_ltm_t *g, const int *slots, int B, char *err, size_t errlen);
/* A chunk of B sequences in slots 0..B-1 (gen_step's arguments). */
int gen_ltm_step(gen_ltm_t *g, const uint32_t *tokens, int B, int T, float *all_logits, char *err,
                 size_t errlen);

/* Tests: the next ltm_forward / ltm_infer starts from this posterior (host, (L,B,m,D) each)
 * instead of the draws (once), and its inner step k (k = K: the final forward) uses the noise
 * eps + min(k, n_eps - 1) * L*B*m*D (n_eps >= 1 draws; n_eps = 1: the same eps throughout, the
 * fixed-noise fit whose score is no bound; ltm_score draws its own noise regardless).
 * ltm_posterior downloads the current mu, ls and the gradients of the last inner step dmu, dls
 * (any may be NULL). */
int ltm_set_posterior(ltm_t *m, const float *mu, const float *ls, const float *eps, int n_eps);
int ltm_posterior(ltm_t *m, float *mu, float *ls, float *dmu, float *dls);
size_t ltm_latent_numel(const ltm_t *m);         /* L * B * m * D of the current shape */

/* FLOPs of one forward per token (2 per multiply-add), seed 003 §2.4's four parts summed over
 * the layers: self-attention (projections + scores and values over the keys a row sees on
 * average: min(p + 1, W)), cross-attention (projections; the latents' key/value products shared
 * by the T tokens of a sequence; scores and values over m keys), the SwiGLU MLP, and the
 * embedding/LM head. A config of another kind counts no cross-attention: the baseline. The
 * training FLOPs per token are 3 (K + 1) times this (a backward costs two forwards; K + 1
 * backward passes per batch). */
double ltm_forward_flops(const model_config_t *cfg, int T);
double ltm_train_flops(const model_config_t *cfg, int T);
/* What this implementation executes per token: an inner step's backward computes dL/dz only
 * (no weight gradients: about one forward), so (2 K + 3) forwards; the benchmark's yardstick. */
double ltm_exec_flops(const model_config_t *cfg, int T);
#endif
