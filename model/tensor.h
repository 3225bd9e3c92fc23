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

/* Host copies of a view's elements (tensor_numel floats), whatever device holds them: the
 * checkpoint writer and reader cross to the host here (device.c). */
void tensor_view_download(const tensor_view_t *t, float *dst_host);
void tensor_view_upload(const tensor_view_t *t, const float *src_host);
#endif
