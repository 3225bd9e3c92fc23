/* model/family.h: what every model family offers the programs (trainer, evaluator, sampler).
 *
 * A family is a table of functions over an opaque model, so a new family (the Free
 * Transformer, LTM, masked mixers...) is one new file (model/family_<name>.c) registered in
 * model/family.c, and the programs do not change. A family runs on any device (device.h):
 * it is written once, over the device table, and never knows which device it runs on. */
#ifndef MODEL_FAMILY_H
#define MODEL_FAMILY_H
#include <stddef.h>
#include <stdint.h>

#include "model/config.h"
#include "model/device.h"
#include "model/tensor.h"


#define FAMILY_MAX_METRICS 16

/* Extra per-step numbers a family reports beside the loss (e.g. the Free Transformer's KL). */
typedef struct {
    int n;
    struct { char name[32]; double value; } kv[FAMILY_MAX_METRICS];
} family_metrics_t;

typedef struct model_family {
    const char *name;      /* "llama", "free": the value of --model and of ft_model_kind */
    model_kind kind;
    /* Builds the model with every buffer on dev (model/device.h). */
    int (*create)(void **m, device_t *dev, const model_config_t *cfg, int Bmax, int Tmax,
                  uint64_t seed, char *err, size_t errlen);
    void (*destroy)(void **m);
    int (*set_shape)(void *m, int B, int T, char *err, size_t errlen);
    /* Training forward: tokens, targets (B,T), mask (B,T) or NULL; *loss is what the backward
     * differentiates (for the Free Transformer: cross-entropy + free-bits KL). */
    int (*forward)(void *m, const uint32_t *tokens, const uint32_t *targets, const uint8_t *mask,
                   float *loss, char *err, size_t errlen);
    int (*backward)(void *m, char *err, size_t errlen);
    void (*zero_grad)(void *m);
    void (*set_grad_scale)(void *m, float s);
    int (*params)(void *m, tensor_view_t *views, int cap);
    int (*grads)(void *m, tensor_view_t *views, int cap);
    /* Numbers of the last forward beyond the loss (may be NULL: none). */
    void (*metrics)(void *m, family_metrics_t *out);
    /* Called before the micro-batches of optimizer step `step` (0-based) so a family that
     * draws random numbers in its forward (the Free Transformer's latent) draws the same ones
     * after a resume (may be NULL: nothing to draw). */
    void (*set_step)(void *m, uint64_t step);
    /* Data parallelism: the next forward's first row is row `row0` of the step's global batch
     * (every rank's rows of every micro-batch, numbered as trainer/dp_train.h says), so a
     * family that draws per row draws what one process would for that row (may be NULL). */
    void (*set_row)(void *m, uint64_t row0);
    /* Bytes of each buffer kind (parameters, gradients, activations), for the report a
     * program prints at start. */
    void (*memory)(void *m, model_memory_t *out);
    /* Loads part of the model (a memory model's encoder) from another checkpoint directory,
     * refusing one of another shape with one line (may be NULL: the family has no such part). */
    int (*load_encoder)(void *m, const char *dir, char *err, size_t errlen);
    /* 1 when parameter view i is frozen: the family leaves its gradient at zero and the
     * optimizer must not decay it (may be NULL: everything trains). */
    int (*frozen)(void *m, int i);
} model_family_t;

/* The family called `name`, or NULL. */
const model_family_t *family_find(const char *name);
/* The family of a config's kind. */
const model_family_t *family_for_kind(model_kind kind);
/* Names of all families, comma-separated (for --help and errors). */
const char *family_names(void);

/* Number of parameters of a model, counted from its views. */
int64_t family_param_count(const model_family_t *f, void *m);
#endif
