/* model/free.c: the Free Transformer's extras around the llama decoder (see free.h). */
#include "model/free.h"
#include "common/rng.h"
#include "model/ops.h"
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FREE_N_EXTRA 13 /* zeta, 9 encoder tensors, encoder norm, read-out, post-sampler */

struct free_model {
    model_config_t cfg;
    llama_t *dec;
    int Bmax, Tmax, B, T, half, H;
    size_t K;                       /* 2^H */
    uint64_t seed;
    float grad_scale;
    /* the extras: one parameter buffer, one gradient buffer, same layout */
    float *xp, *xg;
    size_t nx;
    free_w_t w, g;
    tensor_view_t *pv, *gv;         /* decoder views, then the extras */
    int ndec, nv;
    /* activations, (Bmax*Tmax) rows */
    float *zq;                      /* (N,D) zeta repeated: the encoder's query input */
    llama_block_acts_t enc;
    float *enc_out, *enc_xn, *enc_rstd; /* (N,D), (N,D), (N) */
    float *bitlog, *prob, *u, *kl;  /* (N,H), (N,H), (N,H), (N) */
    uint32_t *z;                    /* (N) */
    float *xkv;                     /* (N,D) X + R */
    /* backward */
    float *denc_out, *dzq, *dxn, *dbit, *dxkv, *work;
    size_t work_floats;             /* post_sampler_backward's buffer, one chunk per thread */
    /* uniform draws */
    rng_t rng;
    int fixed_u;
    float *u_fixed;
    float *r_off;                   /* (N,D) or NULL: test hook */
    /* the last forward */
    uint8_t *mask;
    int has_mask, has_targets, count, from_encoder;
    double ce, kl_mean, kl_term, above, loss;
};

int free_config_check(const model_config_t *c, int B, int T, char *err, size_t errlen) {
    int rc = llama_config_check(c, B, T, err, errlen);
    if (rc) return rc;
    if (c->kind != MODEL_FREE) {
        snprintf(err, errlen, "free: config kind is %d, not MODEL_FREE", (int)c->kind);
        return FREE_ECONFIG;
    }
    if (c->n_layers < 2) {
        snprintf(err, errlen, "free: needs at least 2 layers (the latent enters at block L/2+1), got %d", c->n_layers);
        return FREE_ECONFIG;
    }
    if (c->latent_bits < 1 || c->latent_bits > 20) {
        snprintf(err, errlen, "free: latent_bits %d must be in 1..20", c->latent_bits);
        return FREE_ECONFIG;
    }
    if (!(c->kappa_nats >= 0) || !isfinite(c->kappa_nats)) {
        snprintf(err, errlen, "free: kappa %g nats must be finite and >= 0", c->kappa_nats);
        return FREE_ECONFIG;
    }
    return 0;
}

static void view_set(tensor_view_t *v, const char *name, float *data, int ndim, int64_t d0, int64_t d1) {
    memset(v, 0, sizeof(*v));
    snprintf(v->name, sizeof(v->name), "%s", name);
    v->ndim = ndim;
    v->shape[0] = d0;
    v->shape[1] = d1;
    v->data = data;
}

/* Lays out the extras in base (NULL: count only), filling views and pointers. */
static size_t layout(const model_config_t *c, float *base, tensor_view_t *views, free_w_t *w) {
    const int64_t D = c->d_model, F = c->d_ff, hd = D / c->n_heads, H = c->latent_bits;
    const int64_t Dq = hd * c->n_heads, Dkv = hd * c->n_kv_heads, K = (int64_t)1 << H;
    size_t off = 0;
    int nv = 0;
    free_w_t t;
#define TAKE(ptr, nm, nd, a, b) do {                                                   \
        float *p_ = base ? base + off : NULL;                                           \
        if (views) view_set(&views[nv], nm, p_, nd, a, b);                              \
        nv++; off += (size_t)(a) * (nd == 2 ? (size_t)(b) : 1);                         \
        ptr = p_;                                                                       \
    } while (0)
    TAKE(t.zeta, "free.zeta", 1, D, 0);
    TAKE(t.enc.attn_norm, "free.encoder.input_layernorm.weight", 1, D, 0);
    TAKE(t.enc.wq, "free.encoder.self_attn.q_proj.weight", 2, Dq, D);
    TAKE(t.enc.wk, "free.encoder.self_attn.k_proj.weight", 2, Dkv, D);
    TAKE(t.enc.wv, "free.encoder.self_attn.v_proj.weight", 2, Dkv, D);
    TAKE(t.enc.wo, "free.encoder.self_attn.o_proj.weight", 2, D, Dq);
    TAKE(t.enc.mlp_norm, "free.encoder.post_attention_layernorm.weight", 1, D, 0);
    TAKE(t.enc.wgate, "free.encoder.mlp.gate_proj.weight", 2, F, D);
    TAKE(t.enc.wup, "free.encoder.mlp.up_proj.weight", 2, F, D);
    TAKE(t.enc.wdown, "free.encoder.mlp.down_proj.weight", 2, D, F);
    TAKE(t.enc_norm, "free.encoder_norm.weight", 1, D, 0);
    TAKE(t.readout, "free.readout.weight", 2, H, D);
    TAKE(t.post, "free.post_sampler.weight", 2, D, K);
