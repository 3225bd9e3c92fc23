/* model/ltm.c: the Latent-Thought LM's cross-attention, latents and dual-rate loop around the
 * llama decoder (see ltm.h). */
#include "model/ltm.h"
#include "common/rng.h"
#include "model/adamw.h"
#include "model/rope_table.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LTM_N_CROSS 5  /* tensors per layer */

/* The fast optimizer (torch.optim.AdamW's defaults, kept by the public code). */
#define FAST_BETA1 0.9f
#define FAST_BETA2 0.999f
#define FAST_EPS 1e-8f
#define FAST_WD 0.01f
/* The posterior's start (the public code: mu ~ 0.01 N, log-variance ~ -5 + 0.1 N). */
#define MU0_STD 0.01f
#define LS0_MEAN -2.5f
#define LS0_STD 0.05f

/* What a layer's cross-attention keeps for the backward. */
typedef struct {
    float *xn, *rstd;      /* (N,D), (N): the cross-attention norm of x_mid */
    float *q;              /* (N,Dq) after RoPE */
    float *k, *v;          /* (B*m, Dkv), k after the latents' RoPE */
    float *att, *lse;      /* (N,Dq), (B,H,T) */
    float *x_cross;        /* (N,D) x_mid + the cross-attention branch */
} cross_acts_t;

struct ltm {
    model_config_t cfg;
    llama_t *dec;
    device_t *dev;                 /* the decoder's; every buffer below is on it */
    int Bmax, Tmax, B, T, L, M;    /* M: latent vectors per layer */
    uint64_t seed;
    float grad_scale;
    /* cross-attention: one parameter buffer, one gradient buffer, same layout */
    float *xp, *xg;
    size_t nx;
    ltm_cross_w_t *w, *g;          /* (L) host arrays of device pointers */
    tensor_view_t *pv, *gv;        /* decoder views, then the cross-attention's */
    int ndec, nv;
    /* activations, one allocation (act_layout) */
    void *act_mem;
    size_t act_bytes;
    cross_acts_t *ca;              /* (L) host array */
    float *zcos, *zsin;            /* (M, hd/2): RoPE at the latents' positions */
    float *dk0, *dk, *dv;          /* (Bmax*M, Dkv) the cross-attention's key/value gradients */
    float *gA, *gB;                /* (N,D) the stream's gradient between blocks */
    /* latents (L, Bmax, M, D) */
    float *mu, *ls, *eps, *z, *dz, *dmu, *dls, *m_mu, *v_mu, *m_ls, *v_ls;
    float *kl;                     /* (Bmax) per-sequence KL of the last evaluation */
    float *kl_host;                /* (Bmax) host copy (the device's own buffer on the CPU) */
    /* the draws: the key of the current optimizer step, the next micro-batch's first row */
    uint64_t step, key, row0;
    uint64_t post_key, post_row0;  /* the streams of the posterior being fitted (its noise) */
    int posterior_given;           /* ltm_set_posterior: the next forward starts from it */
    float *eps_given;              /* (n_eps_given, L, B, m, D) host: the noise it gave */
    int n_eps_given, use_given;    /* use_given: the posterior being fitted is the given one */
    int base_ready;                /* embedding and layer 0's self-attention done for these tokens */
    int inferred;                  /* ltm_infer ran on these tokens: ltm_score may follow */
    /* the last training forward */
    int has_targets, count;
    double ce, kl_sum, elbo, elbo0, lr_fast;
};

/* ---- configuration, layout ---------------------------------------------------------------- */

int ltm_config_check(const model_config_t *c, int B, int T, char *err, size_t errlen) {
    int rc = llama_config_check(c, B, T, err, errlen);
    if (rc) return rc;
#define BAD(...) do { snprintf(err, errlen, __VA_ARGS__); return LTM_ECONFIG; } while (0)
    if (c->kind != MODEL_LTM) BAD("ltm: config kind is %d, not MODEL_LTM", (int)c->kind);
    if (c->latent_vectors < 1 || c->latent_vectors > c->max_seq)
        BAD("ltm: latent vectors per layer %d must be in 1..max_seq %d", c->latent_vectors, c->max_seq);
    if (c->sliding_window < 0 || c->sliding_window > c->max_seq)
        BAD("ltm: sliding window %d must be in 0..max_seq %d (0: unlimited)", c->sliding_window, c->max_seq);
    if (c->inner_steps < 0) BAD("ltm: inner steps %d must be >= 0", c->inner_steps);
    if (!(c->fast_lr >= 0) || !isfinite(c->fast_lr) || !(c->fast_lr_end >= 0) || !isfinite(c->fast_lr_end))
        BAD("ltm: fast learning rates %g .. %g must be finite and >= 0", c->fast_lr, c->fast_lr_end);
    if (c->fast_lr_steps < 1) BAD("ltm: the fast rate's ramp of %d steps must be >= 1", c->fast_lr_steps);
#undef BAD
    return 0;
}

float ltm_fast_lr(const model_config_t *c, uint64_t step) {
    const double last = c->fast_lr_steps > 1 ? c->fast_lr_steps - 1 : 1;
    double f = (double)step / last;
    if (f > 1) f = 1;
    return (float)(c->fast_lr + (c->fast_lr_end - c->fast_lr) * f);
}

/* Lays out the cross-attention tensors in base (NULL: count only), filling views and the
 * per-layer pointers. */
