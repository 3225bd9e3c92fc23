/* loader/batch.h: the batch function, a pure function of
 *   (dataset, seed, epoch, step, rank, world, B, T, layout, split)
 * so any loader process (or a test) computes the same batch for the same request, and a
 * trainer can fetch batch (epoch, step) from whichever loader is alive.
 *
 * Split rule: with one dataset directory and val_docs = N, "val" is the LAST N documents of
 * the dataset and "train" the others (N = 0: no val split). With a separate val directory,
 * "train" is every document of the first and "val" every document of the second (the two must
 * share the vocabulary: vocab_size, eot_id and tokenizer_hash).
 *
 * Per epoch the split's documents are shuffled by Fisher-Yates with rng_seed2(seed, epoch)
 * (i from n-1 down to 1, j = rng_below(i+1), swap perm[i] and perm[j]).
 *   pack: the documents in permuted order, each followed by eot, form one stream; it is cut
 *         into rows of T+1 consecutive tokens; rows_per_epoch = floor(stream_len / (T+1)).
 *         Batch (epoch, step) for (rank, world) is rows [(step*world + rank)*B, +B);
 *         steps_per_epoch = floor(rows_per_epoch / (B*world)); the tail is dropped.
 *   pad:  row b is document perm[(step*world + rank)*B + b], its first T+1 tokens, padded
 *         with eot; mask[b][t] = 1 iff position t+1 holds a document token or the eot right
 *         after the document (t+1 <= len); steps_per_epoch = floor(n_docs / (B*world)).
 * Every token is checked against vocab_size (a damaged dataset gives LOADER_EDATA). */
#ifndef LOADER_BATCH_H
#define LOADER_BATCH_H
#include <stddef.h>
#include <stdint.h>

#include "tokenizer/dataset.h"

/* Status codes. The loader sends the same value as "code" in an error reply. */
enum {
    LOADER_OK = 0,
    LOADER_EMALFORMED = -1, /* request frame could not be decoded */
    LOADER_ETYPE = -2,      /* a message type the loader does not serve */
    LOADER_EPARAM = -3,     /* B, T, rank/world, layout or split invalid (or too big) */
    LOADER_ERANGE = -4,     /* step >= steps_per_epoch, or epoch beyond LOADER_MAX_EPOCH */
    LOADER_EEMPTY = -5,     /* the split has no batch at all for this (world, B, T) */
    LOADER_EDATA = -6,      /* the dataset is damaged (token id >= vocab_size, bad value) */
    LOADER_ENOMEM = -7,
    LOADER_EIO = -8,        /* opening the dataset, sockets */
};

#define LOADER_MAX_T (1u << 20)
#define LOADER_MAX_B (1u << 16)
#define LOADER_MAX_BATCH_TOKENS (16u << 20) /* B*(T+1): 64 MiB of u32, well under a frame */
#define LOADER_MAX_EPOCH (1ull << 32)
#define LOADER_EPOCH_CACHE 4                /* (seed, epoch, split) permutations kept */

typedef struct {
    uint64_t seed, epoch, step;
    uint32_t rank, world, B, T;
    uint8_t layout; /* WIRE_PACK or WIRE_PAD (bus/wire.h) */
    uint8_t split;  /* WIRE_TRAIN or WIRE_VAL */
} loader_params_t;

typedef struct {
    uint64_t n_docs, n_tokens, n_bytes; /* n_bytes pro-rated by tokens when the split is a
                                           part of one dataset (documents carry no byte count) */
} loader_split_info_t;

typedef struct loader_src loader_src_t;

/* Opens the dataset(s) and reads every document length once (O(n_docs)).
 * val_path may be NULL; val_docs is used only then. One handle per thread. A failure's err
 * starts "dataset PATH: " (callers need not name the path again); err stays as it was for
 * LOADER_ENOMEM and a NULL argument. */
int loader_src_open(loader_src_t **s, const char *path, const char *val_path, uint64_t val_docs, char *err,
                    size_t errlen);
void loader_src_close(loader_src_t **s);
const dataset_meta_t *loader_src_meta(const loader_src_t *s);
/* 1 when a data.mdb was truncated under s by another process (tokenizer/dataset.h,
 * dataset_shrunk): the read that found it failed with LOADER_EDATA and one line, and s can
 * serve nothing more. */
int loader_src_shrunk(const loader_src_t *s);
int loader_src_split_info(const loader_src_t *s, int split, loader_split_info_t *out);

/* Validates p (everything but step) and gives steps_per_epoch; 0 with LOADER_EEMPTY when the
 * split holds no full batch. */
int loader_steps_per_epoch(const loader_src_t *s, const loader_params_t *p, uint64_t *steps, char *err,
                           size_t errlen);

/* Fills tokens (B*(T+1), row-major) and, for pad, mask (B*T; may be NULL for pack, where every
 * target counts: it is then left untouched). */
int loader_batch_make(loader_src_t *s, const loader_params_t *p, uint32_t *tokens, uint8_t *mask,
                      uint64_t *steps_per_epoch, char *err, size_t errlen);
const char *loader_strerror(int status);
#endif
