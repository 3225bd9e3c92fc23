/* model/kv_ltm.c: KV-cache generation of the Latent-Thought LM (see ltm.h).
 *
 * The decoder runs through the baseline's generator (its sliding window included); this file
 * adds each block's cross-attention through gen_set_mid, with the keys and values of every
 * slot's latents computed once (when the slot's z is set), since z does not change while a
 * sequence decodes. The arithmetic is ltm.c's cross_forward on the chunk's rows: queries at
 * each row's position, keys at the latents' positions, every row seeing its slot's m latents. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/generate.h"
#include "model/ltm.h"

struct gen_ltm {
    ltm_t *m;
    gen_t *g;
    device_t *dev;
    int Bmax, Tmax, L, M;
    int max_rows;          /* rows (B*T) one chunk may hold: the chunk buffers' size */
    void *mem;             /* one device allocation, laid out by layout() */
    size_t mem_bytes;
    float *kz, *vz;        /* (L, Bmax, M, Dkv): each slot's latents' keys (rotated) and values */
    float *xn, *rstd, *q, *att, *branch; /* chunk rows: (N,D), (N), (N,Dq), (N,Dq), (N,D) */
    int *base, *len;       /* (N) device: each row's first latent row in kz and their count */
    int *rows_host;        /* (2N) staging of base, len */
    uint8_t *ready;        /* (Bmax) host: the slot has latents */
};

static void layout(gen_ltm_t *g, dev_arena_t *ar) {
    const model_config_t *c = ltm_config(g->m);
    const size_t N = (size_t)g->max_rows, D = c->d_model, hd = D / c->n_heads;
    const size_t Dq = hd * c->n_heads, Dkv = hd * c->n_kv_heads, Z = (size_t)g->L * g->Bmax * g->M;
    g->kz = DEV_TAKE(ar, float, Z * Dkv);
    g->vz = DEV_TAKE(ar, float, Z * Dkv);
    g->xn = DEV_TAKE(ar, float, N * D);
    g->rstd = DEV_TAKE(ar, float, N);
    g->q = DEV_TAKE(ar, float, N * Dq);
    g->att = DEV_TAKE(ar, float, N * Dq);
    g->branch = DEV_TAKE(ar, float, N * D);
    g->base = DEV_TAKE(ar, int, N);
    g->len = DEV_TAKE(ar, int, N);
}

void gen_ltm_destroy(gen_ltm_t **pg) {
    if (!pg || !*pg) return;
    gen_ltm_t *g = *pg;
    gen_destroy(&g->g);
    if (g->mem) DEV(g->dev, free, g->mem);
    free(g->rows_host);
    free(g->ready);
    free(g);
    *pg = NULL;
}

/* Block l's cross-attention on the chunk (gen_mid_fn). */
static void cross_step(void *ctx, gen_t *gen, int l) {
    gen_ltm_t *g = ctx;
    const model_config_t *c = ltm_config(g->m);
    device_t *d = g->dev;
    int B, T;
    gen_chunk(gen, &B, &T);
    const int N = B * T, D = c->d_model, H = c->n_heads, Hkv = c->n_kv_heads, hd = D / H;
    const int Dq = hd * H, Dkv = hd * Hkv;
    const ltm_cross_w_t w = ltm_cross_weights(g->m, l);
    float *x = gen_hidden(gen);
    if (l == 0) {   /* every row sees its slot's M latents */
        const int *slot = gen_chunk_slots(gen);
        for (int n = 0; n < N; n++) g->rows_host[n] = slot[n / T] * g->M, g->rows_host[N + n] = g->M;
        DEV(d, upload, g->base, g->rows_host, sizeof(int) * N);
        DEV(d, upload, g->len, g->rows_host + N, sizeof(int) * N);
    }
    const size_t lz = (size_t)l * g->Bmax * g->M * Dkv;
    DEV(d, rmsnorm_forward, g->xn, g->rstd, x, w.norm, N, D, c->norm_eps);
    gen_linear(gen, g->q, g->xn, w.wq, N, D, Dq);
    DEV(d, rope_rows, g->q, g->q, llama_rope_cos(ltm_decoder(g->m)), llama_rope_sin(ltm_decoder(g->m)), N, H,
        hd, gen_row_positions(gen));
    DEV(d, attention_rows, g->att, g->q, g->kz + lz, g->vz + lz, g->base, g->len, N, H, Hkv, hd);
    gen_linear(gen, g->branch, g->att, w.wo, N, Dq, D);
    DEV(d, add_inplace, x, g->branch, (size_t)N * D);
}

