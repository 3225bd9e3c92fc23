/* evaluator/lm_sampler.h: a sampler_model_t (sampler/sampler.h) holding a copy of an
 * eval_lm_t's weights on the same device, so the code task generates exactly as bin/sampler
 * does from the same checkpoint (KV cache, temperature and top-p, the Free Transformer's
 * latents, the latent-thought LM's posterior from the prompt). The copy costs the weights'
 * memory once more while the task runs; the evaluator's own model is loaded at the smallest
 * shape for such tasks (eval_task_shape 1 x 1). */
#ifndef EVALUATOR_LM_SAMPLER_H
#define EVALUATOR_LM_SAMPLER_H
#include <stddef.h>

#include "evaluator/lm.h"
#include "sampler/sampler.h"

/* 0, or EVAL_E* with a line (a stub without weights, a kind the sampler does not generate
 * from: autoencoders and memory models). */
int eval_lm_sampler(eval_lm_t *lm, sampler_model_t **sm, char *err, size_t errlen);
#endif
