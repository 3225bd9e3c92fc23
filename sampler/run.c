/* sampler/run.c: batched generation with the KV cache (see sampler.h for the seeding rules). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/rng.h"
#include "sampler/model_impl.h"

/* Sequences generated together: enough to amortise a step's matrix loads over several rows,
 * small enough that the cache stays modest (samples beyond it run in further batches). */
#define SAMPLER_MAX_BATCH 16

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int sampler_opts_check(const sampler_opts_t *o, char *err, size_t errlen) {
    if (o->n < 1) { snprintf(err, errlen, "number of samples %d must be >= 1", o->n); return SAMPLER_EARG; }
    if (o->max_new < 1) { snprintf(err, errlen, "max-new %d must be >= 1", o->max_new); return SAMPLER_EARG; }
    if (o->group < 1) { snprintf(err, errlen, "group %d must be >= 1", o->group); return SAMPLER_EARG; }
    if (o->latent != SAMPLER_LATENT_INDEPENDENT && o->latent != SAMPLER_LATENT_SHARED) {
        snprintf(err, errlen, "latent mode %d is neither independent nor shared", (int)o->latent);
        return SAMPLER_EARG;
    }
    if (o->inner_steps < 0 || !(o->fast_lr >= 0)) {
        snprintf(err, errlen, "inner steps %d and fast rate %g must not be negative", o->inner_steps, o->fast_lr);
        return SAMPLER_EARG;
    }
    if (sample_opts_check(&o->sample, err, errlen)) return SAMPLER_EARG;
    return 0;
}

void sampler_result_free(sampler_result_t *r) {
    if (!r) return;
    free(r->ids);
    free(r->len);
    free(r->stopped);
    free(r->z);
    memset(r, 0, sizeof(*r));
}

/* One chunk through the right generator. Free Transformer: z (B,T) given, or the encoder
 * with uniforms u (B,T,H) when z is NULL. */
static int step(sampler_model_t *sm, const uint32_t *tok, int B, int T, const uint32_t *z,
                const float *u, char *err, size_t errlen) {
    int rc = sm->genm   ? mixer_gen_step(sm->genm, tok, B, T, NULL, err, errlen)
         : sm->genl   ? gen_ltm_step(sm->genl, tok, B, T, NULL, err, errlen)
             : sm->genf ? gen_free_step(sm->genf, tok, B, T, z, u, NULL, err, errlen)
                        : gen_step(sm->gen, tok, B, T, NULL, err, errlen);
    return rc ? SAMPLER_EMODEL : 0;
}

static gen_t *decoder_gen(sampler_model_t *sm) {
    return sm->genl ? gen_ltm_decoder(sm->genl) : sm->genf ? gen_free_decoder(sm->genf) : sm->gen;
}

/* The LTM: the latents of samples first .. first + B - 1 into cache slots 0 .. B - 1, each on
 * its own (see sampler.h): the posterior inferred from the prompt, or the prior. */
static int ltm_latents(sampler_model_t *sm, const uint32_t *prompt, int P, const sampler_opts_t *o,
                       uint64_t first, int B, char *err, size_t errlen) {
    ltm_t *m = sm->ltm;
    const model_config_t *c = &sm->cfg;
    const uint64_t key = rng_counter_key(o->seed ^ SAMPLER_LATENT_SALT, 3);
    ltm_infer_t inf = {.steps = o->inner_steps > 0 ? o->inner_steps : c->inner_steps,
                       .lr = o->fast_lr > 0 ? o->fast_lr : c->fast_lr_end, .key = key};
    gen_ltm_reset(sm->genl);
    for (int b = 0; b < B; b++) {
        const int prior = o->ltm_prior || P < 2;
        if (ltm_set_shape(m, 1, prior ? 1 : P - 1, err, errlen)) return SAMPLER_EMODEL;
        if (prior) {
            ltm_prior(m, key, first + (uint64_t)b);
        } else {
            inf.row0 = first + (uint64_t)b;
            if (ltm_infer(m, prompt, prompt + 1, NULL, &inf, NULL, NULL, err, errlen)) return SAMPLER_EMODEL;
        }
        if (gen_ltm_set_latents(sm->genl, &b, 1, err, errlen)) return SAMPLER_EMODEL;
    }
    return 0;
}

