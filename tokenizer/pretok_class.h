/* tokenizer/pretok_class.h: the character view the pre-tokenizer's matchers work on: strict
 * UTF-8 decoding and the class of the character at a byte position (ucd.h bits, or "end").
 * Internal to pretok*.c.
 *
 * "End" is both the end of the text and an invalid UTF-8 byte: a match never includes an
 * invalid byte and a lookahead sees one as the end of the text (the rule PCRE2 applies under
 * PCRE2_MATCH_INVALID_UTF, which this pre-tokenizer replaced); the iterator hands out each run
 * of invalid bytes as a piece of its own. */
#ifndef TOKENIZER_PRETOK_CLASS_H
#define TOKENIZER_PRETOK_CLASS_H
#include <stddef.h>
#include <stdint.h>

#include "tokenizer/ucd.h"

enum { PT_END = 0x100 }; /* end of text, or an invalid byte */
/* [^\s\p{L}\p{N}] is a valid character with none of these bits (marks included) */
#define PT_NOT_OTHER (UCD_WS | UCD_L | UCD_N | PT_END)

/* Length (1..4) of the well-formed UTF-8 sequence at s (n bytes available) and its code
 * point, or 0 when the bytes there are not one (overlong, surrogate, > U+10FFFF, truncated). */
static inline size_t pt_utf8_decode(const uint8_t *s, size_t n, uint32_t *cp) {
    uint8_t b = s[0];
    if (b < 0x80) {
        *cp = b;
        return 1;
    }
    if (b >= 0xc2 && b <= 0xdf) {
        if (n < 2 || (s[1] & 0xc0) != 0x80) return 0;
        *cp = (uint32_t)(b & 0x1f) << 6 | (s[1] & 0x3f);
        return 2;
    }
    uint8_t lo = 0x80, hi = 0xbf; /* allowed range of the second byte */
    if (b >= 0xe0 && b <= 0xef) {
        if (b == 0xe0) lo = 0xa0;      /* overlong */
        else if (b == 0xed) hi = 0x9f; /* surrogates */
        if (n < 3 || s[1] < lo || s[1] > hi || (s[2] & 0xc0) != 0x80) return 0;
        *cp = (uint32_t)(b & 0x0f) << 12 | (uint32_t)(s[1] & 0x3f) << 6 | (s[2] & 0x3f);
        return 3;
    }
    if (b >= 0xf0 && b <= 0xf4) {
        if (b == 0xf0) lo = 0x90;      /* overlong */
        else if (b == 0xf4) hi = 0x8f; /* beyond U+10FFFF */
        if (n < 4 || s[1] < lo || s[1] > hi || (s[2] & 0xc0) != 0x80 || (s[3] & 0xc0) != 0x80) return 0;
        *cp = (uint32_t)(b & 0x07) << 18 | (uint32_t)(s[1] & 0x3f) << 12 | (uint32_t)(s[2] & 0x3f) << 6 |
              (s[3] & 0x3f);
        return 4;
    }
    return 0;
}

/* Class of the character at byte i of t[0..len); *next receives the position after it
 * (untouched when the class is PT_END). */
#define PT_INLINE static inline __attribute__((always_inline))

PT_INLINE unsigned pt_class_at(const uint8_t *t, size_t len, size_t i, size_t *next) {
    if (i >= len) return PT_END;
    uint8_t b = t[i];
    if (b < 0x80) {
        *next = i + 1;
        return ucd_ascii[b];
    }
    uint32_t cp;
    size_t n = pt_utf8_decode(t + i, len - i, &cp);
    if (!n) return PT_END;
    *next = i + n;
    return ucd_class(cp);
}

/* End of the run of characters from i whose class has a bit of mask. ASCII, most of most
 * text, is stepped through by bytes; any other character goes through the decoder. */
PT_INLINE size_t pt_run_in(const uint8_t *t, size_t len, size_t i, unsigned mask) {
    for (size_t n;; i = n) {
        while (i < len && t[i] < 0x80 && (ucd_ascii[t[i]] & mask)) i++;
        if (i >= len || t[i] < 0x80 || !(pt_class_at(t, len, i, &n) & mask)) return i;
    }
}

/* End of the run of characters from i whose class has no bit of mask (PT_END belongs in mask). */
PT_INLINE size_t pt_run_out(const uint8_t *t, size_t len, size_t i, unsigned mask) {
    for (size_t n;; i = n) {
        while (i < len && t[i] < 0x80 && !(ucd_ascii[t[i]] & mask)) i++;
        if (i >= len || t[i] < 0x80 || (pt_class_at(t, len, i, &n) & mask)) return i;
    }
}
#endif
