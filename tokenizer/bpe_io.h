/* tokenizer/bpe_io.h: reading and writing vocabularies (layouts in docs/FORMATS.md §2).
 *
 *   tiktoken's npm JSON (encoders/<name>.json): {"pat_str", "special_tokens", "bpe_ranks"},
 *     bpe_ranks = lines "! <first-rank> <base64 token> <base64 token> ..." (ranks consecutive
 *     from first-rank within a line).
 *   ours (".ftbpe"): a header line "ftbpe 1 {json}" then one "<base64 token> <id>" per line.
 *   "bytes": the 256 byte tokens (id = byte) and <|endoftext|> = 256, no pattern. */
#ifndef TOKENIZER_BPE_IO_H
#define TOKENIZER_BPE_IO_H
#include "tokenizer/bpe_vocab.h"

#define BPE_FILE_MAGIC "ftbpe"
#define BPE_FILE_VERSION 1

int bpe_vocab_load_tiktoken_json(bpe_vocab_t **v, const char *path, char *err, size_t errlen);
int bpe_vocab_load_file(bpe_vocab_t **v, const char *path, char *err, size_t errlen);
/* Writes our format atomically (temporary file in the same directory, fsync, rename). */
int bpe_vocab_save_file(const bpe_vocab_t *v, const char *path, char *err, size_t errlen);
int bpe_vocab_make_bytes(bpe_vocab_t **v, char *err, size_t errlen);
/* Opens a vocabulary by spec: "bytes"; a tiktoken encoding name ("gpt2", "cl100k_base", ...)
 * looked up as <name>.json in $FT_TIKTOKEN_DIR, then beside the running program
 * (PREFIX/share/freetf/tiktoken for PREFIX/bin/<program>, as `make install` puts them, and a
 * checkout's data/tiktoken/encoders for its bin/<program>), then data/tiktoken/encoders of the
 * working directory; otherwise a path to either file kind (told apart by the first byte).
 * Checks bpe_vocab_check. */
int bpe_vocab_open(bpe_vocab_t **v, const char *spec, char *err, size_t errlen);
#endif
