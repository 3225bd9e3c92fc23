/* model/llama_block.c: the decoder block, written step by step like the paper's figure. */
#include "model/llama_block.h"
#include "model/ptable.h"
#include <stdlib.h>
#include <string.h>

void llama_block_acts_layout(llama_block_acts_t *a, dev_arena_t *ar, const model_config_t *c,
                             int Bmax, int Tmax, int separate_kv) {
    size_t N = (size_t)Bmax * Tmax, D = c->d_model, F = c->d_ff;
    size_t hd = D / c->n_heads, Dq = hd * c->n_heads, Dkv = hd * c->n_kv_heads;
    memset(a, 0, sizeof(*a));
    a->xn = DEV_TAKE(ar, float, N * D); a->rstd = DEV_TAKE(ar, float, N);
    if (separate_kv) { a->xn_kv = DEV_TAKE(ar, float, N * D); a->rstd_kv = DEV_TAKE(ar, float, N); }
    a->q = DEV_TAKE(ar, float, N * Dq); a->k = DEV_TAKE(ar, float, N * Dkv);
    a->v = DEV_TAKE(ar, float, N * Dkv);
    a->att = DEV_TAKE(ar, float, N * Dq); a->lse = DEV_TAKE(ar, float, N * c->n_heads);
    a->x_mid = DEV_TAKE(ar, float, N * D); a->xn2 = DEV_TAKE(ar, float, N * D);
    a->rstd2 = DEV_TAKE(ar, float, N);
    a->gate = DEV_TAKE(ar, float, N * F); a->up = DEV_TAKE(ar, float, N * F);
    a->h = DEV_TAKE(ar, float, N * F);
}

void llama_block_scratch_layout(llama_block_scratch_t *s, dev_arena_t *ar,
                                const model_config_t *c, int Bmax, int Tmax) {
    size_t N = (size_t)Bmax * Tmax, D = c->d_model, F = c->d_ff;
    size_t hd = D / c->n_heads, Dq = hd * c->n_heads, Dkv = hd * c->n_kv_heads;
    memset(s, 0, sizeof(*s));
    s->dxn = DEV_TAKE(ar, float, N * D); s->dxn_kv = DEV_TAKE(ar, float, N * D);
    s->dq = DEV_TAKE(ar, float, N * Dq); s->dk = DEV_TAKE(ar, float, N * Dkv);
    s->dv = DEV_TAKE(ar, float, N * Dkv);
    /* dq0 doubles as the (N, Dq + 2 Dkv) q|k|v buffer of the fused projection */
    s->dq0 = DEV_TAKE(ar, float, N * (Dq + 2 * Dkv)); s->dk0 = DEV_TAKE(ar, float, N * Dkv);
    s->datt = DEV_TAKE(ar, float, N * Dq);
    s->dx_mid = DEV_TAKE(ar, float, N * D); s->branch = DEV_TAKE(ar, float, N * D);
    s->dgate = DEV_TAKE(ar, float, N * F); s->dup = DEV_TAKE(ar, float, N * F);
    s->dh = DEV_TAKE(ar, float, N * F);
}

int llama_block_acts_alloc(llama_block_acts_t *a, const model_config_t *c, int Bmax, int Tmax,
                           int separate_kv) {
    dev_arena_t ar = {0};
    llama_block_acts_layout(a, &ar, c, Bmax, Tmax, separate_kv);
    if (!(ar.base = calloc(1, ar.used))) return -1;
    ar.used = 0;
    llama_block_acts_layout(a, &ar, c, Bmax, Tmax, separate_kv);
    a->mem = ar.base;
    return 0;
}

void llama_block_acts_free(llama_block_acts_t *a) {
    free(a->mem);
    memset(a, 0, sizeof(*a));
}

int llama_block_scratch_alloc(llama_block_scratch_t *s, const model_config_t *c, int Bmax,
                              int Tmax) {
    dev_arena_t ar = {0};
    llama_block_scratch_layout(s, &ar, c, Bmax, Tmax);
    if (!(ar.base = calloc(1, ar.used))) return -1;
    ar.used = 0;
    llama_block_scratch_layout(s, &ar, c, Bmax, Tmax);
    s->mem = ar.base;
    return 0;
}

