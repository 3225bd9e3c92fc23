/* sampler/text.h: between text and ids for bin/sampler: the vocabulary, the prompt, the
 * printed forms of a sample. */
#ifndef SAMPLER_TEXT_H
#define SAMPLER_TEXT_H
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "tokenizer/bpe_vocab.h"

/* Encodes text (len bytes) with vocabulary v into *ids (malloc'd, *n of them); eot_prefix
 * puts id eot first (the document boundary a packed training row shows before a document).
 * Returns 0 or -1 with a line in err. */
int sampler_text_encode(const bpe_vocab_t *v, const char *text, size_t len, int eot_prefix,
                        uint32_t eot, uint32_t **ids, int *n, char *err, size_t errlen);
/* Decodes ids into a NUL-terminated malloc'd string (*len bytes before the NUL); ids without
 * a token decode to nothing. NULL when out of memory. */
char *sampler_text_decode(const bpe_vocab_t *v, const uint32_t *ids, int n, size_t *len);
/* One line for a sample: bytes as they are except '\\' -> "\\\\", '\n' -> "\\n", '\r' -> "\\r",
 * so a sample never spans lines. */
void sampler_text_print_line(FILE *f, const char *s, size_t len);
/* A copy of s that is valid UTF-8: every byte that does not start a valid sequence becomes
 * U+FFFD (JSON strings must be UTF-8; a sample may end inside a multi-byte character). */
char *sampler_text_utf8(const char *s, size_t len);
/* Reads all of f (at most max bytes); strips one trailing "\n". NULL with a line in err. */
char *sampler_text_read_all(FILE *f, size_t max, size_t *len, char *err, size_t errlen);
#endif
