/* model/mixer_block.c: the masked-mixer block, step by step (see mixer_block.h). */
#include "model/mixer_block.h"

#include <string.h>

mixer_mix_t mixer_block_mix(const model_config_t *c, int causal) {
    return (mixer_mix_t){.h = c->mixer_heads, .k = c->mixer_kernel, .Tw = c->max_seq, .causal = causal};
}

void mixer_block_layout(const model_config_t *c, const char *prefix, ptable_t *p,
                        mixer_block_w_t *w) {
    const int64_t D = c->d_model, F = c->d_ff, h = c->mixer_heads, T = c->max_seq;
    const int64_t mix[4] = {h, c->mixer_kernel, T, T};
    w->mix_norm = ptable_vec(p, prefix, "input_layernorm.weight", D);
    w->in_proj = h > 1 ? ptable_mat(p, prefix, "mixer.in_proj.weight", D, D) : NULL;
    w->mix_w = ptable_take(p, prefix, "mixer.weight", 4, mix);
    w->mix_b = ptable_vec(p, prefix, "mixer.bias", h * T);
    w->out_proj = h > 1 ? ptable_mat(p, prefix, "mixer.out_proj.weight", D, D) : NULL;
    w->mlp_norm = ptable_vec(p, prefix, "post_mixer_layernorm.weight", D);
    w->wgate = ptable_mat(p, prefix, "mlp.gate_proj.weight", F, D);
    w->wup = ptable_mat(p, prefix, "mlp.up_proj.weight", F, D);
    w->wdown = ptable_mat(p, prefix, "mlp.down_proj.weight", D, F);
}

void mixer_block_acts_layout(mixer_block_acts_t *a, dev_arena_t *ar, const model_config_t *c,
                             int Bmax, int Tmax) {
    const size_t N = (size_t)Bmax * Tmax, D = c->d_model, F = c->d_ff;
    memset(a, 0, sizeof *a);
    a->xn = DEV_TAKE(ar, float, N * D);
    a->rstd = DEV_TAKE(ar, float, N);
    a->z = c->mixer_heads > 1 ? DEV_TAKE(ar, float, N * D) : NULL;
    a->u = DEV_TAKE(ar, float, N * D);
    a->x_mid = DEV_TAKE(ar, float, N * D);
    a->xn2 = DEV_TAKE(ar, float, N * D);
    a->rstd2 = DEV_TAKE(ar, float, N);
    a->gate = DEV_TAKE(ar, float, N * F);
    a->up = DEV_TAKE(ar, float, N * F);
    a->h = DEV_TAKE(ar, float, N * F);
}

void mixer_block_scratch_layout(mixer_block_scratch_t *s, dev_arena_t *ar,
                                const model_config_t *c, int Bmax, int Tmax) {
    const size_t N = (size_t)Bmax * Tmax, D = c->d_model, F = c->d_ff;
    const mixer_mix_t mix = mixer_block_mix(c, 1);
    memset(s, 0, sizeof *s);
    s->wm = DEV_TAKE(ar, float, mixer_mix_weight_floats(&mix));
    s->dws = DEV_TAKE(ar, float, mixer_mix_weight_floats(&mix));
    s->du = DEV_TAKE(ar, float, N * D);
    s->dz = DEV_TAKE(ar, float, N * D);
    s->dxn = DEV_TAKE(ar, float, N * D);
    s->dx_mid = DEV_TAKE(ar, float, N * D);
    s->branch = DEV_TAKE(ar, float, N * D);
    s->dgate = DEV_TAKE(ar, float, N * F);
    s->dup = DEV_TAKE(ar, float, N * F);
    s->dh = DEV_TAKE(ar, float, N * F);
}