static size_t layout(const model_config_t *c, float *base, tensor_view_t *views, ltm_cross_w_t *w) {
    const int64_t D = c->d_model, hd = D / c->n_heads, Dq = hd * c->n_heads, Dkv = hd * c->n_kv_heads;
    size_t off = 0;
    int nv = 0;
    char name[TENSOR_NAME_LEN];
#define TAKE(ptr, nd, a, b, suffix) do {                                                \
        float *p_ = base ? base + off : NULL;                                           \
        snprintf(name, sizeof name, "model.layers.%d.%s", l, suffix);                  \
        if (views) tensor_view_set(&views[nv], name, p_, nd, a, b);                     \
        nv++; off += (size_t)(a) * (nd == 2 ? (size_t)(b) : 1);                         \
        t.ptr = p_;                                                                     \
    } while (0)
    for (int l = 0; l < c->n_layers; l++) {
        ltm_cross_w_t t;
        TAKE(norm, 1, D, 0, "cross_attn_layernorm.weight");
        TAKE(wq, 2, Dq, D, "cross_attn.q_proj.weight");
        TAKE(wk, 2, Dkv, D, "cross_attn.k_proj.weight");
        TAKE(wv, 2, Dkv, D, "cross_attn.v_proj.weight");
        TAKE(wo, 2, D, Dq, "cross_attn.o_proj.weight");
        if (w) w[l] = t;
    }
#undef TAKE
    return off;
}

static void act_layout(ltm_t *m, dev_arena_t *ar) {
    const model_config_t *c = &m->cfg;
    const size_t N = (size_t)m->Bmax * m->Tmax, D = c->d_model, hd = D / c->n_heads;
    const size_t Dq = hd * c->n_heads, Dkv = hd * c->n_kv_heads, BM = (size_t)m->Bmax * m->M;
    const size_t NL = (size_t)m->L * BM * D;
    for (int l = 0; l < m->L; l++) {
        cross_acts_t *a = &m->ca[l];
        a->xn = DEV_TAKE(ar, float, N * D);
        a->rstd = DEV_TAKE(ar, float, N);
        a->q = DEV_TAKE(ar, float, N * Dq);
        a->k = DEV_TAKE(ar, float, BM * Dkv);
        a->v = DEV_TAKE(ar, float, BM * Dkv);
        a->att = DEV_TAKE(ar, float, N * Dq);
        a->lse = DEV_TAKE(ar, float, N * c->n_heads);
        a->x_cross = DEV_TAKE(ar, float, N * D);
    }
    m->zcos = DEV_TAKE(ar, float, (size_t)m->M * (hd / 2));
    m->zsin = DEV_TAKE(ar, float, (size_t)m->M * (hd / 2));
    m->dk0 = DEV_TAKE(ar, float, BM * Dkv);
    m->dk = DEV_TAKE(ar, float, BM * Dkv);
    m->dv = DEV_TAKE(ar, float, BM * Dkv);
    m->gA = DEV_TAKE(ar, float, N * D);
    m->gB = DEV_TAKE(ar, float, N * D);
    float **lat[] = {&m->mu, &m->ls, &m->eps, &m->z, &m->dz, &m->dmu, &m->dls,
                     &m->m_mu, &m->v_mu, &m->m_ls, &m->v_ls};
    for (size_t i = 0; i < sizeof lat / sizeof lat[0]; i++) *lat[i] = DEV_TAKE(ar, float, NL);
    m->kl = DEV_TAKE(ar, float, m->Bmax);
}

/* The latents' RoPE rows: latent j of a layer at position j * spacing (ltm.h). */
static int latent_rope(ltm_t *m) {
    const model_config_t *c = &m->cfg;
    const int hd = c->d_model / c->n_heads, h2 = hd / 2;
    int spacing = c->max_seq / (m->L * m->M);
    if (spacing < 1) spacing = 1;
    float *cs = malloc(sizeof(float) * c->max_seq * h2), *sn = malloc(sizeof(float) * c->max_seq * h2);
    if (!cs || !sn) { free(cs); free(sn); return LTM_ENOMEM; }
    rope_table_init(cs, sn, c->max_seq, hd, c->rope_theta);
    for (int j = 0; j < m->M; j++) {   /* rows gathered in place: j * spacing >= j */
        memmove(cs + (size_t)j * h2, cs + (size_t)j * spacing * h2, sizeof(float) * h2);
        memmove(sn + (size_t)j * h2, sn + (size_t)j * spacing * h2, sizeof(float) * h2);
    }
    DEV(m->dev, upload, m->zcos, cs, sizeof(float) * m->M * h2);
    DEV(m->dev, upload, m->zsin, sn, sizeof(float) * m->M * h2);
    free(cs);
    free(sn);
    return 0;
}

void ltm_destroy(ltm_t **pm) {
    if (!pm || !*pm) return;
    ltm_t *m = *pm;
    if (m->dev) {
        void *d[] = {m->xp, m->xg, m->act_mem};
        for (size_t i = 0; i < sizeof(d) / sizeof(d[0]); i++)
            if (d[i]) DEV(m->dev, free, d[i]);
    }
    llama_destroy(&m->dec);
    if (m->kl_host != m->kl) free(m->kl_host);
    free(m->eps_given);
    void *p[] = {m->pv, m->gv, m->w, m->g, m->ca};
    for (size_t i = 0; i < sizeof(p) / sizeof(p[0]); i++) free(p[i]);
    free(m);
    *pm = NULL;
}

int ltm_create(ltm_t **pm, const model_config_t *cfg, int Bmax, int Tmax, uint64_t seed,
               char *err, size_t errlen) {
    return ltm_create_on(pm, device_cpu_default(), cfg, Bmax, Tmax, seed, err, errlen);
}

