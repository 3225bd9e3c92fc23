/* model/free.c: the Free Transformer's extras around the llama decoder (see free.h). */
#include "model/free.h"
#include "common/rng.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FREE_N_EXTRA 13 /* zeta, 9 encoder tensors, encoder norm, read-out, post-sampler */

struct free_model {
    model_config_t cfg;
    llama_t *dec;
    device_t *dev;                  /* the decoder's; every buffer below is on it */
    int Bmax, Tmax, B, T, half, H;
    size_t K;                       /* 2^H */
    uint64_t seed;
    float grad_scale;
    /* the extras: one parameter buffer, one gradient buffer, same layout */
    float *xp, *xg;
    size_t nx;
    free_w_t w, g;
    tensor_view_t *pv, *gv;         /* decoder views, then the extras (host arrays) */
    int ndec, nv;
    /* activations, (Bmax*Tmax) rows, one allocation (act_layout) */
    void *act_mem;
    size_t act_bytes;
    float *zq;                      /* (N,D) zeta repeated: the encoder's query input */
    llama_block_acts_t enc;
    float *enc_out, *enc_xn, *enc_rstd; /* (N,D), (N,D), (N) */
    float *bitlog, *prob, *u, *kl;  /* (N,H), (N,H), (N,H), (N) */
    uint32_t *z;                    /* (N) */
    float *xkv;                     /* (N,D) X + R */
    float *denc_out, *dzq, *dxn, *dbit, *dxkv; /* backward */
    uint8_t *mask;                  /* (N) */
    float *u_fixed;                 /* (N,H) free_set_uniforms */
    float *r_off;                   /* (N,D) or NULL: test hook, allocated on first use */
    /* uniform draws: counter-based (common/rng.h), keyed by (seed, step); the forwards of
     * one step take consecutive counters */
    uint64_t u_key, u_counter;
    int fixed_u;
    /* host copies of the results programs read, when the device is not the host */
    float *bitlog_host, *kl_host;
    uint32_t *z_host;
    /* the last forward */
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

static void act_layout(free_t *m, dev_arena_t *ar) {
    const model_config_t *c = &m->cfg;
    const size_t N = (size_t)m->Bmax * m->Tmax, D = c->d_model, H = m->H;
    m->zq = DEV_TAKE(ar, float, N * D);
    llama_block_acts_layout(&m->enc, ar, c, m->Bmax, m->Tmax, 1);
    m->enc_out = DEV_TAKE(ar, float, N * D);
    m->enc_xn = DEV_TAKE(ar, float, N * D);
    m->enc_rstd = DEV_TAKE(ar, float, N);
    m->bitlog = DEV_TAKE(ar, float, N * H);
    m->prob = DEV_TAKE(ar, float, N * H);
    m->u = DEV_TAKE(ar, float, N * H);
    m->u_fixed = DEV_TAKE(ar, float, N * H);
    m->kl = DEV_TAKE(ar, float, N);
    m->z = DEV_TAKE(ar, uint32_t, N);
    m->xkv = DEV_TAKE(ar, float, N * D);
    m->denc_out = DEV_TAKE(ar, float, N * D);
    m->dzq = DEV_TAKE(ar, float, N * D);
    m->dxn = DEV_TAKE(ar, float, N * D);
    m->dbit = DEV_TAKE(ar, float, N * H);
    m->dxkv = DEV_TAKE(ar, float, N * D);
    m->mask = DEV_TAKE(ar, uint8_t, N);
}

void free_destroy(free_t **pm) {
    if (!pm || !*pm) return;
    free_t *m = *pm;
    if (m->dev) {
        void *d[] = {m->xp, m->xg, m->act_mem, m->r_off};
        for (size_t i = 0; i < sizeof(d) / sizeof(d[0]); i++)
            if (d[i]) DEV(m->dev, free, d[i]);
    }
    llama_destroy(&m->dec);
    void *p[] = {m->pv, m->gv, m->bitlog_host, m->kl_host, m->z_host};
    for (size_t i = 0; i < sizeof(p) / sizeof(p[0]); i++) free(p[i]);
    free(m);
    *pm = NULL;
}

int free_create(free_t **pm, const model_config_t *cfg, int Bmax, int Tmax, uint64_t seed,
                char *err, size_t errlen) {
    return free_create_on(pm, device_cpu_default(), cfg, Bmax, Tmax, seed, err, errlen);
}

int free_create_on(free_t **pm, device_t *dev, const model_config_t *cfg, int Bmax, int Tmax,
                   uint64_t seed, char *err, size_t errlen) {
    if (!pm || !dev) { snprintf(err, errlen, "free_create: NULL handle or device"); return FREE_EARG; }
    *pm = NULL;
    int rc = free_config_check(cfg, Bmax, Tmax, err, errlen);
    if (rc) return rc;
    char what[64] = "model", b1[32];
    free_t *m = calloc(1, sizeof(*m));
    if (!m) goto oom;
    m->cfg = *cfg;
    m->dev = dev;
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
    if ((rc = llama_create_on(&m->dec, dev, &dc, Bmax, Tmax, seed, err, errlen))) {
        free_destroy(&m);
        return rc;
    }
    const model_config_t *c = &m->cfg;
    m->ndec = llama_params(m->dec, NULL, 0);
    m->nv = m->ndec + FREE_N_EXTRA;
    m->nx = layout(c, NULL, NULL, NULL);
    m->pv = calloc(m->nv, sizeof(tensor_view_t));
    m->gv = calloc(m->nv, sizeof(tensor_view_t));
    if (!m->pv || !m->gv) goto oom;
    snprintf(what, sizeof what, "latent parameters (%s)", device_bytes_str(sizeof(float) * m->nx, b1, sizeof b1));
    if (!(m->xp = DEV(dev, alloc, sizeof(float) * m->nx)) ||
        !(m->xg = DEV(dev, alloc, sizeof(float) * m->nx)))
        goto oom;
    llama_params(m->dec, m->pv, m->ndec);
    llama_grads(m->dec, m->gv, m->ndec);
    layout(c, m->xp, m->pv + m->ndec, &m->w);
    layout(c, m->xg, m->gv + m->ndec, &m->g);
    for (int i = m->ndec; i < m->nv; i++) m->pv[i].dev = m->gv[i].dev = dev;
    dev_arena_t ar = {0};
    act_layout(m, &ar);
    m->act_bytes = ar.used;
    snprintf(what, sizeof what, "latent activations (%s)", device_bytes_str(m->act_bytes, b1, sizeof b1));
    if (!(m->act_mem = DEV(dev, alloc, m->act_bytes))) goto oom;
    ar.base = m->act_mem;
    ar.used = 0;
    act_layout(m, &ar);
    if (free_init(m, seed)) goto oom;
    free_set_step(m, 0);
    *pm = m;
    return 0;
oom:
    snprintf(err, errlen, "free_create: out of memory for the %s of B=%d T=%d H=%d on %s", what,
             Bmax, Tmax, cfg->latent_bits, dev->name);
    free_destroy(&m);
    return FREE_ENOMEM;
}

void free_memory(const free_t *m, model_memory_t *out) {
    llama_memory(m->dec, out);
    out->params += sizeof(float) * m->nx;
    out->grads += sizeof(float) * m->nx;
    out->activations += m->act_bytes;
}

int free_init(free_t *m, uint64_t seed) {
    if (llama_init(m->dec, seed)) return FREE_ENOMEM;
    /* drawn on the host in view order (the same weights on every device), then uploaded */
    float *host = device_is_host(m->dev) ? m->xp : malloc(sizeof(float) * m->nx);
    if (!host) return FREE_ENOMEM;
    rng_t r;
    rng_seed2(&r, seed, 0xF7EE);
    for (int i = m->ndec; i < m->nv; i++) {
        const tensor_view_t *v = &m->pv[i];
        float *p = host + (v->data - m->xp);
        int64_t n = tensor_numel(v);
        int normal = v->ndim == 2 || v->data == m->w.zeta;
        for (int64_t j = 0; j < n; j++) p[j] = normal ? 0.02f * rng_normal(&r) : 1.0f;
    }
    if (host != m->xp) {
        DEV(m->dev, upload, m->xp, host, sizeof(float) * m->nx);
        free(host);
    }
    return 0;
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
    DEV(m->dev, zero, m->xg, sizeof(float) * m->nx);
}
void free_set_grad_scale(free_t *m, float s) {
    m->grad_scale = s;
    llama_set_grad_scale(m->dec, s);
}

void free_set_step(free_t *m, uint64_t step) {
    m->u_key = rng_counter_key(m->seed ^ FREE_U_SALT, step);
    m->u_counter = 0;
}
void free_set_row(free_t *m, uint64_t row0) { m->u_counter = row0 * (uint64_t)m->T * m->H; }
void free_set_uniforms(free_t *m, const float *u) {
    m->fixed_u = u != NULL;
    if (u) DEV(m->dev, upload, m->u_fixed, u, sizeof(float) * m->B * m->T * m->H);
}

int free_set_r_offset(free_t *m, const float *r_off) {
    const size_t n = (size_t)m->Bmax * m->Tmax * m->cfg.d_model;
    if (!r_off) {
        if (m->r_off) DEV(m->dev, free, m->r_off);
        m->r_off = NULL;
        return 0;
    }
    if (!m->r_off && !(m->r_off = DEV(m->dev, alloc, sizeof(float) * n))) return FREE_ENOMEM;
    DEV(m->dev, upload, m->r_off, r_off, sizeof(float) * m->B * m->T * m->cfg.d_model);
    return 0;
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
    device_t *d = m->dev;
    DEV(d, repeat_rows, m->zq, m->w.zeta, N, D);
    llama_block_forward(d, m->enc_out, &m->enc, &m->w.enc, m->zq, llama_stream(m->dec, m->half),
                        c, llama_rope_cos(m->dec), llama_rope_sin(m->dec), m->B, m->T, 0,
                        llama_scratch(m->dec));
    DEV(d, rmsnorm_forward, m->enc_xn, m->enc_rstd, m->enc_out, m->w.enc_norm, N, D, c->norm_eps);
    DEV(d, linear_forward, m->bitlog, m->enc_xn, m->w.readout, N, D, H);
    DEV(d, binmap_kl_rows, m->kl, m->bitlog, N, H);
}

/* R = W_post[:, z] added to X as the injection block's key/value input, then the rest of
 * the decoder and its head */
static int second_half(free_t *m, const uint32_t *targets, const uint8_t *mask, float *ce,
                       char *err, size_t errlen) {
    const int N = m->B * m->T, D = m->cfg.d_model;
    device_t *d = m->dev;
    DEV(d, post_sampler_forward, m->xkv, m->w.post, m->z, N, D, m->H);
    DEV(d, add_inplace, m->xkv, llama_stream(m->dec, m->half), (size_t)N * D);
    if (m->r_off) DEV(d, add_inplace, m->xkv, m->r_off, (size_t)N * D);
    llama_block_forward_kv(m->dec, m->half, m->xkv);
    llama_blocks_forward(m->dec, m->half + 1, m->cfg.n_layers);
    return llama_head_forward(m->dec, targets, mask, ce, err, errlen);
}

int free_forward(free_t *m, const uint32_t *tokens, const uint32_t *targets, const uint8_t *mask,
                 float *loss, char *err, size_t errlen) {
    const int N = m->B * m->T, H = m->H;
    device_t *d = m->dev;
    int rc = first_half(m, tokens, err, errlen);
    if (rc) return rc;
    encoder_forward(m);
    if (m->fixed_u) {
        DEV(d, copy, m->u, m->u_fixed, sizeof(float) * N * H);
    } else {
        DEV(d, uniform_fill, m->u, (size_t)N * H, m->u_key, m->u_counter);
        m->u_counter += (uint64_t)N * H;
    }
    DEV(d, binmap_forward, m->z, m->prob, m->bitlog, m->u, N, H);
    float ce = 0;
    if ((rc = second_half(m, targets, mask, &ce, err, errlen))) return rc;
    m->from_encoder = 1;
    if (!targets) return DEV_SYNC_AS(d, err, errlen, FREE_EARG, FREE_ENOMEM);
    // free bits: mean over counted positions of max(0, KL_t - kappa)
    m->has_mask = mask != NULL;
    if (mask) DEV(d, upload, m->mask, mask, N);
    free_bits_sums_t fb = DEV(d, free_bits_forward, m->kl, mask ? m->mask : NULL, N,
                              m->cfg.kappa_nats);
    m->count = fb.count;
    m->ce = ce;
    m->kl_mean = fb.count ? fb.kl_sum / fb.count : 0;
    m->kl_term = fb.count ? fb.term_sum / fb.count : 0;
    m->above = fb.count ? (double)fb.above / fb.count : 0;
    m->loss = m->ce + m->kl_term;
    m->has_targets = 1;
    if (loss) *loss = (float)m->loss;
    return DEV_SYNC_AS(d, err, errlen, FREE_EARG, FREE_ENOMEM);
}

int free_backward(free_t *m, char *err, size_t errlen) {
    if (!m->has_targets) {
        snprintf(err, errlen, "free_backward: the last forward was not a training forward with targets");
        return FREE_EARG;
    }
    const model_config_t *c = &m->cfg;
    const int N = m->B * m->T, D = c->d_model, H = m->H, L = c->n_layers;
    llama_t *dec = m->dec;
    device_t *d = m->dev;
    // decoder head and second half, down to the injection block
    llama_head_backward(dec);
    llama_blocks_backward(dec, L, m->half + 1);
    DEV(d, zero, m->dxkv, sizeof(float) * N * D);
    llama_block_backward_kv(dec, m->half, m->xkv, m->dxkv);
    // x_kv = X + R: dX gets dx_kv too, and dR = dx_kv
    float *dx = llama_dstream(dec);
    DEV(d, add_inplace, dx, m->dxkv, (size_t)N * D);
    // post-sampler and Binary Mapper: dW_post column gather, dense pass-through to the logits
    DEV(d, zero, m->dbit, sizeof(float) * N * H);
    DEV(d, post_sampler_backward, m->g.post, m->dbit, m->dxkv, m->w.post, m->z, m->prob, N, D, H);
    // free-bits KL: only positions above kappa carry a gradient
    if (m->count)
        DEV(d, free_bits_backward, m->dbit, m->bitlog, m->kl, m->has_mask ? m->mask : NULL, N, H,
            c->kappa_nats, m->grad_scale / (float)m->count);
    // read-out, encoder norm, encoder block (its key/value input is X: into dx)
    DEV(d, zero, m->dxn, sizeof(float) * N * D);
    DEV(d, linear_backward, m->dxn, m->g.readout, m->dbit, m->enc_xn, m->w.readout, N, D, H);
    DEV(d, zero, m->denc_out, sizeof(float) * N * D);
    DEV(d, rmsnorm_backward, m->denc_out, m->g.enc_norm, m->dxn, m->enc_out, m->w.enc_norm,
        m->enc_rstd, N, D);
    /* the block writes dzq (no zeroing pass) */
    llama_block_backward(d, m->dzq, dx, &m->g.enc, m->denc_out, &m->enc, &m->w.enc, m->zq,
                         llama_stream(dec, m->half), c, llama_rope_cos(dec), llama_rope_sin(dec),
                         m->B, m->T, 0, llama_scratch(dec));
    DEV(d, sum_rows, m->g.zeta, m->dzq, N, D);
    // first half of the decoder and the embedding
    llama_blocks_backward(dec, m->half, 0);
    llama_embed_backward(dec);
    return DEV_SYNC_AS(d, err, errlen, FREE_EARG, FREE_ENOMEM);
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
    DEV(m->dev, upload, m->z, z, sizeof(uint32_t) * N);
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

/* A device buffer's host copy: the buffer itself on the CPU device, else downloaded into a
 * host buffer of the model's (allocated once for Bmax x Tmax rows). */
static const void *to_host(free_t *m, void **host, const void *dev_ptr, size_t row_bytes) {
    if (device_is_host(m->dev)) return dev_ptr;
    if (!*host && !(*host = malloc(row_bytes * m->Bmax * m->Tmax))) return NULL;
    DEV(m->dev, download, *host, dev_ptr, row_bytes * m->B * m->T);
    return *host;
}

const float *free_logits(free_t *m) { return llama_logits(m->dec); }
const float *free_bit_logits(free_t *m) {
    return to_host(m, (void **)&m->bitlog_host, m->bitlog, sizeof(float) * m->H);
}
const float *free_kl(free_t *m) { return to_host(m, (void **)&m->kl_host, m->kl, sizeof(float)); }
const uint32_t *free_z(free_t *m) { return to_host(m, (void **)&m->z_host, m->z, sizeof(uint32_t)); }
const float *free_bit_logits_dev(const free_t *m) { return m->bitlog; }
device_t *free_device(const free_t *m) { return m->dev; }

void free_metrics(free_t *m, family_metrics_t *out) {
    out->n = 0;
    if (!m->has_targets) return;
    const struct { const char *k; double v; } kv[] = {
        {"ce", m->ce}, {"kl", m->kl_mean}, {"kl_bits", m->kl_mean / M_LN2},
        {"kl_above_kappa", m->above}, {"kappa_bits", m->cfg.kappa_nats / M_LN2}};
    for (size_t i = 0; i < sizeof(kv) / sizeof(kv[0]) && out->n < FAMILY_MAX_METRICS; i++) {
        snprintf(out->kv[out->n].name, sizeof(out->kv[out->n].name), "%s", kv[i].k);
        out->kv[out->n].value = kv[i].v;
        out->n++;
    }
}
