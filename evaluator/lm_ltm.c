/* evaluator/lm_ltm.c: eval_lm_t over the Latent-Thought LM (model/ltm.h).
 *
 * The model's likelihood needs its latents: the evaluator infers them (lm->ltm_infer) from
 * exactly the tokens a task may show the model (a held-out row's own targets for its bound, a
 * question's context for mc and em, never the answer it is asked to score), then asks for
 * logits, which use the z of that inference. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "evaluator/lm.h"
#include "model/ltm.h"

static int shape_ok(eval_lm_t *lm, int B, int T, char *err, size_t errlen) {
    lm->nomem = 0;
    if (B < 1 || T < 1 || B > lm->Bmax || T > lm->Tmax) {
        snprintf(err, errlen, "batch %dx%d outside the model's %dx%d", B, T, lm->Bmax, lm->Tmax);
        return 0;
    }
    return ltm_set_shape(lm->impl, B, T, err, errlen) == 0;
}

static int ltm_lm_infer(eval_lm_t *lm, const uint32_t *tokens, const uint32_t *targets,
                        const uint8_t *mask, int B, int T, int steps, uint64_t key, uint64_t row0,
                        char *err, size_t errlen) {
    if (!shape_ok(lm, B, T, err, errlen)) return EVAL_EARG;
    ltm_infer_t o = {.steps = steps, .lr = lm->ltm_fast_lr, .key = key, .row0 = row0};
    const int rc = ltm_infer(lm->impl, tokens, targets, mask, &o, NULL, NULL, err, errlen);
    lm->nomem = rc == LTM_ENOMEM;
    return rc == LTM_ENOMEM ? EVAL_ENOMEM : rc ? EVAL_EMODEL : 0;
}

static int ltm_lm_score(eval_lm_t *lm, const uint32_t *targets, const uint8_t *mask, int S, double *ce,
                        double *kl, double *logw, char *err, size_t errlen) {
    int rc = ltm_score(lm->impl, targets, mask, S, ce, kl, logw, err, errlen);
    lm->nomem = rc == LTM_ENOMEM;
    return rc == LTM_ENOMEM ? EVAL_ENOMEM : rc ? EVAL_EMODEL : 0;
}

static int ltm_lm_prior(eval_lm_t *lm, int B, uint64_t key, uint64_t row0, char *err, size_t errlen) {
    if (!shape_ok(lm, B, 1, err, errlen)) return EVAL_EARG;
    ltm_prior(lm->impl, key, row0);
    return 0;
}

/* Logits with the z of the last inference (or prior draw); z (latent indices) is unused. */
static const float *ltm_lm_logits(eval_lm_t *lm, const uint32_t *tokens, const uint32_t *z, int B,
                                  int T, char *err, size_t errlen) {
    (void)z;
    if (B != ltm_batch(lm->impl)) {
        snprintf(err, errlen, "logits for %d rows, but the latents were inferred for %d", B, ltm_batch(lm->impl));
        return eval_lm_failed(lm, 0);
    }
    if (!shape_ok(lm, B, T, err, errlen)) return NULL;
    const int rc = ltm_forward_z(lm->impl, tokens, NULL, NULL, NULL, err, errlen);
    if (rc) return eval_lm_failed(lm, rc == LTM_ENOMEM);
    return eval_lm_done(lm, ltm_logits(lm->impl), "the logits", err, errlen);
}

/* The prompts' latents (the posterior from each prompt's own tokens; a one-token prompt: the
 * prior), then the prompts through the KV cache. u carries no meaning here; the draws come from
 * the streams (lm->ltm_key, row b). */
