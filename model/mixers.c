/* model/mixers.c: building the masked-mixer families' models (see mixers.h): the checks, the
 * parameter and activation layouts, the init, the views, and the memory model's encoder
 * taken from another checkpoint. The forward and backward are in mixers_step.c. */
#include "model/mixers_impl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/errmsg.h"
#include "common/rng.h"
#include "model/checkpoint.h"
#include "model/llama.h"

int mixers_config_check(const model_config_t *c, int B, int T, char *err, size_t errlen) {
    int rc = llama_config_check(c, B, T, err, errlen);
    if (rc) return rc;
    if (!mixer_kind_is(c->kind))
        return err_fail(err, errlen, LLAMA_ECONFIG, "mixers: config kind %d is not a mixer kind", (int)c->kind);
    if (mixer_config_validate(c, err, errlen)) return LLAMA_ECONFIG;
    if (mixer_kind_is_memory(c->kind) && c->no_mask_decoder)
        return err_fail(err, errlen, LLAMA_ECONFIG, "a memory model's decoder is causal: it cannot be unmasked");
    return 0;
}

/* Takes every tensor in view order from p; grads 0 fills m->w and the stacks' weights, 1
 * m->g and their gradients. */
static void layout(mixers_t *m, ptable_t *p, int grads) {
    const model_config_t *c = &m->cfg;
    const int64_t V = c->vocab_size, D = c->d_model, de = m->de;
    mixers_w_t *w = grads ? &m->g : &m->w;
    memset(w, 0, sizeof *w);
    if (m->has_enc) {
        w->enc_embed = ptable_mat(p, "encoder.", "embed_tokens.weight", V, D);
        blockstack_layout(&m->enc, "encoder.layers.", p, grads);
        if (de < D) w->down = ptable_mat(p, "encoder.", "down.weight", de, D);
        m->n_enc_views = p->n;
    }
    const char *dec = m->is_ae ? "decoder." : "model.";
    if (m->is_ae) {
        if (de < D) w->up = ptable_mat(p, dec, "up.weight", D, de);
        if (c->unroll) w->unroll = ptable_mat(p, dec, "unroll.weight", D, m->nd);
    } else {
        if (m->is_mem) w->mem_proj = ptable_mat(p, "memory.", "proj.weight", D, de);
        if (m->is_mem && c->memory_start) w->mem_start = ptable_vec(p, "memory.", "start", D);
        w->dec_embed = ptable_mat(p, dec, "embed_tokens.weight", V, D);
    }
    blockstack_layout(&m->dec, m->is_ae ? "decoder.layers." : "model.layers.", p, grads);
    w->norm = ptable_vec(p, dec, "norm.weight", D);
    w->head = c->tied ? (m->is_ae ? w->enc_embed : w->dec_embed) : ptable_mat(p, "", "lm_head.weight", V, D);
}

static void act_layout(mixers_t *m, dev_arena_t *ar) {
    const model_config_t *c = &m->cfg;
    const size_t N = (size_t)m->Bmax * m->Tmax, D = c->d_model, V = c->vocab_size, B = m->Bmax;
    const int mixer = mixer_kind_uses_mixer(c->kind);
    blockstack_shared_layout(&m->sh, ar, c, m->Bmax, m->Tmax, mixer, !mixer);
    if (m->has_enc) blockstack_acts_layout(&m->enc, ar, m->Bmax, m->Tmax);
    blockstack_acts_layout(&m->dec, ar, m->Bmax, m->Tmax);
    if (m->has_enc) {
        m->e = DEV_TAKE(ar, float, B * D);
        m->m_raw = m->de < (int)D ? DEV_TAKE(ar, float, B * m->de) : m->e;
        m->m_unit = DEV_TAKE(ar, float, B * m->de);
        m->rstd_m = DEV_TAKE(ar, float, B);
        m->ones = DEV_TAKE(ar, float, m->de);
        m->d_unit = DEV_TAKE(ar, float, B * m->de);
        m->m_emb = DEV_TAKE(ar, float, B * m->de);
        m->u = DEV_TAKE(ar, float, B * m->de);
        m->e_dec = (m->is_mem || m->de < (int)D) ? DEV_TAKE(ar, float, B * D) : m->m_emb;
        m->d_e = DEV_TAKE(ar, float, B * D);
        m->d_raw = m->de < (int)D ? DEV_TAKE(ar, float, B * m->de) : m->d_e;
        m->d_m = DEV_TAKE(ar, float, B * m->de);
        m->d_dec = (m->is_mem || m->de < (int)D) ? DEV_TAKE(ar, float, B * D) : m->d_m;
        m->enc_tokens = DEV_TAKE(ar, uint32_t, N);
    }
    if (m->is_ae && c->unroll) {
        m->win = DEV_TAKE(ar, float, N * m->nd);
        m->dwin = DEV_TAKE(ar, float, N * m->nd);
    }
    m->xf = DEV_TAKE(ar, float, N * D);
    m->rstd_f = DEV_TAKE(ar, float, N);
    m->logits = DEV_TAKE(ar, float, N * V);
    m->lse = DEV_TAKE(ar, float, N);
    m->dxf = DEV_TAKE(ar, float, N * D);
    m->zeros = DEV_TAKE(ar, float, D);
    m->tokens = DEV_TAKE(ar, uint32_t, N);
    m->dec_tokens = DEV_TAKE(ar, uint32_t, N);
    m->targets = DEV_TAKE(ar, uint32_t, N);
    m->mask = DEV_TAKE(ar, uint8_t, N);
}