int ltm_create_on(ltm_t **pm, device_t *dev, const model_config_t *cfg, int Bmax, int Tmax,
                  uint64_t seed, char *err, size_t errlen) {
    if (!pm || !dev) { snprintf(err, errlen, "ltm_create: NULL handle or device"); return LTM_EARG; }
    *pm = NULL;
    int rc = ltm_config_check(cfg, Bmax, Tmax, err, errlen);
    if (rc) return rc;
    char what[64] = "model", b1[32];
    ltm_t *m = calloc(1, sizeof(*m));
    if (!m) goto oom;
    m->cfg = *cfg;
    m->dev = dev;
    m->Bmax = m->B = Bmax;
    m->Tmax = m->T = Tmax;
    m->L = cfg->n_layers;
    m->M = cfg->latent_vectors;
    m->seed = seed;
    m->grad_scale = 1.0f;
    /* the decoder is a plain llama whose blocks read the sliding window from its config */
    model_config_t dc = *cfg;
    dc.kind = MODEL_LLAMA;
    if ((rc = llama_create_on(&m->dec, dev, &dc, Bmax, Tmax, seed, err, errlen))) {
        ltm_destroy(&m);
        return rc;
    }
    const model_config_t *c = &m->cfg;
    m->ndec = llama_params(m->dec, NULL, 0);
    m->nv = m->ndec + LTM_N_CROSS * m->L;
    m->nx = layout(c, NULL, NULL, NULL);
    m->pv = calloc(m->nv, sizeof(tensor_view_t));
    m->gv = calloc(m->nv, sizeof(tensor_view_t));
    m->w = calloc(m->L, sizeof(ltm_cross_w_t));
    m->g = calloc(m->L, sizeof(ltm_cross_w_t));
    m->ca = calloc(m->L, sizeof(cross_acts_t));
    if (!m->pv || !m->gv || !m->w || !m->g || !m->ca) goto oom;
    snprintf(what, sizeof what, "cross-attention parameters (%s)", device_bytes_str(sizeof(float) * m->nx, b1, sizeof b1));
    if (!(m->xp = DEV(dev, alloc, sizeof(float) * m->nx)) || !(m->xg = DEV(dev, alloc, sizeof(float) * m->nx)))
        goto oom;
    llama_params(m->dec, m->pv, m->ndec);
    llama_grads(m->dec, m->gv, m->ndec);
    layout(c, m->xp, m->pv + m->ndec, m->w);
    layout(c, m->xg, m->gv + m->ndec, m->g);
    for (int i = m->ndec; i < m->nv; i++) m->pv[i].dev = m->gv[i].dev = dev;
    dev_arena_t ar = {0};
    act_layout(m, &ar);
    m->act_bytes = ar.used;
    snprintf(what, sizeof what, "latents and cross-attention activations (%s)", device_bytes_str(m->act_bytes, b1, sizeof b1));
    if (!(m->act_mem = DEV(dev, alloc, m->act_bytes))) goto oom;
    ar.base = m->act_mem;
    ar.used = 0;
    act_layout(m, &ar);
    m->kl_host = device_is_host(dev) ? m->kl : malloc(sizeof(float) * Bmax);
    if (!m->kl_host || latent_rope(m) || ltm_init(m, seed)) goto oom;
    ltm_set_step(m, 0);
    *pm = m;
    return 0;
oom:
    snprintf(err, errlen, "ltm_create: out of memory for the %s of B=%d T=%d m=%d on %s", what, Bmax,
             Tmax, cfg->latent_vectors, dev->name);
    ltm_destroy(&m);
    return LTM_ENOMEM;
}

int ltm_init(ltm_t *m, uint64_t seed) {
    if (llama_init(m->dec, seed)) return LTM_ENOMEM;
    float *host = device_is_host(m->dev) ? m->xp : malloc(sizeof(float) * m->nx);
    if (!host) return LTM_ENOMEM;
    rng_t r;
    rng_seed2(&r, seed, 0x17A7);
    const float out_std = 0.02f / sqrtf(2.0f * m->L);
    for (int l = 0; l < m->L; l++) {
        const ltm_cross_w_t *w = &m->w[l];
        for (int t = 0; t < LTM_N_CROSS; t++) {
            const tensor_view_t *v = &m->pv[m->ndec + l * LTM_N_CROSS + t];
            float *p = host + (v->data - m->xp);
            const int64_t n = tensor_numel(v);
            const float std = v->data == w->wo ? out_std : 0.02f;
            for (int64_t j = 0; j < n; j++) p[j] = v->ndim == 1 ? 1.0f : std * rng_normal(&r);
        }
    }
    if (host != m->xp) {
        DEV(m->dev, upload, m->xp, host, sizeof(float) * m->nx);
        free(host);
    }
    return 0;
}

void ltm_memory(const ltm_t *m, model_memory_t *out) {
    llama_memory(m->dec, out);
    out->params += sizeof(float) * m->nx;
    out->grads += sizeof(float) * m->nx;
    out->activations += m->act_bytes;
}
device_t *ltm_device(const ltm_t *m) { return m->dev; }
const model_config_t *ltm_config(const ltm_t *m) { return &m->cfg; }
llama_t *ltm_decoder(ltm_t *m) { return m->dec; }
ltm_cross_w_t ltm_cross_weights(ltm_t *m, int l) { return m->w[l]; }
size_t ltm_latent_numel(const ltm_t *m) { return (size_t)m->L * m->B * m->M * m->cfg.d_model; }
const float *ltm_latents_dev(const ltm_t *m) { return m->z; }
int ltm_batch(const ltm_t *m) { return m->B; }
void ltm_latent_rope(const ltm_t *m, const float **cos_t, const float **sin_t) {
    *cos_t = m->zcos;
    *sin_t = m->zsin;
}
const float *ltm_logits(ltm_t *m) { return llama_logits(m->dec); }

