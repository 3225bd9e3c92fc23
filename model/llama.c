/* model/llama.c: parameters, activations and the forward/backward of the whole decoder. */
#include "model/llama.h"
#include "common/rng.h"
#include "model/rope_table.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct llama {
    model_config_t cfg;
    device_t *dev;                         /* every float / id buffer below is the device's */
    int Bmax, Tmax, B, T;
    float grad_scale;
    /* parameters and gradients: one allocation each, views in HF order */
    float *params, *grads;
    size_t n_params;
    tensor_view_t *pviews, *gviews;        /* host arrays of views onto device memory */
    int n_views;
    float *embed, *norm_f, *lm_head;       /* lm_head == embed when tied */
    float *dembed, *dnorm_f, *dlm_head;
    llama_block_w_t *w, *g;                /* (L), host arrays of device pointers */
    /* activations: one allocation, laid out by act_layout */
    void *act_mem;
    size_t act_bytes;
    float *rope_cos, *rope_sin;            /* (max_seq, hd/2) */
    float *stream;                         /* (L+1, N, D): input of each block, then output */
    llama_block_acts_t *acts;              /* (L), host array */
    llama_block_scratch_t scratch;
    float *xf, *rstd_f;                    /* (N,D), (N): final norm */
    float *logits, *lse;                   /* (N,V), (N): dlogits overwrite the logits */
    float *dstream, *dstream2, *dxf;       /* (N,D) */
    uint32_t *tokens, *targets;            /* (N) copies of the last forward's input */
    uint8_t *mask;                         /* (N) */
    /* host side */
    uint32_t *targets_host;                /* (N) the targets with uncounted rows zeroed */
    float *logits_host;                    /* (N,V) when the device is not the host */
    int has_mask, has_targets, count;
    /* The forward with targets also writes dlogits (one pass over the (N,V) logits instead of
     * two), over the logits (one (N,V) buffer, not two: 1.65 GB each at config G), for the
     * grad_scale it saw; the backward redoes it only if the scale changed, and llama_logits
     * recomputes the logits (the head's product again: the same bits) when they were
     * overwritten. logits_are_grad: the buffer holds dlogits at dlogits_scale. */
    int logits_are_grad;
    float dlogits_scale;
    /* xf and rstd_f hold the final norm of the last block's output: llama_blocks_forward
     * computed it in that block's residual add; llama_head_forward takes it and clears this */
    int head_normed;
};

int llama_config_check(const model_config_t *c, int B, int T, char *err, size_t errlen) {
#define BAD(...) do { snprintf(err, errlen, __VA_ARGS__); return LLAMA_ECONFIG; } while (0)
    if (!c) BAD("no config");
    if (c->vocab_size <= 0) BAD("vocab_size must be > 0 (got %d)", c->vocab_size);
    if (c->d_model <= 0) BAD("d_model must be > 0 (got %d)", c->d_model);
    if (c->n_layers <= 0) BAD("n_layers must be > 0 (got %d)", c->n_layers);
    if (c->n_heads <= 0 || c->n_kv_heads <= 0)
        BAD("n_heads and n_kv_heads must be > 0 (got %d, %d)", c->n_heads, c->n_kv_heads);
    if (c->d_model % c->n_heads)
        BAD("n_heads %d does not divide d_model %d", c->n_heads, c->d_model);
    if (c->n_heads % c->n_kv_heads)
        BAD("n_kv_heads %d does not divide n_heads %d", c->n_kv_heads, c->n_heads);
    if ((c->d_model / c->n_heads) % 2)
        BAD("head dim %d (d_model / n_heads) must be even for RoPE", c->d_model / c->n_heads);
    if (c->d_ff <= 0) BAD("d_ff must be > 0 (got %d)", c->d_ff);
    if (c->max_seq <= 0) BAD("max_seq must be > 0 (got %d)", c->max_seq);
    if (!(c->rope_theta > 0.0f)) BAD("rope_theta must be > 0 (got %g)", c->rope_theta);
    if (!(c->norm_eps >= 0.0f)) BAD("norm_eps must be >= 0 (got %g)", c->norm_eps);
    if (B <= 0 || T <= 0) BAD("batch shape must be positive (got B=%d T=%d)", B, T);
    if (T > c->max_seq) BAD("sequence length %d exceeds max_seq %d", T, c->max_seq);
#undef BAD
    return 0;
}

