/* sampler/model.c: a checkpoint of either family, ready to generate (see sampler.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/errmsg.h"
#include "model/checkpoint.h"
#include "model/family.h"
#include "sampler/model_impl.h"

void sampler_model_free(sampler_model_t **psm) {
    if (!psm || !*psm) return;
    sampler_model_t *sm = *psm;
    engine_destroy(&sm->cli);
    mixer_gen_destroy(&sm->genm);
    llama_destroy(&sm->llama);
    free_destroy(&sm->free);
    ltm_destroy(&sm->ltm);
    mixers_destroy(&sm->mixer);
    free(sm);
    *psm = NULL;
}

int sampler_model_create(sampler_model_t **psm, device_t *dev, const model_config_t *cfg,
                         uint64_t seed, char *err, size_t errlen) {
    *psm = NULL;
    sampler_model_t *sm = calloc(1, sizeof(*sm));
    if (!sm) { snprintf(err, errlen, "out of memory"); return SAMPLER_ENOMEM; }
    sm->cfg = *cfg;
    sm->dev = dev ? dev : device_cpu_default();
    int rc;
    /* The family models are only weight holders here (and, for the Free Transformer, the
     * encoder of the prompt): their training activations are sized to the minimum. */
    if (cfg->kind == MODEL_LLAMA) {
        rc = llama_create_on(&sm->llama, sm->dev, cfg, 1, 1, seed, err, errlen);
    } else if (cfg->kind == MODEL_FREE) {
        rc = free_create_on(&sm->free, sm->dev, cfg, 1, 1, seed, err, errlen);
        sm->encT = 1;
    } else if (cfg->kind == MODEL_LTM) {
        rc = ltm_create_on(&sm->ltm, sm->dev, cfg, 1, 1, seed, err, errlen);
        sm->infT = 1;
    } else if (cfg->kind == MODEL_MIXER) {
        rc = mixers_create_on(&sm->mixer, sm->dev, cfg, 1, 1, seed, err, errlen);
    } else if (mixer_kind_is(cfg->kind)) {
        snprintf(err, errlen, "a %s predicts the chunk it has encoded, not the next token: the sampler "
                 "generates from causal models (llama, free, mixer)", mixer_kind_name(cfg->kind));
        rc = SAMPLER_EARG;
    } else {
        snprintf(err, errlen, "model kind %d is not one the sampler knows", (int)cfg->kind);
        rc = SAMPLER_EARG;
    }
    if (rc) {
        sampler_model_free(&sm);
        return rc == LLAMA_ENOMEM ? SAMPLER_ENOMEM : SAMPLER_EARG;
    }
    *psm = sm;
    return 0;
}

const model_config_t *sampler_model_config(const sampler_model_t *sm) { return &sm->cfg; }
device_t *sampler_model_device(const sampler_model_t *sm) { return sm->dev; }

int sampler_model_params(sampler_model_t *sm, tensor_view_t *views, int cap) {
    if (sm->mixer) return mixers_params(sm->mixer, views, cap);
    if (sm->ltm) return ltm_params(sm->ltm, views, cap);
    return sm->llama ? llama_params(sm->llama, views, cap) : free_params(sm->free, views, cap);
}

typedef struct {
    sampler_model_t **psm;
    device_t *dev;
} load_ctx_t;

/* ckpt_load_fn: the model of checkpoint dir on ctx's device into *ctx->psm, CKPT_E* codes. */
static int load_cb(void *ctx, const char *dir, char *err, size_t errlen) {
    load_ctx_t *lc = ctx;
    sampler_model_t **psm = lc->psm;
    model_config_t cfg;
    int rc = ckpt_load_config(dir, &cfg, err, errlen);
    if (rc) return rc;
    /* a sound checkpoint of a model that does not generate: refused, not skipped as damaged */
    if (mixer_kind_is(cfg.kind) && cfg.kind != MODEL_MIXER)
        return err_fail(err, errlen, CKPT_EREFUSED, "%s: a %s predicts the chunk it has encoded, not the next token: the "
                        "sampler generates from causal models (llama, free, mixer)", dir, mixer_kind_name(cfg.kind));
    sampler_model_t *sm = NULL;
    char why[512];
    rc = sampler_model_create(&sm, lc->dev, &cfg, 0, why, sizeof why);
    /* the reason goes into err whatever the code: ckpt_open prints err, an empty one reads as
     * "<dir>: " and nothing else */
    if (rc) return err_fail(err, errlen, rc == SAMPLER_ENOMEM ? CKPT_ENOMEM : CKPT_ECONFIG, "%s: %s", dir, why);
    int n = sampler_model_params(sm, NULL, 0);
    tensor_view_t *v = malloc(sizeof(*v) * n);
    if (!v) {
        sampler_model_free(&sm);
        return err_fail(err, errlen, CKPT_ENOMEM, "%s: out of memory", dir);
    }
    sampler_model_params(sm, v, n);
    rc = ckpt_load_params(dir, v, n, err, errlen);
    free(v);
    if (rc) {
        sampler_model_free(&sm);
        return rc;
    }
    *psm = sm;
    return 0;
}