#undef TAKE
    if (w) *w = t;
    return off;
}

void free_destroy(free_t **pm) {
    if (!pm || !*pm) return;
    free_t *m = *pm;
    llama_destroy(&m->dec);
    llama_block_acts_free(&m->enc);
    void *p[] = {m->xp, m->xg, m->pv, m->gv, m->zq, m->enc_out, m->enc_xn, m->enc_rstd,
                 m->bitlog, m->prob, m->u, m->kl, m->z, m->xkv, m->denc_out, m->dzq, m->dxn,
                 m->dbit, m->dxkv, m->work, m->u_fixed, m->mask, m->r_off};
    for (size_t i = 0; i < sizeof(p) / sizeof(p[0]); i++) free(p[i]);
    free(m);
    *pm = NULL;
}

int free_create(free_t **pm, const model_config_t *cfg, int Bmax, int Tmax, uint64_t seed,
                char *err, size_t errlen) {
    if (!pm) { snprintf(err, errlen, "free_create: NULL handle"); return FREE_EARG; }
    *pm = NULL;
    int rc = free_config_check(cfg, Bmax, Tmax, err, errlen);
    if (rc) return rc;
    free_t *m = calloc(1, sizeof(*m));
    if (!m) goto oom;
    m->cfg = *cfg;
    m->Bmax = m->B = Bmax;
    m->Tmax = m->T = Tmax;
    m->half = cfg->n_layers / 2;
    m->H = cfg->latent_bits;
    m->K = (size_t)1 << m->H;
    m->seed = seed;
    m->grad_scale = 1.0f;
    /* the decoder is a plain llama (its kind only matters to the checkpoint config) */
    model_config_t dc = *cfg;
    dc.kind = MODEL_LLAMA;
    if ((rc = llama_create(&m->dec, &dc, Bmax, Tmax, seed, err, errlen))) { free_destroy(&m); return rc; }
    const model_config_t *c = &m->cfg;
    const size_t N = (size_t)Bmax * Tmax, D = c->d_model, H = m->H;
    m->ndec = llama_params(m->dec, NULL, 0);
    m->nv = m->ndec + FREE_N_EXTRA;
    m->nx = layout(c, NULL, NULL, NULL);
    m->xp = calloc(m->nx, sizeof(float));
    m->xg = calloc(m->nx, sizeof(float));
    m->pv = calloc(m->nv, sizeof(tensor_view_t));
    m->gv = calloc(m->nv, sizeof(tensor_view_t));
    if (!m->xp || !m->xg || !m->pv || !m->gv) goto oom;
    llama_params(m->dec, m->pv, m->ndec);
    llama_grads(m->dec, m->gv, m->ndec);
    layout(c, m->xp, m->pv + m->ndec, &m->w);
    layout(c, m->xg, m->gv + m->ndec, &m->g);
    if (llama_block_acts_alloc(&m->enc, c, Bmax, Tmax, 1)) goto oom;
    m->zq = calloc(N * D, sizeof(float));
    m->enc_out = calloc(N * D, sizeof(float));
    m->enc_xn = calloc(N * D, sizeof(float));
    m->enc_rstd = calloc(N, sizeof(float));
    m->bitlog = calloc(N * H, sizeof(float));
    m->prob = calloc(N * H, sizeof(float));
    m->u = calloc(N * H, sizeof(float));
    m->u_fixed = calloc(N * H, sizeof(float));
    m->kl = calloc(N, sizeof(float));
    m->z = calloc(N, sizeof(uint32_t));
    m->xkv = calloc(N * D, sizeof(float));
    m->denc_out = calloc(N * D, sizeof(float));
    m->dzq = calloc(N * D, sizeof(float));
    m->dxn = calloc(N * D, sizeof(float));
    m->dbit = calloc(N * H, sizeof(float));
    m->dxkv = calloc(N * D, sizeof(float));
    m->work_floats = post_sampler_work_floats(c->d_model, m->H, omp_get_max_threads());
    m->work = calloc(m->work_floats, sizeof(float));
    m->mask = calloc(N, 1);
    if (!m->zq || !m->enc_out || !m->enc_xn || !m->enc_rstd || !m->bitlog || !m->prob || !m->u ||
        !m->u_fixed || !m->kl || !m->z || !m->xkv || !m->denc_out || !m->dzq || !m->dxn ||
        !m->dbit || !m->dxkv || !m->work || !m->mask)
        goto oom;
    free_init(m, seed);
    free_set_step(m, 0);
    *pm = m;
    return 0;
oom:
    snprintf(err, errlen, "free_create: out of memory for B=%d T=%d H=%d", Bmax, Tmax, cfg->latent_bits);
    free_destroy(&m);
    return FREE_ENOMEM;
}

