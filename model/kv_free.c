/* model/kv_free.c: KV-cache generation of the Free Transformer (see generate.h).
 *
 * The decoder's halves run through the baseline's generator (gen_blocks), so both halves are
 * cached by the same code; this file only adds the latent path between them: the encoder on
 * the prompt (the Free Transformer's own free_encode, so the prompt's Z is computed exactly
 * as in training), the Binary Mapper's bits, and the post-sampler gather. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/free.h"
#include "model/generate.h"

struct gen_free {
    free_t *m;
    gen_t *g;
    int H, half, L, D;
    uint32_t K;          /* 2^H */
    uint32_t *z;         /* (Bmax*Tmax) latent indices of the last chunk */
    float *prob;         /* (Bmax*Tmax, H) bit probabilities of the prompt */
    float *r;            /* (Bmax*Tmax, D) post-sampler output */
};

void gen_free_destroy(gen_free_t **pg) {
    if (!pg || !*pg) return;
    gen_free_t *g = *pg;
    gen_destroy(&g->g);
    free(g->z);
    free(g->prob);
    free(g->r);
    free(g);
    *pg = NULL;
}

int gen_free_create(gen_free_t **pg, free_t *m, int Bmax, int Tmax, char *err, size_t errlen) {
    if (!pg || !m) { snprintf(err, errlen, "gen_free_create: NULL argument"); return LLAMA_EARG; }
    *pg = NULL;
    gen_free_t *g = calloc(1, sizeof(*g));
    if (!g) { snprintf(err, errlen, "gen_free_create: out of memory"); return LLAMA_ENOMEM; }
    int rc = gen_create(&g->g, free_decoder(m), Bmax, Tmax, err, errlen);
    if (rc) { free(g); return rc; }
    const model_config_t *c = free_config(m);
    g->m = m;
    g->H = c->latent_bits;
    g->K = 1u << g->H;
    g->half = free_half(m);
    g->L = c->n_layers;
    g->D = c->d_model;
    size_t N = (size_t)Bmax * Tmax;
    g->z = malloc(sizeof(uint32_t) * N);
    g->prob = malloc(sizeof(float) * N * g->H);
    g->r = malloc(sizeof(float) * N * g->D);
    if (!g->z || !g->prob || !g->r) {
        snprintf(err, errlen, "gen_free_create: out of memory for %d x %d positions", Bmax, Tmax);
        gen_free_destroy(&g);
        return LLAMA_ENOMEM;
    }
    *pg = g;
    return 0;
}

void gen_free_reset(gen_free_t *g) { gen_reset(g->g); }
gen_t *gen_free_decoder(gen_free_t *g) { return g->g; }
const uint32_t *gen_free_z(const gen_free_t *g) { return g->z; }
uint32_t gen_free_n_latent(const gen_free_t *g) { return g->K; }

int gen_free_step(gen_free_t *g, const uint32_t *tokens, int B, int T, const uint32_t *z,
                  const float *u, float *all_logits, char *err, size_t errlen) {
    const int N = B * T;
    if (z) {
        for (int n = 0; n < N; n++)
            if (z[n] >= g->K) {
                snprintf(err, errlen, "gen: latent index %u at position %d is outside [0, 2^%d)",
                         z[n], n, g->H);
                return LLAMA_EARG;
            }
    } else if (gen_pos(g->g) != 0 || !u) {
        snprintf(err, errlen, "gen: the encoder reads a prompt chunk at position 0 with uniforms "
                              "(at position %d%s)", gen_pos(g->g), u ? "" : ", none given");
        return LLAMA_EARG;
    }
    int rc = gen_begin(g->g, tokens, B, T, err, errlen);
    if (rc) return rc;
    if (!z) {
        // prompt: encoder over the prompt only (non-causal), bits from the caller's uniforms
        int saved = omp_get_max_threads();
        omp_set_num_threads(gen_threads(g->g, N));
        rc = free_set_shape(g->m, B, T, err, errlen);
        if (!rc) rc = free_encode(g->m, tokens, err, errlen);
        omp_set_num_threads(saved);
        if (rc) { gen_reset(g->g); return rc; }
        binmap_forward(g->z, g->prob, free_bit_logits(g->m), u, N, g->H);
    } else {
        memcpy(g->z, z, sizeof(uint32_t) * N);
    }
    // lower half, then R = W_post[:, Z] into the key/value input of block L/2, upper half
    gen_blocks(g->g, 0, g->half, NULL);
    post_sampler_forward(g->r, free_weights(g->m).post, g->z, N, g->D, g->H);
    gen_blocks(g->g, g->half, g->L, g->r);
    return gen_finish(g->g, all_logits, err, errlen);
}