static void view_set(tensor_view_t *v, const char *name, float *data, int ndim, int64_t d0,
                     int64_t d1) {
    memset(v, 0, sizeof(*v));  /* dev is set by the caller once the views are laid out */
    snprintf(v->name, sizeof(v->name), "%s", name);
    v->ndim = ndim;
    v->shape[0] = d0;
    v->shape[1] = d1;
    v->data = data;
}

/* Lays out params (or grads, same offsets) in HF order; fills views (2 + 9L [+1] of them),
 * the block pointer tables and the named pointers. Returns the float count. */
static size_t layout(const model_config_t *c, float *base, tensor_view_t *views,
                     llama_block_w_t *blk, float **embed, float **norm_f, float **lm_head) {
    const int64_t V = c->vocab_size, D = c->d_model, F = c->d_ff, hd = D / c->n_heads;
    const int64_t Dq = hd * c->n_heads, Dkv = hd * c->n_kv_heads;
    size_t off = 0;
    int nv = 0;
    char name[TENSOR_NAME_LEN];
#define TAKE(ptr, nm, nd, a, b) do {                                                   \
        float *p_ = base ? base + off : NULL;                                           \
        if (views) view_set(&views[nv], nm, p_, nd, a, b);                              \
        nv++; off += (size_t)(a) * (nd == 2 ? (size_t)(b) : 1);                         \
        ptr = p_;                                                                       \
    } while (0)
    float *dummy;
    TAKE(dummy, "model.embed_tokens.weight", 2, V, D);
    if (embed) *embed = dummy;
    for (int l = 0; l < c->n_layers; l++) {
        llama_block_w_t b;
#define LNAME(s) (snprintf(name, sizeof(name), "model.layers.%d.%s", l, s), name)
        TAKE(b.attn_norm, LNAME("input_layernorm.weight"), 1, D, 0);
        TAKE(b.wq, LNAME("self_attn.q_proj.weight"), 2, Dq, D);
        TAKE(b.wk, LNAME("self_attn.k_proj.weight"), 2, Dkv, D);
        TAKE(b.wv, LNAME("self_attn.v_proj.weight"), 2, Dkv, D);
        TAKE(b.wo, LNAME("self_attn.o_proj.weight"), 2, D, Dq);
        TAKE(b.mlp_norm, LNAME("post_attention_layernorm.weight"), 1, D, 0);
        TAKE(b.wgate, LNAME("mlp.gate_proj.weight"), 2, F, D);
        TAKE(b.wup, LNAME("mlp.up_proj.weight"), 2, F, D);
        TAKE(b.wdown, LNAME("mlp.down_proj.weight"), 2, D, F);
#undef LNAME
        if (blk) blk[l] = b;
    }
    TAKE(dummy, "model.norm.weight", 1, D, 0);
    if (norm_f) *norm_f = dummy;
    if (!c->tied) {
        TAKE(dummy, "lm_head.weight", 2, V, D);
        if (lm_head) *lm_head = dummy;
    } else if (lm_head && embed) {
        *lm_head = *embed;
    }
#undef TAKE
    return off;
}

static int n_views_of(const model_config_t *c) { return 2 + 9 * c->n_layers + (c->tied ? 0 : 1); }

