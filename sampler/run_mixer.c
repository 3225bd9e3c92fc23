/* sampler/run_mixer.c: the command line's samples of a causal masked mixer (seed 004). Its
 * generator (model/mixer_gen.h) keeps one position for all its sequences and runs ordinary
 * products over them, so its samples cannot join and leave the engine's batch (engine.h): they
 * run in batches of up to 16 from the prompt, each drawing from its own token stream (sampler.h),
 * every sequence drawing at every step so that its draws do not depend on when the others end.
 * The service refuses a mixer (engine_create). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/rng.h"
#include "sampler/model_impl.h"

#define MIXER_BATCH 16

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int sampler_generate_mixer(sampler_model_t *sm, const uint32_t *prompt, int P, const sampler_opts_t *o,
                           sampler_result_t *res, char *err, size_t errlen) {
    const model_config_t *c = &sm->cfg;
    const int V = c->vocab_size, n = o->n, M = o->max_new, NB = n < MIXER_BATCH ? n : MIXER_BATCH;
    int rc = sampler_model_mixer_gen(sm, NB, P + M, err, errlen);
    if (rc) return rc;
    sample_t *smp = NULL;
    if (sample_create(&smp, V, err, errlen)) return SAMPLER_ENOMEM;
    res->n = n;
    res->max_new = M;
    res->ids = calloc((size_t)n * M, sizeof(uint32_t));
    res->len = calloc(n, sizeof(int));
    res->stopped = calloc(n, sizeof(int));
    rng_t *tr = malloc(sizeof(rng_t) * NB);
    uint32_t *chunk = malloc(sizeof(uint32_t) * NB * P), *next = malloc(sizeof(uint32_t) * NB);
    if (!res->ids || !res->len || !res->stopped || !tr || !chunk || !next) {
        snprintf(err, errlen, "out of memory for %d samples of %d tokens", n, M);
        rc = SAMPLER_ENOMEM;
        goto out;
    }
    double t0 = now_s();
    for (int i0 = 0; i0 < n && !rc; i0 += NB) {
        const int B = n - i0 < NB ? n - i0 : NB;
        for (int b = 0; b < B; b++) {
            rng_seed2(&tr[b], o->seed ^ SAMPLER_TOKEN_SALT, (uint64_t)o->first + (uint64_t)(i0 + b));
            memcpy(chunk + (size_t)b * P, prompt, sizeof(uint32_t) * P);
        }
        // prefill: the whole prompt in one chunk, then one token per step
        mixer_gen_reset(sm->genm);
        if ((rc = mixer_gen_step(sm->genm, chunk, B, P, NULL, err, errlen))) { rc = rc == LLAMA_ENOMEM ? SAMPLER_ENOMEM : SAMPLER_EMODEL; break; }
        int done = 0;
        for (int s = 0; s < M; s++) {
            const float *lg = mixer_gen_logits(sm->genm);
            for (int b = 0; b < B; b++) {
                const int i = i0 + b;
                const uint32_t id = sample_pick(smp, lg + (size_t)b * V, &o->sample, &tr[b]);
                next[b] = id;
                if (res->stopped[i] || res->len[i] == M) continue;
                if (o->stop_at_eot && id == (uint32_t)c->eot_id) {
                    res->stopped[i] = 1;
                    done++;
                } else {
                    res->ids[(size_t)i * M + res->len[i]++] = id;
                    if (o->stop_fn && res->len[i] < M &&
                        o->stop_fn(o->stop_ctx, (int)(o->first + (uint32_t)i), res->ids + (size_t)i * M, res->len[i])) {
                        res->stopped[i] = 2;
                        done++;
                    }
                }
            }
            if (done == B || s == M - 1) break;
            if ((rc = mixer_gen_step(sm->genm, next, B, 1, NULL, err, errlen))) { rc = rc == LLAMA_ENOMEM ? SAMPLER_ENOMEM : SAMPLER_EMODEL; break; }
        }
        for (int b = 0; b < B; b++) res->new_tokens += res->len[i0 + b];
    }
    res->seconds = now_s() - t0;
out:
    sample_destroy(&smp);
    free(tr);
    free(chunk);
    free(next);
    if (rc) sampler_result_free(res);
    return rc;
}
