/* evaluator/lm.h: a language model as the evaluator sees it.
 *
 * Every task asks the same question of a model: "given these token rows, what are the
 * next-token logits at every position?" (causal: position t sees tokens 0..t only). An
 * eval_lm_t answers it through a function pointer, so the tasks run unchanged on a checkpoint
 * of any family and on the stub models the tests build with log-probabilities fixed by
 * construction. A Free Transformer (evaluator/lm_free.c) also offers its encoder, and its
 * logits take the latent indices Z explicitly, so each task chooses where Z comes from
 * (encoder, prior) and the target-leak rules of docs/evaluator.md live in the evaluator.
 *
 * Status codes: 0 ok, negative EVAL_E* with one line in err. */
#ifndef EVALUATOR_LM_H
#define EVALUATOR_LM_H
#include <stddef.h>
#include <stdint.h>

#include "model/config.h"
#include "model/device.h"

enum {
    EVAL_EARG = -1,    /* bad argument or option */
    EVAL_EIO = -2,     /* a file could not be read or written */
    EVAL_EFORMAT = -3, /* a task file or dataset is malformed */
    EVAL_EMODEL = -4,  /* the checkpoint cannot be loaded, or the model failed */
    EVAL_EMISMATCH = -5,/* model and data disagree (vocabulary, end-of-text id, length) */
    EVAL_ENOMEM = -6,
    EVAL_EINTR = -7,   /* stopped by a signal */
};

typedef struct eval_lm eval_lm_t;

struct eval_lm {
    model_config_t cfg;   /* vocab_size, eot_id, max_seq, kind, latent_bits are what tasks read */
    int Bmax, Tmax;       /* largest (B, T) one call accepts */
    int64_t n_params;     /* parameters of a loaded checkpoint (0 for stubs) */
    int latent_bits;      /* H of the Free Transformer; 0 for a model without latents */
    device_t *dev;        /* where its buffers live */
    void *impl;
    /* (B,T,V) next-token logits for tokens (B,T), row-major; valid until the next call.
     * z (B,T): latent indices in [0, 2^H) for a model with latents (required there: the
     * evaluator decides where Z comes from), ignored (pass NULL) otherwise. NULL on failure
     * with err set. */
    const float *(*logits)(eval_lm_t *lm, const uint32_t *tokens, const uint32_t *z, int B, int T,
                           char *err, size_t errlen);
    /* Latent models only (NULL otherwise): the encoder's (B,T,H) bit logits for tokens (B,T);
     * the encoder is non-causal over exactly the tokens given. */
    const float *(*encode)(eval_lm_t *lm, const uint32_t *tokens, int B, int T, char *err,
                           size_t errlen);
    /* Incremental decoding with a key/value cache (model/generate.h); NULL when the model does
     * not offer it (tasks then repeat full forwards: same results up to float rounding).
     * gen_start forgets the cache and runs B prompts of n tokens each, prompt (B,n); for a
     * latent model u (B,n,H) are the uniforms that pick the prompts' Z from the encoder, which
     * reads the prompts only. gen_next appends one token per row, tokens (B), with latents
     * z (B) (ignored without latents). Both return the (B,V) logits of each row's last
     * position, valid until the next call. B <= Bmax. */
    const float *(*gen_start)(eval_lm_t *lm, const uint32_t *prompt, int B, int n, const float *u,
                              char *err, size_t errlen);
    const float *(*gen_next)(eval_lm_t *lm, const uint32_t *tokens, const uint32_t *z, int B,
                             char *err, size_t errlen);
    void *gen;            /* the generator behind gen_start / gen_next (created on first use) */
    /* 1 when the last failed call (logits, gen_start, ltm_score, ...) failed for lack of memory
     * (the generator's cache is made on first use): the tasks report any model failure as
     * EVAL_EMODEL, and the evaluator must not take an out-of-memory for a damaged checkpoint */
    int nomem;
    /* Autoencoders and memory models (seed 004; NULL otherwise, and `logits` is then NULL:
     * they are no next-token models): (B,T,V) logits where row t predicts token t of the
     * chunk itself, from the stored embedding of the chunk (and, for a memory model, the
     * tokens before t). The embedding the decoder reads is the b-bit code of the encoder's
     * (bits 1..24; 32: its floats; model/mixers.h), the encoder reading enc_tokens (B,T)
     * (NULL: tokens; another chunk's: a control), or zeros (zero 1: a control).
     * n_embed: floats of that one embedding per chunk (n_p); embed_range: > 0 when the
     * embedding is bounded (codes of 1..24 bits exist), 0 when only 32 bits can be charged. */
    const float *(*chunk_logits)(eval_lm_t *lm, const uint32_t *tokens, const uint32_t *enc_tokens,
                                 int bits, int zero, int B, int T, char *err, size_t errlen);
    int n_embed;
    float embed_range;
    void (*release)(eval_lm_t *lm);
    /* Latent-thought LMs only (NULL otherwise; evaluator/lm_ltm.c, model/ltm.h). Infers the
     * posterior q(z|x) of rows (B,T) from their counted targets (mask NULL: all), the decoder
     * fixed, by `steps` fast steps of stochastic VI (row b draws its start and every step's
     * noise from the streams (key, row0 + b)). Afterwards z = mu + sigma eps of the inference's
     * last draw: logits (its z argument ignored) and gen_start use it, for rows of the same B.
     * The rate: the ltm_fast_lr peak. */
    int (*ltm_infer)(eval_lm_t *lm, const uint32_t *tokens, const uint32_t *targets,
                     const uint8_t *mask, int B, int T, int steps, uint64_t key, uint64_t row0,
                     char *err, size_t errlen);
    /* The posterior of the last ltm_infer (same targets and mask) on S fresh draws (ltm.h
     * ltm_score): ce (S,B) -log p(row | z_s) summed over counted targets, kl (B), logw (S,B)
     * the importance weights (kl, logw may be NULL). Leaves z at the last draw. */
    int (*ltm_score)(eval_lm_t *lm, const uint32_t *targets, const uint8_t *mask, int S, double *ce,
                     double *kl, double *logw, char *err, size_t errlen);
    /* z ~ N(0, I) for B rows (row b: the stream (key, row0 + b)): nothing to infer from. */
    int (*ltm_prior)(eval_lm_t *lm, int B, uint64_t key, uint64_t row0, char *err, size_t errlen);
    int ltm_steps;        /* the inference's steps for gen_start (default: the checkpoint's) */
    float ltm_fast_lr;    /* its peak rate (default: the checkpoint's final fast rate) */
};