int ltm_set_shape(ltm_t *m, int B, int T, char *err, size_t errlen) {
    int rc = llama_set_shape(m->dec, B, T, err, errlen);
    if (rc) return rc;
    if (B != m->B || T != m->T) m->inferred = 0;
    m->B = B;
    m->T = T;
    return 0;
}

int ltm_params(ltm_t *m, tensor_view_t *v, int cap) { return tensor_views_copy(m->pv, m->nv, v, cap); }
int ltm_grads(ltm_t *m, tensor_view_t *v, int cap) { return tensor_views_copy(m->gv, m->nv, v, cap); }
void ltm_zero_grad(ltm_t *m) {
    llama_zero_grad(m->dec);
    DEV(m->dev, zero, m->xg, sizeof(float) * m->nx);
}
void ltm_set_grad_scale(ltm_t *m, float s) {
    m->grad_scale = s;
    llama_set_grad_scale(m->dec, s);
}

void ltm_set_step(ltm_t *m, uint64_t step) {
    m->step = step;
    m->key = rng_counter_key(m->seed ^ LTM_SALT, step);
    m->row0 = 0;
}

void ltm_set_row(ltm_t *m, uint64_t row0) { m->row0 = row0; }

/* ---- the decoder with cross-attention to z -------------------------------------------------- */

/* Layer l's cross-attention sublayer: x_cross = x_mid + o_c(attention(q_c, k_c(z_l), v_c(z_l))). */
static void cross_forward(ltm_t *m, int l, const float *x_mid) {
    const model_config_t *c = &m->cfg;
    device_t *d = m->dev;
    const int B = m->B, T = m->T, N = B * T, BM = B * m->M, D = c->d_model, H = c->n_heads;
    const int Hkv = c->n_kv_heads, hd = D / H, Dq = hd * H, Dkv = hd * Hkv;
    const ltm_cross_w_t *w = &m->w[l];
    cross_acts_t *a = &m->ca[l];
    const float *zl = m->z + (size_t)l * BM * D;
    llama_block_scratch_t *s = llama_scratch(m->dec);
    // queries from the normed token stream, at the tokens' positions
    DEV(d, rmsnorm_forward, a->xn, a->rstd, x_mid, w->norm, N, D, c->norm_eps);
    DEV(d, linear_forward, a->q, a->xn, w->wq, N, D, Dq);
    DEV(d, rope_forward, a->q, a->q, llama_rope_cos(m->dec), llama_rope_sin(m->dec), B, T, H, hd, 0);
    // keys and values from the layer's latents (unnormalised), keys at the latents' positions
    DEV(d, linear_forward, a->k, zl, w->wk, BM, D, Dkv);
    DEV(d, rope_forward, a->k, a->k, m->zcos, m->zsin, B, m->M, Hkv, hd, 0);
    DEV(d, linear_forward, a->v, zl, w->wv, BM, D, Dkv);
    // every token sees all m latents of its sequence
    DEV(d, attention_forward, a->att, a->lse, a->q, a->k, a->v, B, T, m->M, H, Hkv, hd, 0);
    DEV(d, linear_forward, s->branch, a->att, w->wo, N, Dq, D);
    DEV(d, add_forward, a->x_cross, x_mid, s->branch, (size_t)N * D);
}

/* Its backward: dxc holds d x_cross and receives d x_mid (+= the branch's share); with dz
 * non-NULL, dL/dz_l is accumulated there; g NULL pointers: no weight gradients. */
static void cross_backward(ltm_t *m, int l, float *dxc, const float *x_mid, const ltm_cross_w_t *g,
                           float *dz) {
    const model_config_t *c = &m->cfg;
    device_t *d = m->dev;
    const int B = m->B, T = m->T, N = B * T, BM = B * m->M, D = c->d_model, H = c->n_heads;
    const int Hkv = c->n_kv_heads, hd = D / H, Dq = hd * H, Dkv = hd * Hkv;
    const ltm_cross_w_t *w = &m->w[l];
    const cross_acts_t *a = &m->ca[l];
    const float *zl = m->z + (size_t)l * BM * D;
    llama_block_scratch_t *s = llama_scratch(m->dec);
    DEV(d, linear_backward_set, s->datt, g->wo, dxc, a->att, w->wo, N, Dq, D);
    DEV(d, zero, s->dq, sizeof(float) * N * Dq);
    DEV(d, zero, m->dk, sizeof(float) * BM * Dkv);
    DEV(d, zero, m->dv, sizeof(float) * BM * Dkv);
    DEV(d, attention_backward, s->dq, m->dk, m->dv, s->datt, a->att, a->lse, a->q, a->k, a->v, B, T,
        m->M, H, Hkv, hd, 0);
    // the token side: un-rotate, the query product, the norm into d x_mid
    DEV(d, zero, s->dq0, sizeof(float) * N * Dq);
    DEV(d, rope_backward, s->dq0, s->dq, llama_rope_cos(m->dec), llama_rope_sin(m->dec), B, T, H, hd, 0);
    DEV(d, linear_backward_set, s->dxn, g->wq, s->dq0, a->xn, w->wq, N, D, Dq);
    DEV(d, rmsnorm_backward, dxc, g->norm, s->dxn, x_mid, w->norm, a->rstd, N, D);
    // the latent side: un-rotate the keys, then the key and value products
    DEV(d, zero, m->dk0, sizeof(float) * BM * Dkv);
    DEV(d, rope_backward, m->dk0, m->dk, m->zcos, m->zsin, B, m->M, Hkv, hd, 0);
    float *dzl = dz ? dz + (size_t)l * BM * D : NULL;
    DEV(d, linear_backward, dzl, g->wk, m->dk0, zl, w->wk, BM, D, Dkv);
    DEV(d, linear_backward, dzl, g->wv, m->dv, zl, w->wv, BM, D, Dkv);
}

