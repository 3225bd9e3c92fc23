/* model/generate.h: autoregressive inference of the Llama decoder with a key/value cache.
 *
 * A generator borrows a llama_t's weights (llama_params views; keep the model alive, weights
 * may be reloaded in place between calls) and owns the cache: for every layer the rotated
 * keys and the values of every position seen so far, (Bmax, Tmax, Hkv, hd) each. A call
 * appends a chunk of T new positions to each of B sequences (all sequences are at the same
 * position: they share one prompt length) and computes only those positions:
 *   prefill: one chunk with the whole prompt (T = prompt length);
 *   decode:  chunks of T = 1, the token just sampled.
 * The arithmetic is the training forward's (llama_block_forward) restricted to the new rows,
 * through the same device ops (the model's device: the cache lives there too): the new
 * queries attend to the cached keys through attention_forward with Tq < Tk. Small chunks
 * (every decode step) run with the device's parallel machinery off (device.h set_parallel),
 * and the CPU multiplies few rows by matrix-vector loops instead of sgemm (ops_linear.c).
 * Summation orders differ from the full forward's: logits agree with llama_forward to float
 * rounding, not bit for bit. A config with a sliding window (sliding_window W > 0) attends to
 * the newest W cached positions of each slot, as the training forward does.
 *
 * For the Free Transformer the chunk is run in pieces, so the caller can compute R between
 * the lower and the upper half:
 *     gen_begin(tokens) -> gen_blocks(0, L/2, NULL) -> [X = gen_hidden(): encoder, Z, R]
 *     -> gen_blocks(L/2, L, R) -> gen_finish(...)
 * gen_blocks(l0, l1, r) gives block l0 the key/value input X + r (the injection block; the
 * cache of that block therefore holds keys/values of X + R) and runs l0+1..l1-1 plainly.
 * gen_step = gen_begin + gen_blocks(0, L, NULL) + gen_finish.
 *
 * Status: 0, or a negative LLAMA_E* code (llama.h) with one line in err. */
#ifndef MODEL_GENERATE_H
#define MODEL_GENERATE_H
#include <stddef.h>
#include <stdint.h>

#include "model/llama.h"

typedef struct gen gen_t;

/* Cache for up to Bmax sequences (slots) of Tmax positions each (Tmax <= the model's
 * max_seq). Each slot has its own position: sequences may start, grow and be reset
 * independently (a serving batch). */
int gen_create(gen_t **g, llama_t *m, int Bmax, int Tmax, char *err, size_t errlen);
/* The same with chunk buffers for at most max_rows rows (B*T) per chunk instead of Bmax*Tmax:
 * a serving cache decodes Bmax rows at a time and prefills a prompt in chunks, so its work
 * buffers need not grow with the cache (gen_create's would take ~5 KB per cached position of a
 * small model, 25x the cache itself). */
int gen_create_rows(gen_t **g, llama_t *m, int Bmax, int Tmax, int max_rows, char *err,
                    size_t errlen);
void gen_destroy(gen_t **g);
/* Forgets every cached position (same capacity, same model). */
void gen_reset(gen_t *g);
/* Forgets one slot's positions (0, or LLAMA_EARG for a slot outside 0..Bmax-1). */
int gen_reset_slot(gen_t *g, int slot);
/* Positions cached so far in slot 0 (the position of the next chunk's first token there). */
int gen_pos(const gen_t *g);
/* The same for any slot (-1 outside 0..Bmax-1), and the number of slots. */
int gen_slot_pos(const gen_t *g, int slot);
int gen_slots(const gen_t *g);
int gen_capacity(const gen_t *g);
int gen_max_rows(const gen_t *g);
/* Device bytes of the key/value cache, and of everything the generator allocated. */
size_t gen_cache_bytes(const gen_t *g);
size_t gen_bytes(const gen_t *g);
const model_config_t *gen_config(const gen_t *g);

/* Starts a chunk: tokens (B,T) of sequences in slots 0..B-1, each continuing at its slot's
 * position; embeds them. Refuses ids outside the vocabulary and a full slot. */
int gen_begin(gen_t *g, const uint32_t *tokens, int B, int T, char *err, size_t errlen);
/* The same with the B sequences in the given distinct slots. A chunk of T = 1 (one new token
 * per sequence: a decode step) computes every row independently of the others (ops.h
 * linear_rows, attention_rows): a sequence decoded beside others gets the bits it gets
 * alone. A chunk of T > 1 (a prefill) runs the ordinary products. */
int gen_begin_slots(gen_t *g, const int *slots, const uint32_t *tokens, int B, int T, char *err,
                    size_t errlen);
/* Runs blocks l0..l1-1 on the chunk's residual stream, appending their keys/values to the
 * cache. r (B,T,D) or NULL: block l0 reads keys/values from stream + r. */
void gen_blocks(gen_t *g, int l0, int l1, const float *r);
/* The chunk's residual stream (B,T,D): after gen_blocks(.., l1, ..), the input of block l1. */
float *gen_hidden(gen_t *g);
/* Final norm and head. Logits of each sequence's last new position go to gen_logits();
 * all_logits (B,T,V), when non-NULL, receives every new position's. Advances gen_pos by T. */
int gen_finish(gen_t *g, float *all_logits, char *err, size_t errlen);
/* (B,V) logits of the last position of the last finished chunk, on the HOST (downloaded by
 * gen_finish when the device is not the host). */
const float *gen_logits(const gen_t *g);
device_t *gen_device(const gen_t *g);