void llama_block_scratch_free(llama_block_scratch_t *s) {
    free(s->mem);
    memset(s, 0, sizeof(*s));
}

size_t llama_block_numel(const model_config_t *c) {
    size_t D = c->d_model, F = c->d_ff, hd = D / c->n_heads;
    size_t Dq = hd * c->n_heads, Dkv = hd * c->n_kv_heads;
    return D + Dq * D + 2 * Dkv * D + D * Dq + D + 2 * F * D + D * F;
}

void llama_block_layout(const model_config_t *c, const char *prefix, ptable_t *p,
                        llama_block_w_t *w) {
    const int64_t D = c->d_model, F = c->d_ff, hd = D / c->n_heads;
    const int64_t Dq = hd * c->n_heads, Dkv = hd * c->n_kv_heads;
    w->attn_norm = ptable_vec(p, prefix, "input_layernorm.weight", D);
    w->wq = ptable_mat(p, prefix, "self_attn.q_proj.weight", Dq, D);
    w->wk = ptable_mat(p, prefix, "self_attn.k_proj.weight", Dkv, D);
    w->wv = ptable_mat(p, prefix, "self_attn.v_proj.weight", Dkv, D);
    w->wo = ptable_mat(p, prefix, "self_attn.o_proj.weight", D, Dq);
    w->mlp_norm = ptable_vec(p, prefix, "post_attention_layernorm.weight", D);
    w->wgate = ptable_mat(p, prefix, "mlp.gate_proj.weight", F, D);
    w->wup = ptable_mat(p, prefix, "mlp.up_proj.weight", F, D);
    w->wdown = ptable_mat(p, prefix, "mlp.down_proj.weight", D, F);
}

/* q_proj, k_proj and v_proj lie back to back in the parameter (and gradient) buffer, in HF
 * order: then the three projections are ONE product with a (Dq + 2 Dkv, D) weight, which packs
 * the input once instead of three times and reads/writes the input gradient once instead of
 * three times. Checked at run time, since blocks may be laid out by other code. */
static int qkv_contiguous(const llama_block_w_t *w, int D, int Dq, int Dkv) {
    return w->wk == w->wq + (size_t)Dq * D && w->wv == w->wk + (size_t)Dkv * D;
}

/* A gradient table whose pointers are NULL asks for no weight gradients (the LTM's inner
 * steps want the input gradient only); it takes the fused path like contiguous ones. */
static int grads_fused(const llama_block_w_t *g, int D, int Dq, int Dkv) {
    return !g->wq || qkv_contiguous(g, D, Dq, Dkv);
}