void free_init(free_t *m, uint64_t seed) {
    llama_init(m->dec, seed);
    rng_t r;
    rng_seed2(&r, seed, 0xF7EE);
    for (int i = m->ndec; i < m->nv; i++) {
        tensor_view_t *v = &m->pv[i];
        int64_t n = tensor_numel(v);
        int normal = v->ndim == 2 || v->data == m->w.zeta;
        for (int64_t j = 0; j < n; j++) v->data[j] = normal ? 0.02f * rng_normal(&r) : 1.0f;
    }
}

const model_config_t *free_config(const free_t *m) { return &m->cfg; }
llama_t *free_decoder(free_t *m) { return m->dec; }
int free_half(const free_t *m) { return m->half; }
free_w_t free_weights(free_t *m) { return m->w; }
free_w_t free_grad_weights(free_t *m) { return m->g; }

int free_set_shape(free_t *m, int B, int T, char *err, size_t errlen) {
    int rc = llama_set_shape(m->dec, B, T, err, errlen);
    if (rc) return rc;
    m->B = B;
    m->T = T;
    return 0;
}

static int copy_views(const tensor_view_t *src, int n, tensor_view_t *views, int cap) {
    if (views)
        for (int i = 0; i < n && i < cap; i++) views[i] = src[i];
    return n;
}
int free_params(free_t *m, tensor_view_t *v, int cap) { return copy_views(m->pv, m->nv, v, cap); }
int free_grads(free_t *m, tensor_view_t *v, int cap) { return copy_views(m->gv, m->nv, v, cap); }
void free_zero_grad(free_t *m) {
    llama_zero_grad(m->dec);
    memset(m->xg, 0, sizeof(float) * m->nx);
}
void free_set_grad_scale(free_t *m, float s) {
    m->grad_scale = s;
    llama_set_grad_scale(m->dec, s);
}

void free_set_step(free_t *m, uint64_t step) { rng_seed2(&m->rng, m->seed ^ FREE_U_SALT, step); }
void free_set_uniforms(free_t *m, const float *u) {
    m->fixed_u = u != NULL;
    if (u) memcpy(m->u_fixed, u, sizeof(float) * m->B * m->T * m->H);
}

void free_set_r_offset(free_t *m, const float *r_off) {
    const size_t n = (size_t)m->Bmax * m->Tmax * m->cfg.d_model;
    if (!r_off) { free(m->r_off); m->r_off = NULL; return; }
    if (!m->r_off && !(m->r_off = malloc(sizeof(float) * n))) return;
    memcpy(m->r_off, r_off, sizeof(float) * m->B * m->T * m->cfg.d_model);
}

/* embed + the first half of the decoder: X = stream(half) */
static int first_half(free_t *m, const uint32_t *tokens, char *err, size_t errlen) {
    m->has_targets = 0;
    int rc = llama_embed(m->dec, tokens, err, errlen);
    if (rc) return rc;
    llama_blocks_forward(m->dec, 0, m->half);
    return 0;
}

