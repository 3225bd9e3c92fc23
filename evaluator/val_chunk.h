/* evaluator/val_chunk.h: task val's part for the autoencoders and memory models (seed 004):
 * the stored embedding charged at the bits the decoder reads, and the controls that say
 * whether the embedding of a row carries that row's tokens (definitions at the top of
 * val_chunk.c and in docs/evaluator.md). For task_val.c only. */
#ifndef EVALUATOR_VAL_CHUNK_H
#define EVALUATOR_VAL_CHUNK_H
#include <stdint.h>

#include "evaluator/lm.h"
#include "evaluator/task.h"
#include "loader/batch.h"

#define VAL_CHUNK_MAX_BITS 6   /* entries of --bits-list */

typedef struct val_chunk val_chunk_t;

/* bits_list: "4,8,16,32"-style (NULL: that); bits_per_param: the headline b_p (4, 8, 16 or 32;
 * 0: 8 for a bounded embedding, 32 for an unbounded one). 0 or EVAL_E* with one line. */
int val_chunk_open(val_chunk_t **c, const char *bits_list, int bits_per_param, char *err, size_t errlen);
void val_chunk_close(val_chunk_t **c);
/* Starts an evaluation of lm on batches of (B, T): resolves the headline bits (refusing a
 * b < 32 for an unbounded embedding), and on the first call counts the unigram of the train
 * split (src, p's seed; split val only: with no train split there is no unigram control). */
int val_chunk_begin(val_chunk_t *c, eval_lm_t *lm, loader_src_t *src, const loader_params_t *p, int B,
                    int T, char *err, size_t errlen);
/* One batch: rows (B, T+1) as the loader makes them (the chunk is each row's first T tokens),
 * other (B, T+1) another batch whose rows give the shuffled control's embeddings (NULL: none;
 * see val_chunk.c for which rows). */
int val_chunk_batch(val_chunk_t *c, eval_lm_t *lm, const uint32_t *rows, const uint32_t *other, int B,
                    int T, char *err, size_t errlen);
/* The values (ce, bpb_decoder, bpb_embedding, bpb, ce_total, ce_b<b>, bpb_b<b>, the controls
 * and their paired gains) into out; tokens_per_byte = L_t / L_b of the split. */
void val_chunk_values(const val_chunk_t *c, const eval_lm_t *lm, int T, double tokens_per_byte,
                      eval_values_t *out);
#endif