static int sampler_code(int ckpt_rc) { return ckpt_rc == CKPT_ENOMEM ? SAMPLER_ENOMEM : SAMPLER_ECKPT; }

int sampler_model_load(sampler_model_t **psm, device_t *dev, const char *dir, char *err,
                       size_t errlen) {
    *psm = NULL;
    load_ctx_t lc = {psm, dev};
    int rc = ckpt_open(dir, load_cb, &lc, err, errlen); /* err names the checkpoint */
    return rc ? sampler_code(rc) : 0;
}

int sampler_model_load_newest(sampler_model_t **psm, device_t *dev, const char *run_dir, char *dir,
                              size_t cap, char *warn, size_t warnlen, char *err, size_t errlen) {
    *psm = NULL;
    load_ctx_t lc = {psm, dev};
    ckpt_pick_t *pick = malloc(sizeof *pick);
    if (!pick) return err_fail(err, errlen, SAMPLER_ENOMEM, "out of memory");
    int found = ckpt_open_newest(run_dir, load_cb, &lc, pick, err, errlen), rc = 0;
    if (warn && warnlen) snprintf(warn, warnlen, "%s", pick->warn);
    if (found < 0) rc = sampler_code(found);
    else if (found == 0 && pick->n_skipped)
        rc = err_fail(err, errlen, SAMPLER_ECKPT, "--run-dir %s: no usable checkpoint (damaged: %s)", run_dir, pick->skipped);
    else if (found == 0)
        rc = err_fail(err, errlen, SAMPLER_ECKPT, "--run-dir %s: no complete checkpoint", run_dir);
    else
        snprintf(dir, cap, "%s", pick->path);
    free(pick);
    return rc;
}

/* Copies every weight of model `from` into `to` (two models of sm's family and config). */
static int copy_weights(sampler_model_t *sm, void *from, void *to, char *err, size_t errlen) {
    const model_family_t *f = family_for_kind(sm->cfg.kind);
    int n = f->params(from, NULL, 0);
    tensor_view_t *a = malloc(sizeof(*a) * n * 2);
    if (!a) { snprintf(err, errlen, "out of memory"); return SAMPLER_ENOMEM; }
    f->params(from, a, n);
    f->params(to, a + n, n);
    for (int i = 0; i < n; i++)
        DEV(sm->dev, copy, a[n + i].data, a[i].data, sizeof(float) * tensor_numel(&a[i]));
    free(a);
    return 0;
}

/* Re-creates the Free Transformer with encoder buffers for a (1, P) prompt, keeping its
 * weights. */
static int grow_encoder(sampler_model_t *sm, int P, char *err, size_t errlen) {
    free_t *m2 = NULL;
    int rc = free_create_on(&m2, sm->dev, &sm->cfg, 1, P, 0, err, errlen);
    if (rc) return rc == FREE_ENOMEM ? SAMPLER_ENOMEM : SAMPLER_EARG;
    if ((rc = copy_weights(sm, sm->free, m2, err, errlen))) { free_destroy(&m2); return rc; }
    free_destroy(&sm->free);
    sm->free = m2;
    sm->encT = P;
    return 0;
}

/* Re-creates the LTM with activations for inferring z from T targets, keeping its weights. */
static int grow_ltm(sampler_model_t *sm, int T, char *err, size_t errlen) {
    ltm_t *m2 = NULL;
    int rc = ltm_create_on(&m2, sm->dev, &sm->cfg, 1, T, 0, err, errlen);
    if (rc) return rc == LTM_ENOMEM ? SAMPLER_ENOMEM : SAMPLER_EARG;
    if ((rc = copy_weights(sm, sm->ltm, m2, err, errlen))) { ltm_destroy(&m2); return rc; }
    ltm_destroy(&sm->ltm);
    sm->ltm = m2;
    sm->infT = T;
    return 0;
}

int sampler_model_reserve(sampler_model_t *sm, int P, char *err, size_t errlen) {
    const int have = sm->free ? sm->encT : sm->ltm ? sm->infT : P;
    if (P <= have) return 0;
    if (sm->engines)
        return err_fail(err, errlen, SAMPLER_EARG, "the model's %s takes prompts of %d positions and "
                        "cannot grow to %d while %d engine(s) use it", sm->free ? "encoder" : "inference",
                        have, P, sm->engines);
    return sm->free ? grow_encoder(sm, P, err, errlen) : grow_ltm(sm, P, err, errlen);
}

int sampler_model_mixer_gen(sampler_model_t *sm, int B, int T, char *err, size_t errlen) {
    if (sm->genm && B <= sm->genB && T <= sm->genT) return 0;
    const int nb = B > sm->genB ? B : sm->genB, nt = T > sm->genT ? T : sm->genT;
    mixer_gen_destroy(&sm->genm);
    int rc = mixer_gen_create(&sm->genm, sm->mixer, nb, nt, err, errlen);
    if (rc) return rc == LLAMA_ENOMEM ? SAMPLER_ENOMEM : SAMPLER_EARG;
    sm->genB = nb;
    sm->genT = nt;
    return 0;
}