/* encoder block (queries: zeta repeated, keys/values: X, non-causal) -> norm -> read-out,
 * and KL_t per position */
static void encoder_forward(free_t *m) {
    const model_config_t *c = &m->cfg;
    const int N = m->B * m->T, D = c->d_model, H = m->H;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) memcpy(m->zq + (size_t)n * D, m->w.zeta, sizeof(float) * D);
    llama_block_forward(m->enc_out, &m->enc, &m->w.enc, m->zq, llama_stream(m->dec, m->half), c,
                        llama_rope_cos(m->dec), llama_rope_sin(m->dec), m->B, m->T, 0,
                        llama_scratch(m->dec));
    rmsnorm_forward(m->enc_xn, m->enc_rstd, m->enc_out, m->w.enc_norm, N, D, c->norm_eps);
    linear_forward(m->bitlog, m->enc_xn, m->w.readout, N, D, H);
    for (int n = 0; n < N; n++) m->kl[n] = binmap_kl(m->bitlog + (size_t)n * H, H);
}

/* R = W_post[:, z] added to X as the injection block's key/value input, then the rest of
 * the decoder and its head */
static int second_half(free_t *m, const uint32_t *targets, const uint8_t *mask, float *ce,
                       char *err, size_t errlen) {
    const int N = m->B * m->T, D = m->cfg.d_model;
    const float *x = llama_stream(m->dec, m->half);
    post_sampler_forward(m->xkv, m->w.post, m->z, N, D, m->H);
    const float *r_off = m->r_off;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < (size_t)N * D; i++) {
        m->xkv[i] += x[i];
        if (r_off) m->xkv[i] += r_off[i];
    }
    llama_block_forward_kv(m->dec, m->half, m->xkv);
    llama_blocks_forward(m->dec, m->half + 1, m->cfg.n_layers);
    return llama_head_forward(m->dec, targets, mask, ce, err, errlen);
}

int free_forward(free_t *m, const uint32_t *tokens, const uint32_t *targets, const uint8_t *mask,
                 float *loss, char *err, size_t errlen) {
    const int N = m->B * m->T, H = m->H;
    int rc = first_half(m, tokens, err, errlen);
    if (rc) return rc;
    encoder_forward(m);
    if (m->fixed_u) memcpy(m->u, m->u_fixed, sizeof(float) * N * H);
    else
        for (size_t i = 0; i < (size_t)N * H; i++) m->u[i] = rng_f32(&m->rng);
    binmap_forward(m->z, m->prob, m->bitlog, m->u, N, H);
    float ce = 0;
    if ((rc = second_half(m, targets, mask, &ce, err, errlen))) return rc;
    m->from_encoder = 1;
    if (!targets) return 0;
    // free bits: mean over counted positions of max(0, KL_t - kappa)
    m->has_mask = mask != NULL;
    if (mask) memcpy(m->mask, mask, N);
    double kl_sum = 0, term = 0;
    int count = 0, above = 0;
    for (int n = 0; n < N; n++) {
        if (mask && !mask[n]) continue;
        count++;
        kl_sum += m->kl[n];
        if (m->kl[n] > m->cfg.kappa_nats) { above++; term += m->kl[n] - m->cfg.kappa_nats; }
    }
    m->count = count;
    m->ce = ce;
    m->kl_mean = count ? kl_sum / count : 0;
    m->kl_term = count ? term / count : 0;
    m->above = count ? (double)above / count : 0;
    m->loss = m->ce + m->kl_term;
    m->has_targets = 1;
    if (loss) *loss = (float)m->loss;
    return 0;
}

