/* model/llama_block.c: the decoder block, written step by step like the paper's figure. */
#include "model/llama_block.h"
#include "model/ops.h"
#include "model/ops_math.h"
#include <stdlib.h>
#include <string.h>

static float *zalloc(size_t n) { return calloc(n ? n : 1, sizeof(float)); }

int llama_block_acts_alloc(llama_block_acts_t *a, const model_config_t *c, int Bmax, int Tmax,
                           int separate_kv) {
    size_t N = (size_t)Bmax * Tmax, D = c->d_model, F = c->d_ff;
    size_t hd = D / c->n_heads, Dq = hd * c->n_heads, Dkv = hd * c->n_kv_heads;
    memset(a, 0, sizeof(*a));
    a->xn = zalloc(N * D); a->rstd = zalloc(N);
    if (separate_kv) { a->xn_kv = zalloc(N * D); a->rstd_kv = zalloc(N); }
    a->q = zalloc(N * Dq); a->k = zalloc(N * Dkv); a->v = zalloc(N * Dkv);
    a->att = zalloc(N * Dq); a->lse = zalloc(N * c->n_heads);
    a->x_mid = zalloc(N * D); a->xn2 = zalloc(N * D); a->rstd2 = zalloc(N);
    a->gate = zalloc(N * F); a->up = zalloc(N * F); a->h = zalloc(N * F);
    int ok = a->xn && a->rstd && (!separate_kv || (a->xn_kv && a->rstd_kv)) && a->q && a->k &&
             a->v && a->att && a->lse && a->x_mid && a->xn2 && a->rstd2 && a->gate && a->up && a->h;
    if (!ok) { llama_block_acts_free(a); return -1; }
    return 0;
}

void llama_block_acts_free(llama_block_acts_t *a) {
    float **p[] = {&a->xn, &a->rstd, &a->xn_kv, &a->rstd_kv, &a->q, &a->k, &a->v, &a->att,
                   &a->lse, &a->x_mid, &a->xn2, &a->rstd2, &a->gate, &a->up, &a->h};
    for (size_t i = 0; i < sizeof(p) / sizeof(p[0]); i++) { free(*p[i]); *p[i] = NULL; }
}

int llama_block_scratch_alloc(llama_block_scratch_t *s, const model_config_t *c, int Bmax,
                              int Tmax) {
    size_t N = (size_t)Bmax * Tmax, D = c->d_model, F = c->d_ff;
    size_t hd = D / c->n_heads, Dq = hd * c->n_heads, Dkv = hd * c->n_kv_heads;
    memset(s, 0, sizeof(*s));
    s->dxn = zalloc(N * D); s->dxn_kv = zalloc(N * D);
    s->dq = zalloc(N * Dq); s->dk = zalloc(N * Dkv); s->dv = zalloc(N * Dkv);
    /* dq0 doubles as the (N, Dq + 2 Dkv) q|k|v buffer of the fused projection */
    s->dq0 = zalloc(N * (Dq + 2 * Dkv)); s->dk0 = zalloc(N * Dkv); s->datt = zalloc(N * Dq);
    s->dx_mid = zalloc(N * D); s->branch = zalloc(N * D);
    s->dgate = zalloc(N * F); s->dup = zalloc(N * F); s->dh = zalloc(N * F);
    int ok = s->dxn && s->dxn_kv && s->dq && s->dk && s->dv && s->dq0 && s->dk0 && s->datt &&
             s->dx_mid && s->branch && s->dgate && s->dup && s->dh;
    if (!ok) { llama_block_scratch_free(s); return -1; }
    return 0;
}

void llama_block_scratch_free(llama_block_scratch_t *s) {
    float **p[] = {&s->dxn, &s->dxn_kv, &s->dq, &s->dk, &s->dv, &s->dq0, &s->dk0, &s->datt,
                   &s->dx_mid, &s->branch, &s->dgate, &s->dup, &s->dh};
    for (size_t i = 0; i < sizeof(p) / sizeof(p[0]); i++) { free(*p[i]); *p[i] = NULL; }
}

size_t llama_block_numel(const model_config_t *c) {
    size_t D = c->d_model, F = c->d_ff, hd = D / c->n_heads;
    size_t Dq = hd * c->n_heads, Dkv = hd * c->n_kv_heads;
    return D + Dq * D + 2 * Dkv * D + D * Dq + D + 2 * F * D + D * F;
}

/* q_proj, k_proj and v_proj lie back to back in the parameter (and gradient) buffer, in HF
 * order: then the three projections are ONE product with a (Dq + 2 Dkv, D) weight, which packs
 * the input once instead of three times and reads/writes the input gradient once instead of
 * three times. Checked at run time, since blocks may be laid out by other code. */
static int qkv_contiguous(const llama_block_w_t *w, int D, int Dq, int Dkv) {
    return w->wk == w->wq + (size_t)Dq * D && w->wv == w->wk + (size_t)Dkv * D;
}

