/* evaluator/lm.c: eval_lm_t over a checkpoint of the Llama-style baseline (see lm.h). */
#include "common/errmsg.h"
#include "evaluator/lm.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/checkpoint.h"
#include "model/family.h"
#include "model/generate.h"
#include "model/llama.h"
#include "model/mixer_config.h"

double eval_logprob(const float *row, int V, uint32_t target) {
    float mx = row[0];
    for (int i = 1; i < V; i++)
        if (row[i] > mx) mx = row[i];
    double s = 0;
    for (int i = 0; i < V; i++) s += exp((double)row[i] - mx);
    return (double)row[target] - mx - log(s);
}

uint32_t eval_argmax(const float *row, int V) {
    uint32_t best = 0;
    for (int i = 1; i < V; i++)
        if (row[i] > row[best]) best = (uint32_t)i;
    return best;
}

const float *eval_lm_failed(eval_lm_t *lm, int nomem) {
    lm->nomem = nomem != 0;
    return NULL;
}

const float *eval_lm_done(eval_lm_t *lm, const float *host, const char *what, char *err, size_t errlen) {
    const int rc = DEV(lm->dev, sync, err, errlen);
    if (rc) return eval_lm_failed(lm, rc == DEVICE_ENOMEM);
    if (!host) return snprintf(err, errlen, "out of host memory for %s", what), eval_lm_failed(lm, 1);
    return host;
}

static const float *llama_lm_logits(eval_lm_t *lm, const uint32_t *tokens, const uint32_t *z, int B,
                                    int T, char *err, size_t errlen) {
    (void)z;
    llama_t *m = lm->impl;
    if (B < 1 || T < 1 || B > lm->Bmax || T > lm->Tmax) {
        err_fail(err, errlen, EVAL_EARG, "batch %dx%d outside the model's %dx%d", B, T, lm->Bmax,
                lm->Tmax);
        return eval_lm_failed(lm, 0);
    }
    float loss;
    int rc = llama_set_shape(m, B, T, err, errlen);
    if (!rc) rc = llama_forward(m, tokens, NULL, NULL, &loss, err, errlen);
    if (rc) return eval_lm_failed(lm, rc == LLAMA_ENOMEM);
    return eval_lm_done(lm, llama_logits(m), "the logits", err, errlen);
}

/* lm->gen: the generator and the (Bmax, V) logits of gen_start's rows. */
typedef struct {
    gen_t *g;
    float *logits;
} llama_gen_t;

/* Each prompt alone, cut as the sampler cuts it (gen_prefill_next), so a row's logits do not
 * depend on the other rows and equal what bin/sampler computes for the same prompt. */
static const float *llama_gen_start(eval_lm_t *lm, const uint32_t *prompt, int B, int n,
                                    const float *u, char *err, size_t errlen) {
    (void)u;
    llama_gen_t *lg = lm->gen;
    const int V = lm->cfg.vocab_size;
    if (!lg) {
        const int rows = lm->Bmax > GEN_PREFILL_CHUNK ? lm->Bmax : GEN_PREFILL_CHUNK;
        if (!(lg = calloc(1, sizeof *lg)) || !(lg->logits = malloc(sizeof(float) * lm->Bmax * V))) {
            if (lg) free(lg);
            snprintf(err, errlen, "out of memory for the logits of %d rows", lm->Bmax);
            lm->nomem = 1;
            return NULL;
        }
        lm->gen = lg;
        int rc = gen_create_rows(&lg->g, lm->impl, lm->Bmax, lm->Tmax,
                                 rows < lm->Bmax * lm->Tmax ? rows : lm->Bmax * lm->Tmax, err, errlen);
        if (rc) {
            lm->nomem = rc == LLAMA_ENOMEM;
            return NULL;
        }
    }
    if (!lg->g) { snprintf(err, errlen, "no generator"); return eval_lm_failed(lm, 0); }
    gen_reset(lg->g);
    for (int b = 0; b < B; b++) {
        int left;
        while ((left = gen_prefill_next(lg->g, b, prompt + (size_t)b * n, n, err, errlen)) > 0) {}
        if (left < 0) return eval_lm_failed(lm, left == LLAMA_ENOMEM);
        memcpy(lg->logits + (size_t)b * V, gen_logits(lg->g), sizeof(float) * V);
    }
    return lg->logits;
}

