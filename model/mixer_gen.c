/* model/mixer_gen.c: the causal mixer's decoding with a cache of mixing sums (mixer_gen.h). */
#include "model/mixer_gen.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/errmsg.h"
#include "model/llama.h"
#include "model/mixer_taps.h"

struct mixer_gen {
    mixers_t *m;
    model_config_t cfg;
    device_t *dev;
    mixers_lm_t w;
    int Bmax, Tmax, pos, B;
    void *mem;                  /* one device allocation for everything below */
    float *sums;                /* (L, Bmax, Tmax, D): S_l[b][t] */
    float *wm;                  /* (L, h k Tw Tw): the masked mixing weights */
    float *x, *xn, *z, *u, *branch, *x_mid; /* (N,D), N = Bmax*Tmax: the chunk's rows */
    float *gate, *up, *h;       /* (N,F) */
    float *rstd;                /* (N) */
    float *last, *logits;       /* (Bmax,D), (N,V) */
    uint32_t *tokens;           /* (N) */
    float *logits_host;         /* (Bmax,V) */
};

static void layout(mixer_gen_t *g, dev_arena_t *ar) {
    const model_config_t *c = &g->cfg;
    const size_t N = (size_t)g->Bmax * g->Tmax, D = c->d_model, F = c->d_ff, L = c->n_layers;
    const mixer_mix_t mix = mixer_block_mix(c, 1);
    g->sums = DEV_TAKE(ar, float, L * N * D);
    g->wm = DEV_TAKE(ar, float, L * mixer_mix_weight_floats(&mix));
    float **nd[] = {&g->x, &g->xn, &g->z, &g->u, &g->branch, &g->x_mid};
    for (size_t i = 0; i < sizeof nd / sizeof nd[0]; i++) *nd[i] = DEV_TAKE(ar, float, N * D);
    g->gate = DEV_TAKE(ar, float, N * F);
    g->up = DEV_TAKE(ar, float, N * F);
    g->h = DEV_TAKE(ar, float, N * F);
    g->rstd = DEV_TAKE(ar, float, N);
    g->last = DEV_TAKE(ar, float, (size_t)g->Bmax * D);
    g->logits = DEV_TAKE(ar, float, N * c->vocab_size);
    g->tokens = DEV_TAKE(ar, uint32_t, N);
}

void mixer_gen_destroy(mixer_gen_t **pg) {
    if (!pg || !*pg) return;
    mixer_gen_t *g = *pg;
    if (g->mem) DEV(g->dev, free, g->mem);
    free(g->logits_host);
    free(g);
    *pg = NULL;
}

int mixer_gen_create(mixer_gen_t **pg, mixers_t *m, int Bmax, int Tmax, char *err, size_t errlen) {
    *pg = NULL;
    const model_config_t *c = mixers_config(m);
    if (c->kind != MODEL_MIXER || c->no_mask_decoder)
        return err_fail(err, errlen, LLAMA_EARG, "generation needs a causal (masked) mixer language model");
    if (Bmax < 1 || Tmax < 1 || Tmax > c->max_seq)
        return err_fail(err, errlen, LLAMA_EARG, "generator of %d x %d positions: the mixer's n_ctx is %d", Bmax, Tmax,
                        c->max_seq);
    mixer_gen_t *g = calloc(1, sizeof *g);
    if (!g) return err_fail(err, errlen, LLAMA_ENOMEM, "out of memory");
    g->m = m;
    g->cfg = *c;
    g->dev = mixers_device(m);
    g->w = mixers_lm(m);
    g->Bmax = Bmax;
    g->Tmax = Tmax;
    dev_arena_t ar = {0};
    layout(g, &ar);
    g->logits_host = malloc(sizeof(float) * (size_t)Bmax * c->vocab_size);
    if (!g->logits_host || !(g->mem = DEV(g->dev, alloc, ar.used))) {
        char b[32];
        err_fail(err, errlen, LLAMA_ENOMEM, "the mixer's generator (%s for %d x %d positions) does not fit on %s",
                 device_bytes_str(ar.used, b, sizeof b), Bmax, Tmax, g->dev->name);
        mixer_gen_destroy(&g);
        return LLAMA_ENOMEM;
    }
    ar = (dev_arena_t){.base = g->mem};
    layout(g, &ar);
    mixer_gen_reset(g);
    *pg = g;
    return 0;
}

void mixer_gen_reset(mixer_gen_t *g) {
    const model_config_t *c = &g->cfg;
    const mixer_mix_t mix = mixer_block_mix(c, 1);
    const size_t nw = mixer_mix_weight_floats(&mix), per = (size_t)g->Bmax * g->Tmax * c->d_model;
    device_t *d = g->dev;
    DEV(d, zero, g->sums, sizeof(float) * per * c->n_layers);
    for (int l = 0; l < c->n_layers; l++) {
        const mixer_block_w_t *w = &g->w.blocks->mw[l];
        DEV(d, mixer_tril, g->wm + l * nw, w->mix_w, mix.h * mix.k, mix.Tw, 0);
        /* every sequence's sums start at the bias of their position */
        for (int b = 0; b < g->Bmax; b++)
            DEV(d, mixer_bias_forward, g->sums + l * per + (size_t)b * g->Tmax * c->d_model, w->mix_b, 1, g->Tmax,
                c->d_model, mix.h, mix.Tw);
    }
    g->pos = 0;
}

