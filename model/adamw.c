/* model/adamw.c: see adamw.h. */
#include "model/adamw.h"
#include "model/device.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct adamw {
    adamw_config_t cfg;
    int n;
    tensor_view_t *p, *m, *v;  /* (n) */
    uint8_t *decay;            /* (n) */
    adamw_tensor_t *list;      /* (n) the step's one device call */
    float *mbuf, *vbuf;        /* contiguous moments, on the parameters' device */
    device_t *dev;             /* the device of the views (a NULL view device: the CPU) */
    int64_t t;
};

adamw_config_t adamw_config_default(void) {
    return (adamw_config_t){.beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f,
                            .decay_embeddings = 0};
}

void adamw_destroy(adamw_t **po) {
    if (!po || !*po) return;
    adamw_t *o = *po;
    if (o->mbuf) DEV(o->dev, free, o->mbuf);
    if (o->vbuf) DEV(o->dev, free, o->vbuf);
    free(o->p); free(o->m); free(o->v); free(o->decay); free(o->list);
    free(o);
    *po = NULL;
}

int adamw_create(adamw_t **po, const tensor_view_t *params, int n, const adamw_config_t *cfg,
                 char *err, size_t errlen) {
    if (!po || !params || n <= 0 || !cfg) {
        snprintf(err, errlen, "adamw_create: bad arguments");
        return -1;
    }
    *po = NULL;
    if (!(cfg->beta1 >= 0 && cfg->beta1 < 1) || !(cfg->beta2 >= 0 && cfg->beta2 < 1) ||
        !(cfg->eps > 0) || !(cfg->weight_decay >= 0)) {
        snprintf(err, errlen, "adamw: need 0 <= beta < 1, eps > 0, weight_decay >= 0 "
                 "(got %g %g %g %g)", cfg->beta1, cfg->beta2, cfg->eps, cfg->weight_decay);
        return -1;
    }
    adamw_t *o = calloc(1, sizeof(*o));
    size_t total = 0;
    for (int i = 0; i < n; i++) total += (size_t)tensor_numel(&params[i]);
    if (o) {
        o->cfg = *cfg;
        o->n = n;
        o->dev = params[0].dev ? params[0].dev : device_cpu_default();
        o->p = malloc(sizeof(tensor_view_t) * n);
        o->m = malloc(sizeof(tensor_view_t) * n);
        o->v = malloc(sizeof(tensor_view_t) * n);
        o->decay = malloc(n);
        o->list = malloc(sizeof(adamw_tensor_t) * n);
        o->mbuf = DEV(o->dev, alloc, sizeof(float) * (total ? total : 1));
        o->vbuf = DEV(o->dev, alloc, sizeof(float) * (total ? total : 1));
    }
    if (!o || !o->p || !o->m || !o->v || !o->decay || !o->list || !o->mbuf || !o->vbuf) {
        adamw_destroy(&o);
        snprintf(err, errlen, "adamw: out of memory for the moments of %zu parameters", total);
        return -2;
    }
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        o->p[i] = o->m[i] = o->v[i] = params[i];
        o->m[i].data = o->mbuf + off;
        o->v[i].data = o->vbuf + off;
        o->m[i].dev = o->v[i].dev = params[i].dev;
        off += (size_t)tensor_numel(&params[i]);
        o->decay[i] = adamw_default_decay(&params[i], cfg);
    }
    *po = o;
    return 0;
}

int adamw_default_decay(const tensor_view_t *p, const adamw_config_t *cfg) {
    int is_embed = strcmp(p->name, "model.embed_tokens.weight") == 0;
    return p->ndim >= 2 && (!is_embed || cfg->decay_embeddings);
}

void adamw_set_decay(adamw_t *o, int i, int decay) { if (i >= 0 && i < o->n) o->decay[i] = !!decay; }
int adamw_get_decay(const adamw_t *o, int i) { return i >= 0 && i < o->n ? o->decay[i] : 0; }
int64_t adamw_steps(const adamw_t *o) { return o->t; }
void adamw_set_steps(adamw_t *o, int64_t t) { o->t = t; }

int adamw_moments(adamw_t *o, int which, tensor_view_t *views, int cap) {
    const tensor_view_t *src = which ? o->v : o->m;
    if (views)
        for (int i = 0; i < o->n && i < cap; i++) views[i] = src[i];
    return o->n;
}

