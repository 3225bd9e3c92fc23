/* tokenizer/encode_files.h: text or JSONL files -> a tokenized dataset (tokenizer/dataset.h).
 *
 * Streams the inputs document by document through the BPE encoder into a dataset writer;
 * the meta records the vocabulary's size, <|endoftext|> id, name and canonical hash, and the
 * UTF-8 bytes of the documents (for bits per byte). */
#ifndef TOKENIZER_ENCODE_FILES_H
#define TOKENIZER_ENCODE_FILES_H
#include <stddef.h>
#include <stdint.h>

#include "tokenizer/docread.h"

typedef struct {
    const char *vocab;        /* spec for bpe_vocab_open: "bytes", "gpt2", a path, ... */
    docread_format_t format;
    int append_eot;           /* end every document with <|endoftext|> */
    int allow_special;        /* special-token text in documents becomes the special id */
    int overwrite;            /* replace an existing dataset */
    int progress;             /* draw the progress line (only shown on a terminal) */
} encode_files_opts_t;

typedef struct {
    uint64_t n_docs, n_tokens, n_bytes;
    uint64_t n_blank; /* blank lines skipped (not documents: see docread.h) */
    double seconds;
} encode_files_stats_t;

/* Returns 0 or a negative status (BPE_E* for vocabulary/input problems, DATASET_E* ones are
 * mapped to BPE_EIO); on failure the unfinished dataset is abandoned (no "info"). */
int encode_files(const char *out_dir, const char *const *inputs, int n_inputs,
                 const encode_files_opts_t *o, encode_files_stats_t *st, char *err, size_t errlen);
#endif
