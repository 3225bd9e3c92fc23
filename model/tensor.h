/* model/tensor.h: a named view of a float32 tensor owned by someone else.
 *
 * This is how a model exposes its parameters (and gradients, and optimizer moments) to the
 * checkpoint writer and to tests without either knowing the model's layout. The model owns
 * `data`; a view is valid as long as the model is. `data` is a pointer of the device `dev`
 * (a host pointer on the CPU device): code that is not the model reads it through
 * tensor_view_download / tensor_view_upload. */
#ifndef MODEL_TENSOR_H
#define MODEL_TENSOR_H
#include <stdint.h>

#define TENSOR_MAX_DIMS 4
#define TENSOR_NAME_LEN 96

typedef struct {
    char name[TENSOR_NAME_LEN];   /* Hugging Face name, e.g. "model.layers.0.self_attn.q_proj.weight" */
    int ndim;
    int64_t shape[TENSOR_MAX_DIMS];  /* row-major; a Linear weight is (out_features, in_features) */
    float *data;
    struct device *dev;           /* the device data lives on (model/device.h); NULL: host */
} tensor_view_t;

static inline int64_t tensor_numel(const tensor_view_t *t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

/* A view of data named name, shape (d0) or (d0, d1) (ndim 1 or 2), device unset. */
static inline void tensor_view_set(tensor_view_t *v, const char *name, float *data, int ndim,
                                   int64_t d0, int64_t d1) {
    *v = (tensor_view_t){.ndim = ndim, .shape = {d0, d1}, .data = data};
    for (int i = 0; name[i] && i < TENSOR_NAME_LEN - 1; i++) v->name[i] = name[i];
}
/* Copies up to cap of n views into views (NULL: none) and returns n: a model's view getter. */
static inline int tensor_views_copy(const tensor_view_t *src, int n, tensor_view_t *views, int cap) {
    for (int i = 0; views && i < n && i < cap; i++) views[i] = src[i];
    return n;
}

/* Host copies of a view's elements (tensor_numel floats), whatever device holds them: the
 * checkpoint writer and reader cross to the host here (device.c). */
void tensor_view_download(const tensor_view_t *t, float *dst_host);
void tensor_view_upload(const tensor_view_t *t, const float *src_host);
#endif
