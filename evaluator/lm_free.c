/* evaluator/lm_free.c: eval_lm_t over the Free Transformer (model/free.h).
 *
 * The logits always take Z explicitly (free_forward_z): the evaluator, not the model, decides
 * whether a position's latent comes from the encoder or from the prior, which is what keeps
 * the reported likelihoods honest (docs/evaluator.md). encode runs the encoder alone on the
 * tokens it is given and returns the bit logits. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "evaluator/lm.h"
#include "model/free.h"
#include "model/generate.h"

static int shape_ok(eval_lm_t *lm, int B, int T, char *err, size_t errlen) {
    lm->nomem = 0;
    if (B < 1 || T < 1 || B > lm->Bmax || T > lm->Tmax) {
        snprintf(err, errlen, "batch %dx%d outside the model's %dx%d", B, T, lm->Bmax, lm->Tmax);
        return 0;
    }
    return free_set_shape(lm->impl, B, T, err, errlen) == 0;
}

static const float *free_lm_logits(eval_lm_t *lm, const uint32_t *tokens, const uint32_t *z, int B,
                                   int T, char *err, size_t errlen) {
    if (!z) {
        snprintf(err, errlen, "the Free Transformer needs latent indices Z for its logits");
        return eval_lm_failed(lm, 0);
    }
    if (!shape_ok(lm, B, T, err, errlen)) return NULL;
    float ce;
    const int rc = free_forward_z(lm->impl, tokens, z, NULL, NULL, &ce, err, errlen);
    if (rc) return eval_lm_failed(lm, rc == FREE_ENOMEM);
    return eval_lm_done(lm, free_logits(lm->impl), "the logits", err, errlen);
}

static const float *free_lm_encode(eval_lm_t *lm, const uint32_t *tokens, int B, int T, char *err,
                                   size_t errlen) {
    if (!shape_ok(lm, B, T, err, errlen)) return NULL;
    const int rc = free_encode(lm->impl, tokens, err, errlen);
    if (rc) return eval_lm_failed(lm, rc == FREE_ENOMEM);
    return eval_lm_done(lm, free_bit_logits(lm->impl), "the encoder's bit logits", err, errlen);
}

/* lm->gen: the generator and the (Bmax, V) logits of gen_start's rows. */
typedef struct {
    gen_free_t *g;
    float *logits;
} free_gen_t;

/* The prompt chunk: gen_free_step's encoder reads the prompt only and draws its Z with u. Each
 * prompt runs alone, as the sampler runs it, so a row's logits do not depend on the others. */
static const float *free_gen_start(eval_lm_t *lm, const uint32_t *prompt, int B, int n,
                                   const float *u, char *err, size_t errlen) {
    if (!u) {
        snprintf(err, errlen, "the Free Transformer's prompt needs uniforms for its latents");
        return eval_lm_failed(lm, 0);
    }
    free_gen_t *fg = lm->gen;
    const int V = lm->cfg.vocab_size, H = lm->latent_bits;
    if (!fg) {
        if (!(fg = calloc(1, sizeof *fg)) || !(fg->logits = malloc(sizeof(float) * lm->Bmax * V))) {
            if (fg) free(fg);
            snprintf(err, errlen, "out of memory for the logits of %d rows", lm->Bmax);
            lm->nomem = 1;
            return NULL;
        }
        lm->gen = fg;
        /* chunks: Bmax decode rows, or one whole prompt */
        const int rows = lm->Bmax > lm->Tmax ? lm->Bmax : lm->Tmax;
        int rc = gen_free_create_rows(&fg->g, lm->impl, lm->Bmax, lm->Tmax, rows, err, errlen);
        if (rc) {
            lm->nomem = rc == LLAMA_ENOMEM; /* kv_free.c: the llama codes */
            return NULL;
        }
    }
    if (!fg->g) { snprintf(err, errlen, "no generator"); return eval_lm_failed(lm, 0); }
    gen_free_reset(fg->g);
    for (int b = 0; b < B; b++) {
        const int rc = gen_free_step_slots(fg->g, &b, prompt + (size_t)b * n, 1, n, NULL, u + (size_t)b * n * H,
                                           NULL, err, errlen);
        if (rc) return eval_lm_failed(lm, rc == LLAMA_ENOMEM); /* kv_free.c: the llama codes */
        memcpy(fg->logits + (size_t)b * V, gen_logits(gen_free_decoder(fg->g)), sizeof(float) * V);
    }
    return fg->logits;
}

static const float *free_gen_next(eval_lm_t *lm, const uint32_t *tokens, const uint32_t *z, int B,
                                  char *err, size_t errlen) {
    free_gen_t *fg = lm->gen;
    if (!fg || !fg->g) {
        snprintf(err, errlen, "gen_next before gen_start");
        return eval_lm_failed(lm, 0);
    }
    const int rc = gen_free_step(fg->g, tokens, B, 1, z, NULL, NULL, err, errlen);
    if (rc) return eval_lm_failed(lm, rc == LLAMA_ENOMEM);
    return gen_logits(gen_free_decoder(fg->g));
}

static void free_lm_release(eval_lm_t *lm) {
    free_gen_t *fg = lm->gen;
    if (fg) {
        gen_free_destroy(&fg->g);
        free(fg->logits);
        free(fg);
    }
    lm->gen = NULL;
    free_t *m = lm->impl;
    free_destroy(&m);
    lm->impl = NULL;
}

int eval_lm_create_free(eval_lm_t **out, device_t *dev, const model_config_t *cfg, int Bmax,
                        int Tmax, uint64_t seed, char *err, size_t errlen) {
    *out = NULL;
    if (Tmax <= 0 || Tmax > cfg->max_seq) Tmax = cfg->max_seq;
    eval_lm_t *lm = calloc(1, sizeof *lm);
    if (!lm) return snprintf(err, errlen, "out of memory"), EVAL_ENOMEM;
    free_t *m = NULL;
    int rc = free_create_on(&m, dev ? dev : device_cpu_default(), cfg, Bmax, Tmax, seed, err, errlen);
    if (rc) {
        free(lm);
        return rc == FREE_ENOMEM ? EVAL_ENOMEM : EVAL_EMODEL;
    }
    lm->cfg = *cfg;
    lm->dev = dev ? dev : device_cpu_default();
    lm->Bmax = Bmax;
    lm->Tmax = Tmax;
    lm->latent_bits = cfg->latent_bits;
    lm->impl = m;
    lm->logits = free_lm_logits;
    lm->encode = free_lm_encode;
    lm->gen_start = free_gen_start;
    lm->gen_next = free_gen_next;
    lm->release = free_lm_release;
    *out = lm;
    return 0;
}