/* Loads the checkpoint in dir (config.json + model.safetensors; the MANIFEST is the caller's
 * business: ckpt_open, the checkpoint rule of model/checkpoint.h) as a model that takes up to (Bmax, Tmax) tokens; Tmax <= 0 means
 * the config's max_position_embeddings. */
int eval_lm_load(eval_lm_t **lm, device_t *dev, const char *dir, int Bmax, int Tmax, char *err,
                 size_t errlen);
/* A freshly initialised model of cfg (weights from seed), for tests and --help examples. dev
 * NULL: the CPU device. */
int eval_lm_create(eval_lm_t **lm, device_t *dev, const model_config_t *cfg, int Bmax, int Tmax,
                   uint64_t seed, char *err, size_t errlen);
/* The Free Transformer's eval_lm_t (evaluator/lm_free.c); eval_lm_create calls it for
 * kind MODEL_FREE. */
int eval_lm_create_free(eval_lm_t **lm, device_t *dev, const model_config_t *cfg, int Bmax,
                        int Tmax, uint64_t seed, char *err, size_t errlen);
/* The Latent-thought LM's (evaluator/lm_ltm.c), for kind MODEL_LTM. */
int eval_lm_create_ltm(eval_lm_t **lm, device_t *dev, const model_config_t *cfg, int Bmax,
                       int Tmax, uint64_t seed, char *err, size_t errlen);
/* The masked mixers' eval_lm_t (evaluator/lm_mixers.c), for the kinds MODEL_MIXER ..
 * MODEL_LLAMA_MEM: the causal mixer answers `logits` (and generates through its mixing-sum
 * cache), the autoencoders and memory models `chunk_logits`. */
int eval_lm_create_mixers(eval_lm_t **lm, device_t *dev, const model_config_t *cfg, int Bmax,
                          int Tmax, uint64_t seed, char *err, size_t errlen);
/* The underlying family model (llama_t* for the baseline, free_t* for the Free Transformer),
 * for tests that set weights. */
void *eval_lm_model(eval_lm_t *lm);
void eval_lm_free(eval_lm_t **lm);

/* For the eval_lm_t implementations (lm.c, lm_free.c, lm_mixers.c, lm_ltm.c). A call that
 * failed: lm->nomem = nomem (1: for lack of memory, which is no damage), NULL. */
const float *eval_lm_failed(eval_lm_t *lm, int nomem);
/* The end of a call that computed on lm's device: its faults show at a sync (a work buffer a
 * GPU could not get is a lack of memory; the CPU's sync costs nothing), and a host copy that
 * could not be made (host NULL: "out of host memory for <what>") is one too. host, or NULL
 * with err and lm->nomem set. */
const float *eval_lm_done(eval_lm_t *lm, const float *host, const char *what, char *err, size_t errlen);

/* log softmax of one row of V logits at index `target` (max-subtracted, double accumulation). */
double eval_logprob(const float *row, int V, uint32_t target);
/* Index of the largest logit (the lowest index on ties, so greedy decoding is deterministic). */
uint32_t eval_argmax(const float *row, int V);
#endif