int gen_ltm_create(gen_ltm_t **pg, ltm_t *m, int Bmax, int Tmax, char *err, size_t errlen) {
    return gen_ltm_create_rows(pg, m, Bmax, Tmax, Bmax * Tmax, err, errlen);
}

int gen_ltm_create_rows(gen_ltm_t **pg, ltm_t *m, int Bmax, int Tmax, int max_rows, char *err,
                        size_t errlen) {
    if (!pg || !m) { snprintf(err, errlen, "gen_ltm_create: NULL argument"); return LLAMA_EARG; }
    *pg = NULL;
    gen_ltm_t *g = calloc(1, sizeof(*g));
    if (!g) { snprintf(err, errlen, "gen_ltm_create: out of memory"); return LLAMA_ENOMEM; }
    int rc = gen_create_rows(&g->g, ltm_decoder(m), Bmax, Tmax, max_rows, err, errlen);
    if (rc) { free(g); return rc; }
    g->m = m;
    g->dev = ltm_device(m);
    g->Bmax = Bmax;
    g->Tmax = Tmax;
    g->max_rows = max_rows;
    g->L = ltm_config(m)->n_layers;
    g->M = ltm_config(m)->latent_vectors;
    dev_arena_t ar = {0};
    layout(g, &ar);
    g->rows_host = malloc(sizeof(int) * 2 * (size_t)max_rows);
    g->ready = calloc(Bmax, 1);
    if (!g->rows_host || !g->ready || !(g->mem = DEV(g->dev, alloc, ar.used))) {
        snprintf(err, errlen, "gen_ltm_create: out of memory for the latents' cache of %d slots", Bmax);
        gen_ltm_destroy(&g);
        return LLAMA_ENOMEM;
    }
    g->mem_bytes = ar.used;
    ar.base = g->mem;
    ar.used = 0;
    layout(g, &ar);
    gen_set_mid(g->g, cross_step, g);
    *pg = g;
    return 0;
}

void gen_ltm_reset(gen_ltm_t *g) {
    gen_reset(g->g);
    memset(g->ready, 0, g->Bmax);
}
gen_t *gen_ltm_decoder(gen_ltm_t *g) { return g->g; }
size_t gen_ltm_bytes(const gen_ltm_t *g) { return gen_bytes(g->g) + g->mem_bytes; }

int gen_ltm_set_latents(gen_ltm_t *g, const int *slots, int B, char *err, size_t errlen) {
    const model_config_t *c = ltm_config(g->m);
    const int D = c->d_model, hd = D / c->n_heads, Hkv = c->n_kv_heads, Dkv = hd * Hkv;
    const int Bz = ltm_batch(g->m);
    if (B < 1 || B > Bz) {
        snprintf(err, errlen, "gen_ltm_set_latents: %d rows, the model holds latents for %d", B, Bz);
        return LLAMA_EARG;
    }
    for (int b = 0; b < B; b++)
        if (slots[b] < 0 || slots[b] >= g->Bmax) {
            snprintf(err, errlen, "gen_ltm_set_latents: slot %d outside 0..%d", slots[b], g->Bmax - 1);
            return LLAMA_EARG;
        }
    const float *z = ltm_latents_dev(g->m), *zc, *zs;
    ltm_latent_rope(g->m, &zc, &zs);
    device_t *d = g->dev;
    for (int l = 0; l < g->L; l++) {
        const ltm_cross_w_t w = ltm_cross_weights(g->m, l);
        for (int b = 0; b < B; b++) {
            const float *zb = z + ((size_t)l * Bz + b) * g->M * D;
            const size_t at = ((size_t)l * g->Bmax + slots[b]) * g->M * Dkv;
            DEV(d, linear_forward, g->kz + at, zb, w.wk, g->M, D, Dkv);
            DEV(d, rope_forward, g->kz + at, g->kz + at, zc, zs, 1, g->M, Hkv, hd, 0);
            DEV(d, linear_forward, g->vz + at, zb, w.wv, g->M, D, Dkv);
        }
    }
    for (int b = 0; b < B; b++) g->ready[slots[b]] = 1;
    return DEV_SYNC_AS(d, err, errlen, LLAMA_EARG, LLAMA_ENOMEM);
}

int gen_ltm_step(gen_ltm_t *g, const uint32_t *tokens, int B, int T, float *all_logits, char *err,
                 size_t errlen) {
    for (int b = 0; b < B && b < g->Bmax; b++)
        if (!g->ready[b]) {
            snprintf(err, errlen, "gen_ltm_step: slot %d has no latents (gen_ltm_set_latents first)", b);
            return LLAMA_EARG;
        }
    return gen_step(g->g, tokens, B, T, all_logits, err, errlen);
}