/* The activation buffers for (Bmax, Tmax) in one arena (count with a NULL base). */
static void act_layout(llama_t *m, dev_arena_t *ar) {
    const model_config_t *c = &m->cfg;
    const size_t N = (size_t)m->Bmax * m->Tmax, D = c->d_model, V = c->vocab_size, L = c->n_layers;
    const size_t hd = D / c->n_heads;
    m->rope_cos = DEV_TAKE(ar, float, (size_t)c->max_seq * (hd / 2));
    m->rope_sin = DEV_TAKE(ar, float, (size_t)c->max_seq * (hd / 2));
    m->stream = DEV_TAKE(ar, float, (L + 1) * N * D);
    for (size_t l = 0; l < L; l++)
        /* with the x_kv buffers, so any block can be the Free Transformer's injection block */
        llama_block_acts_layout(&m->acts[l], ar, c, m->Bmax, m->Tmax, 1);
    llama_block_scratch_layout(&m->scratch, ar, c, m->Bmax, m->Tmax);
    m->xf = DEV_TAKE(ar, float, N * D);
    m->rstd_f = DEV_TAKE(ar, float, N);
    m->logits = DEV_TAKE(ar, float, N * V);
    m->lse = DEV_TAKE(ar, float, N);
    m->dstream = DEV_TAKE(ar, float, N * D);
    m->dstream2 = DEV_TAKE(ar, float, N * D);
    m->dxf = DEV_TAKE(ar, float, N * D);
    m->tokens = DEV_TAKE(ar, uint32_t, N);
    m->targets = DEV_TAKE(ar, uint32_t, N);
    m->mask = DEV_TAKE(ar, uint8_t, N);
}

size_t llama_activation_bytes(const model_config_t *cfg, int Bmax, int Tmax) {
    llama_t m = {.cfg = *cfg, .Bmax = Bmax, .Tmax = Tmax};
    llama_block_acts_t acts[cfg->n_layers > 0 ? cfg->n_layers : 1];
    m.acts = acts;
    dev_arena_t ar = {0};
    act_layout(&m, &ar);
    return ar.used;
}

void llama_memory(const llama_t *m, model_memory_t *out) {
    out->params = out->grads = sizeof(float) * m->n_params;
    out->activations = m->act_bytes;
}

void llama_destroy(llama_t **pm) {
    if (!pm || !*pm) return;
    llama_t *m = *pm;
    if (m->dev) {
        if (m->params) DEV(m->dev, free, m->params);
        if (m->grads) DEV(m->dev, free, m->grads);
        if (m->act_mem) DEV(m->dev, free, m->act_mem);
    }
    void *p[] = {m->pviews, m->gviews, m->w, m->g, m->acts, m->targets_host, m->logits_host};
    for (size_t i = 0; i < sizeof(p) / sizeof(p[0]); i++) free(p[i]);
    free(m);
    *pm = NULL;
}

/* The largest batch (B rows of Tmax) whose activations the device can still allocate, or 0:
 * what an out-of-memory message suggests. */
static int largest_batch(device_t *d, const model_config_t *c, int Bmax, int Tmax) {
    int lo = 0, hi = Bmax - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        void *p = DEV(d, alloc, llama_activation_bytes(c, mid, Tmax));
        if (p) { DEV(d, free, p); lo = mid; } else hi = mid - 1;
    }
    return lo;
}

int llama_create(llama_t **pm, const model_config_t *cfg, int Bmax, int Tmax, uint64_t seed,
                 char *err, size_t errlen) {
    return llama_create_on(pm, device_cpu_default(), cfg, Bmax, Tmax, seed, err, errlen);
}

