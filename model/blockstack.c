/* model/blockstack.c: a stack of mixer or Llama blocks (see blockstack.h). */
#include "model/blockstack.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/rope_table.h"

int blockstack_init(blockstack_t *s, blocks_kind kind, int L, int causal, const model_config_t *c) {
    memset(s, 0, sizeof *s);
    s->kind = kind;
    s->L = L;
    s->causal = causal;
    s->cfg = c;
    if (kind == BLOCKS_MIXER) {
        s->mw = calloc(L, sizeof *s->mw);
        s->mg = calloc(L, sizeof *s->mg);
        s->ma = calloc(L, sizeof *s->ma);
        return s->mw && s->mg && s->ma ? 0 : -1;
    }
    s->lw = calloc(L, sizeof *s->lw);
    s->lg = calloc(L, sizeof *s->lg);
    s->la = calloc(L, sizeof *s->la);
    return s->lw && s->lg && s->la ? 0 : -1;
}

void blockstack_free(blockstack_t *s) {
    void *p[] = {s->mw, s->mg, s->ma, s->lw, s->lg, s->la};
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++) free(p[i]);
    memset(s, 0, sizeof *s);
}

void blockstack_layout(blockstack_t *s, const char *prefix, ptable_t *p, int grads) {
    char name[TENSOR_NAME_LEN];
    for (int l = 0; l < s->L; l++) {
        snprintf(name, sizeof name, "%s%d.", prefix, l);
        if (s->kind == BLOCKS_MIXER) mixer_block_layout(s->cfg, name, p, grads ? &s->mg[l] : &s->mw[l]);
        else llama_block_layout(s->cfg, name, p, grads ? &s->lg[l] : &s->lw[l]);
    }
}

void blockstack_acts_layout(blockstack_t *s, dev_arena_t *ar, int Bmax, int Tmax) {
    s->N = (size_t)Bmax * Tmax;
    s->stream = DEV_TAKE(ar, float, (size_t)(s->L + 1) * s->N * s->cfg->d_model);
    for (int l = 0; l < s->L; l++) {
        if (s->kind == BLOCKS_MIXER) mixer_block_acts_layout(&s->ma[l], ar, s->cfg, Bmax, Tmax);
        else llama_block_acts_layout(&s->la[l], ar, s->cfg, Bmax, Tmax, 0);
    }
}

void blockstack_shared_layout(blockstack_shared_t *sh, dev_arena_t *ar, const model_config_t *c,
                              int Bmax, int Tmax, int mixer, int llama) {
    const size_t N = (size_t)Bmax * Tmax, hd2 = (size_t)(c->d_model / c->n_heads) / 2;
    memset(sh, 0, sizeof *sh);
    if (mixer) mixer_block_scratch_layout(&sh->ms, ar, c, Bmax, Tmax);
    if (llama) {
        llama_block_scratch_layout(&sh->ls, ar, c, Bmax, Tmax);
        sh->rope_cos = DEV_TAKE(ar, float, (size_t)c->max_seq * hd2);
        sh->rope_sin = DEV_TAKE(ar, float, (size_t)c->max_seq * hd2);
    }
    sh->dA = DEV_TAKE(ar, float, N * c->d_model);
    sh->dB = DEV_TAKE(ar, float, N * c->d_model);
}

int blockstack_shared_init(blockstack_shared_t *sh, device_t *d, const model_config_t *c) {
    if (!sh->rope_cos) return 0;
    const int hd = c->d_model / c->n_heads;
    const size_t n = (size_t)c->max_seq * (hd / 2);
    float *cs = malloc(sizeof(float) * n), *sn = malloc(sizeof(float) * n);
    if (!cs || !sn) {
        free(cs);
        free(sn);
        return -1;
    }
    rope_table_init(cs, sn, c->max_seq, hd, c->rope_theta);
    DEV(d, upload, sh->rope_cos, cs, sizeof(float) * n);
    DEV(d, upload, sh->rope_sin, sn, sizeof(float) * n);
    free(cs);
    free(sn);
    return 0;
}

float *blockstack_stream(const blockstack_t *s, int l) {
    return s->stream + (size_t)l * s->N * s->cfg->d_model;
}

void blockstack_forward(blockstack_t *s, blockstack_shared_t *sh, device_t *d, int B, int T) {
    for (int l = 0; l < s->L; l++) {
        float *x = blockstack_stream(s, l), *y = blockstack_stream(s, l + 1);
        if (s->kind == BLOCKS_MIXER)
            mixer_block_forward(d, y, &s->ma[l], &s->mw[l], x, s->cfg, B, T, s->causal, &sh->ms);
        else
            llama_block_forward(d, y, &s->la[l], &s->lw[l], x, x, s->cfg, sh->rope_cos, sh->rope_sin, B,
                                T, s->causal, &sh->ls);
    }
}

void blockstack_backward(blockstack_t *s, blockstack_shared_t *sh, device_t *d, int B, int T) {
    for (int l = s->L - 1; l >= 0; l--) {
        float *x = blockstack_stream(s, l);
        /* both blocks write dB (no zeroing pass) */
        if (s->kind == BLOCKS_MIXER)
            mixer_block_backward(d, sh->dB, &s->mg[l], sh->dA, &s->ma[l], &s->mw[l], x, s->cfg, B, T,
                                 s->causal, &sh->ms);
        else
            llama_block_backward(d, sh->dB, sh->dB, &s->lg[l], sh->dA, &s->la[l], &s->lw[l], x, x,
                                 s->cfg, sh->rope_cos, sh->rope_sin, B, T, s->causal, &sh->ls);
        float *t = sh->dA;
        sh->dA = sh->dB;
        sh->dB = t;
    }
}