/* Embedding and layer 0's self-attention: what z does not change, computed once per batch. */
static int base_forward(ltm_t *m, const uint32_t *tokens, char *err, size_t errlen) {
    m->base_ready = 0;
    m->has_targets = 0;
    m->inferred = 0;
    int rc = llama_embed(m->dec, tokens, err, errlen);
    if (rc) return rc;
    llama_block_w_t w = llama_block_weights(m->dec, 0);
    float *x = llama_stream(m->dec, 0);
    llama_block_attn_forward(m->dev, llama_block_acts(m->dec, 0)->x_mid, llama_block_acts(m->dec, 0), &w,
                             x, x, llama_config(m->dec), llama_rope_cos(m->dec), llama_rope_sin(m->dec),
                             m->B, m->T, 1, llama_scratch(m->dec));
    m->base_ready = 1;
    return 0;
}

/* z -> the last block's output (the head is the caller's). */
static void blocks_forward(ltm_t *m) {
    const model_config_t *dc = llama_config(m->dec);
    for (int l = 0; l < m->L; l++) {
        llama_block_w_t w = llama_block_weights(m->dec, l);
        llama_block_acts_t *a = llama_block_acts(m->dec, l);
        float *x = llama_stream(m->dec, l);
        if (l > 0)
            llama_block_attn_forward(m->dev, a->x_mid, a, &w, x, x, dc, llama_rope_cos(m->dec),
                                     llama_rope_sin(m->dec), m->B, m->T, 1, llama_scratch(m->dec));
        cross_forward(m, l, a->x_mid);
        llama_block_mlp_forward(m->dev, llama_stream(m->dec, l + 1), a, &w, m->ca[l].x_cross, dc, m->B,
                                m->T, llama_scratch(m->dec));
    }
}

/* The backward of the last forward from the head down. inner: dL/dz into m->dz (zeroed here),
 * no weight gradient, and nothing below layer 0's cross-attention; otherwise the decoder's and
 * the cross-attention's weight gradients, down to the embedding. */
static void blocks_backward(ltm_t *m, int inner) {
    const model_config_t *dc = llama_config(m->dec);
    device_t *d = m->dev;
    const size_t ND = (size_t)m->B * m->T * dc->d_model;
    static const llama_block_w_t no_w;
    static const ltm_cross_w_t no_c;
    llama_block_scratch_t *s = llama_scratch(m->dec);
    if (inner) {
        DEV(d, zero, m->dz, sizeof(float) * ltm_latent_numel(m));
        llama_head_backward_input(m->dec);
    } else {
        llama_head_backward(m->dec);
    }
    float *cur = llama_dstream(m->dec);
    for (int l = m->L - 1; l >= 0; l--) {
        llama_block_w_t w = llama_block_weights(m->dec, l), g = inner ? no_w : llama_block_grads(m->dec, l);
        llama_block_acts_t *a = llama_block_acts(m->dec, l);
        float *x = llama_stream(m->dec, l);
        llama_block_mlp_backward(d, s->dx_mid, &g, cur, a, &w, m->ca[l].x_cross, dc, m->B, m->T, s);
        cross_backward(m, l, s->dx_mid, a->x_mid, inner ? &no_c : &m->g[l], inner ? m->dz : NULL);
        if (inner && l == 0) return;
        float *next = cur == m->gA ? m->gB : m->gA;
        /* the block writes next (no zeroing pass) */
        llama_block_attn_backward(d, next, NULL, &g, s->dx_mid, a, &w, x, x, dc, llama_rope_cos(m->dec),
                                  llama_rope_sin(m->dec), m->B, m->T, 1, s);
        cur = next;
    }
    DEV(d, copy, llama_dstream(m->dec), cur, sizeof(float) * ND);
    llama_embed_backward(m->dec);
}

/* Per-sequence KL of the current posterior, summed on the host in row order. */
static double kl_total(ltm_t *m) {
    const int n = m->M * m->cfg.d_model;
    DEV(m->dev, latent_kl_rows, m->kl, m->mu, m->ls, m->L, m->B, n);
    if (m->kl_host != m->kl) DEV(m->dev, download, m->kl_host, m->kl, sizeof(float) * m->B);
    double s = 0;
    for (int b = 0; b < m->B; b++) s += m->kl_host[b];
    return s;
}

static int count_targets(const uint8_t *mask, int N) {
    if (!mask) return N;
    int c = 0;
    for (int n = 0; n < N; n++) c += mask[n] != 0;
    return c;
}

/* The posterior's start for rows (key, row0 + b), unless a test fixed it. */
static void posterior_start(ltm_t *m, uint64_t key, uint64_t row0) {
    const int n = m->M * m->cfg.d_model;
    const size_t NL = ltm_latent_numel(m);
    device_t *d = m->dev;
    if (!m->posterior_given) {
        DEV(d, latent_normal, m->mu, m->L, m->B, n, rng_counter_key(key, 1), row0, 0.0f, MU0_STD);
        DEV(d, latent_normal, m->ls, m->L, m->B, n, rng_counter_key(key, 2), row0, LS0_MEAN, LS0_STD);
    }
    m->use_given = m->posterior_given;
    m->posterior_given = 0;
    m->post_key = key;
    m->post_row0 = row0;
    float *mom[] = {m->m_mu, m->v_mu, m->m_ls, m->v_ls};
    for (int i = 0; i < 4; i++) DEV(d, zero, mom[i], sizeof(float) * NL);
}