int mixer_gen_pos(const mixer_gen_t *g) { return g->pos; }
const float *mixer_gen_logits(const mixer_gen_t *g) { return g->logits_host; }

/* The chunk's mixing inputs z (B,T,D) into the sums of layer l at positions >= pos, then the
 * chunk's outputs u = the sums of its own positions. */
static void mix_chunk(mixer_gen_t *g, int l, int B, int T) {
    const model_config_t *c = &g->cfg;
    const mixer_mix_t mix = mixer_block_mix(c, 1);
    const int D = c->d_model, dh = D / mix.h, Tw = mix.Tw, p0 = g->pos, rest = g->Tmax - p0;
    const float *wm = g->wm + (size_t)l * mixer_mix_weight_floats(&mix);
    float *S = g->sums + (size_t)l * g->Bmax * g->Tmax * D;
    device_t *d = g->dev;
    for (int b = 0; b < B; b++) {
        float *Sb = S + ((size_t)b * g->Tmax + p0) * D;
        const float *zb = g->z + (size_t)b * T * D;
        for (int tp = 0; tp < mix.h * mix.k; tp++) {
            int o, c0, c1;
            mixer_tap(tp, mix.k, dh, &o, &c0, &c1);
            /* S[t][c] += sum over the chunk's s of W[t][s] z[s][c + o], t in [p0, Tmax) */
            DEV(d, gemm, GEMM_N, GEMM_N, c1 - c0, rest, T, 1.0f, zb + c0 + o, D,
                wm + (size_t)tp * Tw * Tw + (size_t)p0 * Tw + p0, Tw, 1.0f, Sb + c0, D);
        }
        DEV(d, copy_rows, g->u + (size_t)b * T * D, D, Sb, D, T, D);
    }
}

int mixer_gen_step(mixer_gen_t *g, const uint32_t *tokens, int B, int T, float *all_logits,
                   char *err, size_t errlen) {
    const model_config_t *c = &g->cfg;
    const int N = B * T, D = c->d_model, F = c->d_ff, V = c->vocab_size;
    device_t *d = g->dev;
    if (B < 1 || T < 1 || B > g->Bmax || g->pos + T > g->Tmax)
        return err_fail(err, errlen, LLAMA_EARG, "chunk of %d x %d at position %d beyond the generator's %d x %d", B, T,
                        g->pos, g->Bmax, g->Tmax);
    for (int n = 0; n < N; n++)
        if (tokens[n] >= (uint32_t)V)
            return err_fail(err, errlen, LLAMA_ETOKEN, "token id %u at position %d is outside the vocabulary of %d",
                            tokens[n], n, V);
    DEV(d, upload, g->tokens, tokens, sizeof(uint32_t) * N);
    DEV(d, embedding_forward, g->x, g->tokens, g->w.embed, N, D);
    for (int l = 0; l < c->n_layers; l++) {
        const mixer_block_w_t *w = &g->w.blocks->mw[l];
        // the block of mixer_block.c, its mixing taken from and added to the sums
        DEV(d, rmsnorm_forward, g->xn, g->rstd, g->x, w->mix_norm, N, D, c->norm_eps);
        if (w->in_proj) DEV(d, linear_forward, g->z, g->xn, w->in_proj, N, D, D);
        else DEV(d, copy, g->z, g->xn, sizeof(float) * N * D);
        mix_chunk(g, l, B, T);
        const float *branch = g->u;
        if (w->out_proj) {
            DEV(d, linear_forward, g->branch, g->u, w->out_proj, N, D, D);
            branch = g->branch;
        }
        DEV(d, add_forward, g->x_mid, g->x, branch, (size_t)N * D);
        DEV(d, rmsnorm_forward, g->xn, g->rstd, g->x_mid, w->mlp_norm, N, D, c->norm_eps);
        DEV(d, linear_forward, g->gate, g->xn, w->wgate, N, D, F);
        DEV(d, linear_forward, g->up, g->xn, w->wup, N, D, F);
        DEV(d, swiglu_forward, g->h, g->gate, g->up, N, F);
        DEV(d, linear_forward, g->branch, g->h, w->wdown, N, F, D);
        DEV(d, add_forward, g->x, g->x_mid, g->branch, (size_t)N * D);
    }
    // final norm and head: every new position's logits when asked, else each last one's
    const int rows = all_logits ? N : B;
    if (!all_logits) DEV(d, copy_rows, g->last, D, g->x + (size_t)(T - 1) * D, T * D, B, D);
    DEV(d, rmsnorm_forward, g->xn, g->rstd, all_logits ? g->x : g->last, g->w.norm, rows, D, c->norm_eps);
    DEV(d, linear_forward, g->logits, g->xn, g->w.head, rows, D, V);
    if (all_logits) {
        DEV(d, download, all_logits, g->logits, sizeof(float) * N * V);
        for (int b = 0; b < B; b++)
            memcpy(g->logits_host + (size_t)b * V, all_logits + ((size_t)b * T + T - 1) * V, sizeof(float) * V);
    } else {
        DEV(d, download, g->logits_host, g->logits, sizeof(float) * B * V);
    }
    g->pos += T;
    g->B = B;
    return DEV_SYNC_AS(d, err, errlen, LLAMA_EARG, LLAMA_ENOMEM);
}