/* the attention branch into s->branch (the residual add is the caller's) */
static void attn_branch(device_t *d, llama_block_acts_t *a, const llama_block_w_t *w,
                        const float *x_q, const float *x_kv, const model_config_t *c,
                        const float *rope_cos, const float *rope_sin, int B, int T, int causal,
                        llama_block_scratch_t *s, int normed) {
    const int N = B * T, D = c->d_model, H = c->n_heads, Hkv = c->n_kv_heads;
    const int hd = D / H, Dq = hd * H, Dkv = hd * Hkv;
    a->separate_kv = x_kv != x_q;
    /* the norms' outputs feed the projections only (their input and weight gradients): a hint
     * to the device (device.h products_only), here and for xn2, h, dgate and dup below */
    dev_products_only(d, a->xn, (size_t)N * D);
    if (a->separate_kv) dev_products_only(d, a->xn_kv, (size_t)N * D);
    // attention rmsnorm (of each input when queries and keys/values differ; the query input's
    // may be done: normed, by the previous block's last residual add)
    if (!normed) DEV(d, rmsnorm_forward, a->xn, a->rstd, x_q, w->attn_norm, N, D, c->norm_eps);
    const float *kv_in = a->xn;
    if (a->separate_kv) {
        DEV(d, rmsnorm_forward, a->xn_kv, a->rstd_kv, x_kv, w->attn_norm, N, D, c->norm_eps);
        kv_in = a->xn_kv;
    }
    // q, k, v projections (one product when possible), then RoPE on q and k
    if (qkv_contiguous(w, D, Dq, Dkv)) {
        /* With separate inputs, k and v of x_kv come from the same (N, Dq + 2 Dkv) product the
         * plain block runs, not from narrower ones: a product's rounding may depend on its
         * shape (kernel edges, blocking), and the Free Transformer's claim "W_post = 0 gives
         * the baseline bit for bit" needs k, v of x + 0 to be those of x on every CPU. The
         * q columns of that product are computed and dropped: Dq x D more per row, in the
         * one or two blocks that take separate inputs. */
        /* q, k, v, split from the fused rows, are read by attention's products only (device.h
         * products_only) */
        dev_products_only(d, a->q, (size_t)N * Dq);
        dev_products_only(d, a->k, (size_t)N * Dkv);
        dev_products_only(d, a->v, (size_t)N * Dkv);
        if (a->separate_kv) {
            DEV(d, linear_forward, s->dq0, kv_in, w->wq, N, D, Dq + 2 * Dkv);
            DEV(d, qkv_split_rope, NULL, a->k, a->v, s->dq0, rope_cos, rope_sin, N, T, H, Hkv, hd, 0);
        }
        DEV(d, linear_forward, s->dq0, a->xn, w->wq, N, D, Dq + 2 * Dkv);
        DEV(d, qkv_split_rope, a->q, a->separate_kv ? NULL : a->k, a->separate_kv ? NULL : a->v, s->dq0,
                       rope_cos, rope_sin, N, T, H, Hkv, hd, 0);
    } else {
        DEV(d, linear_forward, a->q, a->xn, w->wq, N, D, Dq);
        DEV(d, linear_forward, a->k, kv_in, w->wk, N, D, Dkv);
        DEV(d, linear_forward, a->v, kv_in, w->wv, N, D, Dkv);
        DEV(d, rope_forward, a->q, a->q, rope_cos, rope_sin, B, T, H, hd, 0);
        DEV(d, rope_forward, a->k, a->k, rope_cos, rope_sin, B, T, Hkv, hd, 0);
    }
    // attention (a sliding window when the config has one), output projection
    DEV(d, attention_window_forward, a->att, a->lse, a->q, a->k, a->v, B, T, T, H, Hkv, hd, causal,
        c->sliding_window);
    DEV(d, linear_forward, s->branch, a->att, w->wo, N, Dq, D);
}

void llama_block_attn_forward(device_t *d, float *x_mid, llama_block_acts_t *a,
                              const llama_block_w_t *w, const float *x_q, const float *x_kv,
                              const model_config_t *c, const float *rope_cos,
                              const float *rope_sin, int B, int T, int causal,
                              llama_block_scratch_t *s) {
    attn_branch(d, a, w, x_q, x_kv, c, rope_cos, rope_sin, B, T, causal, s, 0);
    // residual on the query stream
    DEV(d, add_forward, x_mid, x_q, s->branch, (size_t)c->d_model * B * T);
}

/* the MLP after its norm (a->xn2 holds rmsnorm(x_in)); next: the norm of x_out to compute in
 * the residual add's pass, or NULL */
static void mlp_after_norm(device_t *d, float *x_out, llama_block_acts_t *a,
                           const llama_block_w_t *w, const float *x_in, const model_config_t *c,
                           int B, int T, llama_block_scratch_t *s, const llama_norm_next_t *next) {
    const int N = B * T, D = c->d_model, F = c->d_ff;
    DEV(d, linear_forward, a->gate, a->xn2, w->wgate, N, D, F);
    DEV(d, linear_forward, a->up, a->xn2, w->wup, N, D, F);
    dev_products_only(d, a->h, (size_t)N * F);
    DEV(d, swiglu_forward, a->h, a->gate, a->up, N, F);
    DEV(d, linear_forward, s->branch, a->h, w->wdown, N, F, D);
    if (next) dev_products_only(d, next->out, (size_t)N * D);
    if (next)
        DEV(d, add_rmsnorm_forward, x_out, next->out, next->rstd, x_in, s->branch, next->w, N, D,
            c->norm_eps);
    else
        DEV(d, add_forward, x_out, x_in, s->branch, (size_t)N * D);
}