/* 1 when a chunk of `rows` positions is below the work threshold and runs with the device's
 * parallel machinery off (decode steps of small models: parallel regions cost more than they
 * save, badly so on a loaded machine), else 0. The generator applies it itself; exposed for
 * the encoder call of the Free Transformer and for tests. */
int gen_threads(const gen_t *g, int rows);
/* The work threshold (multiply-adds per chunk) below which a chunk runs serially; tests set
 * 0 (every chunk parallel) or a huge value (every chunk serial). */
void gen_set_serial_macs(gen_t *g, double macs);
/* Chunks of at least `rows` rows run with the parallel machinery whatever their work (0: the
 * work threshold alone). A server on a machine it has to itself sets it: there a many-row
 * decode step gains from every core, while the serial rule above protects single sequences
 * and shared machines. The rows' bits do not depend on it (rows are independent of threads). */
void gen_set_parallel_rows(gen_t *g, int rows);

/* ---- a family's sublayer inside each block (the LTM's cross-attention, model/kv_ltm.c) ----
 * fn(ctx, g, l) runs in block l between the self-attention's residual and the MLP, on the
 * chunk's stream gen_hidden(g) (B*T rows of d_model, updated in place). It may read the chunk's
 * shape, each sequence's slot (host) and each row's position (device), and multiply through
 * the chunk's product (gen_linear: linear_rows for a decode chunk, so rows stay independent
 * of each other). fn NULL: none. */
typedef void (*gen_mid_fn)(void *ctx, gen_t *g, int l);
void gen_set_mid(gen_t *g, gen_mid_fn fn, void *ctx);
void gen_chunk(const gen_t *g, int *B, int *T);
const int *gen_chunk_slots(const gen_t *g);        /* (B) host: the slot of each sequence */
const int *gen_row_positions(const gen_t *g);      /* (B*T) device: each row's position */
void gen_linear(gen_t *g, float *y, const float *x, const float *w, int N, int in, int out);

/* begin + all blocks + finish. */
int gen_step(gen_t *g, const uint32_t *tokens, int B, int T, float *all_logits, char *err,
             size_t errlen);

/* ---- prefill of one sequence, the same cut whatever else runs ----
 * A prefill chunk (T > 1) runs the ordinary products, whose bits depend on the rows in the
 * chunk; so a prompt is prefilled alone (B = 1), in chunks cut at the multiples of
 * GEN_PREFILL_CHUNK positions: the chunks, hence the bits, are a function of the prompt alone.
 * A serving batch runs one such chunk between decode steps, so a long prompt never holds the
 * running sequences up for more than one chunk. The command-line sampler, the service and the
 * evaluator's generation tasks all prefill this way. */
#define GEN_PREFILL_CHUNK 64
/* Runs the next chunk of prompt (n ids) in slot, from the slot's position: positions
 * pos .. gen_prefill_cut(pos, n) - 1. Returns the positions still to run (0: the prompt is
 * complete and gen_logits() row 0 holds its last position's logits), or a negative code. */
int gen_prefill_next(gen_t *g, int slot, const uint32_t *prompt, int n, char *err, size_t errlen);
/* The end of the chunk that starts at pos in a prompt of n positions. */
int gen_prefill_cut(int pos, int n);

/* ---- the Free Transformer (model/kv_free.c) ----
 * A gen_t over free_decoder(m) plus the latent path. Each chunk's positions get a latent
 * index Z in [0, 2^H); R = W_post[:, Z] goes into the key/value input of block L/2, whose
 * cache therefore holds keys/values of X + R (both halves are cached).
 *   z given (B,T): the decoder runs with those indices (prior samples for new tokens:
 *     uniform in [0, 2^H), drawn by the caller, who decides what sequences share);
 *   z NULL: the prompt chunk. Only at position 0: the encoder reads the chunk (non-causally,
 *     the prompt only: free_encode), bits = u < sigmoid(bit logits) with the caller's
 *     uniforms u (B,T,H), Z = their index (the Binary Mapper's forward).
 * The free_t's own activations are used by the encoder, so it must have been created with
 * Bmax, Tmax covering the prompt chunk. */
typedef struct free_model free_t;
typedef struct gen_free gen_free_t;

int gen_free_create(gen_free_t **g, free_t *m, int Bmax, int Tmax, char *err, size_t errlen);
/* The same with chunk buffers for max_rows rows (gen_create_rows). The prompt is one chunk
 * (the encoder reads all of it), so max_rows must cover the longest prompt. */
int gen_free_create_rows(gen_free_t **g, free_t *m, int Bmax, int Tmax, int max_rows, char *err,
                         size_t errlen);
/* Device bytes of everything the generator allocated (the decoder's cache included). */
size_t gen_free_bytes(const gen_free_t *g);
void gen_free_destroy(gen_free_t **g);
void gen_free_reset(gen_free_t *g);
gen_t *gen_free_decoder(gen_free_t *g);   /* positions, config, logits */
int gen_free_step(gen_free_t *g, const uint32_t *tokens, int B, int T, const uint32_t *z,
                  const float *u, float *all_logits, char *err, size_t errlen);
/* The same with the B sequences in the given distinct slots (gen_begin_slots). */
int gen_free_step_slots(gen_free_t *g, const int *slots, const uint32_t *tokens, int B, int T,
                        const uint32_t *z, const float *u, float *all_logits, char *err,
                        size_t errlen);
/* (B,T) latent indices of the last chunk (those given, or the encoder's). */
const uint32_t *gen_free_z(const gen_free_t *g);
/* 2^H, the number of latent values. */
uint32_t gen_free_n_latent(const gen_free_t *g);
#endif
