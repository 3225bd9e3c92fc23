/* model/family_mixers.c: the masked-mixer families (model/mixers.h) as model families (see
 * family.h): one implementation, five entries that differ in name and kind. */
#include "model/family.h"
#include "model/mixers.h"

static int create(void **m, device_t *dev, const model_config_t *cfg, int B, int T,
                  uint64_t seed, char *err, size_t errlen) {
    return mixers_create_on((mixers_t **)m, dev, cfg, B, T, seed, err, errlen);
}
static void memory(void *m, model_memory_t *out) { mixers_memory(m, out); }
static void destroy(void **m) { mixers_destroy((mixers_t **)m); }
static int set_shape(void *m, int B, int T, char *err, size_t errlen) {
    return mixers_set_shape(m, B, T, err, errlen);
}
static int forward(void *m, const uint32_t *tokens, const uint32_t *targets, const uint8_t *mask,
                   float *loss, char *err, size_t errlen) {
    return mixers_forward(m, tokens, targets, mask, loss, err, errlen);
}
static int backward(void *m, char *err, size_t errlen) { return mixers_backward(m, err, errlen); }
static void zero_grad(void *m) { mixers_zero_grad(m); }
static void set_grad_scale(void *m, float s) { mixers_set_grad_scale(m, s); }
static int params(void *m, tensor_view_t *v, int cap) { return mixers_params(m, v, cap); }
static int grads(void *m, tensor_view_t *v, int cap) { return mixers_grads(m, v, cap); }
static int load_encoder(void *m, const char *dir, char *err, size_t errlen) {
    return mixers_load_encoder(m, dir, err, errlen);
}
static int frozen(void *m, int i) { return mixers_frozen(m, i); }
static void set_step(void *m, uint64_t step) { mixers_set_step(m, step); }
static void set_row(void *m, uint64_t row0) { mixers_set_row(m, row0); }

#define MIXER_FAMILY(var, nm, kd, enc)                                                         \
    const model_family_t var = {.name = nm, .kind = kd, .create = create, .memory = memory,   \
                                .destroy = destroy, .set_shape = set_shape,                   \
                                .forward = forward, .backward = backward,                     \
                                .zero_grad = zero_grad, .set_grad_scale = set_grad_scale,     \
                                .params = params, .grads = grads, .metrics = NULL,            \
                                .set_step = set_step, .set_row = set_row,                     \
                                .load_encoder = enc, .frozen = frozen}
MIXER_FAMILY(family_mixer, "mixer", MODEL_MIXER, NULL);
MIXER_FAMILY(family_mixer_ae, "mixer-ae", MODEL_MIXER_AE, NULL);
MIXER_FAMILY(family_llama_ae, "llama-ae", MODEL_LLAMA_AE, NULL);
MIXER_FAMILY(family_mixer_mem, "mixer-mem", MODEL_MIXER_MEM, load_encoder);
MIXER_FAMILY(family_llama_mem, "llama-mem", MODEL_LLAMA_MEM, load_encoder);