void llama_block_mlp_forward(device_t *d, float *x_out, llama_block_acts_t *a,
                             const llama_block_w_t *w, const float *x_in,
                             const model_config_t *c, int B, int T, llama_block_scratch_t *s) {
    // MLP rmsnorm, SwiGLU, down projection, residual
    dev_products_only(d, a->xn2, (size_t)B * T * c->d_model);
    DEV(d, rmsnorm_forward, a->xn2, a->rstd2, x_in, w->mlp_norm, B * T, c->d_model, c->norm_eps);
    mlp_after_norm(d, x_out, a, w, x_in, c, B, T, s, NULL);
}

void llama_block_forward_chain(device_t *d, float *x_out, llama_block_acts_t *a,
                               const llama_block_w_t *w, const float *x_q, const float *x_kv,
                               const model_config_t *c, const float *rope_cos,
                               const float *rope_sin, int B, int T, int causal,
                               llama_block_scratch_t *s, int normed,
                               const llama_norm_next_t *next) {
    attn_branch(d, a, w, x_q, x_kv, c, rope_cos, rope_sin, B, T, causal, s, normed);
    /* x_mid = x_q + branch and the MLP's norm of it in one pass over the rows */
    dev_products_only(d, a->xn2, (size_t)B * T * c->d_model);
    DEV(d, add_rmsnorm_forward, a->x_mid, a->xn2, a->rstd2, x_q, s->branch, w->mlp_norm, B * T,
        c->d_model, c->norm_eps);
    mlp_after_norm(d, x_out, a, w, a->x_mid, c, B, T, s, next);
}

void llama_block_forward(device_t *d, float *x_out, llama_block_acts_t *a, const llama_block_w_t *w,
                         const float *x_q, const float *x_kv, const model_config_t *c,
                         const float *rope_cos, const float *rope_sin, int B, int T, int causal,
                         llama_block_scratch_t *s) {
    llama_block_forward_chain(d, x_out, a, w, x_q, x_kv, c, rope_cos, rope_sin, B, T, causal, s, 0,
                              NULL);
}

void llama_block_mlp_backward(device_t *d, float *dx_in, const llama_block_w_t *g,
                              const float *dout, const llama_block_acts_t *a,
                              const llama_block_w_t *w, const float *x_in,
                              const model_config_t *c, int B, int T, llama_block_scratch_t *s) {
    const int N = B * T, D = c->d_model, F = c->d_ff;
    // MLP branch: x_out = x_in + down(swiglu(gate(n2), up(n2))), n2 = rmsnorm(x_in)
    /* the first write into a scratch gradient overwrites (_set): no zeroing pass */
    DEV(d, linear_backward_set, s->dh, g->wdown, dout, a->h, w->wdown, N, F, D);
    dev_products_only(d, s->dgate, (size_t)N * F);
    dev_products_only(d, s->dup, (size_t)N * F);
    DEV(d, swiglu_backward_set, s->dgate, s->dup, s->dh, a->gate, a->up, N, F);
    DEV(d, linear_backward_set, s->dxn, g->wgate, s->dgate, a->xn2, w->wgate, N, D, F);
    DEV(d, linear_backward, s->dxn, g->wup, s->dup, a->xn2, w->wup, N, D, F);
    /* dx_in = dout (the residual path) + the norm's input gradient, in the norm's pass */
    DEV(d, rmsnorm_backward_res, dx_in, g->mlp_norm, s->dxn, x_in, w->mlp_norm, a->rstd2, dout, N, D);
}