/* Fused product rows (q|k|v, row stride Dq + 2 Dkv) -> q and k rotated (RoPE at positions
 * 0..T-1), v copied: the same rotation as rope_forward, reading the strided rows. A NULL
 * destination is skipped (the injection block takes q from one product, k and v from another). */
static void qkv_split_rope(float *q /* (N,Dq) */, float *k /* (N,Dkv) */, float *v /* (N,Dkv) */,
                           const float *qkv /* (N,Dq+2Dkv) */, const float *cos_t,
                           const float *sin_t, int N, int T, int H, int Hkv, int hd) {
    const int Dq = H * hd, Dkv = Hkv * hd, ld = Dq + 2 * Dkv, h2 = hd / 2;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *row = qkv + (size_t)n * ld, *cs = cos_t + (size_t)(n % T) * h2,
                    *sn = sin_t + (size_t)(n % T) * h2;
        if (q)
            for (int h = 0; h < H; h++)
                ops_rope_rotate(q + (size_t)n * Dq + h * hd, row + h * hd, cs, sn, hd, 1.0f);
        if (k)
            for (int h = 0; h < Hkv; h++)
                ops_rope_rotate(k + (size_t)n * Dkv + h * hd, row + Dq + h * hd, cs, sn, hd, 1.0f);
        if (v) memcpy(v + (size_t)n * Dkv, row + Dq + Dkv, sizeof(float) * Dkv);
    }
}

/* The backward of qkv_split_rope: dq, dk rotated back (the inverse rotation, as rope_backward)
 * and dv copied into the fused gradient rows, which are overwritten. */
static void qkv_join_unrope(float *dqkv /* (N,Dq+2Dkv) */, const float *dq, const float *dk,
                            const float *dv, const float *cos_t, const float *sin_t, int N, int T,
                            int H, int Hkv, int hd) {
    const int Dq = H * hd, Dkv = Hkv * hd, ld = Dq + 2 * Dkv, h2 = hd / 2;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float *row = dqkv + (size_t)n * ld;
        const float *cs = cos_t + (size_t)(n % T) * h2, *sn = sin_t + (size_t)(n % T) * h2;
        for (int h = 0; h < H; h++)
            ops_rope_rotate(row + h * hd, dq + (size_t)n * Dq + h * hd, cs, sn, hd, -1.0f);
        for (int h = 0; h < Hkv; h++)
            ops_rope_rotate(row + Dq + h * hd, dk + (size_t)n * Dkv + h * hd, cs, sn, hd, -1.0f);
        memcpy(row + Dq + Dkv, dv + (size_t)n * Dkv, sizeof(float) * Dkv);
    }
}

static void add_into(float *y, const float *a, const float *b, size_t n) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) y[i] = a[i] + b[i];
}

void llama_block_forward(float *x_out, llama_block_acts_t *a, const llama_block_w_t *w,
                         const float *x_q, const float *x_kv, const model_config_t *c,
                         const float *rope_cos, const float *rope_sin, int B, int T, int causal,
                         llama_block_scratch_t *s) {
    const int N = B * T, D = c->d_model, F = c->d_ff, H = c->n_heads, Hkv = c->n_kv_heads;
    const int hd = D / H, Dq = hd * H, Dkv = hd * Hkv;
    a->separate_kv = x_kv != x_q;
    // attention rmsnorm (of each input when queries and keys/values differ)
    rmsnorm_forward(a->xn, a->rstd, x_q, w->attn_norm, N, D, c->norm_eps);
    const float *kv_in = a->xn;
    if (a->separate_kv) {
        rmsnorm_forward(a->xn_kv, a->rstd_kv, x_kv, w->attn_norm, N, D, c->norm_eps);
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
        if (a->separate_kv) {
            linear_forward(s->dq0, kv_in, w->wq, N, D, Dq + 2 * Dkv);
            qkv_split_rope(NULL, a->k, a->v, s->dq0, rope_cos, rope_sin, N, T, H, Hkv, hd);
        }
        linear_forward(s->dq0, a->xn, w->wq, N, D, Dq + 2 * Dkv);
        qkv_split_rope(a->q, a->separate_kv ? NULL : a->k, a->separate_kv ? NULL : a->v, s->dq0,
                       rope_cos, rope_sin, N, T, H, Hkv, hd);
    } else {
        linear_forward(a->q, a->xn, w->wq, N, D, Dq);
        linear_forward(a->k, kv_in, w->wk, N, D, Dkv);
        linear_forward(a->v, kv_in, w->wv, N, D, Dkv);
        rope_forward(a->q, a->q, rope_cos, rope_sin, B, T, H, hd, 0);
        rope_forward(a->k, a->k, rope_cos, rope_sin, B, T, Hkv, hd, 0);
    }
    // attention, output projection, residual on the query stream
    attention_forward(a->att, a->lse, a->q, a->k, a->v, B, T, T, H, Hkv, hd, causal);
    linear_forward(s->branch, a->att, w->wo, N, Dq, D);
    add_into(a->x_mid, x_q, s->branch, (size_t)N * D);
    // MLP rmsnorm, SwiGLU, down projection, residual
    rmsnorm_forward(a->xn2, a->rstd2, a->x_mid, w->mlp_norm, N, D, c->norm_eps);
    linear_forward(a->gate, a->xn2, w->wgate, N, D, F);
    linear_forward(a->up, a->xn2, w->wup, N, D, F);
    swiglu_forward(a->h, a->gate, a->up, N, F);
    linear_forward(s->branch, a->h, w->wdown, N, F, D);
    add_into(x_out, a->x_mid, s->branch, (size_t)N * D);
}

