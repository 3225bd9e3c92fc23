/* model/llama_block.h: one pre-norm decoder block (RMSNorm -> GQA attention with RoPE ->
 * residual -> RMSNorm -> SwiGLU MLP -> residual), forward and backward.
 *
 * Exposed separately from llama.h because the Free Transformer (seed 000, Algorithm 2) reuses
 * it three ways: the plain causal block; the injection block whose key/value input
 * (x + r) differs from its query input x; and the non-causal encoder block whose queries
 * come from a learned constant. All three are this code with `x_kv != x_q` and/or
 * `causal = 0`. The residual always adds to the QUERY stream. */
#ifndef MODEL_LLAMA_BLOCK_H
#define MODEL_LLAMA_BLOCK_H
#include <stddef.h>
#include "model/config.h"
#include "model/device.h"

/* Pointers into a parameter (or gradient) buffer. D = d_model, F = d_ff, hd = D / H. */
typedef struct {
    float *attn_norm;     /* (D)          input_layernorm.weight */
    float *wq;            /* (H*hd, D)    self_attn.q_proj.weight */
    float *wk;            /* (Hkv*hd, D)  self_attn.k_proj.weight */
    float *wv;            /* (Hkv*hd, D)  self_attn.v_proj.weight */
    float *wo;            /* (D, H*hd)    self_attn.o_proj.weight */
    float *mlp_norm;      /* (D)          post_attention_layernorm.weight */
    float *wgate;         /* (F, D)       mlp.gate_proj.weight */
    float *wup;           /* (F, D)       mlp.up_proj.weight */
    float *wdown;         /* (D, F)       mlp.down_proj.weight */
} llama_block_w_t;

/* What the forward keeps for the backward, sized for (Bmax, Tmax) rows. */
typedef struct {
    int separate_kv;      /* set by the last forward: x_kv was a different tensor */
    float *xn, *rstd;     /* (N,D), (N): attention-norm of x_q */
    float *xn_kv, *rstd_kv; /* (N,D), (N): attention-norm of x_kv (only when separate) */
    float *q;             /* (N,H*hd) after RoPE */
    float *k, *v;         /* (N,Hkv*hd), k after RoPE */
    float *att, *lse;     /* (N,H*hd) attention output, (B,H,T) its log-sum-exp */
    float *x_mid;         /* (N,D) x_q + attention branch */
    float *xn2, *rstd2;   /* (N,D), (N): MLP-norm of x_mid */
    float *gate, *up, *h; /* (N,F) each; h = silu(gate) * up */
    void *mem;            /* the allocation of llama_block_acts_alloc (NULL in an arena) */
} llama_block_acts_t;

/* Scratch shared by every block's backward (and the forward's branch output). */
typedef struct {
    float *dxn, *dxn_kv;  /* (N,D) */
    float *dq, *dk, *dv;  /* (N,H*hd), (N,Hkv*hd) x2: gradients after RoPE */
    float *dq0, *dk0;     /* same, before RoPE */
    float *datt;          /* (N,H*hd) */
    float *dx_mid, *branch; /* (N,D) */
    float *dgate, *dup, *dh; /* (N,F) */
    void *mem;            /* the allocation of llama_block_scratch_alloc (NULL in an arena) */
} llama_block_scratch_t;

/* Lays the buffers out in an arena (device.h: count with a NULL base, then carve the one
 * allocation); separate_kv asks for the x_kv buffers too. */
void llama_block_acts_layout(llama_block_acts_t *a, dev_arena_t *ar, const model_config_t *c,
                             int Bmax, int Tmax, int separate_kv);
void llama_block_scratch_layout(llama_block_scratch_t *s, dev_arena_t *ar,
                                const model_config_t *c, int Bmax, int Tmax);
/* The same in host memory of their own (tests of the block alone): 0 or -1 (out of memory). */
int llama_block_acts_alloc(llama_block_acts_t *a, const model_config_t *c, int Bmax, int Tmax,
                           int separate_kv);
void llama_block_acts_free(llama_block_acts_t *a);
int llama_block_scratch_alloc(llama_block_scratch_t *s, const model_config_t *c, int Bmax,
                              int Tmax);
void llama_block_scratch_free(llama_block_scratch_t *s);

/* Parameters in HF order, counted in floats, for layout code. */
size_t llama_block_numel(const model_config_t *c);
/* Takes one block's 9 tensors from p (ptable.h) in HF order, named prefix + the HF suffix
 * (input_layernorm.weight, self_attn.q_proj.weight, ...): q, k, v back to back, as the fused
 * projection wants. For models built from blocks (model/mixers.c's transformer twins). */
struct ptable;
void llama_block_layout(const model_config_t *c, const char *prefix, struct ptable *p,
                        llama_block_w_t *w);

