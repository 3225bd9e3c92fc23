/* tokenizer/bpe_train.h: learning a byte-level BPE vocabulary from text.
 *
 * The text is pre-tokenized with the pattern and merges are counted only within pieces
 * (so no token spans a piece boundary); identical pieces are counted once with a weight.
 * The 256 single bytes are ids 0..255; merge k gets id 256+k; <|endoftext|> comes last, so
 * a vocabulary of size N has N-257 merges. Each step merges the most frequent adjacent pair,
 * ties going to the smaller (left id, right id), which makes training deterministic. Pair
 * counts are updated incrementally (only the words holding the merged pair are revisited)
 * and the best pair comes from a max-heap with lazy deletion. Training stops early when no
 * pair occurs twice. Pieces longer than BPE_TRAIN_MAX_PIECE bytes are counted as chunks of
 * that size (bounding token length and per-piece work; with no pattern a whole document is
 * one piece, and this is what makes it countable). */
#ifndef TOKENIZER_BPE_TRAIN_H
#define TOKENIZER_BPE_TRAIN_H
#include <stddef.h>
#include <stdint.h>

#include "tokenizer/bpe_vocab.h"

#define BPE_TRAIN_MAX_PIECE 256

typedef struct bpe_trainer bpe_trainer_t;

/* pattern: a name ("gpt2", "cl100k", "o200k", "none") or the text of one of those patterns
 * (pretok.h); "" means no pre-tokenization. Any other pattern is BPE_EREGEX. */
int bpe_trainer_new(bpe_trainer_t **t, const char *pattern, char *err, size_t errlen);
/* Pre-tokenizes text and counts its pieces. */
int bpe_trainer_add(bpe_trainer_t *t, const uint8_t *text, size_t len, char *err, size_t errlen);
/* Learns merges up to vocab_size tokens (>= 257, counting <|endoftext|>) and returns the
 * vocabulary (pattern and name "bpe" set). progress: draw a progress line on a terminal. */
int bpe_trainer_run(bpe_trainer_t *t, uint32_t vocab_size, int progress, bpe_vocab_t **out,
                    char *err, size_t errlen);
uint64_t bpe_trainer_n_pieces(const bpe_trainer_t *t); /* distinct pieces counted */
void bpe_trainer_free(bpe_trainer_t **t);
#endif
