/* model/ptable.c: see ptable.h. */
#include "model/ptable.h"

#include <stdio.h>
#include <string.h>

float *ptable_take(ptable_t *p, const char *prefix, const char *suffix, int ndim, const int64_t *d) {
    size_t n = 1;
    for (int i = 0; i < ndim; i++) n *= (size_t)d[i];
    float *at = p->base ? p->base + p->off : NULL;
    if (p->views) {
        tensor_view_t *v = &p->views[p->n];
        memset(v, 0, sizeof *v);
        snprintf(v->name, sizeof v->name, "%s%s", prefix, suffix);
        v->ndim = ndim;
        for (int i = 0; i < ndim; i++) v->shape[i] = d[i];
        v->data = at;
        v->dev = p->dev;
    }
    p->off += n;
    p->n++;
    return at;
}