/* x_out = block(x_q, x_kv) on device d (every pointer is d's); pass x_kv == x_q for a plain
 * block. x_out must differ from both.
 * rope_cos/rope_sin: (max_seq, hd/2) tables (rope_table_init). */
void llama_block_forward(device_t *d, float *x_out /* (B,T,D) */, llama_block_acts_t *a,
                         const llama_block_w_t *w, const float *x_q /* (B,T,D) */,
                         const float *x_kv /* (B,T,D) */, const model_config_t *c,
                         const float *rope_cos, const float *rope_sin, int B, int T, int causal,
                         llama_block_scratch_t *s);
/* A stack of blocks: the norm that reads a block's output (the next block's attention norm,
 * or the model's final norm) computed in the block's last residual add (add_rmsnorm_forward:
 * the same bits, one pass fewer over the stream). next (or NULL): that norm's weight and
 * where its output and rstd go; normed: a->xn and a->rstd already hold the attention norm of
 * x_q (the previous block's next). llama_block_forward is normed = 0, next = NULL. */
typedef struct {
    const float *w;  /* (D) */
    float *out;      /* (B,T,D) */
    float *rstd;     /* (B,T) */
} llama_norm_next_t;
void llama_block_forward_chain(device_t *d, float *x_out, llama_block_acts_t *a,
                               const llama_block_w_t *w, const float *x_q, const float *x_kv,
                               const model_config_t *c, const float *rope_cos,
                               const float *rope_sin, int B, int T, int causal,
                               llama_block_scratch_t *s, int normed,
                               const llama_norm_next_t *next);
/* The two sublayers apart, for a family that puts a sublayer between them (the LTM's
 * cross-attention, model/ltm.h): llama_block_forward is
 *     attn:  x_mid = x_q + o(attention(q of x_q, k/v of x_kv))   (a->x_mid in the whole block)
 *     mlp:   x_out = x_in + down(swiglu(norm(x_in)))              (x_in = x_mid there)
 * and the backward is mlp_backward then attn_backward. The attention is causal with the
 * config's sliding_window (0: unlimited). mlp_backward OVERWRITES dx_in (= dout + the branch's
 * gradient; it must not alias dout); attn_backward reads dx_mid (which must not be one of the
 * scratch's buffers other than dx_mid), OVERWRITES dx_q (= dx_mid + the branch's gradient, in
 * the norm's backward pass: no zeroing before, no add after) and accumulates into dx_kv. A gradient table g
 * whose pointers are NULL computes no weight gradients (input gradients only). */
void llama_block_attn_forward(device_t *d, float *x_mid /* (B,T,D) */, llama_block_acts_t *a,
                              const llama_block_w_t *w, const float *x_q, const float *x_kv,
                              const model_config_t *c, const float *rope_cos,
                              const float *rope_sin, int B, int T, int causal,
                              llama_block_scratch_t *s);
void llama_block_mlp_forward(device_t *d, float *x_out /* (B,T,D) */, llama_block_acts_t *a,
                             const llama_block_w_t *w, const float *x_in /* (B,T,D) */,
                             const model_config_t *c, int B, int T, llama_block_scratch_t *s);
void llama_block_mlp_backward(device_t *d, float *dx_in /* (B,T,D) = */, const llama_block_w_t *g,
                              const float *dout, const llama_block_acts_t *a,
                              const llama_block_w_t *w, const float *x_in,
                              const model_config_t *c, int B, int T, llama_block_scratch_t *s);
void llama_block_attn_backward(device_t *d, float *dx_q /* = */, float *dx_kv /* += */,
                               const llama_block_w_t *g, const float *dx_mid,
                               const llama_block_acts_t *a, const llama_block_w_t *w,
                               const float *x_q, const float *x_kv, const model_config_t *c,
                               const float *rope_cos, const float *rope_sin, int B, int T,
                               int causal, llama_block_scratch_t *s);

/* Writes the query input's gradient into dx_q (overwritten: dout + the block's terms),
 * accumulates the key/value input's into dx_kv (ignored when the forward had x_kv == x_q; it
 * must differ from dx_q otherwise, since dx_q is written after it) and the weight gradients
 * into g. dout must not alias dx_q / dx_kv. x_q / x_kv are the forward's inputs. */
void llama_block_backward(device_t *d, float *dx_q /* (B,T,D) = */, float *dx_kv /* (B,T,D) += */,
                          const llama_block_w_t *g, const float *dout /* (B,T,D) */,
                          const llama_block_acts_t *a, const llama_block_w_t *w,
                          const float *x_q, const float *x_kv, const model_config_t *c,
                          const float *rope_cos, const float *rope_sin, int B, int T, int causal,
                          llama_block_scratch_t *s);
#endif
