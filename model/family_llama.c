/* model/family_llama.c: the Llama-style baseline as a model family (see family.h). */
#include "model/family.h"
#include "model/llama.h"

static int create(void **m, device_t *dev, const model_config_t *cfg, int B, int T,
                  uint64_t seed, char *err, size_t errlen) {
    return llama_create_on((llama_t **)m, dev, cfg, B, T, seed, err, errlen);
}
static void memory(void *m, model_memory_t *out) { llama_memory(m, out); }
static void destroy(void **m) { llama_destroy((llama_t **)m); }
static int set_shape(void *m, int B, int T, char *err, size_t errlen) {
    return llama_set_shape(m, B, T, err, errlen);
}
static int forward(void *m, const uint32_t *tokens, const uint32_t *targets, const uint8_t *mask,
                   float *loss, char *err, size_t errlen) {
    return llama_forward(m, tokens, targets, mask, loss, err, errlen);
}
static int backward(void *m, char *err, size_t errlen) { return llama_backward(m, err, errlen); }
static void zero_grad(void *m) { llama_zero_grad(m); }
static void set_grad_scale(void *m, float s) { llama_set_grad_scale(m, s); }
static int params(void *m, tensor_view_t *v, int cap) { return llama_params(m, v, cap); }
static int grads(void *m, tensor_view_t *v, int cap) { return llama_grads(m, v, cap); }

const model_family_t family_llama = {
    .name = "llama",
    .kind = MODEL_LLAMA,
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
    .metrics = NULL,
};