/* eps of draw `draw` of the current posterior into m->eps: stochastic variational inference,
 * a fresh N(0, I) for every inner step (draw k of stream NOISE_FIT) and for the forward at the
 * final posterior (draw K), and for each scoring draw (stream NOISE_SCORE), counter-based:
 * row b's numbers are a function of (key, row0 + b, stream, draw) alone, whatever the batch,
 * the device or a resume. A test's ltm_set_posterior gave the noise instead: its draw
 * min(draw, n - 1) (one draw: the same eps at every step, the pre-fix estimator). */
enum { NOISE_FIT = 3, NOISE_SCORE = 5 };
static void noise(ltm_t *m, int stream, uint64_t draw) {
    const size_t NL = ltm_latent_numel(m);
    if (m->use_given && stream == NOISE_FIT) {
        const uint64_t n = (uint64_t)m->n_eps_given, j = draw < n ? draw : n - 1;
        DEV(m->dev, upload, m->eps, m->eps_given + j * NL, sizeof(float) * NL);
        return;
    }
    const uint64_t key = rng_counter_key(rng_counter_key(m->post_key, (uint64_t)stream), draw);
    DEV(m->dev, latent_normal, m->eps, m->L, m->B, m->M * m->cfg.d_model, key, m->post_row0, 0.0f, 1.0f);
}

/* One inner step on the current posterior (forward at z, backward to z, AdamW step t on mu and
 * ls); *ce_sum and *kl_sum receive the NELBO's two terms before the step. The decoder's head
 * must see dloss = count (the gradient of the SUM of cross-entropies). */
static int inner_step(ltm_t *m, const uint32_t *targets, const uint8_t *mask, int count, int t,
                      float lr, double *ce_sum, double *kl_sum, char *err, size_t errlen) {
    const size_t NL = ltm_latent_numel(m);
    device_t *d = m->dev;
    float ce = 0;
    noise(m, NOISE_FIT, (uint64_t)t - 1);
    DEV(d, latent_sample, m->z, m->mu, m->ls, m->eps, NL);
    blocks_forward(m);
    int rc = llama_head_forward(m->dec, targets, mask, &ce, err, errlen);
    if (rc) return rc;
    *ce_sum = (double)ce * count;
    *kl_sum = kl_total(m);
    blocks_backward(m, 1);
    // the fast AdamW step on (mu, ls): the gradient of sum_b (CE_b + KL_b)
    DEV(d, latent_backward, m->dmu, m->dls, m->dz, m->mu, m->ls, m->eps, 1.0f, NL);
    adamw_scalars_t sc = {.clip = 1.0f, .decay_mul = 1.0f - lr * FAST_WD, .beta1 = FAST_BETA1,
                          .beta2 = FAST_BETA2, .eps = FAST_EPS,
                          .step_size = (float)(lr / (1.0 - pow(FAST_BETA1, t))),
                          .bc2_sqrt = (float)sqrt(1.0 - pow(FAST_BETA2, t))};
    DEV(d, adamw_update, m->mu, m->dmu, m->m_mu, m->v_mu, NL, &sc);
    DEV(d, adamw_update, m->ls, m->dls, m->m_ls, m->v_ls, NL, &sc);
    return 0;
}

/* The rate of inner step k of K: a cosine from the peak down to a tenth of it (the public code's
 * get_fast_lr; a constant rate of 0.3 makes Adam overshoot log sigma's optimum and the KL
 * oscillate). */
float ltm_inner_lr(float peak, int k, int K) {
    if (K <= 1) return peak;
    const double lo = peak / 10.0;
    return (float)(lo + (peak - lo) * 0.5 * (1.0 + cos(M_PI * (double)k / K)));
}

/* K inner steps, recording the NELBO's terms after the step counts in rec (ascending); the
 * latents then hold z = mu_K + sigma_K eps, and the forward at it has run when final != 0. */
static int inner_loop(ltm_t *m, const uint32_t *targets, const uint8_t *mask, int K, float lr,
                      const int *rec, int nrec, double *ce, double *kl, char *err, size_t errlen) {
    const int N = m->B * m->T, count = count_targets(mask, N);
    const float dloss = (float)(count > 0 ? count : 1);
    int r = 0;
    for (int k = 0; k < K; k++) {
        double c = 0, q = 0;
        llama_set_grad_scale(m->dec, dloss);
        int rc = inner_step(m, targets, mask, count, k + 1, ltm_inner_lr(lr, k, K), &c, &q, err, errlen);
        if (rc) return rc;
        for (; r < nrec && rec[r] == k; r++) {
            if (ce) ce[r] = c;
            if (kl) kl[r] = q;
        }
        if ((rc = DEV_SYNC_AS(m->dev, err, errlen, LTM_EARG, LTM_ENOMEM))) return rc;
    }
    // the forward at the final posterior (a fresh draw), with the trainer's gradient scale
    float cef = 0;
    noise(m, NOISE_FIT, (uint64_t)K);
    DEV(m->dev, latent_sample, m->z, m->mu, m->ls, m->eps, ltm_latent_numel(m));
    blocks_forward(m);
    llama_set_grad_scale(m->dec, m->grad_scale);
    int rc = llama_head_forward(m->dec, targets, mask, &cef, err, errlen);
    if (rc) return rc;
    double c = (double)cef * count, q = kl_total(m);
    for (; r < nrec && rec[r] <= K; r++) {
        if (ce) ce[r] = c;
        if (kl) kl[r] = q;
    }
    m->count = count;
    m->ce = c;
    m->kl_sum = q;
    return DEV_SYNC_AS(m->dev, err, errlen, LTM_EARG, LTM_ENOMEM);
}

