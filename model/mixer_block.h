/* model/mixer_block.h: one masked-mixer block (seed 004), the Llama block of llama_block.h
 * with self-attention replaced by token mixing:
 *
 *   x -> RMSNorm -> [in_proj] -> token mixing (mixer_mix.h) -> [out_proj] -> + x   (= x_mid)
 *     -> RMSNorm -> SwiGLU MLP -> + x_mid
 *
 * "flat" (h = 1): the mixing reads the normed stream itself, no projections; h > 1: an input
 * projection (D x D) gives h heads of width D / h, each mixed by its own weights, and an
 * output projection (D x D) joins them (seed 004's multi-headed mixer with a total projection
 * width of d_m, so its inter-token parameters are n_l (h T^2 + 2 d^2)). Kernel k > 1: every
 * output element also mixes the k neighbouring elements of its head (seed 004's k > 1).
 * The original uses LayerNorm and a GELU MLP; here the norm and the MLP are the Llama block's
 * (RMSNorm, SwiGLU), so a mixer and its transformer twin differ only in the token mixing.
 *
 * Checkpoint names under a block prefix P (e.g. "model.layers.0."), in this order:
 *   P input_layernorm.weight (D)          P mixer.in_proj.weight (D, D)   [h > 1]
 *   P mixer.weight (h, k, T, T)           P mixer.bias (h*T)
 *   P mixer.out_proj.weight (D, D)        [h > 1]
 *   P post_mixer_layernorm.weight (D)     P mlp.gate_proj.weight (F, D)
 *   P mlp.up_proj.weight (F, D)           P mlp.down_proj.weight (D, F)
 * mixer.weight[i][j] is head i's tap j: row t mixes positions s (s <= t when masked). As a
 * torch Conv1d(T, T, k) weight (out t, in s, tap j) it is weight.permute(2, 0, 1) per head. */
#ifndef MODEL_MIXER_BLOCK_H
#define MODEL_MIXER_BLOCK_H
#include <stddef.h>

#include "model/config.h"
#include "model/device.h"
#include "model/mixer_mix.h"
#include "model/ptable.h"

/* Pointers into a parameter (or gradient) buffer. */
typedef struct {
    float *mix_norm;      /* (D) */
    float *in_proj;       /* (D, D) or NULL (h = 1) */
    float *mix_w;         /* (h, k, T, T) */
    float *mix_b;         /* (h*T) */
    float *out_proj;      /* (D, D) or NULL */
    float *mlp_norm;      /* (D) */
    float *wgate, *wup;   /* (F, D) */
    float *wdown;         /* (D, F) */
} mixer_block_w_t;

/* What the forward keeps for the backward, for (Bmax, Tmax) rows. */
typedef struct {
    float *xn, *rstd;     /* (N,D), (N): mixing norm of x */
    float *z;             /* (N,D) the mixing's input: in_proj(xn) (h > 1), else xn itself */
    float *u;             /* (N,D) the mixing's output (out_proj's input) */
    float *x_mid;         /* (N,D) */
    float *xn2, *rstd2;   /* (N,D), (N) */
    float *gate, *up, *h; /* (N,F) */
} mixer_block_acts_t;

/* Scratch shared by the blocks of a model. */
typedef struct {
    float *wm, *dws;      /* (h k T T) each: masked weight, raw weight gradient */
    float *du, *dz, *dxn; /* (N,D) */
    float *dx_mid, *branch; /* (N,D) */
    float *dgate, *dup, *dh; /* (N,F) */
} mixer_block_scratch_t;

/* The block's shape from a config: heads, kernel, n_ctx = max_seq; causal as given. */
mixer_mix_t mixer_block_mix(const model_config_t *c, int causal);
/* Takes one block's tensors from p (ptable.h), in the order above, named prefix + suffix. */
void mixer_block_layout(const model_config_t *c, const char *prefix, ptable_t *p,
                        mixer_block_w_t *w);
void mixer_block_acts_layout(mixer_block_acts_t *a, dev_arena_t *ar, const model_config_t *c,
                             int Bmax, int Tmax);
void mixer_block_scratch_layout(mixer_block_scratch_t *s, dev_arena_t *ar,
                                const model_config_t *c, int Bmax, int Tmax);

/* x_out = block(x) on device d (x_out must differ from x). */
void mixer_block_forward(device_t *d, float *x_out /* (B,T,D) */, mixer_block_acts_t *a,
                         const mixer_block_w_t *w, const float *x /* (B,T,D) */,
                         const model_config_t *c, int B, int T, int causal,
                         mixer_block_scratch_t *s);
/* dx (B,T,D) = d/dx (overwritten: no zeroing before); the weight gradients += into g. dout
 * must not alias dx. */
void mixer_block_backward(device_t *d, float *dx, const mixer_block_w_t *g, const float *dout,
                          const mixer_block_acts_t *a, const mixer_block_w_t *w, const float *x,
                          const model_config_t *c, int B, int T, int causal,
                          mixer_block_scratch_t *s);
#endif
