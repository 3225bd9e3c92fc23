/* tokenizer/bpe.h: byte-level BPE encoding and decoding, identical to tiktoken's.
 *
 * Encoding: the pre-tokenizer splits the text into pieces (pretok.h); a piece that is itself a
 * token becomes that token; otherwise its bytes are merged by repeatedly joining the adjacent
 * pair whose concatenation has the lowest rank (leftmost on ties) until no pair is a token.
 * Short pieces use tiktoken's quadratic scan (fastest for the typical 2-10 bytes); long ones
 * a heap with lazy deletion, O(n log n), which makes the same choices in the same order. A
 * small direct-mapped cache remembers recent merged pieces.
 *
 * A bpe_t borrows its vocabulary (keep it alive) and is not thread-safe: one per thread. */
#ifndef TOKENIZER_BPE_H
#define TOKENIZER_BPE_H
#include <stddef.h>
#include <stdint.h>

#include "tokenizer/bpe_vocab.h"

typedef struct { uint32_t *v; size_t n, cap; } bpe_ids_t;
typedef struct { uint8_t *v; size_t n, cap; } bpe_bytes_t;

typedef struct bpe bpe_t;

enum {
    BPE_ALLOW_SPECIAL = 1, /* text equal to a special token becomes that token (tiktoken's
                            * allowed_special="all"); otherwise it is ordinary text */
};

int bpe_new(bpe_t **b, const bpe_vocab_t *v, char *err, size_t errlen);
void bpe_free(bpe_t **b);
const bpe_vocab_t *bpe_vocab(const bpe_t *b);

/* Appends the ids of text[0..len) to out. Returns 0, BPE_ENOMEM, or BPE_EREGEX. */
int bpe_encode(bpe_t *b, const uint8_t *text, size_t len, int flags, bpe_ids_t *out);
/* Appends the ids of one piece (no pre-tokenization). */
int bpe_encode_piece(bpe_t *b, const uint8_t *piece, size_t n, bpe_ids_t *out);
/* Appends the bytes of ids to out; an id with no token is BPE_EARG (*bad_index receives its
 * position when bad_index is non-NULL). */
int bpe_decode(const bpe_vocab_t *v, const uint32_t *ids, size_t n, bpe_bytes_t *out, size_t *bad_index);

/* Pieces of at least this many bytes take the heap path; exposed so tests can force either
 * path on the same input and compare. */
extern size_t bpe_heap_threshold;

int bpe_ids_push(bpe_ids_t *a, uint32_t id);
void bpe_ids_free(bpe_ids_t *a);
int bpe_bytes_append(bpe_bytes_t *a, const void *p, size_t n);
void bpe_bytes_free(bpe_bytes_t *a);
#endif
