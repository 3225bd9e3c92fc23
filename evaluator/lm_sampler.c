/* evaluator/lm_sampler.c: the sampler's generator over an evaluated checkpoint's weights, so a
 * task that generates (code) does so through bin/sampler's own path (see lm_sampler.h). */
#include "evaluator/lm_sampler.h"

#include <stdio.h>
#include <stdlib.h>

#include "model/family.h"

int eval_lm_sampler(eval_lm_t *lm, sampler_model_t **out, char *err, size_t errlen) {
    *out = NULL;
    if (!lm || !lm->impl || !lm->dev)
        return snprintf(err, errlen, "this task generates with the sampler and needs a model's weights"), EVAL_EARG;
    const model_family_t *fam = family_for_kind(lm->cfg.kind);
    if (!fam) return snprintf(err, errlen, "model kind %d has no family", (int)lm->cfg.kind), EVAL_EMODEL;
    sampler_model_t *sm = NULL;
    char why[512];
    int rc = sampler_model_create(&sm, lm->dev, &lm->cfg, 0, why, sizeof why);
    if (rc) return snprintf(err, errlen, "the sampler cannot hold this model: %s", why), rc == SAMPLER_ENOMEM ? EVAL_ENOMEM : EVAL_EMODEL;
    const int n = fam->params(lm->impl, NULL, 0);
    tensor_view_t *v = malloc(sizeof *v * 2 * (size_t)(n > 0 ? n : 1));
    if (!v) {
        sampler_model_free(&sm);
        return snprintf(err, errlen, "out of memory"), EVAL_ENOMEM;
    }
    fam->params(lm->impl, v, n);
    if (sampler_model_params(sm, v + n, n) != n) {
        free(v);
        sampler_model_free(&sm);
        return snprintf(err, errlen, "the sampler's model has another parameter count"), EVAL_EMODEL;
    }
    for (int i = 0; i < n; i++) {
        if (tensor_numel(&v[i]) != tensor_numel(&v[n + i])) {
            snprintf(err, errlen, "parameter %d has %lld values in the evaluator's model, %lld in the sampler's", i,
                     (long long)tensor_numel(&v[i]), (long long)tensor_numel(&v[n + i]));
            free(v);
            sampler_model_free(&sm);
            return EVAL_EMODEL;
        }
        DEV(lm->dev, copy, v[n + i].data, v[i].data, sizeof(float) * tensor_numel(&v[i]));
    }
    free(v);
    *out = sm;
    return 0;
}
