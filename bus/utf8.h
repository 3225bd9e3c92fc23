/* bus/utf8.h: UTF-8 checks for the wire (docs/PROTOCOL.md §2.1: every str is UTF-8).
 *
 * MessagePack's str type is UTF-8 by definition, and the clients the protocol documents
 * (Python's msgpack with raw=False) raise on anything else. So the codec refuses other bytes
 * in both directions, and text that may hold arbitrary bytes (an error message quoting a
 * request, a path, generated text) goes through wire_utf8_clean before it is sent. */
#ifndef BUS_UTF8_H
#define BUS_UTF8_H
#include <stddef.h>

/* Length of the well-formed UTF-8 sequence at s (n > 0 bytes available): 1..4, or 0 when the
 * bytes there are not one (stray continuation byte, overlong form, surrogate, > U+10FFFF,
 * truncated sequence). A NUL byte is a sequence of length 1. */
size_t wire_utf8_len(const unsigned char *s, size_t n);
/* 1 when s[0..n) is well-formed UTF-8 throughout, else 0. */
int wire_utf8_valid(const char *s, size_t n);
/* Writes src[0..n) into out (cap > 0 bytes, NUL included) as well-formed UTF-8 without NUL:
 * every byte that does not start a well-formed sequence, and every NUL, becomes U+FFFD.
 * Output that does not fit is cut at a character boundary. Returns the bytes written, the
 * terminating NUL not counted. cap >= 3*n+1 never cuts. */
size_t wire_utf8_clean(char *out, size_t cap, const char *src, size_t n);
#endif
