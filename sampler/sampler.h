/* sampler/sampler.h: text generation from a checkpoint, the library behind bin/sampler.
 *
 *   sampler_model_load  checkpoint directory -> a model of either family (baseline or Free
 *                       Transformer) with its KV-cache generator
 *   sampler_generate    prompt ids -> n continuations (batched, KV cache)
 *
 * Reproducibility: sample i (counted from o->first) draws its tokens from rng_seed2(seed ^ SAMPLER_TOKEN_SALT, i),
 * and, for the Free Transformer, its latents from rng_seed2(seed ^ SAMPLER_LATENT_SALT, key)
 * with key = i ("independent") or (1 << 32) + i / group ("shared": every sequence of a group
 * draws the same uniforms for the prompt's bits and the same prior index Z_t at each
 * position t). Each sequence consumes a fixed number of draws per position whatever the
 * others do, so the same seed gives the same samples however they are batched.
 *
 * Latents (seed 000, section 3): the prompt's Z comes from the encoder reading the prompt
 * only (bits drawn with the uniforms above); every generated position t gets Z_t uniform over
 * the 2^H one-hot vectors, index uniform in [0, 2^H).
 *
 * Latent-thought LM (seed 003 §2.3): each sample's z is drawn once, before its first token:
 * conditional (default), from the posterior q(z | prompt) that inner_steps fast AdamW steps
 * infer from the prompt's tokens (the prompt's own next-token targets), z = mu + sigma eps;
 * unconditional (ltm_prior), z ~ N(0, I). A one-token prompt has no target to infer from: its
 * z comes from the prior. Sample i's draws (the posterior's start, eps, or the prior) are the
 * counter streams (rng_counter_key(seed ^ SAMPLER_LATENT_SALT, 3), i), and each sample infers
 * on its own, so its z does not depend on the batch it is generated in.
 *
 * Status: 0, or a negative SAMPLER_E* code with one line in err. */
#ifndef SAMPLER_SAMPLER_H
#define SAMPLER_SAMPLER_H
#include <stddef.h>
#include <stdint.h>

#include "model/config.h"
#include "model/device.h"
#include "model/tensor.h"
#include "model/sample.h"

enum {
    SAMPLER_EARG = -1,     /* bad option or argument */
    SAMPLER_ECKPT = -2,    /* the checkpoint is missing, incomplete, corrupt or unloadable */
    SAMPLER_EMISMATCH = -3,/* prompt and model disagree (vocabulary, length) */
    SAMPLER_ENOMEM = -4,
    SAMPLER_EMODEL = -5,   /* the model refused a step */
};

#define SAMPLER_TOKEN_SALT 0x70CE5A3Bull
#define SAMPLER_LATENT_SALT 0x1A7E27ull

typedef enum { SAMPLER_LATENT_INDEPENDENT = 0, SAMPLER_LATENT_SHARED = 1 } sampler_latent;

typedef struct sampler_model sampler_model_t;

/* Loads dir (config.json + model.safetensors) if it is usable under the checkpoint rule
 * (model/checkpoint.h, ckpt_open: MANIFEST verified in full, then the load). Buffers (the
 * KV cache, the encoder's activations) are sized by each sampler_generate call and kept for
 * the next one while they fit. */
int sampler_model_load(sampler_model_t **sm, device_t *dev, const char *dir, char *err,
                       size_t errlen);
/* The newest usable checkpoint of run_dir, by the same rule (ckpt_open_newest): its path in
 * dir; warn receives one line per newer one skipped ("skipping <path>: <why>", '\n'-separated). */
int sampler_model_load_newest(sampler_model_t **sm, device_t *dev, const char *run_dir, char *dir,
                              size_t cap, char *warn, size_t warnlen, char *err, size_t errlen);
/* A freshly initialised model of cfg (tests, benchmarks). dev NULL: the CPU device. */
int sampler_model_create(sampler_model_t **sm, device_t *dev, const model_config_t *cfg,
                         uint64_t seed, char *err, size_t errlen);
void sampler_model_free(sampler_model_t **sm);
device_t *sampler_model_device(const sampler_model_t *sm);
const model_config_t *sampler_model_config(const sampler_model_t *sm);
/* The view table of the weights (for tests that set them): count returned, views may be NULL. */
int sampler_model_params(sampler_model_t *sm, tensor_view_t *views, int cap);

typedef struct {
    int n;                  /* number of samples */
    int max_new;            /* tokens to generate per sample */
    sample_opts_t sample;   /* temperature, top-k, top-p */
    uint64_t seed;
    sampler_latent latent;  /* Free Transformer only */
    int group;              /* sequences per shared-latent group (>= 1) */
    int stop_at_eot;        /* a sample ends at the model's eot_id (not included) */
    uint32_t first;         /* index of the first sample (the service's one-sample requests) */
    /* Latent-thought LM only (seed 003 §2.3) */
    int ltm_prior;          /* 1: z from the prior N(0, I); 0: inferred from the prompt */
    int inner_steps;        /* the inference's fast steps (0: the checkpoint's inner_steps) */
    float fast_lr;          /* its peak rate (0: the checkpoint's fast_lr_end) */
    /* An extra stop rule (NULL: none), e.g. the stop sequences of a code benchmark: called
     * after every token a sample gains with its tokens so far; non-zero ends the sample there
     * (result's stopped = 2). Called from the generating thread, samples in any order. */
    int (*stop_fn)(void *ctx, int sample, const uint32_t *ids, int len);
    void *stop_ctx;
} sampler_opts_t;

typedef struct {
    int n, max_new;
    uint32_t *ids;          /* (n, max_new) generated ids, row i valid up to len[i] */
    int *len;               /* (n) */
    int *stopped;           /* (n) 1 when the sample ended at eot, 2 by stop_fn */
    uint32_t *z;            /* (n, prompt + max_new) latent indices (Free Transformer) or NULL */
    int z_stride;
    double seconds;         /* wall time of the generation (prefill + decode) */
    long long new_tokens;   /* tokens computed after the prefill, over all samples */
} sampler_result_t;

int sampler_opts_check(const sampler_opts_t *o, char *err, size_t errlen);
/* Generates o->n samples continuing prompt (P >= 1 ids). The result's arrays are allocated
 * here; sampler_result_free releases them. */
int sampler_generate(sampler_model_t *sm, const uint32_t *prompt, int P, const sampler_opts_t *o,
                     sampler_result_t *res, char *err, size_t errlen);
void sampler_result_free(sampler_result_t *res);
#endif