void llama_block_attn_backward(device_t *d, float *dx_q, float *dx_kv, const llama_block_w_t *g,
                               const float *dx_mid, const llama_block_acts_t *a,
                               const llama_block_w_t *w, const float *x_q, const float *x_kv,
                               const model_config_t *c, const float *rope_cos,
                               const float *rope_sin, int B, int T, int causal,
                               llama_block_scratch_t *s) {
    const int N = B * T, D = c->d_model, H = c->n_heads, Hkv = c->n_kv_heads;
    const int hd = D / H, Dq = hd * H, Dkv = hd * Hkv;
    // attention branch: x_mid = x_q + o(attention(rope(q), rope(k), v))
    DEV(d, linear_backward_set, s->datt, g->wo, dx_mid, a->att, w->wo, N, Dq, D);
    if (!a->separate_kv && qkv_contiguous(w, D, Dq, Dkv) && grads_fused(g, D, Dq, Dkv)) {
        /* the fused rows' gradient straight from attention's backward (overwritten, un-rotated:
         * no zeroing, no join pass where the device fuses them; s->dq, dk, dv its scratch); read
         * by the projection's backward products only (device.h products_only: the hint binds the
         * ops writing its shadow, not the forward's product that fills the same buffer with q|k|v
         * for qkv_split_rope) */
        dev_products_only(d, s->dq0, (size_t)N * (Dq + 2 * Dkv));
        DEV(d, attention_backward_qkv, s->dq0, s->dq, s->dk, s->dv, s->datt, a->att, a->lse, a->q,
            a->k, a->v, rope_cos, rope_sin, B, T, H, Hkv, hd, causal, c->sliding_window, 0);
        DEV(d, linear_backward_set, s->dxn, g->wq, s->dq0, a->xn, w->wq, N, D, Dq + 2 * Dkv);
    } else {
        DEV(d, zero, s->dq, sizeof(float) * N * Dq);
        DEV(d, zero, s->dk, sizeof(float) * N * Dkv);
        DEV(d, zero, s->dv, sizeof(float) * N * Dkv);
        DEV(d, attention_window_backward, s->dq, s->dk, s->dv, s->datt, a->att, a->lse, a->q, a->k,
            a->v, B, T, T, H, Hkv, hd, causal, c->sliding_window);
        DEV(d, zero, s->dq0, sizeof(float) * N * Dq);
        DEV(d, zero, s->dk0, sizeof(float) * N * Dkv);
        DEV(d, rope_backward, s->dq0, s->dq, rope_cos, rope_sin, B, T, H, hd, 0);
        DEV(d, rope_backward, s->dk0, s->dk, rope_cos, rope_sin, B, T, Hkv, hd, 0);
        DEV(d, linear_backward_set, s->dxn, g->wq, s->dq0, a->xn, w->wq, N, D, Dq);
        if (a->separate_kv) {
            DEV(d, linear_backward_set, s->dxn_kv, g->wk, s->dk0, a->xn_kv, w->wk, N, D, Dkv);
            DEV(d, linear_backward, s->dxn_kv, g->wv, s->dv, a->xn_kv, w->wv, N, D, Dkv);
            DEV(d, rmsnorm_backward, dx_kv, g->attn_norm, s->dxn_kv, x_kv, w->attn_norm, a->rstd_kv, N, D);
        } else {
            DEV(d, linear_backward, s->dxn, g->wk, s->dk0, a->xn, w->wk, N, D, Dkv);
            DEV(d, linear_backward, s->dxn, g->wv, s->dv, a->xn, w->wv, N, D, Dkv);
        }
    }
    // dx_q = dx_mid (the residual path) + the norm's input gradient, one pass
    DEV(d, rmsnorm_backward_res, dx_q, g->attn_norm, s->dxn, x_q, w->attn_norm, a->rstd, dx_mid, N, D);
}

void llama_block_backward(device_t *d, float *dx_q, float *dx_kv, const llama_block_w_t *g, const float *dout,
                          const llama_block_acts_t *a, const llama_block_w_t *w,
                          const float *x_q, const float *x_kv, const model_config_t *c,
                          const float *rope_cos, const float *rope_sin, int B, int T, int causal,
                          llama_block_scratch_t *s) {
    llama_block_mlp_backward(d, s->dx_mid, g, dout, a, w, a->x_mid, c, B, T, s);
    llama_block_attn_backward(d, dx_q, dx_kv, g, s->dx_mid, a, w, x_q, x_kv, c, rope_cos, rope_sin,
                              B, T, causal, s);
}