int sampler_generate(sampler_model_t *sm, const uint32_t *prompt, int P, const sampler_opts_t *o,
                     sampler_result_t *res, char *err, size_t errlen) {
    memset(res, 0, sizeof(*res));
    const model_config_t *c = &sm->cfg;
    const int V = c->vocab_size, H = c->kind == MODEL_FREE ? c->latent_bits : 0;
    int rc = sampler_opts_check(o, err, errlen);
    if (rc) return rc;
    if (!prompt || P < 1) {
        snprintf(err, errlen, "the prompt is empty (it needs at least one token)");
        return SAMPLER_EARG;
    }
    for (int i = 0; i < P; i++)
        if (prompt[i] >= (uint32_t)V) {
            snprintf(err, errlen, "prompt token %u at position %d is outside the model's vocabulary "
                                  "of %d", prompt[i], i, V);
            return SAMPLER_EMISMATCH;
        }
    if ((long)P + o->max_new > c->max_seq) {
        snprintf(err, errlen, "prompt of %d tokens + max-new %d exceed the model's max_seq %d", P,
                 o->max_new, c->max_seq);
        return SAMPLER_EMISMATCH;
    }
    const int n = o->n, M = o->max_new, NB = n < SAMPLER_MAX_BATCH ? n : SAMPLER_MAX_BATCH;
    const int ZS = P + M;
    if ((rc = sampler_model_prepare(sm, NB, P, P + M, err, errlen))) return rc;
    sample_t *smp = NULL;
    if (sample_create(&smp, V, err, errlen)) return SAMPLER_ENOMEM;
    res->n = n;
    res->max_new = M;
    res->ids = calloc((size_t)n * M, sizeof(uint32_t));
    res->len = calloc(n, sizeof(int));
    res->stopped = calloc(n, sizeof(int));
    if (H) { res->z = calloc((size_t)n * ZS, sizeof(uint32_t)); res->z_stride = ZS; }
    rng_t *tr = malloc(sizeof(rng_t) * NB), *zr = malloc(sizeof(rng_t) * NB);
    uint32_t *chunk = malloc(sizeof(uint32_t) * NB * P), *next = malloc(sizeof(uint32_t) * NB);
    uint32_t *zt = malloc(sizeof(uint32_t) * NB);
    float *u = H ? malloc(sizeof(float) * NB * P * H) : NULL;
    if (!res->ids || !res->len || !res->stopped || (H && (!res->z || !u)) || !tr || !zr || !chunk ||
        !next || !zt) {
        snprintf(err, errlen, "out of memory for %d samples of %d tokens", n, M);
        rc = SAMPLER_ENOMEM;
        goto out;
    }
    const uint32_t K = H ? 1u << H : 0;
    double t0 = now_s();
    for (int i0 = 0; i0 < n && !rc; i0 += NB) {
        const int B = n - i0 < NB ? n - i0 : NB;
        for (int b = 0; b < B; b++) {
            uint64_t i = (uint64_t)o->first + (uint64_t)(i0 + b);
            rng_seed2(&tr[b], o->seed ^ SAMPLER_TOKEN_SALT, i);
            uint64_t key = o->latent == SAMPLER_LATENT_SHARED ? (1ull << 32) + i / o->group : i;
            rng_seed2(&zr[b], o->seed ^ SAMPLER_LATENT_SALT, key);
            memcpy(chunk + (size_t)b * P, prompt, sizeof(uint32_t) * P);
            for (int j = 0; u && j < P * H; j++) u[(size_t)b * P * H + j] = rng_f32(&zr[b]);
        }
        // prefill: the whole prompt in one chunk (the Free Transformer's encoder reads it; the
        // LTM's latents come first, from the prompt or the prior)
        if (sm->genm) {
            mixer_gen_reset(sm->genm);
        } else if (sm->genl) {
            if ((rc = ltm_latents(sm, prompt, P, o, (uint64_t)o->first + (uint64_t)i0, B, err, errlen))) break;
        } else if (sm->genf) {
            gen_free_reset(sm->genf);
        } else {
            gen_reset(sm->gen);
        }
        if ((rc = step(sm, chunk, B, P, NULL, u, err, errlen))) break;
        if (H)
            for (int b = 0; b < B; b++)
                memcpy(res->z + (size_t)(i0 + b) * ZS, gen_free_z(sm->genf) + (size_t)b * P,
                       sizeof(uint32_t) * P);
        int done = 0;
        for (int s = 0; s < M; s++) {
            const float *lg = sm->genm ? mixer_gen_logits(sm->genm) : gen_logits(decoder_gen(sm));
            for (int b = 0; b < B; b++) {
                const int i = i0 + b;
                /* every sequence draws at every step, finished or not: its stream of draws
                 * must not depend on when the others finish */
                uint32_t id = sample_pick(smp, lg + (size_t)b * V, &o->sample, &tr[b]);
                next[b] = id;
                if (res->stopped[i] || res->len[i] == M) continue;
                if (o->stop_at_eot && id == (uint32_t)c->eot_id) {
                    res->stopped[i] = 1;
                    done++;
                } else {
                    res->ids[(size_t)i * M + res->len[i]++] = id;
                }
            }
            if (done == B || s == M - 1) break;
            if (H)
                for (int b = 0; b < B; b++) {
                    zt[b] = (uint32_t)rng_below(&zr[b], K);  /* prior: uniform over 2^H */
                    res->z[(size_t)(i0 + b) * ZS + P + s] = zt[b];
                }
            if ((rc = step(sm, next, B, 1, H ? zt : NULL, NULL, err, errlen))) break;
            res->new_tokens += B;
        }
    }
    res->seconds = now_s() - t0;
out:
    sample_destroy(&smp);
    free(tr); free(zr); free(chunk); free(next); free(zt); free(u);
    if (rc) sampler_result_free(res);
    return rc;
}
