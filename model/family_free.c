/* model/family_free.c: the Free Transformer (model/free.h) as a model family (see family.h). */
#include "model/family.h"
#include "model/free.h"

static int create(void **m, device_t *dev, const model_config_t *cfg, int B, int T,
                  uint64_t seed, char *err, size_t errlen) {
    return free_create_on((free_t **)m, dev, cfg, B, T, seed, err, errlen);
}
static void memory(void *m, model_memory_t *out) { free_memory(m, out); }
static void destroy(void **m) { free_destroy((free_t **)m); }
static int set_shape(void *m, int B, int T, char *err, size_t errlen) {
    return free_set_shape(m, B, T, err, errlen);
}
static int forward(void *m, const uint32_t *tokens, const uint32_t *targets, const uint8_t *mask,
                   float *loss, char *err, size_t errlen) {
    return free_forward(m, tokens, targets, mask, loss, err, errlen);
}
static int backward(void *m, char *err, size_t errlen) { return free_backward(m, err, errlen); }
static void zero_grad(void *m) { free_zero_grad(m); }
static void set_grad_scale(void *m, float s) { free_set_grad_scale(m, s); }
static int params(void *m, tensor_view_t *v, int cap) { return free_params(m, v, cap); }
static int grads(void *m, tensor_view_t *v, int cap) { return free_grads(m, v, cap); }
static void metrics(void *m, family_metrics_t *out) { free_metrics(m, out); }
static void set_step(void *m, uint64_t step) { free_set_step(m, step); }
static void set_row(void *m, uint64_t row0) { free_set_row(m, row0); }

const model_family_t family_free = {
    .name = "free",
    .kind = MODEL_FREE,
    .create = create,
    .memory = memory,
    .destroy = destroy,
    .set_shape = set_shape,
    .forward = forward,
    .backward = backward,
    .zero_grad = zero_grad,
    .set_grad_scale = set_grad_scale,
    .params = params,
    .grads = grads,
    .metrics = metrics,
    .set_step = set_step,
    .set_row = set_row,
};
