/* sampler/engine.h: continuous batching over the KV-cache generator, the one decode path of
 * bin/sampler (the command line and the service alike).
 *
 * An engine holds a generator whose cache has max_batch slots of max_pos positions, allocated
 * once (engine_create) and never grown. A row is one sample of one request: its slot, its
 * position, its sampling options, max_new, stop rule, token stream and, for the Free
 * Transformer, its latent stream. Rows join (engine_add) and leave (engine_release) between
 * steps; engine_step advances every row:
 *   prefill: a new row's prompt runs alone (B = 1) in the chunks of model/generate.h
 *     (gen_prefill_next: cut at multiples of GEN_PREFILL_CHUNK positions). A step runs chunks
 *     of waiting prompts, oldest row first, until GEN_PREFILL_CHUNK prompt positions have run
 *     (at least one chunk), so a long prompt delays the decoding rows by about one chunk per
 *     step instead of its whole length. Chunked rather than batched: a prefill chunk runs the
 *     ordinary products, whose bits depend on the rows beside them, so prompts prefilled
 *     together would make a request's text depend on what arrived with it. A Free Transformer
 *     prompt is one chunk, whatever its length: its encoder reads the whole prompt at once
 *     (non-causal), so it cannot be cut. A latent-thought LM row first gets its latents (the
 *     posterior inferred from its prompt alone, or the prior: sampler.h), then its prompt's
 *     chunks as the baseline's.
 *   decode: one chunk of T = 1 with every decoding row, each at its own position
 *     (gen_begin_slots). Its rows are computed independently of each other (linear_rows,
 *     attention_rows), so a row gets the bits it gets alone.
 * Draws: row i (sample index `index` of a request) draws its tokens from
 * rng_seed2(seed ^ SAMPLER_TOKEN_SALT, index), and its latents from
 * rng_seed2(seed ^ SAMPLER_LATENT_SALT, key), key = index ("independent") or
 * 2^32 + index / group ("shared"): a row of a shared group draws the very numbers its group
 * mates draw, whenever each of them arrives. Every row consumes the same draws per position
 * whatever the others do, so a request's text is a function of the request and the weights:
 * byte for byte the same alone, in any batch, from the command line or from the service.
 *
 * Status codes are SAMPLER_E* (sampler.h) with one line in err. */
#ifndef SAMPLER_ENGINE_H
#define SAMPLER_ENGINE_H
#include <stddef.h>
#include <stdint.h>

#include "sampler/sampler.h"

typedef struct engine engine_t;

typedef struct {
    const uint32_t *prompt; /* (P) ids, copied by engine_add */
    int P;
    int max_new;            /* tokens to generate, >= 1 */
    sample_opts_t sample;
    uint64_t seed;
    uint64_t index;         /* the sample's index in its series (its streams' key) */
    sampler_latent latent;  /* Free Transformer only */
    int group;              /* >= 1 */
    int stop_at_eot;        /* end at the model's eot_id (not included) */
    /* Latent-thought LM only (sampler.h): z from the prior, or inferred from the prompt by
     * inner_steps fast steps at rate fast_lr (0: the checkpoint's) */
    int ltm_prior, inner_steps;
    float fast_lr;
} engine_req_t;

typedef enum {
    ENGINE_FREE = 0,  /* no row */
    ENGINE_PREFILL,   /* prompt chunks still to run */
    ENGINE_DECODE,    /* generating */
    ENGINE_DONE,      /* finished (eot or max_new): read it, then engine_release */
} engine_state;

typedef struct {
    engine_state state;
    int P, max_new;
    int len;               /* tokens generated so far */
    int stopped;           /* 1 when it ended at eot */
    int grew;              /* tokens appended by the last engine_step (0 or 1) */
    const uint32_t *ids;   /* (len) generated ids */
    const uint32_t *z;     /* Free Transformer: (n_z) latent index of every position that
                              predicted a token (prompt, then generated); else NULL */
    int n_z;
} engine_row_t;

/* An engine over sm's weights (borrowed: keep sm alive; sm may hold several engines) with
 * max_batch rows of up to max_pos positions (prompt + generated, <= the model's max_seq).
 * Everything it will use is allocated here. */
int engine_create(engine_t **e, sampler_model_t *sm, int max_batch, int max_pos, char *err,
                  size_t errlen);
void engine_destroy(engine_t **e);
int engine_max_batch(const engine_t *e);
int engine_max_pos(const engine_t *e);
/* Device bytes of the key/value cache, and of everything the engine allocated (cache, chunk
 * buffers, and for the Free Transformer the encoder's activations it asked the model for). */
size_t engine_cache_bytes(const engine_t *e);
size_t engine_bytes(const engine_t *e);

/* A new row for r: its index (>= 0), or SAMPLER_EARG (bad options, no free row),
 * SAMPLER_EMISMATCH (a prompt id outside the vocabulary, P + max_new beyond the model's
 * max_seq or the engine's max_pos). It runs from the next engine_step. */
int engine_add(engine_t *e, const engine_req_t *r, char *err, size_t errlen);
/* One step: prefill chunks, then one decode chunk of every decoding row. Rows that finish
 * become ENGINE_DONE. 0, or SAMPLER_EMODEL when the model failed, SAMPLER_ENOMEM when it
 * failed for lack of memory (every live row is then left as it was). */
int engine_step(engine_t *e, char *err, size_t errlen);
/* Row i (0 <= i < max_batch): valid until the next engine_step or engine_release of it. */
const engine_row_t *engine_row(const engine_t *e, int i);
/* Frees row i, finished or not (a cancelled request leaves at once). */
void engine_release(engine_t *e, int i);
/* For tests: fn(ctx, row, logits) sees every row's logits (V floats) before its pick, so a
 * test can compare the bits a row gets in a batch with those it gets alone. NULL: none. */
typedef void (*engine_observe_fn)(void *ctx, int row, const float *logits, int V);
void engine_observe(engine_t *e, engine_observe_fn fn, void *ctx);
/* Steps of at least `rows` rows use every thread (gen_set_parallel_rows; 0: the generator's
 * own work threshold alone). A row's tokens are the same either way. */
void engine_set_parallel_rows(engine_t *e, int rows);
/* Rows neither free nor done; rows free for engine_add. */
int engine_active(const engine_t *e);
int engine_free_rows(const engine_t *e);
#endif
