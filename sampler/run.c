/* sampler/run.c: the command line's samples through the engine (sampler/engine.h; seeding
 * rules in sampler.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sampler/model_impl.h"

/* Sequences generated together: enough to amortise a step's matrix loads over several rows,
 * small enough that the cache stays modest (samples beyond it join as rows free up). */
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

/* The engine kept in sm for the command line, with at least B rows of T positions. */
static int cli_engine(sampler_model_t *sm, int B, int T, char *err, size_t errlen) {
    engine_t *e = sm->cli;
    if (e && engine_max_batch(e) >= B && engine_max_pos(e) >= T) return 0;
    if (e) {
        if (engine_max_batch(e) > B) B = engine_max_batch(e);
        if (engine_max_pos(e) > T) T = engine_max_pos(e);
        engine_destroy(&sm->cli);
    }
    return engine_create(&sm->cli, sm, B, T, err, errlen);
}

int sampler_generate(sampler_model_t *sm, const uint32_t *prompt, int P, const sampler_opts_t *o,
                     sampler_result_t *res, char *err, size_t errlen) {
    memset(res, 0, sizeof(*res));
    const model_config_t *c = &sm->cfg;
    const int H = c->kind == MODEL_FREE ? c->latent_bits : 0;
    int rc = sampler_opts_check(o, err, errlen);
    if (rc) return rc;
    if (!prompt || P < 1) {
        snprintf(err, errlen, "the prompt is empty (it needs at least one token)");
        return SAMPLER_EARG;
    }
    for (int i = 0; i < P; i++)
        if (prompt[i] >= (uint32_t)c->vocab_size) {
            snprintf(err, errlen, "prompt token %u at position %d is outside the model's vocabulary "
                                  "of %d", prompt[i], i, c->vocab_size);
            return SAMPLER_EMISMATCH;
        }
    if ((long)P + o->max_new > c->max_seq) {
        snprintf(err, errlen, "prompt of %d tokens + max-new %d exceed the model's max_seq %d", P,
                 o->max_new, c->max_seq);
        return SAMPLER_EMISMATCH;
    }
    if (sm->mixer) return sampler_generate_mixer(sm, prompt, P, o, res, err, errlen);
    const int n = o->n, M = o->max_new, NB = n < SAMPLER_MAX_BATCH ? n : SAMPLER_MAX_BATCH;
    const int ZS = P + M;
    if ((rc = cli_engine(sm, NB, P + M, err, errlen))) return rc;
    engine_t *e = sm->cli;
    res->n = n;
    res->max_new = M;
    res->ids = calloc((size_t)n * M, sizeof(uint32_t));
    res->len = calloc(n, sizeof(int));
    res->stopped = calloc(n, sizeof(int));
    if (H) { res->z = calloc((size_t)n * ZS, sizeof(uint32_t)); res->z_stride = ZS; }
    int *sample_of = malloc(sizeof(int) * engine_max_batch(e)); /* row -> sample, -1: none */
    if (!res->ids || !res->len || !res->stopped || (H && !res->z) || !sample_of) {
        snprintf(err, errlen, "out of memory for %d samples of %d tokens", n, M);
        free(sample_of);
        sampler_result_free(res);
        return SAMPLER_ENOMEM;
    }
    for (int r = 0; r < engine_max_batch(e); r++) sample_of[r] = -1;
    /* samples join as rows free up: each one's text is what it would be alone (engine.h) */
    double t0 = now_s();
    int next = 0, done = 0;
    while (done < n && !rc) {
        for (; next < n && engine_free_rows(e) > 0; next++) {
            engine_req_t r = {.prompt = prompt, .P = P, .max_new = M, .sample = o->sample,
                              .seed = o->seed, .index = (uint64_t)o->first + (uint64_t)next,
                              .latent = o->latent, .group = o->group, .stop_at_eot = o->stop_at_eot,
                              .ltm_prior = o->ltm_prior, .inner_steps = o->inner_steps,
                              .fast_lr = o->fast_lr};
            int row = engine_add(e, &r, err, errlen);
            if (row < 0) { rc = row; break; }
            sample_of[row] = next;
        }
        if (rc || (rc = engine_step(e, err, errlen))) break;
        for (int row = 0; row < engine_max_batch(e); row++) {
            const engine_row_t *w = engine_row(e, row);
            if (sample_of[row] < 0) continue;
            const int i = sample_of[row];
            /* the caller's stop rule ends a decoding row as eot would */
            const int by_fn = w->state == ENGINE_DECODE && w->grew && o->stop_fn &&
                              o->stop_fn(o->stop_ctx, (int)(o->first + (uint32_t)i), w->ids, w->len);
            if (w->state != ENGINE_DONE && !by_fn) continue;
            memcpy(res->ids + (size_t)i * M, w->ids, sizeof(uint32_t) * w->len);
            res->len[i] = w->len;
            res->stopped[i] = by_fn ? 2 : w->stopped;
            if (H) memcpy(res->z + (size_t)i * ZS, w->z, sizeof(uint32_t) * w->n_z);
            res->new_tokens += w->len;
            engine_release(e, row);
            sample_of[row] = -1;
            done++;
        }
    }
    res->seconds = now_s() - t0;
    for (int row = 0; row < engine_max_batch(e); row++)
        if (sample_of[row] >= 0) engine_release(e, row);
    free(sample_of);
    if (rc) sampler_result_free(res);
    return rc;
}