static const float *llama_gen_next(eval_lm_t *lm, const uint32_t *tokens, const uint32_t *z, int B,
                                   char *err, size_t errlen) {
    (void)z;
    llama_gen_t *lg = lm->gen;
    if (!lg || !lg->g) {
        snprintf(err, errlen, "gen_next before gen_start");
        return eval_lm_failed(lm, 0);
    }
    const int rc = gen_step(lg->g, tokens, B, 1, NULL, err, errlen);
    if (rc) return eval_lm_failed(lm, rc == LLAMA_ENOMEM);
    return gen_logits(lg->g);
}

static void llama_lm_release(eval_lm_t *lm) {
    llama_gen_t *lg = lm->gen;
    if (lg) {
        gen_destroy(&lg->g);
        free(lg->logits);
        free(lg);
    }
    lm->gen = NULL;
    llama_t *m = lm->impl;
    llama_destroy(&m);
    lm->impl = NULL;
}

int eval_lm_create(eval_lm_t **out, device_t *dev, const model_config_t *cfg, int Bmax, int Tmax,
                   uint64_t seed, char *err, size_t errlen) {
    if (!out || !cfg || Bmax < 1) return err_fail(err, errlen, EVAL_EARG, "eval_lm_create: bad argument");
    *out = NULL;
    if (Tmax <= 0 || Tmax > cfg->max_seq) Tmax = cfg->max_seq;
    if (!dev) dev = device_cpu_default();
    if (cfg->kind == MODEL_FREE) return eval_lm_create_free(out, dev, cfg, Bmax, Tmax, seed, err, errlen);
    if (cfg->kind == MODEL_LTM) return eval_lm_create_ltm(out, dev, cfg, Bmax, Tmax, seed, err, errlen);
    if (mixer_kind_is(cfg->kind)) return eval_lm_create_mixers(out, dev, cfg, Bmax, Tmax, seed, err, errlen);
    if (cfg->kind != MODEL_LLAMA)
        return err_fail(err, errlen, EVAL_EMODEL, "model kind %d is not supported by the evaluator",
                       (int)cfg->kind);
    eval_lm_t *lm = calloc(1, sizeof *lm);
    if (!lm) return err_fail(err, errlen, EVAL_ENOMEM, "out of memory");
    llama_t *m = NULL;
    int rc = llama_create_on(&m, dev, cfg, Bmax, Tmax, seed, err, errlen);
    if (rc) {
        free(lm);
        return rc == LLAMA_ENOMEM ? EVAL_ENOMEM : EVAL_EMODEL;
    }
    lm->cfg = *cfg;
    lm->dev = dev ? dev : device_cpu_default();
    lm->Bmax = Bmax;
    lm->Tmax = Tmax;
    lm->impl = m;
    lm->logits = llama_lm_logits;
    lm->gen_start = llama_gen_start;
    lm->gen_next = llama_gen_next;
    lm->release = llama_lm_release;
    *out = lm;
    return 0;
}

int eval_lm_load(eval_lm_t **out, device_t *dev, const char *dir, int Bmax, int Tmax, char *err,
                 size_t errlen) {
    if (!out || !dir) return err_fail(err, errlen, EVAL_EARG, "eval_lm_load: bad argument");
    *out = NULL;
    model_config_t cfg;
    int rc = ckpt_load_config(dir, &cfg, err, errlen);
    if (rc) return rc == CKPT_ENOMEM ? EVAL_ENOMEM : EVAL_EMODEL;
    eval_lm_t *lm = NULL;
    rc = eval_lm_create(&lm, dev, &cfg, Bmax, Tmax, 0, err, errlen);
    if (rc) return rc;
    const model_family_t *fam = family_for_kind(cfg.kind);
    int np = fam->params(lm->impl, NULL, 0);
    tensor_view_t *v = calloc((size_t)np, sizeof *v);
    if (!v) {
        eval_lm_free(&lm);
        return err_fail(err, errlen, EVAL_ENOMEM, "out of memory");
    }
    fam->params(lm->impl, v, np);
    for (int i = 0; i < np; i++) lm->n_params += tensor_numel(&v[i]);
    rc = ckpt_load_params(dir, v, np, err, errlen);
    free(v);
    if (rc) {
        eval_lm_free(&lm);
        return rc == CKPT_ENOMEM ? EVAL_ENOMEM : EVAL_EMODEL; /* out of memory is not damage */
    }
    *out = lm;
    return 0;
}

void *eval_lm_model(eval_lm_t *lm) { return lm ? lm->impl : NULL; }

void eval_lm_free(eval_lm_t **lm) {
    if (!lm || !*lm) return;
    if ((*lm)->release) (*lm)->release(*lm);
    free(*lm);
    *lm = NULL;
}