int llama_create_on(llama_t **pm, device_t *dev, const model_config_t *cfg, int Bmax, int Tmax,
                    uint64_t seed, char *err, size_t errlen) {
    if (!pm || !dev) { snprintf(err, errlen, "llama_create: NULL handle or device"); return LLAMA_EARG; }
    *pm = NULL;
    int rc = llama_config_check(cfg, Bmax, Tmax, err, errlen);
    if (rc) return rc;
    char what[64] = "model", b1[32];
    llama_t *m = calloc(1, sizeof(*m));
    if (!m) goto oom;
    m->cfg = *cfg;
    m->dev = dev;
    m->Bmax = m->B = Bmax;
    m->Tmax = m->T = Tmax;
    m->grad_scale = 1.0f;
    const model_config_t *c = &m->cfg;
    const size_t N = (size_t)Bmax * Tmax, L = c->n_layers;
    const int hd = c->d_model / c->n_heads;
    m->n_views = n_views_of(c);
    m->n_params = layout(c, NULL, NULL, NULL, NULL, NULL, NULL);
    m->pviews = calloc(m->n_views, sizeof(tensor_view_t));
    m->gviews = calloc(m->n_views, sizeof(tensor_view_t));
    m->w = calloc(L, sizeof(llama_block_w_t));
    m->g = calloc(L, sizeof(llama_block_w_t));
    m->acts = calloc(L, sizeof(llama_block_acts_t));
    m->targets_host = calloc(N, sizeof(uint32_t));
    if (!m->pviews || !m->gviews || !m->w || !m->g || !m->acts || !m->targets_host) goto oom;
    snprintf(what, sizeof what, "parameters (%s)", device_bytes_str(sizeof(float) * m->n_params, b1, sizeof b1));
    if (!(m->params = DEV(dev, alloc, sizeof(float) * m->n_params))) goto oom;
    snprintf(what, sizeof what, "gradients (%s)", device_bytes_str(sizeof(float) * m->n_params, b1, sizeof b1));
    if (!(m->grads = DEV(dev, alloc, sizeof(float) * m->n_params))) goto oom;
    layout(c, m->params, m->pviews, m->w, &m->embed, &m->norm_f, &m->lm_head);
    layout(c, m->grads, m->gviews, m->g, &m->dembed, &m->dnorm_f, &m->dlm_head);
    for (int i = 0; i < m->n_views; i++) m->pviews[i].dev = m->gviews[i].dev = dev;
    dev_arena_t ar = {0};
    act_layout(m, &ar);
    m->act_bytes = ar.used;
    if (!(m->act_mem = DEV(dev, alloc, m->act_bytes))) {
        int fit = largest_batch(dev, c, Bmax, Tmax);
        snprintf(err, errlen, "llama_create: the activations for B=%d T=%d (%s) do not fit on %s; "
                 "the largest batch that would is B=%d", Bmax, Tmax,
                 device_bytes_str(m->act_bytes, b1, sizeof b1), dev->name, fit);
        llama_destroy(&m);
        return LLAMA_ENOMEM;
    }
    ar.base = m->act_mem;
    ar.used = 0;
    act_layout(m, &ar);
    float *cos_t = malloc(sizeof(float) * c->max_seq * (hd / 2));
    float *sin_t = malloc(sizeof(float) * c->max_seq * (hd / 2));
    if (!cos_t || !sin_t) { free(cos_t); free(sin_t); goto oom; }
    rope_table_init(cos_t, sin_t, c->max_seq, hd, c->rope_theta);
    DEV(dev, upload, m->rope_cos, cos_t, sizeof(float) * c->max_seq * (hd / 2));
    DEV(dev, upload, m->rope_sin, sin_t, sizeof(float) * c->max_seq * (hd / 2));
    free(cos_t);
    free(sin_t);
    if ((rc = llama_init(m, seed))) goto oom;
    *pm = m;
    return 0;
oom:
    snprintf(err, errlen, "llama_create: out of memory for the %s of B=%d T=%d on %s", what, Bmax,
             Tmax, dev->name);
    llama_destroy(&m);
    return LLAMA_ENOMEM;
}