int free_backward(free_t *m, char *err, size_t errlen) {
    if (!m->has_targets) {
        snprintf(err, errlen, "free_backward: the last forward was not a training forward with targets");
        return FREE_EARG;
    }
    const model_config_t *c = &m->cfg;
    const int N = m->B * m->T, D = c->d_model, H = m->H, L = c->n_layers;
    llama_t *dec = m->dec;
    // decoder head and second half, down to the injection block
    llama_head_backward(dec);
    llama_blocks_backward(dec, L, m->half + 1);
    memset(m->dxkv, 0, sizeof(float) * N * D);
    llama_block_backward_kv(dec, m->half, m->xkv, m->dxkv);
    // x_kv = X + R: dX gets dx_kv too, and dR = dx_kv
    float *dx = llama_dstream(dec);
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < (size_t)N * D; i++) dx[i] += m->dxkv[i];
    // post-sampler and Binary Mapper: dW_post column gather, dense pass-through to the logits
    memset(m->dbit, 0, sizeof(float) * N * H);
    post_sampler_backward(m->g.post, m->dbit, m->dxkv, m->w.post, m->z, m->prob, N, D, H, m->work,
                          m->work_floats);
    // free-bits KL: only positions above kappa carry a gradient
    if (m->count) {
        const float s = m->grad_scale / (float)m->count;
        for (int n = 0; n < N; n++) {
            if (m->has_mask && !m->mask[n]) continue;
            if (m->kl[n] > c->kappa_nats)
                binmap_kl_backward(m->dbit + (size_t)n * H, m->bitlog + (size_t)n * H, H, s);
        }
    }
    // read-out, encoder norm, encoder block (its key/value input is X: into dx)
    memset(m->dxn, 0, sizeof(float) * N * D);
    linear_backward(m->dxn, m->g.readout, m->dbit, m->enc_xn, m->w.readout, N, D, H);
    memset(m->denc_out, 0, sizeof(float) * N * D);
    rmsnorm_backward(m->denc_out, m->g.enc_norm, m->dxn, m->enc_out, m->w.enc_norm, m->enc_rstd, N, D);
    memset(m->dzq, 0, sizeof(float) * N * D);
    llama_block_backward(m->dzq, dx, &m->g.enc, m->denc_out, &m->enc, &m->w.enc, m->zq,
                         llama_stream(dec, m->half), c, llama_rope_cos(dec), llama_rope_sin(dec),
                         m->B, m->T, 0, llama_scratch(dec));
    /* threads own entries of zeta; each still sums over n in order (same bits as serial) */
#pragma omp parallel for schedule(static)
    for (int i = 0; i < D; i++)
        for (int n = 0; n < N; n++) m->g.zeta[i] += m->dzq[(size_t)n * D + i];
    // first half of the decoder and the embedding
    llama_blocks_backward(dec, m->half, 0);
    llama_embed_backward(dec);
    return 0;
}

int free_forward_z(free_t *m, const uint32_t *tokens, const uint32_t *z, const uint32_t *targets,
                   const uint8_t *mask, float *ce, char *err, size_t errlen) {
    const int N = m->B * m->T;
    if (!z) { snprintf(err, errlen, "free_forward_z: no latent indices"); return FREE_EARG; }
    for (int n = 0; n < N; n++)
        if (z[n] >= m->K) {
            snprintf(err, errlen, "latent index %u at position %d is outside [0, 2^%d)", z[n], n, m->H);
            return FREE_EARG;
        }
    int rc = first_half(m, tokens, err, errlen);
    if (rc) return rc;
    memcpy(m->z, z, sizeof(uint32_t) * N);
    m->from_encoder = 0;
    float l = 0;
    rc = second_half(m, targets, mask, &l, err, errlen);
    if (!rc && targets) {
        m->ce = m->loss = l;
        if (ce) *ce = l;
    }
    return rc;
}

int free_encode(free_t *m, const uint32_t *tokens, char *err, size_t errlen) {
    int rc = first_half(m, tokens, err, errlen);
    if (rc) return rc;
    encoder_forward(m);
    return 0;
}

const float *free_logits(const free_t *m) { return llama_logits(m->dec); }
const float *free_bit_logits(const free_t *m) { return m->bitlog; }
const float *free_kl(const free_t *m) { return m->kl; }
const uint32_t *free_z(const free_t *m) { return m->z; }

void free_metrics(free_t *m, family_metrics_t *out) {
    out->n = 0;
    if (!m->has_targets) return;
    const struct { const char *k; double v; } kv[] = {
        {"ce", m->ce}, {"kl", m->kl_mean}, {"kl_bits", m->kl_mean / M_LN2},
        {"kl_above_kappa", m->above}};
    for (size_t i = 0; i < sizeof(kv) / sizeof(kv[0]) && out->n < FAMILY_MAX_METRICS; i++) {
        snprintf(out->kv[out->n].name, sizeof(out->kv[out->n].name), "%s", kv[i].k);
        out->kv[out->n].value = kv[i].v;
        out->n++;
    }
}