/* One device call for the whole list (one host synchronisation on a GPU); tensors on
 * different devices (not a configuration the programs make) are summed device by device in
 * list order. */
double adamw_grad_norm(const tensor_view_t *g, int n) {
    const float **x = malloc(sizeof(*x) * (n > 0 ? n : 1));
    size_t *len = malloc(sizeof(*len) * (n > 0 ? n : 1));
    if (!x || !len) {
        free(x);
        free(len);
        return NAN;
    }
    double total = 0.0;
    for (int i0 = 0; i0 < n;) {
        device_t *d = g[i0].dev ? g[i0].dev : device_cpu_default();
        int i1 = i0;
        for (; i1 < n && (g[i1].dev ? g[i1].dev : device_cpu_default()) == d; i1++) {
            x[i1 - i0] = g[i1].data;
            len[i1 - i0] = (size_t)tensor_numel(&g[i1]);
        }
        total += DEV(d, sumsq_multi, x, len, i1 - i0);
        i0 = i1;
    }
    free(x);
    free(len);
    return sqrt(total);
}

/* The gradients match the parameters: as many tensors, each of the same size. */
static int check_grads(const adamw_t *o, const tensor_view_t *grads, int n, char *err, size_t errlen) {
    if (n != o->n) {
        snprintf(err, errlen, "adamw_step: %d gradient tensors for %d parameters", n, o->n);
        return -1;
    }
    for (int i = 0; i < n; i++)
        if (tensor_numel(&grads[i]) != tensor_numel(&o->p[i])) {
            snprintf(err, errlen, "adamw_step: gradient %d (%s) has the wrong size", i,
                     grads[i].name);
            return -1;
        }
    return 0;
}

int adamw_step(adamw_t *o, const tensor_view_t *grads, int n, float lr, float grad_scale,
               float max_norm, double *norm_out, char *err, size_t errlen) {
    if (check_grads(o, grads, n, err, errlen)) return -1;
    if (grad_scale != 1.0f)
        for (int i = 0; i < n; i++)
            DEV(o->dev, scale_inplace, grads[i].data, grad_scale, (size_t)tensor_numel(&grads[i]));
    double norm = adamw_grad_norm(grads, n);
    if (norm_out) *norm_out = norm;
    return adamw_step_normed(o, grads, n, lr, max_norm, norm, err, errlen);
}

int adamw_step_normed(adamw_t *o, const tensor_view_t *grads, int n, float lr, float max_norm,
                      double norm, char *err, size_t errlen) {
    if (check_grads(o, grads, n, err, errlen)) return -1;
    if (!isfinite(norm)) {
        snprintf(err, errlen, "adamw_step: gradient norm is %g; step skipped", norm);
        return -2;
    }
    /* clip_grad_norm_: coefficient computed in float from the float norm, clamped to 1 */
    float clip = 1.0f;
    if (max_norm > 0) {
        float coef = max_norm / ((float)norm + 1e-6f);
        clip = coef < 1.0f ? coef : 1.0f;
    }
    o->t++;
    const float b1 = o->cfg.beta1, b2 = o->cfg.beta2, eps = o->cfg.eps;
    /* Scalars as PyTorch forms them: Python floats (double), rounded to float when used. */
    const double bc1 = 1.0 - pow((double)b1, (double)o->t);
    const double bc2 = 1.0 - pow((double)b2, (double)o->t);
    const float step_size = (float)(lr / bc1), bc2_sqrt = (float)sqrt(bc2);
    const float decay_mul = (float)(1.0 - (double)lr * o->cfg.weight_decay);
    const adamw_scalars_t sc = {.clip = clip, .decay_mul = decay_mul, .beta1 = b1, .beta2 = b2,
                                .eps = eps, .step_size = step_size, .bc2_sqrt = bc2_sqrt};
    for (int i = 0; i < n; i++)
        o->list[i] = (adamw_tensor_t){.p = o->p[i].data, .g = grads[i].data, .m = o->m[i].data,
                                      .v = o->v[i].data, .n = (size_t)tensor_numel(&o->p[i]),
                                      .decay = o->decay[i] && o->cfg.weight_decay > 0};
    DEV(o->dev, adamw_update_multi, o->list, n, &sc);
    return 0;
}
