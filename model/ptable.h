/* model/ptable.h: laying out a model's parameters as named tensors in one buffer.
 *
 * A model lays out its parameters (and, with the same code, its gradients) by taking tensors
 * one after another from a ptable: the first pass counts (base NULL), the second hands out
 * pointers into the allocation and fills the views (names, shapes, device) the checkpoint
 * code and the optimizer see. The order of the takes is the order of the views. */
#ifndef MODEL_PTABLE_H
#define MODEL_PTABLE_H
#include <stddef.h>
#include <stdint.h>

#include "model/tensor.h"

typedef struct ptable {
    float *base;            /* the buffer, or NULL while counting */
    size_t off;             /* floats taken so far */
    tensor_view_t *views;   /* where the views go, or NULL */
    int n;                  /* tensors taken so far */
    struct device *dev;     /* the buffer's device, copied into the views */
} ptable_t;

/* The next tensor, named prefix + suffix, of ndim (1..4) sizes d[0..ndim): its pointer (NULL
 * while counting). */
float *ptable_take(ptable_t *p, const char *prefix, const char *suffix, int ndim, const int64_t *d);
/* The common shapes. */
static inline float *ptable_vec(ptable_t *p, const char *prefix, const char *suffix, int64_t n) {
    return ptable_take(p, prefix, suffix, 1, &n);
}
static inline float *ptable_mat(ptable_t *p, const char *prefix, const char *suffix, int64_t r,
                                int64_t c) {
    const int64_t d[2] = {r, c};
    return ptable_take(p, prefix, suffix, 2, d);
}
/* Copies up to cap of a model's n views into views (NULL: only the count); returns n. */
static inline int ptable_copy_views(const tensor_view_t *src, int n, tensor_view_t *views, int cap) {
    if (views)
        for (int i = 0; i < n && i < cap; i++) views[i] = src[i];
    return n;
}
#endif