void mixers_destroy(mixers_t **pm) {
    if (!pm || !*pm) return;
    mixers_t *m = *pm;
    if (m->dev) {
        void *d[] = {m->params, m->grads, m->act_mem};
        for (size_t i = 0; i < sizeof d / sizeof d[0]; i++)
            if (d[i]) DEV(m->dev, free, d[i]);
    }
    blockstack_free(&m->enc);
    blockstack_free(&m->dec);
    void *h[] = {m->pv, m->gv, m->host_ids, m->host_mask, m->logits_host, m->emb_host};
    for (size_t i = 0; i < sizeof h / sizeof h[0]; i++) free(h[i]);
    free(m);
    *pm = NULL;
}

int mixers_create_on(mixers_t **pm, device_t *dev, const model_config_t *cfg, int Bmax, int Tmax,
                     uint64_t seed, char *err, size_t errlen) {
    if (!pm || !dev) return err_fail(err, errlen, LLAMA_EARG, "mixers_create: NULL handle or device");
    *pm = NULL;
    int rc = mixers_config_check(cfg, Bmax, Tmax, err, errlen);
    if (rc) return rc;
    char what[64] = "model", b1[32];
    mixers_t *m = calloc(1, sizeof *m);
    if (!m) goto oom;
    m->cfg = *cfg;
    m->dev = dev;
    m->Bmax = m->B = Bmax;
    m->Tmax = m->T = Tmax;
    m->grad_scale = 1.0f;
    m->seed = seed;
    mixers_set_step(m, 0);
    const model_config_t *c = &m->cfg;
    m->has_enc = mixer_kind_has_encoder(c->kind);
    m->is_ae = mixer_kind_is_autoencoder(c->kind);
    m->is_mem = mixer_kind_is_memory(c->kind);
    m->de = m->has_enc ? mixer_embed_dim(c) : 0;
    m->nd = c->d_model / 2;
    const blocks_kind bk = mixer_kind_uses_mixer(c->kind) ? BLOCKS_MIXER : BLOCKS_LLAMA;
    if ((m->has_enc && blockstack_init(&m->enc, bk, c->encoder_layers, !c->no_mask_encoder, c)) ||
        blockstack_init(&m->dec, bk, c->n_layers, !c->no_mask_decoder, c))
        goto oom;
    ptable_t count = {0};
    layout(m, &count, 0);
    m->n_params = count.off;
    m->nv = count.n;
    const size_t N = (size_t)Bmax * Tmax;
    m->pv = calloc(m->nv, sizeof *m->pv);
    m->gv = calloc(m->nv, sizeof *m->gv);
    m->host_ids = calloc(N, sizeof *m->host_ids);
    m->host_mask = calloc(N, 1);
    if (!m->pv || !m->gv || !m->host_ids || !m->host_mask) goto oom;
    snprintf(what, sizeof what, "parameters (%s)", device_bytes_str(sizeof(float) * m->n_params, b1, sizeof b1));
    if (!(m->params = DEV(dev, alloc, sizeof(float) * m->n_params)) ||
        !(m->grads = DEV(dev, alloc, sizeof(float) * m->n_params)))
        goto oom;
    ptable_t pp = {.base = m->params, .views = m->pv, .dev = dev};
    ptable_t pg = {.base = m->grads, .views = m->gv, .dev = dev};
    layout(m, &pp, 0);
    layout(m, &pg, 1);
    dev_arena_t ar = {0};
    act_layout(m, &ar);
    m->act_bytes = ar.used;
    snprintf(what, sizeof what, "activations (%s)", device_bytes_str(m->act_bytes, b1, sizeof b1));
    if (!(m->act_mem = DEV(dev, alloc, m->act_bytes))) goto oom;
    ar = (dev_arena_t){.base = m->act_mem};
    act_layout(m, &ar);
    if (blockstack_shared_init(&m->sh, dev, c) || mixers_init(m, seed)) goto oom;
    if (m->has_enc) {
        float *one = malloc(sizeof(float) * m->de);
        if (!one) goto oom;
        for (int i = 0; i < m->de; i++) one[i] = 1.0f;
        DEV(dev, upload, m->ones, one, sizeof(float) * m->de);
        free(one);
    }
    *pm = m;
    return 0;
oom:
    snprintf(err, errlen, "mixers_create: out of memory for the %s of B=%d T=%d on %s", what, Bmax, Tmax,
             dev->name);
    mixers_destroy(&m);
    return LLAMA_ENOMEM;
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

int mixers_init(mixers_t *m, uint64_t seed) {
    float *host = device_is_host(m->dev) ? m->params : malloc(sizeof(float) * m->n_params);
    if (!host) return LLAMA_ENOMEM;
    const model_config_t *c = &m->cfg;
    const float bound = mixer_kind_uses_mixer(c->kind) ? 1.0f / sqrtf((float)c->mixer_kernel * c->max_seq) : 0;
    rng_t r;
    rng_seed(&r, seed);
    for (int i = 0; i < m->nv; i++) {
        const tensor_view_t *v = &m->pv[i];
        float *p = host + (v->data - m->params);
        const int64_t n = tensor_numel(v);
        const int conv = ends_with(v->name, "mixer.weight") || ends_with(v->name, "mixer.bias");
        const int start = !strcmp(v->name, "memory.start");   /* 0: the model starts as one without it */
        for (int64_t j = 0; j < n; j++)
            p[j] = conv ? bound * (2.0f * rng_f32(&r) - 1.0f) : start ? 0.0f : v->ndim == 1 ? 1.0f : 0.02f * rng_normal(&r);
    }
    if (host != m->params) {
        DEV(m->dev, upload, m->params, host, sizeof(float) * m->n_params);
        free(host);
    }
    return 0;
}

void mixers_memory(const mixers_t *m, model_memory_t *out) {
    out->params = out->grads = sizeof(float) * m->n_params;
    out->activations = m->act_bytes;
}
device_t *mixers_device(const mixers_t *m) { return m->dev; }
const model_config_t *mixers_config(const mixers_t *m) { return &m->cfg; }
int mixers_embed_floats(const mixers_t *m) { return m->de; }

int mixers_set_shape(mixers_t *m, int B, int T, char *err, size_t errlen) {
    if (B <= 0 || T <= 0 || B > m->Bmax || T > m->Tmax)
        return err_fail(err, errlen, LLAMA_EARG, "batch shape B=%d T=%d outside the allocated B<=%d T<=%d", B, T,
                        m->Bmax, m->Tmax);
    m->B = B;
    m->T = T;
    return 0;
}

int mixers_params(mixers_t *m, tensor_view_t *v, int cap) { return ptable_copy_views(m->pv, m->nv, v, cap); }
int mixers_grads(mixers_t *m, tensor_view_t *v, int cap) { return ptable_copy_views(m->gv, m->nv, v, cap); }
void mixers_zero_grad(mixers_t *m) { DEV(m->dev, zero, m->grads, sizeof(float) * m->n_params); }
void mixers_set_grad_scale(mixers_t *m, float s) { m->grad_scale = s; }

/* The noise's draws: key (seed, step), element i of row r at counter r d_e + i. */
#define MIXERS_U_SALT 0x5eed004e3bull
void mixers_set_step(mixers_t *m, uint64_t step) {
    m->u_key = rng_counter_key(m->seed ^ MIXERS_U_SALT, step);
    m->u_counter = 0;
}
void mixers_set_row(mixers_t *m, uint64_t row0) { m->u_counter = row0 * (uint64_t)m->de; }

int mixers_set_embed_eval(mixers_t *m, int bits, int zero, char *err, size_t errlen) {
    if (!m->has_enc) return err_fail(err, errlen, LLAMA_EARG, "the causal mixer has no stored embedding");
    if (bits != 0 && bits != 32 && (bits < 1 || bits > MIXER_EMBED_BITS_MAX))
        return err_fail(err, errlen, LLAMA_EARG, "a stored float takes 1..%d bits (a rounded code) or 32 (the float itself), not %d",
                        MIXER_EMBED_BITS_MAX, bits);
    if (bits && bits < 32 && !(m->cfg.embed_range > 0))
        return err_fail(err, errlen, LLAMA_EARG, "the stored embedding is unbounded (trained without --embed-range): "
                        "no %d-bit code of it exists, only its 32-bit floats", bits);
    m->emb_bits = bits;
    m->emb_zero = zero != 0;
    return 0;
}

int mixers_frozen(const mixers_t *m, int i) {
    return m->is_mem && m->cfg.freeze_encoder && i >= 0 && i < m->n_enc_views;
}

mixers_lm_t mixers_lm(const mixers_t *m) {
    return (mixers_lm_t){.embed = m->w.dec_embed, .norm = m->w.norm, .head = m->w.head, .blocks = &m->dec};
}

/* The encoder of `have` can serve as the encoder of `want` when every field that shapes it or
 * its computation agrees; otherwise one line names the first that does not. */
static int encoder_compatible(const model_config_t *want, const model_config_t *have, const char *dir,
                              char *err, size_t errlen) {
    const int mixer = mixer_kind_uses_mixer(want->kind);
    const model_kind ae = mixer ? MODEL_MIXER_AE : MODEL_LLAMA_AE;
    if (have->kind != ae && have->kind != want->kind)
        return err_fail(err, errlen, LLAMA_ECONFIG, "--encoder %s holds a %s model; a %s takes the encoder of a %s (or of a %s)",
                        dir, mixer_kind_is(have->kind) ? mixer_kind_name(have->kind) : have->kind == MODEL_FREE ? "free" : "llama",
                        mixer_kind_name(want->kind), mixer_kind_name(ae), mixer_kind_name(want->kind));
    const struct { const char *what; int w, h, applies; } f[] = {
        {"vocabulary", want->vocab_size, have->vocab_size, 1},
        {"d_model", want->d_model, have->d_model, 1},
        {"d_ff", want->d_ff, have->d_ff, 1},
        {"encoder layers", want->encoder_layers, have->encoder_layers, 1},
        {"embedding dimension d_e", mixer_embed_dim(want), mixer_embed_dim(have), 1},
        {"unmasked encoder (--no-mask-encoder)", want->no_mask_encoder, have->no_mask_encoder, 1},
        {"n_ctx (max_seq, the mixing weights' side)", want->max_seq, have->max_seq, mixer},
        {"mixer heads", want->mixer_heads, have->mixer_heads, mixer},
        {"mixer kernel", want->mixer_kernel, have->mixer_kernel, mixer},
        {"attention heads", want->n_heads, have->n_heads, !mixer},
        {"key/value heads", want->n_kv_heads, have->n_kv_heads, !mixer},
    };
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        if (f[i].applies && f[i].w != f[i].h)
            return err_fail(err, errlen, LLAMA_ECONFIG, "--encoder %s: its %s is %d, the memory model's is %d (the encoder's shape must match)",
                            dir, f[i].what, f[i].h, f[i].w);
    return 0;
}

int mixers_load_encoder(mixers_t *m, const char *dir, char *err, size_t errlen) {
    if (!m->is_mem) return err_fail(err, errlen, LLAMA_EARG, "--encoder is for the memory models (mixer-mem, llama-mem)");
    char why[512];
    model_config_t have;
    if (ckpt_verify(dir, why, sizeof why) || ckpt_load_config(dir, &have, why, sizeof why))
        return err_fail(err, errlen, LLAMA_ECONFIG, "--encoder %s: %s", dir, why);
    int rc = encoder_compatible(&m->cfg, &have, dir, err, errlen);
    if (rc) return rc;
    if (ckpt_load_params_some(dir, m->pv, m->n_enc_views, why, sizeof why)) /* its encoder of a whole model */
        return err_fail(err, errlen, LLAMA_ECONFIG, "--encoder %s: %s", dir, why);
    return 0;
}
