/* evaluator/task.c: dispatch to the task kinds (see task.h). */
#include "evaluator/task.h"
#include "model/mixer_config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct eval_task {
    const eval_task_ops_t *ops;
    void *self;
};

int eval_task_open(eval_task_t **t, const eval_task_cfg_t *cfg, char *err, size_t errlen) {
    if (!t || !cfg || !cfg->task) {
        snprintf(err, errlen, "no task given");
        return EVAL_EARG;
    }
    *t = NULL;
    const eval_task_ops_t *ops = !strcmp(cfg->task, "val") ? &eval_task_val
                                 : !strcmp(cfg->task, "mc") ? &eval_task_mc
                                 : !strcmp(cfg->task, "em") ? &eval_task_em
                                 : !strcmp(cfg->task, "synth") ? &eval_task_synth
                                 : !strcmp(cfg->task, "code") ? &eval_task_code
                                                            : NULL;
    if (!ops) {
        snprintf(err, errlen, "unknown task '%s' (val, mc, em, synth, code)", cfg->task);
        return EVAL_EARG;
    }
    if (cfg->batch < 1) {
        snprintf(err, errlen, "batch must be at least 1");
        return EVAL_EARG;
    }
    eval_task_t *x = calloc(1, sizeof *x);
    if (!x) {
        snprintf(err, errlen, "out of memory");
        return EVAL_ENOMEM;
    }
    x->ops = ops;
    int rc = ops->open(&x->self, cfg, err, errlen);
    if (rc) {
        free(x);
        return rc;
    }
    *t = x;
    return 0;
}

void eval_task_close(eval_task_t **t) {
    if (!t || !*t) return;
    (*t)->ops->close(&(*t)->self);
    free(*t);
    *t = NULL;
}

void eval_task_shape(const eval_task_t *t, int *Bmax, int *Tmax) {
    t->ops->shape(t->self, Bmax, Tmax);
}

int eval_task_run(eval_task_t *t, eval_lm_t *lm, eval_values_t *out, volatile int *stop,
                  char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    if (!lm && t->ops != &eval_task_code) return snprintf(err, errlen, "task needs a model"), EVAL_EARG;
    if (lm && !lm->logits && t->ops != &eval_task_val) {
        snprintf(err, errlen, "this checkpoint holds a %s, which predicts the chunk it has encoded, not the next "
                 "token: only task val applies to it", mixer_kind_is(lm->cfg.kind) ? mixer_kind_name(lm->cfg.kind) : "model");
        return EVAL_EMISMATCH;
    }
    return t->ops->run(t->self, lm, out, stop, err, errlen);
}

int eval_task_needs_model(const eval_task_cfg_t *cfg) {
    return !(cfg->task && !strcmp(cfg->task, "code") && (cfg->completions || cfg->canonical));
}

int eval_parse_steps(const char *list, int *ks, char *err, size_t errlen) {
    int n = 0;
    const char *p = list;
    while (p && *p) {
        char *end;
        long k = strtol(p, &end, 10);
        if (end == p || (*end && *end != ',') || k < 0 || k > 100000 || (n && k <= ks[n - 1]) ||
            n == EVAL_MAX_INNER_STEPS) {
            snprintf(err, errlen, "--inner-steps-list '%s': want up to %d ascending step counts in 0..100000, "
                     "comma-separated", list, EVAL_MAX_INNER_STEPS);
            return EVAL_EARG;
        }
        ks[n++] = (int)k;
        p = *end ? end + 1 : end;
    }
    if (!n) {
        snprintf(err, errlen, "--inner-steps-list is empty");
        return EVAL_EARG;
    }
    return n;
}

void eval_ltm_settings(eval_lm_t *lm, int inner_steps, float fast_lr) {
    if (!lm->ltm_infer) return;
    if (inner_steps > 0) lm->ltm_steps = inner_steps;
    if (fast_lr > 0) lm->ltm_fast_lr = fast_lr;
}

int eval_values_add(eval_values_t *v, const char *name, double value) {
    return wire_kv_add(v->kv, &v->n, name, value) ? EVAL_ENOMEM : 0;
}

double eval_values_get(const eval_values_t *v, const char *name) {
    for (uint32_t i = 0; i < v->n; i++)
        if (!strcmp(v->kv[i].name, name)) return v->kv[i].value;
    return NAN;
}