void mixer_block_forward(device_t *d, float *x_out, mixer_block_acts_t *a,
                         const mixer_block_w_t *w, const float *x, const model_config_t *c, int B,
                         int T, int causal, mixer_block_scratch_t *s) {
    const int N = B * T, D = c->d_model, F = c->d_ff;
    const mixer_mix_t mix = mixer_block_mix(c, causal);
    // mixing rmsnorm, the heads' input projection
    DEV(d, rmsnorm_forward, a->xn, a->rstd, x, w->mix_norm, N, D, c->norm_eps);
    const float *z = a->xn;
    if (w->in_proj) {
        DEV(d, linear_forward, a->z, a->xn, w->in_proj, N, D, D);
        z = a->z;
    }
    // token mixing (masked when causal), the heads' output projection, residual
    mixer_mix_forward(d, a->u, z, w->mix_w, w->mix_b, s->wm, B, T, D, &mix);
    const float *branch = a->u;
    if (w->out_proj) {
        DEV(d, linear_forward, s->branch, a->u, w->out_proj, N, D, D);
        branch = s->branch;
    }
    // ... and the MLP's rmsnorm of x_mid, in one pass (its output, SwiGLU's and SwiGLU's
    // gradients feed products only: device.h products_only)
    dev_products_only(d, a->xn2, (size_t)N * D);
    dev_products_only(d, a->h, (size_t)N * F);
    DEV(d, add_rmsnorm_forward, a->x_mid, a->xn2, a->rstd2, x, branch, w->mlp_norm, N, D, c->norm_eps);
    // SwiGLU, down projection, residual
    DEV(d, linear_forward, a->gate, a->xn2, w->wgate, N, D, F);
    DEV(d, linear_forward, a->up, a->xn2, w->wup, N, D, F);
    DEV(d, swiglu_forward, a->h, a->gate, a->up, N, F);
    DEV(d, linear_forward, s->branch, a->h, w->wdown, N, F, D);
    DEV(d, add_forward, x_out, a->x_mid, s->branch, (size_t)N * D);
}

void mixer_block_backward(device_t *d, float *dx, const mixer_block_w_t *g, const float *dout,
                          const mixer_block_acts_t *a, const mixer_block_w_t *w, const float *x,
                          const model_config_t *c, int B, int T, int causal,
                          mixer_block_scratch_t *s) {
    const int N = B * T, D = c->d_model, F = c->d_ff;
    const mixer_mix_t mix = mixer_block_mix(c, causal);
    // MLP branch: x_out = x_mid + down(swiglu(gate(n2), up(n2))), n2 = rmsnorm(x_mid)
    DEV(d, linear_backward_set, s->dh, g->wdown, dout, a->h, w->wdown, N, F, D);
    dev_products_only(d, s->dgate, (size_t)N * F);
    dev_products_only(d, s->dup, (size_t)N * F);
    DEV(d, swiglu_backward_set, s->dgate, s->dup, s->dh, a->gate, a->up, N, F);
    DEV(d, linear_backward_set, s->dxn, g->wgate, s->dgate, a->xn2, w->wgate, N, D, F);
    DEV(d, linear_backward, s->dxn, g->wup, s->dup, a->xn2, w->wup, N, D, F);
    /* dx_mid = dout (the residual path) + the norm's input gradient, one pass */
    DEV(d, rmsnorm_backward_res, s->dx_mid, g->mlp_norm, s->dxn, a->x_mid, w->mlp_norm, a->rstd2, dout, N, D);
    // mixing branch: x_mid = x + out(mix(in(rmsnorm(x))))
    const float *du = s->dx_mid;
    if (w->out_proj) {
        DEV(d, linear_backward_set, s->du, g->out_proj, s->dx_mid, a->u, w->out_proj, N, D, D);
        du = s->du;
    }
    const float *z = w->in_proj ? a->z : a->xn;
    float *dz = w->in_proj ? s->dz : s->dxn;
    mixer_mix_backward(d, dz, g->mix_w, g->mix_b, du, z, w->mix_w, s->wm, s->dws, B, T, D, &mix);
    if (w->in_proj) DEV(d, linear_backward_set, s->dxn, g->in_proj, s->dz, a->xn, w->in_proj, N, D, D);
    // dx = dx_mid (the residual path) + the norm's input gradient, one pass
    DEV(d, rmsnorm_backward_res, dx, g->mix_norm, s->dxn, x, w->mix_norm, a->rstd, s->dx_mid, N, D);
}
