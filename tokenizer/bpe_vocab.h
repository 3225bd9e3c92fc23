/* tokenizer/bpe_vocab.h: a byte-level BPE vocabulary: byte strings with ranks, special tokens,
 * the pre-tokenizer pattern that goes with them, and the canonical hash that names the whole.
 *
 * As in tiktoken, a token's rank IS its id, and merging picks the lowest rank: the vocabulary
 * alone (no separate merge list) defines the encoding. Ids may have gaps (p50k_base has some);
 * bpe_vocab_size() is the largest id + 1, what a model's embedding table needs.
 *
 * Every call that can fail returns 0 or a negative BPE_E* status and, when err is non-NULL,
 * writes one line saying why. Once built, a vocabulary is only read: threads may share it.
 *
 * To turn ids back into text elsewhere (sampler, evaluator): bpe_vocab_open(&v, spec, ...),
 * then bpe_decode (bpe.h); compare bpe_vocab_hash with the dataset's tokenizer_hash first. */
#ifndef TOKENIZER_BPE_VOCAB_H
#define TOKENIZER_BPE_VOCAB_H
#include <stddef.h>
#include <stdint.h>

enum {
    BPE_OK = 0,
    BPE_ENOENT = -1,  /* file not found */
    BPE_EFORMAT = -2, /* malformed vocabulary file or duplicate token/id */
    BPE_ENOMEM = -3,
    BPE_EARG = -4,    /* bad argument (unknown name, empty input, ...) */
    BPE_EIO = -5,     /* read/write failure */
    BPE_EREGEX = -6,  /* the pattern does not compile, or matching failed */
};

#define BPE_NO_RANK UINT32_MAX
#define BPE_EOT_TEXT "<|endoftext|>"

typedef struct bpe_vocab bpe_vocab_t;

int bpe_vocab_new(bpe_vocab_t **v, char *err, size_t errlen);
void bpe_vocab_free(bpe_vocab_t **v);

/* Adds an ordinary token (len >= 1 bytes) with rank/id `id`. A byte string or id already
 * present is BPE_EFORMAT. The bytes are copied. */
int bpe_vocab_add(bpe_vocab_t *v, const uint8_t *bytes, uint32_t len, uint32_t id, char *err,
                  size_t errlen);
/* Adds a special token (matched as literal text, never merged). */
int bpe_vocab_add_special(bpe_vocab_t *v, const char *text, uint32_t id, char *err, size_t errlen);
/* Copies the pattern / name (NULL or "" pattern: no pre-tokenization, a document is one piece). */
int bpe_vocab_set_pattern(bpe_vocab_t *v, const char *pattern);
int bpe_vocab_set_name(bpe_vocab_t *v, const char *name);
const char *bpe_vocab_pattern(const bpe_vocab_t *v); /* never NULL ("" when none) */
const char *bpe_vocab_name(const bpe_vocab_t *v);    /* never NULL */

/* Rank of an ordinary token's bytes, or BPE_NO_RANK. Hot path of the encoder. */
uint32_t bpe_vocab_rank(const bpe_vocab_t *v, const uint8_t *bytes, size_t len);
/* Bytes of token id (ordinary or special); NULL when no token has that id. Valid until the
 * vocabulary changes. */
const uint8_t *bpe_vocab_token(const bpe_vocab_t *v, uint32_t id, uint32_t *len);
int bpe_vocab_is_special(const bpe_vocab_t *v, uint32_t id);
uint32_t bpe_vocab_size(const bpe_vocab_t *v);      /* largest id + 1 */
uint32_t bpe_vocab_n_ordinary(const bpe_vocab_t *v);
int bpe_vocab_n_special(const bpe_vocab_t *v);
/* i-th special token in id order (0 <= i < n_special); *id receives its id. */
const char *bpe_vocab_special(const bpe_vocab_t *v, int i, uint32_t *id);
uint32_t bpe_vocab_special_id(const bpe_vocab_t *v, const char *text); /* BPE_NO_RANK if none */
/* 1 when ranks 0..255 are exactly the 256 single bytes in byte order and nothing else is
 * ordinary: encoding is then the identity on bytes (the "bytes" vocabulary). */
int bpe_vocab_is_identity(const bpe_vocab_t *v);

/* Checks the vocabulary can encode any byte string: every single byte must be a token. */
int bpe_vocab_check(const bpe_vocab_t *v, char *err, size_t errlen);

/* Hex XXH3-128 (32 chars + NUL) of the canonical bytes (docs/FORMATS.md §2): the
 * pattern, every ordinary token and every special token with their ids. Two vocabularies
 * with equal hashes encode every text identically. */
void bpe_vocab_hash(const bpe_vocab_t *v, char out[33]);
const char *bpe_strerror(int status);
#endif
