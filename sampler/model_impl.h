/* sampler/model_impl.h: the inside of a sampler_model_t, shared by sampler/model.c (loading,
 * buffers) and sampler/run.c (generation). Not for other components. */
#ifndef SAMPLER_MODEL_IMPL_H
#define SAMPLER_MODEL_IMPL_H
#include "model/free.h"
#include "model/generate.h"
#include "model/llama.h"
#include "model/ltm.h"
#include "sampler/sampler.h"

#include "sampler/engine.h"

struct sampler_model {
    model_config_t cfg;
    device_t *dev;         /* borrowed: the device every buffer lives on */
    llama_t *llama;        /* the baseline (kind MODEL_LLAMA), activations for (1,1) only */
    free_t *free;          /* the Free Transformer; activations for the encoder (1, encT) */
    int encT;
    ltm_t *ltm;            /* the Latent-Thought LM; activations for inferring z from a prompt of
                              up to infT targets, one sequence at a time */
    int infT;
    int engines;           /* engines over these weights (they point into the models above) */
    engine_t *cli;         /* sampler_generate's engine, kept for the next call while it fits */
};

/* Makes sure the model's own activations take a prompt of P positions: the Free Transformer's
 * encoder, the LTM's inference of z (a no-op for the baseline). Growing them re-creates the
 * model, so it is refused while an engine is attached. */
int sampler_model_reserve(sampler_model_t *sm, int P, char *err, size_t errlen);
#endif
