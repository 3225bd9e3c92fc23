/* model/kv_free.c: KV-cache generation of the Free Transformer (see generate.h).
 *
 * The decoder's halves run through the baseline's generator (gen_blocks), so both halves are
 * cached by the same code; this file only adds the latent path between them: the encoder on
 * the prompt (the Free Transformer's own free_encode, so the prompt's Z is computed exactly
 * as in training), the Binary Mapper's bits, and the post-sampler gather. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/free.h"
#include "model/generate.h"

struct gen_free {
    free_t *m;
    gen_t *g;
    device_t *dev;
    int H, half, L, D;
    uint32_t K;          /* 2^H */
    void *mem;           /* one device allocation: z, prob, u, r */
    size_t mem_bytes;
    uint32_t *z;         /* (max_rows) latent indices of the last chunk (device) */
    float *prob;         /* (max_rows, H) bit probabilities of the prompt (device) */
    float *u;            /* (max_rows, H) the caller's uniforms (device) */
    float *r;            /* (max_rows, D) post-sampler output (device) */
    uint32_t *z_host;    /* (max_rows) host copy of z */
};

void gen_free_destroy(gen_free_t **pg) {
    if (!pg || !*pg) return;
    gen_free_t *g = *pg;
    gen_destroy(&g->g);
    if (g->mem) DEV(g->dev, free, g->mem);
    free(g->z_host);
    free(g);
    *pg = NULL;
}

int gen_free_create(gen_free_t **pg, free_t *m, int Bmax, int Tmax, char *err, size_t errlen) {
    return gen_free_create_rows(pg, m, Bmax, Tmax, Bmax * Tmax, err, errlen);
}

int gen_free_create_rows(gen_free_t **pg, free_t *m, int Bmax, int Tmax, int max_rows, char *err,
                         size_t errlen) {
    if (!pg || !m) { snprintf(err, errlen, "gen_free_create: NULL argument"); return LLAMA_EARG; }
    *pg = NULL;
    gen_free_t *g = calloc(1, sizeof(*g));
    if (!g) { snprintf(err, errlen, "gen_free_create: out of memory"); return LLAMA_ENOMEM; }
    int rc = gen_create_rows(&g->g, free_decoder(m), Bmax, Tmax, max_rows, err, errlen);
    if (rc) { free(g); return rc; }
    const model_config_t *c = free_config(m);
    g->m = m;
    g->H = c->latent_bits;
    g->K = 1u << g->H;
    g->half = free_half(m);
    g->L = c->n_layers;
    g->D = c->d_model;
    g->dev = free_device(m);
    const size_t N = (size_t)max_rows;
    dev_arena_t ar = {0};
    for (int pass = 0; pass < 2; pass++) {
        g->z = DEV_TAKE(&ar, uint32_t, N);
        g->prob = DEV_TAKE(&ar, float, N * g->H);
        g->u = DEV_TAKE(&ar, float, N * g->H);
        g->r = DEV_TAKE(&ar, float, N * g->D);
        if (pass == 0 && (ar.base = g->mem = DEV(g->dev, alloc, ar.used))) g->mem_bytes = ar.used, ar.used = 0;
        if (!ar.base) break;
    }
    g->z_host = malloc(sizeof(uint32_t) * N);
    if (!g->mem || !g->z_host) {
        snprintf(err, errlen, "gen_free_create: out of memory for %d x %d positions", Bmax, Tmax);
        gen_free_destroy(&g);
        return LLAMA_ENOMEM;
    }
    *pg = g;
    return 0;
}

void gen_free_reset(gen_free_t *g) { gen_reset(g->g); }
size_t gen_free_bytes(const gen_free_t *g) { return gen_bytes(g->g) + g->mem_bytes; }
gen_t *gen_free_decoder(gen_free_t *g) { return g->g; }
const uint32_t *gen_free_z(const gen_free_t *g) { return g->z_host; }
uint32_t gen_free_n_latent(const gen_free_t *g) { return g->K; }

int gen_free_step(gen_free_t *g, const uint32_t *tokens, int B, int T, const uint32_t *z,
                  const float *u, float *all_logits, char *err, size_t errlen) {
    return gen_free_step_slots(g, NULL, tokens, B, T, z, u, all_logits, err, errlen);
}

int gen_free_step_slots(gen_free_t *g, const int *slots, const uint32_t *tokens, int B, int T,
                        const uint32_t *z, const float *u, float *all_logits, char *err,
                        size_t errlen) {
    const int N = B * T;
    if (z) {
        for (int n = 0; n < N; n++)
            if (z[n] >= g->K) {
                snprintf(err, errlen, "gen: latent index %u at position %d is outside [0, 2^%d)",
                         z[n], n, g->H);
                return LLAMA_EARG;
            }
    } else {
        for (int b = 0; b < B; b++) {
            const int p = gen_slot_pos(g->g, slots ? slots[b] : b);
            if (p != 0 || !u) {
                snprintf(err, errlen, "gen: the encoder reads a prompt chunk at position 0 with "
                         "uniforms (at position %d%s)", p, u ? "" : ", none given");
                return LLAMA_EARG;
            }
        }
    }
    int rc = gen_begin_slots(g->g, slots, tokens, B, T, err, errlen);
    if (rc) return rc;
    device_t *d = g->dev;
    /* The latent path's ops run under the chunk's thread rule, as the decoder's own ops do
     * (gen_threads): a decode step of one row runs serially. With the device's threads on, the
     * post-sampler's gather opened a parallel region every token, and libgomp's woken worker
     * then spun through the rest of the step (perf, 2 threads, config S, bf16: 30% of the
     * process's samples in the worker's libgomp spin, 6% in the main thread's; and on a shared
     * 2-core machine the step waited at the region's barrier for a descheduled worker). */
    const int serial = gen_threads(g->g, N);
    if (!z) {
        // prompt: encoder over the prompt only (non-causal), bits from the caller's uniforms
        DEV(d, set_parallel, !serial);
        rc = free_set_shape(g->m, B, T, err, errlen);
        if (!rc) rc = free_encode(g->m, tokens, err, errlen);
        if (rc) { DEV(d, set_parallel, 1); gen_reset(g->g); return rc; }
        DEV(d, upload, g->u, u, sizeof(float) * N * g->H);
        DEV(d, binmap_forward, g->z, g->prob, free_bit_logits_dev(g->m), g->u, N, g->H);
        DEV(d, download, g->z_host, g->z, sizeof(uint32_t) * N);
        DEV(d, set_parallel, 1);
    } else {
        memcpy(g->z_host, z, sizeof(uint32_t) * N);
        DEV(d, upload, g->z, z, sizeof(uint32_t) * N);
    }
    // lower half, then R = W_post[:, Z] into the key/value input of block L/2, upper half
    gen_blocks(g->g, 0, g->half, NULL);
    DEV(d, set_parallel, !serial);
    DEV(d, post_sampler_forward, g->r, free_weights(g->m).post, g->z, N, g->D, g->H);
    DEV(d, set_parallel, 1);
    gen_blocks(g->g, g->half, g->L, g->r);
    return gen_finish(g->g, all_logits, err, errlen);
}
