/* tokenizer/dataset.h: the tokenized dataset on disk, an LMDB environment (docs/FORMATS.md).
 *
 * A dataset is a directory holding an LMDB environment with two named databases:
 *   "meta": key "info" -> one MessagePack map (see dataset_meta_t and FORMATS.md)
 *   "docs": key = document index as 8-byte big-endian uint64 (so keys sort in order),
 *           value = the document's token ids, little-endian, uint16 when the vocabulary
 *           fits (vocab_size <= 65536) else uint32 ("token_bytes" in the meta).
 * Documents are stored in input order; shuffling is the loader's job. The writer commits
 * every few MB so memory stays bounded, and writes "info" last: a dataset without "info"
 * is incomplete and dataset_open refuses it.
 *
 * Every call returns 0 or a negative DATASET_E* status; err (when non-NULL) receives one line
 * saying what was wrong and where. */
#ifndef TOKENIZER_DATASET_H
#define TOKENIZER_DATASET_H
#include <stddef.h>
#include <stdint.h>

#define DATASET_FORMAT_VERSION 1

enum {
    DATASET_OK = 0,
    DATASET_ENOENT = -1,    /* no dataset at that path */
    DATASET_EFORMAT = -2,   /* not a dataset of ours, wrong version, missing/garbled meta */
    DATASET_ERANGE = -3,    /* document index out of range, or buffer too small */
    DATASET_ELMDB = -4,     /* LMDB reported an error (message in err) */
    DATASET_ENOMEM = -5,
    DATASET_EARG = -6,
};

typedef struct {
    uint32_t version;          /* DATASET_FORMAT_VERSION */
    uint32_t vocab_size;
    uint32_t eot_id;           /* end-of-text token joining documents when packing */
    uint32_t token_bytes;      /* 2 or 4 */
    uint64_t n_docs, n_tokens; /* totals over all documents */
    uint64_t n_bytes;          /* UTF-8 bytes of the source text (for bits per byte) */
    /* The three strings are UTF-8 (they travel in the loader's info reply, a MessagePack str,
     * and in JSON): dataset_open refuses other bytes, the writer refuses them in tokenizer and
     * tokenizer_hash and replaces them with U+FFFD in source (a file name may hold any byte). */
    char tokenizer[64];        /* "bytes", "bpe", "gpt2", "cl100k_base", ... */
    char tokenizer_hash[72];   /* hex digest of the vocabulary (merges/ranks + specials) */
    char source[256];          /* free text: where the documents came from */
} dataset_meta_t;

typedef struct dataset dataset_t;
typedef struct dataset_writer dataset_writer_t;

/* Opens read-only. Safe to share between processes; one handle per thread. */
int dataset_open(dataset_t **ds, const char *path, char *err, size_t errlen);
const dataset_meta_t *dataset_meta(const dataset_t *ds);
/* Length in tokens of document idx (reads only the LMDB node header). */
int dataset_doc_len(dataset_t *ds, uint64_t idx, uint32_t *len);
/* Copies document idx into out (cap tokens). *len receives its full length; when it exceeds
 * cap, the first cap tokens are copied and DATASET_ERANGE is NOT returned (truncation is the
 * caller's choice: pass cap >= len to get it all). */
int dataset_doc_read(dataset_t *ds, uint64_t idx, uint32_t *out, uint32_t cap, uint32_t *len);
/* Copies tokens [from, from+n) of document idx into out, clipped to the document's end;
 * *got receives how many were copied (0 when from >= length), *len (may be NULL) the full
 * length. Lets a reader take a row out of the middle of a long document without reading its
 * head (added for the loader's pack layout). */
int dataset_doc_read_range(dataset_t *ds, uint64_t idx, uint32_t from, uint32_t *out, uint32_t n,
                           uint32_t *got, uint32_t *len);
/* What the last failed document read on ds found, for status (what it returned): for
 * DATASET_EFORMAT/ELMDB the particular damage ("3 bytes, not a whole number of 2-byte
 * tokens ..."), else dataset_strerror(status). Valid until the next call on ds. */
const char *dataset_doc_error(const dataset_t *ds, int status);
/* 1 when data.mdb was truncated under the open handle (another process cut it): a document
 * read that touched a page past the new end failed with DATASET_EFORMAT and "... shrank under
 * the reader ..." instead of the SIGBUS it would be (the reads run under a SIGBUS guard), and
 * every later read fails the same way without touching the file. The handle is of no further
 * use: close it (a reader serving others should stop and say so). */
int dataset_shrunk(const dataset_t *ds);
void dataset_close(dataset_t **ds);

/* Creates a new dataset at path (a directory; refuses to overwrite an existing dataset unless
 * overwrite is set). meta supplies vocab_size, eot_id, tokenizer, tokenizer_hash, source;
 * the writer fills the counts. */
int dataset_writer_open(dataset_writer_t **w, const char *path, const dataset_meta_t *meta,
                        int overwrite, char *err, size_t errlen);
/* Appends one document of n tokens that came from n_bytes bytes of UTF-8 text. */
int dataset_writer_add(dataset_writer_t *w, const uint32_t *tokens, uint32_t n, uint64_t n_bytes,
                       char *err, size_t errlen);
/* Writes "info" and commits; on success *w is freed and set to NULL. */
int dataset_writer_close(dataset_writer_t **w, char *err, size_t errlen);
/* Abandons an unfinished dataset (no "info" is written). */
void dataset_writer_abort(dataset_writer_t **w);
const char *dataset_strerror(int status);
#endif