int llama_init(llama_t *m, uint64_t seed) {
    /* drawn on the host in parameter order (the same weights on every device), then uploaded */
    float *host = device_is_host(m->dev) ? m->params : malloc(sizeof(float) * m->n_params);
    if (!host) return LLAMA_ENOMEM;
    rng_t r;
    rng_seed(&r, seed);
    for (int i = 0; i < m->n_views; i++) {
        const tensor_view_t *v = &m->pviews[i];
        float *p = host + (v->data - m->params);
        int64_t n = tensor_numel(v);
        if (v->ndim == 1)
            for (int64_t j = 0; j < n; j++) p[j] = 1.0f;
        else
            for (int64_t j = 0; j < n; j++) p[j] = 0.02f * rng_normal(&r);
    }
    if (host != m->params) {
        DEV(m->dev, upload, m->params, host, sizeof(float) * m->n_params);
        free(host);
    }
    return 0;
}

const model_config_t *llama_config(const llama_t *m) { return &m->cfg; }

int llama_set_shape(llama_t *m, int B, int T, char *err, size_t errlen) {
    if (B <= 0 || T <= 0 || B > m->Bmax || T > m->Tmax) {
        snprintf(err, errlen, "batch shape B=%d T=%d outside the allocated B<=%d T<=%d", B, T,
                 m->Bmax, m->Tmax);
        return LLAMA_EARG;
    }
    m->B = B;
    m->T = T;
    return 0;
}
void llama_shape(const llama_t *m, int *B, int *T) { *B = m->B; *T = m->T; }

static int copy_views(const tensor_view_t *src, int n, tensor_view_t *views, int cap) {
    if (views)
        for (int i = 0; i < n && i < cap; i++) views[i] = src[i];
    return n;
}
int llama_params(llama_t *m, tensor_view_t *views, int cap) {
    return copy_views(m->pviews, m->n_views, views, cap);
}
int llama_grads(llama_t *m, tensor_view_t *views, int cap) {
    return copy_views(m->gviews, m->n_views, views, cap);
}
float *llama_param_data(llama_t *m, size_t *n) { if (n) *n = m->n_params; return m->params; }
float *llama_grad_data(llama_t *m, size_t *n) { if (n) *n = m->n_params; return m->grads; }
void llama_zero_grad(llama_t *m) { DEV(m->dev, zero, m->grads, sizeof(float) * m->n_params); }
void llama_set_grad_scale(llama_t *m, float s) { m->grad_scale = s; }
/* The logits again in the buffer, over dlogits (same product, same inputs: the same bits). */
static void logits_again(llama_t *m) {
    const model_config_t *c = &m->cfg;
    DEV(m->dev, linear_forward, m->logits, m->xf, m->lm_head, m->B * m->T, c->d_model, c->vocab_size);
    m->logits_are_grad = 0;
}
const float *llama_logits(llama_t *m) {
    if (m->logits_are_grad) logits_again(m);
    if (device_is_host(m->dev)) return m->logits;
    const size_t n = (size_t)m->B * m->T * m->cfg.vocab_size;
    if (!m->logits_host && !(m->logits_host = malloc(sizeof(float) * (size_t)m->Bmax * m->Tmax *
                                                     m->cfg.vocab_size)))
        return NULL;
    DEV(m->dev, download, m->logits_host, m->logits, sizeof(float) * n);
    return m->logits_host;
}
const float *llama_logits_dev(const llama_t *m) { return m->logits; }
device_t *llama_device(const llama_t *m) { return m->dev; }
int llama_target_count(const llama_t *m) { return m->count; }

float *llama_stream(llama_t *m, int l) {
    return m->stream + (size_t)l * m->Bmax * m->Tmax * m->cfg.d_model;
}
float *llama_dstream(llama_t *m) { return m->dstream; }
llama_block_w_t llama_block_weights(llama_t *m, int l) { return m->w[l]; }
llama_block_w_t llama_block_grads(llama_t *m, int l) { return m->g[l]; }
const float *llama_rope_cos(const llama_t *m) { return m->rope_cos; }
const float *llama_rope_sin(const llama_t *m) { return m->rope_sin; }
llama_block_scratch_t *llama_scratch(llama_t *m) { return &m->scratch; }
llama_block_acts_t *llama_block_acts(llama_t *m, int l) { return &m->acts[l]; }

