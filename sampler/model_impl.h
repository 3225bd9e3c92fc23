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
    mixers_t *mixer;       /* the causal masked mixer (kind MODEL_MIXER), activations (1,1) */
    mixer_gen_t *genm;     /* its generator (sampler_generate's, not the engine's: run_mixer.c) */
    int genB, genT;        /* genm's sequences and positions */
    int engines;           /* engines over these weights (they point into the models above) */
    engine_t *cli;         /* sampler_generate's engine, kept for the next call while it fits */
};

/* Makes sure the model's own activations take a prompt of P positions: the Free Transformer's
 * encoder, the LTM's inference of z (a no-op for the baseline). Growing them re-creates the
 * model, so it is refused while an engine is attached. */
int sampler_model_reserve(sampler_model_t *sm, int P, char *err, size_t errlen);
/* The masked mixer's generator with at least B sequences of T positions (run_mixer.c). */
int sampler_model_mixer_gen(sampler_model_t *sm, int B, int T, char *err, size_t errlen);
/* sampler_generate for the masked mixer (run_mixer.c): its generator keeps one position for all
 * its sequences, so they cannot join and leave a batch; they run in batches from the prompt. */
int sampler_generate_mixer(sampler_model_t *sm, const uint32_t *prompt, int P, const sampler_opts_t *o,
                           sampler_result_t *res, char *err, size_t errlen);
#endif
