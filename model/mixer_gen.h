/* model/mixer_gen.h: autoregressive inference of the causal masked mixer (seed 004) with a
 * cache of its mixing sums.
 *
 * A masked mixing's output at position t is bias_t + sum_{s <= t} W[t][s] x_s: position s
 * contributes W[t][s] x_s to every later output t >= s, and nothing else. So the generator
 * keeps, per layer and sequence, the running sums S[t] (t < Tmax, width D) of every output
 * position: when the tokens of positions s arrive, one product adds W[t][s] x_s into S[t] for
 * all t >= s (a gemm of the chunk's mixing inputs by the weight's columns s, rows t >= s),
 * and the mixing output of position s is then S[s], complete. S starts at the bias. Decoding
 * one token costs O((Tmax - s) d k) per layer for the sums plus the block's O(d^2 + d F)
 * per-row work, i.e. O(T d), where re-running the whole prefix would cost O(T^2 d). Heads
 * and taps (k > 1) add into S exactly as the training mixing does (mixer_mix.h), through
 * the same gemm contract; only the order of the additions differs, so the logits agree with
 * mixers_forward's to float rounding, not bit for bit.
 *
 * The generator borrows a causal mixer's weights (mixers_lm); the masked weights are taken
 * from them at every reset, so weights reloaded in place between generations are seen.
 * Status: 0, or a negative LLAMA_E* code with one line in err. */
#ifndef MODEL_MIXER_GEN_H
#define MODEL_MIXER_GEN_H
#include <stddef.h>
#include <stdint.h>

#include "model/mixers.h"

typedef struct mixer_gen mixer_gen_t;

/* Sums for up to Bmax sequences of Tmax <= max_seq positions; m must be a causal mixer. */
int mixer_gen_create(mixer_gen_t **g, mixers_t *m, int Bmax, int Tmax, char *err, size_t errlen);
void mixer_gen_destroy(mixer_gen_t **g);
/* Forgets every position (the sums return to the bias) and re-reads the weights. */
void mixer_gen_reset(mixer_gen_t *g);
/* Positions seen so far (the next chunk's first position). */
int mixer_gen_pos(const mixer_gen_t *g);
/* Appends a chunk of T tokens (B,T) to sequences 0..B-1 (all at mixer_gen_pos): the prompt in
 * one chunk, then one token per step. Logits of each sequence's last new position go to
 * mixer_gen_logits(); all_logits (B,T,V) on the host, when non-NULL, receives every new
 * position's. */
int mixer_gen_step(mixer_gen_t *g, const uint32_t *tokens, int B, int T, float *all_logits,
                   char *err, size_t errlen);
/* (B,V) on the HOST, valid until the next step. */
const float *mixer_gen_logits(const mixer_gen_t *g);
#endif