static int check_ids(const uint32_t *ids, const uint8_t *mask, int N, int V, const char *what,
                     char *err, size_t errlen) {
    for (int n = 0; n < N; n++)
        if ((!mask || mask[n]) && ids[n] >= (uint32_t)V) {
            snprintf(err, errlen, "%s id %u at position %d is outside the vocabulary of %d", what,
                     ids[n], n, V);
            return LLAMA_ETOKEN;
        }
    return 0;
}

int llama_embed(llama_t *m, const uint32_t *tokens, char *err, size_t errlen) {
    const int N = m->B * m->T;
    m->has_targets = 0;  /* a refused forward leaves nothing to differentiate */
    m->head_normed = 0;
    if (!tokens) { snprintf(err, errlen, "llama_forward: no tokens"); return LLAMA_EARG; }
    int rc = check_ids(tokens, NULL, N, m->cfg.vocab_size, "token", err, errlen);
    if (rc) return rc;
    DEV(m->dev, upload, m->tokens, tokens, sizeof(uint32_t) * N);
    DEV(m->dev, embedding_forward, llama_stream(m, 0), m->tokens, m->embed, N, m->cfg.d_model);
    return 0;
}

void llama_block_forward_kv(llama_t *m, int l, const float *x_kv) {
    float *x = llama_stream(m, l);
    m->head_normed = 0;
    llama_block_forward(m->dev, llama_stream(m, l + 1), &m->acts[l], &m->w[l], x, x_kv ? x_kv : x, &m->cfg,
                        m->rope_cos, m->rope_sin, m->B, m->T, 1, &m->scratch);
}

/* Each block computes the norm that reads its output in its last residual add: the next
 * block's attention norm (inside [l0, l1)), or after the last layer the final norm */
void llama_blocks_forward(llama_t *m, int l0, int l1) {
    const int L = m->cfg.n_layers;
    m->head_normed = 0;
    for (int l = l0; l < l1; l++) {
        float *x = llama_stream(m, l);
        llama_norm_next_t nx = {0};
        if (l + 1 < l1) nx = (llama_norm_next_t){m->w[l + 1].attn_norm, m->acts[l + 1].xn, m->acts[l + 1].rstd};
        else if (l + 1 == L) nx = (llama_norm_next_t){m->norm_f, m->xf, m->rstd_f};
        llama_block_forward_chain(m->dev, llama_stream(m, l + 1), &m->acts[l], &m->w[l], x, x, &m->cfg,
                                  m->rope_cos, m->rope_sin, m->B, m->T, 1, &m->scratch, l > l0,
                                  nx.w ? &nx : NULL);
        m->head_normed = l + 1 == L;
    }
}

int llama_head_forward(llama_t *m, const uint32_t *targets, const uint8_t *mask, float *loss,
                       char *err, size_t errlen) {
    const model_config_t *c = &m->cfg;
    const int N = m->B * m->T;
    // final rmsnorm (unless the last block computed it) and the language-model head (tied: the
    // embedding table)
    if (!m->head_normed)
        DEV(m->dev, rmsnorm_forward, m->xf, m->rstd_f, llama_stream(m, c->n_layers), m->norm_f, N,
            c->d_model, c->norm_eps);
    m->head_normed = 0;
    DEV(m->dev, linear_forward, m->logits, m->xf, m->lm_head, N, c->d_model, c->vocab_size);
    m->has_targets = targets != NULL;
    m->logits_are_grad = 0;
    if (!targets) return 0;
    int rc = check_ids(targets, mask, N, c->vocab_size, "target", err, errlen);
    if (rc) { m->has_targets = 0; return rc; }
    memcpy(m->targets_host, targets, sizeof(uint32_t) * N);
    m->has_mask = mask != NULL;
    if (mask) DEV(m->dev, upload, m->mask, mask, N);
    /* Uncounted targets are not read by the loss, but they are by the backward's row index:
     * keep them in range. */
    if (mask)
        for (int n = 0; n < N; n++)
            if (!mask[n]) m->targets_host[n] = 0;
    DEV(m->dev, upload, m->targets, m->targets_host, sizeof(uint32_t) * N);
    /* in place: dlogits over the logits (ops.h allows the alias; the loss is read first). The
     * head's two products (head_backward) are the only readers of dlogits (llama_logits makes
     * the logits again), so at bf16 they may be kept as their shadow alone (device.h
     * products_only: the mark is honoured by the ops that write shadows, the classifier here;
     * the logits' product writes its fp32 result as always) */
    dev_products_only(m->dev, m->logits, (size_t)N * c->vocab_size);
    float l = DEV(m->dev, crossentropy_forward, m->logits, m->lse, &m->count, m->logits,
                  m->targets, m->has_mask ? m->mask : NULL, N, c->vocab_size, m->grad_scale);
    m->logits_are_grad = 1;
    m->dlogits_scale = m->grad_scale;
    if (loss) *loss = l;
    return 0;
}