int ltm_forward(ltm_t *m, const uint32_t *tokens, const uint32_t *targets, const uint8_t *mask,
                float *loss, char *err, size_t errlen) {
    if (!targets) { snprintf(err, errlen, "ltm_forward: training needs targets"); return LTM_EARG; }
    int rc = base_forward(m, tokens, err, errlen);
    if (rc) return rc;
    const int K = m->cfg.inner_steps;
    m->lr_fast = ltm_fast_lr(&m->cfg, m->step);
    posterior_start(m, m->key, m->row0);
    m->row0 += (uint64_t)m->B;
    const int rec[2] = {0, K};
    double ce[2] = {0, 0}, kl[2] = {0, 0};
    if ((rc = inner_loop(m, targets, mask, K, (float)m->lr_fast, rec, 2, ce, kl, err, errlen))) return rc;
    const double denom = m->count > 0 ? m->count : 1;
    m->elbo0 = (ce[0] + kl[0]) / denom;
    m->elbo = (ce[1] + kl[1]) / denom;
    m->has_targets = 1;
    if (loss) *loss = (float)m->elbo;
    return 0;
}

int ltm_backward(ltm_t *m, char *err, size_t errlen) {
    if (!m->has_targets) {
        snprintf(err, errlen, "ltm_backward: the last forward was not a training forward with targets");
        return LTM_EARG;
    }
    blocks_backward(m, 0);
    return DEV_SYNC_AS(m->dev, err, errlen, LTM_EARG, LTM_ENOMEM);
}

void ltm_metrics(ltm_t *m, family_metrics_t *out) {
    out->n = 0;
    if (!m->has_targets) return;
    const double denom = m->count > 0 ? m->count : 1;
    const struct { const char *k; double v; } kv[] = {
        {"ce", m->ce / denom}, {"kl", m->kl_sum / denom}, {"elbo", m->elbo},
        {"elbo_0", m->elbo0}, {"elbo_K", m->elbo}, {"kl_seq", m->kl_sum / (m->B > 0 ? m->B : 1)},
        {"fast_lr", m->lr_fast}, {"inner_steps", m->cfg.inner_steps}};
    for (size_t i = 0; i < sizeof(kv) / sizeof(kv[0]) && out->n < FAMILY_MAX_METRICS; i++) {
        snprintf(out->kv[out->n].name, sizeof(out->kv[out->n].name), "%s", kv[i].k);
        out->kv[out->n].value = kv[i].v;
        out->n++;
    }
}

/* ---- inference -------------------------------------------------------------------------------- */

int ltm_infer(ltm_t *m, const uint32_t *tokens, const uint32_t *targets, const uint8_t *mask,
              const ltm_infer_t *o, double *ce, double *kl, char *err, size_t errlen) {
    if (!targets || !o || o->steps < 0 || !(o->lr >= 0)) {
        snprintf(err, errlen, "ltm_infer: needs targets, steps >= 0 and a rate >= 0");
        return LTM_EARG;
    }
    for (int i = 0; i < o->n_record; i++)
        if (o->record[i] < 0 || o->record[i] > o->steps || (i && o->record[i] <= o->record[i - 1])) {
            snprintf(err, errlen, "ltm_infer: record steps must ascend within 0..%d", o->steps);
            return LTM_EARG;
        }
    int rc = base_forward(m, tokens, err, errlen);
    if (rc) return rc;
    posterior_start(m, o->key, o->row0);
    rc = inner_loop(m, targets, mask, o->steps, o->lr, o->record, o->n_record, ce, kl, err, errlen);
    m->has_targets = 0;   /* nothing for ltm_backward: an inference is not a training step */
    m->inferred = rc == 0;
    return rc;
}

/* -log p(target) summed over row b's counted positions, from host logits (B,T,V). */
static double row_nll(const float *lg, const uint32_t *targets, const uint8_t *mask, int b, int T, int V) {
    double s = 0;
    for (int t = 0; t < T; t++) {
        const size_t n = (size_t)b * T + t;
        if (mask && !mask[n]) continue;
        const float *r = lg + n * V;
        float mx = r[0];
        for (int v = 1; v < V; v++) mx = r[v] > mx ? r[v] : mx;
        double z = 0;
        for (int v = 0; v < V; v++) z += exp((double)r[v] - mx);
        s += mx + log(z) - r[targets[n]];
    }
    return s;
}

