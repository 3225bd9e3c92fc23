/* tokenizer/b64.c: see b64.h. */
#include "tokenizer/b64.h"

static const char B64_ALPHABET[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static int b64_value(unsigned char c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

long b64_decode(const char *src, size_t n, uint8_t *out) {
    while (n > 0 && src[n - 1] == '=') n--;
    if (n % 4 == 1) return -1; /* one leftover sextet carries no whole byte */
    long o = 0;
    uint32_t acc = 0;
    int bits = 0;
    for (size_t i = 0; i < n; i++) {
        int v = b64_value((unsigned char)src[i]);
        if (v < 0) return -1;
        acc = (acc << 6) | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[o++] = (uint8_t)(acc >> bits);
            acc &= (1u << bits) - 1;
        }
    }
    return o;
}

size_t b64_encode(const uint8_t *src, size_t n, char *out) {
    size_t o = 0, i = 0;
    for (; i + 3 <= n; i += 3) {
        uint32_t v = (uint32_t)src[i] << 16 | (uint32_t)src[i + 1] << 8 | src[i + 2];
        out[o++] = B64_ALPHABET[v >> 18];
        out[o++] = B64_ALPHABET[(v >> 12) & 63];
        out[o++] = B64_ALPHABET[(v >> 6) & 63];
        out[o++] = B64_ALPHABET[v & 63];
    }
    if (i < n) {
        uint32_t v = (uint32_t)src[i] << 16 | (i + 1 < n ? (uint32_t)src[i + 1] << 8 : 0);
        out[o++] = B64_ALPHABET[v >> 18];
        out[o++] = B64_ALPHABET[(v >> 12) & 63];
        out[o++] = i + 1 < n ? B64_ALPHABET[(v >> 6) & 63] : '=';
        out[o++] = '=';
    }
    out[o] = 0;
    return o;
}