int llama_forward(llama_t *m, const uint32_t *tokens, const uint32_t *targets,
                  const uint8_t *mask, float *loss, char *err, size_t errlen) {
    int rc = llama_embed(m, tokens, err, errlen);
    if (rc) return rc;
    llama_blocks_forward(m, 0, m->cfg.n_layers);
    return llama_head_forward(m, targets, mask, loss, err, errlen);
}

static void head_backward(llama_t *m, int weight_grads) {
    const model_config_t *c = &m->cfg;
    const int N = m->B * m->T, D = c->d_model;
    if (!m->logits_are_grad || m->dlogits_scale != m->grad_scale) {
        if (m->logits_are_grad) logits_again(m);
        DEV(m->dev, crossentropy_backward, m->logits, m->logits, m->lse, m->targets,
            m->has_mask ? m->mask : NULL, N, c->vocab_size, m->grad_scale);
        m->logits_are_grad = 1;
        m->dlogits_scale = m->grad_scale;
    }
    DEV(m->dev, linear_backward_set, m->dxf, weight_grads ? m->dlm_head : NULL, m->logits, m->xf,
        m->lm_head, N, D, c->vocab_size);
    DEV(m->dev, zero, m->dstream, sizeof(float) * N * D);
    DEV(m->dev, rmsnorm_backward, m->dstream, weight_grads ? m->dnorm_f : NULL, m->dxf,
        llama_stream(m, c->n_layers), m->norm_f, m->rstd_f, N, D);
}
void llama_head_backward(llama_t *m) { head_backward(m, 1); }
void llama_head_backward_input(llama_t *m) { head_backward(m, 0); }

void llama_block_backward_kv(llama_t *m, int l, const float *x_kv, float *dx_kv) {
    float *x = llama_stream(m, l);
    /* the block writes dstream2 (no zeroing pass) */
    llama_block_backward(m->dev, m->dstream2, x_kv ? dx_kv : m->dstream2, &m->g[l], m->dstream, &m->acts[l],
                         &m->w[l], x, x_kv ? x_kv : x, &m->cfg, m->rope_cos, m->rope_sin, m->B,
                         m->T, 1, &m->scratch);
    float *t = m->dstream; m->dstream = m->dstream2; m->dstream2 = t;
}

void llama_blocks_backward(llama_t *m, int l1, int l0) {
    for (int l = l1 - 1; l >= l0; l--) llama_block_backward_kv(m, l, NULL, NULL);
}

void llama_embed_backward(llama_t *m) {
    DEV(m->dev, embedding_backward, m->dembed, m->dstream, m->tokens, m->B * m->T,
        m->cfg.d_model);
}

int llama_backward(llama_t *m, char *err, size_t errlen) {
    if (!m->has_targets) {
        snprintf(err, errlen, "llama_backward: the last forward had no targets");
        return LLAMA_EARG;
    }
    llama_head_backward(m);
    llama_blocks_backward(m, m->cfg.n_layers, 0);
    llama_embed_backward(m);
    return 0;
}
