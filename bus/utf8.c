/* bus/utf8.c: see utf8.h. */
#include "bus/utf8.h"

#include <string.h>

size_t wire_utf8_len(const unsigned char *s, size_t n) {
    unsigned c = s[0], min, cp;
    size_t k;
    if (c < 0x80) return 1;
    if (c >= 0xc2 && c <= 0xdf) k = 2, min = 0x80;
    else if (c >= 0xe0 && c <= 0xef) k = 3, min = 0x800;
    else if (c >= 0xf0 && c <= 0xf4) k = 4, min = 0x10000;
    else return 0;
    if (k > n) return 0;
    cp = c & (0xffu >> (k + 1));
    for (size_t i = 1; i < k; i++) {
        if ((s[i] & 0xc0) != 0x80) return 0;
        cp = cp << 6 | (s[i] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
    return k;
}

int wire_utf8_valid(const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        size_t k = wire_utf8_len(u + i, n - i);
        if (!k) return 0;
        i += k;
    }
    return 1;
}

size_t wire_utf8_clean(char *out, size_t cap, const char *src, size_t n) {
    static const char replacement[] = "\xef\xbf\xbd"; /* U+FFFD */
    const unsigned char *u = (const unsigned char *)src;
    size_t w = 0;
    if (!cap) return 0;
    for (size_t i = 0; i < n;) {
        size_t k = wire_utf8_len(u + i, n - i);
        const char *piece = src + i;
        size_t len = k;
        if (!k || !u[i]) piece = replacement, len = 3;
        if (len > cap - 1 - w) break;
        memcpy(out + w, piece, len);
        w += len;
        i += k ? k : 1;
    }
    out[w] = 0;
    return w;
}
