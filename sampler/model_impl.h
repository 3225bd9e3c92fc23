/* sampler/model_impl.h: the inside of a sampler_model_t, shared by sampler/model.c (loading,
 * buffers) and sampler/run.c (generation). Not for other components. */
#ifndef SAMPLER_MODEL_IMPL_H
#define SAMPLER_MODEL_IMPL_H
#include "model/free.h"
#include "model/generate.h"
#include "model/llama.h"
#include "model/ltm.h"
#include "model/mixer_gen.h"
#include "model/mixers.h"
#include "sampler/sampler.h"

struct sampler_model {
    model_config_t cfg;
    device_t *dev;         /* borrowed: the device every buffer lives on */
    llama_t *llama;        /* the baseline (kind MODEL_LLAMA), activations for (1,1) only */
    free_t *free;          /* the Free Transformer; activations for the encoder (encB, encT) */
    int encB, encT;
    gen_t *gen;            /* baseline generator, cache (genB, genT) */
    gen_free_t *genf;      /* Free Transformer generator, cache (genB, genT) */
    ltm_t *ltm;            /* the Latent-Thought LM; activations for inferring z from a prompt of
                              up to infT targets, one sequence at a time */
    int infT;
    gen_ltm_t *genl;       /* its generator, cache (genB, genT) */
    mixers_t *mixer;       /* the causal masked mixer (kind MODEL_MIXER), activations (1,1) */
    mixer_gen_t *genm;     /* its generator: the cache of mixing sums (genB, genT) */
    int genB, genT;
};

/* Makes sure a generator with a cache of B x T positions exists (and, for the Free
 * Transformer, encoder buffers for a B x P prompt), reusing the current ones when they fit. */
int sampler_model_prepare(sampler_model_t *sm, int B, int P, int T, char *err, size_t errlen);
#endif