int ltm_score(ltm_t *m, const uint32_t *targets, const uint8_t *mask, int S, double *ce, double *kl,
              double *logw, char *err, size_t errlen) {
    if (!m->inferred || !targets || S < 1 || !ce) {
        snprintf(err, errlen, "ltm_score: needs a posterior from ltm_infer on the same tokens, targets and S >= 1");
        return LTM_EARG;
    }
    const size_t NL = ltm_latent_numel(m), per_row = (size_t)m->M * m->cfg.d_model;
    const int B = m->B, T = m->T, V = m->cfg.vocab_size;
    for (int n = 0; n < B * T; n++)
        if ((!mask || mask[n]) && targets[n] >= (uint32_t)V) {
            snprintf(err, errlen, "ltm_score: target id %u at position %d is outside the vocabulary of %d",
                     targets[n], n, V);
            return LTM_ETOKEN;
        }
    float *mu = NULL, *ls = NULL, *eps = NULL;
    int rc = LTM_ENOMEM;
    double *klr = malloc(sizeof(double) * B);
    if (!klr || (logw && (!(mu = malloc(sizeof(float) * NL)) || !(ls = malloc(sizeof(float) * NL)) ||
                          !(eps = malloc(sizeof(float) * NL))))) {
        snprintf(err, errlen, "ltm_score: out of memory for %zu latents", NL);
        goto out;
    }
    kl_total(m);
    for (int b = 0; b < B; b++) klr[b] = m->kl_host[b];
    if (kl) memcpy(kl, klr, sizeof(double) * B);
    if (logw) {
        DEV(m->dev, download, mu, m->mu, sizeof(float) * NL);
        DEV(m->dev, download, ls, m->ls, sizeof(float) * NL);
    }
    for (int s = 0; s < S; s++) {
        noise(m, NOISE_SCORE, (uint64_t)s);
        DEV(m->dev, latent_sample, m->z, m->mu, m->ls, m->eps, NL);
        blocks_forward(m);
        if ((rc = llama_head_forward(m->dec, NULL, NULL, NULL, err, errlen))) goto out;
        const float *lg = llama_logits(m->dec);
        if (!lg) { rc = LTM_ENOMEM; snprintf(err, errlen, "ltm_score: out of memory for the logits"); goto out; }
        for (int b = 0; b < B; b++) ce[(size_t)s * B + b] = row_nll(lg, targets, mask, b, T, V);
        if (!logw) continue;
        /* log w = log p(x|z) + log N(z; 0, I) - log N(z; mu, sigma^2), z = mu + sigma eps:
         * the Gaussians' constants cancel, leaving sum_i (eps_i^2 - z_i^2) / 2 + ls_i */
        DEV(m->dev, download, eps, m->eps, sizeof(float) * NL);
        for (int b = 0; b < B; b++) {
            double r = 0;
            for (int l = 0; l < m->L; l++) {
                const size_t o = ((size_t)l * B + b) * per_row;
                for (size_t i = o; i < o + per_row; i++) {
                    const double e = eps[i], z = mu[i] + exp((double)ls[i]) * e;
                    r += 0.5 * (e * e - z * z) + ls[i];
                }
            }
            logw[(size_t)s * B + b] = -ce[(size_t)s * B + b] + r;
        }
    }
    rc = DEV_SYNC_AS(m->dev, err, errlen, LTM_EARG, LTM_ENOMEM);
out:
    free(klr);
    free(mu);
    free(ls);
    free(eps);
    return rc;
}

void ltm_prior(ltm_t *m, uint64_t key, uint64_t row0) {
    DEV(m->dev, latent_normal, m->z, m->L, m->B, m->M * m->cfg.d_model, rng_counter_key(key, 4), row0,
        0.0f, 1.0f);
}

int ltm_forward_z(ltm_t *m, const uint32_t *tokens, const uint32_t *targets, const uint8_t *mask,
                  float *ce, char *err, size_t errlen) {
    int rc = base_forward(m, tokens, err, errlen);
    if (rc) return rc;
    blocks_forward(m);
    llama_set_grad_scale(m->dec, m->grad_scale);
    rc = llama_head_forward(m->dec, targets, mask, ce, err, errlen);
    if (rc) return rc;
    return DEV_SYNC_AS(m->dev, err, errlen, LTM_EARG, LTM_ENOMEM);
}

int ltm_set_posterior(ltm_t *m, const float *mu, const float *ls, const float *eps, int n_eps) {
    const size_t NL = ltm_latent_numel(m), bytes = sizeof(float) * NL;
    if (!mu || !ls || !eps || n_eps < 1) return LTM_EARG;
    float *e = realloc(m->eps_given, bytes * (size_t)n_eps);
    if (!e) return LTM_ENOMEM;
    memcpy(e, eps, bytes * (size_t)n_eps);
    m->eps_given = e;
    m->n_eps_given = n_eps;
    DEV(m->dev, upload, m->mu, mu, bytes);
    DEV(m->dev, upload, m->ls, ls, bytes);
    m->posterior_given = 1;
    return 0;
}

int ltm_posterior(ltm_t *m, float *mu, float *ls, float *dmu, float *dls) {
    const size_t bytes = sizeof(float) * ltm_latent_numel(m);
    float *dst[] = {mu, ls, dmu, dls};
    const float *src[] = {m->mu, m->ls, m->dmu, m->dls};
    for (int i = 0; i < 4; i++)
        if (dst[i]) DEV(m->dev, download, dst[i], src[i], bytes);
    return 0;
}

/* ---- FLOPs (seed 003 §2.4) ------------------------------------------------------------------- */

double ltm_forward_flops(const model_config_t *c, int T) {
    const double D = c->d_model, F = c->d_ff, V = c->vocab_size, L = c->n_layers;
    const double hd = D / c->n_heads, Dq = hd * c->n_heads, Dkv = hd * c->n_kv_heads;
    // average keys a query sees: min(p + 1, W) over positions p < T
    double keys = 0;
    for (int p = 0; p < T; p++) keys += c->sliding_window > 0 && p + 1 > c->sliding_window ? c->sliding_window : p + 1;
    keys /= T;
    const double self_att = 2 * (2 * D * Dq + 2 * D * Dkv) + 4 * Dq * keys;
    double cross = 0;
    if (c->kind == MODEL_LTM) {
        const double m = c->latent_vectors;
        cross = 2 * (2 * D * Dq) + 2 * (2 * m * D * Dkv) / T + 4 * Dq * m;
    }
    const double mlp = 2 * 3 * D * F, head = 2 * D * V;
    return L * (self_att + cross + mlp) + head;
}

double ltm_train_flops(const model_config_t *c, int T) {
    const double K = c->kind == MODEL_LTM ? c->inner_steps : 0;
    return 3 * (K + 1) * ltm_forward_flops(c, T);
}

double ltm_exec_flops(const model_config_t *c, int T) {
    const double K = c->kind == MODEL_LTM ? c->inner_steps : 0;
    return (2 * K + 3) * ltm_forward_flops(c, T);
}