void llama_block_backward(float *dx_q, float *dx_kv, const llama_block_w_t *g, const float *dout,
                          const llama_block_acts_t *a, const llama_block_w_t *w,
                          const float *x_q, const float *x_kv, const model_config_t *c,
                          const float *rope_cos, const float *rope_sin, int B, int T, int causal,
                          llama_block_scratch_t *s) {
    const int N = B * T, D = c->d_model, F = c->d_ff, H = c->n_heads, Hkv = c->n_kv_heads;
    const int hd = D / H, Dq = hd * H, Dkv = hd * Hkv;
    const size_t ND = (size_t)N * D;
    // MLP branch: x_out = x_mid + down(swiglu(gate(n2), up(n2))), n2 = rmsnorm(x_mid)
    memcpy(s->dx_mid, dout, sizeof(float) * ND);
    /* the first write into a scratch gradient overwrites (_set): no zeroing pass */
    linear_backward_set(s->dh, g->wdown, dout, a->h, w->wdown, N, F, D);
    swiglu_backward_set(s->dgate, s->dup, s->dh, a->gate, a->up, N, F);
    linear_backward_set(s->dxn, g->wgate, s->dgate, a->xn2, w->wgate, N, D, F);
    linear_backward(s->dxn, g->wup, s->dup, a->xn2, w->wup, N, D, F);
    rmsnorm_backward(s->dx_mid, g->mlp_norm, s->dxn, a->x_mid, w->mlp_norm, a->rstd2, N, D);
    // attention branch: x_mid = x_q + o(attention(rope(q), rope(k), v))
    linear_backward_set(s->datt, g->wo, s->dx_mid, a->att, w->wo, N, Dq, D);
    memset(s->dq, 0, sizeof(float) * N * Dq);
    memset(s->dk, 0, sizeof(float) * N * Dkv);
    memset(s->dv, 0, sizeof(float) * N * Dkv);
    attention_backward(s->dq, s->dk, s->dv, s->datt, a->att, a->lse, a->q, a->k, a->v, B, T, T, H,
                       Hkv, hd, causal);
    if (!a->separate_kv && qkv_contiguous(w, D, Dq, Dkv) && qkv_contiguous(g, D, Dq, Dkv)) {
        qkv_join_unrope(s->dq0, s->dq, s->dk, s->dv, rope_cos, rope_sin, N, T, H, Hkv, hd);
        linear_backward_set(s->dxn, g->wq, s->dq0, a->xn, w->wq, N, D, Dq + 2 * Dkv);
    } else {
        memset(s->dq0, 0, sizeof(float) * N * Dq);
        memset(s->dk0, 0, sizeof(float) * N * Dkv);
        rope_backward(s->dq0, s->dq, rope_cos, rope_sin, B, T, H, hd, 0);
        rope_backward(s->dk0, s->dk, rope_cos, rope_sin, B, T, Hkv, hd, 0);
        linear_backward_set(s->dxn, g->wq, s->dq0, a->xn, w->wq, N, D, Dq);
        if (a->separate_kv) {
            linear_backward_set(s->dxn_kv, g->wk, s->dk0, a->xn_kv, w->wk, N, D, Dkv);
            linear_backward(s->dxn_kv, g->wv, s->dv, a->xn_kv, w->wv, N, D, Dkv);
            rmsnorm_backward(dx_kv, g->attn_norm, s->dxn_kv, x_kv, w->attn_norm, a->rstd_kv, N, D);
        } else {
            linear_backward(s->dxn, g->wk, s->dk0, a->xn, w->wk, N, D, Dkv);
            linear_backward(s->dxn, g->wv, s->dv, a->xn, w->wv, N, D, Dkv);
        }
    }
    rmsnorm_backward(dx_q, g->attn_norm, s->dxn, x_q, w->attn_norm, a->rstd, N, D);
    // the residual path
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < ND; i++) dx_q[i] += s->dx_mid[i];
}
