/* tokenizer/b64.h: standard base64 (RFC 4648, "+/" alphabet, '=' padding) for vocabulary files. */
#ifndef TOKENIZER_B64_H
#define TOKENIZER_B64_H
#include <stddef.h>
#include <stdint.h>

/* Decodes n characters of src into out (room for at least 3*n/4 bytes). Padding is optional.
 * Returns the decoded length, or -1 when src holds a character outside the alphabet or a
 * length that no encoding produces. */
long b64_decode(const char *src, size_t n, uint8_t *out);
/* Encodes n bytes into out (room for 4*((n+2)/3)+1 chars, NUL-terminated); returns the length. */
size_t b64_encode(const uint8_t *src, size_t n, char *out);
#endif