static const float *ltm_gen_start(eval_lm_t *lm, const uint32_t *prompt, int B, int n,
                                  const float *u, char *err, size_t errlen) {
    (void)u;
    int rc = lm->gen ? 0 : gen_ltm_create((gen_ltm_t **)&lm->gen, lm->impl, lm->Bmax, lm->Tmax, err, errlen);
    if (rc) {
        lm->nomem = rc == LLAMA_ENOMEM; /* kv_ltm.c: the llama codes */
        return NULL;
    }
    gen_ltm_reset(lm->gen);
    int *slots = malloc(sizeof(int) * B);
    uint32_t *in = malloc(sizeof(uint32_t) * B * (n > 1 ? n - 1 : 1)), *tg = malloc(sizeof(uint32_t) * B * (n > 1 ? n - 1 : 1));
    const float *out = NULL;
    if (!slots || !in || !tg) { snprintf(err, errlen, "out of memory"); eval_lm_failed(lm, 1); goto done; }
    for (int b = 0; b < B; b++) slots[b] = b;
    if (n > 1) {
        for (int b = 0; b < B; b++) {
            memcpy(in + (size_t)b * (n - 1), prompt + (size_t)b * n, sizeof(uint32_t) * (n - 1));
            memcpy(tg + (size_t)b * (n - 1), prompt + (size_t)b * n + 1, sizeof(uint32_t) * (n - 1));
        }
        if (ltm_lm_infer(lm, in, tg, NULL, B, n - 1, lm->ltm_steps, LTM_SALT, 0, err, errlen)) goto done;
    } else if (ltm_lm_prior(lm, B, LTM_SALT, 0, err, errlen)) {
        goto done;
    }
    if ((rc = gen_ltm_set_latents(lm->gen, slots, B, err, errlen)) || (rc = gen_ltm_step(lm->gen, prompt, B, n, NULL, err, errlen))) {
        eval_lm_failed(lm, rc == LLAMA_ENOMEM); /* kv_ltm.c: the llama codes */
        goto done;
    }
    out = gen_logits(gen_ltm_decoder(lm->gen));
done:
    free(slots);
    free(in);
    free(tg);
    return out;
}

static const float *ltm_gen_next(eval_lm_t *lm, const uint32_t *tokens, const uint32_t *z, int B,
                                 char *err, size_t errlen) {
    (void)z;
    if (!lm->gen) {
        snprintf(err, errlen, "gen_next before gen_start");
        return eval_lm_failed(lm, 0);
    }
    const int rc = gen_ltm_step(lm->gen, tokens, B, 1, NULL, err, errlen);
    if (rc) return eval_lm_failed(lm, rc == LLAMA_ENOMEM);
    return gen_logits(gen_ltm_decoder(lm->gen));
}

static void ltm_lm_release(eval_lm_t *lm) {
    gen_ltm_t *g = lm->gen;
    gen_ltm_destroy(&g);
    lm->gen = NULL;
    ltm_t *m = lm->impl;
    ltm_destroy(&m);
    lm->impl = NULL;
}

int eval_lm_create_ltm(eval_lm_t **out, device_t *dev, const model_config_t *cfg, int Bmax,
                       int Tmax, uint64_t seed, char *err, size_t errlen) {
    *out = NULL;
    if (Tmax <= 0 || Tmax > cfg->max_seq) Tmax = cfg->max_seq;
    eval_lm_t *lm = calloc(1, sizeof *lm);
    if (!lm) return snprintf(err, errlen, "out of memory"), EVAL_ENOMEM;
    ltm_t *m = NULL;
    int rc = ltm_create_on(&m, dev ? dev : device_cpu_default(), cfg, Bmax, Tmax, seed, err, errlen);
    if (rc) {
        free(lm);
        return rc == LTM_ENOMEM ? EVAL_ENOMEM : EVAL_EMODEL;
    }
    lm->cfg = *cfg;
    lm->dev = dev ? dev : device_cpu_default();
    lm->Bmax = Bmax;
    lm->Tmax = Tmax;
    lm->impl = m;
    lm->logits = ltm_lm_logits;
    lm->gen_start = ltm_gen_start;
    lm->gen_next = ltm_gen_next;
    lm->release = ltm_lm_release;
    lm->ltm_infer = ltm_lm_infer;
    lm->ltm_score = ltm_lm_score;
    lm->ltm_prior = ltm_lm_prior;
    lm->ltm_steps = cfg->inner_steps;
    lm->ltm_fast_lr = cfg->fast_lr_end;
    *out = lm;
    return 0;
}
