/* evaluator/lm_mixers.c: eval_lm_t over the masked-mixer families (model/mixers.h).
 *
 * The causal mixer is a next-token model: `logits`, and generation through its cache of
 * mixing sums (model/mixer_gen.h). The autoencoders and memory models predict the chunk they
 * have encoded: `chunk_logits` (row t predicts token t), and n_embed, the floats of the one
 * embedding stored per chunk, which task val charges in bits per byte. */
#include <stdio.h>
#include <stdlib.h>

#include "evaluator/lm.h"
#include "model/mixer_gen.h"
#include "model/llama.h" /* LLAMA_ENOMEM: the mixers return the llama codes */
#include "model/mixers.h"

/* The forward of (B,T) tokens, the encoder reading enc_tokens (NULL: tokens); the host logits. */
static const float *forward(eval_lm_t *lm, const uint32_t *tokens, const uint32_t *enc_tokens, int B, int T,
                            char *err, size_t errlen) {
    if (B < 1 || T < 1 || B > lm->Bmax || T > lm->Tmax) {
        snprintf(err, errlen, "batch %dx%d outside the model's %dx%d", B, T, lm->Bmax, lm->Tmax);
        return eval_lm_failed(lm, 0);
    }
    int rc = mixers_set_shape(lm->impl, B, T, err, errlen);
    if (!rc) rc = mixers_forward_enc(lm->impl, tokens, enc_tokens, NULL, NULL, NULL, err, errlen);
    if (rc) return eval_lm_failed(lm, rc == LLAMA_ENOMEM);
    return eval_lm_done(lm, mixers_logits(lm->impl), "the logits", err, errlen);
}

static const float *chunk_logits(eval_lm_t *lm, const uint32_t *tokens, const uint32_t *enc_tokens, int bits,
                                 int zero, int B, int T, char *err, size_t errlen) {
    if (mixers_set_embed_eval(lm->impl, bits, zero, err, errlen)) return eval_lm_failed(lm, 0);
    return forward(lm, tokens, enc_tokens, B, T, err, errlen);
}

static const float *mixer_lm_logits(eval_lm_t *lm, const uint32_t *tokens, const uint32_t *z, int B, int T,
                                    char *err, size_t errlen) {
    (void)z;
    return forward(lm, tokens, NULL, B, T, err, errlen);
}

static const float *mixer_gen_start(eval_lm_t *lm, const uint32_t *prompt, int B, int n, const float *u,
                                    char *err, size_t errlen) {
    (void)u;
    int rc = lm->gen ? 0 : mixer_gen_create((mixer_gen_t **)&lm->gen, lm->impl, lm->Bmax, lm->Tmax, err, errlen);
    if (rc) {
        lm->nomem = rc == LLAMA_ENOMEM;
        return NULL;
    }
    mixer_gen_reset(lm->gen);
    if ((rc = mixer_gen_step(lm->gen, prompt, B, n, NULL, err, errlen))) return eval_lm_failed(lm, rc == LLAMA_ENOMEM);
    return mixer_gen_logits(lm->gen);
}

static const float *mixer_gen_next(eval_lm_t *lm, const uint32_t *tokens, const uint32_t *z, int B, char *err,
                                   size_t errlen) {
    (void)z;
    if (!lm->gen) {
        snprintf(err, errlen, "gen_next before gen_start");
        return eval_lm_failed(lm, 0);
    }
    const int rc = mixer_gen_step(lm->gen, tokens, B, 1, NULL, err, errlen);
    if (rc) return eval_lm_failed(lm, rc == LLAMA_ENOMEM);
    return mixer_gen_logits(lm->gen);
}

static void mixers_lm_release(eval_lm_t *lm) {
    mixer_gen_t *g = lm->gen;
    mixer_gen_destroy(&g);
    lm->gen = NULL;
    mixers_t *m = lm->impl;
    mixers_destroy(&m);
    lm->impl = NULL;
}

int eval_lm_create_mixers(eval_lm_t **out, device_t *dev, const model_config_t *cfg, int Bmax, int Tmax,
                          uint64_t seed, char *err, size_t errlen) {
    *out = NULL;
    if (Tmax <= 0 || Tmax > cfg->max_seq) Tmax = cfg->max_seq;
    eval_lm_t *lm = calloc(1, sizeof *lm);
    if (!lm) return snprintf(err, errlen, "out of memory"), EVAL_ENOMEM;
    mixers_t *m = NULL;
    int rc = mixers_create_on(&m, dev ? dev : device_cpu_default(), cfg, Bmax, Tmax, seed, err, errlen);
    if (rc) {
        free(lm);
        return rc == LLAMA_ENOMEM ? EVAL_ENOMEM : EVAL_EMODEL;
    }
    lm->cfg = *cfg;
    lm->dev = dev ? dev : device_cpu_default();
    lm->Bmax = Bmax;
    lm->Tmax = Tmax;
    lm->impl = m;
    lm->release = mixers_lm_release;
    if (cfg->kind == MODEL_MIXER) {
        lm->logits = mixer_lm_logits;
        lm->gen_start = mixer_gen_start;
        lm->gen_next = mixer_gen_next;
    } else {
        lm->chunk_logits = chunk_logits;
        lm->n_embed = mixers_embed_floats(m);
        lm->embed_range = cfg->embed_range;
    }
    *out = lm;
    return 0;
}
