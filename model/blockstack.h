/* model/blockstack.h: a stack of L blocks of one kind, masked-mixer blocks (mixer_block.h) or
 * Llama blocks (llama_block.h), over one residual stream: what the masked-mixer families
 * (model/mixers.h) build their encoders and decoders from, so a mixer model and its
 * transformer twin are the same code with another block kind.
 *
 * The stack keeps every block's input and output, stream(0) .. stream(L), (Bmax*Tmax, D)
 * each; the caller writes stream(0) and reads stream(L). causal: masked mixing, or causal
 * attention. Buffers the stacks of one model share (the blocks' backward scratch, the RoPE
 * tables, two stream-gradient buffers) are a blockstack_shared_t. */
#ifndef MODEL_BLOCKSTACK_H
#define MODEL_BLOCKSTACK_H
#include <stddef.h>

#include "model/config.h"
#include "model/device.h"
#include "model/llama_block.h"
#include "model/mixer_block.h"
#include "model/ptable.h"

typedef enum { BLOCKS_MIXER = 0, BLOCKS_LLAMA = 1 } blocks_kind;

typedef struct {
    mixer_block_scratch_t ms;     /* mixer blocks' scratch (when any stack has mixer blocks) */
    llama_block_scratch_t ls;     /* Llama blocks' scratch (when any has Llama blocks) */
    float *rope_cos, *rope_sin;   /* (max_seq, hd/2) for Llama blocks */
    float *dA, *dB;               /* (N,D): the stream's gradient, two buffers swapped per block */
} blockstack_shared_t;

typedef struct {
    blocks_kind kind;
    int L, causal;
    const model_config_t *cfg;    /* the model's, borrowed */
    size_t N;                     /* rows allocated: Bmax * Tmax */
    mixer_block_w_t *mw, *mg;     /* (L) host arrays of device pointers, mixer blocks */
    llama_block_w_t *lw, *lg;     /* (L), Llama blocks */
    mixer_block_acts_t *ma;       /* (L) */
    llama_block_acts_t *la;       /* (L) */
    float *stream;                /* (L+1, N, D) */
} blockstack_t;

/* Host arrays for L blocks; 0 or -1 (out of memory). */
int blockstack_init(blockstack_t *s, blocks_kind kind, int L, int causal, const model_config_t *c);
void blockstack_free(blockstack_t *s);
/* Takes the blocks' tensors from p, named prefix + "<l>." + the block's suffixes; grads 0
 * fills the weight pointers, 1 the gradient pointers (the same layout in another buffer). */
void blockstack_layout(blockstack_t *s, const char *prefix, ptable_t *p, int grads);
/* Activations for (Bmax, Tmax) rows: the streams and every block's saved tensors. */
void blockstack_acts_layout(blockstack_t *s, dev_arena_t *ar, int Bmax, int Tmax);
/* The shared buffers for (Bmax, Tmax), for stacks of kinds `mixer` and/or `llama` present. */
void blockstack_shared_layout(blockstack_shared_t *sh, dev_arena_t *ar, const model_config_t *c,
                              int Bmax, int Tmax, int mixer, int llama);
/* Fills the RoPE tables (host staging; 0 or -1 out of memory). */
int blockstack_shared_init(blockstack_shared_t *sh, device_t *d, const model_config_t *c);

float *blockstack_stream(const blockstack_t *s, int l);   /* (B,T,D) input of block l, l <= L */
/* stream(0) -> stream(L) for (B, T) rows. */
void blockstack_forward(blockstack_t *s, blockstack_shared_t *sh, device_t *d, int B, int T);
/* On entry sh->dA holds d loss / d stream(L); on exit d loss / d stream(0) (dA and dB are
 * swapped as needed). The blocks' weight gradients accumulate. */
void blockstack_backward(blockstack_t *s, blockstack_shared_t *sh, device_t *d, int B, int T);
#endif
